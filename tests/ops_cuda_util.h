/*
 * ops_cuda_util.h: the harness the CUDA op tests (ops_cuda_*_test.c) share: the CUDA and host
 * streams and the suites' init and cleanup, tracked host and device buffers, inputs in any
 * layout, and run_case, which runs one op on both backends and compares every element.
 *
 * Each case draws fresh random inputs (test_rng; the seed is printed), runs the op through
 * recap__op_launch on a host stream (the reference) and on a CUDA stream, and compares EVERY
 * output element: |cuda - host| <= atol + rtol * scale, with rtol per dtype (f32 1e-5, f16
 * 1e-3, bf16 8e-3), scale = |host| for elementwise results and the sum of the magnitudes of
 * the terms for reductions (computed here in double), so results that cancel to near zero
 * do not flake. Data movement (copies, concat, fill, embedding, kv_append) must match bit for
 * bit. CUDA outputs are poisoned with 0xFF bytes (NaN for floats) before every run, so an
 * element a kernel forgot to write fails.
 *
 * Each case is then captured into a CUDA graph (runtime capture + the backend's
 * instantiate/launch), replayed twice on re-poisoned outputs, and must reproduce the eager
 * CUDA result bit for bit (the kernels are deterministic).
 */
#ifndef RECAP_TESTS_OPS_CUDA_UTIL_H
#define RECAP_TESTS_OPS_CUDA_UTIL_H

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/gemm/gemm.h"
#include "kernels/op.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/half.h"
#include "runtime/rng.h"
#include "tests/test_util.h"
#if RECAP_WITH_CUDA
#include "kernels/cuda_ops.h"
#endif

static const recap_device kCudaDev = {RECAP_BACKEND_CUDA, 0};
static const recap_device kHostDev = {RECAP_BACKEND_HOST, 0};
static recap_stream *cuda_stream, *host_stream;
static const recap__backend *cuda;

static inline int cuda_suite_init(void) {
  cuda = recap__backend_get(RECAP_BACKEND_CUDA);
  if (!cuda) return 1;
  if (recap_stream_create(kCudaDev, 0, RECAP_STREAM_NON_BLOCKING, &cuda_stream) != RECAP_OK)
    return 1;
  if (recap_stream_create(kHostDev, 0, RECAP_STREAM_NON_BLOCKING, &host_stream) != RECAP_OK)
    return 1;
  return 0;
}

static inline int cuda_suite_cleanup(void) {
  recap_stream_destroy(cuda_stream);
  recap_stream_destroy(host_stream);
  cuda_stream = host_stream = NULL;
  return 0;
}

/* Every buffer a test allocates is tracked and released by release_all() at the test's end
 * (also after a failed assertion, since each test calls it on every exit path it controls). */
enum { MAX_TRACKED = 4096 };
static struct {
  void *ptr;
  bool device;
} tracked[MAX_TRACKED];
static int num_tracked;

static inline void *track(void *ptr, bool device) {
  CU_ASSERT_FATAL(num_tracked < MAX_TRACKED);
  tracked[num_tracked].ptr = ptr;
  tracked[num_tracked].device = device;
  num_tracked++;
  return ptr;
}

static inline void release_all(void) {
  recap_stream_synchronize(cuda_stream);
  for (int i = 0; i < num_tracked; ++i) {
    if (tracked[i].device)
      cuda->mem_free(0, tracked[i].ptr);
    else
      free(tracked[i].ptr);
  }
  num_tracked = 0;
}

static inline void *host_alloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  return track(p, false);
}

static inline void *dev_alloc(size_t bytes) {
  void *p = NULL;
  CHECK_OK(cuda->mem_alloc(0, bytes ? bytes : 1, &p));
  return track(p, true);
}

static inline void to_device(void *dst, const void *src, size_t bytes) {
  CHECK_OK(cuda->memcpy_async(dst, src, bytes, cuda_stream));
  CHECK_OK(recap_stream_synchronize(cuda_stream));
}

static inline void to_host(void *dst, const void *src, size_t bytes) {
  CHECK_OK(cuda->memcpy_async(dst, src, bytes, cuda_stream));
  CHECK_OK(recap_stream_synchronize(cuda_stream));
}

static inline void poison_device(void *dst, size_t bytes) {
  CHECK_OK(cuda->memset_async(dst, 0xFF, bytes, cuda_stream));
}

/* An input: a view (shape, strides, element offset) into storage that exists on the host and
 * on the device with the same random contents. */
typedef struct {
  recap_tensor view; /* data unused */
  int64_t offset, storage;
  void *host, *dev;
} tbuf;

typedef enum {
  FILL_UNIFORM,  /* uniform in [lo, hi) */
  FILL_AWAY,     /* magnitude uniform in [lo, hi), random sign (divisors) */
  FILL_INTEGERS, /* integers uniform in [lo, hi) (indices, positions) */
} fill_mode;

static inline tbuf make_input(recap_dtype dtype, int ndim, const int64_t *shape,
                              const int64_t *strides, int64_t offset, fill_mode mode, double lo,
                              double hi) {
  tbuf b;
  memset(&b, 0, sizeof b);
  b.view.dtype = dtype;
  b.view.ndim = ndim;
  for (int d = 0; d < ndim; ++d) b.view.shape[d] = shape[d];
  if (strides) {
    for (int d = 0; d < ndim; ++d) b.view.strides[d] = strides[d];
  } else {
    recap__tensor_set_contiguous(&b.view);
  }
  int64_t extent = 1;
  for (int d = 0; d < ndim; ++d) extent += (shape[d] - 1) * b.view.strides[d];
  b.offset = offset;
  b.storage = offset + extent;
  size_t esize = recap_dtype_size(dtype);
  b.host = host_alloc((size_t)b.storage * esize);
  b.dev = dev_alloc((size_t)b.storage * esize);
  test_rng rng;
  test_rng_init(&rng);
  for (int64_t i = 0; i < b.storage; ++i) {
    if (mode == FILL_INTEGERS) {
      int64_t v = (int64_t)floor(test_rng_uniform(&rng, lo, hi));
      if (dtype == RECAP_DTYPE_I64)
        ((int64_t *)b.host)[i] = v;
      else
        ((int32_t *)b.host)[i] = (int32_t)v;
    } else {
      double v = test_rng_uniform(&rng, lo, hi);
      if (mode == FILL_AWAY && (test_rng_next(&rng) & 1)) v = -v;
      recap__store_f32(b.host, dtype, i, (float)v);
    }
  }
  to_device(b.dev, b.host, (size_t)b.storage * esize);
  return b;
}

static inline tbuf make_contiguous(recap_dtype dtype, int ndim, const int64_t *shape, double lo,
                                   double hi) {
  return make_input(dtype, ndim, shape, NULL, 0, FILL_UNIFORM, lo, hi);
}

static inline recap_tensor bind(const tbuf *b, bool device) {
  recap_tensor t = b->view;
  t.data = (char *)(device ? b->dev : b->host) + b->offset * (int64_t)recap_dtype_size(t.dtype);
  return t;
}

static inline double rtol_of(recap_dtype dtype) {
  switch (dtype) {
    case RECAP_DTYPE_F32:
      return 1e-5;
    case RECAP_DTYPE_F16:
      return 1e-3;
    case RECAP_DTYPE_BF16:
      return 8e-3;
    default:
      return 0;
  }
}

/* The absolute floor: one f16 subnormal step is 6e-8, so results that land in f16's subnormal
 * range (small softmax probabilities) may differ by one step after the same f32 value rounds. */
static inline double atol_of(recap_dtype dtype) {
  return dtype == RECAP_DTYPE_I32 || dtype == RECAP_DTYPE_I64 ? 0 : 1e-7;
}

/* Compares n elements of `got` (CUDA) with `ref` (host). scale == NULL: |ref|. exact: bytes
 * must be equal. Prints the first mismatches and asserts none. */
static inline void compare(const char *what, recap_dtype dtype, int64_t n, const void *got,
                           const void *ref, const double *scale, bool exact) {
  int64_t bad = 0;
  size_t esize = recap_dtype_size(dtype);
  double rtol = rtol_of(dtype), atol = atol_of(dtype);
  for (int64_t k = 0; k < n; ++k) {
    bool ok;
    double g = 0, r = 0, tol = 0;
    if (exact || dtype == RECAP_DTYPE_I32 || dtype == RECAP_DTYPE_I64) {
      ok = memcmp((const char *)got + k * (int64_t)esize, (const char *)ref + k * (int64_t)esize,
                  esize) == 0;
      if (dtype != RECAP_DTYPE_I32 && dtype != RECAP_DTYPE_I64) {
        g = recap__load_f32(got, dtype, k);
        r = recap__load_f32(ref, dtype, k);
      }
    } else {
      g = recap__load_f32(got, dtype, k);
      r = recap__load_f32(ref, dtype, k);
      tol = atol + rtol * (scale ? scale[k] : fabs(r));
      ok = fabs(g - r) <= tol; /* false for NaN: an unwritten (poisoned) element */
    }
    if (!ok) {
      if (bad < 5)
        fprintf(stderr, "\n  %s [%s]: element %lld: cuda %.9g host %.9g (tolerance %.3g)", what,
                recap_dtype_name(dtype), (long long)k, g, r, tol);
      bad++;
    }
  }
  if (bad)
    fprintf(stderr, "\n  %s [%s]: %lld of %lld elements differ\n", what, recap_dtype_name(dtype),
            (long long)bad, (long long)n);
  CU_ASSERT_EQUAL(bad, 0);
}

typedef enum {
  SCALE_REF,       /* |ref| */
  SCALE_ROW_SUM,   /* sum/mean: sum over the row of |x| (divided by D for mean) */
  SCALE_NORM,      /* layernorm/rmsnorm: (|x_j| + |mean|) * rstd * |w_j| + |b_j| */
  SCALE_ROPE,      /* rope: |x_i| + |x_{i+half}| of the element's pair */
  SCALE_ATTENTION, /* sum_j p_j |v_jd|: the host op run again on |v| */
  SCALE_NORMAL,    /* random_normal: |mean| + 6 |std| (Box-Muller's radius is below 5.8) */
} scale_kind;

typedef struct {
  const char *op;
  recap__op_attrs attrs;
  int num_inputs;
  tbuf in[RECAP_OP_MAX_INPUTS];
  scale_kind scale;
  bool exact;
  int64_t out_offset; /* CUDA outputs start this many elements into their allocation */
} op_case;

/* Row-major element k of a host-bound view. */
static inline double load_view(const recap_tensor *t, int64_t k) {
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0; --d) {
    off += (k % t->shape[d]) * t->strides[d];
    k /= t->shape[d];
  }
  return recap__load_f32(t->data, t->dtype, off);
}

/* The per-element scale of output `o` (n elements) for kinds other than SCALE_REF. */
static inline double *make_scale(const op_case *c, const recap__op_call *host_call, int o) {
  const recap_tensor *x = &host_call->inputs[0], *out = &host_call->outputs[o];
  int64_t n = recap__tensor_numel(out);
  double *s = host_alloc((size_t)n * sizeof *s);
  switch (c->scale) {
    case SCALE_ROW_SUM: {
      int64_t d = x->shape[x->ndim - 1];
      for (int64_t r = 0; r < n; ++r) {
        double acc = 0;
        for (int64_t j = 0; j < d; ++j) acc += fabs(load_view(x, r * d + j));
        s[r] = host_call->def->code == 1 ? acc / (double)d : acc;
      }
      break;
    }
    case SCALE_NORM: {
      bool center = strcmp(c->op, "layernorm") == 0;
      const recap_tensor *w = &host_call->inputs[1];
      const recap_tensor *b = center && host_call->num_inputs > 2 ? &host_call->inputs[2] : NULL;
      int64_t d = x->shape[x->ndim - 1], rows = n / d;
      for (int64_t r = 0; r < rows; ++r) {
        double mean = 0, sq = 0;
        if (center) {
          for (int64_t j = 0; j < d; ++j) mean += load_view(x, r * d + j);
          mean /= (double)d;
        }
        for (int64_t j = 0; j < d; ++j) {
          double v = load_view(x, r * d + j) - mean;
          sq += v * v;
        }
        double rstd = 1.0 / sqrt(sq / (double)d + c->attrs.eps);
        for (int64_t j = 0; j < d; ++j)
          s[r * d + j] =
              (fabs(load_view(x, r * d + j)) + fabs(mean)) * rstd * fabs(load_view(w, j)) +
              (b ? fabs(load_view(b, j)) : 0);
      }
      break;
    }
    case SCALE_ROPE: {
      int64_t dh = x->shape[x->ndim - 1], half = dh / 2;
      for (int64_t k = 0; k < n; ++k) {
        int64_t i = k % dh, row = k - i, i0 = i < half ? i : i - half;
        s[k] = fabs(load_view(x, row + i0)) + fabs(load_view(x, row + i0 + half));
      }
      break;
    }
    case SCALE_ATTENTION: {
      /* The host attention on |v| gives sum_j p_j |v_jd| exactly as the reference weighs. */
      recap__op_call abs_call = *host_call;
      const recap_tensor *v = &host_call->inputs[2];
      int64_t vn = recap__tensor_numel(v);
      recap_tensor vabs = *v;
      vabs.data = host_alloc((size_t)vn * sizeof(float));
      vabs.dtype = RECAP_DTYPE_F32;
      recap__tensor_set_contiguous(&vabs);
      for (int64_t k = 0; k < vn; ++k) ((float *)vabs.data)[k] = (float)fabs(load_view(v, k));
      /* All of q, k, v must share a dtype: compute the scale in f32 from converted q and k. */
      recap_tensor conv[2];
      for (int i = 0; i < 2; ++i) {
        const recap_tensor *t = &host_call->inputs[i];
        int64_t tn = recap__tensor_numel(t);
        conv[i] = *t;
        conv[i].data = host_alloc((size_t)tn * sizeof(float));
        conv[i].dtype = RECAP_DTYPE_F32;
        recap__tensor_set_contiguous(&conv[i]);
        for (int64_t k = 0; k < tn; ++k) ((float *)conv[i].data)[k] = (float)load_view(t, k);
      }
      abs_call.inputs[0] = conv[0];
      abs_call.inputs[1] = conv[1];
      abs_call.inputs[2] = vabs;
      abs_call.outputs[0].dtype = RECAP_DTYPE_F32;
      float *sf = host_alloc((size_t)n * sizeof(float));
      abs_call.outputs[0].data = sf;
      CHECK_OK(host_call->def->run_host(&abs_call));
      for (int64_t k = 0; k < n; ++k) s[k] = sf[k];
      break;
    }
    case SCALE_NORMAL:
      for (int64_t k = 0; k < n; ++k) s[k] = fabs(c->attrs.mean) + 6 * fabs(c->attrs.std);
      break;
    case SCALE_REF:
      for (int64_t k = 0; k < n; ++k) s[k] = fabs(recap__load_f32(out->data, out->dtype, k));
      break;
  }
  return s;
}

static inline size_t tensor_bytes(const recap_tensor *t) {
  return (size_t)recap__tensor_numel(t) * recap_dtype_size(t->dtype);
}

/* Captures one launch of `call` on the CUDA stream, replays it twice on poisoned outputs and
 * checks each replay against `eager` (per output, bit for bit). */
static inline void check_graph_replay(const char *label, recap__op_call *call, void *const *dev_out,
                                      void *const *eager) {
  recap__graph *graph = NULL;
  recap__graph_exec *exec = NULL;
  CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_GLOBAL));
  recap_status st = recap__op_launch(call, cuda_stream);
  recap_status end = recap__capture_end(cuda_stream, &graph);
  CHECK_OK(st);
  CHECK_OK(end);
  CHECK_OK(cuda->graph_instantiate(graph, &exec));
  for (int replay = 0; replay < 2; ++replay) {
    for (int o = 0; o < call->num_outputs; ++o)
      poison_device(dev_out[o], tensor_bytes(&call->outputs[o]));
    CHECK_OK(cuda->graph_launch(exec, cuda_stream));
    CHECK_OK(recap_stream_synchronize(cuda_stream));
    for (int o = 0; o < call->num_outputs; ++o) {
      size_t bytes = tensor_bytes(&call->outputs[o]);
      void *got = malloc(bytes);
      CU_ASSERT_PTR_NOT_NULL_FATAL(got);
      to_host(got, dev_out[o], bytes);
      int differs = memcmp(got, eager[o], bytes) != 0;
      free(got);
      if (differs)
        fprintf(stderr, "\n  %s: graph replay %d of output %d differs from the eager run\n", label,
                replay, o);
      CU_ASSERT_FALSE(differs);
    }
  }
  cuda->graph_exec_destroy(exec);
  cuda->graph_destroy(graph);
}

/* Runs one case on host and CUDA, compares every output, then checks graph replay. */
static inline void run_case(const op_case *c) {
  char label[160];
  snprintf(label, sizeof label, "%s (input 0 %s, %lld elements at offset %lld, output offset %lld)",
           c->op,
           c->num_inputs ? recap_dtype_name(c->in[0].view.dtype) : recap_dtype_name(c->attrs.dtype),
           c->num_inputs ? (long long)recap__tensor_numel(&c->in[0].view) : 0LL,
           c->num_inputs ? (long long)c->in[0].offset : 0LL, (long long)c->out_offset);
  recap__op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find(c->op);
  CU_ASSERT_PTR_NOT_NULL_FATAL(call.def);
  call.attrs = c->attrs;
  call.num_inputs = c->num_inputs;
  for (int i = 0; i < c->num_inputs; ++i) call.inputs[i] = bind(&c->in[i], false);
  CHECK_OK(recap__op_infer(&call));

  recap__op_call host_call = call, dev_call = call;
  void *host_out[RECAP_OP_MAX_OUTPUTS], *dev_out[RECAP_OP_MAX_OUTPUTS];
  void *cuda_out[RECAP_OP_MAX_OUTPUTS];
  for (int o = 0; o < call.num_outputs; ++o) {
    size_t bytes = tensor_bytes(&call.outputs[o]);
    host_out[o] = host_alloc(bytes);
    memset(host_out[o], 0xFF, bytes);
    cuda_out[o] = host_alloc(bytes);
    size_t skip = (size_t)c->out_offset * recap_dtype_size(call.outputs[o].dtype);
    dev_out[o] = (char *)dev_alloc(bytes + skip) + skip;
    poison_device(dev_out[o], bytes);
    host_call.outputs[o].data = host_out[o];
    dev_call.outputs[o].data = dev_out[o];
  }
  for (int i = 0; i < c->num_inputs; ++i) dev_call.inputs[i] = bind(&c->in[i], true);

  /* Random ops: the host generator is set to the state the CUDA draw used. */
  recap_rng_state state;
  if (call.def->is_random) CHECK_OK(recap_rng_get_state(kCudaDev, &state));
  CHECK_OK(recap__op_launch(&dev_call, cuda_stream));
  CHECK_OK(recap_stream_synchronize(cuda_stream));
  if (call.def->is_random) CHECK_OK(recap_rng_set_state(kHostDev, &state));
  CHECK_OK(recap__op_launch(&host_call, host_stream));
  CHECK_OK(recap_stream_synchronize(host_stream));

  for (int o = 0; o < call.num_outputs; ++o) {
    const recap_tensor *out = &call.outputs[o];
    to_host(cuda_out[o], dev_out[o], tensor_bytes(out));
    double *scale = c->scale == SCALE_REF ? NULL : make_scale(c, &host_call, o);
    compare(label, out->dtype, recap__tensor_numel(out), cuda_out[o], host_out[o], scale, c->exact);
  }
  if (!call.def->is_random) check_graph_replay(label, &dev_call, dev_out, cuda_out);
}

static inline recap__op_attrs no_attrs(void) {
  recap__op_attrs a;
  memset(&a, 0, sizeof a);
  return a;
}

static const recap_dtype kFloatTypes[] = {RECAP_DTYPE_F32, RECAP_DTYPE_F16, RECAP_DTYPE_BF16};
enum { NUM_FLOAT_TYPES = 3 };

static inline void set_sizes(recap__op_attrs *a, int n, const int64_t *v) {
  a->num_sizes = n;
  for (int i = 0; i < n; ++i) a->sizes[i] = v[i];
}

#endif /* RECAP_TESTS_OPS_CUDA_UTIL_H */
