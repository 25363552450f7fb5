"""palimpsa.upgrade: load Mamba2 checkpoints, convert chosen layers into Palimpsa layers, verify, save.

Importing this package registers ``PalimpsaConfig`` and ``PalimpsaForCausalLM`` with transformers' ``AutoConfig``
and ``AutoModelForCausalLM`` (model type ``"palimpsa"``).
"""

from transformers import AutoConfig, AutoModelForCausalLM

from .configuration import PalimpsaConfig
from .modeling import Mamba2Mixer, PalimpsaForCausalLM, PalimpsaMixer

AutoConfig.register(PalimpsaConfig.model_type, PalimpsaConfig, exist_ok=True)
AutoModelForCausalLM.register(PalimpsaConfig, PalimpsaForCausalLM, exist_ok=True)

__all__ = ["Mamba2Mixer", "PalimpsaConfig", "PalimpsaForCausalLM", "PalimpsaMixer"]
