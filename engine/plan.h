/*
 * plan.h: where every tensor of a pipeline lives, and which cross-stream waits it needs
 * (internal to the engine).
 *
 * Planning is separate from allocation (ggml's reserve/alloc split): the plan is pure
 * host-side arithmetic over an IR, and the binder later carves one arena of arena_bytes out
 * of the pipeline's private pool and points every planned tensor at arena + offset.
 *
 *   recap__plan *plan;
 *   RECAP_TRY(recap__plan_build_buckets(irs, num_buckets, NULL, &plan));  // or _build(ir)
 *   ... arena = alloc(plan->arena_bytes); tensor t at arena + plan->tensors[t].offset when
 *       plan->tensors[t].buffer >= 0; recap__plan_views(irs[b], ...) gives bucket b's
 *       layouts ...
 *   char *text; recap__plan_format(irs[num_buckets - 1], plan, &text); puts(text); free(text);
 *   recap__plan_destroy(plan);
 *
 * What lives where:
 * - Inputs, params, state, scalars and outputs are EXTERNAL: the binder gives each its own
 *   buffer. Nothing is ever planned over them.
 * - Intermediates (role RECAP_ROLE_INTERMEDIATE, not an output, not a view) get a byte
 *   offset in the one arena, aligned to RECAP_PLAN_ALIGNMENT. A tensor is live from the op that
 *   produces it to its last consumer (inclusive; a tensor nobody reads lives for its producer
 *   only). Tensors whose lifetimes are disjoint may share bytes.
 * - In place: an op whose def->in_place_input = k >= 0 writes output 0 over input k when the
 *   output is an intermediate of the same byte size, input k is contiguous at the start of its
 *   buffer (an in-place write over a strided view would overwrite elements the op has not read
 *   yet), input k lives in the arena (never an
 *   input, param, state, scalar or output) and this op is the last access of input k's buffer
 *   (its views included), no other input of the op reads that buffer, and with several
 *   streams every other access of the buffer is ordered before this op. Chains form: a run of
 *   elementwise ops over one size uses a single buffer.
 * - Views use the memory of their alias root (followed to its end), with their own shape,
 *   strides and element offset into it (recap__plan_views computes them per bucket). Two kinds:
 *   the IR's aliases (alias_of >= 0: kv_append's output is its cache, same layout), and the
 *   shape ops (reshape, permute, transpose, slice, split) the planner turns into views
 *   (op_is_view: the op launches nothing):
 *   - forward: the op's outputs are strided views of its input (a split of [B, S, 3D] gives
 *     three views of row stride 3D). Taken when every reader of a non-contiguous result
 *     accepts it (its op's infer passes with the strided input: infer is each op's statement
 *     of the layouts it reads; another shape op always accepts, as it stays a strided copy if
 *     it cannot be a view), a reshape's strides exist (no copy needed to merge its dims), and
 *     the view's byte offset is a multiple of RECAP_PLAN_VIEW_ALIGNMENT;
 *   - backward: a permute, transpose or reshape whose input X is read by it alone and written
 *     by an op that writes strided outputs (attention): X becomes the view and the op's output
 *     the contiguous root, so X's producer writes straight into the consumer's layout (the
 *     permute of an attention output back to [B, S, H, Dh] costs nothing). Preferred over
 *     forward: readers of the result then see contiguous memory.
 *   Neither when a result is a graph output (outputs keep their own contiguous buffer), when
 *   the input's memory is written through an IR alias AFTER the shape op (a view would see a
 *   kv_append's later write that the copy must not; a write before it is what a copy would
 *   read too, so a permute of a KV cache for attention is a view), when a result's memory is
 *   ever written through an alias, or when a result is already an alias.
 *   split is a view only if all its parts are. A view of an arena intermediate keeps that
 *   buffer alive until the view's last consumer; a view of an external tensor is external too.
 *   A buffer's lifetime runs from the first real op that writes it (for a backward view's
 *   root, the producer of the view) to the last real op that reads any view of it.
 * - Arena planning off (RECAP_ARENA=0 in the environment when the plan is built, or
 *   recap__plan_options.separate): no in-place reuse and every buffer at its own offset
 *   (arena_bytes == naive_bytes); the binder then gives each buffer its own allocation, so
 *   compute-sanitizer sees an out-of-bounds access between two intermediates. Views still
 *   share memory: that is what they mean.
 *
 * Streams and waits. Ops run in index order on their stream (op->stream; 0 is the pipeline's
 * stream). `waits` lists every event wait the data needs, so that the multi-stream execution
 * reads and writes memory exactly as the sequential spec order does: op j waits for op i
 * (i < j, other stream) when j reads what i wrote (a fork or a join), when j writes memory i
 * still reads (a kv_append into a cache another stream reads), or when both write it. Waits
 * already implied by other waits and stream order are left out. The engine records an event
 * after op i on i's stream and makes j's stream wait for it before j. A shape op planned as a
 * view touches no memory: it neither waits nor is waited for, and readers of the view wait for
 * whoever wrote the memory underneath. In addition, the engine forks every side stream from the
 * pipeline's stream at the start (inputs are copied in there) and joins each side stream's last op
 * (stream_last_op) back into it at the end, so that copy-out and the next replay see
 * everything; those two are not in `waits`.
 *
 * Cross-stream reuse: two arena tensors with disjoint lifetimes share bytes only if every
 * access of the earlier one happens before (stream order plus `waits`) the op that writes the
 * later one. The planner never adds a wait to make reuse possible: it keeps such tensors
 * apart. The user placed the ops on different streams so that they overlap; a wait added to
 * save memory would serialize exactly that work, whereas the memory it saves is bounded by the
 * bytes live on the side stream between two data-dependent synchronisation points. Once a
 * branch has been joined by a data dependency, its buffers are reusable as usual.
 *
 * Offsets. Tensors that share memory (an in-place chain with its views) form one buffer.
 * Buffers are placed greedily, each into the best-fitting gap (the smallest gap that holds it)
 * among the already placed buffers it conflicts with, else above them all. The planner starts
 * that greedy from three orders (by size as TFLite does, by lifetime length, by start), improves
 * each by local search over the order (move one buffer elsewhere, re-run, keep what shrinks
 * the arena) under a fixed work budget, stops as soon as the arena equals max_live_bytes (then
 * it is optimal), and keeps the smallest arena. A greedy pass costs O(B^2) for B buffers:
 * 5000 intermediates plan in about 0.2 s. tests/plan_test.c checks the result against an exact
 * optimum on thousands of small random DAGs.
 *
 * Lower bound. With one stream, buffers conflict (must be apart) exactly when their lifetimes
 * overlap, and the most bytes live at one op bounds every placement. With several streams a
 * buffer also conflicts with any later one whose first op some access of it is not ordered
 * before, which op indices alone do not show: in fork_join.yaml the branches' four buffers and
 * their shared input all conflict pairwise (each branch may run ahead of the other), so no
 * placement without added waits is smaller than their sum, while at most three of them are live
 * at any one op index. The reported bound (max_live_bytes) is the heaviest set of pairwise
 * conflicting buffers: "A before B" (every access of A happens before B's first op) is a
 * partial order, such a set is an antichain of it, and the heaviest antichain is computed
 * exactly as total bytes minus a max flow (weighted Dilworth). The placement stops searching
 * once it reaches the bound, which it then has proved optimal.
 *
 * Buckets. The engine plans all buckets' IRs at once (recap__plan_build_buckets): sizes, offsets,
 * lifetimes and waits come from the LARGEST bucket's IR, and every bucket's graph uses the same
 * arena and the same offsets. That is sound because every shape grows monotonically with the
 * bucketed dim, so each tensor of a smaller bucket fits the bytes planned for it, and the DAG
 * (hence every lifetime and wait) is the same. What does depend on the shapes is decided over
 * all buckets: a shape op becomes a view only if the view forms, is aligned and is accepted by
 * its readers in every bucket (a split whose parts start 16-byte aligned at B = 8 may not at
 * B = 2; a slice that is contiguous at the largest bucket may be strided, and no longer
 * reshapeable without a copy, at a smaller one), and an op writes in place only if its input
 * is contiguous and of its output's size in every bucket. Otherwise the op copies, in every
 * bucket (one plan, one set of launches). recap__plan_check_fits verifies a bucket against a
 * plan.
 *
 * Ownership: a plan owns all its arrays; it keeps no pointer into the IR.
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
  /* Per op: a shape op planned as a view (see above). The engine launches nothing for it. */
  bool *op_is_view;
  /* Per op: a shape op that would be a view in the largest bucket alone, but copies because a
   * smaller bucket cannot form or use the view (see "Buckets"). */
  bool *op_copies_for_buckets;
  bool separate;      /* arena planning off: no reuse, each buffer its own allocation */
  size_t arena_bytes; /* the arena: max over buffers of offset + bytes */
  size_t naive_bytes; /* one rounded allocation per planned intermediate (no reuse at all) */
  /* The lower bound: the heaviest set of buffers (rounded bytes) that must pairwise be apart,
   * so arena_bytes >= max_live_bytes always. With one stream, the buffers live at one op (the
   * max over ops). With several, it also counts buffers that are apart because another stream
   * may still use them: fork-join's two branches, each live on its own stream, while the op
   * order says only one of them is (see "Lower bound" above). */
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
  bool separate; /* arena planning off (see above); recap__plan_build reads RECAP_ARENA=0 */
} recap__plan_options;

/* recap__plan_build with explicit options instead of the environment's. */
recap_status recap__plan_build_with(const recap__ir *ir, const recap__plan_options *options,
                                    recap__plan **out);

/* Plans a bucketed spec: irs[0..count) are its buckets' IRs in ascending order (after the same
 * fusion pass), irs[count - 1] the largest, whose sizes the plan holds. A view or an in-place
 * write is taken only where it works in EVERY bucket; elsewhere the shape op stays a copy
 * (see "Buckets" above). Every smaller bucket then passes recap__plan_check_fits. options NULL:
 * the environment's (RECAP_ARENA). Fails as recap__plan_build does, and with
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

/* A readable table for `recap plan`: per tensor its name, role, bytes, offset, lifetime,
 * stream and in-place/view notes; then the waits and the totals (arena, naive sum, max-live
 * lower bound). `ir` must be the IR the plan was built from. *text is malloc'd; the caller
 * frees it. Fails with RECAP_STATUS_INVALID_ARGUMENT if ir and plan do not match, or
 * RECAP_STATUS_OUT_OF_MEMORY (*text untouched). */
recap_status recap__plan_format(const recap__ir *ir, const recap__plan *plan, char **text);

#ifdef __cplusplus
}
#endif

#endif
