"""The agentcage CLI as a user runs it on their machine, with the machine played by a
fakenet.FakeHost (its own network, PID and mount namespaces; the real host is never involved)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.agentcage.conftest import make_project

AGENTCAGE = [sys.executable, "-m", "agentcage.cli"]


class OnHost:
    """`cli(*args)` runs `agentcage *args` on the fake host, with its state under `home`."""

    ca_path: Path | None = None  # the test CA where the CLI's user reads it (None: the world's)

    def __init__(self, host, home: Path):
        self.host, self.home = host, home

    @property
    def as_user(self) -> list[str]:
        """What runs a command as the CLI's user: nothing, for root."""
        return []

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
        ca = self.ca_path or world.ca_cert_path
        r = self("cage", "create", "-c", f"{name}.yaml", "--project", str(project),
                 "--trust-network", "10.200.0.0/16", "--upstream-ca", str(ca))
        assert r.returncode == 0, r.stderr
        if allow:
            assert self("domain", "add", name, *allow).returncode == 0
        return project


REPO = Path(__file__).resolve().parents[2]


def open_to_users(host, paths: tuple[str, ...] = ()) -> None:
    """This interpreter and this checkout, readable by every user of the fake host."""
    host.open_to_users([sys.base_prefix, sys.prefix, REPO, *paths])


class AsUser(OnHost):
    """`cli(*args)` runs `agentcage *args` on the fake host as an ordinary user (`uid`, no
    supplementary group, no capability), with HOME and the state under `home` (theirs)."""

    def __init__(self, host, home: Path, uid: int, world=None, gid: int | None = None):
        super().__init__(host, home)
        self.uid = uid
        self.gid = uid if gid is None else gid
        os.chown(home, uid, self.gid)
        self.ca_path: Path | None = None
        if world is not None:  # the test CA, where the user can read it
            self.ca_path = home / "fake-internet-ca.pem"
            self.ca_path.write_bytes(world.ca_cert_path.read_bytes())
            os.chmod(self.ca_path, 0o644)

    @property
    def as_user(self) -> list[str]:
        """What runs a command as the user: their uid and gid, no other group."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--"]

    def __call__(self, *args: str, timeout: float = 90, stdin: str | None = None,
                 env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        base = {"PATH": os.environ["PATH"], "AGENTCAGE_HOME": str(self.state),
                "HOME": str(self.home), "LANG": "C.UTF-8", **(env or {})}
        return self.host.run([*self.as_user, *AGENTCAGE, *args], env=base, capture_output=True,
                             text=True, timeout=timeout, cwd=self.home, input=stdin,
                             stdin=None if stdin is not None else subprocess.DEVNULL)


@contextlib.contextmanager
def delegated_cgroups(uid: int) -> Iterator[list[Path]]:
    """A cgroup given to a user by root, once, as a rootless cage's refusal says: the parent
    of their cages' cgroups in each hierarchy, theirs. Removed afterwards with what is left
    in it."""
    from agentcage.backends.cgroups import detect

    layout = detect()
    parents = [p.with_name(f"agentcage-{uid}") for p in layout.parents(rootless_cages=False)]
    if layout.version == 2:
        assert layout.v2 is not None
        (layout.v2 / "cgroup.subtree_control").write_text("+memory +pids +cpu")
    try:
        for parent in parents:
            parent.mkdir(exist_ok=True)
            for path in (parent, *parent.iterdir()):
                os.chown(path, uid, uid)
        yield parents
    finally:
        for parent in parents:
            deadline = time.monotonic() + 10
            while parent.exists() and time.monotonic() < deadline:
                for child in [c for c in parent.iterdir() if c.is_dir()]:
                    with contextlib.suppress(OSError):
                        child.rmdir()
                with contextlib.suppress(OSError):
                    parent.rmdir()
                time.sleep(0.1)
            assert not parent.exists(), f"{parent} is left behind"
