"""Palimpsa scan kernels: a sequential reference, a chunked PyTorch path, and (on GPU) fused recurrent Triton
kernels, behind one op (``palimpsa_scan``) and one decoding step (``palimpsa_step``)."""

from .conv import causal_conv_silu
from .gains import reference_values_and_gains, scan_values_and_gains
from .norm import add_rms_norm, rms_norm
from .readout import gated_rms_norm, mixer_readout
from .scan import ScanOutput, ops_saved_under_checkpointing, palimpsa_scan
from .step import palimpsa_step

__all__ = ["ScanOutput", "add_rms_norm", "causal_conv_silu", "gated_rms_norm", "mixer_readout",
           "ops_saved_under_checkpointing", "palimpsa_scan", "palimpsa_step", "reference_values_and_gains",
           "rms_norm", "scan_values_and_gains"]
