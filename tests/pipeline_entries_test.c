/*
 * pipeline_entries_test.c: several entry graphs over shared state (issue 18). A spec's
 * `entries:` name dim sets; a pipeline created with recap_pipeline_options.share uses another
 * pipeline's params and state. The reference is a hand computation in double precision of
 * causal attention over every token so far, from the params the pipelines hold: prefill (3
 * tokens) then decode (1 token, then another) through one shared KV cache must give it.
 */
#include "tests/pipeline_util.h"

enum { B = 2, D = 8, H = 2, DH = 4, SMAX = 8, PROMPT = 3, TOKENS = 5 };

/* Causal attention over a KV cache, with entries for a prompt and one token per step. */
static const char kv_spec[] =
    "name: kv\ndtype: f32\nseed: 5\n"
    "dims: {B: [1, 2], S: 1, D: 8, H: 2, Dh: 4, Smax: 8}\n"
    "entries:\n"
    "  prefill: {dims: {S: 3}}\n"
    "  decode: {dims: {S: 1}}\n"
    "tensors:\n"
    "  x:       {shape: [B, S, D], role: input}\n"
    "  pos:     {role: scalar, value: 0}\n"
    "  len:     {role: scalar, value: 1}\n"
    "  k_cache: {shape: [B, Smax, H, Dh], role: state}\n"
    "  v_cache: {shape: [B, Smax, H, Dh], role: state}\n"
    "  w_q: {shape: [D, D], role: param, init: normal, std: 0.4}\n"
    "  w_k: {shape: [D, D], role: param, init: normal, std: 0.4}\n"
    "  w_v: {shape: [D, D], role: param, init: normal, std: 0.4}\n"
    "ops:\n"
    "  - {op: linear, in: [x, w_q], out: q_flat}\n"
    "  - {op: linear, in: [x, w_k], out: k_flat}\n"
    "  - {op: linear, in: [x, w_v], out: v_flat}\n"
    "  - {op: reshape, in: [q_flat], out: q_rows, shape: [B, S, H, Dh]}\n"
    "  - {op: reshape, in: [k_flat], out: k_rows, shape: [B, S, H, Dh]}\n"
    "  - {op: reshape, in: [v_flat], out: v_rows, shape: [B, S, H, Dh]}\n"
    "  - {op: kv_append, in: [k_cache, k_rows, pos], out: k_all}\n"
    "  - {op: kv_append, in: [v_cache, v_rows, pos], out: v_all}\n"
    "  - {op: permute, in: [q_rows], out: q, dims: [0, 2, 1, 3]}\n"
    "  - {op: permute, in: [k_all], out: k, dims: [0, 2, 1, 3]}\n"
    "  - {op: permute, in: [v_all], out: v, dims: [0, 2, 1, 3]}\n"
    "  - {op: attention, in: [q, k, v, len], out: attn, causal: true}\n"
    "  - {op: permute, in: [attn], out: attn_rows, dims: [0, 2, 1, 3]}\n"
    "  - {op: reshape, in: [attn_rows], out: y, shape: [B, S, D]}\n"
    "outputs: [y]\n"
    "run: {warmup: 2}\n";

static recap_pipeline *make_entry(const char *entry, recap_pipeline *share) {
  recap_pipeline_options o = opts_on(test_device);
  o.entry = entry;
  o.share = share;
  return make(kv_spec, &o);
}

/* x W^T for one token (W is [D, D], rows are outputs). */
static void project(const float *w, const float *x, double *out) {
  for (int n = 0; n < D; ++n) {
    double acc = 0;
    for (int k = 0; k < D; ++k) acc += (double)x[k] * w[n * D + k];
    out[n] = acc;
  }
}

/* y[b][t] for token t: causal attention of token t's query over the keys of tokens 0..t. */
static void reference(const float *x, const float *wq, const float *wk, const float *wv, int b,
                      int t, double y[D]) {
  double q[D], k[TOKENS][D], v[TOKENS][D];
  project(wq, &x[(b * TOKENS + t) * D], q);
  for (int u = 0; u <= t; ++u) {
    project(wk, &x[(b * TOKENS + u) * D], k[u]);
    project(wv, &x[(b * TOKENS + u) * D], v[u]);
  }
  for (int h = 0; h < H; ++h) {
    double s[TOKENS], top = -INFINITY, sum = 0;
    for (int u = 0; u <= t; ++u) {
      s[u] = 0;
      for (int d = 0; d < DH; ++d) s[u] += q[h * DH + d] * k[u][h * DH + d];
      s[u] /= sqrt((double)DH);
      if (s[u] > top) top = s[u];
    }
    for (int u = 0; u <= t; ++u) sum += s[u] = exp(s[u] - top);
    for (int d = 0; d < DH; ++d) {
      double acc = 0;
      for (int u = 0; u <= t; ++u) acc += s[u] / sum * v[u][h * DH + d];
      y[h * DH + d] = acc;
    }
  }
}

/* Runs tokens [first, first + count) of x through p at position `first` and checks y. */
static void step(recap_pipeline *p, const float *x, const float *w[3], int first, int count) {
  float *in = malloc(sizeof(float) * B * count * D), *y = malloc(sizeof(float) * B * count * D);
  CU_ASSERT_PTR_NOT_NULL_FATAL(in);
  CU_ASSERT_PTR_NOT_NULL_FATAL(y);
  for (int b = 0; b < B; ++b)
    memcpy(&in[b * count * D], &x[(b * TOKENS + first) * D], sizeof(float) * count * D);
  CHECK_OK(recap_pipeline_copy_in(p, "x", in, sizeof(float) * B * count * D, B));
  set_scalar(p, "pos", first);
  set_scalar(p, "len", first + count);
  CHECK_OK(recap_pipeline_run(p, B));
  CHECK_OK(recap_pipeline_copy_out(p, "y", y, sizeof(float) * B * count * D, B));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < count; ++t) {
      double ref[D];
      reference(x, w[0], w[1], w[2], b, first + t, ref);
      for (int n = 0; n < D; ++n) {
        float got = y[(b * count + t) * D + n];
        if (fabs(got - ref[n]) > 1e-4 + 1e-4 * fabs(ref[n])) {
          CU_FAIL("y differs from the hand computation");
          fprintf(stderr, "batch %d token %d element %d: %g, expected %g\n", b, first + t, n, got,
                  ref[n]);
          b = B;
          t = count;
          break;
        }
      }
    }
  free(in);
  free(y);
}

static void test_prefill_then_decode_share_one_cache(void) {
  recap_pipeline *prefill = make_entry("prefill", NULL);
  recap_pipeline *decode = make_entry("decode", prefill);
  recap_pipeline_info info;
  CHECK_OK(recap_pipeline_info_get(decode, &info));
  CU_ASSERT_STRING_EQUAL(info.entry, "decode");

  /* One cache and one set of weights: the same memory, not copies. */
  recap_tensor a, b;
  const char *shared[] = {"k_cache", "v_cache", "w_q", "w_k", "w_v"};
  for (size_t i = 0; i < sizeof shared / sizeof shared[0]; ++i) {
    CHECK_OK(recap_pipeline_tensor(prefill, shared[i], &a));
    CHECK_OK(recap_pipeline_tensor(decode, shared[i], &b));
    CU_ASSERT_PTR_EQUAL(a.data, b.data);
  }
  CHECK_OK(recap_pipeline_tensor(prefill, "x", &a));
  CHECK_OK(recap_pipeline_tensor(decode, "x", &b));
  CU_ASSERT_PTR_NOT_EQUAL(a.data, b.data); /* inputs are each pipeline's own */
  recap_pipeline_stats stats;
  CHECK_OK(recap_pipeline_stats_get(decode, &stats));
  CU_ASSERT_EQUAL(stats.param_bytes, 0);

  test_rng rng;
  test_rng_init(&rng);
  float *x = random_data(&rng, RECAP_DTYPE_F32, sizeof(float) * B * TOKENS * D);
  float *w[3];
  const char *names[3] = {"w_q", "w_k", "w_v"};
  for (int i = 0; i < 3; ++i) w[i] = out_copy(prefill, names[i], 0);

  step(prefill, x, (const float **)w, 0, PROMPT);
  /* The decode pipeline captures its graphs now, after the prompt is in the cache: the
   * capture's warmup must leave the cache as prefill wrote it. */
  step(decode, x, (const float **)w, PROMPT, 1);
  CHECK_OK(recap_pipeline_stats_get(decode, &stats));
  CU_ASSERT(stats.replays == 1 || test_device.backend == RECAP_BACKEND_HOST);

  /* Prefill sees what decode appended: the cache rows of token PROMPT hold its keys. */
  float *cache = out_copy(prefill, "k_cache", 0);
  double k[D];
  for (int bb = 0; bb < B; ++bb) {
    project(w[1], &x[(bb * TOKENS + PROMPT) * D], k);
    for (int n = 0; n < D; ++n)
      CU_ASSERT_DOUBLE_EQUAL(cache[((size_t)bb * SMAX + PROMPT) * D + n], k[n], 1e-4);
  }
  free(cache);

  /* The decode pipeline keeps the cache and weights alive once prefill is gone. */
  CHECK_OK(recap_pipeline_destroy(prefill));
  step(decode, x, (const float **)w, PROMPT + 1, 1);
  CHECK_OK(recap_pipeline_destroy(decode));
  for (int i = 0; i < 3; ++i) free(w[i]);
  free(x);
}

static void test_clones_and_chains(void) {
  recap_pipeline *prefill = make_entry("prefill", NULL);
  recap_pipeline *decode = make_entry("decode", prefill);
  recap_pipeline *own = NULL, *sharing = NULL, *chained = NULL;
  /* A clone has its own state unless it is given one to share. */
  CHECK_OK(recap_pipeline_clone(decode, NULL, &own));
  recap_pipeline_options o = {.struct_size = sizeof o, .share = prefill};
  CHECK_OK(recap_pipeline_clone(decode, &o, &sharing));
  chained = make_entry("prefill", decode); /* shares what decode shares: prefill's memory */
  recap_tensor p, t;
  CHECK_OK(recap_pipeline_tensor(prefill, "k_cache", &p));
  CHECK_OK(recap_pipeline_tensor(own, "k_cache", &t));
  CU_ASSERT_PTR_NOT_EQUAL(p.data, t.data);
  CHECK_OK(recap_pipeline_tensor(sharing, "k_cache", &t));
  CU_ASSERT_PTR_EQUAL(p.data, t.data);
  CHECK_OK(recap_pipeline_tensor(chained, "k_cache", &t));
  CU_ASSERT_PTR_EQUAL(p.data, t.data);
  CHECK_OK(recap_pipeline_tensor(prefill, "w_v", &p));
  CHECK_OK(recap_pipeline_tensor(own, "w_v", &t));
  CU_ASSERT_PTR_EQUAL(p.data, t.data); /* params: the model's, shared by every clone */
  /* Any destruction order. */
  CHECK_OK(recap_pipeline_destroy(decode));
  CHECK_OK(recap_pipeline_destroy(prefill));
  CHECK_OK(recap_pipeline_run(chained, 1));
  CHECK_OK(recap_pipeline_destroy(chained));
  CHECK_OK(recap_pipeline_run(sharing, 1));
  CHECK_OK(recap_pipeline_destroy(sharing));
  CHECK_OK(recap_pipeline_destroy(own));
}

static void test_mismatched_share_is_refused(void) {
  recap_pipeline *prefill = make_entry("prefill", NULL);
  const char *dims[] = {"Smax=16", NULL};
  recap_pipeline_options o = opts_on(test_device);
  o.entry = "decode";
  o.dims = dims;
  o.share = prefill;
  recap_pipeline *decode = NULL;
  CHECK_STATUS(recap_pipeline_create_string(kv_spec, strlen(kv_spec), "<test>", &o, &decode),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("k_cache");
  CHECK_ERROR_MENTIONS("[2, 16, 2, 4]");
  CU_ASSERT_PTR_NULL(decode);
  /* A param of one name that is a state in the other. */
  static const char other[] =
      "name: other\ndtype: f32\ndims: {B: [1, 2], S: 1, D: 8}\n"
      "tensors:\n"
      "  x: {shape: [B, S, D], role: input}\n"
      "  w_q: {shape: [D, D], role: state}\n"
      "ops:\n"
      "  - {op: linear, in: [x, w_q], out: y}\n";
  o = opts_on(test_device);
  o.share = prefill;
  CHECK_STATUS(recap_pipeline_create_string(other, strlen(other), "<other>", &o, &decode),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("w_q");
  CHECK_ERROR_MENTIONS("role, dtype and shape");
  CHECK_OK(recap_pipeline_destroy(prefill));
}

static void test_unknown_entry(void) {
  recap_pipeline_options o = opts_on(test_device);
  o.entry = "prefil";
  recap_pipeline *p = NULL;
  CHECK_STATUS(recap_pipeline_create_string(kv_spec, strlen(kv_spec), "<test>", &o, &p),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("no entry 'prefil' (its entries: prefill, decode)");
  CU_ASSERT_PTR_NULL(p);
}

/* Spec errors in `entries:`, each at its FILE:LINE:COL, whichever entry is chosen. */
static void expect_spec_error(const char *yaml, const char *entry, const char *message) {
  recap_pipeline_options o = opts_on(test_device);
  o.entry = entry;
  recap_pipeline *p = NULL;
  CHECK_STATUS(recap_pipeline_create_string(yaml, strlen(yaml), "<e>", &o, &p),
               RECAP_STATUS_SPEC_ERROR);
  CHECK_ERROR_MENTIONS(message);
}

static void test_entry_errors_are_positioned(void) {
  const char *head =
      "dims: {B: [1, 2], S: 1}\n"
      "tensors: {x: {shape: [B, S], role: input}}\n"
      "ops: [{op: relu, in: [x], out: y}]\n";
  char yaml[512];
  snprintf(yaml, sizeof yaml, "%sentries:\n  a: {dims: {S: 2}}\n  b: {dims: {Q: 2}}\n", head);
  expect_spec_error(yaml, "a", "<e>:6:14: error: entry 'b': the spec declares no dim 'Q'");
  snprintf(yaml, sizeof yaml, "%sentries:\n  a: {dims: {S: [1, 2]}}\n", head);
  expect_spec_error(yaml, NULL, "<e>:5:13: error: entry 'a': dims 'B' and 'S' would both have");
  /* Every entry is checked over the spec's own dims, not over the chosen entry's. */
  snprintf(yaml, sizeof yaml, "%sentries:\n  a: {dims: {B: 2}}\n  b: {dims: {S: [1, 2]}}\n", head);
  expect_spec_error(yaml, "a", "<e>:6:13: error: entry 'b': dims 'B' and 'S' would both have");
  snprintf(yaml, sizeof yaml, "%sentries:\n  a: {dims: {S: [2, 1]}}\n", head);
  expect_spec_error(yaml, "a", "<e>:5:21: error: entry 'a': dim 'S': bucket values must be");
  snprintf(yaml, sizeof yaml, "%sentries:\n  a: {dim: {S: 2}}\n", head);
  expect_spec_error(yaml, "a", "entry 'a' needs `dims:`");
  snprintf(yaml, sizeof yaml, "%sentries: [a, b]\n", head);
  expect_spec_error(yaml, NULL, "<e>:4:10: error: entries");
  /* A scalar makes a bucketed dim plain, so the entry may put buckets on another. */
  snprintf(yaml, sizeof yaml, "%sentries:\n  a: {dims: {B: 2, S: [1, 4]}}\n", head);
  recap_pipeline_options o = opts_on(test_device);
  o.entry = "a";
  recap_pipeline *p = make(yaml, &o);
  recap_pipeline_info info;
  CHECK_OK(recap_pipeline_info_get(p, &info));
  CU_ASSERT_STRING_EQUAL(info.bucket_dim, "S");
  CU_ASSERT_EQUAL(info.num_buckets, 2);
  CHECK_OK(recap_pipeline_destroy(p));
}

static const test_case kTests[] = {
    {"prefill_then_decode_share_one_cache", test_prefill_then_decode_share_one_cache, true},
    {"clones_and_chains", test_clones_and_chains, true},
    {"mismatched_share_is_refused", test_mismatched_share_is_refused, false},
    {"unknown_entry", test_unknown_entry, false},
    {"entry_errors_are_positioned", test_entry_errors_are_positioned, false},
};

int main(void) {
  test_add_host_and_cuda_suites("pipeline_entries", kTests, sizeof kTests / sizeof kTests[0]);
  return test_run_all();
}
