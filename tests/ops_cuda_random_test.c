/*
 * ops_cuda_random_test.c: the random ops on CUDA: they draw the host's numbers, and replay
 * through the RNG slot protocol of runtime/rng.h, equal to the host draw at the generator state
 * each replay consumed, fresh numbers every replay (helpers: ops_cuda_util.h).
 *
 * The CUDA suite is inactive on a machine without a GPU.
 */
#define _POSIX_C_SOURCE 200809L

#include "tests/ops_cuda_util.h"

/* ------------------------------------------------------------------------------------------
 * Random
 * ---------------------------------------------------------------------------------------- */

static void test_random_ops_draw_the_host_numbers(void) {
  const int64_t sizes[] = {1, 7, 4097, (1 << 20) + 3};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
      op_case u = {.op = "random_uniform", .attrs = no_attrs(), .exact = true};
      u.attrs.dtype = kFloatTypes[t];
      u.attrs.low = -2;
      u.attrs.high = 3;
      set_sizes(&u.attrs, 1, &sizes[s]);
      run_case(&u);
      op_case n = {.op = "random_normal", .attrs = no_attrs(), .scale = SCALE_NORMAL};
      n.attrs.dtype = kFloatTypes[t];
      n.attrs.mean = 0.5;
      n.attrs.std = 2;
      set_sizes(&n.attrs, 1, &sizes[s]);
      run_case(&n);
      release_all();
    }
}

/* A captured random op reads its offset from the capture's slot: each replay draws what the
 * host draws at the generator state the replay reserved, and consecutive replays differ. */
static void test_captured_random_op_draws_fresh_numbers_each_replay(void) {
  static const char *const ops[] = {"random_uniform", "random_normal"};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (int o = 0; o < 2; ++o) {
      recap_dtype dtype = kFloatTypes[t];
      recap__op_call call;
      memset(&call, 0, sizeof call);
      call.def = recap__op_find(ops[o]);
      call.attrs.dtype = dtype;
      call.attrs.low = -1;
      call.attrs.high = 1;
      call.attrs.mean = 0;
      call.attrs.std = 1;
      set_sizes(&call.attrs, 2, (const int64_t[]){33, 1025});
      CHECK_OK(recap__op_infer(&call));
      size_t bytes = tensor_bytes(&call.outputs[0]);
      int64_t n = recap__tensor_numel(&call.outputs[0]);
      recap__op_call dev_call = call, host_call = call;
      void *dev = dev_alloc(bytes);
      dev_call.outputs[0].data = dev;
      void *ref = host_alloc(bytes), *got = host_alloc(bytes), *prev = host_alloc(bytes);
      host_call.outputs[0].data = ref;

      recap__graph *graph = NULL;
      recap__graph_exec *exec = NULL;
      recap__rng_graph_binding *binding = NULL;
      CHECK_OK(recap__rng_capture_begin(cuda_stream));
      CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_GLOBAL));
      recap_status st = recap__op_launch(&dev_call, cuda_stream);
      recap_status end = recap__capture_end(cuda_stream, &graph);
      if (st != RECAP_OK || end != RECAP_OK) recap__rng_capture_abort(cuda_stream);
      CHECK_OK(st);
      CHECK_OK(end);
      CHECK_OK(recap__rng_capture_end(cuda_stream, &binding));
      CU_ASSERT_PTR_NOT_NULL_FATAL(binding);
      CHECK_OK(cuda->graph_instantiate(graph, &exec));
      op_case scale_case = {.op = ops[o], .attrs = call.attrs, .scale = SCALE_NORMAL};
      for (int replay = 0; replay < 3; ++replay) {
        recap_rng_state state;
        CHECK_OK(recap_rng_get_state(kCudaDev, &state));
        poison_device(dev, bytes);
        CHECK_OK(recap__rng_replay_prepare(binding, cuda_stream));
        CHECK_OK(cuda->graph_launch(exec, cuda_stream));
        CHECK_OK(recap_stream_synchronize(cuda_stream));
        to_host(got, dev, bytes);
        CHECK_OK(recap_rng_set_state(kHostDev, &state));
        CHECK_OK(recap__op_launch(&host_call, host_stream));
        CHECK_OK(recap_stream_synchronize(host_stream));
        double *scale = o == 1 ? make_scale(&scale_case, &host_call, 0) : NULL;
        compare(ops[o], dtype, n, got, ref, scale, o == 0);
        if (replay > 0) CU_ASSERT_NOT_EQUAL(memcmp(got, prev, bytes), 0);
        memcpy(prev, got, bytes);
      }
      recap__rng_graph_binding_destroy(binding);
      cuda->graph_exec_destroy(exec);
      cuda->graph_destroy(graph);
      release_all();
    }
}

int main(void) {
  CU_pSuite gpu =
      test_add_cuda_suite("ops_cuda_random/vs_host", cuda_suite_init, cuda_suite_cleanup);
  CU_ADD_TEST(gpu, test_random_ops_draw_the_host_numbers);
  CU_ADD_TEST(gpu, test_captured_random_op_draws_fresh_numbers_each_replay);
  return test_run_all();
}
