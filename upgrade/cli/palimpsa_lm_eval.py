"""``palimpsa-lm-eval``: lm-evaluation-harness's own command line with ``--model palimpsa`` available
(``evaluate.lm_eval_adapter``); a mistake in our model's arguments or files is one line and exit status 2. Also
runs as ``python -m palimpsa.upgrade.cli.palimpsa_lm_eval`` and ``palimpsa lm-eval``.

lm-eval 0.4.13 finds only the models that imported code registered; releases that read the ``lm_eval.models``
entry points (which this package declares) find ``palimpsa`` from their own ``lm_eval`` command."""

from __future__ import annotations

import sys

from .common import guarded

ADAPTER = "palimpsa.upgrade.evaluate.lm_eval_adapter:PalimpsaLM"  # also the lm_eval.models entry point


def main() -> None:
    try:
        from lm_eval.__main__ import cli_evaluate
    except ImportError:
        from ..evaluate.lm_eval_adapter import INSTALL_HINT

        sys.exit(f"palimpsa-lm-eval: error: {INSTALL_HINT}")

    def run(_argv) -> int:
        import lm_eval.models  # noqa: F401  (lm_eval's own models: they register when this is imported)
        from lm_eval.api.registry import model_registry

        if "palimpsa" not in model_registry:  # by name: the adapter (and torch) load once lm_eval asks for it
            model_registry.register("palimpsa", target=ADAPTER)
        cli_evaluate()
        return 0

    guarded(run, "palimpsa-lm-eval")()


if __name__ == "__main__":
    main()
