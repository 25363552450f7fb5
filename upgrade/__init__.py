"""palimpsa.upgrade: upgrade pretrained Mamba2 models into Palimpsa models, fine-tune, evaluate and export them.

The package is cut by stage, in the order the data flows:

- ``io``: files, knowing nothing of the model: safetensors shards, sha256 manifests, atomic outputs, dtype names,
  the one model-directory writer;
- ``model``: ``PalimpsaConfig``, the model (Mamba2 and Palimpsa mixers) and its recurrent cache;
- ``convert``: Mamba2 checkpoints in the wild -> the model (the one loader), layer surgery, logit comparison, and
  the upgrade job;
- ``evaluate``: seeded long-context tasks, ``eval-model``, the beta -> 0 sweep, importance inspection,
  generation, the lm-evaluation-harness model;
- ``train``: recipes, data, the trainer, the training-run layout;
- ``export``: release directories, plain Mamba2 checkpoints (the modeling code that every model directory
  carries is ``io.remote_code``);
- ``cli``: the console scripts, one module each.

A module imports only from stages before its own (and from ``errors``, ``io`` and ``palimpsa.kernels``).
``__all__`` is the short API a user needs; ``PalimpsaMixer`` and ``UpgradeResult`` are importable from here too.

Importing this package is cheap: each public name is imported from its module on first use, so that a command line
answers ``--help`` or a wrong argument without loading torch and transformers. ``PalimpsaConfig`` and
``PalimpsaForCausalLM`` are registered with transformers' ``AutoConfig`` and ``AutoModelForCausalLM`` (model type
``"palimpsa"``) as soon as both this package and transformers are imported, in either order.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

# public name -> the module that defines it, imported on first use
_SOURCES = {
    "PalimpsaCache": ".model.cache",
    "PalimpsaConfig": ".model.configuration",
    "PalimpsaError": ".errors",
    "PalimpsaForCausalLM": ".model.modeling",
    "PalimpsaMixer": ".model.modeling",  # the upgraded layer's mixer
    "Recipe": ".train.recipe",  # what load_recipe returns
    "Trainer": ".train.trainer",
    "UpgradeResult": ".convert.upgrade",  # what upgrade_model returns
    "evaluate_model": ".evaluate.evaluation",
    "export_model": ".export.export",
    "generate_text": ".evaluate.generation",
    "inspect_importance": ".evaluate.importance",
    "load_model_and_tokenizer": ".convert.loading",
    "load_recipe": ".train.recipe",
    "upgrade_model": ".convert.upgrade",
}

__all__ = [
    "PalimpsaCache",
    "PalimpsaConfig",
    "PalimpsaError",
    "PalimpsaForCausalLM",
    "Recipe",
    "Trainer",
    "evaluate_model",
    "export_model",
    "generate_text",
    "inspect_importance",
    "load_model_and_tokenizer",
    "load_recipe",
    "upgrade_model",
]

_registered = _registering = False


_STAGES = ("errors", "io", "model", "convert", "evaluate", "train", "export", "cli")  # palimpsa.upgrade.convert...


def __getattr__(name: str):
    if name in _STAGES:
        return importlib.import_module(f".{name}", __name__)
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(source, __name__), name)
    globals()[name] = value  # the next access is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SOURCES) | set(_STAGES))


def _register_with_transformers() -> None:
    """``model_type: palimpsa`` for ``AutoConfig`` and ``AutoModelForCausalLM`` (imports the model, so torch)."""
    global _registered, _registering
    if _registered or _registering:
        return
    _registering = True
    try:
        from transformers import AutoConfig, AutoModelForCausalLM

        from .model.configuration import PalimpsaConfig
        from .model.modeling import PalimpsaForCausalLM

        AutoConfig.register(PalimpsaConfig.model_type, PalimpsaConfig, exist_ok=True)
        AutoModelForCausalLM.register(PalimpsaConfig, PalimpsaForCausalLM, exist_ok=True)
        _registered = True
    finally:
        _registering = False


class _Registration(importlib.abc.MetaPathFinder):
    """Registers the model with transformers at the first moment both are imported, whoever imports them and in
    whatever order, while importing this package loads neither: it wraps the loaders of ``transformers`` and of this
    package's modules (no others) to try the registration when each has run, and leaves ``sys.meta_path`` once it
    succeeded. A try fails while one of this package's modules is half-imported (it imported transformers itself);
    the next module to finish tries again."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "transformers" and not fullname.startswith(__name__ + "."):
            return None
        spec = next((found for finder in sys.meta_path if finder is not self and hasattr(finder, "find_spec")
                     for found in [finder.find_spec(fullname, path, target)] if found is not None), None)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            load = spec.loader.exec_module

            def exec_module(module) -> None:
                load(module)
                if "transformers" in sys.modules:
                    try:
                        _register_with_transformers()
                    except ImportError:
                        return
                    if self in sys.meta_path:
                        sys.meta_path.remove(self)

            spec.loader.exec_module = exec_module
        return spec


if "transformers" in sys.modules:
    _register_with_transformers()
elif not any(isinstance(finder, _Registration) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Registration())
