/*
 * decode_advance.cu: the CUDA half of decode_advance (kernels/decode_advance.c). One block
 * walks the rows of `seqs` a chunk of blockDim.x rows at a time; a running row's new rank
 * (where its one token goes in the next step's packed ids) is the count of running rows
 * before it, an exclusive scan within the chunk plus the chunks before.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"
#include "runtime/cuda_check.h"

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    decode_advance_kernel(int32_t *__restrict__ ids, int32_t *__restrict__ seqs,
                          const int32_t *__restrict__ tokens, int64_t rows, int64_t row_stride,
                          int64_t blocks, int64_t block_size) {
  recap__pdl_begin();
  __shared__ int warp_sums[kThreads / 32];
  __shared__ int carry;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int64_t base = 0; base < rows; base += kThreads) {
    const int64_t b = base + threadIdx.x;
    int32_t *row = b < rows ? seqs + b * row_stride : nullptr;
    bool running = false, stops = false;
    if (row && row[RECAP_SEQ_Q_LEN] > 0) {
      /* A row with tokens must have sampled one; what the host backend refuses, trap. */
      if (tokens[b] < 0 || row[RECAP_SEQ_LEN] < 0) __trap();
      const int64_t column = (int64_t)row[RECAP_SEQ_LEN] / block_size;
      running = column < blocks && row[RECAP_SEQ_BLOCKS + column] >= 0;
      stops = !running;
    }
    /* Exclusive scan of `running` over the chunk: within warps by ballot, then the warps. */
    const unsigned ballot = __ballot_sync(0xffffffffu, running);
    const int before_in_warp = __popc(ballot & ((1u << lane) - 1u));
    if (lane == 0) warp_sums[warp] = __popc(ballot);
    __syncthreads();
    int before = carry + before_in_warp;
    for (int w = 0; w < warp; ++w) before += warp_sums[w];
    if (running) {
      row[RECAP_SEQ_Q_START] = before;
      row[RECAP_SEQ_Q_LEN] = 1;
      row[RECAP_SEQ_LEN] += 1;
      row[RECAP_SEQ_OUT_INDEX] += 1;
      ids[before] = tokens[b];
    } else if (stops) {
      row[RECAP_SEQ_Q_LEN] = 0;
      row[RECAP_SEQ_Q_START] = 0;
    }
    __syncthreads();
    if (threadIdx.x == 0)
      for (int w = 0; w < kThreads / 32; ++w) carry += warp_sums[w];
    __syncthreads();
  }
}

}  // namespace

extern "C" recap_status recap__cuda_decode_advance(const recap__op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *ids = &call->inputs[0], *seqs = &call->inputs[1], *tokens = &call->inputs[2];
  if (call->outputs[0].data != ids->data)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': the output must be 'ids' itself (same data pointer)",
                      call->def->name);
  const int64_t rows = seqs->shape[0];
  if (rows == 0) return RECAP_OK;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  RECAP_CUDA_TRY(recap__cuda_launch(decode_advance_kernel, dim3(1), dim3(kThreads), 0, stream,
                                    static_cast<int32_t *>(ids->data),
                                    static_cast<int32_t *>(seqs->data),
                                    static_cast<const int32_t *>(tokens->data), rows,
                                    seqs->strides[0], seqs->shape[1] - RECAP_SEQ_BLOCKS,
                                    (int64_t)call->attrs.start));
  return RECAP_OK;
}
