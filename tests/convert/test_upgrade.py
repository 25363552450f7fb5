"""End-to-end tests of the ``upgrade-model`` console script, run as a user runs it (a subprocess).

Every run starts a fresh Python that imports torch and transformers (seconds each), so the runs are described
first and launched together by one module fixture; each test then checks the result of its own run: what it
printed, what it wrote (or, for a bad input, that it wrote nothing at all), and that the written model loads with
``AutoModelForCausalLM`` and computes what the base model computed.

The embedded default model (pretrained, 5 layers) is upgraded once, as the README does; every other run that needs
a real checkpoint uses the random tiny test model (4 layers, ``tiny_random``), which is smaller and faster.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from checkpoints import EMBEDDED, write_byte_tokenizer, write_mamba_ssm, write_transformers
from palimpsa.upgrade import PalimpsaForCausalLM, PalimpsaMixer
from palimpsa.upgrade.convert.checkpoint import load_checkpoint
from palimpsa.upgrade.io.remote_code import remote_code
from palimpsa.upgrade.model.modeling import model_from_state_dict
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

TINY = EMBEDDED
PREFIX = "upgrade-model: error: "
CODE = tuple(remote_code())  # the modeling code every model directory carries
PROGRESS = re.compile(r"(reading|writing) weights: +\d+%\|")


@dataclass
class Run:
    """One invocation of the console script; ``root`` holds its output path and nothing else it may touch."""

    args: list[str]
    root: Path
    before: dict[str, bytes | None] = field(default_factory=dict)
    result: subprocess.CompletedProcess | None = None

    @property
    def output(self) -> Path:
        return self.root / "out"

    @property
    def stdout(self) -> str:
        return self.result.stdout

    @property
    def stderr(self) -> str:
        return self.result.stderr


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (hidden ones included) with its bytes; None for a directory."""
    return {str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


def upgrade_model_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # one thread each: many runs share the CPU, and the models are tiny
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "OMP_NUM_THREADS": "1"}
    env.pop("TRITON_INTERPRET", None)  # conftest sets it for kernel tests; a user's shell does not
    return subprocess.run(["upgrade-model", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def build_sources(root: Path, tiny_random: Path) -> dict[str, Path]:
    sources = {"tiny": TINY, "random": tiny_random}
    tf = write_transformers(root / "tf", vocab_size=264, max_shard_size="20KB")
    write_byte_tokenizer(tf)
    sources["tf"] = tf
    sources["plain"] = write_mamba_ssm(root / "plain", n_layer=2)

    corrupt = write_mamba_ssm(root / "corrupt", n_layer=2)
    size = (corrupt / "pytorch_model.bin").stat().st_size
    (corrupt / "pytorch_model.bin").write_bytes(bytes(range(256)) * (size // 256))
    sources["corrupt"] = corrupt

    empty = write_mamba_ssm(root / "empty", n_layer=2)
    (empty / "pytorch_model.bin").write_bytes(b"")  # what an interrupted download leaves
    sources["empty"] = empty

    shapes = write_mamba_ssm(root / "shapes", n_layer=2, d_state=8)
    raw = json.loads((shapes / "config.json").read_text())
    raw["ssm_cfg"]["d_state"] = 16
    (shapes / "config.json").write_text(json.dumps(raw))
    sources["shapes"] = shapes

    llama = write_mamba_ssm(root / "llama", n_layer=2)
    (llama / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 2,
                                                   "vocab_size": 104, "num_attention_heads": 4}))
    sources["llama"] = llama
    return sources


def fill_existing(output: Path) -> None:
    (output / "sub").mkdir(parents=True)
    (output / "keep.txt").write_text("precious\n")
    (output / "sub" / "model.safetensors").write_bytes(b"an older model")


# name -> (source key, extra arguments, how to prepare the output path before the run)
HAPPY = {
    "tiny": ("tiny", ["--layers", "2"], None),  # the embedded default model, as the README upgrades it
    "sharded": ("tf", ["--layers", "1-2", "--shard-size", "50KB"], None),
    "skip_verify": ("plain", ["--layers", "1", "--skip-verify"], None),
    # one run for two checks (each run costs seconds of imports): bf16 weights, and --force replacing an output
    "bf16_force": ("random", ["--layers", "2", "--strategy", "last", "--dtype", "bf16", "--force"], fill_existing),
}
FAILING = {  # name -> (source key, extra arguments, prepare, what the one error line must say)
    "missing_path": (None, ["--layers", "2"], None, r"missing-checkpoint does not exist"),
    "not_mamba2": ("llama", ["--layers", "1"], None, r"not a Mamba2 checkpoint .*'llama'"),
    "corrupt_weights": ("corrupt", ["--layers", "1"], None, r"cannot read .*pytorch_model\.bin.*corrupt"),
    "empty_weights": ("empty", ["--layers", "1"], None, r"cannot read .*pytorch_model\.bin"),
    "wrong_shapes": ("shapes", ["--layers", "1"], None, r"in_proj\.weight has shape \[152, 32\] but config\.json"),
    "layers_out_of_range": ("random", ["--layers", "3-9"], None, r"\[4, 5, 6, 7, 8, 9\] outside .* 0-3"),
    "layers_duplicate": ("random", ["--layers", "1,0-2"], None, r"\[1\] listed more than once"),
    "layers_too_many": ("random", ["--layers", "9"], None, r"asked for 9 layers but the model has 4"),
    "layers_garbage": ("random", ["--layers", "two"], None, r"cannot read 'two'"),
    "bad_dtype": ("random", ["--layers", "1", "--dtype", "int8"], None, r"--dtype 'int8' is not one of"),
    "bad_shard_size": ("random", ["--layers", "1", "--shard-size", "lots"], None, r"cannot read size 'lots'"),
    "output_not_empty": ("random", ["--layers", "1"], fill_existing, r"out is not empty.*--force"),
    "output_is_file": ("random", ["--layers", "1"], lambda out: out.write_text("a file\n"), r"out is a file"),
    "verification_fails": ("random", ["--layers", "2", "--beta-init", "1000", "--max-kl", "1e-12"], None,
                             r"verification failed: .*mean KL .* > --max-kl 1e-12"),
    "verification_fails_with_force": ("random", ["--layers", "2", "--beta-init", "1000", "--max-kl", "1e-12",
                                                 "--force"], fill_existing, r"verification failed"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_random) -> dict[str, Run]:
    """Describe every run, then launch them all at once (a few at a time) and wait."""
    base = tmp_path_factory.mktemp("cli")
    sources = build_sources(base / "sources", tiny_random)
    planned: dict[str, Run] = {}
    for name, (source, extra, prepare, *_) in {**HAPPY, **FAILING}.items():
        root = base / "runs" / name
        root.mkdir(parents=True)
        source_path = sources[source] if source else root / "missing-checkpoint"
        if prepare:
            prepare(root / "out")
        run = Run([str(source_path), *extra, "--output", str(root / "out")], root)
        run.before = snapshot(root)
        planned[name] = run
    help_root = base / "runs" / "help"
    help_root.mkdir()
    planned["help"] = Run(["--help"], help_root)
    source_bytes = {key: snapshot(path) for key, path in sources.items()}

    workers = max(2, (os.cpu_count() or 2) + 1)
    with ThreadPoolExecutor(workers) as pool:
        futures = {name: pool.submit(upgrade_model_cli, run.args, run.root) for name, run in planned.items()}
        for name, future in futures.items():
            planned[name].result = future.result()
    planned["_sources"] = (sources, source_bytes)  # type: ignore[assignment]
    return planned


# ---------------------------------------------------------------------------------------------------- helpers


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def assert_succeeded(run: Run) -> None:
    assert run.result.returncode == 0, run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    assert PREFIX not in run.stderr
    # the output was renamed into place: no staging (.out.partial-*) or retired (.out.old-*) sibling is left
    assert sorted(p.name for p in run.root.iterdir()) == ["out"]


def stderr_lines(run: Run) -> list[str]:
    """stderr's lines, less tqdm's progress bars (\\r-separated updates of 'reading/writing weights')."""
    lines = []
    for line in run.stderr.split("\n"):
        updates = [part for part in line.split("\r") if part.strip()]
        if updates and not all(PROGRESS.match(part) for part in updates):
            lines.append(line)
    return lines


def assert_clean_failure(run: Run, match: str) -> None:
    assert run.result.returncode != 0
    assert "Traceback" not in run.stdout + run.stderr, run.stderr
    lines = stderr_lines(run)
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(PREFIX), run.stderr
    assert run.stderr.count("error") == 1, run.stderr
    assert re.search(match, lines[0]), lines[0]
    # nothing was created, removed or changed next to the output: no output, no hidden partial sibling
    assert snapshot(run.root) == run.before


def base_model(source: Path) -> PalimpsaForCausalLM:
    ckpt = load_checkpoint(source)
    return model_from_state_dict(ckpt.config, ckpt.load_state_dict(progress=False), ckpt.source).eval()


def load_output(output: Path, **kwargs) -> PalimpsaForCausalLM:
    model, info = AutoModelForCausalLM.from_pretrained(output, output_loading_info=True, **kwargs)
    assert isinstance(model, PalimpsaForCausalLM)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    return model.eval()


def output_tensors(output: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = {}
    for path in sorted(output.glob("*.safetensors")):
        state.update(load_file(str(path)))
    return state


def assert_equivalent_at_zero(upgraded: PalimpsaForCausalLM, base: PalimpsaForCausalLM, vocab: int) -> None:
    ids = torch.randint(0, vocab, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = base(ids).logits
        at_one = upgraded(ids).logits
        upgraded.set_beta_scale(0.0)
        at_zero = upgraded(ids).logits
    assert at_zero.shape == want.shape
    assert (at_zero - want).abs().max().item() <= 1e-5 * max(1.0, want.abs().max().item())
    assert not torch.equal(at_one, want)  # at its saved beta the model is (slightly) different
    assert (at_one.argmax(-1) == want.argmax(-1)).float().mean().item() > 0.9


def assert_plan(run: Run, source: Path, fmt: str, layers: str, dtype: str, report: dict) -> None:
    out = run.stdout
    assert out.startswith("Plan\n")
    assert f"source      {source} ({fmt} format, local directory" in out
    assert f"upgrade     layers {layers}" in out
    assert f"new params  {report['parameters']['new']:,} (" in out
    assert f"dtype       {dtype}" in out
    assert f"output      {run.output}" in out
    assert out.rstrip().endswith(f": {run.output}")


def assert_figures_printed(run: Run, report: dict) -> None:
    zero, init = report["verification"]["at_zero"], report["verification"]["at_init"]
    assert f"beta scale 0    : max |logit diff| {zero['max_abs_diff']:.3g} " in run.stdout
    assert f"beta at init    : max |logit diff| {init['max_abs_diff']:.3g}, mean KL {init['mean_kl']:.3g}" in run.stdout


def assert_card(output: Path, report: dict, layers: str) -> None:
    card = (output / "README.md").read_text()
    assert card.startswith("---\n")
    assert f"with layers\n{layers} turned into Palimpsa layers" in card
    assert f"Upgraded layers: {report['upgraded_layers']}" in card
    if report["verification"].get("skipped"):
        assert "Verification was skipped" in card
    else:
        zero, init = report["verification"]["at_zero"], report["verification"]["at_init"]
        assert f"| 0 (exact Mamba2 limit) | {zero['max_abs_diff']:.3g} | {zero['relative_diff']:.3g} |" in card
        assert f"| 1 (as saved) | {init['max_abs_diff']:.3g} |" in card


def count_beta_parameters(model: PalimpsaForCausalLM) -> int:
    return sum(p.numel() for name, p in model.named_parameters() if ".beta_" in name)


# ------------------------------------------------------------------------------------------------ happy paths


def test_tiny_default(runs):
    """``upgrade-model upgrade/assets/tiny-mamba2 --layers 2``: the embedded pretrained model (5 layers, d_model 256,
    byte vocabulary 257 padded to 272); the even strategy picks layers 1 and 3 of 0-4."""
    run = runs["tiny"]
    assert_succeeded(run)
    output = run.output
    assert sorted(p.name for p in output.iterdir()) == sorted(
        ["model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json", "README.md",
         "upgrade_report.json", *CODE])
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (output / name).read_bytes() == (TINY / name).read_bytes()

    config = read_json(output / "config.json")
    assert config["model_type"] == "palimpsa"
    assert config["upgraded_layers"] == [1, 3]
    assert (config["n_layer"], config["d_model"], config["vocab_size"], config["base_vocab_size"]) == (5, 256, 272, 257)
    assert (config["d_state"], config["headdim"], config["expand"], config["tie_word_embeddings"]) == (64, 32, 2, True)
    assert config["eos_token_id"] == 256
    assert config["architectures"] == ["PalimpsaForCausalLM"]

    report = read_json(output / "upgrade_report.json")
    assert report["upgraded_layers"] == [1, 3]
    assert report["format"] == "mamba_ssm"
    assert report["source"] == str(TINY)
    assert report["dtype"] == report["source_dtype"] == "float32"
    assert report["tokenizer_files"] == ["tokenizer.json", "tokenizer_config.json"]
    verification = report["verification"]
    assert verification["passed"] is True
    assert verification["at_zero"]["relative_diff"] <= 1e-5
    assert verification["at_zero"]["top1_agreement"] == 1.0
    assert 0 <= verification["at_init"]["mean_kl"] <= 1e-3
    assert verification["at_init"]["max_abs_diff"] > verification["at_zero"]["max_abs_diff"]
    assert report["seconds"] > 0

    assert_plan(run, TINY, "mamba_ssm", "1, 3 (2 of 5, strategy even)", "float32 (from the checkpoint)", report)
    assert "tokenizer   tokenizer.json, tokenizer_config.json" in run.stdout
    assert_figures_printed(run, report)
    assert_card(output, report, "1, 3")

    model = load_output(output)
    assert [i for i, layer in enumerate(model.backbone.layers) if isinstance(layer.mixer, PalimpsaMixer)] == [1, 3]
    assert model.lm_head.weight.data_ptr() == model.backbone.embedding.weight.data_ptr()
    assert count_beta_parameters(model) == report["parameters"]["new"]
    assert report["parameters"]["total"] == sum(p.numel() for p in model.parameters())
    base = base_model(TINY)
    saved = output_tensors(output)
    assert "lm_head.weight" not in saved  # tied head stored once
    for name, tensor in base.state_dict().items():
        if name != "lm_head.weight":
            assert torch.equal(saved[name], tensor), name
    assert_equivalent_at_zero(model, base, 257)


def test_transformers_sharded(runs):
    run = runs["sharded"]
    source = runs["_sources"][0]["tf"]
    assert_succeeded(run)
    output = run.output
    names = sorted(p.name for p in output.iterdir())
    shards = [n for n in names if n.startswith("model-")]
    assert len(shards) > 1
    assert shards == [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
    assert "model.safetensors" not in names
    assert sorted(set(names) - set(shards)) == sorted(
        ["model.safetensors.index.json", "config.json", "tokenizer.json", "tokenizer_config.json", "README.md",
         "upgrade_report.json", *CODE])
    index = read_json(output / "model.safetensors.index.json")
    saved = output_tensors(output)
    assert set(index["weight_map"]) == set(saved)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in saved.values())
    for shard in shards:
        with safe_open(str(output / shard), framework="pt") as handle:
            keys = list(handle.keys())
            size = sum(handle.get_tensor(k).numel() * 4 for k in keys)
        assert size <= 50_000 or len(keys) == 1
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (output / name).read_bytes() == (source / name).read_bytes()

    config = read_json(output / "config.json")
    assert config["model_type"] == "palimpsa"
    assert config["upgraded_layers"] == [1, 2]
    assert config["tie_word_embeddings"] is False
    report = read_json(output / "upgrade_report.json")
    assert report["format"] == "transformers"
    assert report["verification"]["passed"] is True
    assert_plan(run, source, "transformers", "1, 2 (2 of 3, as listed)", "float32", report)
    assert "shards up to 5e-05 GB" in run.stdout
    assert_figures_printed(run, report)
    assert_card(output, report, "1, 2")

    model = load_output(output)
    assert [i for i, layer in enumerate(model.backbone.layers) if isinstance(layer.mixer, PalimpsaMixer)] == [1, 2]
    base = base_model(source)
    for name, tensor in base.state_dict().items():
        assert torch.equal(saved[name], tensor), name
    assert_equivalent_at_zero(model, base, 264)


def test_bf16(runs):
    run = runs["bf16_force"]
    assert_succeeded(run)
    saved = output_tensors(run.output)
    assert saved and all(t.dtype == torch.bfloat16 for t in saved.values())
    base = base_model(runs["_sources"][0]["random"])
    for name, tensor in base.state_dict().items():
        if name != "lm_head.weight":
            assert torch.equal(saved[name], tensor.to(torch.bfloat16)), name
    report = read_json(run.output / "upgrade_report.json")
    assert (report["dtype"], report["source_dtype"]) == ("bfloat16", "float32")
    assert report["verification"]["passed"] is True
    assert read_json(run.output / "config.json")["dtype"] == "bfloat16"
    assert "dtype       bfloat16 (converted from float32)" in run.stdout
    model = load_output(run.output, dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16
    assert read_json(run.output / "config.json")["upgraded_layers"] == [2, 3]


def test_skip_verify(runs):
    run = runs["skip_verify"]
    assert_succeeded(run)
    report = read_json(run.output / "upgrade_report.json")
    assert report["verification"] == {"skipped": True}
    assert "verify      skipped (--skip-verify)" in run.stdout
    assert "verifying" not in run.stdout and "beta scale 0" not in run.stdout
    assert "tokenizer   none in the source" in run.stdout
    assert report["tokenizer_files"] == []
    assert sorted(p.name for p in run.output.iterdir()) == sorted(
        ["model.safetensors", "config.json", "README.md", "upgrade_report.json", *CODE])
    card = (run.output / "README.md").read_text()
    assert "skipped" in card and "carried no tokenizer files" in card
    assert read_json(run.output / "config.json")["upgraded_layers"] == [1]
    load_output(run.output)


def test_force_replaces_existing_output(runs):
    run = runs["bf16_force"]
    assert_succeeded(run)
    names = sorted(p.name for p in run.output.iterdir())
    assert "keep.txt" not in names and "sub" not in names
    assert "model.safetensors" in names and "upgrade_report.json" in names
    assert read_json(run.output / "config.json")["upgraded_layers"] == [2, 3]  # --strategy last
    assert "strategy last" in run.stdout
    load_output(run.output)


def test_sources_left_untouched(runs):
    sources, before = runs["_sources"]
    for key, path in sources.items():
        assert snapshot(path) == before[key], key


def test_help(runs):
    run = runs["help"]
    assert run.result.returncode == 0
    assert run.stderr == ""
    text = run.stdout
    assert text.startswith("usage: upgrade-model")
    assert "--layers SPEC" in text and "3,11,19" in text and "48-63" in text
    assert "count" in text and "--strategy" in text
    for produced in ("safetensors", "config.json", "tokenizer", "README.md", "upgrade_report.json"):
        assert produced in text, produced
    assert sorted(run.root.iterdir()) == []


# ------------------------------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("name", list(FAILING))
def test_bad_input(runs, name):
    assert_clean_failure(runs[name], FAILING[name][3])


def test_existing_output_contents_untouched(runs):
    for name in ("output_not_empty", "verification_fails_with_force"):
        output = runs[name].output
        assert (output / "keep.txt").read_text() == "precious\n"
        assert (output / "sub" / "model.safetensors").read_bytes() == b"an older model"
        assert sorted(p.name for p in output.iterdir()) == ["keep.txt", "sub"]


def test_verification_failure_prints_figures(runs):
    run = runs["verification_fails"]
    assert "beta at init" in run.stdout and "writing" not in run.stdout
    assert "nothing was written" in run.stderr


def test_a_bad_input_is_caught_before_reading_weights(runs):
    for name in ("bad_dtype", "bad_shard_size", "output_not_empty", "output_is_file", "missing_path"):
        assert "Plan" not in runs[name].stdout, name
        assert "reading weights" not in runs[name].stderr, name
