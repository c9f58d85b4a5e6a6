/* hf_weights.c: the checkpoint tensors an imported spec reads, by architecture, each checked in
 * the checkpoint before a spec names it: a wrong or missing tensor is an error naming the key,
 * the file and the shape expected, never a spec that fails later or a silently wrong model. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/hf_model.h"

typedef struct {
  cli_hf_weight *list;
  size_t *count;
} weight_list;

/* A new weight at the end of the list (the lists' capacity holds every architecture's). */
static cli_hf_weight *add(weight_list l, bool per_layer, const char *name, const char *shape) {
  cli_hf_weight *w = &l.list[(*l.count)++];
  *w = (cli_hf_weight){.per_layer = per_layer};
  snprintf(w->name, sizeof w->name, "%s", name);
  snprintf(w->shape, sizeof w->shape, "%s", shape);
  return w;
}

/* One key of w: prefix + key, of shape [d0] (d1 == 0) or [d0, d1] in the file. */
static void add_key(cli_hf_weight *w, const char *prefix, const char *key, int64_t d0, int64_t d1) {
  int k = w->num_keys++;
  snprintf(w->keys[k], sizeof w->keys[k], "%s%s", prefix, key);
  w->key_ndim[k] = d1 ? 2 : 1;
  w->key_shape[k][0] = d0;
  w->key_shape[k][1] = d1;
}

/* Tensor parallelism: only [begin, begin + count) of the file's first axis (rows) or of its
 * last (columns), for key k of w, or for every key (k < 0). */
static void take_rows(cli_hf_weight *w, int k, int64_t begin, int64_t count) {
  w->has_rows = true;
  int first = k < 0 ? 0 : k, end = k < 0 ? CLI_HF_MAX_KEYS : k + 1;
  for (int i = first; i < end; i++) {
    w->rows[i][0] = begin;
    w->rows[i][1] = begin + count;
  }
}

static void take_cols(cli_hf_weight *w, int k, int64_t begin, int64_t count) {
  w->has_cols = true;
  int first = k < 0 ? 0 : k, end = k < 0 ? CLI_HF_MAX_KEYS : k + 1;
  for (int i = first; i < end; i++) {
    w->cols[i][0] = begin;
    w->cols[i][1] = begin + count;
  }
}

/* The LM head when it is split by vocabulary: this rank's rows of `key` (the token embedding's
 * when tied, read a second time: the embedding itself stays whole on every rank). */
static void split_lm_head(weight_list top, const cli_hf_tp *tp, const char *key, int64_t vocab,
                          int64_t d, cli_hf_weights *out) {
  cli_hf_weight *w = add(top, false, "lm_head", "[Vr, D]");
  add_key(w, "", key, vocab, d);
  take_rows(w, -1, tp->vocab_begin, tp->vocab_real);
  out->lm_head = "lm_head";
}

/* Attention split by heads (q, k and v by output rows, o by input columns) and the MLP by its
 * intermediate size (gate and up by rows, down by columns); o's and down's biases stay whole
 * (added once, after the all_reduce). */
static void llama_style(const cli_hf_config *c, const cli_hf_tp *tp, cli_hf_weights *out) {
  bool tied = c->tied, split = tp->world > 1;
  weight_list top = {out->top, &out->num_top}, layer = {out->layer, &out->num_layer};
  int64_t d = c->hidden, q = c->heads * c->head_dim, kv = c->kv_heads * c->head_dim;
  int64_t f = c->intermediate;
  int64_t q_part = tp->heads * c->head_dim, kv_part = tp->kv_heads * c->head_dim;
  int64_t f_part = tp->intermediate;
  add_key(add(top, false, "embed", "[V, D]"), "", "model.embed_tokens.weight", c->vocab, d);
  add_key(add(top, false, "final_norm", "[D]"), "", "model.norm.weight", d, 0);
  out->embedding = "embed";
  out->lm_head = tied ? "embed" : "lm_head";
  if (split)
    split_lm_head(top, tp, tied ? "model.embed_tokens.weight" : "lm_head.weight", c->vocab, d, out);
  else if (!tied)
    add_key(add(top, false, "lm_head", "[V, D]"), "", "lm_head.weight", c->vocab, d);

  const char *p = "model.layers.{i}.";
  add_key(add(layer, true, "attn_norm", "[D]"), p, "input_layernorm.weight", d, 0);
  bool qkv_bias = c->arch->qkv_bias || c->attention_bias;
  cli_hf_weight *w;
  /* q, k and v in one GEMM; under tensor parallelism each key its own rows (this rank's
   * heads of q, and of k and v: different with grouped-query heads). */
  w = add(layer, true, "wqkv", "[QKV, D]");
  add_key(w, p, "self_attn.q_proj.weight", q, d);
  add_key(w, p, "self_attn.k_proj.weight", kv, d);
  add_key(w, p, "self_attn.v_proj.weight", kv, d);
  if (split) {
    take_rows(w, 0, tp->rank * q_part, q_part);
    take_rows(w, 1, tp->rank * kv_part, kv_part);
    take_rows(w, 2, tp->rank * kv_part, kv_part);
  }
  if (qkv_bias) {
    w = add(layer, true, "bqkv", "[QKV]");
    add_key(w, p, "self_attn.q_proj.bias", q, 0);
    add_key(w, p, "self_attn.k_proj.bias", kv, 0);
    add_key(w, p, "self_attn.v_proj.bias", kv, 0);
    if (split) {
      take_rows(w, 0, tp->rank * q_part, q_part);
      take_rows(w, 1, tp->rank * kv_part, kv_part);
      take_rows(w, 2, tp->rank * kv_part, kv_part);
    }
  }
  if (c->arch->qk_norm) {
    add_key(add(layer, true, "q_norm", "[Dh]"), p, "self_attn.q_norm.weight", c->head_dim, 0);
    add_key(add(layer, true, "k_norm", "[Dh]"), p, "self_attn.k_norm.weight", c->head_dim, 0);
  }
  w = add(layer, true, "wo", "[D, Q]");
  add_key(w, p, "self_attn.o_proj.weight", d, q);
  if (split) take_cols(w, -1, tp->rank * q_part, q_part);
  if (c->attention_bias) add_key(add(layer, true, "bo", "[D]"), p, "self_attn.o_proj.bias", d, 0);
  add_key(add(layer, true, "mlp_norm", "[D]"), p, "post_attention_layernorm.weight", d, 0);
  w = add(layer, true, "wgate_up", "[F2, D]");
  add_key(w, p, "mlp.gate_proj.weight", f, d);
  add_key(w, p, "mlp.up_proj.weight", f, d);
  if (split) take_rows(w, -1, tp->rank * f_part, f_part);
  if (c->mlp_bias) {
    w = add(layer, true, "bgate_up", "[F2]");
    add_key(w, p, "mlp.gate_proj.bias", f, 0);
    add_key(w, p, "mlp.up_proj.bias", f, 0);
    if (split) take_rows(w, -1, tp->rank * f_part, f_part);
  }
  w = add(layer, true, "wdown", "[D, F]");
  add_key(w, p, "mlp.down_proj.weight", d, f);
  if (split) take_cols(w, -1, tp->rank * f_part, f_part);
  if (c->mlp_bias) add_key(add(layer, true, "bdown", "[D]"), p, "mlp.down_proj.bias", d, 0);
}

/* GPT-2's Conv1D weights are stored [in, out]: each is read transposed into linear's
 * [out, in]. c_attn holds q, k and v side by side ([D, 3D]): one linear, then a split; under
 * tensor parallelism each rank reads its heads' columns of q, of k and of v (still one GEMM),
 * and the row-split c_proj weights their input rows. */
static void gpt2(const cli_hf_config *c, const cli_hf_tp *tp, const char *prefix,
                 cli_hf_weights *out) {
  bool tied = c->tied, split = tp->world > 1;
  weight_list top = {out->top, &out->num_top}, layer = {out->layer, &out->num_layer};
  int64_t d = c->hidden, f = c->intermediate;
  int64_t part = tp->heads * c->head_dim, f_part = tp->intermediate;
  char wte[64];
  snprintf(wte, sizeof wte, "%swte.weight", prefix);
  add_key(add(top, false, "wte", "[V, D]"), "", wte, c->vocab, d);
  add_key(add(top, false, "wpe", "[P, D]"), prefix, "wpe.weight", c->max_positions, d);
  add_key(add(top, false, "final_norm", "[D]"), prefix, "ln_f.weight", d, 0);
  add_key(add(top, false, "final_norm_bias", "[D]"), prefix, "ln_f.bias", d, 0);
  out->embedding = "wte";
  out->lm_head = tied ? "wte" : "lm_head";
  if (split)
    split_lm_head(top, tp, tied ? wte : "lm_head.weight", c->vocab, d, out);
  else if (!tied)
    add_key(add(top, false, "lm_head", "[V, D]"), "", "lm_head.weight", c->vocab, d);

  char p[64];
  snprintf(p, sizeof p, "%sh.{i}.", prefix);
  add_key(add(layer, true, "attn_norm", "[D]"), p, "ln_1.weight", d, 0);
  add_key(add(layer, true, "attn_norm_bias", "[D]"), p, "ln_1.bias", d, 0);
  cli_hf_weight *w;
  /* Under tensor parallelism c_attn is read three times, each its own columns: this rank's
   * heads of q, of k and of v, one after the other as without it. */
  w = add(layer, true, "wqkv", "[QKV, D]");
  for (int i = 0; i < (split ? 3 : 1); i++) {
    add_key(w, p, "attn.c_attn.weight", d, 3 * d);
    if (split) take_cols(w, i, i * d + tp->rank * part, part);
  }
  w->transpose = true;
  w = add(layer, true, "bqkv", "[QKV]");
  for (int i = 0; i < (split ? 3 : 1); i++) {
    add_key(w, p, "attn.c_attn.bias", 3 * d, 0);
    if (split) take_rows(w, i, i * d + tp->rank * part, part);
  }
  w = add(layer, true, "wo", "[D, Q]");
  add_key(w, p, "attn.c_proj.weight", d, d);
  if (split) take_rows(w, -1, tp->rank * part, part);
  w->transpose = true;
  add_key(add(layer, true, "bo", "[D]"), p, "attn.c_proj.bias", d, 0);
  add_key(add(layer, true, "mlp_norm", "[D]"), p, "ln_2.weight", d, 0);
  add_key(add(layer, true, "mlp_norm_bias", "[D]"), p, "ln_2.bias", d, 0);
  w = add(layer, true, "wfc", "[F, D]");
  add_key(w, p, "mlp.c_fc.weight", d, f);
  if (split) take_cols(w, -1, tp->rank * f_part, f_part);
  w->transpose = true;
  w = add(layer, true, "bfc", "[F]");
  add_key(w, p, "mlp.c_fc.bias", f, 0);
  if (split) take_rows(w, -1, tp->rank * f_part, f_part);
  w = add(layer, true, "wdown", "[D, F]");
  add_key(w, p, "mlp.c_proj.weight", f, d);
  if (split) take_rows(w, -1, tp->rank * f_part, f_part);
  w->transpose = true;
  add_key(add(layer, true, "bdown", "[D]"), p, "mlp.c_proj.bias", d, 0);
}

static bool fail(char *err, size_t err_size, const char *fmt, ...) RECAP__PRINTF(3, 4);
static bool fail(char *err, size_t err_size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, err_size, fmt, ap);
  va_end(ap);
  return false;
}

static void shape_text(const int64_t *shape, int ndim, char *buf, size_t size) {
  int n = snprintf(buf, size, "[");
  for (int i = 0; i < ndim && n > 0 && (size_t)n < size; i++)
    n += snprintf(buf + n, size - (size_t)n, "%s%" PRId64, i ? ", " : "", shape[i]);
  if (n > 0 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, "]");
}

/* `key` with "{i}" replaced by the layer index. */
static void expand(const char *key, int64_t layer, char *out, size_t size) {
  const char *at = strstr(key, "{i}");
  if (!at) {
    snprintf(out, size, "%s", key);
    return;
  }
  snprintf(out, size, "%.*s%" PRId64 "%s", (int)(at - key), key, layer, at + 3);
}

/* Key k of w at layer `layer` in the checkpoint: present, float, the expected shape; marked in
 * `read` (one flag per checkpoint tensor). */
static bool check_key(const recap__checkpoint *ckpt, cli_hf_weight *w, int k, int64_t layer,
                      recap_dtype dtype, bool *read, char *err, size_t err_size) {
  char key[CLI_HF_KEY_SIZE + 24], expected[64], found[64];
  expand(w->keys[k], layer, key, sizeof key);
  shape_text(w->key_shape[k], w->key_ndim[k], expected, sizeof expected);
  const recap__checkpoint_tensor *t = recap__checkpoint_find(ckpt, key);
  if (!t) /* in which file: the only one, else the checkpoint's shards */
    return fail(err, err_size, "tensor '%s' is missing from %s%s (expected shape %s)", key,
                ckpt->num_files == 1 ? ckpt->files[0].path : ckpt->path,
                ckpt->num_files == 1 ? "" : " (none of its shards has it)", expected);
  read[t - ckpt->tensors] = true;
  const recap__safetensors_entry *e = t->entry;
  const char *file = ckpt->files[t->file].path;
  if (e->dtype != RECAP_DTYPE_F32 && e->dtype != RECAP_DTYPE_F16 && e->dtype != RECAP_DTYPE_BF16)
    return fail(err, err_size,
                "tensor '%s' in %s has dtype %s, not a float dtype recap reads "
                "(F32, F16, BF16)",
                key, file, e->dtype_name);
  bool same = e->ndim == w->key_ndim[k];
  for (int i = 0; same && i < e->ndim; i++) same = e->shape[i] == w->key_shape[k][i];
  if (!same) {
    shape_text(e->shape, e->ndim < RECAP_MAX_DIMS ? e->ndim : RECAP_MAX_DIMS, found, sizeof found);
    return fail(err, err_size, "tensor '%s' in %s has shape %s, expected %s", key, file, found,
                expected);
  }
  if (e->dtype != (int)dtype) w->cast = true;
  return true;
}

static bool check_all(const cli_hf_config *c, const recap__checkpoint *ckpt, cli_hf_weight *list,
                      size_t count, recap_dtype dtype, bool *read, char *err, size_t err_size) {
  for (size_t i = 0; i < count; i++) {
    cli_hf_weight *w = &list[i];
    for (int64_t layer = 0; layer < (w->per_layer ? c->layers : 1); layer++)
      for (int k = 0; k < w->num_keys; k++)
        if (!check_key(ckpt, w, k, layer, dtype, read, err, err_size)) return false;
  }
  return true;
}

/* Whether an unread checkpoint tensor is one transformers also leaves unread: buffers older
 * checkpoints saved (RoPE's inv_freq, GPT-2's causal masks), or a tied model's LM head (its
 * own note says so). */
static bool expected_unread(const cli_hf_config *c, const char *name) {
  static const char *const buffers[] = {"rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias"};
  const size_t len = strlen(name);
  for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) {
    const size_t n = strlen(buffers[i]);
    if (len >= n && strcmp(name + len - n, buffers[i]) == 0) return true;
  }
  return c->tied && strcmp(name, "lm_head.weight") == 0;
}

/* A note for the checkpoint tensors the model reads none of (as transformers warns of unused
 * weights): a config.json with fewer layers than the checkpoint, or of another model, would
 * otherwise import without a word. */
static void note_unread(const cli_hf_config *c, const recap__checkpoint *ckpt, const bool *read,
                        recap__text *notes) {
  size_t unread = 0;
  const char *first = NULL;
  for (size_t i = 0; i < ckpt->num_tensors; i++) {
    const char *name = ckpt->tensors[i].entry->name;
    if (read[i] || expected_unread(c, name)) continue;
    if (!first) first = name;
    unread++;
  }
  if (!unread) return;
  char text[512];
  snprintf(text, sizeof text,
           "note: the checkpoint holds %zu tensor%s the model does not read ('%.200s'%s): does "
           "config.json describe this checkpoint (num_hidden_layers %lld)?\n",
           unread, unread == 1 ? "" : "s", first, unread == 1 ? "" : ", ...", (long long)c->layers);
  recap__text_put(notes, text);
}

bool cli_hf_weights_find(const cli_hf_config *c, const recap__checkpoint *ckpt, recap_dtype dtype,
                         const cli_hf_tp *tp, cli_hf_weights *out, recap__text *notes, char *err,
                         size_t err_size) {
  *out = (cli_hf_weights){0};
  if (ckpt && c->tied && recap__checkpoint_find(ckpt, "lm_head.weight"))
    recap__text_put(notes,
                    "note: tie_word_embeddings is true: lm_head.weight in the checkpoint is "
                    "ignored, the LM head is the token embedding\n");
  if (c->arch->gpt2) {
    /* GPT2LMHeadModel saves its body under "transformer."; a bare GPT2Model does not. */
    bool prefixed = !ckpt || recap__checkpoint_find(ckpt, "transformer.wte.weight") != NULL;
    gpt2(c, tp, prefixed ? "transformer." : "", out);
  } else {
    llama_style(c, tp, out);
  }
  if (!ckpt) return true; /* random weights: nothing to check */
  bool *read = calloc(ckpt->num_tensors ? ckpt->num_tensors : 1, sizeof *read);
  if (!read) return fail(err, err_size, "out of memory checking the checkpoint's tensors");
  const bool ok = check_all(c, ckpt, out->top, out->num_top, dtype, read, err, err_size) &&
                  check_all(c, ckpt, out->layer, out->num_layer, dtype, read, err, err_size);
  if (ok) note_unread(c, ckpt, read, notes);
  free(read);
  return ok;
}

/* a + b, UINT64_MAX where it would wrap (as cli_hf_size_mul). */
static uint64_t sat_add(uint64_t a, uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The elements w reads (its rows or columns only, when it takes a range). */
static uint64_t numel(const cli_hf_weight *w) {
  uint64_t n = 0;
  for (int k = 0; k < w->num_keys; k++) {
    bool two = w->key_ndim[k] == 2;
    int64_t first = w->has_rows ? w->rows[k][1] - w->rows[k][0] : w->key_shape[k][0];
    int64_t last = two ? w->key_shape[k][1] : first;
    if (w->has_cols) last = w->cols[k][1] - w->cols[k][0];
    n = sat_add(n, two ? cli_hf_size_mul((uint64_t)first, (uint64_t)last)
                       : (uint64_t)(w->has_cols ? last : first));
  }
  return n;
}

uint64_t cli_hf_weights_bytes(const cli_hf_config *c, const cli_hf_weights *w, recap_dtype dtype) {
  uint64_t elements = 0;
  for (size_t i = 0; i < w->num_top; i++) elements = sat_add(elements, numel(&w->top[i]));
  for (size_t i = 0; i < w->num_layer; i++)
    elements = sat_add(elements, cli_hf_size_mul(numel(&w->layer[i]), (uint64_t)c->layers));
  return cli_hf_size_mul(elements, recap_dtype_size(dtype));
}
