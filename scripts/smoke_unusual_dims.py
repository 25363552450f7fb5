"""End-to-end smoke check of upgrade-model on fresh checkpoints with unusual dimensions (not the tests' ones).

For each format it writes a random checkpoint, runs the real `upgrade-model` command, loads the output with
AutoModelForCausalLM and compares its logits at init with an independent Mamba2: transformers' Mamba2ForCausalLM
where the options are expressible there, else the same weights run as plain Mamba2 by palimpsa. Prints a table;
exits 1 if any difference exceeds 1e-4. Usage: python scripts/smoke_unusual_dims.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import palimpsa.upgrade  # noqa: E402,F401
from checkpoints import write_mamba_ssm, write_transformers  # noqa: E402
from palimpsa.upgrade.convert.loading import load_mamba2  # noqa: E402


def transformers_logits(directory: Path, ids: torch.Tensor) -> torch.Tensor:
    from transformers import Mamba2ForCausalLM

    model = Mamba2ForCausalLM.from_pretrained(str(directory)).eval()
    with torch.no_grad():
        return model(ids).logits.float()


def palimpsa_base_logits(directory: Path, ids: torch.Tensor) -> torch.Tensor:
    model, _ = load_mamba2(directory)
    with torch.no_grad():
        return model(ids).logits.float()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", type=Path, default=None, help="keep the checkpoints and outputs here")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp())
    cases = [
        ("transformers, d_model 48, headdim 12, d_state 24, ngroups 2, untied, dt_limit, 5 layers", "transformers",
         lambda d: write_transformers(d, hidden_size=48, num_hidden_layers=5, vocab_size=77, head_dim=12,
                                      state_size=24, n_groups=2, tie_word_embeddings=False,
                                      time_step_limit=(0.002, 0.2), max_shard_size="40KB", seed=3),
         "1,3-4", transformers_logits),
        ("mamba_ssm, d_model 40, expand 3, headdim 20, d_ssm 60, ngroups 3, D_has_hdim, vocab 333 (pad 64)",
         "mamba_ssm",
         lambda d: write_mamba_ssm(d, d_model=40, n_layer=6, vocab_size=333, pad_vocab_size_multiple=64,
                                   expand=3, headdim=20, d_ssm=60, ngroups=3, d_state=12, D_has_hdim=True, seed=4),
         "3", palimpsa_base_logits),
    ]
    print(f"{'case':<100} {'oracle':<12} {'max|diff| init':>15} {'max|diff| beta=0':>17}")
    worst = 0.0
    for name, kind, write, layers, oracle in cases:
        source = write(root / f"{kind}-src")
        output = root / f"{kind}-out"
        command = ["upgrade-model", str(source), "--layers", layers, "--output", str(output), "--force", "-q"]
        subprocess.run(command, check=True)
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(output)).eval()
        vocab = json.loads((output / "config.json").read_text())["base_vocab_size"]
        ids = torch.randint(0, vocab, (2, 57), generator=torch.Generator().manual_seed(1))
        reference = oracle(source, ids)
        with torch.no_grad():
            at_init = (model(ids).logits.float() - reference).abs().max().item()
            with model.beta_scaled(0.0):
                at_zero = (model(ids).logits.float() - reference).abs().max().item()
        worst = max(worst, at_init, at_zero)
        oracle_name = "transformers" if oracle is transformers_logits else "plain Mamba2"
        print(f"{name:<100} {oracle_name:<12} {at_init:>15.3g} {at_zero:>17.3g}")
    sys.exit(0 if worst <= 1e-4 else 1)


if __name__ == "__main__":
    main()
