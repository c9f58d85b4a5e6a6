/* nccl_env.c: the command line's NCCL defaults (nccl_env.h). */
#define _POSIX_C_SOURCE 200809L

#include "cli/nccl_env.h"

#include <stdlib.h>

/* NCCL_GRAPH_MIXING_SUPPORT=0: decode loops across ranks need it. With graph mixing on (NCCL's
 * default) every collective NCCL captures carries event record and wait nodes, which a WHILE
 * node's body cannot hold, so recap_decode_loop_create_dist refuses and the generator runs one
 * launch per decode step. NCCL's contract with it off (its documentation of the variable,
 * docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-graph-mixing-support): a
 * communicator must never have two graph launches outstanding in parallel (on streams that do
 * not serialize them), nor an outstanding graph launch followed by a collective outside any
 * graph (a stream dependency is not enough: the graph must have completed). Every command that
 * makes a communicator keeps it: each graph holding collectives is waited for on the host
 * (recap_comm_synchronize of its stream, or a decode loop polled to its end, which queries
 * the event after the launch) before the next collective or launch on any stream; the audit,
 * path by path, is in docs/MULTI_GPU.md ("Graph mixing off"). */
bool cli_nccl_env_defaults(void) {
  if (getenv(CLI_NCCL_GRAPH_MIXING)) return false;
  return setenv(CLI_NCCL_GRAPH_MIXING, "0", 0) == 0;
}
