/*
 * pipeline_test.c: the executor and the public pipeline API (engine/pipeline.h, include/recap.h
 * "Pipelines") on the host backend, and the same cases on CUDA (inactive without a GPU).
 *
 * Every spec in specs/ runs eagerly and as graphs (small dims through the `dims` option where
 * the spec's are too big for a test), and on CUDA also against the host reference. Then one
 * behaviour per test: buckets and padding, a KV-cache decode replayed over many positions
 * with no graph work, rebinding and its counters, pointer semantics of replays, fork/join
 * ordering, recovery from a failed capture (an op that cannot launch, and a real illegal call
 * from another thread during a global-mode capture), graph-safe random ops, shared weights,
 * argument errors, RECAP_DISABLE_GRAPHS, weights from files.
 */
#include "engine/pipeline.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/half.h"
#include "runtime/backend.h"
#include "tests/test_util.h"

static recap_pipeline_options opts_on(recap_device dev) {
  recap_pipeline_options o = {0};
  o.override_device = 1;
  o.device = dev;
  return o;
}

static recap_pipeline *make(const char *yaml, recap_pipeline_options *o) {
  recap_pipeline *p = NULL;
  recap_pipeline_options d = opts_on(test_device);
  if (!o) o = &d;
  CHECK_OK(recap_pipeline_create_string(yaml, strlen(yaml), "<test>", o, &p));
  return p;
}

static recap_pipeline *make_mode(const char *yaml, recap_run_mode mode) {
  recap_pipeline_options o = opts_on(test_device);
  o.override_mode = 1;
  o.mode = mode;
  return make(yaml, &o);
}

static const recap__ir_tensor *tensor_of(recap_pipeline *p, const char *name) {
  const recap__ir *ir = p->model->irs[p->model->num_buckets - 1];
  int t = recap__ir_find_tensor(ir, name);
  CU_ASSERT_FATAL(t >= 0);
  return &ir->tensors[t];
}

/* Bytes of `rows` rows of a tensor bucketed on axis 0 (rows 0: the whole tensor). */
static size_t bytes_of(recap_pipeline *p, const char *name, int64_t rows) {
  const recap__ir_tensor *t = tensor_of(p, name);
  if (rows == 0) return (size_t)t->bytes;
  return (size_t)t->bytes / (size_t)t->shape[0] * (size_t)rows;
}

/* Fresh values in [-1, 1) of the tensor's dtype. */
static void *random_data(test_rng *rng, recap_dtype dtype, size_t bytes) {
  size_t n = bytes / recap_dtype_size(dtype);
  void *h = malloc(bytes ? bytes : 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(h);
  for (size_t i = 0; i < n; ++i)
    recap__store_f32(h, dtype, (int64_t)i, (float)test_rng_uniform(rng, -1, 1));
  return h;
}

static void *out_copy(recap_pipeline *p, const char *name, int64_t rows) {
  size_t bytes = bytes_of(p, name, rows);
  void *h = malloc(bytes ? bytes : 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(h);
  CHECK_OK(recap_pipeline_copy_out(p, name, h, bytes, rows));
  return h;
}

/* Writes one i32 scalar. */
static void set_scalar(recap_pipeline *p, const char *name, int32_t v) {
  CHECK_OK(recap_pipeline_copy_in(p, name, &v, sizeof v, 0));
}

/* Copies host bytes into device memory of the pipeline's device, waited for. */
static void to_device(recap_pipeline *p, void *dst, const void *src, size_t bytes) {
  recap_stream *s = recap_pipeline_stream(p);
  CHECK_OK(s->backend->memcpy_async(dst, src, bytes, s));
  CHECK_OK(recap_stream_synchronize(s));
}

/* ---- every example spec ---- */

/* Runs one example on test_device for every bucket (and one padded batch): eager and graph
 * results must agree; with *check_host (an int), the results also agree with a host pipeline
 * of the same spec. */
static void run_example(const char *path, const char *file, void *check_host_flag) {
  int check_host = *(const int *)check_host_flag;
  recap_pipeline_options o = opts_on(test_device);
  o.dims = test_example_dims(file);
  o.override_mode = 1;
  o.mode = RECAP_MODE_GRAPH;
  recap_pipeline *g = NULL, *e = NULL, *h = NULL;
  CHECK_OK(recap_pipeline_create_file(path, &o, &g));
  recap_pipeline_options eo = o;
  eo.mode = RECAP_MODE_EAGER;
  CHECK_OK(recap_pipeline_clone(g, &eo, &e));
  if (check_host) {
    recap_pipeline_options ho = opts_on((recap_device){RECAP_BACKEND_HOST, 0});
    ho.dims = o.dims;
    ho.override_mode = 1;
    ho.mode = RECAP_MODE_EAGER;
    CHECK_OK(recap_pipeline_create_file(path, &ho, &h));
  }
  const recap__model *m = g->model;
  const recap__ir *ir = m->irs[m->num_buckets - 1];
  test_rng rng;
  test_rng_init(&rng);
  int64_t batches[16];
  size_t nb = 0;
  for (size_t b = 0; b < m->num_buckets && nb + 2 < 16; ++b) {
    int64_t v = m->bucket_values[b];
    if (v > 1 && m->spec->bucket_dim >= 0 && (b == 0 || m->bucket_values[b - 1] < v - 1))
      batches[nb++] = v - 1; /* a padded run */
    batches[nb++] = v;
  }
  for (size_t k = 0; k < nb; ++k) {
    int64_t batch = m->spec->bucket_dim >= 0 ? batches[k] : 0;
    for (size_t t = 0; t < ir->num_tensors; ++t) {
      const recap__ir_tensor *tt = &ir->tensors[t];
      if (tt->role != RECAP_ROLE_INPUT) continue;
      int64_t rows = tt->bucket_axis == 0 ? batch : 0;
      size_t bytes = bytes_of(g, tt->name, rows);
      void *x = random_data(&rng, tt->dtype, bytes);
      CHECK_OK(recap_pipeline_copy_in(g, tt->name, x, bytes, rows));
      CHECK_OK(recap_pipeline_copy_in(e, tt->name, x, bytes, rows));
      if (h) CHECK_OK(recap_pipeline_copy_in(h, tt->name, x, bytes, rows));
      free(x);
    }
    CHECK_OK(recap_pipeline_run(g, batch));
    CHECK_OK(recap_pipeline_run_eager(e, batch));
    if (h) CHECK_OK(recap_pipeline_run_eager(h, batch));
    for (size_t i = 0; i < ir->num_outputs; ++i) {
      const recap__ir_tensor *tt = &ir->tensors[ir->outputs[i]];
      int64_t rows = tt->bucket_axis == 0 ? batch : 0;
      void *a = out_copy(g, tt->name, rows), *b = out_copy(e, tt->name, rows);
      char what[256];
      snprintf(what, sizeof what, "%s %s graph vs eager (batch %lld)", file, tt->name,
               (long long)batch);
      CU_ASSERT_TRUE(test_buffers_close(what, tt->dtype, a, b, bytes_of(g, tt->name, rows)));
      if (h) {
        void *c = out_copy(h, tt->name, rows);
        snprintf(what, sizeof what, "%s %s cuda vs host (batch %lld)", file, tt->name,
                 (long long)batch);
        CU_ASSERT_TRUE(test_buffers_close(what, tt->dtype, a, c, bytes_of(g, tt->name, rows)));
        free(c);
      }
      free(a);
      free(b);
    }
  }
  recap_pipeline_stats s;
  CHECK_OK(recap_pipeline_stats_get(g, &s));
  CU_ASSERT_EQUAL(s.replays, nb);
  CU_ASSERT_EQUAL(s.eager_runs, 0);
  CU_ASSERT_EQUAL(s.captures, m->num_buckets);
  CHECK_OK(recap_pipeline_destroy(e));
  CHECK_OK(recap_pipeline_destroy(g));
  CHECK_OK(recap_pipeline_destroy(h));
}

static void for_each_example(int check_host) {
  CU_ASSERT_TRUE(test_for_each_yaml("specs", run_example, &check_host) >= 6);
}

static void test_every_example_spec_gives_the_same_result_eager_and_as_graphs(void) {
  for_each_example(0);
}

static void test_every_example_spec_on_cuda_matches_the_host_reference(void) {
  for_each_example(1);
}

/* ---- buckets and padding ---- */

static const char mlp_spec[] =
    "name: mlp\ndtype: f32\nseed: 5\n"
    "dims: {B: [1, 2, 4], H: 16}\n"
    "tensors:\n"
    "  x:  {shape: [B, H], role: input}\n"
    "  w1: {shape: [H, H], role: param, init: normal, std: 0.3}\n"
    "  b1: {shape: [H], role: param, init: uniform, low: -0.5, high: 0.5}\n"
    "  w2: {shape: [H, H], role: param, init: normal, std: 0.3}\n"
    "ops:\n"
    "  - {op: linear, in: [x, w1, b1], out: h, act: gelu, name: layer1}\n"
    "  - {op: softmax, in: [h], out: s}\n"
    "  - {op: linear, in: [s, w2], out: y, name: layer2}\n"
    "outputs: [y]\n"
    "run: {warmup: 2}\n";

static void test_batch_3_runs_bucket_4_and_returns_3_rows_equal_to_a_batch_3_run(void) {
  recap_pipeline *p = make_mode(mlp_spec, RECAP_MODE_GRAPH);
  recap_pipeline_options o = opts_on(test_device);
  const char *three[] = {"B=3", NULL};
  o.dims = three;
  o.override_mode = 1;
  o.mode = RECAP_MODE_EAGER;
  recap_pipeline *ref = make(mlp_spec, &o);
  test_rng rng;
  test_rng_init(&rng);
  size_t bytes = bytes_of(p, "x", 3);
  void *x = random_data(&rng, RECAP_DTYPE_F32, bytes);
  CHECK_OK(recap_pipeline_copy_in(p, "x", x, bytes, 3));
  CHECK_OK(recap_pipeline_copy_in(ref, "x", x, bytes, 3));
  CHECK_OK(recap_pipeline_run(p, 3));
  CHECK_OK(recap_pipeline_run(ref, 3));
  void *a = out_copy(p, "y", 3), *b = out_copy(ref, "y", 3);
  CU_ASSERT_TRUE(
      test_buffers_close("batch 3 in bucket 4 vs batch 3", RECAP_DTYPE_F32, a, b, bytes));
  /* The params are the same in both: seeded by the spec, not by the generator's state. */
  recap_pipeline_stats s;
  CHECK_OK(recap_pipeline_stats_get(p, &s));
  CU_ASSERT_EQUAL(s.replays, 1);
  CU_ASSERT_EQUAL(s.captures, 3);
  /* The padding row of x holds zeros (defined values). */
  float full[4 * 16];
  CHECK_OK(recap_pipeline_copy_out(p, "x", full, sizeof full, 4));
  for (int i = 3 * 16; i < 4 * 16; ++i) CU_ASSERT_EQUAL(full[i], 0.0f);
  free(a);
  free(b);
  free(x);
  CHECK_OK(recap_pipeline_destroy(ref));
  CHECK_OK(recap_pipeline_destroy(p));
}

static void test_batch_above_the_largest_bucket_runs_eagerly_or_fails_as_configured(void) {
  recap_pipeline *p = make_mode(mlp_spec, RECAP_MODE_GRAPH);
  CHECK_OK(recap_pipeline_run(p, 9));
  recap_pipeline_stats s;
  CHECK_OK(recap_pipeline_stats_get(p, &s));
  CU_ASSERT_EQUAL(s.oversize_eager, 1);
  CU_ASSERT_EQUAL(s.eager_runs, 1);
  CU_ASSERT_EQUAL(s.replays, 0);
  CHECK_OK(recap_pipeline_destroy(p));

  recap_pipeline_options o = opts_on(test_device);
  o.oversize = RECAP_OVERSIZE_FAIL;
  p = make(mlp_spec, &o);
  CHECK_STATUS(recap_pipeline_run(p, 5), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("largest bucket");
  CHECK_OK(recap_pipeline_destroy(p));
}

/* ---- KV-cache decode ---- */

static const char decode_spec[] =
    "name: decode\ndtype: f32\nseed: 3\n"
    "dims: {B: [1, 2, 4], D: 16, H: 2, Dh: 8, Smax: 16}\n"
    "tensors:\n"
    "  x:       {shape: [B, D], role: input}\n"
    "  pos:     {role: scalar, value: 0}\n"
    "  len:     {role: scalar, value: 1}\n"
    "  k_cache: {shape: [B, Smax, H, Dh], role: state, init: zeros}\n"
    "  v_cache: {shape: [B, Smax, H, Dh], role: state, init: zeros}\n"
    "  w_q: {shape: [D, D], role: param, init: normal, std: 0.3}\n"
    "  w_k: {shape: [D, D], role: param, init: normal, std: 0.3}\n"
    "  w_v: {shape: [D, D], role: param, init: normal, std: 0.3}\n"
    "ops:\n"
    "  - {op: linear, in: [x, w_q], out: q_flat}\n"
    "  - {op: linear, in: [x, w_k], out: k_flat}\n"
    "  - {op: linear, in: [x, w_v], out: v_flat}\n"
    "  - {op: reshape, in: [q_flat], out: q_rows, shape: [B, 1, H, Dh]}\n"
    "  - {op: reshape, in: [k_flat], out: k_rows, shape: [B, 1, H, Dh]}\n"
    "  - {op: reshape, in: [v_flat], out: v_rows, shape: [B, 1, H, Dh]}\n"
    "  - {op: kv_append, in: [k_cache, k_rows, pos], out: k_all, name: append_k}\n"
    "  - {op: kv_append, in: [v_cache, v_rows, pos], out: v_all, name: append_v}\n"
    "  - {op: permute, in: [q_rows], out: q, dims: [0, 2, 1, 3]}\n"
    "  - {op: permute, in: [k_all], out: k, dims: [0, 2, 1, 3]}\n"
    "  - {op: permute, in: [v_all], out: v, dims: [0, 2, 1, 3]}\n"
    "  - {op: attention, in: [q, k, v, len], out: attn, name: attention}\n"
    "  - {op: reshape, in: [attn], out: y, shape: [B, D]}\n"
    "outputs: [y]\n"
    "run: {warmup: 2}\n";

enum { CACHE_FLOATS = 4 * 16 * 2 * 8, ROW_FLOATS = 16 * 2 * 8 };

static void test_kv_decode_replays_many_positions_without_graph_work_and_padding_keeps_the_cache(
    void) {
  recap_pipeline *g = make_mode(decode_spec, RECAP_MODE_GRAPH);
  recap_pipeline_options eo = opts_on(test_device);
  eo.override_mode = 1;
  eo.mode = RECAP_MODE_EAGER;
  recap_pipeline *e = NULL;
  CHECK_OK(recap_pipeline_clone(g, &eo, &e));
  /* A cache full of 7s: padding row 3 must still hold them at the end. */
  static float sevens[CACHE_FLOATS];
  for (int i = 0; i < CACHE_FLOATS; ++i) sevens[i] = 7.0f;
  recap_pipeline *both[2] = {g, e};
  for (int k = 0; k < 2; ++k) {
    CHECK_OK(recap_pipeline_copy_in(both[k], "k_cache", sevens, sizeof sevens, 0));
    CHECK_OK(recap_pipeline_copy_in(both[k], "v_cache", sevens, sizeof sevens, 0));
  }
  CHECK_OK(recap_pipeline_capture(g));
  recap_pipeline_stats before;
  CHECK_OK(recap_pipeline_stats_get(g, &before));
  CU_ASSERT_EQUAL(before.captures, 3);
  test_rng rng;
  test_rng_init(&rng);
  enum { STEPS = 12 };
  for (int32_t step = 0; step < STEPS; ++step) {
    float x[3 * 16];
    for (int i = 0; i < 3 * 16; ++i) x[i] = (float)test_rng_uniform(&rng, -1, 1);
    for (int k = 0; k < 2; ++k) {
      set_scalar(both[k], "pos", step);
      set_scalar(both[k], "len", step + 1);
      CHECK_OK(recap_pipeline_copy_in(both[k], "x", x, sizeof x, 3));
    }
    CHECK_OK(recap_pipeline_run(g, 3));
    CHECK_OK(recap_pipeline_run(e, 3));
    float yg[3 * 16], ye[3 * 16];
    CHECK_OK(recap_pipeline_copy_out(g, "y", yg, sizeof yg, 3));
    CHECK_OK(recap_pipeline_copy_out(e, "y", ye, sizeof ye, 3));
    CU_ASSERT_TRUE(
        test_buffers_close("decode step graph vs eager", RECAP_DTYPE_F32, yg, ye, sizeof yg));
  }
  recap_pipeline_stats after;
  CHECK_OK(recap_pipeline_stats_get(g, &after));
  CU_ASSERT_EQUAL(after.captures, before.captures);
  CU_ASSERT_EQUAL(after.updates, 0);
  CU_ASSERT_EQUAL(after.instantiations, before.instantiations);
  CU_ASSERT_EQUAL(after.replays, STEPS);
  /* State across replays: both caches hold the same appended rows; padding row 3 and the
   * positions never written still hold 7s. */
  static float kg[CACHE_FLOATS], ke[CACHE_FLOATS];
  CHECK_OK(recap_pipeline_copy_out(g, "k_cache", kg, sizeof kg, 0));
  CHECK_OK(recap_pipeline_copy_out(e, "k_cache", ke, sizeof ke, 0));
  CU_ASSERT_TRUE(test_buffers_close("k_cache graph vs eager", RECAP_DTYPE_F32, kg, ke, sizeof kg));
  int padding_kept = 1, unwritten_kept = 1, written = 1;
  for (int b = 0; b < 4; ++b)
    for (int s = 0; s < 16; ++s)
      for (int i = 0; i < 16; ++i) {
        float v = kg[b * ROW_FLOATS + s * 16 + i];
        if (b == 3 && v != 7.0f) padding_kept = 0;
        if (b < 3 && s >= STEPS && v != 7.0f) unwritten_kept = 0;
        if (b < 3 && s < STEPS && v == 7.0f) written = 0;
      }
  CU_ASSERT_TRUE(padding_kept);
  CU_ASSERT_TRUE(unwritten_kept);
  CU_ASSERT_TRUE(written);
  CHECK_OK(recap_pipeline_destroy(e));
  CHECK_OK(recap_pipeline_destroy(g));
}

/* ---- rebind ---- */

static void test_rebind_updates_graphs_in_place_and_the_cap_falls_back_to_eager(void) {
  recap_pipeline_options o = opts_on(test_device);
  o.max_recaptures = 1;
  recap_pipeline *p = make(mlp_spec, &o);
  recap_pipeline *ref = make_mode(mlp_spec, RECAP_MODE_EAGER);
  test_rng rng;
  test_rng_init(&rng);
  size_t bytes = bytes_of(p, "x", 0);
  CHECK_OK(recap_pipeline_run(p, 4));
  recap_pipeline_stats s0;
  CHECK_OK(recap_pipeline_stats_get(p, &s0));
  CU_ASSERT_EQUAL(s0.instantiations, 3);

  void *mem[2] = {NULL, NULL};
  for (int k = 0; k < 2; ++k) {
    CHECK_OK(recap_malloc(test_device, bytes, recap_pipeline_stream(p), &mem[k]));
    void *x = random_data(&rng, RECAP_DTYPE_F32, bytes);
    to_device(p, mem[k], x, bytes);
    CHECK_OK(recap_pipeline_copy_in(ref, "x", x, bytes, 4));
    free(x);
    CHECK_OK(recap_pipeline_rebind(p, "x", mem[k]));
    CHECK_OK(recap_pipeline_run(p, 4));
    CHECK_OK(recap_pipeline_run(ref, 4));
    void *a = out_copy(p, "y", 4), *b = out_copy(ref, "y", 4);
    CU_ASSERT_TRUE(test_buffers_close("after rebind", RECAP_DTYPE_F32, a, b, bytes));
    free(a);
    free(b);
    recap_pipeline_stats s;
    CHECK_OK(recap_pipeline_stats_get(p, &s));
    if (k == 0) {
      /* Re-captured and applied in place: updates, no new executables. */
      CU_ASSERT_EQUAL(s.updates, 3);
      CU_ASSERT_EQUAL(s.instantiations, 3);
      CU_ASSERT_EQUAL(s.captures, 6);
      CU_ASSERT_EQUAL(s.replays, 2);
    } else {
      /* Past max_recaptures: eager, counted. */
      CU_ASSERT_EQUAL(s.recaptures_refused, 1);
      CU_ASSERT_EQUAL(s.captures, 6);
      CU_ASSERT_EQUAL(s.eager_runs, 1);
      CU_ASSERT_EQUAL(s.replays, 2);
    }
  }
  CHECK_OK(recap_pipeline_destroy(p));
  CHECK_OK(recap_pipeline_destroy(ref));
  CHECK_OK(recap_free(mem[0]));
  CHECK_OK(recap_free(mem[1]));
}

static void test_a_buffer_swapped_without_rebind_is_not_seen_by_the_replay(void) {
  recap_pipeline *p = make_mode(mlp_spec, RECAP_MODE_GRAPH);
  test_rng rng;
  test_rng_init(&rng);
  size_t bytes = bytes_of(p, "x", 0);
  void *x1 = random_data(&rng, RECAP_DTYPE_F32, bytes),
       *x2 = random_data(&rng, RECAP_DTYPE_F32, bytes);
  CHECK_OK(recap_pipeline_copy_in(p, "x", x1, bytes, 4));
  CHECK_OK(recap_pipeline_run(p, 4));
  void *y1 = out_copy(p, "y", 4);
  void *other = NULL;
  CHECK_OK(recap_malloc(test_device, bytes, recap_pipeline_stream(p), &other));
  to_device(p, other, x2, bytes);
  /* Point the tensor elsewhere behind the graph's back (what rebind does, minus the
   * re-capture): the replay still reads the captured address, an eager run the new one. */
  int t = recap__ir_find_tensor(p->model->irs[0], "x");
  void *old = p->data[t];
  p->data[t] = other;
  recap__bind_views(p);
  CHECK_OK(recap_pipeline_run(p, 4));
  void *y_replay = out_copy(p, "y", 4);
  CU_ASSERT_EQUAL(memcmp(y_replay, y1, bytes), 0);
  CHECK_OK(recap_pipeline_run_eager(p, 4));
  void *y_eager = out_copy(p, "y", 4);
  CU_ASSERT_NOT_EQUAL(memcmp(y_eager, y1, bytes), 0);
  p->data[t] = old;
  recap__bind_views(p);
  free(x1);
  free(x2);
  free(y1);
  free(y_replay);
  free(y_eager);
  CHECK_OK(recap_pipeline_destroy(p));
  CHECK_OK(recap_free(other));
}

/* ---- streams ---- */

static const char fork_spec[] =
    "name: fork\ndtype: f32\nseed: 11\n"
    "dims: {B: [2, 4], D: 16}\n"
    "tensors:\n"
    "  x:   {shape: [B, D], role: input}\n"
    "  wa:  {shape: [D, D], role: param, init: normal, std: 0.3}\n"
    "  wb:  {shape: [D, D], role: param, init: normal, std: 0.3}\n"
    "  g:   {shape: [D], role: param, init: ones}\n"
    "ops:\n"
    "  - {op: rmsnorm, in: [x, g], out: xn}\n"
    "  - {op: linear, in: [xn, wa], out: a1, act: gelu, stream: 1}\n"
    "  - {op: tanh, in: [a1], out: a2, stream: 1}\n"
    "  - {op: linear, in: [xn, wb], out: b1, act: silu, stream: 2}\n"
    "  - {op: scale, in: [b1], out: b2, scale: 2.0, stream: 2}\n"
    "  - {op: add, in: [a2, b2], out: y}\n"
    "  - {op: mul, in: [y, a2], out: z, stream: 1}\n"
    "outputs: [y, z]\n";

static void test_fork_join_on_side_streams_gives_the_sequential_result(void) {
  /* The same spec without `stream:` keys is the sequential reference. */
  char seq[sizeof fork_spec];
  size_t n = 0;
  for (const char *s = fork_spec; *s;) {
    if (strncmp(s, ", stream: 1", 11) == 0 || strncmp(s, ", stream: 2", 11) == 0) {
      s += 11;
      continue;
    }
    seq[n++] = *s++;
  }
  seq[n] = '\0';
  recap_pipeline *g = make_mode(fork_spec, RECAP_MODE_GRAPH);
  recap_pipeline *e = make_mode(fork_spec, RECAP_MODE_EAGER);
  recap_pipeline *r = make_mode(seq, RECAP_MODE_EAGER);
  CU_ASSERT_EQUAL(g->num_streams, 3);
  CU_ASSERT_EQUAL(r->num_streams, 1);
  test_rng rng;
  test_rng_init(&rng);
  for (int64_t batch = 1; batch <= 4; ++batch) {
    size_t bytes = bytes_of(g, "x", batch);
    void *x = random_data(&rng, RECAP_DTYPE_F32, bytes);
    recap_pipeline *all[3] = {g, e, r};
    for (int k = 0; k < 3; ++k) {
      CHECK_OK(recap_pipeline_copy_in(all[k], "x", x, bytes, batch));
      CHECK_OK(recap_pipeline_run(all[k], batch));
    }
    const char *outs[2] = {"y", "z"};
    for (int o = 0; o < 2; ++o) {
      void *ref = out_copy(r, outs[o], batch);
      for (int k = 0; k < 2; ++k) {
        void *got = out_copy(all[k], outs[o], batch);
        CU_ASSERT_TRUE(test_buffers_close(k ? "eager streams vs sequential" : "graph vs sequential",
                                          RECAP_DTYPE_F32, got, ref, bytes));
        free(got);
      }
      free(ref);
    }
    free(x);
  }
  recap_pipeline_stats s;
  CHECK_OK(recap_pipeline_stats_get(g, &s));
  CU_ASSERT_EQUAL(s.replays, 4);
  CHECK_OK(recap_pipeline_destroy(g));
  CHECK_OK(recap_pipeline_destroy(e));
  CHECK_OK(recap_pipeline_destroy(r));
}

/* ---- capture failure ---- */

/* A launch that fails inside the capture (here an op whose input lost its memory between the
 * warmup and the capture, the state a failing kernel launch leaves) must end and discard the
 * capture, name the op, and leave the pipeline running eagerly. */
static void test_a_failed_capture_names_the_op_and_the_pipeline_runs_eagerly(void) {
  /* Unfused, so that op 4 is the spec's scale#4 (fusion would merge it with b1's silu). */
  recap_pipeline_options po = opts_on(test_device);
  po.override_mode = 1;
  po.mode = RECAP_MODE_GRAPH;
  po.no_fusion = 1;
  recap_pipeline *p = make(fork_spec, &po);
  recap_pipeline *ref = make_mode(fork_spec, RECAP_MODE_EAGER);
  CHECK_OK(recap__graph_warmup(p));
  size_t largest = p->model->num_buckets - 1, op = 4; /* b2 on side stream 2 */
  recap_op_call *call = &p->calls[largest * p->num_ops + op];
  void *saved = call->inputs[0].data;
  call->inputs[0].data = NULL;
  CU_ASSERT_NOT_EQUAL(recap__graph_capture_buckets(p), RECAP_OK);
  CHECK_ERROR_MENTIONS("op 'scale#4'");
  CU_ASSERT_FALSE(recap_stream_is_capturing(recap_pipeline_stream(p)));
  CU_ASSERT_FALSE(recap_stream_is_capturing(p->side[1]));
  CU_ASSERT_TRUE(p->graphs_failed);
  call->inputs[0].data = saved;

  test_rng rng;
  test_rng_init(&rng);
  size_t bytes = bytes_of(p, "x", 4);
  void *x = random_data(&rng, RECAP_DTYPE_F32, bytes);
  CHECK_OK(recap_pipeline_copy_in(p, "x", x, bytes, 4));
  CHECK_OK(recap_pipeline_copy_in(ref, "x", x, bytes, 4));
  CHECK_OK(recap_pipeline_run(p, 4));
  CHECK_OK(recap_pipeline_run(ref, 4));
  void *a = out_copy(p, "y", 4), *b = out_copy(ref, "y", 4);
  CU_ASSERT_TRUE(test_buffers_close("eager after a failed capture", RECAP_DTYPE_F32, a, b, bytes));
  recap_pipeline_stats s;
  CHECK_OK(recap_pipeline_stats_get(p, &s));
  CU_ASSERT_EQUAL(s.eager_runs, 1);
  CU_ASSERT_EQUAL(s.replays, 0);
  CU_ASSERT_EQUAL(s.capture_failures, 1);
  free(a);
  free(b);
  free(x);
  CHECK_OK(recap_pipeline_destroy(p));
  CHECK_OK(recap_pipeline_destroy(ref));
}

/* A chain of `ops` elementwise launches on 64 floats: long enough that capturing it takes a
 * while, the window another thread's call must land in. The caller frees the text. */
static char *long_chain_spec(int ops) {
  size_t cap = 128 + (size_t)ops * 64;
  char *y = malloc(cap);
  CU_ASSERT_PTR_NOT_NULL_FATAL(y);
  size_t n = (size_t)snprintf(y, cap,
                              "name: long-chain\ndtype: f32\n"
                              "tensors:\n  x: {shape: [64], role: input}\nops:\n");
  for (int i = 1; i <= ops; ++i) {
    char in[16];
    snprintf(in, sizeof in, i == 1 ? "x" : "h%d", i - 1);
    n += (size_t)snprintf(y + n, cap - n,
                          i % 2 ? "  - {op: tanh, in: [%s], out: h%d}\n"
                                : "  - {op: scale, in: [%s], out: h%d, scale: 1.5}\n",
                          in, i);
  }
  snprintf(y + n, cap - n, "outputs: [h%d]\n", ops);
  return y;
}

static double seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Another thread of the process: it waits until the pipeline's stream is capturing, then
 * allocates device memory through the raw backend (cudaMalloc on CUDA), bypassing the
 * allocator's capture guard. Under a GLOBAL-mode capture that call is prohibited in every
 * thread, and CUDA invalidates the capture. */
typedef struct {
  recap_stream *target;
  recap_device dev;
  int landed; /* the call was made while `target` was capturing */
  int still;  /* ... and `target` was still capturing after it */
  recap_status status;
  char message[512];
  void *ptr;
} intruder;

static void *intrude(void *arg) {
  intruder *in = arg;
  const recap__backend *be = recap__backend_get(in->dev.backend);
  double deadline = seconds_now() + test_scaled_seconds(10);
  while (!recap_stream_is_capturing(in->target))
    if (seconds_now() > deadline) return NULL;
  in->landed = 1;
  in->status = be->mem_alloc(in->dev.index, 256, &in->ptr);
  snprintf(in->message, sizeof in->message, "%s", recap_last_error());
  in->still = recap_stream_is_capturing(in->target);
  return NULL;
}

/* A real illegal call during a capture: while the pipeline captures in GLOBAL mode, another
 * thread calls the raw cudaMalloc. The capture must fail as invalidated (or illegal) and be
 * discarded cleanly, the pipeline must then run eagerly with correct results, and a fresh
 * instance must capture and replay normally. The other thread's call can miss the window
 * (the capture ended first); then the attempt is repeated with a new pipeline. */
static void test_another_threads_raw_allocation_during_a_global_capture_is_recovered(void) {
  char *spec = long_chain_spec(2000);
  recap_pipeline_options o = opts_on(test_device);
  o.override_mode = 1;
  o.mode = RECAP_MODE_GRAPH;
  o.capture_mode_set = 1;
  o.capture_mode = RECAP_CAPTURE_MODE_GLOBAL;
  o.no_fusion = 1; /* 2000 launches to capture, not one fused kernel: the window to land in */
  recap_pipeline *ref = make_mode(spec, RECAP_MODE_EAGER), *p = NULL;
  const recap__backend *be = recap__backend_get(test_device.backend);
  CU_ASSERT_PTR_NOT_NULL_FATAL(be);
  recap_status st = RECAP_OK;
  char why[2048] = "";
  intruder in;
  int attempts = 0, allowed = 0;
  for (; attempts < 50; ++attempts) {
    p = make(spec, &o);
    in = (intruder){.target = recap_pipeline_stream(p), .dev = test_device};
    pthread_t t;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, intrude, &in), 0);
    st = recap_pipeline_capture(p);
    snprintf(why, sizeof why, "%s", recap_last_error());
    pthread_join(t, NULL);
    if (in.landed && in.status != RECAP_OK) break;
    /* Missed: the call came after the capture, which must then have succeeded. A call that
     * succeeded while the capture went on would mean the rule is not enforced: counted. */
    CU_ASSERT_EQUAL(st, RECAP_OK);
    if (in.landed && in.still) allowed++;
    if (in.landed) CHECK_OK(be->mem_free(test_device.index, in.ptr));
    CHECK_OK(recap_pipeline_destroy(p));
    p = NULL;
  }
  fprintf(stderr,
          "\n  note: attempt %d (%d earlier calls allowed inside a capture): the other thread's "
          "call: %s: %s\n  note: the capture: %s: %s\n",
          attempts + 1, allowed, recap_status_name(in.status), in.status ? in.message : "",
          recap_status_name(st), st ? why : "");
  CU_ASSERT_PTR_NOT_NULL_FATAL(p); /* no attempt's call landed inside the capture */
  /* The call itself was refused as illegal during a capture, naming itself. */
  CU_ASSERT_EQUAL(in.status, RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  const char *call = test_device.backend == RECAP_BACKEND_CUDA ? "cudaMalloc" : "mem_alloc";
  CU_ASSERT_PTR_NOT_NULL(strstr(in.message, call));
  /* The capture failed because of it; the message says which bucket, and the cause: the
   * host backend names the call; CUDA reports the capture invalidated, and names the refused
   * call when the end of the capture is what failed. */
  CU_ASSERT_TRUE(st == RECAP_STATUS_CAPTURE_INVALIDATED ||
                 st == RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CU_ASSERT_PTR_NOT_NULL(strstr(why, "capturing bucket"));
  CU_ASSERT_TRUE(strstr(why, call) != NULL || (test_device.backend == RECAP_BACKEND_CUDA &&
                                               strstr(why, "cudaErrorStreamCaptureInvalidated")));
  CU_ASSERT_FALSE(recap_stream_is_capturing(recap_pipeline_stream(p)));
  CU_ASSERT_TRUE(p->graphs_failed);

  /* Eager from now on, with the right result. */
  test_rng rng;
  test_rng_init(&rng);
  size_t bytes = bytes_of(p, "x", 0);
  void *x = random_data(&rng, RECAP_DTYPE_F32, bytes);
  CHECK_OK(recap_pipeline_copy_in(p, "x", x, bytes, 0));
  CHECK_OK(recap_pipeline_copy_in(ref, "x", x, bytes, 0));
  CHECK_OK(recap_pipeline_run(p, 0));
  CHECK_OK(recap_pipeline_run(ref, 0));
  char out[16];
  snprintf(out, sizeof out, "h%d", 2000);
  void *want = out_copy(ref, out, 0), *got = out_copy(p, out, 0);
  CU_ASSERT_TRUE(
      test_buffers_close("eager after the invalidated capture", RECAP_DTYPE_F32, got, want, bytes));
  free(got);
  recap_pipeline_stats s;
  CHECK_OK(recap_pipeline_stats_get(p, &s));
  CU_ASSERT_EQUAL(s.capture_failures, 1);
  CU_ASSERT_EQUAL(s.eager_runs, 1);
  CU_ASSERT_EQUAL(s.replays, 0);

  /* A fresh instance of the same model captures (GLOBAL again) and replays normally. */
  recap_pipeline *fresh = NULL;
  CHECK_OK(recap_pipeline_clone(p, &o, &fresh));
  CHECK_OK(recap_pipeline_capture(fresh));
  CHECK_OK(recap_pipeline_copy_in(fresh, "x", x, bytes, 0));
  CHECK_OK(recap_pipeline_run(fresh, 0));
  got = out_copy(fresh, out, 0);
  CU_ASSERT_TRUE(
      test_buffers_close("replay of a fresh instance", RECAP_DTYPE_F32, got, want, bytes));
  CHECK_OK(recap_pipeline_stats_get(fresh, &s));
  CU_ASSERT_EQUAL(s.captures, 1);
  CU_ASSERT_EQUAL(s.replays, 1);
  CU_ASSERT_EQUAL(s.capture_failures, 0);
  free(got);
  free(want);
  free(x);
  free(spec);
  CHECK_OK(recap_pipeline_destroy(fresh));
  CHECK_OK(recap_pipeline_destroy(p));
  CHECK_OK(recap_pipeline_destroy(ref));
}

/* ---- random ops ---- */

static const char random_spec[] =
    "name: noisy\ndtype: f32\nseed: 99\n"
    "dims: {B: [2, 4], D: 8}\n"
    "tensors:\n"
    "  x: {shape: [B, D], role: input}\n"
    "ops:\n"
    "  - {op: random_uniform, out: r, shape: [B, D], low: -1.0, high: 1.0}\n"
    "  - {op: add, in: [x, r], out: y}\n"
    "outputs: [y]\n";

static void test_random_replays_draw_new_numbers_equal_to_consecutive_eager_runs(void) {
  recap_pipeline *g = make_mode(random_spec, RECAP_MODE_GRAPH);
  recap_pipeline *e = make_mode(random_spec, RECAP_MODE_EAGER);
  enum { RUNS = 4 };
  for (int64_t batch = 2; batch <= 4; batch += 2) {
    recap_rng_state start;
    CHECK_OK(recap_rng_get_state(test_device, &start));
    float ye[RUNS][4 * 8], yg[RUNS][4 * 8];
    size_t bytes = bytes_of(g, "y", batch);
    for (int i = 0; i < RUNS; ++i) {
      CHECK_OK(recap_pipeline_run(e, batch));
      CHECK_OK(recap_pipeline_copy_out(e, "y", ye[i], bytes, batch));
    }
    CHECK_OK(recap_rng_set_state(test_device, &start));
    for (int i = 0; i < RUNS; ++i) {
      CHECK_OK(recap_pipeline_run(g, batch));
      CHECK_OK(recap_pipeline_copy_out(g, "y", yg[i], bytes, batch));
      CU_ASSERT_EQUAL(memcmp(yg[i], ye[i], bytes), 0);
      if (i > 0) CU_ASSERT_NOT_EQUAL(memcmp(yg[i], yg[i - 1], bytes), 0);
    }
    recap_rng_state end;
    CHECK_OK(recap_rng_get_state(test_device, &end));
    CU_ASSERT_EQUAL(end.offset, start.offset + RUNS);
  }
  recap_pipeline_stats s;
  CHECK_OK(recap_pipeline_stats_get(g, &s));
  CU_ASSERT_EQUAL(s.replays, 2 * RUNS);
  CHECK_OK(recap_pipeline_destroy(g));
  CHECK_OK(recap_pipeline_destroy(e));
}

/* ---- shared weights ---- */

static void test_clones_share_the_params_and_compute_the_same(void) {
  /* Params large enough that a copy of them would show in the allocator's count. */
  recap_pipeline_options o = opts_on(test_device);
  const char *dims[] = {"H=64", NULL};
  o.dims = dims;
  recap_pipeline *p = make(mlp_spec, &o);
  size_t before = 0, after = 0;
  CHECK_OK(recap_memory_allocated(test_device, &before));
  recap_pipeline *c = NULL;
  CHECK_OK(recap_pipeline_clone(p, NULL, &c));
  CHECK_OK(recap_memory_allocated(test_device, &after));
  recap_tensor w_p, w_c, x_p, x_c;
  CHECK_OK(recap_pipeline_tensor(p, "w1", &w_p));
  CHECK_OK(recap_pipeline_tensor(c, "w1", &w_c));
  CHECK_OK(recap_pipeline_tensor(p, "x", &x_p));
  CHECK_OK(recap_pipeline_tensor(c, "x", &x_c));
  CU_ASSERT_PTR_EQUAL(w_p.data, w_c.data);
  CU_ASSERT_PTR_NOT_EQUAL(x_p.data, x_c.data);
  recap_pipeline_stats sp, sc;
  CHECK_OK(recap_pipeline_stats_get(p, &sp));
  CHECK_OK(recap_pipeline_stats_get(c, &sc));
  CU_ASSERT_EQUAL(sp.param_bytes, sc.param_bytes);
  CU_ASSERT_TRUE(sp.param_bytes >= 2 * 64 * 64 * 4);
  /* The clone allocated its own buffers but no second copy of the params. */
  CU_ASSERT_TRUE(after - before < sp.param_bytes / 2);
  test_rng rng;
  test_rng_init(&rng);
  size_t bytes = bytes_of(p, "x", 2);
  void *x = random_data(&rng, RECAP_DTYPE_F32, bytes);
  CHECK_OK(recap_pipeline_copy_in(p, "x", x, bytes, 2));
  CHECK_OK(recap_pipeline_copy_in(c, "x", x, bytes, 2));
  CHECK_OK(recap_pipeline_run(p, 2));
  CHECK_OK(recap_pipeline_run(c, 2));
  void *a = out_copy(p, "y", 2), *b = out_copy(c, "y", 2);
  CU_ASSERT_EQUAL(memcmp(a, b, bytes), 0);
  /* Destroy the source first: the clone keeps the params alive. */
  CHECK_OK(recap_pipeline_destroy(p));
  CHECK_OK(recap_pipeline_run(c, 2));
  void *b2 = out_copy(c, "y", 2);
  CU_ASSERT_EQUAL(memcmp(a, b2, bytes), 0);
  free(a);
  free(b);
  free(b2);
  free(x);
  CHECK_OK(recap_pipeline_destroy(c));
}

typedef struct {
  recap_pipeline *p;
  const void *x, *expect;
  size_t bytes;
  int ok;
} worker_job;

static void *worker(void *arg) {
  worker_job *j = arg;
  j->ok = recap_pipeline_copy_in(j->p, "x", j->x, j->bytes, 4) == RECAP_OK;
  float y[4 * 64];
  for (int i = 0; j->ok && i < 10; ++i)
    j->ok = recap_pipeline_run(j->p, 4) == RECAP_OK &&
            recap_pipeline_copy_out(j->p, "y", y, j->bytes, 4) == RECAP_OK &&
            memcmp(y, j->expect, j->bytes) == 0;
  if (!j->ok) fprintf(stderr, "\n  worker: %s\n", recap_last_error());
  return NULL;
}

/* Each clone warms up, captures (THREAD_LOCAL) and replays on its own thread. */
static void test_clones_capture_and_replay_on_four_threads_at_once(void) {
  enum { N = 4 };
  recap_pipeline *base = make_mode(mlp_spec, RECAP_MODE_EAGER);
  test_rng rng;
  test_rng_init(&rng);
  size_t bytes = bytes_of(base, "x", 4);
  void *x = random_data(&rng, RECAP_DTYPE_F32, bytes);
  CHECK_OK(recap_pipeline_copy_in(base, "x", x, bytes, 4));
  CHECK_OK(recap_pipeline_run(base, 4));
  void *expect = out_copy(base, "y", 4);
  recap_pipeline_options o = {0};
  o.override_mode = 1;
  o.mode = RECAP_MODE_GRAPH;
  worker_job jobs[N];
  pthread_t threads[N];
  for (int i = 0; i < N; ++i) {
    jobs[i] = (worker_job){.x = x, .expect = expect, .bytes = bytes};
    CHECK_OK(recap_pipeline_clone(base, &o, &jobs[i].p));
  }
  for (int i = 0; i < N; ++i)
    CU_ASSERT_EQUAL(pthread_create(&threads[i], NULL, worker, &jobs[i]), 0);
  for (int i = 0; i < N; ++i) {
    pthread_join(threads[i], NULL);
    CU_ASSERT_TRUE(jobs[i].ok);
    recap_pipeline_stats s;
    CHECK_OK(recap_pipeline_stats_get(jobs[i].p, &s));
    CU_ASSERT_EQUAL(s.replays, 10);
    CU_ASSERT_EQUAL(s.captures, 3);
    CHECK_OK(recap_pipeline_destroy(jobs[i].p));
  }
  free(x);
  free(expect);
  CHECK_OK(recap_pipeline_destroy(base));
}

/* ---- arguments and modes ---- */

static void test_copy_arguments_that_do_not_fit_are_rejected(void) {
  recap_pipeline *p = make_mode(decode_spec, RECAP_MODE_EAGER);
  float buf[8 * 16];
  CHECK_STATUS(recap_pipeline_copy_in(p, "x", buf, 3 * 16 * 4 - 4, 3),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_pipeline_copy_in(p, "x", buf, 5 * 16 * 4, 5), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("largest bucket");
  CHECK_STATUS(recap_pipeline_copy_in(p, "x", buf, 16 * 4, -1), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_pipeline_copy_in(p, "pos", buf, 4, 1), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_pipeline_copy_in(p, "pos", buf, 8, 0), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_pipeline_copy_in(p, "y", buf, 16 * 4, 1), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_pipeline_copy_in(p, "w_q", buf, 16 * 16 * 4, 0),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_pipeline_copy_in(p, "nope", buf, 4, 0), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_pipeline_copy_out(p, "q_flat", buf, 4 * 16 * 4, 4),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_pipeline_copy_out(p, "y", buf, 2 * 16 * 4, 3), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_pipeline_rebind(p, "y", buf), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_pipeline_run(p, -1), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap_pipeline_copy_out(p, "y", buf, 2 * 16 * 4, 2));
  CHECK_OK(recap_pipeline_destroy(p));
}

/* Every spelling of "on" that the boolean switches accept (runtime/env.h). */
static void test_disable_graphs_environment_forces_eager_runs(void) {
  static const char *const on[] = {"1", "true", "YES", "On"};
  for (size_t i = 0; i < sizeof on / sizeof on[0]; ++i) {
    setenv("RECAP_DISABLE_GRAPHS", on[i], 1);
    recap_pipeline *p = make(mlp_spec, NULL);
    unsetenv("RECAP_DISABLE_GRAPHS");
    CHECK_OK(recap_pipeline_capture(p));
    CHECK_OK(recap_pipeline_run(p, 2));
    recap_pipeline_stats s;
    CHECK_OK(recap_pipeline_stats_get(p, &s));
    if (s.eager_runs != 1) fprintf(stderr, "\n  RECAP_DISABLE_GRAPHS=%s kept graphs\n", on[i]);
    CU_ASSERT_EQUAL(s.eager_runs, 1);
    CU_ASSERT_EQUAL(s.replays, 0);
    CU_ASSERT_EQUAL(s.captures, 0);
    CHECK_OK(recap_pipeline_destroy(p));
  }
}

static void test_a_bad_spec_fails_with_positions_and_allocates_nothing(void) {
  size_t before = 0, after = 0;
  CHECK_OK(recap_memory_allocated(test_device, &before));
  static const char bad[] =
      "name: bad\ndtype: f32\n"
      "tensors:\n  x: {shape: [4], role: input}\n"
      "ops:\n  - {op: matmul, in: [x, missing], out: y}\n";
  recap_pipeline *p = NULL;
  recap_pipeline_options o = opts_on(test_device);
  CHECK_STATUS(recap_pipeline_create_string(bad, strlen(bad), "bad.yaml", &o, &p),
               RECAP_STATUS_SPEC_ERROR);
  CHECK_ERROR_MENTIONS("bad.yaml:6:");
  CU_ASSERT_PTR_NULL(p);
  const char *dims[] = {"Q=3", NULL};
  o.dims = dims;
  CHECK_STATUS(recap_pipeline_create_string(mlp_spec, strlen(mlp_spec), "m", &o, &p),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("Q=3");
  CHECK_OK(recap_memory_allocated(test_device, &after));
  CU_ASSERT_EQUAL(before, after);
}

/* A spec with more errors than recap_last_error() holds: it gets the first lines and a count,
 * recap_last_error_full() every error the loader kept (the first 100, then a count). */
static void test_every_spec_error_reaches_the_caller_through_last_error_full(void) {
  enum { OPS = 150, KEPT = 100 };
  char *yaml = malloc(OPS * 64 + 128);
  CU_ASSERT_PTR_NOT_NULL_FATAL(yaml);
  size_t used =
      (size_t)sprintf(yaml, "name: many\ntensors: {x: {shape: [4], role: input}}\nops:\n");
  for (int i = 0; i < OPS; ++i)
    used += (size_t)sprintf(yaml + used, "  - {op: add, in: [x, nope%d], out: y%d}\n", i, i);
  recap_pipeline_options o = opts_on(test_device);
  recap_pipeline *p = NULL;
  CHECK_STATUS(recap_pipeline_create_string(yaml, used, "many.yaml", &o, &p),
               RECAP_STATUS_SPEC_ERROR);
  CU_ASSERT_PTR_NULL(p);
  const char *first = recap_last_error(), *full = recap_last_error_full();
  CU_ASSERT_TRUE(strlen(first) < 2048);
  CU_ASSERT_PTR_NOT_NULL(strstr(first, "many.yaml:4:")); /* op 0 is on line 4 */
  CU_ASSERT_PTR_NULL(strstr(first, "'nope99'"));
  CU_ASSERT_PTR_NOT_NULL(strstr(first, "more errors)"));
  /* Op i is on line 4 + i; its second input starts at column 23 ("  - {op: add, in: [x, "). */
  int found = 0;
  for (int i = 0; i < OPS; ++i) {
    char want[96];
    snprintf(want, sizeof want, "many.yaml:%d:23: error: op 'add#%d': unknown tensor 'nope%d'",
             4 + i, i, i);
    found += strstr(full, want) != NULL;
  }
  if (found != KEPT) fprintf(stderr, "\n  %d of %d errors found in:\n%s\n", found, KEPT, full);
  CU_ASSERT_EQUAL(found, KEPT);
  CU_ASSERT_PTR_NOT_NULL(strstr(full, "(and 50 more errors)"));
  free(yaml);
  /* The next failure replaces it: then both say the same. */
  CHECK_STATUS(recap_pipeline_create_file("/nonexistent/spec.yaml", &o, &p), RECAP_STATUS_IO_ERROR);
  CU_ASSERT_STRING_EQUAL(recap_last_error_full(), recap_last_error());
  recap_clear_error();
  CU_ASSERT_STRING_EQUAL(recap_last_error_full(), "");
}

/* Dim overrides take as many buckets as a spec may have (RECAP_MAX_BUCKETS), and each way to
 * get them wrong says what is wrong with the value given and the limit. */
static void test_dim_overrides_take_the_spec_bucket_limit_and_name_what_is_wrong(void) {
  static const char tiny[] =
      "name: tiny\ndtype: f32\ndims: {B: [1, 2]}\n"
      "tensors:\n  x: {shape: [B, 4], role: input}\n"
      "ops:\n  - {op: relu, in: [x], out: y}\n";
  char list[RECAP_MAX_BUCKETS * 8 + 16];
  size_t used = (size_t)snprintf(list, sizeof list, "B=1");
  for (int v = 2; v <= RECAP_MAX_BUCKETS + 1; ++v)
    used += (size_t)snprintf(list + used, sizeof list - used, ",%d", v);
  /* list is B=1,...,257; cut after 256 for the largest accepted list. */
  char *at_limit = strdup(list);
  CU_ASSERT_PTR_NOT_NULL_FATAL(at_limit);
  *strrchr(at_limit, ',') = '\0';
  recap_pipeline_options o = opts_on(test_device);
  o.override_mode = 1;
  o.mode = RECAP_MODE_EAGER;
  const char *dims[] = {at_limit, NULL};
  o.dims = dims;
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_string(tiny, strlen(tiny), "tiny.yaml", &o, &p));
  recap_pipeline_stats s;
  if (p) {
    CHECK_OK(recap_pipeline_stats_get(p, &s));
    CU_ASSERT_EQUAL(s.num_buckets, RECAP_MAX_BUCKETS);
    CHECK_OK(recap_pipeline_destroy(p));
  }
  free(at_limit);

  static const struct {
    const char *dim;
    const char *message;
  } bad[] = {
      {NULL, "dim override for 'B' has 257 buckets, more than the limit of 256"},
      {"B=1,2,4611686018427387904", "4611686018427387904 is not a positive integer below 2^62"},
      {"B=1,0", "0 is not a positive integer below 2^62"},
      {"B=2,1", "must be strictly ascending (1 follows 2)"},
      {"B=1,x", "expected NAME=VALUE or NAME=V1,V2,..."},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    dims[0] = bad[i].dim ? bad[i].dim : list;
    p = NULL;
    CHECK_STATUS(recap_pipeline_create_string(tiny, strlen(tiny), "tiny.yaml", &o, &p),
                 RECAP_STATUS_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS(bad[i].message);
    CU_ASSERT_PTR_NULL(p);
  }
}

/* ---- weights from files ---- */

static char g_tmp[256];

static void write_file(const char *name, const void *data, size_t bytes) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", g_tmp, name);
  FILE *f = fopen(path, "wb");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  CU_ASSERT_EQUAL(fwrite(data, 1, bytes, f), bytes);
  fclose(f);
}

/* A safetensors file: 8-byte little-endian header length, JSON header, data. */
static void write_safetensors(const char *name, const char *header, const void *data,
                              size_t bytes) {
  size_t hl = strlen(header);
  unsigned char *buf = malloc(8 + hl + bytes);
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
  for (int i = 0; i < 8; ++i) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, header, hl);
  memcpy(buf + 8 + hl, data, bytes);
  write_file(name, buf, 8 + hl + bytes);
  free(buf);
}

static const char file_spec_fmt[] =
    "name: files\ndtype: f32\n"
    "tensors:\n"
    "  x: {shape: [2, 4], role: input}\n"
    "  w: {shape: [4, 4], role: param, init: file, path: %s}\n"
    "  b: {shape: [4], role: param, init: file, path: b.bin}\n"
    "ops:\n  - {op: linear, in: [x, w, b], out: y}\n"
    "outputs: [y]\n";

static recap_status make_file_pipeline(const char *wfile, recap_pipeline **out) {
  char yaml[1024];
  snprintf(yaml, sizeof yaml, file_spec_fmt, wfile);
  recap_pipeline_options o = opts_on(test_device);
  o.base_dir = g_tmp;
  return recap_pipeline_create_string(yaml, strlen(yaml), "files.yaml", &o, out);
}

static void test_params_load_from_raw_and_safetensors_files_with_every_length_checked(void) {
  snprintf(g_tmp, sizeof g_tmp, "/tmp/recap_pipeline_test_XXXXXX");
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(g_tmp));
  float w[16], bias[4];
  for (int i = 0; i < 16; ++i) w[i] = (float)i * 0.25f - 1.0f;
  for (int i = 0; i < 4; ++i) bias[i] = (float)i;
  write_file("b.bin", bias, sizeof bias);
  write_safetensors("w.safetensors",
                    "{\"__metadata__\":{\"k\":\"v\"},\"w\":{\"dtype\":\"F32\",\"shape\":[4,4],"
                    "\"data_offsets\":[0,64]}}",
                    w, sizeof w);
  recap_pipeline *p = NULL;
  CHECK_OK(make_file_pipeline("w.safetensors", &p));
  float got[16], gotb[4];
  CHECK_OK(recap_pipeline_copy_out(p, "w", got, sizeof got, 0));
  CHECK_OK(recap_pipeline_copy_out(p, "b", gotb, sizeof gotb, 0));
  CU_ASSERT_EQUAL(memcmp(got, w, sizeof w), 0);
  CU_ASSERT_EQUAL(memcmp(gotb, bias, sizeof bias), 0);
  CHECK_OK(recap_pipeline_destroy(p));

  /* Each broken file fails cleanly at creation, naming the problem at the spec's `path:`: the
   * spec check reads the header (not the data), so it is a spec error before anything is
   * allocated. */
  static const struct {
    const char *header;
    const char *mention;
  } bad[] = {
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,128]}}", "data_offsets"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[-8,56]}}", "data_offsets"},
      {"{\"w\":{\"dtype\":\"F16\",\"shape\":[4,4],\"data_offsets\":[0,64]}}", "dtype"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[16],\"data_offsets\":[0,64]}}", "shape"},
      {"{\"v\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,64]}}", "no tensor 'w'"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,64]},\"w\":1}", "JSON"},
      {"[1, 2", "JSON"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    write_safetensors("bad.safetensors", bad[i].header, w, sizeof w);
    p = NULL;
    CHECK_STATUS(make_file_pipeline("bad.safetensors", &p), RECAP_STATUS_SPEC_ERROR);
    CHECK_ERROR_MENTIONS(bad[i].mention);
    CHECK_ERROR_MENTIONS("files.yaml:5:53: error: ");
    CU_ASSERT_PTR_NULL(p);
  }
  /* A header length beyond the file. */
  unsigned char huge[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
  write_file("bad.safetensors", huge, sizeof huge);
  CHECK_STATUS(make_file_pipeline("bad.safetensors", &p), RECAP_STATUS_SPEC_ERROR);
  CHECK_ERROR_MENTIONS("header length");
  CHECK_ERROR_MENTIONS("files.yaml:5:53: error: ");
  /* A raw file of the wrong size: the spec check already sees it. */
  write_file("w.bin", w, sizeof w - 4);
  CHECK_STATUS(make_file_pipeline("w.bin", &p), RECAP_STATUS_SPEC_ERROR);
  CHECK_ERROR_MENTIONS("needs 64");
  const char *names[] = {"b.bin", "w.safetensors", "bad.safetensors", "w.bin"};
  for (size_t i = 0; i < 4; ++i) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_tmp, names[i]);
    unlink(path);
  }
  rmdir(g_tmp);
}

#define PIPELINE_TESTS(XX)                                                                 \
  XX(test_every_example_spec_gives_the_same_result_eager_and_as_graphs)                    \
  XX(test_batch_3_runs_bucket_4_and_returns_3_rows_equal_to_a_batch_3_run)                 \
  XX(test_batch_above_the_largest_bucket_runs_eagerly_or_fails_as_configured)              \
  XX(test_kv_decode_replays_many_positions_without_graph_work_and_padding_keeps_the_cache) \
  XX(test_rebind_updates_graphs_in_place_and_the_cap_falls_back_to_eager)                  \
  XX(test_a_buffer_swapped_without_rebind_is_not_seen_by_the_replay)                       \
  XX(test_fork_join_on_side_streams_gives_the_sequential_result)                           \
  XX(test_a_failed_capture_names_the_op_and_the_pipeline_runs_eagerly)                     \
  XX(test_random_replays_draw_new_numbers_equal_to_consecutive_eager_runs)                 \
  XX(test_clones_share_the_params_and_compute_the_same)                                    \
  XX(test_clones_capture_and_replay_on_four_threads_at_once)                               \
  XX(test_copy_arguments_that_do_not_fit_are_rejected)                                     \
  XX(test_disable_graphs_environment_forces_eager_runs)                                    \
  XX(test_a_bad_spec_fails_with_positions_and_allocates_nothing)                           \
  XX(test_params_load_from_raw_and_safetensors_files_with_every_length_checked)            \
  XX(test_dim_overrides_take_the_spec_bucket_limit_and_name_what_is_wrong)                 \
  XX(test_every_spec_error_reaches_the_caller_through_last_error_full)

/* Last in each suite: a global-mode capture that another thread breaks is process-wide, so
 * nothing else runs after it in a state it might have disturbed. */
#define LAST_TESTS(XX) XX(test_another_threads_raw_allocation_during_a_global_capture_is_recovered)

int main(void) {
  CU_pSuite host = test_add_suite("pipeline/host", test_suite_use_host, NULL);
#define ADD_(t) CU_add_test(host, #t, t);
  PIPELINE_TESTS(ADD_)
  LAST_TESTS(ADD_)
#undef ADD_
  CU_pSuite cuda = test_add_cuda_suite("pipeline/cuda", test_suite_use_cuda, NULL);
#define ADD_(t) CU_add_test(cuda, #t, t);
  PIPELINE_TESTS(ADD_)
#undef ADD_
  CU_add_test(cuda, "test_every_example_spec_on_cuda_matches_the_host_reference",
              test_every_example_spec_on_cuda_matches_the_host_reference);
#define ADD_(t) CU_add_test(cuda, #t, t);
  LAST_TESTS(ADD_)
#undef ADD_
  return test_run_all();
}
