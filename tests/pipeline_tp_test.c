/*
 * pipeline_tp_test.c: tensor-parallel imports (`recap import-hf --tp N`, issue 27) on the host
 * backend, against the same checkpoint imported whole (TP 1) and transformers' own outputs.
 *
 * The host backend has no communicator, so this test stands in one: every rank's spec runs in
 * this process, each rank's pipelines on a thread of their own, and a host collective handler
 * (kernels/collective.h) meets the ranks' calls at a barrier and writes the sum (all_reduce, in
 * rank order, in f32 as NCCL does) or the concatenation in rank order (all_gather) into every
 * rank's output. The ranks' specs are exactly what the importer writes: their own slices of the
 * weights, one all_reduce after attention and one after the MLP, the LM head's vocabulary rows
 * and the gathered, unpadded logits.
 *
 * Each model's prompt runs through `prefill` and its continuation through `decode`
 * (teacher-forced) at TP 1 and TP N, f32, in both layouts: the contiguous one, and the serving
 * one (--paged: one sequence, the prompt's last position and each decode step, with the graph's
 * greedy token, which must be TP 1's). Eager: a graph warmup holds a process-wide lock, so two
 * ranks' warmups in one process would wait for each other. Required, at every position: every
 * rank's logits and tokens equal (they are gathered); TP N within the importer's rule (issue 19:
 * max |error| <= 2 x transformers' own f32 error + 1e-6 x max |logit|) of transformers' float64
 * logits and of TP 1's; the same argmax as TP 1 wherever the reference's margin is clear. Models:
 * GPT-2 (biases, fused c_attn, tied head) at TP 2 and 4, Llama (grouped-query heads, untied head),
 * Llama with a tied head (its rows read from the embedding), Mistral, Qwen2 (q/k/v biases, tied),
 * Qwen3 (q/k norms, head_dim 32 over hidden 64), and GPT-2 with its vocabulary cut to 255 rows, so
 * that the last rank's share is padded (TP 2 and 4: 1 padded column each), compared with its own
 * TP 1. Then the split rules' refusals.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/hf_import.h"
#include "kernels/collective.h"
#include "runtime/error.h"
#include "tests/model_fixtures.h"
#include "tests/pipeline_util.h"

enum { MAX_WORLD = 4 };

/* ---- a world of ranks in one process ---- */

typedef struct {
  int world;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  int arrived;
  unsigned long generation;
  bool failed; /* a rank gave up: the others stop waiting for it */
  const recap__coll *calls[MAX_WORLD];
} host_world;

static _Thread_local int t_rank;

/* Waits until every rank arrived (false when a rank failed or a minute passed). */
static bool world_barrier(host_world *w) {
  pthread_mutex_lock(&w->mutex);
  unsigned long generation = w->generation;
  if (++w->arrived == w->world) {
    w->arrived = 0;
    w->generation++;
    pthread_cond_broadcast(&w->cond);
  }
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += (time_t)test_scaled_seconds(60);
  int rc = 0;
  while (w->generation == generation && !w->failed && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&w->cond, &w->mutex, &deadline);
  bool ok = w->generation != generation;
  if (!ok) {
    w->failed = true;
    pthread_cond_broadcast(&w->cond);
  }
  pthread_mutex_unlock(&w->mutex);
  return ok;
}

static void world_fail(host_world *w) {
  pthread_mutex_lock(&w->mutex);
  w->failed = true;
  pthread_cond_broadcast(&w->cond);
  pthread_mutex_unlock(&w->mutex);
}

/* The host collective handler: every rank's call meets the others', then each rank computes its
 * output from every rank's input, and writes it only once all have read theirs (an all_reduce
 * may run in place). */
static recap_status world_collective(void *ctx, const recap__coll *c, int world_attr) {
  host_world *w = ctx;
  if (world_attr != 0 && world_attr != w->world)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "planned for a world of %d, this one is %d",
                      world_attr, w->world);
  if (c->kind != RECAP__COLL_ALL_REDUCE && c->kind != RECAP__COLL_ALL_GATHER)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "the test's world runs all_reduce and all_gather");
  if (c->dtype != RECAP_DTYPE_F32 || c->op != RECAP_REDUCE_SUM)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "the test's world sums f32");
  w->calls[t_rank] = c;
  if (!world_barrier(w)) return RECAP_FAIL(RECAP_STATUS_TIMEOUT, "a peer rank did not arrive");
  bool gather = c->kind == RECAP__COLL_ALL_GATHER;
  size_t n = c->count * (gather ? (size_t)w->world : 1);
  float *result = malloc(sizeof(float) * n);
  if (!result) {
    world_fail(w);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the result");
  }
  bool same = true;
  for (int r = 0; r < w->world; r++) same &= w->calls[r]->count == c->count;
  for (size_t i = 0; same && i < c->count; i++) {
    float sum = 0;
    for (int r = 0; r < w->world; r++) {
      float v = ((const float *)w->calls[r]->send)[i];
      if (gather)
        result[(size_t)r * c->count + i] = v;
      else
        sum = r ? sum + v : v;
    }
    if (!gather) result[i] = sum;
  }
  bool read = world_barrier(w);
  if (same && read) memcpy(c->recv, result, sizeof(float) * n);
  free(result);
  if (!same) return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the ranks' sizes differ");
  return read ? RECAP_OK : RECAP_FAIL(RECAP_STATUS_TIMEOUT, "a peer rank did not arrive");
}

/* ---- one rank's run ---- */

typedef struct {
  host_world *world;
  int rank;
  char spec[512];
  const reference *ref;
  bool paged;    /* the serving layout (--paged): one sequence, greedy tokens in the graph */
  float *logits; /* count x vocab: row t is position t's (paged: from the prompt's last) */
  int32_t tokens[MAX_TOKENS]; /* paged: the graph's greedy token after position t */
  recap_status status;
  char error[1024];
} rank_job;

static recap_status step(recap_pipeline *p, const int *ids, int first, int count, int vocab,
                         float *logits) {
  int32_t positions[MAX_TOKENS], first_row = first, len = first + count;
  for (int i = 0; i < count; i++) positions[i] = first + i;
  RECAP_TRY(recap_pipeline_copy_in(p, "ids", ids, sizeof(int32_t) * (size_t)count, 0));
  RECAP_TRY(recap_pipeline_copy_in(p, "positions", positions, sizeof(int32_t) * (size_t)count, 0));
  RECAP_TRY(recap_pipeline_copy_in(p, "pos", &first_row, sizeof first_row, 0));
  RECAP_TRY(recap_pipeline_copy_in(p, "len", &len, sizeof len, 0));
  RECAP_TRY(recap_pipeline_run(p, 0));
  return recap_pipeline_copy_out(p, "logits", logits, sizeof(float) * (size_t)count * (size_t)vocab,
                                 0);
}

/* Eager: a graph warmup holds a process-wide lock (engine/graph_mode.c) and runs the ops, so
 * two ranks' warmups in one process would wait for each other at the first collective. */
static recap_pipeline_options eager_opts(void) {
  recap_pipeline_options o = opts_on(test_device);
  o.override_mode = 1;
  o.mode = RECAP_MODE_EAGER;
  return o;
}

/* The prompt through prefill, the rest teacher-forced through decode. */
static recap_status run_rank_steps(rank_job *j, recap_pipeline **prefill, recap_pipeline **decode) {
  const reference *ref = j->ref;
  char prompt_dim[32];
  snprintf(prompt_dim, sizeof prompt_dim, "S=%d", ref->prompt_length);
  const char *dims[] = {prompt_dim, NULL};
  recap_pipeline_options po = eager_opts();
  po.entry = "prefill";
  po.dims = dims;
  RECAP_TRY(recap_pipeline_create_file(j->spec, &po, prefill));
  recap_pipeline_options dopt = eager_opts();
  dopt.entry = "decode";
  dopt.share = *prefill;
  RECAP_TRY(recap_pipeline_create_file(j->spec, &dopt, decode));
  RECAP_TRY(step(*prefill, ref->tokens, 0, ref->prompt_length, ref->vocab, j->logits));
  for (int t = ref->prompt_length; t < ref->count; t++)
    RECAP_TRY(step(*decode, &ref->tokens[t], t, 1, ref->vocab,
                   &j->logits[(size_t)t * (size_t)ref->vocab]));
  return RECAP_OK;
}

/* The serving layout: one sequence in blocks 0, 1, ... of the pool; the prompt in one prefill
 * step (its last position's logits), then one decode step per token (teacher-forced). */
enum { PAGED_BLOCK = 4, PAGED_MAX_SEQ = 32, PAGED_WIDTH = RECAP_SEQ_BLOCKS + PAGED_MAX_SEQ / 4 };
static const int64_t PAGED_DECODE[] = {1, 2}, PAGED_PREFILL[] = {16, 32};

/* ids is bucketed in both entries (T); seqs, logits and tokens only in decode's (Bs = T). */
static recap_status paged_step(recap_pipeline *p, const int *ids, int first, int count,
                               rank_job *j) {
  int64_t rows = first > 0 ? 1 : 0;
  int32_t row[PAGED_WIDTH] = {0};
  row[RECAP_SEQ_LEN] = first + count;
  row[RECAP_SEQ_Q_LEN] = count; /* from the step's first token; greedy (temperature 0) */
  for (int b = 0; b < PAGED_MAX_SEQ / PAGED_BLOCK; b++) row[RECAP_SEQ_BLOCKS + b] = b;
  int last = first + count - 1;
  RECAP_TRY(recap_pipeline_copy_in(p, "ids", ids, sizeof(int32_t) * (size_t)count, count));
  RECAP_TRY(recap_pipeline_copy_in(p, "seqs", row, sizeof row, rows));
  RECAP_TRY(recap_pipeline_run(p, count));
  RECAP_TRY(recap_pipeline_copy_out(p, "logits", &j->logits[(size_t)last * (size_t)j->ref->vocab],
                                    sizeof(float) * (size_t)j->ref->vocab, rows));
  return recap_pipeline_copy_out(p, "tokens", &j->tokens[last], sizeof(int32_t), rows);
}

static recap_status run_paged_steps(rank_job *j, recap_pipeline **prefill,
                                    recap_pipeline **decode) {
  const reference *ref = j->ref;
  recap_pipeline_options po = eager_opts();
  po.entry = "prefill";
  RECAP_TRY(recap_pipeline_create_file(j->spec, &po, prefill));
  recap_pipeline_options dopt = eager_opts();
  dopt.entry = "decode";
  dopt.share = *prefill;
  RECAP_TRY(recap_pipeline_create_file(j->spec, &dopt, decode));
  RECAP_TRY(paged_step(*prefill, ref->tokens, 0, ref->prompt_length, j));
  for (int t = ref->prompt_length; t < ref->count; t++)
    RECAP_TRY(paged_step(*decode, &ref->tokens[t], t, 1, j));
  return RECAP_OK;
}

static void *run_rank(void *arg) {
  rank_job *j = arg;
  t_rank = j->rank;
  recap_pipeline *prefill = NULL, *decode = NULL;
  j->status =
      j->paged ? run_paged_steps(j, &prefill, &decode) : run_rank_steps(j, &prefill, &decode);
  if (j->status != RECAP_OK) {
    snprintf(j->error, sizeof j->error, "%s", recap_last_error());
    if (j->world) world_fail(j->world);
  }
  recap_pipeline_destroy(decode);
  recap_pipeline_destroy(prefill);
  return NULL;
}

/* ---- importing and running a world ---- */

/* Imports model_dir as `world` specs g_dir/<label>.tp<world>.rank<r>.yaml (world 1:
 * <label>.yaml), in the serving layout when `paged`, with the residual folded into rank 0's
 * partial sums when `fold` (import-hf --tp-fold-residual). */
static void import_world(const char *model_dir, const char *label, int world, bool paged,
                         bool fold) {
  for (int r = 0; r < world; r++) {
    char spec[512];
    if (world == 1)
      snprintf(spec, sizeof spec, "%s/%s.yaml", g_dir, label);
    else
      snprintf(spec, sizeof spec, "%s/%s.tp%d.rank%d.yaml", g_dir, label, world, r);
    cli_hf_import_options o = {.tp = world, .tp_rank = r};
    if (paged) {
      o = PAGED_IMPORT_OPTIONS(PAGED_MAX_SEQ, PAGED_BLOCK, PAGED_MAX_SEQ / PAGED_BLOCK, 1,
                               PAGED_DECODE, PAGED_PREFILL);
      o.tp = world;
      o.tp_rank = r;
    }
    o.tp_fold_residual = fold && world > 1;
    import_model_with(o, model_dir, spec);
  }
}

/* Runs the specs of a world (import_world's names) over ref's tokens; rank 0's logits (the
 * caller frees them), after checking that every rank's are the same. */
static float *run_world(const char *label, int world, const reference *ref, bool paged,
                        int32_t *tokens) {
  host_world w = {.world = world};
  pthread_mutex_init(&w.mutex, NULL);
  pthread_cond_init(&w.cond, NULL);
  rank_job jobs[MAX_WORLD];
  size_t bytes = sizeof(float) * (size_t)ref->count * (size_t)ref->vocab;
  for (int r = 0; r < world; r++) {
    jobs[r] = (rank_job){.world = world > 1 ? &w : NULL, .rank = r, .ref = ref, .paged = paged};
    if (world == 1)
      snprintf(jobs[r].spec, sizeof jobs[r].spec, "%s/%s.yaml", g_dir, label);
    else
      snprintf(jobs[r].spec, sizeof jobs[r].spec, "%s/%s.tp%d.rank%d.yaml", g_dir, label, world, r);
    jobs[r].logits = calloc(1, bytes);
    CU_ASSERT_PTR_NOT_NULL_FATAL(jobs[r].logits);
  }
  if (world > 1) {
    recap__collective_set_host_handler(world_collective, &w);
    pthread_t threads[MAX_WORLD];
    for (int r = 0; r < world; r++)
      CU_ASSERT_EQUAL_FATAL(pthread_create(&threads[r], NULL, run_rank, &jobs[r]), 0);
    for (int r = 0; r < world; r++) pthread_join(threads[r], NULL);
    recap__collective_set_host_handler(NULL, NULL);
  } else {
    run_rank(&jobs[0]);
  }
  for (int r = 0; r < world; r++) {
    if (jobs[r].status != RECAP_OK) printf("\n  %s rank %d: %s", label, r, jobs[r].error);
    CU_ASSERT_EQUAL(jobs[r].status, RECAP_OK);
    if (r > 0) CU_ASSERT_EQUAL(memcmp(jobs[r].logits, jobs[0].logits, bytes), 0);
    if (r > 0) CU_ASSERT_EQUAL(memcmp(jobs[r].tokens, jobs[0].tokens, sizeof jobs[0].tokens), 0);
    if (r > 0) free(jobs[r].logits);
  }
  if (tokens) memcpy(tokens, jobs[0].tokens, sizeof jobs[0].tokens);
  pthread_cond_destroy(&w.cond);
  pthread_mutex_destroy(&w.mutex);
  return jobs[0].logits;
}

static int argmax(const float *row, int vocab) {
  int best = 0;
  for (int v = 1; v < vocab; v++)
    if (row[v] > row[best]) best = v;
  return best;
}

static double max_difference(const float *a, const double *b_double, const float *b_float,
                             size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - (b_double ? b_double[i] : (double)b_float[i]));
    if (!(e <= worst)) worst = e; /* NaN counts as the worst */
  }
  return worst;
}

/* TP `world`'s logits against TP 1's and, when `against_reference`, transformers'. Argmax must
 * equal TP 1's where the margin is clear: the reference's, or TP 1's own when there is no
 * reference (a modified checkpoint). */
static void compare(const char *label, int world, const float *tp, const float *one,
                    const reference *ref, bool against_reference, int first) {
  int vocab = ref->vocab;
  size_t skip = (size_t)first * (size_t)vocab, n = (size_t)ref->count * (size_t)vocab - skip;
  double tolerance = 2 * ref->f32_error + 1e-6 * ref->max_abs_logit;
  double to_one = max_difference(tp + skip, NULL, one + skip, n);
  double to_ref = against_reference ? max_difference(tp + skip, ref->logits + skip, NULL, n) : 0;
  int clear = 0, wrong = 0;
  for (int t = first; t < ref->count; t++) {
    const float *row = &one[(size_t)t * (size_t)vocab];
    double margin = ref->margin[t];
    if (!against_reference) {
      int best = argmax(row, vocab);
      double second = -INFINITY;
      for (int v = 0; v < vocab; v++)
        if (v != best && row[v] > second) second = row[v];
      margin = row[best] - second;
    }
    if (margin <= 1e-3 * ref->max_abs_logit) continue;
    clear++;
    if (argmax(&tp[(size_t)t * (size_t)vocab], vocab) != argmax(row, vocab)) wrong++;
  }
  printf("\n  %-14s TP %d: max |TP %d - TP 1| %.3g, ", label, world, world, to_one);
  if (against_reference) printf("max |TP %d - transformers| %.3g, ", world, to_ref);
  printf("tolerance %.3g; argmax as TP 1 at %d/%d clear positions", tolerance, clear - wrong,
         clear);
  CU_ASSERT(to_one <= tolerance);
  CU_ASSERT(to_ref <= tolerance);
  CU_ASSERT_EQUAL(wrong, 0);
}

/* ---- the fixtures ---- */

/* Imports fixture folder model_dir at TP 1 and at each world of `worlds` (0-terminated) and
 * compares them; in the serving layout also the graph's greedy tokens, which must be TP 1's
 * wherever the margin is clear (compare's argmax check covers the logits they come from).
 * fold: the TP specs fold the residual into rank 0's partial sums. */
static void check_model(const char *label, const char *model_dir, const reference *ref,
                        const int *worlds, bool against_reference, bool paged, bool fold) {
  char name[128];
  snprintf(name, sizeof name, "%s%s%s", label, paged ? "_paged" : "", fold ? "_fold" : "");
  int first = paged ? ref->prompt_length - 1 : 0;
  int32_t one_tokens[MAX_TOKENS], tp_tokens[MAX_TOKENS];
  import_world(model_dir, name, 1, paged, false);
  float *one = run_world(name, 1, ref, paged, one_tokens);
  if (against_reference) compare(name, 1, one, one, ref, true, first); /* TP 1 meets the rule */
  for (const int *w = worlds; *w; w++) {
    import_world(model_dir, name, *w, paged, fold);
    float *tp = run_world(name, *w, ref, paged, tp_tokens);
    compare(name, *w, tp, one, ref, against_reference, first);
    for (int t = first; paged && t < ref->count; t++) {
      CU_ASSERT_EQUAL(one_tokens[t], argmax(&one[(size_t)t * (size_t)ref->vocab], ref->vocab));
      if (!against_reference || ref->margin[t] > 1e-3 * ref->max_abs_logit)
        CU_ASSERT_EQUAL(tp_tokens[t], one_tokens[t]);
    }
    free(tp);
  }
  free(one);
}

/* A fixture and the worlds (0-terminated) its ranks' specs are checked at. */
typedef struct {
  const char *model;
  int worlds[3];
} tp_case;

/* Each case's model, both layouts, against TP 1 and transformers; `fold`: imported with the
 * residual folded into rank 0's partial sums (else unfolded, as --no-tp-fold-residual). */
static void check_cases(const tp_case *cases, size_t count, bool fold) {
  make_dir();
  for (size_t i = 0; i < count; i++) {
    char dir[512];
    fixture_copy(cases[i].model, "config.json", cases[i].model, dir, sizeof dir);
    reference ref;
    load_reference(cases[i].model, &ref);
    check_model(cases[i].model, dir, &ref, cases[i].worlds, true, false, fold);
    check_model(cases[i].model, dir, &ref, cases[i].worlds, true, true, fold);
    free(ref.logits);
  }
  printf("\n");
  remove_dir();
}

static void test_fixtures_split_over_ranks_match_one_rank(void) {
  static const tp_case cases[] = {{"gpt2", {2, 4, 0}}, {"llama", {2, 0}}, {"llama_tied", {2, 0}},
                                  {"mistral", {2, 0}}, {"qwen2", {2, 0}}, {"qwen3", {2, 0}}};
  check_cases(cases, sizeof cases / sizeof cases[0], false);
}

/* import-hf --tp-fold-residual: rank 0 adds the residual stream into its partial sums, so the
 * all_reduce's sum is the layer's output and no add follows it. The same rule against TP 1 and
 * transformers, with and without biases (GPT-2's o and down biases are still added once, after
 * the all_reduce), at TP 2 and 4, both layouts. */
static void test_residual_folded_into_rank_0_matches_one_rank(void) {
  static const tp_case cases[] = {{"gpt2", {2, 4, 0}}, {"llama", {2, 0}}, {"qwen2", {2, 0}}};
  check_cases(cases, sizeof cases / sizeof cases[0], true);
}

/* GPT-2's token embedding (and so its tied LM head) cut to its first CUT_VOCAB rows: the
 * header's shape and byte range change, the data stays (the rows past the new end are never
 * read); and config.json's vocabulary with it. */
enum { CUT_VOCAB = 255 };

static void cut_embedding(json_t *header) {
  json_t *wte = json_object_get(header, "transformer.wte.weight");
  CU_ASSERT_PTR_NOT_NULL_FATAL(wte);
  json_t *shape = json_object_get(wte, "shape"), *offsets = json_object_get(wte, "data_offsets");
  json_int_t width = json_integer_value(json_array_get(shape, 1));
  json_int_t begin = json_integer_value(json_array_get(offsets, 0));
  json_array_set_new(shape, 0, json_integer(CUT_VOCAB));
  json_array_set_new(offsets, 1, json_integer(begin + (json_int_t)CUT_VOCAB * width * 4));
}

static void cut_vocab_size(json_t *config) {
  json_object_set_new(config, "vocab_size", json_integer(CUT_VOCAB));
}

static void test_padded_vocabulary_never_shows(void) {
  make_dir();
  char dir[512];
  fixture_copy("gpt2", "config.json", "gpt2_v255", dir, sizeof dir);
  fixture_edit_header(dir, cut_embedding);
  fixture_edit_config(dir, cut_vocab_size);
  reference ref;
  load_reference("gpt2", &ref); /* its tokens (all below 255) and its tolerance */
  ref.vocab = CUT_VOCAB;
  static const int worlds[] = {2, 4, 0};
  check_model("gpt2_v255", dir, &ref, worlds, false, false, false);
  check_model("gpt2_v255", dir, &ref, worlds, false, true, false);
  /* The padding is the last rank's only: its LM head reads the rows left, the gather drops it. */
  char spec[512];
  snprintf(spec, sizeof spec, "%s/gpt2_v255.tp4.rank3.yaml", g_dir);
  char *text = NULL;
  FILE *f = fopen(spec, "r");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  text = calloc(1, 1 << 20);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  CU_ASSERT(fread(text, 1, (1 << 20) - 1, f) > 0);
  fclose(f);
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "rows: [192, 255]"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "sizes: [V, 1]"));
  free(text);
  free(ref.logits);
  printf("\n");
  remove_dir();
}

/* ---- the split rules ---- */

static void expect_split_refusal(const char *dir, int world, int rank, const char *needle) {
  cli_hf_import_options o = {.model_dir = dir, .tp = world, .tp_rank = rank};
  cli_hf_import_result r;
  CU_ASSERT_FALSE_FATAL(cli_hf_import(&o, &r));
  if (!strstr(r.error, needle)) printf("\n  expected '%s' in: %s", needle, r.error);
  CU_ASSERT_PTR_NOT_NULL(strstr(r.error, needle));
}

static void set_config(const char *dir, const char *key, json_int_t value) {
  char path[600];
  snprintf(path, sizeof path, "%s/config.json", dir);
  json_t *config = json_load_file(path, 0, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(config);
  json_object_set_new(config, key, json_integer(value));
  CU_ASSERT_EQUAL(json_dump_file(config, path, JSON_INDENT(2)), 0);
  json_decref(config);
}

static void test_split_rules_name_their_cause(void) {
  make_dir();
  char dir[512];
  fixture_copy("llama", "config.json", "llama", dir, sizeof dir);
  expect_split_refusal(dir, 3, 0, "num_attention_heads 4 is not divisible by 3");
  /* 2 KV heads over 4 ranks: refused, not replicated. */
  expect_split_refusal(dir, 4, 1, "num_key_value_heads 2 is not divisible by 4");
  expect_split_refusal(dir, 2, 2, "--tp 2 with rank 2");
  set_config(dir, "intermediate_size", 127);
  expect_split_refusal(dir, 2, 0, "intermediate_size 127 is not divisible by 2");
  set_config(dir, "intermediate_size", 128);
  set_config(dir, "vocab_size", 1);
  expect_split_refusal(dir, 2, 0, "vocab_size 1 is too small");
  fixture_copy("gpt2", "config.json", "gpt2", dir, sizeof dir);
  expect_split_refusal(dir, 8, 0, "n_head 4 is not divisible by 8");
  printf("\n");
  remove_dir();
}

int main(void) {
  /* The stand-in world is the host backend's: no CUDA suite (scripts/gpu/gpu_tp.sh runs TP on
   * two GPUs). */
  CU_pSuite host = test_add_suite("pipeline_tp/host", test_suite_use_host, NULL);
  CU_ADD_TEST(host, test_fixtures_split_over_ranks_match_one_rank);
  CU_ADD_TEST(host, test_residual_folded_into_rank_0_matches_one_rank);
  CU_ADD_TEST(host, test_padded_vocabulary_never_shows);
  CU_ADD_TEST(host, test_split_rules_name_their_cause);
  return test_run_all();
}
