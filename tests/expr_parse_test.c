/*
 * expr_parse_test.c: parsing and building elementwise expressions (kernels/expr.h).
 *
 * - parse: the grammar and its precedence (checked through the fully parenthesized
 *   formatting), every error with the byte offset it reports, and the limits (text length,
 *   nesting, tree depth, node count).
 * - build: the programmatic constructors the fusion pass uses, and their sticky errors.
 */
#define _POSIX_C_SOURCE 200809L

#include "tests/expr_util.h"

/* ------------------------------------------------------------------------------------------
 * Parsing
 * ---------------------------------------------------------------------------------------- */

/* Parses text over inputs a, b, c (and one named exp) and returns its formatting. */
static void parse_format(const char *text, int num_inputs, char *buf, size_t size) {
  recap__expr_program *p = NULL;
  recap__expr_parse_error err;
  recap_status st = recap__expr_parse(text, SIZE_MAX, kNames, num_inputs, NULL, &p, &err);
  if (st != RECAP_OK)
    fprintf(stderr, "\n  parse \"%s\": offset %zu: %s\n", text, err.offset, err.message);
  CU_ASSERT_EQUAL_FATAL(st, RECAP_OK);
  recap__expr_format(p, kNames, buf, size);
  recap__expr_program_destroy(p);
}

static void check_format(const char *text, const char *expected) {
  char got[512];
  parse_format(text, 3, got, sizeof got);
  if (strcmp(got, expected) != 0)
    fprintf(stderr, "\n  \"%s\" parsed as %s, expected %s\n", text, got, expected);
  CU_ASSERT_STRING_EQUAL(got, expected);
}

static void test_parse_precedence_and_associativity(void) {
  check_format("a + b * c", "(a + (b * c))");
  check_format("a * b + c", "((a * b) + c)");
  check_format("a - b - c", "((a - b) - c)");
  check_format("a / b / c", "((a / b) / c)");
  check_format("a - b * c / a", "(a - ((b * c) / a))");
  check_format("(a + b) * c", "((a + b) * c)");
  check_format("-a * b", "(neg(a) * b)");
  check_format("- -a", "neg(neg(a))");
  check_format("a * -b", "(a * neg(b))");
  check_format("a < b + 1", "(a < (b + 1))");
  check_format("a + 1 >= b * 2", "((a + 1) >= (b * 2))");
  check_format("(a < b) == (b < c)", "((a < b) == (b < c))");
}

static void test_parse_functions_numbers_and_names(void) {
  check_format("a * sigmoid(b) + 1.0", "((a * sigmoid(b)) + 1)");
  check_format("relu(gelu(gelu_tanh(silu(tanh(exp(neg(a)))))))",
               "relu(gelu(gelu_tanh(silu(tanh(exp(neg(a)))))))");
  check_format("scale(a, -0.5)", "scale(a, -0.5)");
  check_format("scale(a + b, 2)", "scale((a + b), 2)");
  check_format("cast(a, f16) + cast(b, bf16) + cast(c, f32)",
               "((cast(a, f16) + cast(b, bf16)) + cast(c, f32))");
  check_format("cast(a, float16) + cast(b, bfloat16) + cast(c, float32)",
               "((cast(a, f16) + cast(b, bf16)) + cast(c, f32))");
  check_format("select(a > 0, a, 0.5 * a)", "select((a > 0), a, (0.5 * a))");
  check_format("a != b", "(a != b)");
  check_format("a <= b", "(a <= b)");
  check_format("1e-3 + .5 + 2. + 1.5E2", "(((0.001 + 0.5) + 2) + 150)");
  check_format("-2", "-2"); /* a negative literal is one constant */
  check_format("\ta\n+\r\nb ", "(a + b)");
  /* Positional names, and an input named like a function used as a value. */
  check_format("in0 + in2", "(a + c)");
  char got[256];
  parse_format("exp(exp) + in3", 4, got, sizeof got);
  CU_ASSERT_STRING_EQUAL(got, "(exp(exp) + exp)");
}

typedef struct {
  const char *text;
  size_t offset;
  const char *mentions;
} bad_case;

static void check_error(const char *text, size_t len, size_t offset, const char *mentions) {
  recap__expr_program *p = NULL;
  recap__expr_parse_error err;
  recap_status st = recap__expr_parse(text, len, kNames, 3, NULL, &p, &err);
  if (st != RECAP_STATUS_SPEC_ERROR || err.offset != offset || !strstr(err.message, mentions))
    fprintf(stderr, "\n  \"%s\": %s at offset %zu: %s (expected offset %zu mentioning \"%s\")\n",
            text, recap_status_name(st), err.offset, err.message, offset, mentions);
  CU_ASSERT_EQUAL(st, RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_PTR_NULL(p);
  CU_ASSERT_EQUAL(err.offset, offset);
  CU_ASSERT_PTR_NOT_NULL(strstr(err.message, mentions));
  /* recap_last_error() carries the offset and message too. */
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "expression: offset"));
}

static void test_parse_errors_report_the_offset_of_the_bad_token(void) {
  static const bad_case cases[] = {
      {"", 0, "empty"},
      {"   ", 0, "empty"},
      {"a +", 3, "end of the expression"},
      {"a + * b", 4, "expected a value, got '*'"},
      {"a $ b", 2, "unexpected character '$'"},
      {"a + \x01", 4, "unexpected byte 0x01"},
      {"foo(a)", 0, "unknown function 'foo'"},
      {"a + q", 4, "unknown name 'q'"},
      {"a + in3", 4, "unknown name 'in3'"},
      {"a + in01", 4, "unknown name 'in01'"},
      {"(a + b", 6, "expected ')'"},
      {"a + b)", 5, "unmatched ')'"},
      {"a < b < c", 6, "do not chain"},
      {"a = b", 2, "'=' must be followed by '='"},
      {"a ! b", 2, "'!' must be followed by '='"},
      {"1e", 0, "exponent needs digits"},
      {"1e+", 0, "exponent needs digits"},
      {"1.2.3", 0, "malformed number"},
      {"2x", 0, "malformed number"},
      {"b + .", 4, "'.' must be part of a number"},
      {"1e39", 0, "out of the f32 range"},
      {"a * 1e999", 4, "out of the f32 range"},
      {"sigmoid(a, b)", 9, "too many arguments"},
      {"sigmoid()", 8, "expected a value"},
      {"sigmoid a", 0, "unknown name 'sigmoid'"},
      {"scale(a)", 7, "scale factor"},
      {"scale(a, b)", 9, "expected a number"},
      {"cast(a, i32)", 8, "f32, f16 or bf16"},
      {"cast(a, int64)", 8, "(or float32, float16, bfloat16)"},
      {"cast(a)", 6, "a dtype"},
      {"select(a, b)", 11, "three arguments"},
      {"select(a, b, c, a)", 14, "too many arguments"},
      {"a b", 2, "expected an operator or the end, got 'b'"},
      {"a /* x */", 3, "expected a value, got '*'"},
      {"a,", 1, "expected an operator"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    check_error(cases[i].text, SIZE_MAX, cases[i].offset, cases[i].mentions);
  /* A NUL inside the given length. */
  check_error("a\0b", 3, 1, "NUL byte");
}

static char *repeat_text(const char *prefix, const char *unit, int count, const char *suffix) {
  size_t n = strlen(prefix) + strlen(unit) * (size_t)count + strlen(suffix) + 1;
  char *s = malloc(n);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  strcpy(s, prefix);
  for (int i = 0; i < count; ++i) strcat(s, unit);
  strcat(s, suffix);
  return s;
}

static void test_parse_limits_are_enforced_with_positions(void) {
  /* Text length: RECAP_EXPR_MAX_TEXT bytes pass (as far as length goes), one more fails. */
  char *text = repeat_text("a", " ", RECAP_EXPR_MAX_TEXT - 1, "");
  char got[64];
  parse_format(text, 3, got, sizeof got);
  free(text);
  text = repeat_text("a", " ", RECAP_EXPR_MAX_TEXT, "");
  check_error(text, SIZE_MAX, RECAP_EXPR_MAX_TEXT, "longer than 4096 bytes");
  free(text);

  /* Nesting: 64 parentheses pass, the 65th fails at its own offset, long before the stack. */
  char *open = repeat_text("", "(", 64, "a");
  char *ok = repeat_text(open, ")", 64, "");
  parse_format(ok, 3, got, sizeof got);
  CU_ASSERT_STRING_EQUAL(got, "a");
  free(open);
  free(ok);
  text = repeat_text("", "(", 2000, "a");
  check_error(text, SIZE_MAX, 64, "nests deeper than 64");
  free(text);
  text = repeat_text("", "-", 2000, "a");
  check_error(text, SIZE_MAX, 64, "nests deeper than 64");
  free(text);
  text = repeat_text("", "sigmoid(", 100, "a");
  check_error(text, SIZE_MAX, 64 * 8, "nests deeper than 64");
  free(text);

  /* Tree depth grows along a chain too: a+a+...: the k-th '+' (offset 2k-1) makes depth k+1. */
  text = repeat_text("a", "+a", 100, "");
  check_error(text, SIZE_MAX, 2 * 64 - 1, "nests deeper than 64 levels");
  free(text);

  /* Node count, with a lowered limit: 6 inputs and 5 additions are 11 nodes. */
  recap__expr_limits limits = {.max_nodes = 10};
  recap__expr_program *p = NULL;
  recap__expr_parse_error err;
  CU_ASSERT_EQUAL(recap__expr_parse("(a+a)+(a+a)+(a+a)", SIZE_MAX, kNames, 3, &limits, &p, &err),
                  RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "more than 10 nodes"));
  CU_ASSERT_EQUAL(err.offset, 11); /* the operator that would make node 11 */
  /* At the default limit, 512 nodes pass and 513 fail. */
  text = repeat_text("a", "+a", 255, ""); /* 256 inputs + 255 additions = 511 nodes */
  limits = (recap__expr_limits){.max_depth = 0};
  CU_ASSERT_EQUAL(recap__expr_parse(text, SIZE_MAX, kNames, 3, &limits, &p, &err),
                  RECAP_STATUS_SPEC_ERROR); /* depth 256 > 64 first */
  free(text);
  text = repeat_text("(a+a)", "*(a+a)", 100, ""); /* 200 + 100 + 99 = 399 nodes, depth 101 */
  CU_ASSERT_EQUAL(recap__expr_parse(text, SIZE_MAX, kNames, 3, NULL, &p, &err),
                  RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "nests deeper"));
  free(text);
}

/* A balanced tree of 511 nodes (depth 9) is within the default node limit, 513 are not. */
static void test_parse_node_limit_default(void) {
  /* A balanced sum of 256 leaves: 256 + 255 = 511 nodes. Written as nested pairs. */
  char *level = strdup("a");
  CU_ASSERT_PTR_NOT_NULL_FATAL(level);
  for (int d = 0; d < 8; ++d) {
    size_t n = strlen(level) * 2 + 8;
    char *next = malloc(n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(next);
    snprintf(next, n, "(%s+%s)", level, level);
    free(level);
    level = next;
  }
  recap__expr_program *p = NULL;
  recap__expr_parse_error err;
  CHECK_OK(recap__expr_parse(level, SIZE_MAX, kNames, 3, NULL, &p, &err));
  int count = 0;
  recap__expr_nodes(p, &count);
  CU_ASSERT_EQUAL(count, 511);
  recap__expr_program_destroy(p);
  /* Two more nodes: "+a" makes 513, failing at its '+'. */
  size_t n = strlen(level) + 8;
  char *more = malloc(n);
  CU_ASSERT_PTR_NOT_NULL_FATAL(more);
  snprintf(more, n, "%s+a", level);
  CU_ASSERT_EQUAL(recap__expr_parse(more, SIZE_MAX, kNames, 3, NULL, &p, &err),
                  RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_PTR_NOT_NULL(strstr(err.message, "more than 512 nodes"));
  CU_ASSERT_EQUAL(err.offset, strlen(level));
  free(level);
  free(more);
}

/* ------------------------------------------------------------------------------------------
 * Building programmatically
 * ---------------------------------------------------------------------------------------- */

static void test_build_by_hand_matches_the_parsed_program(void) {
  recap__expr_program *p = NULL;
  CHECK_OK(recap__expr_program_create(2, &p));
  recap__expr_node a = recap__expr_input(p, 0), b = recap__expr_input(p, 1);
  recap__expr_node r = recap__expr_binary(
      p, RECAP_EXPR_ADD,
      recap__expr_binary(p, RECAP_EXPR_MUL, a, recap__expr_unary(p, RECAP_EXPR_SIGMOID, b)),
      recap__expr_const(p, 1.0));
  CHECK_OK(recap__expr_program_finish(p, r));
  char built[128], parsed[128];
  recap__expr_format(p, kNames, built, sizeof built);
  parse_format("a * sigmoid(b) + 1.0", 2, parsed, sizeof parsed);
  CU_ASSERT_STRING_EQUAL(built, parsed);
  CU_ASSERT_EQUAL(recap__expr_root(p), r);
  CU_ASSERT_EQUAL(recap__expr_num_inputs(p), 2);
  /* A finished program takes no more nodes. */
  CU_ASSERT_EQUAL(recap__expr_input(p, 0), RECAP_EXPR_NONE);
  CHECK_STATUS(recap__expr_program_finish(p, r), RECAP_STATUS_INVALID_ARGUMENT);
  recap__expr_program_destroy(p);
  recap__expr_program_destroy(NULL);
}

static void test_build_from_op_codes(void) {
  recap__expr_program *p = NULL;
  CHECK_OK(recap__expr_program_create(2, &p));
  recap__op_attrs attrs;
  memset(&attrs, 0, sizeof attrs);
  attrs.scale = 0.25;
  attrs.dtype = RECAP_DTYPE_BF16;
  recap__expr_node x = recap__expr_input(p, 0), y = recap__expr_input(p, 1);
  recap__expr_node s = recap__expr_from_unary_code(p, RECAP_UNARY_SCALE, x, &attrs);
  recap__expr_node c = recap__expr_from_unary_code(p, RECAP_UNARY_CAST, s, &attrs);
  recap__expr_node g = recap__expr_from_unary_code(p, RECAP_UNARY_GELU_TANH, y, NULL);
  recap__expr_node r = recap__expr_from_binary_code(p, RECAP_BINARY_DIV, c, g);
  CHECK_OK(recap__expr_program_finish(p, r));
  char text[128];
  recap__expr_format(p, NULL, text, sizeof text);
  CU_ASSERT_STRING_EQUAL(text, "(cast(scale(in0, 0.25), bf16) / gelu_tanh(in1))");
  recap__expr_program_destroy(p);
}

static void test_build_errors_are_sticky_and_reported_at_finish(void) {
  struct {
    const char *mentions;
    recap_status status;
  } expected[] = {
      {"input 2 does not exist", RECAP_STATUS_INVALID_ARGUMENT},
      {"not a finite f32 value", RECAP_STATUS_INVALID_ARGUMENT},
      {"not a unary function", RECAP_STATUS_INVALID_ARGUMENT},
      {"not a binary operator", RECAP_STATUS_INVALID_ARGUMENT},
      {"only f32, f16 and bf16", RECAP_STATUS_INVALID_ARGUMENT},
      {"is missing", RECAP_STATUS_INVALID_ARGUMENT},
  };
  for (int k = 0; k < 6; ++k) {
    recap__expr_program *p = NULL;
    CHECK_OK(recap__expr_program_create(2, &p));
    recap__expr_node a = recap__expr_input(p, 0), bad = RECAP_EXPR_NONE;
    switch (k) {
      case 0:
        bad = recap__expr_input(p, 2);
        break;
      case 1:
        bad = recap__expr_const(p, INFINITY);
        break;
      case 2:
        bad = recap__expr_unary(p, RECAP_EXPR_ADD, a);
        break;
      case 3:
        bad = recap__expr_binary(p, RECAP_EXPR_SIGMOID, a, a);
        break;
      case 4:
        bad = recap__expr_cast(p, a, RECAP_DTYPE_I32);
        break;
      case 5:
        bad = recap__expr_select(p, a, RECAP_EXPR_NONE, a);
        break;
    }
    CU_ASSERT_EQUAL(bad, RECAP_EXPR_NONE);
    /* Later constructors fed the failed node stay failed; finish reports the first error. */
    recap__expr_node r = recap__expr_binary(p, RECAP_EXPR_ADD, bad, a);
    CU_ASSERT_EQUAL(r, RECAP_EXPR_NONE);
    CHECK_STATUS(recap__expr_program_finish(p, r), expected[k].status);
    CHECK_ERROR_MENTIONS(expected[k].mentions);
    recap__expr_program_destroy(p);
  }
  recap__expr_program *p = NULL;
  CHECK_STATUS(recap__expr_program_create(0, &p), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap__expr_program_create(RECAP_OP_MAX_INPUTS + 1, &p),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap__expr_program_create(1, &p));
  CHECK_STATUS(recap__expr_program_finish(p, RECAP_EXPR_NONE), RECAP_STATUS_INVALID_ARGUMENT);
  recap__expr_program_destroy(p);
}

/* Built programs (the fusion pass's chains) nest as deep as their node count allows, past the
 * parser's 64 levels, and no further. */
static void test_build_enforces_the_depth_limit(void) {
  recap__expr_program *p = NULL;
  CHECK_OK(recap__expr_program_create(1, &p));
  recap__expr_node n = recap__expr_input(p, 0);
  for (int d = 1; d < RECAP_EXPR_MAX_BUILD_DEPTH; ++d) n = recap__expr_unary(p, RECAP_EXPR_RELU, n);
  CU_ASSERT_NOT_EQUAL(n, RECAP_EXPR_NONE); /* depth 512, 512 nodes */
  CU_ASSERT_EQUAL(recap__expr_unary(p, RECAP_EXPR_RELU, n), RECAP_EXPR_NONE);
  CHECK_STATUS(recap__expr_program_finish(p, n), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("512");
  recap__expr_program_destroy(p);
}

int main(void) {
  CU_pSuite parse = test_add_suite("expr/parse", NULL, NULL);
  CU_ADD_TEST(parse, test_parse_precedence_and_associativity);
  CU_ADD_TEST(parse, test_parse_functions_numbers_and_names);
  CU_ADD_TEST(parse, test_parse_errors_report_the_offset_of_the_bad_token);
  CU_ADD_TEST(parse, test_parse_limits_are_enforced_with_positions);
  CU_ADD_TEST(parse, test_parse_node_limit_default);

  CU_pSuite build = test_add_suite("expr/build", NULL, NULL);
  CU_ADD_TEST(build, test_build_by_hand_matches_the_parsed_program);
  CU_ADD_TEST(build, test_build_from_op_codes);
  CU_ADD_TEST(build, test_build_errors_are_sticky_and_reported_at_finish);
  CU_ADD_TEST(build, test_build_enforces_the_depth_limit);
  return test_run_all();
}
