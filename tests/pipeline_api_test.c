/*
 * pipeline_api_test.c: the public pipeline API around the graphs (engine/pipeline.h,
 * include/recap.h "Pipelines") on the host backend, and the same cases on CUDA (inactive
 * without a GPU): clones sharing weights (also on four threads at once), copy arguments that
 * do not fit, RECAP_DISABLE_GRAPHS, bad specs and their messages, dim overrides, weights from
 * raw and safetensors files. Graph capture and replay are pipeline_graphs_test.c's.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/pipeline_util.h"

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
  recap_pipeline_options o = RECAP_PIPELINE_OPTIONS_INIT;
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
  CHECK_ERROR_MENTIONS("tensor 'y' is an op's output; only inputs, params, states and scalars");
  /* An intermediate not listed in outputs gets the same answer, not advice to list it. */
  CHECK_STATUS(recap_pipeline_rebind(p, "q_flat", buf), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("tensor 'q_flat' is an op's output; only inputs, params, states");
  CHECK_STATUS(recap_pipeline_run(p, -1), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap_pipeline_copy_out(p, "y", buf, 2 * 16 * 4, 2));
  CHECK_OK(recap_pipeline_destroy(p));
}

/* A spec with one bucket has no bucketed axis: copies that count a batch's rows, as they
 * would with buckets, take the whole tensor and give what rows = 0 gives; a part of it is
 * still refused. */
static void test_one_bucket_copies_count_the_whole_tensor_as_the_batch(void) {
  /* mlp_spec with B a plain dim of 3 instead of buckets. */
  char spec[sizeof mlp_spec];
  const char *at = strstr(mlp_spec, "B: [1, 2, 4]");
  CU_ASSERT_PTR_NOT_NULL_FATAL(at);
  snprintf(spec, sizeof spec, "%.*sB: 3%s", (int)(at - mlp_spec), mlp_spec,
           at + strlen("B: [1, 2, 4]"));
  recap_pipeline_options o = opts_on(test_device);
  recap_pipeline *p = make(spec, &o);
  test_rng rng;
  test_rng_init(&rng);
  size_t bytes = bytes_of(p, "x", 0);
  CU_ASSERT_EQUAL(bytes, 3 * 16 * sizeof(float));
  void *x = random_data(&rng, RECAP_DTYPE_F32, bytes);
  CHECK_OK(recap_pipeline_copy_in(p, "x", x, bytes, 0));
  CHECK_OK(recap_pipeline_run(p, 3));
  void *by_zero = out_copy(p, "y", 0);
  CHECK_OK(recap_pipeline_copy_in(p, "x", x, bytes, 3));
  CHECK_OK(recap_pipeline_run(p, 3));
  float by_rows[3 * 16];
  CHECK_OK(recap_pipeline_copy_out(p, "y", by_rows, sizeof by_rows, 3));
  CU_ASSERT_EQUAL(memcmp(by_zero, by_rows, sizeof by_rows), 0);
  CHECK_STATUS(recap_pipeline_copy_in(p, "x", x, 2 * 16 * sizeof(float), 2),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("one bucket");
  free(x);
  free(by_zero);
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
      {"B=1,x", "expected NAME=VALUE, NAME=V1,V2,..."},
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
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,128]}}",
       "run past the end of the file (its data holds 64 bytes: is the file truncated"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[-8,56]}}",
       "must be ascending, from 0 on"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4,2],\"data_offsets\":[0,64]}}",
       "do not span its shape (64 bytes; 8 elements of 4 bytes need 32)"},
      {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4,4],\"data_offsets\":[0,18446744073709551608]}}",
       "holds a number past 2^63"},
      {"[1, 2, 3]", "is JSON but not an object: an array"},
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

#define API_TESTS(XX)                                                           \
  XX(test_clones_share_the_params_and_compute_the_same)                         \
  XX(test_clones_capture_and_replay_on_four_threads_at_once)                    \
  XX(test_copy_arguments_that_do_not_fit_are_rejected)                          \
  XX(test_one_bucket_copies_count_the_whole_tensor_as_the_batch)                \
  XX(test_disable_graphs_environment_forces_eager_runs)                         \
  XX(test_a_bad_spec_fails_with_positions_and_allocates_nothing)                \
  XX(test_params_load_from_raw_and_safetensors_files_with_every_length_checked) \
  XX(test_dim_overrides_take_the_spec_bucket_limit_and_name_what_is_wrong)      \
  XX(test_every_spec_error_reaches_the_caller_through_last_error_full)

int main(void) {
  CU_pSuite host = test_add_suite("pipeline_api/host", test_suite_use_host, NULL);
#define ADD_(t) CU_add_test(host, #t, t);
  API_TESTS(ADD_)
#undef ADD_
  CU_pSuite cuda = test_add_cuda_suite("pipeline_api/cuda", test_suite_use_cuda, NULL);
#define ADD_(t) CU_add_test(cuda, #t, t);
  API_TESTS(ADD_)
#undef ADD_
  return test_run_all();
}
