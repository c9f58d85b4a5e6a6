/*
 * gemm_prologue_test.c: a linear's prologues (kernels/gemm/gemm.h: rms_norm, glu), the folded
 * rmsnorm and SwiGLU of engine/fuse.h.
 *
 * Host: the folded op against a float64 hand computation of the unfolded ops (the norm or
 * gated unit, then x W^T + bias + residual) for f32, f16 and bf16, M in {1, 3, 16, 17, 64}, with
 * and without bias and residual; the folded rms_norm equals the rmsnorm op followed by the plain
 * linear bit for bit (the host computes it exactly as rmsnorm does); infer's refusals; the
 * CUDA workspace the contract sizes (the norm's P(x), none for glu, which CUDA refuses).
 * CUDA (inactive without a GPU): the norm's cases against the same computation and the host's
 * folded result, on every path: the skinny kernel's default variant (bulk copies on Hopper),
 * its register kernel (RECAP_GEMM_SKINNY_PIPE=0), and the workspace path (RECAP_GEMM_SKINNY=0,
 * and every M > 16 and f32); every skinny configuration directly (K = 2056: a partial last
 * step and chunk); two runs give identical bits. The gated unit is refused there, by the op
 * and by each kernel entry point (its kernels were removed: docs/SERVING.md "Prologue folds").
 */
#include "tests/gemm_util.h"

static const int64_t test_ms[] = {1, 3, 16, 17, 64};

typedef enum { PRO_RMS, PRO_GLU } prologue_kind;

/* A folded linear with its inputs: x, weight, bias?, residual?, norm_weight? (gemm.h). */
typedef struct {
  recap__op_call call;
  tbuf in[5];
  int num_in;
  double *ref, *scale;
} pcase;

static void pcase_make(pcase *c, recap_dtype dt, prologue_kind kind, int64_t m, int64_t k,
                       int64_t n, bool bias, bool residual, test_rng *rng) {
  memset(c, 0, sizeof *c);
  c->call.def = recap__op_find("linear");
  recap__op_attrs_set_defaults(c->call.def, &c->call.attrs);
  const int64_t xs[2] = {m, kind == PRO_GLU ? 2 * k : k}, ws[2] = {n, k}, bs[1] = {n},
                rs[2] = {m, n}, gs[1] = {k};
  c->in[c->num_in++] = tb_make(dt, 2, xs, rng);
  c->in[c->num_in++] = tb_make(dt, 2, ws, rng);
  if (bias) c->in[c->num_in++] = tb_make(dt, 1, bs, rng);
  if (residual) c->in[c->num_in++] = tb_make(dt, 2, rs, rng);
  if (kind == PRO_RMS) {
    c->in[c->num_in++] = tb_make(dt, 1, gs, rng);
    c->call.attrs.rms_norm = 1;
    c->call.attrs.eps = 1e-5;
  } else {
    c->call.attrs.glu = RECAP_ACT_SILU;
  }
  c->call.attrs.residual = residual;
  c->call.num_inputs = c->num_in;
  for (int i = 0; i < c->num_in; ++i) c->call.inputs[i] = c->in[i].t;
  CHECK_OK(recap__op_infer(&c->call));
  recap_tensor *o = &c->call.outputs[0];
  const size_t bytes = (size_t)(m * n) * recap_dtype_size(dt);
  o->data = malloc(bytes);
  memset(o->data, 0xff, bytes); /* NaN: an unwritten element fails */

  /* The unfolded ops by hand, in float64: P(x) unrounded, then the product. */
  const recap_tensor *x = &c->in[0].t, *w = &c->in[1].t;
  const recap_tensor *b = bias ? &c->in[2].t : NULL;
  const recap_tensor *r = residual ? &c->in[bias ? 3 : 2].t : NULL;
  const recap_tensor *g = kind == PRO_RMS ? &c->in[c->num_in - 1].t : NULL;
  c->ref = malloc(sizeof(double) * (size_t)(m * n));
  c->scale = malloc(sizeof(double) * (size_t)(m * n));
  double *px = malloc(sizeof(double) * (size_t)k);
  for (int64_t i = 0; i < m; ++i) {
    double inv = 1;
    if (g) {
      double ss = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double v = recap__load_f32(x->data, dt, i * k + p);
        ss += v * v;
      }
      inv = 1.0 / sqrt(ss / (double)k + 1e-5);
    }
    for (int64_t p = 0; p < k; ++p) {
      if (g) {
        px[p] = recap__load_f32(x->data, dt, i * k + p) * inv * recap__load_f32(g->data, dt, p);
      } else {
        const double gate = recap__load_f32(x->data, dt, i * 2 * k + p);
        px[p] = gate / (1.0 + exp(-gate)) * recap__load_f32(x->data, dt, i * 2 * k + k + p);
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double t = px[p] * recap__load_f32(w->data, dt, j * k + p);
        sum += t;
        mag += fabs(t);
      }
      if (b) {
        sum += recap__load_f32(b->data, dt, j);
        mag += fabs(recap__load_f32(b->data, dt, j));
      }
      if (r) {
        sum += recap__load_f32(r->data, dt, i * n + j);
        mag += fabs(recap__load_f32(r->data, dt, i * n + j));
      }
      c->ref[i * n + j] = sum;
      c->scale[i * n + j] = mag;
    }
  }
  free(px);
}

static void pcase_free(pcase *c) {
  for (int i = 0; i < c->num_in; ++i) free(c->in[i].t.data);
  free(c->call.outputs[0].data);
  free(c->ref);
  free(c->scale);
}

static void pcase_run_host(pcase *c) {
  CHECK_OK(recap__op_launch(&c->call, host_stream));
  CHECK_OK(recap_stream_synchronize(host_stream));
}

/* The prologue rounds P(x) to the dtype once (as the unfolded op's output was): a relative
 * error of one rounding per product term on top of the product's own. */
static tolerance prologue_tol(recap_dtype dt) {
  tolerance t = host_tol(dt);
  if (dt == RECAP_DTYPE_F32) t.rtol = 1e-5;
  return t;
}

static void label(char *buf, size_t size, const char *where, recap_dtype dt, prologue_kind kind,
                  int64_t m, bool bias, bool residual) {
  snprintf(buf, size, "%s %s %s m=%lld%s%s", where, recap_dtype_name(dt),
           kind == PRO_RMS ? "rms_norm" : "glu", (long long)m, bias ? " +bias" : "",
           residual ? " +residual" : "");
}

/* ---- host -------------------------------------------------------------------------------- */

static void test_host_folded_linear_matches_the_unfolded_ops_by_hand(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (int d = 0; d < 3; ++d)
    for (int kind = PRO_RMS; kind <= PRO_GLU; ++kind)
      for (size_t mi = 0; mi < sizeof test_ms / sizeof test_ms[0]; ++mi)
        for (int v = 0; v < 4; ++v) {
          pcase c;
          pcase_make(&c, float_types[d], (prologue_kind)kind, test_ms[mi], 96, 40, v & 1, v & 2,
                     &rng);
          pcase_run_host(&c);
          char what[96];
          label(what, sizeof what, "host", float_types[d], (prologue_kind)kind, test_ms[mi], v & 1,
                v & 2);
          CU_ASSERT_EQUAL(
              count_bad(&c.call.outputs[0], c.ref, c.scale, prologue_tol(float_types[d]), what), 0);
          pcase_free(&c);
        }
}

/* rmsnorm then the plain linear on the host: the same bits as the folded op. */
static void test_host_folded_rms_norm_equals_rmsnorm_then_linear_exactly(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (int d = 0; d < 3; ++d) {
    const recap_dtype dt = float_types[d];
    pcase c;
    pcase_make(&c, dt, PRO_RMS, 17, 96, 40, true, true, &rng);
    pcase_run_host(&c);
    /* rmsnorm(x, g) -> xn */
    recap__op_call norm = {.def = recap__op_find("rmsnorm"), .num_inputs = 2};
    recap__op_attrs_set_defaults(norm.def, &norm.attrs);
    norm.attrs.eps = 1e-5;
    norm.inputs[0] = c.in[0].t;
    norm.inputs[1] = c.in[4].t;
    CHECK_OK(recap__op_infer(&norm));
    const size_t xbytes = (size_t)(17 * 96) * recap_dtype_size(dt);
    norm.outputs[0].data = malloc(xbytes);
    CHECK_OK(recap__op_launch(&norm, host_stream));
    /* linear(xn, w, b, r) */
    recap__op_call lin = c.call;
    lin.attrs.rms_norm = 0;
    lin.num_inputs = 4;
    lin.inputs[0] = norm.outputs[0];
    const size_t ybytes = (size_t)(17 * 40) * recap_dtype_size(dt);
    lin.outputs[0].data = malloc(ybytes);
    CHECK_OK(recap__op_infer(&lin));
    CHECK_OK(recap__op_launch(&lin, host_stream));
    CHECK_OK(recap_stream_synchronize(host_stream));
    CU_ASSERT_EQUAL(memcmp(lin.outputs[0].data, c.call.outputs[0].data, ybytes), 0);
    free(norm.outputs[0].data);
    free(lin.outputs[0].data);
    pcase_free(&c);
  }
}

static void test_host_infer_refuses_bad_prologues(void) {
  test_rng rng;
  test_rng_init(&rng);
  pcase c;
  pcase_make(&c, RECAP_DTYPE_F32, PRO_RMS, 3, 96, 40, false, false, &rng);
  recap__op_call bad = c.call;
  bad.attrs.glu = RECAP_ACT_SILU; /* both prologues */
  CU_ASSERT_EQUAL(recap__op_infer(&bad), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "exclude each other"));
  bad = c.call;
  bad.num_inputs = 2; /* rms_norm without its weight */
  CU_ASSERT_EQUAL(recap__op_infer(&bad), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "norm's weight"));
  bad = c.call;
  bad.inputs[2].shape[0] = 95; /* norm_weight not [K] */
  CU_ASSERT_EQUAL(recap__op_infer(&bad), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "norm_weight"));
  bad = c.call;
  bad.attrs.eps = -1;
  CU_ASSERT_EQUAL(recap__op_infer(&bad), RECAP_STATUS_INVALID_ARGUMENT);
  bad = c.call;
  bad.attrs.rms_norm = 0;
  bad.num_inputs = 2;
  bad.attrs.glu = RECAP_ACT_SILU; /* x [3, 96] holds gate and up of 48: weight's K is 96 */
  CU_ASSERT_EQUAL(recap__op_infer(&bad), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "the half that glu reads"));
  bad.inputs[0].shape[1] = 97;
  bad.inputs[0].strides[0] = 97;
  CU_ASSERT_EQUAL(recap__op_infer(&bad), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "even"));
  pcase_free(&c);
}

/* On CUDA the norm's P(x) [M, K] goes to the workspace (256-byte rounded) where the skinny
 * kernel does not run; the gated unit gets none (CUDA refuses it); the host needs none. */
static void test_host_cuda_workspace_holds_the_norm_prologue_only(void) {
  test_rng rng;
  test_rng_init(&rng);
  pcase norm, glu;
  pcase_make(&norm, RECAP_DTYPE_BF16, PRO_RMS, 17, 96, 40, false, false, &rng);
  pcase_make(&glu, RECAP_DTYPE_BF16, PRO_GLU, 17, 96, 40, false, false, &rng);
  const recap__op_def *def = norm.call.def;
  CU_ASSERT_EQUAL(def->workspace_bytes(&norm.call, RECAP_BACKEND_CUDA), 3328); /* 17*96*2 up */
  CU_ASSERT_EQUAL(def->workspace_bytes(&norm.call, RECAP_BACKEND_HOST), 0);
  CU_ASSERT_EQUAL(def->workspace_bytes(&glu.call, RECAP_BACKEND_CUDA), 0);
  CU_ASSERT_EQUAL(def->workspace_bytes(&glu.call, RECAP_BACKEND_HOST), 0);
  pcase_free(&norm);
  pcase_free(&glu);
}

/* ---- CUDA -------------------------------------------------------------------------------- */

#if RECAP_WITH_CUDA

/* The case on CUDA under the current environment (gemm_util.h): within tolerance of the hand
 * computation and of the host's folded result, and the same bits twice. */
static void check_cuda(const pcase *c, int pipe, const char *what) {
  tolerance tol = prologue_tol(c->call.inputs[0].dtype);
  if (c->call.inputs[0].dtype == RECAP_DTYPE_F32) tol.rtol = 1e-4;
  check_linear_cuda(&c->call, c->in, c->num_in, c->ref, c->scale, tol, pipe, what);
}

/* K = 2048 and N = 200: shapes the skinny kernel takes at every M <= 16 (gemm.h). */
static void test_cuda_folded_linear_matches_host_on_every_path(void) {
  static const char *const paths[][3] = {
      {"default", NULL, NULL},
      {"register kernel", "RECAP_GEMM_SKINNY_PIPE", "0"},
      {"workspace path", "RECAP_GEMM_SKINNY", "0"},
  };
  test_rng rng;
  test_rng_init(&rng);
  for (int d = 0; d < 3; ++d)
    for (size_t mi = 0; mi < sizeof test_ms / sizeof test_ms[0]; ++mi)
      for (int v = 0; v < 4; ++v) {
        pcase c;
        pcase_make(&c, float_types[d], PRO_RMS, test_ms[mi], 2048, 200, v & 1, v & 2, &rng);
        pcase_run_host(&c);
        for (size_t p = 0; p < sizeof paths / sizeof paths[0]; ++p) {
          if (paths[p][1]) set_gemm_env(paths[p][1], paths[p][2]);
          char what[128];
          label(what, sizeof what, paths[p][0], float_types[d], PRO_RMS, test_ms[mi], v & 1, v & 2);
          check_cuda(&c, -1, what);
          if (paths[p][1]) set_gemm_env(paths[p][1], NULL);
        }
        pcase_free(&c);
      }
}

/* Every configuration of the skinny kernel with the norm prologue, M 1, 3 and 16 (one and two
 * 8-row tiles of x), f16 and bf16; N 200 and 8200 (more row tiles than an H100 or H200 holds
 * blocks at once, so each block of the bulk kernel takes several, each with its own norm). */
static void test_cuda_every_skinny_configuration_computes_the_norm_prologue(void) {
  /* K 64 (under one stage's columns) after K 2056 has filled the blocks' shared memory: the
   * norm's sums of squares must not read what an earlier launch left there. */
  static const int64_t ms[] = {1, 3, 16}, ns[] = {200, 8200}, ks[] = {2056, 64};
  test_rng rng;
  test_rng_init(&rng);
  for (int d = 1; d < 3; ++d)
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; ++mi)
      for (size_t ni = 0; ni < 2; ++ni)
        for (size_t ki = 0; ki < 2; ++ki) {
          pcase c;
          pcase_make(&c, float_types[d], PRO_RMS, ms[mi], ks[ki], ns[ni], true, true, &rng);
          pcase_run_host(&c);
          for (int pipe = 0; pipe < 5; ++pipe) {
            if (pipe == 4 && ms[mi] > 8) continue; /* the four-stage shape: m <= 8 */
            char where[48], what[128];
            snprintf(where, sizeof where, "skinny pipe %d n=%lld k=%lld", pipe, (long long)ns[ni],
                     (long long)ks[ki]);
            label(what, sizeof what, where, float_types[d], PRO_RMS, ms[mi], true, true);
            check_cuda(&c, pipe, what);
          }
          pcase_free(&c);
        }
}

/* A linear with the gated-unit prologue is refused on CUDA, naming why: its kernels gave
 * different bits from run to run on the H100 (3 of 12 runs of this test, 2026-11-27) and were
 * removed. The op refuses it at prepare and at launch; the skinny kernel and the workspace
 * kernel, which the tuner and bench_skinny reach directly, refuse its plan too. */
static void test_cuda_refuses_the_glu_prologue(void) {
  test_rng rng;
  test_rng_init(&rng);
  pcase c;
  pcase_make(&c, RECAP_DTYPE_BF16, PRO_GLU, 1, 2048, 200, false, false, &rng);
  recap__op_call call = c.call;
  call.workspace_bytes = call.def->workspace_bytes(&call, RECAP_BACKEND_CUDA);
  CU_ASSERT_EQUAL_FATAL(cudaMalloc(&call.workspace, call.workspace_bytes + 1), cudaSuccess);
  void *dev[3] = {0};
  for (int i = 0; i < 2; ++i) {
    const size_t bytes = c.in[i].storage_elems * recap_dtype_size(c.in[i].t.dtype);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dev[i], bytes), cudaSuccess);
    call.inputs[i].data = dev[i];
  }
  CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dev[2], 200 * 2), cudaSuccess);
  call.outputs[0].data = dev[2];
  CU_ASSERT_NOT_EQUAL(recap__op_launch(&call, cuda_stream), RECAP_OK);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "refused on CUDA"));
  CU_ASSERT_NOT_EQUAL(recap__gemm_prepare(&call, cuda_stream), RECAP_OK);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "refused on CUDA"));
  recap__gemm_plan plan;
  CHECK_OK(recap__gemm_plan_make(&call, &plan));
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&plan));
  CU_ASSERT_EQUAL(recap__cuda_gemm_skinny_config(&plan, 0, recap_stream_native(cuda_stream), 4, 1),
                  RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "no gated-unit prologue"));
  CU_ASSERT_EQUAL(
      recap__cuda_gemm_prologue(&plan, call.workspace, recap_stream_native(cuda_stream)),
      RECAP_STATUS_NOT_SUPPORTED);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "no CUDA kernel"));
  for (int i = 0; i < 3; ++i) cudaFree(dev[i]);
  cudaFree(call.workspace);
  pcase_free(&c);
}

#endif /* RECAP_WITH_CUDA */

int main(void) {
  CU_pSuite host = test_add_suite("gemm_prologue/host", host_suite_init, host_suite_cleanup);
  CU_ADD_TEST(host, test_host_folded_linear_matches_the_unfolded_ops_by_hand);
  CU_ADD_TEST(host, test_host_folded_rms_norm_equals_rmsnorm_then_linear_exactly);
  CU_ADD_TEST(host, test_host_infer_refuses_bad_prologues);
  CU_ADD_TEST(host, test_host_cuda_workspace_holds_the_norm_prologue_only);
  CU_pSuite cuda = test_add_cuda_suite("gemm_prologue/cuda",
#if RECAP_WITH_CUDA
                                       cuda_suite_init, cuda_suite_cleanup);
  CU_ADD_TEST(cuda, test_cuda_folded_linear_matches_host_on_every_path);
  CU_ADD_TEST(cuda, test_cuda_every_skinny_configuration_computes_the_norm_prologue);
  CU_ADD_TEST(cuda, test_cuda_refuses_the_glu_prologue);
#else
                                       NULL, NULL);
  (void)cuda;
#endif
  return test_run_all();
}
