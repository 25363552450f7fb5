"""Loading: a hub id or a local directory -> a Mamba2 config and its weights, in either format found in the wild.

Formats (see docs/formats.md):

- ``mamba_ssm``: ``config.json`` with ``d_model``/``n_layer``/``ssm_cfg`` plus ``pytorch_model.bin`` or
  safetensors (state-spaces/mamba2-*).
- ``transformers``: ``config.json`` with ``model_type: mamba2`` plus safetensors, possibly sharded with an index
  (``Mamba2ForCausalLM`` checkpoints).

:func:`load_checkpoint` is the one entry point. It reads the config at once (cheap, so that a plan can be
printed) and the weights when :meth:`Checkpoint.load_state_dict` is called.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from huggingface_hub import HfApi, constants, snapshot_download
from huggingface_hub.errors import (
    GatedRepoError,
    HFValidationError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from safetensors import SafetensorError, safe_open
from tqdm.auto import tqdm

from ..errors import PalimpsaError, checked_number
from ..io.dtypes import SAFETENSORS_FLOATS, dtype_name
from ..io.manifest import check_model_directory, check_weight
from ..model.configuration import PalimpsaConfig, padded_vocab_size, padding_multiple

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
)
WEIGHT_CHOICES = (  # in order of preference: safetensors first, pickles only when nothing else is there
    "model.safetensors.index.json",
    "model.safetensors",
    "pytorch_model.bin.index.json",
    "pytorch_model.bin",
)
# mamba_ssm Mamba2 options that only matter for initialisation or speed, never for what the layer computes.
_INERT_SSM_OPTIONS = {"layer", "dt_min", "dt_max", "dt_init_floor", "A_init_range", "use_mem_eff_path",
                      "chunk_size", "sequence_parallel", "process_group", "device", "dtype"}
_SSM_OPTIONS = {"d_state", "d_conv", "expand", "headdim", "d_ssm", "ngroups", "D_has_hdim", "rmsnorm",
                "norm_before_gate", "dt_limit", "bias", "conv_bias", "activation"} | _INERT_SSM_OPTIONS


@dataclass
class Checkpoint:
    """A located Mamba2 checkpoint: its config (no layer upgraded yet) and the files that hold its weights."""

    source: str
    directory: Path
    format: str  # "mamba_ssm" or "transformers"
    config: PalimpsaConfig
    weight_files: list[Path]
    tokenizer_files: list[Path] = field(default_factory=list)
    revision: str | None = None

    @property
    def weight_bytes(self) -> int:
        return sum(path.stat().st_size for path in self.weight_files)

    def stored_dtype(self) -> torch.dtype:
        """The dtype of the stored embedding, which the toolkit keeps unless told otherwise."""
        first = self.weight_files[0]
        if first.suffix == ".safetensors":
            with _open_safetensors(first) as handle:
                name = next((n for n in handle.keys() if "embedding" in n), None) or next(iter(handle.keys()))
                code = handle.get_slice(name).get_dtype()
            if code not in SAFETENSORS_FLOATS:
                raise PalimpsaError(f"{first} stores {name} as {code}; only float32/float16/bfloat16 are supported")
            return SAFETENSORS_FLOATS[code]
        name, tensor = next(iter(_load_pickle(first).items()))
        if not tensor.is_floating_point():
            raise PalimpsaError(f"{first} stores {name} as {dtype_name(tensor.dtype)}; only "
                                "float32/float16/bfloat16 are supported")
        return tensor.dtype

    def load_state_dict(self, dtype: torch.dtype | None = None, progress: bool = True) -> dict[str, torch.Tensor]:
        """Read every tensor (cast to ``dtype`` when given) under this toolkit's (= mamba_ssm's) key names.

        Safetensors are read tensor by tensor and pickles memory-mapped, so the peak is about one copy of the
        weights; each tensor is checked as it is read (floating point, finite: :func:`check_weight`), and again
        after a cast that could overflow. A head tied to the embedding is dropped;
        :func:`~palimpsa.upgrade.model.modeling.model_from_state_dict` checks keys and shapes against the config.
        """
        state: dict[str, torch.Tensor] = {}
        bar = tqdm(total=self.weight_bytes, unit="B", unit_scale=True, desc="reading weights",
                   disable=not progress)
        for path in self.weight_files:
            if path.suffix == ".safetensors":
                with _open_safetensors(path) as handle:
                    for name in handle.keys():
                        state[name] = _checked_cast(name, _read_tensor(handle, name, path), dtype, path)
            else:
                for name, tensor in _load_pickle(path).items():
                    state[name] = _checked_cast(name, tensor, dtype, path)
            bar.update(path.stat().st_size)
        bar.close()
        return _normalise_state_dict(state, self.config)


def _checked_cast(name: str, tensor: torch.Tensor, dtype: torch.dtype | None, path: Path) -> torch.Tensor:
    check_weight(name, tensor, str(path))
    if dtype is None or dtype == tensor.dtype:
        return tensor
    cast = tensor.to(dtype)
    if not torch.isfinite(cast).all():
        raise PalimpsaError(f"{path}: weight {name} exceeds the range of {dtype_name(dtype)}; "
                            "choose --dtype bfloat16 or float32")
    return cast


def load_checkpoint(
    source: str | os.PathLike,
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    token: str | None = None,
    local_files_only: bool | None = None,
) -> Checkpoint:
    """Locate a Mamba2 checkpoint and read its config.

    Args:
        source: a local directory, or a Hugging Face hub id such as ``state-spaces/mamba2-2.7b``.
        revision: hub branch, tag or commit (hub ids only).
        cache_dir: hub cache directory (default: the huggingface_hub cache, ``HF_HUB_CACHE``).
        token: hub token (default: ``HF_TOKEN`` or the stored login).
        local_files_only: use the hub cache only (default: on when ``HF_HUB_OFFLINE=1``).

    Raises:
        PalimpsaError: the source is missing, not a Mamba2 checkpoint, or uses an option this toolkit refuses.
    """
    source = str(source)
    path = Path(source).expanduser()
    if path.is_dir():
        directory = path
    elif path.exists():
        raise PalimpsaError(f"{source} is a file; give the directory that holds config.json and the weights")
    elif _looks_like_path(source):
        raise PalimpsaError(f"{source} does not exist; give a checkpoint directory or a hub id like owner/name")
    else:
        directory = _download(source, revision, cache_dir, token, local_files_only)
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise PalimpsaError(f"{source} has no config.json; is it a model checkpoint directory?")
    try:
        raw = json.loads(config_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise PalimpsaError(f"{config_path} is not valid JSON ({error}); re-download the checkpoint") from None
    if not isinstance(raw, dict):
        raise PalimpsaError(f"{config_path} does not hold a JSON object; re-download the checkpoint")
    checkpoint_format, config = config_from_dict(raw, source)
    weight_files = _weight_files(directory, source)
    check_model_directory(directory)  # an exported checkpoint lists its files' sha256: a flipped byte stops here
    tokenizer_files = tokenizer_files_in(directory)
    for key, value in special_token_ids(tokenizer_files).items():
        setattr(config, key, value)
    if path.is_dir():  # a local base is recorded by absolute path, so that later tools find it from anywhere
        config.base_model = str(directory.resolve())
    return Checkpoint(source, directory, checkpoint_format, config, weight_files, tokenizer_files, revision)


def tokenizer_files_in(directory: Path) -> list[Path]:
    """The tokenizer files (``TOKENIZER_FILES``) that ``directory`` holds."""
    return [directory / name for name in TOKENIZER_FILES if (directory / name).is_file()]


def special_token_ids(tokenizer_files: list[Path]) -> dict[str, int]:
    """``bos_token_id``/``eos_token_id``/``pad_token_id`` named in ``tokenizer_config.json``, resolved through
    ``tokenizer.json``'s vocabulary and added tokens (no tokenizer is instantiated)."""
    by_name = {path.name: path for path in tokenizer_files}
    if "tokenizer_config.json" not in by_name or "tokenizer.json" not in by_name:
        return {}
    try:
        settings = json.loads(by_name["tokenizer_config.json"].read_text())
        tokenizer = json.loads(by_name["tokenizer.json"].read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    ids = {token["content"]: token["id"] for token in tokenizer.get("added_tokens", [])}
    vocab = tokenizer.get("model", {}).get("vocab", {})
    found = {}
    for role in ("bos", "eos", "pad"):
        token = settings.get(f"{role}_token")
        token = token.get("content") if isinstance(token, dict) else token
        token_id = ids.get(token, vocab.get(token) if isinstance(vocab, dict) else None)
        if token_id is not None:
            found[f"{role}_token_id"] = int(token_id)
    return found


def config_from_dict(raw: dict, source: str = "checkpoint") -> tuple[str, PalimpsaConfig]:
    """Map a mamba_ssm or transformers Mamba2 ``config.json`` onto a :class:`PalimpsaConfig`."""
    model_type = raw.get("model_type")
    if model_type == "palimpsa":
        raise PalimpsaError(f"{source} is already a Palimpsa model; upgrade its base Mamba2 checkpoint instead")
    if model_type == "mamba2":
        return "transformers", _config_from_transformers(raw, source)
    if "d_model" in raw and "n_layer" in raw:
        return "mamba_ssm", _config_from_mamba_ssm(raw, source)
    kind = f"model_type {model_type!r}" if model_type else "no model_type and no d_model/n_layer"
    raise PalimpsaError(f"{source} is not a Mamba2 checkpoint (its config.json has {kind}); "
                        "give a mamba_ssm Mamba2 or a transformers Mamba2ForCausalLM checkpoint")


_REQUIRED = object()


@dataclass
class _Fields:
    """Typed reads of a source ``config.json`` (or of its ``ssm_cfg``): every value is checked for presence, type,
    finiteness and range before a model is built, and an error names it as the file spells it."""

    values: dict
    source: str
    prefix: str = ""  # "ssm_cfg." for mamba_ssm's layer options

    def integer(self, key: str, default=_REQUIRED, low: int = 1) -> int | None:
        if self._absent(key, default):
            return default
        return checked_number(self.values[key], self._name(key), int, low=low)

    def positive(self, key: str, default: float) -> float:
        if self._absent(key, default):
            return default
        return checked_number(self.values[key], self._name(key), low=0, low_open=True)

    def flag(self, key: str, default: bool) -> bool:
        if self._absent(key, default):
            return default
        if not isinstance(self.values[key], bool):
            raise PalimpsaError(f"{self._name(key)} must be true or false, got {self.values[key]!r}")
        return self.values[key]

    def _absent(self, key: str, default) -> bool:
        """Whether ``key`` is absent (or null), so that its default holds; a required one is an error."""
        if self.values.get(key) is not None:
            return False
        if default is _REQUIRED:
            raise PalimpsaError(f"{self.source}: config.json has no {self.prefix}{key}, which this format needs; "
                                "the file is incomplete: re-download the checkpoint or add the field")
        return True

    def _name(self, key: str) -> str:
        return f"{self.source}: config.json's {self.prefix}{key}"


def mamba_ssm_config(config: PalimpsaConfig) -> dict:
    """``config``'s Mamba2 part as mamba_ssm's ``MambaConfig`` writes its ``config.json`` (what
    :func:`config_from_dict` reads back): the beta fields have no place in it."""
    ssm_cfg = {"layer": "Mamba2", "d_state": config.d_state, "d_conv": config.d_conv, "expand": config.expand,
               "headdim": config.headdim, "ngroups": config.ngroups, "D_has_hdim": config.D_has_hdim,
               "rmsnorm": config.rmsnorm, "norm_before_gate": config.norm_before_gate, "bias": config.bias,
               "conv_bias": config.conv_bias, "chunk_size": config.chunk_size}
    if config.d_ssm is not None:
        ssm_cfg["d_ssm"] = config.d_ssm
    if config.dt_limit is not None:
        ssm_cfg["dt_limit"] = list(config.dt_limit)
    vocab = config.base_vocab_size or config.vocab_size
    return {"d_model": config.d_model, "d_intermediate": 0, "n_layer": config.n_layer, "vocab_size": vocab,
            "ssm_cfg": ssm_cfg, "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": config.rms_norm,
            "residual_in_fp32": config.residual_in_fp32, "fused_add_norm": True,
            "pad_vocab_size_multiple": padding_multiple(config.vocab_size, vocab),
            "tie_embeddings": config.tie_word_embeddings}


def transformers_mamba2_refusal(config: PalimpsaConfig) -> str | None:
    """Why ``config``'s Mamba2 part cannot be written as transformers' ``Mamba2Config``, or None when it can.

    transformers' Mamba2 has no gated MLP beside the scan, a ``D`` per head, always the gated RMSNorm with the
    gate applied before the norm and one epsilon for it and the block norms, RMSNorm blocks only.
    """
    if config.ssm_dim != config.d_inner:
        return f"its layers have a gated MLP beside the scan (d_ssm {config.ssm_dim} < expand * d_model)"
    if config.D_has_hdim:
        return "its skip term D has one value per channel (D_has_hdim)"
    if not config.rmsnorm:
        return "its mixers have no gated RMSNorm (rmsnorm false)"
    if config.norm_before_gate:
        return "its gated norm normalises before the gate (norm_before_gate)"
    if not config.rms_norm:
        return "its blocks use LayerNorm"
    if config.gated_norm_epsilon != config.norm_epsilon:
        return (f"its gated norm's epsilon ({config.gated_norm_epsilon:g}) differs from its block norms' "
                f"({config.norm_epsilon:g})")
    return None


def transformers_mamba2_config(config: PalimpsaConfig):
    """``config``'s Mamba2 part as transformers' ``Mamba2Config`` (what :func:`config_from_dict` reads back): the
    beta fields have no place in it. Check :func:`transformers_mamba2_refusal` first."""
    from transformers import Mamba2Config

    limit = tuple(config.dt_limit) if config.dt_limit is not None else (0.0, math.inf)
    return Mamba2Config(
        hidden_size=config.d_model, num_hidden_layers=config.n_layer, vocab_size=config.vocab_size,
        num_heads=config.nheads, head_dim=config.headdim, state_size=config.d_state, n_groups=config.ngroups,
        expand=config.expand, conv_kernel=config.d_conv, use_bias=config.bias, use_conv_bias=config.conv_bias,
        time_step_limit=limit, time_step_min=config.dt_min, time_step_max=config.dt_max,
        layer_norm_epsilon=config.norm_epsilon, residual_in_fp32=config.residual_in_fp32,
        tie_word_embeddings=config.tie_word_embeddings, chunk_size=config.chunk_size, hidden_act="silu",
        bos_token_id=config.bos_token_id, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id,
        architectures=["Mamba2ForCausalLM"])


def _config_from_mamba_ssm(raw: dict, source: str) -> PalimpsaConfig:
    if not isinstance(raw.get("ssm_cfg") or {}, dict):
        raise PalimpsaError(f"{source}: config.json's ssm_cfg must be an object of layer options")
    ssm = dict(raw.get("ssm_cfg") or {})
    layer = ssm.get("layer", "Mamba1")
    if layer != "Mamba2":
        raise PalimpsaError(f"{source} is a {layer} checkpoint (ssm_cfg.layer); only Mamba2 layers can be upgraded")
    if raw.get("attn_layer_idx"):
        raise PalimpsaError(f"{source} is a hybrid with attention layers {raw['attn_layer_idx']}; "
                            "hybrid checkpoints are not supported")
    top, layer_options = _Fields(raw, source), _Fields(ssm, source, "ssm_cfg.")
    if top.integer("d_intermediate", 0, low=0):
        raise PalimpsaError(f"{source} has MLP blocks (d_intermediate={raw['d_intermediate']}); "
                            "only pure Mamba2 stacks (d_intermediate=0) are supported")
    unknown = sorted(set(ssm) - _SSM_OPTIONS)
    if unknown:
        raise PalimpsaError(f"{source} sets ssm_cfg options this toolkit does not know: {unknown}; "
                            "they may change what the layer computes, so it refuses to convert")
    if ssm.get("activation", "silu") not in ("silu", "swish"):
        raise PalimpsaError(f"{source} uses activation {ssm['activation']!r}; only silu is supported")
    vocab = top.integer("vocab_size")
    multiple = top.integer("pad_vocab_size_multiple", 1)
    return _build_config(
        source,
        d_model=top.integer("d_model"), n_layer=top.integer("n_layer"),
        vocab_size=padded_vocab_size(vocab, multiple), base_vocab_size=vocab,
        d_state=layer_options.integer("d_state", 128), d_conv=layer_options.integer("d_conv", 4),
        expand=layer_options.integer("expand", 2), headdim=layer_options.integer("headdim", 64),
        d_ssm=layer_options.integer("d_ssm", None), ngroups=layer_options.integer("ngroups", 1),
        dt_limit=_limit(ssm.get("dt_limit"), source),
        bias=layer_options.flag("bias", False), conv_bias=layer_options.flag("conv_bias", True),
        D_has_hdim=layer_options.flag("D_has_hdim", False), rmsnorm=layer_options.flag("rmsnorm", True),
        norm_before_gate=layer_options.flag("norm_before_gate", False), rms_norm=top.flag("rms_norm", True),
        norm_epsilon=top.positive("norm_epsilon", 1e-5), residual_in_fp32=top.flag("residual_in_fp32", True),
        tie_word_embeddings=top.flag("tie_embeddings", True), chunk_size=layer_options.integer("chunk_size", 256),
    )


def _config_from_transformers(raw: dict, source: str) -> PalimpsaConfig:
    if raw.get("hidden_act", "silu") not in ("silu", "swish"):
        raise PalimpsaError(f"{source} uses hidden_act {raw['hidden_act']!r}; only silu is supported")
    fields = _Fields(raw, source)
    d_model, expand = fields.integer("hidden_size"), fields.integer("expand", 2)
    heads, head_dim = fields.integer("num_heads"), fields.integer("head_dim", 64)
    if heads * head_dim != expand * d_model:
        raise PalimpsaError(f"{source}: num_heads * head_dim ({heads * head_dim}) must equal expand * hidden_size "
                            f"({expand * d_model}); the config.json is inconsistent")
    eps = fields.positive("layer_norm_epsilon", 1e-5)
    vocab = fields.integer("vocab_size")
    return _build_config(
        source,
        d_model=d_model, n_layer=fields.integer("num_hidden_layers"), vocab_size=vocab, base_vocab_size=vocab,
        d_state=fields.integer("state_size", 128), d_conv=fields.integer("conv_kernel", 4), expand=expand,
        headdim=head_dim, ngroups=fields.integer("n_groups", 1), dt_limit=_limit(raw.get("time_step_limit"), source),
        bias=fields.flag("use_bias", False), conv_bias=fields.flag("use_conv_bias", True),
        norm_epsilon=eps, gated_norm_epsilon=eps, residual_in_fp32=fields.flag("residual_in_fp32", True),
        tie_word_embeddings=fields.flag("tie_word_embeddings", False), chunk_size=fields.integer("chunk_size", 256),
    )


def _limit(value, source: str) -> list[float] | None:
    """A step-size clamp ``[min, max]`` with ``0 <= min < max`` (max may be infinite); None when it is the
    default no-op ``(0, inf)``.

    Configs spell infinity as JSON ``Infinity``, the string ``"inf"``, or (transformers 5)
    ``{"__float__": "Infinity"}``.
    """
    if value is None:
        return None
    try:
        low, high = (float(v["__float__"] if isinstance(v, dict) else v) for v in value)
    except (TypeError, ValueError, KeyError):
        raise PalimpsaError(f"{source}: cannot read the step-size limit {value!r} in config.json") from None
    if not (math.isfinite(low) and 0 <= low < high):  # false for NaN too
        raise PalimpsaError(f"{source}: the step-size limit {value!r} in config.json must be [min, max] with "
                            "0 <= min < max")
    return None if (low, high) == (0.0, math.inf) else [low, high]


def _build_config(source: str, **fields) -> PalimpsaConfig:
    try:
        return PalimpsaConfig(base_model=source, **fields)
    except (ValueError, TypeError, PalimpsaError) as error:
        raise PalimpsaError(f"{source}: config.json is inconsistent: {error}") from None


def _looks_like_path(source: str) -> bool:
    return (source.startswith((".", "/", "~")) or source.count("/") > 1 or os.sep in source.replace("/", "")
            or source.endswith("/"))


def _download(repo_id: str, revision, cache_dir, token, local_files_only) -> Path:
    """Fetch only what an upgrade needs (config, one weight format, tokenizer, the card for its license) through
    huggingface_hub.

    Offline (``local_files_only`` or ``HF_HUB_OFFLINE=1``), or when the hub cannot be reached, the cached
    snapshot is used.
    """
    offline = constants.HF_HUB_OFFLINE if local_files_only is None else local_files_only
    cached_patterns = ["config.json", "README.md", *TOKENIZER_FILES, "*.safetensors", "*.safetensors.index.json",
                       "pytorch_model*.bin", "pytorch_model.bin.index.json"]
    try:
        if not offline:
            try:
                files = set(HfApi().list_repo_files(repo_id, revision=revision, token=token))
            except (HFValidationError, RepositoryNotFoundError, GatedRepoError, RevisionNotFoundError):
                raise
            except Exception:  # unreachable hub (connection errors come from the HTTP client): use the cache
                offline = True
            else:
                wanted = ["config.json", "README.md", *TOKENIZER_FILES, *_weight_patterns(files)]
                return Path(snapshot_download(repo_id, revision=revision, cache_dir=cache_dir, token=token,
                                              allow_patterns=wanted))
        return Path(snapshot_download(repo_id, revision=revision, cache_dir=cache_dir, token=token,
                                      local_files_only=True, allow_patterns=cached_patterns))
    except HFValidationError:
        raise PalimpsaError(f"{repo_id} is neither a local directory nor a valid hub id (owner/name)") from None
    except (RepositoryNotFoundError, GatedRepoError):
        raise PalimpsaError(f"hub repository {repo_id} was not found or needs access; check the name and "
                            "set HF_TOKEN if it is private or gated") from None
    except RevisionNotFoundError:
        raise PalimpsaError(f"hub repository {repo_id} has no revision {revision!r}") from None
    except LocalEntryNotFoundError:
        where = "the hub cache" + (f" at {cache_dir}" if cache_dir else "")
        raise PalimpsaError(f"{repo_id} is not a local directory, the hub cannot be reached (or offline mode is "
                            f"on) and it is not in {where}; download it first or pass a directory") from None


def _weight_patterns(files: set[str]) -> list[str]:
    for choice in WEIGHT_CHOICES:
        if choice in files:
            if choice.endswith(".index.json"):
                stem = choice.removesuffix(".index.json")
                prefix, suffix = stem.rsplit(".", 1)
                return [choice, f"{prefix}-*.{suffix}"]
            return [choice]
    return ["*.safetensors"]


def _weight_files(directory: Path, source: str) -> list[Path]:
    for choice in WEIGHT_CHOICES:
        path = directory / choice
        if not path.is_file():
            continue
        if not choice.endswith(".index.json"):
            return [path]
        try:
            weight_map = json.loads(path.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise PalimpsaError(f"{path} is not a valid shard index (no weight_map); re-download it") from None
        shards = [directory / name for name in dict.fromkeys(weight_map.values())]
        missing = [p.name for p in shards if not p.is_file()]
        if missing:
            raise PalimpsaError(f"{source} is missing weight shards {missing} listed in {choice}; "
                                "re-download the checkpoint")
        return shards
    raise PalimpsaError(f"{source} has no weights (expected one of {', '.join(WEIGHT_CHOICES)})")


def _open_safetensors(path: Path):
    try:
        return safe_open(str(path), framework="pt")
    except (SafetensorError, OSError, ValueError) as error:
        raise PalimpsaError(f"cannot read {path}: it is not a valid safetensors file ({error}); "
                            "re-download it") from None


def _read_tensor(handle, name: str, path: Path) -> torch.Tensor:
    try:
        return handle.get_tensor(name)
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise PalimpsaError(f"cannot read tensor {name} from {path} ({error}); re-download it") from None


def _load_pickle(path: Path) -> dict[str, torch.Tensor]:
    """Pickled weights, loaded with ``weights_only=True`` (no code runs) and memory-mapped when possible."""
    try:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as error:
            if "mmap" not in str(error):  # legacy (non-zip) pickles cannot be memory-mapped
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many types for a corrupt or unsafe pickle
        first_line = str(error).partition("\n")[0][:200] or "empty or truncated file"
        raise PalimpsaError(f"cannot read {path} ({type(error).__name__}: {first_line}); "
                            "the file is corrupt or holds more than tensors") from None
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise PalimpsaError(f"{path} does not hold a state dict of tensors")
    return state


def _normalise_state_dict(state: dict[str, torch.Tensor], config: PalimpsaConfig) -> dict[str, torch.Tensor]:
    """Rename transformers keys to mamba_ssm's and drop a head that is tied to the embedding."""
    if "backbone.embeddings.weight" in state:
        state["backbone.embedding.weight"] = state.pop("backbone.embeddings.weight")
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return state
