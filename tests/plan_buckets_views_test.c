/*
 * plan_buckets_views_test.c: the memory planner (engine/plan.h) over buckets and strided views:
 * smaller buckets fit the largest bucket's plan (in place that a smaller bucket breaks is
 * skipped), and with real op definitions (their infer says which layouts they read) views
 * replace copies where every reader takes the layout: an attention block runs without a single
 * copy, while a view misaligned in a smaller bucket, or read where contiguous memory is
 * needed, stays a copy, and nothing is written in place over a strided view. Every plan goes
 * through check_plan (plan_check.h).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plan_text.h"
#include "tests/plan_check.h"

/* ---- buckets ------------------------------------------------------------------------------- */

static void test_smaller_buckets_fit_the_largest_buckets_plan(void) {
  static graph large, small, larger;
  build_bucket(&large, 8);
  build_bucket(&small, 2);
  build_bucket(&larger, 16);
  recap__plan *plan = plan_checked(&large.ir);
  CHECK_OK(recap__plan_check_fits(plan, &large.ir));
  CHECK_OK(recap__plan_check_fits(plan, &small.ir));
  CHECK_STATUS(recap__plan_check_fits(plan, &larger.ir), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("'x'");
  /* An in-place pair whose sizes part in a smaller bucket cannot share a buffer there. */
  small.tensors[3].shape[0] = 1; /* b, written in place over a */
  CHECK_STATUS(recap__plan_check_fits(plan, &small.ir), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("in place");
  recap__plan_destroy(plan);
}

/* Planned over all buckets, an in-place pair whose sizes part in a smaller bucket is simply not
 * written in place (planning the largest alone would make that bucket unable to load). */
static void test_planning_every_bucket_skips_in_place_that_a_smaller_bucket_breaks(void) {
  static graph large, small;
  build_bucket(&large, 8);
  build_bucket(&small, 2);
  small.tensors[3].shape[0] = 1; /* b, over a in the largest bucket */
  recap__ir *irs[] = {&small.ir, &large.ir};
  recap__plan *plan = NULL;
  CHECK_OK(recap__plan_build_buckets(irs, 2, NULL, &plan));
  CU_ASSERT_PTR_NOT_NULL_FATAL(plan);
  check_plan(&large.ir, plan);
  CU_ASSERT_EQUAL(plan->tensors[3].kind, RECAP_PLAN_ARENA);
  CHECK_OK(recap__plan_check_fits(plan, &small.ir));
  recap__plan_destroy(plan);
  /* Buckets must differ in shapes only. */
  build_bucket(&small, 2);
  small.ops[1].def = &def_plain;
  plan = NULL;
  CHECK_STATUS(recap__plan_build_buckets(irs, 2, NULL, &plan), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("relu#1");
  CU_ASSERT_PTR_NULL(plan);
  build_bucket(&small, 16); /* "smaller" but larger than the planned one */
  CHECK_STATUS(recap__plan_build_buckets(irs, 2, NULL, &plan), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("'x'");
  CU_ASSERT_PTR_NULL(plan);
  CHECK_STATUS(recap__plan_build_buckets(irs, 0, NULL, &plan), RECAP_STATUS_INVALID_ARGUMENT);
}

/* ---- strided views (real op definitions: their infer says which layouts they read) ----- */

/* A tensor of dtype f16 and the given dims. */
static int shaped(graph *g, const char *name, recap_tensor_role role, int ndim,
                  const int64_t *dims) {
  int t = tensor(g, name, role, 4);
  recap__ir_tensor *x = &g->tensors[t];
  x->dtype = RECAP_DTYPE_F16;
  x->ndim = ndim;
  x->bytes = 2;
  for (int d = 0; d < ndim; d++) {
    x->shape[d] = dims[d];
    x->bytes *= (uint64_t)dims[d];
  }
  return t;
}

/* Op `name` (from the registry) with attrs, reading inputs[0..ni) and producing no outputs'
 * tensors given as outs[0..no) (created by the caller with shaped()). */
static int real_op(graph *g, const char *name, const recap__op_attrs *attrs, int ni,
                   const int *inputs, int no, const int *outs) {
  int j = (int)g->ir.num_ops++;
  CU_ASSERT_FATAL(j < MAX_OPS);
  recap__ir_op *op = &g->ops[j];
  op->def = recap__op_find(name);
  CU_ASSERT_PTR_NOT_NULL_FATAL(op->def);
  snprintf(g->op_names[j], sizeof g->op_names[j], "%s#%d", name, j);
  op->name = g->op_names[j];
  if (attrs) op->attrs = *attrs;
  for (int i = 0; i < ni; i++) {
    op->inputs[op->num_inputs++] = inputs[i];
    g->tensors[inputs[i]].num_consumers++;
  }
  for (int o = 0; o < no; o++) {
    op->outputs[op->num_outputs++] = outs[o];
    g->tensors[outs[o]].producer = j;
  }
  return j;
}

/* A stand-in op (no infer: it reads contiguous memory only) producing `out` from `in`. */
static int plain_into(graph *g, int in, int out) {
  int j = (int)g->ir.num_ops++;
  CU_ASSERT_FATAL(j < MAX_OPS);
  recap__ir_op *op = &g->ops[j];
  op->def = &def_plain;
  snprintf(g->op_names[j], sizeof g->op_names[j], "matmul#%d", j);
  op->name = g->op_names[j];
  op->inputs[op->num_inputs++] = in;
  g->tensors[in].num_consumers++;
  op->outputs[op->num_outputs++] = out;
  g->tensors[out].producer = j;
  return j;
}

static void expect_layout(const recap_tensor *views, const int64_t *offsets, int t,
                          const int64_t *strides, int64_t offset) {
  for (int d = 0; d < views[t].ndim; d++) CU_ASSERT_EQUAL(views[t].strides[d], strides[d]);
  CU_ASSERT_EQUAL(offsets[t], offset);
}

/* The transformer block's attention, B2 S4 H2 Dh8 (D 16): linear -> split -> reshape ->
 * permute -> attention -> permute -> reshape -> linear. Every shape op is a view: q, k and v
 * are strided views into qkv, and attention writes its output straight into the layout the
 * permute back produces. */
static void test_attention_block_runs_without_a_single_copy(void) {
  graph g;
  graph_init(&g, 1);
  const int64_t B = 2, S = 4, H = 2, Dh = 8, D = H * Dh;
  int x = shaped(&g, "x", RECAP_ROLE_INPUT, 3, (int64_t[]){B, S, D});
  int qkv = shaped(&g, "qkv", RECAP_ROLE_INTERMEDIATE, 3, (int64_t[]){B, S, 3 * D});
  plain_into(&g, x, qkv);
  int flat[3], bshd[3], bhsd[3];
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof name, "flat%d", i);
    flat[i] = shaped(&g, name, RECAP_ROLE_INTERMEDIATE, 3, (int64_t[]){B, S, D});
  }
  recap__op_attrs split = {.dim = 2, .num_sizes = 3, .sizes = {D, D, D}};
  int split_op = real_op(&g, "split", &split, 1, &qkv, 3, flat);
  recap__op_attrs to_heads = {.num_sizes = 4, .sizes = {B, S, H, Dh}};
  recap__op_attrs swap = {.num_sizes = 4, .sizes = {0, 2, 1, 3}};
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof name, "bshd%d", i);
    bshd[i] = shaped(&g, name, RECAP_ROLE_INTERMEDIATE, 4, (int64_t[]){B, S, H, Dh});
    real_op(&g, "reshape", &to_heads, 1, &flat[i], 1, &bshd[i]);
  }
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof name, "bhsd%d", i);
    bhsd[i] = shaped(&g, name, RECAP_ROLE_INTERMEDIATE, 4, (int64_t[]){B, H, S, Dh});
    real_op(&g, "permute", &swap, 1, &bshd[i], 1, &bhsd[i]);
  }
  int attn = shaped(&g, "attn", RECAP_ROLE_INTERMEDIATE, 4, (int64_t[]){B, H, S, Dh});
  recap__op_attrs causal = {.causal = 1};
  real_op(&g, "attention", &causal, 3, bhsd, 1, &attn);
  int back = shaped(&g, "back", RECAP_ROLE_INTERMEDIATE, 4, (int64_t[]){B, S, H, Dh});
  int back_op = real_op(&g, "permute", &swap, 1, &attn, 1, &back);
  int merged = shaped(&g, "merged", RECAP_ROLE_INTERMEDIATE, 3, (int64_t[]){B, S, D});
  recap__op_attrs to_rows = {.num_sizes = 3, .sizes = {B, S, D}};
  real_op(&g, "reshape", &to_rows, 1, &back, 1, &merged);
  int y = shaped(&g, "y", RECAP_ROLE_INTERMEDIATE, 3, (int64_t[]){B, S, D});
  int last = plain_into(&g, merged, y);
  mark_output(&g, y);

  recap__plan *plan = plan_checked(&g.ir);
  for (int j = 1; j < last; j++)
    if (strcmp(g.ops[j].def->name, "attention") != 0) CU_ASSERT_TRUE(plan->op_is_view[j]);
  CU_ASSERT_FALSE(plan->op_is_view[0]);
  CU_ASSERT_FALSE(plan->op_is_view[last]);
  /* Forward: q, k and v are views of qkv; backward: attn is a view of back. */
  for (int i = 0; i < 3; i++) {
    CU_ASSERT_EQUAL(plan->tensors[bhsd[i]].kind, RECAP_PLAN_VIEW);
    CU_ASSERT_EQUAL(plan->tensors[bhsd[i]].shares_with, qkv);
  }
  CU_ASSERT_EQUAL(plan->tensors[flat[0]].view_op, split_op);
  CU_ASSERT_EQUAL(plan->tensors[attn].kind, RECAP_PLAN_VIEW);
  CU_ASSERT_EQUAL(plan->tensors[attn].shares_with, back);
  CU_ASSERT_EQUAL(plan->tensors[attn].view_op, back_op);
  CU_ASSERT_EQUAL(plan->tensors[back].kind, RECAP_PLAN_ARENA);
  CU_ASSERT_EQUAL(plan->tensors[merged].shares_with, back);
  /* qkv's buffer lives until attention reads the views; back's from attention's write. */
  int attention_op = g.tensors[attn].producer;
  CU_ASSERT_EQUAL(plan->buffers[plan->tensors[qkv].buffer].last_op, attention_op);
  CU_ASSERT_EQUAL(plan->buffers[plan->tensors[back].buffer].first_op, attention_op);
  CU_ASSERT_EQUAL(plan->buffers[plan->tensors[back].buffer].last_op, last);
  /* They are live together at the attention op: apart. */
  CU_ASSERT_TRUE(disjoint(plan, qkv, back));

  recap_tensor views[MAX_T];
  int64_t offsets[MAX_T];
  CHECK_OK(recap__plan_views(&g.ir, plan, views, offsets));
  for (int i = 0; i < 3; i++)
    expect_layout(views, offsets, bhsd[i], (int64_t[]){S * 3 * D, Dh, 3 * D, 1}, i * D);
  expect_layout(views, offsets, attn, (int64_t[]){S * D, Dh, D, 1}, 0);
  expect_layout(views, offsets, merged, (int64_t[]){S * D, D, 1}, 0);
  CHECK_OK(recap__plan_check_fits(plan, &g.ir));

  char *text = NULL;
  CHECK_OK(cli_plan_format(&g.ir, plan, &text));
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "views: 9 shape op(s)"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "writes it in this layout"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "strides [192,8,48,1]"));
  free(text);
  recap__plan_destroy(plan);
}

/* A split of [4, 3B] f16 into three [4, B] parts, each read by relu: the parts start 2B bytes
 * apart, 16-byte aligned at B = 8 but not at B = 4, so planned with both buckets the split
 * copies (and says why), while the largest bucket alone would take the view. */
static void build_split_bucket(graph *g, int64_t B) {
  graph_init(g, 1);
  int x = shaped(g, "x", RECAP_ROLE_INPUT, 2, (int64_t[]){4, 3 * B});
  int a = shaped(g, "a", RECAP_ROLE_INTERMEDIATE, 2, (int64_t[]){4, 3 * B});
  plain_into(g, x, a);
  int parts[3];
  for (int i = 0; i < 3; i++) {
    char name[8];
    snprintf(name, sizeof name, "p%d", i);
    parts[i] = shaped(g, name, RECAP_ROLE_INTERMEDIATE, 2, (int64_t[]){4, B});
  }
  recap__op_attrs split = {.dim = 1, .num_sizes = 3, .sizes = {B, B, B}};
  real_op(g, "split", &split, 1, &a, 3, parts);
  int y = shaped(g, "y", RECAP_ROLE_INTERMEDIATE, 2, (int64_t[]){4, B});
  real_op(g, "add", NULL, 2, (int[]){parts[0], parts[2]}, 1, &y);
  mark_output(g, y);
}

static void test_a_view_misaligned_in_a_smaller_bucket_stays_a_copy(void) {
  static graph large, small;
  build_split_bucket(&large, 8);
  build_split_bucket(&small, 4);
  recap__plan *alone = plan_checked(&large.ir);
  CU_ASSERT_TRUE(alone->op_is_view[1]);
  /* What the engine did before it planned every bucket: the smaller one cannot run on it. */
  CHECK_STATUS(recap__plan_check_fits(alone, &small.ir), RECAP_STATUS_INVALID_ARGUMENT);
  recap__plan_destroy(alone);
  recap__ir *irs[] = {&small.ir, &large.ir};
  recap__plan *plan = NULL;
  CHECK_OK(recap__plan_build_buckets(irs, 2, NULL, &plan));
  CU_ASSERT_PTR_NOT_NULL_FATAL(plan);
  check_plan(&large.ir, plan);
  CU_ASSERT_FALSE(plan->op_is_view[1]);
  CU_ASSERT_TRUE(plan->op_copies_for_buckets[1]);
  CHECK_OK(recap__plan_check_fits(plan, &small.ir));
  recap_tensor views[MAX_T];
  int64_t offsets[MAX_T];
  CHECK_OK(recap__plan_views(&small.ir, plan, views, offsets));
  for (int t = 0; t < (int)small.ir.num_tensors; t++) {
    CU_ASSERT_EQUAL(offsets[t], 0);
    CU_ASSERT_TRUE(recap__tensor_is_contiguous(&views[t]));
  }
  recap__plan_destroy(plan);
}

/* A permuted (non-contiguous) result whose reader only reads contiguous memory stays a
 * copy; a reshape that would have to merge strided dims stays a copy too. */
static void test_strided_view_stays_a_copy_where_a_reader_needs_contiguous_memory(void) {
  graph g;
  graph_init(&g, 1);
  int x = shaped(&g, "x", RECAP_ROLE_INPUT, 2, (int64_t[]){4, 8});
  int a = shaped(&g, "a", RECAP_ROLE_INTERMEDIATE, 2, (int64_t[]){4, 8});
  plain_into(&g, x, a);
  int at = shaped(&g, "at", RECAP_ROLE_INTERMEDIATE, 2, (int64_t[]){8, 4});
  recap__op_attrs swap = {.num_sizes = 2, .sizes = {1, 0}};
  int permute_op = real_op(&g, "permute", &swap, 1, &a, 1, &at);
  int b = shaped(&g, "b", RECAP_ROLE_INTERMEDIATE, 2, (int64_t[]){8, 4});
  plain_into(&g, at, b); /* no infer: contiguous only */
  int bt = shaped(&g, "bt", RECAP_ROLE_INTERMEDIATE, 2, (int64_t[]){4, 8});
  int permute2 = real_op(&g, "permute", &swap, 1, &b, 1, &bt);
  int flat = shaped(&g, "flat", RECAP_ROLE_INTERMEDIATE, 1, (int64_t[]){32});
  recap__op_attrs to_flat = {.num_sizes = 1, .sizes = {32}};
  int reshape_op = real_op(&g, "reshape", &to_flat, 1, &bt, 1, &flat);
  int y = shaped(&g, "y", RECAP_ROLE_INTERMEDIATE, 1, (int64_t[]){32});
  plain_into(&g, flat, y);
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_FALSE(plan->op_is_view[permute_op]);
  CU_ASSERT_EQUAL(plan->tensors[at].kind, RECAP_PLAN_ARENA);
  /* bt may be a view (its reader is a shape op), but flattening it needs a copy. */
  CU_ASSERT_TRUE(plan->op_is_view[permute2]);
  CU_ASSERT_FALSE(plan->op_is_view[reshape_op]);
  CU_ASSERT_EQUAL(plan->tensors[flat].kind, RECAP_PLAN_ARENA);
  recap__plan_destroy(plan);
}

/* An elementwise op whose in-place input is a strided part of a split must not write over the
 * buffer, even when it is the buffer's last access: its contiguous output would overwrite
 * elements of the part it has not read yet. */
static void test_no_in_place_over_a_strided_view(void) {
  graph g;
  graph_init(&g, 1);
  int x = shaped(&g, "x", RECAP_ROLE_INPUT, 2, (int64_t[]){4, 16});
  int a = shaped(&g, "a", RECAP_ROLE_INTERMEDIATE, 2, (int64_t[]){4, 16});
  plain_into(&g, x, a);
  int parts[2] = {shaped(&g, "p0", RECAP_ROLE_INTERMEDIATE, 2, (int64_t[]){4, 8}),
                  shaped(&g, "p1", RECAP_ROLE_INTERMEDIATE, 2, (int64_t[]){4, 8})};
  recap__op_attrs split = {.dim = 1, .num_sizes = 2, .sizes = {8, 8}};
  int split_op = real_op(&g, "split", &split, 1, &a, 2, parts);
  int r1 = shaped(&g, "r1", RECAP_ROLE_INTERMEDIATE, 2, (int64_t[]){4, 8});
  real_op(&g, "relu", NULL, 1, &parts[1], 1, &r1);
  int r0 = shaped(&g, "r0", RECAP_ROLE_INTERMEDIATE, 2, (int64_t[]){4, 8});
  real_op(&g, "relu", NULL, 1, &parts[0], 1, &r0);
  int y = shaped(&g, "y", RECAP_ROLE_INTERMEDIATE, 2, (int64_t[]){4, 8});
  recap__ir_op *add = &g.ops[real_op(&g, "add", NULL, 2, (int[]){r0, r1}, 1, &y)];
  (void)add;
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_TRUE(plan->op_is_view[split_op]);
  CU_ASSERT_EQUAL(plan->tensors[parts[0]].kind, RECAP_PLAN_VIEW);
  CU_ASSERT_EQUAL(plan->tensors[r0].kind, RECAP_PLAN_ARENA);
  CU_ASSERT_EQUAL(plan->tensors[r1].kind, RECAP_PLAN_ARENA);
  CU_ASSERT_TRUE(disjoint(plan, r0, a));
  recap__plan_destroy(plan);
}

int main(void) {
  CU_pSuite s = test_add_suite("plan_buckets_views/host", NULL, NULL);
  CU_ADD_TEST(s, test_smaller_buckets_fit_the_largest_buckets_plan);
  CU_ADD_TEST(s, test_planning_every_bucket_skips_in_place_that_a_smaller_bucket_breaks);
  CU_ADD_TEST(s, test_a_view_misaligned_in_a_smaller_bucket_stays_a_copy);
  CU_ADD_TEST(s, test_attention_block_runs_without_a_single_copy);
  CU_ADD_TEST(s, test_strided_view_stays_a_copy_where_a_reader_needs_contiguous_memory);
  CU_ADD_TEST(s, test_no_in_place_over_a_strided_view);
  return test_run_all();
}
