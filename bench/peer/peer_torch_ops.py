#!/usr/bin/env python3
"""peer_torch_ops.py: PyTorch's side of `recap bench-ops` and `recap bench-capture` (issue 6).

    peer_torch_ops.py [--elements N] [--iters N] [--gemm 4096,8192] [--json OUT]
                      [--device cuda] [--no-overhead]

Runs the ops of `recap bench-ops` on the same shapes, timed the same way: every sample is one
launch between two CUDA events on the current stream, waited for before the next launch
(bench/peer/peer_torch.py's time_cuda, recap's method), median of --iters after 3 warmups.
  - memory-bound ops on [N / 4096, 4096] in f32 and bf16: the ceiling (dst.copy_(src): a
    device-to-device cudaMemcpyAsync), x.clone(), relu, gelu (erf), silu, add, mul, softmax
    over the last dim, layer_norm (weight, bias, eps 1e-5), rms_norm (weight, eps 1e-6);
    bandwidth = bytes the op must read and write / median time, as recap counts them;
  - matmul A x B, row-major, bf16 and f16, N^3 for each --gemm size, in TFLOP/s, plus bf16
    8192^3 (the issue's matmul ceiling) when 8192 is not in the list;
  - host overhead (unless --no-overhead), the peer of `recap bench-capture`'s CPU numbers:
    CPU time (time.thread_time, the thread's CLOCK_THREAD_CPUTIME_ID) per eager op, over
    10,000 torch.add(x, b, out=z) on a [4096] f32 tensor on a side stream in batches of 100
    with an uncounted wait after each; and per g.replay() of a captured 1000-op chain (add
    and tanh alternating, recap bench-capture's generated chain), with the chain's capture +
    instantiate wall time (torch.cuda.graph's exit instantiates).

JSON (--json), read by bench/report/bench_report.py: device, torch, cuda, elements, iters, ops: [{op,
dtype, shape, bytes, median_us, p10_us, p90_us, gbps}], gemm: [{op, dtype, m, n, k,
median_us, tflops}], copy_gbps: {dtype: GB/s}, matmul_bf16_8192_tflops, overhead:
{eager_op_cpu_us, eager_op_launches, replay_call_cpu_us, replay_graph_nodes,
chain_capture_ms} (each null when it could not be measured; errors go to "errors").
"""
import argparse
import json
import math
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None
    F = None

ROW_COLS = 4096
WARMUP = 3
LAUNCH_BATCH = 100


def percentiles(times_us):
    s = sorted(times_us)

    def q(p):
        if len(s) == 1:
            return s[0]
        x = p * (len(s) - 1)
        lo = int(math.floor(x))
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (x - lo)
    return {"median": q(0.5), "p10": q(0.1), "p90": q(0.9), "n": len(s)}


def time_cuda(fn, iters):
    """recap's method: one event pair per launch, waited for before the next."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    out = []
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(iters):
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) * 1000.0)
    return percentiles(out)


def rms_norm(x, w, eps):
    if hasattr(F, "rms_norm"):
        return F.rms_norm(x, (x.shape[-1],), w, eps=eps)
    xf = x.float()  # PyTorch < 2.4: the formula
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def bench_memory_ops(dev, dtype_name, elements, iters, errors):
    dt = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    rows, cols = elements // ROW_COLS, ROW_COLS
    es = torch.tensor([], dtype=dt).element_size()
    x = (torch.rand(rows, cols, device=dev) * 2 - 1).to(dt)
    y = (torch.rand(rows, cols, device=dev) * 2 - 1).to(dt)
    z = torch.empty_like(x)
    w = (torch.rand(cols, device=dev) * 2 - 1).to(dt)
    b = (torch.rand(cols, device=dev) * 2 - 1).to(dt)
    tb = float(elements * es)
    cases = [
        ("memcpy_d2d", 2 * tb, lambda: z.copy_(x)),
        ("copy", 2 * tb, lambda: x.clone()),
        ("relu", 2 * tb, lambda: F.relu(x)),
        ("gelu", 2 * tb, lambda: F.gelu(x)),
        ("silu", 2 * tb, lambda: F.silu(x)),
        ("add", 3 * tb, lambda: torch.add(x, y)),
        ("mul", 3 * tb, lambda: torch.mul(x, y)),
        ("softmax", 2 * tb, lambda: torch.softmax(x, -1)),
        ("layernorm", 2 * tb + 2 * cols * es, lambda: F.layer_norm(x, (cols,), w, b, 1e-5)),
        ("rmsnorm", 2 * tb + cols * es, lambda: rms_norm(x, w, 1e-6)),
    ]
    out, ceiling = [], None
    for name, nbytes, fn in cases:
        try:
            t = time_cuda(fn, iters)
        except Exception as e:  # noqa: BLE001 - one op failing must not lose the others
            errors.append("%s %s: %s" % (name, dtype_name, e))
            continue
        gbps = nbytes / (t["median"] * 1e-6) / 1e9
        if name == "memcpy_d2d":
            ceiling = gbps
        out.append({"op": name, "dtype": dtype_name, "shape": [rows, cols], "bytes": nbytes,
                    "median_us": t["median"], "p10_us": t["p10"], "p90_us": t["p90"],
                    "gbps": gbps, "ceiling_gbps": ceiling,
                    "pct_of_ceiling": 100.0 * gbps / ceiling if ceiling else None})
        print("  %-10s %-5s [%d, %d] %10.1f us  %8.1f GB/s" % (name, dtype_name, rows, cols,
                                                              t["median"], gbps), flush=True)
    del x, y, z
    torch.cuda.empty_cache()
    return out, ceiling


def bench_gemm(dev, dtype_name, n, iters, errors):
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[dtype_name]
    try:
        a = (torch.rand(n, n, device=dev) * 2 - 1).to(dt)
        b = (torch.rand(n, n, device=dev) * 2 - 1).to(dt)
        t = time_cuda(lambda: torch.matmul(a, b), iters)
    except Exception as e:  # noqa: BLE001
        errors.append("matmul %s %d: %s" % (dtype_name, n, e))
        return None
    flops = 2.0 * n ** 3
    tflops = flops / (t["median"] * 1e-6) / 1e12
    print("  %-10s %-5s %5d^3        %10.1f us  %8.1f TFLOP/s" % ("matmul", dtype_name, n,
                                                                  t["median"], tflops), flush=True)
    del a, b
    torch.cuda.empty_cache()
    return {"op": "matmul", "dtype": dtype_name, "m": n, "n": n, "k": n, "flops": flops,
            "median_us": t["median"], "p10_us": t["p10"], "p90_us": t["p90"], "tflops": tflops}


def measure_overhead(dev, errors, launches=10000, chain_ops=1000, replays=50):
    res = {"eager_op_cpu_us": None, "eager_op_launches": None, "replay_call_cpu_us": None,
           "replay_graph_nodes": None, "chain_capture_ms": None}
    side = torch.cuda.Stream(device=dev)
    side.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(side):
            x = torch.rand(ROW_COLS, device=dev)
            bias = torch.rand(ROW_COLS, device=dev)
            z = torch.empty_like(x)
            for _ in range(LAUNCH_BATCH):
                torch.add(x, bias, out=z)
            side.synchronize()
            cpu, done = 0.0, 0
            while done < launches:
                t0 = time.thread_time()
                for _ in range(LAUNCH_BATCH):
                    torch.add(x, bias, out=z)
                cpu += time.thread_time() - t0
                done += LAUNCH_BATCH
                side.synchronize()
            res["eager_op_cpu_us"] = cpu / done * 1e6
            res["eager_op_launches"] = done

            def chain():
                t = x
                for i in range(chain_ops):
                    t = torch.add(t, bias) if i % 2 == 0 else torch.tanh(t)
                return t
            chain()  # warmup on the capturing stream (PyTorch's recipe)
            side.synchronize()
            g = torch.cuda.CUDAGraph()
            t0 = time.perf_counter()
            with torch.cuda.graph(g, stream=side):
                chain()
            res["chain_capture_ms"] = (time.perf_counter() - t0) * 1e3
            res["replay_graph_nodes"] = chain_ops
            g.replay()
            side.synchronize()
            samples = []
            for _ in range(replays):
                t0 = time.thread_time()
                g.replay()
                samples.append((time.thread_time() - t0) * 1e6)
                side.synchronize()
            res["replay_call_cpu_us"] = percentiles(samples)["median"]
    except Exception as e:  # noqa: BLE001
        errors.append("overhead: %s" % e)
    torch.cuda.synchronize()
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--elements", type=int, default=64 << 20,
                    help="elements per tensor (a multiple of 4096; default 64M)")
    ap.add_argument("--iters", type=int, default=50, help="timed launches per op")
    ap.add_argument("--gemm", default="4096,8192", help="GEMM sizes, comma-separated")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-overhead", action="store_true", help="skip the host-overhead part")
    args = ap.parse_args(argv)
    if torch is None:
        print("peer_torch_ops: PyTorch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("peer_torch_ops: no CUDA device", file=sys.stderr)
        return 2
    if args.elements % ROW_COLS or args.elements <= 0:
        ap.error("--elements must be a positive multiple of %d" % ROW_COLS)
    try:
        sizes = [int(s) for s in args.gemm.split(",") if s.strip()]
    except ValueError:
        ap.error("--gemm expects sizes like 4096,8192")
    dev = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    errors = []
    res = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "cuda": torch.version.cuda, "elements": args.elements, "iters": args.iters,
           "timing": "one CUDA event pair per launch, waited for; median",
           "ops": [], "gemm": [], "copy_gbps": {}, "matmul_bf16_8192_tflops": None,
           "overhead": None, "errors": errors}
    print("PyTorch %s on %s: %d elements per tensor, %d launches per op" % (
        torch.__version__, res["device"], args.elements, args.iters), flush=True)
    for dt in ("f32", "bf16"):
        print("%s:" % dt, flush=True)
        rows, ceiling = bench_memory_ops(dev, dt, args.elements, args.iters, errors)
        res["ops"] += rows
        res["copy_gbps"][dt] = ceiling
    print("GEMMs (torch.matmul):", flush=True)
    for n in sizes:
        for dt in ("bf16", "f16"):
            r = bench_gemm(dev, dt, n, args.iters if n < 8192 else max(10, args.iters // 2),
                           errors)
            if r:
                res["gemm"].append(r)
                if dt == "bf16" and n == 8192:
                    res["matmul_bf16_8192_tflops"] = r["tflops"]
    if res["matmul_bf16_8192_tflops"] is None:
        r = bench_gemm(dev, "bf16", 8192, 10, errors)
        if r:
            res["matmul_bf16_8192_tflops"] = r["tflops"]
    if not args.no_overhead:
        res["overhead"] = measure_overhead(dev, errors)
        o = res["overhead"]
        if o["eager_op_cpu_us"] is not None:
            print("host CPU time: eager op %.2f us (%d torch.add on a side stream), replay call "
                  "%s us (%s-node graph), chain capture + instantiate %s ms" % (
                      o["eager_op_cpu_us"], o["eager_op_launches"],
                      "%.2f" % o["replay_call_cpu_us"] if o["replay_call_cpu_us"] else "?",
                      o["replay_graph_nodes"],
                      "%.1f" % o["chain_capture_ms"] if o["chain_capture_ms"] else "?"))
    for e in errors:
        print("peer_torch_ops: %s" % e, file=sys.stderr)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=1, sort_keys=True)
    return 0 if res["ops"] else 1


if __name__ == "__main__":
    sys.exit(main())
