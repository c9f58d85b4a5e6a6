/*
 * plan.c: the plan of a matmul or linear call (recap__gemm_plan, gemm.h): the product in
 * row-major terms with element strides and at most two batch levels, and how an operand looks
 * to a column-major BLAS.
 *
 * Host-only C, below everything else of the GEMM module: the op definitions (ops.c) check
 * operand layouts here, and the host loop (host.c) and the CUDA path (cublaslt.c, choose.c)
 * run plans. It reads the call's def only through its `code`, never naming a def.
 */
#include <stddef.h>

#include "kernels/gemm/gemm.h"
#include "kernels/infer.h"

/* ---- matrix layouts -------------------------------------------------------------------- */

bool recap__gemm_operand_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, bool *row_major,
                                int64_t *ld) {
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

void recap__gemm_linear_inputs(const recap__op_call *call, int *bias, int *residual) {
  /* rms_norm's weight comes last, after the residual. */
  const int n = call->num_inputs - (call->attrs.rms_norm && call->num_inputs >= 3);
  *residual = n >= 3 && (n >= 4 || call->attrs.residual) ? n - 1 : -1;
  *bias = n - (*residual >= 0) >= 3 ? 2 : -1;
}

void recap__gemm_workspace_layout(bool rms_norm, bool gated, int64_t rows, int64_t k, int64_t n,
                                  size_t dtype_size, size_t *prologue, size_t *product) {
  *prologue = rms_norm ? recap__gemm_round_256((size_t)(rows * k) * dtype_size) : 0;
  *product = gated ? recap__gemm_round_256((size_t)(rows * n) * dtype_size) : 0;
}

recap_status recap__gemm_plan_make(const recap__op_call *call, recap__gemm_plan *out) {
  RECAP_CHECK_ARG(call && call->def && out);
  const recap_tensor *o = &call->outputs[0];
  /* The def's code says which op it is, so the plan needs no op definition (ops.c, above). */
  const recap__gemm_op op = (recap__gemm_op)call->def->code;
  recap__gemm_plan p = {.dtype = call->inputs[0].dtype, .batch = {1, 1}, .out = o->data, .op = op};
  if (op == RECAP__GEMM_MATMUL) {
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
    if (nb > 2)
      return RECAP_OP_FAIL(call, "at most 2 batch dims (output %s)", recap__shape_label(o).s);
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
  } else if (op == RECAP__GEMM_LINEAR) {
    const recap_tensor *x = &call->inputs[0], *w = &call->inputs[1];
    p.n = w->shape[0];
    p.k = w->shape[1];
    p.b_rs = w->strides[1]; /* B = weight^T */
    p.b_cs = w->strides[0];
    p.a_cs = x->strides[x->ndim - 1];
    p.a = x->data;
    p.b = w->data;
    int bias, residual;
    recap__gemm_linear_inputs(call, &bias, &residual);
    p.bias = bias >= 0 ? call->inputs[bias].data : NULL;
    p.residual = residual >= 0 ? call->inputs[residual].data : NULL;
    if (p.residual && residual_overlaps_out(&call->inputs[residual], o))
      return RECAP_OP_FAIL(call,
                           "input 'residual' shares memory with the output (only the "
                           "cuBLASLt path could read it before writing: give another "
                           "buffer)");
    p.alpha = 1.0f;
    p.act = call->attrs.act;
    if (call->attrs.rms_norm) {
      p.prologue = RECAP__GEMM_PROLOGUE_RMS_NORM;
      p.norm_weight = call->inputs[call->num_inputs - 1].data;
      p.eps = call->attrs.eps;
    } else if (call->attrs.glu != RECAP_ACT_NONE) {
      p.prologue = RECAP__GEMM_PROLOGUE_GLU;
      p.glu = call->attrs.glu;
      p.up_offset = p.k; /* up follows gate in each row of x */
    }
    p.gated = call->attrs.gated;
    /* The leading dims of x become rows when one stride steps through all of them (always
     * for a contiguous x), else the last is the rows and the others are batch levels. */
    const int lead = x->ndim - 1;
    int64_t rows = 1, row_stride = p.k;
    bool collapse = true;
    for (int d = lead - 1; d >= 0; --d) {
      if (x->shape[d] == 1) continue;
      if (rows == 1)
        row_stride = x->strides[d];
      else if (x->strides[d] != row_stride * rows)
        collapse = false;
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
    return RECAP_OP_FAIL(call,
                         "an operand's rows overlap or have no unit stride (copy it "
                         "first)");
  merge_batch_levels(&p);
  /* A prologue reads x by whole rows of one stride (as every x a pass builds is). */
  if (p.prologue != RECAP__GEMM_PROLOGUE_NONE &&
      (p.batch[0] != 1 || p.batch[1] != 1 || p.a_cs != 1))
    return RECAP_OP_FAIL(call,
                         "a prologue (rms_norm, glu) needs x's rows at one stride with unit "
                         "stride along K (copy it first)");
  /* A gated output pairs columns of whole rows of the product. */
  if (p.gated != RECAP_ACT_NONE && (p.batch[0] != 1 || p.batch[1] != 1))
    return RECAP_OP_FAIL(call,
                         "a gated output needs x's rows at one stride (no batch levels; copy "
                         "it first)");
  *out = p;
  return RECAP_OK;
}
