/*
 * ops_host_decode_advance_test.c: the host backend's decode_advance against hand-worked
 * steps: running rows move one position on and are repacked, their sampled tokens become the
 * next ids, a row whose next position has no KV block stops alone, empty rows stay as they
 * are, and a running row without a sampled token faults, leaving every row as it was.
 * Helpers: ops_host_util.h.
 */
#include <string.h>

#include "kernels/op.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/host_fault.h"
#include "runtime/host_graph.h"
#include "tests/ops_host_util.h"

enum { ROWS = 4, BLOCKS = 2, WIDTH = RECAP_SEQ_BLOCKS + BLOCKS, BLOCK_SIZE = 4 };

static int32_t *row_of(recap_tensor *seqs, int b) { return (int32_t *)seqs->data + b * WIDTH; }

static void set_row(recap_tensor *seqs, int b, int len, int q_start, int q_len, int out_index,
                    int block0, int block1) {
  int32_t *r = row_of(seqs, b);
  memset(r, 0, WIDTH * sizeof *r);
  r[RECAP_SEQ_LEN] = len;
  r[RECAP_SEQ_Q_START] = q_start;
  r[RECAP_SEQ_Q_LEN] = q_len;
  r[RECAP_SEQ_OUT_INDEX] = out_index;
  r[RECAP_SEQ_BLOCKS] = block0;
  r[RECAP_SEQ_BLOCKS + 1] = block1;
}

static recap__op_call advance_call(recap_tensor ids, recap_tensor seqs, recap_tensor tokens) {
  recap__op_call call = new_call("decode_advance");
  add_input(&call, ids);
  add_input(&call, seqs);
  add_input(&call, tokens);
  call.attrs.start = BLOCK_SIZE;
  CHECK_OK(recap__op_infer(&call));
  CU_ASSERT_PTR_EQUAL(call.outputs[0].data, ids.data);
  return call;
}

/* Row 0: a prefill chunk of 3 tokens (positions 2..4) at Q_START 0; its next position 5 is in
 * block column 1 (held: 7). Row 1: empty. Row 2: decode at position 7, next position 8 =
 * column 2, past the table: it stops. Row 3: decode at position 3, next 4 = column 1, held.
 * Rows 0 and 3 run on, repacked to ids slots 0 and 1. */
static void test_decode_advance_moves_running_rows_and_stops_the_full_one(void) {
  free_tracked();
  recap_tensor ids = tensor(RECAP_DTYPE_I32, SHAPE(6), CONTIGUOUS);
  recap_tensor seqs = tensor(RECAP_DTYPE_I32, SHAPE(ROWS, WIDTH), CONTIGUOUS);
  recap_tensor tokens = tensor(RECAP_DTYPE_I32, SHAPE(ROWS), CONTIGUOUS);
  for (int i = 0; i < 6; ++i) set(&ids, i, 100 + i);
  set_row(&seqs, 0, 5, 0, 3, 0, 3, 7);
  set_row(&seqs, 1, 0, 0, 0, 0, 0, 0);
  set_row(&seqs, 2, 8, 3, 1, 4, 1, 2);
  set_row(&seqs, 3, 4, 4, 1, 9, 5, 6);
  int32_t sampled[ROWS] = {11, -1, 22, 33};
  memcpy(tokens.data, sampled, sizeof sampled);
  recap__op_call call = advance_call(ids, seqs, tokens);
  CHECK_OK(recap__op_launch(&call, stream));
  CHECK_OK(recap_stream_synchronize(stream));

  const int32_t *r0 = row_of(&seqs, 0), *r1 = row_of(&seqs, 1), *r2 = row_of(&seqs, 2),
                *r3 = row_of(&seqs, 3);
  CU_ASSERT_EQUAL(r0[RECAP_SEQ_LEN], 6);
  CU_ASSERT_EQUAL(r0[RECAP_SEQ_Q_START], 0);
  CU_ASSERT_EQUAL(r0[RECAP_SEQ_Q_LEN], 1);
  CU_ASSERT_EQUAL(r0[RECAP_SEQ_OUT_INDEX], 1);
  CU_ASSERT_EQUAL(r1[RECAP_SEQ_Q_LEN], 0);
  CU_ASSERT_EQUAL(r1[RECAP_SEQ_LEN], 0);
  CU_ASSERT_EQUAL(r2[RECAP_SEQ_Q_LEN], 0); /* stopped: no block for position 8 */
  CU_ASSERT_EQUAL(r2[RECAP_SEQ_LEN], 8);
  CU_ASSERT_EQUAL(r2[RECAP_SEQ_OUT_INDEX], 4);
  CU_ASSERT_EQUAL(r3[RECAP_SEQ_LEN], 5);
  CU_ASSERT_EQUAL(r3[RECAP_SEQ_Q_START], 1); /* repacked after the stopped row */
  CU_ASSERT_EQUAL(r3[RECAP_SEQ_Q_LEN], 1);
  CU_ASSERT_EQUAL(r3[RECAP_SEQ_OUT_INDEX], 10);
  CU_ASSERT_EQUAL(r3[RECAP_SEQ_BLOCKS + 1], 6); /* the block table is the host's */
  const int32_t want_ids[6] = {11, 33, 102, 103, 104, 105};
  CU_ASSERT_EQUAL(memcmp(ids.data, want_ids, sizeof want_ids), 0);
}

/* A block column of -1 is an unallocated block: the row stops there even inside the table. */
static void test_decode_advance_stops_at_an_unallocated_block(void) {
  free_tracked();
  recap_tensor ids = tensor(RECAP_DTYPE_I32, SHAPE(1), CONTIGUOUS);
  recap_tensor seqs = tensor(RECAP_DTYPE_I32, SHAPE(1, WIDTH), CONTIGUOUS);
  recap_tensor tokens = tensor(RECAP_DTYPE_I32, SHAPE(1), CONTIGUOUS);
  set(&ids, 0, 5);
  set(&tokens, 0, 7);
  set_row(&seqs, 0, 4, 0, 1, 2, 0, -1);
  recap__op_call call = advance_call(ids, seqs, tokens);
  CHECK_OK(recap__op_launch(&call, stream));
  CHECK_OK(recap_stream_synchronize(stream));
  CU_ASSERT_EQUAL(row_of(&seqs, 0)[RECAP_SEQ_Q_LEN], 0);
  CU_ASSERT_EQUAL(row_of(&seqs, 0)[RECAP_SEQ_LEN], 4);
  CU_ASSERT_EQUAL(get(&ids, 0), 5);
}

/* Captured once, the op replays as a decode loop: each replay moves the row on by one until
 * its blocks run out, with no graph update. */
static void test_decode_advance_captured_once_steps_until_the_blocks_run_out(void) {
  free_tracked();
  recap_tensor ids = tensor(RECAP_DTYPE_I32, SHAPE(1), CONTIGUOUS);
  recap_tensor seqs = tensor(RECAP_DTYPE_I32, SHAPE(1, WIDTH), CONTIGUOUS);
  recap_tensor tokens = tensor(RECAP_DTYPE_I32, SHAPE(1), CONTIGUOUS);
  set_row(&seqs, 0, 1, 0, 1, 0, 4, 9);
  recap__op_call call = advance_call(ids, seqs, tokens);
  recap__graph_exec *exec = capture_launches((recap__op_call *const[]){&call}, 1);
  /* Positions 1..7 fit the two blocks of 4 rows; the step that would need position 8 stops. */
  for (int step = 0; step < 9; ++step) {
    set(&tokens, 0, 50 + step);
    CHECK_OK(stream->backend->graph_launch(exec, stream));
    CHECK_OK(recap_stream_synchronize(stream));
    const int32_t *r = row_of(&seqs, 0);
    int running = step < 7;
    CU_ASSERT_EQUAL(r[RECAP_SEQ_Q_LEN], running);
    CU_ASSERT_EQUAL(r[RECAP_SEQ_LEN], running ? 2 + step : 8);
    CU_ASSERT_EQUAL(r[RECAP_SEQ_OUT_INDEX], running ? 1 + step : 7);
    CU_ASSERT_EQUAL(get(&ids, 0), 50 + (running ? step : 6));
  }
  stream->backend->graph_exec_destroy(exec);
}

static void test_decode_advance_running_row_without_token_faults(void) {
  free_tracked();
  recap_tensor ids = tensor(RECAP_DTYPE_I32, SHAPE(2), CONTIGUOUS);
  recap_tensor seqs = tensor(RECAP_DTYPE_I32, SHAPE(2, WIDTH), CONTIGUOUS);
  recap_tensor tokens = tensor(RECAP_DTYPE_I32, SHAPE(2), CONTIGUOUS);
  set_row(&seqs, 0, 2, 0, 1, 0, 0, 1);
  set_row(&seqs, 1, 3, 1, 1, 0, 2, 3);
  set(&tokens, 0, 4);
  set(&tokens, 1, -1);
  recap__op_call call = advance_call(ids, seqs, tokens);
  CHECK_STATUS(recap__op_launch(&call, stream), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("sampled token is -1");
  recap__host_backend_reset_fault_for_testing();
  CU_ASSERT_EQUAL(row_of(&seqs, 0)[RECAP_SEQ_LEN], 2); /* nothing moved */
}

static void test_decode_advance_refuses_bad_shapes(void) {
  free_tracked();
  recap_tensor ids = tensor(RECAP_DTYPE_I32, SHAPE(1), CONTIGUOUS);
  recap_tensor seqs = tensor(RECAP_DTYPE_I32, SHAPE(2, WIDTH), CONTIGUOUS);
  recap_tensor tokens = tensor(RECAP_DTYPE_I32, SHAPE(2), CONTIGUOUS);
  recap__op_call call = new_call("decode_advance");
  add_input(&call, ids);
  add_input(&call, seqs);
  add_input(&call, tokens);
  call.attrs.start = BLOCK_SIZE;
  CHECK_STATUS(recap__op_infer(&call), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("fewer tokens");
  recap_tensor narrow = tensor(RECAP_DTYPE_I32, SHAPE(1, RECAP_SEQ_BLOCKS), CONTIGUOUS);
  call = new_call("decode_advance");
  add_input(&call, ids);
  add_input(&call, narrow);
  add_input(&call, tensor(RECAP_DTYPE_I32, SHAPE(1), CONTIGUOUS));
  call.attrs.start = BLOCK_SIZE;
  CHECK_STATUS(recap__op_infer(&call), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("no block-table columns");
}

int main(void) {
  CU_pSuite s = test_add_suite("ops_decode_advance/host", suite_init, suite_cleanup);
  CU_ADD_TEST(s, test_decode_advance_moves_running_rows_and_stops_the_full_one);
  CU_ADD_TEST(s, test_decode_advance_stops_at_an_unallocated_block);
  CU_ADD_TEST(s, test_decode_advance_captured_once_steps_until_the_blocks_run_out);
  CU_ADD_TEST(s, test_decode_advance_running_row_without_token_faults);
  CU_ADD_TEST(s, test_decode_advance_refuses_bad_shapes);
  return test_run_all();
}
