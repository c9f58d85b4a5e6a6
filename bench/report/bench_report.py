#!/usr/bin/env python3
"""bench_report.py: turns one bench/report/bench_all.sh run into docs/BENCHMARKS.md and a chart.

    bench_report.py --work DIR --out DIR [--recap-rotates 0|1]

Reads from --work (what bench_all.sh leaves there): meta.json (gpu, driver, date),
floors.json (bench/peer/peer_torch.py --floors), and per spec file NAME: NAME.status (exit codes),
NAME.torch.json (peer_torch.py --json) and NAME.recap.json (`recap bench --json`); then, when
present, ops.recap.json (`recap bench-ops --json`), ops.torch.json (bench/peer/peer_torch_ops.py)
and capture.recap.json (`recap bench-capture --json`). Writes BENCHMARKS.md and
benchmarks.svg to --out and prints the summary last on stdout: one line per table, then one
line per target (met / MISSED / not measured).

`recap bench --json` is read defensively, since its field names were not fixed when this was
written. As of cli/bench.c today it writes {"name", "batch", "bucket", "eager": {"median_ms",
"p10_ms", "p90_ms", "launches_per_iter", ...}, "graph": {..., "graph_nodes"}, "setup":
{"capture_ms", "instantiate_ms", ...}, "memory": {"pool_reserved_bytes", ...}}, which the
patterns below match. What it looks for (first match wins; units from the key's suffix _us,
_ms, _ns or _s, microseconds when there is none):
    {
      "spec": "mlp-decode",
      "dims": {"B": 8},                  # the bucket the numbers are for (optional)
      "eager": {"median_us": 0, "p10_us": 0, "p90_us": 0, "iters": 0},
      "graph": {"median_us": 0, "p10_us": 0, "p90_us": 0, "iters": 0},
      "capture_us": 0, "instantiate_us": 0,
      "pool_bytes": 0,                   # the graph's private pool: reserved bytes
      "launches_per_iter": 0,            # kernel launches (graph nodes) per iteration
      "rotate": 1                        # copies cycled per iteration, if it rotates
    }
Also accepted: "replay" for "graph"; "p50" for "median"; flat keys such as "graph_median_us";
the whole object per bucket under "buckets" (or "results"), a list of such objects each
with its dims: the one whose dims match the peer's (the bucket the tensor file holds) is used,
else the last.
"""
import argparse
import glob
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_torch import compute_floor  # noqa: E402  (no PyTorch needed for this)

# Issue 6's targets, per spec name: (what, check(row) -> bool or None when unmeasured).
TARGETS = {
    "elementwise-chain": [
        ("recap graph <= 90 us", lambda r: le(r["recap_graph"], 90)),
        ("recap eager >= 3x faster than PyTorch eager",
         lambda r: le(r["recap_eager"], r["torch_eager"] / 3 if r["torch_eager"] else None)),
    ],
    "mlp-decode": [("recap graph <= 105 us", lambda r: le(r["recap_graph"], 105))],
    "mlp-large": [("recap graph within 5% of the floor",
                   lambda r: le(r["recap_graph"],
                                r["floor_us"] * 1.05 if r["floor_us"] else None))],
    "transformer-block": [("recap graph <= 70 us", lambda r: le(r["recap_graph"], 70))],
}


def le(a, b):
    return None if a is None or b is None else a <= b


# ---- reading recap's JSON defensively ----------------------------------------------------------

def flatten(obj, prefix=""):
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, "%s%s." % (prefix, str(k).lower())))
    elif not isinstance(obj, list):
        out[prefix[:-1]] = obj
    return out


UNITS = (("_ns", 1e-3), ("_us", 1.0), ("_ms", 1e3), ("_s", 1e6))


def to_us(key, value):
    """The value in microseconds; the unit is the suffix of the innermost key segment that
    has one ("graph.median_ms", "graph_us.median"), else microseconds."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    for seg in reversed(key.split(".")):
        for suffix, factor in UNITS:
            if seg.endswith(suffix):
                return value * factor
    return float(value)


def find(flat, patterns, time=True):
    for pat in patterns:
        rx = re.compile(pat)
        for key, value in flat.items():
            if rx.search(key):
                v = to_us(key, value) if time else value
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    return v
    return None


def pick_bucket(doc, dims):
    for key in ("buckets", "results"):
        items = doc.get(key) if isinstance(doc, dict) else None
        if isinstance(items, list) and items:
            for item in items:
                d = item.get("dims") or item.get("bucket") or item
                if dims and isinstance(d, dict) and all(d.get(k) == v for k, v in dims.items()
                                                        if k in d):
                    if any(k in d for k in dims):
                        return item
            return items[-1]
    return doc


def recap_metrics(doc, dims):
    if not isinstance(doc, dict):
        return {}
    flat = flatten(pick_bucket(doc, dims))

    def timing(mode, stat):
        alt = {"median": "(median|p50)"}.get(stat, stat)
        return find(flat, [r"(^|\.)%s[^.]*\.%s(_|$)" % (mode, alt),
                           r"(^|\.)%s_%s(_|$)" % (mode, alt)])
    m = {}
    for mode, names in (("eager", "eager"), ("graph", "(graph|replay)")):
        for stat in ("median", "p10", "p90"):
            m["%s_%s" % (mode, stat)] = timing(names, stat)
    m["pool_bytes"] = find(flat, [r"(^|\.)pool_bytes$", r"pool.*reserved.*bytes$",
                                  r"pool.*bytes$", r"(^|\.)pool$"], time=False)
    m["launches"] = find(flat, [r"graph_nodes$", r"(^|\.)nodes$", r"^eager\.launches_per_it",
                                r"launches_per_it", r"(^|\.)launches$", r"kernels_per_it"],
                         time=False)
    m["capture_us"] = find(flat, [r"(^|\.)capture(_us|_ms|_ns|_s)?$"])
    m["instantiate_us"] = find(flat, [r"(^|\.)instantiate(_us|_ms|_ns|_s)?$"])
    m["rotate"] = find(flat, [r"(^|\.)rotate$"], time=False)
    m["graph_bytes"] = find(flat, [r"(^|\.)graph_bytes$"], time=False)
    m["fused_ops"] = find(flat, [r"(^|\.)fused_ops$"], time=False)
    return m


# ---- the report --------------------------------------------------------------------------------

def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def fmt_us(v):
    if v is None:
        return "—"
    return "%.0f" % v if v >= 100 else "%.1f" % v


def fmt_bytes(v):
    if v is None:
        return "—"
    v = float(v)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(v) < 1024 or unit == "GiB":
            return ("%.0f %s" if unit == "B" else "%.1f %s") % (v, unit)
        v /= 1024


def ratio(a, b):
    return a / b if a is not None and b else None


def collect(work, recap_rotates):
    floors = load(os.path.join(work, "floors.json"))
    rows = []
    for status in sorted(glob.glob(os.path.join(work, "*.status"))):
        base = os.path.basename(status)[:-len(".status")]
        torch_doc = load(os.path.join(work, base + ".torch.json")) or {}
        # torch.compile runs in a process of its own (bench_all.sh): its file, or its log
        # when it failed or ran out of time before writing one.
        compile_doc = load(os.path.join(work, base + ".compile.json")) or {}
        compile_info = compile_doc.get("compile")
        if not compile_info and os.path.exists(os.path.join(work, base + ".compile.log")):
            with open(os.path.join(work, base + ".compile.log"), encoding="utf-8",
                      errors="replace") as f:
                tail = [ln for ln in f.read().splitlines() if ln.strip()][-1:]
            compile_info = {"ok": False, "error": tail[0][:200] if tail else
                            "no result (killed at its time limit)"}
        recap_doc = load(os.path.join(work, base + ".recap.json"))
        with open(status, encoding="utf-8") as f:
            status_text = f.read().strip().replace("\n", "; ")
        dims = torch_doc.get("dims") or {}
        rm = recap_metrics(recap_doc, dims) if recap_doc else {}
        eager_t, graph_t = torch_doc.get("eager_us") or {}, torch_doc.get("graph_us") or {}
        nodes = rm.get("launches") or torch_doc.get("graph_nodes") or \
            (torch_doc.get("work") or {}).get("ops")
        floor = compute_floor(torch_doc.get("work"), floors, nodes)
        check = torch_doc.get("check") or {}
        rotate = torch_doc.get("rotate")
        recap_rot = rm.get("rotate") or (rotate if recap_rotates else 1)
        rows.append({
            "file": base,
            "spec": torch_doc.get("spec") or (recap_doc or {}).get("name") or base,
            "dims": dims,
            "recap_eager": rm.get("eager_median"), "recap_graph": rm.get("graph_median"),
            "recap_graph_p10": rm.get("graph_p10"), "recap_graph_p90": rm.get("graph_p90"),
            "torch_eager": eager_t.get("median"), "torch_graph": graph_t.get("median"),
            "torch_graph_p10": graph_t.get("p10"), "torch_graph_p90": graph_t.get("p90"),
            # Graph memory, one definition (see the header): recap's private pool plus its
            # outputs (older JSON without graph_bytes: the pool alone).
            "recap_pool": rm.get("graph_bytes") if rm.get("graph_bytes") is not None
            else rm.get("pool_bytes"), "torch_pool": torch_doc.get("graph_pool_bytes"),
            "recap_pool_only": rm.get("pool_bytes"),
            "torch_compile": (compile_doc.get("compile_us") or
                              torch_doc.get("compile_us") or {}).get("median"),
            "compile_info": compile_info or torch_doc.get("compile"),
            "fused_ops": rm.get("fused_ops"),
            # PyTorch's capture_end instantiates too: compare with recap's capture + instantiate.
            "recap_capture_us": (rm["capture_us"] or 0) + (rm["instantiate_us"] or 0)
            if rm.get("capture_us") is not None else None,
            "torch_capture_us": (torch_doc.get("capture_ms") or 0) * 1e3 or None,
            "floor_us": floor["us"] if floor else None,
            "floor_bound": floor["bound"] if floor else None,
            "nodes": nodes, "nodes_from": "recap" if rm.get("launches") else
            ("PyTorch graph" if torch_doc.get("graph_nodes") else "spec ops"),
            "check": check, "rotate": rotate, "recap_rotate": recap_rot,
            "status": status_text,
        })
    return rows, floors


def check_text(check):
    if not check:
        return "not run"
    outs = check.get("outputs") or {}
    worst, skipped = None, []
    for name, c in outs.items():
        if "skipped" in c:
            skipped.append(name)
        elif "rel_err" in c and (worst is None or c["rel_err"] > worst[1]):
            worst = (name, c["rel_err"], c["tol"])
    text = "ok" if check.get("ok") else "**MISMATCH**"
    if worst:
        text += " (%.1e of max, tol %.0e)" % (worst[1], worst[2])
    if any("error" in c for c in outs.values()):
        text += " " + "; ".join("%s: %s" % (n, c["error"]) for n, c in outs.items() if "error" in c)
    if skipped:
        text += "; random, not compared: " + ", ".join(skipped)
    return text


def compile_text(r):
    if r["torch_compile"] is not None:
        one = ((r.get("compile_info") or {}).get("streams") or "").startswith("one")
        return fmt_us(r["torch_compile"]) + (" (1 stream)" if one else "")
    info = r.get("compile_info")
    if info and info.get("error"):
        return "skipped" if is_budget_skip(info) else "failed"
    return "-"


def is_budget_skip(info):
    """bench_all.sh did not run torch.compile: its time budget was spent."""
    return (info.get("error") or "").startswith("torch.compile skipped")


def fused_text(r):
    n = r.get("fused_ops")
    if n is None:
        return "-"
    return "yes (%d ops)" % n if n else "no"


def markdown(rows, floors, meta):
    L = []
    L.append("# Benchmarks: recap vs PyTorch CUDA graphs, same pipelines, same run")
    L.append("")
    L.append("Generated by `bench/report/bench_all.sh` (GPU machine) and `bench/report/bench_report.py`; "
             "do not edit by hand. Device: %s, driver %s, PyTorch %s (CUDA %s), %s."
             % (meta.get("gpu") or (floors or {}).get("device") or "?", meta.get("driver") or "?",
                (floors or {}).get("torch", "?"), (floors or {}).get("cuda", "?"),
                meta.get("date") or "?"))
    L.append("")
    L.append("Times are per iteration, the median of one CUDA event pair per iteration (each "
             "waited for before the next), in microseconds. Ratio = recap graph / PyTorch graph "
             "(< 1: recap is faster). Floor = max(launches x empty-node cost, min bytes / copy "
             "bandwidth, GEMM FLOPs / matmul rate); achieved/floor = recap graph / floor. "
             "torch.compile = `torch.compile(mode=\"reduce-overhead\")` of the same pipeline "
             "function (inductor's fused kernels replayed as CUDA graphs; not rotated: one data "
             "set, marked static); fused = spec ops recap's fusion pass replaced (`fused_ops` "
             "in `recap bench --json`; - when the build has no fusion).")
    L.append("")
    L.append("Graph memory, one definition for both sides: the device memory graph mode holds "
             "beyond what exists before the capture (params, inputs, states, scalars), i.e. "
             "intermediates, outputs and whatever the capture allocates, as reserved segment "
             "bytes. PyTorch: `torch.cuda.memory_reserved()` after the capture minus before "
             "it, after `gc.collect()` and `empty_cache()` (its outputs and intermediates are "
             "allocated inside the capture, in the graph's private pool). recap: its private "
             "pool's reserved bytes: the planned arena of intermediates and the output buffers, "
             "allocated at bind, plus anything allocated during capture. Segment rounding is "
             "counted on both sides (PyTorch's pools: requests <= 1 MiB share 2 MiB segments, "
             "1-10 MiB requests get 20 MiB segments, larger ones round to 2 MiB; recap's private "
             "pools round 1-10 MiB requests to 2 MiB instead, docs/ALLOCATOR.md).")
    L.append("")
    L.append("| spec | recap eager | recap graph | PyTorch eager | PyTorch graph | torch.compile "
             "| ratio (graph) | fused | recap graph mem | PyTorch graph mem | floor "
             "| achieved/floor | outputs |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|")
    for r in rows:
        dims = ", ".join("%s=%s" % kv for kv in r["dims"].items())
        fl = "—" if r["floor_us"] is None else \
            "%s (%s)" % (fmt_us(r["floor_us"]), r["floor_bound"])
        rr = ratio(r["recap_graph"], r["torch_graph"])
        af = ratio(r["recap_graph"], r["floor_us"])
        L.append("| %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["spec"], " (%s)" % dims if dims else "", fmt_us(r["recap_eager"]),
            fmt_us(r["recap_graph"]), fmt_us(r["torch_eager"]), fmt_us(r["torch_graph"]),
            compile_text(r), "—" if rr is None else "%.2fx" % rr, fused_text(r),
            fmt_bytes(r["recap_pool"]),
            fmt_bytes(r["torch_pool"]), fl, "—" if af is None else "%.2fx" % af,
            check_text(r["check"])))
    L.append("")
    L.append("Spread (p10 / p90 of the graph replays, us), capture time, rotation and launches:")
    L.append("")
    L.append("| spec | recap graph p10/p90 | PyTorch graph p10/p90 | recap capture | "
             "PyTorch capture | rotate (peer / recap) | launches (source) | runs |")
    L.append("|---|---|---|---:|---:|---|---|---|")
    for r in rows:
        L.append("| %s | %s / %s | %s / %s | %s | %s | %s / %s | %s (%s) | %s |" % (
            r["spec"], fmt_us(r["recap_graph_p10"]), fmt_us(r["recap_graph_p90"]),
            fmt_us(r["torch_graph_p10"]), fmt_us(r["torch_graph_p90"]),
            fmt_us(r["recap_capture_us"]), fmt_us(r["torch_capture_us"]),
            r["rotate"] if r["rotate"] is not None else "—", r["recap_rotate"] or "—",
            r["nodes"] if r["nodes"] is not None else "—", r["nodes_from"], r["status"]))
    L.append("")
    if floors:
        mt = floors.get("matmul_tflops") or {}
        L.append("Floors measured in this run: copy bandwidth %.0f GB/s (1 GiB device-to-device "
                 "copy, read + write), matmul %s TFLOP/s at 8192^3, empty graph node %.2f us "
                 "(eager empty launch %.2f us)." % (
                     floors.get("copy_gbps", 0),
                     ", ".join("%s %.0f" % (k, v) for k, v in mt.items()),
                     floors.get("node_us", 0), floors.get("eager_kernel_us", 0)))
        L.append("")
    L.append("Rotation: a pipeline whose params + inputs + states hold 1-200 MB is run over K "
             "copies (K x set >= 200 MB, K <= 16) so it is not timed L2-warm; the recap column "
             "is comparable only where recap rotated the same way (rotate column).")
    L.append("")
    target_lines = []
    for r in rows:
        for what, fn in TARGETS.get(r["spec"], []):
            ok = fn(r)
            target_lines.append("| %s | %s | %s |" % (
                r["spec"], what, "not measured" if ok is None else ("met" if ok else "**missed**")))
        ok = le(r["recap_pool"], r["torch_pool"])
        target_lines.append("| %s | graph memory <= PyTorch's | %s |" % (
            r["spec"], "not measured" if ok is None else ("met" if ok else "**missed**")))
    if target_lines:
        L.append("## Targets (issue 6)")
        L.append("")
        L.append("| spec | target | result |")
        L.append("|---|---|---|")
        L.extend(target_lines)
        L.append("")
    return "\n".join(L)


def verdict(ok):
    return "not measured" if ok is None else ("met" if ok else "**missed**")


def ops_section(work):
    """The per-op table from `recap bench-ops --json` and peer_torch_ops.py: (markdown lines,
    [(target, ok or None)])."""
    ours, peer = load(os.path.join(work, "ops.recap.json")), load(os.path.join(work,
                                                                               "ops.torch.json"))
    if not ours and not peer:
        return [], []
    ours, peer = ours or {}, peer or {}
    L, targets = ["## Single ops (`recap bench-ops`, `bench/peer/peer_torch_ops.py`)", ""], []
    L.append("Each op on [%s / 4096, 4096] tensors (%s elements), far past the L2; median of "
             "one event pair per launch. GB/s = bytes the op must read and write / time. "
             "Ceiling = the faster of the two device-to-device copies of the same tensor "
             "(recap: `cudaMemcpyAsync`; PyTorch: `dst.copy_(src)`) measured in this run. "
             "Target (issue 6): elementwise, softmax, layernorm, rmsnorm >= 80%% of the ceiling "
             "on large tensors." % (ours.get("elements") or peer.get("elements") or "?",
                                    ours.get("elements") or peer.get("elements") or "?"))
    if ours.get("smoke"):
        L.append("")
        L.append("**recap ran on the host backend (a smoke run): its numbers are not a "
                 "benchmark.**")
    L.append("")
    L.append("| op | dtype | recap GB/s | PyTorch GB/s | ceiling GB/s | recap % of ceiling | "
             "PyTorch % of ceiling | target >= 80% |")
    L.append("|---|---|---:|---:|---:|---:|---:|---|")
    peer_ops = {(r["op"], r["dtype"]): r for r in peer.get("ops") or []}
    our_ops = {(r["op"], r["dtype"]): r for r in ours.get("ops") or []}
    ceilings = {}
    for dt in ("f32", "bf16"):
        vals = [v for v in ((ours.get("copy_gbps") or {}).get(dt),
                            (peer.get("copy_gbps") or {}).get(dt)) if v]
        ceilings[dt] = max(vals) if vals else None
    keys = list(our_ops) + [k for k in peer_ops if k not in our_ops]
    for key in keys:
        o, p = our_ops.get(key, {}), peer_ops.get(key, {})
        c = ceilings.get(key[1])
        og, pg = o.get("gbps"), p.get("gbps")
        op_pct = 100.0 * og / c if og and c else None
        pp_pct = 100.0 * pg / c if pg and c else None
        is_target = o.get("kind") == "bandwidth" or (not o and key[0] not in
                                                      ("memcpy_d2d", "copy"))
        ok = None if op_pct is None or ours.get("smoke") else op_pct >= 80.0
        if is_target:
            targets.append(("bench-ops %s %s >= 80%% of copy" % key, ok))
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            key[0], key[1], "%.0f" % og if og else "—", "%.0f" % pg if pg else "—",
            "%.0f" % c if c else "—", "%.0f%%" % op_pct if op_pct else "—",
            "%.0f%%" % pp_pct if pp_pct else "—",
            verdict(ok) if is_target else "(ceiling)" if key[0] == "memcpy_d2d" else "-"))
    L.append("")
    L.append("| GEMM | dtype | recap TFLOP/s | PyTorch TFLOP/s | recap / PyTorch | ceiling (PyTorch "
             "bf16 8192^3) | target: no slower than PyTorch |")
    L.append("|---|---|---:|---:|---:|---:|---|")
    pg = {(r["dtype"], r["m"]): r for r in peer.get("gemm") or []}
    ceiling = peer.get("matmul_bf16_8192_tflops")
    for r in ours.get("gemm") or []:
        p = pg.get((r["dtype"], r["m"]), {})
        rt, pt = r.get("tflops"), p.get("tflops")
        rr = rt / pt if rt and pt else None
        # Issue 6: bf16 GEMMs of 4096^3 and larger; the time ratio allows 2% of noise.
        ok = None
        if r["dtype"] == "bf16" and r["m"] >= 4096:
            ok = None if rr is None or ours.get("smoke") else rr >= 0.98
            targets.append(("bench-ops matmul bf16 %d^3 no slower than PyTorch" % r["m"], ok))
        L.append("| %d^3 | %s | %s | %s | %s | %s | %s |" % (
            r["m"], r["dtype"], "%.0f" % rt if rt else "—", "%.0f" % pt if pt else "—",
            "%.2f" % rr if rr else "—", "%.0f" % ceiling if ceiling else "—",
            verdict(ok) if r["dtype"] == "bf16" and r["m"] >= 4096 else "-"))
    if peer.get("errors"):
        L.append("")
        L.append("PyTorch errors: " + "; ".join(peer["errors"]))
    L.append("")
    return L, targets


def capture_section(work):
    """Capture cost (`recap bench-capture`) and host CPU per launch next to PyTorch's."""
    cap = load(os.path.join(work, "capture.recap.json"))
    peer = (load(os.path.join(work, "ops.torch.json")) or {}).get("overhead") or {}
    if not cap:
        return [], []
    L, targets = ["## Capture cost and host overhead (`recap bench-capture`)", ""], []
    if cap.get("smoke"):
        L.append("**recap ran on the host backend (a smoke run): its numbers are not a "
                 "benchmark.**")
        L.append("")
    L.append("Wall times on the host clock (capturing is host work). The N-op chain is "
             "generated in memory (add and tanh alternating on 4096 f32) and loaded with "
             "`recap_pipeline_create_string`; the update is `recap_pipeline_rebind` of its "
             "input, which re-captures and applies the new graph to the executable "
             "(`cudaGraphExecUpdate`: the counters show in-place updates, no "
             "re-instantiation); the buckets are `specs/transformer_block.yaml` with "
             "`B: [1..N]`. CPU = `CLOCK_THREAD_CPUTIME_ID` (PyTorch: `time.thread_time()`) "
             "around the calls, waits excluded.")
    L.append("")
    L.append("| measurement | recap | PyTorch | target | result |")
    L.append("|---|---:|---:|---|---|")
    c, u, b, cpu = cap.get("capture") or {}, cap.get("update") or {}, cap.get("buckets") or {}, \
        cap.get("cpu") or {}

    def tgt(block):
        t = block.get("target") or {}
        return t.get("value_ms"), t.get("target_ms"), t.get("met")

    def ms(v):
        return "—" if v is None else "%.2f ms" % v

    def us(v):
        return "—" if v is None else "%.2f us" % v
    smoke = cap.get("smoke")
    v, t, met = tgt(c)
    ok = None if smoke else met
    targets.append(("capture + instantiate of a %s-op pipeline <= %s ms" % (c.get("ops"), t), ok))
    L.append("| capture + instantiate, %s-op chain (%s nodes; capture %s + instantiate %s) | %s "
             "| %s | <= %s ms | %s |" % (c.get("ops"), c.get("graph_nodes"),
                                        ms(c.get("capture_ms")), ms(c.get("instantiate_ms")),
                                        ms(v), ms(peer.get("chain_capture_ms")), t, verdict(ok)))
    v, t, met = tgt(u)
    ok = None if smoke else met
    targets.append(("graph update after a rebind <= %s ms" % t, ok))
    L.append("| update after a rebind (%s in place, %s re-instantiated) | %s | — | <= %s ms | %s |"
             % (u.get("in_place_updates"), u.get("reinstantiations"), ms(v), t, verdict(ok)))
    v, t, met = tgt(b)
    ok = None if smoke else met
    targets.append(("all %s buckets captured < %s ms" % (b.get("buckets"), t), ok))
    L.append("| %s buckets of %s: capture + instantiate (eager warmup before it %s; wall %s) | "
             "%s | — | < %s ms | %s |" % (b.get("buckets"), b.get("spec"), ms(b.get("warmup_ms")),
                                          ms(b.get("wall_ms")), ms(v), t, verdict(ok)))
    L.append("| host CPU per eager op launch (add on [4096]) | %s | %s | — | %s |" % (
        us(cpu.get("op_launch_us")), us(peer.get("eager_op_cpu_us")),
        "recap / PyTorch %.2fx" % (cpu["op_launch_us"] / peer["eager_op_cpu_us"])
        if cpu.get("op_launch_us") and peer.get("eager_op_cpu_us") else "—"))
    L.append("| host CPU per op of an eager pipeline run (engine included) | %s | — | — | — |"
             % us(cpu.get("eager_pipeline_per_op_us")))
    L.append("| host CPU per replay call (%s-node graph; PyTorch's: %s nodes) | %s | %s | — | %s |"
             % (cpu.get("replay_graph_nodes"), peer.get("replay_graph_nodes") or "—",
                us(cpu.get("replay_call_us")), us(peer.get("replay_call_cpu_us")),
                "recap / PyTorch %.2fx" % (cpu["replay_call_us"] / peer["replay_call_cpu_us"])
                if cpu.get("replay_call_us") and peer.get("replay_call_cpu_us") else "—"))
    L.append("")
    return L, targets


def svg(rows):
    """Horizontal bars per spec on a log time axis: recap eager/graph, PyTorch eager/graph,
    with the floor as a black tick."""
    series = [("recap eager", "recap_eager", "#9ecae1"),
              ("recap graph", "recap_graph", "#08519c"),
              ("PyTorch eager", "torch_eager", "#fdae6b"),
              ("PyTorch graph", "torch_graph", "#d94801")]
    vals = [r[k] for r in rows for _, k, _ in series if r[k]] + \
        [r["floor_us"] for r in rows if r["floor_us"]]
    lo = 10 ** math.floor(math.log10(min(vals))) if vals else 1
    hi = 10 ** math.ceil(math.log10(max(vals))) if vals else 10
    if hi <= lo:
        hi = lo * 10
    left, width, bar, gap = 190, 620, 11, 16
    height = 60 + len(rows) * (len(series) * bar + gap) + 40

    def x(v):
        return left + width * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="11">' % (left + width + 30, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="10" y="18" font-size="13">Per-iteration time, us (log scale); '
           'black tick: floor</text>']
    dec = lo
    while dec <= hi:
        out.append('<line x1="%.1f" y1="30" x2="%.1f" y2="%d" stroke="#ddd"/>' % (x(dec), x(dec),
                                                                                    height - 40))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%g</text>' % (x(dec), height - 26,
                                                                              dec))
        dec *= 10
    y = 40
    for r in rows:
        out.append('<text x="%d" y="%d" text-anchor="end">%s</text>'
                   % (left - 8, y + len(series) * bar // 2 + 4, r["spec"]))
        for i, (label, key, color) in enumerate(series):
            v = r[key]
            if v:
                out.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s">'
                           '<title>%s %s: %.1f us</title></rect>'
                           % (left, y + i * bar, max(1.0, x(v) - left), bar - 2, color, r["spec"],
                              label, v))
                out.append('<text x="%.1f" y="%d" font-size="9">%s</text>'
                           % (x(v) + 3, y + i * bar + bar - 3, fmt_us(v)))
        if r["floor_us"]:
            fx = x(r["floor_us"])
            out.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black" '
                       'stroke-width="2"/>' % (fx, y - 2, fx, y + len(series) * bar))
        y += len(series) * bar + gap
    lx = left
    for label, _, color in series:
        out.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/>' % (lx, height - 14,
                                                                             color))
        out.append('<text x="%d" y="%d">%s</text>' % (lx + 14, height - 5, label))
        lx += 120
    out.append("</svg>")
    return "\n".join(out) + "\n"


def summary(rows):
    ratios = [ratio(r["recap_graph"], r["torch_graph"]) for r in rows]
    ratios = [v for v in ratios if v]
    faster = sum(1 for v in ratios if v < 1)
    geo = math.exp(sum(math.log(v) for v in ratios) / len(ratios)) if ratios else None
    match = sum(1 for r in rows if (r["check"] or {}).get("ok"))
    pools = [le(r["recap_pool"], r["torch_pool"]) for r in rows]
    floors = [ratio(r["recap_graph"], r["floor_us"]) for r in rows]
    floors = [v for v in floors if v]
    gfl = math.exp(sum(math.log(v) for v in floors) / len(floors)) if floors else None
    return ("bench: %d specs; recap graph / PyTorch graph geomean %s (recap faster on %d of %d); "
            "outputs match %d of %d; pool <= PyTorch's on %d of %d; recap graph / floor "
            "geomean %s" % (len(rows), "%.2fx" % geo if geo else "n/a", faster, len(ratios),
                            match, len(rows), sum(1 for p in pools if p), sum(1 for p in pools
                                                                             if p is not None),
                            "%.2fx" % gfl if gfl else "n/a"))


def compile_failures(rows):
    out = []
    info = [(r["spec"], r.get("compile_info") or {}) for r in rows]
    bad = [(spec, i["error"]) for spec, i in info if i.get("error") and not is_budget_skip(i)]
    if bad:
        out += ["torch.compile failures: " + "; ".join("%s: %s" % b for b in bad), ""]
    skipped = [spec for spec, i in info if i.get("error") and is_budget_skip(i)]
    if skipped:
        out += ["torch.compile not run (bench_all.sh's COMPILE_BUDGET_S was spent): " +
                ", ".join(skipped), ""]
    one = [(r["spec"], r["compile_info"]["streams"]) for r in rows
           if ((r.get("compile_info") or {}).get("streams") or "").startswith("one")]
    if one:
        out += ["torch.compile on one stream (1 stream): " +
                "; ".join("%s: %s" % b for b in one), ""]
    return out


DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs")


def doc_table(name):
    """The first markdown table of docs/NAME's "## Benchmark" section, with the lines just
    before it (what it measures), when the report runs in a checkout; else nothing."""
    try:
        with open(os.path.join(DOCS, name), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return []
    m = re.search(r"^## Benchmark\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    if not m:
        return []
    lines = m.group(1).strip().splitlines()
    first = next((i for i, ln in enumerate(lines) if ln.startswith("|")), None)
    if first is None:
        return []
    end = first
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    start = first
    while start > 0 and lines[start - 1].strip():
        start -= 1
    return lines[start:end] + [""]


# The allocator's and the two-GPU benchmarks come from their own runs
# (bench/peer/torch_alloc_bench.sh; scripts/gpu/gpu_run_multi.sh on another machine kind) and live in
# docs/ALLOCATOR.md and docs/MULTI_GPU.md; the report links them and copies their tables in.
def allocator_lines():
    return ["## Allocator", "",
            "Cached alloc+free against PyTorch's caching allocator (libtorch from C++) and raw "
            "cudaMalloc/cudaFree, from [ALLOCATOR.md, Benchmark](ALLOCATOR.md#benchmark) "
            "(`bench/peer/torch_alloc_bench.sh`, another run; nanoseconds per alloc+free pair, or "
            "per operation for the trace):", ""] + doc_table("ALLOCATOR.md")


def multi_gpu_lines():
    out = ["## Multi-GPU", "",
           "Tensor-parallel speedup at 2 GPUs and all_reduce bus bandwidth (2 x H200, NCCL), "
           "from [MULTI_GPU.md](MULTI_GPU.md) (`scripts/gpu/gpu_run_multi.sh`, another run):", ""]
    try:
        with open(os.path.join(DOCS, "MULTI_GPU.md"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return out
    m = re.search(r"^## Benchmark\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    return out + ([m.group(1).strip(), ""] if m else [])


def main(argv=None):
    ap = argparse.ArgumentParser(description="BENCHMARKS.md and benchmarks.svg from a "
                                             "bench_all.sh run")
    ap.add_argument("--work", required=True, help="bench_all.sh's work folder")
    ap.add_argument("--out", required=True, help="where BENCHMARKS.md and benchmarks.svg go")
    ap.add_argument("--recap-rotates", type=int, default=0,
                    help="1 when recap bench was given the peer's --rotate")
    args = ap.parse_args(argv)
    rows, floors = collect(args.work, args.recap_rotates)
    meta = load(os.path.join(args.work, "meta.json")) or {}
    ops_lines, ops_targets = ops_section(args.work)
    cap_lines, cap_targets = capture_section(args.work)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "BENCHMARKS.md"), "w", encoding="utf-8") as f:
        f.write(markdown(rows, floors, meta) + "\n" + "\n".join(compile_failures(rows) +
                                                                ops_lines + cap_lines +
                                                                allocator_lines() +
                                                                multi_gpu_lines()))
    with open(os.path.join(args.out, "benchmarks.svg"), "w", encoding="utf-8") as f:
        f.write(svg(rows))
    print(summary(rows))
    spec_targets = []
    for r in rows:
        for what, fn in TARGETS.get(r["spec"], []):
            spec_targets.append(("%s: %s" % (r["spec"], what), fn(r)))
        spec_targets.append(("%s: graph memory <= PyTorch's" % r["spec"],
                             le(r["recap_pool"], r["torch_pool"])))
    for what, ok in spec_targets + ops_targets + cap_targets:
        print("target %-8s %s" % ({None: "n/a", True: "met", False: "MISSED"}[ok], what))
    return 0


if __name__ == "__main__":
    sys.exit(main())
