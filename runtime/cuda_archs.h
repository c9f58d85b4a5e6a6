/*
 * cuda_archs.h: which GPU architectures this build carries code for (internal; CUDA builds).
 *
 * Defined in archs.cu, because only nvcc knows the list (__CUDA_ARCH_LIST__, set from the
 * -gencode flags that bazel/cuda.bzl derives from --define=cuda_archs).
 */
#ifndef RECAP_RUNTIME_CUDA_ARCHS_H
#define RECAP_RUNTIME_CUDA_ARCHS_H

#ifdef __cplusplus
extern "C" {
#endif

/* "sm_80 sm_90 compute_90": SASS for each listed architecture, and PTX for the highest one
 * (bazel/cuda.bzl embeds PTX for the highest only, so newer GPUs can JIT it). A static string;
 * never NULL, never fails. */
const char *recap__cuda_compiled_archs(void);

#ifdef __cplusplus
}
#endif

#endif
