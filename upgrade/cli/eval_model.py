"""``eval-model``: long-context evaluation of models side by side, with plots (``evaluate.evaluation``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import PalimpsaError, checked_number
from ..io.output import check_writable
from .common import MAX_TOKENS, SEED, DefaultsHelpFormatter, add_number, guarded, int_list

EPILOG = """\
examples:
  eval-model ./mamba2-palimpsa-ft --compare state-spaces/mamba2-2.7b --tasks passkey,niah --lengths 2k,4k,8k,16k
  eval-model ./model --tasks nll-position --lengths 32k --segment-length 4096 --train-length 2048

Tasks: nll-position (per-token NLL against position on long text, a --text file or Python's pydoc_data.topics,
run in segments with the recurrent state carried; CSV + PNG with a marker at --train-length), passkey (accuracy
over length x depth, a heatmap per model), niah (RULER single and multi-key needles), mqar (accuracy against the
number of key-value pairs), mqar-gap (not run by default: accuracy against length, --mqar-gap-pairs pairs, a
haystack gap, then every key queried). Every model sees identical seeded inputs. Writes summary.md, summary.json,
CSV and PNG files to --output.
"""


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="eval-model", description="Evaluate long-context behaviour of one or more "
                                     "models side by side, with plots.", epilog=EPILOG,
                                     formatter_class=DefaultsHelpFormatter)
    parser.add_argument("model", metavar="MODEL", help="model directory (Palimpsa) or Mamba2 checkpoint")
    parser.add_argument("--compare", nargs="*", default=[], metavar="OTHER", help="more models to evaluate alike")
    parser.add_argument("--tasks", default="nll-position,passkey,niah,mqar", help="comma list of tasks")
    parser.add_argument("--lengths", default="256,512,1024", help="context lengths in tokens (2k = 2048)")
    parser.add_argument("--depths", default="0,0.25,0.5,0.75,1", help="needle depths for passkey and niah")
    add_number(parser, "--samples", kind=int, low=1, high=10_000, default=2, help="samples per length x depth cell")
    parser.add_argument("--mqar-pairs", default="4,8,16,32", help="numbers of key-value pairs for mqar")
    add_number(parser, "--mqar-gap-pairs", kind=int, low=1, high=MAX_TOKENS, default=8,
               help="key-value pairs for mqar-gap")
    add_number(parser, "--segment-length", kind=int, low=1, high=MAX_TOKENS, default=512,
               help="tokens per forward for nll-position")
    parser.add_argument("--nll-length", default=None, help="tokens of text for nll-position (default: max length)")
    add_number(parser, "--train-length", kind=int, low=1, high=MAX_TOKENS, default=None,
               help="training length, marked on the NLL plot")
    parser.add_argument("--text", default=None, metavar="FILE", help="long text for nll-position")
    add_number(parser, "--batch-size", kind=int, low=1, high=4096, default=4,
               help="prompts per forward for the recall tasks")
    add_number(parser, "--beta-scale", low=0, default=None, metavar="S",
               help="evaluate every Palimpsa model with its beta scaled by S; 0 runs each upgraded layer as its "
                    "Mamba2 layer (the ablation that tells metaplasticity from the other weights)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    add_number(parser, "--seed", **SEED, default=0, help="seed of every generated input")
    parser.add_argument("--output", "-o", default="eval-results", metavar="DIR", help="where to write results")
    return parser


def run(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # torch and transformers load here, once the arguments are read
    from ..convert.loading import load_model_and_tokenizer, resolve_device
    from ..evaluate.evaluation import TASKS, EvalSettings, evaluate_model, text_token_ids, write_outputs

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise PalimpsaError(f"unknown task(s) {unknown}; choose from {', '.join(TASKS)}")
    depths = [checked_number(d, "--depths value", low=0, high=1) for d in args.depths.split(",")]
    device = resolve_device(args.device)
    settings = EvalSettings(tasks=tasks, lengths=int_list(args.lengths, "--lengths"), depths=depths,
                            per_cell=args.samples, seed=args.seed, segment_length=args.segment_length,
                            nll_length=int_list(args.nll_length, "--nll-length")[0] if args.nll_length else None,
                            mqar_pairs=int_list(args.mqar_pairs, "--mqar-pairs"),
                            mqar_gap_pairs=args.mqar_gap_pairs, train_length=args.train_length, text=args.text,
                            batch_size=args.batch_size, device=device, beta_scale=args.beta_scale)
    if args.text and not Path(args.text).expanduser().is_file():
        raise PalimpsaError(f"--text {args.text} is not a file; give a text file for nll-position")
    check_writable(Path(args.output).expanduser(), f"--output {args.output}")
    sources = [args.model, *args.compare]
    names = [Path(s).name or s for s in sources]
    if len(set(names)) < len(names):
        names = [f"{i}:{n}" for i, n in enumerate(names)]
    print(f"eval-model: {len(sources)} model(s), tasks {', '.join(tasks)}, lengths {settings.lengths}, "
          f"seed {settings.seed}, device {device}, output {args.output}"
          + ("" if args.beta_scale is None else f", beta scale {args.beta_scale:g} in every Palimpsa model"))
    results, text_ids = [], None
    for name, source in zip(names, sources):
        model, tokenizer = load_model_and_tokenizer(source)
        model = model.to(device)
        if args.beta_scale is not None and model.palimpsa_mixers():
            model.set_beta_scale(args.beta_scale)
        if text_ids is None and "nll-position" in tasks:
            text_ids = text_token_ids(tokenizer, settings)
        print(f"evaluating {name} ...")
        results.append(evaluate_model(name, model, tokenizer, settings, text_ids))
        del model
    write_outputs(results, settings, Path(args.output))
    print((Path(args.output) / "summary.md").read_text())
    return 0


main = guarded(run, "eval-model")

if __name__ == "__main__":
    main()
