#!/usr/bin/env bash
# The `recap` command line end to end on the host backend: exit codes (0 ok, 1 failure,
# 2 usage), --help everywhere, strict flags, validate's FILE:LINE:COL errors, plan, ops, dot,
# run's JSON and .safetensors output (with the data checked by recomputing a spec in Python),
# bench's JSON and SVG, serve-bench with 4 workers and its JSON, and that the overlap pair of
# specs (timed against each other on the GPU by tools/gpu_run.sh) stays one computation.
set -uo pipefail
recap=$1
specs=specs # //specs:all, in the runfiles tree the test starts in
bad_specs=tests/data/bad_specs
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# expect CODE DESCRIPTION -- COMMAND...: runs it, keeps stdout/stderr in $tmp/out, $tmp/err.
expect() {
  local want=$1 what=$2
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    fail "$what: exit $got, expected $want ($*)"
    sed 's/^/    /' "$tmp/err" | head -20
  fi
}

check_json() { # FILE: parses as JSON
  python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$1" 2>>"$tmp/err" ||
    fail "$1 is not valid JSON"
}

# --help on every subcommand, usage errors.
for cmd in info validate plan ops dot run bench bench-ops bench-capture serve-bench; do
  expect 0 "$cmd --help" -- "$recap" "$cmd" --help
  grep -q "usage: recap $cmd" "$tmp/out" || fail "$cmd --help prints no usage line"
done
expect 0 "recap --help" -- "$recap" --help
expect 2 "no command" -- "$recap"
expect 2 "unknown command" -- "$recap" frobnicate
expect 2 "unknown flag" -- "$recap" run "$specs/fork_join.yaml" --bogus
grep -q -- "--bogus" "$tmp/err" || fail "the unknown flag is not named"
expect 2 "bad number" -- "$recap" bench "$specs/fork_join.yaml" --iters 3x
grep -q -- "--iters" "$tmp/err" || fail "the bad number's flag is not named"
expect 2 "negative number" -- "$recap" run "$specs/fork_join.yaml" --iters -1
expect 2 "missing value" -- "$recap" run "$specs/fork_join.yaml" --iters
expect 2 "bad mode" -- "$recap" run "$specs/fork_join.yaml" --mode fast
expect 2 "bad dim" -- "$recap" plan "$specs/mlp_decode.yaml" --dim B=3
expect 2 "unknown dim" -- "$recap" run "$specs/mlp_decode.yaml" --dim Q=3
expect 2 "no spec" -- "$recap" validate

# validate: every example is valid; a bad spec fails with positioned errors.
expect 0 "validate specs" -- "$recap" validate "$specs"/*.yaml
expect 1 "validate a bad spec" -- "$recap" validate "$bad_specs/dim_zero.yaml"
grep -qE "dim_zero.yaml:[0-9]+:[0-9]+: error: " "$tmp/err" || fail "no FILE:LINE:COL error"
expect 1 "validate a missing file" -- "$recap" validate "$tmp/no_such.yaml"
# Messages speak of the spec, not of recap's source: no function names or recap file:line,
# unless a developer asks for them with RECAP_ERROR_LOCATIONS=1.
grep -q "cannot open spec" "$tmp/err" || fail "validate of a missing file does not say why"
grep -qE "recap__|\.c:[0-9]+\)" "$tmp/err" && fail "a user-facing error names recap's code: $(cat "$tmp/err")"
expect 1 "validate a missing file, locations on" -- env RECAP_ERROR_LOCATIONS=1 "$recap" validate "$tmp/no_such.yaml"
grep -qE "recap__spec_load_file \(spec\.c:[0-9]+\): cannot open spec" "$tmp/err" ||
  fail "RECAP_ERROR_LOCATIONS=1 does not show where the error was raised"

# validate reads weight files' headers (not their data) and checks sizes against the spec's
# device when it knows its memory, and says what it could not check.
mkdir -p "$tmp/val"
python3 - "$tmp/val" <<'EOF'
import json, struct, sys
h = json.dumps({"w": {"dtype": "F32", "shape": [1024, 1024], "data_offsets": [0, 4 << 20]}}).encode()
open(sys.argv[1] + "/good.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + bytes(4 << 20))
open(sys.argv[1] + "/corrupt.safetensors", "wb").write(struct.pack("<Q", 1 << 20) + b"{")
EOF
for f in good corrupt; do
  cat >"$tmp/val/$f.yaml" <<EOF
device: host
tensors:
  x: {shape: [1, 1024], role: input}
  w: {shape: [1024, 1024], role: param, path: $f.safetensors}
ops:
  - {op: linear, in: [x, w], out: y}
EOF
done
expect 0 "validate a spec with a weights file" -- "$recap" validate "$tmp/val/good.yaml"
grep -q "sizes checked against host:0's" "$tmp/out" || fail "validate: no memory check reported"
grep -q "not checked: the data of 1 file" "$tmp/out" ||
  fail "validate: the file's data is not listed as unchecked"
expect 1 "validate a corrupt safetensors file" -- "$recap" validate "$tmp/val/corrupt.yaml"
grep -q "corrupt.yaml:4:47: error: .*safetensors header length" "$tmp/err" ||
  fail "validate: the corrupt header is not reported at the path (got: $(head -1 "$tmp/err"))"
# 4 MiB of params on a host capped at 1 MiB can never run.
expect 1 "validate params beyond the host cap" -- env RECAP_HOST_MEMORY_BYTES=1048576 \
  "$recap" validate "$tmp/val/good.yaml"
grep -q "good.yaml:4:3: error: tensor 'w' \[1024, 1024\] f32 needs 4194304 bytes, more than the device memory (1048576" \
  "$tmp/err" || fail "validate: params beyond the host cap not refused (got: $(head -1 "$tmp/err"))"
# A YAML escape that decodes to a terminal control sequence is refused at the string, and
# never printed raw.
printf '%s\n' 'name: "\e[2J\e[31mowned"' 'device: host' 'tensors: {x: {shape: [4], role: input}}' \
  'ops: [{op: relu, in: x, out: y}]' >"$tmp/val/escape.yaml"
expect 1 "validate a name with an escape sequence" -- "$recap" validate "$tmp/val/escape.yaml"
grep -q "escape.yaml:1:7: error: .*control character U+001B" "$tmp/err" ||
  fail "validate: the control character is not reported at the name"
cat "$tmp/out" "$tmp/err" | grep -q $'\e' && fail "validate printed a raw ESC byte"
# A CUDA spec on a machine without a GPU: the sizes cannot be checked, and validate says so.
if ! "$recap" info 2>/dev/null | grep -qE "^ *cuda:0 "; then
  expect 0 "validate a CUDA spec without a GPU" -- "$recap" validate "$specs/mlp_decode.yaml"
  grep -q "not checked: the sizes against cuda memory" "$tmp/out" ||
    fail "validate: unchecked device memory is not said"
fi

# The overlap pair, which tools/gpu_run.sh times against each other on the GPU, must stay one
# computation: the same file apart from the comments, the name and the `stream:` keys, with
# the branches on streams 1 and 2 in one and everything on stream 0 in the other.
same_ops() { grep -v -e '^#' -e '^name:' "$1" | sed 's/, stream: [0-9]*//'; }
diff <(same_ops "$specs/overlap_streams.yaml") <(same_ops "$specs/overlap_serial.yaml") \
  >/dev/null || fail "overlap_streams.yaml and overlap_serial.yaml differ beyond stream keys"
grep -q "stream: 1" "$specs/overlap_streams.yaml" && grep -q "stream: 2" "$specs/overlap_streams.yaml" ||
  fail "overlap_streams.yaml does not use side streams 1 and 2"
grep -v "^#" "$specs/overlap_serial.yaml" | grep -q "stream:" && fail "overlap_serial.yaml uses a side stream"

# ops lists the registry, without cuBLAS: the binary does not link it (it is opened on the
# first GEMM on a GPU; kernels/cuda_blas.h).
ldd "$recap" | grep -q cublas && fail "recap links cuBLAS: $(ldd "$recap" | grep cublas)"
expect 0 "ops" -- "$recap" ops
for op in matmul softmax linear attention; do
  grep -q "^$op\$" "$tmp/out" || fail "ops does not list $op"
done
grep -q "causal" "$tmp/out" || fail "ops shows no attributes"
# What a spec gets: an optional dtype attribute defaults to the spec's dtype, not f32; rope's
# positions and attention's len say their shapes and edge cases.
expect 0 "ops fill rope attention" -- "$recap" ops fill random_normal rope attention
[ "$(grep -cE "^ +dtype +dtype +spec's " "$tmp/out")" = 2 ] ||
  fail "ops: fill's and random_normal's dtype default is not the spec's"
grep -q "\[1\], a start" "$tmp/out" || fail "ops rope: the [1] form of positions is undocumented"
grep -q "len 0" "$tmp/out" && grep -q "is zeros" "$tmp/out" ||
  fail "ops attention: len 0 is undocumented"
expect 1 "ops with an unknown op" -- "$recap" ops sofmax
grep -q "softmax" "$tmp/err" || fail "no suggestion for a misspelt op"

# plan prints the totals.
expect 0 "plan" -- "$recap" plan "$specs/mlp_decode.yaml"
for word in "arena:" "naive:" "max live:"; do
  grep -q "$word" "$tmp/out" || fail "plan prints no '$word'"
done
expect 0 "plan of one bucket" -- "$recap" plan "$specs/mlp_decode.yaml" --dim B=2
# plan shows what the fusion pass fused; --no-fusion and RECAP_FUSION=0 turn it off.
expect 0 "plan fused" -- "$recap" plan "$specs/elementwise_chain.yaml"
grep -q "100 spec ops became" "$tmp/out" || fail "plan shows no fused ops"
grep -q "fused\[add,mul,tanh,scale," "$tmp/out" || fail "plan does not name the fused op"
expect 0 "plan unfused" -- "$recap" plan "$specs/elementwise_chain.yaml" --no-fusion
grep -q "fusion: off" "$tmp/out" || fail "plan --no-fusion still fuses"
expect 0 "plan RECAP_FUSION=0" -- env RECAP_FUSION=0 "$recap" plan "$specs/elementwise_chain.yaml"
grep -q "fusion: off" "$tmp/out" || fail "plan with RECAP_FUSION=0 still fuses"
# Boolean switches take 1/0, true/false, yes/no, on/off; anything else warns, naming the variable.
expect 0 "plan RECAP_FUSION=off" -- env RECAP_FUSION=off "$recap" plan "$specs/elementwise_chain.yaml"
grep -q "fusion: off" "$tmp/out" || fail "plan with RECAP_FUSION=off still fuses"
expect 0 "plan RECAP_FUSION=maybe" -- env RECAP_FUSION=maybe "$recap" plan "$specs/elementwise_chain.yaml"
grep -q "100 spec ops became" "$tmp/out" || fail "RECAP_FUSION=maybe did not keep the default (on)"
[ "$(grep -c "RECAP_FUSION='maybe'" "$tmp/err")" = 1 ] ||
  fail "RECAP_FUSION=maybe: no single warning naming the variable"

# dot: the DAG, and the captured graph.
expect 0 "dot" -- "$recap" dot "$specs/fork_join.yaml"
grep -q "^digraph" "$tmp/out" || fail "dot prints no digraph"
grep -q "wait" "$tmp/out" || fail "dot shows no cross-stream wait for fork_join"
expect 0 "dot --graph" -- "$recap" dot "$specs/elementwise_chain.yaml" --graph --device host
grep -q "digraph" "$tmp/out" || fail "dot --graph prints no digraph"

# run with JSON on the small specs.
for spec in elementwise_chain fork_join; do
  expect 0 "run $spec" -- "$recap" run "$specs/$spec.yaml" --device host --iters 2 --warmup 1 \
    --json --seed 5
  cp "$tmp/out" "$tmp/$spec.json"
  check_json "$tmp/$spec.json"
done
expect 0 "run eager" -- "$recap" run "$specs/fork_join.yaml" --device host --mode eager \
  --iters 1 --seed 5 --json
cp "$tmp/out" "$tmp/fork_join_eager.json"
# Same seed, same inputs: graph and eager agree.
python3 - "$tmp/fork_join.json" "$tmp/fork_join_eager.json" <<'EOF' || fail "run: graph and eager outputs differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["mode"] == "graph" and b["mode"] == "eager"
for x, y in zip(a["outputs"], b["outputs"]):
    assert x["shape"] == y["shape"] and abs(x["sum"] - y["sum"]) <= 1e-3 * max(1, abs(y["sum"])), (x, y)
EOF

# --save-tensors: a valid .safetensors file whose data reproduces the output.
expect 0 "run --save-tensors" -- "$recap" run "$specs/elementwise_chain.yaml" --device host \
  --iters 1 --warmup 0 --seed 9 --save-tensors "$tmp/chain.safetensors"
python3 - "$tmp/chain.safetensors" <<'EOF' || fail "--save-tensors: bad file or wrong data"
import json, math, struct, sys
blob = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
header = json.loads(blob[8:8 + n])
data = blob[8 + n:]
entries = sorted((v["data_offsets"], k) for k, v in header.items() if k != "__metadata__")
pos = 0
for (begin, end), name in entries:
    assert begin == pos, f"{name} starts at {begin}, expected {pos}"
    pos = end
assert pos == len(data), f"data_offsets cover {pos} bytes of {len(data)}"
for k in ("x", "bias", "gain", "y"):
    assert header[k]["dtype"] == "F32" and header[k]["shape"] == [4096], header[k]
def tensor(name):
    b, e = header[name]["data_offsets"]
    return struct.unpack(f"<{(e - b) // 4}f", data[b:e])
x, bias, gain, y = (tensor(k) for k in ("x", "bias", "gain", "y"))
assert any(v != 0 for v in x), "inputs are all zero"
h = list(x)
for step in range(25):  # the spec: (add bias, mul gain, tanh, scale 1.5) x 25
    h = [1.5 * math.tanh((v + b) * g) for v, b, g in zip(h, bias, gain)]
worst = max(abs(a - b) for a, b in zip(h, y))
assert worst < 1e-4, f"y differs from the recomputation by {worst}"
EOF

# bench with JSON and SVG.
expect 0 "bench" -- "$recap" bench "$specs/elementwise_chain.yaml" --device host --iters 3 \
  --warmup 1 --json "$tmp/bench.json" --svg "$tmp/bench.svg"
check_json "$tmp/bench.json"
python3 - "$tmp/bench.json" <<'EOF' || fail "bench JSON lacks fields"
import json, sys
d = json.load(open(sys.argv[1]))
for mode in ("eager", "graph"):
    for key in ("median_ms", "p10_ms", "p90_ms", "launches_per_iter"):
        assert key in d[mode], (mode, key)
    assert len(d[mode]["samples_ms"]) == 3
# Fusion (on by default) makes the 100 ops one kernel.
assert d["fused_ops"] == 100 and d["eager"]["launches_per_iter"] == 1, d["eager"]
assert d["graph"]["launches_per_iter"] == 1
for key in ("speedup", "setup", "memory"):
    assert key in d, key
EOF
head -c 4 "$tmp/bench.svg" | grep -q "<svg" || fail "the SVG does not start with <svg"
grep -q "graph replay" "$tmp/bench.svg" || fail "the SVG has no labels"
expect 0 "bench --no-fusion" -- "$recap" bench "$specs/elementwise_chain.yaml" --device host \
  --iters 2 --warmup 1 --no-fusion --json "$tmp/bench_unfused.json"
python3 - "$tmp/bench_unfused.json" <<'EOF' || fail "bench --no-fusion still fuses"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["fused_ops"] == 0 and d["eager"]["launches_per_iter"] == 100, d["eager"]
EOF

# bench --rotate: K instances with their own params; auto follows tools/peer_torch.py's rule
# (fork_join holds 32 MiB of params + inputs: 200 MB needs 6 copies).
expect 0 "bench --rotate auto" -- "$recap" bench "$specs/fork_join.yaml" --device host --iters 4 \
  --warmup 1 --rotate auto --json "$tmp/bench_rot.json"
grep -q "rotation: 6 instances" "$tmp/out" || fail "bench --rotate auto does not say it rotates"
python3 - "$tmp/bench_rot.json" <<'EOF' || fail "bench --rotate: wrong rotation or memory fields"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["rotate"] == 6, d["rotate"]
assert -(-200e6 // d["rotate_set_bytes"]) == 6, d["rotate_set_bytes"]
m = d["memory"]
assert m["graph_bytes"] == m["pool_reserved_bytes"] >= m["arena_bytes"] > 0, m
assert d["graph_vs_eager"]["mismatches"] == 0
EOF
expect 0 "bench --rotate 2" -- "$recap" bench "$specs/elementwise_chain.yaml" --device host \
  --iters 2 --warmup 0 --rotate 2 --json "$tmp/bench_rot2.json"
python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["rotate"] == 2' \
  "$tmp/bench_rot2.json" || fail "bench --rotate 2 did not rotate over 2 instances"
expect 2 "bench --rotate 0" -- "$recap" bench "$specs/fork_join.yaml" --rotate 0
expect 2 "bench --rotate x" -- "$recap" bench "$specs/fork_join.yaml" --rotate x

# bench-ops and bench-capture: the host backend runs their CI-sized smoke modes.
expect 0 "bench-ops" -- "$recap" bench-ops --device host --iters 2 --json "$tmp/ops.json"
grep -q "smoke run" "$tmp/out" || fail "bench-ops does not say that the host run is a smoke run"
python3 - "$tmp/ops.json" <<'EOF' || fail "bench-ops JSON lacks ops or fields"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["smoke"] is True and d["device"] == "host" and d["iters"] == 2, d
ops = {(r["op"], r["dtype"]): r for r in d["ops"]}
for dt in ("f32", "bf16"):
    for op in ("memcpy_d2d", "copy", "relu", "gelu", "silu", "add", "mul", "softmax",
               "layernorm", "rmsnorm"):
        r = ops[(op, dt)]
        assert r["median_us"] > 0 and r["gbps"] > 0 and r["bytes"] > 0, r
        assert r["ceiling_gbps"] == d["copy_gbps"][dt] > 0, r
    assert ops[("relu", dt)]["kind"] == "bandwidth" and ops[("relu", dt)]["target_met"] is None
gemms = {(g["dtype"], g["m"]) for g in d["gemm"]}
assert gemms == {("bf16", 64), ("f16", 64), ("bf16", 128), ("f16", 128)}, gemms
assert all(g["tflops"] > 0 and g["flops"] == 2 * g["m"] ** 3 for g in d["gemm"])
assert d["summary"]["bandwidth_targets"] == 16
EOF
expect 0 "bench-ops --elements --gemm" -- "$recap" bench-ops --device host --elements 8192 \
  --iters 1 --gemm 32
expect 2 "bench-ops --elements not a multiple of 4096" -- "$recap" bench-ops --elements 5000
expect 2 "bench-ops --gemm malformed" -- "$recap" bench-ops --gemm 32,,64
expect 2 "bench-ops positional" -- "$recap" bench-ops "$specs/fork_join.yaml"
expect 0 "bench-capture" -- "$recap" bench-capture --device host --ops 40 --repeats 2 \
  --bucket-spec "$specs/transformer_block.yaml" --json "$tmp/capture.json"
python3 - "$tmp/capture.json" <<'EOF' || fail "bench-capture JSON lacks fields or updates"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["smoke"] is True and d["device"] == "host"
c, u, b, cpu = d["capture"], d["update"], d["buckets"], d["cpu"]
assert c["ops"] == 40 and c["graph_nodes"] == 40 and c["capture_ms"] > 0, c
assert c["target"]["target_ms"] == 50 and isinstance(c["target"]["met"], bool), c
# Every rebind was applied to the executable in place.
assert u["rebinds"] == 4 and u["in_place_updates"] == 4 and u["reinstantiations"] == 0, u
assert u["target"]["target_ms"] == 5, u
assert b["buckets"] == 2 and b["captures"] == 2 and b["target"]["target_ms"] == 1000, b
assert cpu["op_launch_us"] > 0 and cpu["eager_pipeline_per_op_us"] > 0, cpu
assert cpu["replay_call_us"] > 0 and cpu["replay_graph_nodes"] == 40, cpu
EOF
expect 2 "bench-capture --ops 1" -- "$recap" bench-capture --ops 1
# Buckets: the engine's one limit (RECAP_MAX_BUCKETS, 256), refused as a usage error up front.
expect 2 "bench-capture --buckets 257" -- "$recap" bench-capture --device host --buckets 257
grep -q -- "--buckets" "$tmp/err" && grep -q "256" "$tmp/err" ||
  fail "bench-capture --buckets 257: the flag and the limit are not named ($(cat "$tmp/err"))"
expect 1 "bench-capture of a missing bucket spec" -- "$recap" bench-capture --device host \
  --ops 4 --repeats 1 --bucket-spec "$tmp/no_such.yaml"

# serve-bench: 4 workers, every result checked.
expect 0 "serve-bench" -- "$recap" serve-bench "$specs/mlp_decode.yaml" --device host \
  --threads 4 --requests 200 --dim H=256 --seed 3 --json "$tmp/serve.json"
grep -q "0 mismatches" "$tmp/out" || fail "serve-bench did not check every result"
check_json "$tmp/serve.json"
python3 - "$tmp/serve.json" <<'EOF' || fail "serve-bench JSON lacks fields or checks"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["threads"] == 4 and d["requests"] == 200 and d["served"] == 200, d
assert d["checked"] == 200 and d["mismatches"] == 0 and d["ok"] is True, d
assert d["requests_per_s"] > 0 and d["latency"]["p99_ms"] >= d["latency"]["p50_ms"] > 0, d
EOF
grep -q "requests/s" "$tmp/out" || fail "serve-bench prints no throughput"
grep -q "p99" "$tmp/out" || fail "serve-bench prints no p99"
expect 2 "serve-bench batch too large" -- "$recap" serve-bench "$specs/mlp_decode.yaml" \
  --batch-max 9

# --base-dir: a spec's files must lie under the folder; one that reaches out with .. is refused
# by every subcommand that loads specs, and the same spec without the flag still loads.
mkdir -p "$tmp/base/specs" "$tmp/outside"
head -c 64 /dev/zero >"$tmp/base/specs/w.bin"
cp "$tmp/base/specs/w.bin" "$tmp/outside/w.bin"
for where in inside outside; do
  wpath=w.bin
  [ "$where" = outside ] && wpath=../../outside/w.bin
  cat >"$tmp/base/specs/$where.yaml" <<EOF
name: base-dir-$where
device: host
dtype: f32
tensors:
  x: {shape: [4, 4], role: input}
  w: {shape: [4, 4], role: param, path: $wpath}
ops:
  - {op: add, in: [x, w], out: y}
outputs: [y]
EOF
done
expect 0 "validate under --base-dir" -- "$recap" validate "$tmp/base/specs/inside.yaml" \
  --base-dir "$tmp/base"
expect 0 "run under --base-dir" -- "$recap" run "$tmp/base/specs/inside.yaml" --iters 1 \
  --warmup 0 --base-dir "$tmp/base"
expect 0 "a spec reaching out without --base-dir" -- "$recap" validate \
  "$tmp/base/specs/outside.yaml"
for cmd in validate plan run bench dot; do
  expect 1 "$cmd of a spec reaching out of --base-dir" -- "$recap" "$cmd" \
    "$tmp/base/specs/outside.yaml" --base-dir "$tmp/base"
  grep -q "outside.yaml:6:41: error: .*escapes the base directory" "$tmp/err" ||
    fail "$cmd: the escape is not reported at the path (got: $(head -1 "$tmp/err"))"
done
expect 1 "serve-bench of a spec reaching out of --base-dir" -- "$recap" serve-bench \
  "$tmp/base/specs/outside.yaml" --base-dir "$tmp/base" --requests 1
expect 2 "--base-dir without a value" -- "$recap" validate "$tmp/base/specs/inside.yaml" \
  --base-dir

# memviz: a real snapshot (run --memory-snapshot) drawn as an SVG with segments and a legend;
# malformed snapshots exit 1 naming the problem.
expect 0 "memviz --help" -- "$recap" memviz --help
grep -q "usage: recap memviz" "$tmp/out" || fail "memviz --help prints no usage line"
expect 0 "run --memory-snapshot" -- "$recap" run "$specs/fork_join.yaml" --iters 1 --warmup 0 \
  --seed 1 --memory-snapshot "$tmp/snap.json"
check_json "$tmp/snap.json"
expect 0 "memviz --svg" -- "$recap" memviz "$tmp/snap.json" --svg "$tmp/snap.svg"
grep -q "private pool" "$tmp/out" || fail "memviz prints no private pool (graph mode)"
python3 - "$tmp/snap.svg" <<'PY' 2>>"$tmp/err" || fail "memviz SVG: $(tail -1 "$tmp/err")"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
segments = [g for g in root.iter(ns + "g") if g.get("class") == "segment"]
assert len(segments) >= 2, f"{len(segments)} segments drawn"
assert all(len(g.findall(ns + "rect")) >= 3 for g in segments), "a segment without blocks"
legend = [g for g in root.iter(ns + "g") if g.get("id") == "legend"]
text = "".join(legend[0].itertext()) if legend else ""
for word in ("allocated", "free (cached)", "stream"):
    assert word in text, f"legend lacks {word!r}"
PY
printf '{"device": {"backend": "cuda", "index": 0}, "segments": [' >"$tmp/trunc.json"
expect 1 "memviz of truncated JSON" -- "$recap" memviz "$tmp/trunc.json" --svg "$tmp/x.svg"
grep -q "trunc.json:1:.*not valid JSON" "$tmp/err" || fail "truncated JSON: $(head -1 "$tmp/err")"
[ ! -e "$tmp/x.svg" ] || fail "memviz wrote an SVG for a malformed snapshot"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["segments"][0]["blocks"][0]["size"]=-1
json.dump(d, open(sys.argv[2], "w"))' "$tmp/snap.json" "$tmp/negative.json"
expect 1 "memviz of a negative block size" -- "$recap" memviz "$tmp/negative.json"
grep -q "segments\[0\].blocks\[0\].size: -1 is out of range" "$tmp/err" ||
  fail "negative size: $(head -1 "$tmp/err")"
echo '{"device": {"backend": "cuda", "index": 0}}' >"$tmp/nosegs.json"
expect 1 "memviz without segments" -- "$recap" memviz "$tmp/nosegs.json"
grep -q "segments: missing" "$tmp/err" || fail "no segments: $(head -1 "$tmp/err")"
expect 1 "memviz of a missing file" -- "$recap" memviz "$tmp/no_such.json"
expect 2 "memviz without a file" -- "$recap" memviz

# launch: one rank on the host backend runs the spec and reports its exit; a world of 2 on
# the host is a clear failure of both ranks (reported, not hung); launch's own flags.
expect 0 "launch --help" -- "$recap" launch --help
grep -q "the timeout + 5" "$tmp/out" || fail "launch --help does not give --grace's default"
expect 0 "launch 1 host rank" -- "$recap" launch --gpus 1 -- run "$specs/tp_mlp.yaml" \
  --device host --iters 2 --warmup 1
grep -q "rank 0: exit 0" "$tmp/out" || fail "launch did not report rank 0's exit"
grep -q "rank 0 of 1" "$tmp/out" || fail "the rank printed no summary"
expect 1 "launch 2 host ranks" -- "$recap" launch --gpus 2 --timeout 20 -- run \
  "$specs/tp_mlp.yaml" --device host --iters 2
grep -q "rank 1: exit 1" "$tmp/out" || fail "launch did not report rank 1's failure"
grep -qi "host" "$tmp/err" || fail "no message says the host backend is a world of 1"
expect 2 "launch without run" -- "$recap" launch --gpus 1
expect 2 "launch setting --rank" -- "$recap" launch --gpus 1 -- run "$specs/tp_mlp.yaml" --rank 0

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all CLI checks passed"
