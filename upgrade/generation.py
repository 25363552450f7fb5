"""Text generation with the recurrent cache, for people who want to look at a model's outputs."""

from __future__ import annotations

from pathlib import Path

import torch

from .errors import PalimpsaError


def resolve_device(name: str, option: str = "--device") -> str:
    """``auto`` -> ``cuda`` when there is a GPU, else ``cpu``; a named device must exist on this machine."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise PalimpsaError(f"{option} {name!r} is not a device; give cpu, cuda, cuda:N or auto") from None
    if device.type not in ("cpu", "cuda"):
        raise PalimpsaError(f"{option} {name!r}: only cpu and cuda devices are supported")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise PalimpsaError(f"{option} {name}: this machine has {torch.cuda.device_count()} CUDA device(s); give "
                            "cpu or auto")
    return str(device)


def load_plain_mamba2(source: str | Path):
    """A Mamba2 checkpoint in either format, through the loader (no layer upgraded)."""
    return _load_plain_mamba2(source)[0]


def _load_plain_mamba2(source: str | Path):
    """The model and the local directory it came from (the hub snapshot for a hub id)."""
    from .checkpoint import load_checkpoint
    from .modeling import model_from_state_dict

    checkpoint = load_checkpoint(source)
    model = model_from_state_dict(checkpoint.config, checkpoint.load_state_dict(progress=False), str(source))
    return model.eval(), checkpoint.directory


def load_model_and_tokenizer(source: str | Path, need_tokenizer: bool = True):
    """A Palimpsa model directory through ``from_pretrained``, or any Mamba2 checkpoint through the loader; and
    its tokenizer (None when not needed and absent)."""
    from transformers import AutoTokenizer

    from .checkpoint import is_palimpsa_directory
    from .modeling import PalimpsaForCausalLM

    path = Path(source).expanduser()
    if is_palimpsa_directory(path):
        try:
            model = PalimpsaForCausalLM.from_pretrained(str(path)).eval()
        except (OSError, ValueError) as error:
            raise PalimpsaError(f"cannot load {source}: {str(error).splitlines()[0]}") from None
        directory = path
    else:  # the tokenizer lies where the loader found the checkpoint (a hub id resolves to its snapshot)
        model, directory = _load_plain_mamba2(source)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
    except (OSError, ValueError, TypeError):
        if need_tokenizer:
            raise PalimpsaError(f"{source} has no tokenizer files; copy the base model's tokenizer into it") from None
        tokenizer = None
    return model, tokenizer


@torch.no_grad()
def generate_text(source, prompts: list[str], *, max_new_tokens: int = 64, temperature: float = 0.0,
                  top_k: int | None = None, top_p: float | None = None, beta_scale: float | None = None,
                  seed: int = 0) -> list[str]:
    """Complete each prompt (a left-padded batch); greedy when ``temperature`` is 0. An empty prompt starts from the
    BOS token (EOS when there is none), as an unconditional sample does. A progress bar counts the new tokens on a
    terminal."""
    from tqdm.auto import tqdm
    from transformers import StoppingCriteria, StoppingCriteriaList

    model, tokenizer = load_model_and_tokenizer(source)
    if beta_scale is not None:
        model.set_beta_scale(beta_scale)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    encoded = [tokenizer(prompt)["input_ids"] or ([start] if start is not None else []) for prompt in prompts]
    if not all(encoded):
        raise PalimpsaError(f"{source}: the tokenizer has no BOS or EOS token to start an empty prompt from; give "
                            "a non-empty --prompt")
    batch = tokenizer.pad({"input_ids": encoded}, padding=True, return_tensors="pt")
    torch.manual_seed(seed)
    sampling = {"do_sample": True, "temperature": temperature, "top_k": top_k, "top_p": top_p} if temperature > 0 \
        else {"do_sample": False}
    bar = tqdm(total=max_new_tokens, desc="generating", unit="token", disable=None)  # None: on a terminal only

    class Progress(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            bar.update(1)
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    output = model.generate(**batch, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                            stopping_criteria=StoppingCriteriaList([Progress()]), **sampling)
    bar.close()
    new_tokens = output[:, batch["input_ids"].shape[1]:]
    return tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
