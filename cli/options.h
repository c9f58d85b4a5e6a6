/*
 * options.h: each subcommand's options as a table, the one source of its `--help`, of
 * `recap completion bash` and of `recap man` (docs/recap.1).
 *
 * A command's file defines its table beside its parser, so that a new flag is added in one
 * file; scripts/check_cli_options.py fails CI when a parser accepts a flag its file's tables do
 * not list, or the reverse. Help texts are wrapped by hand (as they print); the man page lets
 * roff fill them.
 *
 *   static const cli_option demo_options[] = {
 *       {.flag = "--iters", .value = "N", .kind = CLI_VALUE_TEXT, .help = "timed runs"},
 *       {.flag = "--svg", .value = "FILE", .kind = CLI_VALUE_FILE, .help = "write a chart"},
 *       {0}};
 *   const cli_help cli_demo_help = {.synopsis = "recap demo SPEC [--iters N]",
 *                                   .description = "Does the demo.", .operand = CLI_VALUE_SPEC,
 *                                   .groups = {{.options = demo_options}}};
 *   ...
 *   if (cli_wants_help(argc, argv)) {
 *     cli_help_print(stdout, &cli_demo_help);
 *     return CLI_EXIT_OK;
 *   }
 */
#ifndef RECAP_CLI_OPTIONS_H
#define RECAP_CLI_OPTIONS_H

#include <stdbool.h>
#include <stdio.h>

/* What a flag's value (or a command's operands) is: what shell completion offers for it. */
typedef enum {
  CLI_VALUE_NONE,  /* a switch, or a command without operands */
  CLI_VALUE_TEXT,  /* numbers, names, lists: nothing to complete */
  CLI_VALUE_FILE,  /* any file */
  CLI_VALUE_SPEC,  /* a spec (*.yaml) */
  CLI_VALUE_DIR,   /* a folder */
  CLI_VALUE_WORDS, /* one of the fixed words in `words` */
} cli_value_kind;

typedef struct {
  const char *flag;  /* "--iters"; NULL ends a table */
  const char *alias; /* another spelling ("-o" for --output), or NULL */
  const char *value; /* the placeholder ("N", "FILE"); NULL for a switch */
  cli_value_kind kind;
  const char *words; /* CLI_VALUE_WORDS: the words, separated by spaces ("cuda host") */
  const char *help;  /* lines separated by '\n', without the indentation */
} cli_option;

enum { CLI_MAX_OPTION_GROUPS = 2 };

/* Options printed under one heading; a table may live in another file than the command's (a
 * distributed run's flags are parsed in launch.c). */
typedef struct {
  const char *heading;       /* NULL: the command's own options, without a heading */
  const cli_option *options; /* ends with {0}; NULL: no further group */
} cli_option_group;

typedef struct {
  const char *synopsis;    /* after "usage: "; further lines (usages or continuations) by '\n' */
  const char *description; /* paragraphs, wrapped by hand */
  cli_value_kind operand;  /* what the positional arguments are */
  const char *operand_words;
  cli_option_group groups[CLI_MAX_OPTION_GROUPS];
  const char *epilog;      /* after the options, or NULL */
  const char *exit_status; /* NULL: CLI_EXIT_STATUS_DEFAULT */
} cli_help;

/* A macro's value as a string literal, for help texts that state a limit the code uses. */
#define CLI_STR(x) CLI_STR_(x)
#define CLI_STR_(x) #x

#define CLI_EXIT_STATUS_DEFAULT "0 ok, 1 on a failure, 2 on a usage error."

/* One row of `recap`'s command table (main.c). */
typedef struct {
  const char *name;
  const char *summary;
  int (*main)(int argc, char **argv);
  const cli_help *help;
  /* It creates a device's allocator (runs, benchmarks, serves, or starts ranks that do): main.c
   * checks RECAP_ALLOC_CONF before it starts, so a malformed value is reported as the
   * environment's error, not as the first allocation's. */
  bool allocates;
} cli_command;

/* The command table, in the order `recap --help` lists it, and `recap` itself (its synopsis,
 * description and options: --help, --version): main.c registers both before it runs a
 * command (help.c). */
void cli_commands_register(const cli_command *commands, size_t count, const cli_help *recap_help);
const cli_command *cli_commands(size_t *count, const cli_help **recap_help);

/* A command's --help text (help.c): usage, description, the option groups, epilog, exit
 * status. */
void cli_help_print(FILE *out, const cli_help *help);
/* `recap`'s usage with the command list (main.c's --help and usage errors). */
void cli_usage_print(FILE *out);

/* `text` for roff (help.c): backslashes and hyphens escaped, no line read as a request;
 * cli_roff_span: its first n characters. */
void cli_roff_text(FILE *out, const char *text);
void cli_roff_span(FILE *out, const char *text, size_t n);

/* completion.c: `recap completion bash`. */
int cli_completion_main(int argc, char **argv);
extern const cli_help cli_completion_help;
/* man.c: `recap man`, the roff page docs/recap.1 holds. */
int cli_man_main(int argc, char **argv);
extern const cli_help cli_man_help;

#endif
