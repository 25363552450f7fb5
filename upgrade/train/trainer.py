"""The fine-tuning run, in parts (torchtune's manner): :meth:`Trainer.setup` builds what a run needs from its recipe,
:meth:`Trainer.train` runs the loop, :meth:`Trainer.evaluate`, :meth:`Trainer.save_checkpoint` and
:meth:`Trainer.load_checkpoint` are the steps it takes, each usable on its own once the trainer exists.

The run's directory (``output_dir``) is laid out as :mod:`~palimpsa.upgrade.train.layout` describes. Checkpoints and
final/ are written under ``.partial`` names and renamed when complete; a partial one is removed when its writing
fails or is interrupted, or (after SIGKILL) when the next run starts. ``--resume`` takes the newest checkpoint that
loads whole and falls back to an older one, with a warning, when it does not.
"""

from __future__ import annotations

import gc
import json
import math
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import yaml
from transformers import AutoTokenizer

from ..convert.loading import is_palimpsa_directory, load_mamba2, load_palimpsa
from ..convert.upgrade import upgrade_model
from ..errors import PalimpsaError
from ..evaluate.evaluation import greedy_answers, passkey_correct
from ..evaluate.importance import inspect_importance, layer_summary, task_probe
from ..evaluate.tasks import passkey_samples
from ..io.dtypes import parse_dtype
from ..io.manifest import check_files, file_manifest
from ..io.model_directory import report_header, write_model_directory
from ..io.output import check_writable, write_json_atomic, write_text_atomic
from ..model.cache import PalimpsaCache
from ..model.configuration import PalimpsaConfig, padded_vocab_size
from ..model.modeling import PalimpsaForCausalLM, enable_activation_checkpointing, palimpsa_mixers_of
from . import layout
from .data import Prefetcher, build_data
from .processes import cpu_data_parallel
from .recipe import Recipe
from .release import finish_final
from .trainable import attach_lora, group_lr_factors, merged_state_dict, parameter_groups, select_trainable


def weighted_loss(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The weighted mean of the next-token losses: ``labels[t]`` (and its weight ``weights[t]``) is predicted at
    ``t - 1``, as in the model's own loss; targets labelled -100 have no loss."""
    logits, labels, weights = logits[:, :-1].float(), labels[:, 1:], weights[:, 1:]
    losses = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                               ignore_index=-100, reduction="none")
    weights = weights.reshape(-1) * (labels.reshape(-1) != -100)
    return (losses * weights).sum() / weights.sum()


class NonFiniteLoss(PalimpsaError):
    """The loss became NaN or infinite; the run stopped and kept its last good checkpoint."""


def load_model_for_training(recipe: Recipe, log: Callable[[str], None]):
    """The Palimpsa model of ``recipe.model.path``; a plain Mamba2 is upgraded first (``model.upgrade_layers``)."""
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


def _problem(error: Exception) -> str:
    """One line on why a checkpoint could not be loaded."""
    if isinstance(error, PalimpsaError):
        return str(error)
    first_line = str(error).partition("\n")[0][:200]
    return f"{type(error).__name__}: {first_line}"


def _save_state(accelerator, directory: Path) -> None:
    """accelerate's ``save_state``, with a head tied to the embedding stored once, as transformers stores it:
    accelerate would drop the second name itself, warning "Removed shared tensor" at every checkpoint. Its
    ``load_state`` (safetensors' ``load_model``) knows the tie and restores it."""
    handle = accelerator.register_save_state_pre_hook(_without_tied_copies)
    try:
        accelerator.save_state(str(directory))
    finally:
        handle.remove()


def _without_tied_copies(models, weights: list[dict], output_dir) -> None:
    """accelerate's hook before saving: from each state dict, drop the names whose tensor an earlier name holds."""
    for state in weights:
        seen = set()
        for name in list(state):
            tensor = state[name]
            if not isinstance(tensor, torch.Tensor) or tensor.device.type == "meta":
                continue
            key = (tensor.device, tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
            if key in seen:
                del state[name]
            seen.add(key)


class Trainer:
    """One fine-tuning run of ``recipe``; with ``resume``, the continuation of the run in its ``output_dir``.

    Constructing it checks the run directory and calls :meth:`setup`, so every attribute exists once the trainer
    does: ``model``, ``optimizer``, ``scheduler`` (prepared by accelerate), ``tokenizer`` (the one saved with every
    model directory; evaluation never changes it), ``stream`` and ``eval_batches`` (the data; ``batches``, where the
    next batch comes from: the stream, with a prefetching thread in front of it while ``train`` runs), ``writer``
    (TensorBoard's, or None), ``step`` (optimizer steps done), ``cache`` (the carried state in state-passing mode,
    else None) and ``last_good`` (the newest checkpoint written or resumed from). ``log`` receives the plan and
    progress lines (on the main process only).
    """

    def __init__(self, recipe: Recipe, resume: bool = False, log: Callable[[str], None] = print):
        from accelerate import Accelerator
        from accelerate.utils import set_seed

        self.recipe, self.resume = recipe, resume
        self.output_dir = Path(recipe.output_dir).expanduser()
        # The schedule counts optimizer steps: stepped by hand once per step, not per process or micro-batch.
        # cpu: several processes on a machine without a GPU are joined over gloo, not run as copies of the run
        self.accelerator = Accelerator(gradient_accumulation_steps=recipe.train.grad_accum,
                                       mixed_precision=recipe.train.mixed_precision,
                                       step_scheduler_with_optimizer=False, cpu=cpu_data_parallel())
        self.is_main = self.accelerator.is_main_process
        self.log = log if self.is_main else (lambda _line: None)
        set_seed(recipe.train.seed)
        if recipe.train.tf32:
            torch.set_float32_matmul_precision("high")
        self._check_run_directory()
        self.setup()

    # -- setup ---------------------------------------------------------------------------------------------------

    def setup(self) -> None:
        """The plan, then the model (upgraded first when the recipe says so), its tokenizer, the trainable selection,
        the data, the optimizer and schedule, all prepared by accelerate; then the run directory: started afresh,
        or (``resume``) continued from its newest checkpoint that loads."""
        recipe = self.recipe
        self.log(self.plan())
        model, tokenizer_dir = load_model_for_training(recipe, self.log)
        self.tokenizer = AutoTokenizer.from_pretrained(recipe.data.tokenizer or str(tokenizer_dir))
        if recipe.trainable.mode in ("beta+lora", "lora"):
            model = attach_lora(model, recipe)
        selection = select_trainable(model, recipe)
        for line in selection.describe(model):
            self.log(line)
        self.stream, self.eval_batches = build_data(recipe.data, self.tokenizer, vocab_size=model.config.vocab_size)
        self.batches = self.stream  # where batches come from; train() puts a prefetching thread in front of it
        groups = parameter_groups(selection, recipe)
        optimizer = torch.optim.AdamW(groups, betas=recipe.optim.betas, eps=recipe.optim.eps)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, group_lr_factors(groups, recipe))
        self.model, self.optimizer, self.scheduler = self.accelerator.prepare(model, optimizer, scheduler)
        self.step, self.cache, self.last_good = 0, None, None
        if self.is_main:
            for partial in layout.partial_directories(self.output_dir):
                shutil.rmtree(partial, ignore_errors=True)
        if self.resume:
            self._resume()
            self._truncate_metrics(self.step)
            self.log(f"resumed from {self.last_good} at step {self.step}")
        elif self.is_main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.output_dir / layout.RECIPE, recipe.to_yaml())
            self._truncate_metrics(0)  # rows of an earlier attempt that left no checkpoint
        self.writer = self._tensorboard()

    def plan(self) -> str:
        recipe = self.recipe
        sources = ", ".join(s.type + ":" + (s.path or s.name or s.task or "") for s in recipe.data.resolved_sources())
        scratch = recipe.model.scratch
        model = recipe.model.path if scratch is None else (
            f"a new Mamba2 (d_model {scratch.d_model}, {scratch.n_layer} layers, d_state {scratch.d_state})")
        return (f"Plan\n  model       {model}"
                + (f" (upgrading layers {recipe.model.upgrade_layers})" if recipe.model.upgrade_layers else "")
                + f"\n  trainable   {recipe.trainable.mode}\n  data        {sources}, "
                f"{recipe.data.batch_size} x {recipe.data.seq_len} tokens per micro-batch x {recipe.train.grad_accum} "
                f"accumulation x {self.accelerator.num_processes} process(es)"
                f"{', state passing' if recipe.data.state_passing else ', packed'}\n"
                f"  processes   {self.processes_line()}\n"
                f"  steps       {recipe.train.max_steps} ({recipe.schedule.type}, warmup "
                f"{recipe.schedule.warmup_steps}, lr {recipe.optim.lr:g}, beta lr "
                f"{recipe.optim.beta_lr or recipe.optim.lr:g}"
                + (f", adapters from step {recipe.lora.start_step}" if recipe.lora.start_step else "") + ")\n"
                + "".join(f"  note        {note}\n" for note in recipe.notes)
                + f"  output      {recipe.output_dir}" + (" (resuming)" if self.resume else ""))

    def processes_line(self) -> str:
        """The plan's line on processes: how many, and how they share the work."""
        accelerator = self.accelerator
        if accelerator.num_processes == 1:
            return f"1 ({accelerator.device})"
        return (f"{accelerator.num_processes} data-parallel ({accelerator.distributed_type.value}, "
                f"{accelerator.state.backend}): batches dealt to them in turn, gradients averaged, the main process "
                "writes")

    def _check_run_directory(self) -> None:
        check_writable(self.output_dir, f"output_dir {self.output_dir}")
        saved = self.output_dir / layout.RECIPE
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
            try:  # a recipe saved before a field was added lacks it: compare it with the field's default filled in
                previous = type(self.recipe).model_validate(previous).model_dump(mode="json")
            except ValueError:
                pass  # not valid as it stands: compared as written, and the differing sections are named below
            keep = ("max_steps",)  # a resumed run may be extended
            differs = [key for key in current if key != "train" and current[key] != previous.get(key)]
            differs += [f"train.{k}" for k in current["train"] if k not in keep
                        and current["train"][k] != previous.get("train", {}).get(k)]
            if differs:
                raise PalimpsaError(f"--resume: the recipe differs from the run's recipe.yaml in {differs}; resume "
                                    "with the same recipe or start a new output_dir")
        elif saved.is_file() and layout.latest_checkpoint(self.output_dir) is not None:
            raise PalimpsaError(f"{self.output_dir} holds a run with checkpoints; pass --resume to continue it or "
                                "choose another output_dir")

    # -- train ---------------------------------------------------------------------------------------------------

    def train(self) -> dict:
        """Train from ``step`` to ``train.max_steps``, logging, evaluating and checkpointing as the recipe says; then
        evaluate, checkpoint and copy that checkpoint's model to ``final/``. Returns the final step, the ``final/``
        path and the final evaluation."""
        from tqdm.auto import tqdm

        recipe = self.recipe
        self.batches = Prefetcher(self.stream)  # the next batches are made while the accelerator works on this one
        bar = tqdm(total=recipe.train.max_steps, initial=self.step, desc="fine-tuning", disable=not self.is_main)
        window_tokens, window_start = 0, time.perf_counter()
        # What exists now (model, optimizer, data) lives through the loop: frozen out of the garbage collector's
        # generations, so that a collection of the oldest one during training does not walk it (with all 64 layers
        # of a 2.7b model upgraded such a collection cost 0.3 s of the step it fell in; frozen, none: 2.7% more
        # tokens/s over ten steps, docs/bench/pipea-2026-11-29, call 7)
        gc.collect()
        gc.freeze()
        try:
            while self.step < recipe.train.max_steps:
                losses, tokens, grad_norm = self._train_step()
                self.step += 1
                window_tokens += tokens * self.accelerator.num_processes
                bar.update(1)
                if self.step % recipe.train.log_every == 0 or self.step == recipe.train.max_steps:
                    elapsed = max(time.perf_counter() - window_start, 1e-9)
                    row = {"step": self.step, "loss": self._mean_loss(losses),
                           **self._learning_rates(), "tokens_per_s": window_tokens / elapsed, "tokens": tokens,
                           "grad_norm": None if grad_norm is None else float(grad_norm), **self._beta_stats(),
                           **self._peak_memory()}
                    window_tokens, window_start = 0, time.perf_counter()
                    self._log_metrics(row)
                    bar.set_postfix(loss="-" if row["loss"] is None else f"{row['loss']:.4f}",
                                    tok_s=f"{row['tokens_per_s']:,.0f}")
                last = self.step == recipe.train.max_steps  # the final evaluation and checkpoint follow the loop
                if recipe.eval.every and self.step % recipe.eval.every == 0 and not last:
                    self._log_metrics(self.evaluate())
                if recipe.checkpoint.every and self.step % recipe.checkpoint.every == 0 and not last:
                    self.save_checkpoint()
        finally:
            gc.unfreeze()
            bar.close()
            self.batches.close()
        final_eval = self.evaluate()
        self._log_metrics(final_eval)
        final = self._copy_final(self.save_checkpoint())
        if self.writer is not None:
            self.writer.close()
        return {"step": self.step, "final": str(final), "eval": final_eval}

    def _peak_memory(self) -> dict:
        """``peak_memory_gib``: the most GPU memory this process's tensors have held so far (the main process's,
        in a data-parallel run); nothing off the GPU."""
        device = self.accelerator.device
        if device.type != "cuda":
            return {}
        return {"peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30}

    def _mean_loss(self, losses: list[float]) -> float | None:
        """The logged loss: the mean over every micro-batch of the step, on every process (each holds only its own
        share), so that two processes log what one accumulating their micro-batches logs. None without any."""
        total, count = sum(losses), len(losses)
        if self.accelerator.num_processes > 1:  # every process logs at the same steps: the reduction meets
            both = self.accelerator.reduce(torch.tensor([total, count], dtype=torch.float64,
                                                        device=self.accelerator.device), reduction="sum")
            total, count = float(both[0]), int(both[1])
        return total / count if count else None

    def _train_step(self) -> tuple[list[float], int, torch.Tensor | None]:
        """One optimizer step over ``train.grad_accum`` micro-batches: their losses (those with targets), the input
        tokens they held, and the gradient norm before clipping (None when not clipped)."""
        recipe, accelerator = self.recipe, self.accelerator
        losses, tokens, grad_norm = [], 0, None
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        for _ in range(recipe.train.grad_accum):
            batch = self._next_batch()
            with accelerator.accumulate(self.model):
                loss = self._forward(batch)
                if not torch.isfinite(loss):
                    where = (f"the last good checkpoint is {self.last_good}" if self.last_good else
                             "no checkpoint was written yet")
                    raise NonFiniteLoss(f"loss became {loss.item()} at step {self.step + 1}; stopped, {where}. Lower "
                                        "optim.lr or optim.beta_lr, or set optim.grad_clip")
                accelerator.backward(loss)
                if accelerator.sync_gradients and self.step < recipe.lora.start_step:
                    # adapters that start late get no gradient before their start: none in the clipping norm,
                    # none in Adam's moments (their rate is 0 then too)
                    for name, parameter in self.model.named_parameters():
                        if "lora_" in name:
                            parameter.grad = None
                if accelerator.sync_gradients and recipe.optim.grad_clip:
                    grad_norm = accelerator.clip_grad_norm_(trainable, recipe.optim.grad_clip)
                self.optimizer.step()
                if accelerator.sync_gradients:
                    self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
            if batch.tokens:
                losses.append(loss.detach().float().item())
            tokens += batch.input_tokens
        return losses, tokens, grad_norm

    def _next_batch(self):
        """Each process takes every ``num_processes``-th batch of the one seeded stream."""
        for _ in range(self.accelerator.process_index):
            next(self.batches)
        batch = next(self.batches)
        for _ in range(self.accelerator.num_processes - 1 - self.accelerator.process_index):
            next(self.batches)
        return batch

    def _forward(self, batch) -> torch.Tensor:
        """The loss of one micro-batch; in state-passing mode the carried state (``cache``) goes in and is updated."""
        device = self.accelerator.device
        weighted = batch.weights is not None and batch.tokens
        inputs = {"input_ids": batch.input_ids.to(device)}
        if not weighted:
            inputs["labels"] = batch.labels.to(device)
        if batch.cu_seqlens is not None:
            inputs["cu_seqlens"] = batch.cu_seqlens.to(device)
        else:  # truncated backpropagation through time: carry the (detached) state between batches
            config = self.accelerator.unwrap_model(self.model).config
            if self.cache is None:
                self.cache = PalimpsaCache(config.n_layer)
            else:
                self.cache.reset_rows(batch.continues.to(device), config.importance_prior)
            inputs["cache_params"] = self.cache
        with self.accelerator.autocast():
            output = self.model(**inputs)
        if not batch.tokens:  # no target in this micro-batch (answer-only documents): a zero loss, not 0/0
            return output.logits.sum() * 0.0
        if weighted:  # sources with a loss_weight: the weighted mean of the targets' losses
            return weighted_loss(output.logits, batch.labels.to(device), batch.weights.to(device))
        return output.loss

    def _learning_rates(self) -> dict:
        """``lr`` of the main parameters (the first group that is not beta's), and ``{group}_lr`` of the beta groups."""
        rates = {}
        for group in self.optimizer.param_groups:
            name = group.get("name", "")
            key = f"{name}_lr" if name in ("gain", "beta") else "lr"
            rates.setdefault(key, group["lr"])
        if "lr" not in rates:  # beta-only training: report the gate's rate as the main one
            rates["lr"] = rates.get("beta_lr", next(iter(rates.values())))
        return rates

    def _beta_stats(self) -> dict:
        """Per upgraded layer, the geometric mean over heads of the learned gain (cheap: parameters only)."""
        mixers = palimpsa_mixers_of(self.model)
        if not mixers:
            return {}
        stats = {}
        for mixer in mixers:
            gains = mixer.gain().detach().float().clamp_min(1e-30)
            stats[f"gain/L{mixer.layer_idx}"] = gains.log().mean().exp().item()
        values = list(stats.values())
        return {"gain_geomean": math.exp(sum(math.log(v) for v in values) / len(values)), "gain_max": max(values),
                **stats}

    # -- evaluate ------------------------------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self) -> dict:
        """At ``step``: the held-out NLL (nats per token), a small passkey probe and the importance per layer. The
        passkey probe generates on its own copy of the tokenizer, so the one saved with the model stays as it is."""
        model, eval_section = self.model, self.recipe.eval
        model.eval()
        device = self.accelerator.device
        total, count = 0.0, 0
        for batch in self.eval_batches[: eval_section.batches]:
            if not batch.tokens:
                continue
            output = model(input_ids=batch.input_ids.to(device), labels=batch.labels.to(device),
                           cu_seqlens=None if batch.cu_seqlens is None else batch.cu_seqlens.to(device))
            total += output.loss.float().item() * batch.tokens
            count += batch.tokens
        row = {"step": self.step, "eval_nll": total / max(count, 1)}
        length = eval_section.passkey_length or self.recipe.data.seq_len
        if eval_section.passkey_samples:
            samples = passkey_samples(self.tokenizer, [length], [0.0, 0.5, 1.0], eval_section.passkey_samples,
                                      seed=1234)
            answers = greedy_answers(self.accelerator.unwrap_model(model), self.tokenizer, samples, batch_size=4)
            row["passkey_accuracy"] = sum(passkey_correct(a, s.answer) for a, s in zip(answers, samples)) / len(
                samples)
        if eval_section.importance and palimpsa_mixers_of(model):
            probe = task_probe(self.tokenizer, "passkey", length, depth=0.5, seed=1234)
            row.update(layer_summary(inspect_importance(self.accelerator.unwrap_model(model), probe)))
        model.train()
        return row

    def _tensorboard(self):
        if not (self.is_main and self.recipe.logging.tensorboard):
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise PalimpsaError("logging.tensorboard needs the tensorboard package: pip install tensorboard, or "
                                "set logging.tensorboard=false") from None
        return SummaryWriter(str(self.output_dir / layout.TENSORBOARD))

    def _log_metrics(self, row: dict) -> None:
        """A row into ``metrics.jsonl`` (and TensorBoard, wandb); an evaluation row also becomes the run's
        ``eval_summary.json``, which export-model puts on the model card."""
        if not self.is_main:
            return
        with open(self.output_dir / layout.METRICS, "a") as handle:
            handle.write(json.dumps(row) + "\n")
        evaluation = "eval_nll" in row
        if evaluation:
            write_json_atomic(self.output_dir / layout.EVAL_SUMMARY, row)
        if self.writer is not None:
            prefix = "eval" if evaluation else "train"
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)):
                    # grouped keys (gain/L3, importance/L3/mean_excess) get their own TensorBoard sections
                    self.writer.add_scalar(key if "/" in key else f"{prefix}/{key}", value, row["step"])
            self.writer.flush()
        if self.recipe.logging.wandb:
            import wandb

            if wandb.run is None:
                wandb.init(project=self.recipe.logging.wandb_project, config=self.recipe.model_dump(mode="json"))
            wandb.log(row, step=row["step"])

    def _truncate_metrics(self, step: int) -> None:
        """Drop metrics a killed run logged after its last checkpoint; the resumed run logs those steps again."""
        path = self.output_dir / layout.METRICS
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

    # -- save_checkpoint -----------------------------------------------------------------------------------------

    def save_checkpoint(self) -> Path:
        """At ``step``: the full state (model, optimizer, scheduler, RNG, data position, carried state) and a loadable
        model directory, atomically: written under ``step-N.partial`` (removed if this fails or is interrupted) and
        renamed when complete. Older checkpoints beyond ``checkpoint.keep`` are removed. Returns the checkpoint."""
        accelerator = self.accelerator
        self._check_replicas()
        final = layout.checkpoint_directory(self.output_dir, self.step)
        partial = layout.partial(final)
        if self.is_main:
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
        try:
            accelerator.wait_for_everyone()
            _save_state(accelerator, partial / "state")
            if self.cache is not None:  # state passing: the carried state is part of where the run stands
                carried = {"conv": self.cache.conv, "ssm": self.cache.ssm, "seen_tokens": self.cache.seen_tokens}
                torch.save(carried, partial / f"carried_state_rank{accelerator.process_index}.pt")
            state = self._full_state_dict()
            # every process has written its own files (its RNG state, its carried state) before the main process
            # lists them and renames the directory: accelerate's save_state ends without waiting for the others
            accelerator.wait_for_everyone()
            if self.is_main:
                self._save_model_directory(state, partial / "model")
                files = sorted(str(p.relative_to(partial)) for p in (partial / "state").rglob("*") if p.is_file())
                trainer_state = {"step": self.step, "data": self.batches.state_dict(),
                                 "processes": accelerator.num_processes, "files": file_manifest(partial, files)}
                (partial / layout.TRAINER_STATE).write_text(json.dumps(trainer_state, indent=2) + "\n")
                if final.exists():
                    shutil.rmtree(final)
                partial.rename(final)
                for old in layout.complete_checkpoints(self.output_dir)[: -self.recipe.checkpoint.keep]:
                    shutil.rmtree(old)
        except BaseException:
            if self.is_main:
                shutil.rmtree(partial, ignore_errors=True)
            raise
        accelerator.wait_for_everyone()
        self.last_good = final
        return final

    def _check_replicas(self) -> None:
        """Data-parallel processes must hold the same weights (each step applies the same averaged gradients): at
        every checkpoint, each process's sum of every trainable tensor is gathered and compared, bit for bit."""
        from accelerate.utils import DistributedType

        accelerator = self.accelerator
        if accelerator.num_processes == 1 or accelerator.distributed_type not in (DistributedType.MULTI_CPU,
                                                                                  DistributedType.MULTI_GPU):
            return  # one process, or sharded weights (FSDP) that no two processes hold alike
        sums = torch.stack([p.detach().double().sum() for p in self.model.parameters() if p.requires_grad])
        gathered = accelerator.gather(sums[None].to(accelerator.device))
        if not bool((gathered == gathered[0]).all()):
            apart = sorted({int(i) for i in (gathered != gathered[0]).any(dim=1).nonzero().flatten()})
            raise RuntimeError(f"at step {self.step} the weights of process(es) {apart} differ from process 0's; "
                               "the data-parallel processes diverged")

    def _full_state_dict(self) -> dict[str, torch.Tensor]:
        model = self.accelerator.unwrap_model(self.model)
        if self.recipe.trainable.mode in ("beta+lora", "lora"):
            return merged_state_dict(model, keep=self.is_main)
        return self.accelerator.get_state_dict(self.model)

    def _save_model_directory(self, state: dict[str, torch.Tensor], directory: Path) -> None:
        model = self.accelerator.unwrap_model(self.model)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        directory.mkdir(parents=True)
        write_model_directory(directory, base.config, state, report_name="export_report.json",
                              report={**report_header(), "recipe": self.recipe.model_dump(mode="json")},
                              tokenizer=self.tokenizer)

    def _copy_final(self, checkpoint: Path) -> Path:
        """``output_dir/final``: the checkpoint's model directory, copied atomically, with a model card and a
        generation config (:func:`~palimpsa.upgrade.train.release.finish_final`)."""
        final = self.output_dir / layout.FINAL
        if self.is_main:
            staging = layout.partial(final)
            shutil.rmtree(staging, ignore_errors=True)
            try:
                shutil.copytree(checkpoint / "model", staging)
                finish_final(staging, self.output_dir)  # its card and generation config
                if final.exists():
                    shutil.rmtree(final)
                staging.rename(final)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        self.accelerator.wait_for_everyone()
        return final

    # -- load_checkpoint -----------------------------------------------------------------------------------------

    def load_checkpoint(self, checkpoint: Path) -> None:
        """Continue from ``checkpoint``: model, optimizer, scheduler, RNG, data position and carried state, checked
        against the sha256 of every file of its state first. Sets ``step`` and ``last_good``."""
        from accelerate.utils import load
        from accelerate.utils.constants import RNG_STATE_NAME

        state_file = checkpoint / layout.TRAINER_STATE
        try:
            trainer_state = json.loads(state_file.read_text())
            step, data_state = int(trainer_state["step"]), trainer_state["data"]
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError):
            raise PalimpsaError(f"{state_file} is not a trainer state") from None
        check_files(checkpoint, trainer_state.get("files", {}), layout.TRAINER_STATE)
        # accelerate's load_state only logs a failure to load the RNG state, and the run would go on with other
        # random numbers than the run it continues: load it here first, so that the failure counts
        rng = checkpoint / "state" / f"{RNG_STATE_NAME}_{self.accelerator.process_index}.pkl"
        try:
            load(rng)
        except Exception as error:  # missing, truncated or not a pickle of RNG states
            raise PalimpsaError(f"cannot load the RNG state {rng}: {_problem(error)}") from None
        self.accelerator.load_state(str(checkpoint / "state"))
        self.stream.load_state_dict(data_state)
        self.cache = self._load_carried_state(checkpoint)
        self.step, self.last_good = step, checkpoint

    def _resume(self) -> None:
        """Load the newest checkpoint that loads whole. One that does not (a file truncated, corrupted or missing)
        is named in a warning and the one before it is tried."""
        candidates = layout.complete_checkpoints(self.output_dir)
        if not candidates:
            raise PalimpsaError(f"--resume: no complete checkpoint under {self.output_dir}/checkpoints; start the "
                                "run without --resume")
        problems = []
        for checkpoint in reversed(candidates):
            try:
                self.load_checkpoint(checkpoint)
            except Exception as error:  # a broken checkpoint fails in torch, safetensors or pickle, in many types
                problems.append(f"{checkpoint.name}: {_problem(error)}")
                if self.is_main:
                    print(f"warning: cannot resume from {checkpoint} ({_problem(error)}); trying the checkpoint "
                          "before it", file=sys.stderr)
                continue
            return
        raise PalimpsaError(f"--resume: no checkpoint under {self.output_dir}/checkpoints loads ({'; '.join(problems)})"
                            "; start a new output_dir without --resume")

    def _load_carried_state(self, checkpoint: Path) -> PalimpsaCache | None:
        path = checkpoint / f"carried_state_rank{self.accelerator.process_index}.pt"
        if not path.is_file():
            return None
        carried = torch.load(path, map_location=self.accelerator.device, weights_only=True)
        cache = PalimpsaCache(len(carried["conv"]))
        cache.conv, cache.ssm, cache.seen_tokens = carried["conv"], carried["ssm"], carried["seen_tokens"]
        return cache
