/*
 * expr_parse.c: expression text -> program (kernels/expr.h has the grammar).
 *
 * A recursive-descent parser over a one-token lookahead lexer. The text is untrusted (it comes
 * from a spec), so every path is bounded: the text length is checked first, the recursion
 * depth is counted on the way down (so deep nesting fails before it can exhaust the stack),
 * and the node count and tree depth are the program's own limits. Every error carries the byte
 * offset of the token it is about, which the spec loader turns into a line:col.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/expr_impl.h"
#include "runtime/error.h"

typedef enum {
  TOK_END,
  TOK_NUMBER,
  TOK_NAME,
  TOK_LPAREN,
  TOK_RPAREN,
  TOK_COMMA,
  TOK_PLUS,
  TOK_MINUS,
  TOK_STAR,
  TOK_SLASH,
  TOK_LT,
  TOK_LE,
  TOK_GT,
  TOK_GE,
  TOK_EQ,
  TOK_NE,
  TOK_ERROR, /* the lexer already recorded the error */
} tok_kind;

typedef struct {
  tok_kind kind;
  size_t start, len;
  double number;
} token;

typedef struct {
  const char *text;
  size_t len, pos;
  token tok; /* the lookahead */
  const char *const *names;
  int num_inputs;
  int depth, max_depth;
  recap__expr_program *program;
  recap__expr_parse_error *err;
  bool failed;
} parser;

static void error_at(parser *P, size_t offset, const char *fmt, ...) RECAP__PRINTF(3, 4);
static void error_at(parser *P, size_t offset, const char *fmt, ...) {
  if (P->failed) return;
  P->failed = true;
  P->err->offset = offset;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(P->err->message, sizeof P->err->message, fmt, ap);
  va_end(ap);
}

static bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

/* Scans a decimal number at P->pos: digits [. digits] [(e|E) [+-] digits], or . digits... */
static void lex_number(parser *P, token *t) {
  enum { MAX_NUMBER = 64 };
  const char *s = P->text;
  size_t i = P->pos, n = P->len;
  bool digits = false;
  while (i < n && is_digit(s[i])) ++i, digits = true;
  if (i < n && s[i] == '.') {
    ++i;
    while (i < n && is_digit(s[i])) ++i, digits = true;
  }
  if (!digits) {
    error_at(P, t->start, "'.' must be part of a number such as 0.5");
    t->kind = TOK_ERROR;
    return;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    size_t e = i + 1;
    if (e < n && (s[e] == '+' || s[e] == '-')) ++e;
    if (e >= n || !is_digit(s[e])) {
      error_at(P, t->start, "malformed number: an exponent needs digits (as in 1e-3)");
      t->kind = TOK_ERROR;
      return;
    }
    while (e < n && is_digit(s[e])) ++e;
    i = e;
  }
  if (i < n && (is_alpha(s[i]) || s[i] == '.')) {
    error_at(P, t->start, "malformed number: '%c' after it", s[i]);
    t->kind = TOK_ERROR;
    return;
  }
  t->len = i - t->start;
  if (t->len > MAX_NUMBER) {
    error_at(P, t->start, "a number of %zu characters is too long (at most %d)", t->len,
             MAX_NUMBER);
    t->kind = TOK_ERROR;
    return;
  }
  char buf[MAX_NUMBER + 1];
  memcpy(buf, s + t->start, t->len);
  buf[t->len] = '\0';
  errno = 0;
  double v = strtod(buf, NULL);
  if (!isfinite(v) || !isfinite((float)v)) {
    error_at(P, t->start, "number %s is out of the f32 range", buf);
    t->kind = TOK_ERROR;
    return;
  }
  t->kind = TOK_NUMBER;
  t->number = v;
  P->pos = i;
}

static void next(parser *P) {
  token *t = &P->tok;
  const char *s = P->text;
  while (P->pos < P->len &&
         (s[P->pos] == ' ' || s[P->pos] == '\t' || s[P->pos] == '\n' || s[P->pos] == '\r'))
    ++P->pos;
  t->start = P->pos;
  t->len = 1;
  if (P->pos >= P->len) {
    t->kind = TOK_END;
    t->len = 0;
    return;
  }
  char c = s[P->pos], d = P->pos + 1 < P->len ? s[P->pos + 1] : '\0';
  if (is_digit(c) || c == '.') {
    lex_number(P, t);
    return;
  }
  if (is_alpha(c)) {
    size_t i = P->pos;
    while (i < P->len && (is_alpha(s[i]) || is_digit(s[i]))) ++i;
    t->kind = TOK_NAME;
    t->len = i - P->pos;
    P->pos = i;
    return;
  }
  P->pos++;
  switch (c) {
    case '(':
      t->kind = TOK_LPAREN;
      return;
    case ')':
      t->kind = TOK_RPAREN;
      return;
    case ',':
      t->kind = TOK_COMMA;
      return;
    case '+':
      t->kind = TOK_PLUS;
      return;
    case '-':
      t->kind = TOK_MINUS;
      return;
    case '*':
      t->kind = TOK_STAR;
      return;
    case '/':
      t->kind = TOK_SLASH;
      return;
    case '<':
    case '>':
      t->kind = c == '<' ? (d == '=' ? TOK_LE : TOK_LT) : (d == '=' ? TOK_GE : TOK_GT);
      break;
    case '=':
    case '!':
      if (d != '=') {
        error_at(P, t->start, "'%c' must be followed by '=' (comparisons are == and !=)", c);
        t->kind = TOK_ERROR;
        return;
      }
      t->kind = c == '=' ? TOK_EQ : TOK_NE;
      break;
    default:
      if (c == '\0')
        error_at(P, t->start, "the expression holds a NUL byte");
      else if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
        error_at(P, t->start, "unexpected byte 0x%02x", (unsigned)(unsigned char)c);
      else
        error_at(P, t->start, "unexpected character '%c'", c);
      t->kind = TOK_ERROR;
      return;
  }
  if (d == '=') {
    P->pos++;
    t->len = 2;
  }
}

static bool tok_is(const parser *P, const char *word) {
  return P->tok.kind == TOK_NAME && strlen(word) == P->tok.len &&
         memcmp(P->text + P->tok.start, word, P->tok.len) == 0;
}

/* Checks a constructor's result: on failure reports the program's error at `offset`. */
static recap__expr_node built(parser *P, recap__expr_node n, size_t offset) {
  if (n == RECAP_EXPR_NONE && !P->failed) error_at(P, offset, "%s", P->program->error_message);
  return n;
}

static recap__expr_node parse_compare(parser *P);

static bool expect(parser *P, tok_kind kind, const char *what) {
  if (P->failed) return false;
  if (P->tok.kind != kind) {
    if (P->tok.kind == TOK_END)
      error_at(P, P->tok.start, "expected %s, got the end of the expression", what);
    else
      error_at(P, P->tok.start, "expected %s, got '%.*s'", what, (int)P->tok.len,
               P->text + P->tok.start);
    return false;
  }
  next(P);
  return !P->failed;
}

/* A signed number argument (scale's factor). */
static bool parse_number_arg(parser *P, double *out) {
  bool negative = false;
  if (P->tok.kind == TOK_MINUS) {
    negative = true;
    next(P);
  }
  if (P->failed) return false;
  if (P->tok.kind != TOK_NUMBER) {
    error_at(P, P->tok.start, "expected a number");
    return false;
  }
  *out = negative ? -P->tok.number : P->tok.number;
  next(P);
  return !P->failed;
}

typedef struct {
  const char *name;
  recap__expr_op op;
} fn_entry;

static const fn_entry functions[] = {
    {"relu", RECAP_EXPR_RELU}, {"gelu", RECAP_EXPR_GELU},       {"gelu_tanh", RECAP_EXPR_GELU_TANH},
    {"silu", RECAP_EXPR_SILU}, {"sigmoid", RECAP_EXPR_SIGMOID}, {"tanh", RECAP_EXPR_TANH},
    {"exp", RECAP_EXPR_EXP},   {"neg", RECAP_EXPR_NEG},         {"scale", RECAP_EXPR_SCALE},
    {"cast", RECAP_EXPR_CAST}, {"select", RECAP_EXPR_SELECT},
};

/* name '(' args ')', the name already the lookahead. */
static recap__expr_node parse_call(parser *P) {
  const size_t at = P->tok.start;
  const fn_entry *fn = NULL;
  for (size_t i = 0; i < sizeof functions / sizeof functions[0]; ++i)
    if (tok_is(P, functions[i].name)) fn = &functions[i];
  if (!fn) {
    error_at(P, at,
             "unknown function '%.*s' (functions: relu, gelu, gelu_tanh, silu, sigmoid, tanh, "
             "exp, neg, scale, cast, select)",
             (int)P->tok.len, P->text + at);
    return RECAP_EXPR_NONE;
  }
  next(P); /* the name */
  next(P); /* '(' (the caller saw it) */
  if (P->failed) return RECAP_EXPR_NONE;
  recap__expr_node a = parse_compare(P);
  if (P->failed) return RECAP_EXPR_NONE;
  recap__expr_node r = RECAP_EXPR_NONE;
  if (fn->op == RECAP_EXPR_SCALE) {
    double factor = 0;
    if (!expect(P, TOK_COMMA, "',' and the scale factor (scale(x, 0.5))")) return RECAP_EXPR_NONE;
    if (!parse_number_arg(P, &factor)) return RECAP_EXPR_NONE;
    r = built(P, recap__expr_scale(P->program, a, factor), at);
  } else if (fn->op == RECAP_EXPR_CAST) {
    if (!expect(P, TOK_COMMA, "',' and a dtype (cast(x, f16))")) return RECAP_EXPR_NONE;
    /* Any float dtype name recap_dtype_parse knows: the short ones and PyTorch's (float16). */
    recap_dtype dtype = RECAP_DTYPE_F32;
    char word[16] = "";
    if (P->tok.kind == TOK_NAME && P->tok.len < sizeof word)
      memcpy(word, P->text + P->tok.start, P->tok.len);
    if (!word[0] || recap_dtype_parse(word, &dtype) != RECAP_OK || !recap_dtype_is_float(dtype)) {
      error_at(P, P->tok.start,
               "cast's second argument must be f32, f16 or bf16 (or float32, float16, bfloat16)");
      return RECAP_EXPR_NONE;
    }
    next(P);
    if (P->failed) return RECAP_EXPR_NONE;
    r = built(P, recap__expr_cast(P->program, a, dtype), at);
  } else if (fn->op == RECAP_EXPR_SELECT) {
    if (!expect(P, TOK_COMMA, "',' (select(cond, x, y) takes three arguments)"))
      return RECAP_EXPR_NONE;
    recap__expr_node b = parse_compare(P);
    if (!expect(P, TOK_COMMA, "',' (select(cond, x, y) takes three arguments)"))
      return RECAP_EXPR_NONE;
    recap__expr_node c = parse_compare(P);
    if (P->failed) return RECAP_EXPR_NONE;
    r = built(P, recap__expr_select(P->program, a, b, c), at);
  } else {
    r = built(P, recap__expr_unary(P->program, fn->op, a), at);
  }
  if (P->failed) return RECAP_EXPR_NONE;
  if (P->tok.kind == TOK_COMMA) {
    error_at(P, P->tok.start, "too many arguments to '%s'", fn->name);
    return RECAP_EXPR_NONE;
  }
  if (!expect(P, TOK_RPAREN, "')' closing the call")) return RECAP_EXPR_NONE;
  return r;
}

/* An input by name, or in<N> for input N when no input has that name. */
static recap__expr_node parse_name(parser *P) {
  const size_t at = P->tok.start, len = P->tok.len;
  const char *word = P->text + at;
  int index = -1;
  for (int i = 0; i < P->num_inputs && index < 0; ++i)
    if (P->names && P->names[i] && strlen(P->names[i]) == len && !memcmp(P->names[i], word, len))
      index = i;
  if (index < 0 && len >= 3 && len <= 4 && !memcmp(word, "in", 2)) {
    int k = 0;
    bool digits = true;
    for (size_t i = 2; i < len; ++i) {
      if (!is_digit(word[i])) digits = false;
      k = k * 10 + (word[i] - '0');
    }
    if (digits && !(len == 4 && word[2] == '0') && k < P->num_inputs) index = k;
  }
  if (index < 0) {
    char list[160] = "";
    size_t used = 0;
    for (int i = 0; i < P->num_inputs; ++i) {
      int w = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                       P->names && P->names[i] ? P->names[i] : "?");
      if (w < 0 || (size_t)w >= sizeof list - used) break;
      used += (size_t)w;
    }
    error_at(P, at, "unknown name '%.*s' (the inputs are %s, or in0..in%d by position)", (int)len,
             word, list, P->num_inputs - 1);
    return RECAP_EXPR_NONE;
  }
  next(P);
  return built(P, recap__expr_input(P->program, index), at);
}

/* Entering a nested level (parentheses, a call, a unary minus): bounded, so that hostile
 * nesting fails here instead of on the C stack. The tree's depth (which long chains such as
 * a + b + ... + z also grow) is the program's own limit. */
static bool enter(parser *P) {
  if (++P->depth > P->max_depth) {
    error_at(P, P->tok.start, "the expression nests deeper than %d levels (the limit)",
             P->max_depth);
    return false;
  }
  return true;
}

static recap__expr_node parse_primary(parser *P) {
  const size_t at = P->tok.start;
  switch (P->tok.kind) {
    case TOK_NUMBER: {
      double v = P->tok.number;
      next(P);
      return built(P, recap__expr_const(P->program, v), at);
    }
    case TOK_NAME: {
      /* A name followed by '(' is a call: peek at the next non-blank byte. */
      size_t i = P->pos;
      while (i < P->len &&
             (P->text[i] == ' ' || P->text[i] == '\t' || P->text[i] == '\n' || P->text[i] == '\r'))
        ++i;
      if (i >= P->len || P->text[i] != '(') return parse_name(P);
      if (!enter(P)) return RECAP_EXPR_NONE;
      recap__expr_node r = parse_call(P);
      P->depth--;
      return r;
    }
    case TOK_LPAREN: {
      if (!enter(P)) return RECAP_EXPR_NONE;
      next(P);
      if (P->failed) return RECAP_EXPR_NONE;
      recap__expr_node r = parse_compare(P);
      if (!expect(P, TOK_RPAREN, "')'")) return RECAP_EXPR_NONE;
      P->depth--;
      return r;
    }
    case TOK_END:
      error_at(P, at, "expected a value, got the end of the expression");
      return RECAP_EXPR_NONE;
    case TOK_ERROR:
      return RECAP_EXPR_NONE;
    default:
      error_at(P, at, "expected a value, got '%.*s'", (int)P->tok.len, P->text + at);
      return RECAP_EXPR_NONE;
  }
}

static recap__expr_node parse_unary(parser *P) {
  if (P->failed) return RECAP_EXPR_NONE;
  if (P->tok.kind != TOK_MINUS) return parse_primary(P);
  const size_t at = P->tok.start;
  if (!enter(P)) return RECAP_EXPR_NONE;
  next(P);
  recap__expr_node r = RECAP_EXPR_NONE;
  if (P->failed) return RECAP_EXPR_NONE;
  if (P->tok.kind == TOK_NUMBER) {
    /* A negative literal is a constant, not neg(constant). */
    double v = P->tok.number;
    next(P);
    r = built(P, recap__expr_const(P->program, -v), at);
  } else {
    recap__expr_node a = parse_unary(P);
    if (!P->failed) r = built(P, recap__expr_unary(P->program, RECAP_EXPR_NEG, a), at);
  }
  P->depth--;
  return r;
}

static recap__expr_node parse_product(parser *P) {
  recap__expr_node r = parse_unary(P);
  while (!P->failed && (P->tok.kind == TOK_STAR || P->tok.kind == TOK_SLASH)) {
    const size_t at = P->tok.start;
    recap__expr_op op = P->tok.kind == TOK_STAR ? RECAP_EXPR_MUL : RECAP_EXPR_DIV;
    next(P);
    recap__expr_node b = parse_unary(P);
    if (P->failed) return RECAP_EXPR_NONE;
    r = built(P, recap__expr_binary(P->program, op, r, b), at);
  }
  return r;
}

static recap__expr_node parse_sum(parser *P) {
  recap__expr_node r = parse_product(P);
  while (!P->failed && (P->tok.kind == TOK_PLUS || P->tok.kind == TOK_MINUS)) {
    const size_t at = P->tok.start;
    recap__expr_op op = P->tok.kind == TOK_PLUS ? RECAP_EXPR_ADD : RECAP_EXPR_SUB;
    next(P);
    recap__expr_node b = parse_product(P);
    if (P->failed) return RECAP_EXPR_NONE;
    r = built(P, recap__expr_binary(P->program, op, r, b), at);
  }
  return r;
}

static bool is_comparison(tok_kind k) {
  return k >= TOK_LT && k <= TOK_NE;
}

static recap__expr_node parse_compare(parser *P) {
  if (P->failed) return RECAP_EXPR_NONE;
  recap__expr_node r = parse_sum(P);
  if (!P->failed && is_comparison(P->tok.kind)) {
    const size_t at = P->tok.start;
    static const recap__expr_op ops[] = {RECAP_EXPR_LT, RECAP_EXPR_LE, RECAP_EXPR_GT,
                                         RECAP_EXPR_GE, RECAP_EXPR_EQ, RECAP_EXPR_NE};
    recap__expr_op op = ops[P->tok.kind - TOK_LT];
    next(P);
    recap__expr_node b = parse_sum(P);
    if (!P->failed && is_comparison(P->tok.kind))
      error_at(P, P->tok.start,
               "comparisons do not chain (a < b < c); use parentheses or select()");
    if (!P->failed) r = built(P, recap__expr_binary(P->program, op, r, b), at);
  }
  return P->failed ? RECAP_EXPR_NONE : r;
}

recap_status recap__expr_parse(const char *text, size_t len, const char *const *names,
                               int num_inputs, const recap__expr_limits *limits,
                               recap__expr_program **out, recap__expr_parse_error *err) {
  recap__expr_parse_error local;
  if (!err) err = &local;
  memset(err, 0, sizeof *err);
  RECAP_CHECK_ARG(text && out);
  size_t max_text = RECAP_EXPR_MAX_TEXT;
  int max_depth = RECAP_EXPR_MAX_DEPTH, max_nodes = RECAP_EXPR_MAX_NODES;
  if (limits && limits->max_text > 0 && limits->max_text < max_text) max_text = limits->max_text;
  if (limits && limits->max_depth > 0 && limits->max_depth < max_depth)
    max_depth = limits->max_depth;
  if (limits && limits->max_nodes > 0 && limits->max_nodes < max_nodes)
    max_nodes = limits->max_nodes;
  if (len == SIZE_MAX) len = strnlen(text, max_text + 1);
  if (len > max_text) {
    err->offset = max_text;
    snprintf(err->message, sizeof err->message,
             "the expression is longer than %zu bytes (the limit)", max_text);
    return recap__fail_plain(RECAP_STATUS_SPEC_ERROR, "expression: offset %zu: %s", err->offset,
                             err->message);
  }
  recap__expr_program *program = NULL;
  RECAP_TRY(recap__expr_program_create(num_inputs, &program));
  recap__expr_program_set_limits(program, max_nodes, max_depth);
  parser P = {.text = text,
              .len = len,
              .names = names,
              .num_inputs = num_inputs,
              .max_depth = max_depth,
              .program = program,
              .err = err};
  next(&P);
  recap__expr_node root = RECAP_EXPR_NONE;
  if (!P.failed && P.tok.kind == TOK_END)
    error_at(&P, 0, "the expression is empty");
  else
    root = parse_compare(&P);
  if (!P.failed && P.tok.kind != TOK_END) {
    if (P.tok.kind == TOK_RPAREN)
      error_at(&P, P.tok.start, "unmatched ')'");
    else
      error_at(&P, P.tok.start, "expected an operator or the end, got '%.*s'", (int)P.tok.len,
               text + P.tok.start);
  }
  recap_status st;
  if (P.failed) {
    /* An allocation failure is not the spec's fault: report it as such. */
    st = program->error == RECAP_STATUS_OUT_OF_MEMORY
             ? RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to parse an expression")
             : recap__fail_plain(RECAP_STATUS_SPEC_ERROR, "expression: offset %zu: %s", err->offset,
                                 err->message);
    recap__expr_program_destroy(program);
    return st;
  }
  st = recap__expr_program_finish(program, root);
  if (st != RECAP_OK) {
    recap__expr_program_destroy(program);
    return st;
  }
  *out = program;
  return RECAP_OK;
}
