/* main.c: `recap SUBCOMMAND ...` dispatch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "include/recap.h"

static const cli_command commands[] = {
    {"info", "devices, memory, telemetry, library versions and compiled architectures",
     cli_info_main},
    {"validate", "check specs; every error as FILE:LINE:COL", cli_validate_main},
    {"plan", "the memory plan of a spec: offsets, lifetimes, arena vs naive vs max-live",
     cli_plan_main},
    {"ops", "every op with its inputs, attributes and dtypes", cli_ops_main},
    {"dot", "the pipeline DAG (or, with --graph, the captured graph) as Graphviz", cli_dot_main},
    {"import-hf", "a Hugging Face checkpoint folder (Llama, Mistral, Qwen2/3, GPT-2) as a spec",
     cli_import_hf_main},
    {"generate", "greedy tokens from an imported model's prefill and decode entries",
     cli_generate_main},
    {"run", "run a pipeline: outputs, checksums, timing; --save-tensors", cli_run_main},
    {"bench", "eager vs graph replay: median/p10/p90, speedup, capture cost, JSON and SVG",
     cli_bench_main},
    {"bench-ops", "single ops at large sizes: GB/s vs a device copy, GEMM TFLOP/s",
     cli_bench_ops_main},
    {"bench-capture", "capture, instantiate and update cost; host CPU time per launch",
     cli_bench_capture_main},
    {"bench-decode",
     "a paged serving spec's decode step: tokens/s, bandwidth vs a copy, GEMM share",
     cli_bench_decode_main},
    {"serve-bench", "an inference-server loop: N workers on shared weights, checked results",
     cli_serve_bench_main},
    {"memviz", "check an allocator snapshot (run --memory-snapshot) and draw it as an SVG",
     cli_memviz_main},
    {"launch", "start N ranks of `recap run` on this machine's GPUs (NCCL); each rank's exit",
     cli_launch_main},
    {"env", "every RECAP_* environment variable: value, default, meaning", cli_env_main},
    {"schema", "the spec format as a JSON Schema, from the op registry (for editors)",
     cli_schema_main},
};

static void print_usage(FILE *out) {
  fprintf(out, "usage: recap [--version] [--help] COMMAND [ARGS]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
  fprintf(out, "\n'recap COMMAND --help' describes a command.\n");
}

int main(int argc, char **argv) {
  /* `bazel run` starts us inside the runfiles tree; paths on the command line are relative
   * to where the user typed the command. */
  const char *cwd = getenv("BUILD_WORKING_DIRECTORY");
  if (cwd && chdir(cwd) != 0) {
    fprintf(stderr, "recap: cannot enter %s\n", cwd);
    return CLI_EXIT_FAILURE;
  }
  if (argc < 2) {
    print_usage(stderr);
    return CLI_EXIT_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    print_usage(stdout);
    cli_env_print_help(stdout);
    return CLI_EXIT_OK;
  }
  if (strcmp(argv[1], "--version") == 0) {
    cli_print_version(stdout);
    return CLI_EXIT_OK;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(argv[1], commands[i].name) == 0) return commands[i].main(argc - 2, argv + 2);
  fprintf(stderr, "recap: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return CLI_EXIT_USAGE;
}
