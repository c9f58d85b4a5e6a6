/*
 * cuda_backend.c: the CUDA implementation of recap__backend (see backend.h).
 *
 * Every call goes through RECAP_CUDA_TRY, so a failure names the CUDA call, the error and the
 * device. Calls that depend on CUDA's per-thread current device (allocation, stream and event
 * creation, device-wide queries) set it for the call and restore the caller's afterwards: the
 * application using recap owns that setting too. Stream-ordered calls need no current device,
 * since a stream belongs to one device. The legacy default stream is never used.
 *
 * Host functions (launch_host) run on a CUDA driver thread, where a failure cannot fault the
 * context as a trapped kernel would. A failing host function is recorded instead (with its
 * device, and its stream when it was launched eagerly) and reported as
 * RECAP_STATUS_DEVICE_ERROR by the next recap_stream_synchronize of that stream or
 * recap_device_synchronize of that device; a failure from a graph replay is reported by the
 * next synchronize of any stream of the device, since the node does not know which stream
 * the graph was launched on. Each failure is reported once.
 *
 * The argument copy of a host function captured into a graph must live as long as any graph
 * or executable graph that may still run it. It is handed to CUDA as a user object retained
 * by the capturing graph (cudaGraphRetainUserObject, as the CUDA programming guide shows for
 * captures): executable graphs instantiated from the graph hold their own reference, so the
 * copy is freed only after the graph and every executable graph from it are destroyed and
 * their work has finished, whatever order the caller destroys them in.
 */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "runtime/conditional.h"
#include "runtime/cuda_archs.h"
#include "runtime/cuda_check.h"

_Static_assert(sizeof(cudaIpcEventHandle_t) == sizeof(recap_ipc_event_handle),
               "recap_ipc_event_handle must hold a cudaIpcEventHandle_t exactly");

struct recap__graph {
  cudaGraph_t graph;
};

struct recap__graph_exec {
  cudaGraphExec_t exec;
  /* A copy of the graph it runs: a launch on a capturing stream records it as a child-graph
   * node (the host backend's rule), which a WHILE body may hold. NULL for a graph CUDA cannot
   * clone, nor take as a child (memory allocation, free or conditional nodes). */
  cudaGraph_t source;
};

static cudaStream_t native_stream(const recap_stream *stream) {
  return (cudaStream_t)stream->native;
}

static cudaEvent_t native_event(const recap_event *event) {
  return (cudaEvent_t)event->native;
}

/* ------------------------------------------------------------------------------------------
 * The calling thread's current device, set for one call and restored afterwards.
 * ---------------------------------------------------------------------------------------- */

typedef struct {
  int previous;
  bool switched;
} device_guard;

static recap_status guard_enter(device_guard *guard, int device) {
  guard->switched = false;
  RECAP_CUDA_TRY(cudaGetDevice(&guard->previous));
  if (guard->previous != device) {
    RECAP_CUDA_TRY(cudaSetDevice(device));
    guard->switched = true;
  }
  return RECAP_OK;
}

static void guard_exit(const device_guard *guard) {
  /* Switching back to a device that was current a moment ago does not fail in practice; if it
   * did, the call's own status is the one worth reporting. */
  if (guard->switched && cudaSetDevice(guard->previous) != cudaSuccess) (void)cudaGetLastError();
}

static recap_status cuda_device_enter(int device, int *previous) {
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, device));
  *previous = guard.previous;
  return RECAP_OK;
}

static void cuda_device_exit(int device, int previous) {
  device_guard guard = {previous, previous != device};
  guard_exit(&guard);
}

/* ------------------------------------------------------------------------------------------
 * Failures of host functions, reported at the next synchronize (see the file comment).
 * ---------------------------------------------------------------------------------------- */

typedef struct host_failure {
  int device;
  cudaStream_t stream; /* NULL: from a graph replay, reported on any stream of the device */
  recap_status status;
  char message[512];
  struct host_failure *next;
} host_failure;

static pthread_mutex_t failure_lock = PTHREAD_MUTEX_INITIALIZER;
static host_failure *failures;  /* oldest first */
static int failures_unrecorded; /* failures whose record could not be allocated */

static void failure_note(int device, cudaStream_t stream, recap_status status,
                         const char *message) {
  host_failure *f = calloc(1, sizeof *f);
  pthread_mutex_lock(&failure_lock);
  if (!f) {
    failures_unrecorded++;
  } else {
    f->device = device;
    f->stream = stream;
    f->status = status;
    snprintf(f->message, sizeof f->message, "%s", message);
    host_failure **tail = &failures;
    while (*tail) tail = &(*tail)->next;
    *tail = f;
  }
  pthread_mutex_unlock(&failure_lock);
}

/* Reports (and forgets) the oldest failure that a synchronize of `stream` (NULL: the whole
 * device) has waited for. */
static recap_status failure_take(int device, cudaStream_t stream) {
  host_failure *found = NULL;
  int unrecorded = 0;
  pthread_mutex_lock(&failure_lock);
  for (host_failure **link = &failures; *link; link = &(*link)->next) {
    host_failure *f = *link;
    if (f->device == device && (!stream || !f->stream || f->stream == stream)) {
      *link = f->next;
      found = f;
      break;
    }
  }
  if (!found && failures_unrecorded) {
    unrecorded = failures_unrecorded;
    failures_unrecorded = 0;
  }
  pthread_mutex_unlock(&failure_lock);
  if (found) {
    recap_status st = RECAP_FAIL(RECAP_STATUS_DEVICE_ERROR,
                                 "a host function launched on %s of CUDA device %d failed "
                                 "with %s: %s",
                                 found->stream ? "this stream" : "a graph", device,
                                 recap_status_name(found->status), found->message);
    free(found);
    return st;
  }
  if (unrecorded)
    return RECAP_FAIL(RECAP_STATUS_DEVICE_ERROR,
                      "%d host function(s) failed; their messages were lost (out of memory)",
                      unrecorded);
  return RECAP_OK;
}

/* A destroyed stream's handle may be reused by CUDA for a new stream: its pending failures
 * move to "any stream of the device" instead of being lost or misattributed. */
static void failure_forget_stream(cudaStream_t stream) {
  pthread_mutex_lock(&failure_lock);
  for (host_failure *f = failures; f; f = f->next)
    if (f->stream == stream) f->stream = NULL;
  pthread_mutex_unlock(&failure_lock);
}

/* ------------------------------------------------------------------------------------------
 * Devices
 * ---------------------------------------------------------------------------------------- */

/* The device count cannot change within a process (CUDA reads CUDA_VISIBLE_DEVICES once), and
 * every frontend call asks for it, so it is computed once. */
static pthread_once_t count_once = PTHREAD_ONCE_INIT;
static int cached_count;
static cudaError_t cached_count_error;

static void count_devices(void) {
  int n = 0;
  cached_count_error = cudaGetDeviceCount(&n);
  if (cached_count_error != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  cached_count = n;
}

static recap_status cuda_device_count(int *count) {
  pthread_once(&count_once, count_devices);
  cudaError_t err = cached_count_error;
  if (err != cudaSuccess) {
    recap_status st = recap__cuda_status(err);
    if (st != RECAP_STATUS_NO_DEVICE)
      return RECAP_FAIL(st, "cudaGetDeviceCount failed: %s (%s)", cudaGetErrorName(err),
                        cudaGetErrorString(err));
    /* No driver or no device is a normal situation, not an error: say why, report 0. */
    RECAP_FAIL(st, "no CUDA device: cudaGetDeviceCount failed: %s (%s)", cudaGetErrorName(err),
               cudaGetErrorString(err));
    *count = 0;
    return RECAP_OK;
  }
  if (cached_count == 0) RECAP_FAIL(RECAP_STATUS_NO_DEVICE, "no CUDA device is visible");
  *count = cached_count;
  return RECAP_OK;
}

static recap_status cuda_device_properties(int device, recap_device_properties *out) {
  struct cudaDeviceProp p;
  RECAP_CUDA_TRY(cudaGetDeviceProperties(&p, device));
  /* CUDA 13 removed clockRate and memoryClockRate from cudaDeviceProp; the attributes stay. */
  int clock_khz = 0, memory_clock_khz = 0;
  RECAP_CUDA_TRY(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
  RECAP_CUDA_TRY(cudaDeviceGetAttribute(&memory_clock_khz, cudaDevAttrMemoryClockRate, device));
  recap_device_properties r;
  memset(&r, 0, sizeof r);
  snprintf(r.name, sizeof r.name, "%s", p.name);
  r.major = p.major;
  r.minor = p.minor;
  r.multiprocessor_count = p.multiProcessorCount;
  r.total_memory = p.totalGlobalMem;
  r.l2_cache_bytes = p.l2CacheSize > 0 ? (size_t)p.l2CacheSize : 0;
  r.clock_khz = clock_khz;
  r.memory_clock_khz = memory_clock_khz;
  r.memory_bus_width_bits = p.memoryBusWidth;
  r.max_shared_memory_per_block = p.sharedMemPerBlock;
  r.max_shared_memory_per_block_optin = p.sharedMemPerBlockOptin;
  r.warp_size = p.warpSize;
  r.max_threads_per_block = p.maxThreadsPerBlock;
  r.pci_bus_id = p.pciBusID;
  r.integrated = p.integrated;
  *out = r;
  return RECAP_OK;
}

static recap_status cuda_mem_get_info(int device, size_t *free_bytes, size_t *total_bytes) {
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, device));
  recap_status st = RECAP_OK;
  RECAP_CUDA_TRY_GOTO(st, cudaMemGetInfo(free_bytes, total_bytes), done);
done:
  guard_exit(&guard);
  return st;
}

static recap_status cuda_device_synchronize(int device) {
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, device));
  recap_status st = RECAP_OK;
  RECAP_CUDA_TRY_GOTO(st, cudaDeviceSynchronize(), done);
  st = failure_take(device, NULL);
done:
  guard_exit(&guard);
  return st;
}

static recap_status cuda_can_access_peer(int device, int peer, int *out) {
  RECAP_CUDA_TRY(cudaDeviceCanAccessPeer(out, device, peer));
  return RECAP_OK;
}

static const char *cuda_compiled_archs(void) {
  return recap__cuda_compiled_archs();
}

/* ------------------------------------------------------------------------------------------
 * Memory
 * ---------------------------------------------------------------------------------------- */

static recap_status cuda_mem_alloc(int device, size_t bytes, void **out) {
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, device));
  recap_status st = RECAP_OK;
  void *ptr = NULL;
  RECAP_CUDA_TRY_GOTO(st, cudaMalloc(&ptr, bytes), done);
  *out = ptr;
done:
  guard_exit(&guard);
  if (st == RECAP_STATUS_OUT_OF_MEMORY)
    recap__error_context(st, "allocating %zu bytes on CUDA device %d: ", bytes, device);
  return st;
}

static recap_status cuda_mem_free(int device, void *ptr) {
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, device));
  recap_status st = RECAP_OK;
  RECAP_CUDA_TRY_GOTO(st, cudaFree(ptr), done);
done:
  guard_exit(&guard);
  return st;
}

static recap_status cuda_memcpy_async(void *dst, const void *src, size_t bytes,
                                      recap_stream *stream) {
  RECAP_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, native_stream(stream)));
  return RECAP_OK;
}

static recap_status cuda_memset_async(void *dst, int value, size_t bytes, recap_stream *stream) {
  RECAP_CUDA_TRY(cudaMemsetAsync(dst, value, bytes, native_stream(stream)));
  return RECAP_OK;
}

/* ------------------------------------------------------------------------------------------
 * Streams
 * ---------------------------------------------------------------------------------------- */

static recap_status cuda_stream_priority_range(int device, int *least, int *greatest) {
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, device));
  recap_status st = RECAP_OK;
  RECAP_CUDA_TRY_GOTO(st, cudaDeviceGetStreamPriorityRange(least, greatest), done);
done:
  guard_exit(&guard);
  return st;
}

static recap_status cuda_stream_create(recap_stream *stream) {
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, stream->device.index));
  recap_status st = RECAP_OK;
  unsigned flags =
      (stream->flags & RECAP_STREAM_NON_BLOCKING) ? cudaStreamNonBlocking : cudaStreamDefault;
  cudaStream_t s = NULL;
  RECAP_CUDA_TRY_GOTO(st, cudaStreamCreateWithPriority(&s, flags, stream->priority), done);
  stream->native = s;
done:
  guard_exit(&guard);
  return st;
}

static recap_status cuda_stream_destroy(recap_stream *stream) {
  cudaStream_t s = native_stream(stream);
  RECAP_CUDA_TRY(cudaStreamDestroy(s));
  failure_forget_stream(s);
  stream->native = NULL;
  return RECAP_OK;
}

static recap_status cuda_stream_query(recap_stream *stream) {
  cudaError_t err = cudaStreamQuery(native_stream(stream));
  if (err == cudaErrorNotReady) return RECAP_STATUS_NOT_READY; /* a state, not a failure */
  RECAP_CUDA_TRY(err);
  return RECAP_OK;
}

static recap_status cuda_stream_synchronize(recap_stream *stream) {
  RECAP_CUDA_TRY(cudaStreamSynchronize(native_stream(stream)));
  return failure_take(stream->device.index, native_stream(stream));
}

static recap_status cuda_stream_wait_event(recap_stream *stream, recap_event *event) {
  RECAP_CUDA_TRY(cudaStreamWaitEvent(native_stream(stream), native_event(event), 0));
  return RECAP_OK;
}

/* cudaStreamIsCapturing is one of the few calls that is legal on a capturing stream. */
static recap_status cuda_stream_capture_status(recap_stream *stream, recap_capture_status *out) {
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  RECAP_CUDA_TRY(cudaStreamIsCapturing(native_stream(stream), &cs));
  switch (cs) {
    case cudaStreamCaptureStatusActive:
      *out = RECAP_CAPTURE_ACTIVE;
      break;
    case cudaStreamCaptureStatusInvalidated:
      *out = RECAP_CAPTURE_INVALIDATED;
      break;
    default:
      *out = RECAP_CAPTURE_NONE;
      break;
  }
  return RECAP_OK;
}

/* The caller's stream must be a real stream of this device; a dangling handle cannot be
 * detected (CUDA may crash on it, as it would in the caller's own code). */
static recap_status cuda_stream_wrap(recap_stream *stream, void *native) {
  cudaStream_t s = (cudaStream_t)native;
  if (s == cudaStreamLegacy || s == cudaStreamPerThread)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "%s cannot be wrapped: recap uses only streams it can capture and "
                      "share between threads",
                      s == cudaStreamLegacy ? "cudaStreamLegacy (the legacy default stream)"
                                            : "cudaStreamPerThread");
  int device = -1;
  RECAP_CUDA_TRY(cudaStreamGetDevice(s, &device));
  if (device != stream->device.index)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the stream belongs to CUDA device %d, not to device %d", device,
                      stream->device.index);
  int priority = 0;
  unsigned flags = 0;
  RECAP_CUDA_TRY(cudaStreamGetPriority(s, &priority));
  RECAP_CUDA_TRY(cudaStreamGetFlags(s, &flags));
  stream->native = s;
  stream->priority = priority;
  stream->flags = (flags & cudaStreamNonBlocking) ? RECAP_STREAM_NON_BLOCKING : 0;
  return RECAP_OK;
}

/* ------------------------------------------------------------------------------------------
 * Events
 * ---------------------------------------------------------------------------------------- */

static recap_status cuda_event_create(recap_event *event) {
  unsigned flags = cudaEventDefault;
  if (!(event->flags & RECAP_EVENT_TIMING)) flags |= cudaEventDisableTiming;
  if (event->flags & RECAP_EVENT_BLOCKING) flags |= cudaEventBlockingSync;
  if (event->flags & RECAP_EVENT_INTERPROCESS)
    flags |= cudaEventInterprocess | cudaEventDisableTiming;
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, event->device.index));
  recap_status st = RECAP_OK;
  cudaEvent_t e = NULL;
  RECAP_CUDA_TRY_GOTO(st, cudaEventCreateWithFlags(&e, flags), done);
  event->native = e;
done:
  guard_exit(&guard);
  return st;
}

static recap_status cuda_event_destroy(recap_event *event) {
  RECAP_CUDA_TRY(cudaEventDestroy(native_event(event)));
  event->native = NULL;
  return RECAP_OK;
}

static recap_status cuda_event_record(recap_event *event, recap_stream *stream) {
  RECAP_CUDA_TRY(cudaEventRecord(native_event(event), native_stream(stream)));
  return RECAP_OK;
}

/* The implicit handles (NULL, cudaStreamLegacy, cudaStreamPerThread) name the current device's
 * stream, so the event's device is made current for the call. */
static recap_status cuda_event_record_native(recap_event *event, void *native) {
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, event->device.index));
  recap_status st = RECAP_OK;
  RECAP_CUDA_TRY_GOTO(st, cudaEventRecord(native_event(event), (cudaStream_t)native), done);
done:
  guard_exit(&guard);
  return st;
}

static recap_status cuda_native_stream_wait_event(void *native, recap_event *event) {
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, event->device.index));
  recap_status st = RECAP_OK;
  RECAP_CUDA_TRY_GOTO(st, cudaStreamWaitEvent((cudaStream_t)native, native_event(event), 0), done);
done:
  guard_exit(&guard);
  return st;
}

static recap_status cuda_event_query(recap_event *event) {
  cudaError_t err = cudaEventQuery(native_event(event));
  if (err == cudaErrorNotReady) return RECAP_STATUS_NOT_READY; /* a state, not a failure */
  RECAP_CUDA_TRY(err);
  return RECAP_OK;
}

static recap_status cuda_event_synchronize(recap_event *event) {
  RECAP_CUDA_TRY(cudaEventSynchronize(native_event(event)));
  return RECAP_OK;
}

static recap_status cuda_event_elapsed_ms(recap_event *start, recap_event *end, float *out_ms) {
  float ms = 0.0f;
  cudaError_t err = cudaEventElapsedTime(&ms, native_event(start), native_event(end));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return RECAP_FAIL(RECAP_STATUS_NOT_READY,
                      "cudaEventElapsedTime: an event has not completed yet");
  }
  RECAP_CUDA_TRY(err);
  *out_ms = ms;
  return RECAP_OK;
}

static recap_status cuda_event_ipc_handle(recap_event *event, recap_ipc_event_handle *out) {
  cudaIpcEventHandle_t handle;
  RECAP_CUDA_TRY(cudaIpcGetEventHandle(&handle, native_event(event)));
  memcpy(out->bytes, &handle, sizeof out->bytes);
  return RECAP_OK;
}

static recap_status cuda_event_ipc_open(recap_event *event, const recap_ipc_event_handle *in) {
  cudaIpcEventHandle_t handle;
  memcpy(&handle, in->bytes, sizeof handle);
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, event->device.index));
  recap_status st = RECAP_OK;
  cudaEvent_t e = NULL;
  cudaError_t err = cudaIpcOpenEventHandle(&e, handle);
  if (err != cudaSuccess) {
    st = recap__cuda_fail_at(err, "cudaIpcOpenEventHandle(&e, handle)", __FILE__, __LINE__,
                             __func__);
    /* Driver 580 answers cudaErrorDeviceUninitialized when the handle comes from this very
     * process: a limitation, not a device fault. */
    if (err == cudaErrorDeviceUninitialized)
      st = recap__error_context(RECAP_STATUS_NOT_SUPPORTED,
                                "a process cannot open its own interprocess event handle (use "
                                "the original event): ");
    goto done;
  }
  event->native = e;
done:
  guard_exit(&guard);
  return st;
}

/* ------------------------------------------------------------------------------------------
 * Capture and graphs
 * ---------------------------------------------------------------------------------------- */

/* Captures under way on this backend, with the refusal counter at their start, so that an
 * invalidated capture can name the refused call that (most likely) broke it. */
typedef struct capture_note {
  cudaStream_t origin;
  enum cudaStreamCaptureMode mode; /* a WHILE body begun from it is captured in the same */
  uint64_t refusals_at_begin;
  struct capture_note *next;
} capture_note;

static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static capture_note *captures;

static void capture_note_push(capture_note *note) {
  pthread_mutex_lock(&capture_lock);
  note->next = captures;
  captures = note;
  pthread_mutex_unlock(&capture_lock);
}

/* Unlinks and returns the note of `origin` (NULL if none); the caller frees it. */
static capture_note *capture_note_pop(cudaStream_t origin) {
  capture_note *found = NULL;
  pthread_mutex_lock(&capture_lock);
  for (capture_note **link = &captures; *link; link = &(*link)->next) {
    if ((*link)->origin == origin) {
      found = *link;
      *link = found->next;
      break;
    }
  }
  pthread_mutex_unlock(&capture_lock);
  return found;
}

static recap_status capture_mode_to_cuda(recap_capture_mode mode, enum cudaStreamCaptureMode *out) {
  switch (mode) {
    case RECAP_CAPTURE_MODE_GLOBAL:
      *out = cudaStreamCaptureModeGlobal;
      return RECAP_OK;
    case RECAP_CAPTURE_MODE_THREAD_LOCAL:
      *out = cudaStreamCaptureModeThreadLocal;
      return RECAP_OK;
    case RECAP_CAPTURE_MODE_RELAXED:
      *out = cudaStreamCaptureModeRelaxed;
      return RECAP_OK;
  }
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "unknown capture mode %d", (int)mode);
}

static recap_capture_mode capture_mode_from_cuda(enum cudaStreamCaptureMode mode) {
  switch (mode) {
    case cudaStreamCaptureModeThreadLocal:
      return RECAP_CAPTURE_MODE_THREAD_LOCAL;
    case cudaStreamCaptureModeRelaxed:
      return RECAP_CAPTURE_MODE_RELAXED;
    default:
      return RECAP_CAPTURE_MODE_GLOBAL;
  }
}

static recap_status cuda_capture_begin(recap_stream *stream, recap_capture_mode mode) {
  enum cudaStreamCaptureMode cuda_mode = cudaStreamCaptureModeGlobal;
  RECAP_TRY(capture_mode_to_cuda(mode, &cuda_mode));
  capture_note *note = calloc(1, sizeof *note);
  if (!note) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a capture note");
  note->origin = native_stream(stream);
  note->mode = cuda_mode;
  note->refusals_at_begin = recap__cuda_refusal_count();
  recap_status st = RECAP_OK;
  RECAP_CUDA_TRY_GOTO(st, cudaStreamBeginCapture(native_stream(stream), cuda_mode), fail);
  capture_note_push(note);
  return RECAP_OK;
fail:
  free(note);
  return st;
}

static recap_status cuda_capture_end(recap_stream *stream, recap__graph **out) {
  cudaStream_t s = native_stream(stream);
  capture_note *note = capture_note_pop(s);
  cudaGraph_t graph = NULL;
  cudaError_t err = cudaStreamEndCapture(s, &graph);
  if (err != cudaSuccess) {
    /* A failed end may still hand back a graph; nothing else will destroy it. */
    if (graph) (void)cudaGraphDestroy(graph);
    recap_status st = recap__cuda_fail_at(err, "cudaStreamEndCapture(stream, &graph)", __FILE__,
                                          __LINE__, __func__);
    char first[1024];
    snprintf(first, sizeof first, "%s", recap_last_error());
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s, &cs) != cudaSuccess) (void)cudaGetLastError();
    if (cs == cudaStreamCaptureStatusActive) {
      /* Only a wrong-thread end leaves the capture running; the thread that began it (or any
       * thread, in relaxed mode) can still end it. */
      if (note) capture_note_push(note);
      return recap__fail_plain(st,
                               "%s; the capture is still active: end it from the thread "
                               "that began it",
                               first);
    }
    char refusal[512];
    uint64_t seen = recap__cuda_last_refusal(refusal, sizeof refusal);
    if (note && seen > note->refusals_at_begin) {
      free(note);
      return recap__fail_plain(st, "%s; the latest call refused during a capture was: %s", first,
                               refusal);
    }
    free(note);
    return st;
  }
  free(note);
  recap__graph *g = malloc(sizeof *g);
  if (!g) {
    (void)cudaGraphDestroy(graph);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a graph record");
  }
  g->graph = graph;
  *out = g;
  return RECAP_OK;
}

static recap_status cuda_exchange_capture_mode(recap_capture_mode *mode) {
  enum cudaStreamCaptureMode cuda_mode = cudaStreamCaptureModeGlobal;
  RECAP_TRY(capture_mode_to_cuda(*mode, &cuda_mode));
  RECAP_CUDA_TRY(cudaThreadExchangeStreamCaptureMode(&cuda_mode));
  *mode = capture_mode_from_cuda(cuda_mode);
  return RECAP_OK;
}

static recap_status cuda_graph_node_count(recap__graph *graph, size_t *out) {
  size_t n = 0;
  RECAP_CUDA_TRY(cudaGraphGetNodes(graph->graph, NULL, &n));
  *out = n;
  return RECAP_OK;
}

/* A clone of `graph`, or NULL where CUDA clones none (its refusal is not a fault: cleared). */
static cudaGraph_t clone_for_child(cudaGraph_t graph) {
  cudaGraph_t clone = NULL;
  if (cudaGraphClone(&clone, graph) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return clone;
}

static recap_status cuda_graph_instantiate(recap__graph *graph, recap__graph_exec **out) {
  recap__graph_exec *e = malloc(sizeof *e);
  if (!e) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a graph exec record");
  recap_status st = RECAP_OK;
  /* AutoFreeOnLaunch: memory allocated by a graph's alloc nodes and not freed in it is
   * released before the next launch, so replaying never leaks. UseNodePriority: nodes keep
   * the priority of the stream they were captured on. */
  RECAP_CUDA_TRY_GOTO(st,
                      cudaGraphInstantiateWithFlags(&e->exec, graph->graph,
                                                    cudaGraphInstantiateFlagAutoFreeOnLaunch |
                                                        cudaGraphInstantiateFlagUseNodePriority),
                      fail);
  e->source = clone_for_child(graph->graph);
  *out = e;
  return RECAP_OK;
fail:
  free(e);
  return st;
}

static const char *update_result_name(enum cudaGraphExecUpdateResult result) {
  switch (result) {
    case cudaGraphExecUpdateSuccess:
      return "cudaGraphExecUpdateSuccess";
    case cudaGraphExecUpdateError:
      return "cudaGraphExecUpdateError";
    case cudaGraphExecUpdateErrorTopologyChanged:
      return "cudaGraphExecUpdateErrorTopologyChanged";
    case cudaGraphExecUpdateErrorNodeTypeChanged:
      return "cudaGraphExecUpdateErrorNodeTypeChanged";
    case cudaGraphExecUpdateErrorFunctionChanged:
      return "cudaGraphExecUpdateErrorFunctionChanged";
    case cudaGraphExecUpdateErrorParametersChanged:
      return "cudaGraphExecUpdateErrorParametersChanged";
    case cudaGraphExecUpdateErrorNotSupported:
      return "cudaGraphExecUpdateErrorNotSupported";
    case cudaGraphExecUpdateErrorUnsupportedFunctionChange:
      return "cudaGraphExecUpdateErrorUnsupportedFunctionChange";
    case cudaGraphExecUpdateErrorAttributesChanged:
      return "cudaGraphExecUpdateErrorAttributesChanged";
  }
  return "an unknown cudaGraphExecUpdateResult";
}

static recap_status cuda_graph_exec_update(recap__graph_exec *exec, recap__graph *graph) {
  cudaGraphExecUpdateResultInfo info;
  memset(&info, 0, sizeof info);
  cudaError_t err = cudaGraphExecUpdate(exec->exec, graph->graph, &info);
  if (err == cudaErrorGraphExecUpdateFailure) {
    /* A refused update is an answer, not a fault: clear it so no later check reports it. */
    (void)cudaGetLastError();
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "cudaGraphExecUpdate cannot update this executable graph in place (%s); "
                      "instantiate the new graph instead",
                      update_result_name(info.result));
  }
  RECAP_CUDA_TRY(err);
  /* The exec now runs graph's parameters: so does a child node made from it. */
  if (exec->source && cudaGraphDestroy(exec->source) != cudaSuccess) (void)cudaGetLastError();
  exec->source = clone_for_child(graph->graph);
  return RECAP_OK;
}

static recap_status cuda_graph_upload(recap__graph_exec *exec, recap_stream *stream) {
  RECAP_CUDA_TRY(cudaGraphUpload(exec->exec, native_stream(stream)));
  return RECAP_OK;
}

/* On a capturing stream, a child-graph node of the exec's graph where the stream's next node
 * would go; otherwise a launch. */
static recap_status cuda_graph_launch(recap__graph_exec *exec, recap_stream *stream) {
  cudaStream_t s = native_stream(stream);
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = NULL;
  const cudaGraphNode_t *deps = NULL;
  const cudaGraphEdgeData *edges = NULL;
  size_t num_deps = 0;
  RECAP_CUDA_TRY(cudaStreamGetCaptureInfo(s, &cs, NULL, &graph, &deps, &edges, &num_deps));
  if (cs == cudaStreamCaptureStatusNone) {
    RECAP_CUDA_TRY(cudaGraphLaunch(exec->exec, s));
    return RECAP_OK;
  }
  if (cs != cudaStreamCaptureStatusActive)
    return RECAP_FAIL(RECAP_STATUS_CAPTURE_INVALIDATED,
                      "the stream's capture was invalidated by an earlier call; end it");
  if (!exec->source)
    return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                      "this graph cannot be launched into a capture: a child graph node may not "
                      "hold memory allocation, free or conditional nodes");
  struct cudaGraphNodeParams params;
  memset(&params, 0, sizeof params);
  params.type = cudaGraphNodeTypeGraph;
  params.graph.graph = exec->source; /* cloned into the node */
  cudaGraphNode_t node = NULL;
  RECAP_CUDA_TRY(cudaGraphAddNode(&node, graph, deps, edges, num_deps, &params));
  RECAP_CUDA_TRY(
      cudaStreamUpdateCaptureDependencies(s, &node, NULL, 1, cudaStreamSetCaptureDependencies));
  return RECAP_OK;
}

static void cuda_graph_destroy(recap__graph *graph) {
  if (!graph) return;
  if (cudaGraphDestroy(graph->graph) != cudaSuccess) (void)cudaGetLastError();
  free(graph);
}

static void cuda_graph_exec_destroy(recap__graph_exec *exec) {
  if (!exec) return;
  if (cudaGraphExecDestroy(exec->exec) != cudaSuccess) (void)cudaGetLastError();
  if (exec->source && cudaGraphDestroy(exec->source) != cudaSuccess) (void)cudaGetLastError();
  free(exec);
}

static recap_status cuda_graph_debug_dot(recap__graph *graph, const char *path) {
  RECAP_CUDA_TRY(cudaGraphDebugDotPrint(graph->graph, path, cudaGraphDebugDotFlagsVerbose));
  return RECAP_OK;
}

/* ------------------------------------------------------------------------------------------
 * WHILE loops: conditional nodes (CUDA 12.4 and a driver that knows them)
 * ---------------------------------------------------------------------------------------- */

enum { CONDITIONAL_MIN_VERSION = 12040 };

static recap_status conditional_support(void) {
  int driver = 0;
  RECAP_CUDA_TRY(cudaDriverGetVersion(&driver));
  if (driver < CONDITIONAL_MIN_VERSION)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "the CUDA driver (version %d) has no conditional graph nodes (12.4 or "
                      "later needed)",
                      driver);
  return RECAP_OK;
}

/* The capture mode of the capture `s` began, or global (the strictest) for a stream that
 * joined one. */
static enum cudaStreamCaptureMode capture_mode_of(cudaStream_t s) {
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  pthread_mutex_lock(&capture_lock);
  for (capture_note *n = captures; n; n = n->next)
    if (n->origin == s) mode = n->mode;
  pthread_mutex_unlock(&capture_lock);
  return mode;
}

/* The WHILE node goes where the stream's next node would (its capture dependencies, with
 * their edge data), the stream then depends on the node alone, and the body is captured into
 * the node's body graph with cudaStreamBeginCaptureToGraph. */
static recap_status cuda_while_begin(recap_stream *stream, recap_stream *body, uint64_t *handle) {
  RECAP_TRY(conditional_support());
  cudaStream_t s = native_stream(stream), b = native_stream(body);
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = NULL;
  const cudaGraphNode_t *deps = NULL;
  const cudaGraphEdgeData *edges = NULL;
  size_t num_deps = 0;
  RECAP_CUDA_TRY(cudaStreamGetCaptureInfo(s, &cs, NULL, &graph, &deps, &edges, &num_deps));
  if (cs != cudaStreamCaptureStatusActive)
    return RECAP_FAIL(cs == cudaStreamCaptureStatusInvalidated ? RECAP_STATUS_CAPTURE_INVALIDATED
                                                               : RECAP_STATUS_INVALID_ARGUMENT,
                      "while_begin needs a stream in an intact capture");
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, stream->device.index));
  recap_status st = RECAP_OK;
  cudaGraphConditionalHandle h = 0;
  RECAP_CUDA_TRY_GOTO(
      st, cudaGraphConditionalHandleCreate(&h, graph, 1, cudaGraphCondAssignDefault), done);
  struct cudaGraphNodeParams params;
  memset(&params, 0, sizeof params);
  params.type = cudaGraphNodeTypeConditional;
  params.conditional.handle = h;
  params.conditional.type = cudaGraphCondTypeWhile;
  params.conditional.size = 1;
  cudaGraphNode_t node = NULL;
  RECAP_CUDA_TRY_GOTO(st, cudaGraphAddNode(&node, graph, deps, edges, num_deps, &params), done);
  RECAP_CUDA_TRY_GOTO(
      st, cudaStreamUpdateCaptureDependencies(s, &node, NULL, 1, cudaStreamSetCaptureDependencies),
      done);
  RECAP_CUDA_TRY_GOTO(st,
                      cudaStreamBeginCaptureToGraph(b, params.conditional.phGraph_out[0], NULL,
                                                    NULL, 0, capture_mode_of(s)),
                      done);
  *handle = (uint64_t)h;
done:
  guard_exit(&guard);
  return st;
}

/* The body graph belongs to its conditional node: it is not destroyed here. */
static recap_status cuda_while_end(recap_stream *body) {
  cudaGraph_t graph = NULL;
  cudaError_t err = cudaStreamEndCapture(native_stream(body), &graph);
  if (err != cudaSuccess)
    return recap__error_context(
        recap__cuda_fail_at(err, "cudaStreamEndCapture(body, &graph)", __FILE__, __LINE__,
                            __func__),
        "ending a WHILE body's capture (a body holds only kernel, empty, memcpy, memset, "
        "child-graph and conditional nodes): ");
  return RECAP_OK;
}

static recap_status cuda_condition_set(recap_stream *stream, uint64_t handle, const int32_t *flag) {
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, stream->device.index));
  recap_status st = RECAP_OK;
  RECAP_CUDA_TRY_GOTO(
      st, (cudaError_t)recap__cuda_launch_condition_set(handle, flag, native_stream(stream)), done);
done:
  guard_exit(&guard);
  return st;
}

/* Mapped pinned memory under unified addressing: the device pointer is the host pointer
 * (checked, so a system without UVA says so instead of handing out a pointer kernels cannot
 * use). */
static recap_status cuda_host_alloc_mapped(int device, size_t bytes, void **out) {
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, device));
  recap_status st = RECAP_OK;
  void *ptr = NULL, *dev = NULL;
  RECAP_CUDA_TRY_GOTO(st, cudaHostAlloc(&ptr, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
                      done);
  RECAP_CUDA_TRY_GOTO(st, cudaHostGetDevicePointer(&dev, ptr, 0), fail);
  if (dev != ptr) {
    st = RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                    "mapped host memory has another device address (%p) than host address "
                    "(%p): no unified addressing",
                    dev, ptr);
    goto fail;
  }
  memset(ptr, 0, bytes);
  *out = ptr;
  goto done;
fail:
  (void)cudaFreeHost(ptr);
done:
  guard_exit(&guard);
  return st;
}

static recap_status cuda_host_free_mapped(int device, void *ptr) {
  (void)device;
  if (!ptr) return RECAP_OK;
  RECAP_CUDA_TRY(cudaFreeHost(ptr));
  return RECAP_OK;
}

/* ------------------------------------------------------------------------------------------
 * Host functions
 * ---------------------------------------------------------------------------------------- */

typedef struct {
  recap__host_fn fn;
  int device;
  cudaStream_t stream; /* NULL when captured: a replay may run on any stream */
  bool captured;       /* owned by the graph's user object, not freed after a run */
  max_align_t args[];  /* the caller's argument bytes, suitably aligned */
} host_call;

static void CUDART_CB host_call_run(void *user) {
  host_call *call = user;
  /* This driver thread's message slot may hold an old failure; the function's own message is
   * the one to report. */
  recap_clear_error();
  recap_status st = call->fn(call->args);
  if (st != RECAP_OK) failure_note(call->device, call->stream, st, recap_last_error());
  if (!call->captured) free(call);
}

static void CUDART_CB host_call_release(void *user) {
  free(user);
}

static recap_status cuda_launch_host(recap_stream *stream, recap__host_fn fn, const void *args,
                                     size_t args_size) {
  if (!fn || (args_size > 0 && !args))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "launch_host needs a function and, when "
                      "args_size > 0, the arguments");
  if (args_size > SIZE_MAX - sizeof(host_call))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "host function arguments too large");
  cudaStream_t s = native_stream(stream);
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaGraph_t capturing = NULL;
  /* Legal on a capturing stream; no dependencies are asked for, so no edge data is lost. */
  RECAP_CUDA_TRY(cudaStreamGetCaptureInfo(s, &cs, NULL, &capturing, NULL, NULL, NULL));
  if (cs == cudaStreamCaptureStatusInvalidated)
    return RECAP_FAIL(RECAP_STATUS_CAPTURE_INVALIDATED,
                      "the stream's capture was invalidated by an earlier call; end it");

  host_call *call = malloc(sizeof *call + args_size);
  if (!call) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for host function args");
  call->fn = fn;
  call->device = stream->device.index;
  call->captured = cs == cudaStreamCaptureStatusActive;
  call->stream = call->captured ? NULL : s;
  if (args_size > 0) memcpy(call->args, args, args_size);

  recap_status st = RECAP_OK;
  if (!call->captured) {
    RECAP_CUDA_TRY_GOTO(st, cudaLaunchHostFunc(s, host_call_run, call), fail_free);
    return RECAP_OK;
  }
  /* Captured: the graph owns the copy from here on (see the file comment). */
  cudaUserObject_t object = NULL;
  RECAP_CUDA_TRY_GOTO(
      st, cudaUserObjectCreate(&object, call, host_call_release, 1, cudaUserObjectNoDestructorSync),
      fail_free);
  cudaError_t err = cudaGraphRetainUserObject(capturing, object, 1, cudaGraphUserObjectMove);
  if (err != cudaSuccess) {
    /* Our reference is the only one: releasing it frees the copy. */
    (void)cudaUserObjectRelease(object, 1);
    return recap__cuda_fail_at(err, "cudaGraphRetainUserObject(capturing, object, 1, move)",
                               __FILE__, __LINE__, __func__);
  }
  RECAP_CUDA_TRY(cudaLaunchHostFunc(s, host_call_run, call));
  return RECAP_OK;
fail_free:
  free(call);
  return st;
}

const recap__backend recap__cuda_backend = {
    .name = "cuda",
    .kind = RECAP_BACKEND_CUDA,
    .device_count = cuda_device_count,
    .device_properties = cuda_device_properties,
    .mem_get_info = cuda_mem_get_info,
    .device_synchronize = cuda_device_synchronize,
    .can_access_peer = cuda_can_access_peer,
    .compiled_archs = cuda_compiled_archs,
    .mem_alloc = cuda_mem_alloc,
    .mem_free = cuda_mem_free,
    .memcpy_async = cuda_memcpy_async,
    .memset_async = cuda_memset_async,
    .stream_priority_range = cuda_stream_priority_range,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .stream_query = cuda_stream_query,
    .stream_synchronize = cuda_stream_synchronize,
    .stream_wait_event = cuda_stream_wait_event,
    .stream_capture_status = cuda_stream_capture_status,
    .stream_wrap = cuda_stream_wrap,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_synchronize = cuda_event_synchronize,
    .event_elapsed_ms = cuda_event_elapsed_ms,
    .event_ipc_handle = cuda_event_ipc_handle,
    .event_ipc_open = cuda_event_ipc_open,
    .event_record_native = cuda_event_record_native,
    .native_stream_wait_event = cuda_native_stream_wait_event,
    .capture_begin = cuda_capture_begin,
    .capture_end = cuda_capture_end,
    .exchange_capture_mode = cuda_exchange_capture_mode,
    .graph_node_count = cuda_graph_node_count,
    .graph_instantiate = cuda_graph_instantiate,
    .graph_exec_update = cuda_graph_exec_update,
    .graph_upload = cuda_graph_upload,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .graph_exec_destroy = cuda_graph_exec_destroy,
    .graph_debug_dot = cuda_graph_debug_dot,
    .device_enter = cuda_device_enter,
    .device_exit = cuda_device_exit,
    .launch_host = cuda_launch_host,
    .launch_kernel = NULL,
    .while_begin = cuda_while_begin,
    .while_end = cuda_while_end,
    .condition_set = cuda_condition_set,
    .host_alloc_mapped = cuda_host_alloc_mapped,
    .host_free_mapped = cuda_host_free_mapped,
};
