"""How a command that is stopped from outside ends: Ctrl-C exits 130, SIGTERM 143 (the shell's
128 + signal), with one line on stderr, once the command's cleanup (its `finally` blocks) ran.

SIGTERM is turned into `Terminated`, a KeyboardInterrupt, so that it unwinds through the same
cleanup as Ctrl-C; its own type keeps the two apart when the exit code is chosen. Small and
import-free: the lean exec path (lean.py) uses it too.
"""

from __future__ import annotations

import signal

EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command was, so that its cleanup runs."""


def raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


def on_sigterm() -> None:
    """From now on SIGTERM unwinds the command like Ctrl-C (see `Terminated`)."""
    signal.signal(signal.SIGTERM, raise_terminated)


def ending(interrupt: BaseException) -> tuple[str, int]:
    """What a command stopped by `interrupt` says, and its exit code."""
    if isinstance(interrupt, Terminated):
        return "terminated", EXIT_TERMINATED
    return "interrupted", EXIT_INTERRUPTED
