"""Where the base's recall in natural text fails: NIAH in the FwPKM form by number of needles (exact, per digit, and
how often the answer is another needle's value, i.e. the key was not matched), and repeat-after-gap (exact, per
character, and where in the string the first error falls).

    python scripts/probe_base_recall.py upgrade/assets/recall-base
    python scripts/probe_base_recall.py runs/pretrain-base/model --samples 80 --json probe.json
    python scripts/probe_base_recall.py MODEL --by-distance 256,512,1024 --samples 10   # the protocol's suite

MODEL is a model directory (``save_pretrained``'s) or a folder of packed weights (``pretrain_base.py --pack``,
``pretrain_base_variants.py --keep-best``), rebuilt with recipes/pretrain-base.yaml's model. The prompts are the bar's
(``pretrain_base.evaluate_bar``): the held-out pydoc haystack at 1x (512 tokens), with seeds of their own.
``--by-distance EDGES`` instead runs the long-context protocol's suite (``palimpsa.upgrade.evaluate.distance``, every
task, ``--samples`` prompts per task and bucket, a seed that is neither the protocol's test nor its validation seed)
and prints the mean score (and per digit or character) per task and bucket.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import pretrain_base  # noqa: E402

NEEDLE = re.compile(r"The value of key (\w{4}) is (\d{6})\.")


def niah_row(model, tokenizer, text: str, needles: int, samples: int, length: int, seed: int) -> dict:
    from palimpsa.upgrade.evaluate.evaluation import greedy_answers, passkey_correct
    from palimpsa.upgrade.evaluate.tasks import fwpkm_niah_samples

    depths = pretrain_base.DEPTHS
    prompts = fwpkm_niah_samples(tokenizer, text, [length], depths, max(1, samples // len(depths)), seed,
                                 needles=needles)
    completions = greedy_answers(model, tokenizer, prompts, batch_size=16)
    exact = sum(passkey_correct(c, p.answer) for c, p in zip(completions, prompts))  # the bar's scoring
    answers = [c.strip()[:6] for c in completions]
    digits = sum(sum(x == y for x, y in zip(a, p.answer)) for a, p in zip(answers, prompts))
    other = sum(a != p.answer and a in {v for _, v in NEEDLE.findall(p.prompt)} for a, p in zip(answers, prompts))
    return {"needles": needles, "prompts": len(prompts), "exact": exact / len(prompts),
            "per_digit": digits / (6 * len(prompts)), "other_needle": other / len(prompts)}


def repeat_row(model, tokenizer, text: str, samples: int, length: int, seed: int) -> dict:
    from palimpsa.upgrade.evaluate.evaluation import greedy_answers
    from palimpsa.upgrade.evaluate.tasks import repeat_samples

    prompts = repeat_samples(tokenizer, text, [length], samples, seed)
    answers = [a.strip() for a in greedy_answers(model, tokenizer, prompts, batch_size=16)]
    chars = len(prompts[0].answer)
    first_error = [next((i for i, (x, y) in enumerate(zip(a.ljust(chars), p.answer)) if x != y), None)
                   for a, p in zip(answers, prompts)]
    wrong = [i for i in first_error if i is not None]
    return {"prompts": len(prompts), "exact": sum(a.startswith(p.answer) for a, p in zip(answers, prompts))
            / len(prompts), "per_char": sum(sum(x == y for x, y in zip(a, p.answer)) for a, p in zip(answers, prompts))
            / (chars * len(prompts)),
            "first_error_histogram": [sum(i // 6 == q for i in wrong) for q in range(chars // 6)]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="model directory or folder of packed weights")
    parser.add_argument("--samples", type=int, default=40,
                        help="prompts per row (default 40; NIAH rounds down to a multiple of its 5 depths)")
    parser.add_argument("--needles", default="1,2,5", help="NIAH needle counts, comma list (default 1,2,5)")
    parser.add_argument("--length", type=int, default=512, help="prompt length in tokens (default 512, 1x)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="default: cuda if present")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument("--by-distance", default=None, metavar="EDGES",
                        help="bucket edges in tokens (256,512,1024): the protocol's distance suite instead")
    args = parser.parse_args(argv)
    buckets = None
    if args.by_distance:
        from palimpsa.upgrade.evaluate.distance import parse_buckets

        try:
            buckets = parse_buckets(args.by_distance, lowest=200)
        except ValueError as error:
            raise SystemExit(f"probe_base_recall: --by-distance {error}") from None
    if args.samples < 5 or args.length < 64:
        raise SystemExit("probe_base_recall: --samples needs at least 5 and --length at least 64")
    if args.json and not args.json.parent.is_dir():
        raise SystemExit(f"probe_base_recall: --json {args.json}: folder {args.json.parent} does not exist")
    if not args.model.is_dir():
        raise SystemExit(f"probe_base_recall: {args.model} is not a folder; give a model directory or packed weights")
    try:
        needles = [int(n) for n in args.needles.split(",") if n]
    except ValueError:
        raise SystemExit(f"probe_base_recall: --needles {args.needles!r} is not a comma list of numbers") from None
    if not needles or not all(1 <= n <= 24 for n in needles):
        raise SystemExit("probe_base_recall: --needles takes numbers from 1 to 24")

    import torch
    from palimpsa.upgrade.convert.loading import load_model_and_tokenizer
    from palimpsa.upgrade.evaluate.tasks import default_long_text

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("probe_base_recall: --device cuda, but torch sees no GPU; use --device cpu")
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.model
        if not (folder / "config.json").is_file():
            folder = pretrain_base.model_from_pack(args.model, Path(scratch) / "model")
        model, tokenizer = load_model_and_tokenizer(folder)
    model = model.to(device).eval()
    if buckets:
        return by_distance(model, tokenizer, buckets, args)
    text = " ".join(default_long_text().split())
    seed = 20_000_003  # neither the bar's seeds nor the training documents'
    with torch.no_grad():
        niah = [niah_row(model, tokenizer, text, n, args.samples, args.length, seed + n) for n in needles]
        repeat = repeat_row(model, tokenizer, text, args.samples, args.length, seed)
    print(f"NIAH-FwPKM at {args.length} tokens")
    print("  needles  prompts  exact  per digit  another needle's value")
    for row in niah:
        print(f"  {row['needles']:7d}  {row['prompts']:7d}  {row['exact']:5.2f}  {row['per_digit']:9.2f}  "
              f"{row['other_needle']:22.2f}")
    print(f"repeat-after-gap at {args.length} tokens: exact {repeat['exact']:.2f}, per character "
          f"{repeat['per_char']:.3f}; first error by 6-character quarter of the string: "
          f"{repeat['first_error_histogram']}")
    if args.json:
        args.json.write_text(json.dumps({"model": str(args.model), "length": args.length, "niah_fwpkm": niah,
                                         "repeat": repeat}, indent=2) + "\n")
    return 0


def by_distance(model, tokenizer, buckets: list[tuple[int, int]], args) -> int:
    import torch
    from palimpsa.upgrade.evaluate.distance import TASKS, bucket_means, distance_suite, run_suite

    tasks = [t for t in TASKS if not t.startswith("mqar") or 2 * int(t.rsplit("_", 1)[1]) < buckets[0][1]]
    items = distance_suite(tokenizer, model.config.vocab_size, tasks, buckets, args.samples, seed=2_000_003)
    with torch.no_grad():
        records = run_suite(model, tokenizer, items, batch_size=16)
    scores, parts = bucket_means(records, buckets), bucket_means(records, buckets, "part")
    stale = bucket_means(records, buckets, "stale")
    labels = [f"{a}-{b}" for a, b in buckets]
    print(f"recall by needle-to-question distance ({args.samples} prompts per cell; in brackets per digit or "
          "character)")
    print("  task                  " + "".join(f"{label:>16}" for label in labels))
    for task in tasks:
        cells = [f"{v:.2f}" + (f" ({parts[task][i]:.2f})" if task in parts else "")
                 for i, v in enumerate(scores[task])]
        print(f"  {task:22}" + "".join(f"{c:>16}" for c in cells))
    for task, values in stale.items():
        print(f"  {task + ': old value':22}" + "".join(f"{v:>16.2f}" for v in values))
    if args.json:
        args.json.write_text(json.dumps({"model": str(args.model), "buckets": buckets, "samples": args.samples,
                                         "score": scores, "part": parts, "stale": stale}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
