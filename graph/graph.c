/*
 * graph.c: capture of any stream work into a graph with a private memory pool, and replay
 * (the torch.cuda.CUDAGraph equivalent; the public contract is in include/recap.h).
 *
 * Order of a capture, and why:
 *   begin: pool (new or shared) -> route the stream's allocations into it -> RNG slot
 *          (allocation is illegal once the capture runs) -> register and begin the capture.
 *   end:   end the capture -> stop routing -> RNG binding -> instantiate, or update the
 *          executable in place when only parameters changed -> upload.
 * Every failure unwinds what was done before it, so the stream leaves capture mode, the pool
 * stays consistent, and the graph object can capture again.
 *
 * Under backend:cudaMallocAsync there are no private pools: a graph captured without one
 * (pool NULL) has none, and an allocation on the capturing stream is refused by that backend.
 * Work that allocates everything before the capture (the engine's pipelines) captures as usual.
 */
#include "graph/graph.h"

#include <stdio.h>
#include <stdlib.h>

#include "allocator/allocator.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/error.h"
#include "runtime/rng.h"

struct recap_graph {
  recap_device device;
  const recap__backend *backend;
  bool bound;    /* device and backend are set: from the first capture_begin to a reset */
  bool has_pool; /* bound with a private pool (always, unless the allocator has none) */
  recap_pool_id pool;
  recap_stream *capture_stream; /* non-NULL while capturing */
  recap_stream *home_stream;    /* the stream of the last successful capture */
  recap__graph *graph;          /* the last captured graph (debug dumps, updates) */
  recap__graph_exec *exec;
  recap__rng_graph_binding *rng; /* NULL when the graph draws no random numbers */
  recap_graph_info info;
};

recap_status recap_graph_create(recap_graph **out) {
  RECAP_CHECK_ARG(out);
  recap_graph *g = calloc(1, sizeof *g);
  if (!g) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a graph");
  *out = g;
  return RECAP_OK;
}

static void drop_executable(recap_graph *g) {
  if (g->exec) g->backend->graph_exec_destroy(g->exec);
  if (g->graph) g->backend->graph_destroy(g->graph);
  recap__rng_graph_binding_destroy(g->rng);
  g->exec = NULL;
  g->graph = NULL;
  g->rng = NULL;
}

recap_status recap_graph_reset(recap_graph *g) {
  RECAP_CHECK_ARG(g);
  if (g->capture_stream)
    return RECAP_FAIL(RECAP_STATUS_BUSY, "the graph is capturing; end the capture first");
  drop_executable(g);
  recap_status st = RECAP_OK;
  if (g->has_pool) st = recap_pool_release(g->device, g->pool);
  g->has_pool = false;
  g->bound = false;
  g->home_stream = NULL;
  return st;
}

recap_status recap_graph_destroy(recap_graph *g) {
  if (!g) return RECAP_OK;
  RECAP_TRY(recap_graph_reset(g));
  free(g);
  return RECAP_OK;
}

recap_status recap_graph_capture_begin(recap_graph *g, recap_stream *stream,
                                       const recap_pool_id *pool, recap_capture_mode mode) {
  RECAP_CHECK_ARG(g && stream);
  RECAP_CHECK_ARG(mode == RECAP_CAPTURE_MODE_GLOBAL || mode == RECAP_CAPTURE_MODE_THREAD_LOCAL ||
                  mode == RECAP_CAPTURE_MODE_RELAXED);
  if (g->capture_stream)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the graph is already capturing");
  if (recap_stream_is_capturing(stream))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the stream is already capturing");
  if (g->bound &&
      (stream->device.backend != g->device.backend || stream->device.index != g->device.index))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the graph's pool belongs to %s:%d, the stream to %s:%d; reset the graph "
                      "to capture on another device",
                      recap_backend_name(g->device.backend), g->device.index,
                      recap_backend_name(stream->device.backend), stream->device.index);
  if (g->has_pool && pool && pool->id != g->pool.id)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the graph already uses pool %llu; reset it before sharing pool %llu",
                      (unsigned long long)g->pool.id, (unsigned long long)pool->id);

  recap_device device = stream->device;
  bool acquired_pool = false;
  recap_status st = RECAP_OK;
  if (!g->bound) {
    if (pool) {
      RECAP_TRY(recap_pool_retain(device, *pool));
      g->pool = *pool;
      g->has_pool = true;
    } else if (recap__allocator_has_pools(device)) {
      RECAP_TRY(recap_pool_create(device, &g->pool));
      g->has_pool = true;
    }
    g->bound = true;
    g->device = device;
    g->backend = stream->backend;
    acquired_pool = true;
  }
  if (g->has_pool) RECAP_TRY_GOTO(st, recap_pool_route_begin(device, g->pool, stream), fail_pool);
  RECAP_TRY_GOTO(st, recap__rng_capture_begin(stream), fail_route);
  RECAP_TRY_GOTO(st, recap__capture_begin(stream, mode), fail_rng);
  g->capture_stream = stream;
  return RECAP_OK;

fail_rng:
  recap__rng_capture_abort(stream);
fail_route:
  if (g->has_pool) recap_pool_route_end(device, stream);
fail_pool:
  if (acquired_pool) {
    if (g->has_pool) recap_pool_release(device, g->pool);
    g->has_pool = false;
    g->bound = false;
  }
  return st;
}

recap_status recap_graph_capture_join(recap_graph *g, recap_stream *side) {
  RECAP_CHECK_ARG(g && side);
  if (!g->capture_stream)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the graph is not capturing");
  if (g->has_pool) RECAP_TRY(recap__pool_route_add_stream(g->device, g->capture_stream, side));
  return recap__rng_capture_attach(g->capture_stream, side);
}

/* Turns a freshly captured graph into the executable: in place when the backend can apply it
 * to the existing one, else by instantiating anew. */
static recap_status install_executable(recap_graph *g, recap__graph *graph, recap_stream *stream) {
  if (g->exec) {
    recap_status st = g->backend->graph_exec_update(g->exec, graph);
    if (st == RECAP_OK) {
      g->info.updates++;
      return RECAP_OK;
    }
    if (st != RECAP_STATUS_NOT_SUPPORTED) return st;
    recap_clear_error();
  }
  recap__graph_exec *exec = NULL;
  RECAP_TRY(g->backend->graph_instantiate(graph, &exec));
  recap_status st = g->backend->graph_upload(exec, stream);
  if (st != RECAP_OK) {
    g->backend->graph_exec_destroy(exec);
    return st;
  }
  if (g->exec) g->backend->graph_exec_destroy(g->exec);
  g->exec = exec;
  g->info.instantiations++;
  return RECAP_OK;
}

recap_status recap_graph_capture_end(recap_graph *g) {
  RECAP_CHECK_ARG(g);
  recap_stream *stream = g->capture_stream;
  if (!stream) return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the graph is not capturing");
  recap__graph *graph = NULL;
  recap_status st = recap__capture_end(stream, &graph);
  if (st != RECAP_OK && recap_stream_is_capturing(stream)) {
    /* The backend refused to end it (e.g. another thread's global-mode capture rules): the
     * capture is still under way and the caller may retry from the right thread. */
    return st;
  }
  g->capture_stream = NULL;
  recap_status route_st = g->has_pool ? recap_pool_route_end(g->device, stream) : RECAP_OK;
  if (st != RECAP_OK) {
    recap__rng_capture_abort(stream);
    return recap__error_context(st, "graph capture discarded: ");
  }
  recap__rng_graph_binding *rng = NULL;
  RECAP_TRY_GOTO(st, route_st, fail_graph);
  RECAP_TRY_GOTO(st, recap__rng_capture_end(stream, &rng), fail_graph);
  size_t nodes = 0;
  RECAP_TRY_GOTO(st, g->backend->graph_node_count(graph, &nodes), fail_rng);
  if (nodes == 0)
    fprintf(stderr,
            "recap: warning: the captured graph is empty (no work was submitted to "
            "the capturing stream)\n");
  RECAP_TRY_GOTO(st, install_executable(g, graph, stream), fail_rng);
  if (g->graph) g->backend->graph_destroy(g->graph);
  recap__rng_graph_binding_destroy(g->rng);
  g->graph = graph;
  g->rng = rng;
  g->home_stream = stream;
  g->info.captures++;
  g->info.nodes = nodes;
  return RECAP_OK;

fail_rng:
  recap__rng_graph_binding_destroy(rng);
fail_graph:
  g->backend->graph_destroy(graph);
  return st;
}

recap_status recap_graph_replay(recap_graph *g, recap_stream *stream) {
  RECAP_CHECK_ARG(g);
  if (!g->exec)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "nothing has been captured into the graph");
  if (!stream) stream = g->home_stream;
  if (stream->backend != g->backend || stream->device.index != g->device.index)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "replay on a stream of %s:%d; the graph belongs to %s:%d",
                      recap_backend_name(stream->device.backend), stream->device.index,
                      recap_backend_name(g->device.backend), g->device.index);
  RECAP_TRY(recap__rng_replay_prepare(g->rng, stream));
  RECAP_TRY(g->backend->graph_launch(g->exec, stream));
  g->info.replays++;
  return RECAP_OK;
}

recap_status recap__graph_replay_into_body(recap_graph *g, recap_stream *body,
                                           const recap__rng_graph_binding **rng) {
  RECAP_CHECK_ARG(g && body && rng);
  if (!g->exec)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "nothing has been captured into the graph");
  recap_capture_status cs = RECAP_CAPTURE_NONE;
  RECAP_TRY(body->backend->stream_capture_status(body, &cs));
  if (cs == RECAP_CAPTURE_NONE)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the stream is not capturing a WHILE body: a graph replayed without its "
                      "RNG slot written would draw stale numbers");
  RECAP_TRY(g->backend->graph_launch(g->exec, body));
  *rng = g->rng;
  return RECAP_OK;
}

const recap__rng_graph_binding *recap__graph_rng(const recap_graph *g) {
  return g ? g->rng : NULL;
}

recap_status recap_graph_pool(const recap_graph *g, recap_pool_id *out) {
  RECAP_CHECK_ARG(g && out);
  if (!g->has_pool)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      g->bound ? "the graph has no pool: backend:cudaMallocAsync has no private "
                                 "pools"
                               : "the graph has no pool before its first capture_begin");
  *out = g->pool;
  return RECAP_OK;
}

recap_status recap_graph_info_get(const recap_graph *g, recap_graph_info *out) {
  RECAP_CHECK_ARG(g && out);
  *out = g->info;
  return RECAP_OK;
}

recap_status recap_graph_debug_dump(const recap_graph *g, const char *path) {
  RECAP_CHECK_ARG(g && path);
  if (!g->graph)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "nothing has been captured into the graph");
  if (!g->backend->graph_debug_dot)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "the %s backend cannot dump graphs",
                      g->backend->name);
  return g->backend->graph_debug_dot(g->graph, path);
}
