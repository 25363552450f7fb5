"""Palimpsa scan kernels: a sequential reference, a chunked PyTorch path, and (on GPU) Triton kernels."""

from .scan import ops_saved_under_checkpointing, palimpsa_scan
from .step import palimpsa_step

__all__ = ["ops_saved_under_checkpointing", "palimpsa_scan", "palimpsa_step"]
