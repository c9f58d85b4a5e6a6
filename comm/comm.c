/*
 * comm.c: the recap_comm object and the world-of-1 path (comm/comm.h; public API in
 * include/recap.h, "Communicators").
 *
 * A device has at most one communicator at a time (comm_registry.c says why). A device
 * without one is a world of 1, where every collective is a copy (or nothing, in place); that
 * is also all the host backend can do, and a larger world on it is refused at init with a
 * message saying so. A larger world runs through a recap__comm_backend (comm_backend.h):
 * NCCL, whose code all lives in cuda_comm.c and which this file reaches only through that
 * table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "comm/comm.h"
#include "comm/backend.h"
#include "runtime/error.h"

/* The backend that runs a world larger than 1: NCCL in CUDA builds; a hostonly build has none
 * (its only devices are the host backend's, a world of 1). */
static const recap__comm_backend *world_backend(void) {
#if RECAP_WITH_CUDA
  return &recap__nccl_comm_backend;
#else
  return NULL;
#endif
}

static recap_status check_timeout(double timeout_s) {
  if (!(timeout_s > 0 && timeout_s < 1e7))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "timeout %g s: expected a positive number of seconds", timeout_s);
  return RECAP_OK;
}

static recap_status new_comm(recap_device device, int world, int rank, double timeout_s,
                             recap_comm **out) {
  recap_comm *c = calloc(1, sizeof *c);
  if (!c) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a communicator");
  c->device = device;
  c->world = world;
  c->rank = rank;
  c->timeout_s = timeout_s;
  recap_status st = recap__comm_attach(c);
  if (st != RECAP_OK) {
    free(c);
    return st;
  }
  *out = c;
  return RECAP_OK;
}

static void free_comm(recap_comm *c, bool abort) {
  if (!c) return;
  recap__comm_detach(c);
  if (c->state) c->backend->destroy(c, abort);
  free(c);
}

recap_status recap_comm_init_rank(recap_device device, int world_size, int rank,
                                  const char *init_url, double timeout_s, recap_comm **out) {
  RECAP_CHECK_ARG(out);
  const recap__backend *be;
  RECAP_TRY(recap__device_backend(device, &be));
  RECAP_TRY(check_timeout(timeout_s));
  if (world_size < 1 || rank < 0 || rank >= world_size)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "rank %d of a world of %d (needs 0 <= rank < world)", rank, world_size);
  if (be->kind == RECAP_BACKEND_HOST && world_size > 1)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "the host backend runs a world of 1 only (it has one device and no NCCL); "
                      "a world of %d needs CUDA devices (--device cuda)",
                      world_size);
  if (world_size > 1 && (!init_url || !init_url[0]))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "a world of %d needs an init URL (file:///path, tcp://host:port or env://)",
                      world_size);
  /* env:// is read here, before anything is created, so a missing variable costs nothing. */
  recap__comm_env env;
  if (init_url && strcmp(init_url, "env://") == 0) {
    RECAP_TRY(recap__comm_env_resolve(world_size, rank, &env));
    init_url = env.url;
  }
  recap_comm *c = NULL;
  RECAP_TRY(new_comm(device, world_size, rank, timeout_s, &c));
  if (world_size == 1) {
    *out = c;
    return RECAP_OK;
  }
  const recap__comm_backend *be_world = world_backend();
  if (!be_world) {
    free_comm(c, true);
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "this build has no CUDA backend");
  }
  c->backend = be_world;
  recap_status st = be_world->load();
  uint8_t id[RECAP_RENDEZVOUS_MAX_PAYLOAD];
  size_t len = 0;
  if (st == RECAP_OK && rank == 0) st = be_world->unique_id(id, &len);
  if (st == RECAP_OK) st = recap__rendezvous(init_url, world_size, rank, timeout_s, id, &len, sizeof id);
  if (st == RECAP_OK) st = be_world->init(c, id, len);
  if (st != RECAP_OK) {
    free_comm(c, true);
    return st;
  }
  *out = c;
  return RECAP_OK;
}

recap_status recap_comm_init_devices(const recap_device *devices, int count, double timeout_s,
                                     recap_comm **comms) {
  RECAP_CHECK_ARG(devices && comms && count >= 1 && count <= RECAP__COMM_MAX_CUDA_DEVICES);
  RECAP_TRY(check_timeout(timeout_s));
  for (int i = 0; i < count; ++i) {
    const recap__backend *be;
    RECAP_TRY(recap__device_backend(devices[i], &be));
    if (devices[i].backend != devices[0].backend)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "devices of one clique share a backend");
    for (int j = 0; j < i; ++j)
      if (devices[j].index == devices[i].index)
        return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "device %d is listed twice",
                          devices[i].index);
  }
  if (devices[0].backend == RECAP_BACKEND_HOST && count > 1)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "the host backend has one device");
  recap_comm **made = calloc((size_t)count, sizeof *made);
  if (!made) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for communicators");
  recap_status st = RECAP_OK;
  for (int i = 0; i < count && st == RECAP_OK; ++i)
    st = new_comm(devices[i], count, i, timeout_s, &made[i]);
  const recap__comm_backend *be_world = world_backend();
  if (st == RECAP_OK && count > 1 && be_world) {
    for (int i = 0; i < count; ++i) made[i]->backend = be_world;
    st = be_world->init_clique(made, count);
  }
  if (st != RECAP_OK) {
    for (int i = 0; i < count; ++i) free_comm(made[i], true);
    free(made);
    return st;
  }
  memcpy(comms, made, (size_t)count * sizeof *made);
  free(made);
  return RECAP_OK;
}

recap_status recap_comm_destroy(recap_comm *comm) {
  free_comm(comm, false);
  return RECAP_OK;
}

recap_status recap_comm_abort(recap_comm *comm) {
  RECAP_CHECK_ARG(comm);
  if (comm->state) comm->backend->abort(comm);
  return RECAP_OK;
}

int recap_comm_rank(const recap_comm *comm) { return comm ? comm->rank : -1; }

int recap_comm_world_size(const recap_comm *comm) { return comm ? comm->world : 0; }

double recap_comm_timeout(const recap_comm *comm) { return comm ? comm->timeout_s : 0; }

recap_device recap_comm_device(const recap_comm *comm) {
  return comm ? comm->device : (recap_device){RECAP_BACKEND_HOST, -1};
}

recap_status recap_comm_check(recap_comm *comm) {
  RECAP_CHECK_ARG(comm);
  if (comm->state) return comm->backend->check(comm);
  return RECAP_OK;
}

recap_status recap_comm_synchronize(recap_comm *comm, recap_stream *stream) {
  RECAP_CHECK_ARG(comm && stream);
  if (comm->state) return comm->backend->synchronize(comm, stream);
  return recap_stream_synchronize(stream);
}

bool recap__comm_captures_events(const recap_comm *comm) {
  if (!comm || !comm->state) return false;
  const char *mixing = getenv("NCCL_GRAPH_MIXING_SUPPORT");
  return !mixing || strcmp(mixing, "0") != 0;
}

void recap__comm_busy_begin(recap_comm *comm) {
  if (comm && comm->state) comm->backend->busy_begin(comm);
}

void recap__comm_busy_end(recap_comm *comm) {
  if (comm && comm->state) comm->backend->busy_end(comm);
}

/* Bytes of c's buffers in a world of 1. */
recap_status recap__comm_run_local(recap_comm *comm, const recap__coll *c, recap_stream *stream) {
  if (comm && comm->world != 1)
    return RECAP_FAIL(RECAP_STATUS_INTERNAL, "a world of %d has no local path", comm->world);
  if (c->kind == RECAP__COLL_SEND || c->kind == RECAP__COLL_RECV)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "send/recv need a peer: the world is 1");
  if (c->root != 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "root %d outside a world of 1", c->root);
  size_t bytes = c->count * recap_dtype_size(c->dtype);
  if (bytes == 0 || c->send == c->recv) return RECAP_OK;
  return stream->backend->memcpy_async(c->recv, c->send, bytes, stream);
}

static recap_status run(recap_comm *comm, const recap__coll *c, recap_stream *stream) {
  RECAP_CHECK_ARG(comm && stream);
  recap_device sd = recap_stream_device(stream);
  if (sd.backend != comm->device.backend || sd.index != comm->device.index)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the stream belongs to %s:%d, the communicator (rank %d) to %s:%d",
                      recap_backend_name(sd.backend), sd.index, comm->rank,
                      recap_backend_name(comm->device.backend), comm->device.index);
  if (!recap_dtype_name(c->dtype))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "invalid dtype %d", (int)c->dtype);
  if (c->op < RECAP_REDUCE_SUM || c->op > RECAP_REDUCE_AVG)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "invalid reduce op %d", (int)c->op);
  if (c->count > 0 && (!c->recv || (!c->send && c->kind != RECAP__COLL_RECV &&
                                    c->kind != RECAP__COLL_BROADCAST)))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "a buffer is NULL");
  if (c->root < 0 || c->root >= comm->world)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "root/peer %d outside a world of %d",
                      c->root, comm->world);
  if (comm->state) return comm->backend->run(comm, c, recap_stream_native(stream));
  return recap__comm_run_local(comm, c, stream);
}

recap_status recap__comm_run(recap_comm *comm, const recap__coll *c, recap_stream *stream) {
  return run(comm, c, stream);
}

recap_status recap_comm_all_reduce(recap_comm *comm, const void *send, void *recv, size_t count,
                                   recap_dtype dtype, recap_reduce_op op, recap_stream *stream) {
  recap__coll c = {RECAP__COLL_ALL_REDUCE, send, recv, count, dtype, op, 0};
  return run(comm, &c, stream);
}

recap_status recap_comm_all_gather(recap_comm *comm, const void *send, void *recv, size_t count,
                                   recap_dtype dtype, recap_stream *stream) {
  recap__coll c = {RECAP__COLL_ALL_GATHER, send, recv, count, dtype, RECAP_REDUCE_SUM, 0};
  return run(comm, &c, stream);
}

recap_status recap_comm_reduce_scatter(recap_comm *comm, const void *send, void *recv,
                                       size_t count, recap_dtype dtype, recap_reduce_op op,
                                       recap_stream *stream) {
  recap__coll c = {RECAP__COLL_REDUCE_SCATTER, send, recv, count, dtype, op, 0};
  return run(comm, &c, stream);
}

recap_status recap_comm_broadcast(recap_comm *comm, const void *send, void *recv, size_t count,
                                  recap_dtype dtype, int root, recap_stream *stream) {
  recap__coll c = {RECAP__COLL_BROADCAST, send, recv, count, dtype, RECAP_REDUCE_SUM, root};
  return run(comm, &c, stream);
}

recap_status recap_comm_group_start(void) {
  const recap__comm_backend *be_world = world_backend();
  return be_world ? be_world->group_start() : RECAP_OK;
}

recap_status recap_comm_group_end(void) {
  const recap__comm_backend *be_world = world_backend();
  return be_world ? be_world->group_end() : RECAP_OK;
}
