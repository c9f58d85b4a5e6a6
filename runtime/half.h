/*
 * half.h: f16 and bf16 storage <-> float conversions for host C code (internal).
 *
 * The host reference ops store f16/bf16 as raw uint16_t bits and compute in float. Each
 * conversion to 16 bits rounds to nearest, ties to even (as __float2half_rn and
 * __float2bfloat16_rn on CUDA), keeps NaN a (quiet) NaN and infinities infinite, and
 * produces subnormals for f16 where the value calls for them; conversions to float are exact.
 * All functions are static inline and pure, so any file may include this header.
 *
 *   uint16_t h = recap__f32_to_f16(0.1f);     // 0x2e66
 *   float back = recap__f16_to_f32(h);          // 0.0999755859375f
 *   float x = recap__load_f32(t.data, t.dtype, i);
 *   recap__store_f32(out.data, out.dtype, i, x);
 */
#ifndef RECAP_RUNTIME_HALF_H
#define RECAP_RUNTIME_HALF_H

#include <stdint.h>
#include <string.h>

#include "include/recap.h"

static inline uint32_t recap__f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float recap__f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline float recap__bf16_to_f32(uint16_t h) {
  return recap__f32_from_bits((uint32_t)h << 16);
}

static inline uint16_t recap__f32_to_bf16(float f) {
  uint32_t u = recap__f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
  /* Adding 0x7fff plus the lowest kept bit rounds to nearest with ties to even; a carry out
   * of the mantissa correctly bumps the exponent (up to infinity). */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static inline float recap__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return recap__f32_from_bits(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    /* Zero or subnormal: mant * 2^-24, exact in float. */
    float v = (float)mant * 0x1p-24f;
    return sign ? -v : v;
  }
  return recap__f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

static inline uint16_t recap__f32_to_f16(float f) {
  uint32_t u = recap__f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu)); /* NaN */
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to >= 65536: inf */
  if (abs < 0x38800000u) {
    /* Below the smallest normal f16 (2^-14): the result is a multiple of 2^-24. Shifting the
     * full 24-bit significand right and rounding the dropped bits to nearest even gives it;
     * rounding up into 0x400 yields the smallest normal, which is the right encoding too. */
    if (abs < 0x33000000u) return sign; /* below half of 2^-24: +-0 */
    uint32_t exp = abs >> 23;
    uint32_t sig = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp; /* 14..24: the value is sig * 2^(exp - 150) */
    uint32_t kept = sig >> shift;
    uint32_t rest = sig & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (kept & 1u))) kept += 1u;
    return (uint16_t)(sign | kept);
  }
  /* Normal: rebias the exponent (127 -> 15) and round 13 dropped bits to nearest even; a
   * carry propagates into the exponent, as it should. */
  uint32_t r = abs - 0x38000000u;
  r += 0xfffu + ((r >> 13) & 1u);
  return (uint16_t)(sign | (r >> 13));
}

/* Element `index` (in elements from base) of a float-typed buffer, as float. */
static inline float recap__load_f32(const void *base, recap_dtype dtype, int64_t index) {
  switch (dtype) {
    case RECAP_DTYPE_F16:
      return recap__f16_to_f32(((const uint16_t *)base)[index]);
    case RECAP_DTYPE_BF16:
      return recap__bf16_to_f32(((const uint16_t *)base)[index]);
    case RECAP_DTYPE_I32:
      return (float)((const int32_t *)base)[index];
    case RECAP_DTYPE_I64:
      return (float)((const int64_t *)base)[index];
    default:
      return ((const float *)base)[index];
  }
}

/* Stores v at element `index` of a float-typed buffer, rounding to nearest even. Integer
 * dtypes are not float storage; callers never pass them (infer rejects them). */
static inline void recap__store_f32(void *base, recap_dtype dtype, int64_t index, float v) {
  switch (dtype) {
    case RECAP_DTYPE_F16:
      ((uint16_t *)base)[index] = recap__f32_to_f16(v);
      break;
    case RECAP_DTYPE_BF16:
      ((uint16_t *)base)[index] = recap__f32_to_bf16(v);
      break;
    default:
      ((float *)base)[index] = v;
      break;
  }
}

#endif
