#!/bin/bash
# memviz_formats_test.sh: recap's allocator snapshot in PyTorch's format (docs/ALLOCATOR.md,
# "Snapshots and stats in PyTorch's format"), read back by `recap memviz` in all three spellings
# (recap's first format, the current one, one PyTorch wrote), and converted by
# scripts/snapshot_to_pickle.py into the pickle PyTorch's memory_viz tools load.
# Usage: memviz_formats_test.sh RECAP SPEC.yaml V1.json PYTORCH.json CONVERTER.py
set -uo pipefail
recap=$1 spec=$2 v1=$3 pytorch=$4 converter=$5
tmp=${TEST_TMPDIR:-$(mktemp -d)}
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

expect() { # WANT WHAT -- CMD...: CMD exits WANT (output in $tmp/out, $tmp/err)
  local want=$1 what=$2
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    fail "$what: exit $got, expected $want ($*)"
    sed 's/^/    /' "$tmp/err" | head -20
  fi
}

# The current format, from a graph-mode run (a private pool and the default one).
expect 0 "run --memory-snapshot" -- "$recap" run "$spec" --device host --mode graph --iters 1 \
  --warmup 0 --seed 1 --memory-snapshot "$tmp/snap.json"
python3 - "$tmp/snap.json" <<'PY' 2>>"$tmp/err" || fail "snapshot keys: $(tail -1 "$tmp/err")"
import json, sys
d = json.load(open(sys.argv[1]))
assert {"segments", "device_traces", "memory_stats"} <= d.keys(), sorted(d)
assert d["device_traces"] == [[]], d["device_traces"]
seg_keys = {"device", "address", "total_size", "allocated_size", "active_size", "requested_size",
            "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"}
segs = d["segments"]
assert any(s["segment_pool_id"] != [0, 0] for s in segs), "no private pool in graph mode"
for s in segs:
    assert seg_keys <= s.keys(), sorted(seg_keys - s.keys())
    assert "pool_id" not in s and "expandable" not in s, "first-format keys written"
    assert s["device"] == 0 and s["segment_pool_id"][0] == 0
    for b in s["blocks"]:
        assert {"address", "size", "requested_size", "state", "frames"} <= b.keys(), b
# torch.cuda.memory_stats()'s flat keys, and the numbers agree with the segments.
st = d["memory_stats"]
for stat in ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
             "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes"):
    for pool in ("all", "small_pool", "large_pool"):
        for metric in ("current", "peak", "allocated", "freed"):
            assert f"{stat}.{pool}.{metric}" in st, f"{stat}.{pool}.{metric}"
for key in ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
            "num_device_free", "max_split_size"):
    assert key in st, key
assert st["max_split_size"] == -1, st["max_split_size"]
blocks = [b for s in segs for b in s["blocks"]]
assert st["segment.all.current"] == len(segs)
assert st["reserved_bytes.all.current"] == sum(s["total_size"] for s in segs)
assert st["allocation.all.current"] == sum(b["state"] == "active_allocated" for b in blocks)
small = [s for s in segs if s["segment_type"] == "small"]
assert st["reserved_bytes.small_pool.current"] == sum(s["total_size"] for s in small)
assert st["reserved_bytes.all.peak"] >= st["reserved_bytes.all.current"]
PY

# memviz reads the current format, recap's first one (kept in tests/data) and PyTorch's.
expect 0 "memviz of the current format" -- "$recap" memviz "$tmp/snap.json" --svg "$tmp/new.svg"
grep -q "host:0, 4 segments, 7 blocks, reserved 40.0 MiB" "$tmp/out" &&
  grep -q "private pool 1" "$tmp/out" || fail "current format: $(head -3 "$tmp/out")"
expect 0 "memviz of the first format" -- "$recap" memviz "$v1" --svg "$tmp/v1.svg"
grep -q "host:0, 4 segments, 7 blocks, reserved 40.0 MiB" "$tmp/out" &&
  grep -q "private pool 1" "$tmp/out" || fail "first format: $(head -3 "$tmp/out")"
expect 0 "memviz of PyTorch's format" -- "$recap" memviz "$pytorch" --svg "$tmp/pt.svg"
# Its segments are listed out of address order, on device 0, one in a capture's pool (1, 0).
grep -q "cuda:0, 2 segments, 5 blocks, reserved 22.0 MiB, allocated 4.0 MiB" "$tmp/out" &&
  grep -q "private pool 1: 1 segment" "$tmp/out" || fail "PyTorch format: $(head -3 "$tmp/out")"
grep -q "</svg>" "$tmp/pt.svg" || fail "no SVG drawn for the PyTorch snapshot"

# What memviz refuses in PyTorch's format names the place.
mutate() { # OUT PYTHON-STATEMENT on d (the PyTorch snapshot)
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); $2
json.dump(d, open(sys.argv[2], 'w'))" "$pytorch" "$1"
}
mutate "$tmp/two_devices.json" 'd["segments"][1]["device"] = 1'
expect 1 "memviz of two devices" -- "$recap" memviz "$tmp/two_devices.json"
grep -q "segments\[1\].device: device 1, but segments\[0\] is on device 0" "$tmp/err" ||
  fail "two devices: $(head -1 "$tmp/err")"
mutate "$tmp/pair.json" 'd["segments"][0]["segment_pool_id"] = [1, 2]'
expect 1 "memviz of a pool id pair" -- "$recap" memviz "$tmp/pair.json"
grep -q "segments\[0\].segment_pool_id: one of the two ids should be 0" "$tmp/err" ||
  fail "pool id pair: $(head -1 "$tmp/err")"
mutate "$tmp/overlap.json" 'd["segments"][0]["address"] -= 1; [b.__setitem__("address", b["address"] - 1) for b in d["segments"][0]["blocks"]]'
expect 1 "memviz of overlapping segments" -- "$recap" memviz "$tmp/overlap.json"
grep -q "segments: the segment at 0x7f00001fffff overlaps the one at 0x7f0000000000" "$tmp/err" ||
  fail "overlap: $(head -1 "$tmp/err")"

# The converter: every spelling becomes the dict torch.cuda.memory._snapshot() returns, and
# the pickle loads back to it with every key torch/cuda/_memory_viz.py reads.
for name in snap v1 pytorch; do
  case $name in
    snap) src=$tmp/snap.json ;;
    v1) src=$v1 ;;
    pytorch) src=$pytorch ;;
  esac
  expect 0 "snapshot_to_pickle $name" -- python3 "$converter" "$src" "$tmp/$name.pickle"
  python3 - "$converter" "$src" "$tmp/$name.pickle" <<'PY' 2>>"$tmp/err" ||
import importlib.util, json, pickle, sys
spec = importlib.util.spec_from_file_location("snapshot_to_pickle", sys.argv[1])
conv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(conv)
src = json.load(open(sys.argv[2]))
data = pickle.load(open(sys.argv[3], "rb"))
assert data == conv.to_torch(src), "the pickle does not load back to the converted dict"
assert set(data) == {"segments", "device_traces"}, sorted(data)
assert len(data["segments"]) == len(src["segments"])
# The keys _memory_viz.py reads: segments(), memory(), compare(), segsum(), trace().
for seg in data["segments"]:
    for key in ("stream", "address", "total_size", "allocated_size", "blocks", "device",
                "segment_type", "segment_pool_id", "is_expandable", "frames"):
        assert key in seg, key
    assert isinstance(seg["segment_pool_id"], tuple) and len(seg["segment_pool_id"]) == 2
    # segsum asserts that free and allocated bytes add up to the segment.
    allocated = sum(b["requested_size"] for b in seg["blocks"] if b["state"] == "active_allocated")
    internal = sum(b["size"] - b["requested_size"] for b in seg["blocks"]
                   if b["state"] == "active_allocated")
    external = sum(b["size"] for b in seg["blocks"] if b["state"] != "active_allocated")
    assert allocated + internal + external == seg["total_size"]
    for b in seg["blocks"]:
        for key in ("state", "size", "requested_size", "frames", "address"):
            assert key in b, key
        for f in b["frames"]:
            assert {"filename", "line", "name"} <= f.keys()
assert isinstance(data["device_traces"], list)
for trace in data["device_traces"]:
    for e in trace:
        assert {"action", "addr", "size"} <= e.keys()
# A snapshot already in PyTorch's format passes through unchanged (pairs become tuples).
if "pool_id" not in src["segments"][0] and "device" not in src:
    for seg in src["segments"]:
        seg["segment_pool_id"] = tuple(seg["segment_pool_id"])
    assert data["segments"] == src["segments"]
    assert data["device_traces"] == src["device_traces"]
PY
    fail "pickle of $name: $(tail -1 "$tmp/err")"
done
echo '{"device": {"backend": "host", "index": 0}}' >"$tmp/nosegs.json"
expect 1 "snapshot_to_pickle without segments" -- python3 "$converter" "$tmp/nosegs.json" \
  "$tmp/x.pickle"
grep -q "nosegs.json: segments: missing" "$tmp/err" || fail "no segments: $(head -1 "$tmp/err")"
[ ! -e "$tmp/x.pickle" ] || fail "snapshot_to_pickle wrote a pickle for a bad snapshot"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all memviz format checks passed"
