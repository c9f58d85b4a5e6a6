"""recap from Python: pipelines over librecap.so (ctypes, standard library only), with
zero-copy DLPack views of recap's buffers. See python/README.md."""
from ._native import RecapError
from .generator import Generator, RequestState, check_request
from .pipeline import Pipeline, Tensor, TensorSpec

__all__ = ["Generator", "Pipeline", "RecapError", "RequestState", "Tensor", "TensorSpec",
           "check_request"]
__version__ = "0.1.0"
