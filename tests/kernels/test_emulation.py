"""The Gluon kernels' algorithm (rescaled states, pair-shared reciprocals, the blocked recompute schedule, the
gauge-form decay gradient), and the CUDA local pass's schedule, emulated in PyTorch by ``kernels/emulation.py``,
against the sequential reference.

In float64 every output and every gradient must agree to rounding (1e-12): any algebra or indexing slip in the
algorithm shows far above that. In float32 the emulation shows the rounding the kernels will have, which must stay
inside the GPU check's float32 tolerance (1e-5).
"""

from __future__ import annotations

import math

import pytest
import torch
from palimpsa.kernels import emulation, palimpsa_scan
from scan_inputs import assert_close, make_inputs

F64_TOL = 1e-12
NAMES = ("v", "k", "q", "log_decay", "beta", "M0", "I0")
# small schedule so that several chunks, slab blocks, shared blocks and every tail length occur at T <= 100
SMALL = {"chunk_size": 16, "slab_every": 8, "shared_every": 4}


def with_fast_decays(inputs: dict, seed: int) -> dict:
    """A fifth of the decays near e^-10 (Mamba2's fastest heads), so that renormalisation happens often."""
    gen = torch.Generator().manual_seed(seed)
    log_decay = inputs["log_decay"]
    pick = torch.rand(log_decay.shape, generator=gen, dtype=torch.float64)
    fast = -10.0 + torch.rand(log_decay.shape, generator=gen, dtype=torch.float64)
    inputs["log_decay"] = torch.where(pick < 0.2, fast, log_decay).to(log_decay.dtype)
    return inputs


def reference(inputs: dict, importance_prior: float, cu_seqlens, weights_seed: int = 5):
    """Outputs ``[y, M_T, I_T, u]``, random output weights and the reference's gradients (naive, float64)."""
    leaves = {n: t.detach().double().requires_grad_(True) for n, t in inputs.items() if t is not None}
    full = {n: leaves.get(n) for n in inputs}
    state = None if full["M0"] is None else (full["M0"], full["I0"])
    y, (m, i), u = palimpsa_scan(full["v"], full["k"], full["q"], full["log_decay"], full["beta"],
                                 importance_prior=importance_prior, initial_state=state, output_final_state=True,
                                 output_uncertainty=True, cu_seqlens=cu_seqlens, backend="naive")
    outputs = [y, m, i, u]
    gen = torch.Generator().manual_seed(weights_seed)
    weights = [torch.randn(o.shape, generator=gen, dtype=torch.float64) for o in outputs]
    grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(outputs, weights)), list(leaves.values()))
    return [o.detach() for o in outputs], weights, dict(zip(leaves, grads))


def emulate(inputs: dict, importance_prior: float, cu_seqlens, weights, *, dtype=torch.float64, **options):
    """The emulation's outputs ``[y, M_T, I_T, u]``, gradients and state-update counts (forward, backward)."""
    schedule = {n: options.pop(n) for n in ("slab_every", "shared_every") if n in options}
    x = {n: None if t is None else t.detach() for n, t in inputs.items()}
    state = None if x["M0"] is None else (x["M0"], x["I0"])
    args = (x["v"], x["k"], x["q"], x["log_decay"], x["beta"], importance_prior, state)
    y, (m, i), u, checkpoints, fwd_updates = emulation.emulated_forward(*args, cu_seqlens, dtype=dtype, **options)
    grads, bwd_updates = emulation.emulated_backward(*args, checkpoints, *weights, cu_seqlens, dtype=dtype,
                                                     **options, **schedule)
    return [y, m, i, u], dict(zip(NAMES, grads)), (fwd_updates, bwd_updates)


def check(inputs: dict, tol: float, *, importance_prior=0.7, cu_seqlens=None, **options):
    want, weights, grads_want = reference(inputs, importance_prior, cu_seqlens)
    got, grads_got, updates = emulate(inputs, importance_prior, cu_seqlens, weights, **options)
    for name, g, w in zip(("y", "M_T", "I_T", "u"), got, want, strict=True):
        assert_close(g, w, tol, name)
    for name in NAMES:
        assert (grads_got[name] is None) == (name not in grads_want), f"d{name} present where it should not be"
        if name in grads_want:
            assert_close(grads_got[name], grads_want[name], tol, f"d{name}")
    return updates


@pytest.mark.parametrize(
    "length,groups,with_beta,with_state,tau",
    [
        (1, 1, True, True, 16.0),
        (7, 2, False, True, 16.0),
        (33, 2, True, False, 16.0),
        (63, 2, True, True, 16.0),
        (100, 1, True, True, 2.0),  # a small tau: renormalising updates between the forced ones too
        (45, 2, True, True, 0.0),  # tau = 0: every token a reference, the plain (unrescaled) algorithm
        (29, 1, True, True, math.inf),  # no renormalisation but the forced ones at chunk ends
    ],
    ids=["T1", "T7-G2-nobeta", "T33-G2-nostate", "T63-G2", "T100-tau2", "T45-tau0", "T29-tauinf"],
)
def test_emulation_matches_naive_forward_and_every_gradient(length, groups, with_beta, with_state, tau):
    inputs = with_fast_decays(make_inputs(2, length, 4, groups, 8, 32, with_beta=with_beta, with_state=with_state,
                                          seed=length), seed=length)
    check(inputs, F64_TOL, tau=tau, **SMALL)


def test_emulation_packed_sequences_with_states_and_no_initial_importance():
    bounds = [0, 1, 17, 50, 53]  # lengths 1, 16 (one chunk exactly), 33 (three chunks, odd tail) and 3
    inputs = with_fast_decays(make_inputs(1, 53, 4, 2, 8, 32, n_states=len(bounds) - 1, seed=3), seed=3)
    check(inputs, F64_TOL, cu_seqlens=torch.tensor(bounds), **SMALL)
    inputs["I0"] = None  # a carried Mamba2 state: I0 is the prior and gets no gradient
    check(inputs, F64_TOL, cu_seqlens=torch.tensor(bounds), **SMALL)


def test_emulation_with_the_kernels_schedule_and_both_reciprocal_forms():
    """``CT = 256``, slab every 16, shared every 4 (the kernels' defaults) over two chunks and a tail; and the
    same with one reciprocal per state (no pairs), which must agree just as well."""
    inputs = with_fast_decays(make_inputs(1, 530, 2, 1, 4, 64, seed=9), seed=9)
    for pairs in (True, False):
        check(inputs, F64_TOL, pairs=pairs)


def test_the_backward_recomputes_about_three_states_per_token():
    """The blocked schedule's cost: 816 state updates per full chunk of 256 tokens (pass A 240, pass B 192,
    the two-slot blocks 384), i.e. 3.19 per token, against 3.5 in the Triton backward."""
    inputs = make_inputs(1, 512, 1, 1, 2, 16, seed=2)
    fwd_updates, bwd_updates = check(inputs, F64_TOL)
    assert fwd_updates == 512
    assert bwd_updates == 2 * 816


def test_rescale_factors_bound_the_scale_and_reproduce_the_decays():
    """``e_t <= e^tau`` always; references at every chunk end and the sequence's end; renormalisation by the
    threshold happens for fast decays and never for slow ones; ``c_t e_{t-1} / e_t`` is the decay ``a_t``."""
    gen = torch.Generator().manual_seed(0)
    log_decay = torch.cat([-10 + torch.rand(300, 1, generator=gen, dtype=torch.float64),
                           -1e-3 * torch.rand(300, 1, generator=gen, dtype=torch.float64)], 1)
    carries, scales, references = emulation.rescale_factors(log_decay, tau=16.0, chunk_size=64)
    assert scales.max() <= math.exp(16.0) * (1 + 1e-12)
    ends = [t for t in range(300) if t % 64 == 63] + [299]
    assert references[ends].all()
    others = [t for t in range(300) if t not in ends]
    assert references[others, 0].float().mean() > 0.4  # e^-10 per token: a reference every second token
    assert not references[others, 1].any()  # slow decays only renormalise where forced
    assert (carries[~references] == 1).all()  # between references the update is one FFMA
    previous = torch.cat([torch.ones(1, 2, dtype=torch.float64), scales[:-1]])
    assert torch.allclose(carries * previous / scales, log_decay.exp(), rtol=1e-12, atol=0)


def test_pair_shared_reciprocals_share_half_the_columns():
    d = 0.5 + torch.rand(3, 128, dtype=torch.float64)
    r = emulation.reciprocal_pairs(d)
    assert torch.allclose(r, 1 / d, rtol=1e-14, atol=0)
    lo, hi = emulation.paired_columns(128)
    assert len(lo) == 32 and len(set(lo.tolist()) | set(hi.tolist())) == 64


def test_channel_shared_reciprocals_of_the_cuda_walk():
    """The CUDA chunk walk's readout (``kernels/cuda_walk.py``): channels ``2c`` and ``2c + 1`` share one
    reciprocal on the first half of the states, the query folded into it. Exact in float64; in float32, with decays
    near e^-10, gains up to 10 and the walk's renormalisation bound (tau 20), inside the GPU check's 1e-5."""
    d = 0.5 + torch.rand(3, 8, 128, dtype=torch.float64)
    m, q = torch.randn(3, 8, 128, dtype=torch.float64), torch.randn(3, 1, 128, dtype=torch.float64)
    assert torch.allclose(emulation.channel_paired_readout(m, d, q), (m / d * q).sum(-1), rtol=1e-12, atol=1e-12)
    inputs = with_fast_decays(make_inputs(1, 300, 2, 1, 8, 128, seed=17), seed=17)
    inputs["beta"] = inputs["beta"] * (10 / inputs["beta"].max())
    want, _, _ = reference(inputs, 0.7, None)
    x = inputs
    for dtype, tol in ((torch.float64, F64_TOL), (torch.float32, 1e-5)):
        y, (m_t, i_t), _, _, _ = emulation.emulated_forward(x["v"], x["k"], x["q"], x["log_decay"], x["beta"], 0.7,
                                                            (x["M0"], x["I0"]), tau=20.0, pairs="channels",
                                                            dtype=dtype)
        for name, got, expected in zip(("y", "M_T", "I_T"), (y, m_t, i_t), want):
            assert_close(got.double(), expected, tol, f"{name} ({dtype})")


def test_float32_emulation_rounding_stays_inside_the_gpu_tolerance():
    """States in float32, slow decays (~1e-4 per token, so the scale grows for thousands of tokens) and fast ones:
    the rescaled algorithm's rounding stays below the 1e-5 float32 tolerance of ``check_scan_gpu.py``."""
    inputs = make_inputs(1, 1500, 2, 1, 4, 32, seed=13)
    gen = torch.Generator().manual_seed(13)
    slow = -1e-4 * (1 + 9 * torch.rand(inputs["log_decay"].shape, generator=gen, dtype=torch.float64))
    inputs["log_decay"] = torch.where(torch.arange(2) == 0, slow, inputs["log_decay"])  # head 1: mixed decays
    check(inputs, 1e-5, dtype=torch.float32)


@pytest.mark.parametrize("chunk_size", [1, 5, 16, 1000])
@pytest.mark.parametrize(
    "length,groups,with_beta,with_state",
    [(1, 1, True, True), (7, 2, False, True), (33, 2, True, False), (100, 1, True, True)],
    ids=["T1", "T7-G2-nobeta", "T33-G2-nostate", "T100"],
)
def test_chunk_parallel_backward_matches_naive_at_any_chunk_size(length, groups, with_beta, with_state, chunk_size):
    """Each chunk reversed alone from a zero adjoint, a scan of the adjoints entering the chunks, then corrections
    affine in them: every gradient equals the sequential reference's, with fast decays, whatever the chunking
    (one token per chunk, a tail shorter than the rest, one chunk for the whole sequence)."""
    inputs = with_fast_decays(make_inputs(2, length, 4, groups, 8, 32, with_beta=with_beta, with_state=with_state,
                                          seed=length), seed=length)
    _, weights, want = reference(inputs, 0.7, None)
    x = {n: None if t is None else t.detach() for n, t in inputs.items()}
    state = None if x["M0"] is None else (x["M0"], x["I0"])
    got = emulation.chunk_parallel_backward(x["v"], x["k"], x["q"], x["log_decay"], x["beta"], 0.7, state, *weights,
                                            chunk_size=chunk_size)
    for name, g in zip(NAMES, got, strict=True):
        assert (g is None) == (name not in want), f"d{name} present where it should not be"
        if name in want:
            assert_close(g, want[name], F64_TOL, f"d{name}")


@pytest.mark.parametrize("chunk_size", [1, 5, 16, 1000])
@pytest.mark.parametrize("length,groups,with_beta,with_state", [(1, 1, True, True), (33, 2, False, False),
                                                               (100, 1, True, True)], ids=["T1", "T33-G2", "T100"])
def test_chunk_parallel_forward_matches_naive_at_any_chunk_size(length, groups, with_beta, with_state, chunk_size):
    """Chunk states summed from zero, a scan over chunks for their first states, then the readouts chunk by chunk:
    the outputs, the final states and the chunk-start states equal the sequential reference's."""
    inputs = with_fast_decays(make_inputs(2, length, 4, groups, 8, 32, with_beta=with_beta, with_state=with_state,
                                          seed=length), seed=length)
    want, _, _ = reference(inputs, 0.7, None)
    x = {n: None if t is None else t.detach() for n, t in inputs.items()}
    state = None if x["M0"] is None else (x["M0"], x["I0"])
    args = (x["v"], x["k"], x["q"], x["log_decay"], x["beta"], 0.7, state)
    y, (m, i), u, firsts = emulation.chunk_parallel_forward(*args, chunk_size=chunk_size)
    for name, g, w in zip(("y", "M_T", "I_T", "u"), (y, m, i, u), want, strict=True):
        assert_close(g, w, F64_TOL, name)
    # the chunk-start states are the sequential walk's states after the tokens before them
    for index, (fm, fi) in enumerate(firsts):
        prefix = [None if t is None else t[:, :index * chunk_size].double() for t in args[:5]]
        extra = torch.zeros(2, 1, 4, 8, dtype=torch.float64)  # one token that changes nothing: v = beta = 0, a = 1
        prefix = [torch.cat([p, extra if n in ("v", "beta") else torch.zeros(2, 1, *p.shape[2:], dtype=p.dtype)], 1)
                  if p is not None else None for n, p in zip(("v", "k", "q", "log_decay", "beta"), prefix)]
        _, (m_s, i_s), _ = palimpsa_scan(*prefix, importance_prior=0.7, initial_state=state, output_final_state=True,
                                         backend="naive")
        assert_close(fm, m_s, F64_TOL, f"M at chunk {index}")
        assert_close(fi, i_s, F64_TOL, f"I at chunk {index}")


def _one_head_inputs(gen, tokens: int, decay_scale: float, p: int, n: int, gain: float) -> dict:
    """Random float64 inputs of one head, ``[1, T, 1, ...]``: log decays uniform in ``[-decay_scale, 0]``, gains in
    ``[0, gain]``, initial states."""
    f64 = {"dtype": torch.float64}
    return {"v": torch.randn(1, tokens, 1, p, generator=gen, **f64),
            "k": torch.randn(1, tokens, 1, n, generator=gen, **f64),
            "q": torch.randn(1, tokens, 1, n, generator=gen, **f64),
            "log_decay": -decay_scale * torch.rand(1, tokens, 1, generator=gen, **f64),
            "beta": gain * torch.rand(1, tokens, 1, p, generator=gen, **f64),
            "M0": torch.randn(1, 1, p, n, generator=gen, **f64),
            "I0": 0.5 + torch.rand(1, 1, p, n, generator=gen, **f64)}


def _one_head_case(seed: int, tokens: int, decay_scale: float, prior: float, p: int = 4, n: int = 8):
    """Random float64 inputs of one head (log decays uniform in ``[-decay_scale, 0]``, initial states), an output
    gradient and end-state gradients, and the leaves after the reference scan's backward of that loss: ``(inputs,
    dy, dM_end, dI_end, leaves)``."""
    gen = torch.Generator().manual_seed(seed)
    f64 = {"dtype": torch.float64}
    x = _one_head_inputs(gen, tokens, decay_scale, p, n, 3.0)
    dy = torch.randn(1, tokens, 1, p, generator=gen, **f64)
    dm_end, di_end = torch.randn(1, 1, p, n, generator=gen, **f64), torch.randn(1, 1, p, n, generator=gen, **f64)
    leaves = {name: t.clone().requires_grad_(True) for name, t in x.items()}
    y, (m, i), _ = palimpsa_scan(leaves["v"], leaves["k"], leaves["q"], leaves["log_decay"], leaves["beta"],
                                 importance_prior=prior, initial_state=(leaves["M0"], leaves["I0"]),
                                 output_final_state=True, backend="torch")
    ((y * dy).sum() + (m * dm_end).sum() + (i * di_end).sum()).backward()
    return x, dy, dm_end, di_end, leaves


@pytest.mark.parametrize("rescaled", [True, False])
@pytest.mark.parametrize("decay_scale", [0.05, 2.4, 9.0])
def test_the_gluon_local_pass_block_walks_rescaled_or_plainly_to_the_reference_gradients(rescaled, decay_scale):
    """Pass B of the Gluon local pass over one 8-token block (``emulation.local_pass_block``: the kernel's walk in
    ``(M, J)`` form, rescaled or plainly, and its reverse steps reading the kept states with their scales) gives the
    reference scan's float64 gradients of the block's inputs and start state, for slow decays, decays whose block sums
    near ``RESCALE_TAU`` and fast ones (which the kernel walks plainly, but whose algebra holds either way)."""
    prior = 0.7
    x, dy, dm_end, di_end, leaves = _one_head_case(int(10 * decay_scale) + rescaled, 8, decay_scale, prior)
    one = {name: t[0, :, 0] if name not in ("M0", "I0") else t[0, 0] for name, t in x.items()}
    grads, d_m0, d_i0 = emulation.local_pass_block(
        one["v"], one["k"], one["q"], one["log_decay"], one["beta"], one["M0"], one["I0"], prior, dy[0, :, 0],
        dm_end[0, 0], di_end[0, 0], rescaled=rescaled)
    for name, got in {**grads, "M0": d_m0, "I0": d_i0}.items():
        want = leaves[name].grad[0, :, 0] if name not in ("M0", "I0") else leaves[name].grad[0, 0]
        assert torch.allclose(got, want, rtol=1e-9, atol=1e-9 * want.abs().max().item()), name


def test_blocks_reversed_with_their_adjoints_carried_give_a_whole_sequences_gradients():
    """The algebra the Gluon pass's whole walks (``WHOLE``) rest on: a sequence's blocks reversed from its last, each
    from its own start state (``emulation.local_pass_block``), with the adjoints of each block's start carried into
    the block before it as that block's end adjoints and the final-state gradient entering the last, give the
    reference scan's float64 gradients of every input and of the initial states (chunk boundaries are block
    boundaries). The kernel's own carry of ``(ad, b_an)`` across chunks is checked on the GPU only
    (docs/bench/whole-2026-11-28, call 1)."""
    tokens, block, prior = 24, 8, 0.7
    x, dy, dm_final, di_final, leaves = _one_head_case(5, tokens, 2.0, prior)
    one = {name: t[0, :, 0] for name, t in x.items() if name not in ("M0", "I0")}
    starts, state = [], (x["M0"][0, 0], x["I0"][0, 0])  # each block's true start state
    for b in range(0, tokens, block):
        starts.append(state)
        _, (m_b, i_b), _ = palimpsa_scan(*(x[name][:, b:b + block] for name in ("v", "k", "q", "log_decay", "beta")),
                                         importance_prior=prior, initial_state=(state[0][None, None],
                                                                                state[1][None, None]),
                                         output_final_state=True, backend="torch")
        state = (m_b[0, 0], i_b[0, 0])
    grads = {name: torch.zeros_like(t) for name, t in one.items()}
    dm, di = dm_final[0, 0], di_final[0, 0]
    for b in reversed(range(0, tokens, block)):
        part, dm, di = emulation.local_pass_block(
            *(one[name][b:b + block] for name in ("v", "k", "q", "log_decay", "beta")), *starts[b // block], prior,
            dy[0, b:b + block, 0], dm, di)
        for name in grads:
            grads[name][b:b + block] = part[name]
    for name, got in {**grads, "M0": dm, "I0": di}.items():
        want = leaves[name].grad[0, :, 0] if name not in ("M0", "I0") else leaves[name].grad[0, 0]
        assert torch.allclose(got, want, rtol=1e-9, atol=1e-9 * want.abs().max().item()), name


def _local_case(seed: int, tokens: int, decay_scale: float, prior: float, p: int = 3, n: int = 8):
    """One head's float64 inputs and the reference scan's gradients of ``sum(y * dy)`` (no end-state gradient: the
    local pass's zero adjoint at a chunk's end)."""
    gen = torch.Generator().manual_seed(seed)
    x = _one_head_inputs(gen, tokens, decay_scale, p, n, 10.0)
    dy = torch.randn(1, tokens, 1, p, generator=gen, dtype=torch.float64)
    one = {name: t[0, :, 0] if name not in ("M0", "I0") else t[0, 0] for name, t in x.items()}
    return _local_case_with(one, dy[0, :, 0], prior)


def _gpu_mix_case(tokens: int):
    """One head's inputs in float32 with the GPU check's mix (a third of the log decays near 0, the rest down to -9,
    gains up to 10), its output gradient, and the reference's float64 gradients."""
    x, dy, _ = _local_case(3, tokens, 9.0, 0.7)
    near_one = torch.rand(tokens, generator=torch.Generator().manual_seed(4), dtype=torch.float64) < 0.3
    x["log_decay"] = torch.where(near_one, -1e-4 * torch.ones_like(x["log_decay"]), x["log_decay"])
    x, dy, want = _local_case_with(x, dy, 0.7)
    return {name: t.float() for name, t in x.items()}, dy, want


@pytest.mark.parametrize("tokens", [5, 37, 64])
@pytest.mark.parametrize("decay_scale", [1.0, 12.0, 30.0])
def test_the_cuda_local_pass_schedule_gives_the_reference_gradients(tokens, decay_scale):
    """The CUDA local pass over one chunk (``emulation.cuda_local_chunk``: its slab every 16 tokens, sub-blocks of 8,
    each token's state from its sub-block's start in one matrix product, rescaled where the sub-block's log decay
    stays above -20 and plainly elsewhere, the reverse step on the rescaled states, the decay gradient from the
    token's own state) gives the reference scan's float64 gradients: slow decays, decays whose sub-blocks pass -20
    (up to -12 a token) and decays past -20 a token, and chunks ending inside a segment and a sub-block. It runs the
    products the kernel's schedule promises: two a segment in pass A, one a segment for the state 8 tokens in, and
    one a token."""
    prior = 0.7
    x, dy, want = _local_case(tokens + int(decay_scale), tokens, decay_scale, prior)
    grads, d_m0, d_i0, products = emulation.cuda_local_chunk(x["v"], x["k"], x["q"], x["log_decay"], x["beta"],
                                                              x["M0"], x["I0"], prior, dy)
    for name, got in {**grads, "M0": d_m0, "I0": d_i0}.items():
        assert torch.allclose(got, want[name], rtol=1e-10, atol=1e-10 * want[name].abs().max().item()), name
    segments = -(-tokens // 16)
    expected = 2 * (segments - 1) + tokens  # pass A, and a product a token
    expected += sum(min(16, tokens - 16 * s) > 8 for s in range(segments))  # the states 8 tokens into a segment
    assert products == expected


def test_the_cuda_local_pass_in_float32_stays_inside_the_gpu_tolerance():
    """In float32, with a third of the decays near 1 and the rest down to e^-9 and gains up to 10 (the GPU check's
    mix), the emulated pass with exact products stays within 1e-5 of the float64 reference: the rescaled walks'
    scales (up to e^20) cost no accuracy that the check would see. With the products' operands rounded to TF32, as
    the kernel's tensor cores read them, it stays within 1e-3, the tolerance its GPU check of float32 inputs with
    TF32 allowed uses, and departs from the exact products by more than float32 rounding (so the rounding is
    emulated)."""
    f32, dy, want = _gpu_mix_case(70)
    errors = {}
    for rounded in (False, True):
        grads, d_m0, d_i0, _ = emulation.cuda_local_chunk(f32["v"], f32["k"], f32["q"], f32["log_decay"],
                                                           f32["beta"], f32["M0"], f32["I0"], 0.7, dy.float(),
                                                           round_tf32=rounded)
        errors[rounded] = {name: ((got.double() - want[name]).norm() / want[name].norm()).item()
                           for name, got in {**grads, "M0": d_m0, "I0": d_i0}.items()}
    assert max(errors[False].values()) < 1e-5, errors[False]
    assert max(errors[True].values()) < 1e-3, errors[True]
    assert max(errors[True].values()) > 1e-5, errors[True]


@pytest.mark.parametrize("decay_scale", [1.0, 12.0, 30.0])
def test_peeled_states_give_the_reference_gradients(decay_scale):
    """The CUDA local pass with peeled states (``cuda_local_chunk(subtract=6)``, the kernel's ``TSUB``: in a rescaled
    sub-block a token's state is the one after it less that token's term, where the log decay from it to the last
    state from a product stays above -6) gives the reference scan's float64 gradients, slow decays and decays of up to
    -12 and -30 a token, and runs fewer products where the decays are slow."""
    prior = 0.7
    x, dy, want = _local_case(50 + int(decay_scale), 37, decay_scale, prior)
    args = (x["v"], x["k"], x["q"], x["log_decay"], x["beta"], x["M0"], x["I0"], prior, dy)
    grads, d_m0, d_i0, products = emulation.cuda_local_chunk(*args, subtract=6.0)
    for name, got in {**grads, "M0": d_m0, "I0": d_i0}.items():
        assert torch.allclose(got, want[name], rtol=1e-10, atol=1e-10 * want[name].abs().max().item()), name
    every = emulation.cuda_local_chunk(*args)[3]
    assert (products < every) if decay_scale == 1.0 else (products <= every), (products, every)
    assert emulation.cuda_local_chunk(*args, subtract=0.0)[3] == every  # as the kernel's TSUB 0: none peeled


@pytest.mark.parametrize("case", ["gpu mix", "slow"])
def test_peeled_states_in_float32_stay_as_close_as_products(case):
    """In float32 with TF32 products, peeling states where the log decay since the last product stays above -6 (the
    kernel's ``TSUB``) leaves the gradients within 5% of the error of taking every state from a product, and within
    the GPU check's 1e-3; peeling up to -20 (the rescaling's bound) lets the rounding errors of the state peeled from
    grow by up to e^20, past 1e-2: why the threshold is a parameter of its own."""
    if case == "gpu mix":
        f32, dy, want = _gpu_mix_case(128)
    else:
        x, dy, want = _local_case(7, 128, 2.0, 0.7)
        f32 = {name: t.float() for name, t in x.items()}
    errors = {}
    for subtract in (None, 6.0, 20.0):
        grads, d_m0, d_i0, _ = emulation.cuda_local_chunk(f32["v"], f32["k"], f32["q"], f32["log_decay"],
                                                           f32["beta"], f32["M0"], f32["I0"], 0.7, dy.float(),
                                                           round_tf32=True, subtract=subtract)
        errors[subtract] = max(((got.double() - want[name]).norm() / want[name].norm()).item()
                               for name, got in {**grads, "M0": d_m0, "I0": d_i0}.items())
    assert errors[6.0] < min(1e-3, 1.05 * errors[None]), errors
    if case == "gpu mix":
        assert errors[20.0] > 1e-2, errors


def _corrections_case(seed: int, tokens: int = 40, p: int = 6, n: int = 8, prior: float = 0.7):
    """One chunk of one head in float64 (a third of the log decays near 0, the rest down to -10, gains up to 10),
    its first state and an entering adjoint, and the corrections by their definition: the states walked token by
    token, ``dlog_decay_t = a_t A_t (<dM_in, M_{t-1}> + <dI_in, I_{t-1} - I_prior>)``."""
    gen = torch.Generator().manual_seed(seed)
    f64 = {"dtype": torch.float64}
    v, beta = torch.randn(tokens, p, generator=gen, **f64), 10 * torch.rand(tokens, p, generator=gen, **f64)
    k = torch.randn(tokens, n, generator=gen, **f64)
    g = -10 * torch.rand(tokens, generator=gen, **f64)
    g = torch.where(torch.rand(tokens, generator=gen, **f64) < 0.3, -1e-4 * torch.ones_like(g), g)
    m, i = torch.randn(p, n, generator=gen, **f64), 0.5 + torch.rand(p, n, generator=gen, **f64)
    dm_e, di_e = torch.randn(p, n, generator=gen, **f64), torch.randn(p, n, generator=gen, **f64)
    inputs = (v, k, g, beta, m, i, dm_e, di_e, prior)
    after = torch.stack([g[t + 1:].sum() for t in range(tokens)]).exp()  # A_t, each sum over its own tokens
    want = {"dv": after[:, None] * (k @ dm_e.T), "dbeta": after[:, None] * ((k * k) @ di_e.T),
            "dk": after[:, None] * (v @ dm_e + 2 * k * (beta @ di_e))}
    dg, mt, jt = [], m, i - prior
    for t in range(tokens):
        dg.append(g[t].exp() * after[t] * ((dm_e * mt).sum() + (di_e * jt).sum()))
        mt = g[t].exp() * mt + v[t, :, None] * k[t]
        jt = g[t].exp() * jt + beta[t, :, None] * k[t] ** 2
    want["dlog_decay"] = torch.stack(dg)
    return inputs, want


def test_the_cuda_corrections_form_gives_the_corrections_by_their_definition():
    """The CUDA corrections' form (``emulation.corrections_chunk``: decays after each token from suffix sums, the
    decay gradient as a prefix sum of ``A_r (v_r . dM_in k_r + beta_r . dI_in k_r^2)`` from the chunk's first state)
    equals the corrections by their definition, with decays down to e^-10 a token, in float64 and with leading dims.
    In float32 it stays within 1e-5. With the products' operands rounded to TF32 (the kernel's tensor cores)
    ``dv``, ``dbeta`` and ``dk`` stay within 1e-3, the GPU check's tolerance for TF32, and every output departs from
    float32 rounding alone (so the rounding is emulated); the decay gradient's correction, whose terms ``v . dM_in k +
    beta . dI_in k^2`` cancel to a small part of their size here, within 3e-2 (1.5e-2 at this seed; the Triton
    corrections' TF32 products round the same terms; on a GPU the corrected decay gradients of the float32 cases stay
    within 6.2e-4 of float64, docs/bench/cuda-correct-2026-11-29)."""
    inputs, want = _corrections_case(0)
    names = ("dv", "dbeta", "dk", "dlog_decay")
    got = emulation.corrections_chunk(*inputs)
    for name, g in zip(names, got, strict=True):
        assert_close(g, want[name], F64_TOL, name)
    batched = emulation.corrections_chunk(*[t[None, None].expand(2, 3, *t.shape) for t in inputs[:-1]], inputs[-1])
    for g, b in zip(got, batched, strict=True):
        assert b.shape[:2] == (2, 3) and torch.allclose(b[1, 2], g, rtol=1e-12, atol=0)
    f32 = [t.float() for t in inputs[:-1]]
    errors = {}
    for rounded in (False, True):
        got = emulation.corrections_chunk(*f32, inputs[-1], round_tf32=rounded)
        errors[rounded] = {name: ((g.double() - want[name]).norm() / want[name].norm()).item()
                           for name, g in zip(names, got, strict=True)}
    assert max(errors[False].values()) < 1e-5, errors[False]
    assert min(errors[True].values()) > 1e-5, errors[True]
    assert max(errors[True][name] for name in names[:3]) < 1e-3 and errors[True]["dlog_decay"] < 3e-2, errors[True]


def test_the_decay_gradient_summed_from_the_chunks_end_is_exact_but_not_in_float32():
    """The decay gradient as a sum from the chunk's end (``cuda_local_chunk(decay_sum=True)``: one product an element
    and token fewer in the reverse step) equals the reference's in float64, but its running sum cancels: in float32
    over 256 tokens with the GPU check's decays and TF32 products it misses the check's 1e-3, where the token's own
    state (the kernel's form) stays within it. So the kernel keeps its form."""
    x, dy, want = _local_case(40, 37, 12.0, 0.7)
    grads, _, _, _ = emulation.cuda_local_chunk(x["v"], x["k"], x["q"], x["log_decay"], x["beta"], x["M0"], x["I0"],
                                                0.7, dy, decay_sum=True)
    assert torch.allclose(grads["log_decay"], want["log_decay"], rtol=1e-10,
                          atol=1e-10 * want["log_decay"].abs().max().item())
    f32, dy, want = _gpu_mix_case(256)
    errors = {}
    for decay_sum in (False, True):
        grads, _, _, _ = emulation.cuda_local_chunk(f32["v"], f32["k"], f32["q"], f32["log_decay"], f32["beta"],
                                                    f32["M0"], f32["I0"], 0.7, dy.float(), round_tf32=True,
                                                    decay_sum=decay_sum)
        errors[decay_sum] = ((grads["log_decay"].double() - want["log_decay"]).norm()
                             / want["log_decay"].norm()).item()
    assert errors[False] < 1e-3 < errors[True], errors


def test_tf32_rounds_ties_away_from_zero():
    """``emulation.tf32`` keeps 10 bits of mantissa and rounds ties away from zero, as ``cvt.rna.tf32.f32``."""
    x = torch.tensor([1.0, 1 + 2 ** -11, 1 + 2 ** -12, -(1 + 2 ** -11), 1 + 3 * 2 ** -12, 3.0], dtype=torch.float32)
    assert emulation.tf32(x).tolist() == [1.0, 1 + 2 ** -10, 1.0, -(1 + 2 ** -10), 1 + 2 ** -10, 3.0]


def _local_case_with(x: dict, dy, prior: float):
    """The reference gradients of ``sum(y * dy)`` for one head's given inputs (as ``_local_case``'s)."""
    leaves = {name: (t[None, :, None] if name not in ("M0", "I0") else t[None, None]).clone().requires_grad_(True)
              for name, t in x.items()}
    y, _, _ = palimpsa_scan(leaves["v"], leaves["k"], leaves["q"], leaves["log_decay"], leaves["beta"],
                            importance_prior=prior, initial_state=(leaves["M0"], leaves["I0"]), backend="torch")
    (y * dy[None, :, None]).sum().backward()
    return x, dy, {name: t.grad[0, :, 0] if name not in ("M0", "I0") else t.grad[0, 0] for name, t in leaves.items()}
