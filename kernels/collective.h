/*
 * collective.h: a world of several ranks on the host backend, in one process (internal).
 *
 * The host backend is a world of 1: each collective op is a copy, and one planned for a larger
 * world (all_gather's `world`) is an error. A host test of a tensor-parallel model instead runs
 * every rank's pipeline in one process, each on a thread of its own, and installs a handler
 * that every host collective then calls with the op's description: the handler pairs up the
 * ranks' calls (its own bookkeeping, e.g. a thread-local rank and a barrier) and writes the sum
 * or the concatenation over ranks into each rank's output (tests/pipeline_tp_test.c).
 *
 *   recap__collective_set_host_handler(my_world, &state);   // before the pipelines run
 *   ... one thread per rank creates and runs its pipeline ...
 *   recap__collective_set_host_handler(NULL, NULL);
 */
#ifndef RECAP_KERNELS_COLLECTIVE_H
#define RECAP_KERNELS_COLLECTIVE_H

#include "comm/comm.h"

/* c as the op describes it (send, recv, count, dtype, op); world: the op's `world` attribute
 * (all_gather, reduce_scatter), 0 when the op has none. A failure is recorded (RECAP_FAIL) and
 * returned; the op fails with it. */
typedef recap_status (*recap__host_collective_fn)(void *ctx, const recap__coll *c, int world);

/* Installs fn for every later host collective of the process (NULL: a world of 1 again). */
void recap__collective_set_host_handler(recap__host_collective_fn fn, void *ctx);

#endif
