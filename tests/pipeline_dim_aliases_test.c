/*
 * pipeline_dim_aliases_test.c: a dim given as another dim's name (specs/README.md, "Dims and
 * buckets"): its value in every bucket, chains, errors at FILE:LINE:COL, aliases set by an
 * entry and by the caller's overrides, the bucketed-dim rules applied to aliases, and a pipeline
 * whose [Bs, W] input is bucketed through an alias of T, run in graph mode against a hand
 * computation.
 */
#include "engine/load.h"
#include "tests/pipeline_util.h"

enum { W = 4 };

/* The serving shape of specs/README.md: T tokens from Bs sequences; in decode Bs is T. */
static const char serve_spec[] =
    "name: serve\ndtype: f32\nseed: 3\n"
    "dims: {T: [4, 8], Bs: 2, W: 4}\n"
    "entries:\n"
    "  prefill: {dims: {T: [4, 8], Bs: 2}}\n"
    "  decode:  {dims: {T: [1, 2, 4, 8], Bs: T}}\n"
    "tensors:\n"
    "  x:     {shape: [T, W], role: input}\n"
    "  seq_x: {shape: [Bs, W], role: input}\n"
    "  gain:  {shape: [W], role: param, init: normal, std: 1}\n"
    "ops:\n"
    "  - {op: relu, in: [x], out: y}\n"
    "  - {op: mul, in: [seq_x, gain], out: seq_y}\n"
    "outputs: [y, seq_y]\n";

/* The model of text (unfused) with `entry` and `dims` applied; NULL (status checked) on failure. */
static recap__model *load_with(const char *text, const char *entry, const char *const *dims,
                               recap_status expect, recap__diag *diag) {
  recap__load_options lo = {.no_fusion = true, .spec = {.entry = entry, .dims = dims}};
  recap__model *m = NULL;
  CHECK_STATUS(recap__load_string(text, strlen(text), "<e>", &lo, &m, diag), expect);
  return m;
}

static int dim_index(const recap__spec *spec, const char *name) {
  for (size_t d = 0; d < spec->num_dims; ++d)
    if (strcmp(spec->dims[d].name, name) == 0) return (int)d;
  CU_FAIL("no such dim");
  return -1;
}

/* Checks that tensor `name` has `rows` rows (axis 0) in bucket b of m, for every bucket. */
static void expect_rows(const recap__model *m, const char *name, const int64_t *rows,
                        size_t buckets) {
  CU_ASSERT_EQUAL_FATAL(m->num_buckets, buckets);
  for (size_t b = 0; b < buckets; ++b) {
    const recap__ir *ir = m->irs[b];
    int t = recap__ir_find_tensor(ir, name);
    CU_ASSERT_FATAL(t >= 0);
    if (ir->tensors[t].shape[0] != rows[b])
      fprintf(stderr, "\n  %s in bucket %zu: %lld rows, expected %lld\n", name, b,
              (long long)ir->tensors[t].shape[0], (long long)rows[b]);
    CU_ASSERT_EQUAL(ir->tensors[t].shape[0], rows[b]);
  }
}

/* Whether diag or the last error has "<e>:POS: error: " followed by text containing needle. */
static void expect_spec_error(const char *text, const char *entry, const char *pos,
                              const char *needle) {
  recap__diag diag = {0};
  recap__model *m = load_with(text, entry, NULL, RECAP_STATUS_SPEC_ERROR, &diag);
  CU_ASSERT_PTR_NULL(m);
  recap__model_free_loaded(m);
  char prefix[64];
  snprintf(prefix, sizeof prefix, "<e>:%s: error: ", pos);
  bool found = false;
  for (size_t i = 0; i < diag.count && !found; ++i)
    found = strncmp(diag.messages[i], prefix, strlen(prefix)) == 0 &&
            strstr(diag.messages[i], needle) != NULL;
  if (!found) {
    fprintf(stderr, "\n  expected %s...%s, got:\n", prefix, needle);
    for (size_t i = 0; i < diag.count; ++i) fprintf(stderr, "    | %s\n", diag.messages[i]);
  }
  CU_ASSERT_TRUE(found);
  recap__diag_free(&diag);
}

static void test_an_alias_has_the_bucketed_dims_value_in_every_bucket(void) {
  recap__model *m = load_with(serve_spec, "decode", NULL, RECAP_OK, NULL);
  if (!m) return;
  const recap__spec *spec = m->spec;
  int t = dim_index(spec, "T"), bs = dim_index(spec, "Bs");
  CU_ASSERT_EQUAL(spec->bucket_dim, t);
  CU_ASSERT_EQUAL(spec->dims[bs].alias, t);
  CU_ASSERT_EQUAL(spec->dims[t].alias, -1);
  const int64_t rows[] = {1, 2, 4, 8};
  expect_rows(m, "seq_x", rows, 4);
  expect_rows(m, "seq_y", rows, 4);
  expect_rows(m, "x", rows, 4);
  for (size_t b = 0; b < 4; ++b) CU_ASSERT_EQUAL(m->irs[b]->dim_values[bs], rows[b]);
  /* The probe comparison sees the alias axes too: they carry the bucket. */
  const recap__ir *largest = m->irs[3];
  CU_ASSERT_EQUAL(largest->tensors[recap__ir_find_tensor(largest, "seq_x")].bucket_axis, 0);
  CU_ASSERT_EQUAL(largest->tensors[recap__ir_find_tensor(largest, "gain")].bucket_axis, -1);
  recap__model_release(m);

  /* Without the entry, Bs is a plain 2 beside the buckets of T. */
  m = load_with(serve_spec, NULL, NULL, RECAP_OK, NULL);
  if (!m) return;
  const int64_t two[] = {2, 2};
  expect_rows(m, "seq_x", two, 2);
  CU_ASSERT_EQUAL(m->spec->dims[dim_index(m->spec, "Bs")].alias, -1);
  recap__model_release(m);
}

static void test_aliases_of_aliases_resolve_in_any_order(void) {
  /* A names B, declared after it; B names T; C names the plain W. */
  static const char text[] =
      "dims: {A: B, B: T, T: [3, 5], C: W, W: 7}\n"
      "tensors:\n"
      "  a: {shape: [A, C], role: input}\n"
      "ops:\n"
      "  - {op: relu, in: [a], out: y}\n";
  recap__model *m = load_with(text, NULL, NULL, RECAP_OK, NULL);
  if (!m) return;
  const recap__spec *spec = m->spec;
  int t = dim_index(spec, "T"), w = dim_index(spec, "W");
  CU_ASSERT_EQUAL(spec->dims[dim_index(spec, "A")].alias, t);
  CU_ASSERT_EQUAL(spec->dims[dim_index(spec, "B")].alias, t);
  CU_ASSERT_EQUAL(spec->dims[dim_index(spec, "C")].alias, w);
  CU_ASSERT_FALSE(spec->dims[dim_index(spec, "C")].bucketed);
  const int64_t rows[] = {3, 5};
  expect_rows(m, "y", rows, 2);
  for (size_t b = 0; b < 2; ++b) {
    int y = recap__ir_find_tensor(m->irs[b], "y");
    CU_ASSERT_EQUAL(m->irs[b]->tensors[y].shape[1], 7);
  }
  recap__model_release(m);
}

static void test_alias_cycles_unknown_names_and_self_references_are_positioned(void) {
  const char *ops = "tensors: {x: {shape: [T], role: input}}\nops: [{op: relu, in: [x], out: y}]\n";
  char text[512];
  snprintf(text, sizeof text, "dims: {T: 4, A: B, B: A}\n%s", ops);
  expect_spec_error(text, NULL, "1:17", "dim 'A' is an alias in a cycle (A = B, B = A)");
  snprintf(text, sizeof text, "dims: {T: 4, A: B, B: C, C: A}\n%s", ops);
  expect_spec_error(text, NULL, "1:17", "(A = B, B = C, C = A)");
  snprintf(text, sizeof text, "dims:\n  T: 4\n  Bs: Bs\n%s", ops);
  expect_spec_error(text, NULL, "3:7", "dim 'Bs' is given as itself");
  snprintf(text, sizeof text, "dims: {T: 4, Bs: Tokens}\n%s", ops);
  expect_spec_error(text, NULL, "1:18",
                    "dim 'Bs' is given as 'Tokens', but the spec declares no dim 'Tokens'");
  /* Malformed values are errors, not aliases: a list holding a name, a mapping, a quoted
   * number, a name too strange to be one. */
  snprintf(text, sizeof text, "dims: {T: 4, Bs: [1, T]}\n%s", ops);
  expect_spec_error(text, NULL, "1:22", "dim 'Bs': expected an integer, got a string 'T'");
  snprintf(text, sizeof text, "dims: {T: 4, Bs: {T: 1}}\n%s", ops);
  expect_spec_error(text, NULL, "1:18", "dim 'Bs': expected a positive integer or a list");
  snprintf(text, sizeof text, "dims: {T: 4, Bs: \"8\"}\n%s", ops);
  expect_spec_error(text, NULL, "1:18", "dim 'Bs': expected an integer, got a quoted string '8'");
  snprintf(text, sizeof text, "dims: {T: 4, Bs: T T}\n%s", ops);
  expect_spec_error(text, NULL, "1:18", "dim 'Bs': expected an integer, got a string 'T T'");
  snprintf(text, sizeof text, "dims: {T: 4, Bs: }\n%s", ops);
  expect_spec_error(text, NULL, "1:18", "dim 'Bs': expected an integer, got null");
}

static void test_an_entry_sets_and_clears_aliases(void) {
  /* Each entry's aliases are checked whichever entry is chosen, at the entry's text. */
  static const char head[] =
      "dims: {T: [4, 8], Bs: T, W: 4}\n"
      "tensors: {x: {shape: [Bs, W], role: input}}\n"
      "ops: [{op: relu, in: [x], out: y}]\n";
  char text[512];
  snprintf(text, sizeof text, "%sentries:\n  a: {dims: {Bs: 2}}\n  b: {dims: {T: Bs}}\n", head);
  expect_spec_error(text, "a", "6:17",
                    "entry 'b': dim 'T' is an alias in a cycle (T = Bs, Bs = T)");
  snprintf(text, sizeof text, "%sentries:\n  a: {dims: {Bs: Q}}\n", head);
  expect_spec_error(text, NULL, "5:18",
                    "entry 'a': dim 'Bs' is given as 'Q', but the spec declares");
  /* A spec's own broken alias is reported once, at the spec, not again per entry. */
  snprintf(text, sizeof text,
           "dims: {T: [4, 8], Bs: Q}\ntensors: {x: {shape: [T], role: input}}\n"
           "ops: [{op: relu, in: [x], out: y}]\nentries:\n  a: {dims: {T: 2}}\n");
  recap__diag diag = {0};
  recap__model *m = load_with(text, "a", NULL, RECAP_STATUS_SPEC_ERROR, &diag);
  CU_ASSERT_PTR_NULL(m);
  CU_ASSERT_EQUAL(diag.count, 1);
  recap__diag_free(&diag);

  /* A number makes the spec's alias plain; a name makes the spec's number an alias. */
  snprintf(text, sizeof text,
           "%sentries:\n  plain: {dims: {Bs: 3}}\n  again: {dims: {Bs: 2, W: T}}\n", head);
  m = load_with(text, "plain", NULL, RECAP_OK, NULL);
  if (m) {
    const int64_t three[] = {3, 3};
    expect_rows(m, "x", three, 2);
    CU_ASSERT_EQUAL(m->spec->dims[dim_index(m->spec, "Bs")].alias, -1);
    recap__model_release(m);
  }
  m = load_with(text, "again", NULL, RECAP_OK, NULL);
  if (m) {
    for (size_t b = 0; b < 2; ++b) {
      int x = recap__ir_find_tensor(m->irs[b], "x");
      CU_ASSERT_EQUAL(m->irs[b]->tensors[x].shape[0], 2);
      CU_ASSERT_EQUAL(m->irs[b]->tensors[x].shape[1], (int64_t)(4 << b));
    }
    recap__model_release(m);
  }

  /* The decode entry of the serving spec: Bs follows T's buckets; prefill keeps 2. */
  m = load_with(serve_spec, "prefill", NULL, RECAP_OK, NULL);
  if (m) {
    const int64_t two[] = {2, 2};
    expect_rows(m, "seq_x", two, 2);
    recap__model_release(m);
  }
}

static void test_overrides_set_and_clear_aliases_after_the_entry(void) {
  /* "Bs=T" on the spec's own dims: Bs follows T's buckets. */
  const char *alias[] = {"Bs=T", NULL};
  recap__model *m = load_with(serve_spec, NULL, alias, RECAP_OK, NULL);
  if (m) {
    const int64_t rows[] = {4, 8};
    expect_rows(m, "seq_x", rows, 2);
    recap__model_release(m);
  }
  /* A number after the decode entry makes Bs plain again. */
  const char *plain[] = {"Bs=3", NULL};
  m = load_with(serve_spec, "decode", plain, RECAP_OK, NULL);
  if (m) {
    const int64_t three[] = {3, 3, 3, 3};
    expect_rows(m, "seq_x", three, 4);
    recap__model_release(m);
  }
  /* Overrides apply in order: the last one wins. */
  const char *both[] = {"Bs=3", "Bs=T", NULL};
  m = load_with(serve_spec, "prefill", both, RECAP_OK, NULL);
  if (m) {
    const int64_t rows[] = {4, 8};
    expect_rows(m, "seq_x", rows, 2);
    recap__model_release(m);
  }
  /* The caller's mistakes are invalid arguments that say what is wrong. */
  const char *unknown[] = {"Bs=Q", NULL};
  CU_ASSERT_PTR_NULL(load_with(serve_spec, NULL, unknown, RECAP_STATUS_INVALID_ARGUMENT, NULL));
  CHECK_ERROR_MENTIONS("dim override 'Bs=Q': the spec declares no dim 'Q' (its dims: T, Bs, W)");
  const char *self[] = {"Bs=Bs", NULL};
  CU_ASSERT_PTR_NULL(load_with(serve_spec, NULL, self, RECAP_STATUS_INVALID_ARGUMENT, NULL));
  CHECK_ERROR_MENTIONS("a dim cannot be an alias of itself");
  const char *cycle[] = {"T=Bs", NULL};
  CU_ASSERT_PTR_NULL(load_with(serve_spec, "decode", cycle, RECAP_STATUS_INVALID_ARGUMENT, NULL));
  CHECK_ERROR_MENTIONS("dim overrides: dim 'T' is an alias in a cycle (T = Bs, Bs = T)");
  const char *odd[] = {"Bs=T,4", NULL};
  CU_ASSERT_PTR_NULL(load_with(serve_spec, NULL, odd, RECAP_STATUS_INVALID_ARGUMENT, NULL));
}

static void test_bucketed_dim_rules_apply_to_aliases(void) {
  /* A reduction over an axis of Bs is one over T's buckets, found through the probe IR too
   * (one bucket). */
  expect_spec_error(
      "dims: {T: [2, 4], Bs: T}\ntensors:\n  x: {shape: [3, Bs], role: input}\nops:\n"
      "  - {op: softmax, in: [x], out: y}\n",
      NULL, "5:5", "which carries the bucketed dim 'T' or its alias 'Bs'");
  expect_spec_error(
      "dims: {T: [2], Bs: T}\ntensors:\n  x: {shape: [Bs, 3], role: input}\nops:\n"
      "  - {op: matmul, in: [x, x], out: y, trans_a: true}\n",
      NULL, "5:5", "reduces over axis 0 of tensor 'x' [2, 3]");
  /* The decode entry makes Bs an alias: a state [W, Bs] is then refused in it alone. */
  static const char state[] =
      "dims: {T: [2, 4], Bs: 2, W: 3}\n"
      "entries: {decode: {dims: {Bs: T}}}\n"
      "tensors:\n  cache: {shape: [W, Bs], role: state}\n  p: {shape: [Bs, W], role: param}\n"
      "ops:\n  - {op: add, in: [cache, cache], out: y}\n  - {op: relu, in: [p], out: z}\n";
  recap__model *m = load_with(state, NULL, NULL, RECAP_OK, NULL);
  recap__model_release(m);
  expect_spec_error(state, "decode", "4:22",
                    "tensor 'cache': the bucketed dim 'Bs' (an alias of 'T') may only be the first "
                    "axis of a state");
  /* An input or output with the dim on two axes (through an alias, or the dim itself twice)
   * has no rows to copy: refused at the tensor, as [T, T] is. */
  expect_spec_error(
      "dims: {T: [2, 4], W: T}\ntensors:\n  x: {shape: [T, W], role: input}\nops:\n"
      "  - {op: relu, in: [x], out: y}\n",
      NULL, "3:3",
      "tensor 'x' [2, 2] carries the bucketed dim 'T' (or its alias 'W') on more than one axis: "
      "an input, state or scalar carries it on one axis only");
  expect_spec_error(
      "dims: {T: [2, 4]}\ntensors:\n  x: {shape: [T, 3], role: input}\nops:\n"
      "  - {op: matmul, in: [x, x], out: y, trans_b: true}\n  - {op: relu, in: [y], out: z}\n"
      "outputs: [y, z]\n",
      NULL, "5:35",
      "tensor 'y' [2, 2] carries the bucketed dim 'T' on more than one axis: an output");
}

/* The info of p's tensor `name`. */
static recap_tensor_info info_of(recap_pipeline *p, const char *name) {
  recap_pipeline_info pi;
  CHECK_OK(recap_pipeline_info_get(p, &pi));
  recap_tensor_info ti = {0};
  for (size_t i = 0; i < pi.num_tensors; ++i) {
    CHECK_OK(recap_pipeline_tensor_info_get(p, i, &ti));
    if (strcmp(ti.name, name) == 0) return ti;
  }
  CU_FAIL("no such tensor");
  return ti;
}

static void test_a_decode_pipeline_bucketed_through_an_alias_computes_each_batch(void) {
  recap_pipeline_options o = opts_on(test_device);
  o.entry = "decode";
  o.override_mode = 1;
  o.mode = RECAP_MODE_GRAPH;
  recap_pipeline *p = make(serve_spec, &o);
  recap_pipeline_info info;
  CHECK_OK(recap_pipeline_info_get(p, &info));
  CU_ASSERT_STRING_EQUAL(info.bucket_dim, "T");
  CU_ASSERT_EQUAL(info.num_buckets, 4);
  recap_tensor_info seq = info_of(p, "seq_x");
  CU_ASSERT_EQUAL(seq.bucket_axis, 0);
  CU_ASSERT_EQUAL(seq.shape[0], 8);
  CU_ASSERT_EQUAL(info_of(p, "seq_y").bucket_axis, 0);
  CU_ASSERT_EQUAL(info_of(p, "gain").bucket_axis, -1);

  float gain[W];
  CHECK_OK(recap_pipeline_copy_out(p, "gain", gain, sizeof gain, 0));
  test_rng rng;
  test_rng_init(&rng);
  const int64_t batches[] = {3, 8, 1};
  for (size_t k = 0; k < sizeof batches / sizeof batches[0]; ++k) {
    int64_t rows = batches[k];
    size_t bytes = sizeof(float) * (size_t)rows * W;
    float *x = random_data(&rng, RECAP_DTYPE_F32, bytes);
    float *seq_x = random_data(&rng, RECAP_DTYPE_F32, bytes);
    float *y = malloc(bytes), *seq_y = malloc(bytes);
    CU_ASSERT_PTR_NOT_NULL_FATAL(y);
    CU_ASSERT_PTR_NOT_NULL_FATAL(seq_y);
    CHECK_OK(recap_pipeline_copy_in(p, "x", x, bytes, rows));
    CHECK_OK(recap_pipeline_copy_in(p, "seq_x", seq_x, bytes, rows));
    CHECK_OK(recap_pipeline_run(p, rows));
    CHECK_OK(recap_pipeline_copy_out(p, "y", y, bytes, rows));
    CHECK_OK(recap_pipeline_copy_out(p, "seq_y", seq_y, bytes, rows));
    int wrong = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int c = 0; c < W; ++c) {
        size_t i = (size_t)r * W + (size_t)c;
        float relu = x[i] > 0 ? x[i] : 0, scaled = seq_x[i] * gain[c];
        if (y[i] != relu || fabsf(seq_y[i] - scaled) > 1e-6f * (1 + fabsf(scaled))) {
          if (!wrong++)
            fprintf(stderr,
                    "\n  batch %lld row %lld col %d: y %g (expected %g), seq_y %g (expected %g)\n",
                    (long long)rows, (long long)r, c, y[i], relu, seq_y[i], scaled);
        }
      }
    CU_ASSERT_EQUAL(wrong, 0);
    free(x);
    free(seq_x);
    free(y);
    free(seq_y);
  }
  recap_pipeline_stats stats;
  CHECK_OK(recap_pipeline_stats_get(p, &stats));
  CU_ASSERT_EQUAL(stats.eager_runs, 0);
  CU_ASSERT_EQUAL(stats.captures, 4);
  CHECK_OK(recap_pipeline_destroy(p));
}

static const test_case kTests[] = {
    {"an_alias_has_the_bucketed_dims_value_in_every_bucket",
     test_an_alias_has_the_bucketed_dims_value_in_every_bucket, false},
    {"aliases_of_aliases_resolve_in_any_order", test_aliases_of_aliases_resolve_in_any_order,
     false},
    {"alias_cycles_unknown_names_and_self_references_are_positioned",
     test_alias_cycles_unknown_names_and_self_references_are_positioned, false},
    {"an_entry_sets_and_clears_aliases", test_an_entry_sets_and_clears_aliases, false},
    {"overrides_set_and_clear_aliases_after_the_entry",
     test_overrides_set_and_clear_aliases_after_the_entry, false},
    {"bucketed_dim_rules_apply_to_aliases", test_bucketed_dim_rules_apply_to_aliases, false},
    {"a_decode_pipeline_bucketed_through_an_alias_computes_each_batch",
     test_a_decode_pipeline_bucketed_through_an_alias_computes_each_batch, true},
};

int main(void) {
  test_add_host_and_cuda_suites("pipeline_dim_aliases", kTests, sizeof kTests / sizeof kTests[0]);
  return test_run_all();
}
