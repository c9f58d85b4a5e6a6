/*
 * allocator_model_test.c: a long random sequence of allocator operations checked after every
 * step against a simple reference model.
 *
 * Operations: alloc and free on three streams, record_stream through interior pointers,
 * empty_cache, private pools created, routed, unrouted and released, and out-of-memory from a
 * capped raw backend. After every step: no two live blocks overlap and their bytes are intact
 * (each block carries a tag at both ends), every segment is tiled by its blocks, the stats
 * equal the sums over the snapshot, the live allocations are exactly the model's (address,
 * requested size, stream, pool), and the raw backend holds exactly the reserved bytes.
 *
 * RECAP_TEST_SEED replays a run; RECAP_MODEL_STEPS changes its length.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "allocator/allocator.h"
#include "runtime/backend.h"
#include "tests/allocator_check.h"
#include "tests/test_util.h"

enum { KIB = 1024, MIB = 1024 * 1024, STREAMS = 3, MAX_POOLS = 3, MAX_LIVE = 200, TAG = 16 };

/* ------------------------------------------------------------------------------------------
 * The model
 * ---------------------------------------------------------------------------------------- */

typedef struct {
  char *ptr;
  size_t size;
  int stream;
  uint64_t pool; /* expected pool id (0: default) */
  unsigned char tag;
} live_block;

typedef struct {
  recap__allocator *a;
  recap__raw_failing *failing;
  recap_stream *streams[STREAMS];
  live_block live[MAX_LIVE];
  int live_count;
  recap_pool_id pools[MAX_POOLS]; /* handles the model holds; id 0: none */
  uint64_t route[STREAMS];        /* pool each stream is routed to; 0: none */
  unsigned char next_tag;
  bool on_device_memory_host_visible;
  recap__alloc_config config; /* to predict block sizes */
} model;

/* Tags live in device memory; only host memory can be written from here. */
static void tag_write(model *m, live_block *b) {
  if (!m->on_device_memory_host_visible) return;
  size_t n = b->size < TAG ? b->size : TAG;
  memset(b->ptr, b->tag, n);
  memset(b->ptr + b->size - n, b->tag, n);
}

static void tag_check(model *m, const live_block *b) {
  if (!m->on_device_memory_host_visible) return;
  size_t n = b->size < TAG ? b->size : TAG;
  for (size_t i = 0; i < n; i++) {
    CU_ASSERT_EQUAL_FATAL((unsigned char)b->ptr[i], b->tag);
    CU_ASSERT_EQUAL_FATAL((unsigned char)b->ptr[b->size - n + i], b->tag);
  }
}

static bool pool_referenced(const model *m, uint64_t id) {
  for (int i = 0; i < MAX_POOLS; i++)
    if (m->pools[i].id == id) return true;
  for (int s = 0; s < STREAMS; s++)
    if (m->route[s] == id) return true;
  return false;
}

static int stream_index(const model *m, int64_t stream) {
  for (int s = 0; s < STREAMS; s++)
    if ((int64_t)(uintptr_t)m->streams[s] == stream) return s;
  return -1;
}

static int find_live(const model *m, uintptr_t ptr) {
  for (int i = 0; i < m->live_count; i++)
    if ((uintptr_t)m->live[i].ptr == ptr) return i;
  return -1;
}

/* The allocator's view equals the model's. */
static void check_model(model *m, bool after_empty_cache) {
  allocator_check_consistent(m->a);
  json_t *root = allocator_snapshot(m->a);
  size_t i, j;
  json_t *seg, *b;
  int allocated_seen = 0;
  int64_t requested = 0;
  json_array_foreach(json_object_get(root, "segments"), i, seg) {
    uint64_t pool = (uint64_t)snapshot_pool_id(seg);
    int stream = stream_index(m, json_int(seg, "stream"));
    CU_ASSERT(stream >= 0);
    bool small = strcmp(json_string_value(json_object_get(seg, "segment_type")), "small") == 0;
    bool any_active = false;
    json_array_foreach(json_object_get(seg, "blocks"), j, b) {
      const char *state = json_string_value(json_object_get(b, "state"));
      if (strcmp(state, "inactive") != 0) any_active = true;
      if (strcmp(state, "active_allocated") != 0) continue;
      allocated_seen++;
      int k = find_live(m, (uintptr_t)json_int(b, "address"));
      CU_ASSERT_FATAL(k >= 0);
      const live_block *lb = &m->live[k];
      CU_ASSERT_EQUAL((size_t)json_int(b, "requested_size"), lb->size);
      CU_ASSERT_EQUAL(stream, lb->stream);
      CU_ASSERT_EQUAL(pool, lb->pool);
      size_t rounded = recap__alloc_round_size(&m->config, lb->size);
      size_t size = (size_t)json_int(b, "size");
      CU_ASSERT_EQUAL(small, rounded <= (size_t)RECAP__ALLOC_SMALL_SIZE);
      if (small) {
        CU_ASSERT_EQUAL(size, rounded);
      } else {
        CU_ASSERT(size >= rounded && size <= rounded + (size_t)MIB);
      }
      requested += (int64_t)lb->size;
    }
    /* empty_cache leaves only segments in use or of pools still referenced. */
    if (after_empty_cache && !any_active) CU_ASSERT(pool != 0 && pool_referenced(m, pool));
  }
  CU_ASSERT_EQUAL(allocated_seen, m->live_count);
  CU_ASSERT_EQUAL(snapshot_stat(root, "requested_bytes.all.current"), requested);
  recap__raw_failing_counts counts;
  recap__raw_failing_counts_get(m->failing, &counts);
  CU_ASSERT_EQUAL((int64_t)counts.live_bytes, snapshot_stat(root, "reserved_bytes.all.current"));
  json_decref(root);
  /* No two live blocks overlap (the tags would have caught a write, this catches the
   * addresses). */
  for (int x = 0; x < m->live_count; x++) {
    tag_check(m, &m->live[x]);
    for (int y = x + 1; y < m->live_count; y++) {
      const live_block *p = &m->live[x], *q = &m->live[y];
      CU_ASSERT_FATAL(p->ptr + p->size <= q->ptr || q->ptr + q->size <= p->ptr);
    }
  }
}

static size_t random_size(test_rng *rng) {
  uint64_t r = test_rng_next(rng) % 100;
  if (r < 60) return 1 + test_rng_next(rng) % (64 * KIB);
  if (r < 80) return 1 + test_rng_next(rng) % MIB;
  if (r < 95) return MIB + test_rng_next(rng) % (9 * MIB);
  return 10 * MIB + test_rng_next(rng) % (30 * MIB);
}

static void step_alloc(model *m, test_rng *rng) {
  if (m->live_count == MAX_LIVE) return;
  int s = (int)(test_rng_next(rng) % STREAMS);
  size_t size = random_size(rng);
  recap_memory_stats before, after;
  recap__allocator_stats(m->a, &before);
  void *p = NULL;
  recap_status st = recap__allocator_malloc(m->a, size, m->streams[s], &p);
  if (st == RECAP_STATUS_OUT_OF_MEMORY) {
    /* A clean failure: nothing allocated changed. */
    recap__allocator_stats(m->a, &after);
    CU_ASSERT_EQUAL(after.allocated_bytes[RECAP_STAT_ALL].current,
                    before.allocated_bytes[RECAP_STAT_ALL].current);
    CU_ASSERT_EQUAL(after.num_ooms, before.num_ooms + 1);
    CU_ASSERT_PTR_NULL(p);
    return;
  }
  CHECK_OK(st);
  live_block *b = &m->live[m->live_count++];
  *b = (live_block){p, size, s, m->route[s], (unsigned char)(++m->next_tag | 1)};
  tag_write(m, b);
}

static void step_free(model *m, test_rng *rng) {
  if (m->live_count == 0) return;
  int k = (int)(test_rng_next(rng) % (uint64_t)m->live_count);
  tag_check(m, &m->live[k]);
  CHECK_OK(recap__allocator_free(m->a, m->live[k].ptr));
  m->live[k] = m->live[--m->live_count];
}

static void step_record_stream(model *m, test_rng *rng) {
  if (m->live_count == 0) return;
  live_block *b = &m->live[test_rng_next(rng) % (uint64_t)m->live_count];
  int s = (int)(test_rng_next(rng) % STREAMS);
  char *inside = b->ptr + test_rng_next(rng) % b->size;
  CHECK_OK(recap__allocator_record_stream(m->a, inside, m->streams[s]));
}

static void step_pool(model *m, test_rng *rng) {
  int slot = (int)(test_rng_next(rng) % MAX_POOLS);
  if (m->pools[slot].id == 0) {
    CHECK_OK(recap__allocator_pool_create(m->a, &m->pools[slot]));
  } else {
    CHECK_OK(recap__allocator_pool_release(m->a, m->pools[slot]));
    m->pools[slot].id = 0;
  }
}

static void step_route(model *m, test_rng *rng) {
  int s = (int)(test_rng_next(rng) % STREAMS);
  if (m->route[s] != 0) {
    CHECK_OK(recap__allocator_route_end(m->a, m->streams[s]));
    m->route[s] = 0;
    return;
  }
  recap_pool_id pool = m->pools[test_rng_next(rng) % MAX_POOLS];
  if (pool.id == 0) return;
  CHECK_OK(recap__allocator_route_begin(m->a, pool, m->streams[s]));
  m->route[s] = pool.id;
}

static void run_model(size_t capacity, const char *conf) {
  model *m = calloc(1, sizeof *m);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  m->on_device_memory_host_visible = test_device.backend == RECAP_BACKEND_HOST;
  CHECK_OK(recap__alloc_config_parse(conf, &m->config));
  recap__raw_runtime runtime;
  recap__raw_backend inner, raw;
  CHECK_OK(recap__raw_runtime_init(&runtime, test_device, &inner));
  CHECK_OK(recap__raw_failing_create(&inner, &m->failing));
  recap__raw_failing_backend(m->failing, &raw);
  recap__raw_failing_set_capacity(m->failing, capacity);
  recap__allocator_options options = {.device = test_device, .raw = &raw, .conf = conf};
  CHECK_OK(recap__allocator_create(&options, &m->a));
  for (int s = 0; s < STREAMS; s++)
    CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &m->streams[s]));
  test_rng rng;
  test_rng_init(&rng);
  const char *env = getenv("RECAP_MODEL_STEPS");
  long steps = env ? strtol(env, NULL, 10) : 3000;
  for (long i = 0; i < steps; i++) {
    uint64_t op = test_rng_next(&rng) % 100;
    bool emptied = false;
    if (op < 45) {
      step_alloc(m, &rng);
    } else if (op < 83) {
      step_free(m, &rng);
    } else if (op < 90) {
      step_record_stream(m, &rng);
    } else if (op < 93) {
      CHECK_OK(recap__allocator_empty_cache(m->a));
      emptied = true;
    } else if (op < 96) {
      step_pool(m, &rng);
    } else {
      step_route(m, &rng);
    }
    check_model(m, emptied);
  }
  recap_memory_stats s;
  recap__allocator_stats(m->a, &s);
  printf("model: %ld steps, peak %lld bytes allocated, %lld reserved, %lld OOMs, %lld retries\n",
         steps, (long long)s.allocated_bytes[RECAP_STAT_ALL].peak,
         (long long)s.reserved_bytes[RECAP_STAT_ALL].peak, (long long)s.num_ooms,
         (long long)s.num_alloc_retries);
  while (m->live_count > 0) step_free(m, &rng);
  for (int st = 0; st < STREAMS; st++)
    if (m->route[st]) CHECK_OK(recap__allocator_route_end(m->a, m->streams[st]));
  for (int p = 0; p < MAX_POOLS; p++)
    if (m->pools[p].id) CHECK_OK(recap__allocator_pool_release(m->a, m->pools[p]));
  memset(m->route, 0, sizeof m->route);
  memset(m->pools, 0, sizeof m->pools);
  CHECK_OK(recap__allocator_empty_cache(m->a));
  check_model(m, true);
  CU_ASSERT_EQUAL(s.num_ooms > 0 || capacity == 0, true);
  recap__allocator_stats(m->a, &s);
  CU_ASSERT_EQUAL(s.reserved_bytes[RECAP_STAT_ALL].current, 0);
  CHECK_OK(recap__allocator_destroy(m->a));
  recap__raw_failing_destroy(m->failing);
  for (int st = 0; st < STREAMS; st++) CHECK_OK(recap_stream_destroy(m->streams[st]));
  free(m);
}

/* Plenty of memory: every path but out-of-memory. */
static void test_random_operations_match_the_model(void) {
  run_model(0, NULL);
}

/* 160 MiB: allocations regularly fail, retry after releasing the cache, or fail cleanly. */
static void test_random_operations_under_memory_pressure_match_the_model(void) {
  run_model(160 * (size_t)MIB, NULL);
}

/* Power-of-two rounding changes block sizes; the model rounds the same way. */
static void test_random_operations_with_power2_rounding_match_the_model(void) {
  run_model(0, "roundup_power2_divisions:4");
}

int main(void) {
  CU_pSuite host = test_add_suite("allocator_model/host", test_suite_use_host, NULL);
  CU_ADD_TEST(host, test_random_operations_match_the_model);
  CU_ADD_TEST(host, test_random_operations_under_memory_pressure_match_the_model);
  CU_ADD_TEST(host, test_random_operations_with_power2_rounding_match_the_model);
  CU_pSuite cuda = test_add_cuda_suite("allocator_model/cuda", test_suite_use_cuda, test_suite_use_host);
  CU_ADD_TEST(cuda, test_random_operations_match_the_model);
  CU_ADD_TEST(cuda, test_random_operations_under_memory_pressure_match_the_model);
  return test_run_all();
}
