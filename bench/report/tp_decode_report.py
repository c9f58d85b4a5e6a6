#!/usr/bin/env python3
"""Compares `recap bench-decode --profile --json` of a model at TP 1 with every rank's at TP N
(scripts/gpu/gpu_tp.sh): per batch, the graph step of each and their ratio, the TP step's
all_reduces alone and run_dist's cost per step, then the profiled eager step by op kind side by
side (TP 1's time, each rank's, and rank 0's change), so that the time the TP step spends
beyond half of TP 1's shows up by op kind.

    python3 tp_decode_report.py tp1.json tp2.r0.json tp2.r1.json
"""
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def by_batch(doc):
    return {row["batch"]: row for row in doc["results"]}


def table(entries, key):
    """{name: {"ms", "launches"}} from a row's profile list."""
    return {e[key]: e for e in entries}


def print_side_by_side(title, one, ranks, world, limit=None):
    """TP 1's time per entry beside each rank's, and rank 0's excess over TP 1's / world."""
    if not one:
        return
    names = sorted(set(one) | set().union(*ranks),
                   key=lambda n: -max([one.get(n, {}).get("ms", 0)] +
                                      [k.get(n, {}).get("ms", 0) for k in ranks]))
    print("  %s (us; launches in brackets; excess: rank 0 - TP 1 / %d):" % (title, world))
    head = "    %-34s %14s" % ("", "TP 1")
    for r in range(world):
        head += " %14s" % ("rank %d" % r)
    print(head + " %10s" % "excess")
    zero = {"ms": 0, "launches": 0}
    for n in names[:limit]:
        a = one.get(n, zero)
        line = "    %-34s %14s" % (n, "%.1f [%d]" % (a["ms"] * 1e3, a["launches"]))
        for k in ranks:
            b = k.get(n, zero)
            line += " %14s" % ("%.1f [%d]" % (b["ms"] * 1e3, b["launches"]))
        print(line + " %10.1f" % ((ranks[0].get(n, zero)["ms"] - a["ms"] / world) * 1e3))
    total1 = sum(e["ms"] for e in one.values())
    totals = [sum(e["ms"] for e in k.values()) for k in ranks]
    line = "    %-34s %14.1f" % ("total", total1 * 1e3)
    for t in totals:
        line += " %14.1f" % (t * 1e3)
    print(line + " %10.1f" % ((totals[0] - total1 / world) * 1e3))


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: tp_decode_report.py TP1.json RANK0.json [RANK1.json ...]")
    tp1 = by_batch(load(sys.argv[1]))
    ranks = [by_batch(load(p)) for p in sys.argv[2:]]
    world = len(ranks)
    for batch in sorted(tp1):
        one = tp1[batch]
        rows = [r.get(batch) for r in ranks]
        if any(r is None for r in rows):
            print("batch %d: missing on a rank" % batch)
            continue
        step = [r["graph_ms_per_step"] for r in rows]
        print("\n== batch %d: graph step TP 1 %.4f ms; TP %d %s ms: %.3fx (rank 0) ==" %
              (batch, one["graph_ms_per_step"], world,
               " / ".join("%.4f" % s for s in step), step[0] / one["graph_ms_per_step"]))
        half = one["graph_ms_per_step"] / world
        print("  TP %d step beyond TP 1 / %d: %.4f ms" % (world, world, step[0] - half))
        chain = rows[0].get("all_reduce_chain")
        if chain:
            print("  the step's %d all_reduces alone (%d %s each, one graph): %.4f ms, %.2f us each"
                  % (chain["collectives"], chain["elements"], chain["dtype"], chain["ms"],
                     chain["us_each"]))
        if "run_dist_overhead_ms" in rows[0]:
            print("  run_dist per step: %.4f ms, of which %.4f ms beyond the graph step" %
                  (rows[0]["run_dist_ms_per_step"], rows[0]["run_dist_overhead_ms"]))
        print("  kernels per step: TP 1 %d, TP %d %s" %
              (one["kernels"], world, " / ".join(str(r["kernels"]) for r in rows)))
        print_side_by_side("profiled eager step by op kind", table(one.get("profile", []), "op"),
                           [table(r.get("profile", []), "op") for r in rows], world)
        print_side_by_side("by op name, layers folded",
                           table(one.get("profile_by_name", []), "name"),
                           [table(r.get("profile_by_name", []), "name") for r in rows], world,
                           limit=24)

if __name__ == "__main__":
    main()
