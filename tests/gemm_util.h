/*
 * gemm_util.h: what the GEMM tests (gemm_host_test.c, gemm_cublas_test.c,
 * gemm_skinny_hopper_test.c) share: tensors with their own storage, the float64 reference and
 * its tolerance, matmul and linear cases run on the host stream, and (CUDA builds) their
 * device copies checked against the host result, with the suites' init and cleanup.
 *
 * Inputs are fresh random values in [-1, 1) (never zeros). An element passes when
 * |out - ref| <= atol + rtol * scale, where scale = |alpha| sum_k |a_ik b_kj| + |beta c_ij| +
 * |bias_j| (the size of the terms, so results near zero do not flake), times the largest
 * slope of the activation (1.13 for the gelus, 1 otherwise), plus |residual_ij|.
 *
 * The reference reads linear's inputs from the contract in gemm.h, not from the op's code:
 * the residual is the last input when attribute `residual` is set or all four are given, and
 * the bias is input 2 when that is not the residual.
 */
#ifndef RECAP_TESTS_GEMM_UTIL_H
#define RECAP_TESTS_GEMM_UTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm/gemm.h"
#include "kernels/op.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/error.h"
#include "runtime/half.h"
#include "runtime/host_fault.h"
#include "runtime/host_graph.h"
#include "tests/test_util.h"

#if RECAP_WITH_CUDA
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#endif

/* ---- tensors with their own storage ------------------------------------------------------ */

typedef struct {
  recap_tensor t;
  size_t storage_elems;
} tbuf;

static inline tbuf tb_view(recap_dtype dtype, int ndim, const int64_t *shape,
                           const int64_t *strides, test_rng *rng) {
  tbuf b = {.t = {.dtype = dtype, .ndim = ndim}};
  size_t span = 1;
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    b.t.shape[d] = shape[d];
    b.t.strides[d] = strides ? strides[d] : stride;
    stride *= shape[d];
    span += (size_t)((shape[d] - 1) * b.t.strides[d]);
  }
  b.storage_elems = span;
  b.t.data = malloc(span * recap_dtype_size(dtype));
  for (size_t i = 0; i < span; ++i)
    recap__store_f32(b.t.data, dtype, (int64_t)i, (float)test_rng_uniform(rng, -1.0, 1.0));
  return b;
}

static inline tbuf tb_make(recap_dtype dtype, int ndim, const int64_t *shape, test_rng *rng) {
  return tb_view(dtype, ndim, shape, NULL, rng);
}

static inline double tb_at(const recap_tensor *t, const int64_t *index) {
  int64_t off = 0;
  for (int d = 0; d < t->ndim; ++d) off += index[d] * t->strides[d];
  return (double)recap__load_f32(t->data, t->dtype, off);
}

/* ---- the float64 reference ----------------------------------------------------------------- */

static inline double act_ref(recap__activation act, double x) {
  switch (act) {
    case RECAP_ACT_RELU:
      return x > 0 ? x : 0;
    case RECAP_ACT_GELU:
      return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case RECAP_ACT_GELU_TANH:
      return 0.5 * x *
             (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    case RECAP_ACT_SILU:
      return x / (1.0 + exp(-x));
    case RECAP_ACT_SIGMOID:
      return 1.0 / (1.0 + exp(-x));
    case RECAP_ACT_TANH:
      return tanh(x);
    default:
      return x;
  }
}

static inline double act_slope(recap__activation act) {
  return act == RECAP_ACT_GELU || act == RECAP_ACT_GELU_TANH ? 1.13 : 1.0;
}

/* Index of a batch-broadcast operand: its dims right-aligned to the output's. */
static inline void operand_index(const recap_tensor *t, const int64_t *out_index, int out_ndim,
                                 int64_t r, int64_t c, int64_t *index) {
  const int tb = t->ndim - 2, ob = out_ndim - 2;
  for (int d = 0; d < tb; ++d) index[d] = t->shape[d] == 1 ? 0 : out_index[d + ob - tb];
  index[tb] = r;
  index[tb + 1] = c;
}

/* ref[i] and scale[i] for every output element (row-major over call->outputs[0]). */
static inline void reference(const recap__op_call *call, double *ref, double *scale) {
  const recap_tensor *o = &call->outputs[0];
  const int64_t total = recap__tensor_numel(o);
  const bool matmul = call->def == &recap__op_matmul;
  const int64_t n = o->shape[o->ndim - 1];
  for (int64_t e = 0; e < total; ++e) {
    int64_t oi[RECAP_MAX_DIMS], rest = e;
    for (int d = o->ndim - 1; d >= 0; --d) {
      oi[d] = rest % o->shape[d];
      rest /= o->shape[d];
    }
    const int64_t j = oi[o->ndim - 1];
    double sum = 0, mag = 0, extra = 0, extra_mag = 0;
    bool has_residual = false;
    if (matmul) {
      const recap_tensor *a = &call->inputs[0], *b = &call->inputs[1];
      const int64_t i = oi[o->ndim - 2];
      const int64_t k = call->attrs.trans_a ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
      for (int64_t p = 0; p < k; ++p) {
        int64_t ia[RECAP_MAX_DIMS], ib[RECAP_MAX_DIMS];
        if (call->attrs.trans_a)
          operand_index(a, oi, o->ndim, p, i, ia);
        else
          operand_index(a, oi, o->ndim, i, p, ia);
        if (call->attrs.trans_b)
          operand_index(b, oi, o->ndim, j, p, ib);
        else
          operand_index(b, oi, o->ndim, p, j, ib);
        const double prod = tb_at(a, ia) * tb_at(b, ib);
        sum += prod;
        mag += fabs(prod);
      }
      sum *= call->attrs.alpha;
      mag *= fabs(call->attrs.alpha);
      if (call->num_inputs > 2) {
        extra = call->attrs.beta * tb_at(&call->inputs[2], oi);
        extra_mag = fabs(extra);
      }
      ref[e] = sum + extra;
    } else {
      const recap_tensor *x = &call->inputs[0], *w = &call->inputs[1];
      const int64_t k = w->shape[1];
      const int given = call->num_inputs;
      has_residual = given == 4 || (given == 3 && call->attrs.residual);
      int64_t xi[RECAP_MAX_DIMS];
      memcpy(xi, oi, sizeof xi);
      for (int64_t p = 0; p < k; ++p) {
        xi[x->ndim - 1] = p;
        const int64_t wi[2] = {j, p};
        const double prod = tb_at(x, xi) * tb_at(w, wi);
        sum += prod;
        mag += fabs(prod);
      }
      if (given - has_residual == 3) {
        extra = tb_at(&call->inputs[2], &j);
        extra_mag = fabs(extra);
      }
      ref[e] = act_ref(call->attrs.act, sum + extra);
    }
    scale[e] = (mag + extra_mag) * (matmul ? 1.0 : act_slope(call->attrs.act));
    if (has_residual) { /* after the activation */
      const double r = tb_at(&call->inputs[call->num_inputs - 1], oi);
      ref[e] += r;
      scale[e] += fabs(r);
    }
    (void)n;
  }
}

typedef struct {
  double atol, rtol;
} tolerance;

static inline tolerance host_tol(recap_dtype dtype) {
  switch (dtype) {
    case RECAP_DTYPE_F16:
      return (tolerance){1e-5, 2e-3};
    case RECAP_DTYPE_BF16:
      return (tolerance){1e-5, 1e-2};
    default:
      return (tolerance){1e-6, 1e-5};
  }
}

/* Counts elements of `out` outside tolerance of ref (printing the first few). */
static inline int64_t count_bad(const recap_tensor *out, const double *ref, const double *scale,
                                tolerance tol, const char *what) {
  const int64_t total = recap__tensor_numel(out);
  int64_t bad = 0;
  for (int64_t e = 0; e < total; ++e) {
    const double got = recap__load_f32(out->data, out->dtype, e);
    const double limit = tol.atol + tol.rtol * scale[e];
    if (!(fabs(got - ref[e]) <= limit)) {
      if (bad < 4)
        fprintf(stderr, "\n  %s: element %lld = %.9g, expected %.9g (limit %.3g)", what,
                (long long)e, got, ref[e], limit);
      ++bad;
    }
  }
  return bad;
}

/* ---- calls --------------------------------------------------------------------------------- */

typedef struct {
  recap__op_call call;
  tbuf in[4];
  double *ref, *scale;
} gcase;

/* The host stream that runs the reference. Both suites use it (the CUDA suite compares with
 * the host implementation), so each suite opens it in its init and closes it in its cleanup:
 * a stream left over from the other suite would already be destroyed. */
static recap_stream *host_stream;

static inline int host_stream_open(void) {
  return recap_stream_create((recap_device){RECAP_BACKEND_HOST, 0}, 0, 0, &host_stream) != RECAP_OK;
}

static inline int host_stream_close(void) {
  const recap_status st = recap_stream_destroy(host_stream);
  host_stream = NULL;
  return st != RECAP_OK;
}

static inline void case_init(gcase *g, const char *op, int nin) {
  memset(g, 0, sizeof *g);
  g->call.def = recap__op_find(op);
  g->call.num_inputs = nin;
  recap__op_attrs_set_defaults(g->call.def, &g->call.attrs);
}

/* Infers, allocates the output, runs on the host stream; fills ref/scale. */
static inline void case_run_host(gcase *g) {
  for (int i = 0; i < g->call.num_inputs; ++i) g->call.inputs[i] = g->in[i].t;
  CHECK_OK(recap__op_infer(&g->call));
  recap_tensor *o = &g->call.outputs[0];
  const int64_t total = recap__tensor_numel(o);
  if (!o->data) o->data = malloc((size_t)total * recap_dtype_size(o->dtype));
  memset(o->data, 0xff, (size_t)total * recap_dtype_size(o->dtype)); /* NaN: unwritten fails */
  g->ref = malloc(sizeof(double) * (size_t)total);
  g->scale = malloc(sizeof(double) * (size_t)total);
  reference(&g->call, g->ref, g->scale);
  CHECK_OK(recap__op_launch(&g->call, host_stream));
  CHECK_OK(recap_stream_synchronize(host_stream));
}

static inline void case_free(gcase *g) {
  void *out = g->call.outputs[0].data;
  bool aliased = false;
  for (int i = 0; i < 4; ++i) {
    if (g->in[i].t.data == out) aliased = true;
    free(g->in[i].t.data);
  }
  if (!aliased) free(out);
  free(g->ref);
  free(g->scale);
}

static inline void check_host(gcase *g, const char *what) {
  case_run_host(g);
  CU_ASSERT_EQUAL(
      count_bad(&g->call.outputs[0], g->ref, g->scale, host_tol(g->call.inputs[0].dtype), what), 0);
}

static const recap_dtype float_types[] = {RECAP_DTYPE_F32, RECAP_DTYPE_F16, RECAP_DTYPE_BF16};

/* a [m, k] (or [k, m]) x b [k, n] (or [n, k]); optional c. */
static inline void make_matmul(gcase *g, recap_dtype dt, int64_t m, int64_t n, int64_t k, int ta,
                               int tb, bool with_c, test_rng *rng) {
  case_init(g, "matmul", with_c ? 3 : 2);
  g->call.attrs.trans_a = ta;
  g->call.attrs.trans_b = tb;
  const int64_t as[2] = {ta ? k : m, ta ? m : k}, bs[2] = {tb ? n : k, tb ? k : n};
  const int64_t cs[2] = {m, n};
  g->in[0] = tb_make(dt, 2, as, rng);
  g->in[1] = tb_make(dt, 2, bs, rng);
  if (with_c) {
    g->in[2] = tb_make(dt, 2, cs, rng);
    g->call.attrs.alpha = 0.75;
    g->call.attrs.beta = -1.25;
  }
}

static inline void make_linear(gcase *g, recap_dtype dt, int xdims, const int64_t *xshape,
                               int64_t n, bool bias, recap__activation act, test_rng *rng) {
  case_init(g, "linear", bias ? 3 : 2);
  g->call.attrs.act = act;
  const int64_t k = xshape[xdims - 1];
  const int64_t ws[2] = {n, k};
  g->in[0] = tb_make(dt, xdims, xshape, rng);
  g->in[1] = tb_make(dt, 2, ws, rng);
  if (bias) g->in[2] = tb_make(dt, 1, &n, rng);
}

/* Gives a linear case a residual: a last input shaped like the output, marked by attribute
 * `residual`, so that without a bias it is input 2 (the form a folded add takes). */
static inline void add_residual(gcase *g, test_rng *rng) {
  const recap_tensor *x = &g->in[0].t;
  int64_t shape[RECAP_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape);
  shape[x->ndim - 1] = g->in[1].t.shape[0];
  g->in[g->call.num_inputs++] = tb_make(x->dtype, x->ndim, shape, rng);
  g->call.attrs.residual = 1;
}

/* ---- CUDA ---------------------------------------------------------------------------------- */
#if RECAP_WITH_CUDA

static recap_stream *cuda_stream;

/* A device copy of a host case: inputs copied (their whole storage), output poisoned. */
typedef struct {
  recap__op_call call;
  void *dev[5]; /* the inputs, then the output */
} dcase;

static inline void dcase_make(const gcase *g, dcase *d) {
  memset(d, 0, sizeof *d);
  d->call = g->call;
  for (int i = 0; i < g->call.num_inputs; ++i) {
    const size_t bytes = g->in[i].storage_elems * recap_dtype_size(g->in[i].t.dtype);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&d->dev[i], bytes), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMemcpy(d->dev[i], g->in[i].t.data, bytes, cudaMemcpyHostToDevice),
                          cudaSuccess);
    d->call.inputs[i].data = d->dev[i];
  }
  const size_t out_bytes =
      (size_t)recap__tensor_numel(&g->call.outputs[0]) * recap_dtype_size(g->call.outputs[0].dtype);
  CU_ASSERT_EQUAL_FATAL(cudaMalloc(&d->dev[4], out_bytes), cudaSuccess);
  /* NaN, on the test stream: cudaMemset runs on the legacy default stream, which a
   * non-blocking stream does not wait for, so it could land after the kernel's writes. */
  CU_ASSERT_EQUAL_FATAL(
      cudaMemsetAsync(d->dev[4], 0xff, out_bytes, recap_stream_native(cuda_stream)), cudaSuccess);
  d->call.outputs[0].data = d->dev[4];
  /* A cudaMemcpy from pageable memory may return before its DMA has landed, and it runs on the
   * legacy default stream, which the non-blocking test stream does not wait for: without this,
   * a kernel could read the previous buffer's bytes at the same address. */
  CU_ASSERT_EQUAL_FATAL(cudaDeviceSynchronize(), cudaSuccess);
}

static inline void dcase_free(dcase *d) {
  for (int i = 0; i < 5; ++i) cudaFree(d->dev[i]);
}

/* Copies the device output back into a host tensor shaped like the host case's output. */
static inline recap_tensor dcase_result(const gcase *g, const dcase *d) {
  recap_tensor t = g->call.outputs[0];
  const size_t bytes = (size_t)recap__tensor_numel(&t) * recap_dtype_size(t.dtype);
  t.data = malloc(bytes);
  CU_ASSERT_EQUAL(cudaMemcpy(t.data, d->call.outputs[0].data, bytes, cudaMemcpyDeviceToHost),
                  cudaSuccess);
  return t;
}

static inline tolerance cuda_tol(recap_dtype dtype, bool tf32) {
  if (dtype == RECAP_DTYPE_F32) return (tolerance){1e-6, tf32 ? 2e-3 : 1e-4};
  return host_tol(dtype);
}

/* Runs the host case on CUDA and compares with the host implementation's output: both are
 * within tolerance of the reference, and within twice it of each other. */
static inline void check_cuda_against_host(gcase *g, bool tf32, const char *what) {
  dcase d;
  dcase_make(g, &d);
  CHECK_OK(recap__op_launch(&d.call, cuda_stream));
  CHECK_OK(recap_stream_synchronize(cuda_stream));
  recap_tensor got = dcase_result(g, &d);
  const recap_dtype dt = g->call.inputs[0].dtype;
  tolerance tol = cuda_tol(dt, tf32);
  CU_ASSERT_EQUAL(count_bad(&got, g->ref, g->scale, tol, what), 0);
  const int64_t total = recap__tensor_numel(&got);
  double *host_out = malloc(sizeof(double) * (size_t)total);
  for (int64_t e = 0; e < total; ++e) host_out[e] = recap__load_f32(g->call.outputs[0].data, dt, e);
  tol.atol *= 2;
  tol.rtol *= 2;
  CU_ASSERT_EQUAL(count_bad(&got, host_out, g->scale, tol, "cuda vs host"), 0);
  free(host_out);
  free(got.data);
  dcase_free(&d);
}

/* Runs a linear call with host inputs `in` (num_in of them, their whole storage) on CUDA, with
 * the workspace its contract sizes, and returns its output (malloc'd): through a prepare and
 * the op's launch (pipe < 0), or straight through the skinny kernel's configuration `pipe`
 * (0, 1 register buffers; 2, 3 the bulk-copy shapes, run as 1 before Hopper). */
static inline void *run_linear_cuda(const recap__op_call *host_call, const tbuf *in, int num_in,
                                    int pipe) {
  recap__op_call call = *host_call;
  void *dev[RECAP_OP_MAX_INPUTS + 1] = {0};
  for (int i = 0; i < num_in; ++i) {
    const size_t bytes = in[i].storage_elems * recap_dtype_size(in[i].t.dtype);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dev[i], bytes), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMemcpy(dev[i], in[i].t.data, bytes, cudaMemcpyHostToDevice),
                          cudaSuccess);
    call.inputs[i].data = dev[i];
  }
  const size_t out_bytes =
      (size_t)recap__tensor_numel(&call.outputs[0]) * recap_dtype_size(call.outputs[0].dtype);
  void **out_dev = &dev[RECAP_OP_MAX_INPUTS];
  CU_ASSERT_EQUAL_FATAL(cudaMalloc(out_dev, out_bytes), cudaSuccess);
  /* NaN, on the test stream: cudaMemset runs on the legacy default stream, which a
   * non-blocking stream does not wait for, so it could land after the kernel's writes. */
  CU_ASSERT_EQUAL_FATAL(
      cudaMemsetAsync(*out_dev, 0xff, out_bytes, recap_stream_native(cuda_stream)), cudaSuccess);
  call.outputs[0].data = *out_dev;
  call.workspace_bytes = call.def->workspace_bytes(&call, RECAP_BACKEND_CUDA);
  CU_ASSERT_TRUE(call.workspace_bytes > 0);
  CU_ASSERT_EQUAL_FATAL(cudaMalloc(&call.workspace, call.workspace_bytes), cudaSuccess);
  /* A cudaMemcpy from pageable memory may return before its DMA has landed, on the legacy
   * stream: without this, a kernel could read the previous buffer's bytes at the address. */
  CU_ASSERT_EQUAL_FATAL(cudaDeviceSynchronize(), cudaSuccess);
  if (pipe < 0) {
    CHECK_OK(recap__gemm_prepare(&call, cuda_stream));
    CHECK_OK(recap__op_launch(&call, cuda_stream));
  } else {
    recap__gemm_plan plan;
    CHECK_OK(recap__gemm_plan_make(&call, &plan));
    CU_ASSERT_TRUE(recap__cuda_gemm_skinny_fits(&plan));
    CHECK_OK(recap__cuda_gemm_skinny_config(&plan, 0, recap_stream_native(cuda_stream),
                                            pipe < 2 ? 4 : 8, pipe));
  }
  CHECK_OK(recap_stream_synchronize(cuda_stream));
  void *out = malloc(out_bytes);
  CU_ASSERT_EQUAL(cudaMemcpy(out, *out_dev, out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i <= RECAP_OP_MAX_INPUTS; ++i) cudaFree(dev[i]);
  cudaFree(call.workspace);
  return out;
}

/* The linear call (its host output already computed) on CUDA under the current environment,
 * run twice: within `tol` of the reference ref/scale, within twice it of the host's output,
 * and the same bits both times. */
static inline void check_linear_cuda(const recap__op_call *host_call, const tbuf *in, int num_in,
                                     const double *ref, const double *scale, tolerance tol,
                                     int pipe, const char *what) {
  void *a = run_linear_cuda(host_call, in, num_in, pipe);
  void *b = run_linear_cuda(host_call, in, num_in, pipe);
  recap_tensor got = host_call->outputs[0];
  got.data = a;
  const recap_dtype dt = got.dtype;
  CU_ASSERT_EQUAL(count_bad(&got, ref, scale, tol, what), 0);
  const int64_t total = recap__tensor_numel(&got);
  double *host = malloc(sizeof(double) * (size_t)total);
  for (int64_t e = 0; e < total; ++e) host[e] = recap__load_f32(host_call->outputs[0].data, dt, e);
  tol.atol *= 2;
  tol.rtol *= 2;
  CU_ASSERT_EQUAL(count_bad(&got, host, scale, tol, "cuda vs host"), 0);
  const bool same = memcmp(a, b, (size_t)total * recap_dtype_size(dt)) == 0;
  if (!same) fprintf(stderr, "not the same bits twice: %s\n", what);
  CU_ASSERT(same);
  free(host);
  free(a);
  free(b);
}

/* Sets or (value NULL) unsets a RECAP_GEMM_* switch and makes the GEMM code read it again. */
static inline void set_gemm_env(const char *name, const char *value) {
  if (value)
    setenv(name, value, 1);
  else
    unsetenv(name);
  recap__gemm_env_reload();
}

/* The cases the CUDA files build (the cuBLAS runs take them all). */
typedef void (*case_maker)(gcase *g, recap_dtype dt, test_rng *rng);

static inline void mk_odd(gcase *g, recap_dtype dt, test_rng *rng) {
  make_matmul(g, dt, 7, 33, 1023, 0, 0, false, rng);
}
static inline void mk_skinny(gcase *g, recap_dtype dt, test_rng *rng) {
  make_matmul(g, dt, 3, 1023, 257, 0, 1, false, rng);
}
static inline void mk_trans(gcase *g, recap_dtype dt, test_rng *rng) {
  make_matmul(g, dt, 33, 17, 65, 1, 1, false, rng);
}
static inline void mk_beta(gcase *g, recap_dtype dt, test_rng *rng) {
  make_matmul(g, dt, 13, 21, 34, 1, 0, true, rng);
}
static inline void mk_batched(gcase *g, recap_dtype dt, test_rng *rng) {
  case_init(g, "matmul", 3);
  g->call.attrs.trans_b = 1;
  g->call.attrs.alpha = -0.5;
  g->call.attrs.beta = 2.0;
  const int64_t a[4] = {3, 1, 4, 9}, b[4] = {1, 2, 7, 9}, c[4] = {3, 2, 4, 7};
  g->in[0] = tb_make(dt, 4, a, rng);
  g->in[1] = tb_make(dt, 4, b, rng);
  g->in[2] = tb_make(dt, 4, c, rng);
}
static inline void mk_strided_batch(gcase *g, recap_dtype dt, test_rng *rng) {
  case_init(g, "matmul", 2);
  const int64_t as[4] = {2, 3, 5, 8}, a_strides[4] = {160, 40, 8, 1};
  const int64_t bs[3] = {3, 8, 4}, b_strides[3] = {35, 4, 1};
  g->in[0] = tb_view(dt, 4, as, a_strides, rng);
  g->in[1] = tb_view(dt, 3, bs, b_strides, rng);
}
static inline void mk_linear_relu(gcase *g, recap_dtype dt, test_rng *rng) {
  const int64_t xs[3] = {2, 5, 96};
  make_linear(g, dt, 3, xs, 130, true, RECAP_ACT_RELU, rng);
}
static inline void mk_linear_gelu(gcase *g, recap_dtype dt, test_rng *rng) {
  const int64_t xs[2] = {9, 64};
  make_linear(g, dt, 2, xs, 72, true, RECAP_ACT_GELU, rng);
}
static inline void mk_linear_gelu_tanh(gcase *g, recap_dtype dt, test_rng *rng) {
  const int64_t xs[2] = {9, 64};
  make_linear(g, dt, 2, xs, 72, true, RECAP_ACT_GELU_TANH, rng);
}
static inline void mk_linear_silu_nobias(gcase *g, recap_dtype dt, test_rng *rng) {
  const int64_t xs[2] = {16, 40};
  make_linear(g, dt, 2, xs, 24, false, RECAP_ACT_SILU, rng);
}
/* Large enough for the Hopper kernel by default (f16/bf16, an activation cuBLASLt cannot fuse,
 * m over the skinny range), with partial tiles in every dimension and a residual. */
static inline void mk_linear_gelu_residual(gcase *g, recap_dtype dt, test_rng *rng) {
  const int64_t xs[2] = {200, 200};
  make_linear(g, dt, 2, xs, 136, true, RECAP_ACT_GELU, rng);
  add_residual(g, rng);
}
/* A folded residual add without a bias, m over the skinny range (cuBLASLt: the residual as C
 * with beta = 1 and no bias epilogue), with x of rank 3 and partial tiles. */
static inline void mk_linear_residual_nobias(gcase *g, recap_dtype dt, test_rng *rng) {
  const int64_t xs[3] = {3, 11, 96};
  make_linear(g, dt, 3, xs, 130, false, RECAP_ACT_NONE, rng);
  add_residual(g, rng);
}
/* The same after an activation cuBLASLt fuses (relu): the residual must come after it, so
 * cuBLASLt cannot take it as C. */
static inline void mk_linear_relu_residual_nobias(gcase *g, recap_dtype dt, test_rng *rng) {
  const int64_t xs[2] = {40, 72};
  make_linear(g, dt, 2, xs, 56, false, RECAP_ACT_RELU, rng);
  add_residual(g, rng);
}
/* A decode shape with a residual and no bias: the skinny kernel in f16/bf16 (n not a multiple
 * of its 16-row blocks), cuBLASLt in f32. */
static inline void mk_skinny_residual_nobias(gcase *g, recap_dtype dt, test_rng *rng) {
  const int64_t xs[2] = {5, 264};
  make_linear(g, dt, 2, xs, 257, false, RECAP_ACT_NONE, rng);
  add_residual(g, rng);
}

static inline int cuda_suite_init(void) {
  if (host_stream_open()) return 1;
  if (recap_stream_create((recap_device){RECAP_BACKEND_CUDA, 0}, 0, RECAP_STREAM_NON_BLOCKING,
                          &cuda_stream) != RECAP_OK) {
    host_stream_close(); /* CUnit runs no cleanup after a failed init */
    return 1;
  }
  return 0;
}

static inline int cuda_suite_cleanup(void) {
  int failed = 0;
  if (cuda_stream && recap__gemm_release_stream(recap_stream_native(cuda_stream)) != RECAP_OK)
    failed = 1;
  if (recap_stream_destroy(cuda_stream) != RECAP_OK) failed = 1;
  cuda_stream = NULL;
  return host_stream_close() || failed;
}
#endif /* RECAP_WITH_CUDA */

static inline int host_suite_init(void) {
  return host_stream_open();
}

static inline int host_suite_cleanup(void) {
  return host_stream_close();
}

#endif /* RECAP_TESTS_GEMM_UTIL_H */
