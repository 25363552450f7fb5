"""The scan's backward with its chunks independent of one another (docs/kernels.md, "chunk-parallel backward").

The adjoint recursions are linear with a scalar carry per head and token (palimpsa-math section 6)::

    dM_{t-1} = a_t dM_t + s_t        dI_{t-1} = a_t dI_t + r_t

and their sources ``s_t``, ``r_t`` depend on the forward states, ``dy`` and ``du`` only. So the sequential
backward (``fused_recurrent.palimpsa_bwd_kernel``, one program walking a whole sequence) splits into three
launches, each exact (``emulation.chunk_parallel_backward`` is the float64 statement of the same algorithm):

1. ``palimpsa_bwd_local_kernel``: every chunk of ``CT`` tokens runs the sequential kernel's reverse steps alone,
   from a zero adjoint at its end; ``NSPLIT`` work items share a (channel block, head) and take its chunks in turn,
   so that at B = 1 the GPU gets ``NSPLIT`` times the work items of the sequential backward. The programs are
   persistent, at most as many as stay resident and no more than their rounds of work items need, and take the
   work items in turn, each keeping one recompute slab without the chunk's first block start (the checkpoint,
   read where it is): the scratch is at most one slab per resident program whatever ``NSPLIT`` (at B = 1,
   L = 8192, 2.7b shapes a slab per chunk would be 32 x 168 MB, a slab per work item is NSPLIT x 168 MB, one per
   program 130 MB on an H100). It
   writes the tokens' local gradients (``dv``, ``dbeta`` in the output dtype; ``dk``, ``dq``, ``dlog_decay`` added
   as in the sequential kernel) and each chunk's local adjoint at its start ``(L_M, L_I)``: in the slot before
   the chunk's own (:func:`_slots`), the first chunk's in the buffers of ``dM0``, ``dI0``.
2. ``palimpsa_bwd_carry_kernel``: a scan over the chunks of a sequence, from its end, turns ``(L_M, L_I)`` into
   the adjoint entering each chunk at its end, ``D(c - 1) = L(c) + A_c D(c)`` (``A_c`` the chunk's product of
   decays, ``D`` of the last chunk the final-state gradient, which takes no slot); what leaves the first chunk,
   ``L(0) + A_0 D(0)``, is ``dM0``, ``dI0``. Elementwise, in place over ``L``.
3. ``palimpsa_bwd_correct_kernel``: every output of a chunk is affine in its entering adjoint ``(D_M, D_I)``. With
   ``A_t`` the decays after token ``t`` to the chunk's end: ``dv_t += A_t D_M k_t``, ``dbeta_t += A_t D_I k_t^2``,
   ``dk_t += A_t (D_M^T v_t + 2 k_t (D_I^T beta_t))`` (matrix products per chunk and head), and
   ``dlog_decay_t += A_t a_t (<D_M, M_{t-1}> + <D_I, I_{t-1} - I_prior>)``, whose inner products follow from
   the chunk's checkpoint and a decayed running sum of ``v_r . D_M k_r + beta_r . D_I k_r^2``: no per-token state
   is needed. ``dq`` does not depend on the adjoints.

``dk`` and ``dq`` are summed over the heads of a group with atomics, as in the sequential kernel.

Where the work items fill the GPU unsplit (one split: at B = 4 and up at 2.7b shapes), the carry and the corrections
would only add work. There, and where walking whole costs less than splitting with its carry and corrections (B =
3), the Gluon local pass walks each sequence whole instead (``WHOLE``, the default): a work
item takes its sequence's chunks from the last, with the adjoints carried across them from the final-state gradient,
so its gradients are whole and nothing runs after it (B = 4, L = 8192: backward 45.7 ms against the sequential
kernel's 50.0, peak 1.18x SSD's against 1.92x; docs/bench/whole-2026-11-28). Where the Gluon pass cannot run, the
sequential kernel does, as before.
"""

import json
import os
import re
import warnings

import torch
import triton
import triton.language as tl

from . import fused_recurrent as fr

# launch settings, overridable through bwd_config = {"kernel": "chunked", ...}
# DOT "auto": TF32 matrix products (10-bit mantissa, ~5e-4) for 16-bit inputs, whose gradients are rounded to 8
# (bf16) or 11 (fp16) bits anyway, and for float32 ones where PyTorch's float32 matmul precision allows TF32
# (``torch.set_float32_matmul_precision("high")``); IEEE float32 otherwise, and for float64
# BP 0 and correct_warps 0: 32 channels and 4 warps per correction program with TF32 products, 16 and 8 with IEEE
# ones (whose FMA form spills with more channels or fewer warps) and with tf32x3 ones (which spill at 32 and 4; the
# chunked forward's products at full precision, chunked_fwd.FULL_PRECISION_DOT)
# PROGRAMS_PER_SM: the local pass's persistent programs per SM (one-warp programs of ~220 registers: 8 fit an SM),
# each with one scratch slab; 0: one program per work item, each with its own slab (NSPLIT times the scratch)
# maxnreg: a register cap for the Triton local pass (ptxas's own choice where 0; a key of the Triton pass alone, so
# naming it leaves LOCAL "auto" to the Triton pass)
# GROUP: tokens recomputed together from a block start, 2 or 4 (quads: fewer state updates, measured slower); GAUGE:
# the decay gradient from each token's own state (always so with quads); RELOAD (default: with quads) loads a quad's
# inputs again for its reverse steps; PREFETCH: the next block's inputs prefetched into L1 (on a GPU;
# fused_recurrent's _reverse_chunk and docs/kernels.md); PROBE (timing only, wrong gradients): bits that leave parts of
# the local pass out (_reverse_chunk, _reverse_step; docs/bench/chunked-atomics-2026-11-27); PAIRSUM: a pair's dv, dbeta
# reduced over the lanes together (fused_recurrent._pair_rows; on a GPU, where the tiling allows); CHAIN: the reverse
# step's sums as FFMA chains, the decay gradient's with the pair's (fused_recurrent._chains); FAST_EXP: each decay of
# the recompute from one ex2.approx.ftz (fused_recurrent._exp; on a GPU); RESCALE: pass A in rescaled states where a
# block's decays allow it (fused_recurrent._rescaled_block); KQ32: the local pass reads float32 copies of 16-bit keys
# and queries (fused_recurrent._float32_keys; 12.20 ms against 12.31 at B = 1, L = 8192, docs/bench/ring-2026-11-27);
# correct_early: the corrections load the local dv, dbeta at a sub-block's start (1: 1.25 ms against 1.51 at B = 1,
# L = 8192), one sub-block ahead (2: 1.29) or after its products (0; docs/bench/ring-2026-11-27, call 13)
# LOCAL: "gluon" runs the local pass in Gluon with each block's states in shared memory (gluon_local; 11.46 ms
# against 12.19 at B = 1, L = 8192 with its defaults, docs/bench/gluon-auto-2026-11-28, call 7), the Triton pass
# where it cannot run; "auto", the default since 2026-11-28, is (after "cuda", below) "gluon" on a Hopper GPU (where
# gluon_local.unsupported finds nothing against it: sm_90, a Triton with Gluon, the inputs it maps) and "triton"
# elsewhere, unless the config names a key of the Triton pass (fine-tuning interleaved in one process: 0.884x the
# plain model's tokens/s against 0.875x with 8 layers upgraded, 0.529x against 0.512x with 64; call 8);
# "cuda" runs it in CUDA C++ with tensor-core state updates (cuda_local: 9.54 ms against the Gluon pass's 11.20 at
# B = 1, L = 8192, docs/bench/cuda-mma-2026-11-29), and raises where it cannot run; since 2026-11-29 "auto" takes it
# first where _cuda_plan allows (AUTO_CUDA_ROUNDS, no Gluon or Triton pass keys), then the Gluon pass; CUDA_PROBE:
# its timing probes; CUDA_TSUB: its peeling threshold (cuda_local.TSUB by default; 0 takes every token's state from a
# product); CUDA_DEFINES: its timing macros ("A=1+B=0"); the timing options CUDA_ORDER, CUDA_REPL and CUDA_WG, none
# faster, went after bbc1c68; PALIMPSA_CHUNKED_LOCAL sets the default (not over a LOCAL that bwd_config or a caller's
# CHUNKED_CONFIG sets);
# SEG: its tokens per shared-memory segment (4: 16 KB of states a program); PIPE: its walks load each token's inputs
# a token ahead; STAGE: pass B copies each block's inputs to shared memory at its start (cp.async) and reads them
# there: 1 the key and query rows, 2 also the values and gains, 3 also the decays and output gradients, as far as
# gluon_local.staging_level allows (the local pass 13.35 ms with 1, 13.53 with 2, 11.99 with 3 against the Triton
# pass's 12.20 in one run; 11.78 with 3 and PIPE against 12.22 in another); L2PF, a bitmask: bit 4 (the default)
# asks for pass B's next block start state in L2 (from the slab, which 8 resident programs an SM hold 258 KB of
# each, ~270 MB on an H200, more than L2: 11.43-11.46 ms against 11.71-11.73), bit 1 for the next block's staged
# inputs (11.66 alone, 11.40 with bit 4), bit 2 sends pass A's prefetches to L2 instead of L1 (with bit 4: 10.72
# against 10.70 in float32; gluon-auto-2026-11-28, calls 5, 7 and 10). Pass A staged in shared memory as well lost
# (12.34 ms against 11.71, call 5) and was taken out again (docs/kernels.md); LOCAL_MAXNREG: a register cap for
# the Gluon pass (0: ptxas's choice, 209-241 registers under Triton 3.5.1-3.9). Its one-warp programs likely take
# registers from one scheduler's file each, 2 a scheduler at 169-224 and 3 at 129-168 (CUDA's occupancy rule,
# gluon_local.resident_programs), which would explain why a ninth program an SM ran as a second wave (call 11); at
# 168, with no spills under Triton 3.5.1-3.9, SEG 4 fits 9 an SM in bf16 (the shared memory) and SEG 2 fits 12 (SEG
# 2 in float32 keeps 16-32 bytes of stack). LOCAL_PROGRAMS_PER_SM: the Gluon pass's programs per SM where it runs
# (0: PROGRAMS_PER_SM). 9 lost (13.15 ms; likely 3 warps on one scheduler, 2 on the others); SEG 2 at 12 won
# (10.88-10.90 against 11.36-11.44, bf16; 10.37 against 10.79 in float32) for 0.13 GiB more scratch at 2.7b shapes
# (gluon-auto-2026-11-28, calls 12-16), so it is the opt-in preset PALIMPSA_GLUON_LOCAL_PROGRAMS=12 (OCCUPANCY).
# WALK_RESCALE: the Gluon pass's pass B walks in rescaled states where a block's decays allow it (one FFMA per state
# and token instead of two: 34.8 instructions an element-token executed, against 35.6 before this and WIDEN): a gain
# at 12 programs an SM (10.22 ms against 10.42 in float32), a loss at 8 (10.79 against 10.73), so on in the preset
# only; WIDEN: it widens 16-bit staged values, gains and output gradients to float32 once a block (bf16: 11.18 against
# 11.27; off in the preset, where it would spill under the 168-register cap: 10.58 against 10.82);
# docs/bench/rescaled-walk-2026-11-28; WHOLE: where one split runs (chosen or given as NSPLIT 1), the Gluon pass walks
# each sequence whole with the adjoints carried across its chunks, and no carry or corrections follow (0: as before,
# the sequential kernel where the split count was chosen, the local pass, carry and corrections where NSPLIT 1 was
# given). B = 4, L = 8192, bf16: forward + backward 54.53 ms against 58.78, peak 1.18x SSD's against 1.92x; at L =
# 2048 13.33 against 14.61; at 16384 117.72 against 118.91; forced where 16 splits run, it loses at B = 2 (30.45
# against 28.82) and wins at B = 3 (42.59 against 43.57), so _splits counts it as a candidate against the splits plus
# their carry and corrections (CORRECTIONS) (docs/bench/whole-2026-11-28); SPLIT 0: never split, whole walks where the
# Gluon pass can run and the sequential kernel elsewhere (what "auto" asks for float32 inputs at full precision,
# fused_recurrent.whole_by_default: B = 1, L = 8192 19.22 ms against the sequential kernel's 22.30 and the split's
# 28.17 with IEEE corrections; call 6); WHOLE_OCCUPANCY: the OCCUPANCY preset (12 programs an SM, SEG 2, 168
# registers, rescaled walks) that whole walks take where its rounds cost less program time than the default's
# (_whole_time: fewer rounds, each 1.5 times as long): at B = 1, where 1280 work items (2.7b shapes) take one round
# (1280 programs, of 1584 resident) instead of two (640 programs taking two items each, of 1056 resident), float32 at
# full precision forward + backward 14.69 ms against 17.98 at L = 8192 and 3.79 against 4.61 at 2048, 0.15 GiB more
# scratch (peak 2.54x SSD's against 2.09x); equal at B = 2 (29.72 against 29.68, kept at 8), slower at B = 3 (44.71
# against 42.03) (docs/bench/tf32x3-2026-11-28, call 7); 0 or 8: whole walks stay at the default occupancy. Where the
# preset's kernel fails to build, the backward is chosen again as under WHOLE_OCCUPANCY 0 (whole walks at 8 where the
# split choice still takes them, the split otherwise) before the process gives up the Gluon pass
CHUNKED_CONFIG = {"BV": 4, "NSPLIT": 0, "TRANS": False, "num_warps": 1, "BT": 16, "BP": 0, "DOT": "auto",
                  "correct_warps": 0, "PROGRAMS_PER_SM": 8, "maxnreg": 0, "GROUP": 2, "GAUGE": False,
                  "PREFETCH": True, "PROBE": 0, "PAIRSUM": True, "CHAIN": None, "FAST_EXP": True,
                  "RESCALE": True, "KQ32": True, "correct_early": 1, "LOCAL": "auto", "SEG": 4, "PIPE": 1,
                  "STAGE": 3, "L2PF": 4, "LOCAL_MAXNREG": 0, "LOCAL_PROGRAMS_PER_SM": 0, "WALK_RESCALE": 0,
                  "WIDEN": 1, "WHOLE": 1, "SPLIT": 1, "WHOLE_OCCUPANCY": 12, "CORRECT": "auto"}
# the defaults as shipped: a key of CHUNKED_CONFIG changed since counts as named, as a key of bwd_config does
_SHIPPED = dict(CHUNKED_CONFIG)
# the keys that only the Triton local pass reads: a config naming one runs the Triton pass under LOCAL "auto"
TRITON_PASS_KEYS = ("GROUP", "GAUGE", "RELOAD", "PROBE", "TRANS", "maxnreg", "num_warps", "PAIRSUM", "CHAIN")
LOCAL_ENV = "PALIMPSA_CHUNKED_LOCAL"
# CORRECT: the corrections in CUDA C++ on tensor cores ("cuda", kernels/cuda_correct.py), in Triton ("triton",
# palimpsa_bwd_correct_kernel), or "auto": the CUDA kernel where it can run (a Hopper GPU, TF32 products, gains
# present), has not failed in this process (CUDA_CORRECT_FAILED) and the config changes none of the Triton kernel's
# keys (CORRECT_TRITON_KEYS) from their shipped values (0.65 ms against 1.27 at B = 1, L = 8192, bf16;
# docs/bench/cuda-correct-2026-11-29); PALIMPSA_CHUNKED_CORRECT sets it as PALIMPSA_CHUNKED_LOCAL sets LOCAL;
# CORRECT_ORDER 1: the CUDA kernel's CTAs chunks first (the same 0.65 ms, call 2 there)
CORRECT_ENV = "PALIMPSA_CHUNKED_CORRECT"
CORRECTS = ("auto", "triton", "cuda")
CORRECT_TRITON_KEYS = ("BP", "BT", "DOT", "correct_warps", "correct_early")
# how many times each corrections kernel has run in this process
CORRECT_RUNS = {"triton": 0, "cuda": 0}
# why CORRECT "auto" stopped taking the CUDA corrections in this process (a compile or load error); None: it has not
CUDA_CORRECT_FAILED: str | None = None
# the Gluon local pass's occupancy presets, by programs an SM (PALIMPSA_GLUON_LOCAL_PROGRAMS): 8, the default (SEG
# 4, each program's registers as ptxas chooses: 2 one-warp programs a scheduler), and 12 (SEG 2, registers capped at
# 168: 3 a scheduler, rescaled walks, 16-bit values read unwidened). 12 is faster (B = 1, L = 8192: the local pass
# 10.58 ms against 11.18 in bf16, 10.23 against 10.72 in float32, rescaled-walk-2026-11-28 call 4; fine-tuning 2.7b
# shapes with 64 layers upgraded 0.537x the plain model's tokens/s against 0.522x, the same peak, gluon-auto call 14,
# but 0.513x against 0.530x in call 5 of rescaled-walk-2026-11-28, whose steps varied by up to a quarter) but each
# resident program keeps a scratch slab (258 KB at 2.7b shapes), so a lone scan's peak memory grows from 1.92x SSD's
# to 2.31-2.32x (docs/bench/gluon-auto-2026-11-28, calls 12-16). Its keys go together (occupancy_preset), and it
# applies where the Gluon pass runs and its rounds cost no more program time than the default's (_program_time; not
# at L = 2048). Whole walks take the same keys without it where they need fewer rounds (WHOLE_OCCUPANCY, above)
PROGRAMS_ENV = "PALIMPSA_GLUON_LOCAL_PROGRAMS"
OCCUPANCY = {8: {}, 12: {"SEG": 2, "LOCAL_MAXNREG": 168, "LOCAL_PROGRAMS_PER_SM": 12, "WALK_RESCALE": 1,
                         "WIDEN": 0}}
# a preset's keys that decide whether its programs fit an SM (all or none of the preset applies where a caller set
# one); its others tune the kernel at that occupancy and give way one by one to a caller's own
OCCUPANCY_FIT_KEYS = ("SEG", "LOCAL_MAXNREG", "LOCAL_PROGRAMS_PER_SM", "PROGRAMS_PER_SM")
LOCALS = ("auto", "triton", "gluon", "cuda")
# how many times each local pass has run in this process (for checks that must know which one ran)
LOCAL_RUNS = {"triton": 0, "gluon": 0, "cuda": 0}
# why LOCAL "auto" stopped taking the Gluon pass in this process: its compilation failed once (a Triton whose Gluon
# differs from the versions gluon_local was compiled against), so every later call runs the Triton pass; None: it
# has not failed
GLUON_LOCAL_FAILED: str | None = None
# why LOCAL "auto" stopped taking the CUDA pass in this process (its compile or load failed); None: it has not
CUDA_LOCAL_FAILED: str | None = None
# the keys of the Gluon pass, and SPLIT (0: never a split): a config that names one (or a Triton pass key) keeps
# "auto" off the CUDA pass, which splits every sequence into its chunks
GLUON_PASS_KEYS = ("SEG", "PIPE", "STAGE", "L2PF", "LOCAL_MAXNREG", "LOCAL_PROGRAMS_PER_SM", "WALK_RESCALE", "WIDEN",
                   "WHOLE", "WHOLE_OCCUPANCY", "SPLIT")
# "auto" takes the CUDA pass where its work items (sequence, head, chunk, 64 channels) number from AUTO_CUDA_ROUNDS[0]
# to AUTO_CUDA_ROUNDS[1] an SM: at 2.7b shapes B = 1, L = 2048 (2.4 an SM) ran 3% slower forward + backward than the
# dispatched path, L = 4096 (4.8) 10% faster than the Gluon pass, L = 8192 (9.7) to B = 16 (155) 7-13% faster than
# the Gluon pass or what auto dispatched before (docs/bench/cuda-mma-2026-11-29, calls 4 and 5); larger unmeasured
AUTO_CUDA_ROUNDS = (4, 160)
# a list to receive (name, start event, end event) of every launch, for benchmarks; None: no events recorded
TIMINGS = None
WAVES = 4  # NSPLIT = 0: split where one split gives fewer than this many waves of eight one-warp programs per SM
# the carry and the corrections after a split local pass, as a share of its chunk walks, what whole walks save
# (_splits): 16-bit inputs 1.32 ms after 11.12 at B = 1, L = 8192, bf16 (docs/bench/whole-2026-11-28, call 2; 1.32
# after 11.15 in call 1 of start-ahead-2026-11-28); float32 inputs, whose corrections read twice the bytes, 1.96
# after 10.72 and 2.02 after 10.71 (calls 1 and 2 there: 0.18-0.19)
CORRECTIONS = 0.12
CORRECTIONS_FLOAT32 = 0.18
# the Gluon pass's time a unit of work at the OCCUPANCY preset's 12 programs an SM against 8, with which the split
# choice counts whole walks that take the preset (_whole_cost). Measured two ways: whole walks at 12 against the split
# local pass at 8, B = 1, L = 8192 (24 units against 20): bf16 12.44 ms against 11.15, float32 11.96 against 10.71,
# 0.93 (docs/bench/start-ahead-2026-11-28, calls 1-2); split launches at both (16 splits, 156 units, against 4, 160):
# bf16 10.58 against 11.18, float32 10.23 against 10.72, 0.97-0.98 (rescaled-walk-2026-11-28, call 4). 0.95 lies
# between and gives every measured B = 1 case its faster side (bf16 a tie at 8192; float32 whole walks at 2048,
# 8192, 16384); at 0.93 bf16 would walk whole at 8192 by 0.01 of a round, at 0.97 float32 would split at 16384
PRESET_SPEED = 0.95


@triton.jit
def _slots(i_n, boc):
    """Sequence ``i_n``'s first slot in ``lm``, ``li``: the adjoint entering chunk ``c`` at its end lies in slot
    ``c`` from there, for every chunk but the last (whose is the final-state gradient, or zero). A sequence has a
    slot fewer than chunks, and at least one chunk (``cu_seqlens`` rises strictly), so its slots start at its first
    checkpoint less the sequences before it. Never below 0: an empty sequence, which ``palimpsa_scan`` refuses (on
    a GPU only when the device next synchronises), gives wrong gradients but no write outside the buffers."""
    return tl.maximum(boc - i_n, 0)


@triton.jit
def palimpsa_bwd_local_kernel(
    v, k, q, g, beta, ip, ck_m, ck_i, dy, du, sc_m, sc_i, lm, li,
    dv, dk, dq, dg, dbeta, dm0, di0, cu_seqlens, chunk_offsets, T, n_nh, n_work,
    H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr,
    BV: tl.constexpr, BK: tl.constexpr, CT: tl.constexpr, BS: tl.constexpr, NSPLIT: tl.constexpr,
    USE_BETA: tl.constexpr, USE_INITIAL_STATE: tl.constexpr, USE_INITIAL_IMPORTANCE: tl.constexpr,
    USE_DU: tl.constexpr, IS_VARLEN: tl.constexpr, TRANS: tl.constexpr, FAST_RCP: tl.constexpr, ACC: tl.constexpr,
    GROUP: tl.constexpr = 2, GAUGE: tl.constexpr = False, RELOAD: tl.constexpr = False,
    PREFETCH: tl.constexpr = False, PROBE: tl.constexpr = 0, PAIRSUM: tl.constexpr = False,
    CHAIN: tl.constexpr = False, FAST_EXP: tl.constexpr = False, RESCALE: tl.constexpr = False,
):
    # persistent: program p takes the work items p, p + programs, ... (``n_work`` of them: channel block fastest,
    # then the ``n_nh`` (sequence, head) pairs, then the split), each the chunks i_sp, i_sp + NSPLIT, ... of one
    # (channel block, head), and keeps one scratch slab of CT // BS - 1 state pairs of [BV, N] for all of them
    NV: tl.constexpr = (P + BV - 1) // BV
    pid = tl.program_id(0)
    o_sc = pid.to(tl.int64) * (CT // BS - 1) * BV * N
    b_ip = tl.load(ip).to(ACC)
    for work in range(pid, n_work, tl.num_programs(0)):
        i_sp = work // (NV * n_nh)
        i_v, i_nh, i_h, i_g, bos, T_n, boc, o_v, o_k, m_s, o_s, o_state = fr._program_at(
            work % NV, (work // NV) % n_nh, cu_seqlens, chunk_offsets, T, H, G, P, N, BV, BK, CT,
            IS_VARLEN, TRANS)
        for i_c in range(i_sp, tl.cdiv(T_n, CT), NSPLIT):
            b_dm, b_di, b_an = fr._reverse_chunk(
                v, k, q, g, beta, ck_m, ck_i, dy, du, sc_m, sc_i, dv, dk, dq, dg, dbeta,
                tl.zeros(o_s.shape, dtype=ACC), tl.zeros(o_s.shape, dtype=ACC), tl.full([], 1, dtype=ACC), b_ip,
                i_c, i_v, o_sc, bos, T_n, boc, i_h, i_g, o_v, o_k, m_s, o_s,
                H, G, P, N, BV, CT, BS, USE_BETA, USE_DU, TRANS, FAST_RCP, ACC, SLAB_FROM_CHECKPOINT=True, GROUP=GROUP,
                GAUGE=GAUGE, RELOAD=RELOAD, PREFETCH=PREFETCH, PROBE=PROBE, PAIRSUM=PAIRSUM,
                CHAIN=CHAIN, FAST_EXP=FAST_EXP, RESCALE=RESCALE)
            # the chunk's local adjoint of the state before its first token: in the slot before the chunk's own
            # (_slots); the first chunk's is dM0's, dI0's local part, in their buffers (nowhere without them)
            if i_c > 0:
                o_l = (((_slots(i_nh // H, boc) + i_c - 1) * H + i_h) * P + i_v * BV) * N
                tl.store(lm + o_l + o_s, b_dm * b_an, mask=m_s)
                tl.store(li + o_l + o_s, b_di * b_an, mask=m_s)
            else:
                if USE_INITIAL_STATE:
                    tl.store(dm0 + o_state + o_s, b_dm * b_an, mask=m_s)
                if USE_INITIAL_IMPORTANCE:
                    tl.store(di0 + o_state + o_s, b_di * b_an, mask=m_s)


@triton.jit
def palimpsa_bwd_carry_kernel(
    g, lm, li, dmT, diT, dm0, di0, cu_seqlens, chunk_offsets, T,
    H: tl.constexpr, P: tl.constexpr, N: tl.constexpr, CT: tl.constexpr, BE: tl.constexpr,
    USE_FINAL_STATE_GRADIENT: tl.constexpr, USE_INITIAL_STATE: tl.constexpr, USE_INITIAL_IMPORTANCE: tl.constexpr,
    IS_VARLEN: tl.constexpr, ACC: tl.constexpr,
):
    """For ``BE`` elements of one (sequence, head)'s state: the local adjoint ``L(c)`` of every chunk but the first
    (in slot ``c - 1``, :func:`_slots`) replaced in place by the adjoint entering chunk ``c - 1`` at its end,
    ``L(c) + A_c D(c)``; the adjoint leaving the first chunk, ``L(0) + A_0 D(0)``, is ``dM0``, ``dI0`` (whose
    buffers hold ``L(0)``)."""
    i_e, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_h = i_nh // H, i_nh % H
    bos, T, boc = fr._bounds(cu_seqlens, chunk_offsets, i_n, T, CT, IS_VARLEN)
    base = _slots(i_n, boc)
    o_e = i_e * BE + tl.arange(0, BE)
    m_e = o_e < P * N
    o_t = tl.arange(0, CT)
    o_state = i_nh.to(tl.int64) * P * N + o_e
    if USE_FINAL_STATE_GRADIENT:
        b_dm = tl.load(dmT + o_state, mask=m_e, other=0).to(ACC)
        b_di = tl.load(diT + o_state, mask=m_e, other=0).to(ACC)
    else:
        b_dm = tl.zeros([BE], dtype=ACC)
        b_di = tl.zeros([BE], dtype=ACC)
    NT = tl.cdiv(T, CT)
    for i_r in range(NT - 1):
        i_c = NT - 1 - i_r
        o_l = ((base + i_c - 1) * H + i_h) * P * N
        b_g = tl.load(g + (bos + i_c * CT + o_t) * H + i_h, mask=i_c * CT + o_t < T, other=0).to(ACC)
        b_carry = tl.exp(tl.sum(b_g, 0))
        b_dm = tl.load(lm + o_l + o_e, mask=m_e, other=0) + b_carry * b_dm
        b_di = tl.load(li + o_l + o_e, mask=m_e, other=0) + b_carry * b_di
        tl.store(lm + o_l + o_e, b_dm, mask=m_e)
        tl.store(li + o_l + o_e, b_di, mask=m_e)
    # the first chunk
    b_g = tl.load(g + (bos + o_t) * H + i_h, mask=o_t < T, other=0).to(ACC)
    b_carry = tl.exp(tl.sum(b_g, 0))
    if USE_INITIAL_STATE:
        b_l0 = tl.load(dm0 + o_state, mask=m_e, other=0).to(ACC)
        tl.store(dm0 + o_state, (b_l0 + b_carry * b_dm).to(dm0.dtype.element_ty), mask=m_e)
    if USE_INITIAL_IMPORTANCE:
        b_l0 = tl.load(di0 + o_state, mask=m_e, other=0).to(ACC)
        tl.store(di0 + o_state, (b_l0 + b_carry * b_di).to(di0.dtype.element_ty), mask=m_e)


@triton.jit
def chunk_at(i_ck, chunk_seq, cu_seqlens, chunk_offsets, T, CT: tl.constexpr, IS_VARLEN: tl.constexpr):
    """Global chunk ``i_ck`` (a checkpoint's index): its sequence, that sequence's first token, length and first
    checkpoint, and the chunk's index in the sequence (``chunk_seq`` maps chunks to packed sequences)."""
    if IS_VARLEN:
        i_n = tl.load(chunk_seq + i_ck)
    else:
        i_n = i_ck // tl.cdiv(T, CT)
    bos, T, boc = fr._bounds(cu_seqlens, chunk_offsets, i_n, T, CT, IS_VARLEN)
    return i_n, bos, T, boc, (i_ck - boc).to(tl.int32)


@triton.jit
def palimpsa_bwd_correct_kernel(
    v, k, g, beta, ip, ck_m, ck_i, lm, li, dmT, diT, dv, dk, dg, dbeta, cu_seqlens, chunk_offsets, chunk_seq, T,
    H: tl.constexpr, G: tl.constexpr, P: tl.constexpr, N: tl.constexpr, BP: tl.constexpr, BK: tl.constexpr,
    CT: tl.constexpr, BT: tl.constexpr, USE_BETA: tl.constexpr, USE_FINAL_STATE_GRADIENT: tl.constexpr,
    IS_VARLEN: tl.constexpr, DOT: tl.constexpr, ACC: tl.constexpr, EARLY: tl.constexpr = 0,
):
    """The corrections of one chunk of one head from ``BP`` channels of the adjoint ``(D_M, D_I)`` entering it (in
    ``lm``, ``li``; the last chunk's is the final-state gradient, and without one it has nothing to correct), in
    sub-blocks of ``BT`` tokens. Every correction is linear in the adjoint, so the channel blocks' parts of ``dk``
    and ``dlog_decay`` add up (atomically)."""
    i_ck, i_h, i_pb = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_g = i_h // (H // G)
    i_n, bos, T, boc, i_c = chunk_at(i_ck, chunk_seq, cu_seqlens, chunk_offsets, T, CT, IS_VARLEN)
    t0 = i_c * CT
    n = tl.minimum(CT, T - t0)
    last = i_c == tl.cdiv(T, CT) - 1
    o_p = i_pb * BP + tl.arange(0, BP)
    o_k = tl.arange(0, BK)
    m_pk = (o_p[:, None] < P) & (o_k[None, :] < N)
    o_pk = o_p[:, None] * N + o_k[None, :]  # inside the head's [P, N] state
    o_d = ((_slots(i_n, boc) + i_c) * H + i_h) * P * N
    m_d = m_pk & (o_p[:, None] < tl.where(last, 0, P))  # a slot for every chunk but the last
    b_em = tl.load(lm + o_d + o_pk, mask=m_d, other=0).to(ACC)  # D_M, [BP, BK]
    b_ei = tl.load(li + o_d + o_pk, mask=m_d, other=0).to(ACC)  # D_I
    if USE_FINAL_STATE_GRADIENT:
        o_f = (i_n.to(tl.int64) * H + i_h) * P * N
        m_f = m_pk & (o_p[:, None] < tl.where(last, P, 0))
        b_em += tl.load(dmT + o_f + o_pk, mask=m_f, other=0).to(ACC)
        b_ei += tl.load(diT + o_f + o_pk, mask=m_f, other=0).to(ACC)
    else:
        n = tl.where(last, 0, n)  # a zero adjoint: no sub-block to correct
    b_ip = tl.load(ip).to(ACC)
    o_l = (i_ck.to(tl.int64) * H + i_h) * P * N
    b_cm = tl.load(ck_m + o_l + o_pk, mask=m_pk, other=0).to(ACC)
    b_ci = tl.load(ck_i + o_l + o_pk, mask=m_pk, other=1).to(ACC)
    # <D_M, M_{t-1}> + <D_I, I_{t-1} - I_prior> at the chunk's first token
    b_run = tl.sum(tl.sum(b_em * b_cm + tl.where(m_pk, b_ei * (b_ci - b_ip), 0), 1), 0)
    # the chunk's log decays. Every decay product below is the exponential of a sum of them over the tokens it
    # spans, never of a difference of two running sums: at log decays near -10 per token such sums reach -2500 and
    # their difference would lose ~1e-4 to rounding (all terms have one sign, so a direct sum loses nothing)
    o_c = tl.arange(0, CT)
    b_gc = tl.load(g + (bos + t0 + o_c) * H + i_h, mask=o_c < n, other=0).to(ACC)
    o_b = tl.arange(0, BT)
    before = o_b[:, None] > o_b[None, :]  # [t, r]: r before t
    # [t, r, u]: r < u <= t, the tokens whose decays carry a contribution of token r to token t
    spans = (o_b[None, None, :] > o_b[None, :, None]) & (o_b[None, None, :] <= o_b[:, None, None])
    # EARLY: the local dv, dbeta that a sub-block adds to are loaded at its start (1) or one sub-block ahead (2)
    # instead of after its products, so that their latency overlaps the sub-block's work
    if EARLY == 2:
        o_rows = ((bos + t0 + o_b)[:, None] * H + i_h) * P + o_p[None, :]  # the first sub-block's dv, dbeta rows
        m_first = (o_b < n)[:, None] & (o_p[None, :] < P)
        n_dv = tl.load(dv + o_rows, mask=m_first, other=0)
        if USE_BETA:
            n_db = tl.load(dbeta + o_rows, mask=m_first, other=0)
    for j in range(tl.cdiv(n, BT)):
        o_t = j * BT + o_b
        m_t = o_t < n
        tok = bos + t0 + o_t
        m_tp = m_t[:, None] & (o_p[None, :] < P)
        p_dv = dv + (tok[:, None] * H + i_h) * P + o_p[None, :]
        if USE_BETA:
            p_db = dbeta + (tok[:, None] * H + i_h) * P + o_p[None, :]
        if EARLY == 2:
            e_dv = n_dv
            m_next = ((o_t + BT) < n)[:, None] & (o_p[None, :] < P)
            n_dv = tl.load(p_dv + BT * H * P, mask=m_next, other=0)
            if USE_BETA:
                e_db = n_db
                n_db = tl.load(p_db + BT * H * P, mask=m_next, other=0)
        elif EARLY == 1:
            e_dv = tl.load(p_dv, mask=m_tp, other=0)
            if USE_BETA:
                e_db = tl.load(p_db, mask=m_tp, other=0)
        b_g = tl.load(g + tok * H + i_h, mask=m_t, other=0).to(ACC)
        b_later = tl.sum(tl.where(o_c >= j * BT + BT, b_gc, 0), 0)  # the chunk's tokens after this sub-block
        b_rest = tl.sum(tl.where(before, b_g[:, None], 0), 0)  # this sub-block's tokens after t
        b_after = tl.exp(b_later + b_rest)  # A_t
        m_tk = m_t[:, None] & (o_k[None, :] < N)
        b_k = tl.load(k + (tok[:, None] * G + i_g) * N + o_k[None, :], mask=m_tk, other=0).to(ACC)
        b_v = tl.load(v + (tok[:, None] * H + i_h) * P + o_p[None, :], mask=m_tp, other=0).to(ACC)
        b_mk = tl.dot(b_k, tl.trans(b_em), input_precision=DOT)  # [BT, BP]: D_M k_t
        b_dkc = tl.dot(b_v, b_em, input_precision=DOT)  # [BT, BK]: D_M^T v_t
        b_add = tl.sum(b_v * b_mk, 1)  # v_t . D_M k_t
        if EARLY == 0:
            e_dv = tl.load(p_dv, mask=m_tp, other=0)
        b_dv = e_dv.to(ACC) + b_after[:, None] * b_mk
        tl.store(p_dv, b_dv.to(dv.dtype.element_ty), mask=m_tp)
        if USE_BETA:
            b_b = tl.load(beta + (tok[:, None] * H + i_h) * P + o_p[None, :], mask=m_tp, other=0).to(ACC)
            b_ik = tl.dot(b_k * b_k, tl.trans(b_ei), input_precision=DOT)  # D_I k_t^2
            b_dkc += 2 * b_k * tl.dot(b_b, b_ei, input_precision=DOT)
            b_add += tl.sum(b_b * b_ik, 1)
            if EARLY == 0:
                e_db = tl.load(p_db, mask=m_tp, other=0)
            b_db = e_db.to(ACC) + b_after[:, None] * b_ik
            tl.store(p_db, b_db.to(dbeta.dtype.element_ty), mask=m_tp)
        tl.atomic_add(dk + (tok[:, None] * G + i_g) * N + o_k[None, :], b_after[:, None] * b_dkc, mask=m_tk,
                      sem="relaxed")
        # a_t <D, S_{t-1}>: the sum carried into the sub-block decayed to t, plus its earlier tokens' terms decayed
        b_span = tl.sum(tl.where(spans, b_g[None, None, :], 0), 2)  # [t, r]
        b_w = tl.where(before, tl.exp(b_span), 0)
        b_acc = tl.exp(tl.cumsum(b_g, 0)) * b_run + tl.sum(b_w * b_add[None, :], 1)
        tl.atomic_add(dg + tok * H + i_h, b_after * b_acc, mask=m_t, sem="relaxed")
        b_run = tl.exp(tl.sum(b_g, 0)) * b_run + tl.sum(tl.exp(b_rest) * b_add, 0)


def _splits(config: dict, per_split: int, max_chunks: int, device: torch.device, whole: float | None = None,
            corrections: float = CORRECTIONS) -> int:
    """``NSPLIT``: the config's, or (0) on a GPU the one that costs the fewest chunk walks a program.

    ``per_split`` work items come with each split. The least split count that gives ``WAVES`` waves of eight
    programs per SM decides whether to split at all (1: the sequential kernel runs, or the Gluon pass's whole walks).
    From there, each candidate (it, its doublings, the chunks) is costed as rounds of work over the resident programs
    times the chunks an item walks, and the cheapest wins, the fewer splits on a tie: at B = 1, L = 16384 NSPLIT 32
    takes 39 rounds of one chunk and NSPLIT 4 takes 5 of eight (40), 29.33 against 30.28 ms forward + backward; at
    L = 8192, 8 an SM, every candidate costs 20 and 4 stays (docs/bench/gluon-auto-2026-11-28, call 13). ``whole``
    (the Gluon pass can walk whole sequences, ``WHOLE``): one split is a candidate too, against the others' cost
    plus their carry and corrections (``CORRECTIONS`` of the chunk walks they follow, as the program would walk them
    in perfect rounds): at B = 3, L = 8192 whole walks cost 64 against 16 splits' 59 + 7.0, 42.59 ms against 43.57; at
    B = 2 48 against 39 + 4.7, 30.45 ms against 28.82 (docs/bench/whole-2026-11-28, call 3). ``whole`` is that
    cost in the same units (:func:`_whole_cost`: at the config's programs an SM, or at the occupancy preset where
    whole walks take it); None leaves one split out. ``corrections``: the carry and corrections' share
    (``CORRECTIONS``, or ``CORRECTIONS_FLOAT32`` for float32 inputs). On the CPU (the interpreter) the least split
    count stands."""
    if config.get("NSPLIT", 0):
        return max(1, min(int(config["NSPLIT"]), max_chunks))
    sms = _sms(device)
    least = max(1, min(max_chunks, triton.cdiv(WAVES * 8 * sms, per_split)))
    if least == 1 or device.type != "cuda":
        return least
    resident = _per_sm(config) * sms
    candidates, n = {least, max_chunks}, least
    extra = 0.0 if whole is None else corrections * per_split * max_chunks / resident
    while n * 2 < max_chunks:
        n *= 2
        candidates.add(n)
    costs = {n: triton.cdiv(n * per_split, resident) * triton.cdiv(max_chunks, n) + extra for n in candidates}
    if whole is not None:
        costs[1] = float(whole)
    return min(costs, key=lambda n: (costs[n], n))


def _sms(device: torch.device) -> int:
    """The SMs that the persistent programs are counted over: the GPU's, or one on the CPU (the interpreter)."""
    return fr._sm_count(device) if device.type == "cuda" else 1


def _per_sm(config: dict) -> int:
    """The resident programs an SM that the split choice and the program time count with: ``PROGRAMS_PER_SM``, or
    8 where it is 0 (a program a work item, which the GPU still runs 8 an SM at a time)."""
    per_sm = int(config.get("PROGRAMS_PER_SM", 8))
    return per_sm if per_sm > 0 else 8


def _programs(config: dict, n_work: int, device: torch.device) -> int:
    """The local pass's persistent programs: at most as many as stay resident (``PROGRAMS_PER_SM`` per SM), and no
    more than the rounds of work items they take need (5120 items over 1056 resident programs take 5 rounds, which
    1024 programs give as well). Each keeps one scratch slab, so the scratch is at most one slab per resident
    program whatever ``NSPLIT``."""
    per_sm = int(config["PROGRAMS_PER_SM"])
    if per_sm <= 0:
        return n_work
    resident = max(1, per_sm * _sms(device))
    n_work = max(1, n_work)
    return triton.cdiv(n_work, triton.cdiv(n_work, resident))


def _program_time(config: dict, per_split: int, max_chunks: int, device: torch.device) -> float:
    """The Gluon local pass's time under ``config`` in chunk walks of one program, times its programs an SM: the
    rounds of work items over the resident programs, times the chunks an item walks (``_splits``'s cost), times the
    programs an SM, as an SM shares its issue slots among them (measured: 12 an SM with SEG 2 take 0.837 ms a
    round of one chunk at 2.7b shapes, 8 with SEG 4 take 0.568; gluon-auto-2026-11-28, call 13). Infinite where
    nothing splits (the sequential kernel runs; ``chunked_backward`` has returned before it compares)."""
    config = {**config, "PROGRAMS_PER_SM": int(config["LOCAL_PROGRAMS_PER_SM"]) or int(config["PROGRAMS_PER_SM"])}
    nsplit = _splits(config, per_split, max_chunks, device)
    if nsplit == 1 and not config.get("NSPLIT"):
        return float("inf")
    per_sm = _per_sm(config)
    resident = per_sm * _sms(device)
    return triton.cdiv(nsplit * per_split, resident) * triton.cdiv(max_chunks, nsplit) * per_sm


def _whole_time(config: dict, per_split: int, max_chunks: int, device: torch.device) -> float:
    """:func:`_program_time` of whole walks (one split): the rounds of work items over the resident programs, times
    the chunks of the longest sequence, times the programs an SM."""
    per_sm = _per_sm({"PROGRAMS_PER_SM": int(config["LOCAL_PROGRAMS_PER_SM"]) or int(config["PROGRAMS_PER_SM"])})
    return triton.cdiv(per_split, per_sm * _sms(device)) * max_chunks * per_sm


def _whole_cost(config: dict, keys: dict, per_split: int, max_chunks: int, device: torch.device) -> float:
    """Whole walks' cost in :func:`_splits`'s units (rounds of one chunk at the config's programs an SM): at the
    config's programs an SM, or at the preset's ``keys`` (:func:`_whole_preset`) where :func:`_whole_time` takes
    them, its time a unit of work there scaled by ``PRESET_SPEED``. At B = 1, L = 8192 (2.7b shapes) that is 24 x
    0.95 = 22.8 against 4 splits' 20 + 2.3 (16-bit) or + 3.5 (float32): bf16 keeps the split (measured: 14.82 ms
    both ways), float32 under TF32 walks whole (14.34 against 15.09; docs/bench/start-ahead-2026-11-28, calls 1-2)."""
    per_sm = _per_sm(config)
    base = float(triton.cdiv(per_split, per_sm * _sms(device)) * max_chunks)
    if _whole_takes_preset(config, keys, per_split, max_chunks, device):
        there = _whole_time({**config, **keys}, per_split, max_chunks, device)
        return min(base, there / per_sm * PRESET_SPEED)
    return base


def _whole_takes_preset(config: dict, keys: dict, per_split: int, max_chunks: int, device: torch.device) -> bool:
    """Whether whole walks run at the preset's ``keys`` (:func:`_whole_preset`; none: never): where they cost less
    program time there than at the config's programs an SM (:func:`_whole_time`). The split choice costs them so
    (:func:`_whole_cost`) and the launch takes them so (where the preset's kernel can be built)."""
    return bool(keys) and (_whole_time({**config, **keys}, per_split, max_chunks, device)
                           < _whole_time(config, per_split, max_chunks, device))


def _whole_preset(config: dict, bwd_config: dict) -> dict:
    """The ``OCCUPANCY`` preset that whole walks may take (``WHOLE_OCCUPANCY``; ``chunked_backward`` takes it where
    it costs less program time, :func:`_whole_time`): none where the key is 0 or 8, where ``PALIMPSA_GLUON_LOCAL_
    PROGRAMS`` pins 8 programs an SM, or where the caller set one of ``OCCUPANCY_FIT_KEYS`` (in ``bwd_config``, or
    in ``CHUNKED_CONFIG`` since import); its other keys give way one by one to a caller's own."""
    programs = int(config.get("WHOLE_OCCUPANCY", 0))
    if programs and programs not in OCCUPANCY:
        raise ValueError(f"bwd_config WHOLE_OCCUPANCY must be 0 or one of {', '.join(map(str, OCCUPANCY))} (programs "
                         f"an SM for whole walks), not {programs}")
    if not programs or not OCCUPANCY[programs] or os.environ.get(PROGRAMS_ENV, "").strip() == "8":
        return {}
    if any(key in bwd_config or CHUNKED_CONFIG.get(key) != _SHIPPED.get(key) for key in OCCUPANCY_FIT_KEYS):
        return {}
    return {key: value for key, value in OCCUPANCY[programs].items()
            if key in OCCUPANCY_FIT_KEYS or (key not in bwd_config and CHUNKED_CONFIG.get(key) == _SHIPPED.get(key))}


def _names_triton_pass_keys(bwd_config: dict) -> bool:
    """Whether ``bwd_config``, or ``CHUNKED_CONFIG`` as changed since import, sets a key of the Triton pass alone."""
    return any(key in bwd_config or CHUNKED_CONFIG.get(key) != _SHIPPED.get(key) for key in TRITON_PASS_KEYS)


def _gluon_plan(config, bwd_config, v, k, beta, du, dy, block_size):
    """The ``gluon_local`` module where the local pass will run in Gluon (``LOCAL`` "gluon" or "auto"), None where
    it cannot run these inputs or settings (``gluon_local.unsupported``, ``BV`` other than 4) and the Triton pass
    runs instead. The Triton pass's own keys (``TRITON_PASS_KEYS``) do not apply to it, so ``auto`` leaves a config
    that sets one to the Triton pass, as it does every call after a failed launch (``GLUON_LOCAL_FAILED``)."""
    if config["LOCAL"] == "triton":
        return None
    if config["LOCAL"] == "auto" and (_names_triton_pass_keys(bwd_config) or GLUON_LOCAL_FAILED is not None):
        return None
    try:
        from . import gluon_local
    except ImportError:  # a Triton whose Gluon differs from every version gluon_local knows
        return None
    reason = gluon_local.unsupported(v, k, beta, du, dy, block_size=block_size, seg=int(config["SEG"]),
                                    fast_exp=fr._fast_exp(v, config))
    if reason is not None or int(config["BV"]) != gluon_local.BV:
        return None
    return gluon_local


def _failure(error: BaseException) -> str:
    """A failed local pass's error in one line (its type and its message's first line), for the ``*_FAILED`` flags."""
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return f"{type(error).__name__}: {first}"


def _cuda_failure(choice: str, launch) -> str | None:
    """``launch()`` of a CUDA kernel chosen by ``choice`` ("auto" or "cuda"): under "auto" a compile or load error
    (or a missing library) comes back summarised (``_failure``) for the caller to give up the kernel; otherwise, and
    for any other error, it propagates. None where it launched."""
    from . import cuda_build

    try:
        launch()
    except (cuda_build.CompileError, cuda_build.LoadError, OSError) as error:
        if choice != "auto":
            raise
        return _failure(error)
    return None


def _cuda_plan(config, bwd_config, v, k, q, beta, log_decay, dy, du, chunk_size, n_work) -> bool:
    """Whether the local pass runs in CUDA C++ (``cuda_local``, tensor-core state updates): where ``LOCAL`` is
    "cuda", wherever it can run (else an error saying why); under "auto" where it can run, has not failed to compile
    in this process (``CUDA_LOCAL_FAILED``), the config (or ``CHUNKED_CONFIG`` as changed since import) names no key
    of the Triton or Gluon pass and no occupancy preset, and its ``n_work`` work items with a chunk number
    ``AUTO_CUDA_ROUNDS`` an SM. It was 14% faster than the Gluon pass alone at B = 1, L = 8192 (9.54 against 11.20
    ms on an H200; docs/bench/cuda-mma-2026-11-29). Keys and queries come in the values' dtype, or in 16 bits beside
    float32 values (fine-tuning's float32 values with bf16 keys: as close to float64 as the Gluon pass,
    docs/bench/cuda-correct-2026-11-29); other mixes only under "cuda"."""
    if config["LOCAL"] not in ("cuda", "auto"):
        return False
    from . import cuda_local

    reason = cuda_local.unsupported(v, k, q, beta, log_decay, dy, du, chunk_size)
    if config["LOCAL"] == "cuda":
        if reason is not None:
            raise ValueError(f"the CUDA local pass cannot run here ({reason}); use LOCAL auto, gluon or triton")
        return True
    mixed = k.dtype != v.dtype and not (v.dtype == torch.float32 and k.dtype in (torch.bfloat16, torch.float16))
    if (reason is not None or mixed or CUDA_LOCAL_FAILED is not None or occupancy_preset()
            or _names_triton_pass_keys(bwd_config)
            or any(key in bwd_config or CHUNKED_CONFIG.get(key) != _SHIPPED.get(key) for key in GLUON_PASS_KEYS)):
        return False
    low, high = AUTO_CUDA_ROUNDS
    return low <= n_work / fr._sm_count(v.device) <= high


def _cuda_local(config, v, k, q, log_decay, beta, ip, ck_m, ck_i, dy, lm, li, buffers, cu_seqlens, offsets,
                n_states, max_chunks, chunk_size) -> bool:
    """The local pass in CUDA C++ (``CUDA_PROBE``: timing bits of ``cuda_local``, which leave parts out and give
    wrong gradients): False where, under ``LOCAL`` "auto", its compile or load failed, which warns once and leaves
    this and every later call to the other passes (``CUDA_LOCAL_FAILED``); under "cuda", and for any other error,
    the error propagates."""
    global CUDA_LOCAL_FAILED
    from . import cuda_local

    dv, dk, dq, dg, dbeta, dm0, di0 = buffers
    failed = _cuda_failure(config["LOCAL"], lambda: cuda_local.launch(
        v, k, q, log_decay, beta, ip, ck_m, ck_i, dy, lm, li, dv, dk, dq, dg, dbeta, dm0, di0, cu_seqlens, offsets,
        n_states, max_chunks, chunk_size, probe=int(config.get("CUDA_PROBE", 0)), tsub=config.get("CUDA_TSUB"),
        defines=str(config.get("CUDA_DEFINES", ""))))
    if failed:
        CUDA_LOCAL_FAILED = failed
        warnings.warn(f"the CUDA local pass of the chunk-parallel backward failed ({CUDA_LOCAL_FAILED}); this and "
                      "every later backward of this process run the Gluon or Triton pass", stacklevel=2)
        return False
    return True


def correct_default() -> str:
    """The corrections that a config without ``CORRECT`` runs: ``CHUNKED_CONFIG``'s where a caller changed it, else
    ``PALIMPSA_CHUNKED_CORRECT`` where set, else the shipped ``auto``."""
    return _default("CORRECT", CORRECT_ENV, CORRECTS)


def _default(key: str, env: str, choices: tuple) -> str:
    """``CHUNKED_CONFIG[key]`` where a caller changed it from the shipped value, else the variable ``env`` where set,
    else the shipped value; a ValueError naming where a value not among ``choices`` came from."""
    if CHUNKED_CONFIG[key] != _SHIPPED[key] or not os.environ.get(env):
        value, source = CHUNKED_CONFIG[key], f"chunked_bwd.CHUNKED_CONFIG['{key}']"
    else:
        value, source = os.environ[env], env
    if value not in choices:
        raise ValueError(f"{source} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _cuda_correct_plan(config, v, k, beta, chunk_size, dot) -> bool:
    """Whether the corrections run in CUDA C++ (``cuda_correct``): under ``CORRECT`` "cuda" wherever they can (else
    an error saying why); under "auto" where they can, their products would be TF32 anyway (``dot``), they have not
    failed to compile or load in this process and the config sets no key of the Triton kernel's
    (``CORRECT_TRITON_KEYS``) to other than its shipped value."""
    if config["CORRECT"] not in ("cuda", "auto"):
        return False
    from . import cuda_correct

    reason = cuda_correct.unsupported(v, k, beta, chunk_size)
    if config["CORRECT"] == "cuda":
        if reason is not None:
            raise ValueError(f"the CUDA corrections cannot run here ({reason}); use CORRECT auto or triton")
        return True
    return (reason is None and dot == "tf32" and CUDA_CORRECT_FAILED is None
            and not any(config.get(key) != _SHIPPED.get(key) for key in CORRECT_TRITON_KEYS))


def _cuda_correct(config, v, k, log_decay, beta, ip, ck_m, ck_i, lm, li, dm_t, di_t, buffers, cu_seqlens, offsets,
                  chunk_seq, n_chunks, chunk_size, use_final_grad) -> bool:
    """The corrections in CUDA C++: False where, under ``CORRECT`` "auto", their compile or load failed, which warns
    once and leaves this and every later call to the Triton kernel (``CUDA_CORRECT_FAILED``); under "cuda", and for
    any other error, the error propagates. Nothing is written before a compile or load error (the kernel is
    compiled and loaded before its launch)."""
    global CUDA_CORRECT_FAILED
    from . import cuda_correct

    dv, dk, dq, dg, dbeta, dm0, di0 = buffers
    failed = _cuda_failure(config["CORRECT"], lambda: cuda_correct.launch(
        v, k, log_decay, beta, ip, ck_m, ck_i, lm, li, dm_t, di_t, dv, dk, dg, dbeta, cu_seqlens, offsets, chunk_seq,
        n_chunks, chunk_size, use_final_grad, order=int(config.get("CORRECT_ORDER", 0))))
    if failed:
        CUDA_CORRECT_FAILED = failed
        warnings.warn(f"the CUDA corrections of the chunk-parallel backward failed ({CUDA_CORRECT_FAILED}); this and "
                      "every later backward of this process run the Triton corrections", stacklevel=2)
        return False
    return True


def _gluon_local(gluon_local, config, v, k_l, q_l, log_decay, beta, ip, ck_m, ck_i, dy, sc_m, sc_i, lm, li,
                 buffers, cu_seqlens, offsets, length, n_nh, n_work, programs, chunk_size, block_size, nsplit,
                 final=None, retry=False):
    """The local pass in Gluon (``gluon_local``, as ``_gluon_plan`` found it), with the Triton pass's slab and
    outputs (``final``: whole sequences from this final-state gradient, ``(dM_T, dI_T)`` or ``(None, None)``,
    ``WHOLE``): the ``LOCAL_RUNS`` key of what ran, or None where its launch raised (a compilation error) under
    ``auto``, which warns once and leaves this and every later call to the Triton pass (``GLUON_LOCAL_FAILED``);
    with ``retry`` (a launch the caller will try again in another form) it only returns None; under ``gluon`` the
    error propagates."""
    global GLUON_LOCAL_FAILED
    dv, dk, dq, dg, dbeta, dm0, di0 = buffers
    try:
        gluon_local.launch(
            v, k_l, q_l, log_decay, beta, ip, ck_m, ck_i, dy, sc_m, sc_i, lm, li, dv, dk, dq, dg, dbeta, dm0, di0,
            cu_seqlens, offsets, length, n_nh, n_work, programs, chunk_size=chunk_size, block_size=block_size,
            seg=int(config["SEG"]), nsplit=nsplit, prefetch=bool(config["PREFETCH"]),
            rescale=fr._rescales(config, True), pipe=bool(config["PIPE"]), stage=int(config["STAGE"]),
            l2_prefetch=int(config["L2PF"]), maxnreg=int(config["LOCAL_MAXNREG"]), use_initial_state=dm0 is not None,
            use_initial_importance=di0 is not None, walk_rescale=bool(config["WALK_RESCALE"]),
            widen=bool(config["WIDEN"]), whole=final is not None, dm_t=None if final is None else final[0],
            di_t=None if final is None else final[1])
    except Exception as error:  # each Triton version raises its own compilation errors
        if config["LOCAL"] != "auto":
            raise
        if retry:
            return None
        GLUON_LOCAL_FAILED = _failure(error)
        warnings.warn(f"the Gluon local pass of the chunk-parallel backward failed ({GLUON_LOCAL_FAILED}); this "
                      f"process runs the Triton pass instead (set {LOCAL_ENV}=triton to skip the attempt)",
                      RuntimeWarning, stacklevel=2)
        return None
    return "gluon" if final is None else "gluon-whole"


def local_runs_since(before: dict) -> dict:
    """The local passes that ran since ``before`` (a copy of ``LOCAL_RUNS``) and how many times each."""
    return {k: n - before.get(k, 0) for k, n in LOCAL_RUNS.items() if n > before.get(k, 0)}


def occupancy_preset() -> dict:
    """The ``OCCUPANCY`` preset that ``PALIMPSA_GLUON_LOCAL_PROGRAMS`` names: none where unset, or where a caller
    changed one of ``OCCUPANCY_FIT_KEYS`` in ``CHUNKED_CONFIG`` (``chunked_backward`` also leaves it out where the
    ``bwd_config`` names one): those go together, since a program count fits an SM only with the segment length and
    register cap it was measured with (12 programs of ``SEG`` 4 need more shared memory than an SM has). Its other
    keys (``WALK_RESCALE``, ``WIDEN``) are left out one by one where a caller changed them."""
    value = os.environ.get(PROGRAMS_ENV, "").strip()
    if not value:
        return {}
    if value not in {str(n) for n in OCCUPANCY}:
        raise ValueError(f"{PROGRAMS_ENV} must be {' or '.join(map(str, OCCUPANCY))} (programs an SM of the Gluon "
                         f"local pass), got {value!r}")
    preset = OCCUPANCY[int(value)]
    if any(CHUNKED_CONFIG.get(key) != _SHIPPED.get(key) for key in OCCUPANCY_FIT_KEYS):
        return {}
    return {key: value for key, value in preset.items()
            if key in OCCUPANCY_FIT_KEYS or CHUNKED_CONFIG.get(key) == _SHIPPED.get(key)}


def local_default() -> str:
    """The local pass that a ``bwd_config`` without ``LOCAL`` runs: ``CHUNKED_CONFIG``'s where a caller changed it,
    else ``PALIMPSA_CHUNKED_LOCAL`` where set, else the shipped ``auto`` (the CUDA pass where ``_cuda_plan`` takes it,
    else the Gluon pass where it can run, the Triton pass elsewhere)."""
    return _default("LOCAL", LOCAL_ENV, LOCALS)


def _recompute_options(config: dict) -> dict:
    """The local pass's ``GROUP``, ``GAUGE`` and ``RELOAD`` from a config (quads always take the decay gradient
    from the token's own state; ``RELOAD`` defaults to on with quads)."""
    group = int(config["GROUP"])
    return {"GROUP": group, "GAUGE": bool(config["GAUGE"]), "RELOAD": bool(config.get("RELOAD", group == 4))}


def _dot_precision(name: str, dtype: torch.dtype, full: str = "ieee") -> str:
    """``tl.dot``'s ``input_precision`` for ``DOT`` ``name``: as named, or for "auto" TF32 where the inputs are 16-bit
    or PyTorch allows TF32 for float32 (its float32 matmul precision not "highest"), IEEE for float64, and ``full``
    for float32 at full precision (IEEE here; the chunked forward passes its ``FULL_PRECISION_DOT``)."""
    if name != "auto":
        return name
    if dtype == torch.float64:
        return "ieee"
    if dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest":
        return full
    return "tf32"


def _block_p(dot: str) -> int:
    """Channels a correction program (or a chunked forward's local program) takes: 16 for the products that need
    more registers (IEEE's FMA form; tf32x3's three products, which spill at 32 channels and 4 warps under Triton
    3.6 and 3.9), 32 with TF32."""
    return 16 if dot in ("ieee", "tf32x3") else 32


def _correct_warps(dot: str) -> int:
    return 8 if dot in ("ieee", "tf32x3") else 4


def _sizes(config: dict, dtype: torch.dtype, head_dim: int, state_size: int, chunk_size: int, on_gpu: bool) -> dict:
    """The launches' block sizes and the corrections' precision and warps, from the config (0: the precision's
    default). tl.dot wants every dimension >= 16 on a GPU; the interpreter takes any, which the tests use to split
    the channels of the corrections."""
    least = 16 if on_gpu else 1
    dot = _dot_precision(config["DOT"], dtype)
    return {"BV": min(int(config["BV"]), triton.next_power_of_2(head_dim)),
            "BK": triton.next_power_of_2(state_size),
            "BE": min(1024, triton.next_power_of_2(head_dim * state_size)),
            "BP": max(least, min(int(config["BP"]) or _block_p(dot), triton.next_power_of_2(head_dim))),
            "BKC": max(least, triton.next_power_of_2(state_size)),
            "BT": max(least, min(int(config["BT"]), chunk_size)),
            "DOT": dot, "correct_warps": int(config["correct_warps"]) or _correct_warps(dot)}


def _marker():
    """``mark(name)`` closes the launch before (if any) and opens ``name`` (None: only closes), with CUDA events
    appended to ``TIMINGS`` where it is a list; a no-op otherwise."""
    if TIMINGS is None or not torch.cuda.is_available():
        return lambda name: None
    current = []

    def mark(name):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        if current:
            TIMINGS.append((current.pop(), current.pop(), event))
        if name is not None:
            current.extend([event, name])

    return mark


def chunked_backward(v, k, q, log_decay, beta, m0, i0, ip, ck_m, ck_i, cu_seqlens, dy, dm_t, di_t, du, bwd_config,
                     chunk_size, block_size):
    """The gradients of ``v, k, q, log_decay, beta, M0, I0`` (None where absent), as ``fused_recurrent._backward``
    returns them, by the three launches of this module."""
    config = {**CHUNKED_CONFIG, **{key: val for key, val in bwd_config.items() if key != "kernel"}}
    if "LOCAL" not in bwd_config:
        config["LOCAL"] = local_default()
    if "CORRECT" not in bwd_config:
        config["CORRECT"] = correct_default()
    if config["CORRECT"] not in CORRECTS:
        raise ValueError(f"bwd_config CORRECT is 'auto', 'triton' or 'cuda', not {config['CORRECT']!r}")
    batch, length, heads, head_dim = v.shape
    groups, state_size = k.shape[2], k.shape[3]
    n_states = fr._n_states(batch, cu_seqlens)
    offsets = fr._first_checkpoints(cu_seqlens, chunk_size)
    n_chunks = ck_m.shape[0]
    device, state_dtype = v.device, fr._state_dtype(v.dtype)
    acc = fr._acc_dtype(v.dtype)
    sizes = _sizes(config, v.dtype, head_dim, state_size, chunk_size, v.is_cuda)
    n_blocks_v = triton.cdiv(head_dim, sizes["BV"])
    # the longest sequence's chunks bound the useful splits (a packed batch's: all its chunks, an overestimate, so
    # that some splits of the shorter sequences' work items find no chunk)
    max_chunks = triton.cdiv(length, chunk_size) if cu_seqlens is None else n_chunks
    if config["LOCAL"] not in LOCALS:
        raise ValueError(f"bwd_config LOCAL is 'auto', 'triton', 'gluon' or 'cuda', not {config['LOCAL']!r}")
    preset = occupancy_preset()  # read (and a bad value refused) on every call
    per_split = n_blocks_v * n_states * heads
    raw = (dy, dm_t, di_t, du)  # as they came in, for the sequential kernel and a retry
    dy = dy.contiguous()  # the Gluon pass reads it 4 channels at a time: its alignment as launched
    # the CUDA pass's work items that hold a chunk (n_chunks: every sequence's, so no host sync on cu_seqlens)
    cuda = _cuda_plan(config, bwd_config, v, k, q, beta, log_decay, dy, du, chunk_size,
                      n_chunks * heads * (head_dim // 64))
    gluon_local = None if cuda else _gluon_plan(config, bwd_config, v, k, beta, du, dy, block_size)
    # WHOLE: with one split, the Gluon pass walks each sequence whole, carrying the adjoints across its chunks
    can_whole = bool(config["WHOLE"]) and gluon_local is not None
    split = bool(config["SPLIT"])  # SPLIT 0: whole walks or the sequential kernel, never a split
    corrections = CORRECTIONS_FLOAT32 if v.dtype == torch.float32 else CORRECTIONS
    whole_keys = _whole_preset(config, bwd_config) if can_whole else {}
    whole_cost = _whole_cost(config, whole_keys, per_split, max_chunks, device) if can_whole else None
    nsplit = _splits(config, per_split, max_chunks, device, whole_cost, corrections) if split else 1
    whole = nsplit == 1 and can_whole  # (never with the CUDA pass: it leaves gluon_local None)
    if nsplit == 1 and not whole and not cuda and (not config.get("NSPLIT") or not split):
        # the grid fills the GPU without splitting the sequences: the chunked launches would only add the carry and
        # the corrections to the sequential kernel's work
        return _sequential(v, k, q, log_decay, beta, m0, i0, ip, ck_m, ck_i, cu_seqlens, raw, n_states, chunk_size,
                           block_size)
    use_final_grad, dm_t, di_t, dy, du = fr._incoming_gradients(ck_m, n_states, dm_t, di_t, dy, du)
    # the adjoints between chunks: a slot for every chunk but each sequence's last (_slots; none for whole walks)
    slots = 1 if whole else max(1, n_chunks - n_states)
    lm = fr._output((slots, *ck_m.shape[1:]), state_dtype, device)
    li = fr._output((slots, *ck_m.shape[1:]), state_dtype, device)
    # dv, dbeta: the local part in the input dtype, the correction added in float32 and rounded again (for 16-bit
    # inputs at most one more rounding of the local part: a float32 copy would cost 2 x 168 MB at B = 1, L = 8192)
    buffers = fr._gradient_buffers(v, k, q, log_decay, beta, m0, i0)
    mark = _marker()
    if cuda:
        mark("local")
        # the longest sequence's chunks (a packed batch's max_chunks above counts all its chunks, which would number
        # n_states times too many work items)
        longest = max_chunks if cu_seqlens is None else int(fr._chunk_counts(cu_seqlens, chunk_size).max())
        if not _cuda_local(config, v, k, q, log_decay, beta, ip, ck_m, ck_i, dy, lm, li, buffers, cu_seqlens,
                           offsets, n_states, longest, chunk_size):  # failed to compile under auto: the other passes
            return chunked_backward(v, k, q, log_decay, beta, m0, i0, ip, ck_m, ck_i, cu_seqlens, *raw, bwd_config,
                                    chunk_size, block_size)
        LOCAL_RUNS["cuda"] += 1
        return _carry_and_correct(v, k, q, log_decay, beta, m0, i0, ip, ck_m, ck_i, cu_seqlens, dm_t, di_t, lm, li,
                                  buffers, use_final_grad, offsets, n_chunks, n_states, sizes, config, acc, chunk_size,
                                  mark)
    triton_per_sm = int(config["PROGRAMS_PER_SM"])
    whole_preset = False  # whole walks at WHOLE_OCCUPANCY's preset: a failed launch is tried again without it
    if gluon_local is not None:
        trial = {**config, **{key: value for key, value in preset.items() if key not in bwd_config}}
        if (preset and not whole and not any(key in bwd_config for key in OCCUPANCY_FIT_KEYS)
                and _gluon_plan(trial, bwd_config, v, k, beta, du, dy, block_size) is not None
                and _program_time(trial, per_split, max_chunks, device)
                <= _program_time(config, per_split, max_chunks, device)):
            config = trial
        elif whole and _whole_takes_preset(config, whole_keys, per_split, max_chunks, device):
            trial = {**config, **whole_keys}
            if _gluon_plan(trial, bwd_config, v, k, beta, du, dy, block_size) is not None:
                config, whole_preset = trial, True
        config["PROGRAMS_PER_SM"] = int(config["LOCAL_PROGRAMS_PER_SM"]) or triton_per_sm
        if not whole:  # splitting still (the same least count)
            nsplit = _splits(config, per_split, max_chunks, device)
    n_work = nsplit * n_blocks_v * n_states * heads
    programs = _programs(config, n_work, device)
    scratch = (programs * fr.slab_states(chunk_size, block_size, from_checkpoint=True), sizes["BV"], state_size)
    sc_m = torch.empty(scratch, dtype=state_dtype, device=device)
    sc_i = torch.empty(scratch, dtype=state_dtype, device=device)
    dv, dk, dq, dg, dbeta, dm0, di0 = buffers
    common = {"USE_BETA": beta is not None, "IS_VARLEN": cu_seqlens is not None, "ACC": acc}
    initial = {"USE_INITIAL_STATE": m0 is not None, "USE_INITIAL_IMPORTANCE": i0 is not None}
    mark("local")
    k_l, q_l = fr._float32_keys(k, q, bool(config["KQ32"]))
    ran = gluon_local is not None and _gluon_local(
        gluon_local, config, v, k_l, q_l, log_decay, beta, ip, ck_m, ck_i, dy, sc_m, sc_i, lm, li, buffers,
        cu_seqlens, offsets, length, n_states * heads, n_work, programs, chunk_size, block_size, nsplit,
        (dm_t, di_t) if whole else None, retry=whole_preset)
    if whole:
        mark(None)
        if ran:  # every gradient whole: no carry, no corrections
            LOCAL_RUNS[ran] = LOCAL_RUNS.get(ran, 0) + 1
            return fr._input_gradients(buffers, k, q, log_decay, m0, i0)
        # the launch failed: at the preset, chosen again as under WHOLE_OCCUPANCY 0 (whole walks at the default
        # occupancy, or the split where the choice costs those higher); otherwise (under "auto", GLUON_LOCAL_FAILED
        # set now) as without the Gluon pass
        del sc_m, sc_i, lm, li, buffers
        again = {**bwd_config, "WHOLE_OCCUPANCY": 0} if whole_preset else bwd_config
        return chunked_backward(v, k, q, log_decay, beta, m0, i0, ip, ck_m, ck_i, cu_seqlens, *raw, again,
                                chunk_size, block_size)
    label = ran or "triton"
    LOCAL_RUNS[label] = LOCAL_RUNS.get(label, 0) + 1
    if not ran:
        if int(config["PROGRAMS_PER_SM"]) != triton_per_sm:  # a Gluon launch failed: the Triton pass's own count
            programs = min(programs, _programs({**config, "PROGRAMS_PER_SM": triton_per_sm}, n_work, device))
        palimpsa_bwd_local_kernel[(programs,)](
            v, k_l, q_l, log_decay, beta, ip, ck_m, ck_i, dy, du, sc_m, sc_i, lm, li,
            dv, dk, dq, dg, dbeta, dm0, di0, cu_seqlens, offsets, length, n_states * heads, n_work,
            H=heads, G=groups, P=head_dim, N=state_size, BV=sizes["BV"], BK=sizes["BK"], CT=chunk_size, BS=block_size,
            NSPLIT=nsplit, USE_DU=du is not None, TRANS=config["TRANS"], FAST_RCP=fr._fast_rcp(ip),
            PREFETCH=fr._prefetches(v, config), PROBE=int(config["PROBE"]),
            PAIRSUM=fr._pair_sums(v, beta, config, sizes["BK"]),
            CHAIN=fr._chains(config, sizes["BV"], sizes["BK"], fr._compiled(v)),
            FAST_EXP=fr._fast_exp(v, config), RESCALE=fr._rescales(config, True),
            **_recompute_options(config),
            num_warps=config["num_warps"], maxnreg=int(config["maxnreg"]) or None, **initial, **common, **fr.FP_FUSION,
        )
    del sc_m, sc_i
    return _carry_and_correct(v, k, q, log_decay, beta, m0, i0, ip, ck_m, ck_i, cu_seqlens, dm_t, di_t, lm, li, buffers,
                              use_final_grad, offsets, n_chunks, n_states, sizes, config, acc, chunk_size, mark)


def _carry_and_correct(v, k, q, log_decay, beta, m0, i0, ip, ck_m, ck_i, cu_seqlens, dm_t, di_t, lm, li, buffers,
                       use_final_grad, offsets, n_chunks, n_states, sizes, config, acc, chunk_size, mark):
    """The carry and the corrections after a local pass (launches 2 and 3): the input gradients."""
    batch, length, heads, head_dim = v.shape
    groups, state_size = k.shape[2], k.shape[3]
    device = v.device
    dv, dk, dq, dg, dbeta, dm0, di0 = buffers
    common = {"USE_BETA": beta is not None, "IS_VARLEN": cu_seqlens is not None, "ACC": acc}
    initial = {"USE_INITIAL_STATE": m0 is not None, "USE_INITIAL_IMPORTANCE": i0 is not None}
    mark("carry")
    palimpsa_bwd_carry_kernel[(triton.cdiv(head_dim * state_size, sizes["BE"]), n_states * heads)](
        log_decay, lm, li, dm_t, di_t, dm0, di0, cu_seqlens, offsets, length,
        H=heads, P=head_dim, N=state_size, CT=chunk_size, BE=sizes["BE"], USE_FINAL_STATE_GRADIENT=use_final_grad,
        IS_VARLEN=cu_seqlens is not None, ACC=acc, num_warps=4, **initial, **fr.FP_FUSION,
    )
    mark("correct")
    chunk_seq = None
    if cu_seqlens is not None:
        counts = fr._chunk_counts(cu_seqlens, chunk_size)
        chunk_seq = torch.repeat_interleave(torch.arange(n_states, device=device, dtype=torch.int32), counts,
                                            output_size=n_chunks)
    if _cuda_correct_plan(config, v, k, beta, chunk_size, sizes["DOT"]) and _cuda_correct(
            config, v, k, log_decay, beta, ip, ck_m, ck_i, lm, li, dm_t, di_t, buffers, cu_seqlens, offsets,
            chunk_seq, n_chunks, chunk_size, use_final_grad):
        CORRECT_RUNS["cuda"] += 1
        mark(None)
        return fr._input_gradients(buffers, k, q, log_decay, m0, i0)
    CORRECT_RUNS["triton"] += 1
    palimpsa_bwd_correct_kernel[(n_chunks, heads, triton.cdiv(head_dim, sizes["BP"]))](
        v, k, log_decay, beta, ip, ck_m, ck_i, lm, li, dm_t, di_t, dv, dk, dg, dbeta, cu_seqlens, offsets,
        chunk_seq, length, H=heads, G=groups, P=head_dim, N=state_size, BP=sizes["BP"], BK=sizes["BKC"],
        CT=chunk_size, BT=sizes["BT"], DOT=sizes["DOT"], USE_FINAL_STATE_GRADIENT=use_final_grad,
        EARLY=int(config["correct_early"]), num_warps=sizes["correct_warps"], **common, **fr.FP_FUSION,
    )
    mark(None)
    return fr._input_gradients(buffers, k, q, log_decay, m0, i0)


def _sequential(v, k, q, log_decay, beta, m0, i0, ip, ck_m, ck_i, cu_seqlens, raw, n_states, chunk_size,
                block_size):
    """The sequential backward (``fused_recurrent._backward``) on the output gradients as they came in (``raw``:
    ``dy``, ``dM_T``, ``dI_T``, ``du``)."""
    dy, dm_t, di_t, du = raw
    return fr._backward(v, k, q, log_decay, beta, m0, i0, ip, ck_m, ck_i, cu_seqlens, dy, dm_t, di_t, du,
                        fr._backward_config(n_states, v.shape[2], v.shape[3], v.device), chunk_size, block_size)


def compile_kernels(*, dtype: str = "bf16", heads: int = 80, groups: int = 1, head_dim: int = 64,
                    state_size: int = 128, chunk_size: int = 256, block_size: int = 8, arch: int = 90,
                    config: dict | None = None) -> dict:
    """The three kernels compiled for ``sm_<arch>a`` without a GPU (``triton.compile`` with a GPU target, every
    pointer 16-byte aligned, beta on, no states in or out, no ``du``), at the launch ``chunked_backward`` makes on
    a GPU: ``{name: resource usage}`` (``gluon_scan.resource_usage``: registers, stack, shared memory)."""
    config = {**CHUNKED_CONFIG, **(config or {})}
    sizes = _sizes(config, {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype, torch.float32), head_dim,
                   state_size, chunk_size, on_gpu=True)
    low = {n: f"*{dtype}" for n in ("v", "k", "q", "beta", "dy", "du")}
    low.update({"cu_seqlens": "*i32", "chunk_offsets": "*i32", "chunk_seq": "*i32"})
    acc = tl.float32
    shape = {"H": heads, "P": head_dim, "N": state_size, "CT": chunk_size}
    launches = {
        "local": (palimpsa_bwd_local_kernel, config["num_warps"], {
            **shape, "G": groups, "BV": sizes["BV"], "BK": sizes["BK"], "BS": block_size,
            "NSPLIT": max(1, config["NSPLIT"]), "USE_BETA": True, "USE_INITIAL_STATE": False,
            "USE_INITIAL_IMPORTANCE": False, "USE_DU": False, "IS_VARLEN": False, "TRANS": config["TRANS"],
            "FAST_RCP": True, "ACC": acc, "PREFETCH": bool(config["PREFETCH"]), "PROBE": int(config["PROBE"]),
            "PAIRSUM": bool(config["PAIRSUM"]), "CHAIN": fr._chains(config, sizes["BV"], sizes["BK"], True),
            "FAST_EXP": bool(config["FAST_EXP"]), "RESCALE": fr._rescales(config, True),
            **_recompute_options(config)}),
        "carry": (palimpsa_bwd_carry_kernel, 4, {
            **shape, "BE": sizes["BE"], "USE_FINAL_STATE_GRADIENT": False, "USE_INITIAL_STATE": False,
            "USE_INITIAL_IMPORTANCE": False, "IS_VARLEN": False, "ACC": acc}),
        "correct": (palimpsa_bwd_correct_kernel, sizes["correct_warps"], {
            **shape, "G": groups, "BP": sizes["BP"], "BK": sizes["BKC"], "BT": sizes["BT"], "USE_BETA": True,
            "USE_FINAL_STATE_GRADIENT": False, "IS_VARLEN": False, "DOT": sizes["DOT"], "ACC": acc,
            "EARLY": int(config["correct_early"])}),
    }
    # the local pass reads float32 copies of 16-bit keys and queries (KQ32)
    local_low = {**low, "k": "*fp32", "q": "*fp32"} if config["KQ32"] else low
    return {name: compile_launch(kernel, warps, constexprs, local_low if name == "local" else low, arch,
                                 (int(config["maxnreg"]) or None) if name == "local" else None)
            for name, (kernel, warps, constexprs) in launches.items()}


def compile_launch(kernel, num_warps: int, constexprs: dict, low: dict, arch: int = 90,
                   maxnreg: int | None = None) -> dict:
    """One kernel compiled for ``sm_<arch>a`` without a GPU: every pointer 16-byte aligned and of the type ``low``
    names (``*fp32`` otherwise), ``T``, ``n_nh``, ``n_work`` 32-bit integers; its resource usage
    (``gluon_scan.resource_usage``), ``prefetches`` (the L1 prefetches in its PTX), ``shuffles`` (its PTX's
    ``shfl.sync``), ``fmas`` (its PTX's ``fma.rn.f32``) and ``butterfly_lanes``: for every tensor type that
    ``PAIRSUM``'s butterflies shuffle, which element each lane-index bit moves to (:func:`lane_bases`); they need
    lane ``l`` to hold index ``l`` of the last axis, ``[[0, 1], [0, 2], [0, 4], [0, 8], [0, 16]]`` for ``[BV, 32]``
    partials and ``[[1], ..., [16]]`` for ``[32]``."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from .gluon_scan import resource_usage

    integers = [p for p in kernel.arg_names if p in ("T", "n_nh", "n_work")]
    pointers = [p for p in kernel.arg_names if p not in constexprs and p not in integers]
    signature = {p: low.get(p, "*fp32") for p in pointers}
    signature.update({p: "i32" for p in integers})
    signature.update({c: "constexpr" for c in constexprs})
    attrs = {(index,): [["tt.divisibility", 16]] for index in range(len(pointers))}
    compiled = triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": num_warps, **fr.FP_FUSION,
                                       **({"maxnreg": maxnreg} if maxnreg else {})})
    ptx, ttgir = compiled.asm["ptx"], compiled.asm["ttgir"]
    operands = re.findall(r"elementwise_inline_asm \"[^\n]*?shfl\.sync\.bfly[^\n]*?: (tensor<[^\n]*?) ->", ttgir)
    return {**resource_usage(compiled), "prefetches": ptx.count("prefetch.global.L1"),
            "shuffles": ptx.count("shfl.sync"), "fmas": ptx.count("fma.rn.f32"),
            "butterfly_lanes": sorted({str(lane_bases(ttgir, t)) for t in operands})}


def lane_bases(ttgir: str, tensor_type: str) -> list:
    """Which element of a one-warp tensor (``tensor<AxBxf32, #layout>`` as TTGIR writes it) each of the 5 lane-index
    bits moves to: a coordinate list per bit, from the layout's definition in ``ttgir`` (``#ttg.blocked``,
    ``#ttg.linear``, or a ``#ttg.slice`` of either, whose sliced axis is dropped)."""
    depth, start = 0, tensor_type.index("tensor<") + len("tensor<")
    for end in range(start, len(tensor_type)):  # the type's own closing bracket (layouts nest brackets)
        depth += {"<": 1, ">": -1}.get(tensor_type[end], 0)
        if depth < 0:
            break
    return _layout_lanes(ttgir, tensor_type[start:end].split(", ", 1)[1])


def _layout_lanes(ttgir: str, layout: str) -> list:
    sliced = re.fullmatch(r"#ttg\.slice<\{dim = (\d+), parent = (.+)\}>", layout)
    if sliced:
        dim = int(sliced.group(1))
        return [base[:dim] + base[dim + 1:] for base in _layout_lanes(ttgir, sliced.group(2))]
    definition = re.search(rf"^{re.escape(layout)} = (#ttg\.\w+<\{{[^\n]*\}}>)", ttgir, re.MULTILINE)
    text = definition.group(1) if definition else layout
    lists = {key: json.loads(value) for key, value in re.findall(r"(\w+) = (\[[\[\]\d, ]*\])", text)}
    if text.startswith("#ttg.linear"):
        return lists["lane"]
    per_thread, lanes, order = lists["sizePerThread"], lists["threadsPerWarp"], lists["order"]
    bases = []
    for dim in order:  # lane bits fill the fastest axis first
        step = 1
        while step < lanes[dim]:
            bases.append([per_thread[dim] * step if d == dim else 0 for d in range(len(lanes))])
            step *= 2
    return bases
