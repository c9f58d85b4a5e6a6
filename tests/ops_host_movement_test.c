/*
 * ops_host_movement_test.c: the host backend's data movement ops, which must be exact in every
 * dtype: reshape, permute and transpose, slice and split, copy, concat, fill, embedding (and
 * its out-of-range id fault), and rope (position-rotated halves, against the f32 angles its
 * description promises; Llama 3 frequency scaling against a hand computation; base and
 * theta). Helpers: ops_host_util.h.
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

static void test_reshape_copies_in_row_major_order(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (size_t dt = 0; dt < 5; ++dt) {
    recap__op_call call = new_call("reshape");
    recap_tensor x = integer_tensor(&rng, all_types[dt], SHAPE(3, 4, 5), CONTIGUOUS);
    add_input(&call, x);
    set_sizes(&call.attrs, SHAPE(5, -1));
    run(&call);
    CU_ASSERT_EQUAL(call.outputs[0].shape[1], 12);
    double *ref = doubles(60);
    for (int k = 0; k < 60; ++k) ref[k] = get(&x, k);
    check_exact("reshape", &call.outputs[0], ref);

    /* A transposed (non-contiguous) input reshaped: elements in the view's row-major order. */
    recap__op_call call2 = new_call("reshape");
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
    recap__op_call call = new_call("permute");
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

    recap__op_call t = new_call("transpose"); /* defaults: the last two dims */
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
    recap__op_call call = new_call("slice");
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
    recap__op_call s = new_call("split");
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
    recap__op_call call = new_call("copy");
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
    recap__op_call call = new_call("concat");
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

    recap__op_call last = new_call("concat"); /* along the last dim, negative axis */
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
    recap__op_call call = new_call("fill");
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
      recap__op_call call = new_call("embedding");
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
  recap__op_call call = new_call("embedding");
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

/* The angle the op promises without scaling, written from its description (`recap ops rope`):
 * transformers' f32 steps, each rounded once. An exact angle differs from it by up to
 * position x 2^-24 radians, ~2e-4 at the positions below, twenty times the f32 tolerance of
 * check(): these cases fail an op that computes the angle any other way. */
static double f32_angle(double theta, int64_t i, int64_t head_dim, double position) {
  float e = (float)(2 * i) / (float)head_dim;
  float inv_freq = 1.0f / (float)pow((double)(float)theta, (double)e);
  return (double)(inv_freq * (float)position);
}

/* theta 0: the op's default, 10000. */
static void rope_case(test_rng *rng, recap_dtype dt, int ndim, const int64_t *shape, layout lay,
                      bool start_form, double theta) {
  recap_tensor x = random_tensor(rng, dt, ndim, shape, lay, -2, 2);
  int64_t seq = shape[ndim - 3], heads = shape[ndim - 2], hd = shape[ndim - 1];
  int64_t batch = ndim == 4 ? shape[0] : 1;
  recap_tensor pos = tensor(RECAP_DTYPE_I32, SHAPE(start_form ? 1 : seq), CONTIGUOUS);
  for (int64_t k = 0; k < numel(&pos); ++k) set(&pos, k, (double)(test_rng_next(rng) % 4096));
  recap__op_call call = new_call("rope");
  call.attrs.rope_theta = theta;
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
          double angle = f32_angle(theta != 0 ? theta : 10000, i, hd, p);
          double c = (float)cos(angle), sn = (float)sin(angle);
          double x1 = get(&x, row + i), x2 = get(&x, row + i + half);
          ref[row + i] = x1 * c - x2 * sn;
          ref[row + i + half] = x2 * c + x1 * sn;
          scale[row + i] = fabs(x1 * c) + fabs(x2 * sn);
          scale[row + i + half] = fabs(x2 * c) + fabs(x1 * sn);
        }
      }
  check(start_form ? "rope from a start position" : "rope", &call.outputs[0], ref, scale);
}

static void test_rope_rotates_halves_by_position(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (size_t dt = 0; dt < 3; ++dt) {
    rope_case(&rng, float_types[dt], SHAPE(2, 7, 3, 16), CONTIGUOUS, false, 0);
    rope_case(&rng, float_types[dt], SHAPE(5, 2, 8), PADDED, true, 0);
    rope_case(&rng, float_types[dt], SHAPE(1, 1, 1, 2), CONTIGUOUS, false, 0);
    rope_case(&rng, float_types[dt], SHAPE(3, 9, 4, 6), TRANSPOSED, true, 0);
    /* Real checkpoints' thetas, and one that no integer attribute could give. */
    rope_case(&rng, float_types[dt], SHAPE(2, 5, 2, 64), CONTIGUOUS, false, 500000.0);
    rope_case(&rng, float_types[dt], SHAPE(6, 2, 128), PADDED, true, 1000000.0);
    rope_case(&rng, float_types[dt], SHAPE(1, 4, 3, 32), TRANSPOSED, false, 10000.5);
  }
}

/* Runs rope on x [P, 1, Dh] whose first half is 1 and second half 0, at positions[P]: row p's
 * element i is cos and element Dh/2 + i sin of pair i's angle at positions[p]. */
static recap_tensor rope_unit_rows(recap_dtype dt, recap__op_attrs attrs, int64_t head_dim,
                                   int num_positions, const int32_t *positions) {
  recap_tensor x = tensor(dt, SHAPE(num_positions, 1, head_dim), CONTIGUOUS);
  for (int64_t k = 0; k < numel(&x); ++k) set(&x, k, k % head_dim < head_dim / 2 ? 1 : 0);
  recap_tensor pos = tensor(RECAP_DTYPE_I32, SHAPE(num_positions), CONTIGUOUS);
  for (int p = 0; p < num_positions; ++p) set(&pos, p, positions[p]);
  recap__op_call call = new_call("rope");
  call.attrs = attrs;
  add_input(&call, x);
  add_input(&call, pos);
  run(&call);
  return call.outputs[0];
}

/* Llama 3 scaling by hand, in double from transformers' formula (not its f32 steps), at Llama
 * 3.2's parameters: theta 500000, Dh 128, factor 32, low_freq_factor 1, high_freq_factor 4,
 * original_max_positions 8192. Wavelength 2 pi / inv_freq; high-frequency pairs (wavelength
 * under 8192 / 4 = 2048: i <= 28) keep inv_freq, low-frequency ones (over 8192 / 1: i >= 35,
 * wavelength 8225 at i = 35) are divided by 32, and between them inv_freq is interpolated with
 * s = (8192 / wavelength - 1) / (4 - 1). */
static void test_rope_llama3_scales_each_band_like_transformers(void) {
  free_tracked();
  static const struct {
    int64_t i;
    int band; /* 0 high (kept), 1 between (interpolated), 2 low (divided) */
  } pairs[] = {{0, 0}, {5, 0}, {28, 0}, {29, 1}, {31, 1}, {34, 1}, {35, 2}, {50, 2}, {63, 2}};
  static const int32_t positions[] = {0, 1, 7, 1000, 5000, 100000};
  enum { NPOS = 6, DH = 128 };
  recap__op_attrs attrs;
  memset(&attrs, 0, sizeof attrs);
  recap__op_attrs_set_defaults(recap__op_find("rope"), &attrs);
  attrs.rope_theta = 500000.0;
  attrs.rope_llama3 = 1;
  attrs.rope_factor = 32;
  attrs.rope_low_freq_factor = 1;
  attrs.rope_high_freq_factor = 4;
  attrs.rope_original_max = 8192;
  for (size_t dt = 0; dt < 3; ++dt) {
    recap_tensor out = rope_unit_rows(float_types[dt], attrs, DH, NPOS, positions);
    for (size_t k = 0; k < sizeof pairs / sizeof pairs[0]; ++k) {
      const int64_t i = pairs[k].i;
      const double inv = pow(500000.0, -2.0 * (double)i / DH), wavelen = 2 * M_PI / inv;
      const double s = (8192 / wavelen - 1) / (4.0 - 1.0);
      const int want_band = wavelen < 2048 ? 0 : wavelen > 8192 ? 2 : 1;
      CU_ASSERT_EQUAL(want_band, pairs[k].band); /* the cases are where the comment says */
      const double scaled = pairs[k].band == 0   ? inv
                            : pairs[k].band == 2 ? inv / 32
                                                 : (1 - s) * inv / 32 + s * inv;
      for (int p = 0; p < NPOS; ++p) {
        const double angle = scaled * positions[p];
        /* The op's f32 steps each round once (a few 2^-24 of the angle), and the cos and sin
         * round to the output's dtype: a wrong band is off by a factor up to 32. */
        const double tol = 1e-6 * angle + 1e-6 + rtol_of(float_types[dt]);
        const double c = get(&out, p * DH + i), sn = get(&out, p * DH + DH / 2 + i);
        if (!(fabs(c - cos(angle)) <= tol && fabs(sn - sin(angle)) <= tol)) {
          fprintf(stderr,
                  "\n  llama3 rope (%s): pair %lld at position %d: cos %.9g sin %.9g, "
                  "expected %.9g %.9g",
                  recap_dtype_name(float_types[dt]), (long long)i, positions[p], c, sn, cos(angle),
                  sin(angle));
          CU_FAIL("llama3 rope angle");
        }
      }
    }
  }
}

/* `base` is theta as an integer: base 500000 gives theta 500000.0's bits; neither gives
 * 10000's. */
static void test_rope_base_is_theta_as_an_integer(void) {
  free_tracked();
  static const int32_t positions[] = {3, 4095};
  recap__op_attrs attrs;
  memset(&attrs, 0, sizeof attrs);
  recap__op_attrs_set_defaults(recap__op_find("rope"), &attrs);
  recap__op_attrs by_base = attrs, by_theta = attrs, ten_thousand = attrs;
  by_base.rope_base = 500000;
  by_theta.rope_theta = 500000.0;
  ten_thousand.rope_theta = 10000.0;
  recap_tensor a = rope_unit_rows(RECAP_DTYPE_F32, by_base, 64, 2, positions);
  recap_tensor b = rope_unit_rows(RECAP_DTYPE_F32, by_theta, 64, 2, positions);
  CU_ASSERT_EQUAL(memcmp(a.data, b.data, (size_t)numel(&a) * sizeof(float)), 0);
  recap_tensor d = rope_unit_rows(RECAP_DTYPE_F32, attrs, 64, 2, positions);
  recap_tensor e = rope_unit_rows(RECAP_DTYPE_F32, ten_thousand, 64, 2, positions);
  CU_ASSERT_EQUAL(memcmp(d.data, e.data, (size_t)numel(&d) * sizeof(float)), 0);
  CU_ASSERT_NOT_EQUAL(memcmp(a.data, d.data, (size_t)numel(&a) * sizeof(float)), 0);
}

int main(void) {
  CU_pSuite s = test_add_suite("ops_movement/host", suite_init, suite_cleanup);
  CU_ADD_TEST(s, test_reshape_copies_in_row_major_order);
  CU_ADD_TEST(s, test_permute_and_transpose_reorder_dims);
  CU_ADD_TEST(s, test_slice_and_split_take_ranges);
  CU_ADD_TEST(s, test_copy_makes_contiguous_copy);
  CU_ADD_TEST(s, test_concat_joins_along_dim);
  CU_ADD_TEST(s, test_fill_writes_value_in_every_dtype);
  CU_ADD_TEST(s, test_embedding_gathers_rows);
  CU_ADD_TEST(s, test_embedding_out_of_range_id_faults);
  CU_ADD_TEST(s, test_rope_rotates_halves_by_position);
  CU_ADD_TEST(s, test_rope_llama3_scales_each_band_like_transformers);
  CU_ADD_TEST(s, test_rope_base_is_theta_as_an_integer);
  return test_run_all();
}
