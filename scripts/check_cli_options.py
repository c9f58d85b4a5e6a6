#!/usr/bin/env python3
"""CLI options check: every flag a `recap` command parses is in its option tables, and back.

Usage: scripts/check_cli_options.py [ROOT]     (ROOT defaults to the repository this script is in)

A command's option tables (cli/options.h: `cli_option NAME[] = {... {0}}`, beside its parser)
are the one source of its --help, `recap completion bash` and `recap man` (docs/recap.1), so a
flag the parser reads but no table lists is undocumented and never completed, and a tabled
flag no parser reads is documented but refused. Prints one line per violation, `RULE path:line:
message`, then one line per rule and an "N passed, N failed" line (one check per rule) that
.ci/run counts. Exits 1 on any violation.

The unit is a file of cli/ (its tables against its parsers), or a group of files when one
command's flags are parsed in two (GROUPS). A parser's flags are the "-x" / "--x" literals
given to cli_flag(...) or compared with strcmp(argv[...], ...), plus --json for cli_json_flag,
--dim for cli_dim_flag and, for cli_run_flag and cli_world_flag, the flags they themselves read
(args.c, world.c). A table that holds CLI_WORLD_RANK_OPTIONS (world.h) lists the macro's rows.
-h and --help are every command's (cli_wants_help) and in no table but `recap`'s.

Rules:
  UNTABLED  a flag a file's parsers read is in one of its (or its group's) option tables.
  UNPARSED  a flag in a file's option tables is read by one of its (or its group's) parsers.
"""
import os
import re
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ in scripts/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import source_check  # noqa: E402

RULES = ["UNTABLED", "UNPARSED"]
# A distributed run's flags are parsed in launch.c; serve-bench --generate's in
# serve_generate.c; a distributed generate's in generate_dist.c; a distributed bench-decode's
# table is in bench_decode_dist.c, its parser in bench_decode.c.
GROUPS = [("cli/run.c", "cli/launch.c"), ("cli/serve_bench.c", "cli/serve_generate.c"),
          ("cli/generate.c", "cli/generate_dist.c"),
          ("cli/bench_decode.c", "cli/bench_decode_dist.c")]
# The shared parsers' own files: their flags count where they are called.
HELPERS = {"cli/args.c", "cli/json_out.c", "cli/world.c"}
WORLD_MACRO = "CLI_WORLD_RANK_OPTIONS"
HELP_FLAGS = {"-h", "--help"}
SEPARATOR = "--"  # launch's `-- run SPEC`: not a flag

FLAG_CALL = re.compile(r'\bcli_flag\(\s*\w+\s*,\s*\w+\s*,\s*\w+\s*,\s*&?\w+\s*,\s*"(-[^"]*)"')
FLAG_STRCMP = re.compile(r'\bstrcmp\(\s*argv\[[^\]]*\]\s*,\s*"(-[^"]*)"\s*\)')
TABLE = re.compile(r"\bcli_option\s+\w+\[\]\s*=\s*\{(.*?)\{0\}\s*\}\s*;", re.S)
TABLE_NAME = re.compile(r'\.(?:flag|alias)\s*=\s*"([^"]+)"')
RUN_FLAG_BODY = re.compile(r"\bint cli_run_flag\([^)]*\)\s*\{(.*?)\n\}", re.S)
WORLD_FLAG_BODY = re.compile(r"\bint cli_world_flag\([^)]*\)\s*\{(.*?)\n\}", re.S)
# The macro's definition: its line and the lines continued by a backslash.
WORLD_MACRO_BODY = re.compile(r"#define %s((?:[^\n]*\\\n)*[^\n]*)" % WORLD_MACRO)


def strip_comments(text):
    """Comments blanked, line breaks kept (so offsets still give line numbers)."""
    return re.sub(r"/\*.*?\*/|//[^\n]*",
                  lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def parsed_flags(text, run_flags, world_flags=()):
    """{flag: line} of the flags the file's parsers read."""
    flags = {}
    for rx in (FLAG_CALL, FLAG_STRCMP):
        for m in rx.finditer(text):
            flags.setdefault(m.group(1), line_of(text, m.start()))
    for call, implied in (("cli_json_flag", ["--json"]), ("cli_dim_flag", ["--dim"]),
                          ("cli_run_flag", run_flags), ("cli_world_flag", world_flags)):
        for m in re.finditer(r"\b%s\(" % call, text):
            for flag in implied:
                flags.setdefault(flag, line_of(text, m.start()))
    for flag in HELP_FLAGS | {SEPARATOR}:
        flags.pop(flag, None)
    return flags


def tabled_flags(text, macro_flags=()):
    """{flag: line} of the flags (and aliases) in the file's option tables."""
    flags = {}
    for table in TABLE.finditer(text):
        for m in TABLE_NAME.finditer(table.group(1)):
            flags.setdefault(m.group(1), line_of(text, table.start(1) + m.start()))
        for m in re.finditer(r"\b%s\b" % WORLD_MACRO, table.group(1)):
            for flag in macro_flags:
                flags.setdefault(flag, line_of(text, table.start(1) + m.start()))
    for flag in HELP_FLAGS:
        flags.pop(flag, None)
    return flags


def check(root):
    def read(rel):
        with open(os.path.join(root, rel)) as f:
            return strip_comments(f.read())

    def read_optional(rel):
        return read(rel) if os.path.exists(os.path.join(root, rel)) else ""

    body = RUN_FLAG_BODY.search(read("cli/args.c"))
    run_flags = sorted(parsed_flags(body.group(1), [])) if body else []
    body = WORLD_FLAG_BODY.search(read_optional("cli/world.c"))
    world_flags = sorted(parsed_flags(body.group(1), [])) if body else []
    # Read as written: comment stripping would take the "//" of file:///PATH in a help text
    # for a comment and blank the line's continuation.
    world_h = os.path.join(root, "cli/world.h")
    body = WORLD_MACRO_BODY.search(open(world_h).read()) if os.path.exists(world_h) else None
    macro_flags = TABLE_NAME.findall(body.group(1)) if body else []
    files = sorted("cli/" + n for n in os.listdir(os.path.join(root, "cli"))
                   if n.endswith(".c") and "cli/" + n not in HELPERS)
    grouped = {path for group in GROUPS for path in group}
    units = [g for g in GROUPS if all(p in files for p in g)]
    units += [(path,) for path in files if path not in grouped]
    violations = []
    for unit in units:
        parsed, tabled = {}, {}
        for path in unit:
            text = read(path)
            for flag, line in parsed_flags(text, run_flags, world_flags).items():
                parsed.setdefault(flag, (path, line))
            for flag, line in tabled_flags(text, macro_flags).items():
                tabled.setdefault(flag, (path, line))
        where = " or ".join(unit)
        for flag in sorted(set(parsed) - set(tabled)):
            path, line = parsed[flag]
            violations.append(("UNTABLED", path, line, "%s is parsed here but no option table "
                               "of %s lists it" % (flag, where)))
        for flag in sorted(set(tabled) - set(parsed)):
            path, line = tabled[flag]
            violations.append(("UNPARSED", path, line, "%s is in this option table but no "
                               "parser in %s reads it" % (flag, where)))
    return violations


if __name__ == "__main__":
    sys.exit(source_check.main(check, RULES, sys.argv))
