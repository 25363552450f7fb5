"""Palimpsa scan kernels: a sequential reference, a chunked PyTorch path, and (on GPU) Triton kernels."""

from .scan import palimpsa_scan

__all__ = ["palimpsa_scan"]
