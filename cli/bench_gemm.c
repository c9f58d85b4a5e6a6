/* bench_gemm.c: `recap bench-gemm`: recap's linear over a grid of shapes, against PyTorch.
 *
 * Three modes. --grid-out FILE writes the grid (the points and how each is timed) for the
 * PyTorch peer (bench/peer/peer_torch_gemm.py), which times F.linear plus the activation (plus
 * the residual) over the same file. Without it the command times recap on the grid: each point
 * as a captured graph (a chain of `chain` launches, replayed between two device events) and
 * eagerly (the same chain launched one by one through recap_op_launch between two events),
 * each launch reading the next of `copies` copies of the operands, median of `samples`
 * pairs, reported per launch. --recap/--peer compare result files (bench_gemm_report.c): the
 * table, the recap/PyTorch heat map, the geomeans, the worst point and the losses.
 */
#include "cli/bench_gemm.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/tensors.h"

static const char *const CMD = "bench-gemm";

enum { MAX_RUNS = 8 };

static const cli_option bench_gemm_options[] = {
    {.flag = "--device",
     .value = "D",
     .kind = CLI_VALUE_WORDS,
     .words = "cuda host",
     .help = "cuda or host (default: cuda when there is a GPU; the host backend runs\n"
             "the tiny grid as a smoke test)"},
    {.flag = "--grid",
     .value = "G",
     .kind = CLI_VALUE_FILE,
     .help = "full, tiny or a grid file (--grid-out's or --losses' format)\n"
             "(default: full on CUDA, tiny on the host)"},
    {.flag = "--grid-out",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "write the grid as JSON for the PyTorch peer and stop (no device)"},
    {.flag = "--json",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "timing: write the results; comparing: write the compared points"},
    {.flag = "--recap",
     .value = "LIST",
     .kind = CLI_VALUE_TEXT,
     .help = "compare: recap's result files, comma-separated (no device)"},
    {.flag = "--peer",
     .value = "LIST",
     .kind = CLI_VALUE_TEXT,
     .help = "compare: PyTorch's result files, one per --recap file; run i of\n"
             "each list forms a pair (run them interleaved: A B A B)"},
    {.flag = "--threshold",
     .value = "R",
     .kind = CLI_VALUE_TEXT,
     .help = "compare: a loss is recap/PyTorch graph time above R in every pair\n"
             "(default 1.02)"},
    {.flag = "--svg",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "compare: the heat map of recap/PyTorch graph time per point"},
    {.flag = "--losses",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "compare: write the losses as a grid file (re-run both sides on it)"},
    {.flag = "--summary-only",
     .kind = CLI_VALUE_NONE,
     .help = "compare: the summary and the losses, not the per-point table"},
    {0}};

const cli_help cli_bench_gemm_help = {
    .synopsis =
        "recap bench-gemm [--device cuda|host] [--grid G] [--json FILE]\n"
        "recap bench-gemm --grid-out FILE [--grid G]\n"
        "recap bench-gemm --recap A[,A2] --peer B[,B2] [--svg FILE] [--losses FILE]\n"
        "                 [--json FILE] [--threshold R] [--summary-only]",
    .description =
        "Times recap's linear (x weight^T + bias, an activation, a residual) over a grid of\n"
        "shapes, as captured graphs and eagerly, for comparison with PyTorch's F.linear plus\n"
        "the activation (bench/peer/peer_torch_gemm.py, same grid file, same timing).\n"
        "The full grid: M 1..8192 x the (N, K) pairs of the models import-hf writes (Llama\n"
        "3.2 1B, Llama 3 8B, Qwen2 7B, GPT-2) in bf16 with three epilogues; every activation x\n"
        "bias x residual on four pairs; f16 and f32 (TF32 on and off) on eight. Small points\n"
        "run as a chain of up to 100 launches per event pair, cycling over copies of the\n"
        "operands so that they are read from memory, not the L2 cache; medians per launch.\n"
        "scripts/gpu/gemm_sweep.sh runs both sides and the comparison (docs/perf/gemm_sweep.md).",
    .groups = {{.options = bench_gemm_options}},
};

typedef struct {
  const char *device, *grid, *grid_out, *json, *recap, *peer, *svg, *losses, *threshold;
  bool summary_only;
} gemm_args;

static int parse_args(int argc, char **argv, gemm_args *a) {
  for (int i = 0; i < argc; i++) {
    int m;
    if ((m = cli_flag(CMD, argc, argv, &i, "--device", &a->device)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--grid", &a->grid)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--grid-out", &a->grid_out)) != 0 ||
        (m = cli_json_flag(CMD, argc, argv, &i, &a->json)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--recap", &a->recap)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--peer", &a->peer)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--svg", &a->svg)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--losses", &a->losses)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--threshold", &a->threshold)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--summary-only", NULL)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
      a->summary_only = true;
    } else {
      if (cli_positional(CMD, argv[i]))
        fprintf(stderr, "recap %s: takes no positional arguments (got '%s')\n", CMD, argv[i]);
      return CLI_EXIT_USAGE;
    }
  }
  const bool compare = a->recap || a->peer;
  if (compare && !(a->recap && a->peer)) {
    fprintf(stderr, "recap %s: --recap and --peer go together\n", CMD);
    return CLI_EXIT_USAGE;
  }
  if (!compare && (a->svg || a->losses || a->threshold || a->summary_only)) {
    fprintf(stderr,
            "recap %s: --svg, --losses, --threshold and --summary-only need --recap and "
            "--peer\n",
            CMD);
    return CLI_EXIT_USAGE;
  }
  if (compare && (a->grid || a->grid_out || a->device)) {
    fprintf(stderr, "recap %s: comparing takes no --grid, --grid-out or --device\n", CMD);
    return CLI_EXIT_USAGE;
  }
  if (a->svg && !cli_output_writable(CMD, a->svg)) return CLI_EXIT_USAGE;
  return CLI_EXIT_OK;
}

/* Splits "a,b" in place into list[]; false (reported) for an empty item or too many. */
static bool split_list(const char *flag, char *text, const char **list, int *count) {
  *count = 0;
  for (char *s = text;;) {
    char *comma = strchr(s, ',');
    if (comma) *comma = '\0';
    if (!*s || *count == MAX_RUNS) {
      fprintf(stderr, "recap %s: %s expects up to %d comma-separated files\n", CMD, flag, MAX_RUNS);
      return false;
    }
    list[(*count)++] = s;
    if (!comma) return true;
    s = comma + 1;
  }
}

static int run_compare(const gemm_args *a) {
  char *rl = strdup(a->recap), *pl = strdup(a->peer);
  const char *recap[MAX_RUNS], *peer[MAX_RUNS];
  int nr = 0, np = 0, rc = CLI_EXIT_USAGE;
  double threshold = 1.02;
  if (!rl || !pl) {
    fprintf(stderr, "recap %s: out of memory\n", CMD);
    rc = CLI_EXIT_FAILURE;
    goto done;
  }
  if (!split_list("--recap", rl, recap, &nr) || !split_list("--peer", pl, peer, &np)) goto done;
  if (nr != np) {
    fprintf(stderr, "recap %s: --recap names %d files and --peer %d; they pair up\n", CMD, nr, np);
    goto done;
  }
  if (a->threshold) {
    char *end;
    threshold = strtod(a->threshold, &end);
    if (*end || !(threshold >= 1.0 && threshold <= 10.0)) {
      fprintf(stderr, "recap %s: --threshold expects a ratio in [1, 10], got '%s'\n", CMD,
              a->threshold);
      goto done;
    }
  }
  bench_gemm_compare_request req = {.recap_paths = recap,
                                    .peer_paths = peer,
                                    .pairs = nr,
                                    .threshold = threshold,
                                    .svg_path = a->svg,
                                    .losses_path = a->losses,
                                    .json_path = a->json,
                                    .quiet = a->summary_only};
  rc = bench_gemm_compare(&req, stdout) == 0 ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
done:
  free(rl);
  free(pl);
  return rc;
}

/* ---- timing ---------------------------------------------------------------------------------- */

typedef struct {
  recap_device dev;
  recap_stream *stream;
  recap_event *start, *end;
  void *arena;
  size_t arena_bytes;
  char filled[8]; /* the dtype the arena holds random numbers of */
} gemm_ctx;

static recap_dtype point_dtype(const bench_gemm_point *p) {
  return strcmp(p->dtype, "f32") == 0   ? RECAP_DTYPE_F32
         : strcmp(p->dtype, "f16") == 0 ? RECAP_DTYPE_F16
                                        : RECAP_DTYPE_BF16;
}

/* Fills the whole arena with uniform [-1, 1) numbers of the point's dtype (once per dtype). */
static recap_status fill_arena(gemm_ctx *c, const bench_gemm_point *p) {
  if (strcmp(c->filled, p->dtype) == 0) return RECAP_OK;
  const int64_t cols = 4096, rows = (int64_t)(c->arena_bytes / bench_gemm_elem_bytes(p)) / cols;
  char shape[64];
  snprintf(shape, sizeof shape, "[%" PRId64 ", %" PRId64 "]", rows, cols);
  recap_op_attr attrs[] = {{"shape", shape}, {"dtype", p->dtype}, {"low", "-1"}, {"high", "1"}};
  recap_tensor out = {.data = c->arena};
  recap_op_args args = {.outputs = &out, .num_outputs = 1, .attrs = attrs, .num_attrs = 4};
  recap_status st = recap_op_run("random_uniform", &args, c->stream);
  if (st == RECAP_OK) snprintf(c->filled, sizeof c->filled, "%s", p->dtype);
  return st;
}

static recap_tensor tensor_at(void *base, int64_t offset, recap_dtype dt, int ndim, int64_t d0,
                              int64_t d1) {
  recap_tensor t = {.data = (char *)base + offset, .dtype = dt, .ndim = ndim};
  if (ndim == 1) {
    t.shape[0] = d0;
    t.strides[0] = 1;
  } else {
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.strides[0] = d1;
    t.strides[1] = 1;
  }
  return t;
}

/* The linear of copy `c` of point p. */
static recap_status make_linear(gemm_ctx *g, const bench_gemm_point *p, int c, recap_op **op) {
  const bench_gemm_layout l = bench_gemm_point_layout(p);
  const recap_dtype dt = point_dtype(p);
  const int64_t base = (int64_t)c * l.stride;
  recap_tensor in[4];
  int n = 0;
  in[n++] = tensor_at(g->arena, base + l.x, dt, 2, p->m, p->k);
  in[n++] = tensor_at(g->arena, base + l.w, dt, 2, p->n, p->k);
  if (p->bias) in[n++] = tensor_at(g->arena, base + l.bias, dt, 1, p->n, 0);
  if (p->residual) in[n++] = tensor_at(g->arena, base + l.residual, dt, 2, p->m, p->n);
  recap_tensor out = {.data = (char *)g->arena + base + l.out};
  recap_op_attr attrs[2] = {{"act", p->act}, {"residual", "true"}};
  recap_op_args args = {.inputs = in,
                        .num_inputs = n,
                        .outputs = &out,
                        .num_outputs = 1,
                        .attrs = attrs,
                        .num_attrs = p->residual ? 2 : 1};
  return recap_op_create("linear", &args, op);
}

static recap_status launch_chain(gemm_ctx *g, recap_op **ops, const bench_gemm_point *p) {
  for (int i = 0; i < p->chain; i++) {
    recap_status st = recap_op_launch(ops[i % p->copies], g->stream);
    if (st != RECAP_OK) return st;
  }
  return RECAP_OK;
}

/* samples event pairs around the chain (graph: one replay of it); *us gets the median per
 * launch. */
static recap_status time_chain(gemm_ctx *g, recap_op **ops, recap_graph *graph,
                               const bench_gemm_point *p, double *ms, cli_summary *us) {
  recap_status st;
  for (int s = 0; s < p->samples; s++) {
    if ((st = recap_event_record(g->start, g->stream)) != RECAP_OK) return st;
    st = graph ? recap_graph_replay(graph, g->stream) : launch_chain(g, ops, p);
    if (st != RECAP_OK) return st;
    if ((st = recap_event_record(g->end, g->stream)) != RECAP_OK ||
        (st = recap_event_synchronize(g->end)) != RECAP_OK)
      return st;
    float e = 0;
    if ((st = recap_event_elapsed_ms(g->start, g->end, &e)) != RECAP_OK) return st;
    ms[s] = (double)e * 1e3 / p->chain;
  }
  cli_summarize(ms, p->samples, us);
  return RECAP_OK;
}

static recap_status time_point(gemm_ctx *g, const bench_gemm_point *p, cli_summary *graph_us,
                               cli_summary *eager_us) {
  recap_op *ops[1000] = {0};
  recap_graph *graph = NULL;
  double *ms = malloc((size_t)p->samples * sizeof *ms);
  recap_status st = ms ? RECAP_OK : RECAP_STATUS_OUT_OF_MEMORY;
  recap_gemm_set_allow_tf32(p->tf32);
  if (st == RECAP_OK) st = fill_arena(g, p);
  for (int c = 0; st == RECAP_OK && c < p->copies; c++) st = make_linear(g, p, c, &ops[c]);
  /* Warmup: prepares every copy's GEMM (handles, workspace, algorithm) outside any capture. */
  if (st == RECAP_OK) st = launch_chain(g, ops, p);
  if (st == RECAP_OK) st = recap_stream_synchronize(g->stream);
  if (st == RECAP_OK) st = time_chain(g, ops, NULL, p, ms, eager_us);
  if (st == RECAP_OK) st = recap_graph_create(&graph);
  if (st == RECAP_OK)
    st = recap_graph_capture_begin(graph, g->stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL);
  if (st == RECAP_OK) {
    recap_status launched = launch_chain(g, ops, p);
    st = recap_graph_capture_end(graph);
    if (launched != RECAP_OK) st = launched;
  }
  if (st == RECAP_OK) st = recap_graph_replay(graph, g->stream);
  if (st == RECAP_OK) st = time_chain(g, ops, graph, p, ms, graph_us);
  recap_stream_synchronize(g->stream);
  recap_graph_destroy(graph);
  for (int c = 0; c < p->copies; c++) recap_op_destroy(ops[c]);
  free(ms);
  return st;
}

static const char *epilogue_text(const bench_gemm_point *p, char *buf, size_t size) {
  snprintf(buf, size, "%s%s%s", p->bias ? "bias+" : "", p->act, p->residual ? "+residual" : "");
  return buf;
}

static int run_timing(const gemm_args *a) {
  bench_gemm_grid grid = {0};
  gemm_ctx g = {0};
  json_t *root = NULL, *pts = NULL;
  int rc = CLI_EXIT_FAILURE, failed = 0;
  recap_status st;
  if (!cli_pick_device(CMD, a->device, RECAP_BACKEND_CUDA, &g.dev)) return CLI_EXIT_FAILURE;
  const bool host = g.dev.backend == RECAP_BACKEND_HOST;
  const char *gname = a->grid ? a->grid : host ? "tiny" : "full";
  const bool ok =
      strchr(gname, '.') ? bench_gemm_grid_read(gname, &grid) : bench_gemm_grid_make(gname, &grid);
  if (!ok) return CLI_EXIT_USAGE;
  size_t need = 0;
  for (size_t i = 0; i < grid.count; i++) {
    const bench_gemm_point *p = &grid.points[i];
    const size_t b = (size_t)bench_gemm_point_layout(p).stride * (size_t)p->copies;
    if (b > need) need = b;
  }
  need = (need + 16383) / 16384 * 16384; /* whole rows of 4096 f32 for the fill */
  recap_device_properties props = {0};
  if ((st = recap_device_properties_get(g.dev, &props)) != RECAP_OK ||
      (st = recap_stream_create(g.dev, 0, RECAP_STREAM_NON_BLOCKING, &g.stream)) != RECAP_OK ||
      (st = recap_event_create(g.dev, RECAP_EVENT_TIMING, &g.start)) != RECAP_OK ||
      (st = recap_event_create(g.dev, RECAP_EVENT_TIMING, &g.end)) != RECAP_OK ||
      (st = recap_malloc(g.dev, need, g.stream, &g.arena)) != RECAP_OK) {
    cli_report_failure(CMD, "setting up the device", st);
    goto done;
  }
  g.arena_bytes = need;
  printf("bench-gemm on %s:%d (%s): grid %s, %zu points, %.2f GB of operands%s\n",
         recap_backend_name(g.dev.backend), g.dev.index, props.name, grid.name, grid.count,
         need / 1e9, host ? "\nhost backend: a smoke run, not a benchmark" : "");
  printf(
      "per launch, median: graph = a captured chain replayed between two events, eager = the "
      "chain launched one by one\n");
  printf("%5s %-8s %-22s %-5s %5s %6s %6s %-24s %10s %10s\n", "id", "group", "pair", "dtype", "M",
         "N", "K", "epilogue", "graph us", "eager us");
  root = json_object();
  pts = json_array();
  for (size_t i = 0; i < grid.count; i++) {
    const bench_gemm_point *p = &grid.points[i];
    cli_summary gs = {0}, es = {0};
    char epi[64];
    st = time_point(&g, p, &gs, &es);
    json_t *o = bench_gemm_point_json(p);
    if (st != RECAP_OK) {
      failed++;
      fprintf(stderr, "recap %s: point %d (%s M=%" PRId64 "): %s\n", CMD, p->id, p->label, p->m,
              recap_last_error());
      json_object_set_new(o, "error", json_string(recap_last_error()));
      json_object_set_new(o, "graph_us", json_null());
      json_object_set_new(o, "eager_us", json_null());
    } else {
      json_object_set_new(o, "graph_us", cli_json_number(gs.median));
      json_object_set_new(o, "graph_p10_us", cli_json_number(gs.p10));
      json_object_set_new(o, "graph_p90_us", cli_json_number(gs.p90));
      json_object_set_new(o, "eager_us", cli_json_number(es.median));
    }
    json_array_append_new(pts, o);
    printf("%5d %-8s %-22s %-5s %5" PRId64 " %6" PRId64 " %6" PRId64 " %-24s %10.2f %10.2f\n",
           p->id, p->group, p->label, p->tf32 ? "tf32" : p->dtype, p->m, p->n, p->k,
           epilogue_text(p, epi, sizeof epi), gs.median, es.median);
    fflush(stdout);
  }
  recap_gemm_set_allow_tf32(0);
  printf("%zu points timed, %d failed\n", grid.count - (size_t)failed, failed);
  if (a->json) {
    json_object_set_new(root, "command", json_string("bench-gemm"));
    json_object_set_new(root, "side", json_string("recap"));
    json_object_set_new(root, "grid", json_string(grid.name));
    json_object_set_new(root, "device_name", json_string(props.name));
    json_object_set_new(root, "smoke", json_boolean(host));
    const char *tune = getenv("RECAP_TUNE");
    json_object_set_new(
        root, "settings",
        json_string(tune && *tune && strcmp(tune, "0") != 0 ? "RECAP_TUNE on" : "RECAP_TUNE off"));
    json_object_set(root, "points", pts);
    if (!cli_write_json(CMD, root, g.dev, a->json)) goto done;
  }
  rc = failed ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
done:
  json_decref(pts);
  json_decref(root);
  if (g.stream) recap_stream_synchronize(g.stream);
  recap_free(g.arena);
  recap_event_destroy(g.end);
  recap_event_destroy(g.start);
  recap_stream_destroy(g.stream);
  bench_gemm_grid_free(&grid);
  return rc;
}

static int write_grid(const gemm_args *a) {
  bench_gemm_grid grid;
  const char *gname = a->grid ? a->grid : "full";
  const bool ok =
      strchr(gname, '.') ? bench_gemm_grid_read(gname, &grid) : bench_gemm_grid_make(gname, &grid);
  if (!ok) return CLI_EXIT_USAGE;
  json_t *root = bench_gemm_grid_json(&grid);
  const int rc =
      json_dump_file(root, a->grid_out, JSON_INDENT(1)) == 0 ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
  if (rc == CLI_EXIT_OK)
    printf("wrote %s: grid %s, %zu points\n", a->grid_out, grid.name, grid.count);
  else
    cli_report_write_failure(CMD, a->grid_out, errno);
  json_decref(root);
  bench_gemm_grid_free(&grid);
  return rc;
}

int cli_bench_gemm_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_bench_gemm_help);
    return CLI_EXIT_OK;
  }
  gemm_args a = {0};
  int rc = parse_args(argc, argv, &a);
  if (rc != CLI_EXIT_OK) return rc;
  if (a.recap) return run_compare(&a);
  if (a.grid_out) return write_grid(&a);
  return run_timing(&a);
}
