/*
 * pipeline_util.h: what the pipeline tests (pipeline_graphs_test.c, pipeline_api_test.c) share:
 * pipelines made from spec text on test_device, tensor sizes and copies in and out, random
 * input data, and the two specs both files run (a small bucketed MLP and a KV-cache decode).
 */
#ifndef RECAP_TESTS_PIPELINE_UTIL_H
#define RECAP_TESTS_PIPELINE_UTIL_H

#include "engine/pipeline.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/half.h"
#include "runtime/backend.h"
#include "tests/test_util.h"

static inline recap_pipeline_options opts_on(recap_device dev) {
  recap_pipeline_options o = RECAP_PIPELINE_OPTIONS_INIT;
  o.override_device = 1;
  o.device = dev;
  return o;
}

static inline recap_pipeline *make(const char *yaml, recap_pipeline_options *o) {
  recap_pipeline *p = NULL;
  recap_pipeline_options d = opts_on(test_device);
  if (!o) o = &d;
  CHECK_OK(recap_pipeline_create_string(yaml, strlen(yaml), "<test>", o, &p));
  return p;
}

static inline recap_pipeline *make_mode(const char *yaml, recap_run_mode mode) {
  recap_pipeline_options o = opts_on(test_device);
  o.override_mode = 1;
  o.mode = mode;
  return make(yaml, &o);
}

static inline const recap__ir_tensor *tensor_of(recap_pipeline *p, const char *name) {
  const recap__ir *ir = p->model->irs[p->model->num_buckets - 1];
  int t = recap__ir_find_tensor(ir, name);
  CU_ASSERT_FATAL(t >= 0);
  return &ir->tensors[t];
}

/* Bytes of `rows` rows of a tensor bucketed on axis 0 (rows 0: the whole tensor). */
static inline size_t bytes_of(recap_pipeline *p, const char *name, int64_t rows) {
  const recap__ir_tensor *t = tensor_of(p, name);
  if (rows == 0) return (size_t)t->bytes;
  return (size_t)t->bytes / (size_t)t->shape[0] * (size_t)rows;
}

/* Fresh values in [-1, 1) of the tensor's dtype. */
static inline void *random_data(test_rng *rng, recap_dtype dtype, size_t bytes) {
  size_t n = bytes / recap_dtype_size(dtype);
  void *h = malloc(bytes ? bytes : 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(h);
  for (size_t i = 0; i < n; ++i)
    recap__store_f32(h, dtype, (int64_t)i, (float)test_rng_uniform(rng, -1, 1));
  return h;
}

static inline void *out_copy(recap_pipeline *p, const char *name, int64_t rows) {
  size_t bytes = bytes_of(p, name, rows);
  void *h = malloc(bytes ? bytes : 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(h);
  CHECK_OK(recap_pipeline_copy_out(p, name, h, bytes, rows));
  return h;
}

/* Writes one i32 scalar. */
static inline void set_scalar(recap_pipeline *p, const char *name, int32_t v) {
  CHECK_OK(recap_pipeline_copy_in(p, name, &v, sizeof v, 0));
}

/* Copies host bytes into device memory of the pipeline's device, waited for. */
static inline void to_device(recap_pipeline *p, void *dst, const void *src, size_t bytes) {
  recap_stream *s = recap_pipeline_stream(p);
  CHECK_OK(s->backend->memcpy_async(dst, src, bytes, s));
  CHECK_OK(recap_stream_synchronize(s));
}

/* A small MLP bucketed on B (1, 2, 4). */
static const char mlp_spec[] =
    "name: mlp\ndtype: f32\nseed: 5\n"
    "dims: {B: [1, 2, 4], H: 16}\n"
    "tensors:\n"
    "  x:  {shape: [B, H], role: input}\n"
    "  w1: {shape: [H, H], role: param, init: normal, std: 0.3}\n"
    "  b1: {shape: [H], role: param, init: uniform, low: -0.5, high: 0.5}\n"
    "  w2: {shape: [H, H], role: param, init: normal, std: 0.3}\n"
    "ops:\n"
    "  - {op: linear, in: [x, w1, b1], out: h, act: gelu, name: layer1}\n"
    "  - {op: softmax, in: [h], out: s}\n"
    "  - {op: linear, in: [s, w2], out: y, name: layer2}\n"
    "outputs: [y]\n"
    "run: {warmup: 2}\n";

/* One decode step: q/k/v projections, kv_append at `pos`, attention over `len` positions. */
static const char decode_spec[] =
    "name: decode\ndtype: f32\nseed: 3\n"
    "dims: {B: [1, 2, 4], D: 16, H: 2, Dh: 8, Smax: 16}\n"
    "tensors:\n"
    "  x:       {shape: [B, D], role: input}\n"
    "  pos:     {role: scalar, value: 0}\n"
    "  len:     {role: scalar, value: 1}\n"
    "  k_cache: {shape: [B, Smax, H, Dh], role: state, init: zeros}\n"
    "  v_cache: {shape: [B, Smax, H, Dh], role: state, init: zeros}\n"
    "  w_q: {shape: [D, D], role: param, init: normal, std: 0.3}\n"
    "  w_k: {shape: [D, D], role: param, init: normal, std: 0.3}\n"
    "  w_v: {shape: [D, D], role: param, init: normal, std: 0.3}\n"
    "ops:\n"
    "  - {op: linear, in: [x, w_q], out: q_flat}\n"
    "  - {op: linear, in: [x, w_k], out: k_flat}\n"
    "  - {op: linear, in: [x, w_v], out: v_flat}\n"
    "  - {op: reshape, in: [q_flat], out: q_rows, shape: [B, 1, H, Dh]}\n"
    "  - {op: reshape, in: [k_flat], out: k_rows, shape: [B, 1, H, Dh]}\n"
    "  - {op: reshape, in: [v_flat], out: v_rows, shape: [B, 1, H, Dh]}\n"
    "  - {op: kv_append, in: [k_cache, k_rows, pos], out: k_all, name: append_k}\n"
    "  - {op: kv_append, in: [v_cache, v_rows, pos], out: v_all, name: append_v}\n"
    "  - {op: permute, in: [q_rows], out: q, dims: [0, 2, 1, 3]}\n"
    "  - {op: permute, in: [k_all], out: k, dims: [0, 2, 1, 3]}\n"
    "  - {op: permute, in: [v_all], out: v, dims: [0, 2, 1, 3]}\n"
    "  - {op: attention, in: [q, k, v, len], out: attn, name: attention}\n"
    "  - {op: reshape, in: [attn], out: y, shape: [B, D]}\n"
    "outputs: [y]\n"
    "run: {warmup: 2}\n";

#endif /* RECAP_TESTS_PIPELINE_UTIL_H */
