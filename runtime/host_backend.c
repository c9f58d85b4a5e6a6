/*
 * host_backend.c: the host (CPU) backend: one device, "host", whose streams run work
 * synchronously at submission, and which enforces CUDA's rules so that CI on a machine
 * without a GPU rejects what the GPU would reject:
 *
 * - Stream capture is emulated: work submitted to a capturing stream is recorded as graph
 *   nodes, not run. A stream joins a capture by waiting on an event recorded inside it, and
 *   must be joined back before capture_end (cudaErrorStreamCaptureUnjoined).
 * - What CUDA forbids during a capture (synchronize, query, unsafe calls under the capture
 *   interaction modes) returns RECAP_STATUS_ILLEGAL_DURING_CAPTURE and invalidates the
 *   capture; capture_end then reports the first illegal call.
 * - A host function that fails leaves the backend faulted for good (as a trapped kernel
 *   leaves a CUDA context): every later device call returns RECAP_STATUS_DEVICE_ERROR.
 *   Destroy and free calls still release their host resources then, so a faulted process
 *   can tear down without leaking; property queries keep working.
 *
 * - A WHILE node's body is captured on a stream of its own (while_begin), under CUDA's rules
 *   for conditional bodies: only kernel, memcpy, memset, child-graph and conditional nodes,
 *   copies and fills of device or mapped host memory only.
 *
 * Locking: capture_lock guards every capture, each stream's capture membership and each
 * event's record state. The allocation table has its own lock. Host functions never run
 * under a lock, so one may call back into recap.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread, clock_gettime, sysconf(_SC_LEVEL2_...) under -std=c11 */
#endif
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/host_fault.h"
#include "runtime/host_graph.h"

enum {
  HOST_ALIGNMENT = 256, /* as cudaMalloc: enough for any vector load */
  REASON_CAPACITY = 512,
  ALLOCATION_BUCKETS = 1024,
};

static const char *const memory_env = "RECAP_HOST_MEMORY_BYTES";

/* ------------------------------------------------------------------------------------------
 * Device
 * ---------------------------------------------------------------------------------------- */

static recap_status check_device(int device) {
  if (device != 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "host device %d does not exist (1 present)",
                      device);
  return RECAP_OK;
}

/* The capacity is read on every call rather than cached, so a test or an embedding program
 * can change RECAP_HOST_MEMORY_BYTES while running; it costs one getenv. */
static recap_status memory_capacity(size_t *out) {
  const char *env = getenv(memory_env);
  if (env && *env) {
    char *end = NULL;
    errno = 0;
    unsigned long long value = strtoull(env, &end, 10);
    if (errno != 0 || *end != '\0' || env[0] == '-' || value == 0 || value > SIZE_MAX)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "%s='%s' is not a positive byte count",
                        memory_env, env);
    *out = (size_t)value;
    return RECAP_OK;
  }
  long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0)
    return RECAP_FAIL(RECAP_STATUS_INTERNAL, "cannot read the physical memory size: %s",
                      strerror(errno));
  *out = (size_t)pages * (size_t)page_size;
  return RECAP_OK;
}

/* "model name : Intel(R) Xeon(R) ..." from /proc/cpuinfo; false when there is none (other
 * architectures name the field differently, and /proc may be absent). */
static bool cpu_model(char *out, size_t capacity) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return false;
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    const char *colon = strchr(line, ':');
    if (!colon) continue;
    const char *start = colon + 1;
    while (*start == ' ' || *start == '\t') start++;
    size_t len = strcspn(start, "\n");
    if (len == 0) continue;
    snprintf(out, capacity, "%.*s", (int)len, start);
    found = true;
  }
  fclose(f);
  return found;
}

static recap_status host_device_count(int *count) {
  *count = 1;
  return RECAP_OK;
}

static recap_status host_device_properties(int device, recap_device_properties *out) {
  RECAP_TRY(check_device(device));
  recap_device_properties p;
  memset(&p, 0, sizeof p);
  char model[200];
  if (cpu_model(model, sizeof model))
    snprintf(p.name, sizeof p.name, "host (%s)", model);
  else
    snprintf(p.name, sizeof p.name, "host");
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  p.multiprocessor_count = cpus > 0 ? (int)cpus : 1;
  RECAP_TRY(memory_capacity(&p.total_memory));
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  p.l2_cache_bytes = l2 > 0 ? (size_t)l2 : 0;
  /* One "thread" per block and per warp: host functions are plain sequential C. */
  p.warp_size = 1;
  p.max_threads_per_block = 1;
  p.integrated = 1; /* device memory is host memory */
  *out = p;
  return RECAP_OK;
}

static recap_status host_can_access_peer(int device, int peer, int *out) {
  RECAP_TRY(check_device(device));
  RECAP_TRY(check_device(peer));
  *out = 0;
  return RECAP_OK;
}

static const char *host_compiled_archs(void) {
  return "";
}

/* ------------------------------------------------------------------------------------------
 * Streams, events and captures: state
 * ---------------------------------------------------------------------------------------- */

typedef struct host_capture host_capture;

typedef struct host_stream {
  host_capture *capture; /* the capture this stream takes part in; NULL when none */
  size_t tail;           /* last node this stream recorded in it */
  size_t last_work;      /* last work node (not an ordering node) it recorded */
  struct host_stream *next_member;
} host_stream;

struct host_capture {
  uint64_t id;
  host_stream *origin;
  recap_capture_mode mode;
  pthread_t thread; /* that began it: the unsafe-call rules depend on it */
  bool invalidated;
  char reason[REASON_CAPACITY]; /* the first illegal call */
  recap__graph *graph;          /* a WHILE body's: owned by its node; NULL once orphaned */
  host_stream *members;         /* origin and every stream that joined */
  host_capture *next;
  /* A WHILE body's capture (while_begin): the capture holding its node, NULL when that one
   * ended first (the body is then invalidated). */
  bool body;
  uint64_t handle; /* a body's condition handle */
  host_capture *parent;
  int open_bodies; /* body captures begun from this one and not yet ended */
};

typedef struct {
  bool recorded;       /* recorded by eager work: time_ns is valid */
  uint64_t time_ns;    /* CLOCK_MONOTONIC at record */
  uint64_t capture_id; /* nonzero: last recorded inside that capture */
  size_t node;         /* its record node there */
} host_event;

static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static host_capture *captures;
static uint64_t next_capture_id = 1;
/* cudaThreadExchangeStreamCaptureMode's per-thread setting; GLOBAL (0) by default. */
static _Thread_local recap_capture_mode thread_mode = RECAP_CAPTURE_MODE_GLOBAL;

static const char *mode_name(recap_capture_mode mode) {
  switch (mode) {
    case RECAP_CAPTURE_MODE_GLOBAL:
      return "global";
    case RECAP_CAPTURE_MODE_THREAD_LOCAL:
      return "thread_local";
    case RECAP_CAPTURE_MODE_RELAXED:
      return "relaxed";
  }
  return "unknown";
}

static host_stream *stream_state(recap_stream *stream) {
  return stream->native;
}
static host_event *event_state(recap_event *event) {
  return event->native;
}

static host_capture *find_capture_locked(uint64_t id) {
  for (host_capture *c = captures; c; c = c->next)
    if (c->id == id) return c;
  return NULL;
}

/* Marks the capture invalidated; the first reason is the one capture_end reports. */
static void invalidate_locked(host_capture *c, const char *reason) {
  if (c->invalidated) return;
  c->invalidated = true;
  snprintf(c->reason, sizeof c->reason, "%s", reason);
}

/* Invalidates `c` because of an illegal call and returns ILLEGAL_DURING_CAPTURE; the caller
 * holds capture_lock and releases it after. */
#define ILLEGAL_LOCKED(c, ...) illegal_locked((c), __FILE__, __LINE__, __func__, __VA_ARGS__)
static recap_status illegal_locked(host_capture *c, const char *file, int line, const char *func,
                                   const char *fmt, ...) RECAP__PRINTF(5, 6);
static recap_status illegal_locked(host_capture *c, const char *file, int line, const char *func,
                                   const char *fmt, ...) {
  char message[REASON_CAPACITY];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  invalidate_locked(c, message);
  return recap__fail_at(RECAP_STATUS_ILLEGAL_DURING_CAPTURE, file, line, func, "%s", message);
}

/* RECAP_OK for a stream that is not capturing or whose capture is intact; for a stream in an
 * invalidated capture, CAPTURE_INVALIDATED naming the first illegal call (CUDA answers
 * cudaErrorStreamCaptureInvalidated to all later work on it). */
static recap_status capture_usable_locked(const host_stream *hs) {
  if (hs->capture && hs->capture->invalidated)
    return RECAP_FAIL(RECAP_STATUS_CAPTURE_INVALIDATED,
                      "the stream's capture was invalidated by an earlier call (%s); end the "
                      "capture and begin a new one",
                      hs->capture->reason);
  return RECAP_OK;
}

/* Appends `node` after the stream's tail in its capture and advances the tail. On failure
 * the capture is invalidated (its graph would miss work) and the caller still owns the
 * node's args/child. */
static recap_status record_locked(host_stream *hs, recap__host_node *node, bool is_work,
                                  size_t *index) {
  if (hs->tail != RECAP__HOST_NO_NODE) {
    bool duplicate = node->dep_count > 0 && node->deps[0] == hs->tail;
    if (!duplicate) node->deps[node->dep_count++] = hs->tail;
  }
  size_t at;
  recap_status st = recap__host_graph_append(hs->capture->graph, node, &at);
  if (st != RECAP_OK) {
    invalidate_locked(hs->capture, recap_last_error());
    return st;
  }
  hs->tail = at;
  if (is_work) hs->last_work = at;
  if (index) *index = at;
  return RECAP_OK;
}

/* Whether [ptr, ptr + bytes) lies in one allocation of the device (mem_alloc) or of mapped
 * host memory (host_alloc_mapped). */
static bool device_accessible(const void *ptr, size_t bytes);

/* The rule a node breaks in a WHILE body (CUDA's rules for a conditional node's body graph),
 * or NULL. A child graph's nodes follow the same rules. */
static const char *body_rule_broken(const recap__host_node *node, char *why, size_t why_size) {
  switch (node->kind) {
    case RECAP__HOST_NODE_HOST_FN:
      if (node->u.host.kernel) return NULL;
      return "a host function node (launch_host, cudaLaunchHostFunc; the host backend's graph "
             "memory frees are host functions too) may not be in a WHILE body: it may hold only "
             "kernel, empty, memcpy, memset, child-graph and conditional nodes";
    case RECAP__HOST_NODE_MEMCPY:
      if (node->u.copy.bytes == 0 || (device_accessible(node->u.copy.dst, node->u.copy.bytes) &&
                                      device_accessible(node->u.copy.src, node->u.copy.bytes)))
        return NULL;
      snprintf(why, why_size,
               "a memcpy of %zu bytes from %p to %p in a WHILE body touches memory that is "
               "neither device memory nor mapped host memory (host_alloc_mapped): a body may "
               "copy only between those",
               node->u.copy.bytes, node->u.copy.src, node->u.copy.dst);
      return why;
    case RECAP__HOST_NODE_MEMSET:
      if (node->u.fill.bytes == 0 || device_accessible(node->u.fill.dst, node->u.fill.bytes))
        return NULL;
      snprintf(why, why_size,
               "a memset of %zu bytes at %p in a WHILE body fills memory that is neither device "
               "memory nor mapped host memory (host_alloc_mapped): a body may fill only those",
               node->u.fill.bytes, node->u.fill.dst);
      return why;
    case RECAP__HOST_NODE_CHILD:
    case RECAP__HOST_NODE_WHILE: {
      const recap__graph *g =
          node->kind == RECAP__HOST_NODE_CHILD ? node->u.child : node->u.loop.body;
      for (size_t i = 0; i < g->count; i++) {
        const char *broken = body_rule_broken(&g->nodes[i], why, why_size);
        if (broken) return broken;
      }
      return NULL;
    }
    case RECAP__HOST_NODE_EVENT_RECORD:
    case RECAP__HOST_NODE_EVENT_WAIT:
      /* Edges between a body's streams (a fork and join), as in a CUDA capture; no node. */
      return NULL;
  }
  return NULL;
}

/* Records a work node when the stream is capturing. *recorded tells the caller whether it
 * must run the work itself (not capturing). Takes ownership of the node's args/child only
 * when it returns RECAP_OK with *recorded set. */
static recap_status submit(recap_stream *stream, recap__host_node *node, bool *recorded) {
  host_stream *hs = stream_state(stream);
  pthread_mutex_lock(&capture_lock);
  recap_status st = capture_usable_locked(hs);
  *recorded = false;
  char why[REASON_CAPACITY];
  const char *broken = st == RECAP_OK && hs->capture && hs->capture->body
                           ? body_rule_broken(node, why, sizeof why)
                           : NULL;
  if (broken) st = ILLEGAL_LOCKED(hs->capture, "%s", broken);
  if (st == RECAP_OK && hs->capture) {
    st = record_locked(hs, node, true, NULL);
    *recorded = st == RECAP_OK;
  }
  pthread_mutex_unlock(&capture_lock);
  return st;
}

/* CUDA's "potentially unsafe API call" rule (mem_alloc, mem_free, mapped host allocation, and
 * synchronize and query of streams and events outside the capture), by the calling thread's
 * interaction mode:
 *   GLOBAL:       prohibited if this thread has a non-relaxed capture under way, or another
 *                 thread has a global-mode capture under way;
 *   THREAD_LOCAL: prohibited only by this thread's own non-relaxed captures;
 *   RELAXED:      never prohibited.
 * every_mode: a call no mode allows, prohibited by every capture under way (a device
 * synchronize: measured on an H200, driver 580, docs/RELIABILITY.md "Capture rules", it failed
 * and invalidated a relaxed capture on another thread from a relaxed thread too).
 * Every capture that prohibits the call is invalidated. Invalidated captures still count:
 * until capture_end, CUDA still considers them under way. */
static recap_status capture_conflict_check(const char *call, bool every_mode) {
  recap_capture_mode mine = thread_mode;
  if (mine == RECAP_CAPTURE_MODE_RELAXED && !every_mode) return RECAP_OK;
  pthread_t self = pthread_self();
  char message[REASON_CAPACITY] = "";
  pthread_mutex_lock(&capture_lock);
  for (host_capture *c = captures; c; c = c->next) {
    bool own = pthread_equal(c->thread, self) != 0;
    bool prohibits = every_mode || (own ? c->mode != RECAP_CAPTURE_MODE_RELAXED
                                        : c->mode == RECAP_CAPTURE_MODE_GLOBAL &&
                                              mine == RECAP_CAPTURE_MODE_GLOBAL);
    if (!prohibits) continue;
    if (!message[0] && every_mode)
      snprintf(message, sizeof message,
               "%s is not permitted while a stream is capturing (a %s-mode capture is under way "
               "on %s thread; no capture mode allows it)",
               call, mode_name(c->mode), own ? "this" : "another");
    else if (!message[0])
      snprintf(message, sizeof message,
               "%s is not permitted while a stream is capturing: a %s-mode capture is under "
               "way on %s thread, and this thread's capture interaction mode is %s (switch to "
               "relaxed with exchange_capture_mode only for calls known to be safe)",
               call, mode_name(c->mode), own ? "this" : "another", mode_name(mine));
    invalidate_locked(c, message);
  }
  pthread_mutex_unlock(&capture_lock);
  if (message[0]) return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE, "%s", message);
  return RECAP_OK;
}

static recap_status unsafe_call_check(const char *call) {
  return capture_conflict_check(call, false);
}

static recap_status host_device_synchronize(int device) {
  RECAP_TRY(check_device(device));
  RECAP_TRY(recap__host_check_fault());
  /* All work already ran at submission; only the capture rules can make this fail. */
  return capture_conflict_check("device synchronize", true);
}

static recap_status host_exchange_capture_mode(recap_capture_mode *mode) {
  RECAP_CHECK_ARG(mode);
  if (*mode != RECAP_CAPTURE_MODE_GLOBAL && *mode != RECAP_CAPTURE_MODE_THREAD_LOCAL &&
      *mode != RECAP_CAPTURE_MODE_RELAXED)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "unknown capture mode %d", (int)*mode);
  recap_capture_mode previous = thread_mode;
  thread_mode = *mode;
  *mode = previous;
  return RECAP_OK;
}

/* ------------------------------------------------------------------------------------------
 * Memory
 * ---------------------------------------------------------------------------------------- */

typedef struct allocation {
  void *ptr;
  size_t bytes;
  struct allocation *next;
} allocation;

/* Live allocations, so mem_free can tell its sizes and reject pointers it never returned
 * (instead of crashing on them). */
static pthread_mutex_t allocations_lock = PTHREAD_MUTEX_INITIALIZER;
static allocation *allocations[ALLOCATION_BUCKETS];
static atomic_size_t allocated_bytes;

static size_t bucket_of(const void *ptr) {
  return (size_t)(((uintptr_t)ptr / HOST_ALIGNMENT) % ALLOCATION_BUCKETS);
}

static recap_status host_mem_get_info(int device, size_t *free_bytes, size_t *total_bytes) {
  RECAP_TRY(check_device(device));
  RECAP_TRY(recap__host_check_fault());
  size_t total;
  RECAP_TRY(memory_capacity(&total));
  size_t used = atomic_load(&allocated_bytes);
  *free_bytes = used < total ? total - used : 0;
  *total_bytes = total;
  return RECAP_OK;
}

/* Takes `bytes` from the capacity, or fails without taking anything. */
static recap_status reserve_bytes(size_t bytes) {
  size_t capacity;
  RECAP_TRY(memory_capacity(&capacity));
  size_t used = atomic_load(&allocated_bytes);
  do {
    if (bytes > capacity || used > capacity - bytes)
      return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY,
                        "cannot allocate %zu bytes on the host device: %zu of its %zu bytes "
                        "are in use (capacity: %s)",
                        bytes, used, capacity, getenv(memory_env) ? memory_env : "physical memory");
  } while (!atomic_compare_exchange_weak(&allocated_bytes, &used, used + bytes));
  return RECAP_OK;
}

static recap_status host_mem_alloc(int device, size_t bytes, void **out) {
  RECAP_TRY(check_device(device));
  RECAP_TRY(recap__host_check_fault());
  RECAP_TRY(unsafe_call_check("memory allocation (mem_alloc)"));
  if (bytes == 0) {
    *out = NULL; /* as cudaMalloc(0) */
    return RECAP_OK;
  }
  if (bytes > SIZE_MAX - HOST_ALIGNMENT)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "cannot allocate %zu bytes", bytes);
  RECAP_TRY(reserve_bytes(bytes));
  recap_status st = RECAP_OK;
  size_t rounded = (bytes + HOST_ALIGNMENT - 1) / HOST_ALIGNMENT * HOST_ALIGNMENT;
  void *ptr = aligned_alloc(HOST_ALIGNMENT, rounded);
  allocation *record = malloc(sizeof *record);
  if (!ptr || !record) {
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY,
                    "the system allocator refused %zu bytes for the host device", rounded);
    goto fail;
  }
  record->ptr = ptr;
  record->bytes = bytes;
  pthread_mutex_lock(&allocations_lock);
  size_t b = bucket_of(ptr);
  record->next = allocations[b];
  allocations[b] = record;
  pthread_mutex_unlock(&allocations_lock);
  *out = ptr;
  return RECAP_OK;
fail:
  free(record);
  free(ptr);
  atomic_fetch_sub(&allocated_bytes, bytes);
  return st;
}

/* Works after a fault too (see the top of the file): freeing host memory is always safe. */
static recap_status host_mem_free(int device, void *ptr) {
  RECAP_TRY(check_device(device));
  RECAP_TRY(unsafe_call_check("memory free (mem_free)"));
  if (!ptr) return RECAP_OK;
  allocation *found = NULL;
  pthread_mutex_lock(&allocations_lock);
  for (allocation **link = &allocations[bucket_of(ptr)]; *link; link = &(*link)->next) {
    if ((*link)->ptr == ptr) {
      found = *link;
      *link = found->next;
      break;
    }
  }
  pthread_mutex_unlock(&allocations_lock);
  if (!found)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "%p was not allocated by the host backend, or was freed already", ptr);
  atomic_fetch_sub(&allocated_bytes, found->bytes);
  free(found->ptr);
  free(found);
  return RECAP_OK;
}

/* Mapped host memory (host_alloc_mapped): the host device reaches all host memory, but a WHILE
 * body may copy only what CUDA's device could, so these allocations are tracked apart from
 * pageable memory. Guarded by allocations_lock. */
static allocation *mapped_allocations;

static bool in_list(const allocation *a, uintptr_t start, size_t bytes) {
  for (; a; a = a->next) {
    uintptr_t base = (uintptr_t)a->ptr;
    if (start >= base && start - base <= a->bytes && bytes <= a->bytes - (start - base))
      return true;
  }
  return false;
}

static bool device_accessible(const void *ptr, size_t bytes) {
  uintptr_t start = (uintptr_t)ptr;
  pthread_mutex_lock(&allocations_lock);
  bool found = in_list(mapped_allocations, start, bytes);
  for (size_t b = 0; !found && b < ALLOCATION_BUCKETS; b++)
    found = in_list(allocations[b], start, bytes);
  pthread_mutex_unlock(&allocations_lock);
  return found;
}

static recap_status host_host_alloc_mapped(int device, size_t bytes, void **out) {
  RECAP_TRY(check_device(device));
  RECAP_CHECK_ARG(out && bytes > 0);
  RECAP_TRY(unsafe_call_check("mapped host allocation (host_alloc_mapped)"));
  if (bytes > SIZE_MAX - HOST_ALIGNMENT)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "cannot allocate %zu mapped bytes", bytes);
  size_t rounded = (bytes + HOST_ALIGNMENT - 1) / HOST_ALIGNMENT * HOST_ALIGNMENT;
  void *ptr = aligned_alloc(HOST_ALIGNMENT, rounded);
  allocation *record = malloc(sizeof *record);
  if (!ptr || !record) {
    free(ptr);
    free(record);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for %zu bytes of mapped host memory",
                      bytes);
  }
  memset(ptr, 0, rounded);
  record->ptr = ptr;
  record->bytes = bytes;
  pthread_mutex_lock(&allocations_lock);
  record->next = mapped_allocations;
  mapped_allocations = record;
  pthread_mutex_unlock(&allocations_lock);
  *out = ptr;
  return RECAP_OK;
}

static recap_status host_host_free_mapped(int device, void *ptr) {
  RECAP_TRY(check_device(device));
  if (!ptr) return RECAP_OK;
  RECAP_TRY(unsafe_call_check("mapped host free (host_free_mapped)"));
  allocation *found = NULL;
  pthread_mutex_lock(&allocations_lock);
  for (allocation **link = &mapped_allocations; *link; link = &(*link)->next) {
    if ((*link)->ptr == ptr) {
      found = *link;
      *link = found->next;
      break;
    }
  }
  pthread_mutex_unlock(&allocations_lock);
  if (!found)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "%p was not allocated by host_alloc_mapped, or was freed already", ptr);
  free(found->ptr);
  free(found);
  return RECAP_OK;
}

static recap_status host_memcpy_async(void *dst, const void *src, size_t bytes,
                                      recap_stream *stream) {
  RECAP_CHECK_ARG(stream);
  RECAP_CHECK_ARG(bytes == 0 || (dst && src));
  RECAP_TRY(recap__host_check_fault());
  recap__host_node node = {.kind = RECAP__HOST_NODE_MEMCPY};
  node.u.copy.dst = dst;
  node.u.copy.src = src;
  node.u.copy.bytes = bytes;
  bool recorded;
  RECAP_TRY(submit(stream, &node, &recorded));
  if (!recorded && bytes > 0) memmove(dst, src, bytes);
  return RECAP_OK;
}

static recap_status host_memset_async(void *dst, int value, size_t bytes, recap_stream *stream) {
  RECAP_CHECK_ARG(stream);
  RECAP_CHECK_ARG(bytes == 0 || dst);
  RECAP_TRY(recap__host_check_fault());
  recap__host_node node = {.kind = RECAP__HOST_NODE_MEMSET};
  node.u.fill.dst = dst;
  node.u.fill.value = value;
  node.u.fill.bytes = bytes;
  bool recorded;
  RECAP_TRY(submit(stream, &node, &recorded));
  if (!recorded && bytes > 0) memset(dst, value, bytes);
  return RECAP_OK;
}

/* Host functions, as host-function nodes (launch_host) or as kernels (launch_kernel). A NULL
 * args pointer reaches fn when args_size is 0, since there is nothing to copy. */
static recap_status launch_fn(recap_stream *stream, recap__host_fn fn, const void *args,
                              size_t args_size, bool kernel) {
  RECAP_CHECK_ARG(stream && fn);
  RECAP_CHECK_ARG(args_size == 0 || args);
  RECAP_TRY(recap__host_check_fault());
  host_stream *hs = stream_state(stream);
  pthread_mutex_lock(&capture_lock);
  recap_status st = capture_usable_locked(hs);
  bool capturing = hs->capture != NULL;
  pthread_mutex_unlock(&capture_lock);
  RECAP_TRY(st);
  if (!capturing) return recap__host_run_fn(fn, args, args_size);

  /* The copy is made outside the lock; submit() re-checks the capture, since another
   * thread may end or invalidate it in between. */
  recap__host_node node = {.kind = RECAP__HOST_NODE_HOST_FN};
  node.u.host.fn = fn;
  node.u.host.args_size = args_size;
  node.u.host.kernel = kernel;
  if (args_size > 0) {
    node.u.host.args = malloc(args_size);
    if (!node.u.host.args)
      return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to capture %zu argument bytes",
                        args_size);
    memcpy(node.u.host.args, args, args_size);
  }
  bool recorded;
  st = submit(stream, &node, &recorded);
  if (st == RECAP_OK && !recorded) st = recap__host_run_fn(fn, node.u.host.args, args_size);
  if (!recorded) recap__host_node_release(&node);
  return st;
}

static recap_status host_launch_host(recap_stream *stream, recap__host_fn fn, const void *args,
                                     size_t args_size) {
  return launch_fn(stream, fn, args, args_size, false);
}

static recap_status host_launch_kernel(recap_stream *stream, recap__host_fn fn, const void *args,
                                       size_t args_size) {
  return launch_fn(stream, fn, args, args_size, true);
}

/* ------------------------------------------------------------------------------------------
 * Streams
 * ---------------------------------------------------------------------------------------- */

/* CUDA's usual range on current GPUs: 0 (lowest) to -5 (highest). */
static recap_status host_stream_priority_range(int device, int *least, int *greatest) {
  RECAP_TRY(check_device(device));
  *least = 0;
  *greatest = -5;
  return RECAP_OK;
}

static recap_status host_stream_create(recap_stream *stream) {
  RECAP_TRY(recap__host_check_fault());
  host_stream *hs = calloc(1, sizeof *hs);
  if (!hs) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a host stream");
  hs->tail = hs->last_work = RECAP__HOST_NO_NODE;
  stream->native = hs;
  return RECAP_OK;
}

/* Works after a fault too (see the top of the file). */
static recap_status host_stream_destroy(recap_stream *stream) {
  host_stream *hs = stream_state(stream);
  pthread_mutex_lock(&capture_lock);
  bool capturing = hs->capture != NULL;
  pthread_mutex_unlock(&capture_lock);
  if (capturing)
    return RECAP_FAIL(RECAP_STATUS_BUSY, "the stream takes part in a capture; end it first");
  free(hs);
  stream->native = NULL;
  return RECAP_OK;
}

/* Query and synchronize share their rule: illegal on a stream in a capture, and on any other
 * stream an unsafe call (unsafe_call_check: measured on an H200, a synchronize or query of a
 * stream outside the capture from another global-mode thread invalidated a global capture). */
static recap_status stream_idle_check(recap_stream *stream, const char *call) {
  RECAP_TRY(recap__host_check_fault());
  host_stream *hs = stream_state(stream);
  recap_status st = RECAP_OK;
  bool capturing = false;
  pthread_mutex_lock(&capture_lock);
  if (hs->capture) {
    capturing = true;
    st = ILLEGAL_LOCKED(hs->capture, "%s is not permitted while stream is capturing", call);
  }
  pthread_mutex_unlock(&capture_lock);
  return capturing ? st : unsafe_call_check(call);
}

static recap_status host_stream_query(recap_stream *stream) {
  return stream_idle_check(stream, "stream query");
}

static recap_status host_stream_synchronize(recap_stream *stream) {
  return stream_idle_check(stream, "stream synchronize");
}

/* Answers without a fault check: it never touches the device, and stream_destroy relies on
 * it to tell whether a stream is still in a capture. */
static recap_status host_stream_capture_status(recap_stream *stream, recap_capture_status *out) {
  host_stream *hs = stream_state(stream);
  pthread_mutex_lock(&capture_lock);
  *out = !hs->capture               ? RECAP_CAPTURE_NONE
         : hs->capture->invalidated ? RECAP_CAPTURE_INVALIDATED
                                    : RECAP_CAPTURE_ACTIVE;
  pthread_mutex_unlock(&capture_lock);
  return RECAP_OK;
}

/* stream waits on event. Three cases, as in CUDA:
 * - the event was recorded inside a capture that is still under way: the stream's next node
 *   depends on the record node; a stream not yet in that capture joins it (a fork);
 * - the event belongs to another capture than the stream's: refused
 *   (cudaErrorStreamCaptureIsolation), invalidating the stream's capture;
 * - the event was recorded by eager work, never, or in a capture that has ended: all its work
 *   is already done (streams are synchronous), so there is nothing to wait for. */
static recap_status host_stream_wait_event(recap_stream *stream, recap_event *event) {
  RECAP_TRY(recap__host_check_fault());
  host_stream *hs = stream_state(stream);
  host_event *he = event_state(event);
  recap_status st = RECAP_OK;
  pthread_mutex_lock(&capture_lock);
  host_capture *source = he->capture_id ? find_capture_locked(he->capture_id) : NULL;
  RECAP_TRY_GOTO(st, capture_usable_locked(hs), done);
  if (!source) goto done;
  if (hs->capture && hs->capture != source) {
    st = ILLEGAL_LOCKED(hs->capture,
                        "stream wait on an event recorded in another capture is not permitted "
                        "(a dependency may not cross capture boundaries)");
    goto done;
  }
  if (source->invalidated) {
    st =
        RECAP_FAIL(RECAP_STATUS_CAPTURE_INVALIDATED,
                   "the event was recorded in a capture that was invalidated (%s)", source->reason);
    goto done;
  }
  recap__host_node node = {.kind = RECAP__HOST_NODE_EVENT_WAIT, .dep_count = 1};
  node.deps[0] = he->node;
  bool joining = hs->capture == NULL;
  if (joining) {
    hs->capture = source;
    hs->tail = hs->last_work = RECAP__HOST_NO_NODE;
    hs->next_member = source->members;
    source->members = hs;
  }
  st = record_locked(hs, &node, false, NULL);
done:
  pthread_mutex_unlock(&capture_lock);
  return st;
}

/* ------------------------------------------------------------------------------------------
 * Events
 * ---------------------------------------------------------------------------------------- */

static uint64_t monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static recap_status host_event_create(recap_event *event) {
  RECAP_TRY(recap__host_check_fault());
  host_event *he = calloc(1, sizeof *he);
  if (!he) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a host event");
  event->native = he;
  return RECAP_OK;
}

/* Works after a fault too. A capture that recorded the event keeps its node: the node never
 * refers back to the event, as a destroyed CUDA event does not break a captured wait. */
static recap_status host_event_destroy(recap_event *event) {
  free(event->native);
  event->native = NULL;
  return RECAP_OK;
}

static recap_status host_event_record(recap_event *event, recap_stream *stream) {
  RECAP_TRY(recap__host_check_fault());
  host_stream *hs = stream_state(stream);
  host_event *he = event_state(event);
  recap_status st = RECAP_OK;
  pthread_mutex_lock(&capture_lock);
  RECAP_TRY_GOTO(st, capture_usable_locked(hs), done);
  if (hs->capture) {
    recap__host_node node = {.kind = RECAP__HOST_NODE_EVENT_RECORD};
    size_t at;
    RECAP_TRY_GOTO(st, record_locked(hs, &node, false, &at), done);
    he->capture_id = hs->capture->id;
    he->node = at;
  } else {
    /* Everything submitted before is done, so "now" is when the event completes. */
    he->capture_id = 0;
    he->recorded = true;
    he->time_ns = monotonic_ns();
  }
done:
  pthread_mutex_unlock(&capture_lock);
  return st;
}

/* Query and synchronize share their rule: illegal on an event recorded inside a capture
 * still under way (its work has not run and never will outside a replay), and otherwise an
 * unsafe call. */
static recap_status event_done_check(recap_event *event, const char *call) {
  RECAP_TRY(recap__host_check_fault());
  host_event *he = event_state(event);
  recap_status st = RECAP_OK;
  pthread_mutex_lock(&capture_lock);
  host_capture *c = he->capture_id ? find_capture_locked(he->capture_id) : NULL;
  if (c)
    st = ILLEGAL_LOCKED(c, "%s is not permitted on an event recorded inside an active capture",
                        call);
  pthread_mutex_unlock(&capture_lock);
  /* Outside a capture, an unsafe call as a stream's synchronize is (stream_idle_check). */
  return c ? st : unsafe_call_check(call);
}

static recap_status host_event_query(recap_event *event) {
  return event_done_check(event, "event query");
}

static recap_status host_event_synchronize(recap_event *event) {
  return event_done_check(event, "event synchronize");
}

/* An event without an eager record (never recorded, or last recorded inside a capture) has
 * no time: INVALID_ARGUMENT, as CUDA answers cudaErrorInvalidResourceHandle for it. Never
 * NOT_READY: eager work is complete when recorded. */
static recap_status host_event_elapsed_ms(recap_event *start, recap_event *end, float *out_ms) {
  RECAP_TRY(recap__host_check_fault());
  host_event *a = event_state(start), *b = event_state(end);
  pthread_mutex_lock(&capture_lock);
  bool timed = a->recorded && !a->capture_id && b->recorded && !b->capture_id;
  int64_t delta_ns = (int64_t)(b->time_ns - a->time_ns);
  pthread_mutex_unlock(&capture_lock);
  if (!timed)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "elapsed time needs both events recorded outside a capture (an event "
                      "never recorded, or recorded in a capture, has no time)");
  *out_ms = (float)((double)delta_ns / 1e6);
  return RECAP_OK;
}

/* ------------------------------------------------------------------------------------------
 * Capture
 * ---------------------------------------------------------------------------------------- */

static recap_status host_capture_begin(recap_stream *stream, recap_capture_mode mode) {
  RECAP_TRY(recap__host_check_fault());
  if (mode != RECAP_CAPTURE_MODE_GLOBAL && mode != RECAP_CAPTURE_MODE_THREAD_LOCAL &&
      mode != RECAP_CAPTURE_MODE_RELAXED)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "unknown capture mode %d", (int)mode);
  host_capture *c = calloc(1, sizeof *c);
  recap__graph *graph = recap__host_graph_new();
  if (!c || !graph) {
    free(c);
    recap__host_graph_destroy(graph);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to begin a capture");
  }
  host_stream *hs = stream_state(stream);
  pthread_mutex_lock(&capture_lock);
  if (hs->capture) {
    pthread_mutex_unlock(&capture_lock);
    free(c);
    recap__host_graph_destroy(graph);
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the stream already takes part in a capture (%s)",
                      hs->capture->origin == hs ? "begun on it" : "joined from another stream");
  }
  c->id = next_capture_id++;
  c->origin = hs;
  c->mode = mode;
  c->thread = pthread_self();
  c->graph = graph;
  c->members = hs;
  c->next = captures;
  captures = c;
  hs->capture = c;
  hs->tail = hs->last_work = RECAP__HOST_NO_NODE;
  hs->next_member = NULL;
  pthread_mutex_unlock(&capture_lock);
  return RECAP_OK;
}

/* The first stream that joined `c` and has work its origin does not depend on. */
static recap_status find_unjoined_locked(host_capture *c, bool *unjoined) {
  *unjoined = false;
  for (host_stream *m = c->members; m && !*unjoined; m = m->next_member) {
    if (m == c->origin || m->last_work == RECAP__HOST_NO_NODE) continue;
    bool joined = false;
    if (c->origin->tail != RECAP__HOST_NO_NODE)
      RECAP_TRY(recap__host_graph_reaches(c->graph, c->origin->tail, m->last_work, &joined));
    *unjoined = !joined;
  }
  return RECAP_OK;
}

/* Takes `c` off the list of captures; its open bodies lose their graph (it is about to go)
 * and are invalidated, so their while_end reports why. */
static void unlink_capture_locked(host_capture *c) {
  for (host_capture **link = &captures; *link;) {
    host_capture *other = *link;
    if (other == c) {
      *link = c->next;
      continue;
    }
    if (other->parent == c) {
      other->parent = NULL;
      other->graph = NULL;
      invalidate_locked(other, "the capture holding the WHILE node ended before its body");
    }
    link = &other->next;
  }
}

/* Ends the capture whatever the outcome (the runtime's registry forgets it either way):
 * every member stream leaves capture state, and the graph is returned only on success. */
static recap_status host_capture_end(recap_stream *stream, recap__graph **out) {
  host_stream *hs = stream_state(stream);
  pthread_mutex_lock(&capture_lock);
  host_capture *c = hs->capture;
  if (!c || c->origin != hs || c->body) {
    pthread_mutex_unlock(&capture_lock);
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "%s",
                      !c        ? "the stream is not capturing"
                      : c->body ? "the stream captures a WHILE body; end it with while_end"
                                : "the stream joined a capture begun on another stream; end it "
                                  "there");
  }
  recap_status st = recap__host_check_fault();
  if (st == RECAP_OK && c->invalidated)
    st = RECAP_FAIL(RECAP_STATUS_CAPTURE_INVALIDATED, "the capture was invalidated: %s", c->reason);
  if (st == RECAP_OK && c->mode != RECAP_CAPTURE_MODE_RELAXED &&
      !pthread_equal(c->thread, pthread_self()))
    st = RECAP_FAIL(RECAP_STATUS_CAPTURE_INVALIDATED,
                    "a %s-mode capture must end on the thread that began it; the capture is "
                    "discarded",
                    mode_name(c->mode));
  if (st == RECAP_OK && c->open_bodies > 0)
    st = RECAP_FAIL(RECAP_STATUS_CAPTURE_INVALIDATED,
                    "%d WHILE bod%s begun in the capture %s still being captured (while_end "
                    "must come before the capture ends); the capture is discarded",
                    c->open_bodies, c->open_bodies == 1 ? "y" : "ies",
                    c->open_bodies == 1 ? "is" : "are");
  if (st == RECAP_OK) {
    bool unjoined;
    st = find_unjoined_locked(c, &unjoined);
    if (st == RECAP_OK && unjoined)
      st = RECAP_FAIL(RECAP_STATUS_CAPTURE_INVALIDATED,
                      "the capture has an unjoined stream: a stream that joined it did work "
                      "after the last event the origin stream waited on (CUDA's "
                      "cudaErrorStreamCaptureUnjoined); make the origin stream wait on an "
                      "event recorded after that work");
  }
  for (host_stream *m = c->members, *next; m; m = next) {
    next = m->next_member;
    m->capture = NULL;
    m->next_member = NULL;
    m->tail = m->last_work = RECAP__HOST_NO_NODE;
  }
  unlink_capture_locked(c);
  pthread_mutex_unlock(&capture_lock);
  if (st == RECAP_OK)
    *out = c->graph;
  else
    recap__host_graph_destroy(c->graph);
  free(c);
  return st;
}

/* ------------------------------------------------------------------------------------------
 * WHILE loops
 * ---------------------------------------------------------------------------------------- */

static uint64_t next_condition_handle = 1; /* guarded by capture_lock */

static recap_status host_while_begin(recap_stream *stream, recap_stream *body, uint64_t *handle) {
  RECAP_CHECK_ARG(stream && body && handle && stream != body);
  RECAP_TRY(recap__host_check_fault());
  host_stream *hs = stream_state(stream), *hb = stream_state(body);
  host_capture *c = calloc(1, sizeof *c);
  recap__host_node node = {.kind = RECAP__HOST_NODE_WHILE};
  node.u.loop.body = recap__host_graph_new();
  if (!c || !node.u.loop.body) {
    free(c);
    recap__host_node_release(&node);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to begin a WHILE node");
  }
  pthread_mutex_lock(&capture_lock);
  recap_status st = capture_usable_locked(hs);
  if (st == RECAP_OK && !hs->capture)
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "while_begin needs a capturing stream: a WHILE node lives in a graph");
  if (st == RECAP_OK && hb->capture)
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "the body stream already takes part in a capture; a WHILE body is captured "
                    "on a stream of its own");
  recap__graph *graph = node.u.loop.body;
  if (st == RECAP_OK) {
    node.u.loop.handle = next_condition_handle++;
    st = record_locked(hs, &node, true, NULL); /* the node now owns the body graph */
  }
  if (st != RECAP_OK) {
    pthread_mutex_unlock(&capture_lock);
    free(c);
    recap__host_node_release(&node);
    return st;
  }
  host_capture *parent = hs->capture;
  c->id = next_capture_id++;
  c->origin = hb;
  c->mode = parent->mode;
  c->thread = pthread_self();
  c->graph = graph;
  c->members = hb;
  c->body = true;
  c->handle = node.u.loop.handle;
  c->parent = parent;
  parent->open_bodies++;
  c->next = captures;
  captures = c;
  hb->capture = c;
  hb->tail = hb->last_work = RECAP__HOST_NO_NODE;
  hb->next_member = NULL;
  *handle = node.u.loop.handle;
  pthread_mutex_unlock(&capture_lock);
  return RECAP_OK;
}

static recap_status host_while_end(recap_stream *body) {
  RECAP_CHECK_ARG(body);
  host_stream *hb = stream_state(body);
  pthread_mutex_lock(&capture_lock);
  host_capture *c = hb->capture;
  if (!c || !c->body || c->origin != hb) {
    pthread_mutex_unlock(&capture_lock);
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the stream is not capturing a WHILE body begun on it (while_begin)");
  }
  recap_status st = recap__host_check_fault();
  if (st == RECAP_OK && c->invalidated)
    st = RECAP_FAIL(RECAP_STATUS_CAPTURE_INVALIDATED,
                    "the WHILE body's capture was invalidated: %s", c->reason);
  if (st == RECAP_OK && c->open_bodies > 0)
    st = RECAP_FAIL(RECAP_STATUS_CAPTURE_INVALIDATED,
                    "a WHILE body begun inside this body is still being captured");
  if (st == RECAP_OK) {
    bool unjoined;
    st = find_unjoined_locked(c, &unjoined);
    if (st == RECAP_OK && unjoined)
      st = RECAP_FAIL(RECAP_STATUS_CAPTURE_INVALIDATED,
                      "the WHILE body has an unjoined stream: a stream that joined it did work "
                      "after the last event the body stream waited on");
  }
  for (host_stream *m = c->members, *next; m; m = next) {
    next = m->next_member;
    m->capture = NULL;
    m->next_member = NULL;
    m->tail = m->last_work = RECAP__HOST_NO_NODE;
  }
  unlink_capture_locked(c);
  if (c->parent) {
    c->parent->open_bodies--;
    /* The WHILE node is in the enclosing graph already: a body that failed leaves it
     * unusable, so the enclosing capture fails too, for the same reason. */
    if (st != RECAP_OK) invalidate_locked(c->parent, recap_last_error());
  }
  pthread_mutex_unlock(&capture_lock);
  free(c);
  return st;
}

static recap_status host_condition_set(recap_stream *stream, uint64_t handle, const int32_t *flag) {
  RECAP_CHECK_ARG(stream && flag);
  host_stream *hs = stream_state(stream);
  pthread_mutex_lock(&capture_lock);
  /* The handle must be this body's or an enclosing loop's: cudaGraphSetConditional works
   * only inside its conditional node's graph. */
  bool in_loop = false;
  for (host_capture *c = hs->capture; c && c->body && !in_loop; c = c->parent)
    in_loop = c->handle == handle;
  pthread_mutex_unlock(&capture_lock);
  if (!in_loop)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "condition_set for handle %ju needs a stream capturing that handle's WHILE "
                      "body (or a body nested in it)",
                      (uintmax_t)handle);
  recap__host_condition args = {.handle = handle, .flag = flag};
  return launch_fn(stream, recap__host_condition_set_fn, &args, sizeof args, true);
}

/* ------------------------------------------------------------------------------------------
 * Graph launch (the rest of the graph slots are in host_graph.c)
 * ---------------------------------------------------------------------------------------- */

/* Whether a graph (or a child graph in it) holds a WHILE node. */
static bool holds_loop(const recap__graph *graph) {
  for (size_t i = 0; i < graph->count; i++) {
    const recap__host_node *n = &graph->nodes[i];
    if (n->kind == RECAP__HOST_NODE_WHILE) return true;
    if (n->kind == RECAP__HOST_NODE_CHILD && holds_loop(n->u.child)) return true;
  }
  return false;
}

/* Runs the exec on the caller's thread, in node order. On a capturing stream the whole
 * graph is recorded as one child-graph node (a deep copy, so later updates of the exec do
 * not change what was captured), as CUDA records a child graph. */
static recap_status host_graph_launch(recap__graph_exec *exec, recap_stream *stream) {
  RECAP_CHECK_ARG(exec && stream);
  RECAP_TRY(recap__host_check_fault());
  host_stream *hs = stream_state(stream);
  pthread_mutex_lock(&capture_lock);
  recap_status st = capture_usable_locked(hs);
  bool capturing = hs->capture != NULL;
  pthread_mutex_unlock(&capture_lock);
  RECAP_TRY(st);
  if (!capturing) return recap__host_graph_run(&exec->graph);
  if (holds_loop(&exec->graph)) {
    pthread_mutex_lock(&capture_lock);
    st = !hs->capture ? RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the capture ended meanwhile")
                      : ILLEGAL_LOCKED(hs->capture,
                                       "a graph holding a WHILE node cannot be launched into a "
                                       "capture: a child graph node may not contain "
                                       "conditional nodes");
    pthread_mutex_unlock(&capture_lock);
    return st;
  }

  recap__host_node node = {.kind = RECAP__HOST_NODE_CHILD};
  node.u.child = recap__host_graph_new();
  if (!node.u.child) return RECAP_STATUS_OUT_OF_MEMORY;
  st = recap__host_graph_copy(&exec->graph, node.u.child);
  bool recorded = false;
  if (st == RECAP_OK) st = submit(stream, &node, &recorded);
  if (st == RECAP_OK && !recorded) st = recap__host_graph_run(&exec->graph);
  if (!recorded) recap__host_node_release(&node);
  return st;
}

/* Graphs live in host memory already, so there is nothing to upload; the stream's state is
 * still checked as CUDA checks it. */
static recap_status host_graph_upload(recap__graph_exec *exec, recap_stream *stream) {
  RECAP_CHECK_ARG(exec && stream);
  RECAP_TRY(recap__host_check_fault());
  pthread_mutex_lock(&capture_lock);
  recap_status st = capture_usable_locked(stream_state(stream));
  pthread_mutex_unlock(&capture_lock);
  return st;
}

const recap__backend recap__host_backend = {
    .name = "host",
    .kind = RECAP_BACKEND_HOST,
    .device_count = host_device_count,
    .device_properties = host_device_properties,
    .mem_get_info = host_mem_get_info,
    .device_synchronize = host_device_synchronize,
    .can_access_peer = host_can_access_peer,
    .compiled_archs = host_compiled_archs,
    .mem_alloc = host_mem_alloc,
    .mem_free = host_mem_free,
    .memcpy_async = host_memcpy_async,
    .memset_async = host_memset_async,
    .stream_priority_range = host_stream_priority_range,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_query = host_stream_query,
    .stream_synchronize = host_stream_synchronize,
    .stream_wait_event = host_stream_wait_event,
    .stream_capture_status = host_stream_capture_status,
    .stream_wrap = NULL,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .event_synchronize = host_event_synchronize,
    .event_elapsed_ms = host_event_elapsed_ms,
    .event_ipc_handle = NULL,
    .event_ipc_open = NULL,
    .event_record_native = NULL,
    .native_stream_wait_event = NULL,
    .capture_begin = host_capture_begin,
    .capture_end = host_capture_end,
    .exchange_capture_mode = host_exchange_capture_mode,
    .graph_node_count = recap__host_graph_node_count,
    .graph_instantiate = recap__host_graph_instantiate,
    .graph_exec_update = recap__host_graph_exec_update,
    .graph_upload = host_graph_upload,
    .graph_launch = host_graph_launch,
    .graph_destroy = recap__host_graph_destroy,
    .graph_exec_destroy = recap__host_graph_exec_destroy,
    .graph_debug_dot = recap__host_graph_debug_dot,
    .launch_host = host_launch_host,
    .launch_kernel = host_launch_kernel,
    .while_begin = host_while_begin,
    .while_end = host_while_end,
    .condition_set = host_condition_set,
    .condition_store = recap__host_condition_store,
    .host_alloc_mapped = host_host_alloc_mapped,
    .host_free_mapped = host_host_free_mapped,
};
