/*
 * share.h: params and state one pipeline takes from another (recap_pipeline_options.share;
 * internal to the engine).
 *
 * Prefill and decode of one model are two pipelines (two entries of one spec, or two specs)
 * over the same weights and KV cache. The second is created with options.share = the first:
 * each of its param and state tensors whose name the first also has uses the first's memory
 * from the start (bound before any capture, so no graph is re-captured), and is neither
 * allocated nor initialized again. Names match exactly; the role, dtype and shape (the
 * largest bucket's) must match too, else the creation fails naming the tensor.
 *
 * Lifetimes: pipelines may be destroyed in any order. The params stay alive through the
 * model reference (recap__model.param_source), the state through a reference-counted set
 * (recap__state_set) that every pipeline owns for the state it allocated and that sharers
 * retain. pipeline.c holds those references (it owns every lifetime: models, pipelines);
 * bind.c fills the sets; this file only matches tensors.
 */
#ifndef RECAP_ENGINE_SHARE_H
#define RECAP_ENGINE_SHARE_H

#include <stdatomic.h>
#include <stddef.h>

#include "engine/ir.h"
#include "engine/load.h"
#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The state tensors one pipeline allocated. The blocks come from the model's param stream,
 * which outlives every pipeline of the model (a pipeline's own stream may be the caller's, or
 * gone before a sharer is). */
typedef struct recap__state_set {
  atomic_int refs;
  recap__model *model; /* retained: its param stream allocated the blocks */
  void **blocks;       /* per tensor of the model's largest IR: an owned state block, or NULL */
  size_t count;
  struct recap__state_set *source; /* retained: the set shared state came from, or NULL */
} recap__state_set;

/* Where `share` keeps the tensor named like `t` (a param or a state of this pipeline): *memory
 * is its memory, or NULL when `share` has no param or state of that name (then this pipeline
 * allocates its own). RECAP_STATUS_INVALID_ARGUMENT, naming the tensor and both pipelines,
 * when the names match but the role, dtype or shape differ. */
recap_status recap__share_find(const recap_pipeline *share, const char *pipeline_name,
                               const recap__ir_tensor *t, void **memory);

#ifdef __cplusplus
}
#endif

#endif
