/* conditional.cu: the kernel that copies a device flag into a conditional node's value
 * (see conditional.h). */
#include <cuda_runtime.h>

#include "runtime/conditional.h"

namespace {

__global__ void condition_set_kernel(cudaGraphConditionalHandle handle, const int32_t *flag) {
  cudaGraphSetConditional(handle, *flag != 0 ? 1u : 0u);
}

}  // namespace

extern "C" int recap__cuda_launch_condition_set(unsigned long long handle, const int32_t *flag,
                                                void *cuda_stream) {
  condition_set_kernel<<<1, 1, 0, static_cast<cudaStream_t>(cuda_stream)>>>(
      static_cast<cudaGraphConditionalHandle>(handle), flag);
  return (int)cudaGetLastError();
}
