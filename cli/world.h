/*
 * world.h: the flags and the communicator of a command that one rank of a tensor-parallel
 * world runs (bench-decode, generate and serve-bench --generate under recap launch --gpus N;
 * import-hf --tp N writes one spec per rank):
 *
 *   cli_world w;
 *   cli_world_init(&w, CMD);
 *   ... for each argument: m = cli_world_flag(CMD, argc, argv, &i, &w) ...
 *   if (!cli_world_check(CMD, &w)) return CLI_EXIT_USAGE;
 *   if (!cli_world_join(CMD, &w, &device)) return CLI_EXIT_FAILURE;
 *   ... w.comm, w.prefix, w.who ...
 *   return cli_world_leave(&w, rc);
 */
#ifndef RECAP_CLI_WORLD_H
#define RECAP_CLI_WORLD_H

#include <stdbool.h>

#include "cli/options.h"
#include "include/recap.h"

/* The option rows of --rank, --init and --timeout, alike in every such command; each command
 * writes its own --world row, which says what the ranks do. */
// clang-format off
#define CLI_WORLD_RANK_OPTIONS                                                                 \
  {.flag = "--rank", .value = "R", .kind = CLI_VALUE_TEXT,                                    \
   .help = "this process's rank, 0 <= R < N"},                                                \
  {.flag = "--init", .value = "URL", .kind = CLI_VALUE_TEXT,                                  \
   .help = "the rendezvous, file:///PATH, tcp://HOST:PORT or env:// (recap run --help)"},     \
  {.flag = "--timeout", .value = "S", .kind = CLI_VALUE_TEXT,                                 \
   .help = "seconds for the rendezvous and every wait (default 120): a dead peer\n"           \
           "fails the others within it"}
// clang-format on

typedef struct {
  long long world, rank; /* world 0: not distributed (no --world) */
  const char *init;
  double timeout_s;
  char url[320]; /* env://'s rendezvous address */
  recap_comm *comm;
  char prefix[32]; /* "rank R: " before every line a rank prints; "" when not distributed */
  char who[64];    /* the command as failures name it: "bench-decode (rank R)" */
} cli_world;

void cli_world_init(cli_world *w, const char *cmd);
/* cli_flag for --world, --rank, --init and --timeout: 1 (taken), 0 (not one of them), -1
 * (usage error, printed). */
int cli_world_flag(const char *cmd, int argc, char **argv, int *i, cli_world *w);
/* After parsing: whether the flags agree (env:// supplies the world, the rank and the
 * rendezvous); false, with a line on stderr naming the flags, when not (a usage error). */
bool cli_world_check(const char *cmd, cli_world *w);
/* With --world, joins the communicator on *device (a CUDA rank takes GPU rank mod the visible
 * count) and makes stdout line-buffered. False, with a line on stderr, when it cannot. */
bool cli_world_join(const char *cmd, cli_world *w, recap_device *device);
/* Ends the rank: on a failure, at once (_exit) without tearing down, since a peer may be dead
 * and the communicator's abort under way (launch.c); else destroys the communicator. */
int cli_world_leave(cli_world *w, int rc);

#endif
