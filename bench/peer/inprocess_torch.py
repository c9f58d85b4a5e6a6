#!/usr/bin/env python3
"""inprocess_torch.py: recap's Pipeline, called from Python through the `recap` package, timed
next to torch.cuda.CUDAGraph replay of the same spec in the same process (issue 25).

    inprocess_torch.py SPEC [--batch N ...] [--iters N] [--warmup N] [--rounds R] [--json OUT]

Per batch (default: every bucket of the spec's bucketed dim):
  1. recap.Pipeline(SPEC, device="cuda") fills its inputs with random values in place (through
     DLPack views); torch gets clones of every declared tensor recap holds (params from recap's
     own init, the same inputs), so both compute the same thing on the same values.
  2. torch builds the spec with peer_torch.py's ops (recap's semantics) and captures it as
     peer_torch.py does (warmup and capture on a side stream).
  3. Both outputs are compared (peer_torch.py's tolerances: 1e-4 f32, 2e-3 f16, 2e-2 bf16,
     relative to the largest |value|).
  4. Timing, the same method for both, on one torch stream: a CUDA event pair around each call,
     waiting for the end event before the next call (as `recap bench` and peer_torch.py do), so
     every sample is one iteration from an idle GPU, launch included. recap's call is
     run(batch, stream=S, wait=False) then order_before(S): the stream handshakes a torch
     program pays (an event each way) are inside the pair. Also the host time of the call
     itself (time.perf_counter around it, before the wait).
  5. Noise: samples are taken in R rounds alternating recap and torch (drift hits both), and
     the p10 and p90 of each are reported beside the median.

Needs torch with CUDA, PyYAML (for peer_torch.py's spec reader), and the recap package with a
CUDA librecap.so (RECAP_LIBRARY or installed). Specs whose inputs are floating point only.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_torch  # noqa: E402 - beside this file, here and in the GPU bundle's tools/

import recap  # noqa: E402


def timed(fn, iters):
    """(device us per call by an event pair, host us of the call) over `iters` calls."""
    device, host = [], []
    for i in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e6)
        end.record()
        end.synchronize()
        device.append(start.elapsed_time(end) * 1000.0)
    return device, host


def compare(name, dtype, got, want):
    err = float((got.float() - want.float()).abs().max())
    scale = float(want.float().abs().max())
    rel = err / scale if scale > 0 else err
    tol = peer_torch.TOLERANCE[dtype]
    return {"output": name, "dtype": dtype, "rel_err": rel, "tol": tol, "ok": rel <= tol}


def bench_batch(p, spec, batch, args):
    dims = {k: (batch if k == p.bucket_dim else v) for k, v in spec["dims"].items()}
    declared = {}
    for t in p.tensors:
        if t.name not in spec["tensors"]:
            continue
        view = torch.from_dlpack(p.tensor(t.name, batch=batch))
        if t.role == "input":
            if t.dtype not in peer_torch.FLOAT_TYPES:
                raise SystemExit("%s: input %s is %s: this benchmark fills float inputs only"
                                 % (args.spec, t.name, t.dtype))
            view.copy_(torch.randn(view.shape, device="cuda"))
        declared[t.name] = view.clone()  # torch's own copy of recap's values
    scalar_values = {n: int(v.reshape(-1)[0]) for n, v in declared.items()
                     if spec["tensors"][n]["role"] == "scalar"}
    ctx = peer_torch.Ctx("cuda")
    env_dtypes = {n: t["dtype"] for n, t in spec["tensors"].items()}
    mode = "sdpa" if peer_torch.has_sdpa() else "explicit"
    pipe = peer_torch.Pipeline(spec, dims, ctx, env_dtypes, scalar_values, mode)

    main = torch.cuda.Stream()
    main.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(main):
        for _ in range(args.warmup):
            pipe.run(dict(declared))
        main.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=main):
            static = pipe.run(dict(declared))
        graph.replay()
        outs = p.run(batch, stream=main)  # after the warmups, so states match (none here)
        if not isinstance(outs, dict):
            outs = {p.outputs[0]: outs}
        main.synchronize()
        check = [compare(n, pipe.dtypes[n], torch.from_dlpack(outs[n]), static[n])
                 for n in spec["outputs"]]

        def recap_call():
            p.run(batch, stream=main, wait=False)
            p.order_before(main)

        for _ in range(args.warmup):
            recap_call()
            graph.replay()
        main.synchronize()
        samples = {"recap": ([], []), "torch_graph": ([], [])}
        per_round = max(1, args.iters // args.rounds)
        for _ in range(args.rounds):
            for name, fn in (("recap", recap_call), ("torch_graph", graph.replay)):
                device, host = timed(fn, per_round)
                samples[name][0].extend(device)
                samples[name][1].extend(host)
    result = {"batch": batch, "check": check, "ok": all(c["ok"] for c in check)}
    for name, (device, host) in samples.items():
        result[name + "_us"] = peer_torch.percentiles(device)
        result[name + "_call_us"] = peer_torch.percentiles(host)
    result["recap_over_torch"] = (result["recap_us"]["median"] /
                                  result["torch_graph_us"]["median"])
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spec")
    ap.add_argument("--batch", type=int, action="append", default=[],
                    help="rows per run (repeatable; default: every bucket)")
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # recap's f32 GEMMs are exact f32
    spec = peer_torch.load_spec(args.spec)
    report = {"spec": spec["name"], "spec_file": args.spec,
              "device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cuda": torch.version.cuda, "iters": args.iters, "rounds": args.rounds,
              "method": "CUDA event pair per call on one torch stream, waited before the next; "
                        "recap = run(stream=S, wait=False) + order_before(S)",
              "results": []}
    with recap.Pipeline(args.spec, device="cuda") as p:
        for batch in args.batch or list(p.buckets) or [0]:
            r = bench_batch(p, spec, batch, args)
            report["results"].append(r)
            print("%-14s batch %-4d recap %8.1f us (p10 %.1f, p90 %.1f; call %.1f us)  "
                  "torch graph %8.1f us (p10 %.1f, p90 %.1f; call %.1f us)  ratio %.3f  %s"
                  % (spec["name"], batch, r["recap_us"]["median"], r["recap_us"]["p10"],
                     r["recap_us"]["p90"], r["recap_call_us"]["median"],
                     r["torch_graph_us"]["median"], r["torch_graph_us"]["p10"],
                     r["torch_graph_us"]["p90"], r["torch_graph_call_us"]["median"],
                     r["recap_over_torch"], "check ok" if r["ok"] else "CHECK FAILED"),
                  flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0 if all(r["ok"] for r in report["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
