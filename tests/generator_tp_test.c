/*
 * generator_tp_test.c: tensor-parallel generation's protocol (serve/step_header.h,
 * recap_generator_follow; docs/MULTI_GPU.md) on the host backend, which runs a world of 1 only:
 * the step header's words and every refusal of a bad one; a generator on a communicator of
 * one rank (each step announced, then run through recap_pipeline_run_dist) reproducing
 * transformers' greedy tokens; a follower's loop driven by a fake header source running the
 * entries the headers name, in order, until the stop, and refusing a lost step; and the
 * refusals of recap_generator_follow and of create on a rank other than 0. Two ranks on two
 * GPUs: scripts/gpu/gpu_tp.sh.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "serve/runner.h"
#include "serve/step_header.h"
#include "tests/model_fixtures.h"

enum { MAX_SEQ = 64, BLOCK = 4, POOL = 20, PREFILL_SEQS = 4 };
static const int64_t DECODE_BUCKETS[] = {1, 2, 4, 8};
static const int64_t PREFILL_BUCKETS[] = {16, 32};

/* ---- the step header ---- */

static void test_step_header_round_trips_and_bad_words_are_refused(void) {
  int64_t w[RECAP__STEP_WORDS];
  recap__step_header h = {.kind = RECAP__STEP_PREFILL, .index = 41, .tokens = 30, .rows = 3}, got;
  recap__step_header_encode(&h, w);
  CHECK_OK(recap__step_header_decode(w, 41, &got));
  CU_ASSERT_EQUAL(got.kind, RECAP__STEP_PREFILL);
  CU_ASSERT_EQUAL(got.index, 41);
  CU_ASSERT_EQUAL(got.tokens, 30);
  CU_ASSERT_EQUAL(got.rows, 3);
  /* A lost or repeated step. */
  CHECK_STATUS(recap__step_header_decode(w, 42, &got), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "lost or repeated"));
  /* Not a generator's header (recap_pipeline_run_dist's, say). */
  int64_t other[RECAP__STEP_WORDS];
  memcpy(other, w, sizeof w);
  other[0] = 0x5243505f44495354LL;
  CHECK_STATUS(recap__step_header_decode(other, 41, &got), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "not a generator's"));
  memcpy(other, w, sizeof w);
  other[1] = 9;
  CHECK_STATUS(recap__step_header_decode(other, 41, &got), RECAP_STATUS_INVALID_ARGUMENT);
  /* A run of no rows, more rows than tokens, a stop that carries counts. */
  h.rows = 0;
  recap__step_header_encode(&h, w);
  CHECK_STATUS(recap__step_header_decode(w, 41, &got), RECAP_STATUS_INVALID_ARGUMENT);
  h.rows = 31;
  recap__step_header_encode(&h, w);
  CHECK_STATUS(recap__step_header_decode(w, 41, &got), RECAP_STATUS_INVALID_ARGUMENT);
  h = (recap__step_header){.kind = RECAP__STEP_STOP, .index = 41, .tokens = 1, .rows = 1};
  recap__step_header_encode(&h, w);
  CHECK_STATUS(recap__step_header_decode(w, 41, &got), RECAP_STATUS_INVALID_ARGUMENT);
  h.tokens = h.rows = 0;
  recap__step_header_encode(&h, w);
  CHECK_OK(recap__step_header_decode(w, 41, &got));
  CU_ASSERT_EQUAL(got.kind, RECAP__STEP_STOP);
  /* A loop: its steps travel; it needs them, and one token per row; no other kind has them. */
  h = (recap__step_header){
      .kind = RECAP__STEP_LOOP, .index = 41, .tokens = 3, .rows = 3, .steps = 16};
  recap__step_header_encode(&h, w);
  CHECK_OK(recap__step_header_decode(w, 41, &got));
  CU_ASSERT_EQUAL(got.kind, RECAP__STEP_LOOP);
  CU_ASSERT_EQUAL(got.rows, 3);
  CU_ASSERT_EQUAL(got.steps, 16);
  h.steps = 0;
  recap__step_header_encode(&h, w);
  CHECK_STATUS(recap__step_header_decode(w, 41, &got), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "a loop has steps"));
  h.steps = 16;
  h.tokens = 4;
  recap__step_header_encode(&h, w);
  CHECK_STATUS(recap__step_header_decode(w, 41, &got), RECAP_STATUS_INVALID_ARGUMENT);
  h = (recap__step_header){
      .kind = RECAP__STEP_DECODE, .index = 41, .tokens = 3, .rows = 3, .steps = 2};
  recap__step_header_encode(&h, w);
  CHECK_STATUS(recap__step_header_decode(w, 41, &got), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "other kinds no steps"));
}

/* ---- over the fixtures, on a communicator of one rank ---- */

static void import_serving(const char *model, char *spec, size_t size) {
  import_paged_fixture(
      model,
      PAGED_IMPORT_OPTIONS(MAX_SEQ, BLOCK, POOL, PREFILL_SEQS, DECODE_BUCKETS, PREFILL_BUCKETS),
      spec, size);
}

static recap_generator_options host_options(recap_comm *comm) {
  return (recap_generator_options){
      .struct_size = sizeof(recap_generator_options),
      .override_device = 1,
      .device = {RECAP_BACKEND_HOST, 0},
      .quiet = 1,
      .comm = comm,
  };
}

static recap_comm *host_comm(void) {
  recap_comm *c = NULL;
  CHECK_OK(recap_comm_init_rank((recap_device){RECAP_BACKEND_HOST, 0}, 1, 0, NULL, 10, &c));
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  return c;
}

static void test_rank_zero_of_one_reproduces_transformers_greedy_tokens(void) {
  make_dir();
  recap_comm *c = host_comm();
  for (size_t m = 0; m < sizeof MODELS / sizeof MODELS[0]; m++) {
    reference ref;
    load_reference(MODELS[m], &ref);
    char spec[512];
    import_serving(MODELS[m], spec, sizeof spec);
    recap_generator_options o = host_options(c);
    o.prefill_budget = 16; /* the prompt runs in chunks */
    recap_generator *g = NULL;
    CHECK_OK(recap_generator_create(spec, &o, &g));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    recap_request r = {.struct_size = sizeof r,
                       .prompt = ref.tokens,
                       .prompt_len = (size_t)ref.prompt_length,
                       .max_new_tokens = ref.count - ref.prompt_length};
    uint64_t id;
    CHECK_OK(recap_generator_submit(g, &r, &id, NULL));
    CHECK_OK(recap_generator_wait(g, id, test_scaled_seconds(60)));
    int32_t tokens[MAX_SEQ];
    recap_request_status st;
    CHECK_OK(recap_generator_poll(g, id, tokens, MAX_SEQ, &st));
    CU_ASSERT_EQUAL(st.state, RECAP_REQUEST_FINISHED);
    CU_ASSERT_EQUAL((int)st.num_tokens, ref.count - ref.prompt_length);
    /* Equal while transformers' choice is clear (its top-two margin above 1e-3 of the largest
     * logit), as generator_test compares. */
    int k = 0;
    for (; k < (int)st.num_tokens; k++) {
      int position = ref.prompt_length + k - 1;
      if (ref.margin[position] <= 1e-3 * ref.max_abs_logit) break;
      CU_ASSERT_EQUAL(tokens[k], ref.tokens[ref.prompt_length + k]);
    }
    /* Decode ran as loops across the communicator (recap_decode_loop_create_dist). */
    recap_generator_stats stats;
    CHECK_OK(recap_generator_stats_get(g, &stats));
    CU_ASSERT(stats.loop_launches > 0);
    printf("\n  %-10s %d/%zu, %llu of %llu decode steps in %llu loop launches", MODELS[m], k,
           st.num_tokens, (unsigned long long)stats.loop_steps,
           (unsigned long long)stats.decode_steps, (unsigned long long)stats.loop_launches);
    CU_ASSERT(k > 0);
    CHECK_OK(recap_generator_destroy(g));
    free(ref.logits);
  }
  printf("\n");
  CHECK_OK(recap_comm_destroy(c));
  remove_dir();
}

/* A follower's headers from a list instead of rank 0's broadcasts. */
typedef struct {
  const recap__step_header *headers;
  int count, next;
} fake_source;

static recap_status from_list(void *ctx, recap__runner *r, int64_t *words) {
  (void)r;
  fake_source *f = ctx;
  if (f->next == f->count)
    return RECAP_FAIL(RECAP_STATUS_TIMEOUT, "the fake rank 0 has nothing more to say");
  recap__step_header_encode(&f->headers[f->next++], words);
  return RECAP_OK;
}

static void test_a_follower_runs_the_named_entries_until_the_stop(void) {
  make_dir();
  recap_comm *c = host_comm();
  char spec[512];
  import_serving(MODELS[0], spec, sizeof spec);
  recap_generator_options o = host_options(c);
  recap__runner *r = NULL;
  CHECK_OK(recap__runner_open(spec, &o, &r));
  CU_ASSERT_PTR_NOT_NULL_FATAL(r);
  /* Rank 0's inputs are what this rank's own hold (a world of 1): zero rows, which the runs
   * take as padding. */
  const recap__step_header ok[] = {
      {RECAP__STEP_PREFILL, 0, 1, 1}, {RECAP__STEP_WAIT, 1, 0, 0},
      {RECAP__STEP_DECODE, 2, 1, 1},  {RECAP__STEP_DECODE, 3, 2, 2},
      {RECAP__STEP_LOOP, 4, 2, 2, 8}, {RECAP__STEP_STOP, 5, 0, 0},
  };
  fake_source f = {ok, 6, 0};
  int64_t runs = -1;
  CHECK_OK(recap__runner_follow(r, from_list, &f, &runs));
  CU_ASSERT_EQUAL(runs, 4);
  CU_ASSERT_EQUAL(f.next, 6);
  recap__runner_close(r);

  /* A loop longer than this rank's loops, or a loop on a rank without any: refused. */
  CHECK_OK(recap__runner_open(spec, &o, &r));
  const recap__step_header too_long[] = {{RECAP__STEP_LOOP, 0, 1, 1, 1 << 20}};
  f = (fake_source){too_long, 1, 0};
  CHECK_STATUS(recap__runner_follow(r, from_list, &f, &runs), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "exceeds this rank's"));
  recap__runner_close(r);
  setenv("RECAP_DECODE_LOOP", "0", 1);
  CHECK_OK(recap__runner_open(spec, &o, &r));
  unsetenv("RECAP_DECODE_LOOP");
  f = (fake_source){too_long, 1, 0};
  CHECK_STATUS(recap__runner_follow(r, from_list, &f, &runs), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "this rank has none"));
  recap__runner_close(r);

  /* A lost step (index 2 after 0): refused, naming it, after the one run before it. */
  CHECK_OK(recap__runner_open(spec, &o, &r));
  const recap__step_header lost[] = {{RECAP__STEP_DECODE, 0, 1, 1}, {RECAP__STEP_DECODE, 2, 1, 1}};
  f = (fake_source){lost, 2, 0};
  CHECK_STATUS(recap__runner_follow(r, from_list, &f, &runs), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "lost or repeated"));
  CU_ASSERT_EQUAL(runs, 1);
  /* A source that fails (rank 0 gone): its status, with the step it waited for. */
  recap__runner_close(r);
  CHECK_OK(recap__runner_open(spec, &o, &r));
  f = (fake_source){ok, 1, 0};
  CHECK_STATUS(recap__runner_follow(r, from_list, &f, &runs), RECAP_STATUS_TIMEOUT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "rank 0's step 1"));
  recap__runner_close(r);
  CHECK_OK(recap_comm_destroy(c));
  remove_dir();
}

static void test_follow_and_create_refuse_the_wrong_rank(void) {
  make_dir();
  char spec[512];
  import_serving(MODELS[0], spec, sizeof spec);
  recap_generator_options o = host_options(NULL);
  CHECK_STATUS(recap_generator_follow(spec, &o), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "no communicator"));
  recap_comm *c = host_comm();
  o.comm = c;
  CHECK_STATUS(recap_generator_follow(spec, &o), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "recap_generator_create"));
  CHECK_STATUS(recap_generator_follow(spec, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  /* A world of 2 on the host is refused before any generator could see it. */
  recap_comm *two = NULL;
  CU_ASSERT_NOT_EQUAL(recap_comm_init_rank((recap_device){RECAP_BACKEND_HOST, 0}, 2, 1,
                                           "file:///nonexistent", 1, &two),
                      RECAP_OK);
  CHECK_OK(recap_comm_destroy(c));
  remove_dir();
}

int main(void) {
  CU_pSuite s = test_add_suite("generator_tp/host", NULL, NULL);
  CU_ADD_TEST(s, test_step_header_round_trips_and_bad_words_are_refused);
  CU_ADD_TEST(s, test_rank_zero_of_one_reproduces_transformers_greedy_tokens);
  CU_ADD_TEST(s, test_a_follower_runs_the_named_entries_until_the_stop);
  CU_ADD_TEST(s, test_follow_and_create_refuse_the_wrong_rank);
  return test_run_all();
}
