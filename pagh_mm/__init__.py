"""pagh_mm: Pagh's compressed matrix multiplication (Count-Sketch + XOR convolution).

Find and estimate the large entries of A @ B without computing it::

    import pagh_mm
    sk = pagh_mm.compress(A, B, buckets=2**16, reps=5, seed=0)
    top = sk.top_k(100, verify=True)      # rows, cols, estimates, exact values, certificate
    cov = pagh_mm.compress_gram(X, k=20)  # X.T @ X: one hash on both sides, diagonal exact
    C_hat = pagh_mm.approx_matmul(A, B)    # dense estimate
"""
from fwht_gpu.memory import InsufficientMemoryError

from .compressed import CompressedProduct, Entries
from .query import CertificateWarning
from .exact import ExactValueWarning
from .hashing import DEFAULT_FAMILY as DEFAULT_HASH
from .hashing import FAMILIES as HASH_FAMILIES
from .matmul import approx_matmul, compress, compress_gram, default_buckets
from .sketchfile import LegacyHashWarning, SketchFileError

__version__ = "0.1.0"
__all__ = ["compress", "compress_gram", "approx_matmul", "CompressedProduct", "Entries", "CertificateWarning", "default_buckets",
           "HASH_FAMILIES", "DEFAULT_HASH", "InsufficientMemoryError", "ExactValueWarning",
           "LegacyHashWarning", "SketchFileError",
           "__version__"]
