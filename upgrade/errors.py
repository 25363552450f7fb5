"""The one exception type for a user's mistake (the CLI prints its message on one line and exits non-zero), and the
one check that every number a user gives goes through: command-line options, lm-eval model arguments and the fields
of a config.json."""

from __future__ import annotations

import math

MAX_SEED = 2**32 - 1  # numpy's seeds are 32-bit, and accelerate seeds numpy too


class PalimpsaError(Exception):
    """A problem with what the user gave (a path, a checkpoint, an option), with the fix in its message."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) caught by a command that knows what it had written; the message says what and how to go on.
    A KeyboardInterrupt, so that every ``finally`` and staging-directory cleanup runs on the way out."""


def checked_number(value, name: str, kind: type = float, *, low: float | None = None, high: float | None = None,
                   low_open: bool = False) -> int | float:
    """``value`` (a number, or the text of one) as a finite ``kind`` in ``[low, high]`` (``(low, high]`` with
    ``low_open``); else PalimpsaError saying what ``name`` must be.

    NaN and infinities are refused outright: every comparison with NaN is false, so a range check alone lets it
    through. An integer may be written as an integral float (``1e6``); booleans are not numbers here.
    """
    problem = PalimpsaError(f"{name} must be {_describe(kind, low, high, low_open)}, got {repr(value)[:60]}")
    try:
        if isinstance(value, bool):
            raise ValueError
        if kind is int and isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            number = int(value)  # exactly: a float would round a long integer
        elif kind is int:
            number = float(value) if isinstance(value, str) else value
            if isinstance(number, float):
                if not number.is_integer():
                    raise ValueError
                number = int(number)
            number = number.__index__()
        else:
            number = float(value)
    except (TypeError, ValueError, OverflowError, AttributeError):
        raise problem from None
    if not ((kind is int or math.isfinite(number)) and (low is None or (number > low if low_open else number >= low))
            and (high is None or number <= high)):
        raise problem
    return number


def _describe(kind: type, low, high, low_open: bool) -> str:
    noun = "an integer" if kind is int else "a finite number"
    if low is not None and high is not None:
        return f"{noun} in {'(' if low_open else '['}{low:g}, {high:g}]" if kind is float else \
            f"{noun} from {low} to {high}"
    if low is not None:
        return f"{noun} {'>' if low_open else '>='} {low:g}"
    if high is not None:
        return f"{noun} <= {high:g}"
    return noun
