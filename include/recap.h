/*
 * recap.h: the one public header of recap, a CUDA graph-capture and replay engine.
 *
 * Usage (runtime layer):
 *
 *   recap_device dev = {RECAP_BACKEND_CUDA, 0};
 *   if (recap_device_count(RECAP_BACKEND_CUDA, &n) != RECAP_OK || n == 0)
 *     dev.backend = RECAP_BACKEND_HOST;          // the host backend is always there
 *   recap_stream *s = NULL;
 *   recap_status st = recap_stream_create(dev, 0, RECAP_STREAM_NON_BLOCKING, &s);
 *   if (st != RECAP_OK) fprintf(stderr, "%s: %s\n", recap_status_name(st), recap_last_error());
 *   ...
 *   recap_stream_destroy(s);
 *
 * Conventions:
 * - Every fallible function returns recap_status (RECAP_OK == 0, errors are negative). On
 *   failure the thread-local recap_last_error() says which call failed and why (the CUDA
 *   expression, file:line, device, op or spec position); out-parameters are left untouched.
 * - Objects are opaque handles with create/destroy pairs; destroy accepts NULL. Destroying
 *   something still in use (a stream mid-capture, a pool with live blocks) returns
 *   RECAP_STATUS_BUSY and leaves the object intact.
 * - Every API that launches work takes a stream; the legacy default stream is never used.
 * - Libraries never abort or exit on a runtime failure.
 *
 * Threading: every function may be called from any thread. The current device and the
 * current stream are per thread. A stream or event may be shared between threads, but the
 * caller orders conflicting uses (as with CUDA).
 */
#ifndef RECAP_H
#define RECAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define RECAP_API __attribute__((visibility("default")))
#else
#define RECAP_API
#endif

/* ------------------------------------------------------------------------------------------
 * Status codes
 * ---------------------------------------------------------------------------------------- */

/* XX(name, value, description). Values are stable: append, never renumber. */
#define RECAP_STATUS_MAP(XX)                                                                 \
  XX(OK, 0, "success")                                                                       \
  XX(INVALID_ARGUMENT, -1, "invalid argument")                                               \
  XX(OUT_OF_MEMORY, -2, "out of memory")                                                     \
  XX(NO_DEVICE, -3, "no device available")                                                   \
  XX(DEVICE_ERROR, -4, "device error")                                                       \
  XX(NOT_SUPPORTED, -5, "operation not supported")                                           \
  XX(BUSY, -6, "resource busy")                                                              \
  XX(ILLEGAL_DURING_CAPTURE, -7, "operation not permitted while a stream is capturing")      \
  XX(CAPTURE_INVALIDATED, -8, "stream capture was invalidated")                              \
  XX(SPEC_ERROR, -9, "invalid pipeline spec")                                                \
  XX(IO_ERROR, -10, "input/output error")                                                    \
  XX(NOT_READY, -11, "work not yet complete")                                                \
  XX(LIBRARY_ERROR, -12, "error in a CUDA library (cuBLAS, cuBLASLt, NVRTC, NCCL)")          \
  XX(INTERNAL, -13, "internal error")                                                        \
  XX(TIMEOUT, -14, "timed out")

typedef enum {
#define RECAP_STATUS_ENUM_(name, value, text) RECAP_STATUS_##name = value,
  RECAP_STATUS_MAP(RECAP_STATUS_ENUM_)
#undef RECAP_STATUS_ENUM_
} recap_status;

/* Success is tested everywhere; the short spelling keeps call sites readable. */
#define RECAP_OK RECAP_STATUS_OK

/* "RECAP_STATUS_OUT_OF_MEMORY"; "RECAP_STATUS_UNKNOWN" for a value not in the map. Never NULL. */
RECAP_API const char *recap_status_name(recap_status status);
/* "out of memory"; a generic text for unknown values. Never NULL. */
RECAP_API const char *recap_status_string(recap_status status);
/* The detail message of the last failure on this thread ("" if none). Valid until the next
 * recap call on this thread. */
RECAP_API const char *recap_last_error(void);
/* Forgets this thread's detail message. */
RECAP_API void recap_clear_error(void);

/* "0.1.0". */
RECAP_API const char *recap_version(void);

/* ------------------------------------------------------------------------------------------
 * Devices
 * ---------------------------------------------------------------------------------------- */

typedef enum {
  RECAP_BACKEND_HOST = 0, /* the CPU reference backend: always available */
  RECAP_BACKEND_CUDA = 1,
} recap_backend_kind;

/* "host" or "cuda"; NULL for an unknown value. */
RECAP_API const char *recap_backend_name(recap_backend_kind backend);
/* Parses "host" or "cuda". */
RECAP_API recap_status recap_backend_parse(const char *name, recap_backend_kind *out);
/* Whether this build includes the CUDA backend (false in --config=hostonly builds). */
RECAP_API int recap_backend_compiled(recap_backend_kind backend);

typedef struct {
  recap_backend_kind backend;
  int index;
} recap_device;

typedef struct {
  char name[256];
  int major, minor;                 /* compute capability; 0.0 on host */
  int multiprocessor_count;         /* SMs; logical CPUs on host */
  size_t total_memory;              /* bytes */
  size_t l2_cache_bytes;
  int clock_khz;                    /* SM clock; 0 if unknown */
  int memory_clock_khz;             /* 0 if unknown */
  int memory_bus_width_bits;        /* 0 if unknown */
  size_t max_shared_memory_per_block;        /* default limit */
  size_t max_shared_memory_per_block_optin;  /* limit after cudaFuncSetAttribute */
  int warp_size;
  int max_threads_per_block;
  int pci_bus_id;
  int integrated;
} recap_device_properties;

/* Whether at least one device of the backend is usable. Never fails. */
RECAP_API int recap_device_is_available(recap_backend_kind backend);
/* Number of devices (the host backend has exactly 1). RECAP_OK with *count = 0 when the CUDA
 * driver or device is absent; the reason is still in recap_last_error(). */
RECAP_API recap_status recap_device_count(recap_backend_kind backend, int *count);
/* The calling thread's current device (default: index 0 of CUDA if available, else host). */
RECAP_API recap_status recap_device_current(recap_device *out);
RECAP_API recap_status recap_device_set(recap_device device);
RECAP_API recap_status recap_device_properties_get(recap_device device,
                                                   recap_device_properties *out);
/* Architectures this build carries code for, e.g. "sm_80 sm_90 compute_90"; "" on host. */
RECAP_API const char *recap_device_compiled_archs(recap_backend_kind backend);
RECAP_API recap_status recap_device_can_access_peer(recap_device device, recap_device peer,
                                                    int *out);
RECAP_API recap_status recap_device_mem_get_info(recap_device device, size_t *free_bytes,
                                                 size_t *total_bytes);
/* Waits for all work on the device. RECAP_STATUS_ILLEGAL_DURING_CAPTURE (and the capture is
 * invalidated) when called while a capture that forbids it is under way. */
RECAP_API recap_status recap_device_synchronize(recap_device device);

typedef struct {
  int runtime_version; /* CUDA runtime, e.g. 13000; 0 on host */
  int driver_version;  /* 0 if no driver */
  int cublas_version;  /* 0 if not loaded */
  int cublaslt_version;
} recap_library_versions;
RECAP_API recap_status recap_library_versions_get(recap_library_versions *out);

/* Telemetry through NVML (loaded with dlopen). RECAP_STATUS_NOT_SUPPORTED where NVML or a sensor
 * is absent (always on host). Fields that a sensor does not report are -1. */
typedef struct {
  int gpu_utilization_percent;
  int memory_utilization_percent;
  int temperature_c;
  double power_watts;
  int sm_clock_mhz;
  long long memory_used_bytes;
  long long memory_total_bytes;
} recap_telemetry;
RECAP_API recap_status recap_device_telemetry(recap_device device, recap_telemetry *out);

/* ------------------------------------------------------------------------------------------
 * Streams
 * ---------------------------------------------------------------------------------------- */

typedef struct recap_stream recap_stream;

enum {
  RECAP_STREAM_DEFAULT = 0,
  RECAP_STREAM_NON_BLOCKING = 1, /* does not synchronize with the legacy default stream */
};

typedef enum {
  RECAP_CAPTURE_NONE = 0,
  RECAP_CAPTURE_ACTIVE = 1,
  RECAP_CAPTURE_INVALIDATED = 2,
} recap_capture_status;

typedef enum {
  RECAP_CAPTURE_MODE_GLOBAL = 0,
  RECAP_CAPTURE_MODE_THREAD_LOCAL = 1,
  RECAP_CAPTURE_MODE_RELAXED = 2,
} recap_capture_mode;

/* Creates a stream on `device`. priority: 0 = default, lower numbers = higher priority
 * (as CUDA); it is clamped to the device's range. flags: RECAP_STREAM_*. */
RECAP_API recap_status recap_stream_create(recap_device device, int priority, unsigned flags,
                                           recap_stream **out);
/* Wraps a caller's cudaStream_t (passed as void *). The wrapper does not own the stream:
 * destroying it leaves the CUDA stream alive. NULL (the legacy default stream) is rejected. */
RECAP_API recap_status recap_stream_wrap_external(recap_device device, void *cuda_stream,
                                                  recap_stream **out);
/* RECAP_STATUS_BUSY while the stream is capturing. NULL is accepted. */
RECAP_API recap_status recap_stream_destroy(recap_stream *stream);
/* The calling thread's current stream on its current device. Each thread starts with a
 * process-wide per-device stream that recap creates lazily (never the legacy default). */
RECAP_API recap_status recap_stream_current(recap_stream **out);
RECAP_API recap_status recap_stream_set_current(recap_stream *stream);
RECAP_API recap_device recap_stream_device(const recap_stream *stream);
RECAP_API int recap_stream_priority(const recap_stream *stream);
/* The underlying cudaStream_t (NULL on host). */
RECAP_API void *recap_stream_native(const recap_stream *stream);
/* RECAP_OK if all work is done, RECAP_STATUS_NOT_READY if not. Illegal on a capturing stream. */
RECAP_API recap_status recap_stream_query(recap_stream *stream);
/* Illegal on a capturing stream (invalidates the capture). */
RECAP_API recap_status recap_stream_synchronize(recap_stream *stream);
/* Makes `stream` wait for `other`'s currently submitted work (records an internal event). */
RECAP_API recap_status recap_stream_wait_stream(recap_stream *stream, recap_stream *other);
/* Whether the stream is capturing; never makes a call that would invalidate a capture. */
RECAP_API recap_status recap_stream_capture_status(recap_stream *stream,
                                                   recap_capture_status *out);
RECAP_API int recap_stream_is_capturing(recap_stream *stream);

/* ------------------------------------------------------------------------------------------
 * Events
 * ---------------------------------------------------------------------------------------- */

typedef struct recap_event recap_event;

enum {
  RECAP_EVENT_DEFAULT = 0,
  RECAP_EVENT_TIMING = 1,       /* can measure elapsed time */
  RECAP_EVENT_BLOCKING = 2,     /* synchronize blocks the thread instead of spinning */
  RECAP_EVENT_INTERPROCESS = 4, /* shareable with other processes; requires no TIMING */
};

RECAP_API recap_status recap_event_create(recap_device device, unsigned flags,
                                          recap_event **out);
RECAP_API recap_status recap_event_destroy(recap_event *event);
RECAP_API recap_status recap_event_record(recap_event *event, recap_stream *stream);
/* RECAP_OK if complete (a never-recorded event is complete), RECAP_STATUS_NOT_READY if not.
 * Illegal on an event recorded inside an active capture. */
RECAP_API recap_status recap_event_query(recap_event *event);
RECAP_API recap_status recap_event_synchronize(recap_event *event);
RECAP_API recap_status recap_stream_wait_event(recap_stream *stream, recap_event *event);
/* Milliseconds between two completed timing events of one device. RECAP_STATUS_INVALID_ARGUMENT
 * across devices or without RECAP_EVENT_TIMING; RECAP_STATUS_NOT_READY if either is pending. */
RECAP_API recap_status recap_event_elapsed_ms(recap_event *start, recap_event *end,
                                              float *out_ms);

/* Interprocess events (CUDA only): a 64-byte opaque handle. */
typedef struct {
  unsigned char bytes[64];
} recap_ipc_event_handle;
RECAP_API recap_status recap_event_ipc_handle(recap_event *event, recap_ipc_event_handle *out);
RECAP_API recap_status recap_event_ipc_open(recap_device device,
                                            const recap_ipc_event_handle *handle,
                                            recap_event **out);

/* ------------------------------------------------------------------------------------------
 * Random numbers: counter-based Philox4x32-10, one generator per device.
 *
 * Element i of a draw made at generator offset o under seed s takes the 32-bit word i % 4 of
 * philox4x32_10(key = s, counter = {i / 4 (64 bits), o (64 bits)}). Each draw (one random op)
 * advances the offset by 1, whatever its size, so consecutive draws never share a counter and
 * a draw of n elements is a prefix of the same draw of m > n elements. Raw bits are identical
 * on host and CUDA; uniform floats are exact conversions of the bits (identical); normals use
 * the Box-Muller transform and agree to a few ulp (the devices' log/sin/cos differ).
 * ---------------------------------------------------------------------------------------- */

typedef struct {
  uint64_t seed;
  uint64_t offset;
} recap_rng_state;

RECAP_API recap_status recap_rng_manual_seed(recap_device device, uint64_t seed);
/* Seeds from a non-deterministic source and returns the seed chosen. */
RECAP_API recap_status recap_rng_seed(recap_device device, uint64_t *out_seed);
RECAP_API recap_status recap_rng_initial_seed(recap_device device, uint64_t *out_seed);
/* The state reflects every eager draw and every replay of a graph that draws. */
RECAP_API recap_status recap_rng_get_state(recap_device device, recap_rng_state *out);
RECAP_API recap_status recap_rng_set_state(recap_device device, const recap_rng_state *state);

/* ------------------------------------------------------------------------------------------
 * NVTX (no cost without a profiler; compiled out with -DRECAP_NO_NVTX)
 * ---------------------------------------------------------------------------------------- */

RECAP_API void recap_nvtx_mark(const char *message);
RECAP_API void recap_nvtx_range_push(const char *message);
RECAP_API void recap_nvtx_range_pop(void);

#if defined(__GNUC__) && !defined(__cplusplus)
/* RECAP_NVTX_SCOPE("name"); pushes a range that pops at the end of the enclosing block. */
static inline void recap__nvtx_scope_end_(int *unused) {
  (void)unused;
  recap_nvtx_range_pop();
}
#define RECAP_NVTX_CAT2_(a, b) a##b
#define RECAP_NVTX_CAT_(a, b) RECAP_NVTX_CAT2_(a, b)
#define RECAP_NVTX_SCOPE(message)                                                           \
  int RECAP_NVTX_CAT_(recap_nvtx_scope_, __LINE__)                                          \
      __attribute__((cleanup(recap__nvtx_scope_end_), unused)) =                            \
          (recap_nvtx_range_push(message), 0)
#endif

#ifdef __cplusplus
}
#endif

#endif /* RECAP_H */
