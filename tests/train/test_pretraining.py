"""Pretraining: the stdlib corpus, synthetic documents new every epoch, MQAR with a haystack gap, batches made
ahead on a thread, plain-Mamba2 fine-tuning (``upgrade_layers: none``) and the embedded model's files. (The
long-context experiment's runner has its tests in tests/evaluate/test_longctx_experiment.py.)

Oracles: the standard library's files on disk, a plain ``TokenStream`` replaying the same seeded batches and the
MQAR construction rules (keys never in the haystack, each queried key followed by its value).
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
from pathlib import Path

import palimpsa.upgrade
import pytest
import torch
from checkpoints import EMBEDDED, ROOT
from palimpsa.upgrade.evaluate.tasks import mqar_gap_samples, mqar_gap_setup
from palimpsa.upgrade.train.data import DocumentSource, Prefetcher, TokenStream
from palimpsa.upgrade.train.recipe import SourceSection, load_recipe
from transformers import AutoTokenizer

VOCAB = 272


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(str(EMBEDDED))


def documents(sections, tok, seq_len=256, seed=0, holdout=0) -> DocumentSource:
    return DocumentSource([SourceSection(**s) for s in sections], tok, seq_len=seq_len, seed=seed, vocab_size=VOCAB,
                          holdout=holdout)


# --- the stdlib source ----------------------------------------------------------------------------------------------

def test_stdlib_source_is_the_standard_library_without_tests(tok):
    source = documents([{"type": "stdlib"}], tok)
    reader = source.readers[0]
    root = Path(sysconfig.get_paths()["stdlib"])
    names = {p.relative_to(root).as_posix() for p in reader.files}
    assert "os.py" in names and "json/decoder.py" in names
    assert not any(part in ("test", "tests", "idlelib", "site-packages") for n in names for part in n.split("/")[:-1])
    assert len(reader) == len(names) > 300
    index = sorted(names).index("json/decoder.py")
    assert reader.read(index) == (root / "json" / "decoder.py").read_text(encoding="utf-8")
    first = source.next_document()
    assert first[-1] == tok.eos_token_id and len(first) > 10


# --- synthetic documents ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("task", ["passkey", "mqar", "mqar-gap"])
def test_synthetic_documents_are_new_each_epoch_and_reproducible(tok, task):
    reader = documents([{"type": "synthetic", "task": task, "documents": 4}], tok).readers[0]
    epoch0, epoch1 = [reader.read(i, 0) for i in range(4)], [reader.read(i, 1) for i in range(4)]
    assert all(a != b for a, b in zip(epoch0, epoch1))
    assert epoch1 == [reader.read(i, 1) for i in range(4)]  # a pure function of (seed, index, epoch)
    # Two epochs through the source yield eight different documents.
    source = documents([{"type": "synthetic", "task": task, "documents": 4}], tok)
    drawn = [tuple(source.next_document()) for _ in range(8)]
    assert len(set(drawn)) == 8


def test_mqar_gap_samples(tok):
    filler, keys, values = mqar_gap_setup(tok, VOCAB)
    assert not (set(keys) | set(values)) & set(filler) and not set(keys) & set(values)
    assert tok.eos_token_id not in keys + values
    samples = mqar_gap_samples(filler, keys, values, [200, 1000], pairs=6, queries=4, per_length=3, seed=1)
    assert len(samples) == 6
    for sample, length in zip(samples, [200] * 3 + [1000] * 3):
        ids = sample.input_ids
        assert len(ids) == length
        pairs = dict(zip(ids[0:12:2], ids[1:12:2]))
        assert set(pairs) <= set(keys) and set(pairs.values()) <= set(values) and len(pairs) == 6
        assert set(ids[12 : length - 8]) <= set(filler)  # the gap is haystack only
        assert len(sample.target_positions) == 4
        for position, target in zip(sample.target_positions, sample.targets):
            assert position >= length - 8 and ids[position + 1] == target == pairs[ids[position]]
    # Too many pairs for the free ids: a clear error.
    with pytest.raises(ValueError, match="free key and value ids"):
        mqar_gap_samples(filler, keys[:3], values, [100], pairs=4, queries=1, per_length=1, seed=0)


def test_mqar_gap_documents_fit_the_row(tok):
    source = documents([{"type": "synthetic", "task": "mqar-gap", "documents": 20}], tok, seq_len=128)
    reader = source.readers[0]
    for _ in range(20):
        doc = source.next_document()
        assert 4 * 8 <= len(doc) - 1 <= 127 and doc[-1] == tok.eos_token_id
        assert set(doc[:-1]) <= set(reader.filler) | set(reader.keys) | set(reader.values)


def test_mqar_gap_needs_a_tokenizer():
    with pytest.raises(palimpsa.upgrade.PalimpsaError, match="mqar-gap documents need a tokenizer"):
        DocumentSource([SourceSection(type="synthetic", task="mqar-gap", documents=2)], None, seq_len=64,
                       vocab_size=VOCAB)


# --- batches made ahead -------------------------------------------------------------------------------------------

def _stream(tok) -> TokenStream:
    source = documents([{"type": "pydoc", "weight": 1}, {"type": "synthetic", "task": "passkey", "documents": 8}],
                       tok, seq_len=64)
    return TokenStream(source, seq_len=64, batch_size=2)


def test_prefetcher_yields_the_stream_and_its_position(tok):
    plain, ahead = _stream(tok), Prefetcher(_stream(tok), depth=3)
    try:
        for _ in range(6):
            expected, got = next(plain), next(ahead)
            assert torch.equal(expected.input_ids, got.input_ids) and torch.equal(expected.labels, got.labels)
            assert torch.equal(expected.cu_seqlens, got.cu_seqlens)
            # The position is the one after the batch handed out, not after the ones made ahead.
            assert ahead.state_dict() == plain.state_dict()
        resumed = _stream(tok)
        resumed.load_state_dict(ahead.state_dict())
        assert torch.equal(next(resumed).input_ids, next(plain).input_ids)
    finally:
        ahead.close()


def test_prefetcher_raises_the_thread_error():
    class Broken:
        def state_dict(self):
            return {}

        def __next__(self):
            raise RuntimeError("bad document 3")

    ahead = Prefetcher(Broken())
    with pytest.raises(RuntimeError, match="bad document 3"):
        next(ahead)
    ahead.close()


# --- plain Mamba2 fine-tuning (the experiment's baseline arm) ---------------------------------------------------

def test_upgrade_layers_none_fine_tunes_a_plain_mamba2(tmp_path):
    from checkpoints import write_tiny_random_mamba2
    from palimpsa.upgrade.model.modeling import PalimpsaForCausalLM
    from palimpsa.upgrade.train.trainer import Trainer

    base = write_tiny_random_mamba2(tmp_path / "base")
    run = tmp_path / "run"
    recipe = load_recipe(ROOT / "recipes" / "tiny-cpu.yaml", [
        f"output_dir={run}", f"model.path={base}", "model.upgrade_layers=none", "trainable.mode=all",
        "train.max_steps=2", "data.seq_len=32", "data.batch_size=1", "eval.passkey_samples=0", "eval.batches=1",
        "eval.every=0", "checkpoint.every=0", "schedule.warmup_steps=1", "logging.tensorboard=false"])
    Trainer(recipe, log=lambda _line: None).train()
    final = PalimpsaForCausalLM.from_pretrained(str(run / "final"))
    assert final.config.upgraded_layers == [] and not any(".beta_" in n for n, _ in final.named_parameters())
    before = palimpsa.upgrade.convert.checkpoint.load_checkpoint(base).load_state_dict(progress=False)
    after = final.state_dict()
    moved = [name for name, tensor in before.items() if name in after and not torch.equal(tensor, after[name])]
    assert moved  # every parameter was trainable: the weights changed


# --- the embedded model and the pretraining recipes -----------------------------------------------------------

def test_embedded_model_matches_its_manifest_and_card():
    report = json.loads((EMBEDDED / "export_report.json").read_text())
    for name, entry in report["files"].items():
        data = (EMBEDDED / name).read_bytes()
        assert len(data) == entry["bytes"] and hashlib.sha256(data).hexdigest() == entry["sha256"]
    size = sum(p.stat().st_size for p in EMBEDDED.rglob("*") if p.is_file())
    assert size <= 10 * 1024 * 1024
    summary = json.loads((EMBEDDED / "training" / "summary.json").read_text())
    assert summary["phase1"]["steps"] > 0 and summary["phase2"]["final_eval"]["passkey_accuracy"] == 1.0
    config = json.loads((EMBEDDED / "config.json").read_text())
    assert (config["d_model"], config["n_layer"], config["vocab_size"]) == (256, 5, 257)


def test_pretraining_recipes_validate():
    first = load_recipe(ROOT / "recipes" / "pretrain-tiny.yaml")
    assert first.model.scratch is not None and first.trainable.mode == "all"
    assert [s.type for s in first.data.sources] == ["stdlib", "synthetic", "synthetic", "synthetic"]
    second = load_recipe(ROOT / "recipes" / "pretrain-tiny-recall.yaml")
    assert second.model.upgrade_layers == "none" and second.trainable.mode == "all"


def test_eval_model_mqar_gap(tmp_path):
    from palimpsa.upgrade.cli.eval_model import run as run_eval

    assert run_eval([str(EMBEDDED), "--tasks", "mqar-gap", "--lengths", "48,96", "--samples", "1",
                     "--mqar-gap-pairs", "4", "--output", str(tmp_path), "--device", "cpu"]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    gap = summary["models"][0]["mqar_gap"]
    assert gap["lengths"] == [48, 96] and gap["pairs"] == 4
    assert all(0.0 <= value <= 1.0 for value in gap["by_length"]) and len(gap["by_length"]) == 2
    assert "| MQAR-gap @ 96 |" in (tmp_path / "summary.md").read_text()
    assert (tmp_path / "mqar_gap.png").stat().st_size > 5_000
