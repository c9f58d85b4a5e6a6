/*
 * cli.h: the `recap` command line's subcommands (internal to the CLI).
 *
 * Each subcommand is one file with one entry point taking the arguments after its name and
 * returning the process exit code: 0 ok, 1 failure, 2 usage error. Only the CLI decides to
 * exit; the libraries below it return statuses. Printing and JSON live here, never below.
 *
 * Argument parsing is strict: an unknown flag, a missing value or a malformed number is a
 * usage error that names it. Flags take their value as "--flag VALUE" or "--flag=VALUE".
 *
 *   for (int i = 0; i < argc; i++) {
 *     const char *v;
 *     int m;
 *     if ((m = cli_flag(CMD, argc, argv, &i, "--iters", &v)) != 0) {
 *       if (m < 0 || !cli_parse_int(CMD, "--iters", v, 1, 1000000, &iters)) return
 *       CLI_EXIT_USAGE; } else if (!cli_positional(CMD, argv[i])) return CLI_EXIT_USAGE; ...
 *   }
 */
#ifndef RECAP_ENGINE_CLI_H
#define RECAP_ENGINE_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/ir.h"
#include "engine/plan.h"
#include "engine/spec.h"
#include "include/recap.h"

enum { CLI_EXIT_OK = 0, CLI_EXIT_FAILURE = 1, CLI_EXIT_USAGE = 2 };

typedef struct {
  const char *name;
  const char *summary;
  int (*main)(int argc, char **argv);
} cli_command;

int cli_info_main(int argc, char **argv);
int cli_validate_main(int argc, char **argv);
int cli_plan_main(int argc, char **argv);
int cli_ops_main(int argc, char **argv);
int cli_dot_main(int argc, char **argv);
int cli_run_main(int argc, char **argv);
int cli_bench_main(int argc, char **argv);
int cli_bench_ops_main(int argc, char **argv);
int cli_bench_capture_main(int argc, char **argv);
int cli_serve_bench_main(int argc, char **argv);
/* memviz.c: `recap memviz SNAPSHOT.json --svg FILE`. */
int cli_memviz_main(int argc, char **argv);
/* launch.c: `recap launch`, and `recap run` with --world (cli_dist_requested). */
int cli_launch_main(int argc, char **argv);
int cli_run_dist_main(int argc, char **argv);
bool cli_dist_requested(int argc, char **argv);

/* Whether argv[i] is -h or --help for any i. */
int cli_wants_help(int argc, char **argv);

/* ---- argument parsing (args.c); each failure prints "recap CMD: ..." to stderr ---- */

/* Whether argv[*i] is the flag `name`: 1 with *value set (for "--name VALUE" *i advances past
 * the value), 0 when it is another argument, -1 (message printed) when the value is missing.
 * value may be NULL for a flag without a value ("--json"); "--json=x" is then an error. */
int cli_flag(const char *cmd, int argc, char **argv, int *i, const char *name, const char **value);
/* Parses a whole decimal integer in [lo, hi]. False (message names the flag) otherwise. */
bool cli_parse_int(const char *cmd, const char *flag, const char *text, long long lo, long long hi,
                   long long *out);
/* Parses a whole decimal integer in [0, 2^64 - 1] (the range of seeds). */
bool cli_parse_u64(const char *cmd, const char *flag, const char *text, uint64_t *out);
/* Parses "NAME=VALUE" (VALUE a positive integer). */
bool cli_parse_dim(const char *cmd, const char *text, char *name, size_t name_size, int64_t *value);
/* Prints "recap CMD: unknown flag 'X'" for an argument that starts with '-'; false then. */
bool cli_positional(const char *cmd, const char *arg);
/* Takes `arg` as the subcommand's single positional argument (`what`: "spec", "snapshot")
 * into *slot: false, with the usage error printed, for a flag or a second one. */
bool cli_take_one(const char *cmd, const char *what, const char *arg, const char **slot);

/* ---- specs and devices (spec_util.c) ---- */

/* Prints diag's FILE:LINE:COL errors to stderr (and how many more were dropped). */
void cli_print_diag(const char *path, const recap__diag *diag);

/* Loads and checks a spec, printing every FILE:LINE:COL error (or the I/O failure) to stderr.
 * base_dir (NULL: no restriction) confines the files the spec names (params, safetensors) to
 * that directory, as recap_pipeline_options.base_dir does. RECAP_OK, or the loader's status. */
recap_status cli_load_spec(const char *path, const char *base_dir, recap__spec **out);

/* The bucket index a "--dim NAME=VALUE" selects: NAME must be the spec's bucketed dim and VALUE
 * one of its buckets (exact == true) or any positive value up to the largest (exact == false,
 * *batch gets VALUE and *bucket the smallest bucket >= VALUE). Without a --dim (name NULL):
 * the largest bucket and its value. False with a message on stderr. */
bool cli_select_bucket(const char *cmd, const recap__spec *spec, const char *name, int64_t value,
                       bool exact, size_t *bucket, int64_t *batch);

/* `plan` and `dot` show one bucket, with --dim meaning what it means to `run`: loads path with
 * cli_load_spec, resolves the dims[] flags with cli_resolve_dims (a batch of the bucketed dim
 * selects the bucket that holds it; *batch gets the batch) and writes every other dim's new
 * value into the loaded spec (overrides[] gets those flags, for a pipeline's options). The IRs
 * built from the spec then check the new values (cli_bucket_plan_build). CLI_EXIT_OK;
 * CLI_EXIT_USAGE for a bad --dim; CLI_EXIT_FAILURE when the spec does not load (messages on
 * stderr). *spec is the caller's to destroy, also on failure. */
int cli_load_spec_bucket(const char *cmd, const char *path, const char *base_dir,
                         const char *const *dims, int num_dims, recap__spec **spec,
                         const char **overrides, size_t *bucket, int64_t *batch);

enum { CLI_MAX_DIMS = 16 };

/* The flags `run` and `bench` share: --iters, --warmup, --dim (repeatable), --seed, --device,
 * --base-dir, --no-fusion. */
typedef struct {
  const char *device;
  const char *base_dir; /* --base-dir DIR: files the spec names must lie under DIR */
  const char *dims[CLI_MAX_DIMS];
  int num_dims;
  long long iters, warmup;
  uint64_t seed;
  bool iters_set, warmup_set, seed_set;
  bool no_fusion; /* --no-fusion: recap_pipeline_options.no_fusion */
} cli_run_flags;

/* Consumes argv[*i] (and its value) when it is one of the shared flags: 1 when consumed, 0 when
 * it is not one of them, -1 on a usage error (already reported). */
int cli_run_flag(const char *cmd, int argc, char **argv, int *i, cli_run_flags *f);
/* After parsing: checks --device's value; false (reported) when it is neither cuda nor host. */
bool cli_run_flags_check(const char *cmd, const cli_run_flags *f);

/* The host backend computes on the CPU: without --iters / --warmup, `run` and `bench` cap the
 * spec's run.iters and run.warmup at these so that a GPU-sized spec stays a short smoke run. */
enum { CLI_HOST_ITERS_CAP = 20, CLI_HOST_WARMUP_CAP = 2 };

/* What `run` and `bench` resolve from their shared flags and the spec before they create a
 * pipeline; one place so that both read the flags the same way. */
typedef struct {
  const char *overrides[CLI_MAX_DIMS + 1]; /* the pipeline options' dims point here */
  size_t bucket;
  int64_t batch;
  int iters, warmup;
  bool iters_capped; /* iters is CLI_HOST_ITERS_CAP, not the spec's */
  uint64_t seed;     /* cli_input_seed's */
  const char *seed_from;
} cli_run_setup;

/* The seed of the CLI's random inputs: --seed (flag_set), else the spec's seed: when it has
 * one (so a run is reproducible without flags), else a fresh random one. *from gets "--seed",
 * "spec" or "random". */
uint64_t cli_input_seed(bool flag_set, uint64_t flag, const recap__spec *spec, const char **from);
/* A number in JSON, which has no NaN or infinity: those become the strings "nan", "inf" and
 * "-inf" (jansson refuses them as reals, and the key would silently go missing). */
json_t *cli_json_number(double v);
/* The input seed in JSON: a decimal string, exact beyond 2^53 where JSON numbers are not. */
json_t *cli_seed_json(uint64_t seed);

/* Resolves f's --dim flags (cli_resolve_dims), the device (cli_pick_device), iters and warmup
 * (the flag, else the spec's, capped on the host backend) and the seed into *out, and sets
 * opts' device, warmup, dims (pointing into *out, which must outlive opts' use), base_dir and
 * no_fusion. CLI_EXIT_OK; CLI_EXIT_USAGE for a bad --dim; CLI_EXIT_FAILURE when the device
 * cannot be used (messages on stderr). */
int cli_run_setup_resolve(const char *cmd, const cli_run_flags *f, const recap__spec *spec,
                          recap_pipeline_options *opts, cli_run_setup *out);

/* The --dim NAME=VALUE flags of run, bench and serve-bench: the spec's bucketed dim selects
 * the batch (as cli_select_bucket with exact == false); any other declared dim is copied to
 * overrides[] (NULL-terminated, for recap_pipeline_options.dims: the engine re-checks the spec
 * with the new value). False with a message on stderr (a usage error). */
bool cli_resolve_dims(const char *cmd, const recap__spec *spec, const char *const *dims, int count,
                      const char **overrides, size_t *bucket, int64_t *batch);

/* The device to run on: `requested` ("cuda" or "host", NULL: the spec's). A CUDA request that
 * this build or machine cannot serve falls back to the host when it came from the spec (a
 * line on stderr says so) and fails when the user asked for it. False with a message. */
bool cli_pick_device(const char *cmd, const char *requested, recap_backend_kind spec_device,
                     recap_device *out);

/* Every bucket's IR (fused when `fuse`) and the one plan the engine builds over them all
 * (bucket_plan.c). irs[b] is bucket b's IR; the last is the largest. A spec whose dims were
 * replaced (cli_load_spec_bucket) may not hold: RECAP_STATUS_SPEC_ERROR, with every
 * FILE:LINE:COL error printed to stderr. */
typedef struct {
  recap__ir **irs;
  size_t count;
  recap__plan *plan;
} cli_bucket_plan;
recap_status cli_bucket_plan_build(recap__spec *spec, bool fuse, cli_bucket_plan *out);
/* Frees what cli_bucket_plan_build made; a zeroed struct is fine. */
void cli_bucket_plan_free(cli_bucket_plan *bp);

/* The first line of recap_last_error() after a failed call, prefixed for the user. */
void cli_report_failure(const char *cmd, const char *what, recap_status status);

/* The --json FILE of the benchmarks: writes root to path (indented, keys in insertion order)
 * and prints "wrote PATH" on stdout. False, with "recap CMD: cannot write PATH" on stderr, when
 * the file cannot be written. */
bool cli_write_json(const char *cmd, json_t *root, const char *path);

/* "1.5 MiB", "12.0 KiB" or "300 B" into buf; returns buf. */
const char *cli_format_bytes(size_t bytes, char *buf, size_t size);

/* Seconds on a monotonic clock. */
double cli_now(void);

#endif
