"""Text generation with the recurrent cache, for people who want to look at a model's outputs."""

from __future__ import annotations

from pathlib import Path

import torch

from .errors import PalimpsaError


def load_for_generation(source: str | Path):
    """A Palimpsa model directory through ``from_pretrained``, or any Mamba2 checkpoint through the loader."""
    from transformers import AutoTokenizer

    from .checkpoint import load_checkpoint
    from .modeling import PalimpsaForCausalLM, model_from_state_dict

    path = Path(source).expanduser()
    config_path = path / "config.json"
    if config_path.is_file() and '"palimpsa"' in config_path.read_text():
        model = PalimpsaForCausalLM.from_pretrained(str(path))
        directory = path
    else:
        checkpoint = load_checkpoint(source)
        model = model_from_state_dict(checkpoint.config, checkpoint.load_state_dict(progress=False), str(source))
        directory = checkpoint.directory
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
    except (OSError, ValueError):
        raise PalimpsaError(f"{source} has no tokenizer files; copy the base model's tokenizer into it") from None
    return model.eval(), tokenizer


@torch.no_grad()
def generate_text(source, prompts: list[str], *, max_new_tokens: int = 64, temperature: float = 0.0,
                  top_k: int | None = None, top_p: float | None = None, beta_scale: float | None = None,
                  seed: int = 0) -> list[str]:
    """Complete each prompt (a left-padded batch); greedy when ``temperature`` is 0."""
    model, tokenizer = load_for_generation(source)
    if beta_scale is not None:
        model.set_beta_scale(beta_scale)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    torch.manual_seed(seed)
    sampling = {"do_sample": True, "temperature": temperature, "top_k": top_k, "top_p": top_p} if temperature > 0 \
        else {"do_sample": False}
    output = model.generate(**batch, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                            **sampling)
    new_tokens = output[:, batch["input_ids"].shape[1]:]
    return tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
