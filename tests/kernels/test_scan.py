"""Tests of ``palimpsa_scan``: every backend against the sequential reference, and the reference itself
against a hand-written loop of palimpsa-math section 3 (forward, final states, uncertainty, every gradient,
packed batches, dtypes, long sequences, input checks)."""

from __future__ import annotations

import math

import pytest
import torch
from palimpsa.kernels import ScanOutput, palimpsa_scan
from scan_inputs import assert_close, make_inputs

F64_TOL = 1e-10


def grad_inputs(inputs: dict) -> list[str]:
    return [name for name, tensor in inputs.items() if tensor is not None]


def scan(inputs: dict, backend: str, *, importance_prior: float = 1.0, cu_seqlens=None):
    """``(y, (M_T, I_T), uncertainty)`` of ``palimpsa_scan`` for a dict of inputs."""
    state = None if inputs["M0"] is None else (inputs["M0"], inputs["I0"])
    return palimpsa_scan(
        inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"],
        importance_prior=importance_prior, initial_state=state, output_final_state=True,
        output_uncertainty=True, cu_seqlens=cu_seqlens, backend=backend,
    )


def make_weights(outputs, seed: int = 123) -> list[torch.Tensor]:
    """Fixed random weights for y, M_T, I_T and the uncertainty, drawn once per test."""
    y, (memory, importance), uncertainty = outputs
    gen = torch.Generator().manual_seed(seed)
    outputs = (y, memory, importance, uncertainty)
    return [torch.randn(t.shape, generator=gen, dtype=torch.float64) for t in outputs]


def weighted_loss(outputs, weights) -> torch.Tensor:
    y, (memory, importance), uncertainty = outputs
    tensors = (y, memory, importance, uncertainty)
    return sum((t.double() * w).sum() for t, w in zip(tensors, weights, strict=True))


def gradients(loss: torch.Tensor, inputs: dict) -> dict:
    names = grad_inputs(inputs)
    grads = torch.autograd.grad(loss, [inputs[n] for n in names], allow_unused=True)
    return {n: torch.zeros_like(inputs[n]) if g is None else g for n, g in zip(names, grads, strict=True)}


@torch.no_grad()
def loop_reference(v, k, q, log_decay, beta, importance_prior, initial_state):
    """palimpsa-math section 3 per batch, per head, per step, with ``u_t = sum_N q_t^2 / I_t``."""
    batch, length, heads, head_dim = v.shape
    groups, state_size = k.shape[2], k.shape[3]
    v, k, q = v.double(), k.double(), q.double()
    y = torch.zeros(batch, length, heads, head_dim, dtype=torch.float64)
    uncertainty = torch.zeros_like(y)
    final_m = torch.zeros(batch, heads, head_dim, state_size, dtype=torch.float64)
    final_i = torch.zeros_like(final_m)
    for b in range(batch):
        for h in range(heads):
            g = h // (heads // groups)
            if initial_state is None:
                memory = torch.zeros(head_dim, state_size, dtype=torch.float64)
                importance = torch.full((head_dim, state_size), importance_prior, dtype=torch.float64)
            else:
                memory = initial_state[0][b, h].double().clone()
                importance = initial_state[1][b, h].double().clone()
            for t in range(length):
                alpha = math.exp(log_decay[b, t, h].item())
                key, query = k[b, t, g], q[b, t, g]
                memory = alpha * memory + torch.outer(v[b, t, h], key)
                importance = alpha * importance + (1 - alpha) * importance_prior
                if beta is not None:
                    importance = importance + torch.outer(beta[b, t, h].double(), key * key)
                y[b, t, h] = (memory / importance) @ query
                uncertainty[b, t, h] = (1 / importance) @ (query * query)
            final_m[b, h], final_i[b, h] = memory, importance
    return y, (final_m, final_i), uncertainty


def flat(outputs) -> tuple:
    """``(y, (M_T, I_T), u)`` as ``(y, M_T, I_T, u)``."""
    return outputs[0], *outputs[1], outputs[2]


def inputs_of(inputs: dict):
    state = None if inputs["M0"] is None else (inputs["M0"], inputs["I0"])
    return inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], state


# 1. chunked PyTorch path against the sequential reference, forward and every gradient


@pytest.mark.parametrize("importance_prior", [1.0, 0.7])
@pytest.mark.parametrize("with_state", [True, False], ids=["state", "nostate"])
@pytest.mark.parametrize("with_beta", [True, False], ids=["beta", "nobeta"])
@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("length", [1, 7, 63, 100])
def test_torch_matches_naive(length, groups, with_beta, with_state, importance_prior):
    inputs = make_inputs(2, length, 4, groups, 3, 4, with_beta=with_beta, with_state=with_state,
                         seed=length * 10 + groups, requires_grad=True)
    want = scan(inputs, "naive", importance_prior=importance_prior)
    got = scan(inputs, "torch", importance_prior=importance_prior)
    assert_close(got[0], want[0], F64_TOL, "y")
    assert_close(got[1][0], want[1][0], F64_TOL, "M_T")
    assert_close(got[1][1], want[1][1], F64_TOL, "I_T")
    assert_close(got[2], want[2], F64_TOL, "uncertainty")
    weights = make_weights(want)
    grads_want = gradients(weighted_loss(want, weights), inputs)
    grads_got = gradients(weighted_loss(got, weights), inputs)
    assert set(grads_want) == {"v", "k", "q", "log_decay"} | ({"beta"} if with_beta else set()) | (
        {"M0", "I0"} if with_state else set())
    for name in grads_want:
        # one token from a zero memory and a prior importance: the decay has nothing to act on
        if not (name == "log_decay" and length == 1 and not with_state):
            assert grads_want[name].abs().max() > 0, f"d{name} is all zero: the loss does not reach it"
        assert_close(grads_got[name], grads_want[name], F64_TOL, f"d{name}")


@pytest.mark.parametrize("length", [32, 64])
def test_torch_matches_naive_at_chunk_multiples(length):
    inputs = make_inputs(1, length, 2, 1, 2, 3, seed=length, requires_grad=True)
    want = scan(inputs, "naive", importance_prior=0.7)
    got = scan(inputs, "torch", importance_prior=0.7)
    for g, w, name in zip(flat(got), flat(want), ("y", "M_T", "I_T", "u"), strict=True):
        assert_close(g, w, F64_TOL, name)
    weights = make_weights(want)
    grads_want = gradients(weighted_loss(want, weights), inputs)
    grads_got = gradients(weighted_loss(got, weights), inputs)
    for name in grads_want:
        assert_close(grads_got[name], grads_want[name], F64_TOL, f"d{name}")


def test_auto_is_torch_on_cpu_and_return_layout():
    """The same three fields whatever is asked for: what was not asked for is None."""
    inputs = make_inputs(2, 40, 4, 2, 3, 4, seed=5)
    v, k, q, log_decay, beta, state = inputs_of(inputs)
    auto = palimpsa_scan(v, k, q, log_decay, beta, initial_state=state, backend="auto")
    torch_y = palimpsa_scan(v, k, q, log_decay, beta, initial_state=state, backend="torch").y
    default = palimpsa_scan(v, k, q, log_decay, beta, initial_state=state)
    assert isinstance(auto, ScanOutput) and auto.y.shape == v.shape
    assert auto.final_state is None and auto.uncertainty is None
    assert torch.equal(auto.y, torch_y) and torch.equal(default.y, torch_y)
    y, final, uncertainty = palimpsa_scan(v, k, q, log_decay, beta, initial_state=state, output_final_state=True)
    assert torch.equal(y, torch_y) and final[0].shape == final[1].shape == (2, 4, 3, 4) and uncertainty is None
    y, final, uncertainty = palimpsa_scan(v, k, q, log_decay, beta, initial_state=state, output_uncertainty=True)
    assert torch.equal(y, torch_y) and final is None and uncertainty.shape == v.shape
    y, final2, uncertainty2 = scan(inputs, "auto")
    assert torch.equal(final2[0], palimpsa_scan(v, k, q, log_decay, beta, initial_state=state,
                                                output_final_state=True).final_state[0])
    assert torch.equal(uncertainty2, uncertainty)


# 2 and 9. the reference itself, and the uncertainty, against a hand-written loop


@pytest.mark.parametrize("backend", ["naive", "torch"])
@pytest.mark.parametrize(
    "with_beta,with_state,importance_prior",
    [(True, True, 0.7), (True, False, 1.0), (False, True, 1.3), (False, False, 0.7)],
)
def test_matches_hand_written_loop(backend, with_beta, with_state, importance_prior):
    inputs = make_inputs(2, 40, 4, 2, 3, 5, with_beta=with_beta, with_state=with_state, seed=7)
    y, (memory, importance), uncertainty = scan(inputs, backend, importance_prior=importance_prior)
    y_ref, (memory_ref, importance_ref), uncertainty_ref = loop_reference(
        *inputs_of(inputs)[:5], importance_prior, inputs_of(inputs)[5])
    assert_close(y, y_ref, F64_TOL, "y")
    assert_close(memory, memory_ref, F64_TOL, "M_T")
    assert_close(importance, importance_ref, F64_TOL, "I_T")
    assert_close(uncertainty, uncertainty_ref, F64_TOL, "uncertainty")


def test_uncertainty_is_q_squared_over_naive_importance():
    """u_t = sum_N q_t^2 / I_t with I_t read as the naive final state of every prefix."""
    inputs = make_inputs(1, 12, 4, 2, 3, 5, seed=11)
    v, k, q, log_decay, beta, state = inputs_of(inputs)
    _, _, uncertainty = scan(inputs, "naive", importance_prior=0.8)
    heads_per_group = v.shape[2] // k.shape[2]
    for t in range(v.shape[1]):
        _, (_, importance_t), _ = palimpsa_scan(
            v[:, : t + 1], k[:, : t + 1], q[:, : t + 1], log_decay[:, : t + 1], beta[:, : t + 1],
            importance_prior=0.8, initial_state=state, output_final_state=True, backend="naive",
        )
        query = q[:, t].repeat_interleave(heads_per_group, dim=1)[:, :, None, :]  # [B, H, 1, N]
        want = (query * query / importance_t).sum(-1)
        assert_close(uncertainty[:, t], want, 1e-12, f"u at t={t}")
    # a larger importance means a smaller readout variance, and beta only ever adds importance
    no_beta = dict(inputs, beta=None)
    assert (scan(no_beta, "naive", importance_prior=0.8)[2] >= uncertainty).all()


# 3. beta = None is beta = 0, and with I_prior = 1 it is Mamba2


@pytest.mark.parametrize("backend", ["naive", "torch"])
@pytest.mark.parametrize("with_state", [True, False], ids=["state", "nostate"])
def test_beta_none_equals_beta_zero(backend, with_state):
    inputs = make_inputs(2, 70, 4, 2, 3, 4, with_beta=False, with_state=with_state, seed=3)
    zeros = dict(inputs, beta=torch.zeros_like(inputs["v"]))
    for prior in (1.0, 0.6):
        got = scan(inputs, backend, importance_prior=prior)
        want = scan(zeros, backend, importance_prior=prior)
        for g, w, name in zip(flat(got), flat(want), ("y", "M_T", "I_T", "u"), strict=True):
            assert_close(g, w, 1e-12, name)


@pytest.mark.parametrize("backend", ["naive", "torch"])
def test_beta_none_prior_one_is_mamba2(backend):
    inputs = make_inputs(2, 70, 4, 2, 3, 4, with_beta=False, with_state=False, seed=4)
    v, k, q, log_decay, _, _ = inputs_of(inputs)
    y, (memory, importance), uncertainty = scan(inputs, backend)
    heads_per_group = v.shape[2] // k.shape[2]
    k_heads = k.repeat_interleave(heads_per_group, dim=2)
    q_heads = q.repeat_interleave(heads_per_group, dim=2)
    h = torch.zeros(memory.shape, dtype=torch.float64)
    ys = []
    for t in range(v.shape[1]):
        write = torch.einsum("bhp,bhn->bhpn", v[:, t], k_heads[:, t])
        h = log_decay[:, t].exp()[:, :, None, None] * h + write
        ys.append(torch.einsum("bhpn,bhn->bhp", h, q_heads[:, t]))
    assert_close(y, torch.stack(ys, 1), 1e-12, "y")
    assert_close(memory, h, 1e-12, "M_T")
    assert torch.equal(importance, torch.ones_like(importance))
    want_u = (q_heads * q_heads).sum(-1)[..., None].expand_as(v)
    assert_close(uncertainty, want_u, 1e-12, "uncertainty")


# 4. gradcheck on a tiny case


@pytest.mark.parametrize("backend", ["naive", "torch"])
def test_gradcheck(backend):
    inputs = make_inputs(1, 5, 2, 1, 2, 3, seed=9, requires_grad=True)
    inputs["beta"] = (inputs["beta"].detach() * 0.3).requires_grad_()
    names = grad_inputs(inputs)

    def function(*tensors):
        named = dict(zip(names, tensors, strict=True))
        y, (memory, importance), uncertainty = scan(named, backend, importance_prior=0.7)
        return y, memory, importance, uncertainty

    assert torch.autograd.gradcheck(function, [inputs[n] for n in names], eps=1e-6, atol=1e-6, rtol=1e-5)


# 5. packed batches (cu_seqlens)

BOUNDS = [0, 1, 8, 30, 37]


def pieces(inputs: dict, index: int) -> dict:
    start, end = BOUNDS[index], BOUNDS[index + 1]
    out = {}
    for name, tensor in inputs.items():
        if tensor is None:
            out[name] = None
        elif name in ("M0", "I0"):
            out[name] = tensor[index : index + 1]
        else:
            out[name] = tensor[:, start:end]
    return out


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("backend", ["naive", "torch"])
@pytest.mark.parametrize("with_state", [True, False], ids=["state", "nostate"])
@pytest.mark.parametrize("with_beta", [True, False], ids=["beta", "nobeta"])
def test_cu_seqlens_equals_separate_sequences(with_beta, with_state, backend, index_dtype):
    n_seq = len(BOUNDS) - 1
    inputs = make_inputs(1, BOUNDS[-1], 4, 2, 3, 4, with_beta=with_beta, with_state=with_state,
                         n_states=n_seq, seed=21, requires_grad=True)
    cu_seqlens = torch.tensor(BOUNDS, dtype=index_dtype)
    packed = scan(inputs, backend, importance_prior=0.7, cu_seqlens=cu_seqlens)
    separate = [scan(pieces(inputs, i), backend, importance_prior=0.7) for i in range(n_seq)]
    want_y = torch.cat([s[0] for s in separate], 1)
    want_m = torch.cat([s[1][0] for s in separate])
    want_i = torch.cat([s[1][1] for s in separate])
    want_u = torch.cat([s[2] for s in separate], 1)
    assert packed[1][0].shape == (n_seq, 4, 3, 4)
    assert_close(packed[0], want_y, 1e-12, "y")
    assert_close(packed[1][0], want_m, 1e-12, "M_T")
    assert_close(packed[1][1], want_i, 1e-12, "I_T")
    assert_close(packed[2], want_u, 1e-12, "uncertainty")
    # the packed run also matches the hand-written loop, one sequence at a time
    for i in range(n_seq):
        part = pieces(inputs, i)
        y_ref, (m_ref, _), _ = loop_reference(*inputs_of(part)[:5], 0.7, inputs_of(part)[5])
        assert_close(packed[0][:, BOUNDS[i] : BOUNDS[i + 1]], y_ref, F64_TOL, f"y of sequence {i}")
        assert_close(packed[1][0][i : i + 1], m_ref, F64_TOL, f"M_T of sequence {i}")

    weights = make_weights(packed)
    grads_packed = gradients(weighted_loss(packed, weights), inputs)
    separate_outputs = (want_y, (want_m, want_i), want_u)
    grads_separate = gradients(weighted_loss(separate_outputs, weights), inputs)
    for name in grads_packed:
        assert grads_separate[name].abs().max() > 0
        assert_close(grads_packed[name], grads_separate[name], 1e-12, f"d{name}")


@pytest.mark.parametrize("bounds", [BOUNDS, [0, 9, 30, 37]], ids=["first-1", "first-9"])
@pytest.mark.parametrize("backend", ["naive", "torch"])
def test_cu_seqlens_no_leakage(backend, bounds):
    """Changing every input of sequence 0 (tokens and initial state) leaves sequences 1.. unchanged."""
    n_seq, first = len(bounds) - 1, bounds[1]
    cu_seqlens = torch.tensor(bounds)
    inputs = make_inputs(1, bounds[-1], 4, 2, 3, 4, n_states=n_seq, seed=22)
    other = make_inputs(1, bounds[-1], 4, 2, 3, 4, n_states=n_seq, seed=23)
    changed = {}
    for name, tensor in inputs.items():
        if name in ("M0", "I0"):
            changed[name] = torch.cat([other[name][:1], tensor[1:]])
        else:
            changed[name] = torch.cat([other[name][:, :first], tensor[:, first:]], 1)
    before = scan(inputs, backend, importance_prior=0.7, cu_seqlens=cu_seqlens)
    after = scan(changed, backend, importance_prior=0.7, cu_seqlens=cu_seqlens)
    assert (before[0][:, :first] - after[0][:, :first]).abs().max() > 1e-3, "sequence 0 did not change"
    assert (before[1][0][0] - after[1][0][0]).abs().max() > 1e-3, "M_T of sequence 0 did not change"
    assert (before[1][1][0] - after[1][1][0]).abs().max() > 1e-3, "I_T of sequence 0 did not change"
    assert (before[0][:, first:] - after[0][:, first:]).abs().max() <= 1e-13
    assert (before[2][:, first:] - after[2][:, first:]).abs().max() <= 1e-13
    for b, a in zip(before[1], after[1], strict=True):
        assert (b[1:] - a[1:]).abs().max() <= 1e-13


@pytest.mark.parametrize("backend", ["naive", "torch"])
def test_cu_seqlens_gradients_do_not_cross_sequences(backend):
    n_seq = len(BOUNDS) - 1
    inputs = make_inputs(1, BOUNDS[-1], 4, 2, 3, 4, n_states=n_seq, seed=24, requires_grad=True)
    y, (memory, importance), uncertainty = scan(inputs, backend, cu_seqlens=torch.tensor(BOUNDS))
    # a loss on sequence 2's outputs only
    start, end = BOUNDS[2], BOUNDS[3]
    loss = y[:, start:end].sum() + uncertainty[:, start:end].sum() + memory[2].sum() + importance[2].sum()
    grads = gradients(loss, inputs)
    for name, grad in grads.items():
        if name in ("M0", "I0"):
            inside, outside = grad[2], torch.cat([grad[:2], grad[3:]])
        else:
            inside, outside = grad[:, start:end], torch.cat([grad[:, :start], grad[:, end:]], 1)
        assert inside.abs().max() > 0, f"d{name} is zero inside sequence 2"
        assert torch.equal(outside, torch.zeros_like(outside)), f"d{name} leaks out of sequence 2"


# 6. dtypes


@pytest.mark.parametrize("backend", ["naive", "torch"])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("with_beta", [True, False], ids=["beta", "nobeta"])
def test_low_precision_dtypes(backend, dtype, tol, with_beta):
    inputs = make_inputs(2, 100, 4, 2, 4, 8, with_beta=with_beta, dtype=dtype, seed=31)
    y, (memory, importance), uncertainty = scan(inputs, backend, importance_prior=0.7)
    assert y.dtype == dtype and uncertainty.dtype == dtype
    assert memory.dtype == torch.float32 and importance.dtype == torch.float32
    # the reference sees the very same (rounded) numbers, in float64
    exact = {n: None if t is None else t.double() for n, t in inputs.items()}
    y_ref, (memory_ref, importance_ref), uncertainty_ref = scan(exact, "naive", importance_prior=0.7)
    assert_close(y, y_ref, tol, "y")
    assert_close(memory, memory_ref, tol, "M_T")
    assert_close(importance, importance_ref, tol, "I_T")
    assert_close(uncertainty, uncertainty_ref, tol, "uncertainty")


@pytest.mark.parametrize("backend", ["naive", "torch"])
def test_float64_states_and_no_state_initialisation_dtypes(backend):
    inputs = make_inputs(1, 10, 2, 1, 2, 3, seed=32)
    y, (memory, importance), uncertainty = scan(inputs, backend)
    assert y.dtype == memory.dtype == importance.dtype == uncertainty.dtype == torch.float64
    low = make_inputs(1, 10, 2, 1, 2, 3, with_state=False, dtype=torch.bfloat16, seed=32)
    y, (memory, importance), uncertainty = scan(low, backend)
    assert y.dtype == uncertainty.dtype == torch.bfloat16
    assert memory.dtype == importance.dtype == torch.float32


# 7. long sequence


def test_long_sequence_float32_is_stable():
    length = 2048
    inputs = make_inputs(1, length, 2, 1, 2, 4, with_state=False, dtype=torch.float32, seed=41)
    gen = torch.Generator().manual_seed(42)
    # decays near 1 keep ~1e4 tokens in memory; beta up to 10 makes I grow large
    inputs["log_decay"] = -1e-4 * (0.5 + torch.rand(1, length, 2, generator=gen))
    y, (memory, importance), uncertainty = scan(inputs, "torch")
    for tensor in (y, memory, importance, uncertainty):
        assert torch.isfinite(tensor).all()
    exact = {n: None if t is None else t.double() for n, t in inputs.items()}
    y_ref, (memory_ref, importance_ref), uncertainty_ref = scan(exact, "naive")
    assert importance_ref.min() > 1000, "the case does not exercise a large importance"
    assert_close(y, y_ref, 1e-4, "y")
    assert_close(memory, memory_ref, 1e-4, "M_T")
    assert_close(importance, importance_ref, 1e-4, "I_T")
    assert_close(uncertainty, uncertainty_ref, 1e-4, "uncertainty")


# 8. input checks


def valid_args():
    inputs = make_inputs(2, 6, 4, 2, 3, 5, seed=51)
    return {
        "v": inputs["v"], "k": inputs["k"], "q": inputs["q"], "log_decay": inputs["log_decay"],
        "beta": inputs["beta"], "initial_state": (inputs["M0"], inputs["I0"]),
    }


def call(args: dict, **options):
    args = dict(args)
    return palimpsa_scan(args.pop("v"), args.pop("k"), args.pop("q"), args.pop("log_decay"), args.pop("beta"),
                         **args, **options)


def packed_args():
    args = valid_args()
    for name in ("v", "k", "q", "log_decay", "beta"):
        args[name] = args[name][:1]
    args["initial_state"] = None
    return args


def test_valid_args_are_accepted():
    args = valid_args()
    assert call(args).y.shape == args["v"].shape
    assert call(packed_args(), cu_seqlens=torch.tensor([0, 2, 6])).y.shape == (1, 6, 4, 3)


@pytest.mark.parametrize(
    "change,options,match",
    [
        (lambda a: a.update(v=a["v"][0]), {}, r"v must be \[B, T, H, P\]"),
        (lambda a: a.update({n: a[n][:, :0] for n in ("v", "k", "q", "log_decay", "beta")}), {}, "T = 0"),
        (lambda a: a.update(k=a["k"][:, :5]), {}, "k must be"),
        (lambda a: a.update(q=a["q"][:1]), {}, "q must be"),
        (lambda a: a.update(q=a["q"][..., :4]), {}, "k and q must have the same shape"),
        (lambda a: a.update({n: a[n][:, :, :1].expand(-1, -1, 3, -1) for n in ("k", "q")}), {},
         r"multiple of the number of groups"),
        (lambda a: a.update(log_decay=a["log_decay"][..., None]), {}, "log_decay must be"),
        (lambda a: a.update(log_decay=a["log_decay"][:, :, :2]), {}, "log_decay must be"),
        (lambda a: a.update(beta=a["beta"][..., :1]), {}, "beta must have v's shape"),
        (lambda a: a.update(v=a["v"].long()), {}, "v must be a floating-point"),
        (lambda a: a.update(initial_state=(a["initial_state"][0][:1], a["initial_state"][1])), {},
         r"initial state M0 must be \[2, 4, 3, 5\]"),
        (lambda a: a.update(initial_state=(a["initial_state"][0], a["initial_state"][1][..., :4])), {},
         r"initial state I0 must be"),
        (lambda a: None, {"importance_prior": 0.0}, "importance_prior must be > 0"),
        (lambda a: None, {"importance_prior": -1.0}, "importance_prior must be > 0"),
        (lambda a: None, {"importance_prior": float("nan")}, "importance_prior must be > 0"),
        (lambda a: None, {"backend": "cuda"}, "backend must be one of"),
        (lambda a: None, {"cu_seqlens": torch.tensor([0, 2, 6])}, "B = 1"),
    ],
    ids=["v-rank", "empty", "k-shape", "q-batch", "kq-mismatch", "groups", "log-decay-rank",
         "log-decay-heads", "beta-shape", "v-int", "M0-shape", "I0-shape", "prior-zero", "prior-negative",
         "prior-nan", "backend", "cu-seqlens-batch"],
)
def test_bad_inputs_raise_value_error(change, options, match):
    args = valid_args()
    change(args)
    with pytest.raises(ValueError, match=match):
        call(args, **options)


@pytest.mark.parametrize(
    "cu_seqlens,match",
    [
        (torch.tensor([1, 2, 6]), "rise strictly from 0"),
        (torch.tensor([0, 2, 5]), "rise strictly from 0"),
        (torch.tensor([0, 2, 7]), "rise strictly from 0"),
        (torch.tensor([0, 4, 2, 6]), "rise strictly from 0"),
        (torch.tensor([0, 2, 2, 6]), "rise strictly from 0"),
        (torch.tensor([0, 2.0, 6]), "1-D int32/int64"),
        (torch.tensor([[0, 2, 6]]), "1-D int32/int64"),
        (torch.tensor([0]), "1-D int32/int64"),
    ],
    ids=["start", "end-short", "end-long", "decreasing", "repeated", "float", "2d", "single"],
)
def test_bad_cu_seqlens_raise_value_error(cu_seqlens, match):
    with pytest.raises(ValueError, match=match):
        call(packed_args(), cu_seqlens=cu_seqlens)


def test_cu_seqlens_initial_state_needs_one_state_per_sequence():
    args = packed_args()
    inputs = make_inputs(2, 6, 4, 2, 3, 5, seed=52)
    args["initial_state"] = (inputs["M0"][:1], inputs["I0"][:1])  # B = 1 states, but S = 2 sequences
    with pytest.raises(ValueError, match=r"initial state M0 must be \[2, 4, 3, 5\]"):
        call(args, cu_seqlens=torch.tensor([0, 2, 6]))
    args["initial_state"] = (inputs["M0"], inputs["I0"])
    assert call(args, cu_seqlens=torch.tensor([0, 2, 6])).y.shape == (1, 6, 4, 3)


def test_cu_seqlens_on_a_gpu_are_checked_without_reading_them_back(monkeypatch):
    """On a CUDA tensor the bounds check is queued on the device (``torch._assert_async``): reading the values back
    (``tolist``, ``item``) would make every packed call wait for the GPU. Here a CPU tensor stands in for a CUDA
    one, and reading it back fails the test; ``_assert_async`` on a CPU tensor raises at once."""
    from palimpsa.kernels import scan as scan_module

    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: pytest.fail("cu_seqlens was read back to the host"))
    monkeypatch.setattr(torch.Tensor, "item", lambda self: pytest.fail("cu_seqlens was read back to the host"))
    scan_module._check_bounds(torch.tensor([0, 2, 6]), 6)
    for bad in (torch.tensor([1, 2, 6]), torch.tensor([0, 2, 5]), torch.tensor([0, 4, 2, 6])):
        with pytest.raises(RuntimeError, match="rise strictly from 0"):
            scan_module._check_bounds(bad, 6)
