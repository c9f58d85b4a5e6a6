/* generate.c: `recap generate SPEC --prompt-ids 1,2,3 --max-new N`: greedy decoding of one
 * sequence with an imported model's `prefill` and `decode` entries over one set of KV caches
 * (docs/MODELS.md, "The spec"). A small driver to try a model, not a serving loop: the prefill
 * pipeline is built for the prompt's length (its S), the decode pipeline shares its weights
 * and caches, and each step takes the argmax of the last row's logits. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static const char *const CMD = "generate";
enum { MAX_PROMPT = 65536 };

static void usage(void) {
  printf(
      "usage: recap generate SPEC --prompt-ids 1,2,3 [--max-new N] [--device cuda|host]\n"
      "                      [--base-dir DIR] [--logits-out FILE]\n\n"
      "Greedy decoding of one sequence with a spec from `recap import-hf` (entries prefill\n"
      "and decode; inputs ids, positions; scalars pos, len; output logits): the prompt in one\n"
      "prefill step, then --max-new tokens (default 16) one at a time through decode, which\n"
      "shares the prefill pipeline's weights and KV caches. Prints the new token ids and the\n"
      "time of each phase. The prompt and the new tokens must fit the spec's Smax.\n\n"
      "  --prompt-ids LIST   the prompt's token ids, comma-separated\n"
      "  --max-new N         tokens to generate (default 16)\n"
      "  --device DEVICE     cuda or host (default cuda, else the host with a note)\n"
      "  --base-dir DIR      files the spec names must lie under DIR\n"
      "  --logits-out FILE   write the logits of every position run, little-endian f32 rows\n"
      "                      of the vocabulary size: the prompt's rows, then one per decode\n"
      "                      step (prompt + N - 1 rows)\n\n"
      "exit status: 0 ok, 1 on a failure, 2 on a usage error.\n");
}

/* The prompt's ids, comma-separated, into a new array (the caller frees it). */
static bool parse_ids(const char *text, int32_t **ids, int *count) {
  long long *values = malloc(sizeof(long long) * MAX_PROMPT);
  *ids = malloc(sizeof(int32_t) * MAX_PROMPT);
  size_t n = 0;
  bool ok =
      values && *ids &&
      cli_parse_int_list(CMD, "--prompt-ids", text, 0, INT32_MAX, values, MAX_PROMPT, &n, "1,2,3");
  for (size_t i = 0; ok && i < n; ++i) (*ids)[i] = (int32_t)values[i];
  *count = (int)n;
  free(values);
  return ok;
}

/* One sequence's step: `count` ids at positions first .. first + count - 1; the last row's
 * argmax into *next. A bucketed spec takes one row of its batch; others are batch 1. */
static recap_status step(recap_pipeline *p, const int32_t *ids, int first, int count,
                         float *row_logits, int64_t vocab, int32_t *next, FILE *logits_out) {
  recap_pipeline_info info;
  recap_status st = recap_pipeline_info_get(p, &info);
  int64_t rows = info.bucket_dim ? 1 : 0;
  int32_t *positions = malloc(sizeof(int32_t) * (size_t)count);
  float *logits = malloc(sizeof(float) * (size_t)count * (size_t)vocab);
  int32_t pos = first, len = first + count;
  if (!positions || !logits) st = RECAP_STATUS_OUT_OF_MEMORY;
  for (int i = 0; st == RECAP_OK && i < count; i++) positions[i] = first + i;
  if (st == RECAP_OK) st = recap_pipeline_copy_in(p, "ids", ids, sizeof(int32_t) * count, rows);
  if (st == RECAP_OK)
    st = recap_pipeline_copy_in(p, "positions", positions, sizeof(int32_t) * count, 0);
  if (st == RECAP_OK) st = recap_pipeline_copy_in(p, "pos", &pos, sizeof pos, 0);
  if (st == RECAP_OK) st = recap_pipeline_copy_in(p, "len", &len, sizeof len, 0);
  if (st == RECAP_OK) st = recap_pipeline_run(p, rows);
  if (st == RECAP_OK)
    st = recap_pipeline_copy_out(p, "logits", logits, sizeof(float) * count * (size_t)vocab, rows);
  if (st == RECAP_OK && logits_out &&
      fwrite(logits, sizeof(float) * (size_t)vocab, (size_t)count, logits_out) != (size_t)count) {
    fprintf(stderr, "recap %s: cannot write the logits: %s\n", CMD, strerror(errno));
    st = RECAP_STATUS_IO_ERROR;
  }
  if (st == RECAP_OK) {
    memcpy(row_logits, &logits[(size_t)(count - 1) * (size_t)vocab], sizeof(float) * vocab);
    int32_t best = 0;
    for (int64_t v = 1; v < vocab; v++)
      if (row_logits[v] > row_logits[best]) best = (int32_t)v;
    *next = best;
  }
  free(positions);
  free(logits);
  return st;
}

int cli_generate_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    usage();
    return CLI_EXIT_OK;
  }
  const char *path = NULL, *ids_text = NULL, *device = NULL, *base_dir = NULL, *v = NULL;
  const char *logits_path = NULL;
  long long max_new = 16;
  for (int i = 0; i < argc; i++) {
    int m;
    if ((m = cli_flag(CMD, argc, argv, &i, "--prompt-ids", &ids_text)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--device", &device)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--base-dir", &base_dir)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--logits-out", &logits_path)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--max-new", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--max-new", v, 1, MAX_PROMPT, &max_new))
        return CLI_EXIT_USAGE;
    } else if (!cli_take_one(CMD, "spec", argv[i], &path)) {
      return CLI_EXIT_USAGE;
    }
  }
  if (!path || !ids_text) {
    fprintf(stderr, "recap %s: usage: recap generate SPEC --prompt-ids 1,2,3 (see --help)\n", CMD);
    return CLI_EXIT_USAGE;
  }
  int32_t *tokens = NULL;
  int prompt = 0;
  if (!parse_ids(ids_text, &tokens, &prompt)) {
    free(tokens);
    return CLI_EXIT_USAGE;
  }
  int rc = CLI_EXIT_FAILURE;
  recap_pipeline *prefill = NULL, *decode = NULL;
  FILE *logits_out = NULL;
  if (logits_path && !(logits_out = fopen(logits_path, "wb"))) {
    fprintf(stderr, "recap %s: cannot write %s: %s\n", CMD, logits_path, strerror(errno));
    free(tokens);
    return CLI_EXIT_FAILURE;
  }
  float *row = NULL;
  int32_t *all = realloc(tokens, sizeof(int32_t) * (size_t)(prompt + max_new + 1));
  if (!all) goto done;
  tokens = all;
  recap_pipeline_options po = {.entry = "prefill", .base_dir = base_dir, .override_device = 1};
  if (!cli_pick_device(CMD, device, RECAP_BACKEND_CUDA, &po.device)) goto done;
  char prompt_dim[32];
  snprintf(prompt_dim, sizeof prompt_dim, "S=%d", prompt);
  const char *dims[] = {prompt_dim, NULL};
  po.dims = dims;
  recap_status st = recap_pipeline_create_file(path, &po, &prefill);
  if (st != RECAP_OK) {
    cli_report_failure(CMD, "the prefill pipeline", st);
    goto done;
  }
  recap_pipeline_options dopt = {.entry = "decode", .base_dir = base_dir, .share = prefill};
  if ((st = recap_pipeline_create_file(path, &dopt, &decode)) != RECAP_OK) {
    cli_report_failure(CMD, "the decode pipeline", st);
    goto done;
  }
  recap_tensor logits;
  if ((st = recap_pipeline_tensor(decode, "logits", &logits)) != RECAP_OK || logits.ndim != 3 ||
      logits.dtype != RECAP_DTYPE_F32) {
    fprintf(stderr, "recap %s: %s has no f32 output 'logits' [B, S, V] (see recap import-hf)\n",
            CMD, path);
    goto done;
  }
  int64_t vocab = logits.shape[2];
  if (!(row = malloc(sizeof(float) * (size_t)vocab))) goto done;
  double t0 = cli_now();
  if ((st = step(prefill, tokens, 0, prompt, row, vocab, &tokens[prompt], logits_out)) !=
      RECAP_OK) {
    cli_report_failure(CMD, "the prompt", st);
    goto done;
  }
  double t1 = cli_now();
  for (int t = prompt; t < prompt + max_new - 1; t++)
    if ((st = step(decode, &tokens[t], t, 1, row, vocab, &tokens[t + 1], logits_out)) != RECAP_OK) {
      cli_report_failure(CMD, "a decode step", st);
      goto done;
    }
  double t2 = cli_now();
  printf("generated:");
  for (int t = prompt; t < prompt + max_new; t++) printf(" %" PRId32, tokens[t]);
  printf(
      "\nprefill: %d tokens in %.3f ms (includes capture); decode: %lld steps, %.3f ms each "
      "(the first includes capture)\n",
      prompt, (t1 - t0) * 1e3, max_new > 1 ? max_new - 1 : 0,
      max_new > 1 ? (t2 - t1) * 1e3 / (double)(max_new - 1) : 0.0);
  rc = CLI_EXIT_OK;
done:
  if (logits_out && fclose(logits_out) != 0 && rc == CLI_EXIT_OK) {
    fprintf(stderr, "recap %s: cannot write %s: %s\n", CMD, logits_path, strerror(errno));
    rc = CLI_EXIT_FAILURE;
  }
  free(row);
  free(tokens);
  recap_pipeline_destroy(decode);
  recap_pipeline_destroy(prefill);
  return rc;
}
