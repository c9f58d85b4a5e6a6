/*
 * serve_bench.c: `recap serve-bench SPEC --threads N --requests M`: an inference-server loop.
 *
 * One pipeline loads the weights; N workers each get a clone (shared weights, own buffers,
 * stream and graphs) that they capture on their own thread, all at once. The main thread is
 * the front end: it draws M requests (a random batch size up to --batch-max, inputs as their
 * init says with the random ones drawn from a per-request seed) and pushes them into a bounded
 * queue (mutex + condition variables); workers pop, copy in, run, copy out. Latency is measured
 * from the push to the copied-out result (queueing included) and from the pop (service only).
 *
 * Every result is checked, after the timed phase so that checking does not slow the server:
 * each worker replays its own requests, in the order it served them, on an eager clone of its
 * own (making the inputs again from the request's seed) and compares the outputs within the
 * dtype's tolerance. Per-worker order matters for specs with state (a KV cache): the
 * reference sees the same sequence of updates as the served instance.
 */
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/tensors.h"

static const char *const CMD = "serve-bench";

enum { MAX_THREADS = 256, MAX_REPORTED = 5 };
/* A device fault poisons the device context for the rest of the process (a CUDA context
 * cannot be repaired): its own exit status tells a supervisor to start a new process. */
enum { EXIT_DEVICE_FAULT = 3 };

static const cli_option serve_bench_options[] = {
    {.flag = "--threads", .value = "N", .kind = CLI_VALUE_TEXT, .help = "workers (default 4)"},
    {.flag = "--requests", .value = "M", .kind = CLI_VALUE_TEXT, .help = "requests (default 200)"},
    {.flag = "--batch-max",
     .value = "B",
     .kind = CLI_VALUE_TEXT,
     .help = "largest batch drawn (default: the largest bucket)"},
    {.flag = "--device",
     .value = "D",
     .kind = CLI_VALUE_WORDS,
     .words = "cuda host",
     .help = "cuda or host (default: the spec's; host when there is no GPU)"},
    {.flag = "--dim",
     .value = "NAME=VALUE",
     .kind = CLI_VALUE_TEXT,
     .help = "replaces a (non-bucketed) dim's value (repeatable)"},
    {.flag = "--seed",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "seed of the request sizes and random inputs, 0 to 2^64-1\n"
             "(default: the spec's seed:, else a fresh random seed)"},
    {.flag = "--json",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "also write the results as JSON (throughput, latencies, checks;\n"
             "with --generate the run's parameters; the GPU, driver, CUDA, cuBLAS\n"
             "and recap versions); - writes it to stdout and the text report to\n"
             "stderr"},
    {.flag = "--base-dir",
     .value = "DIR",
     .kind = CLI_VALUE_DIR,
     .help = "files the spec names (params) must lie under DIR (for specs from\n"
             "untrusted sources)"},
    {.flag = "--generate",
     .kind = CLI_VALUE_NONE,
     .help = "the serving benchmark of the generation API (the flags below)"},
    {0}};
const cli_help cli_serve_bench_help = {
    .synopsis =
        "recap serve-bench SPEC [--threads N] [--requests M] [--batch-max B]\n"
        "                  [--device cuda|host] [--dim NAME=VALUE] [--seed N]\n"
        "                  [--json FILE] [--base-dir DIR]\n"
        "recap serve-bench MODEL.yaml --generate [--requests N] [--prompt-len MIN,MAX]\n"
        "                  [--output-len MIN,MAX] [--rate R] [--kv-fraction F]\n"
        "                  [--max-running N] [--seed N] [--device cuda|host]\n"
        "                  [--json FILE] [--svg FILE] [--save-requests FILE]\n"
        "                  [--tokens-out FILE] [--base-dir DIR]",
    .description =
        "An inference-server loop: a request queue, N worker threads each with its own pipeline\n"
        "(a clone sharing the weights, captured on its thread), M requests of random batch size\n"
        "<= B with inputs as their init says (the random ones from a per-request seed). Prints\n"
        "throughput and p50/p99 latency, then checks every result against an eager reference\n"
        "run of the same request.\n"
        "\n"
        "With --generate: a serving benchmark of the generation API on a paged serving spec\n"
        "(recap import-hf --paged): N synthetic requests (random ids, prompt and output lengths\n"
        "uniform in the ranges; default 64 requests, prompts 64,512, outputs 64,256), greedy,\n"
        "all submitted at once or at Poisson arrivals of R per second, served with continuous\n"
        "batching. Prints output tokens/s, TTFT and TPOT p50/p99, the KV pool's peak use,\n"
        "preemptions and graph vs eager steps (JSON and SVG on request).",
    .exit_status =
        "0 when every result matches, 1 on any mismatch or failure, 2 on a usage error, 3 on\n"
        "a device fault (the device context of this process is lost: restart the worker\n"
        "process).",
    .operand = CLI_VALUE_SPEC,
    .groups = {{.options = serve_bench_options},
               {.heading = "With --generate:", .options = cli_serve_generate_options}},
};

typedef struct {
  size_t id;
  int64_t batch;
  uint64_t seed;
  cli_host_tensors inputs;  /* made by the front end, freed by the worker once copied in */
  cli_host_tensors outputs; /* the served result, kept until checked */
  double pushed, popped, finished;
} request;

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t not_empty, not_full;
  request **slots;
  size_t capacity, head, count;
  bool closed;
} request_queue;

/* A point every worker reaches and waits at until the front end has seen all of them
 * arrive and opens it (a barrier whose party count the front end knows only at the end,
 * should a worker fail to start). */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cond;
  int arrived;
  bool open;
} gate;

typedef struct {
  request_queue queue;
  gate ready;             /* every worker has captured */
  gate served;            /* every worker has drained the queue: the timed phase is over */
  cli_host_tensors bound; /* inputs with a fixed init, read once (cli_inputs_read_bound) */
} server;

typedef struct worker {
  server *srv;
  int id;
  pthread_t thread;
  recap_pipeline *serve, *reference;
  request **done; /* served requests in order */
  size_t num_done;
  double finished; /* when this worker served its last request */
  recap_status status;
  char error[1024];
  size_t checked, bad_requests, bad_elements;
  double max_diff;
  size_t first_bad[MAX_REPORTED];
} worker;

static void queue_push(request_queue *q, request *r) {
  pthread_mutex_lock(&q->mu);
  while (q->count == q->capacity) pthread_cond_wait(&q->not_full, &q->mu);
  q->slots[(q->head + q->count) % q->capacity] = r;
  q->count++;
  r->pushed = cli_now();
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}

static void queue_close(request_queue *q) {
  pthread_mutex_lock(&q->mu);
  q->closed = true;
  pthread_cond_broadcast(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
}

/* The next request, or NULL once the queue is closed and empty. */
static request *queue_pop(request_queue *q) {
  pthread_mutex_lock(&q->mu);
  while (q->count == 0 && !q->closed) pthread_cond_wait(&q->not_empty, &q->mu);
  request *r = NULL;
  if (q->count > 0) {
    r = q->slots[q->head];
    q->head = (q->head + 1) % q->capacity;
    q->count--;
    pthread_cond_signal(&q->not_full);
  }
  pthread_mutex_unlock(&q->mu);
  return r;
}

/* Keeps the first failure of a worker (recap_last_error is per thread). */
static void worker_fail(worker *w, const char *what, recap_status st) {
  if (w->status != RECAP_OK) return;
  w->status = st;
  snprintf(w->error, sizeof w->error, "worker %d: %s failed: %s: %s", w->id, what,
           recap_status_string(st), recap_last_error());
}

static void gate_arrive(gate *g) {
  pthread_mutex_lock(&g->mu);
  g->arrived++;
  pthread_cond_broadcast(&g->cond);
  while (!g->open) pthread_cond_wait(&g->cond, &g->mu);
  pthread_mutex_unlock(&g->mu);
}

static void gate_open_when(gate *g, int parties) {
  pthread_mutex_lock(&g->mu);
  while (g->arrived < parties) pthread_cond_wait(&g->cond, &g->mu);
  g->open = true;
  pthread_cond_broadcast(&g->cond);
  pthread_mutex_unlock(&g->mu);
}

static void serve_one(worker *w, request *r) {
  recap_status st;
  if ((st = cli_inputs_copy_in(w->serve, &r->inputs)) != RECAP_OK) {
    worker_fail(w, "copy-in", st);
    return;
  }
  if ((st = recap_pipeline_run(w->serve, r->batch)) != RECAP_OK) {
    worker_fail(w, "run", st);
    return;
  }
  if ((st = cli_outputs_copy_out(w->serve, r->batch, &r->outputs)) != RECAP_OK) {
    worker_fail(w, "copy-out", st);
    return;
  }
  r->finished = cli_now();
  w->done[w->num_done++] = r;
}

/* Replays the served requests on the eager reference, in serving order, and compares. */
static void check_all(worker *w) {
  for (size_t i = 0; i < w->num_done && w->status == RECAP_OK; i++) {
    request *r = w->done[i];
    cli_host_tensors in = {0}, want = {0};
    recap_status st;
    if ((st = cli_inputs_make(w->reference, &w->srv->bound, r->batch, r->seed, &in)) != RECAP_OK ||
        (st = cli_inputs_copy_in(w->reference, &in)) != RECAP_OK ||
        (st = recap_pipeline_run_eager(w->reference, r->batch)) != RECAP_OK ||
        (st = cli_outputs_copy_out(w->reference, r->batch, &want)) != RECAP_OK) {
      worker_fail(w, "the reference run", st);
    } else {
      size_t bad = 0;
      for (size_t k = 0; k < want.count; k++) {
        const cli_tensor *t = &want.items[k].info;
        double d = 0;
        bad += cli_compare(r->outputs.items[k].host, want.items[k].host, t->dtype,
                           t->bytes / recap_dtype_size(t->dtype), &d);
        if (d > w->max_diff) w->max_diff = d;
      }
      if (bad) {
        if (w->bad_requests < MAX_REPORTED) w->first_bad[w->bad_requests] = r->id;
        w->bad_requests++;
        w->bad_elements += bad;
      }
      w->checked++;
    }
    cli_host_tensors_free(&in);
    cli_host_tensors_free(&want);
    cli_host_tensors_free(&r->outputs);
  }
}

static void *worker_main(void *arg) {
  worker *w = arg;
  server *srv = w->srv;
  /* Every worker captures its own graphs now, concurrently with the others (thread-local
   * capture mode), before the clock starts. */
  recap_status st = recap_pipeline_capture(w->serve);
  if (st != RECAP_OK) worker_fail(w, "capture", st);
  gate_arrive(&srv->ready);
  request *r;
  while ((r = queue_pop(&srv->queue)) != NULL) {
    r->popped = cli_now();
    /* After a failure the worker still drains the queue, so the front end never blocks. */
    if (w->status == RECAP_OK) serve_one(w, r);
    cli_host_tensors_free(&r->inputs);
  }
  w->finished = cli_now();
  gate_arrive(&srv->served);
  if (w->status == RECAP_OK) check_all(w);
  return NULL;
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted values. */
static double rank(const double *sorted, size_t n, double q) {
  size_t k = (size_t)(q * (double)n + 0.999999);
  if (k < 1) k = 1;
  return sorted[(k > n ? n : k) - 1];
}

/* Whether the table lists the flag `arg` names (its text before any '='). */
static bool lists(const cli_option *table, const char *arg) {
  size_t len = strcspn(arg, "=");
  for (const cli_option *o = table; o->flag; o++)
    if (strlen(o->flag) == len && strncmp(o->flag, arg, len) == 0) return true;
  return false;
}

/* Whether `arg` is a flag of serve-bench's other mode (the one without --generate when
 * `generate`, else --generate's), which --help lists on the same page; then it has said so on
 * stderr ("--threads applies without --generate"), for a usage error, rather than "unknown". */
static bool other_mode(const char *arg, bool generate) {
  if (strncmp(arg, "--", 2) != 0) return false;
  const cli_option *mine = generate ? cli_serve_generate_options : serve_bench_options;
  const cli_option *other = generate ? serve_bench_options : cli_serve_generate_options;
  if (lists(mine, arg) || !lists(other, arg)) return false;
  fprintf(stderr, "recap %s: %.*s applies %s --generate\n", CMD, (int)strcspn(arg, "="), arg,
          generate ? "without" : "only with");
  return true;
}

int cli_serve_bench_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_serve_bench_help);
    return CLI_EXIT_OK;
  }
  /* --generate's mode parses its own flags; this one knows both lists, so it tells which mode a
   * misplaced flag belongs to before handing over. */
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--generate") != 0) continue;
    for (int j = 0; j < argc; j++)
      if (j != i && other_mode(argv[j], true)) return CLI_EXIT_USAGE;
    return cli_serve_generate_main(argc, argv);
  }
  const char *path = NULL, *device = NULL, *json_path = NULL, *base_dir = NULL;
  const char *dims[CLI_MAX_DIMS];
  int num_dims = 0;
  long long threads = 4, requests = 200, batch_max = 0;
  uint64_t seed_arg = 0;
  bool batch_max_set = false, seed_set = false;
  for (int i = 0; i < argc; i++) {
    const char *v = NULL;
    int m;
    if ((m = cli_flag(CMD, argc, argv, &i, "--threads", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--threads", v, 1, MAX_THREADS, &threads))
        return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--requests", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--requests", v, 1, 100000000, &requests))
        return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--batch-max", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--batch-max", v, 1, INT64_MAX, &batch_max))
        return CLI_EXIT_USAGE;
      batch_max_set = true;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--seed", &v)) != 0) {
      if (m < 0 || !cli_parse_u64(CMD, "--seed", v, &seed_arg)) return CLI_EXIT_USAGE;
      seed_set = true;
    } else if ((m = cli_dim_flag(CMD, argc, argv, &i, dims, &num_dims)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--device", &device)) != 0 ||
               (m = cli_json_flag(CMD, argc, argv, &i, &json_path)) != 0 ||
               (m = cli_flag(CMD, argc, argv, &i, "--base-dir", &base_dir)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if (other_mode(argv[i], false) || !cli_take_one(CMD, "spec", argv[i], &path)) {
      return CLI_EXIT_USAGE;
    }
  }
  if (!path) {
    cli_help_print(stderr, &cli_serve_bench_help);
    return CLI_EXIT_USAGE;
  }

  int rc = CLI_EXIT_FAILURE;
  recap__model *model = NULL;
  recap_pipeline *base = NULL;
  worker *workers = NULL;
  request *reqs = NULL;
  double *latency = NULL, *service = NULL;
  server srv = {0};
  json_t *root = NULL;
  bool sync_ready = false;
  int started = 0;
  bool device_fault = false;
  recap_status st = RECAP_OK;
  cli_load_request load = {.path = path,
                           .base_dir = base_dir,
                           .dims = dims,
                           .num_dims = num_dims,
                           .device = device,
                           .capacity = RECAP__CAPACITY_REQUIRED};
  size_t bucket;
  int64_t largest;
  if ((rc = cli_load(CMD, &load, &model, &bucket, &largest)) != CLI_EXIT_OK) goto done;
  rc = CLI_EXIT_FAILURE;
  const recap__spec *spec = model->spec;
  if (spec->run_batch && largest != model->bucket_values[model->num_buckets - 1]) {
    fprintf(stderr,
            "recap %s: batch sizes are drawn per request: use --batch-max, not --dim "
            "%s=...\n",
            CMD, spec->dims[spec->bucket_dim].name);
    rc = CLI_EXIT_USAGE;
    goto done;
  }
  if (spec->bucket_dim < 0 && batch_max_set) {
    fprintf(stderr, "recap %s: --batch-max: the spec has no bucketed dim\n", CMD);
    rc = CLI_EXIT_USAGE;
    goto done;
  }
  if (!batch_max_set) batch_max = largest;
  if (batch_max > largest) {
    fprintf(stderr, "recap %s: --batch-max %lld exceeds the largest bucket (%" PRId64 ")\n", CMD,
            batch_max, largest);
    rc = CLI_EXIT_USAGE;
    goto done;
  }
  recap_pipeline_options opts = {.struct_size = sizeof opts,
                                 .override_device = 1,
                                 .device = model->device,
                                 .override_mode = 1,
                                 .mode = RECAP_MODE_GRAPH};
  const char *seed_from;
  uint64_t seed = cli_input_seed(seed_set, seed_arg, spec, &seed_from);

  if ((st = recap__pipeline_create_model(model, &opts, &base)) != RECAP_OK) {
    cli_report_failure(CMD, "creating the pipeline", st);
    goto done;
  }
  if ((st = cli_inputs_read_bound(base, &srv.bound)) != RECAP_OK) {
    cli_report_failure(CMD, "reading the inputs", st);
    goto done;
  }
  recap_pipeline_info info;
  if ((st = recap_pipeline_info_get(base, &info)) != RECAP_OK) {
    cli_report_failure(CMD, "reading the pipeline", st);
    goto done;
  }
  if (info.draws_random) {
    fprintf(stderr,
            "recap %s: %s draws random numbers: an eager reference cannot reproduce "
            "a served result, so results cannot be checked\n",
            CMD, path);
    goto done;
  }
  workers = calloc((size_t)threads, sizeof *workers);
  reqs = calloc((size_t)requests, sizeof *reqs);
  latency = malloc((size_t)requests * sizeof *latency);
  service = malloc((size_t)requests * sizeof *service);
  srv.queue.capacity = 2 * (size_t)threads;
  srv.queue.slots = calloc(srv.queue.capacity, sizeof *srv.queue.slots);
  if (!workers || !reqs || !latency || !service || !srv.queue.slots) {
    fprintf(stderr, "recap %s: out of memory\n", CMD);
    goto done;
  }
  recap_pipeline_options eager_opts = {
      .struct_size = sizeof eager_opts, .override_mode = 1, .mode = RECAP_MODE_EAGER};
  recap_pipeline_options graph_opts = {
      .struct_size = sizeof graph_opts, .override_mode = 1, .mode = RECAP_MODE_GRAPH};
  for (int i = 0; i < threads; i++) {
    worker *w = &workers[i];
    w->srv = &srv;
    w->id = i;
    if (!(w->done = calloc((size_t)requests, sizeof *w->done))) {
      fprintf(stderr, "recap %s: out of memory\n", CMD);
      goto done;
    }
    if ((st = recap_pipeline_clone(base, &graph_opts, &w->serve)) != RECAP_OK ||
        (st = recap_pipeline_clone(base, &eager_opts, &w->reference)) != RECAP_OK) {
      cli_report_failure(CMD, "cloning the pipeline", st);
      goto done;
    }
  }
  /* Clones must share the weights, not copy them: check one param's memory. */
  bool shared = true;
  for (size_t t = 0; t < info.num_tensors; t++) {
    recap_tensor_info x;
    if (recap_pipeline_tensor_info_get(base, t, &x) != RECAP_OK) {
      shared = false;
      break;
    }
    if (x.role != RECAP_ROLE_PARAM) continue;
    recap_tensor a, b;
    if (recap_pipeline_tensor(base, x.name, &a) != RECAP_OK ||
        recap_pipeline_tensor(workers[0].serve, x.name, &b) != RECAP_OK || a.data != b.data)
      shared = false;
    break;
  }
  recap_pipeline_stats bs;
  if ((st = recap_pipeline_stats_get(base, &bs)) != RECAP_OK) {
    cli_report_failure(CMD, "reading the stats", st);
    goto done;
  }
  printf("%s (%s) on %s:%d: %lld %s, %lld %s", spec->name, path,
         recap_backend_name(opts.device.backend), opts.device.index, threads,
         cli_plural(threads, "worker", "workers"), requests,
         cli_plural(requests, "request", "requests"));
  if (spec->bucket_dim >= 0)
    printf(", batch 1..%lld of %s", batch_max, spec->dims[spec->bucket_dim].name);
  char bytes_text[32];
  printf("\nweights: %s, %s by the %lld instances; request seed %" PRIu64 " (%s)\n",
         cli_format_bytes(bs.param_bytes, bytes_text, sizeof bytes_text),
         shared ? "shared (one copy)" : "NOT shared", 2 * threads + 1, seed,
         strcmp(seed_from, "spec") == 0 ? "the spec's seed:" : seed_from);
  fflush(stdout);
  if (!shared) {
    fprintf(stderr, "recap %s: clones do not share the params\n", CMD);
    goto done;
  }

  if (pthread_mutex_init(&srv.queue.mu, NULL) != 0 ||
      pthread_cond_init(&srv.queue.not_empty, NULL) != 0 ||
      pthread_cond_init(&srv.queue.not_full, NULL) != 0 ||
      pthread_mutex_init(&srv.ready.mu, NULL) != 0 ||
      pthread_cond_init(&srv.ready.cond, NULL) != 0 ||
      pthread_mutex_init(&srv.served.mu, NULL) != 0 ||
      pthread_cond_init(&srv.served.cond, NULL) != 0) {
    fprintf(stderr, "recap %s: cannot create the queue's locks\n", CMD);
    goto done;
  }
  sync_ready = true;
  double capture_start = cli_now();
  for (; started < threads; started++)
    if (pthread_create(&workers[started].thread, NULL, worker_main, &workers[started]) != 0) {
      fprintf(stderr, "recap %s: cannot start worker %d\n", CMD, started);
      st = RECAP_STATUS_INTERNAL;
      break;
    }
  gate_open_when(&srv.ready, started);
  double capture_ms = (cli_now() - capture_start) * 1e3;
  double t0 = cli_now();
  uint64_t rng = seed;
  for (long long i = 0; st == RECAP_OK && i < requests; i++) {
    request *r = &reqs[i];
    r->id = (size_t)i;
    r->batch = spec->bucket_dim >= 0 ? 1 + (int64_t)(cli_rng_next(&rng) % (uint64_t)batch_max) : 0;
    r->seed = cli_rng_next(&rng);
    if ((st = cli_inputs_make(base, &srv.bound, r->batch, r->seed, &r->inputs)) != RECAP_OK) {
      cli_report_failure(CMD, "making a request", st);
      break;
    }
    queue_push(&srv.queue, r);
  }
  queue_close(&srv.queue);
  gate_open_when(&srv.served, started);
  double t1 = cli_now();
  for (int i = 0; i < started; i++) pthread_join(workers[i].thread, NULL);
  printf("capture: %d %s captured their graphs on their own threads at once in %.1f ms\n", started,
         cli_plural(started, "worker", "workers"), capture_ms);

  size_t served = 0, checked = 0, bad = 0, bad_elements = 0;
  double max_diff = 0;
  bool failed = st != RECAP_OK;
  for (int i = 0; i < threads; i++) {
    worker *w = &workers[i];
    if (w->status != RECAP_OK) {
      fprintf(stderr, "recap %s: %s\n", CMD, w->error);
      failed = true;
      if (w->status == RECAP_STATUS_DEVICE_ERROR) device_fault = true;
    }
    served += w->num_done;
    checked += w->checked;
    bad += w->bad_requests;
    bad_elements += w->bad_elements;
    if (w->max_diff > max_diff) max_diff = w->max_diff;
    for (size_t k = 0; k < w->bad_requests && k < MAX_REPORTED; k++)
      fprintf(stderr, "recap %s: request %zu (worker %d) differs from its eager reference\n", CMD,
              w->first_bad[k], i);
  }
  size_t n = 0;
  for (long long i = 0; i < requests; i++)
    if (reqs[i].finished > 0) {
      latency[n] = (reqs[i].finished - reqs[i].pushed) * 1e3;
      service[n] = (reqs[i].finished - reqs[i].popped) * 1e3;
      n++;
    }
  qsort(latency, n, sizeof *latency, compare_double);
  qsort(service, n, sizeof *service, compare_double);
  double wall = t1 - t0;
  printf("served %zu %s in %.3f s: %.1f requests/s\n", served,
         cli_plural((long long)served, "request", "requests"), wall,
         wall > 0 ? (double)served / wall : 0.0);
  if (n > 0) {
    printf("latency (queue + service): p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
           rank(latency, n, 0.50), rank(latency, n, 0.99), latency[n - 1]);
    printf("service (copy-in, run, copy-out): p50 %.3f ms, p99 %.3f ms\n", rank(service, n, 0.50),
           rank(service, n, 0.99));
  }
  printf(
      "checked %zu of %lld results against eager references: %zu mismatch%s "
      "(max |diff| %.3g)\n",
      checked, requests, bad, bad == 1 ? "" : "es", max_diff);
  if (bad) fprintf(stderr, "recap %s: %zu elements out of tolerance\n", CMD, bad_elements);
  rc = failed || bad || checked != (size_t)requests ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
  if (json_path) {
    /* Written on failure too ("ok": false), so a script comparing runs sees why. */
    root = json_object();
    json_object_set_new(root, "spec", json_string(path));
    json_object_set_new(root, "name", json_string(spec->name));
    json_object_set_new(root, "device", json_string(recap_backend_name(opts.device.backend)));
    json_object_set_new(root, "threads", json_integer(threads));
    json_object_set_new(root, "requests", json_integer(requests));
    json_object_set_new(root, "batch_max", json_integer(spec->bucket_dim >= 0 ? batch_max : 0));
    json_object_set_new(root, "seed", cli_seed_json(seed));
    json_object_set_new(root, "seed_from", json_string(seed_from));
    json_object_set_new(root, "capture_ms", json_real(capture_ms));
    json_object_set_new(root, "served", json_integer((json_int_t)served));
    json_object_set_new(root, "wall_s", json_real(wall));
    json_object_set_new(root, "requests_per_s", json_real(wall > 0 ? (double)served / wall : 0.0));
    if (n > 0) {
      json_t *lat = json_object(), *svc = json_object();
      json_object_set_new(lat, "p50_ms", json_real(rank(latency, n, 0.50)));
      json_object_set_new(lat, "p99_ms", json_real(rank(latency, n, 0.99)));
      json_object_set_new(lat, "max_ms", json_real(latency[n - 1]));
      json_object_set_new(svc, "p50_ms", json_real(rank(service, n, 0.50)));
      json_object_set_new(svc, "p99_ms", json_real(rank(service, n, 0.99)));
      json_object_set_new(root, "latency", lat);
      json_object_set_new(root, "service", svc);
    }
    json_object_set_new(root, "checked", json_integer((json_int_t)checked));
    json_object_set_new(root, "mismatches", json_integer((json_int_t)bad));
    json_object_set_new(root, "max_abs_diff", cli_json_number(max_diff));
    json_object_set_new(root, "ok", json_boolean(rc == CLI_EXIT_OK));
    if (!cli_write_json(CMD, root, opts.device, json_path)) rc = CLI_EXIT_FAILURE;
  }
done:
  if (device_fault || st == RECAP_STATUS_DEVICE_ERROR) {
    fprintf(stderr,
            "recap %s: device fault: the device context is lost; restart the worker "
            "process\n",
            CMD);
    rc = EXIT_DEVICE_FAULT;
  }
  json_decref(root);
  if (sync_ready) {
    pthread_cond_destroy(&srv.served.cond);
    pthread_mutex_destroy(&srv.served.mu);
    pthread_cond_destroy(&srv.ready.cond);
    pthread_mutex_destroy(&srv.ready.mu);
    pthread_cond_destroy(&srv.queue.not_full);
    pthread_cond_destroy(&srv.queue.not_empty);
    pthread_mutex_destroy(&srv.queue.mu);
  }
  for (long long i = 0; reqs && i < requests; i++) {
    cli_host_tensors_free(&reqs[i].inputs);
    cli_host_tensors_free(&reqs[i].outputs);
  }
  for (int i = 0; workers && i < threads; i++) {
    recap_pipeline_destroy(workers[i].serve);
    recap_pipeline_destroy(workers[i].reference);
    free(workers[i].done);
  }
  free(srv.queue.slots);
  cli_host_tensors_free(&srv.bound);
  free(service);
  free(latency);
  free(reqs);
  free(workers);
  recap_pipeline_destroy(base);
  recap__model_release(model);
  return rc;
}
