"""The chunk-parallel forward (``palimpsa.kernels.chunked_fwd``) under ``TRITON_INTERPRET=1`` on the CPU.

Its three launches (local end states by matrix products, the scan of the chunks' states into the checkpoints, the
per-chunk walk) against the sequential reference in float64 at tiny shapes with small chunks (``CT = 8``), so that
chunks, sub-blocks of the local pass, channel blocks, packed sequences of unequal lengths and odd tails all occur;
its checkpoints against the sequential forward's (the backward runs on them); gradients through it; the dispatch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

triton = pytest.importorskip("triton")
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("Triton kernels need a GPU or TRITON_INTERPRET=1", allow_module_level=True)

from palimpsa.kernels import chunked_fwd, fused_recurrent, palimpsa_scan  # noqa: E402
from scan_inputs import assert_close, make_inputs  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
F64_TOL = 1e-10
SMALL = {"chunk_size": 8, "block_size": 4}


@pytest.fixture(autouse=True)
def _poison_outputs(monkeypatch):
    monkeypatch.setattr(fused_recurrent, "POISON_OUTPUTS", True)


def inputs_for(batch, length, groups, **options) -> dict:
    return make_inputs(batch, length, 4, groups, 8, 16, device=DEVICE, **options)


def forward(inputs: dict, config: dict | None, *, cu_seqlens=None, importance_prior=0.7, sizes=SMALL,
            store_checkpoints=True):
    """``y, M_T, I_T, u, ck_m, ck_i`` of the Triton forward: chunked with ``config``, sequential with None."""
    fwd_config = {"BV": 4, "TRANS": False, "num_warps": 1} if config is None else {"kernel": "chunked", **config}
    return fused_recurrent._forward(
        inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], inputs["M0"], inputs["I0"],
        importance_prior, cu_seqlens, True, True, store_checkpoints, fwd_config, sizes["chunk_size"])


def check(inputs: dict, config: dict, tol=F64_TOL, cu_seqlens=None, **options) -> None:
    state = None if inputs["M0"] is None else (inputs["M0"], inputs["I0"])
    args = (inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"])
    want_y, (want_m, want_i), want_u = palimpsa_scan(
        *(t.double() for t in args[:4]), None if args[4] is None else args[4].double(), importance_prior=0.7,
        initial_state=None if state is None else tuple(None if s is None else s.double() for s in state),
        output_final_state=True, output_uncertainty=True, cu_seqlens=cu_seqlens, backend="naive")
    y, m_t, i_t, u, ck_m, ck_i = forward(inputs, config, cu_seqlens=cu_seqlens, **options)
    for name, got, want in (("y", y, want_y), ("M_T", m_t, want_m), ("I_T", i_t, want_i), ("u", u, want_u)):
        assert_close(got, want, tol, name)
    # the checkpoints are the sequential forward's, which the backward reads
    *_, seq_m, seq_i = forward(inputs, None, cu_seqlens=cu_seqlens, **options)
    assert_close(ck_m, seq_m, tol, "checkpoints M")
    assert_close(ck_i, seq_i, tol, "checkpoints I")


@pytest.mark.parametrize(
    "batch, length, groups, with_beta, with_state, config",
    [
        (2, 29, 2, True, True, {"BT": 4}),  # four chunks and a tail, local products in sub-blocks of 4 tokens
        (2, 29, 2, True, True, {"BT": 4, "SUFFIX": 0}),  # the local pass's sub-blocks first to last, carried
        (1, 29, 1, True, True, {"BT": 4, "BK": 8}),  # the local pass's states in two blocks
        (1, 29, 2, True, True, {"BP": 4, "BK": 8, "BT": 4}),  # its channels and its states in two blocks each
        # the walk in two channel blocks of two tokens an iteration (the default walk takes one)
        (1, 29, 1, True, True, {"walk_BV": 2, "walk_UNROLL": 2}),
        (1, 21, 1, False, True, {"BP": 4, "BT": 2}),  # no beta, channel blocks in the local pass
        (1, 16, 4, True, False, {}),  # whole chunks only, no state in or out
        (1, 8, 2, True, True, {"BT": 4}),  # one chunk: nothing to carry
        (2, 3, 2, True, True, {}),  # shorter than a chunk
    ],
)
def test_matches_naive(batch, length, groups, with_beta, with_state, config):
    check(inputs_for(batch, length, groups, with_beta=with_beta, with_state=with_state), config)


def test_packed_sequences_of_unequal_lengths():
    """10, 1, 16 and 13 tokens: the per-chunk grid covers the longest, the shorter sequences' extra programs walk
    nothing and write nothing (the outputs are NaN-poisoned)."""
    bounds = torch.tensor([0, 10, 11, 27, 40], dtype=torch.int32, device=DEVICE)
    check(inputs_for(1, 40, 2, n_states=4), {"BT": 4}, cu_seqlens=bounds)


def test_initial_memory_without_initial_importance():
    inputs = inputs_for(1, 19, 2)
    inputs["I0"] = None
    check(inputs, {"BT": 4})


@pytest.mark.parametrize("suffix", [1, 0])
def test_float32_fast_decays_over_long_chunks(suffix):
    """Log decays near -8 over 64-token chunks in float32 (IEEE products on the CPU): every decay product is the
    exponential of a sum over the tokens it spans, in both orders of the local pass (``SUFFIX`` 1: a token's weight
    underflows to 0 long before the chunk's end; 0: the carried state does)."""
    inputs = make_inputs(1, 130, 2, 1, 8, 16, dtype=torch.float32, device=DEVICE, seed=3)
    with torch.no_grad():
        inputs["log_decay"][:, :90] = -8.0 + 0.1 * inputs["log_decay"][:, :90]
    check(inputs, {"BT": 16, "SUFFIX": suffix}, tol=1e-5, sizes={"chunk_size": 64, "block_size": 8})


def test_without_checkpoints_returns_the_stub():
    inputs = inputs_for(1, 13, 2)
    y, *_, ck_m, ck_i = forward(inputs, {"BT": 4}, store_checkpoints=False)
    assert ck_m.numel() == ck_i.numel() == 1
    assert_close(y, forward(inputs, None)[0], F64_TOL, "y")


def test_gradients_flow_through_the_chunked_forward(monkeypatch):
    """The op with the chunked forward forced (chunks of 8 tokens): its checkpoints feed both backwards."""
    monkeypatch.setenv(fused_recurrent.FORWARD_ENV, "chunked")
    monkeypatch.setattr(fused_recurrent, "CHUNK_SIZE", 8)
    monkeypatch.setattr(fused_recurrent, "BLOCK_SIZE", 4)
    inputs = make_inputs(1, 20, 2, 1, 4, 16, requires_grad=True, device=DEVICE)
    leaves = [t for t in inputs.values() if t is not None]
    for backward in ("sequential", "chunked"):
        monkeypatch.setenv(fused_recurrent.BACKWARD_ENV, backward)
        grads = {}
        for name in ("triton", "naive"):
            y, (m_t, i_t), u = palimpsa_scan(inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"],
                                            inputs["beta"], importance_prior=0.7,
                                            initial_state=(inputs["M0"], inputs["I0"]), output_final_state=True,
                                            output_uncertainty=True, backend=name)
            loss = (y * y).sum() + m_t.sum() + (i_t * i_t).sum() + u.sum()
            grads[name] = torch.autograd.grad(loss, leaves)
        for got, want in zip(grads["triton"], grads["naive"], strict=True):
            assert_close(got, want, F64_TOL, backward)


def test_the_environment_and_auto_choose_the_forward(monkeypatch):
    calls = []
    real = chunked_fwd.chunked_forward

    def spy(*args, **kwargs):
        calls.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(chunked_fwd, "chunked_forward", spy)
    inputs = inputs_for(1, 20, 2)
    args = (inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], 0.7, None, False, False)
    monkeypatch.setenv(fused_recurrent.FORWARD_ENV, "chunked")
    fused_recurrent.fused_recurrent_palimpsa_scan(*args, **SMALL)
    assert calls == [True]
    monkeypatch.setenv(fused_recurrent.FORWARD_ENV, "sequential")
    fused_recurrent.fused_recurrent_palimpsa_scan(*args, **SMALL)
    assert calls == [True]
    monkeypatch.setenv(fused_recurrent.FORWARD_ENV, "auto")  # off the GPU auto never takes it
    fused_recurrent.fused_recurrent_palimpsa_scan(*args, **SMALL)
    assert calls == [True]
    monkeypatch.setenv(fused_recurrent.FORWARD_ENV, "fast")
    with pytest.raises(ValueError, match="PALIMPSA_TRITON_FORWARD must be one of"):
        fused_recurrent.fused_recurrent_palimpsa_scan(*args, **SMALL)


def test_auto_takes_it_where_the_sequential_grid_leaves_the_gpu_short(monkeypatch):
    """2.7b shapes on an H100 or H200 (132 SMs), one-warp programs of 8 channels: B = 1 (640 programs) to B = 32
    (20480: 155.2 an SM, the largest batch measured) take it, B = 33 does not; nor does a sequence of one chunk, nor
    the CPU."""
    monkeypatch.setattr(fused_recurrent, "_sm_count", lambda device: 132)
    cuda = torch.device("cuda")
    for batch in (1, 2, 4, 8, 16, 32):
        assert chunked_fwd.worth_it(batch, 80, 64, 8192, 512, 8, cuda)
    assert not chunked_fwd.worth_it(33, 80, 64, 8192, 512, 8, cuda)
    assert not chunked_fwd.worth_it(1, 80, 64, 512, 512, 8, cuda)
    assert not chunked_fwd.worth_it(1, 80, 64, 8192, 512, 8, torch.device("cpu"))


def test_auto_takes_it_for_16_bit_and_float32_inputs_with_tf32x3_products_at_full_precision(monkeypatch):
    """Float32 inputs at PyTorch's full float32 precision (the trainer's default) take the chunked forward too, its
    products in tf32x3 (``FULL_PRECISION_DOT``: 16 channels and 8 warps a local program, as IEEE's, which spill
    with 32 and 4); with TF32 allowed, TF32; float64 keeps IEEE and the sequential forward; ``DOT`` "ieee" still
    asks for IEEE products."""
    monkeypatch.setattr(fused_recurrent, "_sm_count", lambda device: 132)
    cuda = torch.device("cuda")

    def tensor(dtype, is_cuda=True):
        return SimpleNamespace(shape=(1, 8192, 80, 64), is_cuda=is_cuda, dtype=dtype, device=cuda)

    precision = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        for dtype in (torch.bfloat16, torch.float16, torch.float32):
            assert fused_recurrent.chunked_forward_by_default(tensor(dtype)), dtype
            assert fused_recurrent.default_forward_config(tensor(dtype), None, 512) == {"kernel": "chunked"}, dtype
        assert not fused_recurrent.chunked_forward_by_default(tensor(torch.float64))
        assert not fused_recurrent.chunked_forward_by_default(tensor(torch.float32, is_cuda=False))
        assert fused_recurrent.default_forward_config(tensor(torch.float64), None, 512).get("kernel") != "chunked"
        sizes = chunked_fwd._sizes(chunked_fwd.CHUNKED_FWD_CONFIG, torch.float32, 64, 128, 512, True)
        assert (sizes["DOT"], sizes["BP"], sizes["local_warps"]) == ("tf32x3", 16, 8)
        assert chunked_fwd._sizes(chunked_fwd.CHUNKED_FWD_CONFIG, torch.float64, 64, 128, 512, True)["DOT"] == "ieee"
        assert chunked_fwd._sizes({**chunked_fwd.CHUNKED_FWD_CONFIG, "DOT": "ieee"}, torch.float32, 64, 128, 512,
                                  True)["DOT"] == "ieee"
        torch.set_float32_matmul_precision("high")
        sizes = chunked_fwd._sizes(chunked_fwd.CHUNKED_FWD_CONFIG, torch.float32, 64, 128, 512, True)
        assert (sizes["DOT"], sizes["BP"], sizes["local_warps"]) == ("tf32", 32, 4)
    finally:
        torch.set_float32_matmul_precision(precision)


def test_kernels_compile_for_sm90a_without_spills():
    """The training launches (beta, 2.7b shapes; bf16 inputs with TF32 local products, float32 ones at PyTorch's
    default full precision with tf32x3 products, ``FULL_PRECISION_DOT``) fit the registers without spilling (Triton
    3.9: the local pass 166 / 126, the carry 56, the chunk walk 128 in one warp of eight channels, the sequential
    forward 121 in four warps of sixteen)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = ("import json; from palimpsa.kernels import chunked_fwd as c; "
            "print(json.dumps({d: c.compile_kernels(dtype=d) for d in ('bf16', 'fp32')}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    usage = json.loads(run.stdout.strip().splitlines()[-1])
    for dtype, launches in usage.items():
        assert set(launches) == {"local", "carry", "walk", "sequential"}
        for name, found in launches.items():
            assert found["stack"] == 0 and found["local"] == 0, (dtype, name, found)
            assert found["registers"] <= 255, (dtype, name, found)
        # the walk's one-warp programs: 16 fit an SM's registers (65536 / (128 x 32))
        assert launches["walk"]["registers"] <= 128, launches
        # its readout: one butterfly over the lanes reduce-scatters the 8 channels' sums (SCATTER: 9 shuffles a
        # token instead of 40), and lane l holds column l of what it shuffles
        assert launches["walk"]["shuffles"] == 9, launches["walk"]
        assert launches["walk"]["butterfly_lanes"] == [str([[0, 1 << b] for b in range(5)])], launches["walk"]


def test_the_scattered_readout_runs_where_its_layout_was_checked(monkeypatch):
    """``SCATTER`` needs inline PTX (a GPU) and the chunk walk's tiling: one warp of 8 channels, lanes along 128
    states."""
    on_gpu = torch.empty(1)
    walk = chunked_fwd.walk_config(chunked_fwd.CHUNKED_FWD_CONFIG)
    assert not fused_recurrent._scatters(walk, 8, 128, on_gpu)  # the interpreter or the CPU: tree sums
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert fused_recurrent._scatters(walk, 8, 128, on_gpu)
    assert not fused_recurrent._scatters(chunked_fwd.walk_config({"walk_SCATTER": 0}), 8, 128, on_gpu)
    for config, block_v, block_k in ((walk, 4, 128), (walk, 8, 64), (fused_recurrent.FWD_CONFIG, 8, 128),
                                     (fused_recurrent.ONE_WARP_FWD_CONFIG, 8, 128)):
        assert not fused_recurrent._scatters(config, block_v, block_k, on_gpu), (config, block_v, block_k)


def test_sizes_it_cannot_take_are_refused_by_name_and_left_to_the_sequential_forward(monkeypatch):
    """A chunk that is not a power of two (its launches tile whole chunks) or more chunks than CUDA's third grid
    dimension holds: ``auto`` keeps the sequential forward, an explicit request says what to do."""
    monkeypatch.setattr(fused_recurrent, "_sm_count", lambda device: 132)
    cuda = torch.device("cuda")
    assert not chunked_fwd.worth_it(1, 80, 64, 8192, 384, 16, cuda)
    assert not chunked_fwd.worth_it(1, 80, 64, 512 * 65536, 512, 16, cuda)
    assert chunked_fwd.can_run(512 * 65535, 512)
    inputs = inputs_for(1, 20, 2)
    with pytest.raises(ValueError, match="power-of-two chunk_size.*PALIMPSA_TRITON_FORWARD=sequential"):
        forward(inputs, {}, sizes={"chunk_size": 12, "block_size": 4})
