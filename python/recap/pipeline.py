"""recap.Pipeline: a spec loaded by librecap, its static buffers shared as DLPack views."""
import ctypes
import os
import threading

from . import _dlpack
from ._native import (BACKEND_CUDA, BACKEND_HOST, INT32_MAX, INT64_MAX, Device, PipelineInfo,
                      PipelineOptions, RecapError, TensorInfo, TensorView, check, checked_int,
                      create_on_host_without_gpu, lib)

_TYPESTR = {"f32": "<f4", "f16": "<f2", "i32": "<i4", "i64": "<i8"}
_OVERSIZE = {"eager": 0, "fail": 1}  # recap_oversize_policy
ROLES = ["input", "param", "state", "scalar", "intermediate"]


class TensorSpec:
    """One tensor of a pipeline as recap describes it: name, role ("input", "param", "state",
    "scalar", "intermediate"), is_output, dtype ("f32", ...), shape and bytes (the largest
    bucket's), bucket_axis (-1: not bucketed)."""

    def __init__(self, info):
        self.name = info.name.decode()
        self.role = ROLES[info.role]
        self.is_output = bool(info.is_output)
        self._output_position = info.is_output  # 1-based in the spec's outputs; 0: none
        self.dtype = _dlpack.DTYPES[info.dtype][0]
        self.dtype_code = info.dtype  # recap_dtype
        self.shape = tuple(info.shape[i] for i in range(info.ndim))
        self.bytes = info.bytes
        self.bucket_axis = info.bucket_axis

    def __repr__(self):
        return "TensorSpec(%r, %s%s, %s%r, bucket_axis=%d)" % (
            self.name, self.role, " output" if self.is_output else "", self.dtype, self.shape,
            self.bucket_axis)


class Tensor:
    """A view of one of recap's buffers, no copy: hand it to torch.from_dlpack or
    numpy.from_dlpack. It keeps its pipeline's memory alive, even past close(), as does every
    tensor another library made from it; what it holds is rewritten by the next run (inputs: by
    the caller; outputs: by recap), as torch.cuda.CUDAGraph's static tensors."""

    def __init__(self, pipeline, name, data, dtype, shape, strides):
        self.pipeline, self.name, self.data_ptr = pipeline, name, data
        self.dtype = _dlpack.DTYPES[dtype][0]
        self._dtype, self.shape, self.strides = dtype, tuple(shape), tuple(strides)
        pipeline._view_made()

    def __del__(self):
        pipeline = getattr(self, "pipeline", None)
        if pipeline is not None:
            pipeline._view_gone()

    def __repr__(self):
        return "recap.Tensor(%r, %s%r at 0x%x)" % (self.name, self.dtype, self.shape,
                                                   self.data_ptr)

    def __dlpack_device__(self):
        return _dlpack_device(self.pipeline.device)

    @property
    def __array_interface__(self):
        # numpy's DLPack import is read-only before numpy 2 (the unversioned capsule carries no
        # read-only flag), so numpy.asarray(view) is the writable, still zero-copy, way in on
        # the host backend. Device memory has no such interface: use DLPack there.
        if self.pipeline.device.backend != BACKEND_HOST:
            raise AttributeError("__array_interface__ is for host memory; %r is on the GPU "
                                 "(use torch.from_dlpack)" % self.name)
        typestr = _TYPESTR.get(self.dtype)
        if typestr is None:
            raise TypeError("numpy has no %s dtype; read %r through DLPack (torch)"
                            % (self.dtype, self.name))
        size = int(typestr[2])
        self.pipeline.order_before(None)
        return {"version": 3, "shape": self.shape, "typestr": typestr,
                "data": (self.data_ptr, False), "strides": tuple(s * size for s in self.strides)}

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        # max_version: this producer gives the unversioned capsule, which the protocol allows
        # whatever the consumer's maximum.
        if copy:
            raise BufferError("recap tensors are exported without a copy (copy=True asked)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError("recap tensor %r is on %r, not %r"
                              % (self.name, self.__dlpack_device__(), tuple(dl_device)))
        self.pipeline.order_before(stream)
        kind, index = self.__dlpack_device__()
        return _dlpack.export(self, self.data_ptr, kind, index, self._dtype, self.shape,
                              self.strides)


class Pipeline:
    """A recap pipeline: Pipeline("model.yaml") or Pipeline(yaml=text), optionally on
    device="host", "cuda" or "cuda:1" instead of the spec's. Close it (or use `with`) to free
    its memory at once; otherwise it lives as long as it or a view taken from it is referenced.

    recap runs a pipeline on one thread at a time, so calls from several threads take turns (a
    lock per pipeline): close() waits for a run in progress. A batch above the largest bucket
    is a ValueError (oversize="fail", the default); oversize="eager" runs the largest bucket's
    rows eagerly instead, as the C API's default does.

    close() (or the end of a `with` block) ends the pipeline: no call works after it. Its
    memory goes back at once, or, while views of it are still referenced (a recap.Tensor, a
    torch tensor or numpy array made from one, a param another pipeline bound to one), when
    the last of them goes, so a view never reads freed memory."""

    def __init__(self, path=None, *, yaml=None, name="<string>", device=None, entry=None,
                 dims=None, eager=False, oversize="fail"):
        if (path is None) == (yaml is None):
            raise TypeError("Pipeline takes a spec path or yaml=TEXT: exactly one of them")
        if oversize not in _OVERSIZE:
            raise ValueError("oversize must be 'fail' or 'eager', not %r" % (oversize,))
        if "\0" in name:
            raise ValueError("name %r holds a NUL character" % (name,))
        self._lock = threading.RLock()
        self._handle = None
        self._closed = False
        self._views = 0  # recap.Tensor objects alive: the native pipeline outlives them
        self._handoff = None  # the stream handshakes' event, made on first use
        self._bound = {}
        opts = PipelineOptions()
        opts.struct_size = ctypes.sizeof(PipelineOptions)
        if device is not None:
            opts.override_device = 1
            opts.device = _parse_device(device)
        if eager:
            opts.override_mode, opts.mode = 1, 1  # RECAP_MODE_EAGER
        opts.oversize = _OVERSIZE[oversize]
        self.oversize = oversize
        if entry is not None:
            opts.entry = entry.encode()
        if dims:
            # Kept referenced until the call returns: recap reads the strings during create.
            items = ["%s=%s" % (k, ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v)
                     for k, v in dims.items()]
            arr = (ctypes.c_char_p * (len(items) + 1))(*[s.encode() for s in items], None)
            opts.dims = arr
        handle = ctypes.c_void_p()
        if yaml is not None:
            text = yaml if isinstance(yaml, bytes) else yaml.encode()
            create_on_host_without_gpu(
                lambda o: lib().recap_pipeline_create_string(text, len(text), name.encode(),
                                                             ctypes.byref(o),
                                                             ctypes.byref(handle)),
                opts, "recap_pipeline_create_string")
        else:
            create_on_host_without_gpu(
                lambda o: lib().recap_pipeline_create_file(os.fsencode(path), ctypes.byref(o),
                                                           ctypes.byref(handle)),
                opts, "recap_pipeline_create_file")
        self._handle = handle.value
        info = PipelineInfo()
        check(lib().recap_pipeline_info_get(self._handle, ctypes.byref(info)),
              "recap_pipeline_info_get")
        self.name = info.name.decode()
        self.device = Device(info.device.backend, info.device.index)
        self.buckets = tuple(info.bucket_values[i] for i in range(info.num_buckets))
        self.bucket_dim = info.bucket_dim.decode() if info.bucket_dim else None
        self.tensors = []
        for i in range(info.num_tensors):
            t = TensorInfo()
            check(lib().recap_pipeline_tensor_info_get(self._handle, i, ctypes.byref(t)),
                  "recap_pipeline_tensor_info_get")
            self.tensors.append(TensorSpec(t))
        self._by_name = {t.name: t for t in self.tensors}
        # In the order the spec's `outputs:` lists them.
        self.outputs = [t.name for t in sorted((t for t in self.tensors if t.is_output),
                                               key=lambda t: t._output_position)]

    def close(self):
        """Ends the pipeline: waits for its work, and frees it once no view of it is referenced
        (at once when none is). Memory taken by bind_param goes back to its owner then."""
        with self._lock:
            self._closed = True
            if self._views == 0:
                self._destroy()

    def _view_made(self):
        with self._lock:
            self._views += 1

    def _view_gone(self):
        # A finalizer: it may run on any thread, inside any call of this pipeline's (the lock
        # is reentrant), and nothing can report an error from it.
        with self._lock:
            self._views -= 1
            if self._closed and self._views == 0:
                try:
                    self._destroy()
                except RecapError:
                    pass

    def _destroy(self):
        if self._handle:
            check(lib().recap_pipeline_destroy(self._handle), "recap_pipeline_destroy")
            self._handle = None
        if self._handoff:
            # CUDA keeps a recorded event's resources until the waits on it are done.
            check(lib().recap_event_destroy(self._handoff), "recap_event_destroy")
            self._handoff = None
        for imported, _ in self._bound.values():
            imported.release()
        self._bound.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # Views hold their pipeline, so none is left when it is collected.
        if getattr(self, "_handle", None):
            try:
                self._destroy()
            except RecapError:
                pass  # nothing to report to from a finalizer; close() raises when called

    def _live(self):
        if self._closed or not self._handle:
            raise ValueError("the pipeline is closed")
        return self._handle

    def _spec(self, name):
        spec = self._by_name.get(name)
        if spec is None:
            # recap's own message and status for the unknown name (RecapError).
            check(lib().recap_pipeline_tensor(self._live(), name.encode(), TensorView()),
                  "recap_pipeline_tensor")
            raise KeyError("pipeline %r has no tensor %r" % (self.name, name))
        return spec

    def _batch(self, batch):
        """batch checked: an int in [0, 2^63), and with oversize="fail" at most the largest
        bucket (0 is the largest bucket whole)."""
        batch = checked_int("batch", batch, 0, INT64_MAX)
        if self.bucket_dim and self.oversize == "fail" and batch > self.buckets[-1]:
            raise ValueError("batch %d is above the largest bucket of %s (%s); Pipeline(..., "
                             "oversize=\"eager\") runs the largest bucket's rows instead"
                             % (batch, self.bucket_dim, ", ".join(map(str, self.buckets))))
        return batch

    def tensor(self, name, batch=None):
        """A view of tensor `name`'s buffer: the whole buffer (the largest bucket's shape), or
        with `batch`, the rows a run with that batch uses, laid out as its bucket lays them."""
        with self._lock:
            return self._tensor(name, None if batch is None else self._batch(batch))

    def _tensor(self, name, batch):
        spec = self._spec(name)
        view = TensorView()
        check(lib().recap_pipeline_tensor(self._live(), name.encode(), ctypes.byref(view)),
              "recap_pipeline_tensor")
        shape = [view.shape[i] for i in range(view.ndim)]
        axis = spec.bucket_axis
        if batch is None or axis < 0 or not self.bucket_dim or batch == 0:
            strides = [view.strides[i] for i in range(view.ndim)]
            return Tensor(self, name, view.data, view.dtype, shape, strides)
        largest = self.buckets[-1]
        bucket = next((b for b in self.buckets if b >= batch), largest)
        # Each bucket packs its rows from the start of the buffer in its own row-major shape
        # (recap.h, recap_pipeline_copy_in), so the strides are those of the bucket's shape.
        per_row = shape[axis] // largest
        shape[axis] = per_row * bucket
        strides, step = [0] * len(shape), 1
        for i in reversed(range(len(shape))):
            strides[i], step = step, step * shape[i]
        shape[axis] = per_row * min(batch, bucket)
        return Tensor(self, name, view.data, view.dtype, shape, strides)

    def input(self, name, batch=None):
        """The static buffer of an input (or state, scalar or param) to write into before
        run(); an op's output is a ValueError (read it with tensor() or from run())."""
        if self._spec(name).role == "intermediate":
            raise ValueError("%r is an op's output, not an input" % name)
        return self.tensor(name, batch)

    def run(self, batch=0, *, stream=None, wait=True):
        """Runs with `batch` real rows (0: the largest bucket whole) and returns the output's
        view (a dict of views by name when the spec has several), valid until the next run.

        On the GPU the run first waits (on the device, not the host) for the work submitted
        so far to `stream`, the caller's CUDA stream that wrote the inputs: None is the legacy
        default stream (torch's default), otherwise DLPack's values (1 legacy default, 2
        per-thread default, a cudaStream_t handle, -1: no wait, the caller ordered it) or a
        stream object with a `cuda_stream` handle (torch.cuda.Stream). wait=True returns when
        the outputs are ready; wait=False returns once the run is submitted, and consumers
        order themselves after it through the views' DLPack handshake or order_before()."""
        batch = self._batch(batch)
        with self._lock:
            handle = self._live()
            self._handshake(stream, ours_first=False)
            if wait:
                check(lib().recap_pipeline_run(handle, batch), "recap_pipeline_run")
            else:
                check(lib().recap_pipeline_run_async(handle, batch, None),
                      "recap_pipeline_run_async")
            views = {n: self._tensor(n, batch if batch else None) for n in self.outputs}
        return views[self.outputs[0]] if len(views) == 1 else views

    def bind_param(self, name, tensor):
        """Points param (or input, state, scalar) `name` at the memory of `tensor`, any
        DLPack producer's (a torch tensor, a numpy array) of the same device, dtype and
        size, contiguous. No copy: recap reads and writes that memory from now on, and the
        graphs are recaptured once (for weights and long-lived buffers, not per call). The
        tensor stays referenced until the next bind of this name or close()."""
        with self._lock:
            self._bind_param(name, tensor)

    def _bind_param(self, name, tensor):
        spec = self._spec(name)
        handle = self._live()
        if not hasattr(tensor, "__dlpack__"):
            raise TypeError("bind_param(%r): %s is not a DLPack tensor (no __dlpack__)"
                            % (name, type(tensor).__name__))
        want_device = _dlpack_device(self.device)
        # The device is checked before the capsule is asked for: a producer may refuse a
        # stream for a device that has none (torch asserts on a CPU tensor given a stream).
        if hasattr(tensor, "__dlpack_device__"):
            given = tuple(tensor.__dlpack_device__())
            if given != want_device:
                raise ValueError("bind_param(%r): the given tensor is on %s, the pipeline on %s"
                                 % (name, _device_name(given), _device_name(want_device)))
        if self.device.backend == BACKEND_CUDA:
            # The producer orders its pending writes before recap's stream (DLPack: the
            # consumer's stream is passed; recap's streams are never the legacy default).
            capsule = tensor.__dlpack__(stream=lib().recap_stream_native(
                lib().recap_pipeline_stream(handle)))
        else:
            capsule = tensor.__dlpack__()
        imported = _dlpack.Imported(capsule)
        try:
            _, code, bits = _dlpack.DTYPES[spec.dtype_code]
            problem = None
            if imported.device != want_device:
                problem = "is on %s, the pipeline on %s" % (_device_name(imported.device),
                                                            _device_name(want_device))
            elif imported.dtype != (code, bits, 1):
                problem = "has dtype %s, the tensor is %s" % (_dlpack.dtype_name(imported.dtype),
                                                             spec.dtype)
            elif tuple(imported.shape) != spec.shape:
                problem = "has shape %r, the tensor %r" % (tuple(imported.shape), spec.shape)
            elif not imported.is_contiguous():
                problem = "is not contiguous"
            if problem:
                raise ValueError("bind_param(%r): the given tensor %s" % (name, problem))
            check(lib().recap_pipeline_rebind(handle, name.encode(), imported.data),
                  "recap_pipeline_rebind")
        except Exception:
            imported.release()
            raise
        previous = self._bound.pop(name, None)
        self._bound[name] = (imported, tensor)
        if previous:
            # Runs submitted without waiting may still read the old memory, and its owner may
            # reuse it once released (torch's allocator orders that on its own streams only).
            check(lib().recap_stream_synchronize(lib().recap_pipeline_stream(handle)),
                  "recap_stream_synchronize")
            previous[0].release()

    def order_before(self, stream=None):
        """The caller's CUDA stream waits (on the device) for the work recap has submitted so
        far: an event recorded on the pipeline's stream that `stream` waits on (the values of
        run()'s `stream`; -1 does nothing). The host backend synchronizes instead. Views'
        __dlpack__(stream=S) does this for their consumer."""
        self._handshake(stream, ours_first=True)

    def order_after(self, stream=None):
        """recap's later work waits (on the device) for the work submitted so far to the
        caller's CUDA stream (an event recorded on it that the pipeline's stream waits on).
        run() does this with its `stream`. Nothing to do on the host backend."""
        self._handshake(stream, ours_first=False)

    def _handshake(self, stream, ours_first):
        with self._lock:
            self._handshake_locked(stream, ours_first)

    def _handshake_locked(self, stream, ours_first):
        handle = self._live()
        ours = lib().recap_pipeline_stream(handle)
        theirs = _native_stream(stream)
        if self.device.backend == BACKEND_HOST:
            if theirs not in (None, 1):
                raise ValueError("the host backend has no CUDA streams (stream=%r)" % (stream,))
            if ours_first:
                # The host backend may still be running the last submitted work on its stream.
                check(lib().recap_stream_synchronize(ours), "recap_stream_synchronize")
            return
        if theirs is None:
            return
        if not self._handoff:
            # One event serves every handshake: a wait takes the event's latest record at the
            # time it is submitted, so recording it again later does not move earlier waits.
            event = ctypes.c_void_p()
            check(lib().recap_event_create(self.device, 0, ctypes.byref(event)),
                  "recap_event_create")
            self._handoff = event.value
        if ours_first:
            check(lib().recap_event_record(self._handoff, ours), "recap_event_record")
            check(lib().recap_native_stream_wait_event(theirs, self._handoff),
                  "recap_native_stream_wait_event")
        else:
            check(lib().recap_event_record_native(self._handoff, theirs),
                  "recap_event_record_native")
            check(lib().recap_stream_wait_event(ours, self._handoff), "recap_stream_wait_event")


def _native_stream(stream):
    """The cudaStream_t handle a DLPack stream argument names, or None for "no ordering" (-1).
    DLPack's CUDA values (array API, __dlpack__): None and 1 are the legacy default stream
    (cudaStreamLegacy, handle 1), 2 the per-thread default stream (cudaStreamPerThread, handle
    2), larger values a stream's handle; 0 is disallowed (it means either default stream).
    An object with `cuda_stream` (torch.cuda.Stream) gives its handle, where torch's 0 is the
    legacy default stream."""
    if stream is None:
        return 1
    if hasattr(stream, "cuda_stream"):
        return stream.cuda_stream or 1
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError("stream must be an int, None or a stream with cuda_stream, not %s"
                        % type(stream).__name__)
    if stream == -1:
        return None
    if stream == 0:
        raise ValueError("stream=0 is ambiguous for CUDA and not allowed by DLPack: pass 1 "
                         "(legacy default stream) or 2 (per-thread default stream)")
    if stream < 0:
        raise ValueError("stream=%d is not a CUDA stream (-1: no ordering, 1, 2, or a "
                         "cudaStream_t handle)" % stream)
    return stream


def _parse_device(text):
    """"host", "cuda" or "cuda:N" as a Device; ValueError for anything else."""
    backend, _, index = text.partition(":")
    kind = ctypes.c_int()
    check(lib().recap_backend_parse(backend.encode(), ctypes.byref(kind)), "recap_backend_parse")
    if index and not (index.isdigit() and int(index) <= INT32_MAX):
        raise ValueError("device %r: the index after ':' must be a device number (cuda:0)"
                         % (text,))
    return Device(kind.value, int(index) if index else 0)


def _dlpack_device(device):
    if device.backend == BACKEND_CUDA:
        return (_dlpack.KDL_CUDA, device.index)
    return (_dlpack.KDL_CPU, 0)


def _device_name(dl_device):
    kind, index = dl_device
    if kind == _dlpack.KDL_CUDA:
        return "cuda:%d" % index
    return "cpu" if kind == _dlpack.KDL_CPU else "DLPack device %r" % (tuple(dl_device),)
