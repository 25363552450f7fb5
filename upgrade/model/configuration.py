"""``PalimpsaConfig``: one config for a stack of Mamba2 layers of which some are upgraded to Palimpsa.

Field names follow mamba_ssm (``d_model``, ``n_layer``, ``d_state``, ``headdim``, ``ngroups``...) because the
checkpoints this toolkit reads use them; ``hidden_size`` and ``num_hidden_layers`` are aliases for tools that
expect transformers' names.
"""

from __future__ import annotations

import math

from transformers import PreTrainedConfig

BETA_FORMS = ("log-relative", "linear-dt")
"""How a Palimpsa layer's gain is parameterised (see ``PalimpsaMixer``). ``log-relative``: a per-head log gain
relative to the head's forgetting rate (since format 2); ``linear-dt``: the first format's plain per-head gain times
``dt``, kept so that models written by palimpsa 0.1 load and compute what they did."""


def padded_vocab_size(vocab_size: int, multiple: int) -> int:
    """The embedding's row count: the tokenizer's vocabulary rounded up to a multiple of mamba_ssm's
    ``pad_vocab_size_multiple`` (``PalimpsaConfig.vocab_size``; the unpadded size is ``base_vocab_size``)."""
    return -(-vocab_size // multiple) * multiple


def padding_multiple(padded: int, vocab_size: int) -> int:
    """A ``pad_vocab_size_multiple`` under which :func:`padded_vocab_size` turns ``vocab_size`` into ``padded``, for
    a mamba_ssm ``config.json`` written back: the usual multiples first, else ``padded`` itself."""
    for multiple in (16, 8, 32, 64, 128, 4, 2):
        if padded_vocab_size(vocab_size, multiple) == padded:
            return multiple
    return padded if padded != vocab_size else 1


# Sizes that must be positive integers: a zero divides by zero below, a negative one fails deep inside torch.
_POSITIVE_SIZES = ("d_model", "n_layer", "vocab_size", "d_state", "d_conv", "expand", "headdim", "ngroups",
                   "chunk_size", "beta_rank")


class PalimpsaConfig(PreTrainedConfig):
    """Dimensions of the Mamba2 stack plus where the Palimpsa layers sit and how their beta is set.

    Mamba2 fields (mamba_ssm semantics): ``d_model``, ``n_layer``, ``vocab_size`` (the embedding's row count,
    padded), ``d_state``, ``d_conv``, ``expand`` (``d_inner = expand * d_model``), ``headdim``, ``d_ssm`` (None:
    ``d_inner``; smaller: the remaining channels form a gated MLP), ``ngroups``, ``dt_limit`` (``[min, max]`` clamp
    of the step size, None for none), ``bias``, ``conv_bias``, ``D_has_hdim``, ``rmsnorm`` (gated RMSNorm before
    ``out_proj``), ``norm_before_gate``, ``rms_norm`` (RMSNorm, else LayerNorm, for the block norms),
    ``norm_epsilon``, ``gated_norm_epsilon`` (of the mixer's gated norm; mamba_ssm fixes it at 1e-5),
    ``residual_in_fp32``, ``tie_word_embeddings``, ``chunk_size``.

    Palimpsa fields: ``upgraded_layers`` (indices of Palimpsa layers), ``beta_form`` (how the gain is
    parameterised, one of ``BETA_FORMS``), ``beta_rank`` (rank of the token-dependent beta gate), ``beta_init``
    (initial per-head gain: importance gained per unit of forgetting in the ``log-relative`` form), ``beta_scale``
    (a global factor on every beta, the knob of the beta -> 0 sweep; 0 makes every Palimpsa layer an exact Mamba2
    layer), ``importance_prior`` (``I_prior``),
    ``base_model`` (where the weights came from) and ``base_vocab_size`` (the tokenizer's vocabulary before
    padding). ``bos_token_id``/``eos_token_id``/``pad_token_id`` come from the tokenizer when the checkpoint has one.
    """

    model_type = "palimpsa"
    attribute_map = {"hidden_size": "d_model", "num_hidden_layers": "n_layer"}

    d_model: int = 256
    n_layer: int = 4
    vocab_size: int = 512
    d_state: int = 128
    d_conv: int = 4
    expand: int = 2
    headdim: int = 64
    d_ssm: int | None = None
    ngroups: int = 1
    dt_limit: list[float] | None = None
    bias: bool = False
    conv_bias: bool = True
    D_has_hdim: bool = False
    rmsnorm: bool = True
    norm_before_gate: bool = False
    rms_norm: bool = True
    norm_epsilon: float = 1e-5
    gated_norm_epsilon: float = 1e-5
    residual_in_fp32: bool = True
    tie_word_embeddings: bool = True
    chunk_size: int = 256
    dt_min: float = 0.001
    dt_max: float = 0.1
    A_init_range: list[float] = (1.0, 16.0)
    initializer_range: float = 0.02

    upgraded_layers: list[int] = ()
    beta_form: str = "log-relative"
    beta_rank: int = 16
    beta_init: float = 1e-3
    beta_scale: float = 1.0
    importance_prior: float = 1.0
    base_model: str | None = None
    base_vocab_size: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        """A ``config.json`` with upgraded layers but no ``beta_form`` was written before the field existed: its
        layers use the first format's ``linear-dt`` gain (``beta_gain`` in the weights)."""
        if config_dict.get("upgraded_layers") and "beta_form" not in config_dict:
            config_dict = {**config_dict, "beta_form": "linear-dt"}
        return super().from_dict(config_dict, **kwargs)

    def __post_init__(self, **kwargs):
        self.upgraded_layers = sorted(int(i) for i in self.upgraded_layers)
        self.A_init_range = [float(x) for x in self.A_init_range]
        if self.dt_limit is not None:
            self.dt_limit = [float(x) for x in self.dt_limit]
        super().__post_init__(**kwargs)
        self.check_dimensions()

    @property
    def d_inner(self) -> int:
        return self.expand * self.d_model

    @property
    def ssm_dim(self) -> int:
        """Channels that go through the scan (mamba_ssm's ``d_ssm``)."""
        return self.d_inner if self.d_ssm is None else self.d_ssm

    @property
    def nheads(self) -> int:
        return self.ssm_dim // self.headdim

    @property
    def d_in_proj(self) -> int:
        return 2 * self.d_inner + 2 * self.ngroups * self.d_state + self.nheads

    def check_dimensions(self) -> None:
        """Raise ValueError naming the first inconsistent dimension."""
        for name in _POSITIVE_SIZES + (("d_ssm",) if self.d_ssm is not None else ()):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("norm_epsilon", "gated_norm_epsilon", "importance_prior", "beta_init", "beta_scale"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if self.ssm_dim > self.d_inner:
            raise ValueError(f"d_ssm ({self.ssm_dim}) cannot exceed expand * d_model ({self.d_inner})")
        if self.ssm_dim % self.headdim:
            raise ValueError(f"d_ssm ({self.ssm_dim}) must be a multiple of headdim ({self.headdim})")
        if self.nheads % self.ngroups:
            raise ValueError(f"the number of heads ({self.nheads}) must be a multiple of ngroups ({self.ngroups})")
        if self.ssm_dim % self.ngroups:
            raise ValueError(f"d_ssm ({self.ssm_dim}) must be a multiple of ngroups ({self.ngroups})")
        bad = [i for i in self.upgraded_layers if not 0 <= i < self.n_layer]
        if bad:
            raise ValueError(f"upgraded_layers {bad} are outside 0..{self.n_layer - 1}")
        if len(set(self.upgraded_layers)) != len(self.upgraded_layers):
            raise ValueError(f"upgraded_layers lists a layer twice: {self.upgraded_layers}")
        if not self.importance_prior > 0:
            raise ValueError(f"importance_prior must be > 0, got {self.importance_prior}")
        if self.beta_form not in BETA_FORMS:
            raise ValueError(f"beta_form must be one of {', '.join(BETA_FORMS)}, got {self.beta_form!r}")
        if self.beta_scale < 0:
            raise ValueError(f"beta_scale must be >= 0, got {self.beta_scale}")
        # A log-parameterised gain of exactly 0 would sit at log 0 = -inf and never move.
        logarithmic = self.beta_form == "log-relative"
        if not (self.beta_init > 0 if logarithmic else self.beta_init >= 0):
            raise ValueError(f"beta_init must be a finite number {'> 0' if logarithmic else '>= 0'} for beta_form "
                             f"{self.beta_form}, got {self.beta_init}")
