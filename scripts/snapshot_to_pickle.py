#!/usr/bin/env python3
"""Converts a recap allocator snapshot (JSON) to the pickle torch.cuda.memory._dump_snapshot
writes, so PyTorch's viewers read it:

    recap run spec.yaml --memory-snapshot snap.json
    scripts/snapshot_to_pickle.py snap.json snap.pickle
    python -m torch.cuda._memory_viz stats snap.pickle    # or drop it on pytorch.org/memory_viz

Reads recap's current format (PyTorch's key names already) and its first one ("pool_id",
"expandable", no per-segment "device"); docs/ALLOCATOR.md has the mapping. The pickle holds
what torch.cuda.memory._snapshot() returns: "segments" and "device_traces". recap's own extras
(the "device" object, "pools", "memory_stats", a segment's "reserved_address_space") are left
out: PyTorch's snapshot has no place for them. Only the standard library is needed (no torch).
Exits 1 with a message naming the file and the JSON path of the problem.
"""
import json
import pickle
import sys

SEGMENT_KEYS = ("device", "address", "total_size", "allocated_size", "active_size",
                "requested_size", "stream", "segment_type", "segment_pool_id", "is_expandable",
                "frames", "blocks")
BLOCK_KEYS = ("address", "size", "requested_size", "state", "frames")
STATES = ("active_allocated", "active_pending_free", "inactive")


class SnapshotError(Exception):
    pass


def _whole(value, path):
    # bool is an int in Python; JSON's true is not a size.
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise SnapshotError(f"{path}: expected a non-negative whole number, got {value!r}")
    return value


def _get(obj, key, path):
    if not isinstance(obj, dict):
        raise SnapshotError(f"{path}: expected an object")
    if key not in obj:
        raise SnapshotError(f"{path + '.' if path else ''}{key}: missing")
    return obj[key]


def _pool_id(seg, path):
    """PyTorch's (capture id, pool id) pair; recap's first format had a bare pool id."""
    if "segment_pool_id" in seg:
        pair = seg["segment_pool_id"]
        if not isinstance(pair, list) or len(pair) != 2:
            raise SnapshotError(f"{path}.segment_pool_id: expected a pair of whole numbers")
        return tuple(_whole(x, f"{path}.segment_pool_id") for x in pair)
    return (0, _whole(_get(seg, "pool_id", path), f"{path}.pool_id"))


def _block(b, path):
    state = _get(b, "state", path)
    if state not in STATES:
        raise SnapshotError(f"{path}.state: {state!r} is not one of {', '.join(STATES)}")
    out = {k: _whole(_get(b, k, path), f"{path}.{k}")
           for k in ("address", "size", "requested_size")}
    out["state"] = state
    out["frames"] = list(b.get("frames", []))
    return {k: out[k] for k in BLOCK_KEYS}


def _segment(seg, device, path):
    out = {k: _whole(_get(seg, k, path), f"{path}.{k}")
           for k in ("address", "total_size", "allocated_size", "active_size", "requested_size",
                     "stream")}
    out["device"] = _whole(seg.get("device", device), f"{path}.device")
    kind = _get(seg, "segment_type", path)
    if kind not in ("small", "large"):
        raise SnapshotError(f"{path}.segment_type: expected \"small\" or \"large\"")
    out["segment_type"] = kind
    out["segment_pool_id"] = _pool_id(seg, path)
    expandable = seg.get("is_expandable", seg.get("expandable", False))
    if not isinstance(expandable, bool):
        raise SnapshotError(f"{path}.is_expandable: expected true or false")
    out["is_expandable"] = expandable
    out["frames"] = list(seg.get("frames", []))
    blocks = _get(seg, "blocks", path)
    if not isinstance(blocks, list) or not blocks:
        raise SnapshotError(f"{path}.blocks: expected a non-empty array")
    out["blocks"] = [_block(b, f"{path}.blocks[{i}]") for i, b in enumerate(blocks)]
    # _memory_viz.py's stats view asserts that the blocks fill the segment exactly.
    if sum(b["size"] for b in out["blocks"]) != out["total_size"]:
        raise SnapshotError(f"{path}.blocks: the sizes do not add up to total_size")
    return {k: out[k] for k in SEGMENT_KEYS}


def to_torch(snapshot):
    """The dict torch.cuda.memory._snapshot() would return for this recap snapshot."""
    if not isinstance(snapshot, dict):
        raise SnapshotError("(top): expected an object")
    device = 0
    if "device" in snapshot:
        device = _whole(_get(snapshot["device"], "index", "device"), "device.index")
    segments = _get(snapshot, "segments", "")
    if not isinstance(segments, list):
        raise SnapshotError("segments: expected an array")
    out = [_segment(s, device, f"segments[{i}]") for i, s in enumerate(segments)]
    # One (empty) event list per device up to the highest one named: recap records no trace.
    devices = max([device] + [s["device"] for s in out])
    traces = snapshot.get("device_traces", [[] for _ in range(devices + 1)])
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotError("device_traces: expected an array of arrays")
    return {"segments": out, "device_traces": traces}


def main(argv):
    if len(argv) != 3 or argv[1] in ("-h", "--help"):
        print("usage: snapshot_to_pickle.py SNAPSHOT.json OUT.pickle", file=sys.stderr)
        return 2
    src, dst = argv[1], argv[2]
    try:
        with open(src, encoding="utf-8") as f:
            data = to_torch(json.load(f))
    except (OSError, ValueError, SnapshotError) as e:
        print(f"snapshot_to_pickle: {src}: {e}", file=sys.stderr)
        return 1
    try:
        with open(dst, "wb") as f:
            pickle.dump(data, f)
    except OSError as e:
        print(f"snapshot_to_pickle: {dst}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
