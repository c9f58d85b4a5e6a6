/*
 * pipeline_plan_buckets_test.c: a bucketed spec whose views work in the largest bucket but not
 * in a smaller one loads, plans those shape ops as copies, and computes the right values in
 * every bucket (docs/PLANNER.md, "Buckets"), on the host backend.
 *
 * The spec has B in {2, 8}:
 * - a row slice of a [2, B] f32 tensor starts B * 4 bytes in: 16-byte aligned at B = 8, not at
 *   B = 2, so it cannot be a view there (RECAP_PLAN_VIEW_ALIGNMENT);
 * - a column slice [0, B) of a [2, 8] tensor is contiguous at B = 8 and strided at B = 2, so the
 *   reshape to [2B] that follows is a view at B = 8 but needs a copy at B = 2 (the stride
 *   condition; the slice itself stays a view: its reader, the reshape, reads any layout).
 * Before the planner looked at every bucket, such a spec failed to load. The expected values
 * are computed here element by element (add and neg are exact in f32).
 */
#include <stdlib.h>
#include <string.h>

#include "cli/plan_text.h"
#include "engine/pipeline.h"
#include "include/recap.h"
#include "tests/test_util.h"

static const char *const kSpec =
    "name: bucket-views\n"
    "device: host\n"
    "dtype: f32\n"
    "seed: 5\n"
    "dims: {B: [2, 8]}\n"
    "tensors:\n"
    "  x: {shape: [2, B], role: input}\n"
    "  z: {shape: [2, 8], role: input}\n"
    "ops:\n"
    "  - {op: neg, in: [x], out: a}\n"
    "  - {op: slice, in: [a], out: s, dim: 0, start: 1, end: 2}\n"
    "  - {op: add, in: [s, s], out: y1}\n"
    "  - {op: neg, in: [z], out: c}\n"
    "  - {op: slice, in: [c], out: t, dim: 1, start: 0, end: B}\n"
    "  - {op: reshape, in: [t], out: f, shape: [-1]}\n"
    "  - {op: add, in: [f, f], out: y2}\n"
    "outputs: [y1, y2]\n";

enum { MAX_B = 8 };

static recap_pipeline *create(recap_run_mode mode, int no_fusion, const char *const *dims) {
  recap_pipeline_options o = RECAP_PIPELINE_OPTIONS_INIT;
  o.override_mode = 1;
  o.mode = mode;
  o.no_fusion = no_fusion;
  o.dims = dims;
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_string(kSpec, strlen(kSpec), "<bucket-views>", &o, &p));
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  return p;
}

/* The op that produces tensor `name` in the planned (largest) IR. */
static int producer_of(const recap_pipeline *p, const char *name) {
  const recap__ir *ir = p->model->irs[p->model->num_buckets - 1];
  int t = recap__ir_find_tensor(ir, name);
  CU_ASSERT_FATAL(t >= 0);
  return ir->tensors[t].producer;
}

/* Runs bucket b (batch b) on fresh inputs and checks y1 = -2 x[1, :] and y2 = -2 z[:, :b]
 * flattened, against a poisoned output buffer. */
static void check_bucket(recap_pipeline *p, int b, test_rng *rng) {
  float x[2 * MAX_B], z[2 * 8], y1[MAX_B], y2[2 * MAX_B];
  for (int i = 0; i < 2 * b; i++) x[i] = (float)test_rng_uniform(rng, -4, 4); /* [2, b] */
  for (int i = 0; i < 16; i++) z[i] = (float)test_rng_uniform(rng, -4, 4);
  CHECK_OK(recap_pipeline_copy_in(p, "x", x, (size_t)(2 * b) * sizeof(float), b));
  CHECK_OK(recap_pipeline_copy_in(p, "z", z, sizeof z, 0));
  CHECK_OK(recap_pipeline_run(p, b));
  for (int i = 0; i < MAX_B; i++) y1[i] = -12345.0f;
  for (int i = 0; i < 2 * MAX_B; i++) y2[i] = -12345.0f;
  /* Whole buffers: bucket b's values are their prefix. */
  CHECK_OK(recap_pipeline_copy_out(p, "y1", y1, sizeof y1, 0));
  CHECK_OK(recap_pipeline_copy_out(p, "y2", y2, sizeof y2, 0));
  int wrong = 0;
  for (int i = 0; i < b; i++) wrong += y1[i] != -2.0f * x[b + i];
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < b; i++) wrong += y2[r * b + i] != -2.0f * z[r * 8 + i];
  if (wrong) fprintf(stderr, "\n  bucket %d: %d wrong elements\n", b, wrong);
  CU_ASSERT_EQUAL(wrong, 0);
}

static void check_runs(recap_run_mode mode, int no_fusion) {
  recap_pipeline *p = create(mode, no_fusion, NULL);
  const recap__plan *plan = p->model->plan;
  int slice_row = producer_of(p, "s"), slice_cols = producer_of(p, "t"),
      reshape = producer_of(p, "f");
  /* The two views that B = 2 cannot form copy in every bucket; the column slice is a view. */
  CU_ASSERT_FALSE(plan->op_is_view[slice_row]);
  CU_ASSERT_TRUE(plan->op_copies_for_buckets[slice_row]);
  CU_ASSERT_FALSE(plan->op_is_view[reshape]);
  CU_ASSERT_TRUE(plan->op_copies_for_buckets[reshape]);
  CU_ASSERT_TRUE(plan->op_is_view[slice_cols]);
  CU_ASSERT_FALSE(plan->op_copies_for_buckets[slice_cols]);
  test_rng rng;
  test_rng_init(&rng);
  /* Both buckets, twice, in both orders: each graph (or eager run) must stand on its own. */
  const int order[] = {2, 8, 8, 2};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) check_bucket(p, order[i], &rng);
  CHECK_OK(recap_pipeline_destroy(p));
}

static void test_views_a_smaller_bucket_cannot_form_copy_in_eager_mode(void) {
  check_runs(RECAP_MODE_EAGER, 0);
}

static void test_views_a_smaller_bucket_cannot_form_copy_in_graph_mode(void) {
  check_runs(RECAP_MODE_GRAPH, 0);
}

static void test_views_a_smaller_bucket_cannot_form_copy_without_fusion(void) {
  check_runs(RECAP_MODE_GRAPH, 1);
}

/* With the largest bucket alone, the same ops are views: the buckets, not the ops, decide. */
static void test_the_largest_bucket_alone_takes_every_view(void) {
  const char *const dims[] = {"B=8", NULL};
  recap_pipeline *p = create(RECAP_MODE_EAGER, 0, dims);
  const recap__plan *plan = p->model->plan;
  const char *names[] = {"s", "t", "f"};
  for (size_t i = 0; i < 3; i++) {
    int j = producer_of(p, names[i]);
    CU_ASSERT_TRUE(plan->op_is_view[j]);
    CU_ASSERT_FALSE(plan->op_copies_for_buckets[j]);
  }
  test_rng rng;
  test_rng_init(&rng);
  check_bucket(p, 8, &rng);
  CHECK_OK(recap_pipeline_destroy(p));
}

/* `recap plan`'s text names the ops a smaller bucket keeps as copies. */
static void test_plan_text_names_the_ops_a_smaller_bucket_keeps_as_copies(void) {
  recap_pipeline *p = create(RECAP_MODE_EAGER, 1, NULL);
  char *text = NULL;
  CHECK_OK(cli_plan_format(p->model->irs[p->model->num_buckets - 1], p->model->plan, &text));
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  const recap__ir *ir = p->model->irs[p->model->num_buckets - 1];
  char needle[128];
  snprintf(needle, sizeof needle, "'%s' copies: a view of it works in this bucket but not",
           ir->ops[producer_of(p, "f")].name);
  if (!strstr(text, needle)) fprintf(stderr, "\n  no \"%s\" in:\n%s", needle, text);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, needle));
  free(text);
  CHECK_OK(recap_pipeline_destroy(p));
}

int main(void) {
  CU_pSuite s = test_add_suite("pipeline_plan_buckets/host", NULL, NULL);
  CU_ADD_TEST(s, test_views_a_smaller_bucket_cannot_form_copy_in_eager_mode);
  CU_ADD_TEST(s, test_views_a_smaller_bucket_cannot_form_copy_in_graph_mode);
  CU_ADD_TEST(s, test_views_a_smaller_bucket_cannot_form_copy_without_fusion);
  CU_ADD_TEST(s, test_the_largest_bucket_alone_takes_every_view);
  CU_ADD_TEST(s, test_plan_text_names_the_ops_a_smaller_bucket_keeps_as_copies);
  return test_run_all();
}
