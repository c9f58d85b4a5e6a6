/*
 * gemm_gated_test.c: a linear's gated output (kernels/gemm/gemm.h, attribute `gated`), the
 * SwiGLU unit that engine/fuse.h folds into its gate_up projection.
 *
 * The reference is a float64 hand computation of the unfolded ops: the norm when the linear
 * folds one (rms_norm: x * rsqrt(mean(x^2) + eps) * gamma, the post-attention norm of a decode
 * step), the product's halves g and u (x W_gate^T + b_gate, x W_up^T + b_up), each rounded to
 * the dtype as the unfolded linear wrote them, then silu(g) * u, with a tolerance from the
 * magnitudes of the terms.
 * Host: f32, f16 and bf16, M in {1, 3, 16, 17, 64}, with and without bias and the norm, F a
 * multiple of 8 and not; infer's shape and refusals; the CUDA workspace the contract sizes.
 * CUDA (inactive without a GPU): the same cases against the hand computation and the host's
 * result on every path: the skinny kernel's default variant (bulk copies on Hopper), its
 * register kernel (RECAP_GEMM_SKINNY_PIPE=0) and the workspace path (RECAP_GEMM_SKINNY=0, and
 * every M > 16 and f32); every skinny configuration directly (K = 2056: a partial last step
 * and chunk; F = 100: a partial last tile); two runs give identical bits.
 */
#include "tests/gemm_util.h"

static const int64_t test_ms[] = {1, 3, 16, 17, 64};

/* A gated linear with its inputs x [m, k], weight [2f, k], bias? [2f], norm weight? [k]. */
typedef struct {
  recap__op_call call;
  tbuf in[4];
  int num_in;
  bool bias;
  double *px; /* [m, k]: x, or with the norm x * rsqrt(mean(x^2) + eps) * gamma, in float64 */
  double *ref, *scale;
} gated_case;

/* The dot product of x row i (after the norm) and weight row j in float64, plus the bias, and
 * the sum of the terms' magnitudes. */
static double dot(const gated_case *c, int64_t i, int64_t j, int64_t k, double *mag) {
  const recap_tensor *w = &c->in[1].t;
  const recap_dtype dt = w->dtype;
  double sum = 0, m = 0;
  for (int64_t p = 0; p < k; ++p) {
    const double t = c->px[i * k + p] * recap__load_f32(w->data, dt, j * k + p);
    sum += t;
    m += fabs(t);
  }
  if (c->bias) {
    const double b = recap__load_f32(c->in[2].t.data, dt, j);
    sum += b;
    m += fabs(b);
  }
  *mag = m;
  return sum;
}

/* v rounded to the dtype, as a store and a load of it. */
static double round_to(recap_dtype dt, double v) {
  uint32_t cell = 0;
  recap__store_f32(&cell, dt, 0, (float)v);
  return recap__load_f32(&cell, dt, 0);
}

static void gated_case_make(gated_case *c, recap_dtype dt, int64_t m, int64_t k, int64_t f,
                            bool bias, bool norm, test_rng *rng) {
  memset(c, 0, sizeof *c);
  c->call.def = recap__op_find("linear");
  recap__op_attrs_set_defaults(c->call.def, &c->call.attrs);
  const int64_t xs[2] = {m, k}, ws[2] = {2 * f, k}, bs[1] = {2 * f}, gs[1] = {k};
  c->in[c->num_in++] = tb_make(dt, 2, xs, rng);
  c->in[c->num_in++] = tb_make(dt, 2, ws, rng);
  if (bias) c->in[c->num_in++] = tb_make(dt, 1, bs, rng);
  c->bias = bias;
  if (norm) {
    c->in[c->num_in++] = tb_make(dt, 1, gs, rng);
    c->call.attrs.rms_norm = 1;
    c->call.attrs.eps = 1e-5;
  }
  c->px = malloc(sizeof(double) * (size_t)(m * k));
  for (int64_t i = 0; i < m; ++i) {
    double ss = 0;
    for (int64_t p = 0; p < k; ++p) {
      const double v = recap__load_f32(c->in[0].t.data, dt, i * k + p);
      ss += v * v;
    }
    const double inv = norm ? 1.0 / sqrt(ss / (double)k + 1e-5) : 1.0;
    for (int64_t p = 0; p < k; ++p)
      c->px[i * k + p] = recap__load_f32(c->in[0].t.data, dt, i * k + p) * inv *
                         (norm ? recap__load_f32(c->in[c->num_in - 1].t.data, dt, p) : 1.0);
  }
  c->call.attrs.gated = RECAP_ACT_SILU;
  c->call.num_inputs = c->num_in;
  for (int i = 0; i < c->num_in; ++i) c->call.inputs[i] = c->in[i].t;
  CHECK_OK(recap__op_infer(&c->call));
  recap_tensor *o = &c->call.outputs[0];
  CU_ASSERT_EQUAL(o->ndim, 2);
  CU_ASSERT_EQUAL(o->shape[0], m);
  CU_ASSERT_EQUAL(o->shape[1], f);
  const size_t bytes = (size_t)(m * f) * recap_dtype_size(dt);
  o->data = malloc(bytes);
  memset(o->data, 0xff, bytes); /* NaN: an unwritten element fails */
  c->ref = malloc(sizeof(double) * (size_t)(m * f));
  c->scale = malloc(sizeof(double) * (size_t)(m * f));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < f; ++j) {
      double gmag, umag;
      const double g = round_to(dt, dot(c, i, j, k, &gmag)),
                   u = round_to(dt, dot(c, i, f + j, k, &umag));
      const double sg = g / (1.0 + exp(-g));
      c->ref[i * f + j] = sg * u;
      /* |silu'| <= 1.1: an error dg in g moves the result by at most 1.1 |u| dg; du by |sg| du;
       * and the result's own rounding. */
      c->scale[i * f + j] =
          1.1 * (gmag + fabs(g)) * fabs(u) + fabs(sg) * (umag + fabs(u)) + fabs(sg * u);
    }
}

static void gated_case_free(gated_case *c) {
  for (int i = 0; i < c->num_in; ++i) free(c->in[i].t.data);
  free(c->px);
  free(c->call.outputs[0].data);
  free(c->ref);
  free(c->scale);
}

static void label(char *buf, size_t size, const char *where, const gated_case *c, int64_t m,
                  int64_t f) {
  snprintf(buf, size, "%s %s gated m=%lld f=%lld%s%s", where,
           recap_dtype_name(c->call.inputs[0].dtype), (long long)m, (long long)f,
           c->bias ? " +bias" : "", c->call.attrs.rms_norm ? " +rms_norm" : "");
}

/* ---- host -------------------------------------------------------------------------------- */

static void test_host_gated_output_matches_the_unfolded_ops_by_hand(void) {
  static const int64_t fs[] = {40, 13};
  test_rng rng;
  test_rng_init(&rng);
  for (int d = 0; d < 3; ++d)
    for (size_t mi = 0; mi < sizeof test_ms / sizeof test_ms[0]; ++mi)
      for (size_t fi = 0; fi < 2; ++fi)
        for (int variant = 0; variant < 4; ++variant) {
          const bool bias = variant & 1, norm = variant & 2;
          gated_case c;
          gated_case_make(&c, float_types[d], test_ms[mi], 96, fs[fi], bias, norm, &rng);
          CHECK_OK(recap__op_launch(&c.call, host_stream));
          CHECK_OK(recap_stream_synchronize(host_stream));
          char what[96];
          label(what, sizeof what, "host", &c, test_ms[mi], fs[fi]);
          CU_ASSERT_EQUAL(
              count_bad(&c.call.outputs[0], c.ref, c.scale, host_tol(float_types[d]), what), 0);
          gated_case_free(&c);
        }
}

static void test_host_infer_refuses_bad_gated_outputs(void) {
  test_rng rng;
  test_rng_init(&rng);
  gated_case c;
  gated_case_make(&c, RECAP_DTYPE_F32, 3, 96, 20, true, false, &rng);
  recap__op_call bad = c.call;
  bad.attrs.act = RECAP_ACT_RELU;
  CU_ASSERT_EQUAL(recap__op_infer(&bad), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "attribute 'gated' excludes"));
  bad = c.call;
  bad.attrs.glu = RECAP_ACT_SILU;
  CU_ASSERT_EQUAL(recap__op_infer(&bad), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "attribute 'gated' excludes"));
  /* With rms_norm the last input is the norm's weight: the bias [2F] is no [K] vector. */
  bad = c.call;
  bad.attrs.rms_norm = 1;
  CU_ASSERT_EQUAL(recap__op_infer(&bad), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "input 'norm_weight' has shape"));
  bad = c.call;
  bad.attrs.residual = 1;
  CU_ASSERT_EQUAL(recap__op_infer(&bad), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "attribute 'gated' excludes"));
  bad = c.call;
  bad.attrs.gated = (recap__activation)99;
  CU_ASSERT_EQUAL(recap__op_infer(&bad), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "unknown value"));
  bad = c.call;
  bad.num_inputs = 2;
  bad.inputs[1].shape[0] = 39; /* odd rows: no halves */
  CU_ASSERT_EQUAL(recap__op_infer(&bad), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "must be even"));
  gated_case_free(&c);
}

/* On CUDA the product [M, 2F] goes to the workspace (256-byte rounded) where the skinny kernel
 * does not run, after the norm's P(x) [M, K] when the linear folds a norm; the host needs none. */
static void test_host_cuda_workspace_holds_the_product(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (int norm = 0; norm < 2; ++norm) {
    gated_case c;
    gated_case_make(&c, RECAP_DTYPE_BF16, 17, 96, 40, false, norm, &rng);
    /* 17 * 80 * 2 = 2720 -> 2816; the norm's 17 * 96 * 2 = 3264 -> 3328 first. */
    CU_ASSERT_EQUAL(c.call.def->workspace_bytes(&c.call, RECAP_BACKEND_CUDA),
                    norm ? 3328 + 2816 : 2816);
    CU_ASSERT_EQUAL(c.call.def->workspace_bytes(&c.call, RECAP_BACKEND_HOST), 0);
    gated_case_free(&c);
  }
}

/* ---- CUDA -------------------------------------------------------------------------------- */

#if RECAP_WITH_CUDA

/* The case on CUDA under the current environment (gemm_util.h): within tolerance of the hand
 * computation and of the host's result (run first), and the same bits twice. */
static void check_cuda(const gated_case *c, int pipe, const char *what) {
  tolerance tol = host_tol(c->call.inputs[0].dtype);
  if (c->call.inputs[0].dtype == RECAP_DTYPE_F32) tol.rtol = 1e-4; /* TF32 where cuBLASLt runs it */
  check_linear_cuda(&c->call, c->in, c->num_in, c->ref, c->scale, tol, pipe, what);
}

/* K = 2048 and F = 100 (200 rows of W): shapes the skinny kernel takes at every M <= 16. */
static void test_cuda_gated_output_matches_host_on_every_path(void) {
  static const char *const paths[][3] = {
      {"default", NULL, NULL},
      {"register kernel", "RECAP_GEMM_SKINNY_PIPE", "0"},
      {"workspace path", "RECAP_GEMM_SKINNY", "0"},
  };
  test_rng rng;
  test_rng_init(&rng);
  for (int d = 0; d < 3; ++d)
    for (size_t mi = 0; mi < sizeof test_ms / sizeof test_ms[0]; ++mi)
      for (int variant = 0; variant < 4; ++variant) {
        gated_case c;
        gated_case_make(&c, float_types[d], test_ms[mi], 2048, 100, variant & 1, variant & 2, &rng);
        CHECK_OK(recap__op_launch(&c.call, host_stream));
        CHECK_OK(recap_stream_synchronize(host_stream));
        for (size_t p = 0; p < sizeof paths / sizeof paths[0]; ++p) {
          if (paths[p][1]) set_gemm_env(paths[p][1], paths[p][2]);
          char what[128];
          label(what, sizeof what, paths[p][0], &c, test_ms[mi], 100);
          check_cuda(&c, -1, what);
          if (paths[p][1]) set_gemm_env(paths[p][1], NULL);
        }
        gated_case_free(&c);
      }
}

/* Every configuration of the skinny kernel with a gated output, M 1, 3 and 16 (one and two
 * 8-row tiles of x), f16 and bf16, with and without bias and the norm; F 100, 2048 and 4100 (a
 * partial tile; whole ones over more blocks than SMs; more tiles than an H100 or H200 holds blocks
 * at once, so each block of the bulk kernel takes several); K 2048, 64 (under one chunk) and 2056
 * (a partial last step and chunk). */
static void test_cuda_every_skinny_configuration_pairs_gate_and_up(void) {
  /* K 64, under one stage's columns, after K 2048 has filled the blocks' shared memory: the
   * norm's sums of squares must not read what an earlier launch left there. */
  static const int64_t ms[] = {1, 3, 16}, fs[] = {100, 2048, 4100}, ks[] = {2048, 64, 2056};
  test_rng rng;
  test_rng_init(&rng);
  for (int d = 1; d < 3; ++d)
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; ++mi)
      for (size_t fi = 0; fi < 3; ++fi)
        for (size_t ki = 0; ki < 3; ++ki)
          for (int variant = 0; variant < 4; ++variant) {
            gated_case c;
            gated_case_make(&c, float_types[d], ms[mi], ks[ki], fs[fi], variant & 1, variant & 2,
                            &rng);
            CHECK_OK(recap__op_launch(&c.call, host_stream));
            CHECK_OK(recap_stream_synchronize(host_stream));
            for (int pipe = 0; pipe < 5; ++pipe) {
              if (pipe == 4 && ms[mi] > 8) continue; /* the four-stage shape: m <= 8 */
              char where[48], what[128];
              snprintf(where, sizeof where, "skinny pipe %d k=%lld", pipe, (long long)ks[ki]);
              label(what, sizeof what, where, &c, ms[mi], fs[fi]);
              check_cuda(&c, pipe, what);
            }
            gated_case_free(&c);
          }
}

#endif /* RECAP_WITH_CUDA */

int main(void) {
  CU_pSuite host = test_add_suite("gemm_gated/host", host_suite_init, host_suite_cleanup);
  CU_ADD_TEST(host, test_host_gated_output_matches_the_unfolded_ops_by_hand);
  CU_ADD_TEST(host, test_host_infer_refuses_bad_gated_outputs);
  CU_ADD_TEST(host, test_host_cuda_workspace_holds_the_product);
  CU_pSuite cuda = test_add_cuda_suite("gemm_gated/cuda",
#if RECAP_WITH_CUDA
                                       cuda_suite_init, cuda_suite_cleanup);
  CU_ADD_TEST(cuda, test_cuda_gated_output_matches_host_on_every_path);
  CU_ADD_TEST(cuda, test_cuda_every_skinny_configuration_pairs_gate_and_up);
#else
                                       NULL, NULL);
  (void)cuda;
#endif
  return test_run_all();
}
