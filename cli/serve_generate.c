/* serve_generate.c: `recap serve-bench MODEL.yaml --generate`: a serving benchmark of the
 * generation API (recap_generator_*) on a paged serving spec (`recap import-hf --paged`).
 *
 * The main thread is the clients: it draws --requests synthetic requests (random token ids,
 * prompt and output lengths uniform in the given ranges, greedy, no stop ids) and submits them
 * all at once or as a Poisson process of --rate requests per second; the engine thread serves
 * them with continuous batching. The callbacks (on the engine thread) stamp each token's
 * arrival, so a request's time to first token (TTFT: submit to first token) and time per
 * output token (TPOT: first to last token over the tokens after the first) are the client's
 * view. Output tokens/s is every output token over the wall time from the first submit to the
 * last token. Also reported: the KV pool's peak use, preemptions, and graph against eager steps
 * (prefill steps above the largest bucket run eagerly). */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/svg.h"
#include "cli/tensors.h"
#include "cli/world.h"

static const char *const CMD = "serve-bench";

typedef struct {
  const char *path, *device, *base_dir, *json_path, *svg_path, *requests_path, *tokens_path;
  long long requests, prompt_min, prompt_max, output_min, output_max, max_running;
  double rate, kv_fraction;
  cli_world world; /* tensor parallelism: world.world 0 when not asked for */
  uint64_t seed;
} generate_bench_args;

/* One request's record, written by the engine thread's callback. */
typedef struct {
  double submitted, first, last;
  size_t tokens;
  int32_t *prompt, *outputs; /* outputs: --tokens-out's, output_len of them */
  int prompt_len, output_len;
  bool ended;
} request_record;

static void on_token(void *user, uint64_t id, int32_t token, recap_request_state state) {
  (void)id;
  (void)state;
  request_record *r = user;
  double now = cli_now();
  if (token < 0) {
    r->ended = true;
    return;
  }
  if (r->outputs && r->tokens < (size_t)r->output_len) r->outputs[r->tokens] = token;
  if (r->tokens++ == 0) r->first = now;
  r->last = now;
}

/* xorshift64*: the requests' lengths and ids, reproducible from --seed. */
static uint64_t next_random(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1DULL;
}

static long long uniform_int(uint64_t *s, long long lo, long long hi) {
  return lo + (long long)(next_random(s) % (uint64_t)(hi - lo + 1));
}

static json_t *summary_json(const cli_summary *s) {
  return json_pack("{sf sf sf sf}", "p50", s->median, "p99", s->p99, "p10", s->p10, "mean",
                   s->mean);
}

static int report(const generate_bench_args *a, recap_device device, request_record *recs,
                  double wall_s, const recap_generator_stats *stats) {
  const size_t peak_blocks = stats->kv_blocks_peak;
  size_t n = (size_t)a->requests, out_tokens = 0;
  double *ttft = malloc(sizeof *ttft * n), *tpot = malloc(sizeof *tpot * n);
  if (!ttft || !tpot) {
    free(ttft);
    free(tpot);
    return CLI_EXIT_FAILURE;
  }
  int with_tpot = 0;
  for (size_t i = 0; i < n; i++) {
    out_tokens += recs[i].tokens;
    ttft[i] = (recs[i].first - recs[i].submitted) * 1e3;
    if (recs[i].tokens > 1)
      tpot[with_tpot++] = (recs[i].last - recs[i].first) * 1e3 / (double)(recs[i].tokens - 1);
  }
  cli_summary t1, t2;
  cli_summarize(ttft, (int)n, &t1);
  cli_summarize(tpot, with_tpot, &t2);
  printf(
      "%lld requests (prompts %lld-%lld, outputs %lld-%lld tokens, %s): %zu output tokens in "
      "%.3f s\n",
      a->requests, a->prompt_min, a->prompt_max, a->output_min, a->output_max,
      a->rate > 0 ? "Poisson arrivals" : "all submitted at once", out_tokens, wall_s);
  printf("output tokens/s  %.1f\n", (double)out_tokens / wall_s);
  printf("TTFT ms          p50 %.3f  p99 %.3f\n", t1.median, t1.p99);
  if (with_tpot)
    printf("TPOT ms          p50 %.3f  p99 %.3f\n", t2.median, t2.p99);
  else
    printf("TPOT ms          - (no request produced a second token)\n");
  printf("KV blocks        %zu of %zu at the peak (%.1f%%), blocks of %zu %s\n", peak_blocks,
         stats->kv_blocks, 100.0 * (double)peak_blocks / (double)stats->kv_blocks,
         stats->block_size, cli_plural((long long)stats->block_size, "token", "tokens"));
  printf("preemptions      %" PRIu64 "\n", stats->preemptions);
  /* A step runs at most one prefill and one decode (a decode loop's steps one decode each),
   * and every step counted ran something: the steps that ran both are the overlap. */
  uint64_t runs = stats->prefill_steps + stats->decode_steps;
  uint64_t both = runs > stats->steps ? runs - stats->steps : 0;
  /* graph_steps counts steps run from graphs: a decode loop's launch runs many of them. */
  printf("engine steps     %" PRIu64 " (%" PRIu64 " with prefill, %" PRIu64 " with decode; %" PRIu64
         " both): %" PRIu64 " from graphs, %" PRIu64 " eager\n",
         stats->steps, stats->prefill_steps, stats->decode_steps, both, stats->graph_steps,
         stats->eager_steps);
  printf("decode loops     %" PRIu64 " %s ran %" PRIu64 " of the decode steps\n",
         stats->loop_launches, cli_plural((long long)stats->loop_launches, "launch", "launches"),
         stats->loop_steps);
  printf("start-up         %.0f ms from the weights to every bucket captured\n", stats->ready_ms);
  int rc = CLI_EXIT_OK;
  if (a->json_path) {
    json_t *root = json_pack(
        "{ss sI sf sI sf so so sI sI sI sI sI sI sI sI sI sI sI sf}", "spec", a->path, "requests",
        (json_int_t)a->requests, "wall_s", wall_s, "output_tokens", (json_int_t)out_tokens,
        "output_tokens_per_s", (double)out_tokens / wall_s, "ttft_ms", summary_json(&t1), "tpot_ms",
        with_tpot ? summary_json(&t2) : json_null(), "kv_blocks", (json_int_t)stats->kv_blocks,
        "kv_blocks_peak", (json_int_t)peak_blocks, "preemptions", (json_int_t)stats->preemptions,
        "graph_steps", (json_int_t)stats->graph_steps, "eager_steps",
        (json_int_t)stats->eager_steps, "steps", (json_int_t)stats->steps, "prefill_steps",
        (json_int_t)stats->prefill_steps, "decode_steps", (json_int_t)stats->decode_steps,
        "steps_with_both", (json_int_t)both, "loop_launches", (json_int_t)stats->loop_launches,
        "loop_steps", (json_int_t)stats->loop_steps, "ready_ms", stats->ready_ms);
    /* What the run was asked for, so that a result file can be told apart and rerun. */
    json_t *asked = json_pack("{sI s[II] s[II] sf so sI sf}", "requests", (json_int_t)a->requests,
                              "prompt_len", (json_int_t)a->prompt_min, (json_int_t)a->prompt_max,
                              "output_len", (json_int_t)a->output_min, (json_int_t)a->output_max,
                              "rate", a->rate, "seed", cli_seed_json(a->seed), "max_running",
                              (json_int_t)a->max_running, "kv_fraction", a->kv_fraction);
    if (!root) json_decref(asked);
    if (!root || !asked || json_object_set_new(root, "parameters", asked) != 0) {
      fprintf(stderr, "recap %s: out of memory writing the JSON report\n", CMD);
      rc = CLI_EXIT_FAILURE;
    } else if (!cli_write_json(CMD, root, device, a->json_path)) {
      rc = CLI_EXIT_FAILURE;
    }
    json_decref(root);
  }
  if (a->svg_path) {
    cli_bar bars[] = {{"TTFT", t1.median, t1.p10, t1.p90, "#d9534f"},
                      {"TPOT", t2.median, t2.p10, t2.p90, "#5cb85c"}};
    char subtitle[160], footer[160];
    snprintf(subtitle, sizeof subtitle, "%lld requests, %.1f output tokens/s", a->requests,
             (double)out_tokens / wall_s);
    snprintf(footer, sizeof footer, "bars: median; whiskers: p10-p90 over requests");
    cli_chart c = {
        .title = a->path, .subtitle = subtitle, .footer = footer, .bars = bars, .count = 2};
    if (!cli_svg_write_bars(a->svg_path, &c)) rc = CLI_EXIT_FAILURE;
  }
  free(ttft);
  free(tpot);
  return rc;
}

/* Submits every request (at once, or at Poisson arrivals) and waits for all of them. */
static int drive(const generate_bench_args *a, recap_generator *g, request_record *recs,
                 double *wall_s) {
  uint64_t rng = a->seed * 0x9E3779B97F4A7C15ULL + 1;
  double start = cli_now(), next_arrival = start;
  /* A low rate makes a long run that prints nothing until its end: say how long up front. */
  if (a->rate > 0 && (double)a->requests / a->rate > 10)
    fprintf(stderr,
            "recap %s: %lld requests at %g per second arrive over about %.0f s (mean); the "
            "results follow the last\n",
            CMD, a->requests, a->rate, (double)a->requests / a->rate);
  uint64_t *ids = malloc(sizeof *ids * (size_t)a->requests);
  if (!ids) return CLI_EXIT_FAILURE;
  int rc = CLI_EXIT_OK;
  for (long long i = 0; i < a->requests && rc == CLI_EXIT_OK; i++) {
    request_record *r = &recs[i];
    if (a->rate > 0) {
      double u = ((double)(next_random(&rng) >> 11) + 0.5) / 9007199254740992.0;
      next_arrival += -log(u) / a->rate;
      double wait = next_arrival - cli_now();
      if (wait > 0) {
        struct timespec ts = {(time_t)wait, (long)((wait - floor(wait)) * 1e9)};
        nanosleep(&ts, NULL);
      }
    }
    recap_request q = {.struct_size = sizeof q,
                       .prompt = r->prompt,
                       .prompt_len = (size_t)r->prompt_len,
                       .max_new_tokens = r->output_len,
                       .on_token = on_token,
                       .user = r};
    r->submitted = cli_now();
    recap_status st = recap_generator_submit(g, &q, &ids[i], NULL);
    if (st != RECAP_OK) {
      cli_report_failure(CMD, "a request", st);
      rc = CLI_EXIT_FAILURE;
    }
  }
  for (long long i = 0; i < a->requests && rc == CLI_EXIT_OK; i++) {
    recap_request_status s;
    recap_status st = recap_generator_wait(g, ids[i], -1.0);
    if (st == RECAP_OK) st = recap_generator_poll(g, ids[i], NULL, 0, &s);
    if (st == RECAP_OK && s.state != RECAP_REQUEST_FINISHED) {
      /* The engine thread logged its message; this thread's last error is not about it. */
      fprintf(stderr, "recap %s: request %lld failed: %s (the engine's message is above)\n", CMD, i,
              recap_status_string(s.error ? s.error : RECAP_STATUS_INTERNAL));
      rc = CLI_EXIT_FAILURE;
    } else if (st != RECAP_OK) {
      cli_report_failure(CMD, "a request", st);
      rc = CLI_EXIT_FAILURE;
    }
  }
  double end = start;
  for (long long i = 0; i < a->requests; i++)
    if (recs[i].last > end) end = recs[i].last;
  *wall_s = end - start;
  free(ids);
  return rc;
}

/* The request set as {"seed", "requests": [{"prompt": [ids], "max_new_tokens": n}]}: a peer
 * reads it instead of re-deriving recap's random draws, so both serve the same work. */
static bool save_requests(const generate_bench_args *a, const request_record *recs) {
  json_t *list = json_array();
  json_t *root = json_pack("{sI so}", "seed", (json_int_t)a->seed, "requests", list);
  bool ok = root != NULL;
  for (long long i = 0; ok && i < a->requests; i++) {
    json_t *prompt = json_array();
    ok = prompt != NULL;
    for (int k = 0; ok && k < recs[i].prompt_len; k++)
      ok = json_array_append_new(prompt, json_integer(recs[i].prompt[k])) == 0;
    json_t *one = ok ? json_pack("{so sI}", "prompt", prompt, "max_new_tokens",
                                 (json_int_t)recs[i].output_len)
                     : NULL;
    if (!one) json_decref(prompt);
    ok = one && json_array_append_new(list, one) == 0;
  }
  if (ok && json_dump_file(root, a->requests_path, JSON_COMPACT) != 0) {
    cli_report_write_failure(CMD, a->requests_path, errno);
    json_decref(root);
    return false;
  }
  if (!ok) fprintf(stderr, "recap %s: out of memory writing the request set\n", CMD);
  json_decref(root);
  return ok;
}

/* --tokens-out: request i's output ids as "i: id,id,...", one line each, in submit order. */
static bool save_tokens(const generate_bench_args *a, const request_record *recs) {
  FILE *f = fopen(a->tokens_path, "w");
  if (!f) {
    fprintf(stderr, "recap %s: cannot write %s\n", CMD, a->tokens_path);
    return false;
  }
  for (long long i = 0; i < a->requests; i++) {
    fprintf(f, "%lld:", i);
    for (size_t k = 0; k < recs[i].tokens && k < (size_t)recs[i].output_len; k++)
      fprintf(f, "%s%d", k ? "," : " ", recs[i].outputs[k]);
    fputc('\n', f);
  }
  bool ok = fclose(f) == 0;
  if (!ok) fprintf(stderr, "recap %s: cannot write %s\n", CMD, a->tokens_path);
  return ok;
}

static int parse_range(const char *flag, const char *text, long long *lo, long long *hi) {
  long long v[2];
  size_t n = 0;
  if (!cli_parse_int_list(CMD, flag, text, 1, 1 << 24, v, 2, &n, "64,512")) return CLI_EXIT_USAGE;
  *lo = v[0];
  *hi = n == 2 ? v[1] : v[0];
  if (*hi < *lo) {
    fprintf(stderr, "recap %s: %s takes MIN,MAX with MIN <= MAX, got '%s'\n", CMD, flag, text);
    return CLI_EXIT_USAGE;
  }
  return CLI_EXIT_OK;
}

/* `recap serve-bench --generate`'s flags (cli_serve_bench_help lists them). */
const cli_option cli_serve_generate_options[] = {
    {.flag = "--requests",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "synthetic requests (default 64)"},
    {.flag = "--prompt-len",
     .value = "MIN,MAX",
     .kind = CLI_VALUE_TEXT,
     .help = "the range of prompt lengths, drawn uniformly (default 64,512)"},
    {.flag = "--output-len",
     .value = "MIN,MAX",
     .kind = CLI_VALUE_TEXT,
     .help = "the range of output lengths, drawn uniformly (default 64,256)"},
    {.flag = "--rate",
     .value = "R",
     .kind = CLI_VALUE_TEXT,
     .help = "Poisson arrivals of R requests per second (default 0: all at once); the\n"
             "requests' arrivals may span at most a day"},
    {.flag = "--kv-fraction",
     .value = "F",
     .kind = CLI_VALUE_TEXT,
     .help = "share of the free device memory (after the weights) the KV pools take,\n"
             "up to 0.99 (default 0.5 on CUDA; the host backend keeps the spec's pool)"},
    {.flag = "--max-running",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "sequences admitted at once (default: the decode entry's largest bucket)"},
    {.flag = "--seed",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "seed of the requests' ids and lengths (default 1)"},
    {.flag = "--device",
     .value = "D",
     .kind = CLI_VALUE_WORDS,
     .words = "cuda host",
     .help = "cuda or host (default cuda, else the host with a note)"},
    {.flag = "--json",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "write the results as JSON (- for stdout: the text then goes to stderr)"},
    {.flag = "--svg",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "write a bar chart of TTFT and TPOT (median, p10-p90 whiskers) as SVG"},
    {.flag = "--save-requests",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "write the request set (prompt ids, output lengths) as JSON, so a peer\n"
             "(bench/peer/peer_hf_generate_batch.py) serves the same requests"},
    {.flag = "--base-dir",
     .value = "DIR",
     .kind = CLI_VALUE_DIR,
     .help = "files the spec names must lie under DIR"},
    {.flag = "--tokens-out",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "write each request's output ids, one line per request (\"i: id,id,...\")"},
    {.flag = "--world",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "tensor parallelism over N ranks (recap launch --gpus N -- serve-bench\n"
             "m.rank{rank}.yaml ...): rank 0 serves and prints, the others follow"},
    CLI_WORLD_RANK_OPTIONS,
    {0}};

static int parse_args(int argc, char **argv, generate_bench_args *a) {
  *a = (generate_bench_args){.requests = 64,
                             .prompt_min = 64,
                             .prompt_max = 512,
                             .output_min = 64,
                             .output_max = 256,
                             .seed = 1};
  cli_world_init(&a->world, CMD);
  for (int i = 0; i < argc; i++) {
    const char *v = NULL;
    int m;
    if (strcmp(argv[i], "--generate") == 0) continue;
    if ((m = cli_flag(CMD, argc, argv, &i, "--device", &a->device)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--base-dir", &a->base_dir)) != 0 ||
        (m = cli_json_flag(CMD, argc, argv, &i, &a->json_path)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--svg", &a->svg_path)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--save-requests", &a->requests_path)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--tokens-out", &a->tokens_path)) != 0 ||
        (m = cli_world_flag(CMD, argc, argv, &i, &a->world)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--requests", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--requests", v, 1, 10000000, &a->requests))
        return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--prompt-len", &v)) != 0) {
      if (m < 0 || parse_range("--prompt-len", v, &a->prompt_min, &a->prompt_max))
        return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--output-len", &v)) != 0) {
      if (m < 0 || parse_range("--output-len", v, &a->output_min, &a->output_max))
        return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--rate", &v)) != 0) {
      if (m < 0 || !cli_parse_number(CMD, "--rate", v, 0, 1e9, &a->rate)) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--kv-fraction", &v)) != 0) {
      if (m < 0 || !cli_parse_number(CMD, "--kv-fraction", v, 1e-6, 0.99, &a->kv_fraction))
        return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--max-running", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--max-running", v, 1, 1 << 20, &a->max_running))
        return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--seed", &v)) != 0) {
      if (m < 0 || !cli_parse_u64(CMD, "--seed", v, &a->seed)) return CLI_EXIT_USAGE;
    } else if (!cli_take_one(CMD, "spec", argv[i], &a->path)) {
      return CLI_EXIT_USAGE;
    }
  }
  if (!a->path) {
    fprintf(stderr, "recap %s: usage: recap serve-bench MODEL.yaml --generate (see --help)\n", CMD);
    return CLI_EXIT_USAGE;
  }
  if (!cli_device_flag_ok(CMD, a->device)) return CLI_EXIT_USAGE;
  const char *const written[] = {a->json_path, a->svg_path, a->requests_path, a->tokens_path};
  static const char *const flags[] = {"--json", "--svg", "--save-requests", "--tokens-out"};
  for (int w = 0; w < 4; w++) {
    if (w > 0 && written[w] && !cli_output_writable(CMD, written[w])) return CLI_EXIT_USAGE;
    if (!cli_output_spares(CMD, flags[w], written[w], a->path)) return CLI_EXIT_USAGE;
  }
  /* A benchmark whose arrivals alone would take over a day is a mistyped rate. */
  if (a->rate > 0 && (double)a->requests / a->rate > 86400) {
    fprintf(stderr,
            "recap %s: --rate %g spreads %lld requests over about %.3g s, more than a day: "
            "raise --rate or lower --requests\n",
            CMD, a->rate, a->requests, (double)a->requests / a->rate);
    return CLI_EXIT_USAGE;
  }
  return cli_world_check(CMD, &a->world) ? CLI_EXIT_OK : CLI_EXIT_USAGE;
}

/* Ends a rank whose communicator failed without tearing it down: a peer may be dead and the
 * abort under way (launch.c says why), as recap run --world and generate --world do. */
static void exit_if_comm_failed(recap_comm *comm, int rc) {
  recap_status cause = recap_comm_check(comm);
  if (rc == CLI_EXIT_OK || cause == RECAP_OK || cause == RECAP_STATUS_NOT_READY) return;
  fflush(NULL);
  _exit(rc);
}

/* A rank other than 0: runs what rank 0's generator announces until it is destroyed. Prints
 * nothing but a failure (the library logs it as it happens; this names the rank). */
static int follow(const generate_bench_args *a, recap_generator_options *go, recap_comm *comm) {
  go->quiet = 1;
  recap_status st = recap_generator_follow(a->path, go);
  int rc = st == RECAP_OK ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
  if (st != RECAP_OK) cli_report_failure(a->world.who, "following rank 0's generator", st);
  exit_if_comm_failed(comm, rc);
  recap_comm_destroy(comm);
  return rc;
}

int cli_serve_generate_main(int argc, char **argv) {
  generate_bench_args a;
  int rc = parse_args(argc, argv, &a);
  cli_serving_shape shape = {0};
  if (rc == CLI_EXIT_OK) rc = cli_read_serving_shape(CMD, a.path, a.base_dir, a.device, &shape);
  if (rc != CLI_EXIT_OK) return rc;
  if (!shape.paged) {
    fprintf(stderr,
            "recap %s --generate: %s is not a paged serving spec (recap import-hf --paged)\n", CMD,
            a.path);
    return CLI_EXIT_FAILURE;
  }
  int64_t vocab = shape.vocab, max_seq = shape.max_seq;
  if (a.prompt_max + a.output_max > max_seq) {
    fprintf(stderr,
            "recap %s: prompts up to %lld and outputs up to %lld tokens exceed the spec's %" PRId64
            " positions per sequence (import with a larger --max-seq)\n",
            CMD, a.prompt_max, a.output_max, max_seq);
    return CLI_EXIT_USAGE;
  }
  if (a.max_running > shape.max_rows) {
    fprintf(stderr,
            "recap %s: --max-running %lld is more than the %" PRId64
            " sequences the decode entry's largest bucket holds\n",
            CMD, a.max_running, shape.max_rows);
    return CLI_EXIT_USAGE;
  }
  recap_generator_options go = {.struct_size = sizeof go,
                                .base_dir = a.base_dir,
                                .override_device = 1,
                                .kv_fraction = a.kv_fraction,
                                .max_running = (int)a.max_running};
  if (!cli_pick_device(CMD, a.device, RECAP_BACKEND_CUDA, &go.device)) return CLI_EXIT_USAGE;
  if (!cli_world_join(CMD, &a.world, &go.device)) return CLI_EXIT_FAILURE;
  recap_comm *comm = a.world.comm;
  go.comm = comm;
  if (comm && a.world.rank != 0) return follow(&a, &go, comm);
  request_record *recs = calloc((size_t)a.requests, sizeof *recs);
  bool drawn = recs != NULL;
  uint64_t rng = a.seed;
  for (long long i = 0; drawn && i < a.requests; i++) {
    recs[i].prompt_len = (int)uniform_int(&rng, a.prompt_min, a.prompt_max);
    recs[i].output_len = (int)uniform_int(&rng, a.output_min, a.output_max);
    recs[i].prompt = malloc(sizeof(int32_t) * (size_t)recs[i].prompt_len);
    if (a.tokens_path) recs[i].outputs = malloc(sizeof(int32_t) * (size_t)recs[i].output_len);
    drawn = recs[i].prompt != NULL && (!a.tokens_path || recs[i].outputs != NULL);
    for (int k = 0; drawn && k < recs[i].prompt_len; k++)
      recs[i].prompt[k] = (int32_t)uniform_int(&rng, 0, vocab - 1);
  }
  /* The request set is written before the generator loads, so a peer can use it even when
   * recap's own run fails. */
  rc = CLI_EXIT_FAILURE;
  recap_generator *g = NULL;
  recap_status st = drawn ? RECAP_OK : RECAP_STATUS_OUT_OF_MEMORY;
  if (st != RECAP_OK) {
    cli_report_failure(CMD, "the requests", st);
  } else if (a.requests_path && !save_requests(&a, recs)) {
    /* save_requests said why */
  } else if ((st = recap_generator_create(a.path, &go, &g)) != RECAP_OK) {
    /* The library names its option (max_running); the user typed the flag. */
    char what[64] = "the generator";
    if (a.max_running)
      snprintf(what, sizeof what, "the generator with --max-running %lld", a.max_running);
    cli_report_failure(CMD, what, st);
  } else {
    double wall_s = 0;
    rc = drive(&a, g, recs, &wall_s);
    recap_generator_stats stats;
    if (rc == CLI_EXIT_OK && (st = recap_generator_stats_get(g, &stats)) != RECAP_OK) {
      cli_report_failure(CMD, "the stats", st);
      rc = CLI_EXIT_FAILURE;
    }
    if (rc == CLI_EXIT_OK) rc = report(&a, go.device, recs, wall_s, &stats);
    if (rc == CLI_EXIT_OK && a.tokens_path && !save_tokens(&a, recs)) rc = CLI_EXIT_FAILURE;
  }
  if (comm) exit_if_comm_failed(comm, rc);
  /* Destroying the generator sends the followers their stop. */
  recap_generator_destroy(g);
  recap_comm_destroy(comm);
  for (long long i = 0; recs && i < a.requests; i++) {
    free(recs[i].prompt);
    free(recs[i].outputs);
  }
  free(recs);
  return rc;
}
