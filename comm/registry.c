/*
 * comm_registry.c: which communicator each device has (comm/comm.h).
 *
 * A device has at most one communicator at a time, as a process has one default group in
 * torch.distributed: the collective ops of a spec find it by their stream's device, so neither
 * the spec nor the op's plain-data call needs to carry a handle. The registry sits below both
 * comm.c (which attaches and detaches communicators) and the NCCL backend (whose native launch
 * looks one up), so that neither calls the other.
 */
#include <pthread.h>

#include "comm/comm.h"
#include "runtime/error.h"

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static recap_comm *attached_cuda[RECAP__COMM_MAX_CUDA_DEVICES];
static recap_comm *attached_host;

static recap_comm **slot_of(recap_device d) {
  if (d.backend == RECAP_BACKEND_HOST) return d.index == 0 ? &attached_host : NULL;
  return d.index >= 0 && d.index < RECAP__COMM_MAX_CUDA_DEVICES ? &attached_cuda[d.index] : NULL;
}

recap_comm *recap__comm_for_device(recap_device device) {
  pthread_mutex_lock(&registry_lock);
  recap_comm **slot = slot_of(device);
  recap_comm *c = slot ? *slot : NULL;
  pthread_mutex_unlock(&registry_lock);
  return c;
}

recap_status recap__comm_attach(recap_comm *c) {
  recap_status st = RECAP_OK;
  pthread_mutex_lock(&registry_lock);
  recap_comm **slot = slot_of(c->device);
  if (!slot)
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "device %s:%d cannot hold a communicator",
                    recap_backend_name(c->device.backend), c->device.index);
  else if (*slot)
    st = RECAP_FAIL(RECAP_STATUS_BUSY,
                    "%s:%d already has a communicator (rank %d of %d): destroy it first",
                    recap_backend_name(c->device.backend), c->device.index, (*slot)->rank,
                    (*slot)->world);
  else
    *slot = c;
  pthread_mutex_unlock(&registry_lock);
  return st;
}

void recap__comm_detach(recap_comm *c) {
  pthread_mutex_lock(&registry_lock);
  recap_comm **slot = slot_of(c->device);
  if (slot && *slot == c) *slot = NULL;
  pthread_mutex_unlock(&registry_lock);
}
