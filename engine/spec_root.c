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

static void parse_dims(loader *L, const recap__yaml_node *node) {
  recap__spec *spec = L->spec;
  if (!recap__spec_expect_kind(L, node, RECAP_YAML_MAPPING, "dims")) return;
  recap__spec_check_keys(L, node, NULL, "dims");
  spec->dims = calloc(node->count ? node->count : 1, sizeof *spec->dims);
  if (!spec->dims) {
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
    char what[MAX_NAME_BYTES + 32];
    snprintf(what, sizeof what, "dim '%s'", d->name);
    if (read_dim_values(L, v, what, &d->values, &d->count, &d->bucketed) && d->bucketed) {
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
}

/* One entry's `dims:`: checked like the spec's own (declared names, valid values, one
 * bucketed dim at most once applied); applied when `apply` (the entry the caller chose). */
static void entry_dims(loader *L, const char *entry, const recap__yaml_node *dims, bool apply) {
  recap__spec *spec = L->spec;
  char context[MAX_NAME_BYTES + 32];
  snprintf(context, sizeof context, "entry '%s': dims", entry);
  if (!recap__spec_expect_kind(L, dims, RECAP_YAML_MAPPING, context)) return;
  recap__spec_check_keys(L, dims, NULL, context);
  /* Which dims hold buckets once the entry's values replace the spec's. */
  bool *bucketed = calloc(spec->num_dims ? spec->num_dims : 1, sizeof *bucketed);
  if (!bucketed) {
    L->oom = true;
    return;
  }
  for (size_t d = 0; d < spec->num_dims; ++d) bucketed[d] = spec->dims[d].bucketed;
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
    char what[2 * MAX_NAME_BYTES + 32];
    snprintf(what, sizeof what, "entry '%s': dim '%s'", entry, name);
    int64_t *values;
    size_t count;
    bool list;
    if (!read_dim_values(L, dims->items[i], what, &values, &count, &list)) {
      ok = false;
      continue;
    }
    bucketed[d] = list;
    if (apply) {
      free(spec->dims[d].values);
      spec->dims[d].values = values;
      spec->dims[d].count = count;
      spec->dims[d].bucketed = list;
    } else {
      free(values);
    }
  }
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
  if (!spec->entries) {
    L->oom = true;
    return;
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
      entry_dims(L, name, dims, chosen);
    if (chosen) spec->entry = name;
    spec->entries[spec->num_entries++] = (recap__spec_entry){name, k->pos};
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

static void parse_root(loader *L, const recap__yaml_node *root) {
  static const char *const keys[] = {"name",    "device", "dtype",      "seed",    "dims",
                                     "entries", "blocks", "checkpoint", "tensors", "ops",
                                     "outputs", "run",    NULL};
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
  recap__spec_check_keys(L, root, keys, "the spec");

  const recap__yaml_node *n;
  if ((n = recap__spec_lookup(root, "name")) && recap__spec_get_string(L, n, "name", &spec->name) &&
      strpbrk(spec->name, "\t\n")) {
    /* It heads one-line outputs (validate, plan, bench) and NVTX ranges. */
    ERR(L, n->pos, "name: must be one line of text (no tab or newline)");
    spec->name = NULL;
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
  for (const char *const *d = spec->options.dims; d && *d && !L->oom && !L->bad_override[0]; ++d)
    override_dim(L, *d);
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
