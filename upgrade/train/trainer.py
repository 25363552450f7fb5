"""The fine-tuning loop: recipe -> model + trainable selection -> data -> accelerate training with checkpoints.

The run's directory (``output_dir``) is laid out as :mod:`~palimpsa.upgrade.train.layout` describes. Checkpoints and
final/ are written under ``.partial`` names and renamed when complete; a partial one is removed when its writing
fails or is interrupted, or (after SIGKILL) when the next run starts. ``--resume`` takes the newest checkpoint that
loads whole and falls back to an older one, with a warning, when it does not.
"""

from __future__ import annotations

import fnmatch
import json
import math
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from ..convert.loading import is_palimpsa_directory, load_mamba2, load_palimpsa
from ..errors import PalimpsaError
from ..io.dtypes import parse_dtype
from ..io.manifest import check_files, file_manifest
from ..io.model_directory import report_header, write_model_directory
from ..io.output import check_writable, write_text_atomic
from ..model.configuration import PalimpsaConfig, padded_vocab_size
from ..model.modeling import PalimpsaForCausalLM, enable_activation_checkpointing, palimpsa_mixers_of
from . import layout as run_layout
from .layout import complete_checkpoints, latest_checkpoint
from .recipe import Recipe


class NonFiniteLoss(PalimpsaError):
    """The loss became NaN or infinite; the run stopped and kept its last good checkpoint."""


@dataclass
class TrainableSelection:
    groups: dict[str, list[tuple[str, torch.nn.Parameter]]]

    def describe(self, model: torch.nn.Module) -> list[str]:
        total = sum(p.numel() for p in model.parameters())
        lines = ["Trainable parameters"]
        for name, params in self.groups.items():
            count = sum(p.numel() for _, p in params)
            lines.append(f"  {name:<10} {count:>14,} ({count / total:.4%}) in {len(params)} tensors")
        chosen = sum(p.numel() for params in self.groups.values() for _, p in params)
        lines.append(f"  {'total':<10} {chosen:>14,} ({chosen / total:.4%} of {total:,})")
        return lines


def load_model_for_training(recipe: Recipe, log: Callable[[str], None]):
    """The Palimpsa model of ``recipe.model.path``; a plain Mamba2 is upgraded first (``model.upgrade_layers``)."""
    from ..convert.upgrade import upgrade_model

    section = recipe.model
    dtype = parse_dtype(section.dtype)
    if section.scratch is not None:
        return new_mamba2(recipe).to(dtype).train(), None
    path = Path(section.path).expanduser()
    plain = (section.upgrade_layers or "").strip().lower() == "none"
    if is_palimpsa_directory(path):
        if section.upgrade_layers and not plain:
            raise PalimpsaError(f"{section.path} is a Palimpsa model already; remove model.upgrade_layers")
        model, tokenizer_dir = load_palimpsa(path, dtype), path
    else:
        if not section.upgrade_layers:
            raise PalimpsaError(f"{section.path} is not a Palimpsa model; set model.upgrade_layers (e.g. 8) to "
                                "upgrade it first (or none to fine-tune it as a plain Mamba2), or upgrade it with "
                                "upgrade-model")
        if plain:  # a plain Mamba2 fine-tune (the baseline arm)
            model, tokenizer_dir = load_mamba2(section.path, dtype)
        else:
            result = upgrade_model(section.path, section.upgrade_layers, dtype=section.dtype,
                                   beta_init=section.beta_init, beta_rank=section.beta_rank, log=log)
            model, tokenizer_dir = result.model, result.source_directory
    if section.gradient_checkpointing:
        enable_activation_checkpointing(model, keep_scan_outputs=section.keep_scan_outputs)
    return model.train(), tokenizer_dir


def new_mamba2(recipe: Recipe) -> PalimpsaForCausalLM:
    """A Mamba2 of ``model.scratch``'s dimensions with mamba_ssm's initialisation, sized to the tokenizer."""
    from transformers import AutoTokenizer

    scratch = recipe.model.scratch
    tokenizer = AutoTokenizer.from_pretrained(recipe.data.tokenizer)
    vocab = len(tokenizer)
    multiple = scratch.pad_vocab_size_multiple
    torch.manual_seed(recipe.train.seed)
    config = PalimpsaConfig(
        d_model=scratch.d_model, n_layer=scratch.n_layer, d_state=scratch.d_state, headdim=scratch.headdim,
        expand=scratch.expand, ngroups=scratch.ngroups, d_conv=scratch.d_conv, chunk_size=scratch.chunk_size,
        tie_word_embeddings=scratch.tie_word_embeddings, vocab_size=padded_vocab_size(vocab, multiple),
        base_vocab_size=vocab, eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
        base_model=None)
    return PalimpsaForCausalLM(config)


def select_trainable(model: torch.nn.Module, recipe: Recipe) -> TrainableSelection:
    """Freeze everything, then unfreeze what ``recipe.trainable`` selects (LoRA adapters included).

    Raises PalimpsaError when a mode or pattern selects nothing: a silent no-op selection trains nothing.
    """
    mode = recipe.trainable.mode
    for param in model.parameters():
        param.requires_grad_(False)
    named = list(model.named_parameters())
    upgraded = {f"layers.{i}.mixer." for i in model.config.upgraded_layers}

    def in_upgraded(name: str) -> bool:
        return any(marker in name for marker in upgraded)

    groups: dict[str, list] = {}
    if mode == "lora":
        groups["lora"] = [(n, p) for n, p in named if "lora_" in n]
        if not groups["lora"]:
            raise PalimpsaError("trainable.mode lora but no LoRA adapter is attached; "
                                f"check lora.target_modules {recipe.lora.target_modules}")
    if mode in ("beta", "beta+lora", "upgraded"):
        groups["beta"] = [(n, p) for n, p in named if ".beta_" in n]
        if not groups["beta"]:
            raise PalimpsaError("trainable.mode selects the beta parameters but the model has no Palimpsa layer")
    if mode == "upgraded":
        groups["upgraded"] = [(n, p) for n, p in named if in_upgraded(n) and ".beta_" not in n]
    if mode == "beta+lora":
        groups["lora"] = [(n, p) for n, p in named if "lora_" in n]
        if not groups["lora"]:
            raise PalimpsaError("trainable.mode beta+lora but no LoRA adapter is attached; "
                                f"check lora.target_modules {recipe.lora.target_modules}")
    if mode == "all":
        groups["beta"] = [(n, p) for n, p in named if ".beta_" in n]
        groups["other"] = [(n, p) for n, p in named if ".beta_" not in n]
        groups = {k: v for k, v in groups.items() if v}  # a plain Mamba2 (pretraining) has no beta
    if mode == "patterns":
        for pattern in recipe.trainable.patterns:
            matched = [(n, p) for n, p in named if fnmatch.fnmatch(n, pattern)]
            if not matched:
                example = next((n for n, _ in named if ".mixer." in n), named[0][0])
                raise PalimpsaError(f"trainable pattern {pattern!r} matches no parameter; names look like "
                                    f"{example!r}")
            groups.setdefault("beta", [])
            groups.setdefault("other", [])
            for name, param in matched:
                group = groups["beta"] if ".beta_" in name else groups["other"]
                if all(name != n for n, _ in group):
                    group.append((name, param))
        groups = {k: v for k, v in groups.items() if v}
    for params in groups.values():
        for _, param in params:
            param.requires_grad_(True)
    return TrainableSelection(groups)


def lora_layers(model: torch.nn.Module, recipe: Recipe) -> list[int]:
    """The layers that get adapters: ``lora.layers`` (``all``, a count or indices), else the upgraded layers, else
    (a plain Mamba2) every layer."""
    from ..convert.surgery import parse_layer_spec

    n_layer, spec = model.config.n_layer, (recipe.lora.layers or "").strip().lower()
    if spec == "all" or (not spec and not model.config.upgraded_layers):
        return list(range(n_layer))
    if not spec:
        return list(model.config.upgraded_layers)
    try:
        return parse_layer_spec(spec, n_layer)
    except PalimpsaError as error:
        raise PalimpsaError(f"lora.layers: {str(error).removeprefix('--layers: ')}") from None


def attach_lora(model: torch.nn.Module, recipe: Recipe):
    """peft LoRA on the named projections of the chosen layers (:func:`lora_layers`). A target that matches no
    module is an error here, before peft could silently adapt nothing or the wrong layers."""
    from peft import LoraConfig, get_peft_model

    targets = [f"backbone.layers.{i}.mixer.{module}" for i in lora_layers(model, recipe)
               for module in recipe.lora.target_modules]
    names = {name for name, _ in model.named_modules()}
    missing = [t for t in targets if t not in names]
    if missing:
        raise PalimpsaError(f"lora.target_modules: {missing[0]!r} is not a module of the model; the mixers have "
                            "in_proj, out_proj, conv1d, beta_down, beta_up")
    config = LoraConfig(r=recipe.lora.r, lora_alpha=recipe.lora.alpha, lora_dropout=recipe.lora.dropout,
                        target_modules=targets, bias="none")
    return get_peft_model(model, config)


def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights with LoRA deltas folded in, under the plain model's names (the model is unchanged)."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    state = {}
    lora_layers = {name: module for name, module in base.named_modules() if isinstance(module, LoraLayer)}
    for name, tensor in base.state_dict().items():
        if "lora_" in name:
            continue
        owner = name.rsplit(".", 2)[0] if ".base_layer." in name else None
        if owner in lora_layers and name.endswith("base_layer.weight"):
            layer = lora_layers[owner]
            delta = sum(layer.get_delta_weight(adapter) for adapter in layer.active_adapters)
            state[name.replace(".base_layer", "")] = (tensor + delta.to(tensor.dtype)).detach()
        else:
            state[name.replace(".base_layer", "")] = tensor.detach()
    return state


def parameter_groups(selection: TrainableSelection, recipe: Recipe) -> list[dict]:
    optim = recipe.optim
    groups = []
    for name, params in selection.groups.items():
        if name == "beta":
            # The log gains move multiplicatively at their own rate; the gate (and a first-format linear gain)
            # at beta_lr. Both see gradients proportional to the small initial gain, hence the small epsilon.
            gains = [p for n, p in params if n.endswith("beta_log_gain")]
            gate = [p for n, p in params if not n.endswith("beta_log_gain")]
            for label, tensors, lr in (("gain", gains, optim.gain_lr), ("beta", gate, optim.beta_lr or optim.lr)):
                if tensors:
                    groups.append({"params": tensors, "lr": lr, "weight_decay": 0.0, "eps": optim.beta_eps,
                                   "name": label})
            continue
        tensors = [p for _, p in params]
        decayed = [p for p in tensors if p.dim() >= 2]
        plain = [p for p in tensors if p.dim() < 2]
        if decayed:
            groups.append({"params": decayed, "lr": optim.lr, "weight_decay": optim.weight_decay, "name": name})
        if plain:
            groups.append({"params": plain, "lr": optim.lr, "weight_decay": 0.0, "name": f"{name}-nodecay"})
    return groups


def lr_factor(step: int, recipe: Recipe) -> float:
    """Warmup (linear from 0) then cosine or linear decay to ``min_lr_ratio``, or constant."""
    schedule, total = recipe.schedule, recipe.train.max_steps
    if step < schedule.warmup_steps:
        return (step + 1) / schedule.warmup_steps
    if schedule.type == "constant":
        return 1.0
    progress = min(1.0, (step - schedule.warmup_steps) / max(1, total - schedule.warmup_steps))
    shape = 0.5 * (1 + math.cos(math.pi * progress)) if schedule.type == "cosine" else 1 - progress
    return schedule.min_lr_ratio + (1 - schedule.min_lr_ratio) * shape


def _problem(error: Exception) -> str:
    """One line on why a checkpoint could not be loaded."""
    if isinstance(error, PalimpsaError):
        return str(error)
    first_line = str(error).partition("\n")[0][:200]
    return f"{type(error).__name__}: {first_line}"


class Trainer:
    """One fine-tuning run; ``run()`` trains to ``train.max_steps``, resuming from the last checkpoint if asked."""

    def __init__(self, recipe: Recipe, resume: bool = False, log: Callable[[str], None] = print):
        from accelerate import Accelerator
        from accelerate.utils import set_seed

        self.recipe, self.resume = recipe, resume
        self.output_dir = Path(recipe.output_dir).expanduser()
        # The schedule counts optimizer steps: stepped by hand once per step, not per process or micro-batch.
        self.accelerator = Accelerator(gradient_accumulation_steps=recipe.train.grad_accum,
                                       mixed_precision=recipe.train.mixed_precision,
                                       step_scheduler_with_optimizer=False)
        self.is_main = self.accelerator.is_main_process
        self.log = log if self.is_main else (lambda _line: None)
        set_seed(recipe.train.seed)
        self._check_run_directory()

    def _check_run_directory(self) -> None:
        check_writable(self.output_dir, f"output_dir {self.output_dir}")
        saved = self.output_dir / "recipe.yaml"
        current = self.recipe.model_dump(mode="json")
        if self.resume:
            if not saved.is_file():
                raise PalimpsaError(f"--resume: {self.output_dir} has no recipe.yaml; start the run without --resume")
            try:
                previous = yaml.safe_load(saved.read_text())
            except (yaml.YAMLError, UnicodeDecodeError):
                previous = None
            if not isinstance(previous, dict):
                raise PalimpsaError(f"--resume: {saved} is not a recipe; restore it, or start a new output_dir")
            keep = ("max_steps",)  # a resumed run may be extended
            differs = [key for key in current if key != "train" and current[key] != previous.get(key)]
            differs += [f"train.{k}" for k in current["train"] if k not in keep
                        and current["train"][k] != previous.get("train", {}).get(k)]
            if differs:
                raise PalimpsaError(f"--resume: the recipe differs from the run's recipe.yaml in {differs}; resume "
                                    "with the same recipe or start a new output_dir")
        elif saved.is_file() and latest_checkpoint(self.output_dir) is not None:
            raise PalimpsaError(f"{self.output_dir} holds a run with checkpoints; pass --resume to continue it or "
                                "choose another output_dir")

    def run(self) -> dict:
        from tqdm.auto import tqdm

        from .data import Prefetcher, build_data

        recipe, accelerator = self.recipe, self.accelerator
        model, tokenizer_dir = load_model_for_training(recipe, self.log)
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(recipe.data.tokenizer or str(tokenizer_dir))
        if recipe.trainable.mode in ("beta+lora", "lora"):
            model = attach_lora(model, recipe)
        selection = select_trainable(model, recipe)
        for line in selection.describe(model):
            self.log(line)
        stream, eval_batches = build_data(recipe.data, tokenizer, vocab_size=model.config.vocab_size)
        optimizer = torch.optim.AdamW(parameter_groups(selection, recipe), betas=recipe.optim.betas,
                                      eps=recipe.optim.eps)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, recipe))
        model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
        self.model, self.optimizer, self.scheduler, self.tokenizer = model, optimizer, scheduler, tokenizer

        step, last_good = 0, None
        self.cache = None  # the carried recurrent state in state-passing mode
        if self.is_main:
            self._remove_partial_directories()
        if self.resume:
            last_good, step = self._restore(stream)
            self._truncate_metrics(step)
            self.log(f"resumed from {last_good} at step {step}")
        elif self.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.output_dir / "recipe.yaml", recipe.to_yaml())
            self._truncate_metrics(0)  # rows of an earlier attempt that left no checkpoint
        writer = self._tensorboard()
        batches = Prefetcher(stream)  # the next batches are made while the accelerator works on this one
        bar = tqdm(total=recipe.train.max_steps, initial=step, desc="fine-tuning", disable=not self.is_main)
        window_tokens, window_start = 0, time.perf_counter()
        trainable = [p for p in model.parameters() if p.requires_grad]
        while step < recipe.train.max_steps:
            losses, tokens = [], 0
            for _ in range(recipe.train.grad_accum):
                batch = self._next_batch(batches)
                with accelerator.accumulate(model):
                    loss, self.cache = self._forward(model, batch, self.cache)
                    if not torch.isfinite(loss):
                        self._stop_on_non_finite(step, loss, last_good)
                    accelerator.backward(loss)
                    grad_norm = None
                    if accelerator.sync_gradients and recipe.optim.grad_clip:
                        grad_norm = accelerator.clip_grad_norm_(trainable, recipe.optim.grad_clip)
                    optimizer.step()
                    if accelerator.sync_gradients:
                        scheduler.step()
                    optimizer.zero_grad(set_to_none=True)
                if batch.tokens:
                    losses.append(loss.detach().float().item())
                tokens += batch.input_tokens
            step += 1
            window_tokens += tokens * accelerator.num_processes
            bar.update(1)
            if step % recipe.train.log_every == 0 or step == recipe.train.max_steps:
                elapsed = max(time.perf_counter() - window_start, 1e-9)
                row = {"step": step, "loss": sum(losses) / len(losses) if losses else None,
                       **self._learning_rates(optimizer),
                       "tokens_per_s": window_tokens / elapsed, "tokens": tokens,
                       "grad_norm": None if grad_norm is None else float(grad_norm), **self._beta_stats(model)}
                window_tokens, window_start = 0, time.perf_counter()
                self._log_metrics(row, writer)
                bar.set_postfix(loss="-" if row["loss"] is None else f"{row['loss']:.4f}",
                                tok_s=f"{row['tokens_per_s']:,.0f}")
            if recipe.eval.every and step % recipe.eval.every == 0 and step < recipe.train.max_steps:
                self._log_metrics(self.evaluate(eval_batches, step), writer)
            if recipe.checkpoint.every and step % recipe.checkpoint.every == 0 and step < recipe.train.max_steps:
                last_good = self.save_checkpoint(step, batches)
        bar.close()
        batches.close()
        final_eval = self.evaluate(eval_batches, step)
        self._log_metrics(final_eval, writer)
        last_good = self.save_checkpoint(step, batches)
        final = self.export_final(last_good)
        if writer is not None:
            writer.close()
        return {"step": step, "final": str(final), "eval": final_eval}

    def _next_batch(self, batches):
        """Each process takes every ``num_processes``-th batch of the one seeded stream."""
        for _ in range(self.accelerator.process_index):
            next(batches)
        batch = next(batches)
        for _ in range(self.accelerator.num_processes - 1 - self.accelerator.process_index):
            next(batches)
        return batch

    def _forward(self, model, batch, cache):
        from ..model.cache import PalimpsaCache

        device = self.accelerator.device
        inputs = {"input_ids": batch.input_ids.to(device), "labels": batch.labels.to(device)}
        if batch.cu_seqlens is not None:
            inputs["cu_seqlens"] = batch.cu_seqlens.to(device)
        else:  # truncated backpropagation through time: carry the (detached) state between batches
            config = self.accelerator.unwrap_model(model).config
            if cache is None:
                cache = PalimpsaCache(config.n_layer)
            else:
                cache.reset_rows(batch.continues.to(device), config.importance_prior)
            inputs["cache_params"] = cache
        with self.accelerator.autocast():
            output = model(**inputs)
        if not batch.tokens:  # no target in this micro-batch (answer-only documents): a zero loss, not 0/0
            return output.logits.sum() * 0.0, cache
        return output.loss, cache

    @staticmethod
    def _learning_rates(optimizer) -> dict:
        """``lr`` of the main parameters (the first group that is not beta's), and ``{group}_lr`` of the beta groups."""
        rates = {}
        for group in optimizer.param_groups:
            name = group.get("name", "")
            key = f"{name}_lr" if name in ("gain", "beta") else "lr"
            rates.setdefault(key, group["lr"])
        if "lr" not in rates:  # beta-only training: report the gate's rate as the main one
            rates["lr"] = rates.get("beta_lr", next(iter(rates.values())))
        return rates

    def _stop_on_non_finite(self, step: int, loss: torch.Tensor, last_good: Path | None) -> None:
        where = f"the last good checkpoint is {last_good}" if last_good else "no checkpoint was written yet"
        raise NonFiniteLoss(f"loss became {loss.item()} at step {step + 1}; stopped, {where}. Lower optim.lr or "
                            "optim.beta_lr, or set optim.grad_clip")

    def _beta_stats(self, model) -> dict:
        """Per upgraded layer, the geometric mean over heads of the learned gain (cheap: parameters only)."""
        mixers = palimpsa_mixers_of(model)
        if not mixers:
            return {}
        stats = {}
        for mixer in mixers:
            gains = mixer.gain().detach().float().clamp_min(1e-30)
            stats[f"gain/L{mixer.layer_idx}"] = gains.log().mean().exp().item()
        values = list(stats.values())
        return {"gain_geomean": math.exp(sum(math.log(v) for v in values) / len(values)), "gain_max": max(values),
                **stats}

    def _tensorboard(self):
        if not (self.is_main and self.recipe.logging.tensorboard):
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise PalimpsaError("logging.tensorboard needs the tensorboard package: pip install tensorboard, or "
                                "set logging.tensorboard=false") from None
        return SummaryWriter(str(self.output_dir / "tensorboard"))

    def _log_metrics(self, row: dict, writer) -> None:
        if not self.is_main:
            return
        with open(self.output_dir / "metrics.jsonl", "a") as handle:
            handle.write(json.dumps(row) + "\n")
        if writer is not None:
            prefix = "eval" if "eval_nll" in row else "train"
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)):
                    # grouped keys (gain/L3, importance/L3/mean_excess) get their own TensorBoard sections
                    writer.add_scalar(key if "/" in key else f"{prefix}/{key}", value, row["step"])
            writer.flush()
        if self.recipe.logging.wandb:
            import wandb

            if wandb.run is None:
                wandb.init(project=self.recipe.logging.wandb_project, config=self.recipe.model_dump(mode="json"))
            wandb.log(row, step=row["step"])

    @torch.no_grad()
    def evaluate(self, eval_batches, step: int) -> dict:
        """Held-out NLL (nats per token) and a small passkey probe."""
        model = self.model
        model.eval()
        device = self.accelerator.device
        total, count = 0.0, 0
        for batch in eval_batches[: self.recipe.eval.batches]:
            if not batch.tokens:
                continue
            output = model(input_ids=batch.input_ids.to(device), labels=batch.labels.to(device),
                           cu_seqlens=None if batch.cu_seqlens is None else batch.cu_seqlens.to(device))
            total += output.loss.float().item() * batch.tokens
            count += batch.tokens
        row = {"step": step, "eval_nll": total / max(count, 1)}
        if self.recipe.eval.passkey_samples:
            from ..evaluate.evaluation import greedy_answers, passkey_correct
            from ..evaluate.tasks import passkey_samples

            length = self.recipe.eval.passkey_length or self.recipe.data.seq_len
            samples = passkey_samples(self.tokenizer, [length], [0.0, 0.5, 1.0], self.recipe.eval.passkey_samples,
                                      seed=1234)
            answers = greedy_answers(self.accelerator.unwrap_model(model), self.tokenizer, samples, batch_size=4)
            row["passkey_accuracy"] = sum(passkey_correct(a, s.answer) for a, s in zip(answers, samples)) / len(
                samples)
        if self.recipe.eval.importance and palimpsa_mixers_of(model):
            from ..evaluate.importance import inspect_importance, layer_summary, task_probe

            length = self.recipe.eval.passkey_length or self.recipe.data.seq_len
            probe = task_probe(self.tokenizer, "passkey", length, depth=0.5, seed=1234)
            row.update(layer_summary(inspect_importance(self.accelerator.unwrap_model(model), probe)))
        model.train()
        return row

    def _restore(self, stream) -> tuple[Path, int]:
        """Load the newest checkpoint that loads whole: model, optimizer, scheduler, RNG, data position and carried
        state. One that does not (a file truncated, corrupted or missing) is named in a warning and the one before
        it is tried. Returns the checkpoint and its step."""
        candidates = complete_checkpoints(self.output_dir)
        if not candidates:
            raise PalimpsaError(f"--resume: no complete checkpoint under {self.output_dir}/checkpoints; start the "
                                "run without --resume")
        problems = []
        for checkpoint in reversed(candidates):
            try:
                step = self._load_checkpoint(checkpoint, stream)
            except Exception as error:  # a broken checkpoint fails in torch, safetensors or pickle, in many types
                problems.append(f"{checkpoint.name}: {_problem(error)}")
                if self.is_main:
                    print(f"warning: cannot resume from {checkpoint} ({_problem(error)}); trying the checkpoint "
                          "before it", file=sys.stderr)
                continue
            return checkpoint, step
        raise PalimpsaError(f"--resume: no checkpoint under {self.output_dir}/checkpoints loads ({'; '.join(problems)})"
                            "; start a new output_dir without --resume")

    def _load_checkpoint(self, checkpoint: Path, stream) -> int:
        from accelerate.utils import load
        from accelerate.utils.constants import RNG_STATE_NAME

        try:
            trainer_state = json.loads((checkpoint / "trainer_state.json").read_text())
            step, data_state = int(trainer_state["step"]), trainer_state["data"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError):
            raise PalimpsaError(f"{checkpoint / 'trainer_state.json'} is not a trainer state") from None
        check_files(checkpoint, trainer_state.get("files", {}), "trainer_state.json")
        # accelerate's load_state only logs a failure to load the RNG state, and the run would go on with other
        # random numbers than the run it continues: load it here first, so that the failure counts
        rng = checkpoint / "state" / f"{RNG_STATE_NAME}_{self.accelerator.process_index}.pkl"
        try:
            load(rng)
        except Exception as error:  # missing, truncated or not a pickle of RNG states
            raise PalimpsaError(f"cannot load the RNG state {rng}: {_problem(error)}") from None
        self.accelerator.load_state(str(checkpoint / "state"))
        stream.load_state_dict(data_state)
        self.cache = self._load_carried_state(checkpoint)
        return step

    def _remove_partial_directories(self) -> None:
        """What a killed run was writing (``checkpoints/step-N.partial``, ``final.partial``): never complete, and
        never read, so removed before this run writes its own."""
        for partial in [*self.output_dir.glob(f"{run_layout.CHECKPOINTS}/{run_layout.CHECKPOINT_PREFIX}*.partial"),
                        self.output_dir / "final.partial"]:
            shutil.rmtree(partial, ignore_errors=True)

    def written(self) -> str:
        """What the run has on disk so far, for a message after an interruption: the files in ``output_dir`` and
        the newest complete checkpoint."""
        if not self.output_dir.is_dir() or not any(self.output_dir.iterdir()):
            return "nothing was written"
        names = ", ".join(sorted(p.name + ("/" if p.is_dir() else "") for p in self.output_dir.iterdir()))
        checkpoint = latest_checkpoint(self.output_dir)
        last = f"the last complete checkpoint is {checkpoint}" if checkpoint else "no checkpoint was written yet"
        return f"{self.output_dir} holds {names}; {last}"

    def save_checkpoint(self, step: int, stream) -> Path:
        """Full state (model, optimizer, scheduler, RNG, data position) and a loadable model, atomically: written
        under ``step-N.partial`` (removed if this fails or is interrupted) and renamed when complete."""
        accelerator = self.accelerator
        folder = self.output_dir / "checkpoints"
        final = run_layout.checkpoint_directory(self.output_dir, step)
        partial = folder / f"{final.name}.partial"
        if self.is_main:
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
        try:
            accelerator.wait_for_everyone()
            accelerator.save_state(str(partial / "state"))
            if self.cache is not None:  # state passing: the carried state is part of where the run stands
                carried = {"conv": self.cache.conv, "ssm": self.cache.ssm, "seen_tokens": self.cache.seen_tokens}
                torch.save(carried, partial / f"carried_state_rank{accelerator.process_index}.pt")
            state = self._full_state_dict()
            if self.is_main:
                self._save_model_directory(state, partial / "model")
                files = sorted(str(p.relative_to(partial)) for p in (partial / "state").rglob("*") if p.is_file())
                trainer_state = {"step": step, "data": stream.state_dict(), "files": file_manifest(partial, files)}
                (partial / "trainer_state.json").write_text(json.dumps(trainer_state, indent=2) + "\n")
                if final.exists():
                    shutil.rmtree(final)
                partial.rename(final)
                for old in complete_checkpoints(self.output_dir)[: -self.recipe.checkpoint.keep]:
                    shutil.rmtree(old)
        except BaseException:
            if self.is_main:
                shutil.rmtree(partial, ignore_errors=True)
            raise
        accelerator.wait_for_everyone()
        return final

    def _truncate_metrics(self, step: int) -> None:
        """Drop metrics a killed run logged after its last checkpoint; the resumed run logs those steps again."""
        path = self.output_dir / "metrics.jsonl"
        if not (self.is_main and path.is_file()):
            return
        kept = []
        for line in path.read_text(errors="replace").splitlines():
            try:
                if json.loads(line)["step"] <= step:
                    kept.append(line)
            except (json.JSONDecodeError, KeyError, TypeError):  # a line torn by SIGKILL mid-write
                continue
        write_text_atomic(path, "".join(line + "\n" for line in kept))

    def _load_carried_state(self, checkpoint: Path):
        from ..model.cache import PalimpsaCache

        path = checkpoint / f"carried_state_rank{self.accelerator.process_index}.pt"
        if not path.is_file():
            return None
        carried = torch.load(path, map_location=self.accelerator.device, weights_only=True)
        cache = PalimpsaCache(len(carried["conv"]))
        cache.conv, cache.ssm, cache.seen_tokens = carried["conv"], carried["ssm"], carried["seen_tokens"]
        return cache

    def _full_state_dict(self) -> dict[str, torch.Tensor]:
        model = self.accelerator.unwrap_model(self.model)
        if self.recipe.trainable.mode in ("beta+lora", "lora"):
            return merged_state_dict(model)
        return self.accelerator.get_state_dict(self.model)

    def _save_model_directory(self, state: dict[str, torch.Tensor], directory: Path) -> None:
        model = self.accelerator.unwrap_model(self.model)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        directory.mkdir(parents=True)
        write_model_directory(directory, base.config, state, report_name="export_report.json",
                              report={**report_header(), "recipe": self.recipe.model_dump(mode="json")},
                              tokenizer=self.tokenizer)

    def export_final(self, checkpoint: Path) -> Path:
        """``output_dir/final``: the last checkpoint's model directory, copied atomically."""
        final = self.output_dir / "final"
        if self.is_main:
            staging = self.output_dir / "final.partial"
            shutil.rmtree(staging, ignore_errors=True)
            try:
                shutil.copytree(checkpoint / "model", staging)
                if final.exists():
                    shutil.rmtree(final)
                staging.rename(final)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        self.accelerator.wait_for_everyone()
        return final
