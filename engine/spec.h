/*
 * spec.h: a pipeline spec (YAML) read and checked (internal to the engine).
 *
 *   recap__spec_options opts = {.dims = overrides};   // zeros: defaults
 *   recap__diag diag = {0};
 *   recap__spec *spec = NULL;
 *   recap_status st = recap__spec_load_file("specs/mlp.yaml", &opts, &spec, &diag);
 *   if (st == RECAP_STATUS_SPEC_ERROR) print recap__diag_join(&diag) (or recap_last_error());
 *   ... recap__ir_build(spec, b, ...) for each bucket (ir.h) ...
 *   recap__spec_destroy(spec); recap__diag_free(&diag);
 *
 * This is the first half of a load (engine/load.h runs the whole path: spec, every bucket's
 * IR once, fusion, plan). It checks what the text alone says: YAML syntax and limits, every
 * key's type, the dims (with the caller's overrides applied first, so they are checked as if
 * the spec said them), names, ops and their attributes, the DAG, the files `init: file`
 * tensors name (they must exist inside base_dir) and the checkpoints they read: each one is
 * opened once and every file header in it parsed once (checkpoint.h), and every key must be
 * in it with a dtype recap has; no tensor data is read. Shapes, dtypes and sizes need a bucket's
 * values and are the IR's check (ir.h). Every problem found is recorded in `diag` as
 * "FILE:LINE:COL: error: message" (one pass; a YAML syntax error or a limit stops the parse,
 * as the rest cannot be read reliably); the call then returns RECAP_STATUS_SPEC_ERROR and
 * recap_last_error() holds the first messages joined by newlines. RECAP_STATUS_IO_ERROR when
 * the file cannot be read, RECAP_STATUS_OUT_OF_MEMORY when an allocation fails. Nothing is
 * allocated on any device. On failure *out is untouched. `diag` may be NULL when only
 * recap_last_error() is wanted.
 *
 * The spec format, the defaults and the limits are documented in specs/README.md.
 */
#ifndef RECAP_ENGINE_SPEC_H
#define RECAP_ENGINE_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/diag.h"
#include "engine/yaml_ast.h"
#include "include/recap.h"
#include "kernels/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor's init as the spec writes it, owning its strings (recap_tensor_role and
 * recap_init_kind are public: recap_pipeline_tensor_info_get reports them). */
typedef struct {
  recap_init_kind kind;
  double mean, std, low, high, value;
  char *path; /* resolved relative to the spec's folder (and checked against base_dir) */
  char *key;  /* tensor name inside a .safetensors file (default: the tensor's name) */
} recap__tensor_init;

/* Dims and literal sizes stay below 2^62, as the op registry's element counts do. */
#define RECAP__SPEC_MAX_SIZE ((int64_t)1 << 62)
/* The spec format this loader reads (`version:`, default 1); any other version is an error at
 * the key, so that a later format may change what keys mean. `recap schema` says it too. */
enum { RECAP__SPEC_FORMAT_VERSION = 1 };

typedef struct {
  recap__yaml_limits yaml; /* file size, depth, aliases, scalar length, node count */
  size_t max_tensors;      /* declared tensors plus op outputs (0: 100,000) */
  size_t max_ops;          /* (0: 100,000) */
  /* Files a spec names (init: file) must lie inside this folder (after resolving '..' and
   * symbolic links). NULL: no restriction. Specs loaded from a string resolve relative paths
   * against it (or the current directory when NULL). */
  const char *base_dir;
  /* Dim values from outside the spec, each "NAME=V", "NAME=V1,V2,..." or "NAME=OTHER" (an
   * alias of dim OTHER) (NULL-terminated; NULL: none). They replace the spec's values before
   * anything is checked, under the same rules (positive, ascending, one bucketed dim at most,
   * aliases without cycles); a list makes the dim bucketed. A malformed one, one naming no
   * declared dim, or aliases that end in a cycle fail the load with
   * RECAP_STATUS_INVALID_ARGUMENT (it is the caller's mistake, not the spec's). */
  const char *const *dims;
  /* With select_batch, a single value given for the dim that has buckets keeps the buckets
   * and picks the batch to run instead (recap__spec.run_batch): the CLI's --dim. With
   * grow_batch too, a value above the largest bucket replaces the buckets with that one value
   * (a distributed benchmark at a size the spec does not list). */
  bool select_batch, grow_batch;
  /* An entry of the spec's `entries:` (NULL: none): its dims replace the spec's before the
   * caller's `dims` apply. A name the spec does not declare fails the load with
   * RECAP_STATUS_INVALID_ARGUMENT listing the entries. */
  const char *entry;
} recap__spec_options;

/* A size in a shape or an integer attribute: a literal, or a dim's value. */
typedef struct {
  int64_t value; /* the literal (when dim < 0) */
  int dim;       /* index into spec->dims, or -1 */
  recap__src_pos pos;
} recap__spec_size;

/* One of `entries:`: a name for a set of dim values (prefill and decode of one model). */
typedef struct {
  const char *name;
  recap__src_pos pos;
} recap__spec_entry;

/* A dim. One given as another dim's name (`Bs: T`) is an alias of it: it has that dim's value in
 * every bucket, and carries the buckets when that dim does. */
typedef struct {
  const char *name;
  recap__src_pos pos;
  int64_t *values; /* ascending; several = buckets (an alias's: a copy of its dim's) */
  size_t count;
  bool bucketed; /* written as a list (even of one value), or an alias of such a dim */
  int alias;     /* the dim this one is an alias of (chains followed to the end), or -1 */
} recap__spec_dim;

/* A tensor named by an op, resolved to its index in the spec's tensor numbering (declared
 * tensors first, then op outputs in op order; the IR uses the same numbering). -1: the name
 * did not resolve (an error was reported). */
typedef struct {
  const char *name;
  recap__src_pos pos;
  int index;
} recap__spec_ref;

/* Where an `init: file` tensor's data comes from and how it is reshaped on the way
 * (specs/README.md, "Checkpoints"). Strings are the spec's (its AST's); the checkpoint is the
 * spec's too (recap__spec.checkpoints). Ranges and the concat axis are checked against the
 * file's shapes by each IR (ir.c), once dims have values. */
typedef struct {
  const struct recap__checkpoint *checkpoint; /* NULL: a raw file (init.path) */
  const char **keys; /* num_keys names in the checkpoint (default: the tensor's name) */
  recap__src_pos *key_pos;
  int num_keys;
  int concat;           /* the axis the keys are concatenated along; negative: from the end */
  bool transpose, cast; /* `transpose: true`, `cast: true` */
  bool has_rows, has_cols;
  /* [begin, end) of each file tensor's first / last axis: num_rows (num_cols) ranges, 1 (for
   * every key) or num_keys (one per key, in key order); NULL when not given. */
  recap__spec_size (*rows)[2], (*cols)[2];
  int num_rows, num_cols;
  recap__src_pos transpose_pos, cast_pos, rows_pos, cols_pos, concat_pos;
} recap__spec_weights;

typedef struct {
  const char *name;
  recap__src_pos pos;
  recap_tensor_role role;
  recap_dtype dtype;
  int ndim; /* 0: the shape had errors (already reported) */
  recap__spec_size shape[RECAP_MAX_DIMS];
  recap__tensor_init init;     /* path: resolved (malloc'd); key: malloc'd (the first key) */
  recap__spec_weights weights; /* init: file only */
  recap__src_pos init_pos;
  int producer; /* op index for op outputs; -1 for declared tensors */
  int consumers;
} recap__spec_tensor;

/* An INT or INT_LIST attribute as written (entries may name dims). */
typedef struct {
  const recap__attr_def *def;
  recap__spec_size values[RECAP_MAX_DIMS];
  int count;
  recap__src_pos pos;
} recap__spec_int_attr;

enum { RECAP__SPEC_MAX_INT_ATTRS = 8 };

typedef struct {
  const recap__op_def *def; /* NULL: unknown op (reported); the op is skipped */
  /* The spec's name: (a block's "<use>.<i>.name"); for a block's op without one, its label
   * "<use>.<i>.<op>#<k>"; else NULL. */
  const char *name;
  recap__src_pos pos;
  recap__spec_ref inputs[RECAP_OP_MAX_INPUTS];
  int num_inputs;
  recap__spec_ref outputs[RECAP_OP_MAX_OUTPUTS];
  int num_outputs;
  recap__op_attrs attrs; /* defaults, then the float/bool/activation/dtype attributes given */
  recap__spec_int_attr int_attrs[RECAP__SPEC_MAX_INT_ATTRS];
  int num_int_attrs;
  int stream;
  bool check_shape; /* `shape:` given (for ops without a shape attribute) */
  int check_ndim;
  recap__spec_size check_dims[RECAP_MAX_DIMS];
  recap__src_pos check_shape_pos;
  bool check_dtype; /* `dtype:` given (for ops without a dtype attribute) */
  recap_dtype check_dtype_value;
  recap__src_pos check_dtype_pos;
  bool ok; /* everything about the op parsed */
} recap__spec_op;

typedef struct recap__spec {
  const char *file; /* the name positions carry */
  char *dir;        /* folder relative file paths are resolved against */
  recap__spec_options options;
  const char *name;
  recap__src_pos pos;
  recap_backend_kind device;
  recap_dtype dtype;
  uint64_t seed;
  bool seed_given; /* `seed:` is in the spec (the CLI then seeds its inputs with it too) */
  int warmup, iters;
  recap__spec_dim *dims;
  size_t num_dims;
  /* The dim with buckets, or -1 (at most one dim has buckets; its aliases share them and are
   * not counted). */
  int bucket_dim;
  recap__spec_tensor *tensors; /* declared, then op outputs */
  size_t num_tensors, num_declared;
  recap__spec_op *ops;
  size_t num_ops;
  recap__spec_ref *outputs;
  size_t num_outputs;
  bool outputs_given;
  recap__spec_entry *entries; /* `entries:` in spec order */
  size_t num_entries;
  const char *entry; /* the entry whose dims were applied (options.entry), else NULL */
  /* The value select_batch picked for the bucketed dim (0: none given). */
  int64_t run_batch;
  /* Every checkpoint the spec names (its `checkpoint:` and each distinct path of a folder, an
   * index or a .safetensors file), opened once: each file's header is parsed once however
   * many tensors read it. `checkpoint` is the top-level one (NULL: none). */
  struct recap__checkpoint **checkpoints;
  size_t num_checkpoints;
  const struct recap__checkpoint *checkpoint;
  char *name_owned;     /* the default name (from the file name), when name: is absent */
  recap__yaml_ast *ast; /* owns the strings above */
} recap__spec;

recap_status recap__spec_load_file(const char *path, const recap__spec_options *options,
                                   recap__spec **out, recap__diag *diag);
/* `name` is the pseudo file name errors carry (e.g. "<string>"). */
recap_status recap__spec_load_string(const char *text, size_t len, const char *name,
                                     const recap__spec_options *options, recap__spec **out,
                                     recap__diag *diag);
void recap__spec_destroy(recap__spec *spec);
/* Spec texts parsed so far in this process (the load path parses each spec once). */
size_t recap__spec_parses(void);

/* The number of buckets (1 when no dim has buckets); bucket b uses the bucketed dim's b-th
 * value. */
size_t recap__spec_num_buckets(const recap__spec *spec);
/* The bucketed dim's value for bucket b (0 when no dim has buckets). */
int64_t recap__spec_bucket_value(const recap__spec *spec, size_t bucket);

#ifdef __cplusplus
}
#endif

#endif
