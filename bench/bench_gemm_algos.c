/*
 * bench_gemm_algos.c: searches cuBLASLt's configuration space beyond its heuristic list for
 * the four GEMMs of specs/transformer_block.yaml (B8 S128 D1024 F4096, fp16 in and out, f32
 * compute), laid out exactly as kernels/gemm/cublaslt.c calls them, and times every valid
 * configuration against the heuristic's first choice (the one recap runs). See
 * docs/perf/transformer_block.md, section 5.
 *
 * Row-major linear out[m, n] = x[m, k] W[n, k]^T + bias (+ residual) is, column-major, the
 * product out^T = W x^T: cuBLAS's A is W (k x n, ld k, op T), its B is x (k x m, ld k, op N),
 * C and D are n x m with ld n; bias in the epilogue (CUBLASLT_EPILOGUE_BIAS) and, for
 * out_proj and fc2, the residual as C with beta = 1. Workspace 32 MiB, every pointer 256-byte
 * aligned (fresh allocations), split-K reduction never in the output type (as cublaslt.c
 * asks). C and D are separate buffers.
 *
 * Candidates per shape:
 *   H  cuBLASLt's heuristic list (up to MAX_HEURISTICS results);
 *   M  the first heuristic results with split-K, CTA swizzling and cluster shapes varied;
 *   E  every algorithm id of cublasLtMatmulAlgoGetIds, initialized with cublasLtMatmulAlgoInit,
 *      over its capabilities: tiles x stages x split-K {1,2,3,4} x reduction scheme x CTA
 *      swizzle {0,1} (capped per algorithm and by a time budget per shape);
 *   N  the neighbourhood of the fastest: custom options and cluster shapes.
 * Each candidate passes cublasLtMatmulAlgoCheck (workspace within 32 MiB), is timed quickly
 * (median of a few launches between CUDA events), and the fastest are checked against the
 * default's output (f16 tolerance of the tuner) and timed again, interleaved with the default,
 * over many launches. Operands stay in L2 between launches (not flushed: the block's operands
 * are small, and its graph replays find them in L2 too).
 *
 *   bench_gemm_algos                       # all four shapes
 *   bench_gemm_algos --shape fc2 --budget 10
 *
 * Exits non-zero on a CUDA failure or when the default's output disagrees with a host
 * reference (the layout would be wrong, and with it every number).
 */
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/half.h"
#include "bench/bench_common.h"

enum {
  MAX_HEURISTICS = 64,
  MUTATED_BASES = 8,        /* heuristic results whose neighbours are tried */
  MAX_ALGO_IDS = 256,
  MAX_CHECKS_PER_ALGO = 4000, /* cublasLtMatmulAlgoCheck calls per algorithm id */
  MAX_VALID_PER_ALGO = 600,   /* valid configurations kept per algorithm id */
  MAX_CANDIDATES = 20000,
  NEIGHBOUR_BASES = 10,
  QUICK_WARMUPS = 2,
  QUICK_REPS = 7,
  FINAL_SET = 8,            /* verified configurations timed again, besides the default */
  FINAL_ROUNDS = 10,
  FINAL_REPS = 20,          /* per round: FINAL_ROUNDS * FINAL_REPS launches per candidate */
  CONFIG_FIELDS = 9,
};

static const size_t WORKSPACE_BYTES = (size_t)32 << 20; /* RECAP_GEMM_WORKSPACE_BYTES */

#define LT_OK(expr)                                                                        \
  do {                                                                                     \
    cublasStatus_t s_ = (expr);                                                            \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                     \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                        \
              cublasLtGetStatusString(s_));                                                \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

/* The order of the tuning file's config fields (cublaslt.c's recap__lt_algo_config). */
static const cublasLtMatmulAlgoConfigAttributes_t CONFIG_ATTRS[CONFIG_FIELDS] = {
    CUBLASLT_ALGO_CONFIG_ID,           CUBLASLT_ALGO_CONFIG_TILE_ID,
    CUBLASLT_ALGO_CONFIG_STAGES_ID,    CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
    CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
    CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID,
    CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID};
enum { F_ID, F_TILE, F_STAGES, F_SPLITK, F_RED, F_SWZ, F_CUSTOM, F_INNER, F_CLUSTER };

typedef struct {
  const char *name;
  int64_t m, n, k;
  bool residual;
} shape;

/* specs/transformer_block.yaml: 1024 tokens, D 1024, F 4096. */
static const shape SHAPES[] = {
    {"qkv", 1024, 3072, 1024, false},
    {"out_proj", 1024, 1024, 1024, true},
    {"fc1", 1024, 4096, 1024, false},
    {"fc2", 1024, 1024, 4096, true},
};

typedef struct {
  cublasLtMatmulAlgo_t algo;
  int32_t config[CONFIG_FIELDS];
  char source;      /* H, M, E, N (see the top of the file) */
  size_t workspace; /* from cublasLtMatmulAlgoCheck */
  float waves;
  double quick_us;  /* < 0: failed to run */
  double final_us;
  int verified;     /* 0 unchecked, 1 agrees with the default, -1 disagrees */
} candidate;

typedef struct {
  const shape *s;
  cublasLtHandle_t lt;
  cudaStream_t stream;
  cublasLtMatmulDescOpaque_t desc;
  cublasLtMatrixLayoutOpaque_t la, lb, lcd;
  void *x, *w, *bias, *res, *out, *workspace;
  float beta;
  uint16_t *ref;    /* the default's output on the host */
  float ref_max;    /* max |ref| */
  cudaEvent_t ev[FINAL_ROUNDS * FINAL_REPS + 1];
  candidate *cands;
  int count;
  int checks, check_fail, capped_algos, run_fail;
  bool out_of_time;
  double deadline;
} bench;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- algorithm attributes: sizes differ (16 or 32 bits), so go by the size reported ----- */

static void config_read(const cublasLtMatmulAlgo_t *algo, int32_t config[CONFIG_FIELDS]) {
  for (int i = 0; i < CONFIG_FIELDS; ++i) {
    size_t size = 0;
    LT_OK(cublasLtMatmulAlgoConfigGetAttribute(algo, CONFIG_ATTRS[i], NULL, 0, &size));
    uint32_t value = 0;
    if (size > sizeof value) {
      fprintf(stderr, "config attribute %d has %zu bytes\n", (int)CONFIG_ATTRS[i], size);
      exit(1);
    }
    LT_OK(cublasLtMatmulAlgoConfigGetAttribute(algo, CONFIG_ATTRS[i], &value, size, &size));
    config[i] = (int32_t)(value & 0x7fffffffu);
  }
}

static bool config_set(cublasLtMatmulAlgo_t *algo, int field, uint32_t value) {
  size_t size = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(algo, CONFIG_ATTRS[field], NULL, 0, &size) !=
          CUBLAS_STATUS_SUCCESS ||
      size > sizeof value)
    return false;
  /* Little-endian: the low bytes of the word are the value of a narrower attribute. */
  return cublasLtMatmulAlgoConfigSetAttribute(algo, CONFIG_ATTRS[field], &value, size) ==
         CUBLAS_STATUS_SUCCESS;
}

/* An array capability (tile or stages ids); returns the count written into out[max]. */
static int cap_array(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoCapAttributes_t attr,
                     uint32_t *out, int max) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(algo, attr, NULL, 0, &bytes) != CUBLAS_STATUS_SUCCESS)
    return 0;
  int n = (int)(bytes / sizeof *out);
  if (n > max) n = max;
  if (n == 0) return 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(algo, attr, out, (size_t)n * sizeof *out, &written) !=
      CUBLAS_STATUS_SUCCESS)
    return 0;
  return (int)(written / sizeof *out);
}

static uint32_t cap_u32(const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  uint32_t v = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(algo, attr, &v, sizeof v, &written) !=
      CUBLAS_STATUS_SUCCESS)
    return 0;
  return v;
}

static void config_print(FILE *f, const candidate *c) {
  fprintf(f, "id=%d tile=%d stages=%d splitk=%d red=%d swz=%d custom=%d inner=%d cluster=%d "
          "ws=%zuK waves=%.2f src=%c",
          c->config[F_ID], c->config[F_TILE], c->config[F_STAGES], c->config[F_SPLITK],
          c->config[F_RED], c->config[F_SWZ], c->config[F_CUSTOM], c->config[F_INNER],
          c->config[F_CLUSTER], c->workspace >> 10, c->waves, c->source);
}

/* ---- the problem ------------------------------------------------------------------------ */

static void bench_open(bench *b, const shape *s, cublasLtHandle_t lt, cudaStream_t stream) {
  memset(b, 0, sizeof *b);
  b->s = s;
  b->lt = lt;
  b->stream = stream;
  const size_t es = 2;
  CUDA_OK(cudaMalloc(&b->x, (size_t)(s->m * s->k) * es));
  CUDA_OK(cudaMalloc(&b->w, (size_t)(s->n * s->k) * es));
  CUDA_OK(cudaMalloc(&b->bias, (size_t)s->n * es));
  CUDA_OK(cudaMalloc(&b->res, (size_t)(s->m * s->n) * es));
  CUDA_OK(cudaMalloc(&b->out, (size_t)(s->m * s->n) * es));
  CUDA_OK(cudaMalloc(&b->workspace, WORKSPACE_BYTES));
  unsigned seed = 12345u + (unsigned)s->n * 7u + (unsigned)s->k;
  fill_random_16bit(b->x, false, (size_t)(s->m * s->k), 1.0f, &seed);
  /* 1/sqrt(k) keeps the products O(1), as initialized weights do. */
  fill_random_16bit(b->w, false, (size_t)(s->n * s->k), 1.0f / sqrtf((float)s->k), &seed);
  fill_random_16bit(b->bias, false, (size_t)s->n, 0.5f, &seed);
  fill_random_16bit(b->res, false, (size_t)(s->m * s->n), 1.0f, &seed);
  b->beta = s->residual ? 1.0f : 0.0f;

  const cublasOperation_t op_a = CUBLAS_OP_T, op_b = CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  LT_OK(cublasLtMatmulDescInit(&b->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  LT_OK(cublasLtMatmulDescSetAttribute(&b->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
  LT_OK(cublasLtMatmulDescSetAttribute(&b->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
  LT_OK(cublasLtMatmulDescSetAttribute(&b->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                       sizeof epilogue));
  LT_OK(cublasLtMatmulDescSetAttribute(&b->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b->bias,
                                       sizeof b->bias));
  LT_OK(cublasLtMatrixLayoutInit(&b->la, CUDA_R_16F, (uint64_t)s->k, (uint64_t)s->n, s->k));
  LT_OK(cublasLtMatrixLayoutInit(&b->lb, CUDA_R_16F, (uint64_t)s->k, (uint64_t)s->m, s->k));
  LT_OK(cublasLtMatrixLayoutInit(&b->lcd, CUDA_R_16F, (uint64_t)s->n, (uint64_t)s->m, s->n));
  for (size_t i = 0; i < sizeof b->ev / sizeof b->ev[0]; ++i) CUDA_OK(cudaEventCreate(&b->ev[i]));
  b->cands = calloc(MAX_CANDIDATES, sizeof *b->cands);
  b->ref = malloc((size_t)(s->m * s->n) * sizeof *b->ref);
  if (!b->cands || !b->ref) exit(1);
}

static void bench_close(bench *b) {
  for (size_t i = 0; i < sizeof b->ev / sizeof b->ev[0]; ++i) cudaEventDestroy(b->ev[i]);
  cudaFree(b->x);
  cudaFree(b->w);
  cudaFree(b->bias);
  cudaFree(b->res);
  cudaFree(b->out);
  cudaFree(b->workspace);
  free(b->cands);
  free(b->ref);
}

static cublasStatus_t launch(bench *b, const cublasLtMatmulAlgo_t *algo) {
  const float alpha = 1.0f;
  const void *c = b->s->residual ? b->res : b->out;
  return cublasLtMatmul(b->lt, &b->desc, &alpha, b->w, &b->la, b->x, &b->lb, &b->beta, c,
                        &b->lcd, b->out, &b->lcd, algo, b->workspace, WORKSPACE_BYTES,
                        b->stream);
}

/* Median of `reps` launches (each between two events) after `warm` launches, in us; < 0 when
 * the library refuses to launch it. */
static double time_algo(bench *b, const cublasLtMatmulAlgo_t *algo, int warm, int reps) {
  for (int i = 0; i < warm; ++i)
    if (launch(b, algo) != CUBLAS_STATUS_SUCCESS) return -1;
  float t[FINAL_ROUNDS * FINAL_REPS];
  CUDA_OK(cudaEventRecord(b->ev[0], b->stream));
  for (int i = 0; i < reps; ++i) {
    if (launch(b, algo) != CUBLAS_STATUS_SUCCESS) {
      CUDA_OK(cudaStreamSynchronize(b->stream));
      return -1;
    }
    CUDA_OK(cudaEventRecord(b->ev[i + 1], b->stream));
  }
  CUDA_OK(cudaEventSynchronize(b->ev[reps]));
  for (int i = 0; i < reps; ++i) CUDA_OK(cudaEventElapsedTime(&t[i], b->ev[i], b->ev[i + 1]));
  qsort(t, (size_t)reps, sizeof t[0], cmp_float);
  return 1000.0 * t[reps / 2];
}

/* Whether the last launch's output agrees with the default's (the tuner's f16 tolerance:
 * relative 4e-3 per element plus 2e-3 of max |ref|). */
static bool output_agrees(bench *b, double *max_err) {
  const size_t count = (size_t)(b->s->m * b->s->n);
  uint16_t *got = malloc(count * sizeof *got);
  if (!got) exit(1);
  CUDA_OK(cudaStreamSynchronize(b->stream));
  CUDA_OK(cudaMemcpy(got, b->out, count * sizeof *got, cudaMemcpyDeviceToHost));
  bool ok = true;
  double worst = 0;
  for (size_t i = 0; i < count; ++i) {
    const float r = recap__f16_to_f32(b->ref[i]), g = recap__f16_to_f32(got[i]);
    const double err = fabs((double)g - (double)r);
    if (!(err <= 4e-3 * fabs((double)r) + 2e-3 * b->ref_max)) ok = false;
    if (!(err <= worst)) worst = err; /* NaN propagates as the worst */
  }
  free(got);
  if (max_err) *max_err = worst;
  return ok;
}

/* Host f32 reference on sampled elements of the default's output: a wrong layout fails. */
static bool default_matches_host(bench *b) {
  const shape *s = b->s;
  uint16_t *x = malloc((size_t)(s->m * s->k) * 2), *w = malloc((size_t)(s->n * s->k) * 2);
  uint16_t *bias = malloc((size_t)s->n * 2), *res = malloc((size_t)(s->m * s->n) * 2);
  if (!x || !w || !bias || !res) exit(1);
  CUDA_OK(cudaMemcpy(x, b->x, (size_t)(s->m * s->k) * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(w, b->w, (size_t)(s->n * s->k) * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(bias, b->bias, (size_t)s->n * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(res, b->res, (size_t)(s->m * s->n) * 2, cudaMemcpyDeviceToHost));
  bool ok = true;
  unsigned seed = 99u;
  for (int t = 0; t < 2048; ++t) {
    seed = seed * 1664525u + 1013904223u;
    const int64_t i = (int64_t)(seed >> 4) % s->m;
    seed = seed * 1664525u + 1013904223u;
    const int64_t j = (int64_t)(seed >> 4) % s->n;
    double acc = recap__f16_to_f32(bias[j]);
    for (int64_t p = 0; p < s->k; ++p)
      acc += (double)recap__f16_to_f32(x[i * s->k + p]) * recap__f16_to_f32(w[j * s->k + p]);
    if (s->residual) acc += recap__f16_to_f32(res[i * s->n + j]);
    const double got = recap__f16_to_f32(b->ref[i * s->n + j]);
    if (!(fabs(got - acc) <= 4e-3 * fabs(acc) + 4e-3)) {
      if (ok)
        fprintf(stderr, "%s: default out[%lld, %lld] = %g, host reference %g\n", s->name,
                (long long)i, (long long)j, got, acc);
      ok = false;
    }
  }
  free(x);
  free(w);
  free(bias);
  free(res);
  return ok;
}

/* ---- candidates ---------------------------------------------------------------------------- */

static bool listed(const bench *b, const cublasLtMatmulAlgo_t *algo) {
  for (int i = 0; i < b->count; ++i)
    if (memcmp(&b->cands[i].algo, algo, sizeof *algo) == 0) return true;
  return false;
}

/* Checks `algo` and lists it (quick-timed) when valid and new. Returns whether it is valid. */
static bool try_add(bench *b, const cublasLtMatmulAlgo_t *algo, char source) {
  if (b->count >= MAX_CANDIDATES) return false;
  if (now_s() > b->deadline) {
    b->out_of_time = true;
    return false;
  }
  cublasLtMatmulHeuristicResult_t r;
  memset(&r, 0, sizeof r);
  ++b->checks;
  if (cublasLtMatmulAlgoCheck(b->lt, &b->desc, &b->la, &b->lb, &b->lcd, &b->lcd, algo, &r) !=
          CUBLAS_STATUS_SUCCESS ||
      r.workspaceSize > WORKSPACE_BYTES) {
    ++b->check_fail;
    return false;
  }
  if (listed(b, algo)) return true;
  candidate *c = &b->cands[b->count];
  memset(c, 0, sizeof *c);
  c->algo = *algo;
  config_read(algo, c->config);
  c->source = source;
  c->workspace = r.workspaceSize;
  c->waves = r.wavesCount;
  c->quick_us = time_algo(b, algo, QUICK_WARMUPS, QUICK_REPS);
  if (c->quick_us < 0) {
    ++b->run_fail;
    return true;
  }
  ++b->count;
  return true;
}

/* Initialized in place: the opaque descriptors are not meant to be copied. */
static void pref_init(cublasLtMatmulPreference_t pref) {
  const uint64_t ws = WORKSPACE_BYTES;
  const uint32_t align = 256;
  /* Split-K partial sums stay in f32 (cublaslt.c asks the same). */
  const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
  LT_OK(cublasLtMatmulPreferenceInit(pref));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws));
  static const cublasLtMatmulPreferenceAttributes_t aligns[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, aligns[i], &align, sizeof align));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                             &mask, sizeof mask));
}

/* Split-K values tried and the reduction schemes allowed with them (never the output type). */
static const int SPLITS[] = {1, 2, 3, 4};
static const uint32_t REDUCTIONS[] = {CUBLASLT_REDUCTION_SCHEME_INPLACE,
                                      CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE};
/* AUTO, 1x1x1, 2x1x1, 1x2x1, 2x2x1, 4x1x1, 1x4x1 */
static const uint16_t CLUSTERS[] = {0, 2, 3, 5, 6, 4, 8};

/* Heuristic result `base` with split-K, swizzle and cluster varied one at a time. */
static void mutate(bench *b, const cublasLtMatmulAlgo_t *base) {
  const uint32_t red_mask = cap_u32(base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
  if (cap_u32(base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT))
    for (size_t s = 1; s < sizeof SPLITS / sizeof SPLITS[0]; ++s)
      for (size_t r = 0; r < sizeof REDUCTIONS / sizeof REDUCTIONS[0]; ++r) {
        if (!(red_mask & REDUCTIONS[r])) continue;
        cublasLtMatmulAlgo_t a = *base;
        if (config_set(&a, F_SPLITK, (uint32_t)SPLITS[s]) && config_set(&a, F_RED, REDUCTIONS[r]))
          try_add(b, &a, 'M');
      }
  for (uint32_t swz = 0; swz <= 1; ++swz) {
    cublasLtMatmulAlgo_t a = *base;
    if (config_set(&a, F_SWZ, swz)) try_add(b, &a, 'M');
  }
  for (size_t c = 0; c < sizeof CLUSTERS / sizeof CLUSTERS[0]; ++c) {
    cublasLtMatmulAlgo_t a = *base;
    if (config_set(&a, F_CLUSTER, CLUSTERS[c])) try_add(b, &a, 'M');
  }
}

/* Every configuration of one algorithm id over its capabilities, within the caps. */
static void enumerate_algo(bench *b, int id, int *valid_out) {
  cublasLtMatmulAlgo_t base;
  *valid_out = 0;
  if (cublasLtMatmulAlgoInit(b->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F, CUDA_R_16F,
                             CUDA_R_16F, CUDA_R_16F, id, &base) != CUBLAS_STATUS_SUCCESS)
    return;
  if (!(cap_u32(&base, CUBLASLT_ALGO_CAP_EPILOGUE_MASK) & CUBLASLT_EPILOGUE_BIAS)) return;
  static uint32_t tiles[4096], stages[4096];
  int nt = cap_array(&base, CUBLASLT_ALGO_CAP_TILE_IDS, tiles, 4096);
  int ns = cap_array(&base, CUBLASLT_ALGO_CAP_STAGES_IDS, stages, 4096);
  if (nt == 0) tiles[nt++] = CUBLASLT_MATMUL_TILE_UNDEFINED;
  if (ns == 0) stages[ns++] = CUBLASLT_MATMUL_STAGES_UNDEFINED;
  const bool splitk = cap_u32(&base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) != 0;
  const uint32_t red_mask = cap_u32(&base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK);
  const uint32_t swz_max = cap_u32(&base, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT) ? 1 : 0;
  const int checks0 = b->checks;
  int valid = 0;
  for (int t = 0; t < nt; ++t)
    for (int st = 0; st < ns; ++st)
      for (size_t sk = 0; sk < (splitk ? sizeof SPLITS / sizeof SPLITS[0] : 1); ++sk)
        for (size_t r = 0; r < (SPLITS[sk] > 1 ? sizeof REDUCTIONS / sizeof REDUCTIONS[0] : 1);
             ++r) {
          if (SPLITS[sk] > 1 && !(red_mask & REDUCTIONS[r])) continue;
          for (uint32_t swz = 0; swz <= swz_max; ++swz) {
            if (b->checks - checks0 >= MAX_CHECKS_PER_ALGO || valid >= MAX_VALID_PER_ALGO) {
              ++b->capped_algos;
              *valid_out = valid;
              return;
            }
            if (b->out_of_time) {
              *valid_out = valid;
              return;
            }
            cublasLtMatmulAlgo_t a = base;
            if (!config_set(&a, F_TILE, tiles[t]) || !config_set(&a, F_STAGES, stages[st]) ||
                !config_set(&a, F_SPLITK, (uint32_t)SPLITS[sk]) ||
                !config_set(&a, F_RED, SPLITS[sk] > 1 ? REDUCTIONS[r] : 0u) ||
                !config_set(&a, F_SWZ, swz))
              continue;
            if (try_add(b, &a, 'E')) ++valid;
          }
        }
  *valid_out = valid;
}

/* Custom options and cluster shapes around a fast configuration. */
static void neighbours(bench *b, const cublasLtMatmulAlgo_t *base) {
  int32_t custom_max = (int32_t)cap_u32(base, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX);
  if (custom_max > 7) custom_max = 7;
  for (int32_t o = 0; o <= custom_max; ++o)
    for (size_t c = 0; c < sizeof CLUSTERS / sizeof CLUSTERS[0]; ++c) {
      cublasLtMatmulAlgo_t a = *base;
      if (config_set(&a, F_CUSTOM, (uint32_t)o) && config_set(&a, F_CLUSTER, CLUSTERS[c]))
        try_add(b, &a, 'N');
    }
}

static int by_quick(const void *pa, const void *pb) {
  const candidate *a = pa, *b = pb;
  return (a->quick_us > b->quick_us) - (a->quick_us < b->quick_us);
}

static int by_final(const void *pa, const void *pb) {
  const candidate *a = *(candidate *const *)pa, *b = *(candidate *const *)pb;
  return (a->final_us > b->final_us) - (a->final_us < b->final_us);
}

/* Whether a configuration rebuilt from its nine config fields alone (cublasLtMatmulAlgoInit +
 * setters, what a tuning-file entry can hold) passes the check and computes the same bits. */
static const char *rebuild_check(bench *b, const candidate *c) {
  cublasLtMatmulAlgo_t a;
  if (cublasLtMatmulAlgoInit(b->lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F, CUDA_R_16F,
                             CUDA_R_16F, CUDA_R_16F, c->config[F_ID], &a) != CUBLAS_STATUS_SUCCESS)
    return "init refused";
  for (int f = F_TILE; f < CONFIG_FIELDS; ++f)
    if (!config_set(&a, f, (uint32_t)c->config[f])) return "setter refused";
  cublasLtMatmulHeuristicResult_t r;
  if (cublasLtMatmulAlgoCheck(b->lt, &b->desc, &b->la, &b->lb, &b->lcd, &b->lcd, &a, &r) !=
      CUBLAS_STATUS_SUCCESS)
    return "check refused";
  if (memcmp(&a, &c->algo, sizeof a) == 0) return "same algo bytes";
  const size_t count = (size_t)(b->s->m * b->s->n);
  uint16_t *one = malloc(count * 2), *two = malloc(count * 2);
  if (!one || !two) exit(1);
  const char *verdict = "launch refused";
  if (launch(b, &c->algo) == CUBLAS_STATUS_SUCCESS) {
    CUDA_OK(cudaMemcpy(one, b->out, count * 2, cudaMemcpyDeviceToHost));
    verdict = "rebuilt launch refused";
    if (launch(b, &a) == CUBLAS_STATUS_SUCCESS) {
      CUDA_OK(cudaMemcpy(two, b->out, count * 2, cudaMemcpyDeviceToHost));
      verdict = memcmp(one, two, count * 2) == 0 ? "other bytes, same output bits"
                                                 : "other bytes, DIFFERENT output";
    }
  }
  free(one);
  free(two);
  return verdict;
}

/* Searches one shape and prints its table; returns the gain (default - best) in us. */
static double search_shape(const shape *s, cublasLtHandle_t lt, cudaStream_t stream,
                           double budget_s) {
  bench b;
  bench_open(&b, s, lt, stream);
  const double t0 = now_s();
  b.deadline = t0 + budget_s;
  printf("== %s: out[%lld, %lld] = x[%lld, %lld] W^T + bias%s (fp16, f32 compute) ==\n", s->name,
         (long long)s->m, (long long)s->n, (long long)s->m, (long long)s->k,
         s->residual ? " + residual (C, beta 1)" : "");

  cublasLtMatmulPreferenceOpaque_t pref;
  pref_init(&pref);
  cublasLtMatmulHeuristicResult_t heur[MAX_HEURISTICS];
  int found = 0;
  LT_OK(cublasLtMatmulAlgoGetHeuristic(lt, &b.desc, &b.la, &b.lb, &b.lcd, &b.lcd, &pref,
                                       MAX_HEURISTICS, heur, &found));
  if (found < 1) {
    fprintf(stderr, "%s: no heuristic result\n", s->name);
    exit(1);
  }
  /* The default first: it is candidate 0 and the reference output. */
  for (int i = 0; i < found; ++i) try_add(&b, &heur[i].algo, 'H');
  if (b.count == 0 || memcmp(&b.cands[0].algo, &heur[0].algo, sizeof heur[0].algo) != 0) {
    fprintf(stderr, "%s: the heuristic's first choice did not run\n", s->name);
    exit(1);
  }
  if (launch(&b, &heur[0].algo) != CUBLAS_STATUS_SUCCESS) exit(1);
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaMemcpy(b.ref, b.out, (size_t)(s->m * s->n) * 2, cudaMemcpyDeviceToHost));
  b.ref_max = 0;
  for (int64_t i = 0; i < s->m * s->n; ++i) {
    const float v = fabsf(recap__f16_to_f32(b.ref[i]));
    if (v > b.ref_max) b.ref_max = v;
  }
  if (!default_matches_host(&b)) {
    fprintf(stderr, "%s: the default's output disagrees with the host reference\n", s->name);
    exit(1);
  }
  const int n_heur = b.count;
  for (int i = 0; i < found && i < MUTATED_BASES; ++i) mutate(&b, &heur[i].algo);
  const int n_mut = b.count - n_heur;

  int ids[MAX_ALGO_IDS], n_ids = 0;
  LT_OK(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F, CUDA_R_16F,
                                 CUDA_R_16F, CUDA_R_16F, MAX_ALGO_IDS, ids, &n_ids));
  printf("algorithm ids (%d):", n_ids);
  for (int i = 0; i < n_ids; ++i) printf(" %d", ids[i]);
  printf("\nvalid configurations per id:");
  const int before_enum = b.count;
  for (int i = 0; i < n_ids && !b.out_of_time; ++i) {
    int valid = 0;
    enumerate_algo(&b, ids[i], &valid);
    if (valid) printf(" %d:%d", ids[i], valid);
  }
  printf("\n");
  const int n_enum = b.count - before_enum;

  /* The fastest few (of distinct algo ids and tiles) get their neighbourhoods tried. */
  const candidate def = b.cands[0];
  qsort(b.cands, (size_t)b.count, sizeof *b.cands, by_quick);
  const int before_nb = b.count;
  for (int i = 0, done = 0; i < before_nb && done < NEIGHBOUR_BASES && !b.out_of_time; ++i) {
    bool seen = false;
    for (int j = 0; j < i; ++j)
      if (b.cands[j].config[F_ID] == b.cands[i].config[F_ID] &&
          b.cands[j].config[F_TILE] == b.cands[i].config[F_TILE] &&
          b.cands[j].config[F_STAGES] == b.cands[i].config[F_STAGES])
        seen = true;
    if (seen) continue;
    const cublasLtMatmulAlgo_t base = b.cands[i].algo;
    neighbours(&b, &base);
    ++done;
  }
  const int n_nb = b.count - before_nb;
  qsort(b.cands, (size_t)b.count, sizeof *b.cands, by_quick);
  const double search_s = now_s() - t0;

  /* Verify the fastest in order until FINAL_SET agree with the default. */
  candidate *final[FINAL_SET + 1];
  int n_final = 0, disagree = 0;
  candidate def_copy = def;
  final[n_final++] = &def_copy;
  for (int i = 0; i < b.count && n_final < FINAL_SET + 1; ++i) {
    candidate *c = &b.cands[i];
    if (memcmp(&c->algo, &def.algo, sizeof def.algo) == 0) continue;
    if (launch(&b, &c->algo) != CUBLAS_STATUS_SUCCESS) continue;
    double err = 0;
    c->verified = output_agrees(&b, &err) ? 1 : -1;
    if (c->verified < 0) {
      ++disagree;
      printf("  disagrees with the default (max |err| %.3g): ", err);
      config_print(stdout, c);
      printf("\n");
      continue;
    }
    final[n_final++] = c;
  }
  /* Interleaved rounds, so drift of clocks or temperature hits every candidate alike. */
  float *times = malloc((size_t)n_final * FINAL_ROUNDS * FINAL_REPS * sizeof *times);
  if (!times) exit(1);
  for (int r = 0; r < FINAL_ROUNDS; ++r)
    for (int i = 0; i < n_final; ++i) {
      for (int w = 0; w < 2; ++w) launch(&b, &final[i]->algo);
      CUDA_OK(cudaEventRecord(b.ev[0], stream));
      for (int k = 0; k < FINAL_REPS; ++k) {
        if (launch(&b, &final[i]->algo) != CUBLAS_STATUS_SUCCESS) exit(1);
        CUDA_OK(cudaEventRecord(b.ev[k + 1], stream));
      }
      CUDA_OK(cudaEventSynchronize(b.ev[FINAL_REPS]));
      for (int k = 0; k < FINAL_REPS; ++k)
        CUDA_OK(cudaEventElapsedTime(&times[(i * FINAL_ROUNDS + r) * FINAL_REPS + k], b.ev[k],
                                     b.ev[k + 1]));
    }
  for (int i = 0; i < n_final; ++i) {
    float *t = &times[i * FINAL_ROUNDS * FINAL_REPS];
    qsort(t, FINAL_ROUNDS * FINAL_REPS, sizeof *t, cmp_float);
    final[i]->final_us = 1000.0 * t[FINAL_ROUNDS * FINAL_REPS / 2];
  }
  free(times);
  /* Back-to-back throughput of the default: the per-launch events above add a little. */
  double def_us = final[0]->final_us;
  qsort(final + 1, (size_t)(n_final - 1), sizeof final[0], by_final);
  const candidate *best = n_final > 1 && final[1]->final_us < def_us ? final[1] : final[0];

  printf("search: %.1f s%s; %d checks (%d refused), %d run refusals, %d algo ids capped; "
         "timed %d heuristic + %d mutated + %d enumerated + %d neighbours = %d; "
         "%d of the fastest disagreed with the default\n",
         search_s, b.out_of_time ? " (budget reached, search cut short)" : "", b.checks,
         b.check_fail, b.run_fail, b.capped_algos, n_heur, n_mut, n_enum, n_nb, b.count, disagree);
  printf("default  %7.2f us  ", def_us);
  config_print(stdout, final[0]);
  printf("\nbest     %7.2f us  ", best->final_us);
  config_print(stdout, best);
  const double gain = def_us - best->final_us;
  printf("\ngain     %7.2f us (%.1f%%); %.0f TFLOP/s -> %.0f TFLOP/s\n", gain,
         100.0 * gain / def_us, 2e-6 * (double)(s->m * s->n * s->k) / def_us,
         2e-6 * (double)(s->m * s->n * s->k) / best->final_us);
  if (best != final[0])
    printf("best rebuilt from its 9 config fields: %s\n", rebuild_check(&b, best));
  printf("top 5 (median of %d launches, interleaved with the default):\n",
         FINAL_ROUNDS * FINAL_REPS);
  for (int i = 1; i < n_final && i <= 5; ++i) {
    printf("  %d. %7.2f us  ", i, final[i]->final_us);
    config_print(stdout, final[i]);
    printf("\n");
  }
  printf("heuristic list (%d results, quick times):\n", n_heur);
  for (int i = 0; i < b.count; ++i)
    if (b.cands[i].source == 'H') {
      printf("     %7.2f us  ", b.cands[i].quick_us);
      config_print(stdout, &b.cands[i]);
      printf("\n");
    }
  printf("\n");
  fflush(stdout);
  bench_close(&b);
  return gain > 0 ? gain : 0;
}

int main(int argc, char **argv) {
  const char *only = NULL;
  double budget = 30.0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else if (strcmp(argv[i], "--budget") == 0 && i + 1 < argc) {
      budget = atof(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--shape qkv|out_proj|fc1|fc2] [--budget seconds per shape]\n",
              argv[0]);
      return 2;
    }
  }
  struct cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  int rt = 0;
  CUDA_OK(cudaRuntimeGetVersion(&rt));
  printf("device: %s (%d SMs), cuBLASLt %zu, cudart %d; search budget %.0f s per shape\n\n",
         prop.name, prop.multiProcessorCount, cublasLtGetVersion(), rt, budget);
  cublasLtHandle_t lt;
  LT_OK(cublasLtCreate(&lt));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  double total = 0;
  int ran = 0;
  for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; ++i) {
    if (only && strcmp(only, SHAPES[i].name) != 0) continue;
    total += search_shape(&SHAPES[i], lt, stream, budget);
    ++ran;
  }
  if (ran == 0) {
    fprintf(stderr, "no shape named %s\n", only);
    return 2;
  }
  printf("total gain over the default: %.2f us (sum over %d shapes)\n", total, ran);
  cudaStreamDestroy(stream);
  cublasLtDestroy(lt);
  return 0;
}
