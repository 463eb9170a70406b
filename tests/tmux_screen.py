"""A terminal a person sits at, played by tmux: a command runs in a pane, keys are sent to it
(`send-keys`), what the screen shows is read back (`capture-pane`). The tmux server runs
where `run` runs its commands (a fakenet.FakeHost), so the command under test is on that
machine, and is killed with it."""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path


class Screen:
    """One tmux session of 120x40 running `command` (a shell command line) in a pane that stays
    after the command ends, with `EXIT=<status>` shown then."""

    def __init__(self, run: Callable[..., subprocess.CompletedProcess[str]], socket: Path,
                 command: str, env: Mapping[str, str], cwd: Path):
        self._run, self.socket = run, socket
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        script = f"cd {shlex.quote(str(cwd))} && {exports} {command}; echo EXIT=$?"
        self._tmux("new-session", "-d", "-s", "s", "-x", "120", "-y", "40", "sh", "-c", script)
        self._tmux("set-option", "-t", "s", "remain-on-exit", "on")

    def _tmux(self, *args: str, stdin: str | None = None) -> str:
        r = self._run(["tmux", "-S", str(self.socket), *args], capture_output=True, text=True,
                      timeout=30, input=stdin)
        if r.returncode != 0:
            raise AssertionError(f"tmux {args[0]}: {r.stderr.strip()}")
        return r.stdout

    def text(self) -> str:
        """Everything the pane has shown (its history too), wrapped lines joined."""
        return self._tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "s")

    def wait_for(self, pattern: str, timeout: float = 90) -> re.Match[str]:
        """The first match of the regular expression `pattern` (multi-line) on the screen."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.text()
            found = re.search(pattern, shown, re.MULTILINE)
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} never showed; the screen:\n{shown[-3000:]}")
            time.sleep(0.25)

    def keys(self, *keys: str) -> None:
        """Keys by tmux's names (Enter, C-c, Up, ...)."""
        self._tmux("send-keys", "-t", "s", *keys)

    def type(self, text: str) -> None:
        """Text as typed, key by key."""
        self._tmux("send-keys", "-t", "s", "-l", text)

    def submit(self, text: str) -> None:
        """Type `text`, and once it shows, press Enter as a person does: a moment later (an
        Enter right behind the text reads to some TUIs, Codex's, as part of a paste)."""
        self.type(text)
        self.wait_for(re.escape(text), timeout=30)
        time.sleep(0.7)
        self.keys("Enter")

    def paste(self, text: str) -> None:
        """Text as typed, given to tmux on stdin: never on a command line."""
        self._tmux("load-buffer", "-b", "typed", "-", stdin=text)
        self._tmux("paste-buffer", "-d", "-b", "typed", "-t", "s")

    def exit_code(self, timeout: float = 60) -> int:
        return int(self.wait_for(r"^EXIT=(\d+)$", timeout).group(1))

    def close(self) -> None:
        self._run(["tmux", "-S", str(self.socket), "kill-server"], capture_output=True,
                  timeout=30)

