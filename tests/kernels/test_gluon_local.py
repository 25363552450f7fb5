"""The Gluon local pass of the chunk-parallel backward (``palimpsa.kernels.gluon_local``) on the CPU.

Gluon kernels cannot run under the interpreter, so here the kernel compiles for sm_90a (no driver) at the training
launch and with its other options, within its register budget, with no spills, its shared memory and barriers;
``unsupported`` names each input or setting it does not map; ``LOCAL`` "auto" takes it where it can run unless the
config names a key of the Triton pass; and where it cannot run (here: the CPU interpreter) ``LOCAL``
"gluon" or "auto" leaves the local pass to the Triton kernel, whose gradients are then unchanged.
Its gradients are checked on a GPU against float64 and the Triton pass
(docs/bench/gluon-local-2026-11-27/compare.py, with the settings of docs/bench/gluon-stage-2026-11-28).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings

import pytest
import torch

triton = pytest.importorskip("triton")
from palimpsa.kernels import chunked_bwd, fused_recurrent, gluon_local, gluon_scan  # noqa: E402
from scan_inputs import make_inputs  # noqa: E402

needs_gluon = pytest.mark.skipif(gluon_scan.GLUON_IMPORT_ERROR is not None,
                                 reason=f"this Triton has no Gluon: {gluon_scan.GLUON_IMPORT_ERROR}")

LAUNCHES = {  # name: compile_kernel's arguments
    "training (L2PF 4: pass B's next start state asked for in L2)": {},
    "two-token segments": {"seg": 2},
    "float32, no beta, packed": {"dtype": "fp32", "use_beta": False, "is_varlen": True},
    "fp16, two groups": {"dtype": "fp16", "groups": 2},
    "values and gains staged too, no PIPE": {"stage": 2, "pipe": False},
    "key and query rows staged alone, no PIPE": {"stage": 1, "pipe": False},
    "nothing staged (L2PF bit 4 dropped by l2_prefetch_bits)": {"stage": 0, "pipe": False},
    "nothing prefetched into L2": {"l2_prefetch": 0},
    "staged inputs prefetched into L2 alone": {"l2_prefetch": 1},
    "every prefetch into L2, rows staged alone": {"l2_prefetch": 3, "stage": 1},
    "every prefetch and the next start state into L2": {"l2_prefetch": 7},
    "capped at 168 registers, unwidened (9 programs an SM)": {"maxnreg": 168, "widen": False},
    "the preset: two-token segments, rescaled walks, unwidened, 168 registers (12 programs an SM)":
        {"seg": 2, "maxnreg": 168, "walk_rescale": True, "widen": False},
    "the preset in float32 (12 programs an SM)": {"dtype": "fp32", "seg": 2, "maxnreg": 168, "walk_rescale": True,
                                                  "widen": False},
    "rescaled walks at 8 an SM": {"walk_rescale": True},
    "rescaled walks, nothing staged": {"stage": 0, "pipe": False, "walk_rescale": True},
    "float32 without beta, rescaled walks": {"dtype": "fp32", "use_beta": False, "walk_rescale": True},
    "16-bit values, gains and output gradients read unwidened": {"widen": False},
    "bf16 without beta, widened": {"use_beta": False},
    "whole sequences (WHOLE: one split, the adjoints carried from a final-state gradient)": {"whole": True},
    "whole sequences in float32": {"dtype": "fp32", "whole": True},
    "whole sequences at the preset (12 programs an SM)": {"whole": True, "seg": 2, "maxnreg": 168, "walk_rescale": True,
                                                          "widen": False},
    "whole sequences in float32 at the preset (12 programs an SM)": {"dtype": "fp32", "whole": True, "seg": 2,
                                                                     "maxnreg": 168, "walk_rescale": True,
                                                                     "widen": False},
}
# the launches allowed a spill, by Triton version (none elsewhere): the preset in float32 keeps 8 bytes of stack under
# Triton 3.6 and 3.9 (measured with it, its local pass is still the fastest in float32: 10.22 ms against 10.42 without
# rescaled walks, call 3 of docs/bench/rescaled-walk-2026-11-28); under 3.5.1 the preset's rescaled walks spill 40
# bytes in float32 and 72 in bf16 (not timed there; docs/bench/rescaled-walk-2026-11-28/compile-triton3.5.1.txt)
SPILL_BYTES = {"the preset in float32 (12 programs an SM)": {"3.5": 40, "3.6": 8, "3.9": 8},
               "the preset: two-token segments, rescaled walks, unwidened, 168 registers (12 programs an SM)":
                   {"3.5": 72},
               # whole walks at the preset (WHOLE_OCCUPANCY): timed with its 8 bytes under 3.6, B = 1 at full
               # precision 14.69 ms against 17.98 at 8 an SM (docs/bench/tf32x3-2026-11-28, call 7)
               "whole sequences at the preset (12 programs an SM)": {"3.5": 40, "3.6": 8, "3.7": 8, "3.9": 24},
               "whole sequences in float32 at the preset (12 programs an SM)": {"3.5": 40, "3.6": 8, "3.7": 8,
                                                                                "3.9": 8}}
CODE = r"""
import json, re
from palimpsa.kernels import chunked_bwd, gluon_local, gluon_scan
out = {}
for name, kwargs in json.loads(ARGS).items():
    c = gluon_local.compile_kernel(**kwargs)
    sass = gluon_scan.disassemble(c)
    out[name] = {**gluon_scan.resource_usage(c), "dynamic_shared": c.metadata.shared,
                 **{op: len(re.findall(rf"\b{op}\b", sass)) for op in ("BAR", "STS", "LDS", "STL", "LDL",
                                                                           "LDS.128", "LDGSTS", "LDGSTS.E.BYPASS.128",
                                                                           "DEPBAR")},
                 "waits": [int(n) for n in re.findall(r"cp\.async\.wait_group\s+(\d+);", c.asm["ptx"])],
                 "shuffles": c.asm["ptx"].count("shfl.sync"),
                 "prefetches": [c.asm["ptx"].count(f"prefetch.global.{level}") for level in ("L1", "L2")],
                 "butterfly_lanes": sorted({str(chunked_bwd.lane_bases(c.asm["ttgir"], t)) for t in re.findall(
                     r"elementwise_inline_asm \"[^\n]*?shfl\.sync\.bfly[^\n]*?: (tensor<[^\n]*?) ->",
                     c.asm["ttgir"])})}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def compiled() -> dict:
    """Every launch compiled in a subprocess: under TRITON_INTERPRET (set for the Triton tests of this session)
    Gluon's library functions are interpreter objects and a Gluon kernel cannot compile."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = CODE.replace("ARGS", repr(json.dumps(LAUNCHES)))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@needs_gluon
@pytest.mark.parametrize("launch", [name for name in LAUNCHES if "programs an SM" in name])
def test_the_register_capped_launches_fit_the_programs_an_sm_they_are_for(compiled, launch):
    """The 168-register cap is what lets a ninth program an SM (``SEG`` 4) or the ``OCCUPANCY`` preset's twelfth
    (``SEG`` 2) stay resident: by the registers (3 one-warp programs a scheduler) and by the shared memory."""
    r = compiled[launch]
    want = int(re.search(r"\((\d+) programs an SM\)", launch).group(1))
    assert gluon_local.resident_programs(r["registers"], r["dynamic_shared"]) >= want, r
    if LAUNCHES[launch].get("seg") == 2:
        preset = chunked_bwd.OCCUPANCY[want]
        assert (preset["SEG"], preset["LOCAL_MAXNREG"]) == (2, LAUNCHES[launch]["maxnreg"])


@needs_gluon
@pytest.mark.parametrize("launch", list(LAUNCHES))
def test_compiles_for_sm90a_without_spills_with_its_shared_states(compiled, launch):
    """One warp of four channels keeps a state, the state before it and the adjoints in registers (201-255 measured
    under Triton 3.5.1 to 3.9, but ptxas chose 168 for the unwidened bf16 launch under 3.9; 140-255 allowed: three
    states of 32 registers a lane and their addressing), no
    spill (but ``SPILL_BYTES``); a segment's states live in ``SEG`` shared slots of 4 KB, stored and loaded as
    128-bit vectors (8 of each a slot; the stores twice over with rescaled walks, whose plain and rescaled forms are
    separate code), with barriers between the stores and the loads (2 to 8, as the compiler places them); with
    ``WIDEN``, 16-bit values, gains and output gradients copied once more as float32 (one 16-byte store each); a pair's
    ``dv``, ``dbeta`` (4 channels x 6 shuffles, 5 without beta) and decay gradients (5) take one butterfly each, 29
    shuffles a pair, on lane partials whose element ``l`` lane ``l`` holds. ``STAGE``: a block's 8 key and 8 query
    rows copied to 8 KB more shared memory as 16-byte ``cp.async`` (``LDGSTS``) a lane and row, from 2 one more copy
    a lane for the values and one for the gains, from 3 one for the decays and one for the output gradients; one
    barrier after their wait and one before the next copy; the walk waits for the first group (keys, values, gains,
    decays), the first reverse step of a segment for the second (queries, output gradients). Prefetches: of the next
    block in L1, less what is staged; ``L2PF`` asks for the staged inputs (1), every other line (2) or pass B's next
    start state (4, the default) in L2. ``maxnreg`` 168 (3 warps a scheduler): no spill either, under Triton 3.5.1,
    3.6 and 3.9 (149-168 registers)."""
    kwargs = LAUNCHES[launch]
    seg, stage = kwargs.get("seg", 4), kwargs.get("stage", 3)
    with_beta, float32 = kwargs.get("use_beta", True), kwargs.get("dtype") == "fp32"
    r = compiled[launch]
    spill = SPILL_BYTES.get(launch, {}).get(".".join(triton.__version__.split(".")[:2]), 0)
    assert r["stack"] <= spill and r["local"] == 0, r
    assert spill or (r["STL"] == 0 and r["LDL"] == 0), r
    cap = kwargs.get("maxnreg", 0)
    assert 140 <= r["registers"] <= (cap or 255), r
    widened = kwargs.get("widen", True) and not float32 and stage >= 2
    wide_stores = widened * ((1 + with_beta) + (stage >= 3))
    assert r["STS"] == 8 * seg * (1 + kwargs.get("walk_rescale", False)) + wide_stores, r
    assert r["LDS.128"] >= 8 * seg, r
    assert r["dynamic_shared"] == gluon_local.shared_bytes(seg, stage=stage, value_bytes=4 if float32 else 2,
                                                           use_beta=with_beta, widen=widened), r
    if stage:
        assert 2 <= r["BAR"] <= 8 and r["LDGSTS.E.BYPASS.128"] >= 16, r
        assert r["LDGSTS"] == 16 + (stage >= 2) * (1 + with_beta) + (stage >= 3) * 2, r
        assert r["waits"] == [1, 0] and r["DEPBAR"] == 2, r
    else:
        assert r["dynamic_shared"] == seg * 4096, r
        assert 2 <= r["BAR"] <= 3 and r["LDGSTS"] == 0 and r["waits"] == [], r
        assert r["LDS"] == r["LDS.128"] == 8 * seg, r
    per_pair = 4 * (6 if with_beta else 5) + 5
    assert r["shuffles"] == per_pair * seg // 2, r
    # one prefetch each of pass A's next block (keys, values, gains, decays) and of pass B's (also queries and
    # output gradients), less what pass B stages, which L2PF bit 1 asks for in L2; bit 2: all the others in L2
    l2pf = gluon_local.l2_prefetch_bits(stage, kwargs.get("l2_prefetch", 4))  # as compile_kernel and launch pass it
    pass_a = 3 + with_beta
    staged_b = (stage >= 1) * 2 + (stage >= 2) * (1 + with_beta) + (stage >= 3) * 2
    plain = pass_a + 5 + with_beta - staged_b
    states = 4 if l2pf & 4 else 0  # M and I of the next block's start state, from the slab or the checkpoint
    assert r["prefetches"] == [0 if l2pf & 2 else plain,
                               (plain if l2pf & 2 else 0) + (staged_b if l2pf & 1 else 0) + states], r
    # the butterflies (%laneid) and the stores (lane index from gl.arange) both need lane l to hold element l of
    # the [32] lane partials
    assert r["butterfly_lanes"] == ["[[1], [2], [4], [8], [16]]"], r


@needs_gluon
def test_names_what_it_does_not_map_before_the_machine():
    """Each input or setting the kernel does not map is named (the Triton pass then runs), whatever the machine; on
    this CPU, inputs it maps are refused for the machine alone."""
    def rows(*shape, dtype=torch.bfloat16, offset=0):
        n = torch.Size(shape).numel()
        return torch.zeros(n + offset, dtype=dtype)[offset:].view(*shape)

    v, k, dy = rows(1, 8, 2, 8), rows(1, 8, 1, 128, dtype=torch.float32), rows(1, 8, 2, 8)
    assert "float64" in gluon_local.unsupported(v.double(), k, None, None)
    assert "dtype" in gluon_local.unsupported(v, k, rows(1, 8, 2, 8, dtype=torch.float32), None)
    assert "128 states" in gluon_local.unsupported(v, rows(1, 8, 1, 64, dtype=torch.float32), None, None)
    assert "multiple of 4" in gluon_local.unsupported(rows(1, 8, 2, 6), k, None, None)
    assert "uncertainty" in gluon_local.unsupported(v, k, None, dy)
    assert "SEG" in gluon_local.unsupported(v, k, None, None, block_size=2, seg=4)
    assert "SEG" in gluon_local.unsupported(v, k, None, None, block_size=8, seg=3)
    assert "ex2" in gluon_local.unsupported(v, k, None, None, fast_exp=False)
    for name, args in (("v", (rows(1, 8, 2, 8, offset=1), k, None, None)),
                       ("beta", (v, k, rows(1, 8, 2, 8, offset=2), None)),
                       ("dy", (v, k, None, None, rows(1, 8, 2, 8, offset=3)))):
        assert gluon_local.unsupported(*args).startswith(f"{name} starts at an address not aligned"), name
    assert "GPU" in gluon_local.unsupported(v, k, v, None, dy)  # everything mapped: the CPU is the reason


def test_stages_what_the_tensors_allow():
    """``cp.async`` needs copies of 4 bytes or more from pointers Triton specialised as 16-byte aligned: 16-bit
    values, gains or output gradients elsewhere stage the rows alone, 16-bit key or query rows elsewhere nothing,
    16-bit decays the rows alone (1 was faster than 2); float32 rows stage anywhere."""
    def rows(*shape, dtype=torch.bfloat16, offset=0):
        n = torch.Size(shape).numel()
        return torch.zeros(n + offset, dtype=dtype)[offset:].view(*shape)

    v, k, g = rows(1, 8, 2, 8), rows(1, 8, 1, 128, dtype=torch.float32), rows(1, 8, 2, dtype=torch.float32)
    level = gluon_local.staging_level
    assert [level(s, v, k, k, g, v, v) for s in (0, 1, 2, 3, 5, True)] == [0, 1, 2, 3, 3, 1]
    assert level(3, v, k, k, g.bfloat16(), v, v) == 1
    for name in ("v", "beta", "dy"):
        shifted = {"v": v, "beta": v, "dy": v, name: rows(1, 8, 2, 8, offset=4)}  # 8-byte aligned only
        assert level(3, shifted["v"], k, k, g, shifted["beta"], shifted["dy"]) == 1, name
    assert level(3, v, rows(1, 8, 1, 128, offset=4), k, g, v, v) == 0  # bf16 keys (KQ32 off), 8-byte aligned
    assert level(3, v, rows(1, 8, 1, 128, dtype=torch.float32, offset=2), k, g, None, v) == 3  # float32 keys


def test_resident_programs_follow_the_schedulers_register_files_and_the_shared_memory():
    """A Hopper SM's registers are 4 files of 16,384, one a scheduler, allocated 256 a warp: 215 registers (the bf16
    launch under Triton 3.6) leave room for 2 one-warp programs a scheduler, so 8 an SM although 9 x 215 x 32 fit
    the 65,536 (call 11's ninth program ran as a second wave); 168 for 3 a scheduler, where the shared memory
    (228 KB, 1 KB reserved a program) decides: 9 for two 4-token segments in bf16 read unwidened, 8 widened (384
    bytes more) and in float32, 12 for 2-token segments."""
    resident, shared = gluon_local.resident_programs, gluon_local.shared_bytes
    bf16, fp32 = shared(4, stage=3, widen=False), shared(4, stage=3, value_bytes=4)
    assert (bf16, fp32, shared(4, stage=3)) == (24800, 24992, 25184)
    assert shared(4, stage=3, value_bytes=4, widen=False) == fp32  # float32 values need no second copy
    assert shared(4, stage=3, use_beta=False) == shared(4, stage=3, use_beta=False, widen=False) + 256  # y, v
    assert [resident(r, bf16) for r in (255, 224, 215, 169, 168, 149, 129, 128)] == [8, 8, 8, 8, 9, 9, 9, 9]
    assert resident(241, fp32) == 8 and resident(168, fp32) == 8 and resident(168, shared(4, stage=3)) == 8
    assert resident(168, shared(2, stage=3, widen=False)) == resident(168, shared(2, stage=3)) == 12
    assert resident(128, shared(2, stage=3, widen=False)) == 13
    assert resident(32, 0) == 32  # the most blocks an SM holds (registers alone would allow 64)
    # 16,926 + 1,024 bytes is 13 programs' worth of 228 KB, but shared memory comes in units of 128 bytes: 18,048
    assert resident(128, 16926) == 12 and resident(128, 16928 - 128) == 13


def test_l2_prefetch_of_the_next_start_state_needs_a_staged_level():
    """Unstaged, the kernel with ``L2PF`` bit 4 spills under Triton 3.9, so the launch drops that bit there and
    passes every bit at any staged level."""
    assert [gluon_local.l2_prefetch_bits(0, bits) for bits in (0, 1, 2, 3, 4, 5, 7)] == [0, 1, 2, 3, 0, 1, 3]
    assert [gluon_local.l2_prefetch_bits(level, 7) for level in (1, 2, 3)] == [7, 7, 7]
    assert gluon_local.l2_prefetch_bits(3, 4) == 4


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available(),
                    reason="the fallback is checked on the CPU interpreter")
def test_where_it_cannot_run_the_triton_local_pass_runs_instead():
    """``LOCAL`` "gluon" on the CPU: the Triton local pass runs, so every gradient equals the default's exactly."""
    inputs = make_inputs(1, 10, 2, 1, 4, 16, requires_grad=True, device="cpu")
    args = (inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"])
    leaves = [t for t in inputs.values() if t is not None and t.requires_grad]

    def grads(extra):
        y, final, u = fused_recurrent.fused_recurrent_palimpsa_scan(
            *args, 0.7, (inputs["M0"], inputs["I0"]), True, False, None,
            fwd_config={"BV": 4, "TRANS": False, "num_warps": 1},
            bwd_config={"kernel": "chunked", "NSPLIT": 2, **extra}, chunk_size=8, block_size=4)
        loss = (y * 1.5).sum() + final[0].sum() - 0.5 * final[1].sum()
        return torch.autograd.grad(loss, leaves)

    want = grads({"LOCAL": "triton"})
    for extra in ({}, {"LOCAL": "auto"}, {"LOCAL": "gluon"}):
        for w, got in zip(want, grads(extra), strict=True):
            assert torch.equal(w, got), extra


def _configure(monkeypatch, shipped: dict, env_name: str, env: str | None) -> None:
    """``CHUNKED_CONFIG``'s keys in ``shipped`` set as a caller would, and ``env_name`` set to ``env`` (unset
    where None)."""
    for key, value in shipped.items():
        monkeypatch.setitem(chunked_bwd.CHUNKED_CONFIG, key, value)
    if env is None:
        monkeypatch.delenv(env_name, raising=False)
    else:
        monkeypatch.setenv(env_name, env)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available(),
                    reason="checked on the CPU interpreter")
@pytest.mark.parametrize(("env", "shipped", "extra", "gluon"), [
    (None, {}, {}, True),  # the default, auto: the Gluon pass where it can run
    (None, {}, {"LOCAL": "auto"}, True),
    (None, {}, {"GROUP": 4}, False),  # not with a key only the Triton pass reads
    (None, {"GROUP": 4}, {}, False),  # set in CHUNKED_CONFIG too
    (None, {}, {"LOCAL": "gluon", "GROUP": 4}, True),  # asked for by name all the same
    (None, {}, {"LOCAL": "triton"}, False),
    (None, {"LOCAL": "triton"}, {}, False),  # a caller's CHUNKED_CONFIG
    ("triton", {}, {}, False),  # the environment sets the default
    ("triton", {}, {"LOCAL": "gluon"}, True),  # but not over a config that names LOCAL
    ("triton", {"LOCAL": "gluon"}, {}, True),  # nor over a caller's CHUNKED_CONFIG
    ("gluon", {}, {}, True),
    ("auto", {}, {}, True),
    ("auto", {}, {"PROBE": 1}, False),
    ("auto", {}, {"L2PF": 3}, True),
    ("auto", {}, {"LOCAL_MAXNREG": 168, "SEG": 2, "PROGRAMS_PER_SM": 12}, True),
])
def test_which_local_pass_runs(monkeypatch, env, shipped, extra, gluon):
    """Where the Gluon pass could run (``unsupported`` made to find nothing, its launch recorded instead of run),
    ``LOCAL`` "auto" (the default) takes it unless the config sets a key of the Triton pass; ``PALIMPSA_CHUNKED_LOCAL``
    sets the default; the launch gets the config's staging and prefetch keys (``L2PF`` 4 unless set), and
    ``LOCAL_RUNS`` counts what ran."""
    from palimpsa.kernels import chunked_bwd

    launches = []

    def launch(*args, **kwargs):
        launches.append({key: kwargs[key] for key in ("stage", "l2_prefetch", "seg", "pipe", "maxnreg")})

    monkeypatch.setattr(gluon_local, "unsupported", lambda *args, **kwargs: None)
    monkeypatch.setattr(gluon_local, "launch", launch)
    monkeypatch.setattr(chunked_bwd, "GLUON_LOCAL_FAILED", None)
    _configure(monkeypatch, shipped, chunked_bwd.LOCAL_ENV, env)
    before = dict(chunked_bwd.LOCAL_RUNS)
    inputs = make_inputs(1, 10, 2, 1, 4, 128, requires_grad=True, device="cpu")
    y, _, _ = fused_recurrent.fused_recurrent_palimpsa_scan(
        inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], 0.7, None, False, False, None,
        fwd_config={"BV": 4, "TRANS": False, "num_warps": 1},
        bwd_config={"kernel": "chunked", "NSPLIT": 2, **extra}, chunk_size=8, block_size=4)
    y.sum().backward()
    want = {"stage": 3, "l2_prefetch": extra.get("L2PF", 4), "seg": extra.get("SEG", 4), "pipe": True,
            "maxnreg": extra.get("LOCAL_MAXNREG", 0)}
    assert launches == ([want] if gluon else [])
    assert chunked_bwd.local_runs_since(before) == {"gluon" if gluon else "triton": 1}


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available(),
                    reason="checked on the CPU interpreter")
def test_a_gluon_pass_that_fails_to_compile_leaves_auto_to_the_triton_pass(monkeypatch):
    """Under ``auto`` a launch that raises warns once, the Triton pass runs that call and every later one without
    trying again; asked for by name (``gluon``), the error propagates."""
    from palimpsa.kernels import chunked_bwd

    tries = []

    def launch(*args, **kwargs):
        tries.append(1)
        raise RuntimeError("PTXASError: ptxas fatal : unknown option\nmore")

    monkeypatch.setattr(gluon_local, "unsupported", lambda *args, **kwargs: None)
    monkeypatch.setattr(gluon_local, "launch", launch)
    monkeypatch.setattr(chunked_bwd, "GLUON_LOCAL_FAILED", None)
    monkeypatch.delenv(chunked_bwd.LOCAL_ENV, raising=False)
    inputs = make_inputs(1, 10, 2, 1, 4, 128, requires_grad=True, device="cpu")

    def backward(extra):
        y, _, _ = fused_recurrent.fused_recurrent_palimpsa_scan(
            inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], 0.7, None, False, False,
            None, fwd_config={"BV": 4, "TRANS": False, "num_warps": 1},
            bwd_config={"kernel": "chunked", "NSPLIT": 2, **extra}, chunk_size=8, block_size=4)
        before = dict(chunked_bwd.LOCAL_RUNS)
        y.sum().backward()
        return chunked_bwd.local_runs_since(before)

    with pytest.warns(RuntimeWarning, match=r"Gluon local pass .* failed \(RuntimeError: PTXASError: ptxas fatal : "
                                            r"unknown option\); this process runs the Triton pass instead"):
        assert backward({}) == {"triton": 1}
    assert chunked_bwd.GLUON_LOCAL_FAILED == "RuntimeError: PTXASError: ptxas fatal : unknown option"
    assert backward({}) == {"triton": 1}
    assert len(tries) == 1
    with pytest.raises(RuntimeError, match="unknown option"):
        backward({"LOCAL": "gluon"})
    assert len(tries) == 2


def test_an_unknown_default_local_pass_is_refused(monkeypatch):
    from palimpsa.kernels import chunked_bwd

    monkeypatch.setitem(chunked_bwd.CHUNKED_CONFIG, "LOCAL", "fast")
    with pytest.raises(ValueError,
                       match=r"CHUNKED_CONFIG\['LOCAL'\] must be one of auto, triton, gluon, cuda, got 'fast'"):
        chunked_bwd.local_default()
    monkeypatch.setitem(chunked_bwd.CHUNKED_CONFIG, "LOCAL", "auto")  # as shipped, so the environment applies
    monkeypatch.setenv(chunked_bwd.LOCAL_ENV, "fast")
    with pytest.raises(ValueError, match="PALIMPSA_CHUNKED_LOCAL must be one of auto, triton, gluon, cuda, got 'fast'"):
        chunked_bwd.local_default()
    monkeypatch.delenv(chunked_bwd.LOCAL_ENV)
    assert chunked_bwd.local_default() == "auto"
    monkeypatch.setenv(chunked_bwd.LOCAL_ENV, "triton")
    assert chunked_bwd.local_default() == "triton"


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available(),
                    reason="checked on the CPU interpreter")
def test_an_unknown_local_pass_is_refused():
    inputs = make_inputs(1, 10, 2, 1, 4, 16, requires_grad=True, device="cpu")
    y, _, _ = fused_recurrent.fused_recurrent_palimpsa_scan(
        inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], 0.7, None, False, False, None,
        fwd_config={"BV": 4, "TRANS": False, "num_warps": 1},
        bwd_config={"kernel": "chunked", "NSPLIT": 2, "LOCAL": "glu"}, chunk_size=8, block_size=4)
    with pytest.raises(ValueError, match="LOCAL is 'auto', 'triton', 'gluon' or 'cuda', not 'glu'"):
        y.sum().backward()


def _run_recording_programs(monkeypatch, heads, length, refused, bwd_config):
    """One backward of a scan of ``heads`` heads and ``length`` tokens (two channel blocks a head, chunks of 8,
    blocks of 4) with the Gluon launch recorded instead of run (``unsupported`` refusing ``SEG`` ``refused``):
    the launches as (programs, slab states, seg, maxnreg, walk_rescale, widen), the programs an SM that
    ``_programs`` was asked for, and the local passes that ran."""
    launches, per_sm = [], []
    programs = chunked_bwd._programs

    def launch(*args, **kwargs):
        launches.append((args[25], args[9].shape[0], kwargs["seg"], kwargs["maxnreg"], kwargs["walk_rescale"],
                         kwargs["widen"]))

    def record(config, n_work, device):
        per_sm.append(config["PROGRAMS_PER_SM"])
        return programs(config, n_work, device)

    monkeypatch.setattr(gluon_local, "unsupported", lambda *args, seg, **kwargs: "refused" if seg == refused else None)
    monkeypatch.setattr(gluon_local, "launch", launch)
    monkeypatch.setattr(chunked_bwd, "_programs", record)
    monkeypatch.setattr(chunked_bwd, "GLUON_LOCAL_FAILED", None)
    monkeypatch.delenv(chunked_bwd.LOCAL_ENV, raising=False)
    inputs = make_inputs(1, length, heads, 1, 8, 128, requires_grad=True, device="cpu")
    y, _, _ = fused_recurrent.fused_recurrent_palimpsa_scan(
        inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], 0.7, None, False, False, None,
        fwd_config={"BV": 4, "TRANS": False, "num_warps": 1}, bwd_config=bwd_config, chunk_size=8, block_size=4)
    before = dict(chunked_bwd.LOCAL_RUNS)
    y.sum().backward()
    return launches, per_sm, chunked_bwd.local_runs_since(before)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available(),
                    reason="checked on the CPU interpreter")
@pytest.mark.parametrize(("env", "shipped", "extra", "heads", "refused", "want"), [
    (None, {}, {}, 12, None, ("gluon", [8], 4, 0, False, True)),  # the default: 8 an SM, SEG 4, no register cap
    ("8", {}, {}, 12, None, ("gluon", [8], 4, 0, False, True)),
    ("12", {}, {}, 12, None, ("gluon", [12], 2, 168, True, False)),  # the preset
    ("12", {}, {}, 16, None, ("gluon", [8], 4, 0, False, True)),  # not where its rounds cost more
    ("12", {}, {}, 12, 2, ("gluon", [8], 4, 0, False, True)),  # nor where the Gluon pass cannot run SEG 2
    ("12", {}, {"LOCAL": "triton"}, 12, None, ("triton", [8], None, None, None, None)),  # the Triton pass: its 8
    # all or nothing: not where a caller set one of the keys that decide the fit, in CHUNKED_CONFIG or bwd_config
    ("12", {"LOCAL_MAXNREG": 200}, {}, 12, None, ("gluon", [8], 4, 200, False, True)),
    ("12", {}, {"SEG": 4}, 12, None, ("gluon", [8], 4, 0, False, True)),
    ("12", {}, {"PROGRAMS_PER_SM": 8}, 12, None, ("gluon", [8], 4, 0, False, True)),
    # a caller's tuning key wins alone
    ("12", {}, {"WIDEN": 1}, 12, None, ("gluon", [12], 2, 168, True, True)),
    ("12", {}, {"WALK_RESCALE": 0}, 12, None, ("gluon", [12], 2, 168, False, False)),
])
def test_the_occupancy_preset_applies_to_the_gluon_pass_alone(monkeypatch, env, shipped, extra, heads, refused,
                                                               want):
    """``PALIMPSA_GLUON_LOCAL_PROGRAMS=12`` gives the Gluon local pass 12 programs an SM, ``SEG`` 2 and 168
    registers (none of it where a caller set one of them), rescaled walks and unwidened reads (each where a caller
    did not set it) and sizes its launch and scratch slab for them, where its
    rounds cost no more program time than the default's; where the Triton pass runs, its programs an SM stay
    ``PROGRAMS_PER_SM``. On the CPU one SM, two splits of two channel blocks a head: with 12 heads, 48 work items
    take 6 rounds over 8 programs and 4 over 12 (48 program rounds each way: the preset); with 16 heads 8 rounds
    of 8 programs against 6 of 12 (64 against 72: the default)."""
    _configure(monkeypatch, shipped, chunked_bwd.PROGRAMS_ENV, env)
    launches, per_sm, runs = _run_recording_programs(monkeypatch, heads, 10, refused,
                                                     {"kernel": "chunked", "NSPLIT": 2, **extra})
    ran, sms, seg, maxnreg, walk_rescale, widen = want
    assert runs == {ran: 1}
    assert per_sm == sms
    n_programs = sms[0]
    slab = fused_recurrent.slab_states(8, 4, from_checkpoint=True)
    assert launches == ([(n_programs, n_programs * slab, seg, maxnreg, walk_rescale, widen)] if ran == "gluon" else [])


def test_an_unknown_occupancy_preset_is_refused(monkeypatch):
    from palimpsa.kernels import chunked_bwd

    monkeypatch.setenv(chunked_bwd.PROGRAMS_ENV, "10")
    with pytest.raises(ValueError, match=r"PALIMPSA_GLUON_LOCAL_PROGRAMS must be 8 or 12 \(programs an SM of the "
                                         r"Gluon local pass\), got '10'"):
        chunked_bwd.occupancy_preset()
    monkeypatch.setenv(chunked_bwd.PROGRAMS_ENV, "12")
    assert chunked_bwd.occupancy_preset() == {"SEG": 2, "LOCAL_MAXNREG": 168, "LOCAL_PROGRAMS_PER_SM": 12,
                                              "WALK_RESCALE": 1, "WIDEN": 0}
    for key, value in (("SEG", 8), ("PROGRAMS_PER_SM", 6)):  # a key a caller changed: none of it
        monkeypatch.setitem(chunked_bwd.CHUNKED_CONFIG, key, value)
        assert chunked_bwd.occupancy_preset() == {}
        monkeypatch.setitem(chunked_bwd.CHUNKED_CONFIG, key, chunked_bwd._SHIPPED[key])
    monkeypatch.setitem(chunked_bwd.CHUNKED_CONFIG, "WIDEN", 1 - chunked_bwd._SHIPPED["WIDEN"])  # a tuning key: it
    # gives way alone
    assert chunked_bwd.occupancy_preset() == {"SEG": 2, "LOCAL_MAXNREG": 168, "LOCAL_PROGRAMS_PER_SM": 12,
                                              "WALK_RESCALE": 1}
    monkeypatch.setitem(chunked_bwd.CHUNKED_CONFIG, "WIDEN", chunked_bwd._SHIPPED["WIDEN"])
    assert chunked_bwd.occupancy_preset() == {"SEG": 2, "LOCAL_MAXNREG": 168, "LOCAL_PROGRAMS_PER_SM": 12,
                                              "WALK_RESCALE": 1, "WIDEN": 0}
    monkeypatch.delenv(chunked_bwd.PROGRAMS_ENV)
    assert chunked_bwd.occupancy_preset() == {}


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available(),
                    reason="checked on the CPU interpreter")
def test_a_failed_gluon_launch_under_the_preset_gives_the_triton_pass_its_own_programs(monkeypatch):
    """The slab is sized for the preset's 12 programs an SM; when the Gluon launch raises under ``auto``, the
    Triton pass runs with its own 8 (12 would run partly as a second wave), and its gradients are the Triton
    pass's."""
    counts, programs = [], chunked_bwd._programs

    def record(config, n_work, device):
        counts.append((config["PROGRAMS_PER_SM"], programs(config, n_work, device)))
        return counts[-1][1]

    def launch(*args, **kwargs):
        raise RuntimeError("PTXASError: out of registers")

    monkeypatch.setattr(gluon_local, "unsupported", lambda *args, **kwargs: None)
    monkeypatch.setattr(gluon_local, "launch", launch)
    monkeypatch.setattr(chunked_bwd, "_programs", record)
    monkeypatch.setattr(chunked_bwd, "GLUON_LOCAL_FAILED", None)
    monkeypatch.delenv(chunked_bwd.LOCAL_ENV, raising=False)
    monkeypatch.setenv(chunked_bwd.PROGRAMS_ENV, "12")
    inputs = make_inputs(1, 10, 12, 1, 8, 128, requires_grad=True, device="cpu")
    leaves = [inputs[n] for n in ("v", "k", "q", "log_decay", "beta")]

    def grads(extra):
        y, _, _ = fused_recurrent.fused_recurrent_palimpsa_scan(
            *leaves, 0.7, None, False, False, None, fwd_config={"BV": 4, "TRANS": False, "num_warps": 1},
            bwd_config={"kernel": "chunked", "NSPLIT": 2, **extra}, chunk_size=8, block_size=4)
        return torch.autograd.grad(y.sum(), leaves)

    with pytest.warns(RuntimeWarning, match="runs the Triton pass instead"):
        got = grads({})
    assert counts == [(12, 12), (8, 8)]  # 48 work items: the slab for 12 programs, the Triton pass on 8
    for w, g in zip(grads({"LOCAL": "triton"}), got, strict=True):
        assert torch.equal(w, g)


class _Recorder:
    """Stands in for a Triton kernel: ``kernel[grid](...)`` records the launch and runs nothing."""

    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append(self.name)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available(),
                    reason="checked on the CPU interpreter")
@pytest.mark.parametrize(("heads", "extra", "final", "fails", "want"), [
    # one split asked for: the Gluon pass walks each sequence whole, and neither the carry nor the corrections run
    (2, {"NSPLIT": 1}, True, False, ("gluon-whole", True, [])),
    (2, {"NSPLIT": 1}, False, False, ("gluon-whole", False, [])),
    # WHOLE off: one split of the local pass, then the carry and the corrections, as before
    (2, {"NSPLIT": 1, "WHOLE": 0}, True, False, ("gluon", None, ["carry", "correct"])),
    # two splits: never whole
    (2, {"NSPLIT": 2}, True, False, ("gluon", None, ["carry", "correct"])),
    # 16 heads of two channel blocks fill the CPU's one SM unsplit (32 work items, 4 waves of 8): whole walks, or
    # with WHOLE off the sequential kernel (no local pass)
    (16, {}, True, False, ("gluon-whole", True, [])),
    (16, {"WHOLE": 0}, True, False, (None, None, [])),
    # a Gluon launch that fails under auto: the split as without it (one asked for: the Triton pass, then the carry
    # and the corrections; none asked for: the sequential kernel)
    (2, {"NSPLIT": 1}, True, True, ("triton", True, ["carry", "correct"])),
    (16, {}, True, True, (None, True, [])),
    # SPLIT 0 (what auto asks for float32 at full precision): whole walks where a split would run, else the
    # sequential kernel (WHOLE off, or a failed launch), never a split
    (2, {"SPLIT": 0}, True, False, ("gluon-whole", True, [])),
    (2, {"SPLIT": 0, "WHOLE": 0}, True, False, (None, None, [])),
    (2, {"SPLIT": 0}, False, True, (None, False, [])),
])
def test_where_nothing_splits_the_gluon_pass_walks_whole_sequences(monkeypatch, heads, extra, final, fails, want):
    """``WHOLE`` (the default): where the backward runs one split, the Gluon pass walks every sequence from its end
    with the adjoints carried across its chunks from the final-state gradient (which its launch gets where the loss
    reads a final state), so its gradients are whole and nothing runs after it; ``LOCAL_RUNS`` counts it as
    "gluon-whole". Where the Gluon pass cannot run, or its launch fails, the backward goes on as without it."""
    launches, after = [], []

    def launch(*args, whole=False, dm_t=None, di_t=None, nsplit, **kwargs):
        launches.append((whole, nsplit, dm_t is not None and di_t is not None))
        if fails:
            raise RuntimeError("PTXASError: ptxas fatal : unknown option")

    monkeypatch.setattr(gluon_local, "unsupported", lambda *args, **kwargs: None)
    monkeypatch.setattr(gluon_local, "launch", launch)
    monkeypatch.setattr(chunked_bwd, "GLUON_LOCAL_FAILED", None)
    monkeypatch.setattr(chunked_bwd, "palimpsa_bwd_carry_kernel", _Recorder("carry", after))
    monkeypatch.setattr(chunked_bwd, "palimpsa_bwd_correct_kernel", _Recorder("correct", after))
    monkeypatch.delenv(chunked_bwd.LOCAL_ENV, raising=False)
    monkeypatch.delenv(chunked_bwd.PROGRAMS_ENV, raising=False)
    inputs = make_inputs(1, 20, heads, 1, 8, 128, requires_grad=True, device="cpu")
    y, states, _ = fused_recurrent.fused_recurrent_palimpsa_scan(
        inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], 0.7, None, final, False, None,
        fwd_config={"BV": 4, "TRANS": False, "num_warps": 1},
        bwd_config={"kernel": "chunked", **extra}, chunk_size=8, block_size=4)
    loss = y.sum() + (states[0].sum() - states[1].sum() if final else 0)
    before = dict(chunked_bwd.LOCAL_RUNS)
    if fails:
        with pytest.warns(RuntimeWarning, match="Gluon local pass"):
            loss.backward()
    else:
        loss.backward()
    ran, whole_final, rest = want
    assert chunked_bwd.local_runs_since(before) == ({ran: 1} if ran else {})
    tried = [(True, 1, whole_final)] if whole_final is not None else []
    assert launches == tried if ran != "gluon" else launches == [(False, extra["NSPLIT"], False)]
    assert after == rest


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available(),
                    reason="checked on the CPU interpreter")
@pytest.mark.parametrize(("heads", "env", "shipped", "extra", "refused", "want"), [
    # 10 work items on the CPU's one SM: two rounds of 8 programs (16) against one of 12 (12): the preset
    (5, None, {}, {}, None, (12, 10, 2, 168, True, False)),
    (5, "12", {}, {}, None, (12, 10, 2, 168, True, False)),
    # 16: two rounds of 8 (16) against two of 12 (24): the default occupancy
    (8, None, {}, {}, None, (8, 8, 4, 0, False, True)),
    # not where WHOLE_OCCUPANCY is 0 or 8, the environment pins 8, a caller set a key of the fit, or the Gluon pass
    # cannot run SEG 2
    (5, None, {}, {"WHOLE_OCCUPANCY": 0}, None, (8, 5, 4, 0, False, True)),
    (5, None, {"WHOLE_OCCUPANCY": 8}, {}, None, (8, 5, 4, 0, False, True)),
    (5, "8", {}, {}, None, (8, 5, 4, 0, False, True)),
    (5, None, {}, {"SEG": 4}, None, (8, 5, 4, 0, False, True)),
    (5, None, {"LOCAL_MAXNREG": 200}, {}, None, (8, 5, 4, 200, False, True)),
    (5, None, {}, {}, 2, (8, 5, 4, 0, False, True)),
    # a caller's tuning key wins alone
    (5, None, {}, {"WALK_RESCALE": 0}, None, (12, 10, 2, 168, False, False)),
])
def test_whole_walks_take_the_occupancy_preset_where_it_needs_fewer_rounds(monkeypatch, heads, env, shipped, extra,
                                                                           refused, want):
    """``WHOLE_OCCUPANCY`` (12, the default): whole walks run at the ``OCCUPANCY`` preset (12 programs an SM, ``SEG``
    2, 168 registers, rescaled walks, unwidened reads) where its rounds cost less program time than the default's 8 an
    SM (``_whole_time``: rounds x chunks x programs an SM), as at B = 1 at 2.7b shapes (1280 work items: one round of
    1280 programs instead of two rounds over 1056 resident), and keep 8 where they tie or cost more (B = 2 and 3). The
    launch and its slab follow (a program a work item where one round holds them all)."""
    _configure(monkeypatch, shipped, chunked_bwd.PROGRAMS_ENV, env)
    launches, per_sm, runs = _run_recording_programs(monkeypatch, heads, 20, refused,
                                                     {"kernel": "chunked", "SPLIT": 0, **extra})
    assert runs == {"gluon-whole": 1}
    sms, n_programs, seg, maxnreg, walk_rescale, widen = want
    assert per_sm == [sms]
    slab = fused_recurrent.slab_states(8, 4, from_checkpoint=True)
    assert launches == [(n_programs, n_programs * slab, seg, maxnreg, walk_rescale, widen)]


def test_whole_walks_at_2_7b_shapes_take_the_preset_at_b_1_alone(monkeypatch):
    """On 132 SMs, 2.7b shapes (1280 work items a sequence), 16 chunks: B = 1 takes one round of 12 an SM (12 x 16
    program time) instead of two of 8 (16 x 16); B = 2 ties (24 x 16 each way) and keeps 8; B = 3 and 4 cost more at
    12 (as measured: 44.71 ms against 42.03 at B = 3, docs/bench/tf32x3-2026-11-28, call 7)."""
    monkeypatch.setattr(chunked_bwd, "_sms", lambda device: 132)
    default = dict(chunked_bwd._SHIPPED)
    preset = {**default, **chunked_bwd.OCCUPANCY[12]}
    cuda = torch.device("cuda")
    times = [(chunked_bwd._whole_time(preset, 1280 * b, 16, cuda), chunked_bwd._whole_time(default, 1280 * b, 16, cuda))
             for b in (1, 2, 3, 4)]
    assert times == [(12 * 16, 16 * 16), (24 * 16, 24 * 16), (36 * 16, 32 * 16), (48 * 16, 40 * 16)]


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available(),
                    reason="checked on the CPU interpreter")
def test_a_failed_launch_at_the_whole_walk_preset_walks_whole_at_8_an_sm(monkeypatch):
    """Where the preset's kernel (``SEG`` 2, 168 registers) fails to build, whole walks run again at the default
    occupancy, without a warning and without giving up the Gluon pass for the process; a ``WHOLE_OCCUPANCY`` that is
    no preset is refused by name."""
    launches = []

    def launch(*args, seg, whole=False, **kwargs):
        launches.append((seg, args[25], whole))
        if seg == 2:
            raise RuntimeError("PTXASError: out of registers")

    monkeypatch.setattr(gluon_local, "unsupported", lambda *args, **kwargs: None)
    monkeypatch.setattr(gluon_local, "launch", launch)
    monkeypatch.setattr(chunked_bwd, "GLUON_LOCAL_FAILED", None)
    monkeypatch.delenv(chunked_bwd.LOCAL_ENV, raising=False)
    monkeypatch.delenv(chunked_bwd.PROGRAMS_ENV, raising=False)
    inputs = make_inputs(1, 20, 5, 1, 8, 128, requires_grad=True, device="cpu")

    def backward(extra):
        y, _, _ = fused_recurrent.fused_recurrent_palimpsa_scan(
            inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], 0.7, None, False, False,
            None, fwd_config={"BV": 4, "TRANS": False, "num_warps": 1},
            bwd_config={"kernel": "chunked", "SPLIT": 0, **extra}, chunk_size=8, block_size=4)
        y.sum().backward()

    before = dict(chunked_bwd.LOCAL_RUNS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        backward({})
    assert launches == [(2, 10, True), (4, 5, True)]  # 10 work items: 10 programs at 12 an SM, then 5 at 8
    assert chunked_bwd.local_runs_since(before) == {"gluon-whole": 1}
    assert chunked_bwd.GLUON_LOCAL_FAILED is None
    with pytest.raises(ValueError, match="WHOLE_OCCUPANCY must be 0 or one of 8, 12 .*not 10"):
        backward({"WHOLE_OCCUPANCY": 10})


def test_auto_asks_float32_at_full_precision_for_whole_walks(monkeypatch):
    """``fused_recurrent.whole_by_default``: on CUDA, float32 inputs at full-precision matrix products (where the
    split's IEEE corrections lose to the sequential kernel) take the chunk-parallel backward without a split; not
    16-bit or float64 inputs, not under TF32 (the split choice decides there), not on the CPU; and under ``auto`` the
    scan then runs the Gluon pass's whole walks where it can (here: ``unsupported`` made to find nothing, the launch
    recorded)."""
    from types import SimpleNamespace

    precision = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert fused_recurrent.whole_by_default(SimpleNamespace(is_cuda=True, dtype=torch.float32))
        for dtype in (torch.bfloat16, torch.float16, torch.float64):
            assert not fused_recurrent.whole_by_default(SimpleNamespace(is_cuda=True, dtype=dtype)), dtype
        assert not fused_recurrent.whole_by_default(SimpleNamespace(is_cuda=False, dtype=torch.float32))
        torch.set_float32_matmul_precision("high")
        assert not fused_recurrent.whole_by_default(SimpleNamespace(is_cuda=True, dtype=torch.float32))
    finally:
        torch.set_float32_matmul_precision(precision)
    if os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available():
        return
    launches = []
    monkeypatch.setattr(gluon_local, "unsupported", lambda *args, **kwargs: None)
    monkeypatch.setattr(gluon_local, "launch", lambda *args, whole=False, nsplit, **kwargs: launches.append(
        (whole, nsplit)))
    monkeypatch.setattr(chunked_bwd, "GLUON_LOCAL_FAILED", None)
    monkeypatch.setattr(fused_recurrent, "chunked_by_default", lambda v: False)
    monkeypatch.setattr(fused_recurrent, "whole_by_default", lambda v: True)
    monkeypatch.delenv(fused_recurrent.BACKWARD_ENV, raising=False)
    monkeypatch.delenv(chunked_bwd.LOCAL_ENV, raising=False)
    monkeypatch.delenv(chunked_bwd.PROGRAMS_ENV, raising=False)
    inputs = make_inputs(1, 20, 2, 1, 8, 128, requires_grad=True, device="cpu")
    y, _, _ = fused_recurrent.fused_recurrent_palimpsa_scan(
        inputs["v"], inputs["k"], inputs["q"], inputs["log_decay"], inputs["beta"], 0.7, None, False, False, None,
        fwd_config={"BV": 4, "TRANS": False, "num_warps": 1}, chunk_size=8, block_size=4)
    before = dict(chunked_bwd.LOCAL_RUNS)
    y.sum().backward()
    assert launches == [(True, 1)]
    assert chunked_bwd.local_runs_since(before) == {"gluon-whole": 1}
