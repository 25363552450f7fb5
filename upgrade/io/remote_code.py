"""The model's code as files beside its weights, so that transformers loads a model directory with
``AutoModelForCausalLM.from_pretrained(directory, trust_remote_code=True)`` where palimpsa is not installed (a
model downloaded from the hub).

The files are assembled from this package's own sources (one truth, no hand-kept copy), read as text and never
imported here: the kernel modules (reference, chunked path, dispatch) and the model's modules (``MODEL_SOURCES``)
are concatenated with their intra-package imports removed; the config module is copied as it is (it imports
nothing of the package), and so is the Triton module (``TRITON_FILE``), which the dispatch imports by name on a
CUDA GPU where triton is installed: the copy then runs the Triton kernels as the package does, and the PyTorch
paths elsewhere. Every model directory the toolkit writes carries them, with ``AUTO_MAP`` in its ``config.json``.
"""

from __future__ import annotations

import re
from pathlib import Path

_UPGRADE = Path(__file__).resolve().parents[1]
_KERNELS = _UPGRADE.parent / "kernels"  # the repository's kernels/, or palimpsa/kernels/ once installed
# what the standalone model is made of, in order: the scan op, then the model with what it reads from the package
KERNEL_SOURCES = ("naive.py", "torch_chunk.py", "scan.py", "step.py", "gains.py", "readout.py", "conv.py", "norm.py")
MODEL_SOURCES = ("io/manifest.py", "model/cache.py", "model/modeling.py")
_INTERNAL_IMPORT = re.compile(r"^from (\.[\w.]*|palimpsa[\w.]*) import (\([^)]*\)|[^\n]*)\n", re.MULTILINE)

CONFIG_FILE = "configuration_palimpsa.py"
MODELING_FILE = "modeling_palimpsa.py"
TRITON_FILE = "fused_recurrent.py"  # its own name: the dispatch (kernels/scan.py) imports it by that name
# transformers copies (and downloads) the files a remote module names in `from .x import` lines, and never runs
# this one; the dispatch imports the module at run time, only on CUDA tensors
_TRITON_MARKER = f"""
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # names {TRITON_FILE} for transformers, which copies it beside this file
    from .{TRITON_FILE.removesuffix(".py")} import fused_recurrent_palimpsa_scan
"""
# transformers refuses a remote module whose imports name a package that is not installed, except imports inside
# a try block: the Triton module's go in one, so that a machine without triton loads the model from the hub
_TRITON_IMPORTS = re.compile(r"^import triton\nimport triton\.language as tl\n", re.MULTILINE)
_OPTIONAL_TRITON_IMPORTS = """try:  # optional for transformers' check of a remote module's imports
    import triton
    import triton.language as tl
except ImportError:  # no triton: the dispatch runs the PyTorch paths
    raise
"""
AUTO_MAP = {"AutoConfig": "configuration_palimpsa.PalimpsaConfig",
            "AutoModelForCausalLM": "modeling_palimpsa.PalimpsaForCausalLM"}

# What the standalone copy has in place of the package's names that its modules use.
_STAND_INS = '''

class PalimpsaError(Exception):
    pass


def write_remote_code(directory, config) -> None:
    """A standalone copy has no package sources to assemble: transformers saves its files itself."""
'''


def _body(source: str) -> str:
    """Drop the module docstring, ``from __future__`` and intra-package imports."""
    source = re.sub(r'^""".*?"""\n', "", source, count=1, flags=re.DOTALL)
    source = source.replace("from __future__ import annotations\n", "")
    return _INTERNAL_IMPORT.sub("", source)


def modeling_source() -> str:
    parts = [_body((_KERNELS / name).read_text()) for name in KERNEL_SOURCES]
    parts.append(_STAND_INS)
    parts += [_body((_UPGRADE / name).read_text()) for name in MODEL_SOURCES]
    header = ('"""Palimpsa model (standalone copy of the modeling code, written by palimpsa).\n\n'
              'Load with AutoModelForCausalLM.from_pretrained(directory, trust_remote_code=True)."""\n\n'
              "from __future__ import annotations\n\nfrom .configuration_palimpsa import PalimpsaConfig\n"
              + _TRITON_MARKER)
    return header + "\n".join(parts)


def triton_source() -> str:
    source = (_KERNELS / TRITON_FILE).read_text()
    if not _TRITON_IMPORTS.search(source):
        raise RuntimeError(f"{_KERNELS / TRITON_FILE} no longer imports triton as remote_code expects")
    return _TRITON_IMPORTS.sub(_OPTIONAL_TRITON_IMPORTS, source, count=1)


def config_source() -> str:
    return (_UPGRADE / "model" / "configuration.py").read_text()


def remote_code() -> dict[str, str]:
    """The files, name -> text; whoever writes them sets ``AUTO_MAP`` as the config's ``auto_map``."""
    return {CONFIG_FILE: config_source(), MODELING_FILE: modeling_source(), TRITON_FILE: triton_source()}


def write_remote_code(directory: Path, config) -> list[str]:
    """Write the files into ``directory`` and point ``config.auto_map`` at them; returns their names."""
    config.auto_map = dict(AUTO_MAP)
    files = remote_code()
    for name, text in files.items():
        (Path(directory) / name).write_text(text)
    return list(files)
