"""An lm-evaluation-harness (``lm_eval``) model for Palimpsa and Mamba2 models, registered as ``"palimpsa"``.

lm_eval is not a dependency of this package: install it separately (``pip install lm-eval``). The package declares
the model as an ``lm_eval.models`` entry point, which lm-eval's plugin discovery (the releases after 0.4.13) reads:
there ``lm_eval run --model palimpsa ...`` finds it. lm-eval 0.4.13 reads no entry points; with it, run its command
line as ``palimpsa lm-eval`` or ``palimpsa-lm-eval`` (``palimpsa.upgrade.cli.palimpsa_lm_eval``), which registers
the model first::

    palimpsa-lm-eval run --model palimpsa \\
        --model_args pretrained=DIR,device=cpu,dtype=float32,batch_size=4,beta_scale=1.0 --tasks hellaswag

(every argument is lm_eval's own, as for ``lm_eval``), or from Python::

    import lm_eval
    import palimpsa.upgrade.evaluate.lm_eval_adapter  # registers "palimpsa" with lm_eval

    lm_eval.simple_evaluate(model="palimpsa", model_args="pretrained=DIR", tasks=["hellaswag"])

How the three request types run on a recurrent model (see docs/lm-eval.md):

* ``loglikelihood(context, continuation)``: ``context + continuation`` is tokenized as one string; the tokens past
  the longest prefix it shares with the context's own tokens are scored. A batch is right-padded (a causal model's
  scores at real positions cannot see padding that comes after them, so no mask is needed) and run in segments of
  ``segment_length`` tokens with the recurrent state carried between them; logits are computed only from the first
  scored position on.
* ``loglikelihood_rolling(text)``: the whole text after one prefix token (BOS, else EOS), every token scored once
  with the full history: there is no context window to roll, the state carries it, so any length runs in memory
  bounded by ``batch_size x segment_length``.
* ``generate_until(context, gen_kwargs)``: left-padded batches (the attention mask keeps padding out of the state)
  through ``model.generate`` with the recurrent cache; greedy unless ``do_sample``; stops at ``max_gen_toks``, at
  EOS, or once every row holds one of the ``until`` strings, and each output is cut before its first stop string.
"""

from __future__ import annotations

import copy
import json
import logging
import sys
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..errors import PalimpsaError, checked_number
from ..io.dtypes import DTYPES, parse_dtype

try:  # lm_eval is optional: without it this module still imports, and register() says how to install it.
    from lm_eval.api.model import TemplateLM as _Base

    _IMPORT_ERROR: ImportError | None = None
except ImportError as _error:  # pragma: no cover - exercised only where lm_eval is absent
    _Base = object
    _IMPORT_ERROR = _error

MODEL_NAME = "palimpsa"
INSTALL_HINT = "lm_eval is not installed: pip install lm-eval"

logger = logging.getLogger(__name__)


class PalimpsaLM(_Base):
    """lm_eval's model interface over a Palimpsa model directory or any Mamba2 checkpoint.

    Args (``--model_args key=value,...``):
        pretrained: a model directory or checkpoint that ``load_model_and_tokenizer`` reads; or, from Python, a
            loaded ``PalimpsaForCausalLM`` (then ``tokenizer`` is required).
        tokenizer: a tokenizer object or path, when not the one stored with ``pretrained``.
        device: ``cpu``, ``cuda``, ``cuda:1``... (default: ``cuda`` when available).
        dtype: ``float32`` (default), ``bfloat16``, ``float16``, ``float64`` or ``auto`` (as loaded). Logits are
            always float32.
        batch_size: requests per forward (``auto`` is not probed: it means ``max_batch_size`` or 1).
        beta_scale: ``model.set_beta_scale(beta_scale)`` before evaluating (0 runs the Mamba2 model it came from).
        segment_length: tokens per forward; longer inputs run in segments with the recurrent state carried.
        max_gen_toks: default cap on generated tokens when a task gives none.
    """

    backend = "causal"

    def __init__(self, pretrained, tokenizer=None, device: str | None = None, dtype: str | torch.dtype = "float32",
                 batch_size: int | str = 1, max_batch_size: int | None = None, beta_scale: float | None = None,
                 segment_length: int = 2048, max_gen_toks: int = 256, **kwargs):
        if _IMPORT_ERROR is not None:
            raise ImportError(INSTALL_HINT) from _IMPORT_ERROR
        super().__init__()
        for key, value in kwargs.items():  # lm_eval passes some arguments to every model (e.g. trust_remote_code)
            logger.warning("palimpsa: ignoring model argument %s=%r", key, value)
        from transformers import AutoTokenizer

        from ..convert.loading import load_model_and_tokenizer, resolve_device

        # every number is checked before the model is loaded (the values come typed, or as text, from --model_args)
        if isinstance(batch_size, str) and batch_size.startswith("auto"):
            logger.warning("palimpsa: batch_size=auto is not probed; using max_batch_size or 1")
            batch_size = max_batch_size or 1
        self.batch_size = checked_number(batch_size, "palimpsa: batch_size", int, low=1)
        self.segment_length = checked_number(segment_length, "palimpsa: segment_length", int, low=1)
        self.max_gen_toks = checked_number(max_gen_toks, "palimpsa: max_gen_toks", int, low=1)
        if beta_scale is not None:
            beta_scale = checked_number(beta_scale, "palimpsa: beta_scale", low=0)
        try:
            target_dtype = None if dtype in (None, "auto") else parse_dtype(dtype)
        except PalimpsaError:
            raise PalimpsaError(f"palimpsa: unknown dtype {dtype!r}; use one of {', '.join(DTYPES)} or auto") from None
        self._device = torch.device(resolve_device("auto" if device is None else str(device), "palimpsa: device"))

        if isinstance(pretrained, (str, Path)):
            model, stored_tokenizer = load_model_and_tokenizer(pretrained, need_tokenizer=tokenizer is None)
            self._name = str(pretrained)
        else:
            model, stored_tokenizer = pretrained, None
            self._name = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
        if isinstance(tokenizer, (str, Path)):
            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
        self.tokenizer = tokenizer if tokenizer is not None else stored_tokenizer
        if self.tokenizer is None:
            raise PalimpsaError("palimpsa: a loaded model needs tokenizer=...")
        self.model = model.to(device=self._device, dtype=target_dtype).eval()
        if beta_scale is not None:
            self.model.set_beta_scale(beta_scale)
        eos = self.tokenizer.eos_token_id
        self._eot = eos if eos is not None else self.tokenizer.bos_token_id
        if self._eot is None:
            raise PalimpsaError("palimpsa: the tokenizer has neither an EOS nor a BOS token")
        pad = self.tokenizer.pad_token_id
        self._pad = pad if pad is not None else self._eot

    # -- lm_eval's model interface ------------------------------------------------------------------------------

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None):
        """lm_eval adds its own ``batch_size``, ``max_batch_size`` and ``device`` (from ``--batch_size``, ...);
        the same key given in ``--model_args`` wins instead of clashing."""
        extra = {key: value for key, value in (additional_config or {}).items() if value is not None}
        return cls(**{**extra, **arg_dict})

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None):
        from lm_eval.utils import simple_parse_args_string

        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @property
    def eot_token_id(self) -> int:
        return self._eot

    @property
    def prefix_token_id(self) -> int:
        """The token that stands for an empty context (and starts every rolling text): BOS, else EOS."""
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self._eot

    @property
    def tokenizer_name(self) -> str:
        return self._name.replace("/", "__")

    @property
    def max_length(self) -> int:
        """No context window: the state carries any length (lm_eval only reads this for its own truncation)."""
        return sys.maxsize

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        return self.tokenizer.encode(string, add_special_tokens=bool(add_special_tokens))

    def tok_decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Tokenize ``context + continuation`` once; the context is the longest prefix of those tokens that the
        context alone also starts with, and every token after it is scored.

        The model reads exactly the tokenization of the whole string, and a token that merges the context's last
        characters with the continuation's first is scored rather than dropped (lm_eval's own models score
        ``len(whole) - len(context tokens)`` tokens and so lose it). Trailing spaces of the context move into the
        continuation, as lm_eval does for every causal model.
        """
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        whole = self.tok_encode(context + continuation)
        alone = self.tok_encode(context) if context else []
        split = 0
        while split < min(len(whole), len(alone)) and whole[split] == alone[split]:
            split += 1
        if continuation:
            split = min(split, len(whole) - 1)
        context_tokens = whole[:split] or [self.prefix_token_id]
        return context_tokens, whole[split:]

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        """``requests``: ``((context, continuation), context_tokens, continuation_tokens)``; returns, per request,
        the summed log-probability of the continuation tokens and whether greedy decoding produces all of them."""
        rows = [(list(context) + list(continuation), len(continuation)) for _, context, continuation in requests]
        results = self._score_rows(rows, "loglikelihood", disable_tqdm)
        for (strings, _, _), result in zip(requests, results):
            self.cache_hook.add_partial("loglikelihood", strings, result)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        rows = []
        for request in requests:
            tokens = self.tok_encode(request.args[0])
            rows.append(([self.prefix_token_id] + tokens, len(tokens)))
        results = [logprob for logprob, _ in self._score_rows(rows, "loglikelihood_rolling", disable_tqdm)]
        for request, result in zip(requests, results):
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, result)
        return results

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        results: list[str | None] = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for index, request in enumerate(requests):
            groups.setdefault(json.dumps(request.args[1], sort_keys=True, default=str), []).append(index)
        bar = tqdm(total=len(requests), desc="palimpsa generate_until", disable=disable_tqdm)
        for indices in groups.values():
            settings = self._generation_settings(requests[indices[0]].args[1])
            prompts = {i: self.tok_encode(requests[i].args[0]) or [self.prefix_token_id] for i in indices}
            order = sorted(indices, key=lambda i: -len(prompts[i]))
            for first in range(0, len(order), self.batch_size):
                chunk = order[first : first + self.batch_size]
                texts = self._generate([prompts[i] for i in chunk], **settings)
                for i, text in zip(chunk, texts):
                    results[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
                bar.update(len(chunk))
        bar.close()
        return results

    # -- scoring ------------------------------------------------------------------------------------------------

    def _score_rows(self, rows: list[tuple[list[int], int]], desc: str, disable_tqdm: bool):
        """Per row ``(tokens, n)``: the summed log-probability of the last ``n`` tokens given those before them,
        and whether each is the argmax. Rows are batched longest first; identical rows run once."""
        unique: dict[tuple[tuple[int, ...], int], int] = {}
        for tokens, count in rows:
            unique.setdefault((tuple(tokens), count), len(unique))
        keys = sorted(unique, key=lambda key: -len(key[0]))
        scored: dict[tuple[tuple[int, ...], int], tuple[float, bool]] = {}
        for first in tqdm(range(0, len(keys), self.batch_size), desc=f"palimpsa {desc}", disable=disable_tqdm):
            chunk = keys[first : first + self.batch_size]
            scored.update(zip(chunk, self._score_batch(chunk)))
        return [scored[(tuple(tokens), count)] for tokens, count in rows]

    @torch.no_grad()
    def _score_batch(self, rows) -> list[tuple[float, bool]]:
        from ..model.cache import PalimpsaCache

        results: dict[int, tuple[float, bool]] = {}
        live = []
        for index, (tokens, count) in enumerate(rows):
            if count <= 0:
                results[index] = (0.0, True)
            elif count >= len(tokens):
                raise ValueError("palimpsa: a scored row needs at least one token of context")
            else:
                live.append(index)
        if live:
            width = max(len(rows[i][0]) for i in live) - 1  # inputs: every token but the last
            inputs = torch.full((len(live), width), self._pad, dtype=torch.long)
            targets = torch.full((len(live), width), -1, dtype=torch.long)  # -1: position not scored
            for row, index in enumerate(live):
                tokens, count = rows[index]
                inputs[row, : len(tokens) - 1] = torch.tensor(tokens[:-1])
                targets[row, len(tokens) - 1 - count : len(tokens) - 1] = torch.tensor(tokens[-count:])
            first_scored = min(len(rows[i][0]) - 1 - rows[i][1] for i in live)
            inputs, targets = inputs.to(self._device), targets.to(self._device)
            logprob = torch.zeros(len(live), dtype=torch.float64, device=self._device)
            greedy = torch.ones(len(live), dtype=torch.bool, device=self._device)
            cache = PalimpsaCache(self.model.config.n_layer) if width > self.segment_length else None
            for start in range(0, width, self.segment_length):
                end = min(start + self.segment_length, width)
                keep = max(1, end - max(start, first_scored))  # logits only from the first scored position on
                logits = self.model(inputs[:, start:end], cache_params=cache, logits_to_keep=keep).logits.float()
                wanted = targets[:, end - keep : end]
                scored = wanted >= 0
                if scored.any():
                    picked = logits.gather(-1, wanted.clamp(min=0)[..., None])[..., 0] - logits.logsumexp(-1)
                    logprob += (picked.double() * scored).sum(-1)
                    greedy &= ((logits.argmax(-1) == wanted) | ~scored).all(-1)
            for row, index in enumerate(live):
                results[index] = (logprob[row].item(), bool(greedy[row].item()))
        return [results[i] for i in range(len(rows))]

    # -- generation ---------------------------------------------------------------------------------------------

    def _generation_settings(self, gen_kwargs: dict) -> dict:
        kwargs = copy.deepcopy(gen_kwargs) if isinstance(gen_kwargs, dict) else {}
        until = kwargs.pop("until", None)
        until = [until] if isinstance(until, str) else list(until or [])
        limit = None
        for key in ("max_gen_toks", "max_new_tokens", "max_tokens", "max_completion_tokens"):
            value = kwargs.pop(key, None)
            limit = value if limit is None else limit
        temperature = float(kwargs.pop("temperature", 0.0) or 0.0)
        do_sample = bool(kwargs.pop("do_sample", temperature > 0.0))
        sampling = {"top_k": kwargs.pop("top_k", None), "top_p": kwargs.pop("top_p", None)}
        kwargs.pop("max_length", None)
        for key in kwargs:
            logger.warning("palimpsa: ignoring generation argument %s=%r", key, kwargs[key])
        if do_sample and temperature <= 0.0:
            temperature = 1.0
        return {"until": [stop for stop in until if stop], "max_gen_toks": int(limit or self.max_gen_toks),
                "do_sample": do_sample, "temperature": temperature,
                **{key: value for key, value in sampling.items() if value is not None}}

    @torch.no_grad()
    def _generate(self, prompts: list[list[int]], until: list[str], max_gen_toks: int, do_sample: bool,
                  temperature: float, **sampling) -> list[str]:
        from transformers import StoppingCriteria, StoppingCriteriaList

        width = max(len(prompt) for prompt in prompts)
        ids = torch.full((len(prompts), width), self._pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt) :] = torch.tensor(prompt)
            mask[row, width - len(prompt) :] = 1
        decode = self.tok_decode

        class StopStrings(StoppingCriteria):
            """Done per row once its new text holds a stop string (checked on the decoded text, so a stop string
            split across tokens is found)."""

            def __call__(self, input_ids, scores, **kwargs):
                return torch.tensor([any(stop in decode(row[width:].tolist()) for stop in until)
                                     for row in input_ids], dtype=torch.bool, device=input_ids.device)

        options = {"do_sample": True, "temperature": temperature, **sampling} if do_sample else {"do_sample": False}
        output = self.model.generate(
            input_ids=ids.to(self._device), attention_mask=mask.to(self._device), max_new_tokens=max_gen_toks,
            pad_token_id=self._pad, eos_token_id=self._eot,
            stopping_criteria=StoppingCriteriaList([StopStrings()]) if until else None, **options)
        texts = []
        for row in output[:, width:].tolist():
            text = decode(row)
            cut = min([position for stop in until if (position := text.find(stop)) >= 0], default=len(text))
            texts.append(text[:cut])
        return texts


def register() -> type:
    """Register :class:`PalimpsaLM` with lm_eval as ``"palimpsa"`` (idempotent) and return it."""
    if _IMPORT_ERROR is not None:
        raise ImportError(INSTALL_HINT) from _IMPORT_ERROR
    import lm_eval.models  # noqa: F401  (lm_eval's own models register themselves lazily on import)
    from lm_eval.api.registry import model_registry, register_model

    if model_registry.get(MODEL_NAME, None) is not PalimpsaLM:
        register_model(MODEL_NAME)(PalimpsaLM)
    return PalimpsaLM


if _IMPORT_ERROR is None:  # importing this module is how a Python user makes "palimpsa" known to lm_eval
    register()
