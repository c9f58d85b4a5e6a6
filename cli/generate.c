/* generate.c: `recap generate SPEC --prompt-ids 1,2,3`: one request through an imported model.
 *
 * A paged serving spec (`recap import-hf --paged`) runs through the generation API
 * (recap_generator_*: continuous batching on an engine thread, sampling on the device), with
 * every sampling option and the time to the first token and per token after it. A spec of the
 * contiguous layout runs the small greedy driver below: the prompt in one prefill step (a
 * prefill pipeline built for its length), then one decode step per token over the same
 * weights and KV caches, the argmax of each last row. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/tensors.h"

static const char *const CMD = "generate";
enum { MAX_PROMPT = 65536 };

static const cli_option generate_options[] = {
    {.flag = "--prompt-ids",
     .value = "LIST",
     .kind = CLI_VALUE_TEXT,
     .help = "the prompt's token ids, comma-separated, or @FILE: read from FILE (commas or "
             "whitespace between them), for prompts longer than one argument holds"},
    {.flag = "--max-tokens",
     .alias = "--max-new",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "tokens to generate (default 16)"},
    {.flag = "--temperature",
     .value = "T",
     .kind = CLI_VALUE_TEXT,
     .help = "0 (default): greedy; else sample at this temperature"},
    {.flag = "--top-k",
     .value = "K",
     .kind = CLI_VALUE_TEXT,
     .help = "with --temperature: keep the K most likely tokens (default 0: all)"},
    {.flag = "--top-p",
     .value = "P",
     .kind = CLI_VALUE_TEXT,
     .help = "with --temperature: keep the most likely tokens up to mass P, in\n"
             "(0, 1] (default 1)"},
    {.flag = "--min-p",
     .value = "M",
     .kind = CLI_VALUE_TEXT,
     .help = "with --temperature: keep tokens of probability >= M x the largest\n"
             "(default 0: all)"},
    {.flag = "--seed",
     .value = "S",
     .kind = CLI_VALUE_TEXT,
     .help = "the sampling seed (default: drawn afresh each run, and printed)"},
    {.flag = "--stop-ids",
     .value = "LIST",
     .kind = CLI_VALUE_TEXT,
     .help = "ids in the vocabulary that end the request (the stop id is printed as\n"
             "the last)"},
    {.flag = "--device",
     .value = "DEVICE",
     .kind = CLI_VALUE_WORDS,
     .words = "cuda host",
     .help = "cuda or host (default cuda, else the host with a note)"},
    {.flag = "--base-dir",
     .value = "DIR",
     .kind = CLI_VALUE_DIR,
     .help = "files the spec names must lie under DIR"},
    {.flag = "--json",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "write the tokens, seed, finish reason and times as JSON (- for\n"
             "stdout: the text then goes to stderr; tpot_ms null with one token),\n"
             "with the request as given and the GPU, driver, CUDA, cuBLAS and\n"
             "recap versions"},
    {.flag = "--logits-out",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "contiguous layout only: the logits of every position run,\n"
             "little-endian f32 rows of the vocabulary size: the prompt's rows,\n"
             "then one per decode step (prompt + N - 1 rows)"},
    {0}};
const cli_help cli_generate_help = {
    .synopsis =
        "recap generate SPEC --prompt-ids 1,2,3 [--max-tokens N] [--temperature T]\n"
        "               [--top-k K] [--top-p P] [--min-p M] [--seed S] [--stop-ids LIST]\n"
        "               [--device cuda|host] [--base-dir DIR] [--json FILE]\n"
        "               [--logits-out FILE]",
    .description =
        "Runs one request of token ids through a spec from `recap import-hf` and prints the new\n"
        "token ids, the time to the first one and the time per token after it. A paged serving\n"
        "spec (import-hf --paged) runs through the generation API with any sampling; a spec of\n"
        "the contiguous layout decodes greedily (the sampling flags, --seed, --stop-ids and\n"
        "--json need --paged). Either refuses before running an id outside the vocabulary or a\n"
        "prompt plus --max-tokens past the spec's maximum sequence (it counts the prompt and\n"
        "every new token). Token ids in and out: recap has no tokenizer.",
    .operand = CLI_VALUE_SPEC,
    .groups = {{.options = generate_options},
               {.heading =
                    "One rank of a tensor-parallel model (import-hf --tp N; recap launch\n"
                    "--gpus N -- generate m.rank{rank}.yaml ... starts every rank): greedy,\n"
                    "each step through recap_pipeline_run_dist; --prompt-ids, --max-tokens,\n"
                    "--device, --base-dir, --logits-out apply",
                .options = cli_generate_dist_options}},
};

typedef struct {
  const char *path, *device, *base_dir, *logits_path, *json_path;
  int32_t *prompt;
  int prompt_len;
  long long max_tokens;
  double temperature, top_p, min_p;
  long long top_k;
  bool has_seed, sampling;
  uint64_t seed;
  int32_t stop_ids[RECAP_MAX_STOP_IDS];
  int num_stop_ids;
} generate_args;

/* The prompt's ids, comma-separated, into a new array (the caller frees it). */
/* The text of --prompt-ids @FILE with the whitespace between ids made commas (Linux holds at
 * most 128 KiB in one argument: about 20,000 five-digit ids); NULL with the reason on stderr. */
static char *read_ids_file(const char *path) {
  /* MAX_PROMPT ids of ten digits and a separator each, and room for a final newline. */
  enum { MAX_BYTES = MAX_PROMPT * 11 + 2 };
  FILE *f = fopen(path, "rb");
  char *text = f ? malloc(MAX_BYTES + 1) : NULL;
  size_t n = text ? fread(text, 1, MAX_BYTES + 1, f) : 0;
  const bool failed = !f || !text || ferror(f);
  const int error = errno;
  if (f) fclose(f);
  if (failed || n > MAX_BYTES) {
    if (failed)
      fprintf(stderr, "recap %s: --prompt-ids @%s: cannot read it: %s\n", CMD, path,
              strerror(text || !f ? error : ENOMEM));
    else
      fprintf(stderr, "recap %s: --prompt-ids @%s: more than %d bytes (%d ids at most)\n", CMD,
              path, MAX_BYTES, MAX_PROMPT);
    free(text);
    return NULL;
  }
  /* Runs of whitespace become one comma; none is left at either end. */
  size_t w = 0;
  bool gap = false;
  for (size_t i = 0; i < n; i++) {
    const bool space = text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r';
    if (space) {
      gap = w > 0;
      continue;
    }
    if (gap && text[i] != ',' && text[w - 1] != ',') text[w++] = ',';
    gap = false;
    text[w++] = text[i];
  }
  text[w] = '\0';
  return text;
}

static bool parse_ids(const char *text, int32_t **ids, int *count) {
  char *from_file = text[0] == '@' ? read_ids_file(text + 1) : NULL;
  if (text[0] == '@' && !from_file) return false;
  long long *values = malloc(sizeof(long long) * MAX_PROMPT);
  *ids = malloc(sizeof(int32_t) * MAX_PROMPT);
  size_t n = 0;
  bool ok = values && *ids &&
            cli_parse_int_list(CMD, "--prompt-ids", from_file ? from_file : text, 0, INT32_MAX,
                               values, MAX_PROMPT, &n, "1,2,3");
  free(from_file);
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

static int parse_args(int argc, char **argv, generate_args *a) {
  *a = (generate_args){.max_tokens = 16};
  const char *ids_text = NULL, *v = NULL;
  for (int i = 0; i < argc; i++) {
    int m;
    if ((m = cli_flag(CMD, argc, argv, &i, "--prompt-ids", &ids_text)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--device", &a->device)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--base-dir", &a->base_dir)) != 0 ||
        (m = cli_json_flag(CMD, argc, argv, &i, &a->json_path)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--logits-out", &a->logits_path)) != 0) {
      if (m < 0 || !cli_output_writable(CMD, a->logits_path)) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--max-tokens", &v)) != 0 ||
               (m = cli_flag(CMD, argc, argv, &i, "--max-new", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--max-tokens", v, 1, MAX_PROMPT, &a->max_tokens))
        return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--temperature", &v)) != 0) {
      if (m < 0 || !cli_parse_number(CMD, "--temperature", v, 0, 1e6, &a->temperature))
        return CLI_EXIT_USAGE;
      /* 0 is the default, greedy decoding, which every layout does. */
      if (a->temperature > 0) a->sampling = true;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--top-p", &v)) != 0) {
      if (m < 0 || !cli_parse_number(CMD, "--top-p", v, 1e-9, 1, &a->top_p)) return CLI_EXIT_USAGE;
      a->sampling = true;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--min-p", &v)) != 0) {
      if (m < 0 || !cli_parse_number(CMD, "--min-p", v, 0, 1, &a->min_p)) return CLI_EXIT_USAGE;
      a->sampling = true;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--top-k", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--top-k", v, 0, INT32_MAX, &a->top_k))
        return CLI_EXIT_USAGE;
      a->sampling = true;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--seed", &v)) != 0) {
      if (m < 0 || !cli_parse_u64(CMD, "--seed", v, &a->seed)) return CLI_EXIT_USAGE;
      a->has_seed = a->sampling = true;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--stop-ids", &v)) != 0) {
      long long ids[RECAP_MAX_STOP_IDS];
      size_t count = 0;
      if (m < 0 || !cli_parse_int_list(CMD, "--stop-ids", v, 0, INT32_MAX, ids, RECAP_MAX_STOP_IDS,
                                       &count, "2,128001"))
        return CLI_EXIT_USAGE;
      for (size_t k = 0; k < count; k++) a->stop_ids[k] = (int32_t)ids[k];
      a->num_stop_ids = (int)count;
      a->sampling = true;
    } else if (strcmp(argv[i], "--mode") == 0) {
      fprintf(stderr, "recap %s: --mode goes with --world N (a tensor-parallel run)\n", CMD);
      return CLI_EXIT_USAGE;
    } else if (!cli_take_one(CMD, "spec", argv[i], &a->path)) {
      return CLI_EXIT_USAGE;
    }
  }
  if (!a->path || !ids_text) {
    fprintf(stderr, "recap %s: usage: recap generate SPEC --prompt-ids 1,2,3 (see --help)\n", CMD);
    return CLI_EXIT_USAGE;
  }
  if (!cli_device_flag_ok(CMD, a->device)) return CLI_EXIT_USAGE;
  if (!cli_output_spares(CMD, "--json", a->json_path, a->path) ||
      !cli_output_spares(CMD, "--logits-out", a->logits_path, a->path))
    return CLI_EXIT_USAGE;
  if (!parse_ids(ids_text, &a->prompt, &a->prompt_len)) return CLI_EXIT_USAGE;
  /* A filter narrows the distribution a sampled token is drawn from; at temperature 0 the
   * token is the argmax, which every filter keeps, so the flag would change nothing. A user
   * who asked for top-k expects sampling from the top k: an error says how to get it, where a
   * note would scroll past and a silent greedy run would look like a broken sampler. */
  const char *filter = a->top_k > 0                   ? "--top-k"
                       : a->top_p > 0 && a->top_p < 1 ? "--top-p"
                       : a->min_p > 0                 ? "--min-p"
                                                      : NULL;
  if (filter && a->temperature == 0) {
    fprintf(stderr,
            "recap %s: %s filters the tokens a sample is drawn from: give --temperature T > 0 "
            "with it (at temperature 0, the default, decoding is greedy and it would change "
            "nothing)\n",
            CMD, filter);
    return CLI_EXIT_USAGE;
  }
  return CLI_EXIT_OK;
}

/* The request the flags describe (callbacks and the seed left to run_paged). */
static recap_request request_of(const generate_args *a) {
  return (recap_request){.struct_size = sizeof(recap_request),
                         .prompt = a->prompt,
                         .prompt_len = (size_t)a->prompt_len,
                         .max_new_tokens = (int)a->max_tokens,
                         .temperature = (float)a->temperature,
                         .top_p = (float)a->top_p,
                         .min_p = (float)a->min_p,
                         .top_k = (int)a->top_k,
                         .stop_ids = a->stop_ids,
                         .num_stop_ids = a->num_stop_ids};
}

/* What the engine thread records of the request: each token's arrival time. */
typedef struct {
  double *arrival; /* cli_now() of token i */
  size_t count, capacity;
} token_times;

static void on_token(void *user, uint64_t id, int32_t token, recap_request_state state) {
  (void)id;
  (void)state;
  token_times *t = user;
  if (token >= 0 && t->count < t->capacity) t->arrival[t->count++] = cli_now();
}

static const char *finish_name(recap_finish_reason f) {
  switch (f) {
    case RECAP_FINISH_MAX_TOKENS:
      return "max_tokens";
    case RECAP_FINISH_STOP:
      return "stop";
    case RECAP_FINISH_LENGTH:
      return "length";
    default:
      return "none";
  }
}

static bool write_json(const generate_args *a, recap_device device, const int32_t *tokens,
                       const recap_request_status *st, double ttft_ms, double tpot_ms) {
  json_t *ids = json_array();
  for (size_t i = 0; i < st->num_tokens; i++) json_array_append_new(ids, json_integer(tokens[i]));
  json_t *root = json_pack("{so so ss sf so sI}", "tokens", ids, "seed", cli_seed_json(st->seed),
                           "finish", finish_name(st->finish), "ttft_ms", ttft_ms, "tpot_ms",
                           isnan(tpot_ms) ? json_null() : json_real(tpot_ms), "preemptions",
                           (json_int_t)st->preemptions);
  /* The request as given (the seed above is the one used, given or drawn), so that the file
   * says what it answers and the run can be repeated. */
  json_t *prompt = json_array(), *stops = json_array();
  for (int i = 0; i < a->prompt_len; i++) json_array_append_new(prompt, json_integer(a->prompt[i]));
  for (int i = 0; i < a->num_stop_ids; i++)
    json_array_append_new(stops, json_integer(a->stop_ids[i]));
  json_t *request =
      json_pack("{ss so sI sf sI sf sf so}", "spec", a->path, "prompt", prompt, "max_tokens",
                (json_int_t)a->max_tokens, "temperature", a->temperature, "top_k",
                (json_int_t)a->top_k, "top_p", a->top_p, "min_p", a->min_p, "stop_ids", stops);
  bool ok = root && request && json_object_set_new(root, "request", request) == 0;
  if (!root) json_decref(request);
  if (!ok)
    fprintf(stderr, "recap %s: out of memory writing the JSON report\n", CMD);
  else
    ok = cli_write_json(CMD, root, device, a->json_path);
  json_decref(root);
  return ok;
}

/* One request through the generation API. */
static int run_paged(const generate_args *a) {
  recap_generator_options go = {
      .struct_size = sizeof go, .base_dir = a->base_dir, .override_device = 1};
  if (!cli_pick_device(CMD, a->device, RECAP_BACKEND_CUDA, &go.device)) return CLI_EXIT_USAGE;
  recap_generator *g = NULL;
  recap_status st = recap_generator_create(a->path, &go, &g);
  if (st != RECAP_OK) {
    cli_report_failure(CMD, "the generator", st);
    return CLI_EXIT_FAILURE;
  }
  int rc = CLI_EXIT_FAILURE;
  token_times times = {.capacity = (size_t)a->max_tokens};
  int32_t *tokens = malloc(sizeof *tokens * (size_t)a->max_tokens);
  times.arrival = malloc(sizeof *times.arrival * (size_t)a->max_tokens);
  recap_request r = request_of(a);
  r.on_token = on_token;
  r.user = &times;
  /* A seed of our own, fresh each run, as `recap run` draws one: the generator's own draws
   * start from the device generator's fixed default seed, so every run without --seed would
   * sample alike. The seed is printed, and --seed S repeats the run. */
  r.has_seed = 1;
  r.seed = a->has_seed ? a->seed : cli_random_seed();
  uint64_t id = 0;
  recap_request_status status;
  double submitted = cli_now();
  if (!tokens || !times.arrival) goto done;
  if ((st = recap_generator_submit(g, &r, &id, NULL)) != RECAP_OK) {
    cli_report_failure(CMD, "the request", st);
    goto done;
  }
  if ((st = recap_generator_wait(g, id, -1.0)) != RECAP_OK ||
      (st = recap_generator_poll(g, id, tokens, (size_t)a->max_tokens, &status)) != RECAP_OK) {
    cli_report_failure(CMD, "the request", st);
    goto done;
  }
  if (status.state != RECAP_REQUEST_FINISHED) {
    fprintf(stderr, "recap %s: the request ended without finishing: %s\n", CMD,
            recap_status_string(status.error));
    goto done;
  }
  double ttft_ms = times.count ? (times.arrival[0] - submitted) * 1e3 : 0;
  /* Per token after the first: NAN (JSON null, "no token after it") when there was none. */
  double tpot_ms = times.count > 1 ? (times.arrival[times.count - 1] - times.arrival[0]) * 1e3 /
                                         (double)(times.count - 1)
                                   : NAN;
  printf("generated:");
  for (size_t i = 0; i < status.num_tokens; i++) printf(" %" PRId32, tokens[i]);
  printf("\nseed %" PRIu64
         ", finished by %s; first token %.3f ms after submit (prefill, "
         "capture done before), ",
         status.seed, finish_name(status.finish), ttft_ms);
  if (isnan(tpot_ms))
    printf("no token after it\n");
  else
    printf("then %.3f ms per token\n", tpot_ms);
  rc = a->json_path && !write_json(a, go.device, tokens, &status, ttft_ms, tpot_ms)
           ? CLI_EXIT_FAILURE
           : CLI_EXIT_OK;
done:
  recap_generator_destroy(g);
  free(tokens);
  free(times.arrival);
  return rc;
}

/* The contiguous layout: greedy, one prefill step then one decode step per token. */
static int run_contiguous(const generate_args *a) {
  int prompt = a->prompt_len;
  long long max_new = a->max_tokens;
  int rc = CLI_EXIT_FAILURE;
  recap_pipeline *prefill = NULL, *decode = NULL;
  FILE *logits_out = NULL;
  if (a->logits_path && !(logits_out = fopen(a->logits_path, "wb"))) {
    fprintf(stderr, "recap %s: cannot write %s: %s\n", CMD, a->logits_path, strerror(errno));
    return CLI_EXIT_FAILURE;
  }
  float *row = NULL;
  int32_t *tokens = malloc(sizeof(int32_t) * (size_t)(prompt + max_new + 1));
  if (!tokens) goto done;
  memcpy(tokens, a->prompt, sizeof(int32_t) * (size_t)prompt);
  recap_pipeline_options po = {
      .struct_size = sizeof po, .entry = "prefill", .base_dir = a->base_dir, .override_device = 1};
  if (!cli_pick_device(CMD, a->device, RECAP_BACKEND_CUDA, &po.device)) goto done;
  char prompt_dim[32];
  snprintf(prompt_dim, sizeof prompt_dim, "S=%d", prompt);
  const char *dims[] = {prompt_dim, NULL};
  po.dims = dims;
  recap_status st = recap_pipeline_create_file(a->path, &po, &prefill);
  if (st != RECAP_OK) {
    cli_report_failure(CMD, "the prefill pipeline", st);
    goto done;
  }
  recap_pipeline_options dopt = {
      .struct_size = sizeof dopt, .entry = "decode", .base_dir = a->base_dir, .share = prefill};
  if ((st = recap_pipeline_create_file(a->path, &dopt, &decode)) != RECAP_OK) {
    cli_report_failure(CMD, "the decode pipeline", st);
    goto done;
  }
  recap_tensor logits;
  if ((st = recap_pipeline_tensor(decode, "logits", &logits)) != RECAP_OK || logits.ndim != 3 ||
      logits.dtype != RECAP_DTYPE_F32) {
    fprintf(stderr, "recap %s: %s has no f32 output 'logits' [B, S, V] (see recap import-hf)\n",
            CMD, a->path);
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
  printf("\nprefill: %d %s in %.3f ms (includes capture); ", prompt,
         cli_plural(prompt, "token", "tokens"), (t1 - t0) * 1e3);
  long long steps = max_new - 1;
  if (steps == 0)
    printf("decode: no steps (the one token is the prefill's)\n");
  else if (steps == 1)
    printf("decode: 1 step, %.3f ms (includes capture)\n", (t2 - t1) * 1e3);
  else
    printf("decode: %lld steps, %.3f ms each (the first includes capture)\n", steps,
           (t2 - t1) * 1e3 / (double)steps);
  rc = CLI_EXIT_OK;
done:
  if (logits_out && fclose(logits_out) != 0 && rc == CLI_EXIT_OK) {
    fprintf(stderr, "recap %s: cannot write %s: %s\n", CMD, a->logits_path, strerror(errno));
    rc = CLI_EXIT_FAILURE;
  }
  free(row);
  free(tokens);
  recap_pipeline_destroy(decode);
  recap_pipeline_destroy(prefill);
  return rc;
}

int cli_generate_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_generate_help);
    return CLI_EXIT_OK;
  }
  if (cli_dist_requested(argc, argv)) return cli_generate_dist_main(argc, argv);
  generate_args a;
  int rc = parse_args(argc, argv, &a);
  cli_serving_shape shape = {0};
  if (rc == CLI_EXIT_OK) rc = cli_read_serving_shape(CMD, a.path, a.base_dir, a.device, &shape);
  bool paged = shape.paged;
  if (rc == CLI_EXIT_OK && paged && a.logits_path) {
    fprintf(stderr, "recap %s: --logits-out is for specs of the contiguous layout\n", CMD);
    rc = CLI_EXIT_FAILURE; /* a spec of the wrong layout, as in serve-bench and bench-decode */
  }
  if (rc == CLI_EXIT_OK && !paged && (a.sampling || a.json_path)) {
    fprintf(stderr,
            "recap %s: %s is a spec of the contiguous layout, which decodes greedily: sampling, "
            "--seed, --stop-ids and --json need a paged serving spec (recap import-hf --paged)\n",
            CMD, a.path);
    rc = CLI_EXIT_FAILURE;
  }
  /* Both layouts refuse what the model cannot run before running anything, with the
   * generator's own check and words: an id past the vocabulary or a sequence past the caches
   * would otherwise fail mid-run in a kernel (the contiguous layout), its tokens lost. */
  if (rc == CLI_EXIT_OK && shape.vocab > 0) {
    recap_request r = request_of(&a);
    if (recap_request_check(&r, shape.vocab, shape.max_seq) != RECAP_OK) {
      fprintf(stderr, "recap %s: %s\n", CMD, recap_last_error());
      rc = CLI_EXIT_USAGE;
    }
  }
  if (rc == CLI_EXIT_OK) rc = paged ? run_paged(&a) : run_contiguous(&a);
  free(a.prompt);
  return rc;
}
