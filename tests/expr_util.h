/*
 * expr_util.h: what the expression tests (expr_*_test.c) share: the input names, tensors over
 * caller memory, parsing that must succeed, the double-precision reference of every function
 * (kFunctions), the random inputs, the kernel signatures, and the NVRTC disk cache set up in
 * a fresh temporary directory (nvrtc_suite_init).
 */
#ifndef RECAP_TESTS_EXPR_UTIL_H
#define RECAP_TESTS_EXPR_UTIL_H

#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kernels/expr.h"
#include "kernels/op_codes.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/half.h"
#include "runtime/nvrtc.h"
#include "tests/test_util.h"

/* libnvrtc keeps a 72 KiB allocation of its own for the life of the process (its C++
 * runtime's), which LeakSanitizer reports at exit under --config=asan: not recap's leak. The
 * sanitizer calls this hook if it exists; other builds never do. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
  return "leak:libnvrtc.so\n";
}

static const char *const kNames[] = {"a", "b", "c", "exp"};

static inline recap_tensor tensor(void *data, recap_dtype dtype, int ndim, const int64_t *shape,
                                  const int64_t *strides) {
  recap_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = ndim;
  for (int d = 0; d < ndim; ++d) t.shape[d] = shape[d];
  if (strides)
    for (int d = 0; d < ndim; ++d) t.strides[d] = strides[d];
  else
    recap__tensor_set_contiguous(&t);
  return t;
}

static inline recap__expr_program *parse_ok(const char *text, int num_inputs) {
  recap__expr_program *p = NULL;
  recap__expr_parse_error err;
  recap_status st = recap__expr_parse(text, SIZE_MAX, kNames, num_inputs, NULL, &p, &err);
  if (st != RECAP_OK) fprintf(stderr, "\n  \"%s\": %s\n", text, err.message);
  CU_ASSERT_EQUAL_FATAL(st, RECAP_OK);
  return p;
}

static inline double ref_gelu(double x) {
  return 0.5 * x * (1 + erf(x / sqrt(2.0)));
}
static inline double ref_gelu_tanh(double x) {
  return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
static inline double ref_sigmoid(double x) {
  return 1 / (1 + exp(-x));
}

/* |got - want| <= atol + rtol |want|. */
static inline bool close_to(double got, double want, double rtol, double atol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want; /* a division by a tiny value overflows f16/bf16 */
  return fabs(got - want) <= atol + rtol * fabs(want);
}

typedef double (*ref_fn)(double a, double b);
static inline double r_relu(double a, double b) {
  (void)b;
  return a > 0 ? a : 0;
}
static inline double r_gelu(double a, double b) {
  (void)b;
  return ref_gelu(a);
}
static inline double r_gelu_tanh(double a, double b) {
  (void)b;
  return ref_gelu_tanh(a);
}
static inline double r_silu(double a, double b) {
  (void)b;
  return a * ref_sigmoid(a);
}
static inline double r_sigmoid(double a, double b) {
  (void)b;
  return ref_sigmoid(a);
}
static inline double r_tanh(double a, double b) {
  (void)b;
  return tanh(a);
}
static inline double r_exp(double a, double b) {
  (void)b;
  return exp(a);
}
static inline double r_neg(double a, double b) {
  (void)b;
  return -a;
}
static inline double r_scale(double a, double b) {
  (void)b;
  return -0.375 * a;
}
static inline double r_add(double a, double b) {
  return a + b;
}
static inline double r_sub(double a, double b) {
  return a - b;
}
static inline double r_mul(double a, double b) {
  return a * b;
}
static inline double r_div(double a, double b) {
  return a / b;
}
static inline double r_lt(double a, double b) {
  return a < b;
}
static inline double r_le(double a, double b) {
  return a <= b;
}
static inline double r_gt(double a, double b) {
  return a > b;
}
static inline double r_ge(double a, double b) {
  return a >= b;
}
static inline double r_eq(double a, double b) {
  return a == b;
}
static inline double r_ne(double a, double b) {
  return a != b;
}
static inline double r_select(double a, double b) {
  return a > b ? a * 2 : b - 1;
}
static inline double r_compound(double a, double b) {
  return a * ref_sigmoid(b) + 1.0;
}
static inline double r_compound2(double a, double b) {
  double t = ref_gelu_tanh(a - b) / (1 + exp(-b * b));
  return t > 0.1 ? tanh(t) : -t * 3;
}

static const struct {
  const char *text;
  ref_fn ref;
} kFunctions[] = {
    {"relu(a)", r_relu},
    {"gelu(a)", r_gelu},
    {"gelu_tanh(a)", r_gelu_tanh},
    {"silu(a)", r_silu},
    {"sigmoid(a)", r_sigmoid},
    {"tanh(a)", r_tanh},
    {"exp(a)", r_exp},
    {"neg(a)", r_neg},
    {"scale(a, -0.375)", r_scale},
    {"a + b", r_add},
    {"a - b", r_sub},
    {"a * b", r_mul},
    {"a / b", r_div},
    {"a < b", r_lt},
    {"a <= b", r_le},
    {"a > b", r_gt},
    {"a >= b", r_ge},
    {"a == b", r_eq},
    {"a != b", r_ne},
    {"select(a > b, a * 2, b - 1)", r_select},
    {"a * sigmoid(b) + 1.0", r_compound},
    {"select(gelu_tanh(a - b) / (1 + exp(-b * b)) > 0.1, tanh(gelu_tanh(a - b) / (1 + exp(-b * "
     "b))), -(gelu_tanh(a - b) / (1 + exp(-b * b))) * 3)",
     r_compound2},
};
enum { NUM_FUNCTIONS = sizeof kFunctions / sizeof kFunctions[0] };

/* Inputs drawn from a few values that repeat, so comparisons see equal operands too. */
static inline void fill_random(float *v, int64_t n, test_rng *rng) {
  for (int64_t i = 0; i < n; ++i) {
    double x = test_rng_uniform(rng, -4, 4);
    if (test_rng_next(rng) % 4 == 0) x = (double)(int)x; /* small integers collide */
    v[i] = (float)x;
  }
}

static inline recap__expr_signature sig_of(int n, recap_dtype in, recap_dtype out) {
  recap__expr_signature s;
  memset(&s, 0, sizeof s);
  s.num_inputs = n;
  for (int i = 0; i < n; ++i) s.inputs[i] = in;
  s.output = out;
  return s;
}

/* ---- NVRTC and the disk cache ---- */

static char cache_dir[512];

static inline bool nvrtc_present(void) {
  static const char *const paths[] = {"libnvrtc.so.13", "libnvrtc.so",
                                      "/usr/local/cuda/lib64/libnvrtc.so.13"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; ++i) {
    void *h = dlopen(paths[i], RTLD_LAZY | RTLD_LOCAL);
    if (h) {
      dlclose(h);
      return true;
    }
  }
  return false;
}

static inline int nvrtc_suite_init(void) {
  const char *tmp = getenv("TEST_TMPDIR");
  snprintf(cache_dir, sizeof cache_dir, "%s/recap_expr_cache_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(cache_dir)) return 1;
  return setenv("RECAP_CACHE_DIR", cache_dir, 1);
}

#endif /* RECAP_TESTS_EXPR_UTIL_H */
