/*
 * cuda_or_exit.h: CUDA_OK(expr) for the GPU benchmark programs in tools/ (bench_skinny,
 * bench_gemm_algos). These are stand-alone measuring programs, not library code: a failing CUDA
 * call leaves nothing worth measuring, so they print where and why, and exit.
 */
#ifndef RECAP_TOOLS_CUDA_OR_EXIT_H
#define RECAP_TOOLS_CUDA_OR_EXIT_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CUDA_OK(expr)                                                                      \
  do {                                                                                     \
    cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

#endif
