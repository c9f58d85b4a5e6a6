#!/usr/bin/env python3
"""peer_torch_sample.py: PyTorch's side of bench/bench_sample.c (bench/peer/sample_bench.sh runs both).

    peer_torch_sample.py --logits FILE [--iters N] [--json OUT] [--recap-json FILE]

Reads the logits bench_sample wrote (f32, [64, 128256], row-major) and times bench_sample's cases
the same way: each case captured as one torch.cuda.CUDAGraph, the median of the intervals between
CUDA events recorded around back-to-back replays. The sampler is the sort-based one of vLLM's
PyTorch path, with per-row parameter tensors, computing in f32 whatever the logits' dtype:
  all          x = logits / T; sort; top-k (mask below each row's k-th largest); softmax, cumsum,
               top-p mask (keep the shortest prefix reaching p); scatter back; softmax; min-p
               mask (p < min_p * max p); draw
  top_p        the same without top-k and min-p
  temperature  softmax(logits / T); draw
  greedy, argmax  torch.argmax(logits, -1)
at batch 64 (and 1 for greedy and argmax), on f32 and bf16 logits. The draw is torch.multinomial(
probs, 1) when this PyTorch captures it; some versions check the probabilities with a host
synchronization, which a capture refuses, and then the draw is what multinomial computes for one
sample: argmax(probs / Exp(1) noise). The JSON's "draw" says which.

--json writes {"device", "torch", "draw", "cases": [{"name", "dtype", "batch", "median_us"}]}.
--recap-json (bench_sample's --json) prints recap's times beside these, and the ratios; the exit
code is 1 unless recap's "all" case at batch 64 takes at most half of PyTorch's time for every
dtype (the issue's target).
"""
import argparse
import json
import subprocess
import sys

import torch

BATCH = 64
VOCAB = 128256
WARMUP = 3


def median(values):
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def draw_multinomial(probs):
    return torch.multinomial(probs, 1)


def draw_exponential(probs):
    return (probs / torch.empty_like(probs).exponential_(1.0)).argmax(dim=-1, keepdim=True)


def sort_sampler(logits, temperature, top_k, top_p, min_p, draw):
    """vLLM's PyTorch top-k/top-p (one sort), then min-p and the draw."""
    x = logits.float().div(temperature.unsqueeze(1))
    xs, order = x.sort(dim=-1, descending=False)
    if top_k is not None:
        kth = xs.gather(1, (xs.size(1) - top_k).unsqueeze(1))
        xs = xs.masked_fill(xs < kth, float("-inf"))
    if top_p is not None:
        cum = xs.softmax(dim=-1).cumsum(dim=-1)
        drop = cum <= (1 - top_p).unsqueeze(1)
        drop[:, -1] = False
        xs = xs.masked_fill(drop, float("-inf"))
    x = torch.empty_like(xs).scatter_(1, order, xs)
    probs = x.softmax(dim=-1)
    if min_p is not None:
        top = probs.amax(dim=-1, keepdim=True)
        probs = probs.masked_fill(probs < min_p.unsqueeze(1) * top, 0.0)
    return draw(probs)


def time_graph(fn, iters):
    """Captures fn() as one graph; the median of iters back-to-back replays, in microseconds."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(20):
        graph.replay()
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    events[0].record()
    for i in range(iters):
        graph.replay()
        events[i + 1].record()
    torch.cuda.synchronize()
    return median([events[i].elapsed_time(events[i + 1]) * 1000.0 for i in range(iters)])


def multinomial_captures():
    """Whether torch.multinomial captures here, asked of a child process: a refused capture can
    leave this process's CUDA state unusable."""
    probe = ("import torch\n"
             "p = torch.rand(4, 100, device='cuda').softmax(-1)\n"
             "s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())\n"
             "with torch.cuda.stream(s): torch.multinomial(p, 1)\n"
             "torch.cuda.current_stream().wait_stream(s)\n"
             "g = torch.cuda.CUDAGraph()\n"
             "with torch.cuda.graph(g): torch.multinomial(p, 1)\n"
             "g.replay(); torch.cuda.synchronize()\n")
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--logits", required=True)
    ap.add_argument("--iters", type=int, default=500)
    ap.add_argument("--json")
    ap.add_argument("--recap-json")
    args = ap.parse_args()

    host = torch.from_file(args.logits, shared=False, size=BATCH * VOCAB, dtype=torch.float32)
    logits = {"f32": host.view(BATCH, VOCAB).cuda(), "bf16": host.view(BATCH, VOCAB).cuda().bfloat16()}
    draw_name = "multinomial" if multinomial_captures() else "exponential"
    draw = draw_multinomial if draw_name == "multinomial" else draw_exponential

    def full(value, dtype=torch.float32):
        return torch.full((BATCH,), value, dtype=dtype, device="cuda")

    t08, t1 = full(0.8), full(1.0)
    k50, p09, minp = full(50, torch.int64), full(0.9), full(0.05)
    cases = []
    for dtype in ("f32", "bf16"):
        x = logits[dtype]
        runs = [
            ("all", BATCH, lambda: sort_sampler(x, t08, k50, p09, minp, draw)),
            ("top_p", BATCH, lambda: sort_sampler(x, t08, None, p09, None, draw)),
            ("temperature", BATCH, lambda: draw(x.float().div(t1.unsqueeze(1)).softmax(dim=-1))),
            ("greedy", BATCH, lambda: x.argmax(dim=-1)),
            ("greedy", 1, lambda: x[:1].argmax(dim=-1)),
            ("argmax", BATCH, lambda: x.argmax(dim=-1)),
            ("argmax", 1, lambda: x[:1].argmax(dim=-1)),
        ]
        for name, batch, fn in runs:
            us = time_graph(fn, args.iters)
            cases.append({"name": name, "dtype": dtype, "batch": batch, "median_us": us})

    device = torch.cuda.get_device_name()
    print(f"device {device}, torch {torch.__version__}, draw: {draw_name}, {args.iters} replays per case")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "torch": torch.__version__, "draw": draw_name,
                       "cases": cases}, f, indent=1)

    recap = {}
    if args.recap_json:
        with open(args.recap_json) as f:
            for c in json.load(f)["cases"]:
                recap[(c["name"], c["dtype"], c["batch"])] = c["median_us"]
    print(f"{'case':<12} {'dtype':<5} {'batch':>5} {'torch_us':>10} {'recap_us':>10} {'speedup':>8}")
    met = True
    for c in cases:
        key = (c["name"], c["dtype"], c["batch"])
        r = recap.get(key)
        ratio = c["median_us"] / r if r else None
        print(f"{c['name']:<12} {c['dtype']:<5} {c['batch']:>5} {c['median_us']:>10.1f} "
              f"{r if r else float('nan'):>10.1f} {ratio if ratio else float('nan'):>7.2f}x")
        if c["name"] == "all" and c["batch"] == BATCH:
            met = met and ratio is not None and ratio >= 2.0
    if args.recap_json:
        print(f"target (recap's 'all' at batch {BATCH} at least 2x faster, every dtype): "
              f"{'met' if met else 'MISSED'}")
    return 0 if met or not args.recap_json else 1


if __name__ == "__main__":
    sys.exit(main())
