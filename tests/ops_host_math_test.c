/*
 * ops_host_math_test.c: the host backend's arithmetic ops against a float64 reference:
 * f16/bf16 conversions (runtime/half.h: every value round-trips, midpoints tie to even),
 * unary ops and cast (also in place), binary ops with broadcasting, softmax with scale and
 * causal mask, layernorm and rmsnorm, sum and mean over the last dim (helpers and the
 * tolerances: ops_host_util.h).
 */
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
#include "tests/ops_host_util.h"

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
        recap__op_call call = new_call(ops[o]);
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
  recap__op_call call = new_call("silu");
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
        recap__op_call call = new_call(ops[o]);
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
      recap__op_call call = new_call("softmax");
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
  recap__op_call call = new_call(layernorm ? "layernorm" : "rmsnorm");
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
        recap__op_call call = new_call(mean ? "mean" : "sum");
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

int main(void) {
  CU_pSuite s = test_add_suite("ops_math/host", suite_init, suite_cleanup);
  CU_ADD_TEST(s, test_half_conversions_round_to_nearest_even);
  CU_ADD_TEST(s, test_unary_ops_match_reference);
  CU_ADD_TEST(s, test_unary_runs_in_place);
  CU_ADD_TEST(s, test_binary_ops_broadcast_and_match_reference);
  CU_ADD_TEST(s, test_softmax_with_scale_and_causal_mask_matches_reference);
  CU_ADD_TEST(s, test_layernorm_matches_reference);
  CU_ADD_TEST(s, test_rmsnorm_matches_reference);
  CU_ADD_TEST(s, test_sum_and_mean_over_last_dim_match_reference);
  return test_run_all();
}
