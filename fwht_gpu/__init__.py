"""fwht_gpu: Fast Walsh-Hadamard transforms on NumPy and CuPy arrays.

FP64, FP32, FP16 and bfloat16; the Folklore and Alman-Rao algorithms; Kahan and
Neumaier stabilized butterflies.  The NumPy engine is the specification: the
GPU engine executes the same :class:`Plan` and returns the same bits.
"""
from .dtypes import bfloat16
from .memory import InsufficientMemoryError
from .plan import Pass, Plan, Stage, make_plan
from .reference import (
    DD,
    dd_fwht,
    max_relative_error,
    mean_absolute_error,
    mean_relative_error,
    mp_fwht,
    reference_fwht,
)
from .transform import TransformOverflowError, fwht, ifwht, operation_count, run_plan

__version__ = "0.1.0"


def pinned_empty(shape, dtype):
    """Page-locked NumPy array (needs CuPy): the fast input/output for ``device="cuda"``."""
    from .cuda.launch import pinned_empty as _pe
    return _pe(shape, dtype)



__all__ = [
    "fwht", "ifwht", "make_plan", "Plan", "Pass", "Stage", "run_plan", "operation_count",
    "TransformOverflowError", "bfloat16", "reference_fwht", "dd_fwht", "mp_fwht", "DD",
    "mean_relative_error", "max_relative_error", "mean_absolute_error", "pinned_empty",
    "InsufficientMemoryError", "__version__",
]
