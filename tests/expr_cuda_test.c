/*
 * expr_cuda_test.c: generated expression kernels on CUDA against the host evaluation
 * (kernels/expr.h); inactive without a GPU.
 *
 * Every function and some compound expressions on random data against the host evaluation,
 * every element, per-dtype tolerance, on the dense (vectorized), strided and broadcast paths,
 * and again captured in a graph and replayed; compiling during a capture is refused.
 */
#define _POSIX_C_SOURCE 200809L

#include "tests/expr_util.h"

/* ------------------------------------------------------------------------------------------
 * CUDA: generated kernels against the host evaluation
 * ---------------------------------------------------------------------------------------- */

static const recap_device kCudaDev = {RECAP_BACKEND_CUDA, 0};
static recap_stream *cuda_stream;
static const recap__backend *cuda;

static int cuda_suite_init(void) {
  if (nvrtc_suite_init() != 0) return 1;
  cuda = recap__backend_get(RECAP_BACKEND_CUDA);
  if (!cuda) return 1;
  return recap_stream_create(kCudaDev, 0, RECAP_STREAM_NON_BLOCKING, &cuda_stream) != RECAP_OK;
}

static int cuda_suite_cleanup(void) {
  recap_stream_destroy(cuda_stream);
  cuda_stream = NULL;
  return 0;
}

static double rtol_of(recap_dtype d) {
  return d == RECAP_DTYPE_F32 ? 1e-5 : d == RECAP_DTYPE_F16 ? 1e-3 : 8e-3;
}

/* One operand: host and device copies of a (possibly strided, offset) view. */
typedef struct {
  recap_tensor host, dev;
  size_t bytes;
} operand;

static operand make_operand(recap_dtype dtype, int ndim, const int64_t *shape,
                            const int64_t *strides, int64_t offset, test_rng *rng) {
  operand o;
  memset(&o, 0, sizeof o);
  recap_tensor view = tensor(NULL, dtype, ndim, shape, strides);
  int64_t extent = 1;
  for (int d = 0; d < ndim; ++d) extent += (shape[d] - 1) * view.strides[d];
  const size_t esize = recap_dtype_size(dtype);
  o.bytes = (size_t)(offset + extent) * esize;
  char *host = malloc(o.bytes);
  CU_ASSERT_PTR_NOT_NULL_FATAL(host);
  for (int64_t i = 0; i < offset + extent; ++i) {
    float v = (float)test_rng_uniform(rng, -3, 3);
    if (test_rng_next(rng) % 5 == 0) v = (float)(int)v;
    recap__store_f32(host, dtype, i, v);
  }
  void *dev = NULL;
  CHECK_OK(cuda->mem_alloc(0, o.bytes, &dev));
  CHECK_OK(cuda->memcpy_async(dev, host, o.bytes, cuda_stream));
  o.host = view;
  o.host.data = host + offset * esize;
  o.dev = view;
  o.dev.data = (char *)dev + offset * esize;
  return o;
}

typedef struct {
  const char *text;
  int num_inputs;
  recap_dtype in[3], out;
  int ndim;
  int64_t out_shape[4];
  /* Per input: shape (right-aligned to out), transposed last two dims, element offset. */
  int in_ndim[3];
  int64_t in_shape[3][4];
  bool transposed[3];
  int64_t offset[3];
} cuda_case;

/* Runs `c` on CUDA (eager, then captured and replayed) and compares with the host. */
static void run_cuda_case(const cuda_case *c) {
  test_rng rng;
  test_rng_init(&rng);
  operand ops[3];
  void *allocs[3];
  recap_tensor hin[3], din[3];
  for (int i = 0; i < c->num_inputs; ++i) {
    int64_t strides[4], shape[4];
    const int nd = c->in_ndim[i];
    for (int d = 0; d < nd; ++d) shape[d] = c->in_shape[i][d];
    const int64_t *sp = NULL;
    if (c->transposed[i] && nd >= 2) {
      /* A [.., m, n] view of storage laid out as [.., n, m]. */
      int64_t s = 1;
      strides[nd - 2] = 1;
      strides[nd - 1] = shape[nd - 2];
      s = shape[nd - 2] * shape[nd - 1];
      for (int d = nd - 3; d >= 0; --d) {
        strides[d] = s;
        s *= shape[d];
      }
      sp = strides;
    }
    ops[i] = make_operand(c->in[i], nd, shape, sp, c->offset[i], &rng);
    allocs[i] = (char *)ops[i].dev.data - c->offset[i] * (int64_t)recap_dtype_size(c->in[i]);
    hin[i] = ops[i].host;
    din[i] = ops[i].dev;
  }
  recap_tensor hout = tensor(NULL, c->out, c->ndim, c->out_shape, NULL);
  const int64_t n = recap__tensor_numel(&hout);
  const size_t out_bytes = (size_t)n * recap_dtype_size(c->out);
  hout.data = malloc(out_bytes);
  char *got = malloc(out_bytes);
  void *dout = NULL;
  CHECK_OK(cuda->mem_alloc(0, out_bytes, &dout));
  recap_tensor dt = hout;
  dt.data = dout;

  recap__expr_program *p = parse_ok(c->text, c->num_inputs);
  CHECK_OK(recap__expr_eval_host(p, hin, c->num_inputs, &hout));
  recap__expr_signature sig;
  recap__expr_signature_of(din, c->num_inputs, &dt, &sig);
  CHECK_OK(recap__expr_prepare_cuda(p, &sig, -1, "test"));

  for (int pass = 0; pass < 2; ++pass) {
    CHECK_OK(cuda->memset_async(dout, 0xFF, out_bytes, cuda_stream)); /* NaN poison */
    if (pass == 0) {
      CHECK_OK(recap__expr_launch_cuda(p, din, c->num_inputs, &dt, "test", cuda_stream->native));
    } else {
      recap__graph *graph = NULL;
      recap__graph_exec *exec = NULL;
      CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_GLOBAL));
      recap_status launched =
          recap__expr_launch_cuda(p, din, c->num_inputs, &dt, "test", cuda_stream->native);
      CHECK_OK(recap__capture_end(cuda_stream, &graph));
      CHECK_OK(launched);
      CHECK_OK(cuda->graph_instantiate(graph, &exec));
      CHECK_OK(cuda->memset_async(dout, 0xFF, out_bytes, cuda_stream));
      CHECK_OK(cuda->graph_launch(exec, cuda_stream));
      CHECK_OK(cuda->graph_launch(exec, cuda_stream));
      cuda->graph_exec_destroy(exec);
      cuda->graph_destroy(graph);
    }
    CHECK_OK(cuda->memcpy_async(got, dout, out_bytes, cuda_stream));
    CHECK_OK(recap_stream_synchronize(cuda_stream));
    int bad = 0;
    for (int64_t e = 0; e < n; ++e) {
      double want = recap__load_f32(hout.data, c->out, e);
      double have = recap__load_f32(got, c->out, e);
      /* Transcendentals differ by a few f32 ulps between CUDA and the host; a comparison
       * at a point where they differ flips, which is why comparison inputs repeat exactly. */
      if (!close_to(have, want, rtol_of(c->out), 1e-5) && bad++ < 4)
        fprintf(stderr, "\n  %s (%s, out %s): element %lld: cuda %.9g, host %.9g\n", c->text,
                pass ? "graph" : "eager", recap_dtype_name(c->out), (long long)e, have, want);
    }
    CU_ASSERT_EQUAL(bad, 0);
  }
  recap__expr_program_destroy(p);
  cuda->mem_free(0, dout);
  for (int i = 0; i < c->num_inputs; ++i) {
    cuda->mem_free(0, allocs[i]);
    free((char *)ops[i].host.data - c->offset[i] * (int64_t)recap_dtype_size(c->in[i]));
  }
  free(hout.data);
  free(got);
}

static cuda_case same_shape_case(const char *text, int num_inputs, recap_dtype dtype, int64_t n) {
  cuda_case c;
  memset(&c, 0, sizeof c);
  c.text = text;
  c.num_inputs = num_inputs;
  c.out = dtype;
  c.ndim = 2;
  c.out_shape[0] = 3;
  c.out_shape[1] = n;
  for (int i = 0; i < num_inputs; ++i) {
    c.in[i] = dtype;
    c.in_ndim[i] = 2;
    c.in_shape[i][0] = 3;
    c.in_shape[i][1] = n;
  }
  return c;
}

static const recap_dtype kFloatTypes[] = {RECAP_DTYPE_F32, RECAP_DTYPE_F16, RECAP_DTYPE_BF16};

static void test_cuda_every_function_matches_host_dense_and_tail(void) {
  for (int t = 0; t < 3; ++t)
    for (int f = 0; f < NUM_FUNCTIONS; ++f) {
      /* 3 x 1001: not a multiple of the vector width, so the tail runs too. */
      cuda_case c = same_shape_case(kFunctions[f].text, 2, kFloatTypes[t], 1001);
      run_cuda_case(&c);
    }
}

static void test_cuda_strided_broadcast_and_offset_views_match_host(void) {
  for (int t = 0; t < 3; ++t) {
    cuda_case c;
    memset(&c, 0, sizeof c);
    c.text = "select(a > b, a * sigmoid(b), gelu(c) - b) + 1.0";
    c.num_inputs = 3;
    c.in[0] = c.in[1] = c.in[2] = c.out = kFloatTypes[t];
    c.ndim = 4;
    const int64_t shape[4] = {2, 3, 17, 33};
    memcpy(c.out_shape, shape, sizeof shape);
    c.in_ndim[0] = 4;
    memcpy(c.in_shape[0], shape, sizeof shape);
    c.transposed[0] = true; /* a strided view */
    c.in_ndim[1] = 1;       /* b broadcasts along everything but the last dim */
    c.in_shape[1][0] = 33;
    c.in_ndim[2] = 3; /* c: [3, 17, 1] */
    c.in_shape[2][0] = 3;
    c.in_shape[2][1] = 17;
    c.in_shape[2][2] = 1;
    c.offset[2] = 1; /* misaligned base pointer */
    run_cuda_case(&c);
  }
  /* Dense shapes but a misaligned pointer: the strided kernel, same results. */
  cuda_case c = same_shape_case("a * b - tanh(a)", 2, RECAP_DTYPE_F16, 515);
  c.offset[1] = 1;
  run_cuda_case(&c);
}

static void test_cuda_mixed_dtypes_match_host(void) {
  cuda_case c = same_shape_case("a * sigmoid(b) + cast(c, bf16) / 3", 3, RECAP_DTYPE_F32, 4099);
  c.in[1] = RECAP_DTYPE_F16;
  c.in[2] = RECAP_DTYPE_BF16;
  static const recap_dtype outs[] = {RECAP_DTYPE_F32, RECAP_DTYPE_F16, RECAP_DTYPE_BF16};
  for (int o = 0; o < 3; ++o) {
    c.out = outs[o];
    run_cuda_case(&c);
  }
}

/* A kernel not compiled yet cannot be compiled inside a capture: the launch fails, naming the
 * op, and the capture ends cleanly. */
static void test_cuda_compile_during_capture_is_refused(void) {
  recap__expr_program *p = parse_ok("a * 3 + 0.0625", 1);
  float *d = NULL;
  CHECK_OK(cuda->mem_alloc(0, 64 * sizeof(float), (void **)&d));
  recap_tensor t = tensor(d, RECAP_DTYPE_F32, 1, (const int64_t[]){64}, NULL);
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_GLOBAL));
  recap_status st = recap__expr_launch_cuda(p, &t, 1, &t, "my_expr_op", cuda_stream->native);
  CU_ASSERT_EQUAL(st, RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CHECK_ERROR_MENTIONS("my_expr_op");
  recap_status end = recap__capture_end(cuda_stream, &graph);
  if (end == RECAP_OK) cuda->graph_destroy(graph);
  /* Outside the capture the launch compiles on demand. */
  CHECK_OK(recap__expr_launch_cuda(p, &t, 1, &t, "my_expr_op", cuda_stream->native));
  CHECK_OK(recap_stream_synchronize(cuda_stream));
  cuda->mem_free(0, d);
  recap__expr_program_destroy(p);
}

int main(void) {
  CU_pSuite gpu = test_add_cuda_suite("expr/cuda", cuda_suite_init, cuda_suite_cleanup);
  CU_ADD_TEST(gpu, test_cuda_every_function_matches_host_dense_and_tail);
  CU_ADD_TEST(gpu, test_cuda_strided_broadcast_and_offset_views_match_host);
  CU_ADD_TEST(gpu, test_cuda_mixed_dtypes_match_host);
  CU_ADD_TEST(gpu, test_cuda_compile_during_capture_is_refused);
  return test_run_all();
}
