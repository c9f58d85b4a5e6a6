/*
 * philox.h: the Philox4x32-10 counter-based generator and the conversions of its words to
 * floats, shared by host C code and CUDA kernels (internal).
 *
 * Everything here is a `static inline` function of its arguments (no globals), compiled as
 * C11 by the host and as __host__ __device__ by nvcc, so the host backend and the CUDA
 * kernels produce the same bits from the same (seed, offset, element index):
 *
 *   recap__philox4x32 w = recap__philox_draw(seed, offset, element / 4);
 *   uint32_t bits = w.v[element % 4];
 *
 * The counter layout is the contract of include/recap.h: key = {lo32(seed), hi32(seed)},
 * counter = {lo32(i / 4), hi32(i / 4), lo32(offset), hi32(offset)}.
 *
 * Philox4x32-10 is the generator of Salmon, Moraes, Dror and Shaw, "Parallel random numbers:
 * as easy as 1, 2, 3" (SC'11); the multipliers and Weyl constants below are the ones that
 * paper publishes, and tests/rng_test.c checks the published known-answer vectors.
 *
 * Where the seed and offset of a draw come from (recap__philox_args): in eager mode they are
 * passed by value. Inside a stream capture the kernel reads them from a device "slot" that
 * the graph's replay rewrites before every launch (runtime/rng.h), so each replay draws new
 * numbers. Kernels call recap__philox_resolve() once and then use the pair.
 */
#ifndef RECAP_RUNTIME_PHILOX_H
#define RECAP_RUNTIME_PHILOX_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define RECAP__PHILOX_FN __host__ __device__
#else
#define RECAP__PHILOX_FN
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Where a draw's seed and offset come from. slot == NULL: `seed` and `offset` hold them.
 * Otherwise slot points to two words {seed, base offset} in the memory of the device the
 * kernel runs on, and the draw's offset is slot[1] + slot_delta (the draws made earlier in
 * the same capture); `seed` and `offset` are then unused. */
typedef struct {
  uint64_t seed;
  uint64_t offset;
  const uint64_t *slot;
  uint64_t slot_delta;
} recap__philox_args;

/* Four 32-bit words: one Philox block (four consecutive elements of a draw). */
typedef struct {
  uint32_t v[4];
} recap__philox4x32;

/* Round multipliers and the key schedule's (Weyl sequence) increments. Macros, not an enum:
 * the values do not fit in an int. */
#define RECAP__PHILOX_M0 0xD2511F53u
#define RECAP__PHILOX_M1 0xCD9E8D57u
#define RECAP__PHILOX_W0 0x9E3779B9u
#define RECAP__PHILOX_W1 0xBB67AE85u

/* Reads the (seed, offset) pair of a draw; on the device this reads the slot, so it must run
 * in the kernel (in stream order after the replay's slot update), never in the launcher. */
static inline RECAP__PHILOX_FN void recap__philox_resolve(const recap__philox_args *args,
                                                          uint64_t *seed, uint64_t *offset) {
  if (args->slot) {
    *seed = args->slot[0];
    *offset = args->slot[1] + args->slot_delta;
  } else {
    *seed = args->seed;
    *offset = args->offset;
  }
}

/* One Philox round: two 32x32->64 multiplies, the high halves mixed with the other words and
 * the key. */
static inline RECAP__PHILOX_FN recap__philox4x32 recap__philox_round(recap__philox4x32 ctr,
                                                                     uint32_t k0, uint32_t k1) {
  uint64_t p0 = (uint64_t)RECAP__PHILOX_M0 * ctr.v[0];
  uint64_t p1 = (uint64_t)RECAP__PHILOX_M1 * ctr.v[2];
  recap__philox4x32 out;
  out.v[0] = (uint32_t)(p1 >> 32) ^ ctr.v[1] ^ k0;
  out.v[1] = (uint32_t)p1;
  out.v[2] = (uint32_t)(p0 >> 32) ^ ctr.v[3] ^ k1;
  out.v[3] = (uint32_t)p0;
  return out;
}

/* Philox4x32 with 10 rounds; the key advances by (W0, W1) between rounds. */
static inline RECAP__PHILOX_FN recap__philox4x32 recap__philox4x32_10(recap__philox4x32 ctr,
                                                                      uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += RECAP__PHILOX_W0;
      k1 += RECAP__PHILOX_W1;
    }
    ctr = recap__philox_round(ctr, k0, k1);
  }
  return ctr;
}

/* Block `block` (elements 4*block .. 4*block+3) of the draw at `offset` under `seed`. */
static inline RECAP__PHILOX_FN recap__philox4x32 recap__philox_draw(uint64_t seed, uint64_t offset,
                                                                    uint64_t block) {
  recap__philox4x32 ctr;
  ctr.v[0] = (uint32_t)block;
  ctr.v[1] = (uint32_t)(block >> 32);
  ctr.v[2] = (uint32_t)offset;
  ctr.v[3] = (uint32_t)(offset >> 32);
  return recap__philox4x32_10(ctr, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Uniform float in [0, 1): the top 24 bits scaled by 2^-24. Exact, so identical everywhere. */
static inline RECAP__PHILOX_FN float recap__philox_unit_float(uint32_t bits) {
  return (float)(bits >> 8) * 0x1p-24f;
}

/* Uniform float in [lo, hi), for finite lo < hi with hi - lo finite. fmaf rounds once on both
 * host and device (a separate multiply and add would be fused by nvcc but not by the host
 * compiler, and the results would differ). Rounding can land exactly on hi when the range is
 * wide relative to its ends; such values are moved to the float just below hi so the
 * interval stays half-open. */
static inline RECAP__PHILOX_FN float recap__philox_uniform(uint32_t bits, float lo, float hi) {
  float x = fmaf(recap__philox_unit_float(bits), hi - lo, lo);
  return x < hi ? x : nextafterf(hi, lo);
}

/* Two independent standard normals from two words by the Box-Muller transform. u1 is in
 * (0, 1] (so its logarithm is finite), u2 in [0, 1). With 24-bit uniforms the largest
 * magnitude is sqrt(2 * 24 * ln 2) ~= 5.77. logf, cosf and sinf differ by a few ulp between
 * glibc and CUDA (both without fast-math), so normals agree to a few ulp, not bit for bit. */
static inline RECAP__PHILOX_FN void recap__philox_box_muller(uint32_t a, uint32_t b, float *z0,
                                                             float *z1) {
  float u1 = (float)((a >> 8) + 1u) * 0x1p-24f;
  float u2 = (float)(b >> 8) * 0x1p-24f;
  float r = sqrtf(-2.0f * logf(u1));
  float theta = 6.28318530717958647692f * u2;
  *z0 = r * cosf(theta);
  *z1 = r * sinf(theta);
}

/* The four normals of one block with mean and standard deviation: elements 4c and 4c+1 use
 * words 0 and 1 of block c, elements 4c+2 and 4c+3 use words 2 and 3. So element i of a
 * draw never depends on the draw's length. */
static inline RECAP__PHILOX_FN void recap__philox_normal4(recap__philox4x32 w, float mean,
                                                          float std, float out[4]) {
  float z[4];
  recap__philox_box_muller(w.v[0], w.v[1], &z[0], &z[1]);
  recap__philox_box_muller(w.v[2], w.v[3], &z[2], &z[3]);
  for (int k = 0; k < 4; ++k) out[k] = fmaf(z[k], std, mean);
}

#ifdef __cplusplus
}
#endif

#endif
