"""``export-model``: a model directory, adapter or training run as a release directory (``export.export``)."""

from __future__ import annotations

import argparse

from .common import guarded

EPILOG = """\
examples:
  export-model ./mamba2-2.7b-palimpsa-ft --output ./release --dtype bf16
  export-model runs/a --output ./release --merge-lora
  export-model ./model --output ./plain-mamba2 --to-mamba2
  export-model ./model --output ./hf-mamba2 --to-hf-mamba2
  export-model runs/a --output ./release --push-to-hub me/mamba2-palimpsa --private

SOURCE is a Palimpsa model directory, a LoRA adapter directory (merged into its base with --merge-lora) or a
training run (its final/ model, else its newest checkpoints/step-*/model). The output holds safetensors shards
with an index, config.json, generation_config.json, the tokenizer, a model card (with the recipe and evaluation
summary when the run has them), export_report.json with a sha256 for every file (the weights' checked at load
time), and the modeling code, so that transformers loads it with trust_remote_code=True where palimpsa is not
installed. --to-mamba2 writes a plain mamba_ssm-format Mamba2 and --to-hf-mamba2 one in transformers'
Mamba2ForCausalLM format (model_type mamba2), beta dropped and the difference stated; both also convert a plain
Mamba2 checkpoint of either format.

The card's metadata (base_model, license, pipeline_tag, library_name) is what the hub reads; its snippet loads
the model from --hub-id (or the --push-to-hub repository), a placeholder without one. --push-to-hub creates the
repository (private with --private) and uploads the finished directory, with huggingface_hub's token (HF_TOKEN or
`hf auth login`) and endpoint (HF_ENDPOINT).
"""


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="export-model", description="Export a Palimpsa model, adapter or "
                                     "training run as a release-ready model directory.", epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", metavar="SOURCE", help="model directory, LoRA adapter directory or training run")
    parser.add_argument("--output", "-o", required=True, metavar="DIR", help="directory to write")
    parser.add_argument("--merge-lora", action="store_true", help="merge a LoRA adapter into its base model")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: as stored)")
    parser.add_argument("--shard-size", default="5GB", metavar="SIZE", help="largest safetensors shard (default 5GB)")
    parser.add_argument("--standalone", action="store_true",
                        help="accepted for older scripts: every export carries the modeling code now")
    parser.add_argument("--to-mamba2", action="store_true",
                        help="write a plain mamba_ssm-format Mamba2 with the beta parameters dropped")
    parser.add_argument("--to-hf-mamba2", action="store_true",
                        help="write transformers' Mamba2ForCausalLM format (model_type mamba2), beta dropped")
    hub = parser.add_argument_group("hub")
    hub.add_argument("--hub-id", default=None, metavar="REPO_ID",
                     help="the hub repository the model card's snippet loads from (namespace/name)")
    hub.add_argument("--push-to-hub", default=None, metavar="REPO_ID",
                     help="create this hub repository and upload the export to it once written")
    hub.add_argument("--private", action="store_true", help="make the repository --push-to-hub creates private")
    parser.add_argument("--force", action="store_true", help="replace a non-empty output directory")
    parser.add_argument("--quiet", "-q", action="store_true", help="no plan, figures or progress bars")
    return parser


def run(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # torch and transformers load here, once the arguments are read
    from ..export.export import export_model

    export_model(args.source, args.output, merge_lora=args.merge_lora, dtype=args.dtype, shard_size=args.shard_size,
                 standalone=args.standalone, to_mamba2=args.to_mamba2, to_hf_mamba2=args.to_hf_mamba2,
                 hub_id=args.hub_id, push_to_hub=args.push_to_hub, private=args.private, force=args.force,
                 progress=not args.quiet, log=None if args.quiet else print)
    return 0


main = guarded(run, "export-model")

if __name__ == "__main__":
    main()
