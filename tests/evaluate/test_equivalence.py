"""The beta -> 0 sweep (``verify-equivalence``): it passes on an upgraded model, fresh or fine-tuned, and catches
models that are broken.

The console script runs once as a user runs it (a subprocess, started when the module starts so that it overlaps
the in-process tests, and checked at the end). The other cases call the script's entry point in-process
(``verify_main`` with ``sys.argv`` set), which saves the seconds of importing torch per case while exercising the
same code, exit status and error printing.

The sweep's machinery is exercised on the random tiny test model (``tiny_random``), which is small and fast.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from palimpsa.upgrade import PalimpsaForCausalLM, PalimpsaMixer, upgrade_model
from palimpsa.upgrade.cli.verify_equivalence import main as verify_main
from palimpsa.upgrade.convert.compare import probe_input_ids
from palimpsa.upgrade.evaluate.equivalence import SLOPE_RANGE, ZERO_TOLERANCE, fit_slope, run_sweep, sweep_scales
from palimpsa.upgrade.evaluate.tasks import default_long_text

PREFIX = "verify-equivalence: error: "
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PROGRESS = re.compile(r"^[^:]*: +\d+%\|")  # a tqdm update: "beta sweep:  40%|####  | 4/10 ..."
DECADES = 8  # the default of --decades


# ------------------------------------------------------------------------------------------------ helpers


def cli_env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "OMP_NUM_THREADS": "1"}


class Background:
    """A console-script run started now and collected when a test needs its result."""

    def __init__(self, args: list[str], cwd: Path):
        self.process = subprocess.Popen(args, cwd=cwd, env=cli_env(), text=True, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE)
        self._result = None

    def result(self) -> subprocess.CompletedProcess:
        if self._result is None:
            stdout, stderr = self.process.communicate(timeout=300)
            self._result = subprocess.CompletedProcess(self.process.args, self.process.returncode, stdout, stderr)
        return self._result

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


def run_verify_inprocess(args: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """``verify-equivalence ARGS`` through the console script's entry point: (exit status, stdout, stderr)."""
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["verify-equivalence", *map(str, args)])
    with pytest.raises(SystemExit) as exit_info:
        verify_main()
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


def message_lines(stderr: str) -> list[str]:
    """stderr's lines less tqdm's progress updates."""
    lines = []
    for line in stderr.split("\n"):
        parts = [part for part in line.split("\r") if part.strip()]
        if parts and not all(PROGRESS.match(part) for part in parts):
            lines.append(line)
    return lines


def assert_one_line_error(code: int, stdout: str, stderr: str, match: str) -> None:
    assert code == 2, (stdout, stderr)
    assert "Traceback" not in stdout + stderr, stderr
    lines = message_lines(stderr)
    assert len(lines) == 1, stderr
    assert lines[0].startswith(PREFIX), stderr
    assert re.search(match, lines[0]), lines[0]


def assert_png(path: Path) -> None:
    assert path.is_file(), path
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    assert len(data) > 1024, (path, len(data))


def expected_scales(own: float) -> list[float]:
    return [own * 10.0**-i for i in range(DECADES + 1)] + [0.0]


def load_float64(directory: Path) -> PalimpsaForCausalLM:
    return PalimpsaForCausalLM.from_pretrained(str(directory)).double().eval()


def probe_for(model: PalimpsaForCausalLM) -> torch.Tensor:
    return probe_input_ids(model.config.base_vocab_size or model.config.vocab_size, 2, 64, 0)


# ----------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("equivalence")


@pytest.fixture(scope="module")
def fresh(root, tiny_random) -> Path:
    """The random tiny checkpoint with two layers upgraded, as upgrade-model writes it."""
    output = root / "tiny-palimpsa"
    upgrade_model(tiny_random, 2, output=output)
    return output


@pytest.fixture(scope="module", autouse=True)
def verify_cli(root, fresh):
    """``verify-equivalence MODEL --json --plot`` on the fresh model, running while the other tests run."""
    run = Background(["verify-equivalence", str(fresh), "--json", str(root / "report.json"),
                      "--plot", str(root / "sweep.png")], cwd=root)
    yield run
    run.stop()


# ---------------------------------------------------------------------------------------- fit_slope & co.


def test_sweep_scales_run_from_own_scale_to_exactly_zero():
    assert sweep_scales(1.0) == pytest.approx(expected_scales(1.0), rel=1e-12)
    scales = sweep_scales(0.5, decades=4)
    assert len(scales) == 6 and scales[0] == 0.5 and scales[-1] == 0.0
    assert scales[:-1] == pytest.approx([0.5, 0.05, 0.005, 0.0005, 0.00005], rel=1e-12)
    assert sweep_scales(0.0, decades=3)[0] == 1.0  # a model saved at scale 0 is swept from 1


@pytest.mark.parametrize("exponent", [1, 2])
def test_fit_slope_recovers_exact_power_laws(exponent):
    scales = sweep_scales(1.0)
    diffs = [3.7 * s**exponent for s in scales]  # 0 at scale 0
    slope, fitted = fit_slope(scales, diffs, floor=1e-30)
    assert slope == pytest.approx(exponent, abs=1e-9)
    assert fitted == pytest.approx([1e-8, 1e-7, 1e-6, 1e-5, 1e-4], rel=1e-12)  # the five smallest scales > 0


def test_fit_slope_leaves_out_points_near_the_floor():
    floor = 1e-13
    scales = [10.0**-i for i in range(17)] + [0.0]
    # linear down to the floor, then flat at it (what float rounding does to a real sweep)
    diffs = [max(2.0 * s, floor) if s > 0 else floor for s in scales]
    slope, fitted = fit_slope(scales, diffs, floor=floor)
    assert all(2.0 * s > 100 * floor for s in fitted), fitted
    assert fitted == pytest.approx([1e-11, 1e-10, 1e-9, 1e-8, 1e-7], rel=1e-12)
    assert slope == pytest.approx(1.0, abs=1e-9)
    # with the flat points included, the slope would be far from 1: they really are left out
    naive, _ = fit_slope(scales, diffs, floor=0.0)
    assert naive < 0.5


def test_fit_slope_needs_three_usable_points():
    scales = [1.0, 0.1, 0.01, 0.001, 0.0]
    floor = 1e-6
    diffs = [1.0, 0.1, 50 * floor, 10 * floor, floor]  # only two points lie above 100x the floor
    assert fit_slope(scales, diffs, floor) == (None, [0.1, 1.0])
    assert fit_slope([1.0, 0.0], [1.0, 0.0], 0.0)[0] is None
    assert fit_slope([], [], 0.0) == (None, [])


# -------------------------------------------------------------------------------- broken models are caught


def test_uncompensated_importance_prior_fails_the_sweep(fresh, root, monkeypatch, capsys):
    """importance_prior = 2 written into config.json with nothing compensating it: the Palimpsa layers divide
    their readout by I = 2, so the model is not the Mamba2 it came from at any beta scale, and the limit must fail.
    """
    broken = root / "prior-2"
    shutil.copytree(fresh, broken)
    config = json.loads((broken / "config.json").read_text())
    config["importance_prior"] = 2.0
    (broken / "config.json").write_text(json.dumps(config, indent=2))

    out = root / "prior-2.json"
    code, stdout, stderr = run_verify_inprocess([broken, "--json", out], monkeypatch, capsys)
    assert "Traceback" not in stdout + stderr
    data = json.loads(out.read_text())
    zero = data["table"][-1]
    assert zero["scale"] == 0.0
    # the model really is broken: at scale 0 it is not the base Mamba2
    assert zero["base_mean_kl"] > 1e-4, zero
    assert data["limit_ok"] is False, (
        f"a model with an uncompensated importance prior passed the sweep: at_zero {data['at_zero']:.3g}, "
        f"slope {data['slope']}, but KL to the base at scale 0 is {zero['base_mean_kl']:.3g} nats and top-1 "
        f"agreement {zero['base_top1_agreement']:.1%}")
    assert code == 1
    assert "FAILED" in stdout


def test_quadratic_beta_gives_slope_two(fresh, monkeypatch):
    """A Palimpsa layer whose beta enters quadratically in the scale: the difference falls like scale^2."""
    original = PalimpsaMixer.gate_and_factor

    def quadratic(self, hidden_states, dt, A):
        gate, factor = original(self, hidden_states, dt, A)
        return gate, None if factor is None else factor * self.beta_scale

    monkeypatch.setattr(PalimpsaMixer, "gate_and_factor", quadratic)
    model = load_float64(fresh)
    result = run_sweep(model, probe_for(model))
    assert result.slope is not None
    assert result.slope == pytest.approx(2.0, abs=0.1)
    assert result.at_zero <= ZERO_TOLERANCE[torch.float64]  # it does vanish at 0, only at the wrong rate
    assert not result.limit_ok
    assert result.as_dict()["limit_ok"] is False


def test_beta_that_does_not_vanish_at_zero_fails(fresh, monkeypatch):
    """A Palimpsa layer with an importance gain that ignores the scale: the difference stays at scale 0."""
    original = PalimpsaMixer.gate_and_factor

    def offset(self, hidden_states, dt, A):
        gate, factor = original(self, hidden_states, dt, A)
        return gate, None if factor is None else factor + 2e-3 * dt  # beta + 1e-3 dt where the gate is 1/2

    monkeypatch.setattr(PalimpsaMixer, "gate_and_factor", offset)
    model = load_float64(fresh)
    result = run_sweep(model, probe_for(model))
    assert result.at_zero > 1e3 * ZERO_TOLERANCE[torch.float64]
    assert not result.limit_ok


def test_the_sweep_restores_the_model(fresh):
    model = load_float64(fresh)
    probe = probe_for(model)
    before = model(probe).logits
    result = run_sweep(model, probe, decades=3)
    assert [r["scale"] for r in result.rows] == pytest.approx([1.0, 0.1, 0.01, 0.001, 0.0], rel=1e-12)
    assert model.config.beta_scale == 1.0
    assert all(m.beta_scale == 1.0 and not m.beta_dropped for m in model.palimpsa_mixers())
    assert torch.equal(model(probe).logits, before)


# ------------------------------------------------------------------------------------ a fine-tuned model


def test_fine_tuned_model_keeps_the_limit(fresh, root, monkeypatch, capsys):
    """Weights moved away from the base (in_proj, the beta gate and gain): the KL to the base at the model's own
    scale is the fine-tuning effect and is clearly > 0, yet the beta -> 0 limit still holds."""
    model = PalimpsaForCausalLM.from_pretrained(str(fresh)).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in model.backbone.layers:
            weight = layer.mixer.in_proj.weight
            weight.add_(0.2 * weight.std() * torch.randn(weight.shape, generator=generator))
        for mixer in model.palimpsa_mixers():
            gain = mixer.beta_log_gain
            gain.copy_((0.5 + 0.3 * torch.randn(gain.shape, generator=generator).abs()).log())
            mixer.beta_up.weight.copy_(torch.randn(mixer.beta_up.weight.shape, generator=generator))
    model.set_beta_scale(0.5)  # the sweep must start at the model's own scale
    tuned = root / "fine-tuned"
    model.save_pretrained(tuned)

    out = root / "fine-tuned.json"
    code, stdout, stderr = run_verify_inprocess([tuned, "--json", out, "--plot", root / "fine-tuned.png"],
                                                monkeypatch, capsys)
    data = json.loads(out.read_text())
    assert code == 0, stdout + stderr
    assert data["limit_ok"] is True
    assert "limit OK" in stdout
    assert SLOPE_RANGE[0] <= data["slope"] <= SLOPE_RANGE[1]
    assert data["own_scale"] == 0.5
    assert [r["scale"] for r in data["table"]] == pytest.approx(expected_scales(0.5), rel=1e-12)
    own = data["table"][0]
    at_init = json.loads((fresh / "upgrade_report.json").read_text())["verification"]["at_init"]["mean_kl"]
    assert own["base_mean_kl"] > 1e-4, own
    assert own["base_top1_agreement"] < 1.0 or own["base_mean_kl"] > 1e4 * at_init, own
    # beta itself matters at the model's own scale (against the same weights run as Mamba2)...
    assert own["mean_kl"] > 1e-8, own
    # ... and at scale 0 only the fine-tuning of the Mamba2 weights is left
    assert data["table"][-1]["mean_kl"] < 1e-12
    assert data["table"][-1]["base_mean_kl"] > 1e-4
    assert_png(root / "fine-tuned.png")


# ----------------------------------------------------------------------------- probes and refusals (CLI)


def test_probe_from_a_text_file(fresh, root, monkeypatch, capsys):
    text = root / "probe.txt"
    text.write_text(default_long_text()[:5000])
    out = root / "probe.json"
    code, stdout, stderr = run_verify_inprocess([fresh, "--probe", text, "--probe-length", 48, "--decades", 6,
                                                 "--no-base", "--json", out], monkeypatch, capsys)
    assert code == 0, stdout + stderr
    data = json.loads(out.read_text())
    assert data["probe"]["source"] == str(text)
    assert data["probe"]["shape"] == [2, 48]
    assert data["base"] is None and "base_mean_kl" not in data["table"][0]
    assert len(data["table"]) == 6 + 2
    assert data["limit_ok"] is True
    assert f"from {text}" in stdout


def test_probe_file_too_short(fresh, root, monkeypatch, capsys):
    text = root / "short.txt"
    text.write_text("far too short for a probe")
    out = root / "short.json"
    code, stdout, stderr = run_verify_inprocess([fresh, "--probe", text, "--json", out], monkeypatch, capsys)
    assert_one_line_error(code, stdout, stderr, r"short\.txt has \d+ tokens; need 128")
    assert not out.exists()


def test_probe_file_missing(fresh, root, monkeypatch, capsys):
    code, stdout, stderr = run_verify_inprocess([fresh, "--probe", root / "nowhere.txt"], monkeypatch, capsys)
    assert_one_line_error(code, stdout, stderr, r"cannot read probe file")


def test_model_without_palimpsa_layer(root, tiny_random, monkeypatch, capsys):
    out = root / "plain.json"
    code, stdout, stderr = run_verify_inprocess([tiny_random, "--json", out], monkeypatch, capsys)
    assert_one_line_error(code, stdout, stderr, r"has no Palimpsa layer; upgrade it first")
    assert not out.exists()


def test_too_few_decades(fresh, monkeypatch, capsys):
    code, stdout, stderr = run_verify_inprocess([fresh, "--decades", 2], monkeypatch, capsys)
    assert_one_line_error(code, stdout, stderr, r"--decades must be an integer from 3 to 30, got '2'")


# ----------------------------------------------------------------- the console script on a fresh model


def test_cli_fresh_model_passes(verify_cli):
    result = verify_cli.result()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    stdout = result.stdout
    header = next(line for line in stdout.splitlines() if "beta scale" in line and "max|diff|" in line)
    for column in ("mean KL", "top-1", "KL(base)", "top-1(base)"):
        assert column in header
    lines = stdout.splitlines()
    start = lines.index(header) + 1
    rows = lines[start : start + DECADES + 2]
    assert [float(row.split()[0]) for row in rows] == pytest.approx(expected_scales(1.0), rel=1e-2)
    assert all(len(row.split()) == 7 for row in rows), rows
    match = re.search(r"slope over scales .*: (-?[\d.]+) \(must lie in", stdout)
    assert match, stdout
    assert 0.9 <= float(match.group(1)) <= 1.1
    assert "at scale 0" in stdout and "limit OK" in stdout


def test_cli_fresh_model_report(verify_cli, root, fresh, tiny_random):
    verify_cli.result()
    data = json.loads((root / "report.json").read_text())
    assert data["limit_ok"] is True
    assert SLOPE_RANGE[0] <= data["slope"] <= SLOPE_RANGE[1]
    assert 0 <= data["at_zero"] <= data["zero_tolerance"]
    assert data["dtype"] == "float64"  # the tiny model fits: the sweep runs in float64
    table = data["table"]
    assert len(table) == DECADES + 2
    assert [r["scale"] for r in table] == pytest.approx(expected_scales(1.0), rel=1e-12)
    assert table[-1]["scale"] == 0.0  # exactly zero, not a tiny number
    assert len(data["fitted_scales"]) >= 3 and all(s > 0 for s in data["fitted_scales"])
    # the differences fall with the scale, linearly: each decade down divides them by about 10
    diffs = [r["max_abs_diff"] for r in table[:-1]]
    assert all(0.08 < b / a < 0.12 for a, b in zip(diffs, diffs[1:])), diffs
    # base figures: config.json's base_model is the tiny checkpoint, which a fresh upgrade equals at scale 0
    assert data["base"] == str(tiny_random)
    for row in table:
        assert {"base_mean_kl", "base_top1_agreement", "mean_kl", "top1_agreement", "relative_diff"} <= set(row)
    # at scale 0 the logits agree to float64 rounding (bit for bit on some CPUs, ~1e-15 apart on others, by the
    # order of the sums); a KL computed from logits that close is itself rounding noise, about 1e-17
    assert table[-1]["base_mean_kl"] < 1e-15 and table[-1]["base_top1_agreement"] == 1.0
    assert math.isclose(table[0]["base_mean_kl"], table[0]["mean_kl"], rel_tol=1e-6)


def test_cli_fresh_model_plot(verify_cli, root):
    verify_cli.result()
    assert_png(root / "sweep.png")
