/*
 * nccl_env.h: the NCCL settings the command line chooses for the communicators it makes.
 *
 * NCCL reads its environment when the process makes its first communicator, so
 * cli_nccl_env_defaults runs before every recap_comm_init_rank of the command line (cli/world.c
 * for bench-decode, generate and serve-bench --generate; cli/launch.c for run --world). The
 * library never sets these: it changes NCCL for the whole process, which an embedder decides.
 */
#ifndef RECAP_CLI_NCCL_ENV_H
#define RECAP_CLI_NCCL_ENV_H

#include <stdbool.h>

#define CLI_NCCL_GRAPH_MIXING "NCCL_GRAPH_MIXING_SUPPORT"

/* Sets NCCL_GRAPH_MIXING_SUPPORT=0 unless the environment has it (any value, even empty, is
 * the user's and stays); true when it set it. */
bool cli_nccl_env_defaults(void);

#endif
