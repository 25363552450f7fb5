"""Tiny Mamba2 checkpoints for the tests, in the two formats found in the wild, made here from random weights.

- ``write_mamba_ssm``: ``config.json`` as mamba_ssm's ``MambaConfig`` + ``pytorch_model.bin`` or ``model.safetensors``.
- ``write_transformers``: transformers' own ``Mamba2ForCausalLM.save_pretrained`` (sharded when asked).
- ``hub_cache_layout``: a directory copied into a huggingface_hub cache (``models--owner--name/snapshots/<sha>``).
- ``tiny_random_mamba2``: the random tiny test model (d_model 64, 4 layers, vocabulary 257 padded to 272, byte-level
  tokenizer; ``scripts/make_tiny_checkpoint.py``), for tests of generic machinery that need a small, fast model.
  conftest's session fixture ``tiny_random`` writes it once per session. The embedded default model
  (``upgrade/assets/tiny-mamba2``, pretrained and 40x larger) is for the tests whose point is that model.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from make_tiny_checkpoint import (  # noqa: E402
    mamba_ssm_config,
    random_mamba2_state_dict,
    write_byte_tokenizer,
    write_tiny_random_mamba2,
)

TINY_RANDOM_NAME = "tiny-random-mamba2"

SMALL = {"d_model": 32, "n_layer": 3, "vocab_size": 101}
SMALL_SSM = {"layer": "Mamba2", "d_state": 8, "headdim": 8, "expand": 2, "ngroups": 1}


def tiny_random_mamba2(directory: Path) -> Path:
    """Write the random tiny test model into ``directory`` (deterministic: seed 0) and return it."""
    return write_tiny_random_mamba2(directory)


def write_mamba_ssm(directory: Path, *, d_model=32, n_layer=3, vocab_size=101, pad_vocab_size_multiple=8,
                    tie_embeddings=True, safetensors=False, tokenizer=False, seed=0, **ssm) -> Path:
    """A mamba_ssm-format checkpoint; ``ssm`` overrides ``ssm_cfg`` entries (d_state, headdim, ngroups...)."""
    directory.mkdir(parents=True, exist_ok=True)
    raw = mamba_ssm_config(d_model, n_layer, vocab_size, {**SMALL_SSM, **ssm},
                           pad_vocab_size_multiple=pad_vocab_size_multiple, tie_embeddings=tie_embeddings)
    state = random_mamba2_state_dict(raw, seed)
    (directory / "config.json").write_text(json.dumps(raw, indent=2))
    if safetensors:
        state.pop("lm_head.weight", None) if tie_embeddings else None
        save_file({k: v.contiguous() for k, v in state.items()}, str(directory / "model.safetensors"),
                  metadata={"format": "pt"})
    else:
        torch.save(state, directory / "pytorch_model.bin")
    if tokenizer:
        write_byte_tokenizer(directory)
    return directory


def write_transformers(directory: Path, *, hidden_size=32, num_hidden_layers=3, vocab_size=104, head_dim=8,
                       state_size=8, n_groups=1, tie_word_embeddings=False, time_step_limit=(0.0, float("inf")),
                       max_shard_size=None, seed=0) -> Path:
    """A checkpoint saved by transformers' own ``Mamba2ForCausalLM.save_pretrained`` (random weights)."""
    from transformers import Mamba2Config, Mamba2ForCausalLM

    torch.manual_seed(seed)
    config = Mamba2Config(hidden_size=hidden_size, num_hidden_layers=num_hidden_layers, vocab_size=vocab_size,
                          num_heads=2 * hidden_size // head_dim, head_dim=head_dim, state_size=state_size,
                          n_groups=n_groups, expand=2, tie_word_embeddings=tie_word_embeddings,
                          time_step_limit=tuple(time_step_limit), chunk_size=16)
    model = Mamba2ForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("in_proj.weight", "out_proj.weight")):
                param.normal_(std=param.shape[1] ** -0.5)
            elif name.endswith("embeddings.weight"):
                param.normal_(std=0.3)
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(directory, **kwargs)
    return directory


def hub_cache_layout(checkpoint: Path, cache_dir: Path, repo_id: str, revision: str = "main") -> str:
    """Copy ``checkpoint`` into a huggingface_hub cache the way downloads land: blobs + snapshot symlinks."""
    repo_dir = cache_dir / f"models--{repo_id.replace('/', '--')}"
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo_dir / "snapshots" / commit
    (repo_dir / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for path in checkpoint.iterdir():
        blob = repo_dir / "blobs" / hashlib.sha256(path.read_bytes()).hexdigest()
        shutil.copy2(path, blob)
        (snapshot / path.name).symlink_to(Path("..") / ".." / "blobs" / blob.name)
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / revision).write_text(commit)
    return commit
