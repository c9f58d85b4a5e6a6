/* plan_place.c: arena offsets. A greedy best-fit placement from several orders, improved by
 * local search over the order, and the lower bound it stops at: with several streams, the
 * heaviest antichain of buffers by max flow (docs/PLANNER.md). */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/plan_internal.h"
#include "runtime/error.h"

typedef struct {
  const recap__plan_buffer *buffers;
  /* With several streams, per buffer and stream: the first op on that stream that every
   * access of the buffer happens before (INT_MAX: none). NULL with one stream. */
  const int *ready;
  const int *first_stream; /* per buffer: the stream of its first op (with ready) */
  int num_streams;
} conflict_ctx;

/* Whether buffers a and b (compact indices) must not share bytes: their lifetimes overlap,
 * or the earlier one has an access not ordered before the later one's first write. */
static bool conflicts(const conflict_ctx *c, int a, int b) {
  const recap__plan_buffer *A = &c->buffers[a], *B = &c->buffers[b];
  if (A->first_op <= B->last_op && B->first_op <= A->last_op) return true;
  if (!c->ready) return false;
  int early = A->last_op < B->first_op ? a : b;
  int late_first = early == a ? B->first_op : A->first_op;
  int late_stream = c->first_stream[early == a ? b : a];
  return late_first < c->ready[(size_t)early * c->num_streams + late_stream];
}

/* Fills ready (see conflict_ctx). Along one stream "every access of b happens before op j"
 * can only turn from false to true, so a binary search over the stream's ops finds where. */
static recap_status compute_ready(const planner *p, const int *ids, size_t n, int **out,
                                  int **first_stream) {
  int S = p->num_streams;
  int *ready = malloc(n * (size_t)S * sizeof *ready);
  int *first = malloc(n * sizeof *first);
  int *by_stream = malloc((p->num_ops ? (size_t)p->num_ops : 1) * sizeof *by_stream);
  int *stream_start = calloc((size_t)S + 1, sizeof *stream_start);
  if (!ready || !first || !by_stream || !stream_start) {
    free(ready);
    free(first);
    free(by_stream);
    free(stream_start);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the stream order");
  }
  /* Ops grouped by stream, in index order (a counting sort). */
  for (int j = 0; j < p->num_ops; j++) stream_start[p->ir->ops[j].stream + 1]++;
  for (int s = 0; s < S; s++) stream_start[s + 1] += stream_start[s];
  for (int j = 0; j < p->num_ops; j++) by_stream[stream_start[p->ir->ops[j].stream]++] = j;
  /* Filling moved each start to the next stream's start: shift them back. */
  for (int s = S; s > 0; s--) stream_start[s] = stream_start[s - 1];
  stream_start[0] = 0;
  for (size_t b = 0; b < n; b++) first[b] = p->ir->ops[p->work[ids[b]].first].stream;
  for (size_t b = 0; b < n; b++)
    for (int s = 0; s < S; s++) {
      int lo = stream_start[s], hi = stream_start[s + 1]; /* answer in [lo, hi] */
      while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (recap__plan_buffer_ordered_before(p, ids[b], by_stream[mid]) &&
            by_stream[mid] > p->work[ids[b]].last)
          hi = mid;
        else
          lo = mid + 1;
      }
      ready[b * S + s] = lo < stream_start[s + 1] ? by_stream[lo] : INT_MAX;
    }
  free(by_stream);
  free(stream_start);
  *out = ready;
  *first_stream = first;
  return RECAP_OK;
}

static size_t span(const recap__plan_buffer *b) {
  return (size_t)(b->last_op - b->first_op);
}

/* A buffer's position in one greedy order: keys compared ascending, then the index, so every
 * order is total and the plan deterministic. (qsort takes no context, hence explicit keys.) */
typedef struct {
  size_t key[3];
  int index;
} sort_entry;

enum { NUM_ORDERS = 3 };

/* Order 0: largest first (TFLite's greedy by size); 1: longest lifetime first; 2: by start,
 * like a linear scan. Descending keys are stored as SIZE_MAX - value. */
static sort_entry sort_key(const recap__plan_buffer *b, int index, int order) {
  size_t size = SIZE_MAX - b->bytes, length = SIZE_MAX - span(b), start = (size_t)b->first_op;
  sort_entry e = {.index = index};
  if (order == 0) {
    e.key[0] = size, e.key[1] = length, e.key[2] = start;
  } else if (order == 1) {
    e.key[0] = length, e.key[1] = size, e.key[2] = start;
  } else {
    e.key[0] = start, e.key[1] = size, e.key[2] = length;
  }
  return e;
}

static int compare_entries(const void *l, const void *r) {
  const sort_entry *a = l, *b = r;
  for (int k = 0; k < 3; k++)
    if (a->key[k] != b->key[k]) return a->key[k] < b->key[k] ? -1 : 1;
  return (a->index > b->index) - (a->index < b->index);
}

/* Places buffers in `order`, each into the smallest gap between the already placed buffers
 * it conflicts with that holds it, else above them. `placed` is kept sorted by offset, so
 * the gaps come out in one sweep without sorting per buffer. Returns the arena size. */
static size_t place_greedy(const conflict_ctx *c, size_t n, const int *order, size_t *offsets,
                           int *placed) {
  size_t num_placed = 0, arena = 0;
  for (size_t k = 0; k < n; k++) {
    int b = order[k];
    size_t size = c->buffers[b].bytes, cursor = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
    for (size_t q = 0; q < num_placed && size > 0; q++) {
      int other = placed[q];
      if (!conflicts(c, b, other)) continue;
      size_t start = offsets[other], end = start + c->buffers[other].bytes;
      if (start > cursor && start - cursor >= size && start - cursor < best_gap) {
        best = cursor;
        best_gap = start - cursor;
      }
      if (end > cursor) cursor = end;
    }
    offsets[b] = size == 0 ? 0 : best != SIZE_MAX ? best : cursor;
    if (offsets[b] + size > arena) arena = offsets[b] + size;
    size_t at = num_placed;
    while (at > 0 && offsets[placed[at - 1]] > offsets[b]) at--;
    memmove(&placed[at + 1], &placed[at], (num_placed - at) * sizeof *placed);
    placed[at] = b;
    num_placed++;
  }
  return arena;
}

/* Work allowed for improving the greedy orders, in buffer pairs examined (one greedy pass over
 * n buffers examines about n^2 / 2): a fraction of a second at most, whatever the pipeline. */
#define IMPROVE_BUDGET ((uint64_t)1 << 24)

/* trial = order with the element at position `from` moved to position `to`. */
static void move_one(const int *order, size_t n, size_t from, size_t to, int *trial) {
  size_t w = 0;
  for (size_t r = 0; r < n; r++) {
    if (r == from) continue;
    if (w == to) trial[w++] = order[from];
    trial[w++] = order[r];
  }
  if (w == to) trial[w] = order[from];
}

/* Local search over greedy orders: move one buffer to another position, re-run the greedy,
 * keep the first order that shrinks the arena, and start over, until no move helps, the arena
 * reaches the lower bound, or the budget is spent. The optimum is the greedy result of SOME
 * order (sort the buffers by their optimal offsets), so searching orders is searching the
 * right space; single moves repair what size-sorted orders typically get wrong (a large buffer
 * placed first where smaller ones with the same lifetime should have gone). */
static size_t improve_order(const conflict_ctx *c, size_t n, int *order, size_t best,
                            size_t lower_bound, int *trial, int *placed, size_t *offsets,
                            uint64_t *spent) {
  uint64_t cost = (uint64_t)n * n / 2 + 1;
  bool improved = true;
  while (improved && best > lower_bound) {
    improved = false;
    for (size_t from = 0; from < n && !improved; from++)
      for (size_t to = 0; to < n && !improved; to++) {
        if (to == from || to == from + 1) continue; /* no move, or the same as from+1 -> from */
        if (*spent + cost > IMPROVE_BUDGET) return best;
        *spent += cost;
        move_one(order, n, from, to, trial);
        size_t arena = place_greedy(c, n, trial, offsets, placed);
        if (arena >= best) continue;
        best = arena;
        memcpy(order, trial, n * sizeof *order);
        improved = true;
      }
  }
  return best;
}

/* ---- the lower bound with several streams ---------------------------------------------- */

/* A flow network for Dinic's max flow: edge e goes to to[e] with residual capacity cap[e];
 * e ^ 1 is its reverse; next[e] chains the edges out of one node from head[node]. */
typedef struct {
  int num_nodes, num_edges;
  int *to, *next, *head, *level, *iter, *queue, *path;
  uint64_t *cap;
} flow_net;

static void flow_edge(flow_net *f, int from, int to, uint64_t cap) {
  int e = f->num_edges;
  f->to[e] = to, f->cap[e] = cap, f->next[e] = f->head[from], f->head[from] = e;
  f->to[e + 1] = from, f->cap[e + 1] = 0, f->next[e + 1] = f->head[to], f->head[to] = e + 1;
  f->num_edges += 2;
}

/* Levels by breadth-first search over edges with capacity left; whether the sink is reached. */
static bool flow_levels(flow_net *f, int src, int sink) {
  for (int v = 0; v < f->num_nodes; v++) f->level[v] = -1;
  int qh = 0, qt = 0;
  f->queue[qt++] = src;
  f->level[src] = 0;
  while (qh < qt) {
    int u = f->queue[qh++];
    for (int e = f->head[u]; e >= 0; e = f->next[e])
      if (f->cap[e] > 0 && f->level[f->to[e]] < 0) {
        f->level[f->to[e]] = f->level[u] + 1;
        f->queue[qt++] = f->to[e];
      }
  }
  return f->level[sink] >= 0;
}

/* One augmenting path along increasing levels (iteratively: paths may be as long as the
 * op chains); its flow, 0 when none is left in this phase. Dead ends leave the level graph. */
static uint64_t flow_augment(flow_net *f, int src, int sink) {
  int depth = 0, u = src;
  for (;;) {
    if (u == sink) {
      uint64_t pushed = UINT64_MAX;
      for (int i = 0; i < depth; i++)
        if (f->cap[f->path[i]] < pushed) pushed = f->cap[f->path[i]];
      for (int i = 0; i < depth; i++) {
        f->cap[f->path[i]] -= pushed;
        f->cap[f->path[i] ^ 1] += pushed;
      }
      return pushed;
    }
    int e = f->iter[u];
    while (e >= 0 && (f->cap[e] == 0 || f->level[f->to[e]] != f->level[u] + 1)) e = f->next[e];
    f->iter[u] = e;
    if (e >= 0) {
      f->path[depth++] = e;
      u = f->to[e];
      continue;
    }
    f->level[u] = -1;
    if (depth == 0) return 0;
    u = f->to[f->path[--depth] ^ 1];
    f->iter[u] = f->next[f->iter[u]];
  }
}

/* The heaviest set of buffers that must pairwise be apart (conflicts(): live at one op, or
 * on streams where one's accesses are not ordered before the other's write): no placement can
 * be smaller. "May share" is a partial order here (A before B when every access of A happens
 * before B's first op; happens-before is transitive), so that set is its heaviest antichain,
 * which Dilworth's theorem with weights turns into a flow: the antichain weighs the total
 * minus the max flow of
 *   source -> out(A) (A's bytes), out(A) -> in(B) (unbounded) for A before B,
 *   in(B) -> out(B) (unbounded: orders compose), in(B) -> sink (B's bytes),
 * where "A before B" runs through a chain of nodes per stream: out(A) -> the first op of each
 * stream that every access of A happens before (ready) -> the ops after it on that stream ->
 * in(B) from B's first op. O(B * S + ops) edges. Single-stream plans need none of this:
 * there conflicts are lifetime overlaps only, and the largest set live at one op is exact. */
static recap_status antichain_bound(const planner *p, const int *ready, uint64_t *out) {
  const recap__plan *plan = p->plan;
  int n = (int)plan->num_buffers, S = p->num_streams, ops = p->num_ops;
  uint64_t total = 0;
  for (int b = 0; b < n; b++) {
    if (plan->buffers[b].bytes > UINT64_MAX / 4 - total)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the intermediates overflow size_t");
    total += plan->buffers[b].bytes;
  }
  int src = 2 * n + ops, sink = src + 1, nodes = sink + 1;
  size_t max_edges = 2 * ((size_t)n * (size_t)(4 + S) + (size_t)ops);
  flow_net f = {.num_nodes = nodes};
  f.to = malloc(max_edges * sizeof *f.to);
  f.next = malloc(max_edges * sizeof *f.next);
  f.cap = malloc(max_edges * sizeof *f.cap);
  f.head = malloc((size_t)nodes * sizeof *f.head);
  f.level = malloc((size_t)nodes * sizeof *f.level);
  f.iter = malloc((size_t)nodes * sizeof *f.iter);
  f.queue = malloc((size_t)nodes * sizeof *f.queue);
  f.path = malloc((size_t)nodes * sizeof *f.path);
  int *prev_on_stream = malloc((size_t)S * sizeof *prev_on_stream);
  recap_status st = RECAP_OK;
  if (!f.to || !f.next || !f.cap || !f.head || !f.level || !f.iter || !f.queue || !f.path ||
      !prev_on_stream) {
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the arena's lower bound");
    goto done;
  }
  uint64_t unbounded = total + 1;
  for (int v = 0; v < nodes; v++) f.head[v] = -1;
  /* Nodes: in(b) = b, out(b) = n + b, op j = 2n + j. */
  for (int s = 0; s < S; s++) prev_on_stream[s] = -1;
  for (int j = 0; j < ops; j++) {
    int s = p->ir->ops[j].stream;
    if (prev_on_stream[s] >= 0) flow_edge(&f, 2 * n + prev_on_stream[s], 2 * n + j, unbounded);
    prev_on_stream[s] = j;
  }
  for (int b = 0; b < n; b++) {
    const recap__plan_buffer *buf = &plan->buffers[b];
    flow_edge(&f, src, n + b, buf->bytes);
    flow_edge(&f, b, sink, buf->bytes);
    flow_edge(&f, b, n + b, unbounded);
    flow_edge(&f, 2 * n + buf->first_op, b, unbounded);
    /* A buffer live past the end comes before nothing. */
    for (int s = 0; s < S && buf->last_op < ops; s++)
      if (ready[(size_t)b * S + s] != INT_MAX)
        flow_edge(&f, n + b, 2 * n + ready[(size_t)b * S + s], unbounded);
  }
  uint64_t flow = 0;
  while (flow_levels(&f, src, sink)) {
    for (int v = 0; v < nodes; v++) f.iter[v] = f.head[v];
    for (uint64_t pushed; (pushed = flow_augment(&f, src, sink)) > 0;) flow += pushed;
  }
  *out = total - flow;
done:
  free(f.to);
  free(f.next);
  free(f.cap);
  free(f.head);
  free(f.level);
  free(f.iter);
  free(f.queue);
  free(f.path);
  free(prev_on_stream);
  return st;
}

recap_status recap__plan_place(const planner *p, const int *ids) {
  recap__plan *plan = p->plan;
  size_t n = plan->num_buffers;
  if (n == 0) return RECAP_OK;
  recap_status st = RECAP_OK;
  int *ready = NULL, *first_stream = NULL;
  if (p->stream_last) {
    RECAP_TRY(compute_ready(p, ids, n, &ready, &first_stream));
    uint64_t bound = 0;
    st = antichain_bound(p, ready, &bound);
    if (st != RECAP_OK) {
      free(ready);
      free(first_stream);
      return st;
    }
    if (bound > plan->max_live_bytes) plan->max_live_bytes = (size_t)bound;
  }
  if (plan->separate) {
    /* No sharing at all: each buffer above the previous one (the binder allocates each on
     * its own anyway; the offsets keep the plan's invariants, and the sum is the naive size). */
    size_t at = 0;
    for (size_t b = 0; b < n; b++) {
      plan->buffers[b].offset = at;
      at += plan->buffers[b].bytes;
    }
    plan->arena_bytes = at;
    free(ready);
    free(first_stream);
    return RECAP_OK;
  }
  sort_entry *entries = malloc(n * sizeof *entries);
  int *order = malloc(n * sizeof *order);
  int *best_order = malloc(n * sizeof *best_order);
  int *start = malloc(n * sizeof *start);
  int *placed = malloc(n * sizeof *placed);
  size_t *offsets = malloc(n * sizeof *offsets);
  if (!entries || !order || !best_order || !start || !placed || !offsets) {
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for %zu plan buffers", n);
    goto done;
  }
  conflict_ctx c = {.buffers = plan->buffers,
                    .ready = ready,
                    .first_stream = first_stream,
                    .num_streams = p->num_streams};
  size_t best = SIZE_MAX;
  uint64_t spent = 0; /* shared by the starts: the first gets the most */
  for (int o = 0; o < NUM_ORDERS && best > plan->max_live_bytes; o++) {
    for (size_t b = 0; b < n; b++) entries[b] = sort_key(&plan->buffers[b], (int)b, o);
    qsort(entries, n, sizeof *entries, compare_entries);
    for (size_t b = 0; b < n; b++) start[b] = entries[b].index;
    size_t arena = place_greedy(&c, n, start, offsets, placed);
    arena =
        improve_order(&c, n, start, arena, plan->max_live_bytes, order, placed, offsets, &spent);
    if (arena >= best) continue;
    best = arena;
    memcpy(best_order, start, n * sizeof *start);
  }
  plan->arena_bytes = place_greedy(&c, n, best_order, offsets, placed);
  for (size_t b = 0; b < n; b++) plan->buffers[b].offset = offsets[b];
done:
  free(ready);
  free(first_stream);
  free(entries);
  free(order);
  free(best_order);
  free(start);
  free(placed);
  free(offsets);
  return st;
}
