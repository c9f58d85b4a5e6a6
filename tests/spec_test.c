/*
 * spec_test.c: the spec loader and the IR builder (engine/spec.h, engine/ir.h): parsing,
 * defaults, every kind of error with its exact FILE:LINE:COL, all errors in one pass, the
 * limits, file paths, buckets, and every example in specs/.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/load.h"
#include "tests/test_util.h"

/* ---- helpers ---- */

/* The whole load path over text, unfused (every bucket's IR checks shapes and sizes), with
 * the spec options and the memory limit given; the models's IRs and plan are dropped and its
 * spec kept in *spec. */
static recap_status load_as(const char *text, const char *name, const recap__spec_options *opts,
                            uint64_t memory, recap__spec **spec, recap__diag *diag) {
  recap__load_options lo = {.device_memory_bytes = memory, .no_fusion = true};
  if (opts) lo.spec = *opts;
  recap__model *m = NULL;
  recap_status st = recap__load_string(text, strlen(text), name, &lo, &m, diag);
  if (st != RECAP_OK) return st;
  *spec = m->spec;
  m->spec = NULL;
  recap__model_free_loaded(m);
  return RECAP_OK;
}

static recap_status load(const char *text, const recap__spec_options *opts, recap__spec **spec,
                         recap__diag *diag) {
  return load_as(text, "t.yaml", opts, 0, spec, diag);
}

/* The loaded model of text (unfused), for the IR's tests. */
static recap__model *load_model(const char *text) {
  recap__load_options lo = {.no_fusion = true};
  recap__model *m = NULL;
  CHECK_OK(recap__load_string(text, strlen(text), "t.yaml", &lo, &m, NULL));
  return m;
}

/* Whether some message of diag starts with prefix and contains needle. */
static int has_error(const recap__diag *diag, const char *prefix, const char *needle) {
  for (size_t i = 0; i < diag->count; ++i)
    if (strncmp(diag->messages[i], prefix, strlen(prefix)) == 0 &&
        strstr(diag->messages[i], needle))
      return 1;
  return 0;
}

static void dump(const recap__diag *diag) {
  for (size_t i = 0; i < diag->count; ++i) fprintf(stderr, "    | %s\n", diag->messages[i]);
}

/* Loads text expecting SPEC_ERROR with an error at "t.yaml:POS: error: " mentioning needle. */
static void expect_error(const char *text, const char *pos, const char *needle) {
  recap__diag diag = {0};
  recap__spec *spec = NULL;
  recap_status st = load(text, NULL, &spec, &diag);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "t.yaml:%s: error: ", pos);
  int found = has_error(&diag, prefix, needle);
  if (st != RECAP_STATUS_SPEC_ERROR || !found) {
    fprintf(stderr, "\n  expected %s...%s, got %s:\n", prefix, needle, recap_status_name(st));
    dump(&diag);
  }
  CU_ASSERT_EQUAL(st, RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_PTR_NULL(spec);
  CU_ASSERT_TRUE(found);
  recap__spec_destroy(spec);
  recap__diag_free(&diag);
}

#define MLP                                                                             \
  "name: mlp\n"                                                                         \
  "device: host\n"                                                                      \
  "dtype: bf16\n"                                                                       \
  "seed: 1234\n"                                                                        \
  "dims:\n"                                                                             \
  "  B: [1, 2, 4, 8]\n"                                                                 \
  "tensors:\n"                                                                          \
  "  x:  {shape: [B, 64], role: input}\n"                                               \
  "  w1: {shape: [32, 64], role: param, init: normal, std: 0.5}\n"                      \
  "  b1: {shape: [32], role: param, init: zeros}\n"                                     \
  "  g1: {shape: [32], role: param, init: ones}\n"                                      \
  "ops:\n"                                                                              \
  "  - {op: linear, in: [x, w1, b1], out: h1, act: gelu}\n"                             \
  "  - {op: rmsnorm, in: [h1, g1], out: y, eps: 1.0e-6, stream: 1, name: final-norm}\n" \
  "outputs: [y]\n"                                                                      \
  "run: {warmup: 2, iters: 50}\n"

/* ---- parsing ---- */

static void test_spec_parses_every_top_level_key(void) {
  recap__spec *spec = NULL;
  recap__diag diag = {0};
  CHECK_OK(load(MLP, NULL, &spec, &diag));
  if (!spec) return;
  CU_ASSERT_STRING_EQUAL(spec->name, "mlp");
  CU_ASSERT_EQUAL(spec->device, RECAP_BACKEND_HOST);
  CU_ASSERT_EQUAL(spec->dtype, RECAP_DTYPE_BF16);
  CU_ASSERT_EQUAL(spec->seed, 1234u);
  CU_ASSERT_TRUE(spec->seed_given);
  CU_ASSERT_EQUAL(spec->warmup, 2);
  CU_ASSERT_EQUAL(spec->iters, 50);
  CU_ASSERT_EQUAL(spec->num_dims, 1);
  CU_ASSERT_EQUAL(spec->bucket_dim, 0);
  CU_ASSERT_EQUAL(recap__spec_num_buckets(spec), 4);
  CU_ASSERT_EQUAL(recap__spec_bucket_value(spec, 3), 8);
  CU_ASSERT_EQUAL(spec->num_declared, 4);
  CU_ASSERT_EQUAL(spec->num_tensors, 6);
  CU_ASSERT_EQUAL(spec->tensors[1].role, RECAP_ROLE_PARAM);
  CU_ASSERT_EQUAL(spec->tensors[1].init.kind, RECAP_INIT_NORMAL);
  CU_ASSERT_DOUBLE_EQUAL(spec->tensors[1].init.std, 0.5, 0);
  CU_ASSERT_EQUAL(spec->tensors[2].init.kind, RECAP_INIT_ZEROS);
  CU_ASSERT_EQUAL(spec->num_ops, 2);
  CU_ASSERT_EQUAL(spec->ops[0].attrs.act, RECAP_ACT_GELU);
  CU_ASSERT_DOUBLE_EQUAL(spec->ops[1].attrs.eps, 1e-6, 0);
  CU_ASSERT_EQUAL(spec->ops[1].stream, 1);
  CU_ASSERT_STRING_EQUAL(spec->ops[1].name, "final-norm");
  CU_ASSERT_EQUAL(spec->ops[1].pos.line, 14);
  CU_ASSERT_EQUAL(spec->ops[1].pos.col, 5);
  CU_ASSERT_EQUAL(spec->num_outputs, 1);
  CU_ASSERT_STRING_EQUAL(spec->outputs[0].name, "y");
  CU_ASSERT_EQUAL(diag.count, 0);
  recap__spec_destroy(spec);
  recap__diag_free(&diag);
}

static void test_spec_defaults_apply_when_keys_are_absent(void) {
  recap__spec *spec = NULL;
  const char *text =
      "tensors:\n  a: {shape: [4], role: input}\n  p: {role: scalar}\n"
      "  s: {shape: [4], role: state}\n  c: {shape: [1, 2, 1, 4], role: state}\n"
      "  n: {shape: [1, 1, 1, 4], role: input}\n"
      "ops:\n  - {op: relu, in: a, out: b}\n  - {op: add, in: [b, s], out: y}\n"
      "  - {op: kv_append, in: [c, n, p], out: c2}\n";
  CHECK_OK(recap__spec_load_string(text, strlen(text), "dir/pipe.v1.yaml", NULL, &spec, NULL));
  if (!spec) return;
  CU_ASSERT_STRING_EQUAL(spec->name, "pipe");
  CU_ASSERT_EQUAL(spec->device, RECAP_BACKEND_CUDA);
  CU_ASSERT_EQUAL(spec->dtype, RECAP_DTYPE_F32);
  CU_ASSERT_EQUAL(spec->seed, 0u);
  CU_ASSERT_FALSE(spec->seed_given);
  CU_ASSERT_EQUAL(spec->warmup, 3);
  CU_ASSERT_EQUAL(spec->iters, 100);
  CU_ASSERT_EQUAL(spec->bucket_dim, -1);
  CU_ASSERT_EQUAL(recap__spec_num_buckets(spec), 1);
  /* A scalar is an i32 [1] holding value 0; a state starts at zeros; an input is normal. */
  CU_ASSERT_EQUAL(spec->tensors[1].dtype, RECAP_DTYPE_I32);
  CU_ASSERT_EQUAL(spec->tensors[1].ndim, 1);
  CU_ASSERT_EQUAL(spec->tensors[1].init.kind, RECAP_INIT_VALUE);
  CU_ASSERT_EQUAL(spec->tensors[2].init.kind, RECAP_INIT_ZEROS);
  CU_ASSERT_EQUAL(spec->tensors[0].init.kind, RECAP_INIT_NORMAL);
  /* Without outputs:, the outputs are what nothing reads; kv_append's result is not one. */
  CU_ASSERT_EQUAL(spec->num_outputs, 1);
  CU_ASSERT_STRING_EQUAL(spec->outputs[0].name, "y");
  recap__spec_destroy(spec);
}

/* An integer input (token ids, positions) without init starts at zeros: a normal draw is no
 * integer, and zero is a valid id for any table. */
static void test_spec_integer_input_without_init_starts_at_zeros(void) {
  recap__spec *spec = NULL;
  const char *text =
      "tensors:\n  table: {shape: [16, 8], role: param}\n"
      "  ids: {shape: [4], role: input, dtype: i32}\n"
      "  pos: {shape: [4], role: input, dtype: i64}\n"
      "ops:\n  - {op: embedding, in: [table, ids], out: a}\n"
      "  - {op: embedding, in: [table, pos], out: b}\n";
  CHECK_OK(load(text, NULL, &spec, NULL));
  if (!spec) return;
  CU_ASSERT_EQUAL(spec->tensors[1].init.kind, RECAP_INIT_ZEROS);
  CU_ASSERT_EQUAL(spec->tensors[2].init.kind, RECAP_INIT_ZEROS);
  recap__spec_destroy(spec);
}

/* PyTorch's dtype names work wherever a dtype is written: the spec's, a tensor's, an attribute's
 * and an expression's cast. */
static void test_spec_accepts_pytorch_dtype_names(void) {
  recap__spec *spec = NULL;
  const char *text =
      "dtype: bfloat16\n"
      "tensors:\n  table: {shape: [16, 8], role: param, dtype: float32}\n"
      "  ids: {shape: [4], role: input, dtype: int32}\n"
      "  pos: {shape: [4], role: input, dtype: int64}\n"
      "  h: {shape: [4], role: input, dtype: float16}\n"
      "ops:\n  - {op: embedding, in: [table, ids], out: a}\n"
      "  - {op: embedding, in: [table, pos], out: b}\n"
      "  - {op: cast, in: h, out: c, dtype: float32}\n"
      "  - {op: expr, in: [c], out: d, expr: 'cast(c, bfloat16)'}\n";
  CHECK_OK(load(text, NULL, &spec, NULL));
  if (!spec) return;
  CU_ASSERT_EQUAL(spec->dtype, RECAP_DTYPE_BF16);
  CU_ASSERT_EQUAL(spec->tensors[0].dtype, RECAP_DTYPE_F32);
  CU_ASSERT_EQUAL(spec->tensors[1].dtype, RECAP_DTYPE_I32);
  CU_ASSERT_EQUAL(spec->tensors[2].dtype, RECAP_DTYPE_I64);
  CU_ASSERT_EQUAL(spec->tensors[3].dtype, RECAP_DTYPE_F16);
  recap__spec_destroy(spec);
  expect_error("dtype: int32\nops: []\n", "1:8", "expected a float dtype");
  expect_error(
      "tensors:\n  x: {shape: [4], role: input, dtype: float8}\n"
      "ops:\n  - {op: relu, in: x, out: y}\n",
      "2:39", "float32, float16, bfloat16, int32 or int64");
}

static void test_spec_anchors_and_aliases_within_limits_work(void) {
  const char *text =
      "tensors:\n  a: {shape: &s [4, 4], role: input}\n  b: {shape: *s, role: input}\n"
      "ops:\n  - {op: add, in: [a, b], out: y}\n";
  recap__spec *spec = NULL;
  CHECK_OK(load(text, NULL, &spec, NULL));
  if (!spec) return;
  CU_ASSERT_EQUAL(spec->tensors[1].ndim, 2);
  CU_ASSERT_EQUAL(spec->tensors[1].shape[1].value, 4);
  recap__spec_destroy(spec);
}

/* YAML's merge key: a mapping takes the merged mappings' pairs it lacks (its own win, then an
 * earlier merged mapping over a later one), as PyYAML and ruamel read it. */
static void test_spec_merge_keys_take_the_pairs_a_mapping_lacks(void) {
  const char *text =
      "tensors:\n"
      "  a: &in {shape: [4, 4], role: input}\n"
      "  b: {<<: *in, role: param, init: ones}\n"
      "  c: {<<: [&p {role: param, init: zeros}, *in], shape: [4, 4]}\n"
      "ops:\n  - {op: add, in: [a, b], out: y}\n  - {op: add, in: [y, c], out: z}\n";
  recap__spec *spec = NULL;
  CHECK_OK(load(text, NULL, &spec, NULL));
  if (!spec) return;
  CU_ASSERT_EQUAL(spec->tensors[1].role, RECAP_ROLE_PARAM); /* its own role wins */
  CU_ASSERT_EQUAL(spec->tensors[1].init.kind, RECAP_INIT_ONES);
  CU_ASSERT_EQUAL(spec->tensors[1].ndim, 2);                /* the shape merged from a */
  CU_ASSERT_EQUAL(spec->tensors[2].role, RECAP_ROLE_PARAM); /* &p before *in */
  CU_ASSERT_EQUAL(spec->tensors[2].init.kind, RECAP_INIT_ZEROS);
  recap__spec_destroy(spec);
  expect_error("tensors:\n  x: {<<: 3, role: input}\nops: []\n", "2:11",
               "YAML merge key '<<' takes a mapping or a list of mappings");
}

/* ---- the IR ---- */

static void test_ir_infers_shapes_dtypes_and_graph_facts(void) {
  recap__model *m = load_model(MLP);
  if (!m) return;
  recap__ir *ir = m->irs[2];
  m->irs[2] = NULL;
  recap__model_free_loaded(m); /* the IR owns its strings */
  CU_ASSERT_EQUAL(ir->bucket, 2);
  CU_ASSERT_EQUAL(ir->dim_values[0], 4);
  int h1 = recap__ir_find_tensor(ir, "h1"), y = recap__ir_find_tensor(ir, "y");
  int x = recap__ir_find_tensor(ir, "x"), w1 = recap__ir_find_tensor(ir, "w1");
  CU_ASSERT_TRUE(h1 >= 0 && y >= 0 && x >= 0 && w1 >= 0);
  CU_ASSERT_EQUAL(ir->tensors[h1].ndim, 2);
  CU_ASSERT_EQUAL(ir->tensors[h1].shape[0], 4);
  CU_ASSERT_EQUAL(ir->tensors[h1].shape[1], 32);
  CU_ASSERT_EQUAL(ir->tensors[h1].dtype, RECAP_DTYPE_BF16);
  CU_ASSERT_EQUAL(ir->tensors[h1].bytes, 4 * 32 * 2);
  CU_ASSERT_EQUAL(ir->tensors[h1].role, RECAP_ROLE_INTERMEDIATE);
  CU_ASSERT_EQUAL(ir->tensors[h1].producer, 0);
  CU_ASSERT_EQUAL(ir->tensors[h1].num_consumers, 1);
  CU_ASSERT_EQUAL(ir->tensors[y].producer, 1);
  CU_ASSERT_TRUE(ir->tensors[y].is_output);
  CU_ASSERT_EQUAL(ir->tensors[x].producer, -1);
  CU_ASSERT_EQUAL(ir->tensors[x].alias_of, -1);
  /* The bucketed dim: axis 0 of x, h1, y; none of the weight. */
  CU_ASSERT_EQUAL(ir->tensors[x].bucket_axis, 0);
  CU_ASSERT_EQUAL(ir->tensors[h1].bucket_axis, 0);
  CU_ASSERT_EQUAL(ir->tensors[y].bucket_axes, 1u);
  CU_ASSERT_EQUAL(ir->tensors[w1].bucket_axis, -1);
  CU_ASSERT_EQUAL(ir->num_streams, 2);
  CU_ASSERT_EQUAL(ir->ops[1].stream, 1);
  CU_ASSERT_STRING_EQUAL(ir->ops[0].name, "linear#0");
  CU_ASSERT_STRING_EQUAL(ir->ops[1].name, "final-norm");
  CU_ASSERT_EQUAL(ir->ops[0].pos.line, 13);
  CU_ASSERT_STRING_EQUAL(ir->ops[0].pos.file, "t.yaml");
  CU_ASSERT_EQUAL(ir->num_outputs, 1);
  CU_ASSERT_EQUAL(ir->outputs[0], y);
  recap__ir_destroy(ir);
}

static void test_ir_bucket_out_of_range_is_invalid_argument(void) {
  recap__spec *spec = NULL;
  CHECK_OK(load(MLP, NULL, &spec, NULL));
  recap__ir *ir = NULL;
  CHECK_STATUS(recap__ir_build(spec, 4, 0, &ir, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NULL(ir);
  recap__spec_destroy(spec);
}

static void test_ir_kv_append_output_aliases_the_cache(void) {
  const char *text =
      "tensors:\n  c: {shape: [2, 8, 2, 4], role: state}\n"
      "  n: {shape: [2, 1, 2, 4], role: input}\n  p: {role: scalar}\n"
      "ops:\n  - {op: kv_append, in: [c, n, p], out: c2}\n"
      "  - {op: sum, in: [c2], out: y}\n";
  recap__spec *spec = NULL;
  CHECK_OK(load(text, NULL, &spec, NULL));
  recap__ir *ir = NULL;
  if (spec) CHECK_OK(recap__ir_build(spec, 0, 0, &ir, NULL));
  if (ir) {
    int c2 = recap__ir_find_tensor(ir, "c2");
    CU_ASSERT_EQUAL(ir->tensors[c2].alias_of, recap__ir_find_tensor(ir, "c"));
  }
  recap__ir_destroy(ir);
  recap__spec_destroy(spec);
}

/* ---- errors ---- */

static void test_spec_reports_all_errors_in_one_pass_with_positions(void) {
  const char *text =
      "name: many\n"                                     /* 1 */
      "colour: blue\n"                                   /* 2 */
      "dims: {B: 0}\n"                                   /* 3 */
      "tensors:\n"                                       /* 4 */
      "  x: {shape: [4, 8], role: inptu}\n"              /* 5 */
      "  w: {shape: [8, 8], role: param}\n"              /* 6 */
      "  unused: {shape: [3], role: param}\n"            /* 7 */
      "ops:\n"                                           /* 8 */
      "  - {op: sofmax, in: [w], out: a}\n"              /* 9 */
      "  - {op: relu, in: [ghost], out: b}\n"            /* 10 */
      "  - {op: softmax, in: [w], out: c, epsilon: 1}\n" /* 11 */
      "  - {op: add, in: [w, late], out: d}\n"           /* 12 */
      "  - {op: relu, in: [w], out: late}\n"             /* 13 */
      "outputs: [a, b, c, d, late]\n";
  recap__diag diag = {0};
  recap__spec *spec = NULL;
  CHECK_STATUS(load(text, NULL, &spec, &diag), RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_TRUE(has_error(&diag, "t.yaml:2:1: error: ", "unknown key 'colour' in the spec"));
  CU_ASSERT_TRUE(has_error(&diag, "t.yaml:3:11: error: ", "dim 'B' must be between 1"));
  CU_ASSERT_TRUE(
      has_error(&diag, "t.yaml:5:28: error: ", "role must be input, param, state or scalar"));
  CU_ASSERT_TRUE(
      has_error(&diag, "t.yaml:7:3: error: ", "tensor 'unused' is declared but never used"));
  CU_ASSERT_TRUE(
      has_error(&diag, "t.yaml:9:10: error: ", "unknown op 'sofmax' (did you mean 'softmax'"));
  CU_ASSERT_TRUE(has_error(&diag, "t.yaml:10:21: error: ", "unknown tensor 'ghost'"));
  CU_ASSERT_TRUE(has_error(&diag, "t.yaml:11:36: error: ",
                           "unknown key 'epsilon' in op 'softmax' (accepted: op, in, out, name, "
                           "stream, shape, dtype, scale, causal)"));
  CU_ASSERT_TRUE(has_error(&diag, "t.yaml:12:23: error: ",
                           "uses tensor 'late' before it is defined (op 'relu#4' at line 13"));
  /* x's role is wrong, and nothing reads it either. */
  CU_ASSERT_TRUE(has_error(&diag, "t.yaml:5:3: error: ", "tensor 'x' is declared but never used"));
  CU_ASSERT_EQUAL(diag.count, 9);
  if (diag.count != 9) dump(&diag);
  /* recap_last_error() holds the same messages, joined. */
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "t.yaml:2:1: error: unknown key 'colour'"));
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "\nt.yaml:3:11: error: "));
  recap__diag_free(&diag);
}

static void test_spec_yaml_syntax_error_is_positioned(void) {
  expect_error("ops:\n  - {op: relu, in: [x, out: y}\n", "2:30", "YAML syntax error");
  expect_error("tensors:\n  x: [1\n  y: 2\n", "3:4", "YAML syntax error");
  /* A tab in the indentation: libyaml names no tab, the error does. */
  expect_error("tensors:\n\tx: {shape: [4], role: input}\nops: []\n", "2:1",
               "(a tab indents this line: YAML indents with spaces)");
  expect_error("a: 1\n---\nb: 2\n", "2:1", "a spec holds one YAML document");
}

static void test_spec_wrong_types_name_expected_and_found(void) {
  expect_error("seed: [1]\nops: []\n", "1:7", "seed: expected an integer, got a sequence");
  expect_error("device: gpu\nops: []\n", "1:9",
               "device: expected cuda or host, got a string 'gpu'");
  expect_error("dtype: i32\nops: []\n", "1:8", "expected a float dtype");
  /* version: 1 is this format; another version stops the check at its value, before keys it
   * may have added. */
  recap__spec *spec = NULL;
  CHECK_OK(
      load("version: 1\ntensors:\n  x: {shape: [4], role: input}\n"
           "ops:\n  - {op: relu, in: x, out: y}\n",
           NULL, &spec, NULL));
  recap__spec_destroy(spec);
  expect_error("version: 2\nnew_key: 1\nops: []\n", "1:10",
               "version: this recap reads spec format version 1, got a number '2'");
  expect_error("version: [1]\nops: []\n", "1:10", "spec format version 1, got a sequence");
  expect_error("ops: {a: 1}\n", "1:6", "ops: expected a sequence, got a mapping");
  expect_error("tensors: [x]\nops: []\n", "1:10", "tensors: expected a mapping, got a sequence");
  expect_error(
      "tensors:\n  x: {shape: [4], role: input}\nops:\n  - {op: scale, in: [x], out: y, scale: "
      "big}\n",
      "4:41", "attribute 'scale': expected a number, got a string 'big'");
  expect_error(
      "tensors:\n  x: {shape: [4], role: input}\nops:\n  - {op: softmax, in: [x], out: y, causal: "
      "1}\n",
      "4:44", "expected true or false, got a number");
  expect_error(
      "tensors:\n  x: {shape: [4], role: input}\nops:\n  - {op: linear, in: [x, x], out: y, act: "
      "swish}\n",
      "4:43", "expected an activation");
  expect_error("run: {warmup: -1}\nops: []\n", "1:15", "run: warmup must be between 0 and 10000");
  expect_error(
      "tensors:\n  x: {shape: [4], role: input}\nops:\n  - {op: relu, in: [x], out: y, stream: "
      "99}\n",
      "4:41", "stream must be between 0 and 63");
}

static void test_spec_dims_must_be_positive_and_ascending(void) {
  expect_error("dims: {B: -3}\nops: []\n", "1:11", "dim 'B' must be between 1");
  expect_error("dims: {B: [4, 2]}\nops: []\n", "1:15", "strictly ascending (2 follows 4)");
  expect_error("dims: {B: 99999999999999999999}\nops: []\n", "1:11", "does not fit in 64 bits");
  expect_error("dims: {B: [1, 2], S: [4, 8]}\nops: []\n", "1:19", "one bucketed dim per spec");
  expect_error("tensors:\n  x: {shape: [N, 4], role: input}\nops: []\n", "2:15", "unknown dim 'N'");
  expect_error("tensors:\n  x: {shape: [0, 4], role: input}\nops: []\n", "2:15",
               "0 is not a positive integer");
}

static void test_spec_shape_and_dtype_mismatches_are_positioned(void) {
  const char *base =
      "tensors:\n  a: {shape: [4, 8], role: input}\n  b: {shape: [3, 8], role: input}\n"
      "  c: {shape: [4, 8], role: input, dtype: f16}\nops:\n";
  char text[512];
  snprintf(text, sizeof text,
           "%s  - {op: add, in: [a, b], out: y}\n  - {op: relu, in: [c], out: z}\n", base);
  expect_error(text, "6:5", "op 'add#0': inputs 'a' [4, 8] and 'b' [3, 8] are not broadcastable");
  snprintf(text, sizeof text,
           "%s  - {op: add, in: [a, c], out: y}\n  - {op: relu, in: [b], out: z}\n", base);
  expect_error(text, "6:5", "input 'b' has dtype f16, but input 'a' has f32");
  /* The message names the op's input slots; the error says which tensor each slot is where
   * their names differ (here b is the tensor c). */
  expect_error(text, "6:5", "(they must match) (b is 'c')");
  snprintf(text, sizeof text,
           "%s  - {op: add, in: [a, a], out: y, shape: [4, 9]}\n  - {op: add, in: [b, b], out: "
           "z}\n  - {op: relu, in: c, out: q}\n",
           base);
  expect_error(text, "6:42", "output 'y' has shape [4, 8], but shape: says [4, 9]");
  snprintf(text, sizeof text,
           "%s  - {op: add, in: [a, a], out: y, dtype: bf16}\n  - {op: add, in: [b, b], out: z}\n  "
           "- {op: relu, in: c, out: q}\n",
           base);
  expect_error(text, "6:42", "output 'y' has dtype f32, but dtype: says bf16");
}

static void test_spec_duplicates_are_reported_at_the_second_definition(void) {
  expect_error(
      "tensors:\n  x: {shape: [4], role: input}\n  x: {shape: [4], role: input}\nops: []\n", "3:3",
      "duplicate key 'x' in tensors (first given at line 2)");
  expect_error("tensors:\n  x: {shape: [4], role: input}\nops:\n  - {op: relu, in: [x], out: x}\n",
               "4:30", "tensor 'x' is already defined (line 2)");
  expect_error(
      "tensors:\n  x: {shape: [4], role: input}\nops:\n  - {op: relu, in: [x], out: a, name: n}\n"
      "  - {op: relu, in: [a], out: b, name: n}\n",
      "5:39", "op name 'n' is already used");
}

static void test_spec_unused_op_output_is_an_error_when_outputs_are_listed(void) {
  expect_error(
      "tensors:\n  x: {shape: [4], role: input}\nops:\n  - {op: relu, in: [x], out: a}\n"
      "  - {op: relu, in: [x], out: b}\noutputs: [b]\n",
      "4:30", "tensor 'a' is computed but never used");
}

static void test_spec_unknown_attribute_lists_the_op_keys(void) {
  expect_error(
      "tensors:\n  x: {shape: [4, 4], role: input}\nops:\n"
      "  - {op: layernorm, in: [x, x], out: y, epsilon: 1e-5}\n",
      "4:41", "accepted: op, in, out, name, stream, shape, dtype, eps");
  expect_error(
      "tensors:\n  x: {shape: [4, 4], role: input}\nops:\n  - {op: slice, in: [x], out: y, end: "
      "2}\n",
      "4:5", "op 'slice' needs attribute 'start'");
}

/* rope as a checkpoint's config needs it: a float theta and Llama 3 scaling; theta and the
 * older integer base together are refused at the op, as is a scaling parameter without
 * llama3. */
#define ROPE_SPEC                                                                     \
  "tensors:\n  x: {shape: [1, 4, 2, 8], role: input}\n"                               \
  "  pos: {shape: [1], role: input, dtype: i32}\nops:\n  - {op: rope, in: [x, pos], " \
  "out: y, "

static void test_spec_rope_takes_float_theta_and_llama3_scaling(void) {
  const char *text = ROPE_SPEC
      "theta: 500000.0, llama3: true, factor: 32, low_freq_factor: 1,\n"
      "      high_freq_factor: 4, original_max_positions: 8192}\n";
  recap__spec *spec = NULL;
  CHECK_OK(load(text, NULL, &spec, NULL));
  if (!spec) return;
  const recap__op_attrs *a = &spec->ops[0].attrs;
  CU_ASSERT_DOUBLE_EQUAL(a->rope_theta, 500000.0, 0);
  CU_ASSERT_EQUAL(a->rope_base, 0);
  CU_ASSERT_EQUAL(a->rope_llama3, 1);
  CU_ASSERT_DOUBLE_EQUAL(a->rope_factor, 32, 0);
  CU_ASSERT_DOUBLE_EQUAL(a->rope_low_freq_factor, 1, 0);
  CU_ASSERT_DOUBLE_EQUAL(a->rope_high_freq_factor, 4, 0);
  recap__spec_destroy(spec);
  expect_error(ROPE_SPEC "theta: 10000.5, base: 10000}\n", "5:5",
               "attributes 'theta' (10000.5) and 'base' (10000) are both given");
  expect_error(ROPE_SPEC "factor: 8}\n", "5:5", "attribute 'factor' applies only with llama3");
  expect_error(ROPE_SPEC "llama3: true, factor: 8, low_freq_factor: 1, high_freq_factor: 4}\n",
               "5:5", "attribute 'original_max_positions' = 0 must be > 0");
}

static void test_spec_bucketed_dim_reduced_over_is_rejected(void) {
  /* softmax over the last axis, which is B after the permute. */
  expect_error(
      "dims: {B: [2, 4]}\ntensors:\n  x: {shape: [3, B], role: input}\nops:\n"
      "  - {op: softmax, in: [x], out: y}\n",
      "5:5", "reduces over axis 1 of tensor 'x' [3, 2], which carries the bucketed dim 'B'");
  /* A GEMM contracting over B (x^T x). */
  expect_error(
      "dims: {B: [8]}\ntensors:\n  x: {shape: [B, 16], role: input}\nops:\n"
      "  - {op: matmul, in: [x, x], out: y, trans_a: true}\n",
      "5:5", "reduces over axis 0 of tensor 'x' [8, 16]");
  /* Through a reshape that merges B into the reduced axis. */
  expect_error(
      "dims: {B: [1, 2]}\ntensors:\n  x: {shape: [B, 4], role: input}\nops:\n"
      "  - {op: reshape, in: [x], out: r, shape: [-1]}\n  - {op: sum, in: [r], out: y}\n",
      "6:5", "reduces over axis 0 of tensor 'r'");
}

static void test_spec_error_in_one_bucket_names_the_bucket(void) {
  expect_error(
      "dims: {B: [2, 4]}\ntensors:\n  x: {shape: [B, 4], role: input}\nops:\n"
      "  - {op: reshape, in: [x], out: y, shape: [2, 4]}\n",
      "5:5", "(with B = 4)");
  /* The same error in every bucket names none: it is not about the bucket. */
  recap__diag diag = {0};
  recap__model *m = NULL;
  const char *text =
      "dims: {B: [1, 2, 4]}\ntensors:\n  x: {shape: [2, 3, 4], role: input}\n"
      "ops:\n  - {op: permute, in: x, out: y, dims: [0, 0, 1]}\n";
  recap__load_options o = {.device = {RECAP_BACKEND_HOST, 0}, .device_given = true};
  CHECK_STATUS(recap__load_string(text, strlen(text), "t.yaml", &o, &m, &diag),
               RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_EQUAL(diag.count, 1);
  if (diag.count) {
    CU_ASSERT_PTR_NOT_NULL(strstr(diag.messages[0], "names axis 0 twice (not a permutation)"));
    CU_ASSERT_PTR_NULL(strstr(diag.messages[0], "(with B"));
  }
  recap__diag_free(&diag);
  recap__model_release(m);
}

static void test_spec_element_count_and_device_memory_limits(void) {
  expect_error(
      "tensors:\n  x: {shape: [4294967296, 4294967296, 4], role: input}\n"
      "ops:\n  - {op: relu, in: [x], out: y}\n",
      "2:3", "the element count overflows");
  recap__diag diag = {0};
  recap__spec *spec = NULL;
  const char *text =
      "tensors:\n  x: {shape: [1024, 1024], role: input}\nops:\n  - {op: relu, in: [x], out: y}\n";
  CHECK_STATUS(load_as(text, "t.yaml", NULL, 1 << 20, &spec, &diag), RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_TRUE(has_error(&diag, "t.yaml:2:3: error: ",
                           "needs 4194304 bytes, more than the device memory (1048576 bytes)"));
  recap__diag_free(&diag);
  CHECK_OK(load_as(text, "t.yaml", NULL, 0, &spec, NULL)); /* 0: no limit */
  recap__spec_destroy(spec);
}

static void test_spec_empty_text_is_an_error(void) {
  expect_error("", "1:1", "the spec is empty");
  expect_error("# only a comment\n", "1:1", "the spec is empty");
  expect_error("- a\n- b\n", "1:1", "the spec must be a mapping");
}

static void test_spec_non_utf8_byte_is_positioned(void) {
  expect_error(
      "name: ok\nops:\n  - {op: r\xff"
      "elu}\n",
      "3:11", "invalid leading UTF-8 octet (byte 0xff)");
}

/* Init values are checked in the tensor's dtype, not in double: 1e10 is finite, its f16 is
 * inf. f16's largest finite value is 65504; 65520 is where rounding reaches 2^16 (inf). */
static void test_spec_init_values_must_stay_finite_in_the_tensor_dtype(void) {
  expect_error(
      "tensors:\n  w: {shape: [4], role: param, dtype: f16, value: 1.0e10}\n"
      "ops: [{op: relu, in: w, out: y}]\n",
      "2:51", "value: 1e+10 becomes inf in f16 (its largest finite value is 65504)");
  expect_error(
      "tensors:\n  w: {shape: [4], role: param, dtype: f16, value: -65520}\n"
      "ops: [{op: relu, in: w, out: y}]\n",
      "2:51", "becomes -inf in f16");
  expect_error(
      "tensors:\n  w: {shape: [4], role: param, dtype: bf16, init: normal, "
      "mean: 3.4e38}\nops: [{op: relu, in: w, out: y}]\n",
      "2:65", "mean: 3.4e+38 becomes inf in bf16");
  expect_error(
      "tensors:\n  w: {shape: [4], role: param, dtype: f16, init: uniform, low: 0, "
      "high: 1e5}\nops: [{op: relu, in: w, out: y}]\n",
      "2:73", "high: 100000 becomes inf in f16");
  expect_error(
      "tensors:\n  p: {role: scalar, value: 3000000000}\n"
      "ops: [{op: relu, in: p, out: y}]\n",
      "2:28", "value: 3e+09 is not an i32 value");
  expect_error(
      "tensors:\n  p: {role: scalar, value: 1.5}\n"
      "ops: [{op: relu, in: p, out: y}]\n",
      "2:28", "value: 1.5 is not an i32 value");
  recap__spec *spec = NULL;
  const char *ok =
      "tensors:\n  w: {shape: [4], role: param, dtype: f16, value: 65519}\n"
      "  p: {role: scalar, value: -2147483648}\n"
      "ops: [{op: relu, in: w, out: y}, {op: copy, in: p, out: z}]\n";
  recap__diag diag = {0};
  CHECK_OK(load(ok, NULL, &spec, &diag));
  if (diag.count) dump(&diag);
  recap__spec_destroy(spec);
  recap__diag_free(&diag);
}

/* Escapes that decode to control characters are refused at the string (any string may be
 * printed); tab and newline stay allowed, except in the one-line `name:`. */
static void test_spec_escaped_control_characters_are_refused_at_the_string(void) {
  expect_error("name: \"x\\e[2Jy\"\nops: []\n", "1:7", "control character U+001B");
  expect_error("name: \"x\\by\"\nops: []\n", "1:7", "control character U+0008");
  expect_error("name: \"x\\u0085y\"\nops: []\n", "1:7", "control character U+0085");
  expect_error("name: \"x\\x7fy\"\nops: []\n", "1:7", "control character U+007F");
  expect_error("ops:\n  - {op: relu, in: x, out: \"y\\ry\"}\n", "2:28", "control character U+000D");
  expect_error("name: \"a\\tb\"\nops: []\n", "1:7", "name: must be one line of text");
  /* Nothing that breaks or reorders a terminal's line, and one short line at most. */
  expect_error("name: \"a\\u2028b\"\nops: []\n", "1:7", "name: holds U+2028");
  expect_error("name: \"a\\u202Eb\"\nops: []\n", "1:7", "name: holds U+202E");
  char long_name[400];
  snprintf(long_name, sizeof long_name, "name: %0300d\nops: []\n", 1);
  expect_error(long_name, "1:7", "name: 300 bytes, more than 256");
  /* A long tensor name is quoted cut, and says so. */
  char long_tensor[700];
  snprintf(long_tensor, sizeof long_tensor,
           "tensors:\n  a%0299d: {shape: [2], role: input}\nops: []\n", 1);
  expect_error(long_tensor, "2:3", "...' is not a valid name");
  expect_error(long_tensor, "2:3", "at most 256 bytes; this one has 300)");
  /* Tab and newline inside an expression are whitespace. */
  const char *text =
      "name: tabs\ntensors:\n  x: {shape: [4], role: input}\n"
      "ops:\n  - {op: expr, in: [x], out: y, expr: \"x *\\t2.0\\n+ 1.0\"}\n";
  recap__spec *spec = NULL;
  CHECK_OK(load(text, NULL, &spec, NULL));
  recap__spec_destroy(spec);
}

/* ---- limits ---- */

static void test_limit_nesting_depth(void) {
  char text[512] = "ops: ";
  for (int i = 0; i < 100; ++i) strcat(text, "[");
  for (int i = 0; i < 100; ++i) strcat(text, "]");
  strcat(text, "\n");
  /* The top mapping is level 1, so the 64th '[' (column 6 + 63) is the 65th level. */
  expect_error(text, "1:69", "nests deeper than 64 levels");
}

static void test_limit_alias_bomb_fails_fast(void) {
  /* Nine levels of ten aliases each would expand to 10^9 nodes. */
  char text[4096] = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level < 9; ++level) {
    char line[256];
    int n = snprintf(line, sizeof line, "%c: &%c [", 'a' + level, 'a' + level);
    for (int i = 0; i < 10; ++i)
      n += snprintf(line + n, sizeof line - (size_t)n, "%s*%c", i ? ", " : "", 'a' + level - 1);
    snprintf(line + n, sizeof line - (size_t)n, "]\n");
    strcat(text, line);
  }
  clock_t start = clock();
  expect_error(text, "4:36", "YAML aliases expand to more than 10000 nodes");
  CU_ASSERT_TRUE((double)(clock() - start) / CLOCKS_PER_SEC < 0.5);
}

static void test_limit_alias_count(void) {
  char text[2048] = "a: &a 1\nb: [";
  for (int i = 0; i < 101; ++i) strcat(text, i ? ", *a" : "*a");
  strcat(text, "]\n");
  expect_error(text, "2:405", "more than 100 YAML aliases");
  expect_error("a: *nothing\n", "1:4", "refers to no anchor");
}

static void test_limit_scalar_length_and_node_count(void) {
  recap__spec_options opts = {.yaml = {.max_scalar_bytes = 8, .max_nodes = 10}};
  recap__diag diag = {0};
  recap__spec *spec = NULL;
  CHECK_STATUS(load("name: abcdefghijk\n", &opts, &spec, &diag), RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_TRUE(
      has_error(&diag, "t.yaml:1:7: error: ", "a scalar of 11 bytes exceeds the limit of 8"));
  recap__diag_free(&diag);
  CHECK_STATUS(load("ops: [a, b, c, d, e, f, g, h, i, j]\n", &opts, &spec, &diag),
               RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_TRUE(has_error(&diag, "t.yaml:1:", "more than 10 YAML nodes"));
  recap__diag_free(&diag);
}

static void test_limit_file_size_tensor_and_op_counts(void) {
  recap__spec_options opts = {.yaml = {.max_file_bytes = 16}, .max_tensors = 2, .max_ops = 1};
  recap__diag diag = {0};
  recap__spec *spec = NULL;
  CHECK_STATUS(load("name: a-long-name-here\n", &opts, &spec, &diag), RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_TRUE(has_error(&diag, "t.yaml:1:1: error: ", "larger than the limit of 16 bytes"));
  recap__diag_free(&diag);
  opts.yaml.max_file_bytes = 0;
  CHECK_STATUS(load("tensors:\n  a: {shape: [1], role: input}\n  b: {shape: [1], role: input}\n"
                    "  c: {shape: [1], role: input}\nops: [{op: relu, in: a, out: y}, {op: relu, "
                    "in: b, out: z}]\n",
                    &opts, &spec, &diag),
               RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_TRUE(
      has_error(&diag, "t.yaml:2:3: error: ", "declares 3 tensors, more than the limit of 2"));
  CU_ASSERT_TRUE(
      has_error(&diag, "t.yaml:5:6: error: ", "the spec has 2 ops, more than the limit of 1"));
  recap__diag_free(&diag);
}

/* ---- files ---- */

static char tmp_dir[512];

static void write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(data, 1, len, f), len);
  fclose(f);
}

static void make_tmp_dir(void) {
  const char *base = getenv("TEST_TMPDIR");
  snprintf(tmp_dir, sizeof tmp_dir, "%s/spec_test_XXXXXX", base ? base : "/tmp");
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(tmp_dir));
}

static void test_files_resolve_relative_to_the_spec_and_check_size(void) {
  make_tmp_dir();
  char path[700], sub[600];
  snprintf(sub, sizeof sub, "%s/specs", tmp_dir);
  CU_ASSERT_EQUAL_FATAL(mkdir(sub, 0700), 0);
  float w[16] = {0};
  snprintf(path, sizeof path, "%s/w.bin", tmp_dir);
  write_file(path, w, sizeof w);
  const char *text =
      "tensors:\n  w: {shape: [4, 4], role: param, init: file, path: ../w.bin}\n"
      "ops:\n  - {op: relu, in: [w], out: y}\n";
  snprintf(path, sizeof path, "%s/spec.yaml", sub);
  write_file(path, text, strlen(text));
  recap__spec *spec = NULL;
  recap__diag diag = {0};
  CHECK_OK(recap__spec_load_file(path, NULL, &spec, &diag));
  if (spec) {
    char want[700];
    snprintf(want, sizeof want, "%s/w.bin", tmp_dir);
    char *real = realpath(want, NULL);
    CU_ASSERT_STRING_EQUAL(spec->tensors[0].init.path, real);
    free(real);
  }
  recap__spec_destroy(spec);
  spec = NULL;

  /* Under a base directory, '..' out of it is refused; so is an absolute path. */
  recap__spec_options opts = {.base_dir = sub};
  CHECK_STATUS(recap__spec_load_file(path, &opts, &spec, &diag), RECAP_STATUS_SPEC_ERROR);
  char prefix[800];
  snprintf(prefix, sizeof prefix, "%s:2:53: error: ", path);
  CU_ASSERT_TRUE(has_error(&diag, prefix, "path '../w.bin' escapes the base directory"));
  recap__diag_free(&diag);
  char abs_text[1024];
  snprintf(abs_text, sizeof abs_text,
           "tensors:\n  w: {shape: [4, 4], role: param, init: file, path: %s/w.bin}\n"
           "ops:\n  - {op: relu, in: [w], out: y}\n",
           tmp_dir);
  CHECK_STATUS(load_as(abs_text, "s", &opts, 0, &spec, &diag), RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_TRUE(has_error(&diag, "s:2:53: error: ", "escapes the base directory"));
  recap__diag_free(&diag);

  /* A symbolic link inside the base that points outside it is refused too. */
  char link[700], target[700];
  snprintf(link, sizeof link, "%s/link.bin", sub);
  snprintf(target, sizeof target, "%s/w.bin", tmp_dir);
  CU_ASSERT_EQUAL(symlink(target, link), 0);
  const char *link_text =
      "tensors:\n  w: {shape: [4, 4], role: param, path: link.bin}\n"
      "ops:\n  - {op: relu, in: [w], out: y}\n";
  CHECK_STATUS(load_as(link_text, "s", &opts, 0, &spec, &diag), RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_TRUE(has_error(&diag, "s:2:41: error: ", "escapes the base directory"));
  recap__diag_free(&diag);

  /* Missing and wrongly sized files. */
  const char *missing =
      "tensors:\n  w: {shape: [4, 4], role: param, path: nope.bin}\n"
      "ops:\n  - {op: relu, in: [w], out: y}\n";
  CHECK_STATUS(load_as(missing, "s", &opts, 0, &spec, &diag), RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_TRUE(has_error(&diag, "s:2:41: error: ", "No such file or directory"));
  recap__diag_free(&diag);
  snprintf(abs_text, sizeof abs_text,
           "tensors:\n  w: {shape: [4, 5], role: param, path: %s/w.bin}\n"
           "ops:\n  - {op: relu, in: [w], out: y}\n",
           tmp_dir);
  CHECK_STATUS(load_as(abs_text, "s", NULL, 0, &spec, &diag), RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_TRUE(
      has_error(&diag, "s:2:41: error: ", "has 64 bytes, but tensor 'w' [4, 5] f32 needs 80"));
  recap__diag_free(&diag);
}

/* A safetensors file: 8-byte little-endian header length, the JSON header, then `bytes` of
 * data (a NaN pattern: the check must not look at the values). */
static void write_safetensors(const char *path, const char *header, size_t bytes) {
  size_t hl = strlen(header);
  unsigned char *buf = malloc(8 + hl + bytes);
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
  for (int i = 0; i < 8; ++i) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, header, hl);
  memset(buf + 8 + hl, 0xff, bytes);
  write_file(path, buf, 8 + hl + bytes);
  free(buf);
}

/* The header of a .safetensors file is read when the spec is loaded: the key, dtype, shape and
 * data offsets the binder would use; each problem is an error at the spec's `path:`. */
static void test_safetensors_headers_are_checked_at_load_at_the_path(void) {
  make_tmp_dir();
  char path[700], text[1024];
  snprintf(path, sizeof path, "%s/w.safetensors", tmp_dir);
  const char *spec_fmt =
      "tensors:\n  w: {shape: [4, 4], role: param, path: %s/w.safetensors%s}\n"
      "ops:\n  - {op: relu, in: [w], out: y}\n";
  recap__spec *spec = NULL;
  recap__diag diag = {0};
  write_safetensors(path,
                    "{\"w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,64]},"
                    "\"v\":{\"dtype\":\"F16\",\"shape\":[4,4],\"data_offsets\":[64,96]}}",
                    96);
  snprintf(text, sizeof text, spec_fmt, tmp_dir, "");
  CHECK_OK(load_as(text, "s", NULL, 0, &spec, &diag));
  recap__spec_destroy(spec);
  spec = NULL;
  /* `key:` picks another tensor of the file, checked against this tensor's dtype. */
  snprintf(text, sizeof text, spec_fmt, tmp_dir, ", key: v");
  CHECK_STATUS(load_as(text, "s", NULL, 0, &spec, &diag), RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_TRUE(
      has_error(&diag, "s:2:41: error: ", "tensor 'v' has dtype F16, the spec says f32"));
  recap__diag_free(&diag);

  static const struct {
    const char *header;
    const char *mention;
  } bad[] = {
      {"{\"v\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,64]}}", "no tensor 'w'"},
      {"{\"w\":{\"dtype\":\"BF16\",\"shape\":[4,4],\"data_offsets\":[0,32]}}",
       "has dtype BF16, the spec says f32"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,8],\"data_offsets\":[0,64]}}", "another shape"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,128]}}", "data_offsets"},
      {"{\"w\": not json", "header is not valid JSON"},
  };
  snprintf(text, sizeof text, spec_fmt, tmp_dir, "");
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    write_safetensors(path, bad[i].header, 64);
    CHECK_STATUS(load_as(text, "s", NULL, 0, &spec, &diag), RECAP_STATUS_SPEC_ERROR);
    if (!has_error(&diag, "s:2:41: error: ", bad[i].mention)) dump(&diag);
    CU_ASSERT_TRUE(has_error(&diag, "s:2:41: error: ", bad[i].mention));
    recap__diag_free(&diag);
  }
  /* A header length that runs past the end of the file. */
  unsigned char huge[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0};
  write_file(path, huge, sizeof huge);
  CHECK_STATUS(load_as(text, "s", NULL, 0, &spec, &diag), RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_TRUE(has_error(&diag, "s:2:41: error: ", "header length 65535 is outside the file"));
  recap__diag_free(&diag);
  unlink(path);
}

/* A param whose first axis is the bucketed dim is allocated, and read from its file, with the
 * largest bucket's shape: the file must match that one, not every bucket. */
static void test_a_bucketed_param_file_is_checked_against_the_largest_bucket(void) {
  make_tmp_dir();
  char path[700], text[1024];
  snprintf(path, sizeof path, "%s/w.bin", tmp_dir);
  float w[8] = {0};
  write_file(path, w, sizeof w); /* [2, 4] f32: the bucket B = 2 */
  snprintf(text, sizeof text,
           "dims: {B: [1, 2]}\n"
           "tensors:\n  w: {shape: [B, 4], role: param, path: %s}\n"
           "ops:\n  - {op: relu, in: [w], out: y}\n",
           path);
  recap__spec *spec = NULL;
  recap__diag diag = {0};
  CHECK_OK(load_as(text, "s", NULL, 0, &spec, &diag));
  if (diag.count) dump(&diag);
  recap__spec_destroy(spec);
  spec = NULL;
  write_file(path, w, sizeof w / 2); /* [1, 4]: only the smaller bucket's */
  CHECK_STATUS(load_as(text, "s", NULL, 0, &spec, &diag), RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_TRUE(has_error(&diag, "s:3:41: error: ",
                           "has 16 bytes, but tensor 'w' [2, 4] f32 needs 32 (raw little-endian) "
                           "(with B = 2)"));
  CU_ASSERT_EQUAL(diag.count, 1);
  recap__diag_free(&diag);
  unlink(path);
}

static void test_load_file_that_does_not_exist_is_io_error(void) {
  recap__spec *spec = NULL;
  CHECK_STATUS(recap__spec_load_file("/nonexistent/spec.yaml", NULL, &spec, NULL),
               RECAP_STATUS_IO_ERROR);
  CHECK_ERROR_MENTIONS("/nonexistent/spec.yaml");
  CU_ASSERT_PTR_NULL(spec);
}

/* The callback of test_for_each_yaml: loads one example and builds every bucket's IR; counts
 * it in *loaded (an int) when it loads. */
static void load_example(const char *path, const char *file, void *loaded) {
  (void)file;
  recap__model *m = NULL;
  recap__diag diag = {0};
  recap__load_options opts = {.device_memory_bytes = 80ull << 30, .no_fusion = true};
  recap_status st = recap__load_file(path, &opts, &m, &diag);
  if (st != RECAP_OK) {
    fprintf(stderr, "\n  %s:\n", path);
    dump(&diag);
  }
  CU_ASSERT_EQUAL(st, RECAP_OK);
  for (size_t b = 0; m && b < m->num_buckets; ++b) {
    const recap__ir *ir = m->irs[b];
    CU_ASSERT_TRUE(ir && ir->num_ops > 0 && ir->num_outputs > 0);
    for (size_t i = 0; ir && i < ir->num_tensors; ++i) CU_ASSERT_TRUE(ir->tensors[i].ndim > 0);
  }
  *(int *)loaded += m != NULL;
  recap__model_free_loaded(m);
  recap__diag_free(&diag);
}

static void test_every_example_spec_loads_and_builds_every_bucket(void) {
  int loaded = 0;
  test_for_each_yaml("specs", load_example, &loaded);
  CU_ASSERT_TRUE(loaded >= 6);
}

int main(void) {
  CU_pSuite s = test_add_suite("spec", NULL, NULL);
  CU_ADD_TEST(s, test_spec_parses_every_top_level_key);
  CU_ADD_TEST(s, test_spec_defaults_apply_when_keys_are_absent);
  CU_ADD_TEST(s, test_spec_integer_input_without_init_starts_at_zeros);
  CU_ADD_TEST(s, test_spec_accepts_pytorch_dtype_names);
  CU_ADD_TEST(s, test_spec_anchors_and_aliases_within_limits_work);
  CU_ADD_TEST(s, test_spec_merge_keys_take_the_pairs_a_mapping_lacks);
  CU_ADD_TEST(s, test_ir_infers_shapes_dtypes_and_graph_facts);
  CU_ADD_TEST(s, test_ir_bucket_out_of_range_is_invalid_argument);
  CU_ADD_TEST(s, test_ir_kv_append_output_aliases_the_cache);
  CU_ADD_TEST(s, test_spec_reports_all_errors_in_one_pass_with_positions);
  CU_ADD_TEST(s, test_spec_yaml_syntax_error_is_positioned);
  CU_ADD_TEST(s, test_spec_wrong_types_name_expected_and_found);
  CU_ADD_TEST(s, test_spec_dims_must_be_positive_and_ascending);
  CU_ADD_TEST(s, test_spec_shape_and_dtype_mismatches_are_positioned);
  CU_ADD_TEST(s, test_spec_duplicates_are_reported_at_the_second_definition);
  CU_ADD_TEST(s, test_spec_unused_op_output_is_an_error_when_outputs_are_listed);
  CU_ADD_TEST(s, test_spec_unknown_attribute_lists_the_op_keys);
  CU_ADD_TEST(s, test_spec_rope_takes_float_theta_and_llama3_scaling);
  CU_ADD_TEST(s, test_spec_bucketed_dim_reduced_over_is_rejected);
  CU_ADD_TEST(s, test_spec_error_in_one_bucket_names_the_bucket);
  CU_ADD_TEST(s, test_spec_element_count_and_device_memory_limits);
  CU_ADD_TEST(s, test_spec_empty_text_is_an_error);
  CU_ADD_TEST(s, test_spec_non_utf8_byte_is_positioned);
  CU_ADD_TEST(s, test_spec_escaped_control_characters_are_refused_at_the_string);
  CU_ADD_TEST(s, test_spec_init_values_must_stay_finite_in_the_tensor_dtype);
  CU_ADD_TEST(s, test_limit_nesting_depth);
  CU_ADD_TEST(s, test_limit_alias_bomb_fails_fast);
  CU_ADD_TEST(s, test_limit_alias_count);
  CU_ADD_TEST(s, test_limit_scalar_length_and_node_count);
  CU_ADD_TEST(s, test_limit_file_size_tensor_and_op_counts);
  CU_ADD_TEST(s, test_files_resolve_relative_to_the_spec_and_check_size);
  CU_ADD_TEST(s, test_safetensors_headers_are_checked_at_load_at_the_path);
  CU_ADD_TEST(s, test_a_bucketed_param_file_is_checked_against_the_largest_bucket);
  CU_ADD_TEST(s, test_load_file_that_does_not_exist_is_io_error);
  CU_ADD_TEST(s, test_every_example_spec_loads_and_builds_every_bucket);
  return test_run_all();
}
