"""An interactive command's terminal: a pseudo-terminal of the cage's own, relayed to the user's.

The sandbox does not share the caller's terminal. A shell in it would make itself the
terminal's foreground process group, but the terminal's session lives in the host's PID
namespace: invisible from inside, so job control fails ("Cannot set tty process group") and a
shell exits 2 whatever its command did; and a process of the cage would be acting on a terminal
that a host session owns. Instead an interactive command gets a new pty. Inside the sandbox it
becomes the controlling terminal of a session of the cage's own (`setsid --ctty`, see
sandbox.py); here, bytes are copied between it and the user's terminal, which is put in raw mode
so that Ctrl-C, Ctrl-Z and the like reach the cage's foreground job as keystrokes, the window
size follows the user's, and the user's terminal is restored whatever happens.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import subprocess
import termios
import tty
from collections.abc import Iterator

_CHUNK = 65536


def _copy_window_size(source: int, target: int) -> None:
    with contextlib.suppress(OSError):
        size = fcntl.ioctl(source, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(target, termios.TIOCSWINSZ, size)


def open_pty(like: int) -> tuple[int, int]:
    """(master, slave) of a new pty, with the window size of the terminal on `like`."""
    master, slave = os.openpty()
    if os.isatty(like):
        _copy_window_size(like, slave)
    return master, slave


@contextlib.contextmanager
def raw_terminal(fd: int) -> Iterator[None]:
    """The user's terminal in raw mode for the duration, restored afterwards (also on error)."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd, termios.TCSANOW)  # not TCSAFLUSH: keep what the user typed ahead
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def relay(master: int, proc: subprocess.Popen, stdin: int = 0, stdout: int = 1) -> int:
    """Copy between the user's terminal and the cage's pty until the command is done; its exit
    status. The pty's master is closed here."""
    previous = signal.getsignal(signal.SIGWINCH)
    if os.isatty(stdin):
        signal.signal(signal.SIGWINCH, lambda *_: _copy_window_size(stdin, master))
    reading_stdin = True
    try:
        with raw_terminal(stdin):
            while True:
                watched = [master, stdin] if reading_stdin else [master]
                ready, _, _ = select.select(watched, [], [], 0.25)
                if master in ready:
                    try:
                        data = os.read(master, _CHUNK)
                    except OSError:  # EIO: every copy of the pty's other end is closed
                        data = b""
                    if not data:
                        break
                    _write_all(stdout, data)
                if stdin in ready:
                    data = os.read(stdin, _CHUNK)
                    if data:
                        _write_all(master, data)
                    else:  # the user's input ended: the cage's terminal sees end-of-file
                        reading_stdin = False
                        with contextlib.suppress(OSError):
                            _write_all(master, bytes([termios.tcgetattr(master)[6][termios.VEOF]]))
                if not ready and proc.poll() is not None:
                    break
    finally:
        signal.signal(signal.SIGWINCH, previous)
        os.close(master)
    return proc.wait()
