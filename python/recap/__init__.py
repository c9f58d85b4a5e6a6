"""recap from Python: pipelines over librecap.so (ctypes, standard library only), with
zero-copy DLPack views of recap's buffers. See python/README.md."""
from ._native import RecapError
from .pipeline import Pipeline, Tensor, TensorSpec

__all__ = ["Pipeline", "RecapError", "Tensor", "TensorSpec"]
__version__ = "0.1.0"
