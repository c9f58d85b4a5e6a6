/* main.c: `recap SUBCOMMAND ...` dispatch. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "include/recap.h"
#include "serve/runner.h"

static const cli_command commands[] = {
    {"info", "devices, memory, telemetry, library versions and compiled architectures",
     cli_info_main, &cli_info_help, false},
    {"validate", "check specs; every error as FILE:LINE:COL", cli_validate_main, &cli_validate_help,
     false},
    {"plan", "the memory plan of a spec: offsets, lifetimes, arena vs naive vs max-live",
     cli_plan_main, &cli_plan_help, false},
    {"ops", "every op with its inputs, attributes and dtypes", cli_ops_main, &cli_ops_help, false},
    {"dot", "the pipeline DAG (or, with --graph, the captured graph) as Graphviz", cli_dot_main,
     &cli_dot_help, false},
    {"import-hf", "a Hugging Face checkpoint folder (Llama, Mistral, Qwen2/3, GPT-2) as a spec",
     cli_import_hf_main, &cli_import_hf_help, false},
    {"generate", "new tokens (greedy or sampled) from an imported model's entries",
     cli_generate_main, &cli_generate_help, true},
    {"run", "run a pipeline: outputs, checksums, timing; --save-tensors", cli_run_main,
     &cli_run_help, true},
    {"bench", "eager vs graph replay: median/p10/p90, speedup, capture cost, JSON and SVG",
     cli_bench_main, &cli_bench_help, true},
    {"bench-ops", "single ops at large sizes: GB/s vs a device copy, GEMM TFLOP/s",
     cli_bench_ops_main, &cli_bench_ops_help, true},
    {"bench-gemm", "linear over a shape grid vs PyTorch: table, heat map, geomean, losses",
     cli_bench_gemm_main, &cli_bench_gemm_help, true},
    {"bench-capture", "capture, instantiate and update cost; host CPU time per launch",
     cli_bench_capture_main, &cli_bench_capture_help, true},
    {"bench-decode",
     "a paged serving spec's decode step: tokens/s, bandwidth vs a copy, GEMM share",
     cli_bench_decode_main, &cli_bench_decode_help, true},
    {"bench-loop", "decode loops (many steps per graph launch) against one launch per decode step",
     cli_bench_loop_main, &cli_bench_loop_help, true},
    {"serve-bench", "an inference-server loop: N workers on shared weights, checked results",
     cli_serve_bench_main, &cli_serve_bench_help, true},
    {"memviz", "check an allocator snapshot (run --memory-snapshot) and draw it as an SVG",
     cli_memviz_main, &cli_memviz_help, false},
    {"launch", "start N ranks of `recap run` on this machine's GPUs (NCCL); each rank's exit",
     cli_launch_main, &cli_launch_help, true},
    {"env", "every RECAP_* environment variable: value, default, meaning", cli_env_main,
     &cli_env_help, false},
    {"schema", "the spec format as a JSON Schema, from the op registry (for editors)",
     cli_schema_main, &cli_schema_help, false},
    {"completion", "a shell completion script (bash) for recap's commands and flags",
     cli_completion_main, &cli_completion_help, false},
    {"man", "recap's manual page (roff), as docs/recap.1 holds it", cli_man_main, &cli_man_help,
     false},
};

static const cli_option recap_options[] = {
    {.flag = "--help",
     .alias = "-h",
     .kind = CLI_VALUE_NONE,
     .help = "the commands and the environment variables recap reads; with a\n"
             "COMMAND (or as recap help COMMAND), that command's --help"},
    {.flag = "--version",
     .kind = CLI_VALUE_NONE,
     .help = "recap's version and the CUDA libraries' it runs with"},
    {0}};

static const cli_help recap_help = {
    .synopsis = "recap [--version] [--help] COMMAND [ARGS]\nrecap help [COMMAND]",
    .description =
        "Captures a pipeline described by a spec (YAML) as CUDA graphs and replays them;\n"
        "checks, plans, runs, benchmarks and draws specs, and imports Hugging Face checkpoints\n"
        "as specs.",
    .groups = {{.options = recap_options}},
};

/* RECAP_ALLOC_CONF is read when a device's allocator is created, deep inside a pipeline's
 * load; checked here, a typo is named as the variable's, as a bad RECAP_HOST_MEMORY_BYTES is,
 * instead of as a failure to allocate some tensor of the spec. */
static bool alloc_conf_ok(const char *cmd) {
  const char *conf = getenv("RECAP_ALLOC_CONF");
  if (recap_alloc_conf_check(conf) == RECAP_OK) return true;
  const char *why = recap_last_error(), *prefix = "RECAP_ALLOC_CONF: ";
  if (strncmp(why, prefix, strlen(prefix)) == 0) why += strlen(prefix);
  fprintf(stderr, "recap %s: RECAP_ALLOC_CONF='%s': %s\n", cmd, conf, why);
  return false;
}

/* RECAP_DECODE_LOOP is read when a generator opens, after its spec is loaded: checked here
 * too, so that a malformed value is a usage error before any work. */
static bool decode_loop_ok(const char *cmd) {
  int64_t steps;
  if (recap__decode_loop_steps_from_env(&steps) == RECAP_OK) return true;
  fprintf(stderr, "recap %s: %s\n", cmd, recap_last_error());
  return false;
}

static int dispatch(int argc, char **argv) {
  /* `bazel run` starts us inside the runfiles tree; paths on the command line are relative
   * to where the user typed the command. */
  const char *cwd = getenv("BUILD_WORKING_DIRECTORY");
  if (cwd && chdir(cwd) != 0) {
    fprintf(stderr, "recap: cannot enter %s\n", cwd);
    return CLI_EXIT_FAILURE;
  }
  cli_commands_register(commands, sizeof commands / sizeof commands[0], &recap_help);
  if (argc < 2) {
    cli_usage_print(stderr);
    return CLI_EXIT_USAGE;
  }
  if (strcmp(argv[1], "--version") == 0) {
    if (argc > 2) {
      fprintf(stderr, "recap: --version takes no arguments (got '%s')\n", argv[2]);
      return CLI_EXIT_USAGE;
    }
    cli_print_version(stdout);
    return CLI_EXIT_OK;
  }
  /* `recap help [COMMAND]` and `recap --help [COMMAND]`, as git has them: the command's own
   * --help, or recap's. */
  bool help =
      strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
  if (help && argc > 3) {
    fprintf(stderr, "recap: %s takes at most one command (got '%s' and '%s')\n", argv[1], argv[2],
            argv[3]);
    return CLI_EXIT_USAGE;
  }
  if (help && argc == 2) {
    cli_usage_print(stdout);
    cli_env_print_help(stdout);
    return CLI_EXIT_OK;
  }
  const char *name = help ? argv[2] : argv[1];
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    if (strcmp(name, commands[i].name) != 0) continue;
    if (help) {
      cli_help_print(stdout, commands[i].help);
      return CLI_EXIT_OK;
    }
    if (commands[i].allocates && !cli_wants_help(argc - 2, argv + 2) &&
        (!alloc_conf_ok(argv[1]) || !decode_loop_ok(argv[1])))
      return CLI_EXIT_USAGE;
    return commands[i].main(argc - 2, argv + 2);
  }
  fprintf(stderr, "recap: unknown command '%s'\n\n", name);
  cli_usage_print(stderr);
  return CLI_EXIT_USAGE;
}

/* A report that could not be written is a failure, whatever the command made of it: with
 * stdout on a full disk (`recap completion bash > FILE`) the buffered text is lost at exit. */
int main(int argc, char **argv) {
  int rc = dispatch(argc, argv);
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "recap%s%s: writing the standard output failed: %s\n", argc > 1 ? " " : "",
            argc > 1 ? argv[1] : "", strerror(errno));
    if (rc == CLI_EXIT_OK) rc = CLI_EXIT_FAILURE;
  }
  return rc;
}
