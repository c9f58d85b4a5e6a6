/* gemm_settings.c: the public GEMM switches (include/recap.h), over the GEMM module's own. */
#include "kernels/gemm.h"

void recap_gemm_set_allow_tf32(int allow) { recap__gemm_set_allow_tf32(allow != 0); }

int recap_gemm_allow_tf32(void) { return recap__gemm_allow_tf32(); }

recap_status recap_gemm_set_library(recap_gemm_library library) {
  return recap__gemm_set_library(library);
}

recap_gemm_library recap_gemm_library_get(void) { return recap__gemm_library(); }
