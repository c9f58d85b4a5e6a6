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
 *   and cached, keyed by everything that shapes the choice (dtype, compute type, transposes,
 *   dims, leading dims, batch, strides, epilogue, pointer alignments).
 * Inside a capture, anything missing fails with RECAP_STATUS_ILLEGAL_DURING_CAPTURE and a
 * message asking for a warmup; no call that would invalidate the capture is made.
 *
 * The launch path (eager launches; replays never come here) takes no lock, allocates nothing
 * and hashes nothing once a thread has seen a stream and a problem: each thread keeps its last
 * streams' workspaces and its last problems' choices in small tables of its own (a linear
 * scan with memcmp), checked against generation counters that a released stream or a reset
 * bumps. cuBLASLt descriptors live on the stack (the *Init functions), not the heap. A miss
 * takes one lock (the process-wide table) and refills the thread's table.
 *
 * Tuning (RECAP_TUNE=1, like PyTorch's TunableOp; kernels/gemm/tune.h, docs/perf/tuning.md):
 * the first eager launch of a problem outside capture looks the problem up in the tuning file
 * and, without an entry, times every candidate: cuBLASLt's heuristic list (up to 16), the
 * variants of its first 8 results (CTA swizzle, custom option, cluster shape: lt_variants) and
 * the skinny and Hopper kernels' configurations where they apply. Each runs into scratch memory
 * (allocated outside any pool, freed after), is checked against a reference output (the
 * default's, or cuBLASLt's first heuristic when the default is one of our kernels), and is
 * timed as it runs in a replay: a few launches captured into a graph, the graph replayed
 * TUNE_REPS times between CUDA events on the op's stream (time_in_graph); the fastest that
 * agrees wins, is saved to the file, and the op then runs for real. A capture only looks up:
 * it uses whatever choice exists (the default when untuned) and never times.
 *
 * Row-major data: a row-major [m, n] product C = A B is the column-major product
 * C^T = B^T A^T, so cuBLAS sees m' = n, n' = m, with B as its first operand.
 *
 * Epilogues: bias, relu(+bias) and gelu_tanh(+bias) fuse into cuBLASLt's epilogue (its GELU
 * is the tanh approximation). gelu (erf form, PyTorch's default), silu, sigmoid and tanh run
 * the bias epilogue and then our in-place kernel (epilogue.cu). The cuBLAS path runs
 * that kernel for bias and activation. A linear's residual is cuBLASLt's C (beta = 1: D = A B
 * + C + bias, one rounding) when there is no activation; after an activation, or after the
 * skinny kernel or cuBLAS, the epilogue kernel adds it.
 *
 * Skinny GEMMs (the decode case: m <= 16, f16/bf16, x rows and W [N, K] rows with unit
 * stride along K and 16-byte aligned, K % 8 == 0, no batch, no c; a residual is added by the
 * epilogue kernel after it) run our own kernel
 * (skinny.cu) with bias and every activation fused, when cuBLASLt is the chosen library:
 * cuBLASLt streams the weights at 70-75% of copy bandwidth there. Selecting plain cuBLAS
 * uses cuBLAS for every shape, and RECAP_GEMM_SKINNY=0 in the environment (read once per
 * process, gemm.h) sends skinny shapes to cuBLASLt too.
 *
 * Hopper GEMMs with an activation cuBLASLt cannot fuse (erf gelu, silu, sigmoid, tanh) run our
 * own wgmma kernel (hopper.cu) by default, on devices of compute capability 9.0, when the
 * shape fits it (f16/bf16, both operands K-major, no batch, no C): the activation and the
 * residual are in its epilogue, so there is no second pass over the output. Tuning times its
 * tile configurations against cuBLASLt's for every shape it fits. RECAP_GEMM_HOPPER=0 sends
 * everything to cuBLASLt.
 */
#include <cuda_runtime_api.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm/cuda_blas.h"
#include "kernels/cuda_ops.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/tune.h"
#include "kernels/infer.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/cuda_check.h"
#include "runtime/stream_hooks.h"
#include "runtime/versions.h"

enum {
  MAX_DEVICES = 64,
  CACHE_BUCKETS = 256,
  THREAD_STREAMS = 4,   /* streams a thread remembers the workspace of */
  THREAD_CHOICES = 16,  /* problems a thread remembers the choice of */
  MAX_HEURISTICS = 16,  /* cuBLASLt candidates asked for when tuning */
  VARIANT_BASES = 8,    /* heuristic results whose variants are tuned (see lt_variants) */
  VARIANT_CUSTOM = 8,   /* custom options 0..7 at most */
  VARIANT_CLUSTERS = 4, /* see variant_clusters */
  /* the default, the lists above, the skinny kernel's 10 and the Hopper kernel's configs */
  MAX_CANDIDATES = MAX_HEURISTICS + VARIANT_BASES * 2 * VARIANT_CUSTOM * VARIANT_CLUSTERS + 11 +
                   RECAP_TUNE_HOPPER_CONFIGS,
  TUNE_WARMUPS = 3,
  TUNE_REPS = 15,          /* replays of a candidate's graph, timed */
  TUNE_GRAPH_LAUNCHES = 4, /* launches of the candidate in that graph */
};

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

/* ---- what is chosen for a problem --------------------------------------------------------- */

/* The key of one cuBLASLt problem: everything that shapes the algorithm's choice. */
typedef struct {
  int64_t device, dtype, compute, op_a, op_b, epilogue;
  int64_t a_rows, a_cols, lda, b_rows, b_cols, ldb, m, n, batch;
  int64_t stride_a, stride_b, stride_d;
  int64_t align_a, align_b, align_c, align_d, align_bias;
  int64_t op, has_c; /* which op (recap__tune_op) and whether beta * c is added */
  /* The activation and the residual's alignment: cuBLASLt's epilogue does not tell gelu from
   * silu (both run after it), but the Hopper kernel's fused epilogue is timed with one. And
   * whether the Hopper kernel fits the plan at all: the fields above do not decide it (a
   * size-1 dimension's stride, a batch step folded into an alignment), and a choice of it must
   * never be replayed on a plan it refuses. */
  int64_t act, align_residual, hopper_fits;
} lt_key;

/* How far a choice has come (see resolve()). */
typedef enum {
  CHOICE_DEFAULT,    /* the default; the tuning file not consulted yet */
  CHOICE_CONSULTED,  /* the default; the file had nothing usable; timing waits for a run */
  CHOICE_FINAL,      /* from the file, timed, or left on the default for good */
} choice_state;

typedef struct {
  int32_t kind;        /* recap__tune_kind */
  int32_t warps, pipe; /* skinny */
  int32_t config;      /* hopper */
  int32_t state;       /* choice_state */
  cublasLtMatmulAlgo_t algo; /* LT */
} choice;

/* ---- per-thread state ---------------------------------------------------------------------- */

typedef struct {
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  cudaStream_t blas_stream; /* the stream (and workspace) cuBLAS was last given */
  void *blas_workspace;
} device_handles;

typedef struct {
  cudaStream_t stream;
  int device;
  void *ptr;
  uint64_t generation;
} stream_slot;

typedef struct {
  lt_key key;
  choice value;
  uint64_t generation; /* 0: empty */
} choice_slot;

typedef struct {
  device_handles dev[MAX_DEVICES];
  stream_slot streams[THREAD_STREAMS];
  choice_slot choices[THREAD_CHOICES];
  unsigned next_stream, next_choice; /* round-robin replacement */
} thread_state;

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t handles_key;
static int handles_key_ok;
static _Thread_local thread_state *tls_state;

/* Bumped when a stream's workspace is released / when choices are forgotten or changed:
 * every thread's remembered copies older than the counter are misses. Start at 1 so that a
 * zeroed slot never matches. */
static atomic_uint_fast64_t workspace_generation = 1;
static atomic_uint_fast64_t choice_generation = 1;

/* Thread exit: the handles belong to this thread alone. */
static void destroy_thread_state(void *ptr) {
  thread_state *t = ptr;
  int prev = -1;
  cudaGetDevice(&prev);
  for (int d = 0; d < MAX_DEVICES; ++d) {
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

static recap_status get_thread_state(thread_state **out) {
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

static stream_slot *thread_stream_find(thread_state *t, cudaStream_t stream) {
  const uint64_t gen = atomic_load_explicit(&workspace_generation, memory_order_acquire);
  for (int i = 0; i < THREAD_STREAMS; ++i)
    if (t->streams[i].stream == stream && t->streams[i].generation == gen) return &t->streams[i];
  return NULL;
}

static void thread_stream_store(thread_state *t, const workspace_entry *e, uint64_t gen) {
  stream_slot *slot = &t->streams[t->next_stream++ % THREAD_STREAMS];
  *slot = (stream_slot){e->stream, e->device, e->ptr, gen};
}

/* ---- one launch's context -------------------------------------------------------------------- */

typedef struct {
  cudaStream_t stream;
  int device, previous_device;
  bool capturing;
  thread_state *thread;
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
  device_handles *h = &ctx->thread->dev[ctx->device];
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
static recap_status ensure_workspace(gemm_ctx *ctx, const stream_slot *known) {
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
  RECAP_TRY(get_thread_state(&ctx->thread));
  const stream_slot *known = thread_stream_find(ctx->thread, stream);
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
  if (st == RECAP_OK) st = ensure_workspace(ctx, known);
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

/* Whether a bound plan may run the skinny kernel (see the top of this file). */
static bool skinny_allowed(const recap__gemm_plan *p) {
  return recap__gemm_env_get()->skinny && recap__cuda_gemm_skinny_fits(p);
}

/* Whether a plan may run our Hopper kernel on the device (see the top of this file). */
static bool hopper_allowed(const recap__gemm_plan *p, int device) {
  return recap__gemm_env_get()->hopper && recap__cuda_gemm_hopper_fits(p, device);
}

/* ---- the cuBLASLt problem ------------------------------------------------------------------- */

/* Descriptors of one call, initialized in place (no allocation), and its key. */
typedef struct {
  cublasLtMatmulDescOpaque_t desc;
  cublasLtMatrixLayoutOpaque_t la, lb, lcd;
  /* An activation cuBLASLt cannot fuse, or a residual after an activation, runs after it
   * (epilogue.cu). */
  bool needs_kernel;
  const void *c; /* cuBLASLt's C: matmul's c, or a linear's residual when no activation */
  float beta;
  lt_key key;
} lt_problem;

static cublasLtEpilogue_t lt_epilogue(const recap__gemm_plan *p, bool *needs_kernel) {
  const bool bias = p->bias != NULL;
  *needs_kernel = false;
  /* cuBLASLt adds C before its activation; the residual comes after. */
  if (p->residual && p->act != RECAP_ACT_NONE) {
    *needs_kernel = true;
    return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
  switch (p->act) {
    case RECAP_ACT_NONE: return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case RECAP_ACT_RELU: return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case RECAP_ACT_GELU_TANH: return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    default:
      *needs_kernel = true;
      return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
}

/* fn: a cuBLASLt *SetAttribute function, called through recap__blas (cuda_blas.h). */
#define LT_SET(fn, obj, attr, value) \
  RECAP_CUBLAS_TRY(recap__blas.fn(obj, attr, &(value), sizeof(value)))

static recap_status lt_problem_init(const gemm_ctx *ctx, const recap_op_call *call,
                                    const recap__gemm_plan *p, lt_problem *pr) {
  const cudaDataType_t type = cuda_type(p->dtype);
  const cublasComputeType_t compute = compute_type(p->dtype);
  const colmajor_view v = view_of(p);
  const size_t es = recap_dtype_size(p->dtype);
  const cublasLtEpilogue_t epilogue = lt_epilogue(p, &pr->needs_kernel);
  const bool residual_as_c = p->residual && p->act == RECAP_ACT_NONE;
  pr->c = p->c ? p->c : residual_as_c ? p->residual : NULL;
  pr->beta = p->c ? p->beta : residual_as_c ? 1.0f : 0.0f;
  /* Heuristics only read the bias pointer's alignment; before binding, assume 256 bytes. */
  const void *bias = p->bias                              ? p->bias
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
  pr->key = (lt_key){
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
      .op = call->def == &recap__op_linear ? RECAP_TUNE_OP_LINEAR : RECAP_TUNE_OP_MATMUL,
      .has_c = pr->c != NULL,
      .act = p->act,
      .align_residual = p->residual ? alignment_of(p->residual, p->out_bs, es) : 0,
      .hopper_fits = hopper_allowed(p, ctx->device),
  };
  return RECAP_OK;
}

/* cuBLASLt's heuristic list for the problem, best first (up to `want`, at least one). */
static recap_status lt_heuristics(const gemm_ctx *ctx, const recap__gemm_plan *p, lt_problem *pr,
                                  int want, cublasLtMatmulHeuristicResult_t *results, int *found) {
  cublasLtMatmulPreferenceOpaque_t opaque;
  cublasLtMatmulPreference_t pref = &opaque;
  const uint64_t ws_bytes = RECAP_GEMM_WORKSPACE_BYTES;
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

/* The configuration attributes that name an algorithm in the tuning file. */
static recap_status lt_algo_config(const cublasLtMatmulAlgo_t *algo, int32_t config[9]) {
  static const cublasLtMatmulAlgoConfigAttributes_t attrs[9] = {
      CUBLASLT_ALGO_CONFIG_ID,           CUBLASLT_ALGO_CONFIG_TILE_ID,
      CUBLASLT_ALGO_CONFIG_STAGES_ID,    CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
      CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
      CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID,
      CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID};
  for (int i = 0; i < 9; ++i) {
    /* The attributes are 16- or 32-bit; read into a zeroed 32-bit word with the size the
     * library reports, so the value is the same on every little-endian machine. */
    size_t size = 0;
    RECAP_CUBLAS_TRY(
        recap__blas.cublasLtMatmulAlgoConfigGetAttribute(algo, attrs[i], NULL, 0, &size));
    uint32_t value = 0;
    if (size > sizeof value)
      return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "gemm: cuBLASLt algorithm attribute %d has "
                        "%zu bytes", (int)attrs[i], size);
    RECAP_CUBLAS_TRY(
        recap__blas.cublasLtMatmulAlgoConfigGetAttribute(algo, attrs[i], &value, size, &size));
    config[i] = (int32_t)(value & 0x7fffffffu);
  }
  return RECAP_OK;
}

/* Variants of a heuristic result: the same kernel tile and stages with another CTA swizzle,
 * custom option or thread-block cluster shape. cuBLASLt's heuristic list names one of each
 * per tile, and for the transformer block's GEMMs on an H100 another one was 4-12% faster
 * (tools/bench_gemm_algos.c searched every configuration; docs/perf/transformer_block.md,
 * section 5). Tuning times the variants of the first VARIANT_BASES results; a tuning-file
 * entry naming one is rebuilt the same way (in the same order, from the same bases), so the
 * file never needs more than the nine config fields, and every variant passes
 * cublasLtMatmulAlgoCheck before it is used. */
static const uint16_t variant_clusters[VARIANT_CLUSTERS] = {
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

/* Called per valid variant with its algorithm and config; returning true stops the walk. */
typedef bool (*variant_fn)(void *arg, const cublasLtMatmulAlgo_t *algo, const int32_t *config);

/* Walks the variants of results[0 .. min(found, VARIANT_BASES)) that cuBLASLt accepts for the
 * problem (cublasLtMatmulAlgoCheck, workspace within ours), always in the same order. */
static recap_status lt_variants(const gemm_ctx *ctx, lt_problem *pr,
                                const cublasLtMatmulHeuristicResult_t *results, int found,
                                variant_fn fn, void *arg) {
  for (int i = 0; i < found && i < VARIANT_BASES; ++i) {
    int32_t custom_max = 0;
    size_t written = 0;
    if (recap__blas.cublasLtMatmulAlgoCapGetAttribute(
            &results[i].algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX, &custom_max, sizeof custom_max,
            &written) != CUBLAS_STATUS_SUCCESS)
      custom_max = 0;
    if (custom_max > VARIANT_CUSTOM - 1) custom_max = VARIANT_CUSTOM - 1;
    for (uint32_t swizzle = 0; swizzle <= 1; ++swizzle)
      for (int32_t custom = 0; custom <= custom_max; ++custom)
        for (int c = 0; c < VARIANT_CLUSTERS; ++c) {
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
          RECAP_TRY(lt_algo_config(&algo, config));
          if (fn(arg, &algo, config)) return RECAP_OK;
        }
  }
  return RECAP_OK;
}

/* Runs the plan (all batches, then the activation kernel when needed) with `algo`, writing
 * `out` (the op's output, or scratch of its size while tuning). */
static recap_status lt_run(gemm_ctx *ctx, const recap__gemm_plan *p, lt_problem *pr,
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

/* Runs the plan with a choice, writing `out`. */
static recap_status run_choice(gemm_ctx *ctx, const recap__gemm_plan *p, lt_problem *pr,
                               const choice *ch, void *out) {
  if (ch->kind == RECAP_TUNE_CAND_HOPPER) {
    recap__gemm_plan q = *p;
    q.out = out;
    return recap__cuda_gemm_hopper(&q, ctx->device, ctx->stream, ch->config);
  }
  if (ch->kind == RECAP_TUNE_CAND_SKINNY) {
    recap__gemm_plan q = *p;
    q.out = out;
    q.residual = NULL; /* the kernel knows no residual: added after it */
    RECAP_TRY(recap__cuda_gemm_skinny_config(&q, ctx->device, ctx->stream, ch->warps, ch->pipe));
    if (p->residual)
      RECAP_TRY(recap__cuda_gemm_bias_act(out, NULL, p->residual, p->dtype, p->m, p->n,
                                          RECAP_ACT_NONE, ctx->stream));
    return RECAP_OK;
  }
  return lt_run(ctx, p, pr, &ch->algo, out);
}

/* ---- the process-wide table of choices ------------------------------------------------------ */

typedef struct lt_entry {
  lt_key key;
  choice value;
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

static lt_entry *cache_find_locked(const lt_key *key) {
  lt_entry *e = cache[key_hash(key)];
  while (e && memcmp(&e->key, key, sizeof *key) != 0) e = e->next;
  return e;
}

static bool cache_find(const lt_key *key, choice *out) {
  pthread_mutex_lock(&cache_lock);
  const lt_entry *e = cache_find_locked(key);
  if (e) *out = e->value;
  pthread_mutex_unlock(&cache_lock);
  return e != NULL;
}

/* Stores the choice. Replacing one another thread may remember bumps the generation. */
static recap_status cache_store(const lt_key *key, const choice *value) {
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

static const choice *thread_choice_find(thread_state *t, const lt_key *key) {
  const uint64_t gen = atomic_load_explicit(&choice_generation, memory_order_acquire);
  for (int i = 0; i < THREAD_CHOICES; ++i)
    if (t->choices[i].generation == gen && memcmp(&t->choices[i].key, key, sizeof *key) == 0)
      return &t->choices[i].value;
  return NULL;
}

static void thread_choice_store(thread_state *t, const lt_key *key, const choice *value,
                                uint64_t gen) {
  for (int i = 0; i < THREAD_CHOICES; ++i)
    if (memcmp(&t->choices[i].key, key, sizeof *key) == 0) {
      t->choices[i] = (choice_slot){*key, *value, gen};
      return;
    }
  t->choices[t->next_choice++ % THREAD_CHOICES] = (choice_slot){*key, *value, gen};
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
static device_versions_slot device_versions[MAX_DEVICES];

static recap_status versions_of(int device, recap__tune_versions *out) {
  pthread_mutex_lock(&tune_lock);
  device_versions_slot *slot = &device_versions[device];
  recap_status st = RECAP_OK;
  if (!slot->known) {
    struct cudaDeviceProp prop;
    recap__tune_versions v = {.cublaslt = (int)recap__blas.cublasLtGetVersion()};
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
         a->cc == b->cc && strcmp(a->device, b->device) == 0;
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

static recap__tune_key tune_key_of(const recap__gemm_plan *p, const lt_problem *pr) {
  int64_t align = pr->key.align_a;
  const int64_t others[4] = {pr->key.align_b, pr->key.align_c, pr->key.align_d,
                             pr->key.align_bias ? pr->key.align_bias : 256};
  for (int i = 0; i < 4; ++i)
    if (others[i] < align) align = others[i];
  if (align > 16) align = 16;
  return (recap__tune_key){
      .m = p->m, .n = p->n, .k = p->k, .batch = p->batch[0] * p->batch[1],
      .op = (int32_t)pr->key.op, .a_type = p->dtype, .b_type = p->dtype, .c_type = p->dtype,
      .compute = pr->key.compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? RECAP_TUNE_COMPUTE_TF32
                                                                 : RECAP_TUNE_COMPUTE_F32,
      .trans_a = pr->key.op_a == CUBLAS_OP_T, .trans_b = pr->key.op_b == CUBLAS_OP_T,
      .bias = p->bias != NULL, .act = p->act, .has_c = pr->c != NULL, .align = (int32_t)align};
}

/* Tolerances of the check against the default's output: relative to each element, plus a
 * fraction of the largest |output| (cancellation makes small outputs differ by more than
 * their own size between summation orders). Loose enough for two roundings of the storage
 * type, tight enough that a wrong product, bias or epilogue fails. */
static void tune_tolerance(const recap__gemm_plan *p, bool tf32, float *rtol, float *atol_frac) {
  switch (p->dtype) {
    case RECAP_DTYPE_BF16: *rtol = 1.6e-2f, *atol_frac = 8e-3f; break;
    case RECAP_DTYPE_F16: *rtol = 4e-3f, *atol_frac = 2e-3f; break;
    default: *rtol = *atol_frac = tf32 ? 5e-3f : 1e-3f; break;
  }
}

static int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Adds a candidate unless an equal one is listed. */
static void add_candidate(choice *list, int32_t (*configs)[RECAP_TUNE_CONFIG_MAX], int *count,
                          const choice *c, const int32_t *config) {
  for (int i = 0; i < *count; ++i) {
    if (list[i].kind != c->kind) continue;
    if (c->kind == RECAP_TUNE_CAND_SKINNY && list[i].warps == c->warps && list[i].pipe == c->pipe)
      return;
    if (c->kind == RECAP_TUNE_CAND_HOPPER && list[i].config == c->config) return;
    if (c->kind == RECAP_TUNE_CAND_LT && memcmp(configs[i], config, sizeof configs[i]) == 0)
      return;
  }
  if (*count >= MAX_CANDIDATES) return;
  list[*count] = *c;
  if (config) memcpy(configs[*count], config, sizeof configs[*count]);
  else memset(configs[*count], 0, sizeof configs[*count]);
  ++*count;
}

typedef struct {
  choice *list;
  int32_t (*configs)[RECAP_TUNE_CONFIG_MAX];
  int count;
} candidate_list;

static bool add_variant(void *arg, const cublasLtMatmulAlgo_t *algo, const int32_t *config) {
  candidate_list *l = arg;
  const choice c = {.kind = RECAP_TUNE_CAND_LT, .algo = *algo};
  add_candidate(l->list, l->configs, &l->count, &c, config);
  return false;
}

static void choice_to_tune(const choice *c, const int32_t *config, recap__tune_choice *out) {
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
static recap_status tune_candidates(gemm_ctx *ctx, const recap__gemm_plan *p, lt_problem *pr,
                                    const choice *def, candidate_list *l) {
  cublasLtMatmulHeuristicResult_t results[MAX_HEURISTICS];
  int found = 0;
  int32_t config[RECAP_TUNE_CONFIG_MAX];
  if (def->kind == RECAP_TUNE_CAND_LT) RECAP_TRY(lt_algo_config(&def->algo, config));
  add_candidate(l->list, l->configs, &l->count, def,
                def->kind == RECAP_TUNE_CAND_LT ? config : NULL);
  RECAP_TRY(lt_heuristics(ctx, p, pr, MAX_HEURISTICS, results, &found));
  for (int i = 0; i < found; ++i) {
    const choice c = {.kind = RECAP_TUNE_CAND_LT, .algo = results[i].algo};
    RECAP_TRY(lt_algo_config(&c.algo, config));
    add_candidate(l->list, l->configs, &l->count, &c, config);
  }
  RECAP_TRY(lt_variants(ctx, pr, results, found, add_variant, l));
  if (skinny_allowed(p)) {
    static const int warps[] = {2, 4, 8, 16};
    for (int w = 0; w < 4; ++w)
      for (int pipe = 1; pipe >= 0; --pipe) {
        const choice c = {.kind = RECAP_TUNE_CAND_SKINNY, .warps = warps[w], .pipe = pipe};
        add_candidate(l->list, l->configs, &l->count, &c, NULL);
      }
    /* The bulk-copy shapes (pipe 2: 16 rows x 512 columns x 3 stages, pipe 3: 32 x 1024 x 2;
     * Hopper, else they run as pipe 1). */
    for (int pipe = 2; pipe <= 3; ++pipe) {
      const choice c = {.kind = RECAP_TUNE_CAND_SKINNY, .warps = 8, .pipe = pipe};
      add_candidate(l->list, l->configs, &l->count, &c, NULL);
    }
  }
  if (pr->key.hopper_fits)
    for (int config = 0; config < recap__cuda_gemm_hopper_configs(); ++config) {
      const choice c = {.kind = RECAP_TUNE_CAND_HOPPER, .config = config};
      add_candidate(l->list, l->configs, &l->count, &c, NULL);
    }
  return RECAP_OK;
}

/* A candidate's time per launch as it runs in a replay, in ms: TUNE_GRAPH_LAUNCHES launches of
 * it captured into one graph (thread-local capture of the op's stream), the graph replayed
 * TUNE_REPS times between `events`, the median divided by the launches. Timed eagerly, launch
 * by launch, cuBLASLt + the separate epilogue pass ranked ahead of the fused Hopper kernel for
 * the transformer block's fc1 while in the block's graph the fused kernel was the faster one
 * (docs/perf/transformer_block.md, section 6). A candidate that cannot be captured or
 * instantiated: RECAP_STATUS_NOT_SUPPORTED (the caller rejects it). */
static recap_status time_in_graph(gemm_ctx *ctx, const recap__gemm_plan *p, lt_problem *pr,
                                  const choice *c, void *out, cudaEvent_t *events,
                                  float *median_ms) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  RECAP_CUDA_TRY(cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal));
  recap_status st = RECAP_OK;
  for (int r = 0; r < TUNE_GRAPH_LAUNCHES && st == RECAP_OK; ++r)
    st = run_choice(ctx, p, pr, c, out);
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
static recap_status tune_time(gemm_ctx *ctx, const recap__gemm_plan *p, lt_problem *pr,
                              const choice *def, const candidate_list *l, choice *best,
                              int32_t best_config[9], float *best_us) {
  const choice *list = l->list;
  int32_t(*configs)[RECAP_TUNE_CONFIG_MAX] = l->configs;
  const int count = l->count;
  const size_t es = recap_dtype_size(p->dtype);
  const int64_t elems = p->m * p->n * p->batch[0] * p->batch[1];
  const size_t out_bytes = ((size_t)elems * es + 255) & ~(size_t)255;
  float rtol, atol_frac;
  tune_tolerance(p, pr->key.compute == CUBLAS_COMPUTE_32F_FAST_TF32, &rtol, &atol_frac);

  if (!recap__unsafe_enter_wait())
    return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                      "gemm: tuning needs scratch memory but this thread is capturing");
  recap_status st = RECAP_OK;
  char *scratch = NULL;
  cudaEvent_t events[TUNE_REPS + 1] = {0};
  int made = 0;
  /* [ref out][candidate out][max bits (4 bytes), mismatches (8 bytes)] */
  RECAP_TRY_GOTO(st, recap__cuda_backend.mem_alloc(ctx->device, 2 * out_bytes + 256,
                                                   (void **)&scratch),
                 done);
  void *ref = scratch, *got = scratch + out_bytes;
  unsigned *max_bits = (unsigned *)(scratch + 2 * out_bytes);
  unsigned long long *mismatches = (unsigned long long *)(scratch + 2 * out_bytes + 8);
  for (; made <= TUNE_REPS; ++made) RECAP_CUDA_TRY_GOTO(st, cudaEventCreate(&events[made]), done);

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
  RECAP_TRY_GOTO(st, run_choice(ctx, p, pr, &list[ref_index], ref), done);
  RECAP_TRY_GOTO(st, recap__cuda_gemm_tune_maxabs(ref, p->dtype, elems, max_bits, ctx->stream),
                 done);

  float best_time = INFINITY;
  int winner = 0;
  for (int i = 0; i < count; ++i) {
    recap_status run = RECAP_OK;
    for (int w = 0; w < TUNE_WARMUPS && run == RECAP_OK; ++w)
      run = run_choice(ctx, p, pr, &list[i], got);
    if (run == RECAP_OK && i != ref_index) {
      unsigned long long bad = ~0ull;
      RECAP_CUDA_TRY_GOTO(st, cudaMemsetAsync(mismatches, 0, sizeof *mismatches, ctx->stream),
                          done);
      RECAP_TRY_GOTO(st, recap__cuda_gemm_tune_compare(ref, got, p->dtype, elems, max_bits, rtol,
                                                       atol_frac, mismatches, ctx->stream),
                     done);
      RECAP_CUDA_TRY_GOTO(st, cudaMemcpyAsync(&bad, mismatches, sizeof bad,
                                              cudaMemcpyDeviceToHost, ctx->stream),
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
    const recap_status timed = time_in_graph(ctx, p, pr, &list[i], got, events, &median);
    if (timed == RECAP_STATUS_NOT_SUPPORTED) {
      recap__gemm_tune_count(RECAP_TUNE_STAT_REJECTED, 1);
      continue;
    }
    RECAP_TRY_GOTO(st, timed, done);
    recap__gemm_tune_count(RECAP_TUNE_STAT_CANDIDATES, 1);
    if (median < best_time) {
      best_time = median;
      winner = i;
    }
  }
  if (!isfinite(best_time)) {
    st = RECAP_FAIL(RECAP_STATUS_INTERNAL, "gemm: tuning timed no candidate (m=%lld n=%lld "
                    "k=%lld)", (long long)p->m, (long long)p->n, (long long)p->k);
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
static recap_status tune_now(gemm_ctx *ctx, const recap__gemm_plan *p, lt_problem *pr,
                             const choice *def, choice *best, int32_t best_config[9],
                             float *best_us) {
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

/* The default choice of a problem seen for the first time: the skinny kernel where it applies,
 * else the Hopper kernel where cuBLASLt would need a second pass, else cuBLASLt's first
 * heuristic. Inside a capture only our kernels can be chosen (a heuristic query is left to
 * warmups). */
static recap_status make_default(gemm_ctx *ctx, const recap__gemm_plan *p, lt_problem *pr,
                                 choice *out) {
  *out = (choice){.kind = RECAP_TUNE_CAND_LT, .state = CHOICE_DEFAULT};
  if (skinny_allowed(p)) {
    int warps = 0, pipe = 0;
    RECAP_TRY(recap__cuda_gemm_skinny_default(p, ctx->device, &warps, &pipe));
    *out = (choice){.kind = RECAP_TUNE_CAND_SKINNY, .warps = warps, .pipe = pipe,
                    .state = CHOICE_DEFAULT};
    return RECAP_OK;
  }
  /* Where cuBLASLt would need a second pass for the activation, our kernel fuses it. */
  if (pr->needs_kernel && pr->key.hopper_fits) {
    *out = (choice){.kind = RECAP_TUNE_CAND_HOPPER,
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
  RECAP_TRY(lt_heuristics(ctx, p, pr, 1, &result, &found));
  out->algo = result.algo;
  return RECAP_OK;
}

/* Whether a choice needs nothing more for this launch. */
static bool settled(const choice *c, const gemm_ctx *ctx, bool run) {
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
static recap_status from_file(gemm_ctx *ctx, const recap__gemm_plan *p, lt_problem *pr,
                              const recap__tune_choice *fc, choice *out, bool *usable) {
  *usable = false;
  if (fc->kind == RECAP_TUNE_CAND_SKINNY) {
    if (!skinny_allowed(p)) return RECAP_OK;
    *out = (choice){.kind = RECAP_TUNE_CAND_SKINNY, .warps = fc->config[0],
                    .pipe = fc->config[1], .state = CHOICE_FINAL};
    *usable = true;
    return RECAP_OK;
  }
  if (fc->kind == RECAP_TUNE_CAND_HOPPER) {
    if (!pr->key.hopper_fits || fc->config[0] >= recap__cuda_gemm_hopper_configs())
      return RECAP_OK;
    *out = (choice){.kind = RECAP_TUNE_CAND_HOPPER, .config = fc->config[0], .state = CHOICE_FINAL};
    *usable = true;
    return RECAP_OK;
  }
  cublasLtMatmulHeuristicResult_t results[MAX_HEURISTICS];
  int found = 0;
  RECAP_TRY(lt_heuristics(ctx, p, pr, MAX_HEURISTICS, results, &found));
  for (int i = 0; i < found; ++i) {
    int32_t config[RECAP_TUNE_CONFIG_MAX];
    RECAP_TRY(lt_algo_config(&results[i].algo, config));
    if (memcmp(config, fc->config, sizeof config) == 0) {
      *out = (choice){.kind = RECAP_TUNE_CAND_LT, .algo = results[i].algo, .state = CHOICE_FINAL};
      *usable = true;
      return RECAP_OK;
    }
  }
  /* Else one of their variants, rebuilt as tuning built it (lt_variants). */
  variant_match match = {.want = fc->config};
  RECAP_TRY(lt_variants(ctx, pr, results, found, match_variant, &match));
  if (match.found) {
    *out = (choice){.kind = RECAP_TUNE_CAND_LT, .algo = match.algo, .state = CHOICE_FINAL};
    *usable = true;
  }
  return RECAP_OK;
}

/* Moves an unsettled choice on (outside capture, RECAP_TUNE 1 or 2): the file's entry if
 * usable, else (mode 2) the default for good, else (mode 1, a run with data) timing. */
static recap_status advance(gemm_ctx *ctx, const recap__gemm_plan *p, lt_problem *pr, bool run,
                            choice *ch) {
  const int mode = recap__gemm_env_get()->tune;
  recap__tune_versions v;
  RECAP_TRY(versions_of(ctx->device, &v));
  const recap__tune_key tk = tune_key_of(p, pr);
  if (ch->state == CHOICE_DEFAULT) {
    recap__tune_entry entry;
    if (file_lookup(&v, &tk, &entry)) {
      bool usable = false;
      choice fc;
      RECAP_TRY(from_file(ctx, p, pr, &entry.choice, &fc, &usable));
      if (usable) {
        *ch = fc;
        recap__gemm_tune_count(RECAP_TUNE_STAT_HITS, 1);
        return RECAP_OK;
      }
      recap__gemm_tune_count(RECAP_TUNE_STAT_STALE, 1);
      fprintf(stderr, "recap: warning: %s: the entry for m=%lld n=%lld k=%lld names a candidate "
              "this problem cannot use here; %s\n", recap__gemm_env_get()->tune_file,
              (long long)p->m, (long long)p->n, (long long)p->k,
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
  choice best;
  int32_t config[RECAP_TUNE_CONFIG_MAX];
  float us = 0;
  const recap_status st = tune_now(ctx, p, pr, ch, &best, config, &us);
  if (st == RECAP_STATUS_DEVICE_ERROR) return st;
  if (st != RECAP_OK) {
    fprintf(stderr, "recap: warning: GEMM tuning of m=%lld n=%lld k=%lld failed (%s); using the "
            "default\n", (long long)p->m, (long long)p->n, (long long)p->k, recap_last_error());
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
static recap_status resolve(gemm_ctx *ctx, const recap__gemm_plan *p, lt_problem *pr, bool run,
                            choice *out) {
  const choice *mine = thread_choice_find(ctx->thread, &pr->key);
  if (mine && settled(mine, ctx, run)) {
    *out = *mine;
    return RECAP_OK;
  }
  const uint64_t gen = atomic_load_explicit(&choice_generation, memory_order_acquire);
  choice ch;
  bool changed = false;
  if (!cache_find(&pr->key, &ch)) {
    RECAP_TRY(make_default(ctx, p, pr, &ch));
    changed = true;
  }
  if (!settled(&ch, ctx, run)) {
    const choice before = ch;
    RECAP_TRY(advance(ctx, p, pr, run, &ch));
    changed = changed || memcmp(&before, &ch, sizeof ch) != 0;
  }
  if (changed) RECAP_TRY(cache_store(&pr->key, &ch));
  thread_choice_store(ctx->thread, &pr->key, &ch,
                      changed ? atomic_load_explicit(&choice_generation, memory_order_acquire)
                              : gen);
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

/* ---- cuBLAS -------------------------------------------------------------------------------- */

/* out (already holding c when beta != 0) = alpha * A B + beta * out for the inner batch. */
static recap_status blas_matmul(gemm_ctx *ctx, const recap__gemm_plan *p, const void *a,
                                const void *b, void *out) {
  device_handles *h = ctx->handles;
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
                      "k=%lld)", (long long)p->m, (long long)p->n, (long long)p->k);
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

static recap_status blas_run(gemm_ctx *ctx, const recap__gemm_plan *p) {
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

/* ---- entry points -------------------------------------------------------------------------- */

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
  if (run && recap__gemm_library() == RECAP_GEMM_LIBRARY_CUBLAS) {
    st = blas_run(&ctx, &p);
    goto done;
  }
  /* A prepare readies cuBLASLt's choice either way: cuBLAS needs nothing more. */
  lt_problem pr;
  choice ch;
  RECAP_TRY_GOTO(st, lt_problem_init(&ctx, call, &p, &pr), done);
  RECAP_TRY_GOTO(st, resolve(&ctx, &p, &pr, run, &ch), done);
  if (run) st = run_choice(&ctx, &p, &pr, &ch, p.out);
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
