/*
 * plan_arena_test.c: the memory planner (engine/plan.h) on IRs built by hand, one stream:
 * lifetimes and sizes, writing in place over dying inputs (and where it must not), views
 * sharing their source's buffer, outputs apart from everything live after them, arena
 * planning off, the plan text (cli/plan_text.h), and broken IRs rejected with the
 * culprit named. Every plan goes through check_plan (plan_check.h).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plan_text.h"
#include "tests/plan_check.h"

/* ---- lifetimes --------------------------------------------------------------------------- */

static void test_chain_arena_is_largest_adjacent_pair(void) {
  graph g;
  graph_init(&g, 1);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int a = OP(&g, &def_plain, 0, "a", 4 * U, x);
  int b = OP(&g, &def_plain, 0, "b", 8 * U, a);
  int c = OP(&g, &def_plain, 0, "c", 4 * U, b);
  int d = OP(&g, &def_plain, 0, "d", 16 * U, c);
  int y = OP(&g, &def_plain, 0, "y", 4 * U, d);
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  /* Adjacent pairs: a+b = 12, b+c = 12, c+d = 20 units. */
  CU_ASSERT_EQUAL(plan->arena_bytes, 20 * U);
  CU_ASSERT_EQUAL(plan->max_live_bytes, 20 * U);
  CU_ASSERT_EQUAL(plan->naive_bytes, 32 * U);
  CU_ASSERT_EQUAL(plan->tensors[a].first_op, 0);
  CU_ASSERT_EQUAL(plan->tensors[a].last_op, 1);
  CU_ASSERT_EQUAL(plan->tensors[y].kind, RECAP_PLAN_EXTERNAL);
  CU_ASSERT_EQUAL(plan->tensors[x].kind, RECAP_PLAN_EXTERNAL);
  CU_ASSERT_EQUAL(plan->num_waits, 0);
  recap__plan_destroy(plan);
}

static void test_tensor_nobody_reads_lives_for_its_producer_only(void) {
  graph g;
  graph_init(&g, 1);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, U);
  int a = OP(&g, &def_plain, 0, "a", 2 * U, x);
  int unused = OP(&g, &def_plain, 0, "unused", 4 * U, a);
  int b = OP(&g, &def_plain, 0, "b", 4 * U, a);
  int y = OP(&g, &def_plain, 0, "y", U, b);
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_EQUAL(plan->tensors[unused].first_op, 1);
  CU_ASSERT_EQUAL(plan->tensors[unused].last_op, 1);
  CU_ASSERT_FALSE(disjoint(plan, unused, b));
  CU_ASSERT_EQUAL(plan->arena_bytes, 6 * U);
  recap__plan_destroy(plan);
}

static void test_sizes_are_rounded_to_the_alignment(void) {
  graph g;
  graph_init(&g, 1);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 100);
  int a = OP(&g, &def_plain, 0, "a", 100, x);
  int b = OP(&g, &def_plain, 0, "b", 260, a);
  int y = OP(&g, &def_plain, 0, "y", 100, b, a);
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_EQUAL(plan->tensors[a].bytes, 100);
  CU_ASSERT_EQUAL(plan->tensors[b].bytes, 260);
  CU_ASSERT_EQUAL(plan->arena_bytes, 3 * U);
  CU_ASSERT_EQUAL(plan->naive_bytes, 3 * U);
  recap__plan_destroy(plan);
}

static void test_op_with_two_outputs_keeps_them_apart(void) {
  graph g;
  graph_init(&g, 1);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, U);
  int a = OP(&g, &def_plain, 0, "a", 2 * U, x);
  /* A split: one op, two outputs, both written at op 1. */
  int lo = OP(&g, &def_plain, 0, "lo", U, a);
  int hi = tensor(&g, "hi", RECAP_ROLE_INTERMEDIATE, U);
  g.ops[1].outputs[g.ops[1].num_outputs++] = hi;
  g.tensors[hi].producer = 1;
  int y = OP(&g, &def_plain, 0, "y", U, lo, hi);
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_TRUE(disjoint(plan, lo, hi));
  CU_ASSERT_TRUE(disjoint(plan, lo, a) && disjoint(plan, hi, a));
  CU_ASSERT_EQUAL(plan->arena_bytes, 4 * U);
  recap__plan_destroy(plan);
}

static void test_empty_pipeline_plans_an_empty_arena(void) {
  graph g;
  graph_init(&g, 1);
  tensor(&g, "x", RECAP_ROLE_INPUT, U);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_EQUAL(plan->arena_bytes, 0);
  CU_ASSERT_EQUAL(plan->num_buffers, 0);
  recap__plan_destroy(plan);
}

/* ---- in place ---------------------------------------------------------------------------- */

static void test_elementwise_chain_writes_over_its_dying_inputs(void) {
  graph g;
  graph_init(&g, 1);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int a = OP(&g, &def_plain, 0, "a", 4 * U, x);
  int b = OP(&g, &def_inplace, 0, "b", 4 * U, a);
  int c = OP(&g, &def_inplace, 0, "c", 4 * U, b);
  int y = OP(&g, &def_plain, 0, "y", 4 * U, c);
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_EQUAL(plan->tensors[a].kind, RECAP_PLAN_ARENA);
  CU_ASSERT_EQUAL(plan->tensors[b].kind, RECAP_PLAN_IN_PLACE);
  CU_ASSERT_EQUAL(plan->tensors[b].shares_with, a);
  CU_ASSERT_EQUAL(plan->tensors[c].kind, RECAP_PLAN_IN_PLACE);
  CU_ASSERT_EQUAL(plan->tensors[c].shares_with, b);
  CU_ASSERT_EQUAL(plan->tensors[a].buffer, plan->tensors[c].buffer);
  CU_ASSERT_EQUAL(plan->num_buffers, 1);
  CU_ASSERT_EQUAL(plan->buffers[0].first_op, 0);
  CU_ASSERT_EQUAL(plan->buffers[0].last_op, 3);
  CU_ASSERT_EQUAL(plan->arena_bytes, 4 * U);
  CU_ASSERT_EQUAL(plan->naive_bytes, 12 * U);
  recap__plan_destroy(plan);
}

static void test_no_in_place_when_the_input_is_read_later(void) {
  graph g;
  graph_init(&g, 1);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int a = OP(&g, &def_plain, 0, "a", 4 * U, x);
  int b = OP(&g, &def_inplace, 0, "b", 4 * U, a);
  int y = OP(&g, &def_plain, 0, "y", 4 * U, a, b);
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_EQUAL(plan->tensors[b].kind, RECAP_PLAN_ARENA);
  CU_ASSERT_TRUE(disjoint(plan, a, b));
  recap__plan_destroy(plan);
}

static void test_no_in_place_over_inputs_params_state_or_outputs(void) {
  graph g;
  graph_init(&g, 1);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int w = tensor(&g, "w", RECAP_ROLE_PARAM, 4 * U);
  int k = tensor(&g, "k", RECAP_ROLE_STATE, 4 * U);
  int from_x = OP(&g, &def_inplace, 0, "from_x", 4 * U, x);
  int from_w = OP(&g, &def_inplace, 0, "from_w", 4 * U, w);
  int from_k = OP(&g, &def_inplace, 0, "from_k", 4 * U, k);
  int out1 = OP(&g, &def_plain, 0, "out1", 4 * U, from_x, from_w, from_k);
  mark_output(&g, out1);
  int over_out = OP(&g, &def_inplace, 0, "over_out", 4 * U, out1);
  int a = OP(&g, &def_plain, 0, "a", 4 * U, over_out);
  int out2 = OP(&g, &def_inplace, 0, "out2", 4 * U, a); /* an output is never in the arena */
  mark_output(&g, out2);
  recap__plan *plan = plan_checked(&g.ir);
  int planned[] = {from_x, from_w, from_k, over_out};
  for (size_t i = 0; i < sizeof planned / sizeof planned[0]; i++) {
    CU_ASSERT_EQUAL(plan->tensors[planned[i]].kind, RECAP_PLAN_ARENA);
    CU_ASSERT_EQUAL(plan->tensors[planned[i]].shares_with, -1);
  }
  int external[] = {x, w, k, out1, out2};
  for (size_t i = 0; i < sizeof external / sizeof external[0]; i++) {
    CU_ASSERT_EQUAL(plan->tensors[external[i]].kind, RECAP_PLAN_EXTERNAL);
    CU_ASSERT_EQUAL(plan->tensors[external[i]].buffer, -1);
  }
  recap__plan_destroy(plan);
}

static void test_no_in_place_when_sizes_differ_or_op_reads_the_buffer_twice(void) {
  graph g;
  graph_init(&g, 1);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int a = OP(&g, &def_plain, 0, "a", 4 * U, x);
  int b = OP(&g, &def_inplace, 0, "b", 2 * U, a); /* smaller output */
  int c = OP(&g, &def_plain, 0, "c", 4 * U, b);
  int v = RESHAPE(&g, 0, "v", c);
  int d = OP(&g, &def_inplace, 0, "d", 4 * U, c, v); /* input 1 is a view of input 0 */
  int y = OP(&g, &def_plain, 0, "y", 4 * U, d);
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_EQUAL(plan->tensors[b].kind, RECAP_PLAN_ARENA);
  CU_ASSERT_EQUAL(plan->tensors[d].kind, RECAP_PLAN_ARENA);
  CU_ASSERT_TRUE(disjoint(plan, c, d));
  recap__plan_destroy(plan);
}

static void test_in_place_works_through_a_view_of_the_input(void) {
  graph g;
  graph_init(&g, 1);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int a = OP(&g, &def_plain, 0, "a", 4 * U, x);
  int v = RESHAPE(&g, 0, "v", a);
  int b = OP(&g, &def_inplace, 0, "b", 4 * U, v);
  int y = OP(&g, &def_plain, 0, "y", 4 * U, b);
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_EQUAL(plan->tensors[b].kind, RECAP_PLAN_IN_PLACE);
  CU_ASSERT_EQUAL(plan->tensors[b].shares_with, v);
  CU_ASSERT_EQUAL(plan->tensors[b].buffer, plan->tensors[a].buffer);
  CU_ASSERT_EQUAL(plan->arena_bytes, 4 * U);
  recap__plan_destroy(plan);
}

/* ---- views ------------------------------------------------------------------------------- */

static void test_views_share_the_buffer_and_extend_its_lifetime(void) {
  graph g;
  graph_init(&g, 1);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int a = OP(&g, &def_plain, 0, "a", 4 * U, x);
  int v = RESHAPE(&g, 0, "v", a);               /* a itself is last read here (op 1) */
  int b = OP(&g, &def_plain, 0, "b", 4 * U, x); /* live while v is */
  int c = OP(&g, &def_plain, 0, "c", 4 * U, v, b);
  int y = OP(&g, &def_plain, 0, "y", 4 * U, c);
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_EQUAL(plan->tensors[v].kind, RECAP_PLAN_VIEW);
  CU_ASSERT_EQUAL(plan->tensors[v].shares_with, a);
  CU_ASSERT_EQUAL(plan->tensors[v].buffer, plan->tensors[a].buffer);
  CU_ASSERT_EQUAL(plan->tensors[v].offset, plan->tensors[a].offset);
  CU_ASSERT_EQUAL(plan->tensors[a].last_op, 1);
  CU_ASSERT_EQUAL(plan->buffers[plan->tensors[a].buffer].last_op, 3);
  CU_ASSERT_TRUE(disjoint(plan, a, b));
  CU_ASSERT_EQUAL(plan->naive_bytes, 12 * U); /* a, b, c: the view has no bytes of its own */
  recap__plan_destroy(plan);
}

static void test_view_of_an_input_is_external(void) {
  graph g;
  graph_init(&g, 1);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int v = RESHAPE(&g, 0, "v", x);
  int v2 = RESHAPE(&g, 0, "v2", v);
  int y = OP(&g, &def_plain, 0, "y", 4 * U, v2);
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_EQUAL(plan->tensors[v2].kind, RECAP_PLAN_VIEW);
  CU_ASSERT_EQUAL(plan->tensors[v2].shares_with, x);
  CU_ASSERT_EQUAL(plan->tensors[v2].buffer, -1);
  CU_ASSERT_EQUAL(plan->arena_bytes, 0);
  recap__plan_destroy(plan);
}

/* ---- outputs ----------------------------------------------------------------------------- */

static void test_outputs_never_overlap_anything_live_after_them(void) {
  graph g;
  graph_init(&g, 1);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int a = OP(&g, &def_plain, 0, "a", 4 * U, x);
  int mid = OP(&g, &def_plain, 0, "mid", 4 * U, a); /* an output that later ops read */
  mark_output(&g, mid);
  int b = OP(&g, &def_plain, 0, "b", 4 * U, mid);
  int flat = RESHAPE(&g, 0, "flat", b); /* an output reshape: a copy into its own buffer */
  mark_output(&g, flat);
  int cache = OP(&g, &def_plain, 0, "cache", 4 * U, b);
  int kv = APPEND(&g, 0, "kv", cache, x); /* an output whose memory is an intermediate's */
  mark_output(&g, kv);
  int d = OP(&g, &def_plain, 0, "d", 4 * U, b);
  int e = OP(&g, &def_plain, 0, "e", 4 * U, d);
  int y = OP(&g, &def_plain, 0, "y", 4 * U, e);
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_EQUAL(plan->tensors[mid].kind, RECAP_PLAN_EXTERNAL);
  CU_ASSERT_EQUAL(plan->tensors[flat].kind, RECAP_PLAN_EXTERNAL);
  CU_ASSERT_FALSE(plan->op_is_view[g.tensors[flat].producer]);
  CU_ASSERT_EQUAL(plan->tensors[kv].kind, RECAP_PLAN_VIEW);
  CU_ASSERT_EQUAL(plan->tensors[kv].buffer, plan->tensors[cache].buffer);
  CU_ASSERT_EQUAL(plan->tensors[kv].last_op, (int)g.ir.num_ops);
  CU_ASSERT_EQUAL(plan->buffers[plan->tensors[cache].buffer].last_op, (int)g.ir.num_ops);
  /* cache's bytes are the output's: nothing later may reuse them. */
  CU_ASSERT_TRUE(disjoint(plan, cache, d) && disjoint(plan, cache, e));
  recap__plan_destroy(plan);
}

/* A reshape of memory a kv_append writes later must copy (it keeps the rows from before the
 * append); one after the last append is a view (it reads what a copy would read). */
static void test_reshape_of_kv_append_memory_copies_before_the_append_and_views_after(void) {
  graph g;
  graph_init(&g, 1);
  int k = tensor(&g, "k", RECAP_ROLE_STATE, 8 * U);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, U);
  int before = RESHAPE(&g, 0, "before", k); /* must keep the rows from before the append */
  int kv = APPEND(&g, 0, "kv", k, x);
  int w = tensor(&g, "w", RECAP_ROLE_PARAM, 8 * U);
  int wv = RESHAPE(&g, 0, "wv", w); /* a param nobody writes: a view */
  int after = RESHAPE(&g, 0, "after", kv); /* the cache after its last append: a view */
  int y = OP(&g, &def_plain, 0, "y", U, before, kv, wv, after);
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_FALSE(plan->op_is_view[0]);
  CU_ASSERT_EQUAL(plan->tensors[before].kind, RECAP_PLAN_ARENA);
  CU_ASSERT_TRUE(plan->op_is_view[2]);
  CU_ASSERT_TRUE(plan->op_is_view[3]);
  CU_ASSERT_EQUAL(plan->tensors[after].kind, RECAP_PLAN_VIEW);
  CU_ASSERT_EQUAL(plan->tensors[after].shares_with, k);
  CU_ASSERT_EQUAL(plan->tensors[wv].kind, RECAP_PLAN_VIEW);
  CU_ASSERT_EQUAL(plan->tensors[wv].shares_with, w);
  CU_ASSERT_EQUAL(plan->tensors[kv].shares_with, k);
  recap__plan_destroy(plan);
}

/* ---- arena planning off, text, bad IRs ---------------------------------------------------- */

/* Arena planning off: no in-place, no shared bytes; the arena is the naive sum. */
static void test_arena_planning_off_gives_every_intermediate_its_own_bytes(void) {
  graph g;
  graph_init(&g, 1);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, U);
  int a = OP(&g, &def_plain, 0, "a", U, x);
  int b = OP(&g, &def_inplace, 0, "b", U, a);
  int c = OP(&g, &def_inplace, 0, "c", U, b);
  int v = RESHAPE(&g, 0, "v", c);
  int d = OP(&g, &def_plain, 0, "d", U, v);
  int y = OP(&g, &def_plain, 0, "y", U, d);
  mark_output(&g, y);
  recap__plan *plan = NULL;
  recap__plan_options off = {.separate = true};
  CHECK_OK(recap__plan_build_with(&g.ir, &off, &plan));
  CU_ASSERT_PTR_NOT_NULL_FATAL(plan);
  check_plan(&g.ir, plan);
  CU_ASSERT_TRUE(plan->separate);
  CU_ASSERT_EQUAL(plan->tensors[b].kind, RECAP_PLAN_ARENA);
  CU_ASSERT_EQUAL(plan->tensors[c].kind, RECAP_PLAN_ARENA);
  CU_ASSERT_EQUAL(plan->tensors[v].kind, RECAP_PLAN_VIEW); /* a view is still its source */
  CU_ASSERT_EQUAL(plan->num_buffers, 4);
  CU_ASSERT_EQUAL(plan->arena_bytes, plan->naive_bytes);
  int arena[] = {a, b, c, d};
  for (int i = 0; i < 4; i++)
    for (int k = i + 1; k < 4; k++) CU_ASSERT_TRUE(disjoint(plan, arena[i], arena[k]));
  char *text = NULL;
  CHECK_OK(cli_plan_format(&g.ir, plan, &text));
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "arena planning: off"));
  free(text);
  recap__plan_destroy(plan);
}

static void test_format_lists_every_tensor_the_waits_and_the_totals(void) {
  graph g;
  graph_init(&g, 2);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int a = OP(&g, &def_plain, 0, "hidden", 4 * U, x);
  int b = OP(&g, &def_inplace, 1, "act", 4 * U, a);
  int v = RESHAPE(&g, 1, "flat", b);
  int y = OP(&g, &def_plain, 0, "y", 4 * U, v);
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  char *text = NULL;
  CHECK_OK(cli_plan_format(&g.ir, plan, &text));
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  const char *needles[] = {"hidden",        "act",
                           "flat",          "in place over 'hidden'",
                           "view of 'act'", "waits (2 between ops, 1 end-of-pipeline join)",
                           "arena:",        "naive:",
                           "max live:",     "output",
                           "joins stream 1"};
  for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++) {
    if (!strstr(text, needles[i])) fprintf(stderr, "\n  no \"%s\" in:\n%s", needles[i], text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, needles[i]));
  }
  free(text);
  graph other;
  graph_init(&other, 1);
  CHECK_STATUS(cli_plan_format(&other.ir, plan, &text), RECAP_STATUS_INVALID_ARGUMENT);
  recap__plan_destroy(plan);
}

static void expect_rejected(graph *g, const char *needle) {
  recap__plan *plan = (recap__plan *)&plan; /* must stay untouched */
  recap__plan *const before = plan;
  CHECK_STATUS(recap__plan_build(&g->ir, &plan), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS(needle);
  CU_ASSERT_PTR_EQUAL(plan, before);
}

static void test_broken_irs_are_rejected_with_the_culprit_named(void) {
  static graph g;
  graph_init(&g, 1);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, U);
  int a = OP(&g, &def_plain, 0, "a", U, x);
  OP(&g, &def_plain, 0, "b", U, a);
  g.ops[0].inputs[0] = 2; /* op 0 reads b, which op 1 produces */
  expect_rejected(&g, "before");

  build_bucket(&g, 1);
  g.ops[1].stream = 1;
  expect_rejected(&g, "stream 1");

  build_bucket(&g, 1);
  g.tensors[2].alias_of = 3;
  g.tensors[3].alias_of = 2;
  expect_rejected(&g, "cyclic");

  build_bucket(&g, 1);
  tensor(&g, "orphan", RECAP_ROLE_INTERMEDIATE, U);
  expect_rejected(&g, "orphan");

  build_bucket(&g, 1);
  g.tensors[2].shape[0] = INT64_MAX / 2;
  expect_rejected(&g, "'a'");

  build_bucket(&g, 1);
  g.ops[0].outputs[0] = 99;
  expect_rejected(&g, "tensor 99");

  CHECK_STATUS(recap__plan_build(NULL, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  recap__plan_destroy(NULL);
}

int main(void) {
  CU_pSuite s = test_add_suite("plan_arena/host", NULL, NULL);
  CU_ADD_TEST(s, test_chain_arena_is_largest_adjacent_pair);
  CU_ADD_TEST(s, test_tensor_nobody_reads_lives_for_its_producer_only);
  CU_ADD_TEST(s, test_sizes_are_rounded_to_the_alignment);
  CU_ADD_TEST(s, test_op_with_two_outputs_keeps_them_apart);
  CU_ADD_TEST(s, test_empty_pipeline_plans_an_empty_arena);
  CU_ADD_TEST(s, test_elementwise_chain_writes_over_its_dying_inputs);
  CU_ADD_TEST(s, test_no_in_place_when_the_input_is_read_later);
  CU_ADD_TEST(s, test_no_in_place_over_inputs_params_state_or_outputs);
  CU_ADD_TEST(s, test_no_in_place_when_sizes_differ_or_op_reads_the_buffer_twice);
  CU_ADD_TEST(s, test_in_place_works_through_a_view_of_the_input);
  CU_ADD_TEST(s, test_views_share_the_buffer_and_extend_its_lifetime);
  CU_ADD_TEST(s, test_view_of_an_input_is_external);
  CU_ADD_TEST(s, test_outputs_never_overlap_anything_live_after_them);
  CU_ADD_TEST(s, test_reshape_of_kv_append_memory_copies_before_the_append_and_views_after);
  CU_ADD_TEST(s, test_format_lists_every_tensor_the_waits_and_the_totals);
  CU_ADD_TEST(s, test_arena_planning_off_gives_every_intermediate_its_own_bytes);
  CU_ADD_TEST(s, test_broken_irs_are_rejected_with_the_culprit_named);
  return test_run_all();
}
