"""Reading a model's weights outside its forward when FSDP2 (``fully_shard``, the FSDP recipes) shards them.

FSDP2 gathers a unit's parameters only around that unit's own ``forward`` and keeps them as ``DTensor`` shards
otherwise; ``state_dict()`` returns the shards too. Code that calls a module's own methods (importance
inspection) or folds LoRA into the weights (the trainer's saved models) needs them whole. Every helper here is a
collective under FSDP: each rank must call it, in the same order, as the trainer's evaluation and checkpointing
do. Models that are not sharded pass through unchanged.
"""

from __future__ import annotations

import contextlib

import torch


def _fsdp_module_class():
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch without FSDP2 cannot have sharded the model with it
        return None
    return FSDPModule


def fsdp_units(model: torch.nn.Module, holding: torch.nn.Module | None = None) -> list[torch.nn.Module]:
    """The FSDP2 units of ``model`` (outermost first), or the innermost one holding ``holding`` (a list of one,
    or empty)."""
    fsdp_module = _fsdp_module_class()
    if fsdp_module is None:
        return []
    units = [m for m in model.modules() if isinstance(m, fsdp_module)]
    if holding is None:
        return units
    owners = [u for u in units if any(inner is holding for inner in u.modules())]
    return owners[-1:]  # modules() is pre-order: the last unit that holds it lies deepest


@contextlib.contextmanager
def gathered(model: torch.nn.Module, holding: torch.nn.Module | None = None):
    """Within the block, the parameters of every FSDP2 unit of ``model`` (or of the innermost unit holding
    ``holding``) are whole, plain tensors on the modules; resharded afterwards."""
    units = fsdp_units(model, holding)
    for unit in units:
        unit.unshard()
    try:
        yield
    finally:
        for unit in reversed(units):
            unit.reshard()


def whole(tensor: torch.Tensor) -> torch.Tensor:
    """A ``DTensor`` shard gathered into the full tensor, in CPU memory (so that a whole model's weights never sit
    on one GPU at once); any other tensor as it is."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        return tensor
    return tensor.full_tensor().cpu() if isinstance(tensor, DTensor) else tensor
