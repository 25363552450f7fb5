"""The chunk-parallel backward with the Gluon local pass (bwd_config LOCAL="gluon") against the same with the Triton
local pass and against float64 (the PyTorch backend), on inputs without an uncertainty output (the Gluon pass has no
uncertainty gradient and leaves such calls to the Triton one). The record's calls ran it without the packed case's
split, so that case went to the sequential backward there (both columns then the same kernel). Prints one line per
case and gradient: the error of each local pass relative to the float64 gradient's largest magnitude. Exit status 1
if a Gluon error exceeds the tolerance (1e-5 float32, 1e-2 bf16) or is more than 4 times the Triton pass's plus
1e-6. The environment's SEG, STAGE, PIPE, L2PF, MAXNREG and PROGRAMS set the Gluon pass's SEG, STAGE, PIPE, L2PF,
LOCAL_MAXNREG and PROGRAMS_PER_SM (default 4, 0, 0, 0, 0 and 8: what this record ran; WALK_RESCALE and WIDEN, added
by docs/bench/rescaled-walk-2026-11-28 with its three slow-decay cases, default to 1; docs/bench/gluon-stage-2026-11-28
and gluon-auto-2026-11-28 ran the others; STAGE_A, which gluon-auto-2026-11-28's call 5 set, was taken out of the
kernel after it: commit c78be39 is the last with it). The fifth case (bf16 inputs with float32 decays, the kernel's
defaults and what bench_scan.py times) was added after both records' calls
(gluon-auto-2026-11-28's first call ran it)."""

import os
import sys

import torch

os.environ["PALIMPSA_TRITON_BACKWARD"] = "chunked"
from palimpsa.kernels import chunked_bwd, palimpsa_scan  # noqa: E402

H, P, N = 80, 64, 128


def inputs(batch, length, groups, dtype, seed, beta=True, state=False, n_states=None, decays32=False, slow=0.0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    rand = lambda *s: torch.rand(*s, generator=gen, device="cuda", dtype=torch.float64)  # noqa: E731
    randn = lambda *s: torch.randn(*s, generator=gen, device="cuda", dtype=torch.float64)  # noqa: E731
    log_decay = -9 * rand(batch, length, H)
    pick = rand(batch, length, H)
    log_decay = torch.where(pick < 0.3, -1e-4 * (1 + 9 * rand(batch, length, H)), log_decay)
    log_decay = torch.where(pick > 0.85, -8.0 - rand(batch, length, H), log_decay)
    if slow:  # log decays uniform in [-slow, 0]: blocks of 8 whose magnitudes sum to at most 20 walk rescaled
        log_decay = -slow * rand(batch, length, H)
    n_states = batch if n_states is None else n_states
    x = {"v": randn(batch, length, H, P) * 0.5, "k": randn(batch, length, groups, N),
         "q": randn(batch, length, groups, N), "log_decay": log_decay,
         "beta": 10 * rand(batch, length, H, P) if beta else None,
         "M0": randn(n_states, H, P, N) if state else None, "I0": 0.5 + rand(n_states, H, P, N) if state else None}
    wide = ("M0", "I0", "log_decay") if decays32 else ("M0", "I0")
    return {n: None if t is None else t.to(torch.float32 if n in wide else dtype) for n, t in x.items()}


def grads(x, backend, cu_seqlens, dtype=None):
    leaves = {n: t.detach().to(dtype or t.dtype).requires_grad_() for n, t in x.items() if t is not None}
    state = (leaves["M0"], leaves["I0"]) if "M0" in leaves else None
    y, (m, i), _ = palimpsa_scan(leaves["v"], leaves["k"], leaves["q"], leaves["log_decay"], leaves.get("beta"),
                                 importance_prior=0.7, initial_state=state, output_final_state=True,
                                 cu_seqlens=cu_seqlens, backend=backend)
    gen = torch.Generator(device="cuda").manual_seed(99)
    w = [torch.randn(t.shape, generator=gen, device="cuda", dtype=torch.float64) for t in (y, m, i)]
    loss = sum((t.double() * wt).sum() for t, wt in zip((y, m, i), w))
    loss.backward()
    return {n: t.grad.double() for n, t in leaves.items()}


def main():
    cases = [
        ("B1 L2048 G1 bf16 beta", inputs(1, 2048, 1, torch.bfloat16, 1), None, 1e-2),
        ("B1 L3000 G2 f32 beta state", inputs(1, 3000, 2, torch.float32, 2, state=True), None, 1e-5),
        ("B2 L1100 G1 f32 no-beta", inputs(2, 1100, 1, torch.float32, 3, beta=False), None, 1e-5),
        ("varlen 1000/1/2002/1093 G2 f32 beta state",
         inputs(1, 4096, 2, torch.float32, 4, state=True, n_states=4),
         torch.tensor([0, 1000, 1001, 3003, 4096], dtype=torch.int32, device="cuda"), 1e-5),
        # added after both records' calls: bf16 inputs with float32 decays, as a model and bench_scan.py give them
        # (the bf16 case above has bf16 decays, so STAGE 3 runs it as 1)
        ("B1 L2048 G1 bf16 beta, f32 decays, state", inputs(1, 2048, 1, torch.bfloat16, 5, state=True, decays32=True),
         None, 1e-2),
        # added 2026-11-28 (docs/bench/rescaled-walk-2026-11-28): slow decays, where pass B walks rescaled: every
        # block (decays down to e^-0.5 a token), and about half of them (e^-5)
        ("B1 L2048 G1 bf16 beta, f32 slow decays 0.5", inputs(1, 2048, 1, torch.bfloat16, 6, state=True,
                                                             decays32=True, slow=0.5), None, 1e-2),
        ("B1 L3000 G2 f32 beta state, slow decays 5", inputs(1, 3000, 2, torch.float32, 7, state=True, slow=5.0),
         None, 1e-5),
        ("B2 L1100 G1 f32 no-beta, slow decays 0.5", inputs(2, 1100, 1, torch.float32, 8, beta=False, slow=0.5),
         None, 1e-5),
    ]
    # four packed sequences give 5120 work items, which fill the GPU unsplit: the chunked backward would hand them to
    # the sequential kernel (chunked_bwd.chunked_backward), so the packed case splits them in two (its last blocks
    # end on an odd token: 5 and 1 valid tokens, a pair with its second token past the end)
    splits = {"varlen 1000/1/2002/1093 G2 f32 beta state": 2}
    failed = False
    seg, stage = int(os.environ.get("SEG", "4")), int(os.environ.get("STAGE", "0"))
    pipe, l2pf = int(os.environ.get("PIPE", "0")), int(os.environ.get("L2PF", "0"))
    cap, programs = int(os.environ.get("MAXNREG", "0")), int(os.environ.get("PROGRAMS", "8"))
    walk, widen = int(os.environ.get("WALK_RESCALE", "1")), int(os.environ.get("WIDEN", "1"))
    for name, x, cu, tol in cases:
        ref = grads(x, "torch", cu, torch.float64)
        chunked_bwd.CHUNKED_CONFIG.update(LOCAL="triton", NSPLIT=splits.get(name, 0))
        tri = grads(x, "triton", cu)
        chunked_bwd.CHUNKED_CONFIG.update(LOCAL="gluon", SEG=seg, STAGE=stage, PIPE=pipe, L2PF=l2pf,
                                          LOCAL_MAXNREG=cap, PROGRAMS_PER_SM=programs, WALK_RESCALE=walk,
                                          WIDEN=widen)
        glu = grads(x, "triton", cu)
        chunked_bwd.CHUNKED_CONFIG.update(LOCAL="triton", NSPLIT=0, PIPE=0, L2PF=0, LOCAL_MAXNREG=0,
                                          PROGRAMS_PER_SM=8)
        for n in ref:
            scale = ref[n].abs().max().item() or 1.0
            e_t = (tri[n] - ref[n]).abs().max().item() / scale
            e_g = (glu[n] - ref[n]).abs().max().item() / scale
            d_tg = (glu[n] - tri[n]).abs().max().item() / scale
            bad = not (e_g <= tol and e_g <= 4 * e_t + 1e-6)
            failed |= bad
            print(f"{name:45s} {n:10s} triton {e_t:9.2e}  gluon {e_g:9.2e}  gluon-triton {d_tg:9.2e}"
                  f"{'  FAIL' if bad else ''}", flush=True)
    print(f"local passes run: {chunked_bwd.LOCAL_RUNS}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
