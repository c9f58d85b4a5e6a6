/*
 * expr_fuzz.c: libFuzzer target for the expression parser (kernels/expr.h): arbitrary bytes ->
 * recap__expr_parse -> (on success) formatting, a re-parse of the formatting, host evaluation
 * over broadcast inputs and CUDA source generation, then everything destroyed.
 *
 * The first byte picks the number of inputs (1 to 8) and the rest is the expression text over
 * inputs named a, b, c, x, gate, in_1, exp, h. Besides "no crash, no leak, no hang", the
 * target aborts when the parser's contract is broken:
 * - the status is RECAP_OK (with a finished program), RECAP_STATUS_SPEC_ERROR (no program, an
 *   error offset within the text and a message) or RECAP_STATUS_OUT_OF_MEMORY;
 * - a parsed program's fully parenthesized formatting parses again to the same formatting
 *   (when it fits in the text limit), so precedence, numbers and names round-trip;
 * - evaluation and code generation succeed on a parsed program, and the generated source
 *   holds none of the input names (it is generated from the tree, never from the text).
 *
 * Built with --config=fuzz it links libFuzzer's main; in every other build it links
 * replay_main.c and runs the checked-in corpus and regressions as an ordinary test.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/expr.h"

static const char *const kNames[RECAP_OP_MAX_INPUTS] = {"a",    "b",    "c",   "x",
                                                        "gate", "in_1", "exp", "h"};

static void broken(const char *what, const uint8_t *data, size_t size) {
  fprintf(stderr, "expr_fuzz: contract broken: %s (input of %zu bytes: %.*s)\n", what, size,
          (int)(size < 200 ? size : 200), (const char *)data);
  abort();
}

/* Formatting, re-parsed, must format the same. */
static void check_round_trip(const recap__expr_program *p, int num_inputs, const uint8_t *data,
                             size_t size) {
  static char first[RECAP_EXPR_MAX_TEXT + 2], second[RECAP_EXPR_MAX_TEXT + 2];
  recap__expr_format(p, kNames, first, sizeof first);
  size_t len = strlen(first);
  if (len > RECAP_EXPR_MAX_TEXT) return; /* longer than the text limit (or truncated) */
  recap__expr_program *again = NULL;
  recap__expr_parse_error err;
  recap_status st = recap__expr_parse(first, len, kNames, num_inputs, NULL, &again, &err);
  if (st == RECAP_STATUS_OUT_OF_MEMORY) return;
  if (st != RECAP_OK) {
    fprintf(stderr, "expr_fuzz: formatted \"%s\" fails at %zu: %s\n", first, err.offset,
            err.message);
    broken("the formatting of a parsed expression does not parse", data, size);
  }
  recap__expr_format(again, kNames, second, sizeof second);
  if (strcmp(first, second) != 0) broken("formatting does not round-trip", data, size);
  recap__expr_program_destroy(again);
}

/* Evaluates over inputs of shapes [2, 3] and [3] (alternating), in f32, f16 and bf16. */
static void check_eval(const recap__expr_program *p, int num_inputs, const uint8_t *data,
                       size_t size) {
  static const recap_dtype dtypes[3] = {RECAP_DTYPE_F32, RECAP_DTYPE_F16, RECAP_DTYPE_BF16};
  float storage[RECAP_OP_MAX_INPUTS][6], out[6];
  recap_tensor in[RECAP_OP_MAX_INPUTS], o;
  memset(in, 0, sizeof in);
  for (int i = 0; i < num_inputs; ++i) {
    for (int k = 0; k < 6; ++k) storage[i][k] = (float)((i + 1) * (k - 2)) * 0.5f;
    in[i].data = storage[i];
    in[i].dtype = dtypes[i % 3];
    in[i].ndim = i % 2 ? 1 : 2;
    if (i % 2) {
      in[i].shape[0] = 3;
      in[i].strides[0] = 1;
    } else {
      in[i].shape[0] = 2;
      in[i].shape[1] = 3;
      in[i].strides[0] = 3;
      in[i].strides[1] = 1;
    }
  }
  memset(&o, 0, sizeof o);
  o.data = out;
  o.dtype = RECAP_DTYPE_F32;
  o.ndim = 2;
  o.shape[0] = 2;
  o.shape[1] = 3;
  o.strides[0] = 3;
  o.strides[1] = 1;
  if (recap__expr_eval_host(p, in, num_inputs, &o) != RECAP_OK)
    broken("host evaluation of a parsed expression failed", data, size);
}

static void check_codegen(const recap__expr_program *p, int num_inputs, const uint8_t *data,
                          size_t size) {
  recap__expr_signature sig;
  memset(&sig, 0, sizeof sig);
  sig.num_inputs = num_inputs;
  for (int i = 0; i < num_inputs; ++i) sig.inputs[i] = i % 2 ? RECAP_DTYPE_F16 : RECAP_DTYPE_F32;
  sig.output = RECAP_DTYPE_BF16;
  char *source = NULL;
  recap_status st = recap__expr_codegen_cuda(p, &sig, &source);
  if (st == RECAP_STATUS_OUT_OF_MEMORY) return;
  if (st != RECAP_OK) broken("code generation of a parsed expression failed", data, size);
  if (strstr(source, "gate") || strstr(source, "in_1"))
    broken("an input's name reached the generated source", data, size);
  free(source);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const int num_inputs = 1 + data[0] % RECAP_OP_MAX_INPUTS;
  const char *text = (const char *)data + 1;
  const size_t len = size - 1;
  recap__expr_program *p = NULL;
  recap__expr_parse_error err;
  recap_status st = recap__expr_parse(text, len, kNames, num_inputs, NULL, &p, &err);
  switch (st) {
    case RECAP_OK:
      if (!p || recap__expr_root(p) == RECAP_EXPR_NONE)
        broken("OK without a finished program", data, size);
      check_round_trip(p, num_inputs, data, size);
      check_eval(p, num_inputs, data, size);
      check_codegen(p, num_inputs, data, size);
      recap__expr_program_destroy(p);
      return 0;
    case RECAP_STATUS_SPEC_ERROR:
      if (p) broken("an error with a program", data, size);
      if (err.offset > len) broken("an error offset past the text", data, size);
      if (!err.message[0]) broken("an error without a message", data, size);
      return 0;
    case RECAP_STATUS_OUT_OF_MEMORY:
      if (p) broken("out of memory with a program", data, size);
      return 0;
    default:
      broken("an unexpected status", data, size);
      return 0;
  }
}
