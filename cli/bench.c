/* bench.c: `recap bench SPEC ...`: eager against graph replay, side by side. */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/svg.h"
#include "cli/tensors.h"

static const char *const CMD = "bench";

/* Rotation (--rotate): bench/peer/peer_torch.py's rule, so both sides rotate alike. A set of
 * params + inputs + states + scalars between 1 MiB and 200 MB gets K copies with K x set >=
 * 200 MB (four times the H100's 50 MB L2), at most 16; a smaller set is launch-bound and a
 * larger one does not fit the L2 anyway. */
#define ROTATE_MAX 16 /* a macro: the help text states it */
enum { ROTATE_MIN_SET = 1 << 20 };
static const double ROTATE_TARGET_BYTES = 200e6;

static const cli_option bench_options[] = {
    {.flag = "--iters",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "timed iterations per mode (default: the spec's run.iters, at most\n"
             "" CLI_STR(CLI_HOST_ITERS_CAP) " on the host backend)"},
    {.flag = "--warmup",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "untimed iterations per mode first, also the engine's warmups before\n"
             "capture; 0: none (default: the spec's run.warmup, at most\n"
             "" CLI_STR(CLI_HOST_WARMUP_CAP) " on host)"},
    {.flag = "--dim",
     .value = "NAME=VALUE",
     .kind = CLI_VALUE_TEXT,
     .help = "for the bucketed dim: a batch of VALUE real rows (default: the largest\n"
             "bucket); for any other dim: replaces the spec's value (repeatable;\n"
             "VALUE may be another dim's name: an alias of it)"},
    {.flag = "--entry",
     .value = "NAME",
     .kind = CLI_VALUE_TEXT,
     .help = "use the dims of the spec's entry NAME (`entries:`), before --dim"},
    {.flag = "--device",
     .value = "D",
     .kind = CLI_VALUE_WORDS,
     .words = "cuda host",
     .help = "cuda or host (default: the spec's; host when there is no GPU)"},
    {.flag = "--seed",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "seed of the random inputs, 0 to 2^64-1 (default: the spec's seed:,\n"
             "else a fresh random seed)"},
    {.flag = "--json",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "write the results as JSON (- for stdout: the text then goes\n"
             "to stderr); it records the GPU, driver and library versions"},
    {.flag = "--svg",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "write a bar chart (median, p10-p90 whiskers) as SVG"},
    {.flag = "--rotate",
     .value = "K|auto",
     .kind = CLI_VALUE_TEXT,
     .help = "K pipeline instances with their own params, inputs and state (not\n"
             "shared weights); iterations cycle through them so a pipeline whose\n"
             "data fits the L2 cache is not timed L2-warm. auto: K x (params +\n"
             "inputs + states) >= 200 MB when one set holds 1-200 MB,\n"
             "K <= " CLI_STR(ROTATE_MAX) ", else 1 (bench/peer/peer_torch.py's rule). Default 1"},
    {.flag = "--base-dir",
     .value = "DIR",
     .kind = CLI_VALUE_DIR,
     .help = "files the spec names (params) must lie under DIR (for specs from\n"
             "untrusted sources)"},
    {.flag = "--no-fusion",
     .kind = CLI_VALUE_NONE,
     .help = "run every elementwise op as its own kernel (no fusion pass; as\n"
             "RECAP_FUSION=0)"},
    {0}};
const cli_help cli_bench_help = {
    .synopsis =
        "recap bench SPEC [--iters N] [--warmup N] [--dim NAME=VALUE] [--entry NAME]\n"
        "            [--device cuda|host] [--seed N] [--json FILE] [--svg FILE]\n"
        "            [--base-dir DIR] [--rotate K|auto] [--no-fusion]",
    .description =
        "Runs the pipeline eagerly (op by op) and as CUDA graph replays on the same inputs and\n"
        "weights, and compares them: per-iteration median, p10 and p90 from device events (one\n"
        "event pair per iteration), the speedup, capture and instantiate time (host clock), the\n"
        "private pool's bytes and the launches per iteration.",
    .operand = CLI_VALUE_SPEC,
    .groups = {{.options = bench_options}},
};

typedef struct {
  const char *path, *json_path, *svg_path, *rotate;
  cli_run_flags common;
} bench_args;

static int parse_args(int argc, char **argv, bench_args *a) {
  for (int i = 0; i < argc; i++) {
    int m;
    if ((m = cli_run_flag(CMD, argc, argv, &i, &a->common)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_json_flag(CMD, argc, argv, &i, &a->json_path)) != 0 ||
               (m = cli_flag(CMD, argc, argv, &i, "--svg", &a->svg_path)) != 0 ||
               (m = cli_flag(CMD, argc, argv, &i, "--rotate", &a->rotate)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if (!cli_take_one(CMD, "spec", argv[i], &a->path)) {
      return CLI_EXIT_USAGE;
    }
  }
  if (!a->path) {
    cli_help_print(stderr, &cli_bench_help);
    return CLI_EXIT_USAGE;
  }
  if (!cli_run_flags_check(CMD, &a->common)) return CLI_EXIT_USAGE;
  if (a->svg_path && !cli_output_writable(CMD, a->svg_path)) return CLI_EXIT_USAGE;
  if (!cli_output_spares(CMD, "--json", a->json_path, a->path) ||
      !cli_output_spares(CMD, "--svg", a->svg_path, a->path))
    return CLI_EXIT_USAGE;
  long long k;
  if (a->rotate && strcmp(a->rotate, "auto") != 0 &&
      !cli_parse_int(CMD, "--rotate", a->rotate, 1, ROTATE_MAX, &k))
    return CLI_EXIT_USAGE;
  return CLI_EXIT_OK;
}

/* Bytes of one rotation set: every param, input, state and scalar (largest bucket). */
static recap_status rotation_set_bytes(recap_pipeline *p, size_t num_tensors, size_t *out) {
  size_t bytes = 0;
  for (size_t t = 0; t < num_tensors; t++) {
    recap_tensor_info x;
    recap_status st = recap_pipeline_tensor_info_get(p, t, &x);
    if (st != RECAP_OK) return st;
    if (x.role != RECAP_ROLE_INTERMEDIATE) bytes += x.bytes;
  }
  *out = bytes;
  return RECAP_OK;
}

/* --rotate's K: the number given, or auto's rule above (1 without the flag). */
static int rotation_count(const char *arg, size_t set_bytes) {
  if (!arg) return 1;
  if (strcmp(arg, "auto") != 0) return atoi(arg); /* checked by parse_args */
  if (set_bytes < ROTATE_MIN_SET || (double)set_bytes >= ROTATE_TARGET_BYTES) return 1;
  int k = (int)((ROTATE_TARGET_BYTES + (double)set_bytes - 1) / (double)set_bytes);
  return k > ROTATE_MAX ? ROTATE_MAX : k;
}

/* What one mode measured. */
typedef struct {
  cli_summary time;
  double *ms;
  size_t launches; /* launches submitted per iteration */
} mode_result;

/* Iteration i runs instance ps[i % k]: warmup (rounded up to whole rounds, so that every
 * instance gets as many; none for 0), then `iters` timed ones, each between two events on
 * that instance's stream and waited for (cli_time_runs's method). */
static recap_status measure(recap_pipeline **ps, int k, int64_t batch, int warmup, int iters,
                            mode_result *out) {
  recap_status st = RECAP_OK;
  for (int i = 0; st == RECAP_OK && i < (warmup + k - 1) / k * k; i++)
    st = recap_pipeline_run(ps[i % k], batch);
  if (st != RECAP_OK) return st;
  if (k == 1) {
    st = cli_time_runs(ps[0], batch, iters, out->ms);
  } else {
    recap_event *start = NULL, *end = NULL;
    recap_device device = recap_stream_device(recap_pipeline_stream(ps[0]));
    if ((st = recap_event_create(device, RECAP_EVENT_TIMING, &start)) == RECAP_OK)
      st = recap_event_create(device, RECAP_EVENT_TIMING, &end);
    for (int i = 0; st == RECAP_OK && i < iters; i++) {
      recap_stream *s = recap_pipeline_stream(ps[i % k]);
      float ms = 0;
      if ((st = recap_event_record(start, s)) == RECAP_OK &&
          (st = recap_pipeline_run_async(ps[i % k], batch, NULL)) == RECAP_OK &&
          (st = recap_event_record(end, s)) == RECAP_OK &&
          (st = recap_event_synchronize(end)) == RECAP_OK &&
          (st = recap_event_elapsed_ms(start, end, &ms)) == RECAP_OK)
        out->ms[i] = ms;
    }
    recap_event_destroy(end);
    recap_event_destroy(start);
  }
  if (st == RECAP_OK) cli_summarize(out->ms, iters, &out->time);
  return st;
}

static json_t *mode_json(const mode_result *r, int iters) {
  json_t *o = json_object(), *samples = json_array();
  json_object_set_new(o, "median_ms", json_real(r->time.median));
  json_object_set_new(o, "p10_ms", json_real(r->time.p10));
  json_object_set_new(o, "p90_ms", json_real(r->time.p90));
  json_object_set_new(o, "mean_ms", json_real(r->time.mean));
  json_object_set_new(o, "min_ms", json_real(r->time.min));
  json_object_set_new(o, "max_ms", json_real(r->time.max));
  json_object_set_new(o, "launches_per_iter", json_integer((json_int_t)r->launches));
  for (int i = 0; i < iters; i++) json_array_append_new(samples, json_real(r->ms[i]));
  json_object_set_new(o, "samples_ms", samples);
  return o;
}

/* Whether eager and graph outputs can be compared: state tensors and random draws advance
 * with every run, and the two instances ran different numbers of times. */
static recap_status comparable(recap_pipeline *p, const recap_pipeline_info *info, bool *out) {
  *out = !info->draws_random;
  for (size_t t = 0; *out && t < info->num_tensors; t++) {
    recap_tensor_info x;
    recap_status st = recap_pipeline_tensor_info_get(p, t, &x);
    if (st != RECAP_OK) return st;
    if (x.role == RECAP_ROLE_STATE) *out = false;
  }
  return RECAP_OK;
}

int cli_bench_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_bench_help);
    return CLI_EXIT_OK;
  }
  bench_args a = {0};
  int rc = parse_args(argc, argv, &a);
  if (rc != CLI_EXIT_OK) return rc;
  rc = CLI_EXIT_FAILURE;
  recap__model *model = NULL;
  recap_pipeline *graph = NULL, *eager = NULL;
  /* Rotation instances: [0] is graph / eager; the others are destroyed separately. */
  recap_pipeline *graphs[ROTATE_MAX] = {0}, *eagers[ROTATE_MAX] = {0};
  int rotate = 1;
  cli_host_tensors bound = {0}, inputs = {0}, out_eager = {0}, out_graph = {0};
  mode_result re = {0}, rg = {0};
  json_t *root = NULL;
  recap_status st;
  cli_load_request load = cli_run_load_request(a.path, &a.common);
  size_t bucket;
  int64_t batch;
  double t0 = cli_now();
  if ((rc = cli_load(CMD, &load, &model, &bucket, &batch)) != CLI_EXIT_OK) goto done;
  rc = CLI_EXIT_FAILURE;
  const recap__spec *spec = model->spec;
  recap_pipeline_options opts = {
      .struct_size = sizeof opts, .override_mode = 1, .mode = RECAP_MODE_GRAPH};
  cli_run_setup rs;
  cli_run_setup_resolve(&a.common, model, bucket, batch, &opts, &rs);
  bool host = opts.device.backend == RECAP_BACKEND_HOST;
  /* Before anything is allocated: a spec sized for a GPU can take hours on the CPU. Each mode
   * runs warmup + iters, and the capture warms every bucket first. */
  if (host)
    cli_warn_host_work(CMD, a.path, model, rs.bucket,
                       2 * (rs.warmup + rs.iters) + rs.warmup * (int)model->num_buckets);

  printf("%s (%s) on %s:%d", spec->name, a.path, recap_backend_name(opts.device.backend),
         opts.device.index);
  if (spec->bucket_dim >= 0) printf(", %s=%" PRId64, spec->dims[spec->bucket_dim].name, rs.batch);
  printf(
      "\n%d timed iterations after %d warmup per mode%s; inputs as their init says, random "
      "ones from seed %" PRIu64 " (%s)\n",
      rs.iters, rs.warmup, rs.iters_capped ? " (capped for the host backend; --iters sets it)" : "",
      rs.seed, strcmp(rs.seed_from, "spec") == 0 ? "the spec's seed:" : rs.seed_from);
  fflush(stdout);

  if ((st = recap__pipeline_create_model(model, &opts, &graph)) != RECAP_OK) {
    cli_report_failure(CMD, "creating the pipeline", st);
    goto done;
  }
  double create_ms = (cli_now() - t0) * 1e3;
  recap_pipeline_info gi, ei;
  if ((st = recap_pipeline_info_get(graph, &gi)) != RECAP_OK) {
    cli_report_failure(CMD, "reading the pipeline", st);
    goto done;
  }
  if (gi.mode != RECAP_MODE_GRAPH) {
    fprintf(stderr, "recap %s: graphs are disabled (RECAP_DISABLE_GRAPHS): nothing to compare\n",
            CMD);
    goto done;
  }
  /* The eager instance shares the weights: one copy of the params, identical values. */
  recap_pipeline_options eager_opts = {.struct_size = sizeof eager_opts,
                                       .override_mode = 1,
                                       .mode = RECAP_MODE_EAGER,
                                       .warmup = opts.warmup,
                                       .warmup_set = opts.warmup_set};
  if ((st = recap_pipeline_clone(graph, &eager_opts, &eager)) != RECAP_OK) {
    cli_report_failure(CMD, "cloning the pipeline", st);
    goto done;
  }
  if ((st = cli_inputs_read_bound(graph, &bound)) != RECAP_OK ||
      (st = cli_inputs_make(graph, &bound, rs.batch, rs.seed, &inputs)) != RECAP_OK ||
      (st = cli_inputs_copy_in(graph, &inputs)) != RECAP_OK ||
      (st = cli_inputs_copy_in(eager, &inputs)) != RECAP_OK) {
    cli_report_failure(CMD, "preparing the inputs", st);
    goto done;
  }
  graphs[0] = graph;
  eagers[0] = eager;
  size_t set_bytes;
  if ((st = recap_pipeline_info_get(eager, &ei)) != RECAP_OK ||
      (st = rotation_set_bytes(graph, gi.num_tensors, &set_bytes)) != RECAP_OK) {
    cli_report_failure(CMD, "reading the pipeline", st);
    goto done;
  }
  rotate = rotation_count(a.rotate, set_bytes);
  for (int k = 1; k < rotate; k++) {
    /* A new model, not a clone: its own params (the same values, other memory). */
    recap__model *own = NULL;
    size_t same_bucket;
    int64_t same_batch;
    if (cli_load(CMD, &load, &own, &same_bucket, &same_batch) != CLI_EXIT_OK) goto done;
    st = recap__pipeline_create_model(own, &opts, &graphs[k]);
    recap__model_release(own);
    if (st != RECAP_OK ||
        (st = recap_pipeline_clone(graphs[k], &eager_opts, &eagers[k])) != RECAP_OK ||
        (st = cli_inputs_copy_in(graphs[k], &inputs)) != RECAP_OK ||
        (st = cli_inputs_copy_in(eagers[k], &inputs)) != RECAP_OK) {
      cli_report_failure(CMD, "creating the rotation instances", st);
      goto done;
    }
  }
  if (rotate > 1) {
    char b0[32];
    printf(
        "rotation: %d instances with their own params, inputs and state (%s each), cycled "
        "per iteration\n",
        rotate, cli_format_bytes(set_bytes, b0, sizeof b0));
    fflush(stdout);
  }
  if (!(re.ms = malloc((size_t)rs.iters * sizeof *re.ms)) ||
      !(rg.ms = malloc((size_t)rs.iters * sizeof *rg.ms))) {
    fprintf(stderr, "recap %s: out of memory\n", CMD);
    goto done;
  }
  re.launches = ei.launches;
  rg.launches = 1;
  if ((st = measure(eagers, rotate, rs.batch, rs.warmup, rs.iters, &re)) != RECAP_OK) {
    cli_report_failure(CMD, "eager runs", st);
    goto done;
  }
  t0 = cli_now();
  if ((st = recap_pipeline_capture(graph)) != RECAP_OK) {
    cli_report_failure(CMD, "capturing", st);
    goto done;
  }
  double capture_wall_ms = (cli_now() - t0) * 1e3;
  for (int k = 1; k < rotate; k++)
    if ((st = recap_pipeline_capture(graphs[k])) != RECAP_OK) {
      cli_report_failure(CMD, "capturing a rotation instance", st);
      goto done;
    }
  if ((st = measure(graphs, rotate, rs.batch, rs.warmup, rs.iters, &rg)) != RECAP_OK) {
    cli_report_failure(CMD, "graph replays", st);
    goto done;
  }
  recap_pipeline_stats gs, es;
  recap_graph_info info = {0};
  const recap_graph *captured = NULL;
  bool check = false;
  if ((st = recap_pipeline_stats_get(graph, &gs)) != RECAP_OK ||
      (st = recap_pipeline_stats_get(eager, &es)) != RECAP_OK ||
      (st = recap_pipeline_graph(graph, rs.bucket, &captured)) != RECAP_OK ||
      (st = recap_graph_info_get(captured, &info)) != RECAP_OK ||
      (st = comparable(graph, &gi, &check)) != RECAP_OK) {
    cli_report_failure(CMD, "reading the stats", st);
    goto done;
  }
  size_t mismatches = 0;
  double max_diff = 0;
  if (check) {
    if ((st = cli_outputs_copy_out(eager, rs.batch, &out_eager)) != RECAP_OK ||
        (st = cli_outputs_copy_out(graph, rs.batch, &out_graph)) != RECAP_OK) {
      cli_report_failure(CMD, "copying the outputs", st);
      goto done;
    }
    for (size_t i = 0; i < out_graph.count; i++) {
      double d = 0;
      const cli_tensor *t = &out_graph.items[i].info;
      mismatches += cli_compare(out_graph.items[i].host, out_eager.items[i].host, t->dtype,
                                t->bytes / recap_dtype_size(t->dtype), &d);
      if (d > max_diff) max_diff = d;
    }
  }
  double speedup = rg.time.median > 0 ? re.time.median / rg.time.median : 0;

  char b1[32], b2[32], b3[32];
  printf("\n%-8s %12s %12s %12s %12s   (ms per iteration, device events)\n", "", "median", "p10",
         "p90", "mean");
  printf("%-8s %12.4f %12.4f %12.4f %12.4f\n", "eager", re.time.median, re.time.p10, re.time.p90,
         re.time.mean);
  printf("%-8s %12.4f %12.4f %12.4f %12.4f\n", "graph", rg.time.median, rg.time.p10, rg.time.p90,
         rg.time.mean);
  printf("speedup  %.2fx (eager median / graph median)\n\n", speedup);
  printf(
      "setup (host clock): create %.1f ms (load %.1f, bind %.1f); %zu bucket%s: warmup %.1f "
      "ms, capture %.2f ms, instantiate+upload %.2f ms (%.1f ms in all)\n",
      create_ms, gs.load_ms, gs.bind_ms, gs.num_buckets, gs.num_buckets == 1 ? "" : "s",
      gs.warmup_ms, gs.capture_ms, gs.instantiate_ms, capture_wall_ms);
  /* Graph memory as docs/BENCHMARKS.md defines it for both sides: what graph mode holds
   * beyond params, inputs, states and scalars. recap's intermediates, outputs and
   * capture-time allocations are all in the private pool. */
  size_t graph_bytes = gs.pool_reserved_bytes;
  printf(
      "memory: graph memory %s = private pool reserved (arena %s, plus the outputs); params "
      "%s shared by graph and eager%s\n",
      cli_format_bytes(graph_bytes, b1, sizeof b1), cli_format_bytes(gs.arena_bytes, b2, sizeof b2),
      cli_format_bytes(gs.param_bytes, b3, sizeof b3),
      rotate > 1 ? " (per rotation instance)" : "");
  printf("launches per iteration: eager %zu op %s, graph 1 graph launch (%zu %s)\n", re.launches,
         cli_plural((long long)re.launches, "launch", "launches"), info.nodes,
         cli_plural((long long)info.nodes, "node", "nodes"));
  if (check)
    printf("outputs: graph %s eager (max |diff| %.3g, %zu element%s out of tolerance)\n",
           mismatches ? "DIFFERS from" : "matches", max_diff, mismatches,
           mismatches == 1 ? "" : "s");
  else
    printf("outputs: not compared (the spec keeps state or draws random numbers)\n");

  if (a.json_path) {
    root = json_object();
    json_object_set_new(root, "spec", json_string(a.path));
    json_object_set_new(root, "name", json_string(spec->name));
    json_object_set_new(root, "device", json_string(recap_backend_name(opts.device.backend)));
    json_object_set_new(root, "batch", json_integer(rs.batch));
    json_object_set_new(root, "bucket", json_integer(gi.bucket_values[rs.bucket]));
    json_object_set_new(root, "iters", json_integer(rs.iters));
    json_object_set_new(root, "warmup", json_integer(rs.warmup));
    json_object_set_new(root, "seed", cli_seed_json(rs.seed));
    json_object_set_new(root, "seed_from", json_string(rs.seed_from));
    /* Spec ops the fusion pass folded into fused ops (0 with --no-fusion). */
    json_object_set_new(root, "fused_ops", json_integer((json_int_t)gi.fused_ops));
    json_object_set_new(root, "rotate", json_integer(rotate));
    json_object_set_new(root, "rotate_set_bytes", json_integer((json_int_t)set_bytes));
    json_object_set_new(root, "spec_ops", json_integer((json_int_t)spec->num_ops));
    json_t *jg = mode_json(&rg, rs.iters);
    json_object_set_new(jg, "graph_nodes", json_integer((json_int_t)info.nodes));
    json_object_set_new(root, "eager", mode_json(&re, rs.iters));
    json_object_set_new(root, "graph", jg);
    json_object_set_new(root, "speedup", json_real(speedup));
    json_t *setup = json_object();
    json_object_set_new(setup, "create_ms", json_real(create_ms));
    json_object_set_new(setup, "warmup_ms", json_real(gs.warmup_ms));
    json_object_set_new(setup, "capture_ms", json_real(gs.capture_ms));
    json_object_set_new(setup, "instantiate_ms", json_real(gs.instantiate_ms));
    json_object_set_new(setup, "capture_total_wall_ms", json_real(capture_wall_ms));
    json_object_set_new(setup, "buckets", json_integer((json_int_t)gs.num_buckets));
    json_object_set_new(root, "setup", setup);
    json_t *mem = json_object();
    json_object_set_new(mem, "pool_reserved_bytes",
                        json_integer((json_int_t)gs.pool_reserved_bytes));
    json_object_set_new(mem, "arena_bytes", json_integer((json_int_t)gs.arena_bytes));
    json_object_set_new(mem, "param_bytes", json_integer((json_int_t)gs.param_bytes));
    json_object_set_new(mem, "graph_bytes", json_integer((json_int_t)graph_bytes));
    json_object_set_new(root, "memory", mem);
    if (check) {
      json_t *c = json_object();
      json_object_set_new(c, "mismatches", json_integer((json_int_t)mismatches));
      json_object_set_new(c, "max_abs_diff", cli_json_number(max_diff));
      json_object_set_new(root, "graph_vs_eager", c);
    }
    if (!cli_write_json(CMD, root, opts.device, a.json_path)) goto done;
  }
  if (a.svg_path) {
    char title[256], subtitle[256], footer[256];
    snprintf(title, sizeof title, "%s: eager vs graph replay", spec->name);
    if (spec->bucket_dim >= 0)
      snprintf(subtitle, sizeof subtitle, "%s=%" PRId64 " on %s; speedup %.2fx; %zu %s vs 1",
               spec->dims[spec->bucket_dim].name, rs.batch,
               host ? "the host backend (CPU)" : "CUDA", speedup, re.launches,
               cli_plural((long long)re.launches, "launch", "launches"));
    else
      snprintf(subtitle, sizeof subtitle, "on %s; speedup %.2fx; %zu %s vs 1",
               host ? "the host backend (CPU)" : "CUDA", speedup, re.launches,
               cli_plural((long long)re.launches, "launch", "launches"));
    snprintf(footer, sizeof footer,
             "bars: median; whiskers: p10-p90 of %d iterations (device events), after %d warmup",
             rs.iters, rs.warmup);
    cli_bar bars[2] = {{"eager (op by op)", re.time.median, re.time.p10, re.time.p90, "#d9534f"},
                       {"graph replay", rg.time.median, rg.time.p10, rg.time.p90, "#3c8dbc"}};
    cli_chart chart = {title, subtitle, footer, bars, 2};
    if (!cli_svg_write_bars(a.svg_path, &chart)) goto done;
    printf("wrote %s\n", a.svg_path);
  }
  /* One line on the GEMM tuner when RECAP_TUNE is set. */
  cli_print_gemm_tune_stats(stderr);
  rc = check && mismatches ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
done:
  json_decref(root);
  free(re.ms);
  free(rg.ms);
  cli_host_tensors_free(&out_graph);
  cli_host_tensors_free(&out_eager);
  cli_host_tensors_free(&inputs);
  cli_host_tensors_free(&bound);
  for (int k = ROTATE_MAX - 1; k >= 1; k--) {
    recap_pipeline_destroy(eagers[k]);
    recap_pipeline_destroy(graphs[k]);
  }
  recap_pipeline_destroy(eager);
  recap_pipeline_destroy(graph);
  recap__model_release(model);
  return rc;
}
