"""librecap.so through ctypes: where it is found, the C structs this package passes, and errors.

The structs mirror include/recap.h field for field; ctypes lays them out as the C compiler does,
so only the order and the types have to match. Size-prefixed structs (recap.h's conventions)
get struct_size = ctypes.sizeof(...), which is what RECAP_*_INIT would set in C.
"""
import ctypes
import os
import sys
import warnings

SONAME = "librecap.so.0"
ABI_MAJOR = "0"  # the N of librecap.so.N: a library of another ABI is refused


class RecapError(Exception):
    """A recap call failed: `status` is its recap_status (negative), `status_name` its name
    ("RECAP_STATUS_SPEC_ERROR") and `message` recap's complete detail message."""

    def __init__(self, status, status_name, message, call):
        self.status, self.status_name, self.message, self.call = status, status_name, message, call
        super().__init__("%s: %s: %s" % (call, status_name, message))


class Device(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_int), ("index", ctypes.c_int)]

    def __repr__(self):
        return "cuda:%d" % self.index if self.backend == BACKEND_CUDA else "host"


def checked_int(what, value, low, high):
    """value as an int in [low, high], else TypeError or ValueError naming `what`: ctypes would
    wrap it silently (2**32 + 1 becomes 1)."""
    if isinstance(value, bool):
        # True is an int to Python, but batch=True or seed=False is a slip, not a number.
        raise TypeError("%s must be an integer, not bool" % what)
    if not isinstance(value, int):
        try:
            value = value.__index__()  # numpy integers
        except (AttributeError, TypeError):
            raise TypeError("%s must be an integer, not %s" % (what, type(value).__name__))
    if not low <= value <= high:
        raise ValueError("%s = %d is outside [%d, %d]" % (what, value, low, high))
    return value


INT32_MAX, INT64_MAX, UINT64_MAX = 2**31 - 1, 2**63 - 1, 2**64 - 1


MAX_DIMS = 4
BACKEND_HOST, BACKEND_CUDA = 0, 1


class TensorView(ctypes.Structure):  # recap_tensor
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("strides", ctypes.c_int64 * MAX_DIMS)]


class TensorInit(ctypes.Structure):  # recap_tensor_init
    _fields_ = [("kind", ctypes.c_int), ("mean", ctypes.c_double), ("std", ctypes.c_double),
                ("low", ctypes.c_double), ("high", ctypes.c_double), ("value", ctypes.c_double),
                ("path", ctypes.c_char_p), ("key", ctypes.c_char_p)]


class TensorInfo(ctypes.Structure):  # recap_tensor_info
    _fields_ = [("name", ctypes.c_char_p), ("role", ctypes.c_int), ("is_output", ctypes.c_int),
                ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * MAX_DIMS), ("bytes", ctypes.c_size_t),
                ("bucket_axis", ctypes.c_int), ("init", TensorInit)]


class PipelineOptions(ctypes.Structure):  # recap_pipeline_options
    _fields_ = [("struct_size", ctypes.c_size_t), ("override_device", ctypes.c_int),
                ("device", Device), ("override_mode", ctypes.c_int), ("mode", ctypes.c_int),
                ("capture_mode_set", ctypes.c_int), ("capture_mode", ctypes.c_int),
                ("warmup", ctypes.c_int), ("warmup_set", ctypes.c_int),
                ("max_recaptures", ctypes.c_int), ("oversize", ctypes.c_int),
                ("base_dir", ctypes.c_char_p), ("stream", ctypes.c_void_p),
                ("dims", ctypes.POINTER(ctypes.c_char_p)), ("no_fusion", ctypes.c_int),
                ("entry", ctypes.c_char_p), ("share", ctypes.c_void_p)]


class PipelineInfo(ctypes.Structure):  # recap_pipeline_info
    _fields_ = [("name", ctypes.c_char_p), ("device", Device), ("mode", ctypes.c_int),
                ("num_buckets", ctypes.c_size_t),
                ("bucket_values", ctypes.POINTER(ctypes.c_int64)),
                ("bucket_dim", ctypes.c_char_p), ("launches", ctypes.c_size_t),
                ("num_ops", ctypes.c_size_t), ("fused_ops", ctypes.c_size_t),
                ("draws_random", ctypes.c_int), ("num_tensors", ctypes.c_size_t),
                ("entry", ctypes.c_char_p)]


class GeneratorOptions(ctypes.Structure):  # recap_generator_options
    _fields_ = [("struct_size", ctypes.c_size_t), ("kv_bytes", ctypes.c_size_t),
                ("kv_fraction", ctypes.c_double), ("max_running", ctypes.c_int),
                ("prefill_budget", ctypes.c_int), ("override_device", ctypes.c_int),
                ("device", Device), ("eager", ctypes.c_int), ("base_dir", ctypes.c_char_p),
                ("quiet", ctypes.c_int)]


class GeneratorStats(ctypes.Structure):  # recap_generator_stats (filled by the library)
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "steps", "prefill_steps", "decode_steps", "graph_steps", "eager_steps", "submitted",
        "finished", "cancelled", "preemptions", "tokens_out")] + \
        [(name, ctypes.c_size_t) for name in (
            "kv_blocks", "kv_blocks_used", "block_size", "running", "waiting")] + \
        [("ready_ms", ctypes.c_double), ("loop_launches", ctypes.c_uint64),
         ("loop_steps", ctypes.c_uint64), ("kv_blocks_peak", ctypes.c_size_t)]


class Request(ctypes.Structure):  # recap_request
    _fields_ = [("struct_size", ctypes.c_size_t), ("prompt", ctypes.POINTER(ctypes.c_int32)),
                ("prompt_len", ctypes.c_size_t), ("max_new_tokens", ctypes.c_int),
                ("temperature", ctypes.c_float), ("top_p", ctypes.c_float),
                ("min_p", ctypes.c_float), ("top_k", ctypes.c_int), ("has_seed", ctypes.c_int),
                ("seed", ctypes.c_uint64), ("stop_ids", ctypes.POINTER(ctypes.c_int32)),
                ("num_stop_ids", ctypes.c_int), ("on_token", ctypes.c_void_p),
                ("user", ctypes.c_void_p)]


class RequestStatus(ctypes.Structure):  # recap_request_status
    _fields_ = [("state", ctypes.c_int), ("finish", ctypes.c_int),
                ("num_tokens", ctypes.c_size_t), ("seed", ctypes.c_uint64),
                ("preemptions", ctypes.c_uint32), ("ttft_ms", ctypes.c_double),
                ("error", ctypes.c_int)]


def _candidates():
    """Where the library is looked for, in order, as (place, path) pairs."""
    env = os.environ.get("RECAP_LIBRARY")
    if env:
        # An explicit choice is the only one tried: falling back would hide a typo.
        return [("RECAP_LIBRARY", env)]
    places = []
    # The prefix the package was installed into: PREFIX/lib/pythonX.Y/site-packages/recap
    # has PREFIX/lib above it, where recap's install puts librecap.so.0 (docs/PACKAGING.md).
    here = os.path.dirname(os.path.abspath(__file__))
    parent = os.path.dirname(here)
    while parent != os.path.dirname(parent):
        if os.path.basename(parent) in ("lib", "lib64"):
            places.append(("installed prefix", os.path.join(parent, SONAME)))
            break
        parent = os.path.dirname(parent)
    places.append(("sys.prefix", os.path.join(sys.prefix, "lib", SONAME)))
    # The soname alone: the loader's own search (LD_LIBRARY_PATH, ld.so.cache, default folders).
    places.append(("loader path", SONAME))
    return places


def _load():
    tried = []
    for place, path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append("%s: %s (no such file)" % (place, path))
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s: %s (%s)" % (place, path, e))
            continue
        _declare(lib)
        version = lib.recap_version().decode()
        if version.split(".")[0] != ABI_MAJOR:
            raise ImportError("recap: %s is librecap %s, this package needs ABI %s (0.x)"
                              % (path, version, ABI_MAJOR))
        return lib
    raise ImportError("recap: librecap.so.0 not found; set RECAP_LIBRARY to its path. Tried:\n  "
                      + "\n  ".join(tried))


def _declare(lib):
    """Argument and result types of every function used, so ctypes converts pointers and
    64-bit integers correctly instead of guessing int."""
    p, st, sz, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_int64
    cstr = ctypes.c_char_p
    sigs = {
        "recap_version": (cstr, []),
        "recap_status_name": (cstr, [st]),
        "recap_last_error_full": (cstr, []),
        "recap_pipeline_create_file": (st, [cstr, p, ctypes.POINTER(p)]),
        "recap_pipeline_create_string": (st, [cstr, sz, cstr, p, ctypes.POINTER(p)]),
        "recap_pipeline_destroy": (st, [p]),
        "recap_pipeline_run": (st, [p, i64]),
        "recap_pipeline_run_async": (st, [p, i64, ctypes.POINTER(p)]),
        "recap_pipeline_tensor": (st, [p, cstr, ctypes.POINTER(TensorView)]),
        "recap_pipeline_rebind": (st, [p, cstr, p]),
        "recap_pipeline_info_get": (st, [p, ctypes.POINTER(PipelineInfo)]),
        "recap_pipeline_tensor_info_get": (st, [p, sz, ctypes.POINTER(TensorInfo)]),
        "recap_pipeline_stream": (p, [p]),
        "recap_stream_synchronize": (st, [p]),
        "recap_stream_native": (p, [p]),
        "recap_stream_wait_event": (st, [p, p]),
        "recap_event_record_native": (st, [p, p]),
        "recap_native_stream_wait_event": (st, [p, p]),
        "recap_event_create": (st, [Device, ctypes.c_uint, ctypes.POINTER(p)]),
        "recap_event_record": (st, [p, p]),
        "recap_event_destroy": (st, [p]),
        "recap_backend_parse": (st, [cstr, ctypes.POINTER(ctypes.c_int)]),
        "recap_device_is_available": (ctypes.c_int, [ctypes.c_int]),
        "recap_backend_compiled": (ctypes.c_int, [ctypes.c_int]),
        "recap_generator_create": (st, [cstr, ctypes.POINTER(GeneratorOptions),
                                        ctypes.POINTER(p)]),
        "recap_request_check": (st, [ctypes.POINTER(Request), ctypes.c_int64, ctypes.c_int64]),
        "recap_generator_submit": (st, [p, ctypes.POINTER(Request),
                                        ctypes.POINTER(ctypes.c_uint64),
                                        ctypes.POINTER(ctypes.c_uint64)]),
        "recap_generator_poll": (st, [p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_int32), sz,
                                      ctypes.POINTER(RequestStatus)]),
        "recap_generator_wait": (st, [p, ctypes.c_uint64, ctypes.c_double]),
        "recap_generator_cancel": (st, [p, ctypes.c_uint64]),
        "recap_generator_release": (st, [p, ctypes.c_uint64]),
        "recap_generator_stats_get": (st, [p, ctypes.POINTER(GeneratorStats)]),
        "recap_generator_destroy": (st, [p]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes


_lib = None


def lib():
    """The loaded library, loaded on first use so that `import recap` itself never fails."""
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib


def check(status, call):
    """Raises RecapError for a failed status, with the thread's detail message (read at once:
    it is valid only until the next recap call on this thread)."""
    if status != 0:
        message = lib().recap_last_error_full().decode(errors="replace")
        name = lib().recap_status_name(status).decode()
        raise RecapError(status, name, message, call)


def create_on_host_without_gpu(create, opts, call):
    """create(opts) -> status, as recap's CLI loads a spec: without a device given, a spec whose
    CUDA device this machine or build cannot run falls back to the host backend (CPU), with a
    RuntimeWarning saying so. Any other failure raises RecapError as check() does."""
    status = create(opts)
    if status == 0 or opts.override_device or lib().recap_device_is_available(BACKEND_CUDA):
        check(status, call)
        return
    # Not knowing the spec's device before it loads, retry on the host: a spec that failed
    # for another reason fails again there with its own message.
    opts.override_device, opts.device = 1, Device(BACKEND_HOST, 0)
    check(create(opts), call)
    why = ("this build of recap has no CUDA backend" if not lib().recap_backend_compiled(BACKEND_CUDA)
           else "no CUDA GPU on this machine")
    warnings.warn("recap: %s: running on the host backend (CPU); device=\"host\" says so "
                  "without this warning" % why, RuntimeWarning, stacklevel=3)
