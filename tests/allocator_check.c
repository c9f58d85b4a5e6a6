/* allocator_check.c: see allocator_check.h. */
#include "tests/allocator_check.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test_util.h"

json_t *allocator_snapshot(recap__allocator *a) {
  char *text = NULL;
  CHECK_OK(recap__allocator_snapshot_json(a, &text));
  json_error_t error;
  json_t *root = json_loads(text, 0, &error);
  if (!root) fprintf(stderr, "snapshot is not JSON: %s\n", error.text);
  free(text);
  CU_ASSERT_PTR_NOT_NULL_FATAL(root);
  return root;
}

int64_t json_int(json_t *obj, const char *key) {
  json_t *v = json_object_get(obj, key);
  CU_ASSERT_FATAL(json_is_integer(v));
  return (int64_t)json_integer_value(v);
}

int64_t snapshot_pool_id(json_t *segment) {
  json_t *id = json_object_get(segment, "segment_pool_id");
  CU_ASSERT_FATAL(json_is_array(id) && json_array_size(id) == 2);
  CU_ASSERT_FATAL(json_is_integer(json_array_get(id, 0)) && json_is_integer(json_array_get(id, 1)));
  CU_ASSERT_EQUAL(json_integer_value(json_array_get(id, 0)), 0);
  return (int64_t)json_integer_value(json_array_get(id, 1));
}

int64_t snapshot_stat(json_t *root, const char *key) {
  return json_int(json_object_get(root, "memory_stats"), key);
}

/* Every segment is tiled by its blocks, and every stat's current value equals the sum over
 * the snapshot (and the snapshot's own copy of the stats, and the live stats). */
void allocator_check_consistent(recap__allocator *a) {
  /* PyTorch's names of recap_memory_stats' arrays, in the order of live_arrays below. */
  static const char *keys[] = {
      "allocated_bytes", "allocation",     "reserved_bytes",       "segment",
      "active_bytes",    "active",         "inactive_split_bytes", "inactive_split",
      "requested_bytes", "requested_count"};
  enum { NKEYS = sizeof keys / sizeof keys[0] };
  int64_t sum[NKEYS][3];
  memset(sum, 0, sizeof sum);
  json_t *root = allocator_snapshot(a);
  size_t i, j;
  json_t *seg, *b;
  json_array_foreach(json_object_get(root, "segments"), i, seg) {
    int ty = strcmp(json_string_value(json_object_get(seg, "segment_type")), "small") == 0 ? 1 : 2;
    int64_t base = json_int(seg, "address"), size = json_int(seg, "total_size"), expect = base;
    json_t *blocks = json_object_get(seg, "blocks");
    bool split = json_array_size(blocks) > 1;
    int64_t add[NKEYS] = {0};
    add[2] = size;
    add[3] = 1;
    json_array_foreach(blocks, j, b) {
      CU_ASSERT_EQUAL(json_int(b, "address"), expect);
      expect += json_int(b, "size");
      const char *state = json_string_value(json_object_get(b, "state"));
      if (strcmp(state, "active_allocated") == 0) {
        add[0] += json_int(b, "size"), add[1] += 1;
        add[8] += json_int(b, "requested_size"), add[9] += 1;
      }
      if (strcmp(state, "inactive") != 0) {
        add[4] += json_int(b, "size"), add[5] += 1;
      } else if (split) {
        add[6] += json_int(b, "size"), add[7] += 1;
      }
    }
    CU_ASSERT_EQUAL(expect, base + size);
    for (int k = 0; k < NKEYS; k++) sum[k][0] += add[k], sum[k][ty] += add[k];
  }
  static const char *types[] = {"all", "small_pool", "large_pool"};
  recap_memory_stats live;
  recap__allocator_stats(a, &live);
  const recap_memory_stat *live_arrays[NKEYS] = {
      live.allocated_bytes,      live.allocated_count,      live.reserved_bytes,
      live.reserved_count,       live.active_bytes,         live.active_count,
      live.inactive_split_bytes, live.inactive_split_count, live.requested_bytes,
      live.requested_count};
  for (int k = 0; k < NKEYS; k++) {
    for (int t = 0; t < 3; t++) {
      char key[64];
      snprintf(key, sizeof key, "%s.%s.current", keys[k], types[t]);
      int64_t reported = snapshot_stat(root, key);
      if (reported != sum[k][t] || live_arrays[k][t].current != sum[k][t])
        fprintf(stderr, "\n  stat %s (%s): snapshot stats %lld, live %lld, sum of blocks %lld\n",
                keys[k], types[t], (long long)reported, (long long)live_arrays[k][t].current,
                (long long)sum[k][t]);
      CU_ASSERT_EQUAL(reported, sum[k][t]);
      CU_ASSERT_EQUAL(live_arrays[k][t].current, sum[k][t]);
    }
  }
  json_decref(root);
}

void allocator_fixture_open(allocator_fixture *f, const char *conf, size_t capacity) {
  memset(f, 0, sizeof *f);
  CHECK_OK(recap__raw_runtime_init(&f->runtime, test_device, &f->inner));
  CHECK_OK(recap__raw_failing_create(&f->inner, &f->failing));
  if (capacity > 0) recap__raw_failing_set_capacity(f->failing, capacity);
  recap__raw_failing_backend(f->failing, &f->raw);
  recap__allocator_options options = {.device = test_device, .raw = &f->raw, .conf = conf};
  CHECK_OK(recap__allocator_create(&options, &f->a));
  CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &f->s1));
  CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &f->s2));
}
