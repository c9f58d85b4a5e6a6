/* hf_tp.c: the split rules of `recap import-hf --tp N` (docs/MULTI_GPU.md, "Tensor-parallel
 * models"): what one rank of N holds, or why the model cannot be split that way. */
#include <inttypes.h>
#include <stdio.h>

#include "cli/hf_model.h"

/* The largest world: recap launch's rank limit. */
enum { MAX_WORLD = 64 };

bool cli_hf_tp_split(const cli_hf_config *c, int64_t world, int64_t rank, cli_hf_tp *out, char *err,
                     size_t err_size) {
  if (world < 1 || world > MAX_WORLD || rank < 0 || rank >= world) {
    snprintf(err, err_size, "--tp %" PRId64 " with rank %" PRId64 ": expected 1 to %d ranks", world,
             rank, MAX_WORLD);
    return false;
  }
  const char *heads_key = c->arch->gpt2 ? "n_head" : "num_attention_heads";
  const char *inner_key = c->arch->gpt2 ? "n_inner" : "intermediate_size";
  if (c->heads % world) {
    snprintf(err, err_size,
             "--tp %" PRId64 ": %s %" PRId64 " is not divisible by %" PRId64
             " (attention is split by heads)",
             world, heads_key, c->heads, world);
    return false;
  }
  /* Fewer KV heads than ranks would need each KV head replicated on world / kv_heads ranks
   * (and its cache with it); refused rather than done silently at that memory cost. */
  if (c->kv_heads % world) {
    snprintf(err, err_size,
             "--tp %" PRId64 ": num_key_value_heads %" PRId64 " is not divisible by %" PRId64
             " (the KV cache is split by KV heads; fewer KV heads than ranks are not "
             "replicated)",
             world, c->kv_heads, world);
    return false;
  }
  if (c->intermediate % world) {
    snprintf(err, err_size,
             "--tp %" PRId64 ": %s %" PRId64 " is not divisible by %" PRId64
             " (the MLP is split by its intermediate size)",
             world, inner_key, c->intermediate, world);
    return false;
  }
  int64_t rows = (c->vocab + world - 1) / world;
  /* Only the last rank may hold padding: the gathered logits' first vocab columns are then the
   * vocabulary in order. */
  if (rows * (world - 1) >= c->vocab) {
    snprintf(err, err_size,
             "--tp %" PRId64 ": vocab_size %" PRId64
             " is too small to give every rank a share of the LM head",
             world, c->vocab);
    return false;
  }
  int64_t begin = rows * rank, end = begin + rows < c->vocab ? begin + rows : c->vocab;
  *out = (cli_hf_tp){.world = world,
                     .rank = rank,
                     .heads = c->heads / world,
                     .kv_heads = c->kv_heads / world,
                     .intermediate = c->intermediate / world,
                     .vocab_rows = rows,
                     .vocab_begin = begin,
                     .vocab_real = end - begin};
  return true;
}
