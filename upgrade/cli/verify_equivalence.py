"""``verify-equivalence``: the beta -> 0 sweep of an upgraded model; table, slope, JSON and plot
(``evaluate.equivalence``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import PalimpsaError
from ..io.output import check_writable, write_json_atomic
from .common import MAX_TOKENS, SEED, add_number, guarded

EPILOG = """\
The sweep multiplies every beta by a scale running from the model's own value down through --decades decades
to exactly 0, on a probe batch (real text with --probe FILE, else seeded random tokens), and compares the logits
with the same model run as the plain Mamba2 it holds (beta dropped). The difference must fall with a log-log
slope in [0.9, 1.1] at the small-scale end and sit at the rounding floor at 0; the command exits 1 otherwise.
With the base model (from config.json's base_model, or --base) it also reports KL and top-1 agreement with the
base: on a fine-tuned model that is the fine-tuning effect. Runs in float64 when the model fits in memory
(--dtype auto), where the rounding floor is far below the smallest difference.
"""


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verify-equivalence", description="Check the beta -> 0 limit of an "
                                     "upgraded model: a table, a fitted slope, a JSON report and a plot.",
                                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", metavar="MODEL", help="upgraded (or fine-tuned) Palimpsa model directory")
    parser.add_argument("--base", default=None, help="base Mamba2 checkpoint (default: config.json's base_model)")
    parser.add_argument("--no-base", action="store_true", help="do not load the base model")
    parser.add_argument("--probe", default=None, metavar="FILE", help="text file to take the probe from")
    add_number(parser, "--probe-batch", kind=int, low=1, high=1024, default=2)
    add_number(parser, "--probe-length", kind=int, low=2, high=MAX_TOKENS, default=64)
    # below 1e-30 of the model's scale the differences sit on float64's rounding floor: nothing left to fit
    add_number(parser, "--decades", kind=int, low=3, high=30, default=8,
               help="decades of beta scale below the model's own (3 to 30, default: 8)")
    parser.add_argument("--dtype", default="auto", choices=("auto", "float64", "float32"))
    add_number(parser, "--seed", **SEED, default=0)
    parser.add_argument("--json", default=None, metavar="OUT", help="write the report here")
    parser.add_argument("--plot", default=None, metavar="OUT.png", help="write the log-log plot here")
    return parser


def run(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # torch and transformers load here, once the arguments are read
    from ..convert.compare import probe_input_ids
    from ..convert.loading import load_mamba2, load_model_and_tokenizer
    from ..evaluate.equivalence import probe_from_text, run_sweep, sweep_dtype
    from ..evaluate.plots import plot_sweep
    from ..io.dtypes import dtype_name

    for option, path in (("--json", args.json), ("--plot", args.plot)):
        if path:
            check_writable(Path(path).expanduser().parent, f"{option} {path}")
    model, tokenizer = load_model_and_tokenizer(args.model, need_tokenizer=args.probe is not None)
    if not model.palimpsa_mixers():
        raise PalimpsaError(f"{args.model} has no Palimpsa layer; upgrade it first with upgrade-model")
    dtype = sweep_dtype(model, args.dtype)
    model = model.to(dtype)
    base_source = None if args.no_base else (args.base or model.config.base_model)
    base = None
    if base_source:
        try:
            base = load_mamba2(base_source, dtype)[0]
        except PalimpsaError as error:
            if args.base:
                raise
            print(f"note: base model not loaded ({error}); reporting the limit only")
    vocab = model.config.base_vocab_size or model.config.vocab_size
    probe = (probe_from_text(Path(args.probe), tokenizer, args.probe_batch, args.probe_length) if args.probe
             else probe_input_ids(vocab, args.probe_batch, args.probe_length, args.seed))
    print(f"model {args.model}: Palimpsa layers {model.config.upgraded_layers}, own beta scale "
          f"{model.config.beta_scale:g}, {dtype_name(dtype)}; probe {tuple(probe.shape)} "
          f"{'from ' + args.probe if args.probe else 'random tokens'}; base {base_source if base else 'not loaded'}")
    result = run_sweep(model, probe, base, args.decades, progress=True)
    header = f"{'beta scale':>11} {'max|diff|':>10} {'relative':>10} {'mean KL':>10} {'top-1':>7}"
    header += f" {'KL(base)':>10} {'top-1(base)':>11}" if base is not None else ""
    print(header)
    for row in result.rows:
        line = (f"{row['scale']:>11.3g} {row['max_abs_diff']:>10.3g} {row['relative_diff']:>10.3g} "
                f"{row['mean_kl']:>10.3g} {row['top1_agreement']:>7.1%}")
        if base is not None:
            line += f" {row['base_mean_kl']:>10.3g} {row['base_top1_agreement']:>11.1%}"
        print(line)
    slope = "n/a (too few points above the rounding floor)" if result.slope is None else f"{result.slope:.4f}"
    print(f"fitted log-log slope over scales {result.fitted_scales}: {slope} (must lie in [0.9, 1.1])")
    print(f"at scale 0: relative max |logit diff| {result.at_zero:.3g}; limit {'OK' if result.limit_ok else 'FAILED'}")
    report = {"model": str(args.model), "base": base_source if base is not None else None,
              "probe": {"source": args.probe or "random", "shape": list(probe.shape), "seed": args.seed},
              **result.as_dict()}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(Path(args.json), report)
    if args.plot:
        plot_sweep(result, Path(args.plot), Path(args.model).name)
    return 0 if result.limit_ok else 1


main = guarded(run, "verify-equivalence")

if __name__ == "__main__":
    main()
