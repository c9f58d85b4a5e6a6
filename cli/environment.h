/*
 * environment.h: what recap and the CUDA libraries it runs with are (version.c), for
 * `recap --version`, `recap info`, the "environment" object of every JSON result the CLI
 * writes, and the benchmarks in bench/ that write JSON of their own. A library of its own
 * (//cli:environment) so that those benchmarks record exactly what the CLI records.
 */
#ifndef RECAP_CLI_ENVIRONMENT_H
#define RECAP_CLI_ENVIRONMENT_H

#include <jansson.h>
#include <stdio.h>

#include "include/recap.h"

/* {"recap", "commit", "device", "gpu", "driver", "cuda_runtime", "cublas", "cublaslt"}: the
 * versions as "13.0" / "13.1.0", "none" where absent (the host backend, a host-only build, no
 * driver, cuBLAS not found); "gpu" is the device's name, "none (host backend)" on the host.
 * NULL when out of memory. */
json_t *cli_environment_json(recap_device device);
/* "recap 0.1.0 (commit abc1234)", then the CUDA runtime and driver, cuBLAS and cuBLASLt
 * versions (or that this build has no CUDA): `recap --version` and `recap info`. */
void cli_print_version(FILE *out);

#endif
