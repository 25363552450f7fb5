"""The model: a mamba_ssm-compatible Mamba2 stack whose chosen layers are Palimpsa layers.

Parameter names and the state-dict layout equal mamba_ssm's (``backbone.embedding``, ``backbone.layers.{i}.norm``,
``backbone.layers.{i}.mixer.{in_proj,conv1d,dt_bias,A_log,D,norm,out_proj}``, ``backbone.norm_f``, ``lm_head``),
so a mamba_ssm checkpoint loads as it is; a Palimpsa mixer adds ``beta_down``, ``beta_up`` and ``beta_log_gain``
(``beta_gain`` in models of the first format).
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from palimpsa.kernels import (
    add_rms_norm,
    causal_conv_silu,
    gated_rms_norm,
    mixer_readout,
    ops_saved_under_checkpointing,
    palimpsa_scan,
    palimpsa_step,
    reference_values_and_gains,
    rms_norm,
    scan_values_and_gains,
)
from palimpsa.kernels.conv import sequence_index
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import ModelOutput

from ..errors import PalimpsaError
from ..io.manifest import check_model_directory, check_weight, refresh_manifest
from ..io.remote_code import write_remote_code
from .cache import PalimpsaCache
from .configuration import PalimpsaConfig


def upcast(tensor: torch.Tensor) -> torch.Tensor:
    """At least float32: half types are computed in float32, float64 stays float64 (for exactness tests)."""
    return tensor if tensor.dtype == torch.float64 else tensor.float()


class RMSNorm(nn.Module):
    """mamba_ssm's RMSNorm: computed in float32, returned in the input dtype.

    With ``prenorm=True`` (a block's input, as mamba_ssm's fused add-norm) it first adds ``residual`` to ``x`` and
    returns ``(norm of the sum in the weight's dtype, the sum)``, the sum in float32 with ``residual_in_fp32``: one
    fused kernel each way on a GPU (kernels/norm.py). The blocks call the module rather than its kernel, so that
    hooks on it (FSDP2's, where a wrap policy shards it on its own) still run.
    """

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None, prenorm: bool = False,
                residual_in_fp32: bool = False):
        if prenorm:
            return add_rms_norm(x, residual, self.weight, self.eps, residual_in_fp32)
        return rms_norm(x, self.weight, self.eps)


class GatedRMSNorm(nn.Module):
    """mamba_ssm's ``RMSNormGated``: one RMS per group of ``group_size`` channels, gated by ``silu(z)``.

    With ``norm_before_gate=False`` (every released Mamba2) the gate multiplies before the norm.
    """

    def __init__(self, dim: int, group_size: int, eps: float, norm_before_gate: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.group_size = group_size
        self.eps = eps
        self.norm_before_gate = norm_before_gate

    def forward(self, x: torch.Tensor, z: torch.Tensor, skip: tuple[torch.Tensor, torch.Tensor] | None = None,
                out_dtype: torch.dtype | None = None) -> torch.Tensor:
        """``x`` ``[..., C]`` normalised and gated; with ``skip = (x_heads, D)`` (a mixer's readout: ``x`` the scan's
        ``[B, L, H, P]`` output) the skip term ``D x_heads`` is added first, in one fused kernel each way on a GPU
        (kernels/readout.py), the result in ``out_dtype``."""
        out_dtype = x.dtype if out_dtype is None else out_dtype
        if skip is not None:
            return mixer_readout(x, *skip, z, self.weight, self.eps, self.group_size, self.norm_before_gate,
                                 out_dtype)
        return gated_rms_norm(x, z, self.weight, self.eps, self.group_size, self.norm_before_gate).to(out_dtype)


@functools.cache
def mamba_ssm_chunk_scan():
    """mamba_ssm's fused SSD scan (``mamba_chunk_scan_combined``) for plain Mamba2 layers on CUDA, or None.

    None when mamba_ssm is not installed, cannot be imported (its package needs a CUDA extension), or
    ``PALIMPSA_MAMBA_SSM=0`` turns it off; the layer then runs ``palimpsa_scan``, which computes the same.
    """
    if os.environ.get("PALIMPSA_MAMBA_SSM", "1") == "0":
        return None
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    except Exception:  # ImportError, or the extension's own load errors
        return None
    return mamba_chunk_scan_combined


@dataclass
class ScanInputs:
    """What a mixer's scan reads, per token: ``x_heads`` ``[B, L, H, P]`` (the value is ``dt * x``), ``keys`` and
    ``queries`` ``[B, L, G, N]``, ``dt`` ``[B, L, H]`` (after softplus and the clamp), ``A`` ``[H]`` (negative; the
    decay is ``exp(dt * A)``), the importance gain's ``gate`` ``[B, L, H * P]`` (before its sigmoid) and ``factor``
    ``[B, L, H]`` (both None in a Mamba2 layer; ``beta`` is ``sigmoid(gate) * factor``, ``[B, L, H, P]``); ``z``,
    ``z0``, ``x0`` feed the gated norm and the gated MLP after the scan."""

    x_heads: torch.Tensor
    keys: torch.Tensor
    queries: torch.Tensor
    dt: torch.Tensor
    A: torch.Tensor
    gate: torch.Tensor | None
    factor: torch.Tensor | None
    z: torch.Tensor
    z0: torch.Tensor
    x0: torch.Tensor

    @property
    def beta(self) -> torch.Tensor | None:
        """The importance gains ``[B, L, H, P]`` (None in a Mamba2 layer), computed on each access."""
        return reference_values_and_gains(self.x_heads, self.dt, self.gate, self.factor)[1]


class PlainMamba2Mixer(nn.Module):
    """mamba_ssm's ``Mamba2`` mixer (no CUDA extension needed): in_proj, conv, the scan, gated norm, out_proj. The
    mixer of every layer that is not upgraded, and the base class of :class:`PalimpsaMixer`. ("Plain": not
    transformers' ``Mamba2Mixer``, whose name it would otherwise shadow.)"""

    def __init__(self, config: PalimpsaConfig, layer_idx: int):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.d_ssm, self.nheads, self.headdim = config.ssm_dim, config.nheads, config.headdim
        self.ngroups, self.d_state = config.ngroups, config.d_state
        self.d_mlp = config.d_inner - self.d_ssm
        conv_dim = self.d_ssm + 2 * config.ngroups * config.d_state
        self.in_proj = nn.Linear(config.d_model, config.d_in_proj, bias=config.bias)
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, config.d_conv, groups=conv_dim, padding=config.d_conv - 1,
                                bias=config.conv_bias)
        self.dt_bias = nn.Parameter(torch.empty(self.nheads))
        self.A_log = nn.Parameter(torch.empty(self.nheads))
        self.D = nn.Parameter(torch.empty(self.d_ssm if config.D_has_hdim else self.nheads))
        if config.rmsnorm:
            self.norm = GatedRMSNorm(self.d_ssm, self.d_ssm // config.ngroups, config.gated_norm_epsilon,
                                     config.norm_before_gate)
        self.out_proj = nn.Linear(config.d_inner, config.d_model, bias=config.bias)

    def gate_and_factor(self, hidden_states: torch.Tensor, dt: torch.Tensor,
                        A: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The importance gain's gate (before its sigmoid) ``[B, L, H * P]`` and per-head factor ``[B, L, H]``
        (``beta = sigmoid(gate) * factor``); a plain Mamba2 layer has neither."""
        return None, None

    def _fused_mamba2_scan(self, fused, x_heads, dt, A, keys, queries, state, cache, cu_seqlens) -> torch.Tensor:
        """The same Mamba2 scan through mamba_ssm's fused kernel (``dt`` already through softplus and the clamp)."""
        seq_idx = None if cu_seqlens is None else sequence_index(cu_seqlens, x_heads.shape[1]).to(torch.int32)[None]
        out = fused(x_heads, dt, A, keys, queries, chunk_size=self.config.chunk_size,
                    initial_states=None if state is None else state[0], seq_idx=seq_idx,
                    return_final_states=cache is not None)
        if cache is not None:
            out, final = out
            cache.ssm[self.layer_idx] = (final.float().detach(), None)
        return out  # (in the inputs' dtype: the readout computes in float32 from any)

    def scan_inputs(self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor | None = None,
                    attention_mask: torch.Tensor | None = None, cache: PalimpsaCache | None = None) -> ScanInputs:
        """Everything the scan and the readout need, computed from the mixer's input ``[B, L, d_model]``.

        ``forward`` runs it; importance inspection runs it on a layer's captured input to see what the scan sees.
        With ``cache`` the convolution continues from (and updates) the cached inputs.
        """
        batch, length, _ = hidden_states.shape
        config = self.config
        z0, x0, z, xbc, dt = torch.split(
            self.in_proj(hidden_states),
            [self.d_mlp, self.d_mlp, self.d_ssm, self.d_ssm + 2 * self.ngroups * self.d_state, self.nheads],
            dim=-1,
        )
        mask = None if attention_mask is None else attention_mask[:, -length:, None].to(xbc.dtype)
        if mask is not None:
            xbc = xbc * mask
        prefix = None if cache is None else cache.conv[self.layer_idx]
        conv_input = xbc if prefix is None else torch.cat([prefix.to(xbc.dtype), xbc], dim=1)
        # one fused kernel each way on a GPU (kernels/conv.py)
        xbc = causal_conv_silu(conv_input, self.conv1d.weight, self.conv1d.bias, cu_seqlens)[:, -length:]
        if mask is not None:
            xbc = xbc * mask
        if cache is not None:
            history = F.pad(conv_input, (0, 0, max(0, config.d_conv - 1 - conv_input.shape[1]), 0))
            cache.conv[self.layer_idx] = history[:, history.shape[1] - (config.d_conv - 1):].detach()
        x, keys, queries = torch.split(xbc, [self.d_ssm, self.ngroups * self.d_state, self.ngroups * self.d_state],
                                       dim=-1)
        dt = F.softplus(upcast(dt) + upcast(self.dt_bias))
        if config.dt_limit is not None:
            dt = dt.clamp(min=config.dt_limit[0], max=config.dt_limit[1])
        A = -torch.exp(upcast(self.A_log))
        gate, factor = self.gate_and_factor(hidden_states, dt, A)
        return ScanInputs(
            x_heads=x.view(batch, length, self.nheads, self.headdim),
            keys=keys.view(batch, length, self.ngroups, self.d_state),
            queries=queries.view(batch, length, self.ngroups, self.d_state),
            dt=dt, A=A, gate=gate, factor=factor, z=z, z0=z0, x0=x0)

    def forward(self, hidden_states: torch.Tensor, cu_seqlens: torch.Tensor | None = None,
                attention_mask: torch.Tensor | None = None, cache: PalimpsaCache | None = None) -> torch.Tensor:
        """``hidden_states`` ``[B, L, d_model]`` -> ``[B, L, d_model]``.

        ``cu_seqlens`` packs sequences (B = 1). ``attention_mask`` ``[B, L]`` (1 = token, 0 = left padding) zeroes
        the padded positions' convolution inputs and outputs, so they write nothing into the state. ``cache``
        supplies the state to start from (when it holds one) and receives the final state.
        """
        batch, length, _ = hidden_states.shape
        config = self.config
        inputs = self.scan_inputs(hidden_states, cu_seqlens, attention_mask, cache)
        x_heads, keys, queries, dt, A = inputs.x_heads, inputs.keys, inputs.queries, inputs.dt, inputs.A
        has_beta = inputs.gate is not None
        state = None if cache is None else cache.ssm[self.layer_idx]
        fused = mamba_ssm_chunk_scan() if not has_beta and x_heads.is_cuda else None
        if fused is not None and (state is None or state[1] is None):
            y = self._fused_mamba2_scan(fused, x_heads, dt, A, keys, queries, state, cache, cu_seqlens)
        elif length == 1 and state is not None and state[1] is not None and not torch.is_grad_enabled():
            # Decoding a Palimpsa layer: one in-place step of (M, I), no scan.
            memory, importance = (s.contiguous() for s in state)
            beta = inputs.beta
            y = palimpsa_step(upcast(x_heads[:, 0]) * dt[:, 0, :, None], keys[:, 0], queries[:, 0], dt[:, 0] * A,
                              None if beta is None else beta[:, 0], (memory, importance),
                              importance_prior=config.importance_prior if has_beta else 1.0).y[:, None]
            cache.ssm[self.layer_idx] = (memory, importance)
        else:
            # v = dt x and beta = sigmoid(gate) * factor: one fused kernel each way on a GPU (kernels/gains.py)
            values, beta = scan_values_and_gains(x_heads, dt, inputs.gate, inputs.factor)
            y, final, _ = palimpsa_scan(
                values, keys, queries, dt * A, beta,
                # A Mamba2 layer (no beta) is the scan with I == 1; the prior only exists in a Palimpsa layer.
                importance_prior=config.importance_prior if has_beta else 1.0,
                initial_state=state, output_final_state=cache is not None, cu_seqlens=cu_seqlens,
            )
            if cache is not None:
                memory, importance = final
                keep_importance = isinstance(self, PalimpsaMixer)
                cache.ssm[self.layer_idx] = (memory.detach(), importance.detach() if keep_importance else None)
        if config.rmsnorm:
            y = self.norm(y, inputs.z, skip=(x_heads, self.D), out_dtype=hidden_states.dtype)  # norm(y + D x)
        else:
            skip = upcast(self.D).view(-1, self.headdim) if config.D_has_hdim else upcast(self.D)[:, None]
            y = (y + upcast(x_heads) * skip).view(batch, length, self.d_ssm)
            y = (y * F.silu(upcast(inputs.z))).to(hidden_states.dtype)
        if self.d_mlp:
            y = torch.cat([F.silu(inputs.z0) * inputs.x0, y], dim=-1)
        return self.out_proj(y)


class PalimpsaMixer(PlainMamba2Mixer):
    """A Mamba2 mixer whose scan also keeps the per-element importance ``I`` (palimpsa-math sections 3 and 4).

    Every Mamba2 parameter is kept; the new ones set the importance gain of head ``h``, channel ``p`` at token
    ``t`` (``u_t`` the mixer's input, ``a_t = exp(dt_t A_h)`` the head's decay)::

        beta_t[h, p] = beta_scale * exp(beta_log_gain[h]) * (1 - a_t) * sigmoid(beta_up(beta_down(u_t)))[h, p]

    ``exp(beta_log_gain)`` is the importance a cell gains per unit of forgetting (``beta / (1 - a)``, the same
    meaning in every head whatever its timescale: a steady input with ``sigmoid * k^2 = c`` holds
    ``I - I_prior = gain * c``); being a log, Adam's steps on it are multiplicative, so the gain can grow from a
    near-Mamba2 start by orders of magnitude in a few hundred steps. The sigmoid lets each token and channel choose
    how much it counts; ``beta_scale`` is the global knob (``PalimpsaForCausalLM.set_beta_scale``), 0 giving an
    exact Mamba2 layer. Models of the first format (``config.beta_form == "linear-dt"``) keep its gain,
    ``|beta_gain[h]| * dt_t`` in place of ``exp(beta_log_gain[h]) * (1 - a_t)``.
    """

    def __init__(self, config: PalimpsaConfig, layer_idx: int):
        super().__init__(config, layer_idx)
        self.beta_down = nn.Linear(config.d_model, config.beta_rank, bias=False)
        self.beta_up = nn.Linear(config.beta_rank, self.d_ssm, bias=True)
        self.linear_dt_gain = config.beta_form == "linear-dt"
        if self.linear_dt_gain:
            self.beta_gain = nn.Parameter(torch.empty(self.nheads))
        else:
            self.beta_log_gain = nn.Parameter(torch.empty(self.nheads))
        self.beta_scale = float(config.beta_scale)
        self.beta_dropped = False  # True: run as the plain Mamba2 layer (no importance state at all)

    @torch.no_grad()
    def init_beta_parameters(self, beta_init: float) -> None:
        """The beta gate starts at 1/2 everywhere (``beta_up`` zero) and the gain at ``beta_init``."""
        init.normal_(self.beta_down.weight, std=self.config.d_model**-0.5)
        init.zeros_(self.beta_up.weight)
        init.zeros_(self.beta_up.bias)
        if self.linear_dt_gain:
            init.constant_(self.beta_gain, beta_init)
        else:
            init.constant_(self.beta_log_gain, math.log(beta_init))

    def gain(self) -> torch.Tensor:
        """The learned per-head gain ``[H]`` (float32, ``beta_scale`` not applied)."""
        return upcast(self.beta_gain).abs() if self.linear_dt_gain else torch.exp(upcast(self.beta_log_gain))

    def gate_and_factor(self, hidden_states: torch.Tensor, dt: torch.Tensor,
                        A: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if self.beta_dropped:
            return None, None
        gate = self.beta_up(self.beta_down(hidden_states))
        per_token = dt if self.linear_dt_gain else -torch.expm1(dt * A)  # 1 - a_t, exact for small dt |A|
        return gate, self.beta_scale * self.gain() * per_token


# transformers 5.24 renamed the recurrent cache from ``cache_params`` to ``cache``: in its outputs (ModelOutput turns a
# ``cache_params=`` argument into ``cache=``, so an output class needs a field of the new name) and in what
# ``generate`` passes back to the model. Earlier 5.x read ``cache_params``. The output's field takes the name this
# transformers reads; ``forward`` and ``prepare_inputs_for_generation`` take either.
CACHE_FIELD = "cache" if isinstance(getattr(ModelOutput, "cache_params", None), property) else "cache_params"


def _output_class():
    fields = {"loss": "torch.Tensor | None", "logits": "torch.Tensor | None", CACHE_FIELD: "PalimpsaCache | None",
              "hidden_states": "tuple[torch.Tensor, ...] | None"}
    namespace = {"__annotations__": fields, "__module__": __name__, "__qualname__": "PalimpsaCausalLMOutput",
                 "__doc__": _OUTPUT_DOC, **dict.fromkeys(fields)}
    return dataclass(type("PalimpsaCausalLMOutput", (ModelOutput,), namespace))


_OUTPUT_DOC = """``loss`` (when labels are given), float32 ``logits``, the updated cache (when caching:
    ``cache_params``, or ``cache`` under transformers >= 5.24, see ``CACHE_FIELD``; :func:`cache_of` reads either)
    and, with ``output_hidden_states``, ``hidden_states``: ``n_layer + 1`` tensors ``[B, L, d_model]`` in
    transformers' convention (the residual stream entering each layer, the first being the embeddings, then the
    final norm's output that the head reads). As a tuple (``return_dict=False``) the fields that are None are left
    out."""
PalimpsaCausalLMOutput = _output_class()


def cache_of(output) -> PalimpsaCache | None:
    """The cache a model output carries, under either transformers' name for it."""
    return getattr(output, CACHE_FIELD)


class PalimpsaBlock(GradientCheckpointingLayer):
    """mamba_ssm's ``Block``: ``residual += h``; ``h = mixer(norm(residual))``."""

    def __init__(self, config: PalimpsaConfig, layer_idx: int):
        super().__init__()
        self.residual_in_fp32 = config.residual_in_fp32
        self.norm = RMSNorm(config.d_model, config.norm_epsilon) if config.rms_norm else nn.LayerNorm(
            config.d_model, eps=config.norm_epsilon)
        mixer_class = PalimpsaMixer if layer_idx in config.upgraded_layers else PlainMamba2Mixer
        self.mixer = mixer_class(config, layer_idx)

    def forward(self, hidden_states, residual=None, cu_seqlens=None, attention_mask=None, cache=None):
        if isinstance(self.norm, RMSNorm):
            hidden_states, residual = self.norm(hidden_states, residual, prenorm=True,
                                                residual_in_fp32=self.residual_in_fp32)
        else:
            residual = hidden_states if residual is None else hidden_states + residual
            hidden_states = self.norm(residual.to(self.norm.weight.dtype))
            if self.residual_in_fp32:
                residual = upcast(residual)
        return self.mixer(hidden_states, cu_seqlens, attention_mask, cache), residual


class PalimpsaPreTrainedModel(PreTrainedModel):
    config_class = PalimpsaConfig
    config: PalimpsaConfig
    base_model_prefix = "backbone"
    _no_split_modules = ["PalimpsaBlock"]
    supports_gradient_checkpointing = True

    def save_pretrained(self, save_directory, *args, is_main_process: bool = True, **kwargs):
        """transformers' ``save_pretrained``, with the modeling code beside the weights and an ``auto_map`` in the
        config (so that the directory loads with ``trust_remote_code=True`` where palimpsa is not installed); then
        a report the directory carries (``upgrade_report.json``, ``export_report.json``: a model saved over its own
        directory) is rewritten to list the files as they are now, so that the next ``from_pretrained`` finds its
        weights true to it.

        A copy loaded as remote code (``_auto_class`` set) leaves its code to transformers, which copies its own
        files."""
        if is_main_process and self._auto_class is None:
            Path(save_directory).mkdir(parents=True, exist_ok=True)
            write_remote_code(Path(save_directory), self.config)  # first: a push_to_hub inside takes them along
        super().save_pretrained(save_directory, *args, is_main_process=is_main_process, **kwargs)
        if is_main_process:
            refresh_manifest(save_directory)

    @torch.no_grad()
    def _init_weights(self, module):
        """mamba_ssm's initialisation for a model built from scratch; loaded weights are left alone."""
        super()._init_weights(module)
        config = self.config
        if isinstance(module, PlainMamba2Mixer):
            low, high = config.A_init_range
            init.copy_(module.A_log, torch.empty(module.nheads).uniform_(low, high).log())
            init.ones_(module.D)
            dt = torch.exp(torch.rand(module.nheads) * (math.log(config.dt_max) - math.log(config.dt_min))
                           + math.log(config.dt_min)).clamp(min=1e-4)
            init.copy_(module.dt_bias, dt + torch.log(-torch.expm1(-dt)))
            init.kaiming_uniform_(module.conv1d.weight, a=math.sqrt(5))
            if module.conv1d.bias is not None:
                init.zeros_(module.conv1d.bias)
        if isinstance(module, PalimpsaMixer):
            module.init_beta_parameters(config.beta_init)
        if isinstance(module, (RMSNorm, GatedRMSNorm)):
            init.ones_(module.weight)


class PalimpsaBackbone(PalimpsaPreTrainedModel):
    def __init__(self, config: PalimpsaConfig):
        super().__init__(config)
        self.embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(PalimpsaBlock(config, i) for i in range(config.n_layer))
        self.norm_f = RMSNorm(config.d_model, config.norm_epsilon) if config.rms_norm else nn.LayerNorm(
            config.d_model, eps=config.norm_epsilon)
        self.post_init()

    def get_input_embeddings(self):
        return self.embedding

    def set_input_embeddings(self, value):
        self.embedding = value

    def forward(self, input_ids=None, inputs_embeds=None, cu_seqlens=None, attention_mask=None, cache=None,
                output_hidden_states: bool = False) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """The final norm's output ``[B, L, d_model]``, and with ``output_hidden_states`` the residual stream
        entering each layer followed by that output (``n_layer + 1`` tensors; else None)."""
        hidden_states = self.embedding(input_ids) if inputs_embeds is None else inputs_embeds
        residual = None
        stream = [] if output_hidden_states else None
        for layer in self.layers:
            if stream is not None:  # mamba_ssm's blocks carry the stream in two parts: their sum is the state
                stream.append(hidden_states if residual is None else hidden_states + residual)
            hidden_states, residual = layer(hidden_states, residual, cu_seqlens, attention_mask, cache)
        if isinstance(self.norm_f, RMSNorm):
            hidden_states = self.norm_f(hidden_states, residual, prenorm=True)[0]
        else:
            residual = hidden_states + residual if residual is not None else hidden_states
            hidden_states = self.norm_f(residual.to(self.norm_f.weight.dtype))
        return hidden_states, None if stream is None else (*stream, hidden_states)


class PalimpsaForCausalLM(PalimpsaPreTrainedModel, GenerationMixin):
    """Causal LM over a :class:`PalimpsaConfig` stack; with no upgraded layer it is a plain Mamba2 LM."""

    _tied_weights_keys = {"lm_head.weight": "backbone.embedding.weight"}

    def __init__(self, config: PalimpsaConfig):
        super().__init__(config)
        self.backbone = PalimpsaBackbone(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.backbone.embedding

    def set_input_embeddings(self, value):
        self.backbone.embedding = value

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' loading, after checking a local directory's files against the checksums in its report
        (``export_report.json`` / ``upgrade_report.json``): a missing or corrupted shard is named, not guessed; then
        every weight is checked to be finite (:func:`check_weight`)."""
        check_model_directory(pretrained_model_name_or_path)
        loaded = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # output_loading_info=True adds a dict
        for name, parameter in model.named_parameters():
            check_weight(name, parameter, str(pretrained_model_name_or_path))
        return loaded

    def palimpsa_mixers(self) -> list[PalimpsaMixer]:
        return [layer.mixer for layer in self.backbone.layers if isinstance(layer.mixer, PalimpsaMixer)]

    def set_beta_scale(self, scale: float) -> None:
        """Multiply every Palimpsa layer's beta by ``scale`` (stored in ``config.beta_scale``).

        ``scale = 0`` turns every Palimpsa layer into the Mamba2 layer it came from; the equivalence sweep turns
        this knob. The scale is saved with the config.
        """
        if scale < 0:
            raise ValueError(f"beta scale must be >= 0, got {scale}")
        self.config.beta_scale = float(scale)
        for mixer in self.palimpsa_mixers():
            mixer.beta_scale = float(scale)

    @contextlib.contextmanager
    def beta_scaled(self, scale: float):
        """Context manager: run with ``set_beta_scale(scale)``, then restore the previous scale."""
        previous = self.config.beta_scale
        self.set_beta_scale(scale)
        try:
            yield self
        finally:
            self.set_beta_scale(previous)

    @contextlib.contextmanager
    def beta_dropped(self):
        """Context manager: every Palimpsa layer runs as the Mamba2 layer it holds (beta and ``I`` left out), the
        reference that the beta -> 0 limit is measured against."""
        mixers = self.palimpsa_mixers()
        for mixer in mixers:
            mixer.beta_dropped = True
        try:
            yield self
        finally:
            for mixer in mixers:
                mixer.beta_dropped = False

    def forward(self, input_ids=None, inputs_embeds=None, labels=None, attention_mask=None, cache_params=None,
                use_cache=None, cu_seqlens=None, logits_to_keep=0, output_hidden_states=None, return_dict=None,
                cache=None, **kwargs) -> PalimpsaCausalLMOutput | tuple:
        """``input_ids`` ``[B, L]`` -> float32 logits ``[B, L, vocab_size]``; loss when ``labels`` is given.

        ``cache_params`` (a :class:`PalimpsaCache`; ``cache`` is the same, transformers >= 5.24's name) continues
        from the state it holds and is updated in place; ``use_cache=True`` without one starts a new cache.
        ``attention_mask`` ``[B, L]`` marks left padding.
        ``cu_seqlens`` (``[S + 1]``, with ``B = 1``) marks packed sequences: no state crosses their borders.
        ``output_hidden_states`` and ``return_dict`` work as in transformers' causal LMs (None: the config's
        setting): see :class:`PalimpsaCausalLMOutput`.
        """
        config = self.config
        if cache is not None:
            if cache_params is not None and cache_params is not cache:
                raise ValueError("pass the recurrent cache once, as cache_params or as cache")
            cache_params = cache
        output_hidden_states = config.output_hidden_states if output_hidden_states is None else output_hidden_states
        return_dict = config.return_dict if return_dict is None else return_dict
        if cache_params is None and use_cache:
            cache_params = PalimpsaCache(config.n_layer)
        if cache_params is not None and cu_seqlens is not None:
            raise ValueError("cu_seqlens (packed sequences) cannot be combined with a recurrent cache")
        hidden_states, all_hidden_states = self.backbone(input_ids, inputs_embeds, cu_seqlens, attention_mask,
                                                         cache_params, output_hidden_states)
        if cache_params is not None:
            cache_params.seen_tokens += hidden_states.shape[1]
        if logits_to_keep:
            hidden_states = hidden_states[:, -logits_to_keep:]
        logits = upcast(self.lm_head(hidden_states.to(self.lm_head.weight.dtype)))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=config.vocab_size, **kwargs)
        output = PalimpsaCausalLMOutput(loss=loss, logits=logits, hidden_states=all_hidden_states,
                                        **{CACHE_FIELD: cache_params})
        return output if return_dict else output.to_tuple()

    # Generation: the recurrent cache travels as `cache_params` (`cache` from transformers 5.24, see CACHE_FIELD);
    # after the prompt only the newest token is fed.
    _is_stateful = True

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False

    def prepare_inputs_for_generation(self, input_ids, cache_params=None, attention_mask=None, inputs_embeds=None,
                                      use_cache=True, is_first_iteration=False, cache=None, **kwargs):
        cache_params = cache if cache is not None else cache_params
        if cache_params is not None and cache_params.seen_tokens:
            return {"input_ids": input_ids[:, -1:], "cache_params": cache_params, "use_cache": use_cache,
                    "logits_to_keep": 1}
        inputs = {"cache_params": cache_params, "attention_mask": attention_mask, "use_cache": use_cache,
                  "logits_to_keep": 1}
        if inputs_embeds is not None:
            inputs["inputs_embeds"] = inputs_embeds
        else:
            inputs["input_ids"] = input_ids
        return inputs


def palimpsa_mixers_of(model: nn.Module) -> list[PalimpsaMixer]:
    """The Palimpsa mixers of ``model``, also when peft, DDP or FSDP wraps it."""
    return [module for module in model.modules() if isinstance(module, PalimpsaMixer)]


def _keep_scan_outputs_policy(saved_ops, ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.MUST_SAVE if op in saved_ops else CheckpointPolicy.PREFER_RECOMPUTE


def enable_activation_checkpointing(model: PalimpsaPreTrainedModel, keep_scan_outputs: bool = True) -> None:
    """Checkpoint every block (its activations are recomputed in the backward instead of kept).

    With ``keep_scan_outputs`` the blocks with a Palimpsa layer checkpoint selectively: the Triton scan's output
    and chunk checkpoints are kept from the forward and everything else in the block is recomputed, so the scan,
    the layer's costliest op, runs once per step instead of twice (the way selective checkpointing keeps
    attention's output). It costs the scan's output and checkpoints per upgraded layer (``L x H x P`` values and
    ``2 x L / CT x H x P x N`` float32, ``CT`` = ``palimpsa.kernels.fused_recurrent.CHUNK_SIZE``; 0.31 GiB at 8k
    tokens for a mamba2-2.7b layer). Where the scan does not run through Triton (CPU tensors) the policy finds
    nothing to keep and the blocks are recomputed in full.

    Not for a model that carries its recurrent state across calls during training (``data.state_passing``): the
    recompute would read the state the forward already advanced (recipes refuse that combination).
    """
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable({"use_reentrant": False})
    # transformers makes the embeddings' output require a gradient, which reentrant checkpointing needs; without
    # it gradients still reach every trainable parameter, and the frozen layers below the lowest trainable one
    # run no backward at all
    try:
        model.disable_input_require_grads()
    except AttributeError:  # versions that fail when no hook was registered
        pass
    saved_ops = ops_saved_under_checkpointing() if keep_scan_outputs else ()
    if not saved_ops:
        return
    policy = functools.partial(_keep_scan_outputs_policy, saved_ops)
    selective = functools.partial(checkpoint, use_reentrant=False,
                                  context_fn=functools.partial(create_selective_checkpoint_contexts, policy))
    for module in model.modules():
        if isinstance(module, PalimpsaBlock) and isinstance(module.mixer, PalimpsaMixer):
            module._gradient_checkpointing_func = selective


def model_from_state_dict(config: PalimpsaConfig, state: dict[str, torch.Tensor],
                          source: str = "checkpoint") -> PalimpsaForCausalLM:
    """Build the model on the meta device and adopt ``state``'s tensors (no copy) after checking every key and shape.

    A tied head needs no ``lm_head.weight``. Raises PalimpsaError naming the first mismatch.
    """
    with torch.device("meta"):
        model = PalimpsaForCausalLM(config)
    expected = {name: tuple(p.shape) for name, p in model.named_parameters()}
    missing = [name for name in expected if name not in state]
    unexpected = [name for name in state if name not in expected]
    if missing or unexpected:
        found = ([f"missing {missing[:3]}"] if missing else []) + ([f"unexpected {unexpected[:3]}"] if unexpected
                                                                  else [])
        raise PalimpsaError(f"{source}: the weights do not match config.json ({' and '.join(found)}); "
                            "check that config.json and the weight files belong together")
    for name, shape in expected.items():
        if tuple(state[name].shape) != shape:
            raise PalimpsaError(f"{source}: {name} has shape {list(state[name].shape)} but config.json implies "
                                f"{list(shape)}; check that config.json and the weights belong together")
    model.load_state_dict(state, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.backbone.embedding.weight
    return model
