"""The one device resolver of both packages: which engine a request runs on."""
from __future__ import annotations

from .cuda.device import available, status

#: Device choices of the command lines.
CHOICES = ("auto", "cpu", "gpu")
#: ``device=`` values of the array functions (None: the array decides).
ARRAY_DEVICES = (None, "cpu", "cuda", "gpu")


def resolve(device: str | None) -> str:
    """'cpu' or 'gpu' for a command-line choice: "auto" is the GPU when one is usable.

    RuntimeError naming the reason when "gpu" is asked for and none is usable; ValueError
    for an unknown choice."""
    if device not in CHOICES:
        raise ValueError(f"device={device!r}; choose one of {', '.join(CHOICES)}")
    if device == "gpu" and not available():
        raise RuntimeError(f"device 'gpu' was asked for, but the GPU is {status()}")
    if device == "auto":
        return "gpu" if available() else "cpu"
    return device


def for_array(device: str | None, on_gpu_array: bool) -> str:
    """'cpu' or 'cuda' for an array function's ``device=`` argument (None: the array decides;
    "gpu" is an alias of "cuda"); ValueError for a CuPy array sent to the CPU or an unknown
    device."""
    if device not in ARRAY_DEVICES:
        raise ValueError(f"device={device!r}; choose None (the array decides), 'cpu' or 'cuda'")
    if on_gpu_array:
        if device == "cpu":
            raise ValueError("device='cpu' with a CuPy array: copy it to the host yourself "
                             "(x.get()); fwht never moves a CuPy array to the host silently")
        return "cuda"
    return "cuda" if device in ("cuda", "gpu") else "cpu"
