"""The chunk walk's kernel compiled for sm_90a on the CPU (as ``chunked_fwd.compile_kernels`` compiles it: bf16,
2.7b shapes, beta on, no ``u``) with ``chunked_fwd.CHUNKED_FWD_CONFIG``'s ``walk_*`` keys overridden, and its
token loop read from the SASS: registers, the loop's instructions on the path that does not renormalise (the
uniform branch taken at almost every token), per token, and by opcode. Run from the repository root:
``python3 docs/bench/pair-walk-2026-11-28/walk_sass.py base= pair1=walk_PAIR=1 bv16=walk_BV=16``
(``walk_maxnreg=N`` caps the registers). Calls 1-3's variants compile at commit b6385d2, call 6's (``walk_PF``)
at commit ea031e2; the shipped kernel has none of them, so there only the default builds."""

import collections
import os
import re
import subprocess
import sys

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
from bench_scan import config_keys  # noqa: E402
from palimpsa.kernels import chunked_fwd  # noqa: E402
from palimpsa.kernels import fused_recurrent as fr  # noqa: E402
from palimpsa.kernels.gluon_scan import resource_usage  # noqa: E402


def compile_walk(keys: dict):
    config = chunked_fwd.walk_config({**chunked_fwd.CHUNKED_FWD_CONFIG, **keys})
    block_v, cfg = fr._launch_config({"UNROLL": 1, **config}, 64)
    warps, maxnreg = cfg.pop("num_warps"), cfg.pop("maxnreg", None)
    low = {n: "*bf16" for n in ("v", "beta", "y", "u")}
    low.update({"k": "*fp32" if cfg.pop("KQ32", False) else "*bf16", "cu_seqlens": "*i32", "chunk_offsets": "*i32"})
    low["q"] = low["k"]
    rescale = fr._rescales(cfg, True)
    constexprs = {"H": 80, "G": 1, "P": 64, "N": 128, "CT": 512, "IS_VARLEN": False, "ACC": tl.float32,
                  "UNROLL": cfg.get("UNROLL", 1), "TRANS": cfg.get("TRANS", False), "BV": block_v, "BK": 128,
                  "USE_BETA": True, "USE_INITIAL_STATE": False, "USE_INITIAL_IMPORTANCE": False,
                  "STORE_FINAL_STATE": False, "USE_UNCERTAINTY": False, "FAST_RCP": True,
                  "STORE_CHECKPOINTS": False, "CHUNKED": True, "SCATTER": True, "RESCALE": rescale, "FAST_EXP": True,
                  "PF": int(cfg.get("PF", 0)), "PFD": int(cfg.get("PFD", 2))}
    kernel = fr.palimpsa_fwd_kernel
    if "PAIR" in kernel.arg_names:  # the variants of b6385d2
        constexprs.update(PAIR=fr._pairs(cfg, True, rescale, False), ALT=fr._alternates(cfg, rescale))
    # the experiments' keys where this commit's kernel has them (none at the shipped one: only the default builds)
    constexprs = {key: value for key, value in constexprs.items() if key in kernel.arg_names}
    pointers = [p for p in kernel.arg_names if p not in constexprs and p != "T"]
    signature = {p: low.get(p, "*fp32") for p in pointers}
    signature.update({"T": "i32", **{c: "constexpr" for c in constexprs}})
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(len(pointers))}
    return triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": warps, **fr.FP_FUSION, **({"maxnreg": maxnreg} if maxnreg else {})})


def token_loop(sass: str) -> tuple[int, list]:
    """The innermost loop (a backward unconditional branch) and its instructions outside forward branches inside it."""
    ins, labels = [], {}
    for line in sass.splitlines():
        label = re.match(r"^(\.L_x_\d+):", line)
        if label:
            labels[label.group(1)] = len(ins)
            continue
        op = re.match(r"\s+/\*[0-9a-f]{4}\*/\s+(.*?)\s*;", line)
        if op:
            ins.append(op.group(1))
    loops = []
    for i, text in enumerate(ins):
        target = re.match(r"BRA `?\(?(\.L_x_\d+)", text)
        if target and labels[target.group(1)] < i:
            start, skipped = labels[target.group(1)], set()
            for j in range(start, i + 1):
                jump = re.match(r"@!?P\d BRA `?\(?(\.L_x_\d+)", ins[j])
                if jump and j < labels[jump.group(1)] <= i:
                    skipped.update(range(j + 1, labels[jump.group(1)]))
            loops.append([ins[j] for j in range(start, i + 1) if j not in skipped])
    return max(loops, key=len)


def main():
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    print(f"triton {triton.__version__}")
    for item in sys.argv[1:] or ["base="]:
        name, _, keys = item.partition("=")
        keys = config_keys(keys)
        compiled = compile_walk(keys)
        path = f"/tmp/walk-{os.getpid()}.cubin"
        with open(path, "wb") as f:
            f.write(compiled.asm["cubin"])
        sass = subprocess.run([nvdisasm, "-c", path], capture_output=True, text=True, check=True).stdout
        os.remove(path)
        loop = token_loop(sass)
        tokens = 2 if int(keys.get("walk_UNROLL", 1)) == 2 else 1
        lanes_elements = (int(keys.get("walk_BV", 8)) or 8) * 4 * tokens
        ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", x).split()[0].split(".")[0] for x in loop)
        usage = resource_usage(compiled)
        print(f"{name}: {usage['registers']} registers, stack {usage['stack']}; loop {len(loop)} instructions on "
              f"the common path, {len(loop) / tokens:.1f} a token, {len(loop) / lanes_elements:.2f} an "
              f"element-token; " + " ".join(f"{k}:{v}" for k, v in ops.most_common(12)))


if __name__ == "__main__":
    main()
