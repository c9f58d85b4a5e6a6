/*
 * ops_host_attention_test.c: the host backend's decode ops: kv_append (rows written at a position
 * read from device memory, also captured once and replayed at new positions; an out-of-range
 * position faults) and attention against a float64 reference (a length beyond the keys
 * faults). Helpers: ops_host_util.h.
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
    recap__op_call call = new_call("kv_append");
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
  recap__op_call call = new_call("kv_append");
  add_input(&call, cache);
  add_input(&call, row);
  add_input(&call, pos);
  CHECK_OK(recap__op_infer(&call));
  recap__graph_exec *exec = capture_launches((recap__op_call *const[]){&call}, 1);
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
  recap__op_call call = new_call("attention");
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
  recap__op_call call = new_call("attention");
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

int main(void) {
  CU_pSuite s = test_add_suite("ops_attention/host", suite_init, suite_cleanup);
  CU_ADD_TEST(s, test_kv_append_writes_rows_at_device_position);
  CU_ADD_TEST(s, test_kv_append_captured_once_replays_at_new_positions);
  CU_ADD_TEST(s, test_attention_matches_reference);
  CU_ADD_TEST(s, test_attention_length_beyond_keys_faults);
  return test_run_all();
}
