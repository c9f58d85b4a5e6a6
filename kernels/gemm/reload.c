/* reload.c: new GEMM settings from the environment, and the choices made under the old ones
 * forgotten (gemm.h). Its own file above the settings and the choice cache, which then never
 * call each other. */
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/tune.h"

void recap__gemm_env_reload(void) {
  recap__gemm_env_reread();
  recap__gemm_tune_reset();
}
