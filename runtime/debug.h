/*
 * debug.h: the runtime's debugging modes, chosen by environment variables (internal).
 *
 * RECAP_LAUNCH_BLOCKING=1 makes every eager launch synchronous, so an asynchronous device
 * fault is reported by the op that caused it instead of by some later call. Whoever launches
 * an op (the engine's executor, a kernel launcher) calls recap__after_launch right after it:
 *
 *   RECAP_TRY(launch_gemm(..., stream));
 *   RECAP_TRY(recap__after_launch(stream, op->name));   // a no-op unless the mode is on
 *
 * RECAP_SYNC_DEBUG=warn|error reports calls that block the host on the device (stream, event
 * and device synchronize, copies to host), to find hidden synchronizations in a loop that
 * should run ahead of the GPU. Each such call starts with
 *
 *   RECAP_TRY(recap__sync_debug_check("recap_stream_synchronize"));
 *
 * Accepted values: RECAP_LAUNCH_BLOCKING is a boolean switch (runtime/env.h: 1, true, yes,
 * on or 0, false, no, off; empty is off). RECAP_SYNC_DEBUG warn, error, off or empty. Any
 * other value leaves that mode off and prints a warning on stderr naming the variable and
 * the value. The variables are read on first use, once per process
 * (thread-safe), and again by recap__debug_reload_env.
 */
#ifndef RECAP_RUNTIME_DEBUG_H
#define RECAP_RUNTIME_DEBUG_H

#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Call after an eager launch on `stream`. With RECAP_LAUNCH_BLOCKING=1, waits for the stream
 * and returns its failure with "op '<op_name>': " prepended to the detail message. Returns
 * RECAP_OK without waiting when the mode is off, when `stream` is capturing (waiting would
 * invalidate the capture), and while any capture registered with the runtime is under way (a
 * synchronize then risks invalidating that capture, depending on its mode). The wait is not a
 * "synchronizing call" for RECAP_SYNC_DEBUG: it is what the user asked for. op_name may be
 * NULL (shown as "?"); stream must not be NULL (RECAP_STATUS_INVALID_ARGUMENT). */
recap_status recap__after_launch(recap_stream *stream, const char *op_name);

/* Call at the top of every function that blocks the host on the device. `what` names the
 * call ("recap_stream_synchronize"). RECAP_SYNC_DEBUG=warn: prints
 * "recap: warning: synchronizing call <what>" on stderr (the first 100 times in the process,
 * then one line saying that further warnings are suppressed) and returns RECAP_OK.
 * RECAP_SYNC_DEBUG=error: returns RECAP_STATUS_NOT_SUPPORTED with the detail message
 * "synchronizing call <what> while RECAP_SYNC_DEBUG=error"; the caller must then return it
 * without synchronizing. Off: RECAP_OK. */
recap_status recap__sync_debug_check(const char *what);

/* Re-reads RECAP_LAUNCH_BLOCKING and RECAP_SYNC_DEBUG and restarts the warning count. For
 * tests (setenv, then reload); safe to call from any thread at any time. */
void recap__debug_reload_env(void);

#ifdef __cplusplus
}
#endif

#endif
