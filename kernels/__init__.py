"""Palimpsa scan kernels: a sequential reference, a chunked PyTorch path, and (on GPU) Triton kernels."""

from .scan import palimpsa_scan
from .step import palimpsa_step

__all__ = ["palimpsa_scan", "palimpsa_step"]
