"""Write the random tiny test model: a tiny random Mamba2 in mamba_ssm format with a byte-level tokenizer.

d_model 64, 4 layers, d_state 16, headdim 16, vocabulary 257 (padded to 272), tied embeddings, random weights.
The tests write it once per session (``tests/checkpoints.py``: ``write_tiny_random_mamba2``, which this script
runs) for the generic machinery that only needs a small, fast model. It is not the embedded default model:
``upgrade/assets/tiny-mamba2`` is a pretrained model, which this script never writes.

Deterministic (fixed seed): running it again rewrites the same tensors. Usage:

    python scripts/make_tiny_checkpoint.py [--output tiny-random-mamba2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY / "tests"))  # the writer lives with the tests, which use it most

from checkpoints import write_tiny_random_mamba2  # noqa: E402

DEFAULT_OUTPUT = Path("tiny-random-mamba2")  # in the current directory
ASSETS = REPOSITORY / "upgrade" / "assets"  # the embedded models: never written here


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT,
                        help=f"directory to write (default: ./{DEFAULT_OUTPUT})")
    args = parser.parse_args()
    output = args.output.resolve()
    if output == ASSETS or ASSETS in output.parents:
        parser.error(f"{args.output} lies in {ASSETS}, which holds the embedded models; choose another --output")
    write_tiny_random_mamba2(args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
