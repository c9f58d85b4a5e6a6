/*
 * tensors.h: host-side data for the subcommands that run pipelines (run, bench, serve-bench):
 * which external tensors a pipeline has and their shapes for a batch, seeded random inputs,
 * checksums, comparisons, device reads, and timing a pipeline with device events.
 *
 *   cli_host_tensors bound = {0}, inputs = {0};
 *   cli_inputs_read_bound(p, &bound);        // once, before anything is copied in
 *   cli_inputs_make(p, &bound, batch, seed, &inputs);
 *   cli_inputs_copy_in(p, &inputs);
 *   double ms[100];
 *   cli_time_runs(p, batch, 100, ms);       // one event pair per run
 *   cli_summary s; cli_summarize(ms, 100, &s);
 */
#ifndef RECAP_CLI_TENSORS_H
#define RECAP_CLI_TENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/recap.h"

/* One tensor as the CLI moves it, shaped for `batch` real rows. */
typedef struct {
  size_t index;     /* recap_pipeline_tensor_info_get's */
  const char *name; /* owned by the pipeline */
  recap_tensor_role role;
  int is_output; /* recap_tensor_info's: 0, or the 1-based position in the spec's outputs */
  recap_dtype dtype;
  int ndim;
  int64_t shape[RECAP_MAX_DIMS];
  int bucket_axis; /* -1: none */
  recap_tensor_init init;
  int64_t rows; /* copy_in/copy_out's `rows`: batch for a bucketed tensor, else 0 */
  size_t bytes; /* of those rows */
} cli_tensor;

/* Describes tensor `t` of `p` for a run with `batch` rows (0: the largest bucket whole).
 * A tensor whose extent along the bucketed axis is k times the bucket value keeps k * batch
 * entries there. */
recap_status cli_tensor_describe(recap_pipeline *p, size_t t, int64_t batch, cli_tensor *out);

/* Host copies of a pipeline's inputs or outputs for one batch. */
typedef struct {
  cli_tensor info;
  void *host; /* info.bytes, malloc'd */
} cli_host_tensor;

typedef struct {
  cli_host_tensor *items;
  size_t count;
} cli_host_tensors;

/* Whether an init draws random numbers (normal, uniform): the CLI draws those itself, from its
 * input seed; every other init (zeros, ones, value, file) is what the library wrote. */
bool cli_init_is_random(const recap_tensor_init *init);
/* "normal (mean 0, std 1)", "uniform [5, 6)", "value 2.5", "file PATH"...: how an input is
 * filled, into buf; returns buf. */
const char *cli_init_describe(const recap_tensor_init *init, char *buf, size_t size);

/* Every input of p whose init is not random, whole (the largest bucket), as the library
 * initialized it when it bound p: read once, before anything is copied into p, so that each
 * run's inputs take their rows from it. The random ones are left out. */
recap_status cli_inputs_read_bound(recap_pipeline *p, cli_host_tensors *out);
/* Host data for every input of p with `batch` rows, as its init says: normal and uniform
 * inits draw from one generator seeded with `seed` (in spec order: a seed reproduces the
 * data), every other init takes the first `batch` rows of its contents in `bound`
 * (cli_inputs_read_bound of p or of a pipeline of the same spec). RECAP_STATUS_OUT_OF_MEMORY
 * (nothing kept) if allocation fails. */
recap_status cli_inputs_make(recap_pipeline *p, const cli_host_tensors *bound, int64_t batch,
                             uint64_t seed, cli_host_tensors *out);
/* recap_pipeline_copy_in of each. */
recap_status cli_inputs_copy_in(recap_pipeline *p, const cli_host_tensors *inputs);
/* Allocates *out and copies every output's `batch` rows out (waits for the runs). */
recap_status cli_outputs_copy_out(recap_pipeline *p, int64_t batch, cli_host_tensors *out);
/* The same for every state and scalar (as the next run will read them). */
recap_status cli_states_copy_out(recap_pipeline *p, int64_t batch, cli_host_tensors *out);
/* Frees the host copies; a zeroed set is fine. */
void cli_host_tensors_free(cli_host_tensors *set);

/* A seed from the system's entropy (getrandom), else from the clock. */
uint64_t cli_random_seed(void);
/* splitmix64: a small, fast, seedable generator; the same seed gives the same data. */
uint64_t cli_rng_next(uint64_t *state);

/* Element i as a double. */
double cli_value(const void *host, recap_dtype dtype, size_t i);
/* Sum and sum of absolute values over `count` elements, and how many of them are NaN or
 * infinite (which make the sums non-finite too). */
void cli_checksum(const void *host, recap_dtype dtype, size_t count, double *sum, double *abs_sum,
                  size_t *nonfinite);
/* Elements of `got` farther from `want` than the dtype's tolerance (|d| <= atol + rtol*|want|:
 * f32 1e-5 + 1e-4, f16 1e-3 + 1e-2, bf16 1e-2 + 2e-2; integers exact); *max_abs gets the
 * largest difference. NaN in either counts as a mismatch unless both are NaN. */
size_t cli_compare(const void *got, const void *want, recap_dtype dtype, size_t count,
                   double *max_abs);

/* Copies device memory of p's device to the host on p's stream and waits. */
recap_status cli_read_device(recap_pipeline *p, const void *device, void *host, size_t bytes);

/* Runs p `iters` times with `batch` rows (each run: record a timing event on p's stream,
 * recap_pipeline_run_async, record the second event, wait for it) and stores each run's
 * device time in ms[i]. The pipeline's mode decides eager or replay. */
recap_status cli_time_runs(recap_pipeline *p, int64_t batch, int iters, double *ms);

typedef struct {
  double median, p10, p90, p99, mean, min, max;
} cli_summary;
/* Percentiles by linear interpolation between the sorted values (n >= 1). */
void cli_summarize(const double *values, int n, cli_summary *out);

#endif
