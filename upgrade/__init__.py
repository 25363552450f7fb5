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
- ``export``: release directories, standalone code, plain Mamba2 checkpoints;
- ``cli``: the console scripts, one module each.

A module imports only from stages before its own (and from ``errors``, ``io`` and ``palimpsa.kernels``).
``__all__`` is the short API a user needs; ``PalimpsaMixer`` and ``UpgradeResult`` are importable from here too.
Importing this package registers ``PalimpsaConfig`` and ``PalimpsaForCausalLM`` with transformers' ``AutoConfig``
and ``AutoModelForCausalLM`` (model type ``"palimpsa"``).
"""

from transformers import AutoConfig, AutoModelForCausalLM

from .convert.loading import load_model_and_tokenizer
from .convert.upgrade import UpgradeResult as UpgradeResult  # what upgrade_model returns
from .convert.upgrade import upgrade_model
from .errors import PalimpsaError
from .evaluate.evaluation import evaluate_model
from .evaluate.generation import generate_text
from .evaluate.importance import inspect_importance
from .export.export import export_model
from .model.cache import PalimpsaCache
from .model.configuration import PalimpsaConfig
from .model.modeling import PalimpsaForCausalLM
from .model.modeling import PalimpsaMixer as PalimpsaMixer  # the upgraded layer's mixer
from .train.recipe import load_recipe
from .train.trainer import Trainer

AutoConfig.register(PalimpsaConfig.model_type, PalimpsaConfig, exist_ok=True)
AutoModelForCausalLM.register(PalimpsaConfig, PalimpsaForCausalLM, exist_ok=True)

__all__ = [
    "PalimpsaCache",
    "PalimpsaConfig",
    "PalimpsaError",
    "PalimpsaForCausalLM",
    "Trainer",
    "evaluate_model",
    "export_model",
    "generate_text",
    "inspect_importance",
    "load_model_and_tokenizer",
    "load_recipe",
    "upgrade_model",
]
