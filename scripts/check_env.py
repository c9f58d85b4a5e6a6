#!/usr/bin/env python3
"""Environment check: the table of RECAP_* variables (runtime/env_table.c) and the code agree.

Usage: scripts/check_env.py [ROOT]     (ROOT defaults to the repository this script is in)

The table is the one source of `recap --help`'s environment section, `recap env` and
docs/ENVIRONMENT.md, so a variable the code reads but the table lacks is undocumented, and an
entry no code reads documents nothing. Prints one line per violation, `RULE path:line:
message`, then one line per rule and an "N passed, N failed" line (one check per rule) that
.ci/run counts. Exits 1 on any violation.

Rules:
  UNKNOWN  every RECAP_* name that code reads or sets is in the table. C/CUDA: a "RECAP_X"
           literal as the first argument of a function whose name contains "env" (getenv,
           setenv, recap__env_bool, a file's own env_int...) or assigned to a variable whose
           name does; shell: $RECAP_X, ${RECAP_X...}, RECAP_X=...; .bazelrc: --test_env=RECAP_X;
           Python (the package and its tests, under python/): os.environ.get("RECAP_X"),
           os.environ["RECAP_X"], os.getenv("RECAP_X").
  UNREAD   every entry is read: one not marked test_only by the library or CLI (any folder but
           tests/, scripts/ and python/tests/), one marked test_only by those three only.
  PARSER   boolean entries are read by recap__env_bool (the one parser), never by a getenv in
           the library, and a recap__env_bool("RECAP_X", N) falls back to the table's default.
"""
import os
import re
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ in scripts/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import source_check  # noqa: E402

TABLE = "runtime/env_table.c"
RULES = ["UNKNOWN", "UNREAD", "PARSER"]
C_EXT = (".c", ".h", ".cu", ".cuh", ".cc", ".cpp")
TEST_DIRS = ("tests/", "scripts/", "python/tests/")
PY_DIRS = ("python/",)  # the Python package; scripts' own .py files read no RECAP_* variable
NAME = r"RECAP_[A-Z0-9_]+"
# Comments and literals in one pass, so a quote inside a comment (or "//" inside a string)
# is not taken for the other.
C_TOKEN = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
C_CALL = re.compile(r'\b(\w*env\w*)\s*\(\s*"(' + NAME + r')"', re.I)
C_ASSIGN = re.compile(r'\b\w*env\w*\s*=\s*"(' + NAME + r')"', re.I)
C_BOOL_CALL = re.compile(r'\brecap__env_bool\s*\(\s*"(' + NAME + r')"\s*,\s*(-?\d+)\s*\)')
SH_READ = re.compile(r'\$\{?(' + NAME + r')\b')
SH_SET = re.compile(r'(?:^|[\s;(])(?:export\s+)?(' + NAME + r')=', re.M)
PY_READ = re.compile(r'\b(?:environ\.get\s*\(|environ\s*\[|getenv\s*\()\s*[rb]?["\'](' + NAME
                     + r')["\']')
RC_SET = re.compile(r'--test_env=(' + NAME + r')\b')
ENTRY = re.compile(r'\{\s*\.name\s*=\s*"(' + NAME + r')"(.*?)\}\s*,', re.S)


def strip_comments(code):
    """code with C comments blanked (newlines kept, so offsets give the same lines)."""
    return C_TOKEN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0))
                       if m.group(0).startswith("/") else m.group(0), code)


def read_table(root):
    """{name: (kind, fallback, test_only, line)} from runtime/env_table.c."""
    with open(os.path.join(root, TABLE), encoding="utf-8") as f:
        text = strip_comments(f.read())
    table = {}
    for m in ENTRY.finditer(text):
        body = m.group(2)
        kind = re.search(r"\.kind\s*=\s*RECAP__ENV_(\w+)", body)
        fallback = re.search(r'\.fallback\s*=\s*"([^"]*)"', body)
        table[m.group(1)] = (kind.group(1) if kind else "?", fallback.group(1) if fallback else "",
                             re.search(r"\.test_only\s*=\s*true", body) is not None,
                             text.count("\n", 0, m.start()) + 1)
    return table


class Use:
    """One mention of a variable: where, and whether it reads (or only sets) it."""

    def __init__(self, path, line, name, reads, how):
        self.path, self.line, self.name, self.reads, self.how = path, line, name, reads, how

    @property
    def in_tests(self):
        return self.path.startswith(TEST_DIRS)


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def scan_c(path, text):
    code = strip_comments(text)
    for m in C_CALL.finditer(code):
        fn = m.group(1)
        yield Use(path, line_of(code, m.start(2)), m.group(2), "set" not in fn.lower(), fn)
    for m in C_ASSIGN.finditer(code):
        yield Use(path, line_of(code, m.start(1)), m.group(1), True, "assigned")


def scan_shell(path, text):
    code = "\n".join(line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
                     for line in text.split("\n"))
    for m in SH_READ.finditer(code):
        yield Use(path, line_of(code, m.start(1)), m.group(1), True, "$")
    for m in SH_SET.finditer(code):
        yield Use(path, line_of(code, m.start(1)), m.group(1), False, "=")


def scan_python(path, text):
    # Comments are dropped line by line; a "#" inside a string cuts that line short, which
    # can only hide a read on the same line after it.
    code = "\n".join(line.split("#", 1)[0] for line in text.split("\n"))
    for m in PY_READ.finditer(code):
        yield Use(path, line_of(code, m.start(1)), m.group(1), True, "os.environ")


def tree(root):
    """(path, text) of every text file, Bazel's output folders and hidden ones but .ci/ skipped."""
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d == ".ci" or not d.startswith((".", "bazel-")))
        for name in sorted(names):
            full = os.path.join(folder, name)
            try:
                with open(full, encoding="utf-8") as f:
                    text = f.read()
            except (UnicodeDecodeError, OSError):
                continue  # binary data (checkpoints, images)
            yield os.path.relpath(full, root).replace(os.sep, "/"), text


def scan(files):
    """Every Use in files [(path, text)], the table itself aside."""
    uses = []
    for path, text in files:
        if path == TABLE:
            continue
        if path.endswith(C_EXT):
            uses += scan_c(path, text)
        elif path.endswith(".sh") or text.startswith(("#!/usr/bin/env bash", "#!/bin/bash")):
            uses += scan_shell(path, text)
        elif path.endswith(".py") and path.startswith(PY_DIRS):
            uses += scan_python(path, text)
        elif path == ".bazelrc":
            uses += [Use(path, line_of(text, m.start(1)), m.group(1), False, "--test_env")
                     for m in RC_SET.finditer(text)]
    return uses


def check(root):
    """All violations as (rule, path, line, message)."""
    files = list(tree(root))
    table, uses, out = read_table(root), scan(files), []
    if not table:
        return [("UNREAD", TABLE, 1, "no entries found: is the table still {.name = ...} rows?")]
    for u in uses:
        if u.name not in table:
            out.append(("UNKNOWN", u.path, u.line, "%s is %s here but is not in %s: add it "
                        "(name, values, default, meaning; test_only if only tests read it)"
                        % (u.name, "read" if u.reads else "set", TABLE)))
    for name, (kind, fallback, test_only, line) in sorted(table.items()):
        readers = [u for u in uses if u.name == name and u.reads]
        if test_only:
            for u in readers:
                if not u.in_tests:
                    out.append(("UNREAD", u.path, u.line, "%s is marked test_only in %s but "
                                "the library or CLI reads it here" % (name, TABLE)))
            if not readers:
                out.append(("UNREAD", TABLE, line, "%s (test_only) is read by no test" % name))
        elif not any(not u.in_tests for u in readers):
            out.append(("UNREAD", TABLE, line, "%s is read by no library or CLI code%s"
                        % (name, " (only by tests: mark it test_only)" if readers else "")))
        if kind != "BOOL":
            continue
        for u in readers:
            if u.how == "getenv" and not u.in_tests:
                out.append(("PARSER", u.path, u.line, "%s is a boolean switch: read it with "
                            "recap__env_bool (runtime/env.h), not getenv" % name))
    for path, text in files:
        if not path.endswith(C_EXT):
            continue
        code = strip_comments(text)
        for m in C_BOOL_CALL.finditer(code):
            name, given = m.group(1), m.group(2)
            entry = table.get(name)
            if not entry or entry[0] != "BOOL":
                if entry:
                    out.append(("PARSER", path, line_of(code, m.start(1)), "%s is read as a "
                                "boolean switch but the table says %s" % (name, entry[0].lower())))
                continue
            want = "-1" if entry[1] == "auto" else entry[1]
            if given != want:
                out.append(("PARSER", path, line_of(code, m.start(2)), "recap__env_bool(%s, %s) "
                            "but the table's default is %s" % (name, given, entry[1])))
    return sorted(out, key=lambda v: (RULES.index(v[0]), v[1], v[2]))



if __name__ == "__main__":
    sys.exit(source_check.main(check, RULES, sys.argv))
