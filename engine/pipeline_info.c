/*
 * pipeline_info.c: what a pipeline is, for tools (include/recap.h, "Pipelines"):
 * recap_pipeline_info_get, recap_pipeline_tensor_info_get and recap_pipeline_graph.
 *
 * Tools such as the CLI used to read the engine's structures for this; these calls hand out
 * plain data instead, so the structures can change without breaking them. Every string and
 * array handed out is the model's, which lives as long as any pipeline sharing it.
 */
#include <string.h>

#include "engine/pipeline.h"
#include "runtime/error.h"

/* The largest bucket's IR: buffers are sized for it, so it is the one tools describe. */
static const recap__ir *largest_ir(const recap_pipeline *p) {
  return p->model->irs[p->model->num_buckets - 1];
}

recap_status recap_pipeline_info_get(recap_pipeline *p, recap_pipeline_info *out) {
  RECAP_CHECK_ARG(p && out);
  const recap__model *m = p->model;
  const recap__spec *spec = m->spec;
  *out = (recap_pipeline_info){
      .name = spec->name,
      .device = p->device,
      .mode = p->mode,
      .num_buckets = m->num_buckets,
      .bucket_values = m->bucket_values,
      .bucket_dim = spec->bucket_dim >= 0 ? spec->dims[spec->bucket_dim].name : NULL,
      .launches = p->launches,
      .num_ops = p->num_ops,
      /* Every bucket's IR went through the same fusion pass: any one counts it. */
      .fused_ops = m->irs[0]->fused_ops,
      .draws_random = m->has_random,
      .num_tensors = largest_ir(p)->num_tensors,
      .entry = m->spec->entry,
  };
  return RECAP_OK;
}

recap_status recap_pipeline_tensor_info_get(recap_pipeline *p, size_t index,
                                            recap_tensor_info *out) {
  RECAP_CHECK_ARG(p && out);
  const recap__ir *ir = largest_ir(p);
  if (index >= ir->num_tensors)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "tensor index %zu: the pipeline has %zu",
                      index, ir->num_tensors);
  const recap__ir_tensor *x = &ir->tensors[index];
  const recap__tensor_init *init = &x->init;
  int output_position = 0;
  for (size_t o = 0; o < ir->num_outputs && !output_position; o++)
    if (ir->outputs[o] == (int)index) output_position = (int)o + 1;
  recap_tensor_info info = {
      .name = x->name,
      .role = x->role,
      .is_output = output_position,
      .dtype = x->dtype,
      .ndim = x->ndim,
      .bytes = (size_t)x->bytes,
      .bucket_axis = x->bucket_axis,
      .init = {.kind = init->kind,
               .mean = init->mean,
               .std = init->std,
               .low = init->low,
               .high = init->high,
               .value = init->value,
               .path = init->path,
               .key = init->key},
  };
  memcpy(info.shape, x->shape, sizeof info.shape);
  *out = info;
  return RECAP_OK;
}

recap_status recap_pipeline_graph(recap_pipeline *p, size_t bucket, const recap_graph **out) {
  RECAP_CHECK_ARG(p && out);
  if (bucket >= p->model->num_buckets)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "bucket %zu: the pipeline has %zu", bucket,
                      p->model->num_buckets);
  *out = p->graphs ? p->graphs[bucket] : NULL;
  return RECAP_OK;
}
