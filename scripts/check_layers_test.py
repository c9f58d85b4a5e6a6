#!/usr/bin/env python3
"""Tests of scripts/check_layers.py over tiny synthetic trees written to a temporary folder:
one tree per rule that must fail, and a clean tree that must pass. Ends with an
"N passed, N failed" line for .ci/run."""
import contextlib
import io
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # leave no __pycache__ in scripts/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_layers  # noqa: E402
import source_check  # noqa: E402

PUBLIC = """#pragma once
/* recap_hidden in a comment declares nothing */
typedef int recap_status;
typedef struct recap_stream recap_stream;
recap_status recap_stream_sync(recap_stream *s);
"""

# A clean tree: each layer includes and calls only downward, with today's and target paths.
CLEAN = {
    "include/recap.h": PUBLIC,
    "runtime/error.h": '#include "include/recap.h"\n#define RECAP_TRY(x) x\n'
                       "recap_status recap__fail(int code);\n",
    "runtime/status.c": '#include "runtime/error.h"\nrecap_status recap__fail(int code) {\n'
                        "  return code;\n}\n",
    "runtime/host/backend.c": '#include "runtime/error.h"\n'
                              "recap_status recap_stream_sync(recap_stream *s) {\n"
                              "  (void)s;\n  return recap__fail(0);\n}\n",
    "allocator/blocks.c": '#include "runtime/error.h"\nstatic int recap__local(void) { return 1; }'
                          "\nint recap__blocks_count(void) { return recap__local(); }\n",
    "kernels/op.h": '#include "include/recap.h"\ntypedef struct recap__op_def {\n'
                    "  int (*count)(void);\n} recap__op_def;\n",
    "kernels/registry.c": '#include "kernels/op.h"\n#include "runtime/error.h"\n'
                          "/* recap__engine_run() in a comment is no call */\n"
                          'static const char *name = "recap__engine_run";\n'
                          "const recap__op_def recap__op_table = {.count = recap__blocks_count};\n"
                          "int recap__op_count(void) { return recap__op_table.count(); }\n",
    "engine/exec.c": '#include "kernels/op.h"\n'
                     "int recap__engine_run(void) { RECAP_TRY(recap__op_count()); return 0; }\n",
    "cli/main.c": '#include "include/recap.h"\n#include "cli/cli.h"\n'
                  "int main(void) { return recap_stream_sync(0); }\n",
    "cli/cli.h": '#include "include/recap.h"\n',
    # excluded: a test may include and call anything
    "tests/engine_test.c": '#include "engine/exec.c"\nint t(void) { return recap__engine_run(); }\n',
    # excluded: a stand-alone benchmark program measures one internal piece
    "bench/alloc_bench.c": '#include "kernels/op.h"\n',
}


class CheckLayersTest(source_check.SourceCheckTest):
    CHECK = check_layers.run
    CLEAN = CLEAN

    def test_clean_tree_passes(self):
        self.assertEqual(self.check({}), [])

    def test_main_prints_summary_and_exit_status(self):
        out = io.StringIO()
        with tempfile.TemporaryDirectory() as root, contextlib.redirect_stdout(out):
            code = source_check.main(check_layers.run, check_layers.RULES, ["check_layers.py", root])
        self.assertEqual(code, 0)
        self.assertTrue(out.getvalue().endswith("4 passed, 0 failed\n"), out.getvalue())

    def test_upward_include(self):
        v = self.check({"runtime/event.c": '#include "runtime/error.h"\n'
                                           '#include "kernels/op.h"\nint x;\n'})
        self.assertOnly(v, "INCLUDE", "INCLUDE runtime/event.c:2:", "kernels/op.h",
                        "up (runtime -> kernels)")

    def test_client_includes_internal_header(self):
        v = self.check({"cli/run.c": '#include "include/recap.h"\n'
                                            '#include "runtime/error.h"\n'
                                            '#include "kernels/op.h"\n'
                                            '#include "engine/pipeline.h"\n',
                        "engine/pipeline.h": '#include "include/recap.h"\n'})
        self.assertOnly(v, "INCLUDE", "cli/run.c:3: includes kernels/op.h: a client "
                        "includes only", "cli/run.c:4: includes engine/pipeline.h")
        self.assertEqual(len(v), 2, v)  # runtime/error.h is a client header

    def test_client_uses_client_headers(self):
        # The entry header, the model's types and the runtime's utilities: includes and calls
        # of what they declare pass; a call they do not declare (kernels/) still fails.
        v = self.check({"engine/load.h": '#include "engine/plan.h"\n'
                                         "int recap__load_file(const char *path);\n",
                        "engine/plan.h": "int recap__plan_views(void);\n",
                        "engine/load.c": "int recap__load_file(const char *p) { return 0; }\n",
                        "engine/plan_views.c": "int recap__plan_views(void) { return 0; }\n",
                        "cli/plan.c": '#include "engine/load.h"\n'
                                             '#include "engine/plan.h"\n'
                                             '#include "runtime/error.h"\n'
                                             "int plan(void) {\n"
                                             '  return recap__load_file("x") + recap__plan_views()'
                                             " + recap__fail(0);\n}\n"
                                             "int more(void) { return recap__op_count(); }\n"})
        self.assertOnly(v, "CALL", "CALL cli/plan.c:7: calls recap__op_count of "
                        "kernels/registry.c")
        self.assertEqual(len(v), 1, v)

    def test_client_headers_are_no_exception_for_lower_layers(self):
        v = self.check({"engine/load.h": '#include "include/recap.h"\n',
                        "kernels/shape.c": '#include "engine/load.h"\n'})
        self.assertOnly(v, "INCLUDE", "kernels/shape.c:1:", "up (kernels -> engine)")

    def test_sideways_include_between_siblings(self):
        v = self.check({"comm/comm.h": '#include "allocator/internal.h"\n',
                        "allocator/internal.h": '#include "runtime/error.h"\n'})
        self.assertOnly(v, "INCLUDE", "comm/comm.h:1:", "sideways (comm -> allocator)")

    def test_upward_call(self):
        # runtime/comm*.c is the comm layer today: calling the allocator is sideways, and a
        # function pointer to an engine function is an upward dependency like a call.
        v = self.check({"comm/comm.c": "int recap__comm_init(void) {\n"
                                          "  return recap__blocks_count();\n}\n",
                        "runtime/stream.c": "void *hook = &recap__engine_run;\n"})
        self.assertOnly(v, "CALL", "CALL comm/comm.c:2: calls recap__blocks_count of "
                        "allocator/blocks.c: sideways (comm -> allocator)",
                        "CALL runtime/stream.c:1: calls recap__engine_run of engine/exec.c: "
                        "up (runtime -> engine)")

    def test_client_calls_internal_name(self):
        v = self.check({"cli/run.c": "int run(void) { return recap__op_count() + "
                                     "recap_stream_sync(0); }\n"})
        self.assertOnly(v, "CALL", "cli/run.c:1: calls recap__op_count of kernels/registry.c")
        self.assertNotIn("recap_stream_sync", v[0][3])

    def test_serve_is_a_client_below_the_cli(self):
        # The generation layer uses the public API and the runtime's utilities, never the
        # engine's internals; the CLI above it may call what its headers declare.
        v = self.check({"serve/generator.h": '#include "runtime/error.h"\n'
                                             "int recap__serve_step(void);\n",
                        "serve/engine.c": '#include "serve/generator.h"\n'
                                          "int recap__serve_step(void) {\n"
                                          "  return recap_stream_sync(0) + recap__fail(0);\n}\n",
                        "serve/runner.c": '#include "kernels/op.h"\n'
                                          "int run(void) { return recap__engine_run(); }\n",
                        "cli/generate.c": '#include "serve/generator.h"\n'
                                          "int gen(void) { return recap__serve_step(); }\n"})
        text = "\n".join("%s %s:%d: %s" % x for x in v)
        self.assertIn("INCLUDE serve/runner.c:1: includes kernels/op.h: a client", text)
        self.assertIn("CALL serve/runner.c:2: calls recap__engine_run of engine/exec.c: a client",
                      text)
        self.assertEqual(len(v), 2, v)

    def test_static_function_is_not_a_dependency(self):
        v = self.check({"kernels/shape.c": "static int recap__blocks_count(void) { return 0; }\n"
                                           "int recap__shape(void) { return "
                                           "recap__blocks_count(); }\n"})
        self.assertEqual(v, [])

    def test_two_file_circle(self):
        v = self.check({"engine/spec.c": "int recap__spec_n(void) { return recap__ir_build(); }\n",
                        "engine/ir.c": "int recap__ir_build(void) {\n  return 0;\n}\n"
                                       "int recap__ir_n(void) { return recap__spec_n(); }\n"})
        self.assertOnly(v, "CIRCLE", "CIRCLE engine/ir.c:4: file circle of 2 files "
                        "{engine/ir.c, engine/spec.c}", "engine/ir.c -> engine/spec.c "
                        "(recap__spec_n)", "engine/spec.c -> engine/ir.c (recap__ir_build)")

    def test_circle_through_cuda_extern_c(self):
        v = self.check({"kernels/expr.c": "void recap__expr_free(void) { recap__expr_gpu(); }\n",
                        "kernels/expr.cu": 'extern "C" {\nvoid recap__expr_gpu(void) {\n'
                                           "  recap__expr_free();\n}\n}\n"})
        self.assertOnly(v, "CIRCLE", "{kernels/expr.c, kernels/expr.cu}")

    def test_public_name_in_internal_header(self):
        v = self.check({"kernels/op.h": '#include "include/recap.h"\n'
                                        "typedef enum { RECAP_A } recap_kind;\n"
                                        "struct recap_shape { int n; };\n"
                                        "int recap_count(recap_stream *recap_arg);\n"
                                        "extern int recap_flag;\n"
                                        "typedef int (*recap_fn)(void);\n"
                                        "recap_status recap_stream_sync(recap_stream *s);\n"
                                        "#define recap_alias recap__alias\n"
                                        "void recap__fine(struct recap_shape *recap_param);\n"})
        self.assertOnly(v, "NAME", "kernels/op.h:2: internal header declares typedef or global "
                        "recap_kind", "kernels/op.h:3: internal header declares tag recap_shape",
                        "op.h:4: internal header declares function recap_count",
                        "op.h:5: internal header declares typedef or global recap_flag",
                        "op.h:6: internal header declares function pointer typedef or global "
                        "recap_fn", "op.h:8: internal header declares macro recap_alias")
        self.assertEqual(len(v), 6, v)  # not recap_stream_sync (public), params, recap__


if __name__ == "__main__":
    sys.exit(source_check.run_tests())
