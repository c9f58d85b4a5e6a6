/*
 * env_init.c: "env://", the rendezvous that torch.distributed's launchers describe in the
 * environment (comm/comm.h; public side recap_comm_env_read in include/recap.h).
 *
 * torchrun and similar launchers give each process RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR
 * and MASTER_PORT. recap runs its own tcp:// rendezvous at MASTER_ADDR:port, so the port must
 * be free. Under torchrun's elastic agent (TORCHELASTIC_USE_AGENT_STORE=True) it is not:
 * torchrun's TCPStore already listens on MASTER_PORT, and recap's rank 0 could not bind it.
 * There recap takes RECAP_MASTER_PORT instead and, without it, fails saying why, rather than
 * timing out on a port it cannot own. RECAP_MASTER_PORT, when set, is used everywhere, so one
 * setting works under any launcher.
 *
 * The variables are read through a lookup function so that the tests can hand in a fake
 * environment per rank without touching the process's own.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "runtime/error.h"

/* The value of `name`, NULL when unset or empty (a launcher that exports an empty variable
 * has not set it). */
static const char *env_value(const char *name, recap__env_lookup env, void *ctx) {
  const char *v = env(name, ctx);
  return v && v[0] ? v : NULL;
}

/* Parses a whole decimal integer in [lo, hi]; false for anything else. */
static bool parse_int(const char *text, long lo, long hi, long *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || v < lo || v > hi) return false;
  *out = v;
  return true;
}

static bool truthy(const char *v) {
  return v && (strcmp(v, "1") == 0 || strcmp(v, "True") == 0 || strcmp(v, "true") == 0 ||
               strcmp(v, "yes") == 0);
}

recap_status recap__comm_env_parse(recap__env_lookup env, void *ctx, recap__comm_env *out) {
  RECAP_CHECK_ARG(env && out);
  memset(out, 0, sizeof *out);
  out->local_rank = -1;
  const char *world = env_value("WORLD_SIZE", env, ctx);
  const char *rank = env_value("RANK", env, ctx);
  const char *local = env_value("LOCAL_RANK", env, ctx);
  long v;
  if (!world)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "env:// needs WORLD_SIZE (unset; torchrun sets it)");
  if (!parse_int(world, 1, 65536, &v))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "env://: WORLD_SIZE '%s' is not a whole number from 1 to 65536", world);
  out->world_size = (int)v;
  if (!rank)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "env:// needs RANK (unset; torchrun sets it)");
  if (!parse_int(rank, 0, 65535, &v))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "env://: RANK '%s' is not a whole number from 0", rank);
  if (v >= out->world_size)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "env://: RANK %ld is not below WORLD_SIZE %d",
                      v, out->world_size);
  out->rank = (int)v;
  if (local) {
    if (!parse_int(local, 0, 65535, &v))
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "env://: LOCAL_RANK '%s' is not a whole number from 0", local);
    out->local_rank = (int)v;
  }
  /* A world of 1 has no rendezvous: no address is needed. */
  if (out->world_size == 1) return RECAP_OK;

  const char *addr = env_value("MASTER_ADDR", env, ctx);
  const char *master_port = env_value("MASTER_PORT", env, ctx);
  const char *own_port = env_value("RECAP_MASTER_PORT", env, ctx);
  const char *agent = env_value("TORCHELASTIC_USE_AGENT_STORE", env, ctx);
  if (!addr)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "env:// needs MASTER_ADDR (unset), the host of rank 0, for a world of %d",
                      out->world_size);
  const char *port = own_port ? own_port : master_port;
  const char *port_name = own_port ? "RECAP_MASTER_PORT" : "MASTER_PORT";
  if (truthy(agent)) {
    if (!own_port)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "env:// under torchrun (TORCHELASTIC_USE_AGENT_STORE=%s) needs "
                        "RECAP_MASTER_PORT (unset): MASTER_PORT%s%s is torchrun's own store, "
                        "already listening, so recap's rendezvous needs another free port, the "
                        "same on every rank",
                        agent, master_port ? " " : "", master_port ? master_port : "");
    if (master_port && strcmp(own_port, master_port) == 0)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "env:// under torchrun: RECAP_MASTER_PORT %s is MASTER_PORT, torchrun's "
                        "own store; choose another free port",
                        own_port);
  }
  if (!port)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "env:// needs MASTER_PORT (unset; or RECAP_MASTER_PORT), the port of "
                      "rank 0's rendezvous, for a world of %d",
                      out->world_size);
  if (!parse_int(port, 1, 65535, &v))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "env://: %s '%s' is not a port (1 to 65535)",
                      port_name, port);
  /* An IPv6 literal needs brackets in a tcp:// URL, and a host with '?' or '/' would be read
   * as the URL's query or path. */
  if (strpbrk(addr, "?/[] "))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "env://: MASTER_ADDR '%s' is not a host",
                      addr);
  bool v6 = strchr(addr, ':') != NULL;
  int n = snprintf(out->url, sizeof out->url, "tcp://%s%s%s:%ld", v6 ? "[" : "", addr,
                   v6 ? "]" : "", v);
  if (n < 0 || (size_t)n >= sizeof out->url)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "env://: MASTER_ADDR '%s' is too long", addr);
  return RECAP_OK;
}

static const char *process_env(const char *name, void *ctx) {
  (void)ctx;
  return getenv(name);
}

recap_status recap__comm_env_resolve(int world_size, int rank, recap__comm_env *out) {
  RECAP_TRY(recap__comm_env_parse(process_env, NULL, out));
  if (world_size != out->world_size || rank != out->rank)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "env://: rank %d of a world of %d asked for, but the environment says RANK "
                      "%d, WORLD_SIZE %d",
                      rank, world_size, out->rank, out->world_size);
  return RECAP_OK;
}

recap_status recap_comm_env_read(int *world_size, int *rank, int *local_rank, char *url,
                                 size_t url_capacity) {
  RECAP_CHECK_ARG(world_size && rank && local_rank && (url || url_capacity == 0));
  recap__comm_env e;
  RECAP_TRY(recap__comm_env_parse(process_env, NULL, &e));
  if (url_capacity > 0 && strlen(e.url) >= url_capacity)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "env://: the address %s needs %zu bytes, room for %zu", e.url,
                      strlen(e.url) + 1, url_capacity);
  *world_size = e.world_size;
  *rank = e.rank;
  *local_rank = e.local_rank;
  if (url_capacity > 0) memcpy(url, e.url, strlen(e.url) + 1);
  return RECAP_OK;
}
