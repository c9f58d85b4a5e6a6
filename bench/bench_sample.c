/*
 * bench_sample.c: times recap's sample and argmax ops at Llama 3's vocabulary (128256 logits a
 * row) on the GPU machine, each as a captured graph of its one launch, for the comparison with
 * PyTorch's sort-based sampler that bench/peer/peer_torch_sample.py makes on the same logits
 * (bench/peer/sample_bench.sh runs both and prints the ratios; issue "Batched decode for real
 * serving": sample with every filter on, batch 64, must take at most half PyTorch's time).
 *
 *   bench_sample [--iters N] [--logits FILE] [--json FILE]
 *
 * Cases, each on f32 and bf16 logits: sample with temperature 0.8, top-k 50, top-p 0.9 and
 * min-p 0.05 ("all"), with temperature 0.8 and top-p 0.9 ("top_p": no top-k, so top-p selects
 * over the whole row), with temperature 1 alone ("temperature"), greedy sample (temperature 0)
 * and argmax, at batch 64 (and 1 for the greedy two). Each time is the median of the intervals
 * between events recorded around back-to-back replays. The logits look like a language
 * model's: per row a bell of width ~1.5 and a few dozen tokens lifted by 4 to 12, from one
 * seeded generator; --logits writes them (f32, [64, 128256], row-major) for the peer to read.
 * --json writes {"environment" (as the CLI's JSON results), "device", "cases": [{"name", "dtype",
 * "batch", "median_us"}]}. Exits non-zero on any failure, or when a replay's tokens differ from
 * the eager run's or fall outside the row.
 */
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "cli/environment.h"
#include "include/recap.h"
#include "runtime/half.h"

enum { BATCH = 64, VOCAB = 128256, WIDTH = RECAP_SEQ_BLOCKS, MAX_ITERS = 2000 };

static int iters = 500;

/* Median of the intervals between consecutive events, in microseconds. */
static double median_us(cudaEvent_t *ev, int n) {
  static float t[MAX_ITERS];
  for (int i = 0; i < n; ++i) CUDA_OK(cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]));
  qsort(t, (size_t)n, sizeof t[0], cmp_float);
  return 1000.0 * (n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]));
}

/* Uniform in [-1, 1) from a linear congruential generator. */
static float next_uniform(unsigned *seed) {
  *seed = *seed * 1664525u + 1013904223u;
  return (float)(*seed >> 8) / 16777216.0f * 2.0f - 1.0f;
}

static void make_logits(float *x) {
  unsigned seed = 20240601u;
  for (int r = 0; r < BATCH; ++r) {
    float *row = x + (size_t)r * VOCAB;
    for (int i = 0; i < VOCAB; ++i)
      row[i] = 1.5f * (next_uniform(&seed) + next_uniform(&seed) + next_uniform(&seed));
    const int lifted = 20 + (int)((next_uniform(&seed) + 1) * 10);
    for (int k = 0; k < lifted; ++k) {
      const int i = (int)((next_uniform(&seed) + 1) * 0.5f * (VOCAB - 1));
      row[i] = 8.0f + 4.0f * next_uniform(&seed);
    }
  }
}

typedef struct {
  const char *name;
  const char *op;
  float temperature, top_p, min_p;
  int top_k, batch;
} bench_case;

static int32_t bits_of(float f) {
  int32_t b;
  memcpy(&b, &f, sizeof b);
  return b;
}

static void write_seqs(int32_t *seqs, const bench_case *c) {
  memset(seqs, 0, (size_t)BATCH * WIDTH * sizeof *seqs);
  for (int r = 0; r < BATCH; ++r) {
    int32_t *row = seqs + (size_t)r * WIDTH;
    row[RECAP_SEQ_LEN] = 1;
    row[RECAP_SEQ_Q_LEN] = 1;
    row[RECAP_SEQ_OUT_INDEX] = 7;
    row[RECAP_SEQ_SEED_LO] = 1000 + r;
    row[RECAP_SEQ_TOP_K] = c->top_k;
    row[RECAP_SEQ_TEMPERATURE] = bits_of(c->temperature);
    row[RECAP_SEQ_TOP_P] = bits_of(c->top_p);
    row[RECAP_SEQ_MIN_P] = bits_of(c->min_p);
  }
}

/* Times one case; returns the median in microseconds. */
static double run_case(const bench_case *c, recap_dtype dtype, void *logits, void *seqs_dev,
                       int32_t *seqs_host, void *out, recap_stream *s) {
  cudaStream_t cs = (cudaStream_t)recap_stream_native(s);
  write_seqs(seqs_host, c);
  CUDA_OK(cudaMemcpy(seqs_dev, seqs_host, (size_t)BATCH * WIDTH * sizeof(int32_t),
                     cudaMemcpyHostToDevice));
  recap_tensor in[2], outs[1] = {{.data = out}};
  in[0] = (recap_tensor){
      .data = logits, .dtype = dtype, .ndim = 2, .shape = {c->batch, VOCAB}, .strides = {VOCAB, 1}};
  in[1] = (recap_tensor){.data = seqs_dev,
                         .dtype = RECAP_DTYPE_I32,
                         .ndim = 2,
                         .shape = {c->batch, WIDTH},
                         .strides = {WIDTH, 1}};
  recap_op_args args = {.inputs = in,
                        .num_inputs = strcmp(c->op, "sample") == 0 ? 2 : 1,
                        .outputs = outs,
                        .num_outputs = 1};
  recap_op *op = NULL;
  RECAP_OK_OR_DIE(recap_op_create(c->op, &args, &op));
  for (int w = 0; w < 3; ++w) RECAP_OK_OR_DIE(recap_op_launch(op, s));
  CUDA_OK(cudaStreamSynchronize(cs));
  int32_t eager[BATCH], replayed[BATCH];
  CUDA_OK(cudaMemcpy(eager, out, (size_t)c->batch * sizeof(int32_t), cudaMemcpyDeviceToHost));

  recap_graph *g = NULL;
  RECAP_OK_OR_DIE(recap_graph_create(&g));
  RECAP_OK_OR_DIE(recap_graph_capture_begin(g, s, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  RECAP_OK_OR_DIE(recap_op_launch(op, s));
  RECAP_OK_OR_DIE(recap_graph_capture_end(g));
  for (int w = 0; w < 20; ++w) RECAP_OK_OR_DIE(recap_graph_replay(g, s));
  static cudaEvent_t ev[MAX_ITERS + 1];
  for (int i = 0; i <= iters; ++i) CUDA_OK(cudaEventCreate(&ev[i]));
  CUDA_OK(cudaEventRecord(ev[0], cs));
  for (int i = 0; i < iters; ++i) {
    RECAP_OK_OR_DIE(recap_graph_replay(g, s));
    CUDA_OK(cudaEventRecord(ev[i + 1], cs));
  }
  CUDA_OK(cudaStreamSynchronize(cs));
  const double us = median_us(ev, iters);
  for (int i = 0; i <= iters; ++i) CUDA_OK(cudaEventDestroy(ev[i]));
  RECAP_OK_OR_DIE(recap_graph_destroy(g));
  recap_op_destroy(op);

  /* The replays drew what the eager run drew (same parameters, deterministic kernel). */
  CUDA_OK(cudaMemcpy(replayed, out, (size_t)c->batch * sizeof(int32_t), cudaMemcpyDeviceToHost));
  for (int r = 0; r < c->batch; ++r)
    if (replayed[r] != eager[r] || eager[r] < 0 || eager[r] >= VOCAB) {
      fprintf(stderr, "%s %s batch %d row %d: eager token %d, replayed %d\n", c->name,
              recap_dtype_name(dtype), c->batch, r, eager[r], replayed[r]);
      exit(1);
    }
  return us;
}

int main(int argc, char **argv) {
  const char *logits_path = NULL, *json_path = NULL;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--logits") == 0 && i + 1 < argc) {
      logits_path = argv[++i];
    } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      fprintf(stderr, "usage: bench_sample [--iters N] [--logits FILE] [--json FILE]\n");
      return 2;
    }
  }
  if (iters < 1 || iters > MAX_ITERS) {
    fprintf(stderr, "bench_sample: --iters must be 1 to %d\n", MAX_ITERS);
    return 2;
  }

  const size_t n = (size_t)BATCH * VOCAB;
  float *x = malloc(n * sizeof *x);
  uint16_t *x16 = malloc(n * sizeof *x16);
  int32_t *seqs_host = malloc((size_t)BATCH * WIDTH * sizeof *seqs_host);
  if (!x || !x16 || !seqs_host) return 1;
  make_logits(x);
  for (size_t i = 0; i < n; ++i) x16[i] = recap__f32_to_bf16(x[i]);
  if (logits_path) {
    FILE *f = fopen(logits_path, "wb");
    if (!f || fwrite(x, sizeof *x, n, f) != n || fclose(f) != 0) {
      fprintf(stderr, "bench_sample: cannot write %s\n", logits_path);
      return 1;
    }
  }

  recap_stream *s = NULL;
  RECAP_OK_OR_DIE(
      recap_stream_create((recap_device){RECAP_BACKEND_CUDA, 0}, 0, RECAP_STREAM_NON_BLOCKING, &s));
  struct cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  void *logits32, *logits16, *seqs_dev, *out;
  CUDA_OK(cudaMalloc(&logits32, n * sizeof(float)));
  CUDA_OK(cudaMalloc(&logits16, n * sizeof(uint16_t)));
  CUDA_OK(cudaMalloc(&seqs_dev, (size_t)BATCH * WIDTH * sizeof(int32_t)));
  CUDA_OK(cudaMalloc(&out, BATCH * sizeof(int32_t)));
  CUDA_OK(cudaMemcpy(logits32, x, n * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(logits16, x16, n * sizeof(uint16_t), cudaMemcpyHostToDevice));

  static const bench_case cases[] = {
      {"all", "sample", 0.8f, 0.9f, 0.05f, 50, BATCH},
      {"top_p", "sample", 0.8f, 0.9f, 0, 0, BATCH},
      {"temperature", "sample", 1, 0, 0, 0, BATCH},
      {"greedy", "sample", 0, 0, 0, 0, BATCH},
      {"greedy", "sample", 0, 0, 0, 0, 1},
      {"argmax", "argmax", 0, 0, 0, 0, BATCH},
      {"argmax", "argmax", 0, 0, 0, 0, 1},
  };
  static const recap_dtype dtypes[] = {RECAP_DTYPE_F32, RECAP_DTYPE_BF16};
  enum { NUM_CASES = sizeof cases / sizeof cases[0], NUM_DTYPES = 2 };
  double us[NUM_CASES][NUM_DTYPES];
  printf("device %s, %d SMs; vocab %d, %d replays per case\n", prop.name, prop.multiProcessorCount,
         VOCAB, iters);
  printf("%-12s %-5s %5s %10s\n", "case", "dtype", "batch", "median_us");
  for (int c = 0; c < NUM_CASES; ++c)
    for (int d = 0; d < NUM_DTYPES; ++d) {
      us[c][d] =
          run_case(&cases[c], dtypes[d], d == 0 ? logits32 : logits16, seqs_dev, seqs_host, out, s);
      printf("%-12s %-5s %5d %10.1f\n", cases[c].name, recap_dtype_name(dtypes[d]), cases[c].batch,
             us[c][d]);
    }

  if (json_path) {
    FILE *f = fopen(json_path, "w");
    if (!f) {
      fprintf(stderr, "bench_sample: cannot write %s\n", json_path);
      return 1;
    }
    /* The same "environment" object as the CLI's JSON results: GPU, driver, CUDA, cuBLAS and
     * recap versions. */
    json_t *environment = cli_environment_json((recap_device){RECAP_BACKEND_CUDA, 0});
    char *environment_text = environment ? json_dumps(environment, JSON_PRESERVE_ORDER) : NULL;
    json_decref(environment);
    fprintf(f, "{\"environment\": %s, \"device\": \"%s\", \"vocab\": %d, \"iters\": %d, \"cases\": [",
            environment_text ? environment_text : "null", prop.name, VOCAB, iters);
    free(environment_text);
    for (int c = 0; c < NUM_CASES; ++c)
      for (int d = 0; d < NUM_DTYPES; ++d)
        fprintf(f,
                "%s\n  {\"name\": \"%s\", \"dtype\": \"%s\", \"batch\": %d, \"median_us\": %.3f}",
                c || d ? "," : "", cases[c].name, recap_dtype_name(dtypes[d]), cases[c].batch,
                us[c][d]);
    fprintf(f, "\n]}\n");
    if (fclose(f) != 0) return 1;
  }
  cudaFree(logits32);
  cudaFree(logits16);
  cudaFree(seqs_dev);
  cudaFree(out);
  RECAP_OK_OR_DIE(recap_stream_destroy(s));
  free(x);
  free(x16);
  free(seqs_host);
  return 0;
}
