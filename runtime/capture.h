/*
 * capture.h: the process-wide registry of stream captures (internal).
 *
 * A capture is registered under the registry's lock BEFORE the backend begins it, and
 * removed after the backend ends it. Lower layers that must make a call a capture forbids
 * (the allocator's cudaMalloc/cudaFree, an out-of-memory synchronize) bracket it with
 * recap__unsafe_enter / recap__unsafe_exit: enter returns false while a capture is under way,
 * and otherwise holds the registry (shared) until exit, so no capture can begin between the
 * check and the call. A plain "is anything capturing?" check followed by the call would race.
 *
 *   if (recap__unsafe_enter()) {
 *     st = backend->mem_free(dev, ptr);
 *     recap__unsafe_exit();
 *   } else {
 *     defer the free until the capture ends
 *   }
 *
 * Never begin or end a capture between enter and exit (that thread would wait on itself).
 */
#ifndef RECAP_RUNTIME_CAPTURE_H
#define RECAP_RUNTIME_CAPTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registers and begins a capture on `stream`. Fails with RECAP_STATUS_INVALID_ARGUMENT on a
 * stream already capturing, and passes through the backend's refusal. */
recap_status recap__capture_begin(recap_stream *stream, recap_capture_mode mode);
/* Ends the capture that began on `stream` and unregisters it, also when the backend reports
 * the capture invalidated (then *out is untouched and the status names the cause). */
recap_status recap__capture_end(recap_stream *stream, recap__graph **out);
/* A process-unique id of the capture that began on `stream` (0 when none). */
uint64_t recap__capture_id(const recap_stream *stream);
/* Number of captures under way in the process. */
int recap__capture_count(void);

bool recap__unsafe_enter(void);
/* As recap__unsafe_enter, but waits for other threads' captures to end instead of refusing:
 * for one-time set-up (library handles, workspaces) that a warmup on one thread must do while
 * another thread captures. Returns false at once when this thread itself has a capture under
 * way (waiting would never end). Never call it holding a lock a capturing thread may need. */
bool recap__unsafe_enter_wait(void);
void recap__unsafe_exit(void);

/* Called by the runtime's capture-end path so layers above can run deferred work (the
 * allocator's pending frees) once no capture is under way. One hook; NULL clears it. */
typedef void (*recap__capture_end_hook)(void);
void recap__capture_set_end_hook(recap__capture_end_hook hook);

#ifdef __cplusplus
}
#endif

#endif
