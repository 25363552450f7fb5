"""Fine-tuning recipes: a YAML file checked against a typed schema before any work starts.

Unknown keys are errors that name the nearest valid key; values are range-checked; ``key=value`` overrides
(dotted paths, YAML-typed values) apply on top of the file. See docs/recipes.md for every field.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from ..errors import MAX_SEED, PalimpsaError


class Section(BaseModel):
    # allow_inf_nan=False: NaN passes every range check (each comparison with it is false), and no field means inf
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


Seed = Field(0, ge=0, le=MAX_SEED)


class ScratchSection(Section):
    """Dimensions of a Mamba2 trained from scratch (mamba_ssm's names); the vocabulary comes from the tokenizer."""

    d_model: int = Field(ge=8)
    n_layer: int = Field(ge=1)
    d_state: int = Field(64, ge=1)
    headdim: int = Field(32, ge=1)
    expand: int = Field(2, ge=1)
    ngroups: int = Field(1, ge=1)
    d_conv: int = Field(4, ge=2)
    chunk_size: int = Field(64, ge=1)
    pad_vocab_size_multiple: int = Field(16, ge=1)
    tie_word_embeddings: bool = True


class ModelSection(Section):
    path: str | None = Field(None, description="Palimpsa model directory, or a Mamba2 checkpoint to upgrade first")
    scratch: ScratchSection | None = Field(None, description="train a new Mamba2 of these dimensions instead")
    upgrade_layers: str | None = Field(None, description="when path is a plain Mamba2: layers to upgrade (8, 3-5), "
                                       "or none to fine-tune it as a plain Mamba2")
    beta_init: float = Field(1e-3, gt=0, description="initial per-head gain of the upgrade (importance per unit of "
                             "forgetting)")
    beta_rank: int = Field(16, ge=1)
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    gradient_checkpointing: bool = False
    keep_scan_outputs: bool = Field(True, description="with gradient_checkpointing: keep the Palimpsa scan's "
                                    "output and checkpoints from the forward instead of running the scan again in "
                                    "the backward (faster; costs memory per upgraded layer)")

    @field_validator("upgrade_layers", mode="before")
    @classmethod
    def _layers_as_text(cls, value):
        # `model.upgrade_layers=8` on the command line (or unquoted in YAML) reads as a number
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _one_source(self):
        if (self.path is None) == (self.scratch is None):
            raise ValueError("give model.path (a checkpoint) or model.scratch (dimensions of a new model), one of them")
        if self.scratch is not None and self.upgrade_layers:
            raise ValueError("model.upgrade_layers applies to a checkpoint, not to model.scratch")
        return self


class SourceSection(Section):
    """One data source. ``pydoc`` is Python's own documentation text (``pydoc_data.topics``, one document per
    topic) and ``stdlib`` the standard library's source files: always installed, so recipes and tests run
    offline."""

    type: Literal["text", "jsonl", "parquet", "hf", "synthetic", "pydoc", "stdlib"] = "text"
    path: str | None = Field(None, description="file or directory (text/jsonl/parquet)")
    name: str | None = Field(None, description="Hugging Face dataset name (type hf), streamed")
    config: str | None = None
    split: str = "train"
    text_field: str = "text"
    task: Literal["passkey", "niah", "niah-fwpkm", "repeat", "mqar", "mqar-gap"] | None = Field(
        None, description="synthetic task")
    pairs: tuple[int, int] | None = Field(None, description="mqar and mqar-gap: the range of key-value pairs per "
                                          "document, drawn log-uniformly (default: a quarter of the most that fit, "
                                          "up to that most)")
    needles: tuple[int, int] | None = Field(None, description="niah-fwpkm: the range of needles per document, "
                                            "drawn uniformly (default: 5, the evaluation's form)")
    queries: tuple[int, int] | None = Field(None, description="niah-fwpkm: the range of needles asked in turn at "
                                            "the end of a document, each question followed by its answer, drawn "
                                            "uniformly and capped by the document's needles (default: 1, the "
                                            "evaluation's form)")
    documents: int = Field(256, ge=1, description="synthetic documents per epoch (new ones every epoch)")
    weight: float = Field(1.0, gt=0, description="share of this source in the mixture")
    loss: Literal["all", "answer"] = Field("all", description="synthetic documents: loss on every token, or on the "
                                           "answers only (passkey and niah digits, mqar values)")
    loss_weight: float = Field(1.0, gt=0, description="weight of this source's targets in the loss, against 1 for "
                               "the others (e.g. to give the few answers of answer-only documents their share)")
    answer_weight: float = Field(1.0, gt=0, description="synthetic documents: the weight of their answer tokens "
                                 "against their other tokens (with loss: all)")

    @model_validator(mode="after")
    def _needs_location(self):
        if self.type in ("text", "jsonl", "parquet") and not self.path:
            raise ValueError(f"a {self.type} source needs a path")
        if self.type == "hf" and not self.name:
            raise ValueError("an hf source needs a dataset name")
        if self.type == "synthetic" and not self.task:
            raise ValueError("a synthetic source needs a task (passkey, niah, niah-fwpkm, repeat, mqar or mqar-gap)")
        if self.pairs is not None and (self.task not in ("mqar", "mqar-gap") or not 1 <= self.pairs[0]
                                       <= self.pairs[1]):
            raise ValueError("pairs [low, high] (1 <= low <= high) applies to the mqar and mqar-gap tasks")
        if self.needles is not None and (self.task != "niah-fwpkm" or not 1 <= self.needles[0] <= self.needles[1]
                                         <= 24):
            raise ValueError("needles [low, high] (1 <= low <= high <= 24) applies to the niah-fwpkm task")
        if self.queries is not None and (self.task != "niah-fwpkm" or not 1 <= self.queries[0] <= self.queries[1]
                                         <= 24):
            raise ValueError("queries [low, high] (1 <= low <= high <= 24) applies to the niah-fwpkm task")
        if self.loss == "answer" and self.type != "synthetic":
            raise ValueError(f"loss: answer needs a synthetic source (a {self.type} source has no answers)")
        return self


class DataSection(Section):
    path: str | None = Field(None, description="shorthand for one local source (file or directory)")
    sources: list[SourceSection] = Field(default_factory=list)
    seq_len: int = Field(512, ge=8, le=1 << 20)
    batch_size: int = Field(1, ge=1, description="packed rows per micro-batch")
    state_passing: bool = Field(False, description="carry the state across consecutive segments (TBPTT)")
    eval_documents: int = Field(8, ge=0, description="documents held out for evaluation")
    tokenizer: str | None = Field(None, description="tokenizer directory (default: the model's)")
    workers: int = Field(0, ge=0, le=64, description="processes that make the documents (0: one background "
                         "thread); the batches are the same for any number")
    seed: int = Seed

    @model_validator(mode="after")
    def _one_way(self):
        if self.path and self.sources:
            raise ValueError("give data.path (one local source) or data.sources, not both")
        if not self.path and not self.sources:
            raise ValueError("no data: set data.path or data.sources")
        return self

    def resolved_sources(self) -> list[SourceSection]:
        if self.sources:
            return self.sources
        suffix = Path(self.path).suffix.lower()
        kind = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}.get(suffix, "text")
        if Path(self.path).is_dir():
            files = {p.suffix.lower() for p in Path(self.path).rglob("*") if p.is_file()}
            kind = "jsonl" if ".jsonl" in files else "parquet" if ".parquet" in files else "text"
        return [SourceSection(type=kind, path=self.path)]


class TrainableSection(Section):
    mode: Literal["beta", "beta+lora", "lora", "upgraded", "all", "patterns"] = "beta"
    patterns: list[str] = Field(default_factory=list, description="glob patterns on parameter names (mode patterns)")


class LoraSection(Section):
    r: int = Field(8, ge=1)
    alpha: float = Field(16.0, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] = Field(default_factory=lambda: ["in_proj", "out_proj"])
    layers: str | None = Field(None, description="layers that get adapters: all, a count or indices and ranges "
                               "(8, 3,11, 0-4); default: the upgraded layers, or every layer of a plain Mamba2")
    start_step: int = Field(0, ge=0, description="the adapters' learning rate is 0 before this step, so that beta "
                            "trains alone first; from it on they follow a schedule of their own (warmup_steps, "
                            "then the run's decay over the steps left)")
    warmup_steps: int | None = Field(None, ge=0, description="the adapters' warmup from start_step (default: "
                                     "schedule.warmup_steps)")

    @field_validator("layers", mode="before")
    @classmethod
    def _layers_as_text(cls, value):
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class OptimSection(Section):
    lr: float = Field(1e-4, gt=0, le=1)
    beta_lr: float | None = Field(None, gt=0, le=1, description="learning rate of the beta gate (beta_up, "
                                  "beta_down)")
    gain_lr: float = Field(0.1, gt=0, le=1, description="learning rate of the per-head log gains (beta_log_gain): "
                           "Adam moves a log by about this much per step, so the gain by about this fraction")
    beta_eps: float = Field(1e-12, gt=0, description="Adam epsilon of the beta parameters, whose gradients are "
                            "proportional to the small initial gain")
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (0.9, 0.95)
    eps: float = Field(1e-8, gt=0)
    grad_clip: float | None = Field(1.0, gt=0)


class ScheduleSection(Section):
    type: Literal["cosine", "linear", "constant"] = "cosine"
    warmup_steps: int = Field(0, ge=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    total_steps: int | None = Field(None, ge=1, description="the steps the decay spans (default: train.max_steps); "
                                    "longer than max_steps, the run stops part way along it")


class TrainSection(Section):
    max_steps: int = Field(ge=1)
    grad_accum: int = Field(1, ge=1)
    mixed_precision: Literal["no", "bf16", "fp16"] = "no"
    tf32: bool = Field(False, description="TF32 for float32 matrix products (torch.set_float32_matmul_precision "
                                          "'high'); on a GPU it also lets the Palimpsa scan's backward split the "
                                          "sequences into chunks, which the layers' float32 scan inputs otherwise "
                                          "walk whole, and its chunk-parallel forward use TF32 instead of tf32x3 "
                                          "products (docs/kernels.md)")
    seed: int = Seed
    log_every: int = Field(1, ge=1)

    @field_validator("mixed_precision", mode="before")
    @classmethod
    def _yaml_no(cls, value):
        """YAML reads a bare ``no`` as false: take it as the ``no`` the user wrote."""
        return "no" if value is False else value


class EvalSection(Section):
    every: int = Field(0, ge=0, description="steps between evaluations (0: only at the end)")
    batches: int = Field(4, ge=1)
    passkey_samples: int = Field(4, ge=0)
    passkey_length: int | None = Field(None, ge=16, description="default: data.seq_len")
    importance: bool = Field(True, description="log per-layer importance statistics on a passkey probe of "
                             "passkey_length tokens at each evaluation (models with Palimpsa layers)")


class CheckpointSection(Section):
    every: int = Field(0, ge=0, description="steps between checkpoints (0: only at the end)")
    keep: int = Field(2, ge=1)


class LoggingSection(Section):
    tensorboard: bool = True
    wandb: bool = False
    wandb_project: str = "palimpsa"


class Recipe(Section):
    """A validated recipe. ``notes``: what :func:`load_recipe` adjusted to make it run, one line each (the plan and
    ``--check`` print them)."""

    output_dir: str
    model: ModelSection
    data: DataSection
    train: TrainSection
    trainable: TrainableSection = Field(default_factory=TrainableSection)
    lora: LoraSection = Field(default_factory=LoraSection)
    optim: OptimSection = Field(default_factory=OptimSection)
    schedule: ScheduleSection = Field(default_factory=ScheduleSection)
    eval: EvalSection = Field(default_factory=EvalSection)
    checkpoint: CheckpointSection = Field(default_factory=CheckpointSection)
    logging: LoggingSection = Field(default_factory=LoggingSection)

    @model_validator(mode="after")
    def _consistent(self):
        if self.model.scratch is not None and not self.data.tokenizer:
            raise ValueError("model.scratch needs data.tokenizer (a new model has no tokenizer of its own)")
        if self.model.gradient_checkpointing and self.data.state_passing:
            raise ValueError("model.gradient_checkpointing cannot be combined with data.state_passing (the "
                             "recomputed forward would read the carried state after it was updated)")
        if self.lora.start_step and self.trainable.mode not in ("beta+lora", "lora"):
            raise ValueError(f"lora.start_step applies to LoRA adapters; trainable.mode {self.trainable.mode} has none")
        warmup = self.schedule.warmup_steps if self.lora.warmup_steps is None else self.lora.warmup_steps
        late = self.lora.start_step + warmup
        if self.lora.start_step and late >= self.train.max_steps:
            raise ValueError(f"lora.start_step + lora.warmup_steps ({late}) must be below train.max_steps "
                             f"({self.train.max_steps})")
        if self.trainable.mode == "patterns" and not self.trainable.patterns:
            raise ValueError("trainable.mode patterns needs trainable.patterns")
        if self.schedule.warmup_steps >= self.train.max_steps and self.schedule.type != "constant":
            raise ValueError(f"schedule.warmup_steps ({self.schedule.warmup_steps}) must be below "
                             f"train.max_steps ({self.train.max_steps})")
        return self

    _notes: list[str] = PrivateAttr(default_factory=list)

    @property
    def notes(self) -> list[str]:
        return self._notes

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def _section_fields(path: tuple) -> list[str]:
    """Valid keys at the level of the schema that ``path`` points into."""
    model: Any = Recipe
    for part in path:
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        annotation = field.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if model is None:
            return []
    return list(getattr(model, "model_fields", {}))


def _dotted_keys(model: type[BaseModel] = None, prefix: str = "") -> list[str]:
    """Every key of the schema as a dotted path (``train.max_steps``), sections and fields alike."""
    keys = []
    for name, field in (model or Recipe).model_fields.items():
        keys.append(prefix + name)
        candidates = [field.annotation, *getattr(field.annotation, "__args__", ())]
        section = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if section is not None:
            keys += _dotted_keys(section, f"{prefix}{name}.")
    return keys


def _describe(error: dict) -> str:
    location = ".".join(str(p) for p in error["loc"])
    if error["type"] == "extra_forbidden":
        key = str(error["loc"][-1])
        valid = _section_fields(error["loc"][:-1])
        # a key of another section first (max_steps at the top is train.max_steps), then a misspelling here
        elsewhere = {path.rsplit(".", 1)[-1]: path for path in reversed(_dotted_keys())}
        parent = ".".join(str(p) for p in error["loc"][:-1])
        nearest = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
        if key in elsewhere:
            return f"unknown key {location}; did you mean {elsewhere[key]}?"
        if nearest:
            return f"unknown key {location}; did you mean {parent + '.' if parent else ''}{nearest[0]}?"
        return f"unknown key {location}; valid keys here: {', '.join(valid)}"
    if error["type"] == "missing":
        return f"missing required key {location}"
    message = error["msg"].removeprefix("Value error, ")
    return f"{location}: {message}" if location else message


def _apply_override(data: dict, assignment: str) -> None:
    if "=" not in assignment:
        raise PalimpsaError(f"cannot read override {assignment!r}; write key=value, e.g. train.max_steps=100")
    key, raw = assignment.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise PalimpsaError(f"override {assignment!r} has an empty key part")
    target = data
    for part in parts[:-1]:
        node = target.get(part)
        if node is None:
            node = target[part] = {}
        if not isinstance(node, dict):
            raise PalimpsaError(f"override {assignment!r}: {part} is not a section")
        target = node
    try:
        target[parts[-1]] = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        target[parts[-1]] = raw


# the recipe's paths to things it reads; those that may also name a Hugging Face repository: hub=True
_INPUT_PATHS = (("model", "path", True), ("data", "path", False), ("data", "tokenizer", True))
_HUB_ID = re.compile(r"[\w][\w.-]*/[\w.-]+")


def _input_paths(data: dict) -> list[tuple[dict, str, str, bool]]:
    """(the mapping holding it, its key, its dotted name, may be a hub id) for every input path set in ``data``."""
    found = []
    for section, key, hub in _INPUT_PATHS:
        node = data.get(section)
        if isinstance(node, dict) and isinstance(node.get(key), str):
            found.append((node, key, f"{section}.{key}", hub))
    sources = data.get("data", {}).get("sources") if isinstance(data.get("data"), dict) else None
    for index, source in enumerate(sources if isinstance(sources, list) else []):
        if isinstance(source, dict) and isinstance(source.get("path"), str):
            found.append((source, "path", f"data.sources.{index}.path", False))
    return found


def _resolve_paths(data: dict, base: Path, only: set[str] | None = None) -> None:
    """Make the relative input paths in ``data`` absolute from ``base`` (those named in ``only``, when given). A path
    that may name a hub repository and looks like one (``owner/name``) stays as it is unless it exists under base."""
    for node, key, name, hub in _input_paths(data):
        text = node[key]
        if (only is not None and name not in only) or not text or Path(text).expanduser().is_absolute():
            node[key] = str(Path(text).expanduser()) if text.startswith("~") else text
            continue
        local = (base / text).resolve()
        if hub and _HUB_ID.fullmatch(text) and not local.exists():
            continue
        node[key] = str(local)


def check_paths(recipe: Recipe) -> None:
    """Refuse, before any work, a recipe whose local input paths do not exist (``finetune-model`` and its
    ``--check`` run this). A path that may be a hub id and looks like one is left to the loader."""
    missing = []
    for _, _, name, hub in _input_paths(recipe.model_dump()):
        text = _dotted_value(recipe, name)
        if not Path(text).exists() and not (hub and _HUB_ID.fullmatch(text)):
            missing.append(f"{name} {text}")
    if missing:
        raise PalimpsaError(f"recipe paths not found: {'; '.join(missing)} (a relative path in a recipe file is read "
                            "from the recipe's folder, one given on the command line from the working directory)")


def _dotted_value(recipe: Recipe, name: str):
    value = recipe
    for part in name.split("."):
        value = value[int(part)] if part.isdigit() else getattr(value, part)
    return value


def _fit_warmup(data: dict) -> str | None:
    """A warmup as long as the run (a recipe's warmup with a short ``train.max_steps=5`` override) becomes a tenth of
    the run; returns the note saying so, or None when it fits."""
    schedule, train = data.get("schedule"), data.get("train")
    if not (isinstance(schedule, dict) and isinstance(train, dict)) or schedule.get("type") == "constant":
        return None
    warmup, steps = schedule.get("warmup_steps"), train.get("max_steps")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (warmup, steps)) or not 0 < steps <= warmup:
        return None
    schedule["warmup_steps"] = steps // 10
    return (f"schedule.warmup_steps {warmup} does not fit in train.max_steps {steps}: warming up over "
            f"{steps // 10} step(s), a tenth of the run")


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Read, override and validate a recipe; PalimpsaError lists every problem found.

    Relative input paths (``model.path``, ``data.path``, ``data.sources[].path``, ``data.tokenizer``) are read
    from the recipe file's folder, those in ``overrides`` from the working directory; both become absolute. A
    recipe's warmup that does not fit in the run (``train.max_steps=5``) is shortened to a tenth of it, with a note
    (``Recipe.notes``); one given in ``overrides`` is kept, and refused when it does not fit."""
    path = Path(path)
    if not path.is_file():
        raise PalimpsaError(f"recipe {path} does not exist; see recipes/ for examples")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise PalimpsaError(f"recipe {path} is not valid YAML: {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise PalimpsaError(f"recipe {path} must be a mapping of sections (model, data, train, ...)")
    _resolve_paths(data, path.resolve().parent)
    for assignment in overrides or []:
        _apply_override(data, assignment)
    overridden = {item.split("=", 1)[0].strip() for item in overrides or []}
    _resolve_paths(data, Path.cwd(), only=overridden)
    note = None if "schedule.warmup_steps" in overridden else _fit_warmup(data)  # one asked for stays
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(_describe(e) for e in error.errors())
        raise PalimpsaError(f"recipe {path}: {problems}") from None
    if note:
        recipe.notes.append(note)
    return recipe
