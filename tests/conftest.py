import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():  # before any Triton kernel is defined: run them through the interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub is reachable here; tests never touch the network
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    """The tests run tiny models: intra-op threads only add overhead, and spin badly on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def tiny_random(tmp_path_factory) -> Path:
    """The random tiny test model (mamba_ssm format, byte-level tokenizer), written once per session."""
    from checkpoints import TINY_RANDOM_NAME, write_tiny_random_mamba2

    return write_tiny_random_mamba2(tmp_path_factory.mktemp("tiny-random") / TINY_RANDOM_NAME)
