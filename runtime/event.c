/* event.c: events (timing, blocking, interprocess). */
#include <stdlib.h>

#include "runtime/backend.h"
#include "runtime/debug.h"
#include "runtime/error.h"

recap_status recap_event_create(recap_device device, unsigned flags, recap_event **out) {
  RECAP_CHECK_ARG(out);
  const unsigned known = RECAP_EVENT_TIMING | RECAP_EVENT_BLOCKING | RECAP_EVENT_INTERPROCESS;
  if (flags & ~known)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "unknown event flags 0x%x", flags & ~known);
  if ((flags & RECAP_EVENT_INTERPROCESS) && (flags & RECAP_EVENT_TIMING))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "an interprocess event cannot record timing (CUDA requires "
                      "cudaEventDisableTiming with cudaEventInterprocess)");
  const recap__backend *backend;
  RECAP_TRY(recap__device_backend(device, &backend));
  if ((flags & RECAP_EVENT_INTERPROCESS) && !backend->event_ipc_handle)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "the %s backend has no interprocess events",
                      backend->name);
  recap_event *e = calloc(1, sizeof *e);
  if (!e) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for an event");
  e->device = device;
  e->backend = backend;
  e->flags = flags;
  recap_status st = backend->event_create(e);
  if (st != RECAP_OK) {
    free(e);
    return st;
  }
  *out = e;
  return RECAP_OK;
}

recap_status recap_event_destroy(recap_event *event) {
  if (!event) return RECAP_OK;
  RECAP_TRY(event->backend->event_destroy(event));
  free(event);
  return RECAP_OK;
}

recap_status recap_event_record(recap_event *event, recap_stream *stream) {
  RECAP_CHECK_ARG(event && stream);
  if (event->backend != stream->backend || event->device.index != stream->device.index)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "event (%s:%d) recorded on a stream of another device (%s:%d)",
                      event->backend->name, event->device.index, stream->backend->name,
                      stream->device.index);
  return event->backend->event_record(event, stream);
}

recap_status recap_event_record_native(recap_event *event, void *cuda_stream) {
  RECAP_CHECK_ARG(event);
  if (!event->backend->event_record_native)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "the %s backend has no CUDA streams to record an event on",
                      event->backend->name);
  return event->backend->event_record_native(event, cuda_stream);
}

recap_status recap_native_stream_wait_event(void *cuda_stream, recap_event *event) {
  RECAP_CHECK_ARG(event);
  if (!event->backend->native_stream_wait_event)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "the %s backend has no CUDA streams to wait on an event",
                      event->backend->name);
  return event->backend->native_stream_wait_event(cuda_stream, event);
}

recap_status recap_event_query(recap_event *event) {
  RECAP_CHECK_ARG(event);
  return event->backend->event_query(event);
}

recap_status recap_event_synchronize(recap_event *event) {
  RECAP_CHECK_ARG(event);
  RECAP_TRY(recap__sync_debug_check("recap_event_synchronize"));
  return event->backend->event_synchronize(event);
}

recap_status recap_event_elapsed_ms(recap_event *start, recap_event *end, float *out_ms) {
  RECAP_CHECK_ARG(start && end && out_ms);
  if (start->backend != end->backend || start->device.index != end->device.index)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "elapsed time between events of different devices (%s:%d, %s:%d)",
                      start->backend->name, start->device.index, end->backend->name,
                      end->device.index);
  if (!(start->flags & RECAP_EVENT_TIMING) || !(end->flags & RECAP_EVENT_TIMING))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "elapsed time needs both events created with RECAP_EVENT_TIMING");
  return start->backend->event_elapsed_ms(start, end, out_ms);
}

recap_status recap_event_ipc_handle(recap_event *event, recap_ipc_event_handle *out) {
  RECAP_CHECK_ARG(event && out);
  if (!(event->flags & RECAP_EVENT_INTERPROCESS))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the event was not created with RECAP_EVENT_INTERPROCESS");
  return event->backend->event_ipc_handle(event, out);
}

recap_status recap_event_ipc_open(recap_device device, const recap_ipc_event_handle *handle,
                                  recap_event **out) {
  RECAP_CHECK_ARG(handle && out);
  const recap__backend *backend;
  RECAP_TRY(recap__device_backend(device, &backend));
  if (!backend->event_ipc_open)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "the %s backend has no interprocess events",
                      backend->name);
  recap_event *e = calloc(1, sizeof *e);
  if (!e) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for an event");
  e->device = device;
  e->backend = backend;
  e->flags = RECAP_EVENT_INTERPROCESS;
  recap_status st = backend->event_ipc_open(e, handle);
  if (st != RECAP_OK) {
    free(e);
    return st;
  }
  *out = e;
  return RECAP_OK;
}
