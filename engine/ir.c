/*
 * ir.c: one bucket's IR from a loaded spec (ir.h, spec.h).
 *
 * Sizes are substituted, then each op's outputs come from the op registry's inference
 * (recap__op_infer), whose messages are turned into positioned errors. An op whose inputs
 * failed earlier is skipped silently, so one mistake is reported once, not at every op
 * downstream of it.
 *
 * Bucketed dims: padding rows are garbage as far as the result is concerned, so no op may
 * reduce or contract over an axis that carries the bucketed dim (a softmax over it, a GEMM's
 * K...). Which axes carry it is found by comparing two IRs at different values of the dim
 * (two buckets, or one probe when the dim has one value): an axis whose extent changes carries
 * it, through reshapes, permutes and broadcasts alike, with no per-op propagation rules. Only
 * which input axes an op reduces over is per op (its contract's reduced_axes, op.h).
 */
#include "engine/ir.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/names.h"
#include "engine/weight_plan.h"
#include "kernels/expr.h"
#include "kernels/infer.h"
#include "runtime/error.h"

#define MAX_NUMEL ((int64_t)1 << 62)
enum { MAX_LABEL_BYTES = 320 };

typedef struct {
  const recap__spec *spec;
  recap__diag *diag;
  uint64_t capacity; /* bytes of device memory sizes are checked against (0: unchecked) */
  bool check_files;  /* the largest bucket's build checks `init: file` tensors' files */
  char suffix[96];   /* " (with B = 4)" in bucketed specs */
  bool oom;
  recap__names instances; /* the IR's copy of each block instance's label -> its index */
} builder;

/* Every IR built in this process: the load path's test counts them. */
static atomic_size_t builds;

size_t recap__ir_builds(void) {
  return atomic_load(&builds);
}

static void error_with(builder *b, recap__src_pos pos, const char *suffix, const char *fmt,
                       va_list ap) {
  if (!b->diag) return;
  char text[1200];
  vsnprintf(text, sizeof text, fmt, ap);
  recap__diag_error(b->diag, pos, "%s%s", text, suffix);
}

static void error_at(builder *b, recap__src_pos pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void error_at(builder *b, recap__src_pos pos, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  error_with(b, pos, b->suffix, fmt, ap);
  va_end(ap);
}

/* An error about a size: " (with B = 4)" only when the size depends on the bucketed dim. */
static void size_error(builder *b, recap__src_pos pos, bool bucketed, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void size_error(builder *b, recap__src_pos pos, bool bucketed, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  error_with(b, pos, bucketed ? b->suffix : "", fmt, ap);
  va_end(ap);
}

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (int d = 0; d < ndim; ++d) {
    int w = snprintf(buf + used, size - used, "%s%lld", d ? ", " : "[", (long long)shape[d]);
    if (w < 0 || (size_t)w >= size - used) return;
    used += (size_t)w;
  }
  snprintf(buf + used, size - used, "]");
}

static const char *op_label(const recap__ir_op *op, char *buf, size_t size) {
  if (strchr(op->name, '#'))
    snprintf(buf, size, "'%s'", op->name);
  else
    snprintf(buf, size, "'%s' (%s)", op->name, op->def ? op->def->name : "?");
  return buf;
}

/* Element count and bytes, with the overflow and device-memory checks. False on error.
 * bucketed: whether the shape may depend on the bucketed dim (its errors then name the value). */
static bool size_tensor(builder *b, recap__ir_tensor *t, recap__src_pos pos, bool bucketed) {
  char shape[128];
  shape_text(t->ndim, t->shape, shape, sizeof shape);
  int64_t n = 1;
  for (int d = 0; d < t->ndim; ++d) {
    if (t->shape[d] > (MAX_NUMEL - 1) / n) {
      size_error(b, pos, bucketed,
                 "tensor '%s' %s: the element count overflows (the product of its dims "
                 "reaches 2^62)",
                 t->name, shape);
      return false;
    }
    n *= t->shape[d];
  }
  /* The planner refuses such a tensor too (it keeps every sum of sizes below SIZE_MAX), but
   * without a spec position; saying it here points at the tensor whatever the device. Checked
   * before multiplying: with 8-byte elements a count near 2^62 would wrap 64 bits of bytes. */
  size_t element = recap_dtype_size(t->dtype);
  if ((uint64_t)n > RECAP__MAX_TENSOR_BYTES / element) {
    size_error(b, pos, bucketed,
               "tensor '%s' %s %s is larger than 2^56 bytes, the most one tensor may hold", t->name,
               shape, recap_dtype_name(t->dtype));
    return false;
  }
  t->bytes = (uint64_t)n * element;
  uint64_t cap = b->capacity;
  if (cap && t->bytes > cap) {
    size_error(b, pos, bucketed,
               "tensor '%s' %s %s needs %llu bytes, more than the device memory (%llu "
               "bytes)",
               t->name, shape, recap_dtype_name(t->dtype), (unsigned long long)t->bytes,
               (unsigned long long)cap);
    return false;
  }
  return true;
}

/* Whether a declared tensor's shape names the bucketed dim or an alias of it. */
static bool shape_uses_bucket(const recap__spec *spec, const recap__spec_tensor *st) {
  for (int d = 0; d < st->ndim; ++d) {
    int dim = st->shape[d].dim;
    if (dim >= 0 && spec->bucket_dim >= 0 &&
        (dim == spec->bucket_dim || spec->dims[dim].alias == spec->bucket_dim))
      return true;
  }
  return false;
}

static char *dup_or_flag(builder *b, const char *s) {
  if (!s) return NULL;
  char *copy = strdup(s);
  if (!copy) b->oom = true;
  return copy;
}

/* Substitutes dims into a size; false if the dim itself was invalid (already reported). */
static bool resolve(const recap__spec_size *s, const int64_t *values, int64_t *out) {
  *out = s->dim >= 0 ? values[s->dim] : s->value;
  return s->dim < 0 || values[s->dim] > 0;
}

/* A spec position as the IR keeps it: pointing at the IR's own copies of the file name and of
 * the block instance's label, one copy per label. */
static recap__src_pos in_ir(builder *b, recap__ir *ir, recap__src_pos pos) {
  pos.file = ir->file;
  if (b->oom) pos.instance = NULL;
  if (!pos.instance) return pos;
  int index = recap__names_get(&b->instances, pos.instance);
  if (index < 0) {
    char **grown = realloc(ir->instances, (ir->num_instances + 1) * sizeof *grown);
    char *copy = strdup(pos.instance);
    int previous;
    if (grown) ir->instances = grown;
    if (!grown || !copy ||
        !recap__names_put(&b->instances, copy, (int)ir->num_instances, &previous)) {
      free(copy);
      b->oom = true;
      pos.instance = NULL;
      return pos;
    }
    index = (int)ir->num_instances;
    ir->instances[ir->num_instances++] = copy;
  }
  pos.instance = ir->instances[index];
  return pos;
}

/* A tensor's file(s), checked as the binder will read them but without reading their data
 * (the headers were parsed by the spec check): the plan the binder follows. Errors go at the
 * spec's `path:` (or `key:`), or at the key that is wrong. */
static void plan_weights(builder *b, recap__ir *ir, const recap__spec_tensor *st,
                         recap__ir_tensor *t, const int64_t *values) {
  char why[1024];
  recap__src_pos where = st->init_pos;
  recap_status rs =
      recap__weight_plan_build(&st->weights, t->init.path, st->init_pos, t->name, t->dtype, t->ndim,
                               t->shape, values, &t->weights, why, sizeof why, &where);
  if (rs == RECAP_STATUS_OUT_OF_MEMORY)
    b->oom = true;
  else if (rs != RECAP_OK)
    error_at(b, in_ir(b, ir, where), "%s", why);
}

/* Builds the IR for one value per dim (0: the dim is invalid). Tensors that could not be
 * inferred keep ndim 0. Errors go to b->diag (NULL: discarded). */
static recap__ir *build(builder *b, const int64_t *values, size_t bucket) {
  const recap__spec *spec = b->spec;
  recap__ir *ir = calloc(1, sizeof *ir);
  if (!ir) {
    b->oom = true;
    return NULL;
  }
  ir->file = dup_or_flag(b, spec->file);
  ir->name = dup_or_flag(b, spec->name);
  ir->device = spec->device;
  ir->dtype = spec->dtype;
  ir->seed = spec->seed;
  ir->warmup = spec->warmup;
  ir->iters = spec->iters;
  ir->bucket_dim = spec->bucket_dim;
  ir->bucket = bucket;
  ir->num_streams = 1;
  ir->dims = calloc(spec->num_dims ? spec->num_dims : 1, sizeof *ir->dims);
  ir->dim_values = calloc(spec->num_dims ? spec->num_dims : 1, sizeof *ir->dim_values);
  ir->tensors = calloc(spec->num_tensors ? spec->num_tensors : 1, sizeof *ir->tensors);
  ir->ops = calloc(spec->num_ops ? spec->num_ops : 1, sizeof *ir->ops);
  ir->outputs = calloc(spec->num_outputs ? spec->num_outputs : 1, sizeof *ir->outputs);
  if (!ir->dims || !ir->dim_values || !ir->tensors || !ir->ops || !ir->outputs) b->oom = true;
  if (b->oom) return ir;

  for (size_t d = 0; d < spec->num_dims; ++d) {
    const recap__spec_dim *sd = &spec->dims[d];
    recap__ir_dim *id = &ir->dims[ir->num_dims++];
    id->name = dup_or_flag(b, sd->name);
    id->pos = in_ir(b, ir, sd->pos);
    id->values = calloc(sd->count ? sd->count : 1, sizeof *id->values);
    if (!id->values) {
      b->oom = true;
      return ir;
    }
    /* A dim whose values were invalid has none (and a NULL array memcpy must not see). */
    if (sd->count) memcpy(id->values, sd->values, sd->count * sizeof *id->values);
    id->count = sd->count;
    id->alias = sd->alias;
    ir->dim_values[d] = values[d];
  }

  /* Declared tensors. */
  uint64_t persistent = 0;
  bool persistent_known = true;
  ir->num_tensors = spec->num_tensors;
  for (size_t i = 0; i < spec->num_tensors; ++i) {
    const recap__spec_tensor *st = &spec->tensors[i];
    recap__ir_tensor *t = &ir->tensors[i];
    t->name = dup_or_flag(b, st->name);
    t->pos = in_ir(b, ir, st->pos);
    t->init_pos = in_ir(b, ir, st->producer >= 0 ? st->pos : st->init_pos);
    t->role = st->role;
    t->producer = st->producer;
    t->alias_of = -1;
    t->bucket_axis = -1;
    if (st->producer >= 0) continue;
    t->dtype = st->dtype;
    t->init = st->init;
    t->init.path = dup_or_flag(b, st->init.path);
    t->init.key = dup_or_flag(b, st->init.key);
    if (b->oom) return ir;
    if (st->ndim == 0) {
      persistent_known = false;
      continue;
    }
    bool ok = true;
    for (int d = 0; d < st->ndim; ++d) ok = resolve(&st->shape[d], values, &t->shape[d]) && ok;
    if (!ok) {
      persistent_known = false;
      continue;
    }
    t->ndim = st->ndim;
    if (!size_tensor(b, t, t->pos, shape_uses_bucket(b->spec, st))) {
      t->ndim = 0;
      persistent_known = false;
      continue;
    }
    persistent += t->bytes;
    /* Files are read with the largest bucket's shapes (a smaller bucket's tensor is a prefix
     * of it), so only its IR checks them; the probe build (no diag) does not. */
    if (t->init.kind == RECAP_INIT_FILE && t->init.path && b->check_files)
      plan_weights(b, ir, st, t, values);
  }
  uint64_t cap = b->capacity;
  if (cap && persistent_known && persistent > cap)
    error_at(b, in_ir(b, ir, spec->pos),
             "inputs, params, states and scalars need %llu bytes "
             "together, more than the device memory (%llu bytes)",
             (unsigned long long)persistent, (unsigned long long)cap);

  /* Ops in order. */
  ir->num_ops = spec->num_ops;
  for (size_t i = 0; i < spec->num_ops; ++i) {
    const recap__spec_op *sop = &spec->ops[i];
    recap__ir_op *op = &ir->ops[i];
    op->def = sop->def;
    op->pos = in_ir(b, ir, sop->pos);
    op->stream = sop->stream;
    op->attrs = sop->attrs;
    if (sop->name) {
      op->name = dup_or_flag(b, sop->name);
    } else {
      char name[64];
      snprintf(name, sizeof name, "%s#%zu", sop->def ? sop->def->name : "op", i);
      op->name = dup_or_flag(b, name);
    }
    if (b->oom) return ir;
    if (op->stream + 1 > ir->num_streams) ir->num_streams = op->stream + 1;
    op->num_inputs = sop->num_inputs;
    op->num_outputs = sop->num_outputs;
    for (int j = 0; j < sop->num_inputs; ++j) op->inputs[j] = sop->inputs[j].index;
    for (int j = 0; j < sop->num_outputs; ++j) op->outputs[j] = sop->outputs[j].index;
    if (!sop->ok || !sop->def) continue;

    bool ready = true;
    for (int j = 0; j < sop->num_inputs; ++j) {
      int idx = sop->inputs[j].index;
      if (idx < 0 || ir->tensors[idx].ndim == 0) ready = false;
    }
    for (int k = 0; k < sop->num_int_attrs && ready; ++k) {
      const recap__spec_int_attr *ia = &sop->int_attrs[k];
      int64_t *field = (int64_t *)((char *)&op->attrs + ia->def->offset);
      for (int j = 0; j < ia->count; ++j)
        ready = resolve(&ia->values[j], values, &field[j]) && ready;
      if (ia->def->kind == RECAP_ATTR_INT_LIST) op->attrs.num_sizes = ia->count;
    }
    if (!ready) continue;
    for (int j = 0; j < sop->num_inputs; ++j) ir->tensors[sop->inputs[j].index].num_consumers++;

    recap__op_call call = {.def = sop->def, .num_inputs = sop->num_inputs, .attrs = op->attrs};
    for (int j = 0; j < sop->num_inputs; ++j) {
      const recap__ir_tensor *t = &ir->tensors[sop->inputs[j].index];
      recap_tensor *x = &call.inputs[j];
      x->dtype = t->dtype;
      x->ndim = t->ndim;
      memcpy(x->shape, t->shape, sizeof x->shape);
      recap__tensor_set_contiguous(x);
    }
    char label[MAX_LABEL_BYTES];
    op_label(op, label, sizeof label);
    if (recap__op_infer(&call) != RECAP_OK) {
      const char *message = recap_last_error();
      /* The registry names the op by its kind; say which op of the spec it is. */
      char kind[96];
      snprintf(kind, sizeof kind, "op '%s': ", sop->def->name);
      const char *body =
          strncmp(message, kind, strlen(kind)) == 0 ? message + strlen(kind) : message;
      /* The message names the op's input slots ('a', 'b', 'weight'); say which tensor each is,
       * where the names differ. */
      char bound[512];
      size_t n = 0;
      bound[0] = '\0';
      for (int j = 0; j < sop->num_inputs && n < sizeof bound; ++j) {
        const recap__label slot = recap__input_label(sop->def, j);
        const char *tensor = ir->tensors[sop->inputs[j].index].name;
        if (strcmp(slot.s, tensor) == 0) continue;
        n += (size_t)snprintf(bound + n, sizeof bound - n, "%s%s is '%s'", n ? ", " : " (", slot.s,
                              tensor);
      }
      if (n > 0 && n < sizeof bound - 1)
        snprintf(bound + n, sizeof bound - n, ")");
      else if (n > 0)
        bound[0] = '\0'; /* too long to say whole */
      error_at(b, op->pos, "op %s: %s%s", label, body, bound);
      continue;
    }
    /* Infer may normalize attributes (negative axes): keep what the launchers will read. */
    op->attrs = call.attrs;
    if (call.num_outputs != sop->num_outputs) {
      error_at(b, op->pos, "op %s produces %d output%s, but out: names %d", label, call.num_outputs,
               call.num_outputs == 1 ? "" : "s", sop->num_outputs);
      continue;
    }
    for (int o = 0; o < call.num_outputs; ++o) {
      int idx = sop->outputs[o].index;
      if (idx < 0) continue;
      recap__ir_tensor *t = &ir->tensors[idx];
      const recap_tensor *y = &call.outputs[o];
      t->dtype = y->dtype;
      memcpy(t->shape, y->shape, sizeof t->shape);
      t->ndim = y->ndim;
      const int aliased = recap__op_output_input(sop->def, o);
      if (aliased >= 0) t->alias_of = sop->inputs[aliased].index;
      if (!size_tensor(b, t, in_ir(b, ir, sop->outputs[o].pos), true)) {
        t->ndim = 0;
        continue;
      }
    }
    int first = sop->outputs[0].index;
    if (first >= 0 && ir->tensors[first].ndim > 0) {
      recap__ir_tensor *t = &ir->tensors[first];
      char got[128], want[128];
      if (sop->check_shape) {
        int64_t dims[RECAP_MAX_DIMS];
        bool ok = true, same = sop->check_ndim == t->ndim;
        for (int d = 0; d < sop->check_ndim; ++d)
          ok = resolve(&sop->check_dims[d], values, &dims[d]) && ok;
        for (int d = 0; ok && same && d < t->ndim; ++d) same = dims[d] == t->shape[d];
        if (ok && !same) {
          shape_text(t->ndim, t->shape, got, sizeof got);
          shape_text(sop->check_ndim, dims, want, sizeof want);
          error_at(b, in_ir(b, ir, sop->check_shape_pos),
                   "op %s: output '%s' has shape %s, but "
                   "shape: says %s",
                   label, t->name, got, want);
        }
      }
      if (sop->check_dtype && sop->check_dtype_value != t->dtype)
        error_at(b, in_ir(b, ir, sop->check_dtype_pos),
                 "op %s: output '%s' has dtype %s, but "
                 "dtype: says %s",
                 label, t->name, recap_dtype_name(t->dtype),
                 recap_dtype_name(sop->check_dtype_value));
    }
  }

  ir->num_outputs = spec->num_outputs;
  for (size_t i = 0; i < spec->num_outputs; ++i) {
    ir->outputs[i] = spec->outputs[i].index;
    if (ir->outputs[i] >= 0) ir->tensors[ir->outputs[i]].is_output = true;
  }
  return ir;
}

/* The result of a build: *out, or the status its errors and allocations make. */
static recap_status finish_build(builder *b, size_t errors_before, recap__ir *ir, recap__ir **out) {
  recap_status st = RECAP_OK;
  if (b->oom)
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "out of memory building the IR of %s",
                    b->spec->file);
  else if (recap__diag_errors(b->diag) > errors_before)
    /* An error whose message could not be allocated is only counted: no message to show. */
    st = recap__fail_plain(RECAP_STATUS_SPEC_ERROR, "%s",
                           b->diag->count ? b->diag->messages[b->diag->count - 1]
                                          : "the spec has errors (out of memory for their text)");
  if (st != RECAP_OK) {
    recap__ir_destroy(ir);
    return st;
  }
  *out = ir;
  return RECAP_OK;
}

/* The dims' values with the bucketed dim, and its aliases, at `value` (ignored without one);
 * NULL when out of memory. */
static int64_t *dim_values(const recap__spec *spec, int64_t value) {
  int64_t *values = calloc(spec->num_dims + 1, sizeof *values);
  for (size_t d = 0; values && d < spec->num_dims; ++d) {
    const recap__spec_dim *sd = &spec->dims[d];
    bool bucketed =
        spec->bucket_dim >= 0 && ((int)d == spec->bucket_dim || sd->alias == spec->bucket_dim);
    values[d] = sd->count == 0 ? 0 : bucketed ? value : sd->values[0];
  }
  return values;
}

void recap__ir_bucket_suffix(const char *dim, int64_t value, char *buf, size_t size) {
  snprintf(buf, size, " (with %s = %lld)", dim, (long long)value);
}

recap_status recap__ir_build(const recap__spec *spec, size_t bucket, uint64_t capacity,
                             recap__ir **out, recap__diag *diag) {
  RECAP_CHECK_ARG(spec && out);
  size_t n = recap__spec_num_buckets(spec);
  if (bucket >= n)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "bucket %zu of spec '%s' does not exist (it has %zu)", bucket, spec->file, n);
  recap__diag local = {0};
  builder b = {.spec = spec,
               .diag = diag ? diag : &local,
               .capacity = capacity,
               .check_files = bucket + 1 == n};
  size_t before = recap__diag_errors(b.diag);
  int64_t value = recap__spec_bucket_value(spec, bucket);
  int64_t *values = dim_values(spec, value);
  if (!values) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "out of memory building the IR");
  if (spec->bucket_dim >= 0)
    recap__ir_bucket_suffix(spec->dims[spec->bucket_dim].name, value, b.suffix, sizeof b.suffix);
  atomic_fetch_add(&builds, 1);
  recap__ir *ir = build(&b, values, bucket);
  recap__names_free(&b.instances);
  free(values);
  recap_status st = finish_build(&b, before, ir, out);
  recap__diag_free(&local);
  return st;
}

recap_status recap__ir_build_probe(const recap__spec *spec, recap__ir **out) {
  RECAP_CHECK_ARG(spec && out && spec->bucket_dim >= 0);
  const recap__spec_dim *sd = &spec->dims[spec->bucket_dim];
  RECAP_CHECK_ARG(sd->count > 0);
  int64_t *values = dim_values(spec, sd->values[sd->count - 1] + 1);
  if (!values) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "out of memory building the IR");
  /* Its errors are not the user's (a size that only fits the spec's own values): tensors it
   * could not infer keep ndim 0 and are left out of the comparison. */
  builder b = {.spec = spec};
  atomic_fetch_add(&builds, 1);
  recap__ir *ir = build(&b, values, sd->count - 1);
  recap__names_free(&b.instances);
  free(values);
  if (b.oom) {
    recap__ir_destroy(ir);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "out of memory building the IR");
  }
  *out = ir;
  return RECAP_OK;
}

recap_status recap__ir_mark_bucket_axes(recap__ir *ir, const recap__ir *other, recap__diag *diag) {
  RECAP_CHECK_ARG(ir && other && ir->bucket_dim >= 0 && other->num_tensors == ir->num_tensors);
  for (size_t i = 0; i < ir->num_tensors; ++i) {
    recap__ir_tensor *t = &ir->tensors[i];
    const recap__ir_tensor *p = &other->tensors[i];
    t->bucket_axes = 0;
    t->bucket_axis = -1;
    if (t->ndim == 0 || p->ndim != t->ndim) continue;
    for (int d = 0; d < t->ndim; ++d)
      if (t->shape[d] != p->shape[d]) t->bucket_axes |= 1u << d;
    for (int d = t->ndim - 1; d >= 0; --d)
      if (t->bucket_axes & (1u << d)) t->bucket_axis = d;
  }
  recap__diag local = {0};
  builder b = {.diag = diag ? diag : &local};
  size_t before = recap__diag_errors(b.diag);
  const char *dim = ir->dims[ir->bucket_dim].name;
  recap__ir_bucket_suffix(dim, ir->dim_values[ir->bucket_dim], b.suffix, sizeof b.suffix);
  /* The axis may have its extent through an alias of the dim: the message names them too. */
  char aliases[200] = "";
  size_t used = 0, count = 0;
  for (size_t d = 0; d < ir->num_dims; ++d) {
    if (ir->dims[d].alias != ir->bucket_dim) continue;
    size_t room = sizeof aliases - used;
    int w = snprintf(aliases + used, room, "%s'%s'", count ? ", " : "", ir->dims[d].name);
    if (w < 0 || (size_t)w >= room) break;
    used += (size_t)w;
    count++;
  }
  /* Runs of fewer rows copy an input's, state's or output's rows in and out (recap.h,
   * recap_pipeline_copy_in): a tensor that carries the dim on two axes ([T, T]) has no rows to
   * copy, and a view of it by rows would mix them. */
  for (size_t i = 0; i < ir->num_tensors; ++i) {
    const recap__ir_tensor *t = &ir->tensors[i];
    bool copied = t->is_output || t->role == RECAP_ROLE_INPUT || t->role == RECAP_ROLE_STATE ||
                  t->role == RECAP_ROLE_SCALAR;
    if (!copied || !(t->bucket_axes & (t->bucket_axes - 1))) continue;
    char shape[128];
    shape_text(t->ndim, t->shape, shape, sizeof shape);
    size_error(&b, t->pos, false,
               "tensor '%s' %s carries the bucketed dim '%s'%s%s%s on more than one axis: %s "
               "carries it on one axis only, its rows, which runs of fewer rows copy in and out",
               t->name, shape, dim,
               count ? (count == 1 ? " (or its alias " : " (or its aliases ") : "", aliases,
               count ? ")" : "", t->is_output ? "an output" : "an input, state or scalar");
  }
  for (size_t i = 0; i < ir->num_ops; ++i) {
    const recap__ir_op *op = &ir->ops[i];
    if (!op->def) continue;
    int input[4], axis[4];
    int n = op->def->reduced_axes ? op->def->reduced_axes(&op->attrs, input, axis) : 0;
    for (int k = 0; k < n; ++k) {
      if (input[k] >= op->num_inputs) continue;
      int idx = op->inputs[input[k]];
      if (idx < 0) continue;
      const recap__ir_tensor *t = &ir->tensors[idx];
      if (t->ndim == 0) continue;
      int a = axis[k] < 0 ? t->ndim + axis[k] : axis[k];
      if (a < 0 || !(t->bucket_axes & (1u << a))) continue;
      char label[MAX_LABEL_BYTES], shape[128];
      shape_text(t->ndim, t->shape, shape, sizeof shape);
      error_at(&b, op->pos,
               "op %s reduces over axis %d of tensor '%s' %s, which carries the "
               "bucketed dim '%s'%s%s (padding rows would change the result)",
               op_label(op, label, sizeof label), a, t->name, shape, dim,
               count ? (count == 1 ? " or its alias " : " or its aliases ") : "", aliases);
      break;
    }
  }
  recap_status st = recap__diag_errors(b.diag) > before
                        ? recap__fail_plain(RECAP_STATUS_SPEC_ERROR, "%s",
                                            b.diag->count ? b.diag->messages[b.diag->count - 1]
                                                          : "op reduces over the bucketed dim")
                        : RECAP_OK;
  recap__diag_free(&local);
  return st;
}

int recap__ir_find_tensor(const recap__ir *ir, const char *name) {
  if (!ir || !name) return -1;
  for (size_t i = 0; i < ir->num_tensors; ++i)
    if (ir->tensors[i].name && strcmp(ir->tensors[i].name, name) == 0) return (int)i;
  return -1;
}

void recap__ir_destroy(recap__ir *ir) {
  if (!ir) return;
  for (size_t i = 0; i < ir->num_dims; ++i) {
    free(ir->dims[i].name);
    free(ir->dims[i].values);
  }
  free(ir->dims);
  free(ir->dim_values);
  for (size_t i = 0; i < ir->num_tensors; ++i) {
    free(ir->tensors[i].name);
    free(ir->tensors[i].init.path);
    free(ir->tensors[i].init.key);
    recap__weight_plan_destroy(ir->tensors[i].weights);
  }
  free(ir->tensors);
  for (size_t i = 0; i < ir->num_ops; ++i) {
    free(ir->ops[i].name);
    free(ir->ops[i].fused_from);
    recap__expr_program_destroy(ir->ops[i].program);
  }
  free(ir->ops);
  free(ir->outputs);
  for (size_t i = 0; i < ir->num_instances; ++i) free(ir->instances[i]);
  free(ir->instances);
  free(ir->name);
  free(ir->file);
  free(ir);
}
