/*
 * gemm_test.c: matmul and linear on the host against a float64 reference written here, shape
 * and dtype validation, and (with a GPU) the CUDA paths against the host implementation:
 * cuBLASLt and cuBLAS, TF32 on and off, graph capture and replay, capture without warmup,
 * per-stream workspaces.
 *
 * Inputs are fresh random values in [-1, 1) (never zeros). An element passes when
 * |out - ref| <= atol + rtol * scale, where scale = |alpha| sum_k |a_ik b_kj| + |beta c_ij| +
 * |bias_j| (the size of the terms, so results near zero do not flake), times the largest
 * slope of the activation (1.13 for the gelus, 1 otherwise).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm/gemm.h"
#include "kernels/half.h"
#include "kernels/op.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/error.h"
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

static tbuf tb_view(recap_dtype dtype, int ndim, const int64_t *shape, const int64_t *strides,
                    test_rng *rng) {
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

static tbuf tb_make(recap_dtype dtype, int ndim, const int64_t *shape, test_rng *rng) {
  return tb_view(dtype, ndim, shape, NULL, rng);
}

static double tb_at(const recap_tensor *t, const int64_t *index) {
  int64_t off = 0;
  for (int d = 0; d < t->ndim; ++d) off += index[d] * t->strides[d];
  return (double)recap__load_f32(t->data, t->dtype, off);
}

/* ---- the float64 reference ----------------------------------------------------------------- */

static double act_ref(recap_activation act, double x) {
  switch (act) {
    case RECAP_ACT_RELU: return x > 0 ? x : 0;
    case RECAP_ACT_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case RECAP_ACT_GELU_TANH:
      return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    case RECAP_ACT_SILU: return x / (1.0 + exp(-x));
    case RECAP_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case RECAP_ACT_TANH: return tanh(x);
    default: return x;
  }
}

static double act_slope(recap_activation act) {
  return act == RECAP_ACT_GELU || act == RECAP_ACT_GELU_TANH ? 1.13 : 1.0;
}

/* Index of a batch-broadcast operand: its dims right-aligned to the output's. */
static void operand_index(const recap_tensor *t, const int64_t *out_index, int out_ndim,
                          int64_t r, int64_t c, int64_t *index) {
  const int tb = t->ndim - 2, ob = out_ndim - 2;
  for (int d = 0; d < tb; ++d) index[d] = t->shape[d] == 1 ? 0 : out_index[d + ob - tb];
  index[tb] = r;
  index[tb + 1] = c;
}

/* ref[i] and scale[i] for every output element (row-major over call->outputs[0]). */
static void reference(const recap_op_call *call, double *ref, double *scale) {
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
    if (matmul) {
      const recap_tensor *a = &call->inputs[0], *b = &call->inputs[1];
      const int64_t i = oi[o->ndim - 2];
      const int64_t k = call->attrs.trans_a ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
      for (int64_t p = 0; p < k; ++p) {
        int64_t ia[RECAP_MAX_DIMS], ib[RECAP_MAX_DIMS];
        if (call->attrs.trans_a) operand_index(a, oi, o->ndim, p, i, ia);
        else operand_index(a, oi, o->ndim, i, p, ia);
        if (call->attrs.trans_b) operand_index(b, oi, o->ndim, j, p, ib);
        else operand_index(b, oi, o->ndim, p, j, ib);
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
      int64_t xi[RECAP_MAX_DIMS];
      memcpy(xi, oi, sizeof xi);
      for (int64_t p = 0; p < k; ++p) {
        xi[x->ndim - 1] = p;
        const int64_t wi[2] = {j, p};
        const double prod = tb_at(x, xi) * tb_at(w, wi);
        sum += prod;
        mag += fabs(prod);
      }
      if (call->num_inputs > 2) {
        extra = tb_at(&call->inputs[2], &j);
        extra_mag = fabs(extra);
      }
      ref[e] = act_ref(call->attrs.act, sum + extra);
    }
    scale[e] = (mag + extra_mag) * (matmul ? 1.0 : act_slope(call->attrs.act));
    if (!matmul && call->num_inputs > 3) { /* the residual, after the activation */
      const double r = tb_at(&call->inputs[3], oi);
      ref[e] += r;
      scale[e] += fabs(r);
    }
    (void)n;
  }
}

typedef struct {
  double atol, rtol;
} tolerance;

static tolerance host_tol(recap_dtype dtype) {
  switch (dtype) {
    case RECAP_DTYPE_F16: return (tolerance){1e-5, 2e-3};
    case RECAP_DTYPE_BF16: return (tolerance){1e-5, 1e-2};
    default: return (tolerance){1e-6, 1e-5};
  }
}

/* Counts elements of `out` outside tolerance of ref (printing the first few). */
static int64_t count_bad(const recap_tensor *out, const double *ref, const double *scale,
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
  recap_op_call call;
  tbuf in[4];
  double *ref, *scale;
} gcase;

/* The host stream that runs the reference. Both suites use it (the CUDA suite compares with
 * the host implementation), so each suite opens it in its init and closes it in its cleanup:
 * a stream left over from the other suite would already be destroyed. */
static recap_stream *host_stream;

static int host_stream_open(void) {
  return recap_stream_create((recap_device){RECAP_BACKEND_HOST, 0}, 0, 0, &host_stream) !=
         RECAP_OK;
}

static int host_stream_close(void) {
  const recap_status st = recap_stream_destroy(host_stream);
  host_stream = NULL;
  return st != RECAP_OK;
}

static void case_init(gcase *g, const char *op, int nin) {
  memset(g, 0, sizeof *g);
  g->call.def = recap__op_find(op);
  g->call.num_inputs = nin;
  recap__op_attrs_set_defaults(g->call.def, &g->call.attrs);
}

/* Infers, allocates the output, runs on the host stream; fills ref/scale. */
static void case_run_host(gcase *g) {
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

static void case_free(gcase *g) {
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

static void check_host(gcase *g, const char *what) {
  case_run_host(g);
  CU_ASSERT_EQUAL(count_bad(&g->call.outputs[0], g->ref, g->scale,
                            host_tol(g->call.inputs[0].dtype), what), 0);
}

static const recap_dtype float_types[] = {RECAP_DTYPE_F32, RECAP_DTYPE_F16, RECAP_DTYPE_BF16};

/* a [m, k] (or [k, m]) x b [k, n] (or [n, k]); optional c. */
static void make_matmul(gcase *g, recap_dtype dt, int64_t m, int64_t n, int64_t k, int ta, int tb,
                        bool with_c, test_rng *rng) {
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

static void make_linear(gcase *g, recap_dtype dt, int xdims, const int64_t *xshape, int64_t n,
                        bool bias, recap_activation act, test_rng *rng) {
  case_init(g, "linear", bias ? 3 : 2);
  g->call.attrs.act = act;
  const int64_t k = xshape[xdims - 1];
  const int64_t ws[2] = {n, k};
  g->in[0] = tb_make(dt, xdims, xshape, rng);
  g->in[1] = tb_make(dt, 2, ws, rng);
  if (bias) g->in[2] = tb_make(dt, 1, &n, rng);
}

/* ---- host: matmul ---------------------------------------------------------------------------- */

static const int64_t odd_shapes[][3] = {
    {1, 1, 1}, {7, 33, 1023}, {33, 7, 1}, {1, 1023, 7}, {16, 65, 33}, {33, 33, 33}, {1023, 2, 7},
};

static void test_matmul_odd_shapes_match_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 3; ++d) {
    for (size_t s = 0; s < sizeof odd_shapes / sizeof odd_shapes[0]; ++s) {
      gcase g;
      make_matmul(&g, float_types[d], odd_shapes[s][0], odd_shapes[s][1], odd_shapes[s][2], 0, 0,
                  false, &rng);
      check_host(&g, "matmul odd shape");
      case_free(&g);
    }
  }
}

static void test_matmul_skinny_m_1_to_16_matches_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 3; ++d) {
    for (int64_t m = 1; m <= 16; ++m) {
      gcase g;
      make_matmul(&g, float_types[d], m, 40, 300, 0, 1, false, &rng);
      check_host(&g, "matmul skinny");
      case_free(&g);
    }
  }
}

static void test_matmul_transposes_match_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 3; ++d) {
    for (int t = 0; t < 4; ++t) {
      gcase g;
      make_matmul(&g, float_types[d], 7, 33, 17, t & 1, t >> 1, false, &rng);
      check_host(&g, "matmul transposes");
      case_free(&g);
    }
  }
}

/* A transposed VIEW (unit stride in the row dim) instead of the trans attribute. */
static void test_matmul_column_major_views_match_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  gcase g;
  case_init(&g, "matmul", 2);
  const int64_t as[2] = {9, 20}, a_strides[2] = {1, 9};  /* [9, 20] stored column by column */
  const int64_t bs[2] = {20, 5}, b_strides[2] = {8, 1};  /* rows padded to 8 */
  g.in[0] = tb_view(RECAP_DTYPE_F32, 2, as, a_strides, &rng);
  g.in[1] = tb_view(RECAP_DTYPE_F32, 2, bs, b_strides, &rng);
  check_host(&g, "matmul views");
  case_free(&g);
}

static void test_matmul_alpha_beta_with_c_match_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 3; ++d) {
    gcase g;
    make_matmul(&g, float_types[d], 13, 21, 34, 1, 0, true, &rng);
    check_host(&g, "matmul alpha beta");
    case_free(&g);
  }
}

static void test_matmul_in_place_on_c_matches_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  gcase g;
  make_matmul(&g, RECAP_DTYPE_F32, 13, 21, 34, 0, 1, true, &rng);
  g.call.outputs[0].data = g.in[2].t.data; /* out aliases c (in_place_input = 2) */
  CU_ASSERT_EQUAL(g.call.def->in_place_input, 2);
  for (int i = 0; i < 3; ++i) g.call.inputs[i] = g.in[i].t;
  CHECK_OK(recap__op_infer(&g.call));
  const int64_t total = recap__tensor_numel(&g.call.outputs[0]);
  g.ref = malloc(sizeof(double) * (size_t)total);
  g.scale = malloc(sizeof(double) * (size_t)total);
  reference(&g.call, g.ref, g.scale);
  CHECK_OK(recap__op_launch(&g.call, host_stream));
  CHECK_OK(recap_stream_synchronize(host_stream));
  CU_ASSERT_EQUAL(count_bad(&g.call.outputs[0], g.ref, g.scale, host_tol(RECAP_DTYPE_F32),
                            "in place"), 0);
  case_free(&g);
}

static void test_matmul_batched_with_broadcast_matches_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 3; ++d) {
    /* a [2, 3, M, K] x b [K, N]: b broadcasts over both batch dims. */
    gcase g;
    case_init(&g, "matmul", 2);
    const int64_t a1[4] = {2, 3, 5, 11}, b1[2] = {11, 6};
    g.in[0] = tb_make(float_types[d], 4, a1, &rng);
    g.in[1] = tb_make(float_types[d], 2, b1, &rng);
    check_host(&g, "batched a");
    CU_ASSERT_EQUAL(g.call.outputs[0].ndim, 4);
    case_free(&g);
    /* a [3, 1, M, K] x b [1, 2, N, K] (trans_b): both broadcast, with c. */
    case_init(&g, "matmul", 3);
    g.call.attrs.trans_b = 1;
    g.call.attrs.alpha = -0.5;
    g.call.attrs.beta = 2.0;
    const int64_t a2[4] = {3, 1, 4, 9}, b2[4] = {1, 2, 7, 9}, c2[4] = {3, 2, 4, 7};
    g.in[0] = tb_make(float_types[d], 4, a2, &rng);
    g.in[1] = tb_make(float_types[d], 4, b2, &rng);
    g.in[2] = tb_make(float_types[d], 4, c2, &rng);
    check_host(&g, "batched broadcast both");
    case_free(&g);
  }
}

/* Batch strides that no single stride covers (a slice of a bigger tensor): two levels. */
static void test_matmul_strided_batch_view_matches_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  gcase g;
  case_init(&g, "matmul", 2);
  const int64_t as[4] = {2, 3, 5, 8}, a_strides[4] = {4 * 5 * 8, 5 * 8, 8, 1}; /* [2, 4 -> 3] */
  const int64_t bs[3] = {3, 8, 4}, b_strides[3] = {8 * 4 + 3, 4, 1};           /* gaps */
  g.in[0] = tb_view(RECAP_DTYPE_BF16, 4, as, a_strides, &rng);
  g.in[1] = tb_view(RECAP_DTYPE_BF16, 3, bs, b_strides, &rng);
  check_host(&g, "strided batch");
  case_free(&g);
}

/* ---- host: linear -------------------------------------------------------------------------- */

static void test_linear_every_activation_matches_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 3; ++d) {
    for (int act = RECAP_ACT_NONE; act <= RECAP_ACT_TANH; ++act) {
      for (int bias = 0; bias < 2; ++bias) {
        gcase g;
        const int64_t xs[2] = {7, 65};
        make_linear(&g, float_types[d], 2, xs, 33, bias, (recap_activation)act, &rng);
        check_host(&g, "linear activation");
        case_free(&g);
      }
    }
  }
}

static void test_linear_any_rank_of_x_matches_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  const int64_t x1[1] = {31}, x3[3] = {2, 3, 31}, x4[4] = {2, 1, 3, 31};
  const int64_t *shapes[3] = {x1, x3, x4};
  const int dims[3] = {1, 3, 4};
  for (int s = 0; s < 3; ++s) {
    gcase g;
    make_linear(&g, RECAP_DTYPE_F16, dims[s], shapes[s], 17, true, RECAP_ACT_RELU, &rng);
    check_host(&g, "linear rank");
    CU_ASSERT_EQUAL(g.call.outputs[0].ndim, dims[s]);
    CU_ASSERT_EQUAL(g.call.outputs[0].shape[dims[s] - 1], 17);
    case_free(&g);
  }
  /* x rows that no single stride steps through: [2, 3, K] with padded outer stride. */
  gcase g;
  case_init(&g, "linear", 2);
  const int64_t xs[3] = {2, 3, 10}, x_strides[3] = {40, 10, 1}, ws[2] = {6, 10};
  g.in[0] = tb_view(RECAP_DTYPE_F32, 3, xs, x_strides, &rng);
  g.in[1] = tb_make(RECAP_DTYPE_F32, 2, ws, &rng);
  check_host(&g, "linear strided x");
  case_free(&g);
}

/* The erf and tanh gelus are both right, and differ by what the formulas differ by (up to
 * ~5e-4 near |x| = 2), which f32 resolves easily. */
static void test_linear_gelu_erf_and_tanh_differ_as_expected(void) {
  test_rng rng;
  test_rng_init(&rng);
  gcase ge, gt;
  const int64_t xs[2] = {16, 64};
  make_linear(&ge, RECAP_DTYPE_F32, 2, xs, 48, true, RECAP_ACT_GELU, &rng);
  make_linear(&gt, RECAP_DTYPE_F32, 2, xs, 48, true, RECAP_ACT_GELU_TANH, &rng);
  /* The same data for both. */
  memcpy(gt.in[0].t.data, ge.in[0].t.data, ge.in[0].storage_elems * 4);
  memcpy(gt.in[1].t.data, ge.in[1].t.data, ge.in[1].storage_elems * 4);
  memcpy(gt.in[2].t.data, ge.in[2].t.data, ge.in[2].storage_elems * 4);
  check_host(&ge, "gelu erf");
  check_host(&gt, "gelu tanh");
  const float *oe = ge.call.outputs[0].data, *ot = gt.call.outputs[0].data;
  double max_diff = 0, max_mismatch = 0;
  for (int i = 0; i < 16 * 48; ++i) {
    const double d = (double)oe[i] - (double)ot[i];
    if (fabs(d) > max_diff) max_diff = fabs(d);
    const double mismatch = fabs(d - (ge.ref[i] - gt.ref[i]));
    if (mismatch > max_mismatch) max_mismatch = mismatch;
  }
  if (max_diff <= 1e-5) fprintf(stderr, "\n  gelu forms differ by only %g", max_diff);
  CU_ASSERT(max_diff > 1e-5);
  CU_ASSERT(max_diff < 1e-3);
  CU_ASSERT(max_mismatch < 1e-5);
  case_free(&ge);
  case_free(&gt);
}

/* ---- host: validation ---------------------------------------------------------------------- */

/* gemm.h: a linear's residual never shares memory with its output (every path but cuBLASLt's
 * writes the output before reading the residual); a call that breaks it is refused, naming
 * the residual. On CUDA the launch returns INVALID_ARGUMENT; on the host the check runs in
 * the host kernel, so it is a fault of the host device, as any failing kernel's (reset here
 * so that the suite's other tests still run). */
static void test_linear_residual_sharing_the_output_is_refused(void) {
  test_rng rng;
  test_rng_init(&rng);
  const int64_t xs[2] = {4, 8}, ws[2] = {6, 8}, n = 6, rs[2] = {4, 6};
  tbuf x = tb_make(RECAP_DTYPE_F32, 2, xs, &rng), w = tb_make(RECAP_DTYPE_F32, 2, ws, &rng);
  tbuf b = tb_make(RECAP_DTYPE_F32, 1, &n, &rng), r = tb_make(RECAP_DTYPE_F32, 2, rs, &rng);
  recap_op_call call = {.def = recap__op_find("linear"), .num_inputs = 4};
  recap__op_attrs_set_defaults(call.def, &call.attrs);
  call.inputs[0] = x.t;
  call.inputs[1] = w.t;
  call.inputs[2] = b.t;
  call.inputs[3] = r.t;
  CHECK_OK(recap__op_infer(&call));
  void *const outs[2] = {(float *)r.t.data + 2, r.t.data}; /* its tail; exactly it */
  for (int i = 0; i < 2; ++i) {
    call.outputs[0].data = outs[i];
    recap_status st = recap__op_launch(&call, host_stream);
    if (st == RECAP_OK) st = recap_stream_synchronize(host_stream);
    CU_ASSERT_NOT_EQUAL(st, RECAP_OK);
    CHECK_ERROR_MENTIONS("'residual' shares memory with the output");
    recap__host_backend_reset_fault_for_testing();
  }
  free(x.t.data);
  free(w.t.data);
  free(b.t.data);
  free(r.t.data);
}

static recap_status infer_with(const char *op, int nin, const recap_tensor *in,
                               const recap_op_attrs *attrs) {
  recap_op_call call = {.def = recap__op_find(op), .num_inputs = nin};
  recap__op_attrs_set_defaults(call.def, &call.attrs);
  if (attrs) call.attrs = *attrs;
  for (int i = 0; i < nin; ++i) call.inputs[i] = in[i];
  return recap__op_infer(&call);
}

static recap_tensor desc(recap_dtype dt, int ndim, int64_t s0, int64_t s1, int64_t s2) {
  recap_tensor t = {.dtype = dt, .ndim = ndim};
  const int64_t s[3] = {s0, s1, s2};
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    t.shape[d] = s[d];
    t.strides[d] = stride;
    stride *= s[d];
  }
  return t;
}

static void test_bad_shapes_and_dtypes_are_rejected(void) {
  const recap_dtype f32 = RECAP_DTYPE_F32;
  recap_tensor in[3];
  in[0] = desc(f32, 2, 4, 5, 0);
  in[1] = desc(f32, 2, 6, 3, 0);
  CHECK_STATUS(infer_with("matmul", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("inner dimensions differ");
  in[1] = desc(RECAP_DTYPE_F16, 2, 5, 3, 0);
  CHECK_STATUS(infer_with("matmul", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  in[0] = desc(RECAP_DTYPE_I32, 2, 4, 5, 0);
  in[1] = desc(RECAP_DTYPE_I32, 2, 5, 3, 0);
  CHECK_STATUS(infer_with("matmul", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("i32");
  /* Batch dims that do not broadcast. */
  in[0] = desc(f32, 3, 2, 4, 5);
  in[1] = desc(f32, 3, 3, 5, 6);
  CHECK_STATUS(infer_with("matmul", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("broadcast");
  /* beta without c, c without beta, c of the wrong shape. */
  in[0] = desc(f32, 2, 4, 5, 0);
  in[1] = desc(f32, 2, 5, 6, 0);
  recap_op_attrs attrs = {.alpha = 1, .beta = 1};
  CHECK_STATUS(infer_with("matmul", 2, in, &attrs), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("needs input 'c'");
  in[2] = desc(f32, 2, 4, 6, 0);
  attrs.beta = 0;
  CHECK_STATUS(infer_with("matmul", 3, in, &attrs), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("ignored");
  attrs.beta = 1;
  in[2] = desc(f32, 2, 6, 4, 0);
  CHECK_STATUS(infer_with("matmul", 3, in, &attrs), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("input 'c'");
  /* No unit stride in the matrix dims. */
  in[0] = desc(f32, 2, 4, 5, 0);
  in[0].strides[0] = 10;
  in[0].strides[1] = 2;
  CHECK_STATUS(infer_with("matmul", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("strides");
  /* A 1-D matmul operand. */
  in[0] = desc(f32, 1, 5, 0, 0);
  CHECK_STATUS(infer_with("matmul", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);

  /* linear: K mismatch, bias length, bias dtype, 3-D weight. */
  in[0] = desc(f32, 2, 4, 5, 0);
  in[1] = desc(f32, 2, 6, 7, 0);
  CHECK_STATUS(infer_with("linear", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("weight");
  in[1] = desc(f32, 2, 6, 5, 0);
  in[2] = desc(f32, 1, 5, 0, 0);
  CHECK_STATUS(infer_with("linear", 3, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("bias");
  in[2] = desc(RECAP_DTYPE_BF16, 1, 6, 0, 0);
  CHECK_STATUS(infer_with("linear", 3, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  in[1] = desc(f32, 3, 1, 6, 5);
  CHECK_STATUS(infer_with("linear", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  /* And the good case infers [4, 6]. */
  in[1] = desc(f32, 2, 6, 5, 0);
  in[2] = desc(f32, 1, 6, 0, 0);
  recap_op_call call = {.def = recap__op_find("linear"), .num_inputs = 3};
  for (int i = 0; i < 3; ++i) call.inputs[i] = in[i];
  CHECK_OK(recap__op_infer(&call));
  CU_ASSERT_EQUAL(call.outputs[0].ndim, 2);
  CU_ASSERT_EQUAL(call.outputs[0].shape[0], 4);
  CU_ASSERT_EQUAL(call.outputs[0].shape[1], 6);
}

static void test_library_switch_rejects_unknown_values(void) {
  CHECK_STATUS(recap__gemm_set_library((recap_gemm_library)7), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(recap__gemm_library(), RECAP_GEMM_LIBRARY_CUBLASLT);
  CU_ASSERT_FALSE(recap__gemm_allow_tf32());
}

static void test_public_switches_reach_the_gemm_module(void) {
  CU_ASSERT_FALSE(recap_gemm_allow_tf32());
  recap_gemm_set_allow_tf32(1);
  CU_ASSERT_TRUE(recap__gemm_allow_tf32());
  recap_gemm_set_allow_tf32(0);
  CU_ASSERT_FALSE(recap_gemm_allow_tf32());
  CHECK_OK(recap_gemm_set_library(RECAP_GEMM_LIBRARY_CUBLAS));
  CU_ASSERT_EQUAL(recap__gemm_library(), RECAP_GEMM_LIBRARY_CUBLAS);
  CHECK_STATUS(recap_gemm_set_library((recap_gemm_library)-1), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(recap_gemm_library_get(), RECAP_GEMM_LIBRARY_CUBLAS);
  CHECK_OK(recap_gemm_set_library(RECAP_GEMM_LIBRARY_CUBLASLT));
}

/* ---- CUDA ---------------------------------------------------------------------------------- */
#if RECAP_WITH_CUDA

static recap_stream *cuda_stream;

/* A device copy of a host case: inputs copied (their whole storage), output poisoned. */
typedef struct {
  recap_op_call call;
  void *dev[5]; /* the inputs, then the output */
} dcase;

static void dcase_make(const gcase *g, dcase *d) {
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
  CU_ASSERT_EQUAL_FATAL(cudaMemset(d->dev[4], 0xff, out_bytes), cudaSuccess); /* NaN */
  d->call.outputs[0].data = d->dev[4];
}

static void dcase_free(dcase *d) {
  for (int i = 0; i < 5; ++i) cudaFree(d->dev[i]);
}

/* Copies the device output back into a host tensor shaped like the host case's output. */
static recap_tensor dcase_result(const gcase *g, const dcase *d) {
  recap_tensor t = g->call.outputs[0];
  const size_t bytes = (size_t)recap__tensor_numel(&t) * recap_dtype_size(t.dtype);
  t.data = malloc(bytes);
  CU_ASSERT_EQUAL(cudaMemcpy(t.data, d->call.outputs[0].data, bytes, cudaMemcpyDeviceToHost),
                  cudaSuccess);
  return t;
}

static tolerance cuda_tol(recap_dtype dtype, bool tf32) {
  if (dtype == RECAP_DTYPE_F32) return (tolerance){1e-6, tf32 ? 2e-3 : 1e-4};
  return host_tol(dtype);
}

/* Runs the host case on CUDA and compares with the host implementation's output: both are
 * within tolerance of the reference, and within twice it of each other. */
static void check_cuda_against_host(gcase *g, bool tf32, const char *what) {
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
  for (int64_t e = 0; e < total; ++e)
    host_out[e] = recap__load_f32(g->call.outputs[0].data, dt, e);
  tol.atol *= 2;
  tol.rtol *= 2;
  CU_ASSERT_EQUAL(count_bad(&got, host_out, g->scale, tol, "cuda vs host"), 0);
  free(host_out);
  free(got.data);
  dcase_free(&d);
}

typedef void (*case_maker)(gcase *g, recap_dtype dt, test_rng *rng);

static void mk_odd(gcase *g, recap_dtype dt, test_rng *rng) {
  make_matmul(g, dt, 7, 33, 1023, 0, 0, false, rng);
}
static void mk_skinny(gcase *g, recap_dtype dt, test_rng *rng) {
  make_matmul(g, dt, 3, 1023, 257, 0, 1, false, rng);
}
static void mk_trans(gcase *g, recap_dtype dt, test_rng *rng) {
  make_matmul(g, dt, 33, 17, 65, 1, 1, false, rng);
}
static void mk_beta(gcase *g, recap_dtype dt, test_rng *rng) {
  make_matmul(g, dt, 13, 21, 34, 1, 0, true, rng);
}
static void mk_batched(gcase *g, recap_dtype dt, test_rng *rng) {
  case_init(g, "matmul", 3);
  g->call.attrs.trans_b = 1;
  g->call.attrs.alpha = -0.5;
  g->call.attrs.beta = 2.0;
  const int64_t a[4] = {3, 1, 4, 9}, b[4] = {1, 2, 7, 9}, c[4] = {3, 2, 4, 7};
  g->in[0] = tb_make(dt, 4, a, rng);
  g->in[1] = tb_make(dt, 4, b, rng);
  g->in[2] = tb_make(dt, 4, c, rng);
}
static void mk_strided_batch(gcase *g, recap_dtype dt, test_rng *rng) {
  case_init(g, "matmul", 2);
  const int64_t as[4] = {2, 3, 5, 8}, a_strides[4] = {160, 40, 8, 1};
  const int64_t bs[3] = {3, 8, 4}, b_strides[3] = {35, 4, 1};
  g->in[0] = tb_view(dt, 4, as, a_strides, rng);
  g->in[1] = tb_view(dt, 3, bs, b_strides, rng);
}
static void mk_linear_relu(gcase *g, recap_dtype dt, test_rng *rng) {
  const int64_t xs[3] = {2, 5, 96};
  make_linear(g, dt, 3, xs, 130, true, RECAP_ACT_RELU, rng);
}
static void mk_linear_gelu(gcase *g, recap_dtype dt, test_rng *rng) {
  const int64_t xs[2] = {9, 64};
  make_linear(g, dt, 2, xs, 72, true, RECAP_ACT_GELU, rng);
}
static void mk_linear_gelu_tanh(gcase *g, recap_dtype dt, test_rng *rng) {
  const int64_t xs[2] = {9, 64};
  make_linear(g, dt, 2, xs, 72, true, RECAP_ACT_GELU_TANH, rng);
}
static void mk_linear_silu_nobias(gcase *g, recap_dtype dt, test_rng *rng) {
  const int64_t xs[2] = {16, 40};
  make_linear(g, dt, 2, xs, 24, false, RECAP_ACT_SILU, rng);
}
/* Large enough for the Hopper kernel by default (f16/bf16, an activation cuBLASLt cannot fuse,
 * m over the skinny range), with partial tiles in every dimension and a residual. */
static void mk_linear_gelu_residual(gcase *g, recap_dtype dt, test_rng *rng) {
  const int64_t xs[2] = {200, 200}, rs[2] = {200, 136};
  make_linear(g, dt, 2, xs, 136, true, RECAP_ACT_GELU, rng);
  g->call.num_inputs = 4;
  g->in[3] = tb_make(dt, 2, rs, rng);
}

static const case_maker cuda_cases[] = {
    mk_odd,
    mk_skinny,
    mk_trans,
    mk_beta,
    mk_batched,
    mk_strided_batch,
    mk_linear_relu,
    mk_linear_gelu,
    mk_linear_gelu_tanh,
    mk_linear_silu_nobias,
    mk_linear_gelu_residual,
};

static void run_all_cuda_cases(const char *what) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 3; ++d) {
    for (size_t c = 0; c < sizeof cuda_cases / sizeof cuda_cases[0]; ++c) {
      gcase g;
      cuda_cases[c](&g, float_types[d], &rng);
      case_run_host(&g);
      check_cuda_against_host(&g, false, what);
      case_free(&g);
    }
  }
}

static void test_cuda_cublaslt_matches_host(void) {
  CHECK_OK(recap__gemm_set_library(RECAP_GEMM_LIBRARY_CUBLASLT));
  run_all_cuda_cases("cuBLASLt");
}

static void test_cuda_cublas_matches_host(void) {
  CHECK_OK(recap__gemm_set_library(RECAP_GEMM_LIBRARY_CUBLAS));
  run_all_cuda_cases("cuBLAS");
  CHECK_OK(recap__gemm_set_library(RECAP_GEMM_LIBRARY_CUBLASLT));
}

static void test_cuda_tf32_on_stays_within_tf32_tolerance(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (int lib = 0; lib < 2; ++lib) {
    CHECK_OK(recap__gemm_set_library((recap_gemm_library)lib));
    gcase g;
    make_matmul(&g, RECAP_DTYPE_F32, 64, 96, 1023, 0, 0, false, &rng);
    case_run_host(&g);
    recap__gemm_set_allow_tf32(true);
    check_cuda_against_host(&g, true, "tf32 on");
    recap__gemm_set_allow_tf32(false);
    check_cuda_against_host(&g, false, "tf32 off");
    case_free(&g);
  }
  CHECK_OK(recap__gemm_set_library(RECAP_GEMM_LIBRARY_CUBLASLT));
}

/* Captures one launch of d->call on `s` and returns the instantiated graph. */
static recap_status capture_once(recap_stream *s, recap_op_call *call, recap__graph_exec **exec) {
  recap__graph *graph = NULL;
  recap_status st = recap__capture_begin(s, RECAP_CAPTURE_MODE_THREAD_LOCAL);
  if (st != RECAP_OK) return st;
  const recap_status launched = recap__op_launch(call, s);
  char message[512];
  snprintf(message, sizeof message, "%s", recap_last_error());
  st = recap__capture_end(s, &graph);
  if (launched != RECAP_OK) {
    if (st == RECAP_OK) s->backend->graph_destroy(graph);
    recap__fail_plain(launched, "%s", message);
    return launched;
  }
  if (st != RECAP_OK) return st;
  st = s->backend->graph_instantiate(graph, exec);
  s->backend->graph_destroy(graph);
  return st;
}

static void test_cuda_captured_gemm_replays_identically(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (int lib = 0; lib < 2; ++lib) {
    CHECK_OK(recap__gemm_set_library((recap_gemm_library)lib));
    for (size_t c = 0; c < sizeof cuda_cases / sizeof cuda_cases[0]; ++c) {
      gcase g;
      cuda_cases[c](&g, RECAP_DTYPE_BF16, &rng);
      case_run_host(&g);
      dcase d;
      dcase_make(&g, &d);
      /* Warmup (eager), then the result to replay against. */
      CHECK_OK(recap__gemm_prepare(&d.call, cuda_stream));
      CHECK_OK(recap__op_launch(&d.call, cuda_stream));
      CHECK_OK(recap_stream_synchronize(cuda_stream));
      recap_tensor eager = dcase_result(&g, &d);
      recap__graph_exec *exec = NULL;
      CHECK_OK(capture_once(cuda_stream, &d.call, &exec));
      const size_t bytes = (size_t)recap__tensor_numel(&eager) * recap_dtype_size(eager.dtype);
      for (int replay = 0; replay < 3; ++replay) {
        CU_ASSERT_EQUAL(cudaMemset(d.call.outputs[0].data, 0xff, bytes), cudaSuccess);
        CHECK_OK(cuda_stream->backend->graph_launch(exec, cuda_stream));
        CHECK_OK(recap_stream_synchronize(cuda_stream));
        recap_tensor replayed = dcase_result(&g, &d);
        CU_ASSERT_EQUAL(memcmp(replayed.data, eager.data, bytes), 0);
        free(replayed.data);
      }
      cuda_stream->backend->graph_exec_destroy(exec);
      free(eager.data);
      dcase_free(&d);
      case_free(&g);
    }
  }
  CHECK_OK(recap__gemm_set_library(RECAP_GEMM_LIBRARY_CUBLASLT));
}

static void test_cuda_capture_without_warmup_fails_cleanly_then_works(void) {
  test_rng rng;
  test_rng_init(&rng);
  recap_stream *fresh = NULL;
  CHECK_OK(recap_stream_create((recap_device){RECAP_BACKEND_CUDA, 0}, 0,
                               RECAP_STREAM_NON_BLOCKING, &fresh));
  gcase g;
  make_matmul(&g, RECAP_DTYPE_F16, 37, 29, 45, 0, 1, false, &rng); /* a shape no test used */
  case_run_host(&g);
  dcase d;
  dcase_make(&g, &d);
  CU_ASSERT_PTR_NULL(recap__gemm_stream_workspace(recap_stream_native(fresh)));
  recap__graph_exec *exec = NULL;
  CHECK_STATUS(capture_once(fresh, &d.call, &exec), RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CHECK_ERROR_MENTIONS("run a warmup first");
  CU_ASSERT_EQUAL(recap__capture_count(), 0);
  /* After a prepare, the same capture works and replays the eager result. */
  CHECK_OK(recap__gemm_prepare(&d.call, fresh));
  CU_ASSERT_PTR_NOT_NULL(recap__gemm_stream_workspace(recap_stream_native(fresh)));
  CHECK_OK(capture_once(fresh, &d.call, &exec));
  CHECK_OK(fresh->backend->graph_launch(exec, fresh));
  CHECK_OK(recap_stream_synchronize(fresh));
  recap_tensor got = dcase_result(&g, &d);
  CU_ASSERT_EQUAL(count_bad(&got, g.ref, g.scale, cuda_tol(RECAP_DTYPE_F16, false), "replay"),
                  0);
  free(got.data);
  fresh->backend->graph_exec_destroy(exec);
  CHECK_OK(recap__gemm_release_stream(recap_stream_native(fresh)));
  CU_ASSERT_PTR_NULL(recap__gemm_stream_workspace(recap_stream_native(fresh)));
  CHECK_OK(recap_stream_destroy(fresh));
  dcase_free(&d);
  case_free(&g);
}

static void test_cuda_two_streams_use_different_workspaces(void) {
  test_rng rng;
  test_rng_init(&rng);
  recap_stream *s[2] = {NULL, NULL};
  for (int i = 0; i < 2; ++i)
    CHECK_OK(recap_stream_create((recap_device){RECAP_BACKEND_CUDA, 0}, 0,
                                 RECAP_STREAM_NON_BLOCKING, &s[i]));
  gcase g;
  make_matmul(&g, RECAP_DTYPE_F32, 64, 64, 64, 0, 0, false, &rng);
  case_run_host(&g);
  dcase d;
  dcase_make(&g, &d);
  for (int i = 0; i < 2; ++i) {
    CHECK_OK(recap__op_launch(&d.call, s[i])); /* lazily prepared: no capture under way */
    CHECK_OK(recap_stream_synchronize(s[i]));
  }
  void *w0 = recap__gemm_stream_workspace(recap_stream_native(s[0]));
  void *w1 = recap__gemm_stream_workspace(recap_stream_native(s[1]));
  CU_ASSERT_PTR_NOT_NULL(w0);
  CU_ASSERT_PTR_NOT_NULL(w1);
  CU_ASSERT_PTR_NOT_EQUAL(w0, w1);
  for (int i = 0; i < 2; ++i) {
    CHECK_OK(recap__gemm_release_stream(recap_stream_native(s[i])));
    CHECK_OK(recap_stream_destroy(s[i]));
  }
  dcase_free(&d);
  case_free(&g);
}

#if RECAP_WITH_CUDA
/* Whether a shared object whose path contains `name` is mapped into this process. */
static bool mapped(const char *name) {
  FILE *f = fopen("/proc/self/maps", "r");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  char line[4096];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, name) != NULL;
  fclose(f);
  return found;
}

/* cuBLAS and cuBLASLt (about 220 MB mapped) are opened on first use (kernels/gemm/cuda_blas.h),
 * not when the process starts: before this test nothing here has run a GEMM on a GPU or asked
 * the libraries' versions. Asking the versions opens them, with every function resolved.
 * Needs no GPU. */
static void test_cublas_is_mapped_only_once_it_is_needed(void) {
  CU_ASSERT_FALSE(mapped("libcublas"));
  recap_library_versions v;
  CHECK_OK(recap_library_versions_get(&v));
  CU_ASSERT_TRUE(mapped("libcublasLt.so."));
  CU_ASSERT_TRUE(mapped("libcublas.so."));
  /* Opened by the soname of the headers' major version (libcublas.so.<major>). */
  CU_ASSERT_EQUAL(v.cublas_version / 10000, CUBLAS_VER_MAJOR);
  CU_ASSERT_EQUAL(v.cublaslt_version / 10000, CUBLAS_VER_MAJOR);
}
#endif

static void test_cuda_blas_versions_are_reported(void) {
  recap_library_versions v;
  CHECK_OK(recap_library_versions_get(&v));
  CU_ASSERT(v.cublas_version >= 120000);
  CU_ASSERT(v.cublaslt_version >= 120000);
  /* The libraries are opened by soname (libcublas.so.<major>), so the versions they report
   * carry the major version of the headers this test was built with. */
  CU_ASSERT_EQUAL(v.cublas_version / 10000, CUBLAS_VER_MAJOR);
  CU_ASSERT_EQUAL(v.cublaslt_version / 10000, CUBLAS_VER_MAJOR);
}

/* ---- CUDA: the skinny kernel (gemm/skinny.cu) ---------------------------------------------- */

static const recap_dtype half_types[] = {RECAP_DTYPE_BF16, RECAP_DTYPE_F16};

/* Runs the case on CUDA with the skinny kernel allowed and, for comparison, with
 * RECAP_GEMM_SKINNY=0 (cuBLASLt); both must match the host. */
static void check_skinny_and_fallback(gcase *g, const char *what) {
  unsetenv("RECAP_GEMM_SKINNY");
  recap__gemm_env_reload();
  check_cuda_against_host(g, false, what);
  setenv("RECAP_GEMM_SKINNY", "0", 1);
  recap__gemm_env_reload(); /* the settings are read once; this reads them again */
  check_cuda_against_host(g, false, "skinny disabled (cuBLASLt)");
  unsetenv("RECAP_GEMM_SKINNY");
  recap__gemm_env_reload();
}

static void test_cuda_skinny_routing_accepts_only_shapes_it_supports(void) {
  test_rng rng;
  test_rng_init(&rng);
  gcase g;
  const int64_t xs[2] = {8, 64};
  make_linear(&g, RECAP_DTYPE_BF16, 2, xs, 40, true, RECAP_ACT_GELU, &rng);
  for (int i = 0; i < g.call.num_inputs; ++i) g.call.inputs[i] = g.in[i].t;
  CHECK_OK(recap__op_infer(&g.call));
  recap__gemm_plan plan, p;
  CHECK_OK(recap__gemm_plan_make(&g.call, &plan));
  CU_ASSERT_TRUE(recap__cuda_gemm_skinny_fits(&plan));
  p = plan, p.dtype = RECAP_DTYPE_F16;
  CU_ASSERT_TRUE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.m = 1;
  CU_ASSERT_TRUE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.m = 16;
  CU_ASSERT_TRUE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.m = 17;
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.dtype = RECAP_DTYPE_F32;
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.k = 4097, p.a_rs = 4097, p.b_cs = 4097; /* K % 8 != 0: rows not 16-byte aligned */
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.a_rs = 1, p.a_cs = 8; /* x transposed */
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.b_rs = 40, p.b_cs = 1; /* W stored [K, N] */
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.b = (const char *)plan.b + 2; /* misaligned weight */
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.batch[1] = 2, p.a_bs[1] = 8 * 64, p.out_bs[1] = 8 * 40;
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.c = plan.a, p.beta = 1.0f; /* any non-NULL c: beta * c would be dropped */
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  case_free(&g);
}

static void test_cuda_skinny_m_1_to_16_with_k_tail_matches_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 2; ++d) {
    for (int64_t m = 1; m <= 16; ++m) {
      /* n odd (a partial block of rows), k = 520: the last 32-wide step is a quarter full. */
      gcase g;
      const int64_t xs[2] = {m, 520};
      make_linear(&g, half_types[d], 2, xs, 257, true, RECAP_ACT_NONE, &rng);
      case_run_host(&g);
      check_skinny_and_fallback(&g, "skinny m 1..16");
      case_free(&g);
    }
  }
}

/* The decode shape itself (many blocks, every warp of a block busy), with an odd n. */
static void test_cuda_skinny_large_odd_n_matches_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  const int64_t ms[3] = {1, 8, 16};
  for (int i = 0; i < 3; ++i) {
    gcase g;
    const int64_t xs[2] = {ms[i], 4096};
    make_linear(&g, RECAP_DTYPE_BF16, 2, xs, 4095, true, RECAP_ACT_GELU, &rng);
    case_run_host(&g);
    check_cuda_against_host(&g, false, "skinny 4095 x 4096");
    case_free(&g);
  }
}

/* Shapes the kernel refuses (K % 8 != 0) still run, on cuBLASLt. */
static void test_cuda_skinny_refused_shapes_still_match_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  const int64_t shapes[2][3] = {{3, 4095, 4097}, {16, 33, 33}};
  for (int i = 0; i < 2; ++i) {
    gcase g;
    const int64_t xs[2] = {shapes[i][0], shapes[i][2]};
    make_linear(&g, RECAP_DTYPE_BF16, 2, xs, shapes[i][1], true, RECAP_ACT_SILU, &rng);
    case_run_host(&g);
    check_cuda_against_host(&g, false, "k % 8 != 0");
    case_free(&g);
  }
}

static void test_cuda_skinny_every_activation_with_and_without_bias_matches_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 2; ++d) {
    for (int act = RECAP_ACT_NONE; act <= RECAP_ACT_TANH; ++act) {
      for (int bias = 0; bias < 2; ++bias) {
        gcase g;
        const int64_t xs[2] = {7, 264};
        make_linear(&g, half_types[d], 2, xs, 131, bias, (recap_activation)act, &rng);
        case_run_host(&g);
        check_skinny_and_fallback(&g, "skinny activation");
        case_free(&g);
      }
    }
  }
}

/* matmul with trans_b is the same layout; alpha scales the product. */
static void test_cuda_skinny_matmul_trans_b_with_alpha_matches_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 2; ++d) {
    gcase g;
    make_matmul(&g, half_types[d], 12, 100, 96, 0, 1, false, &rng);
    g.call.attrs.alpha = -0.75;
    case_run_host(&g);
    check_skinny_and_fallback(&g, "skinny matmul");
    case_free(&g);
  }
}

/* Every launch configuration of the skinny kernel, not only the one the routing picks: pipes
 * 0 and 1 (the register kernel, one and two buffers) and 2 and 3 (the bulk-copy shapes; run as
 * pipe 1 before Hopper) with 1 to 16 warps, at m = 1, 5, 9 and 16 (one and two 8-row tiles of
 * x), n = 257 (a partial last block) and k = 520 (a partial stage and step, shorter than the
 * L2 prefetch) or 1560 (several stages, wrapping the ring). The output starts as NaN each
 * time, so an element a configuration leaves unwritten shows. */
static void test_cuda_skinny_every_configuration_matches_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  const int64_t ms[4] = {1, 5, 9, 16}, ks[2] = {520, 1560};
  const int warps[4] = {1, 4, 8, 16};
  for (size_t d = 0; d < 2; ++d) {
    for (int mi = 0; mi < 4; ++mi) {
      for (int ki = 0; ki < 2; ++ki) {
        gcase g;
        const int64_t xs[2] = {ms[mi], ks[ki]};
        make_linear(&g, half_types[d], 2, xs, 257, true, RECAP_ACT_GELU, &rng);
        case_run_host(&g);
        dcase dc;
        dcase_make(&g, &dc);
        recap__gemm_plan plan;
        CHECK_OK(recap__gemm_plan_make(&dc.call, &plan));
        CU_ASSERT_TRUE(recap__cuda_gemm_skinny_fits(&plan));
        const size_t bytes = (size_t)recap__tensor_numel(&g.call.outputs[0]) *
                             recap_dtype_size(half_types[d]);
        for (int pipe = 0; pipe <= 3; ++pipe) {
          for (int wi = 0; wi < 4; ++wi) {
            CU_ASSERT_EQUAL(cudaMemset(dc.call.outputs[0].data, 0xff, bytes), cudaSuccess);
            CHECK_OK(recap__cuda_gemm_skinny_config(&plan, 0, recap_stream_native(cuda_stream),
                                                    warps[wi], pipe));
            CHECK_OK(recap_stream_synchronize(cuda_stream));
            recap_tensor got = dcase_result(&g, &dc);
            char what[96];
            snprintf(what, sizeof what, "skinny pipe %d, %d warps, m %lld, k %lld", pipe,
                     warps[wi], (long long)ms[mi], (long long)ks[ki]);
            CU_ASSERT_EQUAL(count_bad(&got, g.ref, g.scale, cuda_tol(half_types[d], false),
                                      what), 0);
            free(got.data);
          }
        }
        dcase_free(&dc);
        case_free(&g);
      }
    }
  }
}

/* A chain of skinny layers, each reading the previous one's output, launched back to back
 * (the kernel lets its successor start early and must make it wait for its output): eagerly
 * against the host layer by layer, then captured and replayed bit for bit. Every output
 * starts as NaN, so a layer that read its input too early shows. */
static void test_cuda_skinny_chain_eager_and_replayed_matches_host(void) {
  enum { LAYERS = 4, M = 8, H = 1024 };
  test_rng rng;
  test_rng_init(&rng);
  gcase g[LAYERS];
  dcase d[LAYERS];
  const int64_t xs[2] = {M, H};
  for (int i = 0; i < LAYERS; ++i) {
    make_linear(&g[i], RECAP_DTYPE_BF16, 2, xs, H, true, RECAP_ACT_GELU, &rng);
    for (int j = 0; j < g[i].call.num_inputs; ++j) g[i].call.inputs[j] = g[i].in[j].t;
    CHECK_OK(recap__op_infer(&g[i].call));
    dcase_make(&g[i], &d[i]);
    if (i > 0) d[i].call.inputs[0].data = d[i - 1].call.outputs[0].data;
  }
  for (int i = 0; i < LAYERS; ++i) CHECK_OK(recap__gemm_prepare(&d[i].call, cuda_stream));
  for (int i = 0; i < LAYERS; ++i) CHECK_OK(recap__op_launch(&d[i].call, cuda_stream));
  CHECK_OK(recap_stream_synchronize(cuda_stream));
  recap_tensor eager[LAYERS];
  for (int i = 0; i < LAYERS; ++i) {
    eager[i] = dcase_result(&g[i], &d[i]);
    /* Layer i's host input is what layer i - 1 produced on the device. */
    if (i > 0)
      memcpy(g[i].in[0].t.data, eager[i - 1].data,
             (size_t)M * H * recap_dtype_size(RECAP_DTYPE_BF16));
    case_run_host(&g[i]);
    CU_ASSERT_EQUAL(count_bad(&eager[i], g[i].ref, g[i].scale,
                              cuda_tol(RECAP_DTYPE_BF16, false), "skinny chain"), 0);
  }

  recap__graph *graph = NULL;
  recap__graph_exec *exec = NULL;
  CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  recap_status launched = RECAP_OK;
  for (int i = 0; i < LAYERS && launched == RECAP_OK; ++i)
    launched = recap__op_launch(&d[i].call, cuda_stream);
  CHECK_OK(recap__capture_end(cuda_stream, &graph));
  CHECK_OK(launched);
  CHECK_OK(cuda_stream->backend->graph_instantiate(graph, &exec));
  cuda_stream->backend->graph_destroy(graph);
  const size_t bytes = (size_t)M * H * recap_dtype_size(RECAP_DTYPE_BF16);
  for (int replay = 0; replay < 3; ++replay) {
    for (int i = 0; i < LAYERS; ++i)
      CU_ASSERT_EQUAL(cudaMemset(d[i].call.outputs[0].data, 0xff, bytes), cudaSuccess);
    CHECK_OK(cuda_stream->backend->graph_launch(exec, cuda_stream));
    CHECK_OK(recap_stream_synchronize(cuda_stream));
    for (int i = 0; i < LAYERS; ++i) {
      recap_tensor replayed = dcase_result(&g[i], &d[i]);
      CU_ASSERT_EQUAL(memcmp(replayed.data, eager[i].data, bytes), 0);
      free(replayed.data);
    }
  }
  cuda_stream->backend->graph_exec_destroy(exec);
  for (int i = 0; i < LAYERS; ++i) {
    free(eager[i].data);
    dcase_free(&d[i]);
    case_free(&g[i]);
  }
}

/* ---- the Hopper kernel (gemm/hopper.cu) ---- */

/* Whether device 0 runs the Hopper kernel (compute capability 9.0); the tests below check
 * the routing either way and the kernel itself where it can run. */
static bool device_is_hopper(void) {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major == 9 && minor == 0;
}

static void test_cuda_hopper_routing_accepts_only_shapes_it_supports(void) {
  test_rng rng;
  test_rng_init(&rng);
  gcase g;
  const int64_t xs[2] = {256, 64};
  make_linear(&g, RECAP_DTYPE_F16, 2, xs, 128, true, RECAP_ACT_GELU, &rng);
  for (int i = 0; i < g.call.num_inputs; ++i) g.call.inputs[i] = g.in[i].t;
  CHECK_OK(recap__op_infer(&g.call));
  recap__gemm_plan plan, p;
  CHECK_OK(recap__gemm_plan_make(&g.call, &plan));
  plan.a = plan.b = plan.out = NULL, plan.bias = NULL; /* host pointers: check the shape only */
  const bool hopper = device_is_hopper();
  CU_ASSERT_EQUAL(recap__cuda_gemm_hopper_fits(&plan, 0), hopper);
  p = plan, p.dtype = RECAP_DTYPE_BF16;
  CU_ASSERT_EQUAL(recap__cuda_gemm_hopper_fits(&p, 0), hopper);
  p = plan, p.m = 1, p.n = 8, p.k = 8, p.a_rs = 8, p.b_cs = 8; /* partial tiles everywhere */
  CU_ASSERT_EQUAL(recap__cuda_gemm_hopper_fits(&p, 0), hopper);
  p = plan, p.dtype = RECAP_DTYPE_F32;
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  p = plan, p.k = 60, p.a_rs = 60, p.b_cs = 60; /* rows not 16-byte multiples: no TMA */
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  p = plan, p.n = 130; /* the epilogue stores 16-byte chunks */
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  p = plan, p.a_rs = 1, p.a_cs = 256; /* x transposed */
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  p = plan, p.b_rs = 128, p.b_cs = 1; /* W stored [K, N] */
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  p = plan, p.a = (const char *)g.in[0].t.data + 2; /* misaligned x */
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  p = plan, p.batch[1] = 2, p.a_bs[1] = 256 * 64, p.out_bs[1] = 256 * 128;
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  p = plan, p.c = g.in[0].t.data, p.beta = 1.0f;
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&plan, 99)); /* no such device */
  CU_ASSERT_TRUE(recap__cuda_gemm_hopper_configs() > 0);
  case_free(&g);
}

/* Every tile configuration against the host on both 16-bit types: a shape with partial tiles
 * in m, n and k (and k shorter than one stage), and one whose k wraps the ring several times;
 * every activation, with and without bias, with a residual; and a matmul with b transposed and
 * alpha != 1. The output starts as NaN each time, so an element a configuration leaves
 * unwritten shows. */
static void test_cuda_hopper_every_configuration_matches_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  if (!device_is_hopper()) {
    /* Elsewhere the launcher must refuse every configuration rather than launch sm_90a code. */
    fprintf(stderr, "  (device 0 is not compute capability 9.0: the launcher must refuse)\n");
    gcase g;
    const int64_t xs[2] = {256, 64};
    make_linear(&g, RECAP_DTYPE_F16, 2, xs, 128, true, RECAP_ACT_GELU, &rng);
    case_run_host(&g);
    dcase dc;
    dcase_make(&g, &dc);
    recap__gemm_plan plan;
    CHECK_OK(recap__gemm_plan_make(&dc.call, &plan));
    for (int config = 0; config < recap__cuda_gemm_hopper_configs(); ++config)
      CU_ASSERT_EQUAL(recap__cuda_gemm_hopper(&plan, 0, recap_stream_native(cuda_stream), config),
                      RECAP_STATUS_INVALID_ARGUMENT);
    dcase_free(&dc);
    case_free(&g);
    return;
  }
  static const int64_t shapes[][3] = {{200, 136, 40}, {300, 520, 1096}};
  static const recap_activation acts[] = {RECAP_ACT_GELU,     RECAP_ACT_NONE, RECAP_ACT_SILU,
                                          RECAP_ACT_TANH,     RECAP_ACT_RELU, RECAP_ACT_SIGMOID,
                                          RECAP_ACT_GELU_TANH};
  enum { ACTS = sizeof acts / sizeof acts[0] };
  for (size_t d = 0; d < 2; ++d) {
    for (int si = 0; si < 2; ++si) {
      for (int ai = 0; ai <= ACTS; ++ai) {
        const int64_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
        gcase g;
        const int64_t xs[2] = {m, k}, rs[2] = {m, n};
        if (ai == ACTS) { /* matmul, b [n, k] transposed, alpha 0.75 */
          make_matmul(&g, half_types[d], m, n, k, 0, 1, false, &rng);
          g.call.attrs.alpha = 0.75;
        } else {
          make_linear(&g, half_types[d], 2, xs, n, ai != 2, acts[ai], &rng);
        }
        if (ai == 0) { /* gelu with a residual */
          g.call.num_inputs = 4;
          g.in[3] = tb_make(half_types[d], 2, rs, &rng);
        }
        case_run_host(&g);
        dcase dc;
        dcase_make(&g, &dc);
        recap__gemm_plan plan;
        CHECK_OK(recap__gemm_plan_make(&dc.call, &plan));
        CU_ASSERT_TRUE_FATAL(recap__cuda_gemm_hopper_fits(&plan, 0));
        const size_t bytes = (size_t)(m * n) * recap_dtype_size(half_types[d]);
        for (int config = 0; config < recap__cuda_gemm_hopper_configs(); ++config) {
          CU_ASSERT_EQUAL(cudaMemset(dc.call.outputs[0].data, 0xff, bytes), cudaSuccess);
          CHECK_OK(recap__cuda_gemm_hopper(&plan, 0, recap_stream_native(cuda_stream), config));
          CHECK_OK(recap_stream_synchronize(cuda_stream));
          recap_tensor got = dcase_result(&g, &dc);
          char what[112];
          snprintf(what, sizeof what, "hopper config %d, %s, %lld x %lld x %lld, case %d", config,
                   recap_dtype_name(half_types[d]), (long long)m, (long long)n, (long long)k, ai);
          CU_ASSERT_EQUAL(count_bad(&got, g.ref, g.scale, cuda_tol(half_types[d], false), what), 0);
          free(got.data);
        }
        CU_ASSERT_EQUAL(recap__cuda_gemm_hopper(&plan, 0, recap_stream_native(cuda_stream),
                                                recap__cuda_gemm_hopper_configs()),
                        RECAP_STATUS_INVALID_ARGUMENT);
        dcase_free(&dc);
        case_free(&g);
      }
    }
  }
}

/* The default routing sends a gelu linear to the Hopper kernel and RECAP_GEMM_HOPPER=0 sends
 * it to cuBLASLt plus the epilogue pass; both match the host. */
static void test_cuda_hopper_default_and_disabled_match_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 2; ++d) {
    gcase g;
    mk_linear_gelu_residual(&g, half_types[d], &rng);
    case_run_host(&g);
    check_cuda_against_host(&g, false, "default routing");
    setenv("RECAP_GEMM_HOPPER", "0", 1);
    recap__gemm_env_reload();
    check_cuda_against_host(&g, false, "RECAP_GEMM_HOPPER=0 (cuBLASLt)");
    unsetenv("RECAP_GEMM_HOPPER");
    recap__gemm_env_reload();
    case_free(&g);
  }
}

static int cuda_suite_init(void) {
  if (host_stream_open()) return 1;
  if (recap_stream_create((recap_device){RECAP_BACKEND_CUDA, 0}, 0, RECAP_STREAM_NON_BLOCKING,
                          &cuda_stream) != RECAP_OK) {
    host_stream_close(); /* CUnit runs no cleanup after a failed init */
    return 1;
  }
  return 0;
}

static int cuda_suite_cleanup(void) {
  int failed = 0;
  if (cuda_stream && recap__gemm_release_stream(recap_stream_native(cuda_stream)) != RECAP_OK)
    failed = 1;
  if (recap_stream_destroy(cuda_stream) != RECAP_OK) failed = 1;
  cuda_stream = NULL;
  return host_stream_close() || failed;
}
#endif /* RECAP_WITH_CUDA */

static int host_suite_init(void) { return host_stream_open(); }

static int host_suite_cleanup(void) { return host_stream_close(); }

int main(void) {
#if RECAP_WITH_CUDA
  /* First: it checks that nothing before it opened cuBLAS. */
  CU_pSuite loading = test_add_suite("gemm/cublas loading", NULL, NULL);
  CU_ADD_TEST(loading, test_cublas_is_mapped_only_once_it_is_needed);
#endif
  CU_pSuite host = test_add_suite("gemm/host", host_suite_init, host_suite_cleanup);
  CU_ADD_TEST(host, test_matmul_odd_shapes_match_reference);
  CU_ADD_TEST(host, test_matmul_skinny_m_1_to_16_matches_reference);
  CU_ADD_TEST(host, test_matmul_transposes_match_reference);
  CU_ADD_TEST(host, test_matmul_column_major_views_match_reference);
  CU_ADD_TEST(host, test_matmul_alpha_beta_with_c_match_reference);
  CU_ADD_TEST(host, test_matmul_in_place_on_c_matches_reference);
  CU_ADD_TEST(host, test_matmul_batched_with_broadcast_matches_reference);
  CU_ADD_TEST(host, test_matmul_strided_batch_view_matches_reference);
  CU_ADD_TEST(host, test_linear_every_activation_matches_reference);
  CU_ADD_TEST(host, test_linear_any_rank_of_x_matches_reference);
  CU_ADD_TEST(host, test_linear_gelu_erf_and_tanh_differ_as_expected);
  CU_ADD_TEST(host, test_linear_residual_sharing_the_output_is_refused);
  CU_ADD_TEST(host, test_bad_shapes_and_dtypes_are_rejected);
  CU_ADD_TEST(host, test_library_switch_rejects_unknown_values);
  CU_ADD_TEST(host, test_public_switches_reach_the_gemm_module);

  CU_pSuite cuda = test_add_cuda_suite("gemm/cuda",
#if RECAP_WITH_CUDA
                                       cuda_suite_init, cuda_suite_cleanup);
  CU_ADD_TEST(cuda, test_cuda_cublaslt_matches_host);
  CU_ADD_TEST(cuda, test_cuda_cublas_matches_host);
  CU_ADD_TEST(cuda, test_cuda_tf32_on_stays_within_tf32_tolerance);
  CU_ADD_TEST(cuda, test_cuda_captured_gemm_replays_identically);
  CU_ADD_TEST(cuda, test_cuda_capture_without_warmup_fails_cleanly_then_works);
  CU_ADD_TEST(cuda, test_cuda_two_streams_use_different_workspaces);
  CU_ADD_TEST(cuda, test_cuda_blas_versions_are_reported);
  CU_ADD_TEST(cuda, test_cuda_skinny_routing_accepts_only_shapes_it_supports);
  CU_ADD_TEST(cuda, test_cuda_skinny_m_1_to_16_with_k_tail_matches_host);
  CU_ADD_TEST(cuda, test_cuda_skinny_large_odd_n_matches_host);
  CU_ADD_TEST(cuda, test_cuda_skinny_refused_shapes_still_match_host);
  CU_ADD_TEST(cuda, test_cuda_skinny_every_activation_with_and_without_bias_matches_host);
  CU_ADD_TEST(cuda, test_cuda_skinny_matmul_trans_b_with_alpha_matches_host);
  CU_ADD_TEST(cuda, test_cuda_skinny_every_configuration_matches_host);
  CU_ADD_TEST(cuda, test_cuda_skinny_chain_eager_and_replayed_matches_host);
  CU_ADD_TEST(cuda, test_cuda_hopper_routing_accepts_only_shapes_it_supports);
  CU_ADD_TEST(cuda, test_cuda_hopper_every_configuration_matches_host);
  CU_ADD_TEST(cuda, test_cuda_hopper_default_and_disabled_match_host);
#else
                                       NULL, NULL);
  (void)cuda;
#endif
  return test_run_all();
}
