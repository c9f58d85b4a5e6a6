/*
 * paged.h: what the paged serving ops' definitions (paged.c) and their CUDA launchers
 * (paged.cu) share (internal to kernels/; defined in paged_plan.c): how paged_attention's
 * CUDA grid is cut, which fixes the workspace it needs.
 *
 * The grid depends on shapes only (never on the metadata, which the kernels read when they
 * run), so a graph captured once serves every step. One CTA serves `heads_per_cta` query heads
 * of one KV head for one token and one split of its keys; a token's keys are split `splits`
 * ways when the (token, KV head) pairs alone would leave the GPU idle (decode), and each split
 * then leaves its partial softmax state in the workspace and counts itself in; the last split
 * of a (token, KV head, chunk) to arrive merges them all and resets the count:
 *
 *   recap__paged_attention_grid g = recap__paged_attention_plan(call);
 *   grid = (T * g.head_chunks, Hkv, g.splits or fewer: launch_attention in paged.cu);
 *   workspace = recap__paged_attention_workspace(call)
 *   call state (the arrival counts) = recap__paged_attention_arrivals(call)
 */
#ifndef RECAP_KERNELS_PAGED_H
#define RECAP_KERNELS_PAGED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/op.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  /* The most splits of one token's keys, and so of partial states its merge reads. */
  RECAP__PAGED_MAX_SPLITS = 64,
  /* A split spans at least this many keys: shorter ones spend more on their start and on the
   * merge than they save. */
  RECAP__PAGED_MIN_KEYS_PER_SPLIT = 128,
  /* ... except in a grid of at most FEW_GROUPS (token, KV head, chunk) groups (decode at
   * batch 1 or 2), where the GPU is emptier: there a split spans at least MIN_KEYS_FEW_GROUPS.
   * Measured on an H100 (Llama 3.2 1B shape, 8 KV heads): batch 1 1.6% faster at 128 keys of
   * context and 0.3% at 512 with 64 keys than with 128; batch 8 4.4% slower at 512 with 64. */
  RECAP__PAGED_FEW_GROUPS = 16,
  RECAP__PAGED_MIN_KEYS_FEW_GROUPS = 64,
  /* Splitting stops once the grid has this many CTAs: several waves of 4-warp CTAs on an
   * H100's 132 SMs, which hides the last wave's tail. The workspace is sized for this count. */
  RECAP__PAGED_TARGET_CTAS = 1024,
  /* ... but at decode (at most one token per sequence row) in a grid of more than FEW_GROUPS
   * groups, the launcher splits only up to this many CTAs where the grid then fits in one wave
   * of the kernel that runs (about one wave of the fused paged_rope_attention kernel, 4 CTAs
   * per SM, on an H100's or H200's 132 SMs): the splits' merges cost more than a second,
   * partly empty wave saves, and the fused kernel keeps its one launch a layer (it declines
   * grids of more than one wave). One H200, batches 8-64, 512 and 1900 keys: 1-9% faster steps
   * for Llama 3.2 1B, Llama 3 8B and a Qwen2.5 1.5B shape (docs/SERVING.md); where the fewer
   * splits overflow a wave (that Qwen2.5 shape at batch 64: 768 CTAs) the plan's count stays,
   * 3% faster there. */
  RECAP__PAGED_ONE_WAVE_CTAS = 512,
};

typedef struct {
  int64_t heads_per_cta; /* 1, 2, 4 or 8: query heads of one KV head a CTA serves */
  int64_t head_chunks;   /* CTAs per (token, KV head, split): ceil(group / heads_per_cta) */
  int64_t splits;        /* 1: no split, no workspace, no merge */
  /* Keys a split spans at least (MIN_KEYS_PER_SPLIT, or MIN_KEYS_FEW_GROUPS in a grid of few
   * groups): the kernel cuts each token's real key count by it. */
  int64_t min_keys_per_split;
} recap__paged_attention_grid;

/* The CUDA grid of a paged_attention call that passed infer (shapes only). */
recap__paged_attention_grid recap__paged_attention_plan(const recap__op_call *call);

/* Bytes of f32 partial state a split call needs (0 without splits): for every (token, head,
 * split) its running max and sum, then its unnormalized output row of Dh. */
size_t recap__paged_attention_workspace(const recap__op_call *call);

/* Bytes of the split calls' arrival counts (0 without splits): a u32 per (token, KV head,
 * chunk), the call's own memory, zero between launches. */
size_t recap__paged_attention_arrivals(const recap__op_call *call);

/* paged_rope_attention is paged_rope_kv_write then paged_attention over the same tensors, the
 * rotated q never leaving the kernel where CUDA runs it as one (a step of at most one token per
 * sequence row: recap__paged_rope_attention_one_kernel). Its two parts as calls of those ops,
 * with the rotated q at the start of the call's workspace (contiguous [T, H, Dh] of q's dtype,
 * q_rot_bytes): what the host reference runs, and CUDA's prefill steps. The attention part's
 * workspace is the fused call's past the rotated q, its call state the fused call's. */
size_t recap__paged_rope_attention_q_rot_bytes(const recap__op_call *call);
void recap__paged_rope_attention_parts(const recap__op_call *call, recap__op_call *rope,
                                       recap__op_call *attention);
/* Whether a shape-checked paged_rope_attention call's step is decode-shaped (at most as many
 * tokens as sequence rows), where the CUDA launcher runs one kernel. Shapes only, so every
 * launch of a captured graph takes the same path. */
bool recap__paged_rope_attention_one_kernel(const recap__op_call *call);

#ifdef __cplusplus
}
#endif

#endif
