/* archs.cu: the architecture list of this build, as nvcc saw it (see cuda_archs.h). */
#include "runtime/cuda_archs.h"

#ifndef __CUDA_ARCH_LIST__
#error "nvcc 12 or newer is required: it defines __CUDA_ARCH_LIST__ during host compilation"
#endif

namespace {

/* e.g. {800, 900}: the virtual architectures nvcc compiled this file for, ascending. */
constexpr int kArchs[] = {__CUDA_ARCH_LIST__};
constexpr int kArchCount = (int)(sizeof kArchs / sizeof kArchs[0]);

struct ArchText {
  char text[256];
  int used;

  constexpr void put(const char *s) {
    while (*s && used < (int)sizeof text - 1) text[used++] = *s++;
  }
  constexpr void put_number(int n) {
    char digits[12] = {};
    int count = 0;
    do {
      digits[count++] = (char)('0' + n % 10);
      n /= 10;
    } while (n > 0 && count < (int)sizeof digits);
    while (count > 0 && used < (int)sizeof text - 1) text[used++] = digits[--count];
  }
};

/* Built at compile time, so no C++ runtime (static-initialization guards) is needed at link. */
constexpr ArchText make_arch_text() {
  ArchText t{};
  for (int i = 0; i < kArchCount; i++) {
    if (i) t.put(" ");
    t.put("sm_");
    t.put_number(kArchs[i] / 10);
  }
  t.put(" compute_");
  t.put_number(kArchs[kArchCount - 1] / 10);
  t.text[t.used] = '\0';
  return t;
}

constexpr ArchText kArchText = make_arch_text();

}  // namespace

extern "C" const char *recap__cuda_compiled_archs(void) { return kArchText.text; }
