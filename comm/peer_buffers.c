/*
 * peer_buffers.c: the one-shot all_reduce's buffers (peer_buffers.h), CUDA builds only, and
 * the peer access that an in-process clique's buffers and torch.cuda.comm's functions
 * (multi_device.c) both enable (recap__cuda_enable_peer_access, comm.h).
 */
#include "comm/peer_buffers.h"

#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) == RECAP__PEER_HANDLE_BYTES,
               "RECAP__PEER_HANDLE_BYTES must be the size of a CUDA IPC handle");

struct recap__peer_buffers {
  recap__peer_view view;
  void *local;                        /* this rank's buffer (view.peers[rank]) */
  bool opened[RECAP__PEER_MAX_WORLD]; /* mapped with cudaIpcOpenMemHandle */
  uint32_t *abort_host;               /* pinned, mapped: view.abort_word's host side */
};

/* The bytes of one rank's buffer: two parities of every sender's regions, 8 bytes a word. At
 * world 2, 8 MiB: a decode batch of 64 rows of a 4096-wide bf16 hidden state fits. */
static size_t buffer_bytes(int world) {
  return 2 * (size_t)world * RECAP__PEER_MAX_BLOCKS * RECAP__PEER_BLOCK_WORDS * 8;
}

/* Runs with `device` current, restoring the caller's. */
typedef struct {
  int previous;
} device_scope;

static recap_status scope_enter(device_scope *s, int device) {
  RECAP_CUDA_TRY(cudaGetDevice(&s->previous));
  RECAP_CUDA_TRY(cudaSetDevice(device));
  return RECAP_OK;
}

static void scope_exit(const device_scope *s) {
  if (cudaSetDevice(s->previous) != cudaSuccess) (void)cudaGetLastError();
}

recap_status recap__peer_buffers_create(int device, int rank, int world,
                                        recap__peer_buffers **out) {
  RECAP_CHECK_ARG(out);
  *out = NULL;
  if (world < 2 || world > RECAP__PEER_MAX_WORLD || rank < 0 || rank >= world)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "peer buffers: rank %d of %d (2 to %d ranks)",
                      rank, world, RECAP__PEER_MAX_WORLD);
  recap__peer_buffers *b = calloc(1, sizeof *b);
  if (!b) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for peer buffers");
  b->view.rank = rank;
  b->view.world = world;
  b->view.device = device;
  device_scope scope;
  recap_status st = scope_enter(&scope, device);
  if (st != RECAP_OK) {
    free(b);
    return st;
  }
  const size_t bytes = buffer_bytes(world),
               counter_bytes = RECAP__PEER_MAX_BLOCKS * sizeof(uint32_t);
  void *abort_device = NULL;
  RECAP_CUDA_TRY_GOTO(st, cudaMalloc(&b->local, bytes), fail);
  RECAP_CUDA_TRY_GOTO(st, cudaMalloc((void **)&b->view.counters, counter_bytes), fail);
  RECAP_CUDA_TRY_GOTO(st, cudaMemset(b->local, 0, bytes), fail);
  RECAP_CUDA_TRY_GOTO(st, cudaMemset(b->view.counters, 0, counter_bytes), fail);
  RECAP_CUDA_TRY_GOTO(
      st, cudaHostAlloc((void **)&b->abort_host, sizeof(uint32_t), cudaHostAllocMapped), fail);
  *b->abort_host = 0;
  RECAP_CUDA_TRY_GOTO(st, cudaHostGetDevicePointer(&abort_device, b->abort_host, 0), fail);
  RECAP_CUDA_TRY_GOTO(st, cudaDeviceSynchronize(), fail);
  b->view.abort_word = abort_device;
  b->view.peers[rank] = b->local;
  scope_exit(&scope);
  *out = b;
  return RECAP_OK;
fail:
  scope_exit(&scope);
  recap__peer_buffers_destroy(b);
  return recap__error_context(st, "peer buffers on cuda:%d: ", device);
}

recap_status recap__peer_buffers_handle(const recap__peer_buffers *b, void *handle) {
  RECAP_CHECK_ARG(b && handle);
  cudaIpcMemHandle_t h;
  RECAP_CUDA_TRY(cudaIpcGetMemHandle(&h, b->local));
  memcpy(handle, &h, sizeof h);
  return RECAP_OK;
}

recap_status recap__peer_buffers_open(recap__peer_buffers *b, int peer, const void *handle) {
  RECAP_CHECK_ARG(b && handle);
  if (peer < 0 || peer >= b->view.world || peer == b->view.rank || b->view.peers[peer])
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "peer buffers: cannot open rank %d's", peer);
  cudaIpcMemHandle_t h;
  memcpy(&h, handle, sizeof h);
  device_scope scope;
  RECAP_TRY(scope_enter(&scope, b->view.device));
  void *p = NULL;
  cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  scope_exit(&scope);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "cuda:%d cannot map rank %d's buffer: %s",
                      b->view.device, peer, cudaGetErrorString(e));
  }
  b->view.peers[peer] = p;
  b->opened[peer] = true;
  return RECAP_OK;
}

recap_status recap__cuda_enable_peer_access(int device, int peer) {
  int can = 0;
  RECAP_CUDA_TRY(cudaDeviceCanAccessPeer(&can, device, peer));
  if (!can)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "cuda:%d cannot access cuda:%d's memory", device,
                      peer);
  int previous = 0;
  RECAP_CUDA_TRY(cudaGetDevice(&previous));
  RECAP_CUDA_TRY(cudaSetDevice(device));
  cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    e = cudaSuccess;
  }
  recap_status st = RECAP_OK;
  if (e != cudaSuccess)
    st = recap__cuda_fail_at(e, "cudaDeviceEnablePeerAccess(peer, 0)", __FILE__, __LINE__, __func__);
  if (cudaSetDevice(previous) != cudaSuccess) (void)cudaGetLastError();
  return st;
}

recap_status recap__peer_buffers_link(recap__peer_buffers *const *all, int count) {
  RECAP_CHECK_ARG(all && count >= 2);
  for (int i = 0; i < count; ++i)
    for (int j = 0; j < count; ++j) {
      if (i == j) continue;
      RECAP_TRY(recap__cuda_enable_peer_access(all[i]->view.device, all[j]->view.device));
      all[i]->view.peers[j] = all[j]->local;
    }
  return RECAP_OK;
}

const recap__peer_view *recap__peer_buffers_view(const recap__peer_buffers *b) {
  return b ? &b->view : NULL;
}

void recap__peer_buffers_abort(recap__peer_buffers *b) {
  if (b && b->abort_host) __atomic_store_n(b->abort_host, 1u, __ATOMIC_RELEASE);
}

void recap__peer_buffers_destroy(recap__peer_buffers *b) {
  if (!b) return;
  int previous = 0;
  bool restore = cudaGetDevice(&previous) == cudaSuccess;
  if (cudaSetDevice(b->view.device) != cudaSuccess) (void)cudaGetLastError();
  for (int p = 0; p < b->view.world; ++p)
    if (b->opened[p] && cudaIpcCloseMemHandle(b->view.peers[p]) != cudaSuccess)
      (void)cudaGetLastError();
  if (b->local && cudaFree(b->local) != cudaSuccess) (void)cudaGetLastError();
  if (b->view.counters && cudaFree(b->view.counters) != cudaSuccess) (void)cudaGetLastError();
  if (b->abort_host && cudaFreeHost(b->abort_host) != cudaSuccess) (void)cudaGetLastError();
  if (restore && cudaSetDevice(previous) != cudaSuccess) (void)cudaGetLastError();
  free(b);
}
