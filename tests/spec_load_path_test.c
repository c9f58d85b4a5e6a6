/*
 * spec_load_path_test.c: the one load path (engine/load.h) reads a spec once and builds each
 * bucket's IR once, for the public create call and for what the CLI calls (recap__load_file,
 * then recap__pipeline_create_model); dim overrides are checked as part of the spec; the
 * bucketed axes come from neighbouring buckets (a probe only for a single bucket value).
 *
 * The counts are the engine's own counters (recap__spec_parses, recap__ir_builds); the
 * expected numbers are the spec's bucket counts, written here by hand from specs/.
 */
#include <string.h>

#include "engine/load.h"
#include "engine/pipeline.h"
#include "tests/test_util.h"

static const recap_device host = {RECAP_BACKEND_HOST, 0};

typedef struct {
  size_t parses, builds;
} counts;

static counts now(void) {
  return (counts){recap__spec_parses(), recap__ir_builds()};
}

static void expect_since(counts before, size_t parses, size_t builds) {
  counts after = now();
  CU_ASSERT_EQUAL(after.parses - before.parses, parses);
  CU_ASSERT_EQUAL(after.builds - before.builds, builds);
  if (after.parses - before.parses != parses || after.builds - before.builds != builds)
    fprintf(stderr, "\n  %zu parses, %zu IR builds (expected %zu, %zu)\n",
            after.parses - before.parses, after.builds - before.builds, parses, builds);
}

/* specs/mlp_decode.yaml has B: [1, 2, 4, 8]: four buckets, no probe. */
static void test_public_create_reads_the_spec_once_and_builds_each_bucket_once(void) {
  recap_pipeline_options o = {.struct_size = sizeof o, .override_device = 1, .device = host};
  counts before = now();
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_file("specs/mlp_decode.yaml", &o, &p));
  expect_since(before, 1, 4);
  if (p) CU_ASSERT_EQUAL(p->model->num_buckets, 4);
  CHECK_OK(recap_pipeline_destroy(p));
}

/* What `recap run` does: load (with its --dim flags), then a pipeline over the model. */
static void test_the_cli_path_reads_the_spec_once_and_builds_each_bucket_once(void) {
  const char *dims[] = {"B=3", NULL};
  recap__load_options lo = {.spec = {.dims = dims, .select_batch = true},
                            .device = host,
                            .device_given = true,
                            .capacity = RECAP__CAPACITY_REQUIRED};
  counts before = now();
  recap__model *m = NULL;
  CHECK_OK(recap__load_file("specs/mlp_decode.yaml", &lo, &m, NULL));
  if (!m) return;
  CU_ASSERT_EQUAL(m->spec->run_batch, 3); /* a batch picked, the buckets kept */
  CU_ASSERT_EQUAL(m->num_buckets, 4);
  CU_ASSERT_TRUE(m->capacity > 0);
  recap_pipeline_options o = {.struct_size = sizeof o, .override_device = 1, .device = host};
  recap_pipeline *p = NULL;
  CHECK_OK(recap__pipeline_create_model(m, &o, &p));
  recap__model_release(m);
  CHECK_OK(recap_pipeline_run(p, 3));
  expect_since(before, 1, 4);
  CHECK_OK(recap_pipeline_destroy(p));
}

static const char *const kSingle =
    "name: single\ndevice: host\ndtype: f32\n"
    "dims: {B: [4]}\n"
    "tensors:\n  x: {shape: [B, 8], role: input}\n"
    "ops:\n  - {op: relu, in: [x], out: y}\n";

/* One bucket value: one probe IR tells which axes carry B. */
static void test_a_single_bucket_value_costs_one_probe(void) {
  recap__load_options lo = {.capacity = RECAP__CAPACITY_OFF};
  counts before = now();
  recap__model *m = NULL;
  CHECK_OK(recap__load_string(kSingle, strlen(kSingle), "single.yaml", &lo, &m, NULL));
  expect_since(before, 1, 2);
  if (!m) return;
  const recap__ir *ir = m->irs[0];
  CU_ASSERT_EQUAL(ir->tensors[recap__ir_find_tensor(ir, "x")].bucket_axis, 0);
  CU_ASSERT_EQUAL(ir->tensors[recap__ir_find_tensor(ir, "y")].bucket_axes, 1u);
  recap__model_release(m);
}

/* An override that breaks the spec is reported where the spec uses the dim, in one pass, and
 * costs no second read. */
static void test_overrides_are_checked_with_the_spec_in_one_pass(void) {
  static const char text[] =
      "name: o\ndevice: host\ndtype: f32\n"
      "dims: {B: [2, 4], K: 8}\n"
      "tensors:\n  x: {shape: [B, K], role: input}\n  w: {shape: [8, 8], role: param}\n"
      "ops:\n  - {op: linear, in: [x, w], out: y}\n";
  const char *dims[] = {"K=6", NULL};
  recap__load_options lo = {.spec = {.dims = dims}};
  recap__diag diag = {0};
  recap__model *m = NULL;
  counts before = now();
  CHECK_STATUS(recap__load_string(text, strlen(text), "o.yaml", &lo, &m, &diag),
               RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_PTR_NULL(m);
  CU_ASSERT_EQUAL(now().parses - before.parses, 1);
  /* Reported once, at the op, though both buckets' IRs see it. */
  size_t at_op = 0;
  for (size_t i = 0; i < diag.count; ++i) at_op += strncmp(diag.messages[i], "o.yaml:9:", 9) == 0;
  CU_ASSERT_EQUAL(at_op, 1);
  recap__diag_free(&diag);
}

/* A run's work per bucket, by hand: linear [B,8]x[8,8] is 2*B*8*8 FLOPs, relu one per element
 * of [B,8]; bytes are each op's inputs and outputs (f32: x and y 32*B, w 256). */
static void test_model_work_counts_each_bucket(void) {
  static const char text[] =
      "name: w\ndevice: host\ndtype: f32\n"
      "dims: {B: [2, 4]}\n"
      "tensors:\n  x: {shape: [B, 8], role: input}\n  w: {shape: [8, 8], role: param}\n"
      "ops:\n  - {op: linear, in: [x, w], out: h}\n  - {op: relu, in: [h], out: y}\n";
  recap__load_options lo = {.capacity = RECAP__CAPACITY_OFF, .no_fusion = true};
  recap__model *m = NULL;
  CHECK_OK(recap__load_string(text, strlen(text), "w.yaml", &lo, &m, NULL));
  if (!m) return;
  CU_ASSERT_EQUAL_FATAL(m->num_buckets, 2);
  double flops = -1, bytes = -1;
  CHECK_OK(recap__model_work(m, 0, &flops, &bytes));
  CU_ASSERT_DOUBLE_EQUAL(flops, 2.0 * 2 * 8 * 8 + 2 * 8, 0);
  CU_ASSERT_DOUBLE_EQUAL(bytes, (64 + 256 + 64) + (64 + 64), 0);
  CHECK_OK(recap__model_work(m, 1, &flops, &bytes));
  CU_ASSERT_DOUBLE_EQUAL(flops, 2.0 * 4 * 8 * 8 + 4 * 8, 0);
  CU_ASSERT_DOUBLE_EQUAL(bytes, (128 + 256 + 128) + (128 + 128), 0);
  CHECK_STATUS(recap__model_work(m, 2, &flops, &bytes), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap__model_work(NULL, 0, &flops, &bytes), RECAP_STATUS_INVALID_ARGUMENT);
  recap__model_release(m);
}

int main(void) {
  CU_pSuite s = test_add_suite("load_path", NULL, NULL);
  CU_ADD_TEST(s, test_public_create_reads_the_spec_once_and_builds_each_bucket_once);
  CU_ADD_TEST(s, test_the_cli_path_reads_the_spec_once_and_builds_each_bucket_once);
  CU_ADD_TEST(s, test_a_single_bucket_value_costs_one_probe);
  CU_ADD_TEST(s, test_overrides_are_checked_with_the_spec_in_one_pass);
  CU_ADD_TEST(s, test_model_work_counts_each_bucket);
  return test_run_all();
}
