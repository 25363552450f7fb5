"""The one exception type for a user's mistake: the CLI prints its message on one line and exits non-zero."""


class PalimpsaError(Exception):
    """A problem with what the user gave (a path, a checkpoint, an option), with the fix in its message."""
