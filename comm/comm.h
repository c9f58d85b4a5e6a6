/*
 * comm.h: communicators, rendezvous and the NCCL bridge (internal to recap).
 *
 * The public side is include/recap.h ("Communicators"). Layers:
 *
 *   comm_rendezvous.c  file:// and tcp:// rendezvous: rank 0 hands a small opaque payload
 *                      (the NCCL unique id) to every other rank, with bounded, validated
 *                      messages and a deadline on every wait. Plain POSIX: tested in CI.
 *   env_init.c         env://: the rendezvous address, rank and world that torchrun-style
 *                      launchers put in the environment (RANK, WORLD_SIZE, MASTER_ADDR...).
 *   comm_registry.c    the per-device registry that collective ops read (below comm.c and
 *                      cuda_comm.c, which both use it).
 *   comm.c             the recap_comm object, the world-of-1 implementation (copies) used
 *                      by the host backend and by CUDA devices without a communicator, and
 *                      the public frontends.
 *   comm_backend.h     the table of functions through which comm.c runs a larger world.
 *   multi_device.c     torch.cuda.comm's functions over a clique of in-process communicators.
 *   cuda_comm.c        NCCL behind that table, loaded with dlopen (recap never links it):
 *                      init with a deadline (non-blocking communicators), collectives on a
 *                      stream, and a watchdog thread that aborts a communicator whose peer
 *                      stopped answering.
 *   peer_buffers.c     the one-shot all_reduce's buffers that every rank writes into
 *                      (peer_buffers.h), and peer access between GPUs of one process.
 *
 *   uint8_t id[128]; size_t len = sizeof id;            // rank 0 fills id and len first
 *   RECAP_TRY(recap__rendezvous("file:///tmp/x/rv", 2, rank, 30.0, id, &len, sizeof id));
 *
 * Failure: every function returns a status with a message naming the URL, the rank and what
 * was wrong (a malformed message, a world-size mismatch, the deadline); nothing hangs past the
 * deadline and nothing is left open.
 */
#ifndef RECAP_COMM_H
#define RECAP_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- rendezvous (comm_rendezvous.c) ---- */

/* The most payload bytes a rendezvous carries (an NCCL unique id is 128). */
enum { RECAP_RENDEZVOUS_MAX_PAYLOAD = 512 };

/* Exchanges `payload` from rank 0 to every rank of a world of `world` (2 .. 65536).
 * url: "file:///abs/path[?generation=N]" or "tcp://host:port[?generation=N]"; ranks whose
 * generation differs never pair (a stale file of an earlier run is ignored).
 * Rank 0: payload[0..*len) is sent; it returns once every other rank has it (tcp) or once the
 * file is in place (file). Other ranks: up to `capacity` bytes are received into payload and
 * *len set. RECAP_STATUS_TIMEOUT when the deadline passes, RECAP_STATUS_IO_ERROR for a
 * malformed or oversized message (its content is never trusted past the validation),
 * RECAP_STATUS_INVALID_ARGUMENT for a bad URL or a world/rank mismatch. */
recap_status recap__rendezvous(const char *url, int world, int rank, double timeout_s,
                               void *payload, size_t *len, size_t capacity);

/* The wire format, shared with the tests that forge bad messages. All integers are
 * little-endian. A file holds one RECAP__RV_FILE record; tcp: the client sends a hello, the
 * server answers with a reply. Every record ends with a FNV-1a 32-bit checksum of what
 * precedes it. */
#define RECAP__RV_MAGIC "RCPRDV01"
enum {
  RECAP__RV_HEADER_BYTES = 8 + 4 + 4 + 8 + 4, /* magic, kind, world, generation, payload len */
  RECAP__RV_KIND_FILE = 1,
  RECAP__RV_KIND_HELLO = 2, /* payload: the client's rank (4 bytes) */
  RECAP__RV_KIND_REPLY = 3,
};
/* Encodes a record into buf (capacity bytes); returns its size, 0 if it does not fit. */
size_t recap__rv_encode(uint32_t kind, uint32_t world, uint64_t generation, const void *payload,
                        uint32_t len, uint8_t *buf, size_t capacity);
/* Validates a record of exactly `size` bytes: magic, kind, world, generation, length bound and
 * checksum; on success points *payload into buf and sets *len. Fails with IO_ERROR naming the
 * defect (or INVALID_ARGUMENT for a world mismatch, TIMEOUT-free: pure). */
recap_status recap__rv_decode(const uint8_t *buf, size_t size, uint32_t kind, uint32_t world,
                              uint64_t generation, const uint8_t **payload, uint32_t *len);

/* ---- env:// (env_init.c) ---- */

/* A variable's value (NULL when unset); ctx is the lookup's own. getenv in the library, a
 * table in the tests. */
typedef const char *(*recap__env_lookup)(const char *name, void *ctx);

typedef struct {
  int world_size, rank;
  int local_rank; /* -1 when LOCAL_RANK is unset */
  char url[320];  /* "tcp://MASTER_ADDR:port"; "" for a world of 1 (no rendezvous) */
} recap__comm_env;

/* Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and the port (RECAP_MASTER_PORT when set or
 * under torchrun, where it is required; else MASTER_PORT) through `env`.
 * RECAP_STATUS_INVALID_ARGUMENT naming the variable that is missing or malformed. */
recap_status recap__comm_env_parse(recap__env_lookup env, void *ctx, recap__comm_env *out);
/* The same from the process environment, which must agree with world_size and rank (else
 * INVALID_ARGUMENT naming both). */
recap_status recap__comm_env_resolve(int world_size, int rank, recap__comm_env *out);

/* ---- communicators (comm.c) ---- */

typedef enum {
  RECAP__COLL_ALL_REDUCE,
  RECAP__COLL_ALL_GATHER,
  RECAP__COLL_REDUCE_SCATTER,
  RECAP__COLL_BROADCAST,
  RECAP__COLL_REDUCE,
  RECAP__COLL_SEND,
  RECAP__COLL_RECV,
} recap__coll_kind;

/* One collective as the ops and the frontends describe it. count: elements of `recv` for
 * all_reduce, broadcast and reduce, of `send` for all_gather, of `recv` for reduce_scatter,
 * of the message for send/recv. root: broadcast/reduce root, or the peer of send/recv. */
typedef struct {
  recap__coll_kind kind;
  const void *send;
  void *recv;
  size_t count;
  recap_dtype dtype;
  recap_reduce_op op;
  int root;
} recap__coll;

typedef struct recap__comm_backend recap__comm_backend; /* comm/backend.h */

struct recap_comm {
  recap_device device;
  int rank, world;
  double timeout_s;
  /* The backend that runs a world larger than 1 (NCCL) and its state; state is NULL for a
   * world of 1 and on the host backend, where comm.c runs the local path itself. */
  const recap__comm_backend *backend;
  void *state;
};

/* ---- the per-device registry (comm_registry.c) ---- */

/* The CUDA device indices a communicator can be attached to (0 .. this - 1), which also bounds
 * the size of an in-process clique. */
enum { RECAP__COMM_MAX_CUDA_DEVICES = 256 };

/* The communicator attached to a device (NULL when none: a world of 1). */
recap_comm *recap__comm_for_device(recap_device device);
/* Attaches comm to comm->device: INVALID_ARGUMENT for a device that cannot hold one, BUSY when
 * the device has one already. */
recap_status recap__comm_attach(recap_comm *comm);
/* Detaches comm from its device, if it is the one attached there. */
void recap__comm_detach(recap_comm *comm);

/* ---- communicators (comm.c) ---- */

/* Checks c against comm and the stream (same device) and runs it: NCCL, or the local path. */
recap_status recap__comm_run(recap_comm *comm, const recap__coll *c, recap_stream *stream);
/* Runs c on a communicator of the host backend or of world 1 (copies on `stream`). */
recap_status recap__comm_run_local(recap_comm *comm, const recap__coll *c, recap_stream *stream);

#if RECAP_WITH_CUDA
/* ---- CUDA builds only (cuda_comm.c; NCCL itself is behind comm_backend.h) ---- */

/* The device index of a cudaStream_t. */
recap_status recap__cuda_stream_device(void *native_stream, int *device);
/* A collective op's CUDA launch: the stream's device's communicator, or a world of 1. */
recap_status recap__comm_launch_native(const recap__coll *c, int world_attr,
                                       void *native_stream);
/* Lets `device` access `peer`'s memory (already enabled is fine; NOT_SUPPORTED when the GPUs
 * cannot): peer_buffers.c. */
recap_status recap__cuda_enable_peer_access(int device, int peer);
/* The peer buffers of the communicator of the stream's device (comm/peer_buffers.h), NULL
 * when it has none (a world of 1, RECAP_ONESHOT_ALLREDUCE=0, GPUs that cannot map each
 * other's memory) or it aborted. */
const struct recap__peer_view *recap__comm_peer_view(void *native_stream);
#endif

/* Whether NCCL puts event record and wait nodes into the collectives a graph captures: its
 * NCCL_GRAPH_MIXING_SUPPORT, on unless the environment sets it to 0 (NCCL reads it once, when
 * the first communicator is made). A WHILE node's body cannot hold event nodes. False for a
 * world of 1 and on the host backend. */
bool recap__comm_captures_events(const recap_comm *comm);

/* Whether a watchdog-bounded stretch is active is the backend's business (busy_begin/end);
 * these wrap it for the engine (no-ops on a world of 1 and on the host backend). */
void recap__comm_busy_begin(recap_comm *comm);
void recap__comm_busy_end(recap_comm *comm);

#ifdef __cplusplus
}
#endif

#endif
