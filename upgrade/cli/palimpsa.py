"""``palimpsa COMMAND [ARGS]``: every console script under one name (``palimpsa upgrade`` is ``upgrade-model``, with
the same arguments); also ``python -m palimpsa``. Each command's module loads only when that command runs."""

from __future__ import annotations

import difflib
import importlib
import sys

from ..errors import PalimpsaError
from .common import guarded

# command -> (module under cli/, its own console script, what it does in one line)
COMMANDS = {
    "upgrade": ("upgrade_model", "upgrade-model", "convert chosen layers of a Mamba2 checkpoint into Palimpsa "
                "layers, verify, save"),
    "finetune": ("finetune_model", "finetune-model", "fine-tune from a YAML recipe (validated first; resumable)"),
    "eval": ("eval_model", "eval-model", "long-context evaluation (NLL by position, passkey, NIAH, MQAR) with plots"),
    "verify-equivalence": ("verify_equivalence", "verify-equivalence", "the beta -> 0 sweep: the limit is the "
                           "original Mamba2"),
    "inspect-importance": ("inspect_importance", "inspect-importance", "where the importance leaves its prior, "
                           "per layer and head"),
    "generate": ("generate_text", "generate-text", "completions of prompts with the recurrent cache"),
    "export": ("export_model", "export-model", "a model, adapter or training run as a release directory"),
    "lm-eval": ("palimpsa_lm_eval", "palimpsa-lm-eval", "lm-evaluation-harness's command line with --model "
                "palimpsa"),
}
SCRIPTS = {script: name for name, (_, script, _) in COMMANDS.items()}


def overview() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: palimpsa COMMAND [ARGS ...]", "",
             "Upgrade pretrained Mamba2 models into Palimpsa models, fine-tune, evaluate and export them.", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {summary}" for name, (_, _, summary) in COMMANDS.items()]
    lines += ["", "palimpsa COMMAND --help shows a command's arguments. Each command is also a script of its own, with "
              "the same", "arguments: palimpsa upgrade is upgrade-model, palimpsa eval is eval-model, and so on."]
    return "\n".join(lines)


def run_overview(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(overview())
        return 0
    if argv[0] == "--version":
        from importlib.metadata import version

        print(f"palimpsa {version('palimpsa')}")
        return 0
    nearest = difflib.get_close_matches(argv[0], COMMANDS, n=1, cutoff=0.5)
    hint = f"did you mean {nearest[0]}?" if nearest else "palimpsa --help lists the commands"
    raise PalimpsaError(f"unknown command {argv[0]!r}; {hint}")


def run_command(name: str, argv: list[str]) -> int:
    module_name, script, _ = COMMANDS[name]
    module = importlib.import_module(f".{module_name}", __package__)
    prog = f"palimpsa {name}"
    if not hasattr(module, "parser"):  # lm-eval: the command line is lm_eval's own
        sys.argv = [prog, *argv]
        module.main()
        return 0
    checked = module.parser()
    checked.prog = prog  # --help and argument errors under the name typed; the command then parses them again
    checked.parse_args(argv)
    return module.run(argv)


def main() -> None:
    argv = sys.argv[1:]
    name = SCRIPTS.get(argv[0], argv[0]) if argv else None  # a script's own name works as its command too
    if name in COMMANDS:
        guarded(lambda _argv: run_command(name, argv[1:]), f"palimpsa {name}")()
    guarded(lambda _argv: run_overview(argv), "palimpsa")()


if __name__ == "__main__":
    main()
