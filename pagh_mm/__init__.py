"""pagh_mm: Pagh's compressed matrix multiplication (Count-Sketch + XOR convolution)."""
__version__ = "0.1.0"
__all__ = ["__version__"]
