"""``palimpsa-lm-eval``: lm-evaluation-harness's own command line with ``--model palimpsa`` available
(``evaluate.lm_eval_adapter``); a mistake in our model's arguments or files is one line and exit status 2. Also
runs as ``python -m palimpsa.upgrade.cli.palimpsa_lm_eval``."""

from __future__ import annotations

import sys

from ..evaluate.lm_eval_adapter import INSTALL_HINT, register
from .common import guarded


def main() -> None:
    try:
        from lm_eval.__main__ import cli_evaluate
    except ImportError:
        sys.exit(f"error: {INSTALL_HINT}")
    def run(_argv) -> int:
        register()
        cli_evaluate()
        return 0

    guarded(run, "palimpsa-lm-eval")()


if __name__ == "__main__":
    main()
