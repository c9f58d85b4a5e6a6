/*
 * dist.c: recap_pipeline_run_dist, a pipeline run by every rank of a world in lockstep
 * (include/recap.h, "Communicators").
 *
 * Why a header travels with the inputs: every rank must replay the same bucket's graph, in the
 * same order, or the collectives inside the graphs would not match and NCCL would wait
 * forever. The bucket is a host decision (which executable graph to launch), so rank 0 makes
 * it and broadcasts it, in one NCCL group with the inputs, before the launch:
 *
 *   rank 0:   header = {magic, batch, bucket, buckets} -> device;
 *             broadcast(header, inputs, scalars);
 *             launch graph[bucket]
 *   rank r:   broadcast(header, inputs, scalars) into its buffers; read the header back (this
 *             waits for rank 0's broadcast, the one wait a follower needs anyway); check it;
 *             launch graph[bucket]
 *
 * No message goes back to rank 0, so a replay costs no round trip; the followers' read-back
 * waits only for data they need before computing. A header that does not match the
 * follower's own pipeline (another spec, other buckets) is a clear error instead of a hang.
 *
 * recap_comm_agree_min, beside it, brings a host value every rank must agree on through the
 * same communicator.
 *
 * Bounded waits: the whole run is a busy stretch of the communicator, so a peer that dies
 * anywhere in it (the broadcast, a warmup inside the first run, the replay) makes the watchdog
 * abort the communicator within its timeout, and this returns TIMEOUT naming the cause.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pipeline.h"
#include "runtime/backend.h"
#include "comm/comm.h"
#include "runtime/error.h"

#define DIST_MAGIC ((int64_t)0x5243505f44495354LL) /* "RCP_DIST" */
enum { HEADER_WORDS = 4 };

recap_status recap__dist_broadcast_step(recap_pipeline *p, recap_comm *comm, void *head,
                                        size_t count, recap_dtype dtype, bool inputs,
                                        recap_stream *stream) {
  RECAP_TRY(recap_comm_group_start());
  recap_status st = recap_comm_broadcast(comm, head, head, count, dtype, 0, stream);
  const recap__ir *ir = p->model->irs[p->model->num_buckets - 1];
  for (size_t t = 0; st == RECAP_OK && inputs && t < ir->num_tensors; ++t) {
    const recap__ir_tensor *tt = &ir->tensors[t];
    if ((tt->role != RECAP_ROLE_INPUT && tt->role != RECAP_ROLE_SCALAR) || tt->bytes == 0)
      continue;
    size_t n = (size_t)tt->bytes / recap_dtype_size(tt->dtype);
    st = recap_comm_broadcast(comm, p->data[t], p->data[t], n, tt->dtype, 0, stream);
    if (st != RECAP_OK) st = recap__error_context(st, "broadcasting input '%s': ", tt->name);
  }
  recap_status end = recap_comm_group_end();
  return st != RECAP_OK ? st : end;
}

static recap_status check_header(const recap_pipeline *p, const recap_comm *comm,
                                 const int64_t *h) {
  const recap__model *m = p->model;
  int64_t largest = m->bucket_values[m->num_buckets - 1];
  if (h[0] != DIST_MAGIC || h[3] != (int64_t)m->num_buckets || h[2] < 0 ||
      h[2] >= (int64_t)m->num_buckets || h[1] < 0 ||
      (m->spec->bucket_dim >= 0 && h[1] > largest) ||
      recap__pipeline_bucket_for(p, h[1]) != (size_t)h[2])
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "rank %d: rank 0's run header (batch %lld, bucket %lld of %lld) does not "
                      "match this pipeline ('%s', %zu buckets): do all ranks run the same spec "
                      "and dims?",
                      comm->rank, (long long)h[1], (long long)h[2], (long long)h[3],
                      m->spec->name, m->num_buckets);
  return RECAP_OK;
}

/* The run itself, inside the busy stretch. */
static recap_status run_dist(recap_pipeline *p, recap_comm *comm, int64_t batch, unsigned flags) {
  bool eager = (flags & RECAP_DIST_EAGER) != 0;
  if (comm->world == 1) {
    RECAP_TRY(recap__graph_run(p, batch, eager));
    return recap_comm_synchronize(comm, p->stream);
  }
  const recap__model *m = p->model;
  int64_t h[HEADER_WORDS] = {DIST_MAGIC, batch, 0, (int64_t)m->num_buckets};
  if (comm->rank == 0) {
    size_t b = recap__pipeline_bucket_for(p, batch);
    if (b == m->num_buckets)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "batch %lld is above the largest bucket (%lld): a distributed run "
                        "replays a captured bucket on every rank",
                        (long long)batch, (long long)m->bucket_values[m->num_buckets - 1]);
    h[2] = (int64_t)b;
  }
  int64_t *header_dev = NULL;
  RECAP_TRY(recap_malloc(p->device, sizeof h, p->stream, (void **)&header_dev));
  const recap__backend *be = p->stream->backend;
  recap_status st = RECAP_OK;
  /* From pageable memory the copy has read `h` when it returns. */
  if (comm->rank == 0) RECAP_TRY_GOTO(st, be->memcpy_async(header_dev, h, sizeof h, p->stream), done);
  /* Scalars are the caller's per-step values too (an imported model's `pos` and `len`). */
  RECAP_TRY_GOTO(st,
                 recap__dist_broadcast_step(p, comm, header_dev, HEADER_WORDS, RECAP_DTYPE_I64,
                                            !(flags & RECAP_DIST_INPUTS_REPLICATED), p->stream),
                 done);
  if (comm->rank != 0) {
    RECAP_TRY_GOTO(st, be->memcpy_async(h, header_dev, sizeof h, p->stream), done);
    RECAP_TRY_GOTO(st, recap_comm_synchronize(comm, p->stream), done);
    RECAP_TRY_GOTO(st, check_header(p, comm, h), done);
  }
  RECAP_TRY_GOTO(st, recap__graph_run(p, h[1], eager), done);
  st = recap_comm_synchronize(comm, p->stream);
done:
  recap_free(header_dev);
  return st;
}

/* The ranks' host decisions (recap_comm_agree_min) go through a device buffer, as every
 * collective does; it lives here, above the allocator, beside the other lockstep runs. */
recap_status recap_comm_agree_min(recap_comm *comm, int64_t *value) {
  RECAP_CHECK_ARG(comm && value);
  if (recap_comm_world_size(comm) == 1) return RECAP_OK;
  recap_stream *s = NULL;
  int64_t *dev_value = NULL;
  RECAP_TRY(recap_stream_create(recap_comm_device(comm), 0, RECAP_STREAM_NON_BLOCKING, &s));
  recap_status st = recap_malloc(recap_comm_device(comm), sizeof *value, s, (void **)&dev_value);
  if (st == RECAP_OK) st = recap_memcpy_async(dev_value, value, sizeof *value, s);
  if (st == RECAP_OK)
    st = recap_comm_all_reduce(comm, dev_value, dev_value, 1, RECAP_DTYPE_I64, RECAP_REDUCE_MIN,
                               s);
  /* The wait for the peers is the bounded one; the copy back (to pageable memory, which may
   * block until the stream gets to it) only after it. */
  if (st == RECAP_OK) st = recap_comm_synchronize(comm, s);
  if (st == RECAP_OK) st = recap_memcpy_async(value, dev_value, sizeof *value, s);
  if (st == RECAP_OK) st = recap_stream_synchronize(s);
  if (dev_value) recap_free(dev_value);
  recap_stream_destroy(s);
  return st;
}

recap_status recap_pipeline_run_dist(recap_pipeline *p, recap_comm *comm, int64_t batch,
                                     unsigned flags) {
  RECAP_CHECK_ARG(p && comm);
  RECAP_CHECK_ARG((flags & ~(unsigned)(RECAP_DIST_INPUTS_REPLICATED | RECAP_DIST_EAGER)) == 0);
  recap_device cd = recap_comm_device(comm);
  if (cd.backend != p->device.backend || cd.index != p->device.index)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the pipeline runs on %s:%d, the communicator (rank %d) on %s:%d",
                      recap_backend_name(p->device.backend), p->device.index, comm->rank,
                      recap_backend_name(cd.backend), cd.index);
  if (comm->rank == 0 && batch < 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "batch %lld is negative", (long long)batch);
  recap__comm_busy_begin(comm);
  recap_status st = run_dist(p, comm, batch, flags);
  recap__comm_busy_end(comm);
  if (st != RECAP_OK) {
    /* When the watchdog aborted the communicator, the failing call only saw the symptom (an
     * aborted kernel, a failed copy): report the cause. */
    char *symptom = strdup(recap_last_error());
    recap_status cause = recap_comm_check(comm);
    if (cause != RECAP_OK && cause != RECAP_STATUS_NOT_READY) {
      free(symptom);
      return recap__error_context(cause, "distributed run: ");
    }
    if (symptom) recap__fail_plain(st, "%s", symptom);
    free(symptom);
  }
  return st;
}
