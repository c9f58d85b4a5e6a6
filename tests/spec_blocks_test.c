/*
 * spec_blocks_test.c: blocks in the spec language (engine/spec_blocks.c): a blocked spec
 * expands to what the hand-written flat spec says, op for op and value for value; errors
 * inside a block give the block's FILE:LINE:COL and the instance; the bounds hold.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/load.h"
#include "tests/test_util.h"

/* ---- helpers ---- */

static recap__model *load_model(const char *text, const recap__spec_options *opts,
                                recap__diag *diag) {
  recap__load_options lo = {.no_fusion = true};
  if (opts) lo.spec = *opts;
  recap__model *m = NULL;
  recap_status st = recap__load_string(text, strlen(text), "t.yaml", &lo, &m, diag);
  /* A caller that passes diag expects the errors; the others, a model. */
  if (st != RECAP_OK && !diag) fprintf(stderr, "\n  load failed: %s\n", recap_last_error());
  return st == RECAP_OK ? m : NULL;
}

static int has_error(const recap__diag *diag, const char *prefix, const char *needle) {
  for (size_t i = 0; i < diag->count; ++i)
    if (strncmp(diag->messages[i], prefix, strlen(prefix)) == 0 &&
        strstr(diag->messages[i], needle))
      return 1;
  return 0;
}

/* Loads text expecting SPEC_ERROR with an error that starts "t.yaml:POS: error: HEAD" and
 * mentions needle; returns the number of errors. */
static size_t expect_error_with(const char *text, const recap__spec_options *opts, const char *pos,
                                const char *head, const char *needle) {
  recap__load_options lo = {.no_fusion = true};
  if (opts) lo.spec = *opts;
  recap__diag diag = {0};
  recap__model *m = NULL;
  recap_status st = recap__load_string(text, strlen(text), "t.yaml", &lo, &m, &diag);
  char prefix[256];
  snprintf(prefix, sizeof prefix, "t.yaml:%s: error: %s", pos, head);
  int found = has_error(&diag, prefix, needle);
  if (st != RECAP_STATUS_SPEC_ERROR || !found) {
    fprintf(stderr, "\n  expected %s...%s, got %s:\n", prefix, needle, recap_status_name(st));
    for (size_t i = 0; i < diag.count; ++i) fprintf(stderr, "    | %s\n", diag.messages[i]);
  }
  CU_ASSERT_EQUAL(st, RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_PTR_NULL(m);
  CU_ASSERT_TRUE(found);
  size_t count = recap__diag_errors(&diag);
  recap__model_free_loaded(m);
  recap__diag_free(&diag);
  return count;
}

static size_t expect_error(const char *text, const char *pos, const char *head,
                           const char *needle) {
  return expect_error_with(text, NULL, pos, head, needle);
}

/* ---- expansion equals the flat spec ---- */

/* Three layers over two streams (x, and a running sum acc), with per-layer widths through
 * "F{i}", a shared outer tensor (gshared), every init kind a param takes, and attributes. */
static const char *const BLOCKED =
    "name: blocked\n"
    "device: host\n"
    "seed: 5\n"
    "dims: {B: [1, 2], D: 8, F0: 16, F1: 12, F2: 4}\n"
    "blocks:\n"
    "  layer:\n"
    "    input: [x, acc]\n"
    "    output: [y, acc_out]\n"
    "    tensors:\n"
    "      g:  {shape: [D], role: param, init: ones}\n"
    "      w1: {shape: [\"F{i}\", D], role: param}\n"
    "      b1: {shape: [\"F{i}\"], role: param, init: uniform, low: -0.1, high: 0.1}\n"
    "      w2: {shape: [D, \"F{i}\"], role: param, init: normal, std: 0.05}\n"
    "    ops:\n"
    "      - {op: rmsnorm, in: [x, g], out: xn, eps: 1.0e-5, name: norm}\n"
    "      - {op: linear, in: [xn, w1, b1], out: h, act: gelu, name: fc1}\n"
    "      - {op: linear, in: [h, w2], out: d, name: fc2}\n"
    "      - {op: mul, in: [d, gshared], out: ds, name: gate}\n"
    "      - {op: add, in: [x, ds], out: y, name: residual}\n"
    "      - {op: add, in: [acc, y], out: acc_out, name: accumulate}\n"
    "tensors:\n"
    "  x0: {shape: [B, D], role: input}\n"
    "  gshared: {shape: [D], role: param, init: normal, std: 1.0}\n"
    "  a0: {shape: [B, D], role: input}\n"
    "ops:\n"
    "  - {block: layer, count: 3, in: [x0, a0], out: [xL, aL], name: layers}\n"
    "  - {op: add, in: [xL, aL], out: out, name: final}\n"
    "outputs: [out]\n";

/* The same model written out by hand: block tensors after the top-level ones, instance by
 * instance; the last instance's outputs are the use's out: names. */
#define FLAT_LAYER_TENSORS(I)                              \
  "  layers." I                                            \
  ".g:  {shape: [D], role: param, init: ones}\n"           \
  "  layers." I ".w1: {shape: [F" I                        \
  ", D], role: param}\n"                                   \
  "  layers." I ".b1: {shape: [F" I                        \
  "], role: param, init: uniform, low: -0.1, high: 0.1}\n" \
  "  layers." I ".w2: {shape: [D, F" I "], role: param, init: normal, std: 0.05}\n"

static const char *const FLAT =
    "name: flat\n"
    "device: host\n"
    "seed: 5\n"
    "dims: {B: [1, 2], D: 8, F0: 16, F1: 12, F2: 4}\n"
    "tensors:\n"
    "  x0: {shape: [B, D], role: input}\n"
    "  gshared: {shape: [D], role: param, init: normal, std: 1.0}\n"
    "  a0: {shape: [B, D], role: input}\n" FLAT_LAYER_TENSORS("0") FLAT_LAYER_TENSORS("1")
        FLAT_LAYER_TENSORS("2")
    "ops:\n"
    "  - {op: rmsnorm, in: [x0, layers.0.g], out: layers.0.xn, eps: 1.0e-5, name: layers.0.norm}\n"
    "  - {op: linear, in: [layers.0.xn, layers.0.w1, layers.0.b1], out: layers.0.h, act: gelu,"
    " name: layers.0.fc1}\n"
    "  - {op: linear, in: [layers.0.h, layers.0.w2], out: layers.0.d, name: layers.0.fc2}\n"
    "  - {op: mul, in: [layers.0.d, gshared], out: layers.0.ds, name: layers.0.gate}\n"
    "  - {op: add, in: [x0, layers.0.ds], out: layers.0.y, name: layers.0.residual}\n"
    "  - {op: add, in: [a0, layers.0.y], out: layers.0.acc_out, name: layers.0.accumulate}\n"
    "  - {op: rmsnorm, in: [layers.0.y, layers.1.g], out: layers.1.xn, eps: 1.0e-5,"
    " name: layers.1.norm}\n"
    "  - {op: linear, in: [layers.1.xn, layers.1.w1, layers.1.b1], out: layers.1.h, act: gelu,"
    " name: layers.1.fc1}\n"
    "  - {op: linear, in: [layers.1.h, layers.1.w2], out: layers.1.d, name: layers.1.fc2}\n"
    "  - {op: mul, in: [layers.1.d, gshared], out: layers.1.ds, name: layers.1.gate}\n"
    "  - {op: add, in: [layers.0.y, layers.1.ds], out: layers.1.y, name: layers.1.residual}\n"
    "  - {op: add, in: [layers.0.acc_out, layers.1.y], out: layers.1.acc_out,"
    " name: layers.1.accumulate}\n"
    "  - {op: rmsnorm, in: [layers.1.y, layers.2.g], out: layers.2.xn, eps: 1.0e-5,"
    " name: layers.2.norm}\n"
    "  - {op: linear, in: [layers.2.xn, layers.2.w1, layers.2.b1], out: layers.2.h, act: gelu,"
    " name: layers.2.fc1}\n"
    "  - {op: linear, in: [layers.2.h, layers.2.w2], out: layers.2.d, name: layers.2.fc2}\n"
    "  - {op: mul, in: [layers.2.d, gshared], out: layers.2.ds, name: layers.2.gate}\n"
    "  - {op: add, in: [layers.1.y, layers.2.ds], out: xL, name: layers.2.residual}\n"
    "  - {op: add, in: [layers.1.acc_out, xL], out: aL, name: layers.2.accumulate}\n"
    "  - {op: add, in: [xL, aL], out: out, name: final}\n"
    "outputs: [out]\n";

static void check_same_attrs(const recap__op_attrs *a, const recap__op_attrs *b) {
  CU_ASSERT_EQUAL(a->alpha, b->alpha);
  CU_ASSERT_EQUAL(a->beta, b->beta);
  CU_ASSERT_EQUAL(a->eps, b->eps);
  CU_ASSERT_EQUAL(a->scale, b->scale);
  CU_ASSERT_EQUAL(a->value, b->value);
  CU_ASSERT_EQUAL(a->act, b->act);
  CU_ASSERT_EQUAL(a->causal, b->causal);
  CU_ASSERT_EQUAL(a->dim, b->dim);
  CU_ASSERT_EQUAL(a->num_sizes, b->num_sizes);
  CU_ASSERT_EQUAL(memcmp(a->sizes, b->sizes, sizeof a->sizes), 0);
  CU_ASSERT_EQUAL(a->dtype, b->dtype);
}

/* Every bucket's IR of the two models: the same tensors (index, name, role, dtype, shape,
 * init) and the same ops (kind, name, inputs, outputs, attributes, stream), in order. */
static void check_same_irs(const recap__model *x, const recap__model *y) {
  CU_ASSERT_EQUAL_FATAL(x->num_buckets, y->num_buckets);
  for (size_t b = 0; b < x->num_buckets; ++b) {
    const recap__ir *p = x->irs[b], *q = y->irs[b];
    CU_ASSERT_EQUAL_FATAL(p->num_tensors, q->num_tensors);
    for (size_t i = 0; i < p->num_tensors; ++i) {
      const recap__ir_tensor *s = &p->tensors[i], *t = &q->tensors[i];
      CU_ASSERT_STRING_EQUAL(s->name, t->name);
      CU_ASSERT_EQUAL(s->role, t->role);
      CU_ASSERT_EQUAL(s->dtype, t->dtype);
      CU_ASSERT_EQUAL_FATAL(s->ndim, t->ndim);
      CU_ASSERT_EQUAL(memcmp(s->shape, t->shape, sizeof s->shape), 0);
      CU_ASSERT_EQUAL(s->init.kind, t->init.kind);
      CU_ASSERT_EQUAL(s->init.std, t->init.std);
      CU_ASSERT_EQUAL(s->init.low, t->init.low);
      CU_ASSERT_EQUAL(s->init.high, t->init.high);
      CU_ASSERT_EQUAL(s->producer, t->producer);
      CU_ASSERT_EQUAL(s->num_consumers, t->num_consumers);
      CU_ASSERT_EQUAL(s->is_output, t->is_output);
    }
    CU_ASSERT_EQUAL_FATAL(p->num_ops, q->num_ops);
    for (size_t i = 0; i < p->num_ops; ++i) {
      const recap__ir_op *s = &p->ops[i], *t = &q->ops[i];
      CU_ASSERT_PTR_EQUAL(s->def, t->def);
      CU_ASSERT_STRING_EQUAL(s->name, t->name);
      CU_ASSERT_EQUAL(s->stream, t->stream);
      CU_ASSERT_EQUAL_FATAL(s->num_inputs, t->num_inputs);
      CU_ASSERT_EQUAL_FATAL(s->num_outputs, t->num_outputs);
      for (int j = 0; j < s->num_inputs; ++j) CU_ASSERT_EQUAL(s->inputs[j], t->inputs[j]);
      for (int j = 0; j < s->num_outputs; ++j) CU_ASSERT_EQUAL(s->outputs[j], t->outputs[j]);
      check_same_attrs(&s->attrs, &t->attrs);
    }
    CU_ASSERT_EQUAL_FATAL(p->num_outputs, q->num_outputs);
    for (size_t i = 0; i < p->num_outputs; ++i) CU_ASSERT_EQUAL(p->outputs[i], q->outputs[i]);
  }
}

static void test_blocks_expand_to_the_flat_spec_op_for_op(void) {
  recap__model *blocked = load_model(BLOCKED, NULL, NULL), *flat = load_model(FLAT, NULL, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(blocked);
  CU_ASSERT_PTR_NOT_NULL_FATAL(flat);
  CU_ASSERT_EQUAL(blocked->spec->num_ops, 19);
  CU_ASSERT_EQUAL(blocked->spec->num_declared, 15);
  check_same_irs(blocked, flat);
  /* Positions inside the block say which instance they are; top-level ones do not. */
  const recap__ir *ir = blocked->irs[0];
  CU_ASSERT_STRING_EQUAL(ir->ops[7].name, "layers.1.fc1");
  CU_ASSERT_EQUAL(ir->ops[7].pos.line, 16);
  CU_ASSERT_EQUAL(ir->ops[7].pos.col, 9);
  CU_ASSERT_STRING_EQUAL(ir->ops[7].pos.instance, "layers.1 (block 'layer', i = 1)");
  CU_ASSERT_PTR_NULL(ir->ops[18].pos.instance);
  recap__model_free_loaded(blocked);
  recap__model_free_loaded(flat);
}

/* Copies a whole tensor out of a pipeline (its largest bucket). */
static void *copy_all(recap_pipeline *p, const char *name, size_t *bytes) {
  recap_tensor t;
  CHECK_OK(recap_pipeline_tensor(p, name, &t));
  *bytes = recap_dtype_size(t.dtype);
  for (int d = 0; d < t.ndim; ++d) *bytes *= (size_t)t.shape[d];
  void *host = malloc(*bytes);
  CU_ASSERT_PTR_NOT_NULL_FATAL(host);
  CHECK_OK(recap_pipeline_copy_out(p, name, host, *bytes, 0));
  return host;
}

static void test_blocked_and_flat_pipelines_compute_the_same_values(void) {
  recap_pipeline_options o = {
      .struct_size = sizeof o, .override_device = 1, .device = {RECAP_BACKEND_HOST, 0}};
  recap_pipeline *blocked = NULL, *flat = NULL;
  CHECK_OK(recap_pipeline_create_string(BLOCKED, strlen(BLOCKED), "blocked.yaml", &o, &blocked));
  CHECK_OK(recap_pipeline_create_string(FLAT, strlen(FLAT), "flat.yaml", &o, &flat));
  /* Params are drawn by tensor index from the same seed: the same values. */
  const char *params[] = {"gshared", "layers.0.w1", "layers.1.b1", "layers.2.w2"};
  for (size_t i = 0; i < sizeof params / sizeof params[0]; ++i) {
    size_t nb, nf;
    void *vb = copy_all(blocked, params[i], &nb), *vf = copy_all(flat, params[i], &nf);
    CU_ASSERT_EQUAL(nb, nf);
    CU_ASSERT_EQUAL(memcmp(vb, vf, nb), 0);
    free(vb);
    free(vf);
  }
  float x[2 * 8], a[2 * 8];
  for (int i = 0; i < 16; ++i) {
    x[i] = (float)((i * 37) % 17) / 8.0f - 1.0f;
    a[i] = (float)((i * 11) % 7) / 4.0f - 0.75f;
  }
  recap_pipeline *both[2] = {blocked, flat};
  for (int k = 0; k < 2; ++k) {
    CHECK_OK(recap_pipeline_copy_in(both[k], "x0", x, sizeof x, 2));
    CHECK_OK(recap_pipeline_copy_in(both[k], "a0", a, sizeof a, 2));
    CHECK_OK(recap_pipeline_run(both[k], 2));
  }
  float yb[16], yf[16];
  CHECK_OK(recap_pipeline_copy_out(blocked, "out", yb, sizeof yb, 2));
  CHECK_OK(recap_pipeline_copy_out(flat, "out", yf, sizeof yf, 2));
  CU_ASSERT_EQUAL(memcmp(yb, yf, sizeof yb), 0);
  double abs_sum = 0;
  for (int i = 0; i < 16; ++i) abs_sum += yb[i] < 0 ? -yb[i] : yb[i];
  CU_ASSERT_TRUE(abs_sum > 0); /* not a comparison of zeros */
  recap_pipeline_destroy(blocked);
  recap_pipeline_destroy(flat);
}

/* ---- names, counts and reads ---- */

static const char *const SMALL =
    "device: host\n"
    "dims: {D: 4, L: 3}\n"
    "blocks:\n"
    "  layer:\n"
    "    input: x\n"
    "    output: y\n"
    "    tensors:\n"
    "      w: {shape: [D, D], role: param}\n"
    "    ops:\n"
    "      - {op: linear, in: [x, w], out: h}\n"
    "      - {op: expr, in: [h, x], out: y, expr: \"h * sigmoid(x) + in1\"}\n"
    "tensors:\n"
    "  x0: {shape: [2, D], role: input}\n"
    "ops:\n"
    "  - {block: layer, count: L, in: x0, out: y, name: stack}\n";

static void test_unnamed_block_ops_are_named_after_their_instance(void) {
  recap__model *m = load_model(SMALL, NULL, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  const recap__ir *ir = m->irs[0];
  CU_ASSERT_EQUAL_FATAL(ir->num_ops, 6);
  CU_ASSERT_STRING_EQUAL(ir->ops[0].name, "stack.0.linear#0");
  CU_ASSERT_STRING_EQUAL(ir->ops[3].name, "stack.1.expr#1");
  CU_ASSERT_STRING_EQUAL(ir->ops[5].name, "stack.2.expr#1");
  /* The expression names its inputs as the block writes them; the last output is `y`. */
  CU_ASSERT_PTR_NOT_NULL(ir->ops[3].attrs.expr);
  CU_ASSERT_STRING_EQUAL(ir->tensors[ir->ops[3].outputs[0]].name, "stack.1.y");
  CU_ASSERT_STRING_EQUAL(ir->tensors[ir->ops[5].outputs[0]].name, "y");
  CU_ASSERT_STRING_EQUAL(ir->tensors[ir->ops[2].inputs[0]].name, "stack.0.y");
  recap__model_free_loaded(m);
}

static void test_count_may_be_a_dim_that_the_caller_overrides(void) {
  const char *dims[] = {"L=5", NULL};
  recap__spec_options opts = {.dims = dims};
  recap__model *m = load_model(SMALL, &opts, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  CU_ASSERT_EQUAL(m->irs[0]->num_ops, 10);
  CU_ASSERT_NOT_EQUAL(recap__ir_find_tensor(m->irs[0], "stack.4.w"), -1);
  CU_ASSERT_EQUAL(recap__ir_find_tensor(m->irs[0], "stack.5.w"), -1);
  recap__model_free_loaded(m);
}

static void test_index_template_names_files_and_outer_tensors(void) {
  char dir[512];
  const char *base = getenv("TEST_TMPDIR");
  snprintf(dir, sizeof dir, "%s/blocks_XXXXXX", base ? base : "/tmp");
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
  float w[16];
  for (int layer = 0; layer < 3; ++layer) {
    for (int i = 0; i < 16; ++i) w[i] = (float)(layer * 100 + i);
    char path[600];
    snprintf(path, sizeof path, "%s/w%d.bin", dir, layer);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    /* Layer 2's file is one float short: its error must name layer 2 and the path. */
    CU_ASSERT_EQUAL(fwrite(w, sizeof(float), layer == 2 ? 15 : 16, f), layer == 2 ? 15u : 16u);
    fclose(f);
  }
  const char *text =
      "device: host\n"
      "blocks:\n"
      "  layer:\n"
      "    input: x\n"
      "    output: y\n"
      "    tensors:\n"
      "      w: {shape: [4, 4], role: param, path: \"w{i}.bin\"}\n"
      "    ops:\n"
      "      - {op: linear, in: [x, w], out: h}\n"
      "      - {op: add, in: [h, \"bias{i}\"], out: y}\n"
      "tensors:\n"
      "  x0: {shape: [2, 4], role: input}\n"
      "  bias0: {shape: [4], role: param}\n"
      "  bias1: {shape: [4], role: param}\n"
      "  bias2: {shape: [4], role: param}\n"
      "ops:\n"
      "  - {block: layer, count: 3, in: x0, out: y}\n";
  recap__spec_options opts = {.base_dir = dir};
  expect_error_with(text, &opts, "7:45", "in layer.2 (block 'layer', i = 2): ",
                    "has 60 bytes, but tensor 'layer.2.w' [4, 4] f32 needs 64");
  /* With two layers every file fits; layer 1 reads w1.bin and bias1. */
  char two[1200];
  snprintf(two, sizeof two, "%.*scount: 2, in: x0, out: y}\n", (int)(strstr(text, "count") - text),
           text);
  char *bias2 = strstr(two, "  bias2");
  memmove(bias2, strchr(bias2, '\n') + 1, strlen(strchr(bias2, '\n') + 1) + 1);
  recap__model *m = load_model(two, &opts, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  const recap__ir *ir = m->irs[0];
  int w1 = recap__ir_find_tensor(ir, "layer.1.w");
  CU_ASSERT_FATAL(w1 >= 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(ir->tensors[w1].init.path, "/w1.bin"));
  CU_ASSERT_STRING_EQUAL(ir->tensors[ir->ops[3].inputs[1]].name, "bias1");
  recap__model_free_loaded(m);
}

/* ---- errors inside a block ---- */

static const char *const SHAPES =
    "device: host\n"
    "dims: {D: 8, F0: 16, F1: 16, F2: 16, F3: 12}\n"
    "blocks:\n"
    "  layer:\n"
    "    input: x\n"
    "    output: y\n"
    "    tensors:\n"
    "      w1: {shape: [\"F{i}\", D], role: param}\n"
    "      w2: {shape: [D, 16], role: param}\n"
    "    ops:\n"
    "      - {op: linear, in: [x, w1], out: h, name: fc1}\n"
    "      - {op: linear, in: [h, w2], out: y, name: fc2}\n"
    "tensors:\n"
    "  x0: {shape: [2, D], role: input}\n"
    "ops:\n"
    "  - {block: layer, count: 4, in: x0, out: xL, name: layers}\n";

static void test_wrong_shape_in_layer_3_names_layer_3_at_the_block_op(void) {
  size_t errors = expect_error(SHAPES, "12:9", "in layers.3 (block 'layer', i = 3): ",
                               "op 'layers.3.fc2' (linear): input 'weight' has shape [8, 16]");
  CU_ASSERT_EQUAL(errors, 1);
}

static void test_a_mistake_in_a_block_is_reported_once_not_per_layer(void) {
  char text[2048];
  snprintf(text, sizeof text, "%s", SHAPES);
  /* Every layer's w2 is wrong now: one report, for the first layer. */
  char *w2 = strstr(text, "[D, 16]");
  memcpy(w2, "[D, 15]", 7);
  size_t errors = expect_error(
      text, "12:9", "in layers.0 (block 'layer', i = 0): ", "op 'layers.0.fc2' (linear)");
  CU_ASSERT_EQUAL(errors, 1);
}

static void test_unknown_key_inside_a_block_is_positioned_and_names_the_layer(void) {
  char text[2048];
  snprintf(text, sizeof text, "%s", SHAPES);
  char *fc2 = strstr(text, "name: fc2}");
  memcpy(fc2, "nme: fc2} ", 10);
  expect_error(text, "12:43", "in layers.0 (block 'layer', i = 0): ",
               "unknown key 'nme' in op 'layers.0.linear#1' (accepted: op, in, out, name");
}

static void test_bad_index_templates_are_positioned_at_the_brace(void) {
  char text[2048];
  snprintf(text, sizeof text, "%s", SHAPES);
  memcpy(strstr(text, "\"F{i}\""), "\"F{j}\"", 6);
  expect_error(text, "8:22", "in layers.0 (block 'layer', i = 0): ",
               "bad index template in 'F{j}': '{' starts {i}");
  snprintf(text, sizeof text, "%s", SHAPES);
  memcpy(strstr(text, "\"F{i}\""), "\"F{i \"", 6);
  expect_error(text, "8:22", "in layers.0", "bad index template in 'F{i '");
  /* {{ is a literal brace: "F{{i}" names the dim 'F{i}', which is not a name. */
  snprintf(text, sizeof text, "%s", SHAPES);
  char *at = strstr(text, "\"F{i}\"");
  memmove(at + 3, at + 2, strlen(at + 2) + 1);
  at[2] = '{';
  expect_error(text, "8:20", "in layers.0",
               "expected an integer or a dim name, got a quoted string 'F{i}'");
}

static void test_block_inputs_and_outputs_must_be_defined(void) {
  const char *no_output =
      "blocks:\n"
      "  layer:\n"
      "    input: x\n"
      "    ops:\n"
      "      - {op: relu, in: x, out: y}\n"
      "tensors:\n  x0: {shape: [4], role: input}\n"
      "ops:\n  - {block: layer, count: 2, in: x0, out: y}\n";
  expect_error(no_output, "2:3", "", "block 'layer' needs `output:`");
  const char *not_produced =
      "blocks:\n"
      "  layer:\n"
      "    input: x\n"
      "    output: z\n"
      "    ops:\n"
      "      - {op: relu, in: x, out: y}\n"
      "tensors:\n  x0: {shape: [4], role: input}\n"
      "ops:\n  - {block: layer, count: 2, in: x0, out: y}\n";
  expect_error(not_produced, "4:13", "", "block 'layer': output 'z' is not produced by any");
  const char *unknown_in =
      "blocks:\n"
      "  layer:\n"
      "    input: x\n"
      "    output: y\n"
      "    ops:\n"
      "      - {op: relu, in: x, out: y}\n"
      "tensors:\n  x0: {shape: [4], role: input}\n"
      "ops:\n  - {block: layer, count: 2, in: nope, out: y}\n"
      "  - {op: relu, in: x0, out: z}\n";
  /* Instance 0 reads the use's in:, so the error is there. */
  expect_error(unknown_in, "10:34", "", "op 'layer.0.relu#0': unknown tensor 'nope'");
  const char *input_written =
      "blocks:\n"
      "  layer:\n"
      "    input: x\n"
      "    output: y\n"
      "    ops:\n"
      "      - {op: relu, in: x, out: x}\n"
      "      - {op: relu, in: x, out: y}\n"
      "tensors:\n  x0: {shape: [4], role: input}\n"
      "ops:\n  - {block: layer, count: 2, in: x0, out: y}\n";
  expect_error(input_written, "6:32", "", "writes 'x', the block's input");
  const char *ports =
      "blocks:\n"
      "  layer:\n"
      "    input: [x, r]\n"
      "    output: y\n"
      "    ops:\n"
      "      - {op: add, in: [x, r], out: y}\n"
      "tensors:\n  x0: {shape: [4], role: input}\n"
      "ops:\n  - {block: layer, count: 2, in: x0, out: y}\n";
  expect_error(ports, "4:13", "", "block 'layer' has 2 inputs and 1 output");
}

static void test_block_uses_are_checked(void) {
  const char *base =
      "blocks:\n"
      "  layer:\n"
      "    input: x\n"
      "    output: y\n"
      "    ops:\n"
      "      - {op: relu, in: x, out: y}\n"
      "tensors:\n  x0: {shape: [4], role: input}\n"
      "ops:\n";
  char text[1024];
  snprintf(text, sizeof text, "%s  - {block: lyr, count: 2, in: x0, out: y}\n", base);
  expect_error(text, "10:13", "", "unknown block 'lyr' (blocks: layer)");
  snprintf(text, sizeof text, "%s  - {block: layer, count: 2, in: [x0, x0], out: y}\n", base);
  expect_error(text, "10:39", "", "block use 'layer': in: 'x0' is listed twice");
  snprintf(text, sizeof text, "%s  - {block: layer, count: 2, in: [x0, x1], out: y}\n", base);
  expect_error(text, "10:34", "", "in names 2 tensors, but block 'layer' has 1 input");
  snprintf(text, sizeof text, "%s  - {op: relu, in: x0, out: y}\n", base);
  expect_error(text, "2:3", "", "block 'layer' is declared but never used");
  snprintf(text, sizeof text,
           "%s  - {block: layer, count: 2, in: x0, out: a}\n"
           "  - {block: layer, count: 2, in: a, out: b}\n",
           base);
  expect_error(text, "11:13", "", "the name 'layer' is already used by the block use at op #0");
  snprintf(text, sizeof text,
           "%s  - {block: layer, count: 2, in: x0, out: a}\n"
           "  - {block: layer, count: 2, in: a, out: b, name: again}\n",
           base);
  recap__model *m = load_model(text, NULL, NULL);
  CU_ASSERT_PTR_NOT_NULL(m);
  if (m) CU_ASSERT_EQUAL(m->spec->num_ops, 4);
  recap__model_free_loaded(m);
  const char *nested =
      "blocks:\n"
      "  inner:\n"
      "    input: x\n"
      "    output: y\n"
      "    ops:\n"
      "      - {op: relu, in: x, out: y}\n"
      "  outer:\n"
      "    input: x\n"
      "    output: y\n"
      "    ops:\n"
      "      - {block: inner, count: 2, in: x, out: y}\n"
      "tensors:\n  x0: {shape: [4], role: input}\n"
      "ops:\n  - {block: outer, count: 2, in: x0, out: y}\n";
  expect_error(nested, "11:10", "", "blocks do not nest");
}

static void test_counts_are_bounded(void) {
  char text[2048];
  snprintf(text, sizeof text, "%s", SHAPES);
  memcpy(strstr(text, "count: 4"), "count: 0", 8);
  expect_error(text, "16:27", "", "count (an integer or a dim's name) must be between 1 and 4096");
  char *count = strstr(SHAPES, "count: 4");
  snprintf(text, sizeof text, "%.*scount: 4097%s", (int)(count - SHAPES), SHAPES, count + 8);
  expect_error(text, "16:27", "", "must be between 1 and 4096, got 4097");
  /* A dim as the count: one value, within the bound. */
  snprintf(text, sizeof text, "%s", SHAPES);
  memcpy(strstr(text, "count: 4"), "count: D", 8);
  memcpy(strstr(text, "D: 8"), "D: 0", 4);
  recap__diag diag = {0};
  CU_ASSERT_PTR_NULL(load_model(text, NULL, &diag));
  CU_ASSERT_EQUAL(diag.count, 1); /* the dim's own error; the count says nothing more */
  recap__diag_free(&diag);
  const char *bucketed =
      "dims: {L: [1, 2]}\n"
      "blocks:\n"
      "  layer:\n"
      "    input: x\n"
      "    output: y\n"
      "    ops:\n"
      "      - {op: relu, in: x, out: y}\n"
      "tensors:\n  x0: {shape: [4], role: input}\n"
      "ops:\n  - {block: layer, count: L, in: x0, out: y}\n";
  expect_error(bucketed, "11:27", "", "count: dim 'L' has buckets");
}

static void test_expansion_beyond_the_op_tensor_and_node_limits_is_refused_at_the_use(void) {
  /* 4 instances of 2 ops: 8 ops, over a limit of 7. */
  recap__spec_options opts = {.max_ops = 7};
  expect_error_with(SHAPES, &opts, "16:27", "",
                    "block use 'layers': 4 instances of block 'layer' take the spec to 8 ops, "
                    "more than the limit of 7");
  /* 1 input + 4 x (2 params + 2 op outputs) = 17 tensors. */
  recap__spec_options tensors = {.max_tensors = 16};
  expect_error_with(SHAPES, &tensors, "16:27", "",
                    "take the spec to 17 tensors (declared and op outputs), more than the "
                    "limit of 16");
  recap__spec_options nodes = {.yaml = {.max_nodes = 200}};
  expect_error_with(SHAPES, &nodes, "16:27", "", "YAML nodes, more than the limit of 200");
  /* At the limit it expands; layer 3's shape is what fails. */
  opts.max_ops = 8;
  expect_error_with(SHAPES, &opts, "12:9", "in layers.3", "op 'layers.3.fc2' (linear)");
}

int main(void) {
  CU_pSuite s = test_add_suite("spec_blocks", NULL, NULL);
  CU_ADD_TEST(s, test_blocks_expand_to_the_flat_spec_op_for_op);
  CU_ADD_TEST(s, test_blocked_and_flat_pipelines_compute_the_same_values);
  CU_ADD_TEST(s, test_unnamed_block_ops_are_named_after_their_instance);
  CU_ADD_TEST(s, test_count_may_be_a_dim_that_the_caller_overrides);
  CU_ADD_TEST(s, test_index_template_names_files_and_outer_tensors);
  CU_ADD_TEST(s, test_wrong_shape_in_layer_3_names_layer_3_at_the_block_op);
  CU_ADD_TEST(s, test_a_mistake_in_a_block_is_reported_once_not_per_layer);
  CU_ADD_TEST(s, test_unknown_key_inside_a_block_is_positioned_and_names_the_layer);
  CU_ADD_TEST(s, test_bad_index_templates_are_positioned_at_the_brace);
  CU_ADD_TEST(s, test_block_inputs_and_outputs_must_be_defined);
  CU_ADD_TEST(s, test_block_uses_are_checked);
  CU_ADD_TEST(s, test_counts_are_bounded);
  CU_ADD_TEST(s, test_expansion_beyond_the_op_tensor_and_node_limits_is_refused_at_the_use);
  return test_run_all();
}
