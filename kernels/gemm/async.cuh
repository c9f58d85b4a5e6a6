/*
 * async.cuh: the sm_90 asynchronous-copy primitives our kernels share: mbarriers (a
 * shared-memory barrier whose phase completes when its arrivals AND the bytes it expects from
 * asynchronous copies have all come in), 1-D bulk copies and 2-D tensor (TMA) copies into
 * shared memory. The producer/consumer rings of the skinny GEMM (skinny.cu) and the
 * Hopper GEMM (hopper.cu) are built from these.
 *
 * Every function is a thin wrapper over one PTX instruction; the rules that matter are the
 * hardware's: an mbarrier's phase parity flips each time it completes, so a ring slot used for
 * the j-th time waits for parity j & 1; the bytes a phase expects are added by
 * mbar_arrive_expect_tx before (or while) the copies land.
 */
#ifndef RECAP_KERNELS_HOPPER_ASYNC_CUH
#define RECAP_KERNELS_HOPPER_ASYNC_CUH

#include <stdint.h>

/* The helpers exist for sm_90 passes only (an sm_80 pass would warn that they are unused). */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900

/* The 32-bit shared-state-space address of a pointer into shared memory. */
static __device__ __forceinline__ uint32_t recap__smem_addr(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void recap__mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

/* Makes the barriers' initialization visible to the asynchronous proxy (the copy engines)
 * before any copy signals them; followed by a block-wide barrier. */
static __device__ __forceinline__ void recap__mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

/* Arrives once and adds `bytes` to the transactions the current phase waits for. */
static __device__ __forceinline__ void recap__mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

static __device__ __forceinline__ void recap__mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/* Waits until the phase of the given parity has completed. */
static __device__ __forceinline__ void recap__mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

/* A box of a 2-D tensor map (cuTensorMapEncodeTiled) at element coordinates (c0 along the
 * innermost dimension, c1 along the outer one) into shared memory at dst, laid out and
 * swizzled as the map says; elements outside the tensor arrive as zeros, and the whole box's
 * bytes count on bar either way. `map` is the address of a __grid_constant__ kernel parameter. */
static __device__ __forceinline__ void recap__tma_load_2d(uint32_t dst, const void *map,
                                                          uint32_t bar, int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

/* recap__tma_load_2d into the same shared-memory offset of every CTA of the cluster in
 * cta_mask, signalling the mbarrier at bar's offset in each of them. */
static __device__ __forceinline__ void recap__tma_load_2d_multicast(uint32_t dst, const void *map,
                                                                    uint32_t bar, int32_t c0,
                                                                    int32_t c1, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}

/* This CTA's rank in its cluster. */
static __device__ __forceinline__ uint32_t recap__cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

/* Arrives once on the mbarrier at the shared-memory address `bar` of this CTA, as seen in the
 * CTA of the given cluster rank (this one included). */
static __device__ __forceinline__ void recap__mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n\t.reg .b32 remote;\n\t"
      "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t}" ::"r"(bar),
      "r"(rank)
      : "memory");
}

/* Every thread of every CTA of the cluster arrives, then waits for all the others. */
static __device__ __forceinline__ void recap__cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}

#endif /* sm_90 */

#endif /* RECAP_KERNELS_HOPPER_ASYNC_CUH */
