/*
 * strided.h: walking a strided recap_tensor view in row-major order on the host (internal).
 *
 *   recap__strided_iter it;
 *   recap__strided_iter_init(&it, &t);
 *   for (int64_t k = 0; k < n; ++k, recap__strided_iter_next(&it))
 *     use element at it.offset (in elements from t.data)
 *
 * The iterator keeps a multi-index and adds strides instead of dividing per element, so a
 * host elementwise op costs a few additions per element whatever the view's layout.
 */
#ifndef RECAP_KERNELS_HOST_STRIDED_H
#define RECAP_KERNELS_HOST_STRIDED_H

#include <stdint.h>

#include "include/recap.h"

typedef struct {
  int ndim;
  int64_t shape[RECAP_MAX_DIMS];
  int64_t strides[RECAP_MAX_DIMS];
  int64_t index[RECAP_MAX_DIMS];
  int64_t offset; /* elements from the view's data pointer */
} recap__strided_iter;

/* Walks `shape` (ndim dims) with `strides`; offset starts at 0. */
static inline void recap__strided_iter_init_raw(recap__strided_iter *it, int ndim,
                                                const int64_t *shape, const int64_t *strides) {
  it->ndim = ndim;
  for (int d = 0; d < RECAP_MAX_DIMS; ++d) {
    it->shape[d] = d < ndim ? shape[d] : 1;
    it->strides[d] = d < ndim ? strides[d] : 0;
    it->index[d] = 0;
  }
  it->offset = 0;
}

static inline void recap__strided_iter_init(recap__strided_iter *it, const recap_tensor *t) {
  recap__strided_iter_init_raw(it, t->ndim, t->shape, t->strides);
}

/* Advances to the next element in row-major order (wrapping to the first after the last). */
static inline void recap__strided_iter_next(recap__strided_iter *it) {
  for (int d = it->ndim - 1; d >= 0; --d) {
    it->offset += it->strides[d];
    if (++it->index[d] < it->shape[d]) return;
    it->offset -= it->strides[d] * it->shape[d];
    it->index[d] = 0;
  }
}

/* The element offset of row-major element k of a view (for random access, e.g. rows). */
static inline int64_t recap__strided_offset(const recap_tensor *t, int64_t k) {
  int64_t offset = 0;
  for (int d = t->ndim - 1; d >= 0; --d) {
    offset += (k % t->shape[d]) * t->strides[d];
    k /= t->shape[d];
  }
  return offset;
}

#endif
