"""Standalone modeling code: the model and the scan op bundled into two files that transformers loads with
``trust_remote_code=True`` on a machine where palimpsa is not installed.

The files are assembled from this package's own sources (one truth, no hand-kept copy): the kernel modules
(reference, chunked path, dispatch) and the model's modules (``MODEL_SOURCES``) are concatenated with their
intra-package imports removed; the config module is copied as it is (it imports nothing of the package).
"""

from __future__ import annotations

import re
from pathlib import Path

_UPGRADE = Path(__file__).resolve().parents[1]
_KERNELS = _UPGRADE.parent / "kernels"  # the repository's kernels/, or palimpsa/kernels/ once installed
# what the standalone model is made of, in order: the scan op, then the model with what it reads from the package
KERNEL_SOURCES = ("naive.py", "torch_chunk.py", "scan.py", "step.py")
MODEL_SOURCES = ("io/manifest.py", "model/cache.py", "model/modeling.py")
_INTERNAL_IMPORT = re.compile(r"^from (\.[\w.]*|palimpsa[\w.]*) import (\([^)]*\)|[^\n]*)\n", re.MULTILINE)

CONFIG_FILE = "configuration_palimpsa.py"
MODELING_FILE = "modeling_palimpsa.py"
AUTO_MAP = {"AutoConfig": "configuration_palimpsa.PalimpsaConfig",
            "AutoModelForCausalLM": "modeling_palimpsa.PalimpsaForCausalLM"}


def _body(source: str) -> str:
    """Drop the module docstring, ``from __future__`` and intra-package imports."""
    source = re.sub(r'^""".*?"""\n', "", source, count=1, flags=re.DOTALL)
    source = source.replace("from __future__ import annotations\n", "")
    return _INTERNAL_IMPORT.sub("", source)


def modeling_source() -> str:
    parts = [_body((_KERNELS / name).read_text()) for name in KERNEL_SOURCES]
    parts.append("\n\nclass PalimpsaError(Exception):\n    pass\n")
    parts += [_body((_UPGRADE / name).read_text()) for name in MODEL_SOURCES]
    header = ('"""Palimpsa model (standalone copy written by palimpsa\'s export-model --standalone).\n\n'
              'Load with AutoModelForCausalLM.from_pretrained(directory, trust_remote_code=True)."""\n\n'
              "from __future__ import annotations\n\nfrom .configuration_palimpsa import PalimpsaConfig\n")
    return header + "\n".join(parts)


def config_source() -> str:
    return (_UPGRADE / "model" / "configuration.py").read_text()


def standalone_code() -> dict[str, str]:
    """The two files, name -> text; whoever writes them adds ``AUTO_MAP`` to ``config.json``."""
    return {CONFIG_FILE: config_source(), MODELING_FILE: modeling_source()}
