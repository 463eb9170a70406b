"""AGENTS.md: short, tasks A/B/C, nothing privileged, and every command in it real."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentsec.reportfile import load_report
from tests.agentsec.reports import agentsec

ROOT = Path(__file__).parents[2]
TEXT = (ROOT / "AGENTS.md").read_text()
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


def _shell_block(heading: str) -> str:
    """The first bash block under `heading`, its continuation lines joined."""
    section = TEXT.split(heading, 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")


def test_step_0_and_task_a_run_as_written_on_this_python(tmp_path: Path):
    """AGENTS.md's install and Task A, run as an agent runs them, on the Python that runs this
    test (scripts/test.sh runs it on 3.9 and 3.11 as well as on the cage's own): a venv, `pip
    install .` from the checkout, then `agentsec probe`. pip reads the wheelhouse setup made
    (.wheels/3.X), not the network; the probe runs in a network namespace of its own."""
    if os.geteuid() != 0:
        pytest.skip("needs root (the probe runs in a network namespace of its own)")
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    house = ROOT / ".wheels" / version
    assert house.is_dir(), f"no {house}: run scripts/setup.sh"
    # "this checkout": its files as git sees them, without what git ignores (venvs, builds)
    checkout = tmp_path / "checkout"
    listed = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    files = subprocess.run(listed, cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, checkout / name)
    work = tmp_path / "work"
    work.mkdir()
    # The base interpreter, as `python3` is in the agent's sandbox (not this test's venv).
    python = getattr(sys, "_base_executable", sys.executable)
    env = {"PATH": f"{Path(python).parent}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path),
           "WORK": str(work), "LANG": "C.UTF-8", "PIP_NO_INDEX": "1",
           "PIP_FIND_LINKS": str(house), "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    step_0 = _shell_block("## Step 0").replace("WORK=$(mktemp -d)\n", "")
    step_0 = step_0.replace("python3 -m venv", f"{shlex.quote(python)} -m venv")
    task_a = _shell_block("## Task A")
    script = f"set -euo pipefail\n{step_0}\nunshare --net bash -c {shlex.quote(task_a)}\n"
    proc = subprocess.run(["bash", "-c", script], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert re.search(r"^agentsec, version \S+$", proc.stdout, re.M), proc.stdout[-500:]
    report = load_report(work / "reports" / "my-own-sandbox.json")
    assert report["probe"]["output"]["python"].startswith(f"{version}.")
    assert report["target"]["how"] == "<agent name, version, sandbox mode>"
    axes = report["summary"]["axes"]
    assert {"privilege", "network", "secrets", "filesystem"} <= set(axes)
    assert axes["network"]["state"] != "not_measured"  # measured, in a namespace with no link
    installed = subprocess.run([str(work / "venv" / "bin" / "pip"), "list", "--format=json"],
                               capture_output=True, text=True, env=env, check=True).stdout
    names = {p["name"].lower() for p in json.loads(installed)}
    if sys.version_info < (3, 12):  # measuring needs none of the cage's dependencies
        assert not names & {"pydantic", "cryptography", "publicsuffix2", "mitmproxy"}, names
