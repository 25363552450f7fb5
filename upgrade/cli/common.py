"""What every command line shares: the guard that turns a user mistake (PalimpsaError) into one line and exit status
2 and Ctrl-C or SIGTERM into exit status 130, and the parsing of numbers and lists of lengths (every number a user
gives goes through ``errors.checked_number``)."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable

from ..errors import MAX_SEED, Interrupted, PalimpsaError, checked_number

SEED = {"kind": int, "low": 0, "high": MAX_SEED}
MAX_TOKENS = 1 << 20  # a bound on any length a user asks for: beyond it a typo, not a plan


class DefaultsHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Epilogs as written, and each option's default after its help: ``(default: 512)``, unless the default is None
    or False (nothing to show) or the help text already states it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = not (action.default is None or action.default is False or action.default == []
                     or action.default == argparse.SUPPRESS)
        if action.option_strings and shown and "default" not in text:
            text += " (default: %(default)s)"
        return text


def add_number(parser, *flags: str, kind: type = float, low: float | None = None, high: float | None = None,
               low_open: bool = False, **options) -> None:
    """``parser.add_argument`` for a number: its text goes through :func:`checked_number`, so a wrong type, NaN,
    an infinity or a value out of range is refused in one line naming the option, before any work starts."""
    def convert(text: str) -> int | float:
        return checked_number(text, flags[0], kind, low=low, high=high, low_open=low_open)

    parser.add_argument(*flags, type=convert, **options)


def guarded(run: Callable[[list[str] | None], int], prog: str) -> Callable[[], None]:
    """Wrap a command: user mistakes (and files that cannot be read or written) print one line
    ``prog: error: message`` and exit 2; Ctrl-C and SIGTERM exit 130 saying what was written."""

    def main() -> None:
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            code = run(None)
        except (PalimpsaError, OSError) as error:
            _end_progress_bars()
            print(f"{prog}: error: " + " ".join(str(error).split()), file=sys.stderr)
            code = 2
        except KeyboardInterrupt as interrupt:
            _end_progress_bars()
            written = str(interrupt) if isinstance(interrupt, Interrupted) else "nothing was written"
            print(f"{prog}: interrupted; {written}", file=sys.stderr)
            code = 130
        finally:
            signal.signal(signal.SIGTERM, previous)
        sys.exit(code)

    return main


def _end_progress_bars() -> None:
    """Close the progress bars that an error left open: the message then starts a line of its own and stays the
    last line (an open bar would print itself again when collected)."""
    from tqdm import tqdm

    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


def _interrupt(signum, frame) -> None:
    """SIGTERM (``kill``, a scheduler's time limit) ends a run as Ctrl-C does: staging directories are removed on
    the way out, and the message says what was written. Only SIGKILL leaves them, for the next run to clean."""
    raise KeyboardInterrupt


def int_list(text: str, option: str) -> list[int]:
    """``"512,2k,8k"`` -> ``[512, 2048, 8192]``; every value an integer from 1 to MAX_TOKENS."""
    values = []
    for part in text.split(","):
        part = part.strip().lower()
        scale = 1024 if part.endswith("k") else 1
        try:
            number = float(part.removesuffix("k")) * scale
        except ValueError:
            raise PalimpsaError(f"{option}: cannot read {part!r} in {text!r}; write numbers like 512,2k,8k") from None
        values.append(checked_number(number, f"{option} value {part!r}", int, low=1, high=MAX_TOKENS))
    return values
