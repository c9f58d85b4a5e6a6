/*
 * gemm_cublas_test.c: matmul and linear on CUDA through cuBLASLt and cuBLAS against the host
 * implementation (gemm_util.h): both libraries, TF32 on and off, graph capture and replay,
 * capture without warmup, per-stream workspaces, the libraries' versions, and cuBLAS mapped
 * into the process only once it is needed (that one needs no GPU). The CUDA suite is inactive
 * without a GPU; a host-only build registers it empty.
 */
#include "tests/gemm_util.h"

#if RECAP_WITH_CUDA

static const case_maker cuda_cases[] = {
    mk_odd,
    mk_skinny,
    mk_trans,
    mk_beta,
    mk_batched,
    mk_strided_batch,
    mk_linear_relu,
    mk_linear_gelu,
    mk_linear_gelu_tanh,
    mk_linear_silu_nobias,
    mk_linear_gelu_residual,
    mk_linear_residual_nobias,
    mk_linear_relu_residual_nobias,
    mk_skinny_residual_nobias,
};

static void run_all_cuda_cases(const char *what) {
  test_rng rng;
  test_rng_init(&rng);
  for (size_t d = 0; d < 3; ++d) {
    for (size_t c = 0; c < sizeof cuda_cases / sizeof cuda_cases[0]; ++c) {
      gcase g;
      cuda_cases[c](&g, float_types[d], &rng);
      case_run_host(&g);
      check_cuda_against_host(&g, false, what);
      case_free(&g);
    }
  }
}

static void test_cuda_cublaslt_matches_host(void) {
  CHECK_OK(recap__gemm_set_library(RECAP_GEMM_LIBRARY_CUBLASLT));
  run_all_cuda_cases("cuBLASLt");
}

static void test_cuda_cublas_matches_host(void) {
  CHECK_OK(recap__gemm_set_library(RECAP_GEMM_LIBRARY_CUBLAS));
  run_all_cuda_cases("cuBLAS");
  CHECK_OK(recap__gemm_set_library(RECAP_GEMM_LIBRARY_CUBLASLT));
}

static void test_cuda_tf32_on_stays_within_tf32_tolerance(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (int lib = 0; lib < 2; ++lib) {
    CHECK_OK(recap__gemm_set_library((recap_gemm_library)lib));
    gcase g;
    make_matmul(&g, RECAP_DTYPE_F32, 64, 96, 1023, 0, 0, false, &rng);
    case_run_host(&g);
    recap__gemm_set_allow_tf32(true);
    check_cuda_against_host(&g, true, "tf32 on");
    recap__gemm_set_allow_tf32(false);
    check_cuda_against_host(&g, false, "tf32 off");
    case_free(&g);
  }
  CHECK_OK(recap__gemm_set_library(RECAP_GEMM_LIBRARY_CUBLASLT));
}

/* Captures one launch of d->call on `s` and returns the instantiated graph. */
static recap_status capture_once(recap_stream *s, recap__op_call *call, recap__graph_exec **exec) {
  recap__graph *graph = NULL;
  recap_status st = recap__capture_begin(s, RECAP_CAPTURE_MODE_THREAD_LOCAL);
  if (st != RECAP_OK) return st;
  const recap_status launched = recap__op_launch(call, s);
  char message[512];
  snprintf(message, sizeof message, "%s", recap_last_error());
  st = recap__capture_end(s, &graph);
  if (launched != RECAP_OK) {
    if (st == RECAP_OK) s->backend->graph_destroy(graph);
    recap__fail_plain(launched, "%s", message);
    return launched;
  }
  if (st != RECAP_OK) return st;
  st = s->backend->graph_instantiate(graph, exec);
  s->backend->graph_destroy(graph);
  return st;
}

static void test_cuda_captured_gemm_replays_identically(void) {
  test_rng rng;
  test_rng_init(&rng);
  for (int lib = 0; lib < 2; ++lib) {
    CHECK_OK(recap__gemm_set_library((recap_gemm_library)lib));
    for (size_t c = 0; c < sizeof cuda_cases / sizeof cuda_cases[0]; ++c) {
      gcase g;
      cuda_cases[c](&g, RECAP_DTYPE_BF16, &rng);
      case_run_host(&g);
      dcase d;
      dcase_make(&g, &d);
      /* Warmup (eager), then the result to replay against. */
      CHECK_OK(recap__gemm_prepare(&d.call, cuda_stream));
      CHECK_OK(recap__op_launch(&d.call, cuda_stream));
      CHECK_OK(recap_stream_synchronize(cuda_stream));
      recap_tensor eager = dcase_result(&g, &d);
      recap__graph_exec *exec = NULL;
      CHECK_OK(capture_once(cuda_stream, &d.call, &exec));
      const size_t bytes = (size_t)recap__tensor_numel(&eager) * recap_dtype_size(eager.dtype);
      for (int replay = 0; replay < 3; ++replay) {
        /* Poisoned on the test's stream: it is non-blocking, so a cudaMemset on the legacy
         * stream is not ordered before the replay (under compute-sanitizer a replay mismatched). */
        CU_ASSERT_EQUAL(cudaMemsetAsync(d.call.outputs[0].data, 0xff, bytes,
                                        (cudaStream_t)recap_stream_native(cuda_stream)),
                        cudaSuccess);
        CHECK_OK(cuda_stream->backend->graph_launch(exec, cuda_stream));
        CHECK_OK(recap_stream_synchronize(cuda_stream));
        recap_tensor replayed = dcase_result(&g, &d);
        CU_ASSERT_EQUAL(memcmp(replayed.data, eager.data, bytes), 0);
        free(replayed.data);
      }
      cuda_stream->backend->graph_exec_destroy(exec);
      free(eager.data);
      dcase_free(&d);
      case_free(&g);
    }
  }
  CHECK_OK(recap__gemm_set_library(RECAP_GEMM_LIBRARY_CUBLASLT));
}

static void test_cuda_capture_without_warmup_fails_cleanly_then_works(void) {
  test_rng rng;
  test_rng_init(&rng);
  recap_stream *fresh = NULL;
  CHECK_OK(recap_stream_create((recap_device){RECAP_BACKEND_CUDA, 0}, 0, RECAP_STREAM_NON_BLOCKING,
                               &fresh));
  gcase g;
  make_matmul(&g, RECAP_DTYPE_F16, 37, 29, 45, 0, 1, false, &rng); /* a shape no test used */
  case_run_host(&g);
  dcase d;
  dcase_make(&g, &d);
  CU_ASSERT_PTR_NULL(recap__gemm_stream_workspace(recap_stream_native(fresh)));
  recap__graph_exec *exec = NULL;
  CHECK_STATUS(capture_once(fresh, &d.call, &exec), RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CHECK_ERROR_MENTIONS("run a warmup first");
  CU_ASSERT_EQUAL(recap__capture_count(), 0);
  /* After a prepare, the same capture works and replays the eager result. */
  CHECK_OK(recap__gemm_prepare(&d.call, fresh));
  CU_ASSERT_PTR_NOT_NULL(recap__gemm_stream_workspace(recap_stream_native(fresh)));
  CHECK_OK(capture_once(fresh, &d.call, &exec));
  CHECK_OK(fresh->backend->graph_launch(exec, fresh));
  CHECK_OK(recap_stream_synchronize(fresh));
  recap_tensor got = dcase_result(&g, &d);
  CU_ASSERT_EQUAL(count_bad(&got, g.ref, g.scale, cuda_tol(RECAP_DTYPE_F16, false), "replay"), 0);
  free(got.data);
  fresh->backend->graph_exec_destroy(exec);
  CHECK_OK(recap__gemm_release_stream(recap_stream_native(fresh)));
  CU_ASSERT_PTR_NULL(recap__gemm_stream_workspace(recap_stream_native(fresh)));
  CHECK_OK(recap_stream_destroy(fresh));
  dcase_free(&d);
  case_free(&g);
}

static void test_cuda_two_streams_use_different_workspaces(void) {
  test_rng rng;
  test_rng_init(&rng);
  recap_stream *s[2] = {NULL, NULL};
  for (int i = 0; i < 2; ++i)
    CHECK_OK(recap_stream_create((recap_device){RECAP_BACKEND_CUDA, 0}, 0,
                                 RECAP_STREAM_NON_BLOCKING, &s[i]));
  gcase g;
  make_matmul(&g, RECAP_DTYPE_F32, 64, 64, 64, 0, 0, false, &rng);
  case_run_host(&g);
  dcase d;
  dcase_make(&g, &d);
  for (int i = 0; i < 2; ++i) {
    CHECK_OK(recap__op_launch(&d.call, s[i])); /* lazily prepared: no capture under way */
    CHECK_OK(recap_stream_synchronize(s[i]));
  }
  void *w0 = recap__gemm_stream_workspace(recap_stream_native(s[0]));
  void *w1 = recap__gemm_stream_workspace(recap_stream_native(s[1]));
  CU_ASSERT_PTR_NOT_NULL(w0);
  CU_ASSERT_PTR_NOT_NULL(w1);
  CU_ASSERT_PTR_NOT_EQUAL(w0, w1);
  for (int i = 0; i < 2; ++i) {
    CHECK_OK(recap__gemm_release_stream(recap_stream_native(s[i])));
    CHECK_OK(recap_stream_destroy(s[i]));
  }
  dcase_free(&d);
  case_free(&g);
}

#if RECAP_WITH_CUDA
/* Whether a shared object whose path contains `name` is mapped into this process. */
static bool mapped(const char *name) {
  FILE *f = fopen("/proc/self/maps", "r");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  char line[4096];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) found = strstr(line, name) != NULL;
  fclose(f);
  return found;
}

/* cuBLAS and cuBLASLt (about 220 MB mapped) are opened on first use (kernels/gemm/cuda_blas.h),
 * not when the process starts: before this test nothing here has run a GEMM on a GPU or asked
 * the libraries' versions. Asking the versions opens them, with every function resolved.
 * Needs no GPU. */
static void test_cublas_is_mapped_only_once_it_is_needed(void) {
  CU_ASSERT_FALSE(mapped("libcublas"));
  recap_library_versions v;
  CHECK_OK(recap_library_versions_get(&v));
  CU_ASSERT_TRUE(mapped("libcublasLt.so."));
  CU_ASSERT_TRUE(mapped("libcublas.so."));
  /* Opened by the soname of the headers' major version (libcublas.so.<major>). */
  CU_ASSERT_EQUAL(v.cublas_version / 10000, CUBLAS_VER_MAJOR);
  CU_ASSERT_EQUAL(v.cublaslt_version / 10000, CUBLAS_VER_MAJOR);
}
#endif

static void test_cuda_blas_versions_are_reported(void) {
  recap_library_versions v;
  CHECK_OK(recap_library_versions_get(&v));
  CU_ASSERT(v.cublas_version >= 120000);
  CU_ASSERT(v.cublaslt_version >= 120000);
  /* The libraries are opened by soname (libcublas.so.<major>), so the versions they report
   * carry the major version of the headers this test was built with. */
  CU_ASSERT_EQUAL(v.cublas_version / 10000, CUBLAS_VER_MAJOR);
  CU_ASSERT_EQUAL(v.cublaslt_version / 10000, CUBLAS_VER_MAJOR);
}

#endif /* RECAP_WITH_CUDA */

int main(void) {
#if RECAP_WITH_CUDA
  /* First: it checks that nothing before it opened cuBLAS. */
  CU_pSuite loading = test_add_suite("gemm/cublas loading", NULL, NULL);
  CU_ADD_TEST(loading, test_cublas_is_mapped_only_once_it_is_needed);
#endif
  CU_pSuite cuda = test_add_cuda_suite("gemm/cuda",
#if RECAP_WITH_CUDA
                                       cuda_suite_init, cuda_suite_cleanup);
  CU_ADD_TEST(cuda, test_cuda_cublaslt_matches_host);
  CU_ADD_TEST(cuda, test_cuda_cublas_matches_host);
  CU_ADD_TEST(cuda, test_cuda_tf32_on_stays_within_tf32_tolerance);
  CU_ADD_TEST(cuda, test_cuda_captured_gemm_replays_identically);
  CU_ADD_TEST(cuda, test_cuda_capture_without_warmup_fails_cleanly_then_works);
  CU_ADD_TEST(cuda, test_cuda_two_streams_use_different_workspaces);
  CU_ADD_TEST(cuda, test_cuda_blas_versions_are_reported);
#else
                                       NULL, NULL);
  (void)cuda;
#endif
  return test_run_all();
}
