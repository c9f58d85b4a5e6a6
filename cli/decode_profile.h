/*
 * decode_profile.h: where the decode benches' step spends its device time: one profiled eager
 * step (recap_pipeline_profile) summed by op kind and by op name with the layer numbers folded
 * ("layers.*.down"), so that at tensor parallelism each projection at half its N or half its K
 * can be set against TP 1's (bench/report/tp_decode_report.py).
 *
 *   cli_step_profile sp;
 *   if (cli_step_profile_run(eager, &shape, batch, context, need, &sp) == RECAP_OK)
 *     cli_step_profile_print("", batch, &sp);
 *   cli_step_profile_free(&sp);
 */
#ifndef RECAP_CLI_DECODE_PROFILE_H
#define RECAP_CLI_DECODE_PROFILE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "cli/decode_batch.h"
#include "include/recap.h"

/* One op kind's part of a profiled step: its launches (views launch nothing) and their device
 * time. */
typedef struct {
  const char *op; /* the op's name, owned by the pipeline */
  size_t launches;
  double ms;
} cli_kind_time;

/* One op's part of a profiled step over every layer: its name with the layer numbers folded
 * ("layers.*.mlp.down"), so that a projection's time at TP N (half its N or half its K) can be
 * set against TP 1's. */
typedef struct {
  char name[64];
  const char *op;
  size_t launches;
  double ms;
} cli_name_time;

/* The step's device time by op kind and by folded op name, largest first. */
typedef struct {
  cli_kind_time *kinds; /* room for every kind of the registry (recap_op_count) */
  size_t num_kinds;
  cli_name_time *names; /* room for every op of the pipeline */
  size_t num_names;
  double total_ms, gemm_ms; /* the GEMMs: linear and matmul */
} cli_step_profile;

/* One profiled eager step of `eager` at `batch` from a fresh synthetic batch
 * (cli_decode_batch_write at `context` keys, `need` blocks a sequence), summed into *sp (freed by
 * cli_step_profile_free, also after a failure). */
recap_status cli_step_profile_run(recap_pipeline *eager, const cli_decode_shape *s, int64_t batch,
                                  int64_t context, int64_t need, cli_step_profile *sp);
void cli_step_profile_free(cli_step_profile *sp);

/* The step by op kind, one line per kind, then the largest folded op names; every line starts
 * with `prefix`. A collective's time includes its wait for the slowest rank to arrive. */
void cli_step_profile_print(const char *prefix, int64_t batch, const cli_step_profile *sp);

/* [{op, launches, ms, share}] by kind and [{name, op, launches, ms}] by folded name. */
json_t *cli_step_profile_kinds_json(const cli_step_profile *sp);
json_t *cli_step_profile_names_json(const cli_step_profile *sp);

/* Launches of op kind `op` in the step. */
int64_t cli_step_profile_launches(const cli_step_profile *sp, const char *op);

#endif
