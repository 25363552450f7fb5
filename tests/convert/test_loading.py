"""Tests of the one loader of a model for use (``palimpsa.upgrade.convert.loading``) as the ecosystem meets it: a
plain Mamba2 loaded with the toolkit records where it came from, so that a peft adapter made on it names its base
and ``AutoPeftModelForCausalLM`` rebuilds the pair offline."""

from __future__ import annotations

import json

import torch
from checkpoints import write_transformers
from palimpsa.upgrade import load_model_and_tokenizer
from peft import AutoPeftModelForCausalLM, LoraConfig, get_peft_model


def test_a_peft_adapter_on_a_loaded_mamba2_names_its_base(tmp_path, tiny_random, monkeypatch):
    base = write_transformers(tmp_path / "mamba2-hf", vocab_size=104, tie_word_embeddings=True)
    model, _ = load_model_and_tokenizer(base, need_tokenizer=False)
    assert model.name_or_path == str(base.resolve())
    # transformers' Mamba2 serves the base on reload, and peft allows it LoRA on in_proj only
    peft_model = get_peft_model(model, LoraConfig(target_modules=["in_proj"], r=4, task_type="CAUSAL_LM"))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=gen) * 0.05)
    peft_model.save_pretrained(tmp_path / "adapter")
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"] \
        == str(base.resolve())

    monkeypatch.chdir(tmp_path.parent)  # the recorded path does not depend on where the adapter is loaded from
    reloaded = AutoPeftModelForCausalLM.from_pretrained(tmp_path / "adapter").eval()
    ids = torch.randint(0, 104, (2, 16), generator=gen)
    with torch.no_grad():
        want, got = peft_model.eval()(input_ids=ids).logits, reloaded(input_ids=ids).logits
    assert (got - want).abs().max().item() <= 1e-4 * want.abs().max().item()
    with torch.no_grad(), peft_model.disable_adapter():
        assert (peft_model(input_ids=ids).logits - want).abs().max().item() > 1e-3  # the adapter matters

    plain, _ = load_model_and_tokenizer(tiny_random)  # mamba_ssm format: recorded as well
    assert plain.name_or_path == plain.config._name_or_path == str(tiny_random.resolve())
