/*
 * pipeline_weights_test.c: params loaded from checkpoints (engine/checkpoint.h,
 * engine/weight_plan.h, engine/weight_load.h): every dtype, sharded checkpoints through
 * model.safetensors.index.json, transposed, concatenated and cast loads, row and column
 * ranges, one header parse per file, hostile index files and headers, files changed or
 * truncated between the spec check and the load, and the spec positions every error carries.
 * The loads run on the host backend and, with a GPU, on CUDA; the checks of files and specs
 * are backend-free and run on the host only. The test writes its .safetensors files itself
 * (8-byte length, JSON header, data).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/checkpoint.h"
#include "engine/weight_load.h"
#include "tests/pipeline_util.h"

static char g_dir[256];

/* ---- writing checkpoints ---- */

typedef struct {
  const char *name, *dtype;
  int ndim;
  int64_t shape[4];
  const void *data;
  size_t bytes;
} st_tensor;

static void path_in(char *out, size_t size, const char *name) {
  snprintf(out, size, "%s/%s", g_dir, name);
}

static void write_bytes(const char *name, const void *data, size_t bytes) {
  char path[512];
  path_in(path, sizeof path, name);
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(data, 1, bytes, f), bytes);
  fclose(f);
}

/* A .safetensors file holding the tensors in order. */
static void write_st(const char *name, const st_tensor *t, int n) {
  char header[4096];
  size_t used = (size_t)snprintf(header, sizeof header, "{\"__metadata__\":{\"format\":\"pt\"}");
  size_t offset = 0, total = 0;
  for (int i = 0; i < n; ++i) {
    used += (size_t)snprintf(header + used, sizeof header - used,
                             ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name, t[i].dtype);
    for (int d = 0; d < t[i].ndim; ++d)
      used += (size_t)snprintf(header + used, sizeof header - used, "%s%lld", d ? "," : "",
                               (long long)t[i].shape[d]);
    used += (size_t)snprintf(header + used, sizeof header - used, "],\"data_offsets\":[%zu,%zu]}",
                             offset, offset + t[i].bytes);
    offset += t[i].bytes;
  }
  used += (size_t)snprintf(header + used, sizeof header - used, "}");
  CU_ASSERT_FATAL(used < sizeof header);
  total = 8 + used + offset;
  unsigned char *buf = malloc(total);
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
  for (int i = 0; i < 8; ++i) buf[i] = (unsigned char)((uint64_t)used >> (8 * i));
  memcpy(buf + 8, header, used);
  size_t at = 8 + used;
  for (int i = 0; i < n; ++i) {
    memcpy(buf + at, t[i].data, t[i].bytes);
    at += t[i].bytes;
  }
  write_bytes(name, buf, total);
  free(buf);
}

static void make_dir(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/recap_weights_test_XXXXXX");
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(g_dir));
}

static void remove_dir(void) {
  char cmd[320];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  CU_ASSERT_EQUAL(system(cmd), 0);
}

/* ---- pipelines over a spec whose params are outputs ---- */

/* A spec with one trivial op: `params` is the tensors: mapping (params listed in outputs). */
static recap_status create(const char *top, const char *params, const char *outputs,
                           recap_pipeline **p) {
  char yaml[4096];
  snprintf(yaml, sizeof yaml,
           "name: weights\n%s"
           "tensors:\n  x: {shape: [1], role: input}\n%s"
           "ops:\n  - {op: relu, in: [x], out: y}\n"
           "outputs: [y, %s]\n",
           top, params, outputs);
  recap_pipeline_options o = opts_on(test_device);
  o.base_dir = g_dir;
  o.override_mode = 1;
  o.mode = RECAP_MODE_EAGER;
  *p = NULL;
  return recap_pipeline_create_string(yaml, strlen(yaml), "w.yaml", &o, p);
}

static void expect_bytes(recap_pipeline *p, const char *name, const void *want, size_t bytes) {
  void *got = malloc(bytes);
  CU_ASSERT_PTR_NOT_NULL_FATAL(got);
  CHECK_OK(recap_pipeline_copy_out(p, name, got, bytes, 0));
  int same = memcmp(got, want, bytes) == 0;
  if (!same) fprintf(stderr, "\n  tensor '%s' differs from its expected bytes\n", name);
  CU_ASSERT_TRUE(same);
  free(got);
}

static void fill_f32(float *x, size_t n, float scale) {
  for (size_t i = 0; i < n; ++i) x[i] = scale * (float)((int)(i * 37 % 101) - 50);
}

/* ---- loads ---- */

static void test_every_dtype_round_trips_with_one_header_parse(void) {
  make_dir();
  float f32[6];
  uint16_t f16[6], bf16[6];
  int32_t i32[6];
  int64_t i64[6];
  for (int i = 0; i < 6; ++i) {
    f32[i] = (float)i * 0.5f - 1.25f;
    f16[i] = recap__f32_to_f16(f32[i]);
    bf16[i] = recap__f32_to_bf16(f32[i]);
    i32[i] = -3 + i * 1000003;
    i64[i] = (int64_t)i * 4000000000ll - 7;
  }
  const st_tensor t[] = {
      {"a", "F32", 2, {2, 3}, f32, sizeof f32},    {"b", "F16", 2, {2, 3}, f16, sizeof f16},
      {"c", "BF16", 2, {2, 3}, bf16, sizeof bf16}, {"d", "I32", 1, {6}, i32, sizeof i32},
      {"e", "I64", 1, {6}, i64, sizeof i64},
  };
  write_st("all.safetensors", t, 5);
  const char *params =
      "  a: {shape: [2, 3], role: param, path: all.safetensors}\n"
      "  b: {shape: [2, 3], dtype: f16, role: param, path: all.safetensors}\n"
      "  c: {shape: [2, 3], dtype: bf16, role: param, path: all.safetensors}\n"
      "  d: {shape: [6], dtype: i32, role: param, path: all.safetensors}\n"
      "  e: {shape: [6], dtype: i64, role: param, path: all.safetensors}\n"
      "  a2: {shape: [3, 2], role: param, path: all.safetensors, key: a}\n";
  size_t parses = recap__safetensors_parses();
  recap_pipeline *p;
  /* a2 reads a [2, 3] tensor as [3, 2]: a shape mismatch, named at its path. */
  CHECK_STATUS(create("", params, "a, b, c, d, e, a2", &p), RECAP_STATUS_SPEC_ERROR);
  CHECK_ERROR_MENTIONS("w.yaml:9:42: error: ");
  CHECK_ERROR_MENTIONS("has another shape than the spec's");
  const char *good =
      "  a: {shape: [2, 3], role: param, path: all.safetensors}\n"
      "  b: {shape: [2, 3], dtype: f16, role: param, path: all.safetensors}\n"
      "  c: {shape: [2, 3], dtype: bf16, role: param, path: all.safetensors}\n"
      "  d: {shape: [6], dtype: i32, role: param, path: all.safetensors}\n"
      "  e: {shape: [6], dtype: i64, role: param, path: all.safetensors}\n";
  parses = recap__safetensors_parses();
  CHECK_OK(create("", good, "a, b, c, d, e", &p));
  /* Five tensors of one file: its header was parsed once, by the spec check; the binder only
   * re-checked its bytes. */
  CU_ASSERT_EQUAL(recap__safetensors_parses() - parses, 1);
  expect_bytes(p, "a", f32, sizeof f32);
  expect_bytes(p, "b", f16, sizeof f16);
  expect_bytes(p, "c", bf16, sizeof bf16);
  expect_bytes(p, "d", i32, sizeof i32);
  expect_bytes(p, "e", i64, sizeof i64);
  CHECK_OK(recap_pipeline_destroy(p));
  remove_dir();
}

/* model.safetensors.index.json over two shards, named by a top-level checkpoint: (the folder)
 * and by a tensor's path: (the index file itself). */
static void test_sharded_checkpoint_loads_through_its_index(void) {
  make_dir();
  float w1[8], w2[12], w3[4];
  fill_f32(w1, 8, 0.25f);
  fill_f32(w2, 12, -0.5f);
  fill_f32(w3, 4, 2.0f);
  const st_tensor s1[] = {{"layers.0.w", "F32", 2, {2, 4}, w1, sizeof w1},
                          {"layers.1.w", "F32", 2, {3, 4}, w2, sizeof w2}};
  const st_tensor s2[] = {{"head.w", "F32", 1, {4}, w3, sizeof w3}};
  write_st("model-00001-of-00002.safetensors", s1, 2);
  write_st("model-00002-of-00002.safetensors", s2, 1);
  const char *index =
      "{\"metadata\": {\"total_size\": 96}, \"weight_map\": {"
      "\"layers.0.w\": \"model-00001-of-00002.safetensors\","
      "\"layers.1.w\": \"model-00001-of-00002.safetensors\","
      "\"head.w\": \"model-00002-of-00002.safetensors\"}}";
  write_bytes("model.safetensors.index.json", index, strlen(index));
  const char *params =
      "  l0: {shape: [2, 4], role: param, key: layers.0.w}\n"
      "  l1: {shape: [3, 4], role: param, key: layers.1.w}\n"
      "  h: {shape: [4], role: param, path: model.safetensors.index.json, key: head.w}\n";
  size_t parses = recap__safetensors_parses();
  recap_pipeline *p;
  CHECK_OK(create("checkpoint: .\n", params, "l0, l1, h", &p));
  /* Two shards, each parsed once, though the folder and its index are named separately. */
  CU_ASSERT_EQUAL(recap__safetensors_parses() - parses, 2);
  expect_bytes(p, "l0", w1, sizeof w1);
  expect_bytes(p, "l1", w2, sizeof w2);
  expect_bytes(p, "h", w3, sizeof w3);
  CHECK_OK(recap_pipeline_destroy(p));
  remove_dir();
}

/* q/k/v concatenated along axis 0 (chunked path) and axis 1 (host image), a transpose, row and
 * column ranges, each compared with the hand-made result. */
static void test_transpose_concat_and_ranges_give_the_hand_computed_tensors(void) {
  make_dir();
  float q[4 * 6], k[4 * 6], v[4 * 6], w[3 * 5];
  fill_f32(q, 24, 1.0f);
  fill_f32(k, 24, 2.0f);
  fill_f32(v, 24, -3.0f);
  fill_f32(w, 15, 0.5f);
  const st_tensor t[] = {{"q", "F32", 2, {4, 6}, q, sizeof q},
                         {"k", "F32", 2, {4, 6}, k, sizeof k},
                         {"v", "F32", 2, {4, 6}, v, sizeof v},
                         {"w", "F32", 2, {3, 5}, w, sizeof w}};
  write_st("m.safetensors", t, 4);
  const char *params =
      "  qkv: {shape: [12, 6], role: param, key: [q, k, v]}\n"
      "  qkv1: {shape: [4, 18], role: param, key: [q, k, v], concat: 1}\n"
      "  wt: {shape: [5, 3], role: param, key: w, transpose: true}\n"
      "  wr: {shape: [2, 5], role: param, key: w, rows: [1, 3]}\n"
      "  wc: {shape: [3, 2], role: param, key: w, cols: [2, 4]}\n"
      "  wrct: {shape: [3, 2], role: param, key: w, rows: [1, 3], cols: [1, 4], transpose: true}\n"
      "  qkr: {shape: [2, 6], role: param, key: [q, k], rows: [D, 3]}\n"
      "  qkt: {shape: [6, 8], role: param, key: [q, k], transpose: true, concat: -1}\n"
      "  qkvr: {shape: [4, 6], role: param, key: [q, k, v], rows: [[0, D], [3, 4], [D, 3]]}\n"
      "  qkc: {shape: [4, 5], role: param, key: [q, k], concat: 1, cols: [[0, 3], [4, 6]]}\n";
  recap_pipeline *p;
  CHECK_OK(create("dims: {D: 2}\ncheckpoint: m.safetensors\n", params,
                  "qkv, qkv1, wt, wr, wc, wrct, qkr, qkt, qkvr, qkc", &p));
  float want[72];
  const float *src[] = {q, k, v};
  for (int s = 0; s < 3; ++s) memcpy(want + s * 24, src[s], sizeof q);
  expect_bytes(p, "qkv", want, 72 * sizeof(float));
  for (int r = 0; r < 4; ++r)
    for (int s = 0; s < 3; ++s)
      for (int c = 0; c < 6; ++c) want[r * 18 + s * 6 + c] = src[s][r * 6 + c];
  expect_bytes(p, "qkv1", want, 72 * sizeof(float));
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 3; ++c) want[r * 3 + c] = w[c * 5 + r];
  expect_bytes(p, "wt", want, 15 * sizeof(float));
  expect_bytes(p, "wr", w + 5, 10 * sizeof(float));
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 2; ++c) want[r * 2 + c] = w[r * 5 + 2 + c];
  expect_bytes(p, "wc", want, 6 * sizeof(float));
  /* rows 1..2, cols 1..3 of w ([2, 3]), transposed to [3, 2]. */
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 2; ++c) want[r * 2 + c] = w[(1 + c) * 5 + 1 + r];
  expect_bytes(p, "wrct", want, 6 * sizeof(float));
  memcpy(want, q + 2 * 6, 6 * sizeof(float));
  memcpy(want + 6, k + 2 * 6, 6 * sizeof(float));
  expect_bytes(p, "qkr", want, 12 * sizeof(float));
  /* q^T [6, 4] and k^T [6, 4] side by side: [6, 8]. */
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 8; ++c) want[r * 8 + c] = c < 4 ? q[c * 6 + r] : k[(c - 4) * 6 + r];
  expect_bytes(p, "qkt", want, 48 * sizeof(float));
  /* Per-key rows (tensor parallelism's q, k, v of one rank): q's rows 0..1, k's row 3, v's
   * row 2. */
  memcpy(want, q, 12 * sizeof(float));
  memcpy(want + 12, k + 3 * 6, 6 * sizeof(float));
  memcpy(want + 18, v + 2 * 6, 6 * sizeof(float));
  expect_bytes(p, "qkvr", want, 24 * sizeof(float));
  /* Per-key cols: q's columns 0..2 next to k's columns 4..5, each row. */
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 5; ++c) want[r * 5 + c] = c < 3 ? q[r * 6 + c] : k[r * 6 + 4 + c - 3];
  expect_bytes(p, "qkc", want, 20 * sizeof(float));
  CHECK_OK(recap_pipeline_destroy(p));
  remove_dir();
}

/* Casts round to nearest even; i64 -> i32 checks the range; float <-> int is refused. */
static void test_casts_round_to_nearest_even_and_check_ranges(void) {
  make_dir();
  /* f32 -> f16: ties go to the even neighbour; 65519 rounds down to 65504, 65520 to inf. */
  const float f32[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65519.0f, 65520.0f, -0.1f, 0x1p-25f};
  const uint16_t f16_want[] = {0x3c00, 0x3c02, 0x7bff, 0x7c00, 0xae66, 0x0000};
  /* f32 -> bf16: 1 + 2^-8 is a tie (to 1), 1 + 3 * 2^-8 a tie (to 1 + 2^-6). */
  const float f32b[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, 3.0e38f};
  const uint16_t bf16_want[] = {0x3f80, 0x3f82, 0xc020, 0x7f62};
  uint16_t bf16[5];
  float bf16_as_f32[5];
  for (int i = 0; i < 5; ++i) {
    bf16[i] = (uint16_t)(0x3f80 + i * 0x0123);
    bf16_as_f32[i] = recap__bf16_to_f32(bf16[i]);
  }
  const int64_t i64[] = {-2147483648ll, 2147483647ll, 5, -6};
  const int32_t i32_want[] = {INT32_MIN, INT32_MAX, 5, -6};
  const int64_t i64_big[] = {1, 2147483648ll};
  const st_tensor t[] = {{"f", "F32", 1, {6}, f32, sizeof f32},
                         {"fb", "F32", 1, {4}, f32b, sizeof f32b},
                         {"b", "BF16", 1, {5}, bf16, sizeof bf16},
                         {"l", "I64", 1, {4}, i64, sizeof i64},
                         {"big", "I64", 1, {2}, i64_big, sizeof i64_big}};
  write_st("c.safetensors", t, 5);
  const char *params =
      "  h: {shape: [6], dtype: f16, role: param, key: f, cast: true}\n"
      "  hb: {shape: [4], dtype: bf16, role: param, key: fb, cast: true}\n"
      "  w: {shape: [5], dtype: f32, role: param, key: b, cast: true}\n"
      "  i: {shape: [4], dtype: i32, role: param, key: l, cast: true}\n";
  recap_pipeline *p;
  CHECK_OK(create("checkpoint: c.safetensors\n", params, "h, hb, w, i", &p));
  expect_bytes(p, "h", f16_want, sizeof f16_want);
  expect_bytes(p, "hb", bf16_want, sizeof bf16_want);
  expect_bytes(p, "w", bf16_as_f32, sizeof bf16_as_f32);
  expect_bytes(p, "i", i32_want, sizeof i32_want);
  CHECK_OK(recap_pipeline_destroy(p));

  /* Without cast: a dtype error at the key (no path), naming the file and both dtypes. */
  CHECK_STATUS(create("checkpoint: c.safetensors\n",
                      "  w: {shape: [5], dtype: f32, role: param, key: b}\n", "w", &p),
               RECAP_STATUS_SPEC_ERROR);
  CHECK_ERROR_MENTIONS("w.yaml:5:49: error: ");
  CHECK_ERROR_MENTIONS(
      "tensor 'b' has dtype BF16, the spec says f32 (F32); cast: true converts it");
  /* Float to int is refused even with cast, at the cast key. */
  CHECK_STATUS(create("checkpoint: c.safetensors\n",
                      "  w: {shape: [5], dtype: i32, role: param, key: b, cast: true}\n", "w", &p),
               RECAP_STATUS_SPEC_ERROR);
  CHECK_ERROR_MENTIONS("w.yaml:5:58: error: ");
  CHECK_ERROR_MENTIONS("cast cannot convert BF16 to i32");
  /* An i64 outside i32's range fails the load, naming the tensor's spec position. */
  CHECK_STATUS(
      create("checkpoint: c.safetensors\n",
             "  w: {shape: [2], dtype: i32, role: param, key: big, cast: true}\n", "w", &p),
      RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("w.yaml:5:49: error: initializing tensor 'w': ");
  CHECK_ERROR_MENTIONS("element [1] does not fit i32");
  remove_dir();
}

/* A NaN anywhere in a float weight fails the load, naming the file, the key and the element's
 * coordinates: in the first block the scan looks at, past it, in the tail of a length that is
 * no whole number of 64-bit words, in a later staging chunk, and with its sign bit set.
 * Infinities load (an additive mask holds them on purpose). */
static void test_nan_weights_are_refused_naming_the_element(void) {
  make_dir();
  enum { BIG_R = 1100, BIG_C = 2000 }; /* 4.4 MB of bf16: two 4 MiB staging chunks */
  uint16_t *big = calloc((size_t)BIG_R * BIG_C, sizeof *big);
  CU_ASSERT_PTR_NOT_NULL_FATAL(big);
  uint16_t b[3 * 700] = {0};
  b[0] = 0x7f80, b[1] = 0xff80; /* +inf and -inf: loaded */
  uint16_t h[7] = {0x7c00, 0xfc00, 0x3c00, 0, 0, 0, 0};
  uint32_t f[3] = {0x7f800000u, 0x3f800000u, 0};
  const st_tensor t[] = {{"b", "BF16", 2, {3, 700}, b, sizeof b},
                         {"h", "F16", 1, {7}, h, sizeof h},
                         {"f", "F32", 1, {3}, f, sizeof f},
                         {"big", "BF16", 2, {BIG_R, BIG_C}, big, (size_t)BIG_R * BIG_C * 2}};
  /* Each tensor read as stored (scanned after the read), cast (found by the conversion: the
   * bf16 -> f32 loop and the general one), and assembled in a host image (a transpose, a row
   * range whose coordinates count from the tensor's first row). */
  const char *params[] = {
      "  b: {shape: [3, 700], dtype: bf16, role: param, key: b}\n"
      "  h: {shape: [7], dtype: f16, role: param, key: h}\n"
      "  f: {shape: [3], dtype: f32, role: param, key: f}\n"
      "  big: {shape: [1100, 2000], dtype: bf16, role: param, key: big}\n",
      "  b: {shape: [3, 700], dtype: f32, role: param, key: b, cast: true}\n"
      "  h: {shape: [7], dtype: f32, role: param, key: h, cast: true}\n"
      "  f: {shape: [3], dtype: bf16, role: param, key: f, cast: true}\n"
      "  big: {shape: [1100, 2000], dtype: f32, role: param, key: big, cast: true}\n",
      "  b: {shape: [700, 3], dtype: bf16, role: param, key: b, transpose: true}\n"
      "  h: {shape: [7], dtype: f16, role: param, key: h}\n"
      "  f: {shape: [3], dtype: f32, role: param, key: f}\n"
      "  big: {shape: [2000, 1100], dtype: f32, role: param, key: big, transpose: true, "
      "cast: true}\n",
  };
  recap_pipeline *p = NULL;
  write_st("n.safetensors", t, 4);
  for (int v = 0; v < 3; ++v) {
    CHECK_OK(create("checkpoint: n.safetensors\n", params[v], "b, h, f, big", &p));
    if (v == 0) {
      expect_bytes(p, "b", b, sizeof b);
      expect_bytes(p, "h", h, sizeof h);
    }
    CHECK_OK(recap_pipeline_destroy(p));
  }
  static const struct {
    int tensor; /* in t */
    size_t element;
    uint32_t nan;
    const char *says;
  } cases[] = {
      {0, 3, 0x7fc0, "key 'b': element [0, 3] is NaN"},
      {0, 2099, 0xffc1, "key 'b': element [2, 699] is NaN"}, /* past the first block */
      {1, 6, 0x7c01, "key 'h': element [6] is NaN"},         /* the tail, a signalling NaN */
      {2, 2, 0xffc00001u, "key 'f': element [2] is NaN"},
      {3, 1000001, 0xff80 | 0x40, "key 'big': element [500, 1] is NaN"}, /* block 489 */
      {3, (size_t)BIG_R * BIG_C - 1, 0x7fff, "key 'big': element [1099, 1999] is NaN"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    void *data = (void *)t[cases[c].tensor].data;
    if (cases[c].tensor == 2)
      ((uint32_t *)data)[cases[c].element] = cases[c].nan;
    else
      ((uint16_t *)data)[cases[c].element] = (uint16_t)cases[c].nan;
    write_st("n.safetensors", t, 4);
    for (int v = 0; v < 3; ++v) {
      CHECK_STATUS(create("checkpoint: n.safetensors\n", params[v], "b, h, f, big", &p),
                   RECAP_STATUS_INVALID_ARGUMENT);
      CHECK_ERROR_MENTIONS(cases[c].says);
      CHECK_ERROR_MENTIONS("n.safetensors");
      CHECK_ERROR_MENTIONS("recap refuses NaN weights");
      CU_ASSERT_PTR_NULL(p);
    }
    if (cases[c].tensor == 2)
      ((uint32_t *)data)[cases[c].element] = 0;
    else
      ((uint16_t *)data)[cases[c].element] = 0;
  }
  free(big);
  remove_dir();
}

/* The loader itself, with small staging slots on three threads: a tensor cut into many
 * chunks, a row range and a cast in chunks, and a transposed one built in a host image from
 * several reads. */
static void test_loader_cuts_large_tensors_into_chunks_on_several_threads(void) {
  make_dir();
  enum { R = 300, C = 160 };
  float *w = malloc(R * C * sizeof *w);
  uint16_t *b = malloc(R * C * sizeof *b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(w && b);
  for (int i = 0; i < R * C; ++i) {
    w[i] = (float)i * 0.001f;
    b[i] = recap__f32_to_bf16((float)(i % 977) - 400.0f);
  }
  const st_tensor t[] = {{"w", "F32", 2, {R, C}, w, R * C * sizeof *w},
                         {"b", "BF16", 2, {R, C}, b, R * C * sizeof *b}};
  write_st("big.safetensors", t, 2);
  char params[512];
  snprintf(params, sizeof params,
           "  a: {shape: [%d, %d], role: param, key: w}\n"
           "  r: {shape: [250, %d], role: param, key: b, rows: [25, 275], cast: true}\n"
           "  t: {shape: [%d, %d], role: param, key: w, transpose: true}\n",
           R, C, C, C, R);
  char top[] = "checkpoint: big.safetensors\n";
  char yaml[2048];
  snprintf(yaml, sizeof yaml,
           "%stensors:\n%s  x: {shape: [1], role: input}\nops:\n  - {op: relu, in: [x], out: y}\n"
           "outputs: [y, a, r, t]\n",
           top, params);
  recap__load_options lo = {.spec = {.base_dir = g_dir}};
  recap__model *m = NULL;
  CHECK_OK(recap__load_string(yaml, strlen(yaml), "w.yaml", &lo, &m, NULL));
  const recap__ir *ir = m->irs[m->num_buckets - 1];
  recap_stream *stream;
  CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &stream));
  const char *names[] = {"a", "r", "t"};
  recap__weight_job jobs[3];
  size_t bytes[3];
  for (int j = 0; j < 3; ++j) {
    const recap__ir_tensor *tt = &ir->tensors[recap__ir_find_tensor(ir, names[j])];
    bytes[j] = (size_t)tt->bytes;
    void *dst = NULL;
    CHECK_OK(recap_malloc(test_device, bytes[j], stream, &dst));
    jobs[j] = (recap__weight_job){tt->weights, dst, tt->name};
  }
  recap__weight_load_options o = {.threads = 3, .chunk_bytes = 64 << 10};
  size_t failed = 99;
  CHECK_OK(recap__weights_load(jobs, 3, stream, &o, &failed));
  float *got = malloc(R * C * sizeof *got), *want = malloc(R * C * sizeof *want);
  CU_ASSERT_PTR_NOT_NULL_FATAL(got && want);
  CHECK_OK(recap_memcpy_async(got, jobs[0].dst, bytes[0], stream));
  CHECK_OK(recap_stream_synchronize(stream));
  CU_ASSERT_EQUAL(memcmp(got, w, bytes[0]), 0);
  for (int i = 0; i < 250 * C; ++i) want[i] = recap__bf16_to_f32(b[25 * C + i]);
  CHECK_OK(recap_memcpy_async(got, jobs[1].dst, bytes[1], stream));
  CHECK_OK(recap_stream_synchronize(stream));
  CU_ASSERT_EQUAL(memcmp(got, want, bytes[1]), 0);
  for (int r = 0; r < C; ++r)
    for (int c = 0; c < R; ++c) want[r * R + c] = w[c * C + r];
  CHECK_OK(recap_memcpy_async(got, jobs[2].dst, bytes[2], stream));
  CHECK_OK(recap_stream_synchronize(stream));
  CU_ASSERT_EQUAL(memcmp(got, want, bytes[2]), 0);

  /* A file cut short while it is read (its stamp says it was checked at this size): a short
   * read is an error naming the file and the key, never a signal. */
  char path[512];
  path_in(path, sizeof path, "big.safetensors");
  struct stat st;
  CU_ASSERT_EQUAL_FATAL(stat(path, &st), 0);
  /* b's rows from 200 on are gone; r reads rows 25 to 274. */
  off_t cut = st.st_size - 100 * C * 2;
  CU_ASSERT_EQUAL_FATAL(truncate(path, cut), 0);
  recap__weight_plan *plan = (recap__weight_plan *)jobs[0].plan;
  plan->sources[0].stamp.size = (uint64_t)cut;
  plan = (recap__weight_plan *)jobs[1].plan;
  plan->sources[0].stamp.size = (uint64_t)cut;
  CHECK_STATUS(recap__weights_load(jobs, 2, stream, &o, &failed), RECAP_STATUS_IO_ERROR);
  CHECK_ERROR_MENTIONS("key 'b': ");
  CHECK_ERROR_MENTIONS("big.safetensors' ended at byte");
  CU_ASSERT_EQUAL(failed, 1);
  for (int j = 0; j < 3; ++j) CHECK_OK(recap_free(jobs[j].dst));
  CHECK_OK(recap_stream_destroy(stream));
  recap__model_release(m);
  free(got);
  free(want);
  free(w);
  free(b);
  remove_dir();
}

/* The spec check saw one file; the binder finds another: truncated, or its header rewritten.
 * Each is an error naming the file, at the tensor's spec position. */
static void test_a_file_changed_between_check_and_load_is_an_error(void) {
  make_dir();
  float w[16];
  fill_f32(w, 16, 1.0f);
  const st_tensor t[] = {{"w", "F32", 2, {4, 4}, w, sizeof w}};
  write_st("w.safetensors", t, 1);
  const char *yaml =
      "tensors:\n  x: {shape: [1], role: input}\n"
      "  w: {shape: [4, 4], role: param, path: w.safetensors}\n"
      "ops:\n  - {op: relu, in: [x], out: y}\noutputs: [y, w]\n";
  recap__load_options lo = {
      .spec = {.base_dir = g_dir}, .device = test_device, .device_given = true};
  for (int rewrite = 0; rewrite < 2; ++rewrite) {
    write_st("w.safetensors", t, 1);
    recap__model *m = NULL;
    CHECK_OK(recap__load_string(yaml, strlen(yaml), "w.yaml", &lo, &m, NULL));
    char path[512];
    path_in(path, sizeof path, "w.safetensors");
    if (rewrite) {
      /* Same size, another dtype in the header. */
      const st_tensor other[] = {{"w", "I32", 2, {4, 4}, w, sizeof w}};
      write_st("w.safetensors", other, 1);
    } else {
      CU_ASSERT_EQUAL_FATAL(truncate(path, 40), 0);
    }
    recap_pipeline_options o = opts_on(test_device);
    recap_pipeline *p = NULL;
    CHECK_STATUS(recap__pipeline_create_model(m, &o, &p), RECAP_STATUS_IO_ERROR);
    CHECK_ERROR_MENTIONS("w.yaml:3:41: error: initializing tensor 'w': ");
    CHECK_ERROR_MENTIONS("w.safetensors' changed since it was checked");
    CU_ASSERT_PTR_NULL(p);
    recap__model_release(m);
  }
  remove_dir();
}

/* ---- checks without data ---- */

/* Names the checkpoint gives that are not recap's dtypes are refused by name, at the key. */
static void test_dtypes_recap_lacks_are_refused_by_name(void) {
  make_dir();
  unsigned char data[64] = {0};
  const char *dtypes[] = {"F64", "U8", "BOOL", "F8_E4M3", "I16", "F4"};
  const size_t sizes[] = {8, 1, 1, 1, 2, 1};
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; ++i) {
    const st_tensor t[] = {{"w", dtypes[i], 1, {4}, data, 4 * sizes[i]}};
    write_st("x.safetensors", t, 1);
    recap_pipeline *p;
    CHECK_STATUS(
        create("", "  w: {shape: [4], role: param, path: x.safetensors, key: w}\n", "w", &p),
        RECAP_STATUS_SPEC_ERROR);
    char want[128];
    snprintf(want, sizeof want, "dtype %s is not supported by recap (F32, F16, BF16, I32, I64)",
             dtypes[i]);
    CHECK_ERROR_MENTIONS(want);
    CHECK_ERROR_MENTIONS("w.yaml:4:58: error: ");
  }
  remove_dir();
}

/* What the spec asks of a checkpoint that it cannot give, each at its own key. */
static void test_spec_errors_about_checkpoints_carry_positions(void) {
  make_dir();
  float w[12] = {0};
  const st_tensor t[] = {{"w", "F32", 2, {3, 4}, w, sizeof w},
                         {"v", "F32", 2, {2, 4}, w, 8 * sizeof(float)},
                         {"s", "F32", 1, {4}, w, 4 * sizeof(float)}};
  write_st("m.safetensors", t, 3);
  float raw[4] = {0};
  write_bytes("raw.bin", raw, sizeof raw);
  static const struct {
    const char *param, *where, *mention;
  } bad[] = {
      {"{shape: [3, 4], role: param, key: nope}", "5:40", "has no tensor 'nope'"},
      {"{shape: [3, 4], role: param, key: w, rows: [2, 5]}", "5:49", "rows [2, 5] must be"},
      {"{shape: [3, 4], role: param, key: w, cols: [3, 3]}", "5:49", "cols [3, 3] must be"},
      {"{shape: [4], role: param, key: s, cols: [0, 2]}", "5:46", "cols needs 2 or more dims"},
      {"{shape: [4], role: param, key: s, transpose: true}", "5:51", "transpose needs 2 dims"},
      {"{shape: [5, 4], role: param, key: [w, v], concat: 2}", "5:56", "concat axis 2 is outside"},
      {"{shape: [3, 8], role: param, key: [w, v], concat: 1}", "5:44",
       "does not concatenate along axis 1"},
      {"{shape: [3, 4], role: param, key: w, concat: 0}", "5:51", "concat needs a list of keys"},
      {"{shape: [4], role: param, path: raw.bin, transpose: true}", "5:58",
       "transpose applies to a tensor inside a .safetensors file"},
      {"{shape: [3, 4], role: param, key: w, rows: [1]}", "5:49", "expected [begin, end]"},
      {"{shape: [5, 4], role: param, key: [w, v], rows: [[0, 2], [0, 2], [0, 1]]}", "5:54",
       "rows: 3 ranges for 2 keys"},
      {"{shape: [4, 8], role: param, key: [w, v], concat: 1, cols: [[0, 4]]}", "5:65",
       "cols: 1 ranges for 2 keys"},
      {"{shape: [5, 4], role: param, key: [w, v], rows: [[0, 3], [0, 3]]}", "5:64",
       "tensor 'v' [2, 4]: rows [0, 3] must be"},
      {"{shape: [6, 4], role: param, key: [w, v], rows: [[0, 2], [1, 2]]}", "5:40",
       "tensor 'p' is [6, 4], but its keys give [3, 4] (concatenated along axis 0): 'w' [3, 4] "
       "rows [0, 2] cols [0, 4], 'v' [2, 4] rows [1, 2] cols [0, 4]"},
      {"{shape: [5, 4], role: param, key: [w, v], rows: [[0, 3], [1]]}", "5:63",
       "expected [begin, end] (integers or dim names) for each key"},
      {"{shape: [3, 4], role: param, key: w, cast: true, init: zeros}", "5:43",
       "key 'cast' belongs to init: file"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    char params[256];
    snprintf(params, sizeof params, "  p: %s\n", bad[i].param);
    recap_pipeline *p;
    CHECK_STATUS(create("checkpoint: m.safetensors\n", params, "p", &p), RECAP_STATUS_SPEC_ERROR);
    char where[64];
    snprintf(where, sizeof where, "w.yaml:%s: error: ", bad[i].where);
    CHECK_ERROR_MENTIONS(where);
    CHECK_ERROR_MENTIONS(bad[i].mention);
  }
  /* A key without a path and without a checkpoint: */
  recap_pipeline *p;
  CHECK_STATUS(create("", "  p: {shape: [3, 4], role: param, key: w}\n", "p", &p),
               RECAP_STATUS_SPEC_ERROR);
  CHECK_ERROR_MENTIONS("init file needs a path (or a key into the spec's checkpoint:)");
  remove_dir();
}

/* Index files and shard headers from someone else: each problem is a spec error at the
 * `checkpoint:` that names it, and nothing outside the checkpoint's folder is opened. */
static void test_hostile_index_files_and_shards_are_refused(void) {
  make_dir();
  char sub[300];
  snprintf(sub, sizeof sub, "%s/ckpt", g_dir);
  CU_ASSERT_EQUAL_FATAL(mkdir(sub, 0700), 0);
  float w[4] = {1, 2, 3, 4};
  const st_tensor t[] = {{"w", "F32", 1, {4}, w, sizeof w}};
  write_st("outside.safetensors", t, 1);
  write_st("ckpt/a.safetensors", t, 1);
  write_st("ckpt/b.safetensors", t, 1);
  char target[512], link[512];
  path_in(target, sizeof target, "outside.safetensors");
  path_in(link, sizeof link, "ckpt/link.safetensors");
  CU_ASSERT_EQUAL_FATAL(symlink(target, link), 0);
  unsigned char huge[16] = {0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0};
  write_bytes("ckpt/huge.safetensors", huge, sizeof huge);
  const char *not_json = "{\"w\": oops";
  {
    unsigned char buf[64];
    size_t n = strlen(not_json);
    for (int i = 0; i < 8; ++i) buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, not_json, n);
    write_bytes("ckpt/bad_header.safetensors", buf, 8 + n);
  }
  static const struct {
    const char *index, *mention;
  } bad[] = {
      {"{\"weight_map\": {\"w\": \"/etc/passwd\"}}", "names the shard '/etc/passwd'"},
      {"{\"weight_map\": {\"w\": \"../outside.safetensors\"}}", "no '..'"},
      {"{\"weight_map\": {\"w\": \"link.safetensors\"}}", "leads out of the checkpoint's folder"},
      {"{\"weight_map\": {\"w\": \"missing.safetensors\"}}", "shard 'missing.safetensors' cannot"},
      {"{\"weight_map\": {\"w\": \"a.safetensors\", \"v\": \"b.safetensors\"}}",
       "tensor 'w' is in two shards"},
      {"[\"a.safetensors\"]", "has no \"weight_map\" object"},
      {"{\"weight_map\": [\"a.safetensors\"]}", "has no \"weight_map\" object"},
      {"{\"weight_map\": {\"w\": ", "is not valid JSON"},
      {"{\"weight_map\": {\"w\": 3}}", "(not a string)"},
      {"{\"weight_map\": {\"w\": \"huge.safetensors\"}}", "header length 2147483647 is outside"},
      {"{\"weight_map\": {\"w\": \"bad_header.safetensors\"}}", "header is not valid JSON"},
      {"{\"weight_map\": {\"v\": \"a.safetensors\"}}", "puts tensor 'v' in shard 'a.safetensors'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    write_bytes("ckpt/model.safetensors.index.json", bad[i].index, strlen(bad[i].index));
    recap_pipeline *p;
    CHECK_STATUS(create("checkpoint: ckpt\n", "  p: {shape: [4], role: param, key: w}\n", "p", &p),
                 RECAP_STATUS_SPEC_ERROR);
    CHECK_ERROR_MENTIONS("w.yaml:2:13: error: ");
    CHECK_ERROR_MENTIONS(bad[i].mention);
  }
  /* A folder with neither file, and an index that is itself a link out of the folder. */
  char index[512];
  path_in(index, sizeof index, "ckpt/model.safetensors.index.json");
  unlink(index);
  recap_pipeline *p;
  CHECK_STATUS(create("checkpoint: ckpt\n", "  p: {shape: [4], role: param, key: w}\n", "p", &p),
               RECAP_STATUS_SPEC_ERROR);
  CHECK_ERROR_MENTIONS("holds neither model.safetensors.index.json nor model.safetensors");
  write_bytes("outside.json", "{\"weight_map\": {}}", 18);
  path_in(target, sizeof target, "outside.json");
  CU_ASSERT_EQUAL_FATAL(symlink(target, index), 0);
  CHECK_STATUS(create("checkpoint: ckpt\n", "  p: {shape: [4], role: param, key: w}\n", "p", &p),
               RECAP_STATUS_SPEC_ERROR);
  CHECK_ERROR_MENTIONS("leads out of the checkpoint's folder");
  remove_dir();
}

/* The index parser alone, on the shapes an index may take. */
static void test_index_parser_lists_shards_once_and_keys_by_shard(void) {
  const char *text =
      "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {\"a\": \"s1\", \"b\": \"s2\", "
      "\"c\": \"s1\", \"d\": \"sub/s3\"}}";
  recap__checkpoint_index ix;
  CHECK_OK(recap__checkpoint_parse_index(text, strlen(text), "i.json", &ix));
  CU_ASSERT_EQUAL(ix.num_shards, 3);
  CU_ASSERT_EQUAL(ix.num_keys, 4);
  for (size_t k = 0; k < ix.num_keys; ++k) {
    const char *want = !strcmp(ix.keys[k], "d") ? "sub/s3" : !strcmp(ix.keys[k], "b") ? "s2" : "s1";
    CU_ASSERT_STRING_EQUAL(ix.shards[ix.key_shard[k]], want);
  }
  recap__checkpoint_index_free(&ix);
  const char *dup = "{\"weight_map\": {\"a\": \"s1\", \"a\": \"s2\"}}";
  CHECK_STATUS(recap__checkpoint_parse_index(dup, strlen(dup), "i.json", &ix),
               RECAP_STATUS_IO_ERROR);
  CHECK_ERROR_MENTIONS("i.json");
  const char *nul = "{\"weight_map\": {\"a\": \"s\\u0000.safetensors\"}}";
  CHECK_STATUS(recap__checkpoint_parse_index(nul, strlen(nul), "i.json", &ix),
               RECAP_STATUS_IO_ERROR);
}

/* A Hugging Face cache snapshot links its files to ../../blobs/<hash>: they stay inside the
 * model's cache entry, so the snapshot folder loads; a link out of the entry is still refused,
 * and so is the same layout without a blobs folder. */
static void test_hugging_face_cache_snapshots_load_and_stay_confined(void) {
  make_dir();
  float w[4] = {1, 2, 3, 4};
  const st_tensor t[] = {{"w", "F32", 1, {4}, w, sizeof w}};
  char path[512], link[512];
  const char *dirs[] = {"hub",
                        "hub/models--org--m",
                        "hub/models--org--m/blobs",
                        "hub/models--org--m/snapshots",
                        "hub/models--org--m/snapshots/rev",
                        "other",
                        "other/snapshots",
                        "other/snapshots/rev"};
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; ++i) {
    path_in(path, sizeof path, dirs[i]);
    CU_ASSERT_EQUAL_FATAL(mkdir(path, 0755), 0);
  }
  write_st("hub/models--org--m/blobs/0123abcd", t, 1);
  path_in(link, sizeof link, "hub/models--org--m/snapshots/rev/model.safetensors");
  CU_ASSERT_EQUAL_FATAL(symlink("../../blobs/0123abcd", link), 0);
  recap_pipeline *p;
  CHECK_OK(create("checkpoint: hub/models--org--m/snapshots/rev\n",
                  "  w: {shape: [4], role: param, key: w}\n", "w", &p));
  expect_bytes(p, "w", w, sizeof w);
  CHECK_OK(recap_pipeline_destroy(p));

  /* A snapshot link leading out of the model's entry. */
  write_st("outside.safetensors", t, 1);
  CU_ASSERT_EQUAL(unlink(link), 0);
  CU_ASSERT_EQUAL_FATAL(symlink("../../../../outside.safetensors", link), 0);
  CHECK_STATUS(create("checkpoint: hub/models--org--m/snapshots/rev\n",
                      "  w: {shape: [4], role: param, key: w}\n", "w", &p),
               RECAP_STATUS_SPEC_ERROR);
  CHECK_ERROR_MENTIONS("leads out of the checkpoint's folder");
  /* snapshots/<rev> with no blobs folder beside it is an ordinary folder. */
  write_st("other/blob", t, 1);
  path_in(link, sizeof link, "other/snapshots/rev/model.safetensors");
  CU_ASSERT_EQUAL_FATAL(symlink("../../blob", link), 0);
  CHECK_STATUS(create("checkpoint: other/snapshots/rev\n",
                      "  w: {shape: [4], role: param, key: w}\n", "w", &p),
               RECAP_STATUS_SPEC_ERROR);
  CHECK_ERROR_MENTIONS("leads out of the checkpoint's folder");
  remove_dir();
}

/* A block reads each layer's weight by a key with the layer index ({i}), transposed at load:
 * two layers give x F0 F1 (the linear's weight is F^T). A layer whose file tensor has another
 * shape is an error naming that layer. */
static void test_block_layers_read_their_own_keys(void) {
  make_dir();
  float f0[16], f1[16], f1_bad[12];
  fill_f32(f0, 16, 0.125f);
  fill_f32(f1, 16, -0.0625f);
  fill_f32(f1_bad, 12, 1.0f);
  const st_tensor good[] = {{"model.layers.0.w", "F32", 2, {4, 4}, f0, sizeof f0},
                            {"model.layers.1.w", "F32", 2, {4, 4}, f1, sizeof f1}};
  write_st("model.safetensors", good, 2);
  static const char yaml[] =
      "name: layers\ndtype: f32\ncheckpoint: .\n"
      "dims: {D: 4}\n"
      "blocks:\n"
      "  layer:\n"
      "    input: x\n"
      "    output: y\n"
      "    tensors:\n"
      "      w: {shape: [D, D], role: param, key: \"model.layers.{i}.w\", transpose: true}\n"
      "    ops:\n"
      "      - {op: linear, in: [x, w], out: y}\n"
      "tensors:\n"
      "  x: {shape: [1, D], role: input, init: value, value: 1}\n"
      "ops:\n"
      "  - {block: layer, count: 2, in: x, out: h, name: layers}\n"
      "outputs: [h]\n";
  recap_pipeline_options o = opts_on(test_device);
  o.base_dir = g_dir;
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_string(yaml, strlen(yaml), "l.yaml", &o, &p));
  float x[4] = {1, -2, 0.5f, 3}, h[4];
  double mid[4], want[4];
  for (int n = 0; n < 4; ++n) {
    mid[n] = 0;
    for (int k = 0; k < 4; ++k) mid[n] += (double)x[k] * f0[k * 4 + n];
  }
  for (int n = 0; n < 4; ++n) {
    want[n] = 0;
    for (int k = 0; k < 4; ++k) want[n] += mid[k] * f1[k * 4 + n];
  }
  CHECK_OK(recap_pipeline_copy_in(p, "x", x, sizeof x, 0));
  CHECK_OK(recap_pipeline_run(p, 0));
  CHECK_OK(recap_pipeline_copy_out(p, "h", h, sizeof h, 0));
  for (int n = 0; n < 4; ++n) CU_ASSERT_DOUBLE_EQUAL(h[n], want[n], 1e-4);
  recap_tensor t;
  CHECK_OK(recap_pipeline_tensor(p, "layers.1.w", &t));
  CHECK_OK(recap_pipeline_destroy(p));

  const st_tensor bad[] = {{"model.layers.0.w", "F32", 2, {4, 4}, f0, sizeof f0},
                           {"model.layers.1.w", "F32", 2, {4, 3}, f1_bad, sizeof f1_bad}};
  write_st("model.safetensors", bad, 2);
  CHECK_STATUS(recap_pipeline_create_string(yaml, strlen(yaml), "l.yaml", &o, &p),
               RECAP_STATUS_SPEC_ERROR);
  CHECK_ERROR_MENTIONS("l.yaml:10:");
  CHECK_ERROR_MENTIONS("in layers.1");
  CHECK_ERROR_MENTIONS("model.layers.1.w");
  remove_dir();
}

int main(void) {
  static const test_case tests[] = {
      {"every_dtype_round_trips_with_one_header_parse",
       test_every_dtype_round_trips_with_one_header_parse, true},
      {"sharded_checkpoint_loads_through_its_index",
       test_sharded_checkpoint_loads_through_its_index, true},
      {"transpose_concat_and_ranges_give_the_hand_computed_tensors",
       test_transpose_concat_and_ranges_give_the_hand_computed_tensors, true},
      {"casts_round_to_nearest_even_and_check_ranges",
       test_casts_round_to_nearest_even_and_check_ranges, true},
      {"nan_weights_are_refused_naming_the_element",
       test_nan_weights_are_refused_naming_the_element, true},
      {"loader_cuts_large_tensors_into_chunks_on_several_threads",
       test_loader_cuts_large_tensors_into_chunks_on_several_threads, true},
      {"a_file_changed_between_check_and_load_is_an_error",
       test_a_file_changed_between_check_and_load_is_an_error, true},
      {"dtypes_recap_lacks_are_refused_by_name", test_dtypes_recap_lacks_are_refused_by_name,
       false},
      {"spec_errors_about_checkpoints_carry_positions",
       test_spec_errors_about_checkpoints_carry_positions, false},
      {"hostile_index_files_and_shards_are_refused",
       test_hostile_index_files_and_shards_are_refused, false},
      {"index_parser_lists_shards_once_and_keys_by_shard",
       test_index_parser_lists_shards_once_and_keys_by_shard, false},
      {"block_layers_read_their_own_keys", test_block_layers_read_their_own_keys, true},
      {"hugging_face_cache_snapshots_load_and_stay_confined",
       test_hugging_face_cache_snapshots_load_and_stay_confined, false},
  };
  test_add_host_and_cuda_suites("pipeline_weights", tests, sizeof tests / sizeof tests[0]);
  return test_run_all();
}
