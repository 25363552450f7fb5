import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():  # before any Triton kernel is defined: run them through the interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub is reachable here; tests never touch the network
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


def _patch_the_language_once_a_launch() -> None:
    """Triton's interpreter patches ``triton.language`` (an ``inspect.getmembers`` over four modules, ~0.25 ms) when a
    kernel launches, and again on every call of a ``@triton.jit`` helper inside it: our kernels call their helpers
    ~10^5 times a test, which was ~40% of the interpreter tests' time. Within a launch whose patches already cover the
    language modules a helper sees, the repeat is skipped; each launch's own patch (of its kernel's function) and
    its restore at the end, the first call of a helper that sees other modules (Triton's own ``tl.sum``,
    ``tl.cdiv``, whose patches the interpreter never restores), a helper that sees none (the interpreter's assertion)
    and anything outside a launch go as before. Where this Triton's interpreter has other internals, nothing
    changes."""
    try:
        import inspect

        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return
    patch_lang = getattr(interpreter, "_patch_lang", None)
    scope_type = getattr(interpreter, "_LangPatchScope", None)
    grid = getattr(interpreter, "GridExecutor", None)
    if patch_lang is None or scope_type is None or grid is None or getattr(patch_lang, "once_a_launch", False):
        return
    launches = []  # the running launch: [language modules patched in it, whether its own patch ran, its function]
    seen_by = {}  # function -> the language modules it sees

    def modules(fn) -> frozenset[int]:
        if fn not in seen_by:
            found = (m for m in fn.__globals__.values() if inspect.ismodule(m) and m in (tl, tl.core))
            seen_by[fn] = frozenset(id(m) for m in found)
        return seen_by[fn]

    def patch_once(fn):
        if launches:
            patched, own, kernel = launches[-1]
            if not own and fn is kernel:  # the launch's own patch, which it restores when it ends
                launches[-1][1] = True
            elif own and modules(fn) and modules(fn) <= patched:
                return scope_type()  # nothing left to patch (and nothing to restore)
            elif own:
                launches[-1][0] = patched | modules(fn)
        return patch_lang(fn)

    def launch(self, *args, **kwargs):
        launches.append([modules(self.fn), False, self.fn])
        try:
            return run(self, *args, **kwargs)
        finally:
            launches.pop()

    run = grid.__call__
    patch_once.once_a_launch = True
    interpreter._patch_lang = patch_once
    grid.__call__ = launch


if os.environ.get("TRITON_INTERPRET") == "1":
    _patch_the_language_once_a_launch()


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
