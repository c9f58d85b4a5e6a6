/*
 * ir.h: a pipeline after its spec has been checked (internal to the engine).
 *
 * spec.c turns YAML into a positioned AST (spec.h); ir.c resolves names, substitutes one
 * value for every symbolic dim (one IR per bucket), infers shapes and dtypes through the op
 * registry (kernels/op.h) and checks the DAG. Every tensor and op keeps the spec position it
 * came from, so later stages (planning, capture) can still report FILE:LINE:COL.
 *
 *   recap__spec *spec;  recap__diag diag = {0};     // diag collects every error
 *   recap__spec_load_file("mlp.yaml", &options, &spec, &diag);   // spec.h: checks it all
 *   recap__ir *ir;
 *   recap__ir_build(spec, bucket, &ir, &diag);  // bucket: index into the bucketed dim's values
 *   ... recap__plan_build(ir, &plan) ...
 *   recap__ir_destroy(ir); recap__spec_destroy(spec); recap__diag_free(&diag);
 *
 * An IR owns all its strings (positions point at its own copy of the file name), so it may
 * outlive the spec it was built from.
 */
#ifndef RECAP_ENGINE_IR_H
#define RECAP_ENGINE_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/recap.h"
#include "kernels/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A position in a spec file (1-based line and column; 0 when not from a file). */
typedef struct {
  const char *file; /* owned by the spec */
  int line, col;
} recap__src_pos;

/* Collected errors, each "FILE:LINE:COL: error: message" (an error identical to a recorded one
 * is not recorded twice). Zero-initialize; release with recap__diag_free. */
typedef struct {
  char **messages;
  size_t count, capacity;
  size_t max_messages; /* further errors are counted, not stored (0: 100) */
  size_t dropped;
} recap__diag;

/* Records one error at pos (printf-style). Never fails: on allocation failure the error is
 * counted in `dropped`. */
void recap__diag_error(recap__diag *diag, recap__src_pos pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* All messages joined by newlines (malloc'd, caller frees); NULL when none. */
char *recap__diag_join(const recap__diag *diag);
/* Records the failure of a spec check: recap_last_error() gets the first messages (whole
 * lines within its 2 KiB, then "(and N more errors)"), recap_last_error_full() all of them.
 * Returns RECAP_STATUS_SPEC_ERROR. */
recap_status recap__diag_report(const recap__diag *diag);
void recap__diag_free(recap__diag *diag);
/* Number of errors recorded (stored and dropped). */
size_t recap__diag_errors(const recap__diag *diag);
/* Appends each message of src whose "FILE:LINE:COL:" position has no message in dst yet: one
 * report per place, when the same mistake shows up in several buckets' IRs. */
void recap__diag_merge_new_positions(recap__diag *dst, const recap__diag *src);

typedef enum {
  RECAP_ROLE_INPUT,        /* bound by the caller; a static buffer */
  RECAP_ROLE_PARAM,        /* allocated and initialized once; shareable between instances */
  RECAP_ROLE_STATE,        /* persistent across replays, updated in place (a KV cache) */
  RECAP_ROLE_SCALAR,       /* a device-resident value kernels read (a position, a length) */
  RECAP_ROLE_INTERMEDIATE, /* produced by an op; planned into the arena */
} recap_tensor_role;

typedef enum {
  RECAP_INIT_NONE,
  RECAP_INIT_ZEROS,
  RECAP_INIT_ONES,
  RECAP_INIT_NORMAL,  /* mean, std */
  RECAP_INIT_UNIFORM, /* low, high */
  RECAP_INIT_FILE,    /* raw little-endian, or .safetensors (path, key) */
  RECAP_INIT_VALUE,   /* every element = value (a scalar's default, value 0) */
} recap_init_kind;

typedef struct {
  recap_init_kind kind;
  double mean, std, low, high, value;
  char *path; /* resolved relative to the spec's folder (and checked against base_dir) */
  char *key;  /* tensor name inside a .safetensors file (default: the tensor's name) */
} recap__ir_init;

typedef struct {
  char *name;
  recap__src_pos pos;
  recap_tensor_role role;
  recap_dtype dtype;
  int ndim;
  int64_t shape[RECAP_MAX_DIMS];
  uint64_t bytes; /* numel * element size */
  /* Which axis, if any, carries the bucketed (batch) dim: padding rows live there. -1: none.
   * Found by building the IR again with another value of the bucketed dim: the axes whose
   * extent changes carry it (bucket_axes has a bit per such axis; bucket_axis is the first).
   * For declared states and params it is axis 0 or none (the loader enforces it), so a
   * smaller bucket's tensor is a prefix of the largest bucket's. */
  int bucket_axis;
  unsigned bucket_axes;
  recap__ir_init init;
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
  const recap_op_def *def;
  char *name; /* the spec's `name:`, else "<op>#<index>" */
  recap__src_pos pos;
  int inputs[RECAP_OP_MAX_INPUTS];
  int num_inputs;
  int outputs[RECAP_OP_MAX_OUTPUTS];
  int num_outputs;
  recap_op_attrs attrs;
  int stream; /* 0: the pipeline's stream; N > 0: side stream N */
  /* Set by the fusion pass (fuse.h) on the `expr` op that replaces a group and on the
   * `linear` that absorbed a residual add, else NULL/0: the indices of the spec's ops it
   * computes (ascending), and, for an `expr` op only, the program it owns (attrs.expr points
   * at it; recap__ir_destroy frees it; NULL for a folded linear). */
  int *fused_from;
  int num_fused;
  struct recap_expr_program *program;
} recap__ir_op;

typedef struct {
  char *name;
  int64_t *values; /* one value: a plain dim; several: buckets, ascending */
  size_t count;
  recap__src_pos pos;
} recap__ir_dim;

typedef struct {
  char *name;
  recap_backend_kind device;
  recap_dtype dtype;
  uint64_t seed;
  int warmup, iters;
  recap__ir_dim *dims;
  size_t num_dims;
  int64_t *dim_values; /* this IR's value for each dim */
  int bucket_dim;      /* the dim with buckets, or -1 */
  size_t bucket;       /* which of its values this IR uses (0 without buckets) */
  char *file;          /* the spec's file name; every pos.file points here */
  recap__ir_tensor *tensors;
  size_t num_tensors;
  /* In spec order, which is a valid topological order; after the fusion pass a fused op
   * stands at its group's last op's place, and op i is no longer the spec's op i. */
  recap__ir_op *ops;
  size_t num_ops;
  int *outputs; /* tensor indices */
  size_t num_outputs;
  int num_streams; /* 1 + highest side stream used */
  size_t fused_ops; /* spec ops the fusion pass replaced by fused ops (0: none, or no pass) */
} recap__ir;

/* Whether output `output` of an op is, by the op's nature, the memory of one of its inputs
 * (kv_append writes into the cache it returns); that input's index, or -1. */
int recap__ir_output_alias(const recap_op_def *def, int output);

/* Index of a tensor by name; -1 if none. */
int recap__ir_find_tensor(const recap__ir *ir, const char *name);
void recap__ir_destroy(recap__ir *ir);

#ifdef __cplusplus
}
#endif

#endif
