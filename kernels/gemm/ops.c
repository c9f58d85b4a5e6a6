/*
 * ops.c: the matmul and linear op definitions (gemm.h describes both), their shape inference
 * and their prepare step.
 *
 * Host-only C: the engine and the sanitizer builds use it without CUDA. The defs point at the
 * backends: the host loop (host.c) and the CUDA path (choose.c); all of them run the plan
 * (plan.c), which tells the two ops apart by the defs' `code` (recap__gemm_op).
 */
#include <math.h>
#include <stddef.h>

#include "kernels/cuda_ops.h"
#include "kernels/gemm/gemm.h"
#include "kernels/infer.h"
#include "runtime/backend.h"

static const char *const matmul_inputs[] = {"a", "b", "c?", NULL};
static const char *const linear_inputs[] = {"x",         "weight",       "bias?",
                                            "residual?", "norm_weight?", NULL};

static const recap__attr_def matmul_attrs[] = {
    {"alpha", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, alpha), false, 1,
     "scales the product: out = alpha * op(a) op(b) + beta * c"},
    {"beta", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, beta), false, 0,
     "scales input c (required when beta != 0)"},
    {"trans_a", RECAP_ATTR_BOOL, offsetof(recap__op_attrs, trans_a), false, 0,
     "a is stored [..., K, M]: use its transpose"},
    {"trans_b", RECAP_ATTR_BOOL, offsetof(recap__op_attrs, trans_b), false, 0,
     "b is stored [..., N, K]: use its transpose"},
    {.name = NULL},
};

static const recap__attr_def linear_attrs[] = {
    {"act", RECAP_ATTR_ACTIVATION, offsetof(recap__op_attrs, act), false, RECAP_ACT_NONE,
     "activation applied after the bias (none, relu, gelu (erf), gelu_tanh, silu, sigmoid, "
     "tanh); relu (and gelu_tanh in f16/bf16) fuse into cuBLASLt's epilogue, the others run as a "
     "kernel "
     "after it"},
    {"residual", RECAP_ATTR_BOOL, offsetof(recap__op_attrs, residual), false, 0,
     "the last input is the residual, added after the activation: (x, weight, residual) is a "
     "linear without a bias; implied when all four inputs are given"},
    {"rms_norm", RECAP_ATTR_BOOL, offsetof(recap__op_attrs, rms_norm), false, 0,
     "x is first normalized as rmsnorm does, x * rsqrt(mean(x^2) + eps) * norm_weight over its "
     "last dim, with norm_weight [K] the last input (after the residual): a folded rmsnorm, "
     "which then costs no launch of its own"},
    {"eps", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, eps), false, 1e-6,
     "rms_norm's epsilon, added to the mean square"},
    {"glu", RECAP_ATTR_ACTIVATION, offsetof(recap__op_attrs, glu), false, RECAP_ACT_NONE,
     "a gated prologue: x is [..., 2K] (gate, then up) and the product reads glu(x[..., :K]) * "
     "x[..., K:] (silu: SwiGLU's down projection; none: off); host backend only for now, CUDA "
     "refuses it"},
    {"gated", RECAP_ATTR_ACTIVATION, offsetof(recap__op_attrs, gated), false, RECAP_ACT_NONE,
     "a gated output: weight is [2F, K] (gate rows, then up rows) and out [..., F] = "
     "gated(gate) * up of the product's halves (silu: SwiGLU's gate_up projection with its unit "
     "folded in; none: off); excludes act, residual and glu, takes rms_norm"},
    {.name = NULL},
};

static recap_status check_matrix(const recap__op_call *call, int index, int64_t rows, int64_t cols,
                                 int64_t rs, int64_t cs) {
  const recap_tensor *t = &call->inputs[index];
  for (int d = 0; d < t->ndim; ++d)
    if (t->strides[d] < 0)
      return RECAP_OP_FAIL(call, "input '%s' has a negative stride (%lld in dim %d)",
                           recap__input_label(call->def, index).s, (long long)t->strides[d], d);
  bool row_major;
  int64_t ld;
  if (!recap__gemm_operand_layout(rows, cols, rs, cs, &row_major, &ld))
    return RECAP_OP_FAIL(call,
                         "input '%s' %s: its last two dims have strides (%lld, %lld); one of "
                         "them must be 1 and the other must not make rows overlap (copy it "
                         "first)",
                         recap__input_label(call->def, index).s, recap__shape_label(t).s,
                         (long long)rs, (long long)cs);
  return RECAP_OK;
}

/* recap__infer_same_dtype for the inputs whose position depends on attribute `residual`, so
 * the message names what the input is rather than what its position usually holds. */
static recap_status check_same_dtype(const recap__op_call *call, int index, const char *name) {
  if (call->inputs[index].dtype != call->inputs[0].dtype)
    return RECAP_OP_FAIL(call, "input '%s' has dtype %s, but input 'x' has %s (they must match)",
                         name, recap__dtype_label(call->inputs[index].dtype).s,
                         recap__dtype_label(call->inputs[0].dtype).s);
  return RECAP_OK;
}

static recap_status check_alpha_beta(recap__op_call *call) {
  if (!isfinite(call->attrs.alpha) || !isfinite(call->attrs.beta))
    return RECAP_OP_FAIL(call, "attributes 'alpha' (%g) and 'beta' (%g) must be finite",
                         call->attrs.alpha, call->attrs.beta);
  bool has_c = call->num_inputs > 2;
  if (call->attrs.beta != 0 && !has_c)
    return RECAP_OP_FAIL(call,
                         "attribute 'beta' = %g needs input 'c' (out = alpha * a b + "
                         "beta * c)",
                         call->attrs.beta);
  if (call->attrs.beta == 0 && has_c)
    return RECAP_OP_FAIL(call,
                         "input 'c' is given but attribute 'beta' is 0, so it would be "
                         "ignored; set beta (1 adds c) or drop c");
  return RECAP_OK;
}

/* ---- matmul ------------------------------------------------------------------------------ */

static recap_status matmul_infer(recap__op_call *call) {
  const recap_tensor *a = &call->inputs[0], *b = &call->inputs[1];
  RECAP_TRY(recap__infer_ndim(call, 0, 2, RECAP_MAX_DIMS));
  RECAP_TRY(recap__infer_ndim(call, 1, 2, RECAP_MAX_DIMS));
  RECAP_TRY(recap__infer_same_dtype(call, 1));
  RECAP_TRY(check_alpha_beta(call));
  const bool ta = call->attrs.trans_a != 0, tb = call->attrs.trans_b != 0;
  const int64_t ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
  const int64_t br = b->shape[b->ndim - 2], bc = b->shape[b->ndim - 1];
  const int64_t m = ta ? ac : ar, ka = ta ? ar : ac, kb = tb ? bc : br, n = tb ? br : bc;
  if (ka != kb)
    return RECAP_OP_FAIL(call, "inner dimensions differ: a %s%s has K = %lld, b %s%s has K = %lld",
                         recap__shape_label(a).s, ta ? " (trans_a)" : "", (long long)ka,
                         recap__shape_label(b).s, tb ? " (trans_b)" : "", (long long)kb);
  RECAP_TRY(check_matrix(call, 0, ar, ac, a->strides[a->ndim - 2], a->strides[a->ndim - 1]));
  RECAP_TRY(check_matrix(call, 1, br, bc, b->strides[b->ndim - 2], b->strides[b->ndim - 1]));

  const int ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
  int64_t shape[RECAP_MAX_DIMS];
  for (int d = 0; d < ndim - 2; ++d) {
    const int da = d - (ndim - a->ndim), db = d - (ndim - b->ndim);
    const int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      return RECAP_OP_FAIL(call,
                           "batch dimensions of a %s and b %s do not broadcast (dim %d: %lld vs "
                           "%lld)",
                           recap__shape_label(a).s, recap__shape_label(b).s, d, (long long)sa,
                           (long long)sb);
    shape[d] = sa == 1 ? sb : sa;
  }
  shape[ndim - 2] = m;
  shape[ndim - 1] = n;
  recap__infer_output(call, 0, a->dtype, ndim, shape);

  if (call->num_inputs > 2) {
    const recap_tensor *c = &call->inputs[2];
    RECAP_TRY(recap__infer_same_dtype(call, 2));
    bool same = c->ndim == ndim;
    for (int d = 0; same && d < ndim; ++d) same = c->shape[d] == shape[d];
    if (!same)
      return RECAP_OP_FAIL(call, "input 'c' has shape %s, expected the output's %s",
                           recap__shape_label(c).s, recap__shape_label(&call->outputs[0]).s);
    if (!recap__tensor_is_contiguous(c))
      return RECAP_OP_FAIL(call, "input 'c' %s must be contiguous (copy it first)",
                           recap__shape_label(c).s);
  }
  return RECAP_OK;
}

/* ---- linear ------------------------------------------------------------------------------ */

static recap_status linear_infer(recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0], *w = &call->inputs[1];
  RECAP_TRY(recap__infer_ndim(call, 0, 1, RECAP_MAX_DIMS));
  RECAP_TRY(recap__infer_ndim(call, 1, 2, 2));
  RECAP_TRY(recap__infer_same_dtype(call, 1));
  if ((unsigned)call->attrs.act > (unsigned)RECAP_ACT_TANH)
    return RECAP_OP_FAIL(call, "attribute 'act' has an unknown value %d", (int)call->attrs.act);
  if ((unsigned)call->attrs.glu > (unsigned)RECAP_ACT_TANH)
    return RECAP_OP_FAIL(call, "attribute 'glu' has an unknown value %d", (int)call->attrs.glu);
  if ((unsigned)call->attrs.gated > (unsigned)RECAP_ACT_TANH)
    return RECAP_OP_FAIL(call, "attribute 'gated' has an unknown value %d", (int)call->attrs.gated);
  const bool glu = call->attrs.glu != RECAP_ACT_NONE;
  if (glu && call->attrs.rms_norm)
    return RECAP_OP_FAIL(call, "attributes 'rms_norm' and 'glu' exclude each other");
  const bool gated = call->attrs.gated != RECAP_ACT_NONE;
  if (gated && (glu || call->attrs.residual || call->attrs.act != RECAP_ACT_NONE ||
                call->num_inputs > 3 + (call->attrs.rms_norm ? 1 : 0)))
    return RECAP_OP_FAIL(call,
                         "attribute 'gated' excludes 'act', 'residual' and 'glu' (inputs: x, "
                         "weight, an optional bias and, with rms_norm, the norm's weight)");
  if (gated && w->shape[0] % 2 != 0)
    return RECAP_OP_FAIL(call,
                         "attribute 'gated' reads weight %s as gate and up halves of its rows, "
                         "which must be even",
                         recap__shape_label(w).s);
  const int64_t width = x->shape[x->ndim - 1], k = glu ? width / 2 : width, n = w->shape[0];
  if (glu && width % 2 != 0)
    return RECAP_OP_FAIL(call,
                         "attribute 'glu' reads x %s as gate and up halves of its last dim, "
                         "which must be even",
                         recap__shape_label(x).s);
  if (w->shape[1] != k)
    return RECAP_OP_FAIL(call,
                         "input 'weight' has shape %s, expected [N, %lld] (x %s has K = %lld "
                         "in its last dim%s)",
                         recap__shape_label(w).s, (long long)k, recap__shape_label(x).s,
                         (long long)k, glu ? ", the half that glu reads" : "");
  for (int d = 0; d < x->ndim; ++d)
    if (x->strides[d] < 0)
      return RECAP_OP_FAIL(call, "input 'x' has a negative stride (%lld in dim %d)",
                           (long long)x->strides[d], d);
  if (x->ndim >= 2)
    RECAP_TRY(check_matrix(call, 0, x->shape[x->ndim - 2], width, x->strides[x->ndim - 2],
                           x->strides[x->ndim - 1]));
  else if (width > 1 && x->strides[0] != 1)
    return RECAP_OP_FAIL(call, "input 'x' %s must be contiguous", recap__shape_label(x).s);
  RECAP_TRY(check_matrix(call, 1, n, k, w->strides[0], w->strides[1]));
  if ((glu || call->attrs.rms_norm) && width > 1 && x->strides[x->ndim - 1] != 1)
    return RECAP_OP_FAIL(call,
                         "a prologue (rms_norm, glu) reads x %s by rows: its last dim must "
                         "have stride 1 (copy it first)",
                         recap__shape_label(x).s);
  if (call->attrs.rms_norm) {
    if (call->num_inputs < 3)
      return RECAP_OP_FAIL(call,
                           "attribute 'rms_norm' says the last input is the norm's weight, but "
                           "only x and weight are given");
    const int g = call->num_inputs - 1;
    const recap_tensor *gamma = &call->inputs[g];
    RECAP_TRY(check_same_dtype(call, g, "norm_weight"));
    if (gamma->ndim != 1 || gamma->shape[0] != k)
      return RECAP_OP_FAIL(call, "input 'norm_weight' has shape %s, expected [%lld] (x's K)",
                           recap__shape_label(gamma).s, (long long)k);
    if (k > 1 && gamma->strides[0] != 1)
      return RECAP_OP_FAIL(call, "input 'norm_weight' must be contiguous (stride %lld)",
                           (long long)gamma->strides[0]);
    RECAP_TRY(recap__infer_eps(call));
  }
  int bias_at, residual_at;
  recap__gemm_linear_inputs(call, &bias_at, &residual_at);
  if (call->attrs.residual && residual_at < 0)
    return RECAP_OP_FAIL(call,
                         "attribute 'residual' says the last input is the residual, but only "
                         "x and weight are given");
  if (bias_at >= 0) {
    const recap_tensor *bias = &call->inputs[bias_at];
    RECAP_TRY(check_same_dtype(call, bias_at, "bias"));
    if (bias->ndim != 1 || bias->shape[0] != n)
      return RECAP_OP_FAIL(call, "input 'bias' has shape %s, expected [%lld] (weight's N)",
                           recap__shape_label(bias).s, (long long)n);
    if (n > 1 && bias->strides[0] != 1)
      return RECAP_OP_FAIL(call, "input 'bias' must be contiguous (stride %lld)",
                           (long long)bias->strides[0]);
  }
  int64_t shape[RECAP_MAX_DIMS];
  for (int d = 0; d < x->ndim - 1; ++d) shape[d] = x->shape[d];
  shape[x->ndim - 1] = gated ? n / 2 : n;
  recap__infer_output(call, 0, x->dtype, x->ndim, shape);
  if (residual_at >= 0) {
    /* Read element for element with the output, as matmul's c. */
    const recap_tensor *r = &call->inputs[residual_at];
    RECAP_TRY(check_same_dtype(call, residual_at, "residual"));
    bool same = r->ndim == x->ndim;
    for (int d = 0; same && d < x->ndim; ++d) same = r->shape[d] == shape[d];
    if (!same)
      return RECAP_OP_FAIL(call, "input 'residual' has shape %s, expected the output's %s",
                           recap__shape_label(r).s, recap__shape_label(&call->outputs[0]).s);
    if (!recap__tensor_is_contiguous(r))
      return RECAP_OP_FAIL(call, "input 'residual' %s must be contiguous (copy it first)",
                           recap__shape_label(r).s);
  }
  return RECAP_OK;
}

/* A linear with the norm's prologue that does not run the skinny kernel computes P(x) [M, K]
 * into its workspace first, and one with a gated output its product [M, 2F] after it
 * (kernels/gemm/choose.c, recap__gemm_workspace_layout); CUDA refuses the gated unit's
 * prologue, and the host reference allocates its own. */
static size_t linear_workspace_bytes(const recap__op_call *call, recap_backend_kind backend) {
  if (backend != RECAP_BACKEND_CUDA) return 0;
  const recap_tensor *o = &call->outputs[0];
  const int64_t rows =
      o->shape[o->ndim - 1] > 0 ? recap__tensor_numel(o) / o->shape[o->ndim - 1] : 0;
  size_t prologue, product;
  recap__gemm_workspace_layout(call->attrs.rms_norm, call->attrs.gated != RECAP_ACT_NONE, rows,
                               call->inputs[1].shape[1], call->inputs[1].shape[0],
                               recap_dtype_size(o->dtype), &prologue, &product);
  return prologue + product;
}

/* ---- prepare ----------------------------------------------------------------------------- */

recap_status recap__gemm_prepare(const recap__op_call *call, recap_stream *stream) {
  RECAP_CHECK_ARG(call && call->def && stream && stream->backend);
  if (stream->backend->kind == RECAP_BACKEND_HOST) return RECAP_OK;
#if RECAP_WITH_CUDA
  return recap__cuda_gemm_prepare(call, recap_stream_native(stream));
#else
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "gemm: this build has no CUDA backend");
#endif
}

/* ---- the defs ---------------------------------------------------------------------------- */

/* The inner dimension K: a multiply and an add per element of the product and step of K. */
static double gemm_flops(const recap__op_call *call) {
  const recap_tensor *a = &call->inputs[0];
  bool trans_a = call->def->code == RECAP__GEMM_MATMUL && call->attrs.trans_a;
  int64_t k = trans_a ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
  return 2.0 * (double)recap__tensor_numel(&call->outputs[0]) * (double)k;
}

/* K of both operands: a's (op(a)'s columns) and b's (op(b)'s rows). */
static int matmul_reduced_axes(const recap__op_attrs *attrs, int input[4], int axis[4]) {
  input[0] = 0, axis[0] = attrs->trans_a ? -2 : -1;
  input[1] = 1, axis[1] = attrs->trans_b ? -1 : -2;
  return 2;
}

/* K of x and of weight [N, K]. */
static int linear_reduced_axes(const recap__op_attrs *attrs, int input[4], int axis[4]) {
  (void)attrs;
  input[0] = 0, axis[0] = -1;
  input[1] = 1, axis[1] = -1;
  return 2;
}

const recap__op_def recap__op_matmul = {
    .name = "matmul",
    .code = RECAP__GEMM_MATMUL,
    .summary = "alpha * op(a) op(b) + beta * c, batched with broadcast batch dims",
    .input_names = matmul_inputs,
    .min_inputs = 2,
    .max_inputs = 3,
    .num_outputs = 1,
    .attrs = matmul_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = 2,
    .reduced_axes = matmul_reduced_axes,
    .flops = gemm_flops,
    .infer = matmul_infer,
    .run_host = recap__gemm_run_host,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_gemm),
    .prepare = recap__gemm_prepare,
};

const recap__op_def recap__op_linear = {
    .name = "linear",
    .code = RECAP__GEMM_LINEAR,
    .summary =
        "act(P(x) weight^T + bias) + residual: weight [N, K], bias [N], residual as out "
        "(inputs x, weight, residual with attribute residual: no bias); P, the prologue, is x "
        "itself, its rmsnorm (rms_norm, weight norm_weight, the last input) or glu(gate) * up "
        "of its halves (glu); with `gated`, gated(gate) * up of the product's halves",
    .input_names = linear_inputs,
    .min_inputs = 2,
    .max_inputs = 5,
    .num_outputs = 1,
    .attrs = linear_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = -1,
    /* A folded add supplies its last input, the residual, with or without a bias before it
     * (engine/fuse.h). */
    .folds_residual = true,
    /* A folded rmsnorm or gated unit runs as the x load of the product (gemm.h). */
    .takes_prologue = true,
    /* A folded gated unit over the two halves of the product is paired in its epilogue. */
    .takes_gated_output = true,
    .reduced_axes = linear_reduced_axes,
    .flops = gemm_flops,
    .infer = linear_infer,
    .workspace_bytes = linear_workspace_bytes,
    .run_host = recap__gemm_run_host,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_gemm),
    .prepare = recap__gemm_prepare,
};
