/*
 * expr_host_test.c: evaluating elementwise expressions on the host and generating their
 * CUDA source (kernels/expr.h).
 *
 * - host: evaluation against values computed in double (expr_util.h), on every element, for
 *   every function, broadcasting, strided views and f16/bf16/mixed dtypes.
 * - codegen: the CUDA source holds no text of the expression and is deterministic.
 */
#define _POSIX_C_SOURCE 200809L

#include "tests/expr_util.h"

/* ------------------------------------------------------------------------------------------
 * Host evaluation
 * ---------------------------------------------------------------------------------------- */

static void test_host_every_function_matches_double_reference_on_every_element(void) {
  enum { N = 257 };
  float a[N], b[N], out[N];
  test_rng rng;
  test_rng_init(&rng);
  fill_random(a, N, &rng);
  fill_random(b, N, &rng);
  for (int i = 0; i < N; ++i)
    if (b[i] == 0) b[i] = 0.5f; /* no division by zero here; IEEE cases are tested below */
  const int64_t shape[] = {N};
  recap_tensor in[2] = {tensor(a, RECAP_DTYPE_F32, 1, shape, NULL),
                        tensor(b, RECAP_DTYPE_F32, 1, shape, NULL)};
  recap_tensor o = tensor(out, RECAP_DTYPE_F32, 1, shape, NULL);
  for (int f = 0; f < NUM_FUNCTIONS; ++f) {
    recap__expr_program *p = parse_ok(kFunctions[f].text, 2);
    CHECK_OK(recap__expr_eval_host(p, in, 2, &o));
    int bad = 0;
    for (int i = 0; i < N; ++i) {
      double want = kFunctions[f].ref(a[i], b[i]);
      /* Compound expressions round every node to f32: allow a few ulps more. */
      double rtol = f >= NUM_FUNCTIONS - 2 ? 1e-5 : 1e-6;
      if (!close_to(out[i], want, rtol, 1e-6) && bad++ < 3)
        fprintf(stderr, "\n  %s at a=%.9g b=%.9g: %.9g, expected %.9g\n", kFunctions[f].text, a[i],
                b[i], out[i], want);
    }
    CU_ASSERT_EQUAL(bad, 0);
    recap__expr_program_destroy(p);
  }
}

static void test_host_ieee_special_values(void) {
  float a[] = {1, -1, 0, NAN, INFINITY, 0}, b[] = {0, 0, 0, 1, INFINITY, NAN}, out[6];
  const int64_t shape[] = {6};
  recap_tensor in[2] = {tensor(a, RECAP_DTYPE_F32, 1, shape, NULL),
                        tensor(b, RECAP_DTYPE_F32, 1, shape, NULL)};
  recap_tensor o = tensor(out, RECAP_DTYPE_F32, 1, shape, NULL);
  recap__expr_program *p = parse_ok("a / b", 2);
  CHECK_OK(recap__expr_eval_host(p, in, 2, &o));
  CU_ASSERT(isinf(out[0]) && out[0] > 0);
  CU_ASSERT(isinf(out[1]) && out[1] < 0);
  CU_ASSERT(isnan(out[2]) && isnan(out[3]) && isnan(out[4]) && isnan(out[5]));
  recap__expr_program_destroy(p);
  /* NaN compares false except with !=, and selects as true (it is not 0). */
  p = parse_ok("select(a, 1, 2) + 10 * (a == a) + 100 * (a != a)", 2);
  CHECK_OK(recap__expr_eval_host(p, in, 2, &o));
  CU_ASSERT_EQUAL(out[2], 2 + 10);  /* a = 0 */
  CU_ASSERT_EQUAL(out[3], 1 + 100); /* a = NaN */
  CU_ASSERT_EQUAL(out[0], 1 + 10);
  recap__expr_program_destroy(p);
}

/* out[i,j,k] = a[i,j,k] * b[k] - c[j,0]: broadcasting with missing and size-1 dims. */
static void test_host_broadcasts_inputs_numpy_style(void) {
  enum { I = 2, J = 3, K = 5 };
  float a[I * J * K], b[K], c[J], out[I * J * K];
  test_rng rng;
  test_rng_init(&rng);
  fill_random(a, I * J * K, &rng);
  fill_random(b, K, &rng);
  fill_random(c, J, &rng);
  recap_tensor in[3] = {tensor(a, RECAP_DTYPE_F32, 3, (const int64_t[]){I, J, K}, NULL),
                        tensor(b, RECAP_DTYPE_F32, 1, (const int64_t[]){K}, NULL),
                        tensor(c, RECAP_DTYPE_F32, 2, (const int64_t[]){J, 1}, NULL)};
  recap_tensor o = tensor(out, RECAP_DTYPE_F32, 3, (const int64_t[]){I, J, K}, NULL);
  recap__expr_program *p = parse_ok("a * b - c", 3);
  CHECK_OK(recap__expr_eval_host(p, in, 3, &o));
  for (int i = 0; i < I; ++i)
    for (int j = 0; j < J; ++j)
      for (int k = 0; k < K; ++k) {
        int e = (i * J + j) * K + k;
        CU_ASSERT_EQUAL(out[e], (float)((float)((double)a[e] * b[k]) - c[j]));
      }
  /* Shapes that do not broadcast are refused. */
  recap_tensor bad = tensor(b, RECAP_DTYPE_F32, 1, (const int64_t[]){4}, NULL);
  recap_tensor in_bad[3] = {in[0], bad, in[2]};
  CHECK_STATUS(recap__expr_eval_host(p, in_bad, 3, &o), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("does not broadcast");
  CHECK_STATUS(recap__expr_eval_host(p, in, 2, &o), RECAP_STATUS_INVALID_ARGUMENT);
  recap_tensor ints = in[0];
  ints.dtype = RECAP_DTYPE_I32;
  recap_tensor in_int[3] = {ints, in[1], in[2]};
  CHECK_STATUS(recap__expr_eval_host(p, in_int, 3, &o), RECAP_STATUS_INVALID_ARGUMENT);
  recap__expr_program_destroy(p);
}

/* A transposed input view and a strided (every other element) output. */
static void test_host_reads_and_writes_strided_views(void) {
  enum { R = 3, C = 4 };
  float storage[R * C], out[2 * R * C];
  for (int i = 0; i < R * C; ++i) storage[i] = (float)(i + 1);
  for (int i = 0; i < 2 * R * C; ++i) out[i] = -99;
  /* in = storage viewed as [C, R] transposed: in[i][j] = storage[j * C + i]. */
  recap_tensor in =
      tensor(storage, RECAP_DTYPE_F32, 2, (const int64_t[]){C, R}, (const int64_t[]){1, C});
  recap_tensor o =
      tensor(out, RECAP_DTYPE_F32, 2, (const int64_t[]){C, R}, (const int64_t[]){2 * R, 2});
  recap__expr_program *p = parse_ok("a * 10", 1);
  CHECK_OK(recap__expr_eval_host(p, &in, 1, &o));
  for (int i = 0; i < C; ++i)
    for (int j = 0; j < R; ++j) {
      CU_ASSERT_EQUAL(out[i * 2 * R + 2 * j], storage[j * C + i] * 10);
      CU_ASSERT_EQUAL(out[i * 2 * R + 2 * j + 1], -99); /* untouched gaps */
    }
  recap__expr_program_destroy(p);
}

static void test_host_f16_bf16_and_mixed_dtypes(void) {
  enum { N = 300 };
  uint16_t ah[N], bb[N], oh[N];
  float af[N], bf[N], of[N];
  test_rng rng;
  test_rng_init(&rng);
  for (int i = 0; i < N; ++i) {
    ah[i] = recap__f32_to_f16((float)test_rng_uniform(&rng, -3, 3));
    bb[i] = recap__f32_to_bf16((float)test_rng_uniform(&rng, -3, 3));
    af[i] = recap__f16_to_f32(ah[i]);
    bf[i] = recap__bf16_to_f32(bb[i]);
  }
  const int64_t shape[] = {N};
  recap_tensor in[2] = {tensor(ah, RECAP_DTYPE_F16, 1, shape, NULL),
                        tensor(bb, RECAP_DTYPE_BF16, 1, shape, NULL)};
  CU_ASSERT_EQUAL(recap__expr_result_dtype(in, 2), RECAP_DTYPE_F32);
  CU_ASSERT_EQUAL(recap__expr_result_dtype(in, 1), RECAP_DTYPE_F16);
  recap__expr_program *p = parse_ok("a * sigmoid(b) + 1.0", 2);
  /* Mixed f16 x bf16 -> f32 output. */
  recap_tensor o = tensor(of, RECAP_DTYPE_F32, 1, shape, NULL);
  CHECK_OK(recap__expr_eval_host(p, in, 2, &o));
  for (int i = 0; i < N; ++i) CU_ASSERT_TRUE(close_to(of[i], r_compound(af[i], bf[i]), 1e-5, 1e-6));
  /* f16 output: rounded once from the f32 result (to within f16's precision). */
  o = tensor(oh, RECAP_DTYPE_F16, 1, shape, NULL);
  CHECK_OK(recap__expr_eval_host(p, in, 2, &o));
  for (int i = 0; i < N; ++i) {
    CU_ASSERT_EQUAL(oh[i], recap__f32_to_f16(of[i]));
    CU_ASSERT_TRUE(close_to(recap__f16_to_f32(oh[i]), r_compound(af[i], bf[i]), 1e-3, 1e-3));
  }
  /* bf16 output. */
  o = tensor(oh, RECAP_DTYPE_BF16, 1, shape, NULL);
  CHECK_OK(recap__expr_eval_host(p, in, 2, &o));
  for (int i = 0; i < N; ++i) CU_ASSERT_EQUAL(oh[i], recap__f32_to_bf16(of[i]));
  recap__expr_program_destroy(p);

  /* cast() rounds in the middle of an expression: a + 1/3 through bf16 and f16. */
  p = parse_ok("cast(a / 3, bf16) + cast(a / 3, f16) + cast(a / 3, f32)", 1);
  o = tensor(of, RECAP_DTYPE_F32, 1, shape, NULL);
  in[0] = tensor(af, RECAP_DTYPE_F32, 1, shape, NULL);
  CHECK_OK(recap__expr_eval_host(p, in, 1, &o));
  for (int i = 0; i < N; ++i) {
    float third = af[i] / 3;
    float want =
        recap__bf16_to_f32(recap__f32_to_bf16(third)) + recap__f16_to_f32(recap__f32_to_f16(third));
    want += third;
    CU_ASSERT_EQUAL(of[i], want);
  }
  recap__expr_program_destroy(p);
}

/* ------------------------------------------------------------------------------------------
 * Code generation
 * ---------------------------------------------------------------------------------------- */

static void test_codegen_contains_no_expression_text(void) {
  static const char *const names[] = {"gate_projection_zq", "upper_x7"};
  recap__expr_program *p = NULL;
  recap__expr_parse_error err;
  const char *text = "gate_projection_zq * sigmoid(upper_x7) + 1.2345678 - scale(upper_x7, 0.3125)";
  CHECK_OK(recap__expr_parse(text, SIZE_MAX, names, 2, NULL, &p, &err));
  recap__expr_signature sig = sig_of(2, RECAP_DTYPE_F16, RECAP_DTYPE_BF16);
  char *src = NULL;
  CHECK_OK(recap__expr_codegen_cuda(p, &sig, &src));
  CU_ASSERT_PTR_NULL(strstr(src, "gate_projection_zq"));
  CU_ASSERT_PTR_NULL(strstr(src, "upper_x7"));
  CU_ASSERT_PTR_NULL(strstr(src, "1.2345678"));
  CU_ASSERT_PTR_NULL(strstr(src, "0.3125"));
  /* Constants appear as their f32 bit patterns: 1.2345678f = 0x3f9e0651, 0.3125f = 0x3ea00000. */
  CU_ASSERT_PTR_NOT_NULL(strstr(src, "__uint_as_float(0x3f9e0651u)"));
  CU_ASSERT_PTR_NOT_NULL(strstr(src, "__uint_as_float(0x3ea00000u) * v"));
  CU_ASSERT_PTR_NOT_NULL(strstr(src, "extern \"C\" __global__"));
  CU_ASSERT_PTR_NOT_NULL(strstr(src, RECAP_EXPR_KERNEL_STRIDED "("));
  CU_ASSERT_PTR_NOT_NULL(strstr(src, RECAP_EXPR_KERNEL_DENSE "("));
  CU_ASSERT_PTR_NOT_NULL(strstr(src, "recap_sigmoid(v"));
  CU_ASSERT_PTR_NULL(strstr(src, "#include")); /* self-contained: no include path needed */
  free(src);
  recap__expr_program_destroy(p);
}

static void test_codegen_is_deterministic_and_depends_only_on_tree_and_dtypes(void) {
  static const char *const n1[] = {"x", "y"}, *const n2[] = {"first", "second"};
  recap__expr_program *p1 = NULL, *p2 = NULL, *p3 = NULL;
  recap__expr_parse_error err;
  CHECK_OK(recap__expr_parse("x*sigmoid(y)+1", SIZE_MAX, n1, 2, NULL, &p1, &err));
  CHECK_OK(
      recap__expr_parse("first * sigmoid( second ) + 1.000", SIZE_MAX, n2, 2, NULL, &p2, &err));
  CHECK_OK(recap__expr_parse("x*sigmoid(y)+2", SIZE_MAX, n1, 2, NULL, &p3, &err));
  recap__expr_signature s = sig_of(2, RECAP_DTYPE_F32, RECAP_DTYPE_F32);
  recap__expr_signature s16 = sig_of(2, RECAP_DTYPE_F16, RECAP_DTYPE_F16);
  char *a = NULL, *b = NULL, *again = NULL, *c = NULL, *d = NULL;
  CHECK_OK(recap__expr_codegen_cuda(p1, &s, &a));
  CHECK_OK(recap__expr_codegen_cuda(p1, &s, &again));
  CHECK_OK(recap__expr_codegen_cuda(p2, &s, &b));
  CHECK_OK(recap__expr_codegen_cuda(p3, &s, &c));
  CHECK_OK(recap__expr_codegen_cuda(p1, &s16, &d));
  CU_ASSERT_STRING_EQUAL(a, again);
  CU_ASSERT_STRING_EQUAL(a, b);
  CU_ASSERT_STRING_NOT_EQUAL(a, c);
  CU_ASSERT_STRING_NOT_EQUAL(a, d);
  /* A bad signature is refused. */
  char *none = NULL;
  recap__expr_signature wrong = sig_of(3, RECAP_DTYPE_F32, RECAP_DTYPE_F32);
  CHECK_STATUS(recap__expr_codegen_cuda(p1, &wrong, &none), RECAP_STATUS_INVALID_ARGUMENT);
  wrong = sig_of(2, RECAP_DTYPE_I64, RECAP_DTYPE_F32);
  CHECK_STATUS(recap__expr_codegen_cuda(p1, &wrong, &none), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NULL(none);
  free(a);
  free(b);
  free(again);
  free(c);
  free(d);
  recap__expr_program_destroy(p1);
  recap__expr_program_destroy(p2);
  recap__expr_program_destroy(p3);
}

/* The kernel parameter block's layout: the generated source asserts the same size. */
static void test_params_broadcast_strides(void) {
  float dummy = 0;
  recap_tensor in[2] = {tensor(&dummy, RECAP_DTYPE_F32, 3, (const int64_t[]){2, 3, 4}, NULL),
                        tensor(&dummy, RECAP_DTYPE_F32, 2, (const int64_t[]){3, 1}, NULL)};
  recap_tensor out = tensor(&dummy, RECAP_DTYPE_F32, 3, (const int64_t[]){2, 3, 4}, NULL);
  recap__expr_params params;
  CHECK_OK(recap__expr_params_of(in, 2, &out, &params));
  CU_ASSERT_EQUAL(params.n, 24);
  const int64_t shape[4] = {1, 2, 3, 4}, s0[4] = {0, 12, 4, 1}, s1[4] = {0, 0, 1, 0};
  for (int d = 0; d < 4; ++d) {
    CU_ASSERT_EQUAL(params.shape[d], shape[d]);
    CU_ASSERT_EQUAL(params.in_strides[0][d], s0[d]);
    CU_ASSERT_EQUAL(params.in_strides[1][d], s1[d]);
    CU_ASSERT_EQUAL(params.out_strides[d], s0[d]);
  }
  CU_ASSERT_EQUAL(sizeof(recap__expr_params), 8 * 8 + 8 + 4 * 8 + 8 * 4 * 8 + 4 * 8 + 8);
}

int main(void) {
  CU_pSuite host = test_add_suite("expr/host", NULL, NULL);
  CU_ADD_TEST(host, test_host_every_function_matches_double_reference_on_every_element);
  CU_ADD_TEST(host, test_host_ieee_special_values);
  CU_ADD_TEST(host, test_host_broadcasts_inputs_numpy_style);
  CU_ADD_TEST(host, test_host_reads_and_writes_strided_views);
  CU_ADD_TEST(host, test_host_f16_bf16_and_mixed_dtypes);

  CU_pSuite gen = test_add_suite("expr/codegen", NULL, NULL);
  CU_ADD_TEST(gen, test_codegen_contains_no_expression_text);
  CU_ADD_TEST(gen, test_codegen_is_deterministic_and_depends_only_on_tree_and_dtypes);
  CU_ADD_TEST(gen, test_params_broadcast_strides);
  return test_run_all();
}
