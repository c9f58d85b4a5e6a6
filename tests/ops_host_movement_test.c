/*
 * ops_host_movement_test.c: the host backend's data movement ops, which must be exact in every
 * dtype: reshape, permute and transpose, slice and split, copy, concat, fill, embedding (and
 * its out-of-range id fault), and rope (position-rotated halves, against a float64
 * reference). Helpers: ops_host_util.h.
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

static void rope_case(test_rng *rng, recap_dtype dt, int ndim, const int64_t *shape, layout lay,
                      bool start_form) {
  recap_tensor x = random_tensor(rng, dt, ndim, shape, lay, -2, 2);
  int64_t seq = shape[ndim - 3], heads = shape[ndim - 2], hd = shape[ndim - 1];
  int64_t batch = ndim == 4 ? shape[0] : 1;
  recap_tensor pos = tensor(RECAP_DTYPE_I32, SHAPE(start_form ? 1 : seq), CONTIGUOUS);
  for (int64_t k = 0; k < numel(&pos); ++k) set(&pos, k, (double)(test_rng_next(rng) % 4096));
  recap__op_call call = new_call("rope");
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
  return test_run_all();
}
