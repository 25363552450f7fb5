"""Reading a model's weights outside its forward under FSDP2 (``fully_shard``), as the trainer does under the
FSDP recipes: the importance inspection of every evaluation, and the LoRA-merged weights of every saved model.

FSDP gathers a unit's parameters only around that unit's forward and keeps ``DTensor`` shards otherwise. Found on
two H100s (2026-11-26, ``scripts/check_fsdp.sh``): the FSDP recipe's first evaluation stopped with "got mixed
torch.Tensor and DTensor", and once that was fixed its first checkpoint with ".numpy() is not supported for tensor
subclasses"; then on the CPU, greedy generation of a LoRA model (the evaluation's passkey probe) stopped as the
first did. Two gloo processes on the CPU shard the model the way accelerate's FSDP2 plugin does (every block, then
the root) and must get what the unsharded model gives.
"""

import io
import queue
import socket
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

fsdp = pytest.importorskip("torch.distributed.fsdp")
if not hasattr(fsdp, "fully_shard"):
    pytest.skip("this torch has no FSDP2 (fully_shard)", allow_module_level=True)

VOCAB = 264  # the byte-level tokenizer's 257 ids, padded
PROBE_IDS = torch.randint(0, VOCAB, (1, 48), generator=torch.Generator().manual_seed(1))
NEEDLE = (10, 14)


def _model():
    """A small upgraded model with LoRA on two projections, every new weight away from its zero start."""
    from palimpsa.upgrade import PalimpsaConfig, PalimpsaForCausalLM
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    config = PalimpsaConfig(d_model=64, n_layer=3, vocab_size=VOCAB, d_state=16, headdim=16, upgraded_layers=[0, 2],
                            beta_init=3.0)
    model = PalimpsaForCausalLM(config)
    with torch.no_grad():  # a gate that is not flat, so that every statistic depends on the weights
        for mixer in model.palimpsa_mixers():
            mixer.beta_up.weight.normal_(std=0.5)
    targets = [f"backbone.layers.{i}.mixer.{name}" for i in (0, 2) for name in ("in_proj", "out_proj")]
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=targets))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.1)
    return model


def _reports(model, tokenizer_dir: str) -> tuple[dict, dict, list[str]]:
    from palimpsa.upgrade.evaluate.evaluation import greedy_answers
    from palimpsa.upgrade.evaluate.importance import Probe, inspect_importance
    from palimpsa.upgrade.evaluate.tasks import passkey_samples
    from palimpsa.upgrade.train.trainable import merged_state_dict
    from transformers import AutoTokenizer

    report = inspect_importance(model, Probe(PROBE_IDS, NEEDLE, "random tokens"))
    weights = {name: tensor.cpu() for name, tensor in merged_state_dict(model).items()}
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    model.eval()
    answers = greedy_answers(model, tokenizer, passkey_samples(tokenizer, [96], [0.5], 3, seed=0), batch_size=2)
    return report, weights, answers


def _shard(model, layout: str):
    """FSDP2 units as accelerate's plugin makes them for a model with tied embeddings ("accelerate": every block,
    then the final norm with the embeddings and the head, kept gathered after the forward, then the root) or the
    plainest form ("blocks": every block, then the root), with float32 weights gathered as bf16 for the forward as
    under ``train.mixed_precision: bf16``."""
    policy = fsdp.MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    base = model.get_base_model()
    for block in base.backbone.layers:
        fsdp.fully_shard(block, mp_policy=policy)
    if layout == "accelerate":
        assert base.lm_head.weight is base.backbone.embedding.weight
        fsdp.fully_shard([base.backbone.norm_f, base.backbone.embedding, base.lm_head], mp_policy=policy,
                         reshard_after_forward=False)
    fsdp.fully_shard(model, mp_policy=policy)


def _worker(rank: int, port: int, tokenizer_dir: str, results):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        torch.set_num_threads(1)
        for layout in ("blocks", "accelerate"):
            model = _model()
            _shard(model, layout)
            report, weights, answers = _reports(model, tokenizer_dir)
            sharded_after = all(isinstance(p, torch.distributed.tensor.DTensor) for p in model.parameters())
            buffer = io.BytesIO()  # bytes, not tensors: torch's queue shares tensors through the sender, which exits
            torch.save(weights, buffer)
            results.put((rank, layout, report, buffer.getvalue(), answers, sharded_after))
    finally:
        dist.destroy_process_group()


def test_importance_generation_and_merged_weights_of_an_fsdp2_sharded_model_match_the_unsharded_one(tmp_path):
    from checkpoints import write_byte_tokenizer

    write_byte_tokenizer(tmp_path)
    reference, reference_weights, reference_answers = _reports(_model(), str(tmp_path))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    context = mp.get_context("spawn")
    results = context.Queue()
    processes = [context.Process(target=_worker, args=(rank, port, str(tmp_path), results)) for rank in range(2)]
    for process in processes:
        process.start()
    received, deadline = [], time.monotonic() + 300
    while len(received) < 2 * len(processes):
        try:
            received.append(results.get(timeout=2))
        except queue.Empty:
            failed = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
            assert not failed and time.monotonic() < deadline, f"a rank failed (exit codes {failed}) or timed out"
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    for rank, layout, report, weights, answers, sharded_after in received:
        where = f"rank {rank}, {layout} layout"
        weights = torch.load(io.BytesIO(weights))
        assert sharded_after, f"{where}: the parameters were left gathered"
        # the forward runs in bf16 under the policy: the greedy answers and the statistics to bf16's precision
        assert answers == reference_answers, where
        for got, want in zip(report["layers"], reference["layers"], strict=True):
            assert got["layer"] == want["layer"]
            for key, value in want["heads"].items():
                assert got["heads"][key] == pytest.approx(value, rel=2e-2, abs=1e-3), (where, got["layer"], key)
        # the saved weights are the float32 ones, the LoRA deltas built from the float32 shards
        assert weights.keys() == reference_weights.keys()
        assert not any("lora_" in name or "base_layer" in name for name in weights)
        for name, tensor in reference_weights.items():
            assert type(weights[name]) is torch.Tensor and weights[name].dtype == torch.float32, (where, name)
            torch.testing.assert_close(weights[name], tensor, rtol=1e-6, atol=1e-7, msg=f"{where}: {name}")
