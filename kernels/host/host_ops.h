/*
 * host_ops.h: the host reference implementations (recap__op_def.run_host) of the non-GEMM
 * ops (internal to kernels/).
 *
 * Each runs synchronously on the calling thread (the host backend's launch_host calls it, in
 * stream order or from a graph replay), on a call that passed recap__op_infer and has its
 * tensors bound to host memory. They compute in float with double accumulators for sums and
 * norms, and read and write f16/bf16 through runtime/half.h. The semantics documented per
 * entry point in kernels/cuda_ops.h are what these compute.
 *
 * Failure: a bad value found in device memory at run time (an embedding id or a KV-cache
 * position out of range, a row of the paged ops' step metadata that breaks its rules) returns
 * RECAP_STATUS_INVALID_ARGUMENT naming the op and the value, which the host backend turns into a
 * sticky device fault, as a trapped CUDA kernel does. Nothing is written to the output in that
 * case.
 */
#ifndef RECAP_KERNELS_HOST_HOST_OPS_H
#define RECAP_KERNELS_HOST_HOST_OPS_H

#include "kernels/op.h"
#include "kernels/rope.h"

/* RECAP_STATUS_INTERNAL naming the op when a byte of the call's state is not zero. */
recap_status recap__host_call_state_check(const recap__op_call *call);

recap_status recap__host_unary(const recap__op_call *call);
recap_status recap__host_binary(const recap__op_call *call);

recap_status recap__host_softmax(const recap__op_call *call);
recap_status recap__host_layernorm(const recap__op_call *call);
recap_status recap__host_rmsnorm(const recap__op_call *call);
recap_status recap__host_reduce_last(const recap__op_call *call);

recap_status recap__host_copy_strided(const recap__op_call *call);
recap_status recap__host_concat(const recap__op_call *call);
recap_status recap__host_fill(const recap__op_call *call);
recap_status recap__host_embedding(const recap__op_call *call);
recap_status recap__host_rope(const recap__op_call *call);
/* One head of x rotated at `position` (kernels/rope.h): its Dh elements are x_step apart from
 * element x_at of x; the result goes to elements out_at .. out_at + Dh - 1 of `out` (unit
 * stride, out_dtype). Every pair is read before it is written, so out may be x itself. rope and
 * paged_rope_kv_write share it. */
void recap__host_rope_row(const recap__rope_freqs *freqs, int64_t head_dim, int64_t position,
                          const recap_tensor *x, int64_t x_at, int64_t x_step, void *out,
                          recap_dtype out_dtype, int64_t out_at);

recap_status recap__host_kv_append(const recap__op_call *call);
recap_status recap__host_attention(const recap__op_call *call);
recap_status recap__host_decode_advance(const recap__op_call *call);

recap_status recap__host_seq_positions(const recap__op_call *call);
recap_status recap__host_seq_last_tokens(const recap__op_call *call);
recap_status recap__host_paged_kv_write(const recap__op_call *call);
recap_status recap__host_paged_rope_kv_write(const recap__op_call *call);
recap_status recap__host_paged_attention(const recap__op_call *call);
recap_status recap__host_paged_rope_attention(const recap__op_call *call);

recap_status recap__host_argmax(const recap__op_call *call);
recap_status recap__host_sample(const recap__op_call *call);

recap_status recap__host_random(const recap__op_call *call);

#endif
