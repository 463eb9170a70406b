"""The agentcage CLI as a user runs it on their machine, with the machine played by a
fakenet.FakeHost (its own network, PID and mount namespaces; the real host is never involved)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.agentcage.conftest import make_project

AGENTCAGE = [sys.executable, "-m", "agentcage.cli"]


class OnHost:
    """`cli(*args)` runs `agentcage *args` on the fake host, with its state under `home`."""

    def __init__(self, host, home: Path):
        self.host, self.home = host, home

    @property
    def state(self) -> Path:
        return self.home / "state"

    def __call__(self, *args: str, timeout: float = 90, stdin: str | None = None,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        base = {"PATH": os.environ["PATH"], "AGENTCAGE_HOME": str(self.state),
                "LANG": "C.UTF-8", **(env or {})}
        return self.host.run([*AGENTCAGE, *args], env=base, capture_output=True, text=True,
                             timeout=timeout, cwd=self.home, input=stdin,
                             stdin=None if stdin is not None else subprocess.DEVNULL)

    def sh(self, script: str) -> subprocess.CompletedProcess[str]:
        return self.host.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)

    def names(self) -> list[str]:
        cages = self.state / "cages"
        return sorted(p.name for p in cages.iterdir()) if cages.exists() else []

    def destroy_all(self) -> None:
        for name in self.names():
            self("destroy", "-y", name)

    def create_from_scaffold(self, world, name: str, scaffold: str, *allow: str) -> Path:
        """The README's flow: init from the scaffold (used unedited), create in a project.
        The fake internet's private addresses and test CA are given on the command line."""
        project = make_project(self.home / "work" / name)
        r = self("init", name, "--scaffold", scaffold, "-o", f"{name}.yaml")
        assert r.returncode == 0, r.stderr
        r = self("cage", "create", "-c", f"{name}.yaml", "--project", str(project),
                 "--trust-network", "10.200.0.0/16", "--upstream-ca", str(world.ca_cert_path))
        assert r.returncode == 0, r.stderr
        if allow:
            assert self("domain", "add", name, *allow).returncode == 0
        return project
