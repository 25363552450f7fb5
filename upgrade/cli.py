"""Command-line entry points. Each one turns a user mistake (PalimpsaError) into one line and exit status 2."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable

from .errors import MAX_SEED, Interrupted, PalimpsaError, checked_number

SEED = {"kind": int, "low": 0, "high": MAX_SEED}
MAX_TOKENS = 1 << 20  # a bound on any length a user asks for: beyond it a typo, not a plan

UPGRADE_EPILOG = """\
examples:
  upgrade-model state-spaces/mamba2-2.7b --layers 8 --output ./mamba2-2.7b-palimpsa
  upgrade-model ./my-mamba2 --layers 3,11,19,27 --output ./out
  upgrade-model ./my-mamba2 --layers 48-63 --dtype bf16 --output ./out --force

--layers takes a count (spread over depth by --strategy) or indices and inclusive ranges; a single explicit
layer is written as a range (5-5). SOURCE is a local directory or a hub id; hub downloads honour HF_TOKEN,
HF_HOME / HF_HUB_CACHE and HF_HUB_OFFLINE=1, and fetch only the config, one weight format and the tokenizer.

The output directory receives safetensors weights (sharded past --shard-size, with an index), config.json,
the tokenizer files, a model card (README.md) and upgrade_report.json. It is written under a hidden temporary
name (.OUT.partial-PID) and renamed at the end: a failed or interrupted run (Ctrl-C, SIGTERM) removes it, and
after SIGKILL the next run to the same output does. The output may not be, lie inside or contain SOURCE. Load it
with:

  import palimpsa.upgrade; from transformers import AutoModelForCausalLM
  model = AutoModelForCausalLM.from_pretrained("./out")
"""


def add_number(parser, *flags: str, kind: type = float, low: float | None = None, high: float | None = None,
               low_open: bool = False, **options) -> None:
    """``parser.add_argument`` for a number: its text goes through :func:`checked_number`, so a wrong type, NaN,
    an infinity or a value out of range is refused in one line naming the option, before any work starts."""
    def convert(text: str) -> int | float:
        return checked_number(text, flags[0], kind, low=low, high=high, low_open=low_open)

    parser.add_argument(*flags, type=convert, **options)


def upgrade_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="upgrade-model",
        description="Load a pretrained Mamba2 checkpoint, convert chosen layers into Palimpsa layers, check "
                    "that the result still computes what the original did, and save it.",
        epilog=UPGRADE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", metavar="SOURCE",
                        help="checkpoint directory or hub id (mamba_ssm or transformers Mamba2 format)")
    parser.add_argument("--layers", required=True, metavar="SPEC",
                        help="how many layers to upgrade (8) or which ones (3,11,19 or 48-63)")
    parser.add_argument("--output", "-o", required=True, metavar="DIR", help="directory to write the model to")
    parser.add_argument("--strategy", default="even", choices=("even", "first", "last"),
                        help="where a count of layers goes: spread evenly over depth, or the first/last ones "
                             "(default: even)")
    parser.add_argument("--dtype", default=None, metavar="DTYPE",
                        help="dtype of the result: float32, bfloat16 or float16 (default: the checkpoint's)")
    add_number(parser, "--beta-init", low=0, low_open=True, default=1e-3, metavar="GAIN",
               help="initial per-head gain: the importance a cell gains per unit of forgetting, learned in log "
                    "space; small keeps the model close to the base (default: 1e-3)")
    add_number(parser, "--beta-rank", kind=int, low=1, default=16, metavar="R",
               help="rank of the token-dependent beta gate (default: 16)")
    add_number(parser, "--max-kl", low=0, default=1e-3, metavar="NATS",
               help="largest mean KL per token between the upgraded model at its initial beta and the base, checked "
                    "before writing (default: 1e-3)")
    parser.add_argument("--skip-verify", action="store_true",
                        help="do not run the base and upgraded models on a probe (for machines too small)")
    add_number(parser, "--probe-length", kind=int, low=1, high=MAX_TOKENS, default=64, metavar="T",
               help="tokens per probe sequence for verification (default: 64)")
    parser.add_argument("--shard-size", default="5GB", metavar="SIZE",
                        help="largest safetensors shard, e.g. 5GB or 500MB (default: 5GB)")
    add_number(parser, "--seed", **SEED, default=0, help="seed of the beta gate's init and the probe")
    parser.add_argument("--force", action="store_true", help="replace a non-empty output directory")
    hub = parser.add_argument_group("hub")
    hub.add_argument("--revision", default=None, help="branch, tag or commit of a hub repository")
    hub.add_argument("--cache-dir", default=None, help="hub cache directory (default: HF_HUB_CACHE)")
    hub.add_argument("--offline", action="store_true", help="use the hub cache only (as HF_HUB_OFFLINE=1)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no plan, figures or progress bars")
    return parser


def run_upgrade(argv: list[str] | None = None) -> int:
    from .pipeline import upgrade_model

    args = upgrade_parser().parse_args(argv)
    upgrade_model(
        args.source, args.layers, output=args.output, strategy=args.strategy, dtype=args.dtype,
        beta_init=args.beta_init, beta_rank=args.beta_rank, verify=not args.skip_verify, max_kl=args.max_kl,
        probe_length=args.probe_length, seed=args.seed, shard_size=args.shard_size, force=args.force,
        revision=args.revision, cache_dir=args.cache_dir, local_files_only=True if args.offline else None,
        progress=not args.quiet, log=None if args.quiet else print,
    )
    return 0


def guarded(run: Callable[[list[str] | None], int], prog: str) -> Callable[[], None]:
    """Wrap a command: user mistakes (and files that cannot be read or written) print one line
    ``prog: error: message`` and exit 2; Ctrl-C and SIGTERM exit 130 saying what was written."""

    def main() -> None:
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            code = run(None)
        except (PalimpsaError, OSError) as error:
            _end_progress_bars()
            print(f"{prog}: error: " + " ".join(str(error).split()), file=sys.stderr)
            code = 2
        except KeyboardInterrupt as interrupt:
            _end_progress_bars()
            written = str(interrupt) if isinstance(interrupt, Interrupted) else "nothing was written"
            print(f"{prog}: interrupted; {written}", file=sys.stderr)
            code = 130
        finally:
            signal.signal(signal.SIGTERM, previous)
        sys.exit(code)

    return main


def _end_progress_bars() -> None:
    """Close the progress bars that an error left open: the message then starts a line of its own and stays the
    last line (an open bar would print itself again when collected)."""
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def _interrupt(signum, frame) -> None:
    """SIGTERM (``kill``, a scheduler's time limit) ends a run as Ctrl-C does: staging directories are removed on
    the way out, and the message says what was written. Only SIGKILL leaves them, for the next run to clean."""
    raise KeyboardInterrupt


EXPORT_EPILOG = """\
examples:
  export-model ./mamba2-2.7b-palimpsa-ft --output ./release --dtype bf16
  export-model runs/a --output ./release --merge-lora --standalone
  export-model ./model --output ./plain-mamba2 --to-mamba2

SOURCE is a Palimpsa model directory, a LoRA adapter directory (merged into its base with --merge-lora) or a
training run (its final/ model, else its newest checkpoints/step-*/model). The output holds safetensors shards
with an index, config.json, generation_config.json, the tokenizer, a model card (with the recipe and evaluation
summary when the run has them) and export_report.json with a sha256 for every file, checked at load time.
--standalone adds the modeling code so that transformers loads it with trust_remote_code=True where palimpsa is
not installed. --to-mamba2 writes a plain mamba_ssm-format Mamba2 (beta dropped) and states the difference.
"""


def export_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="export-model", description="Export a Palimpsa model, adapter or "
                                     "training run as a release-ready model directory.", epilog=EXPORT_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", metavar="SOURCE", help="model directory, LoRA adapter directory or training run")
    parser.add_argument("--output", "-o", required=True, metavar="DIR", help="directory to write")
    parser.add_argument("--merge-lora", action="store_true", help="merge a LoRA adapter into its base model")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: as stored)")
    parser.add_argument("--shard-size", default="5GB", metavar="SIZE", help="largest safetensors shard (default 5GB)")
    parser.add_argument("--standalone", action="store_true",
                        help="also write the modeling code (loads with trust_remote_code=True, no palimpsa needed)")
    parser.add_argument("--to-mamba2", action="store_true",
                        help="write a plain mamba_ssm-format Mamba2 with the beta parameters dropped")
    parser.add_argument("--force", action="store_true", help="replace a non-empty output directory")
    parser.add_argument("--quiet", "-q", action="store_true", help="no plan, figures or progress bars")
    return parser


def run_export(argv: list[str] | None = None) -> int:
    from .export import export_model

    args = export_parser().parse_args(argv)
    export_model(args.source, args.output, merge_lora=args.merge_lora, dtype=args.dtype, shard_size=args.shard_size,
                 standalone=args.standalone, to_mamba2=args.to_mamba2, force=args.force, progress=not args.quiet,
                 log=None if args.quiet else print)
    return 0


def generate_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="generate-text", description="Generate text from a Palimpsa (or Mamba2) "
                                     "model with its recurrent cache, to look at what it writes.")
    parser.add_argument("model", metavar="MODEL", help="model directory (Palimpsa, or any Mamba2 checkpoint)")
    parser.add_argument("--prompt", "-p", action="append", required=True,
                        help="prompt text; repeat for a batch (left-padded); an empty prompt starts from the BOS "
                             "token (EOS when the tokenizer has none)")
    add_number(parser, "--max-new-tokens", kind=int, low=1, high=MAX_TOKENS, default=64,
               help=f"tokens to generate per prompt, at most {MAX_TOKENS} (default: 64)")
    add_number(parser, "--temperature", low=0, default=0.0, help="0 = greedy (default)")
    add_number(parser, "--top-k", kind=int, low=1, default=None, help="sample from the k likeliest tokens")
    add_number(parser, "--top-p", low=0, high=1, low_open=True, default=None,
               help="sample from the likeliest tokens whose probabilities add up to p, in (0, 1]")
    add_number(parser, "--beta-scale", low=0, default=None, help="override the model's beta scale")
    add_number(parser, "--seed", **SEED, default=0)
    return parser


def run_generate(argv: list[str] | None = None) -> int:
    from .generation import generate_text

    args = generate_parser().parse_args(argv)
    if args.temperature == 0 and (args.top_k is not None or args.top_p is not None):
        raise PalimpsaError("--top-k and --top-p apply to sampling; give a --temperature above 0 with them")
    for prompt, completion in zip(args.prompt, generate_text(
            args.model, args.prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
            top_k=args.top_k, top_p=args.top_p, beta_scale=args.beta_scale, seed=args.seed)):
        print(f"{prompt}\033[1m{completion}\033[0m" if sys.stdout.isatty() else f"{prompt}{completion}")
    return 0


VERIFY_EPILOG = """\
The sweep multiplies every beta by a scale running from the model's own value down through --decades decades
to exactly 0, on a probe batch (real text with --probe FILE, else seeded random tokens), and compares the logits
with the same model run as the plain Mamba2 it holds (beta dropped). The difference must fall with a log-log
slope in [0.9, 1.1] at the small-scale end and sit at the rounding floor at 0; the command exits 1 otherwise.
With the base model (from config.json's base_model, or --base) it also reports KL and top-1 agreement with the
base: on a fine-tuned model that is the fine-tuning effect. Runs in float64 when the model fits in memory
(--dtype auto), where the rounding floor is far below the smallest difference.
"""


def verify_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="verify-equivalence", description="Check the beta -> 0 limit of an "
                                     "upgraded model: a table, a fitted slope, a JSON report and a plot.",
                                     epilog=VERIFY_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
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


def run_verify(argv: list[str] | None = None) -> int:
    from pathlib import Path

    from .dtypes import dtype_name
    from .equivalence import probe_from_text, run_sweep, sweep_dtype
    from .loading import load_mamba2, load_model_and_tokenizer
    from .plots import plot_sweep
    from .saving import check_writable, write_json_atomic
    from .verify import probe_input_ids

    args = verify_parser().parse_args(argv)
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


EVAL_EPILOG = """\
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


def _int_list(text: str, option: str) -> list[int]:
    """``"512,2k,8k"`` -> ``[512, 2048, 8192]``; every value an integer from 1 to MAX_TOKENS."""
    values = []
    for part in text.split(","):
        part = part.strip().lower()
        scale = 1024 if part.endswith("k") else 1
        try:
            number = float(part.removesuffix("k")) * scale
        except ValueError:
            raise PalimpsaError(f"{option}: cannot read {part!r} in {text!r}; write numbers like 512,2k,8k") from None
        values.append(checked_number(number, f"{option} value {part!r}", int, low=1, high=MAX_TOKENS))
    return values


def eval_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="eval-model", description="Evaluate long-context behaviour of one or more "
                                     "models side by side, with plots.", epilog=EVAL_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
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
    add_number(parser, "--batch-size", kind=int, low=1, high=4096, default=4)
    add_number(parser, "--beta-scale", low=0, default=None, metavar="S",
               help="evaluate every Palimpsa model with its beta scaled by S; 0 runs each upgraded layer as its "
                    "Mamba2 layer (the ablation that tells metaplasticity from the other weights)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    add_number(parser, "--seed", **SEED, default=0)
    parser.add_argument("--output", "-o", default="eval-results", metavar="DIR", help="where to write results")
    return parser


def run_eval(argv: list[str] | None = None) -> int:
    from pathlib import Path

    from .evaluation import TASKS, EvalSettings, evaluate_model, text_token_ids, write_outputs
    from .loading import load_model_and_tokenizer, resolve_device
    from .saving import check_writable

    args = eval_parser().parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise PalimpsaError(f"unknown task(s) {unknown}; choose from {', '.join(TASKS)}")
    depths = [checked_number(d, "--depths value", low=0, high=1) for d in args.depths.split(",")]
    device = resolve_device(args.device)
    settings = EvalSettings(tasks=tasks, lengths=_int_list(args.lengths, "--lengths"), depths=depths,
                            per_cell=args.samples, seed=args.seed, segment_length=args.segment_length,
                            nll_length=_int_list(args.nll_length, "--nll-length")[0] if args.nll_length else None,
                            mqar_pairs=_int_list(args.mqar_pairs, "--mqar-pairs"),
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


INSPECT_EPILOG = """\
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


def inspect_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="inspect-importance", description="Show where a Palimpsa model's "
                                     "importance departs from its prior (the Mamba2 limit), per layer and head.",
                                     epilog=INSPECT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
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


def run_inspect(argv: list[str] | None = None) -> int:
    from pathlib import Path

    from .importance import (
        head_table,
        inspect_importance,
        plot_importance,
        probe_from_text,
        summary_table,
        task_probe,
    )
    from .loading import load_model_and_tokenizer, resolve_device
    from .saving import check_writable, write_json_atomic

    args = inspect_parser().parse_args(argv)
    length = _int_list(args.length, "--length")[0]
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


upgrade_main = guarded(run_upgrade, "upgrade-model")
inspect_main = guarded(run_inspect, "inspect-importance")
eval_main = guarded(run_eval, "eval-model")
verify_main = guarded(run_verify, "verify-equivalence")
export_main = guarded(run_export, "export-model")
generate_main = guarded(run_generate, "generate-text")

if __name__ == "__main__":
    upgrade_main()
