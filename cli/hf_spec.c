/* hf_spec.c: the YAML of an imported model (specs/README.md's format): one block for the
 * layers, with each layer's KV caches as state inside it, and `prefill` and `decode` entries
 * over the same ops, so that a decode pipeline created with .share = the prefill one reads
 * the caches prefill wrote. Every architecture gets the same interface (docs/MODELS.md): ids
 * [B, S] and positions [S] in, scalars pos and len, f32 logits [B, S, V] out. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/hf_model.h"

/* The shortest decimal that reads back as v, always with a '.' so YAML reads a float; whole
 * numbers such as a RoPE theta without an exponent (500000.0). */
static const char *number(double v, char *buf, size_t size) {
  if (v == floor(v) && fabs(v) < 1e15) {
    snprintf(buf, size, "%.1f", v);
    return buf;
  }
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(buf, size, "%.*g", digits, v);
    if (strtod(buf, NULL) == v) break;
  }
  char *e = strchr(buf, 'e');
  if (e && !memchr(buf, '.', (size_t)(e - buf))) { /* 1e-05 -> 1.0e-05 */
    char exponent[16];
    snprintf(exponent, sizeof exponent, "%s", e);
    snprintf(e, size - (size_t)(e - buf), ".0%s", exponent);
  }
  return buf;
}

/* A YAML double-quoted string (the caller refused control characters). */
static void put_quoted(recap__text *t, const char *s) {
  recap__text_put(t, "\"");
  for (; *s; s++) recap__text_put(t, "%s%c", (*s == '"' || *s == '\\') ? "\\" : "", *s);
  recap__text_put(t, "\"");
}

/* ", rows: [b, e]" when every key takes the same range, else ", rows: [[b, e], ...]", one per
 * key (q, k and v of a tensor-parallel rank). */
static void put_ranges(recap__text *t, const char *axis, const int64_t (*ranges)[2], int num_keys) {
  bool same = true;
  for (int k = 1; k < num_keys; k++)
    same = same && ranges[k][0] == ranges[0][0] && ranges[k][1] == ranges[0][1];
  recap__text_put(t, ", %s: %s", axis, same ? "" : "[");
  for (int k = 0; k < (same ? 1 : num_keys); k++)
    recap__text_put(t, "%s[%" PRId64 ", %" PRId64 "]", k ? ", " : "", ranges[k][0], ranges[k][1]);
  recap__text_put(t, "%s", same ? "" : "]");
}

static void put_weight(recap__text *t, const char *indent, const cli_hf_weight *w, bool random) {
  if (random) {
    bool matrix = w->key_ndim[0] == 2, norm = strstr(w->name, "norm") != NULL;
    recap__text_put(t, "%s%s: {shape: %s, role: param, init: %s}\n", indent, w->name, w->shape,
                    matrix ? "normal, std: 0.02"
                    : norm ? "ones"
                           : "zeros");
    return;
  }
  recap__text_put(t, "%s%s: {shape: %s, role: param, key: ", indent, w->name, w->shape);
  if (w->num_keys == 1) {
    put_quoted(t, w->keys[0]);
  } else {
    recap__text_put(t, "[");
    for (int k = 0; k < w->num_keys; k++) {
      recap__text_put(t, "%s", k ? ", " : "");
      put_quoted(t, w->keys[k]);
    }
    recap__text_put(t, "]");
  }
  if (w->has_rows) put_ranges(t, "rows", w->rows, w->num_keys);
  if (w->has_cols) put_ranges(t, "cols", w->cols, w->num_keys);
  recap__text_put(t, "%s%s}\n", w->transpose ? ", transpose: true" : "",
                  w->cast ? ", cast: true" : "");
}

static bool has_weight(const cli_hf_weight *list, size_t count, const char *name) {
  for (size_t i = 0; i < count; i++)
    if (strcmp(list[i].name, name) == 0) return true;
  return false;
}

/* `with_comma` (", NAME") when the layer has the weight NAME (an optional bias), else "". */
static const char *optional(const cli_hf_weights *w, const char *with_comma) {
  return has_weight(w->layer, w->num_layer, with_comma + 2) ? with_comma : "";
}

/* A value of any width keeps a space before its comment (a `#` right after a scalar would be
 * part of it, and the dim a string). */
static void put_dim(recap__text *t, const char *name, int64_t value, const char *comment) {
  if (comment)
    recap__text_put(t, "  %-5s %-8" PRId64 " # %s\n", name, value, comment);
  else
    recap__text_put(t, "  %-5s %" PRId64 "\n", name, value);
}

/* "[1, 2, 4]" (or "8" for one value) into buf. */
static const char *list_text(const int64_t *values, size_t count, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = 0;
  for (size_t i = 0; i < count && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%" PRId64,
                             count == 1 ? ""
                             : i        ? ", "
                                        : "[",
                             values[i]);
  if (count > 1 && used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

/* The serving layout's step dims: T tokens from Bs sequences, the pool and the metadata rows. */
static void put_paged_step_dims(recap__text *t, const cli_hf_spec_options *o) {
  char decode[1024];
  list_text(o->batches, o->num_batches, decode, sizeof decode);
  int64_t blocks_per_seq = (o->max_seq + o->block_size - 1) / o->block_size;
  recap__text_put(t, "  T:    %-8s # tokens per step (decode: one per sequence)\n", decode);
  recap__text_put(t, "  Bs:   T        # sequence slots per step: rows of seqs\n");
  put_dim(t, "BS:", o->block_size, "rows per KV block (--block-size)");
  put_dim(t, "NB:", o->kv_blocks, "KV blocks in each layer's pool (--kv-blocks)");
  put_dim(t, "W:", 16 + blocks_per_seq,
          "seqs row: 16 fields + one block id per BS positions of --max-seq");
}

static void put_dims(recap__text *t, const cli_hf_config *c, const cli_hf_spec_options *o) {
  recap__text_put(t, "dims:\n");
  if (o->paged) {
    put_paged_step_dims(t, o);
  } else if (o->num_batches == 1 && o->batches[0] == 1) {
    put_dim(t, "B:", 1, "sequences per step");
  } else {
    /* Buckets even for one value above 1, so that fewer sequences (generate's one) run padded
     * to it. */
    recap__text_put(t, "  B:    ");
    for (size_t i = 0; i < o->num_batches; i++)
      recap__text_put(t, "%s%" PRId64, i ? ", " : "[", o->batches[i]);
    recap__text_put(t, "]  # sequences per step: the batch buckets\n");
  }
  const cli_hf_tp *tp = o->tp;
  bool split = tp->world > 1;
  int64_t q = tp->heads * c->head_dim, kv = tp->kv_heads * c->head_dim;
  if (!o->paged) {
    put_dim(t, "S:", 1, "tokens per sequence per step: the entries set it");
    put_dim(t, "Smax:", o->max_seq, "KV cache rows per sequence (--max-seq)");
  }
  put_dim(t, "D:", c->hidden, "hidden size");
  put_dim(t, "H:", tp->heads, split ? "attention heads of this rank" : "attention heads");
  put_dim(t, "Hkv:", tp->kv_heads, split ? "key/value heads of this rank" : "key/value heads");
  put_dim(t, "Dh:", c->head_dim, "head size");
  put_dim(t, "Q:", q, "H x Dh");
  put_dim(t, "KV:", kv, "Hkv x Dh");
  put_dim(t, "QKV:", q + 2 * kv, "Q + 2 KV");
  put_dim(t, "F:", tp->intermediate, split ? "MLP size of this rank" : "MLP size");
  if (!c->arch->gpt2) put_dim(t, "F2:", 2 * tp->intermediate, "2 F: gate and up");
  put_dim(t, "V:", c->vocab, "vocabulary");
  if (split) {
    put_dim(t, "Vr:", tp->vocab_real, "LM head rows of this rank");
    put_dim(t, "Vp:", tp->vocab_rows, "logits per rank: V padded to a multiple of the ranks");
    put_dim(t, "VN:", tp->vocab_rows * tp->world, "Vp x ranks: the gathered logits");
  }
  if (c->arch->gpt2) put_dim(t, "P:", c->max_positions, "learned positions");
  put_dim(t, "L:", c->layers, "layers");
  if (o->paged) {
    char decode[1024], prefill[1024];
    recap__text_put(t,
                    "entries:\n  prefill: {dims: {T: %s, Bs: %" PRId64
                    "}}\n  decode: {dims: {T: %s, Bs: T}}\n",
                    list_text(o->prefill_tokens, o->num_prefill_tokens, prefill, sizeof prefill),
                    o->prefill_seqs, list_text(o->batches, o->num_batches, decode, sizeof decode));
  } else {
    recap__text_put(t, "entries:\n  prefill: {dims: {S: %" PRId64 "}}\n  decode: {dims: {S: 1}}\n",
                    o->prefill);
  }
}

static void put_norm(recap__text *t, const cli_hf_config *c, const char *in, const char *weight,
                     const char *out) {
  char eps[40];
  if (c->arch->gpt2)
    recap__text_put(t, "      - {op: layernorm, in: [%s, %s, %s_bias], out: %s, eps: %s}\n", in,
                    weight, weight, out, number(c->norm_eps, eps, sizeof eps));
  else
    recap__text_put(t, "      - {op: rmsnorm, in: [%s, %s], out: %s, eps: %s}\n", in, weight, out,
                    number(c->norm_eps, eps, sizeof eps));
}

/* The RoPE attributes of the config, then `more` (attributes of the op's own, each led by ", "),
 * closing the op's braces. */
static void put_rope_attrs_then(recap__text *t, const cli_hf_config *c, const char *more) {
  char theta[40], factor[40], low[40], high[40];
  recap__text_put(t, ", theta: %s", number(c->rope_theta, theta, sizeof theta));
  if (c->llama3)
    recap__text_put(t,
                    ", llama3: true, factor: %s, low_freq_factor: %s, high_freq_factor: %s, "
                    "original_max_positions: %" PRId64,
                    number(c->llama3_factor, factor, sizeof factor),
                    number(c->llama3_low_freq_factor, low, sizeof low),
                    number(c->llama3_high_freq_factor, high, sizeof high),
                    c->llama3_original_max_positions);
  recap__text_put(t, "%s}\n", more);
}

/* RoPE of `in` [B, S, heads, Dh] at `positions` into `out`. */
static void put_rope(recap__text *t, const cli_hf_config *c, const char *in, const char *out) {
  recap__text_put(t, "      - {op: rope, in: [%s, positions], out: %s", in, out);
  put_rope_attrs_then(t, c, "");
}

/* result = residual + in x weight^T (+ bias), the projection named `out`: a linear whose weight
 * is split by its input columns under tensor parallelism, so each rank's product is a partial
 * sum: one all_reduce adds them, and the bias (whole on every rank) is added once, after it.
 * With tp_fold_residual rank 0 adds the residual into its partial sum instead (an add the
 * fusion pass folds into the linear), so the all_reduce's sum is the result and no add kernel
 * follows it. */
static void put_row_parallel(recap__text *t, const cli_hf_spec_options *o, const cli_hf_weights *w,
                             const char *in, const char *weight, const char *bias_with_comma,
                             const char *residual, const char *out, const char *result,
                             const char *name) {
  const char *bias = optional(w, bias_with_comma);
  if (o->tp->world == 1) {
    recap__text_put(t, "      - {op: linear, in: [%s, %s%s], out: %s, name: %s}\n", in, weight,
                    bias, out, name);
    recap__text_put(t, "      - {op: add, in: [%s, %s], out: %s}\n", residual, out, result);
    return;
  }
  if (!o->tp_fold_residual) {
    recap__text_put(t, "      - {op: linear, in: [%s, %s], out: %s_part, name: %s}\n", in, weight,
                    out, name);
    recap__text_put(t, "      - {op: all_reduce, in: %s_part, out: %s%s, name: %s_all_reduce}\n",
                    out, out, *bias ? "_sum" : "", name);
    if (*bias)
      recap__text_put(t, "      - {op: add, in: [%s_sum, %s], out: %s}\n", out, bias + 2, out);
    recap__text_put(t, "      - {op: add, in: [%s, %s], out: %s}\n", residual, out, result);
    return;
  }
  if (o->tp->rank == 0) {
    recap__text_put(t, "      - {op: linear, in: [%s, %s], out: %s_local, name: %s}\n", in, weight,
                    out, name);
    recap__text_put(t, "      - {op: add, in: [%s, %s_local], out: %s_part}\n", residual, out, out);
  } else {
    recap__text_put(t, "      - {op: linear, in: [%s, %s], out: %s_part, name: %s}\n", in, weight,
                    out, name);
  }
  recap__text_put(t, "      - {op: all_reduce, in: %s_part, out: %s, name: %s_all_reduce}\n", out,
                  *bias ? out : result, name);
  if (*bias)
    recap__text_put(t, "      - {op: add, in: [%s, %s], out: %s}\n", out, bias + 2, result);
}

/* x -> h: norm, q/k/v, (q/k norm,) RoPE, the caches, attention, output projection, residual. */
static void put_attention(recap__text *t, const cli_hf_config *c, const cli_hf_weights *w,
                          const cli_hf_spec_options *o) {
  put_norm(t, c, "x", "attn_norm", "xn");
  /* One GEMM for q, k and v (this rank's heads of each under tensor parallelism). */
  recap__text_put(t, "      - {op: linear, in: [xn, wqkv%s], out: qkv, name: qkv}\n",
                  optional(w, ", bqkv"));
  recap__text_put(t,
                  "      - {op: split, in: [qkv], out: [q_flat, k_flat, v_flat], dim: -1, "
                  "sizes: [Q, KV, KV]}\n");
  const char *rows = o->paged ? "T" : "B, S";
  recap__text_put(t, "      - {op: reshape, in: [q_flat], out: q_heads, shape: [%s, H, Dh]}\n",
                  rows);
  recap__text_put(t, "      - {op: reshape, in: [k_flat], out: k_heads, shape: [%s, Hkv, Dh]}\n",
                  rows);
  recap__text_put(t, "      - {op: reshape, in: [v_flat], out: v_rows, shape: [%s, Hkv, Dh]}\n",
                  rows);
  const char *q = "q_heads", *k = "k_heads";
  if (c->arch->qk_norm) {
    put_norm(t, c, q, "q_norm", "q_normed");
    put_norm(t, c, k, "k_norm", "k_normed");
    q = "q_normed";
    k = "k_normed";
  }
  char scale[40] = "";
  if (c->attention_scale > 0) {
    char s[32];
    snprintf(scale, sizeof scale, ", scale: %s", number(c->attention_scale, s, sizeof s));
  }
  if (o->paged && !c->arch->gpt2) {
    /* RoPE of q and k at each token's position, both pool writes and the attention in one op
     * (after Qwen3's q/k norms, which it reads): one launch at decode. */
    recap__text_put(t,
                    "      - {op: paged_rope_attention, in: [%s, %s, v_rows, k_cache, v_cache, "
                    "seqs], out: [attn, k_all, v_all]",
                    q, k);
    char attrs[80];
    snprintf(attrs, sizeof attrs, "%s, name: attention", scale);
    put_rope_attrs_then(t, c, attrs);
    recap__text_put(t, "      - {op: reshape, in: [attn], out: attn_flat, shape: [T, Q]}\n");
  } else if (!c->arch->gpt2) {
    put_rope(t, c, q, "q_rows");
    put_rope(t, c, k, "k_rows");
    q = "q_rows";
    k = "k_rows";
  }
  if (o->paged && c->arch->gpt2) {
    /* No RoPE: the step's K and V rows go to their pools as they are. */
    recap__text_put(t, "      - {op: paged_kv_write, in: [k_cache, %s, seqs], out: k_all}\n", k);
    recap__text_put(t, "      - {op: paged_kv_write, in: [v_cache, v_rows, seqs], out: v_all}\n");
    recap__text_put(t,
                    "      - {op: paged_attention, in: [%s, k_all, v_all, seqs], out: attn%s, "
                    "name: attention}\n",
                    q, scale);
    recap__text_put(t, "      - {op: reshape, in: [attn], out: attn_flat, shape: [T, Q]}\n");
  } else if (!o->paged) {
    recap__text_put(t, "      - {op: kv_append, in: [k_cache, %s, pos], out: k_all}\n", k);
    recap__text_put(t, "      - {op: kv_append, in: [v_cache, v_rows, pos], out: v_all}\n");
    recap__text_put(t, "      - {op: permute, in: [%s], out: q, dims: [0, 2, 1, 3]}\n", q);
    recap__text_put(t, "      - {op: permute, in: [k_all], out: k, dims: [0, 2, 1, 3]}\n");
    recap__text_put(t, "      - {op: permute, in: [v_all], out: v, dims: [0, 2, 1, 3]}\n");
    recap__text_put(t,
                    "      - {op: attention, in: [q, k, v, len], out: attn, causal: true%s, "
                    "name: attention}\n",
                    scale);
    recap__text_put(t, "      - {op: permute, in: [attn], out: attn_rows, dims: [0, 2, 1, 3]}\n");
    recap__text_put(t,
                    "      - {op: reshape, in: [attn_rows], out: attn_flat, shape: [B, S, Q]}\n");
  }
  put_row_parallel(t, o, w, "attn_flat", "wo", ", bo", "x", "proj", "h", "out_proj");
}

/* h -> y: norm, MLP, residual. */
static void put_mlp(recap__text *t, const cli_hf_config *c, const cli_hf_weights *w,
                    const cli_hf_spec_options *o) {
  put_norm(t, c, "h", "mlp_norm", "hn");
  if (c->arch->gpt2) {
    recap__text_put(t, "      - {op: linear, in: [hn, wfc, bfc], out: act, act: %s, name: fc}\n",
                    c->act);
  } else {
    recap__text_put(t, "      - {op: linear, in: [hn, wgate_up%s], out: gate_up, name: gate_up}\n",
                    optional(w, ", bgate_up"));
    recap__text_put(
        t, "      - {op: split, in: [gate_up], out: [gate, up], dim: -1, sizes: [F, F]}\n");
    recap__text_put(t, "      - {op: expr, in: [gate, up], out: act, expr: \"%s(gate) * up\"}\n",
                    c->act);
  }
  put_row_parallel(t, o, w, "act", "wdown", ", bdown", "h", "down", "y", "down");
}

static void put_header(recap__text *t, const cli_hf_config *c, const cli_hf_spec_options *o) {
  recap__text_put(t,
                  "# %s imported by `recap import-hf` (docs/MODELS.md). The weights are read from "
                  "the checkpoint by key.\n",
                  c->arch->architecture);
  if (o->paged)
    recap__text_put(t,
                    "# Serving layout: each step runs T tokens packed from Bs sequences. Inputs: "
                    "ids [T] (i32) and\n"
                    "# seqs [Bs, W] (i32, one row per sequence: include/recap.h, RECAP_SEQ_*). "
                    "Outputs: logits [Bs, V]\n"
                    "# (f32) at each sequence's last token and tokens [Bs] (i32), sampled as each "
                    "row asks. decode_advance\n"
                    "# then moves every running row one position on and writes its token into "
                    "ids, so decode steps\n"
                    "# replay with no host copy. `prefill` packs prompt chunks, `decode` runs one "
                    "token per sequence;\n"
                    "# both over the paged KV pools (create one with "
                    "recap_pipeline_options.share = the other).\n");
  else
    recap__text_put(t,
                    "# Inputs: ids [B, S] (i32 token ids) and positions [S] (each row's position); "
                    "scalars pos (the\n"
                    "# first row's position: where this step's keys and values go in the caches) "
                    "and len (valid\n"
                    "# cache rows after this step: pos + S). Output: logits [B, S, V], f32. Run "
                    "a prompt with the\n"
                    "# `prefill` entry (S tokens at a time), then one token per step with "
                    "`decode`, created with\n"
                    "# recap_pipeline_options.share = the prefill pipeline (specs/README.md, "
                    "\"Entries\").\n");
}

/* The step's inputs and the top-level ops that read them, up to the layers' input h0. */
static void put_inputs(recap__text *t, const cli_hf_config *c, const cli_hf_weights *w,
                       const cli_hf_spec_options *o) {
  if (o->paged) {
    recap__text_put(t, "  ids: {shape: [T], dtype: i32, role: input}\n");
    recap__text_put(t, "  seqs: {shape: [Bs, W], dtype: i32, role: input}\n");
  } else {
    recap__text_put(t, "  ids: {shape: [B, S], dtype: i32, role: input}\n");
    recap__text_put(t, "  positions: {shape: [S], dtype: i32, role: input}\n");
    recap__text_put(t, "  pos: {role: scalar, value: 0}\n");
    recap__text_put(t, "  len: {role: scalar, value: %" PRId64 "}\n", o->prefill);
  }
  for (size_t i = 0; i < w->num_top; i++) put_weight(t, "  ", &w->top[i], o->random_weights);

  recap__text_put(t, "ops:\n");
  /* GPT-2's position table needs each token's position as a tensor; RoPE models' fused op
   * finds it in seqs itself. */
  if (o->paged && c->arch->gpt2)
    recap__text_put(t, "  - {op: seq_positions, in: [seqs], out: positions, tokens: T}\n");
  if (c->arch->gpt2) {
    recap__text_put(t, "  - {op: embedding, in: [wte, ids], out: token_rows}\n");
    recap__text_put(t, "  - {op: embedding, in: [wpe, positions], out: position_rows}\n");
    recap__text_put(t, "  - {op: add, in: [token_rows, position_rows], out: h0}\n");
  } else {
    recap__text_put(t, "  - {op: embedding, in: [%s, ids], out: h0}\n", w->embedding);
  }
}

/* logits_rank (this rank's vocabulary rows, f32) -> logits (every rank's, in vocabulary order):
 * the last rank pads its share to Vp columns so that every rank sends as much, one all_gather
 * stacks the ranks along the first axis, a permute puts them side by side, and the padding
 * (the last VN - V columns) is split off, so the logits and the sampling that reads them are
 * those of one GPU: padded columns never win, and ties go to the lowest index as there. */
static void put_gathered_logits(recap__text *t, const cli_hf_spec_options *o, int64_t vocab) {
  const cli_hf_tp *tp = o->tp;
  const char *rows = o->paged ? "Bs" : "B, S";
  const char *local = "logits_rank";
  int64_t pad = tp->vocab_rows - tp->vocab_real;
  if (pad > 0) {
    recap__text_put(
        t, "  - {op: fill, out: logits_pad, shape: [%s, %" PRId64 "], dtype: f32, value: 0}\n",
        rows, pad);
    recap__text_put(t,
                    "  - {op: concat, in: [logits_rank, logits_pad], out: logits_padded, "
                    "dim: -1}\n");
    local = "logits_padded";
  }
  recap__text_put(t,
                  "  - {op: all_gather, in: %s, out: logits_ranks, world: %" PRId64
                  ", name: logits_all_gather}\n",
                  local, tp->world);
  recap__text_put(t,
                  "  - {op: reshape, in: [logits_ranks], out: logits_by_rank, shape: [%" PRId64
                  ", %s, Vp]}\n",
                  tp->world, rows);
  recap__text_put(t,
                  "  - {op: permute, in: [logits_by_rank], out: logits_side_by_side, dims: "
                  "[%s]}\n",
                  o->paged ? "1, 0, 2" : "1, 2, 0, 3");
  int64_t padding = tp->vocab_rows * tp->world - vocab;
  bool padded = padding > 0;
  recap__text_put(t, "  - {op: reshape, in: [logits_side_by_side], out: %s, shape: [%s, VN]}\n",
                  padded ? "logits_all" : "logits", rows);
  if (padded)
    recap__text_put(t,
                    "  - {op: split, in: [logits_all], out: [logits, logits_padding], dim: -1, "
                    "sizes: [V, %" PRId64 "]}\n",
                    padding);
}

bool cli_hf_spec_write(const cli_hf_config *c, const cli_hf_weights *w,
                       const cli_hf_spec_options *o, recap__text *t) {
  const char *dtype = recap_dtype_name(o->dtype);
  put_header(t, c, o);
  recap__text_put(t, "name: %s\ndevice: cuda\ndtype: %s\n", c->name, dtype);
  if (o->random_weights) {
    recap__text_put(t, "# Random weights (import-hf --random-weights): for timing, not a model.\n");
  } else {
    recap__text_put(t, "checkpoint: ");
    put_quoted(t, o->checkpoint);
    recap__text_put(t, "\n");
  }
  put_dims(t, c, o);

  recap__text_put(t, "blocks:\n  layer:\n    input: x\n    output: y\n    tensors:\n");
  const char *cache = o->paged ? "[NB, BS, Hkv, Dh]" : "[B, Smax, Hkv, Dh]";
  recap__text_put(t, "      k_cache: {shape: %s, role: state}\n", cache);
  recap__text_put(t, "      v_cache: {shape: %s, role: state}\n", cache);
  for (size_t i = 0; i < w->num_layer; i++)
    put_weight(t, "      ", &w->layer[i], o->random_weights);
  recap__text_put(t, "    ops:\n");
  put_attention(t, c, w, o);
  put_mlp(t, c, w, o);

  recap__text_put(t, "tensors:\n");
  put_inputs(t, c, w, o);
  recap__text_put(t, "  - {block: layer, count: L, in: h0, out: hL, name: layers}\n");
  /* The serving layout computes logits at each sequence's last token only. */
  const char *last = "hL";
  if (o->paged) {
    recap__text_put(t, "  - {op: seq_last_tokens, in: [seqs], out: last}\n");
    recap__text_put(t, "  - {op: embedding, in: [hL, last], out: h_last}\n");
    last = "h_last";
  }
  char eps[40];
  number(c->norm_eps, eps, sizeof eps);
  if (c->arch->gpt2)
    recap__text_put(t,
                    "  - {op: layernorm, in: [%s, final_norm, final_norm_bias], out: hf, eps: "
                    "%s}\n",
                    last, eps);
  else
    recap__text_put(t, "  - {op: rmsnorm, in: [%s, final_norm], out: hf, eps: %s}\n", last, eps);
  bool f32 = o->dtype == RECAP_DTYPE_F32;
  const char *logits = o->tp->world > 1 ? "logits_rank" : "logits";
  recap__text_put(t, "  - {op: linear, in: [hf, %s], out: %s%s, name: lm_head}\n", w->lm_head,
                  logits, f32 ? "" : "_raw");
  if (!f32)
    recap__text_put(t, "  - {op: cast, in: [%s_raw], out: %s, dtype: f32}\n", logits, logits);
  if (o->tp->world > 1) put_gathered_logits(t, o, c->vocab);
  /* The vocabulary's padding is split off the gathered logits and read by nothing else: an
   * output, so that the spec names it (recap refuses a result no one reads). */
  bool padding = o->tp->world > 1 && o->tp->vocab_rows * o->tp->world > c->vocab;
  if (o->paged) {
    recap__text_put(t, "  - {op: sample, in: [logits, seqs], out: tokens}\n");
    recap__text_put(t,
                    "  - {op: decode_advance, in: [ids, seqs, tokens], out: ids_next, "
                    "block_size: BS}\n");
    recap__text_put(t, "outputs: [logits, tokens%s]\n", padding ? ", logits_padding" : "");
  } else {
    recap__text_put(t, "outputs: [logits%s]\n", padding ? ", logits_padding" : "");
  }
  return !t->failed;
}
