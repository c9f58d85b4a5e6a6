/*
 * plan_internal.h: the planner's working state, shared by the files that build a plan
 * (internal to plan*.c; everyone else reads the finished recap__plan of plan.h).
 *
 * plan_build.c checks the IR and drives the steps in this order, each filling part of
 * `planner`:
 *   recap__plan_choose_views (plan_views.c): shape ops made views, alias[] and root[];
 *   recap__plan_order (plan_order.c): cross-stream waits, buffers, in-place merges;
 *   recap__plan_place (plan_place.c): arena offsets and the lower bound.
 * Each returns RECAP_STATUS_OUT_OF_MEMORY (or INVALID_ARGUMENT on an IR that breaks ir.h's
 * contract) and leaves freeing to the driver.
 */
#ifndef RECAP_ENGINE_PLAN_INTERNAL_H
#define RECAP_ENGINE_PLAN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/plan.h"

typedef struct {
  size_t bytes; /* rounded up to RECAP_PLAN_ALIGNMENT */
  int first, last;
  int root;
  bool live_to_end;
  bool merged; /* merged into another buffer by an in-place op; no longer a buffer itself */
} work_buffer;

typedef struct {
  const recap__ir *ir; /* the largest bucket's: sizes, offsets and lifetimes come from it */
  /* Every bucket's IR, ascending (irs[num_buckets - 1] == ir): a view or an in-place write is
   * chosen only where it works in all of them, since every bucket runs on this one plan. */
  const recap__ir *const *irs;
  int num_buckets;
  recap__plan *plan;
  int num_ops, num_tensors, num_streams;
  /* Per tensor: the tensor whose memory it uses, or -1: the IR's alias_of (kv_append), or
   * for a reshape the planner turned into a view, the reshape's input. */
  int *alias;
  int *root;          /* per tensor: alias followed to its end */
  int *producer;      /* per tensor: the op that lists it as an output, or -1 */
  int *last_consumer; /* per tensor: the last op that reads it, or -1 */
  int *readers;       /* per tensor: input slots reading it */
  /* Per bucket and tensor ([b * num_tensors + t]): its layout (shape, strides; data unused)
   * and element offset in its alias root's memory, as decided so far: contiguous at 0 until a
   * view decision changes it. view_scratch holds one op's candidate layouts per bucket. */
  recap_tensor *views;
  int64_t *view_offset;
  recap_tensor *view_scratch;
  int64_t *offset_scratch;
  bool refused_by_bucket; /* the last view tried worked in the largest bucket, not in another */
  size_t *bytes;          /* per tensor */
  /* Happens-before, only with several streams, as vector clocks: clock[j * S + s] is the
   * last op on stream s that ends before op j starts (stream order and waits, transitively),
   * or -1. Ops on one stream run in order, so op i happens before op j exactly when i is no
   * later on its stream than clock[j][stream of i]: n * S ints instead of an n * n table. */
  int *clock;
  size_t waits_capacity;
  /* Buffers while planning: one per arena root tensor, indexed like tensors (buffer_of maps a
   * group root to the buffer it ended up in after in-place merges). */
  work_buffer *work;
  int *buffer_of;
  /* Per buffer (same indexing as work) and stream: the last op accessing it there, or -1. */
  int *stream_last;
} planner;

static inline const char *tensor_name(const recap__ir *ir, int t) {
  const char *name = ir->tensors[t].name;
  return name ? name : "?";
}

static inline const char *op_name(const recap__ir *ir, int j) {
  const char *name = ir->ops[j].name;
  return name ? name : "?";
}

static inline size_t align_up(size_t bytes) {
  return (bytes + (RECAP_PLAN_ALIGNMENT - 1)) / RECAP_PLAN_ALIGNMENT * RECAP_PLAN_ALIGNMENT;
}

/* An intermediate that starts its own arena buffer (possibly merged into another later). */
static inline bool is_arena_root(const planner *p, int t) {
  const recap__ir_tensor *x = &p->ir->tensors[t];
  return x->role == RECAP_ROLE_INTERMEDIATE && !x->is_output && p->alias[t] < 0;
}

/* Layout and offset of tensor t in bucket b, as decided so far. */
static inline recap_tensor *view_at(const planner *p, int b, int t) {
  return &p->views[(size_t)b * (size_t)p->num_tensors + (size_t)t];
}

static inline int64_t *offset_at(const planner *p, int b, int t) {
  return &p->view_offset[(size_t)b * (size_t)p->num_tensors + (size_t)t];
}

/* Follows alias[] from every tensor to its root (root[]); fails on a cycle. */
recap_status recap__plan_find_roots(planner *p);

/* Makes shape ops views where the rules allow (docs/PLANNER.md): sets alias[], root[] and the
 * plan's view_of, view_op, op_is_view and op_copies_for_buckets. alias_write is per-tensor
 * scratch (num_tensors ints). */
recap_status recap__plan_choose_views(planner *p, int *alias_write);

/* Computes the cross-stream waits (several streams only), collects one buffer per arena root
 * and merges in-place results into their input's buffer (unless the plan is separate). */
recap_status recap__plan_order(planner *p);

/* Every access of buffer b (other than op j itself) is ordered before op j. */
bool recap__plan_buffer_ordered_before(const planner *p, int b, int j);

/* Places the plan's buffers (ids[k]: the work buffer behind plan->buffers[k]) in the arena:
 * offsets, arena_bytes, and with several streams the antichain lower bound. */
recap_status recap__plan_place(const planner *p, const int *ids);

#endif
