/*
 * ops_cuda_rows_test.c: the row ops and reductions on CUDA against the host reference
 * (ops_cuda_util.h): softmax (also causal), layernorm and rmsnorm, every row length, large and
 * long rows, every group shape, every register class boundary, both sides of the row spread
 * switch, the GEMM epilogue's activations (CUDA builds), sum and mean.
 *
 * The CUDA suite is inactive on a machine without a GPU.
 */
#define _POSIX_C_SOURCE 200809L

#include "tests/ops_cuda_util.h"

/* ------------------------------------------------------------------------------------------
 * Reductions
 * ---------------------------------------------------------------------------------------- */

/* Row shapes: warp-per-row and block-per-row sizes around the 1024 switch, and a view whose
 * rows are 1100 elements apart (a slice of the last dimension). */
static const struct {
  int ndim;
  int64_t shape[4];
  int64_t row_stride; /* 0: contiguous */
} kRowShapes[] = {
    {1, {1}, 0},          {2, {1, 1}, 0},    {2, {7, 7}, 0},       {2, {5, 1023}, 0},
    {2, {3, 1024}, 0},    {2, {4, 1025}, 0}, {3, {2, 3, 4097}, 0}, {2, {2, 50001}, 0},
    {2, {6, 1023}, 1100}, {2, {300, 33}, 0}, {2, {4100, 1031}, 0},
};

static tbuf row_input(recap_dtype dtype, size_t s, double lo, double hi) {
  if (!kRowShapes[s].row_stride)
    return make_contiguous(dtype, kRowShapes[s].ndim, kRowShapes[s].shape, lo, hi);
  const int64_t strides[] = {kRowShapes[s].row_stride, 1};
  return make_input(dtype, 2, kRowShapes[s].shape, strides, 0, FILL_UNIFORM, lo, hi);
}

static void test_softmax_matches_host(void) {
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof kRowShapes / sizeof kRowShapes[0]; ++s)
      for (int scaled = 0; scaled < 2; ++scaled) {
        op_case c = {.op = "softmax", .attrs = no_attrs(), .num_inputs = 1};
        c.attrs.scale = scaled ? 0.125 : 0;
        c.in[0] = row_input(kFloatTypes[t], s, -4, 4);
        run_case(&c);
        release_all();
      }
}

static void test_causal_softmax_masks_and_zeroes_hidden_rows(void) {
  /* [.., rows, cols]: cols > rows, cols == rows, rows > cols (the first rows see nothing). */
  static const struct {
    int ndim;
    int64_t shape[4];
  } shapes[] = {{4, {2, 3, 7, 9}}, {2, {9, 4}}, {3, {2, 1500, 1500}}, {2, {1, 1}}};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
      op_case c = {.op = "softmax", .attrs = no_attrs(), .num_inputs = 1};
      c.attrs.causal = 1;
      c.attrs.scale = 0.5;
      c.in[0] = make_contiguous(kFloatTypes[t], shapes[s].ndim, shapes[s].shape, -4, 4);
      run_case(&c);
      release_all();
    }
}

static void test_layernorm_and_rmsnorm_match_host(void) {
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof kRowShapes / sizeof kRowShapes[0]; ++s)
      for (int variant = 0; variant < 3; ++variant) {
        /* 0: layernorm with bias, 1: layernorm without, 2: rmsnorm. */
        op_case c = {
            .op = variant == 2 ? "rmsnorm" : "layernorm", .attrs = no_attrs(), .scale = SCALE_NORM};
        c.attrs.eps = 1e-5;
        recap_dtype dtype = kFloatTypes[t];
        /* A mean offset makes the two-pass variance matter. */
        c.in[0] = row_input(dtype, s, -1, 3);
        int64_t d = kRowShapes[s].shape[kRowShapes[s].ndim - 1];
        c.in[1] = make_contiguous(dtype, 1, &d, 0.5, 1.5);
        c.num_inputs = 2;
        if (variant == 0) {
          c.in[2] = make_contiguous(dtype, 1, &d, -1, 1);
          c.num_inputs = 3;
        }
        run_case(&c);
        release_all();
      }
}

/* Row lengths 1..4097 (slots per thread 1, 2, 4; groups of lanes, warps, blocks; lengths that
 * are not a multiple of the vector take the streaming kernels), rows at element offsets 0-3 of
 * their storage (16-byte accesses only at 0), and row-strided views whose stride is a multiple
 * of the vector (so the vector path runs on rows that are not adjacent). Softmax also causal.
 * test_row_ops_match_host_at_every_register_class_boundary covers each geometry switch. */
static const int64_t kRowLengths[] = {1,    2,    3,    4,    5,    7,    8,    9,    15,   16,
                                      17,   31,   32,   33,   63,   64,   65,   127,  128,  129,
                                      255,  256,  257,  511,  512,  513,  1000, 1023, 1024, 1025,
                                      1536, 2047, 2048, 2049, 3000, 4095, 4096, 4097};

static tbuf row_case_input(recap_dtype dtype, int64_t rows, int64_t d, int variant, double lo,
                           double hi) {
  const int64_t shape[] = {rows, d};
  switch (variant) {
    case 0:
      return make_input(dtype, 2, shape, NULL, 0, FILL_UNIFORM, lo, hi);
    case 1: /* misaligned rows */
      return make_input(dtype, 2, shape, NULL, 1 + d % 3, FILL_UNIFORM, lo, hi);
    default: { /* rows 8 elements apart beyond their length */
      const int64_t strides[] = {d + 8, 1};
      return make_input(dtype, 2, shape, strides, 0, FILL_UNIFORM, lo, hi);
    }
  }
}

static void test_row_ops_match_host_for_every_row_length(void) {
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t l = 0; l < sizeof kRowLengths / sizeof kRowLengths[0]; ++l)
      for (int variant = 0; variant < 3; ++variant) {
        const recap_dtype dtype = kFloatTypes[t];
        const int64_t d = kRowLengths[l], rows = 3 + (int64_t)l % 5;
        op_case c = {.op = "softmax", .attrs = no_attrs(), .num_inputs = 1};
        c.attrs.scale = variant == 1 ? 0.125 : 0;
        c.attrs.causal = variant == 2;
        c.in[0] = row_case_input(dtype, rows, d, variant, -4, 4);
        c.out_offset = variant == 1;
        run_case(&c);

        for (int norm = 0; norm < 3; ++norm) {
          /* 0: layernorm with bias, 1: layernorm without, 2: rmsnorm. */
          op_case n = {.op = norm == 2 ? "rmsnorm" : "layernorm",
                       .attrs = no_attrs(),
                       .scale = SCALE_NORM,
                       .num_inputs = norm == 0 ? 3 : 2};
          n.attrs.eps = 1e-5;
          n.in[0] = row_case_input(dtype, rows, d, variant, -1, 3);
          n.in[1] = make_contiguous(dtype, 1, &d, 0.5, 1.5);
          if (norm == 0) n.in[2] = make_contiguous(dtype, 1, &d, -1, 1);
          run_case(&n);
        }
        release_all();
      }
}

/* Many rows (several per warp-mode block and grid-stride trips), rows too long for registers,
 * and a causal softmax whose first rows see nothing, on the register kernels' vector path. */
static void test_row_ops_match_host_for_large_and_long_rows(void) {
  static const int64_t shapes[][2] = {{20000, 64}, {1030, 1024}, {3, 6000},
                                      {3, 12000},  {3, 20000},   {2, 40000}};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    const recap_dtype dtype = kFloatTypes[t];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
      op_case c = {.op = "softmax", .attrs = no_attrs(), .num_inputs = 1};
      c.in[0] = make_contiguous(dtype, 2, shapes[s], -4, 4);
      run_case(&c);
      op_case n = {.op = "layernorm", .attrs = no_attrs(), .scale = SCALE_NORM, .num_inputs = 3};
      n.attrs.eps = 1e-5;
      n.in[0] = make_contiguous(dtype, 2, shapes[s], -1, 3);
      n.in[1] = make_contiguous(dtype, 1, &shapes[s][1], 0.5, 1.5);
      n.in[2] = make_contiguous(dtype, 1, &shapes[s][1], -1, 1);
      run_case(&n);
      n.op = "rmsnorm";
      n.num_inputs = 2;
      run_case(&n);
      release_all();
    }
    op_case c = {.op = "softmax", .attrs = no_attrs(), .num_inputs = 1};
    c.attrs.causal = 1;
    c.in[0] = make_contiguous(dtype, 3, (const int64_t[]){2, 1100, 1024}, -4, 4);
    run_case(&c);
    release_all();
  }
}

/* The register kernels' group shapes: several rows per warp (groups of 4-16 lanes; row counts
 * that leave the last groups of a warp without a row), a warp of 16 slots per lane (rows of
 * 2049-4096 halves), and leading dims that do not merge into one row stride (rows found by
 * decomposing the view, 16-byte aligned so the register kernels still take them). */
static void test_row_ops_match_host_for_every_group_shape(void) {
  static const int64_t shapes[][2] = {{37, 128}, {1001, 64}, {13, 8},   {7, 24},
                                      {5, 2560}, {67, 4096}, {9, 3072}, {3, 256}};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    const recap_dtype dtype = kFloatTypes[t];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0] + 1; ++s) {
      const bool strided = s == sizeof shapes / sizeof shapes[0];
      const int64_t d = strided ? 64 : shapes[s][1];
      for (int causal = 0; causal < 2; ++causal) {
        op_case c = {.op = "softmax", .attrs = no_attrs(), .num_inputs = 1};
        c.attrs.causal = causal;
        c.attrs.scale = 0.25;
        if (strided) {
          const int64_t shape[] = {3, 5, d}, strides[] = {5 * (d + 8) + 16, d + 8, 1};
          c.in[0] = make_input(dtype, 3, shape, strides, 0, FILL_UNIFORM, -4, 4);
        } else {
          c.in[0] = make_contiguous(dtype, 2, shapes[s], -4, 4);
        }
        run_case(&c);
      }
      for (int norm = 0; norm < 3; ++norm) {
        /* 0: layernorm with bias, 1: layernorm without, 2: rmsnorm. */
        op_case n = {.op = norm == 2 ? "rmsnorm" : "layernorm",
                     .attrs = no_attrs(),
                     .scale = SCALE_NORM,
                     .num_inputs = norm == 0 ? 3 : 2};
        n.attrs.eps = 1e-5;
        if (strided) {
          const int64_t shape[] = {3, 5, d}, strides[] = {5 * (d + 8) + 16, d + 8, 1};
          n.in[0] = make_input(dtype, 3, shape, strides, 0, FILL_UNIFORM, -1, 3);
        } else {
          n.in[0] = make_contiguous(dtype, 2, shapes[s], -1, 3);
        }
        n.in[1] = make_contiguous(dtype, 1, &d, 0.5, 1.5);
        if (norm == 0) n.in[2] = make_contiguous(dtype, 1, &d, -1, 1);
        run_case(&n);
      }
      release_all();
    }
  }
}

/* The register kernels' size classes on the 16-byte path: row lengths 8 elements below, at
 * and above the points where the geometry switches (halves: a warp up to 1024, then
 * blocks of 64, 128, 256, 512, 1024 threads up to 2048, 4096, 8192, 16384, 32768, then the
 * streaming kernel; floats switch at half those lengths), softmax plain and causal, layernorm
 * with and without bias, rmsnorm; and, in f16, more rows of a block class than the grid has
 * blocks (65535), so that blocks run several rows each (the block reductions' scratch is reused
 * from row to row). */
static void test_row_ops_match_host_at_every_register_class_boundary(void) {
  static const int64_t lengths[] = {248,  256,  264,   504,   512,   520,   1016,  1024,
                                    1032, 2040, 2048,  2056,  4088,  4096,  4104,  8184,
                                    8192, 8200, 16376, 16384, 16392, 32760, 32768, 32776};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    const recap_dtype dtype = kFloatTypes[t];
    const bool with_many = dtype == RECAP_DTYPE_F16;
    for (size_t l = 0; l < sizeof lengths / sizeof lengths[0] + with_many; ++l) {
      const bool many = l == sizeof lengths / sizeof lengths[0];
      const int64_t shape[] = {many ? 65600 : 3, many ? 1032 : lengths[l]};
      for (int causal = 0; causal < 2 - many; ++causal) {
        op_case c = {.op = "softmax", .attrs = no_attrs(), .num_inputs = 1};
        c.attrs.causal = causal;
        c.attrs.scale = 0.5;
        c.in[0] = make_contiguous(dtype, 2, shape, -4, 4);
        run_case(&c);
      }
      for (int norm = 0; norm < 3; norm += 1 + many) {
        /* 0: layernorm with bias, 1: layernorm without, 2: rmsnorm. */
        op_case n = {.op = norm == 2 ? "rmsnorm" : "layernorm",
                     .attrs = no_attrs(),
                     .scale = SCALE_NORM,
                     .num_inputs = norm == 0 ? 3 : 2};
        n.attrs.eps = 1e-5;
        n.in[0] = make_contiguous(dtype, 2, shape, -1, 3);
        n.in[1] = make_contiguous(dtype, 1, &shape[1], 0.5, 1.5);
        if (norm == 0) n.in[2] = make_contiguous(dtype, 1, &shape[1], -1, 1);
        run_case(&n);
      }
      release_all();
    }
  }
}

/* The norms' row spread (kernels/reduce.cu plan_norm): few rows of 33-256 slots of 16 bytes run
 * one slot a thread in a block of 64, 128 or 256 threads; more than 2^18 / threads rows keep
 * the warp (33-128 slots) or the block of 64 x 4 slots (129-256). Row counts below, at and one
 * past the switch, row lengths with and without padding slots in the block, rows of a strided
 * view, three dtypes, every element against the host. */
static void test_norms_match_host_on_both_sides_of_the_row_spread_switch(void) {
  static const int64_t slot_counts[] = {33, 64, 100, 128, 200, 256};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    const recap_dtype dtype = kFloatTypes[t];
    const int64_t vec = 16 / (int64_t)recap_dtype_size(dtype);
    for (size_t l = 0; l < sizeof slot_counts / sizeof slot_counts[0]; ++l) {
      const int64_t slots = slot_counts[l], d = slots * vec;
      const int64_t limit = (1 << 18) / (slots <= 64 ? 64 : (slots <= 128 ? 128 : 256));
      const int64_t row_counts[] = {7, limit, limit + 1};
      for (size_t r = 0; r < sizeof row_counts / sizeof row_counts[0]; ++r) {
        const bool few = r == 0;
        for (int norm = 0; norm < 3; norm += few ? 1 : 2) {
          /* 0: layernorm with bias, 1: layernorm without, 2: rmsnorm. */
          op_case n = {.op = norm == 2 ? "rmsnorm" : "layernorm",
                       .attrs = no_attrs(),
                       .scale = SCALE_NORM,
                       .num_inputs = norm == 0 ? 3 : 2};
          n.attrs.eps = 1e-5;
          n.in[0] = row_case_input(dtype, row_counts[r], d, few ? 2 : 0, -1, 3);
          n.in[1] = make_contiguous(dtype, 1, &d, 0.5, 1.5);
          if (norm == 0) n.in[2] = make_contiguous(dtype, 1, &d, -1, 1);
          run_case(&n);
        }
        release_all();
      }
    }
  }
}

#if RECAP_WITH_CUDA
/* recap__cuda_gemm_bias_act (the pass after a GEMM: out = act(out + bias) + residual) against
 * the host's recap__gemm_activate, for every activation and float dtype, with and without bias
 * and residual, on the 16-byte kernel (rows of a multiple of 16 bytes) and the element kernel
 * (other row lengths, an output one element off alignment). Inputs span [-8, 8], across the
 * device gelu's cut-off at |x| = 5.6, plus NaN, +-inf, +-0 and large values. An element passes
 * when |cuda - host| <= 1e-7 + rtol * (|x| + |bias| + |residual| + |host|) with the dtype's
 * rtol: the size of the terms, because the host's erf gelu, 0.5 x (1 + erff(x / sqrt 2)),
 * cancels for x < -2 and is then further from the exact value than the device's form is; and
 * the size of the result, because two f32 values a few ulp apart can round to neighbouring
 * elements of a 16-bit type (sigmoid(-0.0054) = 0.4986573 lies halfway between two f16
 * values: seen on the H100 as 0.498535 against the host's 0.498779). NaN must give
 * NaN; +inf gives +inf; -inf gives NaN on the host (inf * 0) and the limit 0 for the device
 * gelu, which the test expects. */
static void test_gemm_epilogue_matches_host_activation(void) {
  static const int64_t shapes[][2] = {{3, 8}, {5, 24}, {64, 136}, {7, 13}, {2, 1}, {9, 4}};
  static const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e4f, -1e4f, 5.6f, -5.6f};
  const int nspecial = (int)(sizeof specials / sizeof specials[0]);
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    const recap_dtype dtype = kFloatTypes[t];
    const size_t es = recap_dtype_size(dtype);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
      for (int act = RECAP_ACT_NONE; act <= RECAP_ACT_TANH; ++act)
        for (int v = 0; v < 5; ++v) {
          const bool with_bias = v & 1, with_residual = v & 2, off = v == 4;
          const int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
          tbuf x = make_input(dtype, 2, shapes[s], NULL, off, FILL_UNIFORM, -8, 8);
          tbuf b = make_contiguous(dtype, 1, &cols, -1, 1);
          tbuf r = make_contiguous(dtype, 2, shapes[s], -1, 1);
          for (int k = 0; k < nspecial && k < n; ++k)
            recap__store_f32(x.host, dtype, off + k * 7 % n, specials[k]);
          to_device(x.dev, x.host, (size_t)x.storage * es);
          const char *xh = (const char *)x.host + off * (int64_t)es;
          char *xd = (char *)x.dev + off * (int64_t)es;
          CHECK_OK(recap__cuda_gemm_bias_act(
              xd, with_bias ? b.dev : NULL, with_residual ? r.dev : NULL, dtype, rows, cols,
              (recap__activation)act, recap_stream_native(cuda_stream)));
          void *got = host_alloc((size_t)n * es);
          to_host(got, xd, (size_t)n * es);
          int64_t bad = 0;
          for (int64_t i = 0; i < n; ++i) {
            const float in = recap__load_f32(xh, dtype, i);
            const float bi = with_bias ? recap__load_f32(b.host, dtype, i % cols) : 0.0f;
            const float re = with_residual ? recap__load_f32(r.host, dtype, i) : 0.0f;
            float want = recap__gemm_activate((recap__activation)act, in + bi) + re;
            if (act == RECAP_ACT_GELU && isinf(in + bi) && in + bi < 0) want = 0.0f + re;
            /* Rounded to the dtype, as the kernels store it (room for any dtype's element). */
            int64_t rounded;
            recap__store_f32(&rounded, dtype, 0, want);
            const double g = recap__load_f32(got, dtype, i),
                         w = recap__load_f32(&rounded, dtype, 0);
            const double tol =
                1e-7 + rtol_of(dtype) * (fabs((double)in) + fabs((double)bi) + fabs((double)re) +
                                         (isfinite(w) ? fabs(w) : 0.0));
            const bool ok = (isnan(g) && isnan(w)) || g == w || fabs(g - w) <= tol;
            if (!ok && bad++ < 5)
              fprintf(stderr,
                      "\n  epilogue act %d [%s] %lldx%lld v%d: element %lld (x %.9g): cuda %.9g "
                      "host %.9g",
                      act, recap_dtype_name(dtype), (long long)rows, (long long)cols, v,
                      (long long)i, (double)in, g, w);
          }
          CU_ASSERT_EQUAL(bad, 0);
          release_all();
        }
  }
}
#endif

static void test_sum_and_mean_match_host(void) {
  static const char *const ops[] = {"sum", "mean"};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof kRowShapes / sizeof kRowShapes[0]; ++s)
      for (int o = 0; o < 2; ++o) {
        op_case c = {.op = ops[o], .attrs = no_attrs(), .num_inputs = 1, .scale = SCALE_ROW_SUM};
        c.in[0] = row_input(kFloatTypes[t], s, -2, 2);
        run_case(&c);
        release_all();
      }
}

int main(void) {
  CU_pSuite gpu = test_add_cuda_suite("ops_cuda_rows/vs_host", cuda_suite_init, cuda_suite_cleanup);
  CU_ADD_TEST(gpu, test_softmax_matches_host);
  CU_ADD_TEST(gpu, test_causal_softmax_masks_and_zeroes_hidden_rows);
  CU_ADD_TEST(gpu, test_layernorm_and_rmsnorm_match_host);
  CU_ADD_TEST(gpu, test_row_ops_match_host_for_every_row_length);
  CU_ADD_TEST(gpu, test_row_ops_match_host_for_large_and_long_rows);
  CU_ADD_TEST(gpu, test_row_ops_match_host_for_every_group_shape);
  CU_ADD_TEST(gpu, test_row_ops_match_host_at_every_register_class_boundary);
  CU_ADD_TEST(gpu, test_norms_match_host_on_both_sides_of_the_row_spread_switch);
#if RECAP_WITH_CUDA
  CU_ADD_TEST(gpu, test_gemm_epilogue_matches_host_activation);
#endif
  CU_ADD_TEST(gpu, test_sum_and_mean_match_host);
  return test_run_all();
}
