/* cuda_check.c: CUDA, cuBLAS and driver API errors mapped to recap statuses and messages. */
#include "runtime/cuda_check.h"

#include <cublas_api.h>
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

recap_status recap__cuda_status(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return RECAP_OK;
    case cudaErrorMemoryAllocation:
      return RECAP_STATUS_OUT_OF_MEMORY;

    /* No usable driver or device: callers treat these as "no CUDA here", not as faults. */
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorDeviceNotLicensed:
      return RECAP_STATUS_NO_DEVICE;

    /* The call itself is forbidden while a capture is under way (it may also have
     * invalidated that capture). */
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorStreamCaptureWrongThread:
    case cudaErrorCapturedEvent:
      return RECAP_STATUS_ILLEGAL_DURING_CAPTURE;

    /* The capture as a whole is broken. */
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureMerge:
      return RECAP_STATUS_CAPTURE_INVALIDATED;

    case cudaErrorNotReady:
      return RECAP_STATUS_NOT_READY;
    case cudaErrorTimeout:
      return RECAP_STATUS_TIMEOUT;

    case cudaErrorNotSupported:
    case cudaErrorNotPermitted:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorPeerAccessUnsupported:
    case cudaErrorUnsupportedLimit:
      return RECAP_STATUS_NOT_SUPPORTED;

    /* Bad handles, pointers, sizes or launch configurations: the caller's mistake, and the
     * context stays usable. */
    case cudaErrorInvalidValue:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidHostPointer:
    case cudaErrorInvalidMemcpyDirection:
    case cudaErrorInvalidPitchValue:
    case cudaErrorInvalidSymbol:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorInvalidKernelImage:
    case cudaErrorInvalidResourceType:
    case cudaErrorInvalidResourceConfiguration:
    case cudaErrorInvalidClusterSize:
    case cudaErrorCooperativeLaunchTooLarge:
    case cudaErrorLaunchOutOfResources:
    case cudaErrorMissingConfiguration:
    case cudaErrorIllegalState:
    case cudaErrorSymbolNotFound:
    case cudaErrorPeerAccessAlreadyEnabled:
    case cudaErrorPeerAccessNotEnabled:
    case cudaErrorHostMemoryAlreadyRegistered:
    case cudaErrorHostMemoryNotRegistered:
    case cudaErrorAlreadyMapped:
    case cudaErrorNotMapped:
    case cudaErrorGraphExecUpdateFailure:
      return RECAP_STATUS_INVALID_ARGUMENT;

    /* Sticky faults (IllegalAddress, LaunchFailure, Assert, HardwareStackError,
     * IllegalInstruction, MisalignedAddress, InvalidPc, ...) and everything unforeseen: the
     * device or context is in trouble. */
    default:
      return RECAP_STATUS_DEVICE_ERROR;
  }
}

recap_status recap__cublas_status(int status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return RECAP_OK;
    case CUBLAS_STATUS_ALLOC_FAILED:
      return RECAP_STATUS_OUT_OF_MEMORY;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return RECAP_STATUS_NOT_SUPPORTED;
    default:
      return RECAP_STATUS_LIBRARY_ERROR;
  }
}

recap_status recap__cu_status(int result) {
  switch ((CUresult)result) {
    case CUDA_SUCCESS:
      return RECAP_OK;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return RECAP_STATUS_OUT_OF_MEMORY;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_DEVICE_NOT_LICENSED:
      return RECAP_STATUS_NO_DEVICE;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED:
    case CUDA_ERROR_STREAM_CAPTURE_IMPLICIT:
    case CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD:
    case CUDA_ERROR_CAPTURED_EVENT:
      return RECAP_STATUS_ILLEGAL_DURING_CAPTURE;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED:
    case CUDA_ERROR_STREAM_CAPTURE_UNJOINED:
    case CUDA_ERROR_STREAM_CAPTURE_UNMATCHED:
    case CUDA_ERROR_STREAM_CAPTURE_ISOLATION:
    case CUDA_ERROR_STREAM_CAPTURE_MERGE:
      return RECAP_STATUS_CAPTURE_INVALIDATED;
    case CUDA_ERROR_NOT_READY:
      return RECAP_STATUS_NOT_READY;
    case CUDA_ERROR_TIMEOUT:
      return RECAP_STATUS_TIMEOUT;
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_NOT_PERMITTED:
    case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED:
    case CUDA_ERROR_UNSUPPORTED_LIMIT:
      return RECAP_STATUS_NOT_SUPPORTED;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_RESOURCE_TYPE:
    case CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION:
    case CUDA_ERROR_INVALID_CLUSTER_SIZE:
    case CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE:
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
    case CUDA_ERROR_ILLEGAL_STATE:
    case CUDA_ERROR_NOT_FOUND:
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
    case CUDA_ERROR_PEER_ACCESS_NOT_ENABLED:
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
    case CUDA_ERROR_ALREADY_MAPPED:
    case CUDA_ERROR_NOT_MAPPED:
    case CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE:
      return RECAP_STATUS_INVALID_ARGUMENT;
    default:
      return RECAP_STATUS_DEVICE_ERROR;
  }
}

/* The latest refusal during capture, shared by all threads: a capture can be invalidated by a
 * call made on another thread, and the thread that ends it must be able to say which. */
static pthread_mutex_t refusal_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t refusal_count;
static char refusal_message[512];

static void note_refusal(void) {
  pthread_mutex_lock(&refusal_lock);
  refusal_count++;
  snprintf(refusal_message, sizeof refusal_message, "%s", recap_last_error());
  pthread_mutex_unlock(&refusal_lock);
}

uint64_t recap__cuda_refusal_count(void) {
  pthread_mutex_lock(&refusal_lock);
  uint64_t n = refusal_count;
  pthread_mutex_unlock(&refusal_lock);
  return n;
}

uint64_t recap__cuda_last_refusal(char *buf, size_t size) {
  pthread_mutex_lock(&refusal_lock);
  uint64_t n = refusal_count;
  if (size > 0) snprintf(buf, size, "%s", refusal_message);
  pthread_mutex_unlock(&refusal_lock);
  return n;
}

/* The calling thread's current CUDA device, for the message; -1 when even that fails (no
 * driver). cudaGetDevice is legal during capture and under a sticky fault. */
static int current_device(void) {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    device = -1;
  }
  return device;
}

recap_status recap__cuda_fail_at(cudaError_t error, const char *expr, const char *file, int line,
                                 const char *func) {
  /* Clear the non-sticky last error, so that the next launch check does not see it again. */
  (void)cudaGetLastError();
  recap_status status = recap__cuda_status(error);
  recap__fail_at(status, file, line, func, "%s failed: %s (%s) [device %d]", expr,
                 cudaGetErrorName(error), cudaGetErrorString(error), current_device());
  if (status == RECAP_STATUS_ILLEGAL_DURING_CAPTURE) note_refusal();
  return status;
}

/* cublasGetStatusName's answers, without calling into libcublas (which is loaded only on
 * first use, kernels/gemm/cuda_blas.h, and may not be when this runs). */
static const char *cublas_status_name(int status) {
  switch (status) {
#define NAME_(s) \
  case s:        \
    return #s;
    NAME_(CUBLAS_STATUS_SUCCESS)
    NAME_(CUBLAS_STATUS_NOT_INITIALIZED)
    NAME_(CUBLAS_STATUS_ALLOC_FAILED)
    NAME_(CUBLAS_STATUS_INVALID_VALUE)
    NAME_(CUBLAS_STATUS_ARCH_MISMATCH)
    NAME_(CUBLAS_STATUS_MAPPING_ERROR)
    NAME_(CUBLAS_STATUS_EXECUTION_FAILED)
    NAME_(CUBLAS_STATUS_INTERNAL_ERROR)
    NAME_(CUBLAS_STATUS_NOT_SUPPORTED)
    NAME_(CUBLAS_STATUS_LICENSE_ERROR)
#undef NAME_
  }
  return "unknown cuBLAS status";
}

recap_status recap__cublas_fail_at(int status, const char *expr, const char *file, int line,
                                   const char *func) {
  recap_status mapped = recap__cublas_status(status);
  recap__fail_at(mapped, file, line, func, "%s failed: %s (cublasStatus_t %d) [device %d]", expr,
                 cublas_status_name(status), status, current_device());
  return mapped;
}

typedef CUresult (*cu_get_error_name_fn)(CUresult error, const char **name);
static pthread_once_t cu_names_once = PTHREAD_ONCE_INIT;
static cu_get_error_name_fn cu_get_error_name;

static void load_cu_names(void) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuGetErrorName", &fn, 12000, cudaEnableDefault, &found) ==
          cudaSuccess &&
      found == cudaDriverEntryPointSuccess)
    cu_get_error_name = (cu_get_error_name_fn)fn;
  else
    (void)cudaGetLastError();
}

recap_status recap__cu_fail_at(int result, const char *expr, const char *file, int line,
                               const char *func) {
  pthread_once(&cu_names_once, load_cu_names);
  const char *name = NULL;
  if (!cu_get_error_name || cu_get_error_name((CUresult)result, &name) != CUDA_SUCCESS || !name)
    name = "unknown CUresult";
  recap_status status = recap__cu_status(result);
  recap__fail_at(status, file, line, func, "%s failed: %s (CUresult %d) [device %d]", expr, name,
                 result, current_device());
  if (status == RECAP_STATUS_ILLEGAL_DURING_CAPTURE) note_refusal();
  return status;
}
