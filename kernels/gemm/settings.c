/* settings.c: the GEMM switches (tf32, the preferred library) and their public wrappers
 * (include/recap.h), and the GEMM environment variables (gemm.h), read once. It calls nothing
 * else of the GEMM module, so everything in it may read settings. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gemm/gemm.h"
#include "runtime/env.h"
#include "runtime/error.h"

/* ---- switches (process-wide, read at each launch) -------------------------------------- */

static atomic_bool allow_tf32;
static atomic_int preferred_library = RECAP_GEMM_LIBRARY_CUBLASLT;

void recap__gemm_set_allow_tf32(bool allow) {
  atomic_store(&allow_tf32, allow);
}
bool recap__gemm_allow_tf32(void) {
  return atomic_load(&allow_tf32);
}

recap_status recap__gemm_set_library(recap_gemm_library library) {
  if (library != RECAP_GEMM_LIBRARY_CUBLASLT && library != RECAP_GEMM_LIBRARY_CUBLAS)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "unknown GEMM library %d (0 = cuBLASLt, 1 = cuBLAS)", (int)library);
  atomic_store(&preferred_library, (int)library);
  return RECAP_OK;
}

recap_gemm_library recap__gemm_library(void) {
  return (recap_gemm_library)atomic_load(&preferred_library);
}

void recap_gemm_set_allow_tf32(int allow) {
  recap__gemm_set_allow_tf32(allow != 0);
}

int recap_gemm_allow_tf32(void) {
  return recap__gemm_allow_tf32();
}

recap_status recap_gemm_set_library(recap_gemm_library library) {
  return recap__gemm_set_library(library);
}

recap_gemm_library recap_gemm_library_get(void) {
  return recap__gemm_library();
}

/* ---- environment ------------------------------------------------------------------------- */

static recap__gemm_env env;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

/* A default-on switch: off only when set to an off value (env.h). */
static bool env_switch_on(const char *name) {
  return recap__env_bool(name, 1) == 1;
}

static void read_env(void) {
  recap__gemm_env e = {.skinny = env_switch_on("RECAP_GEMM_SKINNY"),
                       .hopper = env_switch_on("RECAP_GEMM_HOPPER"),
                       .skinny_pdl = env_switch_on("RECAP_GEMM_SKINNY_PDL"),
                       .skinny_pipe = env_switch_on("RECAP_GEMM_SKINNY_PIPE"),
                       .skinny_balance = env_switch_on("RECAP_GEMM_SKINNY_BALANCE")};
  const char *w = getenv("RECAP_GEMM_SKINNY_WARPS");
  if (w) {
    const int v = atoi(w);
    if (v >= 1 && v <= 16 && (v & (v - 1)) == 0) e.skinny_warps = v;
  }
  const char *t = getenv("RECAP_TUNE");
  if (t && (strcmp(t, "1") == 0 || strcmp(t, "2") == 0)) e.tune = t[0] - '0';
  const char *f = getenv("RECAP_TUNE_FILE");
  if (!f || !f[0] || strlen(f) >= sizeof e.tune_file) {
    if (f && f[0])
      fprintf(stderr,
              "recap: warning: RECAP_TUNE_FILE is longer than %zu bytes; "
              "using recap_tune.txt\n",
              sizeof e.tune_file - 1);
    f = "recap_tune.txt";
  }
  snprintf(e.tune_file, sizeof e.tune_file, "%s", f);
  env = e;
}

const recap__gemm_env *recap__gemm_env_get(void) {
  pthread_once(&env_once, read_env);
  return &env;
}

void recap__gemm_env_reread(void) {
  pthread_once(&env_once, read_env);
  read_env();
}
