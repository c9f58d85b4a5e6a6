/* work.c: the warning that run and bench give before a host-backend run that would take very
 * long, from the engine's estimate of a run's work (recap__model_work). */
#include <stdio.h>

#include "cli/cli.h"

/* Rough host-backend rates, measured on the 2-core build machine (mlp_large at H=1024:
 * 55 GFLOP/s; the transformer block: 30; mlp_decode's weight-bound GEMMs: about 3 GB/s). An
 * estimate only has to say minutes or hours, not seconds. */
static const double HOST_FLOPS_PER_S = 50e9, HOST_BYTES_PER_S = 3e9;
/* Above this many estimated seconds for all runs, the CLI warns before it starts. */
static const double HOST_WARN_SECONDS = 60;

bool cli_warn_host_work(const char *cmd, const char *path, const recap__model *model, size_t bucket,
                        int runs) {
  double flops, bytes;
  if (recap__model_work(model, bucket, &flops, &bytes) != RECAP_STATUS_OK) return false;
  double seconds = runs * (flops / HOST_FLOPS_PER_S + bytes / HOST_BYTES_PER_S);
  if (seconds < HOST_WARN_SECONDS) return false;
  bool tera = flops >= 1e12, hours = seconds >= 2 * 3600;
  fprintf(stderr,
          "recap %s: warning: %s does about %.3g %s per run and moves %.3g GB; the host "
          "backend (CPU) computes some %.0f GFLOP/s, so its %d runs (warmups included) may take "
          "%.0f %s or more. --iters N, --warmup N and --dim (a smaller batch or width) shrink "
          "it.\n",
          cmd, path, flops / (tera ? 1e12 : 1e9), tera ? "TFLOP" : "GFLOP", bytes / 1e9,
          HOST_FLOPS_PER_S / 1e9, runs, hours ? seconds / 3600 : seconds / 60, hours ? "h" : "min");
  return true;
}
