/*
 * gemm.h: matmul and linear, the GEMM half of the op library (internal to kernels/).
 *
 * Two ops (ops.c), one resolved description of the work (recap__gemm_plan, plan.c), two
 * backends: host.c (a cache-blocked f32-accumulating loop, the reference) and the CUDA path
 * (CUDA builds only): choose.c picks what runs a problem (our kernels or a cuBLASLt
 * algorithm, tuned or not) and cublaslt.c runs it through cuBLASLt or cuBLAS.
 *
 *   matmul: inputs a, b, c?; attrs alpha (1), beta (0), trans_a, trans_b.
 *     a [..., M, K] ([..., K, M] with trans_a), b [..., K, N] ([..., N, K] with trans_b);
 *     batch dims broadcast (numpy rules; 4 dims in all at most).
 *     out [batch..., M, N] = alpha * op(a) op(b) + beta * c. c (required when beta != 0,
 *     refused when beta == 0) has out's exact shape and is contiguous; out may alias it.
 *   linear: inputs x [..., K], weight [N, K], bias? [N], residual? [..., N]; attrs act (none),
 *     residual (false). out [..., N] = act(x weight^T + bias) + residual. The residual (a skip
 *     connection) has out's exact shape, is contiguous and never shares memory with out. Inputs
 *     are positional, so the attribute `residual` says that the last input is the residual:
 *     (x, weight, residual) with it set is a linear without a bias (in a spec,
 *     `{op: linear, in: [h, w, x], residual: true, ...}`); four inputs imply it. The fusion
 *     pass (engine/fuse.h) folds `add`s of a linear's output into it, setting the attribute.
 *     cuBLASLt adds the residual as its C matrix (beta = 1) when there is no activation, the
 *     skinny and Hopper kernels in their epilogues, else the epilogue kernel after the
 *     activation.
 *     Prologues (attrs rms_norm, eps, glu; at most one): the op computed on x before the
 *     product, so that the op producing x (an rmsnorm, a gated unit) needs no launch of its
 *     own (engine/fuse.h folds them). rms_norm: P(x) = x * rsqrt(mean(x^2) + eps) * norm_weight
 *     over K, norm_weight [K] the last input (after the residual); glu: x is [..., 2K], P(x) =
 *     glu(x[..., :K]) * x[..., K:] (the gate|up output of a fused gate_up projection, so no
 *     second input is needed and one row stride reaches both halves). P(x) is rounded to the
 *     dtype as the unfolded op's output was. The host backend computes both. On CUDA only
 *     rms_norm runs: the skinny kernel (M <= 16, f16/bf16) computes it as it loads x (each
 *     block scales x by norm_weight and sums x^2 of each row itself in a fixed order, scaling
 *     its dot products in the epilogue); every other path (larger M, f32, shapes the skinny
 *     kernel does not prefer) first writes P(x) into the op's workspace (one small kernel, as
 *     the unfolded op ran) and runs the product from it. CUDA refuses glu: its kernels gave
 *     different bits from run to run on the H100 and were removed (docs/SERVING.md,
 *     "Prologue folds").
 *     Gated output (attr gated, an activation; none: off): weight is [2F, K], gate rows then up
 *     rows (a fused gate_up projection), bias [2F], and out [..., F] = gated(g) * u with g and
 *     u the product's two halves, each rounded to the dtype as the unfolded linear's output
 *     was, then act(g) * u in f32 rounded once, as the `expr` the fusion pass folds in
 *     (engine/fuse.h, "Gated outputs"). Excludes act, residual and glu; takes rms_norm (a
 *     post-attention norm folded into the gate_up projection that computes the unit). The
 *     skinny kernel computes a block's gate rows beside their up rows and pairs them in its
 *     epilogue (one launch, the norm included); every other path writes the [M, 2F] product
 *     into the op's workspace (after P(x) with rms_norm) and a pass pairs it (two launches, as
 *     the unfolded ops, three with the norm's prologue).
 * All tensors share one float dtype; products accumulate in f32. Each matrix (the last two
 * dims) must have a unit stride in one of its two dims (a transposed view is free); batch
 * dims may have any non-negative strides.
 *
 *   recap__gemm_plan plan;
 *   RECAP_TRY(recap__gemm_plan_make(call, &plan));   // after recap__op_infer, data bound
 *
 * CUDA usage (the engine): run recap__op_prepare (the defs' prepare slot, recap__gemm_prepare)
 * for every GEMM call on its stream during warmup, then capture. Outside a capture
 * recap__cuda_gemm also prepares lazily; inside one, anything missing fails with
 * RECAP_STATUS_ILLEGAL_DURING_CAPTURE instead of invalidating it.
 */
#ifndef RECAP_KERNELS_GEMM_H
#define RECAP_KERNELS_GEMM_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/op.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const recap__op_def recap__op_matmul, recap__op_linear;

/* Which of the two ops a call is: the defs' `code` (recap__op_def.code), copied into the plan,
 * so that the plan and the backends tell matmul from linear without naming a def. */
typedef enum { RECAP__GEMM_MATMUL, RECAP__GEMM_LINEAR } recap__gemm_op;

/* Bytes of the workspace each CUDA stream gets for cuBLAS/cuBLASLt. */
#define RECAP_GEMM_WORKSPACE_BYTES ((size_t)32 << 20)

/* A linear's prologue: how the product reads its x (attrs.rms_norm, attrs.glu). */
typedef enum {
  RECAP__GEMM_PROLOGUE_NONE = 0,
  RECAP__GEMM_PROLOGUE_RMS_NORM, /* A(i, p) = x(i, p) * rsqrt(mean_p x(i, p)^2 + eps) * g[p] */
  RECAP__GEMM_PROLOGUE_GLU,      /* A(i, p) = glu(x(i, p)) * x(i, up_offset + p) */
} recap__gemm_prologue;

/* The work of one matmul or linear call, in row-major terms:
 *   out[i, j] = act(alpha * sum_p A(i, p) B(p, j) + beta * C(i, j) + bias[j]) + R(i, j)
 * for each batch index (outer, inner), with A(i, p) = a[i * a_rs + p * a_cs] (element
 * strides, transposes already applied) and likewise for B. Pointers are those of batch 0;
 * batch level l adds bs[l] elements per step. out, c and residual (R) are contiguous
 * [.., m, n] with out's batch strides. */
typedef struct {
  recap_dtype dtype;
  int64_t m, n, k;
  const void *a, *b, *c, *bias; /* c, bias: NULL when absent */
  const void *residual;         /* linear's residual, added after act; NULL when absent */
  void *out;
  int64_t a_rs, a_cs, b_rs, b_cs;
  int64_t batch[2]; /* outer, inner; merged into the inner level when one stride each does */
  int64_t a_bs[2], b_bs[2], out_bs[2]; /* c's batch strides are out's */
  float alpha, beta;
  recap__activation act;
  recap__gemm_op op; /* the tuning file keys on it */
  /* A linear's prologue (NONE for the rest): a is x as stored (for GLU its gate half, up_offset
   * elements before the up half of the same row); batch is 1 and a_cs 1. A(i, p) is rounded
   * to the dtype once, as the unfolded op's output was. */
  recap__gemm_prologue prologue;
  const void *norm_weight; /* RMS_NORM: [k] */
  double eps;              /* RMS_NORM: the attribute as given (the host reference adds it in
                            * double, as the rmsnorm op does; the kernels take it as float) */
  recap__activation glu;   /* GLU */
  int64_t up_offset;       /* GLU */
  /* A linear's gated output (NONE: off): n is the product's 2F columns and out is [m, F] =
   * gated(product[:, :F]) * product[:, F:]; batch is 1. */
  recap__activation gated;
} recap__gemm_plan;

/* Computes a plan's prologue, A(i, p) for i < m, p < k, into `dst` (contiguous [m, k] of the
 * plan's dtype) on the host, as the unfolded ops compute it: rmsnorm's sums in double, glu in
 * f32; one rounding. host.c. */
void recap__gemm_prologue_host(const recap__gemm_plan *p, void *dst);

/* Pairs a gated output's product on the host (gemm.h, top): out [m, n / 2] from product
 * [m, n] of the plan's dtype, as the `expr` act(gate) * up evaluates it. host.c. */
void recap__gemm_gated_host(const recap__gemm_plan *p, const void *product, void *out);

/* Which inputs of a linear call are its bias and its residual (-1: absent): the residual is the
 * last input when attrs.residual is set or all four are given, and the bias is input 2 when
 * that is not the residual. For calls of any input count (infer checks the count). */
void recap__gemm_linear_inputs(const recap__op_call *call, int *bias, int *residual);

/* `bytes` rounded up to a multiple of 256: the alignment every GEMM operand gets from the
 * allocator, kept by the regions the GEMM code lays out in its own scratch memory. */
static inline size_t recap__gemm_round_256(size_t bytes) {
  return (bytes + 255) & ~(size_t)255;
}

/* The CUDA workspace of a linear that does not run the skinny kernel (choose.c): P(x) [rows, k]
 * first when it has the norm's prologue, then the product [rows, n] (n = 2F) when it has a
 * gated output, each rounded up to 256 bytes (the alignment every GEMM operand gets from the
 * allocator); 0 for a part it does not have. */
void recap__gemm_workspace_layout(bool rms_norm, bool gated, int64_t rows, int64_t k, int64_t n,
                                  size_t dtype_size, size_t *prologue, size_t *product);

/* Builds the plan of a call that passed recap__op_infer (matmul or linear: its def's code says
 * which). Data pointers may be NULL (prepare before binding). RECAP_STATUS_INVALID_ARGUMENT
 * naming the op otherwise. */
recap_status recap__gemm_plan_make(const recap__op_call *call, recap__gemm_plan *out);

/* How a [rows, cols] matrix with element strides (rs, cs) looks to a column-major BLAS: with
 * *row_major set it is stored row by row with leading dimension *ld (>= cols), else column
 * by column (*ld >= rows). false when neither stride is unit (or rows overlap). */
bool recap__gemm_operand_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool *row_major,
                                int64_t *ld);

/* The host reference (the defs' run_host): runs the plan on the calling thread. */
recap_status recap__gemm_run_host(const recap__op_call *call);

/* ---- environment settings (settings.c) ---- */

/* The GEMM environment variables, read ONCE (pthread_once) at the first GEMM, so the launch
 * path never calls getenv:
 *   RECAP_GEMM_SKINNY=0        skinny shapes go to cuBLASLt (skinny)
 *   RECAP_GEMM_SKINNY_PDL=0    the skinny kernel without programmatic dependent launch
 *   RECAP_GEMM_SKINNY_PIPE=0   the skinny kernel without double-buffered loads
 *   RECAP_GEMM_SKINNY_WARPS=w  warps per block of the skinny kernel (1..16, power of two)
 *   RECAP_GEMM_SKINNY_BALANCE=0 the skinny kernel's bulk tiles always 16 rows of W
 *   RECAP_GEMM_HOPPER=0        shapes that would run our Hopper GEMM go to cuBLASLt
 *   RECAP_TUNE=0|1|2           tuning off / tune / cache only (tune.h)
 *   RECAP_TUNE_FILE=path       the tuning cache (default ./recap_tune.txt)
 * The =0 switches are boolean switches (runtime/env.h: false, no and off work too). Unknown
 * values keep the default. */
typedef struct {
  bool skinny, skinny_pdl, skinny_pipe, skinny_balance, hopper;
  int skinny_warps; /* 0: chosen per shape */
  int tune;         /* recap__tune_mode */
  char tune_file[1024];
} recap__gemm_env;

/* The settings (never NULL; read from the environment on the first call). */
const recap__gemm_env *recap__gemm_env_get(void);
/* Reads the environment again (settings.c). */
void recap__gemm_env_reread(void);
/* Reads the environment again and forgets every GEMM choice made under the old settings
 * (recap__gemm_tune_reset; reload.c, above both): for tests and benchmarks that change the
 * variables between runs. Not while GEMMs launch on other threads; a captured graph keeps what
 * it captured. */
void recap__gemm_env_reload(void);

/* ---- switches (process-wide, read at each launch; public wrappers in settings.c) ---- */

/* TF32 tensor-core math for f32 GEMMs on CUDA (off by default, like PyTorch's allow_tf32):
 * products round their inputs to 10 mantissa bits, so results differ from the host by ~1e-3
 * relative. Takes effect at the next launch; a captured graph keeps what it captured. */
void recap__gemm_set_allow_tf32(bool allow);
bool recap__gemm_allow_tf32(void);

/* recap_gemm_library is public (include/recap.h). */
/* RECAP_STATUS_INVALID_ARGUMENT for a value outside the enum. */
recap_status recap__gemm_set_library(recap_gemm_library library);
recap_gemm_library recap__gemm_library(void);

/* ---- CUDA (choose.c, cublaslt.c and the kernels) ---- */

/* The skinny kernel (skinny.cu). fits: whether the plan's shape, dtype, strides, prologue (none
 * or rms_norm) and (when bound) alignments suit it. The launcher runs the plan on `cuda_stream` of
 * `device`; RECAP_STATUS_INVALID_ARGUMENT for a plan that does not fit, a CUDA error status when
 * the launch fails. */
bool recap__cuda_gemm_skinny_fits(const recap__gemm_plan *p);
recap_status recap__cuda_gemm_skinny(const recap__gemm_plan *p, int device, void *cuda_stream);
/* The launch configuration recap__cuda_gemm_skinny uses for the plan on `device`: warps per
 * block (RECAP_GEMM_SKINNY_WARPS, else chosen for the shape) and the load scheme `pipe`: 0 one
 * register buffer (RECAP_GEMM_SKINNY_PIPE=0), 1 double-buffered registers, 2-4 bulk copies
 * into a shared-memory ring (Hopper; 4: four stages at m 5-8 for weights of at most one 16-row
 * block per SM, else 2 at m <= 4 and 2 or 3 at m 5-16 by default; docs/perf/skinny_gemm.md).
 * A CUDA error status when the device cannot be asked. */
recap_status recap__cuda_gemm_skinny_default(const recap__gemm_plan *p, int device, int *warps,
                                             int *pipe);
/* Whether the default configuration is expected to beat cuBLASLt on the plan's shape (fits
 * assumed; skinny.cu lists the measured exceptions): choose.c's default takes the kernel only
 * then. lt_needs_pass: cuBLASLt's epilogue cannot do all the plan fuses (an activation it
 * lacks, a prologue, a gated output), so it would need a pass after it. */
bool recap__cuda_gemm_skinny_preferred(const recap__gemm_plan *p, int device, bool lt_needs_pass);
/* Whether pipe's bulk shape takes the plan's m (pipe 4 takes m <= 8; every other pipe any m
 * the kernel fits). */
bool recap__cuda_gemm_skinny_pipe_fits(const recap__gemm_plan *p, int pipe);
/* recap__cuda_gemm_skinny with an explicit configuration (a tuning candidate): warps 1..16, a
 * power of two; pipe 0..4 where recap__cuda_gemm_skinny_pipe_fits (2-4 run as 1 before
 * Hopper). RECAP_STATUS_INVALID_ARGUMENT otherwise. */
recap_status recap__cuda_gemm_skinny_config(const recap__gemm_plan *p, int device,
                                            void *cuda_stream, int warps, int pipe);

/* Our Hopper GEMM (hopper.cu; sm_90a, devices of compute capability 9.0 only), with the
 * bias, every activation and the residual in its epilogue. fits: whether the plan's dtype,
 * shape, strides and (when bound) alignments suit it AND `device` can run it. configs: how
 * many tile configurations there are (0..configs-1, the tuning file's value); default: the one
 * chosen for the plan's shape on `device`. The launcher runs the plan on `cuda_stream` of
 * `device`, which must be the current device; RECAP_STATUS_INVALID_ARGUMENT for a plan or
 * config that does not fit. */
bool recap__cuda_gemm_hopper_fits(const recap__gemm_plan *p, int device);
int recap__cuda_gemm_hopper_configs(void);
int recap__cuda_gemm_hopper_default(const recap__gemm_plan *p, int device);
recap_status recap__cuda_gemm_hopper(const recap__gemm_plan *p, int device, void *cuda_stream,
                                     int config);
/* Whether our Hopper kernel with its fused epilogue is expected to beat cuBLASLt plus the
 * epilogue pass on the plan's shape (hopper.cu lists the measurements): choose.c's default
 * takes it only then. */
bool recap__cuda_gemm_hopper_preferred(const recap__gemm_plan *p);

/* The defs' prepare slot (ops.c): the warmup for one GEMM call on `stream`. Creates this
 * thread's cuBLAS and cuBLASLt handles for the stream's device, the stream's workspace, and
 * (cuBLASLt) the algorithm for the call's shape, so the same call can then be captured. A
 * host stream needs nothing: RECAP_OK. Inside a capture it succeeds only if everything
 * already exists (then it does nothing), else RECAP_STATUS_ILLEGAL_DURING_CAPTURE. Errors: the
 * plan's, OUT_OF_MEMORY for the workspace, LIBRARY_ERROR from cuBLAS. */
recap_status recap__gemm_prepare(const recap__op_call *call, recap_stream *stream);

#if RECAP_WITH_CUDA
/* recap__gemm_prepare for a CUDA stream (a cudaStream_t). */
recap_status recap__cuda_gemm_prepare(const recap__op_call *call, void *cuda_stream);
/* The workspace recap uses for GEMMs on `cuda_stream` (a cudaStream_t), or NULL when none was
 * created yet. For tests: two streams never share one. */
void *recap__gemm_stream_workspace(void *cuda_stream);
/* Frees the workspace of a stream that is about to be destroyed (its GEMMs must have
 * finished). RECAP_STATUS_ILLEGAL_DURING_CAPTURE while any capture is under way (the free
 * would invalidate it); RECAP_OK when the stream has none. */
recap_status recap__gemm_release_stream(void *cuda_stream);
/* The linked cuBLAS and cuBLASLt versions (major * 10000 + minor * 100 + patch), 0 for one
 * that cannot be asked. Registered with the runtime (runtime/versions.h) at load. */
void recap__gemm_blas_versions(int *cublas, int *cublaslt);

/* Tuning checks (tune_check.cu), on `cuda_stream`: atomically raises *max_bits (the
 * bits of a non-negative float, 0 to start) to the largest finite |x[i]| of `count` elements;
 * and adds to *mismatches the number of elements where got and ref differ by more than
 * rtol * max(|ref|, |got|) + atol_frac * max|ref| (read from *max_bits). NaN matches NaN and an
 * infinity only itself. Both pointers are device memory. */
recap_status recap__cuda_gemm_tune_maxabs(const void *x, recap_dtype dtype, int64_t count,
                                          unsigned *max_bits, void *cuda_stream);
recap_status recap__cuda_gemm_tune_compare(const void *ref, const void *got, recap_dtype dtype,
                                           int64_t count, const unsigned *max_bits, float rtol,
                                           float atol_frac, unsigned long long *mismatches,
                                           void *cuda_stream);

/* Writes a linear plan's norm prologue P(x) (gemm.h, top) into `dst`, contiguous [m, k] of its
 * dtype, on `cuda_stream`: for the paths that then run the product from it. The gated unit's
 * is refused (NOT_SUPPORTED). prologue.cu. */
recap_status recap__cuda_gemm_prologue(const recap__gemm_plan *p, void *dst, void *cuda_stream);

/* In place over the contiguous [rows, cols] output of a GEMM: out[r, c] = act(out[r, c] +
 * bias[c]) + residual[r, c] (bias, residual NULL: none; residual is contiguous [rows, cols]
 * and does not overlap out), in f32 math rounded once, on `cuda_stream`.
 * kernels/gemm/epilogue.cu. */
recap_status recap__cuda_gemm_bias_act(void *out, const void *bias, const void *residual,
                                       recap_dtype dtype, int64_t rows, int64_t cols,
                                       recap__activation act, void *cuda_stream);

/* A gated output's pairing pass: out[r, c] = act(product[r, c]) * product[r, half + c] for
 * r < rows, c < half, product contiguous [rows, 2 half] and out contiguous [rows, half] of
 * `dtype`, in f32 rounded once, on `cuda_stream`. kernels/gemm/epilogue.cu. */
recap_status recap__cuda_gemm_gated(void *out, const void *product, recap_dtype dtype, int64_t rows,
                                    int64_t half, recap__activation act, void *cuda_stream);
#endif

/* ---- the activations, one definition for host and device code ---- */
#if defined(__CUDACC__)
#define RECAP__GEMM_HD __host__ __device__ __forceinline__
#else
#define RECAP__GEMM_HD static inline
#endif

#if defined(__CUDACC__)
/* The erf gelu on the GPU, about half the instructions of 0.5 x (1 + erff(x / sqrt 2)) (which
 * made the gelu pass after a GEMM issue-bound: docs/perf/kernels.md). With a = |x| and
 * E = erfc(a / sqrt 2) / 2, gelu(x) = max(x, 0) - a E for either sign, and log2(E) is a smooth
 * function of a: E = 2^(a q(a) - 1) with q a degree-7 polynomial, fitted offline (weighted
 * least squares in 40-digit arithmetic, weight a E, so the error is measured where it shows in
 * the result) over a < 5.6; past that, a E is below half an ulp of the result and is dropped.
 * Against gelu in double over every finite f32 (measured on an H100, docs/perf/kernels.md):
 * the erf it implies, 1 - 2E, is within 1.8e-7 of erf (erff: 8.9e-8); the result is within
 * 2.7e-7 absolute everywhere and 11.3 ulp for x >= -2, where the erff form is within 4.9e-7
 * and 17.7 ulp (it cancels in 1 + erff for negative x). NaN stays NaN (max.NaN), +inf gives
 * +inf and -inf gives 0 (the erff form: NaN). The host reference keeps erff. */
__device__ __forceinline__ float recap__gelu_erf_device(float x) {
  const float a = fabsf(x);
  float q = -2.834875886e-06f;
  q = fmaf(q, a, 3.937716247e-05f);
  q = fmaf(q, a, -1.861774363e-04f);
  q = fmaf(q, a, -1.369435631e-04f);
  q = fmaf(q, a, 7.063429803e-03f);
  q = fmaf(q, a, -5.249618366e-02f);
  q = fmaf(q, a, -4.592081904e-01f);
  q = fmaf(q, a, -1.151105165e+00f);
  float e, pos;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(fmaf(a, q, -1.0f)));
  asm("max.NaN.f32 %0, %1, 0f00000000;" : "=f"(pos) : "f"(x));
  return a < 5.6f ? fmaf(-a, e, pos) : pos;
}
#endif

RECAP__GEMM_HD float recap__gemm_activate(recap__activation act, float x) {
  switch (act) {
    case RECAP_ACT_RELU:
      return x > 0.0f ? x : 0.0f;
#if defined(__CUDA_ARCH__)
    case RECAP_ACT_GELU:
      return recap__gelu_erf_device(x);
#else
    case RECAP_ACT_GELU:
      return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
#endif
    case RECAP_ACT_GELU_TANH:
      return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case RECAP_ACT_SILU:
      return x / (1.0f + expf(-x));
    case RECAP_ACT_SIGMOID:
      return 1.0f / (1.0f + expf(-x));
    case RECAP_ACT_TANH:
      return tanhf(x);
    default:
      return x;
  }
}

#ifdef __cplusplus
}
#endif

#if defined(__CUDACC__)
#include <type_traits>

/* Calls fn(std::integral_constant<recap__activation, A>{}) with A == act, so that a kernel or a
 * launcher is instantiated per activation (a template parameter, constant-folded in
 * recap__gemm_activate) from one switch; returns false without calling fn for a value outside
 * the enum. Host and device code. */
#pragma nv_exec_check_disable
template <typename Fn>
__host__ __device__ __forceinline__ bool recap__with_activation(recap__activation act, Fn &&fn) {
  switch (act) {
    case RECAP_ACT_NONE:
      fn(std::integral_constant<recap__activation, RECAP_ACT_NONE>{});
      return true;
    case RECAP_ACT_RELU:
      fn(std::integral_constant<recap__activation, RECAP_ACT_RELU>{});
      return true;
    case RECAP_ACT_GELU:
      fn(std::integral_constant<recap__activation, RECAP_ACT_GELU>{});
      return true;
    case RECAP_ACT_GELU_TANH:
      fn(std::integral_constant<recap__activation, RECAP_ACT_GELU_TANH>{});
      return true;
    case RECAP_ACT_SILU:
      fn(std::integral_constant<recap__activation, RECAP_ACT_SILU>{});
      return true;
    case RECAP_ACT_SIGMOID:
      fn(std::integral_constant<recap__activation, RECAP_ACT_SIGMOID>{});
      return true;
    case RECAP_ACT_TANH:
      fn(std::integral_constant<recap__activation, RECAP_ACT_TANH>{});
      return true;
  }
  return false;
}
#endif

#endif
