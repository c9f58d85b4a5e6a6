/*
 * pipeline_views_test.c: shape ops planned as views (engine/plan.h) and arena planning off
 * (RECAP_ARENA=0), end to end on the host backend.
 *
 * The attention part of a transformer block (split, reshape, permute, attention, permute back,
 * reshape) runs with every shape op a view; a second spec forces contiguous copies around
 * attention with `copy` ops. The host kernels compute each element the same way whatever the
 * layout, so the two outputs must agree bit for bit, and so must the first spec run with
 * RECAP_ARENA=0 (every intermediate its own allocation, no reuse).
 */
#include <stdlib.h>
#include <string.h>

#include "cli/plan_text.h"
#include "engine/pipeline.h"
#include "include/recap.h"
#include "tests/test_util.h"

#define HEAD                                                             \
  "name: views\n"                                                        \
  "device: host\n"                                                       \
  "dtype: f32\n"                                                         \
  "seed: 3\n"                                                            \
  "dims: {B: 2, S: 8, D: 16, H: 2, Dh: 8}\n"                             \
  "tensors:\n"                                                           \
  "  x:     {shape: [B, S, D], role: input}\n"                           \
  "  w_qkv: {shape: [48, D], role: param, init: normal, std: 0.3}\n"     \
  "  w_o:   {shape: [D, D], role: param, init: normal, std: 0.3}\n"      \
  "ops:\n"                                                               \
  "  - {op: linear, in: [x, w_qkv], out: qkv, shape: [B, S, 48]}\n"      \
  "  - {op: split, in: [qkv], out: [qf, kf, vf], dim: -1, sizes: [D, D, D]}\n"

/* Every shape op a view: no copy at all. */
static const char *const kViews = HEAD
    "  - {op: reshape, in: [qf], out: q4, shape: [B, S, H, Dh]}\n"
    "  - {op: reshape, in: [kf], out: k4, shape: [B, S, H, Dh]}\n"
    "  - {op: reshape, in: [vf], out: v4, shape: [B, S, H, Dh]}\n"
    "  - {op: permute, in: [q4], out: q, dims: [0, 2, 1, 3]}\n"
    "  - {op: permute, in: [k4], out: k, dims: [0, 2, 1, 3]}\n"
    "  - {op: permute, in: [v4], out: v, dims: [0, 2, 1, 3]}\n"
    "  - {op: attention, in: [q, k, v], out: attn, causal: true}\n"
    "  - {op: permute, in: [attn], out: back, dims: [0, 2, 1, 3]}\n"
    "  - {op: reshape, in: [back], out: flat, shape: [B, S, D]}\n"
    "  - {op: linear, in: [flat, w_o], out: y}\n"
    "outputs: [y]\n";

/* The same computation with contiguous copies before and after attention. */
static const char *const kCopies = HEAD
    "  - {op: copy, in: [qf], out: qc}\n"
    "  - {op: copy, in: [kf], out: kc}\n"
    "  - {op: copy, in: [vf], out: vc}\n"
    "  - {op: reshape, in: [qc], out: q4, shape: [B, S, H, Dh]}\n"
    "  - {op: reshape, in: [kc], out: k4, shape: [B, S, H, Dh]}\n"
    "  - {op: reshape, in: [vc], out: v4, shape: [B, S, H, Dh]}\n"
    "  - {op: permute, in: [q4], out: q, dims: [0, 2, 1, 3]}\n"
    "  - {op: permute, in: [k4], out: k, dims: [0, 2, 1, 3]}\n"
    "  - {op: permute, in: [v4], out: v, dims: [0, 2, 1, 3]}\n"
    "  - {op: copy, in: [q], out: qd}\n"
    "  - {op: copy, in: [k], out: kd}\n"
    "  - {op: copy, in: [v], out: vd}\n"
    "  - {op: attention, in: [qd, kd, vd], out: attn, causal: true}\n"
    "  - {op: copy, in: [attn], out: attn_c}\n"
    "  - {op: permute, in: [attn_c], out: back, dims: [0, 2, 1, 3]}\n"
    "  - {op: reshape, in: [back], out: flat, shape: [B, S, D]}\n"
    "  - {op: linear, in: [flat, w_o], out: y}\n"
    "outputs: [y]\n";

enum { N = 2 * 8 * 16 };

/* Creates the pipeline (eager, host), feeds x and returns y (N floats, caller frees). */
static float *run_spec(const char *yaml, const float *x, recap_pipeline **keep) {
  recap_pipeline_options o = RECAP_PIPELINE_OPTIONS_INIT;
  o.override_mode = 1;
  o.mode = RECAP_MODE_EAGER;
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_string(yaml, strlen(yaml), "<views>", &o, &p));
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  CHECK_OK(recap_pipeline_copy_in(p, "x", x, N * sizeof *x, 0));
  CHECK_OK(recap_pipeline_run(p, 0));
  float *y = malloc(N * sizeof *y);
  CU_ASSERT_PTR_NOT_NULL_FATAL(y);
  for (int i = 0; i < N; i++) y[i] = -12345.0f; /* poison: a missing write shows */
  CHECK_OK(recap_pipeline_copy_out(p, "y", y, N * sizeof *y, 0));
  if (keep)
    *keep = p;
  else
    CHECK_OK(recap_pipeline_destroy(p));
  return y;
}

static float *random_input(void) {
  test_rng rng;
  test_rng_init(&rng);
  float *x = malloc(N * sizeof *x);
  CU_ASSERT_PTR_NOT_NULL_FATAL(x);
  for (int i = 0; i < N; i++) x[i] = (float)test_rng_uniform(&rng, -1, 1);
  return x;
}

static void test_views_compute_what_contiguous_copies_compute(void) {
  unsetenv("RECAP_ARENA");
  float *x = random_input();
  recap_pipeline *p = NULL;
  float *with_views = run_spec(kViews, x, &p);
  float *with_copies = run_spec(kCopies, x, NULL);
  CU_ASSERT_EQUAL(memcmp(with_views, with_copies, N * sizeof(float)), 0);
  /* Nine shape ops launch nothing: the two linears and attention are all that runs. */
  CU_ASSERT_EQUAL(p->launches, 3);
  int attn = recap__ir_find_tensor(p->model->irs[0], "attn");
  CU_ASSERT_FATAL(attn >= 0);
  CU_ASSERT_EQUAL(p->model->plan->tensors[attn].kind, RECAP_PLAN_VIEW);
  CHECK_OK(recap_pipeline_destroy(p));
  free(with_views);
  free(with_copies);
  free(x);
}

static void test_arena_off_computes_the_same_with_separate_allocations(void) {
  float *x = random_input();
  unsetenv("RECAP_ARENA");
  float *arena = run_spec(kCopies, x, NULL);
  CU_ASSERT_EQUAL(setenv("RECAP_ARENA", "0", 1), 0);
  recap_pipeline *p = NULL;
  float *separate = run_spec(kCopies, x, &p);
  unsetenv("RECAP_ARENA");
  CU_ASSERT_EQUAL(memcmp(arena, separate, N * sizeof(float)), 0);
  const recap__plan *plan = p->model->plan;
  CU_ASSERT_TRUE(plan->separate);
  CU_ASSERT_PTR_NULL(p->arena);
  /* Every buffer is its own allocation, owned by its root tensor. */
  for (size_t b = 0; b < plan->num_buffers; b++)
    CU_ASSERT_PTR_NOT_NULL(p->owned[plan->buffers[b].root]);
  for (size_t t = 0; t < plan->num_tensors; t++)
    CU_ASSERT_NOT_EQUAL(plan->tensors[t].kind, RECAP_PLAN_IN_PLACE);
  char *text = NULL;
  CHECK_OK(cli_plan_format(p->model->irs[0], plan, &text));
  CU_ASSERT_PTR_NOT_NULL(text && strstr(text, "arena planning: off"));
  free(text);
  CHECK_OK(recap_pipeline_destroy(p));
  free(arena);
  free(separate);
  free(x);
}

int main(void) {
  CU_pSuite s = test_add_suite("pipeline_views/host", NULL, NULL);
  CU_ADD_TEST(s, test_views_compute_what_contiguous_copies_compute);
  CU_ADD_TEST(s, test_arena_off_computes_the_same_with_separate_allocations);
  return test_run_all();
}
