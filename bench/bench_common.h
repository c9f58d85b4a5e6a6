/*
 * bench_common.h: what the GPU measuring programs in bench/ (bench_skinny, bench_gemm_algos,
 * bench_hopper_gemm) share. They are stand-alone programs, not library code: a failing CUDA or
 * recap call leaves nothing worth measuring, so CUDA_OK and RECAP_OK_OR_DIE print where and
 * why, and exit. Medians come from qsort with cmp_float; operands are uniform random 16-bit
 * values from one seeded generator, so a run's data is the same on every machine.
 */
#ifndef RECAP_TOOLS_BENCH_COMMON_H
#define RECAP_TOOLS_BENCH_COMMON_H

#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "include/recap.h"
#include "runtime/half.h"

#define CUDA_OK(expr)                                                                        \
  do {                                                                                       \
    cudaError_t e_ = (expr);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

#define RECAP_OK_OR_DIE(expr)                                                                  \
  do {                                                                                         \
    recap_status s_ = (expr);                                                                  \
    if (s_ != RECAP_OK) {                                                                      \
      fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #expr, recap_status_name(s_), \
              recap_last_error());                                                             \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

/* For qsort over floats, ascending. */
static inline int cmp_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* count f16 (bf16 false) or bf16 values, uniform in [-scale, scale), into device memory dev;
 * *seed advances (a linear congruential generator). */
static inline void fill_random_16bit(void *dev, bool bf16, size_t count, float scale,
                                     unsigned *seed) {
  uint16_t *host = (uint16_t *)malloc(count * sizeof *host);
  if (!host) exit(1);
  for (size_t i = 0; i < count; ++i) {
    *seed = *seed * 1664525u + 1013904223u;
    const float u = (float)(*seed >> 8) / 16777216.0f * 2.0f - 1.0f; /* [-1, 1) */
    host[i] = bf16 ? recap__f32_to_bf16(u * scale) : recap__f32_to_f16(u * scale);
  }
  CUDA_OK(cudaMemcpy(dev, host, count * sizeof *host, cudaMemcpyHostToDevice));
  free(host);
}

#endif
