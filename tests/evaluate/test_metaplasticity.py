"""The upgraded layers can become metaplastic, and a user can see whether they did.

- the log-relative gain starts within the upgrade's verification tolerance of the base (and of the first format's
  start), and a loss that rewards importance grows it by orders of magnitude at the recipe defaults;
- models written in the first format (``linear-dt``) load and compute what they computed;
- ``inspect-importance``: the prior on a fresh upgrade, cells above 2 I_prior with a large gain, figures that match
  an independent recurrence, the command's outputs and errors;
- ``eval-model --beta-scale 0`` evaluates the source Mamba2;
- the gate moves under Adam from its first step.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from checkpoints import EMBEDDED, TEST_DATA
from palimpsa.upgrade.model.modeling import PalimpsaForCausalLM
from safetensors.torch import load_file

LEGACY = TEST_DATA / "legacy-linear-dt"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _kl(logits_p: torch.Tensor, logits_q: torch.Tensor) -> float:
    """Mean KL(p || q) per token, nats."""
    return F.kl_div(logits_q.log_softmax(-1), logits_p.log_softmax(-1), log_target=True,
                    reduction="none").sum(-1).mean().item()


def _probe_ids(tokenizer, length: int = 256) -> torch.Tensor:
    from palimpsa.upgrade.evaluate.tasks import passkey_samples

    sample = passkey_samples(tokenizer, [length], [0.3], 1, seed=4)[0]
    return tokenizer(sample.prompt + " " + sample.answer, return_tensors="pt")["input_ids"]


def _set_gains(model, gain: float) -> None:
    with torch.no_grad():
        for mixer in model.palimpsa_mixers():
            mixer.beta_log_gain.fill_(math.log(gain))


# --- the new gain at init ------------------------------------------------------------------------------------------

def test_default_init_matches_the_base_and_the_first_formats_start_within_the_verification_tolerance():
    from palimpsa.upgrade.convert.loading import load_mamba2
    from palimpsa.upgrade.convert.surgery import convert_layers
    from palimpsa.upgrade.convert.upgrade import upgrade_model
    from transformers import AutoTokenizer

    result = upgrade_model(EMBEDDED, 5, probe_length=128)  # every layer, the default init, verified
    verification = result.report["verification"]
    assert result.model.config.beta_form == "log-relative" and result.model.config.beta_init == 1e-3
    assert verification["passed"] and verification["at_init"]["mean_kl"] < 1e-3
    assert verification["at_zero"]["relative_diff"] <= 1e-5

    ids = _probe_ids(AutoTokenizer.from_pretrained(EMBEDDED))
    old, _ = load_mamba2(EMBEDDED)
    old.config.beta_form = "linear-dt"  # the first format's layers at its default start, 1e-4
    convert_layers(old, list(range(5)), beta_init=1e-4)
    with torch.no_grad():
        new_logits, old_logits = result.model.eval()(ids).logits, old.eval()(ids).logits
        base = load_mamba2(EMBEDDED)[0](ids).logits
    assert _kl(base, new_logits) < 1e-3 and _kl(old_logits, new_logits) < 1e-3
    assert (new_logits.argmax(-1) == base.argmax(-1)).float().mean() >= 0.99
    assert (new_logits - base).abs().max() > 1e-4  # beta is in the model, just small


def test_a_loss_that_rewards_importance_grows_the_gain_100x_within_200_steps_at_the_recipe_defaults(tiny_random):
    """Fine-tune the gains and gate with the recipe's default optimizer settings on recall documents (passkey),
    against a teacher that is the same model at gain 10: the loss can only fall by raising the gain, so this is
    the case 'when the loss rewards it'. The log gain, moved by Adam at optim.gain_lr, gets there; a linear gain
    moved at the learning rate could not (1e-3 per step from 1e-3)."""
    from palimpsa.upgrade.convert.upgrade import upgrade_model
    from palimpsa.upgrade.train.data import build_data
    from palimpsa.upgrade.train.recipe import Recipe
    from palimpsa.upgrade.train.trainable import lr_factor, parameter_groups, select_trainable
    from transformers import AutoTokenizer

    recipe = Recipe.model_validate({
        "output_dir": "unused", "model": {"path": str(tiny_random), "upgrade_layers": "2"},
        "data": {"sources": [{"type": "synthetic", "task": "passkey", "documents": 64}], "seq_len": 64,
                 "batch_size": 2, "eval_documents": 0},
        "train": {"max_steps": 200}, "trainable": {"mode": "beta"}})
    student = upgrade_model(tiny_random, 2, verify=False).model.train()
    teacher = upgrade_model(tiny_random, 2, beta_init=10.0, verify=False).model.eval()
    selection = select_trainable(student, recipe)
    optimizer = torch.optim.AdamW(parameter_groups(selection, recipe), betas=recipe.optim.betas,
                                  eps=recipe.optim.eps)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, recipe))
    stream, _ = build_data(recipe.data, AutoTokenizer.from_pretrained(tiny_random), vocab_size=2**20)
    trainable = [p for p in student.parameters() if p.requires_grad]

    def geomean_gain() -> float:
        return torch.cat([m.gain() for m in student.palimpsa_mixers()]).log().mean().exp().item()

    start, losses = geomean_gain(), []
    for _ in range(recipe.train.max_steps):
        batch = next(stream)
        with torch.no_grad():
            target = teacher(batch.input_ids, cu_seqlens=batch.cu_seqlens).logits
        logits = student(batch.input_ids, cu_seqlens=batch.cu_seqlens).logits
        loss = F.kl_div(logits.log_softmax(-1), target.log_softmax(-1), log_target=True, reduction="batchmean")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, recipe.optim.grad_clip)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert start == pytest.approx(1e-3, rel=1e-6)
    assert geomean_gain() >= 100 * start, geomean_gain()
    assert sum(losses[-10:]) < 0.1 * sum(losses[:10])


# --- the first format ---------------------------------------------------------------------------------------------

def test_a_first_format_model_loads_and_reproduces_the_logits_it_was_saved_with(tmp_path):
    expected = load_file(str(LEGACY / "expected_logits.safetensors"))
    assert "beta_form" not in json.loads((LEGACY / "config.json").read_text())
    model = PalimpsaForCausalLM.from_pretrained(str(LEGACY)).eval()
    assert model.config.beta_form == "linear-dt"
    assert all(hasattr(m, "beta_gain") and not hasattr(m, "beta_log_gain") for m in model.palimpsa_mixers())
    with torch.no_grad():
        logits = model(expected["input_ids"]).logits
    assert (logits - expected["logits"]).abs().max().item() <= 1e-5 * expected["logits"].abs().max().item()
    with torch.no_grad(), model.beta_scaled(0.0):
        assert (model(expected["input_ids"]).logits - expected["logits"]).abs().max() > 1e-3  # beta matters here
    model.save_pretrained(tmp_path / "resaved")  # saved again: the form is now written down and kept
    assert json.loads((tmp_path / "resaved/config.json").read_text())["beta_form"] == "linear-dt"
    again = PalimpsaForCausalLM.from_pretrained(str(tmp_path / "resaved")).eval()
    with torch.no_grad():
        assert torch.equal(again(expected["input_ids"]).logits, logits)


def test_a_new_config_keeps_its_form_through_save_and_load(tmp_path):
    from palimpsa.upgrade.model.configuration import PalimpsaConfig

    config = PalimpsaConfig(d_model=32, n_layer=2, vocab_size=64, d_state=8, headdim=8, upgraded_layers=[1])
    config.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["beta_form"] == "log-relative"
    assert PalimpsaConfig.from_pretrained(tmp_path).beta_form == "log-relative"
    with pytest.raises(ValueError, match="beta_init must be a finite number > 0"):
        PalimpsaConfig(upgraded_layers=[0], beta_init=0.0)
    with pytest.raises(ValueError, match="beta_form must be one of"):
        PalimpsaConfig(upgraded_layers=[0], beta_form="softplus")


# --- inspect-importance -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def embedded_upgraded(tmp_path_factory) -> Path:
    from palimpsa.upgrade.convert.upgrade import upgrade_model

    output = tmp_path_factory.mktemp("inspect") / "upgraded"
    upgrade_model(EMBEDDED, "1,3", output=output, verify=False)
    return output


def _independent_importance(mixer, hidden: torch.Tensor, prior: float) -> torch.Tensor:
    """I after the last token by the recurrence itself, float64: I = a I + (1 - a) I_prior + beta (x) k^2."""
    inputs = mixer.scan_inputs(hidden)
    decay = torch.exp(inputs.dt * inputs.A).double()[0]  # [T, H]
    keys = inputs.keys.double()[0].repeat_interleave(mixer.nheads // mixer.ngroups, dim=1)  # [T, H, N]
    beta = inputs.beta.double()[0]  # [T, H, P]
    importance = torch.full((mixer.nheads, mixer.headdim, mixer.d_state), prior, dtype=torch.float64)
    for t in range(decay.shape[0]):
        a = decay[t][:, None, None]
        importance = a * importance + (1 - a) * prior + beta[t][:, :, None] * keys[t].pow(2)[:, None, :]
    return importance


def test_inspect_importance_sits_at_the_prior_after_an_upgrade_and_leaves_it_with_a_large_gain(embedded_upgraded):
    from palimpsa.upgrade.evaluate.importance import inspect_importance, layer_summary, task_probe
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(embedded_upgraded)
    probe = task_probe(tokenizer, "passkey", 384, depth=0.4, seed=2)
    assert tokenizer.decode(probe.input_ids[0, probe.needle[0]:probe.needle[1]]).startswith("The pass key is ")
    model = PalimpsaForCausalLM.from_pretrained(str(embedded_upgraded)).eval()

    fresh = inspect_importance(model, probe)
    assert [layer["layer"] for layer in fresh["layers"]] == [1, 3]
    for layer in fresh["layers"]:
        heads = layer["heads"]
        assert all(abs(m - 1) <= 1e-3 for m in heads["mean"]) and all(abs(q - 1) <= 1e-3 for q in heads["q50"])
        assert max(heads["share_above_2x_prior"]) == 0 and all(g == pytest.approx(1e-3) for g in heads["gain"])
        assert 0 < layer["summary"]["mean_excess"] <= 1e-3
        assert layer["summary"]["needle_share_above_2x_prior_at_question"] == 0

    _set_gains(model, 50.0)
    large = inspect_importance(model, probe)
    captured = {}
    mixer = model.palimpsa_mixers()[1]
    hook = mixer.register_forward_pre_hook(lambda module, args: captured.setdefault("h", args[0]))
    with torch.no_grad():
        model(probe.input_ids)
        reference = _independent_importance(mixer, captured["h"], 1.0)
    hook.remove()
    figures = large["layers"][1]["heads"]
    assert figures["mean"] == pytest.approx(reference.flatten(1).mean(1).tolist(), rel=1e-4)
    assert figures["max"] == pytest.approx(reference.flatten(1).amax(1).tolist(), rel=1e-4)
    assert figures["share_above_2x_prior"] == pytest.approx((reference > 2).flatten(1).double().mean(1).tolist(),
                                                            abs=1e-3)
    for layer in large["layers"]:
        summary = layer["summary"]
        assert summary["share_above_2x_prior"] > 0.05 and summary["mean_excess"] > 0.3
        assert summary["needle_importance"] > 1.1 and summary["needle_half_life_added"] > 0
        for key in ("needle_share_above_2x_prior", "needle_share_above_2x_prior_at_question"):
            assert 0 < summary[key] <= 1 + 1e-6 and all(0 <= v <= 1 + 1e-6 for v in layer["heads"][key])
        assert all(g == pytest.approx(50.0) for g in layer["heads"]["gain"])
        # beta / (1 - a) is the gain times the mean gate, 1/2 at init
        assert layer["heads"]["beta_per_forgetting"] == pytest.approx([25.0] * len(layer["heads"]["gain"]), rel=1e-4)
    logged = layer_summary(large)
    assert logged["importance/L3/mean_excess"] == large["layers"][1]["summary"]["mean_excess"]
    assert set(logged) == {f"importance/L{i}/{k}" for i in (1, 3) for k in (
        "gain_geomean", "mean_excess", "share_above_2x_prior", "needle_importance", "needle_half_life_added")}


def test_inspect_importance_command(embedded_upgraded, tmp_path):
    """As a user runs it: the table, the JSON and the heatmap; at beta scale 0 the importance is the prior exactly;
    bad options are one-line errors."""
    output = tmp_path / "report"
    done = subprocess.run(["inspect-importance", str(embedded_upgraded), "--length", "256", "--beta-scale", "0",
                           "--per-head", "-o", str(output)], capture_output=True, text=True, env=ENV)
    assert done.returncode == 0, done.stderr
    assert "every layer is within 1e-2 of the Mamba2 limit" in done.stdout
    assert done.stdout.count("\n    1 ") >= 16 and "needle I" in done.stdout  # one row per head of layer 1
    report = json.loads((output / "importance.json").read_text())
    assert report["beta_scale"] == 0 and report["model"] == str(embedded_upgraded)
    assert all(m == 1.0 for layer in report["layers"] for m in layer["heads"]["max"])
    assert (output / "importance.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    bad = subprocess.run(["inspect-importance", str(embedded_upgraded), "--needle", "pass key"],
                         capture_output=True, text=True, env=ENV)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1] == ("inspect-importance: error: --needle marks a passage of --text; "
                                                   "give --text FILE too")


def test_inspect_importance_on_the_users_text_with_a_needle(embedded_upgraded, tmp_path):
    from palimpsa.upgrade.cli.inspect_importance import run as run_inspect

    text = tmp_path / "notes.txt"
    text.write_text("Some notes. " * 20 + "The vault code is 4417. " + "More notes follow here. " * 20)
    code = run_inspect([str(embedded_upgraded), "--text", str(text), "--needle", "The vault code is 4417.",
                        "--length", "512", "-o", str(tmp_path / "out")])
    report = json.loads((tmp_path / "out/importance.json").read_text())
    assert code == 0 and report["probe"] == "notes.txt"
    start, end = report["needle"]
    assert end - start == len("The vault code is 4417.")  # byte-level tokenizer: one token per character
    assert start == len("Some notes. " * 20)


# --- eval-model --beta-scale --------------------------------------------------------------------------------------

def test_eval_model_at_beta_scale_zero_reproduces_the_source_mamba2(tiny_random, tmp_path, capsys):
    from palimpsa.upgrade.cli.eval_model import run as run_eval
    from palimpsa.upgrade.convert.upgrade import upgrade_model

    upgraded = tmp_path / "upgraded"
    model = upgrade_model(tiny_random, 2, verify=False).model
    _set_gains(model, 30.0)
    model.save_pretrained(upgraded)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (upgraded / name).write_bytes((tiny_random / name).read_bytes())

    def evaluate(*extra) -> list[dict]:
        output = tmp_path / f"eval{len(extra)}"
        assert run_eval([str(upgraded), "--compare", str(tiny_random), "--tasks", "nll-position,mqar",
                         "--lengths", "96", "--segment-length", "32", "--samples", "1", "-o", str(output),
                         *extra]) == 0
        return json.loads((output / "summary.json").read_text())["models"]

    own, base = evaluate()
    assert abs(own["nll_position"]["overall"] - base["nll_position"]["overall"]) > 1e-3  # the gain matters
    ablated, base_again = evaluate("--beta-scale", "0")
    assert ablated["nll_position"]["mean_nll"] == pytest.approx(base_again["nll_position"]["mean_nll"], abs=1e-5)
    assert ablated["mqar"] == base_again["mqar"]
    assert "beta scale 0 in every Palimpsa model" in capsys.readouterr().out


# --- the gate at init ---------------------------------------------------------------------------------------------

def test_the_gate_gets_gradients_at_init_and_adam_moves_it_at_its_learning_rate(tiny_random):
    from palimpsa.upgrade.convert.upgrade import upgrade_model
    from palimpsa.upgrade.train.recipe import Recipe
    from palimpsa.upgrade.train.trainable import parameter_groups, select_trainable

    recipe = Recipe.model_validate({"output_dir": "unused", "model": {"path": str(tiny_random)},
                                    "data": {"path": str(tiny_random)}, "train": {"max_steps": 1},
                                    "optim": {"beta_lr": 1e-3}})
    model = upgrade_model(tiny_random, 2, verify=False).model.train()
    groups = parameter_groups(select_trainable(model, recipe), recipe)
    assert {g["name"]: (g["lr"], g["eps"]) for g in groups} == {"gain": (0.1, 1e-12), "beta": (1e-3, 1e-12)}
    optimizer = torch.optim.AdamW(groups, betas=recipe.optim.betas)
    before = {m.layer_idx: m.beta_up.weight.detach().clone() for m in model.palimpsa_mixers()}
    ids = torch.randint(0, 250, (2, 48), generator=torch.Generator().manual_seed(0))
    model(ids, labels=ids).loss.backward()
    for mixer in model.palimpsa_mixers():
        grad = mixer.beta_up.weight.grad
        assert grad.abs().max() > 0 and grad.abs().max() < 1e-4  # proportional to the small gain...
    optimizer.step()
    for mixer in model.palimpsa_mixers():  # ... yet the first step moves the gate by about its learning rate
        step = (mixer.beta_up.weight.detach() - before[mixer.layer_idx]).abs()
        assert (step > 0.5e-3).float().mean() > 0.9
