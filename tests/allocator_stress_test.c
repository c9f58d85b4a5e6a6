/*
 * allocator_stress_test.c: many threads allocating, freeing (also each other's blocks),
 * recording streams, reading stats and snapshots, using private pools and emptying the cache
 * at once, while one thread keeps capturing with a routed pool. Run under ThreadSanitizer in
 * CI (--config=tsan).
 *
 * Worker threads never call CUnit (it is not thread-safe): they count their failures and
 * keep the first message; the main thread asserts after joining.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c11 */
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "allocator/allocator.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "tests/test_util.h"

enum {
  WORKERS = 6,
  ITERATIONS = 3000,
  LIVE_PER_THREAD = 24,
  EXCHANGE_SLOTS = 16,
  CAPTURES = 200,
  KIB = 1024,
  MIB = 1024 * 1024,
};

typedef struct {
  recap__allocator *a;
  recap_stream *streams[WORKERS + 1]; /* the last one is the capturing thread's */
  /* Blocks handed between threads: whoever swaps one out frees it. */
  _Atomic(uintptr_t) exchange[EXCHANGE_SLOTS];
  atomic_int captures_done;
  bool host_visible;
} shared_state;

typedef struct {
  shared_state *shared;
  int index;
  test_rng rng;
  int failures;
  char first_failure[512];
} worker;

static void fail(worker *w, const char *what, recap_status st) {
  if (w->failures++ == 0)
    snprintf(w->first_failure, sizeof w->first_failure, "thread %d: %s -> %s: %s", w->index, what,
             recap_status_name(st), recap_last_error());
}

/* The first byte of each block carries its size's low byte, checked at free. */
static void mark(worker *w, void *p, size_t size) {
  if (w->shared->host_visible) *(unsigned char *)p = (unsigned char)size;
}

static void free_checked(worker *w, void *p, size_t size) {
  if (w->shared->host_visible && *(unsigned char *)p != (unsigned char)size)
    fail(w, "a block's contents changed while it was live", RECAP_STATUS_INTERNAL);
  recap_status st = recap__allocator_free(w->shared->a, p);
  if (st != RECAP_OK) fail(w, "free", st);
}

/* Exchange slots hold (pointer | size class): sizes are chosen from a table so the index fits
 * in the low bits the 256-byte alignment leaves free. */
static const size_t sizes[] = {1, 100, 512, 4000, 64 * KIB, 700 * KIB, 2 * MIB, 12 * MIB};
enum { SIZE_KINDS = sizeof sizes / sizeof sizes[0] };

static void *worker_main(void *arg) {
  worker *w = arg;
  shared_state *sh = w->shared;
  recap_stream *mine = sh->streams[w->index];
  void *live[LIVE_PER_THREAD] = {0};
  int kind[LIVE_PER_THREAD];
  for (int it = 0; it < ITERATIONS; it++) {
    uint64_t op = test_rng_next(&w->rng) % 100;
    int slot = (int)(test_rng_next(&w->rng) % LIVE_PER_THREAD);
    recap_status st;
    if (op < 40) {
      if (live[slot]) continue;
      int k = (int)(test_rng_next(&w->rng) % (SIZE_KINDS - (it % 8 ? 2 : 0)));
      st = recap__allocator_malloc(sh->a, sizes[k], mine, &live[slot]);
      if (st == RECAP_OK) {
        mark(w, live[slot], sizes[k]);
        kind[slot] = k;
      } else if (st != RECAP_STATUS_OUT_OF_MEMORY) {
        fail(w, "malloc", st);
      }
    } else if (op < 70) {
      if (!live[slot]) continue;
      free_checked(w, live[slot], sizes[kind[slot]]);
      live[slot] = NULL;
    } else if (op < 80) {
      if (!live[slot]) continue;
      recap_stream *other = sh->streams[test_rng_next(&w->rng) % WORKERS];
      st = recap__allocator_record_stream(sh->a, (char *)live[slot] + sizes[kind[slot]] / 2, other);
      if (st != RECAP_OK) fail(w, "record_stream", st);
    } else if (op < 88) {
      /* Hand the block to whoever comes next; free what was there. */
      if (!live[slot]) continue;
      uintptr_t mine_tagged = (uintptr_t)live[slot] | (uintptr_t)kind[slot];
      uintptr_t theirs =
          atomic_exchange(&sh->exchange[test_rng_next(&w->rng) % EXCHANGE_SLOTS], mine_tagged);
      live[slot] = NULL;
      if (theirs) free_checked(w, (void *)(theirs & ~(uintptr_t)255), sizes[theirs & 255]);
    } else if (op < 91) {
      st = recap__allocator_empty_cache(sh->a);
      if (st != RECAP_OK && st != RECAP_STATUS_ILLEGAL_DURING_CAPTURE) fail(w, "empty_cache", st);
    } else if (op < 95) {
      recap_memory_stats s;
      recap__allocator_stats(sh->a, &s);
      if (s.allocated_bytes[RECAP_STAT_ALL].current > s.reserved_bytes[RECAP_STAT_ALL].current ||
          s.active_bytes[RECAP_STAT_ALL].current < s.allocated_bytes[RECAP_STAT_ALL].current)
        fail(w, "stats out of order (allocated > reserved or active < allocated)",
             RECAP_STATUS_INTERNAL);
      if (op == 94) {
        char *json = NULL;
        st = recap__allocator_snapshot_json(sh->a, &json);
        if (st != RECAP_OK) fail(w, "snapshot", st);
        free(json);
      }
    } else {
      /* A short pool scope on this thread's stream. */
      recap_pool_id pool;
      if ((st = recap__allocator_pool_create(sh->a, &pool)) != RECAP_OK) {
        fail(w, "pool_create", st);
        continue;
      }
      if ((st = recap__allocator_route_begin(sh->a, pool, mine)) != RECAP_OK)
        fail(w, "route_begin", st);
      void *p = NULL;
      st = recap__allocator_malloc(sh->a, 3000, mine, &p);
      if (st == RECAP_OK)
        mark(w, p, 3000);
      else if (st != RECAP_STATUS_OUT_OF_MEMORY) {
        fail(w, "malloc in pool", st);
      }
      if ((st = recap__allocator_route_end(sh->a, mine)) != RECAP_OK) fail(w, "route_end", st);
      if ((st = recap__allocator_pool_release(sh->a, pool)) != RECAP_OK)
        fail(w, "pool_release", st);
      if (p) free_checked(w, p, 3000); /* outlives its pool's last reference */
    }
  }
  for (int i = 0; i < LIVE_PER_THREAD; i++)
    if (live[i]) free_checked(w, live[i], sizes[kind[i]]);
  return NULL;
}

/* Captures with a routed pool, allocating inside, while the workers run. */
static void *capture_main(void *arg) {
  worker *w = arg;
  shared_state *sh = w->shared;
  recap_stream *s = sh->streams[WORKERS];
  recap_pool_id pool;
  recap_status st = recap__allocator_pool_create(sh->a, &pool);
  if (st != RECAP_OK) {
    fail(w, "pool_create", st);
    return NULL;
  }
  for (int c = 0; c < CAPTURES; c++) {
    if ((st = recap__allocator_route_begin(sh->a, pool, s)) != RECAP_OK) {
      fail(w, "route_begin", st);
      break;
    }
    if ((st = recap__capture_begin(s, RECAP_CAPTURE_MODE_GLOBAL)) != RECAP_OK) {
      fail(w, "capture_begin", st);
      recap__allocator_route_end(sh->a, s);
      break;
    }
    void *p[4] = {0};
    for (int i = 0; i < 4; i++) {
      st = recap__allocator_malloc(sh->a, (size_t)(1 + test_rng_next(&w->rng) % (3 * MIB)), s,
                                   &p[i]);
      if (st != RECAP_OK && st != RECAP_STATUS_OUT_OF_MEMORY) fail(w, "malloc in capture", st);
    }
    for (int i = 0; i < 4; i++)
      if (p[i] && (st = recap__allocator_free(sh->a, p[i])) != RECAP_OK)
        fail(w, "free in capture", st);
    recap__graph *graph = NULL;
    /* The workers' allocator calls must never invalidate this capture. */
    if ((st = recap__capture_end(s, &graph)) != RECAP_OK) fail(w, "capture_end", st);
    if (graph) s->backend->graph_destroy(graph);
    if ((st = recap__allocator_route_end(sh->a, s)) != RECAP_OK) fail(w, "route_end", st);
    atomic_fetch_add(&sh->captures_done, 1);
    /* Leave gaps without a capture, so the workers' out-of-memory retries and deferred
     * frees run too. */
    struct timespec gap = {0, 200 * 1000};
    nanosleep(&gap, NULL);
  }
  if ((st = recap__allocator_pool_release(sh->a, pool)) != RECAP_OK) fail(w, "pool_release", st);
  return NULL;
}

static void test_threads_allocating_freeing_and_capturing_at_once(void) {
  recap__raw_runtime runtime;
  recap__raw_backend inner, raw;
  recap__raw_failing *failing;
  CHECK_OK(recap__raw_runtime_init(&runtime, test_device, &inner));
  CHECK_OK(recap__raw_failing_create(&inner, &failing));
  recap__raw_failing_backend(failing, &raw);
  /* Tight enough that the out-of-memory retry (with its unlocked synchronize) runs often. */
  recap__raw_failing_set_capacity(failing, 96 * (size_t)MIB);
  shared_state *sh = calloc(1, sizeof *sh);
  CU_ASSERT_PTR_NOT_NULL_FATAL(sh);
  sh->host_visible = test_device.backend == RECAP_BACKEND_HOST;
  recap__allocator_options options = {.device = test_device, .raw = &raw};
  CHECK_OK(recap__allocator_create(&options, &sh->a));
  for (int i = 0; i <= WORKERS; i++)
    CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &sh->streams[i]));
  worker workers[WORKERS + 1];
  pthread_t threads[WORKERS + 1];
  for (int i = 0; i <= WORKERS; i++) {
    workers[i] = (worker){.shared = sh, .index = i};
    test_rng_init(&workers[i].rng); /* here: test_rng_init is not thread-safe */
  }
  for (int i = 0; i <= WORKERS; i++)
    CU_ASSERT_EQUAL_FATAL(
        pthread_create(&threads[i], NULL, i < WORKERS ? worker_main : capture_main, &workers[i]),
        0);
  for (int i = 0; i <= WORKERS; i++) pthread_join(threads[i], NULL);
  for (int i = 0; i <= WORKERS; i++) {
    if (workers[i].failures)
      fprintf(stderr, "\n  %d failures; first: %s\n", workers[i].failures,
              workers[i].first_failure);
    CU_ASSERT_EQUAL(workers[i].failures, 0);
  }
  CU_ASSERT_EQUAL(atomic_load(&sh->captures_done), CAPTURES);
  for (int i = 0; i < EXCHANGE_SLOTS; i++) {
    uintptr_t v = atomic_load(&sh->exchange[i]);
    if (v) CHECK_OK(recap__allocator_free(sh->a, (void *)(v & ~(uintptr_t)255)));
  }
  recap_memory_stats s;
  recap__allocator_stats(sh->a, &s);
  printf("stress: %lld allocations, %lld device allocs, %lld OOM retries, %lld OOMs\n",
         (long long)s.allocated_count[RECAP_STAT_ALL].allocated, (long long)s.num_device_alloc,
         (long long)s.num_alloc_retries, (long long)s.num_ooms);
  CU_ASSERT_EQUAL(s.allocated_bytes[RECAP_STAT_ALL].current, 0);
  CU_ASSERT_EQUAL(s.requested_bytes[RECAP_STAT_ALL].current, 0);
  CU_ASSERT_EQUAL(s.allocated_count[RECAP_STAT_ALL].allocated,
                  s.allocated_count[RECAP_STAT_ALL].freed);
  CHECK_OK(recap__allocator_empty_cache(sh->a));
  recap__allocator_stats(sh->a, &s);
  CU_ASSERT_EQUAL(s.active_bytes[RECAP_STAT_ALL].current, 0);
  CU_ASSERT_EQUAL(s.reserved_bytes[RECAP_STAT_ALL].current, 0);
  recap__raw_failing_counts counts;
  recap__raw_failing_counts_get(failing, &counts);
  CU_ASSERT_EQUAL(counts.live_bytes, 0);
  CHECK_OK(recap__allocator_destroy(sh->a));
  recap__raw_failing_destroy(failing);
  for (int i = 0; i <= WORKERS; i++) CHECK_OK(recap_stream_destroy(sh->streams[i]));
  free(sh);
}

int main(void) {
  CU_pSuite host = test_add_suite("allocator_stress/host", test_suite_use_host, NULL);
  CU_ADD_TEST(host, test_threads_allocating_freeing_and_capturing_at_once);
  CU_pSuite cuda = test_add_cuda_suite("allocator_stress/cuda", test_suite_use_cuda, test_suite_use_host);
  CU_ADD_TEST(cuda, test_threads_allocating_freeing_and_capturing_at_once);
  return test_run_all();
}
