/*
 * cublaslt.h: what choose.c uses of cublaslt.c (internal to kernels/gemm/; CUDA builds only).
 *
 * cublaslt.c owns the per-thread state (handles per device, the last streams' workspaces) and
 * opens a launch's context; it describes a plan as a cuBLASLt problem with the key the choice
 * is cached under, asks cuBLASLt for algorithms, and runs a choice. choose.c decides the
 * choice: it keeps the thread's last choices in the same per-thread state.
 *
 *   recap__gemm_ctx ctx;
 *   RECAP_TRY(recap__gemm_ctx_open(&ctx, stream));   // device current, handles, workspace
 *   recap__lt_problem pr;
 *   st = recap__lt_problem_init(&ctx, &plan, &pr);   // then choose under pr.key
 *   st = recap__gemm_run_choice(&ctx, &plan, &pr, &choice, plan.out);
 *   recap__gemm_ctx_close(&ctx);                     // after a successful open only
 */
#ifndef RECAP_KERNELS_GEMM_CUBLASLT_H
#define RECAP_KERNELS_GEMM_CUBLASLT_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/gemm/cuda_blas.h"
#include "kernels/gemm/gemm.h"

enum {
  RECAP__GEMM_MAX_DEVICES = 64,
  RECAP__GEMM_THREAD_STREAMS = 4,  /* streams a thread remembers the workspace of */
  RECAP__GEMM_THREAD_CHOICES = 16, /* problems a thread remembers the choice of */
  RECAP__LT_VARIANT_BASES = 8,     /* heuristic results whose variants are tuned */
  RECAP__LT_VARIANT_CUSTOM = 8,    /* custom options 0..7 at most */
  RECAP__LT_VARIANT_CLUSTERS = 4,  /* cluster shapes: cublaslt.c's variant_clusters */
};

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
} recap__lt_key;

/* What runs a problem: choose.c decides it, recap__gemm_run_choice runs it. */
typedef struct {
  int32_t kind;        /* recap__tune_kind */
  int32_t warps, pipe; /* skinny */
  int32_t config;      /* hopper */
  int32_t state;       /* how far choose.c has come with it (its choice_state) */
  cublasLtMatmulAlgo_t algo; /* LT */
} recap__gemm_choice;

typedef struct {
  cublasHandle_t blas;
  cublasLtHandle_t lt;
  cudaStream_t blas_stream; /* the stream (and workspace) cuBLAS was last given */
  void *blas_workspace;
} recap__gemm_handles;

typedef struct {
  cudaStream_t stream;
  int device;
  void *ptr;
  uint64_t generation;
} recap__gemm_stream_slot;

typedef struct {
  recap__lt_key key;
  recap__gemm_choice value;
  uint64_t generation; /* 0: empty */
} recap__gemm_choice_slot;

/* Each thread's own state, created at its first GEMM and freed when it exits: the tables
 * that let the launch path take no lock (cublaslt.c's top comment). */
typedef struct {
  recap__gemm_handles dev[RECAP__GEMM_MAX_DEVICES];
  recap__gemm_stream_slot streams[RECAP__GEMM_THREAD_STREAMS];
  recap__gemm_choice_slot choices[RECAP__GEMM_THREAD_CHOICES];
  unsigned next_stream, next_choice; /* round-robin replacement */
} recap__gemm_thread;

/* One launch's context (recap__gemm_ctx_open). */
typedef struct {
  cudaStream_t stream;
  int device, previous_device;
  bool capturing;
  recap__gemm_thread *thread;
  recap__gemm_handles *handles;
  void *workspace;
} recap__gemm_ctx;

/* Descriptors of one call, initialized in place (no allocation), and its key. */
typedef struct {
  cublasLtMatmulDescOpaque_t desc;
  cublasLtMatrixLayoutOpaque_t la, lb, lcd;
  /* An activation cuBLASLt cannot fuse, or a residual after an activation, runs after it
   * (epilogue.cu). */
  bool needs_kernel;
  const void *c; /* cuBLASLt's C: matmul's c, or a linear's residual when no activation */
  float beta;
  recap__lt_key key;
} recap__lt_problem;

/* Makes the stream's device current (restored by recap__gemm_ctx_close) and readies this
 * thread's handles and the stream's workspace, creating what is missing outside capture.
 * INVALID_ARGUMENT for the legacy default stream; inside a capture,
 * RECAP_STATUS_ILLEGAL_DURING_CAPTURE for anything that would have to be created. On failure
 * the previous device is current again. */
recap_status recap__gemm_ctx_open(recap__gemm_ctx *ctx, cudaStream_t stream);
void recap__gemm_ctx_close(recap__gemm_ctx *ctx);

/* Describes the plan as a cuBLASLt problem on ctx's device: descriptors, C and beta, and the
 * key its choice is cached under. A cuBLASLt error status when a descriptor is refused. */
recap_status recap__lt_problem_init(const recap__gemm_ctx *ctx, const recap__gemm_plan *p,
                                    recap__lt_problem *pr);

/* cuBLASLt's heuristic list for the problem, best first (up to `want`, at least one:
 * NOT_SUPPORTED when cuBLASLt has none), among algorithms needing at most `max_workspace`
 * bytes of workspace (at most RECAP_GEMM_WORKSPACE_BYTES, what every stream has). */
recap_status recap__lt_heuristics(const recap__gemm_ctx *ctx, const recap__gemm_plan *p,
                                  recap__lt_problem *pr, int want, uint64_t max_workspace,
                                  cublasLtMatmulHeuristicResult_t *results, int *found);

/* The configuration attributes that name an algorithm in the tuning file. */
recap_status recap__lt_algo_config(const cublasLtMatmulAlgo_t *algo, int32_t config[9]);

/* Called per valid variant with its algorithm and config; returning true stops the walk. */
typedef bool (*recap__lt_variant_fn)(void *arg, const cublasLtMatmulAlgo_t *algo,
                                     const int32_t *config);

/* Walks the variants of results[0 .. min(found, RECAP__LT_VARIANT_BASES)) that cuBLASLt
 * accepts for the problem (cublasLtMatmulAlgoCheck, workspace within ours), always in the same
 * order. */
recap_status recap__lt_variants(const recap__gemm_ctx *ctx, recap__lt_problem *pr,
                                const cublasLtMatmulHeuristicResult_t *results, int found,
                                recap__lt_variant_fn fn, void *arg);

/* Runs the plan with a choice (our Hopper or skinny kernel, or a cuBLASLt algorithm, then the
 * epilogue kernel where needed), writing `out` (the op's output, or scratch of its size while
 * tuning). */
recap_status recap__gemm_run_choice(recap__gemm_ctx *ctx, const recap__gemm_plan *p,
                                    recap__lt_problem *pr, const recap__gemm_choice *ch,
                                    void *out);

/* Runs the plan through plain cuBLAS (the library a caller may prefer: recap_gemm_library),
 * then the epilogue kernel for bias, activation and residual. NOT_SUPPORTED for dimensions
 * beyond 2^31. */
recap_status recap__gemm_blas_run(recap__gemm_ctx *ctx, const recap__gemm_plan *p);

#endif
