/*
 * tensor.c: the recap_tensor helpers every op shares (element types are runtime/dtype.c).
 */
#include <stdint.h>

#include "include/recap.h"
#include "kernels/op.h"
#include "runtime/error.h"

/* 2^62: large enough for any real tensor, small enough that element counts times element
 * sizes (<= 8) and sums of two counts never overflow int64_t. */
#define MAX_NUMEL ((int64_t)1 << 62)

int64_t recap__tensor_numel(const recap_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; ++d) n *= t->shape[d];
  return n;
}

bool recap__tensor_is_contiguous(const recap_tensor *t) {
  int64_t expected = 1;
  for (int d = t->ndim - 1; d >= 0; --d) {
    /* A dimension of size 1 is never stepped over, so its stride does not matter. */
    if (t->shape[d] != 1 && t->strides[d] != expected) return false;
    expected *= t->shape[d];
  }
  return true;
}

/* Saturates instead of overflowing: infer describes an output before recap__op_infer checks
 * its element count, and a shape that overflows is rejected there, strides unused. */
void recap__tensor_set_contiguous(recap_tensor *t) {
  int64_t stride = 1;
  for (int d = t->ndim - 1; d >= 0; --d) {
    t->strides[d] = stride;
    int64_t s = t->shape[d];
    stride = s < 1 ? 0 : stride > INT64_MAX / s ? INT64_MAX : stride * s;
  }
}

recap_status recap__tensor_checked_numel(const recap_tensor *t, int64_t *out) {
  if (t->ndim < 1 || t->ndim > RECAP_MAX_DIMS)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "tensor has %d dims (expected 1 to %d)",
                      t->ndim, RECAP_MAX_DIMS);
  int64_t n = 1;
  for (int d = 0; d < t->ndim; ++d) {
    int64_t s = t->shape[d];
    if (s < 1)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "dimension %d has size %lld (must be >= 1)",
                        d, (long long)s);
    /* n < 2^62 and s >= 1 here; n * s >= 2^62 exactly when s > (2^62 - 1) / n. */
    if (s > (MAX_NUMEL - 1) / n)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "element count overflows: the shape's product reaches 2^62");
    n *= s;
  }
  *out = n;
  return RECAP_OK;
}
