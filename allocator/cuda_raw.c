/*
 * cuda_raw.c: the allocator's CUDA services beyond cudaMalloc/cudaFree (see raw_impl.h):
 * - virtual memory for expandable segments: cuMemAddressReserve, cuMemCreate + cuMemMap +
 *   cuMemSetAccess per chunk, cuMemUnmap, cuMemAddressFree. These are driver API calls;
 *   recap links no libcuda (binaries must start where no driver is installed), so they are
 *   looked up once through cudaGetDriverEntryPointByVersion and the feature is absent when
 *   any is missing;
 * - the device's default memory pool for backend:cudaMallocAsync (cudaMallocAsync /
 *   cudaFreeAsync), with its release threshold raised so the pool caches between
 *   synchronizations as a caching allocator does (PyTorch does the same);
 * - pinned host memory (cudaHostAlloc) for the pinned host allocator (pinned.c);
 * - memory IPC of cudaMalloc allocations (cudaIpcGetMemHandle / OpenMemHandle).
 *
 * Calls that act on "the current device" set it for the call and restore the caller's
 * afterwards, as runtime/cuda_backend.c does.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "allocator/raw_impl.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(recap_ipc_mem_handle),
               "recap_ipc_mem_handle must hold a cudaIpcMemHandle_t exactly");

/* ------------------------------------------------------------------------------------------
 * The current device, set for one call
 * ---------------------------------------------------------------------------------------- */

typedef struct {
  int previous;
  bool changed;
} device_scope;

static recap_status scope_enter(device_scope *s, int device) {
  s->changed = false;
  RECAP_CUDA_TRY(cudaGetDevice(&s->previous));
  if (s->previous != device) {
    RECAP_CUDA_TRY(cudaSetDevice(device));
    s->changed = true;
  }
  return RECAP_OK;
}

static void scope_exit(device_scope *s) {
  if (s->changed) cudaSetDevice(s->previous);
}

/* ------------------------------------------------------------------------------------------
 * Driver entry points
 * ---------------------------------------------------------------------------------------- */

typedef CUresult (*granularity_fn)(size_t *, const CUmemAllocationProp *,
                                   CUmemAllocationGranularity_flags);
typedef CUresult (*reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*address_free_fn)(CUdeviceptr, size_t);
typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                              unsigned long long);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                           unsigned long long);
typedef CUresult (*set_access_fn)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);

static struct {
  granularity_fn granularity;
  reserve_fn reserve;
  address_free_fn address_free;
  create_fn create;
  map_fn map;
  set_access_fn set_access;
  unmap_fn unmap;
  release_fn release;
  bool ok;
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void *entry(const char *name) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  /* 12000: the ABI of these functions as of CUDA 12.0 (unchanged since 10.2). */
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return fn;
}

static void load_driver(void) {
  drv.granularity = (granularity_fn)entry("cuMemGetAllocationGranularity");
  drv.reserve = (reserve_fn)entry("cuMemAddressReserve");
  drv.address_free = (address_free_fn)entry("cuMemAddressFree");
  drv.create = (create_fn)entry("cuMemCreate");
  drv.map = (map_fn)entry("cuMemMap");
  drv.set_access = (set_access_fn)entry("cuMemSetAccess");
  drv.unmap = (unmap_fn)entry("cuMemUnmap");
  drv.release = (release_fn)entry("cuMemRelease");
  drv.ok = drv.granularity && drv.reserve && drv.address_free && drv.create && drv.map &&
           drv.set_access && drv.unmap && drv.release;
}

bool recap__cuda_vmm_available(void) {
  pthread_once(&drv_once, load_driver);
  return drv.ok;
}

static CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

/* ------------------------------------------------------------------------------------------
 * Virtual memory
 * ---------------------------------------------------------------------------------------- */

recap_status recap__cuda_vmm_granularity(void *ctx, size_t *out) {
  recap__raw_runtime *rt = ctx;
  if (!recap__cuda_vmm_available())
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "the CUDA driver has no virtual memory API");
  CUmemAllocationProp prop = device_prop(rt->device);
  device_scope scope;
  RECAP_TRY(scope_enter(&scope, rt->device));
  recap_status st = RECAP_OK;
  RECAP_CU_TRY_GOTO(st, drv.granularity(out, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), done);
done:
  scope_exit(&scope);
  return st;
}

recap_status recap__cuda_vmm_reserve(void *ctx, size_t bytes, void **base) {
  recap__raw_runtime *rt = ctx;
  device_scope scope;
  RECAP_TRY(scope_enter(&scope, rt->device));
  recap_status st = RECAP_OK;
  CUdeviceptr ptr = 0;
  RECAP_CU_TRY_GOTO(st, drv.reserve(&ptr, bytes, 0, 0, 0), done);
  *base = (void *)(uintptr_t)ptr;
done:
  scope_exit(&scope);
  return st;
}

recap_status recap__cuda_vmm_release(void *ctx, void *base, size_t bytes) {
  recap__raw_runtime *rt = ctx;
  device_scope scope;
  RECAP_TRY(scope_enter(&scope, rt->device));
  recap_status st = RECAP_OK;
  RECAP_CU_TRY_GOTO(st, drv.address_free((CUdeviceptr)(uintptr_t)base, bytes), done);
done:
  scope_exit(&scope);
  return st;
}

recap_status recap__cuda_vmm_map(void *ctx, void *addr, size_t bytes) {
  recap__raw_runtime *rt = ctx;
  CUmemAllocationProp prop = device_prop(rt->device);
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUdeviceptr ptr = (CUdeviceptr)(uintptr_t)addr;
  device_scope scope;
  RECAP_TRY(scope_enter(&scope, rt->device));
  recap_status st = RECAP_OK;
  CUmemGenericAllocationHandle handle = 0;
  RECAP_CU_TRY_GOTO(st, drv.create(&handle, bytes, &prop, 0), done);
  RECAP_CU_TRY_GOTO(st, drv.map(ptr, bytes, 0, handle, 0), fail_handle);
  RECAP_CU_TRY_GOTO(st, drv.set_access(ptr, bytes, &access, 1), fail_map);
  /* The mapping keeps the physical memory alive; dropping the handle now means the unmap
   * alone frees it, so nothing has to remember handles. */
  drv.release(handle);
  goto done;
fail_map:
  drv.unmap(ptr, bytes);
fail_handle:
  drv.release(handle);
done:
  scope_exit(&scope);
  if (st == RECAP_STATUS_OUT_OF_MEMORY)
    recap__error_context(st, "mapping %zu bytes on CUDA device %d: ", bytes, rt->device);
  return st;
}

recap_status recap__cuda_vmm_unmap(void *ctx, void *addr, size_t bytes) {
  recap__raw_runtime *rt = ctx;
  device_scope scope;
  RECAP_TRY(scope_enter(&scope, rt->device));
  recap_status st = RECAP_OK;
  RECAP_CU_TRY_GOTO(st, drv.unmap((CUdeviceptr)(uintptr_t)addr, bytes), done);
done:
  scope_exit(&scope);
  return st;
}

/* ------------------------------------------------------------------------------------------
 * The stream-ordered pool
 * ---------------------------------------------------------------------------------------- */

enum { MAX_DEVICES = 64 };

/* Each device's default pool, configured on first use (any thread). */
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaMemPool_t pools[MAX_DEVICES];

static recap_status async_pool(recap__raw_runtime *rt, cudaMemPool_t *out) {
  if (rt->device < 0 || rt->device >= MAX_DEVICES)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "device %d", rt->device);
  pthread_mutex_lock(&pools_lock);
  recap_status st = RECAP_OK;
  cudaMemPool_t pool = pools[rt->device];
  if (!pool) {
    RECAP_CUDA_TRY_GOTO(st, cudaDeviceGetDefaultMemPool(&pool, rt->device), done);
    /* The default threshold (0) returns memory to the device at every synchronization, which
     * makes every allocation after one a driver call. */
    uint64_t keep = UINT64_MAX;
    RECAP_CUDA_TRY_GOTO(st, cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
                        done);
    pools[rt->device] = pool;
  }
  *out = pool;
done:
  pthread_mutex_unlock(&pools_lock);
  return st;
}

recap_status recap__cuda_async_alloc(void *ctx, size_t bytes, recap_stream *stream, void **out) {
  recap__raw_runtime *rt = ctx;
  cudaMemPool_t pool;
  RECAP_TRY(async_pool(rt, &pool));
  void *ptr = NULL;
  RECAP_CUDA_TRY(cudaMallocFromPoolAsync(&ptr, bytes, pool, (cudaStream_t)stream->native));
  *out = ptr;
  return RECAP_OK;
}

recap_status recap__cuda_async_free(void *ctx, void *ptr, recap_stream *stream) {
  (void)ctx;
  RECAP_CUDA_TRY(cudaFreeAsync(ptr, (cudaStream_t)stream->native));
  return RECAP_OK;
}

recap_status recap__cuda_async_reserved(void *ctx, size_t *current, size_t *peak) {
  recap__raw_runtime *rt = ctx;
  cudaMemPool_t pool;
  RECAP_TRY(async_pool(rt, &pool));
  uint64_t cur = 0, high = 0;
  RECAP_CUDA_TRY(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &cur));
  RECAP_CUDA_TRY(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &high));
  *current = (size_t)cur;
  *peak = (size_t)high;
  return RECAP_OK;
}

recap_status recap__cuda_async_trim(void *ctx) {
  recap__raw_runtime *rt = ctx;
  cudaMemPool_t pool;
  RECAP_TRY(async_pool(rt, &pool));
  /* Trimming returns only memory no pending free or allocation needs; wait for the device so
   * that frees already issued count, as empty_cache's contract implies. */
  device_scope scope;
  RECAP_TRY(scope_enter(&scope, rt->device));
  recap_status st = RECAP_OK;
  RECAP_CUDA_TRY_GOTO(st, cudaDeviceSynchronize(), done);
  RECAP_CUDA_TRY_GOTO(st, cudaMemPoolTrimTo(pool, 0), done);
done:
  scope_exit(&scope);
  return st;
}

/* ------------------------------------------------------------------------------------------
 * Pinned host memory
 * ---------------------------------------------------------------------------------------- */

recap_status recap__cuda_host_alloc(size_t bytes, void **out) {
  void *ptr = NULL;
  RECAP_CUDA_TRY(cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable));
  *out = ptr;
  return RECAP_OK;
}

void recap__cuda_host_free(void *ptr) {
  /* cudaFreeHost fails only on a pointer it never returned or a dead context; the memory is
   * gone with the process either way. */
  if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
}

/* ------------------------------------------------------------------------------------------
 * Memory IPC
 * ---------------------------------------------------------------------------------------- */

recap_status recap__cuda_ipc_handle(void *ctx, void *ptr, recap_ipc_mem_handle *out) {
  recap__raw_runtime *rt = ctx;
  device_scope scope;
  RECAP_TRY(scope_enter(&scope, rt->device));
  recap_status st = RECAP_OK;
  cudaIpcMemHandle_t handle;
  RECAP_CUDA_TRY_GOTO(st, cudaIpcGetMemHandle(&handle, ptr), done);
  memcpy(out->bytes, &handle, sizeof handle);
done:
  scope_exit(&scope);
  return st;
}

recap_status recap__cuda_ipc_open(int device, const recap_ipc_mem_handle *in, void **out) {
  cudaIpcMemHandle_t handle;
  memcpy(&handle, in->bytes, sizeof handle);
  device_scope scope;
  RECAP_TRY(scope_enter(&scope, device));
  recap_status st = RECAP_OK;
  void *ptr = NULL;
  RECAP_CUDA_TRY_GOTO(st, cudaIpcOpenMemHandle(&ptr, handle, cudaIpcMemLazyEnablePeerAccess),
                      done);
  *out = ptr;
done:
  scope_exit(&scope);
  return st;
}

recap_status recap__cuda_ipc_close(int device, void *ptr) {
  device_scope scope;
  RECAP_TRY(scope_enter(&scope, device));
  recap_status st = RECAP_OK;
  RECAP_CUDA_TRY_GOTO(st, cudaIpcCloseMemHandle(ptr), done);
done:
  scope_exit(&scope);
  return st;
}
