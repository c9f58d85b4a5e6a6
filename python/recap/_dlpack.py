"""DLPack (https://dmlc.github.io/dlpack/latest/) by ctypes: the C structs of dlpack.h, a
"dltensor" capsule for a recap buffer, and the consumption of another library's capsule.

The structs follow dlpack.h's ABI (unversioned DLManagedTensor, the one every consumer
accepts: numpy >= 1.22, torch >= 1.10).
"""
import ctypes

KDL_CPU, KDL_CUDA = 1, 2
KDL_INT, KDL_FLOAT, KDL_BFLOAT = 0, 2, 4

# recap_dtype (RECAP_DTYPE_MAP order: f32, f16, bf16, i32, i64) -> (name, DLPack code, bits).
DTYPES = [("f32", KDL_FLOAT, 32), ("f16", KDL_FLOAT, 16), ("bf16", KDL_BFLOAT, 16),
          ("i32", KDL_INT, 32), ("i64", KDL_INT, 64)]


_CODE_NAMES = {KDL_INT: "i", KDL_FLOAT: "f", KDL_BFLOAT: "bf", 1: "u", 5: "c", 6: "bool"}


def dtype_name(dtype):
    """A DLPack (code, bits, lanes) as recap names dtypes ("f64", "u8"), for messages."""
    code, bits, lanes = dtype
    name = _CODE_NAMES.get(code, "code%d:" % code)
    name = name if name == "bool" else "%s%d" % (name, bits)
    return name if lanes == 1 else "%sx%d" % (name, lanes)


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", DELETER)]

UNUSED, USED = b"dltensor", b"used_dltensor"

_api = ctypes.pythonapi
_api.PyCapsule_New.restype, _api.PyCapsule_New.argtypes = (
    ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p])
# The destructor receives the capsule while it is being freed: take it as a plain pointer, so
# ctypes does not touch its reference count.
for _name, _res, _args in [("PyCapsule_IsValid", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
                           ("PyCapsule_GetPointer", ctypes.c_void_p,
                            [ctypes.c_void_p, ctypes.c_char_p])]:
    getattr(_api, _name).restype, getattr(_api, _name).argtypes = _res, _args
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

# Exported tensors alive in a consumer, by the address of their DLManagedTensor: the struct,
# its shape and strides arrays and the owner (the view, which holds the pipeline) stay
# referenced here until the consumer calls the deleter, so recap's buffer outlives the capsule.
_live = {}


@DELETER
def _deleter(managed):
    # Called by the consumer, possibly on another thread (ctypes takes the GIL for us).
    _live.pop(ctypes.addressof(managed.contents), None)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    # A capsule never consumed still owns its tensor; a consumed one was renamed USED and its
    # consumer calls the deleter itself.
    if _api.PyCapsule_IsValid(capsule, UNUSED):
        _live.pop(_api.PyCapsule_GetPointer(capsule, UNUSED), None)


def export(owner, data, device_type, device_id, dtype, shape, strides):
    """A "dltensor" capsule describing `data` (strides in elements) that keeps `owner` alive
    until the consumer is done with it."""
    ndim = len(shape)
    managed = DLManagedTensor()
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
    _, code, bits = DTYPES[dtype]
    t = managed.dl_tensor
    t.data, t.ndim, t.byte_offset = data, ndim, 0
    t.device = DLDevice(device_type, device_id)
    t.dtype = DLDataType(code, bits, 1)
    t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
    managed.deleter = _deleter
    address = ctypes.addressof(managed)
    _live[address] = (managed, shape_arr, strides_arr, owner)
    return _api.PyCapsule_New(address, UNUSED, ctypes.cast(_capsule_destructor, ctypes.c_void_p))


class Imported:
    """Another library's tensor taken from its capsule: the memory stays valid until release()
    calls its deleter (the protocol's consumer side: the capsule is renamed USED)."""

    def __init__(self, capsule):
        if not _api.PyCapsule_IsValid(id(capsule), UNUSED):
            raise TypeError("not an unconsumed DLPack capsule (\"dltensor\")")
        self._managed = ctypes.cast(_api.PyCapsule_GetPointer(id(capsule), UNUSED),
                                    ctypes.POINTER(DLManagedTensor))
        _api.PyCapsule_SetName(capsule, USED)
        t = self._managed.contents.dl_tensor
        self.data = (t.data or 0) + t.byte_offset
        self.device = (t.device.device_type, t.device.device_id)
        self.dtype = (t.dtype.code, t.dtype.bits, t.dtype.lanes)
        self.shape = [t.shape[i] for i in range(t.ndim)]
        self.strides = [t.strides[i] for i in range(t.ndim)] if t.strides else None

    def is_contiguous(self):
        if self.strides is None:
            return True
        expected = 1
        for extent, stride in zip(reversed(self.shape), reversed(self.strides)):
            if extent != 1 and stride != expected:
                return False
            expected *= extent
        return True

    def release(self):
        if self._managed:
            deleter = self._managed.contents.deleter
            if deleter:
                deleter(self._managed)
            self._managed = None
