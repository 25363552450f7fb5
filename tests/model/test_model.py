"""Tests of the model (``palimpsa.upgrade.model``) and of layer surgery.

Oracles:
- transformers' ``Mamba2ForCausalLM`` (pure-PyTorch CPU path) on the same weights, for the options it can express;
- a plain per-token Mamba2/Palimpsa loop written here in float64 (:func:`reference_logits`), for the options it
  cannot (``d_ssm < d_inner``, ``D_has_hdim``, ``rmsnorm=False``, ``norm_before_gate=True``, biases, LayerNorm)
  and for the Palimpsa importance recurrence of palimpsa-math section 3.
"""

from __future__ import annotations

import copy
import json
import math
import os

import palimpsa.upgrade  # noqa: F401  (registers the model with transformers' Auto classes)
import pytest
import torch
import torch.nn.functional as F
from checkpoints import write_mamba_ssm, write_transformers
from palimpsa.upgrade import PalimpsaConfig, PalimpsaForCausalLM
from palimpsa.upgrade.convert.checkpoint import load_checkpoint
from palimpsa.upgrade.convert.surgery import convert_layers, count_new_parameters
from palimpsa.upgrade.errors import PalimpsaError
from palimpsa.upgrade.model.modeling import PalimpsaMixer, PlainMamba2Mixer, model_from_state_dict
from transformers import AutoModelForCausalLM, Mamba2Config, Mamba2ForCausalLM

BETA_PARAMS = {"beta_down.weight", "beta_up.weight", "beta_up.bias", "beta_log_gain"}
DT_LIMIT = [0.01, 0.05]


# ----------------------------------------------------------------------------------------------------------------
# helpers


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


def rel_diff(candidate: torch.Tensor, base: torch.Tensor) -> float:
    return max_diff(candidate, base) / base.double().abs().max().item()


def random_ids(vocab: int, batch: int = 2, length: int = 48, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def logits_of(model, ids: torch.Tensor, **kwargs) -> torch.Tensor:
    return model(ids, **kwargs).logits


def load_ours(directory) -> PalimpsaForCausalLM:
    checkpoint = load_checkpoint(directory)
    return model_from_state_dict(checkpoint.config, checkpoint.load_state_dict(progress=False)).eval()


def hf_config_for(config: PalimpsaConfig) -> Mamba2Config:
    limit = tuple(config.dt_limit) if config.dt_limit is not None else (0.0, float("inf"))
    return Mamba2Config(hidden_size=config.d_model, num_hidden_layers=config.n_layer, vocab_size=config.vocab_size,
                        num_heads=config.nheads, head_dim=config.headdim, state_size=config.d_state,
                        n_groups=config.ngroups, expand=config.expand, conv_kernel=config.d_conv,
                        use_bias=config.bias, use_conv_bias=config.conv_bias, time_step_limit=limit,
                        layer_norm_epsilon=config.norm_epsilon, residual_in_fp32=config.residual_in_fp32,
                        tie_word_embeddings=config.tie_word_embeddings, chunk_size=16)


def hf_from_mamba_ssm_dir(directory, config: PalimpsaConfig) -> Mamba2ForCausalLM:
    """transformers' Mamba2 on the weights of a mamba_ssm checkpoint, read straight from its pickle."""
    raw = torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    state = {k.replace("backbone.embedding.", "backbone.embeddings."): v for k, v in raw.items()}
    model = Mamba2ForCausalLM(hf_config_for(config))
    model.load_state_dict(state, strict=True)
    return model.eval()


def random_weights(model: PalimpsaForCausalLM, seed: int = 0) -> PalimpsaForCausalLM:
    """Overwrite every Mamba2 parameter (not the beta ones) with seeded values of a size where every term matters."""
    gen = torch.Generator().manual_seed(seed)

    def randn(p):
        return torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype)

    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".beta_" in name:
                continue
            if name.endswith("embedding.weight"):
                p.copy_(randn(p))
            elif name.endswith(("proj.weight", "lm_head.weight")):
                p.copy_(randn(p) * p.shape[1] ** -0.5)
            elif name.endswith("norm.weight") or name.endswith("norm_f.weight"):
                p.copy_(1 + 0.3 * randn(p))
            elif name.endswith("A_log"):
                p.copy_(torch.rand(p.shape, generator=gen, dtype=torch.float64) * math.log(8))
            elif name.endswith("dt_bias"):
                p.copy_(-2 + randn(p))
            elif name.endswith("conv1d.weight"):
                p.copy_(randn(p) * 0.5)
            else:  # D, biases
                p.copy_(randn(p) * 0.3)
    return model


def random_beta(model: PalimpsaForCausalLM, seed: int = 0, gain: float = 1.0) -> PalimpsaForCausalLM:
    """Trained-looking beta parameters: random projections (``beta_up`` no longer zero), gains about ``gain``."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mixer in model.palimpsa_mixers():
            for linear in (mixer.beta_down, mixer.beta_up):
                w = linear.weight
                w.copy_(torch.randn(w.shape, generator=gen, dtype=torch.float64) * w.shape[1] ** -0.5)
            mixer.beta_up.bias.copy_(torch.randn(mixer.beta_up.bias.shape, generator=gen, dtype=torch.float64))
            g = mixer.beta_log_gain
            g.copy_((gain * (0.5 + torch.rand(g.shape, generator=gen, dtype=torch.float64))).log())
    return model


# ----------------------------------------------------------------------------------------------------------------
# the independent sequential reference (float64)


def reference_logits(config: PalimpsaConfig, params: dict[str, torch.Tensor], ids: torch.Tensor,
                     beta_scale: float = 0.0) -> torch.Tensor:
    """mamba_ssm's MixerModel + Mamba2 written token by token; Palimpsa layers add the importance recurrence."""
    p = {name: t.detach().double() for name, t in params.items()}

    def norm(x, prefix):
        if config.rms_norm:
            return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + config.norm_epsilon) * p[prefix + ".weight"]
        centred = x - x.mean(-1, keepdim=True)
        var = centred.pow(2).mean(-1, keepdim=True)
        return centred / torch.sqrt(var + config.norm_epsilon) * p[prefix + ".weight"] + p[prefix + ".bias"]

    def linear(x, prefix):
        out = x @ p[prefix + ".weight"].T
        return out + p[prefix + ".bias"] if prefix + ".bias" in p else out

    d_inner, d_ssm, H, P = config.d_inner, config.ssm_dim, config.nheads, config.headdim
    G, N, K = config.ngroups, config.d_state, config.d_conv
    d_mlp = d_inner - d_ssm
    heads_per_group = H // G

    def mixer(u, prefix, upgraded):  # u: [L, d_model] (one sequence)
        L = u.shape[0]
        proj = linear(u, prefix + "in_proj")
        z0, x0, z, xbc, dt = torch.split(proj, [d_mlp, d_mlp, d_ssm, d_ssm + 2 * G * N, H], dim=-1)
        weight = p[prefix + "conv1d.weight"][:, 0, :]  # [C, K]
        conv = torch.zeros_like(xbc)
        for t in range(L):
            acc = p[prefix + "conv1d.bias"].clone() if prefix + "conv1d.bias" in p else torch.zeros_like(xbc[0])
            for k in range(K):
                src = t - (K - 1) + k
                if src >= 0:
                    acc = acc + weight[:, k] * xbc[src]
            conv[t] = acc
        xbc = F.silu(conv)
        x, Bm, Cm = torch.split(xbc, [d_ssm, G * N, G * N], dim=-1)
        dt = F.softplus(dt + p[prefix + "dt_bias"])
        if config.dt_limit is not None:
            dt = dt.clamp(config.dt_limit[0], config.dt_limit[1])
        A = -torch.exp(p[prefix + "A_log"])
        D = p[prefix + "D"].view(H, P) if config.D_has_hdim else p[prefix + "D"][:, None].expand(H, P)
        if upgraded:
            gate = torch.sigmoid(linear(linear(u, prefix + "beta_down"), prefix + "beta_up")).view(L, H, P)
            if prefix + "beta_log_gain" in p:  # importance per unit of forgetting, 1 - exp(dt A)
                per_token = p[prefix + "beta_log_gain"].exp()[None, :] * (1 - torch.exp(dt * A[None, :]))
            else:  # the first format: |gain| dt
                per_token = p[prefix + "beta_gain"].abs()[None, :] * dt
            beta = beta_scale * per_token[:, :, None] * gate
        else:
            beta = torch.zeros(L, H, P, dtype=torch.float64)
        M = torch.zeros(H, P, N, dtype=torch.float64)
        I = torch.full((H, P, N), config.importance_prior, dtype=torch.float64)
        y = torch.zeros(L, H, P, dtype=torch.float64)
        for t in range(L):
            xt = x[t].view(H, P)
            kt = Bm[t].view(G, N).repeat_interleave(heads_per_group, 0)  # [H, N]
            qt = Cm[t].view(G, N).repeat_interleave(heads_per_group, 0)
            alpha = torch.exp(dt[t] * A)[:, None, None]
            M = alpha * M + (dt[t][:, None] * xt)[:, :, None] * kt[:, None, :]
            I = alpha * I + (1 - alpha) * config.importance_prior + beta[t][:, :, None] * (kt * kt)[:, None, :]
            y[t] = torch.einsum("hpn,hn->hp", M / I, qt) + D * xt
        y = y.reshape(L, d_ssm)
        if config.rmsnorm:
            gate_z = F.silu(z)
            if not config.norm_before_gate:
                y = y * gate_z
            grouped = y.view(L, G, d_ssm // G)
            grouped = grouped / torch.sqrt(grouped.pow(2).mean(-1, keepdim=True) + config.gated_norm_epsilon)
            y = grouped.reshape(L, d_ssm) * p[prefix + "norm.weight"]
            if config.norm_before_gate:
                y = y * gate_z
        else:
            y = y * F.silu(z)
        if d_mlp:
            y = torch.cat([F.silu(z0) * x0, y], dim=-1)
        return linear(y, prefix + "out_proj")

    head = p["backbone.embedding.weight"] if config.tie_word_embeddings else p["lm_head.weight"]
    outputs = []
    for sequence in ids:
        hidden = p["backbone.embedding.weight"][sequence]
        residual = None
        for i in range(config.n_layer):
            prefix = f"backbone.layers.{i}."
            residual = hidden if residual is None else hidden + residual
            if config.residual_in_fp32:
                residual = residual.float().double()  # mamba_ssm keeps the residual stream in float32
            hidden = mixer(norm(residual, prefix + "norm"), prefix + "mixer.", i in config.upgraded_layers)
        outputs.append(norm(hidden + residual, "backbone.norm_f") @ head.T)
    return torch.stack(outputs)


def reference_config(**overrides) -> PalimpsaConfig:
    fields = dict(d_model=32, n_layer=2, vocab_size=50, d_state=8, headdim=8, expand=2, ngroups=2,
                  residual_in_fp32=False, tie_word_embeddings=False)
    fields.update(overrides)
    return PalimpsaConfig(**fields)


# Options transformers cannot express, each case mixing several of them.
REFERENCE_CASES = {
    "mlp-Dhdim-normfirst-limit": dict(d_ssm=32, D_has_hdim=True, norm_before_gate=True, dt_limit=[0.005, 0.08]),
    "no-rmsnorm-g2": dict(rmsnorm=False, tie_word_embeddings=True),
    "mlp48-g1-bias-layernorm": dict(d_ssm=48, ngroups=1, D_has_hdim=True, bias=True, conv_bias=False,
                                    rms_norm=False, norm_before_gate=False),
    "mlp-4groups-normfirst": dict(d_ssm=32, ngroups=4, norm_before_gate=True, d_conv=3),
}


# ----------------------------------------------------------------------------------------------------------------
# 1. equivalence with transformers' Mamba2ForCausalLM on checkpoints of both formats

CHECKPOINT_CASES = [
    pytest.param(fmt, groups, tied, limit, id=f"{fmt}-g{groups}-{'tied' if tied else 'untied'}-"
                 f"{'limit' if limit else 'nolimit'}")
    for fmt in ("mamba_ssm", "transformers") for groups in (1, 2) for tied in (True, False)
    for limit in (False, True)
]


@pytest.fixture(scope="module")
def checkpoint_dirs(tmp_path_factory):
    made = {}

    def make(fmt, groups, tied, limit):
        key = (fmt, groups, tied, limit)
        if key not in made:
            directory = tmp_path_factory.mktemp(f"{fmt}-{groups}-{tied}-{limit}")
            if fmt == "mamba_ssm":  # vocab 101 padded to a multiple of 8: 104 rows
                write_mamba_ssm(directory, d_model=32, n_layer=3, vocab_size=101, pad_vocab_size_multiple=8,
                                tie_embeddings=tied, ngroups=groups, **({"dt_limit": DT_LIMIT} if limit else {}))
            else:
                write_transformers(directory, hidden_size=32, num_hidden_layers=3, vocab_size=101, n_groups=groups,
                                   tie_word_embeddings=tied,
                                   **({"time_step_limit": tuple(DT_LIMIT)} if limit else {}))
            made[key] = directory
        return made[key]

    return make


@pytest.mark.parametrize("fmt,groups,tied,limit", CHECKPOINT_CASES)
def test_matches_transformers_mamba2(checkpoint_dirs, fmt, groups, tied, limit):
    directory = checkpoint_dirs(fmt, groups, tied, limit)
    checkpoint = load_checkpoint(directory)
    config = checkpoint.config
    assert checkpoint.format == fmt
    assert (config.ngroups, config.tie_word_embeddings, config.dt_limit) == (groups, tied, DT_LIMIT if limit else None)
    if fmt == "mamba_ssm":
        assert (config.vocab_size, config.base_vocab_size) == (104, 101)
        oracle = hf_from_mamba_ssm_dir(directory, config)
    else:
        oracle = Mamba2ForCausalLM.from_pretrained(directory).eval()
    model = model_from_state_dict(config, checkpoint.load_state_dict(progress=False)).eval()
    if tied:
        assert model.lm_head.weight is model.backbone.embedding.weight
    assert next(model.parameters()).dtype == torch.float32

    ids = random_ids(101, length=50)
    want = logits_of(oracle, ids)
    scale = want.abs().max().item()
    assert scale > 0.1  # the comparison below is not between near-zero logits

    # (a) no upgraded layer
    got = logits_of(model, ids)
    assert got.shape == (2, 50, config.vocab_size)
    base_diff = max_diff(got, want)
    assert base_diff <= 1e-4 and base_diff / scale <= 1e-5, f"Mamba2 vs transformers: {base_diff:.3e}"

    # (b) converted with the default beta init, beta scaled to 0
    convert_layers(model, [0, 2], beta_rank=4)
    with model.beta_scaled(0.0):
        zero_diff = max_diff(logits_of(model, ids), want)
    assert zero_diff <= 1e-4 and zero_diff / scale <= 1e-5, f"beta_scale=0 vs transformers: {zero_diff:.3e}"

    # (c) converted, at its initial beta (the default gain 1e-3): O(beta_init) away from an independent Mamba2;
    # beta = gain * (1 - a) * sigmoid(0) is tiny, but the move must be there. (1 - a) ~ dt |A| with |A| up to 16
    # here, so the increment is up to 16x the first format's gain * dt: within 1e-3, where that had 1e-4.
    with_beta = logits_of(model, ids)
    init_diff = max_diff(with_beta, want)
    assert 0 < init_diff <= 1e-3 and init_diff / scale <= 1e-4, f"at init vs transformers: {init_diff:.3e}"
    with model.beta_scaled(0.0):
        assert max_diff(with_beta, logits_of(model, ids)) > 0


def test_transformers_oracle_sees_the_step_limit(checkpoint_dirs):
    """Negative control for the test above: the dt_limit clamp changes the logits far beyond its tolerance."""
    directory = checkpoint_dirs("mamba_ssm", 1, True, True)
    config = load_checkpoint(directory).config
    model = load_ours(directory)
    ids = random_ids(101, length=50)
    with_limit = logits_of(model, ids)
    config_without = hf_config_for(config)
    config_without.time_step_limit = (0.0, float("inf"))
    raw = torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    oracle = Mamba2ForCausalLM(config_without)
    oracle.load_state_dict({k.replace("embedding.", "embeddings."): v for k, v in raw.items()})
    assert max_diff(with_limit, logits_of(oracle.eval(), ids)) > 1e-3


# ----------------------------------------------------------------------------------------------------------------
# 2. the sequential float64 reference, for options transformers cannot express


def test_reference_sanity():
    """The reference itself agrees with transformers where transformers can express the config."""
    config = reference_config(ngroups=2, tie_word_embeddings=False, dt_limit=[0.005, 0.08])
    model = random_weights(PalimpsaForCausalLM(config), seed=3).eval()
    oracle = Mamba2ForCausalLM(hf_config_for(config)).eval()
    state = {k.replace("embedding.", "embeddings."): v for k, v in model.state_dict().items()}
    oracle.load_state_dict(state, strict=True)
    ids = random_ids(50, length=30)
    want = reference_logits(config, model.state_dict(), ids)
    assert rel_diff(logits_of(oracle.double(), ids), want) <= 1e-6


@pytest.mark.parametrize("case", list(REFERENCE_CASES))
@pytest.mark.parametrize("upgraded", [False, True])
def test_float32_model_matches_reference(case, upgraded):
    """Every option's semantics, in float32 (relative 1e-5), with no or with upgraded layers at beta_scale 0."""
    config = reference_config(**REFERENCE_CASES[case])
    model = random_weights(PalimpsaForCausalLM(config), seed=1).eval()
    if upgraded:
        convert_layers(model, [1])
        model.set_beta_scale(0.0)
    ids = random_ids(50, length=40)
    want = reference_logits(config, model.state_dict(), ids)
    assert rel_diff(logits_of(model, ids), want) <= 1e-5


@pytest.mark.parametrize("case", list(REFERENCE_CASES))
@pytest.mark.parametrize("upgraded", [False, True])
def test_float64_model_matches_reference(case, upgraded):
    """The same in float64, where only the order of sums differs: <= 1e-10."""
    config = reference_config(**REFERENCE_CASES[case])
    model = random_weights(PalimpsaForCausalLM(config), seed=1).double().eval()
    if upgraded:
        convert_layers(model, [0, 1])
        model.set_beta_scale(0.0)
    ids = random_ids(50, length=40)
    want = reference_logits(config, model.state_dict(), ids)
    got = logits_of(model, ids)
    diff = max_diff(got, want)
    assert diff <= 1e-10 * max(1.0, want.abs().max().item()), f"max |diff| {diff:.3e} ({got.dtype} logits)"
    assert got.dtype == torch.float64


@pytest.mark.parametrize("case", ["mlp-Dhdim-normfirst-limit", "no-rmsnorm-g2"])
def test_palimpsa_layer_with_beta_matches_reference(case):
    """With a large beta the Palimpsa layer follows palimpsa-math section 3 (importance recurrence, M / I readout)."""
    config = reference_config(**REFERENCE_CASES[case], importance_prior=0.7)
    model = convert_layers(random_weights(PalimpsaForCausalLM(config), seed=2), [0, 1])
    random_beta(model, seed=2, gain=3.0).eval()
    model.set_beta_scale(0.5)
    ids = random_ids(50, length=40)
    want = reference_logits(config, model.state_dict(), ids, beta_scale=0.5)
    mamba2 = reference_logits(config, model.state_dict(), ids, beta_scale=0.0)
    assert rel_diff(mamba2, want) > 1e-2  # beta matters here, so the check below means something
    assert rel_diff(logits_of(model, ids), want) <= 1e-5


@pytest.mark.parametrize("case", ["mlp-Dhdim-normfirst-limit", "mlp-4groups-normfirst"])
def test_palimpsa_layer_through_the_fused_gains(case, monkeypatch):
    """The layer's values and gains from the fused kernels (as on a GPU; here under the Triton interpreter) give
    the logits and every parameter's gradient of the PyTorch expressions."""
    pytest.importorskip("triton")
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton kernels need a GPU or TRITON_INTERPRET=1")
    from palimpsa.kernels import fused_gains, gains

    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = reference_config(**REFERENCE_CASES[case], importance_prior=0.7)
    model = convert_layers(random_weights(PalimpsaForCausalLM(config), seed=3), [0, 1])
    random_beta(model, seed=3, gain=3.0)
    model.set_beta_scale(0.5)
    model.to(device)
    ids = random_ids(50, length=24).to(device)

    def run():
        model.zero_grad()
        logits = model(ids).logits
        (logits * torch.linspace(-1, 1, logits.shape[-1], device=device)).sum().backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    monkeypatch.setattr(gains, "_fused", lambda x: None)
    want, want_grads = run()
    calls = []
    monkeypatch.setattr(gains, "_fused", lambda x: calls.append(1) or fused_gains)
    got, got_grads = run()
    assert calls  # the fused kernels ran
    assert rel_diff(got, want) <= 1e-6
    assert got_grads.keys() == want_grads.keys() and any("beta_up" in n for n in got_grads)
    for name, grad in want_grads.items():
        assert rel_diff(got_grads[name], grad) <= 1e-5, name


@pytest.mark.parametrize("case, packed", [("mlp-Dhdim-normfirst-limit", False), ("mlp48-g1-bias-layernorm", True),
                                          ("mlp-4groups-normfirst", False)])
def test_every_layer_through_the_fused_readout_convolution_and_norm(case, packed, monkeypatch):
    """Every block's residual sum and RMSNorm, its mixer's convolution with the SiLU, and the skip term with the
    gated norm, from the fused kernels (as on a GPU; here under the Triton interpreter) give the logits and every
    parameter's gradient of the PyTorch expressions, in Palimpsa and plain Mamba2 layers alike, and in a packed
    row."""
    pytest.importorskip("triton")
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton kernels need a GPU or TRITON_INTERPRET=1")
    from palimpsa.kernels import conv, fused_conv, fused_norm, fused_readout, norm, readout

    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = reference_config(**REFERENCE_CASES[case], importance_prior=0.7)
    model = convert_layers(random_weights(PalimpsaForCausalLM(config), seed=4), [0])
    random_beta(model, seed=4, gain=3.0)
    model.to(device)
    ids = random_ids(50, length=24).to(device)
    cu_seqlens = torch.tensor([0, 2, 11, 24], device=device) if packed else None
    ids = ids[:1] if packed else ids

    def run():
        model.zero_grad()
        logits = model(ids, cu_seqlens=cu_seqlens).logits
        (logits * torch.linspace(-1, 1, logits.shape[-1], device=device)).sum().backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    modules = {"conv": (conv, fused_conv), "norm": (norm, fused_norm), "readout": (readout, fused_readout)}
    for module, fused in modules.values():
        monkeypatch.setattr(module, f"_{fused.__name__.rsplit('.', 1)[-1]}", lambda x: None)
    want, want_grads = run()
    calls = []
    for name, (module, fused) in modules.items():
        monkeypatch.setattr(module, f"_{fused.__name__.rsplit('.', 1)[-1]}",
                            lambda x, name=name, fused=fused: calls.append(name) or fused)
    got, got_grads = run()
    # every layer's kernels ran (the block norm where the model has RMSNorm, not LayerNorm)
    blocks = config.n_layer + 1 if config.rms_norm else 0  # (and the final norm)
    assert sorted(calls) == ["conv"] * config.n_layer + ["norm"] * blocks + ["readout"] * config.n_layer
    assert rel_diff(got, want) <= 1e-6
    assert got_grads.keys() == want_grads.keys() and any(".D" in n for n in got_grads)
    for name, grad in want_grads.items():
        assert rel_diff(got_grads[name], grad) <= 1e-5, name


# ----------------------------------------------------------------------------------------------------------------
# 3. and 4. the beta -> 0 limit


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    return write_mamba_ssm(tmp_path_factory.mktemp("tiny"), d_model=48, n_layer=3, vocab_size=101,
                           d_state=16, headdim=16, ngroups=2, tie_embeddings=False, seed=5)


def test_beta_scale_zero_reproduces_base(tiny_checkpoint):
    base = load_ours(tiny_checkpoint)
    converted = random_beta(convert_layers(load_ours(tiny_checkpoint), [0, 1, 2]), seed=4, gain=1.0)
    ids = random_ids(101)
    want = logits_of(base, ids)
    assert rel_diff(logits_of(converted, ids), want) > 1e-3  # with beta on, the layers differ
    with converted.beta_dropped():  # the Palimpsa layers run as the Mamba2 layers they hold
        assert rel_diff(logits_of(converted, ids), want) <= 1e-6
    assert rel_diff(logits_of(converted, ids), want) > 1e-3  # and back to Palimpsa afterwards
    converted.set_beta_scale(0.0)
    assert rel_diff(logits_of(converted, ids), want) <= 1e-5


def _beta_sweep(dtype, gain):
    config = reference_config(n_layer=3, ngroups=1, tie_word_embeddings=True)
    base = random_weights(PalimpsaForCausalLM(config), seed=7).to(dtype).eval()
    converted = random_beta(convert_layers(copy.deepcopy(base), [0, 2]), seed=7, gain=gain)
    ids = random_ids(50, length=40)
    want = logits_of(base, ids)
    return converted, ids, want


@pytest.mark.parametrize("dtype,gain,scales", [
    pytest.param(torch.float64, 1e-3, [10.0**-e for e in range(1, 7)], id="float64-init-gain"),
    pytest.param(torch.float32, 1.0, [10.0**-e for e in range(2, 5)], id="float32-unit-gain"),
])
def test_beta_sweep_is_linear(dtype, gain, scales):
    """max |logit diff| vs the base shrinks with the beta scale with a log-log slope of 1 (palimpsa-math 4)."""
    converted, ids, want = _beta_sweep(dtype, gain)
    diffs = []
    for scale in scales:
        with converted.beta_scaled(scale):
            diffs.append(max_diff(logits_of(converted, ids), want))
    assert all(later < earlier for earlier, later in zip(diffs, diffs[1:])), diffs
    assert min(diffs) > 0, diffs
    x = torch.tensor([math.log(s) for s in scales], dtype=torch.float64)
    y = torch.tensor([math.log(d) for d in diffs], dtype=torch.float64)
    slope = (((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()).item()
    assert 0.9 <= slope <= 1.1, f"slope {slope:.3f}, diffs {diffs}"


def test_beta_scale_knob_and_persistence(tmp_path):
    config = reference_config(n_layer=2)
    model = convert_layers(random_weights(PalimpsaForCausalLM(config), seed=8), [1])
    mixers = model.palimpsa_mixers()
    assert len(mixers) == 1 and model.config.beta_scale == 1.0
    model.set_beta_scale(0.25)
    assert model.config.beta_scale == 0.25 and mixers[0].beta_scale == 0.25
    with model.beta_scaled(0.0) as same:
        assert same is model and mixers[0].beta_scale == 0.0 and model.config.beta_scale == 0.0
    assert mixers[0].beta_scale == 0.25 and model.config.beta_scale == 0.25
    with pytest.raises(RuntimeError, match="boom"), model.beta_scaled(3.0):
        raise RuntimeError("boom")
    assert mixers[0].beta_scale == 0.25 and model.config.beta_scale == 0.25  # restored on error too
    with pytest.raises(ValueError):
        model.set_beta_scale(-1)
    assert mixers[0].beta_scale == 0.25 and model.config.beta_scale == 0.25

    ids = random_ids(50, length=24)
    want = logits_of(model.eval(), ids)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["beta_scale"] == 0.25
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert reloaded.config.beta_scale == 0.25
    assert [m.beta_scale for m in reloaded.palimpsa_mixers()] == [0.25]
    assert max_diff(logits_of(reloaded, ids), want) <= 1e-6


# ----------------------------------------------------------------------------------------------------------------
# 5. save_pretrained -> AutoModelForCausalLM.from_pretrained


@pytest.mark.parametrize("tied", [True, False])
def test_save_and_reload_converted_model(tmp_path, tied):
    config = reference_config(n_layer=3, tie_word_embeddings=tied)
    model = convert_layers(random_weights(PalimpsaForCausalLM(config), seed=9), [0, 2], beta_rank=4)
    random_beta(model, seed=9, gain=0.5).eval()
    if tied:
        assert model.lm_head.weight is model.backbone.embedding.weight
    ids = random_ids(50)
    want = logits_of(model, ids)
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(reloaded) is PalimpsaForCausalLM
    assert reloaded.config.upgraded_layers == [0, 2] and reloaded.config.beta_rank == 4
    assert [type(layer.mixer) for layer in reloaded.backbone.layers] == [PalimpsaMixer, PlainMamba2Mixer, PalimpsaMixer]
    original = model.state_dict()
    reloaded_state = reloaded.state_dict()
    assert set(reloaded_state) == set(original)
    for name, tensor in original.items():
        assert torch.equal(reloaded_state[name], tensor), name
    assert (reloaded.lm_head.weight.data_ptr() == reloaded.backbone.embedding.weight.data_ptr()) == tied
    assert max_diff(logits_of(reloaded, ids), want) <= 1e-6


def test_reload_keeps_bfloat16(tmp_path):
    config = reference_config(n_layer=2, tie_word_embeddings=True, residual_in_fp32=True)
    model = convert_layers(random_weights(PalimpsaForCausalLM(config), seed=10), [1])
    model = model.to(torch.bfloat16).eval()
    ids = random_ids(50)
    want = logits_of(model, ids)
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert {p.dtype for p in reloaded.parameters()} == {torch.bfloat16}
    assert reloaded.lm_head.weight.data_ptr() == reloaded.backbone.embedding.weight.data_ptr()
    assert max_diff(logits_of(reloaded, ids), want) <= 1e-6


def test_residual_stream_is_float32_in_bfloat16_model():
    config = reference_config(n_layer=2, residual_in_fp32=True)
    model = random_weights(PalimpsaForCausalLM(config), seed=11).to(torch.bfloat16).eval()
    seen = []
    hook = model.backbone.layers[0].register_forward_hook(lambda m, i, out: seen.append((out[0].dtype,
                                                                                          out[1].dtype)))
    logits_of(model, random_ids(50, length=8))
    hook.remove()
    assert seen == [(torch.bfloat16, torch.float32)]


# ----------------------------------------------------------------------------------------------------------------
# 6. surgery


def test_convert_layers_adopts_tensors(tiny_checkpoint):
    checkpoint = load_checkpoint(tiny_checkpoint)
    pristine = checkpoint.load_state_dict(progress=False)
    model = load_ours(tiny_checkpoint)
    before = {name: p for name, p in model.named_parameters()}
    pointers = {name: p.data_ptr() for name, p in before.items()}
    config = model.config
    n_before = sum(p.numel() for p in model.parameters())

    convert_layers(model, [0, 2], beta_init=2e-3, beta_rank=5)

    assert config.upgraded_layers == [0, 2] and config.beta_rank == 5 and config.beta_init == 2e-3
    assert [type(layer.mixer) for layer in model.backbone.layers] == [PalimpsaMixer, PlainMamba2Mixer, PalimpsaMixer]
    after = dict(model.named_parameters())
    new = {name for name in after if name not in before}
    assert new == {f"backbone.layers.{i}.mixer.{p}" for i in (0, 2) for p in BETA_PARAMS}
    assert set(before) <= set(after)
    for name in before:  # the same storage, not a copy
        assert after[name].data_ptr() == pointers[name], name
    for name, tensor in pristine.items():  # and the values are the checkpoint's, bit for bit
        assert torch.equal(after[name], tensor), name
    added = sum(after[name].numel() for name in new)
    d_ssm, heads = config.ssm_dim, config.nheads
    assert added == 2 * (config.d_model * 5 + 5 * d_ssm + d_ssm + heads)
    assert count_new_parameters(model) == added
    assert sum(p.numel() for p in model.parameters()) == n_before + added
    for mixer in model.palimpsa_mixers():
        assert torch.equal(mixer.beta_log_gain, torch.full((heads,), math.log(2e-3)))
        assert not mixer.beta_up.weight.any() and not mixer.beta_up.bias.any()
        assert mixer.beta_down.weight.std() > 0
        assert all(p.dtype == torch.float32 and not p.is_meta for p in mixer.parameters())


def test_convert_layers_keeps_dtype():
    model = random_weights(PalimpsaForCausalLM(reference_config()), seed=12).to(torch.bfloat16)
    convert_layers(model, [0])
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_convert_layers_refuses_an_upgraded_layer(tiny_checkpoint):
    model = convert_layers(load_ours(tiny_checkpoint), [1])
    mixer = model.backbone.layers[1].mixer
    with pytest.raises(PalimpsaError, match="already"):
        convert_layers(model, [0, 1])
    assert model.config.upgraded_layers == [1]  # nothing changed by the refused call
    assert model.backbone.layers[1].mixer is mixer
    assert type(model.backbone.layers[0].mixer) is PlainMamba2Mixer
    convert_layers(model, [0])  # a further, disjoint conversion is fine
    assert model.config.upgraded_layers == [0, 1]


@pytest.mark.parametrize("layers", [[5], [1, 1]], ids=["out-of-range", "duplicate"])
def test_convert_layers_refuses_bad_layer_lists_without_side_effects(tiny_checkpoint, layers):
    model = load_ours(tiny_checkpoint)
    with pytest.raises(PalimpsaError):
        convert_layers(model, layers)
    assert model.config.upgraded_layers == []
    assert not model.palimpsa_mixers()


# ----------------------------------------------------------------------------------------------------------------
# 7. packed sequences


@pytest.mark.parametrize("upgraded", [[], [0, 1, 2], [1]], ids=["mamba2", "palimpsa", "mixed"])
def test_packed_sequences_equal_separate_runs(upgraded):
    config = reference_config(n_layer=3, ngroups=2, tie_word_embeddings=True)
    model = random_weights(PalimpsaForCausalLM(config), seed=13)
    if upgraded:
        random_beta(convert_layers(model, upgraded), seed=13, gain=2.0)  # beta far from 0: importance matters
    model.eval()
    lengths = [7, 2, 20, 3, 15]  # some shorter than the conv's 4 taps
    ids = random_ids(50, batch=1, length=sum(lengths), seed=4)
    bounds = [0]
    for n in lengths:
        bounds.append(bounds[-1] + n)
    separate = torch.cat([logits_of(model, ids[:, a:b]) for a, b in zip(bounds, bounds[1:])], dim=1)
    for dtype in (torch.int32, torch.int64):
        packed = logits_of(model, ids, cu_seqlens=torch.tensor(bounds, dtype=dtype))
        assert rel_diff(packed, separate) <= 1e-5
    # control: without cu_seqlens the state (and conv) crosses documents and the logits differ
    assert rel_diff(logits_of(model, ids), separate) > 1e-3


def test_packed_conv_does_not_leak():
    """One mixer on a packed batch with a one-token document equals the mixer on each document."""
    config = reference_config(n_layer=1)
    model = random_weights(PalimpsaForCausalLM(config), seed=14)
    mixer = model.backbone.layers[0].mixer.eval()
    u = torch.randn(1, 12, config.d_model, generator=torch.Generator().manual_seed(0))
    bounds = torch.tensor([0, 5, 6, 12])
    with torch.no_grad():
        packed = mixer(u, cu_seqlens=bounds)
        separate = torch.cat([mixer(u[:, a:b]) for a, b in ((0, 5), (5, 6), (6, 12))], dim=1)
    assert rel_diff(packed, separate) <= 1e-5


# ----------------------------------------------------------------------------------------------------------------
# 8. beta gradient at initialisation


def test_beta_gradients_at_init(tiny_checkpoint):
    model = convert_layers(load_ours(tiny_checkpoint), [0, 2]).train()
    ids = random_ids(101, length=32)
    model(ids, labels=ids).loss.backward()
    for mixer in model.palimpsa_mixers():
        assert mixer.beta_log_gain.grad is not None and (mixer.beta_log_gain.grad != 0).all()
        assert mixer.beta_up.weight.grad.abs().max() > 0
        assert mixer.beta_up.bias.grad.abs().max() > 0
        # beta_up starts at zero, so nothing flows back to beta_down in the first step (by design)
        assert mixer.beta_down.weight.grad is not None and not mixer.beta_down.weight.grad.any()


def test_beta_gradient_matches_finite_difference():
    """The gains' gradient is the loss's true derivative: beta is proportional to exp(log gain) and to the scale, so
    d loss / d beta_scale = sum(d loss / d log gain)."""
    model = random_weights(PalimpsaForCausalLM(reference_config(n_layer=3)), seed=15)
    convert_layers(model, [0, 2], beta_init=0.5)
    ids = random_ids(50, length=32)
    model(ids, labels=ids).loss.backward()
    analytic = sum(m.beta_log_gain.grad.sum().item() for m in model.palimpsa_mixers())
    step = 0.02  # the loss is far from linear in the scale beyond a few percent at these gains
    with torch.no_grad():
        losses = []
        for scale in (1 + step, 1 - step):
            with model.beta_scaled(scale):
                losses.append(model(ids, labels=ids).loss.item())
    numeric = (losses[0] - losses[1]) / (2 * step)
    assert analytic != 0 and abs(numeric - analytic) <= 0.02 * abs(analytic), (numeric, analytic)


# ----------------------------------------------------------------------------------------------------------------
# 9. loss


@pytest.mark.parametrize("upgraded", [[], [1]])
def test_loss_is_shifted_cross_entropy(tiny_checkpoint, upgraded):
    model = load_ours(tiny_checkpoint)
    if upgraded:
        convert_layers(model, upgraded)
    ids = random_ids(101, length=30)
    labels = ids.clone()
    labels[0, 10:14] = -100
    with torch.no_grad():
        out = model(ids, labels=labels)
    logits = out.logits
    want = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).double(), labels[:, 1:].reshape(-1),
                           ignore_index=-100)
    assert abs(out.loss.item() - want.item()) <= 1e-5 * want.item()
    plain = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    assert abs(out.loss.item() - plain.item()) > 1e-4  # the ignored labels really were ignored
    assert model(ids).loss is None


# ----------------------------------------------------------------------------------------------------------------
# 10. outputs as transformers' causal LMs give them: hidden states, tuples, the config's defaults


def test_hidden_states_follow_transformers(checkpoint_dirs):
    """``output_hidden_states=True``: ``n_layer + 1`` tensors, the embeddings first and the final norm's output
    last, the layers' outputs in between equal to transformers' Mamba2 (which lists each layer's output, then the
    final norm's)."""
    directory = checkpoint_dirs("transformers", 2, False, False)
    oracle = Mamba2ForCausalLM.from_pretrained(directory).eval()
    model = load_ours(directory)
    convert_layers(model, [1], beta_rank=4)
    model.set_beta_scale(0.0)
    ids = random_ids(101, length=20)
    with torch.no_grad():
        output = model(ids, output_hidden_states=True)
        want = oracle(ids, output_hidden_states=True)
        plain = model(ids)
    assert list(output.keys()) == ["logits", "hidden_states"]
    assert "hidden_states" not in plain and torch.equal(plain.logits, output.logits)
    hidden = output.hidden_states
    assert isinstance(hidden, tuple) and len(hidden) == model.config.n_layer + 1
    assert all(h.shape == (2, 20, model.config.d_model) for h in hidden)
    assert torch.equal(hidden[0], model.backbone.embedding(ids))
    assert torch.equal(output.logits, model.lm_head(hidden[-1]).float())
    assert len(want.hidden_states) == model.config.n_layer + 1
    for ours, theirs in zip(hidden[1:], want.hidden_states[:-2]):  # the stream after layers 0 .. n-2
        assert max_diff(ours, theirs) <= 1e-5 * theirs.abs().max().item()
    assert max_diff(hidden[-1], want.hidden_states[-1]) <= 1e-5 * want.hidden_states[-1].abs().max().item()


def test_tuple_outputs_and_config_defaults(tiny_checkpoint):
    model = convert_layers(load_ours(tiny_checkpoint), [1])
    ids = random_ids(101, length=12)
    with torch.no_grad():
        full = model(ids, labels=ids, output_hidden_states=True)
        as_tuple = model(ids, return_dict=False)
        with_loss = model(ids, labels=ids, return_dict=False, output_hidden_states=True)
        model.config.output_hidden_states, model.config.return_dict = True, False
        by_default = model(ids)
    assert type(as_tuple) is tuple and len(as_tuple) == 1 and torch.equal(as_tuple[0], full.logits)
    assert type(with_loss) is tuple and len(with_loss) == 3
    assert torch.equal(with_loss[0], full.loss) and torch.equal(with_loss[1], full.logits)
    assert len(with_loss[2]) == model.config.n_layer + 1
    assert type(by_default) is tuple and len(by_default) == 2 and len(by_default[1]) == model.config.n_layer + 1
