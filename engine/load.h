/*
 * load.h: the one way a spec becomes something runnable (the engine's entry header: the
 * public pipeline calls and every CLI subcommand load through it).
 *
 *   recap__load_options o = {.spec = {.dims = overrides}, .capacity = RECAP__CAPACITY_REQUIRED};
 *   recap__diag diag = {0};
 *   recap__model *m;
 *   recap_status st = recap__load_file("specs/mlp.yaml", &o, &m, &diag);
 *   // st == RECAP_STATUS_SPEC_ERROR: every problem is in diag, "FILE:LINE:COL: error: ..."
 *   ... m->spec, m->irs[b], m->plan ...
 *   recap_pipeline *p;
 *   recap__pipeline_create_model(m, &pipeline_options, &p);   // takes its own reference
 *   recap__model_release(m);
 *
 * The path, in order, each step once: the text is read (load_file) -> parsed into a positioned
 * AST -> checked as a spec, with the dim overrides applied before the check (spec.h) -> the
 * device and its memory are known -> every bucket's IR is built, once, and checked against
 * that memory (ir.h) -> the bucketed axes are marked by comparing neighbouring buckets (one
 * probe IR only when the bucketed dim has a single value) -> fusion (fuse.h) -> one plan over
 * every bucket (plan.h). A spec that fails any step allocates nothing on a device.
 */
#ifndef RECAP_ENGINE_LOAD_H
#define RECAP_ENGINE_LOAD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/diag.h"
#include "engine/ir.h"
#include "engine/plan.h"
#include "engine/spec.h"
#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether sizes are checked against the device's memory. */
typedef enum {
  RECAP__CAPACITY_OFF,      /* not checked (recap plan, recap dot) */
  RECAP__CAPACITY_REQUIRED, /* checked; a device that cannot say fails the load (pipelines) */
  RECAP__CAPACITY_IF_KNOWN, /* checked when this machine has the device (recap validate) */
} recap__load_capacity;

typedef struct {
  recap__spec_options spec; /* limits, base_dir, dim overrides (spec.h) */
  /* The device the model runs on: its memory bounds the sizes and its backend decides
   * fusion. device_given false: the spec's `device:` (index 0). */
  recap_device device;
  bool device_given;
  /* The spec's device is not on this machine (no GPU, or a build without CUDA): run on the
   * host backend instead (model->device says which; the CLI's fallback). */
  bool host_if_unavailable;
  /* Without device_given: the model runs on device (device_ordinal mod count) of its backend,
   * so that rank r of a distributed run takes GPU r, and ranks share GPUs when there are fewer
   * GPUs than ranks (0: device 0). */
  int device_ordinal;
  recap__load_capacity capacity;
  /* Nonzero: sizes are checked against this many bytes instead of the device's memory (a spec
   * meant for another machine; tests). */
  uint64_t device_memory_bytes;
  bool no_fusion; /* off also when RECAP_FUSION=0, or on CUDA without NVRTC */
} recap__load_options;

/* A loaded spec: what every pipeline of it (and its clones) shares, immutable after loading
 * except the reference count and the params, which the first pipeline binds (bind.c). */
typedef struct recap__model {
  atomic_int refs;
  recap_device device;
  recap__spec *spec;
  recap__ir **irs;        /* per bucket, ascending bucket value, fused (read-only) */
  size_t num_buckets;     /* 1 for specs without buckets */
  int64_t *bucket_values; /* per bucket: the bucketed dim's value (0 without buckets) */
  recap__plan *plan;      /* over every bucket (read-only) */
  bool fused;             /* the fusion pass ran */
  bool has_random;        /* some op draws random numbers */
  double load_ms;         /* host wall-clock time the load took */
  /* The device memory sizes were checked against (0: not checked, capacity_note says why
   * when RECAP__CAPACITY_IF_KNOWN could not learn it). */
  uint64_t capacity;
  char capacity_note[160];
  /* The stream the params are allocated and loaded on. The model owns it: the params outlive
   * the pipeline that created the model (its clones keep them), and a block is freed on the
   * stream it was allocated on (backend:cudaMallocAsync frees in that stream's order). */
  recap_stream *param_stream;
  void *param_block;  /* every param, carved at 256-byte offsets (recap_malloc) */
  size_t param_bytes; /* the block's size */
  void **param_data;  /* per tensor index: the param's memory, NULL for other roles */
  /* Retained: the model of the pipeline given as options.share when the first pipeline was
   * created, whose params some of param_data may point at (share.h), or NULL. */
  struct recap__model *param_source;
} recap__model;

/* Loads a spec file or text; *out has one reference. RECAP_STATUS_SPEC_ERROR with every
 * positioned error in diag (may be NULL: recap_last_error() then has the first ones),
 * RECAP_STATUS_IO_ERROR, RECAP_STATUS_OUT_OF_MEMORY, or the device's status when the
 * capacity is required and the device cannot say. */
recap_status recap__load_file(const char *path, const recap__load_options *options,
                              recap__model **out, recap__diag *diag);
/* `name` is the pseudo file name errors carry ("<string>" when NULL). */
recap_status recap__load_string(const char *text, size_t length, const char *name,
                                const recap__load_options *options, recap__model **out,
                                recap__diag *diag);

/* Frees what loading made (spec, IRs, plan) and the model itself, not the params: for the
 * load path's failures and the last release. */
void recap__model_free_loaded(recap__model *model);
/* Adds a reference. */
void recap__model_retain(recap__model *model);
/* Drops a reference; the last one frees params, plan, IRs and spec. NULL is accepted. */
void recap__model_release(recap__model *model);

/* How much one run of bucket `bucket` computes (work.c), estimated from its IR: each op's
 * contract gives its FLOPs (a GEMM 2 per multiply-add), other ops count one per element of
 * their larger side; *bytes is every op's inputs and outputs. An estimate for warnings and
 * reports, not a measurement. RECAP_STATUS_INVALID_ARGUMENT for a NULL or a bucket out of
 * range. */
recap_status recap__model_work(const recap__model *model, size_t bucket, double *flops,
                               double *bytes);

/* A pipeline over a loaded model (pipeline.c), which it takes a reference of: what
 * recap_pipeline_create_file does after loading. options->dims, base_dir and no_fusion were
 * the load's business and are ignored here. */
recap_status recap__pipeline_create_model(recap__model *model,
                                          const recap_pipeline_options *options,
                                          recap_pipeline **out);

#ifdef __cplusplus
}
#endif

#endif
