/*
 * cublaslt.c: matmul and linear on CUDA through cuBLASLt (default) or cuBLAS (CUDA builds
 * only; gemm.h describes the ops and the plan): handles, workspaces, a plan's cuBLASLt problem,
 * its heuristics and their variants, and running what choose.c chose for it. choose.c is the
 * only file above this one; cublaslt.h is what it uses of it.
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
 * - Algorithms: cuBLASLt's heuristic (cublasLtMatmulAlgoGetHeuristic) is asked outside capture
 *   only, and its choice is cached (choose.c) under a key holding everything that shapes it
 *   (dtype, compute type, transposes, dims, leading dims, batch, strides, epilogue, pointer
 *   alignments: recap__lt_key).
 * Inside a capture, anything missing fails with RECAP_STATUS_ILLEGAL_DURING_CAPTURE and a
 * message asking for a warmup; no call that would invalidate the capture is made.
 *
 * The launch path (eager launches; replays never come here) takes no lock, allocates nothing
 * and hashes nothing once a thread has seen a stream and a problem: each thread keeps its last
 * streams' workspaces (here) and its last problems' choices (choose.c) in small tables of its
 * own (a linear scan with memcmp), checked against generation counters that a released stream
 * or a reset bumps. cuBLASLt descriptors live on the stack (the *Init functions), not the
 * heap. A miss takes one lock (the process-wide table) and refills the thread's table.
 *
 * Row-major data: a row-major [m, n] product C = A B is the column-major product
 * C^T = B^T A^T, so cuBLAS sees m' = n, n' = m, with B as its first operand.
 *
 * Epilogues: bias, relu(+bias) and, for f16/bf16, gelu_tanh(+bias) fuse into cuBLASLt's
 * epilogue (its GELU is the tanh approximation, coarser than f32 needs). gelu (erf form, PyTorch's
 * default), silu, sigmoid and tanh run the bias epilogue and then our in-place kernel
 * (epilogue.cu). The cuBLAS path runs that kernel for bias and activation. A linear's residual
 * (with or without a bias) is cuBLASLt's C (beta = 1: D = A B + C + bias, one rounding) when
 * there is no activation; after an activation, or after cuBLAS, the epilogue kernel adds it.
 * The skinny and Hopper kernels add it in their own epilogues.
 */
#include "kernels/gemm/cublaslt.h"

#include <cuda_runtime_api.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm/cuda_blas.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/tune.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/cuda_check.h"
#include "runtime/stream_hooks.h"
#include "runtime/versions.h"

/* ---- versions ------------------------------------------------------------------------------ */

/* Asking the versions opens the libraries (cuda_blas.h): `recap info` reports them, while a
 * process that runs no GEMM on a GPU never maps them. */
void recap__gemm_blas_versions(int *cublas, int *cublaslt) {
  *cublas = *cublaslt = 0;
  if (!recap__blas_try_load()) return;
  int major = 0, minor = 0, patch = 0;
  if (recap__blas.cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      recap__blas.cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      recap__blas.cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    *cublas = major * 10000 + minor * 100 + patch;
  *cublaslt = (int)recap__blas.cublasLtGetVersion();
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

/* ---- per-thread state ---------------------------------------------------------------------- */

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t handles_key;
static int handles_key_ok;
static _Thread_local recap__gemm_thread *tls_state;

/* Bumped when a stream's workspace is released: every thread's remembered copies older than
 * the counter are misses. Starts at 1 so that a zeroed slot never matches. */
static atomic_uint_fast64_t workspace_generation = 1;

/* Thread exit: the handles belong to this thread alone. */
static void destroy_thread_state(void *ptr) {
  recap__gemm_thread *t = ptr;
  int prev = -1;
  cudaGetDevice(&prev);
  for (int d = 0; d < RECAP__GEMM_MAX_DEVICES; ++d) {
    if (!t->dev[d].blas && !t->dev[d].lt) continue;
    cudaSetDevice(d);
    /* A handle exists only if the libraries were loaded. */
    if (t->dev[d].blas) recap__blas.cublasDestroy(t->dev[d].blas);
    if (t->dev[d].lt) recap__blas.cublasLtDestroy(t->dev[d].lt);
  }
  if (prev >= 0) cudaSetDevice(prev);
  cudaGetLastError();
  free(t);
}

static void make_key(void) {
  handles_key_ok = pthread_key_create(&handles_key, destroy_thread_state) == 0;
}

static recap_status get_thread_state(recap__gemm_thread **out) {
  if (!tls_state) {
    pthread_once(&key_once, make_key);
    tls_state = calloc(1, sizeof *tls_state);
    if (!tls_state)
      return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "gemm: no memory for per-thread handles");
    if (handles_key_ok) pthread_setspecific(handles_key, tls_state);
  }
  *out = tls_state;
  return RECAP_OK;
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

/* The process-wide entry of a stream, copied out under the lock. */
static bool workspace_lookup(cudaStream_t stream, workspace_entry *out) {
  pthread_mutex_lock(&workspace_lock);
  const workspace_entry *e = find_workspace_locked(stream);
  if (e) *out = *e;
  pthread_mutex_unlock(&workspace_lock);
  return e != NULL;
}

void *recap__gemm_stream_workspace(void *cuda_stream) {
  workspace_entry e;
  return workspace_lookup((cudaStream_t)cuda_stream, &e) ? e.ptr : NULL;
}

recap_status recap__gemm_release_stream(void *cuda_stream) {
  workspace_entry gone = {0};
  if (!workspace_lookup((cudaStream_t)cuda_stream, &gone)) return RECAP_OK;
  /* cudaFree synchronizes the device, which would invalidate any capture: wait for other
   * threads' captures to end, outside workspace_lock (a capturing thread may need it). */
  if (!recap__unsafe_enter_wait())
    return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                      "gemm: cannot free a stream's workspace while this thread is capturing");
  pthread_mutex_lock(&workspace_lock);
  workspace_entry *e = find_workspace_locked((cudaStream_t)cuda_stream);
  if (e) *e = workspaces[--workspace_count];
  /* Every thread's remembered copy of this stream is now stale. */
  atomic_fetch_add(&workspace_generation, 1);
  pthread_mutex_unlock(&workspace_lock);
  const recap_status st = recap__cuda_backend.mem_free(gone.device, gone.ptr);
  recap__unsafe_exit();
  return st;
}

static recap__gemm_stream_slot *thread_stream_find(recap__gemm_thread *t, cudaStream_t stream) {
  const uint64_t gen = atomic_load_explicit(&workspace_generation, memory_order_acquire);
  for (int i = 0; i < RECAP__GEMM_THREAD_STREAMS; ++i)
    if (t->streams[i].stream == stream && t->streams[i].generation == gen) return &t->streams[i];
  return NULL;
}

static void thread_stream_store(recap__gemm_thread *t, const workspace_entry *e, uint64_t gen) {
  recap__gemm_stream_slot *slot = &t->streams[t->next_stream++ % RECAP__GEMM_THREAD_STREAMS];
  *slot = (recap__gemm_stream_slot){e->stream, e->device, e->ptr, gen};
}

/* ---- one launch's context -------------------------------------------------------------------- */

static recap_status not_prepared(const char *what) {
  return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                    "gemm: %s not created before capture; run a warmup first", what);
}

/* Makes creating something safe for every capture: this stream's own capture refuses (with
 * the warmup hint); another thread's capture is waited out, since cublasCreate and cudaMalloc
 * may synchronize or free internally, which would invalidate it. On RECAP_OK the caller holds
 * the registry (recap__unsafe_enter_wait) and must call recap__unsafe_exit. Never called with
 * workspace_lock held: a capturing thread needs that lock to finish its capture. */
static recap_status enter_creation(const recap__gemm_ctx *ctx, const char *what) {
  if (ctx->capturing) return not_prepared(what);
  if (!recap__unsafe_enter_wait())
    return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                      "gemm: %s must be created but this thread is capturing; run a warmup "
                      "before the capture begins",
                      what);
  return RECAP_OK;
}

static recap_status ensure_handles(recap__gemm_ctx *ctx) {
  recap__gemm_handles *h = &ctx->thread->dev[ctx->device];
  ctx->handles = h;
  if (h->blas && h->lt) return RECAP_OK;
  RECAP_TRY(enter_creation(ctx, "cuBLASLt handle"));
  recap_status st = RECAP_OK;
  /* The first handles of the process open cuBLAS (cuda_blas.h); every later call into it
   * comes after this. */
  RECAP_TRY_GOTO(st, recap__blas_load(), done);
  if (!h->lt) RECAP_CUBLAS_TRY_GOTO(st, recap__blas.cublasLtCreate(&h->lt), done);
  if (!h->blas) {
    RECAP_CUBLAS_TRY_GOTO(st, recap__blas.cublasCreate(&h->blas), done);
    /* f16/bf16 products must reduce in f32 (the host reference does), not in half. */
    RECAP_CUBLAS_TRY_GOTO(
        st,
        recap__blas.cublasSetMathMode(
            h->blas, CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION),
        done);
  }
done:
  recap__unsafe_exit();
  return st;
}

/* The stream's workspace (and, inside a capture, its device) from the thread's table, else
 * the process-wide one (one lock), else a new allocation outside capture. */
static recap_status ensure_workspace(recap__gemm_ctx *ctx, const recap__gemm_stream_slot *known) {
  if (known) {
    ctx->workspace = known->ptr;
    return RECAP_OK;
  }
  const uint64_t gen = atomic_load_explicit(&workspace_generation, memory_order_acquire);
  workspace_entry e;
  if (workspace_lookup(ctx->stream, &e) && e.device == ctx->device) {
    ctx->workspace = e.ptr;
    thread_stream_store(ctx->thread, &e, gen);
    return RECAP_OK;
  }

  RECAP_TRY(enter_creation(ctx, "the stream's GEMM workspace"));
  void *ptr = NULL;
  recap_status st = recap__cuda_backend.mem_alloc(ctx->device, RECAP_GEMM_WORKSPACE_BYTES, &ptr);
  recap__unsafe_exit();
  if (st != RECAP_OK)
    return recap__error_context(st, "gemm: workspace of %zu bytes for a stream on device %d: ",
                                RECAP_GEMM_WORKSPACE_BYTES, ctx->device);
  pthread_mutex_lock(&workspace_lock);
  /* A stream is used by one thread at a time, so nobody else added an entry meanwhile. An
   * entry there is of a destroyed stream whose handle CUDA gave out again on another device
   * (without the release hook: a stream recap did not create): it goes. */
  workspace_entry *old = find_workspace_locked(ctx->stream);
  workspace_entry stale = {0};
  if (old) {
    stale = *old;
    *old = workspaces[--workspace_count];
    atomic_fetch_add(&workspace_generation, 1);
  }
  if (workspace_count == workspace_capacity) {
    size_t cap = workspace_capacity ? workspace_capacity * 2 : 8;
    workspace_entry *grown = realloc(workspaces, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&workspace_lock);
      if (recap__unsafe_enter_wait()) {
        recap__cuda_backend.mem_free(ctx->device, ptr);
        if (stale.ptr) recap__cuda_backend.mem_free(stale.device, stale.ptr);
        recap__unsafe_exit();
      }
      return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "gemm: no memory for the workspace table");
    }
    workspaces = grown;
    workspace_capacity = cap;
  }
  e = (workspace_entry){ctx->stream, ctx->device, ptr};
  workspaces[workspace_count++] = e;
  const uint64_t now = atomic_load(&workspace_generation);
  pthread_mutex_unlock(&workspace_lock);
  if (stale.ptr && recap__unsafe_enter_wait()) {
    recap__cuda_backend.mem_free(stale.device, stale.ptr);
    recap__unsafe_exit();
  }
  ctx->workspace = ptr;
  thread_stream_store(ctx->thread, &e, now);
  return RECAP_OK;
}

recap_status recap__gemm_ctx_open(recap__gemm_ctx *ctx, cudaStream_t stream) {
  *ctx = (recap__gemm_ctx){.stream = stream, .previous_device = -1};
  if (!stream)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "gemm: the legacy default stream is never used; pass a stream");
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  RECAP_CUDA_TRY(cudaStreamIsCapturing(stream, &cs));
  ctx->capturing = cs != cudaStreamCaptureStatusNone;
  RECAP_TRY(get_thread_state(&ctx->thread));
  const recap__gemm_stream_slot *known = thread_stream_find(ctx->thread, stream);
  /* cudaStreamGetDevice is refused on a capturing stream, and the refusal invalidates the
   * capture; the warmup recorded the device with the stream's workspace, and a stream without
   * one is not ready for capture anyway. */
  if (ctx->capturing) {
    workspace_entry e;
    if (known) {
      ctx->device = known->device;
    } else if (workspace_lookup(stream, &e)) {
      ctx->device = e.device;
    } else {
      return not_prepared("the stream's GEMM workspace");
    }
  } else {
    RECAP_CUDA_TRY(cudaStreamGetDevice(stream, &ctx->device));
    /* A stream handle CUDA handed out again on another device is a new stream. */
    if (known && known->device != ctx->device) known = NULL;
  }
  if (ctx->device < 0 || ctx->device >= RECAP__GEMM_MAX_DEVICES)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "gemm: device %d is beyond the %d supported",
                      ctx->device, RECAP__GEMM_MAX_DEVICES);
  int current = 0;
  RECAP_CUDA_TRY(cudaGetDevice(&current));
  if (current != ctx->device) {
    RECAP_CUDA_TRY(cudaSetDevice(ctx->device));
    ctx->previous_device = current;
  }
  recap_status st = ensure_handles(ctx);
  if (st == RECAP_OK) st = ensure_workspace(ctx, known);
  if (st != RECAP_OK && ctx->previous_device >= 0) cudaSetDevice(ctx->previous_device);
  return st;
}

void recap__gemm_ctx_close(recap__gemm_ctx *ctx) {
  if (ctx->previous_device >= 0) cudaSetDevice(ctx->previous_device);
}

/* ---- shared helpers ---------------------------------------------------------------------- */

static cudaDataType_t cuda_type(recap_dtype dtype) {
  switch (dtype) {
    case RECAP_DTYPE_F16:
      return CUDA_R_16F;
    case RECAP_DTYPE_BF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
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

/* Whether a plan may run our Hopper kernel on the device (choose.c's top comment says when it
 * is chosen). */
static bool hopper_allowed(const recap__gemm_plan *p, int device) {
  return recap__gemm_env_get()->hopper && recap__cuda_gemm_hopper_fits(p, device);
}

/* ---- the cuBLASLt problem ------------------------------------------------------------------- */

static cublasLtEpilogue_t lt_epilogue(const recap__gemm_plan *p, bool *needs_kernel) {
  const bool bias = p->bias != NULL;
  *needs_kernel = false;
  /* cuBLASLt adds C before its activation; the residual comes after. */
  if (p->residual && p->act != RECAP_ACT_NONE) {
    *needs_kernel = true;
    return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
  switch (p->act) {
    case RECAP_ACT_NONE:
      return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case RECAP_ACT_RELU:
      return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case RECAP_ACT_GELU_TANH:
      /* cuBLASLt's GELU is coarser than tanhf: in f32, GPT-2's logits were 1.3e-5 from
       * float64 through it and 1.4e-6 through our kernel (transformers' own f32: 1.8e-6). Its
       * error is below f16/bf16 rounding, so those keep the fused epilogue. */
      if (p->dtype == RECAP_DTYPE_F32) {
        *needs_kernel = true;
        return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
      }
      return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    default:
      *needs_kernel = true;
      return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
}

/* fn: a cuBLASLt *SetAttribute function, called through recap__blas (cuda_blas.h). */
#define LT_SET(fn, obj, attr, value) \
  RECAP_CUBLAS_TRY(recap__blas.fn(obj, attr, &(value), sizeof(value)))

recap_status recap__lt_problem_init(const recap__gemm_ctx *ctx, const recap__gemm_plan *p,
                                    recap__lt_problem *pr) {
  const cudaDataType_t type = cuda_type(p->dtype);
  const cublasComputeType_t compute = compute_type(p->dtype);
  const colmajor_view v = view_of(p);
  const size_t es = recap_dtype_size(p->dtype);
  const cublasLtEpilogue_t epilogue = lt_epilogue(p, &pr->needs_kernel);
  const bool residual_as_c = p->residual && p->act == RECAP_ACT_NONE;
  pr->c = p->c ? p->c : residual_as_c ? p->residual : NULL;
  pr->beta = p->c ? p->beta : residual_as_c ? 1.0f : 0.0f;
  /* Heuristics only read the bias pointer's alignment; before binding, assume 256 bytes. */
  const void *bias = p->bias                               ? p->bias
                     : (epilogue & CUBLASLT_EPILOGUE_BIAS) ? (const void *)(uintptr_t)256
                                                           : NULL;
  cublasLtMatmulDesc_t desc = &pr->desc;
  RECAP_CUBLAS_TRY(
      recap__blas.cublasLtMatmulDescInit_internal(desc, sizeof *desc, compute, CUDA_R_32F));
  LT_SET(cublasLtMatmulDescSetAttribute, desc, CUBLASLT_MATMUL_DESC_TRANSA, v.op_a);
  LT_SET(cublasLtMatmulDescSetAttribute, desc, CUBLASLT_MATMUL_DESC_TRANSB, v.op_b);
  LT_SET(cublasLtMatmulDescSetAttribute, desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  if (bias) LT_SET(cublasLtMatmulDescSetAttribute, desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  RECAP_CUBLAS_TRY(recap__blas.cublasLtMatrixLayoutInit_internal(&pr->la, sizeof pr->la, type,
                                                                 v.a_rows, v.a_cols, v.lda));
  RECAP_CUBLAS_TRY(recap__blas.cublasLtMatrixLayoutInit_internal(&pr->lb, sizeof pr->lb, type,
                                                                 v.b_rows, v.b_cols, v.ldb));
  RECAP_CUBLAS_TRY(recap__blas.cublasLtMatrixLayoutInit_internal(
      &pr->lcd, sizeof pr->lcd, type, (uint64_t)p->n, (uint64_t)p->m, p->n));
  if (p->batch[1] > 1) {
    const int32_t count = (int32_t)p->batch[1];
    LT_SET(cublasLtMatrixLayoutSetAttribute, &pr->la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count);
    LT_SET(cublasLtMatrixLayoutSetAttribute, &pr->lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count);
    LT_SET(cublasLtMatrixLayoutSetAttribute, &pr->lcd, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count);
    LT_SET(cublasLtMatrixLayoutSetAttribute, &pr->la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
           p->b_bs[1]);
    LT_SET(cublasLtMatrixLayoutSetAttribute, &pr->lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
           p->a_bs[1]);
    LT_SET(cublasLtMatrixLayoutSetAttribute, &pr->lcd, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
           p->out_bs[1]);
  }
  /* Every member is an int64_t, so the key has no padding and memcmp compares it whole. The
   * alignments cover every batch step of both levels, so one key serves the whole call. */
  memset(&pr->key, 0, sizeof pr->key);
  pr->key = (recap__lt_key){
      .device = ctx->device,
      .dtype = p->dtype,
      .compute = compute,
      .op_a = v.op_a,
      .op_b = v.op_b,
      .epilogue = epilogue,
      .a_rows = (int64_t)v.a_rows,
      .a_cols = (int64_t)v.a_cols,
      .lda = v.lda,
      .b_rows = (int64_t)v.b_rows,
      .b_cols = (int64_t)v.b_cols,
      .ldb = v.ldb,
      .m = p->m,
      .n = p->n,
      .batch = p->batch[1],
      .stride_a = p->b_bs[1],
      .stride_b = p->a_bs[1],
      .stride_d = p->out_bs[1],
      .align_a = alignment_of(p->b, p->b_bs, es),
      .align_b = alignment_of(p->a, p->a_bs, es),
      .align_c = alignment_of(pr->c ? pr->c : p->out, p->out_bs, es),
      .align_d = alignment_of(p->out, p->out_bs, es),
      .align_bias = bias ? alignment_of(bias, (const int64_t[2]){0, 0}, es) : 0,
      .op = p->op == RECAP__GEMM_LINEAR ? RECAP_TUNE_OP_LINEAR : RECAP_TUNE_OP_MATMUL,
      .has_c = pr->c != NULL,
      .act = p->act,
      .align_residual = p->residual ? alignment_of(p->residual, p->out_bs, es) : 0,
      .hopper_fits = hopper_allowed(p, ctx->device),
  };
  return RECAP_OK;
}

recap_status recap__lt_heuristics(const recap__gemm_ctx *ctx, const recap__gemm_plan *p,
                                  recap__lt_problem *pr, int want, uint64_t max_workspace,
                                  cublasLtMatmulHeuristicResult_t *results, int *found) {
  cublasLtMatmulPreferenceOpaque_t opaque;
  cublasLtMatmulPreference_t pref = &opaque;
  const uint64_t ws_bytes =
      max_workspace < RECAP_GEMM_WORKSPACE_BYTES ? max_workspace : RECAP_GEMM_WORKSPACE_BYTES;
  const uint32_t al_a = (uint32_t)pr->key.align_a, al_b = (uint32_t)pr->key.align_b,
                 al_c = (uint32_t)pr->key.align_c, al_d = (uint32_t)pr->key.align_d;
  RECAP_CUBLAS_TRY(recap__blas.cublasLtMatmulPreferenceInit_internal(pref, sizeof *pref));
  LT_SET(cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
         ws_bytes);
  LT_SET(cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
         al_a);
  LT_SET(cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
         al_b);
  LT_SET(cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
         al_c);
  LT_SET(cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
         al_d);
  if (p->dtype != RECAP_DTYPE_F32) {
    /* Split-K partial sums stay in f32, as the host reference keeps them. */
    const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
    LT_SET(cublasLtMatmulPreferenceSetAttribute, pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
           mask);
  }
  *found = 0;
  RECAP_CUBLAS_TRY(recap__blas.cublasLtMatmulAlgoGetHeuristic(ctx->handles->lt, &pr->desc, &pr->la,
                                                              &pr->lb, &pr->lcd, &pr->lcd, pref,
                                                              want, results, found));
  if (*found < 1)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "gemm: cuBLASLt has no algorithm for m=%lld n=%lld k=%lld batch=%lld %s",
                      (long long)p->m, (long long)p->n, (long long)p->k, (long long)p->batch[1],
                      recap_dtype_name(p->dtype));
  return RECAP_OK;
}

recap_status recap__lt_algo_config(const cublasLtMatmulAlgo_t *algo, int32_t config[9]) {
  static const cublasLtMatmulAlgoConfigAttributes_t attrs[9] = {
      CUBLASLT_ALGO_CONFIG_ID,
      CUBLASLT_ALGO_CONFIG_TILE_ID,
      CUBLASLT_ALGO_CONFIG_STAGES_ID,
      CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
      CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
      CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
      CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
      CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID,
      CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID};
  for (int i = 0; i < 9; ++i) {
    /* The attributes are 16- or 32-bit; read into a zeroed 32-bit word with the size the
     * library reports, so the value is the same on every little-endian machine. */
    size_t size = 0;
    RECAP_CUBLAS_TRY(
        recap__blas.cublasLtMatmulAlgoConfigGetAttribute(algo, attrs[i], NULL, 0, &size));
    uint32_t value = 0;
    if (size > sizeof value)
      return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                        "gemm: cuBLASLt algorithm attribute %d has "
                        "%zu bytes",
                        (int)attrs[i], size);
    RECAP_CUBLAS_TRY(
        recap__blas.cublasLtMatmulAlgoConfigGetAttribute(algo, attrs[i], &value, size, &size));
    config[i] = (int32_t)(value & 0x7fffffffu);
  }
  return RECAP_OK;
}

/* Variants of a heuristic result: the same kernel tile and stages with another CTA swizzle,
 * custom option or thread-block cluster shape. cuBLASLt's heuristic list names one of each
 * per tile, and for the transformer block's GEMMs on an H100 another one was 4-12% faster
 * (bench/bench_gemm_algos.c searched every configuration; docs/perf/transformer_block.md,
 * section 5). Tuning times the variants of the first RECAP__LT_VARIANT_BASES results; a tuning-file
 * entry naming one is rebuilt the same way (in the same order, from the same bases), so the
 * file never needs more than the nine config fields, and every variant passes
 * cublasLtMatmulAlgoCheck before it is used. */
static const uint16_t variant_clusters[RECAP__LT_VARIANT_CLUSTERS] = {
    CUBLASLT_CLUSTER_SHAPE_AUTO, CUBLASLT_CLUSTER_SHAPE_1x1x1, CUBLASLT_CLUSTER_SHAPE_2x1x1,
    CUBLASLT_CLUSTER_SHAPE_1x2x1};

/* Sets a 16- or 32-bit config attribute from a 32-bit value (by the size the library reports:
 * on a little-endian machine the low bytes are the value). */
static bool lt_config_set(cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr,
                          uint32_t value) {
  size_t size = 0;
  if (recap__blas.cublasLtMatmulAlgoConfigGetAttribute(algo, attr, NULL, 0, &size) !=
          CUBLAS_STATUS_SUCCESS ||
      size == 0 || size > sizeof value)
    return false;
  return recap__blas.cublasLtMatmulAlgoConfigSetAttribute(algo, attr, &value, size) ==
         CUBLAS_STATUS_SUCCESS;
}

recap_status recap__lt_variants(const recap__gemm_ctx *ctx, recap__lt_problem *pr,
                                const cublasLtMatmulHeuristicResult_t *results, int found,
                                recap__lt_variant_fn fn, void *arg) {
  for (int i = 0; i < found && i < RECAP__LT_VARIANT_BASES; ++i) {
    int32_t custom_max = 0;
    size_t written = 0;
    if (recap__blas.cublasLtMatmulAlgoCapGetAttribute(
            &results[i].algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max, sizeof custom_max,
            &written) != CUBLAS_STATUS_SUCCESS)
      custom_max = 0;
    if (custom_max > RECAP__LT_VARIANT_CUSTOM - 1) custom_max = RECAP__LT_VARIANT_CUSTOM - 1;
    for (uint32_t swizzle = 0; swizzle <= 1; ++swizzle)
      for (int32_t custom = 0; custom <= custom_max; ++custom)
        for (int c = 0; c < RECAP__LT_VARIANT_CLUSTERS; ++c) {
          cublasLtMatmulAlgo_t algo = results[i].algo;
          if (!lt_config_set(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, swizzle) ||
              !lt_config_set(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, (uint32_t)custom) ||
              !lt_config_set(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, variant_clusters[c]))
            continue;
          cublasLtMatmulHeuristicResult_t check;
          memset(&check, 0, sizeof check);
          if (recap__blas.cublasLtMatmulAlgoCheck(ctx->handles->lt, &pr->desc, &pr->la, &pr->lb,
                                                  &pr->lcd, &pr->lcd, &algo,
                                                  &check) != CUBLAS_STATUS_SUCCESS ||
              check.workspaceSize > RECAP_GEMM_WORKSPACE_BYTES)
            continue;
          int32_t config[RECAP_TUNE_CONFIG_MAX];
          RECAP_TRY(recap__lt_algo_config(&algo, config));
          if (fn(arg, &algo, config)) return RECAP_OK;
        }
  }
  return RECAP_OK;
}

/* Runs the plan (all batches, then the activation kernel when needed) with `algo`, writing
 * `out` (the op's output, or scratch of its size while tuning). */
static recap_status lt_run(recap__gemm_ctx *ctx, const recap__gemm_plan *p, recap__lt_problem *pr,
                           const cublasLtMatmulAlgo_t *algo, void *out) {
  const size_t es = recap_dtype_size(p->dtype);
  const float alpha = p->alpha, beta = pr->beta;
  for (int64_t ob = 0; ob < p->batch[0]; ++ob) {
    const char *a = (const char *)p->a + ob * p->a_bs[0] * (int64_t)es;
    const char *b = (const char *)p->b + ob * p->b_bs[0] * (int64_t)es;
    char *o = (char *)out + ob * p->out_bs[0] * (int64_t)es;
    const char *c = pr->c ? (const char *)pr->c + ob * p->out_bs[0] * (int64_t)es : NULL;
    RECAP_CUBLAS_TRY(recap__blas.cublasLtMatmul(
        ctx->handles->lt, &pr->desc, &alpha, b, &pr->la, a, &pr->lb, &beta, c ? c : o, &pr->lcd, o,
        &pr->lcd, algo, ctx->workspace, RECAP_GEMM_WORKSPACE_BYTES, ctx->stream));
  }
  /* A residual that was not cuBLASLt's C comes after the activation, in the kernel. */
  if (pr->needs_kernel)
    RECAP_TRY(recap__cuda_gemm_bias_act(out, NULL, pr->c == p->residual ? NULL : p->residual,
                                        p->dtype, p->m * p->batch[0] * p->batch[1], p->n, p->act,
                                        ctx->stream));
  return RECAP_OK;
}

recap_status recap__gemm_run_choice(recap__gemm_ctx *ctx, const recap__gemm_plan *p,
                                    recap__lt_problem *pr, const recap__gemm_choice *ch,
                                    void *out) {
  if (ch->kind == RECAP_TUNE_CAND_HOPPER) {
    recap__gemm_plan q = *p;
    q.out = out;
    return recap__cuda_gemm_hopper(&q, ctx->device, ctx->stream, ch->config);
  }
  if (ch->kind == RECAP_TUNE_CAND_SKINNY) {
    recap__gemm_plan q = *p;
    q.out = out;
    return recap__cuda_gemm_skinny_config(&q, ctx->device, ctx->stream, ch->warps, ch->pipe);
  }
  return lt_run(ctx, p, pr, &ch->algo, out);
}

/* ---- cuBLAS -------------------------------------------------------------------------------- */

/* out (already holding c when beta != 0) = alpha * A B + beta * out for the inner batch. */
static recap_status blas_matmul(recap__gemm_ctx *ctx, const recap__gemm_plan *p, const void *a,
                                const void *b, void *out) {
  recap__gemm_handles *h = ctx->handles;
  if (h->blas_stream != ctx->stream || h->blas_workspace != ctx->workspace) {
    RECAP_CUBLAS_TRY(recap__blas.cublasSetStream(h->blas, ctx->stream));
    /* cublasSetStream just reset the workspace to cuBLAS's own: give it ours again. */
    RECAP_CUBLAS_TRY(
        recap__blas.cublasSetWorkspace(h->blas, ctx->workspace, RECAP_GEMM_WORKSPACE_BYTES));
    h->blas_stream = ctx->stream;
    h->blas_workspace = ctx->workspace;
  }
  const colmajor_view v = view_of(p);
  if (p->m > INT_MAX || p->n > INT_MAX || p->k > INT_MAX || v.lda > INT_MAX || v.ldb > INT_MAX ||
      p->batch[1] > INT_MAX)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "gemm: dimensions beyond 2^31 need the cuBLASLt path (m=%lld n=%lld "
                      "k=%lld)",
                      (long long)p->m, (long long)p->n, (long long)p->k);
  const cudaDataType_t type = cuda_type(p->dtype);
  const float alpha = p->alpha, beta = p->c ? p->beta : 0.0f;
  const int m = (int)p->n, n = (int)p->m, k = (int)p->k;
  if (p->batch[1] == 1) {
    RECAP_CUBLAS_TRY(recap__blas.cublasGemmEx(h->blas, v.op_a, v.op_b, m, n, k, &alpha, b, type,
                                              (int)v.lda, a, type, (int)v.ldb, &beta, out, type, m,
                                              compute_type(p->dtype), CUBLAS_GEMM_DEFAULT));
  } else {
    RECAP_CUBLAS_TRY(recap__blas.cublasGemmStridedBatchedEx(
        h->blas, v.op_a, v.op_b, m, n, k, &alpha, b, type, (int)v.lda, p->b_bs[1], a, type,
        (int)v.ldb, p->a_bs[1], &beta, out, type, m, p->out_bs[1], (int)p->batch[1],
        compute_type(p->dtype), CUBLAS_GEMM_DEFAULT));
  }
  return RECAP_OK;
}

recap_status recap__gemm_blas_run(recap__gemm_ctx *ctx, const recap__gemm_plan *p) {
  const size_t es = recap_dtype_size(p->dtype);
  const int64_t total_rows = p->m * p->batch[0] * p->batch[1];
  if (p->c && p->c != p->out)
    RECAP_CUDA_TRY(cudaMemcpyAsync(p->out, p->c, (size_t)(total_rows * p->n) * es,
                                   cudaMemcpyDeviceToDevice, ctx->stream));
  for (int64_t ob = 0; ob < p->batch[0]; ++ob) {
    const char *a = (const char *)p->a + ob * p->a_bs[0] * (int64_t)es;
    const char *b = (const char *)p->b + ob * p->b_bs[0] * (int64_t)es;
    char *out = (char *)p->out + ob * p->out_bs[0] * (int64_t)es;
    RECAP_TRY(blas_matmul(ctx, p, a, b, out));
  }
  if (p->bias || p->act != RECAP_ACT_NONE || p->residual)
    RECAP_TRY(recap__cuda_gemm_bias_act(p->out, p->bias, p->residual, p->dtype, total_rows, p->n,
                                        p->act, ctx->stream));
  return RECAP_OK;
}
