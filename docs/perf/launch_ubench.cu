/*
 * launch_ubench.cu: what one link of a chain of tiny kernels costs on this GPU, as a graph node
 * and as an eager launch, and what programmatic dependent launch (PDL) saves. Standalone (no
 * recap), so the numbers isolate the kernel's shape and the launch mode from the engine; the
 * notes are in docs/perf/launch.md.
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o launch_ubench launch_ubench.cu
 *   ./launch_ubench            # prints one line per variant, a table last
 *
 * The chain is the one of specs/elementwise_chain.yaml: 100 ops on 4096 floats cycling add
 * bias, mul gain, tanh, scale 1.5, each reading the previous op's output. Each variant is
 * checked against a float64 host reference after its graph replays (outputs poisoned with NaN
 * first, fresh random inputs per variant).
 *
 * Variants: kernel style (recap's first grid-stride kernel with int64 indices and a scalar
 * tail loop; a lean one: 32-bit index, one float4 per thread; "cover": recap's dense kernels
 * since, one piece per thread with a 64-bit index and no loop) x block size x PDL mode (none;
 * attribute + wait; attribute + wait then launch_dependents; attribute + launch_dependents then
 * wait; the instructions without the attribute). Also: the empty kernel, and 100 chained
 * copies as memcpy nodes against copy-kernel nodes at several sizes.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

#define CHECK(expr)                                                                          \
  do {                                                                                       \
    cudaError_t e_ = (expr);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

enum { OP_ADD, OP_MUL, OP_TANH, OP_SCALE };
enum { PDL_NONE, PDL_WAIT, PDL_WAIT_TRIGGER, PDL_TRIGGER_WAIT };
static const char *const kPdlName[] = {"no-pdl", "wait", "wait+trig", "trig+wait"};

template <int Mode>
__device__ __forceinline__ void pdl_enter() {
  if (Mode == PDL_WAIT || Mode == PDL_WAIT_TRIGGER)
    asm volatile("griddepcontrol.wait;" ::: "memory");
  if (Mode == PDL_WAIT_TRIGGER) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (Mode == PDL_TRIGGER_WAIT) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
}

__device__ __forceinline__ float apply(int op, float a, float b, float s) {
  switch (op) {
    case OP_ADD:
      return a + b;
    case OP_MUL:
      return a * b;
    case OP_TANH:
      return tanhf(a);
    default:
      return s * a;
  }
}

/* recap's shape: grid-stride over 64-bit indices, vector trips then a scalar tail. */
template <int Op, int Mode>
__global__ void recap_style(const float *__restrict__ a, const float *__restrict__ b,
                            float *__restrict__ y, int64_t n, float s, bool vectorize) {
  pdl_enter<Mode>();
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t nvec = vectorize ? n / 4 : 0;
  for (int64_t i = tid; i < nvec; i += stride) {
    const float4 x = reinterpret_cast<const float4 *>(a)[i];
    float4 w = x;
    if (Op == OP_ADD || Op == OP_MUL) w = reinterpret_cast<const float4 *>(b)[i];
    float4 o;
    o.x = apply(Op, x.x, w.x, s);
    o.y = apply(Op, x.y, w.y, s);
    o.z = apply(Op, x.z, w.z, s);
    o.w = apply(Op, x.w, w.w, s);
    reinterpret_cast<float4 *>(y)[i] = o;
  }
  for (int64_t i = nvec * 4 + tid; i < n; i += stride) y[i] = apply(Op, a[i], b ? b[i] : 0.f, s);
}

/* Lean: one float4 per thread, 32-bit index, no loop (n % 4 == 0 here). */
template <int Op, int Mode>
__global__ void lean_style(const float *__restrict__ a, const float *__restrict__ b,
                           float *__restrict__ y, int64_t n, float s, bool) {
  pdl_enter<Mode>();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (int)(n / 4)) return;
  const float4 x = reinterpret_cast<const float4 *>(a)[i];
  float4 w = x;
  if (Op == OP_ADD || Op == OP_MUL) w = reinterpret_cast<const float4 *>(b)[i];
  float4 o;
  o.x = apply(Op, x.x, w.x, s);
  o.y = apply(Op, x.y, w.y, s);
  o.z = apply(Op, x.z, w.z, s);
  o.w = apply(Op, x.w, w.w, s);
  reinterpret_cast<float4 *>(y)[i] = o;
}

/* recap's dense kernels since docs/perf/launch.md's second version: one piece per thread,
 * 64-bit index, vector or scalar tail element, no loop. */
template <int Op, int Mode>
__global__ void cover_style(const float *__restrict__ a, const float *__restrict__ b,
                            float *__restrict__ y, int64_t n, float s, bool) {
  pdl_enter<Mode>();
  const int64_t nvec = n / 4;
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < nvec) {
    const float4 x = reinterpret_cast<const float4 *>(a)[i];
    float4 w = x;
    if (Op == OP_ADD || Op == OP_MUL) w = reinterpret_cast<const float4 *>(b)[i];
    float4 o;
    o.x = apply(Op, x.x, w.x, s);
    o.y = apply(Op, x.y, w.y, s);
    o.z = apply(Op, x.z, w.z, s);
    o.w = apply(Op, x.w, w.w, s);
    reinterpret_cast<float4 *>(y)[i] = o;
  } else if (const int64_t e = nvec * 4 + (i - nvec); e < n) {
    y[e] = apply(Op, a[e], b ? b[e] : 0.f, s);
  }
}

template <int Mode>
__global__ void empty_kernel(int) {
  pdl_enter<Mode>();
}

template <int Mode>
__global__ void copy16_kernel(const uint4 *__restrict__ s, uint4 *__restrict__ d, int64_t n) {
  pdl_enter<Mode>();
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) d[k] = s[k];
}

typedef void (*op_fn)(const float *, const float *, float *, int64_t, float, bool);

template <typename... K, typename... A>
static void launch(void (*k)(K...), unsigned grid, unsigned threads, cudaStream_t st, bool pdl,
                   bool plain, A... args) {
  if (plain) {
    k<<<grid, threads, 0, st>>>(args...);
    CHECK(cudaGetLastError());
    return;
  }
  cudaLaunchConfig_t c;
  memset(&c, 0, sizeof c);
  c.gridDim = grid;
  c.blockDim = threads;
  c.stream = st;
  cudaLaunchAttribute at[1];
  memset(at, 0, sizeof at);
  if (pdl) {
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    c.attrs = at;
    c.numAttrs = 1;
  }
  CHECK(cudaLaunchKernelEx(&c, k, args...));
}

struct chain {
  op_fn fn[4];
  unsigned threads, grid;
  int mode;
  bool plain; /* <<<>>> rather than cudaLaunchKernelEx (mode must be none) */
  bool attr;  /* with the PDL launch attribute */
  const char *name;
};

#define FNS(STYLE, MODE) \
  { STYLE<OP_ADD, MODE>, STYLE<OP_MUL, MODE>, STYLE<OP_TANH, MODE>, STYLE<OP_SCALE, MODE> }

static const int N = 4096, OPS = 100;
static float *d_x, *d_bias, *d_gain, *d_h[3];

static void run_chain(const chain &c, cudaStream_t st) {
  const float *in = d_x;
  for (int o = 0; o < OPS; ++o) {
    float *out = o == OPS - 1 ? d_h[2] : d_h[o & 1];
    const int op = o & 3;
    const float *b = op == OP_ADD ? d_bias : op == OP_MUL ? d_gain : nullptr;
    launch(c.fn[op], c.grid, c.threads, st, c.attr, c.plain, in, b, out, (int64_t)N, 1.5f, true);
    in = out;
  }
}

static double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

static double now_us() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

/* Count edges by type in the captured graph. */
static void edge_counts(cudaGraph_t g, size_t *nodes, size_t *prog, size_t *plain) {
  CHECK(cudaGraphGetNodes(g, nullptr, nodes));
  size_t ne = 0;
  CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &ne));
  std::vector<cudaGraphNode_t> from(ne), to(ne);
  std::vector<cudaGraphEdgeData> data(ne);
  if (ne) CHECK(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &ne));
  *prog = *plain = 0;
  for (size_t i = 0; i < ne; ++i)
    (data[i].type == cudaGraphDependencyTypeProgrammatic ? *prog : *plain) += 1;
}

template <typename F>
static double time_graph(F body, cudaStream_t st, int iters, size_t *nodes, size_t *prog,
                         size_t *plain, double *instantiate_ms = nullptr) {
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  body();
  CHECK(cudaStreamEndCapture(st, &g));
  edge_counts(g, nodes, prog, plain);
  cudaGraphExec_t ge;
  double t0 = now_us();
  CHECK(cudaGraphInstantiateWithFlags(&ge, g, cudaGraphInstantiateFlagUseNodePriority));
  if (instantiate_ms) *instantiate_ms = (now_us() - t0) * 1e-3;
  CHECK(cudaGraphUpload(ge, st));
  for (int i = 0; i < 20; ++i) CHECK(cudaGraphLaunch(ge, st));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ms(iters);
  for (int i = 0; i < iters; ++i) {
    CHECK(cudaEventRecord(a, st));
    CHECK(cudaGraphLaunch(ge, st));
    CHECK(cudaEventRecord(b, st));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaEventElapsedTime(&ms[i], a, b));
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  return median(ms) * 1e3;
}

/* Eager: events around the launches on an idle stream (as recap bench does); also the host
 * time of the launches alone. */
template <typename F>
static double time_eager(F body, cudaStream_t st, int iters, double *host_us) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i) body();
  CHECK(cudaStreamSynchronize(st));
  std::vector<float> ms(iters), host(iters);
  for (int i = 0; i < iters; ++i) {
    CHECK(cudaEventRecord(a, st));
    double t0 = now_us();
    body();
    host[i] = (float)(now_us() - t0);
    CHECK(cudaEventRecord(b, st));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaEventElapsedTime(&ms[i], a, b));
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  *host_us = median(host);
  return median(ms) * 1e3;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float urand(float lo, float hi) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return lo + (hi - lo) * (float)((rng_state >> 40) * (1.0 / 16777216.0));
}

/* Fresh inputs, NaN-poisoned outputs; returns the float64 reference of the chain's output. */
static std::vector<double> fresh_inputs() {
  std::vector<float> x(N), bias(N), gain(N);
  for (int i = 0; i < N; ++i) {
    x[i] = urand(-1, 1);
    bias[i] = urand(-0.1f, 0.1f);
    gain[i] = urand(0.5f, 1.0f);
  }
  CHECK(cudaMemcpy(d_x, x.data(), N * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_bias, bias.data(), N * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d_gain, gain.data(), N * 4, cudaMemcpyHostToDevice));
  for (int k = 0; k < 3; ++k) CHECK(cudaMemset(d_h[k], 0xff, N * 4));
  std::vector<double> ref(N);
  for (int i = 0; i < N; ++i) {
    double h = x[i];
    for (int o = 0; o < OPS; ++o) {
      switch (o & 3) {
        case OP_ADD:
          h += bias[i];
          break;
        case OP_MUL:
          h *= gain[i];
          break;
        case OP_TANH:
          h = tanh(h);
          break;
        default:
          h *= 1.5;
          break;
      }
    }
    ref[i] = h;
  }
  return ref;
}

static double rel_error(const std::vector<double> &ref) {
  std::vector<float> y(N);
  CHECK(cudaMemcpy(y.data(), d_h[2], N * 4, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (int i = 0; i < N; ++i) {
    if (!isfinite(y[i])) return INFINITY;
    num += (y[i] - ref[i]) * (y[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return sqrt(num / den);
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  CHECK(cudaDriverGetVersion(&driver));
  CHECK(cudaRuntimeGetVersion(&runtime));
  printf("device %s, cc %d.%d, %d SMs, driver %d, runtime %d\n", prop.name, prop.major, prop.minor,
         prop.multiProcessorCount, driver, runtime);
  CHECK(cudaMalloc(&d_x, N * 4));
  CHECK(cudaMalloc(&d_bias, N * 4));
  CHECK(cudaMalloc(&d_gain, N * 4));
  for (int k = 0; k < 3; ++k) CHECK(cudaMalloc(&d_h[k], N * 4));
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  const chain chains[] = {
      {FNS(recap_style, PDL_NONE), 256, 4, PDL_NONE, true, false, "recap-style 256t <<<>>>"},
      {FNS(recap_style, PDL_NONE), 256, 4, PDL_NONE, false, false, "recap-style 256t Ex"},
      {FNS(recap_style, PDL_NONE), 128, 8, PDL_NONE, true, false, "recap-style 128t <<<>>>"},
      {FNS(lean_style, PDL_NONE), 128, 8, PDL_NONE, true, false, "lean 128t <<<>>>"},
      {FNS(lean_style, PDL_NONE), 256, 4, PDL_NONE, true, false, "lean 256t <<<>>>"},
      {FNS(cover_style, PDL_NONE), 128, 8, PDL_NONE, false, false, "cover 128t"},
      {FNS(cover_style, PDL_NONE), 256, 4, PDL_NONE, false, false, "cover 256t"},
      /* griddepcontrol in the kernel, no attribute: what RECAP_PDL=0 runs */
      {FNS(recap_style, PDL_TRIGGER_WAIT), 256, 4, PDL_TRIGGER_WAIT, false, false,
       "recap-style 256t no attr"},
      {FNS(cover_style, PDL_TRIGGER_WAIT), 128, 8, PDL_TRIGGER_WAIT, false, false,
       "cover 128t no attr"},
      {FNS(recap_style, PDL_WAIT), 256, 4, PDL_WAIT, false, true, "recap-style 256t"},
      {FNS(recap_style, PDL_WAIT_TRIGGER), 256, 4, PDL_WAIT_TRIGGER, false, true,
       "recap-style 256t"},
      {FNS(recap_style, PDL_TRIGGER_WAIT), 256, 4, PDL_TRIGGER_WAIT, false, true,
       "recap-style 256t"},
      {FNS(recap_style, PDL_WAIT_TRIGGER), 128, 8, PDL_WAIT_TRIGGER, false, true,
       "recap-style 128t"},
      {FNS(lean_style, PDL_WAIT_TRIGGER), 128, 8, PDL_WAIT_TRIGGER, false, true, "lean 128t"},
      {FNS(lean_style, PDL_TRIGGER_WAIT), 128, 8, PDL_TRIGGER_WAIT, false, true, "lean 128t"},
      {FNS(lean_style, PDL_TRIGGER_WAIT), 256, 4, PDL_TRIGGER_WAIT, false, true, "lean 256t"},
      {FNS(cover_style, PDL_WAIT_TRIGGER), 128, 8, PDL_WAIT_TRIGGER, false, true, "cover 128t"},
      {FNS(cover_style, PDL_TRIGGER_WAIT), 128, 8, PDL_TRIGGER_WAIT, false, true, "cover 128t"},
      {FNS(cover_style, PDL_TRIGGER_WAIT), 256, 4, PDL_TRIGGER_WAIT, false, true, "cover 256t"},
  };
  printf("\n%-26s %-10s %9s %9s %9s %9s %6s %6s %6s %9s\n", "chain (100 ops, 4096 f32)", "pdl",
         "graph us", "node us", "eager us", "host/op", "nodes", "prog", "plain", "rel err");
  int failures = 0;
  for (const chain &c : chains) {
    std::vector<double> ref = fresh_inputs();
    size_t nodes, prog, plain;
    const double g = time_graph([&] { run_chain(c, st); }, st, 2000, &nodes, &prog, &plain);
    const double err = rel_error(ref);
    double host = 0;
    const double e = time_eager([&] { run_chain(c, st); }, st, 300, &host);
    const double err_e = rel_error(ref);
    const bool ok = err < 1e-5 && err_e < 1e-5;
    failures += !ok;
    printf("%-26s %-10s %9.1f %9.3f %9.1f %9.3f %6zu %6zu %6zu %9.1e%s\n", c.name,
           c.attr   ? kPdlName[c.mode]
           : c.mode ? "(instr)"
                    : "no-pdl",
           g, g / OPS, e, host / OPS, nodes, prog, plain, std::max(err, err_e), ok ? "" : "  FAIL");
  }

  /* Empty kernels. */
  for (int mode : {PDL_NONE, PDL_WAIT_TRIGGER, PDL_TRIGGER_WAIT}) {
    void (*k)(int) = mode == PDL_NONE           ? empty_kernel<PDL_NONE>
                     : mode == PDL_WAIT_TRIGGER ? empty_kernel<PDL_WAIT_TRIGGER>
                                                : empty_kernel<PDL_TRIGGER_WAIT>;
    auto body = [&] {
      for (int o = 0; o < OPS; ++o) launch(k, 1, 32, st, mode != PDL_NONE, false, 0);
    };
    size_t nodes, prog, plain;
    const double g = time_graph(body, st, 2000, &nodes, &prog, &plain);
    double host = 0;
    const double e = time_eager(body, st, 300, &host);
    printf("%-26s %-10s %9.1f %9.3f %9.1f %9.3f %6zu %6zu %6zu\n", "empty 1x32", kPdlName[mode], g,
           g / OPS, e, host / OPS, nodes, prog, plain);
  }

  /* Copies: 100 chained copies ping-ponging between two buffers, memcpy node vs kernel. */
  printf("\n%-12s %-22s %10s %10s %8s\n", "bytes", "copy", "graph us", "per copy", "GB/s");
  const size_t kMax = (size_t)64 << 20;
  char *cb[2];
  for (int k = 0; k < 2; ++k) {
    CHECK(cudaMalloc(&cb[k], kMax));
    CHECK(cudaMemset(cb[k], k + 1, kMax));
  }
  for (size_t bytes : {(size_t)16 << 10, (size_t)256 << 10, (size_t)1 << 20, (size_t)4 << 20,
                       (size_t)16 << 20, (size_t)64 << 20}) {
    const int copies = bytes >= ((size_t)16 << 20) ? 20 : OPS;
    for (int kind = 0; kind < 3; ++kind) {
      auto body = [&] {
        for (int o = 0; o < copies; ++o) {
          const char *s = cb[o & 1];
          char *d = cb[(o + 1) & 1];
          if (kind == 0) {
            CHECK(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, st));
          } else {
            const int64_t words = (int64_t)(bytes / 16);
            int64_t blocks = (words + 255) / 256;
            if (blocks > 65535) blocks = 65535;
            if (kind == 1)
              launch(copy16_kernel<PDL_NONE>, (unsigned)blocks, 256, st, false, false,
                     (const uint4 *)s, (uint4 *)d, words);
            else
              launch(copy16_kernel<PDL_WAIT_TRIGGER>, (unsigned)blocks, 256, st, true, false,
                     (const uint4 *)s, (uint4 *)d, words);
          }
        }
      };
      size_t nodes, prog, plain;
      const double g =
          time_graph(body, st, bytes >= ((size_t)16 << 20) ? 50 : 500, &nodes, &prog, &plain);
      static const char *const names[] = {"memcpy node", "copy kernel", "copy kernel pdl"};
      printf("%-12zu %-22s %10.1f %10.3f %8.0f\n", bytes, names[kind], g, g / copies,
             2.0 * bytes * copies / (g * 1e-6) / 1e9);
    }
  }
  /* The copies were checked only for running: check one kernel copy's bytes. */
  {
    std::vector<unsigned char> h(1 << 20);
    CHECK(cudaMemset(cb[0], 0x5a, 1 << 20));
    launch(copy16_kernel<PDL_WAIT_TRIGGER>, 256, 256, st, true, false, (const uint4 *)cb[0],
           (uint4 *)cb[1], (int64_t)((1 << 20) / 16));
    CHECK(cudaStreamSynchronize(st));
    CHECK(cudaMemcpy(h.data(), cb[1], 1 << 20, cudaMemcpyDeviceToHost));
    for (unsigned char v : h)
      if (v != 0x5a) {
        printf("copy check FAILED\n");
        ++failures;
        break;
      }
  }
  printf("\nubench %s (%d failures)\n", failures ? "FAILED" : "ok", failures);
  return failures ? 1 : 0;
}
