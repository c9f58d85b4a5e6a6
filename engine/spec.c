/*
 * spec.c: a spec's YAML tree (yaml_ast.h) -> the checked recap__spec of spec.h.
 *
 * One pass over the tree records every problem it finds and keeps going: a bad entry is
 * marked (an op with def NULL or ok false, a tensor with ndim 0, a reference with index -1)
 * so later checks skip it instead of reporting its consequences. Then every bucket's IR is
 * built (ir.c), which checks shapes, dtypes and sizes through the op registry.
 */
#include "engine/spec.h"

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

#include "engine/names.h"
#include "kernels/expr.h"
#include "kernels/infer.h"
#include "runtime/error.h"
#include "runtime/file.h"

enum {
  DEFAULT_MAX_TENSORS = 100000,
  DEFAULT_MAX_OPS = 100000,
  MAX_STREAMS = 64,
  MAX_NAME_BYTES = 256,
  MAX_WARMUP = 10000,
  MAX_ITERS = 10000000,
};
#define MAX_SIZE RECAP__SPEC_MAX_SIZE

typedef struct {
  recap__spec *spec;
  recap__diag *diag;
  bool oom;
  /* The first problem with the caller's dim overrides (options.dims): an invalid argument, not
   * an error in the spec, so it is reported alone and nothing else is checked. */
  char bad_override[320];
  recap__names dims;    /* dim name -> index */
  recap__names tensors; /* tensor name -> index (declared and produced so far) */
  recap__names future;  /* op output name -> op index (all ops) */
  /* The spec's text, to place errors inside an `expr:` string (NULL: at the string). */
  const char *text;
  size_t text_len;
} loader;

#define ERR(L, pos, ...) recap__diag_error((L)->diag, (pos), __VA_ARGS__)

/* ---- scalars --------------------------------------------------------------------------- */

static bool is_scalar(const recap__yaml_node *n) {
  return n && n->kind == RECAP_YAML_SCALAR && !recap__yaml_is_null(n);
}

/* A name: letters, digits and _ . - / :, starting with a letter or _. */
static bool valid_name(const recap__yaml_node *n) {
  if (!is_scalar(n) || n->len == 0 || n->len > MAX_NAME_BYTES || strlen(n->text) != n->len)
    return false;
  const char *s = n->text;
  if (!(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) return false;
  for (; *s; ++s) {
    char c = *s;
    bool ok = c == '_' || c == '.' || c == '-' || c == '/' || c == ':' || (c >= 'a' && c <= 'z') ||
              (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

static bool get_name(loader *L, const recap__yaml_node *n, const char *what, const char **out) {
  if (!valid_name(n)) {
    if (is_scalar(n))
      ERR(L, n->pos,
          "%s '%.64s' is not a valid name (letters, digits, '_', '.', '-', '/', ':', "
          "starting with a letter or '_', at most %d bytes)",
          what, n->text, MAX_NAME_BYTES);
    else
      ERR(L, n->pos, "%s: expected a name, got %s", what, recap__yaml_describe(n));
    return false;
  }
  *out = n->text;
  return true;
}

static bool get_string(loader *L, const recap__yaml_node *n, const char *what, const char **out) {
  if (!is_scalar(n) || strlen(n->text) != n->len) {
    ERR(L, n->pos, "%s: expected a string, got %s", what,
        is_scalar(n) ? "a string holding a NUL byte" : recap__yaml_describe(n));
    return false;
  }
  *out = n->text;
  return true;
}

/* Decimal integers with an optional sign (YAML 1.1's other forms are refused as ambiguous). */
typedef enum { INT_OK, INT_NOT_INT, INT_OVERFLOW } int_parse;

static int_parse parse_int(const recap__yaml_node *n, int64_t *out) {
  if (!is_scalar(n) || !n->plain) return INT_NOT_INT;
  const char *s = n->text;
  bool neg = false;
  if (*s == '+' || *s == '-') neg = *s++ == '-';
  if (!*s) return INT_NOT_INT;
  uint64_t v = 0;
  bool overflow = false;
  for (; *s; ++s) {
    if (*s < '0' || *s > '9') return INT_NOT_INT;
    unsigned d = (unsigned)(*s - '0');
    if (v > (UINT64_MAX - d) / 10)
      overflow = true;
    else
      v = v * 10 + d;
  }
  if (overflow || v > (uint64_t)INT64_MAX + (neg ? 1u : 0u)) return INT_OVERFLOW;
  *out = neg ? (int64_t)(0 - v) : (int64_t)v;
  return INT_OK;
}

static bool get_int(loader *L, const recap__yaml_node *n, const char *what, int64_t lo, int64_t hi,
                    int64_t *out) {
  int64_t v;
  switch (parse_int(n, &v)) {
    case INT_NOT_INT:
      ERR(L, n->pos, "%s: expected an integer, got %s%s%.64s%s", what, recap__yaml_describe(n),
          is_scalar(n) ? " '" : "", is_scalar(n) ? n->text : "", is_scalar(n) ? "'" : "");
      return false;
    case INT_OVERFLOW:
      ERR(L, n->pos, "%s: %.64s does not fit in 64 bits", what, n->text);
      return false;
    case INT_OK:
      break;
  }
  if (v < lo || v > hi) {
    ERR(L, n->pos, "%s must be between %lld and %lld, got %lld", what, (long long)lo, (long long)hi,
        (long long)v);
    return false;
  }
  *out = v;
  return true;
}

static bool get_float(loader *L, const recap__yaml_node *n, const char *what, double *out) {
  if (is_scalar(n) && n->plain) {
    const char *s = n->text;
    if (!strcmp(s, ".inf") || !strcmp(s, ".Inf") || !strcmp(s, "+.inf"))
      return *out = INFINITY, true;
    if (!strcmp(s, "-.inf") || !strcmp(s, "-.Inf")) return *out = -INFINITY, true;
    if (!strcmp(s, ".nan") || !strcmp(s, ".NaN")) return *out = NAN, true;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    bool digits = strpbrk(s, "0123456789") != NULL && !strpbrk(s, "xXnN");
    if (end != s && *end == '\0' && digits) {
      if (errno == ERANGE && isinf(v)) {
        ERR(L, n->pos, "%s: %.64s is out of the range of a double", what, s);
        return false;
      }
      *out = v;
      return true;
    }
  }
  ERR(L, n->pos, "%s: expected a number, got %s%s%.64s%s", what, recap__yaml_describe(n),
      is_scalar(n) ? " '" : "", is_scalar(n) ? n->text : "", is_scalar(n) ? "'" : "");
  return false;
}

static bool get_bool(loader *L, const recap__yaml_node *n, const char *what, int *out) {
  if (is_scalar(n) && n->plain) {
    const char *s = n->text;
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) return *out = 1, true;
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) return *out = 0, true;
  }
  ERR(L, n->pos, "%s: expected true or false, got %s", what, recap__yaml_describe(n));
  return false;
}

static bool get_dtype(loader *L, const recap__yaml_node *n, const char *what, bool float_only,
                      recap_dtype *out) {
  recap_dtype d;
  if (!is_scalar(n) || recap_dtype_parse(n->text, &d) != RECAP_OK) {
    ERR(L, n->pos, "%s: expected a dtype (%s), got %s%s%.64s%s", what,
        float_only ? "f32, f16 or bf16" : "f32, f16, bf16, i32 or i64", recap__yaml_describe(n),
        is_scalar(n) ? " '" : "", is_scalar(n) ? n->text : "", is_scalar(n) ? "'" : "");
    return false;
  }
  if (float_only && !recap_dtype_is_float(d)) {
    ERR(L, n->pos, "%s: expected a float dtype (f32, f16 or bf16), got %s", what, n->text);
    return false;
  }
  *out = d;
  return true;
}

/* A size: a literal integer (>= min) or a dim's name. */
static bool get_size(loader *L, const recap__yaml_node *n, const char *what, int64_t min,
                     recap__spec_size *out) {
  out->pos = n->pos;
  out->dim = -1;
  int64_t v;
  int_parse p = parse_int(n, &v);
  if (p == INT_OK) {
    if (v < min || v >= MAX_SIZE) {
      if (min >= 1)
        ERR(L, n->pos, "%s: %lld is not a positive integer below 2^62", what, (long long)v);
      else
        ERR(L, n->pos, "%s: %lld is out of range (at least %lld, below 2^62)", what, (long long)v,
            (long long)min);
      return false;
    }
    out->value = v;
    return true;
  }
  if (p == INT_OVERFLOW) {
    ERR(L, n->pos, "%s: %.64s does not fit in 64 bits", what, n->text);
    return false;
  }
  if (valid_name(n)) {
    int d = recap__names_get(&L->dims, n->text);
    if (d < 0) {
      ERR(L, n->pos, "%s: unknown dim '%s' (declare it under dims:)", what, n->text);
      return false;
    }
    out->dim = d;
    out->value = 0;
    return true;
  }
  ERR(L, n->pos, "%s: expected an integer or a dim name, got %s%s%.64s%s", what,
      recap__yaml_describe(n), is_scalar(n) ? " '" : "", is_scalar(n) ? n->text : "",
      is_scalar(n) ? "'" : "");
  return false;
}

/* ---- mappings -------------------------------------------------------------------------- */

static const recap__yaml_node *lookup(const recap__yaml_node *map, const char *key) {
  for (size_t i = 0; i < map->count; ++i)
    if (strcmp(map->keys[i]->text, key) == 0) return map->items[i];
  return NULL;
}

static const recap__yaml_node *lookup_key(const recap__yaml_node *map, const char *key) {
  for (size_t i = 0; i < map->count; ++i)
    if (strcmp(map->keys[i]->text, key) == 0) return map->keys[i];
  return NULL;
}

/* "a, b, c" into buf. */
static void join_names(const char *const *names, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; names && names[i]; ++i) {
    int w = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", names[i]);
    if (w < 0 || (size_t)w >= size - used) return;
    used += (size_t)w;
  }
}

/* Reports keys that are not in `allowed` (NULL-terminated) and keys given twice. */
static void check_keys(loader *L, const recap__yaml_node *map, const char *const *allowed,
                       const char *context) {
  char list[512];
  join_names(allowed, list, sizeof list);
  recap__names seen = {0};
  for (size_t i = 0; i < map->count; ++i) {
    const recap__yaml_node *k = map->keys[i];
    int previous;
    if (!recap__names_put(&seen, k->text, (int)i, &previous)) {
      L->oom = true;
      break;
    }
    if (previous >= 0) {
      ERR(L, k->pos, "duplicate key '%.64s' in %s (first given at line %d)", k->text, context,
          map->keys[previous]->pos.line);
      continue;
    }
    if (!allowed) continue;
    bool ok = false;
    for (size_t a = 0; allowed[a] && !ok; ++a) ok = strcmp(allowed[a], k->text) == 0;
    if (!ok) ERR(L, k->pos, "unknown key '%.64s' in %s (accepted: %s)", k->text, context, list);
  }
  recap__names_free(&seen);
}

static bool expect_kind(loader *L, const recap__yaml_node *n, recap_yaml_kind kind,
                        const char *what) {
  if (n && n->kind == kind) return true;
  ERR(L, n->pos, "%s: expected %s, got %s", what,
      kind == RECAP_YAML_MAPPING ? "a mapping" : "a sequence", recap__yaml_describe(n));
  return false;
}

/* ---- top-level keys -------------------------------------------------------------------- */

static void parse_dims(loader *L, const recap__yaml_node *node) {
  recap__spec *spec = L->spec;
  if (!expect_kind(L, node, RECAP_YAML_MAPPING, "dims")) return;
  check_keys(L, node, NULL, "dims");
  spec->dims = calloc(node->count ? node->count : 1, sizeof *spec->dims);
  if (!spec->dims) {
    L->oom = true;
    return;
  }
  for (size_t i = 0; i < node->count; ++i) {
    const recap__yaml_node *k = node->keys[i], *v = node->items[i];
    recap__spec_dim *d = &spec->dims[spec->num_dims];
    if (!get_name(L, k, "dim name", &d->name)) continue;
    int previous;
    if (!recap__names_put(&L->dims, d->name, (int)spec->num_dims, &previous)) {
      L->oom = true;
      return;
    }
    if (previous >= 0) continue; /* check_keys reported it */
    d->pos = k->pos;
    char what[MAX_NAME_BYTES + 32];
    snprintf(what, sizeof what, "dim '%s'", d->name);
    size_t count = v->kind == RECAP_YAML_SEQUENCE ? v->count : 1;
    d->bucketed = v->kind == RECAP_YAML_SEQUENCE;
    if (d->bucketed && count == 0) {
      ERR(L, v->pos, "%s: a bucket list needs at least one value", what);
    } else if (count > RECAP_MAX_BUCKETS) {
      ERR(L, v->pos, "%s has %zu buckets, more than the limit of %d", what, count,
          RECAP_MAX_BUCKETS);
    } else if (v->kind == RECAP_YAML_MAPPING) {
      ERR(L, v->pos,
          "%s: expected a positive integer or a list of them (buckets), got a "
          "mapping",
          what);
    } else {
      d->values = calloc(count, sizeof *d->values);
      if (!d->values) {
        L->oom = true;
        return;
      }
      bool ok = true;
      for (size_t j = 0; j < count; ++j) {
        const recap__yaml_node *e = d->bucketed ? v->items[j] : v;
        int64_t x;
        if (!get_int(L, e, what, 1, MAX_SIZE - 1, &x)) {
          ok = false;
          continue;
        }
        if (j > 0 && ok && x <= d->values[j - 1]) {
          ERR(L, e->pos, "%s: bucket values must be strictly ascending (%lld follows %lld)", what,
              (long long)x, (long long)d->values[j - 1]);
          ok = false;
        }
        d->values[j] = x;
      }
      if (ok) d->count = count;
    }
    if (d->bucketed && d->count) {
      if (spec->bucket_dim >= 0)
        ERR(L, k->pos,
            "dim '%s' has buckets, but dim '%s' already does (one bucketed dim per "
            "spec)",
            d->name, spec->dims[spec->bucket_dim].name);
      else
        spec->bucket_dim = (int)spec->num_dims;
    }
    spec->num_dims++;
  }
}

#define OVERRIDE_ERR(L, ...) snprintf((L)->bad_override, sizeof(L)->bad_override, __VA_ARGS__)

/* Applies one "NAME=V[,V...]" from outside the spec (options.dims), with the rules and limits
 * of dims written in the spec. */
static void override_dim(loader *L, const char *text) {
  recap__spec *spec = L->spec;
  const char *eq = strchr(text, '=');
  size_t n = eq ? (size_t)(eq - text) : 0;
  int index = -1;
  for (size_t i = 0; eq && i < spec->num_dims; ++i)
    if (strlen(spec->dims[i].name) == n && strncmp(spec->dims[i].name, text, n) == 0)
      index = (int)i;
  if (!eq) {
    OVERRIDE_ERR(L, "dim override '%s': expected NAME=VALUE", text);
    return;
  }
  if (index < 0) {
    char names[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < spec->num_dims && used < sizeof names - 64; ++i)
      used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                               spec->dims[i].name);
    OVERRIDE_ERR(L, "dim override '%s': the spec declares no dim '%.*s' (its dims: %s)", text,
                 (int)n, text, spec->num_dims ? names : "none");
    return;
  }
  recap__spec_dim *d = &spec->dims[index];
  size_t given = 1;
  for (const char *c = eq + 1; *c; ++c) given += *c == ',';
  if (given > RECAP_MAX_BUCKETS) {
    OVERRIDE_ERR(L, "dim override for '%s' has %zu buckets, more than the limit of %d", d->name,
                 given, RECAP_MAX_BUCKETS);
    return;
  }
  int64_t values[RECAP_MAX_BUCKETS];
  size_t count = 0;
  for (const char *v = eq + 1;;) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || (*end != ',' && *end != '\0')) {
      OVERRIDE_ERR(L,
                   "dim override '%s': expected NAME=VALUE or NAME=V1,V2,... with decimal integers",
                   text);
      return;
    }
    if (errno == ERANGE || x < 1 || x >= MAX_SIZE) {
      OVERRIDE_ERR(L, "dim override '%s': %.*s is not a positive integer below 2^62", text,
                   (int)(end - v), v);
      return;
    }
    if (count > 0 && x <= values[count - 1]) {
      OVERRIDE_ERR(
          L, "dim override '%s': bucket values must be strictly ascending (%lld follows %lld)",
          text, x, (long long)values[count - 1]);
      return;
    }
    values[count++] = x;
    if (*end == '\0') break;
    v = end + 1;
  }
  if (spec->options.select_batch && count == 1 && index == spec->bucket_dim) {
    spec->run_batch = values[0];
    if (!spec->options.grow_batch || values[0] <= d->values[d->count - 1]) return;
  }
  if (count > 1 && spec->bucket_dim >= 0 && spec->bucket_dim != index) {
    OVERRIDE_ERR(L, "dim override '%s': dim '%s' already has buckets (one dim at most)", text,
                 spec->dims[spec->bucket_dim].name);
    return;
  }
  int64_t *copy = calloc(count, sizeof *copy);
  if (!copy) {
    L->oom = true;
    return;
  }
  memcpy(copy, values, count * sizeof *copy);
  free(d->values);
  d->values = copy;
  d->count = count;
  if (count > 1) {
    d->bucketed = true;
    spec->bucket_dim = index;
  }
}

static const char *const role_names[] = {"input", "param", "state", "scalar", NULL};
static const char *const init_names[] = {"zeros", "ones",  "normal", "uniform",
                                         "file",  "value", NULL};
static const recap_init_kind init_kinds[] = {RECAP_INIT_ZEROS,   RECAP_INIT_ONES, RECAP_INIT_NORMAL,
                                             RECAP_INIT_UNIFORM, RECAP_INIT_FILE, RECAP_INIT_VALUE};

static int find_word(const char *const *words, const char *s) {
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

static bool inside(const char *path, const char *base) {
  size_t n = strlen(base);
  if (n == 1 && base[0] == '/') return true;
  return strncmp(path, base, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* Resolves `path` against the spec's folder, checks it against base_dir and that it names a
 * readable regular file. Returns a malloc'd absolute path, or NULL (error reported). */
static char *resolve_file(loader *L, const recap__yaml_node *n, const char *path) {
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
    bool ok = inside(full, base);
    /* A symbolic link inside the base may still point outside it. */
    char *real = ok ? realpath(full, NULL) : NULL;
    if (ok && real) ok = inside(real, base);
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
  if (!S_ISREG(st.st_mode)) {
    ERR(L, n->pos, "file '%.200s' (%s) is not a regular file", path, full);
    free(full);
    return NULL;
  }
  return full;
}

/* ---- tensors --------------------------------------------------------------------------- */

static void parse_tensor(loader *L, const recap__yaml_node *k, const recap__yaml_node *v,
                         recap__spec_tensor *t) {
  static const char *const keys[] = {"shape", "role", "dtype", "init", "mean", "std",
                                     "low",   "high", "value", "path", "key",  NULL};
  const recap__spec *spec = L->spec;
  char what[MAX_NAME_BYTES + 32];
  snprintf(what, sizeof what, "tensor '%s'", t->name);
  t->pos = k->pos;
  t->producer = -1;
  t->dtype = spec->dtype;
  if (!expect_kind(L, v, RECAP_YAML_MAPPING, what)) return;
  check_keys(L, v, keys, what);
  bool ok = true;

  const recap__yaml_node *role = lookup(v, "role");
  if (!role) {
    ERR(L, v->pos, "%s needs a role (input, param, state or scalar)", what);
    ok = false;
  } else if (!is_scalar(role) || find_word(role_names, role->text) < 0) {
    ERR(L, role->pos, "%s: role must be input, param, state or scalar, got %s%s%.64s%s", what,
        recap__yaml_describe(role), is_scalar(role) ? " '" : "", is_scalar(role) ? role->text : "",
        is_scalar(role) ? "'" : "");
    ok = false;
  } else {
    static const recap_tensor_role roles[] = {RECAP_ROLE_INPUT, RECAP_ROLE_PARAM, RECAP_ROLE_STATE,
                                              RECAP_ROLE_SCALAR};
    t->role = roles[find_word(role_names, role->text)];
  }
  bool scalar = ok && t->role == RECAP_ROLE_SCALAR;
  if (scalar) t->dtype = RECAP_DTYPE_I32;

  const recap__yaml_node *dt = lookup(v, "dtype");
  if (dt && !get_dtype(L, dt, what, false, &t->dtype)) ok = false;

  const recap__yaml_node *shape = lookup(v, "shape");
  int ndim = 0;
  if (!shape) {
    if (scalar) {
      ndim = 1;
      t->shape[0] = (recap__spec_size){.value = 1, .dim = -1, .pos = t->pos};
    } else {
      ERR(L, v->pos, "%s needs a shape (a list of 1 to %d sizes)", what, RECAP_MAX_DIMS);
      ok = false;
    }
  } else if (!expect_kind(L, shape, RECAP_YAML_SEQUENCE, what)) {
    ok = false;
  } else if (shape->count < 1 || shape->count > RECAP_MAX_DIMS) {
    ERR(L, shape->pos, "%s: a shape has 1 to %d sizes, got %zu", what, RECAP_MAX_DIMS,
        shape->count);
    ok = false;
  } else {
    for (size_t i = 0; i < shape->count; ++i)
      if (!get_size(L, shape->items[i], what, 1, &t->shape[i])) ok = false;
    ndim = (int)shape->count;
    /* Persistent tensors are allocated once, for the largest bucket: a smaller bucket's
     * tensor must be a prefix of it, so the bucketed dim may only lead. */
    if (ok && role && (t->role == RECAP_ROLE_PARAM || t->role == RECAP_ROLE_STATE)) {
      for (int i = 1; i < ndim; ++i)
        if (t->shape[i].dim >= 0 && t->shape[i].dim == spec->bucket_dim) {
          ERR(L, t->shape[i].pos,
              "%s: the bucketed dim '%s' may only be the first axis of a "
              "%s",
              what, spec->dims[spec->bucket_dim].name, role->text);
          ok = false;
        }
    }
  }

  /* init: the kind, then the keys that belong to it. */
  recap__tensor_init *init = &t->init;
  const recap__yaml_node *in = lookup(v, "init");
  t->init_pos = in ? in->pos : t->pos;
  if (in) {
    int w = is_scalar(in) ? find_word(init_names, in->text) : -1;
    if (w < 0) {
      ERR(L, in->pos,
          "%s: init must be zeros, ones, normal, uniform, file or value, got %s%s%.64s%s", what,
          recap__yaml_describe(in), is_scalar(in) ? " '" : "", is_scalar(in) ? in->text : "",
          is_scalar(in) ? "'" : "");
      ok = false;
    } else {
      init->kind = init_kinds[w];
    }
  } else if (lookup(v, "path")) {
    init->kind = RECAP_INIT_FILE;
  } else if (lookup(v, "value")) {
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
  } owned[] = {{"mean", RECAP_INIT_NORMAL}, {"std", RECAP_INIT_NORMAL},
               {"low", RECAP_INIT_UNIFORM}, {"high", RECAP_INIT_UNIFORM},
               {"value", RECAP_INIT_VALUE}, {"path", RECAP_INIT_FILE},
               {"key", RECAP_INIT_FILE}};
  for (size_t i = 0; i < sizeof owned / sizeof owned[0]; ++i) {
    const recap__yaml_node *kn = lookup_key(v, owned[i].key), *vn = lookup(v, owned[i].key);
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
      if (!get_float(L, vn, key_what, slot)) {
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
    ERR(L, lookup(v, "std")->pos, "%s: std must be >= 0, got %g", what, init->std);
    ok = false;
  }
  if (init->kind == RECAP_INIT_UNIFORM && !(init->low < init->high)) {
    ERR(L, (lookup(v, "low") ? lookup(v, "low") : v)->pos,
        "%s: uniform needs low < high, got low %g, high %g", what, init->low, init->high);
    ok = false;
  }
  if (init->kind == RECAP_INIT_FILE) {
    const recap__yaml_node *p = lookup(v, "path"), *key = lookup(v, "key");
    const char *path = NULL, *key_text = NULL;
    if (p) t->init_pos = p->pos;
    if (!p) {
      ERR(L, v->pos, "%s: init file needs a path", what);
      ok = false;
    } else if (get_string(L, p, what, &path)) {
      if (!path[0]) {
        ERR(L, p->pos, "%s: path is empty", what);
        ok = false;
      } else {
        init->path = resolve_file(L, p, path);
        if (!init->path) ok = false;
      }
    } else {
      ok = false;
    }
    if (key && get_string(L, key, what, &key_text)) {
      size_t n = path ? strlen(path) : 0;
      if (n < 12 || strcmp(path + n - 12, ".safetensors") != 0) {
        ERR(L, key->pos,
            "%s: key names a tensor inside a .safetensors file; '%.200s' is a raw "
            "file",
            what, path ? path : "");
        ok = false;
      } else if (!(init->key = strdup(key_text))) {
        L->oom = true;
      }
    } else if (key) {
      ok = false;
    }
  }
  if (ok) t->ndim = ndim;
}

static void parse_tensors(loader *L, const recap__yaml_node *node) {
  recap__spec *spec = L->spec;
  if (!expect_kind(L, node, RECAP_YAML_MAPPING, "tensors")) return;
  size_t max = spec->options.max_tensors;
  if (node->count > max) {
    ERR(L, node->pos, "the spec declares %zu tensors, more than the limit of %zu", node->count,
        max);
    return;
  }
  check_keys(L, node, NULL, "tensors");
  for (size_t i = 0; i < node->count; ++i) {
    const recap__yaml_node *k = node->keys[i];
    recap__spec_tensor *t = &spec->tensors[spec->num_tensors];
    if (!get_name(L, k, "tensor name", &t->name)) continue;
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

/* ---- ops ------------------------------------------------------------------------------- */

static const char *const op_keys[] = {"op", "in", "out", "name", "stream", "shape", "dtype", NULL};

static void parse_attr(loader *L, recap__spec_op *op, const recap_attr_def *a,
                       const recap__yaml_node *v, const char *what) {
  char *field = (char *)&op->attrs + a->offset;
  char attr_what[MAX_NAME_BYTES + 160];
  snprintf(attr_what, sizeof attr_what, "%s: attribute '%s'", what, a->name);
  switch (a->kind) {
    case RECAP_ATTR_FLOAT:
      if (!get_float(L, v, attr_what, (double *)field)) op->ok = false;
      return;
    case RECAP_ATTR_BOOL:
      if (!get_bool(L, v, attr_what, (int *)field)) op->ok = false;
      return;
    case RECAP_ATTR_DTYPE:
      if (!get_dtype(L, v, attr_what, false, (recap_dtype *)field)) op->ok = false;
      return;
    case RECAP_ATTR_ACTIVATION: {
      static const char *const acts[] = {"none", "relu",    "gelu", "gelu_tanh",
                                         "silu", "sigmoid", "tanh", NULL};
      static const recap_activation values[] = {
          RECAP_ACT_NONE, RECAP_ACT_RELU,    RECAP_ACT_GELU, RECAP_ACT_GELU_TANH,
          RECAP_ACT_SILU, RECAP_ACT_SIGMOID, RECAP_ACT_TANH};
      int w = is_scalar(v) ? find_word(acts, v->text) : -1;
      if (w < 0) {
        ERR(L, v->pos,
            "%s: expected an activation (none, relu, gelu, gelu_tanh, silu, sigmoid, "
            "tanh), got %s%s%.64s%s",
            attr_what, recap__yaml_describe(v), is_scalar(v) ? " '" : "",
            is_scalar(v) ? v->text : "", is_scalar(v) ? "'" : "");
        op->ok = false;
      } else {
        *(recap_activation *)field = values[w];
      }
      return;
    }
    case RECAP_ATTR_EXPR:
      /* Needs the op's input names: parse_expr, called by parse_op. */
      return;
    case RECAP_ATTR_INT:
    case RECAP_ATTR_INT_LIST:
      break;
  }
  /* Integers may name dims, so they are resolved per bucket (ir.c). */
  if (op->num_int_attrs == RECAP__SPEC_MAX_INT_ATTRS) {
    ERR(L, v->pos, "%s: too many integer attributes", what);
    op->ok = false;
    return;
  }
  recap__spec_int_attr *ia = &op->int_attrs[op->num_int_attrs];
  ia->def = a;
  ia->pos = v->pos;
  if (a->kind == RECAP_ATTR_INT) {
    if (!get_size(L, v, attr_what, -(MAX_SIZE - 1), &ia->values[0])) {
      op->ok = false;
      return;
    }
    ia->count = 1;
  } else {
    if (!expect_kind(L, v, RECAP_YAML_SEQUENCE, attr_what)) {
      op->ok = false;
      return;
    }
    if (v->count < 1 || v->count > RECAP_MAX_DIMS) {
      ERR(L, v->pos, "%s has %zu entries, expected 1 to %d", attr_what, v->count, RECAP_MAX_DIMS);
      op->ok = false;
      return;
    }
    for (size_t i = 0; i < v->count; ++i)
      if (!get_size(L, v->items[i], attr_what, -(MAX_SIZE - 1), &ia->values[i])) {
        op->ok = false;
        return;
      }
    ia->count = (int)v->count;
  }
  op->num_int_attrs++;
}

/* ---- expressions ---------------------------------------------------------------------- */

/* Bytes of UTF-8 that code point c takes. */
static size_t utf8_length(unsigned long c) {
  return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

static int hex_value(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* Where byte `offset` of scalar v's (decoded) text is in the spec: the scalar's start plus the
 * characters of its source up to there, decoding quotes and escapes on the way, so the column
 * points INTO the string (columns count characters, as libyaml's do). Block scalars and
 * scalars whose source spans lines before the offset (where folding changes the text) are
 * placed at their start. */
static recap__src_pos scalar_offset_pos(const loader *L, const recap__yaml_node *v, size_t offset) {
  recap__src_pos pos = v->pos;
  if (!L->text) return pos;
  /* The source byte where the scalar starts. */
  size_t r = 0;
  int line = 1, col = 1;
  while (r < L->text_len && (line < pos.line || (line == pos.line && col < pos.col))) {
    char c = L->text[r++];
    if (c == '\n') {
      ++line;
      col = 1;
    } else if (((unsigned char)c & 0xc0) != 0x80) {
      ++col;
    }
  }
  if (line != pos.line || col != pos.col || r >= L->text_len) return pos;
  const char *t = L->text;
  const char quote = t[r] == '"' || t[r] == '\'' ? t[r] : 0;
  if (t[r] == '|' || t[r] == '>') return pos;
  const size_t start = r;
  if (quote) ++r;
  size_t decoded = 0;
  while (decoded < offset && r < L->text_len) {
    char c = t[r];
    if (c == '\n' || c == '\r') return pos;
    if (quote == '\'' && c == '\'' && r + 1 < L->text_len && t[r + 1] == '\'') {
      r += 2;
      decoded += 1;
    } else if (quote == '"' && c == '\\' && r + 1 < L->text_len) {
      char e = t[r + 1];
      size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
      if (digits) {
        unsigned long cp = 0;
        for (size_t k = 0; k < digits && r + 2 + k < L->text_len; ++k) {
          int h = hex_value(t[r + 2 + k]);
          cp = cp * 16 + (unsigned long)(h < 0 ? 0 : h);
        }
        decoded += e == 'x' ? 1 : utf8_length(cp);
        r += 2 + digits;
      } else {
        decoded += e == 'N' || e == '_' ? 2 : e == 'L' || e == 'P' ? 3 : 1;
        r += 2;
      }
    } else {
      r += 1;
      decoded += 1;
    }
  }
  for (size_t k = start; k < r && k < L->text_len; ++k)
    if (((unsigned char)t[k] & 0xc0) != 0x80) ++pos.col;
  return pos;
}

/* The `expr:` attribute: parsed over the op's input names into a program the spec owns. */
static void parse_expr(loader *L, recap__spec_op *op, const recap__yaml_node *v, const char *what) {
  char attr_what[MAX_NAME_BYTES + 160];
  snprintf(attr_what, sizeof attr_what, "%s: attribute 'expr'", what);
  const char *text;
  if (!get_string(L, v, attr_what, &text)) {
    op->ok = false;
    return;
  }
  const char *names[RECAP_OP_MAX_INPUTS];
  for (int i = 0; i < op->num_inputs; ++i) names[i] = op->inputs[i].name;
  recap__expr_parse_error err;
  recap_expr_program *program = NULL;
  recap_status st = recap__expr_parse(text, v->len, names, op->num_inputs, NULL, &program, &err);
  if (st == RECAP_STATUS_SPEC_ERROR) {
    ERR(L, scalar_offset_pos(L, v, err.offset), "%s: %s", attr_what, err.message);
    op->ok = false;
  } else if (st != RECAP_OK) {
    L->oom = true;
    op->ok = false;
  } else {
    op->attrs.expr = program;
  }
}

/* A list of tensor names, or one name. */
static int parse_refs(loader *L, const recap__yaml_node *v, const char *what, recap__spec_ref *refs,
                      int max, bool *ok) {
  size_t count = v->kind == RECAP_YAML_SEQUENCE ? v->count : 1;
  if (v->kind == RECAP_YAML_MAPPING || (v->kind == RECAP_YAML_SCALAR && !is_scalar(v))) {
    ERR(L, v->pos, "%s: expected a tensor name or a list of them, got %s", what,
        recap__yaml_describe(v));
    *ok = false;
    return 0;
  }
  if (count > (size_t)max) {
    ERR(L, v->pos, "%s: %zu tensors, at most %d", what, count, max);
    *ok = false;
    return 0;
  }
  int n = 0;
  for (size_t i = 0; i < count; ++i) {
    const recap__yaml_node *e = v->kind == RECAP_YAML_SEQUENCE ? v->items[i] : v;
    recap__spec_ref *r = &refs[n];
    r->index = -1;
    r->pos = e->pos;
    if (!get_name(L, e, what, &r->name)) {
      *ok = false;
      continue;
    }
    n++;
  }
  return n;
}

static void parse_op(loader *L, size_t index, const recap__yaml_node *v, recap__spec_op *op) {
  recap__spec *spec = L->spec;
  char what[MAX_NAME_BYTES + 64];
  snprintf(what, sizeof what, "op #%zu", index);
  op->pos = v->pos;
  op->ok = true;
  if (!expect_kind(L, v, RECAP_YAML_MAPPING, what)) {
    op->ok = false;
    return;
  }
  const recap__yaml_node *opn = lookup(v, "op");
  if (!opn) {
    ERR(L, v->pos, "%s needs an `op:` key naming the operation (`recap ops` lists them)", what);
    op->ok = false;
  } else if (!is_scalar(opn)) {
    ERR(L, opn->pos, "%s: op: expected an op name, got %s", what, recap__yaml_describe(opn));
    op->ok = false;
  } else {
    op->def = recap__op_find(opn->text);
    if (!op->def) {
      ERR(L, opn->pos, "%s", recap_last_error());
      op->ok = false;
    } else {
      snprintf(what, sizeof what, "op '%s'", op->def->name);
    }
  }
  const recap__yaml_node *name = lookup(v, "name");
  if (name) {
    if (get_name(L, name, "op name", &op->name))
      snprintf(what, sizeof what, "op '%s'", op->name);
    else
      op->ok = false;
  }

  /* Keys: the op-level ones, then the def's attributes (`shape` and `dtype` are attributes
   * of the ops that have them, and checks of the output otherwise). */
  const recap_op_def *def = op->def;
  const recap__yaml_node *expr_node = NULL;
  recap__op_attrs_set_defaults(def, &op->attrs);
  if (def) {
    for (const recap_attr_def *a = def->attrs; a && a->name; ++a)
      if (a->kind == RECAP_ATTR_DTYPE && !a->required)
        *(recap_dtype *)((char *)&op->attrs + a->offset) = spec->dtype;
  }
  const char *accepted[32];
  size_t na = 0;
  for (size_t i = 0; op_keys[i]; ++i) accepted[na++] = op_keys[i];
  for (const recap_attr_def *a = def ? def->attrs : NULL; a && a->name && na < 31; ++a)
    if (strcmp(a->name, "shape") && strcmp(a->name, "dtype")) accepted[na++] = a->name;
  accepted[na] = NULL;
  char context[MAX_NAME_BYTES + 64];
  snprintf(context, sizeof context, "%s", what);
  check_keys(L, v, def ? accepted : NULL, context);

  for (size_t i = 0; def && i < v->count; ++i) {
    const char *key = v->keys[i]->text;
    const recap__yaml_node *val = v->items[i];
    const recap_attr_def *a = NULL;
    for (const recap_attr_def *x = def->attrs; x && x->name; ++x)
      if (strcmp(x->name, key) == 0) a = x;
    if (a && a->kind == RECAP_ATTR_EXPR) {
      /* Parsed once the input names are known (below). */
      if (lookup_key(v, key) == v->keys[i]) expr_node = val;
    } else if (a) {
      if (lookup_key(v, key) == v->keys[i]) parse_attr(L, op, a, val, what);
    } else if (!strcmp(key, "shape")) {
      op->check_shape_pos = val->pos;
      if (!expect_kind(L, val, RECAP_YAML_SEQUENCE, "shape")) {
        op->ok = false;
      } else if (val->count < 1 || val->count > RECAP_MAX_DIMS) {
        ERR(L, val->pos, "%s: shape has 1 to %d sizes, got %zu", what, RECAP_MAX_DIMS, val->count);
        op->ok = false;
      } else {
        bool ok = true;
        for (size_t j = 0; j < val->count; ++j)
          if (!get_size(L, val->items[j], "shape", 1, &op->check_dims[j])) ok = false;
        if (ok) {
          op->check_shape = true;
          op->check_ndim = (int)val->count;
        } else {
          op->ok = false;
        }
      }
    } else if (!strcmp(key, "dtype")) {
      op->check_dtype_pos = val->pos;
      if (get_dtype(L, val, what, false, &op->check_dtype_value))
        op->check_dtype = true;
      else
        op->ok = false;
    }
  }
  for (const recap_attr_def *a = def ? def->attrs : NULL; a && a->name; ++a)
    if (a->required && !lookup(v, a->name)) {
      ERR(L, v->pos, "%s needs attribute '%s' (%s)", what, a->name, a->doc ? a->doc : "");
      op->ok = false;
    }

  const recap__yaml_node *st = lookup(v, "stream");
  int64_t stream = 0;
  if (st && !get_int(L, st, "stream", 0, MAX_STREAMS - 1, &stream)) op->ok = false;
  op->stream = (int)stream;

  const recap__yaml_node *in = lookup(v, "in"), *out = lookup(v, "out");
  bool refs_ok = true;
  if (in) op->num_inputs = parse_refs(L, in, "in", op->inputs, RECAP_OP_MAX_INPUTS, &refs_ok);
  if (!refs_ok) op->ok = false;
  if (expr_node && refs_ok && op->num_inputs >= 1) parse_expr(L, op, expr_node, what);
  if (def && op->ok && (op->num_inputs < def->min_inputs || op->num_inputs > def->max_inputs)) {
    char names[256];
    join_names(def->input_names, names, sizeof names);
    if (def->min_inputs == def->max_inputs)
      ERR(L, in ? in->pos : v->pos, "%s takes %d input%s (%s), got %d", what, def->min_inputs,
          def->min_inputs == 1 ? "" : "s", names, op->num_inputs);
    else
      ERR(L, in ? in->pos : v->pos, "%s takes %d to %d inputs (%s), got %d", what, def->min_inputs,
          def->max_inputs, names, op->num_inputs);
    op->ok = false;
  }
  if (!out) {
    ERR(L, v->pos, "%s needs `out:` naming its output tensor", what);
    op->ok = false;
  } else {
    op->num_outputs = parse_refs(L, out, "out", op->outputs, RECAP_OP_MAX_OUTPUTS, &op->ok);
    if (out->kind == RECAP_YAML_SEQUENCE && out->count == 0) {
      ERR(L, out->pos, "%s: out: lists no tensor", what);
      op->ok = false;
    }
  }
}

static const char *op_label(const recap__spec_op *op, size_t index, char *buf, size_t size) {
  if (op->name)
    snprintf(buf, size, "'%s'", op->name);
  else
    snprintf(buf, size, "'%s#%zu'", op->def ? op->def->name : "op", index);
  return buf;
}

static bool add_tensor_slot(loader *L, size_t *capacity) {
  recap__spec *spec = L->spec;
  if (spec->num_tensors < *capacity) return true;
  size_t grown = *capacity * 2 + 16;
  recap__spec_tensor *tensors = realloc(spec->tensors, grown * sizeof *tensors);
  if (!tensors) {
    L->oom = true;
    return false;
  }
  memset(tensors + *capacity, 0, (grown - *capacity) * sizeof *tensors);
  spec->tensors = tensors;
  *capacity = grown;
  return true;
}

static void parse_ops(loader *L, const recap__yaml_node *node, size_t *tensor_capacity) {
  recap__spec *spec = L->spec;
  if (!expect_kind(L, node, RECAP_YAML_SEQUENCE, "ops")) return;
  if (node->count > spec->options.max_ops) {
    ERR(L, node->pos, "the spec has %zu ops, more than the limit of %zu", node->count,
        spec->options.max_ops);
    return;
  }
  if (node->count == 0) {
    ERR(L, node->pos, "ops: the list is empty (a spec needs at least one op)");
    return;
  }
  spec->ops = calloc(node->count, sizeof *spec->ops);
  if (!spec->ops) {
    L->oom = true;
    return;
  }
  spec->num_ops = node->count;
  for (size_t i = 0; i < node->count && !L->oom; ++i) parse_op(L, i, node->items[i], &spec->ops[i]);
  if (L->oom) return;

  /* Op names are unique; every output is named once, so "used before defined" can say
   * which op defines it. */
  recap__names op_names = {0};
  for (size_t i = 0; i < spec->num_ops && !L->oom; ++i) {
    recap__spec_op *op = &spec->ops[i];
    int previous;
    if (op->name) {
      if (!recap__names_put(&op_names, op->name, (int)i, &previous))
        L->oom = true;
      else if (previous >= 0)
        ERR(L, lookup(node->items[i], "name")->pos,
            "op name '%s' is already used by op #%d "
            "(line %d)",
            op->name, previous, spec->ops[previous].pos.line);
    }
    for (int o = 0; o < op->num_outputs; ++o)
      if (!recap__names_put(&L->future, op->outputs[o].name, (int)i, &previous)) L->oom = true;
  }
  recap__names_free(&op_names);

  for (size_t i = 0; i < spec->num_ops && !L->oom; ++i) {
    recap__spec_op *op = &spec->ops[i];
    char label[MAX_NAME_BYTES + 32];
    op_label(op, i, label, sizeof label);
    for (int j = 0; j < op->num_inputs; ++j) {
      recap__spec_ref *r = &op->inputs[j];
      r->index = recap__names_get(&L->tensors, r->name);
      if (r->index >= 0) {
        spec->tensors[r->index].consumers++;
        continue;
      }
      int later = recap__names_get(&L->future, r->name);
      char later_label[MAX_NAME_BYTES + 32];
      if (later >= 0)
        ERR(L, r->pos,
            "op %s uses tensor '%s' before it is defined (op %s at line %d "
            "produces it)",
            label, r->name,
            op_label(&spec->ops[later], (size_t)later, later_label, sizeof later_label),
            spec->ops[later].pos.line);
      else
        ERR(L, r->pos,
            "op %s: unknown tensor '%s' (not declared under tensors: nor produced "
            "by an op)",
            label, r->name);
      op->ok = false;
    }
    for (int j = 0; j < op->num_outputs; ++j) {
      recap__spec_ref *r = &op->outputs[j];
      int previous = recap__names_get(&L->tensors, r->name);
      if (previous >= 0) {
        const recap__spec_tensor *t = &spec->tensors[previous];
        ERR(L, r->pos,
            "op %s: tensor '%s' is already defined (line %d); every tensor has one "
            "producer",
            label, r->name, t->pos.line);
        op->ok = false;
        continue;
      }
      if (spec->num_tensors >= spec->options.max_tensors) {
        ERR(L, r->pos, "the spec has more than %zu tensors (the limit)", spec->options.max_tensors);
        op->ok = false;
        return;
      }
      if (!add_tensor_slot(L, tensor_capacity)) return;
      r->index = (int)spec->num_tensors;
      recap__spec_tensor *t = &spec->tensors[spec->num_tensors++];
      t->name = r->name;
      t->pos = r->pos;
      t->role = RECAP_ROLE_INTERMEDIATE;
      t->producer = (int)i;
      if (!recap__names_put(&L->tensors, r->name, r->index, &previous)) L->oom = true;
    }
  }
}

static void parse_outputs(loader *L, const recap__yaml_node *node) {
  recap__spec *spec = L->spec;
  spec->outputs_given = true;
  if (!expect_kind(L, node, RECAP_YAML_SEQUENCE, "outputs")) return;
  if (node->count == 0) {
    ERR(L, node->pos, "outputs: the list is empty");
    return;
  }
  spec->outputs = calloc(node->count, sizeof *spec->outputs);
  if (!spec->outputs) {
    L->oom = true;
    return;
  }
  recap__names seen = {0};
  for (size_t i = 0; i < node->count; ++i) {
    recap__spec_ref *r = &spec->outputs[spec->num_outputs];
    r->pos = node->items[i]->pos;
    r->index = -1;
    if (!get_name(L, node->items[i], "outputs", &r->name)) continue;
    int previous;
    if (!recap__names_put(&seen, r->name, (int)i, &previous)) {
      L->oom = true;
      break;
    }
    if (previous >= 0) {
      ERR(L, r->pos, "outputs: tensor '%s' is listed twice", r->name);
      continue;
    }
    r->index = recap__names_get(&L->tensors, r->name);
    if (r->index < 0) ERR(L, r->pos, "outputs: unknown tensor '%s'", r->name);
    spec->num_outputs++;
  }
  recap__names_free(&seen);
}

static void parse_run(loader *L, const recap__yaml_node *node) {
  static const char *const keys[] = {"warmup", "iters", NULL};
  if (!expect_kind(L, node, RECAP_YAML_MAPPING, "run")) return;
  check_keys(L, node, keys, "run");
  const recap__yaml_node *w = lookup(node, "warmup"), *it = lookup(node, "iters");
  int64_t v;
  if (w && get_int(L, w, "run: warmup", 0, MAX_WARMUP, &v)) L->spec->warmup = (int)v;
  if (it && get_int(L, it, "run: iters", 1, MAX_ITERS, &v)) L->spec->iters = (int)v;
}

/* Tensors nothing reads, and the default outputs. */
static void check_usage(loader *L) {
  recap__spec *spec = L->spec;
  bool *listed = calloc(spec->num_tensors ? spec->num_tensors : 1, sizeof *listed);
  if (!listed) {
    L->oom = true;
    return;
  }
  for (size_t i = 0; i < spec->num_outputs; ++i)
    if (spec->outputs[i].index >= 0) listed[spec->outputs[i].index] = true;
  size_t defaults = 0;
  for (size_t i = 0; i < spec->num_tensors; ++i) {
    const recap__spec_tensor *t = &spec->tensors[i];
    if (t->consumers || listed[i]) continue;
    if (t->producer < 0) {
      ERR(L, t->pos, "tensor '%s' is declared but never used", t->name);
      continue;
    }
    const recap__spec_op *op = &spec->ops[t->producer];
    int out = 0;
    while (op->outputs[out].index != (int)i) ++out;
    /* An op that writes into an input (kv_append into its cache) has done its work even if
     * nothing reads the result. */
    if (op->def && out == 0 && op->def->output_is_input0) continue;
    if (spec->outputs_given)
      ERR(L, t->pos,
          "tensor '%s' is computed but never used (no later op reads it and "
          "outputs: does not list it)",
          t->name);
    else
      defaults++;
  }
  if (!spec->outputs_given && defaults) {
    spec->outputs = calloc(defaults, sizeof *spec->outputs);
    if (!spec->outputs) {
      L->oom = true;
    } else {
      for (size_t i = 0; i < spec->num_tensors; ++i) {
        const recap__spec_tensor *t = &spec->tensors[i];
        if (t->consumers || t->producer < 0) continue;
        const recap__spec_op *op = &spec->ops[t->producer];
        int out = 0;
        while (op->outputs[out].index != (int)i) ++out;
        if (op->def && out == 0 && op->def->output_is_input0) continue;
        spec->outputs[spec->num_outputs++] = (recap__spec_ref){t->name, t->pos, (int)i};
      }
    }
  }
  free(listed);
}

/* ---- the whole spec -------------------------------------------------------------------- */

static void parse_root(loader *L, const recap__yaml_node *root) {
  static const char *const keys[] = {"name",    "device", "dtype",   "seed", "dims",
                                     "tensors", "ops",    "outputs", "run",  NULL};
  recap__spec *spec = L->spec;
  if (!root || recap__yaml_is_null(root)) {
    ERR(L, ((recap__src_pos){spec->file, 1, 1}),
        "the spec is empty (expected a mapping with at "
        "least an `ops:` list)");
    return;
  }
  if (root->kind != RECAP_YAML_MAPPING) {
    ERR(L, root->pos, "the spec must be a mapping (name:, dims:, tensors:, ops:, ...), got %s",
        recap__yaml_describe(root));
    return;
  }
  spec->pos = root->pos;
  check_keys(L, root, keys, "the spec");

  const recap__yaml_node *n;
  if ((n = lookup(root, "name")) && get_string(L, n, "name", &spec->name) &&
      strpbrk(spec->name, "\t\n")) {
    /* It heads one-line outputs (validate, plan, bench) and NVTX ranges. */
    ERR(L, n->pos, "name: must be one line of text (no tab or newline)");
    spec->name = NULL;
  }
  if ((n = lookup(root, "device"))) {
    if (!is_scalar(n) || recap_backend_parse(n->text, &spec->device) != RECAP_OK)
      ERR(L, n->pos, "device: expected cuda or host, got %s%s%.64s%s", recap__yaml_describe(n),
          is_scalar(n) ? " '" : "", is_scalar(n) ? n->text : "", is_scalar(n) ? "'" : "");
  }
  if ((n = lookup(root, "dtype"))) get_dtype(L, n, "dtype", true, &spec->dtype);
  if ((n = lookup(root, "seed"))) {
    spec->seed_given = true;
    int64_t v;
    if (parse_int(n, &v) == INT_OVERFLOW && n->text[0] != '-') {
      /* Seeds use all 64 bits. */
      char *end;
      errno = 0;
      unsigned long long u = strtoull(n->text, &end, 10);
      if (errno || *end)
        ERR(L, n->pos, "seed: %.64s does not fit in 64 bits", n->text);
      else
        spec->seed = u;
    } else if (parse_int(n, &v) == INT_OK && v < 0) {
      ERR(L, n->pos, "seed: expected an integer from 0 to 2^64 - 1, got %lld", (long long)v);
    } else if (get_int(L, n, "seed", 0, INT64_MAX, &v)) {
      spec->seed = (uint64_t)v;
    }
  }
  if ((n = lookup(root, "dims"))) parse_dims(L, n);
  /* Before any shape is read: a tensor is checked against the dims the caller runs with. */
  for (const char *const *d = spec->options.dims; d && *d && !L->oom && !L->bad_override[0]; ++d)
    override_dim(L, *d);
  if (L->oom || L->bad_override[0]) return;

  const recap__yaml_node *tensors = lookup(root, "tensors"), *ops = lookup(root, "ops");
  size_t declared = tensors && tensors->kind == RECAP_YAML_MAPPING ? tensors->count : 0;
  size_t capacity = declared + 16;
  spec->tensors = calloc(capacity, sizeof *spec->tensors);
  if (!spec->tensors) {
    L->oom = true;
    return;
  }
  if (tensors) parse_tensors(L, tensors);
  if (L->oom) return;
  if (!ops)
    ERR(L, root->pos, "the spec has no `ops:` list");
  else
    parse_ops(L, ops, &capacity);
  if (L->oom) return;
  if ((n = lookup(root, "outputs"))) parse_outputs(L, n);
  if (L->oom) return;
  if ((n = lookup(root, "run"))) parse_run(L, n);
  if (spec->num_ops) check_usage(L);
}

/* Every spec text parsed in this process: the load path's test counts them. */
static atomic_size_t parses;

size_t recap__spec_parses(void) {
  return atomic_load(&parses);
}

static recap_status load(const char *text, size_t len, const char *file, const char *dir,
                         const recap__spec_options *options, recap__spec **out,
                         recap__diag *user_diag) {
  atomic_fetch_add(&parses, 1);
  recap__diag local = {0};
  recap__diag *diag = user_diag ? user_diag : &local;
  size_t errors_before = recap__diag_errors(diag);
  recap__spec *spec = calloc(1, sizeof *spec);
  if (!spec) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "out of memory loading %s", file);
  spec->options = options ? *options : (recap__spec_options){0};
  recap__yaml_limits_resolve(&spec->options.yaml);
  if (!spec->options.max_tensors) spec->options.max_tensors = DEFAULT_MAX_TENSORS;
  if (!spec->options.max_ops) spec->options.max_ops = DEFAULT_MAX_OPS;
  spec->device = RECAP_BACKEND_CUDA;
  spec->dtype = RECAP_DTYPE_F32;
  spec->warmup = 3;
  spec->iters = 100;
  spec->bucket_dim = -1;
  spec->dir = strdup(dir);
  if (!spec->dir) {
    free(spec);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "out of memory loading %s", file);
  }

  recap_status st = recap__yaml_parse(text, len, file, &spec->options.yaml, &spec->ast, diag);
  if (st != RECAP_OK) {
    recap__spec_destroy(spec);
    if (st == RECAP_STATUS_SPEC_ERROR) st = recap__diag_report(diag);
    recap__diag_free(&local);
    return st;
  }
  spec->file = spec->ast->file;
  loader L = {.spec = spec, .diag = diag, .text = text, .text_len = len};
  parse_root(&L, spec->ast->root);
  if (!spec->name && !L.oom) {
    /* The file's base name without its extension. */
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    size_t n = strcspn(base, ".");
    char *name = malloc(n + 1);
    if (name) {
      memcpy(name, base, n);
      name[n] = '\0';
      spec->name = name;
      spec->name_owned = name;
    } else {
      L.oom = true;
    }
  }
  recap__names_free(&L.dims);
  recap__names_free(&L.tensors);
  recap__names_free(&L.future);

  if (L.oom) {
    recap__spec_destroy(spec);
    recap__diag_free(&local);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "out of memory loading %s", file);
  }
  if (L.bad_override[0]) {
    recap__spec_destroy(spec);
    recap__diag_free(&local);
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "%s", L.bad_override);
  }
  if (recap__diag_errors(diag) > errors_before) {
    st = recap__diag_report(diag);
    recap__spec_destroy(spec);
    recap__diag_free(&local);
    return st;
  }
  recap__diag_free(&local);
  *out = spec;
  return RECAP_OK;
}

recap_status recap__spec_load_string(const char *text, size_t len, const char *name,
                                     const recap__spec_options *options, recap__spec **out,
                                     recap__diag *diag) {
  RECAP_CHECK_ARG((text || len == 0) && out);
  const char *dir = options && options->base_dir ? options->base_dir : ".";
  return load(text, len, name ? name : "<string>", dir, options, out, diag);
}

recap_status recap__spec_load_file(const char *path, const recap__spec_options *options,
                                   recap__spec **out, recap__diag *diag) {
  RECAP_CHECK_ARG(path && out);
  recap__spec_options opts = options ? *options : (recap__spec_options){0};
  recap__yaml_limits_resolve(&opts.yaml);
  FILE *f;
  uint64_t file_bytes;
  RECAP_TRY(recap__file_open_regular(path, "spec", &f, &file_bytes));
  /* Refuse an oversized file before reading any of it. */
  if (file_bytes > opts.yaml.max_file_bytes) {
    fclose(f);
    recap__diag local = {0};
    recap__diag *d = diag ? diag : &local;
    recap__diag_error(d, (recap__src_pos){path, 1, 1},
                      "the spec is %llu bytes, larger than the limit of %zu bytes",
                      (unsigned long long)file_bytes, opts.yaml.max_file_bytes);
    recap_status rs = recap__diag_report(d);
    recap__diag_free(&local);
    return rs;
  }
  size_t size = (size_t)file_bytes;
  char *text = malloc(size ? size : 1);
  if (!text) {
    fclose(f);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "out of memory reading %s", path);
  }
  size_t got = size ? fread(text, 1, size, f) : 0;
  bool failed = ferror(f) || got != size;
  fclose(f);
  if (failed) {
    free(text);
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "cannot read spec '%s'", path);
  }
  char *dir = strdup(path);
  if (!dir) {
    free(text);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "out of memory reading %s", path);
  }
  char *slash = strrchr(dir, '/');
  if (slash == dir)
    slash[1] = '\0';
  else if (slash)
    *slash = '\0';
  else
    strcpy(dir, ".");
  recap_status rs = load(text, size, path, dir, &opts, out, diag);
  free(dir);
  free(text);
  return rs;
}

void recap__spec_destroy(recap__spec *spec) {
  if (!spec) return;
  for (size_t i = 0; i < spec->num_dims; ++i) free(spec->dims[i].values);
  free(spec->dims);
  for (size_t i = 0; i < spec->num_tensors; ++i) {
    free(spec->tensors[i].init.path);
    free(spec->tensors[i].init.key);
  }
  free(spec->tensors);
  for (size_t i = 0; spec->ops && i < spec->num_ops; ++i)
    recap__expr_program_destroy((recap_expr_program *)spec->ops[i].attrs.expr);
  free(spec->ops);
  free(spec->outputs);
  free(spec->name_owned);
  free(spec->dir);
  recap__yaml_ast_destroy(spec->ast);
  free(spec);
}

size_t recap__spec_num_buckets(const recap__spec *spec) {
  if (!spec || spec->bucket_dim < 0) return 1;
  return spec->dims[spec->bucket_dim].count;
}

int64_t recap__spec_bucket_value(const recap__spec *spec, size_t bucket) {
  if (!spec || spec->bucket_dim < 0) return 0;
  const recap__spec_dim *d = &spec->dims[spec->bucket_dim];
  return bucket < d->count ? d->values[bucket] : 0;
}
