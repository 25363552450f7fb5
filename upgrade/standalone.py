"""Standalone modeling code: the model and the scan op bundled into two files that transformers loads with
``trust_remote_code=True`` on a machine where palimpsa is not installed.

The files are assembled from this package's own sources (one truth, no hand-kept copy): the kernel modules
(reference, chunked path, dispatch) and the modeling module are concatenated with their intra-package imports
removed; the config module is copied as it is.
"""

from __future__ import annotations

import re
from pathlib import Path

_UPGRADE = Path(__file__).resolve().parent
_KERNELS = _UPGRADE.parent / "kernels"  # the repository's kernels/, or palimpsa/kernels/ once installed
_INTERNAL_IMPORT = re.compile(r"^from (\.\w*|palimpsa[\w.]*) import (\([^)]*\)|[^\n]*)\n", re.MULTILINE)

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
    parts = [_body((_KERNELS / name).read_text()) for name in ("naive.py", "torch_chunk.py", "scan.py", "step.py")]
    parts.append("\n\nclass PalimpsaError(Exception):\n    pass\n")
    parts.append(_body((_UPGRADE / "integrity.py").read_text()))
    parts.append(_body((_UPGRADE / "modeling.py").read_text()))
    header = ('"""Palimpsa model (standalone copy written by palimpsa\'s export-model --standalone).\n\n'
              'Load with AutoModelForCausalLM.from_pretrained(directory, trust_remote_code=True)."""\n\n'
              "from __future__ import annotations\n\nfrom .configuration_palimpsa import PalimpsaConfig\n")
    return header + "\n".join(parts)


def config_source() -> str:
    return (_UPGRADE / "configuration.py").read_text()


def standalone_code() -> dict[str, str]:
    """The two files, name -> text; whoever writes them adds ``AUTO_MAP`` to ``config.json``."""
    return {CONFIG_FILE: config_source(), MODELING_FILE: modeling_source()}
