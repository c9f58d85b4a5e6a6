/*
 * host/paged.c: host reference of the paged serving ops (kernels/paged.c).
 *
 * Each op first checks every row of the metadata (seq_meta.h) and writes nothing when a row
 * breaks a rule. Rows with tokens are then packed from token 0, so the tokens a row owns are
 * [0, owned) and the rest are padding. paged_attention is a direct loop in double, as the
 * contiguous attention's reference is: one pass for the maximum score, one for the sum of the
 * exponentials, then the output a chunk of head dims at a time, recomputing the scores per
 * chunk, so nothing is allocated at run time whatever the context length.
 */
#include "kernels/paged.h"

#include <math.h>
#include <string.h>

#include "kernels/host/host_ops.h"
#include "kernels/host/seq_meta.h"
#include "kernels/infer.h"
#include "runtime/half.h"

recap_status recap__host_seq_positions(const recap__op_call *call) {
  const recap_tensor *seqs = &call->inputs[0];
  const int64_t tokens = call->outputs[0].shape[0];
  const recap__seqs_rules rules = {.tokens = tokens, .blocks = RECAP__SEQS_BLOCKS_NONE};
  RECAP_TRY(recap__seqs_check(call, 0, &rules, NULL));
  int32_t *out = call->outputs[0].data;
  memset(out, 0, (size_t)tokens * sizeof *out);
  for (int64_t r = 0; r < seqs->shape[0]; ++r) {
    const int32_t *row = recap__seqs_row(seqs, r);
    const int32_t first = row[RECAP_SEQ_LEN] - row[RECAP_SEQ_Q_LEN];
    for (int32_t t = 0; t < row[RECAP_SEQ_Q_LEN]; ++t) out[row[RECAP_SEQ_Q_START] + t] = first + t;
  }
  return RECAP_OK;
}

recap_status recap__host_seq_last_tokens(const recap__op_call *call) {
  const recap_tensor *seqs = &call->inputs[0];
  const recap__seqs_rules rules = {.tokens = -1, .blocks = RECAP__SEQS_BLOCKS_NONE};
  RECAP_TRY(recap__seqs_check(call, 0, &rules, NULL));
  int32_t *out = call->outputs[0].data;
  for (int64_t r = 0; r < seqs->shape[0]; ++r) {
    const int32_t *row = recap__seqs_row(seqs, r);
    out[r] = row[RECAP_SEQ_Q_LEN] > 0 ? row[RECAP_SEQ_Q_START] + row[RECAP_SEQ_Q_LEN] - 1 : 0;
  }
  return RECAP_OK;
}

recap_status recap__host_paged_kv_write(const recap__op_call *call) {
  const recap_tensor *cache = &call->inputs[0], *rows = &call->inputs[1], *seqs = &call->inputs[2];
  if (call->outputs[0].data != cache->data)
    return RECAP_OP_FAIL(call, "the output must be the cache itself (same memory)");
  const int64_t block_size = cache->shape[1], kv_heads = cache->shape[2], dh = cache->shape[3];
  const recap__seqs_rules rules = {.tokens = rows->shape[0],
                                   .block_size = block_size,
                                   .num_blocks = cache->shape[0],
                                   .blocks = RECAP__SEQS_BLOCKS_WRITTEN};
  RECAP_TRY(recap__seqs_check(call, 2, &rules, NULL));
  const int64_t esize = (int64_t)recap_dtype_size(cache->dtype);
  for (int64_t r = 0; r < seqs->shape[0]; ++r) {
    const int32_t *row = recap__seqs_row(seqs, r);
    for (int64_t t = 0; t < row[RECAP_SEQ_Q_LEN]; ++t) {
      const recap__seq_token at = recap__seq_token_at(row, t, block_size);
      const int64_t token = at.token, pos = at.pos, block = at.block;
      /* Both last dims are unit-stride (infer): a head's row is one copy. */
      for (int64_t h = 0; h < kv_heads; ++h)
        memcpy(
            (char *)cache->data + (block * cache->strides[0] +
                                   pos % block_size * cache->strides[1] + h * cache->strides[2]) *
                                      esize,
            (const char *)rows->data + (token * rows->strides[0] + h * rows->strides[1]) * esize,
            (size_t)(dh * esize));
    }
  }
  return RECAP_OK;
}

recap_status recap__host_paged_rope_kv_write(const recap__op_call *call) {
  const recap_tensor *q = &call->inputs[0], *k = &call->inputs[1], *v = &call->inputs[2];
  const recap_tensor *kc = &call->inputs[3], *vc = &call->inputs[4], *seqs = &call->inputs[5];
  const recap_tensor *q_out = &call->outputs[0];
  if (call->outputs[1].data != kc->data || call->outputs[2].data != vc->data)
    return RECAP_OP_FAIL(call, "outputs 1 and 2 must be the caches themselves (same memory)");
  const int64_t tokens = q->shape[0], heads = q->shape[1], dh = q->shape[2];
  const int64_t block_size = kc->shape[1], kv_heads = kc->shape[2];
  const recap__seqs_rules rules = {.tokens = tokens,
                                   .block_size = block_size,
                                   .num_blocks = kc->shape[0],
                                   .blocks = RECAP__SEQS_BLOCKS_WRITTEN};
  int64_t owned;
  RECAP_TRY(recap__seqs_check(call, 5, &rules, &owned));
  const recap__rope_freqs freqs = recap__rope_freqs_of(&call->attrs);
  const int64_t esize = (int64_t)recap_dtype_size(q->dtype);
  /* Padding tokens' q rows are rotated at position 0, which copies them: what rope does at the
   * 0 that seq_positions gives them. */
  for (int64_t token = owned; token < tokens; ++token)
    for (int64_t h = 0; h < heads; ++h)
      recap__host_rope_row(&freqs, dh, 0, q, token * q->strides[0] + h * q->strides[1],
                           q->strides[2], q_out->data, q_out->dtype, (token * heads + h) * dh);
  for (int64_t r = 0; r < seqs->shape[0]; ++r) {
    const int32_t *row = recap__seqs_row(seqs, r);
    for (int64_t t = 0; t < row[RECAP_SEQ_Q_LEN]; ++t) {
      const recap__seq_token at = recap__seq_token_at(row, t, block_size);
      const int64_t token = at.token, pos = at.pos, block = at.block;
      for (int64_t h = 0; h < heads; ++h)
        recap__host_rope_row(&freqs, dh, pos, q, token * q->strides[0] + h * q->strides[1],
                             q->strides[2], q_out->data, q_out->dtype, (token * heads + h) * dh);
      /* The pools' rows of this position, and the step's K and V rows of this token; every
       * last dim is unit-stride (infer). */
      const int64_t kc_at = block * kc->strides[0] + pos % block_size * kc->strides[1];
      const int64_t vc_at = block * vc->strides[0] + pos % block_size * vc->strides[1];
      for (int64_t h = 0; h < kv_heads; ++h) {
        recap__host_rope_row(&freqs, dh, pos, k, token * k->strides[0] + h * k->strides[1],
                             k->strides[2], kc->data, kc->dtype, kc_at + h * kc->strides[2]);
        memcpy((char *)vc->data + (vc_at + h * vc->strides[2]) * esize,
               (const char *)v->data + (token * v->strides[0] + h * v->strides[1]) * esize,
               (size_t)(dh * esize));
      }
    }
  }
  return RECAP_OK;
}

/* One (token, head): where its query row is, and where the pool rows of its sequence are. */
typedef struct {
  const recap_tensor *q, *k, *v;
  int64_t q_offset;
  const int32_t *blocks; /* the row's block table */
  int64_t block_size, kv_head, head_dim;
  double scale;
} query;

/* The pool offset (elements) of key position j of the query's sequence in `cache`. */
static int64_t key_offset(const query *x, const recap_tensor *cache, int64_t j) {
  return x->blocks[j / x->block_size] * cache->strides[0] + j % x->block_size * cache->strides[1] +
         x->kv_head * cache->strides[2];
}

static double score(const query *x, int64_t j) {
  const int64_t ko = key_offset(x, x->k, j);
  double s = 0;
  for (int64_t d = 0; d < x->head_dim; ++d)
    s += (double)recap__load_f32(x->q->data, x->q->dtype, x->q_offset + d) *
         recap__load_f32(x->k->data, x->k->dtype, ko + d);
  return x->scale * s;
}

enum { CHUNK = 64 };

/* The query's attention over key positions [0, visible) into the output row at `out_offset`. */
static void attend(const query *x, int64_t visible, const recap_tensor *out, int64_t out_offset) {
  double max = -INFINITY, sum = 0;
  for (int64_t j = 0; j < visible; ++j) max = fmax(max, score(x, j));
  for (int64_t j = 0; j < visible; ++j) sum += exp(score(x, j) - max);
  for (int64_t d0 = 0; d0 < x->head_dim; d0 += CHUNK) {
    const int64_t width = x->head_dim - d0 < CHUNK ? x->head_dim - d0 : CHUNK;
    double acc[CHUNK] = {0};
    for (int64_t j = 0; j < visible; ++j) {
      const double p = exp(score(x, j) - max) / sum;
      const int64_t vo = key_offset(x, x->v, j) + d0;
      for (int64_t d = 0; d < width; ++d)
        acc[d] += p * recap__load_f32(x->v->data, x->v->dtype, vo + d);
    }
    for (int64_t d = 0; d < width; ++d)
      recap__store_f32(out->data, out->dtype, out_offset + d0 + d, (float)acc[d]);
  }
}

recap_status recap__host_paged_attention(const recap__op_call *call) {
  const recap_tensor *q = &call->inputs[0], *k = &call->inputs[1], *v = &call->inputs[2];
  const recap_tensor *seqs = &call->inputs[3], *out = &call->outputs[0];
  const int64_t tokens = q->shape[0], heads = q->shape[1], head_dim = q->shape[2];
  const int64_t group = heads / k->shape[2];
  const recap__seqs_rules rules = {.tokens = tokens,
                                   .block_size = k->shape[1],
                                   .num_blocks = k->shape[0],
                                   .blocks = RECAP__SEQS_BLOCKS_READ};
  int64_t owned;
  RECAP_TRY(recap__seqs_check(call, 3, &rules, &owned));
  RECAP_TRY(recap__host_call_state_check(call));
  query x = {.q = q,
             .k = k,
             .v = v,
             .block_size = k->shape[1],
             .head_dim = head_dim,
             .scale = call->attrs.scale != 0 ? call->attrs.scale : 1.0 / sqrt((double)head_dim)};
  for (int64_t r = 0; r < seqs->shape[0]; ++r) {
    const int32_t *row = recap__seqs_row(seqs, r);
    x.blocks = row + RECAP_SEQ_BLOCKS;
    for (int64_t t = 0; t < row[RECAP_SEQ_Q_LEN]; ++t) {
      const int64_t token = row[RECAP_SEQ_Q_START] + t;
      /* Causal: the token sees its own position and the ones before it. */
      const int64_t visible = row[RECAP_SEQ_LEN] - row[RECAP_SEQ_Q_LEN] + t + 1;
      for (int64_t h = 0; h < heads; ++h) {
        x.kv_head = h / group;
        x.q_offset = token * q->strides[0] + h * q->strides[1];
        attend(&x, visible, out, token * out->strides[0] + h * out->strides[1]);
      }
    }
  }
  /* The padding tokens' rows. */
  for (int64_t token = owned; token < tokens; ++token)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t d = 0; d < head_dim; ++d)
        recap__store_f32(out->data, out->dtype, token * out->strides[0] + h * out->strides[1] + d,
                         0.0f);
  return RECAP_OK;
}

/* Its two parts one after the other, the rotated q in the workspace (kernels/paged.h). */
recap_status recap__host_paged_rope_attention(const recap__op_call *call) {
  if (!call->workspace || call->workspace_bytes < recap__paged_rope_attention_q_rot_bytes(call))
    return RECAP_OP_FAIL(call, "needs %zu bytes of workspace for its rotated q, the call has %zu",
                         recap__paged_rope_attention_q_rot_bytes(call),
                         call->workspace ? call->workspace_bytes : 0);
  recap__op_call rope, attention;
  recap__paged_rope_attention_parts(call, &rope, &attention);
  RECAP_TRY(recap__host_paged_rope_kv_write(&rope));
  return recap__host_paged_attention(&attention);
}
