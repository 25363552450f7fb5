"""``upgrade-model``: load a Mamba2 checkpoint, upgrade chosen layers, verify, write (``convert.upgrade``)."""

from __future__ import annotations

import argparse

from .common import MAX_TOKENS, SEED, add_number, guarded

EPILOG = """\
examples:
  upgrade-model state-spaces/mamba2-2.7b --layers 8 --output ./mamba2-2.7b-palimpsa
  upgrade-model ./my-mamba2 --layers 3,11,19,27 --output ./out
  upgrade-model ./my-mamba2 --layers 48-63 --dtype bf16 --output ./out --force

--layers takes a count (spread over depth by --strategy) or indices and inclusive ranges; a single explicit
layer is written as a range (5-5). SOURCE is a local directory or a hub id; hub downloads honour HF_TOKEN,
HF_HOME / HF_HUB_CACHE and HF_HUB_OFFLINE=1, and fetch only the config, one weight format, the tokenizer and the
model card (its license goes on the output's card). --push-to-hub REPO_ID uploads the output once written
(private with --private; HF_TOKEN or `hf auth login`), and the card's snippet loads from it (or from --hub-id).

The output directory receives safetensors weights (sharded past --shard-size, with an index), config.json,
the tokenizer files, a model card (README.md) and upgrade_report.json. It is written under a hidden temporary
name (.OUT.partial-PID) and renamed at the end: a failed or interrupted run (Ctrl-C, SIGTERM) removes it, and
after SIGKILL the next run to the same output does. The output may not be, lie inside or contain SOURCE. It
carries its modeling code: load it with

  from transformers import AutoModelForCausalLM
  model = AutoModelForCausalLM.from_pretrained("./out", trust_remote_code=True)  # anywhere
  import palimpsa.upgrade; model = AutoModelForCausalLM.from_pretrained("./out")  # palimpsa's classes
"""


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="upgrade-model",
        description="Load a pretrained Mamba2 checkpoint, convert chosen layers into Palimpsa layers, check "
                    "that the result still computes what the original did, and save it.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    hub.add_argument("--hub-id", default=None, metavar="REPO_ID",
                     help="the hub repository the model card's snippet loads from (namespace/name)")
    hub.add_argument("--push-to-hub", default=None, metavar="REPO_ID",
                     help="create this hub repository and upload the output to it once written")
    hub.add_argument("--private", action="store_true", help="make the repository --push-to-hub creates private")
    parser.add_argument("--quiet", "-q", action="store_true", help="no plan, figures or progress bars")
    return parser


def run(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # torch and transformers load here, once the arguments are read
    from ..convert.upgrade import upgrade_model

    upgrade_model(
        args.source, args.layers, output=args.output, strategy=args.strategy, dtype=args.dtype,
        beta_init=args.beta_init, beta_rank=args.beta_rank, verify=not args.skip_verify, max_kl=args.max_kl,
        probe_length=args.probe_length, seed=args.seed, shard_size=args.shard_size, force=args.force,
        hub_id=args.hub_id, push_to_hub=args.push_to_hub, private=args.private,
        revision=args.revision, cache_dir=args.cache_dir, local_files_only=True if args.offline else None,
        progress=not args.quiet, log=None if args.quiet else print,
    )
    return 0


main = guarded(run, "upgrade-model")

if __name__ == "__main__":
    main()
