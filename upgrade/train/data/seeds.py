"""Counter-based seeds: every random choice of the data pipeline is a pure function of ``data.seed`` and a
counter, the same on every platform and Python version, so a stream resumes exactly from a saved position."""

from __future__ import annotations

_MASK = (1 << 64) - 1
EVAL, MIXTURE, EPOCH, SYNTHETIC, HF = 1, 2, 3, 4, 5  # stream tags: one independent stream of seeds per use


def _splitmix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def mix(*values: int) -> int:
    """A 64-bit seed from integers."""
    h = 0x243F6A8885A308D3
    for value in values:
        h = _splitmix(h ^ (value & _MASK))
    return h
