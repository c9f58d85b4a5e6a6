/*
 * expandable.c: expandable segments (RECAP_ALLOC_CONF=expandable_segments:True).
 *
 * A fixed segment is one raw allocation of a size chosen when it is made; a request that fits
 * no cached block gets a new segment, and a pool that served different sizes over time ends up
 * holding many partly used segments (fragmentation). An expandable segment instead reserves a
 * large range of address space once and maps physical chunks at its end as it grows
 * (cuMemCreate + cuMemMap + cuMemSetAccess on CUDA), so:
 * - one segment per (pool, stream, size class) serves every size: a request that does not fit
 *   extends the free block at the end of the segment, or appends a block there;
 * - the segment's base address never moves, so blocks already handed out stay valid;
 * - releasing memory unmaps whole chunks at the free end of a segment (or the whole segment)
 *   and nothing else: a chunk holding any part of a live block is never unmapped.
 *
 * Captured graphs: a graph's memory comes from its private pool, and a pool that is still
 * referenced (a graph, a route or a handle holds it) is never trimmed or released (see
 * pool_releasable in caching.c), so memory a live graph may touch stays mapped.
 *
 * Stats: reserved_bytes counts mapped bytes (what the device gave), reserved_count counts
 * segments; the snapshot's total_size of an expandable segment is its mapped size.
 *
 * Chunk sizes follow PyTorch's expandable segments: 2 MiB for the small size class, 20 MiB for
 * the large one (rounded up to the backend's granularity). Each chunk is mapped by its own
 * vmm_map call, so any tail of chunks can be unmapped on its own (CUDA unmaps only whole
 * mappings).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "allocator/internal.h"
#include "runtime/capture.h"
#include "runtime/error.h"

/* Address space one segment reserves when the device's capacity is unknown. */
enum { DEFAULT_VA_BYTES = 1 << 30 };

bool recap__expandable_supported(const recap__raw_backend *raw) {
  return raw->vmm_granularity && raw->vmm_reserve && raw->vmm_release && raw->vmm_map &&
         raw->vmm_unmap;
}

static size_t round_up(size_t v, size_t unit) {
  return (v + unit - 1) / unit * unit;
}

/* The last block of a segment (the one ending at base + size). A walk of the segment's blocks:
 * only growth (which maps memory) and trimming ask, never the cached malloc+free path. */
static recap__block *tail_block(recap__allocator *a, const recap__segment *seg) {
  return recap__find_block(a, seg->base + seg->size - 1);
}

/* ------------------------------------------------------------------------------------------
 * Mapping and unmapping chunks
 * ---------------------------------------------------------------------------------------- */

typedef struct {
  uintptr_t addr;
  size_t bytes, chunk;
  size_t mapped; /* out: bytes mapped from addr before a failure */
} map_request;

/* Maps [addr, addr + bytes) chunk by chunk; on failure unmaps what it mapped. */
static recap_status map_chunks(recap__allocator *a, void *arg) {
  map_request *r = arg;
  recap_status st = RECAP_OK;
  for (r->mapped = 0; r->mapped < r->bytes; r->mapped += r->chunk) {
    st = a->raw.vmm_map(a->raw.ctx, (void *)(r->addr + r->mapped), r->chunk);
    if (st != RECAP_OK) break;
  }
  if (st == RECAP_OK) return RECAP_OK;
  /* Keep the original failure's message: the unmaps below may overwrite it. */
  char why[512];
  snprintf(why, sizeof why, "%s", recap_last_error());
  while (r->mapped > 0) {
    r->mapped -= r->chunk;
    a->raw.vmm_unmap(a->raw.ctx, (void *)(r->addr + r->mapped), r->chunk);
  }
  return recap__fail_plain(st, "%s", why);
}

typedef struct {
  size_t bytes;
  void *base;
} reserve_request;

static recap_status reserve_range(recap__allocator *a, void *arg) {
  reserve_request *r = arg;
  return a->raw.vmm_reserve(a->raw.ctx, r->bytes, &r->base);
}

/* Unmaps chunks from `end` down to `stop` (both chunk-aligned offsets from seg->base) and
 * returns the offset where unmapping stopped (== stop when everything went). Inside
 * recap__unsafe_enter. */
static size_t unmap_tail(recap__allocator *a, recap__segment *seg, size_t stop) {
  size_t end = seg->size;
  /* Queued work may still read the free tail (frees are stream-ordered, and unlike cudaFree
   * an unmap does not wait for it): let the device finish first, as PyTorch does. A failed
   * synchronize (a faulted device) leaves the memory mapped. */
  if (end > stop && a->raw.synchronize && a->raw.synchronize(a->raw.ctx) != RECAP_OK) return end;
  while (end > stop) {
    if (a->raw.vmm_unmap(a->raw.ctx, (void *)(seg->base + end - seg->chunk), seg->chunk) !=
        RECAP_OK)
      break;
    end -= seg->chunk;
    a->stats.num_device_free++;
  }
  return end;
}

static void unlink_segment(recap__pool *pool, recap__segment *seg) {
  for (recap__segment **link = &pool->expandable; *link; link = &(*link)->next_expandable) {
    if (*link == seg) {
      *link = seg->next_expandable;
      return;
    }
  }
}

/* ------------------------------------------------------------------------------------------
 * Growth
 * ---------------------------------------------------------------------------------------- */

static recap_status check_fraction(recap__allocator *a, size_t bytes) {
  int64_t reserved = a->stats.reserved_bytes[RECAP_STAT_ALL].current;
  if (a->fraction_set && (size_t)reserved + bytes > a->allowed_bytes)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY,
                      "the memory fraction %.3f allows %zu bytes and %" PRId64 " are reserved",
                      a->fraction, a->allowed_bytes, reserved);
  return RECAP_OK;
}

/* Maps `grow` more bytes at the end of `seg` and returns its free tail block (out of its free
 * set), which then has at least `rounded` bytes. */
static recap_status grow_segment(recap__allocator *a, recap__segment *seg, size_t grow,
                                 recap__block **out) {
  RECAP_TRY(check_fraction(a, grow));
  recap__block *tail = tail_block(a, seg);
  bool extend = tail->state == RECAP__BLOCK_FREE;
  recap__block *fresh = NULL;
  if (!extend) {
    fresh = recap__block_new(a);
    if (!fresh) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no host memory for a block record");
  }
  map_request r = {.addr = seg->base + seg->size, .bytes = grow, .chunk = seg->chunk};
  recap_status st = recap__raw_call_relaxed(a, map_chunks, &r);
  if (st != RECAP_OK) {
    if (fresh) recap__block_delete(a, fresh);
    return st;
  }
  if (extend) {
    recap__free_set_remove(a, tail);
    tail->size += grow;
  } else {
    fresh->addr = seg->base + seg->size;
    fresh->size = grow;
    fresh->segment = seg;
    fresh->state = RECAP__BLOCK_FREE;
    fresh->prev = tail;
    tail->next = fresh;
    tail = fresh;
  }
  seg->size += grow;
  seg->pool->reserved_bytes += grow;
  recap__stat_add(a->stats.reserved_bytes, seg->small, (int64_t)grow);
  a->stats.num_device_alloc += (int64_t)(grow / seg->chunk);
  *out = tail;
  return RECAP_OK;
}

/* The address space a new segment reserves: the device's capacity (so one segment can grow to
 * anything the device could give), at least what the first request needs. */
static size_t va_bytes_for(recap__allocator *a, size_t first, size_t chunk) {
  size_t free_bytes = 0, total = 0;
  size_t va = DEFAULT_VA_BYTES;
  if (a->raw.mem_get_info && recap__unsafe_enter()) {
    if (a->raw.mem_get_info(a->raw.ctx, &free_bytes, &total) == RECAP_OK && total > 0) va = total;
    recap__unsafe_exit();
  }
  va = round_up(va, chunk);
  return va < first ? first : va;
}

static recap_status new_segment(recap__allocator *a, recap__pool *pool, recap_stream *stream,
                                bool small, size_t chunk, size_t rounded, recap__block **out) {
  size_t first = round_up(rounded, chunk);
  RECAP_TRY(check_fraction(a, first));
  recap__segment *seg = calloc(1, sizeof *seg);
  recap__block *b = recap__block_new(a);
  if (!seg || !b) {
    free(seg);
    if (b) recap__block_delete(a, b);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no host memory for a segment record");
  }
  reserve_request rr = {.bytes = va_bytes_for(a, first, chunk)};
  recap_status st = recap__raw_call_relaxed(a, reserve_range, &rr);
  if (st != RECAP_OK) goto fail;
  map_request mr = {.addr = (uintptr_t)rr.base, .bytes = first, .chunk = chunk};
  st = recap__raw_call_relaxed(a, map_chunks, &mr);
  if (st != RECAP_OK) goto fail_release;
  *seg = (recap__segment){.base = (uintptr_t)rr.base,
                          .size = first,
                          .pool = pool,
                          .stream = stream,
                          .small = small,
                          .expandable = true,
                          .va_size = rr.bytes,
                          .chunk = chunk,
                          .next_expandable = pool->expandable};
  pool->expandable = seg;
  b->addr = seg->base;
  b->size = first;
  b->segment = seg;
  b->state = RECAP__BLOCK_FREE;
  recap__segment_index_insert(a, b);
  pool->reserved_bytes += first;
  pool->segment_count++;
  recap__stat_add(a->stats.reserved_bytes, small, (int64_t)first);
  recap__stat_add(a->stats.reserved_count, small, 1);
  a->stats.num_device_alloc += (int64_t)(first / chunk);
  *out = b;
  return RECAP_OK;

fail_release:
  /* Releasing an unmapped reservation cannot be refused by a backend that granted it; if it
   * is, the address space (not memory) is lost, which is the lesser harm. */
  if (recap__unsafe_enter()) {
    a->raw.vmm_release(a->raw.ctx, rr.base, rr.bytes);
    recap__unsafe_exit();
  }
fail:
  free(seg);
  recap__block_delete(a, b);
  return st;
}

recap_status recap__expandable_grow(recap__allocator *a, recap__pool *pool, recap_stream *stream,
                                    bool small, size_t rounded, recap__block **out) {
  size_t granularity = 0;
  RECAP_TRY(a->raw.vmm_granularity(a->raw.ctx, &granularity));
  if (granularity == 0) return RECAP_FAIL(RECAP_STATUS_INTERNAL, "vmm granularity is 0");
  size_t chunk =
      round_up(small ? RECAP__ALLOC_SMALL_BUFFER : RECAP__ALLOC_LARGE_BUFFER, granularity);
  for (recap__segment *seg = pool->expandable; seg; seg = seg->next_expandable) {
    if (seg->stream != stream || seg->retired || seg->small != small) continue;
    recap__block *tail = tail_block(a, seg);
    size_t have = tail->state == RECAP__BLOCK_FREE ? tail->size : 0;
    /* The tail is free only when no free block fitted (take_free_block ran first), so the
     * request needs more than it has. */
    size_t grow = round_up(rounded - (have < rounded ? have : rounded), seg->chunk);
    if (grow == 0 || seg->va_size - seg->size < grow) continue;
    return grow_segment(a, seg, grow, out);
  }
  return new_segment(a, pool, stream, small, chunk, rounded, out);
}

/* ------------------------------------------------------------------------------------------
 * Release
 * ---------------------------------------------------------------------------------------- */

void recap__expandable_trim(recap__allocator *a, recap__pool *pool) {
  for (recap__segment *seg = pool->expandable; seg; seg = seg->next_expandable) {
    recap__block *tail = tail_block(a, seg);
    /* A segment that is one free block goes back whole (release_pool_locked's next step). */
    if (tail->state != RECAP__BLOCK_FREE || !tail->prev) continue;
    size_t keep = round_up(tail->addr - seg->base, seg->chunk);
    if (keep >= seg->size) continue;
    size_t old_size = seg->size;
    size_t end = unmap_tail(a, seg, keep);
    if (end == old_size) continue;
    size_t released = old_size - end;
    recap__free_set_remove(a, tail);
    seg->size = end;
    tail->size -= released;
    if (tail->size == 0) {
      /* The free block began on a chunk boundary: it is gone with its chunks. */
      tail->prev->next = NULL;
      recap__block_delete(a, tail);
    } else {
      recap__free_set_insert(a, tail);
    }
    pool->reserved_bytes -= released;
    recap__stat_add(a->stats.reserved_bytes, seg->small, -(int64_t)released);
  }
}

bool recap__expandable_release(recap__allocator *a, recap__block *b) {
  recap__segment *seg = b->segment;
  recap__pool *pool = seg->pool;
  size_t old_size = seg->size;
  size_t end = unmap_tail(a, seg, 0);
  size_t released = old_size - end;
  pool->reserved_bytes -= released;
  recap__stat_add(a->stats.reserved_bytes, seg->small, -(int64_t)released);
  recap__free_set_remove(a, b);
  if (end > 0) {
    /* Some chunks would not unmap: keep the segment with what is still mapped. */
    seg->size = end;
    b->size = end;
    recap__free_set_insert(a, b);
    return false;
  }
  a->raw.vmm_release(a->raw.ctx, (void *)seg->base, seg->va_size);
  recap__segment_index_remove(a, b);
  unlink_segment(pool, seg);
  pool->segment_count--;
  recap__stat_add(a->stats.reserved_count, seg->small, -1);
  recap__block_delete(a, b);
  free(seg);
  if (pool->id != 0) recap__pool_maybe_destroy(a, pool);
  return true;
}
