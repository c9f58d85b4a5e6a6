/*
 * allocator_check.h: what the allocator tests share: their fixture (an allocator over a
 * fault-injecting raw backend on test_device, and two streams), the JSON snapshot, parsed,
 * and the invariant that every segment is tiled by its blocks and every stat equals the sum
 * over the snapshot (and the live stats).
 */
#ifndef RECAP_TESTS_ALLOCATOR_CHECK_H
#define RECAP_TESTS_ALLOCATOR_CHECK_H

#include <jansson.h>
#include <stdint.h>

#include "allocator/allocator.h"

typedef struct {
  recap__raw_runtime runtime;
  recap__raw_backend inner, raw;
  recap__raw_failing *failing;
  recap__allocator *a;
  recap_stream *s1, *s2;
} allocator_fixture;

/* Creates the allocator with RECAP_ALLOC_CONF-syntax `conf` (NULL: the defaults) over raw
 * memory capped at `capacity` bytes (0: the raw backend's own limit), and streams s1, s2
 * (non-blocking). Each test closes it its own way (what it checks at the end differs). */
void allocator_fixture_open(allocator_fixture *f, const char *conf, size_t capacity);

/* The allocator's snapshot as parsed JSON (fails the test if it is not JSON). */
json_t *allocator_snapshot(recap__allocator *a);
/* An integer member of a JSON object (fails the test if absent or not an integer). */
int64_t json_int(json_t *obj, const char *key);
/* The private pool a snapshot segment belongs to (0: the default pool), from its
 * "segment_pool_id" pair, whose first half must be 0. */
int64_t snapshot_pool_id(json_t *segment);
/* One number of the snapshot's "memory_stats" (PyTorch's flat keys, "segment.all.current"). */
int64_t snapshot_stat(json_t *root, const char *key);
void allocator_check_consistent(recap__allocator *a);

#endif
