/*
 * bench_skinny.c: times the decode MLP that the skinny GEMM kernel is for (8 layers of
 * linear [m, 4096] x [4096, 4096]^T + bias, erf gelu, bf16) on the GPU machine, eagerly and as
 * a captured graph, with the skinny kernel (programmatic dependent launch on and off) and
 * with cuBLASLt (RECAP_GEMM_SKINNY=0), for m = 1, 8, 16; and the device-to-device copy
 * bandwidth the floor is measured against, in the same run. Variants named "regN" / "bulkPwN"
 * launch one configuration of the kernel directly (recap__cuda_gemm_skinny_config: the
 * register kernel, or bulk-copy shape P, with N warps); the others go through
 * recap__op_launch and the routing. See docs/perf/skinny_gemm.md.
 *
 * The 8 layers' weights (256 MiB) exceed the 50 MB L2, so replays stream them from memory.
 * Each time is the median of ITERS intervals between events recorded around back-to-back
 * submissions. Prints one table; exits non-zero on any failure (or when a variant's output
 * differs from cuBLASLt's by more than bf16 rounding allows).
 *
 *   bench_skinny                  # all variants
 *   bench_skinny --quick --m 8 --variant bulk3w8   # one case (for a profiler)
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "include/recap.h"
#include "kernels/gemm/gemm.h"
#include "kernels/op.h"
#include "runtime/half.h"

enum { LAYERS = 8, H = 4096, MAX_ITERS = 200 };

static int iters = MAX_ITERS;

/* Median of the intervals between consecutive events, in microseconds. */
static double median_us(cudaEvent_t *ev, int n) {
  float t[MAX_ITERS];
  for (int i = 0; i < n; ++i) CUDA_OK(cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]));
  qsort(t, (size_t)n, sizeof t[0], cmp_float);
  return 1000.0 * (n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]));
}

typedef struct {
  void *w[LAYERS], *b[LAYERS], *act[LAYERS + 1];
  recap__op_call call[LAYERS];
  recap__gemm_plan plan[LAYERS]; /* for direct launches of one kernel configuration */
} mlp;

static recap_tensor tensor2(void *data, int64_t rows, int64_t cols) {
  return (recap_tensor){.data = data,
                        .dtype = RECAP_DTYPE_BF16,
                        .ndim = 2,
                        .shape = {rows, cols},
                        .strides = {cols, 1}};
}

static void mlp_make(mlp *net, int m) {
  unsigned seed = 12345u;
  for (int i = 0; i <= LAYERS; ++i) {
    CUDA_OK(cudaMalloc(&net->act[i], (size_t)16 * H * 2));
    if (i == 0) fill_random_16bit(net->act[i], true, (size_t)16 * H, 1.0f, &seed);
  }
  for (int i = 0; i < LAYERS; ++i) {
    CUDA_OK(cudaMalloc(&net->w[i], (size_t)H * H * 2));
    CUDA_OK(cudaMalloc(&net->b[i], (size_t)H * 2));
    /* Weights of scale 1/64 keep the activations near 1 through the layers. */
    fill_random_16bit(net->w[i], true, (size_t)H * H, 1.0f / 64, &seed);
    fill_random_16bit(net->b[i], true, H, 0.1f, &seed);
  }
  const recap__op_def *linear = recap__op_find("linear");
  for (int i = 0; i < LAYERS; ++i) {
    recap__op_call *c = &net->call[i];
    memset(c, 0, sizeof *c);
    c->def = linear;
    c->num_inputs = 3;
    c->num_outputs = 1;
    recap__op_attrs_set_defaults(linear, &c->attrs);
    c->attrs.act = RECAP_ACT_GELU;
    c->inputs[0] = tensor2(net->act[i], m, H);
    c->inputs[1] = tensor2(net->w[i], H, H);
    c->inputs[2] = (recap_tensor){
        .data = net->b[i], .dtype = RECAP_DTYPE_BF16, .ndim = 1, .shape = {H}, .strides = {1}};
    RECAP_OK_OR_DIE(recap__op_infer(c));
    c->outputs[0].data = net->act[i + 1];
    RECAP_OK_OR_DIE(recap__gemm_plan_make(c, &net->plan[i]));
  }
}

static void mlp_free(mlp *net) {
  for (int i = 0; i <= LAYERS; ++i) cudaFree(net->act[i]);
  for (int i = 0; i < LAYERS; ++i) {
    cudaFree(net->w[i]);
    cudaFree(net->b[i]);
  }
}

typedef struct {
  const char *name, *skinny, *pdl, *pipe, *warps; /* environment values; NULL: unset */
  int cfg_warps, cfg_pipe; /* cfg_warps > 0: launch this configuration directly */
} variant;

static void mlp_launch(mlp *net, recap_stream *s, const variant *v) {
  for (int i = 0; i < LAYERS; ++i) {
    if (v->cfg_warps > 0)
      RECAP_OK_OR_DIE(recap__cuda_gemm_skinny_config(&net->plan[i], 0, recap_stream_native(s),
                                                     v->cfg_warps, v->cfg_pipe));
    else
      RECAP_OK_OR_DIE(recap__op_launch(&net->call[i], s));
  }
}

static void set_env(const char *name, const char *value) {
  if (value)
    setenv(name, value, 1);
  else
    unsetenv(name);
}

typedef struct {
  double eager_us, graph_us;
  float max_diff; /* largest |out - cuBLASLt's out| of the last layer, in units of max |out| */
} result;

static result run_variant(mlp *net, int m, const variant *v, recap_stream *s,
                          const uint16_t *reference, uint16_t *out_host) {
  set_env("RECAP_GEMM_SKINNY", v->skinny);
  set_env("RECAP_GEMM_SKINNY_PDL", v->pdl);
  set_env("RECAP_GEMM_SKINNY_PIPE", v->pipe);
  set_env("RECAP_GEMM_SKINNY_WARPS", v->warps);
  recap__gemm_env_reload(); /* the GEMM settings are read once per process */
  cudaStream_t cs = (cudaStream_t)recap_stream_native(s);
  cudaEvent_t ev[MAX_ITERS + 1];
  for (int i = 0; i <= iters; ++i) CUDA_OK(cudaEventCreate(&ev[i]));
  result r = {0};

  for (int i = 0; i < LAYERS; ++i) RECAP_OK_OR_DIE(recap__gemm_prepare(&net->call[i], s));
  for (int w = 0; w < 5; ++w) mlp_launch(net, s, v);
  CUDA_OK(cudaStreamSynchronize(cs));
  CUDA_OK(cudaMemcpy(out_host, net->act[LAYERS], (size_t)m * H * 2, cudaMemcpyDeviceToHost));
  if (reference) {
    float peak = 0, diff = 0;
    for (int i = 0; i < m * H; ++i) {
      const float a = recap__bf16_to_f32(out_host[i]), b = recap__bf16_to_f32(reference[i]);
      if (fabsf(b) > peak) peak = fabsf(b);
      const float d = fabsf(a - b);
      if (!(d <= diff)) diff = d; /* NaN sticks */
    }
    r.max_diff = peak > 0 ? diff / peak : diff;
  }

  CUDA_OK(cudaEventRecord(ev[0], cs));
  for (int i = 0; i < iters; ++i) {
    mlp_launch(net, s, v);
    CUDA_OK(cudaEventRecord(ev[i + 1], cs));
  }
  CUDA_OK(cudaStreamSynchronize(cs));
  r.eager_us = median_us(ev, iters);

  recap_graph *g = NULL;
  RECAP_OK_OR_DIE(recap_graph_create(&g));
  RECAP_OK_OR_DIE(recap_graph_capture_begin(g, s, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  mlp_launch(net, s, v);
  RECAP_OK_OR_DIE(recap_graph_capture_end(g));
  for (int w = 0; w < 20; ++w) RECAP_OK_OR_DIE(recap_graph_replay(g, s));
  CUDA_OK(cudaEventRecord(ev[0], cs));
  for (int i = 0; i < iters; ++i) {
    RECAP_OK_OR_DIE(recap_graph_replay(g, s));
    CUDA_OK(cudaEventRecord(ev[i + 1], cs));
  }
  CUDA_OK(cudaStreamSynchronize(cs));
  r.graph_us = median_us(ev, iters);
  /* The replayed result must equal the eager one (the same kernels, deterministic). */
  uint16_t *replayed = malloc((size_t)m * H * 2);
  CUDA_OK(cudaMemcpy(replayed, net->act[LAYERS], (size_t)m * H * 2, cudaMemcpyDeviceToHost));
  if (memcmp(replayed, out_host, (size_t)m * H * 2) != 0) {
    fprintf(stderr, "%s m=%d: graph replay differs from the eager result\n", v->name, m);
    r.max_diff = INFINITY;
  }
  free(replayed);
  RECAP_OK_OR_DIE(recap_graph_destroy(g));
  for (int i = 0; i <= iters; ++i) cudaEventDestroy(ev[i]);
  return r;
}

/* Every direct configuration on odd shapes (n = 1000: partial blocks of 16 and 32 rows;
 * k = 520: a partial last stage and step), m = 1, 5, 8, 13, 16, bias and erf gelu, against
 * cuBLASLt element by element (bf16 rounding of both: 1.6% of the larger value plus 0.8% of
 * the peak). Returns the number of failing (configuration, m) pairs. */
static int check_configs(recap_stream *s, const int (*cfg)[2], int ncfg) {
  enum { N = 1000, K = 520 };
  static const int ms[] = {1, 5, 8, 13, 16};
  unsigned seed = 777u;
  void *x, *w, *b, *out;
  CUDA_OK(cudaMalloc(&x, (size_t)16 * K * 2));
  CUDA_OK(cudaMalloc(&w, (size_t)N * K * 2));
  CUDA_OK(cudaMalloc(&b, (size_t)N * 2));
  CUDA_OK(cudaMalloc(&out, (size_t)16 * N * 2));
  fill_random_16bit(x, true, (size_t)16 * K, 1.0f, &seed);
  fill_random_16bit(w, true, (size_t)N * K, 1.0f / 16, &seed);
  fill_random_16bit(b, true, N, 0.5f, &seed);
  uint16_t *want = malloc((size_t)16 * N * 2), *got = malloc((size_t)16 * N * 2);
  if (!want || !got) exit(1);
  const recap__op_def *linear = recap__op_find("linear");
  int failed = 0;
  for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; ++mi) {
    const int m = ms[mi];
    recap__op_call c;
    memset(&c, 0, sizeof c);
    c.def = linear;
    c.num_inputs = 3;
    c.num_outputs = 1;
    recap__op_attrs_set_defaults(linear, &c.attrs);
    c.attrs.act = RECAP_ACT_GELU;
    c.inputs[0] = tensor2(x, m, K);
    c.inputs[1] = tensor2(w, N, K);
    c.inputs[2] = (recap_tensor){
        .data = b, .dtype = RECAP_DTYPE_BF16, .ndim = 1, .shape = {N}, .strides = {1}};
    RECAP_OK_OR_DIE(recap__op_infer(&c));
    c.outputs[0].data = out;
    recap__gemm_plan plan;
    RECAP_OK_OR_DIE(recap__gemm_plan_make(&c, &plan));
    set_env("RECAP_GEMM_SKINNY", "0");
    recap__gemm_env_reload();
    RECAP_OK_OR_DIE(recap__gemm_prepare(&c, s));
    RECAP_OK_OR_DIE(recap__op_launch(&c, s));
    CUDA_OK(cudaStreamSynchronize((cudaStream_t)recap_stream_native(s)));
    CUDA_OK(cudaMemcpy(want, out, (size_t)m * N * 2, cudaMemcpyDeviceToHost));
    set_env("RECAP_GEMM_SKINNY", NULL);
    recap__gemm_env_reload();
    double peak = 0;
    for (int i = 0; i < m * N; ++i) peak = fmax(peak, fabs((double)recap__bf16_to_f32(want[i])));
    for (int ci = 0; ci < ncfg; ++ci) {
      CUDA_OK(cudaMemset(out, 0xff, (size_t)16 * N * 2)); /* NaN: unwritten outputs show */
      RECAP_OK_OR_DIE(
          recap__cuda_gemm_skinny_config(&plan, 0, recap_stream_native(s), cfg[ci][0], cfg[ci][1]));
      CUDA_OK(cudaStreamSynchronize((cudaStream_t)recap_stream_native(s)));
      CUDA_OK(cudaMemcpy(got, out, (size_t)m * N * 2, cudaMemcpyDeviceToHost));
      int bad = 0;
      for (int i = 0; i < m * N; ++i) {
        const double a = recap__bf16_to_f32(got[i]), r = recap__bf16_to_f32(want[i]);
        if (!(fabs(a - r) <= 1.6e-2 * fmax(fabs(a), fabs(r)) + 8e-3 * peak)) {
          if (bad < 3)
            fprintf(stderr, "check warps %d pipe %d m %d: out[%d][%d] = %g, cuBLASLt %g\n",
                    cfg[ci][0], cfg[ci][1], m, i / N, i % N, a, r);
          ++bad;
        }
      }
      if (bad) ++failed;
    }
  }
  printf("checked %d configurations x %zu values of m on %d x %d: %d failed\n", ncfg,
         sizeof ms / sizeof ms[0], N, K, failed);
  free(want);
  free(got);
  cudaFree(x);
  cudaFree(w);
  cudaFree(b);
  cudaFree(out);
  return failed;
}

/* The number of pipe codes recap__cuda_gemm_skinny_config accepts at every m (0, 1, then the
 * bulk shapes): the first one it refuses on a plan of 16 rows of x that fits (the four-stage
 * shape, which takes m <= 8, runs through the default variant). */
static int pipe_count(recap_stream *s) {
  void *buf;
  CUDA_OK(cudaMalloc(&buf, (size_t)64 * 64 * 2 * 3));
  recap__op_call c;
  memset(&c, 0, sizeof c);
  c.def = recap__op_find("linear");
  c.num_inputs = 2;
  c.num_outputs = 1;
  recap__op_attrs_set_defaults(c.def, &c.attrs);
  c.inputs[0] = tensor2(buf, 16, 64);
  c.inputs[1] = tensor2((char *)buf + 64 * 64 * 2, 64, 64);
  RECAP_OK_OR_DIE(recap__op_infer(&c));
  c.outputs[0].data = (char *)buf + 2 * 64 * 64 * 2;
  recap__gemm_plan plan;
  RECAP_OK_OR_DIE(recap__gemm_plan_make(&c, &plan));
  int p = 0;
  while (p < 64 &&
         recap__cuda_gemm_skinny_config(&plan, 0, recap_stream_native(s), 8, p) == RECAP_OK)
    ++p;
  CUDA_OK(cudaStreamSynchronize((cudaStream_t)recap_stream_native(s)));
  cudaFree(buf);
  return p;
}

/* Device-to-device copy bandwidth (bytes read + written per second) over 256 MiB. */
static double copy_gbps(recap_stream *s) {
  const size_t bytes = (size_t)256 << 20;
  void *a, *b;
  CUDA_OK(cudaMalloc(&a, bytes));
  CUDA_OK(cudaMalloc(&b, bytes));
  CUDA_OK(cudaMemset(a, 1, bytes));
  cudaStream_t cs = (cudaStream_t)recap_stream_native(s);
  cudaEvent_t ev[MAX_ITERS + 1];
  const int n = iters < 50 ? iters : 50;
  for (int i = 0; i <= n; ++i) CUDA_OK(cudaEventCreate(&ev[i]));
  for (int w = 0; w < 3; ++w) CUDA_OK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, cs));
  CUDA_OK(cudaEventRecord(ev[0], cs));
  for (int i = 0; i < n; ++i) {
    CUDA_OK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, cs));
    CUDA_OK(cudaEventRecord(ev[i + 1], cs));
  }
  CUDA_OK(cudaStreamSynchronize(cs));
  const double us = median_us(ev, n);
  for (int i = 0; i <= n; ++i) cudaEventDestroy(ev[i]);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * (double)bytes / (us * 1e-6) / 1e9;
}

int main(int argc, char **argv) {
  int only_m = 0;
  const char *only_variant = NULL; /* with it, cuBLASLt still runs first as the reference */
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--quick") == 0) {
      iters = 21;
    } else if (strcmp(argv[i], "--m") == 0 && i + 1 < argc) {
      only_m = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--variant") == 0 && i + 1 < argc) {
      only_variant = argv[++i];
    } else {
      fprintf(stderr, "usage: bench_skinny [--quick] [--m 1|8|16] [--variant NAME]\n");
      return 2;
    }
  }
  recap_stream *s = NULL;
  RECAP_OK_OR_DIE(
      recap_stream_create((recap_device){RECAP_BACKEND_CUDA, 0}, 0, RECAP_STREAM_NON_BLOCKING, &s));
  struct cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  const double copy = copy_gbps(s);
  const double weight_bytes = (double)LAYERS * H * H * 2;
  const double floor_us = weight_bytes / (copy * 1e9) * 1e6;
  printf("device %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount,
         prop.l2CacheSize >> 20);
  printf("copy bandwidth %.0f GB/s; weights %.1f MiB per 8 layers; floor %.1f us\n", copy,
         weight_bytes / (1 << 20), floor_us);

  /* Direct configurations: pipe 1 is the register kernel (double-buffered), 2.. the
   * bulk-copy shapes of gemm/skinny.cu (kBulkShapes: W rows per block x columns per stage x
   * stages, columns of each W row prefetched into L2 under PDL: 2 = 16 x 512 x 3, 3 = 32 x
   * 1024 x 2, both 768). Each timed twice. */
  const variant variants[] = {
      {"cublaslt", "0", NULL, NULL, NULL, 0, 0},
      {"default", NULL, NULL, NULL, NULL, 0, 0}, /* recap__op_launch, routing's choice */
      {"reg8", NULL, NULL, NULL, NULL, 8, 1},    /* the v3 kernel (pipe+pdl) */
      {"bulk2w8", NULL, NULL, NULL, NULL, 8, 2},
      {"bulk3w8", NULL, NULL, NULL, NULL, 8, 3},
      {"bulk3w16", NULL, NULL, NULL, NULL, 16, 3},
      {"bulk3w8 nopdl", NULL, "0", NULL, NULL, 8, 3},
      {"default #2", NULL, NULL, NULL, NULL, 0, 0},
      {"reg8 #2", NULL, NULL, NULL, NULL, 8, 1},
      {"bulk2w8 #2", NULL, NULL, NULL, NULL, 8, 2},
      {"bulk3w8 #2", NULL, NULL, NULL, NULL, 8, 3},
      {"bulk3w16 #2", NULL, NULL, NULL, NULL, 16, 3},
      {"bulk3w8 nopdl #2", NULL, "0", NULL, NULL, 8, 3},
  };
  const int nvar = (int)(sizeof variants / sizeof variants[0]);
  const int ms[3] = {1, 8, 16};
  int failed = 0;
  {
    int cfg[64][2], ncfg = 0;
    const int pipes = pipe_count(s);
    for (int p = 0; p < pipes && ncfg + 5 <= 64; ++p)
      for (int w = 1; w <= 16; w *= 2) cfg[ncfg][0] = w, cfg[ncfg][1] = p, ++ncfg;
    if (check_configs(s, cfg, ncfg)) failed = 1;
  }
  printf("\n%-18s %3s %10s %10s %9s %7s %10s\n", "variant", "m", "eager_us", "graph_us", "GB/s",
         "%copy", "diff");
  for (int mi = 0; mi < 3; ++mi) {
    const int m = ms[mi];
    if (only_m && m != only_m) continue;
    mlp net;
    mlp_make(&net, m);
    uint16_t *reference = malloc((size_t)m * H * 2), *out = malloc((size_t)m * H * 2);
    for (int v = 0; v < nvar; ++v) {
      if (v > 0 && only_variant && strcmp(only_variant, variants[v].name) != 0) continue;
      const result r = run_variant(&net, m, &variants[v], s, v == 0 ? NULL : reference,
                                   v == 0 ? reference : out);
      const double gbps = weight_bytes / (r.graph_us * 1e-6) / 1e9;
      printf("%-18s %3d %10.1f %10.1f %9.0f %6.1f%% %10.2g\n", variants[v].name, m, r.eager_us,
             r.graph_us, gbps, 100.0 * gbps / copy, (double)r.max_diff);
      /* bf16 outputs: a few units in the last place of the largest value. */
      if (!(r.max_diff <= 0.02f)) {
        fprintf(stderr, "%s m=%d: output differs from cuBLASLt's by %g of its peak\n",
                variants[v].name, m, (double)r.max_diff);
        failed = 1;
      }
    }
    free(reference);
    free(out);
    mlp_free(&net);
  }
  RECAP_OK_OR_DIE(recap_stream_destroy(s));
  return failed;
}
