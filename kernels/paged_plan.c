/*
 * paged_plan.c: how paged_attention's CUDA grid is cut, and the workspace that fixes (see
 * paged.h). Plain C in every build: the op definition (paged.c) answers workspace_bytes from
 * it and the CUDA launcher (paged.cu) launches by it, so the two always agree. Also
 * paged_rope_attention's parts (its def's `parts`), which its host reference and its CUDA
 * launcher both run.
 */
#include "kernels/paged.h"

recap__paged_attention_grid recap__paged_attention_plan(const recap__op_call *call) {
  const recap_tensor *q = &call->inputs[0], *k = &call->inputs[1], *seqs = &call->inputs[3];
  const int64_t tokens = q->shape[0], kv_heads = k->shape[2], group = q->shape[1] / kv_heads;
  const int64_t head_dim = q->shape[2];
  recap__paged_attention_grid g;
  /* A CTA loads each key and value once for all the query heads it serves: the whole group
   * (rounded up to a power of two, the kernel's sizes) while it fits the registers, else
   * chunks of 8. */
  g.heads_per_cta = 1;
  while (g.heads_per_cta < group && g.heads_per_cta < 8) g.heads_per_cta *= 2;
  /* Decode (a step of at most as many tokens as sequence rows; only speed depends on it): a
   * CTA's time is a chain of latencies, and each query head it serves lengthens the arithmetic
   * between its loads and its merge, while the keys it shares are few; so at most 2 heads per
   * CTA, the rest of the group in more CTAs reading the same keys. Only a grid of at most 8 (token,
   * KV head) pairs whose whole group is a power of two of at most 256 head elements keeps it
   * (Llama 3.2 1B at batch 1: 4 heads of 64). On an H200 against the whole group per CTA (decode
   * step, 512 keys of context): Qwen2 0.5B (7 heads of 64 per KV head) -9.1% at batch 1 and -15% at
   * batch 8, a Qwen2.5 1.5B shape (6 of 128) -10.5% / -11.8%, Llama 3.2 3B (3 of 128) -1.9% /
   * -3.1%, Llama 3 8B (4 of 128) -0.9% / -2.0%, the 1B -0.5% at batch 8 but +0.6% at batch 1
   * (docs/SERVING.md, "Attention over the paged pool"). Prefill chunks keep the whole group: each
   * key is read once per query token there, and more CTAs would read it more often. Large decode
   * grids cut too, though a grid of 1024 CTAs then gets no key splits: at batch 16-64 (512 keys)
   * the cut was 0-17% faster than the whole group on four shapes, never slower (docs/SERVING.md).
   */
  const bool decode = tokens <= seqs->shape[0];
  const bool keeps_group =
      tokens * kv_heads <= 8 && g.heads_per_cta == group && group * head_dim <= 256;
  if (decode && !keeps_group && g.heads_per_cta > 2) g.heads_per_cta = 2;
  g.head_chunks = (group + g.heads_per_cta - 1) / g.heads_per_cta;
  const int64_t ctas = tokens * kv_heads * g.head_chunks;
  const int64_t keys = (seqs->shape[1] - RECAP_SEQ_BLOCKS) * k->shape[1];
  int64_t splits = (RECAP__PAGED_TARGET_CTAS + ctas - 1) / ctas;
  const int64_t by_keys =
      (keys + RECAP__PAGED_MIN_KEYS_PER_SPLIT - 1) / RECAP__PAGED_MIN_KEYS_PER_SPLIT;
  if (splits > by_keys) splits = by_keys;
  if (splits > RECAP__PAGED_MAX_SPLITS) splits = RECAP__PAGED_MAX_SPLITS;
  g.splits = splits < 1 ? 1 : splits;
  g.min_keys_per_split = ctas <= RECAP__PAGED_FEW_GROUPS ? RECAP__PAGED_MIN_KEYS_FEW_GROUPS
                                                         : RECAP__PAGED_MIN_KEYS_PER_SPLIT;
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

/* ---- paged_rope_attention ---- */

/* The rotated q's bytes, rounded up so that what follows it in the workspace (attention's
 * split partials) stays 256-byte aligned. */
size_t recap__paged_rope_attention_q_rot_bytes(const recap__op_call *call) {
  const recap_tensor *q = &call->inputs[0];
  const size_t bytes = (size_t)recap__tensor_numel(q) * (size_t)recap_dtype_size(q->dtype);
  return (bytes + 255) / 256 * 256;
}

void recap__paged_rope_attention_parts(const recap__op_call *call, recap__op_call *rope,
                                       recap__op_call *attention) {
  recap_tensor rotated = call->inputs[0];
  rotated.data = call->workspace;
  recap__tensor_set_contiguous(&rotated);
  *rope = *call;
  rope->def = call->def->parts[0];
  rope->outputs[0] = rotated;
  rope->workspace = NULL;
  rope->workspace_bytes = 0;
  rope->call_state = NULL;
  rope->call_state_bytes = 0;
  *attention = *call;
  attention->def = call->def->parts[1];
  attention->num_inputs = 4;
  attention->num_outputs = 1;
  attention->inputs[0] = rotated;
  for (int i = 1; i < 4; ++i) attention->inputs[i] = call->inputs[i + 2];
  const size_t q_rot = recap__paged_rope_attention_q_rot_bytes(call);
  const bool room = call->workspace && call->workspace_bytes > q_rot;
  attention->workspace = room ? (char *)call->workspace + q_rot : NULL;
  attention->workspace_bytes = room ? call->workspace_bytes - q_rot : 0;
}

bool recap__paged_rope_attention_one_kernel(const recap__op_call *call) {
  return call->inputs[0].shape[0] <= call->inputs[5].shape[0];
}
