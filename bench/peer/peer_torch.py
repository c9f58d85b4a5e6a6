#!/usr/bin/env python3
"""peer_torch.py: runs a recap spec's pipeline in PyTorch, with recap's exact semantics, as
the peer that recap's numbers are compared with (issue 6, "The peer harness").

    peer_torch.py SPEC --tensors RUN.safetensors [--iters N] [--warmup N] [--rotate K|auto]
                  [--json OUT] [--floors | --floors-from FLOORS.json] [--device cuda|cpu]
                  [--dim NAME=VALUE ...] [--attention sdpa|explicit] [--no-graph]
                  [--compile | --compile-only]
    peer_torch.py --floors [--json OUT]          # the hardware floors only

What it does, in order:
  1. Parses the spec (PyYAML), resolves its dims (--dim overrides; otherwise the sizes of the
     tensors in the file fix them, so the bucket recap ran is the one compared).
  2. Loads the params, inputs, states and scalars that `recap run --save-tensors` wrote, by
     their spec names, and recap's outputs (same file, by output name).
  3. Builds the pipeline from PyTorch ops with recap's semantics (kernels/cuda_ops.h): erf vs
     tanh gelu, eps, softmax scale and causal mask (j > i + cols - rows masked, an all-masked
     row gives 0), attention [B, H, S, Dh] with a device-resident valid length and grouped kv
     heads, rope (rotate-half, angle in double), kv_append at a position read from a device
     tensor (index_copy_, so a captured graph needs no update), linear = act(x W^T + b).
     Ops with `stream: N` run on side streams with event waits, as recap's engine does.
     PyTorch keeps its own idioms where they are free: reshape/permute/slice/split are views,
     linear and its activation are two kernels (PyTorch's unfused baseline).
  4. Checks its outputs against recap's: max |torch - recap| / max |recap| within 1e-4 (f32),
     2e-3 (f16), 2e-2 (bf16). Outputs that depend on a random op are not comparable value-wise
     (different generators): they are skipped and listed as such.
  5. Times eager execution and torch.cuda.CUDAGraph replay: warmup 3 iterations on a side
     stream, then capture on that same stream (PyTorch's documented recipe; capturing on the
     warmed stream keeps cuBLAS's per-stream workspace out of the graph's pool), one CUDA event
     pair per iteration, waiting for each iteration's end event before the next as `recap
     bench` does (cli_time_runs), median/p10/p90 in microseconds.
  6. Graph memory, one method: synchronize, gc, torch.cuda.empty_cache(), read
     torch.cuda.memory_reserved(); capture; read it again. The difference is what the capture's
     private pool reserved: the same definition as recap's "pool bytes" (the private pool's
     reserved bytes after capture).

--rotate K makes K copies of every param, input, state and scalar; eager iterations cycle
through them and the graph mode captures K graphs (sharing one pool) and replays them in turn,
so a pipeline whose data fits the 50 MB L2 is not timed L2-warm. `auto` picks K so that the
copies together hold >= 200 MB when one set is between 1 MB and 200 MB, else 1 (launch-bound
pipelines on a few KB gain nothing from it). recap's side should do the same: K pipeline
instances with their own params/inputs/states, one graph each in one shared pool, replayed
round-robin with one event pair per replay; its pool bytes are reported for one instance.

--floors measures, in the same process: device-to-device copy bandwidth (a 1 GiB tensor
copy, bytes read + written over time, median of 20), the matmul rate at 8192^3 (random data,
median of 10; bf16 as the issue asks, plus f16 and f32 for specs of those types), and the
per-node cost of an empty-kernel graph (slope between graphs of 1 and 1000 tiny kernels).
Per spec, floor = max(nodes x node cost, min bytes / copy bandwidth, GEMM FLOPs / matmul
rate); min bytes = every param/input/state/scalar the ops read, once, plus every output,
once; GEMM FLOPs = 2 M N K per linear/matmul and attention's two GEMMs over the (query, key)
pairs its mask leaves visible.

What this expects from `recap run --save-tensors FILE` (the lead reconciles the names):
  - a standard .safetensors file (8-byte little-endian header length, JSON header, data);
  - every param and input under its spec name, holding the values the run used (what
    cli/run.c writes today); scalars and states it leaves out start from their spec
    init (value / zeros / ones; a random init is an error). A state saved in the file is used
    as the state before the run (after it also works when the run is idempotent, e.g.
    kv_append at a fixed pos);
  - every output under its spec name (also accepted: "outputs/NAME", "output/NAME",
    "out/NAME", "outputs.NAME", "output:NAME");
  - optionally "__metadata__": {"dims": "{\"B\": 8}"} (a JSON string, as safetensors metadata
    values are strings); without it (recap run writes format, producer, spec, input_seed,
    batch) the dims come from the saved tensors' shapes, then from the spec (a bucketed dim:
    its largest value, recap's default). `recap run --dim B=3` saves 3 rows and runs bucket
    4: the peer then runs B=3.

The JSON it writes (--json) is read by bench/report/bench_report.py: keys spec, device, torch, cuda,
dims, rotate, iters, eager_us {median, p10, p90, n}, graph_us {...} (null on cpu or
--no-graph), compile_us {...} (null unless --compile), compile {ok, error, compile_s, rotate},
graph_pool_bytes (one graph), graph_pool_bytes_all (all K graphs), capture_ms,
graph_nodes (kernel nodes in PyTorch's graph, null when the debug dump is unavailable),
check {ok, outputs: {name: {max_abs_err, max_abs_ref, rel_err, tol, ok} or {skipped}}},
work {ops, bytes_min, flops: {dtype: n}}, floors (when measured or given), floor (when floors).

--compile adds a third PyTorch mode for issue 8 (fusion): the same pipeline function under
torch.compile(mode="reduce-overhead") (inductor's fused kernels, replayed as CUDA graphs), called
until it has compiled and recorded its graphs (5 warmup calls, each after
torch.compiler.cudagraph_mark_step_begin()), then timed like the other modes. It runs on copy
0 of the data only, with those tensors marked as static addresses (so the CUDA graphs read
them in place instead of copying them in per call; rotating through K sets would record K
graphs or copy every set in): its "rotate" is 1, noted in the report. A failure (compile
error, unsupported op, graph break limits) is caught and recorded in "compile" rather than
failing the spec. --compile-only checks the outputs and runs that mode alone (eager and
CUDA-graph timings left out), so bench/report/bench_all.sh can give it its own time limit.

On a machine without a GPU, --device cpu checks the op mapping only: eager runs, timed with
time.perf_counter; f16/bf16 tensors are held in f32 and rounded to their type after every op
(PyTorch's CPU kernels lack half-precision matmul), so results match recap within tolerance.
"""
import argparse
import gc
import json
import math
import os
import re
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # bench_report.py imports this file for the floor formula only
    torch = None
    F = None

DTYPE_SIZE = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "i64": 8}
FLOAT_TYPES = ("f32", "f16", "bf16")
TOLERANCE = {"f32": 1e-4, "f16": 2e-3, "bf16": 2e-2}
ST_DTYPES = {"F32": "f32", "F16": "f16", "BF16": "bf16", "I32": "i32", "I64": "i64"}
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
L2_ROTATE_BYTES = 200e6  # four times the H100's 50 MB L2
ROTATE_MIN_SET = 1 << 20  # below this a pipeline is launch-bound: rotating changes nothing
ROTATE_MAX = 16


class PeerError(Exception):
    """A problem with the spec, the tensor file or an op's arguments (printed, exit 2)."""


def torch_dtype(name):
    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
            "i32": torch.int32, "i64": torch.int64}[name]


# ---- the spec --------------------------------------------------------------------------------

def load_spec(path):
    import yaml  # only the spec needs it; bench_report.py may import this file without it
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("ops"), list) or not doc["ops"]:
        raise PeerError("%s: not a recap spec (no ops)" % path)
    spec = {
        "name": str(doc.get("name", os.path.splitext(os.path.basename(path))[0])),
        "dtype": doc.get("dtype", "f32"),
        "dims": dict(doc.get("dims") or {}),
        "tensors": dict(doc.get("tensors") or {}),
        "ops": doc["ops"],
        "run": dict(doc.get("run") or {}),
    }
    if spec["dtype"] not in FLOAT_TYPES:
        raise PeerError("%s: unknown dtype %r" % (path, spec["dtype"]))
    for name, t in spec["tensors"].items():
        role = t.get("role")
        if role not in ("input", "param", "state", "scalar"):
            raise PeerError("tensor %s: unknown role %r" % (name, role))
        t.setdefault("dtype", "i32" if role == "scalar" else spec["dtype"])
        t.setdefault("shape", [1])
    produced = set()
    for i, op in enumerate(spec["ops"]):
        op.setdefault("name", "%s#%d" % (op.get("op"), i))
        ins = op.get("in", [])
        op["in"] = [ins] if isinstance(ins, str) else list(ins)
        out = op["out"]
        op["out"] = [out] if isinstance(out, str) else list(out)
        produced.update(op["out"])
    if "outputs" in doc:
        spec["outputs"] = list(doc["outputs"])
    else:  # recap's default: every op output nothing reads
        read = {n for op in spec["ops"] for n in op["in"]}
        spec["outputs"] = [n for op in spec["ops"] for n in op["out"] if n not in read]
    return spec


def resolve_dims(spec, overrides, file_shapes, file_dims):
    """Fixes every dim to one integer: --dim first, then the file's metadata, then the shapes
    of the declared tensors in the file; a bucketed dim nothing fixes takes its largest value."""
    dims = {}
    for k, v in overrides.items():
        dims[k] = v
    for k, v in (file_dims or {}).items():
        dims.setdefault(k, int(v))
    for name, t in spec["tensors"].items():
        shape = file_shapes.get(name)
        if shape is None or len(shape) != len(t["shape"]):
            continue
        for sym, size in zip(t["shape"], shape):
            if isinstance(sym, str):
                if sym in dims and dims[sym] != size:
                    raise PeerError("tensor %s in the file has %s = %d, but %s = %d"
                                    % (name, sym, size, sym, dims[sym]))
                dims[sym] = size
    for k, v in spec["dims"].items():
        if k not in dims:
            dims[k] = max(v) if isinstance(v, list) else int(v)
    return dims


def as_int(v, dims, what):
    if isinstance(v, bool):
        raise PeerError("%s: expected an integer, got %r" % (what, v))
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v in dims:
        return dims[v]
    raise PeerError("%s: %r is neither an integer nor a dim" % (what, v))


def shape_of(shape, dims, what):
    return [as_int(s, dims, what) for s in shape]


# ---- safetensors -------------------------------------------------------------------------------

def read_safetensors(path):
    """Returns ({name: (dtype, shape, bytes view)}, metadata) without the safetensors package."""
    with open(path, "rb") as f:
        data = bytearray(f.read())  # writable, so torch.frombuffer shares it without a warning
    if len(data) < 8:
        raise PeerError("%s: too short for a safetensors file" % path)
    n = int.from_bytes(data[:8], "little")
    if n > len(data) - 8 or n > 100 << 20:
        raise PeerError("%s: header length %d is out of range" % (path, n))
    header = json.loads(bytes(data[8:8 + n]).decode("utf-8"))
    base = 8 + n
    meta = header.pop("__metadata__", None) or {}
    out = {}
    for name, e in header.items():
        dt = ST_DTYPES.get(e.get("dtype"))
        if dt is None:
            raise PeerError("%s: tensor %s has unsupported dtype %r" % (path, name, e.get("dtype")))
        b, end = e["data_offsets"]
        shape = [int(s) for s in e["shape"]]
        if end - b != math.prod(shape) * DTYPE_SIZE[dt] or base + end > len(data) or b < 0:
            raise PeerError("%s: tensor %s has bad data offsets" % (path, name))
        out[name] = (dt, shape, memoryview(data)[base + b:base + end])
    return out, meta


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (dtype name, torch tensor)}; used by the self-check tooling."""
    header, blobs, off = {}, [], 0
    for name, (dt, t) in tensors.items():
        raw = t.detach().cpu().contiguous().to(torch_dtype(dt)).reshape(-1)
        if dt == "bf16":
            raw = raw.view(torch.int16)
        b = raw.numpy().tobytes()
        header[name] = {"dtype": {v: k for k, v in ST_DTYPES.items()}[dt],
                        "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def tensor_from_bytes(dt, shape, buf):
    if len(buf) == 0:
        return torch.empty(shape, dtype=torch_dtype(dt))
    if dt == "bf16":
        t = torch.frombuffer(bytearray(buf), dtype=torch.int16).view(torch.bfloat16)
    else:
        t = torch.frombuffer(bytearray(buf), dtype=torch_dtype(dt))
    return t.reshape(shape)


OUTPUT_ALIASES = ("%s", "outputs/%s", "output/%s", "out/%s", "outputs.%s", "output:%s")


# ---- the pipeline ------------------------------------------------------------------------------

class Ctx:
    """Where the pipeline runs. On cpu, f16/bf16 values live in f32 tensors rounded to their
    type after each op (emulate), since PyTorch's CPU kernels lack half-precision matmul."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.emulate = not self.cuda

    def storage(self, dt):
        if self.emulate and dt in ("f16", "bf16"):
            return torch.float32
        return torch_dtype(dt)

    def rnd(self, t, dt):
        if self.emulate and dt in ("f16", "bf16"):
            return t.to(torch_dtype(dt)).to(torch.float32)
        return t


def activation(name):
    if name not in ACTIVATIONS:
        raise PeerError("unknown activation %r" % name)
    return {
        "none": None,
        "relu": F.relu,
        "gelu": lambda x: F.gelu(x, approximate="none"),
        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "silu": F.silu,
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
    }[name]


def causal_keep(rows, cols, offset_rows_cols, device):
    """keep[i, j] = j <= i + offset: recap's causal rule (softmax: offset = cols - rows)."""
    i = torch.arange(rows, device=device).unsqueeze(1)
    j = torch.arange(cols, device=device).unsqueeze(0)
    return j <= i + offset_rows_cols


def has_sdpa():
    return hasattr(F, "scaled_dot_product_attention")


class Pipeline:
    """The spec's ops as closures over an environment {tensor name: torch tensor}."""

    def __init__(self, spec, dims, ctx, env_dtypes, scalar_values, attention_mode):
        self.spec, self.dims, self.ctx = spec, dims, ctx
        self.dtypes = dict(env_dtypes)  # recap dtype of every tensor, declared and produced
        self.scalar_values = scalar_values  # host copies of scalars, for static decisions
        self.attention_mode = attention_mode
        self.random_tainted = set()
        self.flops = {}
        self.counting = False  # set for one pass: GEMM ops then add their FLOPs
        self.steps = []
        self.stream_ids = sorted({int(op.get("stream", 0)) for op in spec["ops"]} - {0})
        for op in spec["ops"]:
            self.steps.append(self.build(op))
        self.plan_streams()

    # -- helpers --
    def attr(self, op, key, default=None, kind="float"):
        if key not in op:
            return default
        v = op[key]
        what = "op %s attribute %s" % (op["name"], key)
        if kind == "float":
            if isinstance(v, bool):
                raise PeerError("%s: expected a number" % what)
            return float(v)
        if kind == "int":
            return as_int(v, self.dims, what)
        if kind == "bool":
            if not isinstance(v, bool):
                raise PeerError("%s: expected true or false" % what)
            return v
        if kind == "list":
            v = [v] if not isinstance(v, list) else v
            return [as_int(x, self.dims, what) for x in v]
        return v

    def add_flops(self, dt, n):
        self.flops[dt] = self.flops.get(dt, 0) + int(n)

    def build(self, op):
        kind = op.get("op")
        fn = getattr(self, "op_" + str(kind), None)
        if fn is None:
            raise PeerError("op %s: %r has no PyTorch mapping here" % (op["name"], kind))
        for n in op["in"]:
            if n not in self.dtypes:
                raise PeerError("op %s: input %s is not defined before it" % (op["name"], n))
        in_dt = self.dtypes[op["in"][0]] if op["in"] else None
        body, out_dt = fn(op, in_dt)
        for n in op["out"]:
            self.dtypes[n] = out_dt
        if any(n in self.random_tainted for n in op["in"]) or kind.startswith("random_"):
            self.random_tainted.update(op["out"])
        rnd, ctx, ins, outs = self.ctx.rnd, self.ctx, op["in"], op["out"]
        rounding = ctx.emulate and out_dt in ("f16", "bf16") and kind not in SHAPE_ONLY_OPS

        def step(env):
            r = body(*[env[n] for n in ins])
            if len(outs) == 1:
                env[outs[0]] = rnd(r, out_dt) if rounding else r
            else:
                for n, t in zip(outs, r):
                    env[n] = t
        return step

    # -- elementwise --
    def op_relu(self, op, dt): return F.relu, dt
    def op_gelu(self, op, dt): return activation("gelu"), dt
    def op_gelu_tanh(self, op, dt): return activation("gelu_tanh"), dt
    def op_silu(self, op, dt): return F.silu, dt
    def op_sigmoid(self, op, dt): return torch.sigmoid, dt
    def op_tanh(self, op, dt): return torch.tanh, dt
    def op_exp(self, op, dt): return torch.exp, dt
    def op_neg(self, op, dt): return torch.neg, dt

    def op_scale(self, op, dt):
        s = self.attr(op, "scale")
        if s is None:
            raise PeerError("op %s: scale needs attribute 'scale'" % op["name"])
        return (lambda x: torch.mul(x, s)), dt

    def op_cast(self, op, dt):
        to = op.get("dtype")
        if to not in FLOAT_TYPES:
            raise PeerError("op %s: cast needs a float 'dtype'" % op["name"])
        st = self.ctx.storage(to)
        return (lambda x: x.to(st)), to

    def op_add(self, op, dt): return torch.add, dt
    def op_sub(self, op, dt): return torch.sub, dt
    def op_mul(self, op, dt): return torch.mul, dt
    def op_div(self, op, dt): return torch.div, dt

    # -- reductions and norms --
    def op_softmax(self, op, dt):
        scale = self.attr(op, "scale", 0.0)
        causal = self.attr(op, "causal", False, "bool")
        state = {}

        def f(x):
            if scale != 0:
                x = x * scale
            if not causal:
                return F.softmax(x, dim=-1)
            rows = x.shape[-2] if x.dim() > 1 else 1
            cols = x.shape[-1]
            key = (rows, cols, x.device)
            if key not in state:  # built in warmup, a constant afterwards (capture-safe)
                keep = causal_keep(rows, cols, cols - rows, x.device)
                if x.dim() == 1:
                    keep = keep.reshape(cols)
                state[key] = (keep, bool((~keep).all(dim=-1).any()))
            keep, empty_rows = state[key]
            y = F.softmax(x.masked_fill(~keep, float("-inf")), dim=-1)
            # recap: a row with every element masked outputs 0 (PyTorch gives NaN there).
            return y.masked_fill(~keep, 0.0) if empty_rows else y
        return f, dt

    def op_layernorm(self, op, dt):
        eps = self.attr(op, "eps", 1e-5)

        def f(x, w, b=None):
            return F.layer_norm(x, (x.shape[-1],), w, b, eps)
        return f, dt

    def op_rmsnorm(self, op, dt):
        eps = self.attr(op, "eps", 1e-6)
        if hasattr(F, "rms_norm"):
            return (lambda x, w: F.rms_norm(x, (x.shape[-1],), w, eps)), dt

        def f(x, w):  # PyTorch < 2.4: the formula, in f32 as recap computes it
            xf = x.float()
            y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()
            return y.to(x.dtype)
        return f, dt

    def op_sum(self, op, dt):
        return (lambda x: x.sum(-1, keepdim=x.dim() == 1)), dt

    def op_mean(self, op, dt):
        return (lambda x: x.mean(-1, keepdim=x.dim() == 1)), dt

    # -- GEMMs --
    def op_linear(self, op, dt):
        act = activation(op.get("act", "none"))
        # A gated output (kernels/gemm/gemm.h): weight [2F, K] holds gate rows, then up rows.
        gated = activation(op.get("gated", "none"))
        for unsupported in ("residual", "rms_norm", "glu"):
            if op.get(unsupported, False) not in (False, "none"):
                raise PeerError("op %s: the PyTorch peer has no linear with attribute %s"
                                % (op["name"], unsupported))
        pipe = self

        def f(x, w, b=None):
            if pipe.counting:
                pipe.add_flops(dt, 2 * (x.numel() // x.shape[-1]) * w.shape[0] * w.shape[1])
            y = F.linear(x, w, b)
            if gated:
                g, u = y.chunk(2, dim=-1)
                return gated(g) * u
            return act(y) if act else y
        return f, dt

    def op_matmul(self, op, dt):
        alpha = self.attr(op, "alpha", 1.0)
        beta = self.attr(op, "beta", 0.0)
        ta = self.attr(op, "trans_a", False, "bool")
        tb = self.attr(op, "trans_b", False, "bool")
        pipe = self

        def f(a, b, c=None):
            A = a.transpose(-1, -2) if ta else a
            B = b.transpose(-1, -2) if tb else b
            if pipe.counting:
                m, k, n = A.shape[-2], A.shape[-1], B.shape[-1]
                batch = math.prod(torch.broadcast_shapes(A.shape[:-2], B.shape[:-2]))
                pipe.add_flops(dt, 2 * batch * m * n * k)
            if c is not None and A.dim() == 2 and B.dim() == 2:
                return torch.addmm(c, A, B, beta=beta, alpha=alpha)
            y = torch.matmul(A, B)
            if alpha != 1.0:
                y = y * alpha
            if c is not None:
                y = y + c * beta if beta != 1.0 else y + c
            return y
        return f, dt

    # -- shapes (views where PyTorch makes views) --
    def op_reshape(self, op, dt):
        shape = self.attr(op, "shape", None, "list")
        return (lambda x: x.reshape(shape)), dt

    def op_permute(self, op, dt):
        dims = self.attr(op, "dims", None, "list")
        return (lambda x: x.permute(dims)), dt

    def op_transpose(self, op, dt):
        d0 = self.attr(op, "dim0", -2, "int")
        d1 = self.attr(op, "dim1", -1, "int")
        return (lambda x: x.transpose(d0, d1)), dt

    def op_slice(self, op, dt):
        d = self.attr(op, "dim", 0, "int")
        start = self.attr(op, "start", None, "int")
        end = self.attr(op, "end", None, "int")

        def f(x):
            n = x.shape[d]
            s = start + n if start < 0 else start
            e = end + n if end < 0 else end
            return x.narrow(d, s, e - s)
        return f, dt

    def op_split(self, op, dt):
        d = self.attr(op, "dim", 0, "int")
        sizes = self.attr(op, "sizes", None, "list")
        return (lambda x: torch.split(x, sizes, dim=d)), dt

    def op_copy(self, op, dt):
        return (lambda x: x.clone(memory_format=torch.contiguous_format)), dt

    def op_concat(self, op, dt):
        d = self.attr(op, "dim", 0, "int")
        return (lambda *xs: torch.cat(xs, dim=d)), dt

    def op_fill(self, op, dt):
        shape = self.attr(op, "shape", None, "list")
        out_dt = op.get("dtype", self.spec["dtype"])
        value = self.attr(op, "value", 0.0)
        st, dev = self.ctx.storage(out_dt), self.ctx.device
        if out_dt in ("i32", "i64"):
            value = int(value)
        return (lambda: torch.full(shape, value, dtype=st, device=dev)), out_dt

    def op_embedding(self, op, dt):
        return (lambda table, ids: F.embedding(ids, table)), dt

    def op_rope(self, op, dt):
        base = float(self.attr(op, "base", 10000, "int"))
        state = {}

        def f(x, positions):
            seq, hd = x.shape[-3], x.shape[-1]
            half = hd // 2
            key = (seq, hd, x.device)
            if key not in state:
                i = torch.arange(half, dtype=torch.float64, device=x.device)
                inv_freq = torch.pow(torch.tensor(base, dtype=torch.float64), -2.0 * i / hd)
                rows = torch.arange(seq, dtype=torch.float64, device=x.device)
                state[key] = (inv_freq.to(x.device), rows)
            inv_freq, rows = state[key]
            pos = positions.to(torch.float64)
            pos = pos[0] + rows if positions.shape[0] != seq else pos
            angle = pos.unsqueeze(1) * inv_freq.unsqueeze(0)  # [S, half], in double as recap
            cos = angle.cos().to(x.dtype).unsqueeze(-2)  # [S, 1, half] broadcasts over heads
            sin = angle.sin().to(x.dtype).unsqueeze(-2)
            x1, x2 = x[..., :half], x[..., half:]
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        return f, dt

    # -- inference state --
    def op_kv_append(self, op, dt):
        state = {}

        def f(cache, new, pos, rows=None):
            b, t = new.shape[0], new.shape[1]
            key = (b, t, cache.device)
            if key not in state:
                state[key] = (torch.arange(t, dtype=torch.int64, device=cache.device),
                              torch.arange(b, device=cache.device).view(b, 1, 1, 1))
            steps, batch = state[key]
            # Rows pos..pos+t-1, pos read on the device: a replay uses the position the
            # device holds then, with no graph update (recap's kv_append contract).
            index = pos.to(torch.int64) + steps
            if rows is not None:
                # Only the first `rows` batch rows are real (a bucket's padding leaves the
                # cache alone); also read on the device.
                new = torch.where(batch < rows, new, cache.index_select(1, index))
            return cache.index_copy_(1, index, new)
        return f, dt

    def op_attention(self, op, dt):
        scale_attr = self.attr(op, "scale", 0.0)
        causal = self.attr(op, "causal", False, "bool")
        pipe = self
        state = {}
        len_name = op["in"][3] if len(op["in"]) > 3 else None
        host_len = self.scalar_values.get(len_name) if len_name else None
        mode = self.attention_mode

        def f(q, k, v, length=None):
            b, h, sq, hd = q.shape
            hkv, sk = k.shape[1], k.shape[2]
            scale = scale_attr if scale_attr != 0 else 1.0 / math.sqrt(hd)
            L = host_len if length is not None and host_len is not None else sk
            if pipe.counting:
                pairs = sum(min(L, max(0, L - sq + i + 1)) if causal else L for i in range(sq))
                pipe.add_flops(dt, 4 * b * h * pairs * hd)
            key = (sq, sk, q.device)
            if key not in state:
                jj = torch.arange(sk, device=q.device)
                ii = torch.arange(sq, device=q.device)
                # Rows with no visible key output 0 in recap; decided from the length the
                # file holds (the benchmark keeps it fixed), so the common case adds nothing.
                empty = L == 0 or (causal and L - sq < 0)
                state[key] = (jj, ii, empty)
            jj, ii, empty = state[key]
            if length is not None:
                L_dev = length.to(torch.int64)
                keep = (jj.unsqueeze(0) < L_dev)  # [1, Sk]
                if causal:
                    keep = keep & (jj.unsqueeze(0) <= (L_dev - sq + ii).unsqueeze(1))
                keep = keep.expand(sq, sk)
                is_causal = False
            elif causal and sq == sk:
                keep, is_causal = None, True  # recap's rule is top-left aligned when Sq == Sk
            elif causal:
                if "static" not in state:
                    state["static"] = causal_keep(sq, sk, sk - sq, q.device)
                keep, is_causal = state["static"], False
            else:
                keep, is_causal = None, False
            group = h // hkv
            if mode == "sdpa":
                kw = {}
                if group > 1:
                    kw["enable_gqa"] = True
                try:
                    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep,
                                                         is_causal=is_causal, scale=scale, **kw)
                except TypeError:  # no enable_gqa before PyTorch 2.5
                    kk = k.repeat_interleave(group, dim=1)
                    vv = v.repeat_interleave(group, dim=1)
                    out = F.scaled_dot_product_attention(q, kk, vv, attn_mask=keep,
                                                         is_causal=is_causal, scale=scale)
            else:
                kk = k.repeat_interleave(group, dim=1) if group > 1 else k
                vv = v.repeat_interleave(group, dim=1) if group > 1 else v
                s = torch.matmul(q, kk.transpose(-1, -2)).float() * scale
                if is_causal:
                    keep = causal_keep(sq, sk, 0, q.device)
                if keep is not None:
                    s = s.masked_fill(~keep, float("-inf"))
                p = torch.softmax(s, dim=-1)
                out = torch.matmul(p.to(v.dtype), vv)
            if empty:
                rows_visible = keep.any(dim=-1, keepdim=True) if keep is not None else None
                if rows_visible is not None:
                    out = torch.where(rows_visible, out, torch.zeros((), dtype=out.dtype,
                                                                      device=out.device))
            return out
        return f, dt

    # -- random --
    def op_random_uniform(self, op, dt):
        shape = self.attr(op, "shape", None, "list")
        out_dt = op.get("dtype", self.spec["dtype"])
        lo, hi = self.attr(op, "low", 0.0), self.attr(op, "high", 1.0)
        st, dev = self.ctx.storage(out_dt), self.ctx.device
        return (lambda: torch.empty(shape, dtype=st, device=dev).uniform_(lo, hi)), out_dt

    def op_random_normal(self, op, dt):
        shape = self.attr(op, "shape", None, "list")
        out_dt = op.get("dtype", self.spec["dtype"])
        mean, std = self.attr(op, "mean", 0.0), self.attr(op, "std", 1.0)
        st, dev = self.ctx.storage(out_dt), self.ctx.device
        return (lambda: torch.empty(shape, dtype=st, device=dev).normal_(mean, std)), out_dt

    # -- streams --
    def plan_streams(self):
        """Per op: the events to wait on before it and whether to record one after it, so each
        side stream forks from the pipeline's stream and joins back at the end."""
        self.schedule = None
        if not self.stream_ids or not self.ctx.cuda:
            return
        producer = {}  # tensor -> op index
        stream_of = [int(op.get("stream", 0)) for op in self.spec["ops"]]
        record_after = [False] * len(stream_of)
        waits = [[] for _ in stream_of]
        cross = [[] for _ in stream_of]  # inputs used on a stream other than their producer's
        started = set()
        for i, op in enumerate(self.spec["ops"]):
            s = stream_of[i]
            if s != 0 and s not in started:
                waits[i].append("start")
                started.add(s)
            for n in op["in"]:
                p = producer.get(n)
                if p is not None and stream_of[p] != s:
                    record_after[p] = True
                    if p not in waits[i]:
                        waits[i].append(p)
                    cross[i].append(n)
            for n in op["out"]:
                producer[n] = i
        last = {s: max(i for i, x in enumerate(stream_of) if x == s) for s in self.stream_ids}
        for s, i in last.items():
            record_after[i] = True
        self.streams = {s: torch.cuda.Stream(device=self.ctx.device) for s in self.stream_ids}
        self.events = [torch.cuda.Event() if r else None for r in record_after]
        self.start_event = torch.cuda.Event()
        # The final join: main waits for each side stream's last op, unless a later op on
        # main already did (a second wait would only cost a host call per iteration).
        joins = [i for i in last.values()
                 if not any(stream_of[j] == 0 and i in waits[j] for j in range(i + 1, len(waits)))]
        self.schedule = (stream_of, waits, cross, joins)

    def run(self, env):
        """One iteration; env holds the declared tensors and receives every output."""
        if self.schedule is None:
            for step in self.steps:
                step(env)
            return env
        stream_of, waits, cross, joins = self.schedule
        main = torch.cuda.current_stream()
        self.start_event.record(main)
        for i, step in enumerate(self.steps):
            s = main if stream_of[i] == 0 else self.streams[stream_of[i]]
            for w in waits[i]:
                s.wait_event(self.start_event if w == "start" else self.events[w])
            with torch.cuda.stream(s):
                for n in cross[i]:
                    env[n].record_stream(s)  # its memory is reused only after s is done with it
                step(env)
                if self.events[i] is not None:
                    self.events[i].record(s)
        for i in joins:
            main.wait_event(self.events[i])
        return env


SHAPE_ONLY_OPS = ("reshape", "permute", "transpose", "slice", "split", "copy", "concat",
                  "kv_append", "embedding", "fill")


# ---- timing ------------------------------------------------------------------------------------

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
    """One event pair per call on the current stream, waiting for the second event before the
    next call: recap bench's method (cli/tensors.h, cli_time_runs), so each sample is
    one iteration from an idle GPU, launch latency included, on both sides."""
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(iters)]
    for i, (a, b) in enumerate(pairs):
        a.record()
        fn(i)
        b.record()
        b.synchronize()
    return percentiles([a.elapsed_time(b) * 1000.0 for a, b in pairs])


def time_cpu(fn, iters):
    out = []
    for i in range(iters):
        t0 = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - t0) * 1e6)
    return percentiles(out)


# ---- floors ------------------------------------------------------------------------------------

def time_op(dev, dtype, shape, iters, copy=False):
    """Median us of b.copy_(a) (copy) or a @ b on fresh random tensors, after 3 warmups; the
    tensors die with the call (the caller empties the cache)."""
    a = torch.randn(shape, device=dev).to(dtype) if not copy else \
        torch.ones(shape, dtype=dtype, device=dev)
    b = torch.randn(shape, device=dev).to(dtype) if not copy else torch.empty_like(a)

    def step(i):
        if copy:
            b.copy_(a)
        else:
            torch.matmul(a, b)
    for i in range(3):
        step(i)
    return time_cuda(step, iters)["median"]


def measure_floors(device):
    dev = torch.device(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    res = {"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
           "cuda": torch.version.cuda}
    # Copy bandwidth: 1 GiB to 1 GiB, far past L2; read + written bytes over the time.
    n = 1 << 30
    res["copy_bytes"] = 2 * n
    res["copy_gbps"] = 2 * n / (time_op(dev, torch.uint8, (n,), 20, copy=True) * 1e-6) / 1e9
    torch.cuda.empty_cache()
    # Matmul rate at 8192^3 on random data.
    res["matmul_tflops"] = {}
    for dt in ("bf16", "f16", "f32"):
        us = time_op(dev, torch_dtype(dt), (8192, 8192), 10)
        res["matmul_tflops"][dt] = 2 * 8192 ** 3 / (us * 1e-6) / 1e12
        torch.cuda.empty_cache()
    # Per-node cost of an empty-kernel graph: slope between 1 and 1000 tiny kernels.
    tiny = torch.zeros(1, device=dev)

    def kernel():
        if hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(0)  # a spin kernel of 0 cycles: an empty launch
        else:
            tiny.add_(0)

    def graph_of(count):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(count):
                kernel()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for _ in range(count):
                kernel()
        for _ in range(5):
            g.replay()
        return time_cuda(lambda i: g.replay(), 50)["median"]
    t1, t1000 = graph_of(1), graph_of(1000)
    res["node_us"] = (t1000 - t1) / 999.0
    res["graph_launch_us"] = t1
    # Eager launch throughput: 1000 back-to-back launches per event pair.
    def burst(i):
        for _ in range(1000):
            kernel()
    burst(0)
    res["eager_kernel_us"] = time_cuda(burst, 5)["median"] / 1000.0
    return res


def compute_floor(work, floors, nodes):
    """Per-spec floor in us from its work (bytes_min, flops per dtype), the measured floors
    and the graph's node count; None where a measurement is missing."""
    if not work or not floors:
        return None
    parts = {}
    if nodes and floors.get("node_us"):
        parts["launch"] = nodes * floors["node_us"]
    if floors.get("copy_gbps"):
        parts["bytes"] = work["bytes_min"] / (floors["copy_gbps"] * 1e9) * 1e6
    rates = floors.get("matmul_tflops") or {}
    flop_us = 0.0
    for dt, n in (work.get("flops") or {}).items():
        rate = rates.get(dt) or rates.get("bf16")
        if rate:
            flop_us += n / (rate * 1e12) * 1e6
    parts["flops"] = flop_us
    bound = max(parts, key=parts.get)
    return {"us": parts[bound], "bound": bound, "parts_us": parts, "nodes": nodes}


# ---- the run -----------------------------------------------------------------------------------

def initial_value(name, t, dims):
    """A scalar or state that the tensor file leaves out (`recap run --save-tensors` writes
    params, inputs and outputs): its spec init, when that init is deterministic."""
    shape = shape_of(t["shape"], dims, "tensor %s shape" % name)
    init = t.get("init") or ("value" if "value" in t else
                             {"scalar": "value", "state": "zeros"}.get(t["role"]))
    fills = {"zeros": 0.0, "ones": 1.0, "value": t.get("value", 0)}
    if init not in fills:
        raise PeerError("tensor %s (role %s, init %s) is not in the tensor file, and its init "
                        "is random" % (name, t["role"], init))
    v = fills[init]
    return torch.full(shape, int(v) if t["dtype"] in ("i32", "i64") else float(v),
                      dtype=torch_dtype(t["dtype"]))


def load_declared(spec, dims, tensors, ctx, read_names):
    """The declared tensors the ops read, on the device, with the file's values."""
    base = {}
    for name, t in spec["tensors"].items():
        if name not in tensors:
            if name not in read_names:
                continue
            if t["role"] in ("input", "param"):
                raise PeerError("tensor %s (role %s) is not in the tensor file"
                                % (name, t["role"]))
            base[name] = initial_value(name, t, dims).to(ctx.device).to(ctx.storage(t["dtype"]))
            continue
        dt, shape, buf = tensors[name]
        want = shape_of(t["shape"], dims, "tensor %s shape" % name)
        if dt != t["dtype"] or shape != want:
            raise PeerError("tensor %s in the file is %s%s, the spec says %s%s"
                            % (name, dt, shape, t["dtype"], want))
        base[name] = tensor_from_bytes(dt, shape, buf).to(ctx.device).to(ctx.storage(dt))
    return base


def find_output(tensors, name):
    for pattern in OUTPUT_ALIASES:
        key = pattern % name
        if key in tensors:
            return tensors[key]
    return None


def check_outputs(spec, pipe, env, tensors):
    res, ok = {}, True
    for name in spec["outputs"]:
        dt = pipe.dtypes[name]
        if name in pipe.random_tainted:
            res[name] = {"skipped": "depends on a random op: generators differ"}
            continue
        ref = find_output(tensors, name)
        if ref is None:
            res[name] = {"ok": False, "error": "recap's output is not in the tensor file"}
            ok = False
            continue
        rdt, rshape, buf = ref
        mine = env[name]
        if list(mine.shape) != rshape:
            res[name] = {"ok": False,
                         "error": "shape %s vs recap's %s" % (list(mine.shape), rshape)}
            ok = False
            continue
        r = tensor_from_bytes(rdt, rshape, buf).to(torch.float64)
        m = mine.detach().to("cpu").to(torch.float64)
        max_ref = float(r.abs().max()) if r.numel() else 0.0
        err = float((m - r).abs().max()) if r.numel() else 0.0
        if math.isnan(err) or (m.isnan() != r.isnan()).any():
            err = float("inf")
        tol = TOLERANCE.get(dt, 0.0)
        rel = err / max_ref if max_ref > 0 else err
        good = rel <= tol if dt in TOLERANCE else err == 0
        ok = ok and good
        res[name] = {"max_abs_err": err, "max_abs_ref": max_ref, "rel_err": rel, "tol": tol,
                     "dtype": dt, "ok": good}
    return {"ok": ok, "outputs": res}


def count_graph_nodes(g, path):
    """Kernel nodes in a captured graph, from cudaGraphDebugDotPrint's DOT; None if unavailable."""
    try:
        g.debug_dump(path)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        os.unlink(path)
    except Exception:  # noqa: BLE001 - optional diagnostics only
        return None
    nodes = re.findall(r'^\s*"?[\w]+_node_\d+"?\s*\[(.*)$', text, re.M)
    kernels = [n for n in nodes if "KERNEL" in n.upper() or "kernel" in n]
    return len(kernels) if kernels else (len(nodes) or None)


def rotate_count(arg, set_bytes):
    if arg != "auto":
        k = int(arg)
        if k < 1:
            raise PeerError("--rotate must be >= 1")
        return k
    if set_bytes < ROTATE_MIN_SET or set_bytes >= L2_ROTATE_BYTES:
        return 1
    return min(ROTATE_MAX, int(math.ceil(L2_ROTATE_BYTES / set_bytes)))


def run_spec(args):
    spec = load_spec(args.spec)
    tensors, meta = read_safetensors(args.tensors)
    overrides = {}
    for d in args.dim:
        k, _, v = d.partition("=")
        overrides[k] = int(v)
    file_dims = None
    if "dims" in meta:
        try:
            file_dims = json.loads(meta["dims"])
        except ValueError:
            file_dims = None
    dims = resolve_dims(spec, overrides,
                        {n: s for n, (_, s, _) in tensors.items()}, file_dims)
    ctx = Ctx(args.device)
    if ctx.cuda:
        torch.backends.cuda.matmul.allow_tf32 = False  # recap's f32 GEMMs are exact f32
        torch.backends.cudnn.allow_tf32 = False
    read_names = {n for op in spec["ops"] for n in op["in"]} | set(spec["outputs"])
    scalar_values = {}
    for name, t in spec["tensors"].items():
        if t["role"] == "scalar" and name in tensors:
            dt, shape, buf = tensors[name]
            scalar_values[name] = int(tensor_from_bytes(dt, shape, buf).reshape(-1)[0])
        elif t["role"] == "scalar":
            scalar_values[name] = int(initial_value(name, t, {}).reshape(-1)[0]) \
                if all(isinstance(x, int) for x in t["shape"]) else None
    env_dtypes = {n: t["dtype"] for n, t in spec["tensors"].items()}
    mode = args.attention or ("sdpa" if has_sdpa() else "explicit")
    pipe = Pipeline(spec, dims, ctx, env_dtypes, scalar_values, mode)

    sets = [load_declared(spec, dims, tensors, ctx, read_names)]
    nbytes = {n: t.numel() * DTYPE_SIZE[spec["tensors"][n]["dtype"]] for n, t in sets[0].items()}
    set_bytes = sum(nbytes.values())
    rotate = rotate_count(args.rotate, set_bytes)
    sets += [{n: t.clone() for n, t in sets[0].items()} for _ in range(1, rotate)]

    # One counted eager pass for the FLOPs, then the check on copy 0.
    pipe.counting = True
    env = pipe.run(dict(sets[0]))
    pipe.counting = False
    if ctx.cuda:
        torch.cuda.synchronize()
    check = check_outputs(spec, pipe, env, tensors)
    out_bytes = sum(env[n].numel() * DTYPE_SIZE[pipe.dtypes[n]] for n in spec["outputs"])
    in_bytes = sum(b for n, b in nbytes.items() if n in read_names)
    work = {"ops": len(spec["ops"]), "bytes_min": in_bytes + out_bytes, "flops": pipe.flops,
            "set_bytes": set_bytes}
    del env

    iters = args.iters or int(spec["run"].get("iters", 100))
    warmup = args.warmup if args.warmup is not None else 3
    result = {"spec": spec["name"], "spec_file": args.spec, "tensors_file": args.tensors,
              "device": torch.cuda.get_device_name(ctx.device) if ctx.cuda else "cpu",
              "torch": torch.__version__, "cuda": torch.version.cuda, "dims": dims,
              "attention": mode, "rotate": rotate, "iters": iters, "check": check,
              "work": work, "eager_us": None, "graph_us": None, "graph_pool_bytes": None,
              "graph_pool_bytes_all": None, "capture_ms": None, "graph_nodes": None,
              "compile_us": None, "compile": None}

    def eager(i):
        pipe.run(dict(sets[i % rotate]))

    if not ctx.cuda:
        for i in range(warmup):
            eager(i)
        result["eager_us"] = time_cpu(eager, iters)
        return result, spec

    if args.compile_only:
        result["compile_us"], result["compile"] = time_compiled(pipe, spec, sets[0], warmup,
                                                                iters)
        return result, spec
    main = torch.cuda.Stream(device=ctx.device)
    main.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(main):
        # Warmup on the side stream `main` (PyTorch's recipe), which then captures too.
        for i in range(max(warmup, rotate)):
            eager(i)
        main.synchronize()
        result["eager_us"] = time_cuda(eager, iters)
        if args.no_graph:
            return result, spec
        torch.cuda.synchronize()
        gc.collect()
        torch.cuda.empty_cache()
        reserved0 = torch.cuda.memory_reserved(ctx.device)
        graphs, statics = [], []
        t0 = time.perf_counter()
        pool = None
        for k in range(rotate):
            g = torch.cuda.CUDAGraph()
            if k == 0 and hasattr(g, "enable_debug_mode"):
                try:
                    g.enable_debug_mode()
                except Exception:  # noqa: BLE001 - the node count is optional
                    pass
            with torch.cuda.graph(g, pool=pool, stream=main):
                env = pipe.run(dict(sets[k]))
            statics.append({n: env[n] for n in spec["outputs"]})
            del env
            if k == 0:
                torch.cuda.synchronize()
                result["graph_pool_bytes"] = torch.cuda.memory_reserved(ctx.device) - reserved0
            pool = g.pool()
            graphs.append(g)
        torch.cuda.synchronize()
        result["capture_ms"] = (time.perf_counter() - t0) * 1e3 / rotate
        result["graph_pool_bytes_all"] = torch.cuda.memory_reserved(ctx.device) - reserved0
        result["graph_nodes"] = count_graph_nodes(graphs[0], "/tmp/peer_torch_graph_%d.dot"
                                                  % os.getpid())
        # The graph's outputs must match recap's too (graph 0 replays copy 0's values).
        graphs[0].replay()
        main.synchronize()
        gcheck = check_outputs(spec, pipe, statics[0], tensors)
        result["check"]["graph_ok"] = gcheck["ok"]
        result["check"]["ok"] = check["ok"] and gcheck["ok"]
        for i in range(warmup):
            graphs[i % rotate].replay()
        result["graph_us"] = time_cuda(lambda i: graphs[i % rotate].replay(), iters)
    torch.cuda.synchronize()
    if args.compile:
        del graphs, statics
        gc.collect()
        result["compile_us"], result["compile"] = time_compiled(pipe, spec, sets[0], warmup,
                                                                iters)
    return result, spec


def error_text(e):
    """The first lines of an exception that say what went wrong (inductor's BackendCompilerFailed
    puts the cause on the line after "raised:")."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return ("%s: %s" % (type(e).__name__, " ".join(lines[:3])))[:300]


def time_compiled(pipe, spec, data, warmup, iters):
    """torch.compile(mode="reduce-overhead") of the pipeline on one data set: (timing or None,
    {ok, error, compile_s, rotate, streams}). A pipeline with side streams that fails to compile
    is compiled again with every op on one stream (dynamo/inductor do not compile stream
    switches; inductor orders the kernels itself): "streams" says which ran."""
    timing, info = compile_once(pipe, spec, data, warmup, iters)
    if info["ok"] or pipe.schedule is None:
        return timing, info
    schedule, pipe.schedule = pipe.schedule, None
    try:
        torch._dynamo.reset()
        timing, retry = compile_once(pipe, spec, data, warmup, iters)
    finally:
        pipe.schedule = schedule
    retry["streams"] = "one (side streams dropped after: %s)" % info["error"]
    return timing, retry


def compile_once(pipe, spec, data, warmup, iters):
    info = {"ok": False, "error": None, "compile_s": None, "rotate": 1,
            "mode": "reduce-overhead", "streams": "as the spec"}
    if not hasattr(torch, "compile"):
        info["error"] = "torch.compile is not available"
        return None, info
    outputs = list(spec["outputs"])
    try:
        mark = getattr(torch._dynamo, "mark_static_address", None)
        if mark:
            for t in data.values():
                mark(t)

        def fn(env):
            out = pipe.run(dict(env))
            return tuple(out[n] for n in outputs)
        compiled = torch.compile(fn, mode="reduce-overhead")
        step = getattr(torch.compiler, "cudagraph_mark_step_begin", None)

        def call(_i):
            if step:
                step()
            compiled(data)
        t0 = time.perf_counter()
        for i in range(max(5, warmup)):
            call(i)
        torch.cuda.synchronize()
        info["compile_s"] = time.perf_counter() - t0
        timing = time_cuda(call, iters)
        info["ok"] = True
        return timing, info
    except Exception as e:  # noqa: BLE001 - one spec's failure is a result, not a crash
        info["error"] = error_text(e)
        torch.cuda.synchronize()
        return None, info


def print_summary(res):
    def fmt(t):
        return "%.1f us (p10 %.1f, p90 %.1f)" % (t["median"], t["p10"], t["p90"])
    print("spec %s on %s, dims %s, rotate %d" % (res["spec"], res["device"],
                                                 res["dims"], res["rotate"]))
    for name, c in res["check"]["outputs"].items():
        if "skipped" in c:
            print("  output %s: not compared (%s)" % (name, c["skipped"]))
        elif "error" in c:
            print("  output %s: MISMATCH (%s)" % (name, c["error"]))
        else:
            print("  output %s: max err %.3g, %.3g of max|ref| (tol %g) %s"
                  % (name, c["max_abs_err"], c["rel_err"], c["tol"],
                     "ok" if c["ok"] else "MISMATCH"))
    if res.get("eager_us"):
        print("  PyTorch eager %s" % fmt(res["eager_us"]))
    if res.get("graph_us"):
        print("  PyTorch graph %s, pool %s bytes, capture %.2f ms, %s kernel nodes"
              % (fmt(res["graph_us"]), res["graph_pool_bytes"], res["capture_ms"],
                 res["graph_nodes"]))
    if res.get("compile_us"):
        print("  torch.compile (reduce-overhead) %s, compiled in %.1f s"
              % (fmt(res["compile_us"]), res["compile"]["compile_s"]))
    elif res.get("compile"):
        print("  torch.compile failed: %s" % res["compile"]["error"])
    if res.get("floor"):
        fl = res["floor"]
        print("  floor %.1f us (%s-bound)" % (fl["us"], fl["bound"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spec", nargs="?", help="a recap spec (.yaml)")
    ap.add_argument("--tensors", help="the .safetensors file `recap run --save-tensors` wrote")
    ap.add_argument("--iters", type=int, help="timed iterations (default: the spec's run.iters)")
    ap.add_argument("--warmup", type=int, help="warmup iterations (default 3)")
    ap.add_argument("--rotate", default="1", help="K copies of params/inputs, or auto")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--floors", action="store_true", help="measure the hardware floors")
    ap.add_argument("--floors-from", help="floors measured earlier in this run (JSON)")
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    ap.add_argument("--dim", action="append", default=[], help="NAME=VALUE overrides a dim")
    ap.add_argument("--attention", choices=("sdpa", "explicit"),
                    help="attention as F.scaled_dot_product_attention (default when it "
                         "exists) or as matmul, softmax, matmul")
    ap.add_argument("--no-graph", action="store_true", help="eager only")
    ap.add_argument("--compile", action="store_true",
                    help='also time torch.compile(mode="reduce-overhead") (CUDA only)')
    ap.add_argument("--compile-only", action="store_true",
                    help="the torch.compile mode alone (after the output check)")
    args = ap.parse_args(argv)
    if torch is None:
        print("peer_torch: PyTorch is not installed", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("peer_torch: no CUDA device (use --device cpu for a functional check)",
              file=sys.stderr)
        return 2
    try:
        floors = None
        if args.floors_from:
            try:
                with open(args.floors_from, encoding="utf-8") as f:
                    floors = json.load(f)
            except (OSError, ValueError) as e:  # the floors failed: the timings still count
                print("peer_torch: no floors (%s)" % e, file=sys.stderr)
        elif args.floors:
            if not args.device.startswith("cuda"):
                raise PeerError("--floors needs a CUDA device")
            floors = measure_floors(args.device)
        if not args.spec:
            if floors is None:
                ap.error("give a spec, or --floors")
            out = floors
            print("floors: copy %.0f GB/s, bf16 matmul %.0f TFLOP/s, graph node %.3f us"
                  % (floors["copy_gbps"], floors["matmul_tflops"]["bf16"], floors["node_us"]))
        else:
            if not args.tensors:
                ap.error("give --tensors FILE.safetensors (from `recap run --save-tensors`)")
            out, spec = run_spec(args)
            if floors:
                out["floors"] = floors
                out["floor"] = compute_floor(out["work"], floors,
                                             out.get("graph_nodes") or len(spec["ops"]))
            print_summary(out)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(out, f, indent=1, sort_keys=True)
        if args.spec and not out["check"]["ok"]:
            return 1
        return 0
    except PeerError as e:
        print("peer_torch: %s" % e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
