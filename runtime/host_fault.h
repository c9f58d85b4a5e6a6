/*
 * host_fault.h: how the host (CPU) backend runs a host function, and its sticky fault
 * (internal).
 *
 * A host function that fails leaves the backend faulted for good, as a trapped kernel leaves a
 * CUDA context: every later device call returns RECAP_STATUS_DEVICE_ERROR naming the first
 * fault. Streams (host_backend.c) and graph replays (host_graph.c) both run functions here.
 */
#ifndef RECAP_RUNTIME_HOST_FAULT_H
#define RECAP_RUNTIME_HOST_FAULT_H

#include <stddef.h>

#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs fn on a private copy of args (so fn cannot change the caller's or a graph's bytes, as
 * kernel parameters are copied per launch). A failure becomes the sticky fault and the
 * return value is RECAP_STATUS_DEVICE_ERROR naming it. */
recap_status recap__host_run_fn(recap__host_fn fn, const void *args, size_t args_size);
/* RECAP_OK, or RECAP_STATUS_DEVICE_ERROR (with the first fault's message) after a fault. */
recap_status recap__host_check_fault(void);
/* Clears the sticky fault so one test's planted fault does not fail the tests after it.
 * Tests only: a real process stays faulted, as a CUDA context does. */
void recap__host_backend_reset_fault_for_testing(void);

#ifdef __cplusplus
}
#endif

#endif
