"""How a command that is stopped from outside ends: Ctrl-C exits 130, SIGTERM 143 and SIGHUP
129 (the shell's 128 + signal), with one line on stderr, once the command's cleanup (its
`finally` blocks) ran.

SIGTERM is turned into `Terminated`, a KeyboardInterrupt, so that it unwinds through the same
cleanup as Ctrl-C; its own type keeps the two apart when the exit code is chosen. SIGHUP (the
terminal of a `run` closed) is `HungUp`, one of those: a closed window must not leave a cage
running. Small and import-free: the lean exec path (lean.py) uses it too.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # (typing.TYPE_CHECKING, without importing typing on this path)
if TYPE_CHECKING:  # checked against `signal`, whose functions and numbers these are
    import signal
else:
    # _signal: the signal module's C core, what `signal` wraps in enums whose import is a
    # tenth of what a served `exec` costs (the handlers and numbers are the same)
    import _signal as signal

EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143
EXIT_HUNG_UP = 128 + signal.SIGHUP  # 129


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command was, so that its cleanup runs."""


class LeftSession(KeyboardInterrupt):
    """The person left an interactive command with the escape (backends/terminal.py), which
    was stopped: it ends like Ctrl-C (130), whatever screen the command was stuck at."""


class HungUp(Terminated):
    """SIGHUP: the terminal went away."""


def raise_terminated(signum: int, frame: object) -> None:
    if signum == signal.SIGHUP:
        quiet_dead_terminal()
        raise HungUp
    raise Terminated


def quiet_dead_terminal() -> None:
    """stdout and stderr to /dev/null where they are a terminal that hung up: what is left to
    say cannot be shown, and a write there fails (EIO) in the middle of the cleanup."""
    for fd in (1, 2):
        try:
            if not stat.S_ISCHR(os.fstat(fd).st_mode) or os.isatty(fd):
                continue
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
        except OSError:
            continue


def on_sigterm() -> None:
    """From now on SIGTERM and SIGHUP unwind the command like Ctrl-C (see `Terminated`)."""
    signal.signal(signal.SIGTERM, raise_terminated)
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:  # nohup's choice stays
        signal.signal(signal.SIGHUP, raise_terminated)


def ending(interrupt: BaseException) -> tuple[str, int]:
    """What a command stopped by `interrupt` says, and its exit code."""
    if isinstance(interrupt, HungUp):
        return "hung up", EXIT_HUNG_UP
    if isinstance(interrupt, Terminated):
        return "terminated", EXIT_TERMINATED
    if isinstance(interrupt, LeftSession):
        return "left the session (Ctrl-] twice): the command was stopped", EXIT_INTERRUPTED
    return "interrupted", EXIT_INTERRUPTED
