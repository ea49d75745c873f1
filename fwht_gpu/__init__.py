"""fwht_gpu: Fast Walsh-Hadamard transforms on NumPy and CuPy arrays.

FP64, FP32, FP16 and bfloat16; the Folklore and Alman-Rao algorithms; Kahan and
Neumaier stabilized butterflies.  The NumPy engine is the specification: the
GPU engine executes the same :class:`Plan` and returns the same bits.

The research instruments are submodules: :mod:`fwht_gpu.reference` (exact and
double-double references, error metrics), :mod:`fwht_gpu.accuracy` (the thesis's
stability study), :mod:`fwht_gpu.bench` and :mod:`fwht_gpu.cpubench` (the performance
studies on the GPU and the CPU); :mod:`fwht_gpu.gpu` is the GPU face (availability,
device limits, kernel modules) for packages built on this one.
"""
from .dtypes import bfloat16
from .memory import InsufficientMemoryError
from .overflow import TransformOverflowError, errstate, geterr
from .plan import Pass, Plan, Stage, make_plan
from .transform import FWHT, fwht, ifwht, operation_count, run_plan
from .tuning import Tuning
from .variants import ALGORITHMS, STABILIZERS, VARIANTS
from .cuda.device import pinned_empty

__version__ = "0.1.0"


__all__ = [
    "fwht", "ifwht", "FWHT", "make_plan", "Plan", "Pass", "Stage", "Tuning", "run_plan",
    "operation_count", "TransformOverflowError", "errstate", "geterr", "InsufficientMemoryError", "bfloat16",
    "pinned_empty", "ALGORITHMS", "STABILIZERS", "VARIANTS", "__version__",
]
