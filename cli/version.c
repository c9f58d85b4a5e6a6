/* version.c: what recap and the CUDA libraries it runs with are, for `recap --version`,
 * `recap info` and the "environment" object of every JSON result. */
#include <stdio.h>

#include "cli/environment.h"

/* CUDA writes runtime and driver versions as 1000 * major + 10 * minor (13000 = 13.0). */
static const char *cuda_version(int v, char *buf, size_t size) {
  if (v <= 0) return "none";
  snprintf(buf, size, "%d.%d", v / 1000, v % 1000 / 10);
  return buf;
}

/* cuBLAS and cuBLASLt: 10000 * major + 100 * minor + patch (130100 = 13.1.0). */
static const char *blas_version(int v, char *buf, size_t size) {
  if (v <= 0) return "none";
  snprintf(buf, size, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  return buf;
}

void cli_print_version(FILE *out) {
  fprintf(out, "recap %s (commit %s)\n", recap_version(), recap_build_commit());
  if (!recap_backend_compiled(RECAP_BACKEND_CUDA)) {
    fprintf(out, "CUDA: none (host-only build: the host backend)\n");
    return;
  }
  recap_library_versions v;
  if (recap_library_versions_get(&v) != RECAP_OK) {
    fprintf(out, "CUDA: versions unavailable (%s)\n", recap_last_error());
    return;
  }
  char a[32], b[32];
  fprintf(out, "CUDA runtime %s (built in), driver %s\n", cuda_version(v.runtime_version, a, 32),
          v.driver_version > 0 ? cuda_version(v.driver_version, b, 32) : "none (no GPU driver)");
  fprintf(out, "cuBLAS %s, cuBLASLt %s%s\n", blas_version(v.cublas_version, a, 32),
          blas_version(v.cublaslt_version, b, 32),
          v.cublaslt_version > 0 ? "" : " (not found: LD_LIBRARY_PATH, CUDA_PATH/lib64)");
}

json_t *cli_environment_json(recap_device device) {
  recap_library_versions v = {0};
  (void)recap_library_versions_get(&v); /* never fails for a valid pointer; zeros = absent */
  char gpu[256] = "none (host backend)";
  recap_device_properties p;
  if (device.backend == RECAP_BACKEND_CUDA && recap_device_properties_get(device, &p) == RECAP_OK)
    snprintf(gpu, sizeof gpu, "%s", p.name);
  char runtime[32], driver[32], blas[32], lt[32];
  return json_pack("{ss ss ss ss ss ss ss ss}", "recap", recap_version(), "commit",
                   recap_build_commit(), "device", recap_backend_name(device.backend), "gpu", gpu,
                   "driver", cuda_version(v.driver_version, driver, sizeof driver), "cuda_runtime",
                   cuda_version(v.runtime_version, runtime, sizeof runtime), "cublas",
                   blas_version(v.cublas_version, blas, sizeof blas), "cublaslt",
                   blas_version(v.cublaslt_version, lt, sizeof lt));
}
