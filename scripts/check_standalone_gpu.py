"""Does a model downloaded by someone without palimpsa run the Triton kernels on their GPU? One check, run once on a
CUDA machine with triton installed.

It upgrades the embedded tiny Mamba2 (two Palimpsa layers, a gain of 1 so that beta matters), exports it, and
loads the export in a separate Python that cannot import palimpsa, with
``AutoModelForCausalLM.from_pretrained(directory, trust_remote_code=True)`` on the GPU, as a hub user would. There
it runs the prompt (the scan) and one decoding step (the step kernel), in float32 and bfloat16, twice: as the
copy chooses by itself (``auto``), then with the scan forced onto the PyTorch path
(``PALIMPSA_SCAN_BACKEND=torch``). It asserts that the first run took the Triton path (the copy's Triton module was
imported and served the scan and the step; the model's class is the copy's, not palimpsa's) and that the logits
agree within 1e-4 (float32) and 3e-2 (bfloat16) of the largest logit. mamba_ssm's fused kernel is switched off
(``PALIMPSA_MAMBA_SSM=0``) so that both runs differ only in the Palimpsa scan.

    python scripts/check_standalone_gpu.py        # on the GPU machine; prints one verdict line, exit 0 or 1
    python scripts/check_standalone_gpu.py --device cpu --quick   # the same path in Triton's interpreter (tests)

With ``--device cpu`` the Triton run is forced (``auto`` picks the PyTorch path off the GPU) and runs in Triton's
interpreter (``TRITON_INTERPRET=1``): it checks the script and the copy's Triton wiring, not the GPU. ``--quick``
runs float32 only, on 1 x 4 tokens (the interpreter runs a kernel a token at a time in Python).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TOLERANCE = {"float32": 1e-4, "bfloat16": 3e-2}

# Runs in a Python where palimpsa cannot be imported. argv: model directory, device, whether to force Triton,
# the dtypes to run, the batch and length of the prompt.
CHILD = r"""
import sys
for name in ("palimpsa", "palimpsa.upgrade", "palimpsa.kernels"):
    sys.modules[name] = None
import json, os
import torch
from transformers import AutoModelForCausalLM

directory, device, force_triton, dtypes = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4].split(",")
batch, length = int(sys.argv[5]), int(sys.argv[6])
ids = torch.randint(0, 256, (batch, length), generator=torch.Generator().manual_seed(0)).to(device)
found = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)"}


def run(dtype, backend):
    if backend is None:
        os.environ.pop("PALIMPSA_SCAN_BACKEND", None)
    else:
        os.environ["PALIMPSA_SCAN_BACKEND"] = backend
    model = AutoModelForCausalLM.from_pretrained(directory, trust_remote_code=True, dtype=dtype).to(device).eval()
    code = sys.modules[type(model).__module__]
    calls = {"scan": [], "step": []}
    # the module's own functions, kept from the first run (later runs find the counters of earlier ones in place)
    scan, real_step = code.__dict__.setdefault("_unpatched", (code._fused_recurrent, code._fused_recurrent_step))
    step = (lambda: None) if backend == "torch" else real_step  # the step follows no backend
    code._fused_recurrent = lambda: calls["scan"].append(scan()) or calls["scan"][-1]
    code._fused_recurrent_step = lambda: calls["step"].append(step()) or calls["step"][-1]
    with torch.no_grad():
        prompt = model(ids, use_cache=True)
        following = model(prompt.logits[:, -1:].argmax(-1), cache_params=code.cache_of(prompt))
    triton_module = sys.modules.get(code.__package__ + ".fused_recurrent")
    return {"module": type(model).__module__, "dtype": str(next(model.parameters()).dtype),
            "scan_calls": sum(f is not None for f in calls["scan"]),
            "step_calls": sum(f is not None for f in calls["step"]),
            "ops_namespace": getattr(triton_module, "OPS_NAMESPACE", None),
            "logits": torch.cat([prompt.logits, following.logits], 1).float().cpu()}


for name in dtypes:
    dtype = getattr(torch, name)
    triton_run = run(dtype, "triton" if force_triton else None)
    torch_run = run(dtype, "torch")
    reference = torch_run["logits"]
    found[name] = {"module": triton_run["module"], "dtype": triton_run["dtype"], "scan_calls": triton_run["scan_calls"],
                   "step_calls": triton_run["step_calls"], "torch_scan_calls": torch_run["scan_calls"],
                   "ops_namespace": triton_run["ops_namespace"],
                   "relative_diff": ((triton_run["logits"] - reference).abs().max() / reference.abs().max()).item()}
print("\n" + json.dumps(found))
"""


def export_tiny_model(root: Path) -> Path:
    """The embedded tiny Mamba2 with two Palimpsa layers at a gain of 1, exported (with its modeling code)."""
    import palimpsa.upgrade
    from palimpsa.upgrade import export_model, upgrade_model

    embedded = Path(palimpsa.upgrade.__file__).resolve().parent / "assets" / "tiny-mamba2"
    upgrade_model(embedded, 2, output=root / "upgraded", beta_init=1.0, verify=False)
    export_model(root / "upgraded", root / "standalone")
    return root / "standalone"


def verdict(found: dict, device: str, dtypes: list[str]) -> list[str]:
    """What failed, one line each (empty: the check passed)."""
    problems = []
    for dtype in dtypes:
        result, tolerance = found[dtype], TOLERANCE[dtype]
        if result["dtype"] != f"torch.{dtype}":
            problems.append(f"{dtype}: the model ran in {result['dtype']}")
        if result["module"].startswith("palimpsa"):
            problems.append(f"{dtype}: the model was palimpsa's class, not the downloaded copy's")
        if result["scan_calls"] == 0:
            problems.append(f"{dtype}: the copy's scan never ran on its Triton module")
        if device == "cuda" and result["step_calls"] == 0:  # off the GPU the step runs in PyTorch by design
            problems.append(f"{dtype}: the copy's decoding step never ran on its Triton module")
        if result["torch_scan_calls"] != 0:
            problems.append(f"{dtype}: the PyTorch reference run used the Triton module")
        if not result["ops_namespace"] or result["ops_namespace"] == "palimpsa":
            problems.append(f"{dtype}: the copy's Triton operators are not in a namespace of their own")
        if not result["relative_diff"] <= tolerance:  # false for NaN too
            problems.append(f"{dtype}: Triton and PyTorch logits differ by {result['relative_diff']:.3g} of the "
                            f"largest logit > {tolerance:g}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--quick", action="store_true", help="float32 only, on 1 x 4 tokens")
    args = parser.parse_args()
    dtypes = ["float32"] if args.quick else list(TOLERANCE)
    shape = ("1", "4") if args.quick else ("2", "48")
    env = {**os.environ, "PALIMPSA_MAMBA_SSM": "0", "PYTHONPATH": ""}
    env.pop("PALIMPSA_SCAN_BACKEND", None)
    if args.device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    with tempfile.TemporaryDirectory() as root:
        directory = export_tiny_model(Path(root))
        env["HF_MODULES_CACHE"] = str(Path(root) / "modules")
        child = subprocess.run([sys.executable, "-c", CHILD, str(directory), args.device,
                                "1" if args.device == "cpu" else "0", ",".join(dtypes), *shape], capture_output=True,
                               text=True, env=env, cwd=root)
    if child.returncode != 0:
        print(child.stderr[-4000:], file=sys.stderr)
        print(f"standalone GPU check: FAIL (the downloaded copy did not run: exit {child.returncode})")
        return 1
    found = json.loads(child.stdout.strip().splitlines()[-1])
    problems = verdict(found, args.device, dtypes)
    figures = "; ".join(f"{dtype} logits within {found[dtype]['relative_diff']:.2g} (<= {TOLERANCE[dtype]:g}), "
                        f"{found[dtype]['scan_calls']} Triton scans, {found[dtype]['step_calls']} Triton steps"
                        for dtype in dtypes)
    if problems:
        print("\n".join(problems), file=sys.stderr)
    print(f"standalone GPU check: {'FAIL' if problems else 'PASS'} on {found['device']}: {figures}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
