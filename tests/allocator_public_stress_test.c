/*
 * allocator_public_stress_test.c: the public entry points (recap_malloc, recap_free) from many
 * threads at once, starting with the race to create the device's allocator: recap_malloc
 * finds an existing allocator without a lock and recap_free goes straight to the owning
 * allocator, so both paths run here under ThreadSanitizer in CI (--config=tsan; the file name
 * tags it).
 *
 * Worker threads never call CUnit (it is not thread-safe): they count their failures and
 * keep the first message; the main thread asserts after joining.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "include/recap.h"
#include "tests/test_util.h"

enum { THREADS = 8, ITERATIONS = 4000, SLOTS = 32 };

typedef struct {
  recap_device device;
  pthread_barrier_t start;
  /* Blocks handed between threads: whoever swaps one out frees it. */
  _Atomic(uintptr_t) exchange[SLOTS];
  atomic_int failures;
  char first_failure[256];
  pthread_mutex_t failure_lock;
} shared_state;

typedef struct {
  shared_state *shared;
  recap_stream *stream;
  unsigned seed;
} worker;

static void fail(shared_state *s, const char *what) {
  if (atomic_fetch_add(&s->failures, 1) == 0) {
    pthread_mutex_lock(&s->failure_lock);
    snprintf(s->first_failure, sizeof s->first_failure, "%s: %s", what, recap_last_error());
    pthread_mutex_unlock(&s->failure_lock);
  }
}

static unsigned next_random(unsigned *x) {
  *x = *x * 1103515245u + 12345u;
  return *x >> 16;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  shared_state *s = w->shared;
  pthread_barrier_wait(&s->start);
  for (int i = 0; i < ITERATIONS; i++) {
    size_t size = 512u << (next_random(&w->seed) % 8); /* 512 B .. 64 KiB */
    void *p = NULL;
    if (recap_malloc(s->device, size, w->stream, &p) != RECAP_OK || !p) {
      fail(s, "recap_malloc");
      continue;
    }
    if (next_random(&w->seed) % 4 == 0) {
      /* Hand it over; free whatever another thread left there (on its stream's segment). */
      uintptr_t old = atomic_exchange(&s->exchange[next_random(&w->seed) % SLOTS], (uintptr_t)p);
      p = (void *)old;
    }
    if (p && recap_free(p) != RECAP_OK) fail(s, "recap_free");
  }
  return NULL;
}

static void test_threads_create_and_use_the_device_allocator_at_once(void) {
  static shared_state s;
  memset(&s, 0, sizeof s);
  s.device = test_device;
  pthread_mutex_init(&s.failure_lock, NULL);
  pthread_barrier_init(&s.start, NULL, THREADS);
  worker workers[THREADS];
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++) {
    workers[i] = (worker){.shared = &s, .seed = 17u * (unsigned)i + 1u};
    CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &workers[i].stream));
  }
  for (int i = 0; i < THREADS; i++)
    CU_ASSERT_EQUAL_FATAL(pthread_create(&threads[i], NULL, worker_main, &workers[i]), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
  CU_ASSERT_EQUAL(atomic_load(&s.failures), 0);
  if (atomic_load(&s.failures) > 0) fprintf(stderr, "first failure: %s\n", s.first_failure);
  for (int i = 0; i < SLOTS; i++) {
    void *p = (void *)atomic_load(&s.exchange[i]);
    if (p) CHECK_OK(recap_free(p));
  }
  size_t allocated = 1;
  CHECK_OK(recap_memory_allocated(test_device, &allocated));
  CU_ASSERT_EQUAL(allocated, 0);
  CHECK_OK(recap_empty_cache(test_device));
  size_t reserved = 1;
  CHECK_OK(recap_memory_reserved(test_device, &reserved));
  CU_ASSERT_EQUAL(reserved, 0);
  for (int i = 0; i < THREADS; i++) CHECK_OK(recap_stream_destroy(workers[i].stream));
  pthread_barrier_destroy(&s.start);
  pthread_mutex_destroy(&s.failure_lock);
}

int main(void) {
  CU_pSuite host = test_add_suite("allocator_public_stress/host", test_suite_use_host, NULL);
  CU_add_test(host, "test_threads_create_and_use_the_device_allocator_at_once",
              test_threads_create_and_use_the_device_allocator_at_once);
  CU_pSuite cuda =
      test_add_cuda_suite("allocator_public_stress/cuda", test_suite_use_cuda, test_suite_use_host);
  CU_add_test(cuda, "test_threads_create_and_use_the_device_allocator_at_once",
              test_threads_create_and_use_the_device_allocator_at_once);
  return test_run_all();
}
