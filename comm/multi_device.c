/*
 * multi_device.c: several devices in one process: torch.cuda.comm's broadcast, reduce_add,
 * scatter, gather and their coalesced forms, and peer access (include/recap.h).
 *
 * Each function is one NCCL group over a clique from recap_comm_init_devices (comms[i] is rank
 * i on its device): NCCL moves the bytes over NVLink or PCIe and reduces on the device, so
 * recap keeps no transfer code of its own. A clique of one device (the host backend's only
 * case) runs the local path: copies. Splits are along the first axis of contiguous tensors, so
 * every chunk is one contiguous byte range.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "comm/comm.h"
#include "runtime/error.h"

static size_t numel_of(const recap_tensor *t) {
  size_t n = 1;
  for (int d = 0; d < t->ndim; ++d) n *= (size_t)t->shape[d];
  return n;
}

static recap_status check_tensor(const recap_tensor *t, const char *what, int index) {
  if (!t || !t->data || t->ndim < 1 || t->ndim > RECAP_MAX_DIMS || !recap_dtype_name(t->dtype))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "%s %d is not a bound tensor", what, index);
  int64_t stride = 1;
  for (int d = t->ndim - 1; d >= 0; --d) {
    if (t->shape[d] < 1)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "%s %d has an empty axis", what, index);
    if (t->shape[d] > 1 && t->strides[d] != stride)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "%s %d is not contiguous", what, index);
    stride *= t->shape[d];
  }
  return RECAP_OK;
}

static recap_status check_clique(recap_comm *const *comms, int count, int root,
                                 recap_stream *const *streams) {
  RECAP_CHECK_ARG(comms && streams && count >= 1);
  if (root < 0 || root >= count)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "root %d outside %d devices", root, count);
  for (int i = 0; i < count; ++i) {
    if (!comms[i] || !streams[i])
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "communicator or stream %d is NULL", i);
    if (comms[i]->rank != i || comms[i]->world != count)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "comms[%d] is rank %d of %d: pass recap_comm_init_devices's array of %d",
                        i, comms[i]->rank, comms[i]->world, count);
  }
  return RECAP_OK;
}

static recap_status same_layout(const recap_tensor *a, const recap_tensor *b, const char *what,
                                int index) {
  RECAP_TRY(check_tensor(b, what, index));
  if (a->dtype != b->dtype || numel_of(a) != numel_of(b))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "%s %d: %zu elements of %s, expected %zu of %s", what, index, numel_of(b),
                      recap_dtype_name(b->dtype), numel_of(a), recap_dtype_name(a->dtype));
  return RECAP_OK;
}

/* A copy on device i's stream (the root's own chunk in scatter and gather). */
static recap_status local_copy(recap_stream *s, void *dst, const void *src, size_t bytes) {
  if (bytes == 0 || dst == src) return RECAP_OK;
  return s->backend->memcpy_async(dst, src, bytes, s);
}

/* Runs the group body, always closing the group it opened. */
#define GROUP_RUN(st, ...)                               \
  do {                                                   \
    (st) = recap_comm_group_start();                     \
    if ((st) == RECAP_OK) {                              \
      __VA_ARGS__;                                       \
      recap_status end_ = recap_comm_group_end();        \
      if ((st) == RECAP_OK) (st) = end_;                 \
    }                                                    \
  } while (0)

static recap_status broadcast_one(recap_comm *const *comms, int count, int root,
                                  const recap_tensor *src, recap_tensor *dsts, int stride,
                                  recap_stream *const *streams) {
  size_t n = numel_of(src);
  for (int i = 0; i < count; ++i) {
    void *recv = i == root ? (dsts[i * stride].data ? dsts[i * stride].data : src->data)
                           : dsts[i * stride].data;
    recap__coll c = {RECAP__COLL_BROADCAST, i == root ? src->data : NULL, recv, n, src->dtype,
                     RECAP_REDUCE_SUM, root};
    RECAP_TRY(recap__comm_run(comms[i], &c, streams[i]));
  }
  return RECAP_OK;
}

recap_status recap_comm_broadcast_coalesced(recap_comm *const *comms, int count, int root,
                                            const recap_tensor *srcs, int num_tensors,
                                            recap_tensor *dsts, recap_stream *const *streams) {
  RECAP_TRY(check_clique(comms, count, root, streams));
  RECAP_CHECK_ARG(srcs && dsts && num_tensors >= 1);
  for (int t = 0; t < num_tensors; ++t) {
    RECAP_TRY(check_tensor(&srcs[t], "source", t));
    for (int i = 0; i < count; ++i)
      if (i != root || dsts[i * num_tensors + t].data)
        RECAP_TRY(same_layout(&srcs[t], &dsts[i * num_tensors + t], "destination",
                              i * num_tensors + t));
  }
  recap_status st;
  GROUP_RUN(st, for (int t = 0; t < num_tensors && st == RECAP_OK; ++t) st =
                    broadcast_one(comms, count, root, &srcs[t], dsts + t, num_tensors, streams));
  return st;
}

recap_status recap_comm_broadcast_devices(recap_comm *const *comms, int count, int root,
                                          const recap_tensor *src, recap_tensor *dsts,
                                          recap_stream *const *streams) {
  return recap_comm_broadcast_coalesced(comms, count, root, src, 1, dsts, streams);
}

recap_status recap_comm_reduce_add_coalesced(recap_comm *const *comms, int count, int root,
                                             const recap_tensor *inputs, int num_tensors,
                                             recap_tensor *outs, recap_stream *const *streams) {
  RECAP_TRY(check_clique(comms, count, root, streams));
  RECAP_CHECK_ARG(inputs && outs && num_tensors >= 1);
  for (int t = 0; t < num_tensors; ++t) {
    RECAP_TRY(check_tensor(&outs[t], "output", t));
    for (int i = 0; i < count; ++i)
      RECAP_TRY(same_layout(&outs[t], &inputs[i * num_tensors + t], "input", i * num_tensors + t));
  }
  recap_status st;
  GROUP_RUN(st, for (int t = 0; t < num_tensors && st == RECAP_OK; ++t) for (
                    int i = 0; i < count && st == RECAP_OK; ++i) {
    const recap_tensor *in = &inputs[i * num_tensors + t];
    /* NCCL reads recvbuff on the root only; the others pass their input, never written. */
    recap__coll c = {RECAP__COLL_REDUCE, in->data, i == root ? outs[t].data : in->data,
                     numel_of(in), in->dtype, RECAP_REDUCE_SUM, root};
    if (count == 1) c.kind = RECAP__COLL_ALL_REDUCE;
    st = recap__comm_run(comms[i], &c, streams[i]);
  });
  return st;
}

recap_status recap_comm_reduce_add(recap_comm *const *comms, int count, int root,
                                   const recap_tensor *inputs, recap_tensor *out,
                                   recap_stream *const *streams) {
  return recap_comm_reduce_add_coalesced(comms, count, root, inputs, 1, out, streams);
}

/* Rows of a tensor: the byte size of one index of the first axis. */
static size_t row_bytes(const recap_tensor *t) {
  return numel_of(t) / (size_t)t->shape[0] * recap_dtype_size(t->dtype);
}

/* Checks that chunks[0..count) stack into `whole` along the first axis. */
static recap_status check_chunks(const recap_tensor *whole, const recap_tensor *chunks,
                                 int count) {
  RECAP_TRY(check_tensor(whole, "tensor", 0));
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) {
    RECAP_TRY(check_tensor(&chunks[i], "chunk", i));
    if (chunks[i].dtype != whole->dtype || chunks[i].ndim != whole->ndim ||
        row_bytes(&chunks[i]) != row_bytes(whole))
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "chunk %d must match the tensor in dtype and every axis but the first", i);
    rows += chunks[i].shape[0];
  }
  if (rows != whole->shape[0])
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the chunks hold %lld rows, the tensor %lld", (long long)rows,
                      (long long)whole->shape[0]);
  return RECAP_OK;
}

/* scatter (to_root false) or gather (true): the root exchanges chunk i with device i. */
static recap_status exchange(recap_comm *const *comms, int count, int root,
                             const recap_tensor *whole, const recap_tensor *chunks,
                             recap_stream *const *streams, bool to_root) {
  RECAP_TRY(check_clique(comms, count, root, streams));
  RECAP_CHECK_ARG(whole && chunks);
  RECAP_TRY(check_chunks(whole, chunks, count));
  size_t esize = recap_dtype_size(whole->dtype), rb = row_bytes(whole), offset = 0;
  recap_status st;
  GROUP_RUN(st, for (int i = 0; i < count && st == RECAP_OK; ++i) {
    char *part = (char *)whole->data + offset;
    size_t bytes = (size_t)chunks[i].shape[0] * rb, n = bytes / esize;
    offset += bytes;
    if (i == root) {
      st = to_root ? local_copy(streams[root], part, chunks[i].data, bytes)
                   : local_copy(streams[root], chunks[i].data, part, bytes);
      continue;
    }
    recap__coll out = {RECAP__COLL_SEND, to_root ? chunks[i].data : part, NULL, n,
                       whole->dtype, RECAP_REDUCE_SUM, to_root ? root : i};
    recap__coll in = {RECAP__COLL_RECV, NULL, to_root ? part : chunks[i].data, n, whole->dtype,
                      RECAP_REDUCE_SUM, to_root ? i : root};
    out.recv = (void *)out.send; /* send reads only; the check wants both set */
    in.send = in.recv;
    int sender = to_root ? i : root, receiver = to_root ? root : i;
    st = recap__comm_run(comms[sender], &out, streams[sender]);
    if (st == RECAP_OK) st = recap__comm_run(comms[receiver], &in, streams[receiver]);
  });
  return st;
}

recap_status recap_comm_scatter(recap_comm *const *comms, int count, int root,
                                const recap_tensor *src, recap_tensor *chunks,
                                recap_stream *const *streams) {
  return exchange(comms, count, root, src, chunks, streams, false);
}

recap_status recap_comm_gather(recap_comm *const *comms, int count, int root,
                               const recap_tensor *chunks, recap_tensor *dst,
                               recap_stream *const *streams) {
  return exchange(comms, count, root, dst, chunks, streams, true);
}

recap_status recap_device_enable_peer_access(recap_device device, recap_device peer) {
  const recap__backend *a, *b;
  RECAP_TRY(recap__device_backend(device, &a));
  RECAP_TRY(recap__device_backend(peer, &b));
  if (device.backend != RECAP_BACKEND_CUDA || peer.backend != RECAP_BACKEND_CUDA)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "peer access is between two CUDA devices");
  if (device.index == peer.index)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "a device is not its own peer");
#if RECAP_WITH_CUDA
  return recap__cuda_enable_peer_access(device.index, peer.index);
#else
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "this build has no CUDA backend");
#endif
}
