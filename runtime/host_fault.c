/*
 * host_fault.c: running host functions, and the host backend's sticky fault (host_fault.h).
 */
#include "runtime/host_fault.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

/* A host function's arguments are copied here, on the stack, when they fit: an op's call
 * (recap__op_call, about 1.2 KB) does, so running a host graph node allocates nothing (a
 * malloc+free per node per replay also moved the heap under a steady replay loop). */
enum { LOCAL_ARGS_BYTES = 2048 };

static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool faulted;
/* Written once, under fault_lock, before `faulted` is set; read only after it is seen set. */
static char fault_message[1024];

recap_status recap__host_check_fault(void) {
  if (!atomic_load_explicit(&faulted, memory_order_acquire)) return RECAP_OK;
  return recap__fail_plain(RECAP_STATUS_DEVICE_ERROR,
                           "a host kernel failed earlier: %s (the host device refuses all later "
                           "work, as a CUDA device does after a kernel fault: start a new "
                           "process)",
                           fault_message);
}

static recap_status raise_fault(recap_status status) {
  pthread_mutex_lock(&fault_lock);
  if (!atomic_load_explicit(&faulted, memory_order_relaxed)) {
    /* The failing op's own message names it (a function's address would tell a user
     * nothing). */
    snprintf(fault_message, sizeof fault_message, "%s: %s", recap_status_name(status),
             recap_last_error());
    atomic_store_explicit(&faulted, true, memory_order_release);
  }
  pthread_mutex_unlock(&fault_lock);
  return recap__host_check_fault();
}

void recap__host_backend_reset_fault_for_testing(void) {
  pthread_mutex_lock(&fault_lock);
  atomic_store(&faulted, false);
  fault_message[0] = '\0';
  pthread_mutex_unlock(&fault_lock);
}

recap_status recap__host_run_fn(recap__host_fn fn, const void *args, size_t args_size) {
  union {
    max_align_t align;
    unsigned char bytes[LOCAL_ARGS_BYTES];
  } local;
  void *copy = NULL;
  if (args_size > 0) {
    copy = args_size <= sizeof local.bytes ? local.bytes : malloc(args_size);
    if (!copy)
      return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to copy %zu argument bytes",
                        args_size);
    memcpy(copy, args, args_size);
  }
  recap_status st = fn(copy);
  if (copy != local.bytes) free(copy);
  return st == RECAP_OK ? RECAP_OK : raise_fault(st);
}
