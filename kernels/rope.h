/*
 * rope.h: the rotary embedding's attributes (defined in rope.c), frequencies, angles and
 * rotation, one definition for every op that rotates (rope, paged_rope_kv_write), its host
 * reference (kernels/host/shape.c, kernels/host/paged.c) and its CUDA kernel (kernels/shape.cu,
 * kernels/paged.cu), so that all of them compute the same f32 angle bit for bit (internal).
 *
 * Why f32 and not exact: a model made from a checkpoint is compared with transformers, whose
 * rotary embedding computes its angles in f32 whatever the model's dtype (its float64
 * reference too: it casts inv_freq and the positions to f32 before the product). An exact
 * angle differs from that by up to position x 2^-24 radians (about 1e-4 at position 2000),
 * which would show in every layer, so recap repeats transformers' f32 steps, each rounded
 * once as PyTorch's CPU kernels round them:
 *
 *   e = f32(2i) / f32(Dh);   inv_freq = 1 / f32(theta)^e   (the power computed in double and
 *                                                          rounded once: PyTorch's own f32
 *                                                          pow may differ by an ulp)
 *   Llama 3 scaling (transformers' rope_type "llama3"), with orig = original_max_positions,
 *   low/high = low_freq_factor/high_freq_factor, and the thresholds divided in double and
 *   rounded to f32, as Python computes them and PyTorch receives them:
 *     wavelen = (1 / inv_freq) * f32(2 pi)   (PyTorch evaluates `c / t` as reciprocal(t) * c)
 *     wavelen < f32(orig / high):  inv_freq unchanged (high frequencies)
 *     wavelen > f32(orig / low):   inv_freq / factor  (low frequencies)
 *     otherwise, s = ((1 / wavelen) * orig - low) / f32(high - low) and
 *                inv_freq = ((1 - s) * inv_freq) / factor + s * inv_freq
 *   angle = inv_freq * f32(position), in f32; cos and sin of it rounded to f32.
 *
 * The device code writes each f32 operation as an _rn intrinsic, so that nvcc cannot fuse a
 * multiply and an add into one FMA; the host build is C11, where GCC contracts nothing.
 */
#ifndef RECAP_KERNELS_ROPE_H
#define RECAP_KERNELS_ROPE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/op.h"

#if defined(__CUDACC__)
#define RECAP__ROPE_FN static __host__ __device__ __forceinline__
#else
#define RECAP__ROPE_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The rotation's attribute entries, for ops whose attributes are these and more
 * (paged_rope_attention adds the score scale); recap__rope_attrs is these alone. */
#define RECAP__ROPE_ATTR_DEFS                                                                      \
  {"theta",                                                                                        \
   RECAP_ATTR_FLOAT,                                                                               \
   offsetof(recap__op_attrs, rope_theta),                                                          \
   false,                                                                                          \
   0,                                                                                              \
   "the base theta as a number (10000, 500000, 1e6, 10000.5): pair i's frequency is "              \
   "theta^(-2i/Dh); 0 or absent: `base`, else 10000. Give theta or base, not both"},               \
      {"base",                                                                                     \
       RECAP_ATTR_INT,                                                                             \
       offsetof(recap__op_attrs, rope_base),                                                       \
       false,                                                                                      \
       0,                                                                                          \
       "theta as an integer, the older spelling; 0 or absent: `theta`, else 10000"},               \
      {"llama3",                                                                                   \
       RECAP_ATTR_BOOL,                                                                            \
       offsetof(recap__op_attrs, rope_llama3),                                                     \
       false,                                                                                      \
       0,                                                                                          \
       "Llama 3 frequency scaling (transformers' rope_type llama3); needs the next four"},         \
      {"factor",                                                                                   \
       RECAP_ATTR_FLOAT,                                                                           \
       offsetof(recap__op_attrs, rope_factor),                                                     \
       false,                                                                                      \
       0,                                                                                          \
       "llama3: low frequencies are divided by it (> 0)"},                                         \
      {"low_freq_factor",                                                                          \
       RECAP_ATTR_FLOAT,                                                                           \
       offsetof(recap__op_attrs, rope_low_freq_factor),                                            \
       false,                                                                                      \
       0,                                                                                          \
       "llama3: wavelengths above original_max_positions / low_freq_factor are low (> 0)"},        \
      {"high_freq_factor",                                                                         \
       RECAP_ATTR_FLOAT,                                                                           \
       offsetof(recap__op_attrs, rope_high_freq_factor),                                           \
       false,                                                                                      \
       0,                                                                                          \
       "llama3: wavelengths below original_max_positions / high_freq_factor are high and kept "    \
       "(> low_freq_factor)"},                                                                     \
  {                                                                                                \
    "original_max_positions", RECAP_ATTR_INT, offsetof(recap__op_attrs, rope_original_max), false, \
        0,                                                                                         \
        "llama3: the context length of pretraining (> 0; a config's "                              \
        "original_max_position_embeddings)"                                                        \
  }

/* The attributes of a rotating op: theta (or base) and the Llama 3 scaling (rope.c). */
extern const recap__attr_def recap__rope_attrs[];

/* Checks them in the op's infer: theta or base (not both) above 1, the Llama 3 parameters all
 * given with llama3 and none without it, each a finite f32; an error names the attribute. */
recap_status recap__rope_check_attrs(recap__op_call *call);

#ifdef __cplusplus
}
#endif

/* theta when neither `theta` nor `base` is given. */
#define RECAP__ROPE_DEFAULT_THETA 10000.0

/* The per-call constants of the angles, in the f32 values the steps above use. */
typedef struct {
  float theta;
  int llama3;
  float factor, low_freq_factor, original_max;
  float low_freq_wavelen, high_freq_wavelen, smooth_range, two_pi;
} recap__rope_freqs;

/* theta: the attribute `theta` if given, else `base` if given, else 10000 (rope_infer refuses
 * both). */
static inline double recap__rope_theta(const recap__op_attrs *a) {
  if (a->rope_theta != 0) return a->rope_theta;
  return a->rope_base != 0 ? (double)a->rope_base : RECAP__ROPE_DEFAULT_THETA;
}

/* From attributes that rope_infer accepted (so every value below fits an f32). */
static inline recap__rope_freqs recap__rope_freqs_of(const recap__op_attrs *a) {
  recap__rope_freqs f;
  f.theta = (float)recap__rope_theta(a);
  f.llama3 = a->rope_llama3;
  f.factor = f.low_freq_factor = f.original_max = 0;
  f.low_freq_wavelen = f.high_freq_wavelen = f.smooth_range = f.two_pi = 0;
  if (a->rope_llama3) {
    f.factor = (float)a->rope_factor;
    f.low_freq_factor = (float)a->rope_low_freq_factor;
    f.original_max = (float)a->rope_original_max;
    f.low_freq_wavelen = (float)((double)a->rope_original_max / a->rope_low_freq_factor);
    f.high_freq_wavelen = (float)((double)a->rope_original_max / a->rope_high_freq_factor);
    f.smooth_range = (float)(a->rope_high_freq_factor - a->rope_low_freq_factor);
    f.two_pi = (float)6.283185307179586;
  }
  return f;
}

RECAP__ROPE_FN float recap__rope_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

RECAP__ROPE_FN float recap__rope_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

RECAP__ROPE_FN float recap__rope_add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

RECAP__ROPE_FN float recap__rope_sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

/* inv_freq of pair i (0 <= i < head_dim / 2). */
RECAP__ROPE_FN float recap__rope_inv_freq(const recap__rope_freqs *f, int64_t i, int64_t head_dim) {
  const float e = recap__rope_div((float)(2 * i), (float)head_dim);
  const float inv = recap__rope_div(1.0f, (float)pow((double)f->theta, (double)e));
  if (!f->llama3) return inv;
  const float wavelen = recap__rope_mul(recap__rope_div(1.0f, inv), f->two_pi);
  if (wavelen < f->high_freq_wavelen) return inv;
  if (wavelen > f->low_freq_wavelen) return recap__rope_div(inv, f->factor);
  const float ratio = recap__rope_mul(recap__rope_div(1.0f, wavelen), f->original_max);
  const float s = recap__rope_div(recap__rope_sub(ratio, f->low_freq_factor), f->smooth_range);
  const float scaled = recap__rope_div(recap__rope_mul(recap__rope_sub(1.0f, s), inv), f->factor);
  return recap__rope_add(scaled, recap__rope_mul(s, inv));
}

/* cos and sin of the angle inv_freq x position (a pair's inv_freq does not depend on the
 * position: a kernel may compute it while the position is still being read). */
RECAP__ROPE_FN void recap__rope_cos_sin_at(float inv_freq, int64_t position, float *c, float *s) {
  const double angle = (double)recap__rope_mul(inv_freq, (float)position);
  double sn, cs;
  sincos(angle, &sn, &cs); /* one range reduction for both (glibc's and CUDA's) */
  *c = (float)cs;
  *s = (float)sn;
}

/* cos and sin of pair i's angle at `position`. */
RECAP__ROPE_FN void recap__rope_cos_sin(const recap__rope_freqs *f, int64_t i, int64_t head_dim,
                                        int64_t position, float *c, float *s) {
  recap__rope_cos_sin_at(recap__rope_inv_freq(f, i, head_dim), position, c, s);
}

/* Rotates the pair (x1, x2) = (element i, element i + Dh / 2) of a head by (c, s):
 * x1 c - x2 s and x2 c + x1 s, in double. A product of two f32s is exact there, so the only
 * rounding is the sum's (with or without an FMA), and then once to f32: the host and the GPU
 * agree bit for bit. */
RECAP__ROPE_FN void recap__rope_rotate(float x1, float x2, float c, float s, float *o1, float *o2) {
  *o1 = (float)((double)x1 * c - (double)x2 * s);
  *o2 = (float)((double)x2 * c + (double)x1 * s);
}

#endif
