"""Drive a command on a real pseudo-terminal, as a user at a keyboard would: keystrokes are
typed one batch at a time, each once the output has been quiet for a moment."""

from __future__ import annotations

import os
import pty
import select
import time
from collections.abc import Mapping, Sequence


def drive(argv: Sequence[str], keystrokes: Sequence[bytes | tuple[str, bytes]],
          env: Mapping[str, str], timeout: float = 60, quiet: float = 0.5,
          after: str | None = None) -> tuple[str, int]:
    """(everything the terminal showed, exit code). The command is killed at `timeout`.
    `after`: nothing is typed before the terminal has shown this text. A keystroke given as
    (text, keys) is typed once the terminal has shown `text` since the keystroke before: what
    a person waits to see (a busy machine makes any fixed pause too short)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, with the pty as its controlling terminal
        try:
            os.execvpe(argv[0], list(argv), dict(env))
        finally:
            os._exit(127)
    shown, typed = b"", 0
    mark = 0  # where the output since the last keystroke begins
    last_output = time.monotonic()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready:
                try:
                    data = os.read(fd, 65536)
                except OSError:  # EIO: the command closed its terminal
                    break
                if not data:
                    break
                shown += data
                last_output = time.monotonic()
            elif (typed < len(keystrokes) and time.monotonic() - last_output > quiet
                  and (after is None or after.encode() in shown)):
                key = keystrokes[typed]
                if isinstance(key, tuple):
                    wanted, key = key
                    if wanted.encode() not in shown[mark:]:
                        continue
                os.write(fd, key)
                typed += 1
                mark = len(shown)
                last_output = time.monotonic()
        else:
            os.kill(pid, 9)
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    return shown.decode(errors="replace"), os.waitstatus_to_exitcode(status)
