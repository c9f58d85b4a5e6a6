/*
 * pipeline_info_test.c: what a pipeline says about itself through the public API
 * (recap_pipeline_info_get, recap_pipeline_tensor_info_get, recap_pipeline_graph and the
 * setup times in recap_pipeline_stats), on the host backend, against values worked out by
 * hand from the small specs below.
 */
#include <stdlib.h>
#include <string.h>

#include "include/recap.h"
#include "tests/test_util.h"

/* y = tanh(x @ w^T + cache), bucketed over B. Shapes of the largest bucket (B = 4):
 * x [4, 3], w [5, 3], cache [4, 5], h = a = y [4, 5]. */
static const char *const kBucketed =
    "name: info\n"
    "device: host\n"
    "dtype: f32\n"
    "dims: {B: [1, 2, 4], D: 3, H: 5}\n"
    "tensors:\n"
    "  x:     {shape: [B, D], role: input, init: uniform, low: 5, high: 6}\n"
    "  w:     {shape: [H, D], role: param, init: value, value: 0.5}\n"
    "  cache: {shape: [B, H], role: state}\n"
    "ops:\n"
    "  - {op: linear, in: [x, w], out: h}\n"
    "  - {op: add, in: [h, cache], out: a}\n"
    "  - {op: tanh, in: [a], out: y}\n"
    "outputs: [y]\n";

static const char *const kFlat =
    "name: flat\n"
    "device: host\n"
    "dtype: f32\n"
    "dims: {N: 6}\n"
    "tensors:\n"
    "  x: {shape: [2, N], role: input, init: ones}\n"
    "ops:\n"
    "  - {op: relu, in: [x], out: y}\n"
    "outputs: [y]\n";

static recap_pipeline *create(const char *yaml, recap_run_mode mode, int no_fusion) {
  recap_pipeline_options o = {
      .struct_size = sizeof o, .override_mode = 1, .mode = mode, .no_fusion = no_fusion};
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_string(yaml, strlen(yaml), "<info>", &o, &p));
  return p;
}

static void test_info_of_a_bucketed_spec(void) {
  recap_pipeline *p = create(kBucketed, RECAP_MODE_GRAPH, 1);
  recap_pipeline_info info;
  CHECK_OK(recap_pipeline_info_get(p, &info));
  CU_ASSERT_STRING_EQUAL(info.name, "info");
  CU_ASSERT_EQUAL(info.device.backend, RECAP_BACKEND_HOST);
  CU_ASSERT_EQUAL(info.device.index, 0);
  CU_ASSERT_EQUAL(info.mode, RECAP_MODE_GRAPH);
  CU_ASSERT_EQUAL_FATAL(info.num_buckets, 3);
  CU_ASSERT_EQUAL(info.bucket_values[0], 1);
  CU_ASSERT_EQUAL(info.bucket_values[1], 2);
  CU_ASSERT_EQUAL(info.bucket_values[2], 4);
  CU_ASSERT_STRING_EQUAL(info.bucket_dim, "B");
  /* No fusion: linear, add and tanh are three launches, and x, w, cache, h, a, y six
   * tensors. */
  CU_ASSERT_EQUAL(info.num_ops, 3);
  CU_ASSERT_EQUAL(info.launches, 3);
  CU_ASSERT_EQUAL(info.fused_ops, 0);
  CU_ASSERT_EQUAL(info.draws_random, 0);
  CU_ASSERT_EQUAL(info.num_tensors, 6);
  CHECK_STATUS(recap_pipeline_info_get(p, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_pipeline_info_get(NULL, &info), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap_pipeline_destroy(p));
}

/* The profile lists every op in run order with its kind and a device time, and says how many
 * entries it needs when given too few. */
static void test_profile_lists_every_op(void) {
  recap_pipeline *p = create(kBucketed, RECAP_MODE_GRAPH, 1);
  recap_op_profile ops[3];
  size_t count = 0;
  CHECK_STATUS(recap_pipeline_profile(p, 2, ops, 2, &count), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(count, 3);
  CHECK_OK(recap_pipeline_profile(p, 2, ops, 3, &count));
  CU_ASSERT_EQUAL_FATAL(count, 3);
  const char *kinds[3] = {"linear", "add", "tanh"};
  for (int o = 0; o < 3; ++o) {
    CU_ASSERT_STRING_EQUAL(ops[o].op, kinds[o]);
    CU_ASSERT_PTR_NOT_NULL(ops[o].name);
    CU_ASSERT_FALSE(ops[o].is_view);
    CU_ASSERT(ops[o].ms >= 0);
  }
  recap_pipeline_stats stats;
  CHECK_OK(recap_pipeline_stats_get(p, &stats));
  CU_ASSERT_EQUAL(stats.eager_runs, 2);
  CHECK_STATUS(recap_pipeline_profile(p, -1, ops, 3, &count), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap_pipeline_destroy(p));
}

static void test_fusion_is_counted(void) {
  recap_pipeline *p = create(kBucketed, RECAP_MODE_GRAPH, 0);
  recap_pipeline_info info;
  CHECK_OK(recap_pipeline_info_get(p, &info));
  /* Whatever the pass folds, it replaces spec ops by fewer ops, each one launch. */
  CU_ASSERT(info.fused_ops >= 2);
  CU_ASSERT(info.num_ops < 3);
  CU_ASSERT_EQUAL(info.launches, info.num_ops);
  CU_ASSERT(info.num_tensors < 6);
  CHECK_OK(recap_pipeline_destroy(p));
}

/* What tensor `index` must say: a 2-d f32 tensor of rows x cols (the largest bucket). */
typedef struct {
  const char *name;
  recap_tensor_role role;
  int is_output;
  int64_t rows, cols;
  int bucket_axis;
  recap_init_kind init;
} expected_tensor;

static void check_tensor(recap_pipeline *p, size_t index, expected_tensor want,
                         recap_tensor_info *t) {
  CHECK_OK(recap_pipeline_tensor_info_get(p, index, t));
  CU_ASSERT_STRING_EQUAL(t->name, want.name);
  CU_ASSERT_EQUAL(t->role, want.role);
  CU_ASSERT_EQUAL(t->is_output, want.is_output);
  CU_ASSERT_EQUAL(t->dtype, RECAP_DTYPE_F32);
  CU_ASSERT_EQUAL(t->ndim, 2);
  CU_ASSERT_EQUAL(t->shape[0], want.rows);
  CU_ASSERT_EQUAL(t->shape[1], want.cols);
  CU_ASSERT_EQUAL(t->bytes, (size_t)(want.rows * want.cols * 4));
  CU_ASSERT_EQUAL(t->bucket_axis, want.bucket_axis);
  CU_ASSERT_EQUAL(t->init.kind, want.init);
}

static void test_tensors_of_a_bucketed_spec(void) {
  recap_pipeline *p = create(kBucketed, RECAP_MODE_GRAPH, 1);
  recap_tensor_info t;
  check_tensor(p, 0, (expected_tensor){"x", RECAP_ROLE_INPUT, 0, 4, 3, 0, RECAP_INIT_UNIFORM}, &t);
  CU_ASSERT_EQUAL(t.init.low, 5.0);
  CU_ASSERT_EQUAL(t.init.high, 6.0);
  CU_ASSERT_PTR_NULL(t.init.path);
  check_tensor(p, 1, (expected_tensor){"w", RECAP_ROLE_PARAM, 0, 5, 3, -1, RECAP_INIT_VALUE}, &t);
  CU_ASSERT_EQUAL(t.init.value, 0.5);
  /* A state's default init is zeros. */
  check_tensor(p, 2, (expected_tensor){"cache", RECAP_ROLE_STATE, 0, 4, 5, 0, RECAP_INIT_ZEROS},
               &t);
  /* Op outputs follow in op order: h, a, y; only y is an output. */
  const char *names[3] = {"h", "a", "y"};
  for (size_t i = 0; i < 3; i++)
    check_tensor(
        p, 3 + i,
        (expected_tensor){names[i], RECAP_ROLE_INTERMEDIATE, i == 2, 4, 5, 0, RECAP_INIT_NONE}, &t);
  CHECK_STATUS(recap_pipeline_tensor_info_get(p, 6, &t), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("tensor index 6");
  CHECK_STATUS(recap_pipeline_tensor_info_get(p, 0, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap_pipeline_destroy(p));
}

static void test_spec_without_buckets(void) {
  recap_pipeline *p = create(kFlat, RECAP_MODE_EAGER, 1);
  recap_pipeline_info info;
  CHECK_OK(recap_pipeline_info_get(p, &info));
  CU_ASSERT_STRING_EQUAL(info.name, "flat");
  CU_ASSERT_EQUAL(info.mode, RECAP_MODE_EAGER);
  CU_ASSERT_EQUAL_FATAL(info.num_buckets, 1);
  CU_ASSERT_EQUAL(info.bucket_values[0], 0);
  CU_ASSERT_PTR_NULL(info.bucket_dim);
  CU_ASSERT_EQUAL(info.num_tensors, 2);
  recap_tensor_info t;
  for (size_t i = 0; i < 2; i++) {
    CHECK_OK(recap_pipeline_tensor_info_get(p, i, &t));
    CU_ASSERT_EQUAL(t.bucket_axis, -1);
    CU_ASSERT_EQUAL(t.shape[0], 2);
    CU_ASSERT_EQUAL(t.shape[1], 6);
  }
  CU_ASSERT_EQUAL(t.init.kind, RECAP_INIT_NONE);
  CHECK_OK(recap_pipeline_tensor_info_get(p, 0, &t));
  CU_ASSERT_EQUAL(t.init.kind, RECAP_INIT_ONES);
  /* Eager mode never captures. */
  CHECK_OK(recap_pipeline_run(p, 0));
  const recap_graph *g = (const recap_graph *)&info; /* overwritten with NULL */
  CHECK_OK(recap_pipeline_graph(p, 0, &g));
  CU_ASSERT_PTR_NULL(g);
  CHECK_OK(recap_pipeline_destroy(p));
}

static void test_graphs_and_setup_times(void) {
  recap_pipeline *p = create(kBucketed, RECAP_MODE_GRAPH, 1);
  const recap_graph *g = NULL;
  recap_pipeline_stats stats;
  CHECK_OK(recap_pipeline_stats_get(p, &stats));
  CU_ASSERT(stats.load_ms > 0);
  CU_ASSERT(stats.bind_ms > 0);
  CU_ASSERT_EQUAL(stats.warmup_ms, 0);
  CU_ASSERT_EQUAL(stats.capture_ms, 0);
  CHECK_OK(recap_pipeline_graph(p, 2, &g));
  CU_ASSERT_PTR_NULL(g); /* nothing captured yet */
  CHECK_OK(recap_pipeline_capture(p));
  for (size_t b = 0; b < 3; b++) {
    CHECK_OK(recap_pipeline_graph(p, b, &g));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    recap_graph_info gi;
    CHECK_OK(recap_graph_info_get(g, &gi));
    CU_ASSERT_EQUAL(gi.captures, 1);
    CU_ASSERT(gi.nodes >= 3); /* the three ops, at least */
  }
  CHECK_STATUS(recap_pipeline_graph(p, 3, &g), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap_pipeline_stats_get(p, &stats));
  CU_ASSERT(stats.warmup_ms > 0);
  CU_ASSERT(stats.capture_ms > 0);
  CU_ASSERT(stats.instantiate_ms > 0);
  CU_ASSERT_EQUAL(stats.capture_failures, 0);

  /* A clone shares the model: same strings, no load of its own. */
  recap_pipeline *c = NULL;
  CHECK_OK(recap_pipeline_clone(p, NULL, &c));
  recap_pipeline_info pi, ci;
  CHECK_OK(recap_pipeline_info_get(p, &pi));
  CHECK_OK(recap_pipeline_info_get(c, &ci));
  CU_ASSERT_PTR_EQUAL(pi.name, ci.name);
  CU_ASSERT_PTR_EQUAL(pi.bucket_values, ci.bucket_values);
  CHECK_OK(recap_pipeline_stats_get(c, &stats));
  CU_ASSERT_EQUAL(stats.load_ms, 0);
  CHECK_OK(recap_pipeline_graph(c, 0, &g));
  CU_ASSERT_PTR_NULL(g); /* its own graphs, not captured yet */
  CHECK_OK(recap_pipeline_destroy(p));
  /* The clone still holds the model: its strings outlive the source. */
  CHECK_OK(recap_pipeline_info_get(c, &ci));
  CU_ASSERT_STRING_EQUAL(ci.name, "info");
  CHECK_OK(recap_pipeline_destroy(c));
}

static const test_case kTests[] = {
    {"info_of_a_bucketed_spec", test_info_of_a_bucketed_spec, false},
    {"fusion_is_counted", test_fusion_is_counted, false},
    {"profile_lists_every_op", test_profile_lists_every_op, false},
    {"tensors_of_a_bucketed_spec", test_tensors_of_a_bucketed_spec, false},
    {"spec_without_buckets", test_spec_without_buckets, false},
    {"graphs_and_setup_times", test_graphs_and_setup_times, false},
};

/* The specs name the host device: every case runs in "pipeline_info/host" only. */
int main(void) {
  test_add_host_and_cuda_suites("pipeline_info", kTests, sizeof kTests / sizeof kTests[0]);
  return test_run_all();
}
