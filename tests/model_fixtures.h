/*
 * model_fixtures.h: the tiny Hugging Face checkpoints of tests/data/models/ and transformers'
 * outputs for them (expected.json, made by tests/models/make_fixtures.py), shared by the tests
 * that import them (pipeline_models_test.c: the contiguous layout, one sequence at a time;
 * pipeline_serving_test.c: the paged serving layout, many sequences per step). Each test
 * works in a temporary folder g_dir (make_dir / remove_dir) on copies of a fixture, since a
 * checkpoint's files must lie in its folder and the runfiles are links.
 */
#ifndef RECAP_TESTS_MODEL_FIXTURES_H
#define RECAP_TESTS_MODEL_FIXTURES_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/hf_import.h"
#include "tests/test_util.h"

static const char *const MODELS[] = {"llama", "llama_tied", "mistral", "qwen2", "qwen3", "gpt2"};
enum { MAX_TOKENS = 64 };

static char g_dir[256];

static inline void make_dir(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/recap_models_test_XXXXXX");
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(g_dir));
}

static inline void remove_dir(void) {
  char cmd[320];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  CU_ASSERT_EQUAL(system(cmd), 0);
}

/* ---- the reference ---- */

typedef struct {
  int tokens[MAX_TOKENS];
  int count, prompt_length, vocab;
  double *logits; /* count x vocab */
  double margin[MAX_TOKENS];
  int argmax[MAX_TOKENS];
  double max_abs_logit, f32_error;
} reference;

static inline void load_reference(const char *name, reference *r) {
  char path[256];
  snprintf(path, sizeof path, "tests/data/models/%s/expected.json", name);
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root) fprintf(stderr, "%s: %s\n", path, err.text);
  CU_ASSERT_PTR_NOT_NULL_FATAL(root);
  json_t *tokens = json_object_get(root, "tokens"), *logits = json_object_get(root, "logits");
  *r = (reference){.count = (int)json_array_size(tokens)};
  CU_ASSERT_FATAL(r->count > 0 && r->count <= MAX_TOKENS &&
                  json_array_size(logits) == (size_t)r->count);
  r->vocab = (int)json_array_size(json_array_get(logits, 0));
  r->prompt_length = (int)json_integer_value(json_object_get(root, "prompt_length"));
  r->max_abs_logit = json_number_value(json_object_get(root, "max_abs_logit"));
  r->f32_error = json_number_value(json_object_get(root, "transformers_f32_max_error"));
  r->logits = malloc(sizeof(double) * (size_t)r->count * (size_t)r->vocab);
  CU_ASSERT_PTR_NOT_NULL_FATAL(r->logits);
  for (int t = 0; t < r->count; t++) {
    r->tokens[t] = (int)json_integer_value(json_array_get(tokens, (size_t)t));
    r->margin[t] = json_number_value(json_array_get(json_object_get(root, "margin"), (size_t)t));
    r->argmax[t] =
        (int)json_integer_value(json_array_get(json_object_get(root, "argmax"), (size_t)t));
    json_t *row = json_array_get(logits, (size_t)t);
    for (int v = 0; v < r->vocab; v++)
      r->logits[(size_t)t * (size_t)r->vocab + (size_t)v] =
          json_number_value(json_array_get(row, (size_t)v));
  }
  json_decref(root);
}

/* ---- importing ---- */

/* Imports model_dir into spec_path with the options in `o` (zeros: the importer's defaults;
 * its model_dir and spec_path are set here). Returns the KV cache's bytes per sequence of the
 * maximum length, as the importer prints them. */
static inline uint64_t import_model_with(cli_hf_import_options o, const char *model_dir,
                                         const char *spec_path) {
  o.model_dir = model_dir;
  o.spec_path = spec_path;
  cli_hf_import_result r;
  bool ok = cli_hf_import(&o, &r);
  if (!ok) fprintf(stderr, "\n  import %s: %s\n", model_dir, r.error);
  CU_ASSERT_FATAL(ok);
  FILE *f = fopen(spec_path, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT(fputs(r.spec, f) >= 0);
  CU_ASSERT_EQUAL(fclose(f), 0);
  uint64_t kv_bytes = r.kv_bytes_per_sequence;
  cli_hf_import_result_free(&r);
  return kv_bytes;
}

/* Imports model_dir into spec_path with the importer's defaults. */
static inline void import_model(const char *model_dir, const char *spec_path) {
  import_model_with((cli_hf_import_options){0}, model_dir, spec_path);
}

/* ---- copies of a fixture ---- */

static inline void copy_file(const char *from, const char *to) {
  char cmd[1100];
  snprintf(cmd, sizeof cmd, "cp -L '%s' '%s'", from, to);
  CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
}

/* g_dir/<name>/ with a copy of the fixture's model.safetensors and `config` (a file of the
 * fixture's folder) as config.json; the folder's path into out. */
static inline void fixture_copy(const char *model, const char *config, const char *name, char *out,
                                size_t size) {
  char from[512], to[512];
  CU_ASSERT_FATAL(snprintf(out, size, "%s/%s", g_dir, name) < (int)size);
  CU_ASSERT_EQUAL_FATAL(mkdir(out, 0755), 0);
  snprintf(from, sizeof from, "tests/data/models/%s/model.safetensors", model);
  snprintf(to, sizeof to, "%s/model.safetensors", out);
  copy_file(from, to);
  snprintf(from, sizeof from, "tests/data/models/%s/%s", model, config);
  snprintf(to, sizeof to, "%s/config.json", out);
  copy_file(from, to);
}

/* Rewrites dir/config.json changed by edit. */
static inline void fixture_edit_config(const char *dir, void (*edit)(json_t *config)) {
  char path[512];
  snprintf(path, sizeof path, "%s/config.json", dir);
  json_t *config = json_load_file(path, 0, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(config);
  edit(config);
  CU_ASSERT_EQUAL(json_dump_file(config, path, JSON_INDENT(2)), 0);
  json_decref(config);
}

/* Rewrites dir/model.safetensors with its JSON header changed by edit (the data stays). */
static inline void fixture_edit_header(const char *dir, void (*edit)(json_t *header)) {
  char path[512];
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  FILE *f = fopen(path, "rb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL_FATAL(fseek(f, 0, SEEK_END), 0);
  long size = ftell(f);
  rewind(f);
  unsigned char *bytes = malloc((size_t)size);
  CU_ASSERT_PTR_NOT_NULL_FATAL(bytes);
  CU_ASSERT_EQUAL_FATAL(fread(bytes, 1, (size_t)size, f), (size_t)size);
  fclose(f);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; i--) header_len = header_len << 8 | bytes[i];
  json_t *header = json_loadb((const char *)bytes + 8, header_len, 0, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(header);
  edit(header);
  char *text = json_dumps(header, JSON_COMPACT);
  CU_ASSERT_PTR_NOT_NULL_FATAL(text);
  size_t len = strlen(text), padded = (len + 7) / 8 * 8;
  unsigned char prefix[8];
  for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fwrite(prefix, 1, 8, f);
  fwrite(text, 1, len, f);
  for (size_t i = len; i < padded; i++) fputc(' ', f);
  fwrite(bytes + 8 + header_len, 1, (size_t)size - 8 - header_len, f);
  CU_ASSERT_EQUAL(fclose(f), 0);
  free(text);
  json_decref(header);
  free(bytes);
}

/* Import options of the paged serving layout: max_seq positions per sequence, KV blocks of
 * `block` rows, `pool` blocks per layer, prefill steps packing up to `seqs` sequences, and the
 * decode and prefill token buckets (arrays). */
#define PAGED_IMPORT_OPTIONS(max_seq_, block, pool, seqs, decode, prefill) \
  ((cli_hf_import_options){                                                \
      .max_seq = (max_seq_),                                               \
      .batches = (decode),                                                 \
      .num_batches = sizeof(decode) / sizeof(decode)[0],                   \
      .paged = true,                                                       \
      .block_size = (block),                                               \
      .kv_blocks = (pool),                                                 \
      .prefill_tokens = (prefill),                                         \
      .num_prefill_tokens = sizeof(prefill) / sizeof(prefill)[0],          \
      .prefill_seqs = (seqs),                                              \
  })

/* A copy of the fixture `model` imported with `o` (PAGED_IMPORT_OPTIONS) as
 * g_dir/<model>_paged.yaml, whose path goes into spec. Returns the bytes of one KV block (every
 * layer's K and V rows of one block). */
static inline uint64_t import_paged_fixture(const char *model, cli_hf_import_options o, char *spec,
                                            size_t size) {
  char model_dir[256];
  fixture_copy(model, "config.json", model, model_dir, sizeof model_dir);
  snprintf(spec, size, "%s/%s_paged.yaml", g_dir, model);
  uint64_t per_sequence = import_model_with(o, model_dir, spec);
  return per_sequence / (uint64_t)(o.max_seq / o.block_size);
}

#endif
