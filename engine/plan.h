/*
 * plan.h: where every tensor of a pipeline lives, and which cross-stream waits it needs
 * (internal to the engine). A plan is host-side arithmetic over an IR: each intermediate gets
 * a byte offset in one arena (tensors with disjoint lifetimes share bytes, an elementwise op
 * may write over its dying input, shape ops become views), and ops on different streams get
 * the event waits their data needs. The binder carves the arena and points tensors into it.
 *
 *   recap__plan *plan;
 *   RECAP_TRY(recap__plan_build_buckets(irs, num_buckets, NULL, &plan));  // or _build(ir)
 *   ... arena = alloc(plan->arena_bytes); tensor t at arena + plan->tensors[t].offset when
 *       plan->tensors[t].buffer >= 0; recap__plan_views(irs[b], ...) gives bucket b's
 *       layouts ...
 *   recap__plan_destroy(plan);
 *
 * The rules (what lives where, views, in place, waits, placement, the lower bound, buckets)
 * are in docs/PLANNER.md; `recap plan` prints a plan (cli/plan_text.h). A plan owns
 * all its arrays; it keeps no pointer into the IR.
 */
#ifndef RECAP_ENGINE_PLAN_H
#define RECAP_ENGINE_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/ir.h"
#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every arena offset and every buffer size is a multiple of this (cuBLASLt and vectorized
 * kernels want >= 16; 256 matches cudaMalloc's own alignment). */
enum { RECAP_PLAN_ALIGNMENT = 256 };

/* A planner-made view starts at a multiple of this many bytes from its root: kernels' vector
 * paths (16-byte loads, cp.async, cuBLASLt) then see the alignment they get from the arena. */
enum { RECAP_PLAN_VIEW_ALIGNMENT = 16 };

typedef enum {
  RECAP_PLAN_EXTERNAL, /* input, param, state, scalar or output: its own buffer, not planned */
  RECAP_PLAN_ARENA,    /* an intermediate that starts a buffer in the arena */
  RECAP_PLAN_IN_PLACE, /* an intermediate written over its producer's dying input */
  RECAP_PLAN_VIEW,     /* the IR's alias (kv_append) or a shape op made a view: its root's memory */
} recap__plan_kind;

typedef struct {
  recap__plan_kind kind;
  size_t bytes;  /* numel * dtype size, unrounded */
  int buffer;    /* index into plan->buffers, or -1 when the memory is external */
  size_t offset; /* byte offset in the arena when buffer >= 0, else 0 */
  /* Own lifetime in op indices: producer .. last consumer (inclusive; producer .. producer
   * when nothing reads it). Outputs: last_op is num_ops (live after the pipeline). Tensors no
   * op produces: first_op is -1 and last_op their last consumer (-1 if none). */
  int first_op, last_op;
  /* IN_PLACE: the input tensor it overwrites. VIEW: its alias root (whose memory it is).
   * Otherwise -1. */
  int shares_with;
  /* VIEW: the tensor its layout derives from (view_of) through op view_op: forward when it is
   * that op's output (view_of is the op's input), backward when it is the op's input (view_of
   * is the op's output). view_op is -1 for an IR alias (same layout as view_of). Otherwise
   * both -1. */
  int view_of, view_op;
} recap__plan_tensor;

/* One region of the arena and the tensors that use it (an intermediate, the results written
 * in place over it, and the views of any of them). */
typedef struct {
  size_t offset; /* multiple of RECAP_PLAN_ALIGNMENT */
  size_t bytes;  /* largest member, rounded up to RECAP_PLAN_ALIGNMENT */
  int first_op;  /* the op that writes its first tensor */
  int last_op;   /* its last access; num_ops when an output aliases it (live after the end) */
  int root;      /* the tensor that starts it (kind RECAP_PLAN_ARENA) */
} recap__plan_buffer;

/* Op `waiter` must not start before op `waited` (on another stream, waited < waiter) ends. */
typedef struct {
  int waiter, waited;
} recap__plan_wait;

typedef struct recap__plan {
  size_t num_tensors, num_ops; /* as in the IR it was built from */
  recap__plan_tensor *tensors; /* one per IR tensor, same indices */
  recap__plan_buffer *buffers;
  size_t num_buffers;
  recap__plan_wait *waits; /* sorted by waiter, then by waited */
  size_t num_waits;
  int num_streams;
  int *stream_last_op; /* per stream, its last op (-1 if none): what the end joins */
  /* Per op: a shape op planned as a view (docs/PLANNER.md). The engine launches nothing for it. */
  bool *op_is_view;
  /* Per op: a shape op that would be a view in the largest bucket alone, but copies because a
   * smaller bucket cannot form or use the view (docs/PLANNER.md, "Buckets"). */
  bool *op_copies_for_buckets;
  bool separate;      /* arena planning off: no reuse, each buffer its own allocation */
  size_t arena_bytes; /* the arena: max over buffers of offset + bytes */
  size_t naive_bytes; /* one rounded allocation per planned intermediate (no reuse at all) */
  /* The lower bound: the heaviest set of buffers (rounded bytes) that must pairwise be apart,
   * so arena_bytes >= max_live_bytes always. With one stream, the buffers live at one op (the
   * max over ops). With several, it also counts buffers that are apart because another stream
   * may still use them: fork-join's two branches, each live on its own stream, while the op
   * order says only one of them is (docs/PLANNER.md, "Lower bound"). */
  size_t max_live_bytes;
  /* Max over ops of the rounded bytes of buffers live at that op, by op index alone: equal to
   * max_live_bytes with one stream; below it when streams overlap. */
  size_t live_at_one_op_bytes;
} recap__plan;

/* Plans `ir` (for a bucketed spec: the largest bucket's IR). On success *out owns a new plan.
 * Fails with RECAP_STATUS_INVALID_ARGUMENT, naming the tensor or op, on an IR that breaks the
 * contract of ir.h (index out of range, an input used before its producer, an alias cycle, an
 * intermediate no op produces, a stream outside 0..num_streams-1, a size that overflows), and
 * with RECAP_STATUS_OUT_OF_MEMORY; *out is then untouched and nothing leaks. */
recap_status recap__plan_build(const recap__ir *ir, recap__plan **out);

typedef struct {
  bool separate; /* arena planning off (docs/PLANNER.md); recap__plan_build reads RECAP_ARENA=0 */
} recap__plan_options;

/* recap__plan_build with explicit options instead of the environment's. */
recap_status recap__plan_build_with(const recap__ir *ir, const recap__plan_options *options,
                                    recap__plan **out);

/* Plans a bucketed spec: irs[0..count) are its buckets' IRs in ascending order (after the same
 * fusion pass), irs[count - 1] the largest, whose sizes the plan holds. A view or an in-place
 * write is taken only where it works in EVERY bucket; elsewhere the shape op stays a copy
 * (docs/PLANNER.md, "Buckets"). Every smaller bucket then passes recap__plan_check_fits.
 * options NULL: the environment's (RECAP_ARENA). Fails as recap__plan_build does, and with
 * RECAP_STATUS_INVALID_ARGUMENT, naming the tensor or op, when the IRs differ in anything but
 * shapes or a smaller bucket's tensor is larger than the largest's; *out is then untouched. The
 * IRs are only read. */
recap_status recap__plan_build_buckets(recap__ir *const *irs, size_t count,
                                       const recap__plan_options *options, recap__plan **out);

/* Every tensor's layout for `ir` (the planned IR or another bucket's: shapes come from ir):
 * views[t] gets ir's dtype, ndim and shape, and strides in elements (contiguous for anything
 * that is not a view); offsets[t] (elements) is where it starts in its alias root's memory
 * (plan->tensors[t].shares_with for a view, itself otherwise). data is left NULL. Fails with
 * RECAP_STATUS_INVALID_ARGUMENT, naming the tensor, when a view cannot be formed for ir's
 * shapes (a reshape whose dims no longer merge, an offset off RECAP_PLAN_VIEW_ALIGNMENT) or a
 * reader of a non-contiguous view rejects it; RECAP_STATUS_OUT_OF_MEMORY. */
recap_status recap__plan_views(const recap__ir *ir, const recap__plan *plan, recap_tensor *views,
                               int64_t *offsets);

/* Frees the plan; NULL is fine. */
void recap__plan_destroy(recap__plan *plan);

/* Whether `smaller` (another bucket's IR of the same spec) can run on the arena and offsets
 * of `largest`: the same tensors and ops, every tensor's bytes <= the bytes planned for it,
 * every in-place pair still of equal size, and every view still formable and accepted by its
 * readers (recap__plan_views). RECAP_STATUS_INVALID_ARGUMENT names the first tensor that does
 * not fit. */
recap_status recap__plan_check_fits(const recap__plan *largest, const recap__ir *smaller);

#ifdef __cplusplus
}
#endif

#endif
