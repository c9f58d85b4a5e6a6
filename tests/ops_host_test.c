/*
 * ops_host_test.c: every non-GEMM op on the host backend against a float64 reference.
 *
 * Each test draws fresh random inputs (never zeros; seed printed, RECAP_TEST_SEED replays),
 * includes odd shapes (1, 7, 1023) and strided views, runs the op through recap__op_launch
 * on a host stream, and checks EVERY output element with |out - ref| <= atol + rtol * scale
 * (scale: the sum of |terms| for reductions, else |ref|), per output dtype. Outputs are
 * poisoned with NaN first, so an element the op does not write fails. The references below
 * are written from the ops' definitions and share no code with kernels/host/ (f16/bf16 are
 * decoded here with ldexp, not kernels/half.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/half.h"
#include "kernels/op.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/error.h"
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

static void free_tracked(void) {
  for (int i = 0; i < num_tracked; ++i) free(tracked[i]);
  num_tracked = 0;
}

static void *track(size_t bytes) {
  CU_ASSERT_FATAL(num_tracked < MAX_TRACKED);
  void *p = malloc(bytes ? bytes : 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  tracked[num_tracked++] = p;
  return p;
}

/* ---- element encoding, independent of kernels/half.h ---- */

static double f16_decode(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

/* Truncates |v| < 65504 to an f16 (the test only stores values it then reads back). */
static uint16_t f16_truncate(double v) {
  uint16_t sign = v < 0 ? 0x8000 : 0;
  double a = fabs(v);
  if (a < ldexp(1, -14)) return sign | (uint16_t)floor(a * ldexp(1, 24));
  int e;
  double f = frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
  return sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)floor((2 * f - 1) * 1024);
}

static double bf16_decode(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static uint16_t bf16_truncate(double v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return (uint16_t)(u >> 16);
}

static double decode(recap_dtype dt, const void *base, int64_t offset) {
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

static void encode(recap_dtype dt, void *base, int64_t offset, double v) {
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

static size_t esize(recap_dtype dt) {
  return dt == RECAP_DTYPE_F16 || dt == RECAP_DTYPE_BF16 ? 2 : dt == RECAP_DTYPE_I64 ? 8 : 4;
}

static int64_t numel(const recap_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; ++d) n *= t->shape[d];
  return n;
}

/* Fills n elements of raw storage with NaN (or a sentinel for integers). */
static void poison(recap_dtype dt, void *base, int64_t n) {
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
static recap_tensor tensor(recap_dtype dt, int ndim, const int64_t *shape, layout lay) {
  recap_tensor t = {.dtype = dt, .ndim = ndim};
  for (int d = 0; d < ndim; ++d) t.shape[d] = shape[d];
  int64_t storage[RECAP_MAX_DIMS];
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

static int64_t offset_of(const recap_tensor *t, int64_t k) {
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0; --d) {
    off += (k % t->shape[d]) * t->strides[d];
    k /= t->shape[d];
  }
  return off;
}

/* Element k in row-major order over the view's shape. */
static double get(const recap_tensor *t, int64_t k) {
  return decode(t->dtype, t->data, offset_of(t, k));
}

static void set(recap_tensor *t, int64_t k, double v) {
  encode(t->dtype, t->data, offset_of(t, k), v);
}

/* Uniform in [lo, hi), away from 0 by at least 1e-3 in magnitude (never zeros). */
static double draw(test_rng *rng, double lo, double hi) {
  for (;;) {
    double v = test_rng_uniform(rng, lo, hi);
    if (fabs(v) >= 1e-3) return v;
  }
}

static recap_tensor random_tensor(test_rng *rng, recap_dtype dt, int ndim, const int64_t *shape,
                                  layout lay, double lo, double hi) {
  recap_tensor t = tensor(dt, ndim, shape, lay);
  for (int64_t k = 0; k < numel(&t); ++k) set(&t, k, draw(rng, lo, hi));
  return t;
}

static double *doubles(int64_t n) {
  return track((size_t)n * sizeof(double));
}

/* ---- tolerances and the check ---- */

static double rtol_of(recap_dtype dt) {
  return dt == RECAP_DTYPE_F32    ? 1e-5
         : dt == RECAP_DTYPE_F16  ? 1e-3
         : dt == RECAP_DTYPE_BF16 ? 8e-3
                                  : 0;
}

/* f16 alone has subnormals in the value ranges tested (tiny softmax probabilities): half of
 * its smallest step. Other types: no absolute slack. */
static double atol_of(recap_dtype dt) {
  return dt == RECAP_DTYPE_F16 ? ldexp(1, -25) : 0;
}

/* Checks every element of out (row-major) against ref; scale NULL means |ref|. */
static void check(const char *what, const recap_tensor *out, const double *ref,
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

static recap_op_call new_call(const char *op) {
  recap_op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find(op);
  if (!call.def) fprintf(stderr, "\n  %s\n", recap_last_error());
  CU_ASSERT_PTR_NOT_NULL_FATAL(call.def);
  recap__op_attrs_set_defaults(call.def, &call.attrs);
  return call;
}

static void add_input(recap_op_call *call, recap_tensor t) {
  call->inputs[call->num_inputs++] = t;
}

/* Infers, binds poisoned contiguous outputs, launches on the host stream. */
static void run(recap_op_call *call) {
  CHECK_OK(recap__op_infer(call));
  for (int o = 0; o < call->num_outputs; ++o) {
    recap_tensor *out = &call->outputs[o];
    out->data = track((size_t)numel(out) * esize(out->dtype));
    poison(out->dtype, out->data, numel(out));
  }
  CHECK_OK(recap__op_launch(call, stream));
}

static void set_sizes(recap_op_attrs *a, int n, const int64_t *sizes) {
  a->num_sizes = n;
  for (int i = 0; i < n; ++i) a->sizes[i] = sizes[i];
}

/* ---- half.h conversions: every f16/bf16 value round-trips and midpoints tie to even ---- */

static void test_half_conversions_round_to_nearest_even(void) {
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    double v = f16_decode((uint16_t)h);
    if (isnan(v)) {
      bad += !isnan(recap__f16_to_f32((uint16_t)h));
      continue;
    }
    bad += recap__f16_to_f32((uint16_t)h) != v;
    bad += recap__f32_to_f16((float)v) != h;
    /* The midpoint to the next larger magnitude (exact in float) rounds to the even one. */
    if ((h & 0x7fff) < 0x7bff) {
      double next = f16_decode((uint16_t)(h + 1));
      uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
      bad += recap__f32_to_f16((float)((v + next) / 2)) != even;
    }
    double bv = bf16_decode((uint16_t)h);
    if (!isnan(bv)) {
      bad += recap__bf16_to_f32((uint16_t)h) != bv;
      bad += recap__f32_to_bf16((float)bv) != h;
      if ((h & 0x7fff) < 0x7f7f) {
        double next = bf16_decode((uint16_t)(h + 1));
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        bad += recap__f32_to_bf16((float)((bv + next) / 2)) != even;
      }
    }
  }
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT_EQUAL(recap__f32_to_f16(65520.0f), 0x7c00); /* rounds past the largest: inf */
  CU_ASSERT_EQUAL(recap__f32_to_f16(65519.0f), 0x7bff);
  CU_ASSERT_EQUAL(recap__f32_to_f16(ldexpf(1, -25)), 0);    /* tie to even: 0 */
  CU_ASSERT_EQUAL(recap__f32_to_f16(ldexpf(1.5f, -25)), 1); /* above the tie */
  CU_ASSERT_TRUE(isnan(recap__f16_to_f32(recap__f32_to_f16(NAN))));
  CU_ASSERT_TRUE(isnan(recap__bf16_to_f32(recap__f32_to_bf16(NAN))));
  CU_ASSERT_EQUAL(recap__f32_to_bf16(INFINITY), 0x7f80);
}

/* ---- unary ---- */

static double unary_ref(const char *op, double x, double s) {
  if (!strcmp(op, "relu")) return x > 0 ? x : 0;
  if (!strcmp(op, "gelu")) return x * (1 + erf(x / sqrt(2.0))) / 2;
  if (!strcmp(op, "gelu_tanh"))
    return x * (1 + tanh(sqrt(2 / acos(-1.0)) * (x + 0.044715 * pow(x, 3)))) / 2;
  if (!strcmp(op, "silu")) return x / (1 + exp(-x));
  if (!strcmp(op, "sigmoid")) return 1 / (1 + exp(-x));
  if (!strcmp(op, "tanh")) return tanh(x);
  if (!strcmp(op, "exp")) return exp(x);
  if (!strcmp(op, "neg")) return -x;
  if (!strcmp(op, "scale")) return s * x;
  return x; /* cast */
}

static void test_unary_ops_match_reference(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  static const char *ops[] = {"relu", "gelu", "gelu_tanh", "silu",  "sigmoid",
                              "tanh", "exp",  "neg",       "scale", "cast"};
  struct {
    int ndim;
    int64_t shape[4];
    layout lay;
  } cases[] = {{1, {1}, CONTIGUOUS},   {1, {7}, CONTIGUOUS},     {1, {1023}, CONTIGUOUS},
               {3, {3, 5, 7}, PADDED}, {2, {13, 7}, TRANSPOSED}, {4, {2, 3, 4, 5}, CONTIGUOUS}};
  for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o)
    for (size_t dt = 0; dt < 3; ++dt)
      for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        recap_op_call call = new_call(ops[o]);
        recap_tensor x = random_tensor(&rng, float_types[dt], cases[c].ndim, cases[c].shape,
                                       cases[c].lay, -3, 3);
        add_input(&call, x);
        call.attrs.scale = draw(&rng, -2, 2);
        call.attrs.dtype = float_types[(dt + 1) % 3]; /* cast: to another float type */
        run(&call);
        int64_t n = numel(&x);
        double *ref = doubles(n);
        for (int64_t k = 0; k < n; ++k) ref[k] = unary_ref(ops[o], get(&x, k), call.attrs.scale);
        char what[64];
        snprintf(what, sizeof what, "%s case %zu", ops[o], c);
        CU_ASSERT_EQUAL(call.outputs[0].dtype,
                        strcmp(ops[o], "cast") ? float_types[dt] : float_types[(dt + 1) % 3]);
        check(what, &call.outputs[0], ref, NULL);
      }
}

static void test_unary_runs_in_place(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  recap_op_call call = new_call("silu");
  CU_ASSERT_EQUAL(call.def->in_place_input, 0);
  recap_tensor x = random_tensor(&rng, RECAP_DTYPE_F32, SHAPE(7, 1023), CONTIGUOUS, -3, 3);
  double *ref = doubles(numel(&x));
  for (int64_t k = 0; k < numel(&x); ++k) ref[k] = unary_ref("silu", get(&x, k), 0);
  add_input(&call, x);
  CHECK_OK(recap__op_infer(&call));
  call.outputs[0].data = x.data;
  CHECK_OK(recap__op_launch(&call, stream));
  check("silu in place", &call.outputs[0], ref, NULL);
}

/* ---- binary with broadcasting ---- */

static void test_binary_ops_broadcast_and_match_reference(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  static const char *ops[] = {"add", "sub", "mul", "div"};
  struct {
    int na, nb;
    int64_t a[4], b[4];
    layout la, lb;
  } cases[] = {
      {2, 1, {3, 4}, {4}, CONTIGUOUS, CONTIGUOUS},
      {3, 2, {2, 1, 5}, {3, 1}, CONTIGUOUS, PADDED},
      {1, 2, {1}, {7, 3}, CONTIGUOUS, TRANSPOSED},
      {1, 1, {1023}, {1023}, CONTIGUOUS, CONTIGUOUS},
      {4, 4, {2, 3, 4, 5}, {2, 1, 4, 1}, TRANSPOSED, CONTIGUOUS},
      {2, 2, {7, 1}, {1, 1023}, CONTIGUOUS, CONTIGUOUS},
  };
  for (size_t o = 0; o < 4; ++o)
    for (size_t dt = 0; dt < 3; ++dt)
      for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        recap_op_call call = new_call(ops[o]);
        recap_tensor a =
            random_tensor(&rng, float_types[dt], cases[c].na, cases[c].a, cases[c].la, -3, 3);
        recap_tensor b = tensor(float_types[dt], cases[c].nb, cases[c].b, cases[c].lb);
        /* Divisors away from zero: magnitudes in [0.5, 2). */
        for (int64_t k = 0; k < numel(&b); ++k)
          set(&b, k, (test_rng_next(&rng) & 1 ? 1 : -1) * test_rng_uniform(&rng, 0.5, 2));
        add_input(&call, a);
        add_input(&call, b);
        run(&call);
        const recap_tensor *out = &call.outputs[0];
        int64_t n = numel(out);
        double *ref = doubles(n), *scale = doubles(n);
        for (int64_t k = 0; k < n; ++k) {
          /* Unravel k over the output, then read a and b right-aligned, size-1 dims at 0. */
          int64_t idx[4], rest = k, ka = 0, kb = 0;
          for (int d = out->ndim - 1; d >= 0; --d) {
            idx[d] = rest % out->shape[d];
            rest /= out->shape[d];
          }
          for (int d = 0; d < a.ndim; ++d) {
            int64_t i = idx[d + out->ndim - a.ndim];
            ka = ka * a.shape[d] + (a.shape[d] == 1 ? 0 : i);
          }
          for (int d = 0; d < b.ndim; ++d) {
            int64_t i = idx[d + out->ndim - b.ndim];
            kb = kb * b.shape[d] + (b.shape[d] == 1 ? 0 : i);
          }
          double x = get(&a, ka), y = get(&b, kb);
          ref[k] = o == 0 ? x + y : o == 1 ? x - y : o == 2 ? x * y : x / y;
          scale[k] = o < 2 ? fabs(x) + fabs(y) : fabs(ref[k]);
        }
        char what[64];
        snprintf(what, sizeof what, "%s case %zu", ops[o], c);
        check(what, out, ref, scale);
      }
}

/* ---- softmax ---- */

static void test_softmax_with_scale_and_causal_mask_matches_reference(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  struct {
    int ndim;
    int64_t shape[4];
    layout lay;
    double scale;
    int causal;
  } cases[] = {
      {2, {1, 1}, CONTIGUOUS, 0, 0}, {1, {7}, CONTIGUOUS, 0.37, 0},
      {2, {3, 1023}, PADDED, 0, 0},  {4, {2, 3, 7, 7}, CONTIGUOUS, 0.5, 1},
      {3, {2, 5, 9}, PADDED, 0, 1},  {2, {9, 5}, CONTIGUOUS, 1.7, 1},
      {1, {1023}, CONTIGUOUS, 0, 1},
  };
  for (size_t dt = 0; dt < 3; ++dt)
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
      recap_op_call call = new_call("softmax");
      recap_tensor x =
          random_tensor(&rng, float_types[dt], cases[c].ndim, cases[c].shape, cases[c].lay, -4, 4);
      add_input(&call, x);
      call.attrs.scale = cases[c].scale;
      call.attrs.causal = cases[c].causal;
      run(&call);
      int64_t cols = x.shape[x.ndim - 1], rows = x.ndim > 1 ? x.shape[x.ndim - 2] : 1;
      int64_t n = numel(&x);
      double s = cases[c].scale ? cases[c].scale : 1;
      double *ref = doubles(n);
      for (int64_t r = 0; r < n / cols; ++r) {
        int64_t i = r % rows;
        double max = -INFINITY, sum = 0;
        for (int64_t j = 0; j < cols; ++j) {
          bool masked = cases[c].causal && j > i + (cols - rows);
          if (!masked) max = fmax(max, s * get(&x, r * cols + j));
        }
        for (int64_t j = 0; j < cols; ++j) {
          bool masked = cases[c].causal && j > i + (cols - rows);
          ref[r * cols + j] = masked ? 0 : exp(s * get(&x, r * cols + j) - max);
          sum += ref[r * cols + j];
        }
        for (int64_t j = 0; j < cols; ++j)
          ref[r * cols + j] = sum > 0 ? ref[r * cols + j] / sum : 0;
      }
      char what[64];
      snprintf(what, sizeof what, "softmax case %zu", c);
      check(what, &call.outputs[0], ref, NULL);
    }
}

/* ---- layernorm and rmsnorm ---- */

static void norm_case(test_rng *rng, recap_dtype dt, int ndim, const int64_t *shape, layout lay,
                      bool layernorm, bool bias) {
  recap_op_call call = new_call(layernorm ? "layernorm" : "rmsnorm");
  recap_tensor x = random_tensor(rng, dt, ndim, shape, lay, -2, 3);
  int64_t d = shape[ndim - 1];
  recap_tensor w = random_tensor(rng, dt, SHAPE(d), CONTIGUOUS, -2, 2);
  recap_tensor b = random_tensor(rng, dt, SHAPE(d), CONTIGUOUS, -1, 1);
  add_input(&call, x);
  add_input(&call, w);
  if (bias) add_input(&call, b);
  call.attrs.eps = layernorm ? 1e-5 : 1e-6;
  run(&call);
  int64_t n = numel(&x);
  double *ref = doubles(n), *scale = doubles(n);
  for (int64_t r = 0; r < n / d; ++r) {
    double mean = 0, var = 0;
    if (layernorm) {
      for (int64_t j = 0; j < d; ++j) mean += get(&x, r * d + j);
      mean /= d;
    }
    for (int64_t j = 0; j < d; ++j) var += pow(get(&x, r * d + j) - mean, 2);
    var /= d;
    for (int64_t j = 0; j < d; ++j) {
      double y = (get(&x, r * d + j) - mean) / sqrt(var + call.attrs.eps) * get(&w, j);
      double bj = bias ? get(&b, j) : 0;
      ref[r * d + j] = y + bj;
      scale[r * d + j] = fabs(y) + fabs(bj);
    }
  }
  check(layernorm ? (bias ? "layernorm" : "layernorm without bias") : "rmsnorm", &call.outputs[0],
        ref, scale);
}

static void test_layernorm_matches_reference(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (size_t dt = 0; dt < 3; ++dt) {
    norm_case(&rng, float_types[dt], SHAPE(7, 1023), CONTIGUOUS, true, true);
    norm_case(&rng, float_types[dt], SHAPE(1, 1), CONTIGUOUS, true, true);
    norm_case(&rng, float_types[dt], SHAPE(3, 4, 5), PADDED, true, false);
    norm_case(&rng, float_types[dt], SHAPE(2, 3, 1, 7), PADDED, true, true);
  }
}

static void test_rmsnorm_matches_reference(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (size_t dt = 0; dt < 3; ++dt) {
    norm_case(&rng, float_types[dt], SHAPE(7, 1023), CONTIGUOUS, false, false);
    norm_case(&rng, float_types[dt], SHAPE(1), CONTIGUOUS, false, false);
    norm_case(&rng, float_types[dt], SHAPE(3, 4, 5), PADDED, false, false);
  }
}

/* ---- sum and mean ---- */

static void test_sum_and_mean_over_last_dim_match_reference(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  struct {
    int ndim;
    int64_t shape[4];
    layout lay;
  } cases[] = {{1, {1}, CONTIGUOUS},
               {1, {7}, CONTIGUOUS},
               {2, {5, 1023}, PADDED},
               {4, {2, 3, 4, 7}, PADDED},
               {3, {3, 1, 1}, CONTIGUOUS}};
  for (int mean = 0; mean < 2; ++mean)
    for (size_t dt = 0; dt < 3; ++dt)
      for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        recap_op_call call = new_call(mean ? "mean" : "sum");
        recap_tensor x = random_tensor(&rng, float_types[dt], cases[c].ndim, cases[c].shape,
                                       cases[c].lay, -3, 3);
        add_input(&call, x);
        run(&call);
        int64_t d = x.shape[x.ndim - 1], rows = numel(&x) / d;
        CU_ASSERT_EQUAL(numel(&call.outputs[0]), rows);
        CU_ASSERT_EQUAL(call.outputs[0].ndim, x.ndim > 1 ? x.ndim - 1 : 1);
        double *ref = doubles(rows), *scale = doubles(rows);
        for (int64_t r = 0; r < rows; ++r) {
          ref[r] = scale[r] = 0;
          for (int64_t j = 0; j < d; ++j) {
            ref[r] += get(&x, r * d + j);
            scale[r] += fabs(get(&x, r * d + j));
          }
          if (mean) {
            ref[r] /= d;
            scale[r] /= d;
          }
        }
        char what[64];
        snprintf(what, sizeof what, "%s case %zu", mean ? "mean" : "sum", c);
        check(what, &call.outputs[0], ref, scale);
      }
}

/* ---- reshape, permute, transpose, slice, split, copy ---- */

static const recap_dtype all_types[] = {RECAP_DTYPE_F32, RECAP_DTYPE_F16, RECAP_DTYPE_BF16,
                                        RECAP_DTYPE_I32, RECAP_DTYPE_I64};

/* Random values exactly representable in every dtype: integers in [-200, 200] \ {0}. */
static recap_tensor integer_tensor(test_rng *rng, recap_dtype dt, int ndim, const int64_t *shape,
                                   layout lay) {
  recap_tensor t = tensor(dt, ndim, shape, lay);
  for (int64_t k = 0; k < numel(&t); ++k) {
    int64_t v = (int64_t)(test_rng_next(rng) % 200) + 1;
    set(&t, k, test_rng_next(rng) & 1 ? (double)v : -(double)v);
  }
  return t;
}

/* Exact comparison: data movement must not change a value. */
static void check_exact(const char *what, const recap_tensor *out, const double *ref) {
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

static void test_reshape_copies_in_row_major_order(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (size_t dt = 0; dt < 5; ++dt) {
    recap_op_call call = new_call("reshape");
    recap_tensor x = integer_tensor(&rng, all_types[dt], SHAPE(3, 4, 5), CONTIGUOUS);
    add_input(&call, x);
    set_sizes(&call.attrs, SHAPE(5, -1));
    run(&call);
    CU_ASSERT_EQUAL(call.outputs[0].shape[1], 12);
    double *ref = doubles(60);
    for (int k = 0; k < 60; ++k) ref[k] = get(&x, k);
    check_exact("reshape", &call.outputs[0], ref);

    /* A transposed (non-contiguous) input reshaped: elements in the view's row-major order. */
    recap_op_call call2 = new_call("reshape");
    recap_tensor y = integer_tensor(&rng, all_types[dt], SHAPE(7, 13), TRANSPOSED);
    add_input(&call2, y);
    set_sizes(&call2.attrs, SHAPE(91));
    run(&call2);
    double *ref2 = doubles(91);
    for (int k = 0; k < 91; ++k) ref2[k] = get(&y, k);
    check_exact("reshape of a transposed view", &call2.outputs[0], ref2);
  }
}

static void test_permute_and_transpose_reorder_dims(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (size_t dt = 0; dt < 5; ++dt) {
    recap_tensor x = integer_tensor(&rng, all_types[dt], SHAPE(2, 3, 4, 5), PADDED);
    recap_op_call call = new_call("permute");
    add_input(&call, x);
    set_sizes(&call.attrs, SHAPE(3, 1, 0, -2)); /* -2 is axis 2 */
    run(&call);
    const recap_tensor *out = &call.outputs[0];
    CU_ASSERT_EQUAL(out->shape[0], 5);
    CU_ASSERT_EQUAL(out->shape[3], 4);
    double *ref = doubles(120);
    for (int64_t k = 0; k < 120; ++k) {
      /* out[i0, i1, i2, i3] = x[i2, i1, i3, i0] */
      int64_t i3 = k % 4, i2 = k / 4 % 2, i1 = k / 8 % 3, i0 = k / 24;
      ref[k] = get(&x, ((i2 * 3 + i1) * 4 + i3) * 5 + i0);
    }
    check_exact("permute", out, ref);

    recap_op_call t = new_call("transpose"); /* defaults: the last two dims */
    recap_tensor y = integer_tensor(&rng, all_types[dt], SHAPE(3, 7, 5), TRANSPOSED);
    add_input(&t, y);
    run(&t);
    CU_ASSERT_EQUAL(t.outputs[0].shape[1], 5);
    double *ref2 = doubles(105);
    for (int64_t k = 0; k < 105; ++k) {
      int64_t j = k % 7, i = k / 7 % 5, b = k / 35; /* out[b, i, j] = y[b, j, i] */
      ref2[k] = get(&y, (b * 7 + j) * 5 + i);
    }
    check_exact("transpose", &t.outputs[0], ref2);
  }
}

static void test_slice_and_split_take_ranges(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (size_t dt = 0; dt < 5; ++dt) {
    recap_tensor x = integer_tensor(&rng, all_types[dt], SHAPE(2, 9, 3), PADDED);
    recap_op_call call = new_call("slice");
    add_input(&call, x);
    call.attrs.dim = -2;
    call.attrs.start = 2;
    call.attrs.end = -3; /* [2, 6) */
    run(&call);
    CU_ASSERT_EQUAL(call.outputs[0].shape[1], 4);
    double *ref = doubles(24);
    for (int64_t k = 0; k < 24; ++k) {
      int64_t c = k % 3, r = k / 3 % 4, b = k / 12;
      ref[k] = get(&x, (b * 9 + r + 2) * 3 + c);
    }
    check_exact("slice", &call.outputs[0], ref);

    recap_tensor y = integer_tensor(&rng, all_types[dt], SHAPE(7, 10), TRANSPOSED);
    recap_op_call s = new_call("split");
    add_input(&s, y);
    s.attrs.dim = 1;
    set_sizes(&s.attrs, SHAPE(3, 1, 6));
    run(&s);
    CU_ASSERT_EQUAL(s.num_outputs, 3);
    int64_t start = 0;
    for (int o = 0; o < 3; ++o) {
      int64_t w = s.attrs.sizes[o];
      double *r = doubles(7 * w);
      for (int64_t k = 0; k < 7 * w; ++k) r[k] = get(&y, k / w * 10 + start + k % w);
      check_exact("split", &s.outputs[o], r);
      start += w;
    }
  }
}

static void test_copy_makes_contiguous_copy(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (size_t dt = 0; dt < 5; ++dt) {
    recap_tensor x = integer_tensor(&rng, all_types[dt], SHAPE(3, 1023), TRANSPOSED);
    recap_op_call call = new_call("copy");
    add_input(&call, x);
    run(&call);
    double *ref = doubles(3 * 1023);
    for (int64_t k = 0; k < 3 * 1023; ++k) ref[k] = get(&x, k);
    check_exact("copy", &call.outputs[0], ref);
  }
}

static void test_concat_joins_along_dim(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (size_t dt = 0; dt < 5; ++dt) {
    recap_tensor a = integer_tensor(&rng, all_types[dt], SHAPE(2, 3, 4), CONTIGUOUS);
    recap_tensor b = integer_tensor(&rng, all_types[dt], SHAPE(2, 1, 4), PADDED);
    recap_tensor c = integer_tensor(&rng, all_types[dt], SHAPE(2, 7, 4), TRANSPOSED);
    recap_op_call call = new_call("concat");
    add_input(&call, a);
    add_input(&call, b);
    add_input(&call, c);
    call.attrs.dim = 1;
    run(&call);
    CU_ASSERT_EQUAL(call.outputs[0].shape[1], 11);
    double *ref = doubles(2 * 11 * 4);
    for (int64_t k = 0; k < 88; ++k) {
      int64_t col = k % 4, row = k / 4 % 11, bb = k / 44;
      ref[k] = row < 3   ? get(&a, (bb * 3 + row) * 4 + col)
               : row < 4 ? get(&b, bb * 4 + col)
                         : get(&c, (bb * 7 + row - 4) * 4 + col);
    }
    check_exact("concat", &call.outputs[0], ref);

    recap_op_call last = new_call("concat"); /* along the last dim, negative axis */
    recap_tensor d = integer_tensor(&rng, all_types[dt], SHAPE(5, 1), CONTIGUOUS);
    recap_tensor e = integer_tensor(&rng, all_types[dt], SHAPE(5, 1023), CONTIGUOUS);
    add_input(&last, d);
    add_input(&last, e);
    last.attrs.dim = -1;
    run(&last);
    double *ref2 = doubles(5 * 1024);
    for (int64_t k = 0; k < 5 * 1024; ++k)
      ref2[k] = k % 1024 == 0 ? get(&d, k / 1024) : get(&e, k / 1024 * 1023 + k % 1024 - 1);
    check_exact("concat along -1", &last.outputs[0], ref2);
  }
}

static void test_fill_writes_value_in_every_dtype(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (size_t dt = 0; dt < 5; ++dt) {
    recap_op_call call = new_call("fill");
    set_sizes(&call.attrs, SHAPE(7, 1023));
    call.attrs.dtype = all_types[dt];
    call.attrs.value = recap_dtype_is_float(all_types[dt]) ? draw(&rng, -100, 100)
                                                           : (double)(int64_t)draw(&rng, -1e6, 1e6);
    run(&call);
    double *ref = doubles(7 * 1023);
    for (int64_t k = 0; k < 7 * 1023; ++k) ref[k] = call.attrs.value;
    check("fill", &call.outputs[0], ref, NULL);
  }
}

/* ---- embedding ---- */

static void test_embedding_gathers_rows(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (size_t dt = 0; dt < 3; ++dt)
    for (int i64 = 0; i64 < 2; ++i64) {
      recap_tensor table =
          random_tensor(&rng, float_types[dt], SHAPE(37, 19), i64 ? TRANSPOSED : PADDED, -2, 2);
      recap_tensor ids = i64 ? tensor(RECAP_DTYPE_I64, SHAPE(1023), CONTIGUOUS)
                             : tensor(RECAP_DTYPE_I32, SHAPE(3, 5), TRANSPOSED);
      for (int64_t k = 0; k < numel(&ids); ++k) set(&ids, k, (double)(test_rng_next(&rng) % 37));
      recap_op_call call = new_call("embedding");
      add_input(&call, table);
      add_input(&call, ids);
      run(&call);
      int64_t n = numel(&ids);
      CU_ASSERT_EQUAL(call.outputs[0].ndim, ids.ndim + 1);
      double *ref = doubles(n * 19);
      for (int64_t k = 0; k < n * 19; ++k)
        ref[k] = get(&table, (int64_t)get(&ids, k / 19) * 19 + k % 19);
      check_exact("embedding", &call.outputs[0], ref);
    }
}

/* An id outside the table faults the (host) device, as an out-of-bounds CUDA kernel traps. */
static void test_embedding_out_of_range_id_faults(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  recap_tensor table = random_tensor(&rng, RECAP_DTYPE_F32, SHAPE(5, 3), CONTIGUOUS, -1, 1);
  recap_tensor ids = tensor(RECAP_DTYPE_I32, SHAPE(4), CONTIGUOUS);
  for (int k = 0; k < 4; ++k) set(&ids, k, k == 2 ? 5 : k);
  recap_op_call call = new_call("embedding");
  add_input(&call, table);
  add_input(&call, ids);
  CHECK_OK(recap__op_infer(&call));
  call.outputs[0].data = track(12 * sizeof(float));
  poison(RECAP_DTYPE_F32, call.outputs[0].data, 12);
  CHECK_STATUS(recap__op_launch(&call, stream), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("'ids'");
  CU_ASSERT_TRUE(isnan(((float *)call.outputs[0].data)[0])); /* nothing written */
  /* The fault is sticky: the next op on the device fails too, until the test resets it. */
  CHECK_STATUS(recap__op_launch(&call, stream), RECAP_STATUS_DEVICE_ERROR);
  recap__host_backend_reset_fault_for_testing();
}

/* ---- rope ---- */

static void rope_case(test_rng *rng, recap_dtype dt, int ndim, const int64_t *shape, layout lay,
                      bool start_form) {
  recap_tensor x = random_tensor(rng, dt, ndim, shape, lay, -2, 2);
  int64_t seq = shape[ndim - 3], heads = shape[ndim - 2], hd = shape[ndim - 1];
  int64_t batch = ndim == 4 ? shape[0] : 1;
  recap_tensor pos = tensor(RECAP_DTYPE_I32, SHAPE(start_form ? 1 : seq), CONTIGUOUS);
  for (int64_t k = 0; k < numel(&pos); ++k) set(&pos, k, (double)(test_rng_next(rng) % 4096));
  recap_op_call call = new_call("rope");
  add_input(&call, x);
  add_input(&call, pos);
  run(&call);
  int64_t n = numel(&x), half = hd / 2;
  double *ref = doubles(n), *scale = doubles(n);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < heads; ++h) {
        double p = start_form ? get(&pos, 0) + s : get(&pos, s);
        int64_t row = ((b * seq + s) * heads + h) * hd;
        for (int64_t i = 0; i < half; ++i) {
          double theta = p / pow(10000.0, (2.0 * i) / hd);
          double x1 = get(&x, row + i), x2 = get(&x, row + i + half);
          ref[row + i] = x1 * cos(theta) - x2 * sin(theta);
          ref[row + i + half] = x2 * cos(theta) + x1 * sin(theta);
          scale[row + i] = fabs(x1 * cos(theta)) + fabs(x2 * sin(theta));
          scale[row + i + half] = fabs(x2 * cos(theta)) + fabs(x1 * sin(theta));
        }
      }
  check(start_form ? "rope from a start position" : "rope", &call.outputs[0], ref, scale);
}

static void test_rope_rotates_halves_by_position(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (size_t dt = 0; dt < 3; ++dt) {
    rope_case(&rng, float_types[dt], SHAPE(2, 7, 3, 16), CONTIGUOUS, false);
    rope_case(&rng, float_types[dt], SHAPE(5, 2, 8), PADDED, true);
    rope_case(&rng, float_types[dt], SHAPE(1, 1, 1, 2), CONTIGUOUS, false);
    rope_case(&rng, float_types[dt], SHAPE(3, 9, 4, 6), TRANSPOSED, true);
  }
}

/* ---- kv_append ---- */

static void test_kv_append_writes_rows_at_device_position(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (size_t dt = 0; dt < 3; ++dt) {
    recap_tensor cache =
        random_tensor(&rng, float_types[dt], SHAPE(2, 11, 3, 8), CONTIGUOUS, -1, 1);
    recap_tensor rows = random_tensor(&rng, float_types[dt], SHAPE(2, 3, 3, 8), PADDED, -1, 1);
    recap_tensor pos = tensor(RECAP_DTYPE_I32, SHAPE(1), CONTIGUOUS);
    set(&pos, 0, 4);
    int64_t n = numel(&cache);
    double *ref = doubles(n);
    for (int64_t k = 0; k < n; ++k) {
      int64_t inner = k % 24, s = k / 24 % 11, b = k / 264;
      ref[k] = s >= 4 && s < 7 ? get(&rows, (b * 3 + s - 4) * 24 + inner) : get(&cache, k);
    }
    recap_op_call call = new_call("kv_append");
    add_input(&call, cache);
    add_input(&call, rows);
    add_input(&call, pos);
    CHECK_OK(recap__op_infer(&call));
    CU_ASSERT_PTR_EQUAL(call.outputs[0].data, cache.data);
    CHECK_OK(recap__op_launch(&call, stream));
    check_exact("kv_append", &call.outputs[0], ref);

    /* 9 + 3 rows overrun the 11-row cache: a fault, and the cache is untouched. */
    set(&pos, 0, 9);
    CHECK_STATUS(recap__op_launch(&call, stream), RECAP_STATUS_DEVICE_ERROR);
    CHECK_ERROR_MENTIONS("outside the cache");
    recap__host_backend_reset_fault_for_testing();
    check_exact("kv_append after a refused append", &call.outputs[0], ref);
  }
}

/* The point of reading the position from device memory: one captured append replays at
 * whatever position the device holds, with no graph update. */
static void test_kv_append_captured_once_replays_at_new_positions(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  recap_tensor cache = random_tensor(&rng, RECAP_DTYPE_F32, SHAPE(1, 7, 2, 3), CONTIGUOUS, -1, 1);
  recap_tensor row = tensor(RECAP_DTYPE_F32, SHAPE(1, 1, 2, 3), CONTIGUOUS);
  recap_tensor pos = tensor(RECAP_DTYPE_I32, SHAPE(1), CONTIGUOUS);
  set(&pos, 0, 0);
  recap_op_call call = new_call("kv_append");
  add_input(&call, cache);
  add_input(&call, row);
  add_input(&call, pos);
  CHECK_OK(recap__op_infer(&call));
  CHECK_OK(recap__capture_begin(stream, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(recap__op_launch(&call, stream));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(stream, &graph));
  recap__graph_exec *exec = NULL;
  CHECK_OK(stream->backend->graph_instantiate(graph, &exec));
  stream->backend->graph_destroy(graph);
  for (int step = 0; step < 7; ++step) {
    set(&pos, 0, step);
    for (int k = 0; k < 6; ++k) set(&row, k, 100 * (step + 1) + k);
    CHECK_OK(stream->backend->graph_launch(exec, stream));
  }
  for (int64_t k = 0; k < 42; ++k) CU_ASSERT_EQUAL(get(&cache, k), 100 * (k / 6 + 1) + k % 6);
  stream->backend->graph_exec_destroy(exec);
}

/* ---- attention ---- */

static void attention_case(test_rng *rng, recap_dtype dt, int64_t batch, int64_t heads,
                           int64_t kv_heads, int64_t sq, int64_t sk, int64_t hd, int causal,
                           int64_t len, double scale_attr, layout q_layout) {
  recap_tensor q = random_tensor(rng, dt, SHAPE(batch, heads, sq, hd), q_layout, -1.5, 1.5);
  recap_tensor k = random_tensor(rng, dt, SHAPE(batch, kv_heads, sk, hd), PADDED, -1.5, 1.5);
  recap_tensor v = random_tensor(rng, dt, SHAPE(batch, kv_heads, sk, hd), CONTIGUOUS, -2, 2);
  recap_op_call call = new_call("attention");
  add_input(&call, q);
  add_input(&call, k);
  add_input(&call, v);
  int64_t valid = sk;
  if (len >= 0) {
    recap_tensor l = tensor(RECAP_DTYPE_I32, SHAPE(1), CONTIGUOUS);
    set(&l, 0, (double)len);
    add_input(&call, l);
    valid = len;
  }
  call.attrs.causal = causal;
  call.attrs.scale = scale_attr;
  run(&call);
  double s = scale_attr ? scale_attr : 1 / sqrt((double)hd);
  int64_t n = batch * heads * sq * hd;
  double *ref = doubles(n), *scale = doubles(n), *p = doubles(sk);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < sq; ++i) {
        int64_t kh = h / (heads / kv_heads), row = ((b * heads + h) * sq + i) * hd;
        double max = -INFINITY, sum = 0;
        for (int64_t j = 0; j < sk; ++j) {
          bool visible = j < valid && (!causal || j <= valid - sq + i);
          p[j] = -INFINITY;
          if (!visible) continue;
          double dotp = 0;
          for (int64_t d = 0; d < hd; ++d)
            dotp += get(&q, row + d) * get(&k, ((b * kv_heads + kh) * sk + j) * hd + d);
          p[j] = s * dotp;
          max = fmax(max, p[j]);
        }
        for (int64_t j = 0; j < sk; ++j) {
          p[j] = p[j] == -INFINITY ? 0 : exp(p[j] - max);
          sum += p[j];
        }
        for (int64_t d = 0; d < hd; ++d) {
          ref[row + d] = scale[row + d] = 0;
          for (int64_t j = 0; j < sk; ++j) {
            if (sum == 0) break;
            double vv = get(&v, ((b * kv_heads + kh) * sk + j) * hd + d);
            ref[row + d] += p[j] / sum * vv;
            scale[row + d] += p[j] / sum * fabs(vv);
          }
        }
      }
  char what[96];
  snprintf(what, sizeof what, "attention H%lld/%lld Sq%lld Sk%lld Dh%lld causal %d len %lld",
           (long long)heads, (long long)kv_heads, (long long)sq, (long long)sk, (long long)hd,
           causal, (long long)len);
  check(what, &call.outputs[0], ref, scale);
}

static void test_attention_matches_reference(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (size_t dt = 0; dt < 3; ++dt) {
    recap_dtype t = float_types[dt];
    attention_case(&rng, t, 2, 4, 2, 7, 11, 16, 0, -1, 0, CONTIGUOUS);
    attention_case(&rng, t, 2, 4, 2, 7, 7, 16, 1, -1, 0, PADDED);
    attention_case(&rng, t, 1, 3, 3, 3, 11, 67, 1, 9, 0.2, CONTIGUOUS); /* Dh > one chunk */
    attention_case(&rng, t, 1, 2, 1, 1, 1, 1, 0, -1, 0, CONTIGUOUS);
    attention_case(&rng, t, 1, 2, 1, 5, 8, 4, 1, 3, 0, PADDED);     /* early queries see no key */
    attention_case(&rng, t, 2, 1, 1, 2, 6, 8, 0, 0, 0, CONTIGUOUS); /* len 0: zeros */
  }
}

static void test_attention_length_beyond_keys_faults(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  recap_tensor q = random_tensor(&rng, RECAP_DTYPE_F32, SHAPE(1, 1, 1, 4), CONTIGUOUS, -1, 1);
  recap_tensor kv = random_tensor(&rng, RECAP_DTYPE_F32, SHAPE(1, 1, 5, 4), CONTIGUOUS, -1, 1);
  recap_tensor len = tensor(RECAP_DTYPE_I32, SHAPE(1), CONTIGUOUS);
  set(&len, 0, 6);
  recap_op_call call = new_call("attention");
  add_input(&call, q);
  add_input(&call, kv);
  add_input(&call, kv);
  add_input(&call, len);
  CHECK_OK(recap__op_infer(&call));
  call.outputs[0].data = track(4 * sizeof(float));
  CHECK_STATUS(recap__op_launch(&call, stream), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("'len'");
  recap__host_backend_reset_fault_for_testing();
}

/* ---- random ---- */

static void test_random_ops_draw_the_philox_sequence(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (int normal = 0; normal < 2; ++normal)
    for (size_t dt = 0; dt < 3; ++dt) {
      uint64_t seed = test_rng_next(&rng);
      CHECK_OK(recap_rng_manual_seed(host0, seed));
      recap_op_call skip = new_call("random_uniform"); /* one draw first: offset 1 */
      set_sizes(&skip.attrs, SHAPE(3));
      run(&skip);
      recap_op_call call = new_call(normal ? "random_normal" : "random_uniform");
      set_sizes(&call.attrs, SHAPE(7, 1023));
      call.attrs.dtype = float_types[dt];
      if (normal) {
        call.attrs.mean = draw(&rng, -2, 2);
        call.attrs.std = test_rng_uniform(&rng, 0.5, 3);
      } else {
        call.attrs.low = draw(&rng, -3, 0);
        call.attrs.high = draw(&rng, 0.5, 4);
      }
      run(&call);
      recap_rng_state state;
      CHECK_OK(recap_rng_get_state(host0, &state));
      CU_ASSERT_EQUAL(state.offset, 2);
      int64_t n = 7 * 1023;
      double *ref = doubles(n);
      for (int64_t k = 0; k < n; k += 4) {
        recap__philox4x32 w = recap__philox_draw(seed, 1, (uint64_t)(k / 4));
        float v[4];
        if (normal) {
          recap__philox_normal4(w, (float)call.attrs.mean, (float)call.attrs.std, v);
        } else {
          for (int i = 0; i < 4; ++i)
            v[i] = recap__philox_uniform(w.v[i], (float)call.attrs.low, (float)call.attrs.high);
        }
        for (int i = 0; i < 4 && k + i < n; ++i) ref[k + i] = v[i];
      }
      check(normal ? "random_normal" : "random_uniform", &call.outputs[0], ref, NULL);
      /* f32 keeps the interval half-open (narrower types may round onto its upper end). */
      if (!normal && float_types[dt] == RECAP_DTYPE_F32)
        for (int64_t k = 0; k < n; ++k) {
          CU_ASSERT(get(&call.outputs[0], k) >= (float)call.attrs.low);
          CU_ASSERT(get(&call.outputs[0], k) < (float)call.attrs.high);
        }
    }
}

/* A captured random op reads its offset from the capture's slot, so each replay draws what
 * the next eager draw would have. */
static void test_random_op_replays_draw_fresh_numbers(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  uint64_t seed = test_rng_next(&rng);
  CHECK_OK(recap_rng_manual_seed(host0, seed));
  recap_op_call call = new_call("random_uniform");
  set_sizes(&call.attrs, SHAPE(9));
  CHECK_OK(recap__op_infer(&call));
  float out[9];
  call.outputs[0].data = out;
  CHECK_OK(recap__rng_capture_begin(stream));
  CHECK_OK(recap__capture_begin(stream, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(recap__op_launch(&call, stream));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(stream, &graph));
  recap__rng_graph_binding *binding = NULL;
  CHECK_OK(recap__rng_capture_end(stream, &binding));
  CU_ASSERT_PTR_NOT_NULL_FATAL(binding);
  recap__graph_exec *exec = NULL;
  CHECK_OK(stream->backend->graph_instantiate(graph, &exec));
  stream->backend->graph_destroy(graph);
  for (uint64_t replay = 0; replay < 3; ++replay) {
    CHECK_OK(recap__rng_replay_prepare(binding, stream));
    CHECK_OK(stream->backend->graph_launch(exec, stream));
    for (int k = 0; k < 9; ++k) {
      recap__philox4x32 w = recap__philox_draw(seed, replay, (uint64_t)(k / 4));
      CU_ASSERT_EQUAL(out[k], recap__philox_uniform(w.v[k % 4], 0.0f, 1.0f));
    }
  }
  stream->backend->graph_exec_destroy(exec);
  recap__rng_graph_binding_destroy(binding);
}

/* ---- launch path ---- */

/* A captured op keeps the call it was launched with: changing the caller's call (pointers,
 * attributes) after capture does not change what a replay computes. */
static void test_captured_op_keeps_its_call(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  recap_tensor x = random_tensor(&rng, RECAP_DTYPE_F32, SHAPE(3, 7), CONTIGUOUS, -2, 2);
  recap_op_call call = new_call("scale");
  add_input(&call, x);
  call.attrs.scale = 2;
  CHECK_OK(recap__op_infer(&call));
  float out[21], other[21];
  call.outputs[0].data = out;
  CHECK_OK(recap__capture_begin(stream, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(recap__op_launch(&call, stream));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(stream, &graph));
  call.attrs.scale = 5;
  call.outputs[0].data = other;
  recap__graph_exec *exec = NULL;
  CHECK_OK(stream->backend->graph_instantiate(graph, &exec));
  stream->backend->graph_destroy(graph);
  poison(RECAP_DTYPE_F32, out, 21);
  CHECK_OK(stream->backend->graph_launch(exec, stream));
  for (int k = 0; k < 21; ++k) CU_ASSERT_EQUAL(out[k], (float)(2 * get(&x, k)));
  stream->backend->graph_exec_destroy(exec);
}

static void test_launch_refuses_unbound_tensors(void) {
  free_tracked();
  recap_op_call call = new_call("relu");
  recap_tensor x = tensor(RECAP_DTYPE_F32, SHAPE(4), CONTIGUOUS);
  add_input(&call, x);
  CHECK_OK(recap__op_infer(&call));
  CHECK_STATUS(recap__op_launch(&call, stream), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("output 0 is not bound");
}

static int prepares;

/* A prepare step that does its work once and then refuses, to see both outcomes. */
static recap_status prepare_once(const recap_op_call *call, recap_stream *s) {
  (void)call;
  (void)s;
  return ++prepares == 1 ? RECAP_OK
                         : RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "second prepare refused");
}

static void test_prepare_runs_the_defs_slot_and_names_the_op(void) {
  free_tracked();
  recap_op_call call = new_call("relu");
  add_input(&call, tensor(RECAP_DTYPE_F32, SHAPE(4), CONTIGUOUS));
  CHECK_OK(recap__op_infer(&call));
  CHECK_OK(recap__op_prepare(&call, stream)); /* relu has no prepare step */
  recap_op_def with_prepare = *call.def;
  with_prepare.prepare = prepare_once;
  call.def = &with_prepare;
  prepares = 0;
  CHECK_OK(recap__op_prepare(&call, stream));
  CU_ASSERT_EQUAL(prepares, 1);
  CHECK_STATUS(recap__op_prepare(&call, stream), RECAP_STATUS_NOT_SUPPORTED);
  CU_ASSERT_EQUAL(prepares, 2);
  CHECK_ERROR_MENTIONS("op 'relu': ");
  CHECK_ERROR_MENTIONS("second prepare refused");
}

static void test_gemm_ops_have_a_prepare_step_a_host_stream_skips(void) {
  free_tracked();
  CU_ASSERT_PTR_NOT_NULL(recap__op_find("linear")->prepare);
  recap_op_call call = new_call("matmul");
  CU_ASSERT_PTR_NOT_NULL(call.def->prepare);
  add_input(&call, tensor(RECAP_DTYPE_F32, SHAPE(3, 5), CONTIGUOUS));
  add_input(&call, tensor(RECAP_DTYPE_F32, SHAPE(5, 2), CONTIGUOUS));
  CHECK_OK(recap__op_infer(&call));
  CHECK_OK(recap__op_prepare(&call, stream));
}

static int suite_init(void) {
  return recap_stream_create(host0, 0, RECAP_STREAM_NON_BLOCKING, &stream) == RECAP_OK ? 0 : 1;
}

static int suite_cleanup(void) {
  free_tracked();
  return recap_stream_destroy(stream) == RECAP_OK ? 0 : 1;
}

int main(void) {
  CU_pSuite s = test_add_suite("ops/host", suite_init, suite_cleanup);
  CU_ADD_TEST(s, test_half_conversions_round_to_nearest_even);
  CU_ADD_TEST(s, test_unary_ops_match_reference);
  CU_ADD_TEST(s, test_unary_runs_in_place);
  CU_ADD_TEST(s, test_binary_ops_broadcast_and_match_reference);
  CU_ADD_TEST(s, test_softmax_with_scale_and_causal_mask_matches_reference);
  CU_ADD_TEST(s, test_layernorm_matches_reference);
  CU_ADD_TEST(s, test_rmsnorm_matches_reference);
  CU_ADD_TEST(s, test_sum_and_mean_over_last_dim_match_reference);
  CU_ADD_TEST(s, test_reshape_copies_in_row_major_order);
  CU_ADD_TEST(s, test_permute_and_transpose_reorder_dims);
  CU_ADD_TEST(s, test_slice_and_split_take_ranges);
  CU_ADD_TEST(s, test_copy_makes_contiguous_copy);
  CU_ADD_TEST(s, test_concat_joins_along_dim);
  CU_ADD_TEST(s, test_fill_writes_value_in_every_dtype);
  CU_ADD_TEST(s, test_embedding_gathers_rows);
  CU_ADD_TEST(s, test_embedding_out_of_range_id_faults);
  CU_ADD_TEST(s, test_rope_rotates_halves_by_position);
  CU_ADD_TEST(s, test_kv_append_writes_rows_at_device_position);
  CU_ADD_TEST(s, test_kv_append_captured_once_replays_at_new_positions);
  CU_ADD_TEST(s, test_attention_matches_reference);
  CU_ADD_TEST(s, test_attention_length_beyond_keys_faults);
  CU_ADD_TEST(s, test_random_ops_draw_the_philox_sequence);
  CU_ADD_TEST(s, test_random_op_replays_draw_fresh_numbers);
  CU_ADD_TEST(s, test_captured_op_keeps_its_call);
  CU_ADD_TEST(s, test_launch_refuses_unbound_tensors);
  CU_ADD_TEST(s, test_prepare_runs_the_defs_slot_and_names_the_op);
  CU_ADD_TEST(s, test_gemm_ops_have_a_prepare_step_a_host_stream_skips);
  return test_run_all();
}
