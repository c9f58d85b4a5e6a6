/*
 * cli.h: the `recap` command line's subcommands (internal to the CLI).
 *
 * Each subcommand is one file with one entry point taking the arguments after its name and
 * returning the process exit code: 0 ok, 1 failure, 2 usage error. Only the CLI decides to
 * exit; the libraries below it return statuses.
 */
#ifndef RECAP_ENGINE_CLI_H
#define RECAP_ENGINE_CLI_H

#include <stdio.h>

enum { CLI_EXIT_OK = 0, CLI_EXIT_FAILURE = 1, CLI_EXIT_USAGE = 2 };

typedef struct {
  const char *name;
  const char *summary;
  int (*main)(int argc, char **argv);
} cli_command;

int cli_info_main(int argc, char **argv);

/* Whether argv[i] is -h or --help for any i. */
int cli_wants_help(int argc, char **argv);

#endif
