/* rng.c: the per-device Philox generators, capture slots and the backend-neutral fills. */
#include "runtime/rng.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>

#include "runtime/capture.h"
#include "runtime/error.h"

enum { MAX_RNG_DEVICES = 64, SLOT_BYTES = 2 * sizeof(uint64_t) };

typedef struct {
  bool seeded; /* false: never seeded, so the default seed applies */
  uint64_t seed;
  uint64_t offset;
  uint64_t initial_seed;
} generator;

/* A capture that may draw: its slot (as the binding it will become) and the streams whose
 * random ops draw from it. */
typedef struct rng_capture {
  recap_stream *origin;
  recap_stream **sides;
  size_t side_count;
  size_t side_capacity;
  recap__rng_graph_binding *binding; /* binding->increment counts the capture's draws */
  struct rng_capture *next;
} rng_capture;

/* A released slot whose device memory could not be freed yet because a capture was under
 * way (freeing is illegal then); freed by the next release that can, or reused by the next
 * capture of the same device. */
typedef struct pending_slot {
  recap__rng_graph_binding *binding;
  struct pending_slot *next;
} pending_slot;

/* One lock for all generators and capture records: a draw holds it for a few instructions,
 * so per-device locks would buy nothing. Never held across a backend call. */
static pthread_mutex_t rng_lock = PTHREAD_MUTEX_INITIALIZER;
static generator generators[2][MAX_RNG_DEVICES];
static rng_capture *captures;
static pending_slot *pending;

/* ---- generators ---------------------------------------------------------------------- */

static recap_status check_device_index(recap_device device) {
  if (device.index < 0 || device.index >= MAX_RNG_DEVICES)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "device index %d out of range (max %d)",
                      device.index, MAX_RNG_DEVICES - 1);
  return RECAP_OK;
}

/* The device's generator; the caller holds rng_lock and has checked the index. */
static generator *generator_locked(recap_device device) {
  generator *g = &generators[device.backend == RECAP_BACKEND_CUDA][device.index];
  if (!g->seeded) {
    g->seeded = true;
    g->seed = RECAP__RNG_DEFAULT_SEED;
    g->initial_seed = RECAP__RNG_DEFAULT_SEED;
    g->offset = 0;
  }
  return g;
}

/* For the public functions: the device must exist. */
static recap_status check_public_device(recap_device device) {
  const recap__backend *backend;
  RECAP_TRY(recap__device_backend(device, &backend));
  return check_device_index(device);
}

recap_status recap_rng_manual_seed(recap_device device, uint64_t seed) {
  RECAP_TRY(check_public_device(device));
  pthread_mutex_lock(&rng_lock);
  generator *g = generator_locked(device);
  g->seed = seed;
  g->initial_seed = seed;
  g->offset = 0;
  pthread_mutex_unlock(&rng_lock);
  return RECAP_OK;
}

static recap_status random_seed(uint64_t *out) {
  if (getrandom(out, sizeof *out, 0) == (ssize_t)sizeof *out) return RECAP_OK;
  /* Kernels before 3.17 lack getrandom; /dev/urandom gives the same bytes there. */
  FILE *f = fopen("/dev/urandom", "rb");
  if (!f) return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "cannot open /dev/urandom for a seed");
  size_t got = fread(out, sizeof *out, 1, f);
  fclose(f);
  if (got != 1) return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "cannot read a seed from /dev/urandom");
  return RECAP_OK;
}

recap_status recap_rng_seed(recap_device device, uint64_t *out_seed) {
  RECAP_CHECK_ARG(out_seed);
  RECAP_TRY(check_public_device(device));
  uint64_t seed;
  RECAP_TRY(random_seed(&seed));
  RECAP_TRY(recap_rng_manual_seed(device, seed));
  *out_seed = seed;
  return RECAP_OK;
}

recap_status recap_rng_initial_seed(recap_device device, uint64_t *out_seed) {
  RECAP_CHECK_ARG(out_seed);
  RECAP_TRY(check_public_device(device));
  pthread_mutex_lock(&rng_lock);
  *out_seed = generator_locked(device)->initial_seed;
  pthread_mutex_unlock(&rng_lock);
  return RECAP_OK;
}

recap_status recap_rng_get_state(recap_device device, recap_rng_state *out) {
  RECAP_CHECK_ARG(out);
  RECAP_TRY(check_public_device(device));
  pthread_mutex_lock(&rng_lock);
  generator *g = generator_locked(device);
  out->seed = g->seed;
  out->offset = g->offset;
  pthread_mutex_unlock(&rng_lock);
  return RECAP_OK;
}

recap_status recap_rng_set_state(recap_device device, const recap_rng_state *state) {
  RECAP_CHECK_ARG(state);
  RECAP_TRY(check_public_device(device));
  pthread_mutex_lock(&rng_lock);
  generator *g = generator_locked(device);
  g->seed = state->seed;
  g->offset = state->offset;
  pthread_mutex_unlock(&rng_lock);
  return RECAP_OK;
}

/* ---- capture records ----------------------------------------------------------------- */

/* The record whose draws `stream` makes: by origin when `as_origin`, else by attachment. */
static rng_capture *find_capture_locked(const recap_stream *stream, bool as_origin) {
  for (rng_capture *c = captures; c; c = c->next) {
    if (as_origin) {
      if (c->origin == stream) return c;
      continue;
    }
    for (size_t i = 0; i < c->side_count; ++i)
      if (c->sides[i] == stream) return c;
  }
  return NULL;
}

static rng_capture *unlink_capture_locked(const recap_stream *origin) {
  for (rng_capture **link = &captures; *link; link = &(*link)->next) {
    if ((*link)->origin == origin) {
      rng_capture *c = *link;
      *link = c->next;
      return c;
    }
  }
  return NULL;
}

recap_status recap__rng_next(recap_stream *stream, recap__philox_args *out) {
  RECAP_CHECK_ARG(stream && out);
  bool is_origin = recap__capture_id(stream) != 0;
  recap_capture_status cs = RECAP_CAPTURE_NONE;
  if (!is_origin) RECAP_TRY(stream->backend->stream_capture_status(stream, &cs));
  bool capturing = is_origin || cs != RECAP_CAPTURE_NONE;
  recap_status st = RECAP_OK;
  pthread_mutex_lock(&rng_lock);
  if (!capturing) {
    generator *g = generator_locked(stream->device);
    *out = (recap__philox_args){.seed = g->seed, .offset = g->offset, .slot = NULL};
    g->offset += 1;
  } else {
    rng_capture *c = find_capture_locked(stream, is_origin);
    if (c) {
      *out = (recap__philox_args){.slot = c->binding->slot, .slot_delta = c->binding->increment};
      c->binding->increment += 1;
    } else if (is_origin) {
      st = RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                      "random op on a capturing stream whose capture has no RNG slot: its "
                      "offset would be frozen into the graph (call recap__rng_capture_begin "
                      "before the capture begins)");
    } else {
      st = RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "random op on a stream that joined a capture begun on another stream "
                      "and was not attached to that capture's RNG slot "
                      "(recap__rng_capture_attach)");
    }
  }
  pthread_mutex_unlock(&rng_lock);
  return st;
}

/* ---- slots --------------------------------------------------------------------------- */

/* Frees a binding and its slot now; the caller is inside recap__unsafe_enter. */
static void free_binding(recap__rng_graph_binding *b) {
  b->backend->mem_free(b->device.index, b->slot);
  free(b);
}

/* Frees the slots released while captures were under way, if none is under way now. */
static void drain_pending(void) {
  pthread_mutex_lock(&rng_lock);
  bool any = pending != NULL;
  pthread_mutex_unlock(&rng_lock);
  if (!any || !recap__unsafe_enter()) return;
  pthread_mutex_lock(&rng_lock);
  pending_slot *list = pending;
  pending = NULL;
  pthread_mutex_unlock(&rng_lock);
  while (list) {
    pending_slot *next = list->next;
    free_binding(list->binding);
    free(list);
    list = next;
  }
  recap__unsafe_exit();
}

/* Gives a slot back: freed now when no capture forbids it, else kept for later. If even the
 * small list node cannot be allocated during a capture, the 16-byte slot is leaked rather
 * than freed illegally; the failure is recorded in the thread's message. */
static void release_binding(recap__rng_graph_binding *b) {
  if (recap__unsafe_enter()) {
    free_binding(b);
    recap__unsafe_exit();
    drain_pending();
    return;
  }
  pending_slot *p = malloc(sizeof *p);
  if (!p) {
    RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to defer freeing an RNG slot; leaked");
    free(b);
    return;
  }
  p->binding = b;
  pthread_mutex_lock(&rng_lock);
  p->next = pending;
  pending = p;
  pthread_mutex_unlock(&rng_lock);
}

/* A binding with a slot on the stream's device: a pending one if any, else a new one. */
static recap_status acquire_binding(recap_stream *origin, recap__rng_graph_binding **out) {
  pthread_mutex_lock(&rng_lock);
  for (pending_slot **link = &pending; *link; link = &(*link)->next) {
    pending_slot *p = *link;
    if (p->binding->backend == origin->backend &&
        p->binding->device.index == origin->device.index) {
      *link = p->next;
      pthread_mutex_unlock(&rng_lock);
      *out = p->binding;
      free(p);
      (*out)->increment = 0;
      return RECAP_OK;
    }
  }
  pthread_mutex_unlock(&rng_lock);

  recap__rng_graph_binding *b = calloc(1, sizeof *b);
  if (!b) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for an RNG capture slot");
  b->device = origin->device;
  b->backend = origin->backend;
  /* Another thread may be capturing in global mode, which forbids allocation on every
   * thread that is not in relaxed mode; relaxed mode makes this allocation legal (it happens
   * before our own capture begins, so no capture of ours can be hurt by it). */
  recap_capture_mode mode = RECAP_CAPTURE_MODE_RELAXED;
  recap_status st = origin->backend->exchange_capture_mode(&mode);
  if (st != RECAP_OK) {
    free(b);
    return st;
  }
  void *mem = NULL;
  st = origin->backend->mem_alloc(origin->device.index, SLOT_BYTES, &mem);
  origin->backend->exchange_capture_mode(&mode);
  if (st != RECAP_OK) {
    free(b);
    return recap__error_context(st, "allocating an RNG capture slot: ");
  }
  b->slot = mem;
  *out = b;
  return RECAP_OK;
}

recap_status recap__rng_capture_begin(recap_stream *origin) {
  RECAP_CHECK_ARG(origin);
  RECAP_TRY(check_device_index(origin->device));
  if (recap__capture_id(origin) != 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the stream is already capturing: the RNG slot must be allocated before "
                      "the capture begins");
  rng_capture *c = calloc(1, sizeof *c);
  if (!c) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for an RNG capture record");
  recap_status st = acquire_binding(origin, &c->binding);
  if (st != RECAP_OK) {
    free(c);
    return st;
  }
  c->origin = origin;
  pthread_mutex_lock(&rng_lock);
  bool duplicate = find_capture_locked(origin, true) != NULL;
  if (!duplicate) {
    c->next = captures;
    captures = c;
  }
  pthread_mutex_unlock(&rng_lock);
  if (duplicate) {
    release_binding(c->binding);
    free(c);
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the stream already has an RNG capture slot (end or abort it first)");
  }
  return RECAP_OK;
}

recap_status recap__rng_capture_attach(recap_stream *origin, recap_stream *side) {
  RECAP_CHECK_ARG(origin && side);
  if (side->backend != origin->backend || side->device.index != origin->device.index)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "a side stream must be on the capture's device (%s:%d), not %s:%d",
                      origin->backend->name, origin->device.index, side->backend->name,
                      side->device.index);
  recap_status st = RECAP_OK;
  pthread_mutex_lock(&rng_lock);
  rng_capture *c = find_capture_locked(origin, true);
  if (!c) {
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the origin stream has no RNG capture slot");
    goto done;
  }
  if (side == origin || find_capture_locked(side, false) == c) goto done;
  if (c->side_count == c->side_capacity) {
    size_t capacity = c->side_capacity ? 2 * c->side_capacity : 4;
    recap_stream **sides = realloc(c->sides, capacity * sizeof *sides);
    if (!sides) {
      st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to attach a side stream");
      goto done;
    }
    c->sides = sides;
    c->side_capacity = capacity;
  }
  c->sides[c->side_count++] = side;
done:
  pthread_mutex_unlock(&rng_lock);
  return st;
}

recap_status recap__rng_capture_end(recap_stream *origin, recap__rng_graph_binding **out) {
  RECAP_CHECK_ARG(origin && out);
  if (recap__capture_id(origin) != 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the stream is still capturing: end the capture first");
  pthread_mutex_lock(&rng_lock);
  rng_capture *c = unlink_capture_locked(origin);
  pthread_mutex_unlock(&rng_lock);
  if (!c) return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the stream has no RNG capture slot");
  recap__rng_graph_binding *b = c->binding;
  free(c->sides);
  free(c);
  if (b->increment == 0) {
    release_binding(b);
    b = NULL;
  }
  *out = b;
  return RECAP_OK;
}

void recap__rng_capture_abort(recap_stream *origin) {
  if (!origin) return;
  pthread_mutex_lock(&rng_lock);
  rng_capture *c = unlink_capture_locked(origin);
  pthread_mutex_unlock(&rng_lock);
  if (!c) return;
  release_binding(c->binding);
  free(c->sides);
  free(c);
}

void recap__rng_graph_binding_destroy(recap__rng_graph_binding *binding) {
  if (binding) release_binding(binding);
}

/* ---- replay -------------------------------------------------------------------------- */

typedef struct {
  uint64_t *slot;
  uint64_t seed;
  uint64_t offset;
} host_slot_write;

static recap_status host_write_slot(void *p) {
  const host_slot_write *w = p;
  w->slot[0] = w->seed;
  w->slot[1] = w->offset;
  return RECAP_OK;
}

/* Reserves replays x increment draws and writes the slot in stream order; *reserved gets the
 * reservation. */
static recap_status reserve_and_write(const recap__rng_graph_binding *binding, recap_stream *stream,
                                      uint64_t replays, recap__rng_loop_reservation *reserved) {
  RECAP_CHECK_ARG(stream);
  if (stream->backend != binding->backend || stream->device.index != binding->device.index)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the graph draws on %s:%d but is replayed on a stream of %s:%d",
                      binding->backend->name, binding->device.index, stream->backend->name,
                      stream->device.index);
  recap_capture_status cs = RECAP_CAPTURE_NONE;
  RECAP_TRY(stream->backend->stream_capture_status(stream, &cs));
  if (cs != RECAP_CAPTURE_NONE)
    return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                      "a graph that draws random numbers cannot be replayed inside another "
                      "capture: its offsets would be frozen into that graph");
  pthread_mutex_lock(&rng_lock);
  generator *g = generator_locked(binding->device);
  host_slot_write w = {.slot = binding->slot, .seed = g->seed, .offset = g->offset};
  g->offset += binding->increment * replays;
  *reserved = (recap__rng_loop_reservation){.seed = g->seed, .first = w.offset, .end = g->offset};
  pthread_mutex_unlock(&rng_lock);

  switch (stream->backend->kind) {
    case RECAP_BACKEND_HOST:
      return stream->backend->launch_kernel(stream, host_write_slot, &w, sizeof w);
    case RECAP_BACKEND_CUDA:
#if RECAP_WITH_CUDA
      return recap__cuda_rng_write_slot(stream, w.slot, w.seed, w.offset);
#else
      break;
#endif
  }
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "no RNG for the %s backend in this build",
                    stream->backend->name);
}

recap_status recap__rng_replay_prepare(const recap__rng_graph_binding *binding,
                                       recap_stream *stream) {
  if (!binding) return RECAP_OK;
  recap__rng_loop_reservation unused;
  return reserve_and_write(binding, stream, 1, &unused);
}

recap_status recap__rng_loop_prepare(const recap__rng_graph_binding *binding, recap_stream *stream,
                                     uint64_t replays, recap__rng_loop_reservation *out) {
  RECAP_CHECK_ARG(binding && out);
  return reserve_and_write(binding, stream, replays, out);
}

void recap__rng_loop_settle(const recap__rng_graph_binding *binding,
                            const recap__rng_loop_reservation *reservation, uint64_t ran) {
  if (!binding || !reservation) return;
  uint64_t used = reservation->first + binding->increment * ran;
  if (used >= reservation->end) return;
  pthread_mutex_lock(&rng_lock);
  generator *g = generator_locked(binding->device);
  if (g->seed == reservation->seed && g->offset == reservation->end) g->offset = used;
  pthread_mutex_unlock(&rng_lock);
}

/* ---- fills --------------------------------------------------------------------------- */

typedef struct {
  recap__philox_args philox;
  recap__rng_dist dist;
  void *out;
  size_t n;
  float a, b;
} host_fill_job;

/* The host "kernel": the same blocks and conversions as rng.cu, one block at a time. */
static recap_status host_fill(void *p) {
  const host_fill_job *job = p;
  uint64_t seed, offset;
  recap__philox_resolve(&job->philox, &seed, &offset);
  for (size_t base = 0; base < job->n; base += 4) {
    recap__philox4x32 w = recap__philox_draw(seed, offset, base / 4);
    size_t count = job->n - base < 4 ? job->n - base : 4;
    if (job->dist == RECAP__RNG_BITS) {
      uint32_t *out = (uint32_t *)job->out + base;
      for (size_t k = 0; k < count; ++k) out[k] = w.v[k];
      continue;
    }
    float values[4];
    if (job->dist == RECAP__RNG_UNIFORM) {
      for (int k = 0; k < 4; ++k) values[k] = recap__philox_uniform(w.v[k], job->a, job->b);
    } else {
      recap__philox_normal4(w, job->a, job->b, values);
    }
    float *out = (float *)job->out + base;
    for (size_t k = 0; k < count; ++k) out[k] = values[k];
  }
  return RECAP_OK;
}

static recap_status fill(recap_stream *stream, recap__rng_dist dist, void *out, size_t n, float a,
                         float b) {
  if (n == 0) return RECAP_OK;
  RECAP_CHECK_ARG(out);
  recap__philox_args philox;
  RECAP_TRY(recap__rng_next(stream, &philox));
  switch (stream->backend->kind) {
    case RECAP_BACKEND_HOST: {
      host_fill_job job = {.philox = philox, .dist = dist, .out = out, .n = n, .a = a, .b = b};
      return stream->backend->launch_kernel(stream, host_fill, &job, sizeof job);
    }
    case RECAP_BACKEND_CUDA:
#if RECAP_WITH_CUDA
      return recap__cuda_rng_fill(stream, dist, out, n, a, b, &philox);
#else
      break;
#endif
  }
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "no RNG for the %s backend in this build",
                    stream->backend->name);
}

recap_status recap__rng_fill_bits(recap_stream *stream, uint32_t *out, size_t n) {
  RECAP_CHECK_ARG(stream);
  return fill(stream, RECAP__RNG_BITS, out, n, 0.0f, 0.0f);
}

recap_status recap__rng_fill_uniform(recap_stream *stream, float *out, size_t n, float lo,
                                     float hi) {
  RECAP_CHECK_ARG(stream);
  if (!(isfinite(lo) && isfinite(hi) && lo < hi && isfinite(hi - lo)))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "uniform range [%g, %g) must be finite, non-empty and of finite width",
                      (double)lo, (double)hi);
  return fill(stream, RECAP__RNG_UNIFORM, out, n, lo, hi);
}

recap_status recap__rng_fill_normal(recap_stream *stream, float *out, size_t n, float mean,
                                    float std) {
  RECAP_CHECK_ARG(stream);
  if (!(isfinite(mean) && isfinite(std) && std >= 0.0f))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "normal mean %g and std %g must be finite with std >= 0", (double)mean,
                      (double)std);
  return fill(stream, RECAP__RNG_NORMAL, out, n, mean, std);
}
