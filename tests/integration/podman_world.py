"""Rootful podman as this machine allows it (DESIGN.md): runc, bounded ulimits, no bridge network.

Everything podman keeps lives under one cache directory with its own containers.conf and
storage.conf, handed to podman through CONTAINERS_CONF / CONTAINERS_STORAGE_CONF, so the host's
own podman configuration and storage are never touched. The default network is "none": podman's
bridge would rewrite the host firewall, so a test that wants a network names a namespace of the
fake internet with --network ns:/run/netns/NAME.

The test images are a Debian minbase root filesystem with python3 made by debootstrap (about a
minute, once per machine) and a busybox one from Debian's busybox-static (under the name the
busybox scaffold gives it), imported with `podman import`; no registry is needed. The cache is
shared by every test run on the machine, and locked (see `podman_world`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("AGENTSEC_TEST_CACHE", "/var/cache/agentsec-tests"))
IMAGE = "localhost/agentsec-python:bookworm"
NO_PYTHON_IMAGE = "localhost/agentsec-nopython:test"
# Under the name the busybox scaffold gives it: Debian's static busybox and its applets.
BUSYBOX_IMAGE = "docker.io/library/busybox:latest"
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static (scripts/setup.sh installs it)
# The root directories the images are made from, in the cache (a rootless user's podman
# imports them again into a storage of its own: tests/agentcage/rootless_podman.py)
PYTHON_ROOTFS = "rootfs-bookworm-python3"
BUSYBOX_ROOTFS = "rootfs-busybox"
MIRROR = os.environ.get("AGENTSEC_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")

CONTAINERS_CONF = """\
[containers]
netns = "none"
default_ulimits = ["nofile=10000:10000", "nproc=4096:4096"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


@dataclass(frozen=True)
class PodmanWorld:
    env: dict[str, str]
    image: str
    no_python_image: str
    busybox_image: str = BUSYBOX_IMAGE
    # The directory the python image was imported from: a root directory for systemd-nspawn
    # (read it only, or through an overlay: other runs share it).
    rootfs: Path | None = None

    def podman(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman", *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _require(*binaries: str) -> None:
    missing = [b for b in binaries if shutil.which(b) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: scripts/setup.sh installs them")


def _image_exists(world: PodmanWorld, image: str) -> bool:
    return world.podman("image", "exists", image).returncode == 0


# ---- the machine-wide cache, shared by every test run on this machine ---------------------------
#
# Two runs at once (two checkouts, two helpers) must not break each other. Builders take the
# cache's lock exclusively; a run that uses the world holds it shared for as long as it does, so no
# builder changes what it is using. Trees are built under a name of their own and renamed into
# place whole, so a reader never sees a half-built one, and a builder killed half-way leaves only
# a scratch directory the next builder removes.

LOCK_NAME = ".lock"
SCRATCH_PREFIX = ".building-"


@contextlib.contextmanager
def cache_lock(cache: Path, exclusive: bool) -> Iterator[int]:
    cache.mkdir(parents=True, exist_ok=True)
    fd = os.open(cache / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield fd
    finally:
        os.close(fd)  # releases the lock


def cached_tree(cache: Path, name: str, build: Callable[[Path], None]) -> Path:
    """``cache/name``, built by ``build(directory)`` if missing. Call with the lock held
    exclusively: the tree appears whole or not at all."""
    final = cache / name
    if final.exists():
        return final
    for stale in cache.glob(f"{SCRATCH_PREFIX}{name}.*"):  # a builder killed half-way
        shutil.rmtree(stale, ignore_errors=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{name}.", dir=cache))
    try:
        build(scratch / "tree")
        (scratch / "tree").rename(final)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return final


def _write_if_changed(path: Path, text: str) -> None:
    """Rewritten only when it differs, and then by rename: a podman of another run may be
    reading it."""
    if path.exists() and path.read_text() == text:
        return
    tmp = path.with_name(f"{SCRATCH_PREFIX}{path.name}.{os.getpid()}")
    tmp.write_text(text)
    tmp.rename(path)


def _debootstrap(target: Path) -> None:
    proc = subprocess.run(
        ["debootstrap", "--variant=minbase", "--include=python3", "bookworm", str(target), MIRROR],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        pytest.fail(f"debootstrap failed: {proc.stdout[-500:]} {proc.stderr[-500:]}")


def _bare_rootfs(target: Path) -> None:
    (target / "etc").mkdir(parents=True)
    (target / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/false\n")


def _busybox_rootfs(target: Path) -> None:
    for directory in ("bin", "etc", "tmp", "proc", "dev", "root", "home", "run", "var/tmp"):
        (target / directory).mkdir(parents=True)
    shutil.copy2(BUSYBOX, target / "bin" / "busybox")
    applets = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True,
                             check=True).stdout.split()
    for applet in applets:
        if applet != "busybox":
            (target / "bin" / applet).symlink_to("busybox")
    (target / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")


def import_tree(world: PodmanWorld, directory: Path, image: str) -> None:
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, dir=directory.parent) as scratch:
        tarball = Path(scratch) / "rootfs.tar"
        with tarfile.open(tarball, "w") as archive:
            archive.add(directory, arcname=".")
        proc = world.podman("import", str(tarball), image, timeout=300)
    if proc.returncode != 0:
        pytest.fail(f"podman import failed: {proc.stderr[-500:]}")


def _world(cache: Path) -> tuple[PodmanWorld, dict[Path, str]]:
    conf_dir = cache / "podman"
    containers_conf, storage_conf = conf_dir / "containers.conf", conf_dir / "storage.conf"
    files = {
        containers_conf: CONTAINERS_CONF,
        storage_conf: f'[storage]\ndriver = "overlay"\ngraphroot = "{conf_dir / "storage"}"\n'
        f'runroot = "{conf_dir / "run"}"\n',
    }
    world = PodmanWorld(
        env={"CONTAINERS_CONF": str(containers_conf), "CONTAINERS_STORAGE_CONF": str(storage_conf)},
        image=IMAGE,
        no_python_image=NO_PYTHON_IMAGE,
        rootfs=cache / PYTHON_ROOTFS,
    )
    return world, files


def _complete(world: PodmanWorld, files: dict[Path, str]) -> bool:
    return (
        all(path.exists() and path.read_text() == text for path, text in files.items())
        and _image_exists(world, IMAGE)
        and _image_exists(world, NO_PYTHON_IMAGE)
        and _image_exists(world, BUSYBOX_IMAGE)
        and world.rootfs is not None and (world.rootfs / "usr" / "bin" / "python3").exists()
    )


def _build(cache: Path, world: PodmanWorld, files: dict[Path, str]) -> None:
    # The lock is held exclusively: any scratch left here is a dead builder's.
    for stale in [*cache.glob(f"{SCRATCH_PREFIX}*"), *cache.glob(f"*/{SCRATCH_PREFIX}*")]:
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_if_changed(path, text)
    python_tree = cached_tree(cache, PYTHON_ROOTFS, _debootstrap)  # nspawn's root too
    if not _image_exists(world, IMAGE):
        import_tree(world, python_tree, IMAGE)
    if not _image_exists(world, NO_PYTHON_IMAGE):
        import_tree(world, cached_tree(cache, "rootfs-bare", _bare_rootfs), NO_PYTHON_IMAGE)
    if not _image_exists(world, BUSYBOX_IMAGE):
        import_tree(world, cached_tree(cache, BUSYBOX_ROOTFS, _busybox_rootfs), BUSYBOX_IMAGE)


@contextlib.contextmanager
def podman_world(cache: Path = CACHE) -> Iterator[PodmanWorld]:
    """The world, built if needed, and held (the cache locked shared) while it is in use."""
    _require("podman", "runc", "debootstrap", str(BUSYBOX))
    world, files = _world(cache)
    with cache_lock(cache, exclusive=False) as fd:
        if not _complete(world, files):
            # flock cannot upgrade in place: let go, build alone, then share again.
            fcntl.flock(fd, fcntl.LOCK_UN)
            fcntl.flock(fd, fcntl.LOCK_EX)
            _build(cache, world, files)
            fcntl.flock(fd, fcntl.LOCK_SH)
        yield world
