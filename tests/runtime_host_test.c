/* runtime_host_test.c: the host backend: device, memory, streams, events, capture emulation
 * with CUDA's rules, graphs, and sticky faults. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* setenv, nanosleep and pthread_barrier_t under -std=c11 */
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/error.h"
#include "runtime/host_fault.h"
#include "runtime/host_graph.h"
#include "tests/test_util.h"

static const recap_device host_device = {RECAP_BACKEND_HOST, 0};

static const recap__backend *host(void) {
  return recap__backend_get(RECAP_BACKEND_HOST);
}

static recap_stream *stream_new(void) {
  recap_stream *s = NULL;
  recap_status st = recap_stream_create(host_device, 0, RECAP_STREAM_NON_BLOCKING, &s);
  if (st != RECAP_OK) fprintf(stderr, "stream_create: %s\n", recap_last_error());
  return s;
}

static recap_event *event_new(unsigned flags) {
  recap_event *e = NULL;
  recap_status st = recap_event_create(host_device, flags, &e);
  if (st != RECAP_OK) fprintf(stderr, "event_create: %s\n", recap_last_error());
  return e;
}

/* ---- host functions used as kernels ---- */

typedef struct {
  atomic_int *counter;
  int add;
} add_args;

static recap_status add_fn(void *p) {
  add_args *a = p;
  atomic_fetch_add(a->counter, a->add);
  return RECAP_OK;
}

static recap_status launch_add(recap_stream *s, atomic_int *counter, int add) {
  add_args a = {counter, add};
  return host()->launch_host(s, add_fn, &a, sizeof a);
}

typedef struct {
  int items[16];
  int count;
} order_log;

typedef struct {
  order_log *log;
  int value;
} log_args;

static recap_status log_fn(void *p) {
  log_args *a = p;
  if (a->log->count < 16) a->log->items[a->log->count++] = a->value;
  return RECAP_OK;
}

static recap_status launch_log(recap_stream *s, order_log *log, int value) {
  log_args a = {log, value};
  return host()->launch_host(s, log_fn, &a, sizeof a);
}

typedef struct {
  int *target;
  int value;
} store_args;

static recap_status store_fn(void *p) {
  store_args *a = p;
  *a->target = a->value;
  return RECAP_OK;
}

static recap_status store_other_fn(void *p) {
  return store_fn(p);
}

static recap_status failing_fn(void *p) {
  (void)p;
  return recap__fail_plain(RECAP_STATUS_INTERNAL, "planted kernel failure");
}

/* Captures one `add` on a fresh capture of s and returns the graph. */
static recap__graph *capture_one_add(recap_stream *s, atomic_int *counter, int add) {
  recap__graph *graph = NULL;
  if (recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL) != RECAP_OK) return NULL;
  recap_status st = launch_add(s, counter, add);
  recap_status end = recap__capture_end(s, &graph);
  if (st != RECAP_OK || end != RECAP_OK) {
    fprintf(stderr, "capture_one_add: %s\n", recap_last_error());
    host()->graph_destroy(graph);
    return NULL;
  }
  return graph;
}

/* ---- device and memory ---- */

static void test_host_has_exactly_one_device(void) {
  int count = -1;
  CHECK_OK(recap_device_count(RECAP_BACKEND_HOST, &count));
  CU_ASSERT_EQUAL(count, 1);
  CU_ASSERT_TRUE(recap_device_is_available(RECAP_BACKEND_HOST));
  recap_device_properties p;
  recap_device second = {RECAP_BACKEND_HOST, 1};
  CHECK_STATUS(recap_device_properties_get(second, &p), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_STRING_EQUAL(recap_device_compiled_archs(RECAP_BACKEND_HOST), "");
  int peer = -1;
  CHECK_OK(recap_device_can_access_peer(host_device, host_device, &peer));
  CU_ASSERT_EQUAL(peer, 0);
}

static void test_host_properties_name_cpus_and_memory(void) {
  recap_device_properties p;
  CHECK_OK(recap_device_properties_get(host_device, &p));
  CU_ASSERT_EQUAL(strncmp(p.name, "host", 4), 0);
  CU_ASSERT_TRUE(p.multiprocessor_count >= 1);
  CU_ASSERT_TRUE(p.total_memory > (size_t)1 << 20);
  CU_ASSERT_EQUAL(p.major, 0);
  size_t free_bytes = 0, total = 0;
  CHECK_OK(recap_device_mem_get_info(host_device, &free_bytes, &total));
  CU_ASSERT_EQUAL(total, p.total_memory);
  CU_ASSERT_TRUE(free_bytes <= total);
}

static void test_host_mem_alloc_is_aligned_and_counted_in_mem_info(void) {
  size_t free_before, free_after, free_end, total;
  CHECK_OK(recap_device_mem_get_info(host_device, &free_before, &total));
  void *p = NULL;
  CHECK_OK(host()->mem_alloc(0, 1000, &p));
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  CU_ASSERT_EQUAL((uintptr_t)p % 256, 0);
  memset(p, 0x5a, 1000); /* the whole request is usable */
  CHECK_OK(recap_device_mem_get_info(host_device, &free_after, &total));
  CU_ASSERT_EQUAL(free_before - free_after, 1000);
  CHECK_OK(host()->mem_free(0, p));
  CHECK_OK(recap_device_mem_get_info(host_device, &free_end, &total));
  CU_ASSERT_EQUAL(free_end, free_before);
}

static void test_host_mem_free_rejects_foreign_and_double_free(void) {
  int local = 0;
  CHECK_STATUS(host()->mem_free(0, &local), RECAP_STATUS_INVALID_ARGUMENT);
  void *p = NULL;
  CHECK_OK(host()->mem_alloc(0, 64, &p));
  CHECK_OK(host()->mem_free(0, p));
  CHECK_STATUS(host()->mem_free(0, p), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("freed already");
  CHECK_OK(host()->mem_free(0, NULL));
}

static void test_host_mem_alloc_beyond_env_capacity_is_out_of_memory(void) {
  CU_ASSERT_EQUAL_FATAL(setenv("RECAP_HOST_MEMORY_BYTES", "1048576", 1), 0);
  size_t free_bytes, total;
  CHECK_OK(recap_device_mem_get_info(host_device, &free_bytes, &total));
  CU_ASSERT_EQUAL(total, 1048576);
  void *half = NULL, *more = NULL;
  CHECK_OK(host()->mem_alloc(0, 512 * 1024, &half));
  CHECK_STATUS(host()->mem_alloc(0, 768 * 1024, &more), RECAP_STATUS_OUT_OF_MEMORY);
  CHECK_ERROR_MENTIONS("RECAP_HOST_MEMORY_BYTES");
  CU_ASSERT_PTR_NULL(more);
  CHECK_OK(host()->mem_free(0, half));
  CU_ASSERT_EQUAL(setenv("RECAP_HOST_MEMORY_BYTES", "lots", 1), 0);
  CHECK_STATUS(host()->mem_alloc(0, 16, &more), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("RECAP_HOST_MEMORY_BYTES");
  unsetenv("RECAP_HOST_MEMORY_BYTES");
  CHECK_OK(host()->mem_alloc(0, 768 * 1024, &more));
  CHECK_OK(host()->mem_free(0, more));
}

/* ---- streams ---- */

static void test_host_stream_priority_is_clamped_to_range(void) {
  recap_stream *high = NULL, *low = NULL;
  CHECK_OK(recap_stream_create(host_device, -100, 0, &high));
  CHECK_OK(recap_stream_create(host_device, 7, 0, &low));
  CU_ASSERT_EQUAL(recap_stream_priority(high), -5);
  CU_ASSERT_EQUAL(recap_stream_priority(low), 0);
  CU_ASSERT_PTR_NULL(recap_stream_native(high)); /* no cudaStream_t on host */
  CHECK_OK(recap_stream_destroy(high));
  CHECK_OK(recap_stream_destroy(low));
}

static void test_host_stream_destroy_null_is_ok(void) {
  CHECK_OK(recap_stream_destroy(NULL));
}

static void test_host_stream_wrap_external_is_not_supported(void) {
  recap_stream *s = NULL;
  int fake = 0;
  CHECK_STATUS(recap_stream_wrap_external(host_device, &fake, &s), RECAP_STATUS_NOT_SUPPORTED);
}

static void test_host_events_have_no_native_streams(void) {
  recap_event *e = event_new(0);
  int fake = 0;
  CHECK_STATUS(recap_event_record_native(e, &fake), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("no CUDA streams");
  CHECK_STATUS(recap_native_stream_wait_event(&fake, e), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_STATUS(recap_event_record_native(NULL, &fake), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_native_stream_wait_event(&fake, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  recap_event_destroy(e);
}

static void test_host_stream_destroy_while_capturing_is_busy(void) {
  recap_stream *s = stream_new(), *side = stream_new();
  recap_event *fork = event_new(0), *join = event_new(0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s && side && fork && join);
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_STATUS(recap_stream_destroy(s), RECAP_STATUS_BUSY);
  CHECK_OK(recap_event_record(fork, s));
  CHECK_OK(recap_stream_wait_event(side, fork));
  CHECK_STATUS(recap_stream_destroy(side), RECAP_STATUS_BUSY); /* joined: also in capture */
  CHECK_OK(recap_event_record(join, side));
  CHECK_OK(recap_stream_wait_event(s, join));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(s, &graph));
  host()->graph_destroy(graph);
  CHECK_OK(recap_stream_destroy(side));
  CHECK_OK(recap_stream_destroy(s));
  recap_event_destroy(fork);
  recap_event_destroy(join);
}

typedef struct {
  recap_stream *seen;
  recap_status status;
} current_probe;

static void *probe_current_stream(void *p) {
  current_probe *probe = p;
  probe->status = recap_device_set(host_device);
  if (probe->status == RECAP_OK) probe->status = recap_stream_current(&probe->seen);
  return NULL;
}

static void test_host_current_stream_is_per_thread_and_never_null(void) {
  CHECK_OK(recap_device_set(host_device));
  recap_stream *original = NULL, *mine = stream_new(), *now = NULL;
  CU_ASSERT_PTR_NOT_NULL_FATAL(mine);
  CHECK_OK(recap_stream_current(&original));
  CU_ASSERT_PTR_NOT_NULL_FATAL(original);
  CHECK_OK(recap_stream_set_current(mine));
  CHECK_OK(recap_stream_current(&now));
  CU_ASSERT_PTR_EQUAL(now, mine);
  current_probe probe = {NULL, RECAP_STATUS_INTERNAL};
  pthread_t thread;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&thread, NULL, probe_current_stream, &probe), 0);
  pthread_join(thread, NULL);
  CHECK_OK(probe.status);
  CU_ASSERT_PTR_NOT_NULL(probe.seen);
  CU_ASSERT_PTR_NOT_EQUAL(probe.seen, mine);
  CHECK_OK(recap_stream_set_current(original));
  CHECK_OK(recap_stream_destroy(mine));
}

static void test_host_eager_work_runs_at_submission(void) {
  recap_stream *s = stream_new();
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  atomic_int counter = 0;
  CHECK_OK(launch_add(s, &counter, 3));
  CU_ASSERT_EQUAL(atomic_load(&counter), 3);
  char src[32], dst[32];
  memset(src, 'a', sizeof src);
  CHECK_OK(host()->memset_async(dst, 'z', sizeof dst, s));
  CU_ASSERT_EQUAL(dst[31], 'z');
  CHECK_OK(host()->memcpy_async(dst, src, sizeof dst, s));
  CU_ASSERT_EQUAL(memcmp(dst, src, sizeof dst), 0);
  CHECK_OK(recap_stream_query(s));
  CHECK_OK(recap_stream_synchronize(s));
  CHECK_OK(recap_device_synchronize(host_device));
  CHECK_OK(recap_stream_destroy(s));
}

/* ---- events ---- */

static void test_host_never_recorded_event_is_complete(void) {
  recap_event *e = event_new(0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(e);
  CHECK_OK(recap_event_query(e));
  CHECK_OK(recap_event_synchronize(e));
  CHECK_OK(recap_event_destroy(e));
  CHECK_OK(recap_event_destroy(NULL));
}

static void test_host_elapsed_ms_is_positive_and_ordered(void) {
  recap_stream *s = stream_new();
  recap_event *a = event_new(RECAP_EVENT_TIMING), *b = event_new(RECAP_EVENT_TIMING);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s && a && b);
  float ms = 0;
  CHECK_STATUS(recap_event_elapsed_ms(a, b, &ms), RECAP_STATUS_INVALID_ARGUMENT); /* unrecorded */
  CHECK_OK(recap_event_record(a, s));
  struct timespec pause = {0, 3 * 1000 * 1000};
  nanosleep(&pause, NULL);
  CHECK_OK(recap_event_record(b, s));
  CHECK_OK(recap_event_query(b));
  CHECK_OK(recap_event_elapsed_ms(a, b, &ms));
  CU_ASSERT_TRUE(ms >= 2.5f);
  CU_ASSERT_TRUE(ms < 10000.0f);
  float back = 0;
  CHECK_OK(recap_event_elapsed_ms(b, a, &back));
  CU_ASSERT_TRUE(back < 0);
  recap_event_destroy(a);
  recap_event_destroy(b);
  recap_stream_destroy(s);
}

static void test_host_elapsed_ms_without_timing_flag_is_rejected(void) {
  recap_stream *s = stream_new();
  recap_event *a = event_new(RECAP_EVENT_TIMING), *b = event_new(RECAP_EVENT_DEFAULT);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s && a && b);
  CHECK_OK(recap_event_record(a, s));
  CHECK_OK(recap_event_record(b, s));
  float ms;
  CHECK_STATUS(recap_event_elapsed_ms(a, b, &ms), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("RECAP_EVENT_TIMING");
  recap_event_destroy(a);
  recap_event_destroy(b);
  recap_stream_destroy(s);
}

static void test_host_interprocess_events_are_refused(void) {
  recap_event *e = NULL;
  CHECK_STATUS(recap_event_create(host_device, RECAP_EVENT_INTERPROCESS | RECAP_EVENT_TIMING, &e),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_event_create(host_device, RECAP_EVENT_INTERPROCESS, &e),
               RECAP_STATUS_NOT_SUPPORTED);
  CU_ASSERT_PTR_NULL(e);
}

/* ---- capture and replay ---- */

static void test_host_capture_records_work_and_replay_runs_it(void) {
  recap_stream *s = stream_new();
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  atomic_int counter = 0;
  int src[8] = {1, 2, 3, 4, 5, 6, 7, 8}, dst[8] = {0}, fill[4] = {0};
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CU_ASSERT_TRUE(recap_stream_is_capturing(s));
  CHECK_OK(launch_add(s, &counter, 1));
  CHECK_OK(host()->memcpy_async(dst, src, sizeof dst, s));
  CHECK_OK(host()->memset_async(fill, 0xff, sizeof fill, s));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(s, &graph));
  CU_ASSERT_FALSE(recap_stream_is_capturing(s));
  CU_ASSERT_EQUAL(atomic_load(&counter), 0); /* recorded, not run */
  CU_ASSERT_EQUAL(dst[0], 0);
  size_t nodes = 0;
  CHECK_OK(host()->graph_node_count(graph, &nodes));
  CU_ASSERT_EQUAL(nodes, 3);
  recap__graph_exec *exec = NULL;
  CHECK_OK(host()->graph_instantiate(graph, &exec));
  host()->graph_destroy(graph); /* the exec keeps its own copy */
  CHECK_OK(host()->graph_upload(exec, s));
  for (int replay = 1; replay <= 3; replay++) {
    CHECK_OK(host()->graph_launch(exec, s));
    CU_ASSERT_EQUAL(atomic_load(&counter), replay);
  }
  CU_ASSERT_EQUAL(memcmp(dst, src, sizeof dst), 0);
  CU_ASSERT_EQUAL(fill[3], -1);
  host()->graph_exec_destroy(exec);
  recap_stream_destroy(s);
}

static void test_host_replay_uses_captured_argument_bytes(void) {
  recap_stream *s = stream_new();
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  int old_buffer = 0, new_buffer = 0;
  store_args args = {&old_buffer, 41};
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(host()->launch_host(s, store_fn, &args, sizeof args));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(s, &graph));
  /* The caller swaps its buffer and value without updating the graph: a replay must not
   * see either, as a CUDA graph keeps the kernel parameters it captured. */
  args.target = &new_buffer;
  args.value = 99;
  recap__graph_exec *exec = NULL;
  CHECK_OK(host()->graph_instantiate(graph, &exec));
  CHECK_OK(host()->graph_launch(exec, s));
  CU_ASSERT_EQUAL(old_buffer, 41);
  CU_ASSERT_EQUAL(new_buffer, 0);
  host()->graph_exec_destroy(exec);
  host()->graph_destroy(graph);
  recap_stream_destroy(s);
}

static void test_host_fork_join_capture_replays_in_order(void) {
  recap_stream *s = stream_new(), *side = stream_new();
  recap_event *fork = event_new(0), *join = event_new(0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s && side && fork && join);
  order_log log = {{0}, 0};
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(launch_log(s, &log, 1));
  CHECK_OK(recap_event_record(fork, s));
  CHECK_OK(recap_stream_wait_event(side, fork));
  recap_capture_status cs = RECAP_CAPTURE_NONE;
  CHECK_OK(recap_stream_capture_status(side, &cs));
  CU_ASSERT_EQUAL(cs, RECAP_CAPTURE_ACTIVE); /* joined */
  CHECK_OK(launch_log(side, &log, 2));
  CHECK_OK(launch_log(s, &log, 3));
  CHECK_OK(recap_event_record(join, side));
  CHECK_OK(recap_stream_wait_event(s, join));
  CHECK_OK(launch_log(s, &log, 4));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(s, &graph));
  CU_ASSERT_EQUAL(log.count, 0);
  CHECK_OK(recap_stream_capture_status(side, &cs));
  CU_ASSERT_EQUAL(cs, RECAP_CAPTURE_NONE); /* every joined stream left the capture */
  size_t nodes = 0;
  CHECK_OK(host()->graph_node_count(graph, &nodes));
  CU_ASSERT_EQUAL(nodes, 4);
  recap__graph_exec *exec = NULL;
  CHECK_OK(host()->graph_instantiate(graph, &exec));
  CHECK_OK(host()->graph_launch(exec, s));
  CU_ASSERT_EQUAL_FATAL(log.count, 4);
  for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL(log.items[i], i + 1);
  /* An event recorded in a capture that has ended has nothing pending. */
  CHECK_OK(recap_event_query(join));
  host()->graph_exec_destroy(exec);
  host()->graph_destroy(graph);
  recap_event_destroy(fork);
  recap_event_destroy(join);
  recap_stream_destroy(side);
  recap_stream_destroy(s);
}

static void test_host_wait_stream_forks_and_joins_a_capture(void) {
  recap_stream *s = stream_new(), *side = stream_new();
  CU_ASSERT_PTR_NOT_NULL_FATAL(s && side);
  atomic_int counter = 0;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(recap_stream_wait_stream(side, s)); /* its temporary event is destroyed at once */
  CHECK_OK(launch_add(side, &counter, 5));
  CHECK_OK(recap_stream_wait_stream(s, side));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(s, &graph));
  recap__graph_exec *exec = NULL;
  CHECK_OK(host()->graph_instantiate(graph, &exec));
  CHECK_OK(host()->graph_launch(exec, s));
  CU_ASSERT_EQUAL(atomic_load(&counter), 5);
  host()->graph_exec_destroy(exec);
  host()->graph_destroy(graph);
  recap_stream_destroy(side);
  recap_stream_destroy(s);
}

static void test_host_unjoined_side_stream_invalidates_capture(void) {
  recap_stream *s = stream_new(), *side = stream_new();
  recap_event *fork = event_new(0), *join = event_new(0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s && side && fork && join);
  atomic_int counter = 0;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(recap_event_record(fork, s));
  CHECK_OK(recap_stream_wait_event(side, fork));
  CHECK_OK(recap_event_record(join, side));
  CHECK_OK(recap_stream_wait_event(s, join));
  CHECK_OK(launch_add(side, &counter, 1)); /* after the join: never waited on */
  recap__graph *graph = NULL;
  CHECK_STATUS(recap__capture_end(s, &graph), RECAP_STATUS_CAPTURE_INVALIDATED);
  CHECK_ERROR_MENTIONS("unjoined");
  CU_ASSERT_PTR_NULL(graph);
  CU_ASSERT_FALSE(recap_stream_is_capturing(side));
  CU_ASSERT_EQUAL(recap__capture_count(), 0);
  CU_ASSERT_EQUAL(atomic_load(&counter), 0);
  recap_event_destroy(fork);
  recap_event_destroy(join);
  CHECK_OK(recap_stream_destroy(side));
  CHECK_OK(recap_stream_destroy(s));
}

static void test_host_wait_on_event_of_another_capture_is_illegal(void) {
  recap_stream *a = stream_new(), *b = stream_new();
  recap_event *e = event_new(0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a && b && e);
  CHECK_OK(recap__capture_begin(a, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(recap__capture_begin(b, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(recap_event_record(e, a));
  CHECK_STATUS(recap_stream_wait_event(b, e), RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CHECK_ERROR_MENTIONS("another capture");
  recap__graph *graph = NULL;
  CHECK_STATUS(recap__capture_end(b, &graph), RECAP_STATUS_CAPTURE_INVALIDATED);
  CHECK_OK(recap__capture_end(a, &graph)); /* the other capture is intact */
  host()->graph_destroy(graph);
  recap_event_destroy(e);
  recap_stream_destroy(a);
  recap_stream_destroy(b);
}

/* Each illegal call: fails with ILLEGAL_DURING_CAPTURE naming itself, invalidates the
 * capture (later work on the stream is refused), capture_end reports it, and a new capture
 * on the same stream then works. */
typedef recap_status (*illegal_call)(recap_stream *capturing, recap_event *captured_event);

static void expect_illegal_invalidates(illegal_call call, const char *named) {
  recap_stream *s = stream_new();
  recap_event *e = event_new(0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s && e);
  atomic_int counter = 0;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(launch_add(s, &counter, 1));
  CHECK_OK(recap_event_record(e, s));
  CHECK_STATUS(call(s, e), RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CHECK_ERROR_MENTIONS(named);
  recap_capture_status cs = RECAP_CAPTURE_NONE;
  CHECK_OK(recap_stream_capture_status(s, &cs));
  CU_ASSERT_EQUAL(cs, RECAP_CAPTURE_INVALIDATED);
  CHECK_STATUS(launch_add(s, &counter, 1), RECAP_STATUS_CAPTURE_INVALIDATED);
  recap__graph *graph = NULL;
  CHECK_STATUS(recap__capture_end(s, &graph), RECAP_STATUS_CAPTURE_INVALIDATED);
  CHECK_ERROR_MENTIONS(named);
  CU_ASSERT_PTR_NULL(graph);
  CU_ASSERT_FALSE(recap_stream_is_capturing(s));
  CU_ASSERT_EQUAL(recap__capture_count(), 0);
  CU_ASSERT_EQUAL(atomic_load(&counter), 0);

  graph = capture_one_add(s, &counter, 1);
  CU_ASSERT_PTR_NOT_NULL(graph);
  size_t nodes = 0;
  if (graph) CHECK_OK(host()->graph_node_count(graph, &nodes));
  CU_ASSERT_EQUAL(nodes, 1);
  host()->graph_destroy(graph);
  recap_event_destroy(e);
  CHECK_OK(recap_stream_destroy(s));
}

static recap_status call_stream_synchronize(recap_stream *s, recap_event *e) {
  (void)e;
  return recap_stream_synchronize(s);
}

static recap_status call_stream_query(recap_stream *s, recap_event *e) {
  (void)e;
  return recap_stream_query(s);
}

static recap_status call_event_query(recap_stream *s, recap_event *e) {
  (void)s;
  return recap_event_query(e);
}

static recap_status call_event_synchronize(recap_stream *s, recap_event *e) {
  (void)s;
  return recap_event_synchronize(e);
}

static recap_status call_device_synchronize(recap_stream *s, recap_event *e) {
  (void)s;
  (void)e;
  return recap_device_synchronize(host_device);
}

static recap_status call_mem_alloc(recap_stream *s, recap_event *e) {
  (void)s;
  (void)e;
  void *p = NULL;
  recap_status st = host()->mem_alloc(0, 256, &p);
  if (st == RECAP_OK) host()->mem_free(0, p); /* only reached if the rule is broken */
  return st;
}

typedef struct {
  recap_status status;
  char message[1024];
} thread_result;

static void *mem_alloc_thread(void *p) {
  thread_result *r = p;
  r->status = call_mem_alloc(NULL, NULL);
  snprintf(r->message, sizeof r->message, "%s", recap_last_error());
  return NULL;
}

/* Runs mem_alloc on a new thread (whose interaction mode is the default, GLOBAL) and brings
 * its status and message back to this thread. */
static recap_status call_mem_alloc_on_other_thread(recap_stream *s, recap_event *e) {
  (void)s;
  (void)e;
  thread_result r = {RECAP_STATUS_INTERNAL, "thread did not run"};
  pthread_t thread;
  if (pthread_create(&thread, NULL, mem_alloc_thread, &r) != 0) return RECAP_STATUS_INTERNAL;
  pthread_join(thread, NULL);
  return r.status == RECAP_OK ? RECAP_OK : recap__fail_plain(r.status, "%s", r.message);
}

static void test_host_stream_synchronize_during_capture_is_illegal(void) {
  expect_illegal_invalidates(call_stream_synchronize, "stream synchronize");
}

static void test_host_stream_query_during_capture_is_illegal(void) {
  expect_illegal_invalidates(call_stream_query, "stream query");
}

static void test_host_event_query_on_captured_event_is_illegal(void) {
  expect_illegal_invalidates(call_event_query, "event query");
}

static void test_host_event_synchronize_on_captured_event_is_illegal(void) {
  expect_illegal_invalidates(call_event_synchronize, "event synchronize");
}

static void test_host_device_synchronize_during_capture_is_illegal(void) {
  expect_illegal_invalidates(call_device_synchronize, "device synchronize");
}

static void test_host_mem_alloc_in_global_capture_is_illegal(void) {
  expect_illegal_invalidates(call_mem_alloc, "mem_alloc");
}

static void test_host_mem_alloc_from_other_thread_in_global_capture_is_illegal(void) {
  expect_illegal_invalidates(call_mem_alloc_on_other_thread, "another thread");
}

static void test_host_relaxed_interaction_mode_allows_mem_alloc(void) {
  recap_stream *s = stream_new();
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  recap_capture_mode mode = RECAP_CAPTURE_MODE_RELAXED;
  CHECK_OK(host()->exchange_capture_mode(&mode));
  CU_ASSERT_EQUAL(mode, RECAP_CAPTURE_MODE_GLOBAL); /* the default */
  void *p = NULL;
  CHECK_OK(host()->mem_alloc(0, 4096, &p));
  CHECK_OK(host()->mem_free(0, p));
  CHECK_OK(host()->exchange_capture_mode(&mode));
  CU_ASSERT_EQUAL(mode, RECAP_CAPTURE_MODE_RELAXED);
  recap_capture_status cs;
  CHECK_OK(recap_stream_capture_status(s, &cs));
  CU_ASSERT_EQUAL(cs, RECAP_CAPTURE_ACTIVE);
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(s, &graph));
  host()->graph_destroy(graph);
  recap_stream_destroy(s);
}

static void test_host_thread_local_capture_allows_other_thread_mem_alloc(void) {
  recap_stream *s = stream_new();
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  CHECK_OK(call_mem_alloc_on_other_thread(NULL, NULL));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(s, &graph));
  host()->graph_destroy(graph);
  recap_stream_destroy(s);
}

/* A call from another thread, in its own interaction mode, on its own stream and an event
 * recorded there before the capture began. */
typedef struct {
  recap_capture_mode mode;
  recap_status (*call)(recap_stream *, recap_event *);
  recap_stream *stream;
  recap_event *event;
  thread_result result;
} other_thread_call;

static void *other_thread_call_run(void *p) {
  other_thread_call *c = p;
  recap_capture_mode mode = c->mode;
  c->result.status = host()->exchange_capture_mode(&mode);
  if (c->result.status == RECAP_OK) c->result.status = c->call(c->stream, c->event);
  snprintf(c->result.message, sizeof c->result.message, "%s", recap_last_error());
  return NULL;
}

/* What CUDA did on an H200 (driver 580, a probe of every pairing of modes; docs/RELIABILITY.md
 * "Capture rules") when one thread captured and another, never capturing, made a call on its
 * own stream or an event recorded outside the capture: in global mode against a global capture
 * a synchronize or query of a stream or an event failed and invalidated the capture; in
 * thread-local or relaxed mode, or against a thread-local or relaxed capture, it was allowed;
 * a device synchronize failed and invalidated the capture whatever the modes. */
static void test_host_other_threads_calls_follow_the_measured_capture_rules(void) {
  enum {
    G = RECAP_CAPTURE_MODE_GLOBAL,
    T = RECAP_CAPTURE_MODE_THREAD_LOCAL,
    R = RECAP_CAPTURE_MODE_RELAXED
  };
  static const struct {
    recap_capture_mode capture, other;
    recap_status (*call)(recap_stream *, recap_event *);
    const char *name;
    bool illegal;
  } cases[] = {
      {G, G, call_stream_synchronize, "stream synchronize", true},
      {G, G, call_stream_query, "stream query", true},
      {G, G, call_event_synchronize, "event synchronize", true},
      {G, G, call_event_query, "event query", true},
      {G, G, call_device_synchronize, "device synchronize", true},
      {G, T, call_stream_synchronize, "stream synchronize", false},
      {G, T, call_event_query, "event query", false},
      {G, T, call_device_synchronize, "device synchronize", true},
      {G, R, call_stream_query, "stream query", false},
      {G, R, call_device_synchronize, "device synchronize", true},
      {T, G, call_stream_synchronize, "stream synchronize", false},
      {T, G, call_event_synchronize, "event synchronize", false},
      {T, G, call_device_synchronize, "device synchronize", true},
      {R, R, call_stream_synchronize, "stream synchronize", false},
      {R, R, call_device_synchronize, "device synchronize", true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    recap_stream *s = stream_new(), *own = stream_new();
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(own);
    recap_event *e = NULL;
    CHECK_OK(recap_event_create(host_device, 0, &e));
    CHECK_OK(recap_event_record(e, own));
    CHECK_OK(recap__capture_begin(s, cases[i].capture));
    other_thread_call c = {cases[i].other, cases[i].call, own, e, {RECAP_STATUS_INTERNAL, ""}};
    pthread_t thread;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&thread, NULL, other_thread_call_run, &c), 0);
    pthread_join(thread, NULL);
    recap__graph *graph = NULL;
    recap_status end = recap__capture_end(s, &graph);
    if (cases[i].illegal) {
      CU_ASSERT_EQUAL(c.result.status, RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
      CU_ASSERT_PTR_NOT_NULL(strstr(c.result.message, cases[i].name));
      CU_ASSERT_EQUAL(end, RECAP_STATUS_CAPTURE_INVALIDATED);
    } else {
      CU_ASSERT_EQUAL(c.result.status, RECAP_OK);
      CU_ASSERT_EQUAL(end, RECAP_OK);
    }
    if ((c.result.status == RECAP_OK) == cases[i].illegal)
      fprintf(stderr, "\n  case %zu (%s): %s\n", i, cases[i].name, c.result.message);
    host()->graph_destroy(graph);
    recap_event_destroy(e);
    CHECK_OK(recap_stream_destroy(own));
    CHECK_OK(recap_stream_destroy(s));
  }
}

typedef struct {
  recap_stream *stream;
  thread_result result;
} end_job;

static void *end_capture_thread(void *p) {
  end_job *job = p;
  recap__graph *graph = NULL;
  job->result.status = recap__capture_end(job->stream, &graph);
  snprintf(job->result.message, sizeof job->result.message, "%s", recap_last_error());
  host()->graph_destroy(graph);
  return NULL;
}

static void test_host_capture_end_on_wrong_thread_discards_global_capture(void) {
  recap_stream *s = stream_new();
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  end_job job = {s, {RECAP_STATUS_INTERNAL, ""}};
  pthread_t thread;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&thread, NULL, end_capture_thread, &job), 0);
  pthread_join(thread, NULL);
  CHECK_STATUS(job.result.status, RECAP_STATUS_CAPTURE_INVALIDATED);
  CU_ASSERT_PTR_NOT_NULL(strstr(job.result.message, "thread that began"));
  CU_ASSERT_FALSE(recap_stream_is_capturing(s));
  CU_ASSERT_EQUAL(recap__capture_count(), 0);
  CHECK_OK(recap_stream_destroy(s));
}

/* ---- sticky faults ---- */

static void test_host_failing_host_fn_is_a_sticky_device_error(void) {
  recap_stream *s = stream_new();
  recap_event *e = event_new(0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s && e);
  CHECK_STATUS(host()->launch_host(s, failing_fn, NULL, 0), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("planted kernel failure");
  CHECK_STATUS(recap_stream_synchronize(s), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("a host kernel failed earlier");
  CHECK_ERROR_MENTIONS("planted kernel failure");
  CHECK_STATUS(recap_event_record(e, s), RECAP_STATUS_DEVICE_ERROR);
  void *p = NULL;
  CHECK_STATUS(host()->mem_alloc(0, 64, &p), RECAP_STATUS_DEVICE_ERROR);
  CHECK_STATUS(recap_device_synchronize(host_device), RECAP_STATUS_DEVICE_ERROR);
  atomic_int counter = 0;
  CHECK_STATUS(launch_add(s, &counter, 1), RECAP_STATUS_DEVICE_ERROR);
  CU_ASSERT_EQUAL(atomic_load(&counter), 0);
  CHECK_STATUS(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL), RECAP_STATUS_DEVICE_ERROR);
  recap_device_properties props; /* property queries still answer */
  CHECK_OK(recap_device_properties_get(host_device, &props));
  recap__host_backend_reset_fault_for_testing();
  CHECK_OK(recap_stream_synchronize(s));
  CHECK_OK(launch_add(s, &counter, 1));
  CU_ASSERT_EQUAL(atomic_load(&counter), 1);
  recap_event_destroy(e);
  recap_stream_destroy(s);
}

static void test_host_failing_node_in_replay_is_a_sticky_device_error(void) {
  recap_stream *s = stream_new();
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  atomic_int counter = 0;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(host()->launch_host(s, failing_fn, NULL, 0)); /* recorded, not run */
  CHECK_OK(launch_add(s, &counter, 1));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(s, &graph));
  recap__graph_exec *exec = NULL;
  CHECK_OK(host()->graph_instantiate(graph, &exec));
  CHECK_STATUS(host()->graph_launch(exec, s), RECAP_STATUS_DEVICE_ERROR);
  CU_ASSERT_EQUAL(atomic_load(&counter), 0); /* replay stopped at the fault */
  CHECK_STATUS(host()->graph_launch(exec, s), RECAP_STATUS_DEVICE_ERROR);
  CHECK_ERROR_MENTIONS("a host kernel failed earlier");
  CHECK_STATUS(recap_stream_query(s), RECAP_STATUS_DEVICE_ERROR);
  /* Teardown still releases everything while faulted. */
  host()->graph_exec_destroy(exec);
  host()->graph_destroy(graph);
  CHECK_OK(recap_stream_destroy(s));
  recap__host_backend_reset_fault_for_testing();
  s = stream_new();
  CU_ASSERT_PTR_NOT_NULL(s);
  recap_stream_destroy(s);
}

/* ---- graphs ---- */

static recap__graph *capture_store(recap_stream *s, recap__host_fn fn, int *target, int value,
                                   int repeat) {
  recap__graph *graph = NULL;
  if (recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL) != RECAP_OK) return NULL;
  store_args args = {target, value};
  recap_status st = RECAP_OK;
  for (int i = 0; i < repeat && st == RECAP_OK; i++)
    st = host()->launch_host(s, fn, &args, sizeof args);
  recap_status end = recap__capture_end(s, &graph);
  if (st != RECAP_OK || end != RECAP_OK) {
    host()->graph_destroy(graph);
    return NULL;
  }
  return graph;
}

static void test_host_exec_update_same_topology_takes_new_arguments(void) {
  recap_stream *s = stream_new();
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  int x = 0, y = 0;
  recap__graph *first = capture_store(s, store_fn, &x, 1, 1);
  recap__graph *second = capture_store(s, store_fn, &y, 2, 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(first && second);
  recap__graph_exec *exec = NULL;
  CHECK_OK(host()->graph_instantiate(first, &exec));
  CHECK_OK(host()->graph_exec_update(exec, second));
  CHECK_OK(host()->graph_launch(exec, s));
  CU_ASSERT_EQUAL(x, 0);
  CU_ASSERT_EQUAL(y, 2);
  host()->graph_exec_destroy(exec);
  host()->graph_destroy(first);
  host()->graph_destroy(second);
  recap_stream_destroy(s);
}

static void test_host_exec_update_other_topology_is_not_supported(void) {
  recap_stream *s = stream_new();
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  int x = 0, y = 0;
  recap__graph *one = capture_store(s, store_fn, &x, 1, 1);
  recap__graph *two = capture_store(s, store_fn, &y, 2, 2);
  recap__graph *other_fn = capture_store(s, store_other_fn, &y, 3, 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(one && two && other_fn);
  recap__graph_exec *exec = NULL;
  CHECK_OK(host()->graph_instantiate(one, &exec));
  CHECK_STATUS(host()->graph_exec_update(exec, two), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("topology");
  CHECK_STATUS(host()->graph_exec_update(exec, other_fn), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("host function");
  /* A refused update leaves the exec as it was. */
  CHECK_OK(host()->graph_launch(exec, s));
  CU_ASSERT_EQUAL(x, 1);
  CU_ASSERT_EQUAL(y, 0);
  host()->graph_exec_destroy(exec);
  host()->graph_destroy(one);
  host()->graph_destroy(two);
  host()->graph_destroy(other_fn);
  recap_stream_destroy(s);
}

static void test_host_graph_launch_during_capture_records_a_child_graph(void) {
  recap_stream *s = stream_new();
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  atomic_int counter = 0;
  recap__graph *inner = capture_one_add(s, &counter, 10);
  CU_ASSERT_PTR_NOT_NULL_FATAL(inner);
  recap__graph_exec *inner_exec = NULL;
  CHECK_OK(host()->graph_instantiate(inner, &inner_exec));
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(host()->graph_launch(inner_exec, s));
  CHECK_OK(launch_add(s, &counter, 1));
  recap__graph *outer = NULL;
  CHECK_OK(recap__capture_end(s, &outer));
  CU_ASSERT_EQUAL(atomic_load(&counter), 0);
  host()->graph_exec_destroy(inner_exec); /* the child node holds its own copy */
  size_t nodes = 0;
  CHECK_OK(host()->graph_node_count(outer, &nodes));
  CU_ASSERT_EQUAL(nodes, 2);
  recap__graph_exec *exec = NULL;
  CHECK_OK(host()->graph_instantiate(outer, &exec));
  CHECK_OK(host()->graph_launch(exec, s));
  CU_ASSERT_EQUAL(atomic_load(&counter), 11);
  host()->graph_exec_destroy(exec);
  host()->graph_destroy(outer);
  host()->graph_destroy(inner);
  recap_stream_destroy(s);
}

static void test_host_graph_debug_dot_writes_one_node_per_graph_node(void) {
  recap_stream *s = stream_new(), *side = stream_new();
  CU_ASSERT_PTR_NOT_NULL_FATAL(s && side);
  atomic_int counter = 0;
  CHECK_OK(recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(recap_stream_wait_stream(side, s));
  CHECK_OK(launch_add(side, &counter, 1));
  CHECK_OK(launch_add(s, &counter, 1));
  CHECK_OK(recap_stream_wait_stream(s, side));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(s, &graph));
  const char *dir = getenv("TEST_TMPDIR");
  char path[512];
  snprintf(path, sizeof path, "%s/host_graph.dot", dir ? dir : "/tmp");
  CHECK_OK(host()->graph_debug_dot(graph, path));
  FILE *f = fopen(path, "r");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  char line[256];
  int nodes = 0, edges = 0, digraph = 0;
  while (fgets(line, sizeof line, f)) {
    if (strstr(line, "digraph")) digraph++;
    if (strstr(line, "[label=")) nodes++;
    if (strstr(line, "->")) edges++;
  }
  fclose(f);
  remove(path);
  /* record(s), wait(side), add(side), add(s), record(side), wait(s) */
  CU_ASSERT_EQUAL(digraph, 1);
  CU_ASSERT_EQUAL(nodes, 6);
  CU_ASSERT_EQUAL(edges, 6); /* 5 stream-order edges, wait(s) has two */
  CHECK_STATUS(host()->graph_debug_dot(graph, "/nonexistent-dir/x.dot"), RECAP_STATUS_IO_ERROR);
  host()->graph_destroy(graph);
  recap_stream_destroy(side);
  recap_stream_destroy(s);
}

/* ---- threads ---- */

typedef struct {
  pthread_barrier_t *both_capturing;
  int adds;
  atomic_int counter;
  recap_status status;
  char message[1024];
} capture_job;

static recap_status capture_and_replay(capture_job *job) {
  recap_stream *s = NULL;
  recap__graph *graph = NULL;
  recap__graph_exec *exec = NULL;
  recap_status st;
  RECAP_TRY(recap_stream_create(host_device, 0, RECAP_STREAM_NON_BLOCKING, &s));
  RECAP_TRY_GOTO(st, recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL), fail);
  pthread_barrier_wait(job->both_capturing);
  for (int i = 0; i < job->adds; i++) {
    st = launch_add(s, &job->counter, 1);
    if (st != RECAP_OK) break;
  }
  pthread_barrier_wait(job->both_capturing); /* both still capturing here */
  recap_status end = recap__capture_end(s, &graph);
  if (st == RECAP_OK) st = end;
  if (st != RECAP_OK) goto fail;
  RECAP_TRY_GOTO(st, host()->graph_instantiate(graph, &exec), fail);
  RECAP_TRY_GOTO(st, host()->graph_launch(exec, s), fail);
  if (atomic_load(&job->counter) != job->adds)
    st = recap__fail_plain(RECAP_STATUS_INTERNAL, "replay ran %d adds, expected %d",
                           atomic_load(&job->counter), job->adds);
fail:
  host()->graph_exec_destroy(exec);
  host()->graph_destroy(graph);
  recap_stream_destroy(s);
  return st;
}

static void *capture_thread(void *p) {
  capture_job *job = p;
  job->status = capture_and_replay(job);
  snprintf(job->message, sizeof job->message, "%s", recap_last_error());
  return NULL;
}

static void test_host_concurrent_captures_on_two_threads_both_succeed(void) {
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, 2);
  capture_job jobs[2] = {{&barrier, 3, 0, RECAP_STATUS_INTERNAL, ""},
                         {&barrier, 5, 0, RECAP_STATUS_INTERNAL, ""}};
  pthread_t threads[2];
  for (int i = 0; i < 2; i++)
    CU_ASSERT_EQUAL_FATAL(pthread_create(&threads[i], NULL, capture_thread, &jobs[i]), 0);
  for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&barrier);
  for (int i = 0; i < 2; i++) {
    if (jobs[i].status != RECAP_OK)
      fprintf(stderr, "\n  capture thread %d: %s\n", i, jobs[i].message);
    CU_ASSERT_EQUAL(jobs[i].status, RECAP_OK);
  }
  CU_ASSERT_EQUAL(recap__capture_count(), 0);
}

int main(void) {
  CU_pSuite device = test_add_suite("host/device+memory", NULL, NULL);
  CU_ADD_TEST(device, test_host_has_exactly_one_device);
  CU_ADD_TEST(device, test_host_properties_name_cpus_and_memory);
  CU_ADD_TEST(device, test_host_mem_alloc_is_aligned_and_counted_in_mem_info);
  CU_ADD_TEST(device, test_host_mem_free_rejects_foreign_and_double_free);
  CU_ADD_TEST(device, test_host_mem_alloc_beyond_env_capacity_is_out_of_memory);

  CU_pSuite streams = test_add_suite("host/streams+events", NULL, NULL);
  CU_ADD_TEST(streams, test_host_stream_priority_is_clamped_to_range);
  CU_ADD_TEST(streams, test_host_stream_destroy_null_is_ok);
  CU_ADD_TEST(streams, test_host_stream_wrap_external_is_not_supported);
  CU_ADD_TEST(streams, test_host_events_have_no_native_streams);
  CU_ADD_TEST(streams, test_host_stream_destroy_while_capturing_is_busy);
  CU_ADD_TEST(streams, test_host_current_stream_is_per_thread_and_never_null);
  CU_ADD_TEST(streams, test_host_eager_work_runs_at_submission);
  CU_ADD_TEST(streams, test_host_never_recorded_event_is_complete);
  CU_ADD_TEST(streams, test_host_elapsed_ms_is_positive_and_ordered);
  CU_ADD_TEST(streams, test_host_elapsed_ms_without_timing_flag_is_rejected);
  CU_ADD_TEST(streams, test_host_interprocess_events_are_refused);

  CU_pSuite capture = test_add_suite("host/capture", NULL, NULL);
  CU_ADD_TEST(capture, test_host_capture_records_work_and_replay_runs_it);
  CU_ADD_TEST(capture, test_host_replay_uses_captured_argument_bytes);
  CU_ADD_TEST(capture, test_host_fork_join_capture_replays_in_order);
  CU_ADD_TEST(capture, test_host_wait_stream_forks_and_joins_a_capture);
  CU_ADD_TEST(capture, test_host_unjoined_side_stream_invalidates_capture);
  CU_ADD_TEST(capture, test_host_wait_on_event_of_another_capture_is_illegal);
  CU_ADD_TEST(capture, test_host_stream_synchronize_during_capture_is_illegal);
  CU_ADD_TEST(capture, test_host_stream_query_during_capture_is_illegal);
  CU_ADD_TEST(capture, test_host_event_query_on_captured_event_is_illegal);
  CU_ADD_TEST(capture, test_host_event_synchronize_on_captured_event_is_illegal);
  CU_ADD_TEST(capture, test_host_device_synchronize_during_capture_is_illegal);
  CU_ADD_TEST(capture, test_host_mem_alloc_in_global_capture_is_illegal);
  CU_ADD_TEST(capture, test_host_mem_alloc_from_other_thread_in_global_capture_is_illegal);
  CU_ADD_TEST(capture, test_host_relaxed_interaction_mode_allows_mem_alloc);
  CU_ADD_TEST(capture, test_host_thread_local_capture_allows_other_thread_mem_alloc);
  CU_ADD_TEST(capture, test_host_other_threads_calls_follow_the_measured_capture_rules);
  CU_ADD_TEST(capture, test_host_capture_end_on_wrong_thread_discards_global_capture);
  CU_ADD_TEST(capture, test_host_concurrent_captures_on_two_threads_both_succeed);

  CU_pSuite faults = test_add_suite("host/faults", NULL, NULL);
  CU_ADD_TEST(faults, test_host_failing_host_fn_is_a_sticky_device_error);
  CU_ADD_TEST(faults, test_host_failing_node_in_replay_is_a_sticky_device_error);

  CU_pSuite graphs = test_add_suite("host/graphs", NULL, NULL);
  CU_ADD_TEST(graphs, test_host_exec_update_same_topology_takes_new_arguments);
  CU_ADD_TEST(graphs, test_host_exec_update_other_topology_is_not_supported);
  CU_ADD_TEST(graphs, test_host_graph_launch_during_capture_records_a_child_graph);
  CU_ADD_TEST(graphs, test_host_graph_debug_dot_writes_one_node_per_graph_node);

  return test_run_all();
}
