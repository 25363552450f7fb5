"""One map of dtype names: what a user writes (``--dtype``, a recipe's ``model.dtype``, lm-eval's ``dtype=``), what
a safetensors header stores, and how reports and messages name a dtype."""

from __future__ import annotations

import torch

from ..errors import PalimpsaError

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
          "float64": torch.float64, "fp64": torch.float64, "double": torch.float64}
SAFETENSORS_CODES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                     torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
                     torch.bool: "BOOL"}
# what a model's weights may be stored as, by safetensors code
SAFETENSORS_FLOATS = {code: dtype for dtype, code in SAFETENSORS_CODES.items() if dtype.is_floating_point}


def parse_dtype(name: str | torch.dtype | None, option: str = "--dtype") -> torch.dtype | None:
    """``name`` (any spelling of ``DTYPES``, any case) as a torch dtype; None and dtypes pass through. Else
    PalimpsaError naming ``option``."""
    if name is None or isinstance(name, torch.dtype):
        return name
    if str(name).lower() not in DTYPES:
        raise PalimpsaError(f"{option} {name!r} is not one of {', '.join(DTYPES)}")
    return DTYPES[str(name).lower()]


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``: how reports, messages and config files name a dtype."""
    return str(dtype).removeprefix("torch.")
