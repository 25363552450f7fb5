"""``inspect-importance``: where a Palimpsa model's importance departs from its prior (``evaluate.importance``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import PalimpsaError
from ..io.output import check_writable, write_json_atomic
from .common import SEED, add_number, guarded, int_list

EPILOG = """\
examples:
  inspect-importance ./runs/a/final                                  # passkey prompt of 2048 tokens
  inspect-importance ./model --probe niah --length 8k --depth 0.25 --per-head
  inspect-importance ./model --text notes.txt --needle "the code is 4417" --length 4k
  inspect-importance ./model --beta-scale 0                           # the Mamba2 limit: I = I_prior everywhere

A Palimpsa layer computes its Mamba2 layer while its importance I stays at the prior I_prior; metaplasticity is
I leaving it. The command runs the probe through the model and reports, per upgraded layer (per head with
--per-head, and always in the JSON): I at the question (mean, 99th percentile, max, share of cells above 2 and
10 times the prior); the gain and beta / (1 - a), the importance gained per unit of forgetting; Mamba2's memory
horizon 1 / mean(dt |A|) in tokens; for the needle's cells (weighted by how much of the needle they hold) their
importance after the needle and the half-life in tokens the importance adds to them; beta k^2 written on needle
tokens over other tokens. Writes importance.json and importance.png (layers x heads heatmaps) to --output.
See docs/evaluation.md, "Reading inspect-importance".
"""


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inspect-importance", description="Show where a Palimpsa model's "
                                     "importance departs from its prior (the Mamba2 limit), per layer and head.",
                                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", metavar="MODEL", help="Palimpsa model directory (upgraded or fine-tuned)")
    parser.add_argument("--probe", default="passkey", choices=("passkey", "niah"),
                        help="generated prompt with a needle (default: passkey); ignored with --text")
    parser.add_argument("--text", default=None, metavar="FILE", help="probe with your own text instead")
    parser.add_argument("--needle", default=None, metavar="TEXT",
                        help="with --text: a passage of the text to treat as the needle")
    parser.add_argument("--length", default="2048", metavar="T",
                        help="probe length in tokens, e.g. 2048 or 8k (default: 2048)")
    add_number(parser, "--depth", low=0, high=1, default=0.5, help="needle depth in the generated prompt (0-1)")
    add_number(parser, "--seed", **SEED, default=0, help="seed of the generated prompt")
    add_number(parser, "--beta-scale", low=0, default=None, metavar="S",
                        help="run with every beta scaled by S (0: the Mamba2 limit); default: the model's own")
    parser.add_argument("--per-head", action="store_true", help="also print one row per head")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--output", "-o", default="importance-report", metavar="DIR",
                        help="where to write importance.json and importance.png (default: importance-report)")
    return parser


def run(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # torch and transformers load here, once the arguments are read
    from ..convert.loading import load_model_and_tokenizer, resolve_device
    from ..evaluate.importance import (
        head_table,
        inspect_importance,
        plot_importance,
        probe_from_text,
        summary_table,
        task_probe,
    )

    length = int_list(args.length, "--length")[0]
    if length < 16:
        raise PalimpsaError(f"--length must be at least 16 tokens, got {length}")
    if args.needle and not args.text:
        raise PalimpsaError("--needle marks a passage of --text; give --text FILE too")
    if args.text and not Path(args.text).expanduser().is_file():
        raise PalimpsaError(f"--text {args.text} is not a file; give a text file to probe with")
    device = resolve_device(args.device)
    check_writable(Path(args.output).expanduser(), f"--output {args.output}")
    model, tokenizer = load_model_and_tokenizer(args.model)
    if not model.palimpsa_mixers():
        raise PalimpsaError(f"{args.model} has no Palimpsa layer (a plain Mamba2 has no importance); upgrade it "
                            "first with upgrade-model")
    model = model.to(device)
    if args.beta_scale is not None:
        model.set_beta_scale(args.beta_scale)
    if args.text:
        try:
            text = Path(args.text).read_text(errors="replace")
        except OSError as error:
            raise PalimpsaError(f"cannot read --text {args.text}: {error.strerror}") from None
        probe = probe_from_text(tokenizer, text, args.needle, f"{Path(args.text).name}", max_tokens=length)
    else:
        probe = task_probe(tokenizer, args.probe, length, args.depth, args.seed)
    report = inspect_importance(model, probe)
    report["model"] = str(args.model)
    print(summary_table(report))
    if args.per_head:
        print(head_table(report))
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    write_json_atomic(output / "importance.json", report)
    plot_importance(report, output / "importance.png")
    print(f"wrote {output / 'importance.json'} and {output / 'importance.png'}")
    return 0


main = guarded(run, "inspect-importance")

if __name__ == "__main__":
    main()
