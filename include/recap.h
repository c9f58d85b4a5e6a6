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
 *   expression, device, op or spec position; RECAP_ERROR_LOCATIONS=1 in the environment adds
 *   the recap function and source line that noticed); out-parameters are left untouched.
 * - Objects are opaque handles with create/destroy pairs; destroy accepts NULL. Destroying
 *   something still in use (a stream mid-capture, a pool with live blocks) returns
 *   RECAP_STATUS_BUSY and leaves the object intact.
 * - Every API that launches work takes a stream; the legacy default stream is never used.
 * - Libraries never abort or exit on a runtime failure.
 * - Structs a caller fills and passes in (recap_pipeline_options, recap_generator_options,
 *   recap_request) begin with `size_t struct_size`, set by their RECAP_<NAME>_INIT initializer
 *   to the size the caller was compiled with. recap reads only the first struct_size bytes, so
 *   a program built against an older recap.h (a smaller struct) keeps working with a newer
 *   librecap.so.0: fields it does not have take their defaults, which are always zero. A
 *   struct_size of 0 (a struct zeroed without its initializer) is RECAP_STATUS_INVALID_ARGUMENT;
 *   a larger struct_size than this library knows is accepted when the unknown bytes are all
 *   zero (fields left at their defaults), else RECAP_STATUS_NOT_SUPPORTED. New fields are only
 *   ever appended, and each addition grows the struct's size.
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

/* The initializer of a size-prefixed struct (conventions above): struct_size set, every other
 * field zero. Designated in C, so that -Wextra's missing-field-initializers stays quiet;
 * positional in C++, which has no designated initializers before C++20. */
#ifdef __cplusplus
#define RECAP_STRUCT_INIT_(type) \
  { sizeof(type) }
#else
#define RECAP_STRUCT_INIT_(type) \
  { .struct_size = sizeof(type) }
#endif

/* ------------------------------------------------------------------------------------------
 * Status codes
 * ---------------------------------------------------------------------------------------- */

/* XX(name, value, description). Values are stable: append, never renumber. */
#define RECAP_STATUS_MAP(XX)                                                            \
  XX(OK, 0, "success")                                                                  \
  XX(INVALID_ARGUMENT, -1, "invalid argument")                                          \
  XX(OUT_OF_MEMORY, -2, "out of memory")                                                \
  XX(NO_DEVICE, -3, "no device available")                                              \
  XX(DEVICE_ERROR, -4, "device error")                                                  \
  XX(NOT_SUPPORTED, -5, "operation not supported")                                      \
  XX(BUSY, -6, "resource busy")                                                         \
  XX(ILLEGAL_DURING_CAPTURE, -7, "operation not permitted while a stream is capturing") \
  XX(CAPTURE_INVALIDATED, -8, "stream capture was invalidated")                         \
  XX(SPEC_ERROR, -9, "invalid pipeline spec")                                           \
  XX(IO_ERROR, -10, "input/output error")                                               \
  XX(NOT_READY, -11, "work not yet complete")                                           \
  XX(LIBRARY_ERROR, -12, "error in a CUDA library (cuBLAS, cuBLASLt, NVRTC, NCCL)")     \
  XX(INTERNAL, -13, "internal error")                                                   \
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
/* The detail message of the last failure on this thread ("" if none), at most 2 KiB: a spec
 * that fails its check (RECAP_STATUS_SPEC_ERROR) puts there as many of its
 * "FILE:LINE:COL: error: ..." lines as fit, then "(and N more errors)". Valid until the next
 * recap call on this thread. */
RECAP_API const char *recap_last_error(void);
/* The same failure's complete text: for a spec that failed its check, every error line (the
 * loader keeps the first 100 and counts the rest in a last "(and N more errors)" line); for
 * any other failure the same as recap_last_error(). Never NULL; valid until the next recap call
 * on this thread. */
RECAP_API const char *recap_last_error_full(void);
/* Forgets this thread's detail message (and its complete text). */
RECAP_API void recap_clear_error(void);

/* The version of this header, as plain lines that build tools parse (CMake reads them with a
 * regular expression). MAJOR changes when the ABI breaks: it is the N of librecap.so.N and of
 * its symbol version node RECAP_N. */
#define RECAP_VERSION_MAJOR 0
#define RECAP_VERSION_MINOR 1
#define RECAP_VERSION_PATCH 0
#define RECAP_VERSION_STRING "0.1.0"

/* The version of the library the program runs with (RECAP_VERSION_STRING of the recap.h it was
 * built from): compare it with the header's to notice a mismatched librecap.so. */
RECAP_API const char *recap_version(void);
/* The git commit the library was built from ("abc1234", "-dirty" appended when the tree had
 * uncommitted changes), or "unknown" (a build outside git, or one not stamped). Never NULL. */
RECAP_API const char *recap_build_commit(void);

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
  int major, minor;         /* compute capability; 0.0 on host */
  int multiprocessor_count; /* SMs; logical CPUs on host */
  size_t total_memory;      /* bytes */
  size_t l2_cache_bytes;
  int clock_khz;                            /* SM clock; 0 if unknown */
  int memory_clock_khz;                     /* 0 if unknown */
  int memory_bus_width_bits;                /* 0 if unknown */
  size_t max_shared_memory_per_block;       /* default limit */
  size_t max_shared_memory_per_block_optin; /* limit after cudaFuncSetAttribute */
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
RECAP_API recap_status recap_stream_capture_status(recap_stream *stream, recap_capture_status *out);
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

RECAP_API recap_status recap_event_create(recap_device device, unsigned flags, recap_event **out);
RECAP_API recap_status recap_event_destroy(recap_event *event);
RECAP_API recap_status recap_event_record(recap_event *event, recap_stream *stream);
/* RECAP_OK if complete (a never-recorded event is complete), RECAP_STATUS_NOT_READY if not.
 * Illegal on an event recorded inside an active capture. */
RECAP_API recap_status recap_event_query(recap_event *event);
RECAP_API recap_status recap_event_synchronize(recap_event *event);
RECAP_API recap_status recap_stream_wait_event(recap_stream *stream, recap_event *event);
/* Events and a caller's own CUDA stream (a cudaStream_t passed as void *), for handing work
 * to and from another library (DLPack's stream handshake) without wrapping its stream: unlike
 * recap_stream_wrap_external, the implicit streams are accepted too (NULL and cudaStreamLegacy,
 * the legacy default stream; cudaStreamPerThread), taken on the event's device. The stream
 * must belong to the event's device. Host backend: RECAP_STATUS_NOT_SUPPORTED (no CUDA
 * streams). recap_event_record_native records `event` on the caller's stream;
 * recap_native_stream_wait_event makes the caller's stream wait for `event`. */
RECAP_API recap_status recap_event_record_native(recap_event *event, void *cuda_stream);
RECAP_API recap_status recap_native_stream_wait_event(void *cuda_stream, recap_event *event);
/* Milliseconds between two completed timing events of one device. RECAP_STATUS_INVALID_ARGUMENT
 * across devices or without RECAP_EVENT_TIMING; RECAP_STATUS_NOT_READY if either is pending. */
RECAP_API recap_status recap_event_elapsed_ms(recap_event *start, recap_event *end, float *out_ms);

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
 * philox4x32_10(key = {lo32(s), hi32(s)}, counter = {lo32(i / 4), hi32(i / 4), lo32(o),
 * hi32(o)}). Each draw (one random op) advances the offset by 1, whatever its size, so
 * consecutive draws never share a counter and a draw of n elements is a prefix of the same
 * draw of m > n elements. Raw bits are identical on host and CUDA; uniform floats are
 * (bits >> 8) * 2^-24, scaled into [lo, hi) with one fmaf (identical); normals use the
 * Box-Muller transform on the word pairs (0, 1) and (2, 3) of each block and agree within
 * 1e-6 relative + 1e-6 * std absolute (a few ulp: the devices' log/sin/cos differ).
 *
 * A generator never seeded starts from the fixed seed 67280421310721 at offset 0, so runs are
 * reproducible unless the program seeds (recap_rng_seed picks a random seed).
 * Draws captured into a graph are graph-safe: every replay draws new numbers, the same ones
 * the same sequence of eager draws would have drawn, and advances the offset as they would.
 * ---------------------------------------------------------------------------------------- */

typedef struct {
  uint64_t seed;
  uint64_t offset;
} recap_rng_state;

/* Sets the seed (and the initial seed) and resets the offset to 0. */
RECAP_API recap_status recap_rng_manual_seed(recap_device device, uint64_t seed);
/* Seeds from a non-deterministic source (getrandom, else /dev/urandom) and returns the seed
 * chosen. RECAP_STATUS_IO_ERROR if neither source can be read. */
RECAP_API recap_status recap_rng_seed(recap_device device, uint64_t *out_seed);
/* The seed last given by recap_rng_manual_seed or recap_rng_seed (the default seed if neither
 * was called); recap_rng_set_state does not change it. */
RECAP_API recap_status recap_rng_initial_seed(recap_device device, uint64_t *out_seed);
/* The state reflects every eager draw and every replay of a graph that draws. */
RECAP_API recap_status recap_rng_get_state(recap_device device, recap_rng_state *out);
RECAP_API recap_status recap_rng_set_state(recap_device device, const recap_rng_state *state);

/* ------------------------------------------------------------------------------------------
 * Element types and tensor views
 * ---------------------------------------------------------------------------------------- */

#define RECAP_DTYPE_MAP(XX) \
  XX(F32, "f32", 4, 1)      \
  XX(F16, "f16", 2, 1)      \
  XX(BF16, "bf16", 2, 1)    \
  XX(I32, "i32", 4, 0)      \
  XX(I64, "i64", 8, 0)

typedef enum {
#define RECAP_DTYPE_ENUM_(name, text, size, is_float) RECAP_DTYPE_##name,
  RECAP_DTYPE_MAP(RECAP_DTYPE_ENUM_)
#undef RECAP_DTYPE_ENUM_
      RECAP_DTYPE_COUNT
} recap_dtype;

/* "f32", ...; NULL for an invalid value. */
RECAP_API const char *recap_dtype_name(recap_dtype dtype);
/* Bytes per element; 0 for an invalid value. */
RECAP_API size_t recap_dtype_size(recap_dtype dtype);
RECAP_API int recap_dtype_is_float(recap_dtype dtype);
/* PyTorch's name: "float32", "float16", "bfloat16", "int32", "int64"; NULL for an invalid
 * value. */
RECAP_API const char *recap_dtype_long_name(recap_dtype dtype);
/* The short name ("bf16") or PyTorch's ("bfloat16"); RECAP_STATUS_INVALID_ARGUMENT naming both
 * lists otherwise. */
RECAP_API recap_status recap_dtype_parse(const char *name, recap_dtype *out);

enum { RECAP_MAX_DIMS = 4 };

/* A view of memory owned elsewhere: row-major shape with element strides, so reshapes,
 * transposes and slices are new views of the same bytes. */
typedef struct {
  void *data;
  recap_dtype dtype;
  int ndim;
  int64_t shape[RECAP_MAX_DIMS];
  int64_t strides[RECAP_MAX_DIMS]; /* in elements */
} recap_tensor;

/* ------------------------------------------------------------------------------------------
 * Per-sequence step metadata for serving (the paged ops: seq_positions, paged_kv_write,
 * paged_attention, sample, decode_advance; docs/SERVING.md)
 *
 * One step runs T tokens packed from up to Bs sequences. What each sequence does in the step is
 * one row of an i32 tensor `seqs` [Bs, RECAP_SEQ_BLOCKS + MB] in device memory, read by the
 * kernels when they run, so one captured graph serves any mix of sequences and lengths. The
 * host fills the rows (one copy per step; after a decode step the decode_advance op updates
 * them on the device). An all-zero row is an unused slot: it owns no token, writes nothing and
 * samples nothing.
 *
 *   RECAP_SEQ_LEN          keys of the sequence in the KV cache once this step's tokens are
 *                          written (its context length after the step)
 *   RECAP_SEQ_Q_START      its first token in the step's packed tokens [0, T)
 *   RECAP_SEQ_Q_LEN        its tokens in the step (0: none); they sit at positions
 *                          LEN - Q_LEN .. LEN - 1. Rows with tokens are packed in row order:
 *                          each Q_START is the previous rows' Q_START + Q_LEN
 *   RECAP_SEQ_OUT_INDEX    index, in the request's output, of the token this step samples
 *   RECAP_SEQ_SEED_LO/_HI  the request's 64-bit sampling seed
 *   RECAP_SEQ_TOP_K        keep the K most likely tokens (0: all)
 *   RECAP_SEQ_TEMPERATURE  f32 bits; 0: greedy (argmax, ties to the lowest id)
 *   RECAP_SEQ_TOP_P        f32 bits; keep the most likely tokens up to this mass (0 or 1: all)
 *   RECAP_SEQ_MIN_P        f32 bits; keep tokens of probability >= MIN_P x the largest (0: all)
 *   RECAP_SEQ_BLOCKS + j   the KV block holding positions [j x BS, (j + 1) x BS), BS being the
 *                          cache's block size; MB = the row width - RECAP_SEQ_BLOCKS
 * Columns between RECAP_SEQ_MIN_P and RECAP_SEQ_BLOCKS are reserved (write 0).
 * ---------------------------------------------------------------------------------------- */
enum {
  RECAP_SEQ_LEN = 0,
  RECAP_SEQ_Q_START = 1,
  RECAP_SEQ_Q_LEN = 2,
  RECAP_SEQ_OUT_INDEX = 3,
  RECAP_SEQ_SEED_LO = 4,
  RECAP_SEQ_SEED_HI = 5,
  RECAP_SEQ_TOP_K = 6,
  RECAP_SEQ_TEMPERATURE = 7,
  RECAP_SEQ_TOP_P = 8,
  RECAP_SEQ_MIN_P = 9,
  RECAP_SEQ_BLOCKS = 16,
};

/* ------------------------------------------------------------------------------------------
 * GEMM settings (process-wide; read at each launch, so a captured graph keeps what it
 * captured: change them before warmup)
 * ---------------------------------------------------------------------------------------- */

typedef enum {
  RECAP_GEMM_LIBRARY_CUBLASLT = 0, /* default: heuristics-chosen algorithm, fused epilogues */
  RECAP_GEMM_LIBRARY_CUBLAS = 1,   /* cublasGemmEx / cublasGemmStridedBatchedEx + our epilogue */
} recap_gemm_library;

/* TF32 tensor-core math for f32 GEMMs on CUDA, off by default (PyTorch's allow_tf32): inputs
 * are rounded to 10 mantissa bits, so results differ from the host by about 1e-3 relative. */
RECAP_API void recap_gemm_set_allow_tf32(int allow);
RECAP_API int recap_gemm_allow_tf32(void);
/* RECAP_STATUS_INVALID_ARGUMENT for a value outside the enum. */
RECAP_API recap_status recap_gemm_set_library(recap_gemm_library library);
RECAP_API recap_gemm_library recap_gemm_library_get(void);

/* The GEMM tuner (RECAP_TUNE, RECAP_TUNE_FILE: docs/gemm_tuning.md) and its counters since the
 * environment was last read, process-wide. `recap run` and `recap bench` print them as one
 * line when the tuner is on.
 *
 *   recap_gemm_tune_stats s;
 *   recap_gemm_tune_stats_get(&s);
 *   if (s.mode) printf("%llu problems timed\n", (unsigned long long)s.tunings);
 */
typedef struct {
  int mode;                  /* RECAP_TUNE: 0 off (nothing counted), 1 tune, 2 cache only */
  char tune_file[1024];      /* the tuning file read and written (RECAP_TUNE_FILE) */
  uint64_t tunings;          /* problems timed */
  uint64_t candidates_timed; /* candidates timed over all of them */
  uint64_t rejected;         /* candidates that failed to run or disagreed with the default */
  uint64_t cache_hits;       /* problems resolved from the tuning cache without timing */
  uint64_t untimed_defaults; /* problems left on the default: cache-only mode or tuning failed */
  uint64_t stale;            /* cached choices the library no longer offers for the problem */
  uint64_t file_warnings;    /* warnings from reading the tuning file */
} recap_gemm_tune_stats;

/* RECAP_STATUS_INVALID_ARGUMENT for a NULL out. */
RECAP_API recap_status recap_gemm_tune_stats_get(recap_gemm_tune_stats *out);

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
#define RECAP_NVTX_SCOPE(message)                                \
  int RECAP_NVTX_CAT_(recap_nvtx_scope_, __LINE__)               \
      __attribute__((cleanup(recap__nvtx_scope_end_), unused)) = \
          (recap_nvtx_range_push(message), 0)
#endif

/* ------------------------------------------------------------------------------------------
 * Caching allocator and private pools
 *
 * One caching allocator per device, created on first use and configured from the
 * RECAP_ALLOC_CONF environment variable (PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax):
 *   backend:native|caching|cudaMalloc|cudaMallocAsync, max_split_size_mb:N (N > 20),
 *   garbage_collection_threshold:T (0 < T < 1, acts once a memory fraction is set),
 *   roundup_power2_divisions:D (a power of two) or roundup_power2_divisions:[256:1,512:2,>:8]
 *   (per power-of-two MiB interval), expandable_segments:True|False.
 * backend:native (PyTorch's name) and backend:caching are the caching allocator, the default;
 * backend:cudaMalloc caches nothing (each block is its own raw allocation; recap's
 * backend:native before, and PyTorch's PYTORCH_NO_CUDA_MEMORY_CACHING=1).
 * expandable_segments:True (caching allocator only): segments reserve address space and grow
 * by mapping chunks (2 MiB small, 20 MiB large) at a stable base, so freed memory serves any
 * later size; empty_cache unmaps only whole free chunks at a segment's end (or whole free
 * segments), never memory of a live block or of a private pool still referenced. Such memory
 * cannot be shared by IPC. backend:cudaMallocAsync uses the driver's stream-ordered pool:
 * malloc, free, record_stream, empty_cache and recap_memory_allocated/reserved (and max_)
 * work, and so do recap_graph captures and pipelines' graph mode, without a private pool (an
 * allocation on a capturing stream is refused); the snapshot, summary, full stats, private
 * pools (recap_pool_*, or a pool passed to recap_graph_capture_begin), the memory fraction and
 * IPC return RECAP_STATUS_NOT_SUPPORTED. docs/ALLOCATOR.md has the details.
 * A bad setting makes every allocator call on that device fail with
 * RECAP_STATUS_INVALID_ARGUMENT naming the key.
 *
 *   void *p = NULL;
 *   if (recap_malloc(dev, bytes, stream, &p) != RECAP_OK) ... recap_last_error() ...
 *   launch work on `stream` using p; another stream uses it too:
 *   recap_record_stream(p, other);
 *   recap_free(p);              // reused once `stream` and `other` are past this point
 *
 * Blocks: requests are rounded up to 512 bytes (or the configured power-of-two division);
 * requests up to 1 MiB are packed into 2 MiB segments, 1-10 MiB into 20 MiB segments (in a
 * private pool: rounded up to 2 MiB, graph memory being one planned arena), larger
 * ones get a segment rounded up to 2 MiB. A block belongs to the stream it was allocated on and
 * is reused only by allocations on that stream, so work queued on the stream never races a
 * reuse. Freed neighbours merge; free segments stay reserved until recap_empty_cache.
 *
 * Out of memory: outside a capture the allocator waits for the device, releases its unused
 * segments and retries once; then RECAP_STATUS_OUT_OF_MEMORY with a message saying what was
 * requested, the capacity, and what is allocated, reserved, held in private pools and free.
 * During any capture it never synchronizes or releases memory: segments are reserved under
 * the relaxed capture mode, a failure is a clean RECAP_STATUS_OUT_OF_MEMORY, and frees that
 * wait on other streams are completed after the capture ends.
 *
 * Private pools (graph memory): while a route is active, allocations made on the routed
 * stream come from the pool, and blocks freed in a pool are reused only by allocations routed
 * to it (so a graph's addresses stay valid for replay). Pools are reference counted; routes
 * hold a reference. Once the last reference goes, the pool's free segments are released by
 * recap_empty_cache; memory of a pool still referenced is never released. With
 * backend:cudaMalloc, private pools still cache (a captured graph replays into their memory).
 * ---------------------------------------------------------------------------------------- */

/* Index of the second dimension of every recap_memory_stats array. */
typedef enum {
  RECAP_STAT_ALL = 0,
  RECAP_STAT_SMALL = 1, /* blocks of the small pool (segments of 2 MiB) */
  RECAP_STAT_LARGE = 2,
  RECAP_STAT_TYPE_COUNT = 3,
} recap_stat_type;

typedef struct {
  int64_t current;
  int64_t peak;      /* highest current since creation or recap_memory_reset_peak */
  int64_t allocated; /* sum of increases */
  int64_t freed;     /* sum of decreases */
} recap_memory_stat;

/* PyTorch's memory_stats() keys. Bytes are block sizes (rounded), except requested_*. */
typedef struct {
  recap_memory_stat allocated_bytes[RECAP_STAT_TYPE_COUNT]; /* blocks handed out, not freed */
  recap_memory_stat allocated_count[RECAP_STAT_TYPE_COUNT];
  recap_memory_stat reserved_bytes[RECAP_STAT_TYPE_COUNT]; /* segments from the device */
  recap_memory_stat reserved_count[RECAP_STAT_TYPE_COUNT];
  recap_memory_stat active_bytes[RECAP_STAT_TYPE_COUNT]; /* allocated or freed but still
                                                            waiting on other streams */
  recap_memory_stat active_count[RECAP_STAT_TYPE_COUNT];
  recap_memory_stat inactive_split_bytes[RECAP_STAT_TYPE_COUNT]; /* free parts of segments
                                                                    that are split */
  recap_memory_stat inactive_split_count[RECAP_STAT_TYPE_COUNT];
  recap_memory_stat requested_bytes[RECAP_STAT_TYPE_COUNT]; /* sizes as requested */
  recap_memory_stat requested_count[RECAP_STAT_TYPE_COUNT];
  int64_t num_alloc_retries; /* out-of-memory retries after releasing the cache */
  int64_t num_ooms;          /* RECAP_STATUS_OUT_OF_MEMORY returned */
  int64_t num_device_alloc;  /* raw allocations (cudaMalloc) */
  int64_t num_device_free;
  int64_t num_sync_all_streams; /* device synchronizations before a retry */
} recap_memory_stats;

/* Returns a block of at least `size` bytes for use on `stream` (which must belong to
 * `device`; it may not be NULL). size 0 gives *out = NULL and RECAP_OK. Blocks are at least
 * 256-byte aligned (as cudaMalloc's). RECAP_STATUS_OUT_OF_MEMORY as described above; *out is
 * then untouched. */
RECAP_API recap_status recap_malloc(recap_device device, size_t size, recap_stream *stream,
                                    void **out);
/* Returns a block to its allocator (any device); NULL is accepted. The block is reused on its
 * stream at once, or after the streams given to recap_record_stream reach this point.
 * RECAP_STATUS_INVALID_ARGUMENT for a pointer recap_malloc did not return (or already freed).
 * If recording the events that guard a cross-stream block fails, that status is returned but
 * the block is still released: it is reused once the events can be recorded. */
RECAP_API recap_status recap_free(void *ptr);
/* Declares that the block containing `ptr` (any address inside it) is used on `stream`: when
 * freed, it is not reused until `stream`'s work submitted before the free is done.
 * RECAP_STATUS_INVALID_ARGUMENT when ptr lies in no allocated block. */
RECAP_API recap_status recap_record_stream(void *ptr, recap_stream *stream);
/* Releases every unused segment to the device, except those of private pools still
 * referenced and blocks still waiting on other streams. RECAP_STATUS_ILLEGAL_DURING_CAPTURE
 * (nothing changes, no capture is disturbed) while any capture is under way. */
RECAP_API recap_status recap_empty_cache(recap_device device);
/* Caps the memory the allocator reserves on the device at fraction * capacity (0 < fraction
 * <= 1); allocations past it fail as out of memory. */
RECAP_API recap_status recap_set_memory_fraction(recap_device device, double fraction);
RECAP_API recap_status recap_memory_stats_get(recap_device device, recap_memory_stats *out);
/* Sets every peak to its current value. */
RECAP_API recap_status recap_memory_reset_peak(recap_device device);
/* Shorthands for allocated_bytes / reserved_bytes [RECAP_STAT_ALL] .current and .peak. */
RECAP_API recap_status recap_memory_allocated(recap_device device, size_t *out);
RECAP_API recap_status recap_memory_reserved(recap_device device, size_t *out);
RECAP_API recap_status recap_memory_max_allocated(recap_device device, size_t *out);
RECAP_API recap_status recap_memory_max_reserved(recap_device device, size_t *out);
/* A human-readable table of the stats. *text is allocated with malloc: release it with
 * free() (not recap_free, which is for device blocks). */
RECAP_API recap_status recap_memory_summary(recap_device device, char **text);
/* A JSON snapshot taken atomically, in torch.cuda.memory._snapshot()'s shape plus recap's own
 * keys (docs/ALLOCATOR.md has the tables): {"segments": [{"device", "address", "total_size",
 * "allocated_size", "active_size", "requested_size", "stream", "segment_type":
 * "small"|"large", "segment_pool_id": [0, pool id], "is_expandable": bool, "frames": [],
 * "reserved_address_space", "blocks": [{"address", "size", "requested_size", "state":
 * "active_allocated"|"active_pending_free"|"inactive", "frames": []}]}], "device_traces":
 * [[], ...], "memory_stats": {"allocation.all.current": n, ...} (torch.cuda.memory_stats()'s
 * flat keys), "device": {"backend", "index"}, "pools": [{"id", "use_count", "reserved_bytes",
 * "segment_count"}]}. The stats equal the sums over the segments. Addresses and streams are
 * integers. Release *json with free(). */
RECAP_API recap_status recap_memory_snapshot_json(recap_device device, char **json);

/* A private pool of one device's allocator. Ids are process-unique; 0 is never a pool. */
typedef struct {
  uint64_t id;
} recap_pool_id;

typedef struct {
  size_t reserved_bytes;  /* segments the pool holds */
  size_t allocated_bytes; /* blocks handed out from it */
  size_t active_bytes;    /* allocated or waiting on other streams */
  size_t segment_count;
  int use_count; /* references: handles and routes (graphs hold one each) */
} recap_pool_stats;

/* Creates a pool holding one reference for the caller. */
RECAP_API recap_status recap_pool_create(recap_device device, recap_pool_id *out);
/* Adds a reference (e.g. a second graph sharing the pool). RECAP_STATUS_INVALID_ARGUMENT for
 * an unknown pool or one whose last reference is gone. */
RECAP_API recap_status recap_pool_retain(recap_device device, recap_pool_id pool);
/* Drops a reference. Blocks still allocated from the pool stay valid until recap_free; once
 * nothing references the pool, its unused segments go back with recap_empty_cache. */
RECAP_API recap_status recap_pool_release(recap_device device, recap_pool_id pool);
RECAP_API recap_status recap_pool_stats_get(recap_device device, recap_pool_id pool,
                                            recap_pool_stats *out);
/* Routes the allocations made on `stream` to `pool` until recap_pool_route_end (the route
 * holds a reference). RECAP_STATUS_BUSY when the stream is already routed. */
RECAP_API recap_status recap_pool_route_begin(recap_device device, recap_pool_id pool,
                                              recap_stream *stream);
/* Ends the route begun on `stream` (and of side streams added to it by the graph layer).
 * RECAP_STATUS_INVALID_ARGUMENT when `stream` has no route of its own. */
RECAP_API recap_status recap_pool_route_end(recap_device device, recap_stream *stream);
/* Checks an allocator configuration string without applying it: RECAP_OK, or
 * RECAP_STATUS_INVALID_ARGUMENT with a message naming the bad key. */
RECAP_API recap_status recap_alloc_conf_check(const char *conf);

/* Interprocess memory (CUDA only): a 64-byte opaque handle (cudaIpcMemHandle_t) of the
 * segment holding the block at `ptr` (a recap_malloc result), and the block's offset in it.
 * RECAP_STATUS_NOT_SUPPORTED on the host backend, for blocks of expandable segments and under
 * backend:cudaMallocAsync. The importer adds the offset to what recap_ipc_mem_open gives and
 * calls recap_ipc_mem_close when done; the exporter keeps the block allocated meanwhile. */
typedef struct {
  unsigned char bytes[64];
} recap_ipc_mem_handle;
RECAP_API recap_status recap_ipc_mem_handle_get(void *ptr, recap_ipc_mem_handle *out,
                                                size_t *offset);
RECAP_API recap_status recap_ipc_mem_open(recap_device device, const recap_ipc_mem_handle *handle,
                                          void **out);
RECAP_API recap_status recap_ipc_mem_close(recap_device device, void *ptr);

/* Pinned host memory for staging copies (PyTorch's CachingHostAllocator): page-locked
 * (cudaHostAlloc, portable to every device) when a CUDA device is present, ordinary page-
 * aligned memory otherwise. Freed blocks are cached by power-of-two size class; a block given
 * to recap_host_record_stream is reused only after an event recorded at free time on each such
 * stream has completed (so a queued copy never sees its buffer reused). Thread-safe.
 *
 *   void *staging;
 *   recap_host_malloc(bytes, &staging);
 *   ... fill it, memcpy_async to the device on `stream` ...
 *   recap_host_record_stream(staging, stream);
 *   recap_host_free(staging);                 // reused once `stream` passed the copy
 */
typedef struct {
  recap_memory_stat allocated_bytes; /* blocks handed out (size classes) */
  recap_memory_stat allocated_count;
  recap_memory_stat reserved_bytes; /* held from the system (cudaHostAlloc) */
  recap_memory_stat reserved_count;
  int64_t waiting_count;  /* freed blocks whose copies may still run */
  int64_t num_host_alloc; /* cudaHostAlloc (or aligned_alloc) calls */
  int64_t num_host_free;
  int pinned; /* 1 when the memory is page-locked (a CUDA device is present) */
} recap_host_memory_stats;
/* size 0 gives *out = NULL. RECAP_STATUS_OUT_OF_MEMORY when the system refuses. */
RECAP_API recap_status recap_host_malloc(size_t size, void **out);
/* RECAP_STATUS_INVALID_ARGUMENT for a pointer recap_host_malloc did not return (or already
 * freed); NULL is accepted. */
RECAP_API recap_status recap_host_free(void *ptr);
/* Declares that the block containing ptr is used by work on `stream` (a copy). */
RECAP_API recap_status recap_host_record_stream(void *ptr, recap_stream *stream);
/* Releases every cached block whose copies have completed. */
RECAP_API recap_status recap_host_empty_cache(void);
RECAP_API recap_status recap_host_memory_stats_get(recap_host_memory_stats *out);

/* Copies `bytes` bytes from src to dst in `stream`'s order (stream may not be NULL). Each
 * pointer is memory of the stream's device (recap_malloc, a pipeline's tensors) or host
 * memory; the direction follows from the addresses (unified addressing: cudaMemcpyDefault).
 * bytes 0 does nothing; overlapping ranges are RECAP_STATUS_INVALID_ARGUMENT (CUDA leaves
 * them undefined). The call returns once the copy is queued: keep both buffers alive, the
 * source unchanged and the destination unread, until the stream passes the copy (a
 * synchronize, an event, or recap_host_record_stream before recap_host_free). Host memory
 * from recap_host_malloc is page-locked when a CUDA device is present, which makes the copy a
 * true asynchronous DMA. With pageable memory CUDA stages the data: a copy to pageable memory
 * returns when it is done, and one from it may return once the source is staged; the host
 * backend makes every copy before returning. Code that runs on both relies on neither.
 * On a capturing stream the copy is recorded, not made (on both backends): each replay copies
 * what the source holds at that point of the replay, so the buffers must outlive the graph.
 * A stream whose capture was invalidated refuses it with RECAP_STATUS_CAPTURE_INVALIDATED. */
RECAP_API recap_status recap_memcpy_async(void *dst, const void *src, size_t bytes,
                                          recap_stream *stream);

/* ------------------------------------------------------------------------------------------
 * Graphs: capture any stream work into a CUDA graph and replay it (torch.cuda.CUDAGraph).
 *
 *   recap_graph *g;
 *   recap_graph_create(&g);
 *   ... warm up: run the work once eagerly, so lazy handles and workspaces exist ...
 *   recap_graph_capture_begin(g, stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL);
 *   ... submit work to `stream`; recap_malloc on it comes from the graph's private pool ...
 *   st = recap_graph_capture_end(g);        // instantiates and uploads
 *   for (...) recap_graph_replay(g, stream);
 *   recap_graph_destroy(g);
 *
 * During the capture, allocations on the capturing stream (and on side streams declared with
 * recap_graph_capture_join) come from the graph's private pool, so the addresses baked into
 * the graph stay valid: free those blocks only after the graph is destroyed or reset (the
 * pool keeps them for this graph's replays; see recap_pool_*). Several graphs may share one
 * pool (pass recap_graph_pool() of the first); they must then be replayed in capture order
 * and never concurrently. A graph never runs concurrently with itself: replays on one stream
 * are ordered by the stream.
 *
 * Random ops inside the capture draw new numbers on every replay (the device generator's
 * offset advances by the draws of one replay; recap_rng_get_state reflects replays).
 *
 * A capture that fails (an illegal call: a synchronize, a query, an allocation outside the
 * pool in global mode) is ended and discarded: capture_end returns
 * RECAP_STATUS_CAPTURE_INVALIDATED naming the call, the pool is left consistent, the stream
 * leaves capture mode and the graph object can capture again.
 * Threading: one graph object is used by one thread at a time; different graphs may capture
 * and replay on different threads at once (use THREAD_LOCAL or RELAXED mode for that).
 * ---------------------------------------------------------------------------------------- */

typedef struct recap_graph recap_graph;

typedef struct {
  uint64_t captures;       /* successful capture_end calls */
  uint64_t instantiations; /* executable graphs built from scratch */
  uint64_t updates;        /* recaptures applied to the existing executable in place */
  uint64_t replays;
  size_t nodes; /* nodes of the last captured graph */
} recap_graph_info;

RECAP_API recap_status recap_graph_create(recap_graph **out);
/* RECAP_STATUS_BUSY while capturing (end the capture first). Drops the graph's pool
 * reference. NULL is accepted. */
RECAP_API recap_status recap_graph_destroy(recap_graph *graph);
/* Begins capturing `stream`'s work. pool: NULL creates a new private pool (none under
 * backend:cudaMallocAsync: the capture must then not allocate); otherwise the graph shares
 * that pool (of the stream's device). If the graph already holds an executable,
 * the new capture replaces it: capture_end then updates the executable in place when the
 * topology is unchanged (cudaGraphExecUpdate) and re-instantiates only when it must.
 * Fails with RECAP_STATUS_INVALID_ARGUMENT on a stream that is already capturing. */
RECAP_API recap_status recap_graph_capture_begin(recap_graph *graph, recap_stream *stream,
                                                 const recap_pool_id *pool,
                                                 recap_capture_mode mode);
/* Declares a side stream that joined the capture (it waited on an event recorded on the
 * capturing stream): its allocations come from the graph's pool and its random draws belong
 * to the graph. Call it after the join and before the side stream allocates or draws. */
RECAP_API recap_status recap_graph_capture_join(recap_graph *graph, recap_stream *side);
/* Ends the capture, instantiates (or updates) and uploads. An empty capture succeeds with a
 * warning on stderr. On failure the capture is discarded (see above) and the previous
 * executable, if any, is kept. */
RECAP_API recap_status recap_graph_capture_end(recap_graph *graph);
/* Launches the graph on `stream` (NULL: the stream it was captured on). RECAP_STATUS_INVALID_
 * ARGUMENT when nothing was captured or the stream is of another device. */
RECAP_API recap_status recap_graph_replay(recap_graph *graph, recap_stream *stream);
/* Drops the executable and the pool reference; the object can capture again. */
RECAP_API recap_status recap_graph_reset(recap_graph *graph);
/* The graph's pool, to share with the next graph. RECAP_STATUS_INVALID_ARGUMENT before the
 * first capture_begin. */
RECAP_API recap_status recap_graph_pool(const recap_graph *graph, recap_pool_id *out);
RECAP_API recap_status recap_graph_info_get(const recap_graph *graph, recap_graph_info *out);
/* Writes the last captured graph as Graphviz (cudaGraphDebugDotPrint on CUDA). */
RECAP_API recap_status recap_graph_debug_dump(const recap_graph *graph, const char *path);

/* ------------------------------------------------------------------------------------------
 * Ops: the registry a spec's `op:` names (`recap ops` lists it), and single ops launched on a
 * stream without a spec.
 *
 *   for (size_t i = 0; i < recap_op_count(); i++) {
 *     recap_op_info op;
 *     recap_op_info_get(i, &op);
 *     for (size_t a = 0; a < op.num_attrs; a++) {
 *       recap_op_attr_info attr;
 *       recap_op_attr_info_get(i, a, &attr);   // attr.name, attr.kind, attr.default_text
 *     }
 *   }
 * ---------------------------------------------------------------------------------------- */

/* How a spec writes an attribute's value. */
typedef enum {
  RECAP_OP_ATTR_FLOAT = 0,  /* a number: eps: 1e-5 */
  RECAP_OP_ATTR_INT,        /* an integer: dim: 1 */
  RECAP_OP_ATTR_BOOL,       /* true or false */
  RECAP_OP_ATTR_INT_LIST,   /* integers: sizes: [4, 8] */
  RECAP_OP_ATTR_ACTIVATION, /* none, relu, gelu, gelu_tanh, silu, sigmoid or tanh */
  RECAP_OP_ATTR_DTYPE,      /* f32, f16, bf16, i32 or i64 */
  RECAP_OP_ATTR_EXPR,       /* an expression over the op's input names: x * 2 + y */
} recap_op_attr_kind;

/* One op of the registry. Its strings are the library's and live as long as the process. */
typedef struct {
  size_t index; /* in registry order: recap_op_info_get(index) */
  const char *name;
  const char *summary;
  /* NULL-terminated, in input order; a name ending in '?' is an optional input. */
  const char *const *input_names;
  int min_inputs, max_inputs;
  int num_outputs;     /* for ops with a variable count (split): the most */
  unsigned dtype_mask; /* bit (1u << dtype): accepted for input 0 (ops without inputs: for
                          their dtype attribute) */
  int in_place_input;  /* the input the output may be written over; -1: none */
  int is_random;       /* draws from the device's Philox generator */
  size_t num_attrs;    /* recap_op_attr_info_get(index, 0 .. num_attrs - 1) */
} recap_op_info;

/* One attribute of an op. */
typedef struct {
  const char *name; /* as a spec writes it */
  recap_op_attr_kind kind;
  int required;
  /* The default when not required: FLOAT, INT and BOOL (0 or 1) its value, ACTIVATION its
   * index in the list of RECAP_OP_ATTR_ACTIVATION (0: none), DTYPE the recap_dtype a single op
   * (recap_op_create) takes; 0 otherwise. */
  double default_value;
  /* The default as a spec writes it: "1e-05", "true", "none"; "required", "(none)" for a list
   * or expression without one, and "spec's" for an optional dtype (a spec's ops take the
   * spec's dtype; a single op default_value). */
  char default_text[32];
  const char *doc;
} recap_op_attr_info;

/* How many ops the registry has. */
RECAP_API size_t recap_op_count(void);
/* RECAP_STATUS_INVALID_ARGUMENT for an index >= recap_op_count() or a NULL out. */
RECAP_API recap_status recap_op_info_get(size_t index, recap_op_info *out);
/* By name; RECAP_STATUS_INVALID_ARGUMENT for an unknown name, with a message (recap_last_error)
 * that suggests close names. */
RECAP_API recap_status recap_op_info_find(const char *name, recap_op_info *out);
/* Attribute attr_index of op op_index; RECAP_STATUS_INVALID_ARGUMENT when out of range. */
RECAP_API recap_status recap_op_attr_info_get(size_t op_index, size_t attr_index,
                                              recap_op_attr_info *out);
/* The activations a RECAP_OP_ATTR_ACTIVATION attribute takes, by index ("none", "relu", ...;
 * the order of its default_value); NULL past the last. */
RECAP_API const char *recap_op_activation_name(size_t index);

/* One op launched on a stream without a spec (benchmarks, tests, embedders' own loops): the
 * inputs and outputs are the caller's tensors (recap_tensor views of device memory, or of host
 * memory on the host backend), the attributes given by name as a spec writes their values.
 *
 *   recap_tensor in[2] = {x, y}, out = {.data = z};   // z: room for the result
 *   recap_op_args args = {.inputs = in, .num_inputs = 2, .outputs = &out, .num_outputs = 1};
 *   recap_op_run("add", &args, stream);                // out now has z's shape: x's
 *
 *   recap_op_attr attrs[] = {{"act", "relu"}};
 *   args.attrs = attrs, args.num_attrs = 1;           // linear(x, w, b) then relu
 *   recap_op *op;
 *   recap_op_create("linear", &args, &op);             // checks and infers once
 *   for (...) recap_op_launch(op, stream);             // launches only
 *   recap_op_destroy(op);
 *
 * An attribute not given takes its default (recap_op_attr_info); a required one must be given.
 * Values: FLOAT and INT a number, BOOL true or false, INT_LIST "[4, 8]" (or "4, 8"),
 * ACTIVATION and DTYPE a name, EXPR an expression over the inputs named in0, in1, ... in
 * order ("in0 * sigmoid(in1)"). A launch is ordered on the stream like any kernel and may be
 * captured into a graph (recap_graph_capture_begin) once the op has been launched outside one
 * (recap_op_launch); random ops draw from the stream's device generator. */
typedef struct {
  const char *name;  /* as recap_op_attr_info names it */
  const char *value; /* as a spec writes it: "1e-5", "true", "gelu", "f16", "[4, 8]" */
} recap_op_attr;

typedef struct {
  const recap_tensor *inputs; /* in the op's input order (recap_op_info.input_names) */
  int num_inputs;
  /* The caller's output tensors: only `data` is read. recap_op_create and recap_op_run write
   * each output's dtype, ndim, shape and (contiguous) strides as the op infers them, so data
   * may be NULL to learn the shapes first (recap_op_launch then refuses). An op whose output
   * is its input 0's memory (kv_append) writes through input 0; output 0's data is ignored.
   * num_outputs: the op's (recap_op_info.num_outputs; split: at most that many). */
  recap_tensor *outputs;
  int num_outputs;
  const recap_op_attr *attrs;
  int num_attrs;
} recap_op_args;

/* A checked op with its tensors and attributes, ready to launch any number of times. */
typedef struct recap_op recap_op;

/* Looks the op up, applies the attributes over their defaults and infers the outputs (written
 * to args->outputs). RECAP_STATUS_INVALID_ARGUMENT, with a message naming the op and the
 * offending input or attribute, for an unknown op or attribute, a value that does not parse,
 * a missing required attribute, or inputs the op refuses (counts, dtypes, shapes);
 * RECAP_STATUS_SPEC_ERROR for an expression that does not parse; OUT_OF_MEMORY. The op keeps
 * copies of the tensors (not of their memory), so args may go after the call. */
RECAP_API recap_status recap_op_create(const char *name, const recap_op_args *args, recap_op **out);
/* Launches the op on `stream`'s backend. The first launch also does the op's first-time work
 * (a GEMM's handles and algorithm choice; the workspace and call state some ops ask for at
 * their shapes, such as paged_attention's key splits or sample's row slices at small batch,
 * allocated on that stream's device and kept by the op), which a capture must not see: launch
 * once before capturing (RECAP_STATUS_ILLEGAL_DURING_CAPTURE for an op that needs that memory
 * otherwise). An op holding a workspace or call state runs on one stream at a time, on its
 * first device (RECAP_STATUS_INVALID_ARGUMENT on another). RECAP_STATUS_INVALID_ARGUMENT when an
 * output has no memory. */
RECAP_API recap_status recap_op_launch(recap_op *op, recap_stream *stream);
/* After the stream finished its launches and any graph that captured them is destroyed (an
 * EXPR attribute's program and the op's workspace live in the op). NULL is accepted. */
RECAP_API void recap_op_destroy(recap_op *op);
/* recap_op_create, recap_op_launch and recap_op_destroy in one call. Not for an op with an
 * EXPR attribute, whose program the launch reads later: RECAP_STATUS_INVALID_ARGUMENT (create,
 * launch and destroy it once the stream is done). Nor inside a capture for an op that needs a
 * workspace or call state at its shapes (argmax and sample over fewer than 64 rows of at least
 * 8192 logits, paged attention's splits): RECAP_STATUS_ILLEGAL_DURING_CAPTURE (create it and
 * launch it once before capturing). */
RECAP_API recap_status recap_op_run(const char *name, const recap_op_args *args,
                                    recap_stream *stream);

/* ------------------------------------------------------------------------------------------
 * Pipelines: a YAML spec (specs/README.md) loaded, planned, bound to memory, run eagerly or
 * captured into one graph per bucket and replayed.
 *
 *   recap_pipeline *p;
 *   if (recap_pipeline_create_file("specs/mlp_decode.yaml", NULL, &p) != RECAP_OK) {
 *     fprintf(stderr, "%s\n", recap_last_error_full());  // FILE:LINE:COL: error: ... lines
 *     return 1;
 *   }
 *   recap_pipeline_copy_in(p, "x", host_x, 3 * 4096 * 2, 3);  // 3 rows (batch 3)
 *   recap_pipeline_run(p, 3);          // runs bucket 4's graph; padding rows are defined
 *   recap_pipeline_copy_out(p, "y", host_y, 3 * 4096 * 2, 3);
 *   recap_pipeline_destroy(p);
 *
 * Weights: params are allocated and initialized once per weights object. A server creates one
 * pipeline and then N workers with recap_pipeline_clone: clones share the params (no copy) and
 * get their own inputs, state, scalars, arena, private pool, stream and graphs. Random inits
 * (normal, uniform) draw Philox numbers keyed by the spec's seed at offset = the tensor's
 * index, so a spec gives the same params on every backend, whatever else drew before.
 * Creating (not cloning) a pipeline whose ops draw random numbers seeds the device's
 * generator with the spec's seed (recap_rng_manual_seed), as a script's torch.manual_seed.
 *
 * Capture: warmup runs every bucket eagerly, then restores the state tensors and (for specs
 * with random ops) the generator's state, so capturing leaves no trace in them.
 *
 * Threading: a pipeline is used by one thread at a time; different pipelines (clones
 * included) may be used from different threads at once, captures included (the default
 * capture mode is THREAD_LOCAL). No global lock is held around capture or replay.
 *
 * Ordering: everything a pipeline does (copy-in, replay, eager runs, copy-out) is ordered on
 * the pipeline's stream. recap_pipeline_run_async returns after submitting; outputs and state
 * are written when its event completes, and are overwritten by the next run. Input buffers may
 * be rewritten (copy_in or directly on the pipeline's stream) once run_async has returned.
 * ---------------------------------------------------------------------------------------- */

typedef struct recap_pipeline recap_pipeline;

/* The most values a bucketed dim may have, in a spec or in recap_pipeline_options.dims. */
enum { RECAP_MAX_BUCKETS = 256 };

typedef enum {
  RECAP_MODE_GRAPH = 0, /* warmup, capture each bucket, replay (default) */
  RECAP_MODE_EAGER = 1, /* op by op; also forced by RECAP_DISABLE_GRAPHS=1 */
} recap_run_mode;

typedef enum {
  RECAP_OVERSIZE_EAGER = 0, /* a batch above the largest bucket runs eagerly (counted) */
  RECAP_OVERSIZE_FAIL = 1,  /* ... or fails with RECAP_STATUS_INVALID_ARGUMENT */
} recap_oversize_policy;

/* What a spec tensor is for (specs/README.md, "tensors"). Outputs are not a role: an output is
 * an intermediate or a state listed in `outputs:` (recap_tensor_info.is_output). */
typedef enum {
  RECAP_ROLE_INPUT,        /* bound by the caller; a static buffer */
  RECAP_ROLE_PARAM,        /* allocated and initialized once; shared between clones */
  RECAP_ROLE_STATE,        /* persistent across replays, updated in place (a KV cache) */
  RECAP_ROLE_SCALAR,       /* a device-resident value kernels read (a position, a length) */
  RECAP_ROLE_INTERMEDIATE, /* produced by an op; planned into the arena */
} recap_tensor_role;

/* How a tensor starts out (the spec's `init:`). */
typedef enum {
  RECAP_INIT_NONE, /* none given (op outputs); an external tensor without one starts zeroed */
  RECAP_INIT_ZEROS,
  RECAP_INIT_ONES,
  RECAP_INIT_NORMAL,  /* mean, std */
  RECAP_INIT_UNIFORM, /* low, high */
  RECAP_INIT_FILE,    /* raw little-endian, or a checkpoint: .safetensors, index, folder */
  RECAP_INIT_VALUE,   /* every element = value (a scalar's default, value 0) */
} recap_init_kind;

typedef struct {
  recap_init_kind kind;
  double mean, std, low, high, value; /* read only those the kind names above */
  const char *path; /* RECAP_INIT_FILE: resolved against the spec's folder; else NULL */
  const char *key;  /* a checkpoint's tensor name, when the spec gives one (the first of a
                       list); else NULL */
} recap_tensor_init;

/* One tensor of a pipeline as recap_pipeline_tensor_info_get describes it. Strings are owned by
 * the pipeline (shared with its clones) and live until the last of them is destroyed. */
typedef struct {
  const char *name;
  recap_tensor_role role;
  /* 0, or the tensor's 1-based position in the spec's outputs (the order they are listed in;
   * recap_pipeline_copy_out reads them): nonzero means an output. */
  int is_output;
  recap_dtype dtype;
  int ndim;
  int64_t shape[RECAP_MAX_DIMS]; /* the largest bucket's */
  size_t bytes;                  /* the largest bucket's */
  /* The axis carrying the bucketed dim (its padding rows live there), -1 for none. Its extent
   * is a multiple of the bucket value (a reshape may fold the batch into a wider axis): a run
   * with `rows` real rows uses shape[bucket_axis] / largest bucket value * rows of it. */
  int bucket_axis;
  recap_tensor_init init;
} recap_tensor_info;

/* Start from RECAP_PIPELINE_OPTIONS_INIT (struct_size set, every other field zero = its
 * default), or pass NULL for all defaults:
 *   recap_pipeline_options o = RECAP_PIPELINE_OPTIONS_INIT;
 *   o.entry = "decode";
 * (in C also {.struct_size = sizeof o, .entry = "decode"}). */
typedef struct {
  size_t struct_size;  /* sizeof(recap_pipeline_options) as the caller was compiled */
  int override_device; /* nonzero: use `device` instead of the spec's */
  recap_device device;
  int override_mode; /* nonzero: use `mode` */
  recap_run_mode mode;
  int capture_mode_set; /* nonzero: use capture_mode (default THREAD_LOCAL) */
  recap_capture_mode capture_mode;
  int warmup;         /* warmup iterations before capture; 0: the spec's run.warmup */
  int warmup_set;     /* nonzero: use warmup even when it is 0 (no warmup runs) */
  int max_recaptures; /* re-captures allowed after the first capture; 0: 16 */
  recap_oversize_policy oversize;
  const char *base_dir; /* when set, files the spec names must lie under it */
  recap_stream *stream; /* run on the caller's stream; NULL: the pipeline's own */
  /* Dim values replacing the spec's, as "NAME=V" or "NAME=V1,V2,..." (positive, below 2^62; a
   * list makes buckets: ascending, at most RECAP_MAX_BUCKETS, and at most one dim has
   * buckets), or "NAME=OTHER": NAME becomes an alias of dim OTHER (its value in every bucket;
   * specs/README.md, "Dims and buckets"); NULL-terminated; NULL: none. They are applied in
   * order before the spec is checked, so the check sees them (SPEC_ERROR with positions when
   * the spec does not hold with them); a malformed one, one naming no dim of the spec, or
   * aliases that form a cycle is RECAP_STATUS_INVALID_ARGUMENT. Ignored by
   * recap_pipeline_clone. */
  const char *const *dims;
  /* Nonzero: no fusion pass (elementwise chains run op by op; RECAP_FUSION=0 in the
   * environment does the same). Ignored by recap_pipeline_clone, which shares the model. */
  int no_fusion;
  /* An entry of the spec's `entries:` (specs/README.md, "Entries"): its dim values replace the
   * spec's before `dims` apply. NULL: the spec's own dims. A name the spec does not declare is
   * RECAP_STATUS_INVALID_ARGUMENT listing its entries. Ignored by recap_pipeline_clone. */
  const char *entry;
  /* Another pipeline whose params and state this one uses (prefill and decode over one set of
   * weights and one KV cache): every param and state tensor whose name `share` also has is
   * bound to `share`'s memory when this pipeline is created, before any capture, and is not
   * allocated or initialized again; the rest are this pipeline's own. Matching names must
   * match in role, dtype and shape (the largest bucket's), else RECAP_STATUS_INVALID_ARGUMENT
   * naming the tensor. The pipeline runs on `share`'s device (another device given in the
   * options is refused). Inputs, scalars and outputs are never shared. The two may be destroyed
   * in either order. They are two pipelines on two streams: the caller orders their runs
   * (recap_pipeline_run returns when done; with run_async, wait for its event). A clone given
   * `share` takes the state from it too; without it, a clone has its own state as always.
   * NULL: nothing shared. */
  recap_pipeline *share;
} recap_pipeline_options;
#define RECAP_PIPELINE_OPTIONS_INIT RECAP_STRUCT_INIT_(recap_pipeline_options)

typedef struct {
  uint64_t eager_runs; /* runs executed op by op (mode eager, oversize, fallback) */
  uint64_t replays;
  uint64_t captures;           /* graphs captured (one per bucket, plus re-captures) */
  uint64_t updates;            /* re-captures applied to an executable in place */
  uint64_t instantiations;     /* executables built from scratch */
  uint64_t oversize_eager;     /* runs above the largest bucket, run eagerly */
  uint64_t recaptures_refused; /* rebinds past max_recaptures: the pipeline went eager */
  size_t arena_bytes;          /* planned intermediates, shared by every bucket */
  size_t pool_reserved_bytes;  /* the private pool: arena + workspaces + graph memory */
  size_t param_bytes;          /* shared with clones */
  size_t num_buckets;
  size_t num_ops;
  uint64_t capture_failures; /* captures that failed: the pipeline then runs eagerly */
  /* Host wall-clock milliseconds of the one-off work, summed over every bucket: */
  double load_ms;        /* spec load and check, IRs, fusion and plan (0 for a clone) */
  double bind_ms;        /* allocations and initialization, waited for (a clone's params are
                            its source's, so they are not counted again) */
  double warmup_ms;      /* the eager warmup runs before the captures */
  double capture_ms;     /* from capture begin to just before capture end */
  double instantiate_ms; /* capture end: instantiate or update, and upload */
} recap_pipeline_stats;

/* What a pipeline is, for tools that print or size it. Strings and bucket_values are owned by
 * the pipeline (shared with its clones) and live until the last of them is destroyed. */
typedef struct {
  const char *name; /* the spec's name: (or the file name without .yaml) */
  recap_device device;
  recap_run_mode mode; /* after the options and RECAP_DISABLE_GRAPHS; a failed capture makes
                          runs eager without changing it (stats' capture_failures says so) */
  size_t num_buckets;  /* 1 for a spec without buckets */
  const int64_t *bucket_values; /* num_buckets values, ascending; {0} without buckets */
  const char *bucket_dim;       /* the bucketed dim's name; NULL without buckets */
  size_t launches;              /* kernel launches of one eager run (views launch nothing); a replay
                                   is one graph launch */
  size_t num_ops;               /* ops after fusion */
  size_t fused_ops;   /* spec ops the fusion pass replaced by fused ops (0: none, or off) */
  int draws_random;   /* some op draws random numbers: runs differ from one another */
  size_t num_tensors; /* indices for recap_pipeline_tensor_info_get */
  const char *entry;  /* the spec entry it was built for (options.entry), NULL for none */
} recap_pipeline_info;

/* Loads, checks, plans and binds a spec (params are initialized; nothing is captured yet:
 * the first graph-mode run, or recap_pipeline_capture, does that). Spec errors return
 * RECAP_STATUS_SPEC_ERROR with every problem as a FILE:LINE:COL line in
 * recap_last_error_full() (recap_last_error() holds the first 2 KiB of them). */
RECAP_API recap_status recap_pipeline_create_file(const char *path,
                                                  const recap_pipeline_options *options,
                                                  recap_pipeline **out);
/* The same from YAML text; `name` stands for the file name in messages. */
RECAP_API recap_status recap_pipeline_create_string(const char *yaml, size_t length,
                                                    const char *name,
                                                    const recap_pipeline_options *options,
                                                    recap_pipeline **out);
/* A new instance sharing `source`'s params (weights). options may change the stream, mode and
 * capture settings, not the device. */
RECAP_API recap_status recap_pipeline_clone(recap_pipeline *source,
                                            const recap_pipeline_options *options,
                                            recap_pipeline **out);
/* Waits for the pipeline's stream, then releases everything it owns. Params are reference
 * counted across clones, so instances may be destroyed in any order. NULL is accepted. */
RECAP_API recap_status recap_pipeline_destroy(recap_pipeline *pipeline);

/* Warmup and capture of every bucket now (graph mode), instead of on first use. */
RECAP_API recap_status recap_pipeline_capture(recap_pipeline *pipeline);
/* Runs with `batch` real rows (the bucketed dim; ignored, pass 0, for specs without buckets):
 * the smallest bucket >= batch; 0 runs the largest bucket whole. kv_append writes only the
 * `batch` real rows into its cache (padding rows leave state untouched). Buffers hold the
 * largest bucket's rows, so a batch above it (RECAP_OVERSIZE_EAGER) computes the largest
 * bucket eagerly and is counted in oversize_eager. A capture that fails when the first
 * graph-mode run triggers it makes this and later runs eager (a warning on stderr says why).
 * Synchronous: returns when outputs are ready. RECAP_STATUS_INVALID_ARGUMENT for batch < 0. */
RECAP_API recap_status recap_pipeline_run(recap_pipeline *pipeline, int64_t batch);
/* Submits the run and returns; *done (optional) is an event, owned by the pipeline and valid
 * until the next run, that completes when outputs are ready. */
RECAP_API recap_status recap_pipeline_run_async(recap_pipeline *pipeline, int64_t batch,
                                                recap_event **done);
/* One eager run regardless of mode (the reference for checks). */
RECAP_API recap_status recap_pipeline_run_eager(recap_pipeline *pipeline, int64_t batch);

/* One op's device time in recap_pipeline_profile. Strings are owned by the pipeline. */
typedef struct {
  const char *name; /* the op's name in the expanded spec ("layers.3.qkv") */
  const char *op;   /* what it runs: "linear", "paged_attention", ... */
  double ms;        /* device time between events around its launch; 0 for a view */
  int is_view;      /* the planner made it a view: it launches nothing */
} recap_op_profile;

/* Where a run's device time goes, op by op: runs the bucket for `batch` eagerly twice (the
 * first run untimed, for first-use work), the second with an event pair around each launch,
 * waits, and writes one entry per op (info.num_ops of them, in run order) to out; *count gets
 * the number of ops even when capacity is smaller (then RECAP_STATUS_INVALID_ARGUMENT). The
 * runs have the effects of two eager runs (state written, inputs that ops update in place).
 * Events between launches add a little time that a graph replay does not spend. */
RECAP_API recap_status recap_pipeline_profile(recap_pipeline *pipeline, int64_t batch,
                                              recap_op_profile *out, size_t capacity,
                                              size_t *count);

/* The device buffer of a named input, param, state, scalar or output, as a view with the
 * largest bucket's shape. Valid until the pipeline is destroyed or the tensor is rebound. */
RECAP_API recap_status recap_pipeline_tensor(recap_pipeline *pipeline, const char *name,
                                             recap_tensor *out);
/* Copies host memory into an input, state or scalar tensor, on the pipeline's stream. For a
 * bucketed tensor, `rows` (1 to the largest bucket) counts rows along the bucketed axis
 * (bytes must equal rows times the row size), laid out as the bucket that a run with `rows`
 * uses, and the rest of the buffer is zeroed; rows 0 copies the whole buffer (the largest
 * bucket's bytes). For other tensors rows is 0 and bytes the whole tensor; a spec with one
 * bucket (no bucketed dim) also takes any rows with the whole tensor's bytes, so batch code
 * written for buckets runs it unchanged. The data goes
 * through pinned staging memory (recap_host_malloc): the host buffer may be reused at once, and
 * the device copy is queued on the pipeline's stream, ordered before later runs, without
 * waiting for earlier work. RECAP_STATUS_INVALID_ARGUMENT for an unknown name, another role, or
 * sizes that do not match; RECAP_STATUS_OUT_OF_MEMORY when no staging memory is left. */
RECAP_API recap_status recap_pipeline_copy_in(recap_pipeline *pipeline, const char *name,
                                              const void *host, size_t bytes, int64_t rows);
/* Copies the first `rows` rows (or, rows = 0, all) of an output, state, input, scalar or param
 * to host memory after the work submitted so far (waits for it); sizes as for copy_in.
 * Intermediates that are not outputs are refused (their memory is reused within a run). */
RECAP_API recap_status recap_pipeline_copy_out(recap_pipeline *pipeline, const char *name,
                                               void *host, size_t bytes, int64_t rows);
/* Points an input, param, state or scalar tensor at caller-owned device memory (at least the
 * tensor's bytes, same device; the caller keeps it alive while the pipeline may use it).
 * Graphs are re-captured and updated in place when the topology is unchanged; after
 * max_recaptures, the pipeline runs eagerly (counted, with a warning). A param rebind
 * affects this pipeline only, not its clones. Contents are not copied. */
RECAP_API recap_status recap_pipeline_rebind(recap_pipeline *pipeline, const char *name,
                                             void *device_memory);
RECAP_API recap_status recap_pipeline_stats_get(recap_pipeline *pipeline,
                                                recap_pipeline_stats *out);
RECAP_API recap_status recap_pipeline_info_get(recap_pipeline *pipeline, recap_pipeline_info *out);
/* Tensor `index` (0 to info.num_tensors - 1: declared tensors in spec order, then op outputs;
 * fused intermediates are gone) as the largest bucket has it. RECAP_STATUS_INVALID_ARGUMENT
 * for an index out of range. */
RECAP_API recap_status recap_pipeline_tensor_info_get(recap_pipeline *pipeline, size_t index,
                                                      recap_tensor_info *out);
/* The graph captured for bucket `bucket` (an index into info.bucket_values), for
 * recap_graph_info_get and recap_graph_debug_dump; *out = NULL while it has none (eager mode,
 * not captured yet, or graphs turned off by a failure). Valid until the next call on the
 * pipeline. RECAP_STATUS_INVALID_ARGUMENT for a bucket out of range. */
RECAP_API recap_status recap_pipeline_graph(recap_pipeline *pipeline, size_t bucket,
                                            const recap_graph **out);
/* The pipeline's stream (its own, or the one given in the options). */
RECAP_API recap_stream *recap_pipeline_stream(recap_pipeline *pipeline);

/* ------------------------------------------------------------------------------------------
 * Communicators: collectives across GPUs through NCCL (libnccl.so.2, loaded at run time: recap
 * runs without it, and these calls then fail with RECAP_STATUS_NOT_SUPPORTED naming libnccl).
 *
 *   // one process per GPU (recap launch starts them):
 *   recap_comm *c;
 *   recap_comm_init_rank(dev, world, rank, "file:///tmp/job/rendezvous", 60.0, &c);
 *   recap_comm_all_reduce(c, buf, buf, n, RECAP_DTYPE_F32, RECAP_REDUCE_SUM, stream);
 *   recap_comm_synchronize(c, stream);     // TIMEOUT (comm aborted) if a peer died
 *   recap_comm_destroy(c);
 *
 * A device has at most one communicator at a time (torch.distributed's default group): the
 * spec ops all_reduce, all_gather, reduce_scatter and broadcast use the communicator of the
 * stream's device, and run as a world of 1 (a copy) on a device without one.
 * The host backend supports a world of 1 only (a clear NOT_SUPPORTED error otherwise).
 * NVLink multicast (NVLS) is kept off: NCCL_NVLS_ENABLE is set to 0 when unset, and a value
 * other than 0 is refused (NOT_SUPPORTED), since multicast objects can take a shared host's
 * GPUs out of service.
 * Timeouts: init waits at most timeout_s for every rank; recap_comm_synchronize and
 * recap_pipeline_run_dist abort the communicator and return RECAP_STATUS_TIMEOUT when the
 * work has not finished timeout_s after it began (a dead or stuck peer), and report NCCL's
 * asynchronous errors as RECAP_STATUS_LIBRARY_ERROR. An aborted communicator fails every
 * later call; destroy it.
 * Collectives are stream-ordered and capturable (a captured graph replays them); every rank
 * must issue the same collectives in the same order.
 * A communicator of 2 to 8 GPUs also holds peer buffers (8 MiB a GPU at 2 ranks) through which
 * a pipeline's small all_reduce ops run as one kernel instead of NCCL (RECAP_ONESHOT_ALLREDUCE,
 * docs/MULTI_GPU.md). Those buffers serve one all_reduce at a time: recap keeps a pipeline
 * whose all_reduces sit on several streams on NCCL, but two pipelines whose runs overlap on one
 * communicator (each on its own stream, neither waiting for the other) need
 * RECAP_ONESHOT_ALLREDUCE=0.
 * ---------------------------------------------------------------------------------------- */

typedef struct recap_comm recap_comm;

typedef enum {
  RECAP_REDUCE_SUM = 0,
  RECAP_REDUCE_PROD = 1,
  RECAP_REDUCE_MAX = 2,
  RECAP_REDUCE_MIN = 3,
  RECAP_REDUCE_AVG = 4,
} recap_reduce_op;

/* Joins rank `rank` of a world of `world_size` processes on `device`. init_url: "file:///path"
 * (rank 0 writes the NCCL id there atomically; the path must be fresh for each job) or
 * "tcp://host:port" (rank 0 listens), either with an optional "?generation=N" that all ranks
 * share, or "env://" (the tcp:// rendezvous at the address the environment names, see
 * recap_comm_env_read; world_size and rank must equal WORLD_SIZE and RANK, else
 * INVALID_ARGUMENT naming both); NULL or "" only for a world of 1. timeout_s > 0 bounds the
 * rendezvous, the NCCL init and, later, every synchronize. BUSY when the device already has a
 * communicator. */
RECAP_API recap_status recap_comm_init_rank(recap_device device, int world_size, int rank,
                                            const char *init_url, double timeout_s,
                                            recap_comm **out);
/* What "env://" stands for, read from the environment that torchrun (and torch.distributed's
 * other launchers) give each process: *world_size from WORLD_SIZE, *rank from RANK,
 * *local_rank from LOCAL_RANK (-1 when unset; the caller's device index), and into url
 * (url_capacity bytes; none when 0) "tcp://MASTER_ADDR:PORT", or "" for a world of 1, which
 * needs no address. PORT is RECAP_MASTER_PORT when set, else MASTER_PORT; under torchrun
 * (TORCHELASTIC_USE_AGENT_STORE=True) RECAP_MASTER_PORT is required, since torchrun's own
 * store listens on MASTER_PORT. INVALID_ARGUMENT naming the variable that is missing or
 * malformed (or RANK not below WORLD_SIZE); the outputs are untouched then.
 *
 *   int world, rank, local; char url[320];
 *   if (recap_comm_env_read(&world, &rank, &local, url, sizeof url) != RECAP_OK) ...
 *   recap_device dev = {RECAP_BACKEND_CUDA, local < 0 ? 0 : local};
 *   recap_comm_init_rank(dev, world, rank, "env://", 60.0, &c);   // or url */
RECAP_API recap_status recap_comm_env_read(int *world_size, int *rank, int *local_rank, char *url,
                                           size_t url_capacity);
/* count communicators in this process, comms[i] being rank i on devices[i] (one NCCL clique:
 * ncclCommInitAll). Used by the multi-device functions below. */
RECAP_API recap_status recap_comm_init_devices(const recap_device *devices, int count,
                                               double timeout_s, recap_comm **comms);
/* Waits for nothing: the caller synchronizes first. NULL is accepted. After an abort it waits
 * at most the communicator's timeout for NCCL's teardown, then leaves what remains to the
 * process's exit (a warning on stderr) rather than hang. */
RECAP_API recap_status recap_comm_destroy(recap_comm *comm);
/* Aborts outstanding collectives (they may never complete) and returns at once: the watchdog
 * thread carries out NCCL's abort, which can take many seconds when a peer died, and the
 * aborted kernels return when it is done. Every later call on the communicator fails naming
 * the cause. The object must still be destroyed. */
RECAP_API recap_status recap_comm_abort(recap_comm *comm);
RECAP_API int recap_comm_rank(const recap_comm *comm);
RECAP_API int recap_comm_world_size(const recap_comm *comm);
RECAP_API recap_device recap_comm_device(const recap_comm *comm);
/* The timeout_s the communicator was created with (0 for NULL): a caller that may stay idle
 * while its peers wait on it (a generator's rank 0) speaks up well within it. */
RECAP_API double recap_comm_timeout(const recap_comm *comm);
/* RECAP_OK, or the asynchronous error NCCL reported (a peer's failure, an abort). */
RECAP_API recap_status recap_comm_check(recap_comm *comm);
/* Waits for `stream` under the communicator's timeout (see above). */
RECAP_API recap_status recap_comm_synchronize(recap_comm *comm, recap_stream *stream);
/* Sets *value (host memory) on every rank to the smallest of the ranks' values, waiting under
 * the communicator's timeout (a world of 1 keeps it): how ranks agree on a host decision before
 * acting on it, such as a KV pool's blocks when each rank measures its own free memory. Every
 * rank calls it, in the same order as its other collectives; it uses a stream of its own. */
RECAP_API recap_status recap_comm_agree_min(recap_comm *comm, int64_t *value);

/* The collectives, on `stream` (of the communicator's device). count is in elements: of each
 * buffer for all_reduce and broadcast, of `send` for all_gather (recv holds world * count),
 * of `recv` for reduce_scatter (send holds world * count). send may equal recv (in place;
 * for all_gather send may be recv's slice of this rank). */
RECAP_API recap_status recap_comm_all_reduce(recap_comm *comm, const void *send, void *recv,
                                             size_t count, recap_dtype dtype, recap_reduce_op op,
                                             recap_stream *stream);
RECAP_API recap_status recap_comm_all_gather(recap_comm *comm, const void *send, void *recv,
                                             size_t count, recap_dtype dtype, recap_stream *stream);
RECAP_API recap_status recap_comm_reduce_scatter(recap_comm *comm, const void *send, void *recv,
                                                 size_t count, recap_dtype dtype,
                                                 recap_reduce_op op, recap_stream *stream);
RECAP_API recap_status recap_comm_broadcast(recap_comm *comm, const void *send, void *recv,
                                            size_t count, recap_dtype dtype, int root,
                                            recap_stream *stream);
/* Brackets collectives of several communicators issued by one thread (ncclGroupStart/End). */
RECAP_API recap_status recap_comm_group_start(void);
RECAP_API recap_status recap_comm_group_end(void);

/* Several devices in one process: torch.cuda.comm's functions over comms from
 * recap_comm_init_devices (comms[i] is rank i; streams[i] a stream of its device). Tensors are
 * contiguous; dsts/outs are the caller's buffers. Splits are along the first axis.
 *   broadcast:  src (on comms[root]'s device) copied to every dsts[i] (dsts[root] may be src).
 *   reduce_add: out (on root) = sum of inputs[i] (one per device).
 *   scatter:    chunks[i] (on device i) = rows of src (on root); the chunks' first dims sum to
 *               src's.
 *   gather:     dst (on root) = chunks[0..count) stacked along the first axis.
 *   coalesced:  the same over num_tensors tensors in one NCCL group (dsts[i * num_tensors +
 *               t] is tensor t on device i; inputs likewise). */
RECAP_API recap_status recap_comm_broadcast_devices(recap_comm *const *comms, int count, int root,
                                                    const recap_tensor *src, recap_tensor *dsts,
                                                    recap_stream *const *streams);
RECAP_API recap_status recap_comm_broadcast_coalesced(recap_comm *const *comms, int count, int root,
                                                      const recap_tensor *srcs, int num_tensors,
                                                      recap_tensor *dsts,
                                                      recap_stream *const *streams);
RECAP_API recap_status recap_comm_reduce_add(recap_comm *const *comms, int count, int root,
                                             const recap_tensor *inputs, recap_tensor *out,
                                             recap_stream *const *streams);
RECAP_API recap_status recap_comm_reduce_add_coalesced(recap_comm *const *comms, int count,
                                                       int root, const recap_tensor *inputs,
                                                       int num_tensors, recap_tensor *outs,
                                                       recap_stream *const *streams);
RECAP_API recap_status recap_comm_scatter(recap_comm *const *comms, int count, int root,
                                          const recap_tensor *src, recap_tensor *chunks,
                                          recap_stream *const *streams);
RECAP_API recap_status recap_comm_gather(recap_comm *const *comms, int count, int root,
                                         const recap_tensor *chunks, recap_tensor *dst,
                                         recap_stream *const *streams);
/* cudaDeviceEnablePeerAccess; RECAP_OK when already enabled. NOT_SUPPORTED on host or when
 * the pair cannot access each other. */
RECAP_API recap_status recap_device_enable_peer_access(recap_device device, recap_device peer);

/* A distributed run of a pipeline whose spec has collective ops, one rank per process (each
 * pipeline created on its communicator's device). Rank 0 chooses the bucket from `batch`;
 * the other ranks pass any batch (it is ignored). Before the graph launch rank 0 broadcasts a
 * 32-byte header (batch, bucket, bucket count) and, unless RECAP_DIST_INPUTS_REPLICATED, every
 * input tensor's and scalar's buffer: every rank then replays the same bucket, in the same
 * order, with rank 0's inputs and scalars (a step's position and length), and no extra host
 * round trip is made (the header travels with the inputs).
 * Waits for the run under the communicator's timeout. */
enum { RECAP_DIST_INPUTS_REPLICATED = 1, RECAP_DIST_EAGER = 2 };
RECAP_API recap_status recap_pipeline_run_dist(recap_pipeline *pipeline, recap_comm *comm,
                                               int64_t batch, unsigned flags);

/* ------------------------------------------------------------------------------------------
 * Generation: requests of token ids through an imported model in the paged serving layout
 * (`recap import-hf --paged`), with continuous batching on an engine thread (docs/SERVING.md).
 *
 *   recap_generator_options go = {.struct_size = sizeof go, .kv_fraction = 0.5};
 *   recap_generator *g;
 *   recap_generator_create("llama.yaml", &go, &g);       // loads, sizes the KV pool, captures
 *   int32_t prompt[] = {128000, 9906, 1917};
 *   recap_request r = {.struct_size = sizeof r, .prompt = prompt, .prompt_len = 3,
 *                      .max_new_tokens = 32, .temperature = 0.7f, .top_p = 0.9f};
 *   uint64_t id, seed;
 *   recap_generator_submit(g, &r, &id, &seed);            // any thread; seed: the one drawn
 *   recap_request_status st;
 *   int32_t out[32];
 *   recap_generator_wait(g, id, -1.0);                     // or poll, or a callback
 *   recap_generator_poll(g, id, out, 32, &st);             // st.num_tokens, st.state
 *   recap_generator_destroy(g);                            // stops the engine thread
 *
 * Threading: submit, poll, wait, cancel and stats may be called from any thread at any time;
 * the engine thread runs the steps. A request's callback runs on the engine thread, between
 * steps, once per new token and once when the request ends; it may call submit, cancel, poll and
 * stats (they never wait for the engine), but not wait or destroy, and should return quickly
 * (the whole batch waits for it). wait returns only after the request's last callback has
 * returned, so `user` may then be freed.
 * Lifetimes: the prompt and stop ids are copied at submit. A finished or cancelled request's
 * tokens stay readable by poll until recap_generator_release(id) or destroy.
 * ---------------------------------------------------------------------------------------- */

typedef struct recap_generator recap_generator;

/* The most stop token ids one request may give. */
enum { RECAP_MAX_STOP_IDS = 16 };

typedef enum {
  RECAP_REQUEST_WAITING = 0, /* queued (also after a preemption, until it runs again) */
  RECAP_REQUEST_RUNNING = 1, /* its prompt is in the cache and it is producing tokens */
  RECAP_REQUEST_FINISHED = 2,
  RECAP_REQUEST_CANCELLED = 3,
  RECAP_REQUEST_FAILED = 4, /* the engine failed (poll's status says why); nothing more comes */
} recap_request_state;

typedef enum {
  RECAP_FINISH_NONE = 0,       /* not finished */
  RECAP_FINISH_MAX_TOKENS = 1, /* max_new_tokens produced */
  RECAP_FINISH_STOP = 2,       /* a stop id was produced (it is the last token) */
  RECAP_FINISH_LENGTH = 3,     /* the model's --max-seq reached */
} recap_finish_reason;

/* Called on the engine thread for each new token (token >= 0), and once more when the request
 * ends (token -1, state FINISHED, CANCELLED or FAILED). */
typedef void (*recap_token_callback)(void *user, uint64_t id, int32_t token,
                                     recap_request_state state);

/* Start from RECAP_REQUEST_INIT (recap.h's conventions: struct_size). */
typedef struct {
  size_t struct_size;    /* sizeof(recap_request) as the caller was compiled */
  const int32_t *prompt; /* token ids, each in [0, vocabulary) */
  size_t prompt_len;     /* >= 1 */
  int max_new_tokens;    /* >= 1; prompt_len + max_new_tokens <= the spec's max sequence (its
                            block table's capacity: --max-seq rounded up to whole blocks) */
  /* Sampling, as transformers' warpers apply them: temperature (0: greedy), top-k (0: off),
   * top-p in (0, 1] (0 is taken as 1: off), min-p in [0, 1] (0: off). */
  float temperature, top_p, min_p;
  int top_k;
  /* nonzero: `seed`; else the generator draws one (submit reports it): the k-th seed a
   * generator draws is splitmix64 of k over the device generator's initial seed
   * (recap_rng_initial_seed), so the same submits in the same order draw the same seeds. */
  int has_seed;
  uint64_t seed;           /* the same seed and request give the same tokens in any batch */
  const int32_t *stop_ids; /* up to RECAP_MAX_STOP_IDS ids in [0, vocabulary) that end it */
  int num_stop_ids;
  recap_token_callback on_token; /* optional */
  void *user;
} recap_request;
#define RECAP_REQUEST_INIT RECAP_STRUCT_INIT_(recap_request)

typedef struct {
  recap_request_state state;
  recap_finish_reason finish;
  size_t num_tokens;    /* produced so far (poll copies up to its capacity of them) */
  uint64_t seed;        /* the request's seed */
  uint32_t preemptions; /* times its blocks were taken back and it was recomputed */
  double ttft_ms;       /* submit to first token (0 before it) */
  recap_status error;   /* FAILED: the engine's status (recap_last_error on the engine thread
                           was logged to stderr) */
} recap_request_status;

/* Start from RECAP_GENERATOR_OPTIONS_INIT, or pass NULL for all defaults (recap.h's
 * conventions: struct_size). */
typedef struct {
  size_t struct_size; /* sizeof(recap_generator_options) as the caller was compiled */
  /* KV capacity: bytes for the pools of every layer (kv_bytes), else this fraction of the free
   * device memory after the weights are loaded (kv_fraction, default 0.5 on CUDA; on the host
   * backend the spec's NB). Either is measured on a probe pipeline with a one-block pool that is
   * loaded first and then dropped, so sizing reads the weights twice. */
  size_t kv_bytes;
  double kv_fraction;
  /* Sequences admitted at once (the decode step's rows); 0: the decode entry's largest bucket,
   * which is also the most (more is INVALID_ARGUMENT). */
  int max_running;
  /* Tokens per prefill step; 0: the prefill entry's largest bucket, also the most. */
  int prefill_budget;
  int override_device; /* nonzero: use `device`, not the spec's */
  recap_device device;
  int eager;            /* nonzero: no graphs (for comparison) */
  const char *base_dir; /* as recap_pipeline_options.base_dir */
  int quiet;            /* nonzero: no start-up lines on stderr */
  /* Tensor parallelism (docs/MULTI_GPU.md): this rank's communicator, the spec being this
   * rank's (`recap import-hf --tp N`); NULL: one device. Rank 0 calls recap_generator_create
   * and serves; every other rank calls recap_generator_follow with its own spec. The device is
   * the communicator's unless override_device says otherwise. */
  recap_comm *comm;
} recap_generator_options;
#define RECAP_GENERATOR_OPTIONS_INIT RECAP_STRUCT_INIT_(recap_generator_options)

typedef struct {
  /* Engine steps that ran something; prefill and decode runs; runs that replayed a graph, and
   * runs that ran eagerly (eager option, or graphs off after a failed capture). */
  uint64_t steps, prefill_steps, decode_steps, graph_steps, eager_steps;
  uint64_t submitted, finished, cancelled, preemptions, tokens_out;
  size_t kv_blocks, kv_blocks_used, block_size; /* the pool, and what sequences hold now */
  size_t running, waiting;
  /* Start-up: milliseconds from the end of weight loading to every bucket of both entries
   * captured (warmup, GEMM choice, capture and instantiate); 0 when eager. */
  double ready_ms;
  /* Decode loops (docs/SERVING.md, "The decode loop"): graph launches that ran decode steps in
   * a WHILE node, and the decode steps they ran (also counted in steps, decode_steps and
   * graph_steps, one each). */
  uint64_t loop_launches, loop_steps;
  /* The most KV blocks sequences held at once since creation (serve-bench's "at the peak"). */
  size_t kv_blocks_peak;
} recap_generator_stats;

/* Loads the spec's prefill and decode entries over one set of weights and KV pools sized from
 * the options (prints the pool in blocks and tokens on stderr unless quiet), captures every
 * bucket and starts the engine thread. INVALID_ARGUMENT for a spec that is not a paged serving
 * spec, or whose own pool (its NB, used when kv_bytes and the free memory do not size it) cannot
 * hold one sequence of the maximum length; OUT_OF_MEMORY when the pool kv_bytes or kv_fraction
 * sizes cannot, or kv_bytes is more than the device has free once the weights are loaded. */
RECAP_API recap_status recap_generator_create(const char *spec_path,
                                              const recap_generator_options *options,
                                              recap_generator **out);
/* A rank other than 0 of a tensor-parallel generator (options->comm of world N, rank >= 1):
 * loads this rank's spec as create does (the KV pool sized alike on every rank: the smallest
 * any rank measured), captures, then runs every step rank 0's generator announces, in order,
 * until rank 0's generator is destroyed (RECAP_OK). The scheduler, the requests and their
 * tokens live on rank 0 only. While idle, rank 0 tells the followers so within the
 * communicator's timeout; a rank 0 that is gone or stuck makes this return TIMEOUT within it,
 * and a step header that is not a generator's (another program on rank 0) INVALID_ARGUMENT.
 * A failure is logged on stderr when it happens (closing the pipelines after an aborted
 * communicator waits for NCCL's teardown, which can take many seconds), then returned.
 * INVALID_ARGUMENT for no communicator, rank 0 (it calls create) or a world of 1.
 * Options other than the pool's, the device's, eager, base_dir, quiet and comm are rank 0's
 * business and ignored. Blocks the calling thread.
 *
 *   recap_generator_options go = {.struct_size = sizeof go, .comm = c, .kv_fraction = 0.5};
 *   if (recap_comm_rank(c) == 0) { recap_generator_create("m.rank0.yaml", &go, &g); ... }
 *   else recap_generator_follow("m.rank1.yaml", &go); */
RECAP_API recap_status recap_generator_follow(const char *spec_path,
                                              const recap_generator_options *options);
/* Checks a request against a model of `vocab` token ids and a maximum sequence of `max_seq`
 * tokens, as recap_generator_submit does (a program that runs a model itself, recap generate
 * on a spec of the contiguous layout, uses it to refuse up front): INVALID_ARGUMENT, naming
 * the field and its value, for an empty prompt, a prompt longer than max_seq or as long (no
 * room for a token), an id outside [0, vocab), max_new_tokens < 1 or prompt_len +
 * max_new_tokens past max_seq, temperature < 0 or not finite, top_p outside [0, 1], top_k < 0,
 * min_p outside [0, 1], more than RECAP_MAX_STOP_IDS stop ids or a stop id outside [0, vocab);
 * also for vocab or max_seq below 1. Reads only the request. */
RECAP_API recap_status recap_request_check(const recap_request *request, int64_t vocab,
                                           int64_t max_seq);
/* Queues a request. INVALID_ARGUMENT, naming the field, for a request recap_request_check
 * refuses with the spec's vocabulary and maximum sequence, or one whose maximum length needs
 * more KV blocks than the pool has; BUSY once destroy has begun or after the engine stopped on
 * a failure. *id and (optional) *seed get the request's id and seed. */
RECAP_API recap_status recap_generator_submit(recap_generator *g, const recap_request *request,
                                              uint64_t *id, uint64_t *seed);
/* Copies up to `capacity` of the request's tokens so far and its status. INVALID_ARGUMENT for
 * an unknown or released id. */
RECAP_API recap_status recap_generator_poll(recap_generator *g, uint64_t id, int32_t *tokens,
                                            size_t capacity, recap_request_status *status);
/* Waits until the request has ended (timeout_s < 0: no limit); TIMEOUT when it has not. */
RECAP_API recap_status recap_generator_wait(recap_generator *g, uint64_t id, double timeout_s);
/* Ends a request: the engine thread takes it out at its next step (poll's state says
 * CANCELLED from then on, and wait returns), and its blocks go back then. Unknown, finished or
 * released ids are accepted and change nothing. */
RECAP_API recap_status recap_generator_cancel(recap_generator *g, uint64_t id);
/* Forgets an ended request (its tokens); cancels it first when it has not ended (its callbacks
 * still run). Unknown or released ids are accepted and change nothing. */
RECAP_API recap_status recap_generator_release(recap_generator *g, uint64_t id);
RECAP_API recap_status recap_generator_stats_get(recap_generator *g, recap_generator_stats *out);
/* Stops taking requests, cancels what is left, joins the engine thread and frees everything.
 * NULL is accepted. */
RECAP_API recap_status recap_generator_destroy(recap_generator *g);

/* ------------------------------------------------------------------------------------------
 * Decode loops: many decode steps in one graph launch (docs/SERVING.md, "The decode loop")
 *
 * A decode loop replays a paged decode entry's captured step (ids [T], seqs [Bs, W] inputs,
 * tokens [Bs] output, decode_advance inside) in the body of a conditional WHILE node, up to K
 * times per launch. After each step a kernel appends every sampled token to a ring in mapped
 * host memory (published beside the next step, or after the last: a system-wide fence, then
 * the count), stops rows whose token is a stop id or whose outputs reach their limit
 * (decode_advance stops rows without a KV block for their next position), and ends the loop
 * when no row runs, K steps have run, or the host asked for a return. A stopped row is padding for
 * the rest of the launch: it writes no KV and samples nothing.
 *
 *   recap_decode_loop *loop;
 *   recap_decode_loop_create(decode, 32, 0, &loop);    // one loop graph per bucket
 *   recap_pipeline_copy_in(decode, "ids", ...); recap_pipeline_copy_in(decode, "seqs", ...);
 *   recap_decode_loop_launch(loop, batch, k, limits, 0);  // limits: one per row
 *   int finished = 0;
 *   while (!finished) {
 *     recap_decode_loop_wait(loop, 1000000);                            // sleeps, no spin
 *     recap_decode_loop_poll(loop, entries, capacity, &n, &finished);   // tokens as they come
 *     ...  recap_decode_loop_request_return(loop) to end it early ...
 *   }
 *   recap_decode_loop_destroy(loop);
 *
 * The pipeline must not run while a launch is under way. A decode step that draws from the
 * device generator (random ops) draws new numbers every iteration, those the same number of
 * single replays would draw: a launch reserves `steps` replays' draws, and once it has ended
 * (poll says finished) the generator stands where the steps that ran leave it (the others'
 * draws go back unless something else drew meanwhile). The pipeline's graphs must not be
 * captured again while the loop lives (launch refuses). One thread at a time.
 * ---------------------------------------------------------------------------------------- */

typedef struct recap_decode_loop recap_decode_loop;

/* One token a loop produced; entries come in step order, rows in order within a step. */
typedef struct {
  int32_t step; /* the iteration of the launch (0: its first step) */
  int32_t row;  /* the row of seqs */
  int32_t token;
  int32_t reserved;
  uint64_t time_ns; /* when the device wrote it: %globaltimer on CUDA, CLOCK_MONOTONIC on host */
} recap_loop_token;

/* When a row stops, besides running out of KV blocks. */
typedef struct {
  int32_t max_outputs; /* the row stops once its OUT_INDEX (outputs so far) reaches this */
  int32_t num_stop_ids;
  int32_t stop_ids[RECAP_MAX_STOP_IDS];
} recap_loop_limits;

/* Captures one loop graph per bucket of `decode` (a graph-mode pipeline, captured first if it
 * has not been) for up to max_steps steps per launch; `timestamps` nonzero adds a kernel at the
 * start of each step that stamps the time (recap_decode_loop_stamps). RECAP_STATUS_NOT_SUPPORTED
 * when the backend or driver has no conditional nodes or the pipeline runs eagerly;
 * INVALID_ARGUMENT for a pipeline without the decode layout or max_steps < 1. */
RECAP_API recap_status recap_decode_loop_create(recap_pipeline *decode, int64_t max_steps,
                                                int timestamps, recap_decode_loop **out);
/* recap_decode_loop_create for a decode entry run by every rank of `comm` in lockstep (tensor
 * parallelism: the step holds collectives, as recap_pipeline_run_dist replays it). Collective:
 * every rank calls it with the same max_steps and timestamps, and it succeeds on every rank or
 * on none (NOT_SUPPORTED naming the lowest rank that failed; that rank returns its own cause).
 * Every launch must be made by every rank, with rank 0's batch and steps; the limits, flags,
 * ids and seqs of rank 0 apply on every rank (the loop graph broadcasts them before the WHILE
 * node), and rank 0's return request is broadcast after every step, so every rank's loop runs
 * the same iterations: the tokens, which decide the rest, are the same on every rank when
 * every rank samples the same gathered logits (recap import-hf --tp). Each rank polls its own
 * loop to the end. A launch is a watchdog-bounded stretch of the communicator: when a peer
 * dies, poll returns the communicator's error within its timeout and hands out no entry that
 * may have been computed after the failure. NOT_SUPPORTED on every rank unless
 * NCCL_GRAPH_MIXING_SUPPORT=0 was set before the communicator was made: NCCL's graph mixing
 * puts event nodes into captured collectives, which a WHILE body cannot hold (docs/SERVING.md,
 * "Across ranks", says what mixing off asks of the rest of the program). */
RECAP_API recap_status recap_decode_loop_create_dist(recap_pipeline *decode, recap_comm *comm,
                                                     int64_t max_steps, int timestamps,
                                                     recap_decode_loop **out);
/* RECAP_STATUS_BUSY while a launch is under way (poll it to the end first). NULL is accepted. */
RECAP_API recap_status recap_decode_loop_destroy(recap_decode_loop *loop);
/* recap_decode_loop_launch flags. */
enum {
  /* End the launch after a step in which a row ended on a stop id or its output limit (a
   * server with requests waiting for that row's blocks). */
  RECAP_LOOP_RETURN_ON_STOP = 1,
};

/* Launches up to `steps` (1 to max_steps) steps of the bucket for `batch` on what the
 * pipeline's ids and seqs hold, with limits[r] for row r < batch. Returns at once.
 * RECAP_STATUS_BUSY while the previous launch has not been polled to its end. */
RECAP_API recap_status recap_decode_loop_launch(recap_decode_loop *loop, int64_t batch,
                                                int64_t steps, const recap_loop_limits *limits,
                                                unsigned flags);
/* Copies up to `capacity` entries that arrived since the last poll into out (*count of them)
 * and sets *finished once the launch has completed and every entry has been handed out. Does
 * not wait (recap_decode_loop_wait does). The device publishes a step's entries together, so
 * with room for them all a poll hands out whole steps. A device fault in the launch is returned
 * here. */
RECAP_API recap_status recap_decode_loop_poll(recap_decode_loop *loop, recap_loop_token *out,
                                              size_t capacity, size_t *count, int *finished);
/* Sleeps until the running launch has entries the last poll did not hand out, or has ended, or
 * max_ns nanoseconds have passed (returns at once when no launch runs); then poll. It does not
 * spin: from the ring's device stamps it learns the step time (a moving average) and the host
 * clock's offset from the device's (the fastest delivery seen), sleeps until the next step's
 * entries are due (plus how late entries have tended to be: the margin at which 19 looks in
 * 20 find them, at most a quarter of a step, so one wake-up per step is the rule), then looks
 * every 1/16 of a step (2 to 20 us; 20 us until the step time is
 * known, 2 us once the last step has published and only the launch's end is awaited). For the
 * sleeps to end on time, give the waiting thread a small timer slack (Linux:
 * prctl(PR_SET_TIMERSLACK, 1000), as the generator's engine thread and `recap bench-loop` do:
 * by default a sleep may end up to 50 us late). */
RECAP_API recap_status recap_decode_loop_wait(recap_decode_loop *loop, int64_t max_ns);
/* Asks the running launch to end after its current step: an asynchronous 4-byte copy to the
 * device on a stream of the loop's own, which the loop looks at after every step (the copy
 * lands a few microseconds after the call, so the step then under way, or at the latest the
 * next, is the last). Nothing happens when no launch runs; a request that arrives after its
 * launch has ended ends nothing. */
RECAP_API recap_status recap_decode_loop_request_return(recap_decode_loop *loop);
/* The last finished launch's steps: *stamps holds 2 x *steps times, each step's start and end
 * (same clock as recap_loop_token.time_ns); NULL and 0 without `timestamps`. */
RECAP_API recap_status recap_decode_loop_stamps(recap_decode_loop *loop, const uint64_t **stamps,
                                                int64_t *steps);

#ifdef __cplusplus
}
#endif

#endif /* RECAP_H */
