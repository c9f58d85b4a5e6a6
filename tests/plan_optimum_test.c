/*
 * plan_optimum_test.c: the memory planner's arena (engine/plan.h) on random DAGs against an
 * exact optimum found by exhaustive search: it must stay within ten percent of it. Every plan
 * also goes through check_plan (plan_check.h). RECAP_TEST_SEED replays the DAGs;
 * RECAP_PLAN_CASES changes their number.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cli/plan_text.h"
#include "tests/plan_check.h"

/* ---- random DAGs against the exact optimum ---------------------------------------------- */

/* The smallest arena for the plan's buffers, over every placement that respects may_share
 * between their tensors. Search: every order of the buffers, each put at the lowest offset
 * where it overlaps no conflicting buffer already placed. That is exact: take an optimal
 * placement and order the buffers by their offsets in it. Placing in that order, each buffer
 * lands at or below its optimal offset, by induction: the conflicting buffers placed before it
 * lie entirely below its optimal offset in the optimum (they conflict and come first), and by
 * induction no higher now, so its optimal offset is still free and the lowest free one is no
 * higher. Hence that order gives an arena <= the optimum. Orders share prefixes, so it runs as
 * a depth-first search, cut off where the partial arena already reaches the best found. */
typedef struct {
  int n;
  size_t size[MAX_T];
  bool conflict[MAX_T][MAX_T];
  size_t offset[MAX_T];
  bool placed[MAX_T];
  size_t best, lower_bound;
} search;

static void search_from(search *s, int depth, size_t arena) {
  if (arena >= s->best || s->best == s->lower_bound) return;
  if (depth == s->n) {
    s->best = arena;
    return;
  }
  for (int b = 0; b < s->n; b++) {
    if (s->placed[b]) continue;
    /* Candidates: 0 and the end of every placed conflicting buffer; take the lowest free. */
    size_t at = SIZE_MAX;
    for (int c = -1; c < s->n; c++) {
      if (c >= 0 && (!s->placed[c] || !s->conflict[b][c])) continue;
      size_t cand = c < 0 ? 0 : s->offset[c] + s->size[c];
      if (cand >= at) continue;
      bool free_here = true;
      for (int o = 0; o < s->n && free_here; o++)
        if (s->placed[o] && s->conflict[b][o] &&
            ranges_overlap(cand, s->size[b], s->offset[o], s->size[o]))
          free_here = false;
      if (free_here) at = cand;
    }
    s->placed[b] = true;
    s->offset[b] = at;
    size_t top = at + s->size[b] > arena ? at + s->size[b] : arena;
    search_from(s, depth + 1, top);
    s->placed[b] = false;
  }
}

static size_t optimal_arena(const recap__ir *ir, const recap__plan *plan) {
  static search s;
  static checker c;
  memset(&s, 0, sizeof s);
  checker_init(&c, ir, plan);
  s.n = (int)plan->num_buffers;
  for (int b = 0; b < s.n; b++) s.size[b] = plan->buffers[b].bytes;
  for (int t = 0; t < (int)ir->num_tensors; t++)
    for (int u = 0; u < (int)ir->num_tensors; u++) {
      int bt = plan->tensors[t].buffer, bu = plan->tensors[u].buffer;
      if (bt < 0 || bu < 0 || bt == bu) continue;
      if (!may_share(&c, t, u)) s.conflict[bt][bu] = s.conflict[bu][bt] = true;
    }
  s.best = plan->arena_bytes + 1;
  s.lower_bound = plan->max_live_bytes;
  search_from(&s, 0, 0);
  return s.best <= plan->arena_bytes ? s.best : plan->arena_bytes;
}

static void test_random_dags_stay_within_ten_percent_of_the_optimum(void) {
  const char *env = getenv("RECAP_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 0) : 20261122;
  const char *cases_env = getenv("RECAP_PLAN_CASES");
  int cases = cases_env ? atoi(cases_env) : 600;
  printf("\n  plan random DAGs: RECAP_TEST_SEED=%llu, %d cases\n", (unsigned long long)seed, cases);
  uint64_t state = seed ? seed : 1;
  static graph g;
  int optimal = 0, worse = 0, multi_stream = 0, in_place = 0, big = 0;
  double worst = 1.0;
  for (int k = 0; k < cases; k++) {
    random_graph(&g, &state);
    recap__plan *plan = plan_checked(&g.ir);
    size_t best = optimal_arena(&g.ir, plan);
    CU_ASSERT_TRUE(best >= plan->max_live_bytes);
    double ratio = best ? (double)plan->arena_bytes / (double)best : 1.0;
    if (plan->arena_bytes == best) optimal++;
    if (ratio > worst) worst = ratio;
    if (plan->arena_bytes * 10 > best * 11) {
      worse++;
      char *text = NULL;
      if (cli_plan_format(&g.ir, plan, &text) == RECAP_OK)
        fprintf(stderr, "\n  case %d: arena %zu > 1.10 x optimum %zu\n%s", k, plan->arena_bytes,
                best, text);
      free(text);
    }
    multi_stream += g.ir.num_streams > 1;
    big += plan->num_buffers >= 5;
    for (size_t t = 0; t < plan->num_tensors; t++)
      in_place += plan->tensors[t].kind == RECAP_PLAN_IN_PLACE;
    recap__plan_destroy(plan);
  }
  printf(
      "  optimal in %d/%d, over 10%% in %d, worst ratio %.3f; %d multi-stream, %d with >= 5 "
      "buffers, %d in-place tensors\n",
      optimal, cases, worse, worst, multi_stream, big, in_place);
  CU_ASSERT_EQUAL(worse, 0);
  /* The generator must reach the cases that matter (a run of a few DAGs may not). */
  if (cases >= 100) CU_ASSERT_TRUE(in_place > 0 && multi_stream > 0 && big * 4 > cases);
}

int main(void) {
  CU_pSuite s = test_add_suite("plan_optimum/host", NULL, NULL);
  CU_ADD_TEST(s, test_random_dags_stay_within_ten_percent_of_the_optimum);
  return test_run_all();
}
