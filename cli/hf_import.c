/* hf_import.c: config -> checked weights -> spec (hf_model.h's three steps), with the choices
 * the options leave open: dtype, max sequence length, prefill length, batch buckets. */
#include "cli/hf_import.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/hf_model.h"

enum {
  DEFAULT_MAX_SEQ = 4096,
  DEFAULT_PREFILL = 128,
  DEFAULT_BLOCK_SIZE = 16,
  DEFAULT_PREFILL_SEQS = 8
};

static bool fail(cli_hf_import_result *r, const char *fmt, ...) RECAP__PRINTF(2, 3);
static bool fail(cli_hf_import_result *r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->error, sizeof r->error, fmt, ap);
  va_end(ap);
  return false;
}

/* fail() for options that contradict each other or the defaults they leave (r->bad_options):
 * the caller's format goes through as the message. */
#define fail_options(r, ...) ((r)->bad_options = true, fail((r), __VA_ARGS__))

/* `target` (a folder) as seen from the folder holding `spec_path`: relative when both resolve,
 * else absolute, else as given. */
static void checkpoint_path(const char *target, const char *spec_path, char *out, size_t size) {
  char from[PATH_MAX], to[PATH_MAX], folder[PATH_MAX];
  snprintf(out, size, "%s", target);
  if (!realpath(target, to)) return;
  snprintf(out, size, "%s", to);
  if (!spec_path) return;
  snprintf(folder, sizeof folder, "%s", spec_path);
  char *slash = strrchr(folder, '/');
  if (slash == folder)
    folder[1] = '\0';
  else if (slash)
    *slash = '\0';
  else
    snprintf(folder, sizeof folder, ".");
  if (!realpath(folder, from) || strcmp(from, "/") == 0) return;
  /* The longest common run of whole components, then one ".." per component of `from` left. */
  size_t common = 0;
  for (size_t i = 0;; i++) {
    bool end_from = from[i] == '\0' || from[i] == '/', end_to = to[i] == '\0' || to[i] == '/';
    if (end_from && end_to) common = i;
    if (from[i] != to[i] || from[i] == '\0') break;
  }
  char relative[PATH_MAX] = "";
  size_t n = 0;
  for (const char *p = from + common; *p; p++)
    if (*p == '/') n += (size_t)snprintf(relative + n, sizeof relative - n, "../");
  const char *rest = to + common + (to[common] == '/');
  if (n + strlen(rest) + 2 > sizeof relative) return; /* absolute, then */
  if (*rest)
    strcat(relative, rest);
  else if (n)
    relative[n - 1] = '\0'; /* "../.." rather than "../../" */
  else
    strcat(relative, ".");
  snprintf(out, size, "%s", relative);
}

/* The spec's dtype: the option, else the config's, else the token embedding's in the file. */
static recap_dtype pick_dtype(const cli_hf_import_options *o, const cli_hf_config *c,
                              const recap__checkpoint *ckpt) {
  if (o->dtype_given) return o->dtype;
  if (c->dtype_given) return c->dtype;
  if (!ckpt) return RECAP_DTYPE_F32;
  const char *keys[] = {"model.embed_tokens.weight", "transformer.wte.weight", "wte.weight"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    const recap__checkpoint_tensor *t = recap__checkpoint_find(ckpt, keys[i]);
    if (t && (t->entry->dtype == RECAP_DTYPE_F16 || t->entry->dtype == RECAP_DTYPE_BF16))
      return (recap_dtype)t->entry->dtype;
  }
  return RECAP_DTYPE_F32;
}

/* Whether every size is positive and each larger than the one before. */
static bool positive_ascending(const int64_t *sizes, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (sizes[i] < 1 || (i > 0 && sizes[i] <= sizes[i - 1])) return false;
  return true;
}

/* What the options say about themselves, before any file is read: the bucket lists. */
static bool check_lists(const cli_hf_import_options *o, cli_hf_import_result *r) {
  if (o->num_batches > CLI_HF_MAX_BATCHES)
    return fail_options(r, "at most %d batch sizes", CLI_HF_MAX_BATCHES);
  if (!positive_ascending(o->batches, o->num_batches))
    return fail_options(r, "--batch: batch sizes must be positive and ascending (1,2,4,8)");
  if (!o->paged && o->num_prefill_tokens > 1)
    return fail_options(r,
                        "several --prefill sizes go with --paged (the contiguous layout has "
                        "one prefill step of S tokens)");
  if (o->num_prefill_tokens > CLI_HF_MAX_BATCHES)
    return fail_options(r, "at most %d prefill sizes", CLI_HF_MAX_BATCHES);
  if (!positive_ascending(o->prefill_tokens, o->num_prefill_tokens))
    return fail_options(r, "--prefill: prefill sizes must be positive and ascending (64,256)");
  return true;
}

static bool pick_sizes(const cli_hf_import_options *o, const cli_hf_config *c,
                       cli_hf_import_result *r, recap__text *notes) {
  r->max_seq = o->max_seq
                   ? o->max_seq
                   : (c->max_positions < DEFAULT_MAX_SEQ ? c->max_positions : DEFAULT_MAX_SEQ);
  if (r->max_seq < 1) return fail_options(r, "--max-seq must be positive");
  if (r->max_seq > c->max_positions) {
    /* Learned positions end with their table; RoPE goes on, untrained. */
    if (c->arch->gpt2)
      return fail(r,
                  "--max-seq %" PRId64 " is above n_positions %" PRId64 " (GPT-2's position table)",
                  r->max_seq, c->max_positions);
    recap__text_put(notes,
                    "note: --max-seq %" PRId64 " is above max_position_embeddings %" PRId64
                    ": the model was not trained at those positions\n",
                    r->max_seq, c->max_positions);
  }
  r->prefill =
      o->prefill ? o->prefill : (r->max_seq < DEFAULT_PREFILL ? r->max_seq : DEFAULT_PREFILL);
  if (o->paged && o->num_prefill_tokens) r->prefill = o->prefill_tokens[o->num_prefill_tokens - 1];
  if (r->prefill < 1 || r->prefill > r->max_seq)
    return fail_options(r, "--prefill %" PRId64 " must be from 1 to --max-seq (%" PRId64 ")",
                        r->prefill, r->max_seq);
  r->max_batch = o->num_batches ? o->batches[o->num_batches - 1] : 1;
  if (!o->paged) return true;
  int64_t smallest = o->num_prefill_tokens ? o->prefill_tokens[0] : r->prefill;
  r->block_size = o->block_size ? o->block_size : DEFAULT_BLOCK_SIZE;
  if (r->block_size < 1 || r->block_size > r->max_seq)
    return fail_options(r,
                        "--block-size %" PRId64 "%s must be from 1 to --max-seq (%" PRId64
                        "): give a smaller --block-size or a larger --max-seq",
                        r->block_size, o->block_size ? "" : " (the default)", r->max_seq);
  int64_t blocks_per_seq = (r->max_seq + r->block_size - 1) / r->block_size;
  r->kv_blocks = o->kv_blocks ? o->kv_blocks : r->max_batch * blocks_per_seq;
  /* The generator refuses a pool that cannot hold one sequence of the maximum length. */
  if (r->kv_blocks < blocks_per_seq)
    return fail_options(r,
                        "--kv-blocks %" PRId64 " cannot hold one sequence of --max-seq %" PRId64
                        ": the minimum is %" PRId64 " blocks of %" PRId64 " rows",
                        r->kv_blocks, r->max_seq, blocks_per_seq, r->block_size);
  r->prefill_seqs = o->prefill_seqs
                        ? o->prefill_seqs
                        : (smallest < DEFAULT_PREFILL_SEQS ? smallest : DEFAULT_PREFILL_SEQS);
  /* decode_advance gives each sequence of a step one slot of ids. */
  if (r->prefill_seqs < 1 || r->prefill_seqs > smallest)
    return fail_options(
        r, "--prefill-seqs %" PRId64 " must be from 1 to the smallest prefill size (%" PRId64 ")",
        r->prefill_seqs, smallest);
  return true;
}

static bool import(const cli_hf_import_options *o, const cli_hf_config *c,
                   const recap__checkpoint *ckpt, cli_hf_import_result *r, recap__text *notes,
                   recap__text *spec) {
  snprintf(r->architecture, sizeof r->architecture, "%s", c->arch->architecture);
  r->dtype = pick_dtype(o, c, ckpt);
  if (c->dtype_unused[0] && !o->dtype_given)
    recap__text_put(notes,
                    "note: config.json's dtype '%s' is not one recap computes in (float32, "
                    "float16, bfloat16): the spec takes the checkpoint's (--dtype chooses)\n",
                    c->dtype_unused);
  r->layers = c->layers;
  if (!pick_sizes(o, c, r, notes) || !cli_hf_check_window(c, r->max_seq, r->error, sizeof r->error))
    return false;
  cli_hf_tp tp;
  r->tp = o->tp > 1 ? o->tp : 1;
  if (!cli_hf_tp_split(c, r->tp, o->tp_rank, &tp, r->error, sizeof r->error)) return false;
  cli_hf_weights w;
  if (!cli_hf_weights_find(c, ckpt, r->dtype, &tp, &w, notes, r->error, sizeof r->error))
    return false;
  r->param_bytes = cli_hf_weights_bytes(c, &w, r->dtype);
  /* A tensor of the spec may hold at most 2^56 bytes (the loader's limit): a model whose
   * weights or one sequence's KV cache reach it is a wrong config, refused before the spec. */
  const uint64_t factors[] = {(uint64_t)c->layers, (uint64_t)r->max_seq, (uint64_t)tp.kv_heads,
                              (uint64_t)c->head_dim, recap_dtype_size(r->dtype)};
  uint64_t kv = 2;
  for (size_t i = 0; i < sizeof factors / sizeof factors[0]; i++)
    kv = cli_hf_size_mul(kv, factors[i]);
  const uint64_t limit = (uint64_t)1 << 56;
  if (r->param_bytes >= limit || kv >= limit)
    return fail(r,
                "the config's sizes give more than 2^56 bytes of %s, more than a spec's tensors "
                "hold",
                r->param_bytes >= limit ? "weights" : "KV cache per sequence of max-seq tokens");
  r->kv_bytes_per_sequence = kv;
  char path[PATH_MAX];
  checkpoint_path(o->model_dir, o->spec_path, path, sizeof path);
  for (const char *p = path; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      return fail(r, "the model folder's path has a control character");
  static const int64_t one = 1;
  cli_hf_spec_options so = {
      .checkpoint = path,
      .dtype = r->dtype,
      .batches = o->num_batches ? o->batches : &one,
      .num_batches = o->num_batches ? o->num_batches : 1,
      .max_seq = r->max_seq,
      .prefill = r->prefill,
      .paged = o->paged,
      .block_size = r->block_size,
      .kv_blocks = r->kv_blocks,
      .prefill_seqs = r->prefill_seqs,
      .prefill_tokens = o->num_prefill_tokens ? o->prefill_tokens : &r->prefill,
      .num_prefill_tokens = o->num_prefill_tokens ? o->num_prefill_tokens : 1,
      .tp = &tp,
      .tp_fold_residual = o->tp_fold_residual,
      .random_weights = o->random_weights};
  if (!cli_hf_spec_write(c, &w, &so, spec)) return fail(r, "out of memory");
  return true;
}

bool cli_hf_import(const cli_hf_import_options *o, cli_hf_import_result *r) {
  *r = (cli_hf_import_result){0};
  if (!check_lists(o, r)) return false;
  cli_hf_config c;
  if (!cli_hf_config_read(o->model_dir, &c, r->error, sizeof r->error)) return false;
  recap__checkpoint *ckpt = NULL;
  if (!o->random_weights && recap__checkpoint_open(o->model_dir, &ckpt) != RECAP_OK)
    return fail(r, "%s", recap_last_error());
  recap__text notes = {0}, spec = {0};
  bool ok = import(o, &c, ckpt, r, &notes, &spec);
  recap__checkpoint_destroy(ckpt);
  if (ok && notes.failed) ok = fail(r, "out of memory");
  if (ok && notes.data) snprintf(r->notes, sizeof r->notes, "%s", notes.data);
  free(notes.data);
  if (ok)
    r->spec = spec.data;
  else
    free(spec.data);
  return ok;
}

void cli_hf_import_result_free(cli_hf_import_result *r) {
  free(r->spec);
  r->spec = NULL;
}
