/*
 * choose.c: what runs each CUDA GEMM problem, and the CUDA entry points of matmul and linear
 * (CUDA builds only; gemm.h describes the ops and the plan). A problem (cublaslt.c's
 * recap__lt_problem, keyed by recap__lt_key) gets a default choice the first time it is seen
 * (the skinny kernel, our Hopper kernel or cuBLASLt's first heuristic), which the tuning file
 * or timing may replace; the choice is kept in a process-wide table and in each thread's small
 * table of its last problems (cublaslt.h), and cublaslt.c runs it.
 *
 * Tuning (RECAP_TUNE=1, like PyTorch's TunableOp; kernels/gemm/tune.h, docs/perf/tuning.md):
 * the first eager launch of a problem outside capture looks the problem up in the tuning file
 * and, without an entry, times every candidate: cuBLASLt's heuristic list (up to 16), the
 * variants of its first 8 results (CTA swizzle, custom option, cluster shape:
 * recap__lt_variants) and the skinny and Hopper kernels' configurations where they apply. Each
 * runs into scratch memory (allocated outside any pool, freed after), is checked against a
 * reference output (the default's, or cuBLASLt's first heuristic when the default is one of
 * our kernels), and is timed as it runs in a replay: a few launches captured into a graph, each
 * after a flush of the L2, the graph replayed TUNE_REPS times between CUDA events on the op's
 * stream, the flushes' own time taken off (time_in_graph); the
 * fastest that agrees wins, is saved to the file, and the op then runs for real. A capture
 * only looks up: it uses whatever choice exists (the default when untuned) and never times.
 *
 * Skinny GEMMs (the decode case: m <= 16, f16/bf16, x rows and W [N, K] rows with unit
 * stride along K and 16-byte aligned, K % 8 == 0, no batch, no c) run our own kernel
 * (skinny.cu) with bias, every activation and a linear's residual fused (one launch), when
 * cuBLASLt is the chosen library and the shape is one where the kernel was measured faster
 * (recap__cuda_gemm_skinny_preferred: not the lm_heads, not m 9-16 on wide or shallow weights,
 * not a nearly empty last wave, not wide weights or plain linears with nothing fused where
 * cuBLASLt streamed faster, not an epilogue alone beyond one wave at m > 2):
 * cuBLASLt streams the weights at 70-75% of copy bandwidth there. Selecting plain cuBLAS
 * uses cuBLAS for every shape, and RECAP_GEMM_SKINNY=0 in the environment (read once per
 * process, gemm.h) sends skinny shapes to cuBLASLt too.
 *
 * Hopper GEMMs with an activation cuBLASLt cannot fuse (erf gelu, silu, sigmoid, tanh) run our
 * own wgmma kernel (hopper.cu) by default, on devices of compute capability 9.0, when the
 * shape fits it (f16/bf16, both operands K-major, no batch, no C) and its grid is one where
 * it was measured faster than cuBLASLt plus the pass (recap__cuda_gemm_hopper_preferred): the
 * activation and the residual are in its epilogue, so there is no second pass over the
 * output. Elsewhere cuBLASLt runs the GEMM (with the bias) and epilogue.cu the rest. Tuning times
 * its tile configurations against cuBLASLt's for every shape it fits. RECAP_GEMM_HOPPER=0 sends
 * everything to cuBLASLt.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_ops.h"
#include "kernels/gemm/cublaslt.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/tune.h"
#include "kernels/infer.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/cuda_check.h"

enum {
  CACHE_BUCKETS = 256,
  MAX_HEURISTICS = 16, /* cuBLASLt candidates asked for when tuning */
  /* the default, the heuristic list, its variants (2 CTA swizzles each: cublaslt.h), the
   * skinny kernel's 10 and the Hopper kernel's configs */
  MAX_CANDIDATES =
      MAX_HEURISTICS +
      RECAP__LT_VARIANT_BASES * 2 * RECAP__LT_VARIANT_CUSTOM * RECAP__LT_VARIANT_CLUSTERS + 11 +
      RECAP_TUNE_HOPPER_CONFIGS,
  TUNE_WARMUPS = 3,
  TUNE_REPS = 15,          /* replays of a candidate's graph, timed */
  TUNE_GRAPH_LAUNCHES = 4, /* launches of the candidate in that graph */
};

/* The workspace a bias epilogue's default is chosen within when the unrestricted choice splits
 * K (make_default): PyTorch's cuBLASLt workspace for F.linear with a bias. */
#define BIAS_SPLIT_WORKSPACE_BYTES ((uint64_t)1 << 20)

/* How far a choice has come (see resolve()). */
typedef enum {
  CHOICE_DEFAULT,   /* the default; the tuning file not consulted yet */
  CHOICE_CONSULTED, /* the default; the file had nothing usable; timing waits for a run */
  CHOICE_FINAL,     /* from the file, timed, or left on the default for good */
} choice_state;

/* Bumped when choices are forgotten or changed: every thread's remembered copies older than
 * the counter are misses. Starts at 1 so that a zeroed slot never matches. */
static atomic_uint_fast64_t choice_generation = 1;

/* Whether a bound plan may run the skinny kernel (see the top of this file). */
static bool skinny_allowed(const recap__gemm_plan *p) {
  return recap__gemm_env_get()->skinny && recap__cuda_gemm_skinny_fits(p);
}

/* ---- the process-wide table of choices ------------------------------------------------------ */

typedef struct lt_entry {
  recap__lt_key key;
  recap__gemm_choice value;
  struct lt_entry *next;
} lt_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static lt_entry *cache[CACHE_BUCKETS];

static size_t key_hash(const recap__lt_key *key) {
  const unsigned char *bytes = (const unsigned char *)key;
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < sizeof *key; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return (size_t)(h % CACHE_BUCKETS);
}

static lt_entry *cache_find_locked(const recap__lt_key *key) {
  lt_entry *e = cache[key_hash(key)];
  while (e && memcmp(&e->key, key, sizeof *key) != 0) e = e->next;
  return e;
}

static bool cache_find(const recap__lt_key *key, recap__gemm_choice *out) {
  pthread_mutex_lock(&cache_lock);
  const lt_entry *e = cache_find_locked(key);
  if (e) *out = e->value;
  pthread_mutex_unlock(&cache_lock);
  return e != NULL;
}

/* Stores the choice. Replacing one another thread may remember bumps the generation. */
static recap_status cache_store(const recap__lt_key *key, const recap__gemm_choice *value) {
  lt_entry *fresh = malloc(sizeof *fresh);
  if (!fresh)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "gemm: no memory for the algorithm cache");
  pthread_mutex_lock(&cache_lock);
  lt_entry *e = cache_find_locked(key);
  if (e) {
    e->value = *value;
    atomic_fetch_add(&choice_generation, 1);
  } else {
    fresh->key = *key;
    fresh->value = *value;
    const size_t b = key_hash(key);
    fresh->next = cache[b];
    cache[b] = fresh;
    fresh = NULL;
  }
  pthread_mutex_unlock(&cache_lock);
  free(fresh);
  return RECAP_OK;
}

static const recap__gemm_choice *thread_choice_find(recap__gemm_thread *t,
                                                    const recap__lt_key *key) {
  const uint64_t gen = atomic_load_explicit(&choice_generation, memory_order_acquire);
  for (int i = 0; i < RECAP__GEMM_THREAD_CHOICES; ++i)
    if (t->choices[i].generation == gen && memcmp(&t->choices[i].key, key, sizeof *key) == 0)
      return &t->choices[i].value;
  return NULL;
}

static void thread_choice_store(recap__gemm_thread *t, const recap__lt_key *key,
                                const recap__gemm_choice *value, uint64_t gen) {
  for (int i = 0; i < RECAP__GEMM_THREAD_CHOICES; ++i)
    if (memcmp(&t->choices[i].key, key, sizeof *key) == 0) {
      t->choices[i] = (recap__gemm_choice_slot){*key, *value, gen};
      return;
    }
  t->choices[t->next_choice++ % RECAP__GEMM_THREAD_CHOICES] =
      (recap__gemm_choice_slot){*key, *value, gen};
}

/* ---- tuning ---------------------------------------------------------------------------------- */

/* The tuning file's table, loaded on first need (under tune_lock) for the versions of the
 * device that first needed it; devices that differ tune in memory only. */
static pthread_mutex_t tune_lock = PTHREAD_MUTEX_INITIALIZER;
static recap__tune_table *file_table;
static recap__tune_versions file_versions;
static bool file_loaded;

typedef struct {
  bool known;
  recap__tune_versions v;
} device_versions_slot;
static device_versions_slot device_versions[RECAP__GEMM_MAX_DEVICES];

static recap_status versions_of(int device, recap__tune_versions *out) {
  pthread_mutex_lock(&tune_lock);
  device_versions_slot *slot = &device_versions[device];
  recap_status st = RECAP_OK;
  if (!slot->known) {
    struct cudaDeviceProp prop;
    recap__tune_versions v = {.cublaslt = (int)recap__blas.cublasLtGetVersion()};
    snprintf(v.recap, sizeof v.recap, "%s", RECAP_VERSION_STRING);
    RECAP_CUDA_TRY_GOTO(st, cudaRuntimeGetVersion(&v.cudart), done);
    RECAP_CUDA_TRY_GOTO(st, cudaGetDeviceProperties(&prop, device), done);
    /* The name is NUL-terminated within its 256 bytes; keep what fits. */
    size_t len = strnlen(prop.name, sizeof prop.name);
    if (len >= sizeof v.device) len = sizeof v.device - 1;
    memcpy(v.device, prop.name, len);
    v.device[len] = '\0';
    v.sms = prop.multiProcessorCount;
    v.cc = prop.major * 10 + prop.minor;
    slot->v = v;
    slot->known = true;
  }
  *out = slot->v;
done:
  pthread_mutex_unlock(&tune_lock);
  return st;
}

static bool same_versions(const recap__tune_versions *a, const recap__tune_versions *b) {
  return a->cublaslt == b->cublaslt && a->cudart == b->cudart && a->sms == b->sms &&
         a->cc == b->cc && strcmp(a->device, b->device) == 0 && strcmp(a->recap, b->recap) == 0;
}

/* The file's entry for `key`, when the file applies to this device's versions. */
static bool file_lookup(const recap__tune_versions *v, const recap__tune_key *key,
                        recap__tune_entry *out) {
  const recap__gemm_env *env = recap__gemm_env_get();
  bool found = false;
  pthread_mutex_lock(&tune_lock);
  if (!file_loaded) {
    recap__tune_load_report report;
    if (!file_table && recap__tune_table_create(&file_table) != RECAP_OK) goto done;
    if (recap__tune_load(file_table, env->tune_file, v, false, &report) != RECAP_OK) goto done;
    recap__gemm_tune_count(RECAP_TUNE_STAT_FILE_WARNINGS, report.warnings);
    file_versions = *v;
    file_loaded = true;
  }
  if (same_versions(&file_versions, v)) {
    const recap__tune_entry *e = recap__tune_table_find(file_table, key);
    if (e) *out = *e;
    found = e != NULL;
  }
done:
  pthread_mutex_unlock(&tune_lock);
  return found;
}

/* Records a tuned entry and rewrites the file (mode 1 only). A failed write is a warning: the
 * choice still holds in memory. */
static void file_record(const recap__tune_versions *v, const recap__tune_entry *entry) {
  pthread_mutex_lock(&tune_lock);
  if (file_loaded && file_table && same_versions(&file_versions, v) &&
      recap__tune_table_put(file_table, entry) == RECAP_OK) {
    const char *path = recap__gemm_env_get()->tune_file;
    if (recap__tune_save(file_table, path, &file_versions) != RECAP_OK)
      fprintf(stderr, "recap: warning: could not write the GEMM tuning cache: %s\n",
              recap_last_error());
  }
  pthread_mutex_unlock(&tune_lock);
}

static recap__tune_key tune_key_of(const recap__gemm_plan *p, const recap__lt_problem *pr) {
  int64_t align = pr->key.align_a;
  const int64_t others[4] = {pr->key.align_b, pr->key.align_c, pr->key.align_d,
                             pr->key.align_bias ? pr->key.align_bias : 256};
  for (int i = 0; i < 4; ++i)
    if (others[i] < align) align = others[i];
  if (align > 16) align = 16;
  return (recap__tune_key){.m = p->m,
                           .n = p->n,
                           .k = p->k,
                           .batch = p->batch[0] * p->batch[1],
                           .op = (int32_t)pr->key.op,
                           .a_type = p->dtype,
                           .b_type = p->dtype,
                           .c_type = p->dtype,
                           .compute = pr->key.compute == CUBLAS_COMPUTE_32F_FAST_TF32
                                          ? RECAP_TUNE_COMPUTE_TF32
                                          : RECAP_TUNE_COMPUTE_F32,
                           .trans_a = pr->key.op_a == CUBLAS_OP_T,
                           .trans_b = pr->key.op_b == CUBLAS_OP_T,
                           .bias = p->bias != NULL,
                           .act = p->act,
                           .has_c = pr->c != NULL,
                           .align = (int32_t)align};
}

/* Tolerances of the check against the default's output: relative to each element, plus a
 * fraction of the largest |output| (cancellation makes small outputs differ by more than
 * their own size between summation orders). Loose enough for two roundings of the storage
 * type, tight enough that a wrong product, bias or epilogue fails. */
static void tune_tolerance(const recap__gemm_plan *p, bool tf32, float *rtol, float *atol_frac) {
  switch (p->dtype) {
    case RECAP_DTYPE_BF16:
      *rtol = 1.6e-2f, *atol_frac = 8e-3f;
      break;
    case RECAP_DTYPE_F16:
      *rtol = 4e-3f, *atol_frac = 2e-3f;
      break;
    default:
      *rtol = *atol_frac = tf32 ? 5e-3f : 1e-3f;
      break;
  }
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Adds a candidate unless an equal one is listed. */
static void add_candidate(recap__gemm_choice *list, int32_t (*configs)[RECAP_TUNE_CONFIG_MAX],
                          int *count, const recap__gemm_choice *c, const int32_t *config) {
  for (int i = 0; i < *count; ++i) {
    if (list[i].kind != c->kind) continue;
    if (c->kind == RECAP_TUNE_CAND_SKINNY && list[i].warps == c->warps && list[i].pipe == c->pipe)
      return;
    if (c->kind == RECAP_TUNE_CAND_HOPPER && list[i].config == c->config) return;
    if (c->kind == RECAP_TUNE_CAND_LT && memcmp(configs[i], config, sizeof configs[i]) == 0) return;
  }
  if (*count >= MAX_CANDIDATES) return;
  list[*count] = *c;
  if (config)
    memcpy(configs[*count], config, sizeof configs[*count]);
  else
    memset(configs[*count], 0, sizeof configs[*count]);
  ++*count;
}

typedef struct {
  recap__gemm_choice *list;
  int32_t (*configs)[RECAP_TUNE_CONFIG_MAX];
  int count;
} candidate_list;

static bool add_variant(void *arg, const cublasLtMatmulAlgo_t *algo, const int32_t *config) {
  candidate_list *l = arg;
  const recap__gemm_choice c = {.kind = RECAP_TUNE_CAND_LT, .algo = *algo};
  add_candidate(l->list, l->configs, &l->count, &c, config);
  return false;
}

static void choice_to_tune(const recap__gemm_choice *c, const int32_t *config,
                           recap__tune_choice *out) {
  memset(out, 0, sizeof *out);
  out->kind = c->kind;
  if (c->kind == RECAP_TUNE_CAND_SKINNY) {
    out->config[0] = c->warps;
    out->config[1] = c->pipe;
  } else if (c->kind == RECAP_TUNE_CAND_HOPPER) {
    out->config[0] = c->config;
  } else {
    memcpy(out->config, config, sizeof out->config);
  }
}

/* Lists the candidates of a problem: the default first, cuBLASLt's heuristic list, the
 * variants of its first results, and the skinny and Hopper kernels' configurations where they
 * apply. */
static recap_status tune_candidates(recap__gemm_ctx *ctx, const recap__gemm_plan *p,
                                    recap__lt_problem *pr, const recap__gemm_choice *def,
                                    candidate_list *l) {
  cublasLtMatmulHeuristicResult_t results[MAX_HEURISTICS];
  int found = 0;
  int32_t config[RECAP_TUNE_CONFIG_MAX];
  if (def->kind == RECAP_TUNE_CAND_LT) RECAP_TRY(recap__lt_algo_config(&def->algo, config));
  add_candidate(l->list, l->configs, &l->count, def,
                def->kind == RECAP_TUNE_CAND_LT ? config : NULL);
  RECAP_TRY(recap__lt_heuristics(ctx, p, pr, MAX_HEURISTICS, RECAP_GEMM_WORKSPACE_BYTES, results,
                                 &found));
  for (int i = 0; i < found; ++i) {
    const recap__gemm_choice c = {.kind = RECAP_TUNE_CAND_LT, .algo = results[i].algo};
    RECAP_TRY(recap__lt_algo_config(&c.algo, config));
    add_candidate(l->list, l->configs, &l->count, &c, config);
  }
  RECAP_TRY(recap__lt_variants(ctx, pr, results, found, add_variant, l));
  if (skinny_allowed(p)) {
    static const int warps[] = {2, 4, 8, 16};
    for (int w = 0; w < 4; ++w)
      for (int pipe = 1; pipe >= 0; --pipe) {
        const recap__gemm_choice c = {
            .kind = RECAP_TUNE_CAND_SKINNY, .warps = warps[w], .pipe = pipe};
        add_candidate(l->list, l->configs, &l->count, &c, NULL);
      }
    /* The bulk-copy shapes (pipe 2: 16 rows x 1024 columns x 2 stages, 3: 32 x 1024 x 2, 4:
     * 16 x 1024 x 4 at m <= 8; Hopper, else they run as pipe 1). */
    for (int pipe = 2; pipe <= 4; ++pipe) {
      if (!recap__cuda_gemm_skinny_pipe_fits(p, pipe)) continue;
      const recap__gemm_choice c = {.kind = RECAP_TUNE_CAND_SKINNY, .warps = 8, .pipe = pipe};
      add_candidate(l->list, l->configs, &l->count, &c, NULL);
    }
  }
  if (pr->key.hopper_fits)
    for (int config = 0; config < recap__cuda_gemm_hopper_configs(); ++config) {
      const recap__gemm_choice c = {.kind = RECAP_TUNE_CAND_HOPPER, .config = config};
      add_candidate(l->list, l->configs, &l->count, &c, NULL);
    }
  return RECAP_OK;
}

/* A candidate's time per launch as it runs in a replay, in ms: TUNE_GRAPH_LAUNCHES launches of
 * it captured into one graph (thread-local capture of the op's stream), each after a memset of
 * `flush` (twice the L2's bytes, so that the weights come from memory as they do in a model's
 * step, where every layer's weight is read once: timed with its weight left in L2 by the
 * previous launch, a candidate that streams poorly from memory won, and whole decode steps
 * came out 0.7-4.9% slower, docs/perf/tuning.md), the graph replayed TUNE_REPS times between
 * `events`, the median divided by the launches. With c NULL, the memsets alone (their time is
 * subtracted from every candidate's). Timed eagerly, launch
 * by launch, cuBLASLt + the separate epilogue pass ranked ahead of the fused Hopper kernel for
 * the transformer block's fc1 while in the block's graph the fused kernel was the faster one
 * (docs/perf/transformer_block.md, section 6). A candidate that cannot be captured or
 * instantiated: RECAP_STATUS_NOT_SUPPORTED (the caller rejects it). */
static recap_status time_in_graph(recap__gemm_ctx *ctx, const recap__gemm_plan *p,
                                  recap__lt_problem *pr, const recap__gemm_choice *c, void *out,
                                  void *flush, size_t flush_bytes, cudaEvent_t *events,
                                  float *median_ms) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  RECAP_CUDA_TRY(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
  recap_status st = RECAP_OK;
  for (int r = 0; r < TUNE_GRAPH_LAUNCHES && st == RECAP_OK; ++r) {
    if (cudaMemsetAsync(flush, r, flush_bytes, ctx->stream) != cudaSuccess)
      st =
          RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "gemm tuning: the L2 flush could not be captured");
    if (st == RECAP_OK && c) st = recap__gemm_run_choice(ctx, p, pr, c, out);
  }
  /* Always ended, so the stream never stays capturing. */
  const cudaError_t ended = cudaStreamEndCapture(ctx->stream, &graph);
  if (st == RECAP_OK && ended != cudaSuccess)
    st = RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                    "gemm tuning: a candidate could not be captured "
                    "(%s)",
                    cudaGetErrorString(ended));
  if (st == RECAP_OK && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
    st = RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                    "gemm tuning: a candidate's graph could not be "
                    "instantiated");
  (void)cudaGetLastError(); /* a refused capture leaves its error for this thread */
  float times[TUNE_REPS];
  if (st == RECAP_OK) {
    /* One untimed replay first (the graph's first launch uploads it). */
    RECAP_CUDA_TRY_GOTO(st, cudaGraphLaunch(exec, ctx->stream), done);
    for (int r = 0; r < TUNE_REPS; ++r) {
      RECAP_CUDA_TRY_GOTO(st, cudaEventRecord(events[r], ctx->stream), done);
      RECAP_CUDA_TRY_GOTO(st, cudaGraphLaunch(exec, ctx->stream), done);
    }
    RECAP_CUDA_TRY_GOTO(st, cudaEventRecord(events[TUNE_REPS], ctx->stream), done);
    RECAP_CUDA_TRY_GOTO(st, cudaEventSynchronize(events[TUNE_REPS]), done);
    for (int r = 0; r < TUNE_REPS; ++r)
      RECAP_CUDA_TRY_GOTO(st, cudaEventElapsedTime(&times[r], events[r], events[r + 1]), done);
    qsort(times, TUNE_REPS, sizeof times[0], cmp_float);
    *median_ms = times[TUNE_REPS / 2] / TUNE_GRAPH_LAUNCHES;
  }
done:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  return st;
}

/* Times every candidate of `l` (the op's stream, scratch outputs) and returns the fastest one
 * that agrees with `def` (the default, l's first) in *best, its config in best_config.
 * Outside capture only; holds the capture registry throughout, so no capture begins while
 * scratch memory comes and goes. */
static recap_status tune_time(recap__gemm_ctx *ctx, const recap__gemm_plan *p,
                              recap__lt_problem *pr, const recap__gemm_choice *def,
                              const candidate_list *l, recap__gemm_choice *best,
                              int32_t best_config[9], float *best_us) {
  const recap__gemm_choice *list = l->list;
  int32_t(*configs)[RECAP_TUNE_CONFIG_MAX] = l->configs;
  const int count = l->count;
  const size_t es = recap_dtype_size(p->dtype);
  const int64_t elems = p->m * p->n * p->batch[0] * p->batch[1];
  const size_t out_bytes = recap__gemm_round_256((size_t)elems * es);
  float rtol, atol_frac;
  tune_tolerance(p, pr->key.compute == CUBLAS_COMPUTE_32F_FAST_TF32, &rtol, &atol_frac);

  if (!recap__unsafe_enter_wait())
    return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                      "gemm: tuning needs scratch memory but this thread is capturing");
  recap_status st = RECAP_OK;
  char *scratch = NULL;
  cudaEvent_t events[TUNE_REPS + 1] = {0};
  int made = 0;
  int l2_bytes = 0;
  RECAP_CUDA_TRY_GOTO(st, cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, ctx->device),
                      done);
  const size_t flush_bytes = recap__gemm_round_256((size_t)(l2_bytes > 0 ? l2_bytes : 0) * 2);
  /* [ref out][candidate out][max bits (4 bytes), mismatches (8 bytes)][L2 flush] */
  RECAP_TRY_GOTO(st,
                 recap__cuda_backend.mem_alloc(ctx->device, 2 * out_bytes + 256 + flush_bytes,
                                               (void **)&scratch),
                 done);
  void *ref = scratch, *got = scratch + out_bytes;
  unsigned *max_bits = (unsigned *)(scratch + 2 * out_bytes);
  unsigned long long *mismatches = (unsigned long long *)(scratch + 2 * out_bytes + 8);
  void *flush = scratch + 2 * out_bytes + 256;
  for (; made <= TUNE_REPS; ++made) RECAP_CUDA_TRY_GOTO(st, cudaEventCreate(&events[made]), done);
  /* The flushes alone, per launch: subtracted from every candidate's time below. */
  float flush_ms = 0.0f;
  RECAP_TRY_GOTO(st, time_in_graph(ctx, p, pr, NULL, NULL, flush, flush_bytes, events, &flush_ms),
                 done);

  /* The reference output: cuBLASLt's first heuristic (the list's first cuBLASLt candidate)
   * when the default is one of our kernels, so that our kernel is checked like every other
   * candidate rather than trusted (a broken one would otherwise reject all the others and win
   * by elimination); else the default itself. */
  int ref_index = 0;
  if (def->kind != RECAP_TUNE_CAND_LT)
    for (int i = 0; i < count; ++i)
      if (list[i].kind == RECAP_TUNE_CAND_LT) {
        ref_index = i;
        break;
      }
  RECAP_CUDA_TRY_GOTO(st, cudaMemsetAsync(max_bits, 0, sizeof *max_bits, ctx->stream), done);
  RECAP_TRY_GOTO(st, recap__gemm_run_choice(ctx, p, pr, &list[ref_index], ref), done);
  RECAP_TRY_GOTO(st, recap__cuda_gemm_tune_maxabs(ref, p->dtype, elems, max_bits, ctx->stream),
                 done);

  float best_time = INFINITY;
  int winner = 0;
  for (int i = 0; i < count; ++i) {
    recap_status run = RECAP_OK;
    for (int w = 0; w < TUNE_WARMUPS && run == RECAP_OK; ++w)
      run = recap__gemm_run_choice(ctx, p, pr, &list[i], got);
    if (run == RECAP_OK && i != ref_index) {
      unsigned long long bad = ~0ull;
      RECAP_CUDA_TRY_GOTO(st, cudaMemsetAsync(mismatches, 0, sizeof *mismatches, ctx->stream),
                          done);
      RECAP_TRY_GOTO(st,
                     recap__cuda_gemm_tune_compare(ref, got, p->dtype, elems, max_bits, rtol,
                                                   atol_frac, mismatches, ctx->stream),
                     done);
      RECAP_CUDA_TRY_GOTO(
          st, cudaMemcpyAsync(&bad, mismatches, sizeof bad, cudaMemcpyDeviceToHost, ctx->stream),
          done);
      RECAP_CUDA_TRY_GOTO(st, cudaStreamSynchronize(ctx->stream), done);
      if (bad != 0) run = RECAP_STATUS_INTERNAL;
    }
    if (run != RECAP_OK) {
      /* A candidate the library refuses or that disagrees is skipped; a fault of the device
       * is not a candidate's problem and ends the tuning. */
      if (run == RECAP_STATUS_DEVICE_ERROR) {
        st = run;
        goto done;
      }
      recap__gemm_tune_count(RECAP_TUNE_STAT_REJECTED, 1);
      continue;
    }
    float median = 0.0f;
    const recap_status timed =
        time_in_graph(ctx, p, pr, &list[i], got, flush, flush_bytes, events, &median);
    if (timed == RECAP_STATUS_NOT_SUPPORTED) {
      recap__gemm_tune_count(RECAP_TUNE_STAT_REJECTED, 1);
      continue;
    }
    RECAP_TRY_GOTO(st, timed, done);
    median = median > flush_ms ? median - flush_ms : 0.0f;
    recap__gemm_tune_count(RECAP_TUNE_STAT_CANDIDATES, 1);
    if (median < best_time) {
      best_time = median;
      winner = i;
    }
  }
  if (!isfinite(best_time)) {
    st = RECAP_FAIL(RECAP_STATUS_INTERNAL,
                    "gemm: tuning timed no candidate (m=%lld n=%lld "
                    "k=%lld)",
                    (long long)p->m, (long long)p->n, (long long)p->k);
    goto done;
  }
  *best = list[winner];
  memcpy(best_config, configs[winner], sizeof configs[winner]);
  *best_us = best_time * 1000.0f;
done:
  for (int i = 0; i < made; ++i) cudaEventDestroy(events[i]);
  if (scratch) {
    /* The free waits for the candidates' last launches. */
    const recap_status freed = recap__cuda_backend.mem_free(ctx->device, scratch);
    if (st == RECAP_OK) st = freed;
  }
  recap__unsafe_exit();
  return st;
}

/* Lists and times the candidates of a problem (see tune_candidates and tune_time). */
static recap_status tune_now(recap__gemm_ctx *ctx, const recap__gemm_plan *p, recap__lt_problem *pr,
                             const recap__gemm_choice *def, recap__gemm_choice *best,
                             int32_t best_config[9], float *best_us) {
  RECAP_NVTX_SCOPE("recap gemm tune");
  /* ~540 candidates of ~120 bytes: on the heap, not on a pipeline thread's stack. */
  candidate_list l = {malloc(MAX_CANDIDATES * sizeof *l.list),
                      malloc(MAX_CANDIDATES * sizeof *l.configs), 0};
  recap_status st = RECAP_OK;
  if (!l.list || !l.configs)
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "gemm: no memory for the tuning candidates");
  if (st == RECAP_OK) st = tune_candidates(ctx, p, pr, def, &l);
  if (st == RECAP_OK) st = tune_time(ctx, p, pr, def, &l, best, best_config, best_us);
  free(l.list);
  free(l.configs);
  return st;
}

/* The default choice of a problem seen for the first time: the skinny kernel where it applies
 * and is expected to win, else the Hopper kernel where cuBLASLt would need a second pass and
 * the kernel is expected to beat it plus that pass, else cuBLASLt's first heuristic (the
 * expectations: recap__cuda_gemm_skinny_preferred, recap__cuda_gemm_hopper_preferred). Inside a
 * capture only our kernels can be chosen (a heuristic query is left to warmups). */
static recap_status make_default(recap__gemm_ctx *ctx, const recap__gemm_plan *p,
                                 recap__lt_problem *pr, recap__gemm_choice *out) {
  *out = (recap__gemm_choice){.kind = RECAP_TUNE_CAND_LT, .state = CHOICE_DEFAULT};
  if (skinny_allowed(p) && recap__cuda_gemm_skinny_preferred(p, ctx->device, pr->needs_kernel)) {
    int warps = 0, pipe = 0;
    RECAP_TRY(recap__cuda_gemm_skinny_default(p, ctx->device, &warps, &pipe));
    *out = (recap__gemm_choice){
        .kind = RECAP_TUNE_CAND_SKINNY, .warps = warps, .pipe = pipe, .state = CHOICE_DEFAULT};
    return RECAP_OK;
  }
  /* Where cuBLASLt would need a second pass for the activation, our kernel fuses it. */
  if (pr->needs_kernel && pr->key.hopper_fits && recap__cuda_gemm_hopper_preferred(p)) {
    *out = (recap__gemm_choice){.kind = RECAP_TUNE_CAND_HOPPER,
                                .config = recap__cuda_gemm_hopper_default(p, ctx->device),
                                .state = CHOICE_DEFAULT};
    return RECAP_OK;
  }
  if (ctx->capturing)
    return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                      "gemm: no cuBLASLt algorithm chosen for this shape (m=%lld n=%lld k=%lld "
                      "batch=%lld %s) before capture; run a warmup first",
                      (long long)p->m, (long long)p->n, (long long)p->k, (long long)p->batch[1],
                      recap_dtype_name(p->dtype));
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  RECAP_TRY(recap__lt_heuristics(ctx, p, pr, 1, RECAP_GEMM_WORKSPACE_BYTES, &result, &found));
  out->algo = result.algo;
  /* A bias epilogue whose first choice splits K: the choice within PyTorch's 1 MiB cuBLASLt
   * workspace instead, where a split's f32 partial sums must fit in 1 MiB (on an H200 the 32
   * MiB choice lost to PyTorch's at m 32-64 on long-K projections: docs/perf/gemm_sweep.md,
   * "A bias epilogue that splits K"). */
  int32_t config[RECAP_TUNE_CONFIG_MAX];
  if ((pr->key.epilogue & CUBLASLT_EPILOGUE_BIAS) &&
      recap__lt_algo_config(&result.algo, config) == RECAP_OK && config[RECAP_TUNE_LT_SPLITK] > 1) {
    if (recap__lt_heuristics(ctx, p, pr, 1, BIAS_SPLIT_WORKSPACE_BYTES, &result, &found) ==
        RECAP_OK)
      out->algo = result.algo;
    else
      recap_clear_error();
  }
  return RECAP_OK;
}

/* Whether a choice needs nothing more for this launch. */
static bool settled(const recap__gemm_choice *c, const recap__gemm_ctx *ctx, bool run) {
  const int mode = recap__gemm_env_get()->tune;
  if (c->state == CHOICE_FINAL || mode == RECAP_TUNE_OFF || ctx->capturing) return true;
  return c->state == CHOICE_CONSULTED && !(mode == RECAP_TUNE_ON && run);
}

typedef struct {
  const int32_t *want; /* a file entry's config */
  bool found;
  cublasLtMatmulAlgo_t algo;
} variant_match;

static bool match_variant(void *arg, const cublasLtMatmulAlgo_t *algo, const int32_t *config) {
  variant_match *m = arg;
  if (memcmp(config, m->want, RECAP_TUNE_CONFIG_MAX * sizeof *config) != 0) return false;
  m->algo = *algo;
  m->found = true;
  return true;
}

/* A file entry's choice, if this problem can run it: a skinny configuration where the kernel
 * applies, or a cuBLASLt configuration in the library's heuristic list for this very problem
 * or among the variants of its first results (so no value from the file ever reaches
 * cuBLASLt unchecked: a variant is built from a heuristic result and passes AlgoCheck). */
static recap_status from_file(recap__gemm_ctx *ctx, const recap__gemm_plan *p,
                              recap__lt_problem *pr, const recap__tune_choice *fc,
                              recap__gemm_choice *out, bool *usable) {
  *usable = false;
  if (fc->kind == RECAP_TUNE_CAND_SKINNY) {
    /* A shape the problem's m does not fit (pipe 4 above 8 rows) is unusable here, as the
     * library's unknown configurations are, rather than an error at its first launch. */
    if (!skinny_allowed(p) || !recap__cuda_gemm_skinny_pipe_fits(p, fc->config[1])) return RECAP_OK;
    *out = (recap__gemm_choice){.kind = RECAP_TUNE_CAND_SKINNY,
                                .warps = fc->config[0],
                                .pipe = fc->config[1],
                                .state = CHOICE_FINAL};
    *usable = true;
    return RECAP_OK;
  }
  if (fc->kind == RECAP_TUNE_CAND_HOPPER) {
    if (!pr->key.hopper_fits || fc->config[0] >= recap__cuda_gemm_hopper_configs()) return RECAP_OK;
    *out = (recap__gemm_choice){
        .kind = RECAP_TUNE_CAND_HOPPER, .config = fc->config[0], .state = CHOICE_FINAL};
    *usable = true;
    return RECAP_OK;
  }
  cublasLtMatmulHeuristicResult_t results[MAX_HEURISTICS];
  int found = 0;
  RECAP_TRY(recap__lt_heuristics(ctx, p, pr, MAX_HEURISTICS, RECAP_GEMM_WORKSPACE_BYTES, results,
                                 &found));
  for (int i = 0; i < found; ++i) {
    int32_t config[RECAP_TUNE_CONFIG_MAX];
    RECAP_TRY(recap__lt_algo_config(&results[i].algo, config));
    if (memcmp(config, fc->config, sizeof config) == 0) {
      *out = (recap__gemm_choice){
          .kind = RECAP_TUNE_CAND_LT, .algo = results[i].algo, .state = CHOICE_FINAL};
      *usable = true;
      return RECAP_OK;
    }
  }
  /* Else one of their variants, rebuilt as tuning built it (recap__lt_variants). */
  variant_match match = {.want = fc->config};
  RECAP_TRY(recap__lt_variants(ctx, pr, results, found, match_variant, &match));
  if (match.found) {
    *out =
        (recap__gemm_choice){.kind = RECAP_TUNE_CAND_LT, .algo = match.algo, .state = CHOICE_FINAL};
    *usable = true;
  }
  return RECAP_OK;
}

/* Moves an unsettled choice on (outside capture, RECAP_TUNE 1 or 2): the file's entry if
 * usable, else (mode 2) the default for good, else (mode 1, a run with data) timing. */
static recap_status advance(recap__gemm_ctx *ctx, const recap__gemm_plan *p, recap__lt_problem *pr,
                            bool run, recap__gemm_choice *ch) {
  const int mode = recap__gemm_env_get()->tune;
  recap__tune_versions v;
  RECAP_TRY(versions_of(ctx->device, &v));
  const recap__tune_key tk = tune_key_of(p, pr);
  if (ch->state == CHOICE_DEFAULT) {
    recap__tune_entry entry;
    if (file_lookup(&v, &tk, &entry)) {
      bool usable = false;
      recap__gemm_choice fc;
      RECAP_TRY(from_file(ctx, p, pr, &entry.choice, &fc, &usable));
      if (usable) {
        *ch = fc;
        recap__gemm_tune_count(RECAP_TUNE_STAT_HITS, 1);
        return RECAP_OK;
      }
      recap__gemm_tune_count(RECAP_TUNE_STAT_STALE, 1);
      fprintf(stderr,
              "recap: warning: %s: the entry for m=%lld n=%lld k=%lld names a candidate "
              "this problem cannot use here; %s\n",
              recap__gemm_env_get()->tune_file, (long long)p->m, (long long)p->n, (long long)p->k,
              mode == RECAP_TUNE_ON ? "tuning again" : "using the default");
    }
    ch->state = CHOICE_CONSULTED;
  }
  if (mode == RECAP_TUNE_CACHE_ONLY) {
    ch->state = CHOICE_FINAL;
    recap__gemm_tune_count(RECAP_TUNE_STAT_UNTIMED, 1);
    return RECAP_OK;
  }
  if (!run) return RECAP_OK; /* the first run times it, with the data bound */
  recap__gemm_choice best;
  int32_t config[RECAP_TUNE_CONFIG_MAX];
  float us = 0;
  const recap_status st = tune_now(ctx, p, pr, ch, &best, config, &us);
  if (st == RECAP_STATUS_DEVICE_ERROR) return st;
  if (st != RECAP_OK) {
    fprintf(stderr,
            "recap: warning: GEMM tuning of m=%lld n=%lld k=%lld failed (%s); using the "
            "default\n",
            (long long)p->m, (long long)p->n, (long long)p->k, recap_last_error());
    ch->state = CHOICE_FINAL;
    recap__gemm_tune_count(RECAP_TUNE_STAT_UNTIMED, 1);
    return RECAP_OK;
  }
  recap__gemm_tune_count(RECAP_TUNE_STAT_TUNINGS, 1);
  *ch = best;
  ch->state = CHOICE_FINAL;
  recap__tune_entry entry = {.key = tk, .us = us};
  choice_to_tune(&best, config, &entry.choice);
  file_record(&v, &entry);
  return RECAP_OK;
}

/* The choice for this launch: the thread's remembered one (no lock), else the process-wide
 * one (one lock), else a new default; moved on by advance() where tuning asks for it. */
static recap_status resolve(recap__gemm_ctx *ctx, const recap__gemm_plan *p, recap__lt_problem *pr,
                            bool run, recap__gemm_choice *out) {
  const recap__gemm_choice *mine = thread_choice_find(ctx->thread, &pr->key);
  if (mine && settled(mine, ctx, run)) {
    *out = *mine;
    return RECAP_OK;
  }
  const uint64_t gen = atomic_load_explicit(&choice_generation, memory_order_acquire);
  recap__gemm_choice ch;
  bool changed = false;
  if (!cache_find(&pr->key, &ch)) {
    RECAP_TRY(make_default(ctx, p, pr, &ch));
    changed = true;
  }
  if (!settled(&ch, ctx, run)) {
    const recap__gemm_choice before = ch;
    RECAP_TRY(advance(ctx, p, pr, run, &ch));
    changed = changed || memcmp(&before, &ch, sizeof ch) != 0;
  }
  if (changed) RECAP_TRY(cache_store(&pr->key, &ch));
  thread_choice_store(
      ctx->thread, &pr->key, &ch,
      changed ? atomic_load_explicit(&choice_generation, memory_order_acquire) : gen);
  *out = ch;
  return RECAP_OK;
}

void recap__gemm_tune_reset(void) {
  pthread_mutex_lock(&cache_lock);
  for (int b = 0; b < CACHE_BUCKETS; ++b) {
    lt_entry *e = cache[b];
    while (e) {
      lt_entry *next = e->next;
      free(e);
      e = next;
    }
    cache[b] = NULL;
  }
  atomic_fetch_add(&choice_generation, 1);
  pthread_mutex_unlock(&cache_lock);
  pthread_mutex_lock(&tune_lock);
  recap__tune_table_destroy(file_table);
  file_table = NULL;
  file_loaded = false;
  pthread_mutex_unlock(&tune_lock);
  recap__gemm_tune_stats_clear();
}

/* ---- entry points -------------------------------------------------------------------------- */

static recap_status gemm_run(const recap__op_call *call, void *cuda_stream, bool run) {
  recap__gemm_plan p;
  RECAP_TRY(recap__gemm_plan_make(call, &p));
  if (run && (!p.a || !p.b || !p.out))
    return RECAP_OP_FAIL(call, "tensors are not bound to memory");
  if (run && !recap__tensor_is_contiguous(&call->outputs[0]))
    return RECAP_OP_FAIL(call, "the output must be contiguous, as infer describes it");
  RECAP_NVTX_SCOPE(run ? "recap gemm" : "recap gemm prepare");
  if (p.prologue == RECAP__GEMM_PROLOGUE_GLU)
    return RECAP_OP_FAIL(call,
                         "its gated-unit prologue (glu) is refused on CUDA: it has no CUDA kernel "
                         "(the earlier ones gave different results from run to run on the H100 "
                         "and were removed, docs/SERVING.md \"Prologue folds\"); run act(gate) * "
                         "up as an op of its own, or on the host backend");
  recap__gemm_ctx ctx;
  RECAP_TRY(recap__gemm_ctx_open(&ctx, (cudaStream_t)cuda_stream));
  recap_status st = RECAP_OK;
  /* A prologue or a gated output: the skinny kernel computes them in place (one launch),
   * where it would run the shape anyway: fixed, not tuned, since the alternative costs a launch
   * more. Else the workspace holds P(x) [m, k], from which the product runs as any linear's,
   * and after it the product [m, 2F], which a pass then pairs (as many launches as the
   * unfolded ops). */
  const recap__activation gated = p.gated;
  void *gated_out = NULL;
  size_t prologue_bytes = 0, product_bytes = 0;
  if (p.prologue != RECAP__GEMM_PROLOGUE_NONE || gated != RECAP_ACT_NONE) {
    if (skinny_allowed(&p) && recap__gemm_library() != RECAP_GEMM_LIBRARY_CUBLAS &&
        recap__cuda_gemm_skinny_preferred(&p, ctx.device, true)) {
      if (run) st = recap__cuda_gemm_skinny(&p, ctx.device, cuda_stream);
      goto done;
    }
    recap__gemm_workspace_layout(p.prologue != RECAP__GEMM_PROLOGUE_NONE, gated != RECAP_ACT_NONE,
                                 p.m, p.k, p.n, recap_dtype_size(p.dtype), &prologue_bytes,
                                 &product_bytes);
    const size_t bytes = prologue_bytes + product_bytes;
    if (run && (!call->workspace || call->workspace_bytes < bytes)) {
      st = RECAP_OP_FAIL(call, "its %s needs %zu bytes of workspace, %zu are bound",
                         product_bytes == 0    ? "prologue"
                         : prologue_bytes == 0 ? "gated output"
                                               : "prologue and gated output",
                         bytes, call->workspace_bytes);
      goto done;
    }
  }
  if (p.prologue != RECAP__GEMM_PROLOGUE_NONE) {
    if (run) RECAP_TRY_GOTO(st, recap__cuda_gemm_prologue(&p, call->workspace, cuda_stream), done);
    p.a = run ? call->workspace : NULL;
    p.a_rs = p.k;
    p.a_cs = 1;
    p.prologue = RECAP__GEMM_PROLOGUE_NONE;
    p.norm_weight = NULL;
  }
  if (gated != RECAP_ACT_NONE) {
    gated_out = p.out;
    p.out = run ? (char *)call->workspace + prologue_bytes : NULL;
    p.gated = RECAP_ACT_NONE;
  }
  if (run && recap__gemm_library() == RECAP_GEMM_LIBRARY_CUBLAS) {
    RECAP_TRY_GOTO(st, recap__gemm_blas_run(&ctx, &p), done);
  } else {
    /* A prepare readies cuBLASLt's choice either way: cuBLAS needs nothing more. */
    recap__lt_problem pr;
    recap__gemm_choice ch;
    RECAP_TRY_GOTO(st, recap__lt_problem_init(&ctx, &p, &pr), done);
    RECAP_TRY_GOTO(st, resolve(&ctx, &p, &pr, run, &ch), done);
    if (run) RECAP_TRY_GOTO(st, recap__gemm_run_choice(&ctx, &p, &pr, &ch, p.out), done);
  }
  if (run && gated_out)
    st = recap__cuda_gemm_gated(gated_out, p.out, p.dtype, p.m, p.n / 2, gated, cuda_stream);
done:
  recap__gemm_ctx_close(&ctx);
  return st;
}

recap_status recap__cuda_gemm(const recap__op_call *call, void *cuda_stream) {
  return gemm_run(call, cuda_stream, true);
}

recap_status recap__cuda_gemm_prepare(const recap__op_call *call, void *cuda_stream) {
  return gemm_run(call, cuda_stream, false);
}
