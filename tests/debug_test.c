/*
 * debug_test.c: RECAP_LAUNCH_BLOCKING and RECAP_SYNC_DEBUG (runtime/debug.h) on the host
 * backend. Each test sets the variables it needs and reloads them; what the modes print on
 * stderr is captured into a temporary file and compared.
 */
#define _POSIX_C_SOURCE 200809L

#include "runtime/debug.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/error.h"
#include "runtime/host_fault.h"
#include "runtime/host_graph.h"
#include "tests/test_util.h"

static const recap_device host0 = {RECAP_BACKEND_HOST, 0};
static recap_stream *stream;

static int suite_init_on(recap_device device) {
  return recap_stream_create(device, 0, RECAP_STREAM_NON_BLOCKING, &stream) == RECAP_OK ? 0 : 1;
}

static int suite_init(void) {
  return suite_init_on(host0);
}

static int cuda_suite_init(void) {
  recap_device cuda0 = {RECAP_BACKEND_CUDA, 0};
  return suite_init_on(cuda0);
}

static int suite_cleanup(void) {
  unsetenv("RECAP_LAUNCH_BLOCKING");
  unsetenv("RECAP_SYNC_DEBUG");
  recap__debug_reload_env();
  return recap_stream_destroy(stream) == RECAP_OK ? 0 : 1;
}

/* Sets (or, for NULL, unsets) both variables and makes the runtime read them again. */
static void debug_env(const char *launch_blocking, const char *sync_debug) {
  if (launch_blocking)
    setenv("RECAP_LAUNCH_BLOCKING", launch_blocking, 1);
  else
    unsetenv("RECAP_LAUNCH_BLOCKING");
  if (sync_debug)
    setenv("RECAP_SYNC_DEBUG", sync_debug, 1);
  else
    unsetenv("RECAP_SYNC_DEBUG");
  recap__debug_reload_env();
}

/* ---- host "kernels" ---- */

typedef struct {
  atomic_int *done;
} slow_args;

/* Sleeps, so a launch that is not waited for is still running when the launcher returns. */
static recap_status slow_fn(void *p) {
  slow_args *args = p;
  struct timespec delay = {0, 30 * 1000 * 1000};
  nanosleep(&delay, NULL);
  atomic_store(args->done, 1);
  return RECAP_OK;
}

static recap_status failing_fn(void *p) {
  (void)p;
  return RECAP_FAIL(RECAP_STATUS_DEVICE_ERROR, "planted fault in a host kernel");
}

static recap_status launch_slow(recap_stream *s, atomic_int *done) {
  slow_args args = {done};
  return s->backend->launch_host(s, slow_fn, &args, sizeof args);
}

/* A failing host fn is a sticky fault; depending on when the backend runs it, the launch
 * itself may already report it. */
static void launch_failing(recap_stream *s) {
  recap_status st = s->backend->launch_host(s, failing_fn, NULL, 0);
  CU_ASSERT(st == RECAP_OK || st == RECAP_STATUS_DEVICE_ERROR);
}

/* ---- RECAP_LAUNCH_BLOCKING ---- */

/* With each spelling of "on" that boolean switches accept (runtime/env.h). */
static void test_launch_blocking_waits_for_the_launched_work(void) {
  static const char *const on[] = {"1", "true", "yes", "ON"};
  for (size_t i = 0; i < sizeof on / sizeof on[0]; ++i) {
    debug_env(on[i], NULL);
    atomic_int done = 0;
    CHECK_OK(launch_slow(stream, &done));
    CHECK_OK(recap__after_launch(stream, "slow_op"));
    CU_ASSERT_EQUAL(atomic_load(&done), 1);
    CHECK_OK(recap_stream_synchronize(stream));
  }
}

static void test_launch_blocking_names_the_failing_op(void) {
  debug_env("1", NULL);
  launch_failing(stream);
  CHECK_STATUS(recap__after_launch(stream, "ffn1"), RECAP_STATUS_DEVICE_ERROR);
  CU_ASSERT_EQUAL(strncmp(recap_last_error(), "op 'ffn1': ", 11), 0);
  CHECK_ERROR_MENTIONS("planted fault");
  recap__host_backend_reset_fault_for_testing();
}

static void test_launch_blocking_names_an_unnamed_op_as_question_mark(void) {
  debug_env("1", NULL);
  launch_failing(stream);
  CHECK_STATUS(recap__after_launch(stream, NULL), RECAP_STATUS_DEVICE_ERROR);
  CU_ASSERT_EQUAL(strncmp(recap_last_error(), "op '?': ", 8), 0);
  recap__host_backend_reset_fault_for_testing();
}

static void test_launch_blocking_off_does_not_wait(void) {
  debug_env(NULL, NULL);
  /* With a fault pending, any wait would report it: OK proves that nothing waited. */
  launch_failing(stream);
  CHECK_OK(recap__after_launch(stream, "ffn1"));
  recap__host_backend_reset_fault_for_testing();
}

static void test_launch_blocking_does_not_wait_inside_a_capture(void) {
  debug_env("1", NULL);
  atomic_int done = 0;
  CHECK_OK(recap__capture_begin(stream, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(launch_slow(stream, &done));
  CHECK_OK(recap__after_launch(stream, "captured_op"));
  CU_ASSERT_EQUAL(atomic_load(&done), 0); /* captured, not run */
  /* A synchronize would have invalidated the capture and capture_end would report it. */
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(stream, &graph));
  size_t nodes = 0;
  CHECK_OK(stream->backend->graph_node_count(graph, &nodes));
  CU_ASSERT_EQUAL(nodes, 1);
  stream->backend->graph_destroy(graph);
}

static void test_launch_blocking_wait_is_not_a_reported_sync(void) {
  debug_env("1", "error");
  atomic_int done = 0;
  CHECK_OK(launch_slow(stream, &done));
  CHECK_OK(recap__after_launch(stream, "slow_op"));
  CU_ASSERT_EQUAL(atomic_load(&done), 1);
}

static void test_launch_blocking_rejects_a_null_stream(void) {
  debug_env("1", NULL);
  CHECK_STATUS(recap__after_launch(NULL, "op"), RECAP_STATUS_INVALID_ARGUMENT);
}

static void test_launch_blocking_bad_value_warns_and_stays_off(void) {
  test_stderr_capture_begin();
  debug_env("maybe", NULL); /* yes/no, true/false and on/off are accepted (runtime/env.h) */
  char *text = test_stderr_capture_end();
  CU_ASSERT_EQUAL(test_count_occurrences(text, "RECAP_LAUNCH_BLOCKING='maybe'"), 1);
  CU_ASSERT_EQUAL(test_count_occurrences(text, "\n"), 1);
  free(text);
  launch_failing(stream);
  CHECK_OK(recap__after_launch(stream, "ffn1")); /* off: no wait, so no fault reported */
  recap__host_backend_reset_fault_for_testing();
}

/* ---- RECAP_SYNC_DEBUG ---- */

static void test_sync_debug_off_prints_nothing(void) {
  debug_env(NULL, NULL);
  test_stderr_capture_begin();
  recap_status st = recap_stream_synchronize(stream);
  char *text = test_stderr_capture_end();
  CHECK_OK(st);
  CU_ASSERT_STRING_EQUAL(text, "");
  free(text);
}

static void test_sync_debug_warn_names_each_synchronizing_call(void) {
  debug_env(NULL, "warn");
  recap_event *event = NULL;
  CHECK_OK(recap_event_create(host0, RECAP_EVENT_DEFAULT, &event));
  CHECK_OK(recap_event_record(event, stream));
  test_stderr_capture_begin();
  recap_status stream_st = recap_stream_synchronize(stream);
  recap_status event_st = recap_event_synchronize(event);
  recap_status device_st = recap_device_synchronize(host0);
  char *text = test_stderr_capture_end();
  CHECK_OK(stream_st);
  CHECK_OK(event_st);
  CHECK_OK(device_st);
  CU_ASSERT_STRING_EQUAL(text,
                         "recap: warning: synchronizing call recap_stream_synchronize\n"
                         "recap: warning: synchronizing call recap_event_synchronize\n"
                         "recap: warning: synchronizing call recap_device_synchronize\n");
  free(text);
  CHECK_OK(recap_event_destroy(event));
}

static void test_sync_debug_warn_stops_after_100_warnings(void) {
  debug_env(NULL, "warn");
  test_stderr_capture_begin();
  recap_status st = RECAP_OK;
  for (int i = 0; i < 250 && st == RECAP_OK; i++) st = recap__sync_debug_check("loop_copy");
  char *text = test_stderr_capture_end();
  CHECK_OK(st);
  CU_ASSERT_EQUAL(test_count_occurrences(text, "synchronizing call loop_copy\n"), 100);
  CU_ASSERT_EQUAL(test_count_occurrences(text, "further warnings are suppressed"), 1);
  CU_ASSERT_EQUAL(test_count_occurrences(text, "\n"), 101);
  free(text);
}

static void test_sync_debug_error_refuses_and_names_the_call(void) {
  debug_env(NULL, "error");
  recap_event *event = NULL;
  CHECK_OK(recap_event_create(host0, RECAP_EVENT_DEFAULT, &event));
  CHECK_STATUS(recap_stream_synchronize(stream), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("synchronizing call recap_stream_synchronize while RECAP_SYNC_DEBUG=error");
  CHECK_STATUS(recap_event_synchronize(event), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("synchronizing call recap_event_synchronize while RECAP_SYNC_DEBUG=error");
  CHECK_STATUS(recap_device_synchronize(host0), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("synchronizing call recap_device_synchronize while RECAP_SYNC_DEBUG=error");
  CHECK_OK(recap_event_destroy(event));
  debug_env(NULL, NULL);
  CHECK_OK(recap_stream_synchronize(stream));
}

static void test_sync_debug_bad_value_warns_once_and_stays_off(void) {
  test_stderr_capture_begin();
  debug_env(NULL, "loud");
  recap_status st = recap_stream_synchronize(stream);
  char *text = test_stderr_capture_end();
  CHECK_OK(st);
  CU_ASSERT_EQUAL(test_count_occurrences(text, "RECAP_SYNC_DEBUG='loud'"), 1);
  CU_ASSERT_EQUAL(test_count_occurrences(text, "\n"), 1); /* and no sync warning */
  free(text);
}

int main(void) {
  CU_pSuite blocking = test_add_suite("debug/launch blocking (host)", suite_init, suite_cleanup);
  CU_ADD_TEST(blocking, test_launch_blocking_waits_for_the_launched_work);
  CU_ADD_TEST(blocking, test_launch_blocking_names_the_failing_op);
  CU_ADD_TEST(blocking, test_launch_blocking_names_an_unnamed_op_as_question_mark);
  CU_ADD_TEST(blocking, test_launch_blocking_off_does_not_wait);
  CU_ADD_TEST(blocking, test_launch_blocking_does_not_wait_inside_a_capture);
  CU_ADD_TEST(blocking, test_launch_blocking_wait_is_not_a_reported_sync);
  CU_ADD_TEST(blocking, test_launch_blocking_rejects_a_null_stream);
  CU_ADD_TEST(blocking, test_launch_blocking_bad_value_warns_and_stays_off);
  /* The host backend runs work at submission, so only a GPU shows the wait for real: there
   * the slow host function is still pending when the launch returns. */
  CU_pSuite cuda =
      test_add_cuda_suite("debug/launch blocking (cuda)", cuda_suite_init, suite_cleanup);
  CU_ADD_TEST(cuda, test_launch_blocking_waits_for_the_launched_work);
  CU_ADD_TEST(cuda, test_launch_blocking_does_not_wait_inside_a_capture);
  CU_ADD_TEST(cuda, test_launch_blocking_wait_is_not_a_reported_sync);
  CU_pSuite sync = test_add_suite("debug/sync debug (host)", suite_init, suite_cleanup);
  CU_ADD_TEST(sync, test_sync_debug_off_prints_nothing);
  CU_ADD_TEST(sync, test_sync_debug_warn_names_each_synchronizing_call);
  CU_ADD_TEST(sync, test_sync_debug_warn_stops_after_100_warnings);
  CU_ADD_TEST(sync, test_sync_debug_error_refuses_and_names_the_call);
  CU_ADD_TEST(sync, test_sync_debug_bad_value_warns_once_and_stays_off);
  return test_run_all();
}
