/*
 * spec.c: a spec's YAML tree (yaml_ast.h) -> the checked recap__spec of spec.h.
 *
 * One pass over the tree records every problem it finds and keeps going: a bad entry is
 * marked (an op with def NULL or ok false, a tensor with ndim 0, a reference with index -1)
 * so later checks skip it instead of reporting its consequences. Shapes, dtypes and sizes are
 * each bucket's IR's to check (ir.c, from the load path: load.c). This file holds the
 * top-level keys and the whole; spec_internal.h lists the others.
 */
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
#include "engine/spec.h"
#include "engine/spec_internal.h"
#include "kernels/expr.h"
#include "kernels/infer.h"
#include "runtime/error.h"
#include "runtime/file.h"

/* ---- top-level keys -------------------------------------------------------------------- */

/* A dim's value as the spec writes it: a positive integer, or a list of them (buckets:
 * strictly ascending, at most RECAP_MAX_BUCKETS). False, with errors at the values, when it
 * is not; *values is then NULL. */
static bool read_dim_values(loader *L, const recap__yaml_node *v, const char *what,
                            int64_t **values, size_t *count, bool *bucketed) {
  *values = NULL;
  *count = 0;
  *bucketed = v->kind == RECAP_YAML_SEQUENCE;
  size_t n = *bucketed ? v->count : 1;
  if (*bucketed && n == 0) {
    ERR(L, v->pos, "%s: a bucket list needs at least one value", what);
    return false;
  }
  if (n > RECAP_MAX_BUCKETS) {
    ERR(L, v->pos, "%s has %zu buckets, more than the limit of %d", what, n, RECAP_MAX_BUCKETS);
    return false;
  }
  if (v->kind == RECAP_YAML_MAPPING) {
    ERR(L, v->pos, "%s: expected a positive integer or a list of them (buckets), got a mapping",
        what);
    return false;
  }
  int64_t *out = calloc(n, sizeof *out);
  if (!out) {
    L->oom = true;
    return false;
  }
  bool ok = true;
  for (size_t j = 0; j < n; ++j) {
    const recap__yaml_node *e = *bucketed ? v->items[j] : v;
    int64_t x;
    if (!recap__spec_get_int(L, e, what, 1, MAX_SIZE - 1, &x)) {
      ok = false;
      continue;
    }
    if (j > 0 && ok && x <= out[j - 1]) {
      ERR(L, e->pos, "%s: bucket values must be strictly ascending (%lld follows %lld)", what,
          (long long)x, (long long)out[j - 1]);
      ok = false;
    }
    out[j] = x;
  }
  if (!ok) {
    free(out);
    return false;
  }
  *values = out;
  *count = n;
  return true;
}

/* Whether a dim's value is another dim's name (an alias) rather than numbers. */
static bool names_a_dim(const recap__yaml_node *v) {
  int64_t unused;
  return recap__spec_parse_int(v, &unused) == INT_NOT_INT && recap__spec_is_name(v);
}

#define OVERRIDE_ERR(L, ...) snprintf((L)->bad_override, sizeof(L)->bad_override, __VA_ARGS__)

/* An alias's problem: at its place in the spec, or as the overrides' error for a caller's
 * override (which has no place; the first such problem is the one reported). */
static void alias_error(loader *L, recap__src_pos pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void alias_error(loader *L, recap__src_pos pos, const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (pos.file)
    ERR(L, pos, "%s", text);
  else if (!L->bad_override[0])
    OVERRIDE_ERR(L, "dim overrides: %.300s", text);
}

/* Reports a cycle of aliases (members[0] names members[1], ..., the last names members[0]) at
 * its first member in `fresh`, listing it from there; silent when none is fresh (it was
 * reported where those aliases were set). */
static void report_cycle(loader *L, const char *context, const recap__spec_dim_alias *aliases,
                         const bool *fresh, const int *members, size_t count) {
  const recap__spec *spec = L->spec;
  size_t at = count;
  for (size_t i = 0; i < count && at == count; ++i)
    if (!fresh || fresh[members[i]]) at = i;
  if (at == count) return;
  char chain[640] = "";
  size_t used = 0;
  for (size_t i = 0; i < count; ++i) {
    const recap__spec_dim *d = &spec->dims[members[(at + i) % count]];
    const char *named = aliases[members[(at + i) % count]].name;
    size_t room = sizeof chain - used;
    int w = snprintf(chain + used, room, "%s%s = %s", i ? ", " : "", d->name, named);
    if (w < 0 || (size_t)w >= room) {
      snprintf(chain + (sizeof chain - 5), 5, "...");
      break;
    }
    used += (size_t)w;
  }
  alias_error(L, aliases[members[at]].pos,
              "%sdim '%s' is an alias in a cycle (%s): one of these dims needs a value of its own",
              context, spec->dims[members[at]].name, chain);
}

/* Follows the aliases of one set of dim values (the spec's, or with an entry's or the
 * caller's applied): root[d] is the dim whose values dim d has, d itself for a dim with values
 * of its own, -1 where the chain breaks (a name no dim has, a dim naming itself, a cycle).
 * A break is reported, with `context` ahead, when a dim in `fresh` (the ones these values set;
 * NULL: all) takes part; the others were reported where they were set. Linear in the dims:
 * each one is walked once. */
static void resolve_aliases(loader *L, const char *context, const recap__spec_dim_alias *aliases,
                            const bool *fresh, int *root) {
  enum { OWN_VALUES = -1, BROKEN = -2 };
  const recap__spec *spec = L->spec;
  size_t n = spec->num_dims;
  int *next = calloc(n ? n : 1, sizeof *next), *path = calloc(n ? n : 1, sizeof *path);
  unsigned char *state = calloc(n ? n : 1, 1); /* 0: not seen, 1: on the walk, 2: resolved */
  if (!next || !path || !state) {
    L->oom = true;
    goto done;
  }
  for (size_t d = 0; d < n; ++d) {
    const recap__spec_dim_alias *a = &aliases[d];
    bool report = !fresh || fresh[d];
    next[d] = a->name ? recap__names_get(&L->dims, a->name) : OWN_VALUES;
    if (a->name && next[d] < 0) {
      if (report)
        alias_error(L, a->pos,
                    "%sdim '%s' is given as '%.256s', but the spec declares no dim '%.256s'",
                    context, spec->dims[d].name, a->name, a->name);
      next[d] = BROKEN;
    } else if (next[d] == (int)d) {
      if (report)
        alias_error(L, a->pos,
                    "%sdim '%s' is given as itself (a dim's value is a positive integer, a list of "
                    "them, or another dim's name)",
                    context, spec->dims[d].name);
      next[d] = BROKEN;
    }
  }
  for (size_t d = 0; d < n; ++d) {
    if (state[d]) continue;
    size_t len = 0;
    int cur = (int)d;
    while (state[cur] == 0 && next[cur] >= 0) {
      state[cur] = 1;
      path[len++] = cur;
      cur = next[cur];
    }
    int r;
    if (state[cur] == 2) {
      r = root[cur];
    } else if (state[cur] == 1) {
      size_t start = 0;
      while (path[start] != cur) ++start;
      report_cycle(L, context, aliases, fresh, path + start, len - start);
      r = -1;
    } else {
      r = next[cur] == OWN_VALUES ? cur : -1;
      root[cur] = r;
      state[cur] = 2;
    }
    for (size_t i = 0; i < len; ++i) {
      root[path[i]] = r;
      state[path[i]] = 2;
    }
  }
done:
  free(next);
  free(path);
  free(state);
}

/* Checks one set of dim values' aliases (see resolve_aliases) when the roots are not needed. */
static void check_aliases(loader *L, const char *context, const recap__spec_dim_alias *aliases,
                          const bool *fresh) {
  int *root = calloc(L->spec->num_dims ? L->spec->num_dims : 1, sizeof *root);
  if (!root) {
    L->oom = true;
    return;
  }
  resolve_aliases(L, context, aliases, fresh, root);
  free(root);
}

/* Makes dim d an alias: it has no values of its own until the dims are final. */
static void set_alias(loader *L, int d, recap__spec_dim_alias alias) {
  recap__spec_dim *dim = &L->spec->dims[d];
  free(dim->values);
  dim->values = NULL;
  dim->count = 0;
  dim->bucketed = false;
  if (L->spec->bucket_dim == d) L->spec->bucket_dim = -1;
  L->dim_aliases[d] = alias;
}

static void parse_dims(loader *L, const recap__yaml_node *node) {
  recap__spec *spec = L->spec;
  if (!recap__spec_expect_kind(L, node, RECAP_YAML_MAPPING, "dims")) return;
  recap__spec_check_keys(L, node, NULL, "dims");
  spec->dims = calloc(node->count ? node->count : 1, sizeof *spec->dims);
  L->dim_aliases = calloc(node->count ? node->count : 1, sizeof *L->dim_aliases);
  if (!spec->dims || !L->dim_aliases) {
    L->oom = true;
    return;
  }
  for (size_t i = 0; i < node->count; ++i) {
    const recap__yaml_node *k = node->keys[i], *v = node->items[i];
    recap__spec_dim *d = &spec->dims[spec->num_dims];
    if (!recap__spec_get_name(L, k, "dim name", &d->name)) continue;
    int previous;
    if (!recap__names_put(&L->dims, d->name, (int)spec->num_dims, &previous)) {
      L->oom = true;
      return;
    }
    if (previous >= 0) continue; /* check_keys reported it */
    d->pos = k->pos;
    d->alias = -1;
    char what[MAX_NAME_BYTES + 32];
    snprintf(what, sizeof what, "dim '%s'", d->name);
    if (names_a_dim(v)) {
      /* The dim it names may come later: aliases are followed once every dim is read. */
      L->dim_aliases[spec->num_dims] = (recap__spec_dim_alias){v->text, v->pos};
    } else if (read_dim_values(L, v, what, &d->values, &d->count, &d->bucketed) && d->bucketed) {
      if (spec->bucket_dim >= 0)
        ERR(L, k->pos,
            "dim '%s' has buckets, but dim '%s' already does (one bucketed dim per "
            "spec)",
            d->name, spec->dims[spec->bucket_dim].name);
      else
        spec->bucket_dim = (int)spec->num_dims;
    }
    spec->num_dims++; /* counted even on running out of memory: destroy frees its values */
    if (L->oom) return;
  }
  check_aliases(L, "", L->dim_aliases, NULL);
}

/* Which dims have buckets and which are aliases: the spec's own, which every entry is checked
 * against whichever entry is applied (the chosen one is applied as it is read). */
typedef struct {
  bool *bucketed;
  recap__spec_dim_alias *aliases;
} dim_settings;

/* One entry's `dims:`: checked like the spec's own (declared names, valid values, aliases, one
 * bucketed dim at most once applied over `own`, the spec's); applied when `apply` (the entry
 * the caller chose). */
static void entry_dims(loader *L, const char *entry, const recap__yaml_node *dims, bool apply,
                       const dim_settings *own) {
  recap__spec *spec = L->spec;
  char context[MAX_NAME_BYTES + 32];
  snprintf(context, sizeof context, "entry '%s': dims", entry);
  if (!recap__spec_expect_kind(L, dims, RECAP_YAML_MAPPING, context)) return;
  recap__spec_check_keys(L, dims, NULL, context);
  /* Which dims hold buckets, and which are aliases, once the entry's values replace the
   * spec's; `given`: the dims the entry sets (its aliases' problems are its own). */
  size_t n = spec->num_dims ? spec->num_dims : 1;
  bool *bucketed = calloc(n, sizeof *bucketed), *given = calloc(n, sizeof *given);
  recap__spec_dim_alias *aliases = calloc(n, sizeof *aliases);
  if (!bucketed || !given || !aliases) {
    free(bucketed);
    free(given);
    free(aliases);
    L->oom = true;
    return;
  }
  if (spec->num_dims) {
    memcpy(bucketed, own->bucketed, spec->num_dims * sizeof *bucketed);
    memcpy(aliases, own->aliases, spec->num_dims * sizeof *aliases);
  }
  bool ok = true;
  for (size_t i = 0; i < dims->count && !L->oom; ++i) {
    const char *name;
    if (!recap__spec_get_name(L, dims->keys[i], "dim name", &name)) {
      ok = false;
      continue;
    }
    int d = recap__names_get(&L->dims, name);
    if (d < 0) {
      ERR(L, dims->keys[i]->pos,
          "entry '%s': the spec declares no dim '%s' (entries set dims "
          "declared under dims:)",
          entry, name);
      ok = false;
      continue;
    }
    given[d] = true;
    const recap__yaml_node *v = dims->items[i];
    if (names_a_dim(v)) {
      aliases[d] = (recap__spec_dim_alias){v->text, v->pos};
      bucketed[d] = false;
      if (apply) set_alias(L, d, aliases[d]);
      continue;
    }
    char what[2 * MAX_NAME_BYTES + 32];
    snprintf(what, sizeof what, "entry '%s': dim '%s'", entry, name);
    int64_t *values;
    size_t count;
    bool list;
    if (!read_dim_values(L, v, what, &values, &count, &list)) {
      ok = false;
      continue;
    }
    aliases[d].name = NULL;
    bucketed[d] = list;
    if (apply) {
      free(spec->dims[d].values);
      spec->dims[d].values = values;
      spec->dims[d].count = count;
      spec->dims[d].bucketed = list;
      L->dim_aliases[d].name = NULL;
    } else {
      free(values);
    }
  }
  char prefix[MAX_NAME_BYTES + 16];
  snprintf(prefix, sizeof prefix, "entry '%s': ", entry);
  if (!L->oom) check_aliases(L, prefix, aliases, given);
  int first = -1;
  for (size_t d = 0; d < spec->num_dims && ok; ++d) {
    if (!bucketed[d]) continue;
    if (first >= 0) {
      ERR(L, dims->pos, "entry '%s': dims '%s' and '%s' would both have buckets (one at most)",
          entry, spec->dims[first].name, spec->dims[d].name);
      ok = false;
    }
    first = (int)d;
  }
  if (apply && ok) spec->bucket_dim = first;
  free(bucketed);
  free(given);
  free(aliases);
}

/* `entries:` name -> {dims: {DIM: value or list}}: named sets of dim values, one pipeline
 * each, that may share params and state (prefill and decode of one model; specs/README.md).
 * Every entry is checked; options.entry's dims replace the spec's. */
static void parse_entries(loader *L, const recap__yaml_node *node) {
  static const char *const keys[] = {"dims", NULL};
  recap__spec *spec = L->spec;
  if (!recap__spec_expect_kind(L, node, RECAP_YAML_MAPPING, "entries")) return;
  recap__spec_check_keys(L, node, NULL, "entries");
  spec->entries = calloc(node->count ? node->count : 1, sizeof *spec->entries);
  size_t n = spec->num_dims ? spec->num_dims : 1;
  dim_settings own = {calloc(n, sizeof *own.bucketed), calloc(n, sizeof *own.aliases)};
  if (!spec->entries || !own.bucketed || !own.aliases) {
    free(own.bucketed);
    free(own.aliases);
    L->oom = true;
    return;
  }
  for (size_t d = 0; d < spec->num_dims; ++d) {
    own.bucketed[d] = spec->dims[d].bucketed;
    own.aliases[d] = L->dim_aliases[d];
  }
  for (size_t i = 0; i < node->count && !L->oom; ++i) {
    const recap__yaml_node *k = node->keys[i], *v = node->items[i];
    const char *name;
    if (!recap__spec_get_name(L, k, "entry name", &name)) continue;
    bool again = false;
    for (size_t e = 0; e < spec->num_entries; ++e)
      again |= strcmp(spec->entries[e].name, name) == 0;
    if (again) continue; /* check_keys reported it */
    char what[MAX_NAME_BYTES + 16];
    snprintf(what, sizeof what, "entry '%s'", name);
    if (!recap__spec_expect_kind(L, v, RECAP_YAML_MAPPING, what)) continue;
    recap__spec_check_keys(L, v, keys, what);
    const recap__yaml_node *dims = recap__spec_lookup(v, "dims");
    bool chosen = spec->options.entry && strcmp(spec->options.entry, name) == 0;
    if (!dims)
      ERR(L, v->pos, "entry '%s' needs `dims:` (the dim values it runs with)", name);
    else
      entry_dims(L, name, dims, chosen, &own);
    if (chosen) spec->entry = name;
    spec->entries[spec->num_entries++] = (recap__spec_entry){name, k->pos};
  }
  free(own.bucketed);
  free(own.aliases);
}

/* "a, b, c": the spec's dims, for a message that names one it does not declare. */
static void dim_names(const recap__spec *spec, char *names, size_t size) {
  size_t used = 0;
  names[0] = '\0';
  for (size_t i = 0; i < spec->num_dims && used + 64 < size; ++i)
    used += (size_t)snprintf(names + used, size - used, "%s%s", i ? ", " : "", spec->dims[i].name);
  if (!spec->num_dims) snprintf(names, size, "none");
}

/* Applies one "NAME=V[,V...]" or "NAME=OTHER" from outside the spec (options.dims), with the
 * rules and limits of dims written in the spec; marks `aliased[NAME]` for an alias (a cycle it
 * makes is found once every override is in). */
static void override_dim(loader *L, const char *text, bool *aliased) {
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
  char names[256];
  if (index < 0) {
    dim_names(spec, names, sizeof names);
    OVERRIDE_ERR(L, "dim override '%s': the spec declares no dim '%.*s' (its dims: %s)", text,
                 (int)n, text, names);
    return;
  }
  recap__spec_dim *d = &spec->dims[index];
  if (eq[1] == '_' || (eq[1] >= 'a' && eq[1] <= 'z') || (eq[1] >= 'A' && eq[1] <= 'Z')) {
    /* Another dim's name: an alias of it. */
    int target = recap__names_get(&L->dims, eq + 1);
    if (target < 0) {
      dim_names(spec, names, sizeof names);
      OVERRIDE_ERR(L, "dim override '%.64s': the spec declares no dim '%.64s' (its dims: %.120s)",
                   text, eq + 1, names);
    } else if (target == index) {
      OVERRIDE_ERR(L, "dim override '%s': a dim cannot be an alias of itself", text);
    } else {
      set_alias(L, index, (recap__spec_dim_alias){.name = eq + 1});
      aliased[index] = true;
    }
    return;
  }
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
                   "dim override '%s': expected NAME=VALUE, NAME=V1,V2,... with decimal integers, "
                   "or NAME=OTHER (an alias of dim OTHER)",
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
  L->dim_aliases[index].name = NULL;
  if (count > 1) {
    d->bucketed = true;
    spec->bucket_dim = index;
  }
}

/* Once the spec's, the entry's and the caller's values are all applied: each alias gets the
 * values of the dim it names (a copy), and `alias` says which. A cycle only the overrides made
 * is theirs to report (`aliased`: the dims they made aliases); the spec's and the entry's own
 * problems were reported where they were read. */
static void finish_dims(loader *L, const bool *aliased) {
  recap__spec *spec = L->spec;
  int *root = calloc(spec->num_dims ? spec->num_dims : 1, sizeof *root);
  if (!root) {
    L->oom = true;
    return;
  }
  resolve_aliases(L, "", L->dim_aliases, aliased, root);
  for (size_t d = 0; d < spec->num_dims && !L->oom; ++d) {
    recap__spec_dim *dim = &spec->dims[d];
    if (!L->dim_aliases[d].name || root[d] < 0) continue;
    const recap__spec_dim *of = &spec->dims[root[d]];
    dim->values = calloc(of->count ? of->count : 1, sizeof *dim->values);
    if (!dim->values) {
      L->oom = true;
      break;
    }
    if (of->count) memcpy(dim->values, of->values, of->count * sizeof *dim->values);
    dim->count = of->count;
    dim->bucketed = of->bucketed;
    dim->alias = root[d];
  }
  free(root);
}

static void parse_run(loader *L, const recap__yaml_node *node) {
  static const char *const keys[] = {"warmup", "iters", NULL};
  if (!recap__spec_expect_kind(L, node, RECAP_YAML_MAPPING, "run")) return;
  recap__spec_check_keys(L, node, keys, "run");
  const recap__yaml_node *w = recap__spec_lookup(node, "warmup"),
                         *it = recap__spec_lookup(node, "iters");
  int64_t v;
  if (w && recap__spec_get_int(L, w, "run: warmup", 0, MAX_WARMUP, &v)) L->spec->warmup = (int)v;
  if (it && recap__spec_get_int(L, it, "run: iters", 1, MAX_ITERS, &v)) L->spec->iters = (int)v;
}

/* Tensors nothing reads, and the default outputs. */

/* ---- the whole spec -------------------------------------------------------------------- */

/* `version:` (RECAP__SPEC_FORMAT_VERSION): false, with the error at the value, for another. */
static bool parse_version(loader *L, const recap__yaml_node *n) {
  int64_t v;
  if (recap__spec_is_scalar(n) && recap__spec_parse_int(n, &v) == INT_OK &&
      v == RECAP__SPEC_FORMAT_VERSION)
    return true;
  ERR(L, n->pos, "version: this recap reads spec format version %d, got %s%s%.64s%s",
      RECAP__SPEC_FORMAT_VERSION, recap__yaml_describe(n), recap__spec_is_scalar(n) ? " '" : "",
      recap__spec_is_scalar(n) ? n->text : "", recap__spec_is_scalar(n) ? "'" : "");
  return false;
}

enum { MAX_SPEC_NAME_BYTES = 256 };

/* The first line separator (U+2028, U+2029) or bidirectional control (U+202A-U+202E,
 * U+2066-U+2069) in UTF-8 text, 0 for none: printed raw, they break or reorder a terminal's
 * line. */
static unsigned layout_control(const char *text) {
  for (const unsigned char *c = (const unsigned char *)text; *c; ++c) {
    if (c[0] != 0xE2 || !c[1] || !c[2]) continue;
    unsigned code = 0x2000u | ((unsigned)(c[1] & 0x3F) << 6) | (unsigned)(c[2] & 0x3F);
    if ((c[1] & 0xC0) == 0x80 && (c[2] & 0xC0) == 0x80 &&
        ((code >= 0x2028 && code <= 0x202E) || (code >= 0x2066 && code <= 0x2069)))
      return code;
  }
  return 0;
}

static void parse_root(loader *L, const recap__yaml_node *root) {
  static const char *const keys[] = {"version", "name",    "device", "dtype",      "seed",
                                     "dims",    "entries", "blocks", "checkpoint", "tensors",
                                     "ops",     "outputs", "run",    NULL};
  recap__spec *spec = L->spec;
  if (!root || recap__yaml_is_null(root)) {
    ERR(L, ((recap__src_pos){.file = spec->file, .line = 1, .col = 1}),
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
  const recap__yaml_node *n;
  /* A Hugging Face model's config.json parses as YAML: one error that says what it is, rather
   * than one per key it has and we do not. */
  if (!recap__spec_lookup(root, "ops") && !recap__spec_lookup(root, "tensors") &&
      (recap__spec_lookup(root, "architectures") || recap__spec_lookup(root, "model_type"))) {
    ERR(L, root->pos,
        "this is a Hugging Face model config, not a recap spec: `recap import-hf DIR -o "
        "model.yaml` writes a spec for the model in folder DIR (its config.json and weights)");
    return;
  }
  /* Another version's keys may mean other things (or be new): nothing more is worth reporting,
   * not even an unknown key. */
  if ((n = recap__spec_lookup(root, "version")) && !parse_version(L, n)) return;
  recap__spec_check_keys(L, root, keys, "the spec");
  if ((n = recap__spec_lookup(root, "name")) && recap__spec_get_string(L, n, "name", &spec->name)) {
    /* It heads one-line outputs (validate, plan, bench) and NVTX ranges: one short line, and
     * nothing that reorders or breaks a terminal's line. */
    unsigned code = layout_control(spec->name);
    if (strpbrk(spec->name, "\t\n")) {
      ERR(L, n->pos, "name: must be one line of text (no tab or newline)");
      spec->name = NULL;
    } else if (code) {
      ERR(L, n->pos, "name: holds U+%04X, a line separator or bidirectional control character",
          code);
      spec->name = NULL;
    } else if (strlen(spec->name) > MAX_SPEC_NAME_BYTES) {
      ERR(L, n->pos, "name: %zu bytes, more than %d", strlen(spec->name), MAX_SPEC_NAME_BYTES);
      spec->name = NULL;
    }
  }
  if ((n = recap__spec_lookup(root, "device"))) {
    if (!recap__spec_is_scalar(n) || recap_backend_parse(n->text, &spec->device) != RECAP_OK)
      ERR(L, n->pos, "device: expected cuda or host, got %s%s%.64s%s", recap__yaml_describe(n),
          recap__spec_is_scalar(n) ? " '" : "", recap__spec_is_scalar(n) ? n->text : "",
          recap__spec_is_scalar(n) ? "'" : "");
  }
  if ((n = recap__spec_lookup(root, "dtype")))
    recap__spec_get_dtype(L, n, "dtype", true, &spec->dtype);
  if ((n = recap__spec_lookup(root, "seed"))) {
    spec->seed_given = true;
    int64_t v;
    if (recap__spec_parse_int(n, &v) == INT_OVERFLOW && n->text[0] != '-') {
      /* Seeds use all 64 bits. */
      char *end;
      errno = 0;
      unsigned long long u = strtoull(n->text, &end, 10);
      if (errno || *end)
        ERR(L, n->pos, "seed: %.64s does not fit in 64 bits", n->text);
      else
        spec->seed = u;
    } else if (recap__spec_parse_int(n, &v) == INT_OK && v < 0) {
      ERR(L, n->pos, "seed: expected an integer from 0 to 2^64 - 1, got %lld", (long long)v);
    } else if (recap__spec_get_int(L, n, "seed", 0, INT64_MAX, &v)) {
      spec->seed = (uint64_t)v;
    }
  }
  if ((n = recap__spec_lookup(root, "dims"))) parse_dims(L, n);
  if ((n = recap__spec_lookup(root, "entries"))) parse_entries(L, n);
  if (L->oom) return;
  if (spec->options.entry && !spec->entry) {
    char names[256] = "";
    const char *list[33] = {0};
    for (size_t e = 0; e < spec->num_entries && e < 32; ++e) list[e] = spec->entries[e].name;
    recap__spec_join_names(list, names, sizeof names);
    OVERRIDE_ERR(L, "the spec has no entry '%.200s' (its entries: %s)", spec->options.entry,
                 spec->num_entries ? names : "none; `entries:` declares them");
    return;
  }
  /* Before any shape is read: a tensor is checked against the dims the caller runs with. */
  bool *aliased = calloc(spec->num_dims ? spec->num_dims : 1, sizeof *aliased);
  if (!aliased) {
    L->oom = true;
    return;
  }
  for (const char *const *d = spec->options.dims; d && *d && !L->oom && !L->bad_override[0]; ++d)
    override_dim(L, *d, aliased);
  if (!L->oom && !L->bad_override[0]) finish_dims(L, aliased);
  free(aliased);
  if (L->oom || L->bad_override[0]) return;

  const recap__yaml_node *tensors = recap__spec_lookup(root, "tensors"),
                         *ops = recap__spec_lookup(root, "ops");
  /* From here on the spec reads as if every block instance had been written out. */
  if (!recap__spec_expand_blocks(L, root, &tensors, &ops) || L->oom) return;
  size_t declared = tensors && tensors->kind == RECAP_YAML_MAPPING ? tensors->count : 0;
  size_t capacity = declared + 16;
  spec->tensors = calloc(capacity, sizeof *spec->tensors);
  if (!spec->tensors) {
    L->oom = true;
    return;
  }
  if ((n = recap__spec_lookup(root, "checkpoint"))) recap__spec_parse_checkpoint(L, n);
  if (L->oom) return;
  if (tensors) recap__spec_parse_tensors(L, tensors);
  if (L->oom) return;
  if (!ops)
    ERR(L, root->pos, "the spec has no `ops:` list");
  else
    recap__spec_parse_ops(L, ops, &capacity);
  if (L->oom) return;
  if ((n = recap__spec_lookup(root, "outputs"))) recap__spec_parse_outputs(L, n);
  if (L->oom) return;
  if ((n = recap__spec_lookup(root, "run"))) parse_run(L, n);
  if (spec->num_ops) recap__spec_check_usage(L);
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
  free(L.dim_aliases);
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
    recap__diag_error(d, (recap__src_pos){.file = path, .line = 1, .col = 1},
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
  char *dir = recap__path_folder(path);
  if (!dir) {
    free(text);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "out of memory reading %s", path);
  }
  recap_status rs = load(text, size, path, dir, &opts, out, diag);
  free(dir);
  free(text);
  return rs;
}

void recap__spec_destroy(recap__spec *spec) {
  if (!spec) return;
  for (size_t i = 0; i < spec->num_dims; ++i) free(spec->dims[i].values);
  free(spec->dims);
  free(spec->entries);
  for (size_t i = 0; i < spec->num_tensors; ++i) {
    free(spec->tensors[i].init.path);
    free(spec->tensors[i].init.key);
    free(spec->tensors[i].weights.keys);
    free(spec->tensors[i].weights.key_pos);
    free(spec->tensors[i].weights.rows);
    free(spec->tensors[i].weights.cols);
  }
  free(spec->tensors);
  for (size_t i = 0; i < spec->num_checkpoints; ++i)
    recap__checkpoint_destroy(spec->checkpoints[i]);
  free(spec->checkpoints);
  for (size_t i = 0; spec->ops && i < spec->num_ops; ++i)
    recap__expr_program_destroy((recap__expr_program *)spec->ops[i].attrs.expr);
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
