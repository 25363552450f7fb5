"""Safetensors weights written tensor by tensor, sharded with an index past a size limit."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..errors import PalimpsaError
from .dtypes import SAFETENSORS_CODES

_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(text: str) -> int:
    """``"5GB"`` -> 5e9 bytes; also KB/MB and KiB/MiB/GiB, or a plain byte count."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]I?B|B)?\s*", text.upper())
    if not match:
        raise PalimpsaError(f"cannot read size {text!r}; write it like 5GB, 500MB or 2GiB")
    size = float(match.group(1)) * _SIZE_UNITS[match.group(2) or ""]
    if size < 1:
        raise PalimpsaError(f"size {text!r} must be positive")
    if size > 2**62:
        raise PalimpsaError(f"size {text!r} is too large; write it like 5GB, 500MB or 2GiB")
    return int(size)


def write_safetensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str]) -> None:
    """Write a safetensors file tensor by tensor, so that no second copy of the shard is ever built in memory.

    Layout (the safetensors spec): an 8-byte little-endian header length, a JSON header mapping each name to
    its dtype, shape and ``[start, end)`` byte offsets (padded with spaces to a multiple of 8), then the bytes.
    """
    header: dict[str, object] = {"__metadata__": metadata}
    offset = 0
    for name, tensor in tensors.items():
        if tensor.dtype not in SAFETENSORS_CODES:
            raise PalimpsaError(f"cannot store {name} of dtype {tensor.dtype} in safetensors")
        nbytes = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": SAFETENSORS_CODES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as handle:
        handle.write(len(encoded).to_bytes(8, "little"))
        handle.write(encoded)
        for tensor in tensors.values():
            flat = tensor.detach().cpu().contiguous().reshape(-1)
            if flat.numel():
                handle.write(memoryview(flat.view(torch.uint8).numpy()))


def save_state_dict_sharded(state: dict[str, torch.Tensor], directory: Path, max_shard_size: int,
                            metadata: dict[str, str] | None = None, progress: bool = True) -> list[str]:
    """Write ``model.safetensors``, or ``model-0000i-of-0000n.safetensors`` shards plus
    ``model.safetensors.index.json`` when the tensors exceed ``max_shard_size`` bytes. Returns the file names."""
    shards: list[list[str]] = [[]]
    size = 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_size:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    total = sum(t.numel() * t.element_size() for t in state.values())
    names = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    metadata = {"format": "pt", **(metadata or {})}
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="writing weights", disable=not progress)
    for file_name, keys in zip(names, shards):
        write_safetensors({key: state[key] for key in keys}, directory / file_name, metadata)
        os.chmod(directory / file_name, 0o644)
        bar.update(sum(state[key].numel() * state[key].element_size() for key in keys))
    bar.close()
    if len(shards) > 1:
        index = {"metadata": {"total_size": total},
                 "weight_map": {key: file_name for file_name, keys in zip(names, shards) for key in keys}}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
        names.append("model.safetensors.index.json")
    return names
