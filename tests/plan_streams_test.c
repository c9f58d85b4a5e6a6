/*
 * plan_streams_test.c: the memory planner (engine/plan.h) across streams: a buffer is reused
 * only where stream order plus the plan's waits order it after every earlier access, waits
 * that stream order implies are left out, aliasing writes wait for readers on other streams,
 * the lower bound counts concurrent branches, and random multi-stream DAGs never reuse
 * unordered memory (RECAP_TEST_SEED replays them). Every plan goes through check_plan
 * (plan_check.h).
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plan_text.h"
#include "tests/plan_check.h"

/* ---- streams ----------------------------------------------------------------------------- */

static void test_buffer_read_on_side_stream_is_not_reused_by_unordered_main_stream_op(void) {
  graph g;
  graph_init(&g, 2);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int a = OP(&g, &def_plain, 0, "a", 4 * U, x);    /* op 0, main */
  int b = OP(&g, &def_plain, 1, "b", 4 * U, a);    /* op 1, side: forks from op 0 */
  int c = OP(&g, &def_plain, 1, "c", 4 * U, b);    /* op 2, side: last read of b */
  int d = OP(&g, &def_plain, 0, "d", 4 * U, x);    /* op 3, main: nothing orders it after op 2 */
  int y = OP(&g, &def_plain, 0, "y", 4 * U, d, c); /* op 4, main: joins the side stream */
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_EQUAL(plan->num_waits, 2);
  CU_ASSERT_TRUE(has_wait(plan, 1, 0));
  CU_ASSERT_TRUE(has_wait(plan, 4, 2));
  /* Lifetimes alone would let d reuse a's or b's bytes; stream 1 may still be reading them. */
  CU_ASSERT_TRUE(has_wait(plan, 3, 2) || disjoint(plan, b, d));
  CU_ASSERT_TRUE(has_wait(plan, 3, 1) || has_wait(plan, 3, 2) || disjoint(plan, a, d));
  CU_ASSERT_EQUAL(plan->stream_last_op[0], 4);
  CU_ASSERT_EQUAL(plan->stream_last_op[1], 2);
  recap__plan_destroy(plan);
}

static void test_buffer_is_reused_across_streams_once_a_join_orders_it(void) {
  graph g;
  graph_init(&g, 2);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int a = OP(&g, &def_plain, 0, "a", 4 * U, x);
  int b = OP(&g, &def_plain, 1, "b", 4 * U, a);
  int c = OP(&g, &def_plain, 1, "c", 4 * U, b);
  int d = OP(&g, &def_plain, 0, "d", 4 * U, c); /* joins: waits for op 2 */
  int y = OP(&g, &def_plain, 0, "y", 4 * U, d);
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_EQUAL(plan->num_waits, 2);
  CU_ASSERT_TRUE(has_wait(plan, 1, 0));
  CU_ASSERT_TRUE(has_wait(plan, 3, 2));
  CU_ASSERT_EQUAL(plan->arena_bytes, 8 * U); /* as on one stream */
  CU_ASSERT_FALSE(disjoint(plan, b, d));
  (void)a;
  recap__plan_destroy(plan);
}

static void test_waits_implied_by_stream_order_are_left_out(void) {
  graph g;
  graph_init(&g, 3);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int a = OP(&g, &def_plain, 0, "a", 4 * U, x);       /* 0 */
  int b = OP(&g, &def_plain, 1, "b", 4 * U, a);       /* 1: waits 0 */
  int c = OP(&g, &def_plain, 1, "c", 4 * U, a);       /* 2: ordered by stream 1 already */
  int e = OP(&g, &def_plain, 2, "e", 4 * U, a, b);    /* 3: waiting for 1 covers 0 */
  int y = OP(&g, &def_plain, 0, "y", 4 * U, b, c, e); /* 4: waits 2 and 3; 1 is implied */
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  recap__plan_wait expected[] = {{1, 0}, {3, 1}, {4, 2}, {4, 3}};
  CU_ASSERT_EQUAL_FATAL(plan->num_waits, 4);
  for (size_t w = 0; w < 4; w++) {
    CU_ASSERT_EQUAL(plan->waits[w].waiter, expected[w].waiter);
    CU_ASSERT_EQUAL(plan->waits[w].waited, expected[w].waited);
  }
  recap__plan_destroy(plan);
}

static void test_in_place_across_streams_needs_the_other_reader_ordered(void) {
  graph g;
  graph_init(&g, 2);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int a = OP(&g, &def_plain, 0, "a", 4 * U, x);    /* 0 */
  int r = OP(&g, &def_plain, 1, "r", 4 * U, a);    /* 1: side stream reads a */
  int b = OP(&g, &def_inplace, 0, "b", 4 * U, a);  /* 2: last reader of a, but op 1 may run */
  int y = OP(&g, &def_plain, 0, "y", 4 * U, b, r); /* 3 */
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_EQUAL(plan->tensors[b].kind, RECAP_PLAN_ARENA);
  CU_ASSERT_TRUE(disjoint(plan, a, b));
  recap__plan_destroy(plan);
}

static void test_aliasing_write_waits_for_readers_on_other_streams(void) {
  graph g;
  graph_init(&g, 2);
  int cache = tensor(&g, "cache", RECAP_ROLE_STATE, 8 * U);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, U);
  int r = OP(&g, &def_plain, 1, "r", 4 * U, cache); /* 0: side reads cache */
  int kv = APPEND(&g, 0, "kv", cache, x);           /* 1: writes it */
  int z = OP(&g, &def_plain, 1, "z", 4 * U, kv);    /* 2: reads the new cache */
  int y = OP(&g, &def_plain, 0, "y", 4 * U, z, r);  /* 3 */
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_TRUE(has_wait(plan, 1, 0)); /* write after read */
  CU_ASSERT_TRUE(has_wait(plan, 2, 1)); /* read after write */
  CU_ASSERT_TRUE(has_wait(plan, 3, 2));
  CU_ASSERT_EQUAL(plan->num_waits, 3);
  CU_ASSERT_EQUAL(plan->tensors[kv].kind, RECAP_PLAN_VIEW);
  CU_ASSERT_EQUAL(plan->tensors[kv].buffer, -1);
  recap__plan_destroy(plan);
}

/* fork_join.yaml's shape: norm on stream 0, two branches of two ops on streams 1 and 2, a join.
 * Each branch may run ahead of the other, so its buffers are never ordered against the other
 * branch's, nor against the shared input the other branch still reads: all five buffers
 * pairwise must be apart, though at most three are live at any one op index. */
static void build_fork_join(graph *g, int64_t unit) {
  graph_init(g, 3);
  int x = tensor(g, "x", RECAP_ROLE_INPUT, unit);
  int xn = OP(g, &def_plain, 0, "xn", unit, x);    /* 0 */
  int a1 = OP(g, &def_plain, 1, "a1", unit, xn);   /* 1 */
  int a2 = OP(g, &def_plain, 1, "a2", unit, a1);   /* 2 */
  int b1 = OP(g, &def_plain, 2, "b1", unit, xn);   /* 3 */
  int b2 = OP(g, &def_plain, 2, "b2", unit, b1);   /* 4 */
  int y = OP(g, &def_plain, 0, "y", unit, a2, b2); /* 5 */
  mark_output(g, y);
}

static void test_lower_bound_counts_buffers_of_concurrent_branches(void) {
  graph g;
  build_fork_join(&g, U);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_EQUAL(plan->num_buffers, 5);
  CU_ASSERT_EQUAL(plan->live_at_one_op_bytes, 3 * U);
  CU_ASSERT_EQUAL(plan->max_live_bytes, 5 * U);
  CU_ASSERT_EQUAL(plan->arena_bytes, 5 * U); /* optimal, and proved so by the bound */
  CU_ASSERT_EQUAL(plan->num_waits, 4);       /* fork x2, join x2: nothing added for memory */
  char *text = NULL;
  CHECK_OK(cli_plan_format(&g.ir, plan, &text));
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "with streams: buffers another stream may still use"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "arena is 1.000x the lower bound"));
  free(text);
  recap__plan_destroy(plan);
}

/* Two fork-joins in a row: once the join orders the first pair of branches, the second pair
 * reuses their bytes, on whichever streams. */
static void test_second_fork_reuses_the_first_forks_buffers_after_the_join(void) {
  graph g;
  graph_init(&g, 3);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int a = OP(&g, &def_plain, 1, "a", 4 * U, x);  /* 0 */
  int b = OP(&g, &def_plain, 2, "b", 4 * U, x);  /* 1 */
  int j1 = OP(&g, &def_plain, 0, "j1", U, a, b); /* 2: joins both */
  int c = OP(&g, &def_plain, 2, "c", 4 * U, j1); /* 3: stream 2 after the join */
  int d = OP(&g, &def_plain, 1, "d", 4 * U, j1); /* 4: stream 1 after the join */
  int y = OP(&g, &def_plain, 0, "y", U, c, d);   /* 5 */
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  CU_ASSERT_EQUAL(plan->max_live_bytes, 9 * U);
  CU_ASSERT_EQUAL(plan->arena_bytes, 9 * U);
  CU_ASSERT_TRUE(plan->arena_bytes < plan->naive_bytes);
  /* c and d take a's and b's bytes (in some pairing). */
  CU_ASSERT_TRUE((!disjoint(plan, c, a) || !disjoint(plan, c, b)) &&
                 (!disjoint(plan, d, a) || !disjoint(plan, d, b)));
  recap__plan_destroy(plan);
}

/* A branch that no join orders before the rest keeps its bytes to itself, however early its
 * last access by op index: main-stream buffers produced later must not reuse them. */
static void test_unjoined_side_branch_is_never_reused_by_later_main_stream_buffers(void) {
  graph g;
  graph_init(&g, 2);
  int x = tensor(&g, "x", RECAP_ROLE_INPUT, 4 * U);
  int s1 = OP(&g, &def_plain, 1, "s1", 4 * U, x);    /* 0: side */
  int s2 = OP(&g, &def_plain, 1, "s2", 4 * U, s1);   /* 1: side, last read of s1 */
  int m1 = OP(&g, &def_plain, 0, "m1", 4 * U, x);    /* 2: main */
  int m2 = OP(&g, &def_plain, 0, "m2", 4 * U, m1);   /* 3: main */
  int m3 = OP(&g, &def_plain, 0, "m3", 4 * U, m2);   /* 4: main */
  int y = OP(&g, &def_plain, 0, "y", 4 * U, m3, s2); /* 5: joins the side stream */
  mark_output(&g, y);
  recap__plan *plan = plan_checked(&g.ir);
  int side[] = {s1, s2}, main_[] = {m1, m2, m3};
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 3; k++) CU_ASSERT_TRUE(disjoint(plan, side[i], main_[k]));
  CU_ASSERT_EQUAL(plan->num_waits, 1); /* only the join */
  CU_ASSERT_EQUAL(plan->max_live_bytes, plan->arena_bytes);
  recap__plan_destroy(plan);
}

/* Larger random DAGs on up to 4 streams than the exhaustive optimum can take: check_plan's
 * happens-before oracle (stream order plus the plan's waits, nothing else) must allow every
 * shared byte, every wait must be a data dependency, and the bound must be the exact heaviest
 * conflicting set. */

static void test_random_multi_stream_dags_never_reuse_unordered_memory(void) {
  const char *env = getenv("RECAP_TEST_SEED");
  uint64_t state = env ? strtoull(env, NULL, 0) : 777;
  if (!state) state = 1;
  static graph g;
  int reused = 0;
  for (int k = 0; k < 300; k++) {
    random_wide_graph(&g, &state);
    recap__plan *plan = plan_checked(&g.ir);
    CU_ASSERT_TRUE(plan->arena_bytes >= plan->max_live_bytes);
    reused += plan->arena_bytes < plan->naive_bytes;
    recap__plan_destroy(plan);
  }
  CU_ASSERT_TRUE(reused > 50); /* the cases reach reuse across streams, not just apart */
}

int main(void) {
  CU_pSuite s = test_add_suite("plan_streams/host", NULL, NULL);
  CU_ADD_TEST(s, test_buffer_read_on_side_stream_is_not_reused_by_unordered_main_stream_op);
  CU_ADD_TEST(s, test_buffer_is_reused_across_streams_once_a_join_orders_it);
  CU_ADD_TEST(s, test_waits_implied_by_stream_order_are_left_out);
  CU_ADD_TEST(s, test_in_place_across_streams_needs_the_other_reader_ordered);
  CU_ADD_TEST(s, test_aliasing_write_waits_for_readers_on_other_streams);
  CU_ADD_TEST(s, test_lower_bound_counts_buffers_of_concurrent_branches);
  CU_ADD_TEST(s, test_second_fork_reuses_the_first_forks_buffers_after_the_join);
  CU_ADD_TEST(s, test_unjoined_side_branch_is_never_reused_by_later_main_stream_buffers);
  CU_ADD_TEST(s, test_random_multi_stream_dags_never_reuse_unordered_memory);
  return test_run_all();
}
