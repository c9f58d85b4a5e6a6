/*
 * ops_cuda_decode_advance_test.c: the CUDA decode_advance against the host reference on the
 * same random step metadata (more rows than one chunk of the kernel's block, so the running
 * count carries across chunks; rows running, empty, and stopping at a full table or an
 * unallocated block), exactly, ids and seqs alike; then captured once and replayed as a loop.
 * Helpers: ops_cuda_util.h.
 */
#include "tests/ops_cuda_util.h"

enum { BLOCKS = 3, WIDTH = RECAP_SEQ_BLOCKS + BLOCKS, BLOCK_SIZE = 4 };

static void fill_rows(int32_t *seqs, int32_t *tokens, int rows, uint32_t seed) {
  test_rng rng;
  test_rng_init(&rng);
  for (uint32_t i = 0; i < seed; ++i) test_rng_next(&rng);
  int q_start = 0;
  for (int b = 0; b < rows; ++b) {
    int32_t *r = seqs + b * WIDTH;
    memset(r, 0, WIDTH * sizeof *r);
    int kind = (int)(test_rng_next(&rng) % 4); /* 0 empty, 1-3 running */
    tokens[b] = kind ? (int32_t)(test_rng_next(&rng) % 50000) : -1;
    if (!kind) continue;
    int q_len = 1 + (int)(test_rng_next(&rng) % 3);
    r[RECAP_SEQ_LEN] = q_len + (int)(test_rng_next(&rng) % (BLOCKS * BLOCK_SIZE - q_len + 1));
    r[RECAP_SEQ_Q_START] = q_start;
    r[RECAP_SEQ_Q_LEN] = q_len;
    r[RECAP_SEQ_OUT_INDEX] = (int)(test_rng_next(&rng) % 100);
    q_start += q_len;
    for (int j = 0; j < BLOCKS; ++j)
      r[RECAP_SEQ_BLOCKS + j] = test_rng_next(&rng) % 5 ? (int)(test_rng_next(&rng) % 1000) : -1;
  }
}

static void run_both(int rows, int ids_len, uint32_t seed) {
  size_t seq_bytes = (size_t)rows * WIDTH * sizeof(int32_t);
  int32_t *seqs_h = host_alloc(seq_bytes), *tokens_h = host_alloc((size_t)rows * 4);
  int32_t *ids_h = host_alloc((size_t)ids_len * 4), *got = host_alloc(seq_bytes);
  fill_rows(seqs_h, tokens_h, rows, seed);
  for (int i = 0; i < ids_len; ++i) ids_h[i] = 7 * i;
  int32_t *seqs_d = dev_alloc(seq_bytes), *tokens_d = dev_alloc((size_t)rows * 4),
          *ids_d = dev_alloc((size_t)ids_len * 4);
  to_device(seqs_d, seqs_h, seq_bytes);
  to_device(tokens_d, tokens_h, (size_t)rows * 4);
  to_device(ids_d, ids_h, (size_t)ids_len * 4);

  recap__op_call call = {.def = recap__op_find("decode_advance"), .num_inputs = 3};
  call.attrs.start = BLOCK_SIZE;
  call.inputs[0] = (recap_tensor){.dtype = RECAP_DTYPE_I32, .ndim = 1, .shape = {ids_len}};
  call.inputs[1] = (recap_tensor){.dtype = RECAP_DTYPE_I32, .ndim = 2, .shape = {rows, WIDTH}};
  call.inputs[2] = (recap_tensor){.dtype = RECAP_DTYPE_I32, .ndim = 1, .shape = {rows}};
  for (int i = 0; i < 3; ++i) recap__tensor_set_contiguous(&call.inputs[i]);
  recap__op_call host_call = call, dev_call = call;
  host_call.inputs[0].data = ids_h, host_call.inputs[1].data = seqs_h;
  host_call.inputs[2].data = tokens_h;
  dev_call.inputs[0].data = ids_d, dev_call.inputs[1].data = seqs_d;
  dev_call.inputs[2].data = tokens_d;
  CHECK_OK(recap__op_infer(&host_call));
  CHECK_OK(recap__op_infer(&dev_call));
  CHECK_OK(recap__op_launch(&host_call, host_stream));
  CHECK_OK(recap_stream_synchronize(host_stream));
  CHECK_OK(recap__op_launch(&dev_call, cuda_stream));
  to_host(got, seqs_d, seq_bytes);
  CU_ASSERT_EQUAL(memcmp(got, seqs_h, seq_bytes), 0);
  to_host(got, ids_d, (size_t)ids_len * 4);
  CU_ASSERT_EQUAL(memcmp(got, ids_h, (size_t)ids_len * 4), 0);
}

static void test_decode_advance_matches_host_across_chunks(void) {
  run_both(5, 5, 1);
  run_both(300, 300, 2); /* more rows than the kernel's block of 256 */
  run_both(64, 700, 3);
  run_both(1000, 1000, 4);
  release_all();
}

/* One captured launch replays step after step: the row runs until its table is full. */
static void test_decode_advance_captured_loop_matches_host(void) {
  int32_t seqs_h[WIDTH] = {0}, ids_h[1] = {0}, token_h[1] = {42}, got[WIDTH];
  seqs_h[RECAP_SEQ_LEN] = 1, seqs_h[RECAP_SEQ_Q_LEN] = 1;
  for (int j = 0; j < BLOCKS; ++j) seqs_h[RECAP_SEQ_BLOCKS + j] = j;
  int32_t *seqs_d = dev_alloc(sizeof seqs_h), *ids_d = dev_alloc(4), *token_d = dev_alloc(4);
  to_device(seqs_d, seqs_h, sizeof seqs_h);
  to_device(token_d, token_h, 4);
  recap__op_call call = {.def = recap__op_find("decode_advance"), .num_inputs = 3};
  call.attrs.start = BLOCK_SIZE;
  call.inputs[0] = (recap_tensor){ids_d, RECAP_DTYPE_I32, 1, {1}, {1}};
  call.inputs[1] = (recap_tensor){seqs_d, RECAP_DTYPE_I32, 2, {1, WIDTH}, {WIDTH, 1}};
  call.inputs[2] = (recap_tensor){token_d, RECAP_DTYPE_I32, 1, {1}, {1}};
  CHECK_OK(recap__op_infer(&call));
  CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(recap__op_launch(&call, cuda_stream));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(cuda_stream, &graph));
  recap__graph_exec *exec = NULL;
  CHECK_OK(cuda->graph_instantiate(graph, &exec));
  cuda->graph_destroy(graph);
  for (int step = 0; step < 2 * BLOCKS * BLOCK_SIZE; ++step)
    CHECK_OK(cuda->graph_launch(exec, cuda_stream));
  to_host(got, seqs_d, sizeof got);
  to_host(ids_h, ids_d, 4);
  CU_ASSERT_EQUAL(got[RECAP_SEQ_LEN], BLOCKS * BLOCK_SIZE);
  CU_ASSERT_EQUAL(got[RECAP_SEQ_Q_LEN], 0);
  CU_ASSERT_EQUAL(got[RECAP_SEQ_OUT_INDEX], BLOCKS * BLOCK_SIZE - 1);
  CU_ASSERT_EQUAL(ids_h[0], 42);
  cuda->graph_exec_destroy(exec);
  release_all();
}

int main(void) {
  CU_pSuite gpu =
      test_add_cuda_suite("ops_cuda_decode_advance/vs_host", cuda_suite_init, cuda_suite_cleanup);
  CU_ADD_TEST(gpu, test_decode_advance_matches_host_across_chunks);
  CU_ADD_TEST(gpu, test_decode_advance_captured_loop_matches_host);
  return test_run_all();
}
