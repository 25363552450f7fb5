"""``python -m palimpsa COMMAND [ARGS]``: the ``palimpsa`` command (``palimpsa.upgrade.cli.palimpsa``)."""

from palimpsa.upgrade.cli.palimpsa import main

main()
