/*
 * weight_plan.h: what the binder reads for one `init: file` tensor, checked against the
 * tensor's dtype and shape (internal to the engine).
 *
 * The spec says where a tensor's data is (recap__spec_weights: a raw file, or keys into a
 * checkpoint, with transpose, ranges, concat and cast); once dims have values, the largest
 * bucket's IR turns that into a plan with every size known and checks it against the file
 * headers the spec check parsed, reading no data (ir.c). The plan owns its strings, so an IR
 * that outlives its spec keeps it; the binder hands it to the loader (weight_load.h).
 *
 *   recap__weight_plan *plan;  char why[512];  recap__src_pos where;
 *   st = recap__weight_plan_build(&spec_tensor->weights, path, name, dtype, ndim, shape,
 *                                 dim_values, &plan, why, sizeof why, &where);
 *   // RECAP_STATUS_SPEC_ERROR: `why` is the message, `where` the spec position it belongs at
 *   recap__weight_plan_destroy(plan);
 *
 * What a plan means, in order: each source is the file tensor's rows [rows[0], rows[1]) of its
 * first axis and columns [cols[0], cols[1]) of its last (a file tensor of 0 dims reads as
 * [1]); then, with `transpose`, that 2-D selection swapped; then the sources concatenated
 * along axis `concat`; then every element converted to the tensor's dtype. The result has
 * exactly the tensor's shape.
 */
#ifndef RECAP_ENGINE_WEIGHT_PLAN_H
#define RECAP_ENGINE_WEIGHT_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/checkpoint.h"
#include "engine/diag.h"
#include "engine/spec.h"
#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One file tensor the plan reads. */
typedef struct {
  char *path;              /* owned */
  char *key;               /* owned; NULL for a raw file */
  recap__file_stamp stamp; /* the file as the spec check saw it (re-checked before reading) */
  recap_dtype dtype;
  int ndim; /* >= 1 */
  int64_t shape[RECAP_MAX_DIMS];
  uint64_t offset;          /* the tensor's first byte in the file */
  int64_t rows[2], cols[2]; /* the selection: [begin, end) of axis 0 and of axis ndim - 1 */
} recap__weight_source;

typedef struct recap__weight_plan {
  recap__weight_source *sources;
  int num_sources;
  int concat; /* 0 .. ndim - 1 */
  bool transpose;
  recap_dtype dtype; /* the tensor's */
  int ndim;
  int64_t shape[RECAP_MAX_DIMS];
} recap__weight_plan;

/* Checks the file(s) of a tensor named `name` with dtype and shape (ndim sizes) against what
 * the spec says (w, and `raw_path`, the resolved path of a raw file when w has no
 * checkpoint), with `dim_values` giving each dim's value: ranges inside the file tensor and
 * not empty, transpose of a 2-D selection, the concat axis inside the shapes, which agree on
 * every other axis, the dtype (cast: true for a different one; float to float, or i32 to i64
 * and back) and the resulting shape; a raw file must have exactly the tensor's bytes.
 * RECAP_STATUS_SPEC_ERROR with the first problem in `why` (naming the file and the key) and
 * the spec position it belongs at in *where; RECAP_STATUS_OUT_OF_MEMORY. */
recap_status recap__weight_plan_build(const recap__spec_weights *w, const char *raw_path,
                                      recap__src_pos path_pos, const char *name, recap_dtype dtype,
                                      int ndim, const int64_t *shape, const int64_t *dim_values,
                                      recap__weight_plan **out, char *why, size_t why_size,
                                      recap__src_pos *where);

/* NULL is accepted. */
void recap__weight_plan_destroy(recap__weight_plan *plan);

/* Whether a file of dtype `from` may be cast to `to` (float to float; i32 <-> i64). */
bool recap__weight_cast_allowed(recap_dtype from, recap_dtype to);

#ifdef __cplusplus
}
#endif

#endif
