/*
 * hf_import.h: a Hugging Face checkpoint folder (config.json + safetensors) as a recap spec
 * (`recap import-hf`, docs/MODELS.md). A library of the CLI's so that the model tests
 * (tests/pipeline_models_test.c) import exactly what the command does.
 *
 *   cli_hf_import_options o = {.model_dir = "models/llama", .spec_path = "llama.yaml"};
 *   cli_hf_import_result r;
 *   if (!cli_hf_import(&o, &r)) fprintf(stderr, "%s\n", r.error);
 *   else ... write r.spec to o.spec_path; r.notes, r.kv_bytes_per_sequence ...
 *   cli_hf_import_result_free(&r);
 *
 * Nothing is written: the caller writes r.spec where spec_path says (the checkpoint is named
 * relative to that file's folder).
 */
#ifndef RECAP_CLI_HF_IMPORT_H
#define RECAP_CLI_HF_IMPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/recap.h"

enum { CLI_HF_MAX_BATCHES = 64 };

typedef struct {
  const char *model_dir; /* holds config.json and model.safetensors or its index */
  /* Where the spec will be written: its `checkpoint:` is model_dir relative to this file's
   * folder (absolute when they share no root). NULL: model_dir as given. */
  const char *spec_path;
  int64_t max_seq;        /* KV cache rows per sequence; 0: min(the config's, 4096) */
  int64_t prefill;        /* tokens per prefill step; 0: min(128, max_seq) */
  const int64_t *batches; /* ascending batch buckets; NULL: {1} */
  size_t num_batches;
  bool dtype_given; /* else the config's dtype, else the checkpoint's embedding's */
  recap_dtype dtype;
  /* The serving layout (paged KV pool, packed steps, sampling in the graph); batches are then
   * the decode entry's token buckets. */
  bool paged;
  int64_t block_size;            /* rows per KV block; 0: 16 */
  int64_t kv_blocks;             /* blocks per layer's pool; 0: every slot at max_seq */
  const int64_t *prefill_tokens; /* the prefill entry's token buckets; NULL: {prefill} */
  size_t num_prefill_tokens;
  int64_t prefill_seqs; /* sequences per prefill step; 0: min(8, smallest prefill bucket) */
  /* Tensor parallelism (docs/MULTI_GPU.md): the spec of rank tp_rank of tp ranks, which reads
   * only its share of the weights and gathers the logits; 0 or 1: the whole model. */
  int64_t tp, tp_rank;
  /* With tp: rank 0 adds the residual stream into its partial sum before each row-parallel
   * all_reduce (the fusion pass folds that add into the projection's epilogue), so no add
   * follows the all_reduce: two kernels fewer per layer and rank. In 16-bit dtypes the sum is
   * then rounded at the residual's scale twice instead of once. */
  bool tp_fold_residual;
  /* Only config.json is read: the weights come from recap's random init (benchmarks at a
   * model's shape without its checkpoint). */
  bool random_weights;
} cli_hf_import_options;

typedef struct {
  char *spec; /* the YAML (malloc'd) */
  char architecture[64];
  recap_dtype dtype;
  int64_t max_seq, prefill, max_batch, layers;
  uint64_t param_bytes;           /* every weight in the spec's dtype (this rank's, with tp) */
  uint64_t kv_bytes_per_sequence; /* K and V of every layer for max_seq tokens (this rank's) */
  int64_t block_size, kv_blocks;  /* the serving layout's pool (0 otherwise) */
  int64_t prefill_seqs;           /* the serving layout's sequences per prefill step */
  int64_t tp;                     /* ranks the model is split over (1: not split) */
  char notes[1024];               /* lines for the user ("note: ..."), may be empty */
  char error[1024];               /* why cli_hf_import failed */
  /* The failure is in the options' values, against each other or the defaults they leave
   * (--prefill above --max-seq, --kv-blocks below one sequence): the CLI's usage error. False
   * for what the model or the checkpoint refuses (an architecture's limit, a missing tensor). */
  bool bad_options;
} cli_hf_import_result;

/* Reads the config and the checkpoint's headers, checks every tensor the spec will read and
 * writes the spec's text into r. False with r->error naming the cause (and r->bad_options set
 * when the options are what is wrong). */
bool cli_hf_import(const cli_hf_import_options *o, cli_hf_import_result *r);
void cli_hf_import_result_free(cli_hf_import_result *r);

#endif
