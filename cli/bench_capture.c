/* bench_capture.c: `recap bench-capture`: what graphs cost to make and to launch.
 *
 * The capture-cost targets recap holds itself to, measured on pipelines generated here:
 *   1. capture + instantiate of a 1000-op pipeline (a chain of add and tanh on a small tensor,
 *      built as spec text and loaded with recap_pipeline_create_string, fusion off so that
 *      each op is one kernel node): <= 50 ms;
 *   2. an update of the instantiated graph: recap_pipeline_rebind of its input re-captures
 *      and applies the new graph to the executable (cudaGraphExecUpdate): <= 5 ms;
 *   3. every bucket of specs/transformer_block.yaml with B: [1..64] captured: < 1 s;
 *   4. eight expr ops loaded with a warm kernel cache: <= 20 ms more than the same chain of
 *      library ops (bench_expr_load.c);
 * and the host CPU time (CLOCK_THREAD_CPUTIME_ID) of one eager op launch, of one op of an
 * eager pipeline run, and of one replay call, which bench/peer/peer_torch_ops.py puts next to
 * PyTorch's per-op eager overhead. Wall times are host clock (capture is host work: the
 * device is idle while the stream records).
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/bench_expr_load.h"
#include "cli/cli.h"
#include "cli/tensors.h"
#include "runtime/text.h"

static const char *const CMD = "bench-capture";

/* bench_capture_options' help text states these targets: change both. */
static const double TARGET_CAPTURE_MS = 50, TARGET_UPDATE_MS = 5, TARGET_BUCKETS_MS = 1000;
enum {
  CHAIN_ELEMENTS = 4096,
  CUDA_OPS = 1000,
  HOST_OPS = 100,
  CUDA_BUCKETS = 64,
  HOST_BUCKETS = 2,
  CUDA_REPEATS = 5,
  HOST_REPEATS = 2,
  LAUNCH_BATCH = 100, /* eager launches per CPU-time sample, then a wait (not counted) */
  CUDA_LAUNCHES = 10000,
  HOST_LAUNCHES = 1000,
  REPLAYS = 50,
};
/* The name of the built-in default (cli_bench_capture_spec). */
#define DEFAULT_BUCKET_SPEC "specs/transformer_block.yaml"
/* The host backend computes the transformer block's GEMMs on the CPU: its smoke run keeps
 * the sequence short. */
#define HOST_BUCKET_DIMS "S=8"

/* The help text below states these defaults and targets. */
_Static_assert(CUDA_OPS == 1000 && HOST_OPS == 100 && CUDA_BUCKETS == 64 && HOST_BUCKETS == 2 &&
                   CUDA_REPEATS == 5 && HOST_REPEATS == 2 && RECAP_MAX_BUCKETS == 256,
               "update bench-capture's help text");

static const cli_option bench_capture_options[] = {
    {.flag = "--device",
     .value = "D",
     .kind = CLI_VALUE_WORDS,
     .words = "cuda host",
     .help = "cuda or host (default: cuda when there is a GPU)"},
    {.flag = "--ops", .value = "N", .kind = CLI_VALUE_TEXT, .help = "ops in the generated chain"},
    {.flag = "--buckets",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "buckets of the bucketed spec: B = 1, 2, ..., N (N <= 256)"},
    {.flag = "--bucket-spec",
     .value = "F",
     .kind = CLI_VALUE_SPEC,
     .help = "the spec captured with N buckets (its batch dim must be B; default:\n"
             "the built-in copy of " DEFAULT_BUCKET_SPEC ")"},
    {.flag = "--repeats",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "pipelines created and captured for the first measurement (median);\n"
             "also rebinds x 2 for the update (default 5, 2 on host)"},
    {.flag = "--json",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "write the results as JSON (- for stdout: the text then goes\n"
             "to stderr); it records the GPU, driver and library versions"},
    {0}};
const cli_help cli_bench_capture_help = {
    .synopsis =
        "recap bench-capture [--device cuda|host] [--ops N] [--buckets N]\n"
        "                    [--bucket-spec FILE] [--repeats N] [--json FILE]",
    .description =
        "Measures what graphs cost on the host and checks them against targets:\n"
        "  capture + instantiate of a generated N-op pipeline (default 1000)   <= 50 ms\n"
        "  an update of its instantiated graph (rebind -> re-capture -> exec update)  <= 5 ms\n"
        "  all buckets of FILE (--bucket-spec) with B: [1..N] (default 64)  < 1000 ms\n"
        "and the host CPU time of one eager op launch, of one op of an eager pipeline run and\n"
        "of one replay call (CLOCK_THREAD_CPUTIME_ID; waiting for the device is not counted).\n"
        "On the host backend the defaults shrink to a smoke test (100 ops, 2 buckets,\n"
        "" HOST_BUCKET_DIMS ").",
    .groups = {{.options = bench_capture_options}},
};

typedef struct {
  const char *device, *json_path, *bucket_spec;
  long long ops, buckets, repeats;
  bool ops_set, buckets_set, repeats_set;
} capture_args;

static int parse_args(int argc, char **argv, capture_args *a) {
  for (int i = 0; i < argc; i++) {
    const char *v;
    int m;
    if ((m = cli_flag(CMD, argc, argv, &i, "--device", &a->device)) != 0 ||
        (m = cli_json_flag(CMD, argc, argv, &i, &a->json_path)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--bucket-spec", &a->bucket_spec)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--ops", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--ops", v, 2, 100000, &a->ops)) return CLI_EXIT_USAGE;
      a->ops_set = true;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--buckets", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--buckets", v, 1, RECAP_MAX_BUCKETS, &a->buckets))
        return CLI_EXIT_USAGE;
      a->buckets_set = true;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--repeats", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--repeats", v, 1, 1000, &a->repeats)) return CLI_EXIT_USAGE;
      a->repeats_set = true;
    } else {
      if (cli_positional(CMD, argv[i]))
        fprintf(stderr, "recap %s: takes no positional arguments (got '%s')\n", CMD, argv[i]);
      return CLI_EXIT_USAGE;
    }
  }
  return CLI_EXIT_OK;
}

/* CPU time of the calling thread in seconds: what the host spends, not what it waits. */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The N-op chain: t1 = x + bias, t2 = tanh(t1), t3 = t2 + bias, ... (f32, 4096 elements),
 * one kernel per op, so its graph has N kernel nodes. */
static bool chain_spec(int ops, recap__text *b) {
  bool ok = recap__text_put(b,
                            "name: capture-chain-%d\ndevice: cuda\ndtype: f32\nseed: 1\n"
                            "dims: {N: %d}\ntensors:\n"
                            "  x: {shape: [N], role: input}\n"
                            "  bias: {shape: [N], role: param, init: normal, std: 0.02}\nops:\n",
                            ops, CHAIN_ELEMENTS);
  for (int i = 1; ok && i <= ops; i++) {
    const char *in = i == 1 ? "x" : NULL;
    char prev[32];
    snprintf(prev, sizeof prev, "t%d", i - 1);
    if (i % 2)
      ok = recap__text_put(b, "  - {op: add, in: [%s, bias], out: t%d}\n", in ? in : prev, i);
    else
      ok = recap__text_put(b, "  - {op: tanh, in: [%s], out: t%d}\n", prev, i);
  }
  return ok && recap__text_put(b, "outputs: [t%d]\nrun: {warmup: 1, iters: 10}\n", ops);
}

static double median_of(double *v, int n) {
  cli_summary s;
  cli_summarize(v, n, &s);
  return s.median;
}

typedef struct {
  /* 1. capture */
  int ops;
  size_t nodes;
  double create_ms, warmup_ms, capture_ms, instantiate_ms, total_ms; /* medians */
  double total_min_ms;
  /* 2. update */
  int rebinds;
  double update_ms, update_max_ms;
  uint64_t updates, instantiations;
  /* 4. CPU */
  double op_launch_us, eager_op_us, replay_call_us;
  int launches;
} chain_result;

/* Creates the chain pipeline `repeats` times, capturing each; keeps the last in *keep. */
static recap_status measure_capture(const recap__text *spec, const recap_pipeline_options *opts,
                                    int repeats, chain_result *r, recap_pipeline **keep) {
  double *v[5];
  recap_status st = RECAP_OK;
  for (int k = 0; k < 5; k++)
    if (!(v[k] = calloc((size_t)repeats, sizeof(double)))) st = RECAP_STATUS_OUT_OF_MEMORY;
  for (int i = 0; st == RECAP_OK && i < repeats; i++) {
    recap_pipeline *p = NULL;
    double t0 = cli_now();
    st = recap_pipeline_create_string(spec->data, spec->len, "capture-chain", opts, &p);
    double created = cli_now();
    if (st == RECAP_OK) st = recap_pipeline_capture(p);
    recap_pipeline_info info;
    if (st == RECAP_OK) st = recap_pipeline_info_get(p, &info);
    if (st == RECAP_OK && info.mode != RECAP_MODE_GRAPH) {
      fprintf(stderr, "recap %s: graphs are disabled (RECAP_DISABLE_GRAPHS)\n", CMD);
      st = RECAP_STATUS_NOT_SUPPORTED;
    }
    recap_pipeline_stats stats;
    if (st == RECAP_OK) st = recap_pipeline_stats_get(p, &stats);
    if (st == RECAP_OK) {
      v[0][i] = (created - t0) * 1e3;
      v[1][i] = stats.warmup_ms;
      v[2][i] = stats.capture_ms;
      v[3][i] = stats.instantiate_ms;
      v[4][i] = stats.capture_ms + stats.instantiate_ms;
      const recap_graph *g = NULL;
      recap_graph_info gi;
      if (recap_pipeline_graph(p, 0, &g) == RECAP_OK && recap_graph_info_get(g, &gi) == RECAP_OK)
        r->nodes = gi.nodes;
    }
    if (st == RECAP_OK && i == repeats - 1)
      *keep = p;
    else
      recap_pipeline_destroy(p);
  }
  if (st == RECAP_OK) {
    r->create_ms = median_of(v[0], repeats);
    r->warmup_ms = median_of(v[1], repeats);
    r->capture_ms = median_of(v[2], repeats);
    r->instantiate_ms = median_of(v[3], repeats);
    r->total_ms = median_of(v[4], repeats);
    cli_summary s;
    cli_summarize(v[4], repeats, &s);
    r->total_min_ms = s.min;
  }
  for (int k = 0; k < 5; k++) free(v[k]);
  return st;
}

/* Rebinds the input alternately to a second buffer and back: each re-captures the chain and
 * updates the executable in place; the counters prove it was an update. */
static recap_status measure_update(recap_pipeline *p, int rebinds, chain_result *r) {
  recap_tensor x;
  void *other = NULL;
  double *ms = calloc((size_t)rebinds, sizeof *ms);
  recap_pipeline_stats before, after;
  recap_status st = ms ? RECAP_OK : RECAP_STATUS_OUT_OF_MEMORY;
  if (st == RECAP_OK) st = recap_pipeline_tensor(p, "x", &x);
  if (st == RECAP_OK)
    st = recap_malloc(recap_stream_device(recap_pipeline_stream(p)), CHAIN_ELEMENTS * sizeof(float),
                      recap_pipeline_stream(p), &other);
  if (st == RECAP_OK) st = recap_pipeline_stats_get(p, &before);
  for (int i = 0; st == RECAP_OK && i < rebinds; i++) {
    double t0 = cli_now();
    st = recap_pipeline_rebind(p, "x", i % 2 ? x.data : other);
    ms[i] = (cli_now() - t0) * 1e3;
  }
  /* The graph still runs after the updates (and reads the original buffer again). */
  if (st == RECAP_OK && rebinds % 2) st = recap_pipeline_rebind(p, "x", x.data);
  if (st == RECAP_OK) st = recap_pipeline_run(p, 0);
  if (st == RECAP_OK) st = recap_pipeline_stats_get(p, &after);
  if (st == RECAP_OK) {
    cli_summary s;
    cli_summarize(ms, rebinds, &s);
    r->rebinds = rebinds;
    r->update_ms = s.median;
    r->update_max_ms = s.max;
    r->updates = after.updates - before.updates;
    r->instantiations = after.instantiations - before.instantiations;
  }
  if (other) {
    recap_stream_synchronize(recap_pipeline_stream(p));
    recap_free(other);
  }
  free(ms);
  return st;
}

/* CPU time of `launches` launches of one small add (recap_op_launch of an op created once), in
 * batches with a wait between them that is not counted (so the device queue never fills and
 * blocks the thread). */
static recap_status measure_op_launch(recap_pipeline *p, int launches, chain_result *r) {
  recap_stream *s = recap_pipeline_stream(p);
  recap_tensor x, bias, out;
  recap_status st;
  if ((st = recap_pipeline_tensor(p, "x", &x)) != RECAP_OK ||
      (st = recap_pipeline_tensor(p, "bias", &bias)) != RECAP_OK)
    return st;
  void *dst = NULL;
  if ((st = recap_malloc(recap_stream_device(s), CHAIN_ELEMENTS * sizeof(float), s, &dst)) !=
      RECAP_OK)
    return st;
  recap_tensor in[2] = {x, bias};
  out = (recap_tensor){.data = dst};
  recap_op_args args = {.inputs = in, .num_inputs = 2, .outputs = &out, .num_outputs = 1};
  recap_op *op = NULL;
  st = recap_op_create("add", &args, &op);
  for (int i = 0; st == RECAP_OK && i < LAUNCH_BATCH; i++) st = recap_op_launch(op, s);
  if (st == RECAP_OK) st = recap_stream_synchronize(s);
  double cpu = 0;
  int done = 0;
  while (st == RECAP_OK && done < launches) {
    double t0 = cpu_now();
    for (int i = 0; st == RECAP_OK && i < LAUNCH_BATCH; i++) st = recap_op_launch(op, s);
    cpu += cpu_now() - t0;
    done += LAUNCH_BATCH;
    if (st == RECAP_OK) st = recap_stream_synchronize(s);
  }
  if (st == RECAP_OK) {
    r->launches = done;
    r->op_launch_us = cpu / done * 1e6;
  }
  recap_stream_synchronize(s);
  recap_op_destroy(op);
  recap_free(dst);
  return st;
}

/* CPU time of an eager run per op (an eager clone of the chain) and of one replay call. */
static recap_status measure_run_cpu(recap_pipeline *p, int repeats, chain_result *r) {
  recap_pipeline *eager = NULL;
  recap_pipeline_options eo = {
      .struct_size = sizeof eo, .override_mode = 1, .mode = RECAP_MODE_EAGER};
  recap_status st = recap_pipeline_clone(p, &eo, &eager);
  double *v = calloc(REPLAYS, sizeof *v);
  if (st == RECAP_OK && !v) st = RECAP_STATUS_OUT_OF_MEMORY;
  recap_pipeline_info info;
  if (st == RECAP_OK) st = recap_pipeline_info_get(eager, &info);
  if (st == RECAP_OK) st = recap_pipeline_run(eager, 0); /* first-use work, not timed */
  int n = repeats < REPLAYS ? repeats : REPLAYS;
  for (int i = 0; st == RECAP_OK && i < n; i++) {
    double t0 = cpu_now();
    st = recap_pipeline_run_async(eager, 0, NULL);
    v[i] = (cpu_now() - t0) * 1e6 / (double)info.launches;
    if (st == RECAP_OK) st = recap_stream_synchronize(recap_pipeline_stream(eager));
  }
  if (st == RECAP_OK) r->eager_op_us = median_of(v, n);
  if (st == RECAP_OK) st = recap_pipeline_run(p, 0);
  for (int i = 0; st == RECAP_OK && i < REPLAYS; i++) {
    double t0 = cpu_now();
    st = recap_pipeline_run_async(p, 0, NULL);
    v[i] = (cpu_now() - t0) * 1e6;
    if (st == RECAP_OK) st = recap_stream_synchronize(recap_pipeline_stream(p));
  }
  if (st == RECAP_OK) r->replay_call_us = median_of(v, REPLAYS);
  free(v);
  recap_pipeline_destroy(eager);
  return st;
}

typedef struct {
  const char *spec;
  int buckets;
  double warmup_ms, capture_ms, instantiate_ms, wall_ms;
  uint64_t captures;
} bucket_result;

/* Captures every bucket of `path` (NULL: the built-in default) with B = 1..buckets. */
static recap_status measure_buckets(const char *path, recap_device dev, int buckets, bool host,
                                    bucket_result *r) {
  recap__text dim = {0};
  bool ok = recap__text_put(&dim, "B=");
  for (int b = 1; ok && b <= buckets; b++) ok = recap__text_put(&dim, "%s%d", b > 1 ? "," : "", b);
  if (!ok) {
    free(dim.data);
    return RECAP_STATUS_OUT_OF_MEMORY;
  }
  const char *dims[3] = {dim.data, host ? HOST_BUCKET_DIMS : NULL, NULL};
  recap_pipeline_options opts = {.struct_size = sizeof opts,
                                 .override_device = 1,
                                 .device = dev,
                                 .override_mode = 1,
                                 .mode = RECAP_MODE_GRAPH,
                                 .warmup = 1,
                                 .dims = dims};
  recap_pipeline *p = NULL;
  recap_status st =
      path ? recap_pipeline_create_file(path, &opts, &p)
           : recap_pipeline_create_string(cli_bench_capture_spec, strlen(cli_bench_capture_spec),
                                          DEFAULT_BUCKET_SPEC, &opts, &p);
  double t0 = cli_now();
  if (st == RECAP_OK) st = recap_pipeline_capture(p);
  double wall = (cli_now() - t0) * 1e3;
  recap_pipeline_stats stats;
  if (st == RECAP_OK) st = recap_pipeline_stats_get(p, &stats);
  if (st == RECAP_OK) {
    r->spec = path ? path : DEFAULT_BUCKET_SPEC " (built in)";
    r->buckets = (int)stats.num_buckets;
    r->warmup_ms = stats.warmup_ms;
    r->capture_ms = stats.capture_ms;
    r->instantiate_ms = stats.instantiate_ms;
    r->wall_ms = wall;
    r->captures = stats.captures;
  }
  recap_pipeline_destroy(p);
  free(dim.data);
  return st;
}

static json_t *target_json(double value, double target, bool strict) {
  json_t *o = json_object();
  json_object_set_new(o, "value_ms", json_real(value));
  json_object_set_new(o, "target_ms", json_real(target));
  json_object_set_new(o, "met", json_boolean(strict ? value < target : value <= target));
  return o;
}

int cli_bench_capture_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_bench_capture_help);
    return CLI_EXIT_OK;
  }
  capture_args a = {0};
  int rc = parse_args(argc, argv, &a);
  if (rc != CLI_EXIT_OK) return rc;
  rc = CLI_EXIT_FAILURE;
  recap__text spec = {0};
  recap_pipeline *p = NULL;
  json_t *root = NULL;
  chain_result cr = {0};
  bucket_result br = {0};
  recap_status st;
  recap_device dev;
  if (!cli_pick_device(CMD, a.device, RECAP_BACKEND_CUDA, &dev)) goto done;
  bool host = dev.backend == RECAP_BACKEND_HOST;
  int ops = a.ops_set ? (int)a.ops : host ? HOST_OPS : CUDA_OPS;
  int buckets = a.buckets_set ? (int)a.buckets : host ? HOST_BUCKETS : CUDA_BUCKETS;
  int repeats = a.repeats_set ? (int)a.repeats : host ? HOST_REPEATS : CUDA_REPEATS;
  cr.ops = ops;
  if (!chain_spec(ops, &spec)) {
    fprintf(stderr, "recap %s: out of memory\n", CMD);
    goto done;
  }
  printf("bench-capture on %s:%d%s\n", recap_backend_name(dev.backend), dev.index,
         host ? "\nhost backend: a CI-sized smoke run (small sizes), not a benchmark" : "");
  fflush(stdout);

  /* Enough recaptures for every rebind below (the default allows 16). Fusion off: the chain
   * is there to be captured as N kernel nodes, and the fusion pass would merge it into a few. */
  recap_pipeline_options opts = {.struct_size = sizeof opts,
                                 .override_device = 1,
                                 .device = dev,
                                 .override_mode = 1,
                                 .mode = RECAP_MODE_GRAPH,
                                 .warmup = 1,
                                 .max_recaptures = 2 * repeats + 2,
                                 .no_fusion = 1};
  if ((st = measure_capture(&spec, &opts, repeats, &cr, &p)) != RECAP_OK) {
    cli_report_failure(CMD, "capturing the generated chain", st);
    goto done;
  }
  printf(
      "%d-op chain (%zu graph nodes), median of %d: capture %.2f ms + instantiate %.2f ms = "
      "%.2f ms (target <= %.0f ms: %s); create %.1f ms, warmup %.1f ms\n",
      ops, cr.nodes, repeats, cr.capture_ms, cr.instantiate_ms, cr.total_ms, TARGET_CAPTURE_MS,
      cr.total_ms <= TARGET_CAPTURE_MS ? "met" : "MISSED", cr.create_ms, cr.warmup_ms);
  fflush(stdout);
  if ((st = measure_update(p, 2 * repeats, &cr)) != RECAP_OK) {
    cli_report_failure(CMD, "rebinding (graph update)", st);
    goto done;
  }
  printf(
      "update after a rebind (re-capture + exec update), median of %d: %.2f ms (max %.2f; "
      "target <= %.0f ms: %s); %" PRIu64 " in-place updates, %" PRIu64 " re-instantiations\n",
      cr.rebinds, cr.update_ms, cr.update_max_ms, TARGET_UPDATE_MS,
      cr.update_ms <= TARGET_UPDATE_MS ? "met" : "MISSED", cr.updates, cr.instantiations);
  fflush(stdout);
  if ((st = measure_op_launch(p, host ? HOST_LAUNCHES : CUDA_LAUNCHES, &cr)) != RECAP_OK ||
      (st = measure_run_cpu(p, repeats, &cr)) != RECAP_OK) {
    cli_report_failure(CMD, "measuring launch CPU time", st);
    goto done;
  }
  printf(
      "host CPU time: eager op launch %.2f us (%d launches of add[%d]), eager pipeline run "
      "%.2f us per op, replay call %.2f us (%zu-node graph)\n",
      cr.op_launch_us, cr.launches, CHAIN_ELEMENTS, cr.eager_op_us, cr.replay_call_us, cr.nodes);
  fflush(stdout);
  recap_pipeline_destroy(p);
  p = NULL;
  if ((st = measure_buckets(a.bucket_spec, dev, buckets, host, &br)) != RECAP_OK) {
    cli_report_failure(CMD, "capturing the buckets", st);
    goto done;
  }
  double bucket_ms = br.capture_ms + br.instantiate_ms;
  printf(
      "%s with B: [1..%d]: %d buckets, capture %.1f ms + instantiate %.1f ms = %.1f ms "
      "(target < %.0f ms: %s); eager warmup before it %.1f ms, %.1f ms wall in all\n",
      br.spec, buckets, br.buckets, br.capture_ms, br.instantiate_ms, bucket_ms, TARGET_BUCKETS_MS,
      bucket_ms < TARGET_BUCKETS_MS ? "met" : "MISSED", br.warmup_ms, br.wall_ms);
  fflush(stdout);
  cli_expr_load_result el;
  if ((st = cli_measure_expr_load(dev, &el)) != RECAP_OK) {
    cli_report_failure(CMD, "loading the expr pipelines", st);
    goto done;
  }
  printf(
      "%d expr ops, load with a warm kernel cache: %.1f ms vs %.1f ms for %d library ops "
      "(+%.1f ms; target <= +%.0f ms: %s); cold %.1f ms\n",
      el.expr_ops, el.warm_ms, el.library_ms, 3 * el.expr_ops, el.warm_ms - el.library_ms,
      el.target_ms, el.met ? "met" : "MISSED", el.cold_ms);

  if (a.json_path) {
    root = json_object();
    json_object_set_new(root, "command", json_string("bench-capture"));
    json_object_set_new(root, "device", json_string(recap_backend_name(dev.backend)));
    json_object_set_new(root, "smoke", json_boolean(host));
    json_t *c = json_object();
    json_object_set_new(c, "ops", json_integer(ops));
    json_object_set_new(c, "graph_nodes", json_integer((json_int_t)cr.nodes));
    json_object_set_new(c, "repeats", json_integer(repeats));
    json_object_set_new(c, "create_ms", json_real(cr.create_ms));
    json_object_set_new(c, "warmup_ms", json_real(cr.warmup_ms));
    json_object_set_new(c, "capture_ms", json_real(cr.capture_ms));
    json_object_set_new(c, "instantiate_ms", json_real(cr.instantiate_ms));
    json_object_set_new(c, "capture_instantiate_min_ms", json_real(cr.total_min_ms));
    json_object_set_new(c, "target", target_json(cr.total_ms, TARGET_CAPTURE_MS, false));
    json_object_set_new(root, "capture", c);
    json_t *u = json_object();
    json_object_set_new(u, "rebinds", json_integer(cr.rebinds));
    json_object_set_new(u, "median_ms", json_real(cr.update_ms));
    json_object_set_new(u, "max_ms", json_real(cr.update_max_ms));
    json_object_set_new(u, "in_place_updates", json_integer((json_int_t)cr.updates));
    json_object_set_new(u, "reinstantiations", json_integer((json_int_t)cr.instantiations));
    json_object_set_new(u, "target", target_json(cr.update_ms, TARGET_UPDATE_MS, false));
    json_object_set_new(root, "update", u);
    json_t *b = json_object();
    json_object_set_new(b, "spec", json_string(br.spec));
    json_object_set_new(b, "buckets", json_integer(br.buckets));
    json_object_set_new(b, "captures", json_integer((json_int_t)br.captures));
    json_object_set_new(b, "warmup_ms", json_real(br.warmup_ms));
    json_object_set_new(b, "capture_ms", json_real(br.capture_ms));
    json_object_set_new(b, "instantiate_ms", json_real(br.instantiate_ms));
    json_object_set_new(b, "wall_ms", json_real(br.wall_ms));
    json_object_set_new(b, "target", target_json(bucket_ms, TARGET_BUCKETS_MS, true));
    json_object_set_new(root, "buckets", b);
    json_t *e = json_object();
    json_object_set_new(e, "expr_ops", json_integer(el.expr_ops));
    json_object_set_new(e, "cold_ms", json_real(el.cold_ms));
    json_object_set_new(e, "library_ops_ms", json_real(el.library_ms));
    json_object_set_new(e, "warm_ms", json_real(el.warm_ms));
    json_object_set_new(e, "target", target_json(el.warm_ms - el.library_ms, el.target_ms, false));
    json_object_set_new(root, "expr_load", e);
    json_t *cpu = json_object();
    json_object_set_new(cpu, "op_launch_us", json_real(cr.op_launch_us));
    json_object_set_new(cpu, "op_launches", json_integer(cr.launches));
    json_object_set_new(cpu, "eager_pipeline_per_op_us", json_real(cr.eager_op_us));
    json_object_set_new(cpu, "replay_call_us", json_real(cr.replay_call_us));
    json_object_set_new(cpu, "replay_graph_nodes", json_integer((json_int_t)cr.nodes));
    json_object_set_new(cpu, "clock", json_string("CLOCK_THREAD_CPUTIME_ID"));
    json_object_set_new(root, "cpu", cpu);
    if (!cli_write_json(CMD, root, dev, a.json_path)) goto done;
  }
  rc = CLI_EXIT_OK;
done:
  json_decref(root);
  recap_pipeline_destroy(p);
  free(spec.data);
  return rc;
}
