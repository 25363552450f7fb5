"""Tests of sharded saving: ``parse_size`` and ``save_state_dict_sharded`` (safetensors shards with an index)."""

from __future__ import annotations

import json

import pytest
import torch
from checkpoints import assert_same_tensors
from palimpsa.upgrade.errors import PalimpsaError
from palimpsa.upgrade.io.shards import parse_size, save_state_dict_sharded
from safetensors.torch import load_file


@pytest.mark.parametrize("text, want", [
    ("5GB", 5 * 10**9), ("500MB", 500 * 10**6), ("50KB", 50_000), ("2GiB", 2 * 2**30), ("3MiB", 3 * 2**20),
    ("1KiB", 1024), ("1024", 1024), ("100B", 100), ("1.5GB", 1_500_000_000), ("5gb", 5 * 10**9),
    (" 20 KB ", 20_000),
])
def test_parse_size(text, want):
    assert parse_size(text) == want


@pytest.mark.parametrize("text", ["lots", "", "5TB", "-5GB", "GB", "5 G B", "1e3"])
def test_parse_size_unreadable(text):
    with pytest.raises(PalimpsaError, match="cannot read size"):
        parse_size(text)


@pytest.mark.parametrize("text", ["0", "0GB", "0.0001KB"])
def test_parse_size_not_positive(text):
    with pytest.raises(PalimpsaError, match="must be positive"):
        parse_size(text)


def _state(sizes: list[int]) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {f"t{i:02d}": torch.randn(n, generator=generator) for i, n in enumerate(sizes)}


def test_save_sharded_with_index(tmp_path):
    state = _state([100, 50, 200, 10, 300, 25, 60])  # float32: 400, 200, 800, 40, 1200, 100, 240 bytes
    state["bf16"] = torch.ones(3, 5, dtype=torch.bfloat16)
    total = sum(t.numel() * t.element_size() for t in state.values())
    names = save_state_dict_sharded(state, tmp_path, 1000, progress=False)
    index_path = tmp_path / "model.safetensors.index.json"
    assert names[-1] == "model.safetensors.index.json"
    shards = names[:-1]
    assert len(shards) >= 3
    assert shards == [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    index = json.loads(index_path.read_text())
    assert index["metadata"]["total_size"] == total
    assert set(index["weight_map"]) == set(state)
    assert set(index["weight_map"].values()) == set(shards)
    loaded: dict[str, torch.Tensor] = {}
    for shard in shards:
        part = load_file(str(tmp_path / shard))
        assert all(index["weight_map"][key] == shard for key in part)
        size = sum(t.numel() * t.element_size() for t in part.values())
        assert size <= 1000 or len(part) == 1  # only a tensor larger than the limit may exceed it alone
        loaded.update(part)
    assert_same_tensors(loaded, state)
    assert len(load_file(str(tmp_path / index["weight_map"]["t04"]))) == 1  # 1200 bytes > 1000: alone


def test_save_single_file_below_limit(tmp_path):
    state = _state([10, 20, 30])
    names = save_state_dict_sharded(state, tmp_path, parse_size("1MB"), progress=False)
    assert names == ["model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors"]
    assert_same_tensors(load_file(str(tmp_path / "model.safetensors")), state)


def test_save_exactly_at_limit_is_one_file(tmp_path):
    state = _state([100, 150])  # 1000 bytes
    assert save_state_dict_sharded(state, tmp_path, 1000, progress=False) == ["model.safetensors"]
