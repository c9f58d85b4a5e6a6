/*
 * bench_hopper_gemm.c: times our Hopper GEMM (kernels/gemm/hopper.cu), every tile
 * configuration, against what recap runs without it (cuBLASLt, plus the epilogue pass for an
 * activation it cannot fuse), on the transformer block's four linears (fp16, B8 S128 D1024
 * F4096) and on large squares. GPU machine, CUDA builds only; see
 * docs/perf/transformer_block.md.
 *
 * Each number is the median over ITERS launches of the interval between consecutive events on
 * one stream (operands stay in L2 between launches, as in the block's replays). Exits non-zero
 * on a CUDA or recap failure, or when a configuration's output differs from cuBLASLt's by more
 * than the tuner's f16 tolerance.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/recap.h"
#include "kernels/gemm/gemm.h"
#include "kernels/op.h"
#include "runtime/half.h"
#include "bench/bench_common.h"

enum { ITERS = 50 };

typedef struct {
  const char *name;
  int64_t m, n, k;
  recap__activation act;
  int residual;
} shape;

static const shape shapes[] = {
    {"qkv", 1024, 3072, 1024, RECAP_ACT_NONE, 0},
    {"out_proj+res", 1024, 1024, 1024, RECAP_ACT_NONE, 1},
    {"fc1 gelu", 1024, 4096, 1024, RECAP_ACT_GELU, 0},
    {"fc1 none", 1024, 4096, 1024, RECAP_ACT_NONE, 0},
    {"fc2+res", 1024, 1024, 4096, RECAP_ACT_NONE, 1},
    {"4096^3", 4096, 4096, 4096, RECAP_ACT_NONE, 0},
    {"8192^3", 8192, 8192, 8192, RECAP_ACT_NONE, 0},
};

/* A device buffer of count random f16 values (bench_common.h). */
static void *random_f16(size_t count, float scale, unsigned *seed) {
  void *dev = NULL;
  CUDA_OK(cudaMalloc(&dev, count * 2));
  fill_random_16bit(dev, false, count, scale, seed);
  return dev;
}

static recap_tensor tensor(void *data, int ndim, int64_t rows, int64_t cols) {
  recap_tensor t = {.data = data, .dtype = RECAP_DTYPE_F16, .ndim = ndim};
  if (ndim == 1) {
    t.shape[0] = cols;
    t.strides[0] = 1;
  } else {
    t.shape[0] = rows, t.shape[1] = cols;
    t.strides[0] = cols, t.strides[1] = 1;
  }
  return t;
}

/* -1: cuBLASLt (recap's routing with RECAP_GEMM_HOPPER=0); else a Hopper configuration. */
static float time_us(recap__op_call *call, const recap__gemm_plan *plan, int config,
                     recap_stream *s) {
  cudaStream_t native = recap_stream_native(s);
  cudaEvent_t ev[ITERS + 1];
  for (int i = 0; i <= ITERS; ++i) CUDA_OK(cudaEventCreate(&ev[i]));
  for (int i = 0; i < 3 + ITERS; ++i) {
    if (i >= 3) CUDA_OK(cudaEventRecord(ev[i - 3], native));
    if (config < 0)
      RECAP_OK_OR_DIE(recap__op_launch(call, s));
    else
      RECAP_OK_OR_DIE(recap__cuda_gemm_hopper(plan, 0, native, config));
  }
  CUDA_OK(cudaEventRecord(ev[ITERS], native));
  CUDA_OK(cudaEventSynchronize(ev[ITERS]));
  float t[ITERS];
  for (int i = 0; i < ITERS; ++i) CUDA_OK(cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]));
  for (int i = 0; i <= ITERS; ++i) CUDA_OK(cudaEventDestroy(ev[i]));
  qsort(t, ITERS, sizeof t[0], cmp_float);
  return 1000.0f * t[ITERS / 2];
}

static uint16_t *fetch(const void *dev, size_t count) {
  uint16_t *host = malloc(count * 2);
  if (!host) exit(1);
  CUDA_OK(cudaMemcpy(host, dev, count * 2, cudaMemcpyDeviceToHost));
  return host;
}

/* Elements outside rtol 4e-3 + 2e-3 * max|ref| of the reference (the tuner's f16 check). */
static int64_t mismatches(const uint16_t *got, const uint16_t *ref, size_t count) {
  float top = 0;
  for (size_t i = 0; i < count; ++i) top = fmaxf(top, fabsf(recap__f16_to_f32(ref[i])));
  int64_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    const float r = recap__f16_to_f32(ref[i]), g = recap__f16_to_f32(got[i]);
    if (!(fabsf(g - r) <= 4e-3f * fabsf(r) + 2e-3f * top)) ++bad;
  }
  return bad;
}

int main(void) {
  recap_stream *s = NULL;
  RECAP_OK_OR_DIE(
      recap_stream_create((recap_device){RECAP_BACKEND_CUDA, 0}, 0, RECAP_STREAM_NON_BLOCKING, &s));
  const int configs = recap__cuda_gemm_hopper_configs();
  printf("%-14s %10s", "shape", "cuBLASLt");
  for (int c = 0; c < configs; ++c) printf("   hopper#%d", c);
  printf("   default  best/cuBLASLt\n");
  int failed = 0;
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; ++si) {
    const shape *sh = &shapes[si];
    unsigned seed = 7u + (unsigned)si;
    void *x = random_f16((size_t)(sh->m * sh->k), 1.0f, &seed);
    void *w = random_f16((size_t)(sh->n * sh->k), 0.02f, &seed);
    void *b = random_f16((size_t)sh->n, 0.1f, &seed);
    void *r = sh->residual ? random_f16((size_t)(sh->m * sh->n), 1.0f, &seed) : NULL;
    void *out = NULL;
    CUDA_OK(cudaMalloc(&out, (size_t)(sh->m * sh->n) * 2));
    const recap__op_def *linear = recap__op_find("linear");
    recap__op_call call;
    memset(&call, 0, sizeof call);
    call.def = linear;
    call.num_inputs = sh->residual ? 4 : 3;
    call.num_outputs = 1;
    recap__op_attrs_set_defaults(linear, &call.attrs);
    call.attrs.act = sh->act;
    call.inputs[0] = tensor(x, 2, sh->m, sh->k);
    call.inputs[1] = tensor(w, 2, sh->n, sh->k);
    call.inputs[2] = tensor(b, 1, 0, sh->n);
    if (r) call.inputs[3] = tensor(r, 2, sh->m, sh->n);
    RECAP_OK_OR_DIE(recap__op_infer(&call));
    call.outputs[0].data = out;
    recap__gemm_plan plan;
    RECAP_OK_OR_DIE(recap__gemm_plan_make(&call, &plan));
    const size_t count = (size_t)(sh->m * sh->n);

    setenv("RECAP_GEMM_HOPPER", "0", 1);
    recap__gemm_env_reload();
    const float lt = time_us(&call, &plan, -1, s);
    uint16_t *ref = fetch(out, count);
    unsetenv("RECAP_GEMM_HOPPER");
    recap__gemm_env_reload();
    const double gflop = 2.0 * (double)sh->m * (double)sh->n * (double)sh->k * 1e-9;
    printf("%-14s %6.2f us", sh->name, lt);
    float best = 1e30f;
    for (int c = 0; c < configs; ++c) {
      CUDA_OK(cudaMemset(out, 0xff, count * 2));
      const float us = time_us(&call, &plan, c, s);
      uint16_t *got = fetch(out, count);
      const int64_t bad = mismatches(got, ref, count);
      free(got);
      if (bad) {
        fprintf(stderr, "%s: hopper config %d: %lld elements differ from cuBLASLt\n", sh->name, c,
                (long long)bad);
        failed = 1;
      }
      best = fminf(best, us);
      printf(" %8.2f us", us);
    }
    printf("   #%d      %.2fx   (cuBLASLt %.0f TFLOP/s, best hopper %.0f)\n",
           recap__cuda_gemm_hopper_default(&plan, 0), lt / best, gflop / lt * 1e3,
           gflop / best * 1e3);
    free(ref);
    cudaFree(x), cudaFree(w), cudaFree(b), cudaFree(r), cudaFree(out);
  }
  RECAP_OK_OR_DIE(recap__gemm_release_stream(recap_stream_native(s)));
  RECAP_OK_OR_DIE(recap_stream_destroy(s));
  return failed;
}
