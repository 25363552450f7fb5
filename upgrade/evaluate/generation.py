"""Text generation with the recurrent cache, for people who want to look at a model's outputs."""

from __future__ import annotations

import copy

import torch

from ..convert.loading import load_model_and_tokenizer
from ..errors import PalimpsaError


def left_padded(tokenizer):
    """A copy of ``tokenizer`` that pads on the left, with EOS as its padding token when it has none: what batched
    generation needs. A copy, so that the caller's tokenizer (one a trainer saves, say) stays as it was."""
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


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
    tokenizer = left_padded(tokenizer)
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
