/*
 * pipeline_serving_test.c: imported models in the paged serving layout (`recap import-hf
 * --paged`): many sequences at different positions in one step, prompts packed and chunked,
 * the KV cache in a pool of scattered blocks, sampling and the end-of-step update in the graph.
 *
 * The reference is transformers (tests/data/models/<name>/expected.json: float64 logits at
 * every position of one token stream, a prompt and its greedy continuation), never recap. The
 * sequences of a batch all follow that stream, each at its own position, so every logits row
 * recap produces has a reference row, under issue 19's rule (max |error| <= 2 x transformers'
 * f32 error + 1e-6 x max |logit|; argmax equal where the margin is clear). Beyond it:
 * - a sequence batched with others gives exactly the logits it gives alone, and the same
 *   sampled tokens for the same seed whatever its row and bucket (host: bit for bit, since
 *   every row is computed alone; CUDA: the rule, and equal tokens);
 * - graph replay equals eager execution bit for bit;
 * - after one metadata copy, decode steps run with no host copy (decode_advance moves the rows
 *   on and feeds the sampled tokens back): greedy reproduces transformers' continuation, and a
 *   sequence admitted later joins the running one.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/model_fixtures.h"
#include "tests/pipeline_util.h"

enum {
  BLOCK = 4,    /* rows per KV block */
  MAX_SEQ = 32, /* positions per sequence: the fixtures' streams are 28 tokens */
  BLOCKS_PER_SEQ = MAX_SEQ / BLOCK,
  WIDTH = RECAP_SEQ_BLOCKS + BLOCKS_PER_SEQ,
  POOL = 64,        /* blocks per layer: room for 8 sequences */
  PREFILL_SEQS = 4, /* sequences one prefill step packs */
  MAX_SEQS = 4,     /* the largest decode bucket */
};
static const int64_t DECODE_BUCKETS[] = {1, 2, 4};
static const int64_t PREFILL_BUCKETS[] = {16, 32};

/* What the host keeps of one sequence: its blocks, length and sampling parameters. */
typedef struct {
  int len; /* keys in the cache */
  int blocks[BLOCKS_PER_SEQ];
  uint64_t seed;
  float temperature, top_p, min_p;
  int top_k, out_index;
} sequence;

/* Blocks from a shuffled pool, so no sequence's blocks are contiguous or in order. */
static void give_blocks(sequence *s, int slot) {
  for (int j = 0; j < BLOCKS_PER_SEQ; j++) s->blocks[j] = (slot * BLOCKS_PER_SEQ + j) * 37 % POOL;
}

static int32_t float_bits(float v) {
  int32_t bits;
  memcpy(&bits, &v, sizeof bits);
  return bits;
}

/* The seqs row of s for a step that gives it q_len tokens from q_start, after which the
 * cache holds s->len keys. */
static void put_row(int32_t *row, const sequence *s, int q_start, int q_len) {
  memset(row, 0, sizeof(int32_t) * WIDTH);
  row[RECAP_SEQ_LEN] = s->len;
  row[RECAP_SEQ_Q_START] = q_start;
  row[RECAP_SEQ_Q_LEN] = q_len;
  row[RECAP_SEQ_OUT_INDEX] = s->out_index;
  row[RECAP_SEQ_SEED_LO] = (int32_t)(uint32_t)s->seed;
  row[RECAP_SEQ_SEED_HI] = (int32_t)(uint32_t)(s->seed >> 32);
  row[RECAP_SEQ_TOP_K] = s->top_k;
  row[RECAP_SEQ_TEMPERATURE] = float_bits(s->temperature);
  row[RECAP_SEQ_TOP_P] = float_bits(s->top_p);
  row[RECAP_SEQ_MIN_P] = float_bits(s->min_p);
  for (int j = 0; j < BLOCKS_PER_SEQ; j++) row[RECAP_SEQ_BLOCKS + j] = s->blocks[j];
}

typedef struct {
  recap_pipeline *prefill, *decode;
  int vocab;
} server;

static void import_paged(const char *model, char *spec, size_t size) {
  import_paged_fixture(model,
                       PAGED_IMPORT_OPTIONS(MAX_SEQ, BLOCK, POOL, PREFILL_SEQS, DECODE_BUCKETS,
                                            PREFILL_BUCKETS),
                       spec, size);
}

static void server_open(server *s, const char *spec, int vocab, recap_run_mode mode) {
  recap_pipeline_options po = opts_on(test_device);
  po.entry = "prefill";
  po.override_mode = 1;
  po.mode = mode;
  CHECK_OK(recap_pipeline_create_file(spec, &po, &s->prefill));
  CU_ASSERT_PTR_NOT_NULL_FATAL(s->prefill);
  recap_pipeline_options dopt = po;
  dopt.entry = "decode";
  dopt.share = s->prefill;
  CHECK_OK(recap_pipeline_create_file(spec, &dopt, &s->decode));
  CU_ASSERT_PTR_NOT_NULL_FATAL(s->decode);
  s->vocab = vocab;
}

static void server_close(server *s) {
  CHECK_OK(recap_pipeline_destroy(s->decode));
  CHECK_OK(recap_pipeline_destroy(s->prefill));
}

/* One prefill step: sequence i takes tokens stream[first[i] .. first[i] + count[i]) (its
 * cache already holds first[i] keys). Copies out each sequence's last-token logits (n x
 * vocab) and sampled token. */
static void prefill_step(server *s, sequence *seqs, int n, const int *stream, const int *first,
                         const int *count, float *logits, int32_t *sampled) {
  int32_t ids[64], rows[PREFILL_SEQS * WIDTH] = {0};
  int total = 0;
  for (int i = 0; i < n; i++) {
    seqs[i].len = first[i] + count[i];
    put_row(&rows[i * WIDTH], &seqs[i], total, count[i]);
    for (int k = 0; k < count[i]; k++) ids[total++] = stream[first[i] + k];
  }
  CHECK_OK(recap_pipeline_copy_in(s->prefill, "ids", ids, sizeof(int32_t) * (size_t)total, total));
  CHECK_OK(recap_pipeline_copy_in(s->prefill, "seqs", rows, sizeof rows, 0));
  CHECK_OK(recap_pipeline_run(s->prefill, total));
  float all[PREFILL_SEQS * 512];
  int32_t tokens[PREFILL_SEQS];
  CU_ASSERT_FATAL(s->vocab <= 512);
  CHECK_OK(recap_pipeline_copy_out(s->prefill, "logits", all,
                                   sizeof(float) * PREFILL_SEQS * (size_t)s->vocab, 0));
  CHECK_OK(recap_pipeline_copy_out(s->prefill, "tokens", tokens, sizeof tokens, 0));
  memcpy(logits, all, sizeof(float) * (size_t)n * (size_t)s->vocab);
  if (sampled) memcpy(sampled, tokens, sizeof(int32_t) * (size_t)n);
}

/* Writes one decode step's metadata: sequence i takes token ids[i] at position seqs[i].len
 * (then holds len + 1 keys). */
static void decode_metadata(server *s, sequence *seqs, int n, const int32_t *ids) {
  int32_t rows[MAX_SEQS * WIDTH];
  for (int i = 0; i < n; i++) {
    seqs[i].len += 1;
    put_row(&rows[i * WIDTH], &seqs[i], i, 1);
  }
  CHECK_OK(recap_pipeline_copy_in(s->decode, "ids", ids, sizeof(int32_t) * (size_t)n, n));
  CHECK_OK(recap_pipeline_copy_in(s->decode, "seqs", rows, sizeof(int32_t) * WIDTH * (size_t)n, n));
}

/* Runs the decode pipeline on what its inputs hold and copies out n rows of logits and
 * sampled tokens. */
static void decode_run(server *s, int n, float *logits, int32_t *sampled) {
  CHECK_OK(recap_pipeline_run(s->decode, n));
  if (logits)
    CHECK_OK(recap_pipeline_copy_out(s->decode, "logits", logits,
                                     sizeof(float) * (size_t)n * (size_t)s->vocab, n));
  if (sampled)
    CHECK_OK(recap_pipeline_copy_out(s->decode, "tokens", sampled, sizeof(int32_t) * (size_t)n, n));
}

/* ---- judging against transformers ---- */

typedef struct {
  double max_error;
  int rows, under_margin, argmax_wrong;
} verdict;

static int argmax_of(const float *row, int vocab) {
  int best = 0;
  for (int v = 1; v < vocab; v++)
    if (row[v] > row[best]) best = v;
  return best;
}

/* One logits row recap produced for stream position t. */
static void judge_row(verdict *j, const reference *ref, int t, const float *row) {
  const double *want = &ref->logits[(size_t)t * (size_t)ref->vocab];
  for (int v = 0; v < ref->vocab; v++) {
    double e = fabs((double)row[v] - want[v]);
    if (e > j->max_error) j->max_error = e;
  }
  j->rows++;
  if (ref->margin[t] <= 1e-3 * ref->max_abs_logit)
    j->under_margin++;
  else if (argmax_of(row, ref->vocab) != ref->argmax[t])
    j->argmax_wrong++;
}

static void check_verdict(const char *label, const verdict *j, const reference *ref) {
  double tolerance = 2 * ref->f32_error + 1e-6 * ref->max_abs_logit;
  printf(
      "\n  %-34s %d rows: max |error| %.3g (tolerance %.3g); argmax wrong %d, %d under the margin",
      label, j->rows, j->max_error, tolerance, j->argmax_wrong, j->under_margin);
  CU_ASSERT(j->max_error <= tolerance);
  CU_ASSERT_EQUAL(j->argmax_wrong, 0);
}

/* ---- the schedule ---- */

enum { NUM_SEQS = 3 };

/* Three sequences over the reference stream, at different positions throughout: sequence 0
 * prefills the whole prompt, 1 the first 5 tokens, 2 the first 9 in two chunks (4, then 5 more
 * attending to the 4 in the cache); then teacher-forced decode steps for all three until
 * sequence 0 reaches the stream's end. `only` >= 0 runs that sequence alone through the same
 * steps. Every logits row goes to `out` in order (row count in *rows) and, when ref is given,
 * is judged. */
static void run_schedule(server *s, const reference *ref, int only, verdict *j, float *out,
                         int *rows) {
  const int prompt[NUM_SEQS] = {ref->prompt_length, 5, 4}, chunk2 = 5;
  sequence seqs[NUM_SEQS] = {{0}};
  int slot[NUM_SEQS], n = 0;
  for (int i = 0; i < NUM_SEQS; i++) {
    if (only >= 0 && i != only) continue;
    slot[n] = i;
    give_blocks(&seqs[n], i);
    n++;
  }
  int vocab = ref->vocab, first[NUM_SEQS] = {0}, count[NUM_SEQS] = {0};
  float logits[NUM_SEQS * 512];
  *rows = 0;
  for (int k = 0; k < n; k++) count[k] = prompt[slot[k]];
  prefill_step(s, seqs, n, ref->tokens, first, count, logits, NULL);
  for (int k = 0; k < n; k++) {
    judge_row(j, ref, seqs[k].len - 1, &logits[k * vocab]);
    memcpy(&out[(size_t)(*rows)++ * (size_t)vocab], &logits[k * vocab], sizeof(float) * vocab);
  }
  /* Sequence 2's second chunk, alone in its step. */
  for (int k = 0; k < n; k++) {
    if (slot[k] != 2) continue;
    int f = seqs[k].len, c = chunk2;
    prefill_step(s, &seqs[k], 1, ref->tokens, &f, &c, logits, NULL);
    judge_row(j, ref, seqs[k].len - 1, logits);
    memcpy(&out[(size_t)(*rows)++ * (size_t)vocab], logits, sizeof(float) * vocab);
  }
  /* Decode, teacher-forced: each sequence feeds the stream's token at its position. */
  int steps = ref->count - ref->prompt_length;
  for (int step = 0; step < steps; step++) {
    int32_t ids[NUM_SEQS];
    for (int k = 0; k < n; k++) ids[k] = ref->tokens[seqs[k].len];
    decode_metadata(s, seqs, n, ids);
    decode_run(s, n, logits, NULL);
    for (int k = 0; k < n; k++) {
      judge_row(j, ref, seqs[k].len - 1, &logits[k * vocab]);
      memcpy(&out[(size_t)(*rows)++ * (size_t)vocab], &logits[k * vocab], sizeof(float) * vocab);
    }
  }
}

enum { MAX_ROWS = NUM_SEQS * 2 + NUM_SEQS * MAX_TOKENS };

/* The rows of sequence `which` in a batched run's output, in order (the batched run emits the
 * sequences' rows interleaved per step: see run_schedule). */
static int rows_of(const float *batched, int vocab, const reference *ref, int which, float *out) {
  int per_step = NUM_SEQS, got = 0, r = 0;
  for (int k = 0; k < NUM_SEQS; k++, r++)
    if (k == which) memcpy(&out[(size_t)got++ * vocab], &batched[(size_t)r * vocab], 4 * vocab);
  if (which == 2) memcpy(&out[(size_t)got++ * vocab], &batched[(size_t)r * vocab], 4 * vocab);
  r++;
  for (int step = 0; step < ref->count - ref->prompt_length; step++)
    for (int k = 0; k < per_step; k++, r++)
      if (k == which) memcpy(&out[(size_t)got++ * vocab], &batched[(size_t)r * vocab], 4 * vocab);
  return got;
}

static bool on_host(void) {
  return test_device.backend == RECAP_BACKEND_HOST;
}

/* Graph replay and eager runs of the same schedule: bit for bit. Each sequence alone: bit for
 * bit on the host (every row computed alone), under the rule on CUDA (a GEMM's algorithm may
 * depend on the bucket). */
static void test_batched_sequences_at_different_positions_match_transformers(void) {
  make_dir();
  for (size_t m = 0; m < sizeof MODELS / sizeof MODELS[0]; m++) {
    reference ref;
    load_reference(MODELS[m], &ref);
    char spec[512], label[96];
    import_paged(MODELS[m], spec, sizeof spec);
    size_t row_bytes = sizeof(float) * (size_t)ref.vocab;
    float *graph = malloc(row_bytes * MAX_ROWS), *eager = malloc(row_bytes * MAX_ROWS);
    float *alone = malloc(row_bytes * MAX_ROWS), *mine = malloc(row_bytes * MAX_ROWS);
    CU_ASSERT_FATAL(graph && eager && alone && mine);

    server s;
    verdict j = {0};
    int rows = 0, eager_rows = 0;
    server_open(&s, spec, ref.vocab, RECAP_MODE_GRAPH);
    run_schedule(&s, &ref, -1, &j, graph, &rows);
    snprintf(label, sizeof label, "%s: 3 sequences, graphs", MODELS[m]);
    check_verdict(label, &j, &ref);
    server_close(&s);

    verdict je = {0};
    server_open(&s, spec, ref.vocab, RECAP_MODE_EAGER);
    run_schedule(&s, &ref, -1, &je, eager, &eager_rows);
    CU_ASSERT_EQUAL(eager_rows, rows);
    CU_ASSERT_EQUAL(memcmp(graph, eager, row_bytes * (size_t)rows), 0);
    server_close(&s);

    for (int which = 0; which < NUM_SEQS; which++) {
      verdict ja = {0};
      int alone_rows = 0;
      server_open(&s, spec, ref.vocab, RECAP_MODE_GRAPH);
      run_schedule(&s, &ref, which, &ja, alone, &alone_rows);
      server_close(&s);
      int batched_rows = rows_of(graph, ref.vocab, &ref, which, mine);
      CU_ASSERT_EQUAL(alone_rows, batched_rows);
      if (on_host()) {
        CU_ASSERT_EQUAL(memcmp(alone, mine, row_bytes * (size_t)alone_rows), 0);
      } else {
        snprintf(label, sizeof label, "%s: sequence %d alone", MODELS[m], which);
        check_verdict(label, &ja, &ref);
      }
    }
    free(graph);
    free(eager);
    free(alone);
    free(mine);
    free(ref.logits);
  }
  printf("\n");
  remove_dir();
}

/* After one metadata copy, greedy decode runs step after step with no host copy in between:
 * the sampled token feeds the next step on the device. A second sequence with the same prompt
 * is admitted (one metadata copy) after the first has decoded 4 tokens; both must continue the
 * stream as transformers' greedy run does, each at its own position. */
static void test_device_side_decode_loop_reproduces_greedy_and_admits(void) {
  make_dir();
  for (size_t m = 0; m < sizeof MODELS / sizeof MODELS[0]; m++) {
    reference ref;
    load_reference(MODELS[m], &ref);
    int under = 0;
    for (int t = ref.prompt_length - 1; t + 1 < ref.count; t++)
      if (ref.margin[t] <= 1e-3 * ref.max_abs_logit) under++;
    char spec[512];
    import_paged(MODELS[m], spec, sizeof spec);
    server s;
    server_open(&s, spec, ref.vocab, RECAP_MODE_GRAPH);
    int prompt = ref.prompt_length, steps = ref.count - prompt - 1;
    sequence seqs[2] = {{0}};
    give_blocks(&seqs[0], 0);
    give_blocks(&seqs[1], 1);
    float logits[512];
    int32_t first_token[2], generated[2][MAX_TOKENS];
    int first = 0;
    prefill_step(&s, &seqs[0], 1, ref.tokens, &first, &prompt, logits, &first_token[0]);
    generated[0][0] = first_token[0];
    decode_metadata(&s, seqs, 1, first_token);
    const int admit_after = 4;
    for (int step = 0; step < admit_after; step++) {
      int32_t t;
      decode_run(&s, 1, NULL, &t);
      generated[0][1 + step] = t;
    }
    /* Admission: sequence 1's prompt, then both rows written once. Sequence 0's row is what
     * the device made of it: admit_after steps on from the copy. */
    prefill_step(&s, &seqs[1], 1, ref.tokens, &first, &prompt, logits, &first_token[1]);
    generated[1][0] = first_token[1];
    seqs[0].len += admit_after - 1;
    seqs[0].out_index += admit_after;
    int32_t ids[2] = {generated[0][admit_after], first_token[1]};
    decode_metadata(&s, seqs, 2, ids);
    for (int step = 0; step + admit_after < steps; step++) {
      int32_t t[2];
      decode_run(&s, 2, NULL, t);
      generated[0][1 + admit_after + step] = t[0];
      generated[1][1 + step] = t[1];
    }
    int matched[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
      int made = k == 0 ? steps + 1 : steps + 1 - admit_after;
      while (matched[k] < made && generated[k][matched[k]] == ref.tokens[prompt + matched[k]])
        matched[k]++;
      printf("\n  %-12s sequence %d: %d/%d greedy tokens as transformers'", MODELS[m], k,
             matched[k], made);
      if (under == 0) CU_ASSERT_EQUAL(matched[k], made);
    }
    server_close(&s);
    free(ref.logits);
  }
  printf("\n");
  remove_dir();
}

/* A request's sampled tokens depend on its seed and its tokens' indices only: the same
 * sequence sampled alone (bucket 1) and as row 2 of three (bucket 4) gives the same tokens. */
static void test_sampling_is_reproducible_across_batches_and_buckets(void) {
  make_dir();
  reference ref;
  load_reference("llama", &ref);
  char spec[512];
  import_paged("llama", spec, sizeof spec);
  int32_t tokens[2][MAX_TOKENS];
  for (int run = 0; run < 2; run++) {
    server s;
    server_open(&s, spec, ref.vocab, RECAP_MODE_GRAPH);
    int n = run == 0 ? 1 : 3, me = run == 0 ? 0 : 2;
    sequence seqs[3] = {{0}};
    for (int k = 0; k < n; k++) {
      give_blocks(&seqs[k], k);
      seqs[k].seed = k == me ? 0x1234abcd5678ull : 77 + (uint64_t)k;
      seqs[k].temperature = 0.9f;
      seqs[k].top_k = k == me ? 40 : 5;
      seqs[k].top_p = 0.95f;
      seqs[k].min_p = 0.01f;
    }
    int first[3] = {0, 0, 0}, count[3] = {ref.prompt_length, 7, 9};
    if (run == 1) count[me] = ref.prompt_length, count[0] = 7;
    float logits[3 * 512];
    int32_t sampled[3];
    prefill_step(&s, seqs, n, ref.tokens, first, count, logits, sampled);
    for (int k = 0; k < n; k++) seqs[k].out_index = 1;
    decode_metadata(&s, seqs, n, sampled);
    tokens[run][0] = sampled[me];
    for (int step = 1; step < 12; step++) {
      decode_run(&s, n, NULL, sampled);
      tokens[run][step] = sampled[me];
    }
    server_close(&s);
  }
  CU_ASSERT_EQUAL(memcmp(tokens[0], tokens[1], sizeof(int32_t) * 12), 0);
  /* Sampled, not a constant: real ids, not all the same. */
  int distinct = 0;
  for (int k = 0; k < 12; k++) {
    CU_ASSERT(tokens[0][k] >= 0 && tokens[0][k] < ref.vocab);
    distinct += k == 0 || tokens[0][k] != tokens[0][k - 1];
  }
  CU_ASSERT(distinct > 3);
  free(ref.logits);
  remove_dir();
}

int main(void) {
  static const test_case tests[] = {
      {"batched_sequences_at_different_positions_match_transformers",
       test_batched_sequences_at_different_positions_match_transformers, true},
      {"device_side_decode_loop_reproduces_greedy_and_admits",
       test_device_side_decode_loop_reproduces_greedy_and_admits, true},
      {"sampling_is_reproducible_across_batches_and_buckets",
       test_sampling_is_reproducible_across_batches_and_buckets, true},
  };
  test_add_host_and_cuda_suites("pipeline_serving", tests, sizeof tests / sizeof tests[0]);
  return test_run_all();
}
