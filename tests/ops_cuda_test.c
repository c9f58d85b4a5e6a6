/*
 * ops_cuda_test.c: every non-GEMM op on CUDA against the host reference implementation.
 *
 * Each case draws fresh random inputs (test_rng; the seed is printed), runs the op through
 * recap__op_launch on a host stream (the reference) and on a CUDA stream, and compares EVERY
 * output element: |cuda - host| <= atol + rtol * scale, with rtol per dtype (f32 1e-5, f16
 * 1e-3, bf16 8e-3), scale = |host| for elementwise results and the sum of the magnitudes of
 * the terms for reductions (computed here in double), so results that cancel to near zero
 * do not flake. Data movement (copies, concat, fill, embedding, kv_append) must match bit for
 * bit. CUDA outputs are poisoned with 0xFF bytes (NaN for floats) before every run, so an
 * element a kernel forgot to write fails.
 *
 * Each case is then captured into a CUDA graph (runtime capture + the backend's
 * instantiate/launch), replayed twice on re-poisoned outputs, and must reproduce the eager
 * CUDA result bit for bit (the kernels are deterministic). Random ops replay through the RNG
 * slot protocol of runtime/rng.h and must equal the host draw at the generator state each
 * replay consumed. The KV-cache append + attention pair is captured once and replayed for
 * several positions written into device memory between replays; it must match eager runs.
 *
 * Values that only the device sees (an embedding id, a KV-cache position, an attention
 * length, a rope position out of range) must fault the device instead of reading or writing
 * out of bounds; since a fault kills the CUDA context, each such case runs in a child process
 * (this binary re-executed with --fault <op>) that must see RECAP_STATUS_DEVICE_ERROR.
 *
 * The CUDA suite is inactive on a machine without a GPU. The registry suite always runs: it
 * checks that each op's CUDA slot points at the entry point the kernels contract assigns it
 * (and is NULL in host-only builds).
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/gemm/gemm.h"
#include "kernels/half.h"
#include "kernels/op.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/rng.h"
#include "tests/test_util.h"
#if RECAP_WITH_CUDA
#include "kernels/cuda_ops.h"
#endif

/* ------------------------------------------------------------------------------------------
 * Registry: CUDA entry points
 * ---------------------------------------------------------------------------------------- */

typedef recap_status (*cuda_entry)(const recap_op_call *, void *);

/* The op -> entry point table of the kernels contract; NULL entry = host-only build or an op
 * added after the contract (expr, the collectives), whose launcher is its own file's. */
static cuda_entry expected_entry(const char *name) {
#if RECAP_WITH_CUDA
  static const struct {
    const char *name;
    cuda_entry fn;
  } table[] = {
      {"relu", recap__cuda_unary},
      {"gelu", recap__cuda_unary},
      {"gelu_tanh", recap__cuda_unary},
      {"silu", recap__cuda_unary},
      {"sigmoid", recap__cuda_unary},
      {"tanh", recap__cuda_unary},
      {"exp", recap__cuda_unary},
      {"neg", recap__cuda_unary},
      {"scale", recap__cuda_unary},
      {"cast", recap__cuda_unary},
      {"add", recap__cuda_binary},
      {"sub", recap__cuda_binary},
      {"mul", recap__cuda_binary},
      {"div", recap__cuda_binary},
      {"softmax", recap__cuda_softmax},
      {"layernorm", recap__cuda_layernorm},
      {"rmsnorm", recap__cuda_rmsnorm},
      {"sum", recap__cuda_reduce_last},
      {"mean", recap__cuda_reduce_last},
      {"reshape", recap__cuda_copy_strided},
      {"permute", recap__cuda_copy_strided},
      {"transpose", recap__cuda_copy_strided},
      {"slice", recap__cuda_copy_strided},
      {"split", recap__cuda_copy_strided},
      {"copy", recap__cuda_copy_strided},
      {"concat", recap__cuda_concat},
      {"fill", recap__cuda_fill},
      {"embedding", recap__cuda_embedding},
      {"rope", recap__cuda_rope},
      {"kv_append", recap__cuda_kv_append},
      {"attention", recap__cuda_attention},
      {"random_uniform", recap__cuda_random},
      {"random_normal", recap__cuda_random},
      {"matmul", recap__cuda_gemm},
      {"linear", recap__cuda_gemm},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i)
    if (strcmp(table[i].name, name) == 0) return table[i].fn;
#else
  (void)name;
#endif
  return NULL;
}

static void test_every_op_points_at_its_contract_cuda_entry(void) {
  size_t count = 0;
  const recap_op_def *const *ops = recap__op_list(&count);
  CU_ASSERT_TRUE_FATAL(count > 0);
  for (size_t i = 0; i < count; ++i) {
    const recap_op_def *def = ops[i];
    cuda_entry want = expected_entry(def->name);
    if (want && (cuda_entry)def->launch_cuda != want) {
      fprintf(stderr, "\n  op '%s': launch_cuda %s the contract's entry point\n", def->name,
              def->launch_cuda ? "is not" : "is NULL instead of");
      CU_FAIL("an op does not launch through its contract entry point");
    }
    if (!RECAP_WITH_CUDA) CU_ASSERT_PTR_NULL((void *)(uintptr_t)def->launch_cuda);
    if (RECAP_WITH_CUDA) CU_ASSERT_PTR_NOT_NULL(def->launch_cuda);
  }
}

static void test_every_contract_op_is_in_the_registry(void) {
  static const char *const names[] = {"relu",         "gelu",      "gelu_tanh", "silu",
                                      "sigmoid",      "tanh",      "exp",       "neg",
                                      "scale",        "cast",      "add",       "sub",
                                      "mul",          "div",       "softmax",   "layernorm",
                                      "rmsnorm",      "sum",       "mean",      "reshape",
                                      "permute",      "transpose", "slice",     "split",
                                      "copy",         "concat",    "fill",      "embedding",
                                      "rope",         "kv_append", "attention", "random_uniform",
                                      "random_normal"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    const recap_op_def *def = recap__op_find(names[i]);
    if (!def) fprintf(stderr, "\n  op '%s' missing: %s\n", names[i], recap_last_error());
    CU_ASSERT_PTR_NOT_NULL(def);
  }
}

/* ------------------------------------------------------------------------------------------
 * CUDA harness
 * ---------------------------------------------------------------------------------------- */

static const recap_device kCudaDev = {RECAP_BACKEND_CUDA, 0};
static const recap_device kHostDev = {RECAP_BACKEND_HOST, 0};
static recap_stream *cuda_stream, *host_stream;
static const recap__backend *cuda;

static int cuda_suite_init(void) {
  cuda = recap__backend_get(RECAP_BACKEND_CUDA);
  if (!cuda) return 1;
  if (recap_stream_create(kCudaDev, 0, RECAP_STREAM_NON_BLOCKING, &cuda_stream) != RECAP_OK)
    return 1;
  if (recap_stream_create(kHostDev, 0, RECAP_STREAM_NON_BLOCKING, &host_stream) != RECAP_OK)
    return 1;
  return 0;
}

static int cuda_suite_cleanup(void) {
  recap_stream_destroy(cuda_stream);
  recap_stream_destroy(host_stream);
  cuda_stream = host_stream = NULL;
  return 0;
}

/* Every buffer a test allocates is tracked and released by release_all() at the test's end
 * (also after a failed assertion, since each test calls it on every exit path it controls). */
enum { MAX_TRACKED = 4096 };
static struct {
  void *ptr;
  bool device;
} tracked[MAX_TRACKED];
static int num_tracked;

static void *track(void *ptr, bool device) {
  CU_ASSERT_FATAL(num_tracked < MAX_TRACKED);
  tracked[num_tracked].ptr = ptr;
  tracked[num_tracked].device = device;
  num_tracked++;
  return ptr;
}

static void release_all(void) {
  recap_stream_synchronize(cuda_stream);
  for (int i = 0; i < num_tracked; ++i) {
    if (tracked[i].device)
      cuda->mem_free(0, tracked[i].ptr);
    else
      free(tracked[i].ptr);
  }
  num_tracked = 0;
}

static void *host_alloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  return track(p, false);
}

static void *dev_alloc(size_t bytes) {
  void *p = NULL;
  CHECK_OK(cuda->mem_alloc(0, bytes ? bytes : 1, &p));
  return track(p, true);
}

static void to_device(void *dst, const void *src, size_t bytes) {
  CHECK_OK(cuda->memcpy_async(dst, src, bytes, cuda_stream));
  CHECK_OK(recap_stream_synchronize(cuda_stream));
}

static void to_host(void *dst, const void *src, size_t bytes) {
  CHECK_OK(cuda->memcpy_async(dst, src, bytes, cuda_stream));
  CHECK_OK(recap_stream_synchronize(cuda_stream));
}

static void poison_device(void *dst, size_t bytes) {
  CHECK_OK(cuda->memset_async(dst, 0xFF, bytes, cuda_stream));
}

/* An input: a view (shape, strides, element offset) into storage that exists on the host and
 * on the device with the same random contents. */
typedef struct {
  recap_tensor view; /* data unused */
  int64_t offset, storage;
  void *host, *dev;
} tbuf;

typedef enum {
  FILL_UNIFORM,  /* uniform in [lo, hi) */
  FILL_AWAY,     /* magnitude uniform in [lo, hi), random sign (divisors) */
  FILL_INTEGERS, /* integers uniform in [lo, hi) (indices, positions) */
} fill_mode;

static tbuf make_input(recap_dtype dtype, int ndim, const int64_t *shape, const int64_t *strides,
                       int64_t offset, fill_mode mode, double lo, double hi) {
  tbuf b;
  memset(&b, 0, sizeof b);
  b.view.dtype = dtype;
  b.view.ndim = ndim;
  for (int d = 0; d < ndim; ++d) b.view.shape[d] = shape[d];
  if (strides) {
    for (int d = 0; d < ndim; ++d) b.view.strides[d] = strides[d];
  } else {
    recap__tensor_set_contiguous(&b.view);
  }
  int64_t extent = 1;
  for (int d = 0; d < ndim; ++d) extent += (shape[d] - 1) * b.view.strides[d];
  b.offset = offset;
  b.storage = offset + extent;
  size_t esize = recap_dtype_size(dtype);
  b.host = host_alloc((size_t)b.storage * esize);
  b.dev = dev_alloc((size_t)b.storage * esize);
  test_rng rng;
  test_rng_init(&rng);
  for (int64_t i = 0; i < b.storage; ++i) {
    if (mode == FILL_INTEGERS) {
      int64_t v = (int64_t)floor(test_rng_uniform(&rng, lo, hi));
      if (dtype == RECAP_DTYPE_I64)
        ((int64_t *)b.host)[i] = v;
      else
        ((int32_t *)b.host)[i] = (int32_t)v;
    } else {
      double v = test_rng_uniform(&rng, lo, hi);
      if (mode == FILL_AWAY && (test_rng_next(&rng) & 1)) v = -v;
      recap__store_f32(b.host, dtype, i, (float)v);
    }
  }
  to_device(b.dev, b.host, (size_t)b.storage * esize);
  return b;
}

static tbuf make_contiguous(recap_dtype dtype, int ndim, const int64_t *shape, double lo,
                            double hi) {
  return make_input(dtype, ndim, shape, NULL, 0, FILL_UNIFORM, lo, hi);
}

static recap_tensor bind(const tbuf *b, bool device) {
  recap_tensor t = b->view;
  t.data = (char *)(device ? b->dev : b->host) + b->offset * (int64_t)recap_dtype_size(t.dtype);
  return t;
}

static double rtol_of(recap_dtype dtype) {
  switch (dtype) {
    case RECAP_DTYPE_F32:
      return 1e-5;
    case RECAP_DTYPE_F16:
      return 1e-3;
    case RECAP_DTYPE_BF16:
      return 8e-3;
    default:
      return 0;
  }
}

/* The absolute floor: one f16 subnormal step is 6e-8, so results that land in f16's subnormal
 * range (small softmax probabilities) may differ by one step after the same f32 value rounds. */
static double atol_of(recap_dtype dtype) {
  return dtype == RECAP_DTYPE_I32 || dtype == RECAP_DTYPE_I64 ? 0 : 1e-7;
}

/* Compares n elements of `got` (CUDA) with `ref` (host). scale == NULL: |ref|. exact: bytes
 * must be equal. Prints the first mismatches and asserts none. */
static void compare(const char *what, recap_dtype dtype, int64_t n, const void *got,
                    const void *ref, const double *scale, bool exact) {
  int64_t bad = 0;
  size_t esize = recap_dtype_size(dtype);
  double rtol = rtol_of(dtype), atol = atol_of(dtype);
  for (int64_t k = 0; k < n; ++k) {
    bool ok;
    double g = 0, r = 0, tol = 0;
    if (exact || dtype == RECAP_DTYPE_I32 || dtype == RECAP_DTYPE_I64) {
      ok = memcmp((const char *)got + k * (int64_t)esize, (const char *)ref + k * (int64_t)esize,
                  esize) == 0;
      if (dtype != RECAP_DTYPE_I32 && dtype != RECAP_DTYPE_I64) {
        g = recap__load_f32(got, dtype, k);
        r = recap__load_f32(ref, dtype, k);
      }
    } else {
      g = recap__load_f32(got, dtype, k);
      r = recap__load_f32(ref, dtype, k);
      tol = atol + rtol * (scale ? scale[k] : fabs(r));
      ok = fabs(g - r) <= tol; /* false for NaN: an unwritten (poisoned) element */
    }
    if (!ok) {
      if (bad < 5)
        fprintf(stderr, "\n  %s [%s]: element %lld: cuda %.9g host %.9g (tolerance %.3g)", what,
                recap_dtype_name(dtype), (long long)k, g, r, tol);
      bad++;
    }
  }
  if (bad)
    fprintf(stderr, "\n  %s [%s]: %lld of %lld elements differ\n", what, recap_dtype_name(dtype),
            (long long)bad, (long long)n);
  CU_ASSERT_EQUAL(bad, 0);
}

typedef enum {
  SCALE_REF,       /* |ref| */
  SCALE_ROW_SUM,   /* sum/mean: sum over the row of |x| (divided by D for mean) */
  SCALE_NORM,      /* layernorm/rmsnorm: (|x_j| + |mean|) * rstd * |w_j| + |b_j| */
  SCALE_ROPE,      /* rope: |x_i| + |x_{i+half}| of the element's pair */
  SCALE_ATTENTION, /* sum_j p_j |v_jd|: the host op run again on |v| */
  SCALE_NORMAL,    /* random_normal: |mean| + 6 |std| (Box-Muller's radius is below 5.8) */
} scale_kind;

typedef struct {
  const char *op;
  recap_op_attrs attrs;
  int num_inputs;
  tbuf in[RECAP_OP_MAX_INPUTS];
  scale_kind scale;
  bool exact;
  int64_t out_offset; /* CUDA outputs start this many elements into their allocation */
} op_case;

/* Row-major element k of a host-bound view. */
static double load_view(const recap_tensor *t, int64_t k) {
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0; --d) {
    off += (k % t->shape[d]) * t->strides[d];
    k /= t->shape[d];
  }
  return recap__load_f32(t->data, t->dtype, off);
}

/* The per-element scale of output `o` (n elements) for kinds other than SCALE_REF. */
static double *make_scale(const op_case *c, const recap_op_call *host_call, int o) {
  const recap_tensor *x = &host_call->inputs[0], *out = &host_call->outputs[o];
  int64_t n = recap__tensor_numel(out);
  double *s = host_alloc((size_t)n * sizeof *s);
  switch (c->scale) {
    case SCALE_ROW_SUM: {
      int64_t d = x->shape[x->ndim - 1];
      for (int64_t r = 0; r < n; ++r) {
        double acc = 0;
        for (int64_t j = 0; j < d; ++j) acc += fabs(load_view(x, r * d + j));
        s[r] = host_call->def->code == 1 ? acc / (double)d : acc;
      }
      break;
    }
    case SCALE_NORM: {
      bool center = strcmp(c->op, "layernorm") == 0;
      const recap_tensor *w = &host_call->inputs[1];
      const recap_tensor *b = center && host_call->num_inputs > 2 ? &host_call->inputs[2] : NULL;
      int64_t d = x->shape[x->ndim - 1], rows = n / d;
      for (int64_t r = 0; r < rows; ++r) {
        double mean = 0, sq = 0;
        if (center) {
          for (int64_t j = 0; j < d; ++j) mean += load_view(x, r * d + j);
          mean /= (double)d;
        }
        for (int64_t j = 0; j < d; ++j) {
          double v = load_view(x, r * d + j) - mean;
          sq += v * v;
        }
        double rstd = 1.0 / sqrt(sq / (double)d + c->attrs.eps);
        for (int64_t j = 0; j < d; ++j)
          s[r * d + j] =
              (fabs(load_view(x, r * d + j)) + fabs(mean)) * rstd * fabs(load_view(w, j)) +
              (b ? fabs(load_view(b, j)) : 0);
      }
      break;
    }
    case SCALE_ROPE: {
      int64_t dh = x->shape[x->ndim - 1], half = dh / 2;
      for (int64_t k = 0; k < n; ++k) {
        int64_t i = k % dh, row = k - i, i0 = i < half ? i : i - half;
        s[k] = fabs(load_view(x, row + i0)) + fabs(load_view(x, row + i0 + half));
      }
      break;
    }
    case SCALE_ATTENTION: {
      /* The host attention on |v| gives sum_j p_j |v_jd| exactly as the reference weighs. */
      recap_op_call abs_call = *host_call;
      const recap_tensor *v = &host_call->inputs[2];
      int64_t vn = recap__tensor_numel(v);
      recap_tensor vabs = *v;
      vabs.data = host_alloc((size_t)vn * sizeof(float));
      vabs.dtype = RECAP_DTYPE_F32;
      recap__tensor_set_contiguous(&vabs);
      for (int64_t k = 0; k < vn; ++k) ((float *)vabs.data)[k] = (float)fabs(load_view(v, k));
      /* All of q, k, v must share a dtype: compute the scale in f32 from converted q and k. */
      recap_tensor conv[2];
      for (int i = 0; i < 2; ++i) {
        const recap_tensor *t = &host_call->inputs[i];
        int64_t tn = recap__tensor_numel(t);
        conv[i] = *t;
        conv[i].data = host_alloc((size_t)tn * sizeof(float));
        conv[i].dtype = RECAP_DTYPE_F32;
        recap__tensor_set_contiguous(&conv[i]);
        for (int64_t k = 0; k < tn; ++k) ((float *)conv[i].data)[k] = (float)load_view(t, k);
      }
      abs_call.inputs[0] = conv[0];
      abs_call.inputs[1] = conv[1];
      abs_call.inputs[2] = vabs;
      abs_call.outputs[0].dtype = RECAP_DTYPE_F32;
      float *sf = host_alloc((size_t)n * sizeof(float));
      abs_call.outputs[0].data = sf;
      CHECK_OK(host_call->def->run_host(&abs_call));
      for (int64_t k = 0; k < n; ++k) s[k] = sf[k];
      break;
    }
    case SCALE_NORMAL:
      for (int64_t k = 0; k < n; ++k) s[k] = fabs(c->attrs.mean) + 6 * fabs(c->attrs.std);
      break;
    case SCALE_REF:
      for (int64_t k = 0; k < n; ++k) s[k] = fabs(recap__load_f32(out->data, out->dtype, k));
      break;
  }
  return s;
}

static size_t tensor_bytes(const recap_tensor *t) {
  return (size_t)recap__tensor_numel(t) * recap_dtype_size(t->dtype);
}

/* Captures one launch of `call` on the CUDA stream, replays it twice on poisoned outputs and
 * checks each replay against `eager` (per output, bit for bit). */
static void check_graph_replay(const char *label, recap_op_call *call, void *const *dev_out,
                               void *const *eager) {
  recap__graph *graph = NULL;
  recap__graph_exec *exec = NULL;
  CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_GLOBAL));
  recap_status st = recap__op_launch(call, cuda_stream);
  recap_status end = recap__capture_end(cuda_stream, &graph);
  CHECK_OK(st);
  CHECK_OK(end);
  CHECK_OK(cuda->graph_instantiate(graph, &exec));
  for (int replay = 0; replay < 2; ++replay) {
    for (int o = 0; o < call->num_outputs; ++o)
      poison_device(dev_out[o], tensor_bytes(&call->outputs[o]));
    CHECK_OK(cuda->graph_launch(exec, cuda_stream));
    CHECK_OK(recap_stream_synchronize(cuda_stream));
    for (int o = 0; o < call->num_outputs; ++o) {
      size_t bytes = tensor_bytes(&call->outputs[o]);
      void *got = malloc(bytes);
      CU_ASSERT_PTR_NOT_NULL_FATAL(got);
      to_host(got, dev_out[o], bytes);
      int differs = memcmp(got, eager[o], bytes) != 0;
      free(got);
      if (differs)
        fprintf(stderr, "\n  %s: graph replay %d of output %d differs from the eager run\n", label,
                replay, o);
      CU_ASSERT_FALSE(differs);
    }
  }
  cuda->graph_exec_destroy(exec);
  cuda->graph_destroy(graph);
}

/* Runs one case on host and CUDA, compares every output, then checks graph replay. */
static void run_case(const op_case *c) {
  char label[160];
  snprintf(label, sizeof label, "%s (input 0 %s, %lld elements at offset %lld, output offset %lld)",
           c->op,
           c->num_inputs ? recap_dtype_name(c->in[0].view.dtype) : recap_dtype_name(c->attrs.dtype),
           c->num_inputs ? (long long)recap__tensor_numel(&c->in[0].view) : 0LL,
           c->num_inputs ? (long long)c->in[0].offset : 0LL, (long long)c->out_offset);
  recap_op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find(c->op);
  CU_ASSERT_PTR_NOT_NULL_FATAL(call.def);
  call.attrs = c->attrs;
  call.num_inputs = c->num_inputs;
  for (int i = 0; i < c->num_inputs; ++i) call.inputs[i] = bind(&c->in[i], false);
  CHECK_OK(recap__op_infer(&call));

  recap_op_call host_call = call, dev_call = call;
  void *host_out[RECAP_OP_MAX_OUTPUTS], *dev_out[RECAP_OP_MAX_OUTPUTS];
  void *cuda_out[RECAP_OP_MAX_OUTPUTS];
  for (int o = 0; o < call.num_outputs; ++o) {
    size_t bytes = tensor_bytes(&call.outputs[o]);
    host_out[o] = host_alloc(bytes);
    memset(host_out[o], 0xFF, bytes);
    cuda_out[o] = host_alloc(bytes);
    size_t skip = (size_t)c->out_offset * recap_dtype_size(call.outputs[o].dtype);
    dev_out[o] = (char *)dev_alloc(bytes + skip) + skip;
    poison_device(dev_out[o], bytes);
    host_call.outputs[o].data = host_out[o];
    dev_call.outputs[o].data = dev_out[o];
  }
  for (int i = 0; i < c->num_inputs; ++i) dev_call.inputs[i] = bind(&c->in[i], true);

  /* Random ops: the host generator is set to the state the CUDA draw used. */
  recap_rng_state state;
  if (call.def->is_random) CHECK_OK(recap_rng_get_state(kCudaDev, &state));
  CHECK_OK(recap__op_launch(&dev_call, cuda_stream));
  CHECK_OK(recap_stream_synchronize(cuda_stream));
  if (call.def->is_random) CHECK_OK(recap_rng_set_state(kHostDev, &state));
  CHECK_OK(recap__op_launch(&host_call, host_stream));
  CHECK_OK(recap_stream_synchronize(host_stream));

  for (int o = 0; o < call.num_outputs; ++o) {
    const recap_tensor *out = &call.outputs[o];
    to_host(cuda_out[o], dev_out[o], tensor_bytes(out));
    double *scale = c->scale == SCALE_REF ? NULL : make_scale(c, &host_call, o);
    compare(label, out->dtype, recap__tensor_numel(out), cuda_out[o], host_out[o], scale, c->exact);
  }
  if (!call.def->is_random) check_graph_replay(label, &dev_call, dev_out, cuda_out);
}

static recap_op_attrs no_attrs(void) {
  recap_op_attrs a;
  memset(&a, 0, sizeof a);
  return a;
}

static const recap_dtype kFloatTypes[] = {RECAP_DTYPE_F32, RECAP_DTYPE_F16, RECAP_DTYPE_BF16};
enum { NUM_FLOAT_TYPES = 3 };

/* ------------------------------------------------------------------------------------------
 * Elementwise
 * ---------------------------------------------------------------------------------------- */

/* The unary inputs: odd sizes (one above 2^20), a transposed view, and a view one element
 * into its storage (so the vector path must not be taken). */
static void unary_inputs(recap_dtype dtype, tbuf *out, int *count) {
  static const int64_t sizes[] = {1, 7, 1023, 4097, (1 << 20) + 5};
  int n = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
    out[n++] = make_contiguous(dtype, 1, &sizes[i], -3, 3);
  const int64_t tshape[] = {129, 37}, tstrides[] = {1, 129};
  out[n++] = make_input(dtype, 2, tshape, tstrides, 0, FILL_UNIFORM, -3, 3);
  const int64_t oshape[] = {3, 1025};
  out[n++] = make_input(dtype, 2, oshape, NULL, 1, FILL_UNIFORM, -3, 3);
  *count = n;
}

static void test_unary_ops_match_host(void) {
  static const char *const ops[] = {"relu", "gelu", "gelu_tanh", "silu", "sigmoid",
                                    "tanh", "exp",  "neg",       "scale"};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    tbuf inputs[8];
    int count = 0;
    unary_inputs(kFloatTypes[t], inputs, &count);
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o)
      for (int i = 0; i < count; ++i) {
        op_case c = {.op = ops[o], .attrs = no_attrs(), .num_inputs = 1, .scale = SCALE_REF};
        c.attrs.scale = 0.37;
        c.in[0] = inputs[i];
        run_case(&c);
      }
    release_all();
  }
}

static void test_cast_between_every_float_pair_matches_host(void) {
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    tbuf inputs[8];
    int count = 0;
    unary_inputs(kFloatTypes[t], inputs, &count);
    for (int u = 0; u < NUM_FLOAT_TYPES; ++u)
      for (int i = 0; i < count; ++i) {
        op_case c = {.op = "cast", .attrs = no_attrs(), .num_inputs = 1, .exact = true};
        c.attrs.dtype = kFloatTypes[u];
        c.in[0] = inputs[i];
        run_case(&c);
      }
    release_all();
  }
}

static void test_binary_ops_broadcast_and_views_match_host(void) {
  static const char *const ops[] = {"add", "sub", "mul", "div"};
  /* {a ndim, a shape, b ndim, b shape}; a transposed `a` in the last pair. */
  static const struct {
    int an;
    int64_t as[4];
    int bn;
    int64_t bs[4];
    bool a_transposed;
  } shapes[] = {
      {1, {1}, 1, {1}, false},
      {1, {4097}, 1, {4097}, false},
      {1, {(1 << 20) + 3}, 1, {(1 << 20) + 3}, false},
      {2, {7, 1023}, 1, {1023}, false},
      {2, {64, 1024}, 2, {1, 1024}, false},
      {1, {1024}, 2, {16, 1024}, false},
      {2, {33, 1}, 2, {1, 65}, false},
      {4, {2, 3, 5, 7}, 3, {3, 1, 7}, false},
      {1, {5}, 4, {2, 3, 1, 5}, false},
      {2, {129, 37}, 1, {37}, true},
  };
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
      for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o) {
        op_case c = {.op = ops[o], .attrs = no_attrs(), .num_inputs = 2, .scale = SCALE_REF};
        const int64_t tstrides[] = {1, 129};
        c.in[0] = make_input(kFloatTypes[t], shapes[s].an, shapes[s].as,
                             shapes[s].a_transposed ? tstrides : NULL, 0, FILL_UNIFORM, -3, 3);
        c.in[1] =
            make_input(kFloatTypes[t], shapes[s].bn, shapes[s].bs, NULL, 0, FILL_AWAY, 0.5, 2);
        run_case(&c);
        release_all();
      }
}

/* The dense kernels' vector path: sizes around and between multiples of the vector (8 halves,
 * 4 floats), inputs and outputs starting 0-3 elements into their allocations (2/4/6 bytes for
 * halves): equal offsets take the scalar head then vectors, unequal ones the element path. */
static void test_unary_dense_paths_handle_offsets_and_odd_sizes(void) {
  static const int64_t sizes[] = {1, 8, 9, 15, 17, 33, 1000, 4103, 65541};
  static const int64_t offsets[][2] = {{0, 0}, {1, 1}, {2, 2}, {3, 3}, {1, 0}, {0, 3}, {2, 1}};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s)
      for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; ++o) {
        op_case c = {.op = "gelu", .attrs = no_attrs(), .num_inputs = 1, .scale = SCALE_REF};
        c.in[0] = make_input(kFloatTypes[t], 1, &sizes[s], NULL, offsets[o][0], FILL_UNIFORM, -3,
                             3);
        c.out_offset = offsets[o][1];
        run_case(&c);
        /* A cast changes the element size: the output's vector is 8 or 32 bytes. */
        op_case k = {.op = "cast", .attrs = no_attrs(), .num_inputs = 1, .exact = true};
        k.attrs.dtype = kFloatTypes[(t + 1) % NUM_FLOAT_TYPES];
        k.in[0] = c.in[0];
        k.out_offset = offsets[o][1];
        run_case(&k);
        release_all();
      }
}

static void test_binary_dense_paths_handle_offsets_and_odd_sizes(void) {
  static const int64_t sizes[] = {1, 9, 17, 1001, 4103, 65539};
  /* {a, b, out} element offsets. */
  static const int64_t offsets[][3] = {{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {3, 3, 3},
                                       {1, 0, 0}, {0, 2, 0}, {0, 0, 3}, {1, 2, 3}};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s)
      for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; ++o) {
        op_case c = {.op = (s + o) % 2 ? "div" : "sub", .attrs = no_attrs(), .num_inputs = 2,
                     .scale = SCALE_REF};
        c.in[0] = make_input(kFloatTypes[t], 1, &sizes[s], NULL, offsets[o][0], FILL_UNIFORM, -3,
                             3);
        c.in[1] = make_input(kFloatTypes[t], 1, &sizes[s], NULL, offsets[o][1], FILL_AWAY, 0.5, 2);
        c.out_offset = offsets[o][2];
        run_case(&c);
        release_all();
      }
}

/* The broadcast fast paths: a one-element operand on either side (dense kernel), a row
 * repeated over the leading dims on either side (row kernel: vectors when the row length is a
 * multiple of the vector and the pointers aligned, else element by element; rows wider and
 * narrower than a block), with offsets that turn vectors off. */
static void test_binary_broadcast_fast_paths_match_host(void) {
  static const struct {
    int an;
    int64_t as[4];
    int bn;
    int64_t bs[4];
    int64_t a_off, b_off, out_off;
  } shapes[] = {
      {2, {33, 65}, 1, {1}, 0, 0, 0},          {1, {1}, 2, {7, 4099}, 0, 0, 0},
      {2, {1, 1}, 1, {4103}, 0, 0, 1},         {2, {5, 1001}, 2, {1, 1}, 3, 1, 3},
      {2, {300, 1024}, 1, {1024}, 0, 0, 0},    {2, {77, 1000}, 1, {1000}, 0, 0, 0},
      {1, {64}, 3, {3, 5, 64}, 0, 0, 0},       {2, {77, 37}, 1, {37}, 0, 0, 0},
      {2, {9, 4104}, 2, {1, 4104}, 0, 0, 0},   {2, {300, 1024}, 1, {1024}, 0, 1, 0},
      {2, {300, 1024}, 1, {1024}, 2, 0, 0},    {3, {2, 3, 8}, 1, {8}, 0, 0, 0},
      {2, {1000, 16}, 1, {16}, 0, 0, 0},       {2, {3, 131072}, 1, {131072}, 0, 0, 0},
  };
  static const char *const ops[] = {"add", "sub", "mul", "div"};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
      for (size_t o = 0; o < sizeof ops / sizeof ops[0]; ++o) {
        op_case c = {.op = ops[o], .attrs = no_attrs(), .num_inputs = 2, .scale = SCALE_REF};
        c.in[0] = make_input(kFloatTypes[t], shapes[s].an, shapes[s].as, NULL, shapes[s].a_off,
                             FILL_UNIFORM, -3, 3);
        c.in[1] = make_input(kFloatTypes[t], shapes[s].bn, shapes[s].bs, NULL, shapes[s].b_off,
                             FILL_AWAY, 0.5, 2);
        c.out_offset = shapes[s].out_off;
        run_case(&c);
        release_all();
      }
}

/* ------------------------------------------------------------------------------------------
 * Reductions
 * ---------------------------------------------------------------------------------------- */

/* Row shapes: warp-per-row and block-per-row sizes around the 1024 switch, and a view whose
 * rows are 1100 elements apart (a slice of the last dimension). */
static const struct {
  int ndim;
  int64_t shape[4];
  int64_t row_stride; /* 0: contiguous */
} kRowShapes[] = {
    {1, {1}, 0},          {2, {1, 1}, 0},    {2, {7, 7}, 0},       {2, {5, 1023}, 0},
    {2, {3, 1024}, 0},    {2, {4, 1025}, 0}, {3, {2, 3, 4097}, 0}, {2, {2, 50001}, 0},
    {2, {6, 1023}, 1100}, {2, {300, 33}, 0}, {2, {4100, 1031}, 0},
};

static tbuf row_input(recap_dtype dtype, size_t s, double lo, double hi) {
  if (!kRowShapes[s].row_stride)
    return make_contiguous(dtype, kRowShapes[s].ndim, kRowShapes[s].shape, lo, hi);
  const int64_t strides[] = {kRowShapes[s].row_stride, 1};
  return make_input(dtype, 2, kRowShapes[s].shape, strides, 0, FILL_UNIFORM, lo, hi);
}

static void test_softmax_matches_host(void) {
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof kRowShapes / sizeof kRowShapes[0]; ++s)
      for (int scaled = 0; scaled < 2; ++scaled) {
        op_case c = {.op = "softmax", .attrs = no_attrs(), .num_inputs = 1};
        c.attrs.scale = scaled ? 0.125 : 0;
        c.in[0] = row_input(kFloatTypes[t], s, -4, 4);
        run_case(&c);
        release_all();
      }
}

static void test_causal_softmax_masks_and_zeroes_hidden_rows(void) {
  /* [.., rows, cols]: cols > rows, cols == rows, rows > cols (the first rows see nothing). */
  static const struct {
    int ndim;
    int64_t shape[4];
  } shapes[] = {{4, {2, 3, 7, 9}}, {2, {9, 4}}, {3, {2, 1500, 1500}}, {2, {1, 1}}};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
      op_case c = {.op = "softmax", .attrs = no_attrs(), .num_inputs = 1};
      c.attrs.causal = 1;
      c.attrs.scale = 0.5;
      c.in[0] = make_contiguous(kFloatTypes[t], shapes[s].ndim, shapes[s].shape, -4, 4);
      run_case(&c);
      release_all();
    }
}

static void test_layernorm_and_rmsnorm_match_host(void) {
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof kRowShapes / sizeof kRowShapes[0]; ++s)
      for (int variant = 0; variant < 3; ++variant) {
        /* 0: layernorm with bias, 1: layernorm without, 2: rmsnorm. */
        op_case c = {
            .op = variant == 2 ? "rmsnorm" : "layernorm", .attrs = no_attrs(), .scale = SCALE_NORM};
        c.attrs.eps = 1e-5;
        recap_dtype dtype = kFloatTypes[t];
        /* A mean offset makes the two-pass variance matter. */
        c.in[0] = row_input(dtype, s, -1, 3);
        int64_t d = kRowShapes[s].shape[kRowShapes[s].ndim - 1];
        c.in[1] = make_contiguous(dtype, 1, &d, 0.5, 1.5);
        c.num_inputs = 2;
        if (variant == 0) {
          c.in[2] = make_contiguous(dtype, 1, &d, -1, 1);
          c.num_inputs = 3;
        }
        run_case(&c);
        release_all();
      }
}

/* Row lengths 1..4097 (slots per thread 1, 2, 4; groups of lanes, warps, blocks; lengths that
 * are not a multiple of the vector take the streaming kernels), rows at element offsets 0-3 of
 * their storage (16-byte accesses only at 0), and row-strided views whose stride is a multiple
 * of the vector (so the vector path runs on rows that are not adjacent). Softmax also causal.
 * test_row_ops_match_host_at_every_register_class_boundary covers each geometry switch. */
static const int64_t kRowLengths[] = {1,   2,    3,    4,    5,    7,    8,    9,    15,   16,
                                      17,  31,   32,   33,   63,   64,   65,   127,  128,  129,
                                      255, 256,  257,  511,  512,  513,  1000, 1023, 1024, 1025,
                                      1536, 2047, 2048, 2049, 3000, 4095, 4096, 4097};

static tbuf row_case_input(recap_dtype dtype, int64_t rows, int64_t d, int variant, double lo,
                           double hi) {
  const int64_t shape[] = {rows, d};
  switch (variant) {
    case 0:
      return make_input(dtype, 2, shape, NULL, 0, FILL_UNIFORM, lo, hi);
    case 1: /* misaligned rows */
      return make_input(dtype, 2, shape, NULL, 1 + d % 3, FILL_UNIFORM, lo, hi);
    default: { /* rows 8 elements apart beyond their length */
      const int64_t strides[] = {d + 8, 1};
      return make_input(dtype, 2, shape, strides, 0, FILL_UNIFORM, lo, hi);
    }
  }
}

static void test_row_ops_match_host_for_every_row_length(void) {
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t l = 0; l < sizeof kRowLengths / sizeof kRowLengths[0]; ++l)
      for (int variant = 0; variant < 3; ++variant) {
        const recap_dtype dtype = kFloatTypes[t];
        const int64_t d = kRowLengths[l], rows = 3 + (int64_t)l % 5;
        op_case c = {.op = "softmax", .attrs = no_attrs(), .num_inputs = 1};
        c.attrs.scale = variant == 1 ? 0.125 : 0;
        c.attrs.causal = variant == 2;
        c.in[0] = row_case_input(dtype, rows, d, variant, -4, 4);
        c.out_offset = variant == 1;
        run_case(&c);

        for (int norm = 0; norm < 3; ++norm) {
          /* 0: layernorm with bias, 1: layernorm without, 2: rmsnorm. */
          op_case n = {.op = norm == 2 ? "rmsnorm" : "layernorm", .attrs = no_attrs(),
                       .scale = SCALE_NORM, .num_inputs = norm == 0 ? 3 : 2};
          n.attrs.eps = 1e-5;
          n.in[0] = row_case_input(dtype, rows, d, variant, -1, 3);
          n.in[1] = make_contiguous(dtype, 1, &d, 0.5, 1.5);
          if (norm == 0) n.in[2] = make_contiguous(dtype, 1, &d, -1, 1);
          run_case(&n);
        }
        release_all();
      }
}

/* Many rows (several per warp-mode block and grid-stride trips), rows too long for registers,
 * and a causal softmax whose first rows see nothing, on the register kernels' vector path. */
static void test_row_ops_match_host_for_large_and_long_rows(void) {
  static const int64_t shapes[][2] = {{20000, 64}, {1030, 1024}, {3, 6000},
                                      {3, 12000},  {3, 20000},   {2, 40000}};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    const recap_dtype dtype = kFloatTypes[t];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
      op_case c = {.op = "softmax", .attrs = no_attrs(), .num_inputs = 1};
      c.in[0] = make_contiguous(dtype, 2, shapes[s], -4, 4);
      run_case(&c);
      op_case n = {.op = "layernorm", .attrs = no_attrs(), .scale = SCALE_NORM, .num_inputs = 3};
      n.attrs.eps = 1e-5;
      n.in[0] = make_contiguous(dtype, 2, shapes[s], -1, 3);
      n.in[1] = make_contiguous(dtype, 1, &shapes[s][1], 0.5, 1.5);
      n.in[2] = make_contiguous(dtype, 1, &shapes[s][1], -1, 1);
      run_case(&n);
      n.op = "rmsnorm";
      n.num_inputs = 2;
      run_case(&n);
      release_all();
    }
    op_case c = {.op = "softmax", .attrs = no_attrs(), .num_inputs = 1};
    c.attrs.causal = 1;
    c.in[0] = make_contiguous(dtype, 3, (const int64_t[]){2, 1100, 1024}, -4, 4);
    run_case(&c);
    release_all();
  }
}

/* The register kernels' group shapes: several rows per warp (groups of 4-16 lanes; row counts
 * that leave the last groups of a warp without a row), a warp of 16 slots per lane (rows of
 * 2049-4096 halves), and leading dims that do not merge into one row stride (rows found by
 * decomposing the view, 16-byte aligned so the register kernels still take them). */
static void test_row_ops_match_host_for_every_group_shape(void) {
  static const int64_t shapes[][2] = {{37, 128}, {1001, 64}, {13, 8},  {7, 24},
                                      {5, 2560}, {67, 4096}, {9, 3072}, {3, 256}};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    const recap_dtype dtype = kFloatTypes[t];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0] + 1; ++s) {
      const bool strided = s == sizeof shapes / sizeof shapes[0];
      const int64_t d = strided ? 64 : shapes[s][1];
      for (int causal = 0; causal < 2; ++causal) {
        op_case c = {.op = "softmax", .attrs = no_attrs(), .num_inputs = 1};
        c.attrs.causal = causal;
        c.attrs.scale = 0.25;
        if (strided) {
          const int64_t shape[] = {3, 5, d}, strides[] = {5 * (d + 8) + 16, d + 8, 1};
          c.in[0] = make_input(dtype, 3, shape, strides, 0, FILL_UNIFORM, -4, 4);
        } else {
          c.in[0] = make_contiguous(dtype, 2, shapes[s], -4, 4);
        }
        run_case(&c);
      }
      for (int norm = 0; norm < 3; ++norm) {
        /* 0: layernorm with bias, 1: layernorm without, 2: rmsnorm. */
        op_case n = {.op = norm == 2 ? "rmsnorm" : "layernorm", .attrs = no_attrs(),
                     .scale = SCALE_NORM, .num_inputs = norm == 0 ? 3 : 2};
        n.attrs.eps = 1e-5;
        if (strided) {
          const int64_t shape[] = {3, 5, d}, strides[] = {5 * (d + 8) + 16, d + 8, 1};
          n.in[0] = make_input(dtype, 3, shape, strides, 0, FILL_UNIFORM, -1, 3);
        } else {
          n.in[0] = make_contiguous(dtype, 2, shapes[s], -1, 3);
        }
        n.in[1] = make_contiguous(dtype, 1, &d, 0.5, 1.5);
        if (norm == 0) n.in[2] = make_contiguous(dtype, 1, &d, -1, 1);
        run_case(&n);
      }
      release_all();
    }
  }
}

/* The register kernels' size classes on the 16-byte path: row lengths 8 elements below, at
 * and above the points where the geometry switches (halves: a warp up to 1024, then
 * blocks of 64, 128, 256, 512, 1024 threads up to 2048, 4096, 8192, 16384, 32768, then the
 * streaming kernel; floats switch at half those lengths), softmax plain and causal, layernorm
 * with and without bias, rmsnorm; and, in f16, more rows of a block class than the grid has
 * blocks (65535), so that blocks run several rows each (the block reductions' scratch is reused
 * from row to row). */
static void test_row_ops_match_host_at_every_register_class_boundary(void) {
  static const int64_t lengths[] = {248,  256,  264,   504,   512,   520,   1016,  1024,
                                    1032, 2040, 2048,  2056,  4088,  4096,  4104,  8184,
                                    8192, 8200, 16376, 16384, 16392, 32760, 32768, 32776};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    const recap_dtype dtype = kFloatTypes[t];
    const bool with_many = dtype == RECAP_DTYPE_F16;
    for (size_t l = 0; l < sizeof lengths / sizeof lengths[0] + with_many; ++l) {
      const bool many = l == sizeof lengths / sizeof lengths[0];
      const int64_t shape[] = {many ? 65600 : 3, many ? 1032 : lengths[l]};
      for (int causal = 0; causal < 2 - many; ++causal) {
        op_case c = {.op = "softmax", .attrs = no_attrs(), .num_inputs = 1};
        c.attrs.causal = causal;
        c.attrs.scale = 0.5;
        c.in[0] = make_contiguous(dtype, 2, shape, -4, 4);
        run_case(&c);
      }
      for (int norm = 0; norm < 3; norm += 1 + many) {
        /* 0: layernorm with bias, 1: layernorm without, 2: rmsnorm. */
        op_case n = {.op = norm == 2 ? "rmsnorm" : "layernorm", .attrs = no_attrs(),
                     .scale = SCALE_NORM, .num_inputs = norm == 0 ? 3 : 2};
        n.attrs.eps = 1e-5;
        n.in[0] = make_contiguous(dtype, 2, shape, -1, 3);
        n.in[1] = make_contiguous(dtype, 1, &shape[1], 0.5, 1.5);
        if (norm == 0) n.in[2] = make_contiguous(dtype, 1, &shape[1], -1, 1);
        run_case(&n);
      }
      release_all();
    }
  }
}

/* The norms' row spread (kernels/reduce.cu plan_norm): few rows of 33-256 slots of 16 bytes run
 * one slot a thread in a block of 64, 128 or 256 threads; more than 2^18 / threads rows keep
 * the warp (33-128 slots) or the block of 64 x 4 slots (129-256). Row counts below, at and one
 * past the switch, row lengths with and without padding slots in the block, rows of a strided
 * view, three dtypes, every element against the host. */
static void test_norms_match_host_on_both_sides_of_the_row_spread_switch(void) {
  static const int64_t slot_counts[] = {33, 64, 100, 128, 200, 256};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    const recap_dtype dtype = kFloatTypes[t];
    const int64_t vec = 16 / (int64_t)recap_dtype_size(dtype);
    for (size_t l = 0; l < sizeof slot_counts / sizeof slot_counts[0]; ++l) {
      const int64_t slots = slot_counts[l], d = slots * vec;
      const int64_t limit = (1 << 18) / (slots <= 64 ? 64 : (slots <= 128 ? 128 : 256));
      const int64_t row_counts[] = {7, limit, limit + 1};
      for (size_t r = 0; r < sizeof row_counts / sizeof row_counts[0]; ++r) {
        const bool few = r == 0;
        for (int norm = 0; norm < 3; norm += few ? 1 : 2) {
          /* 0: layernorm with bias, 1: layernorm without, 2: rmsnorm. */
          op_case n = {.op = norm == 2 ? "rmsnorm" : "layernorm",
                       .attrs = no_attrs(),
                       .scale = SCALE_NORM,
                       .num_inputs = norm == 0 ? 3 : 2};
          n.attrs.eps = 1e-5;
          n.in[0] = row_case_input(dtype, row_counts[r], d, few ? 2 : 0, -1, 3);
          n.in[1] = make_contiguous(dtype, 1, &d, 0.5, 1.5);
          if (norm == 0) n.in[2] = make_contiguous(dtype, 1, &d, -1, 1);
          run_case(&n);
        }
        release_all();
      }
    }
  }
}

#if RECAP_WITH_CUDA
/* recap__cuda_gemm_bias_act (the pass after a GEMM: out = act(out + bias) + residual) against
 * the host's recap__gemm_activate, for every activation and float dtype, with and without bias
 * and residual, on the 16-byte kernel (rows of a multiple of 16 bytes) and the element kernel
 * (other row lengths, an output one element off alignment). Inputs span [-8, 8], across the
 * device gelu's cut-off at |x| = 5.6, plus NaN, +-inf, +-0 and large values. An element passes
 * when |cuda - host| <= 1e-7 + rtol * (|x| + |bias| + |residual| + |host|) with the dtype's
 * rtol: the size of the terms, because the host's erf gelu, 0.5 x (1 + erff(x / sqrt 2)),
 * cancels for x < -2 and is then further from the exact value than the device's form is; and
 * the size of the result, because two f32 values a few ulp apart can round to neighbouring
 * elements of a 16-bit type (sigmoid(-0.0054) = 0.4986573 lies halfway between two f16
 * values: seen on the H100 as 0.498535 against the host's 0.498779). NaN must give
 * NaN; +inf gives +inf; -inf gives NaN on the host (inf * 0) and the limit 0 for the device
 * gelu, which the test expects. */
static void test_gemm_epilogue_matches_host_activation(void) {
  static const int64_t shapes[][2] = {{3, 8}, {5, 24}, {64, 136}, {7, 13}, {2, 1}, {9, 4}};
  static const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e4f, -1e4f, 5.6f, -5.6f};
  const int nspecial = (int)(sizeof specials / sizeof specials[0]);
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    const recap_dtype dtype = kFloatTypes[t];
    const size_t es = recap_dtype_size(dtype);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
      for (int act = RECAP_ACT_NONE; act <= RECAP_ACT_TANH; ++act)
        for (int v = 0; v < 5; ++v) {
          const bool with_bias = v & 1, with_residual = v & 2, off = v == 4;
          const int64_t rows = shapes[s][0], cols = shapes[s][1], n = rows * cols;
          tbuf x = make_input(dtype, 2, shapes[s], NULL, off, FILL_UNIFORM, -8, 8);
          tbuf b = make_contiguous(dtype, 1, &cols, -1, 1);
          tbuf r = make_contiguous(dtype, 2, shapes[s], -1, 1);
          for (int k = 0; k < nspecial && k < n; ++k)
            recap__store_f32(x.host, dtype, off + k * 7 % n, specials[k]);
          to_device(x.dev, x.host, (size_t)x.storage * es);
          const char *xh = (const char *)x.host + off * (int64_t)es;
          char *xd = (char *)x.dev + off * (int64_t)es;
          CHECK_OK(recap__cuda_gemm_bias_act(
              xd, with_bias ? b.dev : NULL, with_residual ? r.dev : NULL, dtype, rows, cols,
              (recap_activation)act, recap_stream_native(cuda_stream)));
          void *got = host_alloc((size_t)n * es);
          to_host(got, xd, (size_t)n * es);
          int64_t bad = 0;
          for (int64_t i = 0; i < n; ++i) {
            const float in = recap__load_f32(xh, dtype, i);
            const float bi = with_bias ? recap__load_f32(b.host, dtype, i % cols) : 0.0f;
            const float re = with_residual ? recap__load_f32(r.host, dtype, i) : 0.0f;
            float want = recap__gemm_activate((recap_activation)act, in + bi) + re;
            if (act == RECAP_ACT_GELU && isinf(in + bi) && in + bi < 0) want = 0.0f + re;
            /* Rounded to the dtype, as the kernels store it (room for any dtype's element). */
            int64_t rounded;
            recap__store_f32(&rounded, dtype, 0, want);
            const double g = recap__load_f32(got, dtype, i),
                         w = recap__load_f32(&rounded, dtype, 0);
            const double tol =
                1e-7 + rtol_of(dtype) * (fabs((double)in) + fabs((double)bi) + fabs((double)re) +
                                         (isfinite(w) ? fabs(w) : 0.0));
            const bool ok = (isnan(g) && isnan(w)) || g == w || fabs(g - w) <= tol;
            if (!ok && bad++ < 5)
              fprintf(stderr,
                      "\n  epilogue act %d [%s] %lldx%lld v%d: element %lld (x %.9g): cuda %.9g "
                      "host %.9g",
                      act, recap_dtype_name(dtype), (long long)rows, (long long)cols, v,
                      (long long)i, (double)in, g, w);
          }
          CU_ASSERT_EQUAL(bad, 0);
          release_all();
        }
  }
}
#endif

static void test_sum_and_mean_match_host(void) {
  static const char *const ops[] = {"sum", "mean"};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof kRowShapes / sizeof kRowShapes[0]; ++s)
      for (int o = 0; o < 2; ++o) {
        op_case c = {.op = ops[o], .attrs = no_attrs(), .num_inputs = 1, .scale = SCALE_ROW_SUM};
        c.in[0] = row_input(kFloatTypes[t], s, -2, 2);
        run_case(&c);
        release_all();
      }
}

/* ------------------------------------------------------------------------------------------
 * Shape and data movement
 * ---------------------------------------------------------------------------------------- */

static const recap_dtype kAllTypes[] = {RECAP_DTYPE_F32, RECAP_DTYPE_F16, RECAP_DTYPE_BF16,
                                        RECAP_DTYPE_I32, RECAP_DTYPE_I64};
enum { NUM_ALL_TYPES = 5 };

static tbuf any_input(recap_dtype dtype, int ndim, const int64_t *shape, const int64_t *strides) {
  bool integer = dtype == RECAP_DTYPE_I32 || dtype == RECAP_DTYPE_I64;
  return make_input(dtype, ndim, shape, strides, 0, integer ? FILL_INTEGERS : FILL_UNIFORM,
                    integer ? -1000000 : -3, integer ? 1000000 : 3);
}

static void set_sizes(recap_op_attrs *a, int n, const int64_t *v) {
  a->num_sizes = n;
  for (int i = 0; i < n; ++i) a->sizes[i] = v[i];
}

static void test_copy_family_moves_every_element_exactly(void) {
  for (int t = 0; t < NUM_ALL_TYPES; ++t) {
    recap_dtype dtype = kAllTypes[t];
    const int64_t s2[] = {6, 35}, s4[] = {2, 3, 5, 7}, big[] = {33, 1025}, s3[] = {4, 7, 9};
    const int64_t tshape[] = {129, 37}, tstrides[] = {1, 129}, wide[] = {10, 1023};
    op_case c = {.attrs = no_attrs(), .num_inputs = 1, .exact = true};

    c.op = "reshape";
    c.in[0] = any_input(dtype, 2, s2, NULL);
    set_sizes(&c.attrs, 3, (const int64_t[]){5, 7, 6});
    run_case(&c);
    c.in[0] = any_input(dtype, 2, tshape, tstrides); /* reshape of a non-contiguous view */
    set_sizes(&c.attrs, 1, (const int64_t[]){129 * 37});
    run_case(&c);

    c.attrs = no_attrs();
    c.op = "permute";
    c.in[0] = any_input(dtype, 4, s4, NULL);
    set_sizes(&c.attrs, 4, (const int64_t[]){2, 0, 3, 1});
    run_case(&c);

    c.attrs = no_attrs();
    c.op = "transpose";
    c.in[0] = any_input(dtype, 2, big, NULL);
    c.attrs.sizes[0] = 0;
    c.attrs.sizes[1] = 1;
    run_case(&c);
    c.in[0] = any_input(dtype, 3, s3, NULL);
    c.attrs.sizes[0] = -2;
    c.attrs.sizes[1] = -1;
    run_case(&c);

    c.attrs = no_attrs();
    c.op = "slice";
    c.in[0] = any_input(dtype, 2, wide, NULL);
    c.attrs.dim = 1;
    c.attrs.start = 3;
    c.attrs.end = 1000;
    run_case(&c);
    c.attrs.dim = 0;
    c.attrs.start = 2;
    c.attrs.end = 9;
    run_case(&c);

    c.attrs = no_attrs();
    c.op = "split";
    c.in[0] = any_input(dtype, 2, (const int64_t[]){7, 100}, NULL);
    c.attrs.dim = 1;
    set_sizes(&c.attrs, 3, (const int64_t[]){30, 1, 69});
    run_case(&c);

    c.attrs = no_attrs();
    c.op = "copy";
    c.in[0] = any_input(dtype, 2, tshape, tstrides);
    run_case(&c);
    c.in[0] = any_input(dtype, 1, (const int64_t[]){(1 << 20) + 1}, NULL);
    run_case(&c);
    release_all();
  }
}

/* The copy kernels' fast paths, for every dtype: rows (last dim contiguous on both sides, in
 * 16-, 8-, 4-byte words or elements as the row length and offsets allow), tiled transposes
 * (edges that are not multiples of the tile, outer dims along the grid), and concat slabs. */
static void test_copy_fast_paths_move_every_element_exactly(void) {
  for (int t = 0; t < NUM_ALL_TYPES; ++t) {
    recap_dtype dtype = kAllTypes[t];
    op_case c = {.attrs = no_attrs(), .num_inputs = 1, .exact = true};

    /* [B, S, H, Dh] -> [B, H, S, Dh] for several head sizes. */
    static const int64_t dh[] = {64, 63, 2, 6, 1};
    for (size_t i = 0; i < sizeof dh / sizeof dh[0]; ++i) {
      c.attrs = no_attrs();
      c.op = "permute";
      c.in[0] = any_input(dtype, 4, (const int64_t[]){2, 33, 5, dh[i]}, NULL);
      set_sizes(&c.attrs, 4, (const int64_t[]){0, 2, 1, 3});
      run_case(&c);
    }
    /* The last dim moved: tiled transposes, with and without outer dims. */
    c.attrs = no_attrs();
    c.op = "transpose";
    c.in[0] = any_input(dtype, 2, (const int64_t[]){33, 65}, NULL);
    c.attrs.sizes[0] = 0;
    c.attrs.sizes[1] = 1;
    run_case(&c);
    c.in[0] = any_input(dtype, 3, (const int64_t[]){3, 40, 70}, NULL);
    c.attrs.sizes[0] = 1;
    c.attrs.sizes[1] = 2;
    run_case(&c);
    c.attrs = no_attrs();
    c.op = "permute";
    c.in[0] = any_input(dtype, 4, (const int64_t[]){2, 3, 5, 7}, NULL);
    set_sizes(&c.attrs, 4, (const int64_t[]){3, 1, 0, 2});
    run_case(&c);
    c.in[0] = any_input(dtype, 4, (const int64_t[]){4, 9, 3, 130}, NULL);
    set_sizes(&c.attrs, 4, (const int64_t[]){3, 0, 2, 1});
    run_case(&c);
    c.in[0] = any_input(dtype, 3, (const int64_t[]){64, 256, 96}, NULL);
    set_sizes(&c.attrs, 3, (const int64_t[]){2, 0, 1});
    run_case(&c);

    /* Slices of the last dim starting 0-3 and 8 elements in. */
    for (int64_t start = 0; start < 9; start += start == 3 ? 5 : 1) {
      c.attrs = no_attrs();
      c.op = "slice";
      c.in[0] = any_input(dtype, 2, (const int64_t[]){9, 200}, NULL);
      c.attrs.dim = 1;
      c.attrs.start = start;
      c.attrs.end = start + 128;
      run_case(&c);
    }
    /* A fused QKV projection split into its three parts. */
    c.attrs = no_attrs();
    c.op = "split";
    c.in[0] = any_input(dtype, 3, (const int64_t[]){4, 128, 3 * 96}, NULL);
    c.attrs.dim = 2;
    set_sizes(&c.attrs, 3, (const int64_t[]){96, 96, 96});
    run_case(&c);
    /* Large enough for many blocks per path. */
    c.attrs = no_attrs();
    c.op = "permute";
    c.in[0] = any_input(dtype, 4, (const int64_t[]){4, 128, 16, 64}, NULL);
    set_sizes(&c.attrs, 4, (const int64_t[]){0, 2, 1, 3});
    run_case(&c);
    c.op = "transpose";
    c.attrs = no_attrs();
    c.in[0] = any_input(dtype, 2, (const int64_t[]){1000, 1030}, NULL);
    c.attrs.sizes[0] = 0;
    c.attrs.sizes[1] = 1;
    run_case(&c);
    release_all();

    /* Concat along the last dim (row slabs) and along a middle dim. */
    op_case k = {.op = "concat", .attrs = no_attrs(), .num_inputs = 2, .exact = true};
    k.attrs.dim = 1;
    k.in[0] = any_input(dtype, 2, (const int64_t[]){40, 64}, NULL);
    k.in[1] = any_input(dtype, 2, (const int64_t[]){40, 72}, NULL);
    run_case(&k);
    k.in[1] = any_input(dtype, 2, (const int64_t[]){40, 3}, NULL);
    run_case(&k);
    k.in[0] = any_input(dtype, 3, (const int64_t[]){3, 5, 16}, NULL);
    k.in[1] = any_input(dtype, 3, (const int64_t[]){3, 7, 16}, NULL);
    run_case(&k);
    release_all();
  }
}

static void test_concat_matches_host(void) {
  for (int t = 0; t < NUM_ALL_TYPES; ++t) {
    recap_dtype dtype = kAllTypes[t];
    op_case c = {.op = "concat", .attrs = no_attrs(), .num_inputs = 3, .exact = true};
    c.attrs.dim = 1;
    c.in[0] = any_input(dtype, 2, (const int64_t[]){4, 7}, NULL);
    c.in[1] = any_input(dtype, 2, (const int64_t[]){4, 1}, NULL);
    c.in[2] = any_input(dtype, 2, (const int64_t[]){4, 1023}, (const int64_t[]){1, 4});
    run_case(&c);
    c.attrs.dim = 0;
    c.num_inputs = 2;
    c.in[0] = any_input(dtype, 2, (const int64_t[]){2, 5}, NULL);
    c.in[1] = any_input(dtype, 2, (const int64_t[]){3, 5}, NULL);
    run_case(&c);
    release_all();
  }
}

static void test_fill_matches_host_for_every_dtype(void) {
  for (int t = 0; t < NUM_ALL_TYPES; ++t) {
    bool integer = kAllTypes[t] == RECAP_DTYPE_I32 || kAllTypes[t] == RECAP_DTYPE_I64;
    const int64_t shapes[][2] = {{1, 1}, {1, 1023}, {4097, 3}};
    for (int s = 0; s < 3; ++s) {
      op_case c = {.op = "fill", .attrs = no_attrs(), .num_inputs = 0, .exact = true};
      c.attrs.dtype = kAllTypes[t];
      c.attrs.value = integer ? -7 : 2.71828;
      set_sizes(&c.attrs, 2, shapes[s]);
      run_case(&c);
    }
  }
  release_all();
}

static void test_embedding_gathers_rows_like_host(void) {
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    recap_dtype dtype = kFloatTypes[t];
    op_case c = {.op = "embedding", .attrs = no_attrs(), .num_inputs = 2, .exact = true};
    c.in[0] = make_contiguous(dtype, 2, (const int64_t[]){1000, 129}, -1, 1);
    c.in[1] =
        make_input(RECAP_DTYPE_I32, 2, (const int64_t[]){7, 13}, NULL, 0, FILL_INTEGERS, 0, 1000);
    run_case(&c);
    c.in[1] =
        make_input(RECAP_DTYPE_I64, 1, (const int64_t[]){1023}, NULL, 0, FILL_INTEGERS, 0, 1000);
    run_case(&c);
    /* A transposed table view and strided ids. */
    c.in[0] = make_input(dtype, 2, (const int64_t[]){500, 7}, (const int64_t[]){1, 500}, 0,
                         FILL_UNIFORM, -1, 1);
    c.in[1] = make_input(RECAP_DTYPE_I32, 1, (const int64_t[]){9}, (const int64_t[]){3}, 0,
                         FILL_INTEGERS, 0, 500);
    run_case(&c);
    release_all();
  }
}

static void test_rope_matches_host_for_both_position_forms(void) {
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    recap_dtype dtype = kFloatTypes[t];
    op_case c = {.op = "rope", .attrs = no_attrs(), .num_inputs = 2, .scale = SCALE_ROPE};
    c.attrs.rope_base = 10000;
    /* [B, S, H, Dh] with a position per row, up to 5000 (large angles). */
    c.in[0] = make_contiguous(dtype, 4, (const int64_t[]){2, 9, 4, 64}, -2, 2);
    c.in[1] = make_input(RECAP_DTYPE_I32, 1, (const int64_t[]){9}, NULL, 0, FILL_INTEGERS, 0, 5000);
    run_case(&c);
    /* [S, H, Dh] with a start position. */
    c.in[0] = make_contiguous(dtype, 3, (const int64_t[]){17, 3, 128}, -2, 2);
    c.in[1] =
        make_input(RECAP_DTYPE_I32, 1, (const int64_t[]){1}, NULL, 0, FILL_INTEGERS, 100, 4000);
    run_case(&c);
    /* A [B, H, S, Dh] buffer read as [B, S, H, Dh] (strided), Dh = 6, another base. */
    c.attrs.rope_base = 500000;
    c.in[0] = make_input(dtype, 4, (const int64_t[]){3, 5, 2, 6}, (const int64_t[]){60, 6, 30, 1},
                         0, FILL_UNIFORM, -2, 2);
    c.in[1] =
        make_input(RECAP_DTYPE_I32, 1, (const int64_t[]){5}, NULL, 0, FILL_INTEGERS, 0, 100000);
    run_case(&c);
    release_all();
  }
}

/* ------------------------------------------------------------------------------------------
 * Attention and the KV cache
 * ---------------------------------------------------------------------------------------- */

static tbuf scalar_i32(int32_t value) {
  tbuf b = make_input(RECAP_DTYPE_I32, 1, (const int64_t[]){1}, NULL, 0, FILL_INTEGERS, 0, 1);
  ((int32_t *)b.host)[0] = value;
  to_device(b.dev, b.host, sizeof(int32_t));
  return b;
}

/* One attention case: q [b, h, sq, dh]; k, v [b, hkv, sk, dh]; len < 0: no len input. k is
 * read in the KV-cache layout [B, Sk, Hkv, Dh], v is contiguous, and with q_in_qkv q is a
 * head-split view of a fused [B, Sq, 3 * H * Dh] projection (the transformer block's layout:
 * rows 3 * H * Dh elements apart). */
typedef struct {
  int64_t b, h, hkv, sq, sk, dh;
  int causal;
  int len;
  double scale;
  bool q_in_qkv;
} attention_case;

/* Runs each case for every float dtype through run_case: every element against the host
 * reference, then capture and two bit-exact replays. The output starts out_offset elements
 * into its allocation. */
static void run_attention_cases(const attention_case *cases, size_t count, int64_t out_offset) {
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t i = 0; i < count; ++i) {
      const attention_case *a = &cases[i];
      recap_dtype dtype = kFloatTypes[t];
      op_case c = {
          .op = "attention", .attrs = no_attrs(), .num_inputs = 3, .scale = SCALE_ATTENTION};
      c.attrs.causal = a->causal;
      c.attrs.scale = a->scale;
      c.out_offset = out_offset;
      const int64_t qshape[] = {a->b, a->h, a->sq, a->dh};
      const int64_t qkv_row = 3 * a->h * a->dh;
      if (a->q_in_qkv)
        c.in[0] = make_input(dtype, 4, qshape,
                             (const int64_t[]){a->sq * qkv_row, a->dh, qkv_row, 1}, 0,
                             FILL_UNIFORM, -2, 2);
      else
        c.in[0] = make_contiguous(dtype, 4, qshape, -2, 2);
      const int64_t kvshape[] = {a->b, a->hkv, a->sk, a->dh};
      c.in[1] = make_input(dtype, 4, kvshape,
                           (const int64_t[]){a->sk * a->hkv * a->dh, a->dh, a->hkv * a->dh, 1}, 0,
                           FILL_UNIFORM, -2, 2);
      c.in[2] = make_contiguous(dtype, 4, kvshape, -1, 1);
      if (a->len >= 0) {
        c.in[3] = scalar_i32(a->len);
        c.num_inputs = 4;
      }
      run_case(&c);
      release_all();
    }
}

static void test_attention_matches_host(void) {
  static const attention_case cases[] = {
      {2, 4, 2, 33, 1025, 64, 0, -1, 0, false},  /* GQA, prefill-sized, default scale */
      {2, 4, 4, 33, 1025, 64, 1, 700, 0, false}, /* causal over a partly filled cache */
      {1, 1, 1, 1, 4097, 7, 0, -1, 0.3, false},  /* decode, odd head dim */
      {1, 2, 1, 5, 37, 300, 1, -1, 0, false},    /* head dim over one 256-dim chunk */
      {1, 3, 3, 4, 50, 128, 1, 2, 0, false},     /* len < Sq: early queries see no key */
      {2, 2, 2, 3, 16, 32, 0, 0, 0, false},      /* len == 0: all zeros */
      {3, 8, 2, 1, 129, 256, 1, 129, 0, false},  /* decode, GQA 4:1 */
      {2, 4, 2, 1, 600, 128, 1, 513, 0, false},  /* decode kernel shape (16 warps, 4 keys/step) */
      {1, 2, 1, 3, 300, 300, 1, 299, 0, false},  /* the same with two dim chunks */
  };
  run_attention_cases(cases, sizeof cases / sizeof cases[0], 0);
}

/* Shapes of the tensor-core prefill kernel (f16/bf16, Dh 64 or 128, Sq >= 16; f32 runs the
 * same cases on the CUDA-core kernel): query tiles of 64 rows with a partial last tile, key
 * tiles of 64 with a partial last tile, causal tiles on and off the diagonal, GQA, a device
 * length shorter than the keys and than the queries. */
static void test_attention_prefill_tiles_match_host(void) {
  static const attention_case cases[] = {
      {2, 4, 2, 16, 16, 64, 1, -1, 0, true},       /* one partial query tile, GQA 2:1 */
      {1, 2, 2, 64, 64, 128, 0, -1, 0, false},     /* exactly one tile each way */
      {2, 4, 1, 128, 128, 64, 1, -1, 0, true},     /* the transformer block's shape, GQA 4:1 */
      {1, 3, 3, 129, 200, 128, 1, 190, 0.2, true}, /* one-row last tile, len < Sk, own scale */
      {1, 2, 1, 300, 300, 64, 0, 250, 0, false},   /* keys end inside a tile */
      {1, 2, 2, 300, 333, 128, 1, -1, 0, true},    /* causal with Sk > Sq: shifted diagonal */
      {1, 2, 2, 100, 64, 64, 1, 40, 0, false},     /* len < Sq: the first 60 queries see none */
      {1, 2, 2, 20, 64, 128, 0, 0, 0, false},      /* len == 0: all zeros */
      {1, 1, 1, 64, 4096, 64, 0, 3000, 0, false},  /* many key tiles through the pipeline */
  };
  run_attention_cases(cases, sizeof cases / sizeof cases[0], 0);
}

/* The tensor-core prefill kernel in both grid orders (RECAP_ATTENTION_TILES_OUTER, read at
 * each launch; small causal grids run query tiles outermost unless forced): one tile of keys
 * (nothing prefetched) and several, Sq and Sk off the tile sizes, causal and not, Sq != Sk both
 * ways, warps that see half a tile or none of it, 16-byte and 4-byte output stores, f16 and
 * bf16 (f32 takes the other kernel), Dh 64 and 128. */
static void test_attention_prefill_grid_orders_match_host(void) {
  static const attention_case cases[] = {
      {2, 4, 2, 128, 128, 64, 1, -1, 0, true},     /* the transformer block's shape, GQA 2:1 */
      {1, 2, 2, 100, 100, 128, 1, -1, 0, true},    /* causal, Sq = Sk = 100 */
      {1, 2, 2, 70, 70, 64, 0, -1, 0, true},       /* not causal, partial tiles both ways */
      {1, 2, 1, 40, 200, 64, 1, 190, 0, false},    /* causal, Sq < Sk, len < Sk */
      {1, 1, 1, 17, 300, 128, 0, 250, 0.3, false}, /* keys end inside a tile, five tiles */
      {1, 2, 2, 48, 20, 64, 1, -1, 0, false},      /* causal, Sk < Sq: early rows see none */
      {1, 2, 2, 33, 64, 64, 1, 0, 0, false},       /* len == 0: all zeros */
  };
  /* Two elements (4 bytes) into its allocation: the output rows are not 16-byte aligned, so
   * the kernel stores 4-byte pairs instead of staged 16-byte rows. */
  static const attention_case unaligned[] = {{1, 2, 2, 70, 70, 128, 1, -1, 0, true}};
  static const char *const orders[] = {"1", "0"};
  for (size_t i = 0; i < sizeof orders / sizeof orders[0]; ++i) {
    CU_ASSERT_EQUAL_FATAL(setenv("RECAP_ATTENTION_TILES_OUTER", orders[i], 1), 0);
    const unsigned failures = CU_get_number_of_failures();
    run_attention_cases(cases, sizeof cases / sizeof cases[0], 0);
    run_attention_cases(unaligned, 1, 2);
    if (CU_get_number_of_failures() != failures)
      fprintf(stderr, "\n  (the failures above ran with RECAP_ATTENTION_TILES_OUTER=%s)\n",
              orders[i]);
  }
  unsetenv("RECAP_ATTENTION_TILES_OUTER");
}

/* Shapes of the decode kernel split over keys by a cluster (few query rows, long caches):
 * every split busy, most splits empty (len 1, len 0), GQA, Dh 128, two query rows. */
static void test_attention_decode_splits_match_host(void) {
  static const attention_case cases[] = {
      {2, 8, 8, 1, 4096, 64, 0, 4000, 0, false},  /* 16 rows over 8 splits of 500 keys */
      {1, 8, 2, 1, 4096, 128, 1, 4096, 0, false}, /* GQA 4:1, the whole cache */
      {4, 8, 8, 2, 1024, 64, 1, 1000, 0, false},  /* two causal query rows */
      {8, 8, 8, 1, 1024, 64, 0, 1, 0, false},     /* one key: seven splits see none */
      {1, 2, 2, 1, 2048, 64, 1, 0, 0, false},     /* no key at all: zeros */
      {1, 4, 4, 1, 777, 40, 0, -1, 0.5, false},   /* head dim off the fast sizes */
  };
  run_attention_cases(cases, sizeof cases / sizeof cases[0], 0);
}

/* Host-side state of one kv_append + attention decode step sequence. */
typedef struct {
  int64_t b, h, hkv, smax, t, dh;
} kv_dims;

static recap_op_call kv_append_call(const kv_dims *d, void *cache, void *rows, void *pos,
                                    recap_dtype dtype) {
  recap_op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find("kv_append");
  call.num_inputs = 3;
  call.inputs[0] = (recap_tensor){cache, dtype, 4, {d->b, d->smax, d->hkv, d->dh}, {0}};
  call.inputs[1] = (recap_tensor){rows, dtype, 4, {d->b, d->t, d->hkv, d->dh}, {0}};
  call.inputs[2] = (recap_tensor){pos, RECAP_DTYPE_I32, 1, {1}, {1}};
  recap__tensor_set_contiguous(&call.inputs[0]);
  recap__tensor_set_contiguous(&call.inputs[1]);
  CHECK_OK(recap__op_infer(&call));
  call.outputs[0].data = cache;
  return call;
}

static recap_op_call attention_call(const kv_dims *d, void *q, void *kcache, void *vcache,
                                    void *len, void *out, recap_dtype dtype) {
  recap_op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find("attention");
  call.num_inputs = 4;
  call.attrs.causal = 1;
  call.inputs[0] = (recap_tensor){q, dtype, 4, {d->b, d->h, d->t, d->dh}, {0}};
  recap__tensor_set_contiguous(&call.inputs[0]);
  /* The caches [B, Smax, Hkv, Dh] seen as [B, Hkv, Smax, Dh]. */
  const int64_t strides[4] = {d->smax * d->hkv * d->dh, d->dh, d->hkv * d->dh, 1};
  call.inputs[1] = (recap_tensor){kcache, dtype, 4, {d->b, d->hkv, d->smax, d->dh}, {0}};
  call.inputs[2] = (recap_tensor){vcache, dtype, 4, {d->b, d->hkv, d->smax, d->dh}, {0}};
  memcpy(call.inputs[1].strides, strides, sizeof strides);
  memcpy(call.inputs[2].strides, strides, sizeof strides);
  call.inputs[3] = (recap_tensor){len, RECAP_DTYPE_I32, 1, {1}, {1}};
  CHECK_OK(recap__op_infer(&call));
  call.outputs[0].data = out;
  return call;
}

static void test_kv_append_writes_rows_at_device_position(void) {
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    recap_dtype dtype = kFloatTypes[t];
    const kv_dims d = {2, 3, 3, 50, 5, 16};
    const int64_t cshape[] = {d.b, d.smax, d.hkv, d.dh}, rshape[] = {d.b, d.t, d.hkv, d.dh};
    tbuf cache = make_contiguous(dtype, 4, cshape, -1, 1);
    tbuf rows = make_contiguous(dtype, 4, rshape, -1, 1);
    for (int32_t p = 0; p + d.t <= d.smax; p += 15) {
      tbuf pos = scalar_i32(p);
      recap_op_call dc = kv_append_call(&d, cache.dev, rows.dev, pos.dev, dtype);
      recap_op_call hc = kv_append_call(&d, cache.host, rows.host, pos.host, dtype);
      CHECK_OK(recap__op_launch(&dc, cuda_stream));
      CHECK_OK(recap__op_launch(&hc, host_stream));
      CHECK_OK(recap_stream_synchronize(host_stream));
      size_t bytes = (size_t)recap__tensor_numel(&cache.view) * recap_dtype_size(dtype);
      void *got = host_alloc(bytes);
      to_host(got, cache.dev, bytes);
      compare("kv_append cache", dtype, recap__tensor_numel(&cache.view), got, cache.host, NULL,
              true);
    }
    release_all();
  }
}

/* kv_append(k), kv_append(v), attention(q, caches, len) as one captured graph, replayed for
 * several positions written to device memory between replays, against the same sequence run
 * eagerly on CUDA (bit for bit) and on host (within tolerance). */
static void test_captured_decode_step_replays_like_eager_for_moving_positions(void) {
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t) {
    recap_dtype dtype = kFloatTypes[t];
    const kv_dims d = {2, 4, 2, 64, 3, 40};
    size_t esize = recap_dtype_size(dtype);
    const int64_t cshape[] = {d.b, d.smax, d.hkv, d.dh}, rshape[] = {d.b, d.t, d.hkv, d.dh};
    const int64_t qshape[] = {d.b, d.h, d.t, d.dh};
    size_t cache_bytes = (size_t)(d.b * d.smax * d.hkv * d.dh) * esize;
    size_t out_bytes = (size_t)(d.b * d.h * d.t * d.dh) * esize;
    /* Identical initial caches for the eager, graph and host runs. */
    tbuf k0 = make_contiguous(dtype, 4, cshape, -1, 1),
         v0 = make_contiguous(dtype, 4, cshape, -1, 1);
    void *kg = dev_alloc(cache_bytes), *vg = dev_alloc(cache_bytes);
    to_device(kg, k0.host, cache_bytes);
    to_device(vg, v0.host, cache_bytes);
    tbuf q = make_contiguous(dtype, 4, qshape, -2, 2);
    tbuf nk = make_contiguous(dtype, 4, rshape, -1, 1),
         nv = make_contiguous(dtype, 4, rshape, -1, 1);
    tbuf pos = scalar_i32(0), len = scalar_i32(0);
    void *out_eager = dev_alloc(out_bytes), *out_graph = dev_alloc(out_bytes);
    void *host_out = host_alloc(out_bytes);

    recap_op_call ek = kv_append_call(&d, k0.dev, nk.dev, pos.dev, dtype);
    recap_op_call ev = kv_append_call(&d, v0.dev, nv.dev, pos.dev, dtype);
    recap_op_call ea = attention_call(&d, q.dev, k0.dev, v0.dev, len.dev, out_eager, dtype);
    recap_op_call gk = kv_append_call(&d, kg, nk.dev, pos.dev, dtype);
    recap_op_call gv = kv_append_call(&d, vg, nv.dev, pos.dev, dtype);
    recap_op_call ga = attention_call(&d, q.dev, kg, vg, len.dev, out_graph, dtype);
    recap_op_call hk = kv_append_call(&d, k0.host, nk.host, pos.host, dtype);
    recap_op_call hv = kv_append_call(&d, v0.host, nv.host, pos.host, dtype);
    recap_op_call ha = attention_call(&d, q.host, k0.host, v0.host, len.host, host_out, dtype);

    recap__graph *graph = NULL;
    recap__graph_exec *exec = NULL;
    CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_GLOBAL));
    recap_status s1 = recap__op_launch(&gk, cuda_stream);
    recap_status s2 = recap__op_launch(&gv, cuda_stream);
    recap_status s3 = recap__op_launch(&ga, cuda_stream);
    recap_status end = recap__capture_end(cuda_stream, &graph);
    CHECK_OK(s1);
    CHECK_OK(s2);
    CHECK_OK(s3);
    CHECK_OK(end);
    CHECK_OK(cuda->graph_instantiate(graph, &exec));

    static const int32_t positions[] = {0, 3, 10, 11, 40, 61};
    void *got_eager = host_alloc(out_bytes), *got_graph = host_alloc(out_bytes);
    for (size_t step = 0; step < sizeof positions / sizeof positions[0]; ++step) {
      /* New rows and a new query for this step; the position and length in device memory. */
      test_rng rng;
      test_rng_init(&rng);
      for (int64_t i = 0; i < recap__tensor_numel(&nk.view); ++i) {
        recap__store_f32(nk.host, dtype, i, (float)test_rng_uniform(&rng, -1, 1));
        recap__store_f32(nv.host, dtype, i, (float)test_rng_uniform(&rng, -1, 1));
      }
      for (int64_t i = 0; i < recap__tensor_numel(&q.view); ++i)
        recap__store_f32(q.host, dtype, i, (float)test_rng_uniform(&rng, -2, 2));
      ((int32_t *)pos.host)[0] = positions[step];
      ((int32_t *)len.host)[0] = positions[step] + (int32_t)d.t;
      to_device(nk.dev, nk.host, (size_t)recap__tensor_numel(&nk.view) * esize);
      to_device(nv.dev, nv.host, (size_t)recap__tensor_numel(&nv.view) * esize);
      to_device(q.dev, q.host, (size_t)recap__tensor_numel(&q.view) * esize);
      to_device(pos.dev, pos.host, sizeof(int32_t));
      to_device(len.dev, len.host, sizeof(int32_t));

      poison_device(out_eager, out_bytes);
      poison_device(out_graph, out_bytes);
      CHECK_OK(recap__op_launch(&ek, cuda_stream));
      CHECK_OK(recap__op_launch(&ev, cuda_stream));
      CHECK_OK(recap__op_launch(&ea, cuda_stream));
      CHECK_OK(cuda->graph_launch(exec, cuda_stream));
      CHECK_OK(recap_stream_synchronize(cuda_stream));
      CHECK_OK(recap__op_launch(&hk, host_stream));
      CHECK_OK(recap__op_launch(&hv, host_stream));
      memset(host_out, 0xFF, out_bytes);
      CHECK_OK(recap__op_launch(&ha, host_stream));
      CHECK_OK(recap_stream_synchronize(host_stream));

      to_host(got_eager, out_eager, out_bytes);
      to_host(got_graph, out_graph, out_bytes);
      if (memcmp(got_eager, got_graph, out_bytes) != 0)
        fprintf(stderr, "\n  decode step at position %d: graph output differs from eager\n",
                positions[step]);
      CU_ASSERT_EQUAL(memcmp(got_eager, got_graph, out_bytes), 0);
      op_case c = {.op = "attention", .attrs = ha.attrs, .scale = SCALE_ATTENTION};
      double *scale = make_scale(&c, &ha, 0);
      compare("decode attention vs host", dtype, (int64_t)(out_bytes / esize), got_eager, host_out,
              scale, false);
    }
    /* The caches the graph wrote equal the eager ones and the host's. */
    void *kc = host_alloc(cache_bytes), *kgc = host_alloc(cache_bytes);
    to_host(kc, k0.dev, cache_bytes);
    to_host(kgc, kg, cache_bytes);
    CU_ASSERT_EQUAL(memcmp(kc, kgc, cache_bytes), 0);
    CU_ASSERT_EQUAL(memcmp(kc, k0.host, cache_bytes), 0);
    to_host(kc, v0.dev, cache_bytes);
    to_host(kgc, vg, cache_bytes);
    CU_ASSERT_EQUAL(memcmp(kc, kgc, cache_bytes), 0);
    CU_ASSERT_EQUAL(memcmp(kc, v0.host, cache_bytes), 0);
    cuda->graph_exec_destroy(exec);
    cuda->graph_destroy(graph);
    release_all();
  }
}

/* ------------------------------------------------------------------------------------------
 * Random
 * ---------------------------------------------------------------------------------------- */

static void test_random_ops_draw_the_host_numbers(void) {
  const int64_t sizes[] = {1, 7, 4097, (1 << 20) + 3};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
      op_case u = {.op = "random_uniform", .attrs = no_attrs(), .exact = true};
      u.attrs.dtype = kFloatTypes[t];
      u.attrs.low = -2;
      u.attrs.high = 3;
      set_sizes(&u.attrs, 1, &sizes[s]);
      run_case(&u);
      op_case n = {.op = "random_normal", .attrs = no_attrs(), .scale = SCALE_NORMAL};
      n.attrs.dtype = kFloatTypes[t];
      n.attrs.mean = 0.5;
      n.attrs.std = 2;
      set_sizes(&n.attrs, 1, &sizes[s]);
      run_case(&n);
      release_all();
    }
}

/* A captured random op reads its offset from the capture's slot: each replay draws what the
 * host draws at the generator state the replay reserved, and consecutive replays differ. */
static void test_captured_random_op_draws_fresh_numbers_each_replay(void) {
  static const char *const ops[] = {"random_uniform", "random_normal"};
  for (int t = 0; t < NUM_FLOAT_TYPES; ++t)
    for (int o = 0; o < 2; ++o) {
      recap_dtype dtype = kFloatTypes[t];
      recap_op_call call;
      memset(&call, 0, sizeof call);
      call.def = recap__op_find(ops[o]);
      call.attrs.dtype = dtype;
      call.attrs.low = -1;
      call.attrs.high = 1;
      call.attrs.mean = 0;
      call.attrs.std = 1;
      set_sizes(&call.attrs, 2, (const int64_t[]){33, 1025});
      CHECK_OK(recap__op_infer(&call));
      size_t bytes = tensor_bytes(&call.outputs[0]);
      int64_t n = recap__tensor_numel(&call.outputs[0]);
      recap_op_call dev_call = call, host_call = call;
      void *dev = dev_alloc(bytes);
      dev_call.outputs[0].data = dev;
      void *ref = host_alloc(bytes), *got = host_alloc(bytes), *prev = host_alloc(bytes);
      host_call.outputs[0].data = ref;

      recap__graph *graph = NULL;
      recap__graph_exec *exec = NULL;
      recap__rng_graph_binding *binding = NULL;
      CHECK_OK(recap__rng_capture_begin(cuda_stream));
      CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_GLOBAL));
      recap_status st = recap__op_launch(&dev_call, cuda_stream);
      recap_status end = recap__capture_end(cuda_stream, &graph);
      if (st != RECAP_OK || end != RECAP_OK) recap__rng_capture_abort(cuda_stream);
      CHECK_OK(st);
      CHECK_OK(end);
      CHECK_OK(recap__rng_capture_end(cuda_stream, &binding));
      CU_ASSERT_PTR_NOT_NULL_FATAL(binding);
      CHECK_OK(cuda->graph_instantiate(graph, &exec));
      op_case scale_case = {.op = ops[o], .attrs = call.attrs, .scale = SCALE_NORMAL};
      for (int replay = 0; replay < 3; ++replay) {
        recap_rng_state state;
        CHECK_OK(recap_rng_get_state(kCudaDev, &state));
        poison_device(dev, bytes);
        CHECK_OK(recap__rng_replay_prepare(binding, cuda_stream));
        CHECK_OK(cuda->graph_launch(exec, cuda_stream));
        CHECK_OK(recap_stream_synchronize(cuda_stream));
        to_host(got, dev, bytes);
        CHECK_OK(recap_rng_set_state(kHostDev, &state));
        CHECK_OK(recap__op_launch(&host_call, host_stream));
        CHECK_OK(recap_stream_synchronize(host_stream));
        double *scale = o == 1 ? make_scale(&scale_case, &host_call, 0) : NULL;
        compare(ops[o], dtype, n, got, ref, scale, o == 0);
        if (replay > 0) CU_ASSERT_NOT_EQUAL(memcmp(got, prev, bytes), 0);
        memcpy(prev, got, bytes);
      }
      recap__rng_graph_binding_destroy(binding);
      cuda->graph_exec_destroy(exec);
      cuda->graph_destroy(graph);
      release_all();
    }
}

/* ------------------------------------------------------------------------------------------
 * Device faults on bad device-resident values (child processes)
 * ---------------------------------------------------------------------------------------- */

/* Copies n bytes to a new device buffer; NULL on failure (the child reports it). */
static void *child_upload(const void *src, size_t n) {
  void *p = NULL;
  if (cuda->mem_alloc(0, n, &p) != RECAP_OK) return NULL;
  if (cuda->memcpy_async(p, src, n, cuda_stream) != RECAP_OK) return NULL;
  return p;
}

/* In the child: launches `op` with one device-resident value out of range and reports what
 * the launch and the following synchronize return. Exit 0 only for a sticky device fault. */
static int run_fault_child(const char *op) {
  if (cuda_suite_init() != 0) {
    fprintf(stderr, "child: no CUDA stream: %s\n", recap_last_error());
    return 2;
  }
  static const float data[64] = {0.5f};
  recap_op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find(op);
  if (!call.def) return 2;
  const int32_t bad_id[3] = {1, 10, 2}; /* 10 rows in the table */
  const int32_t bad_pos = 3, bad_len = 5, negative = -1;
  if (strcmp(op, "embedding") == 0) {
    call.num_inputs = 2;
    call.inputs[0] =
        (recap_tensor){child_upload(data, 40 * sizeof(float)), RECAP_DTYPE_F32, 2, {10, 4}, {4, 1}};
    call.inputs[1] =
        (recap_tensor){child_upload(bad_id, sizeof bad_id), RECAP_DTYPE_I32, 1, {3}, {1}};
  } else if (strcmp(op, "kv_append") == 0) {
    /* Two rows at position 3 of a 4-row cache. */
    call.num_inputs = 3;
    call.inputs[0] = (recap_tensor){
        child_upload(data, 32 * sizeof(float)), RECAP_DTYPE_F32, 4, {1, 4, 1, 8}, {32, 8, 8, 1}};
    call.inputs[1] = (recap_tensor){
        child_upload(data, 16 * sizeof(float)), RECAP_DTYPE_F32, 4, {1, 2, 1, 8}, {16, 8, 8, 1}};
    call.inputs[2] =
        (recap_tensor){child_upload(&bad_pos, sizeof bad_pos), RECAP_DTYPE_I32, 1, {1}, {1}};
  } else if (strcmp(op, "attention") == 0) {
    /* A valid length of 5 for 4 keys. */
    call.num_inputs = 4;
    call.inputs[0] = (recap_tensor){
        child_upload(data, 8 * sizeof(float)), RECAP_DTYPE_F32, 4, {1, 1, 1, 8}, {8, 8, 8, 1}};
    for (int i = 1; i < 3; ++i)
      call.inputs[i] = (recap_tensor){
          child_upload(data, 32 * sizeof(float)), RECAP_DTYPE_F32, 4, {1, 1, 4, 8}, {32, 32, 8, 1}};
    call.inputs[3] =
        (recap_tensor){child_upload(&bad_len, sizeof bad_len), RECAP_DTYPE_I32, 1, {1}, {1}};
  } else if (strcmp(op, "rope") == 0) {
    call.num_inputs = 2;
    call.attrs.rope_base = 10000;
    call.inputs[0] = (recap_tensor){
        child_upload(data, 8 * sizeof(float)), RECAP_DTYPE_F32, 3, {1, 1, 8}, {8, 8, 1}};
    call.inputs[1] =
        (recap_tensor){child_upload(&negative, sizeof negative), RECAP_DTYPE_I32, 1, {1}, {1}};
  } else {
    return 2;
  }
  for (int i = 0; i < call.num_inputs; ++i)
    if (!call.inputs[i].data) return 2;
  if (recap__op_infer(&call) != RECAP_OK) {
    fprintf(stderr, "child: infer failed: %s\n", recap_last_error());
    return 2;
  }
  if (strcmp(op, "kv_append") == 0) {
    call.outputs[0].data = call.inputs[0].data;
  } else if (cuda->mem_alloc(0, 256 * sizeof(float), &call.outputs[0].data) != RECAP_OK) {
    return 2;
  }
  recap_status launched = recap__op_launch(&call, cuda_stream);
  recap_status synced = recap_stream_synchronize(cuda_stream);
  printf("child %s: launch %s, synchronize %s\n", op, recap_status_name(launched),
         recap_status_name(synced));
  return launched == RECAP_OK && synced == RECAP_STATUS_DEVICE_ERROR ? 0 : 1;
}

static void test_out_of_range_device_values_fault_the_device(void) {
  static const char *const ops[] = {"embedding", "kv_append", "attention", "rope"};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; ++i) {
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
      char *child_argv[] = {"ops_cuda_test", "--fault", (char *)ops[i], NULL};
      execv("/proc/self/exe", child_argv);
      _exit(127);
    }
    int wstatus = 0;
    CU_ASSERT_EQUAL_FATAL(waitpid(pid, &wstatus, 0), pid);
    bool faulted = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
    if (!faulted)
      fprintf(stderr, "\n  %s with an out-of-range device value: child %s %d\n", ops[i],
              WIFEXITED(wstatus) ? "exited with" : "killed by signal",
              WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WTERMSIG(wstatus));
    CU_ASSERT_TRUE(faulted);
  }
}

/* ------------------------------------------------------------------------------------------
 * Benchmark: `ops_cuda_test --bench` (not a test; docs/perf/kernels.md)
 *
 * Per case: `sets` copies of the inputs and outputs (enough to exceed the 50 MB L2, so each
 * launch reads from HBM; RECAP_BENCH_SETS overrides), one launch per set captured into a CUDA
 * graph, the graph replayed RECAP_BENCH_REPS times (default 20) between timing events. Prints
 * microseconds per op and the bandwidth of the bytes the op must move (inputs once, output
 * once). For kernel durations alone run it under
 * `ncu --clock-control none --metrics gpu__time_duration.sum` with RECAP_BENCH_SETS=1 and
 * RECAP_BENCH_REPS=1 (ncu flushes the caches before each kernel).
 * ---------------------------------------------------------------------------------------- */

static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

/* One benchmark case: `op` on contiguous inputs of `dtype` with the given shapes. */
static void bench_case(const char *label, const char *op, recap_op_attrs attrs, recap_dtype dtype,
                       int num_inputs, const int *ndims, const int64_t (*shapes)[4]) {
  recap_op_call call;
  memset(&call, 0, sizeof call);
  call.def = recap__op_find(op);
  if (!call.def) {
    printf("bench %-34s: no op '%s'\n", label, op);
    return;
  }
  call.attrs = attrs;
  call.num_inputs = num_inputs;
  static char placeholder[16];
  size_t set_bytes = 0;
  for (int i = 0; i < num_inputs; ++i) {
    recap_tensor *t = &call.inputs[i];
    t->dtype = dtype;
    t->ndim = ndims[i];
    for (int d = 0; d < ndims[i]; ++d) t->shape[d] = shapes[i][d];
    recap__tensor_set_contiguous(t);
    t->data = placeholder;
    set_bytes += tensor_bytes(t);
  }
  if (recap__op_infer(&call) != RECAP_OK) {
    printf("bench %-34s: infer failed: %s\n", label, recap_last_error());
    return;
  }
  size_t moved = set_bytes;
  for (int o = 0; o < call.num_outputs; ++o) moved += tensor_bytes(&call.outputs[o]);
  int sets = (int)((((size_t)192 << 20) + moved - 1) / moved);
  sets = sets < 1 ? 1 : sets > 64 ? 64 : sets;
  sets = env_int("RECAP_BENCH_SETS", sets);
  const int reps = env_int("RECAP_BENCH_REPS", 20);
  enum { MAX_SETS = 64 };
  recap_op_call calls[MAX_SETS];
  if (sets > MAX_SETS) sets = MAX_SETS;
  for (int i = 0; i < num_inputs; ++i) {
    size_t bytes = tensor_bytes(&call.inputs[i]);
    int64_t n = recap__tensor_numel(&call.inputs[i]);
    float *host = malloc(bytes);
    if (!host) return;
    test_rng rng;
    test_rng_init(&rng);
    for (int64_t k = 0; k < n; ++k) {
      double v = test_rng_uniform(&rng, 0.5, 2.0);
      recap__store_f32(host, dtype, k, (float)(test_rng_next(&rng) & 1 ? -v : v));
    }
    for (int k = 0; k < sets; ++k) {
      if (i == 0) calls[k] = call;
      calls[k].inputs[i].data = dev_alloc(bytes);
      to_device(calls[k].inputs[i].data, host, bytes);
    }
    free(host);
  }
  for (int k = 0; k < sets; ++k)
    for (int o = 0; o < call.num_outputs; ++o)
      calls[k].outputs[o].data = dev_alloc(tensor_bytes(&call.outputs[o]));
  /* Eager warm-up, then one graph of every set's launch. */
  for (int k = 0; k < sets; ++k) CHECK_OK(recap__op_launch(&calls[k], cuda_stream));
  CHECK_OK(recap_stream_synchronize(cuda_stream));
  recap__graph *graph = NULL;
  recap__graph_exec *exec = NULL;
  CHECK_OK(recap__capture_begin(cuda_stream, RECAP_CAPTURE_MODE_GLOBAL));
  recap_status st = RECAP_OK;
  for (int k = 0; k < sets && st == RECAP_OK; ++k) st = recap__op_launch(&calls[k], cuda_stream);
  recap_status end = recap__capture_end(cuda_stream, &graph);
  CHECK_OK(st);
  CHECK_OK(end);
  CHECK_OK(cuda->graph_instantiate(graph, &exec));
  CHECK_OK(cuda->graph_launch(exec, cuda_stream));
  recap_event *t0 = NULL, *t1 = NULL;
  CHECK_OK(recap_event_create(kCudaDev, RECAP_EVENT_TIMING, &t0));
  CHECK_OK(recap_event_create(kCudaDev, RECAP_EVENT_TIMING, &t1));
  CHECK_OK(recap_event_record(t0, cuda_stream));
  for (int r = 0; r < reps; ++r) CHECK_OK(cuda->graph_launch(exec, cuda_stream));
  CHECK_OK(recap_event_record(t1, cuda_stream));
  CHECK_OK(recap_event_synchronize(t1));
  float ms = 0;
  CHECK_OK(recap_event_elapsed_ms(t0, t1, &ms));
  const double us = ms * 1e3 / ((double)reps * sets);
  printf("bench %-34s %-5s %9.2f us/op %8.1f GB/s  (%.2f MiB moved, %d sets)\n", label,
         recap_dtype_name(dtype), us, (double)moved / (us * 1e3), (double)moved / (1 << 20),
         sets);
  fflush(stdout);
  recap_event_destroy(t0);
  recap_event_destroy(t1);
  cuda->graph_exec_destroy(exec);
  cuda->graph_destroy(graph);
  release_all();
}

/* Run as the only test of its suite, so that the harness's assertions have a test to fail. */
static void bench_all_cases(void) {
  const recap_dtype h = RECAP_DTYPE_F16, f = RECAP_DTYPE_F32;
  recap_op_attrs none = no_attrs(), ln = no_attrs(), split3 = no_attrs(), perm = no_attrs(),
                 tr = no_attrs();
  ln.eps = 1e-5;
  split3.dim = 1;
  set_sizes(&split3, 3, (const int64_t[]){1024, 1024, 1024});
  set_sizes(&perm, 4, (const int64_t[]){0, 2, 1, 3});
  tr.sizes[0] = 0;
  tr.sizes[1] = 1;
  static const int one[] = {1, 1, 1}, two[] = {2, 2, 2}, two_one[] = {2, 1, 1}, four[] = {4, 4, 4};
#define SHAPES(...) ((const int64_t(*)[4])(const int64_t[][4]){__VA_ARGS__})
  /* Transformer-block sizes (B8 S128 D1024: 1M elements). */
  bench_case("add [1024,1024]", "add", none, h, 2, two, SHAPES({1024, 1024}, {1024, 1024}));
  bench_case("add [1024,1024]+[1024]", "add", none, h, 2, two_one, SHAPES({1024, 1024}, {1024}));
  bench_case("gelu [1024,1024]", "gelu", none, h, 1, two, SHAPES({1024, 1024}));
  bench_case("layernorm [1024,1024]", "layernorm", ln, h, 3, two_one,
             SHAPES({1024, 1024}, {1024}, {1024}));
  bench_case("rmsnorm [1024,1024]", "rmsnorm", ln, h, 2, two_one, SHAPES({1024, 1024}, {1024}));
  bench_case("softmax [1024,1024]", "softmax", none, h, 1, two, SHAPES({1024, 1024}));
  bench_case("softmax [16384,128]", "softmax", none, h, 1, two, SHAPES({16384, 128}));
  bench_case("permute [8,128,16,64] 0213", "permute", perm, h, 1, four, SHAPES({8, 128, 16, 64}));
  bench_case("transpose [1024,1024]", "transpose", tr, h, 1, two, SHAPES({1024, 1024}));
  bench_case("split [1024,3072] 3 ways", "split", split3, h, 1, two, SHAPES({1024, 3072}));
  /* Large tensors: bandwidth-bound. */
  bench_case("copy (memcpy) [64M]", "copy", none, h, 1, one, SHAPES({64 << 20}));
  bench_case("add [8192,8192]", "add", none, h, 2, two, SHAPES({8192, 8192}, {8192, 8192}));
  bench_case("add [65536,1024]+[1024]", "add", none, h, 2, two_one, SHAPES({65536, 1024}, {1024}));
  bench_case("gelu [8192,8192]", "gelu", none, h, 1, two, SHAPES({8192, 8192}));
  bench_case("relu [4096,8192]", "relu", none, f, 1, two, SHAPES({4096, 8192}));
  bench_case("layernorm [65536,1024]", "layernorm", ln, h, 3, two_one,
             SHAPES({65536, 1024}, {1024}, {1024}));
  bench_case("rmsnorm [65536,1024]", "rmsnorm", ln, h, 2, two_one, SHAPES({65536, 1024}, {1024}));
  bench_case("softmax [65536,1024]", "softmax", none, h, 1, two, SHAPES({65536, 1024}));
  bench_case("layernorm [16384,4096]", "layernorm", ln, h, 3, two_one,
             SHAPES({16384, 4096}, {4096}, {4096}));
  bench_case("softmax [16384,4096]", "softmax", none, h, 1, two, SHAPES({16384, 4096}));
  bench_case("layernorm [32768,1024]", "layernorm", ln, f, 3, two_one,
             SHAPES({32768, 1024}, {1024}, {1024}));
  bench_case("permute [32,1024,16,64] 0213", "permute", perm, h, 1, four,
             SHAPES({32, 1024, 16, 64}));
  bench_case("transpose [8192,8192]", "transpose", tr, h, 1, two, SHAPES({8192, 8192}));
  bench_case("split [16384,3072] 3 ways", "split", split3, h, 1, two, SHAPES({16384, 3072}));
#undef SHAPES
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--fault") == 0) return run_fault_child(argv[2]);
  if (argc == 2 && strcmp(argv[1], "--bench") == 0) {
    CU_pSuite bench = test_add_cuda_suite("ops_cuda/bench", cuda_suite_init, cuda_suite_cleanup);
    CU_ADD_TEST(bench, bench_all_cases);
    return test_run_all();
  }

  CU_pSuite registry = test_add_suite("ops_cuda/registry", NULL, NULL);
  CU_ADD_TEST(registry, test_every_op_points_at_its_contract_cuda_entry);
  CU_ADD_TEST(registry, test_every_contract_op_is_in_the_registry);

  CU_pSuite gpu = test_add_cuda_suite("ops_cuda/vs_host", cuda_suite_init, cuda_suite_cleanup);
  CU_ADD_TEST(gpu, test_unary_ops_match_host);
  CU_ADD_TEST(gpu, test_cast_between_every_float_pair_matches_host);
  CU_ADD_TEST(gpu, test_binary_ops_broadcast_and_views_match_host);
  CU_ADD_TEST(gpu, test_unary_dense_paths_handle_offsets_and_odd_sizes);
  CU_ADD_TEST(gpu, test_binary_dense_paths_handle_offsets_and_odd_sizes);
  CU_ADD_TEST(gpu, test_binary_broadcast_fast_paths_match_host);
  CU_ADD_TEST(gpu, test_softmax_matches_host);
  CU_ADD_TEST(gpu, test_causal_softmax_masks_and_zeroes_hidden_rows);
  CU_ADD_TEST(gpu, test_layernorm_and_rmsnorm_match_host);
  CU_ADD_TEST(gpu, test_row_ops_match_host_for_every_row_length);
  CU_ADD_TEST(gpu, test_row_ops_match_host_for_large_and_long_rows);
  CU_ADD_TEST(gpu, test_row_ops_match_host_for_every_group_shape);
  CU_ADD_TEST(gpu, test_row_ops_match_host_at_every_register_class_boundary);
  CU_ADD_TEST(gpu, test_norms_match_host_on_both_sides_of_the_row_spread_switch);
#if RECAP_WITH_CUDA
  CU_ADD_TEST(gpu, test_gemm_epilogue_matches_host_activation);
#endif
  CU_ADD_TEST(gpu, test_sum_and_mean_match_host);
  CU_ADD_TEST(gpu, test_copy_family_moves_every_element_exactly);
  CU_ADD_TEST(gpu, test_copy_fast_paths_move_every_element_exactly);
  CU_ADD_TEST(gpu, test_concat_matches_host);
  CU_ADD_TEST(gpu, test_fill_matches_host_for_every_dtype);
  CU_ADD_TEST(gpu, test_embedding_gathers_rows_like_host);
  CU_ADD_TEST(gpu, test_rope_matches_host_for_both_position_forms);
  CU_ADD_TEST(gpu, test_attention_matches_host);
  CU_ADD_TEST(gpu, test_attention_prefill_tiles_match_host);
  CU_ADD_TEST(gpu, test_attention_prefill_grid_orders_match_host);
  CU_ADD_TEST(gpu, test_attention_decode_splits_match_host);
  CU_ADD_TEST(gpu, test_kv_append_writes_rows_at_device_position);
  CU_ADD_TEST(gpu, test_captured_decode_step_replays_like_eager_for_moving_positions);
  CU_ADD_TEST(gpu, test_random_ops_draw_the_host_numbers);
  CU_ADD_TEST(gpu, test_captured_random_op_draws_fresh_numbers_each_replay);
  CU_ADD_TEST(gpu, test_out_of_range_device_values_fault_the_device);
  return test_run_all();
}
