/* ops.c: `recap ops [OP...]`: the op registry as a spec author needs it. */
#include <string.h>

#include "cli/cli.h"

static const char *const CMD = "ops";

static const char *kind_name(recap_op_attr_kind kind) {
  switch (kind) {
    case RECAP_OP_ATTR_FLOAT:
      return "float";
    case RECAP_OP_ATTR_INT:
      return "int";
    case RECAP_OP_ATTR_BOOL:
      return "bool";
    case RECAP_OP_ATTR_INT_LIST:
      return "int list";
    case RECAP_OP_ATTR_ACTIVATION:
      return "activation";
    case RECAP_OP_ATTR_DTYPE:
      return "dtype";
    case RECAP_OP_ATTR_EXPR:
      return "expression";
  }
  return "?";
}

/* Prints text from column `indent` (where the cursor is), wrapping at `width`. */
static void print_wrapped(const char *text, int indent, int width) {
  int col = indent;
  while (*text) {
    size_t word = strcspn(text, " ");
    if (col > indent && col + 1 + (int)word > width) {
      printf("\n%*s", indent, "");
      col = indent;
    }
    printf(" %.*s", (int)word, text);
    col += 1 + (int)word;
    text += word;
    while (*text == ' ') text++;
  }
  printf("\n");
}

static void print_op(const recap_op_info *def) {
  printf("%s\n ", def->name);
  print_wrapped(def->summary, 1, 100);
  printf("  inputs:     ");
  int n = 0;
  for (const char *const *in = def->input_names; *in; in++, n++) {
    size_t len = strlen(*in);
    bool optional = len > 0 && (*in)[len - 1] == '?';
    printf("%s%.*s%s", n ? ", " : "", (int)(optional ? len - 1 : len), *in,
           optional ? " (optional)" : "");
  }
  if (n == 0) printf("none");
  printf("\n  outputs:    %d%s\n", def->num_outputs,
         strcmp(def->name, "split") == 0    ? " at most (one per size)"
         : strcmp(def->name, "sample") == 0 ? " at most (the second with logprobs: true)"
                                            : "");
  printf("  dtypes:     ");
  int d = 0;
  for (int t = 0; t < RECAP_DTYPE_COUNT; t++)
    if (def->dtype_mask & (1u << t)) printf("%s%s", d++ ? " " : "", recap_dtype_name(t));
  printf("%s\n", def->max_inputs == 0 ? " (the dtype attribute)" : "");
  if (def->in_place_input >= 0) {
    const char *in = def->input_names[def->in_place_input];
    size_t len = strlen(in);
    printf("  notes:      may write its output over input %.*s\n",
           (int)(len > 0 && in[len - 1] == '?' ? len - 1 : len), in);
  }
  if (def->is_random) printf("  notes:      draws from the device's Philox generator\n");
  if (def->num_attrs == 0) {
    printf("  attributes: none\n\n");
    return;
  }
  printf("  attributes:\n");
  for (size_t i = 0; i < def->num_attrs; i++) {
    recap_op_attr_info a;
    if (recap_op_attr_info_get(def->index, i, &a) != RECAP_OK) continue;
    /* A name wider than its column gets a line of its own, so kind, default and meaning stay
     * in their columns. */
    if (strlen(a.name) > 10)
      printf("    %s\n    %-10s", a.name, "");
    else
      printf("    %-10s", a.name);
    printf(" %-10s %-9s", kind_name(a.kind), a.default_text);
    print_wrapped(a.doc, 36, 100);
  }
  printf("\n");
}

const cli_help cli_ops_help = {
    .synopsis = "recap ops [OP...]",
    .description =
        "Lists every op a spec may use (or only the ones named): its inputs (optional ones\n"
        "marked), outputs, supported dtypes and attributes with kind, default and meaning. Any\n"
        "op also accepts the spec keys op, in, out, name, stream, shape and dtype.",
    .operand = CLI_VALUE_TEXT,
};

int cli_ops_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_ops_help);
    return CLI_EXIT_OK;
  }
  for (int i = 0; i < argc; i++)
    if (!cli_positional(CMD, argv[i])) return CLI_EXIT_USAGE;
  if (argc > 0) {
    int rc = CLI_EXIT_OK;
    for (int i = 0; i < argc; i++) {
      recap_op_info def;
      if (recap_op_info_find(argv[i], &def) != RECAP_OK) {
        fprintf(stderr, "recap %s: %s\n", CMD, recap_last_error());
        rc = CLI_EXIT_FAILURE;
        continue;
      }
      print_op(&def);
    }
    return rc;
  }
  size_t count = recap_op_count();
  printf("%zu ops\n\n", count);
  for (size_t i = 0; i < count; i++) {
    recap_op_info def;
    if (recap_op_info_get(i, &def) == RECAP_OK) print_op(&def);
  }
  return CLI_EXIT_OK;
}
