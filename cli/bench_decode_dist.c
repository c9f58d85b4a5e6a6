/* bench_decode_dist.c: bench-decode across the ranks of a tensor-parallel world
 * (bench_decode_dist.h). */
#include "cli/bench_decode_dist.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "runtime/error.h"

enum { MAX_RANKS = 64 };

const cli_option cli_bench_decode_dist_options[] = {
    {.flag = "--world",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "ranks in all (1 to 64), each timing its own spec of a tensor-parallel\n"
             "model (import-hf --tp N); every line a rank prints starts with \"rank R:\""},
    {.flag = "--rank",
     .value = "R",
     .kind = CLI_VALUE_TEXT,
     .help = "this process's rank, 0 <= R < N"},
    {.flag = "--init",
     .value = "URL",
     .kind = CLI_VALUE_TEXT,
     .help = "the rendezvous, file:///PATH, tcp://HOST:PORT or env:// (recap run --help)"},
    {.flag = "--timeout",
     .value = "S",
     .kind = CLI_VALUE_TEXT,
     .help = "seconds for the rendezvous and every wait (default 120): a dead peer\n"
             "fails the others within it"},
    {0}};

void cli_decode_world_init(cli_decode_world *w, const char *cmd) {
  *w = (cli_decode_world){.rank = -1, .timeout_s = 120};
  snprintf(w->who, sizeof w->who, "%s", cmd);
}

int cli_decode_world_flag(const char *cmd, int argc, char **argv, int *i, cli_decode_world *w) {
  const char *v = NULL;
  long long n;
  int m;
  if ((m = cli_flag(cmd, argc, argv, i, "--init", &w->init)) != 0) return m;
  if ((m = cli_flag(cmd, argc, argv, i, "--world", &v)) != 0)
    return m < 0 || !cli_parse_int(cmd, "--world", v, 1, MAX_RANKS, &w->world) ? -1 : 1;
  if ((m = cli_flag(cmd, argc, argv, i, "--rank", &v)) != 0)
    return m < 0 || !cli_parse_int(cmd, "--rank", v, 0, MAX_RANKS - 1, &w->rank) ? -1 : 1;
  if ((m = cli_flag(cmd, argc, argv, i, "--timeout", &v)) != 0) {
    if (m < 0 || !cli_parse_int(cmd, "--timeout", v, 1, 86400, &n)) return -1;
    w->timeout_s = (double)n;
    return 1;
  }
  return 0;
}

bool cli_decode_world_check(const char *cmd, cli_decode_world *w) {
  if (w->init && strcmp(w->init, "env://") == 0) {
    int world, rank, local;
    if (recap_comm_env_read(&world, &rank, &local, w->url, sizeof w->url) != RECAP_OK) {
      fprintf(stderr, "recap %s: %s\n", cmd, recap_last_error());
      return false;
    }
    if ((w->world && w->world != world) || (w->rank >= 0 && w->rank != rank)) {
      fprintf(stderr, "recap %s: --world/--rank disagree with WORLD_SIZE/RANK (--init env://)\n",
              cmd);
      return false;
    }
    w->world = world;
    w->rank = rank;
    w->init = w->url;
  }
  if (!w->world && (w->rank >= 0 || w->init)) {
    fprintf(stderr, "recap %s: --rank and --init go with --world N\n", cmd);
    return false;
  }
  if (w->world && (w->rank < 0 || w->rank >= w->world)) {
    fprintf(stderr, "recap %s: --world %lld needs --rank R with 0 <= R < %lld\n", cmd, w->world,
            w->world);
    return false;
  }
  if (w->world > 1 && !w->init) {
    fprintf(stderr, "recap %s: --world %lld needs --init file:///PATH, tcp://HOST:PORT or env://\n",
            cmd, w->world);
    return false;
  }
  return true;
}

bool cli_decode_world_join(const char *cmd, cli_decode_world *w, recap_device *device) {
  if (!w->world) return true;
  snprintf(w->prefix, sizeof w->prefix, "rank %lld: ", w->rank);
  snprintf(w->who, sizeof w->who, "%s (rank %lld)", cmd, w->rank);
  /* Each rank's lines go out whole, so ranks sharing one output do not split each other's. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* recap launch shows each rank one GPU; otherwise rank r takes GPU r mod the count. */
  int count = 0;
  if (device->backend == RECAP_BACKEND_CUDA &&
      recap_device_count(RECAP_BACKEND_CUDA, &count) == RECAP_OK && count > 0)
    device->index = (int)(w->rank % count);
  recap_status st =
      recap_comm_init_rank(*device, (int)w->world, (int)w->rank, w->init, w->timeout_s, &w->comm);
  if (st != RECAP_OK) {
    cli_report_failure(w->who, "joining the communicator", st);
    return false;
  }
  return true;
}

int cli_decode_world_leave(cli_decode_world *w, int rc) {
  if (w->comm && rc != CLI_EXIT_OK) {
    fflush(NULL);
    _exit(rc);
  }
  recap_comm_destroy(w->comm);
  w->comm = NULL;
  return rc;
}

recap_status cli_decode_message_of(recap_pipeline *p, int64_t vocab, int64_t rows,
                                   cli_decode_message *msg) {
  recap_pipeline_info info;
  recap_status st = recap_pipeline_info_get(p, &info);
  for (size_t i = 0; st == RECAP_OK && i < info.num_tensors; i++) {
    recap_tensor_info t;
    if ((st = recap_pipeline_tensor_info_get(p, i, &t)) != RECAP_OK) break;
    if (t.role == RECAP_ROLE_PARAM && t.ndim == 2 && t.shape[0] == vocab) {
      *msg = (cli_decode_message){.elements = (size_t)(rows * t.shape[1]), .dtype = t.dtype};
      return RECAP_OK;
    }
  }
  if (st != RECAP_OK) return st;
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "the spec has no [vocabulary %lld, hidden] embedding parameter to size the "
                    "step's all_reduce by",
                    (long long)vocab);
}

/* Enqueues the chain: all_reduce a -> b, b -> a, ... */
static recap_status enqueue_chain(recap_comm *comm, const cli_decode_message *msg, void *a, void *b,
                                  int chain, recap_stream *stream) {
  recap_status st = RECAP_OK;
  for (int i = 0; st == RECAP_OK && i < chain; i++)
    st = recap_comm_all_reduce(comm, i % 2 ? b : a, i % 2 ? a : b, msg->elements, msg->dtype,
                               RECAP_REDUCE_SUM, stream);
  return st;
}

/* The stream's work waited for: within the communicator's timeout when there is one. */
static recap_status wait_for(recap_comm *comm, recap_stream *stream) {
  return comm ? recap_comm_synchronize(comm, stream) : recap_stream_synchronize(stream);
}

recap_status cli_decode_all_reduce_chain(recap_pipeline *p, recap_comm *comm,
                                         const cli_decode_message *msg, int chain, int replays,
                                         double *ms_per_chain) {
  recap_pipeline_info info;
  RECAP_TRY(recap_pipeline_info_get(p, &info));
  recap_stream *stream = recap_pipeline_stream(p);
  size_t bytes = msg->elements * recap_dtype_size(msg->dtype);
  void *a = NULL, *b = NULL;
  recap_graph *g = NULL;
  recap_event *start = NULL, *end = NULL;
  recap_status st = recap_malloc(info.device, bytes, stream, &a);
  if (st == RECAP_OK) st = recap_malloc(info.device, bytes, stream, &b);
  /* One eager chain first: the communicator's first use of this size sets up what it needs. */
  if (st == RECAP_OK) st = enqueue_chain(comm, msg, a, b, chain, stream);
  if (st == RECAP_OK) st = wait_for(comm, stream);
  if (st == RECAP_OK) st = recap_graph_create(&g);
  if (st == RECAP_OK)
    st = recap_graph_capture_begin(g, stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL);
  if (st == RECAP_OK) {
    recap_status chained = enqueue_chain(comm, msg, a, b, chain, stream);
    st = recap_graph_capture_end(g);
    if (chained != RECAP_OK) st = chained;
  }
  if (st == RECAP_OK) st = recap_event_create(info.device, RECAP_EVENT_TIMING, &start);
  if (st == RECAP_OK) st = recap_event_create(info.device, RECAP_EVENT_TIMING, &end);
  if (st == RECAP_OK) st = recap_graph_replay(g, stream);
  if (st == RECAP_OK) st = recap_event_record(start, stream);
  for (int r = 0; st == RECAP_OK && r < replays; r++) st = recap_graph_replay(g, stream);
  if (st == RECAP_OK) st = recap_event_record(end, stream);
  if (st == RECAP_OK) st = wait_for(comm, stream);
  float ms = 0;
  if (st == RECAP_OK) st = recap_event_elapsed_ms(start, end, &ms);
  if (st == RECAP_OK) *ms_per_chain = (double)ms / replays;
  recap_stream_synchronize(stream);
  recap_graph_destroy(g);
  recap_event_destroy(start);
  recap_event_destroy(end);
  recap_free(a);
  recap_free(b);
  return st;
}

recap_status cli_decode_run_dist_steps(recap_pipeline *p, recap_comm *comm, int64_t batch,
                                       long long steps, double *ms_per_step) {
  /* Every rank wrote the same batch, so only the header travels; the first run is untimed. */
  recap_status st = recap_pipeline_run_dist(p, comm, batch, RECAP_DIST_INPUTS_REPLICATED);
  double t0 = cli_now();
  for (long long s = 0; st == RECAP_OK && s < steps; s++)
    st = recap_pipeline_run_dist(p, comm, batch, RECAP_DIST_INPUTS_REPLICATED);
  if (st == RECAP_OK) *ms_per_step = (cli_now() - t0) * 1e3 / (double)steps;
  return st;
}
