/*
 * paged_plan.c: how paged_attention's CUDA grid is cut, and the workspace that fixes (see
 * paged.h). Plain C in every build: the op definition (paged.c) answers workspace_bytes from
 * it and the CUDA launcher (paged.cu) launches by it, so the two always agree.
 */
#include "kernels/paged.h"

recap__paged_attention_grid recap__paged_attention_plan(const recap__op_call *call) {
  const recap_tensor *q = &call->inputs[0], *k = &call->inputs[1], *seqs = &call->inputs[3];
  const int64_t tokens = q->shape[0], kv_heads = k->shape[2], group = q->shape[1] / kv_heads;
  recap__paged_attention_grid g;
  /* A CTA loads each key and value once for all the query heads it serves: the whole group
   * (rounded up to a power of two, the kernel's sizes) while it fits the registers, else
   * chunks of 8. */
  g.heads_per_cta = 1;
  while (g.heads_per_cta < group && g.heads_per_cta < 8) g.heads_per_cta *= 2;
  g.head_chunks = (group + g.heads_per_cta - 1) / g.heads_per_cta;
  const int64_t ctas = tokens * kv_heads * g.head_chunks;
  const int64_t keys = (seqs->shape[1] - RECAP_SEQ_BLOCKS) * k->shape[1];
  int64_t splits = (RECAP__PAGED_TARGET_CTAS + ctas - 1) / ctas;
  const int64_t by_keys =
      (keys + RECAP__PAGED_MIN_KEYS_PER_SPLIT - 1) / RECAP__PAGED_MIN_KEYS_PER_SPLIT;
  if (splits > by_keys) splits = by_keys;
  if (splits > RECAP__PAGED_MAX_SPLITS) splits = RECAP__PAGED_MAX_SPLITS;
  g.splits = splits < 1 ? 1 : splits;
  return g;
}

size_t recap__paged_attention_workspace(const recap__op_call *call) {
  const recap__paged_attention_grid g = recap__paged_attention_plan(call);
  if (g.splits == 1) return 0;
  const recap_tensor *q = &call->inputs[0];
  const size_t states = (size_t)q->shape[0] * (size_t)q->shape[1] * (size_t)g.splits;
  return states * (2 + (size_t)q->shape[2]) * sizeof(float);
}

size_t recap__paged_attention_arrivals(const recap__op_call *call) {
  const recap__paged_attention_grid g = recap__paged_attention_plan(call);
  if (g.splits == 1) return 0;
  const recap_tensor *q = &call->inputs[0], *k = &call->inputs[1];
  return (size_t)q->shape[0] * (size_t)k->shape[2] * (size_t)g.head_chunks * sizeof(uint32_t);
}
