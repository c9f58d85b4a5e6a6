/*
 * cuda_gemm.c: matmul and linear on CUDA through cuBLASLt (default) or cuBLAS (CUDA builds
 * only; gemm.h describes the ops and the plan).
 *
 * What makes these GEMMs capturable (see ../shared/notes/graph-engines.md):
 * - Handles: cuBLAS and cuBLASLt handles per thread and device (a cuBLAS handle carries a
 *   stream and a workspace, so threads must not share one), created lazily OUTSIDE capture
 *   (cublasCreate allocates device memory) and destroyed when the thread exits.
 * - Workspaces: one fixed 32 MiB buffer per stream, from the CUDA backend's mem_alloc outside
 *   capture, so two GEMMs running on two streams never share scratch memory and a captured
 *   GEMM never allocates. cublasSetStream resets cuBLAS's workspace to its own default, so
 *   every stream switch is followed by cublasSetWorkspace. The workspace table also records
 *   each stream's device, which is how a launch inside a capture learns it (CUDA refuses
 *   cudaStreamGetDevice on a capturing stream and invalidates the capture).
 * - Algorithms: cuBLASLt's heuristic (cublasLtMatmulAlgoGetHeuristic) chosen outside capture
 *   and cached under a lock, keyed by everything that shapes the choice (dtype, compute
 *   type, transposes, dims, leading dims, batch, strides, epilogue, pointer alignments).
 * Inside a capture, anything missing fails with RECAP_STATUS_ILLEGAL_DURING_CAPTURE and a
 * message asking for a warmup; no call that would invalidate the capture is made.
 *
 * Row-major data: a row-major [m, n] product C = A B is the column-major product
 * C^T = B^T A^T, so cuBLAS sees m' = n, n' = m, with B as its first operand.
 *
 * Epilogues: bias, relu(+bias) and gelu_tanh(+bias) fuse into cuBLASLt's epilogue (its GELU
 * is the tanh approximation). gelu (erf form, PyTorch's default), silu, sigmoid and tanh run
 * the bias epilogue and then our in-place kernel (gemm_epilogue.cu). The cuBLAS path runs
 * that kernel for bias and activation.
 *
 * Skinny GEMMs (the decode case: m <= 16, f16/bf16, x rows and W [N, K] rows with unit
 * stride along K and 16-byte aligned, K % 8 == 0, no batch, no c) run our own kernel
 * (gemm_skinny.cu) with bias and every activation fused, when cuBLASLt is the chosen library:
 * cuBLASLt streams the weights at 70-75% of copy bandwidth there. Selecting plain cuBLAS
 * uses cuBLAS for every shape, and RECAP_GEMM_SKINNY=0 in the environment (read at each
 * launch, so a captured graph keeps what it captured) sends skinny shapes to cuBLASLt too.
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_ops.h"
#include "kernels/gemm.h"
#include "kernels/infer.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/cuda_check.h"
#include "runtime/stream_hooks.h"
#include "runtime/versions.h"

enum { MAX_DEVICES = 64, CACHE_BUCKETS = 256 };

/* ---- versions ------------------------------------------------------------------------------ */

void recap__gemm_blas_versions(int *cublas, int *cublaslt) {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    *cublas = major * 10000 + minor * 100 + patch;
  else
    *cublas = 0;
  *cublaslt = (int)cublasLtGetVersion();
}

/* A destroyed stream's handle may come back for the next stream: drop its workspace. */
static recap_status release_stream_hook(recap_stream *stream) {
  if (recap_stream_device(stream).backend != RECAP_BACKEND_CUDA) return RECAP_OK;
  return recap__gemm_release_stream(recap_stream_native(stream));
}

/* At load, so `recap info` reports the versions before any GEMM ran. */
__attribute__((constructor)) static void register_with_runtime(void) {
  recap__set_blas_version_query(recap__gemm_blas_versions);
  recap__stream_add_release_hook(release_stream_hook);
}

/* ---- per-thread handles -------------------------------------------------------------------- */

typedef struct {
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  cudaStream_t blas_stream; /* the stream (and workspace) cuBLAS was last given */
  void *blas_workspace;
} device_handles;

typedef struct {
  device_handles dev[MAX_DEVICES];
} thread_handles;

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t handles_key;
static int handles_key_ok;
static _Thread_local thread_handles *tls_handles;

/* Thread exit: the handles belong to this thread alone. */
static void destroy_thread_handles(void *ptr) {
  thread_handles *t = ptr;
  int prev = -1;
  cudaGetDevice(&prev);
  for (int d = 0; d < MAX_DEVICES; ++d) {
    if (!t->dev[d].blas && !t->dev[d].lt) continue;
    cudaSetDevice(d);
    if (t->dev[d].blas) cublasDestroy(t->dev[d].blas);
    if (t->dev[d].lt) cublasLtDestroy(t->dev[d].lt);
  }
  if (prev >= 0) cudaSetDevice(prev);
  cudaGetLastError();
  free(t);
}

static void make_key(void) {
  handles_key_ok = pthread_key_create(&handles_key, destroy_thread_handles) == 0;
}

/* ---- per-stream workspaces ----------------------------------------------------------------- */

typedef struct {
  cudaStream_t stream;
  int device;
  void *ptr;
} workspace_entry;

static pthread_mutex_t workspace_lock = PTHREAD_MUTEX_INITIALIZER;
static workspace_entry *workspaces;
static size_t workspace_count, workspace_capacity;

static workspace_entry *find_workspace_locked(cudaStream_t stream) {
  for (size_t i = 0; i < workspace_count; ++i)
    if (workspaces[i].stream == stream) return &workspaces[i];
  return NULL;
}

/* The device of a stream that has a workspace, read from its entry. */
static bool workspace_device(cudaStream_t stream, int *device) {
  pthread_mutex_lock(&workspace_lock);
  const workspace_entry *e = find_workspace_locked(stream);
  if (e) *device = e->device;
  pthread_mutex_unlock(&workspace_lock);
  return e != NULL;
}

void *recap__gemm_stream_workspace(void *cuda_stream) {
  pthread_mutex_lock(&workspace_lock);
  workspace_entry *e = find_workspace_locked((cudaStream_t)cuda_stream);
  void *ptr = e ? e->ptr : NULL;
  pthread_mutex_unlock(&workspace_lock);
  return ptr;
}

recap_status recap__gemm_release_stream(void *cuda_stream) {
  pthread_mutex_lock(&workspace_lock);
  workspace_entry *e = find_workspace_locked((cudaStream_t)cuda_stream);
  workspace_entry gone = e ? *e : (workspace_entry){0};
  pthread_mutex_unlock(&workspace_lock);
  if (!gone.ptr) return RECAP_OK;
  /* cudaFree synchronizes the device, which would invalidate any capture: wait for other
   * threads' captures to end, outside workspace_lock (a capturing thread may need it). */
  if (!recap__unsafe_enter_wait())
    return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                      "gemm: cannot free a stream's workspace while this thread is capturing");
  recap_status st = recap__cuda_backend.mem_free(gone.device, gone.ptr);
  recap__unsafe_exit();
  if (st != RECAP_OK) return st;
  pthread_mutex_lock(&workspace_lock);
  e = find_workspace_locked((cudaStream_t)cuda_stream);
  if (e) *e = workspaces[--workspace_count];
  pthread_mutex_unlock(&workspace_lock);
  return RECAP_OK;
}

/* ---- one launch's context -------------------------------------------------------------------- */

typedef struct {
  cudaStream_t stream;
  int device, previous_device;
  bool capturing;
  device_handles *handles;
  void *workspace;
} gemm_ctx;

static recap_status not_prepared(const char *what) {
  return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                    "gemm: %s not created before capture; run a warmup first", what);
}

/* Makes creating something safe for every capture: this stream's own capture refuses (with
 * the warmup hint); another thread's capture is waited out, since cublasCreate and cudaMalloc
 * may synchronize or free internally, which would invalidate it. On RECAP_OK the caller holds
 * the registry (recap__unsafe_enter_wait) and must call recap__unsafe_exit. Never called with
 * workspace_lock held: a capturing thread needs that lock to finish its capture. */
static recap_status enter_creation(const gemm_ctx *ctx, const char *what) {
  if (ctx->capturing) return not_prepared(what);
  if (!recap__unsafe_enter_wait())
    return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                      "gemm: %s must be created but this thread is capturing; run a warmup "
                      "before the capture begins", what);
  return RECAP_OK;
}

static recap_status ensure_handles(gemm_ctx *ctx) {
  if (!tls_handles) {
    pthread_once(&key_once, make_key);
    tls_handles = calloc(1, sizeof *tls_handles);
    if (!tls_handles) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "gemm: no memory for handles");
    if (handles_key_ok) pthread_setspecific(handles_key, tls_handles);
  }
  device_handles *h = &tls_handles->dev[ctx->device];
  ctx->handles = h;
  if (h->blas && h->lt) return RECAP_OK;
  RECAP_TRY(enter_creation(ctx, "cuBLASLt handle"));
  recap_status st = RECAP_OK;
  if (!h->lt) RECAP_CUBLAS_TRY_GOTO(st, cublasLtCreate(&h->lt), done);
  if (!h->blas) {
    RECAP_CUBLAS_TRY_GOTO(st, cublasCreate(&h->blas), done);
    /* f16/bf16 products must reduce in f32 (the host reference does), not in half. */
    RECAP_CUBLAS_TRY_GOTO(
        st,
        cublasSetMathMode(h->blas,
                          CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION),
        done);
  }
done:
  recap__unsafe_exit();
  return st;
}

static recap_status ensure_workspace(gemm_ctx *ctx) {
  pthread_mutex_lock(&workspace_lock);
  workspace_entry *e = find_workspace_locked(ctx->stream);
  if (e) ctx->workspace = e->ptr;
  pthread_mutex_unlock(&workspace_lock);
  if (ctx->workspace) return RECAP_OK;

  RECAP_TRY(enter_creation(ctx, "the stream's GEMM workspace"));
  void *ptr = NULL;
  recap_status st = recap__cuda_backend.mem_alloc(ctx->device, RECAP_GEMM_WORKSPACE_BYTES, &ptr);
  recap__unsafe_exit();
  if (st != RECAP_OK)
    return recap__error_context(st, "gemm: workspace of %zu bytes for a stream on device %d: ",
                                RECAP_GEMM_WORKSPACE_BYTES, ctx->device);
  pthread_mutex_lock(&workspace_lock);
  /* A stream is used by one thread at a time, so nobody else added an entry meanwhile. */
  if (workspace_count == workspace_capacity) {
    size_t cap = workspace_capacity ? workspace_capacity * 2 : 8;
    workspace_entry *grown = realloc(workspaces, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&workspace_lock);
      if (recap__unsafe_enter_wait()) {
        recap__cuda_backend.mem_free(ctx->device, ptr);
        recap__unsafe_exit();
      }
      return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "gemm: no memory for the workspace table");
    }
    workspaces = grown;
    workspace_capacity = cap;
  }
  workspaces[workspace_count++] = (workspace_entry){ctx->stream, ctx->device, ptr};
  ctx->workspace = ptr;
  pthread_mutex_unlock(&workspace_lock);
  return RECAP_OK;
}

/* Makes the stream's device current (restored by ctx_close) and readies handles and the
 * workspace. */
static recap_status ctx_open(gemm_ctx *ctx, cudaStream_t stream) {
  *ctx = (gemm_ctx){.stream = stream, .previous_device = -1};
  if (!stream)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "gemm: the legacy default stream is never used; pass a stream");
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  RECAP_CUDA_TRY(cudaStreamIsCapturing(stream, &cs));
  ctx->capturing = cs != cudaStreamCaptureStatusNone;
  /* cudaStreamGetDevice is refused on a capturing stream, and the refusal invalidates the
   * capture; the warmup recorded the device with the stream's workspace, and a stream without
   * one is not ready for capture anyway. */
  if (ctx->capturing) {
    if (!workspace_device(stream, &ctx->device))
      return not_prepared("the stream's GEMM workspace");
  } else {
    RECAP_CUDA_TRY(cudaStreamGetDevice(stream, &ctx->device));
  }
  if (ctx->device < 0 || ctx->device >= MAX_DEVICES)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "gemm: device %d is beyond the %d supported",
                      ctx->device, MAX_DEVICES);
  int current = 0;
  RECAP_CUDA_TRY(cudaGetDevice(&current));
  if (current != ctx->device) {
    RECAP_CUDA_TRY(cudaSetDevice(ctx->device));
    ctx->previous_device = current;
  }
  recap_status st = ensure_handles(ctx);
  if (st == RECAP_OK) st = ensure_workspace(ctx);
  if (st != RECAP_OK && ctx->previous_device >= 0) cudaSetDevice(ctx->previous_device);
  return st;
}

static void ctx_close(gemm_ctx *ctx) {
  if (ctx->previous_device >= 0) cudaSetDevice(ctx->previous_device);
}

/* ---- shared helpers ---------------------------------------------------------------------- */

static cudaDataType_t cuda_type(recap_dtype dtype) {
  switch (dtype) {
    case RECAP_DTYPE_F16: return CUDA_R_16F;
    case RECAP_DTYPE_BF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

static cublasComputeType_t compute_type(recap_dtype dtype) {
  return dtype == RECAP_DTYPE_F32 && recap__gemm_allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                              : CUBLAS_COMPUTE_32F;
}

/* The column-major view of the plan: cuBLAS's A is our B^T, its B is our A^T. */
typedef struct {
  cublasOperation_t op_a, op_b;
  uint64_t a_rows, a_cols, b_rows, b_cols;
  int64_t lda, ldb;
} colmajor_view;

static colmajor_view view_of(const recap__gemm_plan *p) {
  colmajor_view v;
  bool row_major;
  int64_t ld;
  /* Our B [k, n] stored row-major is, read column-major, the n x k matrix B^T: no op. */
  recap__gemm_operand_layout(p->k, p->n, p->b_rs, p->b_cs, &row_major, &ld);
  v.op_a = row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  v.a_rows = (uint64_t)(row_major ? p->n : p->k);
  v.a_cols = (uint64_t)(row_major ? p->k : p->n);
  v.lda = ld;
  recap__gemm_operand_layout(p->m, p->k, p->a_rs, p->a_cs, &row_major, &ld);
  v.op_b = row_major ? CUBLAS_OP_N : CUBLAS_OP_T;
  v.b_rows = (uint64_t)(row_major ? p->k : p->m);
  v.b_cols = (uint64_t)(row_major ? p->m : p->k);
  v.ldb = ld;
  return v;
}

/* The largest power of two (up to 256) dividing the address and every batch step in bytes:
 * what cuBLASLt may assume about the operand at every batch entry. */
static uint32_t alignment_of(const void *ptr, const int64_t bs[2], size_t elem) {
  uint64_t bits = (uint64_t)(uintptr_t)ptr | (uint64_t)bs[0] * elem | (uint64_t)bs[1] * elem;
  uint32_t align = 256;
  while (align > 1 && (bits & (align - 1))) align >>= 1;
  return align;
}

/* ---- cuBLASLt ------------------------------------------------------------------------------ */

typedef struct {
  int64_t device, dtype, compute, op_a, op_b, epilogue;
  int64_t a_rows, a_cols, lda, b_rows, b_cols, ldb, m, n, batch;
  int64_t stride_a, stride_b, stride_d;
  int64_t align_a, align_b, align_c, align_d, align_bias;
} lt_key;

typedef struct lt_entry {
  lt_key key;
  cublasLtMatmulAlgo_t algo;
  struct lt_entry *next;
} lt_entry;

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static lt_entry *cache[CACHE_BUCKETS];

static size_t key_hash(const lt_key *key) {
  const unsigned char *bytes = (const unsigned char *)key;
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < sizeof *key; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return (size_t)(h % CACHE_BUCKETS);
}

static bool cache_find(const lt_key *key, cublasLtMatmulAlgo_t *algo) {
  pthread_mutex_lock(&cache_lock);
  const lt_entry *e = cache[key_hash(key)];
  while (e && memcmp(&e->key, key, sizeof *key) != 0) e = e->next;
  if (e) *algo = e->algo;
  pthread_mutex_unlock(&cache_lock);
  return e != NULL;
}

static recap_status cache_insert(const lt_key *key, const cublasLtMatmulAlgo_t *algo) {
  lt_entry *e = malloc(sizeof *e);
  if (!e) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "gemm: no memory for the algorithm cache");
  e->key = *key;
  e->algo = *algo;
  const size_t b = key_hash(key);
  pthread_mutex_lock(&cache_lock);
  e->next = cache[b];
  cache[b] = e;
  pthread_mutex_unlock(&cache_lock);
  return RECAP_OK;
}

static cublasLtEpilogue_t lt_epilogue(const recap__gemm_plan *p, bool *needs_kernel) {
  const bool bias = p->bias != NULL;
  *needs_kernel = false;
  switch (p->act) {
    case RECAP_ACT_NONE: return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case RECAP_ACT_RELU: return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case RECAP_ACT_GELU_TANH: return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    default:
      *needs_kernel = true;
      return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
}

#define LT_SET(st, fn, obj, attr, value, label) \
  RECAP_CUBLAS_TRY_GOTO(st, fn(obj, attr, &(value), sizeof(value)), label)

/* Runs (or, with run == false, only chooses and caches the algorithm for) the plan's inner
 * batch at the given pointers. */
static recap_status lt_matmul(gemm_ctx *ctx, const recap__gemm_plan *p, const void *a,
                              const void *b, const void *c, void *out, bool run) {
  recap_status st = RECAP_OK;
  cublasLtMatmulDesc_t desc = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, lcd = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  const cudaDataType_t type = cuda_type(p->dtype);
  const cublasComputeType_t compute = compute_type(p->dtype);
  const colmajor_view v = view_of(p);
  const size_t es = recap_dtype_size(p->dtype);
  bool needs_kernel;
  const cublasLtEpilogue_t epilogue = lt_epilogue(p, &needs_kernel);
  (void)needs_kernel;
  /* Heuristics only read the bias pointer's alignment; before binding, assume 256 bytes. */
  const void *bias = p->bias                              ? p->bias
                     : (epilogue & CUBLASLT_EPILOGUE_BIAS) ? (const void *)(uintptr_t)256
                                                           : NULL;

  RECAP_CUBLAS_TRY_GOTO(st, cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F), done);
  LT_SET(st, cublasLtMatmulDescSetAttribute, desc, CUBLASLT_MATMUL_DESC_TRANSA, v.op_a, done);
  LT_SET(st, cublasLtMatmulDescSetAttribute, desc, CUBLASLT_MATMUL_DESC_TRANSB, v.op_b, done);
  LT_SET(st, cublasLtMatmulDescSetAttribute, desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, done);
  if (bias) LT_SET(st, cublasLtMatmulDescSetAttribute, desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                   bias, done);
  RECAP_CUBLAS_TRY_GOTO(st, cublasLtMatrixLayoutCreate(&la, type, v.a_rows, v.a_cols, v.lda), done);
  RECAP_CUBLAS_TRY_GOTO(st, cublasLtMatrixLayoutCreate(&lb, type, v.b_rows, v.b_cols, v.ldb), done);
  RECAP_CUBLAS_TRY_GOTO(
      st, cublasLtMatrixLayoutCreate(&lcd, type, (uint64_t)p->n, (uint64_t)p->m, p->n), done);
  if (p->batch[1] > 1) {
    const int32_t count = (int32_t)p->batch[1];
    LT_SET(st, cublasLtMatrixLayoutSetAttribute, la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count, done);
    LT_SET(st, cublasLtMatrixLayoutSetAttribute, lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count, done);
    LT_SET(st, cublasLtMatrixLayoutSetAttribute, lcd, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count,
           done);
    LT_SET(st, cublasLtMatrixLayoutSetAttribute, la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
           p->b_bs[1], done);
    LT_SET(st, cublasLtMatrixLayoutSetAttribute, lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
           p->a_bs[1], done);
    LT_SET(st, cublasLtMatrixLayoutSetAttribute, lcd, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
           p->out_bs[1], done);
  }

  /* Every member is an int64_t, so the key has no padding and memcmp compares it whole. */
  const lt_key key = {
      .device = ctx->device, .dtype = p->dtype, .compute = compute, .op_a = v.op_a,
      .op_b = v.op_b, .epilogue = epilogue, .a_rows = (int64_t)v.a_rows,
      .a_cols = (int64_t)v.a_cols, .lda = v.lda, .b_rows = (int64_t)v.b_rows,
      .b_cols = (int64_t)v.b_cols, .ldb = v.ldb, .m = p->m, .n = p->n, .batch = p->batch[1],
      .stride_a = p->b_bs[1], .stride_b = p->a_bs[1], .stride_d = p->out_bs[1],
      .align_a = alignment_of(b, p->b_bs, es), .align_b = alignment_of(a, p->a_bs, es),
      .align_c = alignment_of(c ? c : out, p->out_bs, es),
      .align_d = alignment_of(out, p->out_bs, es),
      .align_bias = bias ? alignment_of(bias, (const int64_t[2]){0, 0}, es) : 0,
  };
  cublasLtMatmulAlgo_t algo;
  if (!cache_find(&key, &algo)) {
    if (ctx->capturing) {
      st = RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                      "gemm: no cuBLASLt algorithm chosen for this shape (m=%lld n=%lld k=%lld "
                      "batch=%lld %s) before capture; run a warmup first",
                      (long long)p->m, (long long)p->n, (long long)p->k, (long long)p->batch[1],
                      recap_dtype_name(p->dtype));
      goto done;
    }
    const uint64_t ws_bytes = RECAP_GEMM_WORKSPACE_BYTES;
    const uint32_t al_a = (uint32_t)key.align_a, al_b = (uint32_t)key.align_b,
                   al_c = (uint32_t)key.align_c, al_d = (uint32_t)key.align_d;
    RECAP_CUBLAS_TRY_GOTO(st, cublasLtMatmulPreferenceCreate(&pref), done);
    LT_SET(st, cublasLtMatmulPreferenceSetAttribute, pref,
           CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ws_bytes, done);
    LT_SET(st, cublasLtMatmulPreferenceSetAttribute, pref,
           CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al_a, done);
    LT_SET(st, cublasLtMatmulPreferenceSetAttribute, pref,
           CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al_b, done);
    LT_SET(st, cublasLtMatmulPreferenceSetAttribute, pref,
           CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al_c, done);
    LT_SET(st, cublasLtMatmulPreferenceSetAttribute, pref,
           CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al_d, done);
    if (p->dtype != RECAP_DTYPE_F32) {
      /* Split-K partial sums stay in f32, as the host reference keeps them. */
      const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
      LT_SET(st, cublasLtMatmulPreferenceSetAttribute, pref,
             CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, mask, done);
    }
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    RECAP_CUBLAS_TRY_GOTO(st,
                          cublasLtMatmulAlgoGetHeuristic(ctx->handles->lt, desc, la, lb, lcd, lcd,
                                                         pref, 1, &result, &found),
                          done);
    if (found < 1) {
      st = RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "gemm: cuBLASLt has no algorithm for m=%lld n=%lld k=%lld batch=%lld %s",
                      (long long)p->m, (long long)p->n, (long long)p->k, (long long)p->batch[1],
                      recap_dtype_name(p->dtype));
      goto done;
    }
    algo = result.algo;
    RECAP_TRY_GOTO(st, cache_insert(&key, &algo), done);
  }
  if (run) {
    const float alpha = p->alpha, beta = c ? p->beta : 0.0f;
    RECAP_CUBLAS_TRY_GOTO(st,
                          cublasLtMatmul(ctx->handles->lt, desc, &alpha, b, la, a, lb, &beta,
                                         c ? c : out, lcd, out, lcd, &algo, ctx->workspace,
                                         RECAP_GEMM_WORKSPACE_BYTES, ctx->stream),
                          done);
  }
done:
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (lcd) cublasLtMatrixLayoutDestroy(lcd);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (desc) cublasLtMatmulDescDestroy(desc);
  return st;
}

/* ---- cuBLAS -------------------------------------------------------------------------------- */

/* out (already holding c when beta != 0) = alpha * A B + beta * out for the inner batch. */
static recap_status blas_matmul(gemm_ctx *ctx, const recap__gemm_plan *p, const void *a,
                                const void *b, void *out) {
  device_handles *h = ctx->handles;
  if (h->blas_stream != ctx->stream || h->blas_workspace != ctx->workspace) {
    RECAP_CUBLAS_TRY(cublasSetStream(h->blas, ctx->stream));
    /* cublasSetStream just reset the workspace to cuBLAS's own: give it ours again. */
    RECAP_CUBLAS_TRY(cublasSetWorkspace(h->blas, ctx->workspace, RECAP_GEMM_WORKSPACE_BYTES));
    h->blas_stream = ctx->stream;
    h->blas_workspace = ctx->workspace;
  }
  const colmajor_view v = view_of(p);
  if (p->m > INT_MAX || p->n > INT_MAX || p->k > INT_MAX || v.lda > INT_MAX || v.ldb > INT_MAX ||
      p->batch[1] > INT_MAX)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "gemm: dimensions beyond 2^31 need the cuBLASLt path (m=%lld n=%lld "
                      "k=%lld)", (long long)p->m, (long long)p->n, (long long)p->k);
  const cudaDataType_t type = cuda_type(p->dtype);
  const float alpha = p->alpha, beta = p->c ? p->beta : 0.0f;
  const int m = (int)p->n, n = (int)p->m, k = (int)p->k;
  if (p->batch[1] == 1) {
    RECAP_CUBLAS_TRY(cublasGemmEx(h->blas, v.op_a, v.op_b, m, n, k, &alpha, b, type, (int)v.lda,
                                  a, type, (int)v.ldb, &beta, out, type, m,
                                  compute_type(p->dtype), CUBLAS_GEMM_DEFAULT));
  } else {
    RECAP_CUBLAS_TRY(cublasGemmStridedBatchedEx(
        h->blas, v.op_a, v.op_b, m, n, k, &alpha, b, type, (int)v.lda, p->b_bs[1], a, type,
        (int)v.ldb, p->a_bs[1], &beta, out, type, m, p->out_bs[1], (int)p->batch[1],
        compute_type(p->dtype), CUBLAS_GEMM_DEFAULT));
  }
  return RECAP_OK;
}

/* ---- entry points -------------------------------------------------------------------------- */

/* Whether a bound plan runs the skinny kernel (see the top of this file). */
static bool use_skinny(const recap__gemm_plan *p) {
  if (recap__gemm_library() != RECAP_GEMM_LIBRARY_CUBLASLT) return false;
  const char *env = getenv("RECAP_GEMM_SKINNY");
  if (env && strcmp(env, "0") == 0) return false;
  return recap__cuda_gemm_skinny_fits(p);
}

static recap_status gemm_run(const recap_op_call *call, void *cuda_stream, bool run) {
  recap__gemm_plan p;
  RECAP_TRY(recap__gemm_plan_make(call, &p));
  if (run && (!p.a || !p.b || !p.out))
    return RECAP_OP_FAIL(call, "tensors are not bound to memory");
  if (run && !recap__tensor_is_contiguous(&call->outputs[0]))
    return RECAP_OP_FAIL(call, "the output must be contiguous, as infer describes it");
  RECAP_NVTX_SCOPE(run ? "recap gemm" : "recap gemm prepare");
  gemm_ctx ctx;
  RECAP_TRY(ctx_open(&ctx, (cudaStream_t)cuda_stream));
  recap_status st = RECAP_OK;
  const bool use_lt = recap__gemm_library() == RECAP_GEMM_LIBRARY_CUBLASLT;
  if (!run) {
    /* Either library may be chosen before the capture: ready both (cuBLAS needs no more). */
    st = lt_matmul(&ctx, &p, p.a, p.b, p.c, p.out, false);
    goto done;
  }
  if (use_skinny(&p)) {
    st = recap__cuda_gemm_skinny(&p, ctx.device, ctx.stream);
    goto done;
  }
  const size_t es = recap_dtype_size(p.dtype);
  const int64_t total_rows = p.m * p.batch[0] * p.batch[1];
  if (!use_lt && p.c && p.c != p.out)
    RECAP_CUDA_TRY_GOTO(st,
                        cudaMemcpyAsync(p.out, p.c, (size_t)(total_rows * p.n) * es,
                                        cudaMemcpyDeviceToDevice, ctx.stream),
                        done);
  for (int64_t ob = 0; ob < p.batch[0]; ++ob) {
    const char *a = (const char *)p.a + ob * p.a_bs[0] * (int64_t)es;
    const char *b = (const char *)p.b + ob * p.b_bs[0] * (int64_t)es;
    char *out = (char *)p.out + ob * p.out_bs[0] * (int64_t)es;
    const char *c = p.c ? (const char *)p.c + ob * p.out_bs[0] * (int64_t)es : NULL;
    if (use_lt)
      RECAP_TRY_GOTO(st, lt_matmul(&ctx, &p, a, b, c, out, true), done);
    else
      RECAP_TRY_GOTO(st, blas_matmul(&ctx, &p, a, b, out), done);
  }
  bool needs_kernel = false;
  if (use_lt) lt_epilogue(&p, &needs_kernel);
  else needs_kernel = p.bias || p.act != RECAP_ACT_NONE;
  if (needs_kernel)
    RECAP_TRY_GOTO(st,
                   recap__cuda_gemm_bias_act(p.out, use_lt ? NULL : p.bias, p.dtype, total_rows,
                                             p.n, p.act, ctx.stream),
                   done);
done:
  ctx_close(&ctx);
  return st;
}

recap_status recap__cuda_gemm(const recap_op_call *call, void *cuda_stream) {
  return gemm_run(call, cuda_stream, true);
}

recap_status recap__cuda_gemm_prepare(const recap_op_call *call, void *cuda_stream) {
  return gemm_run(call, cuda_stream, false);
}
