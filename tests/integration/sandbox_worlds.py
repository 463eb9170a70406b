"""What the sandboxes beyond bubblewrap need on this machine, made for a run and removed after it:
an overlay over the cached root directory (systemd-nspawn writes where it runs), systemd-nspawn's
own state directories, and an ordinary user with subordinate ids for rootless podman.

Rootless podman runs as a user this module creates (`useradd`, which gives a new user an
/etc/subuid and /etc/subgid range here, as Debian's adduser does for everyone), never as uid
1000: rootless podman with the user's own uid only (no range) cannot run the hardened preset's
`--user 65534:65534`, and giving uid 1000 a range would change, mid-run, what the rootless
cages of other test runs see for that uid. The user, its range, its home with podman's storage
and every process it ran are gone afterwards (`userdel` removes the range with the user).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.podman_world import PodmanWorld

# Where systemd-nspawn and runsc keep their state; empty once they exit, and here /run is no
# tmpfs, so the directories would stay.
RUNTIME_STATE = (Path("/run/systemd/nspawn"), Path("/run/systemd/nspawn-uid"), Path("/run/runsc"))
# Rootless podman's engine settings: runc and cgroupfs as for root (DESIGN.md); its network
# stays podman's rootless default, slirp4netns, which touches no firewall.
ROOTLESS_CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=10000:10000", "nproc=4096:4096"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


def _run(*argv: str, timeout: float = 120,
         cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=cwd)


@contextlib.contextmanager
def overlay_root(lower: Path) -> Iterator[Path]:
    """`lower` seen through an overlay whose writes land in a directory of this run's, removed
    with the mount: a container that writes its root leaves the shared tree as it was."""
    base = Path(tempfile.mkdtemp(prefix="agentsec-overlay-", dir="/var/tmp"))
    merged = base / "root"
    for name in ("upper", "work", "root"):
        (base / name).mkdir()
    options = f"lowerdir={lower},upperdir={base / 'upper'},workdir={base / 'work'}"
    try:
        proc = _run("mount", "-t", "overlay", "overlay", "-o", options, str(merged))
        if proc.returncode != 0:
            pytest.fail(f"overlay mount failed: {proc.stderr.strip()}")
        try:
            yield merged
        finally:
            _run("umount", str(merged))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def written_to(overlay: Path) -> list[str]:
    """What a run wrote through `overlay_root` (the overlay's upper directory, top level)."""
    return sorted(p.name for p in (overlay.parent / "upper").iterdir())


def in_namespace(netns: str) -> tuple[str, ...]:
    """A prefix that runs a command in the named network namespace with the namespace's own
    resolv.conf (/etc/netns/NAME, as `ip netns exec` binds it), in a mount namespace of its own,
    but with the host's /sys: `ip netns exec` remounts /sys, which hides the cgroup mounts
    systemd-nspawn and podman need."""
    resolv = f"/etc/netns/{netns}/resolv.conf"
    return ("nsenter", f"--net=/run/netns/{netns}", "unshare", "--mount", "--", "sh", "-c",
            'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"', "sh", resolv)


def _remove_empty_tree(root: Path) -> None:
    for directory in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
        with contextlib.suppress(OSError):
            directory.rmdir()
    with contextlib.suppress(OSError):
        root.rmdir()


@contextlib.contextmanager
def runtime_state_tidied() -> Iterator[None]:
    """The state directories systemd-nspawn (locks, propagation) and runsc leave in /run: those
    the runs made are removed once empty."""
    made = [path for path in RUNTIME_STATE if not path.exists()]
    try:
        yield
    finally:
        for path in made:
            _remove_empty_tree(path)


@dataclass(frozen=True)
class RootlessUser:
    name: str
    uid: int
    home: Path
    env: dict[str, str]  # what podman needs besides the user (given to agentsec as root)
    image: str

    @property
    def as_user(self) -> str:
        return str(self.uid)

    def run(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """A command as this user, with its home and podman settings."""
        prefix = ("setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                  "--inh-caps=-all", "env", f"HOME={self.home}", f"USER={self.name}",
                  *(f"{k}={v}" for k, v in self.env.items()))
        # in / : the checkout the tests run from may be closed to this user (CI's is 0700),
        # and podman refuses to start where it cannot enter its working directory
        return _run(*prefix, *argv, timeout=timeout, cwd="/")


def _subordinate_range(path: Path, name: str) -> str | None:
    for line in path.read_text().splitlines():
        if line.startswith(f"{name}:"):
            return line
    return None


def _end_processes_of(uid: int) -> None:
    """SIGKILL every process of `uid`: the user is this module's, so is each of them (podman's
    pause process, a conmon that outlived its container)."""
    for _ in range(50):
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if entry.stat().st_uid == uid:
                        pids.append(int(entry.name))
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


@contextlib.contextmanager
def rootless_user(world: PodmanWorld) -> Iterator[RootlessUser]:
    """A new ordinary user with a subordinate id range, the python image in its own podman
    storage (imported from the cached root directory), everything removed afterwards."""
    for tool in ("useradd", "userdel", "newuidmap", "slirp4netns", "setpriv"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} missing: scripts/setup.sh installs it")
    assert world.rootfs is not None
    name = f"agentsec-rl-{secrets.token_hex(3)}"
    base = Path(tempfile.mkdtemp(prefix="agentsec-rootless-", dir="/var/tmp"))
    base.chmod(0o755)
    home = base / "home"
    created = False
    try:
        proc = _run("useradd", "--user-group", "--no-create-home", "--home-dir", str(home),
                    "--shell", "/usr/sbin/nologin", "--comment", "agentsec rootless test", name)
        if proc.returncode != 0:
            pytest.fail(f"useradd failed: {proc.stderr.strip()}")
        created = True
        uid = pwd.getpwnam(name).pw_uid
        for ids in (Path("/etc/subuid"), Path("/etc/subgid")):
            if _subordinate_range(ids, name) is None:
                pytest.fail(f"useradd gave {name} no range in {ids}: rootless podman needs one")
        runtime_dir, conf = base / "run", base / "containers.conf"
        for directory in (home, runtime_dir):
            directory.mkdir(mode=0o700)
            os.chown(directory, uid, uid)
        conf.write_text(ROOTLESS_CONTAINERS_CONF)
        conf.chmod(0o644)
        user = RootlessUser(name=name, uid=uid, home=home, image=world.image,
                            env={"XDG_RUNTIME_DIR": str(runtime_dir),
                                 "CONTAINERS_CONF": str(conf)})
        tarball = base / "rootfs.tar"
        with tarfile.open(tarball, "w") as archive:
            archive.add(world.rootfs, arcname=".")
        tarball.chmod(0o644)
        proc = user.run("podman", "import", str(tarball), world.image)
        tarball.unlink()
        if proc.returncode != 0:
            pytest.fail(f"rootless podman import failed: {proc.stderr[-500:]}")
        yield user
    finally:
        if created:
            _end_processes_of(pwd.getpwnam(name).pw_uid)
            _run("userdel", name)
            for ids in (Path("/etc/subuid"), Path("/etc/subgid")):
                assert _subordinate_range(ids, name) is None, f"{name} left in {ids}"
        shutil.rmtree(base, ignore_errors=True)
