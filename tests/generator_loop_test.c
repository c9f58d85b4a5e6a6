/*
 * generator_loop_test.c: decode loops (include/recap.h, "Decode loops"; docs/SERVING.md, "The
 * decode loop") on the host backend, whose emulated capture runs the WHILE node as CUDA does
 * and enforces CUDA's rules for its body.
 *
 * The reference is the generator with RECAP_DECODE_LOOP=0, one graph launch per decode step
 * (itself checked against transformers and eager runs in generator_test.c): the same requests
 * give the same tokens and finish reasons with loops, greedy and seeded sampling, stop ids,
 * max tokens, the maximum sequence, and a pool so small that loops are cut short by blocks and
 * sequences are preempted, also on a communicator of one rank (the loops' path across ranks).
 * Counts show the loops ran (and, with the switch at 0, did not).
 * Then the loop API itself: its refusals, timestamps, the ring's order, and return requests.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* setenv under -std=c11 */
#endif
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/error.h"
#include "runtime/host_fault.h"
#include "tests/model_fixtures.h"

enum {
  MAX_SEQ = 64,
  BLOCK = 4,
  POOL = 20, /* blocks: three long sequences do not fit, and loops are cut short */
  PREFILL_SEQS = 4,
  VOCAB = 256, /* the fixtures' vocabulary is at least this */
};
static const int64_t DECODE_BUCKETS[] = {1, 2, 4, 8};
static const int64_t PREFILL_BUCKETS[] = {16, 32};

/* One KV block of the model imported last: a CUDA pool is sized in bytes, to POOL blocks. */
static uint64_t g_block_bytes;
/* The communicator generators are made on (NULL: none): a world of 1 takes the loops' path
 * across ranks (recap_decode_loop_create_dist: rank 0's return request goes through the
 * device before the control kernel reads it), whose broadcasts are copies here. */
static recap_comm *g_comm;

static void import_serving(const char *model, char *spec, size_t size) {
  g_block_bytes = import_paged_fixture(
      model,
      PAGED_IMPORT_OPTIONS(MAX_SEQ, BLOCK, POOL, PREFILL_SEQS, DECODE_BUCKETS, PREFILL_BUCKETS),
      spec, size);
}

static recap_generator *generator_with_loop(const char *spec, const char *loop_env) {
  if (loop_env)
    setenv("RECAP_DECODE_LOOP", loop_env, 1);
  else
    unsetenv("RECAP_DECODE_LOOP");
  recap_generator_options o = {
      .struct_size = sizeof o,
      .override_device = 1,
      .device = test_device,
      .quiet = 1,
      .comm = g_comm,
  };
  if (test_device.backend == RECAP_BACKEND_CUDA) o.kv_bytes = POOL * g_block_bytes;
  recap_generator *g = NULL;
  CHECK_OK(recap_generator_create(spec, &o, &g));
  unsetenv("RECAP_DECODE_LOOP");
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  return g;
}

typedef struct {
  int32_t prompt[MAX_SEQ];
  int32_t stop[2];
  recap_request r;
  uint64_t id;
  int32_t tokens[MAX_TOKENS];
  recap_request_status status;
} job;

/* Random prompts and lengths; a third greedy, a third seeded sampling, a third sampling with
 * two stop ids (random here; plant_stop_ids makes one of them come up); some run to the maximum
 * sequence (whose last position has no block: a loop ends there). */
static job *random_jobs(test_rng *rng, int n) {
  job *jobs = calloc((size_t)n, sizeof *jobs);
  CU_ASSERT_PTR_NOT_NULL_FATAL(jobs);
  for (int i = 0; i < n; i++) {
    job *j = &jobs[i];
    int prompt_len = 1 + (int)(test_rng_next(rng) % 40);
    for (int k = 0; k < prompt_len; k++) j->prompt[k] = (int32_t)(test_rng_next(rng) % VOCAB);
    int room = MAX_SEQ - prompt_len;
    int max_new = 1 + (int)(test_rng_next(rng) % 30);
    if (max_new > room || i % 7 == 0) max_new = room; /* i % 7 == 0: to the maximum sequence */
    j->r = (recap_request){
        .struct_size = sizeof(recap_request),
        .prompt = j->prompt,
        .prompt_len = (size_t)prompt_len,
        .max_new_tokens = max_new,
        .has_seed = 1,
        .seed = test_rng_next(rng),
    };
    if (i % 3 != 0) {
      j->r.temperature = 0.9f;
      j->r.top_k = 40;
    }
    if (i % 3 == 2) {
      j->stop[0] = (int32_t)(test_rng_next(rng) % 8);
      j->stop[1] = (int32_t)(test_rng_next(rng) % 8);
      j->r.stop_ids = j->stop;
      j->r.num_stop_ids = 2;
      j->r.top_k = 8;
    }
  }
  return jobs;
}

static void run_jobs(recap_generator *g, job *jobs, int n) {
  for (int i = 0; i < n; i++) CHECK_OK(recap_generator_submit(g, &jobs[i].r, &jobs[i].id, NULL));
  for (int i = 0; i < n; i++) {
    CHECK_OK(recap_generator_wait(g, jobs[i].id, test_scaled_seconds(120)));
    CHECK_OK(recap_generator_poll(g, jobs[i].id, jobs[i].tokens, MAX_TOKENS, &jobs[i].status));
  }
}

/* Random stop ids may never be drawn (a seed once gave none in 60 requests), and then the test
 * would not reach the stop rule. So a pilot runs the stop jobs without stop ids, one launch per
 * step, and each takes as its first stop id the token its seeded run draws halfway: the runs
 * under test, with the same seed, must stop there or at an earlier draw of the other id. */
static void plant_stop_ids(recap_generator *pilot, job *jobs, int n) {
  for (int i = 0; i < n; i++) {
    if (!jobs[i].r.stop_ids) continue;
    job free_run = jobs[i];
    free_run.r.prompt = free_run.prompt;
    free_run.r.stop_ids = NULL;
    free_run.r.num_stop_ids = 0;
    run_jobs(pilot, &free_run, 1);
    CU_ASSERT_FATAL(free_run.status.num_tokens > 0);
    jobs[i].stop[0] = free_run.tokens[free_run.status.num_tokens / 2];
  }
}

static void expect_same_results(const job *a, const job *b, int n) {
  for (int i = 0; i < n; i++) {
    CU_ASSERT_EQUAL(a[i].status.state, RECAP_REQUEST_FINISHED);
    CU_ASSERT_EQUAL(a[i].status.finish, b[i].status.finish);
    CU_ASSERT_EQUAL_FATAL(a[i].status.num_tokens, b[i].status.num_tokens);
    CU_ASSERT_EQUAL(memcmp(a[i].tokens, b[i].tokens, sizeof(int32_t) * a[i].status.num_tokens), 0);
  }
}

static void loops_give_the_tokens_of_one_launch_per_step(void) {
  make_dir();
  char spec[512];
  import_serving("qwen3", spec, sizeof spec);
  test_rng rng;
  test_rng_init(&rng);
  enum { N = 60 };
  job *looped = random_jobs(&rng, N), *stepped = calloc(N, sizeof *stepped);
  CU_ASSERT_PTR_NOT_NULL_FATAL(stepped);
  recap_generator *g = generator_with_loop(spec, "0");
  plant_stop_ids(g, looped, N);
  CHECK_OK(recap_generator_destroy(g));
  memcpy(stepped, looped, sizeof *stepped * N);
  for (int i = 0; i < N; i++) {
    stepped[i].r.prompt = stepped[i].prompt;
    if (stepped[i].r.stop_ids) stepped[i].r.stop_ids = stepped[i].stop;
  }
  recap_generator_stats ls, ss;
  g = generator_with_loop(spec, NULL);
  run_jobs(g, looped, N);
  CHECK_OK(recap_generator_stats_get(g, &ls));
  CHECK_OK(recap_generator_destroy(g));
  g = generator_with_loop(spec, "0");
  run_jobs(g, stepped, N);
  CHECK_OK(recap_generator_stats_get(g, &ss));
  CHECK_OK(recap_generator_destroy(g));
  expect_same_results(looped, stepped, N);
  int stops = 0, full = 0;
  for (int i = 0; i < N; i++) {
    stops += looped[i].status.finish == RECAP_FINISH_STOP;
    full += (int)looped[i].r.prompt_len + looped[i].status.num_tokens == MAX_SEQ;
  }
  CU_ASSERT(stops > 0 && full > 0); /* the workload reached the rules */
  /* Loops ran, many steps each; the switch turned them off; the counts add up either way. */
  CU_ASSERT(ls.loop_launches > 0 && ls.loop_steps > 2 * ls.loop_launches);
  CU_ASSERT_EQUAL(ss.loop_launches, 0);
  CU_ASSERT_EQUAL(ss.loop_steps, 0);
  CU_ASSERT_EQUAL(ls.tokens_out, ss.tokens_out);
  /* Loops reserve blocks ahead, so admissions and preemptions may fall on other steps: the
   * number of decode steps may differ, each request's tokens may not. */
  CU_ASSERT_EQUAL(ls.graph_steps, ls.prefill_steps + ls.decode_steps);
  CU_ASSERT(ls.preemptions > 0 || ss.preemptions > 0); /* the pool was tight */
  printf(
      "\n  %d requests: %llu decode steps, %llu in %llu loop launches; %d stops, %d to the "
      "maximum sequence\n",
      N, (unsigned long long)ls.decode_steps, (unsigned long long)ls.loop_steps,
      (unsigned long long)ls.loop_launches, stops, full);
  free(looped);
  free(stepped);
  remove_dir();
}

static void test_loop_gives_the_tokens_of_one_launch_per_step(void) {
  loops_give_the_tokens_of_one_launch_per_step();
}

/* The same on a communicator of one rank: the engine's return requests (submits arriving
 * while loops run) reach the control kernel through the broadcast flag. */
static void test_loop_on_a_world_of_one_gives_the_tokens_of_steps(void) {
  CHECK_OK(recap_comm_init_rank(test_device, 1, 0, NULL, 30, &g_comm));
  CU_ASSERT_PTR_NOT_NULL_FATAL(g_comm);
  loops_give_the_tokens_of_one_launch_per_step();
  CHECK_OK(recap_comm_destroy(g_comm));
  g_comm = NULL;
}

/* One request alone: K = 8 steps per launch, the decode steps split 8 + 8 + 3. */
static void test_loop_runs_k_steps_per_launch(void) {
  make_dir();
  char spec[512];
  import_serving("qwen3", spec, sizeof spec);
  int32_t prompt[5] = {3, 14, 15, 92, 65};
  recap_request r = {
      .struct_size = sizeof r, .prompt = prompt, .prompt_len = 5, .max_new_tokens = 20};
  job a = {.r = r}, b = {.r = r};
  recap_generator *g = generator_with_loop(spec, "8");
  run_jobs(g, &a, 1);
  recap_generator_stats s;
  CHECK_OK(recap_generator_stats_get(g, &s));
  CHECK_OK(recap_generator_destroy(g));
  g = generator_with_loop(spec, "0");
  run_jobs(g, &b, 1);
  CHECK_OK(recap_generator_destroy(g));
  expect_same_results(&a, &b, 1);
  CU_ASSERT_EQUAL(a.status.num_tokens, 20);
  CU_ASSERT_EQUAL(a.status.finish, RECAP_FINISH_MAX_TOKENS);
  /* The first token comes from the prefill step; the other 19 from loops of 8, 8 and 3. */
  CU_ASSERT_EQUAL(s.loop_launches, 3);
  CU_ASSERT_EQUAL(s.loop_steps, 19);
  remove_dir();
}

/* Four requests of one prompt length, admitted together: every decode step runs the same rows
 * in the same bucket in both modes, so the tokens match on a GPU too (where another bucket
 * could change a near tie). Two greedy, two seeded sampling. */
static void test_loop_of_a_batch_gives_the_tokens_of_steps(void) {
  make_dir();
  char spec[512];
  import_serving("qwen3", spec, sizeof spec);
  job a[4], b[4];
  memset(a, 0, sizeof a);
  for (int i = 0; i < 4; i++) {
    for (int k = 0; k < 8; k++) a[i].prompt[k] = (int32_t)((i * 37 + k * 11) % VOCAB);
    a[i].r = (recap_request){.struct_size = sizeof(recap_request),
                             .prompt = a[i].prompt,
                             .prompt_len = 8,
                             .max_new_tokens = 24,
                             .has_seed = 1,
                             .seed = 1000 + (uint64_t)i};
    if (i >= 2) {
      a[i].r.temperature = 0.8f;
      a[i].r.top_p = 0.9f;
    }
  }
  memcpy(b, a, sizeof b);
  for (int i = 0; i < 4; i++) b[i].r.prompt = b[i].prompt;
  recap_generator *g = generator_with_loop(spec, "16");
  run_jobs(g, a, 4);
  recap_generator_stats s;
  CHECK_OK(recap_generator_stats_get(g, &s));
  CHECK_OK(recap_generator_destroy(g));
  g = generator_with_loop(spec, "0");
  run_jobs(g, b, 4);
  CHECK_OK(recap_generator_destroy(g));
  expect_same_results(a, b, 4);
  CU_ASSERT(s.loop_launches >= 2 && s.loop_steps >= 23);
  remove_dir();
}

/* The imported spec with noise drawn from the device generator added to the logits (a random
 * op in both entries), so greedy and sampled tokens depend on every step's draws. */
static void add_logit_noise(const char *spec) {
  FILE *f = fopen(spec, "r");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  char text[16384];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  static const char line[] = "  - {op: linear, in: [hf, lm_head], out: logits, name: lm_head}\n";
  char *at = strstr(text, line);
  CU_ASSERT_PTR_NOT_NULL_FATAL(at);
  f = fopen(spec, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fprintf(f,
          "%.*s  - {op: linear, in: [hf, lm_head], out: clean, name: lm_head}\n"
          "  - {op: random_normal, out: noise, shape: [Bs, V], std: 2.0}\n"
          "  - {op: add, in: [clean, noise], out: logits}\n%s",
          (int)(at - text), text, at + strlen(line));
  fclose(f);
}

/* Runs the jobs one at a time (so every step's batch, and so its draws, are the same in both
 * modes) from a fixed generator state; the state the generator leaves into *after. */
static void run_alone(const char *spec, const char *loop_env, job *jobs, int n,
                      recap_rng_state *after, recap_generator_stats *stats) {
  recap_generator *g = generator_with_loop(spec, loop_env);
  CHECK_OK(recap_rng_manual_seed(test_device, 4242));
  for (int i = 0; i < n; i++) run_jobs(g, &jobs[i], 1);
  CHECK_OK(recap_generator_stats_get(g, stats));
  CHECK_OK(recap_generator_destroy(g));
  CHECK_OK(recap_rng_get_state(test_device, after));
}

/* A decode step that draws from the device generator: each loop iteration draws what the next
 * single launch would (the body moves the RNG slot on), so greedy and seeded sampling give the
 * tokens of one launch per step, and the generator's state after the loops is that after the
 * same number of single steps. */
static void test_loop_draws_what_steps_draw(void) {
  make_dir();
  char spec[512];
  import_serving("qwen3", spec, sizeof spec);
  enum { N = 4 };
  job a[N];
  memset(a, 0, sizeof a);
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < 6; k++) a[i].prompt[k] = (int32_t)((i * 29 + k * 13) % VOCAB);
    a[i].r = (recap_request){.struct_size = sizeof(recap_request),
                             .prompt = a[i].prompt,
                             .prompt_len = 6,
                             .max_new_tokens = 13 + 5 * i,
                             .has_seed = 1,
                             .seed = 77 + (uint64_t)i};
    if (i % 2) {
      a[i].r.temperature = 0.9f;
      a[i].r.top_k = 20;
      a[i].r.top_p = 0.95f;
    }
  }
  job b[N], c[N];
  memcpy(b, a, sizeof b);
  memcpy(c, a, sizeof c);
  for (int i = 0; i < N; i++) b[i].r.prompt = b[i].prompt, c[i].r.prompt = c[i].prompt;
  recap_rng_state looped, stepped;
  recap_generator_stats ls, ss;
  run_alone(spec, "4", c, N, &looped, &ls); /* without the noise: other tokens below */
  add_logit_noise(spec);
  run_alone(spec, "4", a, N, &looped, &ls);
  run_alone(spec, "0", b, N, &stepped, &ss);
  expect_same_results(a, b, N);
  CU_ASSERT(ls.loop_launches >= N && ls.loop_steps > ls.loop_launches);
  CU_ASSERT_EQUAL(ss.loop_launches, 0);
  CU_ASSERT_EQUAL(looped.seed, stepped.seed);
  CU_ASSERT_EQUAL(looped.offset, stepped.offset);
  CU_ASSERT(stepped.offset > 0);
  /* Without the noise in the step the tokens are others: the draws mattered. */
  int differ = 0;
  for (int i = 0; i < N; i++)
    differ += memcmp(a[i].tokens, c[i].tokens, sizeof(int32_t) * a[i].status.num_tokens) != 0;
  CU_ASSERT(differ != 0);
  remove_dir();
}

static void test_bad_loop_switch_is_refused(void) {
  make_dir();
  char spec[512];
  import_serving("qwen3", spec, sizeof spec);
  setenv("RECAP_DECODE_LOOP", "lots", 1);
  recap_generator_options o = {
      .struct_size = sizeof o, .override_device = 1, .device = test_device, .quiet = 1};
  recap_generator *g = NULL;
  CHECK_STATUS(recap_generator_create(spec, &o, &g), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("RECAP_DECODE_LOOP='lots'");
  unsetenv("RECAP_DECODE_LOOP");
  remove_dir();
}

/* A fault after the third token's callback (a trapped kernel, on CUDA): the tokens the launch
 * had already produced are delivered, the next launch fails, and the request fails with the
 * device error. */
static recap_status fail_on_the_device(void *args) {
  (void)args;
  return RECAP_FAIL(RECAP_STATUS_DEVICE_ERROR, "planted fault");
}

static void fault_at_three(void *user, uint64_t id, int32_t token, recap_request_state state) {
  int *tokens = user;
  (void)id;
  (void)state;
  if (token >= 0 && ++*tokens == 3) {
    int unused = 0;
    (void)recap__host_run_fn(fail_on_the_device, &unused, sizeof unused);
  }
}

static void test_a_fault_during_loops_fails_the_request(void) {
  make_dir();
  char spec[512];
  import_serving("qwen3", spec, sizeof spec);
  recap_generator *g = generator_with_loop(spec, "4");
  int32_t prompt[6] = {1, 2, 3, 4, 5, 6};
  int tokens = 0;
  recap_request r = {.struct_size = sizeof r,
                     .prompt = prompt,
                     .prompt_len = 6,
                     .max_new_tokens = 40,
                     .on_token = fault_at_three,
                     .user = &tokens};
  uint64_t id = 0;
  test_stderr_capture_begin();
  CHECK_OK(recap_generator_submit(g, &r, &id, NULL));
  recap_status waited = recap_generator_wait(g, id, test_scaled_seconds(60));
  char *printed = test_stderr_capture_end();
  CHECK_OK(waited);
  CU_ASSERT_PTR_NOT_NULL(strstr(printed, "planted fault"));
  free(printed);
  recap_request_status st;
  CHECK_OK(recap_generator_poll(g, id, NULL, 0, &st));
  CU_ASSERT_EQUAL(st.state, RECAP_REQUEST_FAILED);
  CU_ASSERT_EQUAL(st.error, RECAP_STATUS_DEVICE_ERROR);
  /* Token 1 from the prefill, 2-5 from the first loop of 4, during which the fault came. */
  CU_ASSERT_EQUAL(st.num_tokens, 5);
  recap__host_backend_reset_fault_for_testing();
  CHECK_OK(recap_generator_destroy(g));
  remove_dir();
}

/* ---- the loop API ---- */

/* Polls a launch to its end (the host backend's has ended at launch; a GPU's may not have),
 * collecting up to `capacity` entries. */
static size_t poll_to_end(recap_decode_loop *loop, recap_loop_token *e, size_t capacity) {
  size_t total = 0;
  int finished = 0;
  double deadline = test_scaled_seconds(30);
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (!finished) {
    size_t n = 0;
    CHECK_OK(recap_decode_loop_wait(loop, 1000000));
    CHECK_OK(recap_decode_loop_poll(loop, e + total, capacity - total, &n, &finished));
    total += n;
    clock_gettime(CLOCK_MONOTONIC, &t);
    CU_ASSERT_FATAL((double)(t.tv_sec - t0.tv_sec) < deadline);
  }
  return total;
}

static recap_pipeline *decode_pipeline(const char *spec, recap_run_mode mode) {
  recap_pipeline_options po = {.struct_size = sizeof po,
                               .override_device = 1,
                               .device = test_device,
                               .override_mode = 1,
                               .mode = mode,
                               .entry = "decode"};
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_file(spec, &po, &p));
  return p;
}

static void test_loop_api_refusals(void) {
  make_dir();
  char spec[512];
  import_serving("qwen3", spec, sizeof spec);
  recap_pipeline *eager = decode_pipeline(spec, RECAP_MODE_EAGER);
  recap_decode_loop *loop = NULL;
  CHECK_STATUS(recap_decode_loop_create(eager, 4, 0, &loop), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("eagerly");
  recap_pipeline_destroy(eager);

  recap_pipeline *p = decode_pipeline(spec, RECAP_MODE_GRAPH);
  CHECK_STATUS(recap_decode_loop_create(p, 0, 0, &loop), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap_decode_loop_create(p, 4, 1, &loop));
  /* No launch: the wait returns at once, whatever its bound. */
  struct timespec w0, w1;
  clock_gettime(CLOCK_MONOTONIC, &w0);
  CHECK_OK(recap_decode_loop_wait(loop, 10 * 1000000000LL));
  clock_gettime(CLOCK_MONOTONIC, &w1);
  CU_ASSERT(w1.tv_sec - w0.tv_sec < 5);
  CHECK_STATUS(recap_decode_loop_wait(loop, -1), RECAP_STATUS_INVALID_ARGUMENT);
  recap_loop_limits limits = {.max_outputs = 100};
  CHECK_STATUS(recap_decode_loop_launch(loop, 1, 5, &limits, 0), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_decode_loop_launch(loop, 9, 2, &limits, 0), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_decode_loop_launch(loop, 1, 2, &limits, 4), RECAP_STATUS_INVALID_ARGUMENT);
  limits.num_stop_ids = RECAP_MAX_STOP_IDS + 1;
  CHECK_STATUS(recap_decode_loop_launch(loop, 1, 2, &limits, 0), RECAP_STATUS_INVALID_ARGUMENT);
  limits.num_stop_ids = 0;
  /* All-zero seqs (what the pipeline holds now): no row runs, the loop ends after one step
   * with no token. */
  CHECK_OK(recap_decode_loop_launch(loop, 1, 4, &limits, 0));
  CHECK_STATUS(recap_decode_loop_launch(loop, 1, 4, &limits, 0), RECAP_STATUS_BUSY);
  CHECK_STATUS(recap_decode_loop_destroy(loop), RECAP_STATUS_BUSY);
  recap_loop_token entries[8];
  CU_ASSERT_EQUAL(poll_to_end(loop, entries, 8), 0);
  CHECK_OK(recap_decode_loop_destroy(loop));
  recap_pipeline_destroy(p);
  remove_dir();
}

/* Two sequences by hand: row 0 runs out of blocks after 2 steps, row 1 stops at 3 outputs. */
static void write_two_rows(recap_pipeline *p) {
  recap_tensor_info info;
  int64_t width = 0;
  recap_pipeline_info pi;
  CHECK_OK(recap_pipeline_info_get(p, &pi));
  for (size_t i = 0; i < pi.num_tensors; i++) {
    CHECK_OK(recap_pipeline_tensor_info_get(p, i, &info));
    if (strcmp(info.name, "seqs") == 0) width = info.shape[1];
  }
  CU_ASSERT_FATAL(width > RECAP_SEQ_BLOCKS + 2);
  int32_t *seqs = calloc((size_t)(2 * width), sizeof *seqs);
  CU_ASSERT_PTR_NOT_NULL_FATAL(seqs);
  int32_t ids[2] = {7, 11};
  for (int r = 0; r < 2; r++) {
    int32_t *row = seqs + r * width;
    row[RECAP_SEQ_LEN] = 3; /* position 2 now: pretend positions 0-1 are cached */
    row[RECAP_SEQ_Q_START] = r;
    row[RECAP_SEQ_Q_LEN] = 1;
    row[RECAP_SEQ_OUT_INDEX] = 1;
    for (int64_t j = 0; j < width - RECAP_SEQ_BLOCKS; j++) row[RECAP_SEQ_BLOCKS + j] = -1;
    row[RECAP_SEQ_BLOCKS] = 2 * r; /* positions 0-3 */
  }
  seqs[width + RECAP_SEQ_BLOCKS + 1] = 3; /* row 1 also holds positions 4-7 */
  CHECK_OK(recap_pipeline_copy_in(p, "ids", ids, sizeof ids, 2));
  CHECK_OK(recap_pipeline_copy_in(p, "seqs", seqs, sizeof *seqs * (size_t)(2 * width), 2));
  free(seqs);
}

static const recap_loop_limits TWO_ROW_LIMITS[2] = {{.max_outputs = 100}, {.max_outputs = 4}};

/* The ring holds their tokens in step order and the stamps one start and end per step. */
static void test_loop_api_ring_order_blocks_and_stamps(void) {
  make_dir();
  char spec[512];
  import_serving("qwen3", spec, sizeof spec);
  recap_pipeline *p = decode_pipeline(spec, RECAP_MODE_GRAPH);
  write_two_rows(p);
  recap_decode_loop *loop = NULL;
  CHECK_OK(recap_decode_loop_create(p, 8, 1, &loop));
  CHECK_OK(recap_decode_loop_launch(loop, 2, 8, TWO_ROW_LIMITS, 0));
  recap_loop_token e[16];
  size_t n = poll_to_end(loop, e, 16);
  /* Row 0 writes positions 2 and 3, then position 4 has no block: 2 tokens. Row 1 samples
   * outputs 1, 2, 3 and stops at 4 outputs: 3 tokens. */
  int32_t expect_step[] = {0, 0, 1, 1, 2}, expect_row[] = {0, 1, 0, 1, 1};
  CU_ASSERT_EQUAL_FATAL(n, 5);
  for (size_t i = 0; i < n; i++) {
    CU_ASSERT_EQUAL(e[i].step, expect_step[i]);
    CU_ASSERT_EQUAL(e[i].row, expect_row[i]);
    CU_ASSERT(e[i].token >= 0);
    if (i) CU_ASSERT(e[i].time_ns >= e[i - 1].time_ns);
  }
  const uint64_t *stamps = NULL;
  int64_t steps = 0;
  CHECK_OK(recap_decode_loop_stamps(loop, &stamps, &steps));
  CU_ASSERT_EQUAL_FATAL(steps, 3);
  for (int64_t k = 0; k + 1 < 2 * steps; k++) CU_ASSERT(stamps[k] <= stamps[k + 1]);
  CHECK_OK(recap_decode_loop_destroy(loop));
  recap_pipeline_destroy(p);
  remove_dir();
}

/* A return request ends the launch it was made in, and only that one. On a GPU the copy lands
 * a few microseconds after the call, during the first steps; the host backend's launch has run
 * to its end before launch returns, so there it ends nothing. Either way the entries are the
 * first ones of a launch that runs out (row 0 has blocks for 2 tokens, row 1 for 6), and the
 * next launch, asked nothing, runs every step: a request names its launch, and one that lands
 * late is ignored. A request with no launch running does nothing. */
static void test_loop_api_return_request_ends_only_its_launch(void) {
  make_dir();
  char spec[512];
  import_serving("qwen3", spec, sizeof spec);
  recap_pipeline *p = decode_pipeline(spec, RECAP_MODE_GRAPH);
  recap_decode_loop *loop = NULL;
  CHECK_OK(recap_decode_loop_create(p, 8, 0, &loop));
  const recap_loop_limits limits[2] = {{.max_outputs = 100}, {.max_outputs = 100}};
  recap_loop_token asked[16], full[16];
  write_two_rows(p);
  CHECK_OK(recap_decode_loop_launch(loop, 2, 8, limits, 0));
  CHECK_OK(recap_decode_loop_request_return(loop));
  size_t n_asked = poll_to_end(loop, asked, 16);
  CU_ASSERT(n_asked >= 1 && n_asked <= 8);
  if (test_device.backend == RECAP_BACKEND_HOST) CU_ASSERT_EQUAL(n_asked, 8);
  for (int launch = 0; launch < 2; launch++) {
    if (launch == 1) CHECK_OK(recap_decode_loop_request_return(loop)); /* none running */
    write_two_rows(p);
    CHECK_OK(recap_decode_loop_launch(loop, 2, 8, limits, 0));
    CU_ASSERT_EQUAL_FATAL(poll_to_end(loop, full, 16), 8);
    CU_ASSERT_EQUAL(full[7].step, 5);
  }
  for (size_t i = 0; i < n_asked; i++) {
    CU_ASSERT_EQUAL(asked[i].step, full[i].step);
    CU_ASSERT_EQUAL(asked[i].row, full[i].row);
    CU_ASSERT_EQUAL(asked[i].token, full[i].token);
  }
  CHECK_OK(recap_decode_loop_destroy(loop));
  recap_pipeline_destroy(p);
  remove_dir();
}

/* The same two rows with a step that draws (noise on the logits): a loop launched for 8 steps
 * that runs 3 gives the tokens of 3 single replays, and leaves the generator where they do
 * (the 5 steps that did not run give their draws back). */
static void test_loop_api_draws_and_settles_the_generator(void) {
  make_dir();
  char spec[512];
  import_serving("qwen3", spec, sizeof spec);
  add_logit_noise(spec);
  recap_pipeline *p = decode_pipeline(spec, RECAP_MODE_GRAPH);
  recap_decode_loop *loop = NULL;
  CHECK_OK(recap_decode_loop_create(p, 8, 0, &loop));
  CHECK_OK(recap_rng_manual_seed(test_device, 99));
  recap_rng_state start, after_loop, after_steps;
  CHECK_OK(recap_rng_get_state(test_device, &start));
  write_two_rows(p);
  CHECK_OK(recap_decode_loop_launch(loop, 2, 8, TWO_ROW_LIMITS, 0));
  recap_loop_token e[16];
  size_t n = poll_to_end(loop, e, 16);
  CU_ASSERT_EQUAL_FATAL(n, 5);
  CHECK_OK(recap_rng_get_state(test_device, &after_loop));
  /* One launch per step from the same state: row 0 at steps 0 and 1, row 1 at 0, 1 and 2. */
  CHECK_OK(recap_rng_set_state(test_device, &start));
  write_two_rows(p);
  int32_t expect[5], tokens[2];
  for (int step = 0, k = 0; step < 3; step++) {
    CHECK_OK(recap_pipeline_run(p, 2));
    CHECK_OK(recap_pipeline_copy_out(p, "tokens", tokens, sizeof tokens, 2));
    for (int r = 0; r < 2; r++)
      if (tokens[r] >= 0) expect[k++] = tokens[r];
  }
  CHECK_OK(recap_rng_get_state(test_device, &after_steps));
  for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL(e[i].token, expect[i]);
  CU_ASSERT_EQUAL(after_loop.seed, after_steps.seed);
  CU_ASSERT_EQUAL(after_loop.offset, after_steps.offset);
  CU_ASSERT(after_loop.offset == start.offset + 3); /* one draw per step */
  CHECK_OK(recap_decode_loop_destroy(loop));
  recap_pipeline_destroy(p);
  remove_dir();
}

int main(void) {
  /* Device-specific: also run on CUDA, where the loop is a real WHILE node. */
  static const test_case tests[] = {
      {"loop_gives_the_tokens_of_one_launch_per_step",
       test_loop_gives_the_tokens_of_one_launch_per_step, false},
      {"loop_on_a_world_of_one_gives_the_tokens_of_steps",
       test_loop_on_a_world_of_one_gives_the_tokens_of_steps, false},
      {"loop_runs_k_steps_per_launch", test_loop_runs_k_steps_per_launch, true},
      {"loop_of_a_batch_gives_the_tokens_of_steps", test_loop_of_a_batch_gives_the_tokens_of_steps,
       true},
      {"loop_draws_what_steps_draw", test_loop_draws_what_steps_draw, true},
      {"bad_loop_switch_is_refused", test_bad_loop_switch_is_refused, false},
      {"a_fault_during_loops_fails_the_request", test_a_fault_during_loops_fails_the_request,
       false},
      {"loop_api_refusals", test_loop_api_refusals, true},
      {"loop_api_ring_order_blocks_and_stamps", test_loop_api_ring_order_blocks_and_stamps, true},
      {"loop_api_draws_and_settles_the_generator", test_loop_api_draws_and_settles_the_generator,
       true},
      {"loop_api_return_request_ends_only_its_launch",
       test_loop_api_return_request_ends_only_its_launch, true},
  };
  test_add_host_and_cuda_suites("decode loop", tests, sizeof tests / sizeof tests[0]);
  return test_run_all();
}
