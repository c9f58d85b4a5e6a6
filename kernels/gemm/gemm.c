/*
 * gemm.c: the matmul and linear op definitions, their shape inference, the plan both
 * backends run (recap__gemm_plan, see gemm.h), and the process-wide GEMM switches.
 *
 * Host-only C: the engine and the sanitizer builds use it without CUDA. The CUDA plumbing is
 * in cuda_gemm.c, the host loop in host.c.
 */
#include "kernels/gemm/gemm.h"

#include <math.h>
#include <stddef.h>

#include "kernels/cuda_ops.h"
#include "kernels/infer.h"
#include "runtime/backend.h"

static const char *const matmul_inputs[] = {"a", "b", "c?", NULL};
static const char *const linear_inputs[] = {"x", "weight", "bias?", "residual?", NULL};

static const recap_attr_def matmul_attrs[] = {
    {"alpha", RECAP_ATTR_FLOAT, offsetof(recap_op_attrs, alpha), false, 1,
     "scales the product: out = alpha * op(a) op(b) + beta * c"},
    {"beta", RECAP_ATTR_FLOAT, offsetof(recap_op_attrs, beta), false, 0,
     "scales input c (required when beta != 0)"},
    {"trans_a", RECAP_ATTR_BOOL, offsetof(recap_op_attrs, trans_a), false, 0,
     "a is stored [..., K, M]: use its transpose"},
    {"trans_b", RECAP_ATTR_BOOL, offsetof(recap_op_attrs, trans_b), false, 0,
     "b is stored [..., N, K]: use its transpose"},
    {.name = NULL},
};

static const recap_attr_def linear_attrs[] = {
    {"act", RECAP_ATTR_ACTIVATION, offsetof(recap_op_attrs, act), false, RECAP_ACT_NONE,
     "activation applied after the bias (none, relu, gelu (erf), gelu_tanh, silu, sigmoid, "
     "tanh); relu and gelu_tanh fuse into cuBLASLt's epilogue, the others run as a kernel "
     "after it"},
    {.name = NULL},
};

/* ---- matrix layouts -------------------------------------------------------------------- */

bool recap__gemm_operand_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs,
                                bool *row_major, int64_t *ld) {
  /* A dimension of size 1 never steps, so its stride is free: pick the one a BLAS accepts. */
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= cols)) {
    *row_major = true;
    *ld = rows == 1 ? cols : rs;
    return true;
  }
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= rows)) {
    *row_major = false;
    *ld = cols == 1 ? rows : cs;
    return true;
  }
  return false;
}

static recap_status check_matrix(const recap_op_call *call, int index, int64_t rows,
                                 int64_t cols, int64_t rs, int64_t cs) {
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

static recap_status check_alpha_beta(recap_op_call *call) {
  if (!isfinite(call->attrs.alpha) || !isfinite(call->attrs.beta))
    return RECAP_OP_FAIL(call, "attributes 'alpha' (%g) and 'beta' (%g) must be finite",
                         call->attrs.alpha, call->attrs.beta);
  bool has_c = call->num_inputs > 2;
  if (call->attrs.beta != 0 && !has_c)
    return RECAP_OP_FAIL(call, "attribute 'beta' = %g needs input 'c' (out = alpha * a b + "
                         "beta * c)", call->attrs.beta);
  if (call->attrs.beta == 0 && has_c)
    return RECAP_OP_FAIL(call, "input 'c' is given but attribute 'beta' is 0, so it would be "
                         "ignored; set beta (1 adds c) or drop c");
  return RECAP_OK;
}

/* ---- matmul ------------------------------------------------------------------------------ */

static recap_status matmul_infer(recap_op_call *call) {
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
    return RECAP_OP_FAIL(call,
                         "inner dimensions differ: a %s%s has K = %lld, b %s%s has K = %lld",
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

static recap_status linear_infer(recap_op_call *call) {
  const recap_tensor *x = &call->inputs[0], *w = &call->inputs[1];
  RECAP_TRY(recap__infer_ndim(call, 0, 1, RECAP_MAX_DIMS));
  RECAP_TRY(recap__infer_ndim(call, 1, 2, 2));
  RECAP_TRY(recap__infer_same_dtype(call, 1));
  if ((unsigned)call->attrs.act > (unsigned)RECAP_ACT_TANH)
    return RECAP_OP_FAIL(call, "attribute 'act' has an unknown value %d", (int)call->attrs.act);
  const int64_t k = x->shape[x->ndim - 1], n = w->shape[0];
  if (w->shape[1] != k)
    return RECAP_OP_FAIL(call,
                         "input 'weight' has shape %s, expected [N, %lld] (x %s has K = %lld "
                         "in its last dim)",
                         recap__shape_label(w).s, (long long)k, recap__shape_label(x).s,
                         (long long)k);
  for (int d = 0; d < x->ndim; ++d)
    if (x->strides[d] < 0)
      return RECAP_OP_FAIL(call, "input 'x' has a negative stride (%lld in dim %d)",
                           (long long)x->strides[d], d);
  if (x->ndim >= 2)
    RECAP_TRY(check_matrix(call, 0, x->shape[x->ndim - 2], k, x->strides[x->ndim - 2],
                           x->strides[x->ndim - 1]));
  else if (k > 1 && x->strides[0] != 1)
    return RECAP_OP_FAIL(call, "input 'x' %s must be contiguous", recap__shape_label(x).s);
  RECAP_TRY(check_matrix(call, 1, n, k, w->strides[0], w->strides[1]));
  if (call->num_inputs > 2) {
    const recap_tensor *bias = &call->inputs[2];
    RECAP_TRY(recap__infer_same_dtype(call, 2));
    if (bias->ndim != 1 || bias->shape[0] != n)
      return RECAP_OP_FAIL(call, "input 'bias' has shape %s, expected [%lld] (weight's N)",
                           recap__shape_label(bias).s, (long long)n);
    if (n > 1 && bias->strides[0] != 1)
      return RECAP_OP_FAIL(call, "input 'bias' must be contiguous (stride %lld)",
                           (long long)bias->strides[0]);
  }
  int64_t shape[RECAP_MAX_DIMS];
  for (int d = 0; d < x->ndim - 1; ++d) shape[d] = x->shape[d];
  shape[x->ndim - 1] = n;
  recap__infer_output(call, 0, x->dtype, x->ndim, shape);
  if (call->num_inputs > 3) {
    /* Read element for element with the output, as matmul's c. */
    const recap_tensor *r = &call->inputs[3];
    RECAP_TRY(recap__infer_same_dtype(call, 3));
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

/* ---- the plan ---------------------------------------------------------------------------- */

/* Merges the outer batch level into the inner one when a single stride per operand covers
 * both (always, for contiguous operands), so the CUDA path makes one batched call. */
static void merge_batch_levels(recap__gemm_plan *p) {
  if (p->batch[0] == 1) return;
  if (p->batch[1] == 1) {
    p->batch[1] = p->batch[0];
    p->a_bs[1] = p->a_bs[0];
    p->b_bs[1] = p->b_bs[0];
    p->out_bs[1] = p->out_bs[0];
  } else if (p->a_bs[0] == p->batch[1] * p->a_bs[1] && p->b_bs[0] == p->batch[1] * p->b_bs[1] &&
             p->out_bs[0] == p->batch[1] * p->out_bs[1]) {
    p->batch[1] *= p->batch[0];
  } else {
    return;
  }
  p->batch[0] = 1;
  p->a_bs[0] = p->b_bs[0] = p->out_bs[0] = 0;
}

/* Batch dims of `t` (its dims before the last `matrix_dims`) right-aligned to the output's
 * `count` batch dims (count <= 2, placed at levels 2 - count ..); broadcast dims stride 0. */
static void batch_strides(const recap_tensor *t, int matrix_dims, const int64_t *out_batch,
                          int count, int64_t bs[2]) {
  bs[0] = bs[1] = 0;
  const int tb = t->ndim - matrix_dims;
  for (int d = 0; d < count; ++d) {
    const int td = d - (count - tb);
    const int level = 2 - count + d;
    bs[level] = (td >= 0 && t->shape[td] == out_batch[d]) ? t->strides[td] : 0;
  }
}

/* Whether a linear's residual (contiguous, out's shape) and its output share any byte: every
 * path but cuBLASLt's writes out before the epilogue reads the residual, so gemm.h forbids it
 * and this turns a violation into an error instead of a wrong result. */
static bool residual_overlaps_out(const recap_tensor *r, const recap_tensor *o) {
  const size_t bytes = (size_t)recap__tensor_numel(o) * recap_dtype_size(o->dtype);
  const uintptr_t r0 = (uintptr_t)r->data, o0 = (uintptr_t)o->data;
  return bytes > 0 && r0 < o0 + bytes && o0 < r0 + bytes;
}

recap_status recap__gemm_plan_make(const recap_op_call *call, recap__gemm_plan *out) {
  RECAP_CHECK_ARG(call && call->def && out);
  const recap_tensor *o = &call->outputs[0];
  recap__gemm_plan p = {.dtype = call->inputs[0].dtype, .batch = {1, 1}, .out = o->data};
  if (call->def == &recap__op_matmul) {
    const recap_tensor *a = &call->inputs[0], *b = &call->inputs[1];
    const int64_t as0 = a->strides[a->ndim - 2], as1 = a->strides[a->ndim - 1];
    const int64_t bs0 = b->strides[b->ndim - 2], bs1 = b->strides[b->ndim - 1];
    p.m = o->shape[o->ndim - 2];
    p.n = o->shape[o->ndim - 1];
    p.k = call->attrs.trans_a ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
    p.a_rs = call->attrs.trans_a ? as1 : as0;
    p.a_cs = call->attrs.trans_a ? as0 : as1;
    p.b_rs = call->attrs.trans_b ? bs1 : bs0;
    p.b_cs = call->attrs.trans_b ? bs0 : bs1;
    const int nb = o->ndim - 2;
    if (nb > 2) return RECAP_OP_FAIL(call, "at most 2 batch dims (output %s)",
                                     recap__shape_label(o).s);
    for (int d = 0; d < nb; ++d) p.batch[2 - nb + d] = o->shape[d];
    batch_strides(a, 2, o->shape, nb, p.a_bs);
    batch_strides(b, 2, o->shape, nb, p.b_bs);
    batch_strides(o, 2, o->shape, nb, p.out_bs);
    p.a = a->data;
    p.b = b->data;
    p.c = call->num_inputs > 2 ? call->inputs[2].data : NULL;
    p.alpha = (float)call->attrs.alpha;
    p.beta = (float)call->attrs.beta;
    p.act = RECAP_ACT_NONE;
  } else if (call->def == &recap__op_linear) {
    const recap_tensor *x = &call->inputs[0], *w = &call->inputs[1];
    p.n = w->shape[0];
    p.k = w->shape[1];
    p.b_rs = w->strides[1]; /* B = weight^T */
    p.b_cs = w->strides[0];
    p.a_cs = x->strides[x->ndim - 1];
    p.a = x->data;
    p.b = w->data;
    p.bias = call->num_inputs > 2 ? call->inputs[2].data : NULL;
    p.residual = call->num_inputs > 3 ? call->inputs[3].data : NULL;
    if (p.residual && residual_overlaps_out(&call->inputs[3], o))
      return RECAP_OP_FAIL(call, "input 'residual' shares memory with the output (only the "
                                 "cuBLASLt path could read it before writing: give another "
                                 "buffer)");
    p.alpha = 1.0f;
    p.act = call->attrs.act;
    /* The leading dims of x become rows when one stride steps through all of them (always
     * for a contiguous x), else the last is the rows and the others are batch levels. */
    const int lead = x->ndim - 1;
    int64_t rows = 1, row_stride = p.k;
    bool collapse = true;
    for (int d = lead - 1; d >= 0; --d) {
      if (x->shape[d] == 1) continue;
      if (rows == 1) row_stride = x->strides[d];
      else if (x->strides[d] != row_stride * rows) collapse = false;
      rows *= x->shape[d];
    }
    if (collapse || lead < 2) {
      p.m = rows;
      p.a_rs = row_stride;
    } else {
      p.m = x->shape[lead - 1];
      p.a_rs = x->strides[lead - 1];
      const int nb = lead - 1;
      for (int d = 0; d < nb; ++d) p.batch[2 - nb + d] = x->shape[d];
      batch_strides(x, 2, x->shape, nb, p.a_bs);
      batch_strides(o, 2, o->shape, nb, p.out_bs);
    }
  } else {
    return RECAP_OP_FAIL(call, "is not a GEMM op");
  }
  bool row_major;
  int64_t ld;
  if (!recap__gemm_operand_layout(p.m, p.k, p.a_rs, p.a_cs, &row_major, &ld) ||
      !recap__gemm_operand_layout(p.k, p.n, p.b_rs, p.b_cs, &row_major, &ld))
    return RECAP_OP_FAIL(call, "an operand's rows overlap or have no unit stride (copy it "
                         "first)");
  merge_batch_levels(&p);
  *out = p;
  return RECAP_OK;
}

/* ---- prepare ----------------------------------------------------------------------------- */

recap_status recap__gemm_prepare(const recap_op_call *call, recap_stream *stream) {
  RECAP_CHECK_ARG(call && call->def && stream && stream->backend);
  if (stream->backend->kind == RECAP_BACKEND_HOST) return RECAP_OK;
#if RECAP_WITH_CUDA
  return recap__cuda_gemm_prepare(call, recap_stream_native(stream));
#else
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "gemm: this build has no CUDA backend");
#endif
}

/* ---- the defs ---------------------------------------------------------------------------- */

const recap_op_def recap__op_matmul = {
    .name = "matmul",
    .summary = "alpha * op(a) op(b) + beta * c, batched with broadcast batch dims",
    .input_names = matmul_inputs,
    .min_inputs = 2,
    .max_inputs = 3,
    .num_outputs = 1,
    .attrs = matmul_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = 2,
    .infer = matmul_infer,
    .run_host = recap__gemm_run_host,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_gemm),
};

const recap_op_def recap__op_linear = {
    .name = "linear",
    .summary = "act(x weight^T + bias) + residual: weight [N, K], bias [N], residual as out",
    .input_names = linear_inputs,
    .min_inputs = 2,
    .max_inputs = 4,
    .num_outputs = 1,
    .attrs = linear_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = -1,
    .infer = linear_infer,
    .run_host = recap__gemm_run_host,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_gemm),
};
