/* run.c: `recap run SPEC ...`: runs a pipeline and prints its outputs and timing. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/safetensors.h"
#include "cli/tensors.h"
#include "runtime/env.h"

static const char *const CMD = "run";

enum { FIRST_VALUES = 6 };

static const cli_option run_options[] = {
    {.flag = "--mode",
     .value = "M",
     .kind = CLI_VALUE_WORDS,
     .words = "eager graph",
     .help = "graph (default: capture each bucket, replay) or eager (op by op)"},
    {.flag = "--device",
     .value = "D",
     .kind = CLI_VALUE_WORDS,
     .words = "cuda host",
     .help = "cuda or host (default: the spec's; the host backend when there is no GPU)"},
    {.flag = "--iters",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "timed runs (default: the spec's run.iters, at most\n"
             "" CLI_STR(CLI_HOST_ITERS_CAP) " on host)"},
    {.flag = "--warmup",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "runs before timing; in graph mode also the warmups of each bucket\n"
             "before capture; 0: none (default: the spec's run.warmup, at most\n"
             "" CLI_STR(CLI_HOST_WARMUP_CAP) " on host)"},
    {.flag = "--dim",
     .value = "NAME=VALUE",
     .kind = CLI_VALUE_TEXT,
     .help = "for the bucketed dim: a batch of VALUE real rows (default: the largest\n"
             "bucket; runs the smallest bucket >= VALUE); for any other dim: replaces\n"
             "the spec's value (repeatable; VALUE may be another dim's\n"
             "name: an alias of it)"},
    {.flag = "--entry",
     .value = "NAME",
     .kind = CLI_VALUE_TEXT,
     .help = "use the dims of the spec's entry NAME (`entries:`), before --dim"},
    {.flag = "--seed",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "seed of the random inputs, 0 to 2^64-1 (default: the spec's seed:,\n"
             "else a fresh random seed)"},
    {.flag = "--json",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "write the outputs, timing and stats as JSON to FILE (- for stdout: the\n"
             "text then goes to stderr); it records the GPU, driver and library\n"
             "versions"},
    {.flag = "--save-tensors",
     .value = "F",
     .kind = CLI_VALUE_FILE,
     .help = "write params, inputs, states and scalars (as the last run read them)\n"
             "and outputs to F (.safetensors: loadable by\n"
             "safetensors.torch.load_file)"},
    {.flag = "--base-dir",
     .value = "DIR",
     .kind = CLI_VALUE_DIR,
     .help = "files the spec names (params) must lie under DIR (for specs from\n"
             "untrusted sources)"},
    {.flag = "--no-fusion",
     .kind = CLI_VALUE_NONE,
     .help = "run every elementwise op as its own kernel (no fusion pass; as\n"
             "RECAP_FUSION=0)"},
    {.flag = "--memory-snapshot",
     .value = "F",
     .kind = CLI_VALUE_FILE,
     .help = "write the device allocator's snapshot (JSON) at the end of the run,\n"
             "before the pipeline is destroyed (draw it with recap memviz)"},
    {0}};
const cli_help cli_run_help = {
    .synopsis =
        "recap run SPEC [--mode eager|graph] [--device cuda|host] [--iters N]\n"
        "          [--warmup N] [--dim NAME=VALUE] [--entry NAME] [--seed N]\n"
        "          [--json FILE] [--save-tensors FILE.safetensors] [--base-dir DIR]\n"
        "          [--no-fusion] [--memory-snapshot FILE.json]\n"
        "recap run SPEC --world N --rank R [--init URL] [--timeout S] [flags]\n"
        "recap run SPEC --init env:// [--timeout S] [flags]",
    .description =
        "Runs the pipeline: inputs get what their init says (normal and uniform drawn from a\n"
        "seeded generator; the seed is printed), then warmup runs, then N timed runs (device\n"
        "events around each). Prints every output's shape, checksum and first values, and the\n"
        "timing.",
    .epilog =
        "  with --world, run takes --mode, --device, --iters, --warmup, --dim, --seed, --json\n"
        "  and --base-dir (see recap launch --help)",
    .operand = CLI_VALUE_SPEC,
    .groups = {{.options = run_options},
               {.heading =
                    "One rank of a distributed run (recap launch starts every rank with these):",
                .options = cli_run_dist_options}},
};

typedef struct {
  const char *path, *mode, *save_path, *snapshot_path, *json_path;
  cli_run_flags common;
} run_args;

static int parse_args(int argc, char **argv, run_args *a) {
  for (int i = 0; i < argc; i++) {
    int m;
    if ((m = cli_json_flag(CMD, argc, argv, &i, &a->json_path)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_run_flag(CMD, argc, argv, &i, &a->common)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--mode", &a->mode)) != 0 ||
               (m = cli_flag(CMD, argc, argv, &i, "--save-tensors", &a->save_path)) != 0 ||
               (m = cli_flag(CMD, argc, argv, &i, "--memory-snapshot", &a->snapshot_path)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if (!cli_take_one(CMD, "spec", argv[i], &a->path)) {
      return CLI_EXIT_USAGE;
    }
  }
  if (!a->path) {
    cli_help_print(stderr, &cli_run_help);
    return CLI_EXIT_USAGE;
  }
  if (a->mode && strcmp(a->mode, "eager") != 0 && strcmp(a->mode, "graph") != 0) {
    fprintf(stderr, "recap %s: --mode expects eager or graph, got '%s'\n", CMD, a->mode);
    return CLI_EXIT_USAGE;
  }
  if (!cli_run_flags_check(CMD, &a->common)) return CLI_EXIT_USAGE;
  /* The files written after the runs: a path that cannot be written fails now, not then. */
  if ((a->save_path && !cli_output_writable(CMD, a->save_path)) ||
      (a->snapshot_path && !cli_output_writable(CMD, a->snapshot_path)))
    return CLI_EXIT_USAGE;
  return CLI_EXIT_OK;
}

static json_t *shape_json(const cli_tensor *t) {
  json_t *a = json_array();
  for (int d = 0; d < t->ndim; d++) json_array_append_new(a, json_integer(t->shape[d]));
  return a;
}

static void print_shape(const cli_tensor *t) {
  printf("%s [", recap_dtype_name(t->dtype));
  for (int d = 0; d < t->ndim; d++) printf("%s%" PRId64, d ? ", " : "", t->shape[d]);
  printf("]");
}

/* Params (read back from the device), inputs, states and scalars (as the last run read them)
 * and outputs in one file: what it takes to reproduce the outputs. A tensor in two of these
 * sets (a state listed in outputs) is written once, from the first. */
static bool save_tensors(recap_pipeline *p, const char *path, const cli_host_tensors *inputs,
                         const cli_host_tensors *states, const cli_host_tensors *outputs,
                         uint64_t seed, int64_t batch) {
  recap_pipeline_info pi;
  recap_status st = recap_pipeline_info_get(p, &pi);
  if (st != RECAP_OK) {
    cli_report_failure(CMD, "reading the pipeline", st);
    return false;
  }
  size_t n = inputs->count + states->count + outputs->count + pi.num_tensors;
  cli_safetensor *entries = calloc(n ? n : 1, sizeof *entries);
  cli_tensor *params = calloc(n ? n : 1, sizeof *params);
  void **param_host = calloc(n ? n : 1, sizeof *param_host);
  bool ok = entries && params && param_host;
  size_t k = 0, np = 0;
  for (size_t t = 0; ok && t < pi.num_tensors; t++) {
    cli_tensor *info = &params[np];
    if ((st = cli_tensor_describe(p, t, batch, info)) == RECAP_OK && info->role != RECAP_ROLE_PARAM)
      continue;
    recap_tensor dev;
    if (st == RECAP_OK) st = recap_pipeline_tensor(p, info->name, &dev);
    if (st == RECAP_OK && !(param_host[np] = malloc(info->bytes ? info->bytes : 1)))
      st = RECAP_STATUS_OUT_OF_MEMORY;
    if (st == RECAP_OK) st = cli_read_device(p, dev.data, param_host[np], info->bytes);
    if (st != RECAP_OK) {
      cli_report_failure(CMD, "reading param", st);
      ok = false;
      np++;
      break;
    }
    entries[k++] = (cli_safetensor){info->name,  info->dtype,    info->ndim,
                                    info->shape, param_host[np], info->bytes};
    np++;
  }
  const cli_host_tensors *sets[3] = {inputs, states, outputs};
  for (int s = 0; ok && s < 3; s++)
    for (size_t i = 0; i < sets[s]->count; i++) {
      const cli_host_tensor *h = &sets[s]->items[i];
      bool seen = false;
      for (size_t j = 0; j < k && !seen; j++) seen = strcmp(entries[j].name, h->info.name) == 0;
      if (seen) continue;
      entries[k++] = (cli_safetensor){h->info.name,  h->info.dtype, h->info.ndim,
                                      h->info.shape, h->host,       h->info.bytes};
    }
  char seed_text[32], batch_text[32];
  snprintf(seed_text, sizeof seed_text, "%" PRIu64, seed);
  snprintf(batch_text, sizeof batch_text, "%" PRId64, batch);
  const char *meta[] = {
      "format",     "pt",
      "producer",   "recap run",
      "spec",       pi.name,
      "input_seed", seed_text,
      "batch",      batch_text,
      "states",     "states and scalars as before the last run (the one that made the outputs)",
      NULL};
  if (ok)
    ok = cli_safetensors_write(path, entries, k, meta);
  else if (!entries || !params || !param_host)
    fprintf(stderr, "recap %s: out of memory saving tensors\n", CMD);
  for (size_t i = 0; param_host && i < np; i++) free(param_host[i]);
  free(param_host);
  free(params);
  free(entries);
  return ok;
}

/* Times runs [from, to) of `total` into ms[from..to) (cli_time_runs); with `progress`, one
 * at a time with a line each on stderr, so that a long host run shows it is moving. */
static recap_status time_runs(recap_pipeline *p, int64_t batch, int from, int to, int total,
                              double *ms, bool progress) {
  if (!progress) return cli_time_runs(p, batch, to - from, ms + from);
  for (int i = from; i < to; i++) {
    recap_status st = cli_time_runs(p, batch, 1, ms + i);
    if (st != RECAP_OK) return st;
    fprintf(stderr, "recap %s: timed run %d of %d: %.1f s\n", CMD, i + 1, total, ms[i] / 1e3);
  }
  return RECAP_OK;
}

/* The allocator's state with the pipeline still alive (its arena, params and graph pools). */
static bool write_snapshot(recap_device device, const char *path) {
  char *json = NULL;
  recap_status st = recap_memory_snapshot_json(device, &json);
  if (st != RECAP_OK) {
    cli_report_failure(CMD, "taking the memory snapshot", st);
    return false;
  }
  FILE *f = fopen(path, "w");
  bool ok = f && fputs(json, f) >= 0 && fputc('\n', f) != EOF;
  if (f && fclose(f) != 0) ok = false;
  if (!ok) cli_report_write_failure(CMD, path, errno);
  free(json);
  return ok;
}

int cli_run_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_run_help);
    return CLI_EXIT_OK;
  }
  /* One rank of a distributed run (cli/launch.c). */
  if (cli_dist_requested(argc, argv)) return cli_run_dist_main(argc, argv);
  run_args a = {0};
  int rc = parse_args(argc, argv, &a);
  if (rc != CLI_EXIT_OK) return rc;
  rc = CLI_EXIT_FAILURE;
  recap__model *model = NULL;
  recap_pipeline *p = NULL;
  cli_host_tensors bound = {0}, inputs = {0}, states = {0}, outputs = {0};
  double *ms = NULL;
  json_t *root = NULL;
  recap_status st;
  cli_load_request load = cli_run_load_request(a.path, &a.common);
  size_t bucket;
  int64_t batch;
  if ((rc = cli_load(CMD, &load, &model, &bucket, &batch)) != CLI_EXIT_OK) goto done;
  const recap__spec *spec = model->spec;
  recap_pipeline_options opts = RECAP_PIPELINE_OPTIONS_INIT;
  if (a.mode) {
    opts.override_mode = 1;
    opts.mode = strcmp(a.mode, "eager") == 0 ? RECAP_MODE_EAGER : RECAP_MODE_GRAPH;
  }
  cli_run_setup rs;
  cli_run_setup_resolve(&a.common, model, bucket, batch, &opts, &rs);
  rc = CLI_EXIT_FAILURE;
  /* Before anything is allocated: a spec sized for a GPU can take hours on the CPU. */
  bool eager_mode = opts.override_mode && opts.mode == RECAP_MODE_EAGER;
  int engine_warmups = eager_mode ? 0 : rs.warmup * (int)model->num_buckets;
  bool slow =
      opts.device.backend == RECAP_BACKEND_HOST &&
      cli_warn_host_work(CMD, a.path, model, rs.bucket, engine_warmups + rs.warmup + rs.iters);

  if ((st = recap__pipeline_create_model(model, &opts, &p)) != RECAP_OK) {
    cli_report_failure(CMD, "creating the pipeline", st);
    goto done;
  }
  recap_pipeline_info pi;
  if ((st = recap_pipeline_info_get(p, &pi)) != RECAP_OK) {
    cli_report_failure(CMD, "reading the pipeline", st);
    goto done;
  }
  /* The environment wins over the flag (recap.h): say so rather than time eager runs as if
   * they were the graphs asked for. */
  if (opts.override_mode && opts.mode == RECAP_MODE_GRAPH && pi.mode == RECAP_MODE_EAGER &&
      recap__env_bool("RECAP_DISABLE_GRAPHS", 0) == 1)
    fprintf(stderr,
            "recap %s: warning: --mode graph, but RECAP_DISABLE_GRAPHS is set: running "
            "eagerly\n",
            CMD);
  /* Before anything runs or is written: an output over the spec or its weights destroys them. */
  const char *const written[] = {a.save_path, a.json_path};
  static const char *const flags[] = {"--save-tensors", "--json"};
  for (int w = 0; w < 2; w++) {
    char which[4096];
    if (written[w] && cli_output_replaces_input(p, a.path, written[w], which, sizeof which)) {
      fprintf(stderr, "recap %s: %s %s would replace %s, which this run reads\n", CMD, flags[w],
              written[w], which);
      rc = CLI_EXIT_USAGE;
      goto done;
    }
  }
  bool graph = pi.mode == RECAP_MODE_GRAPH;
  if ((st = cli_inputs_read_bound(p, &bound)) != RECAP_OK ||
      (st = cli_inputs_make(p, &bound, rs.batch, rs.seed, &inputs)) != RECAP_OK ||
      (st = cli_inputs_copy_in(p, &inputs)) != RECAP_OK) {
    cli_report_failure(CMD, "preparing the inputs", st);
    goto done;
  }
  printf("%s (%s) on %s:%d, %s mode", spec->name, a.path, recap_backend_name(opts.device.backend),
         opts.device.index, graph ? "graph" : "eager");
  if (spec->bucket_dim >= 0)
    printf(", %s=%" PRId64 " (bucket %" PRId64 ")", spec->dims[spec->bucket_dim].name, rs.batch,
           pi.bucket_values[rs.bucket]);
  /* The seed matters only when some input draws random numbers: zeros or a file need none. */
  size_t random = 0;
  for (size_t i = 0; i < inputs.count; i++)
    random += cli_init_is_random(&inputs.items[i].info.init);
  if (!random)
    printf("\ninputs%s\n", inputs.count ? ", none of them random:" : ": none");
  else if (strcmp(rs.seed_from, "spec") == 0)
    printf("\ninputs, the random ones from seed %" PRIu64
           " (the spec's seed:; --seed N overrides it):\n",
           rs.seed);
  else if (strcmp(rs.seed_from, "random") == 0)
    printf("\ninputs, the random ones from seed %" PRIu64 " (fresh; --seed %" PRIu64
           " reproduces them):\n",
           rs.seed, rs.seed);
  else
    printf("\ninputs, the random ones from seed %" PRIu64 " (--seed):\n", rs.seed);
  for (size_t i = 0; i < inputs.count; i++) {
    char init[512];
    printf("  %-12s ", inputs.items[i].info.name);
    print_shape(&inputs.items[i].info);
    printf("  %s\n", cli_init_describe(&inputs.items[i].info.init, init, sizeof init));
  }
  fflush(stdout);
  double t0 = cli_now();
  if (slow && graph)
    fprintf(stderr, "recap %s: capturing, after %d warmup run%s per bucket...\n", CMD, rs.warmup,
            rs.warmup == 1 ? "" : "s");
  if (graph && (st = recap_pipeline_capture(p)) != RECAP_OK) {
    cli_report_failure(CMD, "capturing", st);
    goto done;
  }
  double capture_wall_ms = (cli_now() - t0) * 1e3;
  for (int i = 0; i < rs.warmup; i++) {
    if ((st = recap_pipeline_run(p, rs.batch)) != RECAP_OK) {
      cli_report_failure(CMD, "warmup run", st);
      goto done;
    }
    if (slow) fprintf(stderr, "recap %s: warmup run %d of %d done\n", CMD, i + 1, rs.warmup);
  }
  if (!(ms = malloc((size_t)rs.iters * sizeof *ms))) {
    fprintf(stderr, "recap %s: out of memory\n", CMD);
    goto done;
  }
  /* Runs update states in place: --save-tensors keeps them as the last run reads them, taken
   * between two timed runs (each run is timed on its own, so the copy is not in any time). */
  int before_last = a.save_path ? rs.iters - 1 : rs.iters;
  if ((st = time_runs(p, rs.batch, 0, before_last, rs.iters, ms, slow)) != RECAP_OK ||
      (a.save_path && (st = cli_states_copy_out(p, rs.batch, &states)) != RECAP_OK) ||
      (st = time_runs(p, rs.batch, before_last, rs.iters, rs.iters, ms, slow)) != RECAP_OK) {
    cli_report_failure(CMD, "running", st);
    goto done;
  }
  if ((st = cli_outputs_copy_out(p, rs.batch, &outputs)) != RECAP_OK) {
    cli_report_failure(CMD, "copying the outputs", st);
    goto done;
  }
  cli_summary sum;
  cli_summarize(ms, rs.iters, &sum);
  recap_pipeline_stats stats;
  if ((st = recap_pipeline_stats_get(p, &stats)) != RECAP_OK) {
    cli_report_failure(CMD, "reading the stats", st);
    goto done;
  }

  if (a.json_path) {
    root = json_object();
    json_object_set_new(root, "spec", json_string(a.path));
    json_object_set_new(root, "name", json_string(spec->name));
    json_object_set_new(root, "device", json_string(recap_backend_name(opts.device.backend)));
    json_object_set_new(root, "mode", json_string(graph ? "graph" : "eager"));
    json_object_set_new(root, "batch", json_integer(rs.batch));
    json_object_set_new(root, "bucket", json_integer(pi.bucket_values[rs.bucket]));
    json_object_set_new(root, "seed", cli_seed_json(rs.seed));
    json_object_set_new(root, "seed_from", json_string(rs.seed_from));
    json_object_set_new(root, "fused_ops", json_integer((json_int_t)pi.fused_ops));
    json_object_set_new(root, "warmup", json_integer(rs.warmup));
    json_object_set_new(root, "iters", json_integer(rs.iters));
    json_t *timing = json_object(), *samples = json_array();
    json_object_set_new(timing, "median_ms", json_real(sum.median));
    json_object_set_new(timing, "p10_ms", json_real(sum.p10));
    json_object_set_new(timing, "p90_ms", json_real(sum.p90));
    json_object_set_new(timing, "mean_ms", json_real(sum.mean));
    json_object_set_new(timing, "min_ms", json_real(sum.min));
    json_object_set_new(timing, "max_ms", json_real(sum.max));
    for (int i = 0; i < rs.iters; i++) json_array_append_new(samples, json_real(ms[i]));
    json_object_set_new(timing, "samples_ms", samples);
    json_object_set_new(root, "timing", timing);
    json_t *setup = json_object();
    json_object_set_new(setup, "load_ms", json_real(stats.load_ms));
    json_object_set_new(setup, "bind_ms", json_real(stats.bind_ms));
    json_object_set_new(setup, "warmup_ms", json_real(stats.warmup_ms));
    json_object_set_new(setup, "capture_ms", json_real(stats.capture_ms));
    json_object_set_new(setup, "instantiate_ms", json_real(stats.instantiate_ms));
    json_object_set_new(setup, "capture_total_wall_ms", json_real(capture_wall_ms));
    json_object_set_new(root, "setup", setup);
    json_t *outs = json_array();
    for (size_t i = 0; i < outputs.count; i++) {
      const cli_host_tensor *h = &outputs.items[i];
      size_t n = h->info.bytes / recap_dtype_size(h->info.dtype);
      double s, abs_s;
      size_t nonfinite;
      cli_checksum(h->host, h->info.dtype, n, &s, &abs_s, &nonfinite);
      json_t *o = json_object(), *first = json_array();
      json_object_set_new(o, "name", json_string(h->info.name));
      json_object_set_new(o, "dtype", json_string(recap_dtype_name(h->info.dtype)));
      json_object_set_new(o, "shape", shape_json(&h->info));
      json_object_set_new(o, "sum", cli_json_number(s));
      json_object_set_new(o, "abs_sum", cli_json_number(abs_s));
      json_object_set_new(o, "nonfinite", json_integer((json_int_t)nonfinite));
      for (size_t j = 0; j < n && j < FIRST_VALUES; j++)
        json_array_append_new(first, cli_json_number(cli_value(h->host, h->info.dtype, j)));
      json_object_set_new(o, "first", first);
      json_array_append_new(outs, o);
    }
    json_object_set_new(root, "outputs", outs);
    json_t *js = json_object();
    json_object_set_new(js, "eager_runs", json_integer((json_int_t)stats.eager_runs));
    json_object_set_new(js, "replays", json_integer((json_int_t)stats.replays));
    json_object_set_new(js, "captures", json_integer((json_int_t)stats.captures));
    json_object_set_new(js, "launches_per_eager_run", json_integer((json_int_t)pi.launches));
    json_object_set_new(js, "arena_bytes", json_integer((json_int_t)stats.arena_bytes));
    json_object_set_new(js, "pool_reserved_bytes",
                        json_integer((json_int_t)stats.pool_reserved_bytes));
    json_object_set_new(js, "param_bytes", json_integer((json_int_t)stats.param_bytes));
    json_object_set_new(root, "stats", js);
  }
  printf("setup: load %.1f ms, bind %.1f ms", stats.load_ms, stats.bind_ms);
  if (graph)
    printf(", warmup %.1f ms, capture %.1f ms, instantiate %.1f ms (%zu bucket%s)", stats.warmup_ms,
           stats.capture_ms, stats.instantiate_ms, stats.num_buckets,
           stats.num_buckets == 1 ? "" : "s");
  printf(
      "\ntiming: %d run%s after %d warmup (device events): median %.4f ms, p10 %.4f, "
      "p90 %.4f, min %.4f, max %.4f\n",
      rs.iters, rs.iters == 1 ? "" : "s", rs.warmup, sum.median, sum.p10, sum.p90, sum.min,
      sum.max);
  printf("outputs:\n");
  for (size_t i = 0; i < outputs.count; i++) {
    const cli_host_tensor *h = &outputs.items[i];
    size_t n = h->info.bytes / recap_dtype_size(h->info.dtype);
    double s, abs_s;
    size_t nonfinite;
    cli_checksum(h->host, h->info.dtype, n, &s, &abs_s, &nonfinite);
    printf("  %-12s ", h->info.name);
    print_shape(&h->info);
    printf("  sum %.6g  abs sum %.6g", s, abs_s);
    if (nonfinite) printf("  (%zu non-finite element%s)", nonfinite, nonfinite == 1 ? "" : "s");
    printf("\n               first:");
    for (size_t j = 0; j < n && j < FIRST_VALUES; j++)
      printf(" %.6g", cli_value(h->host, h->info.dtype, j));
    printf("%s\n", n > FIRST_VALUES ? " ..." : "");
  }
  printf("stats: %" PRIu64 " %s, %" PRIu64 " eager %s (%zu %s each), %" PRIu64
         " %s; arena %zu B, pool %zu B, params %zu B\n",
         stats.replays, cli_plural((long long)stats.replays, "replay", "replays"), stats.eager_runs,
         cli_plural((long long)stats.eager_runs, "run", "runs"), pi.launches,
         cli_plural((long long)pi.launches, "launch", "launches"), stats.captures,
         cli_plural((long long)stats.captures, "capture", "captures"), stats.arena_bytes,
         stats.pool_reserved_bytes, stats.param_bytes);
  if (a.save_path) {
    if (!save_tensors(p, a.save_path, &inputs, &states, &outputs, rs.seed, rs.batch)) goto done;
    printf("saved params, inputs, states, scalars and outputs to %s\n", a.save_path);
  }
  if (a.snapshot_path) {
    if (!write_snapshot(opts.device, a.snapshot_path)) goto done;
    printf("wrote the memory snapshot to %s\n", a.snapshot_path);
  }
  /* One line on the GEMM tuner when RECAP_TUNE is set (stderr, as it always was). */
  cli_print_gemm_tune_stats(stderr);
  /* Last, so that --json - gets the complete result after every text line. */
  if (a.json_path && !cli_write_json(CMD, root, opts.device, a.json_path)) goto done;
  rc = CLI_EXIT_OK;
done:
  json_decref(root);
  free(ms);
  cli_host_tensors_free(&outputs);
  cli_host_tensors_free(&states);
  cli_host_tensors_free(&inputs);
  cli_host_tensors_free(&bound);
  if (p && (st = recap_pipeline_destroy(p)) != RECAP_OK) {
    cli_report_failure(CMD, "destroying the pipeline", st);
    rc = CLI_EXIT_FAILURE;
  }
  recap__model_release(model);
  return rc;
}
