/* bench_gemm_grid.c: `recap bench-gemm`'s grids and their JSON files (bench_gemm.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_gemm.h"

/* The (N, K) pairs of the linears the importer writes (cli/hf_spec.c fuses q, k, v into one qkv
 * linear and gate, up into one gate_up), with the model's own activation. */
typedef struct {
  const char *label;
  int64_t n, k;
  const char *act;
} model_pair;

static const model_pair PAIRS[] = {
    {"llama3.2-1b.qkv", 3072, 2048, "silu"},       {"llama3.2-1b.o", 2048, 2048, "silu"},
    {"llama3.2-1b.gate_up", 16384, 2048, "silu"},  {"llama3.2-1b.down", 2048, 8192, "silu"},
    {"llama3.2-1b.lm_head", 128256, 2048, "silu"}, {"llama3-8b.qkv", 6144, 4096, "silu"},
    {"llama3-8b.o", 4096, 4096, "silu"},           {"llama3-8b.gate_up", 28672, 4096, "silu"},
    {"llama3-8b.down", 4096, 14336, "silu"},       {"llama3-8b.lm_head", 128256, 4096, "silu"},
    {"qwen2-7b.qkv", 4608, 3584, "silu"},          {"qwen2-7b.o", 3584, 3584, "silu"},
    {"qwen2-7b.gate_up", 37888, 3584, "silu"},     {"qwen2-7b.down", 3584, 18944, "silu"},
    {"qwen2-7b.lm_head", 152064, 3584, "silu"},    {"gpt2.c_attn", 2304, 768, "gelu_tanh"},
    {"gpt2.attn_proj", 768, 768, "gelu_tanh"},     {"gpt2.c_fc", 3072, 768, "gelu_tanh"},
    {"gpt2.mlp_proj", 768, 3072, "gelu_tanh"},
};
enum { NUM_PAIRS = sizeof PAIRS / sizeof PAIRS[0] };

static const int64_t MS[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
static const int64_t FEW_MS[] = {1, 16, 256, 4096};
static const char *const ACTS[] = {"none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"};
/* Indices into PAIRS: the epilogue group's four and the dtype group's eight. */
static const int EPILOGUE_PAIRS[] = {1, 7, 8, 18};
static const int DTYPE_PAIRS[] = {0, 1, 2, 3, 4, 6, 15, 17};

/* The H100's L2 is 50 MB: a point whose operands take less is cycled over copies that together
 * take at least COLD_BYTES, so each launch reads memory the previous ones evicted. */
static const double L2_BYTES = 50e6, COLD_BYTES = 120e6;
/* Rough H100 rates for choosing how many launches one event pair holds (both sides get the
 * same numbers from the grid file, so a rough guess costs nothing in fairness). */
static const double HBM_BPS = 3.0e12, LAUNCH_US = 3.0;

size_t bench_gemm_elem_bytes(const bench_gemm_point *p) {
  return strcmp(p->dtype, "f32") == 0 ? 4 : 2;
}

static int64_t round256(int64_t b) {
  return (b + 255) / 256 * 256;
}

bench_gemm_layout bench_gemm_point_layout(const bench_gemm_point *p) {
  const int64_t es = (int64_t)bench_gemm_elem_bytes(p);
  bench_gemm_layout l = {.bias = -1, .residual = -1};
  int64_t at = 0;
  l.x = at;
  at += round256(p->m * p->k * es);
  l.w = at;
  at += round256(p->n * p->k * es);
  if (p->bias) {
    l.bias = at;
    at += round256(p->n * es);
  }
  if (p->residual) {
    l.residual = at;
    at += round256(p->m * p->n * es);
  }
  l.out = at;
  at += round256(p->m * p->n * es);
  l.stride = at;
  return l;
}

/* chain, copies and samples from an estimate of the launch's time: small points are timed as
 * a chain of 100 launches per event pair, large ones with fewer (a pair then spans >= 2 ms). */
static void set_timing(bench_gemm_point *p) {
  const double flops = 2.0 * (double)p->m * (double)p->n * (double)p->k;
  const double rate = strcmp(p->dtype, "f32") != 0 ? 600e12 : p->tf32 ? 300e12 : 45e12;
  const bench_gemm_layout l = bench_gemm_point_layout(p);
  const double bytes = (double)l.stride;
  const double us = fmax(flops / rate, bytes / HBM_BPS) * 1e6 + LAUNCH_US;
  p->chain = us <= 20 ? 100 : (int)fmin(100, ceil(2000 / us));
  p->copies = 1;
  if (bytes < L2_BYTES) {
    p->copies = (int)ceil(COLD_BYTES / bytes);
    if (p->copies > p->chain) p->copies = p->chain;
  }
  p->samples = us * p->chain > 5000 ? 5 : 9;
}

typedef struct {
  bench_gemm_grid *g;
  size_t cap;
  bool oom;
} builder;

static void add(builder *b, const char *group, const char *label, const char *dtype, bool tf32,
                int64_t m, int64_t n, int64_t k, const char *act, bool bias, bool residual) {
  if (b->oom) return;
  if (b->g->count == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 256;
    bench_gemm_point *np = realloc(b->g->points, cap * sizeof *np);
    if (!np) {
      b->oom = true;
      return;
    }
    b->g->points = np;
    b->cap = cap;
  }
  bench_gemm_point *p = &b->g->points[b->g->count];
  memset(p, 0, sizeof *p);
  p->id = (int)b->g->count;
  snprintf(p->group, sizeof p->group, "%s", group);
  snprintf(p->label, sizeof p->label, "%s", label);
  snprintf(p->dtype, sizeof p->dtype, "%s", dtype);
  snprintf(p->act, sizeof p->act, "%s", act);
  p->tf32 = tf32;
  p->m = m;
  p->n = n;
  p->k = k;
  p->bias = bias;
  p->residual = residual;
  set_timing(p);
  b->g->count++;
}

static void make_full(builder *b) {
  for (int pi = 0; pi < NUM_PAIRS; pi++)
    for (size_t mi = 0; mi < sizeof MS / sizeof MS[0]; mi++) {
      const model_pair *q = &PAIRS[pi];
      add(b, "model", q->label, "bf16", false, MS[mi], q->n, q->k, "none", false, false);
      add(b, "model", q->label, "bf16", false, MS[mi], q->n, q->k, q->act, true, false);
      add(b, "model", q->label, "bf16", false, MS[mi], q->n, q->k, "none", true, true);
    }
  for (size_t e = 0; e < sizeof EPILOGUE_PAIRS / sizeof EPILOGUE_PAIRS[0]; e++)
    for (size_t a = 0; a < sizeof ACTS / sizeof ACTS[0]; a++)
      for (int extras = 0; extras < 4; extras++)
        for (size_t mi = 0; mi < sizeof FEW_MS / sizeof FEW_MS[0]; mi++) {
          const model_pair *q = &PAIRS[EPILOGUE_PAIRS[e]];
          add(b, "epilogue", q->label, "bf16", false, FEW_MS[mi], q->n, q->k, ACTS[a], extras & 1,
              (extras & 2) != 0);
        }
  static const struct {
    const char *dtype;
    bool tf32;
  } dts[] = {{"f16", false}, {"f32", true}, {"f32", false}};
  for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++)
    for (size_t e = 0; e < sizeof DTYPE_PAIRS / sizeof DTYPE_PAIRS[0]; e++)
      for (size_t mi = 0; mi < sizeof FEW_MS / sizeof FEW_MS[0]; mi++) {
        const model_pair *q = &PAIRS[DTYPE_PAIRS[e]];
        add(b, "dtype", q->label, dts[d].dtype, dts[d].tf32, FEW_MS[mi], q->n, q->k, "none", false,
            false);
      }
}

/* Small enough for the host backend's reference loop: two Ms, two pairs, the three epilogues,
 * one activation x bias x residual row and an f32 point. */
static void make_tiny(builder *b) {
  static const int64_t ms[] = {1, 4};
  for (size_t mi = 0; mi < 2; mi++) {
    add(b, "model", "tiny.a", "bf16", false, ms[mi], 64, 32, "none", false, false);
    add(b, "model", "tiny.a", "bf16", false, ms[mi], 64, 32, "silu", true, false);
    add(b, "model", "tiny.a", "bf16", false, ms[mi], 64, 32, "none", true, true);
    add(b, "model", "tiny.b", "bf16", false, ms[mi], 48, 64, "none", false, false);
    add(b, "model", "tiny.b", "bf16", false, ms[mi], 48, 64, "gelu_tanh", true, false);
    add(b, "model", "tiny.b", "bf16", false, ms[mi], 48, 64, "none", true, true);
  }
  add(b, "epilogue", "tiny.a", "bf16", false, 4, 64, 32, "gelu", true, true);
  add(b, "dtype", "tiny.a", "f32", false, 4, 64, 32, "none", false, false);
  for (size_t i = 0; i < b->g->count; i++) {
    /* The host computes on the CPU: a few launches are enough to exercise the timing code. */
    b->g->points[i].chain = 2;
    b->g->points[i].copies = 2;
    b->g->points[i].samples = 3;
  }
}

bool bench_gemm_grid_make(const char *name, bench_gemm_grid *out) {
  memset(out, 0, sizeof *out);
  builder b = {.g = out};
  if (strcmp(name, "full") == 0)
    make_full(&b);
  else if (strcmp(name, "tiny") == 0)
    make_tiny(&b);
  else {
    fprintf(stderr, "recap bench-gemm: unknown grid '%s' (full, tiny or a .json file)\n", name);
    return false;
  }
  if (b.oom) {
    fprintf(stderr, "recap bench-gemm: out of memory building the grid\n");
    bench_gemm_grid_free(out);
    return false;
  }
  snprintf(out->name, sizeof out->name, "%s", name);
  return true;
}

void bench_gemm_grid_free(bench_gemm_grid *grid) {
  free(grid->points);
  memset(grid, 0, sizeof *grid);
}

json_t *bench_gemm_point_json(const bench_gemm_point *p) {
  json_t *o = json_object();
  json_object_set_new(o, "id", json_integer(p->id));
  json_object_set_new(o, "group", json_string(p->group));
  json_object_set_new(o, "label", json_string(p->label));
  json_object_set_new(o, "dtype", json_string(p->dtype));
  json_object_set_new(o, "tf32", json_boolean(p->tf32));
  json_object_set_new(o, "m", json_integer(p->m));
  json_object_set_new(o, "n", json_integer(p->n));
  json_object_set_new(o, "k", json_integer(p->k));
  json_object_set_new(o, "act", json_string(p->act));
  json_object_set_new(o, "bias", json_boolean(p->bias));
  json_object_set_new(o, "residual", json_boolean(p->residual));
  json_object_set_new(o, "chain", json_integer(p->chain));
  json_object_set_new(o, "copies", json_integer(p->copies));
  json_object_set_new(o, "samples", json_integer(p->samples));
  return o;
}

json_t *bench_gemm_grid_json(const bench_gemm_grid *grid) {
  json_t *root = json_object(), *pts = json_array();
  json_object_set_new(root, "grid", json_string(grid->name));
  json_object_set_new(root, "layout",
                      json_string("per copy: x, weight, bias?, residual?, out, each rounded up "
                                  "to 256 bytes; copy c at c * stride"));
  for (size_t i = 0; i < grid->count; i++)
    json_array_append_new(pts, bench_gemm_point_json(&grid->points[i]));
  json_object_set_new(root, "points", pts);
  return root;
}

static bool text_field(json_t *o, const char *key, char *dst, size_t size, const char *const *ok) {
  const char *s = json_string_value(json_object_get(o, key));
  if (!s || strlen(s) >= size) return false;
  if (ok) {
    bool found = false;
    for (int i = 0; ok[i]; i++) found |= strcmp(ok[i], s) == 0;
    if (!found) return false;
  }
  snprintf(dst, size, "%s", s);
  return true;
}

static bool int_field(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *dst) {
  json_t *v = json_object_get(o, key);
  if (!json_is_integer(v)) return false;
  const json_int_t x = json_integer_value(v);
  if (x < lo || x > hi) return false;
  *dst = x;
  return true;
}

/* Reads one point; NULL when it is well-formed, else the name of the first bad field. */
static const char *read_point(json_t *o, bench_gemm_point *p) {
  static const char *const groups[] = {"model", "epilogue", "dtype", NULL};
  static const char *const dtypes[] = {"bf16", "f16", "f32", NULL};
  static const char *const acts[] = {"none", "relu",    "gelu", "gelu_tanh",
                                     "silu", "sigmoid", "tanh", NULL};
  int64_t v;
  memset(p, 0, sizeof *p);
  if (!json_is_object(o)) return "(point is not an object)";
  if (!int_field(o, "id", 0, 1 << 24, &v)) return "id";
  p->id = (int)v;
  if (!text_field(o, "group", p->group, sizeof p->group, groups)) return "group";
  if (!text_field(o, "label", p->label, sizeof p->label, NULL)) return "label";
  if (!text_field(o, "dtype", p->dtype, sizeof p->dtype, dtypes)) return "dtype";
  if (!text_field(o, "act", p->act, sizeof p->act, acts)) return "act";
  if (!int_field(o, "m", 1, 1 << 20, &p->m)) return "m";
  if (!int_field(o, "n", 1, 1 << 20, &p->n)) return "n";
  if (!int_field(o, "k", 1, 1 << 20, &p->k)) return "k";
  json_t *b;
  if (!json_is_boolean(b = json_object_get(o, "tf32"))) return "tf32";
  p->tf32 = json_is_true(b);
  if (!json_is_boolean(b = json_object_get(o, "bias"))) return "bias";
  p->bias = json_is_true(b);
  if (!json_is_boolean(b = json_object_get(o, "residual"))) return "residual";
  p->residual = json_is_true(b);
  if (!int_field(o, "chain", 1, 1000, &v)) return "chain";
  p->chain = (int)v;
  if (!int_field(o, "copies", 1, 1000, &v) || v > p->chain) return "copies";
  p->copies = (int)v;
  if (!int_field(o, "samples", 1, 1000, &v)) return "samples";
  p->samples = (int)v;
  return NULL;
}

bool bench_gemm_grid_read(const char *path, bench_gemm_grid *out) {
  memset(out, 0, sizeof *out);
  json_error_t err;
  json_t *root = json_load_file(path, 0, &err);
  if (!root) {
    fprintf(stderr, "recap bench-gemm: %s:%d: %s\n", path, err.line, err.text);
    return false;
  }
  json_t *pts = json_object_get(root, "points");
  bool ok = json_is_array(pts) && json_array_size(pts) > 0;
  if (!ok) fprintf(stderr, "recap bench-gemm: %s: no \"points\" array\n", path);
  if (ok && !(out->points = calloc(json_array_size(pts), sizeof *out->points))) {
    fprintf(stderr, "recap bench-gemm: out of memory reading %s\n", path);
    ok = false;
  }
  for (size_t i = 0; ok && i < json_array_size(pts); i++) {
    const char *bad = read_point(json_array_get(pts, i), &out->points[i]);
    if (bad) {
      fprintf(stderr, "recap bench-gemm: %s: point %zu: field '%s' is missing or invalid\n", path,
              i, bad);
      ok = false;
    }
    out->count = i + 1;
  }
  if (ok) {
    const char *slash = strrchr(path, '/');
    snprintf(out->name, sizeof out->name, "%s", slash ? slash + 1 : path);
  } else {
    bench_gemm_grid_free(out);
  }
  json_decref(root);
  return ok;
}
