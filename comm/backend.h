/*
 * comm_backend.h: the interface a communicator backend implements (internal to recap).
 *
 * comm.c owns the recap_comm object, checks arguments, runs a world of 1 itself (copies) and
 * calls through a recap__comm_backend for anything larger, as device.c and stream.c call through
 * a recap__backend (runtime/backend.h). One implementation today: NCCL
 * (recap__nccl_comm_backend, comm/nccl.c, CUDA builds only); a hostonly build has none
 * and refuses a world larger than 1. The table lets comm.c reach NCCL without calling into
 * cuda_comm.c by name, so the two files do not call each other (cuda_comm.c reaches the
 * per-device registry in comm_registry.c, below both).
 *
 * Conventions for implementations:
 * - A communicator that the backend runs holds its state in comm->state (set by init or
 *   init_clique, cleared by destroy); comm.c calls the per-communicator slots only while it is
 *   set, and calls destroy whenever it is set, also after an init that failed half-way.
 * - Every recap_status slot records a detail message on failure (RECAP_FAIL), naming the call.
 *
 *   const recap__comm_backend *be = &recap__nccl_comm_backend;
 *   RECAP_TRY(be->load());
 *   if (rank == 0) RECAP_TRY(be->unique_id(id, &len));     // then a rendezvous hands id out
 *   RECAP_TRY(be->init(comm, id, len));                     // comm->state is set from here
 */
#ifndef RECAP_COMM_BACKEND_H
#define RECAP_COMM_BACKEND_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

struct recap__comm_backend {
  const char *name;

  /* Loads the library once (NOT_SUPPORTED, naming it, when it is absent or unusable). */
  recap_status (*load)(void);
  /* The id every rank's init needs, made by rank 0: at most RECAP_RENDEZVOUS_MAX_PAYLOAD bytes
   * into id, its size in *len. */
  recap_status (*unique_id)(void *id, size_t *len);
  /* Creates comm->state for rank comm->rank of comm->world on comm->device from rank 0's id,
   * waiting at most comm->timeout_s. */
  recap_status (*init)(recap_comm *comm, const void *id, size_t len);
  /* Creates count communicators of one clique in this process (comms[i] is rank i). */
  recap_status (*init_clique)(recap_comm *const *comms, int count);
  /* Releases comm->state and clears it; abort: tear down at once instead of flushing. */
  void (*destroy)(recap_comm *comm, bool abort);
  /* Aborts the communicator; it fails every later call until destroyed. */
  void (*abort)(recap_comm *comm);
  /* RECAP_OK, or the error that aborted the communicator. */
  recap_status (*check)(recap_comm *comm);
  /* Enqueues c, already checked by comm.c, on native_stream (the stream's native handle). */
  recap_status (*run)(recap_comm *comm, const recap__coll *c, void *native_stream);
  /* Brackets the calls of one group (fused into one launch); nestable, per thread. */
  recap_status (*group_start)(void);
  recap_status (*group_end)(void);
  /* Waits for `stream` at most comm->timeout_s: a peer that stopped answering makes this return
   * RECAP_STATUS_TIMEOUT (the communicator is aborted) instead of blocking forever. */
  recap_status (*synchronize)(recap_comm *comm, recap_stream *stream);
  /* Marks a stretch of work (a distributed run: broadcasts, warmup, capture, replay) that the
   * backend bounds by the timeout; nestable. */
  void (*busy_begin)(recap_comm *comm);
  void (*busy_end)(recap_comm *comm);
};

#if RECAP_WITH_CUDA
extern const recap__comm_backend recap__nccl_comm_backend;
#endif

#ifdef __cplusplus
}
#endif

#endif
