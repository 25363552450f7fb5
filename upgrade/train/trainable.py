"""What a fine-tuning run trains and how fast: the trainable selection (``trainable.mode``), LoRA adapters on chosen
layers, the optimizer's parameter groups (the log gains at their own rate) and the learning-rate schedule."""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass

import torch

from ..convert.surgery import parse_layer_spec
from ..errors import PalimpsaError
from .recipe import Recipe


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


def merged_state_dict(model: torch.nn.Module, keep: bool = True) -> dict[str, torch.Tensor]:
    """The model's weights with LoRA deltas folded in, under the plain model's names (the model is unchanged).

    Under FSDP2 every rank must call it (it gathers the shards, into CPU memory) and ``keep=False`` lets a rank
    that will not write the weights drop them as they come; the deltas are built from the gathered float32 shards,
    not from what FSDP gathers for a forward (bf16 under mixed precision). Without sharding ``keep=False`` returns
    ``{}`` at once."""
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.lora import LoraLayer
    from peft.utils.other import transpose

    from ..model.sharding import fsdp_units, gathered, whole

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    sharded = bool(fsdp_units(base))
    if not keep and not sharded:
        return {}
    lora_layers = {name: module for name, module in base.named_modules() if isinstance(module, LoraLayer)}
    full = {name: whole(tensor).detach() for name, tensor in base.state_dict().items()}

    def delta(owner: str, layer) -> torch.Tensor:
        total = 0
        for adapter in layer.active_adapters:
            if isinstance(layer, LoraLinear) and not layer.use_dora.get(adapter, False):
                a = full[f"{owner}.lora_A.{adapter}.weight"].float()
                b = full[f"{owner}.lora_B.{adapter}.weight"].float()
                total = total + transpose(b @ a, layer.fan_in_fan_out) * layer.scaling[adapter]
            else:  # another kind of adapter: peft's own delta, from what FSDP gathers for a forward
                with gathered(base, holding=layer):
                    total = total + layer.get_delta_weight(adapter).detach().float()
        return total

    state = {}
    for name, tensor in full.items():
        if "lora_" in name:
            continue
        owner = name.rsplit(".", 2)[0] if ".base_layer." in name else None
        if owner in lora_layers and name.endswith("base_layer.weight"):
            tensor = (tensor.float() + delta(owner, lora_layers[owner]).to(tensor.device)).to(tensor.dtype)
        if keep:
            state[name.replace(".base_layer", "")] = tensor
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


def lr_factor(step: int, recipe: Recipe, start: int = 0, warmup: int | None = None) -> float:
    """Warmup (linear from 0) then cosine or linear decay to ``min_lr_ratio``, or constant; a schedule that begins
    at step ``start`` (0 before it) with its own ``warmup`` (default: the recipe's) and decays over the steps left."""
    schedule = recipe.schedule
    total = schedule.total_steps or recipe.train.max_steps
    warmup = schedule.warmup_steps if warmup is None else warmup
    if step < start:
        return 0.0
    step -= start
    if step < warmup:
        return (step + 1) / warmup
    if schedule.type == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - start - warmup))
    shape = 0.5 * (1 + math.cos(math.pi * progress)) if schedule.type == "cosine" else 1 - progress
    return schedule.min_lr_ratio + (1 - schedule.min_lr_ratio) * shape


def group_lr_factors(groups: list[dict], recipe: Recipe) -> list:
    """One schedule per optimizer group (``LambdaLR``'s list form): the run's, and for LoRA's groups the one that
    begins at ``lora.start_step``."""
    lora = recipe.lora

    def factor(group: dict):
        if group.get("name", "").startswith("lora") and (lora.start_step or lora.warmup_steps is not None):
            return lambda step: lr_factor(step, recipe, lora.start_step, lora.warmup_steps)
        return lambda step: lr_factor(step, recipe)

    return [factor(group) for group in groups]
