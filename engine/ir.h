/*
 * ir.h: one bucket of a checked spec, with every size known (internal to the engine).
 *
 * spec_*.c check what the text says (spec.h); ir.c substitutes one value for every symbolic
 * dim (one IR per bucket), infers shapes and dtypes through the op contract (kernels/op.h) and
 * checks sizes against the device's memory. Every tensor and op keeps the spec position it
 * came from, so later stages (planning, capture) can still report FILE:LINE:COL. The load
 * path (load.h) is the one caller that matters:
 *
 *   recap__ir *ir[n];
 *   for (b = 0; b < n; ++b) recap__ir_build(spec, b, capacity, &ir[b], &diag);
 *   for (b = 0; b < n; ++b) recap__ir_mark_bucket_axes(ir[b], ir[b + 1 < n ? b + 1 : b - 1],
 * &diag);
 *   ... fuse, plan ...
 *   recap__ir_destroy(ir[b]) ...
 *
 * An IR owns all its strings (positions point at its own copy of the file name), so it may
 * outlive the spec it was built from.
 */
#ifndef RECAP_ENGINE_IR_H
#define RECAP_ENGINE_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/diag.h"
#include "engine/spec.h"
#include "include/recap.h"
#include "kernels/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most bytes one tensor may take: it keeps every sum of sizes the planner makes below
 * SIZE_MAX. The IR refuses a larger tensor at its spec position; the planner checks again. */
#define RECAP__MAX_TENSOR_BYTES ((uint64_t)1 << 56)

typedef struct {
  char *name;
  recap__src_pos pos;
  recap_tensor_role role;
  recap_dtype dtype;
  int ndim;
  int64_t shape[RECAP_MAX_DIMS];
  uint64_t bytes; /* numel * element size */
  /* Which axis, if any, carries the bucketed (batch) dim: padding rows live there. -1: none.
   * Found by comparing with an IR of another value of the bucketed dim: the axes whose extent
   * changes carry it (bucket_axes has a bit per such axis; bucket_axis is the first;
   * recap__ir_mark_bucket_axes).
   * For declared states and params it is axis 0 or none (the loader enforces it), so a
   * smaller bucket's tensor is a prefix of the largest bucket's. */
  int bucket_axis;
  unsigned bucket_axes;
  recap__tensor_init init;
  /* For `init: file` in the largest bucket's IR: what the binder reads (weight_plan.h; owned);
   * NULL otherwise. */
  struct recap__weight_plan *weights;
  /* Where the spec says how the tensor starts: its `path:` for files, else its `init:` key,
   * else the tensor's name (bind errors point here). */
  recap__src_pos init_pos;
  int producer;      /* op index; -1 for tensors not produced by an op */
  int num_consumers; /* input slots reading it (an op reading it twice counts twice) */
  bool is_output;
  /* For an op output that must share memory with an input: the tensor whose memory it uses
   * (-1: its own). Only kv_append's output (the cache it writes) is such an alias; optional
   * in-place reuse (def->in_place_input) and reshape-as-view are the planner's choice. */
  int alias_of;
} recap__ir_tensor;

typedef struct {
  const recap__op_def *def;
  char *name; /* the spec's `name:`, else "<op>#<index>" */
  recap__src_pos pos;
  int inputs[RECAP_OP_MAX_INPUTS];
  int num_inputs;
  int outputs[RECAP_OP_MAX_OUTPUTS];
  int num_outputs;
  recap__op_attrs attrs;
  int stream; /* 0: the pipeline's stream; N > 0: side stream N */
  /* Set by the fusion pass (fuse.h) on the `expr` op that replaces a group and on the
   * `linear` that absorbed a residual add, else NULL/0: the indices of the spec's ops it
   * computes (ascending), and, for an `expr` op only, the program it owns (attrs.expr points
   * at it; recap__ir_destroy frees it; NULL for a folded linear). */
  int *fused_from;
  int num_fused;
  struct recap__expr_program *program;
} recap__ir_op;

typedef struct {
  char *name;
  int64_t *values; /* one value: a plain dim; several: buckets, ascending */
  size_t count;
  recap__src_pos pos;
  int alias; /* the dim whose value this one has in every bucket (spec.h), or -1 */
} recap__ir_dim;

typedef struct {
  char *name;
  recap_backend_kind device; /* the spec's; the loader sets the model's (load.c) */
  recap_dtype dtype;
  uint64_t seed;
  int warmup, iters;
  recap__ir_dim *dims;
  size_t num_dims;
  int64_t *dim_values; /* this IR's value for each dim (an alias's: its dim's) */
  int bucket_dim;      /* the dim with buckets, or -1 (its aliases carry them too) */
  size_t bucket;       /* which of its values this IR uses (0 without buckets) */
  char *file;          /* the spec's file name; every pos.file points here */
  char **instances;    /* the labels of the block instances positions name (pos.instance) */
  size_t num_instances;
  recap__ir_tensor *tensors;
  size_t num_tensors;
  /* In spec order, which is a valid topological order; after the fusion pass a fused op
   * stands at its group's last op's place, and op i is no longer the spec's op i. */
  recap__ir_op *ops;
  size_t num_ops;
  int *outputs; /* tensor indices */
  size_t num_outputs;
  int num_streams;  /* 1 + highest side stream used */
  size_t fused_ops; /* spec ops the fusion pass replaced by fused ops (0: none, or no pass) */
} recap__ir;

/* Builds the IR of one bucket: sizes substituted, shapes and dtypes inferred, sizes checked
 * against `capacity` bytes of device memory (0: not checked). The largest bucket's build also
 * checks the files of `init: file` tensors as the binder will read them (opening each, reading
 * a safetensors header, never the data). Errors go to diag (NULL: recap_last_error() only):
 * RECAP_STATUS_SPEC_ERROR with positioned errors when the spec does not hold for this bucket,
 * RECAP_STATUS_OUT_OF_MEMORY, RECAP_STATUS_INVALID_ARGUMENT for a bucket out of range. The
 * bucketed axes are not marked yet (recap__ir_mark_bucket_axes). */
recap_status recap__ir_build(const recap__spec *spec, size_t bucket, uint64_t capacity,
                             recap__ir **out, recap__diag *diag);
/* " (with B = 4)": what a bucket's errors end with (dim: the bucketed dim's name). */
void recap__ir_bucket_suffix(const char *dim, int64_t value, char *buf, size_t size);
/* The IR with the bucketed dim one above its largest value, for a spec whose bucketed dim has
 * one value: the other side of recap__ir_mark_bucket_axes. Reports no errors of its own. */
recap_status recap__ir_build_probe(const recap__spec *spec, recap__ir **out);
/* Marks the axes of ir's tensors that carry the bucketed dim (those whose extent differs in
 * `other`, an IR of the same spec at another value of it), then reports every op that reduces
 * or contracts over such an axis: padding rows would change its result.
 * RECAP_STATUS_SPEC_ERROR when there is one. */
recap_status recap__ir_mark_bucket_axes(recap__ir *ir, const recap__ir *other, recap__diag *diag);
/* IRs built so far in this process (probes included): the load path builds one per bucket. */
size_t recap__ir_builds(void);

/* Index of a tensor by name; -1 if none. */
int recap__ir_find_tensor(const recap__ir *ir, const char *name);
void recap__ir_destroy(recap__ir *ir);

#ifdef __cplusplus
}
#endif

#endif
