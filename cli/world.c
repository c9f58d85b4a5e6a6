/* world.c: the ranks of a tensor-parallel command line (world.h). */
#include "cli/world.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/nccl_env.h"
#include "runtime/error.h"

enum { MAX_RANKS = 64 };

void cli_world_init(cli_world *w, const char *cmd) {
  *w = (cli_world){.rank = -1, .timeout_s = 120};
  snprintf(w->who, sizeof w->who, "%s", cmd);
}

int cli_world_flag(const char *cmd, int argc, char **argv, int *i, cli_world *w) {
  const char *v = NULL;
  long long n;
  int m;
  if ((m = cli_flag(cmd, argc, argv, i, "--init", &w->init)) != 0) return m;
  if ((m = cli_flag(cmd, argc, argv, i, "--world", &v)) != 0)
    return m < 0 || !cli_parse_int(cmd, "--world", v, 1, MAX_RANKS, &w->world) ? -1 : 1;
  if ((m = cli_flag(cmd, argc, argv, i, "--rank", &v)) != 0)
    return m < 0 || !cli_parse_int(cmd, "--rank", v, 0, MAX_RANKS - 1, &w->rank) ? -1 : 1;
  if ((m = cli_flag(cmd, argc, argv, i, "--timeout", &v)) != 0) {
    if (m < 0 || !cli_parse_int(cmd, "--timeout", v, 1, 86400, &n)) return -1;
    w->timeout_s = (double)n;
    return 1;
  }
  return 0;
}

bool cli_world_check(const char *cmd, cli_world *w) {
  if (w->init && strcmp(w->init, "env://") == 0) {
    int world, rank, local;
    if (recap_comm_env_read(&world, &rank, &local, w->url, sizeof w->url) != RECAP_OK) {
      fprintf(stderr, "recap %s: %s\n", cmd, recap_last_error());
      return false;
    }
    if ((w->world && w->world != world) || (w->rank >= 0 && w->rank != rank)) {
      fprintf(stderr, "recap %s: --world/--rank disagree with WORLD_SIZE/RANK (--init env://)\n",
              cmd);
      return false;
    }
    w->world = world;
    w->rank = rank;
    w->init = w->url;
  }
  if (!w->world && (w->rank >= 0 || w->init)) {
    fprintf(stderr, "recap %s: --rank and --init go with --world N\n", cmd);
    return false;
  }
  if (w->world && (w->rank < 0 || w->rank >= w->world)) {
    fprintf(stderr, "recap %s: --world %lld needs --rank R with 0 <= R < %lld\n", cmd, w->world,
            w->world);
    return false;
  }
  if (w->world > 1 && !w->init) {
    fprintf(stderr, "recap %s: --world %lld needs --init file:///PATH, tcp://HOST:PORT or env://\n",
            cmd, w->world);
    return false;
  }
  return true;
}

bool cli_world_join(const char *cmd, cli_world *w, recap_device *device) {
  if (!w->world) return true;
  snprintf(w->prefix, sizeof w->prefix, "rank %lld: ", w->rank);
  snprintf(w->who, sizeof w->who, "%s (rank %lld)", cmd, w->rank);
  /* Each rank's lines go out whole, so ranks sharing one output do not split each other's. */
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* recap launch shows each rank one GPU; otherwise rank r takes GPU r mod the count. */
  int count = 0;
  if (device->backend == RECAP_BACKEND_CUDA &&
      recap_device_count(RECAP_BACKEND_CUDA, &count) == RECAP_OK && count > 0)
    device->index = (int)(w->rank % count);
  /* Before the communicator: NCCL reads its environment when it makes the first one. */
  cli_nccl_env_defaults();
  recap_status st =
      recap_comm_init_rank(*device, (int)w->world, (int)w->rank, w->init, w->timeout_s, &w->comm);
  if (st != RECAP_OK) {
    cli_report_failure(w->who, "joining the communicator", st);
    return false;
  }
  return true;
}

int cli_world_leave(cli_world *w, int rc) {
  if (w->comm && rc != CLI_EXIT_OK) {
    fflush(NULL);
    _exit(rc);
  }
  recap_comm_destroy(w->comm);
  w->comm = NULL;
  return rc;
}
