#!/usr/bin/env bash
# `recap bench-gemm` on the host backend, no PyTorch: the full grid's size and timing plan
# (recomputed here from the issue's definition), a timed run of the tiny grid, and the
# comparison (table, geomeans, worst point, losses over two run pairs, noise, heat map) against
# peer files made here with known ratios, so every number it prints is checked against a
# hand computation.
set -uo pipefail
recap=$1
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
expect() { # CODE WHAT -- COMMAND...
  local want=$1 what=$2
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    fail "$what: exit $got, expected $want ($*)"
    sed 's/^/    /' "$tmp/err" | head -20
  fi
}

# The full grid: 19 pairs x 14 Ms x 3 epilogues + 4 pairs x 7 activations x 4 (bias,
# residual) x 4 Ms + 8 pairs x 3 dtypes x 4 Ms; each point's chain, copies and layout.
expect 0 "grid-out full" -- "$recap" bench-gemm --grid-out "$tmp/full.json"
python3 - "$tmp/full.json" <<'EOF' || fail "the full grid is not the issue's"
import json, sys
pts = json.load(open(sys.argv[1]))["points"]
groups = {}
for p in pts:
    groups[p["group"]] = groups.get(p["group"], 0) + 1
assert groups == {"model": 19 * 14 * 3, "epilogue": 4 * 7 * 4 * 4, "dtype": 8 * 3 * 4}, groups
assert [p["id"] for p in pts] == list(range(len(pts)))
ms = sorted({p["m"] for p in pts if p["group"] == "model"})
assert ms == [2 ** i for i in range(14)], ms
assert sorted({p["m"] for p in pts if p["group"] != "model"}) == [1, 16, 256, 4096]
assert {p["dtype"] for p in pts if p["group"] == "model"} == {"bf16"}
assert {(p["dtype"], p["tf32"]) for p in pts if p["group"] == "dtype"} == {
    ("f16", False), ("f32", True), ("f32", False)}
acts = {(p["act"], p["bias"], p["residual"]) for p in pts if p["group"] == "epilogue"}
assert len(acts) == 28, acts
lm = [p for p in pts if p["label"].endswith("lm_head")]
assert {(p["n"], p["k"]) for p in lm} == {(128256, 2048), (128256, 4096), (152064, 3584)}
def stride(p):
    es = 4 if p["dtype"] == "f32" else 2
    r = lambda b: (b + 255) // 256 * 256
    s = r(p["m"] * p["k"] * es) + r(p["n"] * p["k"] * es) + r(p["m"] * p["n"] * es)
    s += r(p["n"] * es) if p["bias"] else 0
    s += r(p["m"] * p["n"] * es) if p["residual"] else 0
    return s
for p in pts:
    assert 1 <= p["copies"] <= p["chain"] <= 100, p
    if stride(p) < 50e6:  # fits in the H100's L2: cycled over >= 120 MB unless the chain is short
        assert p["copies"] * stride(p) >= 120e6 or p["copies"] == p["chain"], p
    else:
        assert p["copies"] == 1, p
    if p["dtype"] == "bf16" and p["m"] <= 16 and stride(p) <= 40e6:
        assert p["chain"] == 100, p  # small points: a chain of 100 per event pair
EOF

# A timed run of the tiny grid on the host backend.
expect 0 "tiny run" -- "$recap" bench-gemm --device host --json "$tmp/r1.json"
grep -q "smoke run" "$tmp/out" || fail "the host run does not say it is a smoke run"
expect 0 "tiny run 2" -- "$recap" bench-gemm --device host --grid tiny --json "$tmp/r2.json"
python3 - "$tmp" <<'EOF' || fail "tiny results malformed or peer files not made"
import json, math, sys
tmp = sys.argv[1]
for run in ("r1", "r2"):
    d = json.load(open("%s/%s.json" % (tmp, run)))
    assert d["side"] == "recap" and len(d["points"]) == 14, d.get("points")
    assert all(p["graph_us"] > 0 and p["eager_us"] > 0 for p in d["points"])
# Peer files with known ratios: recap/peer = f1[i] in pair 1 and f2[i] in pair 2. The peer's
# time is recap's divided by the ratio, so the compare must print exactly these ratios.
f1 = [1.25, 0.5, 1.0, 0.8, 1.1, 1.0, 1.01, 0.9, 1.05, 1.0, 1.0, 1.0, 1.3, 2.0]
f2 = [1.30, 0.5, 1.0, 0.8, 1.0, 1.0, 1.50, 0.9, 1.04, 1.0, 1.0, 1.0, 1.3, 2.0]
for run, f in (("r1", f1), ("r2", f2)):
    d = json.load(open("%s/%s.json" % (tmp, run)))
    d["side"] = "torch"
    d["settings"] = "made by the test"
    for p, r in zip(d["points"], f):
        p["graph_us"] /= r
        p["eager_us"] /= r
    json.dump(d, open("%s/p%s.json" % (tmp, run[1]), "w"))
# The expected summary, by hand: bf16 points are the first 13 (the last is f32).
pts = json.load(open("%s/r1.json" % tmp))["points"]
bf = [f1[i] for i, p in enumerate(pts) if p["dtype"] == "bf16"]
plain = [f1[i] for i, p in enumerate(pts)
         if p["dtype"] == "bf16" and p["act"] == "none" and not p["bias"] and not p["residual"]]
g = lambda v: math.exp(sum(map(math.log, v)) / len(v))
losses = [i for i in range(14) if f1[i] > 1.02 and f2[i] > 1.02]
noise = sorted(abs(f2[i] / f1[i] - 1) for i in range(14))
with open("%s/expected" % tmp, "w") as out:
    out.write("%-5s all %.3f; %.3f (%d)   no epilogue %.3f; %.3f (%d)\n" % ("bf16",
        g(bf), g(bf), len(bf), g(plain), g(plain), len(plain)))
    out.write("worst point: id 13 \n")
    out.write("losses %d %s\n" % (len(losses), " ".join(map(str, losses))))
    out.write("median %.2f%%, p90 %.2f%%\n" % (100 * noise[7], 100 * noise[int(0.9 * 13)]))
EOF

expect 0 "compare two pairs" -- "$recap" bench-gemm --recap "$tmp/r1.json,$tmp/r2.json" \
  --peer "$tmp/p1.json,$tmp/p2.json" --svg "$tmp/heat.svg" --losses "$tmp/losses.json" \
  --json "$tmp/cmp.json"
cp "$tmp/out" "$tmp/compare.txt"
want_geo=$(sed -n 1p "$tmp/expected")
grep -qF "  $want_geo" "$tmp/compare.txt" || fail "bf16 geomean line: want '$want_geo'"
grep -q "^worst point: id 13 .*ratio 2.000" "$tmp/compare.txt" || fail "worst point is not id 13"
read -r _ nloss loss_ids <<<"$(sed -n 3p "$tmp/expected")"
grep -q "every run pair): $nloss\$" "$tmp/compare.txt" || fail "want $nloss losses"
for id in $loss_ids; do
  grep -Eq "^ +$id .* LOSS\$" "$tmp/compare.txt" || fail "point $id is not marked LOSS"
done
grep -Eq "^ +4 .* LOSS\$" "$tmp/compare.txt" && fail "point 4 (1.1 then 1.0) is not a loss"
grep -qF "$(sed -n 4p "$tmp/expected")" "$tmp/compare.txt" || fail "noise line"
[ "$(grep -c 'class="cell"' "$tmp/heat.svg")" -eq 14 ] || fail "heat map: want 14 cells"
grep -q 'fill="#ff0000" stroke="white"><title>id 12: 1.300' "$tmp/heat.svg" ||
  fail "heat map: a 1.3 ratio is not saturated red"
grep -q 'fill="#00ff00" stroke="white"><title>id 1: 0.500' "$tmp/heat.svg" ||
  fail "heat map: a 0.5 ratio is not saturated green"
grep -q 'fill="#ffffff" stroke="white"><title>id 2: 1.000' "$tmp/heat.svg" ||
  fail "heat map: ratio 1 is not white"
python3 - "$tmp/losses.json" "$nloss" "$tmp/cmp.json" <<'EOF' || fail "losses or compare JSON"
import json, sys
pts = json.load(open(sys.argv[1]))["points"]
assert len(pts) == int(sys.argv[2]), pts
c = json.load(open(sys.argv[3]))
assert c["summary"]["losses"] == int(sys.argv[2]) and c["summary"]["worst_id"] == 13, c["summary"]
assert abs(c["summary"]["worst_ratio"] - 2.0) < 1e-9
EOF
# The losses file is a grid both sides re-run.
expect 0 "re-run the losses" -- "$recap" bench-gemm --device host --grid "$tmp/losses.json" \
  --json "$tmp/r3.json"
grep -q "grid losses.json, $nloss points" "$tmp/out" || fail "the losses grid did not run"

# Usage errors and mismatches.
expect 2 "--recap without --peer" -- "$recap" bench-gemm --recap "$tmp/r1.json"
expect 2 "unequal lists" -- "$recap" bench-gemm --recap "$tmp/r1.json,$tmp/r2.json" \
  --peer "$tmp/p1.json"
expect 2 "bad threshold" -- "$recap" bench-gemm --recap "$tmp/r1.json" --peer "$tmp/p1.json" \
  --threshold 0.5
expect 2 "--svg without compare" -- "$recap" bench-gemm --svg "$tmp/x.svg"
expect 2 "unknown grid" -- "$recap" bench-gemm --grid-out "$tmp/x.json" --grid huge
expect 1 "different grids" -- "$recap" bench-gemm --recap "$tmp/r3.json" --peer "$tmp/p1.json"
grep -q "do not hold the same points" "$tmp/err" || fail "mismatch message"
echo '{"points": [{"id": 0}]}' >"$tmp/bad.json"
expect 2 "malformed grid" -- "$recap" bench-gemm --device host --grid "$tmp/bad.json"
grep -q "field 'group'" "$tmp/err" || fail "malformed grid message does not name the field"

if [ "$failures" -ne 0 ]; then
  echo "bench_gemm_test: $failures failed"
  exit 1
fi
echo "bench_gemm_test: all checks passed"
