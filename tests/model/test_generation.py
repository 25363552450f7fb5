"""Tests of generation with the recurrent cache (``PalimpsaCache``, ``generate()``) and of ``generate-text``.

Oracle: the full forward over the whole sequence. Decoding token by token with the cache, prefilling a prefix and
then stepping, carrying the state across segments, left-padding a batch and ``generate()`` must all reproduce what
the full forward computes on the same tokens (float32, tiny random models whose Palimpsa layers visibly differ from
the Mamba2 layers they came from).
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from checkpoints import EMBEDDED
from palimpsa.upgrade import PalimpsaConfig, PalimpsaForCausalLM, upgrade_model
from palimpsa.upgrade.evaluate.generation import generate_text
from palimpsa.upgrade.model.cache import PalimpsaCache
from palimpsa.upgrade.model.modeling import PalimpsaMixer, cache_of

TINY = EMBEDDED
VOCAB = 64
KINDS = {"mamba2": [], "palimpsa": [0, 1, 2], "mixed": [1]}
GROUPS = [1, 2]


# ----------------------------------------------------------------------------------------------------------------
# helpers


def make_model(upgraded: list[int], ngroups: int = 1, seed: int = 0) -> PalimpsaForCausalLM:
    """A tiny float32 model with seeded weights large enough that every layer, and every beta, matters."""
    config = PalimpsaConfig(d_model=32, n_layer=3, vocab_size=VOCAB, d_state=8, headdim=8, ngroups=ngroups,
                            upgraded_layers=upgraded, beta_init=0.5, chunk_size=16)
    torch.manual_seed(seed)
    model = PalimpsaForCausalLM(config)
    gen = torch.Generator().manual_seed(seed)

    def randn(p):
        return torch.randn(p.shape, generator=gen)

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("embedding.weight"):
                p.copy_(randn(p) * 0.5)
            elif name.endswith(("proj.weight", "beta_down.weight", "beta_up.weight")):
                p.copy_(randn(p) * p.shape[1] ** -0.5)
            elif name.endswith("beta_up.bias"):
                p.copy_(randn(p))
            elif name.endswith("beta_log_gain"):
                p.copy_((0.5 + 0.5 * torch.rand(p.shape, generator=gen)).log())
            elif name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(0.5, 4.0, generator=gen).log())
            elif name.endswith("dt_bias"):
                p.copy_(-1.0 + 0.5 * randn(p))
            elif name.endswith("conv1d.weight"):
                p.copy_(randn(p) * 0.5)
            elif name.endswith("norm.weight") or name.endswith("norm_f.weight"):
                p.copy_(1 + 0.2 * randn(p))
            else:  # D, conv bias
                p.copy_(randn(p) * 0.3)
    return model.eval()


def random_ids(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()


@torch.no_grad()
def full_logits(model, ids: torch.Tensor, **kwargs) -> torch.Tensor:
    return model(ids, **kwargs).logits


@torch.no_grad()
def stepwise_logits(model, ids: torch.Tensor, cache: PalimpsaCache) -> torch.Tensor:
    return torch.cat([model(ids[:, t : t + 1], cache_params=cache).logits for t in range(ids.shape[1])], dim=1)


def generate(model, ids: torch.Tensor, **kwargs) -> torch.Tensor:
    """``model.generate`` with an explicit all-ones mask unless one is given: transformers would otherwise infer
    one from ``pad_token_id``, which random prompts may contain."""
    kwargs.setdefault("attention_mask", torch.ones_like(ids))
    return model.generate(ids, pad_token_id=0, **kwargs)


@torch.no_grad()
def iterated_argmax(model, ids: torch.Tensor, steps: int) -> torch.Tensor:
    for _ in range(steps):
        ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


@pytest.fixture(scope="module", params=[(kind, g) for kind in KINDS for g in GROUPS],
                ids=[f"{kind}-g{g}" for kind in KINDS for g in GROUPS])
def model(request) -> PalimpsaForCausalLM:
    kind, ngroups = request.param
    return make_model(KINDS[kind], ngroups)


# ----------------------------------------------------------------------------------------------------------------
# the test models are not trivial


@pytest.mark.parametrize("ngroups", GROUPS)
def test_palimpsa_layers_differ_visibly_from_mamba2(ngroups):
    """Otherwise every equality below would also hold for a cache that dropped the importance I."""
    model = make_model(KINDS["mixed"], ngroups)
    ids = random_ids(2, 40)
    logits = full_logits(model, ids)
    with model.beta_scaled(0.0):
        at_zero = full_logits(model, ids)
    assert max_diff(logits, at_zero) > 0.05 * logits.abs().max().item()
    assert logits.std() > 0.5


# ----------------------------------------------------------------------------------------------------------------
# the cache reproduces the full forward


def test_token_by_token_equals_full_forward(model):
    ids = random_ids(2, 40)
    full = full_logits(model, ids)
    cache = PalimpsaCache(model.config.n_layer)
    steps = stepwise_logits(model, ids, cache)
    assert steps.shape == full.shape
    assert max_diff(steps, full) <= 1e-4, max_diff(steps, full)
    assert cache.seen_tokens == 40
    assert cache.get_seq_length() == 40


def test_cache_entries_per_layer_kind(model):
    config = model.config
    batch = 3
    output = model(random_ids(batch, 20), use_cache=True)
    cache = cache_of(output)
    assert isinstance(cache, PalimpsaCache)
    conv_dim = config.ssm_dim + 2 * config.ngroups * config.d_state
    for i, layer in enumerate(model.backbone.layers):
        assert cache.conv[i].shape == (batch, config.d_conv - 1, conv_dim)
        memory, importance = cache.ssm[i]
        assert memory.shape == (batch, config.nheads, config.headdim, config.d_state)
        assert memory.dtype == torch.float32
        if isinstance(layer.mixer, PalimpsaMixer):
            assert i in config.upgraded_layers
            assert isinstance(importance, torch.Tensor)
            assert importance.shape == memory.shape
            assert importance.dtype == torch.float32
            # I relaxes towards the prior and grows with beta * k^2: it stays >= I_prior - rounding, and moved
            assert (importance >= config.importance_prior - 1e-5).all()
            assert (importance - config.importance_prior).abs().max() > 1e-3
        else:
            assert i not in config.upgraded_layers
            assert importance is None


def test_prefill_then_token_by_token(model):
    ids = random_ids(2, 40, seed=2)
    full = full_logits(model, ids)
    cache = PalimpsaCache(model.config.n_layer)
    with torch.no_grad():
        prefill = model(ids[:, :23], cache_params=cache).logits
    assert cache.seen_tokens == 23
    steps = stepwise_logits(model, ids[:, 23:], cache)
    assert max_diff(prefill, full[:, :23]) <= 1e-4
    assert max_diff(steps, full[:, 23:]) <= 1e-4, max_diff(steps, full[:, 23:])


@pytest.mark.parametrize("split", [1, 2, 17, 33])
def test_two_segments_carry_the_state(split):
    """A segment shorter than the convolution window (1, 2) and ones crossing the scan's chunks (17, 33)."""
    model = make_model(KINDS["mixed"], 2)
    ids = random_ids(2, 48, seed=3)
    full = full_logits(model, ids)
    output = model(ids[:, :split], use_cache=True)
    with torch.no_grad():
        second = model(ids[:, split:], cache_params=cache_of(output))
    assert cache_of(second) is cache_of(output)
    assert max_diff(output.logits, full[:, :split]) <= 1e-4
    assert max_diff(second.logits, full[:, split:]) <= 1e-4, max_diff(second.logits, full[:, split:])
    assert cache_of(output).seen_tokens == 48


def test_without_cache_nothing_is_returned(model):
    output = model(random_ids(1, 8))
    assert cache_of(output) is None


# ----------------------------------------------------------------------------------------------------------------
# generate()


def test_greedy_generate_equals_iterated_argmax(model):
    ids = random_ids(2, 12, seed=4)
    generated = generate(model, ids, max_new_tokens=8, do_sample=False)
    expected = iterated_argmax(model, ids, 8)
    assert generated.shape == (2, 20)
    assert torch.equal(generated, expected), (generated, expected)
    assert len(set(generated[:, 12:].flatten().tolist())) > 2  # the continuation is not a constant


def test_generate_feeds_only_the_new_token_after_the_prompt():
    """The prompt runs once (the scan), then each step runs one token against the cache: no recomputation."""
    model = make_model(KINDS["mixed"], 1)
    lengths = []
    handle = model.backbone.register_forward_pre_hook(lambda _module, args: lengths.append(args[0].shape[1]))
    try:
        generate(model, random_ids(2, 12, seed=5), max_new_tokens=6, do_sample=False)
    finally:
        handle.remove()
    assert lengths[0] == 12
    assert lengths[1:] == [1] * (len(lengths) - 1)
    assert len(lengths) in (5, 6)  # the last token may be produced without feeding it back


@pytest.mark.parametrize("ngroups", GROUPS)
def test_left_padded_batch_equals_prompts_alone(ngroups):
    model = make_model(KINDS["mixed"], ngroups)
    prompts = [random_ids(1, n, seed=10 + n)[0] for n in (13, 5, 9)]
    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt):] = prompt
        mask[row, width - len(prompt):] = 1

    padded_logits = full_logits(model, ids, attention_mask=mask)
    for row, prompt in enumerate(prompts):
        alone = full_logits(model, prompt[None])
        real = padded_logits[row : row + 1, width - len(prompt):]
        # float32 rounding of sums taken in another order (the padded rows sum over more, zeroed, positions): ~1e-5 on
        # logits of size ~3; a leak from the padding would show as 1e-2 and more
        assert max_diff(real, alone) <= 5e-5, (row, max_diff(real, alone))

    batch = generate(model, ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
    for row, prompt in enumerate(prompts):
        alone = generate(model, prompt[None], max_new_tokens=8, do_sample=False)
        assert torch.equal(batch[row, width:], alone[0, len(prompt):]), row
        assert torch.equal(alone, iterated_argmax(model, prompt[None], 8))


def test_left_padded_prefill_then_steps_equal_alone():
    """The padded rows' cache holds the same state as the unpadded prompt's: later steps agree too."""
    model = make_model(KINDS["palimpsa"], 2)
    short, long = random_ids(1, 6, seed=20)[0], random_ids(1, 14, seed=21)[0]
    ids = torch.stack([torch.cat([torch.zeros(8, dtype=torch.long), short]), long])
    mask = torch.stack([torch.cat([torch.zeros(8, dtype=torch.long), torch.ones(6, dtype=torch.long)]),
                        torch.ones(14, dtype=torch.long)])
    cache = PalimpsaCache(3)
    with torch.no_grad():
        model(ids, attention_mask=mask, cache_params=cache)
    follow = random_ids(2, 5, seed=22)
    steps = stepwise_logits(model, follow, cache)
    for row, prompt in enumerate((short, long)):
        expected = full_logits(model, torch.cat([prompt, follow[row]])[None])[:, len(prompt):]
        assert max_diff(steps[row : row + 1], expected) <= 1e-4


def test_sampling_runs_and_is_reproducible():
    model = make_model(KINDS["mixed"], 1)
    ids = random_ids(2, 10, seed=6)

    def sample(seed):
        torch.manual_seed(seed)
        return generate(model, ids, max_new_tokens=8, do_sample=True, top_k=5, temperature=1.5)

    first, again = sample(0), sample(0)
    assert first.shape == (2, 18)
    assert torch.equal(first, again)
    assert torch.equal(first[:, :10], ids)
    others = [sample(seed) for seed in (1, 2, 3)]
    assert any(not torch.equal(first, other) for other in others)
    # each sampled token is among the top 5 of the full forward's logits at its position
    for output in [first, *others]:
        logits = full_logits(model, output[:, :-1])[:, 9:]
        top5 = logits.topk(5, dim=-1).indices
        assert (top5 == output[:, 10:, None]).any(-1).all()


def test_reorder_cache_keeps_the_selected_rows():
    model = make_model(KINDS["mixed"], 2)
    ids = random_ids(3, 11, seed=7)
    cache = cache_of(model(ids, use_cache=True))
    before_conv = [c.clone() for c in cache.conv]
    before_ssm = [tuple(None if s is None else s.clone() for s in state) for state in cache.ssm]
    order = torch.tensor([2, 0, 2])
    cache.reorder_cache(order)
    for i in range(3):
        assert torch.equal(cache.conv[i], before_conv[i][order])
        for now, then in zip(cache.ssm[i], before_ssm[i]):
            assert (now is None) == (then is None)
            if now is not None:
                assert torch.equal(now, then[order])
    # and decoding continues from the kept rows
    follow = random_ids(3, 4, seed=8)
    steps = stepwise_logits(model, follow, cache)
    for row, source in enumerate(order.tolist()):
        expected = full_logits(model, torch.cat([ids[source], follow[row]])[None])[:, 11:]
        assert max_diff(steps[row : row + 1], expected) <= 1e-4


def test_beam_search_scores_match_the_full_forward():
    """Beam search reorders the cache every step; its scores must still be the full forward's log-probabilities."""
    model = make_model(KINDS["mixed"], 2)
    ids = random_ids(2, 10, seed=9)
    output = generate(model, ids, max_new_tokens=6, num_beams=3, do_sample=False, length_penalty=0.0,
                      output_scores=True, return_dict_in_generate=True)
    sequences = output.sequences
    assert sequences.shape == (2, 16)
    assert torch.equal(sequences[:, :10], ids)
    log_probs = torch.log_softmax(full_logits(model, sequences[:, :-1]), -1)[:, 9:]
    totals = log_probs.gather(-1, sequences[:, 10:, None]).sum((1, 2))
    assert max_diff(totals, output.sequences_scores) <= 1e-4


# ----------------------------------------------------------------------------------------------------------------
# generate-text


PROMPTS = ["Hello there", "A much longer prompt, so the first one is padded"]


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(args, cwd=cwd, capture_output=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def tiny_upgraded(tmp_path_factory) -> Path:
    """``upgrade-model upgrade/assets/tiny-mamba2 --layers 2 --output DIR``, through the same function: the embedded
    default model, as the README upgrades it and then generates with it."""
    output = tmp_path_factory.mktemp("generate") / "tiny-upgraded"
    upgrade_model(TINY, 2, output=output, beta_init=0.5, verify=False)
    return output


@pytest.fixture(scope="module")
def cli_runs(tiny_upgraded, tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    cwd = tmp_path_factory.mktemp("cli-cwd")
    prompt_args = [arg for prompt in PROMPTS for arg in ("--prompt", prompt)]
    planned = {
        "greedy": ["generate-text", str(tiny_upgraded), *prompt_args, "--max-new-tokens", "12"],
        "missing": ["generate-text", str(cwd / "no-such-model"), "--prompt", "hi"],
    }
    with ThreadPoolExecutor(len(planned)) as pool:
        futures = {name: pool.submit(run_cli, args, cwd) for name, args in planned.items()}
        return {name: future.result() for name, future in futures.items()}


def test_tiny_upgraded_is_the_embedded_default_model(tiny_upgraded):
    """The README's model: the embedded pretrained Mamba2 (5 layers, d_model 256, byte vocabulary 257 padded to
    272, end of text 256) with layers 1 and 3 upgraded (2 layers, even strategy)."""
    model = PalimpsaForCausalLM.from_pretrained(str(tiny_upgraded))
    config = model.config
    assert config.base_model == str(TINY)
    assert (config.n_layer, config.d_model, config.vocab_size, config.base_vocab_size) == (5, 256, 272, 257)
    assert config.eos_token_id == 256
    assert config.upgraded_layers == [1, 3]
    assert [i for i, layer in enumerate(model.backbone.layers) if isinstance(layer.mixer, PalimpsaMixer)] == [1, 3]


def test_generate_text_cli_greedy(cli_runs, tiny_upgraded):
    run = cli_runs["greedy"]
    stdout, stderr = run.stdout.decode(), run.stderr.decode()
    assert run.returncode == 0, stderr
    assert "Traceback" not in stdout + stderr
    completions = generate_text(tiny_upgraded, PROMPTS, max_new_tokens=12)
    assert len(completions) == 2
    assert all(completions), completions
    # each prompt and its completion after a header line (the completion may itself hold line breaks)
    assert stdout == "".join(f"--- completion {i} of 2 ---\n{prompt}{completion}\n"
                             for i, (prompt, completion) in enumerate(zip(PROMPTS, completions), 1))


def test_generate_text_batch_equals_prompts_alone(tiny_upgraded):
    together = generate_text(tiny_upgraded, PROMPTS, max_new_tokens=12)
    alone = [generate_text(tiny_upgraded, [prompt], max_new_tokens=12)[0] for prompt in PROMPTS]
    assert together == alone


def test_generate_text_sampling_is_seeded(tiny_upgraded):
    first = generate_text(tiny_upgraded, PROMPTS, max_new_tokens=10, temperature=1.0, top_k=20, seed=3)
    again = generate_text(tiny_upgraded, PROMPTS, max_new_tokens=10, temperature=1.0, top_k=20, seed=3)
    assert first == again


def test_generate_text_cli_missing_model(cli_runs):
    run = cli_runs["missing"]
    stdout, stderr = run.stdout.decode(), run.stderr.decode()
    assert run.returncode == 2
    assert "Traceback" not in stdout + stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("generate-text: error: "), stderr
    assert "no-such-model" in lines[0]
    assert stdout == ""
