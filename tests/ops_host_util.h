/*
 * ops_host_util.h: what the host op tests (ops_host_*_test.c) share: the host stream and its
 * suite init/cleanup, tracked buffers, element encoding written from the dtypes' definitions
 * (f16/bf16 decoded with ldexp, independent of runtime/half.h), tensors in several layouts
 * with random values, the per-dtype tolerances and the every-element check, and op calls.
 *
 * Every test draws fresh random inputs (never zeros; seed printed, RECAP_TEST_SEED replays),
 * includes odd shapes (1, 7, 1023) and strided views, runs the op through recap__op_launch
 * on a host stream, and checks EVERY output element with |out - ref| <= atol + rtol * scale
 * (scale: the sum of |terms| for reductions, else |ref|), per output dtype. Outputs are
 * poisoned with NaN first, so an element the op does not write fails. The references are
 * written from the ops' definitions and share no code with kernels/host/.
 */
#ifndef RECAP_TESTS_OPS_HOST_UTIL_H
#define RECAP_TESTS_OPS_HOST_UTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/op.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/half.h"
#include "runtime/host_fault.h"
#include "runtime/host_graph.h"
#include "runtime/philox.h"
#include "runtime/rng.h"
#include "tests/test_util.h"

static recap_stream *stream;
static const recap_device host0 = {RECAP_BACKEND_HOST, 0};
static const recap_dtype float_types[] = {RECAP_DTYPE_F32, RECAP_DTYPE_F16, RECAP_DTYPE_BF16};

/* ---- memory: every buffer a test makes is freed at the next test's start or suite end ---- */

enum { MAX_TRACKED = 4096 };
static void *tracked[MAX_TRACKED];
static int num_tracked;

static inline void free_tracked(void) {
  for (int i = 0; i < num_tracked; ++i) free(tracked[i]);
  num_tracked = 0;
}

static inline void *track(size_t bytes) {
  CU_ASSERT_FATAL(num_tracked < MAX_TRACKED);
  void *p = malloc(bytes ? bytes : 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  tracked[num_tracked++] = p;
  return p;
}

/* ---- element encoding, independent of runtime/half.h ---- */

static inline double f16_decode(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

/* Truncates |v| < 65504 to an f16 (the test only stores values it then reads back). */
static inline uint16_t f16_truncate(double v) {
  uint16_t sign = v < 0 ? 0x8000 : 0;
  double a = fabs(v);
  if (a < ldexp(1, -14)) return sign | (uint16_t)floor(a * ldexp(1, 24));
  int e;
  double f = frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
  return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)floor((2 * f - 1) * 1024);
}

static inline double bf16_decode(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline uint16_t bf16_truncate(double v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)(u >> 16);
}

static inline double decode(recap_dtype dt, const void *base, int64_t offset) {
  switch (dt) {
    case RECAP_DTYPE_F32:
      return ((const float *)base)[offset];
    case RECAP_DTYPE_F16:
      return f16_decode(((const uint16_t *)base)[offset]);
    case RECAP_DTYPE_BF16:
      return bf16_decode(((const uint16_t *)base)[offset]);
    case RECAP_DTYPE_I32:
      return ((const int32_t *)base)[offset];
    default:
      return (double)((const int64_t *)base)[offset];
  }
}

static inline void encode(recap_dtype dt, void *base, int64_t offset, double v) {
  switch (dt) {
    case RECAP_DTYPE_F32:
      ((float *)base)[offset] = (float)v;
      break;
    case RECAP_DTYPE_F16:
      ((uint16_t *)base)[offset] = f16_truncate(v);
      break;
    case RECAP_DTYPE_BF16:
      ((uint16_t *)base)[offset] = bf16_truncate(v);
      break;
    case RECAP_DTYPE_I32:
      ((int32_t *)base)[offset] = (int32_t)v;
      break;
    default:
      ((int64_t *)base)[offset] = (int64_t)v;
      break;
  }
}

/* ---- tensors ---- */

static inline size_t esize(recap_dtype dt) {
  return dt == RECAP_DTYPE_F16 || dt == RECAP_DTYPE_BF16 ? 2 : dt == RECAP_DTYPE_I64 ? 8 : 4;
}

static inline int64_t numel(const recap_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; ++d) n *= t->shape[d];
  return n;
}

/* Fills n elements of raw storage with NaN (or a sentinel for integers). */
static inline void poison(recap_dtype dt, void *base, int64_t n) {
  for (int64_t k = 0; k < n; ++k) {
    switch (dt) {
      case RECAP_DTYPE_F32:
        ((uint32_t *)base)[k] = 0x7fc00000u;
        break;
      case RECAP_DTYPE_F16:
        ((uint16_t *)base)[k] = 0x7e00u;
        break;
      case RECAP_DTYPE_BF16:
        ((uint16_t *)base)[k] = 0x7fc0u;
        break;
      case RECAP_DTYPE_I32:
        ((int32_t *)base)[k] = -123456789;
        break;
      default:
        ((int64_t *)base)[k] = -1234567890123LL;
        break;
    }
  }
}

typedef enum {
  CONTIGUOUS,
  PADDED,     /* rows of the last dim are 3 elements apart more than their length */
  TRANSPOSED, /* the last two dims are swapped in memory (last dim not unit-stride) */
} layout;

/* A poisoned tensor of the given shape; PADDED and TRANSPOSED views leave gaps (or a
 * different order) in their storage, so ops must honour strides. */
static inline recap_tensor tensor(recap_dtype dt, int ndim, const int64_t *shape, layout lay) {
  recap_tensor t = {.dtype = dt, .ndim = ndim};
  for (int d = 0; d < ndim; ++d) t.shape[d] = shape[d];
  int64_t storage[RECAP_MAX_DIMS] = {0};
  int perm[RECAP_MAX_DIMS];
  for (int d = 0; d < ndim; ++d) {
    storage[d] = shape[d];
    perm[d] = d;
  }
  if (lay == PADDED) storage[ndim - 1] += 3;
  if (lay == TRANSPOSED && ndim >= 2) {
    storage[ndim - 1] = shape[ndim - 2];
    storage[ndim - 2] = shape[ndim - 1];
    perm[ndim - 1] = ndim - 2;
    perm[ndim - 2] = ndim - 1;
  }
  int64_t stride = 1, strides_of_storage[RECAP_MAX_DIMS];
  for (int d = ndim - 1; d >= 0; --d) {
    strides_of_storage[d] = stride;
    stride *= storage[d];
  }
  for (int d = 0; d < ndim; ++d) t.strides[d] = strides_of_storage[perm[d]];
  t.data = track((size_t)stride * esize(dt));
  poison(dt, t.data, stride);
  return t;
}

#define SHAPE(...)                                                         \
  (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]) { \
    __VA_ARGS__                                                            \
  }

static inline int64_t offset_of(const recap_tensor *t, int64_t k) {
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0; --d) {
    off += (k % t->shape[d]) * t->strides[d];
    k /= t->shape[d];
  }
  return off;
}

/* Element k in row-major order over the view's shape. */
static inline double get(const recap_tensor *t, int64_t k) {
  return decode(t->dtype, t->data, offset_of(t, k));
}

static inline void set(recap_tensor *t, int64_t k, double v) {
  encode(t->dtype, t->data, offset_of(t, k), v);
}

/* Uniform in [lo, hi), away from 0 by at least 1e-3 in magnitude (never zeros). */
static inline double draw(test_rng *rng, double lo, double hi) {
  for (;;) {
    double v = test_rng_uniform(rng, lo, hi);
    if (fabs(v) >= 1e-3) return v;
  }
}

static inline recap_tensor random_tensor(test_rng *rng, recap_dtype dt, int ndim,
                                         const int64_t *shape, layout lay, double lo, double hi) {
  recap_tensor t = tensor(dt, ndim, shape, lay);
  for (int64_t k = 0; k < numel(&t); ++k) set(&t, k, draw(rng, lo, hi));
  return t;
}

static inline double *doubles(int64_t n) {
  return track((size_t)n * sizeof(double));
}

/* ---- tolerances and the check ---- */

static inline double rtol_of(recap_dtype dt) {
  return dt == RECAP_DTYPE_F32    ? 1e-5
         : dt == RECAP_DTYPE_F16  ? 1e-3
         : dt == RECAP_DTYPE_BF16 ? 8e-3
                                  : 0;
}

/* f16 alone has subnormals in the value ranges tested (tiny softmax probabilities): half of
 * its smallest step. Other types: no absolute slack. */
static inline double atol_of(recap_dtype dt) {
  return dt == RECAP_DTYPE_F16 ? ldexp(1, -25) : 0;
}

/* Checks every element of out (row-major) against ref; scale NULL means |ref|. */
static inline void check(const char *what, const recap_tensor *out, const double *ref,
                         const double *scale) {
  int64_t n = numel(out), fails = 0;
  double rtol = rtol_of(out->dtype), atol = atol_of(out->dtype);
  for (int64_t k = 0; k < n; ++k) {
    double o = get(out, k);
    double s = scale ? scale[k] : fabs(ref[k]);
    double err = fabs(o - ref[k]);
    if (!(err <= atol + rtol * s)) {
      if (fails < 5)
        fprintf(stderr, "\n  %s (%s): element %lld is %.9g, expected %.9g (tolerance %.3g)", what,
                recap_dtype_name(out->dtype), (long long)k, o, ref[k], atol + rtol * s);
      ++fails;
    }
  }
  if (fails)
    fprintf(stderr, "\n  %s: %lld of %lld elements wrong\n", what, (long long)fails, (long long)n);
  CU_ASSERT_EQUAL(fails, 0);
  CU_ASSERT(n > 0);
}

/* ---- calls ---- */

static inline recap__op_call new_call(const char *op) {
  recap__op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find(op);
  if (!call.def) fprintf(stderr, "\n  %s\n", recap_last_error());
  CU_ASSERT_PTR_NOT_NULL_FATAL(call.def);
  recap__op_attrs_set_defaults(call.def, &call.attrs);
  return call;
}

static inline void add_input(recap__op_call *call, recap_tensor t) {
  call->inputs[call->num_inputs++] = t;
}

/* Infers, binds poisoned contiguous outputs, launches on the host stream. */
static inline void run(recap__op_call *call) {
  CHECK_OK(recap__op_infer(call));
  for (int o = 0; o < call->num_outputs; ++o) {
    recap_tensor *out = &call->outputs[o];
    out->data = track((size_t)numel(out) * esize(out->dtype));
    poison(out->dtype, out->data, numel(out));
  }
  CHECK_OK(recap__op_launch(call, stream));
}

static inline void set_sizes(recap__op_attrs *a, int n, const int64_t *sizes) {
  a->num_sizes = n;
  for (int i = 0; i < n; ++i) a->sizes[i] = sizes[i];
}

/* ---- exact values (data movement) ---- */

static const recap_dtype all_types[] = {RECAP_DTYPE_F32, RECAP_DTYPE_F16, RECAP_DTYPE_BF16,
                                        RECAP_DTYPE_I32, RECAP_DTYPE_I64};

/* Random values exactly representable in every dtype: integers in [-200, 200] \ {0}. */
static inline recap_tensor integer_tensor(test_rng *rng, recap_dtype dt, int ndim,
                                          const int64_t *shape, layout lay) {
  recap_tensor t = tensor(dt, ndim, shape, lay);
  for (int64_t k = 0; k < numel(&t); ++k) {
    int64_t v = (int64_t)(test_rng_next(rng) % 200) + 1;
    set(&t, k, test_rng_next(rng) & 1 ? (double)v : -(double)v);
  }
  return t;
}

/* Exact comparison: data movement must not change a value. */
static inline void check_exact(const char *what, const recap_tensor *out, const double *ref) {
  int64_t fails = 0;
  for (int64_t k = 0; k < numel(out); ++k)
    if (!(get(out, k) == ref[k])) {
      if (fails < 5)
        fprintf(stderr, "\n  %s (%s): element %lld is %g, expected %g", what,
                recap_dtype_name(out->dtype), (long long)k, get(out, k), ref[k]);
      ++fails;
    }
  CU_ASSERT_EQUAL(fails, 0);
}

/* Captures one launch of each of calls[0..n) on `stream` into a graph and instantiates it:
 * the graph a test replays with new device-side values. */
static inline recap__graph_exec *capture_launches(recap__op_call *const *calls, int n) {
  CHECK_OK(recap__capture_begin(stream, RECAP_CAPTURE_MODE_GLOBAL));
  for (int i = 0; i < n; ++i) CHECK_OK(recap__op_launch(calls[i], stream));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(stream, &graph));
  recap__graph_exec *exec = NULL;
  CHECK_OK(stream->backend->graph_instantiate(graph, &exec));
  stream->backend->graph_destroy(graph);
  return exec;
}

static inline int suite_init(void) {
  return recap_stream_create(host0, 0, RECAP_STREAM_NON_BLOCKING, &stream) == RECAP_OK ? 0 : 1;
}

static inline int suite_cleanup(void) {
  free_tracked();
  return recap_stream_destroy(stream) == RECAP_OK ? 0 : 1;
}

#endif /* RECAP_TESTS_OPS_HOST_UTIL_H */
