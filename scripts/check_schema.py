#!/usr/bin/env python3
"""Spec schema check: every spec of the repository validates against the JSON Schema of the spec
format (docs/recap-spec.schema.json, which `recap schema` generates from the op registry and
tests/docs_test.sh keeps current), and specs with an unknown op or a misspelled key do not.

Usage: scripts/check_schema.py [--recap BIN] [ROOT]

Checked, one count each: the schema is a valid draft-07 schema; every spec in specs/,
bench/specs/, tests/data/ and the well-formed ones of the spec fuzz corpus (tests/data/bad_specs
and the corpus's bad_* hold specs meant to fail, many of them in ways a schema cannot see); with
--recap, the specs `recap import-hf` writes for each fixture of tests/data/models in both
layouts (default and --paged); and a handful of broken specs that must fail. Needs python3-yaml
and python3-jsonschema (scripts/deps.sh installs both). Ends with "N passed, N failed".
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

try:
    import jsonschema
    import yaml
except ImportError as e:
    print("check_schema: %s (scripts/deps.sh installs python3-yaml and python3-jsonschema)" % e)
    print("0 passed, 1 failed")
    sys.exit(1)

SCHEMA = "docs/recap-spec.schema.json"


class SpecLoader(yaml.SafeLoader):
    """YAML as recap's loader reads it: numbers such as 1e-6 (no dot) are numbers, as in YAML
    1.2, where PyYAML's YAML 1.1 rules make them strings."""


SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"), list("-+0123456789."))

# Each must fail: (what, spec text, a word the first error names).
BROKEN = [
    ("an unknown op", "ops:\n  - {op: reluu, in: x, out: y}\n", "reluu"),
    ("a misspelled top-level key", "opss: []\nops:\n  - {op: relu, in: x, out: y}\n", "opss"),
    ("a misspelled tensor key",
     "tensors:\n  x: {shpae: [4], role: input}\nops:\n  - {op: relu, in: x, out: y}\n", "shpae"),
    ("a misspelled attribute",
     "tensors:\n  x: {shape: [4], role: input}\n  g: {shape: [4], role: param}\n"
     "ops:\n  - {op: rmsnorm, in: [x, g], out: y, epss: 1.0e-6}\n", "epss"),
    ("an unknown activation",
     "tensors:\n  x: {shape: [4, 4], role: input}\n  w: {shape: [4, 4], role: param}\n"
     "ops:\n  - {op: linear, in: [x, w], out: y, act: swish}\n", "swish"),
    ("another format version", "version: 2\nops:\n  - {op: relu, in: x, out: y}\n", "version"),
    # recap refuses extents below 1 (the loader's "is not a positive integer below 2^62").
    ("a zero extent",
     "tensors:\n  x: {shape: [0], role: input}\nops:\n  - {op: relu, in: x, out: y}\n", "shape"),
    ("a negative extent",
     "tensors:\n  x: {shape: [-4], role: input}\nops:\n  - {op: relu, in: x, out: y}\n", "shape"),
]


def load(text):
    return yaml.load(text, Loader=SpecLoader)


def spec_files(root):
    for pat in ("specs/*.yaml", "bench/specs/*.yaml", "tests/data/*.yaml",
                "tests/fuzz/corpus/spec/*.yaml"):
        for path in sorted(glob.glob(os.path.join(root, pat))):
            if not os.path.basename(path).startswith("bad_"):
                yield os.path.relpath(path, root)


def imported_specs(recap, root, tmp):
    """(label, path or error) for each fixture model, imported in both layouts."""
    for model in sorted(glob.glob(os.path.join(root, "tests/data/models/*/config.json"))):
        folder = os.path.dirname(model)
        name = os.path.basename(folder)
        for layout, flags in (("default", []), ("paged", ["--paged"])):
            out = os.path.join(tmp, "%s_%s.yaml" % (name, layout))
            run = subprocess.run([recap, "import-hf", folder, "-o", out] + flags,
                                 capture_output=True, text=True)
            label = "recap import-hf tests/data/models/%s%s" % (name, " --paged" if flags else "")
            yield label, out if run.returncode == 0 else "failed: " + run.stderr.strip()[:300]


def main(argv):
    args = argv[1:]
    recap = None
    if args[:1] == ["--recap"]:
        recap, args = args[1], args[2:]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
    passed = failed = 0

    def report(ok, what, why=""):
        nonlocal passed, failed
        print("%s %s%s" % ("ok  " if ok else "FAIL", what, (": " + why) if why else ""))
        passed, failed = passed + ok, failed + (not ok)

    with open(os.path.join(root, SCHEMA), encoding="utf-8") as f:
        schema = json.load(f)
    try:
        jsonschema.Draft7Validator.check_schema(schema)
        report(True, SCHEMA + " is a draft-07 schema")
    except jsonschema.SchemaError as e:
        report(False, SCHEMA + " is a draft-07 schema", e.message)
        print("%d passed, %d failed" % (passed, failed))
        return 1
    validator = jsonschema.Draft7Validator(schema)

    def first_error(doc):
        # The error that says most (jsonschema's own heuristic), with where it is.
        e = jsonschema.exceptions.best_match(validator.iter_errors(doc))
        if e is None:
            return None
        return "%s: %s" % ("/".join(str(p) for p in e.absolute_path) or "(top)", e.message)

    def check_file(label, path):
        try:
            with open(path, encoding="utf-8") as f:
                doc = load(f.read())
        except (OSError, yaml.YAMLError) as e:
            report(False, label, "cannot read: %s" % e)
            return
        error = first_error(doc)
        report(error is None, label, error or "")

    for rel in spec_files(root):
        check_file(rel, os.path.join(root, rel))
    if recap:
        with tempfile.TemporaryDirectory() as tmp:
            for label, path in imported_specs(recap, root, tmp):
                if path.startswith("failed: "):
                    report(False, label, path)
                else:
                    check_file(label, path)
    for what, text, word in BROKEN:
        error = first_error(load(text))
        report(error is not None and word in error, "a spec with %s fails" % what,
               "passed the schema" if error is None else "" if word in error else
               "the error does not name %r: %s" % (word, error))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
