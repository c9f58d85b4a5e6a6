/* help.c: help text from the option tables (cli/options.h): a command's --help, recap's own
 * usage and the registry of commands it lists, and the roff escaping `recap man` and
 * `recap env` share. */
#include <string.h>

#include "cli/cli.h"

/* Help lines up in one column after the widest label of a command, up to this width; a longer
 * label ("--memory-snapshot F") starts its help two spaces after it, so that one long flag does
 * not push every other flag's help (wrapped by hand for that column) to the right. */
enum { LABEL_ALIGN_MAX = 16 };

static size_t label_width(const cli_option *o) {
  size_t n = strlen(o->flag);
  if (o->alias) n += strlen(o->alias) + 2;
  if (o->value) n += strlen(o->value) + 1;
  return n;
}

/* `text`'s lines, each but the first indented by `indent` spaces. */
static void print_lines(FILE *out, const char *text, int indent) {
  for (const char *p = text;;) {
    const char *nl = strchr(p, '\n');
    int n = nl ? (int)(nl - p) : (int)strlen(p);
    fprintf(out, "%.*s\n", n, p);
    if (!nl) return;
    p = nl + 1;
    fprintf(out, "%*s", indent, "");
  }
}

static void print_group(FILE *out, const cli_option_group *g, int column) {
  if (g->heading) fprintf(out, "%s\n", g->heading);
  for (const cli_option *o = g->options; o->flag; o++) {
    /* A short alias reads first, as usual ("-o, --output"); a long one after the flag. */
    bool first = o->alias && o->alias[1] != '-', after = o->alias && !first;
    int w = fprintf(out, "  %s%s%s%s%s%s%s", first ? o->alias : "", first ? ", " : "", o->flag,
                    after ? ", " : "", after ? o->alias : "", o->value ? " " : "",
                    o->value ? o->value : "");
    fprintf(out, "%*s", w + 2 <= column ? column - w : 2, "");
    print_lines(out, o->help, column);
  }
}

void cli_help_print(FILE *out, const cli_help *h) {
  fprintf(out, "usage: ");
  print_lines(out, h->synopsis, 7);
  fprintf(out, "\n%s\n", h->description);
  /* One column for every group, so that a command's help reads as one table. */
  size_t align = 0;
  for (int i = 0; i < CLI_MAX_OPTION_GROUPS && h->groups[i].options; i++)
    for (const cli_option *o = h->groups[i].options; o->flag; o++)
      if (label_width(o) > align) align = label_width(o);
  int column = 2 + (int)(align < LABEL_ALIGN_MAX ? align : LABEL_ALIGN_MAX) + 3;
  for (int i = 0; i < CLI_MAX_OPTION_GROUPS && h->groups[i].options; i++) {
    fputc('\n', out);
    print_group(out, &h->groups[i], column);
  }
  if (h->epilog) fprintf(out, "\n%s\n", h->epilog);
  fprintf(out, "\nexit status: ");
  print_lines(out, h->exit_status ? h->exit_status : CLI_EXIT_STATUS_DEFAULT, 0);
}

/* The table main.c registers: help.c owns the registry so that the commands that print every
 * command (--help, completion, man) read the table without depending on main.c, which in turn
 * names those commands in it. */
static const cli_command *registered;
static size_t num_registered;
static const cli_help *registered_recap_help;

void cli_commands_register(const cli_command *commands, size_t count, const cli_help *recap_help) {
  registered = commands;
  num_registered = count;
  registered_recap_help = recap_help;
}

const cli_command *cli_commands(size_t *count, const cli_help **recap_help) {
  *count = num_registered;
  if (recap_help) *recap_help = registered_recap_help;
  return registered;
}

/* The first n characters of text for roff. */
void cli_roff_span(FILE *out, const char *text, size_t n) {
  bool line_start = true;
  for (size_t i = 0; i < n; i++) {
    char c = text[i];
    /* A line that starts with a period or a quote would be read as a request. */
    if (line_start && (c == '.' || c == '\'')) fputs("\\&", out);
    if (c == '\\')
      fputs("\\e", out);
    else if (c == '-')
      fputs("\\-", out);
    else
      fputc(c, out);
    line_start = c == '\n';
  }
}

void cli_roff_text(FILE *out, const char *text) {
  cli_roff_span(out, text, strlen(text));
}

void cli_usage_print(FILE *out) {
  size_t count;
  const cli_help *recap_help;
  const cli_command *commands = cli_commands(&count, &recap_help);
  fprintf(out, "usage: ");
  print_lines(out, recap_help->synopsis, 7);
  fprintf(out, "\ncommands:\n");
  for (size_t i = 0; i < count; i++)
    fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
  fprintf(out, "\n'recap help COMMAND' (or 'recap COMMAND --help') describes a command.\n");
}
