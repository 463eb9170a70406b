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

With every key going to the cage, a command stuck at a screen that ignores Ctrl-C (a login
dialog) could not be left. Ctrl-] twice in a row is the way out, as telnet's and virsh's
console escape is Ctrl-]: both still reach the command, and then the relay stops it, resets
the modes a full-screen program leaves on (alternate screen, hidden cursor, mouse, pasting
and keyboard modes) and raises `LeftSession` (exit 130).
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

from agentcage.interrupts import HungUp, LeftSession, quiet_dead_terminal

_CHUNK = 65536
ESCAPE = 0x1D  # Ctrl-]
ESCAPES_TO_LEAVE = 2
# Leave the alternate screen, show the cursor, stop mouse reports, bracketed paste, xterm's
# modifyOtherKeys and the kitty keyboard protocol.
_RESET_MODES = (b"\x1b[?1049l\x1b[?25h\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l"
                b"\x1b[?2004l\x1b[>4;0m\x1b[<u\r\n")


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
        with contextlib.suppress(termios.error, OSError):  # a terminal that hung up is gone
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
    on_terminal = os.isatty(stdin)  # asked now: a terminal that hung up is no tty any more
    if on_terminal:
        signal.signal(signal.SIGWINCH, lambda *_: _copy_window_size(stdin, master))
    reading_stdin = True
    escapes = 0  # Ctrl-] typed in a row
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
                    try:
                        _write_all(stdout, data)
                    except OSError:  # the user's terminal is gone (it hung up)
                        raise _hung_up(proc) from None
                if stdin in ready:
                    try:
                        data = os.read(stdin, _CHUNK)
                    except OSError:  # EIO: the user's terminal hung up
                        raise _hung_up(proc) from None
                    if data:
                        _write_all(master, data)
                        for byte in data:
                            escapes = escapes + 1 if byte == ESCAPE else 0
                            if escapes >= ESCAPES_TO_LEAVE:
                                _leave(proc, stdout)
                    elif on_terminal:  # a terminal in raw mode reads nothing: it hung up
                        raise _hung_up(proc)
                    else:  # the user's input ended: the cage's terminal sees end-of-file
                        reading_stdin = False
                        with contextlib.suppress(OSError):
                            eof = termios.tcgetattr(master)[6][termios.VEOF]
                            _write_all(master, eof if isinstance(eof, bytes) else bytes([eof]))
                if not ready and proc.poll() is not None:
                    break
    finally:
        signal.signal(signal.SIGWINCH, previous)
        os.close(master)
    return proc.wait()


def _stop(proc: subprocess.Popen) -> None:
    """Stop the command; its sandbox's processes go with it."""
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait()


def _hung_up(proc: subprocess.Popen) -> HungUp:
    _stop(proc)
    quiet_dead_terminal()
    return HungUp()


def _leave(proc: subprocess.Popen, stdout: int) -> None:
    """Stop the command and give the screen back."""
    _stop(proc)
    with contextlib.suppress(OSError):
        _write_all(stdout, _RESET_MODES)
    raise LeftSession
