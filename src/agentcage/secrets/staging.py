"""Staging: the gateway's copy of the secret values, in memory-backed files only.

The CLI reads the store (on the host) and writes, for each secret, its env name, placeholder
and value to `<run dir>/<cage>/secrets.json` (0600, directory 0700), where the run dir is
`/dev/shm/agentcage` unless AGENTCAGE_RUN_DIR says otherwise. The gateway process reads it with
`load_staged` at start and on reload. The cage never sees that path: its /dev is its own, and
the file is refused anywhere that is not tmpfs/ramfs, so values never land on a disk.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentcage import rootless
from agentcage.secrets import placeholders
from agentcage.secrets.book import PlaceholderBook
from agentcage.secrets.errors import StagingError
from agentcage.secrets.placeholders import Placeholder
from agentcage.secrets.store import SecretStore
from agentcage.state import CageDir, atomic_write, ensure_private_dir

STAGE_VERSION = 1
RUN_DIR_ENV = "AGENTCAGE_RUN_DIR"
DEFAULT_RUN_DIR = Path("/dev/shm/agentcage")
MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})
FILE_NAME = "secrets.json"
# Beside it: the state directory of the cage it was staged for, so that what a cage left behind
# (its state directory deleted, its gateway killed) is found and removed (`stale_stagings`).
OWNER_NAME = "state-dir"


@dataclass(frozen=True)
class StagedSecret:
    env: str
    placeholder: Placeholder
    value: bytes

    def __repr__(self) -> str:  # never show the value, even in a traceback
        return f"StagedSecret(env={self.env!r}, placeholder={str(self.placeholder)!r})"


def run_dir() -> Path:
    """Root's cages stage under /dev/shm/agentcage; a user's rootless cages under a directory
    of their own beside it (the file names are the cages' names, which are per user)."""
    override = os.environ.get(RUN_DIR_ENV)
    if override:
        return Path(override)
    if rootless.active():
        return DEFAULT_RUN_DIR.with_name(f"{DEFAULT_RUN_DIR.name}-{rootless.host_uid()}")
    return DEFAULT_RUN_DIR


def staging_path(cage: CageDir | str) -> Path:
    """Where the gateway of `cage` reads its staged secrets."""
    name = cage.name if isinstance(cage, CageDir) else cage
    return run_dir() / name / FILE_NAME


def _unescape_mount(path: str) -> str:
    return (
        path.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
    )


def filesystem_type(path: Path) -> str:
    """The type of the filesystem `path` is on (longest mount point prefix in mountinfo)."""
    target = os.path.realpath(path)
    best, fstype = "", "unknown"
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            mount_point = _unescape_mount(left.split()[4])
            inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
            if inside and len(mount_point) >= len(best):
                best, fstype = mount_point, right.split()[0]
    return fstype


def _existing_parent(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


def stage(secrets: Sequence[StagedSecret], target: CageDir | Path,
          owner: Path | None = None) -> Path:
    """Write `secrets` for the gateway; `target` is a cage (default path) or an explicit file.
    `owner`: the state directory of the cage, recorded beside them (see OWNER_NAME).

    Refuses a target that is not on tmpfs/ramfs. Returns the path written.
    """
    path = staging_path(target) if isinstance(target, CageDir) else Path(target)
    fstype = filesystem_type(_existing_parent(path.parent))
    if fstype not in MEMORY_FILESYSTEMS:
        raise StagingError(
            f"{path.parent} is on {fstype}, not tmpfs: staged secrets must never reach a disk; "
            f"set {RUN_DIR_ENV} to a directory on tmpfs (e.g. /dev/shm/agentcage)"
        )
    # Directories made here are private too, not only the last one: a 0755 run directory
    # would let any local user list which cages hold secrets.
    created = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
    ensure_private_dir(path.parent)
    for directory in created:
        os.chmod(directory, 0o700)
    doc = {
        "version": STAGE_VERSION,
        "secrets": [
            {
                "env": s.env,
                "placeholder": str(s.placeholder),
                "value": base64.b64encode(s.value).decode(),
            }
            for s in secrets
        ],
    }
    if owner is not None:
        atomic_write(path.with_name(OWNER_NAME), str(owner), mode=0o600)
    atomic_write(path, json.dumps(doc), mode=0o600)
    return path


def stale_stagings(alive: Callable[[Path], bool]) -> list[Path]:
    """The staging directories (under the run directory) whose recorded cage `alive` says is
    gone: what nothing will ever unstage. A directory without the record is left alone."""
    stale = []
    with contextlib.suppress(OSError):
        for directory in run_dir().iterdir():
            try:
                owner = Path((directory / OWNER_NAME).read_text())
            except (OSError, ValueError):
                continue
            if owner.is_absolute() and not alive(owner):
                stale.append(directory)
    return stale


def load_staged(path: Path) -> tuple[StagedSecret, ...]:
    """The staged secrets at `path` (what the gateway calls); StagingError when unusable."""
    try:
        if path.stat().st_mode & 0o077:
            raise StagingError(f"{path} is readable by others; refusing to use it")
        doc = json.loads(path.read_bytes())
        if doc["version"] != STAGE_VERSION:
            raise ValueError(f"version {doc['version']!r}")
        return tuple(
            StagedSecret(
                env=entry["env"],
                placeholder=placeholders.parse(entry["placeholder"]),
                value=base64.b64decode(entry["value"], validate=True),
            )
            for entry in doc["secrets"]
        )
    except FileNotFoundError:
        raise StagingError(f"{path} is missing: no secrets were staged") from None
    except (OSError, ValueError, KeyError, TypeError, binascii.Error) as e:
        raise StagingError(f"{path} is unusable ({type(e).__name__})") from None


def unstage(target: CageDir | Path) -> None:
    """Remove the staged file, its record and their directory (when the gateway stops)."""
    path = staging_path(target) if isinstance(target, CageDir) else Path(target)
    for name in (path.name, OWNER_NAME):
        with contextlib.suppress(FileNotFoundError):
            path.with_name(name).unlink()
    with contextlib.suppress(OSError):
        path.parent.rmdir()


def collect(
    store: SecretStore, book: PlaceholderBook, names: Iterable[str] | None = None
) -> tuple[StagedSecret, ...]:
    """Read every secret (or `names`) from `store` with its placeholder from `book`."""
    wanted = store.names() if names is None else list(names)
    return tuple(StagedSecret(n, book.ensure(n), store.get(n)) for n in wanted)
