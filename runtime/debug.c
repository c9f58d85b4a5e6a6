/* debug.c: RECAP_LAUNCH_BLOCKING and RECAP_SYNC_DEBUG (see debug.h). */
#include "runtime/debug.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/env.h"
#include "runtime/error.h"

enum { SYNC_DEBUG_OFF = 0, SYNC_DEBUG_WARN = 1, SYNC_DEBUG_ERROR = 2 };
enum { SYNC_WARNINGS_MAX = 100 };

/* Atomics rather than a lock: the checks sit on hot paths and read one word each, and a
 * reload from a test thread must not race with them. */
static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static atomic_bool launch_blocking;
static atomic_int sync_debug_mode;
static atomic_int sync_warnings_printed;

static bool env_is(const char *value, const char *expected) {
  return strcmp(value, expected) == 0;
}

static void env_load(void) {
  bool blocking_on = recap__env_bool("RECAP_LAUNCH_BLOCKING", 0) == 1;

  const char *sync = getenv("RECAP_SYNC_DEBUG");
  int mode = SYNC_DEBUG_OFF;
  if (sync && env_is(sync, "warn")) {
    mode = SYNC_DEBUG_WARN;
  } else if (sync && env_is(sync, "error")) {
    mode = SYNC_DEBUG_ERROR;
  } else if (sync && !env_is(sync, "off") && !env_is(sync, "")) {
    fprintf(stderr,
            "recap: warning: ignoring RECAP_SYNC_DEBUG='%s' (expected warn, error or off); "
            "synchronizing calls are not reported\n",
            sync);
  }

  atomic_store(&launch_blocking, blocking_on);
  atomic_store(&sync_debug_mode, mode);
  atomic_store(&sync_warnings_printed, 0);
}

static void env_ensure_loaded(void) {
  pthread_once(&env_once, env_load);
}

static void env_nothing(void) {}

void recap__debug_reload_env(void) {
  /* Mark the first-use load as done without running it, so a reload before any check does
   * not read the variables (and print a warning about a bad value) twice. */
  pthread_once(&env_once, env_nothing);
  env_load();
}

recap_status recap__after_launch(recap_stream *stream, const char *op_name) {
  RECAP_CHECK_ARG(stream);
  env_ensure_loaded();
  if (!atomic_load(&launch_blocking)) return RECAP_OK;
  /* Holding the capture registry keeps a capture from beginning while we wait. Captures the
   * registry does not know (begun by the user on a wrapped stream) show in the stream's own
   * capture status. */
  if (!recap__unsafe_enter()) return RECAP_OK;
  recap_capture_status capture = RECAP_CAPTURE_NONE;
  recap_status st = stream->backend->stream_capture_status(stream, &capture);
  /* The backend's synchronize, not recap_stream_synchronize: this wait is the one the user
   * asked for, and RECAP_SYNC_DEBUG must not report or refuse it. */
  if (st == RECAP_OK && capture == RECAP_CAPTURE_NONE)
    st = stream->backend->stream_synchronize(stream);
  recap__unsafe_exit();
  if (st != RECAP_OK) return recap__error_context(st, "op '%s': ", op_name ? op_name : "?");
  return RECAP_OK;
}

recap_status recap__sync_debug_check(const char *what) {
  env_ensure_loaded();
  int mode = atomic_load(&sync_debug_mode);
  if (mode == SYNC_DEBUG_OFF) return RECAP_OK;
  if (!what) what = "?";
  if (mode == SYNC_DEBUG_ERROR)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "synchronizing call %s while RECAP_SYNC_DEBUG=error", what);
  /* The load keeps the counter from growing (and wrapping) once warnings are suppressed. */
  if (atomic_load(&sync_warnings_printed) > SYNC_WARNINGS_MAX) return RECAP_OK;
  int printed = atomic_fetch_add(&sync_warnings_printed, 1);
  if (printed < SYNC_WARNINGS_MAX) {
    fprintf(stderr, "recap: warning: synchronizing call %s\n", what);
  } else if (printed == SYNC_WARNINGS_MAX) {
    fprintf(stderr,
            "recap: warning: more than %d synchronizing calls; further warnings are "
            "suppressed\n",
            SYNC_WARNINGS_MAX);
  }
  return RECAP_OK;
}
