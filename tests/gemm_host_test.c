/*
 * gemm_host_test.c: matmul and linear on the host against the float64 reference of
 * gemm_util.h (odd and skinny shapes, transposes, column-major and strided batch views,
 * alpha/beta with C, in place on C, broadcast batches, every activation, any rank of x, a
 * residual with and without a bias), and validation: shapes and dtypes (the residual's too),
 * a residual sharing the output, the library switches.
 */
#include "tests/gemm_util.h"

/* ---- host: matmul ---------------------------------------------------------------------------- */

static const int64_t odd_shapes[][3] = {
    {1, 1, 1}, {7, 33, 1023}, {33, 7, 1}, {1, 1023, 7}, {16, 65, 33}, {33, 33, 33}, {1023, 2, 7},
};

static void test_matmul_odd_shapes_match_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 3; ++d) {
    for (size_t s = 0; s < sizeof odd_shapes / sizeof odd_shapes[0]; ++s) {
      gcase g;
      make_matmul(&g, float_types[d], odd_shapes[s][0], odd_shapes[s][1], odd_shapes[s][2], 0, 0,
                  false, &rng);
      check_host(&g, "matmul odd shape");
      case_free(&g);
    }
  }
}

static void test_matmul_skinny_m_1_to_16_matches_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 3; ++d) {
    for (int64_t m = 1; m <= 16; ++m) {
      gcase g;
      make_matmul(&g, float_types[d], m, 40, 300, 0, 1, false, &rng);
      check_host(&g, "matmul skinny");
      case_free(&g);
    }
  }
}

static void test_matmul_transposes_match_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 3; ++d) {
    for (int t = 0; t < 4; ++t) {
      gcase g;
      make_matmul(&g, float_types[d], 7, 33, 17, t & 1, t >> 1, false, &rng);
      check_host(&g, "matmul transposes");
      case_free(&g);
    }
  }
}

/* A transposed VIEW (unit stride in the row dim) instead of the trans attribute. */
static void test_matmul_column_major_views_match_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  gcase g;
  case_init(&g, "matmul", 2);
  const int64_t as[2] = {9, 20}, a_strides[2] = {1, 9}; /* [9, 20] stored column by column */
  const int64_t bs[2] = {20, 5}, b_strides[2] = {8, 1}; /* rows padded to 8 */
  g.in[0] = tb_view(RECAP_DTYPE_F32, 2, as, a_strides, &rng);
  g.in[1] = tb_view(RECAP_DTYPE_F32, 2, bs, b_strides, &rng);
  check_host(&g, "matmul views");
  case_free(&g);
}

static void test_matmul_alpha_beta_with_c_match_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 3; ++d) {
    gcase g;
    make_matmul(&g, float_types[d], 13, 21, 34, 1, 0, true, &rng);
    check_host(&g, "matmul alpha beta");
    case_free(&g);
  }
}

static void test_matmul_in_place_on_c_matches_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  gcase g;
  make_matmul(&g, RECAP_DTYPE_F32, 13, 21, 34, 0, 1, true, &rng);
  g.call.outputs[0].data = g.in[2].t.data; /* out aliases c (in_place_input = 2) */
  CU_ASSERT_EQUAL(g.call.def->in_place_input, 2);
  for (int i = 0; i < 3; ++i) g.call.inputs[i] = g.in[i].t;
  CHECK_OK(recap__op_infer(&g.call));
  const int64_t total = recap__tensor_numel(&g.call.outputs[0]);
  g.ref = malloc(sizeof(double) * (size_t)total);
  g.scale = malloc(sizeof(double) * (size_t)total);
  reference(&g.call, g.ref, g.scale);
  CHECK_OK(recap__op_launch(&g.call, host_stream));
  CHECK_OK(recap_stream_synchronize(host_stream));
  CU_ASSERT_EQUAL(
      count_bad(&g.call.outputs[0], g.ref, g.scale, host_tol(RECAP_DTYPE_F32), "in place"), 0);
  case_free(&g);
}

static void test_matmul_batched_with_broadcast_matches_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 3; ++d) {
    /* a [2, 3, M, K] x b [K, N]: b broadcasts over both batch dims. */
    gcase g;
    case_init(&g, "matmul", 2);
    const int64_t a1[4] = {2, 3, 5, 11}, b1[2] = {11, 6};
    g.in[0] = tb_make(float_types[d], 4, a1, &rng);
    g.in[1] = tb_make(float_types[d], 2, b1, &rng);
    check_host(&g, "batched a");
    CU_ASSERT_EQUAL(g.call.outputs[0].ndim, 4);
    case_free(&g);
    /* a [3, 1, M, K] x b [1, 2, N, K] (trans_b): both broadcast, with c. */
    case_init(&g, "matmul", 3);
    g.call.attrs.trans_b = 1;
    g.call.attrs.alpha = -0.5;
    g.call.attrs.beta = 2.0;
    const int64_t a2[4] = {3, 1, 4, 9}, b2[4] = {1, 2, 7, 9}, c2[4] = {3, 2, 4, 7};
    g.in[0] = tb_make(float_types[d], 4, a2, &rng);
    g.in[1] = tb_make(float_types[d], 4, b2, &rng);
    g.in[2] = tb_make(float_types[d], 4, c2, &rng);
    check_host(&g, "batched broadcast both");
    case_free(&g);
  }
}

/* Batch strides that no single stride covers (a slice of a bigger tensor): two levels. */
static void test_matmul_strided_batch_view_matches_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  gcase g;
  case_init(&g, "matmul", 2);
  const int64_t as[4] = {2, 3, 5, 8}, a_strides[4] = {4 * 5 * 8, 5 * 8, 8, 1}; /* [2, 4 -> 3] */
  const int64_t bs[3] = {3, 8, 4}, b_strides[3] = {8 * 4 + 3, 4, 1};           /* gaps */
  g.in[0] = tb_view(RECAP_DTYPE_BF16, 4, as, a_strides, &rng);
  g.in[1] = tb_view(RECAP_DTYPE_BF16, 3, bs, b_strides, &rng);
  check_host(&g, "strided batch");
  case_free(&g);
}

/* ---- host: linear -------------------------------------------------------------------------- */

static void test_linear_every_activation_matches_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 3; ++d) {
    for (int act = RECAP_ACT_NONE; act <= RECAP_ACT_TANH; ++act) {
      for (int bias = 0; bias < 2; ++bias) {
        gcase g;
        const int64_t xs[2] = {7, 65};
        make_linear(&g, float_types[d], 2, xs, 33, bias, (recap__activation)act, &rng);
        check_host(&g, "linear activation");
        case_free(&g);
      }
    }
  }
}

static void test_linear_any_rank_of_x_matches_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  const int64_t x1[1] = {31}, x3[3] = {2, 3, 31}, x4[4] = {2, 1, 3, 31};
  const int64_t *shapes[3] = {x1, x3, x4};
  const int dims[3] = {1, 3, 4};
  for (int s = 0; s < 3; ++s) {
    gcase g;
    make_linear(&g, RECAP_DTYPE_F16, dims[s], shapes[s], 17, true, RECAP_ACT_RELU, &rng);
    check_host(&g, "linear rank");
    CU_ASSERT_EQUAL(g.call.outputs[0].ndim, dims[s]);
    CU_ASSERT_EQUAL(g.call.outputs[0].shape[dims[s] - 1], 17);
    case_free(&g);
  }
  /* x rows that no single stride steps through: [2, 3, K] with padded outer stride. */
  gcase g;
  case_init(&g, "linear", 2);
  const int64_t xs[3] = {2, 3, 10}, x_strides[3] = {40, 10, 1}, ws[2] = {6, 10};
  g.in[0] = tb_view(RECAP_DTYPE_F32, 3, xs, x_strides, &rng);
  g.in[1] = tb_make(RECAP_DTYPE_F32, 2, ws, &rng);
  check_host(&g, "linear strided x");
  case_free(&g);
}

/* A residual (attribute `residual`, last input) after the activation, with a bias (four
 * inputs) and without one (x, weight, residual: the form a folded add takes when the linear
 * has no bias), on every float type, m = 1 and 7, n not a multiple of the micro-tile. */
static void test_linear_residual_with_and_without_bias_matches_reference(void) {
  test_rng rng;
  test_rng_init(&rng);
  static const recap__activation acts[] = {RECAP_ACT_NONE, RECAP_ACT_RELU, RECAP_ACT_SILU,
                                           RECAP_ACT_GELU};
  for (size_t d = 0; d < 3; ++d)
    for (int m = 1; m <= 7; m += 6)
      for (size_t a = 0; a < sizeof acts / sizeof acts[0]; ++a)
        for (int bias = 0; bias < 2; ++bias) {
          gcase g;
          const int64_t xs[2] = {m, 65};
          make_linear(&g, float_types[d], 2, xs, 33, bias, acts[a], &rng);
          add_residual(&g, &rng);
          CU_ASSERT_EQUAL(g.call.num_inputs, bias ? 4 : 3);
          check_host(&g, bias ? "linear residual with bias" : "linear residual, no bias");
          case_free(&g);
        }
}

/* The erf and tanh gelus are both right, and differ by what the formulas differ by (up to
 * ~5e-4 near |x| = 2), which f32 resolves easily. */
static void test_linear_gelu_erf_and_tanh_differ_as_expected(void) {
  test_rng rng;
  test_rng_init(&rng);
  gcase ge, gt;
  const int64_t xs[2] = {16, 64};
  make_linear(&ge, RECAP_DTYPE_F32, 2, xs, 48, true, RECAP_ACT_GELU, &rng);
  make_linear(&gt, RECAP_DTYPE_F32, 2, xs, 48, true, RECAP_ACT_GELU_TANH, &rng);
  /* The same data for both. */
  memcpy(gt.in[0].t.data, ge.in[0].t.data, ge.in[0].storage_elems * 4);
  memcpy(gt.in[1].t.data, ge.in[1].t.data, ge.in[1].storage_elems * 4);
  memcpy(gt.in[2].t.data, ge.in[2].t.data, ge.in[2].storage_elems * 4);
  check_host(&ge, "gelu erf");
  check_host(&gt, "gelu tanh");
  const float *oe = ge.call.outputs[0].data, *ot = gt.call.outputs[0].data;
  double max_diff = 0, max_mismatch = 0;
  for (int i = 0; i < 16 * 48; ++i) {
    const double d = (double)oe[i] - (double)ot[i];
    if (fabs(d) > max_diff) max_diff = fabs(d);
    const double mismatch = fabs(d - (ge.ref[i] - gt.ref[i]));
    if (mismatch > max_mismatch) max_mismatch = mismatch;
  }
  if (max_diff <= 1e-5) fprintf(stderr, "\n  gelu forms differ by only %g", max_diff);
  CU_ASSERT(max_diff > 1e-5);
  CU_ASSERT(max_diff < 1e-3);
  CU_ASSERT(max_mismatch < 1e-5);
  case_free(&ge);
  case_free(&gt);
}

/* ---- host: validation ---------------------------------------------------------------------- */

/* gemm.h: a linear's residual never shares memory with its output (every path but cuBLASLt's
 * writes the output before reading the residual); a call that breaks it is refused, naming
 * the residual. On CUDA the launch returns INVALID_ARGUMENT; on the host the check runs in
 * the host kernel, so it is a fault of the host device, as any failing kernel's (reset here
 * so that the suite's other tests still run). */
static void test_linear_residual_sharing_the_output_is_refused(void) {
  test_rng rng;
  test_rng_init(&rng);
  const int64_t xs[2] = {4, 8}, ws[2] = {6, 8}, n = 6, rs[2] = {4, 6};
  tbuf x = tb_make(RECAP_DTYPE_F32, 2, xs, &rng), w = tb_make(RECAP_DTYPE_F32, 2, ws, &rng);
  tbuf b = tb_make(RECAP_DTYPE_F32, 1, &n, &rng), r = tb_make(RECAP_DTYPE_F32, 2, rs, &rng);
  recap__op_call call = {.def = recap__op_find("linear"), .num_inputs = 4};
  recap__op_attrs_set_defaults(call.def, &call.attrs);
  call.inputs[0] = x.t;
  call.inputs[1] = w.t;
  call.inputs[2] = b.t;
  call.inputs[3] = r.t;
  CHECK_OK(recap__op_infer(&call));
  void *const outs[2] = {(float *)r.t.data + 2, r.t.data}; /* its tail; exactly it */
  for (int i = 0; i < 2; ++i) {
    call.outputs[0].data = outs[i];
    recap_status st = recap__op_launch(&call, host_stream);
    if (st == RECAP_OK) st = recap_stream_synchronize(host_stream);
    CU_ASSERT_NOT_EQUAL(st, RECAP_OK);
    CHECK_ERROR_MENTIONS("'residual' shares memory with the output");
    recap__host_backend_reset_fault_for_testing();
  }
  free(x.t.data);
  free(w.t.data);
  free(b.t.data);
  free(r.t.data);
}

static recap_status infer_with(const char *op, int nin, const recap_tensor *in,
                               const recap__op_attrs *attrs) {
  recap__op_call call = {.def = recap__op_find(op), .num_inputs = nin};
  recap__op_attrs_set_defaults(call.def, &call.attrs);
  if (attrs) call.attrs = *attrs;
  for (int i = 0; i < nin; ++i) call.inputs[i] = in[i];
  return recap__op_infer(&call);
}

static recap_tensor desc(recap_dtype dt, int ndim, int64_t s0, int64_t s1, int64_t s2) {
  recap_tensor t = {.dtype = dt, .ndim = ndim};
  const int64_t s[3] = {s0, s1, s2};
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    t.shape[d] = s[d];
    t.strides[d] = stride;
    stride *= s[d];
  }
  return t;
}

static void test_bad_shapes_and_dtypes_are_rejected(void) {
  const recap_dtype f32 = RECAP_DTYPE_F32;
  recap_tensor in[3];
  in[0] = desc(f32, 2, 4, 5, 0);
  in[1] = desc(f32, 2, 6, 3, 0);
  CHECK_STATUS(infer_with("matmul", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("inner dimensions differ");
  in[1] = desc(RECAP_DTYPE_F16, 2, 5, 3, 0);
  CHECK_STATUS(infer_with("matmul", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  in[0] = desc(RECAP_DTYPE_I32, 2, 4, 5, 0);
  in[1] = desc(RECAP_DTYPE_I32, 2, 5, 3, 0);
  CHECK_STATUS(infer_with("matmul", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("i32");
  /* Batch dims that do not broadcast. */
  in[0] = desc(f32, 3, 2, 4, 5);
  in[1] = desc(f32, 3, 3, 5, 6);
  CHECK_STATUS(infer_with("matmul", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("broadcast");
  /* beta without c, c without beta, c of the wrong shape. */
  in[0] = desc(f32, 2, 4, 5, 0);
  in[1] = desc(f32, 2, 5, 6, 0);
  recap__op_attrs attrs = {.alpha = 1, .beta = 1};
  CHECK_STATUS(infer_with("matmul", 2, in, &attrs), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("needs input 'c'");
  in[2] = desc(f32, 2, 4, 6, 0);
  attrs.beta = 0;
  CHECK_STATUS(infer_with("matmul", 3, in, &attrs), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("ignored");
  attrs.beta = 1;
  in[2] = desc(f32, 2, 6, 4, 0);
  CHECK_STATUS(infer_with("matmul", 3, in, &attrs), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("input 'c'");
  /* No unit stride in the matrix dims. */
  in[0] = desc(f32, 2, 4, 5, 0);
  in[0].strides[0] = 10;
  in[0].strides[1] = 2;
  CHECK_STATUS(infer_with("matmul", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("strides");
  /* A 1-D matmul operand. */
  in[0] = desc(f32, 1, 5, 0, 0);
  CHECK_STATUS(infer_with("matmul", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);

  /* linear: K mismatch, bias length, bias dtype, 3-D weight. */
  in[0] = desc(f32, 2, 4, 5, 0);
  in[1] = desc(f32, 2, 6, 7, 0);
  CHECK_STATUS(infer_with("linear", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("weight");
  in[1] = desc(f32, 2, 6, 5, 0);
  in[2] = desc(f32, 1, 5, 0, 0);
  CHECK_STATUS(infer_with("linear", 3, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("bias");
  in[2] = desc(RECAP_DTYPE_BF16, 1, 6, 0, 0);
  CHECK_STATUS(infer_with("linear", 3, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  in[1] = desc(f32, 3, 1, 6, 5);
  CHECK_STATUS(infer_with("linear", 2, in, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  /* linear's residual: attribute `residual` without a residual input; the residual as input 2
   * (no bias) with the wrong shape or dtype, named as the residual, not as the bias. */
  in[1] = desc(f32, 2, 6, 5, 0);
  recap__op_attrs with_residual;
  recap__op_attrs_set_defaults(recap__op_find("linear"), &with_residual);
  with_residual.residual = 1;
  CHECK_STATUS(infer_with("linear", 2, in, &with_residual), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("attribute 'residual'");
  in[2] = desc(f32, 1, 6, 0, 0);
  CHECK_STATUS(infer_with("linear", 3, in, &with_residual), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("input 'residual' has shape [6]");
  in[2] = desc(RECAP_DTYPE_BF16, 2, 4, 6, 0);
  CHECK_STATUS(infer_with("linear", 3, in, &with_residual), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("input 'residual' has dtype bf16");
  in[2] = desc(f32, 2, 4, 6, 0);
  CHECK_OK(infer_with("linear", 3, in, &with_residual));
  /* And the good case infers [4, 6]. */
  in[1] = desc(f32, 2, 6, 5, 0);
  in[2] = desc(f32, 1, 6, 0, 0);
  recap__op_call call = {.def = recap__op_find("linear"), .num_inputs = 3};
  for (int i = 0; i < 3; ++i) call.inputs[i] = in[i];
  CHECK_OK(recap__op_infer(&call));
  CU_ASSERT_EQUAL(call.outputs[0].ndim, 2);
  CU_ASSERT_EQUAL(call.outputs[0].shape[0], 4);
  CU_ASSERT_EQUAL(call.outputs[0].shape[1], 6);
}

static void test_library_switch_rejects_unknown_values(void) {
  CHECK_STATUS(recap__gemm_set_library((recap_gemm_library)7), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(recap__gemm_library(), RECAP_GEMM_LIBRARY_CUBLASLT);
  CU_ASSERT_FALSE(recap__gemm_allow_tf32());
}

static void test_public_switches_reach_the_gemm_module(void) {
  CU_ASSERT_FALSE(recap_gemm_allow_tf32());
  recap_gemm_set_allow_tf32(1);
  CU_ASSERT_TRUE(recap__gemm_allow_tf32());
  recap_gemm_set_allow_tf32(0);
  CU_ASSERT_FALSE(recap_gemm_allow_tf32());
  CHECK_OK(recap_gemm_set_library(RECAP_GEMM_LIBRARY_CUBLAS));
  CU_ASSERT_EQUAL(recap__gemm_library(), RECAP_GEMM_LIBRARY_CUBLAS);
  CHECK_STATUS(recap_gemm_set_library((recap_gemm_library)-1), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_EQUAL(recap_gemm_library_get(), RECAP_GEMM_LIBRARY_CUBLAS);
  CHECK_OK(recap_gemm_set_library(RECAP_GEMM_LIBRARY_CUBLASLT));
}

int main(void) {
  CU_pSuite host = test_add_suite("gemm/host", host_suite_init, host_suite_cleanup);
  CU_ADD_TEST(host, test_matmul_odd_shapes_match_reference);
  CU_ADD_TEST(host, test_matmul_skinny_m_1_to_16_matches_reference);
  CU_ADD_TEST(host, test_matmul_transposes_match_reference);
  CU_ADD_TEST(host, test_matmul_column_major_views_match_reference);
  CU_ADD_TEST(host, test_matmul_alpha_beta_with_c_match_reference);
  CU_ADD_TEST(host, test_matmul_in_place_on_c_matches_reference);
  CU_ADD_TEST(host, test_matmul_batched_with_broadcast_matches_reference);
  CU_ADD_TEST(host, test_matmul_strided_batch_view_matches_reference);
  CU_ADD_TEST(host, test_linear_every_activation_matches_reference);
  CU_ADD_TEST(host, test_linear_any_rank_of_x_matches_reference);
  CU_ADD_TEST(host, test_linear_residual_with_and_without_bias_matches_reference);
  CU_ADD_TEST(host, test_linear_gelu_erf_and_tanh_differ_as_expected);
  CU_ADD_TEST(host, test_linear_residual_sharing_the_output_is_refused);
  CU_ADD_TEST(host, test_bad_shapes_and_dtypes_are_rejected);
  CU_ADD_TEST(host, test_library_switch_rejects_unknown_values);
  CU_ADD_TEST(host, test_public_switches_reach_the_gemm_module);
  return test_run_all();
}
