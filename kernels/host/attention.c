/*
 * host/attention.c: host reference of kv_append and attention.
 *
 * attention is a direct loop in double: for each query row, one pass finds the maximum
 * score, one sums the exponentials, and then the output is accumulated a chunk of head
 * dimensions at a time (recomputing the scores per chunk), so no scratch memory is
 * allocated at run time whatever the sequence length.
 */
#include <math.h>
#include <string.h>

#include "kernels/host/host_ops.h"
#include "kernels/host/strided.h"
#include "kernels/infer.h"
#include "runtime/half.h"

recap_status recap__host_kv_append(const recap__op_call *call) {
  const recap_tensor *cache = &call->inputs[0], *rows = &call->inputs[1];
  if (call->outputs[0].data != cache->data)
    return RECAP_OP_FAIL(call, "the output must be the cache itself (same memory)");
  int64_t pos = *(const int32_t *)call->inputs[2].data;
  int64_t count = rows->shape[1], capacity = cache->shape[1];
  if (pos < 0 || pos > capacity - count)
    return RECAP_OP_FAIL(call, "position %lld + %lld new rows is outside the cache's %lld rows",
                         (long long)pos, (long long)count, (long long)capacity);
  /* Only the first `rows` batch rows are real (clamped to [0, B]); padding rows of a bucket
   * must not reach the cache. */
  int64_t batch = cache->shape[0];
  if (call->num_inputs > 3) {
    int64_t real = *(const int32_t *)call->inputs[3].data;
    batch = real < 0 ? 0 : real < batch ? real : batch;
  }
  if (batch == 0) return RECAP_OK;
  /* The destination: the cache's rows [pos, pos + count), in the cache's own strides. */
  size_t esize = recap_dtype_size(cache->dtype);
  recap_tensor src = *rows, dst = *cache;
  src.shape[0] = batch;
  dst.shape[0] = batch;
  dst.shape[1] = count;
  dst.data = (char *)cache->data + pos * cache->strides[1] * (int64_t)esize;
  recap__strided_iter is, id;
  recap__strided_iter_init(&is, &src);
  recap__strided_iter_init(&id, &dst);
  int64_t n = recap__tensor_numel(&src);
  for (int64_t k = 0; k < n; ++k, recap__strided_iter_next(&is), recap__strided_iter_next(&id))
    memcpy((char *)dst.data + id.offset * (int64_t)esize,
           (const char *)src.data + is.offset * (int64_t)esize, esize);
  return RECAP_OK;
}

/* q_row . k_row in double (both unit-stride rows of head_dim elements). */
static double dot(const recap_tensor *q, int64_t qo, const recap_tensor *k, int64_t ko,
                  int64_t head_dim) {
  double s = 0;
  for (int64_t d = 0; d < head_dim; ++d)
    s += (double)recap__load_f32(q->data, q->dtype, qo + d) *
         recap__load_f32(k->data, k->dtype, ko + d);
  return s;
}

enum { CHUNK = 64 };

recap_status recap__host_attention(const recap__op_call *call) {
  const recap_tensor *q = &call->inputs[0], *k = &call->inputs[1], *v = &call->inputs[2];
  const recap_tensor *out = &call->outputs[0];
  int64_t batch = q->shape[0], heads = q->shape[1], sq = q->shape[2], head_dim = q->shape[3];
  int64_t kv_heads = k->shape[1], sk = k->shape[2], group = heads / kv_heads;
  int64_t len = sk;
  if (call->num_inputs > 3) {
    len = *(const int32_t *)call->inputs[3].data;
    if (len < 0 || len > sk)
      return RECAP_OP_FAIL(call, "input 'len' is %lld, outside [0, %lld] (the keys 'k' holds)",
                           (long long)len, (long long)sk);
  }
  double scale = call->attrs.scale != 0 ? call->attrs.scale : 1.0 / sqrt((double)head_dim);

  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      int64_t hk = h / group;
      int64_t kbase = b * k->strides[0] + hk * k->strides[1];
      int64_t vbase = b * v->strides[0] + hk * v->strides[1];
      for (int64_t i = 0; i < sq; ++i) {
        int64_t qo = b * q->strides[0] + h * q->strides[1] + i * q->strides[2];
        /* The output may be strided (a view the planner made; its last dim has stride 1). */
        int64_t oo = b * out->strides[0] + h * out->strides[1] + i * out->strides[2];
        /* Keys [0, visible) take part: the valid length, and with the causal mask only
         * positions up to the query's own (len - Sq + i). */
        int64_t visible = len;
        if (call->attrs.causal) {
          int64_t last = len - sq + i;
          visible = last < 0 ? 0 : last + 1 < len ? last + 1 : len;
        }
        double max = -INFINITY, sum = 0;
        for (int64_t j = 0; j < visible; ++j) {
          double s = scale * dot(q, qo, k, kbase + j * k->strides[2], head_dim);
          if (s > max) max = s;
        }
        for (int64_t j = 0; j < visible; ++j)
          sum += exp(scale * dot(q, qo, k, kbase + j * k->strides[2], head_dim) - max);
        for (int64_t d0 = 0; d0 < head_dim; d0 += CHUNK) {
          int64_t width = head_dim - d0 < CHUNK ? head_dim - d0 : CHUNK;
          double acc[CHUNK] = {0};
          for (int64_t j = 0; j < visible; ++j) {
            double p = exp(scale * dot(q, qo, k, kbase + j * k->strides[2], head_dim) - max) / sum;
            int64_t vo = vbase + j * v->strides[2] + d0;
            for (int64_t d = 0; d < width; ++d)
              acc[d] += p * recap__load_f32(v->data, v->dtype, vo + d);
          }
          for (int64_t d = 0; d < width; ++d)
            recap__store_f32(out->data, out->dtype, oo + d0 + d, (float)acc[d]);
        }
      }
    }
  return RECAP_OK;
}
