/*
 * pipeline.h: what a recap_pipeline is made of (internal to the engine).
 *
 * The public functions (include/recap.h, "Pipelines") live in pipeline.c and pipeline_info.c;
 * this header lets the executor files share the structure:
 *
 *   bind.c        params (once per model, shared by clones), the other external buffers, the
 *                 arena in the pipeline's private pool, every tensor's view per bucket.
 *   exec.c        one eager run of a bucket: fork, ops on their streams with the plan's waits,
 *                 join. Also the body of every capture.
 *   graph_mode.c  warmup, one graph per bucket (largest first, one pool), replay, rebind and
 *                 re-capture, the eager fallbacks and their counters.
 *
 * Nothing outside the engine reads these fields: tools (the CLI) go through the public calls
 * (recap_pipeline_info_get, recap_pipeline_tensor_info_get, recap_pipeline_stats_get,
 * recap_pipeline_graph; pipeline_info.c).
 *
 * Ownership: a pipeline owns everything except its model, which is reference counted and
 * shared with its clones (recap__model_release when the last one goes), and a caller's
 * stream given in the options.
 */
#ifndef RECAP_ENGINE_PIPELINE_H
#define RECAP_ENGINE_PIPELINE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/ir.h"
#include "engine/load.h"
#include "engine/plan.h"
#include "engine/share.h"
#include "engine/spec.h"
#include "include/recap.h"
#include "kernels/op.h"

#ifdef __cplusplus
extern "C" {
#endif

struct recap_pipeline {
  recap__model *model; /* shared with clones (read-only) */
  recap_device device;
  recap_run_mode mode; /* after options and RECAP_DISABLE_GRAPHS */
  recap_capture_mode capture_mode;
  int warmup; /* iterations per bucket before capturing */
  int max_recaptures;
  recap_oversize_policy oversize;

  recap_stream *stream; /* stream 0 (read-only) */
  bool owns_stream;
  recap_stream **side;   /* side stream s at side[s - 1]; NULL for streams without ops */
  int num_streams;       /* 1 + side streams (the plan's) */
  recap_event *fork;     /* recorded on stream 0 at the start of a run */
  recap_event **joins;   /* per stream s >= 1 with ops: recorded after its last op */
  recap_event **op_done; /* per op that another stream waits for, else NULL */
  recap_event *done;     /* run_async's event */

  recap_pool_id pool; /* the private pool: the arena and every graph's memory */
  bool has_pool;
  void *arena;           /* plan->arena_bytes from the pool */
  /* Op workspaces (recap__op_def.workspace_bytes), one per stream of the plan, each as large as
   * the largest need of that stream's ops over every bucket: ops of one stream run one after
   * another, so they can share it. From the pool, like the arena; NULL where none is needed. */
  void **workspaces;
  size_t *workspace_sizes;
  size_t num_workspaces;
  /* Every call's call_state (recap__op_def.call_state_bytes), carved from one zeroed block
   * (call_state_block, from the pool like the arena); call_states[bucket * num_ops + op] is
   * NULL where the op asks for none. */
  void *call_state_block;
  void **call_states;
  recap__state_set *state; /* the state tensors it allocated; pipelines sharing them retain it */
  void **data;           /* per tensor: memory of an external root (input, param, state,
                            scalar, output), else NULL; rebind changes an entry */
  void **owned;          /* per tensor: the buffer this pipeline allocated for it, else NULL */
  recap_tensor *views;   /* views[bucket * num_tensors + t]: every tensor of every bucket */
  int64_t *view_offsets; /* same indexing: elements from the alias root's start (plan views) */
  size_t num_tensors;
  recap__op_call *calls; /* calls[bucket * num_ops + op]: bound, ready to launch */
  size_t num_ops;
  size_t launches; /* ops that launch work per run (views launch nothing) (read-only) */

  /* Real rows of the current run, for kv_append's `rows` input: padding rows of a bucket
   * must not write into state. Device i32[1], written on stream 0 before every run from
   * rows_host[b] (constant host memory, one entry per possible row count). NULL when no
   * op needs it. */
  int32_t *rows_device;
  int32_t *rows_host;

  recap_graph **graphs;       /* per bucket; NULL entries until captured (read-only) */
  bool captured;              /* every bucket has a graph */
  bool graphs_failed;         /* a capture failed: graph mode is off, runs are eager */
  int recaptures;             /* re-captures after rebinds so far */
  recap_pipeline_stats stats; /* counters and setup times (read with recap_pipeline_stats_get) */
};

/* ---- bind.c ---- */

/* Creates the model's param stream, then allocates and initializes the params on it (waited
 * for); a param that `share` (NULL: none) also has uses its memory instead (share.h). On
 * failure the caller still calls recap__unbind_params. */
recap_status recap__bind_params(recap__model *model, const recap_pipeline *share);
/* Frees the params and destroys their stream (the model's last reference is gone and no work
 * uses them). */
void recap__unbind_params(recap__model *model);
/* Gives the pipeline its buffers: inputs, state, scalars and outputs (initialized as the spec
 * says; a state that `share` also has is its memory, share.h), the arena from the private
 * pool, the rows scalar, and builds views and calls. */
recap_status recap__bind_pipeline(recap_pipeline *p, const recap_pipeline *share);
/* Rebuilds every view and call after p->data changed (a rebind). */
void recap__bind_views(recap_pipeline *p);
/* Frees what recap__bind_pipeline allocated (the streams must be idle). */
void recap__unbind_pipeline(recap_pipeline *p);

/* ---- exec.c ---- */

/* Creates the side streams and events the plan needs. */
recap_status recap__exec_create_streams(recap_pipeline *p);
void recap__exec_destroy_streams(recap_pipeline *p);
/* Waits for stream 0 and every side stream. */
recap_status recap__exec_synchronize(recap_pipeline *p);
/* Writes the real row count for the next run (no-op without rows_device). */
recap_status recap__exec_set_rows(recap_pipeline *p, int64_t rows);
/* Submits one run of `bucket` op by op: fork, ops with their waits, join. Inside a capture
 * begun on stream 0, `graph` is the capturing graph (side streams join it); NULL otherwise.
 * A failing launch's message names the op ("op 'layer3': ..."). */
recap_status recap__exec_run(recap_pipeline *p, size_t bucket, recap_graph *graph);
/* Events recorded on an op's stream right before and after its launch (views: none). */
typedef struct {
  recap_event **starts, **ends; /* one per op of the plan */
} recap__exec_timing;
/* recap__exec_run with `timing` (NULL: none) around every launch. */
recap_status recap__exec_run_timed(recap_pipeline *p, size_t bucket, recap_graph *graph,
                                   const recap__exec_timing *timing);

/* ---- graph_mode.c ---- */

/* The smallest bucket >= batch, or num_buckets when batch exceeds the largest. */
size_t recap__pipeline_bucket_for(const recap_pipeline *p, int64_t batch);
/* Warmup and capture of every bucket (no-op in eager mode or once captured). A capture
 * failure turns graphs off for this pipeline (stderr says so) and is returned. */
recap_status recap__graph_capture_all(recap_pipeline *p);
/* The two halves of recap__graph_capture_all, for tests that act between them: the eager
 * warmup runs (GEMM preparation included; states and the RNG are restored afterwards), and
 * the captures, largest bucket first. */
recap_status recap__graph_warmup(recap_pipeline *p);
/* Keeps every capture of the process out while held (see graph_mode.c): for work that may
 * synchronize the device context, like copies between host and device memory. */
void recap__graph_exclusive_begin(void);
void recap__graph_exclusive_end(void);
recap_status recap__graph_capture_buckets(recap_pipeline *p);
/* Submits one run with `batch` rows: a replay, or an eager run (eager mode or `eager`,
 * oversize, fallback), counted in p->stats. */
recap_status recap__graph_run(recap_pipeline *p, int64_t batch, bool eager);
/* After p->data changed: re-captures every captured bucket (updates in place) or, past
 * max_recaptures, drops the graphs and goes eager with a warning. */
recap_status recap__graph_rebind(recap_pipeline *p);
/* Destroys the graphs (the streams must be idle). */
void recap__graph_destroy_all(recap_pipeline *p);

/* ---- dist.c ---- */

/* Broadcasts from rank 0 on `stream`, in one group, `count` elements at `head` (a run header,
 * a decode loop's launch block) and, with `inputs`, every input and scalar buffer of p (its
 * largest bucket's extent): what a rank needs of rank 0's step before replaying it. Failures
 * name the tensor. */
recap_status recap__dist_broadcast_step(recap_pipeline *p, recap_comm *comm, void *head,
                                        size_t count, recap_dtype dtype, bool inputs,
                                        recap_stream *stream);

#ifdef __cplusplus
}
#endif

#endif
