/*
 * bench_decode_dist.h: `recap bench-decode` on every rank of a tensor-parallel world (recap
 * import-hf --tp N writes one spec per rank; recap launch --gpus N -- bench-decode
 * m.rank{rank}.yaml --world N --rank {rank} --init URL starts them).
 *
 * Every rank runs the same timings in the same order, so the collectives inside its captured
 * steps pair up with the other ranks' without a header: the step time is the graph's alone.
 * Besides it, each rank times the two pieces of a distributed step that the TP speedup
 * depends on and that the step's profile cannot show:
 *   - the step's all_reduces alone: a chain of as many all_reduces as one step runs (or
 *     --collectives N), each of the step's message ([bucket rows, hidden] of the model's
 *     dtype), captured in one graph and replayed: the collectives' cost without the GEMMs;
 *   - recap_pipeline_run_dist's own cost per step: steps through run_dist (run header
 *     broadcast, launch, the host's wait), as `recap generate --world` runs them, less the
 *     back-to-back graph step.
 *
 *   cli_world w;
 *   cli_world_init(&w, "bench-decode");
 *   ... for each argument: m = cli_world_flag("bench-decode", argc, argv, &i, &w) ...
 *   if (!cli_world_check("bench-decode", &w)) return CLI_EXIT_USAGE;
 *   if (!cli_world_join("bench-decode", &w, &device)) return CLI_EXIT_FAILURE;
 *   ... recap_pipeline_create_file on `device` ...
 *   cli_decode_all_reduce_chain(graph, w.comm, &msg, 64, 50, &ms);
 *   cli_world_leave(&w, rc);
 */
#ifndef RECAP_CLI_BENCH_DECODE_DIST_H
#define RECAP_CLI_BENCH_DECODE_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli/options.h"
#include "cli/world.h"
#include "include/recap.h"

/* The flags a distributed bench-decode adds (its --help's second group). */
extern const cli_option cli_bench_decode_dist_options[];

/* The step's all_reduce message: `elements` of `dtype`. */
typedef struct {
  size_t elements;
  recap_dtype dtype;
} cli_decode_message;

/* The residual stream's message at `rows` rows: [rows, hidden] of the embedding's dtype, the
 * embedding being the replicated [vocab, hidden] parameter. INVALID_ARGUMENT when the spec has
 * none. */
recap_status cli_decode_message_of(recap_pipeline *p, int64_t vocab, int64_t rows,
                                   cli_decode_message *msg);

/* `chain` all_reduces of msg (out of place, between two buffers) on p's stream captured in one
 * graph, replayed `replays` times between two events after one untimed replay: ms per replay.
 * Every rank must call it with the same arguments. comm NULL: a world of 1 (copies). */
recap_status cli_decode_all_reduce_chain(recap_pipeline *p, recap_comm *comm,
                                         const cli_decode_message *msg, int chain, int replays,
                                         double *ms_per_chain);

/* `steps` steps of p (graph mode) at `batch` through recap_pipeline_run_dist with replicated
 * inputs, each waited for, as `recap generate --world` runs them: wall ms per step. */
recap_status cli_decode_run_dist_steps(recap_pipeline *p, recap_comm *comm, int64_t batch,
                                       long long steps, double *ms_per_step);

#endif
