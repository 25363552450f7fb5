"""The CUDA local pass with its states peeled (cuda_local's TSUB: a token's state the one after it less that token's
term, where the log decay since the last product allows) against every state from a product (CUDA_TSUB 0), B = 1,
L = 8192, 2.7b shapes: bf16, and fine-tuning's mix (float32 values, gains and output gradients, bf16 keys and
queries, TF32 allowed); log decays as bench_scan.py draws them (dt a: dt in [0.001, 0.1], a per head in [-16, -1])
and uniform in [-1, 0]. The chunk-parallel backward's launches timed by CUDA events (chunked_bwd.TIMINGS),
interleaved rounds, medians; also the share of the tokens whose states were peeled (from the decays, as the kernel
decides) and the gradients' largest relative difference from CUDA_TSUB 0.

    python docs/bench/peel-2026-11-29/time_tsub.py [--tsubs 0,6,4,8] [--rounds 6] [--defines ,FAC=0]

``--defines``: timing macros of the kernel (its CUDA_DEFINES) crossed with the thresholds; the first variant is the
reference of the gradients' differences.
"""

import argparse
import statistics

import torch
from palimpsa.kernels import chunked_bwd, palimpsa_scan


def peeled_share(log_decay: torch.Tensor, tsub: float, sub: int = 8, tau: float = 20.0) -> float:
    """The share of tokens whose states the kernel peels: in each sub-block of ``sub`` tokens whose log decay stays
    above ``-tau``, from the last token back, a token is peeled while the log decay from it to the last token whose
    state came from a product stays above ``-tsub`` (``[tokens, heads]`` decays, tokens a multiple of ``sub``)."""
    if tsub <= 0:
        return 0.0
    g = log_decay.float().T.reshape(log_decay.shape[1], -1, sub)
    cs = g.cumsum(-1)
    rescaled = cs[..., -1] >= -tau
    ref, peeled = cs[..., -1].clone(), 0
    for t in range(sub - 2, -1, -1):
        p = rescaled & (ref - cs[..., t] >= -tsub)
        peeled += int(p.sum())
        ref = torch.where(p, ref, cs[..., t])
    return peeled / log_decay.numel()


def inputs(kind: str, decays: str):
    gen = torch.Generator(device="cuda").manual_seed(0)
    vdt = torch.bfloat16 if kind == "bf16" else torch.float32
    shape = (1, 8192, 80)
    v = (torch.randn(*shape, 64, generator=gen, device="cuda") * 0.5).to(vdt).requires_grad_(True)
    k = torch.randn(1, 8192, 1, 128, generator=gen, device="cuda").to(torch.bfloat16).requires_grad_(True)
    q = torch.randn(1, 8192, 1, 128, generator=gen, device="cuda").to(torch.bfloat16).requires_grad_(True)
    if decays == "dt*a":
        dt = 0.001 + 0.099 * torch.rand(*shape, generator=gen, device="cuda")
        a = -torch.empty(80, device="cuda").uniform_(1, 16, generator=gen)
        g = dt * a
    else:
        g = -torch.rand(*shape, generator=gen, device="cuda")
    g = g.requires_grad_(True)
    beta = torch.rand(*shape, 64, generator=gen, device="cuda").to(vdt).requires_grad_(True)
    dy = torch.randn(*shape, 64, generator=gen, device="cuda").to(vdt)
    return (v, k, q, g, beta), dy


def local_pass(leaves, dy, config: dict) -> tuple[list, list]:
    """One forward and backward with ``config`` put into the chunk-parallel backward's: the local pass's times (ms, by
    CUDA events) and the leaves' gradients."""
    chunked_bwd.CHUNKED_CONFIG.update(config)
    for x in leaves:
        x.grad = None
    y, _, _ = palimpsa_scan(*leaves, importance_prior=1.0)
    chunked_bwd.TIMINGS = []
    y.backward(dy)
    torch.cuda.synchronize()
    local = [s.elapsed_time(e) for n, s, e in chunked_bwd.TIMINGS if n == "local"]
    chunked_bwd.TIMINGS = None
    return local, [x.grad.float().clone() for x in leaves]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tsubs", default="0,6,4,8")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--defines", default="", help="comma list of CUDA_DEFINES values (e.g. ',FAC=0+SLABCP=0')")
    args = parser.parse_args()
    tsubs = [(float(t), d) for t in args.tsubs.split(",") for d in args.defines.split(",")]
    torch.set_float32_matmul_precision("high")
    for kind in ("bf16", "mix"):
        for decays in ("dt*a", "-rand"):
            leaves, dy = inputs(kind, decays)
            times = {t: [] for t in tsubs}
            grads = {}
            for r in range(args.rounds):
                for tsub in tsubs:
                    local, grad = local_pass(leaves, dy, {"CUDA_TSUB": tsub[0], "CUDA_DEFINES": tsub[1],
                                                          "LOCAL": "cuda"})
                    if r:  # the first round compiles
                        times[tsub] += local
                    else:
                        grads[tsub] = grad
            base = grads[tsubs[0]]
            for tsub, ms in times.items():
                diff = max(((a - b).norm() / b.norm()).item() for a, b in zip(grads[tsub], base, strict=True))
                share = peeled_share(leaves[3].detach()[0], tsub[0])
                name = f"CUDA_TSUB {tsub[0]:g}" + (f" {tsub[1]}" if tsub[1] else "")
                first = f"CUDA_TSUB {tsubs[0][0]:g}" + (f" {tsubs[0][1]}" if tsubs[0][1] else "")
                print(f"{kind:4} decays {decays:5} {name}: local pass {statistics.median(ms):.2f} ms "
                      f"(median of {len(ms)}), {100 * share:.1f}% of tokens peeled, gradients {diff:.1e} from "
                      f"{first}", flush=True)
    chunked_bwd.CHUNKED_CONFIG.pop("CUDA_TSUB")
    chunked_bwd.CHUNKED_CONFIG.pop("CUDA_DEFINES")


if __name__ == "__main__":
    main()
