"""The one registry of transform variants and of the wide compute-dtype rule.

A *variant* is an (algorithm, stabilizer, wide) choice: ``wide`` computes inside each pass
in the next wider dtype (:func:`wide_dtype`) and rounds where the pass writes back.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ALGORITHMS = ("folklore", "alman")
#: "kahan"/"neumaier": thesis 3.3.1/3.3.2, an error vector carried through every stage and
#: folded in at the end; "-pass": the compensation lives only within a pass and is folded
#: in where the pass writes back (no error vector in device memory).
STABILIZERS = (None, "kahan", "neumaier", "kahan-pass", "neumaier-pass")


@dataclass(frozen=True)
class Variant:
    """A named transform variant."""

    name: str
    algorithm: str
    stabilizer: str | None = None
    wide: bool = False

    def compute_dtype(self, dtype) -> np.dtype | None:
        """The ``compute_dtype`` argument for ``dtype`` data (None: compute in the data's dtype;
        a wide variant of float64 data has no wider dtype and also gives None)."""
        return wide_dtype(dtype) if self.wide else None

    def applies_to(self, dtype) -> bool:
        """Whether the variant exists for ``dtype`` (a wide variant needs a wider dtype)."""
        return not self.wide or wide_dtype(dtype) is not None

    def kwargs(self, dtype) -> dict:
        """Keyword arguments of :func:`fwht_gpu.fwht` for this variant on ``dtype`` data."""
        return dict(algorithm=self.algorithm, stabilizer=self.stabilizer,
                    compute_dtype=self.compute_dtype(dtype))


#: Every variant, Folklore first.
VARIANTS = {v.name: v for v in (
    Variant("folklore", "folklore"),
    Variant("kahan", "folklore", "kahan"),
    Variant("neumaier", "folklore", "neumaier"),
    Variant("kahan-pass", "folklore", "kahan-pass"),
    Variant("neumaier-pass", "folklore", "neumaier-pass"),
    Variant("alman", "alman"),
    Variant("compute", "folklore", wide=True),
    Variant("alman-compute", "alman", wide=True),
)}

_WIDER = {2: np.dtype(np.float32), 4: np.dtype(np.float64)}


def wide_dtype(dtype) -> np.dtype | None:
    """The wider compute dtype of ``dtype`` data: float32 for float16/bfloat16, float64 for
    float32, None for float64."""
    return _WIDER.get(np.dtype(dtype).itemsize)


def variant(name: str) -> Variant:
    """The variant called ``name``; ValueError listing the names otherwise."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise ValueError(f"variant {name!r}; choose one of {', '.join(VARIANTS)}") from None


def check(algorithm: str, stabilizer: str | None) -> None:
    """ValueError naming the argument and the choices for an unknown or invalid combination."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r}; choose one of {ALGORITHMS}")
    if stabilizer not in STABILIZERS:
        raise ValueError(f"stabilizer={stabilizer!r}; choose one of None, 'kahan', 'neumaier', "
                         "'kahan-pass', 'neumaier-pass'")
    if stabilizer is not None and algorithm != "folklore":
        raise ValueError(f"stabilizer={stabilizer!r} is only available with algorithm='folklore'")
