"""The ``databus`` command's entry point, kept free of heavy imports so that Ctrl-C at any moment, even while
the commands' modules (``cli.commands``) load, ends with one line and status 130, never a traceback."""

from __future__ import annotations

import signal
import sys

# Exit statuses: 2 for an error that fails the same way until its fix is applied; EX_TEMPFAIL (sysexits.h)
# for a transient one (a server down, a concurrent run's lock), so cron wrappers and schedulers retry only
# what running again may cure; 130 (128 + SIGINT) for Ctrl-C.
EXIT_TRANSIENT = 75
EXIT_INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    """``databus``: the command ``argv`` names, run by ``cli.commands``."""
    interrupted = False

    def on_sigint(signum: int, frame: object) -> None:
        nonlocal interrupted
        interrupted = True
        raise KeyboardInterrupt

    # Noted as well as raised: a library may turn the KeyboardInterrupt into an error of its own (pydantic-core,
    # interrupted while it builds a model's serializer, raises a SchemaError that only names it).
    signal.signal(signal.SIGINT, on_sigint)
    try:
        from dagster_databus.cli import commands

        return commands.main(argv)
    except BaseException as exc:
        if not (interrupted or isinstance(exc, KeyboardInterrupt)):
            raise
        # Ctrl-C: stop quietly; every checkpoint written so far is whole. A second Ctrl-C, from here to the
        # interpreter's exit, ends the process as SIGINT does, with no traceback.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
