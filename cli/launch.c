/*
 * launch.c: distributed runs from the command line.
 *
 *   recap run SPEC --world N --rank R --init URL [--timeout S] [run flags]
 *       one rank of a world: joins the communicator (rendezvous at URL), creates the pipeline
 *       on its GPU, and runs it with recap_pipeline_run_dist (rank 0's inputs and bucket go to
 *       every rank). Each rank prints its outputs' checksums and its timing.
 *   recap launch --gpus N [--timeout S] [--grace S] [--env-init] -- run SPEC [run flags]
 *       (or generate, bench-decode, serve-bench --generate in place of run)
 *       starts N such processes on this machine (rank r sees GPU r through
 *       CUDA_VISIBLE_DEVICES, with a fresh file:// rendezvous in a temporary folder), waits for
 *       them, stops the others when one fails (SIGTERM after --grace seconds, then SIGKILL),
 *       and prints every rank's exit. With --env-init the ranks get torchrun's variables and
 *       --init env:// instead of the file:// rendezvous.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/nccl_env.h"
#include "cli/tensors.h"

#define MAX_RANKS 64 /* a macro: the help texts state it */
enum { FIRST_VALUES = 4 };

/* --init alone asks for a rank too: with env:// the world and rank come from the environment. */
bool cli_dist_requested(int argc, char **argv) {
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--world") == 0 || strncmp(argv[i], "--world=", 8) == 0 ||
        strcmp(argv[i], "--init") == 0 || strncmp(argv[i], "--init=", 7) == 0)
      return true;
  return false;
}

/* ---- recap run --world ---- */

static const char *const RUN = "run";

/* `recap run`'s flags of a distributed run (cli_run_help lists them). */
const cli_option cli_run_dist_options[] = {
    {.flag = "--world",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "ranks in all (1 to " CLI_STR(MAX_RANKS) "); rank 0's inputs and batch go to\n"
                                                      "every rank"},
    {.flag = "--rank",
     .value = "R",
     .kind = CLI_VALUE_TEXT,
     .help = "this process's rank, 0 <= R < N"},
    {.flag = "--init",
     .value = "URL",
     .kind = CLI_VALUE_TEXT,
     .help = "the rendezvous, file:///PATH or tcp://HOST:PORT (needed when N > 1), or\n"
             "env://: N, R and the address from the environment, as torchrun sets it:\n"
             "WORLD_SIZE, RANK, LOCAL_RANK (the GPU), MASTER_ADDR, MASTER_PORT\n"
             "(RECAP_MASTER_PORT instead under torchrun, whose store holds MASTER_PORT);\n"
             "--world and --rank may then be left out (given, they must agree).\n"
             "NCCL_GRAPH_MIXING_SUPPORT is 0 unless the environment sets it (a user's\n"
             "value stays), here and in generate, bench-decode and serve-bench --world:\n"
             "decode loops across ranks need it"},
    {.flag = "--timeout",
     .value = "S",
     .kind = CLI_VALUE_TEXT,
     .help = "seconds for the rendezvous, NCCL init and every wait (default 120)"},
    {0}};

typedef struct {
  const char *path, *mode, *init;
  long long world, rank;
  const char *json_path;
  double timeout_s;
  int local_rank; /* env://'s LOCAL_RANK, -1 when unset or without env:// */
  char env_url[320];
  cli_run_flags common;
} dist_args;

/* --init env://: the world, rank and address come from the environment (torchrun's RANK,
 * WORLD_SIZE, ...; recap_comm_env_read). A --world or --rank given as well must agree: a
 * command line that contradicts its launcher is a mistake to report, not to settle. */
static int resolve_env_init(dist_args *a) {
  int world, rank;
  recap_status st =
      recap_comm_env_read(&world, &rank, &a->local_rank, a->env_url, sizeof a->env_url);
  if (st != RECAP_OK) {
    fprintf(stderr, "recap run: %s\n", recap_last_error());
    return CLI_EXIT_USAGE;
  }
  if (a->world && a->world != world) {
    fprintf(stderr, "recap run: --world %lld disagrees with WORLD_SIZE %d (--init env://)\n",
            a->world, world);
    return CLI_EXIT_USAGE;
  }
  if (a->rank >= 0 && a->rank != rank) {
    fprintf(stderr, "recap run: --rank %lld disagrees with RANK %d (--init env://)\n", a->rank,
            rank);
    return CLI_EXIT_USAGE;
  }
  a->world = world;
  a->rank = rank;
  a->init = a->env_url;
  return CLI_EXIT_OK;
}

static int parse_dist(int argc, char **argv, dist_args *a) {
  a->timeout_s = 120;
  a->rank = -1;
  a->local_rank = -1;
  for (int i = 0; i < argc; i++) {
    const char *v = NULL;
    int m;
    if ((m = cli_flag(RUN, argc, argv, &i, "--world", &v)) != 0) {
      if (m < 0 || !cli_parse_int(RUN, "--world", v, 1, MAX_RANKS, &a->world))
        return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(RUN, argc, argv, &i, "--rank", &v)) != 0) {
      if (m < 0 || !cli_parse_int(RUN, "--rank", v, 0, MAX_RANKS - 1, &a->rank))
        return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(RUN, argc, argv, &i, "--timeout", &v)) != 0) {
      long long t;
      if (m < 0 || !cli_parse_int(RUN, "--timeout", v, 1, 86400, &t)) return CLI_EXIT_USAGE;
      a->timeout_s = (double)t;
    } else if ((m = cli_flag(RUN, argc, argv, &i, "--init", &a->init)) != 0 ||
               (m = cli_flag(RUN, argc, argv, &i, "--mode", &a->mode)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_json_flag(RUN, argc, argv, &i, &a->json_path)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_run_flag(RUN, argc, argv, &i, &a->common)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if (!cli_positional(RUN, argv[i])) {
      fprintf(stderr,
              "recap run: (flags not listed by 'recap launch --help' are not supported "
              "with --world)\n");
      return CLI_EXIT_USAGE;
    } else if (a->path) {
      fprintf(stderr, "recap run: one spec at a time\n");
      return CLI_EXIT_USAGE;
    } else {
      a->path = argv[i];
    }
  }
  if (a->init && strcmp(a->init, "env://") == 0) {
    int rc = resolve_env_init(a);
    if (rc != CLI_EXIT_OK) return rc;
  }
  if (!a->path || a->world < 1 || a->rank < 0 || a->rank >= a->world) {
    fprintf(stderr, "recap run: --world N needs a spec and --rank R with 0 <= R < N\n");
    return CLI_EXIT_USAGE;
  }
  if (a->world > 1 && !a->init) {
    fprintf(stderr,
            "recap run: --world %lld needs --init file:///PATH, tcp://HOST:PORT or env://\n",
            a->world);
    return CLI_EXIT_USAGE;
  }
  if (a->mode && strcmp(a->mode, "eager") != 0 && strcmp(a->mode, "graph") != 0) {
    fprintf(stderr, "recap run: --mode expects eager or graph, got '%s'\n", a->mode);
    return CLI_EXIT_USAGE;
  }
  /* Every rank gets the same flags: one FILE would be written by all of them at once. */
  if (a->world > 1 && a->json_path && strcmp(a->json_path, "-") != 0) {
    fprintf(stderr,
            "recap run: with --world %lld, --json takes - (each rank writes its JSON "
            "to its own stdout)\n",
            a->world);
    return CLI_EXIT_USAGE;
  }
  return cli_run_flags_check(RUN, &a->common) ? CLI_EXIT_OK : CLI_EXIT_USAGE;
}

static double now_ms(void) {
  return cli_now() * 1e3;
}

int cli_run_dist_main(int argc, char **argv) {
  dist_args a;
  memset(&a, 0, sizeof a);
  int rc = parse_dist(argc, argv, &a);
  if (rc != CLI_EXIT_OK) return rc;
  rc = CLI_EXIT_FAILURE;
  recap__model *model = NULL;
  recap_comm *comm = NULL;
  recap_pipeline *p = NULL;
  cli_host_tensors bound = {0}, inputs = {0}, outputs = {0};
  double *ms = NULL;
  recap_status st;
  char who[32];
  snprintf(who, sizeof who, "run (rank %lld)", a.rank);
  /* A --dim of the bucketed dim above its largest bucket replaces the buckets with that one
   * value: a benchmark at a size the spec does not list (the plain `run` selects a batch
   * within the buckets only). recap launch gives each rank one visible GPU; without it, rank r
   * takes GPU r mod count, or under env:// GPU LOCAL_RANK mod count (ranks on several hosts). */
  cli_load_request load = cli_run_load_request(a.path, &a.common);
  load.device_ordinal = a.local_rank >= 0 ? a.local_rank : (int)a.rank;
  load.grow_batch = true;
  size_t bucket;
  int64_t batch;
  if ((rc = cli_load(RUN, &load, &model, &bucket, &batch)) != CLI_EXIT_OK) goto done;
  rc = CLI_EXIT_FAILURE;
  const recap__spec *spec = model->spec;
  recap_pipeline_options opts = {
      .struct_size = sizeof opts, .override_device = 1, .device = model->device};
  /* Before the communicator: NCCL reads its environment when it makes the first one. */
  cli_nccl_env_defaults();
  if ((st = recap_comm_init_rank(opts.device, (int)a.world, (int)a.rank, a.init, a.timeout_s,
                                 &comm)) != RECAP_OK) {
    cli_report_failure(who, "joining the communicator", st);
    goto done;
  }
  bool graph = !(a.mode && strcmp(a.mode, "eager") == 0);
  opts.override_mode = 1;
  opts.mode = graph ? RECAP_MODE_GRAPH : RECAP_MODE_EAGER;
  int iters = a.common.iters_set ? (int)a.common.iters : spec->iters;
  int warmup = a.common.warmup_set ? (int)a.common.warmup : spec->warmup;
  opts.warmup = warmup;
  opts.warmup_set = 1;
  recap_pipeline_info info;
  if ((st = recap__pipeline_create_model(model, &opts, &p)) != RECAP_OK ||
      (st = recap_pipeline_info_get(p, &info)) != RECAP_OK) {
    cli_report_failure(who, "creating the pipeline", st);
    goto done;
  }
  /* A fixed default rather than a fresh seed: a distributed run is reproducible without flags. */
  uint64_t seed = a.common.seed_set ? a.common.seed : spec->seed_given ? spec->seed : 1234;
  if (a.rank == 0 && ((st = cli_inputs_read_bound(p, &bound)) != RECAP_OK ||
                      (st = cli_inputs_make(p, &bound, batch, seed, &inputs)) != RECAP_OK ||
                      (st = cli_inputs_copy_in(p, &inputs)) != RECAP_OK)) {
    cli_report_failure(who, "preparing the inputs", st);
    goto done;
  }
  unsigned flags = graph ? 0 : RECAP_DIST_EAGER;
  /* The first run carries rank 0's inputs (and captures, in graph mode); the inputs stay in
   * place, so later runs send only the header. */
  double t0 = now_ms();
  if ((st = recap_pipeline_run_dist(p, comm, batch, flags)) != RECAP_OK) {
    cli_report_failure(who, "the first run", st);
    goto done;
  }
  double first_ms = now_ms() - t0;
  flags |= RECAP_DIST_INPUTS_REPLICATED;
  for (int i = 0; i < warmup; i++)
    if ((st = recap_pipeline_run_dist(p, comm, batch, flags)) != RECAP_OK) {
      cli_report_failure(who, "warmup run", st);
      goto done;
    }
  if (!(ms = malloc((size_t)(iters > 0 ? iters : 1) * sizeof *ms))) goto done;
  for (int i = 0; i < iters; i++) {
    double s = now_ms();
    if ((st = recap_pipeline_run_dist(p, comm, batch, flags)) != RECAP_OK) {
      cli_report_failure(who, "running", st);
      goto done;
    }
    ms[i] = now_ms() - s;
  }
  if ((st = cli_outputs_copy_out(p, batch, &outputs)) != RECAP_OK) {
    cli_report_failure(who, "copying the outputs", st);
    goto done;
  }
  cli_summary sum;
  cli_summarize(ms, iters, &sum);
  printf("rank %lld of %lld: %s on %s:%d, %s mode, batch %" PRId64
         "\ntiming: %d %s (host wall clock, run_dist incl. header broadcast): median %.4f "
         "ms, p10 %.4f, p90 %.4f; first run (with inputs%s) %.1f ms\n",
         a.rank, a.world, spec->name, recap_backend_name(opts.device.backend), opts.device.index,
         graph ? "graph" : "eager", batch, iters, cli_plural(iters, "run", "runs"), sum.median,
         sum.p10, sum.p90, graph ? ", warmup and capture" : "", first_ms);
  json_t *outs = json_array();
  for (size_t i = 0; i < outputs.count; i++) {
    const cli_host_tensor *h = &outputs.items[i];
    size_t n = h->info.bytes / recap_dtype_size(h->info.dtype);
    double s, abs_s;
    size_t nonfinite;
    cli_checksum(h->host, h->info.dtype, n, &s, &abs_s, &nonfinite);
    json_array_append_new(
        outs, json_pack("{ss so so sI}", "name", h->info.name, "sum", cli_json_number(s), "abs_sum",
                        cli_json_number(abs_s), "nonfinite", (json_int_t)nonfinite));
    printf("  %-12s sum %.6g  abs sum %.6g", h->info.name, s, abs_s);
    if (nonfinite) printf("  (%zu non-finite)", nonfinite);
    printf("  first:");
    for (size_t j = 0; j < n && j < FIRST_VALUES; j++)
      printf(" %.6g", cli_value(h->host, h->info.dtype, j));
    printf("\n");
  }
  json_t *root =
      json_pack("{sI sI ss sI si sf sf sf sf sI so}", "rank", (json_int_t)a.rank, "world",
                (json_int_t)a.world, "mode", graph ? "graph" : "eager", "batch", (json_int_t)batch,
                "iters", iters, "median_ms", sum.median, "p10_ms", sum.p10, "p90_ms", sum.p90,
                "first_run_ms", first_ms, "fused_ops", (json_int_t)info.fused_ops, "outputs", outs);
  bool written = !a.json_path || (root && cli_write_json(RUN, root, opts.device, a.json_path));
  json_decref(root);
  if (!written) goto done;
  rc = CLI_EXIT_OK;
done:
  fflush(stdout);
  free(ms);
  cli_host_tensors_free(&outputs);
  cli_host_tensors_free(&inputs);
  cli_host_tensors_free(&bound);
  if (comm && rc != CLI_EXIT_OK) {
    /* After a failure the stream may hold collectives that wait on a dead peer, and NCCL's
     * abort, running on the communicator's watchdog thread, can take long to tear down the
     * connections to it. This rank has said why it failed, so the process ends here, at
     * once: tearing down the pipeline would wait on that abort, and exit()'s handlers would
     * unload CUDA and NCCL under it (seen on two H200s: SIGSEGV after the error). */
    fflush(NULL);
    _exit(rc);
  }
  if (p && (st = recap_pipeline_destroy(p)) != RECAP_OK && rc == CLI_EXIT_OK) {
    cli_report_failure(who, "destroying the pipeline", st);
    rc = CLI_EXIT_FAILURE;
  }
  recap_comm_destroy(comm);
  recap__model_release(model);
  return rc;
}

/* ---- recap launch ---- */

static const char *const LAUNCH = "launch";

static const cli_option launch_options[] = {
    {.flag = "--gpus",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "ranks (1 to " CLI_STR(MAX_RANKS) "); with --device host only 1 (more is a\n"
                                               "usage error)"},
    {.flag = "--timeout",
     .value = "S",
     .kind = CLI_VALUE_TEXT,
     .help = "passed to each rank: rendezvous, NCCL init and every wait (default 120)"},
    {.flag = "--grace",
     .value = "S",
     .kind = CLI_VALUE_TEXT,
     .help = "seconds before stopping the other ranks after a failure (default: the timeout + 5)"},
    {.flag = "--env-init",
     .kind = CLI_VALUE_NONE,
     .help = "start the ranks as torchrun does: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR\n"
             "(127.0.0.1) and MASTER_PORT (a free port) in their environment and --init\n"
             "env:// (recap run --help), instead of a file:// rendezvous"},
    {0}};
const cli_help cli_launch_help = {
    .synopsis =
        "recap launch --gpus N [--timeout S] [--grace S] [--env-init] --\n"
        "             run|generate|bench-decode|serve-bench SPEC [flags]",
    .description =
        "Starts N processes of `recap run SPEC --world N --rank R --init file://...` (or\n"
        "`recap generate`, `recap bench-decode` or `recap serve-bench --generate`) on this\n"
        "machine, rank R seeing GPU R\n"
        "(CUDA_VISIBLE_DEVICES; the R-th entry of an existing list), waits for them and prints\n"
        "every rank's exit. '{rank}' in\n"
        "an argument becomes R: one spec per rank (recap import-hf --tp N -o m.rank{rank}.yaml).\n"
        "When a rank fails the others get --grace seconds to fail on their own (their\n"
        "collectives time out), then SIGTERM, then SIGKILL. N > 1 needs N visible CUDA\n"
        "devices (else launch starts no rank and exits 1); N = 1 may run on the host backend.",
    .epilog =
        "run flags with --world: --mode, --device, --iters, --warmup, --dim, --seed, --json -\n"
        "(each rank's JSON on its stdout, its text on stderr), --base-dir (inputs come from\n"
        "rank 0; seed: --seed, else the spec's seed:, else 1234). --dim of the bucketed dim\n"
        "above its largest bucket replaces the buckets with that size.\n"
        "Each rank runs with NCCL_GRAPH_MIXING_SUPPORT=0 unless the environment sets it (a\n"
        "user's value, 1 included, is kept): decode loops across ranks need it.",
    .groups = {{.options = launch_options}},
};

/* The R-th entry of a comma-separated CUDA_VISIBLE_DEVICES, or R. */
static void visible_device(int rank, char *buf, size_t size) {
  const char *list = getenv("CUDA_VISIBLE_DEVICES");
  snprintf(buf, size, "%d", rank);
  if (!list || !list[0]) return;
  int index = 0;
  for (const char *s = list; *s; ++index) {
    const char *e = strchr(s, ',');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    if (index == rank && n < size) {
      memcpy(buf, s, n);
      buf[n] = '\0';
      return;
    }
    if (!e) break;
    s = e + 1;
  }
}

/* A port of 127.0.0.1 that was free a moment ago, for --env-init's rank 0 to listen on; 0 if
 * none could be had. Another program may take it before rank 0 binds it: rank 0 then fails
 * saying it cannot listen there. */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

static void describe_exit(int status, char *buf, size_t size) {
  if (WIFEXITED(status))
    snprintf(buf, size, "exit %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
  else
    snprintf(buf, size, "status %d", status);
}

/* `arg` with every "{rank}" replaced by `rank` (a new string, or arg itself without one); NULL
 * when out of memory. The child that calls this execs at once, so nothing is freed. */
static char *with_rank(char *arg, const char *rank) {
  if (!strstr(arg, "{rank}")) return arg;
  size_t size = strlen(arg) * (strlen(rank) + 1) + 1;
  char *out = malloc(size), *o = out;
  if (!out) return NULL;
  for (const char *p = arg; *p;) {
    if (strncmp(p, "{rank}", 6) == 0) {
      o += sprintf(o, "%s", rank);
      p += 6;
    } else {
      *o++ = *p++;
    }
  }
  *o = '\0';
  return out;
}

int cli_launch_main(int argc, char **argv) {
  int sep = -1;
  for (int i = 0; i < argc; i++)
    if (strcmp(argv[i], "--") == 0) {
      sep = i;
      break;
    }
  if (cli_wants_help(sep < 0 ? argc : sep, argv)) {
    cli_help_print(stdout, &cli_launch_help);
    return CLI_EXIT_OK;
  }
  long long gpus = 0, timeout = 120, grace = -1;
  bool env_init = false;
  for (int i = 0; i < (sep < 0 ? argc : sep); i++) {
    const char *v = NULL;
    int m;
    if (strcmp(argv[i], "--env-init") == 0) {
      env_init = true;
    } else if ((m = cli_flag(LAUNCH, argc, argv, &i, "--gpus", &v)) != 0) {
      if (m < 0 || !cli_parse_int(LAUNCH, "--gpus", v, 1, MAX_RANKS, &gpus)) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(LAUNCH, argc, argv, &i, "--timeout", &v)) != 0) {
      if (m < 0 || !cli_parse_int(LAUNCH, "--timeout", v, 1, 86400, &timeout))
        return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(LAUNCH, argc, argv, &i, "--grace", &v)) != 0) {
      if (m < 0 || !cli_parse_int(LAUNCH, "--grace", v, 0, 3600, &grace)) return CLI_EXIT_USAGE;
    } else {
      fprintf(stderr, "recap launch: unexpected '%s' before '--'\n", argv[i]);
      return CLI_EXIT_USAGE;
    }
  }
  /* By default the other ranks get as long as their own waits take to fail (a rank notices
   * a dead peer within its timeout), and a little more. */
  if (grace < 0) grace = timeout + 5;
  if (sep < 0 || gpus < 1 || sep + 1 >= argc ||
      (strcmp(argv[sep + 1], "run") != 0 && strcmp(argv[sep + 1], "generate") != 0 &&
       strcmp(argv[sep + 1], "bench-decode") != 0 && strcmp(argv[sep + 1], "serve-bench") != 0)) {
    cli_help_print(stderr, &cli_launch_help);
    return CLI_EXIT_USAGE;
  }
  for (int i = sep + 2; i < argc; i++)
    if (strcmp(argv[i], "--world") == 0 || strcmp(argv[i], "--rank") == 0 ||
        strcmp(argv[i], "--init") == 0 || !strncmp(argv[i], "--world=", 8) ||
        !strncmp(argv[i], "--rank=", 7) || !strncmp(argv[i], "--init=", 7)) {
      fprintf(stderr, "recap launch: %s is set by launch itself\n", argv[i]);
      return CLI_EXIT_USAGE;
    }
  /* Every rank would refuse the world at its first step: say so before starting any. */
  for (int i = sep + 2; gpus > 1 && i < argc; i++) {
    const char *device = NULL;
    int k = i, m = cli_flag(LAUNCH, argc, argv, &k, "--device", &device);
    if (m < 0) return CLI_EXIT_USAGE; /* --device without a value: reported */
    if (m > 0 && strcmp(device, "host") == 0) {
      fprintf(stderr,
              "recap launch: --gpus %lld with --device host: the host backend is a world of 1 "
              "(one device, no NCCL); use --gpus 1 or CUDA devices\n",
              gpus);
      return CLI_EXIT_USAGE;
    }
  }
  /* Rank r runs on GPU r alone (CUDA_VISIBLE_DEVICES): with fewer GPUs than ranks, ranks fall
   * back to the host backend, whose world is 1, and every one fails at the communicator. A
   * world of 1 may run on the host (its rank falls back with a note), as the tests do. */
  if (gpus > 1) {
    int count = 0;
    if (!recap_backend_compiled(RECAP_BACKEND_CUDA) ||
        recap_device_count(RECAP_BACKEND_CUDA, &count) != RECAP_OK)
      count = 0;
    if (count < gpus) {
      fprintf(stderr, "recap launch: --gpus %lld needs %lld CUDA devices, %s; no rank started\n",
              gpus, gpus,
              !recap_backend_compiled(RECAP_BACKEND_CUDA) ? "but this build has no CUDA backend"
              : count == 0                                ? "but this machine has none visible"
              : count == 1                                ? "but only 1 is visible"
                                                          : "but fewer are visible");
      return CLI_EXIT_FAILURE;
    }
  }
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "recap launch: cannot find this executable: %s\n", strerror(errno));
    return CLI_EXIT_FAILURE;
  }
  self[n] = '\0';
  const char *tmp = getenv("TMPDIR");
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/recap-launch-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    fprintf(stderr, "recap launch: cannot create a temporary folder: %s\n", strerror(errno));
    return CLI_EXIT_FAILURE;
  }
  char init[PATH_MAX + 64], world[16], rv_path[PATH_MAX + 16];
  snprintf(rv_path, sizeof rv_path, "%s/rendezvous", dir);
  snprintf(init, sizeof init, "file://%s?generation=%ld", rv_path, (long)getpid());
  char port[16] = "";
  if (env_init) {
    int p = free_port();
    if (p == 0) {
      fprintf(stderr, "recap launch: --env-init: no free port on 127.0.0.1: %s\n", strerror(errno));
      rmdir(dir);
      return CLI_EXIT_FAILURE;
    }
    snprintf(port, sizeof port, "%d", p);
    snprintf(init, sizeof init, "env://");
  }
  snprintf(world, sizeof world, "%lld", gpus);
  char timeout_text[32];
  snprintf(timeout_text, sizeof timeout_text, "%lld", timeout);

  int child_argc = argc - sep; /* "run" ... plus our flags */
  pid_t pids[MAX_RANKS];
  int status[MAX_RANKS];
  bool done[MAX_RANKS];
  int started = 0;
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < gpus; r++) {
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "recap launch: fork failed: %s\n", strerror(errno));
      break;
    }
    if (pid == 0) {
      char rank[16], dev[64];
      snprintf(rank, sizeof rank, "%d", r);
      visible_device(r, dev, sizeof dev);
      setenv("CUDA_VISIBLE_DEVICES", dev, 1);
      if (env_init) {
        /* This launch is the ranks' launcher now: a torchrun around it, whose variables they
         * would otherwise inherit, is not theirs (nor is its port). The rank sees one GPU, so
         * its LOCAL_RANK is 0. */
        setenv("RANK", rank, 1);
        setenv("WORLD_SIZE", world, 1);
        setenv("LOCAL_RANK", "0", 1);
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("MASTER_PORT", port, 1);
        unsetenv("RECAP_MASTER_PORT");
        unsetenv("TORCHELASTIC_USE_AGENT_STORE");
      }
      char **args = calloc((size_t)child_argc + 12, sizeof *args);
      if (!args) _exit(CLI_EXIT_FAILURE);
      int k = 0;
      args[k++] = self;
      for (int i = sep + 1; i < argc; i++)
        if (!(args[k++] = with_rank(argv[i], rank))) _exit(CLI_EXIT_FAILURE);
      if (!env_init) {
        args[k++] = "--world";
        args[k++] = world;
        args[k++] = "--rank";
        args[k++] = rank;
      }
      args[k++] = "--init";
      args[k++] = init;
      args[k++] = "--timeout";
      args[k++] = timeout_text;
      args[k] = NULL;
      execv(self, args);
      fprintf(stderr, "recap launch: exec %s failed: %s\n", self, strerror(errno));
      _exit(127);
    }
    pids[started] = pid;
    done[started] = false;
    status[started] = 0;
    started++;
  }
  int remaining = started;
  double fail_at = -1;
  int stage = 0; /* 0: waiting, 1: SIGTERM sent, 2: SIGKILL sent */
  int first_failed = started < gpus ? -2 : -1;
  if (first_failed == -2) fail_at = cli_now();
  while (remaining > 0) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < started; r++)
        if (pids[r] == pid && !done[r]) {
          done[r] = true;
          status[r] = st;
          remaining--;
          if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && fail_at < 0) {
            fail_at = cli_now();
            first_failed = r;
          }
        }
      continue;
    }
    if (fail_at >= 0 && stage < 2 && cli_now() - fail_at > (double)grace + stage * 5.0) {
      for (int r = 0; r < started; r++)
        if (!done[r]) kill(pids[r], stage == 0 ? SIGTERM : SIGKILL);
      if (stage == 0)
        fprintf(stderr, "recap launch: rank %d failed; stopping the other ranks\n", first_failed);
      stage++;
    }
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  unlink(rv_path);
  rmdir(dir);
  int failed = started < gpus ? 1 : 0;
  printf("recap launch: %d rank%s\n", (int)gpus, gpus == 1 ? "" : "s");
  for (int r = 0; r < started; r++) {
    char text[96];
    describe_exit(status[r], text, sizeof text);
    bool ok = WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0;
    failed += !ok;
    printf("  rank %d: %s\n", r, text);
  }
  for (int r = started; r < gpus; r++) printf("  rank %d: not started\n", r);
  return failed ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}
