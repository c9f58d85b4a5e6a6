/*
 * collective.cu: the one-shot all_reduce (comm/peer_buffers.h has the protocol), with the
 * RMSNorm of the sum folded in when the op has a norm weight.
 *
 * A decode step's all_reduce is a few KiB a rank (one row of the hidden state per sequence),
 * where NCCL's ring costs about 6.5 us in a captured chain on two H100s/H200s: its latency, not
 * bandwidth. Here each rank's kernel writes its slice into every peer's buffer once and adds
 * what the peers wrote into its own: about 3.3 us in the same chain, and 4.5 us with the norm
 * that follows it, which otherwise is a kernel of its own (about 4 us in a chain).
 *
 * Work split: a block per segment. With a norm, a segment is a row (the norm needs the whole
 * row's sum of squares); without, 1024 words. A word is 4 data bytes (two f16/bf16 elements or
 * one f32; a row's odd last element is padded), sent as an 8-byte store with the call's epoch,
 * so a reader that sees the epoch sees the data. Elements are loaded one by one, so no tensor
 * needs any alignment: whether a call runs here depends only on its sizes, which every rank
 * shares (the ranks must all take this path or all take NCCL's).
 *
 * The epoch is one per call: every block reads counters[0] + 1, and the last block to finish
 * (counters[1] counts arrivals) stores it, so the next call on the stream reads it. Sums are
 * taken in rank order in f32 and rounded once, so every rank holds the same bits.
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "comm/peer_buffers.h"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"
#include "runtime/error.h"

namespace {

constexpr int kThreads = 512;
/* Words of a segment without a norm. */
constexpr int kPlainSegmentWords = 1024;
/* Nanoseconds of waiting after which a block also reads the abort word (a mapped host read
 * costs microseconds, so never on the fast path). */
constexpr unsigned long long kAbortCheckNs = 1000000ull;

struct oneshot_args {
  const void *x;
  void *y, *y_norm;
  const void *weight;
  int64_t segment;       /* elements of a segment (a row with a norm) */
  int64_t count;         /* elements in all */
  int segment_words;     /* words of a segment's slot */
  float scale;           /* 1, or 1 / world for an average */
  float eps;
  recap__peer_view peers;
};

__device__ __forceinline__ void store_word(uint32_t *dst, uint32_t data, uint32_t epoch) {
  asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(dst), "r"(data), "r"(epoch)
               : "memory");
}

__device__ __forceinline__ uint2 load_word(const uint32_t *src) {
  uint2 v;
  asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(src)
               : "memory");
  return v;
}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Elements of T in a word, and a word's elements as floats and back. */
template <typename T>
struct word_of {
  static constexpr int kElems = 4 / (int)sizeof(T);
  static __device__ __forceinline__ uint32_t pack(const T *p, int n) {
    uint32_t w = 0;
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      T v = e < n ? p[e] : T(0.0f);
      uint32_t bits = 0;
      memcpy(&bits, &v, sizeof v);
      w |= bits << (e * 8 * (int)sizeof(T));
    }
    return w;
  }
  static __device__ __forceinline__ float element(uint32_t w, int e) {
    T v;
    const uint32_t bits = w >> (e * 8 * (int)sizeof(T));
    memcpy(&v, &bits, sizeof v);
    return recap__to_float(v);
  }
};

/* The slot of sender `rank` for parity `epoch & 1` in a buffer of `slot_words` words a sender. */
__device__ __forceinline__ uint32_t *slot_of(void *buffer, uint32_t epoch, int world, int rank,
                                             size_t slot_words) {
  const size_t words_per_sender = slot_words * 2; /* 8 bytes a word */
  return static_cast<uint32_t *>(buffer) +
         ((size_t)(epoch & 1u) * (size_t)world + (size_t)rank) * words_per_sender;
}

template <typename T, bool kNorm>
__global__ void __launch_bounds__(kThreads) oneshot_kernel(oneshot_args a) {
  recap__pdl_begin();
  using W = word_of<T>;
  __shared__ uint32_t epoch_shared;
  __shared__ float partial[kThreads / 32];
  const recap__peer_view &v = a.peers;
  if (threadIdx.x == 0) epoch_shared = *(volatile uint32_t *)&v.counters[0] + 1u;
  __syncthreads();
  const uint32_t epoch = epoch_shared;
  const size_t slot_words = v.slot_bytes / 4;
  const int64_t first = (int64_t)blockIdx.x * a.segment;
  const int64_t n = min(a.segment, a.count - first);
  const int words = (int)((n + W::kElems - 1) / W::kElems);
  const size_t base = (size_t)blockIdx.x * (size_t)a.segment_words;
  const T *x = static_cast<const T *>(a.x) + first;
  T *y = static_cast<T *>(a.y) + first;

  /* Push: this rank's words into its slot of every peer's buffer. */
  for (int j = threadIdx.x; j < words; j += kThreads) {
    const uint32_t w = W::pack(x + (int64_t)j * W::kElems, (int)(n - (int64_t)j * W::kElems));
    for (int p = 0; p < v.world; ++p)
      if (p != v.rank)
        store_word(slot_of(v.peers[p], epoch, v.world, v.rank, slot_words) + 2 * (base + j), w,
                   epoch);
  }
  /* Gather: every rank's word in rank order (this rank's from x), summed in f32. */
  bool aborted = false;
  float squares = 0.0f;
  for (int j = threadIdx.x; j < words; j += kThreads) {
    const int64_t e0 = (int64_t)j * W::kElems;
    const int live = (int)min((int64_t)W::kElems, n - e0);
    float sum[W::kElems];
#pragma unroll
    for (int e = 0; e < W::kElems; ++e) sum[e] = 0.0f;
    for (int p = 0; p < v.world; ++p) {
      uint32_t w;
      if (p == v.rank) {
        w = W::pack(x + e0, live);
      } else {
        const uint32_t *src =
            slot_of(v.peers[v.rank], epoch, v.world, p, slot_words) + 2 * (base + j);
        uint2 got = load_word(src);
        if (got.y != epoch && !aborted) {
          const unsigned long long since = global_ns();
          unsigned spins = 0;
          while ((got = load_word(src)).y != epoch) {
            if ((++spins & 255u) == 0 && global_ns() - since > kAbortCheckNs &&
                *(volatile const uint32_t *)v.abort_word != 0) {
              aborted = true;
              break;
            }
          }
        }
        w = got.x;
      }
#pragma unroll
      for (int e = 0; e < W::kElems; ++e) sum[e] += W::element(w, e);
    }
#pragma unroll
    for (int e = 0; e < W::kElems; ++e)
      if (e < live) {
        const T r = recap__from_float<T>(sum[e] * a.scale);
        y[e0 + e] = r;
        const float f = recap__to_float(r);
        squares = fmaf(f, f, squares);
      }
  }
  if (kNorm) {
    /* The row's sum of squares of the rounded sum, as rmsnorm reads it. */
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = squares;
    __syncthreads();
    float total = 0.0f;
#pragma unroll
    for (int k = 0; k < kThreads / 32; ++k) total += partial[k];
    const float rstd = 1.0f / sqrtf(total / (float)n + a.eps);
    const T *weight = static_cast<const T *>(a.weight);
    T *yn = static_cast<T *>(a.y_norm) + first;
    for (int64_t i = threadIdx.x; i < n; i += kThreads)
      yn[i] = recap__from_float<T>(recap__to_float(y[i]) * rstd * recap__to_float(weight[i]));
  }
  /* The last block to finish hands the epoch to the next call. */
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&v.counters[1], 1u) == gridDim.x - 1) {
      v.counters[1] = 0;
      v.counters[0] = epoch;
    }
  }
}

}  // namespace

extern "C" recap_status recap__cuda_all_reduce_oneshot(const recap__op_call *call,
                                                      const recap__peer_view *peers,
                                                      void *cuda_stream, bool *done) {
  *done = false;
  const recap_tensor *x = &call->inputs[0];
  const recap_dtype dtype = x->dtype;
  if (!peers || peers->world < 2 || call->attrs.peer_buffers_off ||
      (dtype != RECAP_DTYPE_F32 && dtype != RECAP_DTYPE_F16 && dtype != RECAP_DTYPE_BF16))
    return RECAP_OK;
  const bool norm = call->num_outputs > 1;
  const int64_t count = recap__tensor_numel(x);
  if (count == 0) return RECAP_OK;
  const int elems_per_word = 4 / (int)recap_dtype_size(dtype);
  int64_t segment, blocks;
  int segment_words;
  if (norm) {
    segment = x->shape[x->ndim - 1];
    if (segment <= 0) return RECAP_OK;
    blocks = count / segment;
    segment_words = (int)((segment + elems_per_word - 1) / elems_per_word);
  } else {
    segment = (int64_t)kPlainSegmentWords * elems_per_word;
    blocks = (count + segment - 1) / segment;
    segment_words = kPlainSegmentWords;
  }
  if (blocks > RECAP__PEER_MAX_BLOCKS ||
      (size_t)blocks * (size_t)segment_words * 4 > peers->slot_bytes)
    return RECAP_OK; /* too large for the slot: NCCL */
  recap__cuda_launch_range range(call->def->name);
  oneshot_args a = {};
  a.x = x->data;
  a.y = call->outputs[0].data;
  a.y_norm = norm ? call->outputs[1].data : nullptr;
  a.weight = norm ? call->inputs[1].data : nullptr;
  a.segment = segment;
  a.count = count;
  a.segment_words = segment_words;
  a.scale = call->attrs.causal ? 1.0f / (float)peers->world : 1.0f;
  a.eps = (float)call->attrs.eps;
  a.peers = *peers;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  RECAP_TRY(recap__cuda_dispatch_float(dtype, call->def->name, [&](auto tag) {
    using T = decltype(tag);
    RECAP_CUDA_TRY(recap__cuda_launch(norm ? oneshot_kernel<T, true> : oneshot_kernel<T, false>,
                                      (unsigned)blocks, kThreads, 0, stream, a));
    return RECAP_OK;
  }));
  *done = true;
  return RECAP_OK;
}
