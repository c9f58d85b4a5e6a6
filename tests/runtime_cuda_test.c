/*
 * runtime_cuda_test.c: the CUDA backend (runtime/cuda_backend.c), its error mapping
 * (runtime/cuda_check.c), library versions and telemetry.
 *
 * "runtime_cuda/any" runs everywhere: error mapping, the no-driver device count, versions.
 * "runtime_cuda/gpu" needs a CUDA device and is INACTIVE without one.
 *
 * The binary is also its own helper process for the interprocess-event test:
 *   runtime_cuda_test --ipc-child <128 hex digits>
 */
#define _POSIX_C_SOURCE 200809L

#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/error.h"
#include "runtime/versions.h"
#include "tests/test_util.h"

#if RECAP_WITH_CUDA
#include <cuda_runtime_api.h>

#include "runtime/cuda_check.h"
#endif

extern char **environ;

/* ------------------------------------------------------------------------------------------
 * Suite runtime_cuda/any: no device needed
 * ---------------------------------------------------------------------------------------- */

#if RECAP_WITH_CUDA
static void test_cuda_errors_map_to_their_status_class(void) {
  CU_ASSERT_EQUAL(recap__cuda_status(cudaSuccess), RECAP_OK);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorMemoryAllocation), RECAP_STATUS_OUT_OF_MEMORY);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorNoDevice), RECAP_STATUS_NO_DEVICE);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorInsufficientDriver), RECAP_STATUS_NO_DEVICE);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorStreamCaptureUnsupported),
                  RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorStreamCaptureImplicit),
                  RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorStreamCaptureWrongThread),
                  RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorStreamCaptureInvalidated),
                  RECAP_STATUS_CAPTURE_INVALIDATED);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorStreamCaptureUnjoined),
                  RECAP_STATUS_CAPTURE_INVALIDATED);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorStreamCaptureUnmatched),
                  RECAP_STATUS_CAPTURE_INVALIDATED);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorStreamCaptureIsolation),
                  RECAP_STATUS_CAPTURE_INVALIDATED);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorNotReady), RECAP_STATUS_NOT_READY);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorNotSupported), RECAP_STATUS_NOT_SUPPORTED);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorInvalidValue), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorInvalidResourceHandle),
                  RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorIllegalAddress), RECAP_STATUS_DEVICE_ERROR);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorLaunchFailure), RECAP_STATUS_DEVICE_ERROR);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorAssert), RECAP_STATUS_DEVICE_ERROR);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorMisalignedAddress), RECAP_STATUS_DEVICE_ERROR);
  CU_ASSERT_EQUAL(recap__cuda_status(cudaErrorUnknown), RECAP_STATUS_DEVICE_ERROR);
}

static void test_cublas_and_driver_errors_map_to_their_status_class(void) {
  CU_ASSERT_EQUAL(recap__cublas_status(0), RECAP_OK);
  CU_ASSERT_EQUAL(recap__cublas_status(3 /* CUBLAS_STATUS_ALLOC_FAILED */),
                  RECAP_STATUS_OUT_OF_MEMORY);
  CU_ASSERT_EQUAL(recap__cublas_status(15 /* CUBLAS_STATUS_NOT_SUPPORTED */),
                  RECAP_STATUS_NOT_SUPPORTED);
  CU_ASSERT_EQUAL(recap__cublas_status(13 /* CUBLAS_STATUS_EXECUTION_FAILED */),
                  RECAP_STATUS_LIBRARY_ERROR);
  CU_ASSERT_EQUAL(recap__cu_status(0), RECAP_OK);
  CU_ASSERT_EQUAL(recap__cu_status(2 /* CUDA_ERROR_OUT_OF_MEMORY */), RECAP_STATUS_OUT_OF_MEMORY);
  CU_ASSERT_EQUAL(recap__cu_status(901 /* CUDA_ERROR_STREAM_CAPTURE_INVALIDATED */),
                  RECAP_STATUS_CAPTURE_INVALIDATED);
  CU_ASSERT_EQUAL(recap__cu_status(700 /* CUDA_ERROR_ILLEGAL_ADDRESS */),
                  RECAP_STATUS_DEVICE_ERROR);
}

static cudaError_t planted_illegal_address(void) {
  return cudaErrorIllegalAddress;
}

static recap_status call_planted_failure(void) {
  RECAP_CUDA_TRY(planted_illegal_address());
  return RECAP_OK;
}

/* The place in recap's source only under RECAP_ERROR_LOCATIONS=1 (runtime/error.h). */
static void test_cuda_try_returns_status_and_names_call_error_and_place(void) {
  unsetenv("RECAP_ERROR_LOCATIONS");
  CHECK_STATUS(call_planted_failure(), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("planted_illegal_address()");
  CHECK_ERROR_MENTIONS("cudaErrorIllegalAddress");
  CHECK_ERROR_MENTIONS("[device ");
  CU_ASSERT_PTR_NULL(strstr(recap_last_error(), "runtime_cuda_test.c:"));
  CU_ASSERT_PTR_NULL(strstr(recap_last_error(), "call_planted_failure"));
  setenv("RECAP_ERROR_LOCATIONS", "1", 1);
  CHECK_STATUS(call_planted_failure(), RECAP_STATUS_DEVICE_ERROR);
  unsetenv("RECAP_ERROR_LOCATIONS");
  CHECK_ERROR_MENTIONS("planted_illegal_address()");
  CHECK_ERROR_MENTIONS("call_planted_failure");
  CHECK_ERROR_MENTIONS("runtime_cuda_test.c:");
}

static void test_compiled_archs_list_sass_and_ptx(void) {
  const char *archs = recap_device_compiled_archs(RECAP_BACKEND_CUDA);
  printf("\n  compiled archs: %s\n", archs);
  CU_ASSERT_PTR_NOT_NULL(strstr(archs, "sm_"));
  CU_ASSERT_PTR_NOT_NULL(strstr(archs, "compute_"));
}
#endif /* RECAP_WITH_CUDA */

static void test_device_count_without_cuda_device_is_ok_zero(void) {
  int count = -1;
  CHECK_OK(recap_device_count(RECAP_BACKEND_CUDA, &count));
  if (test_have_cuda()) {
    CU_ASSERT(count >= 1);
  } else {
    CU_ASSERT_EQUAL(count, 0);
  }
}

#if RECAP_WITH_CUDA
static void test_device_count_without_driver_says_why(void) {
  if (test_have_cuda()) {
    /* The message only exists when there is nothing to count. */
    int count = 0;
    CHECK_OK(recap_device_count(RECAP_BACKEND_CUDA, &count));
    CU_ASSERT(count >= 1);
    return;
  }
  recap_clear_error();
  int count = -1;
  CHECK_OK(recap_device_count(RECAP_BACKEND_CUDA, &count));
  CU_ASSERT_EQUAL(count, 0);
  CHECK_ERROR_MENTIONS("no CUDA device");
}
#endif

static void test_telemetry_of_host_device_is_not_supported(void) {
  recap_device host = {RECAP_BACKEND_HOST, 0};
  recap_telemetry t;
  CHECK_STATUS(recap_device_telemetry(host, &t), RECAP_STATUS_NOT_SUPPORTED);
}

static void test_telemetry_without_cuda_device_fails_cleanly(void) {
  if (test_have_cuda()) return; /* the GPU suite checks the real answer */
  recap_device cuda0 = {RECAP_BACKEND_CUDA, 0};
  recap_telemetry t;
  recap_status st = recap_device_telemetry(cuda0, &t);
  CU_ASSERT(st == RECAP_STATUS_NO_DEVICE || st == RECAP_STATUS_NOT_SUPPORTED);
}

static void fake_blas_versions(int *cublas, int *cublaslt) {
  *cublas = 130001;
  *cublaslt = 130002;
}

static void test_library_versions_report_runtime_and_registered_blas(void) {
  recap_library_versions v;
  CHECK_OK(recap_library_versions_get(&v));
#if RECAP_WITH_CUDA
  CU_ASSERT(v.runtime_version >= 13000);
#else
  CU_ASSERT_EQUAL(v.runtime_version, 0);
#endif
  if (!test_have_cuda()) CU_ASSERT_EQUAL(v.driver_version, 0);
  /* The GEMM module registers its query when it is linked in (CUDA builds): then the
   * versions are those of the loaded cuBLAS, else 0. */
#if RECAP_WITH_CUDA
  CU_ASSERT(v.cublas_version == 0 || v.cublas_version >= 120000);
  CU_ASSERT(v.cublaslt_version == 0 || v.cublaslt_version >= 120000);
#else
  CU_ASSERT_EQUAL(v.cublas_version, 0);
  CU_ASSERT_EQUAL(v.cublaslt_version, 0);
#endif

  recap__set_blas_version_query(fake_blas_versions);
  CHECK_OK(recap_library_versions_get(&v));
  CU_ASSERT_EQUAL(v.cublas_version, 130001);
  CU_ASSERT_EQUAL(v.cublaslt_version, 130002);
  recap__set_blas_version_query(NULL);
  CHECK_OK(recap_library_versions_get(&v));
  CU_ASSERT_EQUAL(v.cublas_version, 0);
}

/* ------------------------------------------------------------------------------------------
 * Suite runtime_cuda/gpu
 * ---------------------------------------------------------------------------------------- */

#if RECAP_WITH_CUDA

static const recap_device cuda0 = {RECAP_BACKEND_CUDA, 0};
static const recap__backend *be;

static int gpu_suite_init(void) {
  be = recap__backend_get(RECAP_BACKEND_CUDA);
  return be ? 0 : 1;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static recap_stream *new_stream(void) {
  recap_stream *s = NULL;
  recap_status st = recap_stream_create(cuda0, 0, RECAP_STREAM_NON_BLOCKING, &s);
  if (st != RECAP_OK) fprintf(stderr, "\n  stream create: %s\n", recap_last_error());
  return s;
}

static void *device_alloc(size_t bytes) {
  void *p = NULL;
  if (be->mem_alloc(0, bytes, &p) != RECAP_OK)
    fprintf(stderr, "\n  mem_alloc(%zu): %s\n", bytes, recap_last_error());
  return p;
}

/* Copies device bytes to the host through `s` and checks each equals `value`. */
static int device_bytes_equal(recap_stream *s, const void *dev, size_t bytes, unsigned char value) {
  unsigned char *host = malloc(bytes);
  if (!host) return 0;
  int ok = be->memcpy_async(host, dev, bytes, s) == RECAP_OK && recap_stream_synchronize(s) == 0;
  for (size_t i = 0; ok && i < bytes; i++) ok = host[i] == value;
  free(host);
  return ok;
}

static void test_device_count_is_at_least_one(void) {
  int count = 0;
  CHECK_OK(recap_device_count(RECAP_BACKEND_CUDA, &count));
  CU_ASSERT(count >= 1);
}

static void test_properties_describe_a_real_gpu(void) {
  recap_device_properties p;
  CHECK_OK(recap_device_properties_get(cuda0, &p));
  printf("\n  %s: cc %d.%d, %d SMs, %zu bytes, L2 %zu, clock %d kHz, smem optin %zu\n", p.name,
         p.major, p.minor, p.multiprocessor_count, p.total_memory, p.l2_cache_bytes, p.clock_khz,
         p.max_shared_memory_per_block_optin);
  CU_ASSERT(p.name[0] != '\0');
  CU_ASSERT(p.major >= 8);
  CU_ASSERT(p.multiprocessor_count > 0);
  CU_ASSERT(p.total_memory > 0);
  CU_ASSERT(p.l2_cache_bytes > 0);
  CU_ASSERT(p.clock_khz > 0);
  CU_ASSERT(p.memory_bus_width_bits > 0);
  CU_ASSERT_EQUAL(p.warp_size, 32);
  CU_ASSERT(p.max_threads_per_block >= 1024);
  CU_ASSERT(p.max_shared_memory_per_block >= 48 * 1024);
  CU_ASSERT(p.max_shared_memory_per_block_optin >= p.max_shared_memory_per_block);
}

static void test_compiled_archs_cover_the_device(void) {
  recap_device_properties p;
  CHECK_OK(recap_device_properties_get(cuda0, &p));
  char want[32];
  snprintf(want, sizeof want, "sm_%d%d", p.major, p.minor);
  const char *archs = recap_device_compiled_archs(RECAP_BACKEND_CUDA);
  if (!strstr(archs, want)) fprintf(stderr, "\n  %s not in \"%s\"\n", want, archs);
  CU_ASSERT_PTR_NOT_NULL(strstr(archs, want));
}

static void test_mem_get_info_reports_free_within_total(void) {
  size_t free_bytes = 0, total = 0;
  CHECK_OK(recap_device_mem_get_info(cuda0, &free_bytes, &total));
  recap_device_properties p;
  CHECK_OK(recap_device_properties_get(cuda0, &p));
  CU_ASSERT(free_bytes > 0);
  CU_ASSERT(free_bytes <= total);
  CU_ASSERT(total <= p.total_memory);
}

static void test_mem_get_info_restores_callers_current_device(void) {
  CU_ASSERT_EQUAL(cudaSetDevice(0), cudaSuccess);
  size_t free_bytes = 0, total = 0;
  CHECK_OK(recap_device_mem_get_info(cuda0, &free_bytes, &total));
  int current = -1;
  CU_ASSERT_EQUAL(cudaGetDevice(&current), cudaSuccess);
  CU_ASSERT_EQUAL(current, 0);
}

static void test_stream_priority_is_clamped_to_device_range(void) {
  int least = 0, greatest = 0;
  CU_ASSERT_EQUAL(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  recap_stream *high = NULL, *low = NULL;
  CHECK_OK(recap_stream_create(cuda0, -1000, RECAP_STREAM_NON_BLOCKING, &high));
  CHECK_OK(recap_stream_create(cuda0, 1000, 0, &low));
  CU_ASSERT_EQUAL(recap_stream_priority(high), greatest);
  CU_ASSERT_EQUAL(recap_stream_priority(low), least);
  int native = 12345;
  CU_ASSERT_EQUAL(cudaStreamGetPriority((cudaStream_t)recap_stream_native(high), &native),
                  cudaSuccess);
  CU_ASSERT_EQUAL(native, greatest);
  unsigned flags = 0;
  CU_ASSERT_EQUAL(cudaStreamGetFlags((cudaStream_t)recap_stream_native(high), &flags), cudaSuccess);
  CU_ASSERT(flags & cudaStreamNonBlocking);
  CHECK_OK(recap_stream_destroy(high));
  CHECK_OK(recap_stream_destroy(low));
}

static void test_wrapped_external_stream_survives_the_wrapper(void) {
  cudaStream_t raw = NULL;
  CU_ASSERT_EQUAL_FATAL(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), cudaSuccess);
  recap_stream *s = NULL;
  CHECK_OK(recap_stream_wrap_external(cuda0, raw, &s));
  CU_ASSERT_PTR_EQUAL(recap_stream_native(s), raw);
  CHECK_OK(recap_stream_synchronize(s));
  CHECK_OK(recap_stream_destroy(s));
  CU_ASSERT_EQUAL(cudaStreamQuery(raw), cudaSuccess); /* still alive */
  CU_ASSERT_EQUAL(cudaStreamDestroy(raw), cudaSuccess);
}

static void test_wrap_external_rejects_implicit_streams(void) {
  recap_stream *s = NULL;
  CHECK_STATUS(recap_stream_wrap_external(cuda0, NULL, &s), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_stream_wrap_external(cuda0, (void *)cudaStreamLegacy, &s),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_stream_wrap_external(cuda0, (void *)cudaStreamPerThread, &s),
               RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NULL(s);
}

typedef struct {
  atomic_int *flag;
  int sleep_ms;
  int value;
} flag_args;

/* Sleeps, then stores value: makes earlier work on a stream slow and observable. */
static recap_status slow_set_flag(void *p) {
  flag_args *a = p;
  sleep_ms(a->sleep_ms);
  atomic_store(a->flag, a->value);
  return RECAP_OK;
}

typedef struct {
  atomic_int *source;
  atomic_int *seen;
} observe_args;

static recap_status observe_flag(void *p) {
  observe_args *a = p;
  atomic_store(a->seen, atomic_load(a->source));
  return RECAP_OK;
}

static void test_wait_stream_orders_host_functions(void) {
  recap_stream *a = new_stream(), *b = new_stream();
  CU_ASSERT_FATAL(a && b);
  atomic_int flag = 0, seen = -1;
  flag_args fa = {&flag, 100, 1};
  observe_args oa = {&flag, &seen};
  CHECK_OK(be->launch_host(a, slow_set_flag, &fa, sizeof fa));
  CHECK_OK(recap_stream_wait_stream(b, a));
  CHECK_OK(be->launch_host(b, observe_flag, &oa, sizeof oa));
  CHECK_OK(recap_stream_synchronize(b));
  CU_ASSERT_EQUAL(atomic_load(&seen), 1);
  CHECK_OK(recap_stream_destroy(a));
  CHECK_OK(recap_stream_destroy(b));
}

static void test_wait_stream_orders_copies(void) {
  const size_t n = 8u << 20;
  recap_stream *a = new_stream(), *b = new_stream();
  void *x = device_alloc(n), *y = device_alloc(n);
  CU_ASSERT_FATAL(a && b && x && y);
  atomic_int flag = 0;
  flag_args fa = {&flag, 100, 1};
  CHECK_OK(be->memset_async(y, 0, n, b));
  CHECK_OK(recap_stream_synchronize(b));
  /* Without the wait, b's copy would run while a still sleeps and read stale x. */
  CHECK_OK(be->memset_async(x, 0, n, a));
  CHECK_OK(be->launch_host(a, slow_set_flag, &fa, sizeof fa));
  CHECK_OK(be->memset_async(x, 0xA7, n, a));
  CHECK_OK(recap_stream_wait_stream(b, a));
  CHECK_OK(be->memcpy_async(y, x, n, b));
  CU_ASSERT(device_bytes_equal(b, y, n, 0xA7));
  CHECK_OK(recap_stream_synchronize(a));
  CHECK_OK(be->mem_free(0, x));
  CHECK_OK(be->mem_free(0, y));
  CHECK_OK(recap_stream_destroy(a));
  CHECK_OK(recap_stream_destroy(b));
}

/* A caller's raw stream waits on recap's work, then recap's stream on the caller's (both ways
 * of DLPack's handshake); the implicit streams are accepted by handle. */
static void test_native_streams_record_and_wait_on_events(void) {
  const size_t n = 8u << 20;
  recap_stream *a = new_stream();
  void *x = device_alloc(n), *y = device_alloc(n);
  cudaStream_t raw = NULL;
  CU_ASSERT_EQUAL_FATAL(cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking), cudaSuccess);
  recap_event *done = NULL, *theirs = NULL;
  CHECK_OK(recap_event_create(cuda0, RECAP_EVENT_DEFAULT, &done));
  CHECK_OK(recap_event_create(cuda0, RECAP_EVENT_DEFAULT, &theirs));
  CU_ASSERT_FATAL(a && x && y && done && theirs);
  atomic_int flag = 0;
  flag_args fa = {&flag, 100, 1};
  CHECK_OK(be->memset_async(y, 0, n, a));
  CHECK_OK(be->memset_async(x, 0, n, a));
  CHECK_OK(recap_stream_synchronize(a));
  /* Without the wait, raw's copy would run while a still sleeps and read x's zeros. */
  CHECK_OK(be->launch_host(a, slow_set_flag, &fa, sizeof fa));
  CHECK_OK(be->memset_async(x, 0xA7, n, a));
  CHECK_OK(recap_event_record(done, a));
  CHECK_OK(recap_native_stream_wait_event(raw, done));
  CU_ASSERT_EQUAL(cudaMemcpyAsync(y, x, n, cudaMemcpyDeviceToDevice, raw), cudaSuccess);
  /* ...and a's read of y waits for raw's copy. */
  CHECK_OK(recap_event_record_native(theirs, raw));
  CHECK_OK(recap_stream_wait_event(a, theirs));
  CU_ASSERT(device_bytes_equal(a, y, n, 0xA7));
  CHECK_OK(recap_event_record_native(done, (void *)cudaStreamLegacy));
  CHECK_OK(recap_native_stream_wait_event((void *)cudaStreamPerThread, done));
  CHECK_OK(recap_event_record_native(theirs, NULL));
  CHECK_OK(recap_event_synchronize(theirs));
  CU_ASSERT_EQUAL(cudaStreamSynchronize(raw), cudaSuccess);
  CHECK_OK(recap_event_destroy(done));
  CHECK_OK(recap_event_destroy(theirs));
  CU_ASSERT_EQUAL(cudaStreamDestroy(raw), cudaSuccess);
  CHECK_OK(be->mem_free(0, x));
  CHECK_OK(be->mem_free(0, y));
  CHECK_OK(recap_stream_destroy(a));
}

static void test_stream_query_reports_pending_then_idle(void) {
  recap_stream *s = new_stream();
  CU_ASSERT_FATAL(s != NULL);
  atomic_int flag = 0;
  flag_args fa = {&flag, 200, 1};
  CHECK_OK(be->launch_host(s, slow_set_flag, &fa, sizeof fa));
  CHECK_STATUS(recap_stream_query(s), RECAP_STATUS_NOT_READY);
  CHECK_OK(recap_stream_synchronize(s));
  CHECK_OK(recap_stream_query(s));
  CU_ASSERT_EQUAL(atomic_load(&flag), 1);
  CHECK_OK(recap_stream_destroy(s));
}

static void test_timing_events_measure_real_copies(void) {
  const size_t n = 64u << 20;
  recap_stream *s = new_stream();
  void *x = device_alloc(n), *y = device_alloc(n);
  CU_ASSERT_FATAL(s && x && y);
  recap_event *start = NULL, *end = NULL;
  CHECK_OK(recap_event_create(cuda0, RECAP_EVENT_TIMING, &start));
  CHECK_OK(recap_event_create(cuda0, RECAP_EVENT_TIMING | RECAP_EVENT_BLOCKING, &end));
  CHECK_OK(recap_event_record(start, s));
  for (int i = 0; i < 8; i++) CHECK_OK(be->memcpy_async(i % 2 ? x : y, i % 2 ? y : x, n, s));
  CHECK_OK(recap_event_record(end, s));
  CHECK_OK(recap_event_synchronize(end));
  CHECK_OK(recap_event_query(end));
  float ms = 0.0f;
  CHECK_OK(recap_event_elapsed_ms(start, end, &ms));
  printf("\n  8 x 64 MiB device copies: %.3f ms\n", ms);
  CU_ASSERT(ms > 0.0f);
  CHECK_OK(recap_event_destroy(start));
  CHECK_OK(recap_event_destroy(end));
  CHECK_OK(be->mem_free(0, x));
  CHECK_OK(be->mem_free(0, y));
  CHECK_OK(recap_stream_destroy(s));
}

static void test_elapsed_of_pending_event_is_not_ready(void) {
  recap_stream *s = new_stream();
  CU_ASSERT_FATAL(s != NULL);
  recap_event *start = NULL, *end = NULL;
  CHECK_OK(recap_event_create(cuda0, RECAP_EVENT_TIMING, &start));
  CHECK_OK(recap_event_create(cuda0, RECAP_EVENT_TIMING, &end));
  atomic_int flag = 0;
  flag_args fa = {&flag, 200, 1};
  CHECK_OK(recap_event_record(start, s));
  CHECK_OK(be->launch_host(s, slow_set_flag, &fa, sizeof fa));
  CHECK_OK(recap_event_record(end, s));
  float ms = 0.0f;
  CHECK_STATUS(recap_event_query(end), RECAP_STATUS_NOT_READY);
  CHECK_STATUS(recap_event_elapsed_ms(start, end, &ms), RECAP_STATUS_NOT_READY);
  CHECK_OK(recap_stream_synchronize(s));
  CHECK_OK(recap_event_elapsed_ms(start, end, &ms));
  CU_ASSERT(ms >= 150.0f);
  CHECK_OK(recap_event_destroy(start));
  CHECK_OK(recap_event_destroy(end));
  CHECK_OK(recap_stream_destroy(s));
}

static void test_never_recorded_event_is_complete(void) {
  recap_event *e = NULL;
  CHECK_OK(recap_event_create(cuda0, RECAP_EVENT_DEFAULT, &e));
  CHECK_OK(recap_event_query(e));
  CHECK_OK(recap_event_synchronize(e));
  CHECK_OK(recap_event_destroy(e));
}

static void test_elapsed_across_devices_is_rejected(void) {
  recap_device cuda1 = {RECAP_BACKEND_CUDA, 1};
  recap_event *a = NULL, *b = NULL;
  CHECK_OK(recap_event_create(cuda0, RECAP_EVENT_TIMING, &a));
  CHECK_OK(recap_event_create(cuda1, RECAP_EVENT_TIMING, &b));
  recap_stream *s0 = new_stream(), *s1 = NULL;
  CHECK_OK(recap_stream_create(cuda1, 0, RECAP_STREAM_NON_BLOCKING, &s1));
  CHECK_OK(recap_event_record(a, s0));
  CHECK_OK(recap_event_record(b, s1));
  CHECK_OK(recap_stream_synchronize(s0));
  CHECK_OK(recap_stream_synchronize(s1));
  float ms = 0.0f;
  CHECK_STATUS(recap_event_elapsed_ms(a, b, &ms), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap_event_destroy(a));
  CHECK_OK(recap_event_destroy(b));
  CHECK_OK(recap_stream_destroy(s0));
  CHECK_OK(recap_stream_destroy(s1));
}

static void hex_encode(const recap_ipc_event_handle *h, char out[129]) {
  for (int i = 0; i < 64; i++) snprintf(out + 2 * i, 3, "%02x", h->bytes[i]);
}

static int hex_decode(const char *text, recap_ipc_event_handle *h) {
  if (strlen(text) != 128) return 0;
  for (int i = 0; i < 64; i++) {
    unsigned v = 0;
    if (sscanf(text + 2 * i, "%2x", &v) != 1) return 0;
    h->bytes[i] = (unsigned char)v;
  }
  return 1;
}

/* The child side: opens the parent's event and waits on it. Exit 0 on success. */
static int ipc_child_main(const char *hex) {
  recap_ipc_event_handle h;
  if (!hex_decode(hex, &h)) return 2;
  recap_event *e = NULL;
  recap_status st = recap_event_ipc_open(cuda0, &h, &e);
  if (st == RECAP_OK) st = recap_event_synchronize(e);
  if (st == RECAP_OK) st = recap_event_query(e);
  if (st != RECAP_OK)
    fprintf(stderr, "ipc child: %s: %s\n", recap_status_name(st), recap_last_error());
  recap_event_destroy(e);
  return st == RECAP_OK ? 0 : 1;
}

static void test_interprocess_event_handle_opens_and_waits(void) {
  recap_stream *s = new_stream();
  CU_ASSERT_FATAL(s != NULL);
  recap_event *e = NULL;
  CHECK_STATUS(recap_event_create(cuda0, RECAP_EVENT_INTERPROCESS | RECAP_EVENT_TIMING, &e),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap_event_create(cuda0, RECAP_EVENT_INTERPROCESS, &e));
  recap_ipc_event_handle h;
  CHECK_OK(recap_event_ipc_handle(e, &h));
  atomic_int flag = 0;
  flag_args fa = {&flag, 100, 1};
  CHECK_OK(be->launch_host(s, slow_set_flag, &fa, sizeof fa));
  CHECK_OK(recap_event_record(e, s));

  recap_event *opened = NULL;
  recap_status st = recap_event_ipc_open(cuda0, &h, &opened);
  if (st == RECAP_OK) {
    CHECK_OK(recap_event_synchronize(opened));
    CU_ASSERT_EQUAL(atomic_load(&flag), 1); /* waiting on the copy waited for the work */
    CHECK_OK(recap_event_destroy(opened));
  } else {
    /* Driver 580 refuses to open a handle in the process that made it: use a child. */
    CHECK_STATUS(st, RECAP_STATUS_NOT_SUPPORTED);
    printf("\n  in-process open refused (%s: %s); opening in a child process\n",
           recap_status_name(st), recap_last_error());
    char hex[129];
    hex_encode(&h, hex);
    char *argv[] = {"/proc/self/exe", "--ipc-child", hex, NULL};
    pid_t pid;
    CU_ASSERT_EQUAL_FATAL(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ), 0);
    int wstatus = 0;
    CU_ASSERT_EQUAL_FATAL(waitpid(pid, &wstatus, 0), pid);
    CU_ASSERT(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  }
  CHECK_OK(recap_stream_synchronize(s));
  CHECK_OK(recap_event_destroy(e));
  CHECK_OK(recap_stream_destroy(s));
}

static void test_capture_replays_memset_and_copy(void) {
  const size_t n = 1u << 20;
  recap_stream *s = new_stream();
  void *x = device_alloc(n), *y = device_alloc(n);
  CU_ASSERT_FATAL(s && x && y);
  CHECK_OK(be->memset_async(y, 0, n, s));
  CHECK_OK(recap_stream_synchronize(s));

  recap_capture_status cs = RECAP_CAPTURE_INVALIDATED;
  CHECK_OK(recap_stream_capture_status(s, &cs));
  CU_ASSERT_EQUAL(cs, RECAP_CAPTURE_NONE);
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(recap_stream_capture_status(s, &cs));
  CU_ASSERT_EQUAL(cs, RECAP_CAPTURE_ACTIVE);
  CHECK_OK(be->memset_async(x, 0x5A, n, s));
  CHECK_OK(be->memcpy_async(y, x, n, s));
  recap__graph *g = NULL;
  CHECK_OK(recap__capture_end(s, &g));
  CHECK_OK(recap_stream_capture_status(s, &cs));
  CU_ASSERT_EQUAL(cs, RECAP_CAPTURE_NONE);
  CU_ASSERT_FATAL(g != NULL);

  size_t nodes = 0;
  CHECK_OK(be->graph_node_count(g, &nodes));
  CU_ASSERT_EQUAL(nodes, 2);
  /* Capturing records the work without running it. */
  CU_ASSERT(device_bytes_equal(s, y, n, 0));

  recap__graph_exec *exec = NULL;
  CHECK_OK(be->graph_instantiate(g, &exec));
  CHECK_OK(be->graph_upload(exec, s));
  CHECK_OK(be->graph_launch(exec, s));
  CU_ASSERT(device_bytes_equal(s, y, n, 0x5A));
  /* A second replay after the target was cleared writes it again. */
  CHECK_OK(be->memset_async(y, 0, n, s));
  CHECK_OK(be->graph_launch(exec, s));
  CU_ASSERT(device_bytes_equal(s, y, n, 0x5A));

  be->graph_exec_destroy(exec);
  be->graph_destroy(g);
  be->graph_destroy(NULL);
  be->graph_exec_destroy(NULL);
  CHECK_OK(be->mem_free(0, x));
  CHECK_OK(be->mem_free(0, y));
  CHECK_OK(recap_stream_destroy(s));
}

static void test_empty_capture_gives_empty_graph(void) {
  recap_stream *s = new_stream();
  CU_ASSERT_FATAL(s != NULL);
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  recap__graph *g = NULL;
  CHECK_OK(recap__capture_end(s, &g));
  size_t nodes = 99;
  CHECK_OK(be->graph_node_count(g, &nodes));
  CU_ASSERT_EQUAL(nodes, 0);
  be->graph_destroy(g);
  CHECK_OK(recap_stream_destroy(s));
}

typedef struct {
  atomic_int *counter;
} count_args;

static recap_status count_call(void *p) {
  count_args *a = p;
  atomic_fetch_add(a->counter, 1);
  return RECAP_OK;
}

static void test_captured_host_function_args_outlive_the_graph(void) {
  recap_stream *s = new_stream();
  CU_ASSERT_FATAL(s != NULL);
  atomic_int counter = 0;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  {
    /* The argument struct dies before any replay: the graph must hold its own copy. */
    count_args args = {&counter};
    CHECK_OK(be->launch_host(s, count_call, &args, sizeof args));
    memset(&args, 0, sizeof args);
  }
  recap__graph *g = NULL;
  CHECK_OK(recap__capture_end(s, &g));
  CU_ASSERT_EQUAL(atomic_load(&counter), 0);
  recap__graph_exec *exec = NULL;
  CHECK_OK(be->graph_instantiate(g, &exec));
  for (int i = 0; i < 3; i++) CHECK_OK(be->graph_launch(exec, s));
  CHECK_OK(recap_stream_synchronize(s));
  CU_ASSERT_EQUAL(atomic_load(&counter), 3);
  /* Destroying the graph first must not free what the exec still runs. */
  be->graph_destroy(g);
  CHECK_OK(be->graph_launch(exec, s));
  CHECK_OK(recap_stream_synchronize(s));
  CU_ASSERT_EQUAL(atomic_load(&counter), 4);
  be->graph_exec_destroy(exec);
  CHECK_OK(recap_stream_destroy(s));
}

static void test_synchronize_during_capture_is_refused_and_invalidates(void) {
  const size_t n = 4096;
  recap_stream *s = new_stream();
  void *x = device_alloc(n);
  CU_ASSERT_FATAL(s && x);
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(be->memset_async(x, 1, n, s));
  CHECK_STATUS(recap_stream_synchronize(s), RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CHECK_ERROR_MENTIONS("cudaStreamSynchronize");
  recap_capture_status cs = RECAP_CAPTURE_NONE;
  CHECK_OK(recap_stream_capture_status(s, &cs));
  CU_ASSERT_EQUAL(cs, RECAP_CAPTURE_INVALIDATED);
  recap__graph *g = NULL;
  CHECK_STATUS(recap__capture_end(s, &g), RECAP_STATUS_CAPTURE_INVALIDATED);
  CHECK_ERROR_MENTIONS("cudaStreamSynchronize"); /* names the call that broke it */
  CU_ASSERT_PTR_NULL(g);
  CHECK_OK(recap_stream_capture_status(s, &cs));
  CU_ASSERT_EQUAL(cs, RECAP_CAPTURE_NONE);
  CU_ASSERT_EQUAL(recap__capture_count(), 0);

  /* The stream is usable, and a new capture on it works. */
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(be->memset_async(x, 0x3C, n, s));
  CHECK_OK(recap__capture_end(s, &g));
  recap__graph_exec *exec = NULL;
  CHECK_OK(be->graph_instantiate(g, &exec));
  CHECK_OK(be->graph_launch(exec, s));
  CU_ASSERT(device_bytes_equal(s, x, n, 0x3C));
  be->graph_exec_destroy(exec);
  be->graph_destroy(g);
  CHECK_OK(be->mem_free(0, x));
  CHECK_OK(recap_stream_destroy(s));
}

static recap__graph *capture_fill(recap_stream *s, void *x, size_t n, int value, int copies) {
  recap__graph *g = NULL;
  if (recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL) != RECAP_OK) return NULL;
  recap_status st = be->memset_async(x, value, n, s);
  for (int i = 1; st == RECAP_OK && i < copies; i++) st = be->memset_async(x, value, n, s);
  recap_status end = recap__capture_end(s, &g);
  return st == RECAP_OK && end == RECAP_OK ? g : NULL;
}

static void test_exec_update_takes_new_params_and_refuses_new_topology(void) {
  const size_t n = 4096;
  recap_stream *s = new_stream();
  void *x = device_alloc(n);
  CU_ASSERT_FATAL(s && x);
  recap__graph *g1 = capture_fill(s, x, n, 0x11, 1);
  recap__graph *g2 = capture_fill(s, x, n, 0x22, 1);
  recap__graph *g3 = capture_fill(s, x, n, 0x33, 2);
  CU_ASSERT_FATAL(g1 && g2 && g3);
  recap__graph_exec *exec = NULL;
  CHECK_OK(be->graph_instantiate(g1, &exec));
  CHECK_OK(be->graph_launch(exec, s));
  CU_ASSERT(device_bytes_equal(s, x, n, 0x11));
  CHECK_OK(be->graph_exec_update(exec, g2));
  CHECK_OK(be->graph_launch(exec, s));
  CU_ASSERT(device_bytes_equal(s, x, n, 0x22));
  CHECK_STATUS(be->graph_exec_update(exec, g3), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("cudaGraphExecUpdateError");
  CU_ASSERT_EQUAL(cudaGetLastError(), cudaSuccess); /* the refusal left nothing behind */
  /* The exec still holds g2's parameters. */
  CHECK_OK(be->graph_launch(exec, s));
  CU_ASSERT(device_bytes_equal(s, x, n, 0x22));
  be->graph_exec_destroy(exec);
  be->graph_destroy(g1);
  be->graph_destroy(g2);
  be->graph_destroy(g3);
  CHECK_OK(be->mem_free(0, x));
  CHECK_OK(recap_stream_destroy(s));
}

static void test_exchange_capture_mode_returns_previous_mode(void) {
  recap_capture_mode mode = RECAP_CAPTURE_MODE_RELAXED;
  CHECK_OK(be->exchange_capture_mode(&mode));
  CU_ASSERT_EQUAL(mode, RECAP_CAPTURE_MODE_GLOBAL);
  CHECK_OK(be->exchange_capture_mode(&mode));
  CU_ASSERT_EQUAL(mode, RECAP_CAPTURE_MODE_RELAXED);
}

static void test_graph_debug_dot_writes_a_file(void) {
  recap_stream *s = new_stream();
  void *x = device_alloc(4096);
  CU_ASSERT_FATAL(s && x);
  recap__graph *g = capture_fill(s, x, 4096, 7, 1);
  CU_ASSERT_FATAL(g != NULL);
  const char *dir = getenv("TEST_TMPDIR");
  char path[512];
  snprintf(path, sizeof path, "%s/graph.dot", dir ? dir : "/tmp");
  CHECK_OK(be->graph_debug_dot(g, path));
  FILE *f = fopen(path, "r");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  char head[64] = {0};
  size_t got = fread(head, 1, sizeof head - 1, f);
  fclose(f);
  CU_ASSERT(got > 0 && strstr(head, "digraph") != NULL);
  be->graph_destroy(g);
  CHECK_OK(be->mem_free(0, x));
  CHECK_OK(recap_stream_destroy(s));
}

static recap_status planted_host_failure(void *unused) {
  (void)unused;
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "planted host failure");
}

static void test_failing_host_function_is_reported_at_next_synchronize(void) {
  recap_stream *s = new_stream();
  CU_ASSERT_FATAL(s != NULL);
  CHECK_OK(be->launch_host(s, planted_host_failure, NULL, 0));
  CHECK_STATUS(recap_stream_synchronize(s), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("planted host failure");
  CHECK_OK(recap_stream_synchronize(s)); /* reported once; the stream stays usable */
  CHECK_OK(be->launch_host(s, planted_host_failure, NULL, 0));
  CHECK_STATUS(recap_device_synchronize(cuda0), RECAP_STATUS_DEVICE_ERROR);
  CHECK_OK(recap_device_synchronize(cuda0));
  CHECK_OK(recap_stream_destroy(s));
}

static void test_telemetry_is_ok_or_not_supported(void) {
  recap_telemetry t;
  recap_status st = recap_device_telemetry(cuda0, &t);
  if (st != RECAP_OK) {
    CHECK_STATUS(st, RECAP_STATUS_NOT_SUPPORTED);
    printf("\n  telemetry not supported: %s\n", recap_last_error());
    return;
  }
  printf("\n  util %d%%/%d%%, %d C, %.1f W, SM %d MHz, memory %lld/%lld\n",
         t.gpu_utilization_percent, t.memory_utilization_percent, t.temperature_c, t.power_watts,
         t.sm_clock_mhz, t.memory_used_bytes, t.memory_total_bytes);
  CU_ASSERT(t.gpu_utilization_percent >= -1 && t.gpu_utilization_percent <= 100);
  CU_ASSERT(t.memory_utilization_percent >= -1 && t.memory_utilization_percent <= 100);
  CU_ASSERT(t.temperature_c == -1 || (t.temperature_c > 0 && t.temperature_c < 130));
  CU_ASSERT(t.power_watts == -1.0 || (t.power_watts > 0.0 && t.power_watts < 2000.0));
  CU_ASSERT(t.sm_clock_mhz == -1 || t.sm_clock_mhz > 0);
  CU_ASSERT(t.memory_total_bytes == -1 || t.memory_total_bytes > 0);
  CU_ASSERT(t.memory_used_bytes <= t.memory_total_bytes);
}

static void test_library_versions_report_runtime_and_driver(void) {
  recap_library_versions v;
  CHECK_OK(recap_library_versions_get(&v));
  printf("\n  runtime %d, driver %d\n", v.runtime_version, v.driver_version);
  CU_ASSERT(v.runtime_version >= 13000);
  CU_ASSERT(v.driver_version >= 13000);
}

#endif /* RECAP_WITH_CUDA */

int main(int argc, char **argv) {
#if RECAP_WITH_CUDA
  if (argc == 3 && strcmp(argv[1], "--ipc-child") == 0) return ipc_child_main(argv[2]);
#else
  (void)argc;
  (void)argv;
#endif

  CU_pSuite any = test_add_suite("runtime_cuda/any", NULL, NULL);
#if RECAP_WITH_CUDA
  CU_ADD_TEST(any, test_cuda_errors_map_to_their_status_class);
  CU_ADD_TEST(any, test_cublas_and_driver_errors_map_to_their_status_class);
  CU_ADD_TEST(any, test_cuda_try_returns_status_and_names_call_error_and_place);
  CU_ADD_TEST(any, test_compiled_archs_list_sass_and_ptx);
  CU_ADD_TEST(any, test_device_count_without_driver_says_why);
#endif
  CU_ADD_TEST(any, test_device_count_without_cuda_device_is_ok_zero);
  CU_ADD_TEST(any, test_telemetry_of_host_device_is_not_supported);
  CU_ADD_TEST(any, test_telemetry_without_cuda_device_fails_cleanly);
  CU_ADD_TEST(any, test_library_versions_report_runtime_and_registered_blas);

  CU_pSuite gpu = test_add_cuda_suite("runtime_cuda/gpu", NULL, NULL);
#if RECAP_WITH_CUDA
  if (test_have_cuda() && gpu_suite_init() != 0) {
    fprintf(stderr, "the CUDA backend is missing from a CUDA build\n");
    return 1;
  }
  CU_ADD_TEST(gpu, test_device_count_is_at_least_one);
  CU_ADD_TEST(gpu, test_properties_describe_a_real_gpu);
  CU_ADD_TEST(gpu, test_compiled_archs_cover_the_device);
  CU_ADD_TEST(gpu, test_mem_get_info_reports_free_within_total);
  CU_ADD_TEST(gpu, test_mem_get_info_restores_callers_current_device);
  CU_ADD_TEST(gpu, test_stream_priority_is_clamped_to_device_range);
  CU_ADD_TEST(gpu, test_wrapped_external_stream_survives_the_wrapper);
  CU_ADD_TEST(gpu, test_wrap_external_rejects_implicit_streams);
  CU_ADD_TEST(gpu, test_wait_stream_orders_host_functions);
  CU_ADD_TEST(gpu, test_wait_stream_orders_copies);
  CU_ADD_TEST(gpu, test_native_streams_record_and_wait_on_events);
  CU_ADD_TEST(gpu, test_stream_query_reports_pending_then_idle);
  CU_ADD_TEST(gpu, test_timing_events_measure_real_copies);
  CU_ADD_TEST(gpu, test_elapsed_of_pending_event_is_not_ready);
  CU_ADD_TEST(gpu, test_never_recorded_event_is_complete);
  int count = 0;
  if (recap_device_count(RECAP_BACKEND_CUDA, &count) == RECAP_OK && count >= 2)
    CU_ADD_TEST(gpu, test_elapsed_across_devices_is_rejected);
  else if (test_have_cuda())
    printf("not registered: test_elapsed_across_devices_is_rejected (needs 2 CUDA devices)\n");
  CU_ADD_TEST(gpu, test_interprocess_event_handle_opens_and_waits);
  CU_ADD_TEST(gpu, test_capture_replays_memset_and_copy);
  CU_ADD_TEST(gpu, test_empty_capture_gives_empty_graph);
  CU_ADD_TEST(gpu, test_captured_host_function_args_outlive_the_graph);
  CU_ADD_TEST(gpu, test_synchronize_during_capture_is_refused_and_invalidates);
  CU_ADD_TEST(gpu, test_exec_update_takes_new_params_and_refuses_new_topology);
  CU_ADD_TEST(gpu, test_exchange_capture_mode_returns_previous_mode);
  CU_ADD_TEST(gpu, test_graph_debug_dot_writes_a_file);
  CU_ADD_TEST(gpu, test_failing_host_function_is_reported_at_next_synchronize);
  CU_ADD_TEST(gpu, test_telemetry_is_ok_or_not_supported);
  CU_ADD_TEST(gpu, test_library_versions_report_runtime_and_driver);
#else
  (void)gpu;
#endif
  return test_run_all();
}
