#!/usr/bin/env python3
"""Tests of scripts/check_env.py over tiny synthetic trees written to a temporary folder: a
clean tree that must pass, and one change per violation that must fail naming it. Ends with an
"N passed, N failed" line for .ci/run."""
import os
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ in scripts/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_env  # noqa: E402
import source_check  # noqa: E402

TABLE = """static const recap__env_var table[] = {
    {.name = "RECAP_FUSION", .kind = RECAP__ENV_BOOL, .fallback = "1", .summary = "fuse"},
    {.name = "RECAP_TILES", .kind = RECAP__ENV_BOOL, .fallback = "auto", .summary = "order"},
    {.name = "RECAP_CACHE_DIR", .kind = RECAP__ENV_PATH, .fallback = "~/.cache",
     .summary = "cache"},
    {.name = "RECAP_TEST_SEED", .kind = RECAP__ENV_INT, .fallback = "clock", .summary = "seed",
     .test_only = true},
};
"""

CLEAN = {
    "runtime/env_table.c": TABLE,
    "engine/fuse.c": '/* getenv("RECAP_NOT_IN_TABLE") in a comment reads nothing */\n'
                     'int f(void) { return recap__env_bool("RECAP_FUSION", 1); }\n'
                     'const char *msg = "set RECAP_OTHER=1 in a message is no read";\n',
    "kernels/attention.cu": 'int o = recap__env_bool("RECAP_TILES", -1);\n',
    "runtime/nvrtc.c": 'static const char *const cache_env = "RECAP_CACHE_DIR";\n',
    "tests/util.c": 'const char *s = getenv("RECAP_TEST_SEED");\n'
                    'void t(void) { setenv("RECAP_FUSION", "0", 1); }\n',
    "tests/cli_test.sh": "#!/usr/bin/env bash\n# $RECAP_IN_A_COMMENT\n"
                         'RECAP_FUSION=0 "$recap" run x.yaml\n',
    ".bazelrc": "build:asan --test_env=RECAP_TEST_SEED=4\n",
    "python/recap/lib.py": '# os.environ.get("RECAP_IN_A_COMMENT")\n'
                           'tiles = os.environ.get("RECAP_TILES")\n',
}


class CheckEnvTest(source_check.SourceCheckTest):
    CHECK = check_env.check
    CLEAN = CLEAN

    def test_clean_tree_passes(self):
        self.assertEqual(self.check({}), [])

    def test_read_of_a_name_not_in_the_table(self):
        v = self.check({"allocator/config.c": 'const char *c = getenv("RECAP_ALOC_CONF");\n'})
        self.assertOnly(v, "UNKNOWN", "allocator/config.c:1: RECAP_ALOC_CONF is read here")

    def test_shell_and_bazelrc_names_not_in_the_table(self):
        v = self.check({"scripts/gpu/run.sh": '#!/usr/bin/env bash\necho "${RECAP_SOAK:-3}"\n',
                        ".bazelrc": "build:tsan --test_env=RECAP_TEST_SEEDS=1\n"
                                    "build:asan --test_env=RECAP_TEST_SEED=4\n"})
        self.assertOnly(v, "UNKNOWN", "scripts/gpu/run.sh:2: RECAP_SOAK is read",
                        ".bazelrc:1: RECAP_TEST_SEEDS is set")

    def test_python_read_not_in_the_table(self):
        v = self.check({"python/recap/lib.py": 'a = os.environ["RECAP_LIB"]\n'
                                                'b = os.getenv("RECAP_LIBS")\n'})
        self.assertOnly(v, "UNKNOWN", "python/recap/lib.py:1: RECAP_LIB is read",
                        "python/recap/lib.py:2: RECAP_LIBS is read")

    def test_entry_no_code_reads(self):
        v = self.check({"runtime/nvrtc.c": "int nothing;\n"})
        self.assertOnly(v, "UNREAD", "RECAP_CACHE_DIR is read by no library or CLI code")

    def test_entry_only_tests_read_must_be_test_only(self):
        v = self.check({"engine/fuse.c": "int f(void) { return 1; }\n",
                        "tests/fuse_test.c": 'int x = recap__env_bool("RECAP_FUSION", 1);\n'})
        self.assertOnly(v, "UNREAD", "RECAP_FUSION is read by no library or CLI code (only by "
                        "tests: mark it test_only)")

    def test_test_only_entry_read_by_the_library(self):
        v = self.check({"engine/seed.c": 'const char *s = getenv("RECAP_TEST_SEED");\n'})
        self.assertOnly(v, "UNREAD", "engine/seed.c:1: RECAP_TEST_SEED is marked test_only")

    def test_switch_read_with_getenv(self):
        v = self.check({"engine/graphs.c": 'int g(void) { return !!getenv("RECAP_FUSION"); }\n'})
        self.assertOnly(v, "PARSER", "engine/graphs.c:1: RECAP_FUSION is a boolean switch")

    def test_switch_default_differs_from_the_table(self):
        v = self.check({"engine/fuse.c": 'int f(void) { return recap__env_bool("RECAP_FUSION", '
                                         "0); }\n"})
        self.assertOnly(v, "PARSER", "recap__env_bool(RECAP_FUSION, 0) but the table's default "
                        "is 1")


if __name__ == "__main__":
    sys.exit(source_check.run_tests())
