/*
 * expr_no_cuda.c: what expr.cu provides, in builds without CUDA (--config=hostonly): nothing
 * is compiled for a GPU, a program holds no compiled kernels, and asking for one says why.
 */
#include "kernels/expr_impl.h"
#include "runtime/error.h"

#if !RECAP_WITH_CUDA
recap_status recap__expr_prepare_cuda(const recap__expr_program *p,
                                      const recap__expr_signature *sig, int device,
                                      const char *op_name) {
  (void)p;
  (void)sig;
  (void)device;
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                    "op '%s': this build has no CUDA, so expressions cannot be compiled for a GPU",
                    op_name ? op_name : "expr");
}

recap_status recap__expr_launch_cuda(const recap__expr_program *p, const recap_tensor *inputs,
                                     int num_inputs, const recap_tensor *out, const char *op_name,
                                     void *cuda_stream) {
  (void)p;
  (void)inputs;
  (void)num_inputs;
  (void)out;
  (void)cuda_stream;
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "op '%s': this build has no CUDA",
                    op_name ? op_name : "expr");
}
#endif
