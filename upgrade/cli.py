"""Command-line entry points. Each one turns a user mistake (PalimpsaError) into one line and exit status 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from .errors import PalimpsaError

UPGRADE_EPILOG = """\
examples:
  upgrade-model state-spaces/mamba2-2.7b --layers 8 --output ./mamba2-2.7b-palimpsa
  upgrade-model ./my-mamba2 --layers 3,11,19,27 --output ./out
  upgrade-model ./my-mamba2 --layers 48-63 --dtype bf16 --output ./out --force

--layers takes a count (spread over depth by --strategy) or indices and inclusive ranges; a single explicit
layer is written as a range (5-5). SOURCE is a local directory or a hub id; hub downloads honour HF_TOKEN,
HF_HOME / HF_HUB_CACHE and HF_HUB_OFFLINE=1, and fetch only the config, one weight format and the tokenizer.

The output directory receives safetensors weights (sharded past --shard-size, with an index), config.json,
the tokenizer files, a model card (README.md) and upgrade_report.json. It is written under a temporary name and
renamed at the end, so an interrupted run leaves nothing behind. Load it with:

  import palimpsa.upgrade; from transformers import AutoModelForCausalLM
  model = AutoModelForCausalLM.from_pretrained("./out")
"""


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
    parser.add_argument("--beta-init", type=float, default=1e-3, metavar="GAIN",
                        help="initial per-head beta gain; small keeps the model close to the base (default: 1e-3)")
    parser.add_argument("--beta-rank", type=int, default=16, metavar="R",
                        help="rank of the token-dependent beta gate (default: 16)")
    parser.add_argument("--max-kl", type=float, default=1e-3, metavar="NATS",
                        help="largest mean KL per token between the upgraded model at its initial beta and the "
                             "base, checked before writing (default: 1e-3)")
    parser.add_argument("--skip-verify", action="store_true",
                        help="do not run the base and upgraded models on a probe (for machines too small)")
    parser.add_argument("--probe-length", type=int, default=64, metavar="T",
                        help="tokens per probe sequence for verification (default: 64)")
    parser.add_argument("--shard-size", default="5GB", metavar="SIZE",
                        help="largest safetensors shard, e.g. 5GB or 500MB (default: 5GB)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the beta gate's init and the probe")
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
    if args.probe_length < 1:
        raise PalimpsaError("--probe-length must be at least 1")
    upgrade_model(
        args.source, args.layers, output=args.output, strategy=args.strategy, dtype=args.dtype,
        beta_init=args.beta_init, beta_rank=args.beta_rank, verify=not args.skip_verify, max_kl=args.max_kl,
        probe_length=args.probe_length, seed=args.seed, shard_size=args.shard_size, force=args.force,
        revision=args.revision, cache_dir=args.cache_dir, local_files_only=True if args.offline else None,
        progress=not args.quiet, log=None if args.quiet else print,
    )
    return 0


def guarded(run: Callable[[list[str] | None], int], prog: str) -> Callable[[], None]:
    """Wrap a command: user mistakes print ``prog: error: message`` and exit 2; Ctrl-C exits 130."""

    def main() -> None:
        try:
            code = run(None)
        except PalimpsaError as error:
            print(f"{prog}: error: {error}", file=sys.stderr)
            code = 2
        except KeyboardInterrupt:
            print(f"{prog}: interrupted; nothing was written", file=sys.stderr)
            code = 130
        sys.exit(code)

    return main


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
                        help="prompt text; repeat for a batch (left-padded)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--beta-scale", type=float, default=None, help="override the model's beta scale")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def run_generate(argv: list[str] | None = None) -> int:
    from .generation import generate_text

    args = generate_parser().parse_args(argv)
    if args.max_new_tokens < 1:
        raise PalimpsaError("--max-new-tokens must be at least 1")
    for prompt, completion in zip(args.prompt, generate_text(
            args.model, args.prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
            top_k=args.top_k, top_p=args.top_p, beta_scale=args.beta_scale, seed=args.seed)):
        print(f"{prompt}\033[1m{completion}\033[0m" if sys.stdout.isatty() else f"{prompt}{completion}")
    return 0


upgrade_main = guarded(run_upgrade, "upgrade-model")
export_main = guarded(run_export, "export-model")
generate_main = guarded(run_generate, "generate-text")

if __name__ == "__main__":
    upgrade_main()
