/*
 * pipeline_expr_test.c: the `expr` op through the engine: specs with expressions load, run on
 * the host backend (eager and graph mode) with results checked on every element against
 * values computed here in double, report expression errors at the spec's LINE:COL inside the
 * string (plain, single- and double-quoted scalars, flow and block style), and on CUDA
 * (inactive without a GPU) run captured and match the host pipeline, and load from a warm
 * kernel cache within 20 ms of the same computation written with library ops.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pipeline.h"
#include "runtime/half.h"
#include "runtime/nvrtc.h"
#include "tests/test_util.h"

static recap_pipeline *make(const char *yaml, recap_run_mode mode, recap_device dev) {
  recap_pipeline_options o = RECAP_PIPELINE_OPTIONS_INIT;
  o.override_device = 1;
  o.device = dev;
  o.override_mode = 1;
  o.mode = mode;
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_string(yaml, strlen(yaml), "<test>", &o, &p));
  return p;
}

static double sigmoid(double x) {
  return 1 / (1 + exp(-x));
}

static const char kGated[] =
    "name: gated\n"
    "dtype: f32\n"
    "tensors:\n"
    "  x:    {shape: [3, 130], role: input}\n"
    "  gate: {shape: [3, 130], role: input}\n"
    "  bias: {shape: [130], role: input}\n"
    "ops:\n"
    "  - {op: expr, in: [x, gate, bias], out: h, expr: \"x * sigmoid(gate + bias) + 1.0\"}\n"
    "  - op: expr\n"
    "    in: [h]\n"
    "    out: y\n"
    "    expr: select(h > 1.5, 1.5, select(in0 < -1, -1, h))\n"
    "outputs: [y]\n";

static void fill(float *v, int n, test_rng *rng) {
  for (int i = 0; i < n; ++i) v[i] = (float)test_rng_uniform(rng, -3, 3);
}

static void run_gated(recap_run_mode mode) {
  enum { R = 3, C = 130, N = R * C };
  float x[N], gate[N], bias[C], y[N];
  test_rng rng;
  test_rng_init(&rng);
  fill(x, N, &rng);
  fill(gate, N, &rng);
  fill(bias, C, &rng);
  recap_pipeline *p = make(kGated, mode, test_device);
  CHECK_OK(recap_pipeline_copy_in(p, "x", x, sizeof x, 0));
  CHECK_OK(recap_pipeline_copy_in(p, "gate", gate, sizeof gate, 0));
  CHECK_OK(recap_pipeline_copy_in(p, "bias", bias, sizeof bias, 0));
  for (int run = 0; run < 2; ++run) {
    CHECK_OK(recap_pipeline_run(p, 0));
    CHECK_OK(recap_pipeline_copy_out(p, "y", y, sizeof y, 0));
    int bad = 0;
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        int i = r * C + c;
        double h = x[i] * sigmoid((double)gate[i] + bias[c]) + 1.0;
        double want = h > 1.5 ? 1.5 : h < -1 ? -1 : h;
        if (!(fabs(y[i] - want) <= 1e-5 + 1e-5 * fabs(want)) && bad++ < 3)
          fprintf(stderr, "\n  element %d: %.9g, expected %.9g\n", i, y[i], want);
      }
    CU_ASSERT_EQUAL(bad, 0);
  }
  CHECK_OK(recap_pipeline_destroy(p));
}

static void test_expr_ops_run_eagerly(void) {
  run_gated(RECAP_MODE_EAGER);
}

static void test_expr_ops_run_as_graphs(void) {
  run_gated(RECAP_MODE_GRAPH);
}

/* f16 inputs broadcast against an f32 one: the output is f32 (promotion). */
static void test_expr_mixed_dtypes_promote_to_f32(void) {
  static const char spec[] =
      "name: mixed\n"
      "tensors:\n"
      "  a: {shape: [2, 8], role: input, dtype: f16}\n"
      "  b: {shape: [8], role: input, dtype: f32}\n"
      "ops:\n"
      "  - {op: expr, in: [a, b], out: y, expr: a * b - 0.5, dtype: f32, shape: [2, 8]}\n"
      "outputs: [y]\n";
  recap_pipeline *p = make(spec, RECAP_MODE_EAGER, test_device);
  uint16_t a[16];
  float af[16], b[8], y[16];
  for (int i = 0; i < 16; ++i) {
    a[i] = recap__f32_to_f16((float)(i - 7) * 0.25f);
    af[i] = recap__f16_to_f32(a[i]);
  }
  for (int i = 0; i < 8; ++i) b[i] = (float)i + 0.5f;
  CHECK_OK(recap_pipeline_copy_in(p, "a", a, sizeof a, 0));
  CHECK_OK(recap_pipeline_copy_in(p, "b", b, sizeof b, 0));
  CHECK_OK(recap_pipeline_run(p, 0));
  CHECK_OK(recap_pipeline_copy_out(p, "y", y, sizeof y, 0));
  for (int i = 0; i < 16; ++i) CU_ASSERT_EQUAL(y[i], af[i] * b[i % 8] - 0.5f);
  CHECK_OK(recap_pipeline_destroy(p));
}

static void test_expr_example_spec_runs_on_host(void) {
  recap_pipeline_options o = RECAP_PIPELINE_OPTIONS_INIT;
  o.override_device = 1;
  o.device = test_device;
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_file("specs/expr_example.yaml", &o, &p));
  CHECK_OK(recap_pipeline_run(p, 8));
  CHECK_OK(recap_pipeline_run(p, 1));
  CHECK_OK(recap_pipeline_destroy(p));
}

/* ---- errors ---------------------------------------------------------------------------- */

static const char kHead[] =
    "name: t\n"                        /* 1 */
    "tensors:\n"                       /* 2 */
    "  x: {shape: [4], role: input}\n" /* 3 */
    "  g: {shape: [4], role: input}\n" /* 4 */
    "ops:\n";                          /* 5 */

/* Loads kHead + ops and expects SPEC_ERROR whose message has `where` and `what`. */
static void expect_error(const char *ops, const char *where, const char *what) {
  char yaml[8192];
  snprintf(yaml, sizeof yaml, "%s%soutputs: [y]\n", kHead, ops);
  recap_pipeline_options o = RECAP_PIPELINE_OPTIONS_INIT;
  o.override_device = 1;
  o.device = (recap_device){RECAP_BACKEND_HOST, 0};
  recap_pipeline *p = NULL;
  CHECK_STATUS(recap_pipeline_create_string(yaml, strlen(yaml), "<test>", &o, &p),
               RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_PTR_NULL(p);
  CHECK_ERROR_MENTIONS(where);
  CHECK_ERROR_MENTIONS(what);
}

static void test_expr_errors_point_into_the_string(void) {
  /* Plain scalar: "    expr: " is 10 columns, so the text starts at column 11. */
  expect_error(
      "  - op: expr\n"
      "    in: [x, g]\n"
      "    out: y\n"
      "    expr: x * sigmoid(q)\n",
      "<test>:9:23: error:", "unknown name 'q'");
  /* Single-quoted: one more column for the quote; '' is one character of text, two of source. */
  expect_error(
      "  - op: expr\n"
      "    in: [x, g]\n"
      "    out: y\n"
      "    expr: 'x * sigmoid(q)'\n",
      "<test>:9:24: error:", "unknown name 'q'");
  expect_error(
      "  - op: expr\n"
      "    in: [x, g]\n"
      "    out: y\n"
      "    expr: 'x '' q'\n",
      "<test>:9:14: error:", "unexpected character '''");
  expect_error(
      "  - op: expr\n"
      "    in: [x, g]\n"
      "    out: y\n"
      "    expr: 'x + g '''\n",
      "<test>:9:18: error:", "unexpected character '''");
  /* Double-quoted with escapes: \t is two source columns for one byte, \u00e9 six for two. */
  expect_error(
      "  - op: expr\n"
      "    in: [x, g]\n"
      "    out: y\n"
      "    expr: \"x\\t* sigmoid(q)\"\n",
      "<test>:9:25: error:", "unknown name 'q'");
  expect_error(
      "  - op: expr\n"
      "    in: [x, g]\n"
      "    out: y\n"
      "    expr: \"x + \\u00e9\"\n",
      "<test>:9:16: error:", "unexpected byte 0xc3");
  /* Flow style, and an operator error. */
  expect_error("  - {op: expr, in: [x, g], out: y, expr: \"x + * g\"}\n",
               "<test>:6:47: error:", "expected a value, got '*'");
  expect_error("  - {op: expr, in: [x, g], out: y, expr: x < g < x}\n",
               "<test>:6:48: error:", "do not chain");
  /* A block scalar is reported at its start. */
  expect_error(
      "  - op: expr\n"
      "    in: [x, g]\n"
      "    out: y\n"
      "    expr: |\n"
      "      x + q\n",
      "<test>:9:11: error:", "unknown name 'q'");
  /* The message names the op and the attribute. */
  expect_error("  - {op: expr, in: [x, g], out: y, name: gate_op, expr: \"foo(x)\"}\n",
               "op 'gate_op': attribute 'expr'", "unknown function 'foo'");
}

static void test_expr_spec_errors_without_positions_inside(void) {
  expect_error("  - {op: expr, in: [x, g], out: y}\n",
               "<test>:6:5: error:", "needs attribute 'expr'");
  expect_error("  - {op: expr, in: [x, g], out: y, expr: [x, g]}\n",
               "<test>:6:42: error:", "expected a string");
  expect_error("  - {op: expr, in: [x, g], out: y, expr: \"\"}\n",
               "<test>:6:43: error:", "the expression is empty");
  /* Too deep: the 65th parenthesis. */
  char ops[1024];
  char parens[200];
  memset(parens, '(', 70);
  parens[70] = '\0';
  snprintf(ops, sizeof ops, "  - {op: expr, in: [x, g], out: y, expr: \"%sx\"}\n", parens);
  expect_error(ops, "<test>:6:107: error:", "nests deeper than 64");
  /* The output's dtype follows promotion (f16 with f32 gives f32), which `dtype:` checks. */
  expect_error(
      "  - {op: cast, in: [x], out: xi, dtype: f16}\n"
      "  - {op: expr, in: [xi, g], out: y, expr: xi + g, dtype: f16}\n",
      "<test>:7:", "has dtype f32, but dtype: says f16");
}

static void test_expr_tensor_names_that_are_not_identifiers_use_positions(void) {
  static const char spec[] =
      "name: positional\n"
      "tensors:\n"
      "  layer.0/x: {shape: [4], role: input}\n"
      "  g: {shape: [4], role: input}\n"
      "ops:\n"
      "  - {op: expr, in: [layer.0/x, g], out: y, expr: in0 - g}\n"
      "outputs: [y]\n";
  recap_pipeline *p = make(spec, RECAP_MODE_EAGER, (recap_device){RECAP_BACKEND_HOST, 0});
  float x[4] = {1, 2, 3, 4}, g[4] = {0.5f, 0.25f, 0, -1}, y[4];
  CHECK_OK(recap_pipeline_copy_in(p, "layer.0/x", x, sizeof x, 0));
  CHECK_OK(recap_pipeline_copy_in(p, "g", g, sizeof g, 0));
  CHECK_OK(recap_pipeline_run(p, 0));
  CHECK_OK(recap_pipeline_copy_out(p, "y", y, sizeof y, 0));
  for (int i = 0; i < 4; ++i) CU_ASSERT_EQUAL(y[i], x[i] - g[i]);
  CHECK_OK(recap_pipeline_destroy(p));
}

/* ---- CUDA against the host --------------------------------------------------------------- */

static void test_cuda_expr_pipeline_matches_host(void) {
  enum { R = 3, C = 130, N = R * C };
  float x[N], gate[N], bias[C], want[N], got[N];
  test_rng rng;
  test_rng_init(&rng);
  fill(x, N, &rng);
  fill(gate, N, &rng);
  fill(bias, C, &rng);
  recap_pipeline *host = make(kGated, RECAP_MODE_EAGER, (recap_device){RECAP_BACKEND_HOST, 0});
  recap_pipeline *gpu = make(kGated, RECAP_MODE_GRAPH, (recap_device){RECAP_BACKEND_CUDA, 0});
  recap_pipeline *both[2] = {host, gpu};
  for (int k = 0; k < 2; ++k) {
    CHECK_OK(recap_pipeline_copy_in(both[k], "x", x, sizeof x, 0));
    CHECK_OK(recap_pipeline_copy_in(both[k], "gate", gate, sizeof gate, 0));
    CHECK_OK(recap_pipeline_copy_in(both[k], "bias", bias, sizeof bias, 0));
    CHECK_OK(recap_pipeline_run(both[k], 0));
  }
  CHECK_OK(recap_pipeline_run(gpu, 0)); /* a replay */
  CHECK_OK(recap_pipeline_copy_out(host, "y", want, sizeof want, 0));
  CHECK_OK(recap_pipeline_copy_out(gpu, "y", got, sizeof got, 0));
  int bad = 0;
  for (int i = 0; i < N; ++i)
    if (!(fabs(got[i] - want[i]) <= 1e-5 + 1e-5 * fabs(want[i])) && bad++ < 3)
      fprintf(stderr, "\n  element %d: cuda %.9g, host %.9g\n", i, got[i], want[i]);
  CU_ASSERT_EQUAL(bad, 0);
  recap_pipeline_stats stats;
  CHECK_OK(recap_pipeline_stats_get(gpu, &stats));
  CU_ASSERT_TRUE(stats.replays >= 1);
  CHECK_OK(recap_pipeline_destroy(host));
  CHECK_OK(recap_pipeline_destroy(gpu));
}

static void create_on_cuda(const char *yaml) {
  recap_pipeline_options o = RECAP_PIPELINE_OPTIONS_INIT;
  o.override_device = 1;
  o.device = (recap_device){RECAP_BACKEND_CUDA, 0};
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_string(yaml, strlen(yaml), "<test>", &o, &p));
  CHECK_OK(recap_pipeline_destroy(p));
}

/* With a warm disk cache, loading a pipeline of expr ops compiles nothing: every kernel comes
 * from the cache (counted). What that saves in time is a benchmark
 * target, measured by `recap bench-capture` (cli/bench_expr_load.c). */
static void test_cuda_warm_cache_load_compiles_nothing(void) {
  char dir[512];
  const char *tmp = getenv("TEST_TMPDIR");
  snprintf(dir, sizeof dir, "%s/recap_expr_load_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
  setenv("RECAP_CACHE_DIR", dir, 1);
  char exprs[4096] = "";
  size_t used = (size_t)snprintf(exprs, sizeof exprs,
                                 "name: load\n"
                                 "tensors:\n"
                                 "  x: {shape: [4096], role: input}\n"
                                 "  g: {shape: [4096], role: input}\n"
                                 "ops:\n");
  for (int k = 0; k < 8; ++k) {
    char in[16] = "x";
    if (k > 0) snprintf(in, sizeof in, "h%d", k - 1);
    used += (size_t)snprintf(exprs + used, sizeof exprs - used,
                             "  - {op: expr, in: [%s, g], out: h%d, expr: \"in0 * sigmoid(g) + "
                             "%d.0\"}\n",
                             in, k, k);
  }
  snprintf(exprs + used, sizeof exprs - used, "outputs: [h7]\n");
  recap__nvrtc_stats before, cold, warm;
  recap__nvrtc_stats_get(&before);
  create_on_cuda(exprs); /* fills the cache (or finds it filled by an earlier test) */
  recap__nvrtc_stats_get(&cold);
  CU_ASSERT(cold.compiles + cold.hits > before.compiles + before.hits);
  create_on_cuda(exprs);
  create_on_cuda(exprs);
  recap__nvrtc_stats_get(&warm);
  printf("\n  expr load: cold %llu compiles, %llu hits; two warm loads %llu compiles, %llu hits\n",
         (unsigned long long)(cold.compiles - before.compiles),
         (unsigned long long)(cold.hits - before.hits),
         (unsigned long long)(warm.compiles - cold.compiles),
         (unsigned long long)(warm.hits - cold.hits));
  CU_ASSERT_EQUAL(warm.compiles, cold.compiles);
  CU_ASSERT_EQUAL(warm.hits - cold.hits, 2 * (cold.compiles + cold.hits - before.compiles -
                                               before.hits));
  unsetenv("RECAP_CACHE_DIR");
}

int main(void) {
  CU_pSuite host = test_add_suite("pipeline_expr/host", NULL, NULL);
  CU_ADD_TEST(host, test_expr_ops_run_eagerly);
  CU_ADD_TEST(host, test_expr_ops_run_as_graphs);
  CU_ADD_TEST(host, test_expr_mixed_dtypes_promote_to_f32);
  CU_ADD_TEST(host, test_expr_example_spec_runs_on_host);
  CU_ADD_TEST(host, test_expr_errors_point_into_the_string);
  CU_ADD_TEST(host, test_expr_spec_errors_without_positions_inside);
  CU_ADD_TEST(host, test_expr_tensor_names_that_are_not_identifiers_use_positions);

  CU_pSuite cuda = test_add_cuda_suite("pipeline_expr/cuda", test_suite_use_cuda, NULL);
  CU_ADD_TEST(cuda, test_cuda_expr_pipeline_matches_host);
  CU_ADD_TEST(cuda, test_expr_ops_run_as_graphs);
  CU_ADD_TEST(cuda, test_expr_mixed_dtypes_promote_to_f32);
  CU_ADD_TEST(cuda, test_cuda_warm_cache_load_compiles_nothing);
  return test_run_all();
}
