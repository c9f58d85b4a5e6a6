/*
 * pipeline_graphs_test.c: the executor's graphs (engine/pipeline.h, include/recap.h
 * "Pipelines") on the host backend, and the same cases on CUDA (inactive without a GPU).
 *
 * Every spec in specs/ runs eagerly and as graphs (small dims through the `dims` option where
 * the spec's are too big for a test), and on CUDA also against the host reference. Then one
 * behaviour per test: buckets and padding, a KV-cache decode replayed over many positions
 * with no graph work, rebinding and its counters, pointer semantics of replays, fork/join
 * ordering, recovery from a failed capture (an op that cannot launch, and a real illegal call
 * from another thread during a global-mode capture), graph-safe random ops.
 * The pipeline API around the graphs (clones, argument errors, RECAP_DISABLE_GRAPHS, spec
 * errors, weights from files) is pipeline_api_test.c's.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/pipeline_util.h"

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
  recap__op_call *call = &p->calls[largest * p->num_ops + op];
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

#define GRAPH_TESTS(XX)                                                                    \
  XX(test_every_example_spec_gives_the_same_result_eager_and_as_graphs)                    \
  XX(test_batch_3_runs_bucket_4_and_returns_3_rows_equal_to_a_batch_3_run)                 \
  XX(test_batch_above_the_largest_bucket_runs_eagerly_or_fails_as_configured)              \
  XX(test_kv_decode_replays_many_positions_without_graph_work_and_padding_keeps_the_cache) \
  XX(test_rebind_updates_graphs_in_place_and_the_cap_falls_back_to_eager)                  \
  XX(test_a_buffer_swapped_without_rebind_is_not_seen_by_the_replay)                       \
  XX(test_fork_join_on_side_streams_gives_the_sequential_result)                           \
  XX(test_a_failed_capture_names_the_op_and_the_pipeline_runs_eagerly)                     \
  XX(test_random_replays_draw_new_numbers_equal_to_consecutive_eager_runs)

/* Last in each suite: a global-mode capture that another thread breaks is process-wide, so
 * nothing else runs after it in a state it might have disturbed. */
#define LAST_TESTS(XX) XX(test_another_threads_raw_allocation_during_a_global_capture_is_recovered)

int main(void) {
  CU_pSuite host = test_add_suite("pipeline_graphs/host", test_suite_use_host, NULL);
#define ADD_(t) CU_add_test(host, #t, t);
  GRAPH_TESTS(ADD_)
  LAST_TESTS(ADD_)
#undef ADD_
  CU_pSuite cuda = test_add_cuda_suite("pipeline_graphs/cuda", test_suite_use_cuda, NULL);
#define ADD_(t) CU_add_test(cuda, #t, t);
  GRAPH_TESTS(ADD_)
#undef ADD_
  CU_add_test(cuda, "test_every_example_spec_on_cuda_matches_the_host_reference",
              test_every_example_spec_on_cuda_matches_the_host_reference);
#define ADD_(t) CU_add_test(cuda, #t, t);
  LAST_TESTS(ADD_)
#undef ADD_
  return test_run_all();
}
