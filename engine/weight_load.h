/*
 * weight_load.h: reads tensors from their files into device memory, as their plans say
 * (internal to the engine).
 *
 *   recap__weight_job jobs[] = {{plan_w, dst_w, "w"}, {plan_b, dst_b, "b"}};
 *   size_t failed;
 *   st = recap__weights_load(jobs, 2, stream, NULL, &failed);
 *   // RECAP_OK: every tensor is on the device (the copies were waited for)
 *
 * How: each file is opened once and re-checked against the stamp the spec check took (size and
 * header bytes: recap__checkpoint_check_stamp), so a file changed since is an error naming it.
 * The work is cut into tasks: a tensor whose every source lands in one contiguous range of the
 * tensor (no transpose, no column range, concat along axis 0 or an axis with only 1s before it)
 * becomes chunks of at most chunk_bytes, each read with pread into a pinned staging buffer
 * (recap_host_malloc), converted into a second one when the dtype differs, and copied with
 * recap_memcpy_async; any other tensor is one task that assembles the tensor in a pinned host
 * image (transposing, selecting columns, interleaving sources, converting) and copies it.
 * Worker threads (threads) take tasks in order; each has its own stream (made to wait for
 * `stream` first, which the destination memory belongs to) and a ring of two staging slots,
 * each with an event, so the next chunk is read while the previous one is copied and a slot is
 * refilled only once its copy is done. A short read (a file truncated while it is loaded) is an
 * error, never a signal. On both backends the same code runs: the host backend's copies are
 * memcpys.
 *
 * Casts round to nearest even (float to float); i64 to i32 fails on a value outside i32's
 * range, naming the tensor and the element, and so does a NaN in any float source, found by a
 * scan of each buffer read. On any failure every worker stops, every copy
 * already queued is waited for, staging memory is released, and the first failure is returned
 * ("'<file>': tensor '<key>' ..." or the runtime's status), with *failed = the job it belongs
 * to (the caller adds the spec position). The destination is then partly written.
 */
#ifndef RECAP_ENGINE_WEIGHT_LOAD_H
#define RECAP_ENGINE_WEIGHT_LOAD_H

#include <stddef.h>
#include <stdint.h>

#include "engine/weight_plan.h"
#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const recap__weight_plan *plan;
  void *dst;        /* device memory of the plan's dtype and shape, contiguous */
  const char *name; /* the tensor's, for messages */
} recap__weight_job;

typedef struct {
  int threads;        /* worker threads (0: min(16, online cores)) */
  size_t chunk_bytes; /* staging slot size (0: 4 MiB; at least 64 KiB) */
} recap__weight_load_options;

/* Loads every job. options may be NULL (defaults). `stream` is the destinations' stream:
 * the copies are ordered after its work so far, and done when this returns. */
recap_status recap__weights_load(const recap__weight_job *jobs, size_t count, recap_stream *stream,
                                 const recap__weight_load_options *options, size_t *failed);

#ifdef __cplusplus
}
#endif

#endif
