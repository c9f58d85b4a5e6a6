/* stream.c: streams, the per-thread current stream, the lazily created default streams, and
 * stream-ordered copies. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/debug.h"
#include "runtime/error.h"
#include "runtime/stream_hooks.h"

enum { MAX_DEFAULT_STREAM_DEVICES = 64 };

static recap_status stream_alloc(recap_device device, const recap__backend *backend,
                                 recap_stream **out) {
  recap_stream *s = calloc(1, sizeof *s);
  if (!s) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a stream");
  s->device = device;
  s->backend = backend;
  *out = s;
  return RECAP_OK;
}

recap_status recap_stream_create(recap_device device, int priority, unsigned flags,
                                 recap_stream **out) {
  RECAP_CHECK_ARG(out);
  RECAP_CHECK_ARG((flags & ~(unsigned)RECAP_STREAM_NON_BLOCKING) == 0);
  const recap__backend *backend;
  RECAP_TRY(recap__device_backend(device, &backend));
  int least = 0, greatest = 0;
  RECAP_TRY(backend->stream_priority_range(device.index, &least, &greatest));
  /* CUDA's convention: numerically lower is higher priority; `greatest` <= `least`. */
  if (priority > least) priority = least;
  if (priority < greatest) priority = greatest;
  recap_stream *s = NULL;
  RECAP_TRY(stream_alloc(device, backend, &s));
  s->priority = priority;
  s->flags = flags;
  s->owns_native = true;
  recap_status st = backend->stream_create(s);
  if (st != RECAP_OK) {
    free(s);
    return st;
  }
  *out = s;
  return RECAP_OK;
}

recap_status recap_stream_wrap_external(recap_device device, void *cuda_stream,
                                        recap_stream **out) {
  RECAP_CHECK_ARG(out);
  if (!cuda_stream)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the legacy default stream (NULL) cannot be used: recap never "
                      "launches on it, since it cannot be captured and serializes everything");
  const recap__backend *backend;
  RECAP_TRY(recap__device_backend(device, &backend));
  if (!backend->stream_wrap)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "the %s backend cannot wrap external streams",
                      backend->name);
  recap_stream *s = NULL;
  RECAP_TRY(stream_alloc(device, backend, &s));
  s->owns_native = false;
  recap_status st = backend->stream_wrap(s, cuda_stream);
  if (st != RECAP_OK) {
    free(s);
    return st;
  }
  *out = s;
  return RECAP_OK;
}

enum { MAX_RELEASE_HOOKS = 8 };
static pthread_mutex_t hooks_lock = PTHREAD_MUTEX_INITIALIZER;
static recap__stream_release_hook release_hooks[MAX_RELEASE_HOOKS];
static int release_hook_count;

recap_status recap__stream_add_release_hook(recap__stream_release_hook hook) {
  RECAP_CHECK_ARG(hook);
  recap_status st = RECAP_OK;
  pthread_mutex_lock(&hooks_lock);
  int known = 0;
  for (int i = 0; i < release_hook_count; i++) known |= release_hooks[i] == hook;
  if (!known) {
    if (release_hook_count == MAX_RELEASE_HOOKS)
      st = RECAP_FAIL(RECAP_STATUS_INTERNAL, "too many stream release hooks");
    else
      release_hooks[release_hook_count++] = hook;
  }
  pthread_mutex_unlock(&hooks_lock);
  return st;
}

static recap_status run_release_hooks(recap_stream *stream) {
  pthread_mutex_lock(&hooks_lock);
  int count = release_hook_count;
  recap__stream_release_hook hooks[MAX_RELEASE_HOOKS];
  for (int i = 0; i < count; i++) hooks[i] = release_hooks[i];
  pthread_mutex_unlock(&hooks_lock);
  for (int i = 0; i < count; i++) RECAP_TRY(hooks[i](stream));
  return RECAP_OK;
}

recap_status recap_stream_destroy(recap_stream *stream) {
  if (!stream) return RECAP_OK;
  if (recap__capture_id(stream) != 0)
    return RECAP_FAIL(RECAP_STATUS_BUSY, "stream is capturing; end the capture first");
  recap_capture_status cs = RECAP_CAPTURE_NONE;
  RECAP_TRY(stream->backend->stream_capture_status(stream, &cs));
  if (cs != RECAP_CAPTURE_NONE)
    return RECAP_FAIL(RECAP_STATUS_BUSY,
                      "stream takes part in a capture begun on another stream; end it first");
  RECAP_TRY(run_release_hooks(stream));
  if (stream->owns_native) RECAP_TRY(stream->backend->stream_destroy(stream));
  free(stream);
  return RECAP_OK;
}

/* Default streams: one per device, created on first use and kept for the process. */
static pthread_mutex_t default_lock = PTHREAD_MUTEX_INITIALIZER;
static recap_stream *default_streams[2][MAX_DEFAULT_STREAM_DEVICES];

static recap_status default_stream(recap_device device, recap_stream **out) {
  if (device.index < 0 || device.index >= MAX_DEFAULT_STREAM_DEVICES)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "device index %d out of range",
                      device.index);
  recap_status st = RECAP_OK;
  pthread_mutex_lock(&default_lock);
  recap_stream **slot = &default_streams[device.backend == RECAP_BACKEND_CUDA][device.index];
  if (!*slot) st = recap_stream_create(device, 0, RECAP_STREAM_NON_BLOCKING, slot);
  if (st == RECAP_OK) *out = *slot;
  pthread_mutex_unlock(&default_lock);
  return st;
}

static _Thread_local recap_stream *thread_streams[2][MAX_DEFAULT_STREAM_DEVICES];

recap_status recap_stream_current(recap_stream **out) {
  RECAP_CHECK_ARG(out);
  recap_device device;
  RECAP_TRY(recap_device_current(&device));
  if (device.index < 0 || device.index >= MAX_DEFAULT_STREAM_DEVICES)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "device index %d out of range",
                      device.index);
  recap_stream **slot = &thread_streams[device.backend == RECAP_BACKEND_CUDA][device.index];
  if (!*slot) RECAP_TRY(default_stream(device, slot));
  *out = *slot;
  return RECAP_OK;
}

recap_status recap_stream_set_current(recap_stream *stream) {
  RECAP_CHECK_ARG(stream);
  RECAP_CHECK_ARG(stream->device.index >= 0 &&
                  stream->device.index < MAX_DEFAULT_STREAM_DEVICES);
  RECAP_TRY(recap_device_set(stream->device));
  thread_streams[stream->device.backend == RECAP_BACKEND_CUDA][stream->device.index] = stream;
  return RECAP_OK;
}

recap_device recap_stream_device(const recap_stream *stream) { return stream->device; }

int recap_stream_priority(const recap_stream *stream) { return stream->priority; }

void *recap_stream_native(const recap_stream *stream) {
  return stream->backend->kind == RECAP_BACKEND_CUDA ? stream->native : NULL;
}

recap_status recap_stream_query(recap_stream *stream) {
  RECAP_CHECK_ARG(stream);
  return stream->backend->stream_query(stream);
}

recap_status recap_stream_synchronize(recap_stream *stream) {
  RECAP_CHECK_ARG(stream);
  RECAP_TRY(recap__sync_debug_check("recap_stream_synchronize"));
  return stream->backend->stream_synchronize(stream);
}

recap_status recap_stream_wait_event(recap_stream *stream, recap_event *event) {
  RECAP_CHECK_ARG(stream && event);
  if (stream->backend != event->backend)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "stream (%s) and event (%s) belong to different backends",
                      stream->backend->name, event->backend->name);
  return stream->backend->stream_wait_event(stream, event);
}

recap_status recap_memcpy_async(void *dst, const void *src, size_t bytes, recap_stream *stream) {
  RECAP_CHECK_ARG(stream);
  if (bytes == 0) return RECAP_OK;
  RECAP_CHECK_ARG(dst && src);
  /* CUDA leaves overlapping copies undefined and the host backend would quietly memmove them:
   * refused on both, so code tested on the host cannot rely on what the GPU does not do. */
  uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  if (d < s + bytes && s < d + bytes)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "recap_memcpy_async: the %zu-byte ranges at %p and %p overlap", bytes, dst,
                      src);
  return stream->backend->memcpy_async(dst, src, bytes, stream);
}

recap_status recap_stream_wait_stream(recap_stream *stream, recap_stream *other) {
  RECAP_CHECK_ARG(stream && other);
  if (stream == other) return RECAP_OK;
  recap_event *event = NULL;
  RECAP_TRY(recap_event_create(other->device, RECAP_EVENT_DEFAULT, &event));
  recap_status st;
  RECAP_TRY_GOTO(st, recap_event_record(event, other), done);
  RECAP_TRY_GOTO(st, recap_stream_wait_event(stream, event), done);
done:
  /* Destroying a recorded event is legal: the wait keeps its own reference (as in CUDA). */
  recap_event_destroy(event);
  return st;
}

recap_status recap_stream_capture_status(recap_stream *stream, recap_capture_status *out) {
  RECAP_CHECK_ARG(stream && out);
  return stream->backend->stream_capture_status(stream, out);
}

int recap_stream_is_capturing(recap_stream *stream) {
  recap_capture_status cs = RECAP_CAPTURE_NONE;
  if (!stream || recap_stream_capture_status(stream, &cs) != RECAP_OK) return 0;
  return cs != RECAP_CAPTURE_NONE;
}
