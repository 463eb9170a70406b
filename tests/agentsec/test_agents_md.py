"""AGENTS.md: short, tasks A/B/C, nothing privileged, and every command in it real."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.agentsec.reports import agentsec

TEXT = (Path(__file__).parents[2] / "AGENTS.md").read_text()
GROUPS = {"blast-radius"}


def _commands() -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", TEXT, re.S)
    joined = "\n".join(blocks).replace("\\\n", " ")
    commands = []
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("agentsec "):
            commands.append(shlex.split(line.replace('"', "")))
    return commands


def test_short_with_three_tasks():
    assert len(TEXT.splitlines()) < 100
    for task in ("## Task A", "## Task B", "## Task C"):
        assert task in TEXT
    assert "no authority" in TEXT


def test_nothing_privileged():
    code = "\n".join(re.findall(r"```(?:bash|yaml)\n(.*?)```", TEXT, re.S))
    for word in ("sudo", "su -", "--privileged", "setcap", "chmod", "chown", "sysctl",
                 "systemctl", "apt-get", "curl", "wget"):
        assert word not in code, word


def test_every_command_and_option_exists():
    commands = _commands()
    assert len(commands) >= 6
    for words in commands:
        path = words[1:2] + (words[2:3] if words[1] in GROUPS else [])
        options = []
        for word in words[1 + len(path):]:
            if word == "--":
                break  # what follows goes to the launcher
            if word.startswith("--"):
                options.append(word.split("=")[0])
        help_text = agentsec(*path, "--help")
        assert help_text.returncode == 0, (path, help_text.stderr)
        for option in options:
            assert option in help_text.stdout, (path, option)
