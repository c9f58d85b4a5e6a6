#!/usr/bin/env python3
"""peer_torch_gemm.py: PyTorch's side of `recap bench-gemm` (issue 23).

    peer_torch_gemm.py --grid GRID.json --json OUT.json

Reads the grid `recap bench-gemm --grid-out` (or --losses) wrote and times, for every point,
what a PyTorch user writes for the same linear: y = F.linear(x, w, b), then the activation
(F.relu, F.gelu, F.gelu(approximate="tanh"), F.silu, torch.sigmoid, torch.tanh), then
y + residual; timed exactly as recap's side times its linear:
  - the operands lie in one buffer in the grid's layout (per copy: x, weight, bias?,
    residual?, each rounded up to 256 bytes, then room for the output, which PyTorch allocates
    itself), filled with uniform [-1, 1) numbers of the point's dtype;
  - a chain of `chain` launches, launch i reading copy i % copies (so that operands that fit in
    the L2 cache are read cold, as on recap's side);
  - eager: the chain run from Python between two CUDA events, waited for; graph: the chain
    captured once into a torch.cuda.CUDAGraph (after a warmup on a side stream) and replayed
    between two events; `samples` event pairs each, median per launch.
f32 points set torch.backends.cuda.matmul.fp32_precision ("tf32" or "ieee", allow_tf32 on
older PyTorch) and record what was read back.

JSON: side "torch", device_name, settings, points: the grid's points with graph_us, eager_us
(per launch, median; null with "error" when a point failed). `recap bench-gemm --recap R.json
--peer OUT.json` compares.
"""
import argparse
import json
import statistics
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None
    F = None


def round256(b):
    return (b + 255) // 256 * 256


def layout(p, es):
    """bench_gemm_point_layout (cli/bench_gemm_grid.c): byte offsets of one copy."""
    at, lay = 0, {}
    lay["x"] = at
    at += round256(p["m"] * p["k"] * es)
    lay["w"] = at
    at += round256(p["n"] * p["k"] * es)
    if p["bias"]:
        lay["bias"] = at
        at += round256(p["n"] * es)
    if p["residual"]:
        lay["residual"] = at
        at += round256(p["m"] * p["n"] * es)
    lay["out"] = at
    at += round256(p["m"] * p["n"] * es)
    lay["stride"] = at
    return lay


def activation(name):
    return {
        "none": None,
        "relu": F.relu,
        "gelu": F.gelu,
        "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
        "silu": F.silu,
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
    }[name]


def set_fp32_precision(tf32):
    want = "tf32" if tf32 else "ieee"
    m = torch.backends.cuda.matmul
    if hasattr(m, "fp32_precision"):
        m.fp32_precision = want
        return "fp32_precision=%s" % m.fp32_precision
    m.allow_tf32 = tf32
    return "allow_tf32=%s" % m.allow_tf32


def chain_fn(p, arena, dt, es):
    lay = layout(p, es)
    flat = arena.view(dt)
    m, n, k = p["m"], p["n"], p["k"]
    ops = []
    for c in range(p["copies"]):
        base = (c * lay["stride"]) // es

        def at(key, count, base=base):
            o = base + lay[key] // es
            return flat[o:o + count]
        x = at("x", m * k).view(m, k)
        w = at("w", n * k).view(n, k)
        b = at("bias", n) if p["bias"] else None
        r = at("residual", m * n).view(m, n) if p["residual"] else None
        ops.append((x, w, b, r))
    act = activation(p["act"])

    def chain():
        y = None
        for i in range(p["chain"]):
            x, w, b, r = ops[i % len(ops)]
            y = F.linear(x, w, b)
            if act is not None:
                y = act(y)
            if r is not None:
                y = y + r
        return y
    return chain


def time_samples(run, samples, chain):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(samples):
        a.record()
        run()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1000.0 / chain)
    return statistics.median(out)


def time_point(p, arena, dt, es):
    chain = chain_fn(p, arena, dt, es)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warmup off the timed stream, as torch.cuda.graph wants
        chain()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    eager = time_samples(chain, p["samples"], p["chain"])
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        chain()
    g.replay()
    graph = time_samples(g.replay, p["samples"], p["chain"])
    del g
    return graph, eager


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grid", required=True)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    if torch is None or not torch.cuda.is_available():
        print("peer_torch_gemm.py: needs PyTorch with a CUDA device", file=sys.stderr)
        return 1
    with open(args.grid) as f:
        points = json.load(f)["points"]
    dts = {"bf16": (torch.bfloat16, 2), "f16": (torch.float16, 2), "f32": (torch.float32, 4)}
    need = max(layout(p, dts[p["dtype"]][1])["stride"] * p["copies"] for p in points)
    need = (need + 16383) // 16384 * 16384
    arena = torch.empty(need, dtype=torch.uint8, device="cuda")
    filled, settings, results, failed = None, set(), [], 0
    print("peer_torch_gemm.py: torch %s on %s, %d points, %.2f GB of operands" % (
        torch.__version__, torch.cuda.get_device_name(), len(points), need / 1e9), flush=True)
    for p in points:
        dt, es = dts[p["dtype"]]
        if filled != p["dtype"]:
            arena.view(dt).uniform_(-1, 1)
            filled = p["dtype"]
        read_back = set_fp32_precision(p["tf32"])
        if p["dtype"] == "f32":
            settings.add("%s: %s" % ("tf32" if p["tf32"] else "f32", read_back))
        r = dict(p)
        try:
            r["graph_us"], r["eager_us"] = time_point(p, arena, dt, es)
        except Exception as e:  # noqa: BLE001 - one point failing must not lose the others
            failed += 1
            r["graph_us"] = r["eager_us"] = None
            r["error"] = str(e)
            print("point %d: %s" % (p["id"], e), file=sys.stderr, flush=True)
        results.append(r)
        print("%5d %-8s %-22s %-5s %5d %6d %6d %-24s %10.2f %10.2f" % (
            p["id"], p["group"], p["label"], "tf32" if p["tf32"] else p["dtype"], p["m"], p["n"],
            p["k"], ("bias+" if p["bias"] else "") + p["act"] + ("+residual" if p["residual"]
                                                                else ""),
            r["graph_us"] or -1, r["eager_us"] or -1), flush=True)
    set_fp32_precision(False)
    settings_text = "torch %s; %s" % (torch.__version__, ", ".join(sorted(settings)) or
                                      "no f32 points")
    print("settings read back: %s" % settings_text, flush=True)
    with open(args.json, "w") as f:
        json.dump({"command": "peer_torch_gemm", "side": "torch",
                   "device_name": torch.cuda.get_device_name(), "settings": settings_text,
                   "points": results}, f, indent=1)
    print("wrote %s (%d points, %d failed)" % (args.json, len(results), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
