"""``generate-text``: completions of prompts, to look at what a model writes (``evaluate.generation``)."""

from __future__ import annotations

import argparse
import sys

from ..errors import PalimpsaError
from .common import MAX_TOKENS, SEED, add_number, guarded


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="generate-text", description="Generate text from a Palimpsa (or Mamba2) "
                                     "model with its recurrent cache, to look at what it writes. Each completion "
                                     "is printed after its prompt; with several prompts, a line '--- completion "
                                     "i of n ---' starts each one.")
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


def run(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.temperature == 0 and (args.top_k is not None or args.top_p is not None):
        raise PalimpsaError("--top-k and --top-p apply to sampling; give a --temperature above 0 with them")
    # torch and transformers load here, once the arguments are checked
    from ..evaluate.generation import generate_text

    completions = generate_text(args.model, args.prompt, max_new_tokens=args.max_new_tokens,
                                temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                                beta_scale=args.beta_scale, seed=args.seed)
    for number, (prompt, completion) in enumerate(zip(args.prompt, completions), 1):
        if len(completions) > 1:  # a completion may hold line breaks: a header line tells where each one starts
            print(f"--- completion {number} of {len(completions)} ---")
        print(f"{prompt}\033[1m{completion}\033[0m" if sys.stdout.isatty() else f"{prompt}{completion}")
    return 0


main = guarded(run, "generate-text")

if __name__ == "__main__":
    main()
