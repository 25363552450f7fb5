"""Tiny Mamba2 checkpoints for the tests, in the two formats found in the wild, made here from random weights, and
the paths the tests share.

- ``write_mamba_ssm``: ``config.json`` as mamba_ssm's ``MambaConfig`` + ``pytorch_model.bin`` or ``model.safetensors``.
- ``write_transformers``: transformers' own ``Mamba2ForCausalLM.save_pretrained`` (sharded when asked).
- ``hub_cache_layout``: a directory copied into a huggingface_hub cache (``models--owner--name/snapshots/<sha>``).
- ``write_tiny_random_mamba2``: the random tiny test model (d_model 64, 4 layers, vocabulary 257 padded to 272,
  byte-level tokenizer), for tests of generic machinery that need a small, fast model. conftest's session fixture
  ``tiny_random`` writes it once per session; ``scripts/make_tiny_checkpoint.py`` writes it to a directory of your
  choice. The embedded default model (``EMBEDDED``, pretrained and 40x larger) is for the tests whose point is that
  model.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import palimpsa.upgrade
import torch
from palimpsa.upgrade import PalimpsaForCausalLM
from palimpsa.upgrade.convert.checkpoint import config_from_dict
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[1]  # the repository
TEST_DATA = ROOT / "tests" / "data"
EMBEDDED = Path(palimpsa.upgrade.__file__).resolve().parent / "assets" / "tiny-mamba2"  # as installed
TINY_RANDOM_NAME = "tiny-random-mamba2"
TINY = {"d_model": 64, "n_layer": 4, "vocab_size": 257, "pad_vocab_size_multiple": 16, "d_state": 16, "headdim": 16}

SMALL = {"d_model": 32, "n_layer": 3, "vocab_size": 101}


def load_script(name: str):
    """``scripts/<name>.py`` imported as a module (the scripts are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SMALL_SSM = {"layer": "Mamba2", "d_state": 8, "headdim": 8, "expand": 2, "ngroups": 1}


def mamba_ssm_config(d_model: int, n_layer: int, vocab_size: int, ssm_cfg: dict, *, pad_vocab_size_multiple: int = 8,
                     tie_embeddings: bool = True, residual_in_fp32: bool = True, rms_norm: bool = True) -> dict:
    """A ``config.json`` as mamba_ssm's ``MambaConfig`` writes it."""
    return {"d_model": d_model, "d_intermediate": 0, "n_layer": n_layer, "vocab_size": vocab_size,
            "ssm_cfg": ssm_cfg, "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": rms_norm,
            "residual_in_fp32": residual_in_fp32, "fused_add_norm": True,
            "pad_vocab_size_multiple": pad_vocab_size_multiple, "tie_embeddings": tie_embeddings}


def random_mamba2_state_dict(raw_config: dict, seed: int) -> dict[str, torch.Tensor]:
    """Random Mamba2 weights (mamba_ssm initialisation, larger-than-default projections so that layers matter)."""
    _, config = config_from_dict(raw_config)
    torch.manual_seed(seed)
    model = PalimpsaForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("in_proj.weight", "out_proj.weight", "beta_down.weight")):
                param.normal_(std=param.shape[1] ** -0.5)
            elif name.endswith("embedding.weight"):
                param.normal_(std=0.3)
            elif name.endswith("norm.weight") or name.endswith("norm_f.weight"):
                param.uniform_(0.8, 1.2)
            elif name.endswith(("conv1d.bias", "D")) or name.endswith("dt_bias"):
                param.add_(torch.randn_like(param) * 0.1)
    state = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    if config.tie_word_embeddings:
        state["lm_head.weight"] = state["backbone.embedding.weight"]  # mamba_ssm saves the tied head too
    return state


def byte_symbols() -> dict[int, str]:
    """GPT-2's byte -> printable character table, which byte-level BPE vocabularies are written in."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {byte: chr(byte) for byte in printable}, 0
    for byte in range(256):
        if byte not in table:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def write_byte_tokenizer(directory: Path) -> None:
    """A byte-level tokenizer: ids 0-255 are the bytes, 256 is ``<|endoftext|>``."""
    vocab = {symbol: byte for byte, symbol in byte_symbols().items()}
    vocab["<|endoftext|>"] = 256
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>",
                                   bos_token="<|endoftext|>", unk_token="<|endoftext|>")
    fast.model_max_length = 1 << 20
    fast.save_pretrained(str(directory))


def write_tiny_random_mamba2(directory: Path) -> Path:
    """The random tiny test model (``TINY``, seed 0) and the byte-level tokenizer, written into ``directory``."""
    with torch.random.fork_rng(devices=[]):  # leave the caller's random state as it was
        return write_mamba_ssm(directory, **TINY, tokenizer=True, seed=0)


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


def assert_same_tensors(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert sorted(got) == sorted(want)
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype, name
        assert got[name].shape == tensor.shape, name
        assert torch.equal(got[name], tensor), name
