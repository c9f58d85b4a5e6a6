/* weight_plan.c: a tensor's `init: file` turned into sizes and checked against the file
 * headers (weight_plan.h). */
#include "engine/weight_plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/file.h"

void recap__weight_plan_destroy(recap__weight_plan *plan) {
  if (!plan) return;
  for (int i = 0; i < plan->num_sources; ++i) {
    free(plan->sources[i].path);
    free(plan->sources[i].key);
  }
  free(plan->sources);
  free(plan);
}

bool recap__weight_cast_allowed(recap_dtype from, recap_dtype to) {
  if (from == to) return true;
  if (recap_dtype_is_float(from) && recap_dtype_is_float(to)) return true;
  return (from == RECAP_DTYPE_I32 && to == RECAP_DTYPE_I64) ||
         (from == RECAP_DTYPE_I64 && to == RECAP_DTYPE_I32);
}

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (int d = 0; d < ndim; ++d) {
    int n = snprintf(buf + used, size - used, "%s%lld", d ? ", " : "[", (long long)shape[d]);
    if (n < 0 || (size_t)n >= size - used) return;
    used += (size_t)n;
  }
  snprintf(buf + used, size - used, "]");
}

/* What a failing check reports: the message and where it goes. */
typedef struct {
  char *why;
  size_t size;
  recap__src_pos *where;
} failure;

static recap_status fail_at(const failure *f, recap__src_pos pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static recap_status fail_at(const failure *f, recap__src_pos pos, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->why, f->size, fmt, ap);
  va_end(ap);
  *f->where = pos;
  return RECAP_STATUS_SPEC_ERROR;
}

static int64_t size_value(const recap__spec_size *s, const int64_t *dim_values) {
  return s->dim >= 0 ? dim_values[s->dim] : s->value;
}

static recap_status plan_raw(const char *path, recap__src_pos path_pos, const char *name,
                             recap__weight_plan *plan, const failure *f) {
  int fd;
  uint64_t size;
  if (recap__file_open_regular_fd(path, "file", &fd, &size) != RECAP_OK)
    return fail_at(f, path_pos, "tensor '%s': %s", name, recap_last_error());
  close(fd);
  uint64_t bytes = recap_dtype_size(plan->dtype);
  for (int d = 0; d < plan->ndim; ++d) bytes *= (uint64_t)plan->shape[d];
  if (size != bytes) {
    char shape[128];
    shape_text(plan->ndim, plan->shape, shape, sizeof shape);
    return fail_at(f, path_pos,
                   "file '%s' has %llu bytes, but tensor '%s' %s %s needs %llu (raw little-endian)",
                   path, (unsigned long long)size, name, shape, recap_dtype_name(plan->dtype),
                   (unsigned long long)bytes);
  }
  recap__weight_source *s = &plan->sources[0];
  plan->num_sources = 1;
  *s = (recap__weight_source){.dtype = plan->dtype, .ndim = plan->ndim, .stamp = {size, 0, 0}};
  memcpy(s->shape, plan->shape, sizeof s->shape);
  s->rows[1] = s->shape[0];
  s->cols[1] = s->shape[s->ndim - 1];
  if (!(s->path = strdup(path))) return RECAP_STATUS_OUT_OF_MEMORY;
  return RECAP_OK;
}

/* Source k of a checkpoint plan: the file tensor, its selection, and the shape it contributes
 * (after transpose) in result[]. */
static recap_status plan_source(const recap__spec_weights *w, int k, recap__src_pos path_pos,
                                const int64_t *dim_values, recap__weight_plan *plan,
                                int64_t result[RECAP_MAX_DIMS], int *result_ndim,
                                const failure *f) {
  const char *key = w->keys[k];
  const recap__checkpoint_tensor *t = recap__checkpoint_find(w->checkpoint, key);
  if (!t || t->entry->dtype < 0) /* the spec check reported it */
    return fail_at(f, w->key_pos[k], "'%s' has no tensor '%s' recap can read", w->checkpoint->path,
                   key);
  const recap__safetensors_entry *e = t->entry;
  const char *file = w->checkpoint->files[t->file].path;
  if (e->ndim > RECAP_MAX_DIMS)
    return fail_at(f, w->key_pos[k], "'%s': tensor '%s' has %d dims; recap's tensors have 1 to %d",
                   file, key, e->ndim, RECAP_MAX_DIMS);
  recap__weight_source *s = &plan->sources[k];
  s->dtype = (recap_dtype)e->dtype;
  s->ndim = e->ndim ? e->ndim : 1;
  for (int d = 0; d < s->ndim; ++d) s->shape[d] = e->ndim ? e->shape[d] : 1;
  s->offset = e->offset;
  s->stamp = w->checkpoint->files[t->file].stamp;
  if (!(s->path = strdup(file)) || !(s->key = strdup(key))) return RECAP_STATUS_OUT_OF_MEMORY;

  if (s->dtype != plan->dtype && !w->cast)
    return fail_at(
        f, path_pos, "'%s': tensor '%s' has dtype %s, the spec says %s (%s)%s", file, key,
        e->dtype_name, recap_dtype_name(plan->dtype), recap__safetensors_dtype_name(plan->dtype),
        recap__weight_cast_allowed(s->dtype, plan->dtype) ? "; cast: true converts it" : "");
  if (!recap__weight_cast_allowed(s->dtype, plan->dtype))
    return fail_at(f, w->cast_pos,
                   "'%s': tensor '%s': cast cannot convert %s to %s (float to float, i32 to i64 "
                   "and i64 to i32 only)",
                   file, key, e->dtype_name, recap_dtype_name(plan->dtype));

  int last = s->ndim - 1;
  s->rows[0] = 0;
  s->rows[1] = s->shape[0];
  s->cols[0] = 0;
  s->cols[1] = s->shape[last];
  char shape[128];
  shape_text(s->ndim, s->shape, shape, sizeof shape);
  if (w->has_rows) {
    /* One range for every key, or key k's own. */
    const recap__spec_size *range = w->rows[w->num_rows > 1 ? k : 0];
    recap__src_pos pos = w->num_rows > 1 ? range[0].pos : w->rows_pos;
    s->rows[0] = size_value(&range[0], dim_values);
    s->rows[1] = size_value(&range[1], dim_values);
    if (!(s->rows[0] < s->rows[1] && s->rows[1] <= s->shape[0]))
      return fail_at(f, pos,
                     "'%s': tensor '%s' %s: rows [%lld, %lld] must be a non-empty range of its "
                     "first axis",
                     file, key, shape, (long long)s->rows[0], (long long)s->rows[1]);
  }
  if (w->has_cols) {
    const recap__spec_size *range = w->cols[w->num_cols > 1 ? k : 0];
    recap__src_pos pos = w->num_cols > 1 ? range[0].pos : w->cols_pos;
    if (s->ndim < 2)
      return fail_at(f, pos,
                     "'%s': tensor '%s' %s: cols needs 2 or more dims (rows selects the only "
                     "axis)",
                     file, key, shape);
    s->cols[0] = size_value(&range[0], dim_values);
    s->cols[1] = size_value(&range[1], dim_values);
    if (!(s->cols[0] < s->cols[1] && s->cols[1] <= s->shape[last]))
      return fail_at(f, pos,
                     "'%s': tensor '%s' %s: cols [%lld, %lld] must be a non-empty range of its "
                     "last axis",
                     file, key, shape, (long long)s->cols[0], (long long)s->cols[1]);
  }
  *result_ndim = s->ndim;
  memcpy(result, s->shape, sizeof s->shape);
  result[0] = s->rows[1] - s->rows[0];
  if (s->ndim > 1) result[last] = s->cols[1] - s->cols[0];
  if (w->transpose) {
    if (s->ndim != 2)
      return fail_at(f, w->transpose_pos, "'%s': tensor '%s' %s: transpose needs 2 dims", file, key,
                     shape);
    int64_t swap = result[0];
    result[0] = result[1];
    result[1] = swap;
  }
  return RECAP_OK;
}

static recap_status plan_checkpoint(const recap__spec_weights *w, recap__src_pos path_pos,
                                    const char *name, const int64_t *dim_values,
                                    recap__weight_plan *plan, const failure *f) {
  int ndim = plan->ndim;
  int axis = w->concat < 0 ? ndim + w->concat : w->concat;
  if (axis < 0 || axis >= ndim)
    return fail_at(f, w->concat_pos, "tensor '%s': concat axis %d is outside its %d dims", name,
                   w->concat, ndim);
  plan->concat = axis;
  plan->transpose = w->transpose;
  int64_t total[RECAP_MAX_DIMS] = {0};
  int total_ndim = 0;
  char got[160], want[128];
  for (int k = 0; k < w->num_keys; ++k) {
    int64_t result[RECAP_MAX_DIMS];
    int rn = 0;
    plan->num_sources = k + 1;
    RECAP_TRY(plan_source(w, k, path_pos, dim_values, plan, result, &rn, f));
    bool fits = k == 0 || rn == total_ndim;
    for (int d = 0; fits && k > 0 && d < rn; ++d) fits = d == axis || result[d] == total[d];
    if (!fits) {
      shape_text(rn, result, got, sizeof got);
      shape_text(total_ndim, total, want, sizeof want);
      return fail_at(f, w->key_pos[k],
                     "tensor '%s': key '%s' gives %s, which does not concatenate along axis %d "
                     "with the %s of the keys before it",
                     name, w->keys[k], got, axis, want);
    }
    if (k == 0) {
      memcpy(total, result, sizeof total);
      total_ndim = rn;
    } else {
      total[axis] += result[axis];
    }
  }
  bool same = total_ndim == ndim;
  for (int d = 0; same && d < ndim; ++d) same = total[d] == plan->shape[d];
  if (!same) {
    const recap__weight_source *s = &plan->sources[0];
    shape_text(total_ndim, total, got, sizeof got);
    shape_text(ndim, plan->shape, want, sizeof want);
    char file_shape[128];
    shape_text(s->ndim, s->shape, file_shape, sizeof file_shape);
    if (w->num_keys > 1) {
      /* Each key's part: its file shape and the rows and columns read of it. */
      char parts[512] = "";
      size_t used = 0;
      for (int k = 0; k < w->num_keys && used < sizeof parts; ++k) {
        const recap__weight_source *p = &plan->sources[k];
        shape_text(p->ndim, p->shape, file_shape, sizeof file_shape);
        int n = snprintf(parts + used, sizeof parts - used,
                         "%s'%.60s' %s rows [%lld, %lld] cols [%lld, %lld]", k ? ", " : "", p->key,
                         file_shape, (long long)p->rows[0], (long long)p->rows[1],
                         (long long)p->cols[0], (long long)p->cols[1]);
        if (n < 0) break;
        used += (size_t)n;
      }
      return fail_at(f, path_pos,
                     "tensor '%s' is %s, but its keys give %s (concatenated along axis %d%s): "
                     "%s",
                     name, want, got, axis, w->transpose ? ", each transposed" : "", parts);
    }
    bool transformed = w->has_rows || w->has_cols || w->transpose;
    char reads[sizeof got + 80] = "";
    if (transformed)
      snprintf(reads, sizeof reads, "; with the spec's rows, cols and transpose that gives %s",
               got);
    return fail_at(f, path_pos,
                   "'%s': tensor '%s' has another shape than the spec's: the file holds %s%s, the "
                   "tensor '%s' is %s",
                   s->path, s->key, file_shape, reads, name, want);
  }
  return RECAP_OK;
}

recap_status recap__weight_plan_build(const recap__spec_weights *w, const char *raw_path,
                                      recap__src_pos path_pos, const char *name, recap_dtype dtype,
                                      int ndim, const int64_t *shape, const int64_t *dim_values,
                                      recap__weight_plan **out, char *why, size_t why_size,
                                      recap__src_pos *where) {
  failure f = {why, why_size, where};
  recap__weight_plan *plan = calloc(1, sizeof *plan);
  int sources = w->checkpoint ? w->num_keys : 1;
  if (plan) plan->sources = calloc((size_t)(sources > 0 ? sources : 1), sizeof *plan->sources);
  if (!plan || !plan->sources) {
    free(plan);
    return RECAP_STATUS_OUT_OF_MEMORY;
  }
  plan->dtype = dtype;
  plan->ndim = ndim;
  memcpy(plan->shape, shape, (size_t)ndim * sizeof *shape);
  recap_status st = w->checkpoint ? plan_checkpoint(w, path_pos, name, dim_values, plan, &f)
                                  : plan_raw(raw_path, path_pos, name, plan, &f);
  if (st != RECAP_OK) {
    recap__weight_plan_destroy(plan);
    return st;
  }
  *out = plan;
  return RECAP_OK;
}
