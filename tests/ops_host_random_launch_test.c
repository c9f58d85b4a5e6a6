/*
 * ops_host_random_launch_test.c: the host backend's random ops (the Philox sequence, fresh
 * numbers on every graph replay) and the launch path (a captured op keeps its call; unbound
 * tensors are refused). Helpers: ops_host_util.h.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/op.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/error.h"
#include "runtime/half.h"
#include "runtime/host_fault.h"
#include "runtime/host_graph.h"
#include "runtime/philox.h"
#include "runtime/rng.h"
#include "tests/ops_host_util.h"

/* ---- random ---- */

static void test_random_ops_draw_the_philox_sequence(void) {
  free_tracked();
  test_rng rng;
  test_rng_init(&rng);
  for (int normal = 0; normal < 2; ++normal)
    for (size_t dt = 0; dt < 3; ++dt) {
      uint64_t seed = test_rng_next(&rng);
      CHECK_OK(recap_rng_manual_seed(host0, seed));
      recap__op_call skip = new_call("random_uniform"); /* one draw first: offset 1 */
      set_sizes(&skip.attrs, SHAPE(3));
      run(&skip);
      recap__op_call call = new_call(normal ? "random_normal" : "random_uniform");
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
  recap__op_call call = new_call("random_uniform");
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
  recap__op_call call = new_call("scale");
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
  recap__op_call call = new_call("relu");
  recap_tensor x = tensor(RECAP_DTYPE_F32, SHAPE(4), CONTIGUOUS);
  add_input(&call, x);
  CHECK_OK(recap__op_infer(&call));
  CHECK_STATUS(recap__op_launch(&call, stream), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("output 0 is not bound");
}

static int prepares;

/* A prepare step that does its work once and then refuses, to see both outcomes. */
static recap_status prepare_once(const recap__op_call *call, recap_stream *s) {
  (void)call;
  (void)s;
  return ++prepares == 1 ? RECAP_OK
                         : RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "second prepare refused");
}

static void test_prepare_runs_the_defs_slot_and_names_the_op(void) {
  free_tracked();
  recap__op_call call = new_call("relu");
  add_input(&call, tensor(RECAP_DTYPE_F32, SHAPE(4), CONTIGUOUS));
  CHECK_OK(recap__op_infer(&call));
  CHECK_OK(recap__op_prepare(&call, stream)); /* relu has no prepare step */
  recap__op_def with_prepare = *call.def;
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
  recap__op_call call = new_call("matmul");
  CU_ASSERT_PTR_NOT_NULL(call.def->prepare);
  add_input(&call, tensor(RECAP_DTYPE_F32, SHAPE(3, 5), CONTIGUOUS));
  add_input(&call, tensor(RECAP_DTYPE_F32, SHAPE(5, 2), CONTIGUOUS));
  CHECK_OK(recap__op_infer(&call));
  CHECK_OK(recap__op_prepare(&call, stream));
}

int main(void) {
  CU_pSuite s = test_add_suite("ops_random_launch/host", suite_init, suite_cleanup);
  CU_ADD_TEST(s, test_random_ops_draw_the_philox_sequence);
  CU_ADD_TEST(s, test_random_op_replays_draw_fresh_numbers);
  CU_ADD_TEST(s, test_captured_op_keeps_its_call);
  CU_ADD_TEST(s, test_launch_refuses_unbound_tensors);
  CU_ADD_TEST(s, test_prepare_runs_the_defs_slot_and_names_the_op);
  CU_ADD_TEST(s, test_gemm_ops_have_a_prepare_step_a_host_stream_skips);
  return test_run_all();
}
