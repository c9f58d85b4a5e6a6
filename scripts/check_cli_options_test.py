#!/usr/bin/env python3
"""Tests of scripts/check_cli_options.py over tiny synthetic cli/ trees written to a temporary
folder: a clean tree that must pass, and one change per violation that must fail naming it.
Ends with an "N passed, N failed" line for .ci/run."""
import os
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ in scripts/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_cli_options  # noqa: E402
import source_check  # noqa: E402

ARGS = """int cli_run_flag(const char *cmd, int argc, char **argv, int *i, cli_run_flags *f) {
  if ((m = cli_flag(cmd, argc, argv, i, "--iters", &v)) != 0) {
  } else if ((m = cli_dim_flag(cmd, argc, argv, i, f->dims, &f->num_dims)) != 0) {
  }
  return 1;
}
int cli_wants_help(int argc, char **argv) { return strcmp(argv[0], "--help") == 0; }
"""
JSON_OUT = 'int cli_json_flag(const char *cmd, int argc, char **argv, int *i, const char **p) ' \
           '{ return cli_flag(cmd, argc, argv, i, "--json", p); }\n'
BENCH = """static const cli_option bench_options[] = {
    {.flag = "--iters", .value = "N", .kind = CLI_VALUE_TEXT, .help = "timed runs"},
    {.flag = "--dim", .value = "NAME=VALUE", .kind = CLI_VALUE_TEXT, .help = "a dim"},
    {.flag = "--json", .value = "FILE", .kind = CLI_VALUE_FILE, .help = "results"},
    {.flag = "--output", .alias = "-o", .value = "F", .kind = CLI_VALUE_FILE, .help = "out"},
    {.flag = "--profile", .kind = CLI_VALUE_NONE, .help = "profile"},
    {0}};
static int parse_args(int argc, char **argv) {
  for (int i = 0; i < argc; i++) {
    /* cli_flag(CMD, argc, argv, &i, "--commented", &v) reads nothing */
    if (cli_wants_help(argc, argv)) return 0;
    if ((m = cli_run_flag(CMD, argc, argv, &i, &a->common)) != 0) {
    } else if ((m = cli_json_flag(CMD, argc, argv, &i, &a->json)) != 0 ||
               (m = cli_flag(CMD, argc, argv, &i, "-o", &a->out)) != 0 ||
               (m = cli_flag(CMD, argc, argv, &i, "--output", &a->out)) != 0) {
    } else if (strcmp(argv[i], "--profile") == 0) {
    }
  }
}
"""
RUN = """static const cli_option run_options[] = {
    {.flag = "--mode", .value = "M", .kind = CLI_VALUE_WORDS, .words = "eager graph",
     .help = "mode"},
    {0}};
const cli_help cli_run_help = {.command = "run", .groups = {{.options = run_options},
                               {.heading = "dist", .options = cli_run_dist_options}}};
int f(void) { return cli_flag(CMD, argc, argv, &i, "--mode", &a->mode); }
"""
LAUNCH = """const cli_option cli_run_dist_options[] = {
    {.flag = "--world", .value = "N", .kind = CLI_VALUE_TEXT, .help = "ranks"},
    {0}};
static const cli_option launch_options[] = {
    {.flag = "--gpus", .value = "N", .kind = CLI_VALUE_TEXT, .help = "ranks"},
    {0}};
int g(void) {
  if (strcmp(argv[i], "--") == 0) return 0;
  return cli_flag(RUN, argc, argv, &i, "--world", &v) + cli_flag(LAUNCH, argc, argv, &i, "--gpus", &v);
}
"""
WORLD_C = """int cli_world_flag(const char *cmd, int argc, char **argv, int *i, cli_world *w) {
  if ((m = cli_flag(cmd, argc, argv, i, "--init", &w->init)) != 0) return m;
  if ((m = cli_flag(cmd, argc, argv, i, "--rank", &v)) != 0) return 1;
  return 0;
}
"""
WORLD_H = """#define CLI_WORLD_RANK_OPTIONS \\
  {.flag = "--rank", .value = "R", .kind = CLI_VALUE_TEXT, .help = "rank"}, \\
  {.flag = "--init", .value = "URL", .kind = CLI_VALUE_TEXT, \\
   .help = "file:///PATH or env://"}
"""
GEN = """static const cli_option gen_options[] = {
    CLI_WORLD_RANK_OPTIONS,
    {0}};
int h(void) { return cli_world_flag(CMD, argc, argv, &i, &w); }
"""
CLEAN = {"cli/world.c": WORLD_C, "cli/world.h": WORLD_H, "cli/gen.c": GEN, "cli/args.c": ARGS, "cli/json_out.c": JSON_OUT, "cli/bench.c": BENCH, "cli/run.c": RUN,
         "cli/launch.c": LAUNCH, "cli/info.c": "int cli_info_main(void) { return 0; }\n"}


class CheckCliOptionsTest(source_check.SourceCheckTest):
    CHECK = check_cli_options.check
    CLEAN = CLEAN

    def test_clean_tree_passes(self):
        self.assertEqual(self.check({}), [])

    def test_parsed_flag_missing_from_the_table(self):
        v = self.check({"cli/bench.c": BENCH.replace(
            '"--profile") == 0) {', '"--profile") == 0) {\n    } else if (cli_flag(CMD, argc, '
            'argv, &i, "--svg", &a->svg)) {')})
        self.assertOnly(v, "UNTABLED", "cli/bench.c:17: --svg is parsed here")

    def test_shared_run_flag_missing_from_the_table(self):
        v = self.check({"cli/bench.c": BENCH.replace(
            '    {.flag = "--dim", .value = "NAME=VALUE", .kind = CLI_VALUE_TEXT, '
            '.help = "a dim"},\n', "")})
        self.assertOnly(v, "UNTABLED", "--dim is parsed here but no option table of cli/bench.c")

    def test_tabled_flag_no_parser_reads(self):
        v = self.check({"cli/bench.c": BENCH.replace('strcmp(argv[i], "--profile")', "0")})
        self.assertOnly(v, "UNPARSED", "cli/bench.c:6: --profile is in this option table")

    def test_alias_no_parser_reads(self):
        v = self.check({"cli/bench.c": BENCH.replace('"-o", &a->out', '"--out", &a->out')})
        self.assertEqual(sorted(x[0] for x in v), ["UNPARSED", "UNTABLED"])

    def test_group_of_files_is_one_unit(self):
        # --world is tabled in launch.c and listed by run's help: still parsed in the group.
        v = self.check({"cli/launch.c": LAUNCH.replace('"--world", &v)', '"--wrld", &v)')})
        self.assertEqual(sorted(x[0] for x in v), ["UNPARSED", "UNTABLED"])
        self.assertIn("cli/run.c or cli/launch.c", v[0][3])


    def test_world_flags_and_the_world_macro_pair_up(self):
        # The macro's rows (read past the "//" of a URL in its help) are the table's, the flags
        # cli_world_flag reads are the parser's; a row the helper does not read is unparsed.
        v = self.check({"cli/world.c": WORLD_C.replace('"--rank", &v)', '"--rnk", &v)')})
        self.assertEqual(sorted(x[0] for x in v), ["UNPARSED", "UNTABLED"])
        self.assertIn("cli/gen.c", v[0][1])


if __name__ == "__main__":
    sys.exit(source_check.run_tests())
