/*
 * expr_test.c: elementwise expressions (kernels/expr.h) and their NVRTC compile cache
 * (runtime/nvrtc.h).
 *
 * - parse: the grammar and its precedence (checked through the fully parenthesized
 *   formatting), every error with the byte offset it reports, and the limits (text length,
 *   nesting, tree depth, node count).
 * - build: the programmatic constructors the fusion pass uses, and their sticky errors.
 * - host: evaluation against values computed here in double, on every element, for every
 *   function, broadcasting, strided views and f16/bf16/mixed dtypes.
 * - codegen: the CUDA source holds no text of the expression and is deterministic.
 * - nvrtc (needs libnvrtc, not a GPU; inactive without it): the generated source compiles for
 *   sm_90 and sm_80, the disk cache hits on a second compile, and a truncated or corrupt
 *   cache file is ignored and replaced, and a warm cache serves a new process without opening
 *   libnvrtc. The first test runs before anything loads NVRTC and checks the error when the
 *   library is missing.
 * - cuda (inactive without a GPU): every function and some compound expressions on random
 *   data against the host evaluation, every element, per-dtype tolerance, on the dense
 *   (vectorized), strided and broadcast paths, and again captured in a graph and replayed.
 */
#define _POSIX_C_SOURCE 200809L

#include "kernels/expr.h"

#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/half.h"
#include "kernels/op_codes.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/nvrtc.h"
#include "tests/test_util.h"

/* libnvrtc keeps a 72 KiB allocation of its own for the life of the process (its C++
 * runtime's), which LeakSanitizer reports at exit under --config=asan: not recap's leak. The
 * sanitizer calls this hook if it exists; other builds never do. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
  return "leak:libnvrtc.so\n";
}

/* ------------------------------------------------------------------------------------------
 * Parsing
 * ---------------------------------------------------------------------------------------- */

static const char *const kNames[] = {"a", "b", "c", "exp"};

/* Parses text over inputs a, b, c (and one named exp) and returns its formatting. */
static void parse_format(const char *text, int num_inputs, char *buf, size_t size) {
  recap_expr_program *p = NULL;
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
  recap_expr_program *p = NULL;
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
  recap_expr_program *p = NULL;
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
  recap_expr_program *p = NULL;
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
  recap_expr_program *p = NULL;
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
  recap_expr_program *p = NULL;
  CHECK_OK(recap__expr_program_create(2, &p));
  recap_op_attrs attrs;
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
    recap_expr_program *p = NULL;
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
  recap_expr_program *p = NULL;
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
  recap_expr_program *p = NULL;
  CHECK_OK(recap__expr_program_create(1, &p));
  recap__expr_node n = recap__expr_input(p, 0);
  for (int d = 1; d < RECAP_EXPR_MAX_BUILD_DEPTH; ++d) n = recap__expr_unary(p, RECAP_EXPR_RELU, n);
  CU_ASSERT_NOT_EQUAL(n, RECAP_EXPR_NONE); /* depth 512, 512 nodes */
  CU_ASSERT_EQUAL(recap__expr_unary(p, RECAP_EXPR_RELU, n), RECAP_EXPR_NONE);
  CHECK_STATUS(recap__expr_program_finish(p, n), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("512");
  recap__expr_program_destroy(p);
}

/* ------------------------------------------------------------------------------------------
 * Host evaluation
 * ---------------------------------------------------------------------------------------- */

static recap_tensor tensor(void *data, recap_dtype dtype, int ndim, const int64_t *shape,
                           const int64_t *strides) {
  recap_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = ndim;
  for (int d = 0; d < ndim; ++d) t.shape[d] = shape[d];
  if (strides)
    for (int d = 0; d < ndim; ++d) t.strides[d] = strides[d];
  else
    recap__tensor_set_contiguous(&t);
  return t;
}

static recap_expr_program *parse_ok(const char *text, int num_inputs) {
  recap_expr_program *p = NULL;
  recap__expr_parse_error err;
  recap_status st = recap__expr_parse(text, SIZE_MAX, kNames, num_inputs, NULL, &p, &err);
  if (st != RECAP_OK) fprintf(stderr, "\n  \"%s\": %s\n", text, err.message);
  CU_ASSERT_EQUAL_FATAL(st, RECAP_OK);
  return p;
}

static double ref_gelu(double x) {
  return 0.5 * x * (1 + erf(x / sqrt(2.0)));
}
static double ref_gelu_tanh(double x) {
  return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static double ref_sigmoid(double x) {
  return 1 / (1 + exp(-x));
}

/* |got - want| <= atol + rtol |want|. */
static bool close_to(double got, double want, double rtol, double atol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want; /* a division by a tiny value overflows f16/bf16 */
  return fabs(got - want) <= atol + rtol * fabs(want);
}

typedef double (*ref_fn)(double a, double b);
static double r_relu(double a, double b) {
  (void)b;
  return a > 0 ? a : 0;
}
static double r_gelu(double a, double b) {
  (void)b;
  return ref_gelu(a);
}
static double r_gelu_tanh(double a, double b) {
  (void)b;
  return ref_gelu_tanh(a);
}
static double r_silu(double a, double b) {
  (void)b;
  return a * ref_sigmoid(a);
}
static double r_sigmoid(double a, double b) {
  (void)b;
  return ref_sigmoid(a);
}
static double r_tanh(double a, double b) {
  (void)b;
  return tanh(a);
}
static double r_exp(double a, double b) {
  (void)b;
  return exp(a);
}
static double r_neg(double a, double b) {
  (void)b;
  return -a;
}
static double r_scale(double a, double b) {
  (void)b;
  return -0.375 * a;
}
static double r_add(double a, double b) {
  return a + b;
}
static double r_sub(double a, double b) {
  return a - b;
}
static double r_mul(double a, double b) {
  return a * b;
}
static double r_div(double a, double b) {
  return a / b;
}
static double r_lt(double a, double b) {
  return a < b;
}
static double r_le(double a, double b) {
  return a <= b;
}
static double r_gt(double a, double b) {
  return a > b;
}
static double r_ge(double a, double b) {
  return a >= b;
}
static double r_eq(double a, double b) {
  return a == b;
}
static double r_ne(double a, double b) {
  return a != b;
}
static double r_select(double a, double b) {
  return a > b ? a * 2 : b - 1;
}
static double r_compound(double a, double b) {
  return a * ref_sigmoid(b) + 1.0;
}
static double r_compound2(double a, double b) {
  double t = ref_gelu_tanh(a - b) / (1 + exp(-b * b));
  return t > 0.1 ? tanh(t) : -t * 3;
}

static const struct {
  const char *text;
  ref_fn ref;
} kFunctions[] = {
    {"relu(a)", r_relu},
    {"gelu(a)", r_gelu},
    {"gelu_tanh(a)", r_gelu_tanh},
    {"silu(a)", r_silu},
    {"sigmoid(a)", r_sigmoid},
    {"tanh(a)", r_tanh},
    {"exp(a)", r_exp},
    {"neg(a)", r_neg},
    {"scale(a, -0.375)", r_scale},
    {"a + b", r_add},
    {"a - b", r_sub},
    {"a * b", r_mul},
    {"a / b", r_div},
    {"a < b", r_lt},
    {"a <= b", r_le},
    {"a > b", r_gt},
    {"a >= b", r_ge},
    {"a == b", r_eq},
    {"a != b", r_ne},
    {"select(a > b, a * 2, b - 1)", r_select},
    {"a * sigmoid(b) + 1.0", r_compound},
    {"select(gelu_tanh(a - b) / (1 + exp(-b * b)) > 0.1, tanh(gelu_tanh(a - b) / (1 + exp(-b * "
     "b))), -(gelu_tanh(a - b) / (1 + exp(-b * b))) * 3)",
     r_compound2},
};
enum { NUM_FUNCTIONS = sizeof kFunctions / sizeof kFunctions[0] };

/* Inputs drawn from a few values that repeat, so comparisons see equal operands too. */
static void fill_random(float *v, int64_t n, test_rng *rng) {
  for (int64_t i = 0; i < n; ++i) {
    double x = test_rng_uniform(rng, -4, 4);
    if (test_rng_next(rng) % 4 == 0) x = (double)(int)x; /* small integers collide */
    v[i] = (float)x;
  }
}

static void test_host_every_function_matches_double_reference_on_every_element(void) {
  enum { N = 257 };
  float a[N], b[N], out[N];
  test_rng rng;
  test_rng_init(&rng);
  fill_random(a, N, &rng);
  fill_random(b, N, &rng);
  for (int i = 0; i < N; ++i)
    if (b[i] == 0) b[i] = 0.5f; /* no division by zero here; IEEE cases are tested below */
  const int64_t shape[] = {N};
  recap_tensor in[2] = {tensor(a, RECAP_DTYPE_F32, 1, shape, NULL),
                        tensor(b, RECAP_DTYPE_F32, 1, shape, NULL)};
  recap_tensor o = tensor(out, RECAP_DTYPE_F32, 1, shape, NULL);
  for (int f = 0; f < NUM_FUNCTIONS; ++f) {
    recap_expr_program *p = parse_ok(kFunctions[f].text, 2);
    CHECK_OK(recap__expr_eval_host(p, in, 2, &o));
    int bad = 0;
    for (int i = 0; i < N; ++i) {
      double want = kFunctions[f].ref(a[i], b[i]);
      /* Compound expressions round every node to f32: allow a few ulps more. */
      double rtol = f >= NUM_FUNCTIONS - 2 ? 1e-5 : 1e-6;
      if (!close_to(out[i], want, rtol, 1e-6) && bad++ < 3)
        fprintf(stderr, "\n  %s at a=%.9g b=%.9g: %.9g, expected %.9g\n", kFunctions[f].text, a[i],
                b[i], out[i], want);
    }
    CU_ASSERT_EQUAL(bad, 0);
    recap__expr_program_destroy(p);
  }
}

static void test_host_ieee_special_values(void) {
  float a[] = {1, -1, 0, NAN, INFINITY, 0}, b[] = {0, 0, 0, 1, INFINITY, NAN}, out[6];
  const int64_t shape[] = {6};
  recap_tensor in[2] = {tensor(a, RECAP_DTYPE_F32, 1, shape, NULL),
                        tensor(b, RECAP_DTYPE_F32, 1, shape, NULL)};
  recap_tensor o = tensor(out, RECAP_DTYPE_F32, 1, shape, NULL);
  recap_expr_program *p = parse_ok("a / b", 2);
  CHECK_OK(recap__expr_eval_host(p, in, 2, &o));
  CU_ASSERT(isinf(out[0]) && out[0] > 0);
  CU_ASSERT(isinf(out[1]) && out[1] < 0);
  CU_ASSERT(isnan(out[2]) && isnan(out[3]) && isnan(out[4]) && isnan(out[5]));
  recap__expr_program_destroy(p);
  /* NaN compares false except with !=, and selects as true (it is not 0). */
  p = parse_ok("select(a, 1, 2) + 10 * (a == a) + 100 * (a != a)", 2);
  CHECK_OK(recap__expr_eval_host(p, in, 2, &o));
  CU_ASSERT_EQUAL(out[2], 2 + 10);  /* a = 0 */
  CU_ASSERT_EQUAL(out[3], 1 + 100); /* a = NaN */
  CU_ASSERT_EQUAL(out[0], 1 + 10);
  recap__expr_program_destroy(p);
}

/* out[i,j,k] = a[i,j,k] * b[k] - c[j,0]: broadcasting with missing and size-1 dims. */
static void test_host_broadcasts_inputs_numpy_style(void) {
  enum { I = 2, J = 3, K = 5 };
  float a[I * J * K], b[K], c[J], out[I * J * K];
  test_rng rng;
  test_rng_init(&rng);
  fill_random(a, I * J * K, &rng);
  fill_random(b, K, &rng);
  fill_random(c, J, &rng);
  recap_tensor in[3] = {tensor(a, RECAP_DTYPE_F32, 3, (const int64_t[]){I, J, K}, NULL),
                        tensor(b, RECAP_DTYPE_F32, 1, (const int64_t[]){K}, NULL),
                        tensor(c, RECAP_DTYPE_F32, 2, (const int64_t[]){J, 1}, NULL)};
  recap_tensor o = tensor(out, RECAP_DTYPE_F32, 3, (const int64_t[]){I, J, K}, NULL);
  recap_expr_program *p = parse_ok("a * b - c", 3);
  CHECK_OK(recap__expr_eval_host(p, in, 3, &o));
  for (int i = 0; i < I; ++i)
    for (int j = 0; j < J; ++j)
      for (int k = 0; k < K; ++k) {
        int e = (i * J + j) * K + k;
        CU_ASSERT_EQUAL(out[e], (float)((float)((double)a[e] * b[k]) - c[j]));
      }
  /* Shapes that do not broadcast are refused. */
  recap_tensor bad = tensor(b, RECAP_DTYPE_F32, 1, (const int64_t[]){4}, NULL);
  recap_tensor in_bad[3] = {in[0], bad, in[2]};
  CHECK_STATUS(recap__expr_eval_host(p, in_bad, 3, &o), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("does not broadcast");
  CHECK_STATUS(recap__expr_eval_host(p, in, 2, &o), RECAP_STATUS_INVALID_ARGUMENT);
  recap_tensor ints = in[0];
  ints.dtype = RECAP_DTYPE_I32;
  recap_tensor in_int[3] = {ints, in[1], in[2]};
  CHECK_STATUS(recap__expr_eval_host(p, in_int, 3, &o), RECAP_STATUS_INVALID_ARGUMENT);
  recap__expr_program_destroy(p);
}

/* A transposed input view and a strided (every other element) output. */
static void test_host_reads_and_writes_strided_views(void) {
  enum { R = 3, C = 4 };
  float storage[R * C], out[2 * R * C];
  for (int i = 0; i < R * C; ++i) storage[i] = (float)(i + 1);
  for (int i = 0; i < 2 * R * C; ++i) out[i] = -99;
  /* in = storage viewed as [C, R] transposed: in[i][j] = storage[j * C + i]. */
  recap_tensor in =
      tensor(storage, RECAP_DTYPE_F32, 2, (const int64_t[]){C, R}, (const int64_t[]){1, C});
  recap_tensor o =
      tensor(out, RECAP_DTYPE_F32, 2, (const int64_t[]){C, R}, (const int64_t[]){2 * R, 2});
  recap_expr_program *p = parse_ok("a * 10", 1);
  CHECK_OK(recap__expr_eval_host(p, &in, 1, &o));
  for (int i = 0; i < C; ++i)
    for (int j = 0; j < R; ++j) {
      CU_ASSERT_EQUAL(out[i * 2 * R + 2 * j], storage[j * C + i] * 10);
      CU_ASSERT_EQUAL(out[i * 2 * R + 2 * j + 1], -99); /* untouched gaps */
    }
  recap__expr_program_destroy(p);
}

static void test_host_f16_bf16_and_mixed_dtypes(void) {
  enum { N = 300 };
  uint16_t ah[N], bb[N], oh[N];
  float af[N], bf[N], of[N];
  test_rng rng;
  test_rng_init(&rng);
  for (int i = 0; i < N; ++i) {
    ah[i] = recap__f32_to_f16((float)test_rng_uniform(&rng, -3, 3));
    bb[i] = recap__f32_to_bf16((float)test_rng_uniform(&rng, -3, 3));
    af[i] = recap__f16_to_f32(ah[i]);
    bf[i] = recap__bf16_to_f32(bb[i]);
  }
  const int64_t shape[] = {N};
  recap_tensor in[2] = {tensor(ah, RECAP_DTYPE_F16, 1, shape, NULL),
                        tensor(bb, RECAP_DTYPE_BF16, 1, shape, NULL)};
  CU_ASSERT_EQUAL(recap__expr_result_dtype(in, 2), RECAP_DTYPE_F32);
  CU_ASSERT_EQUAL(recap__expr_result_dtype(in, 1), RECAP_DTYPE_F16);
  recap_expr_program *p = parse_ok("a * sigmoid(b) + 1.0", 2);
  /* Mixed f16 x bf16 -> f32 output. */
  recap_tensor o = tensor(of, RECAP_DTYPE_F32, 1, shape, NULL);
  CHECK_OK(recap__expr_eval_host(p, in, 2, &o));
  for (int i = 0; i < N; ++i) CU_ASSERT_TRUE(close_to(of[i], r_compound(af[i], bf[i]), 1e-5, 1e-6));
  /* f16 output: rounded once from the f32 result (to within f16's precision). */
  o = tensor(oh, RECAP_DTYPE_F16, 1, shape, NULL);
  CHECK_OK(recap__expr_eval_host(p, in, 2, &o));
  for (int i = 0; i < N; ++i) {
    CU_ASSERT_EQUAL(oh[i], recap__f32_to_f16(of[i]));
    CU_ASSERT_TRUE(close_to(recap__f16_to_f32(oh[i]), r_compound(af[i], bf[i]), 1e-3, 1e-3));
  }
  /* bf16 output. */
  o = tensor(oh, RECAP_DTYPE_BF16, 1, shape, NULL);
  CHECK_OK(recap__expr_eval_host(p, in, 2, &o));
  for (int i = 0; i < N; ++i) CU_ASSERT_EQUAL(oh[i], recap__f32_to_bf16(of[i]));
  recap__expr_program_destroy(p);

  /* cast() rounds in the middle of an expression: a + 1/3 through bf16 and f16. */
  p = parse_ok("cast(a / 3, bf16) + cast(a / 3, f16) + cast(a / 3, f32)", 1);
  o = tensor(of, RECAP_DTYPE_F32, 1, shape, NULL);
  in[0] = tensor(af, RECAP_DTYPE_F32, 1, shape, NULL);
  CHECK_OK(recap__expr_eval_host(p, in, 1, &o));
  for (int i = 0; i < N; ++i) {
    float third = af[i] / 3;
    float want =
        recap__bf16_to_f32(recap__f32_to_bf16(third)) + recap__f16_to_f32(recap__f32_to_f16(third));
    want += third;
    CU_ASSERT_EQUAL(of[i], want);
  }
  recap__expr_program_destroy(p);
}

/* ------------------------------------------------------------------------------------------
 * Code generation
 * ---------------------------------------------------------------------------------------- */

static recap__expr_signature sig_of(int n, recap_dtype in, recap_dtype out) {
  recap__expr_signature s;
  memset(&s, 0, sizeof s);
  s.num_inputs = n;
  for (int i = 0; i < n; ++i) s.inputs[i] = in;
  s.output = out;
  return s;
}

static void test_codegen_contains_no_expression_text(void) {
  static const char *const names[] = {"gate_projection_zq", "upper_x7"};
  recap_expr_program *p = NULL;
  recap__expr_parse_error err;
  const char *text = "gate_projection_zq * sigmoid(upper_x7) + 1.2345678 - scale(upper_x7, 0.3125)";
  CHECK_OK(recap__expr_parse(text, SIZE_MAX, names, 2, NULL, &p, &err));
  recap__expr_signature sig = sig_of(2, RECAP_DTYPE_F16, RECAP_DTYPE_BF16);
  char *src = NULL;
  CHECK_OK(recap__expr_codegen_cuda(p, &sig, &src));
  CU_ASSERT_PTR_NULL(strstr(src, "gate_projection_zq"));
  CU_ASSERT_PTR_NULL(strstr(src, "upper_x7"));
  CU_ASSERT_PTR_NULL(strstr(src, "1.2345678"));
  CU_ASSERT_PTR_NULL(strstr(src, "0.3125"));
  /* Constants appear as their f32 bit patterns: 1.2345678f = 0x3f9e0651, 0.3125f = 0x3ea00000. */
  CU_ASSERT_PTR_NOT_NULL(strstr(src, "__uint_as_float(0x3f9e0651u)"));
  CU_ASSERT_PTR_NOT_NULL(strstr(src, "__uint_as_float(0x3ea00000u) * v"));
  CU_ASSERT_PTR_NOT_NULL(strstr(src, "extern \"C\" __global__"));
  CU_ASSERT_PTR_NOT_NULL(strstr(src, RECAP_EXPR_KERNEL_STRIDED "("));
  CU_ASSERT_PTR_NOT_NULL(strstr(src, RECAP_EXPR_KERNEL_DENSE "("));
  CU_ASSERT_PTR_NOT_NULL(strstr(src, "recap_sigmoid(v"));
  CU_ASSERT_PTR_NULL(strstr(src, "#include")); /* self-contained: no include path needed */
  free(src);
  recap__expr_program_destroy(p);
}

static void test_codegen_is_deterministic_and_depends_only_on_tree_and_dtypes(void) {
  static const char *const n1[] = {"x", "y"}, *const n2[] = {"first", "second"};
  recap_expr_program *p1 = NULL, *p2 = NULL, *p3 = NULL;
  recap__expr_parse_error err;
  CHECK_OK(recap__expr_parse("x*sigmoid(y)+1", SIZE_MAX, n1, 2, NULL, &p1, &err));
  CHECK_OK(
      recap__expr_parse("first * sigmoid( second ) + 1.000", SIZE_MAX, n2, 2, NULL, &p2, &err));
  CHECK_OK(recap__expr_parse("x*sigmoid(y)+2", SIZE_MAX, n1, 2, NULL, &p3, &err));
  recap__expr_signature s = sig_of(2, RECAP_DTYPE_F32, RECAP_DTYPE_F32);
  recap__expr_signature s16 = sig_of(2, RECAP_DTYPE_F16, RECAP_DTYPE_F16);
  char *a = NULL, *b = NULL, *again = NULL, *c = NULL, *d = NULL;
  CHECK_OK(recap__expr_codegen_cuda(p1, &s, &a));
  CHECK_OK(recap__expr_codegen_cuda(p1, &s, &again));
  CHECK_OK(recap__expr_codegen_cuda(p2, &s, &b));
  CHECK_OK(recap__expr_codegen_cuda(p3, &s, &c));
  CHECK_OK(recap__expr_codegen_cuda(p1, &s16, &d));
  CU_ASSERT_STRING_EQUAL(a, again);
  CU_ASSERT_STRING_EQUAL(a, b);
  CU_ASSERT_STRING_NOT_EQUAL(a, c);
  CU_ASSERT_STRING_NOT_EQUAL(a, d);
  /* A bad signature is refused. */
  char *none = NULL;
  recap__expr_signature wrong = sig_of(3, RECAP_DTYPE_F32, RECAP_DTYPE_F32);
  CHECK_STATUS(recap__expr_codegen_cuda(p1, &wrong, &none), RECAP_STATUS_INVALID_ARGUMENT);
  wrong = sig_of(2, RECAP_DTYPE_I64, RECAP_DTYPE_F32);
  CHECK_STATUS(recap__expr_codegen_cuda(p1, &wrong, &none), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NULL(none);
  free(a);
  free(b);
  free(again);
  free(c);
  free(d);
  recap__expr_program_destroy(p1);
  recap__expr_program_destroy(p2);
  recap__expr_program_destroy(p3);
}

/* The kernel parameter block's layout: the generated source asserts the same size. */
static void test_params_broadcast_strides(void) {
  float dummy = 0;
  recap_tensor in[2] = {tensor(&dummy, RECAP_DTYPE_F32, 3, (const int64_t[]){2, 3, 4}, NULL),
                        tensor(&dummy, RECAP_DTYPE_F32, 2, (const int64_t[]){3, 1}, NULL)};
  recap_tensor out = tensor(&dummy, RECAP_DTYPE_F32, 3, (const int64_t[]){2, 3, 4}, NULL);
  recap__expr_params params;
  CHECK_OK(recap__expr_params_of(in, 2, &out, &params));
  CU_ASSERT_EQUAL(params.n, 24);
  const int64_t shape[4] = {1, 2, 3, 4}, s0[4] = {0, 12, 4, 1}, s1[4] = {0, 0, 1, 0};
  for (int d = 0; d < 4; ++d) {
    CU_ASSERT_EQUAL(params.shape[d], shape[d]);
    CU_ASSERT_EQUAL(params.in_strides[0][d], s0[d]);
    CU_ASSERT_EQUAL(params.in_strides[1][d], s1[d]);
    CU_ASSERT_EQUAL(params.out_strides[d], s0[d]);
  }
  CU_ASSERT_EQUAL(sizeof(recap__expr_params), 8 * 8 + 8 + 4 * 8 + 8 * 4 * 8 + 4 * 8 + 8);
}

/* ------------------------------------------------------------------------------------------
 * NVRTC and the disk cache (host code; needs libnvrtc, not a GPU)
 * ---------------------------------------------------------------------------------------- */

static char cache_dir[512];

static bool nvrtc_present(void) {
  static const char *const paths[] = {"libnvrtc.so.13", "libnvrtc.so",
                                      "/usr/local/cuda/lib64/libnvrtc.so.13"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; ++i) {
    void *h = dlopen(paths[i], RTLD_LAZY | RTLD_LOCAL);
    if (h) {
      dlclose(h);
      return true;
    }
  }
  return false;
}

static int nvrtc_suite_init(void) {
  const char *tmp = getenv("TEST_TMPDIR");
  snprintf(cache_dir, sizeof cache_dir, "%s/recap_expr_cache_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(cache_dir)) return 1;
  return setenv("RECAP_CACHE_DIR", cache_dir, 1);
}

/* Runs first in its suite, before anything has loaded NVRTC in this process. */
static void test_missing_nvrtc_is_not_supported_naming_libnvrtc(void) {
  CU_ASSERT_EQUAL_FATAL(setenv("RECAP_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so.13", 1), 0);
  CHECK_STATUS(recap__nvrtc_version(NULL, NULL), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("libnvrtc");
  CHECK_ERROR_MENTIONS("/nonexistent/libnvrtc.so.13");
  char *cubin = NULL;
  size_t size = 0;
  CHECK_STATUS(
      recap__nvrtc_compile_cached("__global__ void k() {}", "k.cu", 90, &cubin, &size, NULL),
      RECAP_STATUS_NOT_SUPPORTED);
  CU_ASSERT_PTR_NULL(cubin);
  /* A failed load is not remembered: with the library back, it loads. */
  unsetenv("RECAP_NVRTC_LIBRARY");
  int major = 0;
  CHECK_OK(recap__nvrtc_version(&major, NULL));
  CU_ASSERT_TRUE(major >= 12);
}

static const char kEveryKind[] =
    "select(a < b, relu(a) + gelu(b) * gelu_tanh(c), silu(a) - sigmoid(b) / tanh(c)) + "
    "exp(neg(a)) + scale(b, 0.5) + cast(c, f16) + cast(a, bf16) + (a <= b) + (a > c) + "
    "(b >= c) + (a == b) + (a != c) - 2.5";

/* The CUDA source of kEveryKind (every node kind) over mixed dtypes; NULL on failure. Plain
 * code without CUnit asserts, for the probe process too. */
static char *every_kind_source_or_null(void) {
  recap_expr_program *p = NULL;
  recap__expr_parse_error err;
  if (recap__expr_parse(kEveryKind, SIZE_MAX, kNames, 3, NULL, &p, &err) != RECAP_OK) return NULL;
  recap__expr_signature sig = sig_of(3, RECAP_DTYPE_F32, RECAP_DTYPE_BF16);
  sig.inputs[1] = RECAP_DTYPE_F16;
  sig.inputs[2] = RECAP_DTYPE_BF16;
  char *src = NULL;
  if (recap__expr_codegen_cuda(p, &sig, &src) != RECAP_OK) src = NULL;
  recap__expr_program_destroy(p);
  return src;
}

static char *every_kind_source(void) {
  char *src = every_kind_source_or_null();
  CU_ASSERT_PTR_NOT_NULL_FATAL(src);
  return src;
}

/* `expr_test --cache-hit-probe DIR`: a fresh process compiles kEveryKind for sm_90 through the
 * cache in DIR, which the parent filled. Exit 0 when that was a hit that never opened libnvrtc,
 * printing how long it took. */
static int cache_hit_probe(const char *dir) {
  setenv("RECAP_CACHE_DIR", dir, 1);
  char *src = every_kind_source_or_null();
  if (!src) return 2;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  char *cubin = NULL;
  size_t size = 0;
  bool hit = false;
  recap_status st = recap__nvrtc_compile_cached(src, "probe.cu", 90, &cubin, &size, &hit);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  recap__nvrtc_stats stats;
  recap__nvrtc_stats_get(&stats);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  printf("cache-hit-probe: %s, hit %d, libnvrtc opened %llu times, %.3f ms\n",
         recap_status_name(st), hit, (unsigned long long)stats.loads, ms);
  free(cubin);
  free(src);
  return st == RECAP_OK && hit && stats.loads == 0 ? 0 : 1;
}

/* A warm cache serves a new process without opening libnvrtc (which costs tens of ms). */
static void test_cache_hit_in_a_new_process_does_not_open_nvrtc(void) {
  char *src = every_kind_source();
  char *cubin = NULL;
  size_t size = 0;
  CHECK_OK(recap__nvrtc_compile_cached(src, "fill.cu", 90, &cubin, &size, NULL));
  free(cubin);
  free(src);
  pid_t pid = fork();
  CU_ASSERT_FATAL(pid >= 0);
  if (pid == 0) {
    char *const argv[] = {(char *)"expr_test", (char *)"--cache-hit-probe", cache_dir, NULL};
    execv("/proc/self/exe", argv);
    _exit(3);
  }
  int status = 0;
  CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
  CU_ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_generated_source_compiles_for_sm90_and_sm80(void) {
  char *src = every_kind_source();
  static const int archs[] = {90, 80};
  for (int k = 0; k < 2; ++k) {
    char *cubin = NULL;
    size_t size = 0;
    CHECK_OK(recap__nvrtc_compile(src, "every_kind.cu", archs[k], &cubin, &size));
    CU_ASSERT_TRUE(size > 4 && memcmp(cubin,
                                      "\x7f"
                                      "ELF",
                                      4) == 0);
    free(cubin);
  }
  free(src);
  /* Source that does not compile reports NVRTC's log. */
  char *cubin = NULL;
  size_t size = 0;
  CHECK_STATUS(recap__nvrtc_compile("this is not C++", "bad.cu", 90, &cubin, &size),
               RECAP_STATUS_LIBRARY_ERROR);
  CHECK_ERROR_MENTIONS("bad.cu");
  char options[128];
  recap__nvrtc_options(90, options, sizeof options);
  CU_ASSERT_STRING_EQUAL(
      options, "--gpu-architecture=sm_90 --device-as-default-execution-space --fmad=false");
}

static void read_file(const char *path, char **data, size_t *size) {
  FILE *f = fopen(path, "rb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  *data = malloc((size_t)n);
  CU_ASSERT_PTR_NOT_NULL_FATAL(*data);
  CU_ASSERT_EQUAL((long)fread(*data, 1, (size_t)n, f), n);
  fclose(f);
  *size = (size_t)n;
}

static void write_file(const char *path, const char *data, size_t size) {
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(data, 1, size, f), size);
  fclose(f);
}

/* Compiles through the cache and checks hit/miss and the counters' deltas. */
static void compile_expecting(const char *src, int arch, bool want_hit, int want_corrupt,
                              const char *want_cubin, size_t want_size) {
  recap__nvrtc_stats before, after;
  recap__nvrtc_stats_get(&before);
  char *cubin = NULL;
  size_t size = 0;
  bool hit = !want_hit;
  CHECK_OK(recap__nvrtc_compile_cached(src, "cached.cu", arch, &cubin, &size, &hit));
  recap__nvrtc_stats_get(&after);
  CU_ASSERT_EQUAL(hit, want_hit);
  CU_ASSERT_EQUAL(after.hits - before.hits, want_hit ? 1u : 0u);
  CU_ASSERT_EQUAL(after.compiles - before.compiles, want_hit ? 0u : 1u);
  CU_ASSERT_EQUAL(after.corrupt - before.corrupt, (uint64_t)want_corrupt);
  if (want_cubin) {
    CU_ASSERT_EQUAL(size, want_size);
    CU_ASSERT_TRUE(size == want_size && memcmp(cubin, want_cubin, size) == 0);
  }
  free(cubin);
}

static void test_second_compile_is_a_cache_hit(void) {
  char *src = every_kind_source();
  char dir[512];
  CU_ASSERT_TRUE(recap__nvrtc_cache_dir(dir, sizeof dir));
  CU_ASSERT_STRING_EQUAL(dir, cache_dir);
  char path[1024];
  CU_ASSERT_TRUE_FATAL(recap__nvrtc_cache_path(src, 90, path, sizeof path));
  CU_ASSERT_EQUAL(strncmp(path, cache_dir, strlen(cache_dir)), 0);
  unlink(path);
  compile_expecting(src, 90, false, 0, NULL, 0);
  struct stat sb;
  CU_ASSERT_EQUAL(stat(path, &sb), 0);
  CU_ASSERT_EQUAL(sb.st_mode & 0777, 0600);
  char *first = NULL;
  size_t first_size = 0;
  CHECK_OK(recap__nvrtc_compile(src, "x.cu", 90, &first, &first_size));
  compile_expecting(src, 90, true, 0, first, first_size);
  /* Another architecture is another key. */
  char path80[1024];
  CU_ASSERT_TRUE(recap__nvrtc_cache_path(src, 80, path80, sizeof path80));
  CU_ASSERT_STRING_NOT_EQUAL(path, path80);
  compile_expecting(src, 80, false, 0, NULL, 0);
  compile_expecting(src, 80, true, 0, NULL, 0);
  /* No temporary files are left behind. */
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", cache_dir);
  CU_ASSERT_NOT_EQUAL(system(cmd), 0);
  free(first);
  free(src);
}

static void test_corrupt_or_truncated_cache_file_is_recompiled(void) {
  char *src = every_kind_source();
  char path[1024];
  CU_ASSERT_TRUE_FATAL(recap__nvrtc_cache_path(src, 90, path, sizeof path));
  unlink(path);
  compile_expecting(src, 90, false, 0, NULL, 0);
  char *good = NULL;
  size_t good_size = 0;
  read_file(path, &good, &good_size);
  char *cubin = NULL;
  size_t cubin_size = 0;
  CHECK_OK(recap__nvrtc_compile(src, "x.cu", 90, &cubin, &cubin_size));

  /* Truncated to half, to its header only, and to nothing. */
  const size_t cuts[] = {good_size / 2, 32, 0};
  for (int k = 0; k < 3; ++k) {
    write_file(path, good, cuts[k]);
    compile_expecting(src, 90, false, 1, cubin, cubin_size);
    compile_expecting(src, 90, true, 0, cubin, cubin_size); /* rewritten whole */
  }
  /* One flipped byte in the cubin, and in the key. */
  good[good_size - 10] ^= 0x5a;
  write_file(path, good, good_size);
  compile_expecting(src, 90, false, 1, cubin, cubin_size);
  good[good_size - 10] ^= 0x5a;
  good[40] ^= 0x01;
  write_file(path, good, good_size);
  compile_expecting(src, 90, false, 1, cubin, cubin_size);
  /* Not a cache file at all. */
  write_file(path, "garbage garbage garbage garbage garbage", 39);
  compile_expecting(src, 90, false, 1, cubin, cubin_size);
  compile_expecting(src, 90, true, 0, cubin, cubin_size);
  free(good);
  free(cubin);
  free(src);
}

static void test_unwritable_cache_still_compiles(void) {
  char *src = every_kind_source();
  char blocker[600];
  snprintf(blocker, sizeof blocker, "%s/file_not_dir", cache_dir);
  write_file(blocker, "x", 1);
  char dir[700];
  snprintf(dir, sizeof dir, "%s/sub", blocker); /* a folder under a regular file */
  setenv("RECAP_CACHE_DIR", dir, 1);
  recap__nvrtc_stats before, after;
  recap__nvrtc_stats_get(&before);
  char *cubin = NULL;
  size_t size = 0;
  bool hit = true;
  CHECK_OK(recap__nvrtc_compile_cached(src, "x.cu", 90, &cubin, &size, &hit));
  CU_ASSERT_FALSE(hit);
  recap__nvrtc_stats_get(&after);
  CU_ASSERT_EQUAL(after.write_fails - before.write_fails, 1u);
  setenv("RECAP_CACHE_DIR", cache_dir, 1);
  free(cubin);
  free(src);
}

/* ------------------------------------------------------------------------------------------
 * CUDA: generated kernels against the host evaluation
 * ---------------------------------------------------------------------------------------- */

static const recap_device kCudaDev = {RECAP_BACKEND_CUDA, 0};
static recap_stream *cuda_stream;
static const recap__backend *cuda;

static int cuda_suite_init(void) {
  if (nvrtc_suite_init() != 0) return 1;
  cuda = recap__backend_get(RECAP_BACKEND_CUDA);
  if (!cuda) return 1;
  return recap_stream_create(kCudaDev, 0, RECAP_STREAM_NON_BLOCKING, &cuda_stream) != RECAP_OK;
}

static int cuda_suite_cleanup(void) {
  recap_stream_destroy(cuda_stream);
  cuda_stream = NULL;
  return 0;
}

static double rtol_of(recap_dtype d) {
  return d == RECAP_DTYPE_F32 ? 1e-5 : d == RECAP_DTYPE_F16 ? 1e-3 : 8e-3;
}

/* One operand: host and device copies of a (possibly strided, offset) view. */
typedef struct {
  recap_tensor host, dev;
  size_t bytes;
} operand;

static operand make_operand(recap_dtype dtype, int ndim, const int64_t *shape,
                            const int64_t *strides, int64_t offset, test_rng *rng) {
  operand o;
  memset(&o, 0, sizeof o);
  recap_tensor view = tensor(NULL, dtype, ndim, shape, strides);
  int64_t extent = 1;
  for (int d = 0; d < ndim; ++d) extent += (shape[d] - 1) * view.strides[d];
  const size_t esize = recap_dtype_size(dtype);
  o.bytes = (size_t)(offset + extent) * esize;
  char *host = malloc(o.bytes);
  CU_ASSERT_PTR_NOT_NULL_FATAL(host);
  for (int64_t i = 0; i < offset + extent; ++i) {
    float v = (float)test_rng_uniform(rng, -3, 3);
    if (test_rng_next(rng) % 5 == 0) v = (float)(int)v;
    recap__store_f32(host, dtype, i, v);
  }
  void *dev = NULL;
  CHECK_OK(cuda->mem_alloc(0, o.bytes, &dev));
  CHECK_OK(cuda->memcpy_async(dev, host, o.bytes, cuda_stream));
  o.host = view;
  o.host.data = host + offset * esize;
  o.dev = view;
  o.dev.data = (char *)dev + offset * esize;
  return o;
}

typedef struct {
  const char *text;
  int num_inputs;
  recap_dtype in[3], out;
  int ndim;
  int64_t out_shape[4];
  /* Per input: shape (right-aligned to out), transposed last two dims, element offset. */
  int in_ndim[3];
  int64_t in_shape[3][4];
  bool transposed[3];
  int64_t offset[3];
} cuda_case;

/* Runs `c` on CUDA (eager, then captured and replayed) and compares with the host. */
static void run_cuda_case(const cuda_case *c) {
  test_rng rng;
  test_rng_init(&rng);
  operand ops[3];
  void *allocs[3];
  recap_tensor hin[3], din[3];
  for (int i = 0; i < c->num_inputs; ++i) {
    int64_t strides[4], shape[4];
    const int nd = c->in_ndim[i];
    for (int d = 0; d < nd; ++d) shape[d] = c->in_shape[i][d];
    const int64_t *sp = NULL;
    if (c->transposed[i] && nd >= 2) {
      /* A [.., m, n] view of storage laid out as [.., n, m]. */
      int64_t s = 1;
      strides[nd - 2] = 1;
      strides[nd - 1] = shape[nd - 2];
      s = shape[nd - 2] * shape[nd - 1];
      for (int d = nd - 3; d >= 0; --d) {
        strides[d] = s;
        s *= shape[d];
      }
      sp = strides;
    }
    ops[i] = make_operand(c->in[i], nd, shape, sp, c->offset[i], &rng);
    allocs[i] = (char *)ops[i].dev.data - c->offset[i] * (int64_t)recap_dtype_size(c->in[i]);
    hin[i] = ops[i].host;
    din[i] = ops[i].dev;
  }
  recap_tensor hout = tensor(NULL, c->out, c->ndim, c->out_shape, NULL);
  const int64_t n = recap__tensor_numel(&hout);
  const size_t out_bytes = (size_t)n * recap_dtype_size(c->out);
  hout.data = malloc(out_bytes);
  char *got = malloc(out_bytes);
  void *dout = NULL;
  CHECK_OK(cuda->mem_alloc(0, out_bytes, &dout));
  recap_tensor dt = hout;
  dt.data = dout;

  recap_expr_program *p = parse_ok(c->text, c->num_inputs);
  CHECK_OK(recap__expr_eval_host(p, hin, c->num_inputs, &hout));
  recap__expr_signature sig;
  recap__expr_signature_of(din, c->num_inputs, &dt, &sig);
  CHECK_OK(recap__expr_prepare_cuda(p, &sig, -1, "test"));

  for (int pass = 0; pass < 2; ++pass) {
    CHECK_OK(cuda->memset_async(dout, 0xFF, out_bytes, cuda_stream)); /* NaN poison */
    if (pass == 0) {
      CHECK_OK(recap__expr_launch_cuda(p, din, c->num_inputs, &dt, "test", cuda_stream->native));
    } else {
      recap__graph *graph = NULL;
      recap__graph_exec *exec = NULL;
      CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_GLOBAL));
      recap_status launched =
          recap__expr_launch_cuda(p, din, c->num_inputs, &dt, "test", cuda_stream->native);
      CHECK_OK(recap__capture_end(cuda_stream, &graph));
      CHECK_OK(launched);
      CHECK_OK(cuda->graph_instantiate(graph, &exec));
      CHECK_OK(cuda->memset_async(dout, 0xFF, out_bytes, cuda_stream));
      CHECK_OK(cuda->graph_launch(exec, cuda_stream));
      CHECK_OK(cuda->graph_launch(exec, cuda_stream));
      cuda->graph_exec_destroy(exec);
      cuda->graph_destroy(graph);
    }
    CHECK_OK(cuda->memcpy_async(got, dout, out_bytes, cuda_stream));
    CHECK_OK(recap_stream_synchronize(cuda_stream));
    int bad = 0;
    for (int64_t e = 0; e < n; ++e) {
      double want = recap__load_f32(hout.data, c->out, e);
      double have = recap__load_f32(got, c->out, e);
      /* Transcendentals differ by a few f32 ulps between CUDA and the host; a comparison
       * at a point where they differ flips, which is why comparison inputs repeat exactly. */
      if (!close_to(have, want, rtol_of(c->out), 1e-5) && bad++ < 4)
        fprintf(stderr, "\n  %s (%s, out %s): element %lld: cuda %.9g, host %.9g\n", c->text,
                pass ? "graph" : "eager", recap_dtype_name(c->out), (long long)e, have, want);
    }
    CU_ASSERT_EQUAL(bad, 0);
  }
  recap__expr_program_destroy(p);
  cuda->mem_free(0, dout);
  for (int i = 0; i < c->num_inputs; ++i) {
    cuda->mem_free(0, allocs[i]);
    free((char *)ops[i].host.data - c->offset[i] * (int64_t)recap_dtype_size(c->in[i]));
  }
  free(hout.data);
  free(got);
}

static cuda_case same_shape_case(const char *text, int num_inputs, recap_dtype dtype, int64_t n) {
  cuda_case c;
  memset(&c, 0, sizeof c);
  c.text = text;
  c.num_inputs = num_inputs;
  c.out = dtype;
  c.ndim = 2;
  c.out_shape[0] = 3;
  c.out_shape[1] = n;
  for (int i = 0; i < num_inputs; ++i) {
    c.in[i] = dtype;
    c.in_ndim[i] = 2;
    c.in_shape[i][0] = 3;
    c.in_shape[i][1] = n;
  }
  return c;
}

static const recap_dtype kFloatTypes[] = {RECAP_DTYPE_F32, RECAP_DTYPE_F16, RECAP_DTYPE_BF16};

static void test_cuda_every_function_matches_host_dense_and_tail(void) {
  for (int t = 0; t < 3; ++t)
    for (int f = 0; f < NUM_FUNCTIONS; ++f) {
      /* 3 x 1001: not a multiple of the vector width, so the tail runs too. */
      cuda_case c = same_shape_case(kFunctions[f].text, 2, kFloatTypes[t], 1001);
      run_cuda_case(&c);
    }
}

static void test_cuda_strided_broadcast_and_offset_views_match_host(void) {
  for (int t = 0; t < 3; ++t) {
    cuda_case c;
    memset(&c, 0, sizeof c);
    c.text = "select(a > b, a * sigmoid(b), gelu(c) - b) + 1.0";
    c.num_inputs = 3;
    c.in[0] = c.in[1] = c.in[2] = c.out = kFloatTypes[t];
    c.ndim = 4;
    const int64_t shape[4] = {2, 3, 17, 33};
    memcpy(c.out_shape, shape, sizeof shape);
    c.in_ndim[0] = 4;
    memcpy(c.in_shape[0], shape, sizeof shape);
    c.transposed[0] = true; /* a strided view */
    c.in_ndim[1] = 1;       /* b broadcasts along everything but the last dim */
    c.in_shape[1][0] = 33;
    c.in_ndim[2] = 3; /* c: [3, 17, 1] */
    c.in_shape[2][0] = 3;
    c.in_shape[2][1] = 17;
    c.in_shape[2][2] = 1;
    c.offset[2] = 1; /* misaligned base pointer */
    run_cuda_case(&c);
  }
  /* Dense shapes but a misaligned pointer: the strided kernel, same results. */
  cuda_case c = same_shape_case("a * b - tanh(a)", 2, RECAP_DTYPE_F16, 515);
  c.offset[1] = 1;
  run_cuda_case(&c);
}

static void test_cuda_mixed_dtypes_match_host(void) {
  cuda_case c = same_shape_case("a * sigmoid(b) + cast(c, bf16) / 3", 3, RECAP_DTYPE_F32, 4099);
  c.in[1] = RECAP_DTYPE_F16;
  c.in[2] = RECAP_DTYPE_BF16;
  static const recap_dtype outs[] = {RECAP_DTYPE_F32, RECAP_DTYPE_F16, RECAP_DTYPE_BF16};
  for (int o = 0; o < 3; ++o) {
    c.out = outs[o];
    run_cuda_case(&c);
  }
}

/* A kernel not compiled yet cannot be compiled inside a capture: the launch fails, naming the
 * op, and the capture ends cleanly. */
static void test_cuda_compile_during_capture_is_refused(void) {
  recap_expr_program *p = parse_ok("a * 3 + 0.0625", 1);
  float *d = NULL;
  CHECK_OK(cuda->mem_alloc(0, 64 * sizeof(float), (void **)&d));
  recap_tensor t = tensor(d, RECAP_DTYPE_F32, 1, (const int64_t[]){64}, NULL);
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_GLOBAL));
  recap_status st = recap__expr_launch_cuda(p, &t, 1, &t, "my_expr_op", cuda_stream->native);
  CU_ASSERT_EQUAL(st, RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CHECK_ERROR_MENTIONS("my_expr_op");
  recap_status end = recap__capture_end(cuda_stream, &graph);
  if (end == RECAP_OK) cuda->graph_destroy(graph);
  /* Outside the capture the launch compiles on demand. */
  CHECK_OK(recap__expr_launch_cuda(p, &t, 1, &t, "my_expr_op", cuda_stream->native));
  CHECK_OK(recap_stream_synchronize(cuda_stream));
  cuda->mem_free(0, d);
  recap__expr_program_destroy(p);
}

/* ------------------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--cache-hit-probe") == 0) return cache_hit_probe(argv[2]);
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

  CU_pSuite host = test_add_suite("expr/host", NULL, NULL);
  CU_ADD_TEST(host, test_host_every_function_matches_double_reference_on_every_element);
  CU_ADD_TEST(host, test_host_ieee_special_values);
  CU_ADD_TEST(host, test_host_broadcasts_inputs_numpy_style);
  CU_ADD_TEST(host, test_host_reads_and_writes_strided_views);
  CU_ADD_TEST(host, test_host_f16_bf16_and_mixed_dtypes);

  CU_pSuite gen = test_add_suite("expr/codegen", NULL, NULL);
  CU_ADD_TEST(gen, test_codegen_contains_no_expression_text);
  CU_ADD_TEST(gen, test_codegen_is_deterministic_and_depends_only_on_tree_and_dtypes);
  CU_ADD_TEST(gen, test_params_broadcast_strides);

  CU_pSuite nvrtc = test_add_suite("expr/nvrtc", nvrtc_suite_init, NULL);
  CU_ADD_TEST(nvrtc, test_missing_nvrtc_is_not_supported_naming_libnvrtc);
  CU_ADD_TEST(nvrtc, test_generated_source_compiles_for_sm90_and_sm80);
  CU_ADD_TEST(nvrtc, test_second_compile_is_a_cache_hit);
  CU_ADD_TEST(nvrtc, test_corrupt_or_truncated_cache_file_is_recompiled);
  CU_ADD_TEST(nvrtc, test_unwritable_cache_still_compiles);
  CU_ADD_TEST(nvrtc, test_cache_hit_in_a_new_process_does_not_open_nvrtc);
  if (!nvrtc_present()) {
    printf("expr/nvrtc: libnvrtc not found: suite INACTIVE (not passed)\n");
    CU_set_suite_active(nvrtc, CU_FALSE);
    CU_set_fail_on_inactive(CU_FALSE);
  }

  CU_pSuite gpu = test_add_cuda_suite("expr/cuda", cuda_suite_init, cuda_suite_cleanup);
  CU_ADD_TEST(gpu, test_cuda_every_function_matches_host_dense_and_tail);
  CU_ADD_TEST(gpu, test_cuda_strided_broadcast_and_offset_views_match_host);
  CU_ADD_TEST(gpu, test_cuda_mixed_dtypes_match_host);
  CU_ADD_TEST(gpu, test_cuda_compile_during_capture_is_refused);
  return test_run_all();
}
