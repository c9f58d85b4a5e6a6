// torch_alloc_bench.cpp: PyTorch's CUDA caching allocator driven from C++ (libtorch, no
// Python) through c10::cuda::CUDACachingAllocator::raw_alloc / raw_delete, on the same two
// workloads as bench/alloc_bench.c (the same sizes, repetitions and trace generator), so
// bench/peer/torch_alloc_bench.sh can put both in one table. Prints "RESULT torch <case> <ns>".
#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kReps = 15, kPairBatch = 10000, kSlots = 256, kTraceOps = 200000;
const size_t kPairSizes[] = {512, 64 << 10, 1 << 20, 8 << 20, 64 << 20};

double now_ns() {
  return std::chrono::duration<double, std::nano>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The trace generator of bench/alloc_bench.c.
uint64_t trace_next(uint64_t *x) {
  *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
  return *x >> 33;
}

size_t trace_size(uint64_t *x) {
  uint64_t u = trace_next(x) % 100;
  if (u < 60) {
    unsigned e = 9 + static_cast<unsigned>(trace_next(x) % 11);
    return (size_t{1} << e) + static_cast<size_t>(trace_next(x) % (uint64_t{1} << e));
  }
  if (u < 90) return (size_t{1} << 20) + static_cast<size_t>(trace_next(x) % (9ULL << 20));
  return (size_t{10} << 20) + static_cast<size_t>(trace_next(x) % (118ULL << 20));
}

void *alloc(size_t n) {
  void *p = c10::cuda::CUDACachingAllocator::raw_alloc(n);
  if (!p) {
    std::fprintf(stderr, "torch_alloc_bench: raw_alloc(%zu) failed\n", n);
    std::exit(1);
  }
  return p;
}

void release(void *p) { c10::cuda::CUDACachingAllocator::raw_delete(p); }

double pair_ns(size_t size) {
  release(alloc(size));
  std::vector<double> t(kReps);
  for (int r = 0; r < kReps; r++) {
    double t0 = now_ns();
    for (int i = 0; i < kPairBatch; i++) release(alloc(size));
    t[r] = (now_ns() - t0) / kPairBatch;
  }
  std::sort(t.begin(), t.end());
  return t[kReps / 2];
}

double trace_ns(int ops) {
  std::vector<void *> slot(kSlots, nullptr);
  uint64_t x = 42;
  double t0 = now_ns();
  for (int i = 0; i < ops; i++) {
    uint64_t s = trace_next(&x) % kSlots;
    if (slot[s]) {
      release(slot[s]);
      slot[s] = nullptr;
    } else {
      slot[s] = alloc(trace_size(&x));
    }
  }
  double per_op = (now_ns() - t0) / ops;
  for (void *p : slot)
    if (p) release(p);
  return per_op;
}

}  // namespace

int main() {
  // The first CUDA tensor initializes the device and the caching allocator.
  at::Tensor warm = at::empty({1}, at::TensorOptions().device(at::kCUDA));
  (void)warm;
  for (size_t size : kPairSizes) {
    char label[48];
    if (size >= (1 << 20))
      std::snprintf(label, sizeof label, "pair_%zu_MiB", size >> 20);
    else if (size >= 1024)
      std::snprintf(label, sizeof label, "pair_%zu_KiB", size >> 10);
    else
      std::snprintf(label, sizeof label, "pair_%zu_B", size);
    std::printf("RESULT torch %s %.1f\n", label, pair_ns(size));
  }
  trace_ns(kTraceOps);  // warm the cache with the whole trace
  std::printf("RESULT torch trace %.1f\n", trace_ns(kTraceOps));
  return 0;
}
