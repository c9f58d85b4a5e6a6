/* bench_decode.c: `recap bench-decode SPEC`: the decode step of a paged serving spec
 * (`recap import-hf --paged`) at several batch sizes, every sequence at the same context.
 *
 * Each batch's sequences get blocks of their own and a context of --context keys (what the
 * keys hold does not change the work, so no prefill runs); then --tokens decode steps run back
 * to back with no host copy between them (decode_advance moves every row on and feeds the
 * greedy token back on the device), between two device events: step time = elapsed / tokens,
 * for graph replays and for eager runs of the same entry (sharing weights and pools). A step
 * must read every weight once (a tied LM head counts once) and each sequence's keys and
 * values: bytes per step over the step time, against a device-to-device copy measured in the
 * same run, is the fraction of the bandwidth ceiling the step reaches. One profiled eager run
 * splits the step's device time by op kind (recap_pipeline_profile): the GEMMs' (linear,
 * matmul) share is a column, and --profile prints every kind's launches and time, then every
 * op's over the layers (its name with the layer numbers folded). Every timing
 * is repeated --repeats times; the median is reported with the spread.
 *
 * With --world N --rank R --init URL each rank of a tensor-parallel model (import-hf --tp N)
 * runs the same timings on its own spec, prefixes its lines with "rank R:", and also times the
 * step's all_reduces alone and recap_pipeline_run_dist's cost per step (bench_decode_dist.h). */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_decode_dist.h"
#include "cli/cli.h"
#include "cli/decode_batch.h"
#include "cli/decode_profile.h"
#include "cli/tensors.h"

static const char *const CMD = "bench-decode";

enum { MAX_BATCHES = 16, COPY_REPEATS = 10 };
static const long long DEFAULT_BATCHES[] = {1, 8, 32, 64};
static const size_t COPY_BYTES_CUDA = 512u << 20, COPY_BYTES_HOST = 4u << 20;

static const cli_option bench_decode_options[] = {
    {.flag = "--batch",
     .value = "LIST",
     .kind = CLI_VALUE_TEXT,
     .help = "batch sizes (default 1,8,32,64, those up to the decode entry's\n"
             "largest bucket; a given one must be at most that)"},
    {.flag = "--context",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "keys per sequence before the first timed step (default 512, or\n"
             "as many as the spec's sequences hold with --tokens after them)"},
    {.flag = "--tokens",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "decode steps per timing (default 128, or half the positions of a shorter spec)"},
    {.flag = "--repeats",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "timings per batch and mode; the median is reported (default 5)"},
    {.flag = "--device",
     .value = "D",
     .kind = CLI_VALUE_WORDS,
     .words = "cuda host",
     .help = "cuda or host (default cuda, else the host with a note)"},
    {.flag = "--base-dir",
     .value = "DIR",
     .kind = CLI_VALUE_DIR,
     .help = "files the spec names must lie under DIR"},
    {.flag = "--profile",
     .kind = CLI_VALUE_NONE,
     .help = "after the timings, each batch's profiled eager step by op kind:\n"
             "launches per step, device time and share of the step, largest first;\n"
             "then by op name with the layer numbers folded (layers.*.down)"},
    {.flag = "--json",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "write the results as JSON (- for stdout: the text then goes\n"
             "to stderr); it records the GPU, driver and library versions"},
    {.flag = "--collectives",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "all_reduces in the timed chain of the step's message (default: as many\n"
             "as one step runs; none for a step without any)"},
    {0}};
const cli_help cli_bench_decode_help = {
    .synopsis =
        "recap bench-decode SPEC [--batch 1,8,32,64] [--context N] [--tokens N]\n"
        "                   [--repeats N] [--device cuda|host] [--base-dir DIR]\n"
        "                   [--profile] [--json FILE] [--collectives N]\n"
        "       recap launch --gpus N -- bench-decode m.rank{rank}.yaml --world N\n"
        "                   --rank {rank} --init URL [flags]",
    .description =
        "Times the decode entry of a paged serving spec (`recap import-hf --paged`): per batch\n"
        "size, --tokens steps back to back after a context of --context keys per sequence, with\n"
        "no host copy between steps. Prints the step time (graph replay and eager), tokens/s\n"
        "(batch / step time), the bytes a step must read (weights once, plus each sequence's\n"
        "keys and values) over the step time as a fraction of a device-to-device copy measured\n"
        "in the same run, the kernels per step, and the share of GEMMs in a profiled eager\n"
        "step. With --world, every rank of a tensor-parallel model (import-hf --tp N) runs the\n"
        "same timings on its own spec (the collectives inside its graphs), prints its lines\n"
        "prefixed \"rank R:\", and also times the step's all_reduces alone (a chain of them at\n"
        "the step's message size in one graph) and recap_pipeline_run_dist's cost per step\n"
        "(run header broadcast, launch, wait) over the graph step.",
    .operand = CLI_VALUE_SPEC,
    .groups = {{.options = bench_decode_options},
               {.heading = "distributed (one process per rank, as recap generate --world)",
                .options = cli_bench_decode_dist_options}},
};

typedef struct {
  const char *path, *device, *base_dir, *json_path;
  long long batches[MAX_BATCHES];
  size_t num_batches;
  long long context, tokens, repeats;
  bool batch_given, context_given, tokens_given; /* else fitted to the spec
                                                   (cli_decode_fit_defaults) */
  long long collectives;                         /* -1: as many as one step runs */
  bool profile;
  cli_world world;
} decode_args;

static int parse_args(int argc, char **argv, decode_args *a) {
  *a = (decode_args){.context = 512, .tokens = 128, .repeats = 5, .collectives = -1};
  cli_world_init(&a->world, CMD);
  a->num_batches = sizeof DEFAULT_BATCHES / sizeof DEFAULT_BATCHES[0];
  memcpy(a->batches, DEFAULT_BATCHES, sizeof DEFAULT_BATCHES);
  for (int i = 0; i < argc; i++) {
    int m;
    const char *v;
    if (strcmp(argv[i], "--profile") == 0) {
      a->profile = true;
    } else if ((m = cli_world_flag(CMD, argc, argv, &i, &a->world)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--collectives", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--collectives", v, 0, 4096, &a->collectives))
        return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--device", &a->device)) != 0 ||
               (m = cli_flag(CMD, argc, argv, &i, "--base-dir", &a->base_dir)) != 0 ||
               (m = cli_json_flag(CMD, argc, argv, &i, &a->json_path)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--batch", &v)) != 0) {
      if (m < 0 || !cli_parse_int_list(CMD, "--batch", v, 1, 1 << 20, a->batches, MAX_BATCHES,
                                       &a->num_batches, "1,8,32,64"))
        return CLI_EXIT_USAGE;
      a->batch_given = true;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--context", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--context", v, 1, 1 << 24, &a->context))
        return CLI_EXIT_USAGE;
      a->context_given = true;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--tokens", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--tokens", v, 1, 1 << 20, &a->tokens))
        return CLI_EXIT_USAGE;
      a->tokens_given = true;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--repeats", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--repeats", v, 1, 1000, &a->repeats)) return CLI_EXIT_USAGE;
    } else if (!cli_take_one(CMD, "spec", argv[i], &a->path)) {
      return CLI_EXIT_USAGE;
    }
  }
  if (!a->path) {
    fprintf(stderr, "recap %s: usage: recap bench-decode SPEC (see --help)\n", CMD);
    return CLI_EXIT_USAGE;
  }
  if (!cli_world_check(CMD, &a->world)) return CLI_EXIT_USAGE;
  /* The chain times a rank's all_reduces, which only a tensor-parallel run has. */
  if (a->collectives >= 0 && !a->world.world) {
    fprintf(stderr,
            "recap %s: --collectives goes with --world N (it times the all_reduces of a "
            "tensor-parallel rank)\n",
            CMD);
    return CLI_EXIT_USAGE;
  }
  return CLI_EXIT_OK;
}

/* `tokens` back-to-back runs between two events, `repeats` times, each from fresh metadata;
 * ms per step into per_step[repeats]. Across ranks: every rank runs the same steps in the same
 * order, so the collectives inside them pair up without a run header; the first run (capture)
 * goes through run_dist and the waits through the communicator, so a dead peer fails them
 * within the timeout. */
static recap_status time_steps(recap_pipeline *p, const cli_decode_shape *s, int64_t batch,
                               const decode_args *a, int64_t need, bool eager, double *per_step) {
  recap_comm *comm = a->world.comm;
  recap_stream *stream = recap_pipeline_stream(p);
  recap_pipeline_info info;
  recap_event *start = NULL, *end = NULL;
  recap_status st = recap_pipeline_info_get(p, &info);
  if (st == RECAP_OK) st = recap_event_create(info.device, RECAP_EVENT_TIMING, &start);
  if (st == RECAP_OK) st = recap_event_create(info.device, RECAP_EVENT_TIMING, &end);
  /* The first run captures (graph mode) or does first-use work (eager). */
  if (st == RECAP_OK) st = cli_decode_batch_write(p, s, batch, a->context, need);
  if (st == RECAP_OK)
    st = comm ? recap_pipeline_run_dist(
                    p, comm, batch, RECAP_DIST_INPUTS_REPLICATED | (eager ? RECAP_DIST_EAGER : 0))
              : recap_pipeline_run(p, batch);
  for (long long r = 0; st == RECAP_OK && r < a->repeats; r++) {
    st = cli_decode_batch_write(p, s, batch, a->context, need);
    if (st == RECAP_OK) st = recap_event_record(start, stream);
    for (long long t = 0; st == RECAP_OK && t < a->tokens; t++)
      st = recap_pipeline_run_async(p, batch, NULL);
    if (st == RECAP_OK) st = recap_event_record(end, stream);
    if (st == RECAP_OK)
      st = comm ? recap_comm_synchronize(comm, stream) : recap_event_synchronize(end);
    float ms = 0;
    if (st == RECAP_OK) st = recap_event_elapsed_ms(start, end, &ms);
    per_step[r] = ms / (double)a->tokens;
  }
  recap_event_destroy(start);
  recap_event_destroy(end);
  return st;
}

/* Device-to-device copy bandwidth (bytes read + written per second), median of COPY_REPEATS. */
static recap_status copy_bandwidth(recap_pipeline *p, double *gbps) {
  recap_pipeline_info info;
  recap_status st = recap_pipeline_info_get(p, &info);
  if (st != RECAP_OK) return st;
  recap_stream *stream = recap_pipeline_stream(p);
  size_t bytes = info.device.backend == RECAP_BACKEND_CUDA ? COPY_BYTES_CUDA : COPY_BYTES_HOST;
  void *src = NULL, *dst = NULL;
  recap_event *start = NULL, *end = NULL;
  double ms[COPY_REPEATS];
  st = recap_malloc(info.device, bytes, stream, &src);
  if (st == RECAP_OK) st = recap_malloc(info.device, bytes, stream, &dst);
  if (st == RECAP_OK) st = recap_event_create(info.device, RECAP_EVENT_TIMING, &start);
  if (st == RECAP_OK) st = recap_event_create(info.device, RECAP_EVENT_TIMING, &end);
  if (st == RECAP_OK) st = recap_memcpy_async(dst, src, bytes, stream); /* untimed */
  for (int r = 0; st == RECAP_OK && r < COPY_REPEATS; r++) {
    float t = 0;
    st = recap_event_record(start, stream);
    if (st == RECAP_OK) st = recap_memcpy_async(dst, src, bytes, stream);
    if (st == RECAP_OK) st = recap_event_record(end, stream);
    if (st == RECAP_OK) st = recap_event_synchronize(end);
    if (st == RECAP_OK) st = recap_event_elapsed_ms(start, end, &t);
    ms[r] = t;
  }
  if (st == RECAP_OK) {
    cli_summary sum;
    cli_summarize(ms, COPY_REPEATS, &sum);
    *gbps = 2.0 * (double)bytes / (sum.median * 1e-3) / 1e9;
  }
  recap_stream_synchronize(stream);
  recap_free(src);
  recap_free(dst);
  recap_event_destroy(start);
  recap_event_destroy(end);
  return st;
}

typedef struct {
  int64_t batch;
  cli_summary graph, eager;
  double bytes;
  size_t kernels;
  cli_step_profile profile;
  /* The distributed step's pieces (bench_decode_dist.h): a chain of `collectives` all_reduces
   * of msg (chain_ms per chain; none when collectives is 0), run_dist's ms per step (< 0: not
   * distributed). */
  int64_t collectives;
  cli_decode_message msg;
  double chain_ms, run_dist_ms;
} decode_result;

/* The distributed step's pieces at r->batch, whose bucket has `rows` rows: the step's
 * all_reduces alone, and run_dist's steps from fresh metadata. */
static recap_status time_dist_pieces(const decode_args *a, recap_pipeline *graph,
                                     const cli_decode_shape *s, int64_t rows, int64_t need,
                                     decode_result *r) {
  r->collectives =
      a->collectives >= 0 ? a->collectives : cli_step_profile_launches(&r->profile, "all_reduce");
  r->run_dist_ms = -1;
  recap_status st = RECAP_OK;
  if (r->collectives > 0) {
    st = cli_decode_message_of(graph, s->vocab, rows, &r->msg);
    if (st == RECAP_OK)
      st = cli_decode_all_reduce_chain(graph, a->world.comm, &r->msg, (int)r->collectives,
                                       (int)a->tokens, &r->chain_ms);
  }
  if (st == RECAP_OK && a->world.comm) {
    st = cli_decode_batch_write(graph, s, r->batch, a->context, need);
    if (st == RECAP_OK)
      st = cli_decode_run_dist_steps(graph, a->world.comm, r->batch, a->tokens, &r->run_dist_ms);
  }
  return st;
}

/* The distributed step's lines of one batch. */
static void print_dist_pieces(const char *prefix, const decode_result *r) {
  if (r->collectives > 0)
    printf("%sbatch %" PRId64 ": %" PRId64
           " all_reduces of %zu %s (%zu bytes) in one graph: "
           "%.4f ms, %.2f us each, %.1f%% of the graph step\n",
           prefix, r->batch, r->collectives, r->msg.elements, recap_dtype_name(r->msg.dtype),
           r->msg.elements * recap_dtype_size(r->msg.dtype), r->chain_ms,
           r->chain_ms * 1e3 / (double)r->collectives, 100.0 * r->chain_ms / r->graph.median);
  if (r->run_dist_ms >= 0)
    printf("%sbatch %" PRId64
           ": run_dist step %.4f ms = graph step %.4f ms + %.4f ms (run "
           "header broadcast, launch, host wait)\n",
           prefix, r->batch, r->run_dist_ms, r->graph.median, r->run_dist_ms - r->graph.median);
}

static json_t *result_json(const decode_result *r, double copy_gbps, bool profile) {
  double gbps = r->bytes / (r->graph.median * 1e-3) / 1e9;
  json_t *row =
      json_pack("{sI sf sf sf sf sf sf sf sf sI sf sf}", "batch", (json_int_t)r->batch,
                "graph_ms_per_step", r->graph.median, "graph_ms_p10", r->graph.p10, "graph_ms_p90",
                r->graph.p90, "eager_ms_per_step", r->eager.median, "tokens_per_s",
                (double)r->batch / (r->graph.median * 1e-3), "bytes_per_step", r->bytes, "gb_per_s",
                gbps, "fraction_of_copy", gbps / copy_gbps, "kernels", (json_int_t)r->kernels,
                "gemm_ms", r->profile.gemm_ms, "profiled_ms", r->profile.total_ms);
  if (row && profile) {
    json_object_set_new(row, "profile", cli_step_profile_kinds_json(&r->profile));
    json_object_set_new(row, "profile_by_name", cli_step_profile_names_json(&r->profile));
  }
  if (row && r->collectives > 0)
    json_object_set_new(
        row, "all_reduce_chain",
        json_pack("{sI sI ss sf sf}", "collectives", (json_int_t)r->collectives, "elements",
                  (json_int_t)r->msg.elements, "dtype", recap_dtype_name(r->msg.dtype), "ms",
                  r->chain_ms, "us_each", r->chain_ms * 1e3 / (double)r->collectives));
  if (row && r->run_dist_ms >= 0) {
    json_object_set_new(row, "run_dist_ms_per_step", json_real(r->run_dist_ms));
    json_object_set_new(row, "run_dist_overhead_ms", json_real(r->run_dist_ms - r->graph.median));
  }
  return row;
}

static int run_batches(const decode_args *a, recap_pipeline *graph, recap_pipeline *eager,
                       const cli_decode_shape *s) {
  int64_t positions = a->context + a->tokens;
  int64_t need = (positions + s->block_size - 1) / s->block_size;
  for (size_t i = 0; i < a->num_batches; i++)
    if (!cli_decode_batch_fits(CMD, s, a->batches[i], positions)) return CLI_EXIT_FAILURE;
  recap_pipeline_stats stats;
  recap_pipeline_info info;
  double copy_gbps = 0;
  recap_status st = recap_pipeline_stats_get(graph, &stats);
  if (st == RECAP_OK) st = recap_pipeline_info_get(graph, &info);
  if (st == RECAP_OK) st = copy_bandwidth(graph, &copy_gbps);
  if (st != RECAP_OK) {
    cli_report_failure(a->world.who, "the copy ceiling", st);
    return CLI_EXIT_FAILURE;
  }
  char weights[32], kv[32];
  const char *pre = a->world.prefix;
  if (a->world.comm)
    printf("%sof a world of %lld, on %s:%d\n", pre, a->world.world,
           recap_backend_name(info.device.backend), info.device.index);
  printf("%s%s: weights %s, KV %s per token; context %lld, %lld %s per timing, median of %lld\n",
         pre, a->path, cli_format_bytes(stats.param_bytes, weights, sizeof weights),
         cli_format_bytes((size_t)s->kv_bytes_per_token, kv, sizeof kv), a->context, a->tokens,
         cli_plural(a->tokens, "step", "steps"), a->repeats);
  printf("%sdevice-to-device copy: %.1f GB/s (read + write)\n%s\n", pre, copy_gbps, pre);
  printf("%s%6s %12s %10s %10s %12s %8s %12s %8s %8s %6s\n", pre, "batch", "graph ms", "p10-p90 %",
         "tokens/s", "GB/s", "of copy", "eager ms", "speedup", "kernels", "GEMM");
  json_t *rows = json_array();
  double *samples = malloc(sizeof(double) * (size_t)a->repeats);
  decode_result *results = calloc(a->num_batches, sizeof *results);
  int rc = rows && samples && results ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
  for (size_t i = 0; rc == CLI_EXIT_OK && i < a->num_batches; i++) {
    int64_t batch = a->batches[i];
    decode_result r = {.batch = batch};
    st = time_steps(graph, s, batch, a, need, false, samples);
    if (st == RECAP_OK) cli_summarize(samples, (int)a->repeats, &r.graph);
    if (st == RECAP_OK) st = time_steps(eager, s, batch, a, need, true, samples);
    if (st == RECAP_OK) cli_summarize(samples, (int)a->repeats, &r.eager);
    if (st == RECAP_OK) st = cli_step_profile_run(eager, s, batch, a->context, need, &r.profile);
    size_t bucket = 0;
    while (bucket + 1 < info.num_buckets && info.bucket_values[bucket] < batch) bucket++;
    int64_t bucket_rows = info.bucket_dim ? info.bucket_values[bucket] : batch;
    if (st == RECAP_OK) st = time_dist_pieces(a, graph, s, bucket_rows, need, &r);
    const recap_graph *g = NULL;
    recap_graph_info gi = {0};
    if (st == RECAP_OK) st = recap_pipeline_graph(graph, bucket, &g);
    if (st == RECAP_OK && g) st = recap_graph_info_get(g, &gi);
    if (st != RECAP_OK) {
      cli_report_failure(a->world.who, "the decode steps", st);
      cli_step_profile_free(&r.profile);
      rc = CLI_EXIT_FAILURE;
      break;
    }
    r.kernels = gi.nodes;
    r.bytes = (double)stats.param_bytes + (double)batch *
                                              ((double)a->context + (double)a->tokens / 2) *
                                              (double)s->kv_bytes_per_token;
    double gbps = r.bytes / (r.graph.median * 1e-3) / 1e9;
    double spread = 100.0 * (r.graph.p90 - r.graph.p10) / r.graph.median;
    printf("%s%6" PRId64 " %12.4f %10.1f %10.0f %12.1f %7.1f%% %12.4f %7.2fx %8zu %5.0f%%\n", pre,
           batch, r.graph.median, spread, (double)batch / (r.graph.median * 1e-3), gbps,
           100.0 * gbps / copy_gbps, r.eager.median, r.eager.median / r.graph.median, r.kernels,
           r.profile.total_ms > 0 ? 100.0 * r.profile.gemm_ms / r.profile.total_ms : 0.0);
    json_array_append_new(rows, result_json(&r, copy_gbps, a->profile));
    results[i] = r;
  }
  if (rc == CLI_EXIT_OK && (a->world.comm || a->collectives > 0)) {
    printf("%s\n%sthe distributed step's pieces:\n", pre, pre);
    for (size_t i = 0; i < a->num_batches; i++) print_dist_pieces(pre, &results[i]);
  }
  for (size_t i = 0; rc == CLI_EXIT_OK && a->profile && i < a->num_batches; i++)
    cli_step_profile_print(pre, results[i].batch, &results[i].profile);
  for (size_t i = 0; results && i < a->num_batches; i++) cli_step_profile_free(&results[i].profile);
  if (rc == CLI_EXIT_OK && a->json_path) {
    json_t *root =
        json_pack("{ss sI sI sf so}", "spec", a->path, "context", (json_int_t)a->context, "tokens",
                  (json_int_t)a->tokens, "copy_gb_per_s", copy_gbps, "results", rows);
    rows = NULL;
    if (root && a->world.comm) {
      json_object_set_new(root, "world", json_integer(a->world.world));
      json_object_set_new(root, "rank", json_integer(a->world.rank));
    }
    if (!cli_write_json(CMD, root, info.device, a->json_path)) rc = CLI_EXIT_FAILURE;
    json_decref(root);
  }
  json_decref(rows);
  free(samples);
  free(results);
  return rc;
}

int cli_bench_decode_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_bench_decode_help);
    return CLI_EXIT_OK;
  }
  decode_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc != CLI_EXIT_OK) return rc;
  recap_pipeline_options go = {.struct_size = sizeof go,
                               .entry = "decode",
                               .base_dir = a.base_dir,
                               .override_device = 1,
                               .override_mode = 1,
                               .mode = RECAP_MODE_GRAPH,
                               .oversize = RECAP_OVERSIZE_FAIL};
  if (!cli_pick_device(CMD, a.device, RECAP_BACKEND_CUDA, &go.device)) return CLI_EXIT_USAGE;
  /* The communicator first: the collectives inside the steps find it on their device. */
  if (!cli_world_join(CMD, &a.world, &go.device)) return CLI_EXIT_FAILURE;
  recap_pipeline *graph = NULL, *eager = NULL;
  recap_status st = recap_pipeline_create_file(a.path, &go, &graph);
  if (st != RECAP_OK) {
    cli_report_failure(a.world.who, "the decode entry", st);
    return cli_world_leave(&a.world, CLI_EXIT_FAILURE);
  }
  recap_pipeline_options eo = go;
  eo.mode = RECAP_MODE_EAGER;
  eo.share = graph;
  eo.override_device = 0;
  cli_decode_shape s;
  rc = CLI_EXIT_FAILURE;
  if ((st = recap_pipeline_create_file(a.path, &eo, &eager)) != RECAP_OK)
    cli_report_failure(a.world.who, "the eager decode entry", st);
  else if (cli_decode_shape_read(CMD, graph, &s)) {
    cli_decode_fit_defaults(CMD, &s, a.batch_given, a.batches, &a.num_batches, a.context_given,
                            &a.context, a.tokens_given, &a.tokens, 0);
    rc = run_batches(&a, graph, eager, &s);
  }
  if (rc != CLI_EXIT_OK) return cli_world_leave(&a.world, rc);
  recap_pipeline_destroy(eager);
  recap_pipeline_destroy(graph);
  return cli_world_leave(&a.world, rc);
}
