/*
 * paged.c: definitions and shape inference of the paged serving ops, which run one step of a
 * batch of sequences at different positions over a KV cache kept as a pool of blocks:
 *
 *   seq_positions    each packed token's position in its sequence (for rope)
 *   seq_last_tokens  each sequence's last token of the step (to gather the rows for logits)
 *   paged_kv_write   the step's new K or V rows into the pool, through each block table
 *   paged_rope_kv_write  RoPE of q and k at each token's position, and the rotated K and the V
 *                    rows into their pools: rope, rope and paged_kv_write twice in one launch
 *   paged_attention  causal attention of the step's tokens over their sequences' pooled keys
 *   paged_rope_attention  paged_rope_kv_write then paged_attention, its rotated q kept inside
 *                    the op (one launch for a decode step on CUDA: what an imported layer runs)
 *
 * What each sequence does in the step is one row of the i32 metadata `seqs` (include/recap.h,
 * RECAP_SEQ_*), read by the kernels when they run and never at launch, so a graph captured
 * once serves any mix of sequences, lengths and block tables. Tokens that no row owns (a
 * bucket's padding) write nothing, and their outputs are 0. The host references check every
 * rule of the layout and fail naming the row (kernels/host/seq_meta.h); the CUDA kernels never
 * read or write out of bounds: they trap on a row that breaks the per-row rules or on a block id
 * outside the pool (kernels/cuda_ops.h says which).
 */
#include "kernels/paged.h"

#include <math.h>
#include <stddef.h>

#include "kernels/cuda_ops.h"
#include "kernels/host/host_ops.h"
#include "kernels/host/seq_meta.h"
#include "kernels/infer.h"
#include "kernels/rope.h"

static const char *const seq_inputs[] = {"seqs", NULL};
static const char *const paged_kv_write_inputs[] = {"cache", "new", "seqs", NULL};
static const char *const paged_attention_inputs[] = {"q", "k_cache", "v_cache", "seqs", NULL};
static const char *const paged_rope_kv_write_inputs[] = {"q",       "k",    "v", "k_cache",
                                                         "v_cache", "seqs", NULL};
/* paged_kv_write returns its cache (input 0); paged_rope_kv_write its rotated q, then its two
 * pools (inputs 3 and 4). */
static const int output_is_input0[] = {0};
static const int rope_kv_outputs[] = {-1, 3, 4};

/* The token count is an integer attribute because no input carries it; the slot is attrs.dim,
 * as the collectives reuse the integer slots rather than grow recap__op_attrs. */
static const recap__attr_def seq_positions_attrs[] = {
    {"tokens", RECAP_ATTR_INT, offsetof(recap__op_attrs, dim), true, 0,
     "T, the step's packed token count and the output's length (a spec dim, e.g. `tokens: T`)"},
    {.name = NULL},
};
static const recap__attr_def no_attrs[] = {{.name = NULL}};
#define SCALE_ATTR_DEF                                                     \
  {                                                                        \
    "scale", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, scale), false, 0, \
        "multiplies q . k (0: 1 / sqrt(head_dim))"                         \
  }
static const recap__attr_def paged_attention_attrs[] = {
    SCALE_ATTR_DEF,
    {.name = NULL},
};
static const recap__attr_def paged_rope_attention_attrs[] = {
    RECAP__ROPE_ATTR_DEFS,
    SCALE_ATTR_DEF,
    {.name = NULL},
};

static const unsigned i32_only = 1u << RECAP_DTYPE_I32;

/* Token indices and positions are i32 in the metadata and in seq_positions' output. */
enum { MAX_TOKENS = INT32_MAX };

static recap_status seq_positions_infer(recap__op_call *call) {
  RECAP_TRY(recap__seqs_infer(call, 0));
  const int64_t tokens = call->attrs.dim;
  if (tokens < 1 || tokens > MAX_TOKENS)
    return RECAP_OP_FAIL(call, "attribute 'tokens' is %lld, expected 1 to %d", (long long)tokens,
                         MAX_TOKENS);
  recap__infer_output(call, 0, RECAP_DTYPE_I32, 1, &tokens);
  return RECAP_OK;
}

const recap__op_def recap__op_seq_positions = {
    .name = "seq_positions",
    .summary =
        "i32 [T]: the position of each of the step's packed tokens in its sequence, from seqs "
        "[Bs, W] read when the op runs (a row's tokens Q_START.. sit at LEN - Q_LEN..); tokens "
        "no row owns (padding) get 0",
    .input_names = seq_inputs,
    .min_inputs = 1,
    .max_inputs = 1,
    .num_outputs = 1,
    .attrs = seq_positions_attrs,
    .dtype_mask = i32_only,
    .in_place_input = -1,
    .infer = seq_positions_infer,
    .run_host = recap__host_seq_positions,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_seq_positions),
};

static recap_status seq_last_tokens_infer(recap__op_call *call) {
  RECAP_TRY(recap__seqs_infer(call, 0));
  recap__infer_output(call, 0, RECAP_DTYPE_I32, 1, call->inputs[0].shape);
  return RECAP_OK;
}

const recap__op_def recap__op_seq_last_tokens = {
    .name = "seq_last_tokens",
    .summary =
        "i32 [Bs]: each sequence's last token in the step's packed tokens (Q_START + Q_LEN - "
        "1; 0 for a row without tokens), from seqs read when the op runs: the ids an "
        "`embedding` gathers the rows for the logits with",
    .input_names = seq_inputs,
    .min_inputs = 1,
    .max_inputs = 1,
    .num_outputs = 1,
    .attrs = no_attrs,
    .dtype_mask = i32_only,
    .in_place_input = -1,
    .infer = seq_last_tokens_infer,
    .run_host = recap__host_seq_last_tokens,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_seq_last_tokens),
};

/* A KV pool [NB, BS, Hkv, Dh] with a unit-stride last dim. */
static recap_status check_pool(recap__op_call *call, int index) {
  RECAP_TRY(recap__infer_ndim(call, index, 4, 4));
  RECAP_TRY(recap__infer_same_dtype(call, index));
  return recap__infer_last_dim_contiguous(call, index);
}

static recap_status paged_kv_write_infer(recap__op_call *call) {
  const recap_tensor *cache = &call->inputs[0], *rows = &call->inputs[1];
  RECAP_TRY(check_pool(call, 0));
  RECAP_TRY(recap__infer_ndim(call, 1, 3, 3));
  RECAP_TRY(recap__infer_same_dtype(call, 1));
  RECAP_TRY(recap__infer_last_dim_contiguous(call, 1));
  if (rows->shape[1] != cache->shape[2] || rows->shape[2] != cache->shape[3])
    return RECAP_OP_FAIL(call,
                         "input 'new' %s does not match input 'cache' %s in heads or head_dim "
                         "(new is [T, Hkv, Dh], cache [NB, BS, Hkv, Dh])",
                         recap__shape_label(rows).s, recap__shape_label(cache).s);
  if (rows->shape[0] > MAX_TOKENS)
    return RECAP_OP_FAIL(call, "input 'new' has %lld tokens, more than %d",
                         (long long)rows->shape[0], MAX_TOKENS);
  RECAP_TRY(recap__seqs_infer(call, 2));
  /* The output is the pool itself, strides and memory included. */
  call->outputs[0] = *cache;
  return RECAP_OK;
}

const recap__op_def recap__op_paged_kv_write = {
    .name = "paged_kv_write",
    .summary =
        "writes the step's new [T, Hkv, Dh] into the block pool cache [NB, BS, Hkv, Dh]: token "
        "Q_START + t of a seqs row goes to position p = LEN - Q_LEN + t, i.e. row p % BS of "
        "block seqs[row][RECAP_SEQ_BLOCKS + p / BS], all read when the op runs; tokens no row "
        "owns write nothing; the output is the cache",
    .input_names = paged_kv_write_inputs,
    .min_inputs = 3,
    .max_inputs = 3,
    .num_outputs = 1,
    .attrs = no_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = 0,
    .output_is_input = output_is_input0,
    .zero_meta_writes_nothing = true,
    .infer = paged_kv_write_infer,
    .run_host = recap__host_paged_kv_write,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_paged_kv_write),
};

/* q [T, H, Dh], k and v [T, Hkv, Dh] (views of one projection are fine: unit-stride last dims
 * only), pools [NB, BS, Hkv, Dh] of one shape, one float dtype, Dh even. */
static recap_status paged_rope_kv_write_infer(recap__op_call *call) {
  const recap_tensor *q = &call->inputs[0], *k = &call->inputs[1], *v = &call->inputs[2];
  const recap_tensor *kc = &call->inputs[3], *vc = &call->inputs[4];
  for (int i = 0; i < 3; ++i) {
    RECAP_TRY(recap__infer_ndim(call, i, 3, 3));
    RECAP_TRY(recap__infer_same_dtype(call, i));
    RECAP_TRY(recap__infer_last_dim_contiguous(call, i));
  }
  RECAP_TRY(check_pool(call, 3));
  RECAP_TRY(check_pool(call, 4));
  for (int d = 0; d < 4; ++d)
    if (kc->shape[d] != vc->shape[d])
      return RECAP_OP_FAIL(call,
                           "inputs 'k_cache' %s and 'v_cache' %s must have one shape "
                           "[NB, BS, Hkv, Dh]",
                           recap__shape_label(kc).s, recap__shape_label(vc).s);
  for (int i = 1; i < 3; ++i) {
    const recap_tensor *rows = &call->inputs[i];
    if (rows->shape[1] != kc->shape[2] || rows->shape[2] != kc->shape[3])
      return RECAP_OP_FAIL(call,
                           "input '%s' %s does not match input 'k_cache' %s in heads or head_dim "
                           "(%s is [T, Hkv, Dh], the caches [NB, BS, Hkv, Dh])",
                           recap__input_label(call->def, i).s, recap__shape_label(rows).s,
                           recap__shape_label(kc).s, recap__input_label(call->def, i).s);
  }
  if (k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0] || q->shape[2] != kc->shape[3])
    return RECAP_OP_FAIL(call,
                         "inputs 'q' %s, 'k' %s and 'v' %s must be [T, H, Dh], [T, Hkv, Dh] "
                         "and [T, Hkv, Dh] with one T and the caches' Dh %lld",
                         recap__shape_label(q).s, recap__shape_label(k).s, recap__shape_label(v).s,
                         (long long)kc->shape[3]);
  if (q->shape[2] % 2 != 0)
    return RECAP_OP_FAIL(call, "input 'q' %s has an odd head dimension (rotate-half needs it even)",
                         recap__shape_label(q).s);
  if (q->shape[0] > MAX_TOKENS)
    return RECAP_OP_FAIL(call, "input 'q' has %lld tokens, more than %d", (long long)q->shape[0],
                         MAX_TOKENS);
  RECAP_TRY(recap__seqs_infer(call, 5));
  RECAP_TRY(recap__rope_check_attrs(call));
  recap__infer_output(call, 0, q->dtype, 3, q->shape);
  /* The other two are the pools themselves, strides and memory included. */
  call->outputs[1] = *kc;
  call->outputs[2] = *vc;
  return RECAP_OK;
}

const recap__op_def recap__op_paged_rope_kv_write = {
    .name = "paged_rope_kv_write",
    .summary =
        "one launch for a layer's rope(q), rope(k), paged_kv_write(k) and paged_kv_write(v): "
        "q [T, H, Dh] rotated (rope's rotate-half, angles and attributes) at each token's "
        "position p = LEN - Q_LEN + t of its seqs row into output 0 (padding tokens at position "
        "0, i.e. copied); k [T, Hkv, Dh] rotated and v [T, Hkv, Dh] as it is written to row "
        "p % BS of block seqs[row][RECAP_SEQ_BLOCKS + p / BS] of k_cache and v_cache "
        "[NB, BS, Hkv, Dh], all read when the op runs; tokens no row owns write nothing; "
        "outputs 1 and 2 are the caches",
    .input_names = paged_rope_kv_write_inputs,
    .min_inputs = 6,
    .max_inputs = 6,
    .num_outputs = 3,
    .attrs = recap__rope_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = -1,
    .output_is_input = rope_kv_outputs,
    .zero_meta_writes_nothing = true,
    .infer = paged_rope_kv_write_infer,
    .run_host = recap__host_paged_rope_kv_write,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_paged_rope_kv_write),
};

/* What attention adds to its q and pools' checks: whole groups of query heads per KV head, a
 * finite score scale. */
static recap_status check_heads_and_scale(recap__op_call *call, const recap_tensor *q,
                                          const recap_tensor *k_cache) {
  if (q->shape[1] % k_cache->shape[2] != 0)
    return RECAP_OP_FAIL(call,
                         "input 'q' has %lld heads, not a multiple of the %lld heads of the "
                         "caches",
                         (long long)q->shape[1], (long long)k_cache->shape[2]);
  if (!isfinite(call->attrs.scale))
    return RECAP_OP_FAIL(call, "attribute 'scale' must be finite, got %g", call->attrs.scale);
  return RECAP_OK;
}

static recap_status paged_attention_infer(recap__op_call *call) {
  const recap_tensor *q = &call->inputs[0], *k = &call->inputs[1], *v = &call->inputs[2];
  RECAP_TRY(recap__infer_ndim(call, 0, 3, 3));
  RECAP_TRY(recap__infer_last_dim_contiguous(call, 0));
  RECAP_TRY(check_pool(call, 1));
  RECAP_TRY(check_pool(call, 2));
  for (int d = 0; d < 4; ++d)
    if (k->shape[d] != v->shape[d])
      return RECAP_OP_FAIL(call,
                           "inputs 'k_cache' %s and 'v_cache' %s must have one shape "
                           "[NB, BS, Hkv, Dh]",
                           recap__shape_label(k).s, recap__shape_label(v).s);
  if (q->shape[2] != k->shape[3])
    return RECAP_OP_FAIL(call,
                         "input 'q' %s and input 'k_cache' %s differ in head_dim (q is "
                         "[T, H, Dh], the caches [NB, BS, Hkv, Dh])",
                         recap__shape_label(q).s, recap__shape_label(k).s);
  if (q->shape[0] > MAX_TOKENS)
    return RECAP_OP_FAIL(call, "input 'q' has %lld tokens, more than %d", (long long)q->shape[0],
                         MAX_TOKENS);
  RECAP_TRY(recap__seqs_infer(call, 3));
  RECAP_TRY(check_heads_and_scale(call, q, k));
  recap__infer_output(call, 0, q->dtype, 3, q->shape);
  return RECAP_OK;
}

/* q . k over head_dim, and the keys (rows of the pool's blocks) the softmax and the weighted
 * sum of values run over. None of them is the token axis: a padding token changes no other
 * token's result. */
static int paged_attention_reduced_axes(const recap__op_attrs *attrs, int input[4], int axis[4]) {
  (void)attrs;
  input[0] = 0, axis[0] = -1;
  input[1] = 1, axis[1] = -1;
  input[2] = 1, axis[2] = 1;
  input[3] = 2, axis[3] = 1;
  return 4;
}

/* An upper bound: every token seeing all MB * BS keys its block table can hold (the real key
 * counts live in device memory). */
static double paged_attention_flops(const recap__op_call *call) {
  const recap_tensor *k = &call->inputs[1], *seqs = &call->inputs[3];
  const double keys = (double)(seqs->shape[1] - RECAP_SEQ_BLOCKS) * (double)k->shape[1];
  return 4.0 * (double)recap__tensor_numel(&call->outputs[0]) * keys;
}

static size_t paged_attention_workspace_bytes(const recap__op_call *call,
                                              recap_backend_kind backend) {
  return backend == RECAP_BACKEND_CUDA ? recap__paged_attention_workspace(call) : 0;
}

/* The CUDA kernel's arrival counts. The host reference takes the same bytes and checks they
 * are zero at every launch, which the CUDA merge relies on: CI then catches an engine that
 * does not zero a call's state or lets another call write it. */
static size_t paged_attention_call_state_bytes(const recap__op_call *call,
                                               recap_backend_kind backend) {
  (void)backend;
  return recap__paged_attention_arrivals(call);
}

const recap__op_def recap__op_paged_attention = {
    .name = "paged_attention",
    .summary =
        "causal softmax(q k^T * scale) v of the step's packed tokens q [T, H, Dh] over their "
        "sequences' keys in the block pools k_cache, v_cache [NB, BS, Hkv, Dh] (H a multiple of "
        "Hkv): a token at position p sees positions 0..p of its sequence, found through its "
        "seqs row's block table, all read when the op runs; tokens no row owns are zeros",
    .input_names = paged_attention_inputs,
    .min_inputs = 4,
    .max_inputs = 4,
    .num_outputs = 1,
    .attrs = paged_attention_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = -1,
    .reduced_axes = paged_attention_reduced_axes,
    .flops = paged_attention_flops,
    .infer = paged_attention_infer,
    .workspace_bytes = paged_attention_workspace_bytes,
    .call_state_bytes = paged_attention_call_state_bytes,
    .run_host = recap__host_paged_attention,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_paged_attention),
};

/* ---- paged_rope_attention ---- */

/* paged_rope_kv_write's checks (its inputs and outputs are this op's: the rotated q's shape is
 * the attention's output's), then attention's. */
static recap_status paged_rope_attention_infer(recap__op_call *call) {
  RECAP_TRY(paged_rope_kv_write_infer(call));
  return check_heads_and_scale(call, &call->inputs[0], &call->inputs[3]);
}

/* Attention's part of the call, for its plan (shapes only: no workspace needed). */
static recap__op_call attention_part(const recap__op_call *call) {
  recap__op_call rope, attention;
  recap__paged_rope_attention_parts(call, &rope, &attention);
  return attention;
}

/* The rotated q, then attention's split partials on CUDA. */
static size_t paged_rope_attention_workspace_bytes(const recap__op_call *call,
                                                   recap_backend_kind backend) {
  const recap__op_call attention = attention_part(call);
  return recap__paged_rope_attention_q_rot_bytes(call) +
         paged_attention_workspace_bytes(&attention, backend);
}

static size_t paged_rope_attention_call_state_bytes(const recap__op_call *call,
                                                    recap_backend_kind backend) {
  const recap__op_call attention = attention_part(call);
  return paged_attention_call_state_bytes(&attention, backend);
}

/* Attention's axes, its inputs renumbered (its k_cache is input 3 here, seqs input 5). */
static int paged_rope_attention_reduced_axes(const recap__op_attrs *attrs, int input[4],
                                             int axis[4]) {
  const int n = paged_attention_reduced_axes(attrs, input, axis);
  for (int i = 0; i < n; ++i)
    if (input[i] > 0) input[i] += 2;
  return n;
}

static double paged_rope_attention_flops(const recap__op_call *call) {
  const recap__op_call attention = attention_part(call);
  return paged_attention_flops(&attention);
}

static const recap__op_def *const rope_attention_parts[] = {&recap__op_paged_rope_kv_write,
                                                            &recap__op_paged_attention, NULL};

const recap__op_def recap__op_paged_rope_attention = {
    .name = "paged_rope_attention",
    .summary =
        "paged_rope_kv_write then paged_attention in one op: q [T, H, Dh] rotated at each "
        "token's position attends causally over its sequence's keys, the step's k [T, Hkv, Dh] "
        "rotated and v [T, Hkv, Dh] written to k_cache and v_cache [NB, BS, Hkv, Dh] first "
        "(rows through seqs, as paged_rope_kv_write; all read when the op runs); output 0 is "
        "the attention [T, H, Dh] (tokens no row owns are zeros), outputs 1 and 2 the caches. "
        "The rotated q is not an output; on CUDA a decode step (at most one token per seqs row) "
        "runs as one kernel where that is faster",
    .input_names = paged_rope_kv_write_inputs, /* its inputs are paged_rope_kv_write's */
    .min_inputs = 6,
    .max_inputs = 6,
    .num_outputs = 3,
    .attrs = paged_rope_attention_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = -1,
    .output_is_input = rope_kv_outputs,
    .zero_meta_writes_nothing = true,
    .parts = rope_attention_parts,
    .reduced_axes = paged_rope_attention_reduced_axes,
    .flops = paged_rope_attention_flops,
    .infer = paged_rope_attention_infer,
    .workspace_bytes = paged_rope_attention_workspace_bytes,
    .call_state_bytes = paged_rope_attention_call_state_bytes,
    .run_host = recap__host_paged_rope_attention,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_paged_rope_attention),
};
