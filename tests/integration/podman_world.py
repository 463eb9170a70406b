"""Rootful podman as this machine allows it (DESIGN.md): runc, bounded ulimits, no bridge network.

Everything podman keeps lives under one cache directory with its own containers.conf and
storage.conf, handed to podman through CONTAINERS_CONF / CONTAINERS_STORAGE_CONF, so the host's
own podman configuration and storage are never touched. The default network is "none": podman's
bridge would rewrite the host firewall, so a test that wants a network names a namespace of the
fake internet with --network ns:/run/netns/NAME.

The test image is a Debian minbase root filesystem with python3 made by debootstrap (about a
minute, once per machine), imported with `podman import`; no registry is needed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("AGENTSEC_TEST_CACHE", "/var/cache/agentsec-tests"))
IMAGE = "localhost/agentsec-python:bookworm"
NO_PYTHON_IMAGE = "localhost/agentsec-nopython:test"
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


def _debootstrap(rootfs: Path) -> None:
    staging = rootfs.with_name(rootfs.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    proc = subprocess.run(
        ["debootstrap", "--variant=minbase", "--include=python3", "bookworm", str(staging), MIRROR],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        pytest.fail(f"debootstrap failed: {proc.stdout[-500:]} {proc.stderr[-500:]}")
    staging.rename(rootfs)  # only a complete root filesystem ever has the final name


def _import(world: PodmanWorld, directory: Path, image: str) -> None:
    tarball = directory.with_suffix(".tar")
    with tarfile.open(tarball, "w") as archive:
        archive.add(directory, arcname=".")
    proc = world.podman("import", str(tarball), image, timeout=300)
    tarball.unlink()
    if proc.returncode != 0:
        pytest.fail(f"podman import failed: {proc.stderr[-500:]}")


def build_world() -> PodmanWorld:
    _require("podman", "runc", "debootstrap")
    conf_dir = CACHE / "podman"
    conf_dir.mkdir(parents=True, exist_ok=True)
    containers_conf = conf_dir / "containers.conf"
    containers_conf.write_text(CONTAINERS_CONF)
    storage_conf = conf_dir / "storage.conf"
    storage_conf.write_text(
        f'[storage]\ndriver = "overlay"\ngraphroot = "{conf_dir / "storage"}"\n'
        f'runroot = "{conf_dir / "run"}"\n'
    )
    world = PodmanWorld(
        env={"CONTAINERS_CONF": str(containers_conf), "CONTAINERS_STORAGE_CONF": str(storage_conf)},
        image=IMAGE,
        no_python_image=NO_PYTHON_IMAGE,
    )
    if not _image_exists(world, IMAGE):
        rootfs = CACHE / "rootfs-bookworm-python3"
        if not rootfs.exists():
            _debootstrap(rootfs)
        _import(world, rootfs, IMAGE)
    if not _image_exists(world, NO_PYTHON_IMAGE):
        bare = CACHE / "rootfs-bare"
        (bare / "etc").mkdir(parents=True, exist_ok=True)
        (bare / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/false\n")
        _import(world, bare, NO_PYTHON_IMAGE)
    return world
