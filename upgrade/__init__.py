"""palimpsa.upgrade: load Mamba2 checkpoints, convert chosen layers into Palimpsa layers, verify, save.

Importing this package registers ``PalimpsaConfig`` and ``PalimpsaForCausalLM`` with transformers' ``AutoConfig``
and ``AutoModelForCausalLM`` (model type ``"palimpsa"``).
"""

from transformers import AutoConfig, AutoModelForCausalLM

from .configuration import PalimpsaConfig
from .errors import PalimpsaError
from .modeling import Mamba2Mixer, PalimpsaForCausalLM, PalimpsaMixer
from .pipeline import UpgradeResult, upgrade_model

AutoConfig.register(PalimpsaConfig.model_type, PalimpsaConfig, exist_ok=True)
AutoModelForCausalLM.register(PalimpsaConfig, PalimpsaForCausalLM, exist_ok=True)

__all__ = [
    "Mamba2Mixer",
    "PalimpsaConfig",
    "PalimpsaError",
    "PalimpsaForCausalLM",
    "PalimpsaMixer",
    "UpgradeResult",
    "upgrade_model",
]
