/*
 * expr.cu: compiling, loading and launching an expression program's generated kernels on
 * CUDA (kernels/expr.h), and the expr op's CUDA entry point.
 *
 * The kernels come from recap__expr_codegen_cuda, compiled by NVRTC for the current device's
 * exact architecture through the disk cache (runtime/nvrtc.h), and are loaded with the
 * runtime's library API (cudaLibraryLoadData / cudaLibraryGetKernel: context-independent,
 * no driver API linked). They are launched with cudaLaunchKernelExC, as programmatic
 * dependent launches where the library's own kernels are (recap__cuda_pdl_enabled), since the
 * generated kernels begin with the same preamble.
 *
 * Each program keeps a list of what it has loaded, per (device, dtype signature), guarded by
 * the program's lock. Loading happens in recap__expr_prepare_cuda, which the engine calls at
 * pipeline load; a launch that finds nothing loaded compiles first, except during a capture,
 * where it fails instead (a compile takes tens of milliseconds and loads a module, neither of
 * which belongs inside a graph).
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_common.cuh"
#include "kernels/expr_impl.h"
#include "runtime/cuda_check.h"
#include "runtime/nvrtc.h"

struct recap__expr_compiled {
  struct recap__expr_compiled *next;
  int device;
  recap__expr_signature sig;
  cudaLibrary_t library;
  cudaKernel_t strided, dense;
  int strided_threads, dense_threads;
};

namespace {

/* A program's compiled kernels, freed with the program (its free_compiled). Teardown cannot
 * report: a failed unload leaves the module to the context's end. */
void free_compiled(struct recap__expr_compiled *list) {
  while (list) {
    recap__expr_compiled *next = list->next;
    if (cudaLibraryUnload(list->library) != cudaSuccess) (void)cudaGetLastError();
    free(list);
    list = next;
  }
}

constexpr int kStridedThreads = 256; /* __launch_bounds__ of the generated kernels */
constexpr int kDenseThreads = 128;

bool same_signature(const recap__expr_signature &a, const recap__expr_signature &b) {
  if (a.num_inputs != b.num_inputs || a.output != b.output) return false;
  for (int i = 0; i < a.num_inputs; ++i)
    if (a.inputs[i] != b.inputs[i]) return false;
  return true;
}

/* Holds the program's lock. */
recap__expr_compiled *find_locked(const recap__expr_program *p, int device,
                                  const recap__expr_signature &sig) {
  for (recap__expr_compiled *c = p->compiled; c; c = c->next)
    if (c->device == device && same_signature(c->sig, sig)) return c;
  return nullptr;
}

recap__expr_compiled *find(const recap__expr_program *p, int device,
                           const recap__expr_signature &sig) {
  pthread_mutex_t *lock = const_cast<pthread_mutex_t *>(&p->lock);
  pthread_mutex_lock(lock);
  recap__expr_compiled *c = find_locked(p, device, sig);
  pthread_mutex_unlock(lock);
  return c;
}

/* Generates, compiles and loads the kernels for (device, sig). Holds the program's lock. */
recap_status compile_locked(const recap__expr_program *p, int device,
                            const recap__expr_signature &sig, const char *op_name,
                            recap__expr_compiled **out) {
  recap_status st = RECAP_OK;
  char *source = nullptr, *cubin = nullptr;
  size_t cubin_size = 0;
  int major = 0, minor = 0;
  cudaFuncAttributes attrs;
  recap__expr_compiled *c = static_cast<recap__expr_compiled *>(calloc(1, sizeof *c));
  if (!c) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "op '%s': no memory", op_name);
  c->device = device;
  c->sig = sig;
  RECAP_CUDA_TRY_GOTO(st, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                      fail);
  RECAP_CUDA_TRY_GOTO(st, cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
                      fail);
  RECAP_TRY_GOTO(st, recap__expr_codegen_cuda(p, &sig, &source), fail);
  RECAP_TRY_GOTO(st,
                 recap__nvrtc_compile_cached(source, "recap_expr.cu", major * 10 + minor, &cubin,
                                             &cubin_size, nullptr),
                 fail);
  /* The library keeps its own copy of the image (no cudaLibraryBinaryIsPreserved). */
  RECAP_CUDA_TRY_GOTO(
      st, cudaLibraryLoadData(&c->library, cubin, nullptr, nullptr, 0, nullptr, nullptr, 0), fail);
  RECAP_CUDA_TRY_GOTO(st, cudaLibraryGetKernel(&c->strided, c->library, RECAP_EXPR_KERNEL_STRIDED),
                      fail);
  RECAP_CUDA_TRY_GOTO(st, cudaLibraryGetKernel(&c->dense, c->library, RECAP_EXPR_KERNEL_DENSE),
                      fail);
  /* Querying the kernels loads them into this device's context now (under lazy loading a
   * first launch would, possibly inside a capture) and says how large a block may be. */
  RECAP_CUDA_TRY_GOTO(st, cudaFuncGetAttributes(&attrs, (const void *)c->strided), fail);
  c->strided_threads =
      attrs.maxThreadsPerBlock < kStridedThreads ? attrs.maxThreadsPerBlock : kStridedThreads;
  RECAP_CUDA_TRY_GOTO(st, cudaFuncGetAttributes(&attrs, (const void *)c->dense), fail);
  c->dense_threads =
      attrs.maxThreadsPerBlock < kDenseThreads ? attrs.maxThreadsPerBlock : kDenseThreads;
  c->next = p->compiled;
  const_cast<recap__expr_program *>(p)->compiled = c;
  const_cast<recap__expr_program *>(p)->free_compiled = free_compiled;
  *out = c;
  free(source);
  free(cubin);
  return RECAP_OK;
fail:
  if (c->library) cudaLibraryUnload(c->library);
  free(c);
  free(source);
  free(cubin);
  return recap__error_context(st, "op '%s': compiling its expression for sm_%d%d: ", op_name, major,
                              minor);
}

/* Compiles for `device` (-1: the current one), making it current meanwhile. */
recap_status prepare(const recap__expr_program *p, const recap__expr_signature &sig, int device,
                     const char *op_name, recap__expr_compiled **out) {
  int current = 0;
  RECAP_CUDA_TRY(cudaGetDevice(&current));
  if (device < 0) device = current;
  if (device != current) RECAP_CUDA_TRY(cudaSetDevice(device));
  pthread_mutex_t *lock = const_cast<pthread_mutex_t *>(&p->lock);
  pthread_mutex_lock(lock);
  recap__expr_compiled *c = find_locked(p, device, sig);
  recap_status st = c ? RECAP_OK : compile_locked(p, device, sig, op_name, &c);
  pthread_mutex_unlock(lock);
  if (device != current && cudaSetDevice(current) != cudaSuccess && st == RECAP_OK)
    st = RECAP_FAIL(RECAP_STATUS_DEVICE_ERROR, "op '%s': cannot make device %d current again",
                    op_name, current);
  if (st == RECAP_OK && out) *out = c;
  return st;
}

bool aligned16(const void *ptr) {
  return ((uintptr_t)ptr % RECAP_EXPR_DENSE_ALIGN) == 0;
}

}  // namespace

extern "C" recap_status recap__expr_prepare_cuda(const recap__expr_program *p,
                                                 const recap__expr_signature *sig, int device,
                                                 const char *op_name) {
  RECAP_CHECK_ARG(p && sig);
  return prepare(p, *sig, device, op_name ? op_name : "expr", nullptr);
}

extern "C" recap_status recap__expr_launch_cuda(const recap__expr_program *p,
                                                const recap_tensor *inputs, int num_inputs,
                                                const recap_tensor *out, const char *op_name,
                                                void *cuda_stream) {
  RECAP_CHECK_ARG(p && inputs && out);
  if (!op_name) op_name = "expr";
  recap__cuda_launch_range range(op_name);
  if (!p->finished)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': the expression is not finished",
                      op_name);
  if (num_inputs != p->num_inputs)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': the expression takes %d inputs, got %d", op_name, p->num_inputs,
                      num_inputs);
  recap__expr_params params;
  recap_status st = recap__expr_params_of(inputs, num_inputs, out, &params);
  if (st != RECAP_OK) return recap__error_context(st, "op '%s': ", op_name);
  if (params.n == 0) return RECAP_OK;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);

  recap__expr_signature sig;
  recap__expr_signature_of(inputs, num_inputs, out, &sig);
  int device = 0;
  RECAP_CUDA_TRY(cudaGetDevice(&device));
  recap__expr_compiled *c = find(p, device, sig);
  if (!c) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    RECAP_CUDA_TRY(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone)
      return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                        "op '%s': its expression kernel is not compiled for device %d and these "
                        "dtypes, and compiling inside a capture is not allowed (prepare the "
                        "pipeline, or run it once, before capturing)",
                        op_name, device);
    RECAP_TRY(prepare(p, sig, device, op_name, &c));
  }

  /* Dense: every input has the output's elements in the same order (contiguous, same
   * element count, hence the same shape up to leading 1s), the output is contiguous, and
   * every pointer allows 16-byte vectors. */
  bool dense = recap__tensor_is_contiguous(out) && aligned16(out->data);
  for (int i = 0; i < num_inputs && dense; ++i)
    dense = recap__tensor_is_contiguous(&inputs[i]) &&
            recap__tensor_numel(&inputs[i]) == params.n && aligned16(inputs[i].data);

  cudaLaunchConfig_t config;
  memset(&config, 0, sizeof config);
  config.stream = stream;
  cudaKernel_t kernel;
  if (dense) {
    const int64_t threads_needed = RECAP_CEIL_DIV(params.n, (int64_t)RECAP_EXPR_VEC);
    unsigned grid;
    RECAP_TRY(recap__cuda_grid_cover(threads_needed, c->dense_threads, &grid));
    config.gridDim = dim3(grid);
    config.blockDim = dim3(c->dense_threads);
    kernel = c->dense;
  } else {
    config.gridDim = dim3(recap__cuda_grid_for(params.n, c->strided_threads));
    config.blockDim = dim3(c->strided_threads);
    kernel = c->strided;
  }
  cudaLaunchAttribute attribute[1];
  memset(attribute, 0, sizeof attribute);
  if (recap__cuda_pdl_enabled()) {
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
  }
  void *args[] = {&params};
  RECAP_CUDA_TRY(cudaLaunchKernelExC(&config, (const void *)kernel, args));
  return RECAP_OK;
}

extern "C" recap_status recap__cuda_expr(const recap__op_call *call, void *cuda_stream) {
  if (call->num_outputs != 1)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op 'expr': expects one output, got %d",
                      call->num_outputs);
  return recap__expr_launch_cuda(call->attrs.expr, call->inputs, call->num_inputs,
                                 &call->outputs[0], call->def ? call->def->name : "expr",
                                 cuda_stream);
}
