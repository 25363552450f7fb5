"""Tests of ``export-model`` (``palimpsa.upgrade.export``) and of the checksums checked at load time.

Sources are built from the random tiny test model (``tiny_random``): an upgraded model directory
(``upgrade_model``), a "trained" one (random beta parameters, beta scale 0.7, saved with ``save_pretrained``), a
LoRA adapter over the upgraded model and training-run layouts. Each export is compared with what its source
computes: reloading gives the same logits, the merged LoRA model the PEFT model's, the standalone copy (in a Python
that cannot import palimpsa) the installed model's, and ``--to-mamba2`` the Palimpsa model at beta scale 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
import yaml
from checkpoints import ROOT, hub_cache_layout
from hub_server import HubStandIn
from palimpsa.upgrade import PalimpsaError, PalimpsaForCausalLM, upgrade_model
from palimpsa.upgrade.cli.export_model import main as export_main
from palimpsa.upgrade.convert.checkpoint import load_checkpoint
from palimpsa.upgrade.convert.compare import probe_input_ids
from palimpsa.upgrade.evaluate.generation import generate_text
from palimpsa.upgrade.export.export import export_model, resolve_export_source
from palimpsa.upgrade.io.manifest import SKIP_CHECKSUMS_ENV
from palimpsa.upgrade.model.modeling import model_from_state_dict
from safetensors import safe_open
from transformers import AutoModelForCausalLM

PREFIX = "export-model: error: "
TINY_TOKENIZER = ("tokenizer.json", "tokenizer_config.json")
RECIPE = "# recipe of the test run\nlearning_rate: 3.0e-4\nsteps: 20\n"
EVAL_SUMMARY = {"perplexity": 12.5, "needle_accuracy": 0.75}


# ----------------------------------------------------------------------------------------------------------------
# helpers


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ids_for(vocab: int = 256, batch: int = 2, length: int = 24, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def logits_of(model, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids).logits.float()


def load(directory: Path, **kwargs) -> PalimpsaForCausalLM:
    return AutoModelForCausalLM.from_pretrained(str(directory), **kwargs).eval()


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (hidden ones included) with its bytes; None for a directory."""
    return {str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes()) for p in sorted(root.rglob("*"))}


def run_cli(args: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


def assert_report_matches_files(output: Path) -> dict:
    """export_report.json lists every file but itself and the card, with the real sizes and sha256."""
    report = read_json(output / "export_report.json")
    present = {p.name for p in output.iterdir()}
    assert set(report["files"]) == present - {"export_report.json", "README.md"}
    for name, entry in report["files"].items():
        assert entry == {"bytes": (output / name).stat().st_size, "sha256": sha256(output / name)}, name
    return report


def assert_tokenizer_copied(output: Path, base: Path) -> None:
    for name in TINY_TOKENIZER:
        assert (output / name).read_bytes() == (base / name).read_bytes()


# ----------------------------------------------------------------------------------------------------------------
# sources and exports, built once


@dataclass
class Sources:
    root: Path
    base: Path  # the random tiny Mamba2 checkpoint (mamba_ssm format, byte-level tokenizer)
    upgraded: Path  # upgrade_model output (upgrade_report.json with checksums)
    trained: Path  # random beta parameters, beta scale 0.7, save_pretrained + tokenizer
    adapter: Path  # PEFT LoRA adapter over `upgraded`
    run: Path  # checkpoints/step-000010/model (= upgraded), step-000020/model (= trained), recipe, eval summary
    run_final: Path  # the same plus final/ (= upgraded)
    ids: torch.Tensor
    logits: dict[str, torch.Tensor] = field(default_factory=dict)


def make_trained(upgraded: Path, output: Path) -> None:
    model = PalimpsaForCausalLM.from_pretrained(str(upgraded)).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for mixer in model.palimpsa_mixers():
            for linear in (mixer.beta_down, mixer.beta_up):
                linear.weight.copy_(torch.randn(linear.weight.shape, generator=gen) * linear.weight.shape[1] ** -0.5)
            mixer.beta_up.bias.copy_(torch.randn(mixer.beta_up.bias.shape, generator=gen))
            mixer.beta_log_gain.copy_((2.0 + torch.rand(mixer.beta_log_gain.shape, generator=gen)).log())
    model.set_beta_scale(0.7)
    model.save_pretrained(output)
    for name in TINY_TOKENIZER:
        shutil.copy2(upgraded / name, output / name)


def make_adapter(upgraded: Path, output: Path, ids: torch.Tensor) -> torch.Tensor:
    from peft import LoraConfig, get_peft_model

    base = PalimpsaForCausalLM.from_pretrained(str(upgraded)).eval()
    peft_model = get_peft_model(base, LoraConfig(target_modules=["in_proj", "out_proj"], r=4))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.05)
    peft_model.eval()
    peft_model.save_pretrained(output)
    return logits_of(peft_model, ids)


@pytest.fixture(scope="module")
def sources(tmp_path_factory, tiny_random) -> Sources:
    root = tmp_path_factory.mktemp("sources")
    upgraded, trained = root / "upgraded", root / "trained"
    upgrade_model(tiny_random, 2, output=upgraded, beta_init=0.5, verify=False)
    make_trained(upgraded, trained)
    ids = ids_for()
    found = Sources(root, tiny_random, upgraded, trained, root / "adapter", root / "run", root / "run-final", ids)
    found.logits["peft"] = make_adapter(upgraded, found.adapter, ids)
    for run in (found.run, found.run_final):
        shutil.copytree(upgraded, run / "checkpoints" / "step-000010" / "model")
        shutil.copytree(trained, run / "checkpoints" / "step-000020" / "model")
        (run / "recipe.yaml").write_text(RECIPE)
        (run / "eval_summary.json").write_text(json.dumps(EVAL_SUMMARY))
    shutil.copytree(upgraded, found.run_final / "final")
    for name, path in (("upgraded", upgraded), ("trained", trained)):
        found.logits[name] = logits_of(PalimpsaForCausalLM.from_pretrained(str(path)).eval(), ids)
    return found


NO_PALIMPSA = """\
import sys; [sys.modules.__setitem__(n, None) for n in ("palimpsa", "palimpsa.upgrade", "palimpsa.kernels")]
import json

for name in ("palimpsa", "palimpsa.upgrade", "palimpsa.kernels"):
    try:
        __import__(name)
    except ImportError:
        pass
    else:
        raise SystemExit(f"{name} could be imported")

import torch
from transformers import AutoModelForCausalLM

"""

STANDALONE_SCRIPT = NO_PALIMPSA + """
directory, ids, resaved = sys.argv[1], torch.tensor(json.loads(sys.argv[2])), sys.argv[3]
model = AutoModelForCausalLM.from_pretrained(directory, trust_remote_code=True).eval()
with torch.no_grad():
    logits = model(ids).logits.float()
    hidden = model(ids, output_hidden_states=True).hidden_states
    as_tuple = model(ids, return_dict=False)
    generated = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)
model.save_pretrained(resaved)  # transformers copies the remote code itself
again = AutoModelForCausalLM.from_pretrained(resaved, trust_remote_code=True).eval()
with torch.no_grad():
    resaved_logits = again(ids).logits.float()
print(json.dumps({"module": type(model).__module__, "logits": logits.tolist(), "generated": generated.tolist(),
                  "hidden_states": len(hidden), "tuple": type(as_tuple) is tuple and torch.equal(as_tuple[0], logits),
                  "resaved": torch.equal(resaved_logits, logits)}))
"""

# A user without palimpsa meets a model directory palimpsa wrote (upgrade-model's output, save_pretrained's).
AUTO_CLASSES_SCRIPT = NO_PALIMPSA + """
from transformers import AutoConfig, AutoTokenizer

ids, found = torch.tensor(json.loads(sys.argv[1])), {}
for directory in sys.argv[2:]:
    refusals = []
    for load in (AutoConfig.from_pretrained, AutoModelForCausalLM.from_pretrained):
        try:
            load(directory)
        except ValueError as error:
            refusals.append(str(error))
    config = AutoConfig.from_pretrained(directory, trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(directory, trust_remote_code=True).eval()
    with torch.no_grad():
        logits = model(ids).logits.float()
    found[directory] = {"refusals": refusals, "config": type(config).__name__, "module": type(model).__module__,
                        "logits": logits.tolist(), "tokenizer": len(AutoTokenizer.from_pretrained(directory))}
print("\\n" + json.dumps(found))  # after transformers' prompt for trust_remote_code, which ends no line
"""


@pytest.fixture(scope="module")
def exports(sources) -> dict[str, Path]:
    """Exports through the Python function (fast), then the console-script runs in parallel subprocesses."""
    root = sources.root.parent / "exports"
    root.mkdir()
    s = sources
    planned = {
        "single": (s.trained, {}),
        "bf16": (s.trained, {"dtype": "bf16"}),
        "standalone": (s.trained, {"standalone": True, "shard_size": "100KB"}),
        "mamba2": (s.trained, {"to_mamba2": True}),
        "hf_mamba2": (s.trained, {"to_hf_mamba2": True}),
        "hf_from_plain": (s.base, {"to_hf_mamba2": True}),
        "merged": (s.adapter, {"merge_lora": True}),
        "run": (s.run, {}),
        "run_final": (s.run_final, {}),
    }
    done = {}
    for name, (source, options) in planned.items():
        done[name] = root / name
        export_model(source, done[name], **options)
    return done


@pytest.fixture(scope="module")
def hub():
    """The local stand-in of the hub's HTTP API that --push-to-hub talks to (tests/hub_server.py)."""
    server = HubStandIn(refuse=("me/denied",)).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cli_runs(sources, exports, hub) -> dict[str, subprocess.CompletedProcess]:
    root = sources.root.parent / "cli"
    root.mkdir()
    hub_env = {"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": "hf_stand_in", "HF_HUB_OFFLINE": "0",
               "HF_HOME": str(root / "hf-home")}
    (root / "sharded").mkdir()
    (root / "missing").mkdir()
    (root / "modules").mkdir()
    ids = json.dumps(sources.ids[:, :12].tolist())
    planned = {
        "sharded": (["export-model", str(sources.trained), "--output", str(root / "sharded" / "out"),
                     "--shard-size", "100KB"], {}),
        "missing": (["export-model", str(root / "no-such-model"), "--output", str(root / "missing" / "out")], {}),
        "hf_mamba2": (["export-model", str(sources.upgraded), "--output", str(root / "hf-mamba2"), "--to-hf-mamba2",
                       "--shard-size", "100KB"], {}),
        # a Python that cannot import palimpsa, in a directory away from the repository
        "standalone": ([sys.executable, "-c", STANDALONE_SCRIPT, str(exports["standalone"]), ids,
                        str(root / "resaved")], {"HF_MODULES_CACHE": str(root / "modules"), "PYTHONPATH": ""}),
        "auto_classes": ([sys.executable, "-c", AUTO_CLASSES_SCRIPT, ids, str(sources.upgraded), str(sources.trained)],
                         {"HF_MODULES_CACHE": str(root / "modules-auto"), "PYTHONPATH": ""}),
        "push": (["export-model", str(sources.run_final), "-o", str(root / "pushed"), "--push-to-hub",
                  "me/tiny-palimpsa", "--private"], hub_env),
        "push_refused": (["export-model", str(sources.trained), "-o", str(root / "refused"), "--push-to-hub",
                          "me/denied"], hub_env),
        # the GPU check the lead runs once on a GPU, here through Triton's interpreter
        "gpu_check": ([sys.executable, str(ROOT / "scripts" / "check_standalone_gpu.py"), "--device", "cpu",
                       "--quick"], {}),
        "upgrade_push": (["upgrade-model", str(sources.base), "--layers", "2", "--skip-verify", "-o",
                          str(root / "upgrade-pushed"), "--push-to-hub", "me/tiny-upgrade"], hub_env),
    }
    with ThreadPoolExecutor(len(planned)) as pool:
        futures = {name: pool.submit(run_cli, args, root, env) for name, (args, env) in planned.items()}
        runs = {name: future.result() for name, future in futures.items()}
    runs["_root"] = root  # type: ignore[assignment]
    return runs


# ----------------------------------------------------------------------------------------------------------------
# the sources are what they claim


def test_sources(sources):
    assert not torch.equal(sources.logits["upgraded"], sources.logits["trained"])
    trained = PalimpsaForCausalLM.from_pretrained(str(sources.trained)).eval()
    assert trained.config.beta_scale == 0.7
    with trained.beta_scaled(0.0):
        at_zero = logits_of(trained, sources.ids)
    assert max_diff(at_zero, sources.logits["trained"]) > 0.03  # beta matters in the trained source
    adapter_config = read_json(sources.adapter / "adapter_config.json")
    assert adapter_config["base_model_name_or_path"] == str(sources.upgraded)
    assert sorted(adapter_config["target_modules"]) == ["in_proj", "out_proj"]
    assert adapter_config["r"] == 4
    assert max_diff(sources.logits["peft"], sources.logits["upgraded"]) > 0.1  # the adapter matters


# ----------------------------------------------------------------------------------------------------------------
# a model directory


def test_export_single_file(sources, exports):
    output = exports["single"]
    names = {p.name for p in output.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "README.md", "export_report.json",
            *TINY_TOKENIZER} <= names
    assert not any(name.startswith("model-") for name in names)
    assert "model.safetensors.index.json" not in names
    assert {"configuration_palimpsa.py", "modeling_palimpsa.py"} <= names  # the code for trust_remote_code
    assert_tokenizer_copied(output, sources.base)
    report = assert_report_matches_files(output)
    assert report["format"] == "palimpsa"
    assert report["source"] == str(sources.trained)
    assert report["source_kind"] == "model"
    assert report["dtype"] == "float32"
    assert report["upgraded_layers"] == [1, 3]
    assert report["beta"]["scale"] == 0.7
    assert report["beta"]["init"] == 0.5

    config = read_json(output / "config.json")
    assert config["model_type"] == "palimpsa"
    assert config["upgraded_layers"] == [1, 3]
    assert config["beta_init"] == 0.5 and config["beta_scale"] == 0.7
    assert config["base_model"] == str(sources.base)
    assert config["architectures"] == ["PalimpsaForCausalLM"]
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_palimpsa.PalimpsaForCausalLM"
    generation = read_json(output / "generation_config.json")
    assert generation["eos_token_id"] == 256
    assert generation["pad_token_id"] == 256

    card = (output / "README.md").read_text()
    assert "import palimpsa.upgrade" in card
    assert "[1, 3]" in card


def test_export_reloads_with_identical_weights_and_logits(sources, exports):
    source = PalimpsaForCausalLM.from_pretrained(str(sources.trained))
    model = load(exports["single"])
    assert type(model) is PalimpsaForCausalLM
    assert model.config.beta_scale == 0.7
    assert all(mixer.beta_scale == 0.7 for mixer in model.palimpsa_mixers())
    exported, original = model.state_dict(), source.state_dict()
    assert exported.keys() == original.keys()
    for name, tensor in original.items():
        assert torch.equal(exported[name], tensor), name
    assert max_diff(logits_of(model, sources.ids), sources.logits["trained"]) <= 1e-6


def test_export_cli_sharded(sources, cli_runs):
    run = cli_runs["sharded"]
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    assert PREFIX not in run.stderr
    root = cli_runs["_root"] / "sharded"
    assert sorted(p.name for p in root.iterdir()) == ["out"]  # no staging or retired sibling left
    output = root / "out"
    assert str(sources.trained) in run.stdout  # the plan names the source
    names = {p.name for p in output.iterdir()}
    shards = sorted(name for name in names if name.startswith("model-"))
    assert len(shards) >= 3
    assert "model.safetensors" not in names
    assert {"model.safetensors.index.json", "config.json", "generation_config.json", "README.md",
            "export_report.json", *TINY_TOKENIZER} <= names
    for shard in shards:
        assert (output / shard).stat().st_size <= 100_000 + 4096  # the limit, plus the header
    index = read_json(output / "model.safetensors.index.json")
    assert sorted(set(index["weight_map"].values())) == shards
    stored = {}
    for shard in shards:
        with safe_open(str(output / shard), "pt") as handle:
            stored.update({key: shard for key in handle.keys()})
    assert stored == index["weight_map"]
    assert_report_matches_files(output)
    model = load(output)
    assert max_diff(logits_of(model, sources.ids), sources.logits["trained"]) <= 1e-6


def test_export_bf16(sources, exports):
    output = exports["bf16"]
    with safe_open(str(output / "model.safetensors"), "pt") as handle:
        dtypes = {handle.get_slice(key).get_dtype() for key in handle.keys()}
    assert dtypes == {"BF16"}
    assert read_json(output / "config.json")["dtype"] == "bfloat16"
    report = assert_report_matches_files(output)
    assert report["dtype"] == "bfloat16"
    model = load(output)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    source = PalimpsaForCausalLM.from_pretrained(str(sources.trained))
    exported = model.state_dict()
    for name, tensor in source.state_dict().items():
        assert torch.equal(exported[name], tensor.to(torch.bfloat16)), name
    logits = logits_of(model, sources.ids)
    reference = sources.logits["trained"]
    assert max_diff(logits, reference) <= 5e-2 * reference.abs().max().item()


def test_force_replaces_an_existing_export(sources, tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    (output / "stale.txt").write_text("old")
    export_model(sources.upgraded, output, force=True)
    assert not (output / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert_report_matches_files(output)
    assert max_diff(logits_of(load(output), sources.ids), sources.logits["upgraded"]) <= 1e-6


# ----------------------------------------------------------------------------------------------------------------
# --standalone


def test_standalone_files(exports):
    output = exports["standalone"]
    names = {p.name for p in output.iterdir()}
    assert {"configuration_palimpsa.py", "modeling_palimpsa.py"} <= names
    assert len([n for n in names if n.startswith("model-")]) >= 3
    config = read_json(output / "config.json")
    assert config["auto_map"] == {"AutoConfig": "configuration_palimpsa.PalimpsaConfig",
                                  "AutoModelForCausalLM": "modeling_palimpsa.PalimpsaForCausalLM"}
    report = assert_report_matches_files(output)
    assert report["standalone"] is True
    assert "trust_remote_code=True" in (output / "README.md").read_text()
    code = (output / "modeling_palimpsa.py").read_text()
    assert "import palimpsa" not in code and "from palimpsa" not in code


def test_standalone_loads_without_palimpsa(sources, exports, cli_runs):
    run = cli_runs["standalone"]
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert not result["module"].startswith("palimpsa")
    assert "modeling_palimpsa" in result["module"]
    assert result["hidden_states"] == read_json(exports["standalone"] / "config.json")["n_layer"] + 1
    assert result["tuple"] is True
    assert result["resaved"] is True

    installed = load(exports["standalone"])  # with palimpsa imported, its own class serves the same directory
    assert type(installed) is PalimpsaForCausalLM
    ids = sources.ids[:, :12]
    expected = logits_of(installed, ids)
    assert max_diff(torch.tensor(result["logits"]), expected) <= 1e-5
    with torch.no_grad():
        generated = installed.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)
    assert torch.equal(torch.tensor(result["generated"]), generated)
    assert len(result["generated"][0]) == 18


def test_model_directories_load_without_palimpsa(sources, cli_runs):
    """upgrade-model's output and save_pretrained's carry the modeling code and an auto_map: without palimpsa,
    transformers asks for trust_remote_code=True (rather than to update itself) and then loads them."""
    run = cli_runs["auto_classes"]
    assert run.returncode == 0 and run.stdout.strip(), run.stderr[-3000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    ids = sources.ids[:, :12]
    for name, directory in (("upgraded", sources.upgraded), ("trained", sources.trained)):
        result = found[str(directory)]
        assert len(result["refusals"]) == 2, result["refusals"]
        assert all("trust_remote_code=True" in refusal for refusal in result["refusals"])
        assert result["config"] == "PalimpsaConfig" and "modeling_palimpsa" in result["module"]
        assert result["tokenizer"] == 257
        expected = logits_of(load(directory), ids)
        assert max_diff(torch.tensor(result["logits"]), expected) <= 1e-5, name


def test_the_copy_carries_the_triton_kernels(exports, cli_runs):
    """The code beside the weights includes the Triton module, which the copy's dispatch uses on a GPU (here run
    by scripts/check_standalone_gpu.py in Triton's interpreter): its operators register in a namespace of their
    own, and no file of the copy names triton where transformers checks a remote module's imports (a machine
    without triton loads it from the hub and runs the PyTorch paths)."""
    import importlib.util

    from palimpsa.kernels import fused_recurrent as package
    from transformers.dynamic_module_utils import get_imports, get_relative_import_files

    output = exports["standalone"]
    files = get_relative_import_files(output / "modeling_palimpsa.py")
    assert sorted(Path(f).name for f in files) == ["configuration_palimpsa.py", "fused_recurrent.py"]
    for path in output.glob("*.py"):
        assert "triton" not in get_imports(path), path.name
    spec = importlib.util.spec_from_file_location("a_model_copy.fused_recurrent", output / "fused_recurrent.py")
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)  # beside the package's own operators, without a clash
    assert package.OPS_NAMESPACE == "palimpsa" and copy.OPS_NAMESPACE == "a_model_copy_fused_recurrent"
    assert copy.SAVE_UNDER_CHECKPOINTING[0] is not package.SAVE_UNDER_CHECKPOINTING[0]
    # the chunk-parallel backward stays in the package: the copy's default backward is the sequential one
    assert package._chunked_available() and not copy._chunked_available()

    run = cli_runs["gpu_check"]
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines()[-1].startswith("standalone GPU check: PASS on cpu (Triton interpreter): "
                                                          "float32 logits within ")


# ----------------------------------------------------------------------------------------------------------------
# --merge-lora


def test_merge_lora(sources, exports):
    output = exports["merged"]
    report = assert_report_matches_files(output)
    assert report["source_kind"] == "adapter"
    assert_tokenizer_copied(output, sources.base)  # the adapter has none: the base model's
    config = read_json(output / "config.json")
    assert config["model_type"] == "palimpsa"
    model = load(output)
    assert not any("lora" in name for name in model.state_dict())
    logits = logits_of(model, sources.ids)
    peft_logits = sources.logits["peft"]
    # the merged weight W + BA rounds differently from W x + B(A x): float32 rounding of the logits' size
    assert max_diff(logits, peft_logits) <= 1e-5 * max(1.0, peft_logits.abs().max().item())
    assert max_diff(logits, sources.logits["upgraded"]) > 0.1


def test_adapter_without_merge_lora_is_refused(sources, tmp_path, monkeypatch, capsys):
    assert_refused(tmp_path, [str(sources.adapter), "--output", str(tmp_path / "out")], "--merge-lora",
                   monkeypatch, capsys)


# ----------------------------------------------------------------------------------------------------------------
# training runs


def test_training_run_takes_the_newest_step(sources, exports):
    assert resolve_export_source(sources.run) == (sources.run / "checkpoints" / "step-000020" / "model", "model")
    output = exports["run"]
    report = assert_report_matches_files(output)
    assert report["source"] == str(sources.run / "checkpoints" / "step-000020" / "model")
    assert report["evaluation"] == EVAL_SUMMARY
    assert max_diff(logits_of(load(output), sources.ids), sources.logits["trained"]) <= 1e-6
    card = (output / "README.md").read_text()
    assert RECIPE.strip() in card
    assert "needle_accuracy" in card and "12.5" in card


def test_training_run_prefers_final(sources, exports):
    assert resolve_export_source(sources.run_final) == (sources.run_final / "final", "model")
    output = exports["run_final"]
    report = assert_report_matches_files(output)
    assert report["source"] == str(sources.run_final / "final")
    assert report["evaluation"] == EVAL_SUMMARY
    assert max_diff(logits_of(load(output), sources.ids), sources.logits["upgraded"]) <= 1e-6
    assert RECIPE.strip() in (output / "README.md").read_text()


def test_training_run_skips_an_interrupted_checkpoint(sources, tmp_path):
    """upgrade/training.py writes ``checkpoints/step-NNNNNNN.partial/`` and renames it when complete; a crash leaves
    the ``.partial`` folder (kept by its rotation), whose ``model/`` may be half written. The newest *complete*
    checkpoint is the one to export."""
    run = tmp_path / "run"
    shutil.copytree(sources.upgraded, run / "checkpoints" / "step-0000010" / "model")
    shutil.copytree(sources.trained, run / "checkpoints" / "step-0000020" / "model")
    partial = run / "checkpoints" / "step-0000030.partial" / "model"
    partial.mkdir(parents=True)
    (partial / "model.safetensors").write_bytes((sources.trained / "model.safetensors").read_bytes()[:4096])
    assert resolve_export_source(run) == (run / "checkpoints" / "step-0000020" / "model", "model")


def test_training_run_without_a_model(tmp_path):
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    with pytest.raises(PalimpsaError, match="holds no model"):
        resolve_export_source(tmp_path / "run")


# ----------------------------------------------------------------------------------------------------------------
# --to-mamba2


def test_to_mamba2(sources, exports):
    output = exports["mamba2"]
    config = read_json(output / "config.json")
    assert config["ssm_cfg"]["layer"] == "Mamba2"
    assert config.get("model_type") != "palimpsa"
    assert config["vocab_size"] == 257
    assert (output / "pytorch_model.bin").is_file()
    assert not any(p.name.endswith(".safetensors") for p in output.iterdir())
    assert_tokenizer_copied(output, sources.base)
    state = torch.load(output / "pytorch_model.bin", map_location="cpu", weights_only=True)
    assert not any("beta" in key for key in state)
    source = PalimpsaForCausalLM.from_pretrained(str(sources.trained)).eval()
    expected_keys = {key for key in source.state_dict() if ".beta_" not in key} | {"lm_head.weight"}
    assert set(state) == expected_keys

    checkpoint = load_checkpoint(output)
    mamba2 = model_from_state_dict(checkpoint.config, checkpoint.load_state_dict(progress=False)).eval()
    assert mamba2.config.upgraded_layers == []
    assert mamba2.config.vocab_size == source.config.vocab_size
    source.set_beta_scale(0.0)
    reference = logits_of(source, sources.ids)
    # the same computation on the same weights, up to float32 rounding of the logits' size
    assert max_diff(logits_of(mamba2, sources.ids), reference) <= 2e-6 * max(1.0, reference.abs().max().item())

    report = read_json(output / "export_report.json")
    assert report["format"] == "mamba_ssm"
    assert_report_matches_files(output)
    vocab = source.config.base_vocab_size or source.config.vocab_size
    probe = probe_input_ids(vocab, 2, 64, seed=0)
    source.set_beta_scale(0.7)  # the scale as saved
    measured = max_diff(logits_of(source, probe), logits_of(mamba2, probe))
    stated = report["to_mamba2"]["max_abs_diff"]
    assert measured > 0.1
    assert abs(stated - measured) <= 1e-6 * max(1.0, measured), (stated, measured)
    assert f"{stated:.3g}" in (output / "README.md").read_text()


def test_to_mamba2_generates(exports):
    completions = generate_text(exports["mamba2"], ["abc"], max_new_tokens=4)
    assert len(completions) == 1


# ----------------------------------------------------------------------------------------------------------------
# --to-hf-mamba2


def test_to_hf_mamba2_cli(sources, cli_runs):
    """export-model --to-hf-mamba2 as a user runs it: transformers' own Mamba2ForCausalLM loads the output and
    computes what the Palimpsa model computes with beta at 0."""
    from transformers import Mamba2ForCausalLM

    run = cli_runs["hf_mamba2"]
    assert run.returncode == 0, run.stderr[-3000:]
    assert "dropping beta changes the logits by max" in run.stdout
    output = cli_runs["_root"] / "hf-mamba2"
    config = read_json(output / "config.json")
    assert config["model_type"] == "mamba2" and config["architectures"] == ["Mamba2ForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]) == (64, 4, 272)
    assert not any(name.endswith(".py") for name in os.listdir(output)) and "auto_map" not in config
    index = read_json(output / "model.safetensors.index.json")["weight_map"]
    assert "backbone.embeddings.weight" in index and not any("beta" in key for key in index)
    assert "lm_head.weight" not in index  # tied, as transformers saves it
    assert_tokenizer_copied(output, sources.base)
    report = assert_report_matches_files(output)
    assert report["format"] == "transformers"

    model = Mamba2ForCausalLM.from_pretrained(str(output)).eval()
    assert type(model) is Mamba2ForCausalLM and model.config.vocab_size == 272
    source = PalimpsaForCausalLM.from_pretrained(str(sources.upgraded)).eval()
    with source.beta_scaled(0.0):
        reference = logits_of(source, sources.ids)
    assert max_diff(logits_of(model, sources.ids), reference) <= 1e-5 * reference.abs().max().item()
    assert f"{report['to_hf_mamba2']['max_abs_diff']:.3g}" in run.stdout


def test_to_hf_mamba2_states_what_dropping_beta_costs(sources, exports):
    from transformers import AutoModelForCausalLM as Auto
    from transformers import Mamba2ForCausalLM

    output = exports["hf_mamba2"]
    model = Auto.from_pretrained(str(output)).eval()  # model_type mamba2: transformers' class, no palimpsa's
    assert type(model) is Mamba2ForCausalLM
    source = PalimpsaForCausalLM.from_pretrained(str(sources.trained)).eval()  # beta scale 0.7
    probe = probe_input_ids(257, 2, 64, seed=0)
    measured = max_diff(logits_of(source, probe), logits_of(model, probe))
    stated = read_json(output / "export_report.json")["to_hf_mamba2"]["max_abs_diff"]
    assert measured > 0.1 and abs(stated - measured) <= 1e-6 * max(1.0, measured), (stated, measured)
    card = (output / "README.md").read_text()
    assert f"{stated:.3g}" in card and "Mamba2ForCausalLM" in card
    source.set_beta_scale(0.0)
    reference = logits_of(source, sources.ids)
    assert max_diff(logits_of(model, sources.ids), reference) <= 1e-5 * reference.abs().max().item()


def test_to_hf_mamba2_converts_a_plain_mamba2(sources, exports):
    from transformers import Mamba2ForCausalLM

    output = exports["hf_from_plain"]
    report = read_json(output / "export_report.json")
    assert report["source_kind"] == "mamba2" and report["upgraded_layers"] == []
    assert report["to_hf_mamba2"]["top1_agreement"] == 1.0  # no beta to drop: only the scans' rounding differs
    model = Mamba2ForCausalLM.from_pretrained(str(output)).eval()
    checkpoint = load_checkpoint(sources.base)
    plain = model_from_state_dict(checkpoint.config, checkpoint.load_state_dict(progress=False)).eval()
    reference = logits_of(plain, sources.ids)
    assert max_diff(logits_of(model, sources.ids), reference) <= 1e-5 * reference.abs().max().item()


def test_to_hf_mamba2_refuses_what_transformers_cannot_hold(tmp_path, monkeypatch, capsys):
    from checkpoints import write_mamba_ssm

    source = write_mamba_ssm(tmp_path / "sources" / "d-per-channel", D_has_hdim=True)
    assert_refused(tmp_path, [str(source), "--output", str(tmp_path / "out"), "--to-hf-mamba2"],
                   "cannot be written in transformers' Mamba2 format: its skip term D has one value per channel",
                   monkeypatch, capsys)
    assert_refused(tmp_path, [str(source), "--output", str(tmp_path / "out"), "--to-hf-mamba2", "--to-mamba2"],
                   "--to-mamba2 and --to-hf-mamba2 exclude each other", monkeypatch, capsys)


# ----------------------------------------------------------------------------------------------------------------
# model cards and the hub


def front_matter(card: str) -> dict:
    assert card.startswith("---\n"), card[:200]
    return yaml.safe_load(card.split("---\n")[1])


def test_the_card_carries_the_hub_metadata_and_no_local_path(sources, exports, cli_runs):
    for name in ("single", "run", "mamba2", "hf_mamba2"):
        card = (exports[name] / "README.md").read_text()
        matter = front_matter(card)
        assert matter["pipeline_tag"] == "text-generation" and {"palimpsa", "mamba2"} <= set(matter["tags"])
        assert matter.get("library_name") == (None if name == "mamba2" else "transformers")
        assert "base_model" not in matter and "license" not in matter  # a local base, with no card of its own
        assert str(sources.root) not in card and str(Path.home()) not in card, name
        assert "<namespace>/<model-name>" in card
    card = (exports["single"] / "README.md").read_text()
    assert 'AutoModelForCausalLM.from_pretrained("<namespace>/<model-name>", trust_remote_code=True)' in card
    assert "tiny-random-mamba2 (a local checkpoint)" in card
    assert 'AutoModelForCausalLM.from_pretrained("<namespace>/<model-name>")' in (
        exports["hf_mamba2"] / "README.md").read_text()
    run = cli_runs["sharded"]
    assert "note: the model card states no license" in run.stdout and "--hub-id or --push-to-hub" in run.stdout


def test_the_card_names_a_hub_base_and_its_license(sources, tmp_path):
    """A base from the hub (here its cache, offline) is named by its id in base_model, and the license of its card
    travels to the upgraded model's card and on to an export's, whose snippet loads from --hub-id."""
    base = shutil.copytree(sources.base, tmp_path / "base")
    (base / "README.md").write_text("---\nlicense: apache-2.0\n---\n# a tiny Mamba2\n")
    cache = tmp_path / "cache"
    hub_cache_layout(base, cache, "owner/tiny-mamba2")
    upgraded = tmp_path / "upgraded"
    upgrade_model("owner/tiny-mamba2", 2, output=upgraded, verify=False, cache_dir=cache)
    card = (upgraded / "README.md").read_text()
    matter = front_matter(card)
    assert (matter["base_model"], matter["license"], matter["library_name"]) == ("owner/tiny-mamba2", "apache-2.0",
                                                                                "transformers")
    assert str(tmp_path) not in card and "# Palimpsa upgrade of owner/tiny-mamba2" in card
    exported = tmp_path / "exported"
    lines = []
    export_model(upgraded, exported, hub_id="owner/tiny-palimpsa", log=lines.append)
    card = (exported / "README.md").read_text()
    assert front_matter(card)["license"] == "apache-2.0" and front_matter(card)["base_model"] == "owner/tiny-mamba2"
    assert 'AutoModelForCausalLM.from_pretrained("owner/tiny-palimpsa", trust_remote_code=True)' in card
    assert "<namespace>" not in card and not any(line.startswith("note:") for line in lines)


def test_push_to_hub(hub, cli_runs):
    run = cli_runs["push"]
    assert run.returncode == 0, run.stderr[-3000:]
    assert "pushed: " in run.stdout
    output = cli_runs["_root"] / "pushed"
    repository = hub.repositories["me/tiny-palimpsa"]
    assert repository.visibility == "private" and repository.token == "hf_stand_in"
    assert repository.files == {p.name: p.read_bytes() for p in output.iterdir()}  # every file, as written
    card = repository.files["README.md"].decode()
    assert 'AutoModelForCausalLM.from_pretrained("me/tiny-palimpsa", trust_remote_code=True)' in card
    assert "## Training recipe" in card and "<namespace>" not in card
    assert any(metadata.get("pipeline_tag") == "text-generation" for metadata in hub.validated)
    assert not [request for request in hub.unexpected if "me/tiny-palimpsa" in request]


def test_upgrade_model_pushes_to_hub(hub, cli_runs):
    run = cli_runs["upgrade_push"]
    assert run.returncode == 0, run.stderr[-3000:]
    output = cli_runs["_root"] / "upgrade-pushed"
    repository = hub.repositories["me/tiny-upgrade"]
    assert repository.visibility != "private"
    assert repository.files == {p.name: p.read_bytes() for p in output.iterdir()}
    assert 'from_pretrained("me/tiny-upgrade", trust_remote_code=True)' in repository.files["README.md"].decode()


def test_a_failed_push_keeps_the_export_and_says_how_to_push_again(hub, cli_runs):
    run = cli_runs["push_refused"]
    assert run.returncode == 2 and "Traceback" not in run.stderr
    line = [line for line in run.stderr.splitlines() if line.strip()][-1]
    output = cli_runs["_root"] / "refused"
    assert line.startswith(f"{PREFIX}pushing to the hub repository me/denied failed ("), line
    assert line.endswith(f"the export is written in {output}: push it again with `hf upload me/denied {output}`")
    assert_report_matches_files(output)
    assert "me/denied" not in hub.repositories


@pytest.mark.parametrize("args, match", [
    (["--push-to-hub", "not a repo"], "--push-to-hub 'not a repo' is not a hub repository id; write it as"),
    (["--push-to-hub", "bare-name"], "--push-to-hub 'bare-name' is not a hub repository id"),
    (["--private"], "--private applies to the repository --push-to-hub creates"),
    (["--hub-id", "a/b", "--push-to-hub", "a/c"], "name different repositories"),
    (["--push-to-hub", "me/x"], "offline mode is on (HF_HUB_OFFLINE=1)"),
])
def test_hub_options_are_checked_before_any_work(sources, tmp_path, monkeypatch, capsys, args, match):
    assert_refused(tmp_path, [str(sources.upgraded), "--output", str(tmp_path / "out"), *args], match,
                   monkeypatch, capsys)


def test_a_push_without_a_token_is_refused_before_any_work(sources, tmp_path, monkeypatch, capsys):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-tokens"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    (tmp_path / "work").mkdir()
    assert_refused(tmp_path / "work", [str(sources.upgraded), "--output", str(tmp_path / "work" / "out"),
                                       "--push-to-hub", "me/x"], "needs a hub token with write access", monkeypatch,
                   capsys)


# ----------------------------------------------------------------------------------------------------------------
# checksums checked at load time


def flip_byte(path: Path, offset_from_end: int = 64) -> None:
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0x01
    path.write_bytes(bytes(data))


LOADERS = {"auto": lambda d: AutoModelForCausalLM.from_pretrained(str(d)),
           "palimpsa": lambda d: PalimpsaForCausalLM.from_pretrained(str(d))}


@pytest.mark.parametrize("loader", LOADERS)
def test_flipped_byte_is_caught(exports, tmp_path, monkeypatch, loader):
    copy = shutil.copytree(exports["single"], tmp_path / "model")
    flip_byte(copy / "model.safetensors")
    with pytest.raises(PalimpsaError, match=r"model\.safetensors.*sha256"):
        LOADERS[loader](copy)
    monkeypatch.setenv(SKIP_CHECKSUMS_ENV, "1")
    LOADERS[loader](copy)  # loads unchecked


def test_truncated_file_is_caught(exports, tmp_path):
    copy = shutil.copytree(exports["single"], tmp_path / "model")
    data = (copy / "model.safetensors").read_bytes()
    (copy / "model.safetensors").write_bytes(data[:-1000])
    with pytest.raises(PalimpsaError, match=r"model\.safetensors.*bytes"):
        load(copy)


def test_missing_shard_is_caught(exports, tmp_path, monkeypatch):
    copy = shutil.copytree(exports["standalone"], tmp_path / "model")
    shard = sorted(copy.glob("model-*.safetensors"))[1]
    shard.unlink()
    with pytest.raises(PalimpsaError, match=rf"{shard.name}.*missing"):
        load(copy)
    monkeypatch.setenv(SKIP_CHECKSUMS_ENV, "1")
    with pytest.raises(Exception) as raised:  # unchecked, transformers fails in its own way
        load(copy)
    assert not isinstance(raised.value, PalimpsaError)


def test_upgrade_output_is_checked(sources, tmp_path, monkeypatch):
    report = read_json(sources.upgraded / "upgrade_report.json")
    assert "model.safetensors" in report["files"]
    for name, entry in report["files"].items():
        path = sources.upgraded / name
        assert entry == {"bytes": path.stat().st_size, "sha256": sha256(path)}, name
    copy = shutil.copytree(sources.upgraded, tmp_path / "model")
    flip_byte(copy / "model.safetensors")
    with pytest.raises(PalimpsaError, match=r"model\.safetensors.*sha256"):
        load(copy)
    with pytest.raises(PalimpsaError, match=r"model\.safetensors"):  # nor is it exported
        export_model(copy, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    monkeypatch.setenv(SKIP_CHECKSUMS_ENV, "1")
    load(copy)


def test_an_edited_config_is_not_corruption(sources, tmp_path):
    """The issue's repro: a copy of an upgraded model with beta_scale edited in config.json loads (the manifest
    guards the weights; the config is validated when read), and computes with the edited scale."""
    copy = shutil.copytree(sources.upgraded, tmp_path / "model")
    config = read_json(copy / "config.json")
    config["beta_scale"] = 0.0
    (copy / "config.json").write_text(json.dumps(config, indent=2))
    model = load(copy)
    assert model.config.beta_scale == 0.0 and all(m.beta_scale == 0.0 for m in model.palimpsa_mixers())
    with model.beta_scaled(1.0):
        assert max_diff(logits_of(model, sources.ids), sources.logits["upgraded"]) <= 1e-6


def test_save_pretrained_over_its_own_directory_keeps_the_manifest_true(sources, tmp_path):
    copy = shutil.copytree(sources.upgraded, tmp_path / "model")
    model = PalimpsaForCausalLM.from_pretrained(str(copy)).eval()
    with torch.no_grad():
        model.backbone.layers[0].mixer.out_proj.weight.mul_(1.5)
    model.set_beta_scale(0.5)
    expected = logits_of(model, sources.ids)
    model.save_pretrained(copy)
    report = read_json(copy / "upgrade_report.json")
    present = {p.name for p in copy.iterdir()} - {"upgrade_report.json", "README.md"}
    assert set(report["files"]) == present and "model.safetensors" in present
    for name, entry in report["files"].items():
        assert entry == {"bytes": (copy / name).stat().st_size, "sha256": sha256(copy / name)}, name
    assert report["verification"] == read_json(sources.upgraded / "upgrade_report.json")["verification"]
    reloaded = load(copy)
    assert reloaded.config.beta_scale == 0.5
    assert max_diff(logits_of(reloaded, sources.ids), expected) <= 1e-6
    flip_byte(copy / "model.safetensors")  # and real corruption is still caught
    with pytest.raises(PalimpsaError, match=r"model\.safetensors.*sha256"):
        load(copy)


# ----------------------------------------------------------------------------------------------------------------
# refusals: one line, exit status 2, nothing written


def assert_refused(root: Path, argv: list[str], match: str, monkeypatch, capsys) -> None:
    before = snapshot(root)
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["export-model", *argv])
    with pytest.raises(SystemExit) as raised:
        export_main()
    captured = capsys.readouterr()
    assert raised.value.code == 2
    assert "Traceback" not in captured.out + captured.err
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(PREFIX), captured.err
    assert match in lines[0], lines[0]
    assert snapshot(root) == before  # no output, no .out.partial-* sibling


def test_cli_missing_source(cli_runs):
    run = cli_runs["missing"]
    assert run.returncode == 2
    assert "Traceback" not in run.stdout + run.stderr
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(PREFIX) and "no-such-model" in lines[0]
    assert list((cli_runs["_root"] / "missing").iterdir()) == []


def test_refuses_a_missing_source(tmp_path, monkeypatch, capsys):
    assert_refused(tmp_path, [str(tmp_path / "nothing-here"), "--output", str(tmp_path / "out")], "does not exist",
                   monkeypatch, capsys)


def test_refuses_a_mamba2_checkpoint(tiny_random, tmp_path, monkeypatch, capsys):
    assert_refused(tmp_path, [str(tiny_random), "--output", str(tmp_path / "out")], "not a Palimpsa model",
                   monkeypatch, capsys)


def test_refuses_a_non_empty_output(sources, tmp_path, monkeypatch, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    assert_refused(tmp_path, [str(sources.upgraded), "--output", str(tmp_path / "out")], "--force",
                   monkeypatch, capsys)
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"


def test_refuses_standalone_with_to_mamba2(sources, tmp_path, monkeypatch, capsys):
    assert_refused(tmp_path, [str(sources.upgraded), "--output", str(tmp_path / "out"), "--standalone",
                              "--to-mamba2"], "--standalone", monkeypatch, capsys)
