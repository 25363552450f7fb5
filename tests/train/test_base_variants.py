"""The base's variant races (scripts/pretrain_base_variants.py): each variant is a valid recipe that changes what it
says and nothing else, and a race can start from the weights that ``pretrain_base.py --pack`` or ``--keep-best``
write."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch
import yaml
from checkpoints import ROOT
from palimpsa.upgrade.io.shards import save_state_dict_sharded
from palimpsa.upgrade.train.recipe import load_recipe


def _script(name: str):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return module


@pytest.fixture(scope="module")
def variants():
    return _script("pretrain_base_variants")


@pytest.fixture(scope="module")
def base_recipe():
    return yaml.safe_load((ROOT / "recipes" / "pretrain-base.yaml").read_text())


def _synthetic(recipe: dict) -> dict:
    return {s["task"]: s for s in recipe["data"]["sources"] if s.get("type") == "synthetic"}


@pytest.mark.parametrize("name", ["continue", "mqar-heavy", "mqar-only", "mqar-small", "mix-small", "mix-small-x3",
                                  "text-recall", "text-heavy", "niah-easy", "niah-mix", "niah-multi", "multi-mix",
                                  "multi-anneal", "repeat-only", "anneal"])
def test_every_variant_is_a_valid_recipe_from_given_weights(variants, base_recipe, name, tmp_path):
    recipe = variants.variant_recipe(base_recipe, name, workers=2, init=ROOT / "upgrade" / "assets" / "tiny-mamba2",
                                     lr=5e-4)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    loaded = load_recipe(path)  # validates, and resolves paths from the file's folder (elsewhere than recipes/)
    assert loaded.model.scratch is None and loaded.model.upgrade_layers == "none"
    assert loaded.optim.lr == 5e-4
    if name in ("anneal", "multi-anneal"):  # decays to 2% of the rate over --anneal-steps, where the run stops
        assert (loaded.schedule.type, loaded.schedule.min_lr_ratio) == ("cosine", 0.02)
        assert loaded.train.max_steps == 2400
    else:
        assert loaded.schedule.type == "constant" and loaded.train.max_steps == 1_000_000
    assert loaded.data.workers == 2
    assert loaded.data.sources[0].type == "stdlib"  # the held-out evaluation text comes from the first source


def test_variants_change_what_they_say(variants, base_recipe):
    original = _synthetic(base_recipe)
    small = variants.variant_recipe(base_recipe, "mqar-small", 2)
    assert list(_synthetic(small)) == ["mqar"] and _synthetic(small)["mqar"]["pairs"] == [2, 16]
    assert [s for s in small["data"]["sources"] if s["type"] == "stdlib"][0]["weight"] == pytest.approx(1e-6)
    heavy = _synthetic(variants.variant_recipe(base_recipe, "mix-small-x3", 2))
    assert heavy["mqar"]["weight"] == 6 * original["mqar"]["weight"]
    assert heavy["mqar-gap"]["weight"] == 3 * original["mqar-gap"]["weight"]
    assert heavy["passkey"] == original["passkey"]
    text = _synthetic(variants.variant_recipe(base_recipe, "text-heavy", 2))
    assert text["niah-fwpkm"]["weight"] == 3 * original["niah-fwpkm"]["weight"]
    assert text["mqar"] == original["mqar"]
    assert variants.variant_recipe(base_recipe, "continue", 2)["data"]["sources"] == base_recipe["data"]["sources"]
    easy = _synthetic(variants.variant_recipe(base_recipe, "niah-easy", 2))
    assert list(easy) == ["niah-fwpkm"] and easy["niah-fwpkm"]["needles"] == [2, 5]
    mixed = _synthetic(variants.variant_recipe(base_recipe, "niah-mix", 2))
    assert mixed["niah-fwpkm"]["needles"] == [2, 5] and mixed["repeat"] == text["repeat"]
    assert mixed["niah-fwpkm"]["weight"] == text["niah-fwpkm"]["weight"] and mixed["mqar"] == original["mqar"]
    multi = _synthetic(variants.variant_recipe(base_recipe, "niah-multi", 2))
    assert list(multi) == ["niah-fwpkm"] and (multi["niah-fwpkm"]["needles"], multi["niah-fwpkm"]["queries"]) == (
        [2, 5], [2, 4])
    for name in ("multi-mix", "multi-anneal"):
        both = _synthetic(variants.variant_recipe(base_recipe, name, 2))
        assert (both["niah-fwpkm"]["needles"], both["niah-fwpkm"]["queries"]) == ([2, 5], [1, 3])
        assert both["repeat"] == text["repeat"] and both["mqar"] == original["mqar"]
    assert "queries" not in original["niah-fwpkm"]
    assert list(_synthetic(variants.variant_recipe(base_recipe, "repeat-only", 2))) == ["repeat"]
    annealed = variants.variant_recipe(base_recipe, "anneal", 2, anneal_steps=900)
    assert annealed["data"]["sources"] == base_recipe["data"]["sources"] and annealed["train"]["max_steps"] == 900
    assert base_recipe["data"]["sources"][4]["pairs"] == [4, 64]  # the recipe itself is left alone
    with pytest.raises(SystemExit, match="unknown variant"):
        variants.variant_recipe(base_recipe, "mqar-huge", 2)


@pytest.mark.parametrize("name", ["niah-multi", "multi-mix"])
def test_the_multi_query_variants_fit_the_recipes_rows(variants, base_recipe, name):
    """Their documents open and are made at the recipe's row length (the needles and questions fit)."""
    from palimpsa.upgrade.train.data.mixture import DocumentSource
    from palimpsa.upgrade.train.recipe import SourceSection
    from transformers import AutoTokenizer

    recipe = variants.variant_recipe(base_recipe, name, 2)
    tokenizer = AutoTokenizer.from_pretrained(str(ROOT / "upgrade" / "assets" / "tiny-mamba2"))
    [niah] = [s for s in recipe["data"]["sources"] if s.get("task") == "niah-fwpkm"]
    DocumentSource([SourceSection(**niah)], tokenizer, seq_len=recipe["data"]["seq_len"], vocab_size=None)
    # the variant's longest documents: the most needles, every one it may ask asked
    worst = SourceSection(**{**niah, "needles": [niah["needles"][1]] * 2, "queries": [niah["queries"][1]] * 2})
    documents = DocumentSource([worst], tokenizer, seq_len=recipe["data"]["seq_len"], seed=0, vocab_size=None)
    assert max(len(documents.next_document()) for _ in range(8)) <= recipe["data"]["seq_len"]


def _small_base(tmp_path):
    """pretrain-base.yaml at a tiny size (its file, for the loaders) and a model of it with weights that are not a
    fresh model's initialisation."""
    from palimpsa.upgrade.train.trainer import new_mamba2

    recipe = yaml.safe_load((ROOT / "recipes" / "pretrain-base.yaml").read_text())
    recipe["model"]["scratch"].update(d_model=32, n_layer=2, d_state=16, headdim=16, chunk_size=16)
    recipe["data"]["tokenizer"] = str(ROOT / "upgrade" / "assets" / "tiny-mamba2")
    recipe_path = tmp_path / "small.yaml"
    recipe_path.write_text(yaml.safe_dump(recipe))
    model = new_mamba2(load_recipe(recipe_path)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    return recipe, recipe_path, model


def test_model_from_pack_rebuilds_the_packed_model(tmp_path):
    pretrain_base = _script("pretrain_base")
    from palimpsa.upgrade.convert.loading import load_model_and_tokenizer

    recipe, recipe_path, model = _small_base(tmp_path)
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}  # tied, as the trainer saves it
    pack = tmp_path / "pack"
    pack.mkdir()
    assert len(save_state_dict_sharded(state, pack, 20_000, progress=False)) > 2  # several shards and the index
    rebuilt, tokenizer = load_model_and_tokenizer(pretrain_base.model_from_pack(pack, tmp_path / "model", recipe_path))
    ids = torch.tensor([tokenizer("recall this: 42", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(rebuilt.eval()(ids).logits, model(ids).logits)

    other = dict(recipe, model={**recipe["model"], "scratch": {**recipe["model"]["scratch"], "d_model": 48}})
    recipe_path.write_text(yaml.safe_dump(other))
    with pytest.raises(SystemExit, match="does not hold"):
        pretrain_base.model_from_pack(pack, tmp_path / "other", recipe_path)
    with pytest.raises(SystemExit, match="no model"):
        pretrain_base.model_from_pack(tmp_path, tmp_path / "none", recipe_path)


def test_probe_counts_another_needles_value_and_where_repeat_breaks(monkeypatch, tmp_path):
    probe = _script("probe_base_recall")
    from palimpsa.upgrade.evaluate import evaluation
    from palimpsa.upgrade.evaluate.tasks import default_long_text
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(ROOT / "upgrade" / "assets" / "tiny-mamba2"))
    text = " ".join(default_long_text().split())

    def other_needle(model, tokenizer, prompts, batch_size):  # answers with the value of a needle not asked for
        return [" " + next(v for _, v in probe.NEEDLE.findall(p.prompt) if v != p.answer) for p in prompts]

    def seven_digits(model, tokenizer, prompts, batch_size):  # right six digits, then one too many: not exact
        return [" " + p.answer + "1." for p in prompts]

    monkeypatch.setattr(evaluation, "greedy_answers", other_needle)
    row = probe.niah_row(None, tokenizer, text, needles=3, samples=10, length=256, seed=1)
    assert (row["prompts"], row["exact"], row["other_needle"]) == (10, 0.0, 1.0)
    monkeypatch.setattr(evaluation, "greedy_answers", seven_digits)
    row = probe.niah_row(None, tokenizer, text, needles=3, samples=10, length=256, seed=1)
    assert (row["exact"], row["per_digit"], row["other_needle"]) == (0.0, 1.0, 0.0)  # scored as the bar scores

    def one_slip(model, tokenizer, prompts, batch_size):  # the string with its 8th character wrong
        return [" " + p.answer[:7] + ("a" if p.answer[7] != "a" else "b") + p.answer[8:] for p in prompts]

    monkeypatch.setattr(evaluation, "greedy_answers", one_slip)
    row = probe.repeat_row(None, tokenizer, text, samples=6, length=256, seed=1)
    assert row["exact"] == 0.0 and row["per_char"] == pytest.approx(23 / 24)
    assert row["first_error_histogram"] == [0, 6, 0, 0]


def test_probe_refuses_a_missing_model_folder(tmp_path):
    probe = _script("probe_base_recall")
    with pytest.raises(SystemExit, match="is not a folder"):
        probe.main([str(tmp_path / "nowhere")])
    with pytest.raises(SystemExit, match="--needles"):
        probe.main([str(tmp_path), "--needles", "0"])
    with pytest.raises(SystemExit, match="--samples needs at least 5"):
        probe.main([str(tmp_path), "--samples", "0"])
    with pytest.raises(SystemExit, match="does not exist"):
        probe.main([str(tmp_path), "--json", str(tmp_path / "no" / "probe.json")])


def test_probe_by_distance_prints_the_protocols_suite(tmp_path, capsys):
    probe = _script("probe_base_recall")
    out = tmp_path / "distance.json"
    assert probe.main([str(ROOT / "upgrade" / "assets" / "tiny-mamba2"), "--by-distance", "256,512", "--samples", "5",
                       "--device", "cpu", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["buckets"] == [[256, 512]] and set(report["score"]) == {
        "passkey", "niah_fwpkm", "repeat", "mqar_gap_8", "mqar_gap_32", "mqar_gap_96", "mqar_interference_32"}
    assert set(report["part"]) == {"niah_fwpkm", "repeat"}
    assert "mqar_interference_32" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="give rising token counts from 200 up"):
        probe.main([str(tmp_path), "--by-distance", "512"])


def test_a_stage_that_fails_says_why_in_the_races_output(variants, tmp_path, monkeypatch, capsys):
    """A device call returns the race's output, not its logs: a stage that exits with an error before its deadline
    prints the end of its log there (a staged variant's second stage once failed on an H100 with nothing to show)."""
    def failing(command, deadline, log=None, grace=120):
        log.write("Plan\r  5%|#   | 1/20\nTraceback (most recent call last):\nValueError: the anneal broke\n")
        return 1

    monkeypatch.setattr(variants.pretrain_base, "run_until", failing)
    args = variants.argparse.Namespace(out=tmp_path, workers=0, lr=5e-4, anneal_steps=1200, overrides=[],
                                       minutes=1.0, first_share=0.5)
    base = yaml.safe_load((ROOT / "recipes" / "pretrain-base.yaml").read_text())
    variants.run_slot("anneal", base, ROOT / "upgrade" / "assets" / "tiny-mamba2", args)
    out = capsys.readouterr().out
    assert "anneal (anneal) failed (exit 1): Plan / Traceback (most recent call last): / ValueError: the anneal broke" \
        in out and "%|" not in out


def test_a_stage_stopped_at_its_deadline_is_not_called_failed(variants, tmp_path, monkeypatch, capsys):
    args = variants.argparse.Namespace(out=tmp_path, workers=0, lr=5e-4, anneal_steps=1200, overrides=[],
                                       minutes=1.0, first_share=0.5)
    base = yaml.safe_load((ROOT / "recipes" / "pretrain-base.yaml").read_text())
    for status in (0, None):
        monkeypatch.setattr(variants.pretrain_base, "run_until", lambda *a, status=status, **k: status)
        variants.run_slot("anneal", base, ROOT / "upgrade" / "assets" / "tiny-mamba2", args)
        out = capsys.readouterr().out
        assert "failed" not in out
        # stopped at the deadline with nothing saved: the race says so (the table would only say "no checkpoint")
        assert ("reached its deadline before its first checkpoint" in out) == (status is None)


def test_a_relative_start_becomes_an_absolute_model_path(variants, base_recipe, tmp_path, monkeypatch):
    """The recipe is written into the race's folder and read from there: a relative start would be read from it."""
    monkeypatch.chdir(ROOT)
    recipe = variants.variant_recipe(base_recipe, "continue", workers=0, init=Path("upgrade/assets/tiny-mamba2"))
    assert recipe["model"]["path"] == str(ROOT / "upgrade" / "assets" / "tiny-mamba2")


def test_init_model_is_a_model_directory_and_excludes_init_pack(variants, tmp_path, capsys):
    with pytest.raises(SystemExit):
        variants.main(["--init-model", str(tmp_path), "--variants", "continue", "--out", str(tmp_path / "o")])
    assert f"--init-model {tmp_path} holds no config.json; give a model directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        variants.main(["--init-model", str(ROOT / "upgrade" / "assets" / "tiny-mamba2"), "--init-pack", str(tmp_path),
                       "--variants", "continue", "--out", str(tmp_path / "o")])
    assert "give --init-pack or --init-model, not both" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # refused before anything is written


def test_the_kept_best_is_a_model_directory_in_bf16(variants, tmp_path):
    """``--keep-best`` feeds the next race: ``--init-pack`` for a base of the recipe's size, ``--init-model`` for
    any (a 13.9M base's kept folder must also fit a device call's 8 files)."""
    from palimpsa.upgrade.convert.loading import load_model_and_tokenizer
    from palimpsa.upgrade.train.trainer import new_mamba2
    from safetensors.torch import save_file
    from transformers import AutoTokenizer

    _, recipe_path, model = _small_base(tmp_path)
    # a checkpoint as the trainer writes it: the model directory, and the weights in the training state (tied
    # head left out)
    checkpoint = tmp_path / "out" / "anneal" / "checkpoints" / "step-0000004"
    model.save_pretrained(checkpoint / "model")
    AutoTokenizer.from_pretrained(ROOT / "upgrade" / "assets" / "tiny-mamba2").save_pretrained(checkpoint / "model")
    (checkpoint / "state").mkdir()
    save_file({k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"},
              checkpoint / "state" / "model.safetensors")
    (checkpoint / "trainer_state.json").write_text(json.dumps({"step": 4}))
    args = variants.argparse.Namespace(out=tmp_path / "out", keep_best=tmp_path / "best")
    args.keep_best.mkdir()
    (args.keep_best / "model-00009-of-00009.safetensors").write_bytes(b"an earlier race's")
    variants.keep_best("anneal", {"anneal": 0.5}, args)

    shards = sorted(p.name for p in args.keep_best.glob("model*.safetensors"))
    assert shards == ["model.safetensors"]  # one shard at this size; the earlier race's is gone
    beside = {"config.json", "tokenizer.json", "tokenizer_config.json", "best.json"}
    assert {p.name for p in args.keep_best.iterdir()} == set(shards) | beside
    # a 13.9M base (13,900,672 parameters, 2 bytes each): its shards, their index and the rest fit the 8 files a
    # device call returns
    assert math.ceil(13_900_672 * 2 / variants.pretrain_base.SHARD_BYTES) + 1 + len(beside) <= 8
    rebuilt, tokenizer = load_model_and_tokenizer(args.keep_best)
    from safetensors.torch import load_file

    assert {v.dtype for shard in args.keep_best.glob("model*.safetensors") for v in load_file(shard).values()} \
        == {torch.bfloat16}
    ids = torch.tensor([tokenizer("recall this: 42", add_special_tokens=False)["input_ids"]])
    reference = new_mamba2(load_recipe(recipe_path)).eval()
    reference.load_state_dict({k: v.bfloat16().float() for k, v in model.state_dict().items()})
    with torch.no_grad():
        torch.testing.assert_close(rebuilt.float().eval()(ids).logits, reference(ids).logits)
    # and the same folder as a pack of the recipe's size
    from_pack, _ = load_model_and_tokenizer(variants.pretrain_base.model_from_pack(args.keep_best, tmp_path / "m",
                                                                                   recipe_path))
    with torch.no_grad():
        torch.testing.assert_close(from_pack.eval()(ids).logits, reference(ids).logits)


def test_score_stages_scores_a_staged_variants_first_stage_and_may_keep_it(variants, tmp_path, monkeypatch, capsys):
    """A staged variant's later stage can undo what its first learned (an anneal in the mixture after a NIAH phase):
    with --score-stages the first stage's end is a row of the table and a candidate for --keep-best."""
    name = "niah-multi+multi-anneal"

    def fake_run(slot, base, init, args):
        for index, run in enumerate((args.out / f"{slot}.0", args.out / slot)):
            checkpoint = run / "checkpoints" / f"step-{250 * (index + 1):07d}"
            checkpoint.mkdir(parents=True, exist_ok=True)  # the race is run three times below
            (checkpoint / "trainer_state.json").write_text(json.dumps({"step": 250 * (index + 1)}))

    def fake_bar(model, samples, device):
        niah = 0.8 if ".0" in str(model) else 0.3  # the first stage's end recalls better
        return {"accuracy": {t: [niah if t == "niah_fwpkm" else 1.0, 0.5] for t in variants.TASKS},
                "mqar_by_pairs": {"2": 1.0, "8": 1.0, "32": 1.0}}

    kept = []
    monkeypatch.setattr(variants, "run_slot", fake_run)
    monkeypatch.setattr(variants, "evaluate_bar", fake_bar)
    monkeypatch.setattr(variants, "keep_best", lambda best, scored, args: kept.append((best, scored)))
    init = str(ROOT / "upgrade" / "assets" / "tiny-mamba2")
    common = ["--init-model", init, "--variants", name, "--out", str(tmp_path), "--keep-best", str(tmp_path / "b")]
    assert variants.main([*common, "--score-stages"]) == 0
    table = (tmp_path / "variants.md").read_text()
    assert f"| {name}.0 | 250 |" in table and f"| {name} | 500 |" in table
    assert kept[-1][0] == f"{name}.0" and set(kept[-1][1]) == {name, f"{name}.0"}
    capsys.readouterr()
    assert variants.main(common) == 0  # without the flag: the last stage alone
    assert f"{name}.0 |" not in (tmp_path / "variants.md").read_text() and kept[-1][0] == name
    monkeypatch.setattr(variants, "evaluate_bar", lambda model, samples, device: fake_bar("tie", samples, device))
    assert variants.main([*common, "--score-stages"]) == 0
    assert kept[-1][0] == name  # a tie keeps the later stage
