/*
 * ops_cuda_fault_test.c: device faults on bad device-resident values.
 *
 * Values that only the device sees (an embedding id, a KV-cache position, an attention
 * length, a rope position out of range) must fault the device instead of reading or writing
 * out of bounds; since a fault kills the CUDA context, each such case runs in a child process
 * (this binary re-executed with --fault <op>) that must see RECAP_STATUS_DEVICE_ERROR
 * (helpers: ops_cuda_util.h).
 *
 * The CUDA suite is inactive on a machine without a GPU.
 */
#define _POSIX_C_SOURCE 200809L

#include "tests/ops_cuda_util.h"

/* ------------------------------------------------------------------------------------------
 * Device faults on bad device-resident values (child processes)
 * ---------------------------------------------------------------------------------------- */

/* Copies n bytes to a new device buffer; NULL on failure (the child reports it). */
static void *child_upload(const void *src, size_t n) {
  void *p = NULL;
  if (cuda->mem_alloc(0, n, &p) != RECAP_OK) return NULL;
  if (cuda->memcpy_async(p, src, n, cuda_stream) != RECAP_OK) return NULL;
  return p;
}

/* In the child: launches `op` with one device-resident value out of range and reports what
 * the launch and the following synchronize return. Exit 0 only for a sticky device fault. */
static int run_fault_child(const char *op) {
  if (cuda_suite_init() != 0) {
    fprintf(stderr, "child: no CUDA stream: %s\n", recap_last_error());
    return 2;
  }
  static const float data[64] = {0.5f};
  recap__op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find(op);
  if (!call.def) return 2;
  const int32_t bad_id[3] = {1, 10, 2}; /* 10 rows in the table */
  const int32_t bad_pos = 3, bad_len = 5, negative = -1;
  if (strcmp(op, "embedding") == 0) {
    call.num_inputs = 2;
    call.inputs[0] =
        (recap_tensor){child_upload(data, 40 * sizeof(float)), RECAP_DTYPE_F32, 2, {10, 4}, {4, 1}};
    call.inputs[1] =
        (recap_tensor){child_upload(bad_id, sizeof bad_id), RECAP_DTYPE_I32, 1, {3}, {1}};
  } else if (strcmp(op, "kv_append") == 0) {
    /* Two rows at position 3 of a 4-row cache. */
    call.num_inputs = 3;
    call.inputs[0] = (recap_tensor){
        child_upload(data, 32 * sizeof(float)), RECAP_DTYPE_F32, 4, {1, 4, 1, 8}, {32, 8, 8, 1}};
    call.inputs[1] = (recap_tensor){
        child_upload(data, 16 * sizeof(float)), RECAP_DTYPE_F32, 4, {1, 2, 1, 8}, {16, 8, 8, 1}};
    call.inputs[2] =
        (recap_tensor){child_upload(&bad_pos, sizeof bad_pos), RECAP_DTYPE_I32, 1, {1}, {1}};
  } else if (strcmp(op, "attention") == 0) {
    /* A valid length of 5 for 4 keys. */
    call.num_inputs = 4;
    call.inputs[0] = (recap_tensor){
        child_upload(data, 8 * sizeof(float)), RECAP_DTYPE_F32, 4, {1, 1, 1, 8}, {8, 8, 8, 1}};
    for (int i = 1; i < 3; ++i)
      call.inputs[i] = (recap_tensor){
          child_upload(data, 32 * sizeof(float)), RECAP_DTYPE_F32, 4, {1, 1, 4, 8}, {32, 32, 8, 1}};
    call.inputs[3] =
        (recap_tensor){child_upload(&bad_len, sizeof bad_len), RECAP_DTYPE_I32, 1, {1}, {1}};
  } else if (strcmp(op, "rope") == 0) {
    call.num_inputs = 2;
    call.attrs.rope_base = 10000;
    call.inputs[0] = (recap_tensor){
        child_upload(data, 8 * sizeof(float)), RECAP_DTYPE_F32, 3, {1, 1, 8}, {8, 8, 1}};
    call.inputs[1] =
        (recap_tensor){child_upload(&negative, sizeof negative), RECAP_DTYPE_I32, 1, {1}, {1}};
  } else {
    return 2;
  }
  for (int i = 0; i < call.num_inputs; ++i)
    if (!call.inputs[i].data) return 2;
  if (recap__op_infer(&call) != RECAP_OK) {
    fprintf(stderr, "child: infer failed: %s\n", recap_last_error());
    return 2;
  }
  if (strcmp(op, "kv_append") == 0) {
    call.outputs[0].data = call.inputs[0].data;
  } else if (cuda->mem_alloc(0, 256 * sizeof(float), &call.outputs[0].data) != RECAP_OK) {
    return 2;
  }
  recap_status launched = recap__op_launch(&call, cuda_stream);
  recap_status synced = recap_stream_synchronize(cuda_stream);
  printf("child %s: launch %s, synchronize %s\n", op, recap_status_name(launched),
         recap_status_name(synced));
  return launched == RECAP_OK && synced == RECAP_STATUS_DEVICE_ERROR ? 0 : 1;
}

static void test_out_of_range_device_values_fault_the_device(void) {
  static const char *const ops[] = {"embedding", "kv_append", "attention", "rope"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i) {
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
      char *child_argv[] = {"ops_cuda_fault_test", "--fault", (char *)ops[i], NULL};
      execv("/proc/self/exe", child_argv);
      _exit(127);
    }
    int wstatus = 0;
    CU_ASSERT_EQUAL_FATAL(waitpid(pid, &wstatus, 0), pid);
    bool faulted = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
    if (!faulted)
      fprintf(stderr, "\n  %s with an out-of-range device value: child %s %d\n", ops[i],
              WIFEXITED(wstatus) ? "exited with" : "killed by signal",
              WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WTERMSIG(wstatus));
    CU_ASSERT_TRUE(faulted);
  }
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--fault") == 0) return run_fault_child(argv[2]);
  CU_pSuite gpu = test_add_cuda_suite("ops_cuda_fault/device", cuda_suite_init, cuda_suite_cleanup);
  CU_ADD_TEST(gpu, test_out_of_range_device_values_fault_the_device);
  return test_run_all();
}
