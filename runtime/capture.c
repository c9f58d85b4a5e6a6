/* capture.c: the registry of captures under way (see capture.h for the protocol). */
#include "runtime/capture.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "runtime/error.h"

typedef struct capture_entry {
  const recap_stream *origin;
  pthread_t owner; /* the thread that began it */
  uint64_t id;
  struct capture_entry *next;
} capture_entry;

static pthread_rwlock_t registry_lock = PTHREAD_RWLOCK_INITIALIZER;
/* Signalled when the last capture ends, for recap__unsafe_enter_wait. */
static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cond = PTHREAD_COND_INITIALIZER;
static capture_entry *registry_head;
static atomic_int registry_count;
static atomic_uint_fast64_t next_capture_id = 1;
static _Atomic(recap__capture_end_hook) end_hook;

static capture_entry *find_locked(const recap_stream *stream) {
  for (capture_entry *e = registry_head; e; e = e->next)
    if (e->origin == stream) return e;
  return NULL;
}

recap_status recap__capture_begin(recap_stream *stream, recap_capture_mode mode) {
  capture_entry *entry = calloc(1, sizeof *entry);
  if (!entry) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a capture record");
  pthread_rwlock_wrlock(&registry_lock);
  if (find_locked(stream)) {
    pthread_rwlock_unlock(&registry_lock);
    free(entry);
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "stream is already capturing");
  }
  entry->origin = stream;
  entry->owner = pthread_self();
  entry->id = atomic_fetch_add(&next_capture_id, 1);
  entry->next = registry_head;
  registry_head = entry;
  atomic_fetch_add(&registry_count, 1);
  /* Begin while holding the lock: an unsafe call that passed recap__unsafe_enter() has
   * finished, and none can start until the backend knows about the capture. */
  recap_status st = stream->backend->capture_begin(stream, mode);
  if (st != RECAP_OK) {
    registry_head = entry->next;
    atomic_fetch_sub(&registry_count, 1);
    free(entry);
  }
  pthread_rwlock_unlock(&registry_lock);
  return st;
}

recap_status recap__capture_end(recap_stream *stream, recap__graph **out) {
  recap_status st = stream->backend->capture_end(stream, out);
  if (st != RECAP_OK) {
    /* Some refusals leave the capture under way (CUDA: ending a global-mode capture from
     * another thread); then it stays registered, so lower layers keep treating it as live. */
    recap_capture_status still = RECAP_CAPTURE_NONE;
    if (stream->backend->stream_capture_status(stream, &still) == RECAP_OK &&
        still != RECAP_CAPTURE_NONE)
      return st;
  }
  pthread_rwlock_wrlock(&registry_lock);
  for (capture_entry **link = &registry_head; *link; link = &(*link)->next) {
    if ((*link)->origin == stream) {
      capture_entry *dead = *link;
      *link = dead->next;
      free(dead);
      atomic_fetch_sub(&registry_count, 1);
      break;
    }
  }
  int remaining = atomic_load(&registry_count);
  pthread_rwlock_unlock(&registry_lock);
  if (remaining == 0) {
    pthread_mutex_lock(&idle_lock);
    pthread_cond_broadcast(&idle_cond);
    pthread_mutex_unlock(&idle_lock);
  }
  recap__capture_end_hook hook = atomic_load(&end_hook);
  if (hook && remaining == 0) hook();
  return st;
}

uint64_t recap__capture_id(const recap_stream *stream) {
  pthread_rwlock_rdlock(&registry_lock);
  capture_entry *e = find_locked(stream);
  uint64_t id = e ? e->id : 0;
  pthread_rwlock_unlock(&registry_lock);
  return id;
}

int recap__capture_count(void) { return atomic_load(&registry_count); }

bool recap__unsafe_enter(void) {
  pthread_rwlock_rdlock(&registry_lock);
  if (registry_head) {
    pthread_rwlock_unlock(&registry_lock);
    return false;
  }
  return true;
}

bool recap__unsafe_enter_wait(void) {
  for (;;) {
    pthread_rwlock_rdlock(&registry_lock);
    if (!registry_head) return true;
    bool own = false;
    for (capture_entry *e = registry_head; e; e = e->next)
      own |= pthread_equal(e->owner, pthread_self()) != 0;
    pthread_rwlock_unlock(&registry_lock);
    if (own) return false;
    pthread_mutex_lock(&idle_lock);
    while (atomic_load(&registry_count) > 0) pthread_cond_wait(&idle_cond, &idle_lock);
    pthread_mutex_unlock(&idle_lock);
  }
}

void recap__unsafe_exit(void) { pthread_rwlock_unlock(&registry_lock); }

void recap__capture_set_end_hook(recap__capture_end_hook hook) { atomic_store(&end_hook, hook); }
