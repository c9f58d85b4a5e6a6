#!/usr/bin/env python3
"""Layering check (issue 17): fails on a forbidden #include or call between layers, a file
circle, or a public-looking `recap_` name declared in an internal header.

Usage: scripts/check_layers.py [ROOT]     (ROOT defaults to the repository this script is in)

Prints one line per violation, `RULE path:line: message`, then one line per rule family and
an "N passed, N failed" line (one check per family) that .ci/run counts. Exits 1 on any
violation. There is deliberately no allowlist: a violation is fixed, not recorded.

Rules (docs: /work/shared/notes/layout.md, "Layers, lowest first"):
  INCLUDE  a file includes headers of its own layer or lower ones only; include/recap.h is
           for everyone. Clients (serve, cli, bench) include only the public header, the library
           headers of CLIENT_HEADERS (the engine's entry header, the loaded model's types,
           the runtime's utilities) and client headers: they are clients of the library, not
           parts of it.
  CALL     a .c/.cu file calls (or takes the address of) functions defined in its own layer
           or lower ones only; a client calls into the library only through public names and
           the functions that CLIENT_HEADERS declare.
  CIRCLE   no two files call each other, directly or round a loop (the file graph of CALL).
  NAME     an internal header (.h/.cuh outside include/) declares no `recap_x` name (a
           function, typedef, struct/enum/union tag, global or lower-case macro) that
           include/recap.h does not declare: `recap_` is public, `recap__` is internal.
The calls are found from the text, not a compiler: a function is "defined" in a file when a
recap_ name is followed by a parameter list and `{` at file scope; a file "uses" every such
name of another file that appears in it outside comments and strings. Conditional
compilation is ignored (both sides of an #if count), which errs towards reporting.
"""
import bisect
import os
import re
import sys

sys.dont_write_bytecode = True  # leave no __pycache__ in scripts/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import source_check  # noqa: E402

# The rule families, in the order violations and the report list them.
RULES = ["INCLUDE", "CALL", "CIRCLE", "NAME"]

# ---------------------------------------------------------------------------------------------
# THE TABLE. Where each file belongs, by longest matching path prefix (a folder ends in "/").
LAYERS = {  # layer -> rank, lowest first. Equal ranks are siblings: neither may use the other.
    "runtime": 0, "comm": 1, "allocator": 1, "graph": 2, "kernels": 3, "engine": 4,
    "serve": 5, "cli": 6, "bench": 7,
}
# Clients of the public header + the entry header. serve (generation: continuous batching over
# the pipeline API) ships inside librecap, but it is built on the public API like any client,
# so it is held to the same rule; the CLI, above it, may call it.
CLIENTS = {"serve", "cli", "bench"}
TABLE = [
    ("runtime/", "runtime"),
    ("comm/", "comm"),
    ("allocator/", "allocator"),
    ("graph/", "graph"),
    ("kernels/", "kernels"),
    ("engine/", "engine"),
    ("serve/", "serve"),
    ("cli/", "cli"),
    # The measuring subcommands live beside the rest of the command line (cli/main.c dispatches
    # to them) but are the bench layer: clients too, above the CLI.
    ("cli/bench", "bench"),  # bench.c bench_ops.c bench_capture.c bench_expr_load.*
    ("cli/serve_bench.c", "bench"),
    ("bench/", "bench"),
]
PUBLIC_HEADER = "include/recap.h"     # anyone may include it
# The library headers a client (serve, cli, bench) may include, besides the public header and its
# own client headers, and whose declared functions it may call. Nothing else of the library:
# no kernels/, allocator/, runtime backends or engine internals (pipeline.h, plan_internal.h,
# bind, exec, graph_mode...).
CLIENT_HEADERS = [
    # The engine's entry header: the load path and the loaded model (recap__model).
    "engine/load.h",
    # The loaded model's types, which load.h exposes: its spec, per-bucket IR, plan, and the
    # diagnostics a load reports. `recap plan`, `recap dot` and `recap validate` show the
    # model, so they read these types and call their accessors (recap__plan_views, ...).
    "engine/diag.h", "engine/spec.h", "engine/ir.h", "engine/plan.h", "engine/fuse.h",
    # The runtime's utility headers, which any layer may use: runtime is the lowest layer and
    # these hold no device state (errors, text buffers, files, environment, and the f16/bf16
    # conversions of half.h, a dtype concern: the CLI reads and writes tensor files with them;
    # struct_size.h, how every public entry reads a caller's size-prefixed options struct,
    # serve/'s generator options and requests included).
    "runtime/error.h", "runtime/text.h", "runtime/file.h", "runtime/env.h", "runtime/half.h",
    "runtime/struct_size.h",
    # A checkpoint's tensor table (names, dtypes, shapes; no data): `recap import-hf` checks
    # every tensor a spec will read against it before writing the spec.
    "engine/checkpoint.h",
]
EXCLUDED = [  # not checked: not part of the layered library
    "tests/",                          # tests and fuzz targets (tests/fuzz/)
    "docs/",                           # lab notes, e.g. docs/perf/launch_ubench.cu
    "third_party/", "bazel-", ".git/", "scripts/", "specs/", "bazel/",
    # stand-alone GPU benchmark programs: each measures one internal piece (a kernel, the
    # allocator, cuBLASLt's configurations) against its peer, so they may reach inside
    "bench/alloc_bench.c", "bench/bench_skinny.c", "bench/bench_gemm_algos.c",
    "bench/bench_hopper_gemm.c", "bench/bench_common.h", "bench/peer/", "bench/report/",
    # the checkpoint loader (engine/weight_load.h) timed against the pinned copy bandwidth
    "bench/weight_load_bench.c",
]
SOURCE_EXT = (".c", ".cu")
HEADER_EXT = (".h", ".cuh")
# ---------------------------------------------------------------------------------------------

IDENT = re.compile(r"[A-Za-z_]\w*")
RECAP_NAME = re.compile(r"recap_\w+")
PUBLIC_LOOKING = re.compile(r"recap_[A-Za-z0-9]\w*")  # recap_ + non-underscore
LITERAL = r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\''
COMMENT_OR_LITERAL = re.compile(r"/\*.*?\*/|//[^\n]*|" + LITERAL, re.S)
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
# Braces that open no scope for C: extern "C" { ... } and C++ namespaces in .cu files.
TRANSPARENT_BRACE = re.compile(r'(extern\s*"[^"]*"|namespace(\s+\w+)?)\s*$')


def layer_of(path):
    """The layer of a repository-relative path, or None when it is excluded or outside."""
    if any(path.startswith(p) for p in EXCLUDED):
        return None
    best = max((p for p, _ in TABLE if path.startswith(p)), key=len, default=None)
    return dict(TABLE)[best] if best else None


def strip_comments(text):
    """Blanks comments, keeping newlines so that offsets map to the same lines. Literals are
    matched in the same pass so that a "/*" inside a string opens no comment."""
    return COMMENT_OR_LITERAL.sub(lambda m: blank(m) if m.group(0)[0] == "/" else m.group(0),
                                  text)


def blank(match):
    return re.sub(r"[^\n]", " ", match.group(0))


def strip_strings(text):
    """Blanks the contents of string and character literals (they hold names like "recap_x")."""
    return re.sub(LITERAL, lambda m: m.group(0)[0] + " " * (len(m.group(0)) - 2) + m.group(0)[-1],
                  text)


def strip_preprocessor(text):
    """Blanks preprocessor lines (with their continuations): macro bodies define nothing."""
    return re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", blank, text, flags=re.M)


class Source:
    """One file, read once: its layer, text variants, includes and line lookup."""

    def __init__(self, root, path):
        self.path = path
        self.layer = layer_of(path)
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            raw = f.read()
        self.nocomment = strip_comments(raw)
        self.code = strip_strings(self.nocomment)           # for uses (macro bodies call too)
        self.decls = strip_preprocessor(self.code)          # for definitions and declarations
        self.newlines = [i for i, c in enumerate(raw) if c == "\n"]

    def line(self, offset):
        return bisect.bisect_right(self.newlines, offset - 1) + 1


def file_scope_tokens(code):
    """Yields (offset, identifier, brace depth, paren depth) with extern "C"/namespace braces
    not counted, so that depth 0 means file scope in C, C++ and CUDA alike."""
    depth, paren, stack = 0, 0, []
    for m in re.finditer(r"[A-Za-z_]\w*|[{}()]", code):
        t = m.group(0)
        if t == "{":
            transparent = bool(TRANSPARENT_BRACE.search(code[max(0, m.start() - 40):m.start()]))
            stack.append(transparent)
            depth += 0 if transparent else 1
        elif t == "}":
            depth -= 0 if (stack and stack.pop()) else 1
        elif t == "(":
            paren += 1
        elif t == ")":
            paren = max(0, paren - 1)
        else:
            yield m.start(), t, depth, paren


def matching_paren(code, i):
    """Offset just past the ")" that closes the "(" at i, or -1."""
    level = 0
    for j in range(i, len(code)):
        if code[j] == "(":
            level += 1
        elif code[j] == ")":
            level -= 1
            if level == 0:
                return j + 1
    return -1


def definitions(src):
    """{name: (offset, is_static)} for every recap_ function defined at file scope."""
    code, found = src.decls, {}
    for off, name, depth, paren in file_scope_tokens(code):
        if depth or paren or not name.startswith("recap_"):
            continue
        m = re.compile(r"\s*\(").match(code, off + len(name))
        if not m:
            continue
        end = matching_paren(code, m.end() - 1)
        if end < 0 or not re.compile(r"\s*\{").match(code, end):
            continue
        # The statement starts after the previous ";" or "}" (or the file's start).
        start = max(code.rfind(";", 0, off), code.rfind("}", 0, off)) + 1
        found.setdefault(name, (off, re.search(r"\bstatic\b", code[start:off]) is not None))
    return found


def uses(src):
    """{name: first offset} for recap_ identifiers in src, not counting struct members."""
    found = {}
    for m in RECAP_NAME.finditer(src.code):  # #include paths are strings, blanked already
        prev = src.code[max(0, m.start() - 2):m.start()]
        if prev.endswith((".", "_")) or prev[-1:].isalnum() or prev == "->":
            continue  # a member (x.recap_f, p->recap_f) or the tail of a longer word
        found.setdefault(m.group(0), m.start())
    return found


def header_declarations(src):
    """[(offset, name, what)] for recap_ names that this header declares."""
    code, out = src.decls, []
    for off, name, depth, paren in file_scope_tokens(code):
        if depth or not name.startswith("recap_"):
            continue
        before = code[max(0, off - 40):off]
        after = code[off + len(name):off + len(name) + 40].lstrip()
        if re.search(r"\b(struct|enum|union)\s+$", before):
            if after[:1] in "{;":  # a tag being defined or forward-declared, not just used
                out.append((off, name, "tag"))
        elif paren == 0 and after[:1] == "(":
            out.append((off, name, "function"))
        elif paren == 0 and after[:1] in ";,[=":
            out.append((off, name, "typedef or global"))
        elif paren == 1 and re.search(r"\(\s*\*\s*$", before) and after[:1] == ")":
            out.append((off, name, "function pointer typedef or global"))
    for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(recap_\w+)", src.code, re.M):
        out.append((m.start(1), m.group(1), "macro"))
    return out


def resolve_include(root, path, target):
    """The repository path an #include "target" names, or None (system or generated)."""
    for cand in (target, os.path.normpath(os.path.join(os.path.dirname(path), target))):
        if os.path.isfile(os.path.join(root, cand)):
            return cand.replace(os.sep, "/")
    return None


def may_use(user, used):
    """May layer `user` depend on layer `used`? Same layer, or a strictly lower rank."""
    return used == user or LAYERS[used] < LAYERS[user]


def direction(user, used):
    kind = "sideways" if LAYERS[used] == LAYERS[user] else "up"
    return "%s (%s -> %s)" % (kind, user, used)


def check_includes(root, files):
    out = []
    for src in files.values():
        for m in INCLUDE.finditer(src.nocomment):
            target = resolve_include(root, src.path, m.group(1))
            if target is None or target == PUBLIC_HEADER:
                continue
            tl = layer_of(target)
            if tl is None:
                continue
            if src.layer in CLIENTS and tl not in CLIENTS:
                if target in CLIENT_HEADERS:
                    continue
                why = ("a client includes only %s and the client headers (CLIENT_HEADERS)"
                       % PUBLIC_HEADER)
            elif not may_use(src.layer, tl):
                why = direction(src.layer, tl)
            else:
                continue
            out.append(("INCLUDE", src.path, src.line(m.start()), "includes %s: %s"
                        % (target, why)))
    return out


def call_graph(files):
    """{(user, definer): {name: first offset in user}} over the .c/.cu files."""
    defs = {p: definitions(s) for p, s in files.items() if p.endswith(SOURCE_EXT)}
    definers = {}
    for path, names in defs.items():
        for name, (_, static) in names.items():
            if not static:  # a static function is invisible to other files
                definers.setdefault(name, []).append(path)
    edges = {}
    for path in defs:
        for name, off in uses(files[path]).items():
            if name in defs[path]:
                continue  # its own (or a static of the same name)
            for definer in definers.get(name, []):
                edges.setdefault((path, definer), {})[name] = off
    return edges


def check_calls(files, edges, public):
    out = []
    for (user, definer), names in sorted(edges.items()):
        ul, dl = files[user].layer, files[definer].layer
        if not may_use(ul, dl):
            why, bad = direction(ul, dl), names
        elif ul in CLIENTS and dl not in CLIENTS:
            why = ("a client calls the library only through %s and the client headers"
                   % PUBLIC_HEADER)
            bad = {n: o for n, o in names.items() if n not in public}
        else:
            continue
        if bad:
            out.append(("CALL", user, files[user].line(min(bad.values())), "calls %s of %s: %s"
                        % (", ".join(sorted(bad)), definer, why)))
    return out


def strongly_connected(succ):
    """Tarjan's algorithm over {node: successors}; returns the components, each sorted."""
    sys.setrecursionlimit(max(1000, 4 * len(succ) + 100))
    index, low, on, stack, comps = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(succ.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on.discard(comp[-1])
            comps.append(sorted(comp))

    for v in sorted(succ):
        if v not in index:
            visit(v)
    return comps


def check_circles(files, edges):
    succ = {}
    for user, definer in edges:
        succ.setdefault(user, set()).add(definer)
    out = []
    for comp in strongly_connected(succ):
        if len(comp) < 2:
            continue
        members = set(comp)
        ties = ["%s -> %s (%s)" % (u, d, ", ".join(sorted(names)))
                for (u, d), names in sorted(edges.items()) if u in members and d in members]
        first = comp[0]  # reported at its first use of another member
        line = min(o for (u, d), names in edges.items() if u == first and d in members
                   for o in names.values())
        out.append(("CIRCLE", first, files[first].line(line), "file circle of %d files {%s}: %s"
                    % (len(comp), ", ".join(comp), "; ".join(ties))))
    return out


def check_names(files, public):
    out = []
    for src in files.values():
        if not src.path.endswith(HEADER_EXT):
            continue
        seen = set()
        for off, name, what in header_declarations(src):
            if name in public or name in seen or not PUBLIC_LOOKING.fullmatch(name):
                continue
            seen.add(name)
            out.append(("NAME", src.path, src.line(off), "internal header declares %s %s: "
                        "not in %s (internal names are recap__)" % (what, name, PUBLIC_HEADER)))
    return out


def collect(root):
    files = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "bazel-")))
        for name in sorted(names):
            path = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
            if path.endswith(SOURCE_EXT + HEADER_EXT) and layer_of(path):
                files[path] = Source(root, path)
    return files


def run(root):
    """All violations as (rule, path, line, message), in report order."""
    files = collect(root)
    public = set()
    if os.path.isfile(os.path.join(root, PUBLIC_HEADER)):
        pub = Source(root, PUBLIC_HEADER)
        public = set(RECAP_NAME.findall(pub.code))
    for header in CLIENT_HEADERS:  # the functions they declare are the clients' to call too
        if os.path.isfile(os.path.join(root, header)):
            public |= {name for _, name, what in header_declarations(Source(root, header))
                       if what in ("function", "macro")}
    edges = call_graph(files)
    found = (check_includes(root, files) + check_calls(files, edges, public)
             + check_circles(files, edges) + check_names(files, public))
    return sorted(found, key=lambda v: (RULES.index(v[0]), v[1], v[2]))


if __name__ == "__main__":
    sys.exit(source_check.main(run, RULES, sys.argv))
