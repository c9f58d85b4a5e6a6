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
 * Work split: a block per segment, each with its own region of the peer buffers and its own
 * epoch (comm/peer_buffers.h). With a norm, a segment is a row (the norm needs the whole row's
 * sum of squares); without, a region's worth. A word is 4 data bytes (two f16/bf16 elements or
 * one f32; a row's odd last element is padded), sent as an 8-byte store with the epoch, so a
 * reader that sees the epoch sees the data. A thread keeps its words in registers from the
 * load of x to the norm's store. Elements are loaded one by one, so no tensor needs any
 * alignment: whether a call runs here depends only on its sizes, which every rank shares (the
 * ranks must all take this path or all take NCCL's). Sums are taken in rank order in f32 and
 * rounded once, so every rank holds the same bits. No fence and no atomic: a block's epoch
 * counter is its own, read at its start and stored at its end (the next call reads it after
 * this one completed).
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "comm/peer_buffers.h"
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"

namespace {

/* 1024 threads, 4 words each at most: more stores in flight than 512 (3.1 against 3.3 us a
 * call in a chain of captured calls on two H100s, rows of 4096 bf16). */
constexpr int kThreads = 1024;
/* Words a thread holds, so a block's region is kThreads * kWordsPerThread words. */
constexpr int kWordsPerThread = RECAP__PEER_BLOCK_WORDS / kThreads;
static_assert(kWordsPerThread * kThreads == RECAP__PEER_BLOCK_WORDS, "whole words per thread");
/* Nanoseconds of waiting after which a block also reads the abort word (a mapped host read
 * costs microseconds, so never on the fast path). */
constexpr unsigned long long kAbortCheckNs = 1000000ull;

struct oneshot_args {
  const void *x;
  void *y, *y_norm;
  const void *weight;
  int64_t segment; /* elements of a block's segment (a row with a norm) */
  int64_t count;   /* elements in all */
  float scale;     /* 1, or 1 / world for an average */
  float eps;
  recap__peer_view peers;
};

__device__ __forceinline__ void store_word(uint32_t *dst, uint32_t data, uint32_t epoch) {
  asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(dst), "r"(data), "r"(epoch)
               : "memory");
}

__device__ __forceinline__ uint2 load_word(const uint32_t *src) {
  uint2 v;
  asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];"
               : "=r"(v.x), "=r"(v.y)
               : "l"(src)
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

/* Block `block`'s region of sender `rank`'s slot for parity `epoch & 1`, in a buffer of
 * `world` senders: 8-byte words, two uint32 each. */
__device__ __forceinline__ uint32_t *region_of(void *buffer, uint32_t epoch, int world, int rank,
                                               int block) {
  const size_t words =
      (((size_t)(epoch & 1u) * (size_t)world + (size_t)rank) * RECAP__PEER_MAX_BLOCKS +
       (size_t)block) *
      RECAP__PEER_BLOCK_WORDS;
  return static_cast<uint32_t *>(buffer) + 2 * words;
}

/* A word of x (elements j * kElems on, n of them left in the segment): one 4-byte load when
 * the tensors are word-aligned (kAligned), else element by element with padding. */
template <typename T, bool kAligned>
__device__ __forceinline__ uint32_t load_x_word(const T *x, int j, int64_t n) {
  using W = word_of<T>;
  if (kAligned) return reinterpret_cast<const uint32_t *>(x)[j];
  return W::pack(x + (int64_t)j * W::kElems, (int)(n - (int64_t)j * W::kElems));
}

/* Stores word j's elements (as floats, rounded to T) into out. */
template <typename T, bool kAligned>
__device__ __forceinline__ void store_word_elements(T *out, int j, int64_t n,
                                                    const float (&v)[word_of<T>::kElems]) {
  using W = word_of<T>;
  if (kAligned) {
    T packed[W::kElems];
#pragma unroll
    for (int e = 0; e < W::kElems; ++e) packed[e] = recap__from_float<T>(v[e]);
    uint32_t bits;
    memcpy(&bits, packed, sizeof bits);
    reinterpret_cast<uint32_t *>(out)[j] = bits;
    return;
  }
#pragma unroll
  for (int e = 0; e < W::kElems; ++e) {
    const int64_t i = (int64_t)j * W::kElems + e;
    if (i < n) out[i] = recap__from_float<T>(v[e]);
  }
}

template <typename T, bool kNorm, bool kAligned>
__global__ void __launch_bounds__(kThreads) oneshot_kernel(oneshot_args a) {
  recap__pdl_begin();
  using W = word_of<T>;
  __shared__ float partial[kThreads / 32];
  __shared__ uint32_t epoch_shared;
  const recap__peer_view &v = a.peers;
  /* This block's epoch: its counter is this device's and only this block index touches it.
   * Read once, before thread 0 can store the new one. */
  if (threadIdx.x == 0) epoch_shared = *(volatile const uint32_t *)&v.counters[blockIdx.x] + 1u;
  const int64_t first = (int64_t)blockIdx.x * a.segment;
  const int64_t n = min(a.segment, a.count - first);
  const int words = (int)((n + W::kElems - 1) / W::kElems);
  const T *x = static_cast<const T *>(a.x) + first;
  T *y = static_cast<T *>(a.y) + first;
  /* This rank's words, loaded while thread 0 reads the epoch: the two round trips to memory
   * overlap instead of following each other. */
  uint32_t mine[kWordsPerThread];
#pragma unroll
  for (int k = 0; k < kWordsPerThread; ++k) {
    const int j = threadIdx.x + k * kThreads;
    mine[k] = j < words ? load_x_word<T, kAligned>(x, j, n) : 0u;
  }
  __syncthreads();
  const uint32_t epoch = epoch_shared;

  /* Push: this rank's words into its region of every peer's buffer. */
  for (int p = 0; p < v.world; ++p) {
    if (p == v.rank) continue;
    uint32_t *dst = region_of(v.peers[p], epoch, v.world, v.rank, blockIdx.x);
#pragma unroll
    for (int k = 0; k < kWordsPerThread; ++k) {
      const int j = threadIdx.x + k * kThreads;
      if (j < words) store_word(dst + 2 * j, mine[k], epoch);
    }
  }
  /* The norm's weight, loaded while the peers' words are on their way (0.4 us a call of the
   * 1.2 us the norm adds otherwise). */
  uint32_t gamma[kNorm ? kWordsPerThread : 1];
  if (kNorm) {
#pragma unroll
    for (int k = 0; k < kWordsPerThread; ++k) {
      const int j = threadIdx.x + k * kThreads;
      gamma[k] = j < words ? load_x_word<T, kAligned>(static_cast<const T *>(a.weight), j, n) : 0u;
    }
  }
  /* Gather: every rank's word in rank order (this rank's from registers), summed in f32, then
   * rounded to T once; the rounded values stay in registers for the norm. */
  bool aborted = false;
  float squares = 0.0f;
  float sum[kWordsPerThread][W::kElems];
#pragma unroll
  for (int k = 0; k < kWordsPerThread; ++k)
#pragma unroll
    for (int e = 0; e < W::kElems; ++e) sum[k][e] = 0.0f;
  for (int p = 0; p < v.world; ++p) {
    const uint32_t *src = region_of(v.peers[v.rank], epoch, v.world, p, blockIdx.x);
#pragma unroll
    for (int k = 0; k < kWordsPerThread; ++k) {
      const int j = threadIdx.x + k * kThreads;
      if (j >= words) continue;
      uint32_t w = mine[k];
      if (p != v.rank) {
        uint2 got = load_word(src + 2 * j);
        if (got.y != epoch && !aborted) {
          const unsigned long long since = global_ns();
          unsigned spins = 0;
          while ((got = load_word(src + 2 * j)).y != epoch) {
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
      for (int e = 0; e < W::kElems; ++e) sum[k][e] += W::element(w, e);
    }
  }
#pragma unroll
  for (int k = 0; k < kWordsPerThread; ++k) {
    const int j = threadIdx.x + k * kThreads;
    if (j >= words) continue;
#pragma unroll
    for (int e = 0; e < W::kElems; ++e) {
      /* Rounded as stored; a padding element is 0 and adds nothing. */
      sum[k][e] = recap__to_float(recap__from_float<T>(sum[k][e] * a.scale));
      squares = fmaf(sum[k][e], sum[k][e], squares);
    }
    store_word_elements<T, kAligned>(y, j, n, sum[k]);
  }
  if (threadIdx.x == 0) v.counters[blockIdx.x] = epoch;
  if (!kNorm) return;
  /* The row's sum of squares of the rounded sum, as rmsnorm reads it. */
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = squares;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int k = 0; k < kThreads / 32; ++k) total += partial[k];
  const float rstd = 1.0f / sqrtf(total / (float)n + a.eps);
  T *yn = static_cast<T *>(a.y_norm) + first;
#pragma unroll
  for (int k = 0; k < kWordsPerThread; ++k) {
    const int j = threadIdx.x + k * kThreads;
    if (j >= words) continue;
    const uint32_t g = gamma[k];
    float out[W::kElems];
#pragma unroll
    for (int e = 0; e < W::kElems; ++e) out[e] = sum[k][e] * rstd * W::element(g, e);
    store_word_elements<T, kAligned>(yn, j, n, out);
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
  const int64_t elems_per_word = 4 / (int64_t)recap_dtype_size(dtype);
  const int64_t block_elems = (int64_t)RECAP__PEER_BLOCK_WORDS * elems_per_word;
  /* A segment is a block's region at most: a row with a norm, else a region's worth. */
  const int64_t segment = norm ? x->shape[x->ndim - 1] : block_elems;
  if (segment <= 0 || segment > block_elems) return RECAP_OK;
  const int64_t blocks = (count + segment - 1) / segment;
  if (blocks > RECAP__PEER_MAX_BLOCKS) return RECAP_OK; /* too large: NCCL */
  recap__cuda_launch_range range(call->def->name);
  oneshot_args a = {};
  a.x = x->data;
  a.y = call->outputs[0].data;
  a.y_norm = norm ? call->outputs[1].data : nullptr;
  a.weight = norm ? call->inputs[1].data : nullptr;
  a.segment = segment;
  a.count = count;
  a.scale = call->attrs.causal ? 1.0f / (float)peers->world : 1.0f;
  a.eps = (float)call->attrs.eps;
  a.peers = *peers;
  /* Word loads and stores where every tensor and segment starts on a word: a choice of code
   * only, the same on every rank or not. */
  bool aligned = segment % elems_per_word == 0 && count % elems_per_word == 0;
  const void *const tensors[] = {a.x, a.y, a.y_norm, a.weight};
  for (const void *t : tensors) aligned = aligned && ((uintptr_t)t & 3u) == 0;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  RECAP_TRY(recap__cuda_dispatch_float(dtype, call->def->name, [&](auto tag) {
    using T = decltype(tag);
    const auto kernel =
        norm ? (aligned ? oneshot_kernel<T, true, true> : oneshot_kernel<T, true, false>)
             : (aligned ? oneshot_kernel<T, false, true> : oneshot_kernel<T, false, false>);
    RECAP_CUDA_TRY(recap__cuda_launch(kernel, (unsigned)blocks, kThreads, 0, stream, a));
    return RECAP_OK;
  }));
  *done = true;
  return RECAP_OK;
}
