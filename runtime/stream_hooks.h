/*
 * stream_hooks.h: per-stream resources kept by upper layers (internal).
 *
 * Upper layers cache things per stream (the GEMM module's workspace, keyed by the native
 * stream). A stream's native handle may be reused by the next stream created, so those caches
 * must be dropped when the stream goes. The runtime cannot call up, so upper layers register a
 * release hook, and recap_stream_destroy runs every hook first; if one fails (e.g. a capture
 * is under way, so memory cannot be freed), the stream is not destroyed and that status is
 * returned.
 */
#ifndef RECAP_RUNTIME_STREAM_HOOKS_H
#define RECAP_RUNTIME_STREAM_HOOKS_H

#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef recap_status (*recap__stream_release_hook)(recap_stream *stream);

/* Registers a hook (idempotent for the same function; at most 8 hooks). */
recap_status recap__stream_add_release_hook(recap__stream_release_hook hook);

#ifdef __cplusplus
}
#endif

#endif
