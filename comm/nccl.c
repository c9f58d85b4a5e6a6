/*
 * cuda_comm.c: NCCL behind recap_comm, CUDA builds only: the communicator backend
 * recap__nccl_comm_backend (comm/backend.h), which comm.c calls through, and the
 * collective ops' native launch (recap__comm_launch_native). Nothing here calls comm.c: the
 * launch finds its communicator in the registry (comm_registry.c).
 *
 * Loading: libnccl.so.2 is opened with dlopen on first use, never linked, so recap starts on
 * machines without it; its absence is a NOT_SUPPORTED error naming the library. The types and
 * signatures come from the toolkit's nccl.h (2.28 here); __typeof__ of each declaration keeps
 * the function pointers exact. Before the first NCCL call NCCL_NVLS_ENABLE is set to 0 (and a
 * value other than 0 is refused): NVLink multicast objects can take a shared host's GPUs out
 * of service.
 *
 * Deadlines: communicators are non-blocking (config.blocking = 0), so init and any call that
 * answers ncclInProgress are polled with ncclCommGetAsyncError against the timeout instead of
 * blocking inside NCCL; a timeout aborts the communicator. A watchdog thread per communicator
 * (PyTorch's NCCL watchdog, in small) polls for asynchronous errors and aborts a communicator
 * whose busy stretch (nccl_busy_begin/end: a distributed run, a synchronize) outlasts
 * the timeout: the aborted NCCL kernels then return, so a stream synchronize inside the engine
 * (warmup, capture) unblocks too, and the caller reports why. One recursive lock serializes
 * every NCCL call of this process; polling and waiting happen outside it. ncclCommAbort runs
 * outside it too, on the watchdog thread (it can take many seconds with a dead peer), while
 * a flag set under the lock keeps every other call off the aborted communicator and a count
 * holds back calls on the others until it returns (abort_with, wait_for_aborts).
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/backend.h"
#include "comm/comm.h"
#include "comm/backend.h"
#include "comm/peer_buffers.h"
#include "comm/poll.h"
#include "runtime/cuda_check.h"
#include "runtime/env.h"
#include "runtime/error.h"

_Static_assert(sizeof(ncclUniqueId) <= RECAP_RENDEZVOUS_MAX_PAYLOAD,
               "the NCCL unique id must fit a rendezvous payload");

/* ---- the library ---- */

static struct {
  void *lib;
  int version;
  __typeof__(&ncclGetVersion) GetVersion;
  __typeof__(&ncclGetUniqueId) GetUniqueId;
  __typeof__(&ncclCommInitRankConfig) CommInitRankConfig;
  __typeof__(&ncclCommFinalize) CommFinalize;
  __typeof__(&ncclCommDestroy) CommDestroy;
  __typeof__(&ncclCommAbort) CommAbort;
  __typeof__(&ncclCommGetAsyncError) CommGetAsyncError;
  __typeof__(&ncclGetErrorString) GetErrorString;
  __typeof__(&ncclGetLastError) GetLastError;
  __typeof__(&ncclAllReduce) AllReduce;
  __typeof__(&ncclAllGather) AllGather;
  __typeof__(&ncclReduceScatter) ReduceScatter;
  __typeof__(&ncclBroadcast) Broadcast;
  __typeof__(&ncclReduce) Reduce;
  __typeof__(&ncclSend) Send;
  __typeof__(&ncclRecv) Recv;
  __typeof__(&ncclGroupStart) GroupStart;
  __typeof__(&ncclGroupEnd) GroupEnd;
} nccl;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static recap_status load_status;
static char load_error[512];
static pthread_mutex_t nccl_lock;

static void *sym(const char *name, bool *ok) {
  void *p = dlsym(nccl.lib, name);
  if (!p && *ok) {
    snprintf(load_error, sizeof load_error, "libnccl.so.2 lacks %s (NCCL too old?)", name);
    *ok = false;
  }
  return p;
}

static void load(void) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
  pthread_mutex_init(&nccl_lock, &attr);
  pthread_mutexattr_destroy(&attr);
  load_status = RECAP_STATUS_NOT_SUPPORTED;
  const char *nvls = getenv("NCCL_NVLS_ENABLE");
  if (nvls && strcmp(nvls, "0") != 0) {
    snprintf(load_error, sizeof load_error,
             "NCCL_NVLS_ENABLE=%s: recap keeps NVLink multicast off (it can take a shared host's "
             "GPUs out of service); unset it or set it to 0",
             nvls);
    return;
  }
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  nccl.lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!nccl.lib) {
    snprintf(load_error, sizeof load_error,
             "NCCL is not available: dlopen(libnccl.so.2) failed: %s (install NCCL 2.x or add "
             "its folder to LD_LIBRARY_PATH)",
             dlerror());
    return;
  }
  bool ok = true;
#define LOAD(field) *(void **)&nccl.field = sym("nccl" #field, &ok)
  LOAD(GetVersion);
  LOAD(GetUniqueId);
  LOAD(CommInitRankConfig);
  LOAD(CommFinalize);
  LOAD(CommDestroy);
  LOAD(CommAbort);
  LOAD(CommGetAsyncError);
  LOAD(GetErrorString);
  LOAD(GetLastError);
  LOAD(AllReduce);
  LOAD(AllGather);
  LOAD(ReduceScatter);
  LOAD(Broadcast);
  LOAD(Reduce);
  LOAD(Send);
  LOAD(Recv);
  LOAD(GroupStart);
  LOAD(GroupEnd);
#undef LOAD
  if (!ok) return;
  if (nccl.GetVersion(&nccl.version) != ncclSuccess || nccl.version < 21900) {
    snprintf(load_error, sizeof load_error,
             "libnccl.so.2 is version %d; recap needs NCCL 2.19 or newer (non-blocking "
             "communicators)",
             nccl.version);
    return;
  }
  load_status = RECAP_OK;
}

static recap_status nccl_load(void) {
  pthread_once(&load_once, load);
  if (load_status != RECAP_OK) return RECAP_FAIL(load_status, "%s", load_error);
  return RECAP_OK;
}

static recap_status nccl_fail(ncclResult_t r, ncclComm_t comm, const char *what) {
  const char *last = nccl.GetLastError ? nccl.GetLastError(comm) : "";
  return RECAP_FAIL(r == ncclSystemError || r == ncclRemoteError ? RECAP_STATUS_LIBRARY_ERROR
                    : r == ncclInvalidArgument || r == ncclInvalidUsage
                        ? RECAP_STATUS_INVALID_ARGUMENT
                        : RECAP_STATUS_LIBRARY_ERROR,
                    "%s failed: %s%s%s", what, nccl.GetErrorString(r), last && last[0] ? ": " : "",
                    last ? last : "");
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* ---- communicator state ---- */

typedef struct {
  ncclComm_t comm;
  /* Copies of the owner's fields: a watchdog left behind by nccl_destroy (an abort
   * that outlasted the timeout) outlives the recap_comm. */
  int rank, world, device;
  double timeout_s;
  pthread_t watchdog;
  bool has_watchdog;
  atomic_bool stop;
  atomic_int busy;          /* nested busy stretches */
  _Atomic double busy_since; /* when the outermost began */
  atomic_bool aborted;
  atomic_bool watchdog_exited;
  atomic_bool abort_issued; /* ncclCommAbort was called (issue_abort) */
  recap_status failure;     /* why it was aborted (set before `aborted`) */
  char reason[512];
  /* The one-shot all_reduce's buffers (peer_buffers.h); NULL when some rank has none. */
  recap__peer_buffers *peers;
} nccl_state;

static nccl_state *state_of(recap_comm *c) { return (nccl_state *)c->state; }

/* ncclCommAbort calls under way in this process. They run outside nccl_lock (abort_with says
 * why), and NCCL forbids operations on independent communicators of one device in parallel:
 * so inits, collectives and groups wait for them (wait_for_aborts). Raised under the lock,
 * lowered without it. */
static atomic_int aborts_running;

/* How long a group start waits for aborts (it cannot know its communicators' timeouts). */
enum { GROUP_ABORT_WAIT_S = 60 };

/* Called with nccl_lock held (returns with it held): waits until no ncclCommAbort runs, at
 * most timeout_s. A recursive holder (inside a group) never waits: no abort can start while
 * it holds the lock, and none ran when the group began. */
static recap_status wait_for_aborts(double timeout_s) {
  double deadline = now_s() + timeout_s;
  while (atomic_load(&aborts_running) > 0) {
    if (now_s() > deadline)
      return RECAP_FAIL(RECAP_STATUS_TIMEOUT,
                        "another communicator's ncclCommAbort has run for more than %.1f s "
                        "(NCCL calls wait for it: NCCL forbids them in parallel with it)",
                        timeout_s);
    pthread_mutex_unlock(&nccl_lock);
    sleep_us(1000);
    pthread_mutex_lock(&nccl_lock);
  }
  return RECAP_OK;
}

/* Set on each watchdog thread, so that abort_with knows where it runs. */
static _Thread_local bool on_watchdog_thread;

/* Calls ncclCommAbort, once. */
static void issue_abort(nccl_state *s) {
  if (atomic_exchange(&s->abort_issued, true)) return;
  pthread_mutex_lock(&nccl_lock);
  atomic_fetch_add(&aborts_running, 1);
  pthread_mutex_unlock(&nccl_lock);
  double t0 = now_s();
  nccl.CommAbort(s->comm);
  atomic_fetch_sub(&aborts_running, 1);
  double took = now_s() - t0;
  if (took > 1.0)
    fprintf(stderr, "recap: rank %d of %d: ncclCommAbort took %.1f s\n", s->rank,
            s->world, took);
}

/* Aborts once, recording why. The state turns `aborted` under the lock, so no NCCL call on
 * this communicator is under way or starts afterwards (each checks the flag under the lock).
 * ncclCommAbort itself runs on the watchdog thread where there is one: with a dead peer whose
 * connections were up it can take very long (measured on two H200s: over 20 s, tearing down
 * the connections to the dead rank), and the failing thread must return its error at once so
 * that its caller can report it and end. The aborted kernels return when it is done. */
static void abort_with(nccl_state *s, recap_status why, const char *reason) {
  pthread_mutex_lock(&nccl_lock);
  bool first = !atomic_load(&s->aborted);
  if (first) {
    s->failure = why;
    snprintf(s->reason, sizeof s->reason, "%s", reason);
    atomic_store(&s->aborted, true);
  }
  pthread_mutex_unlock(&nccl_lock);
  if (!first) return;
  /* One-shot all_reduces waiting for a peer's words return. */
  recap__peer_buffers_abort(s->peers);
  fprintf(stderr, "recap: rank %d of %d: aborting the NCCL communicator: %s\n", s->rank,
          s->world, reason);
  if (!s->has_watchdog || on_watchdog_thread || atomic_load(&s->watchdog_exited)) issue_abort(s);
}

static recap_status aborted_status(nccl_state *s) {
  return RECAP_FAIL(s->failure ? s->failure : RECAP_STATUS_LIBRARY_ERROR,
                    "rank %d of %d: communicator aborted: %s", s->rank, s->world,
                    s->reason);
}

/* Polls the communicator's async state: RECAP_OK (idle), NOT_READY (in progress), or an
 * error (the communicator is aborted). */
static recap_status poll_async(nccl_state *s) {
  /* Under the lock: an abort on another thread frees the NCCL communicator. */
  pthread_mutex_lock(&nccl_lock);
  if (atomic_load(&s->aborted)) {
    pthread_mutex_unlock(&nccl_lock);
    return aborted_status(s);
  }
  ncclResult_t r = ncclSuccess;
  ncclResult_t q = nccl.CommGetAsyncError(s->comm, &r);
  pthread_mutex_unlock(&nccl_lock);
  if (q != ncclSuccess) r = q;
  if (r == ncclSuccess) return RECAP_OK;
  if (r == ncclInProgress) return RECAP_STATUS_NOT_READY;
  char reason[512];
  const char *last = nccl.GetLastError(s->comm);
  snprintf(reason, sizeof reason, "NCCL reported %s%s%s (a peer rank may have failed)",
           nccl.GetErrorString(r), last && last[0] ? ": " : "", last ? last : "");
  abort_with(s, RECAP_STATUS_LIBRARY_ERROR, reason);
  return aborted_status(s);
}

/* The pause before the next poll of a wait that began at `since` (now_s()): none at first,
 * since an enqueue that answered ncclInProgress usually completes within microseconds (a fixed
 * 1 ms sleep here cost every distributed run a millisecond: the header broadcast's group end
 * answers ncclInProgress each time) and a decode step within milliseconds, then a backoff for
 * waits on a slow peer (poll.h). */
static void poll_backoff(double since) {
  long us = recap__poll_pause_us((now_s() - since) * 1e6);
  if (us > 0) sleep_us(us);
}

/* Aborts s because `what` outlasted its timeout, and says so. */
static recap_status abort_timed_out(nccl_state *s, const char *what) {
  char reason[512];
  snprintf(reason, sizeof reason, "%s did not complete within %.1f s (are all %d ranks running?)",
           what, s->timeout_s, s->world);
  abort_with(s, RECAP_STATUS_TIMEOUT, reason);
  return aborted_status(s);
}

/* Waits until the communicator leaves ncclInProgress, at most its timeout. */
static recap_status wait_ready(nccl_state *s, const char *what) {
  double since = now_s(), deadline = since + s->timeout_s;
  for (;;) {
    recap_status st = poll_async(s);
    if (st != RECAP_STATUS_NOT_READY) return st;
    if (now_s() > deadline) return abort_timed_out(s, what);
    poll_backoff(since);
  }
}

static void *watchdog_main(void *arg) {
  nccl_state *s = arg;
  on_watchdog_thread = true;
  /* NCCL's calls from this thread (the async-error poll, the abort) save and restore the
   * current device: with the communicator's own current, no context is made on device 0. */
  if (cudaSetDevice(s->device) != cudaSuccess) (void)cudaGetLastError();
  while (!atomic_load(&s->stop) && !atomic_load(&s->aborted)) {
    sleep_us(10000);
    if (atomic_load(&s->stop)) break;
    /* Errors are recorded (and the communicator aborted) by poll_async itself. */
    if (poll_async(s) != RECAP_OK && atomic_load(&s->aborted)) break;
    if (atomic_load(&s->busy) > 0 && now_s() - atomic_load(&s->busy_since) > s->timeout_s) {
      char reason[512];
      snprintf(reason, sizeof reason,
               "collectives made no progress for %.1f s: a peer rank died or stopped issuing "
               "the same collectives (a mismatch would hang NCCL)",
               s->timeout_s);
      abort_with(s, RECAP_STATUS_TIMEOUT, reason);
    }
  }
  /* An abort asked for on another thread is carried out here (abort_with). */
  if (atomic_load(&s->aborted)) issue_abort(s);
  atomic_store(&s->watchdog_exited, true);
  return NULL;
}

static recap_status new_state(recap_comm *c) {
  nccl_state *s = calloc(1, sizeof *s);
  if (!s) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for an NCCL communicator");
  s->rank = c->rank;
  s->world = c->world;
  s->device = c->device.index;
  s->timeout_s = c->timeout_s;
  atomic_init(&s->stop, false);
  atomic_init(&s->busy, 0);
  atomic_init(&s->busy_since, 0.0);
  atomic_init(&s->aborted, false);
  atomic_init(&s->watchdog_exited, false);
  atomic_init(&s->abort_issued, false);
  c->state = s;
  return RECAP_OK;
}

static ncclConfig_t nonblocking_config(void) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

/* ---- the one-shot all_reduce's peer buffers (peer_buffers.h) ---- */

/* Whether a communicator of `world` ranks gets peer buffers (RECAP_ONESHOT_ALLREDUCE). */
static bool wants_peer_buffers(int world) {
  return world >= 2 && world <= RECAP__PEER_MAX_WORLD &&
         recap__env_bool("RECAP_ONESHOT_ALLREDUCE", 1) == 1;
}

/* Waits for `stream` at most the communicator's timeout. */
static recap_status wait_stream(nccl_state *s, cudaStream_t stream, const char *what) {
  double since = now_s(), deadline = since + s->timeout_s;
  for (;;) {
    cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return RECAP_OK;
    if (e != cudaErrorNotReady)
      return recap__cuda_fail_at(e, "cudaStreamQuery(stream)", __FILE__, __LINE__, __func__);
    recap_status st = poll_async(s);
    if (st != RECAP_OK && st != RECAP_STATUS_NOT_READY) return st;
    if (now_s() > deadline) return abort_timed_out(s, what);
    poll_backoff(since);
  }
}

static recap_status nccl_run(recap_comm *c, const recap__coll *k, void *native_stream);

/* Every rank's `bytes` (a multiple of 4) at `mine`, in rank order, into all (world x bytes): an
 * all_gather over the communicator, waited for. */
static recap_status gather_bytes(recap_comm *c, const void *mine, void *all, size_t bytes) {
  nccl_state *s = state_of(c);
  int previous = 0;
  RECAP_CUDA_TRY(cudaGetDevice(&previous));
  RECAP_CUDA_TRY(cudaSetDevice(s->device));
  recap_status st = RECAP_OK;
  cudaStream_t stream = NULL;
  uint8_t *dev = NULL;
  const size_t total = bytes * (size_t)s->world;
  RECAP_CUDA_TRY_GOTO(st, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), done);
  RECAP_CUDA_TRY_GOTO(st, cudaMalloc((void **)&dev, total + bytes), done);
  /* On the exchange's own stream: a cudaMemcpy would run on the legacy default stream, which
   * this non-blocking one does not wait for, and from pageable memory it may return before its
   * DMA lands. */
  RECAP_CUDA_TRY_GOTO(
      st, cudaMemcpyAsync(dev + total, mine, bytes, cudaMemcpyHostToDevice, stream), done);
  const recap__coll gather = {RECAP__COLL_ALL_GATHER, dev + total, dev, bytes / 4,
                              RECAP_DTYPE_I32, RECAP_REDUCE_SUM, 0};
  st = nccl_run(c, &gather, stream);
  if (st != RECAP_OK) goto done;
  st = wait_stream(s, stream, "the exchange of peer buffer handles");
  if (st != RECAP_OK) goto done;
  RECAP_CUDA_TRY_GOTO(st, cudaMemcpy(all, dev, total, cudaMemcpyDeviceToHost), done);
done:
  if (dev && cudaFree(dev) != cudaSuccess) (void)cudaGetLastError();
  if (stream && cudaStreamDestroy(stream) != cudaSuccess) (void)cudaGetLastError();
  if (cudaSetDevice(previous) != cudaSuccess) (void)cudaGetLastError();
  return st;
}

/* Says once per communicator why it runs every all_reduce through NCCL. */
static void note_no_peer_buffers(int rank, int world, const char *why) {
  fprintf(stderr, "recap: rank %d of %d: all_reduce runs through NCCL only (no one-shot "
          "kernel): %s\n", rank, world, why);
}

/* One rank's entry of the handle exchange (whole 4-byte words, as gather_bytes moves them). */
typedef struct {
  int32_t ok;
  uint8_t handle[RECAP__PEER_HANDLE_BYTES];
} peer_entry;
_Static_assert(sizeof(peer_entry) % 4 == 0, "gather_bytes moves 4-byte words");

/* Gives c peer buffers when every rank can map every other rank's, and none on every rank
 * otherwise: the ranks must agree, or their all_reduces would not pair. Only a failure of the
 * exchange itself (a peer that does not join it) is an error. */
static recap_status setup_peers_ipc(recap_comm *c) {
  nccl_state *s = state_of(c);
  if (!wants_peer_buffers(c->world)) return RECAP_OK;
  char why[512] = "";
  peer_entry mine = {0}, all[RECAP__PEER_MAX_WORLD];
  recap__peer_buffers *b = NULL;
  if (recap__peer_buffers_create(c->device.index, c->rank, c->world, &b) == RECAP_OK &&
      recap__peer_buffers_handle(b, mine.handle) == RECAP_OK)
    mine.ok = 1;
  else
    snprintf(why, sizeof why, "%s", recap_last_error());
  recap_status st = gather_bytes(c, &mine, all, sizeof mine);
  int32_t opened = st == RECAP_OK && mine.ok, every[RECAP__PEER_MAX_WORLD];
  for (int p = 0; p < c->world && opened; ++p) {
    if (p == c->rank) continue;
    if (!all[p].ok) {
      snprintf(why, sizeof why, "rank %d has no peer buffers", p);
      opened = 0;
    } else if (recap__peer_buffers_open(b, p, all[p].handle) != RECAP_OK) {
      snprintf(why, sizeof why, "%s", recap_last_error());
      opened = 0;
    }
  }
  if (st == RECAP_OK) st = gather_bytes(c, &opened, every, sizeof opened);
  bool agreed = st == RECAP_OK;
  for (int p = 0; p < c->world && agreed; ++p) agreed = every[p] != 0;
  if (agreed) {
    s->peers = b;
    return RECAP_OK;
  }
  recap__peer_buffers_destroy(b);
  if (st == RECAP_OK) note_no_peer_buffers(c->rank, c->world, why[0] ? why : "another rank "
                                           "could not map the buffers");
  return st;
}

/* The same for an in-process clique (comms[i] is rank i), with peer access. */
static void setup_peers_clique(recap_comm *const *comms, int count) {
  if (!wants_peer_buffers(count)) return;
  recap__peer_buffers *b[RECAP__PEER_MAX_WORLD] = {NULL};
  recap_status st = RECAP_OK;
  for (int i = 0; i < count && st == RECAP_OK; ++i)
    st = recap__peer_buffers_create(comms[i]->device.index, i, count, &b[i]);
  if (st == RECAP_OK) st = recap__peer_buffers_link(b, count);
  if (st != RECAP_OK) {
    note_no_peer_buffers(0, count, recap_last_error());
    for (int i = 0; i < count; ++i) recap__peer_buffers_destroy(b[i]);
    return;
  }
  for (int i = 0; i < count; ++i) state_of(comms[i])->peers = b[i];
}

static recap_status nccl_unique_id(void *id, size_t *len) {
  RECAP_TRY(nccl_load());
  ncclUniqueId u;
  pthread_mutex_lock(&nccl_lock);
  ncclResult_t r = nccl.GetUniqueId(&u);
  pthread_mutex_unlock(&nccl_lock);
  if (r != ncclSuccess) return nccl_fail(r, NULL, "ncclGetUniqueId");
  memcpy(id, &u, sizeof u);
  *len = sizeof u;
  return RECAP_OK;
}

static recap_status nccl_init(recap_comm *c, const void *id, size_t len) {
  RECAP_TRY(nccl_load());
  if (len != sizeof(ncclUniqueId))
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "the NCCL id from rank 0 has %zu bytes, expected %zu",
                      len, sizeof(ncclUniqueId));
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  RECAP_TRY(new_state(c));
  nccl_state *s = state_of(c);
  int previous = 0;
  RECAP_CUDA_TRY(cudaGetDevice(&previous));
  RECAP_CUDA_TRY(cudaSetDevice(c->device.index));
  ncclConfig_t config = nonblocking_config();
  pthread_mutex_lock(&nccl_lock);
  recap_status gate = wait_for_aborts(c->timeout_s);
  ncclResult_t r =
      gate == RECAP_OK ? nccl.CommInitRankConfig(&s->comm, c->world, u, c->rank, &config) : ncclSuccess;
  pthread_mutex_unlock(&nccl_lock);
  if (gate != RECAP_OK) {
    if (cudaSetDevice(previous) != cudaSuccess) (void)cudaGetLastError();
    free(s);
    c->state = NULL;
    return gate;
  }
  if (cudaSetDevice(previous) != cudaSuccess) (void)cudaGetLastError();
  if (r != ncclSuccess && r != ncclInProgress) {
    recap_status st = nccl_fail(r, s->comm, "ncclCommInitRankConfig");
    if (s->comm) nccl.CommAbort(s->comm);
    free(s);
    c->state = NULL;
    return st;
  }
  char what[128];
  snprintf(what, sizeof what, "NCCL init of rank %d", c->rank);
  RECAP_TRY(wait_ready(s, what));
  /* Set first: the thread reads it (abort_with). */
  s->has_watchdog = true;
  if (pthread_create(&s->watchdog, NULL, watchdog_main, s) != 0) {
    s->has_watchdog = false;
    return RECAP_FAIL(RECAP_STATUS_INTERNAL, "cannot start the NCCL watchdog thread");
  }
  return setup_peers_ipc(c);
}

static recap_status nccl_init_clique(recap_comm *const *comms, int count) {
  RECAP_TRY(nccl_load());
  ncclUniqueId u;
  size_t len;
  RECAP_TRY(nccl_unique_id(&u, &len));
  for (int i = 0; i < count; ++i) RECAP_TRY(new_state(comms[i]));
  int previous = 0;
  RECAP_CUDA_TRY(cudaGetDevice(&previous));
  ncclConfig_t config = nonblocking_config();
  pthread_mutex_lock(&nccl_lock);
  recap_status st = wait_for_aborts(comms[0]->timeout_s);
  if (st != RECAP_OK) {
    pthread_mutex_unlock(&nccl_lock);
    return st;
  }
  ncclResult_t r = nccl.GroupStart();
  for (int i = 0; i < count && (r == ncclSuccess || r == ncclInProgress); ++i) {
    if (cudaSetDevice(comms[i]->device.index) != cudaSuccess) {
      (void)cudaGetLastError();
      r = ncclInvalidUsage;
      break;
    }
    r = nccl.CommInitRankConfig(&state_of(comms[i])->comm, count, u, i, &config);
  }
  ncclResult_t e = nccl.GroupEnd();
  pthread_mutex_unlock(&nccl_lock);
  if (cudaSetDevice(previous) != cudaSuccess) (void)cudaGetLastError();
  if (r == ncclSuccess || r == ncclInProgress) r = e;
  if (r != ncclSuccess && r != ncclInProgress) st = nccl_fail(r, NULL, "ncclCommInitRankConfig (clique)");
  for (int i = 0; i < count && st == RECAP_OK; ++i)
    st = wait_ready(state_of(comms[i]), "NCCL init of an in-process clique");
  if (st == RECAP_OK) setup_peers_clique(comms, count);
  return st;
}

static void nccl_destroy(recap_comm *c, bool abort) {
  nccl_state *s = state_of(c);
  if (!s) return;
  atomic_store(&s->stop, true);
  if (s->has_watchdog) {
    /* The watchdog may be inside an ncclCommAbort that a dead peer holds up: wait for it at
     * most the communicator's timeout, then leave the thread and this state to the process's
     * exit rather than hang the caller. */
    double deadline = now_s() + c->timeout_s;
    while (!atomic_load(&s->watchdog_exited) && now_s() < deadline) sleep_us(1000);
    if (!atomic_load(&s->watchdog_exited)) {
      fprintf(stderr,
              "recap: rank %d of %d: the NCCL watchdog did not stop within %.1f s "
              "(ncclCommAbort has not returned); leaving it to the process's exit\n",
              c->rank, c->world, c->timeout_s);
      pthread_detach(s->watchdog);
      c->state = NULL;
      return;
    }
    pthread_join(s->watchdog, NULL);
  }
  /* An abort recorded while the watchdog was already on its way out. */
  if (s->comm && atomic_load(&s->aborted)) issue_abort(s);
  if (s->comm && !atomic_load(&s->aborted)) {
    bool clean = false;
    if (!abort) {
      /* Finalize flushes outstanding work; a peer that is gone makes it time out. */
      pthread_mutex_lock(&nccl_lock);
      ncclResult_t r = nccl.CommFinalize(s->comm);
      pthread_mutex_unlock(&nccl_lock);
      clean = (r == ncclSuccess || r == ncclInProgress) && wait_ready(s, "ncclCommFinalize") == RECAP_OK;
    }
    if (clean) {
      pthread_mutex_lock(&nccl_lock);
      nccl.CommDestroy(s->comm);
      pthread_mutex_unlock(&nccl_lock);
    } else {
      issue_abort(s);
    }
  }
  recap__peer_buffers_destroy(s->peers);
  free(s);
  c->state = NULL;
}

static void nccl_abort(recap_comm *c) {
  abort_with(state_of(c), RECAP_STATUS_LIBRARY_ERROR, "recap_comm_abort was called");
}

static recap_status nccl_check(recap_comm *c) {
  recap_status st = poll_async(state_of(c));
  return st == RECAP_STATUS_NOT_READY ? RECAP_OK : st;
}

static recap_status to_nccl_type(recap_dtype d, ncclDataType_t *out) {
  switch (d) {
    case RECAP_DTYPE_F32: *out = ncclFloat32; return RECAP_OK;
    case RECAP_DTYPE_F16: *out = ncclFloat16; return RECAP_OK;
    case RECAP_DTYPE_BF16: *out = ncclBfloat16; return RECAP_OK;
    case RECAP_DTYPE_I32: *out = ncclInt32; return RECAP_OK;
    case RECAP_DTYPE_I64: *out = ncclInt64; return RECAP_OK;
    default: break;
  }
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "dtype %d has no NCCL type", (int)d);
}

static ncclRedOp_t to_nccl_op(recap_reduce_op op) {
  switch (op) {
    case RECAP_REDUCE_PROD: return ncclProd;
    case RECAP_REDUCE_MAX: return ncclMax;
    case RECAP_REDUCE_MIN: return ncclMin;
    case RECAP_REDUCE_AVG: return ncclAvg;
    default: return ncclSum;
  }
}

/* Communicators touched inside this thread's open group: their ncclInProgress is waited for
 * after ncclGroupEnd. */
enum { GROUP_MAX = 64 };
static _Thread_local int group_depth;
static _Thread_local nccl_state *group_members[GROUP_MAX];
static _Thread_local int group_count;
static _Thread_local bool group_overflow;

static recap_status nccl_run(recap_comm *c, const recap__coll *k, void *native_stream) {
  nccl_state *s = state_of(c);
  ncclDataType_t t = ncclFloat32;
  RECAP_TRY(to_nccl_type(k->dtype, &t));
  cudaStream_t stream = (cudaStream_t)native_stream;
  ncclRedOp_t op = to_nccl_op(k->op);
  ncclResult_t r;
  const char *what;
  pthread_mutex_lock(&nccl_lock);
  if (atomic_load(&s->aborted)) {
    pthread_mutex_unlock(&nccl_lock);
    return aborted_status(s);
  }
  recap_status gate = group_depth > 0 ? RECAP_OK : wait_for_aborts(s->timeout_s);
  if (gate == RECAP_OK && atomic_load(&s->aborted)) gate = aborted_status(s);
  if (gate != RECAP_OK) {
    pthread_mutex_unlock(&nccl_lock);
    return gate;
  }
  switch (k->kind) {
    case RECAP__COLL_ALL_REDUCE:
      what = "ncclAllReduce";
      r = nccl.AllReduce(k->send, k->recv, k->count, t, op, s->comm, stream);
      break;
    case RECAP__COLL_ALL_GATHER:
      what = "ncclAllGather";
      r = nccl.AllGather(k->send, k->recv, k->count, t, s->comm, stream);
      break;
    case RECAP__COLL_REDUCE_SCATTER:
      what = "ncclReduceScatter";
      r = nccl.ReduceScatter(k->send, k->recv, k->count, t, op, s->comm, stream);
      break;
    case RECAP__COLL_BROADCAST:
      what = "ncclBroadcast";
      r = nccl.Broadcast(k->send, k->recv, k->count, t, k->root, s->comm, stream);
      break;
    case RECAP__COLL_REDUCE:
      what = "ncclReduce";
      r = nccl.Reduce(k->send, k->recv, k->count, t, op, k->root, s->comm, stream);
      break;
    case RECAP__COLL_SEND:
      what = "ncclSend";
      r = nccl.Send(k->send, k->count, t, k->root, s->comm, stream);
      break;
    case RECAP__COLL_RECV:
      what = "ncclRecv";
      r = nccl.Recv(k->recv, k->count, t, k->root, s->comm, stream);
      break;
    default:
      pthread_mutex_unlock(&nccl_lock);
      return RECAP_FAIL(RECAP_STATUS_INTERNAL, "unknown collective %d", (int)k->kind);
  }
  pthread_mutex_unlock(&nccl_lock);
  if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(r, s->comm, what);
  if (group_depth > 0) {
    bool known = false;
    for (int i = 0; i < group_count; ++i) known |= group_members[i] == s;
    if (!known && group_count < GROUP_MAX) group_members[group_count++] = s;
    if (!known && group_count == GROUP_MAX) group_overflow = true;
    return RECAP_OK;
  }
  return r == ncclInProgress ? wait_ready(s, what) : RECAP_OK;
}

static recap_status nccl_group_start(void) {
  pthread_once(&load_once, load);
  if (load_status != RECAP_OK) return RECAP_OK; /* no NCCL: nothing to group */
  pthread_mutex_lock(&nccl_lock); /* held until the matching group end */
  if (group_depth == 0) {
    /* A group's communicators are not known yet: any abort's default wait bound. */
    recap_status gate = wait_for_aborts(GROUP_ABORT_WAIT_S);
    if (gate != RECAP_OK) {
      pthread_mutex_unlock(&nccl_lock);
      return gate;
    }
  }
  ncclResult_t r = nccl.GroupStart();
  if (r != ncclSuccess) {
    pthread_mutex_unlock(&nccl_lock);
    return nccl_fail(r, NULL, "ncclGroupStart");
  }
  if (group_depth++ == 0) {
    group_count = 0;
    group_overflow = false;
  }
  return RECAP_OK;
}

static recap_status nccl_group_end(void) {
  if (load_status != RECAP_OK) return RECAP_OK;
  if (group_depth == 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "recap_comm_group_end without a start");
  ncclResult_t r = nccl.GroupEnd();
  pthread_mutex_unlock(&nccl_lock);
  if (--group_depth > 0) return r == ncclSuccess || r == ncclInProgress ? RECAP_OK
                                                                         : nccl_fail(r, NULL, "ncclGroupEnd");
  if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(r, NULL, "ncclGroupEnd");
  if (group_overflow)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "more than %d communicators in one group",
                      GROUP_MAX);
  for (int i = 0; i < group_count; ++i) RECAP_TRY(wait_ready(group_members[i], "ncclGroupEnd"));
  return RECAP_OK;
}

static void nccl_busy_begin(recap_comm *c) {
  nccl_state *s = state_of(c);
  if (atomic_fetch_add(&s->busy, 1) == 0) atomic_store(&s->busy_since, now_s());
}

static void nccl_busy_end(recap_comm *c) { atomic_fetch_sub(&state_of(c)->busy, 1); }

static recap_status nccl_synchronize(recap_comm *c, recap_stream *stream) {
  nccl_state *s = state_of(c);
  cudaStream_t native = (cudaStream_t)recap_stream_native(stream);
  double since = now_s(), deadline = since + c->timeout_s;
  nccl_busy_begin(c);
  recap_status st = RECAP_OK;
  for (;;) {
    cudaError_t e = cudaStreamQuery(native);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) {
      st = recap__cuda_fail_at(e, "cudaStreamQuery(stream)", __FILE__, __LINE__, __func__);
      break;
    }
    if (atomic_load(&s->aborted) || (st = nccl_check(c)) != RECAP_OK) {
      st = aborted_status(s);
      break;
    }
    if (now_s() > deadline) {
      char reason[512];
      snprintf(reason, sizeof reason,
               "the stream's collectives did not finish within %.1f s: a peer rank died or "
               "stopped issuing the same collectives",
               c->timeout_s);
      abort_with(s, RECAP_STATUS_TIMEOUT, reason);
      st = aborted_status(s);
      break;
    }
    poll_backoff(since);
  }
  nccl_busy_end(c);
  if (st != RECAP_OK) return st;
  if (atomic_load(&s->aborted)) return aborted_status(s);
  /* Picks up what the backend reports at a synchronize (failed host functions). */
  return recap_stream_synchronize(stream);
}

recap_status recap__cuda_stream_device(void *native_stream, int *device) {
  /* cudaStreamGetDevice is refused on a capturing stream; ops launch with their stream's
   * device current (kernels launched with <<<>>> rely on it too), so that device is asked. */
  (void)native_stream;
  RECAP_CUDA_TRY(cudaGetDevice(device));
  return RECAP_OK;
}

recap_status recap__comm_launch_native(const recap__coll *k, int world_attr, void *native_stream) {
  int dev = 0;
  RECAP_TRY(recap__cuda_stream_device(native_stream, &dev));
  recap_comm *c = recap__comm_for_device((recap_device){RECAP_BACKEND_CUDA, dev});
  int world = c ? c->world : 1;
  if (world_attr > 0 && world_attr != world)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the op was planned for a world of %d but cuda:%d's communicator has %d "
                      "ranks%s",
                      world_attr, dev, world, c ? "" : " (none: run with --world)");
  if (c && c->world > 1) return nccl_run(c, k, native_stream);
  size_t bytes = k->count * recap_dtype_size(k->dtype);
  if (bytes == 0 || k->send == k->recv) return RECAP_OK;
  RECAP_CUDA_TRY(cudaMemcpyAsync(k->recv, k->send, bytes, cudaMemcpyDeviceToDevice,
                                 (cudaStream_t)native_stream));
  return RECAP_OK;
}

const recap__peer_view *recap__comm_peer_view(void *native_stream) {
  int dev = 0;
  if (recap__cuda_stream_device(native_stream, &dev) != RECAP_OK) return NULL;
  recap_comm *c = recap__comm_for_device((recap_device){RECAP_BACKEND_CUDA, dev});
  if (!c || c->world < 2 || c->backend != &recap__nccl_comm_backend || !c->state) return NULL;
  nccl_state *s = state_of(c);
  return atomic_load(&s->aborted) ? NULL : recap__peer_buffers_view(s->peers);
}

const recap__comm_backend recap__nccl_comm_backend = {
    .name = "nccl",
    .load = nccl_load,
    .unique_id = nccl_unique_id,
    .init = nccl_init,
    .init_clique = nccl_init_clique,
    .destroy = nccl_destroy,
    .abort = nccl_abort,
    .check = nccl_check,
    .run = nccl_run,
    .group_start = nccl_group_start,
    .group_end = nccl_group_end,
    .synchronize = nccl_synchronize,
    .busy_begin = nccl_busy_begin,
    .busy_end = nccl_busy_end,
};
