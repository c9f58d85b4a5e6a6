/* status_test.c: status names and texts, detail messages, backend names, device lookup. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "tests/test_util.h"

static void test_every_status_has_a_distinct_name_and_text(void) {
  const recap_status all[] = {
#define LIST_(name, value, text) RECAP_STATUS_##name,
      RECAP_STATUS_MAP(LIST_)
#undef LIST_
  };
  size_t n = sizeof all / sizeof all[0];
  CU_ASSERT(n >= 11);
  for (size_t i = 0; i < n; i++) {
    CU_ASSERT_PTR_NOT_NULL(strstr(recap_status_name(all[i]), "RECAP_STATUS_"));
    CU_ASSERT(strlen(recap_status_string(all[i])) > 0);
    for (size_t j = 0; j < i; j++) {
      CU_ASSERT(all[i] != all[j]);
      CU_ASSERT_STRING_NOT_EQUAL(recap_status_name(all[i]), recap_status_name(all[j]));
    }
  }
  CU_ASSERT_EQUAL(RECAP_OK, 0);
  CU_ASSERT_STRING_EQUAL(recap_status_name(RECAP_STATUS_OUT_OF_MEMORY),
                         "RECAP_STATUS_OUT_OF_MEMORY");
  CU_ASSERT_STRING_EQUAL(recap_status_string(RECAP_STATUS_OUT_OF_MEMORY), "out of memory");
}

static void test_unknown_status_has_generic_name(void) {
  CU_ASSERT_STRING_EQUAL(recap_status_name((recap_status)-999), "RECAP_STATUS_UNKNOWN");
  CU_ASSERT_STRING_EQUAL(recap_status_string((recap_status)-999), "unknown status");
}

/* By default a message is what the user reads: no recap function or source line in it. */
static void test_fail_records_the_message_without_code_location_by_default(void) {
  unsetenv("RECAP_ERROR_LOCATIONS");
  recap_status st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "bad %s %d", "size", 7);
  CU_ASSERT_EQUAL(st, RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_STRING_EQUAL(recap_last_error(), "bad size 7");
  setenv("RECAP_ERROR_LOCATIONS", "0", 1);
  RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "bad %s %d", "size", 8);
  CU_ASSERT_STRING_EQUAL(recap_last_error(), "bad size 8");
  unsetenv("RECAP_ERROR_LOCATIONS");
}

/* RECAP_ERROR_LOCATIONS=1: the function and file:line that failed come first, for developers. */
static void test_fail_records_location_and_message_when_asked(void) {
  setenv("RECAP_ERROR_LOCATIONS", "1", 1);
  recap_status st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "bad %s %d", "size", 7);
  unsetenv("RECAP_ERROR_LOCATIONS");
  CU_ASSERT_EQUAL(st, RECAP_STATUS_INVALID_ARGUMENT);
  char want[256];
  snprintf(want, sizeof want, "%s (status_test.c:%d): bad size 7", __func__, __LINE__ - 4);
  CU_ASSERT_STRING_EQUAL(recap_last_error(), want);
  recap__error_context(st, "op '%s': ", "ffn1");
  CU_ASSERT_EQUAL(strncmp(recap_last_error(), "op 'ffn1': ", 11), 0);
  CHECK_ERROR_MENTIONS("bad size 7");
  recap_clear_error();
  CU_ASSERT_STRING_EQUAL(recap_last_error(), "");
}

/* A failure whose complete text does not fit the message (a spec's whole error list) keeps it
 * for recap_last_error_full() until the next failure, with the same context in front. */
static void *fail_with_full_text(void *unused) {
  (void)unused;
  recap__fail_plain(RECAP_STATUS_SPEC_ERROR, "first");
  recap__set_full_error(strdup("first\nsecond")); /* freed when this thread exits */
  return strcmp(recap_last_error_full(), "first\nsecond") == 0 ? (void *)1 : NULL;
}

static void test_full_text_of_a_failure_is_kept_until_the_next_failure(void) {
  recap__fail_plain(RECAP_STATUS_SPEC_ERROR, "a.yaml:1:1: error: one");
  CU_ASSERT_STRING_EQUAL(recap_last_error_full(), "a.yaml:1:1: error: one");
  recap__set_full_error(strdup("a.yaml:1:1: error: one\na.yaml:2:1: error: two"));
  CU_ASSERT_STRING_EQUAL(recap_last_error(), "a.yaml:1:1: error: one");
  CU_ASSERT_STRING_EQUAL(recap_last_error_full(),
                         "a.yaml:1:1: error: one\na.yaml:2:1: error: two");
  recap__error_context(RECAP_STATUS_SPEC_ERROR, "loading '%s': ", "a.yaml");
  CU_ASSERT_STRING_EQUAL(recap_last_error(), "loading 'a.yaml': a.yaml:1:1: error: one");
  CU_ASSERT_STRING_EQUAL(recap_last_error_full(),
                         "loading 'a.yaml': a.yaml:1:1: error: one\na.yaml:2:1: error: two");
  /* Per thread: another thread's text is its own. */
  pthread_t thread;
  void *ok = NULL;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&thread, NULL, fail_with_full_text, NULL), 0);
  pthread_join(thread, &ok);
  CU_ASSERT_PTR_NOT_NULL(ok);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error_full(), "two"));
  RECAP_FAIL(RECAP_STATUS_IO_ERROR, "other");
  CU_ASSERT_STRING_EQUAL(recap_last_error_full(), "other");
  recap__set_full_error(strdup("other, in full"));
  recap_clear_error();
  CU_ASSERT_STRING_EQUAL(recap_last_error_full(), "");
}

static void test_long_messages_are_truncated_not_overflowed(void) {
  char big[5000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  recap__fail_plain(RECAP_STATUS_IO_ERROR, "%s", big);
  CU_ASSERT(strlen(recap_last_error()) < sizeof big);
  recap__error_context(RECAP_STATUS_IO_ERROR, "%s", big);
  CU_ASSERT(strlen(recap_last_error()) < sizeof big);
}

static void test_backend_names_parse_both_ways(void) {
  recap_backend_kind kind;
  CHECK_OK(recap_backend_parse("host", &kind));
  CU_ASSERT_EQUAL(kind, RECAP_BACKEND_HOST);
  CHECK_OK(recap_backend_parse("cuda", &kind));
  CU_ASSERT_EQUAL(kind, RECAP_BACKEND_CUDA);
  CU_ASSERT_STRING_EQUAL(recap_backend_name(RECAP_BACKEND_HOST), "host");
  CHECK_STATUS(recap_backend_parse("tpu", &kind), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("tpu");
  CHECK_STATUS(recap_backend_parse(NULL, &kind), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NULL(recap_backend_name((recap_backend_kind)42));
}

static void test_host_backend_always_available(void) {
  CU_ASSERT(recap_backend_compiled(RECAP_BACKEND_HOST));
  CU_ASSERT(recap_device_is_available(RECAP_BACKEND_HOST));
  int count = 0;
  CHECK_OK(recap_device_count(RECAP_BACKEND_HOST, &count));
  CU_ASSERT_EQUAL(count, 1);
}

static void test_nonexistent_device_is_rejected_by_name(void) {
  recap_device_properties props;
  CHECK_STATUS(recap_device_properties_get((recap_device){RECAP_BACKEND_HOST, 3}, &props),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("host device 3 does not exist");
  CHECK_STATUS(recap_device_set((recap_device){RECAP_BACKEND_HOST, -1}),
               RECAP_STATUS_INVALID_ARGUMENT);
  if (!test_have_cuda()) {
    recap_stream *s = NULL;
    recap_status st = recap_stream_create((recap_device){RECAP_BACKEND_CUDA, 0}, 0, 0, &s);
    CU_ASSERT(st == RECAP_STATUS_NO_DEVICE || st == RECAP_STATUS_NOT_SUPPORTED);
    CU_ASSERT_PTR_NULL(s);
  }
}

static void test_current_device_defaults_and_can_be_set(void) {
  recap_device d;
  CHECK_OK(recap_device_current(&d));
  CU_ASSERT_EQUAL(d.backend, test_have_cuda() ? RECAP_BACKEND_CUDA : RECAP_BACKEND_HOST);
  CHECK_OK(recap_device_set((recap_device){RECAP_BACKEND_HOST, 0}));
  CHECK_OK(recap_device_current(&d));
  CU_ASSERT_EQUAL(d.backend, RECAP_BACKEND_HOST);
  CU_ASSERT_EQUAL(d.index, 0);
}

static void test_version_is_semantic_and_matches_the_header_macros(void) {
  int major = -1, minor = -1, patch = -1;
  CU_ASSERT_EQUAL(sscanf(recap_version(), "%d.%d.%d", &major, &minor, &patch), 3);
  CU_ASSERT_EQUAL(major, RECAP_VERSION_MAJOR);
  CU_ASSERT_EQUAL(minor, RECAP_VERSION_MINOR);
  CU_ASSERT_EQUAL(patch, RECAP_VERSION_PATCH);
  CU_ASSERT_STRING_EQUAL(recap_version(), RECAP_VERSION_STRING);
}

static void test_build_commit_is_never_empty(void) {
  const char *commit = recap_build_commit();
  CU_ASSERT_PTR_NOT_NULL_FATAL(commit);
  CU_ASSERT_TRUE(commit[0] != '\0');
}

int main(void) {
  CU_pSuite s = test_add_suite("status", NULL, NULL);
  CU_ADD_TEST(s, test_every_status_has_a_distinct_name_and_text);
  CU_ADD_TEST(s, test_unknown_status_has_generic_name);
  CU_ADD_TEST(s, test_fail_records_the_message_without_code_location_by_default);
  CU_ADD_TEST(s, test_fail_records_location_and_message_when_asked);
  CU_ADD_TEST(s, test_full_text_of_a_failure_is_kept_until_the_next_failure);
  CU_ADD_TEST(s, test_long_messages_are_truncated_not_overflowed);
  CU_ADD_TEST(s, test_backend_names_parse_both_ways);
  CU_ADD_TEST(s, test_host_backend_always_available);
  CU_ADD_TEST(s, test_nonexistent_device_is_rejected_by_name);
  CU_ADD_TEST(s, test_current_device_defaults_and_can_be_set);
  CU_ADD_TEST(s, test_version_is_semantic_and_matches_the_header_macros);
  CU_ADD_TEST(s, test_build_commit_is_never_empty);
  return test_run_all();
}
