"""Tests of checkpoint loading (``load_checkpoint``: both formats, local directories and a hub cache, every
refusal), of the safe pickle path and of layer selection (``parse_layer_spec``/``spread_layers``)."""

from __future__ import annotations

import json
import math
import os
import pathlib
import shutil
from pathlib import Path

import pytest
import torch
from checkpoints import assert_same_tensors, hub_cache_layout, write_mamba_ssm, write_transformers
from huggingface_hub import constants
from palimpsa.upgrade.convert.checkpoint import TOKENIZER_FILES, load_checkpoint
from palimpsa.upgrade.convert.surgery import parse_layer_spec, spread_layers
from palimpsa.upgrade.errors import PalimpsaError
from palimpsa.upgrade.model.modeling import model_from_state_dict
from safetensors.torch import load_file, save_file

# --------------------------------------------------------------------------------------------------- helpers


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def edit_config(directory: Path, **changes) -> None:
    raw = read_json(directory / "config.json")
    raw.update(changes)
    (directory / "config.json").write_text(json.dumps(raw))


def written_pickle(directory: Path) -> dict[str, torch.Tensor]:
    return torch.load(directory / "pytorch_model.bin", weights_only=True)


def written_safetensors(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the directory's safetensors (single file or shards), as written."""
    state: dict[str, torch.Tensor] = {}
    for path in sorted(directory.glob("*.safetensors")):
        state.update(load_file(str(path)))
    return state


def expected_mamba_keys(n_layer: int, tied: bool) -> set[str]:
    per_layer = ["norm.weight", "mixer.in_proj.weight", "mixer.conv1d.weight", "mixer.conv1d.bias",
                 "mixer.dt_bias", "mixer.A_log", "mixer.D", "mixer.norm.weight", "mixer.out_proj.weight"]
    keys = {"backbone.embedding.weight", "backbone.norm_f.weight"}
    keys |= {f"backbone.layers.{i}.{name}" for i in range(n_layer) for name in per_layer}
    return keys if tied else keys | {"lm_head.weight"}


def raises(match: str):
    return pytest.raises(PalimpsaError, match=match)


# --------------------------------------------------------------------------------------------- mamba_ssm format


def test_mamba_ssm_pickle(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m", d_model=32, n_layer=3, vocab_size=101, pad_vocab_size_multiple=8)
    ckpt = load_checkpoint(directory)
    assert ckpt.format == "mamba_ssm"
    assert ckpt.directory == directory
    assert ckpt.source == str(directory)
    assert ckpt.revision is None
    config = ckpt.config
    assert (config.d_model, config.n_layer) == (32, 3)
    assert config.vocab_size == 104 and config.base_vocab_size == 101  # 101 padded to a multiple of 8
    assert (config.d_state, config.headdim, config.expand, config.ngroups) == (8, 8, 2, 1)
    assert config.d_ssm is None and config.ssm_dim == 64 and config.nheads == 8
    assert config.dt_limit is None
    assert config.tie_word_embeddings is True
    assert config.upgraded_layers == []
    assert config.model_type == "palimpsa"
    assert ckpt.weight_files == [directory / "pytorch_model.bin"]
    assert ckpt.weight_bytes == (directory / "pytorch_model.bin").stat().st_size
    assert ckpt.tokenizer_files == []
    assert ckpt.stored_dtype() == torch.float32

    written = written_pickle(directory)
    assert "lm_head.weight" in written  # mamba_ssm saves the tied head too ...
    state = ckpt.load_state_dict(progress=False)
    assert "lm_head.weight" not in state  # ... and the loader drops it
    del written["lm_head.weight"]
    assert_same_tensors(state, written)
    assert set(state) == expected_mamba_keys(3, tied=True)
    assert state["backbone.embedding.weight"].shape == (104, 32)
    assert state["backbone.layers.0.mixer.in_proj.weight"].shape == (2 * 64 + 2 * 8 + 8, 32)

    model = model_from_state_dict(config, state, ckpt.source)
    assert model.lm_head.weight is model.backbone.embedding.weight
    assert torch.equal(model.backbone.layers[2].mixer.out_proj.weight,
                       written["backbone.layers.2.mixer.out_proj.weight"])


def test_mamba_ssm_safetensors_with_tokenizer(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m", safetensors=True, tokenizer=True, n_layer=2)
    ckpt = load_checkpoint(str(directory))
    assert ckpt.format == "mamba_ssm"
    assert ckpt.weight_files == [directory / "model.safetensors"]
    present = [directory / name for name in TOKENIZER_FILES if (directory / name).is_file()]
    assert directory / "tokenizer.json" in present
    assert ckpt.tokenizer_files == present
    assert ckpt.stored_dtype() == torch.float32
    state = ckpt.load_state_dict(progress=False)
    assert_same_tensors(state, written_safetensors(directory))
    assert set(state) == expected_mamba_keys(2, tied=True)


def test_safetensors_preferred_over_pickle(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m", seed=1)
    other = write_mamba_ssm(tmp_path / "other", safetensors=True, seed=2)
    shutil.copy(other / "model.safetensors", directory / "model.safetensors")
    ckpt = load_checkpoint(directory)
    assert ckpt.weight_files == [directory / "model.safetensors"]
    state = ckpt.load_state_dict(progress=False)
    assert torch.equal(state["backbone.embedding.weight"],
                       written_safetensors(other)["backbone.embedding.weight"])


def test_mamba_ssm_untied_head_is_kept(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m", tie_embeddings=False)
    ckpt = load_checkpoint(directory)
    assert ckpt.config.tie_word_embeddings is False
    state = ckpt.load_state_dict(progress=False)
    assert_same_tensors(state, written_pickle(directory))
    assert set(state) == expected_mamba_keys(3, tied=False)
    model = model_from_state_dict(ckpt.config, state)
    assert model.lm_head.weight is not model.backbone.embedding.weight


def test_mamba_ssm_d_ssm_and_groups(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m", d_model=32, d_ssm=32, ngroups=2, headdim=8, d_state=4)
    config = load_checkpoint(directory).config
    assert config.d_ssm == 32 and config.ssm_dim == 32 and config.d_inner == 64
    assert config.nheads == 4 and config.ngroups == 2 and config.d_state == 4
    state = load_checkpoint(directory).load_state_dict(progress=False)
    # in_proj: [z0, x0, z, xBC, dt] = 2 * d_inner + 2 * ngroups * d_state + nheads
    assert state["backbone.layers.0.mixer.in_proj.weight"].shape == (2 * 64 + 2 * 2 * 4 + 4, 32)
    assert state["backbone.layers.0.mixer.conv1d.weight"].shape == (32 + 2 * 2 * 4, 1, 4)
    model_from_state_dict(config, state)


@pytest.mark.parametrize("multiple, vocab, padded", [(8, 101, 104), (16, 257, 272), (1, 101, 101), (8, 96, 96)])
def test_mamba_ssm_vocab_padding(tmp_path, multiple, vocab, padded):
    directory = write_mamba_ssm(tmp_path / "m", vocab_size=vocab, pad_vocab_size_multiple=multiple, n_layer=1)
    ckpt = load_checkpoint(directory)
    assert ckpt.config.vocab_size == padded
    assert ckpt.config.base_vocab_size == vocab
    assert ckpt.load_state_dict(progress=False)["backbone.embedding.weight"].shape[0] == padded


@pytest.mark.parametrize("limit, want", [((0.0, math.inf), None), ((0.0, "inf"), None), ((0.01, 0.5), [0.01, 0.5]),
                                         ((0.0, 2.0), [0.0, 2.0])])
def test_mamba_ssm_dt_limit(tmp_path, limit, want):
    directory = write_mamba_ssm(tmp_path / "m", dt_limit=list(limit), n_layer=1)
    if limit[1] == math.inf:
        assert "Infinity" in (directory / "config.json").read_text()  # json writes inf as Infinity
    assert load_checkpoint(directory).config.dt_limit == want


def test_bfloat16_safetensors(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m", safetensors=True)
    path = directory / "model.safetensors"
    bf16 = {name: tensor.to(torch.bfloat16) for name, tensor in load_file(str(path)).items()}
    save_file(bf16, str(path), metadata={"format": "pt"})
    ckpt = load_checkpoint(directory)
    assert ckpt.stored_dtype() == torch.bfloat16
    state = ckpt.load_state_dict(progress=False)
    assert_same_tensors(state, bf16)
    as_f32 = ckpt.load_state_dict(dtype=torch.float32, progress=False)
    assert all(t.dtype == torch.float32 for t in as_f32.values())
    assert torch.equal(as_f32["backbone.norm_f.weight"], bf16["backbone.norm_f.weight"].float())


def test_bfloat16_pickle(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m")
    state = {name: tensor.to(torch.bfloat16) for name, tensor in written_pickle(directory).items()}
    torch.save(state, directory / "pytorch_model.bin")
    assert load_checkpoint(directory).stored_dtype() == torch.bfloat16


# ------------------------------------------------------------------------------------------ transformers format


def test_transformers_single_file(tmp_path):
    directory = write_transformers(tmp_path / "t", hidden_size=32, num_hidden_layers=3, vocab_size=104)
    raw = read_json(directory / "config.json")
    assert raw["time_step_limit"][1] == {"__float__": "Infinity"}  # transformers 5's spelling of inf
    ckpt = load_checkpoint(directory)
    assert ckpt.format == "transformers"
    assert ckpt.weight_files == [directory / "model.safetensors"]
    assert ckpt.tokenizer_files == []
    config = ckpt.config
    assert (config.d_model, config.n_layer, config.vocab_size, config.base_vocab_size) == (32, 3, 104, 104)
    assert (config.d_state, config.headdim, config.nheads, config.ngroups, config.expand) == (8, 8, 8, 1, 2)
    assert config.dt_limit is None
    assert config.tie_word_embeddings is False
    assert config.chunk_size == 16
    assert config.gated_norm_epsilon == raw["layer_norm_epsilon"]
    assert ckpt.stored_dtype() == torch.float32

    written = written_safetensors(directory)
    assert "backbone.embeddings.weight" in written
    state = ckpt.load_state_dict(progress=False)
    want = dict(written)
    want["backbone.embedding.weight"] = want.pop("backbone.embeddings.weight")
    assert_same_tensors(state, want)
    assert set(state) == expected_mamba_keys(3, tied=False)
    model_from_state_dict(config, state)


def test_transformers_sharded(tmp_path):
    directory = write_transformers(tmp_path / "t", max_shard_size="20KB")
    index = read_json(directory / "model.safetensors.index.json")
    shard_names = list(dict.fromkeys(index["weight_map"].values()))
    assert len(shard_names) > 1
    ckpt = load_checkpoint(directory)
    assert ckpt.format == "transformers"
    assert ckpt.weight_files == [directory / name for name in shard_names]
    assert ckpt.weight_bytes == sum((directory / name).stat().st_size for name in shard_names)
    state = ckpt.load_state_dict(progress=False)
    want = written_safetensors(directory)
    want["backbone.embedding.weight"] = want.pop("backbone.embeddings.weight")
    assert_same_tensors(state, want)
    assert len(state) == len(index["weight_map"])


def test_transformers_tied(tmp_path):
    directory = write_transformers(tmp_path / "t", tie_word_embeddings=True)
    ckpt = load_checkpoint(directory)
    assert ckpt.config.tie_word_embeddings is True
    state = ckpt.load_state_dict(progress=False)
    assert "lm_head.weight" not in state
    assert set(state) == expected_mamba_keys(3, tied=True)
    model = model_from_state_dict(ckpt.config, state)
    assert model.lm_head.weight is model.backbone.embedding.weight


@pytest.mark.parametrize("limit, want", [((0.001, 10.0), [0.001, 10.0]), ((0.0, 1.0), [0.0, 1.0])])
def test_transformers_finite_dt_limit(tmp_path, limit, want):
    directory = write_transformers(tmp_path / "t", time_step_limit=limit, num_hidden_layers=1)
    assert load_checkpoint(directory).config.dt_limit == want


@pytest.mark.parametrize("spelling", [[0.0, {"__float__": "Infinity"}], [0.0, "inf"], [0, "Infinity"]])
def test_transformers_infinity_spellings(tmp_path, spelling):
    directory = write_transformers(tmp_path / "t", num_hidden_layers=1)
    edit_config(directory, time_step_limit=spelling)
    assert load_checkpoint(directory).config.dt_limit is None


def test_transformers_groups_and_dims(tmp_path):
    directory = write_transformers(tmp_path / "t", hidden_size=32, head_dim=16, state_size=4, n_groups=2)
    config = load_checkpoint(directory).config
    assert (config.headdim, config.nheads, config.d_state, config.ngroups) == (16, 4, 4, 2)


def test_transformers_logits_match_mamba2_for_causal_lm(tmp_path):
    """The loaded weights under this toolkit's model compute what transformers' own Mamba2ForCausalLM computes."""
    from transformers import Mamba2ForCausalLM

    directory = write_transformers(tmp_path / "t", n_groups=2, time_step_limit=(0.0, 0.05), num_hidden_layers=2)
    ckpt = load_checkpoint(directory)
    ours = model_from_state_dict(ckpt.config, ckpt.load_state_dict(dtype=torch.float64, progress=False)).eval()
    theirs = Mamba2ForCausalLM.from_pretrained(directory, dtype=torch.float64).eval()
    ids = torch.randint(0, 104, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = ours(ids).logits.double()
        want = theirs(ids, use_cache=False).logits.double()
    assert got.shape == want.shape
    assert (got - want).abs().max().item() <= 1e-5 * want.abs().max().item()


# ----------------------------------------------------------------------------------------------- the hub cache


@pytest.fixture
def hub_cache(tmp_path):
    source = write_mamba_ssm(tmp_path / "src", safetensors=True, tokenizer=True, n_layer=2)
    cache = tmp_path / "cache"
    commit = hub_cache_layout(source, cache, "owner/name")
    return source, cache, commit


def test_hub_cache_local_files_only(hub_cache):
    source, cache, commit = hub_cache
    ckpt = load_checkpoint("owner/name", cache_dir=cache, local_files_only=True)
    snapshot = cache / "models--owner--name" / "snapshots" / commit
    assert ckpt.directory.resolve() == snapshot.resolve()
    assert ckpt.source == "owner/name"
    assert ckpt.format == "mamba_ssm"
    assert ckpt.config.n_layer == 2 and ckpt.config.vocab_size == 104
    assert [p.name for p in ckpt.weight_files] == ["model.safetensors"]
    assert "tokenizer.json" in [p.name for p in ckpt.tokenizer_files]
    assert_same_tensors(ckpt.load_state_dict(progress=False), written_safetensors(source))


def test_hub_cache_offline_by_default(hub_cache, monkeypatch):
    source, cache, commit = hub_cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # what HF_HUB_OFFLINE=1 sets at import
    ckpt = load_checkpoint("owner/name", cache_dir=cache)
    assert ckpt.directory.name == commit
    assert ckpt.config.n_layer == 2
    assert_same_tensors(ckpt.load_state_dict(progress=False), written_safetensors(source))


def test_hub_cache_revision_main(hub_cache):
    _, cache, commit = hub_cache
    ckpt = load_checkpoint("owner/name", revision="main", cache_dir=cache, local_files_only=True)
    assert ckpt.revision == "main"
    assert ckpt.directory.name == commit
    by_commit = load_checkpoint("owner/name", revision=commit, cache_dir=cache, local_files_only=True)
    assert by_commit.directory.name == commit


def test_hub_cache_sharded_transformers(tmp_path):
    source = write_transformers(tmp_path / "src", max_shard_size="20KB")
    cache = tmp_path / "cache"
    hub_cache_layout(source, cache, "owner/sharded")
    ckpt = load_checkpoint("owner/sharded", cache_dir=cache, local_files_only=True)
    assert ckpt.format == "transformers"
    assert len(ckpt.weight_files) > 1
    want = written_safetensors(source)
    want["backbone.embedding.weight"] = want.pop("backbone.embeddings.weight")
    assert_same_tensors(ckpt.load_state_dict(progress=False), want)


def test_hub_id_not_in_cache(hub_cache, monkeypatch):
    _, cache, _ = hub_cache
    with raises("owner/other .*not in the hub cache"):
        load_checkpoint("owner/other", cache_dir=cache, local_files_only=True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with raises("offline mode"):
        load_checkpoint("owner/other", cache_dir=cache)


def test_hub_revision_not_in_cache(hub_cache):
    _, cache, _ = hub_cache
    with pytest.raises(PalimpsaError):
        load_checkpoint("owner/name", revision="v2", cache_dir=cache, local_files_only=True)


# --------------------------------------------------------------------------------------------- pickle safety


class Harmless:
    """Any class instance: not something a weights_only unpickler may construct."""

    def __init__(self):
        self.value = 1


class TouchOnLoad:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


class SystemOnLoad:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch '{self.marker}'",))


@pytest.mark.parametrize("payload", ["touch", "system"])
@pytest.mark.parametrize("zipfile", [True, False])
def test_malicious_pickle_never_runs(tmp_path, payload, zipfile):
    directory = write_mamba_ssm(tmp_path / "m")
    marker = tmp_path / "marker"
    state = written_pickle(directory)
    state["backbone.norm_f.weight"] = TouchOnLoad(marker) if payload == "touch" else SystemOnLoad(marker)
    torch.save(state, directory / "pytorch_model.bin", _use_new_zipfile_serialization=zipfile)
    ckpt = load_checkpoint(directory)  # reads only config.json
    with raises("pytorch_model.bin"):
        ckpt.stored_dtype()
    with raises("pytorch_model.bin"):
        ckpt.load_state_dict(progress=False)
    assert not marker.exists()
    # control: a full unpickle of the same file does run the payload, so the test above could fail
    torch.load(directory / "pytorch_model.bin", weights_only=False)
    assert marker.exists()


def test_pickle_with_a_class_instance_is_refused(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m")
    state = written_pickle(directory)
    state["extra"] = Harmless()
    torch.save(state, directory / "pytorch_model.bin")
    with raises("corrupt or holds more than tensors"):
        load_checkpoint(directory).load_state_dict(progress=False)


def test_pickle_of_non_tensors_is_refused(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m")
    torch.save({"backbone.embedding.weight": [1, 2, 3]}, directory / "pytorch_model.bin")
    with raises("does not hold a state dict of tensors"):
        load_checkpoint(directory).load_state_dict(progress=False)
    torch.save([torch.zeros(2)], directory / "pytorch_model.bin")
    with raises("does not hold a state dict of tensors"):
        load_checkpoint(directory).stored_dtype()


# --------------------------------------------------------------------------------------------------- refusals


def test_missing_path(tmp_path):
    with raises("does not exist"):
        load_checkpoint(tmp_path / "nowhere")
    with raises("does not exist"):
        load_checkpoint("./nowhere/at/all")


def test_file_instead_of_directory(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m")
    with raises("is a file"):
        load_checkpoint(directory / "config.json")


def test_directory_without_config(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m")
    (directory / "config.json").unlink()
    with raises("has no config.json"):
        load_checkpoint(directory)


@pytest.mark.parametrize("text", ["{not json", "", "\xff\xfe garbage"])
def test_invalid_json(tmp_path, text):
    directory = write_mamba_ssm(tmp_path / "m")
    (directory / "config.json").write_bytes(text.encode("latin-1"))
    with raises("not valid JSON"):
        load_checkpoint(directory)


def test_config_not_an_object(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m")
    (directory / "config.json").write_text("[1, 2]")
    with raises("JSON object"):
        load_checkpoint(directory)


def test_non_mamba2_config(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m")
    (directory / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 32,
                                                       "num_hidden_layers": 2, "vocab_size": 100}))
    with raises("not a Mamba2 checkpoint.*'llama'"):
        load_checkpoint(directory)


def test_transformers_mamba1_config(tmp_path):
    directory = write_transformers(tmp_path / "t")
    edit_config(directory, model_type="mamba")
    with raises("not a Mamba2 checkpoint.*'mamba'"):
        load_checkpoint(directory)


@pytest.mark.parametrize("ssm_cfg", [{}, {"layer": "Mamba1"}, {"d_state": 8}])
def test_mamba1_mamba_ssm_config(tmp_path, ssm_cfg):
    directory = write_mamba_ssm(tmp_path / "m")
    edit_config(directory, ssm_cfg=ssm_cfg)
    with raises("Mamba1 checkpoint"):
        load_checkpoint(directory)


def test_hybrid(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m")
    edit_config(directory, attn_layer_idx=[1], attn_cfg={"num_heads": 4})
    with raises(r"hybrid with attention layers \[1\]"):
        load_checkpoint(directory)


def test_mlp_blocks(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m")
    edit_config(directory, d_intermediate=64)
    with raises("d_intermediate=64"):
        load_checkpoint(directory)


def test_unknown_ssm_option(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m")
    raw = read_json(directory / "config.json")
    raw["ssm_cfg"]["mystery_option"] = 3
    (directory / "config.json").write_text(json.dumps(raw))
    with raises(r"ssm_cfg options this toolkit does not know: \['mystery_option'\]"):
        load_checkpoint(directory)


def test_inert_ssm_options_are_accepted(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m", dt_min=0.01, dt_max=0.2, A_init_range=[1, 8], chunk_size=64)
    assert load_checkpoint(directory).config.d_state == 8


def test_already_palimpsa(tmp_path):
    from palimpsa.upgrade.convert.upgrade import upgrade_model

    source = write_mamba_ssm(tmp_path / "m", n_layer=2)
    upgrade_model(source, 1, output=tmp_path / "up", verify=False)
    assert read_json(tmp_path / "up" / "config.json")["model_type"] == "palimpsa"
    with raises("already a Palimpsa model"):
        load_checkpoint(tmp_path / "up")


def test_inconsistent_dimensions(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m")
    edit_config(directory, ssm_cfg={"layer": "Mamba2", "d_state": 8, "headdim": 12, "expand": 2})
    with raises("inconsistent.*headdim"):
        load_checkpoint(directory)


def test_no_weight_files(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m")
    (directory / "pytorch_model.bin").unlink()
    (directory / "model.bin").write_bytes(b"not looked at")
    with raises("has no weights"):
        load_checkpoint(directory)


def test_index_lists_a_missing_shard(tmp_path):
    directory = write_transformers(tmp_path / "t", max_shard_size="20KB")
    index = read_json(directory / "model.safetensors.index.json")
    gone = sorted(set(index["weight_map"].values()))[1]
    (directory / gone).unlink()
    with raises(f"missing weight shards.*{gone}"):
        load_checkpoint(directory)


def test_index_without_weight_map(tmp_path):
    directory = write_transformers(tmp_path / "t", max_shard_size="20KB")
    (directory / "model.safetensors.index.json").write_text('{"metadata": {}}')
    with raises("not a valid shard index"):
        load_checkpoint(directory)


def _corrupt_safetensors(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(os.urandom(len(data)))
    elif how == "header":
        path.write_bytes(data[:20])
    else:  # a huge header length
        path.write_bytes((2**40).to_bytes(8, "little") + data[8:])


@pytest.mark.parametrize("how", ["truncated", "garbage", "header", "length"])
def test_corrupt_safetensors(tmp_path, how):
    directory = write_mamba_ssm(tmp_path / "m", safetensors=True)
    _corrupt_safetensors(directory / "model.safetensors", how)
    ckpt = load_checkpoint(directory)
    with raises("model.safetensors"):
        ckpt.stored_dtype()
    with raises("model.safetensors"):
        ckpt.load_state_dict(progress=False)


def test_corrupt_shard(tmp_path):
    directory = write_transformers(tmp_path / "t", max_shard_size="20KB")
    shard = sorted(directory.glob("model-*.safetensors"))[-1]
    _corrupt_safetensors(shard, "truncated")
    with raises(shard.name):
        load_checkpoint(directory).load_state_dict(progress=False)


@pytest.mark.parametrize("how", ["truncated", "garbage", "empty"])
def test_corrupt_pickle(tmp_path, how):
    directory = write_mamba_ssm(tmp_path / "m")
    path = directory / "pytorch_model.bin"
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "garbage": os.urandom(4096), "empty": b""}[how])
    ckpt = load_checkpoint(directory)
    with raises("pytorch_model.bin.*corrupt"):
        ckpt.stored_dtype()
    with raises("pytorch_model.bin.*corrupt"):
        ckpt.load_state_dict(progress=False)


def test_weights_do_not_match_config_shapes(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m", d_state=8)
    raw = read_json(directory / "config.json")
    raw["ssm_cfg"]["d_state"] = 16
    (directory / "config.json").write_text(json.dumps(raw))
    ckpt = load_checkpoint(directory)
    assert ckpt.config.d_state == 16
    state = ckpt.load_state_dict(progress=False)
    with raises(r"in_proj.weight has shape \[152, 32\] but config.json implies \[168, 32\]"):
        model_from_state_dict(ckpt.config, state, ckpt.source)


def test_weights_do_not_match_config_layers(tmp_path):
    directory = write_mamba_ssm(tmp_path / "m", n_layer=3)
    edit_config(directory, n_layer=4)
    ckpt = load_checkpoint(directory)
    with raises(r"do not match config.json \(missing \['backbone.layers.3"):
        model_from_state_dict(ckpt.config, ckpt.load_state_dict(progress=False), ckpt.source)
    edit_config(directory, n_layer=2)
    ckpt = load_checkpoint(directory)
    with raises(r"unexpected \['backbone.layers.2"):
        model_from_state_dict(ckpt.config, ckpt.load_state_dict(progress=False), ckpt.source)


# ------------------------------------------------------------------------------------------- layer selection


@pytest.mark.parametrize("count, n_layer, strategy, want", [
    (8, 64, "even", [4, 12, 20, 28, 36, 44, 52, 60]),
    (8, 64, "first", list(range(8))),
    (8, 64, "last", list(range(56, 64))),
    (2, 4, "even", [1, 3]),
    (1, 4, "even", [2]),
    (3, 4, "even", [0, 2, 3]),
    (4, 4, "even", [0, 1, 2, 3]),
    (4, 48, "even", [6, 18, 30, 42]),
    (1, 1, "last", [0]),
])
def test_spread_layers(count, n_layer, strategy, want):
    assert spread_layers(count, n_layer, strategy) == want
    assert parse_layer_spec(str(count), n_layer, strategy) == want
    assert parse_layer_spec(f" {count} ", n_layer, strategy) == want


@pytest.mark.parametrize("n_layer", [1, 3, 7, 24, 48, 64])
def test_spread_layers_even_is_distinct_and_in_range(n_layer):
    for count in range(1, n_layer + 1):
        chosen = spread_layers(count, n_layer, "even")
        assert len(chosen) == count
        assert chosen == sorted(set(chosen))
        assert 0 <= chosen[0] and chosen[-1] < n_layer


@pytest.mark.parametrize("spec, want", [
    ("3,11,19", [3, 11, 19]),
    ("19,3,11", [3, 11, 19]),
    ("48-63", list(range(48, 64))),
    ("0,10-12", [0, 10, 11, 12]),
    ("5-5", [5]),
    ("0-1, 62-63", [0, 1, 62, 63]),
    (" 7 , 9 ", [7, 9]),
    ("63,0", [0, 63]),
])
def test_parse_layer_spec_lists_and_ranges(spec, want):
    assert parse_layer_spec(spec, 64) == want
    assert parse_layer_spec(spec, 64, "last") == want  # the strategy only places counts


@pytest.mark.parametrize("spec, n_layer, match", [
    ("65", 64, "asked for 65 layers but the model has 64"),
    ("5", 4, "asked for 5 layers but the model has 4"),
    ("0", 4, "at least 1"),
    ("4", 4, None),
    ("2,4", 4, r"\[4\] outside the model's layers 0-3"),
    ("3-9", 4, r"\[4, 5, 6, 7, 8, 9\] outside"),
    ("1,1", 4, r"layer\(s\) \[1\] listed more than once"),
    ("0-2,2-3", 4, r"\[2\] listed more than once"),
    ("0-3,1", 4, r"\[1\] listed more than once"),
    ("3-1", 4, "runs backwards"),
    ("abc", 4, "cannot read 'abc'"),
    ("1,x", 4, "cannot read 'x'"),
    ("-1", 4, "cannot read"),
    ("1-2-3", 4, "cannot read"),
    ("1,,2", 4, "cannot read"),
    ("1.5", 4, "cannot read"),
    ("", 4, "empty"),
    ("   ", 4, "empty"),
])
def test_parse_layer_spec_errors(spec, n_layer, match):
    if match is None:
        assert parse_layer_spec(spec, n_layer) == [0, 1, 2, 3]
        return
    with raises(match):
        parse_layer_spec(spec, n_layer)


def test_spread_and_strategy_errors():
    with raises("at least 1"):
        spread_layers(0, 4)
    with raises("at least 1"):
        spread_layers(-2, 4)
    with raises("asked for 9"):
        spread_layers(9, 8, "first")
    with raises("--strategy"):
        parse_layer_spec("2", 4, "middle")
