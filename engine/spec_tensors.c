/* spec_tensors.c: the `tensors:` mapping: roles, dtypes, shapes over dims, initializers and the
 * files they name, resolved inside base_dir (spec_internal.h). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/checkpoint.h"
#include "engine/spec_internal.h"
#include "kernels/expr.h"
#include "kernels/infer.h"
#include "runtime/error.h"
#include "runtime/file.h"

static const char *const role_names[] = {"input", "param", "state", "scalar", NULL};
static const char *const init_names[] = {"zeros", "ones",  "normal", "uniform",
                                         "file",  "value", NULL};
static const recap_init_kind init_kinds[] = {RECAP_INIT_ZEROS,   RECAP_INIT_ONES, RECAP_INIT_NORMAL,
                                             RECAP_INIT_UNIFORM, RECAP_INIT_FILE, RECAP_INIT_VALUE};

int recap__spec_find_word(const char *const *words, const char *s) {
  for (int i = 0; words[i]; ++i)
    if (strcmp(words[i], s) == 0) return i;
  return -1;
}

/* ---- file paths ------------------------------------------------------------------------ */

/* Collapses "." and ".." and repeated '/' of an absolute path in place. */
static void normalize_path(char *path) {
  char *out = path;
  const char *p = path;
  while (*p) {
    while (*p == '/') ++p;
    const char *seg = p;
    while (*p && *p != '/') ++p;
    size_t n = (size_t)(p - seg);
    if (n == 0 || (n == 1 && seg[0] == '.')) continue;
    if (n == 2 && seg[0] == '.' && seg[1] == '.') {
      while (out > path && *--out != '/') {
      }
      continue;
    }
    *out++ = '/';
    memmove(out, seg, n);
    out += n;
  }
  if (out == path) *out++ = '/';
  *out = '\0';
}

/* Resolves `path` against the spec's folder, checks it against base_dir and that it names a
 * readable regular file (or, with folder_ok, a folder). Returns a malloc'd absolute path, or
 * NULL (error reported). */
static char *resolve_file(loader *L, const recap__yaml_node *n, const char *path, bool folder_ok) {
  const recap__spec *spec = L->spec;
  char *dir = realpath(spec->dir, NULL);
  if (!dir) {
    ERR(L, n->pos, "cannot resolve the spec's folder '%s': %s", spec->dir, strerror(errno));
    return NULL;
  }
  size_t len = strlen(dir) + strlen(path) + 2;
  char *full = malloc(len);
  if (!full) {
    free(dir);
    L->oom = true;
    return NULL;
  }
  if (path[0] == '/')
    snprintf(full, len, "%s", path);
  else
    snprintf(full, len, "%s/%s", dir, path);
  free(dir);
  normalize_path(full);

  if (spec->options.base_dir) {
    char *base = realpath(spec->options.base_dir, NULL);
    if (!base) {
      ERR(L, n->pos, "cannot resolve the base directory '%s': %s", spec->options.base_dir,
          strerror(errno));
      free(full);
      return NULL;
    }
    bool ok = recap__path_is_inside(full, base);
    /* A symbolic link inside the base may still point outside it. */
    char *real = ok ? realpath(full, NULL) : NULL;
    if (ok && real) ok = recap__path_is_inside(real, base);
    free(real);
    if (!ok) {
      ERR(L, n->pos, "path '%.200s' escapes the base directory '%s'", path, base);
      free(base);
      free(full);
      return NULL;
    }
    free(base);
  }
  struct stat st;
  if (stat(full, &st) != 0) {
    ERR(L, n->pos, "cannot read file '%.200s' (%s): %s", path, full, strerror(errno));
    free(full);
    return NULL;
  }
  if (!S_ISREG(st.st_mode) && !(folder_ok && S_ISDIR(st.st_mode))) {
    ERR(L, n->pos, "file '%.200s' (%s) is not a regular file%s", path, full,
        folder_ok ? " or a checkpoint folder" : "");
    free(full);
    return NULL;
  }
  return full;
}

/* ---- checkpoints ----------------------------------------------------------------------- */

/* Whether a resolved path names a checkpoint (a folder, an index, a .safetensors file) rather
 * than a raw file. */
static bool is_checkpoint_path(const char *full) {
  struct stat st;
  size_t n = strlen(full);
  return (stat(full, &st) == 0 && S_ISDIR(st.st_mode)) ||
         (n >= 12 && strcmp(full + n - 12, ".safetensors") == 0) ||
         (n >= 5 && strcmp(full + n - 5, ".json") == 0);
}

/* The file a checkpoint path reads first, links resolved: a folder's index (or its
 * model.safetensors), else the path itself. A folder and its index named in two places of a
 * spec are then one checkpoint. malloc'd; NULL when it cannot be resolved (the open reports
 * why). */
static char *checkpoint_identity(const char *full) {
  struct stat st;
  if (stat(full, &st) != 0 || !S_ISDIR(st.st_mode)) return realpath(full, NULL);
  size_t n = strlen(full) + sizeof RECAP__CHECKPOINT_INDEX_NAME + 2;
  char *inside = malloc(n);
  if (!inside) return NULL;
  snprintf(inside, n, "%s/%s", full, RECAP__CHECKPOINT_INDEX_NAME);
  if (stat(inside, &st) != 0) snprintf(inside, n, "%s/%s", full, RECAP__CHECKPOINT_FILE_NAME);
  char *real = realpath(inside, NULL);
  free(inside);
  return real;
}

/* The spec's checkpoint at the resolved path `full`, opened on first use (each file's header
 * is then parsed once per spec, however many tensors read it, and whether they name the
 * folder or its index). NULL: error reported at n. */
static const recap__checkpoint *open_checkpoint(loader *L, const recap__yaml_node *n,
                                                const char *full) {
  recap__spec *spec = L->spec;
  /* The same text is the common case (every tensor of one `checkpoint:`): no file system
   * lookups. Only a new path pays for resolving links against the open ones. */
  for (size_t i = 0; i < spec->num_checkpoints; ++i)
    if (strcmp(spec->checkpoints[i]->path, full) == 0) return spec->checkpoints[i];
  char *identity = checkpoint_identity(full);
  for (size_t i = 0; identity && i < spec->num_checkpoints; ++i) {
    char *other = checkpoint_identity(spec->checkpoints[i]->path);
    bool same = other && strcmp(other, identity) == 0;
    free(other);
    if (same) {
      free(identity);
      return spec->checkpoints[i];
    }
  }
  free(identity);
  recap__checkpoint **grown =
      realloc(spec->checkpoints, (spec->num_checkpoints + 1) * sizeof *grown);
  if (!grown) {
    L->oom = true;
    return NULL;
  }
  spec->checkpoints = grown;
  recap__checkpoint *c = NULL;
  recap_status st = recap__checkpoint_open(full, &c);
  if (st == RECAP_STATUS_OUT_OF_MEMORY) {
    L->oom = true;
    return NULL;
  }
  if (st != RECAP_OK) {
    ERR(L, n->pos, "%s", recap_last_error()); /* it names the file */
    return NULL;
  }
  spec->checkpoints[spec->num_checkpoints++] = c;
  return c;
}

void recap__spec_parse_checkpoint(loader *L, const recap__yaml_node *node) {
  const char *path;
  L->checkpoint_given = true;
  if (!recap__spec_get_string(L, node, "checkpoint", &path)) return;
  if (!path[0]) {
    ERR(L, node->pos, "checkpoint: the path is empty");
    return;
  }
  char *full = resolve_file(L, node, path, true);
  if (full) L->spec->checkpoint = open_checkpoint(L, node, full);
  free(full);
}

/* ---- tensors --------------------------------------------------------------------------- */

/* Most keys one tensor may concatenate (q/k/v, gate/up, a few experts). */
enum { MAX_KEYS = 64 };

/* The keys that say how a file is read (checked against the file's shapes by the IR). */
static bool parse_file_transforms(loader *L, const recap__yaml_node *v, const char *what,
                                  const recap__yaml_node *key, recap__spec_weights *w) {
  bool ok = true;
  const recap__yaml_node *n;
  int flag;
  if ((n = recap__spec_lookup(v, "transpose"))) {
    w->transpose_pos = n->pos;
    if (recap__spec_get_bool(L, n, "transpose", &flag))
      w->transpose = flag;
    else
      ok = false;
  }
  if ((n = recap__spec_lookup(v, "cast"))) {
    w->cast_pos = n->pos;
    if (recap__spec_get_bool(L, n, "cast", &flag))
      w->cast = flag;
    else
      ok = false;
  }
  if ((n = recap__spec_lookup(v, "concat"))) {
    int64_t axis;
    w->concat_pos = n->pos;
    if (!key || key->kind != RECAP_YAML_SEQUENCE) {
      ERR(L, n->pos, "%s: concat needs a list of keys to concatenate", what);
      ok = false;
    } else if (recap__spec_get_int(L, n, "concat", -RECAP_MAX_DIMS, RECAP_MAX_DIMS - 1, &axis)) {
      w->concat = (int)axis;
    } else {
      ok = false;
    }
  }
  static const char *const range_keys[] = {"rows", "cols"};
  size_t num_keys = key && key->kind == RECAP_YAML_SEQUENCE ? key->count : 1;
  for (int r = 0; r < 2; ++r) {
    if (!(n = recap__spec_lookup(v, range_keys[r]))) continue;
    char range_what[MAX_NAME_BYTES + 48];
    snprintf(range_what, sizeof range_what, "%s: %s", what, range_keys[r]);
    /* [begin, end] for every key, or a list of them, one per key. */
    bool per_key = n->kind == RECAP_YAML_SEQUENCE && n->count > 0 &&
                   n->items[0]->kind == RECAP_YAML_SEQUENCE;
    size_t count = per_key ? n->count : 1;
    if (per_key && count != num_keys) {
      ERR(L, n->pos, "%s: %zu ranges for %zu keys (one [begin, end] per key, or one for all)",
          range_what, count, num_keys);
      ok = false;
      continue;
    }
    recap__spec_size(*range)[2] = calloc(count, sizeof *range);
    if (!range) {
      L->oom = true;
      return false;
    }
    if (r)
      w->has_cols = true, w->cols_pos = n->pos, w->cols = range, w->num_cols = (int)count;
    else
      w->has_rows = true, w->rows_pos = n->pos, w->rows = range, w->num_rows = (int)count;
    for (size_t k = 0; k < count; ++k) {
      const recap__yaml_node *pair = per_key ? n->items[k] : n;
      if (pair->kind != RECAP_YAML_SEQUENCE || pair->count != 2) {
        ERR(L, pair->pos, "%s: expected [begin, end] (integers or dim names)%s, got %s",
            range_what, per_key ? " for each key" : " or one such range per key",
            recap__yaml_describe(pair));
        ok = false;
        continue;
      }
      for (int i = 0; i < 2; ++i)
        if (!recap__spec_get_size(L, pair->items[i], range_what, 0, &range[k][i])) ok = false;
    }
  }
  return ok;
}

/* `key:` (a name or a list of names; default: the tensor's name), each looked up in the
 * checkpoint when there is one. */
static bool parse_file_keys(loader *L, const recap__yaml_node *key, recap__spec_tensor *t,
                            const char *what) {
  recap__spec_weights *w = &t->weights;
  size_t count = !key ? 1 : key->kind == RECAP_YAML_SEQUENCE ? key->count : 1;
  if (key && key->kind == RECAP_YAML_SEQUENCE && (count < 1 || count > MAX_KEYS)) {
    ERR(L, key->pos, "%s: key lists 1 to %d names, got %zu", what, MAX_KEYS, count);
    return false;
  }
  w->keys = calloc(count, sizeof *w->keys);
  w->key_pos = calloc(count, sizeof *w->key_pos);
  if (!w->keys || !w->key_pos) {
    L->oom = true;
    return false;
  }
  bool ok = true;
  for (size_t i = 0; i < count; ++i) {
    const recap__yaml_node *k = !key                               ? NULL
                                : key->kind == RECAP_YAML_SEQUENCE ? key->items[i]
                                                                   : key;
    if (k && !recap__spec_get_string(L, k, what, &w->keys[i])) {
      ok = false;
      continue;
    }
    if (!k) w->keys[i] = t->name;
    /* Errors about a key the spec did not write go where the file is named. */
    w->key_pos[i] = k ? k->pos : t->init_pos;
    w->num_keys++;
    const recap__checkpoint *c = w->checkpoint;
    const recap__checkpoint_tensor *found = c ? recap__checkpoint_find(c, w->keys[i]) : NULL;
    if (c && !found) {
      ERR(L, w->key_pos[i], "'%s' has no tensor '%.200s'", c->path, w->keys[i]);
      ok = false;
    } else if (found && found->entry->dtype < 0) {
      ERR(L, w->key_pos[i],
          "'%s': tensor '%.200s': dtype %s is not supported by recap (F32, F16, BF16, I32, I64)",
          c->files[found->file].path, w->keys[i], found->entry->dtype_name);
      ok = false;
    }
  }
  if (ok && key && !(t->init.key = strdup(w->keys[0]))) L->oom = true;
  return ok;
}

/* `init: file`: the path (a raw file, a .safetensors file, an index, a folder) or the spec's
 * checkpoint, the keys and the transforms. */
static bool parse_file_init(loader *L, const recap__yaml_node *v, recap__spec_tensor *t,
                            const char *what) {
  recap__spec_weights *w = &t->weights;
  const recap__yaml_node *p = recap__spec_lookup(v, "path"), *key = recap__spec_lookup(v, "key");
  if (p)
    t->init_pos = p->pos;
  else if (key)
    t->init_pos = key->pos;
  const char *path = NULL;
  bool ok = true;
  if (!p && !L->spec->checkpoint) {
    /* A `checkpoint:` that failed to open was reported once, there. */
    if (!L->checkpoint_given)
      ERR(L, v->pos, "%s: init file needs a path (or a key into the spec's checkpoint:)", what);
    return false;
  }
  if (p) {
    if (!recap__spec_get_string(L, p, what, &path)) return false;
    if (!path[0]) {
      ERR(L, p->pos, "%s: path is empty", what);
      return false;
    }
    if (!(t->init.path = resolve_file(L, p, path, true))) return false;
    if (is_checkpoint_path(t->init.path) && !(w->checkpoint = open_checkpoint(L, p, t->init.path)))
      return false;
  } else {
    w->checkpoint = L->spec->checkpoint;
    if (!(t->init.path = strdup(w->checkpoint->path))) {
      L->oom = true;
      return false;
    }
  }
  if (!parse_file_transforms(L, v, what, key, w)) ok = false;
  if (!w->checkpoint) {
    /* A raw file has no names, dtypes or shapes to read it by. */
    static const char *const needs_header[] = {"key",  "transpose", "cast", "concat",
                                               "rows", "cols",      NULL};
    for (int i = 0; needs_header[i]; ++i) {
      const recap__yaml_node *kn = recap__spec_lookup(v, needs_header[i]);
      if (!kn) continue;
      ERR(L, kn->pos,
          "%s: %s %s a tensor inside a .safetensors file (or a checkpoint index or folder); "
          "'%.200s' is a raw file",
          what, needs_header[i], i == 0 ? "names" : "applies to", path);
      ok = false;
    }
    return ok;
  }
  return parse_file_keys(L, key, t, what) && ok;
}

static void parse_tensor(loader *L, const recap__yaml_node *k, const recap__yaml_node *v,
                         recap__spec_tensor *t) {
  static const char *const keys[] = {"shape", "role",   "dtype", "init", "mean", "std",
                                     "low",   "high",   "value", "path", "key",  "transpose",
                                     "cast",  "concat", "rows",  "cols", NULL};
  const recap__spec *spec = L->spec;
  char what[MAX_NAME_BYTES + 32];
  snprintf(what, sizeof what, "tensor '%s'", t->name);
  t->pos = k->pos;
  t->producer = -1;
  t->dtype = spec->dtype;
  if (!recap__spec_expect_kind(L, v, RECAP_YAML_MAPPING, what)) return;
  recap__spec_check_keys(L, v, keys, what);
  bool ok = true;

  const recap__yaml_node *role = recap__spec_lookup(v, "role");
  if (!role) {
    ERR(L, v->pos, "%s needs a role (input, param, state or scalar)", what);
    ok = false;
  } else if (!recap__spec_is_scalar(role) || recap__spec_find_word(role_names, role->text) < 0) {
    ERR(L, role->pos, "%s: role must be input, param, state or scalar, got %s%s%.64s%s", what,
        recap__yaml_describe(role), recap__spec_is_scalar(role) ? " '" : "",
        recap__spec_is_scalar(role) ? role->text : "", recap__spec_is_scalar(role) ? "'" : "");
    ok = false;
  } else {
    static const recap_tensor_role roles[] = {RECAP_ROLE_INPUT, RECAP_ROLE_PARAM, RECAP_ROLE_STATE,
                                              RECAP_ROLE_SCALAR};
    t->role = roles[recap__spec_find_word(role_names, role->text)];
  }
  bool scalar = ok && t->role == RECAP_ROLE_SCALAR;
  if (scalar) t->dtype = RECAP_DTYPE_I32;

  const recap__yaml_node *dt = recap__spec_lookup(v, "dtype");
  if (dt && !recap__spec_get_dtype(L, dt, what, false, &t->dtype)) ok = false;

  const recap__yaml_node *shape = recap__spec_lookup(v, "shape");
  int ndim = 0;
  if (!shape) {
    if (scalar) {
      ndim = 1;
      t->shape[0] = (recap__spec_size){.value = 1, .dim = -1, .pos = t->pos};
    } else {
      ERR(L, v->pos, "%s needs a shape (a list of 1 to %d sizes)", what, RECAP_MAX_DIMS);
      ok = false;
    }
  } else if (!recap__spec_expect_kind(L, shape, RECAP_YAML_SEQUENCE, what)) {
    ok = false;
  } else if (shape->count < 1 || shape->count > RECAP_MAX_DIMS) {
    ERR(L, shape->pos, "%s: a shape has 1 to %d sizes, got %zu", what, RECAP_MAX_DIMS,
        shape->count);
    ok = false;
  } else {
    for (size_t i = 0; i < shape->count; ++i)
      if (!recap__spec_get_size(L, shape->items[i], what, 1, &t->shape[i])) ok = false;
    ndim = (int)shape->count;
    /* Persistent tensors are allocated once, for the largest bucket: a smaller bucket's
     * tensor must be a prefix of it, so the bucketed dim (or an alias of it) may only lead. */
    if (ok && role && spec->bucket_dim >= 0 &&
        (t->role == RECAP_ROLE_PARAM || t->role == RECAP_ROLE_STATE)) {
      for (int i = 1; i < ndim; ++i) {
        int dim = t->shape[i].dim;
        if (dim < 0 || (dim != spec->bucket_dim && spec->dims[dim].alias != spec->bucket_dim))
          continue;
        char which[2 * MAX_NAME_BYTES + 32];
        if (dim == spec->bucket_dim)
          snprintf(which, sizeof which, "'%s'", spec->dims[dim].name);
        else
          snprintf(which, sizeof which, "'%s' (an alias of '%s')", spec->dims[dim].name,
                   spec->dims[spec->bucket_dim].name);
        ERR(L, t->shape[i].pos, "%s: the bucketed dim %s may only be the first axis of a %s", what,
            which, role->text);
        ok = false;
      }
    }
  }

  /* init: the kind, then the keys that belong to it. */
  recap__tensor_init *init = &t->init;
  const recap__yaml_node *in = recap__spec_lookup(v, "init");
  t->init_pos = in ? in->pos : t->pos;
  if (in) {
    int w = recap__spec_is_scalar(in) ? recap__spec_find_word(init_names, in->text) : -1;
    if (w < 0) {
      ERR(L, in->pos,
          "%s: init must be zeros, ones, normal, uniform, file or value, got %s%s%.64s%s", what,
          recap__yaml_describe(in), recap__spec_is_scalar(in) ? " '" : "",
          recap__spec_is_scalar(in) ? in->text : "", recap__spec_is_scalar(in) ? "'" : "");
      ok = false;
    } else {
      init->kind = init_kinds[w];
    }
  } else if (recap__spec_lookup(v, "path") || recap__spec_lookup(v, "key")) {
    init->kind = RECAP_INIT_FILE;
  } else if (recap__spec_lookup(v, "value")) {
    init->kind = RECAP_INIT_VALUE;
  } else if (role && ok) {
    switch (t->role) {
      case RECAP_ROLE_PARAM:
        init->kind = RECAP_INIT_NORMAL;
        break;
      case RECAP_ROLE_INPUT:
        /* Integer inputs are ids and positions: zero is valid for every one of them, and a
         * normal draw is not an integer. */
        init->kind = recap_dtype_is_float(t->dtype) ? RECAP_INIT_NORMAL : RECAP_INIT_ZEROS;
        break;
      case RECAP_ROLE_STATE:
        init->kind = RECAP_INIT_ZEROS;
        break;
      default:
        init->kind = RECAP_INIT_VALUE;
        break;
    }
  }
  init->std = t->role == RECAP_ROLE_PARAM ? 0.02 : 1.0;
  init->high = 1.0;
  /* The random fills draw floats; integer tensors take zeros, ones, value or a file. */
  if ((init->kind == RECAP_INIT_NORMAL || init->kind == RECAP_INIT_UNIFORM) &&
      !recap_dtype_is_float(t->dtype)) {
    ERR(L, in ? in->pos : t->pos,
        "%s: init %s needs a float dtype, not %s (integer tensors: zeros, ones, value or file)",
        what, init->kind == RECAP_INIT_NORMAL ? "normal" : "uniform", recap_dtype_name(t->dtype));
    ok = false;
  }
  static const struct {
    const char *key;
    recap_init_kind kind;
  } owned[] = {
      {"mean", RECAP_INIT_NORMAL},  {"std", RECAP_INIT_NORMAL},     {"low", RECAP_INIT_UNIFORM},
      {"high", RECAP_INIT_UNIFORM}, {"value", RECAP_INIT_VALUE},    {"path", RECAP_INIT_FILE},
      {"key", RECAP_INIT_FILE},     {"transpose", RECAP_INIT_FILE}, {"cast", RECAP_INIT_FILE},
      {"concat", RECAP_INIT_FILE},  {"rows", RECAP_INIT_FILE},      {"cols", RECAP_INIT_FILE}};
  for (size_t i = 0; i < sizeof owned / sizeof owned[0]; ++i) {
    const recap__yaml_node *kn = recap__spec_lookup_key(v, owned[i].key),
                           *vn = recap__spec_lookup(v, owned[i].key);
    if (!kn) continue;
    if (init->kind != owned[i].kind) {
      ERR(L, kn->pos, "%s: key '%s' belongs to init: %s", what, owned[i].key,
          init_names[owned[i].kind - RECAP_INIT_ZEROS]);
      ok = false;
      continue;
    }
    double *slot = NULL;
    if (!strcmp(owned[i].key, "mean")) slot = &init->mean;
    if (!strcmp(owned[i].key, "std")) slot = &init->std;
    if (!strcmp(owned[i].key, "low")) slot = &init->low;
    if (!strcmp(owned[i].key, "high")) slot = &init->high;
    if (!strcmp(owned[i].key, "value")) slot = &init->value;
    if (slot) {
      char key_what[MAX_NAME_BYTES + 48];
      snprintf(key_what, sizeof key_what, "%s: %s", what, owned[i].key);
      char why[128];
      if (!recap__spec_get_float(L, vn, key_what, slot)) {
        ok = false;
      } else if (!isfinite(*slot)) {
        ERR(L, vn->pos, "%s must be finite", key_what);
        ok = false;
      } else if ((slot == &init->value || recap_dtype_is_float(t->dtype)) &&
                 !recap__value_fits_dtype(*slot, t->dtype, why, sizeof why)) {
        /* Checked in the tensor's type, not in double: 1e10 is finite, its f16 is inf. */
        ERR(L, vn->pos, "%s: %g %s", key_what, *slot, why);
        ok = false;
      }
    }
  }
  if (init->kind == RECAP_INIT_NORMAL && init->std < 0) {
    ERR(L, recap__spec_lookup(v, "std")->pos, "%s: std must be >= 0, got %g", what, init->std);
    ok = false;
  }
  if (init->kind == RECAP_INIT_UNIFORM && !(init->low < init->high)) {
    ERR(L, (recap__spec_lookup(v, "low") ? recap__spec_lookup(v, "low") : v)->pos,
        "%s: uniform needs low < high, got low %g, high %g", what, init->low, init->high);
    ok = false;
  }
  if (init->kind == RECAP_INIT_FILE && !parse_file_init(L, v, t, what)) ok = false;
  if (ok) t->ndim = ndim;
}

void recap__spec_parse_tensors(loader *L, const recap__yaml_node *node) {
  recap__spec *spec = L->spec;
  if (!recap__spec_expect_kind(L, node, RECAP_YAML_MAPPING, "tensors")) return;
  size_t max = spec->options.max_tensors;
  if (node->count > max) {
    ERR(L, node->pos, "the spec declares %zu tensors, more than the limit of %zu", node->count,
        max);
    return;
  }
  recap__spec_check_keys(L, node, NULL, "tensors");
  for (size_t i = 0; i < node->count; ++i) {
    const recap__yaml_node *k = node->keys[i];
    recap__spec_tensor *t = &spec->tensors[spec->num_tensors];
    if (!recap__spec_get_name(L, k, "tensor name", &t->name)) continue;
    int previous;
    if (!recap__names_put(&L->tensors, t->name, (int)spec->num_tensors, &previous)) {
      L->oom = true;
      return;
    }
    if (previous >= 0) continue; /* duplicate key: reported */
    spec->num_tensors++;
    parse_tensor(L, k, node->items[i], t);
    if (L->oom) return;
  }
  spec->num_declared = spec->num_tensors;
}
