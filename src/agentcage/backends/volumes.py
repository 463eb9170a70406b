"""Named volumes: directories a cage keeps on the host and mounts at every command.

A cage.yaml volume whose source is a bare name (`home:/home/agent`) is a named volume: the
directory `volumes/NAME/` in the cage's state directory, made on first use, 0700 and owned by
the host uid the workload runs as, mounted read-write (or `:ro`) at its cage path. It survives
`exec`, `stop`/`start` and `update`; `run` keeps a project's volumes between its runs (the
run's cage is named after the project, see cages.py); `destroy` removes them unless
`--keep-state`. Nothing of the host user's own home is in one.

Two things here touch files the agent owns, as root, so both go through directory
descriptors and never follow a link the agent could have planted:
- opening a volume (its directory is checked to be a directory, not a link, owned by the
  workload's uid);
- the seed files (seeds.py): each path is walked one component at a time from the volume's
  descriptor with O_NOFOLLOW; a file is read only when it is a regular file with one link,
  and replaced by a rename inside the directory that was opened. A link, a FIFO or a hard
  link where a seed goes is left alone, and the seed with it.

The workload cannot reach the state directory itself (root's home is 0700, and the workload
runs as an unprivileged uid, which bubblewrap needs to resolve every mount source as), so
each command's volumes are first bound, in a mount namespace of that command alone, under
`STAGING` (a tmpfs there, 0755): bubblewrap mounts them from there. The host's own mount
table never changes.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentcage.errors import BackendError
from agentcage.state import CageDir

VOLUMES_DIR = "volumes"  # in the cage's state directory
STAGING = Path("/run/agentcage-volumes")  # an empty directory on the host; see the docstring
MAX_SEED_READ = 8 * 1024 * 1024  # a seeded file larger than this is the agent's: left alone
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class OpenVolume:
    name: str
    target: str  # the cage path
    writable: bool
    fd: int  # a directory descriptor of the volume (the caller closes it)


def volumes_root(cage: CageDir) -> Path:
    return cage.root / VOLUMES_DIR


def volume_names(cage: CageDir) -> list[str]:
    root = volumes_root(cage)
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


def open_volumes(cage: CageDir, volumes: Sequence[tuple[str, str, str]], uid: int,
                 gid: int) -> list[OpenVolume]:
    """A descriptor of each named volume (name, cage path, rw|ro), made if missing (0700,
    owned by `uid`:`gid`). Refused: a volume that is not a plain directory, or is owned by
    another uid (the cage ran as another user before)."""
    if not volumes:
        return []
    root = volumes_root(cage)
    root.mkdir(mode=0o700, exist_ok=True)
    parent = os.open(root, _DIR_FLAGS)
    opened: list[OpenVolume] = []
    try:
        for name, target, mode in volumes:
            fd = _open_or_make_dir(parent, name, uid, gid, 0o700)
            opened.append(OpenVolume(name, target, mode == "rw", fd))
            st = os.fstat(fd)
            if st.st_uid != uid:
                raise BackendError(
                    f"volume {name} of cage {cage.name} belongs to uid {st.st_uid}, and the "
                    f"cage now runs as uid {uid}; give it to {uid} (chown -R {uid}:{gid} "
                    f"{root / name}) or start from an empty one (`run --fresh`, or `agentcage "
                    f"destroy {cage.name}` for a persistent cage)")
    except BaseException:
        for v in opened:
            os.close(v.fd)
        raise
    finally:
        os.close(parent)
    return opened


def _open_or_make_dir(parent: int, name: str, uid: int, gid: int, mode: int) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        pass
    except OSError as e:  # ELOOP / ENOTDIR: a link or a file where the directory goes
        raise BackendError(f"{name} in a cage volume is not a directory ({e.strerror}); "
                           "move it away") from None
    with contextlib.suppress(FileExistsError):  # made meanwhile by another command
        os.mkdir(name, mode, dir_fd=parent)
        os.chown(name, uid, gid, dir_fd=parent, follow_symlinks=False)
    return os.open(name, _DIR_FLAGS, dir_fd=parent)


def staged_path(index: int) -> str:
    """Where the volume at `index` is bound for bubblewrap (see `stage`)."""
    return str(STAGING / str(index))


def prepare_staging() -> None:
    """The empty directory the staging tmpfs is mounted on (made once, as root)."""
    STAGING.mkdir(mode=0o755, exist_ok=True)


class Stager:
    """Binds a command's volumes under STAGING in a mount namespace of its own (`stage`, run in
    the command's child process before anything is executed). Made in the parent: the child of
    a fork must not import (another thread may have held the import lock when it forked), so
    the C library is loaded here."""

    def __init__(self, paths: Sequence[str]):
        import ctypes

        self.paths = tuple(paths)
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._ctypes = ctypes

    def _mount(self, source: str | None, target: str, fstype: str | None, flags: int,
               data: str | None = None) -> None:
        ctypes = self._ctypes
        if self._libc.mount(source and source.encode(), target.encode(),
                            fstype and fstype.encode(), ctypes.c_ulong(flags),
                            data and data.encode()) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"mount {target}: {os.strerror(errno)}")

    def stage(self) -> None:
        """A private mount namespace with a tmpfs on STAGING and each volume directory bound at
        `staged_path(i)`. Each is opened again in that namespace (a descriptor opened before
        names a mount of the host's, which cannot be bound from another namespace), refusing
        a link; the directories above it are agentcage's own (root's, 0700)."""
        ms_nosuid, ms_nodev, ms_noexec, ms_bind, ms_rec, ms_private = (2, 4, 8, 4096, 16384,
                                                                       1 << 18)
        os.unshare(os.CLONE_NEWNS)
        self._mount(None, "/", None, ms_rec | ms_private)
        self._mount("agentcage-volumes", str(STAGING), "tmpfs",
                    ms_nosuid | ms_nodev | ms_noexec, "mode=0755,size=64k")
        for index, path in enumerate(self.paths):
            fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                os.mkdir(staged_path(index), 0o755)
                self._mount(f"/proc/self/fd/{fd}", staged_path(index), None, ms_bind)
            finally:
                os.close(fd)


# ---- seed files --------------------------------------------------------------------------------

def apply_seeds(volumes: Sequence[OpenVolume], seeds: Sequence[tuple[str, str, str]],
                placeholders: Mapping[str, str], uid: int, gid: int) -> None:
    """Put each seed (cage path, merge|text, content) into the volume it lies in (seeds.py
    says what each kind does). A seed whose place holds something else than a regular file
    with one link, or a file that is not a JSON object (for merge), is left alone."""
    from agentcage import seeds as seedlib

    for path, kind, content in seeds:
        volume = _volume_of(volumes, path)
        if volume is None or not volume.writable:
            continue
        parts = path[len(volume.target.rstrip("/")) + 1:].split("/")
        directory = _walk(volume.fd, parts[:-1], uid, gid)
        if directory is None:
            continue
        try:  # best effort: a seed that cannot be put in place leaves the agent to ask
            name = parts[-1]
            current = _read_regular(directory, name)
            if kind == "text":
                text = seedlib.render_text(content, placeholders)
                if current is None and text is not None:
                    _replace(directory, name, text.encode(), uid, gid)
                continue
            seed = seedlib.render(json.loads(content), placeholders)
            if current is None:
                _replace(directory, name, _json_bytes(seed), uid, gid)
                continue
            try:
                doc = json.loads(current)
            except ValueError:
                continue  # the agent's own file, broken or not JSON: not ours to fix
            if isinstance(doc, dict):
                merged = seedlib.merge_defaults(doc, seed)
                if merged != doc:
                    _replace(directory, name, _json_bytes(merged), uid, gid)
        except (_LeftAlone, OSError):
            continue
        finally:
            os.close(directory)


class _LeftAlone(Exception):
    """Something else than a plain file is where a seed goes."""


def _volume_of(volumes: Sequence[OpenVolume], path: str) -> OpenVolume | None:
    for v in volumes:
        if path.startswith(v.target.rstrip("/") + "/"):
            return v
    return None


def _walk(root: int, parts: Sequence[str], uid: int, gid: int) -> int | None:
    """A descriptor of the directory `parts` below `root`, making what is missing (0700,
    owned by the workload); None if a component is a link or not a directory."""
    current = os.dup(root)
    try:
        for part in parts:
            try:
                child = _open_or_make_dir(current, part, uid, gid, 0o700)
            except BackendError:
                os.close(current)
                return None
            os.close(current)
            current = child
    except BaseException:
        os.close(current)
        raise
    return current


def _read_regular(directory: int, name: str) -> bytes | None:
    """The file's bytes; None if there is none; _LeftAlone for a link, a non-regular file,
    a file with more than one link, or a large one."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=directory)
    except FileNotFoundError:
        return None
    except OSError:
        raise _LeftAlone from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_size > MAX_SEED_READ:
            raise _LeftAlone
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _replace(directory: int, name: str, data: bytes, uid: int, gid: int) -> None:
    """`name` in `directory` replaced by `data` in one step (a rename in that directory),
    owned by the workload, 0600."""
    tmp = f".{name}.agentcage-{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=directory)
    try:
        os.fchown(fd, uid, gid)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.rename(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=directory)
        raise
    finally:
        os.close(fd)


def _json_bytes(doc: object) -> bytes:
    return (json.dumps(doc, indent=2) + "\n").encode()
