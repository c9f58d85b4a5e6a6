/*
 * wgmma.cuh: the sm_90a warpgroup matrix multiply (wgmma) that hopper.cu runs:
 * shared-memory matrix descriptors, the fence / commit / wait that order it, and
 * wgmma.mma_async m64nNk16 with f32 accumulators (recap__wgmma_m64k16<N, T>).
 *
 * A wgmma is issued by the 4 warps of a warpgroup together, reads both operands from shared
 * memory through descriptors, and accumulates a 64 x N tile spread over the warpgroup's
 * registers: thread t (warp w = t / 32, lane l) holds, for each 8-column block i,
 * d[4i + 0..1] = row 16w + l/4, columns 8i + 2(l%4) + {0, 1}, and d[4i + 2..3] = the same
 * columns 8 rows further down. PTX names every accumulator register as its own operand, so
 * the register and constraint lists are spelled out, once per N (generated, not typed). The
 * instruction is asynchronous: the registers may be read only after recap__wgmma_wait, and
 * recap__wgmma_fence_operands keeps the compiler from moving accesses across it.
 *
 * Only compiled for sm_90a (wgmma does not exist in plain sm_90 or in PTX for later GPUs):
 * include this header from .cu files built with the sm_90a target alone (kernels/BUILD).
 */
#ifndef RECAP_KERNELS_HOPPER_WGMMA_CUH
#define RECAP_KERNELS_HOPPER_WGMMA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

/* The descriptor of a K-major operand tile in shared memory written by TMA with 128-byte
 * swizzling: rows of 64 16-bit elements (128 bytes), 8-row groups 1024 bytes apart, the
 * tile's base 1024-byte aligned. `addr` may be advanced by 32 bytes per 16-element K step
 * inside the 128-byte row: the hardware applies the swizzle to the final address. The leading
 * byte offset is unused for swizzled K-major layouts (1 by convention). */
static __device__ __forceinline__ uint64_t recap__wgmma_desc_k128(uint32_t addr) {
  uint64_t desc = (uint64_t)((addr & 0x3FFFFu) >> 4);
  desc |= (uint64_t)1 << 16;           /* leading byte offset >> 4 */
  desc |= (uint64_t)(1024 >> 4) << 32; /* stride byte offset >> 4: 8 rows of 128 bytes */
  desc |= (uint64_t)1 << 62;           /* layout: 128-byte swizzle */
  return desc;
}

/* Orders earlier register and shared-memory accesses before the next wgmma. */
static __device__ __forceinline__ void recap__wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

/* Closes the group of wgmmas issued since the last commit. */
static __device__ __forceinline__ void recap__wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

/* Waits until at most N committed groups are still running. */
template <int N>
static __device__ __forceinline__ void recap__wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* An empty asm that claims to read and write each accumulator: the compiler may not move
 * their uses across it (they are written asynchronously until the wait returns). */
template <int R>
static __device__ __forceinline__ void recap__wgmma_fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/* The accumulator operands of a m64nNk16 wgmma: its register list in the instruction
 * (RECAP__WGMMA_REGS_N, operands %0 .. %(N/2 - 1)) and the matching "+f" constraints. */
#define RECAP__WGMMA_REGS_128                                                        \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define RECAP__WGMMA_ACCS_128(d)                                                                  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

#define RECAP__WGMMA_REGS_192                                                        \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define RECAP__WGMMA_ACCS_192(d)                                                                  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),  \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),  \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),  \
      "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),  \
      "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),  \
      "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])

#define RECAP__WGMMA_REGS_256                                                                    \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                       \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "             \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "             \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "             \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "             \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "             \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define RECAP__WGMMA_ACCS_256(d)                                                                  \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),  \
      "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]),  \
      "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),  \
      "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]),  \
      "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),  \
      "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]),  \
      "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),          \
      "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]),         \
      "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]),         \
      "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]),         \
      "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

/* One wgmma.mma_async m64nNk16 with f32 accumulators and TYPE inputs ("f16" or "bf16"); the
 * descriptors are operands A and B, the accumulate-into-d flag (always set: the accumulators
 * start at zero) operand P. */
#define RECAP__WGMMA_ASM(N, TYPE, A, B, P)                                          \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P                              \
               ", 0;\n"                                                             \
               "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE      \
               " "                                                                  \
               "{" RECAP__WGMMA_REGS_##N "}, %" #A ", %" #B ", p, 1, 1, 0, 0;\n}\n" \
               : RECAP__WGMMA_ACCS_##N(d)                                           \
               : "l"(desc_a), "l"(desc_b), "r"(1))

/* d (64 x N, f32) += A (64 x 16, K-major) * B (N x 16, K-major), by descriptor; T is __half
 * or __nv_bfloat16, N 128, 192 or 256. */
template <int N, typename T>
static __device__ __forceinline__ void recap__wgmma_m64k16(float (&d)[N / 2], uint64_t desc_a,
                                                           uint64_t desc_b) {
  static_assert(N == 128 || N == 192 || N == 256, "no wrapper for this N");
  constexpr bool kF16 = std::is_same<T, __half>::value;
  static_assert(kF16 || std::is_same<T, __nv_bfloat16>::value, "16-bit inputs only");
  if constexpr (N == 128) {
    if constexpr (kF16)
      RECAP__WGMMA_ASM(128, "f16", 64, 65, 66);
    else
      RECAP__WGMMA_ASM(128, "bf16", 64, 65, 66);
  } else if constexpr (N == 192) {
    if constexpr (kF16)
      RECAP__WGMMA_ASM(192, "f16", 96, 97, 98);
    else
      RECAP__WGMMA_ASM(192, "bf16", 96, 97, 98);
  } else {
    if constexpr (kF16)
      RECAP__WGMMA_ASM(256, "f16", 128, 129, 130);
    else
      RECAP__WGMMA_ASM(256, "bf16", 128, 129, 130);
  }
}

#endif /* __CUDA_ARCH_FEAT_SM90_ALL */

#endif /* RECAP_KERNELS_HOPPER_WGMMA_CUH */
