/*
 * hf_model.h: a Hugging Face causal language model as `recap import-hf` sees it (internal to
 * the importer, cli/hf_*.c).
 *
 * Three steps, one file each, joined by cli/hf_import.c:
 *   hf_config.c   config.json -> cli_hf_config (the architecture, sizes, RoPE, what is refused)
 *   hf_weights.c  cli_hf_config + the checkpoint -> the weights the spec reads, each checked
 *                 against the checkpoint (present, a float dtype, the expected shape)
 *   hf_spec.c     cli_hf_config + weights -> the spec's YAML
 * and, for tensor parallelism (--tp N), hf_tp.c: what one rank of N holds (cli_hf_tp).
 * Every failure writes one message naming its cause (the key, the file, what was expected)
 * into the caller's buffer and returns false.
 */
#ifndef RECAP_CLI_HF_MODEL_H
#define RECAP_CLI_HF_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/checkpoint.h"
#include "include/recap.h"
#include "runtime/text.h"

/* What an architecture's layers are made of (the table in hf_config.c). */
typedef struct {
  const char *architecture; /* config.json's "architectures"[0], e.g. "LlamaForCausalLM" */
  /* GPT-2: learned positions (wpe), LayerNorm with bias, Conv1D weights stored [in, out],
   * q, k and v in one c_attn, a plain MLP; otherwise a Llama-style decoder (RMSNorm, RoPE,
   * separate q/k/v projections, gated MLP). */
  bool gpt2;
  bool qkv_bias;                  /* q, k and v projections always have biases (Qwen2) */
  bool qk_norm;                   /* per-head RMSNorm of q and k before RoPE (Qwen3) */
  bool tied_default;              /* tie_word_embeddings when the config does not say */
  int64_t head_dim_default;       /* head_dim when the config has none; 0: hidden / heads */
  bool sliding_window_key;        /* a non-null sliding_window alone means it is used (Mistral) */
  int64_t sliding_window_default; /* the window of a config without the key; 0: none */
} cli_hf_arch;

typedef struct {
  const cli_hf_arch *arch;
  char path[4096]; /* config.json's, for messages */
  char name[64];   /* model_type, reduced to [A-Za-z0-9_.-] (the spec's name) */
  int64_t hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, max_positions;
  double norm_eps;
  bool tied;              /* the LM head is the token embedding */
  bool attention_bias;    /* q, k, v and o projections have biases (Llama, Qwen3's config) */
  bool mlp_bias;          /* gate, up and down projections have biases (Llama's config) */
  const char *act;        /* the MLP's activation as recap names it: silu, gelu_tanh, gelu, relu */
  double attention_scale; /* 0: 1 / sqrt(head_dim); GPT-2 without scale_attn_weights: 1 */
  /* RoPE (not GPT-2) */
  double rope_theta;
  bool llama3;
  double llama3_factor, llama3_low_freq_factor, llama3_high_freq_factor;
  int64_t llama3_original_max_positions;
  /* Sliding-window attention the config turns on (checked against the spec's max sequence
   * length by cli_hf_check_window: a window at least that long is full attention). */
  bool sliding_used;
  const char *sliding_reason; /* which config key turns it on */
  int64_t sliding_window;     /* -1: null */
  /* The config's dtype or torch_dtype, when recap has it; else the name it gave, if any (an
   * fp8 or integer quantization, float64), which the importer reports in a note. */
  bool dtype_given;
  recap_dtype dtype;
  char dtype_unused[32];
} cli_hf_config;

/* A config.json larger than this is refused before it is read. */
enum { CLI_HF_MAX_CONFIG_BYTES = 16 << 20 };
/* The most layers a config may have: a spec repeats a block at most this many times. */
enum { CLI_HF_MAX_LAYERS = 4096 };
/* Reads DIR/config.json. False with a message in err. */
bool cli_hf_config_read(const char *dir, cli_hf_config *out, char *err, size_t err_size);
/* The same from `len` bytes of JSON (untrusted; the fuzz target's entry point); `path` names
 * it in messages. */
bool cli_hf_config_parse(const char *text, size_t len, const char *path, cli_hf_config *out,
                         char *err, size_t err_size);
/* Refuses a sliding window shorter than max_seq (recap's attention has no window). */
bool cli_hf_check_window(const cli_hf_config *c, int64_t max_seq, char *err, size_t err_size);

/* One rank's share of a model split over `world` ranks (Megatron-style tensor parallelism,
 * docs/MULTI_GPU.md): attention heads and KV heads, the MLP's intermediate size and the LM
 * head's vocabulary rows. A world of 1 holds everything. */
typedef struct {
  int64_t world, rank;
  int64_t heads, kv_heads; /* this rank's: heads / world, kv_heads / world */
  int64_t intermediate;    /* intermediate / world */
  /* The vocabulary padded to a multiple of world: every rank computes vocab_rows logits, of
   * which the first vocab_real are rows vocab_begin .. of the LM head and the rest (the last
   * rank's padding) are dropped once the logits are gathered. */
  int64_t vocab_rows, vocab_begin, vocab_real;
} cli_hf_tp;

/* rank's share of c over world ranks. False with a message when a split rule fails: heads,
 * KV heads (fewer KV heads than ranks are refused, not replicated) and the intermediate size
 * must divide by world, and every rank must hold some of the vocabulary. */
bool cli_hf_tp_split(const cli_hf_config *c, int64_t world, int64_t rank, cli_hf_tp *out, char *err,
                     size_t err_size);

enum { CLI_HF_MAX_KEYS = 3, CLI_HF_MAX_WEIGHTS = 24, CLI_HF_KEY_SIZE = 160 };

/* One param of the spec, read from the checkpoint: its keys are concatenated along axis 0
 * (after the transpose, for GPT-2's Conv1D). */
typedef struct {
  char name[32];  /* the spec's tensor name (a block's tensor when per_layer) */
  char shape[48]; /* the spec's shape, in dim names: "[QKV, D]" */
  bool per_layer; /* the keys hold "{i}", the layer index */
  int num_keys;
  char keys[CLI_HF_MAX_KEYS][CLI_HF_KEY_SIZE];
  int key_ndim[CLI_HF_MAX_KEYS];
  int64_t key_shape[CLI_HF_MAX_KEYS][2]; /* each key's shape in the file */
  bool transpose;                        /* the file holds [in, out] (Conv1D) */
  /* Tensor parallelism: only rows [rows[k][0], rows[k][1]) of key k's first axis, or columns
   * [cols[k][0], cols[k][1]) of its last (the spec's `rows:` / `cols:`, one range for every key
   * when all keys have the same, else one per key). */
  bool has_rows, has_cols;
  int64_t rows[CLI_HF_MAX_KEYS][2], cols[CLI_HF_MAX_KEYS][2];
  bool cast; /* the file's dtype is not the spec's (hf_weights.c) */
} cli_hf_weight;

typedef struct {
  cli_hf_weight top[CLI_HF_MAX_WEIGHTS]; /* embeddings, final norm, LM head */
  size_t num_top;
  cli_hf_weight layer[CLI_HF_MAX_WEIGHTS]; /* one layer's, keys with "{i}" */
  size_t num_layer;
  const char *embedding; /* the token embedding's spec name */
  const char *lm_head;   /* the LM head's spec name: the embedding's when tied (and one rank's
                          * slice of its own, "lm_head", under tensor parallelism) */
} cli_hf_weights;

/* The weights the spec reads, with their keys and expected file shapes, each checked in the
 * checkpoint for every layer: present, a float dtype, that shape; cast set where the file's
 * dtype is not `dtype`. ckpt NULL: the lists only, nothing checked (random weights). Under
 * tensor parallelism (tp->world > 1) the split weights read only
 * tp->rank's rows or columns. With tied embeddings a present lm_head.weight is ignored and a line
 * saying so is appended to notes. False with a message naming the key, the file and the
 * expected shape. */
bool cli_hf_weights_find(const cli_hf_config *c, const recap__checkpoint *ckpt, recap_dtype dtype,
                         const cli_hf_tp *tp, cli_hf_weights *out, recap__text *notes, char *err,
                         size_t err_size);
/* a * b, UINT64_MAX where it would wrap: a config's sizes are each at most 2^31 - 1, but their
 * products over layers and vocabularies need not fit, and a size that does not is refused
 * against a limit, never printed wrapped. */
static inline uint64_t cli_hf_size_mul(uint64_t a, uint64_t b) {
  uint64_t p;
  return __builtin_mul_overflow(a, b, &p) ? UINT64_MAX : p;
}
/* Bytes the weights take in `dtype` (every layer's; UINT64_MAX when the true count does not
 * fit). */
uint64_t cli_hf_weights_bytes(const cli_hf_config *c, const cli_hf_weights *w, recap_dtype dtype);

/* What the spec is built for. */
typedef struct {
  const char *checkpoint; /* the spec's checkpoint: value, relative to the spec's folder */
  const char *source;     /* the model folder as the user gave it (the spec's comment) */
  recap_dtype dtype;
  const int64_t *batches; /* ascending; more than one makes B bucketed */
  size_t num_batches;
  int64_t max_seq, prefill;
  /* The serving layout (docs/MODELS.md, "Paged serving specs"): T tokens per step packed from
   * Bs sequences, per-sequence metadata `seqs`, a paged KV pool of kv_blocks blocks of
   * block_size rows, sampling and decode_advance in the graph. Then `batches` are the decode
   * entry's token buckets, `prefill_tokens` the prefill entry's, and prefill_seqs its Bs. */
  bool paged;
  int64_t block_size, kv_blocks, prefill_seqs;
  const int64_t *prefill_tokens;
  size_t num_prefill_tokens;
  const cli_hf_tp *tp;   /* this rank's share; world 1: the whole model */
  bool tp_fold_residual; /* cli_hf_import_options' */
  /* Weights from recap's own random init instead of the checkpoint (checkpoint unused):
   * matrices normal(0, 0.02), norm weights ones, biases zeros. For benchmarks. */
  bool random_weights;
} cli_hf_spec_options;

/* Appends the spec's YAML to out. False when out ran out of memory. */
bool cli_hf_spec_write(const cli_hf_config *c, const cli_hf_weights *w,
                       const cli_hf_spec_options *o, recap__text *out);

#endif
