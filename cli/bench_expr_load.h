/* bench_expr_load.h: the load cost of generated kernels with a warm cache (bench-capture). */
#ifndef RECAP_CLI_BENCH_EXPR_LOAD_H
#define RECAP_CLI_BENCH_EXPR_LOAD_H

#include <stdbool.h>

#include "include/recap.h"

/* A warm-cache create of the expr pipeline may cost this much more than the library ops'. */
#define CLI_EXPR_LOAD_TARGET_MS 20.0

typedef struct {
  int expr_ops;
  double cold_ms;    /* the first create: every kernel compiled (NVRTC on CUDA) */
  double library_ms; /* best create of the same computation as library ops, unfused */
  double warm_ms;    /* best create of the expr pipeline with the cache warm */
  double target_ms;  /* CLI_EXPR_LOAD_TARGET_MS */
  bool met;          /* warm_ms <= library_ms + target_ms */
} cli_expr_load_result;

/* Measures on `dev` in a fresh cache folder (removed afterwards; RECAP_CACHE_DIR restored). */
recap_status cli_measure_expr_load(recap_device dev, cli_expr_load_result *out);

#endif
