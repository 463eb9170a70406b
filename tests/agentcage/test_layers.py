"""A cage's layer from hostile images: unpacking confined to the layer (unpack.py), and the
cage's mount points made in it without following a link out of it (layers.py). Real files,
a real chroot (root only), no podman: the tar streams are made here."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from agentcage.backends import layers
from agentcage.errors import BackendError
from tests.agentcage.conftest import needs_root

OWNER = (1000, 1000)


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, link: str = "",
            uid: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname, info.uid, info.gid = kind, mode, link, uid, uid
    return info


def _unpack(root: Path, archive: bytes) -> dict:
    proc = subprocess.run([sys.executable, "-m", "agentcage.backends.unpack", str(root),
                           *map(str, OWNER)], input=archive, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.decode().splitlines()[-1])


def test_unpacking_a_hostile_image_touches_nothing_outside_its_layer(tmp_path):
    needs_root()
    layer = tmp_path / "layer"
    layer.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("the host's\n")
    archive = _tar([
        (_member("etc", tarfile.DIRTYPE, 0o755), None),
        (_member("etc/os-release"), b"ID=test\n"),
        (_member("../outside.txt"), b"overwritten\n"),            # climbs out by ..
        (_member("/abs.txt"), b"absolute\n"),                     # an absolute name
        # the same path as the host's tmp_path, in the image; then a link to it
        (_member(str(tmp_path).lstrip("/"), tarfile.DIRTYPE, 0o755), None),
        (_member("hostlink", tarfile.SYMTYPE, link=str(tmp_path)), None),
        (_member("hostlink/outside.txt"), b"through a link\n"),   # through an absolute link
        (_member("hard", tarfile.LNKTYPE, link="../outside.txt"), None),
        (_member("null", tarfile.CHRTYPE, 0o666), None),
        (_member("pipe", tarfile.FIFOTYPE, 0o644), None),
        (_member("su", mode=0o4755), b"#!/bin/sh\n"),
        (_member("open", mode=0o777), b"x\n"),
        (_member("etc/shadow", mode=0o640), b"root:$y$hash:1::::::\n"),
        (_member("./etc/ssl/private/key.pem", mode=0o600), b"a private key\n"),
    ])
    done = _unpack(layer, archive)
    assert outside.read_text() == "the host's\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["layer", "outside.txt"]
    assert (layer / "etc" / "os-release").read_text() == "ID=test\n"
    assert (layer / "abs.txt").read_text() == "absolute\n"
    # the absolute link means what it means in the cage: a path inside the layer
    assert os.readlink(layer / "hostlink") == str(tmp_path)
    assert (layer / tmp_path.relative_to("/") / "outside.txt").read_text() == "through a link\n"
    for absent in ("null", "pipe", "hard"):
        assert not (layer / absent).exists()
    assert stat.S_IMODE((layer / "su").stat().st_mode) == 0o755  # no setuid
    assert stat.S_IMODE((layer / "open").stat().st_mode) == 0o755  # no group/other write
    # root's alone in the image; the agent owns the layer, so: nobody's (no cage process
    # holds the capability that reads a file without permission)
    assert stat.S_IMODE((layer / "etc" / "shadow").stat().st_mode) == 0
    assert stat.S_IMODE((layer / "etc" / "ssl" / "private" / "key.pem").stat().st_mode) == 0
    for path in (layer / "su", layer / "etc", layer / "etc" / "os-release"):
        assert (path.stat().st_uid, path.stat().st_gid) == OWNER
    assert done["skipped"] == {"device or fifo": 2, "hard link outside the image": 1,
                               "path outside the image": 1}, done


def test_a_truncated_image_stream_fails_in_one_line(tmp_path):
    needs_root()
    archive = _tar([(_member("big"), b"x" * 100_000)])[:20_000]
    proc = subprocess.run([sys.executable, "-m", "agentcage.backends.unpack", str(tmp_path),
                           *map(str, OWNER)], input=archive, capture_output=True, timeout=60)
    assert proc.returncode == 1
    assert "error" in json.loads(proc.stdout.decode().splitlines()[-1])
    assert b"Traceback" not in proc.stderr


def test_mount_points_are_made_inside_the_layer_whatever_its_links_say(tmp_path):
    needs_root()
    layer, host = tmp_path / "layer", tmp_path / "host"
    layer.mkdir()
    host.mkdir()
    (host / "shadow").write_text("host secret\n")
    (layer / "etc").mkdir()
    os.symlink(str(host / "shadow"), layer / "etc" / "hosts")          # a file: replaced
    os.symlink(str(host), layer / "opt")                              # absolute: in the layer
    os.symlink("../../../../../../..", layer / "up")                   # climbs: stops at /
    fitted = layers.fit_mount_points(
        layer, ["/opt/tools", "/up/workspace", "/home/agent"],
        ["/etc/hosts", "/etc/ssl/certs/ca-certificates.crt"], *OWNER)
    assert (host / "shadow").read_text() == "host secret\n"
    assert sorted(p.name for p in host.iterdir()) == ["shadow"]
    assert fitted["/opt/tools"] == f"{host}/tools"
    assert (layer / host.relative_to("/") / "tools").is_dir()
    assert fitted["/up/workspace"] == "/workspace" and (layer / "workspace").is_dir()
    assert fitted["/etc/hosts"] == "/etc/hosts"
    hosts = layer / "etc" / "hosts"
    assert hosts.is_file() and not hosts.is_symlink() and hosts.read_text() == ""
    assert (layer / "etc/ssl/certs/ca-certificates.crt").is_file()
    made = layer / "home" / "agent"
    assert (made.stat().st_uid, made.stat().st_gid) == OWNER


def test_a_layer_that_cannot_hold_a_mount_point_is_refused_in_one_line(tmp_path):
    layer = tmp_path / "layer"
    layer.mkdir()
    (layer / "home").write_text("a file where a directory goes\n")
    os.symlink("loop", layer / "loop")
    with pytest.raises(BackendError, match="has a file at /home"):
        layers.fit_mount_points(layer, ["/home/agent"], [], os.getuid(), os.getgid())
    with pytest.raises(BackendError, match="too many links"):
        layers.fit_mount_points(layer, ["/loop/x"], [], os.getuid(), os.getgid())
    (layer / "etc").mkdir()
    (layer / "etc" / "hosts").mkdir()
    with pytest.raises(BackendError, match="no plain file at /etc/hosts"):
        layers.fit_mount_points(layer, [], ["/etc/hosts"], os.getuid(), os.getgid())
