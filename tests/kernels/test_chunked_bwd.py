"""The chunk-parallel backward (``palimpsa.kernels.chunked_bwd``) under ``TRITON_INTERPRET=1`` on the CPU.

Its three launches (local reverse per chunk, the scan of the chunks' adjoints, the affine corrections) against the
sequential reference in float64, at tiny shapes with small chunks (``CT = 8``, ``BS = 4``) so that chunks, splits,
sub-blocks of the corrections, channel blocks and odd tails all occur; and its kernels compiled for sm_90a with
no spills at the training launch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

triton = pytest.importorskip("triton")
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("Triton kernels need a GPU or TRITON_INTERPRET=1", allow_module_level=True)

from palimpsa.kernels import chunked_bwd, fused_recurrent, palimpsa_scan  # noqa: E402
from scan_inputs import make_inputs  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
F64_TOL = 1e-10
SMALL = {"chunk_size": 8, "block_size": 4}
FWD = {"BV": 4, "TRANS": False, "num_warps": 1}


@pytest.fixture(autouse=True)
def _poison_outputs(monkeypatch):
    monkeypatch.setattr(fused_recurrent, "POISON_OUTPUTS", True)


def inputs_for(batch, length, groups, **options) -> dict:
    return make_inputs(batch, length, 4, groups, 8, 16, requires_grad=True, device=DEVICE, **options)


def gradients(inputs: dict, backend: str, *, importance_prior=0.7, cu_seqlens=None, final_state=True,
              uncertainty=True, bwd_config=None, sizes=SMALL) -> list:
    """Every input gradient of a fixed random weighting of the outputs asked for."""
    state = None if inputs["M0"] is None else (inputs["M0"], inputs["I0"])
    args = (inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"])
    if backend == "naive":
        y, final, u = palimpsa_scan(*args, importance_prior=importance_prior, initial_state=state,
                                    output_final_state=final_state, output_uncertainty=uncertainty,
                                    cu_seqlens=cu_seqlens, backend="naive")
    else:
        y, final, u = fused_recurrent.fused_recurrent_palimpsa_scan(
            *args, importance_prior, state, final_state, uncertainty, cu_seqlens, fwd_config=FWD,
            bwd_config=bwd_config, **sizes)
    outputs = [y, *(final if final_state else ()), *([u] if uncertainty else [])]
    gen = torch.Generator().manual_seed(5)
    loss = sum((o * torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o)).sum() for o in outputs)
    leaves = [t for t in inputs.values() if t is not None and t.requires_grad]
    return list(torch.autograd.grad(loss, leaves))


def slot_shapes(monkeypatch, heads=4, head_dim=8, states=16) -> list:
    """Filled with the shape of every ``[n, H, P, N]`` state-sized output the chunked backward allocates: the
    adjoints between chunks (``lm``, ``li``), the final states' and initial states' gradients."""
    shapes = []
    output = fused_recurrent._output

    def recording(shape, dtype, device):
        if len(shape) == 4 and tuple(shape[1:]) == (heads, head_dim, states):
            shapes.append(tuple(shape))
        return output(shape, dtype, device)

    monkeypatch.setattr(chunked_bwd.fr, "_output", recording)
    return shapes


def check(inputs: dict, config: dict, tol=F64_TOL, **options) -> None:
    exact = {n: None if t is None else t.detach().double().requires_grad_(True) for n, t in inputs.items()}
    want = gradients(exact, "naive", **{k: v for k, v in options.items() if k != "sizes"})
    got = gradients(inputs, "triton", bwd_config={"kernel": "chunked", **config}, **options)
    names = [n for n, t in inputs.items() if t is not None]
    assert len(want) == len(got) == len(names)
    for name, w, g in zip(names, want, got, strict=True):
        assert not g.isnan().any(), f"{name}: unwritten (NaN) elements"
        err = ((g.double() - w).abs().max() / w.abs().max().clamp_min(1e-30)).item()
        assert err < tol, f"{name}: relative error {err:.2e} >= {tol}"


@pytest.mark.parametrize(
    "length, groups, with_beta, with_state, config",
    [
        (29, 2, True, True, {"NSPLIT": 2, "BT": 4}),  # chunks shared by two splits, corrections in sub-blocks
        (21, 1, False, True, {"NSPLIT": 3, "BV": 2, "BP": 4}),  # no beta, channel blocks in both kernels
        (16, 4, True, False, {"NSPLIT": 0}),  # whole chunks only, no state in or out of the scan
        (13, 2, True, True, {"NSPLIT": 2, "PROGRAMS_PER_SM": 0}),  # a program (and a slab) per work item
        (8, 1, True, True, {"NSPLIT": 2}),  # one chunk per sequence: no adjoint between chunks, dM0 from dM_T
    ],
)
def test_matches_naive_every_gradient(length, groups, with_beta, with_state, config, monkeypatch):
    shapes = slot_shapes(monkeypatch)
    check(inputs_for(2, length, groups, with_beta=with_beta, with_state=with_state), config)
    if length == 29:
        # ``lm``, ``li``: a slot for every chunk but each sequence's last (whose adjoint is the final-state gradient;
        # the first chunk's local one goes to dM0's buffer): B = 2 sequences of 4 chunks, 6 slots (the checkpoints:
        # 8); the outputs of 2 are the final states, dM0 and dI0
        assert [s for s in shapes if s[0] != 2] == [(6, 4, 8, 16)] * 2


@pytest.mark.parametrize("final_state", [True, False])
def test_packed_sequences_with_states(final_state, monkeypatch):
    """Packed sequences of 10, 1, 16 and 13 tokens; without a final-state gradient their last chunks have no
    correction. The adjoints between chunks take a slot for every chunk but each sequence's last, as with
    sequences of one length: 2 + 1 + 2 + 2 chunks, 3 slots."""
    shapes = slot_shapes(monkeypatch)
    bounds = torch.tensor([0, 10, 11, 27, 40], dtype=torch.int32, device=DEVICE)
    check(inputs_for(1, 40, 2, n_states=4), {"NSPLIT": 2, "BT": 4}, cu_seqlens=bounds, final_state=final_state)
    assert [s for s in shapes if s[0] != 4] == [(3, 4, 8, 16)] * 2


@pytest.mark.parametrize("chain", [0, 1])
def test_float32_fast_decays_over_long_chunks(chain):
    """Log decays near -8 over 64-token chunks: the decay products of the corrections are exponentials of sums of
    log decays over the tokens they span; a difference of two running sums (~ -500 here) would lose ~3e-5. With
    the reverse step's sums in trees and as FFMA chains (``CHAIN``, the GPU's default)."""
    inputs = make_inputs(1, 128, 2, 1, 8, 16, dtype=torch.float32, requires_grad=True, device=DEVICE, seed=3)
    check(inputs, {"NSPLIT": 2, "CHAIN": chain}, tol=1e-5, sizes={"chunk_size": 64, "block_size": 8})


@pytest.mark.parametrize("length, with_beta, config", [
    (29, True, {"NSPLIT": 2, "GROUP": 4}),  # quads: a walk to a block's second quad, a last block ending mid-quad
    (22, False, {"NSPLIT": 2, "GROUP": 4}),  # quads without beta
    (22, True, {"NSPLIT": 2, "GAUGE": True}),  # pairs with the decay gradient from the own state
    (22, True, {"NSPLIT": 2, "CHAIN": 1}),  # pairs with the sums as FFMA chains (on a GPU the default)
    (21, False, {"NSPLIT": 2, "CHAIN": 1}),
])
def test_recompute_and_reduction_options(length, with_beta, config):
    """Blocks of 8 tokens in chunks of 16, so that a quad walks from the block start."""
    check(inputs_for(1, length, 2, with_beta=with_beta), config, sizes={"chunk_size": 16, "block_size": 8})


@pytest.mark.parametrize("early", [0, 2])
def test_corrections_read_the_local_gradients_late_or_a_sub_block_ahead(early):
    """``correct_early``: the corrections add to the local ``dv``, ``dbeta`` loaded at a sub-block's start (1, the
    default, every other test), after its products (0) or one sub-block ahead (2); chunks of two sub-blocks, the
    last one cut short."""
    check(inputs_for(2, 29, 2), {"NSPLIT": 2, "BT": 4, "correct_early": early})


def test_quads_over_fast_decays_in_float32():
    """The decay gradient from the token's own state subtracts ``v . dv`` and ``beta . dbeta`` from inner products
    with the state: near log decays of -8 it still holds float32's tolerance."""
    inputs = make_inputs(1, 64, 2, 1, 8, 16, dtype=torch.float32, requires_grad=True, device=DEVICE, seed=3)
    check(inputs, {"NSPLIT": 2, "GROUP": 4}, tol=1e-5, sizes={"chunk_size": 32, "block_size": 8})


def test_rescaled_pass_a_is_exact_wherever_it_runs(monkeypatch):
    """``RESCALE`` (on by default): pass A in rescaled states over every block whose decays allow it. In float64
    with every block rescaled, fast decays included (a threshold no block passes), and with none (a negative one),
    the gradients are the reference's."""
    for tau in (1e9, -1.0):
        monkeypatch.setattr(fused_recurrent, "RESCALE_TAU", triton.language.constexpr(tau))
        check(inputs_for(1, 22, 2), {"NSPLIT": 2, "CHAIN": 1}, sizes={"chunk_size": 16, "block_size": 4})


def test_rescaled_pass_a_runs_where_the_decays_allow_and_holds_float32():
    """Float32 with log decays near -8 in a fifth of the tokens: blocks of 8 tokens both within the threshold
    (rescaled) and past it (plain). The rescaled blocks change the rounding (so they ran), and the gradients hold
    float32's tolerance against float64."""
    inputs = make_inputs(1, 32, 2, 1, 8, 16, dtype=torch.float32, requires_grad=True, device=DEVICE, seed=3)
    sizes = {"chunk_size": 16, "block_size": 8}
    sums = inputs["log_decay"].detach().abs().reshape(1, 4, 8, 2).sum(2)
    tau = fused_recurrent.RESCALE_TAU.value
    assert (sums <= tau).any() and (sums > tau).any()
    config = {"kernel": "chunked", "NSPLIT": 2, "CHAIN": 1}
    plain = gradients(inputs, "triton", bwd_config={**config, "RESCALE": False}, sizes=sizes)
    rescaled = gradients(inputs, "triton", bwd_config=config, sizes=sizes)
    assert any(not torch.equal(p, r) for p, r in zip(plain, rescaled, strict=True))
    check(inputs, {"NSPLIT": 2, "CHAIN": 1}, tol=1e-5, sizes=sizes)


def test_float32_keys_and_queries_change_nothing_but_what_the_walks_load(monkeypatch):
    """``KQ32`` (on by default in the chunk walk and both backwards): the launches read float32 copies of bf16 keys
    and queries, which are exact, so outputs and gradients are those of the bf16 reads bit for bit; float32
    inputs are read as they are."""
    read = []
    float32_keys = fused_recurrent._float32_keys

    def recording(k, q, on):
        out = float32_keys(k, q, on)
        read.append((k.dtype, on, out[0].dtype, out[1].dtype))
        return out

    monkeypatch.setattr(fused_recurrent, "_float32_keys", recording)
    inputs = make_inputs(1, 32, 2, 1, 8, 16, dtype=torch.bfloat16, requires_grad=True, device=DEVICE, seed=3)
    sizes = {"chunk_size": 16, "block_size": 8}
    runs = []
    for on in (True, False):
        args = (inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"])
        y, _, u = fused_recurrent.fused_recurrent_palimpsa_scan(
            *args, 0.7, None, False, True, None, fwd_config={"kernel": "chunked", "walk_KQ32": int(on)},
            bwd_config={"kernel": "chunked", "NSPLIT": 2, "KQ32": on}, **sizes)
        loss = (y.float() * torch.linspace(-1, 1, y.shape[-1])).sum() + u.float().sum()
        runs.append([y, u, *torch.autograd.grad(loss, args)])
    bf16, f32 = torch.bfloat16, torch.float32
    # the chunk walk, then the local pass, with the copies; then both without
    assert read == [(bf16, True, f32, f32)] * 2 + [(bf16, False, bf16, bf16)] * 2
    for with_copies, without in zip(*runs, strict=True):
        assert torch.equal(with_copies, without)
    k32 = inputs["k"].detach().float()
    assert fused_recurrent._float32_keys(k32, k32, True)[0] is k32


def test_only_some_outputs_carry_gradients():
    """No final-state gradient and no ``du``: the carry starts from zero and the local kernel skips ``du``."""
    check(inputs_for(2, 21, 2), {"NSPLIT": 2}, final_state=False, uncertainty=False)


def test_the_environment_switches_the_default_backward(monkeypatch):
    calls = []
    real = chunked_bwd.chunked_backward

    def spy(*args, **kwargs):
        calls.append(args[-3])
        return real(*args, **kwargs)

    monkeypatch.setattr(chunked_bwd, "chunked_backward", spy)
    inputs = inputs_for(1, 12, 1)
    args = (inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], 1.0, None, False, False)
    monkeypatch.setenv(fused_recurrent.BACKWARD_ENV, "chunked")
    y, _, _ = fused_recurrent.fused_recurrent_palimpsa_scan(*args, **SMALL)
    y.sum().backward()
    assert calls == [{"kernel": "chunked"}]
    monkeypatch.setenv(fused_recurrent.BACKWARD_ENV, "sequential")
    y, _, _ = fused_recurrent.fused_recurrent_palimpsa_scan(*args, **SMALL)
    y.sum().backward()
    assert len(calls) == 1
    monkeypatch.setenv(fused_recurrent.BACKWARD_ENV, "auto")  # the default: sequential off CUDA
    y, _, _ = fused_recurrent.fused_recurrent_palimpsa_scan(*args, **SMALL)
    y.sum().backward()
    assert len(calls) == 1
    monkeypatch.setenv(fused_recurrent.BACKWARD_ENV, "parallel")
    with pytest.raises(ValueError, match="PALIMPSA_TRITON_BACKWARD must be one of auto, sequential, chunked"):
        fused_recurrent.fused_recurrent_palimpsa_scan(*args, **SMALL)


def test_auto_takes_the_chunked_backward_where_its_corrections_run_in_tf32(monkeypatch):
    class Cuda:  # what chunked_by_default reads of a CUDA tensor
        is_cuda = True

        def __init__(self, dtype):
            self.dtype = dtype

    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "highest")
    found = [fused_recurrent.chunked_by_default(Cuda(d)) for d in (torch.bfloat16, torch.float16, torch.float32,
                                                                   torch.float64)]
    assert found == [True, True, False, False]
    assert not fused_recurrent.chunked_by_default(torch.zeros(1, dtype=torch.bfloat16))  # off CUDA
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    assert fused_recurrent.chunked_by_default(Cuda(torch.float32))


def test_splits_fill_the_waves_and_stop_at_the_chunks():
    cpu = torch.device("cpu")
    assert chunked_bwd._splits({"NSPLIT": 8}, 100, 5, cpu) == 5
    assert chunked_bwd._splits({"NSPLIT": 3}, 100, 5, cpu) == 3
    # one SM on the CPU: WAVES x 8 programs wanted
    assert chunked_bwd._splits({"NSPLIT": 0}, 4, 100, cpu) == chunked_bwd.WAVES * 8 // 4
    assert chunked_bwd._splits({"NSPLIT": 0}, 10_000, 100, cpu) == 1


def test_splits_on_a_gpu_cost_the_fewest_chunk_walks_a_program(monkeypatch):
    """2.7b shapes on a 132-SM GPU: 1,280 work items a split (16 channel blocks x 80 heads). Splitting starts at
    the least split count giving WAVES waves (4); from there the cost is rounds over the resident programs times
    the chunks an item walks."""
    gpu = torch.device("cuda")  # only its type is read: _sm_count is faked
    monkeypatch.setattr(chunked_bwd.fr, "_sm_count", lambda device: 132)
    eight, twelve = {"NSPLIT": 0, "PROGRAMS_PER_SM": 8}, {"NSPLIT": 0, "PROGRAMS_PER_SM": 12}
    # L = 8192 (16 chunks), 8 an SM: 4, 8 and 16 splits all cost 20 chunk walks (5 x 4, 10 x 2, 20 x 1): 4 stays
    assert chunked_bwd._splits(eight, 1280, 16, gpu) == 4
    # L = 16384 (32 chunks): 39 rounds of one chunk beat 5 rounds of 8 (40)
    assert chunked_bwd._splits(eight, 1280, 32, gpu) == 32
    # 12 an SM (1,584 programs), L = 8192: 13 rounds of one chunk against 7 of two (14) and 4 of four (16)
    assert chunked_bwd._splits(twelve, 1280, 16, gpu) == 16
    # a full grid without splits: B = 4 gives 5,120 items, WAVES waves already
    assert chunked_bwd._splits(eight, 4 * 1280, 16, gpu) == 1
    # L = 2048 (4 chunks): the least count, 4, is all the chunks; with 2 chunks it is capped at 2
    assert chunked_bwd._splits(eight, 1280, 4, gpu) == 4
    assert chunked_bwd._splits(eight, 1280, 2, gpu) == 2
    # a set NSPLIT is kept, capped at the chunks
    assert chunked_bwd._splits({**eight, "NSPLIT": 2}, 1280, 32, gpu) == 2
    assert chunked_bwd._splits({**eight, "NSPLIT": 8}, 1280, 4, gpu) == 4
    # where the Gluon pass can walk whole sequences, one split is a candidate against the splits' walks plus their
    # carry and corrections (CORRECTIONS of the walks): B = 3 (3,840 items a split), L = 8192: 4 rounds of 16 chunks
    # (64) against 16 splits' 59 rounds of one chunk + 7.0
    assert chunked_bwd.CORRECTIONS == 0.12

    def whole(config, items, chunks):  # whole walks at the config's programs an SM
        return chunked_bwd._whole_cost(config, {}, items, chunks, gpu)

    assert chunked_bwd._splits(eight, 3 * 1280, 16, gpu) == 16
    assert chunked_bwd._splits(eight, 3 * 1280, 16, gpu, whole(eight, 3 * 1280, 16)) == 1
    # but not where it costs more: B = 2 (3 rounds of 16, 48, against 39 + 4.7), B = 1 (2 of 16 against 5 of 4 +
    # 2.3), B = 2 at L = 2048 (3 rounds of 4 against 5 of 2 + 1.2)
    assert chunked_bwd._splits(eight, 2 * 1280, 16, gpu, whole(eight, 2 * 1280, 16)) == 16
    assert chunked_bwd._splits(eight, 1280, 16, gpu, whole(eight, 1280, 16)) == 4
    assert chunked_bwd._splits(eight, 2 * 1280, 4, gpu, whole(eight, 2 * 1280, 4)) == 2
    # nor over a set NSPLIT
    assert chunked_bwd._splits({**eight, "NSPLIT": 2}, 3 * 1280, 16, gpu, whole(eight, 3 * 1280, 16)) == 2


def test_the_split_choice_counts_whole_walks_at_the_occupancy_preset_and_float32_corrections(monkeypatch):
    """Whole walks that would take the 12-an-SM preset (B = 1 at 2.7b shapes) are costed there (``_whole_cost``: 24
    rounds' worth at 8 an SM, times PRESET_SPEED), and float32 inputs' carry and corrections cost more
    (CORRECTIONS_FLOAT32): at B = 1, L = 8192 bf16 keeps 4 splits (20 + 2.3 against 22.8; measured 14.82 ms both ways)
    and float32 walks whole (20 + 3.5; 14.34 against 15.09, docs/bench/start-ahead-2026-11-28)."""
    gpu = torch.device("cuda")
    monkeypatch.setattr(chunked_bwd.fr, "_sm_count", lambda device: 132)
    monkeypatch.delenv(chunked_bwd.PROGRAMS_ENV, raising=False)
    config = {**chunked_bwd._SHIPPED, "NSPLIT": 0}
    preset = chunked_bwd._whole_preset(config, {})
    assert preset == chunked_bwd.OCCUPANCY[12]
    cost = chunked_bwd._whole_cost(config, preset, 1280, 16, gpu)
    assert cost == pytest.approx(16 * 12 / 8 * chunked_bwd.PRESET_SPEED)
    assert chunked_bwd._whole_cost(config, {}, 1280, 16, gpu) == 32  # at 8 an SM: two rounds of 16 chunks
    # at B = 2 the preset needs as many program-rounds (2 of 16 at 12 against 3 at 8): whole walks stay at 8
    assert chunked_bwd._whole_cost(config, preset, 2 * 1280, 16, gpu) == 48
    f32 = chunked_bwd.CORRECTIONS_FLOAT32
    assert chunked_bwd._splits(config, 1280, 16, gpu, cost) == 4
    assert chunked_bwd._splits(config, 1280, 16, gpu, cost, f32) == 1
    # L = 2048: 5 rounds of one chunk + 0.87 against 5.7 in float32, + 0.58 in bf16
    short = chunked_bwd._whole_cost(config, preset, 1280, 4, gpu)
    assert chunked_bwd._splits(config, 1280, 4, gpu, short) == 4
    assert chunked_bwd._splits(config, 1280, 4, gpu, short, f32) == 1
    # B = 2 (2,560 items a split): whole walks at 8 cost 48 against 16 splits' 39 + 7.0 in float32
    assert chunked_bwd._splits(config, 2 * 1280, 16, gpu, chunked_bwd._whole_cost(config, preset, 2 * 1280, 16, gpu),
                               f32) == 16


def record_scratch_slabs(monkeypatch) -> list:
    """The rows of every scratch slab (a 3-dimensional ``torch.empty``) ``chunked_bwd`` allocates from now on."""
    rows = []
    empty = torch.empty

    def recording(*shape, **kwargs):
        if len(shape) == 1 and isinstance(shape[0], tuple) and len(shape[0]) == 3:
            rows.append(shape[0][0])
        return empty(*shape, **kwargs)

    monkeypatch.setattr(chunked_bwd.torch, "empty", recording)
    return rows


def test_the_backward_costs_its_split_choice_with_its_input_types_corrections(monkeypatch):
    """``chunked_backward``'s own call into ``_splits``: the corrections' share of its input type (16-bit inputs
    ``CORRECTIONS``, float32 ``CORRECTIONS_FLOAT32``) and no whole-walk cost where the Gluon pass cannot run (here,
    off the GPU); the chunked launches then run (their scratch slabs are allocated)."""
    calls = []
    splits = chunked_bwd._splits

    def recording(config, per_split, max_chunks, device, whole=None, corrections=chunked_bwd.CORRECTIONS):
        nsplit = splits(config, per_split, max_chunks, device, whole, corrections)
        calls.append((whole, corrections, nsplit))
        return nsplit

    monkeypatch.setattr(chunked_bwd, "_splits", recording)
    scratch = record_scratch_slabs(monkeypatch)
    found = {}
    for dtype in (torch.bfloat16, torch.float32):
        calls.clear()
        inputs = make_inputs(1, 32, 2, 1, 8, 16, dtype=dtype, requires_grad=True, device=DEVICE, seed=4)
        # NSPLIT 4 keeps the chunked launches (0 would hand this small grid to the sequential kernel)
        gradients(inputs, "triton", bwd_config={"kernel": "chunked", "NSPLIT": 4}, uncertainty=False)
        found[dtype] = list(calls)
    assert found[torch.bfloat16] == [(None, chunked_bwd.CORRECTIONS, 4)]
    assert found[torch.float32] == [(None, chunked_bwd.CORRECTIONS_FLOAT32, 4)]
    assert chunked_bwd.CORRECTIONS_FLOAT32 > chunked_bwd.CORRECTIONS
    assert scratch  # the chunked launches ran (their scratch slabs were allocated)


def test_local_programs_are_the_resident_ones_and_keep_the_scratch_whatever_the_splits(monkeypatch):
    """The local pass's programs are persistent: at most as many as stay resident (8 per SM here one, on the CPU),
    and no more than their rounds of work items need, each taking work items in turn with one scratch slab, so
    once the resident programs are busy more splits add work items, not scratch."""
    cpu = torch.device("cpu")
    assert chunked_bwd._programs({"PROGRAMS_PER_SM": 8}, 100, cpu) == 8  # 13 rounds need 8 programs
    assert chunked_bwd._programs({"PROGRAMS_PER_SM": 8}, 5, cpu) == 5
    assert chunked_bwd._programs({"PROGRAMS_PER_SM": 8}, 10, cpu) == 5  # 2 rounds either way: 5 programs do
    assert chunked_bwd._programs({"PROGRAMS_PER_SM": 8}, 17, cpu) == 6  # 3 rounds
    assert chunked_bwd._programs({"PROGRAMS_PER_SM": 0}, 100, cpu) == 100
    slabs = record_scratch_slabs(monkeypatch)
    inputs = inputs_for(1, 32, 2)
    for nsplit in (1, 4):
        gradients(inputs, "triton", bwd_config={"kernel": "chunked", "NSPLIT": nsplit})
    # 8 programs (8 work items, then 32 in 4 rounds) x (CT / BS - 1) = 1 slab row (a chunk's first block starts at
    # its checkpoint), for M and I, at either split
    assert slabs == [8, 8, 8, 8]


def test_kernels_compile_for_sm90a_without_spills():
    """The training launches (beta, 2.7b shapes; bf16 inputs with TF32 corrections, float32 ones with IEEE
    corrections) fit the registers: the local kernel is the sequential backward's body (206 registers for one warp
    with four channels in bf16, 241 in float32 under Triton 3.9), the corrections' 16 x 32 x 128 TF32 tiles take
    180 with 4 warps, the 16 x 16 x 128 IEEE ones 240 with 8 (their FMA form spills with more channels or fewer
    warps)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("import json; from palimpsa.kernels import chunked_bwd as c; "
            "print(json.dumps({d: c.compile_kernels(dtype=d) for d in ('bf16', 'fp32')}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    usage = json.loads(run.stdout.strip().splitlines()[-1])
    for dtype, launches in usage.items():
        assert set(launches) == {"local", "carry", "correct"}
        for name, found in launches.items():
            assert found["stack"] == 0 and found["local"] == 0, (dtype, name, found)
            assert found["registers"] <= 255, (dtype, name, found)
        assert launches["local"]["registers"] >= 160, launches  # four channels' states live in registers
        # the next block's inputs prefetched into L1: keys, values, gains, decays in pass A; queries and output
        # gradients too in pass B
        assert launches["local"]["prefetches"] == 10, launches
        assert launches["correct"]["prefetches"] == 0, launches


def test_a_pairs_sums_take_one_butterfly_each():
    """``PAIRSUM`` (on by default on a GPU): ``dv`` and ``dbeta`` of a pair's two tokens are reduced over the lanes
    by one butterfly (24 shuffles) instead of one 5-level reduction per channel, token and gradient (80 with four
    channels); with ``CHAIN`` (on by default) the pair's decay gradients share one as well (5 shuffles instead of
    2 x 5). The kernel's PTX for sm_90a with each, and the lanes' layout of every tensor the butterflies shuffle."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("import json; from palimpsa.kernels import chunked_bwd as c; print(json.dumps([c.compile_kernels("
            "config={'PAIRSUM': p, 'CHAIN': h})['local'] for p, h in ((False, False), (True, False), (True, True), "
            "(False, True))]))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    plain, pairs, chained, chained_alone = json.loads(run.stdout.strip().splitlines()[-1])
    assert [r["shuffles"] for r in (plain, pairs, chained, chained_alone)] == [80 + 10, 24 + 10, 24 + 5, 80 + 10]
    # no spill, and still eight one-warp programs an SM (Triton 3.9: 225, 223, 236 registers)
    for r in (plain, pairs, chained, chained_alone):
        assert r["stack"] == 0 and r["registers"] <= 255, r
    # the butterflies' lane arithmetic holds: lane l holds index l of the last axis of what they shuffle, the
    # [BV, 32] lane partials of dv, dbeta (a slice of the tile's layout, or its own after CHAIN's splits) and the
    # [32] ones of the decay gradient
    rows, scalars = str([[0, 1 << b] for b in range(5)]), str([[1 << b] for b in range(5)])
    assert plain["butterfly_lanes"] == [] and pairs["butterfly_lanes"] == [rows], pairs
    assert sorted(chained["butterfly_lanes"]) == sorted([rows, scalars]), chained
    assert chunked_bwd.CHUNKED_CONFIG["PAIRSUM"] and fused_recurrent._pair_sums(
        torch.empty(1), None, {}, 128) is False  # off the GPU (the interpreter cannot run inline PTX)


def test_lane_bases_read_blocked_sliced_and_linear_layouts():
    ttgir = ("#blocked = #ttg.blocked<{sizePerThread = [1, 4, 1], threadsPerWarp = [2, 16, 1], "
             "warpsPerCTA = [1, 1, 1], order = [1, 2, 0]}>\n"
             "#linear = #ttg.linear<{register = [], lane = [[1], [2], [4], [8], [16]], "
             "warp = [], block = []}>\n")
    assert chunked_bwd.lane_bases(ttgir, "tensor<4x32xf32, #ttg.slice<{dim = 2, parent = #blocked}>>") == [
        [0, 4], [0, 8], [0, 16], [0, 32], [1, 0]]  # lanes over the states, then one bit over the channels
    assert chunked_bwd.lane_bases(ttgir, "tensor<32xf32, #linear>") == [[1], [2], [4], [8], [16]]


def test_chains_run_where_their_splits_fit():
    """``CHAIN`` splits a tile's 4 channels and each 4 consecutive states: one-warp programs of 4 channels, pairs
    without ``GAUGE`` or ``TRANS``. By default on a GPU, at 128 states; it needs no GPU, and the CPU tests that
    check it ask for it (``CHAIN: 1``), since under the interpreter it costs a third more time."""
    assert fused_recurrent._chains(chunked_bwd.CHUNKED_CONFIG, 4, 128, gpu=True)
    assert not fused_recurrent._chains(chunked_bwd.CHUNKED_CONFIG, 4, 16, gpu=False)
    assert fused_recurrent._chains({"CHAIN": 1}, 4, 16, gpu=False)
    for block_k in (64, 256):  # on a GPU at 128 states only (what was measured)
        assert not fused_recurrent._chains({}, 4, block_k, gpu=True)
        assert fused_recurrent._chains({"CHAIN": 1}, 4, block_k, gpu=False)
    for config, block_v in (({"CHAIN": False}, 4), ({}, 2), ({}, 8), ({"TRANS": True}, 4), ({"num_warps": 2}, 4),
                            ({"GROUP": 4}, 4), ({"GAUGE": True}, 4)):
        assert not fused_recurrent._chains(config, block_v, 128, gpu=True), config


def test_pair_sums_run_only_where_their_layout_was_checked(monkeypatch):
    """At 64 or 256 states Triton spreads the lanes over the channels as well, and the butterflies would mix
    channels: the pair sums run at 128 states only, on a GPU, with the tiling they assume."""
    on_gpu = torch.empty(1)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.delenv("TRITON_INTERPRET")
    assert fused_recurrent._pair_sums(on_gpu, None, {}, 128)
    assert fused_recurrent._pair_sums(on_gpu, on_gpu.clone(), chunked_bwd.CHUNKED_CONFIG, 128)
    for block_k in (32, 64, 256):
        assert not fused_recurrent._pair_sums(on_gpu, None, {}, block_k)
    for config in ({"PAIRSUM": False}, {"TRANS": True}, {"num_warps": 2}, {"GROUP": 4}, {"GAUGE": True}):
        assert not fused_recurrent._pair_sums(on_gpu, None, config, 128), config
    assert not fused_recurrent._pair_sums(on_gpu.double(), None, {}, 128)  # float64 states
    assert not fused_recurrent._pair_sums(on_gpu, on_gpu.half(), {}, 128)  # dv and dbeta of two dtypes


def test_corrections_use_tf32_only_where_the_inputs_or_pytorch_allow_it():
    precision = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert [chunked_bwd._dot_precision("auto", d) for d in (torch.bfloat16, torch.float16, torch.float32,
                                                                 torch.float64)] == ["tf32", "tf32", "ieee", "ieee"]
        torch.set_float32_matmul_precision("high")
        assert chunked_bwd._dot_precision("auto", torch.float32) == "tf32"
        assert chunked_bwd._dot_precision("auto", torch.float64) == "ieee"
        assert chunked_bwd._dot_precision("tf32x3", torch.float32) == "tf32x3"
        assert chunked_bwd._dot_precision("auto", torch.float32, "tf32x3") == "tf32"  # TF32 allowed
        torch.set_float32_matmul_precision("highest")
        # the chunked forward's full-precision products (chunked_fwd.FULL_PRECISION_DOT); float64 keeps IEEE
        assert chunked_bwd._dot_precision("auto", torch.float32, "tf32x3") == "tf32x3"
        assert chunked_bwd._dot_precision("auto", torch.float64, "tf32x3") == "ieee"
        assert (chunked_bwd._block_p("tf32x3"), chunked_bwd._correct_warps("tf32x3")) == (16, 8)
    finally:
        torch.set_float32_matmul_precision(precision)


def test_a_full_grid_without_splits_runs_the_sequential_kernel(monkeypatch):
    """Where the grid fills the GPU unsplit (auto NSPLIT of 1), the chunk-parallel launches would only add work:
    the sequential kernel runs, with its own configuration."""
    seen = []
    real = fused_recurrent._backward
    monkeypatch.setattr(fused_recurrent, "_backward", lambda *args: seen.append(args[-3]) or real(*args))
    monkeypatch.setattr(chunked_bwd, "WAVES", 0)
    check(inputs_for(1, 12, 1), {"NSPLIT": 0})
    assert seen == [{"kernel": "chunked", "NSPLIT": 0}, fused_recurrent.BWD_CONFIG]


def test_the_gluon_pass_program_time_weighs_rounds_by_the_programs_an_sm(monkeypatch):
    """2.7b shapes on 132 SMs (1,280 work items a split): 12 programs an SM cost no more than 8 at L = 8192 (13
    rounds of one chunk x 12 against 20 x 8) and L = 16384 (26 x 12 against 39 x 8, a tie), more at L = 2048 (4
    rounds x 12 against 5 x 8), which is where the preset measured slower (call 15: 4.22 ms against 3.77)."""
    gpu = torch.device("cuda")
    monkeypatch.setattr(chunked_bwd.fr, "_sm_count", lambda device: 132)
    eight = {"NSPLIT": 0, "PROGRAMS_PER_SM": 8, "LOCAL_PROGRAMS_PER_SM": 0}
    twelve = {**eight, "LOCAL_PROGRAMS_PER_SM": 12}
    assert [chunked_bwd._program_time(c, 1280, 16, gpu) for c in (eight, twelve)] == [160, 156]
    assert [chunked_bwd._program_time(c, 1280, 32, gpu) for c in (eight, twelve)] == [312, 312]
    assert [chunked_bwd._program_time(c, 1280, 4, gpu) for c in (eight, twelve)] == [40, 48]
    assert chunked_bwd._program_time(eight, 4 * 1280, 16, gpu) == float("inf")  # B = 4: the sequential kernel
