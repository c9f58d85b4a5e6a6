/*
 * memviz_model.c: reads an allocator snapshot from untrusted JSON into cli_memviz_model
 * (memviz_model.h lists the rules). Every check names the JSON path of what it refused, so a
 * person can find the problem in the file.
 *
 * Two spellings are read (docs/ALLOCATOR.md, "Snapshots and stats in PyTorch's format"):
 * recap's first format ("pool_id", "expandable", nested "stats") and the current one, which
 * is torch.cuda.memory._snapshot()'s ("segment_pool_id", "is_expandable", per-segment
 * "device", flat "memory_stats"). A snapshot PyTorch wrote has no "device" object and its
 * segments come in no particular order; both are accepted.
 */
#include "cli/memviz_model.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/file.h"

/* Addresses and sizes above this are not memory any device has (and sums of two never
 * overflow). */
#define MAX_VALUE ((uint64_t)1 << 60)

/* JSON paths in messages are short by construction (fixed keys and indices); snprintf's
 * result is checked only so that gcc knows a cut path (a shorter message) is intended. */

typedef struct {
  const char *name; /* the file's, for messages */
  cli_memviz_model *m;
  size_t blocks_capacity;
} parser;

static recap_status bad(const parser *ps, const char *path, const char *fmt, ...)
    RECAP__PRINTF(3, 4);
static recap_status bad(const parser *ps, const char *path, const char *fmt, ...) {
  char detail[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  return recap__fail_plain(RECAP_STATUS_INVALID_ARGUMENT, "%s: %s: %s", ps->name, path, detail);
}

/* A required non-negative integer below MAX_VALUE. */
static recap_status get_u64(const parser *ps, json_t *obj, const char *path, const char *key,
                            uint64_t *out) {
  char where[160];
  if (snprintf(where, sizeof where, "%s.%s", path, key) < 0) where[0] = 0;
  json_t *v = json_object_get(obj, key);
  if (!v) return bad(ps, where, "missing");
  if (!json_is_integer(v)) return bad(ps, where, "expected a whole number");
  json_int_t x = json_integer_value(v);
  if (x < 0 || (uint64_t)x >= MAX_VALUE)
    return bad(ps, where, "%lld is out of range [0, 2^60)", (long long)x);
  *out = (uint64_t)x;
  return RECAP_OK;
}

static recap_status get_object(const parser *ps, json_t *parent, const char *path, const char *key,
                               bool required, json_t **out) {
  char where[160];
  if (snprintf(where, sizeof where, "%s%s%s", path, *path ? "." : "", key) < 0) where[0] = 0;
  json_t *v = json_object_get(parent, key);
  *out = NULL;
  if (!v) return required ? bad(ps, where, "missing") : RECAP_OK;
  if (!json_is_object(v)) return bad(ps, where, "expected an object");
  *out = v;
  return RECAP_OK;
}

static recap_status get_array(const parser *ps, json_t *parent, const char *path, const char *key,
                              bool required, size_t max, json_t **out) {
  char where[160];
  if (snprintf(where, sizeof where, "%s%s%s", path, *path ? "." : "", key) < 0) where[0] = 0;
  json_t *v = json_object_get(parent, key);
  *out = NULL;
  if (!v) return required ? bad(ps, where, "missing") : RECAP_OK;
  if (!json_is_array(v)) return bad(ps, where, "expected an array");
  if (json_array_size(v) > max)
    return bad(ps, where, "%zu entries, more than the %zu allowed", json_array_size(v), max);
  *out = v;
  return RECAP_OK;
}

/* PyTorch's snapshot names no backend and gives each segment its device; memviz draws one
 * device, so all segments must agree. The segments are checked one by one later. */
static recap_status device_from_segments(parser *ps, json_t *jsegs) {
  memcpy(ps->m->backend, "cuda", sizeof "cuda");
  ps->m->device_index = 0;
  size_t i;
  json_t *js;
  json_array_foreach(jsegs, i, js) {
    json_t *d = json_is_object(js) ? json_object_get(js, "device") : NULL;
    char path[160];
    if (snprintf(path, sizeof path, "segments[%zu].device", i) < 0) path[0] = 0;
    if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > 1023)
      return bad(ps, path, "expected a whole number in [0, 1023] (the file has no \"device\")");
    if (i == 0) ps->m->device_index = (int)json_integer_value(d);
    if (json_integer_value(d) != ps->m->device_index)
      return bad(ps, path,
                 "device %lld, but segments[0] is on device %d: memviz draws one device's "
                 "segments",
                 (long long)json_integer_value(d), ps->m->device_index);
  }
  return RECAP_OK;
}

static recap_status parse_device(parser *ps, json_t *root, json_t *jsegs) {
  json_t *dev;
  RECAP_TRY(get_object(ps, root, "", "device", false, &dev));
  if (!dev) return device_from_segments(ps, jsegs);
  json_t *backend = json_object_get(dev, "backend");
  if (!json_is_string(backend)) return bad(ps, "device.backend", "expected a string");
  size_t len = json_string_length(backend);
  const char *s = json_string_value(backend);
  if (len == 0 || len >= CLI_MEMVIZ_MAX_NAME)
    return bad(ps, "device.backend", "length %zu is not in [1, %d]", len, CLI_MEMVIZ_MAX_NAME - 1);
  for (size_t i = 0; i < len; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
          (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
      return bad(ps, "device.backend", "only letters, digits, '_' and '-' are allowed");
  memcpy(ps->m->backend, s, len + 1);
  json_t *index = json_object_get(dev, "index");
  if (!json_is_integer(index) || json_integer_value(index) < 0 || json_integer_value(index) > 1023)
    return bad(ps, "device.index", "expected a whole number in [0, 1023]");
  ps->m->device_index = (int)json_integer_value(index);
  return RECAP_OK;
}

static recap_status parse_state(const parser *ps, json_t *b, const char *path,
                                cli_memviz_state *out) {
  char where[160];
  if (snprintf(where, sizeof where, "%s.state", path) < 0) where[0] = 0;
  json_t *v = json_object_get(b, "state");
  if (!json_is_string(v)) return bad(ps, where, "expected a string");
  static const char *const names[CLI_MEMVIZ_STATE_COUNT] = {"active_allocated",
                                                            "active_pending_free", "inactive"};
  for (int i = 0; i < CLI_MEMVIZ_STATE_COUNT; i++)
    if (strcmp(json_string_value(v), names[i]) == 0 && json_string_length(v) == strlen(names[i])) {
      *out = (cli_memviz_state)i;
      return RECAP_OK;
    }
  return bad(ps, where, "expected active_allocated, active_pending_free or inactive");
}

static recap_status parse_blocks(parser *ps, json_t *jblocks, const char *path,
                                 cli_memviz_segment *seg) {
  cli_memviz_model *m = ps->m;
  size_t n = json_array_size(jblocks);
  if (n == 0) return bad(ps, path, "a segment has at least one block");
  if (n > CLI_MEMVIZ_MAX_BLOCKS - m->num_blocks)
    return bad(ps, path, "more than %d blocks in the snapshot", CLI_MEMVIZ_MAX_BLOCKS);
  if (m->num_blocks + n > ps->blocks_capacity) {
    size_t cap = ps->blocks_capacity ? ps->blocks_capacity : 64;
    while (cap < m->num_blocks + n) cap *= 2;
    cli_memviz_block *grown = realloc(m->blocks, cap * sizeof *grown);
    if (!grown) return recap__fail_plain(RECAP_STATUS_OUT_OF_MEMORY, "%s: no memory", ps->name);
    m->blocks = grown;
    ps->blocks_capacity = cap;
  }
  seg->first_block = m->num_blocks;
  uint64_t at = seg->address;
  for (size_t i = 0; i < n; i++) {
    char where[160];
    if (snprintf(where, sizeof where, "%s[%zu]", path, i) < 0) where[0] = 0;
    json_t *jb = json_array_get(jblocks, i);
    if (!json_is_object(jb)) return bad(ps, where, "expected an object");
    cli_memviz_block b;
    /* Older PyTorch snapshots give blocks no address: they tile from the segment's. */
    b.address = at;
    if (json_object_get(jb, "address")) RECAP_TRY(get_u64(ps, jb, where, "address", &b.address));
    RECAP_TRY(get_u64(ps, jb, where, "size", &b.size));
    RECAP_TRY(get_u64(ps, jb, where, "requested_size", &b.requested));
    RECAP_TRY(parse_state(ps, jb, where, &b.state));
    if (b.address != at)
      return bad(ps, where,
                 "address %#" PRIx64 " should be %#" PRIx64
                 " (blocks tile their segment in address order)",
                 b.address, at);
    if (b.size == 0) return bad(ps, where, "size is 0");
    if (b.size > seg->address + seg->total_size - at)
      return bad(ps, where, "%" PRIu64 " bytes run past the segment's end", b.size);
    if (b.requested > b.size)
      return bad(ps, where, "requested_size %" PRIu64 " exceeds size %" PRIu64, b.requested,
                 b.size);
    /* A segment's requested_size counts its active blocks only, as PyTorch's does: an
     * inactive block's requested_size need not be 0 there. */
    if (b.state == CLI_MEMVIZ_ALLOCATED) seg->allocated += b.size;
    if (b.state != CLI_MEMVIZ_INACTIVE) {
      seg->active += b.size;
      seg->requested += b.requested;
    }
    at += b.size;
    m->blocks[m->num_blocks++] = b;
  }
  if (at != seg->address + seg->total_size)
    return bad(ps, path, "the blocks cover %" PRIu64 " of the segment's %" PRIu64 " bytes",
               at - seg->address, seg->total_size);
  seg->block_count = n;
  return RECAP_OK;
}

/* A stated total must equal what the blocks add up to: a mismatch means a corrupt file. */
static recap_status check_total(const parser *ps, json_t *js, const char *path, const char *key,
                                uint64_t computed) {
  uint64_t stated;
  RECAP_TRY(get_u64(ps, js, path, key, &stated));
  if (stated != computed)
    return bad(ps, path, "%s is %" PRIu64 " but the blocks add up to %" PRIu64, key, stated,
               computed);
  return RECAP_OK;
}

/* "segment_pool_id" is PyTorch's pair: (0, n) for a pool made by graph_pool_handle() or a
 * MemPool, (capture id, 0) for a capture's own pool, (0, 0) for the default pool; recap writes
 * (0, its pool id). The model keeps the non-zero half, so a pair with two non-zero halves is
 * refused. recap's first format has "pool_id". */
static recap_status parse_pool_id(const parser *ps, json_t *js, const char *path, uint64_t *out) {
  json_t *pair = json_object_get(js, "segment_pool_id");
  if (!pair) return get_u64(ps, js, path, "pool_id", out);
  char where[176];
  if (snprintf(where, sizeof where, "%s.segment_pool_id", path) < 0) where[0] = 0;
  json_t *hi = json_array_get(pair, 0), *lo = json_array_get(pair, 1);
  if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_integer(hi) ||
      !json_is_integer(lo))
    return bad(ps, where, "expected a pair of whole numbers");
  json_int_t a = json_integer_value(hi), b = json_integer_value(lo);
  if (a < 0 || b < 0 || (uint64_t)a >= MAX_VALUE || (uint64_t)b >= MAX_VALUE)
    return bad(ps, where, "out of range [0, 2^60)");
  if (a != 0 && b != 0) return bad(ps, where, "one of the two ids should be 0");
  *out = (uint64_t)(a ? a : b);
  return RECAP_OK;
}

static recap_status parse_segment(parser *ps, json_t *js, size_t index) {
  cli_memviz_model *m = ps->m;
  char path[160];
  if (snprintf(path, sizeof path, "segments[%zu]", index) < 0) path[0] = 0;
  if (!json_is_object(js)) return bad(ps, path, "expected an object");
  cli_memviz_segment *seg = &m->segments[index];
  memset(seg, 0, sizeof *seg);
  RECAP_TRY(get_u64(ps, js, path, "address", &seg->address));
  RECAP_TRY(get_u64(ps, js, path, "total_size", &seg->total_size));
  RECAP_TRY(get_u64(ps, js, path, "stream", &seg->stream));
  RECAP_TRY(parse_pool_id(ps, js, path, &seg->pool_id));
  if (seg->total_size == 0) return bad(ps, path, "total_size is 0");
  json_t *dev = json_object_get(js, "device");
  if (dev && (!json_is_integer(dev) || json_integer_value(dev) != m->device_index))
    return bad(ps, path, "device: expected %d, the snapshot's device", m->device_index);
  json_t *type = json_object_get(js, "segment_type");
  if (!json_is_string(type) || (strcmp(json_string_value(type), "small") != 0 &&
                                strcmp(json_string_value(type), "large") != 0))
    return bad(ps, path, "segment_type: expected \"small\" or \"large\"");
  seg->small = json_string_value(type)[0] == 's';
  const char *exp_key = json_object_get(js, "is_expandable") ? "is_expandable" : "expandable";
  json_t *exp = json_object_get(js, exp_key);
  if (exp && !json_is_boolean(exp)) return bad(ps, path, "%s: expected true or false", exp_key);
  seg->expandable = exp && json_is_true(exp);
  seg->reserved_address_space = seg->total_size;
  if (json_object_get(js, "reserved_address_space")) {
    RECAP_TRY(get_u64(ps, js, path, "reserved_address_space", &seg->reserved_address_space));
    if (seg->reserved_address_space < seg->total_size)
      return bad(ps, path, "reserved_address_space is smaller than total_size");
  }
  char bpath[176];
  if (snprintf(bpath, sizeof bpath, "%s.blocks", path) < 0) bpath[0] = 0;
  json_t *jblocks;
  RECAP_TRY(get_array(ps, js, path, "blocks", true, CLI_MEMVIZ_MAX_BLOCKS, &jblocks));
  RECAP_TRY(parse_blocks(ps, jblocks, bpath, seg));
  RECAP_TRY(check_total(ps, js, path, "allocated_size", seg->allocated));
  RECAP_TRY(check_total(ps, js, path, "active_size", seg->active));
  RECAP_TRY(check_total(ps, js, path, "requested_size", seg->requested));
  m->reserved += seg->total_size;
  m->allocated += seg->allocated;
  m->active += seg->active;
  return RECAP_OK;
}

static recap_status parse_pools(parser *ps, json_t *root) {
  json_t *jpools;
  RECAP_TRY(get_array(ps, root, "", "pools", false, CLI_MEMVIZ_MAX_POOLS, &jpools));
  size_t n = jpools ? json_array_size(jpools) : 0;
  if (n == 0) return RECAP_OK;
  cli_memviz_model *m = ps->m;
  if (!(m->pools = calloc(n, sizeof *m->pools)))
    return recap__fail_plain(RECAP_STATUS_OUT_OF_MEMORY, "%s: no memory", ps->name);
  for (size_t i = 0; i < n; i++) {
    char path[160];
    if (snprintf(path, sizeof path, "pools[%zu]", i) < 0) path[0] = 0;
    json_t *jp = json_array_get(jpools, i);
    if (!json_is_object(jp)) return bad(ps, path, "expected an object");
    cli_memviz_pool *p = &m->pools[i];
    uint64_t uses;
    RECAP_TRY(get_u64(ps, jp, path, "id", &p->id));
    RECAP_TRY(get_u64(ps, jp, path, "reserved_bytes", &p->reserved_bytes));
    RECAP_TRY(get_u64(ps, jp, path, "use_count", &uses));
    if (p->id == 0) return bad(ps, path, "id 0 is the default pool, never a private one");
    p->use_count = (int64_t)uses;
    m->num_pools = i + 1;
  }
  return RECAP_OK;
}

/* The peaks from "memory_stats" (torch.cuda.memory_stats()'s flat keys). */
static recap_status parse_flat_peaks(parser *ps, json_t *stats) {
  RECAP_TRY(get_u64(ps, stats, "memory_stats", "reserved_bytes.all.peak", &ps->m->peak_reserved));
  RECAP_TRY(get_u64(ps, stats, "memory_stats", "allocated_bytes.all.peak", &ps->m->peak_allocated));
  ps->m->has_peaks = true;
  return RECAP_OK;
}

/* The peaks, when the optional "memory_stats" or (recap's first format) "stats" object has
 * them; a malformed one is still refused. */
static recap_status parse_peaks(parser *ps, json_t *root) {
  json_t *stats;
  RECAP_TRY(get_object(ps, root, "", "memory_stats", false, &stats));
  if (stats) return parse_flat_peaks(ps, stats);
  RECAP_TRY(get_object(ps, root, "", "stats", false, &stats));
  if (!stats) return RECAP_OK;
  static const char *const keys[2] = {"reserved_bytes", "allocated_bytes"};
  uint64_t *dst[2] = {&ps->m->peak_reserved, &ps->m->peak_allocated};
  for (int k = 0; k < 2; k++) {
    char path[160];
    json_t *by_type, *all;
    if (snprintf(path, sizeof path, "stats.%s", keys[k]) < 0) path[0] = 0;
    RECAP_TRY(get_object(ps, stats, "stats", keys[k], true, &by_type));
    RECAP_TRY(get_object(ps, by_type, path, "all", true, &all));
    if (snprintf(path, sizeof path, "stats.%s.all", keys[k]) < 0) path[0] = 0;
    RECAP_TRY(get_u64(ps, all, path, "peak", dst[k]));
  }
  ps->m->has_peaks = true;
  return RECAP_OK;
}

static int by_address(const void *x, const void *y) {
  const cli_memviz_segment *a = x, *b = y;
  return (a->address > b->address) - (a->address < b->address);
}

/* The drawing walks segments in address order; PyTorch lists them in no particular order.
 * Blocks stay where they are: segments find theirs by index. */
static recap_status sort_segments(parser *ps) {
  cli_memviz_model *m = ps->m;
  if (m->num_segments > 1) qsort(m->segments, m->num_segments, sizeof *m->segments, by_address);
  for (size_t i = 1; i < m->num_segments; i++) {
    const cli_memviz_segment *prev = &m->segments[i - 1], *seg = &m->segments[i];
    if (seg->address < prev->address + prev->total_size)
      return bad(ps, "segments",
                 "the segment at %#" PRIx64 " overlaps the one at %#" PRIx64 " (%" PRIu64 " bytes)",
                 seg->address, prev->address, prev->total_size);
  }
  return RECAP_OK;
}

recap_status cli_memviz_parse(const char *text, size_t size, const char *name,
                              cli_memviz_model **out) {
  RECAP_CHECK_ARG((text || size == 0) && name && out);
  parser ps = {.name = name};
  if (size > CLI_MEMVIZ_MAX_BYTES)
    return recap__fail_plain(RECAP_STATUS_IO_ERROR, "%s: %zu bytes, more than the %d allowed", name,
                             size, CLI_MEMVIZ_MAX_BYTES);
  json_error_t err;
  json_t *root = json_loadb(text ? text : "", size, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return recap__fail_plain(RECAP_STATUS_INVALID_ARGUMENT, "%s:%d:%d: not valid JSON: %s", name,
                             err.line, err.column, err.text);
  recap_status st = RECAP_OK;
  if (!(ps.m = calloc(1, sizeof *ps.m))) {
    st = recap__fail_plain(RECAP_STATUS_OUT_OF_MEMORY, "%s: no memory", name);
    goto done;
  }
  if (!json_is_object(root)) {
    st = bad(&ps, "(top)", "expected an object");
    goto done;
  }
  json_t *jsegs;
  RECAP_TRY_GOTO(st, get_array(&ps, root, "", "segments", true, CLI_MEMVIZ_MAX_SEGMENTS, &jsegs),
                 done);
  RECAP_TRY_GOTO(st, parse_device(&ps, root, jsegs), done);
  size_t n = json_array_size(jsegs);
  if (n && !(ps.m->segments = calloc(n, sizeof *ps.m->segments))) {
    st = recap__fail_plain(RECAP_STATUS_OUT_OF_MEMORY, "%s: no memory", name);
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    RECAP_TRY_GOTO(st, parse_segment(&ps, json_array_get(jsegs, i), i), done);
    ps.m->num_segments = i + 1;
  }
  RECAP_TRY_GOTO(st, sort_segments(&ps), done);
  RECAP_TRY_GOTO(st, parse_pools(&ps, root), done);
  RECAP_TRY_GOTO(st, parse_peaks(&ps, root), done);
done:
  json_decref(root);
  if (st != RECAP_OK) {
    cli_memviz_model_free(ps.m);
    return st;
  }
  *out = ps.m;
  return RECAP_OK;
}

recap_status cli_memviz_load(const char *path, cli_memviz_model **out) {
  RECAP_CHECK_ARG(path && out);
  FILE *f;
  uint64_t file_bytes;
  RECAP_TRY(recap__file_open_regular(path, "snapshot", &f, &file_bytes));
  /* One byte more than allowed tells a too-large file from one exactly at the limit. */
  char *text = malloc((size_t)CLI_MEMVIZ_MAX_BYTES + 1);
  if (!text) {
    fclose(f);
    return recap__fail_plain(RECAP_STATUS_OUT_OF_MEMORY, "%s: no memory", path);
  }
  size_t size = fread(text, 1, (size_t)CLI_MEMVIZ_MAX_BYTES + 1, f);
  bool failed = ferror(f) != 0;
  fclose(f);
  recap_status st;
  if (failed)
    st = recap__fail_plain(RECAP_STATUS_IO_ERROR, "%s: read error", path);
  else if (size > CLI_MEMVIZ_MAX_BYTES)
    st = recap__fail_plain(RECAP_STATUS_IO_ERROR, "%s: larger than the %d bytes allowed", path,
                           CLI_MEMVIZ_MAX_BYTES);
  else
    st = cli_memviz_parse(text, size, path, out);
  free(text);
  return st;
}

void cli_memviz_model_free(cli_memviz_model *model) {
  if (!model) return;
  free(model->segments);
  free(model->blocks);
  free(model->pools);
  free(model);
}
