/*
 * gemm_skinny_hopper_test.c: recap's own GEMM kernels on CUDA against the host implementation
 * (gemm_util.h): the skinny kernel (kernels/gemm/skinny.cu: its routing, m 1..16 with a k tail,
 * large odd n, refused shapes, every activation with and without bias, a linear's residual
 * with and without bias in one launch, every configuration, a chain eager and replayed, each
 * also against the cuBLASLt fallback) and the Hopper kernel
 * (kernels/gemm/hopper.cu: its routing, every configuration, default and disabled). The CUDA
 * suite is inactive without a GPU; a host-only build registers it empty.
 */
#include "tests/gemm_util.h"

#if RECAP_WITH_CUDA

/* ---- CUDA: the skinny kernel (gemm/skinny.cu) ---------------------------------------------- */

static const recap_dtype half_types[] = {RECAP_DTYPE_BF16, RECAP_DTYPE_F16};

/* Runs the case on CUDA with the skinny kernel allowed and, for comparison, with
 * RECAP_GEMM_SKINNY=0 (cuBLASLt); both must match the host. */
static void check_skinny_and_fallback(gcase *g, const char *what) {
  unsetenv("RECAP_GEMM_SKINNY");
  recap__gemm_env_reload();
  check_cuda_against_host(g, false, what);
  setenv("RECAP_GEMM_SKINNY", "0", 1);
  recap__gemm_env_reload(); /* the settings are read once; this reads them again */
  check_cuda_against_host(g, false, "skinny disabled (cuBLASLt)");
  unsetenv("RECAP_GEMM_SKINNY");
  recap__gemm_env_reload();
}

static void test_cuda_skinny_routing_accepts_only_shapes_it_supports(void) {
  test_rng rng;
  test_rng_init(&rng);
  gcase g;
  const int64_t xs[2] = {8, 64};
  make_linear(&g, RECAP_DTYPE_BF16, 2, xs, 40, true, RECAP_ACT_GELU, &rng);
  for (int i = 0; i < g.call.num_inputs; ++i) g.call.inputs[i] = g.in[i].t;
  CHECK_OK(recap__op_infer(&g.call));
  recap__gemm_plan plan, p;
  CHECK_OK(recap__gemm_plan_make(&g.call, &plan));
  CU_ASSERT_TRUE(recap__cuda_gemm_skinny_fits(&plan));
  p = plan, p.dtype = RECAP_DTYPE_F16;
  CU_ASSERT_TRUE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.m = 1;
  CU_ASSERT_TRUE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.m = 16;
  CU_ASSERT_TRUE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.m = 17;
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.dtype = RECAP_DTYPE_F32;
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.k = 4097, p.a_rs = 4097, p.b_cs = 4097; /* K % 8 != 0: rows not 16-byte aligned */
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.a_rs = 1, p.a_cs = 8; /* x transposed */
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.b_rs = 40, p.b_cs = 1; /* W stored [K, N] */
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.b = (const char *)plan.b + 2; /* misaligned weight */
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.batch[1] = 2, p.a_bs[1] = 8 * 64, p.out_bs[1] = 8 * 40;
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  p = plan, p.c = plan.a, p.beta = 1.0f; /* any non-NULL c: beta * c would be dropped */
  CU_ASSERT_FALSE(recap__cuda_gemm_skinny_fits(&p));
  case_free(&g);
}

static void test_cuda_skinny_m_1_to_16_with_k_tail_matches_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 2; ++d) {
    for (int64_t m = 1; m <= 16; ++m) {
      /* n odd (a partial block of rows), k = 520: the last 32-wide step is a quarter full. */
      gcase g;
      const int64_t xs[2] = {m, 520};
      make_linear(&g, half_types[d], 2, xs, 257, true, RECAP_ACT_NONE, &rng);
      case_run_host(&g);
      check_skinny_and_fallback(&g, "skinny m 1..16");
      case_free(&g);
    }
  }
}

/* The decode shape itself (many blocks, every warp of a block busy), with an odd n. */
static void test_cuda_skinny_large_odd_n_matches_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  const int64_t ms[3] = {1, 8, 16};
  for (int i = 0; i < 3; ++i) {
    gcase g;
    const int64_t xs[2] = {ms[i], 4096};
    make_linear(&g, RECAP_DTYPE_BF16, 2, xs, 4095, true, RECAP_ACT_GELU, &rng);
    case_run_host(&g);
    check_cuda_against_host(&g, false, "skinny 4095 x 4096");
    case_free(&g);
  }
}

/* Shapes the kernel refuses (K % 8 != 0) still run, on cuBLASLt. */
static void test_cuda_skinny_refused_shapes_still_match_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  const int64_t shapes[2][3] = {{3, 4095, 4097}, {16, 33, 33}};
  for (int i = 0; i < 2; ++i) {
    gcase g;
    const int64_t xs[2] = {shapes[i][0], shapes[i][2]};
    make_linear(&g, RECAP_DTYPE_BF16, 2, xs, shapes[i][1], true, RECAP_ACT_SILU, &rng);
    case_run_host(&g);
    check_cuda_against_host(&g, false, "k % 8 != 0");
    case_free(&g);
  }
}

static void test_cuda_skinny_every_activation_with_and_without_bias_matches_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 2; ++d) {
    for (int act = RECAP_ACT_NONE; act <= RECAP_ACT_TANH; ++act) {
      for (int bias = 0; bias < 2; ++bias) {
        gcase g;
        const int64_t xs[2] = {7, 264};
        make_linear(&g, half_types[d], 2, xs, 131, bias, (recap__activation)act, &rng);
        case_run_host(&g);
        check_skinny_and_fallback(&g, "skinny activation");
        case_free(&g);
      }
    }
  }
}

/* A linear's residual (a folded add) in the skinny kernel's own epilogue: m = 1..16, with and
 * without a bias, after no activation, silu or gelu, n = 257 (not a multiple of the kernel's
 * 16-row blocks), against the host and the cuBLASLt fallback. And the fold is one launch: a
 * captured call of the decode shape (m = 1, no bias, no activation) is one graph node. */
static void test_cuda_skinny_residual_with_and_without_bias_is_one_launch_and_matches_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  static const recap__activation acts[3] = {RECAP_ACT_NONE, RECAP_ACT_SILU, RECAP_ACT_GELU};
  for (size_t d = 0; d < 2; ++d) {
    for (int64_t m = 1; m <= 16; ++m) {
      for (int bias = 0; bias < 2; ++bias) {
        gcase g;
        const int64_t xs[2] = {m, 264};
        make_linear(&g, half_types[d], 2, xs, 257, bias, acts[m % 3], &rng);
        add_residual(&g, &rng);
        case_run_host(&g);
        char what[96];
        snprintf(what, sizeof what, "skinny residual, %s, m %lld, %s, act %d",
                 recap_dtype_name(half_types[d]), (long long)m, bias ? "bias" : "no bias",
                 (int)acts[m % 3]);
        check_skinny_and_fallback(&g, what);
        case_free(&g);
      }
    }
    gcase g;
    const int64_t xs[2] = {1, 2048};
    make_linear(&g, half_types[d], 2, xs, 2048, false, RECAP_ACT_NONE, &rng);
    add_residual(&g, &rng);
    case_run_host(&g);
    dcase dc;
    dcase_make(&g, &dc);
    recap__gemm_plan plan;
    CHECK_OK(recap__gemm_plan_make(&dc.call, &plan));
    CU_ASSERT_TRUE(recap__cuda_gemm_skinny_fits(&plan));
    CHECK_OK(recap__gemm_prepare(&dc.call, cuda_stream));
    recap__graph *graph = NULL;
    CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_THREAD_LOCAL));
    const recap_status launched = recap__op_launch(&dc.call, cuda_stream);
    CHECK_OK(recap__capture_end(cuda_stream, &graph));
    CHECK_OK(launched);
    size_t nodes = 0;
    CHECK_OK(cuda_stream->backend->graph_node_count(graph, &nodes));
    CU_ASSERT_EQUAL(nodes, 1);
    recap__graph_exec *exec = NULL;
    CHECK_OK(cuda_stream->backend->graph_instantiate(graph, &exec));
    cuda_stream->backend->graph_destroy(graph);
    CHECK_OK(cuda_stream->backend->graph_launch(exec, cuda_stream));
    CHECK_OK(recap_stream_synchronize(cuda_stream));
    recap_tensor got = dcase_result(&g, &dc);
    CU_ASSERT_EQUAL(
        count_bad(&got, g.ref, g.scale, cuda_tol(half_types[d], false), "skinny fold replayed"), 0);
    free(got.data);
    cuda_stream->backend->graph_exec_destroy(exec);
    dcase_free(&dc);
    case_free(&g);
  }
}

/* matmul with trans_b is the same layout; alpha scales the product. */
static void test_cuda_skinny_matmul_trans_b_with_alpha_matches_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 2; ++d) {
    gcase g;
    make_matmul(&g, half_types[d], 12, 100, 96, 0, 1, false, &rng);
    g.call.attrs.alpha = -0.75;
    case_run_host(&g);
    check_skinny_and_fallback(&g, "skinny matmul");
    case_free(&g);
  }
}

/* Every launch configuration of the skinny kernel, not only the one the routing picks: pipes
 * 0 and 1 (the register kernel, one and two buffers) and 2-4 (the bulk-copy shapes; run as
 * pipe 1 before Hopper; 4 refused above m = 8) with 1 to 16 warps, at m = 1, 5, 9 and 16 (one and
 * two 8-row tiles of x; a bias at m = 1 and 9), n = 257 (a partial last block) and k = 520 (a
 * partial stage and step, shorter than the L2 prefetch) or 1560 (several stages, wrapping the ring;
 * with a residual, which each kernel's epilogue adds), and at k = 1560 also n = 8201 (more row
 * tiles than an H100 or H200 holds bulk blocks at once: each block takes several through one ring,
 * the last one partial). The output starts as NaN each time, so an element a configuration
 * leaves unwritten shows. */
static void test_cuda_skinny_every_configuration_matches_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  const int64_t ms[4] = {1, 5, 9, 16};
  const int warps[4] = {1, 4, 8, 16};
  for (size_t d = 0; d < 2; ++d) {
    for (int mi = 0; mi < 4; ++mi) {
      for (int ki = 0; ki < 3; ++ki) {
        gcase g;
        const int64_t k = ki == 0 ? 520 : 1560, n = ki == 2 ? 8201 : 257;
        const int64_t xs[2] = {ms[mi], k};
        make_linear(&g, half_types[d], 2, xs, n, mi % 2 == 0, RECAP_ACT_GELU, &rng);
        if (ki > 0) add_residual(&g, &rng);
        case_run_host(&g);
        dcase dc;
        dcase_make(&g, &dc);
        recap__gemm_plan plan;
        CHECK_OK(recap__gemm_plan_make(&dc.call, &plan));
        CU_ASSERT_TRUE(recap__cuda_gemm_skinny_fits(&plan));
        const size_t bytes =
            (size_t)recap__tensor_numel(&g.call.outputs[0]) * recap_dtype_size(half_types[d]);
        for (int pipe = 0; pipe <= 4; ++pipe) {
          if (!recap__cuda_gemm_skinny_pipe_fits(&plan, pipe)) {
            /* The four-stage shape takes m <= 8: refused, naming why. */
            CU_ASSERT_EQUAL(
                recap__cuda_gemm_skinny_config(&plan, 0, recap_stream_native(cuda_stream), 8, pipe),
                RECAP_STATUS_INVALID_ARGUMENT);
            CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "takes at most 8 rows of x"));
            continue;
          }
          for (int wi = 0; wi < 4; ++wi) {
            CU_ASSERT_EQUAL(cudaMemsetAsync(dc.call.outputs[0].data, 0xff, bytes,
                                            (cudaStream_t)recap_stream_native(cuda_stream)),
                            cudaSuccess);
            CHECK_OK(recap__cuda_gemm_skinny_config(&plan, 0, recap_stream_native(cuda_stream),
                                                    warps[wi], pipe));
            CHECK_OK(recap_stream_synchronize(cuda_stream));
            recap_tensor got = dcase_result(&g, &dc);
            char what[128];
            snprintf(what, sizeof what,
                     "skinny pipe %d, %d warps, m %lld, n %lld, k %lld, %d inputs", pipe, warps[wi],
                     (long long)ms[mi], (long long)n, (long long)k, g.call.num_inputs);
            CU_ASSERT_EQUAL(count_bad(&got, g.ref, g.scale, cuda_tol(half_types[d], false), what),
                            0);
            free(got.data);
          }
        }
        dcase_free(&dc);
        case_free(&g);
      }
    }
  }
}

/* A chain of skinny layers, each reading the previous one's output, launched back to back
 * (the kernel lets its successor start early and must make it wait for its output): eagerly
 * against the host layer by layer, then captured and replayed bit for bit. Every output
 * starts as NaN, so a layer that read its input too early shows. */
static void test_cuda_skinny_chain_eager_and_replayed_matches_host(void) {
  enum { LAYERS = 4, M = 8, H = 1024 };
  test_rng rng;
  test_rng_init(&rng);
  gcase g[LAYERS];
  dcase d[LAYERS];
  const int64_t xs[2] = {M, H};
  for (int i = 0; i < LAYERS; ++i) {
    make_linear(&g[i], RECAP_DTYPE_BF16, 2, xs, H, true, RECAP_ACT_GELU, &rng);
    for (int j = 0; j < g[i].call.num_inputs; ++j) g[i].call.inputs[j] = g[i].in[j].t;
    CHECK_OK(recap__op_infer(&g[i].call));
    dcase_make(&g[i], &d[i]);
    if (i > 0) d[i].call.inputs[0].data = d[i - 1].call.outputs[0].data;
  }
  for (int i = 0; i < LAYERS; ++i) CHECK_OK(recap__gemm_prepare(&d[i].call, cuda_stream));
  for (int i = 0; i < LAYERS; ++i) CHECK_OK(recap__op_launch(&d[i].call, cuda_stream));
  CHECK_OK(recap_stream_synchronize(cuda_stream));
  recap_tensor eager[LAYERS];
  for (int i = 0; i < LAYERS; ++i) {
    eager[i] = dcase_result(&g[i], &d[i]);
    /* Layer i's host input is what layer i - 1 produced on the device. */
    if (i > 0)
      memcpy(g[i].in[0].t.data, eager[i - 1].data,
             (size_t)M * H * recap_dtype_size(RECAP_DTYPE_BF16));
    case_run_host(&g[i]);
    CU_ASSERT_EQUAL(count_bad(&eager[i], g[i].ref, g[i].scale, cuda_tol(RECAP_DTYPE_BF16, false),
                              "skinny chain"),
                    0);
  }

  recap__graph *graph = NULL;
  recap__graph_exec *exec = NULL;
  CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  recap_status launched = RECAP_OK;
  for (int i = 0; i < LAYERS && launched == RECAP_OK; ++i)
    launched = recap__op_launch(&d[i].call, cuda_stream);
  CHECK_OK(recap__capture_end(cuda_stream, &graph));
  CHECK_OK(launched);
  CHECK_OK(cuda_stream->backend->graph_instantiate(graph, &exec));
  cuda_stream->backend->graph_destroy(graph);
  const size_t bytes = (size_t)M * H * recap_dtype_size(RECAP_DTYPE_BF16);
  for (int replay = 0; replay < 3; ++replay) {
    for (int i = 0; i < LAYERS; ++i)
      CU_ASSERT_EQUAL(cudaMemsetAsync(d[i].call.outputs[0].data, 0xff, bytes,
                                      (cudaStream_t)recap_stream_native(cuda_stream)),
                      cudaSuccess);
    CHECK_OK(cuda_stream->backend->graph_launch(exec, cuda_stream));
    CHECK_OK(recap_stream_synchronize(cuda_stream));
    for (int i = 0; i < LAYERS; ++i) {
      recap_tensor replayed = dcase_result(&g[i], &d[i]);
      CU_ASSERT_EQUAL(memcmp(replayed.data, eager[i].data, bytes), 0);
      free(replayed.data);
    }
  }
  cuda_stream->backend->graph_exec_destroy(exec);
  for (int i = 0; i < LAYERS; ++i) {
    free(eager[i].data);
    dcase_free(&d[i]);
    case_free(&g[i]);
  }
}

/* ---- the Hopper kernel (gemm/hopper.cu) ---- */

/* Whether device 0 runs the Hopper kernel (compute capability 9.0); the tests below check
 * the routing either way and the kernel itself where it can run. */
static bool device_is_hopper(void) {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major == 9 && minor == 0;
}

static void test_cuda_hopper_routing_accepts_only_shapes_it_supports(void) {
  test_rng rng;
  test_rng_init(&rng);
  gcase g;
  const int64_t xs[2] = {256, 64};
  make_linear(&g, RECAP_DTYPE_F16, 2, xs, 128, true, RECAP_ACT_GELU, &rng);
  for (int i = 0; i < g.call.num_inputs; ++i) g.call.inputs[i] = g.in[i].t;
  CHECK_OK(recap__op_infer(&g.call));
  recap__gemm_plan plan, p;
  CHECK_OK(recap__gemm_plan_make(&g.call, &plan));
  plan.a = plan.b = plan.out = NULL, plan.bias = NULL; /* host pointers: check the shape only */
  const bool hopper = device_is_hopper();
  CU_ASSERT_EQUAL(recap__cuda_gemm_hopper_fits(&plan, 0), hopper);
  p = plan, p.dtype = RECAP_DTYPE_BF16;
  CU_ASSERT_EQUAL(recap__cuda_gemm_hopper_fits(&p, 0), hopper);
  p = plan, p.m = 1, p.n = 8, p.k = 8, p.a_rs = 8, p.b_cs = 8; /* partial tiles everywhere */
  CU_ASSERT_EQUAL(recap__cuda_gemm_hopper_fits(&p, 0), hopper);
  p = plan, p.dtype = RECAP_DTYPE_F32;
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  p = plan, p.k = 60, p.a_rs = 60, p.b_cs = 60; /* rows not 16-byte multiples: no TMA */
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  p = plan, p.n = 130; /* the epilogue stores 16-byte chunks */
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  p = plan, p.a_rs = 1, p.a_cs = 256; /* x transposed */
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  p = plan, p.b_rs = 128, p.b_cs = 1; /* W stored [K, N] */
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  p = plan, p.a = (const char *)g.in[0].t.data + 2; /* misaligned x */
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  p = plan, p.batch[1] = 2, p.a_bs[1] = 256 * 64, p.out_bs[1] = 256 * 128;
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  p = plan, p.c = g.in[0].t.data, p.beta = 1.0f;
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&p, 0));
  CU_ASSERT_FALSE(recap__cuda_gemm_hopper_fits(&plan, 99)); /* no such device */
  CU_ASSERT_TRUE(recap__cuda_gemm_hopper_configs() > 0);
  case_free(&g);
}

/* Every tile configuration against the host on both 16-bit types: a shape with partial tiles
 * in m, n and k (and k shorter than one stage), and one whose k wraps the ring several times;
 * every activation, with and without bias, with a residual; and a matmul with b transposed and
 * alpha != 1. The output starts as NaN each time, so an element a configuration leaves
 * unwritten shows. */
static void test_cuda_hopper_every_configuration_matches_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  if (!device_is_hopper()) {
    /* Elsewhere the launcher must refuse every configuration rather than launch sm_90a code. */
    fprintf(stderr, "  (device 0 is not compute capability 9.0: the launcher must refuse)\n");
    gcase g;
    const int64_t xs[2] = {256, 64};
    make_linear(&g, RECAP_DTYPE_F16, 2, xs, 128, true, RECAP_ACT_GELU, &rng);
    case_run_host(&g);
    dcase dc;
    dcase_make(&g, &dc);
    recap__gemm_plan plan;
    CHECK_OK(recap__gemm_plan_make(&dc.call, &plan));
    for (int config = 0; config < recap__cuda_gemm_hopper_configs(); ++config)
      CU_ASSERT_EQUAL(recap__cuda_gemm_hopper(&plan, 0, recap_stream_native(cuda_stream), config),
                      RECAP_STATUS_INVALID_ARGUMENT);
    dcase_free(&dc);
    case_free(&g);
    return;
  }
  static const int64_t shapes[][3] = {{200, 136, 40}, {300, 520, 1096}};
  static const recap__activation acts[] = {RECAP_ACT_GELU,     RECAP_ACT_NONE, RECAP_ACT_SILU,
                                           RECAP_ACT_TANH,     RECAP_ACT_RELU, RECAP_ACT_SIGMOID,
                                           RECAP_ACT_GELU_TANH};
  enum { ACTS = sizeof acts / sizeof acts[0] };
  for (size_t d = 0; d < 2; ++d) {
    for (int si = 0; si < 2; ++si) {
      for (int ai = 0; ai <= ACTS; ++ai) {
        const int64_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
        gcase g;
        const int64_t xs[2] = {m, k}, rs[2] = {m, n};
        if (ai == ACTS) { /* matmul, b [n, k] transposed, alpha 0.75 */
          make_matmul(&g, half_types[d], m, n, k, 0, 1, false, &rng);
          g.call.attrs.alpha = 0.75;
        } else {
          make_linear(&g, half_types[d], 2, xs, n, ai != 2, acts[ai], &rng);
        }
        if (ai == 0) { /* gelu with a residual */
          g.call.num_inputs = 4;
          g.in[3] = tb_make(half_types[d], 2, rs, &rng);
        }
        case_run_host(&g);
        dcase dc;
        dcase_make(&g, &dc);
        recap__gemm_plan plan;
        CHECK_OK(recap__gemm_plan_make(&dc.call, &plan));
        CU_ASSERT_TRUE_FATAL(recap__cuda_gemm_hopper_fits(&plan, 0));
        const size_t bytes = (size_t)(m * n) * recap_dtype_size(half_types[d]);
        for (int config = 0; config < recap__cuda_gemm_hopper_configs(); ++config) {
          CU_ASSERT_EQUAL(cudaMemsetAsync(dc.call.outputs[0].data, 0xff, bytes,
                                          (cudaStream_t)recap_stream_native(cuda_stream)),
                          cudaSuccess);
          CHECK_OK(recap__cuda_gemm_hopper(&plan, 0, recap_stream_native(cuda_stream), config));
          CHECK_OK(recap_stream_synchronize(cuda_stream));
          recap_tensor got = dcase_result(&g, &dc);
          char what[112];
          snprintf(what, sizeof what, "hopper config %d, %s, %lld x %lld x %lld, case %d", config,
                   recap_dtype_name(half_types[d]), (long long)m, (long long)n, (long long)k, ai);
          CU_ASSERT_EQUAL(count_bad(&got, g.ref, g.scale, cuda_tol(half_types[d], false), what), 0);
          free(got.data);
        }
        CU_ASSERT_EQUAL(recap__cuda_gemm_hopper(&plan, 0, recap_stream_native(cuda_stream),
                                                recap__cuda_gemm_hopper_configs()),
                        RECAP_STATUS_INVALID_ARGUMENT);
        dcase_free(&dc);
        case_free(&g);
      }
    }
  }
}

/* The default routing sends a gelu linear to the Hopper kernel and RECAP_GEMM_HOPPER=0 sends
 * it to cuBLASLt plus the epilogue pass; both match the host. */
static void test_cuda_hopper_default_and_disabled_match_host(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 2; ++d) {
    gcase g;
    mk_linear_gelu_residual(&g, half_types[d], &rng);
    case_run_host(&g);
    check_cuda_against_host(&g, false, "default routing");
    setenv("RECAP_GEMM_HOPPER", "0", 1);
    recap__gemm_env_reload();
    check_cuda_against_host(&g, false, "RECAP_GEMM_HOPPER=0 (cuBLASLt)");
    unsetenv("RECAP_GEMM_HOPPER");
    recap__gemm_env_reload();
    case_free(&g);
  }
}

#endif /* RECAP_WITH_CUDA */

int main(void) {
  CU_pSuite cuda = test_add_cuda_suite("gemm_kernels/cuda",
#if RECAP_WITH_CUDA
                                       cuda_suite_init, cuda_suite_cleanup);
  CU_ADD_TEST(cuda, test_cuda_skinny_routing_accepts_only_shapes_it_supports);
  CU_ADD_TEST(cuda, test_cuda_skinny_m_1_to_16_with_k_tail_matches_host);
  CU_ADD_TEST(cuda, test_cuda_skinny_large_odd_n_matches_host);
  CU_ADD_TEST(cuda, test_cuda_skinny_refused_shapes_still_match_host);
  CU_ADD_TEST(cuda, test_cuda_skinny_every_activation_with_and_without_bias_matches_host);
  CU_ADD_TEST(cuda, test_cuda_skinny_residual_with_and_without_bias_is_one_launch_and_matches_host);
  CU_ADD_TEST(cuda, test_cuda_skinny_matmul_trans_b_with_alpha_matches_host);
  CU_ADD_TEST(cuda, test_cuda_skinny_every_configuration_matches_host);
  CU_ADD_TEST(cuda, test_cuda_skinny_chain_eager_and_replayed_matches_host);
  CU_ADD_TEST(cuda, test_cuda_hopper_routing_accepts_only_shapes_it_supports);
  CU_ADD_TEST(cuda, test_cuda_hopper_every_configuration_matches_host);
  CU_ADD_TEST(cuda, test_cuda_hopper_default_and_disabled_match_host);
#else
                                       NULL, NULL);
  (void)cuda;
#endif
  return test_run_all();
}
