"""What the source checks (check_layers.py, check_env.py, check_cli_options.py) and their tests
share: the report .ci/run counts, and the synthetic trees the tests check.

A check returns violations as (rule, path, line, message) tuples; `main` prints one line per
violation, `RULE path:line: message`, then one line per rule and an "N passed, N failed" line
(one check per rule), and returns the exit status: 1 on any violation."""
import os
import tempfile
import unittest


def main(check, rules, argv):
    """Runs check(root) over argv[1], or the repository this script is in, and reports."""
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    violations = check(os.path.abspath(root))
    for rule, path, line, message in violations:
        print("%s %s:%d: %s" % (rule, path, line, message))
    width = max(len(rule) for rule in rules)
    failed = 0
    for rule in rules:
        n = sum(1 for v in violations if v[0] == rule)
        failed += n > 0
        print("check %-*s %s" % (width, rule, "ok" if n == 0 else "FAILED: %d violation(s)" % n))
    print("%d passed, %d failed" % (len(rules) - failed, failed))
    return 1 if violations else 0


def check_tree(check, tree):
    """check(root) over a temporary folder holding `tree` (path -> text; None: no such file)."""
    with tempfile.TemporaryDirectory() as root:
        for path, text in tree.items():
            if text is None:
                continue
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        return check(root)


class SourceCheckTest(unittest.TestCase):
    """The checks' tests: a subclass sets CHECK (the check, called with a root folder) and CLEAN
    (a synthetic tree that passes it: path -> text)."""
    CHECK = None
    CLEAN = {}

    def check(self, changes):
        """Violations of the clean tree with `changes` applied (path -> text, None removes)."""
        tree = dict(self.CLEAN)
        tree.update(changes)
        return check_tree(type(self).CHECK, tree)

    def assertOnly(self, violations, rule, *fragments):
        """Some violations, all of `rule`, whose lines (RULE path:line: message) hold every
        fragment."""
        self.assertTrue(violations, "expected a %s violation" % rule)
        for v in violations:
            self.assertEqual(v[0], rule, v)
        text = "\n".join("%s %s:%d: %s" % v for v in violations)
        for fragment in fragments:
            self.assertIn(fragment, text)


def run_tests():
    """Runs this module's unittest cases and ends with the "N passed, N failed" line; returns
    the exit status."""
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    print("%d passed, %d failed" % (result.testsRun - failed, failed))
    return 1 if failed else 0
