"""Palimpsa scan kernels: a sequential reference, a chunked PyTorch path, and (on GPU) fused recurrent Triton
kernels, behind one op (``palimpsa_scan``) and one decoding step (``palimpsa_step``)."""

from .gains import reference_values_and_gains, scan_values_and_gains
from .scan import ScanOutput, ops_saved_under_checkpointing, palimpsa_scan
from .step import palimpsa_step

__all__ = ["ScanOutput", "ops_saved_under_checkpointing", "palimpsa_scan", "palimpsa_step",
           "reference_values_and_gains", "scan_values_and_gains"]
