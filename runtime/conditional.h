/*
 * conditional.h: the CUDA kernel that sets a WHILE node's condition (internal; CUDA builds).
 *
 * cudaGraphSetConditional is callable from device code only, so the backend's condition_set
 * (cuda_backend.c) records this one-thread kernel in the loop's body: it copies a device int,
 * which the body's own kernels computed, into the handle's value.
 */
#ifndef RECAP_RUNTIME_CONDITIONAL_H
#define RECAP_RUNTIME_CONDITIONAL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Launches the kernel on `cuda_stream` (a cudaStream_t) on the calling thread's current
 * device; returns the launch's cudaError_t as an int. */
int recap__cuda_launch_condition_set(unsigned long long handle, const int32_t *flag,
                                     void *cuda_stream);

#ifdef __cplusplus
}
#endif

#endif
