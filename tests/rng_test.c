/*
 * rng_test.c: Philox4x32-10 (runtime/philox.h), the per-device generators and their
 * graph-safe draws (runtime/rng.h) on the host backend, and the CUDA kernels against the host
 * reference (bits and uniforms bit for bit, normals within a tolerance).
 */
#include "runtime/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "runtime/capture.h"
#include "tests/test_util.h"

static const recap_device host0 = {RECAP_BACKEND_HOST, 0};
static const recap_device cuda0 = {RECAP_BACKEND_CUDA, 0};

/* The contract of include/recap.h, written out independently of rng.c's loops: element i of
 * the draw at `offset` is word i % 4 of block i / 4. */
static uint32_t reference_bits(uint64_t seed, uint64_t offset, uint64_t i) {
  return recap__philox_draw(seed, offset, i / 4).v[i % 4];
}

/* Distance in representable floats (0 for equal values, also +0 and -0). */
static int64_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  memcpy(&ia, &a, sizeof ia);
  memcpy(&ib, &b, sizeof ib);
  int64_t la = ia < 0 ? (int64_t)INT32_MIN - ia : ia;
  int64_t lb = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
  return la > lb ? la - lb : lb - la;
}

static void set_state(recap_device device, uint64_t seed, uint64_t offset) {
  recap_rng_state state = {.seed = seed, .offset = offset};
  CHECK_OK(recap_rng_set_state(device, &state));
}

static uint64_t current_offset(recap_device device) {
  recap_rng_state state;
  CHECK_OK(recap_rng_get_state(device, &state));
  return state.offset;
}

/* A seed that changes per run (printed through test_rng's seed) so tests never rely on one. */
static uint64_t fresh_seed(void) {
  test_rng rng;
  test_rng_init(&rng);
  return test_rng_next(&rng);
}

/* ------------------------------------------------------------------------------------------
 * Philox itself (no backend)
 * ---------------------------------------------------------------------------------------- */

static void check_kat(const uint32_t ctr[4], const uint32_t key[2], const uint32_t expected[4]) {
  recap__philox4x32 c = {{ctr[0], ctr[1], ctr[2], ctr[3]}};
  recap__philox4x32 r = recap__philox4x32_10(c, key[0], key[1]);
  for (int k = 0; k < 4; ++k) {
    if (r.v[k] != expected[k])
      fprintf(stderr, "\n  word %d: got 0x%08x, expected 0x%08x\n", k, r.v[k], expected[k]);
    CU_ASSERT_EQUAL(r.v[k], expected[k]);
  }
}

/* The known-answer vectors Random123 publishes for philox4x32_10. */
static void test_philox_matches_random123_known_answers(void) {
  const uint32_t zero_ctr[4] = {0, 0, 0, 0}, zero_key[2] = {0, 0};
  const uint32_t zero_out[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
  check_kat(zero_ctr, zero_key, zero_out);
  const uint32_t ones_ctr[4] = {~0u, ~0u, ~0u, ~0u}, ones_key[2] = {~0u, ~0u};
  const uint32_t ones_out[4] = {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd};
  check_kat(ones_ctr, ones_key, ones_out);
  const uint32_t pi_ctr[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344};
  const uint32_t pi_key[2] = {0xa4093822, 0x299f31d0};
  const uint32_t pi_out[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
  check_kat(pi_ctr, pi_key, pi_out);
}

/* The seed is the key and the offset the high half of the counter, as recap.h states. */
static void test_philox_draw_places_seed_in_key_and_offset_in_counter(void) {
  const uint64_t seed = 0x299f31d0a4093822ull, offset = 0x0370734413198a2eull;
  const uint64_t block = 0x85a308d3243f6a88ull;
  recap__philox4x32 r = recap__philox_draw(seed, offset, block);
  const uint32_t expected[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
  for (int k = 0; k < 4; ++k) CU_ASSERT_EQUAL(r.v[k], expected[k]);
}

static void test_unit_float_is_top_24_bits_times_2_pow_minus_24(void) {
  CU_ASSERT_EQUAL(recap__philox_unit_float(0), 0.0f);
  CU_ASSERT_EQUAL(recap__philox_unit_float(0xff), 0.0f);
  CU_ASSERT_EQUAL(recap__philox_unit_float(0x100), 0x1p-24f);
  CU_ASSERT_EQUAL(recap__philox_unit_float(0x80000000u), 0.5f);
  CU_ASSERT_EQUAL(recap__philox_unit_float(~0u), 1.0f - 0x1p-24f);
}

/* Rounding lo + u * (hi - lo) can give hi when hi - lo is tiny relative to lo. */
static void test_uniform_never_returns_hi(void) {
  const float lo = 1.0f, hi = nextafterf(1.0f, 2.0f);
  for (uint32_t bits = 0; bits < 256; ++bits) {
    float x = recap__philox_uniform(bits << 24 | 0xffffffu, lo, hi);
    CU_ASSERT(x >= lo && x < hi);
  }
  CU_ASSERT_EQUAL(recap__philox_uniform(~0u, -1.0f, 1.0f), 1.0f - 0x1p-23f);
}

static void test_box_muller_of_extreme_words_is_finite(void) {
  float z0, z1;
  recap__philox_box_muller(0, 0, &z0, &z1); /* u1 = 2^-24: the largest radius */
  CU_ASSERT(fabsf(z0 - sqrtf(48.0f * logf(2.0f))) < 1e-4f);
  CU_ASSERT(fabsf(z1) < 1e-6f);
  recap__philox_box_muller(~0u, ~0u, &z0, &z1); /* u1 = 1: radius 0 */
  CU_ASSERT_EQUAL(z0, 0.0f);
  CU_ASSERT_EQUAL(z1, 0.0f);
}

/* ------------------------------------------------------------------------------------------
 * Generators on the host backend
 * ---------------------------------------------------------------------------------------- */

static recap_stream *hstream;

static int host_init(void) {
  return recap_stream_create(host0, 0, RECAP_STREAM_NON_BLOCKING, &hstream) == RECAP_OK ? 0 : 1;
}

static int host_cleanup(void) {
  return recap_stream_destroy(hstream) == RECAP_OK ? 0 : 1;
}

/* Must run before anything seeds host device 0 in this process: it is the suite's first test
 * and the Philox suite before it touches no generator. */
static void test_never_seeded_generator_starts_from_the_fixed_default_seed(void) {
  uint64_t initial = 0;
  CHECK_OK(recap_rng_initial_seed(host0, &initial));
  CU_ASSERT_EQUAL(initial, UINT64_C(67280421310721));
  recap_rng_state state;
  CHECK_OK(recap_rng_get_state(host0, &state));
  CU_ASSERT_EQUAL(state.seed, UINT64_C(67280421310721));
  CU_ASSERT_EQUAL(state.offset, 0);
}

static void test_raw_bits_follow_the_counter_layout(void) {
  const uint64_t seed = fresh_seed(), offset = 0x100000005ull;
  set_state(host0, seed, offset);
  enum { N = 1027 };
  uint32_t *bits = malloc(N * sizeof *bits);
  CU_ASSERT_PTR_NOT_NULL_FATAL(bits);
  CHECK_OK(recap__rng_fill_bits(hstream, bits, N));
  size_t mismatches = 0;
  for (uint64_t i = 0; i < N; ++i) mismatches += bits[i] != reference_bits(seed, offset, i);
  CU_ASSERT_EQUAL(mismatches, 0);
  free(bits);
}

static void test_a_draw_of_n_is_a_prefix_of_a_draw_of_more(void) {
  const uint64_t seed = fresh_seed();
  uint32_t short_bits[7], long_bits[1023];
  float short_normal[5], long_normal[64], short_uniform[3], long_uniform[9];
  set_state(host0, seed, 11);
  CHECK_OK(recap__rng_fill_bits(hstream, short_bits, 7));
  CHECK_OK(recap__rng_fill_normal(hstream, short_normal, 5, 0.0f, 1.0f));
  CHECK_OK(recap__rng_fill_uniform(hstream, short_uniform, 3, -1.0f, 1.0f));
  set_state(host0, seed, 11);
  CHECK_OK(recap__rng_fill_bits(hstream, long_bits, 1023));
  CHECK_OK(recap__rng_fill_normal(hstream, long_normal, 64, 0.0f, 1.0f));
  CHECK_OK(recap__rng_fill_uniform(hstream, long_uniform, 9, -1.0f, 1.0f));
  CU_ASSERT_EQUAL(memcmp(short_bits, long_bits, sizeof short_bits), 0);
  CU_ASSERT_EQUAL(memcmp(short_normal, long_normal, sizeof short_normal), 0);
  CU_ASSERT_EQUAL(memcmp(short_uniform, long_uniform, sizeof short_uniform), 0);
}

/* Elements 4c, 4c+1 come from words 0, 1 of block c; elements 4c+2, 4c+3 from words 2, 3. */
static void test_normals_are_box_muller_of_word_pairs_of_one_block(void) {
  const uint64_t seed = fresh_seed();
  enum { N = 10 };
  uint32_t bits[N];
  float normals[N];
  set_state(host0, seed, 3);
  CHECK_OK(recap__rng_fill_bits(hstream, bits, N));
  set_state(host0, seed, 3);
  CHECK_OK(recap__rng_fill_normal(hstream, normals, N, 0.0f, 1.0f));
  for (int i = 0; i < N; i += 2) {
    float z0, z1;
    recap__philox_box_muller(bits[i], bits[i + 1], &z0, &z1);
    CU_ASSERT_EQUAL(normals[i], z0);
    CU_ASSERT_EQUAL(normals[i + 1], z1);
  }
}

static void test_each_draw_advances_the_offset_by_one_and_differs(void) {
  CHECK_OK(recap_rng_manual_seed(host0, fresh_seed()));
  uint32_t a[64], b[64];
  CU_ASSERT_EQUAL(current_offset(host0), 0);
  CHECK_OK(recap__rng_fill_bits(hstream, a, 64));
  CU_ASSERT_EQUAL(current_offset(host0), 1);
  CHECK_OK(recap__rng_fill_bits(hstream, b, 64));
  CU_ASSERT_EQUAL(current_offset(host0), 2);
  CU_ASSERT_NOT_EQUAL(memcmp(a, b, sizeof a), 0);
  float big[5000];
  CHECK_OK(recap__rng_fill_normal(hstream, big, 5000, 0.0f, 1.0f));
  CU_ASSERT_EQUAL(current_offset(host0), 3); /* by 1 whatever the size */
}

static void test_empty_draw_does_nothing(void) {
  uint64_t before = current_offset(host0);
  CHECK_OK(recap__rng_fill_bits(hstream, NULL, 0));
  CHECK_OK(recap__rng_fill_uniform(hstream, NULL, 0, 0.0f, 1.0f));
  CU_ASSERT_EQUAL(current_offset(host0), before);
}

static void test_manual_seed_reproduces_draws_and_resets_offset(void) {
  const uint64_t seed = fresh_seed();
  float a[100], b[100];
  CHECK_OK(recap_rng_manual_seed(host0, seed));
  CHECK_OK(recap__rng_fill_uniform(hstream, a, 100, 0.0f, 1.0f));
  CHECK_OK(recap__rng_fill_uniform(hstream, a, 100, 0.0f, 1.0f));
  CHECK_OK(recap_rng_manual_seed(host0, seed));
  CU_ASSERT_EQUAL(current_offset(host0), 0);
  CHECK_OK(recap__rng_fill_uniform(hstream, b, 100, 0.0f, 1.0f));
  CHECK_OK(recap__rng_fill_uniform(hstream, b, 100, 0.0f, 1.0f));
  CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
  uint64_t initial = 0;
  CHECK_OK(recap_rng_initial_seed(host0, &initial));
  CU_ASSERT_EQUAL(initial, seed);
  CHECK_OK(recap_rng_manual_seed(host0, seed + 1));
  CHECK_OK(recap__rng_fill_uniform(hstream, b, 100, 0.0f, 1.0f));
  CU_ASSERT_NOT_EQUAL(memcmp(a, b, sizeof a), 0);
}

static void test_state_round_trips_through_get_and_set(void) {
  CHECK_OK(recap_rng_manual_seed(host0, fresh_seed()));
  uint32_t skip[4], a[256], b[256];
  CHECK_OK(recap__rng_fill_bits(hstream, skip, 4));
  recap_rng_state saved;
  CHECK_OK(recap_rng_get_state(host0, &saved));
  CU_ASSERT_EQUAL(saved.offset, 1);
  CHECK_OK(recap__rng_fill_bits(hstream, a, 256));
  CHECK_OK(recap_rng_set_state(host0, &saved));
  recap_rng_state again;
  CHECK_OK(recap_rng_get_state(host0, &again));
  CU_ASSERT_EQUAL(again.seed, saved.seed);
  CU_ASSERT_EQUAL(again.offset, saved.offset);
  CHECK_OK(recap__rng_fill_bits(hstream, b, 256));
  CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
}

static void test_seed_chooses_a_random_seed_and_reports_it(void) {
  uint64_t s1 = 0, s2 = 0, initial = 0;
  CHECK_OK(recap_rng_seed(host0, &s1));
  CHECK_OK(recap_rng_initial_seed(host0, &initial));
  CU_ASSERT_EQUAL(initial, s1);
  recap_rng_state state;
  CHECK_OK(recap_rng_get_state(host0, &state));
  CU_ASSERT_EQUAL(state.seed, s1);
  CU_ASSERT_EQUAL(state.offset, 0);
  CHECK_OK(recap_rng_seed(host0, &s2));
  CU_ASSERT_NOT_EQUAL(s1, s2); /* equal with probability 2^-64 */
}

static void test_generator_calls_reject_bad_devices_and_null(void) {
  recap_device missing = {RECAP_BACKEND_HOST, 1};
  CHECK_STATUS(recap_rng_manual_seed(missing, 1), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_rng_get_state(host0, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_rng_set_state(host0, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_rng_seed(host0, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_rng_initial_seed(host0, NULL), RECAP_STATUS_INVALID_ARGUMENT);
}

static void test_bad_fill_arguments_are_rejected_without_drawing(void) {
  float out[4];
  uint64_t before = current_offset(host0);
  CHECK_STATUS(recap__rng_fill_uniform(hstream, out, 4, 1.0f, 1.0f), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap__rng_fill_uniform(hstream, out, 4, 2.0f, 1.0f), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap__rng_fill_uniform(hstream, out, 4, 0.0f, INFINITY),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap__rng_fill_uniform(hstream, out, 4, -3e38f, 3e38f),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap__rng_fill_uniform(hstream, out, 4, NAN, 1.0f), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap__rng_fill_normal(hstream, out, 4, 0.0f, -1.0f), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap__rng_fill_normal(hstream, out, 4, NAN, 1.0f), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap__rng_fill_bits(hstream, NULL, 4), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap__rng_fill_bits(NULL, (uint32_t *)out, 4), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(current_offset(host0), before);
}

enum { STAT_N = 1000000 };

/* Sample mean and variance (two passes, in double). */
static void moments(const float *x, size_t n, double *mean, double *var) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += x[i];
  *mean = sum / (double)n;
  double sq = 0;
  for (size_t i = 0; i < n; ++i) sq += (x[i] - *mean) * (x[i] - *mean);
  *var = sq / (double)(n - 1);
}

/* Bounds are 6 standard errors: a correct generator fails them about once in 5e8 runs. */
static void test_uniform_lies_in_range_with_uniform_moments(void) {
  CHECK_OK(recap_rng_manual_seed(host0, fresh_seed()));
  const float lo = -2.0f, hi = 3.0f;
  float *x = malloc(STAT_N * sizeof *x);
  CU_ASSERT_PTR_NOT_NULL_FATAL(x);
  CHECK_OK(recap__rng_fill_uniform(hstream, x, STAT_N, lo, hi));
  size_t outside = 0;
  for (size_t i = 0; i < STAT_N; ++i) outside += !(x[i] >= lo && x[i] < hi);
  CU_ASSERT_EQUAL(outside, 0);
  double mean, var;
  moments(x, STAT_N, &mean, &var);
  const double w = hi - lo, true_var = w * w / 12.0;
  /* Var of the sample variance of a uniform: (mu4 - sigma^4) / n with mu4 = w^4 / 80. */
  const double var_se = sqrt((w * w * w * w / 80.0 - true_var * true_var) / STAT_N);
  CU_ASSERT(fabs(mean - 0.5) < 6.0 * sqrt(true_var / STAT_N));
  CU_ASSERT(fabs(var - true_var) < 6.0 * var_se);
  free(x);
}

static void test_normal_has_requested_mean_and_std(void) {
  CHECK_OK(recap_rng_manual_seed(host0, fresh_seed()));
  const float mu = 1.5f, sigma = 2.0f;
  float *x = malloc(STAT_N * sizeof *x);
  CU_ASSERT_PTR_NOT_NULL_FATAL(x);
  CHECK_OK(recap__rng_fill_normal(hstream, x, STAT_N, mu, sigma));
  size_t bad = 0;
  for (size_t i = 0; i < STAT_N; ++i) bad += !(fabsf(x[i] - mu) <= 5.78f * sigma);
  CU_ASSERT_EQUAL(bad, 0);
  double mean, var;
  moments(x, STAT_N, &mean, &var);
  const double true_var = (double)sigma * sigma;
  CU_ASSERT(fabs(mean - mu) < 6.0 * sigma / sqrt(STAT_N));
  CU_ASSERT(fabs(var - true_var) < 6.0 * sqrt(2.0) * true_var / sqrt(STAT_N));
  free(x);
}

/* ------------------------------------------------------------------------------------------
 * Graph safety: captured draws replay new numbers, the same as eager draws (any backend)
 * ---------------------------------------------------------------------------------------- */

/* A device buffer of n words and its host copy. */
typedef struct {
  const recap__backend *backend;
  recap_device device;
  void *dev;
  uint32_t *host;
  size_t n;
} buffer;

static void buffer_init(buffer *b, recap_device device, size_t n) {
  b->backend = recap__backend_get(device.backend);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b->backend);
  b->device = device;
  b->n = n;
  b->dev = NULL;
  CHECK_OK(b->backend->mem_alloc(device.index, n * sizeof(uint32_t), &b->dev));
  b->host = malloc(n * sizeof(uint32_t));
  CU_ASSERT_PTR_NOT_NULL_FATAL(b->host);
}

static void buffer_fetch(buffer *b, recap_stream *stream) {
  CHECK_OK(b->backend->memcpy_async(b->host, b->dev, b->n * sizeof(uint32_t), stream));
  CHECK_OK(recap_stream_synchronize(stream));
}

static void buffer_free(buffer *b) {
  CHECK_OK(b->backend->mem_free(b->device.index, b->dev));
  free(b->host);
}

typedef struct {
  recap__graph_exec *exec;
  recap__rng_graph_binding *binding;
} captured;

/* Captures ops(stream, user) on `stream` with an RNG slot and instantiates the graph. */
static void capture(recap_stream *stream, void (*ops)(recap_stream *, void *), void *user,
                    captured *out) {
  const recap__backend *be = stream->backend;
  CHECK_OK(recap__rng_capture_begin(stream));
  CHECK_OK(recap__capture_begin(stream, RECAP_CAPTURE_MODE_GLOBAL));
  ops(stream, user);
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(stream, &graph));
  CHECK_OK(recap__rng_capture_end(stream, &out->binding));
  CHECK_OK(be->graph_instantiate(graph, &out->exec));
  be->graph_destroy(graph);
}

static void replay(recap_stream *stream, captured *c) {
  CHECK_OK(recap__rng_replay_prepare(c->binding, stream));
  CHECK_OK(stream->backend->graph_launch(c->exec, stream));
}

static void captured_destroy(recap_stream *stream, captured *c) {
  stream->backend->graph_exec_destroy(c->exec);
  recap__rng_graph_binding_destroy(c->binding);
}

static void uniform_op(recap_stream *stream, void *user) {
  buffer *b = user;
  CHECK_OK(recap__rng_fill_uniform(stream, b->dev, b->n, -1.0f, 1.0f));
}

/* Three replays equal three consecutive eager draws from the same state, and advance the
 * generator's offset by 3 while the capture itself advanced it by nothing. */
static void check_replays_match_eager(recap_stream *stream) {
  const recap_device dev = recap_stream_device(stream);
  enum { N = 4099, REPLAYS = 3 };
  buffer out;
  buffer_init(&out, dev, N);
  const uint64_t seed = fresh_seed();
  uint32_t *eager[REPLAYS];
  set_state(dev, seed, 40);
  for (int r = 0; r < REPLAYS; ++r) {
    uniform_op(stream, &out);
    buffer_fetch(&out, stream);
    eager[r] = malloc(N * sizeof(uint32_t));
    CU_ASSERT_PTR_NOT_NULL_FATAL(eager[r]);
    memcpy(eager[r], out.host, N * sizeof(uint32_t));
  }
  CU_ASSERT_NOT_EQUAL(memcmp(eager[0], eager[1], N * sizeof(uint32_t)), 0);

  set_state(dev, seed, 40);
  captured c;
  capture(stream, uniform_op, &out, &c);
  CU_ASSERT_PTR_NOT_NULL_FATAL(c.binding);
  CU_ASSERT_EQUAL(c.binding->increment, 1);
  CU_ASSERT_EQUAL(current_offset(dev), 40);
  for (int r = 0; r < REPLAYS; ++r) {
    replay(stream, &c);
    buffer_fetch(&out, stream);
    if (memcmp(out.host, eager[r], N * sizeof(uint32_t)) != 0)
      fprintf(stderr, "\n  replay %d differs from eager draw %d\n", r, r);
    CU_ASSERT_EQUAL(memcmp(out.host, eager[r], N * sizeof(uint32_t)), 0);
    CU_ASSERT_EQUAL(current_offset(dev), 40 + (uint64_t)r + 1);
  }
  captured_destroy(stream, &c);
  for (int r = 0; r < REPLAYS; ++r) free(eager[r]);
  buffer_free(&out);
}

static void test_graph_replays_draw_what_eager_draws_would(void) {
  check_replays_match_eager(hstream);
}

typedef struct {
  buffer *bits, *normals;
} two_buffers;

static void two_draws_op(recap_stream *stream, void *user) {
  two_buffers *t = user;
  CHECK_OK(recap__rng_fill_bits(stream, t->bits->dev, t->bits->n));
  CHECK_OK(recap__rng_fill_normal(stream, t->normals->dev, t->normals->n, 0.0f, 1.0f));
}

/* Draws within one capture take consecutive offsets, and replays continue from there. */
static void test_graph_with_two_draws_replays_consecutive_offsets(void) {
  buffer bits, normals;
  buffer_init(&bits, host0, 33);
  buffer_init(&normals, host0, 33);
  two_buffers t = {&bits, &normals};
  const uint64_t seed = fresh_seed();
  set_state(host0, seed, 0);
  captured c;
  capture(hstream, two_draws_op, &t, &c);
  CU_ASSERT_PTR_NOT_NULL_FATAL(c.binding);
  CU_ASSERT_EQUAL(c.binding->increment, 2);
  for (uint64_t r = 0; r < 2; ++r) {
    replay(hstream, &c);
    buffer_fetch(&bits, hstream);
    size_t mismatches = 0;
    for (uint64_t i = 0; i < bits.n; ++i)
      mismatches += bits.host[i] != reference_bits(seed, 2 * r, i);
    CU_ASSERT_EQUAL(mismatches, 0);
    float z0, z1;
    buffer_fetch(&normals, hstream);
    recap__philox_box_muller(reference_bits(seed, 2 * r + 1, 0), reference_bits(seed, 2 * r + 1, 1),
                             &z0, &z1);
    CU_ASSERT_EQUAL(((float *)normals.host)[0], z0);
    CU_ASSERT_EQUAL(((float *)normals.host)[1], z1);
  }
  CU_ASSERT_EQUAL(current_offset(host0), 4);
  captured_destroy(hstream, &c);
  buffer_free(&bits);
  buffer_free(&normals);
}

/* Replays read the seed at replay time, so reseeding between replays takes effect. */
static void test_replay_after_manual_seed_uses_the_new_seed(void) {
  buffer out;
  buffer_init(&out, host0, 8);
  captured c;
  capture(hstream, uniform_op, &out, &c);
  const uint64_t seed = fresh_seed();
  CHECK_OK(recap_rng_manual_seed(host0, seed));
  replay(hstream, &c);
  buffer_fetch(&out, hstream);
  float expected = recap__philox_uniform(reference_bits(seed, 0, 5), -1.0f, 1.0f);
  CU_ASSERT_EQUAL(((float *)out.host)[5], expected);
  captured_destroy(hstream, &c);
  buffer_free(&out);
}

static void no_op(recap_stream *stream, void *user) {
  (void)stream;
  (void)user;
}

static void test_capture_without_draws_has_no_binding(void) {
  size_t free_before, free_after, total;
  CHECK_OK(recap_device_mem_get_info(host0, &free_before, &total));
  buffer unused;
  captured c;
  capture(hstream, no_op, &unused, &c);
  CU_ASSERT_PTR_NULL(c.binding);
  CHECK_OK(recap__rng_replay_prepare(NULL, hstream));
  CHECK_OK(recap_device_mem_get_info(host0, &free_after, &total));
  CU_ASSERT_EQUAL(free_after, free_before); /* the unused slot was freed */
  captured_destroy(hstream, &c);
}

static void test_random_op_in_a_capture_without_slot_is_refused(void) {
  uint64_t before = current_offset(host0);
  CHECK_OK(recap__capture_begin(hstream, RECAP_CAPTURE_MODE_GLOBAL));
  uint32_t out[4];
  CHECK_STATUS(recap__rng_fill_bits(hstream, out, 4), RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CHECK_ERROR_MENTIONS("recap__rng_capture_begin");
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(hstream, &graph));
  hstream->backend->graph_destroy(graph);
  CU_ASSERT_EQUAL(current_offset(host0), before);
}

static void test_slot_calls_enforce_the_capture_protocol(void) {
  recap__rng_graph_binding *b = NULL;
  CHECK_STATUS(recap__rng_capture_end(hstream, &b), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap__rng_capture_begin(hstream));
  CHECK_STATUS(recap__rng_capture_begin(hstream), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap__capture_begin(hstream, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_STATUS(recap__rng_capture_end(hstream, &b), RECAP_STATUS_INVALID_ARGUMENT);
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(hstream, &graph));
  hstream->backend->graph_destroy(graph);
  recap__rng_capture_abort(hstream);
  recap__rng_capture_abort(hstream); /* a second abort finds nothing */
  recap__rng_capture_abort(NULL);
  recap__rng_graph_binding_destroy(NULL);
  /* The stream is clean again: a new capture can take a slot. */
  CHECK_OK(recap__rng_capture_begin(hstream));
  recap__rng_capture_abort(hstream);
}

static void test_slots_are_freed_by_abort_and_destroy(void) {
  size_t free_before, free_now, total;
  CHECK_OK(recap_device_mem_get_info(host0, &free_before, &total));
  CHECK_OK(recap__rng_capture_begin(hstream));
  CHECK_OK(recap_device_mem_get_info(host0, &free_now, &total));
  CU_ASSERT(free_now < free_before);
  recap__rng_capture_abort(hstream);
  CHECK_OK(recap_device_mem_get_info(host0, &free_now, &total));
  CU_ASSERT_EQUAL(free_now, free_before);

  buffer out;
  buffer_init(&out, host0, 4);
  CHECK_OK(recap_device_mem_get_info(host0, &free_before, &total));
  captured c;
  capture(hstream, uniform_op, &out, &c);
  captured_destroy(hstream, &c);
  CHECK_OK(recap_device_mem_get_info(host0, &free_now, &total));
  CU_ASSERT_EQUAL(free_now, free_before);
  buffer_free(&out);
}

/* Freeing device memory during a capture would invalidate it (the host backend enforces
 * CUDA's rule), so a binding destroyed then keeps its slot until freeing is legal. */
static void test_destroying_a_binding_during_another_capture_keeps_it_valid(void) {
  buffer out;
  buffer_init(&out, host0, 4);
  captured c;
  capture(hstream, uniform_op, &out, &c);
  recap_stream *other = NULL;
  CHECK_OK(recap_stream_create(host0, 0, RECAP_STREAM_NON_BLOCKING, &other));
  CHECK_OK(recap__rng_capture_begin(other));
  CHECK_OK(recap__capture_begin(other, RECAP_CAPTURE_MODE_GLOBAL));
  captured_destroy(hstream, &c);
  CHECK_OK(recap__rng_fill_uniform(other, out.dev, out.n, 0.0f, 1.0f));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(other, &graph)); /* not invalidated */
  recap__rng_graph_binding *b = NULL;
  CHECK_OK(recap__rng_capture_end(other, &b));
  CU_ASSERT_PTR_NOT_NULL(b);
  other->backend->graph_destroy(graph);
  recap__rng_graph_binding_destroy(b);
  CHECK_OK(recap_stream_destroy(other));
  buffer_free(&out);
}

/* A side stream that joined the capture draws from the capture's slot once attached; before
 * that its random ops are refused rather than frozen into the graph. */
static void test_side_stream_draws_in_a_capture_only_when_attached(void) {
  recap_stream *side = NULL;
  recap_event *fork = NULL, *join = NULL;
  CHECK_OK(recap_stream_create(host0, 0, RECAP_STREAM_NON_BLOCKING, &side));
  CHECK_OK(recap_event_create(host0, RECAP_EVENT_DEFAULT, &fork));
  CHECK_OK(recap_event_create(host0, RECAP_EVENT_DEFAULT, &join));
  buffer a, b;
  buffer_init(&a, host0, 16);
  buffer_init(&b, host0, 16);
  const uint64_t seed = fresh_seed();
  set_state(host0, seed, 7);

  CHECK_OK(recap__rng_capture_begin(hstream));
  CHECK_OK(recap__capture_begin(hstream, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(recap__rng_fill_bits(hstream, a.dev, a.n));
  CHECK_OK(recap_event_record(fork, hstream));
  CHECK_OK(recap_stream_wait_event(side, fork));
  CHECK_STATUS(recap__rng_fill_bits(side, b.dev, b.n), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_OK(recap__rng_capture_attach(hstream, side));
  CHECK_OK(recap__rng_fill_bits(side, b.dev, b.n));
  CHECK_OK(recap_event_record(join, side));
  CHECK_OK(recap_stream_wait_event(hstream, join));
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(hstream, &graph));
  captured c;
  CHECK_OK(recap__rng_capture_end(hstream, &c.binding));
  CU_ASSERT_PTR_NOT_NULL_FATAL(c.binding);
  CU_ASSERT_EQUAL(c.binding->increment, 2);
  CHECK_OK(hstream->backend->graph_instantiate(graph, &c.exec));
  hstream->backend->graph_destroy(graph);

  replay(hstream, &c);
  buffer_fetch(&a, hstream);
  buffer_fetch(&b, hstream);
  size_t mismatches = 0;
  for (uint64_t i = 0; i < a.n; ++i) {
    mismatches += a.host[i] != reference_bits(seed, 7, i);
    mismatches += b.host[i] != reference_bits(seed, 8, i);
  }
  CU_ASSERT_EQUAL(mismatches, 0);
  /* After the capture the side stream draws eagerly again. */
  CHECK_OK(recap__rng_fill_bits(side, b.dev, b.n));
  CU_ASSERT_EQUAL(current_offset(host0), 10);

  captured_destroy(hstream, &c);
  buffer_free(&a);
  buffer_free(&b);
  CHECK_OK(recap_event_destroy(fork));
  CHECK_OK(recap_event_destroy(join));
  CHECK_OK(recap_stream_destroy(side));
}

static void test_replay_prepare_inside_a_capture_is_refused(void) {
  buffer out;
  buffer_init(&out, host0, 4);
  captured c;
  capture(hstream, uniform_op, &out, &c);
  uint64_t before = current_offset(host0);
  CHECK_OK(recap__capture_begin(hstream, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_STATUS(recap__rng_replay_prepare(c.binding, hstream), RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(hstream, &graph));
  hstream->backend->graph_destroy(graph);
  CU_ASSERT_EQUAL(current_offset(host0), before);
  captured_destroy(hstream, &c);
  buffer_free(&out);
}

/* A loop's reservation (recap__rng_loop_prepare): K replays' draws at once, the slot holding
 * the first; settling gives back those of the replays that did not run, unless the generator
 * moved meanwhile (then they are skipped, never drawn twice). */
static void test_loop_reservation_gives_back_unrun_draws_only_if_untouched(void) {
  buffer out;
  buffer_init(&out, host0, 4);
  captured c;
  capture(hstream, uniform_op, &out, &c);
  const uint64_t seed = fresh_seed();
  set_state(host0, seed, 100);
  recap__rng_loop_reservation r;
  CHECK_OK(recap__rng_loop_prepare(c.binding, hstream, 8, &r));
  CHECK_OK(recap_stream_synchronize(hstream));
  CU_ASSERT_EQUAL(r.first, 100);
  CU_ASSERT_EQUAL(r.end, 108);
  CU_ASSERT_EQUAL(current_offset(host0), 108);
  CU_ASSERT_EQUAL(c.binding->slot[0], seed); /* the host backend's slot is host memory */
  CU_ASSERT_EQUAL(c.binding->slot[1], 100);
  recap__rng_loop_settle(c.binding, &r, 3);
  CU_ASSERT_EQUAL(current_offset(host0), 103);
  /* Something drew in between: nothing goes back. */
  CHECK_OK(recap__rng_loop_prepare(c.binding, hstream, 8, &r));
  uniform_op(hstream, &out);
  CHECK_OK(recap_stream_synchronize(hstream));
  recap__rng_loop_settle(c.binding, &r, 2);
  CU_ASSERT_EQUAL(current_offset(host0), 112);
  /* All ran: nothing to give back. */
  CHECK_OK(recap__rng_loop_prepare(c.binding, hstream, 4, &r));
  recap__rng_loop_settle(c.binding, &r, 4);
  CU_ASSERT_EQUAL(current_offset(host0), 116);
  captured_destroy(hstream, &c);
  buffer_free(&out);
}

/* ------------------------------------------------------------------------------------------
 * CUDA against the host reference
 * ---------------------------------------------------------------------------------------- */

static recap_stream *cstream;

/* The CUDA suite compares with the host backend's draws, so it needs both streams. */
static int cuda_init(void) {
  if (host_init() != 0) return 1;
  return recap_stream_create(cuda0, 0, RECAP_STREAM_NON_BLOCKING, &cstream) == RECAP_OK ? 0 : 1;
}

static int cuda_cleanup(void) {
  int failed = recap_stream_destroy(cstream) != RECAP_OK;
  return host_cleanup() != 0 || failed;
}

/* Fills n values on CUDA (at `misalign` words past an aligned allocation, to cover the
 * scalar stores) and on the host from the same state; returns both as words. */
static void draw_both(recap__rng_dist dist, size_t n, size_t misalign, float a, float b,
                      uint32_t **cuda_out, uint32_t **host_out) {
  const uint64_t seed = fresh_seed();
  buffer dev;
  buffer_init(&dev, cuda0, n + misalign);
  uint32_t *host = malloc(n * sizeof *host);
  CU_ASSERT_PTR_NOT_NULL_FATAL(host);
  uint32_t *dst = (uint32_t *)dev.dev + misalign;
  set_state(cuda0, seed, 77);
  set_state(host0, seed, 77);
  switch (dist) {
    case RECAP__RNG_BITS:
      CHECK_OK(recap__rng_fill_bits(cstream, dst, n));
      CHECK_OK(recap__rng_fill_bits(hstream, host, n));
      break;
    case RECAP__RNG_UNIFORM:
      CHECK_OK(recap__rng_fill_uniform(cstream, (float *)dst, n, a, b));
      CHECK_OK(recap__rng_fill_uniform(hstream, (float *)host, n, a, b));
      break;
    case RECAP__RNG_NORMAL:
      CHECK_OK(recap__rng_fill_normal(cstream, (float *)dst, n, a, b));
      CHECK_OK(recap__rng_fill_normal(hstream, (float *)host, n, a, b));
      break;
  }
  buffer_fetch(&dev, cstream);
  *cuda_out = malloc(n * sizeof(uint32_t));
  CU_ASSERT_PTR_NOT_NULL_FATAL(*cuda_out);
  memcpy(*cuda_out, dev.host + misalign, n * sizeof(uint32_t));
  *host_out = host;
  buffer_free(&dev);
}

static const size_t sizes[] = {1, 7, 1023, (size_t)1 << 20};

static void check_identical(recap__rng_dist dist, float a, float b) {
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
    for (size_t misalign = 0; misalign < 2; ++misalign) {
      uint32_t *c, *h;
      draw_both(dist, sizes[s], misalign, a, b, &c, &h);
      size_t mismatches = 0, first = 0;
      for (size_t i = sizes[s]; i-- > 0;)
        if (c[i] != h[i]) mismatches++, first = i;
      if (mismatches)
        fprintf(stderr, "\n  n=%zu misalign=%zu: %zu mismatches, first at %zu: 0x%08x vs 0x%08x\n",
                sizes[s], misalign, mismatches, first, c[first], h[first]);
      CU_ASSERT_EQUAL(mismatches, 0);
      free(c);
      free(h);
    }
  }
}

static void test_cuda_bits_are_identical_to_host(void) {
  check_identical(RECAP__RNG_BITS, 0.0f, 0.0f);
}

static void test_cuda_uniforms_are_identical_to_host(void) {
  check_identical(RECAP__RNG_UNIFORM, -3.0f, 5.0f);
}

/* CUDA's logf/cosf/sinf (without fast-math) and glibc's differ by a few ulp; the bound is
 * |cuda - host| <= 1e-6 * |host| + 1e-6 * std. The largest ulp distance is printed. */
static void check_normals_close(float mean, float std) {
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
    uint32_t *c, *h;
    draw_both(RECAP__RNG_NORMAL, sizes[s], s % 2, mean, std, &c, &h);
    const float *cf = (const float *)c, *hf = (const float *)h;
    size_t bad = 0, first = 0;
    int64_t max_ulp = 0;
    for (size_t i = 0; i < sizes[s]; ++i) {
      int64_t d = ulp_distance(cf[i], hf[i]);
      if (d > max_ulp) max_ulp = d;
      if (!(fabsf(cf[i] - hf[i]) <= 1e-6f * fabsf(hf[i]) + 1e-6f * std)) {
        if (!bad) first = i;
        bad++;
      }
    }
    printf("\n  normals(mean %g, std %g) n=%zu: max ulp distance CUDA vs host %lld\n", (double)mean,
           (double)std, sizes[s], (long long)max_ulp);
    if (bad)
      fprintf(stderr, "\n  n=%zu: %zu outside the bound, first at %zu: %.9g vs %.9g\n", sizes[s],
              bad, first, (double)cf[first], (double)hf[first]);
    CU_ASSERT_EQUAL(bad, 0);
    free(c);
    free(h);
  }
}

static void test_cuda_normals_match_host_within_tolerance(void) {
  check_normals_close(0.0f, 1.0f);
  check_normals_close(3.0f, 0.5f);
}

static void test_cuda_graph_replays_draw_what_eager_draws_would(void) {
  check_replays_match_eager(cstream);
}

int main(void) {
  CU_pSuite philox = test_add_suite("rng/philox", NULL, NULL);
  CU_ADD_TEST(philox, test_philox_matches_random123_known_answers);
  CU_ADD_TEST(philox, test_philox_draw_places_seed_in_key_and_offset_in_counter);
  CU_ADD_TEST(philox, test_unit_float_is_top_24_bits_times_2_pow_minus_24);
  CU_ADD_TEST(philox, test_uniform_never_returns_hi);
  CU_ADD_TEST(philox, test_box_muller_of_extreme_words_is_finite);

  CU_pSuite host = test_add_suite("rng/host", host_init, host_cleanup);
  CU_ADD_TEST(host, test_never_seeded_generator_starts_from_the_fixed_default_seed);
  CU_ADD_TEST(host, test_raw_bits_follow_the_counter_layout);
  CU_ADD_TEST(host, test_a_draw_of_n_is_a_prefix_of_a_draw_of_more);
  CU_ADD_TEST(host, test_normals_are_box_muller_of_word_pairs_of_one_block);
  CU_ADD_TEST(host, test_each_draw_advances_the_offset_by_one_and_differs);
  CU_ADD_TEST(host, test_empty_draw_does_nothing);
  CU_ADD_TEST(host, test_manual_seed_reproduces_draws_and_resets_offset);
  CU_ADD_TEST(host, test_state_round_trips_through_get_and_set);
  CU_ADD_TEST(host, test_seed_chooses_a_random_seed_and_reports_it);
  CU_ADD_TEST(host, test_generator_calls_reject_bad_devices_and_null);
  CU_ADD_TEST(host, test_bad_fill_arguments_are_rejected_without_drawing);
  CU_ADD_TEST(host, test_uniform_lies_in_range_with_uniform_moments);
  CU_ADD_TEST(host, test_normal_has_requested_mean_and_std);

  CU_pSuite graph = test_add_suite("rng/graph (host)", host_init, host_cleanup);
  CU_ADD_TEST(graph, test_graph_replays_draw_what_eager_draws_would);
  CU_ADD_TEST(graph, test_graph_with_two_draws_replays_consecutive_offsets);
  CU_ADD_TEST(graph, test_replay_after_manual_seed_uses_the_new_seed);
  CU_ADD_TEST(graph, test_capture_without_draws_has_no_binding);
  CU_ADD_TEST(graph, test_random_op_in_a_capture_without_slot_is_refused);
  CU_ADD_TEST(graph, test_slot_calls_enforce_the_capture_protocol);
  CU_ADD_TEST(graph, test_slots_are_freed_by_abort_and_destroy);
  CU_ADD_TEST(graph, test_destroying_a_binding_during_another_capture_keeps_it_valid);
  CU_ADD_TEST(graph, test_side_stream_draws_in_a_capture_only_when_attached);
  CU_ADD_TEST(graph, test_replay_prepare_inside_a_capture_is_refused);
  CU_ADD_TEST(graph, test_loop_reservation_gives_back_unrun_draws_only_if_untouched);

  CU_pSuite cuda = test_add_cuda_suite("rng/cuda", cuda_init, cuda_cleanup);
  CU_ADD_TEST(cuda, test_cuda_bits_are_identical_to_host);
  CU_ADD_TEST(cuda, test_cuda_uniforms_are_identical_to_host);
  CU_ADD_TEST(cuda, test_cuda_normals_match_host_within_tolerance);
  CU_ADD_TEST(cuda, test_cuda_graph_replays_draw_what_eager_draws_would);
  return test_run_all();
}
