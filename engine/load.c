/*
 * load.c: text -> checked spec -> every bucket's IR once -> fusion -> plan (load.h).
 *
 * Why one file: the public create calls, `recap run`, `recap plan`, `recap dot` and
 * `recap validate` used to each load the spec their own way (and some of them twice), so a
 * spec could pass one and fail another. Now they differ only in their options.
 */
#include "engine/load.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/fuse.h"
#include "runtime/error.h"

void recap__model_free_loaded(recap__model *m) {
  if (!m) return;
  recap__plan_destroy(m->plan);
  if (m->irs)
    for (size_t b = 0; b < m->num_buckets; ++b) recap__ir_destroy(m->irs[b]);
  free(m->irs);
  free(m->bucket_values);
  recap__spec_destroy(m->spec);
  free(m);
}

/* The device memory sizes are checked against, as the options ask. */
static recap_status find_capacity(const recap__load_options *o, recap__model *m) {
  m->capacity = o->device_memory_bytes;
  if (m->capacity || o->capacity == RECAP__CAPACITY_OFF) return RECAP_OK;
  if (o->capacity == RECAP__CAPACITY_IF_KNOWN && !recap_device_is_available(m->device.backend)) {
    const char *name = recap_backend_name(m->device.backend);
    if (recap_backend_compiled(m->device.backend))
      snprintf(m->capacity_note, sizeof m->capacity_note, "no %s device on this machine", name);
    else
      snprintf(m->capacity_note, sizeof m->capacity_note, "this build has no %s backend", name);
    return RECAP_OK;
  }
  size_t free_bytes = 0, total = 0;
  recap_status st = recap_device_mem_get_info(m->device, &free_bytes, &total);
  if (st != RECAP_OK && o->capacity == RECAP__CAPACITY_IF_KNOWN) {
    snprintf(m->capacity_note, sizeof m->capacity_note, "%s", recap_last_error());
    return RECAP_OK;
  }
  m->capacity = total;
  return st;
}

/* The suffix bucket b's IR errors end with. */
static void bucket_suffix(const recap__spec *spec, size_t b, char *buf, size_t size) {
  recap__ir_bucket_suffix(spec->dims[spec->bucket_dim].name, recap__spec_bucket_value(spec, b), buf,
                          size);
}

/* The errors from diag->messages[from] on that every bucket has, each with its own value, lose
 * the suffix: "(with B = 4)" says that only some buckets have a mistake. */
static void drop_suffix_of_every_bucket(const recap__spec *spec, recap__diag *diag, size_t from,
                                        const recap__diag *buckets, size_t n) {
  char suffix[128];
  for (size_t i = from; i < diag->count; ++i) {
    char *m = diag->messages[i];
    size_t len = strlen(m), base = 0;
    for (size_t b = 0; b < n && !base; ++b) {
      bucket_suffix(spec, b, suffix, sizeof suffix);
      size_t sl = strlen(suffix);
      if (len > sl && strcmp(m + len - sl, suffix) == 0) base = len - sl;
    }
    bool everywhere = base > 0;
    for (size_t b = 0; b < n && everywhere; ++b) {
      bucket_suffix(spec, b, suffix, sizeof suffix);
      size_t sl = strlen(suffix);
      bool found = false;
      for (size_t j = 0; j < buckets[b].count && !found; ++j) {
        const char *o = buckets[b].messages[j];
        found = strlen(o) == base + sl && memcmp(o, m, base) == 0 && strcmp(o + base, suffix) == 0;
      }
      everywhere = found;
    }
    if (everywhere) m[base] = '\0';
  }
}

/* Every bucket's IR, once; then the bucketed axes from neighbouring buckets. A mistake that
 * shows in several buckets is reported once, at its first bucket. */
static recap_status build_irs(recap__model *m, recap__diag *diag) {
  const recap__spec *spec = m->spec;
  size_t n = m->num_buckets;
  recap_status st = RECAP_OK;
  size_t from = diag ? diag->count : 0;
  recap__diag *buckets = calloc(n, sizeof *buckets);
  if (!buckets) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "out of memory building the IRs");
  for (size_t b = 0; b < n; ++b) {
    m->bucket_values[b] = recap__spec_bucket_value(spec, b);
    recap_status bs = recap__ir_build(spec, b, m->capacity, &m->irs[b], &buckets[b]);
    recap__diag_merge_new_positions(diag, &buckets[b]);
    if (bs == RECAP_STATUS_OUT_OF_MEMORY) st = bs;
    if (bs != RECAP_OK && st == RECAP_OK) st = bs;
    /* The backend the model runs on (an option may override the spec's): the fusion pass
     * folds by it (fuse.h). */
    if (m->irs[b]) m->irs[b]->device = m->device.backend;
    if (st == RECAP_STATUS_OUT_OF_MEMORY) break;
  }
  if (diag && spec->bucket_dim >= 0 && st != RECAP_STATUS_OUT_OF_MEMORY)
    drop_suffix_of_every_bucket(spec, diag, from, buckets, n);
  for (size_t b = 0; b < n; ++b) recap__diag_free(&buckets[b]);
  free(buckets);
  if (st != RECAP_OK || spec->bucket_dim < 0) return st;
  recap__ir *probe = NULL;
  if (n == 1) RECAP_TRY(recap__ir_build_probe(spec, &probe));
  for (size_t b = 0; b < n; ++b) {
    const recap__ir *other = n == 1 ? probe : m->irs[b + 1 < n ? b + 1 : b - 1];
    recap__diag bucket_diag = {0};
    recap_status bs = recap__ir_mark_bucket_axes(m->irs[b], other, &bucket_diag);
    recap__diag_merge_new_positions(diag, &bucket_diag);
    recap__diag_free(&bucket_diag);
    if (bs != RECAP_OK && st == RECAP_OK) st = bs;
  }
  recap__ir_destroy(probe);
  return st;
}

/* Ops whose launch uses their communicator's peer buffers (one call at a time, op.h) stay off
 * them when the pipeline runs such ops on more than one stream, where two could overlap. */
static void keep_concurrent_collectives_apart(recap__ir *ir) {
  int stream = -1;
  bool several = false;
  for (size_t i = 0; i < ir->num_ops; ++i) {
    const recap__ir_op *op = &ir->ops[i];
    if (!op->def || !op->def->one_call_per_communicator) continue;
    if (stream >= 0 && op->stream != stream) several = true;
    stream = op->stream;
  }
  for (size_t i = 0; several && i < ir->num_ops; ++i)
    if (ir->ops[i].def && ir->ops[i].def->one_call_per_communicator)
      ir->ops[i].attrs.peer_buffers_off = 1;
}

/* The steps after the spec check; takes the spec. */
static recap_status load_model(recap__spec *spec, const recap__load_options *o, recap__model **out,
                               recap__diag *diag) {
  recap__model *m = calloc(1, sizeof *m);
  if (!m) {
    recap__spec_destroy(spec);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a pipeline model");
  }
  atomic_init(&m->refs, 1);
  m->spec = spec;
  m->device = o->device_given ? o->device : (recap_device){spec->device, 0};
  if (!o->device_given && o->host_if_unavailable && !recap_device_is_available(m->device.backend))
    m->device = (recap_device){RECAP_BACKEND_HOST, 0};
  int count = 0;
  if (!o->device_given && o->device_ordinal > 0 &&
      recap_device_count(m->device.backend, &count) == RECAP_OK && count > 0)
    m->device.index = o->device_ordinal % count;
  m->num_buckets = recap__spec_num_buckets(spec);
  m->irs = calloc(m->num_buckets, sizeof *m->irs);
  m->bucket_values = calloc(m->num_buckets, sizeof *m->bucket_values);
  recap_status st = RECAP_OK;
  if (!m->irs || !m->bucket_values) {
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a pipeline model");
    goto fail;
  }
  RECAP_TRY_GOTO(st, find_capacity(o, m), fail);
  st = build_irs(m, diag);
  if (st == RECAP_STATUS_SPEC_ERROR) st = recap__diag_report(diag);
  if (st != RECAP_OK) goto fail;
  /* Every bucket gets the same groups (fuse.h), so one plan fits them all. */
  m->fused = recap__fuse_enabled_on(o->no_fusion, m->device.backend);
  for (size_t b = 0; m->fused && b < m->num_buckets; ++b)
    RECAP_TRY_GOTO(st, recap__fuse(m->irs[b]), fail);
  for (size_t b = 0; b < m->num_buckets; ++b) keep_concurrent_collectives_apart(m->irs[b]);
  /* Planned over every bucket: a view that a smaller bucket cannot form stays a copy. */
  RECAP_TRY_GOTO(st, recap__plan_build_buckets(m->irs, m->num_buckets, NULL, &m->plan), fail);
  const recap__ir *largest = m->irs[m->num_buckets - 1];
  for (size_t i = 0; i < largest->num_ops; ++i)
    if (largest->ops[i].def->is_random) m->has_random = true;
  *out = m;
  return RECAP_OK;
fail:
  recap__model_free_loaded(m);
  return st;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static recap_status load(const char *path, const char *text, size_t length, const char *name,
                         const recap__load_options *options, recap__model **out,
                         recap__diag *user_diag) {
  RECAP_CHECK_ARG(out);
  recap__load_options o = options ? *options : (recap__load_options){0};
  recap__diag local = {0};
  recap__diag *diag = user_diag ? user_diag : &local;
  double t0 = now_ms();
  recap__spec *spec = NULL;
  recap_status st = path ? recap__spec_load_file(path, &o.spec, &spec, diag)
                         : recap__spec_load_string(text, length, name, &o.spec, &spec, diag);
  if (st == RECAP_OK) st = load_model(spec, &o, out, diag);
  if (st == RECAP_OK) (*out)->load_ms = now_ms() - t0;
  recap__diag_free(&local);
  return st;
}

recap_status recap__load_file(const char *path, const recap__load_options *options,
                              recap__model **out, recap__diag *diag) {
  RECAP_CHECK_ARG(path);
  return load(path, NULL, 0, NULL, options, out, diag);
}

recap_status recap__load_string(const char *text, size_t length, const char *name,
                                const recap__load_options *options, recap__model **out,
                                recap__diag *diag) {
  RECAP_CHECK_ARG(text || length == 0);
  return load(NULL, text, length, name, options, out, diag);
}
