/* bench_decode_dist.c: bench-decode across the ranks of a tensor-parallel world
 * (bench_decode_dist.h). */
#include "cli/bench_decode_dist.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "runtime/error.h"

const cli_option cli_bench_decode_dist_options[] = {
    {.flag = "--world",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "ranks in all (1 to 64), each timing its own spec of a tensor-parallel\n"
             "model (import-hf --tp N); every line a rank prints starts with \"rank R:\""},
    CLI_WORLD_RANK_OPTIONS,
    {0}};

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
