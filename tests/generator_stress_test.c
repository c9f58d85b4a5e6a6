/*
 * generator_stress_test.c: one generator, eight submitting threads (CI also runs this file
 * under ThreadSanitizer: *_stress_test.c files are tagged "threads").
 *
 * Each thread submits requests of a few known prompts and checks every result against that
 * prompt's tokens computed alone beforehand (greedy, and one seeded sampled request), while it
 * and the others wait, poll, cancel (from its thread and from the engine thread in a
 * callback), release requests still running, stop on a stop id and read the stats. At the
 * end every block is back and the counts add up. RECAP_TEST_GENERATOR_REQUESTS sets the total
 * (default 800; the sanitizer configs set 100).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/model_fixtures.h"

enum {
  THREADS = 8,
  PROMPTS = 6,
  MAX_NEW = 20,
  SAMPLED = PROMPTS, /* the index of the seeded sampled request among the references */
};
static const int64_t DECODE_BUCKETS[] = {1, 2, 4, 8};
/* One prefill size: the entry then has no buckets (generator_test covers bucketed ones). */
static const int64_t PREFILL_BUCKETS[] = {32};
static const uint64_t SAMPLED_SEED = 0xfeedbeef1234ull;

/* What every thread checks against: each prompt's tokens, computed alone. */
typedef struct {
  int32_t prompt[PROMPTS + 1][16];
  int prompt_len[PROMPTS + 1];
  int32_t tokens[PROMPTS + 1][MAX_NEW];
} references;

static references g_ref;
static recap_generator *g_gen;
static atomic_int g_failures;
static atomic_int g_submitted;

/* Workers cannot use CUnit's asserts (not thread-safe): they count and print failures, and the
 * test asserts the count. */
#define EXPECT(cond, ...)                                              \
  do {                                                                 \
    if (!(cond)) {                                                     \
      if (atomic_fetch_add(&g_failures, 1) < 20) {                     \
        fprintf(stderr, "\n  %s:%d: %s: ", __FILE__, __LINE__, #cond); \
        fprintf(stderr, __VA_ARGS__);                                  \
      }                                                                \
    }                                                                  \
  } while (0)

static recap_request request_of(int p, int max_new) {
  recap_request r = {
      .struct_size = sizeof r,
      .prompt = g_ref.prompt[p],
      .prompt_len = (size_t)g_ref.prompt_len[p],
      .max_new_tokens = max_new,
  };
  if (p == SAMPLED) {
    r.temperature = 0.8f;
    r.top_p = 0.9f;
    r.has_seed = 1;
    r.seed = SAMPLED_SEED;
  }
  return r;
}

/* What a callback saw of one request. */
typedef struct {
  int32_t tokens[MAX_NEW];
  int count, ends, cancel_after;
  recap_request_state last;
  recap_status cancel_status;
} seen;

static void record(void *user, uint64_t id, int32_t token, recap_request_state state) {
  seen *s = user;
  if (token < 0) {
    s->ends++;
    s->last = state;
    return;
  }
  if (s->count < MAX_NEW) s->tokens[s->count] = token;
  if (++s->count == s->cancel_after) s->cancel_status = recap_generator_cancel(g_gen, id);
}

/* Whether tokens[0, n) are the reference's first n. */
static bool matches(int p, const int32_t *tokens, size_t n) {
  return n <= MAX_NEW && memcmp(tokens, g_ref.tokens[p], sizeof *tokens * n) == 0;
}

static void wait_for(uint64_t id) {
  recap_status st = recap_generator_wait(g_gen, id, test_scaled_seconds(120));
  EXPECT(st == RECAP_OK, "wait %llu: %s\n", (unsigned long long)id, recap_status_name(st));
}

/* One request of some kind, checked. */
static void one_request(test_rng *rng) {
  int p = (int)(test_rng_next(rng) % (PROMPTS + 1));
  int max_new = 1 + (int)(test_rng_next(rng) % MAX_NEW);
  int kind = (int)(test_rng_next(rng) % 7);
  recap_request r = request_of(p, max_new);
  seen s = {.cancel_after = kind == 2 && max_new > 1 ? max_new / 2 : 0};
  if (kind == 1 || kind == 2) {
    r.on_token = record;
    r.user = &s;
  }
  int32_t stop = g_ref.tokens[p][max_new / 2];
  if (kind == 3) {
    r.stop_ids = &stop;
    r.num_stop_ids = 1;
  }
  uint64_t id = 0;
  recap_status st = recap_generator_submit(g_gen, &r, &id, NULL);
  EXPECT(st == RECAP_OK, "submit: %s: %s\n", recap_status_name(st), recap_last_error());
  if (st != RECAP_OK) return;
  atomic_fetch_add(&g_submitted, 1);
  if (kind == 5) { /* forgotten while queued or running: the engine frees it */
    EXPECT(recap_generator_release(g_gen, id) == RECAP_OK, "release\n");
    return;
  }
  if (kind == 4) EXPECT(recap_generator_cancel(g_gen, id) == RECAP_OK, "cancel\n");
  recap_request_status status = {0};
  int32_t tokens[MAX_NEW];
  if (kind == 6) { /* polls instead of waiting */
    double deadline = (double)time(NULL) + test_scaled_seconds(120);
    while (status.state < RECAP_REQUEST_FINISHED && (double)time(NULL) < deadline) {
      EXPECT(recap_generator_poll(g_gen, id, tokens, MAX_NEW, &status) == RECAP_OK, "poll\n");
      recap_generator_stats stats;
      EXPECT(recap_generator_stats_get(g_gen, &stats) == RECAP_OK, "stats\n");
      nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL); /* leave the cores to the engine */
    }
  } else {
    wait_for(id);
  }
  EXPECT(recap_generator_poll(g_gen, id, tokens, MAX_NEW, &status) == RECAP_OK, "poll\n");
  EXPECT(matches(p, tokens, status.num_tokens), "request %llu (prompt %d): tokens differ\n",
         (unsigned long long)id, p);
  if (kind == 4) {
    EXPECT(status.state == RECAP_REQUEST_CANCELLED || status.state == RECAP_REQUEST_FINISHED,
           "cancelled request in state %d\n", status.state);
  } else if (kind == 2 && s.cancel_after) {
    EXPECT(status.state == RECAP_REQUEST_CANCELLED && (int)status.num_tokens == s.cancel_after,
           "cancelled after %d tokens: state %d, %zu tokens\n", s.cancel_after, status.state,
           status.num_tokens);
  } else if (kind == 3) {
    size_t expected = 0;
    while (g_ref.tokens[p][expected] != stop) expected++;
    EXPECT(status.finish == RECAP_FINISH_STOP && status.num_tokens == expected + 1,
           "stop id: finish %d after %zu tokens, expected %zu\n", status.finish, status.num_tokens,
           expected + 1);
  } else {
    EXPECT(status.state == RECAP_REQUEST_FINISHED && (int)status.num_tokens == max_new,
           "state %d, %zu of %d tokens\n", status.state, status.num_tokens, max_new);
  }
  if (r.on_token) { /* the callbacks saw what poll sees, then one end */
    EXPECT(s.ends == 1 && s.last == status.state, "%d end callbacks\n", s.ends);
    EXPECT(s.count == (int)status.num_tokens && matches(p, s.tokens, status.num_tokens),
           "callback tokens differ\n");
    EXPECT(s.cancel_status == RECAP_OK, "cancel from a callback\n");
  }
  EXPECT(recap_generator_release(g_gen, id) == RECAP_OK, "release\n");
}

typedef struct {
  int requests;
  uint64_t seed;
} worker_args;

static void *worker(void *arg) {
  worker_args *a = arg;
  test_rng rng = {.state = a->seed | 1};
  for (int i = 0; i < a->requests; i++) one_request(&rng);
  return NULL;
}

static void compute_references(const char *spec) {
  test_rng rng;
  test_rng_init(&rng);
  for (int p = 0; p <= PROMPTS; p++) {
    g_ref.prompt_len[p] = 1 + (int)(test_rng_next(&rng) % 16);
    for (int k = 0; k < g_ref.prompt_len[p]; k++)
      g_ref.prompt[p][k] = (int32_t)(test_rng_next(&rng) % 256);
  }
  /* Alone: one request at a time. */
  recap_generator_options o = {.struct_size = sizeof o,
                               .override_device = 1,
                               .device = {RECAP_BACKEND_HOST, 0},
                               .quiet = 1,
                               .max_running = 1};
  recap_generator *g = NULL;
  CHECK_OK(recap_generator_create(spec, &o, &g));
  for (int p = 0; p <= PROMPTS; p++) {
    recap_request r = request_of(p, MAX_NEW);
    uint64_t id;
    recap_request_status st;
    CHECK_OK(recap_generator_submit(g, &r, &id, NULL));
    CHECK_OK(recap_generator_wait(g, id, test_scaled_seconds(60)));
    CHECK_OK(recap_generator_poll(g, id, g_ref.tokens[p], MAX_NEW, &st));
    CU_ASSERT_EQUAL(st.num_tokens, MAX_NEW);
  }
  CHECK_OK(recap_generator_destroy(g));
}

static void test_eight_threads_submit_wait_poll_cancel_and_release(void) {
  make_dir();
  char model_dir[256], spec[512];
  fixture_copy("llama", "config.json", "llama", model_dir, sizeof model_dir);
  snprintf(spec, sizeof spec, "%s/llama_paged.yaml", g_dir);
  cli_hf_import_options io = {
      .max_seq = 64,
      .batches = DECODE_BUCKETS,
      .num_batches = sizeof DECODE_BUCKETS / sizeof DECODE_BUCKETS[0],
      .paged = true,
      .block_size = 4,
      .kv_blocks = 20,
      .prefill_tokens = PREFILL_BUCKETS,
      .num_prefill_tokens = sizeof PREFILL_BUCKETS / sizeof PREFILL_BUCKETS[0],
      .prefill_seqs = 4,
  };
  import_model_with(io, model_dir, spec);
  compute_references(spec);

  const char *v = getenv("RECAP_TEST_GENERATOR_REQUESTS");
  int total = v && atoi(v) > 0 ? atoi(v) : 800;
  recap_generator_options o = {
      .struct_size = sizeof o, .override_device = 1, .device = {RECAP_BACKEND_HOST, 0}, .quiet = 1};
  CHECK_OK(recap_generator_create(spec, &o, &g_gen));
  atomic_store(&g_failures, 0);
  atomic_store(&g_submitted, 0);
  pthread_t threads[THREADS];
  worker_args args[THREADS];
  test_rng rng;
  test_rng_init(&rng);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int t = 0; t < THREADS; t++) {
    args[t] =
        (worker_args){.requests = (total + THREADS - 1) / THREADS, .seed = test_rng_next(&rng)};
    CU_ASSERT_EQUAL_FATAL(pthread_create(&threads[t], NULL, worker, &args[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
  /* Released requests may still be running: the engine ends them on its own. */
  recap_generator_stats stats = {0};
  double deadline = (double)time(NULL) + test_scaled_seconds(60);
  do CHECK_OK(recap_generator_stats_get(g_gen, &stats));
  while (stats.running + stats.waiting > 0 && (double)time(NULL) < deadline);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf(
      "\n  %d requests from %d threads in %.2f s: %llu finished, %llu cancelled, %llu "
      "preemptions, %llu steps",
      atomic_load(&g_submitted), THREADS,
      (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
      (unsigned long long)stats.finished, (unsigned long long)stats.cancelled,
      (unsigned long long)stats.preemptions, (unsigned long long)stats.steps);
  CU_ASSERT_EQUAL(atomic_load(&g_failures), 0);
  CU_ASSERT_EQUAL(stats.submitted, (uint64_t)atomic_load(&g_submitted));
  CU_ASSERT_EQUAL(stats.finished + stats.cancelled, stats.submitted);
  CU_ASSERT_EQUAL(stats.running + stats.waiting, 0);
  CU_ASSERT_EQUAL(stats.kv_blocks_used, 0);
  CHECK_OK(recap_generator_destroy(g_gen));
  g_gen = NULL;
  printf("\n");
  remove_dir();
}

int main(void) {
  CU_pSuite host = test_add_suite("generator_stress/host", NULL, NULL);
  CU_ADD_TEST(host, test_eight_threads_submit_wait_poll_cancel_and_release);
  return test_run_all();
}
