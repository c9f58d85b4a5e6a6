/*
 * raw_impl.h: the raw-backend services beyond plain alloc/free, per runtime backend (internal
 * to allocator/; raw_backend.c plugs them into recap__raw_runtime_init).
 *
 * Every function takes the recap__raw_runtime as ctx and follows the contract of the
 * recap__raw_backend slot of the same name (allocator.h).
 * - host_vmm.c: virtual memory emulated over mmap, as strict as CUDA's (see there).
 * - host_async.c: a stream-ordered "pool" whose frees run in stream order.
 * - cuda_raw.c (CUDA builds only): the driver's virtual memory API reached through
 *   cudaGetDriverEntryPointByVersion (recap links no libcuda, so binaries start where no
 *   driver is installed), the device's default memory pool, and memory IPC.
 */
#ifndef RECAP_ALLOCATOR_RAW_IMPL_H
#define RECAP_ALLOCATOR_RAW_IMPL_H

#include "allocator/allocator.h"

recap_status recap__host_vmm_granularity(void *ctx, size_t *out);
recap_status recap__host_vmm_reserve(void *ctx, size_t bytes, void **base);
recap_status recap__host_vmm_release(void *ctx, void *base, size_t bytes);
recap_status recap__host_vmm_map(void *ctx, void *addr, size_t bytes);
recap_status recap__host_vmm_unmap(void *ctx, void *addr, size_t bytes);
/* Whether `addr` lies in a mapped chunk of the emulation (tests use it to check what the
 * allocator unmapped). */
bool recap__host_vmm_is_mapped(const void *addr);

recap_status recap__host_async_alloc(void *ctx, size_t bytes, recap_stream *stream, void **out);
recap_status recap__host_async_free(void *ctx, void *ptr, recap_stream *stream);
recap_status recap__host_async_reserved(void *ctx, size_t *current, size_t *peak);
recap_status recap__host_async_trim(void *ctx);

#if RECAP_WITH_CUDA
/* Whether the driver offers the virtual memory API (looked up once). */
bool recap__cuda_vmm_available(void);
recap_status recap__cuda_vmm_granularity(void *ctx, size_t *out);
recap_status recap__cuda_vmm_reserve(void *ctx, size_t bytes, void **base);
recap_status recap__cuda_vmm_release(void *ctx, void *base, size_t bytes);
recap_status recap__cuda_vmm_map(void *ctx, void *addr, size_t bytes);
recap_status recap__cuda_vmm_unmap(void *ctx, void *addr, size_t bytes);

recap_status recap__cuda_async_alloc(void *ctx, size_t bytes, recap_stream *stream, void **out);
recap_status recap__cuda_async_free(void *ctx, void *ptr, recap_stream *stream);
recap_status recap__cuda_async_reserved(void *ctx, size_t *current, size_t *peak);
recap_status recap__cuda_async_trim(void *ctx);

/* Pinned host memory (cudaHostAlloc, portable to every device) for the pinned allocator. */
recap_status recap__cuda_host_alloc(size_t bytes, void **out);
void recap__cuda_host_free(void *ptr);

recap_status recap__cuda_ipc_handle(void *ctx, void *ptr, recap_ipc_mem_handle *out);
recap_status recap__cuda_ipc_open(int device, const recap_ipc_mem_handle *handle, void **out);
recap_status recap__cuda_ipc_close(int device, void *ptr);
#endif

#endif
