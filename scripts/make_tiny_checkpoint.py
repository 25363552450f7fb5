"""Write the random tiny test model: a tiny random Mamba2 in mamba_ssm format with a byte-level tokenizer.

d_model 64, 4 layers, d_state 16, headdim 16, vocabulary 257 (padded to 272), tied embeddings, random weights.
The tests write it once per session (``tests/checkpoints.py``: ``tiny_random_mamba2``) for the generic machinery
that only needs a small, fast model. It is not the embedded default model: ``upgrade/assets/tiny-mamba2`` is a
pretrained model, which this script never writes.

Deterministic (fixed seed): running it again rewrites the same tensors. Usage:

    python scripts/make_tiny_checkpoint.py [--output tiny-random-mamba2]

The same writer serves the tests, which build checkpoints of other shapes with ``write_mamba_ssm_checkpoint``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from palimpsa.upgrade import PalimpsaForCausalLM
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

TINY = {"d_model": 64, "n_layer": 4, "vocab_size": 257, "pad_vocab_size_multiple": 16,
        "ssm_cfg": {"layer": "Mamba2", "d_state": 16, "headdim": 16, "expand": 2, "ngroups": 1}}
DEFAULT_OUTPUT = Path("tiny-random-mamba2")  # in the current directory
ASSETS = Path(__file__).resolve().parents[1] / "upgrade" / "assets"  # the embedded models: never written here


def mamba_ssm_config(d_model: int, n_layer: int, vocab_size: int, ssm_cfg: dict, *, pad_vocab_size_multiple: int = 8,
                     tie_embeddings: bool = True, residual_in_fp32: bool = True, rms_norm: bool = True) -> dict:
    """A ``config.json`` as mamba_ssm's ``MambaConfig`` writes it."""
    return {"d_model": d_model, "d_intermediate": 0, "n_layer": n_layer, "vocab_size": vocab_size,
            "ssm_cfg": ssm_cfg, "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": rms_norm,
            "residual_in_fp32": residual_in_fp32, "fused_add_norm": True,
            "pad_vocab_size_multiple": pad_vocab_size_multiple, "tie_embeddings": tie_embeddings}


def random_mamba2_state_dict(raw_config: dict, seed: int) -> dict[str, torch.Tensor]:
    """Random Mamba2 weights (mamba_ssm initialisation, larger-than-default projections so that layers matter)."""
    from palimpsa.upgrade.convert.checkpoint import config_from_dict

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


def write_mamba_ssm_checkpoint(directory: Path, raw_config: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    """Write ``config.json`` + ``pytorch_model.bin`` the way mamba_ssm's ``save_pretrained`` does."""
    directory.mkdir(parents=True, exist_ok=True)
    state = random_mamba2_state_dict(raw_config, seed)
    (directory / "config.json").write_text(json.dumps(raw_config, indent=2) + "\n")
    torch.save(state, directory / "pytorch_model.bin")
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
        raw = mamba_ssm_config(TINY["d_model"], TINY["n_layer"], TINY["vocab_size"], TINY["ssm_cfg"],
                               pad_vocab_size_multiple=TINY["pad_vocab_size_multiple"])
        write_mamba_ssm_checkpoint(directory, raw, seed=0)
    write_byte_tokenizer(directory)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT,
                        help=f"directory to write (default: ./{DEFAULT_OUTPUT})")
    args = parser.parse_args()
    output = args.output.resolve()
    if output == ASSETS or ASSETS in output.parents:
        parser.error(f"{args.output} lies in {ASSETS}, which holds the embedded models; choose another --output")
    write_tiny_random_mamba2(args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
