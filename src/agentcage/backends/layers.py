"""A cage's own root filesystem, made from an image: its layer.

A cage whose `container.image` names an image runs on that image's files instead of the host's
/usr, /etc and /opt. They are unpacked once into `rootfs/` in the cage's state directory (by
unpack.py, confined to that directory), owned by the host uid the workload runs as, and that
directory is the cage's root for every command, under the same bubblewrap sandbox as any cage:
read-only for the agent (unless `container.read_only: false`), writable for `shell --as-root`,
whose root is root of the cage's user namespace only (the same host uid; never host root).

So the layer is the cage's writable layer: what an as-root shell installs stays across `stop`,
`start` and `update`, and goes with `update --rebuild` (unpacked again from the image), with a
change of image, or with `destroy`. It is a full copy, not an overlay: it costs the image's size
per cage on disk, and needs nothing of the kernel an unprivileged overlay would.

bubblewrap mounts the cage's own files (/etc/resolv.conf, the CA bundle, the home, /workspace)
on paths in the layer, which must exist there, and resolves a link on the way against the root
it builds, not the layer's. So before every command the paths are made in the layer and walked
one component at a time from a descriptor of it, never following a link out of it (a link in
the layer is resolved as the cage would resolve it, inside the layer); bubblewrap is given the
resolved paths. A link where one of the cage's files goes is replaced by an empty file: the
cage's file is mounted there anyway.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from agentcage.backends import images
from agentcage.backends.sandbox import cage_environment
from agentcage.errors import BackendError, StateError
from agentcage.state import CageDir, read_json, write_json

LAYER_DIR = "rootfs"
RECORD = "image.json"
MAX_LINKS = 40  # links followed in one path, as the kernel allows
UNPACK_TIMEOUT = 1800.0
# The image's environment, but for what the cage itself decides (sandbox.cage_environment:
# its home, proxies, CA bundles...), read from there; an image's PATH and LANG are its own.
CAGE_OWNED_ENV = frozenset(
    {name for name, _ in cage_environment("", {}, "")} - {"PATH", "LANG"} | {"TERM", "HOSTNAME"})
_PATH_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Layer:
    """The cage's layer as recorded: which image it was made from, for whom."""

    reference: str
    image_id: str
    uid: int
    gid: int
    env: tuple[tuple[str, str], ...]
    files: int
    size: int

    def to_dict(self) -> dict:
        return {"image": self.reference, "image_id": self.image_id, "owner": [self.uid, self.gid],
                "env": dict(self.env), "files": self.files, "bytes": self.size,
                "made_at": time.time()}

    @classmethod
    def from_dict(cls, d: dict) -> Layer:
        uid, gid = d["owner"]
        return cls(str(d["image"]), str(d["image_id"]), int(uid), int(gid),
                   tuple(sorted((str(k), str(v)) for k, v in d.get("env", {}).items())),
                   int(d.get("files", 0)), int(d.get("bytes", 0)))


def layer_path(cage: CageDir) -> Path:
    return cage.root / LAYER_DIR


def recorded(cage: CageDir) -> Layer | None:
    """The layer's record, if the cage has a whole one (a layer is recorded once unpacked)."""
    path = cage.root / RECORD
    if not path.exists() or not layer_path(cage).is_dir():
        return None
    try:
        return Layer.from_dict(read_json(path, dict))
    except (StateError, KeyError, TypeError, ValueError):  # damaged: the layer is made again
        return None


def image_env(layer: Layer | None) -> tuple[tuple[str, str], ...]:
    """The image's own environment (its PATH, say), less what the cage decides."""
    if layer is None:
        return ()
    return tuple((k, v) for k, v in layer.env if k not in CAGE_OWNED_ENV)


def ensure(cage: CageDir, reference: str | None, uid: int, gid: int, rebuild: bool = False,
           say: Callable[[str], None] | None = None) -> Layer | None:
    """The cage's layer for `reference` (None: the cage has no image, and no layer), owned by
    `uid`:`gid`: the one it has when it was made from that reference (unless `rebuild`), else
    made from the image now."""
    have = recorded(cage)
    if reference is None:
        drop(cage)
        return None
    if have is not None and have.reference == reference and not rebuild:
        if (have.uid, have.gid) != (uid, gid):
            _chown_tree(layer_path(cage), uid, gid)
            have = Layer(have.reference, have.image_id, uid, gid, have.env, have.files,
                         have.size)
            write_json(cage.root / RECORD, have.to_dict())
        return have
    image = images.find_or_pull(reference, say)
    if have is not None and say is not None:
        say(f"cage {cage.name}: its layer is made again from {reference}; what was installed "
            "in it is gone")
    drop(cage)
    return _make(cage, image, uid, gid, say)


def _make(cage: CageDir, image: images.Image, uid: int, gid: int,
          say: Callable[[str], None] | None) -> Layer:
    if say is not None:
        size = f" ({image.size / 1e6:.0f} MB)" if image.size else ""
        say(f"cage {cage.name}: unpacking image {image.reference}{size} into its layer")
    scratch = cage.root / f".{LAYER_DIR}.{os.getpid()}"
    _remove_tree(scratch)
    scratch.mkdir(mode=0o755)
    try:
        export = images.Export(image)
        error = None
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "agentcage.backends.unpack", str(scratch), str(uid),
                 str(gid)], stdin=export.stream, capture_output=True, text=True,
                timeout=UNPACK_TIMEOUT)
        except subprocess.TimeoutExpired:
            error = f"unpacking took over {UNPACK_TIMEOUT:.0f} s"
        finally:
            failed = export.close()
        if error is None:
            error = _unpack_error(proc) or (f"podman export failed: {failed}" if failed else None)
        if error is not None:
            raise BackendError(f"cannot unpack image {image.reference} for cage {cage.name}: "
                               f"{error}")
        done = json.loads(proc.stdout.strip().splitlines()[-1])
        os.chown(scratch, uid, gid)
        scratch.rename(layer_path(cage))
    except BaseException:
        _remove_tree(scratch)
        raise
    layer = Layer(image.reference, image.id, uid, gid, image.env, int(done["files"]),
                  int(done["bytes"]))
    write_json(cage.root / RECORD, layer.to_dict())
    if say is not None and done.get("skipped"):
        left = ", ".join(f"{n} {why}" for why, n in sorted(done["skipped"].items()))
        say(f"cage {cage.name}: left out of its layer: {left}")
    return layer


def _unpack_error(proc: subprocess.CompletedProcess[str]) -> str | None:
    lines = proc.stdout.strip().splitlines()
    try:
        done = json.loads(lines[-1]) if lines else {}
    except ValueError:
        done = {}
    if proc.returncode == 0 and "files" in done:
        return None
    if isinstance(done, dict) and done.get("error"):
        return str(done["error"])
    tail = proc.stderr.strip().splitlines()
    return tail[-1] if tail else f"exit {proc.returncode}"


def drop(cage: CageDir) -> bool:
    """Remove the cage's layer and its record; whether there was one."""
    path = layer_path(cage)
    existed = path.exists()
    (cage.root / RECORD).unlink(missing_ok=True)
    _remove_tree(path)
    return existed


def _remove_tree(path: Path) -> None:
    """Removed whole, a directory the image made read-only (mode 0555) included."""
    def writable_then_again(function, name, _exc):
        parent = os.path.dirname(name)
        with contextlib.suppress(OSError):
            os.chmod(parent, stat.S_IMODE(os.lstat(parent).st_mode) | stat.S_IWUSR
                     | stat.S_IXUSR)
        with contextlib.suppress(FileNotFoundError):
            function(name)

    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, onexc=writable_then_again)


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    """Every entry of the layer given to another uid (the cage now runs as it), never following
    a link."""
    os.chown(root, uid, gid, follow_symlinks=False)
    for directory, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            os.chown(os.path.join(directory, name), uid, gid, follow_symlinks=False)


# ---- mount points --------------------------------------------------------------------------

def fit_mount_points(layer: Path, dirs: Iterable[str], files: Iterable[str], uid: int,
                     gid: int) -> dict[str, str]:
    """Each path made in the layer if missing (a directory, or an empty file), owned by
    `uid`:`gid`; returns cage path -> the same path with the layer's links resolved inside it.
    BackendError when the layer has something else there (a file where a directory goes)."""
    root = os.open(layer, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fitted = {path: _fit(root, path, True, uid, gid) for path in dirs}
        fitted.update({path: _fit(root, path, False, uid, gid) for path in files})
    finally:
        os.close(root)
    return fitted


def _fit(root: int, path: str, is_dir: bool, uid: int, gid: int) -> str:
    pending = [p for p in path.split("/") if p not in ("", ".")]
    pending.reverse()  # a stack: the next component last
    done: list[str] = []
    current = os.dup(root)
    links = 0
    try:
        while pending:
            part = pending.pop()
            if part == "..":
                if done:
                    done.pop()
                os.close(current)
                current = _open_path(root, done)
                continue
            last = not pending
            want_dir = is_dir or not last
            st = _lstat(current, part)
            if st is None:
                _make_entry(current, part, want_dir, uid, gid)
                st = os.stat(part, dir_fd=current, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                if not want_dir:  # where a file of the cage's own goes: an empty one
                    os.unlink(part, dir_fd=current)
                    _make_entry(current, part, False, uid, gid)
                    done.append(part)
                    continue
                links += 1
                if links > MAX_LINKS:
                    raise BackendError(f"{path}: too many links in the cage's layer")
                target = os.readlink(part, dir_fd=current)
                if target.startswith("/"):
                    done = []
                    os.close(current)
                    current = os.dup(root)
                pending.extend(reversed([p for p in target.split("/") if p not in ("", ".")]))
                continue
            if want_dir and not stat.S_ISDIR(st.st_mode):
                raise BackendError(f"the cage's layer has a file at /{'/'.join([*done, part])}, "
                                   f"where agentcage needs a directory (for {path})")
            if not want_dir and not stat.S_ISREG(st.st_mode):
                raise BackendError(f"the cage's layer has no plain file at {path}, where "
                                   "agentcage mounts one of the cage's own files")
            done.append(part)
            if want_dir:
                child = os.open(part, _PATH_FLAGS, dir_fd=current)
                os.close(current)
                current = child
    finally:
        os.close(current)
    return "/" + "/".join(done)


def _lstat(directory: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _open_path(root: int, parts: list[str]) -> int:
    current = os.dup(root)
    for part in parts:
        child = os.open(part, _PATH_FLAGS, dir_fd=current)
        os.close(current)
        current = child
    return current


def _make_entry(directory: int, name: str, is_dir: bool, uid: int, gid: int) -> None:
    if is_dir:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=directory)
    else:
        with contextlib.suppress(FileExistsError):
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o644, dir_fd=directory))
    os.chown(name, uid, gid, dir_fd=directory, follow_symlinks=False)
