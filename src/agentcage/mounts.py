"""Which host directories may be mounted into a cage, and where: one rule, applied twice.

cage.yaml is checked as written (so a plain mistake is reported with the line it is on), and
again once every path is resolved (`~`, relative paths, `..` and symlinks): a volume written
`../../../../etc` or a project symlink to /etc only shows what it really is after resolution.
A source is refused when it is, or lies under, a host system directory; when it is, lies under,
or contains a directory that holds credentials (~/.ssh, ~/.aws, ...) or agentcage's own state
(secrets, CA keys); a target may not shadow what the cage's own isolation is built from.
"""

from __future__ import annotations

import errno
import os
import pwd
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

# Directories under a home that hold credentials (or agentcage's own state): never mounted,
# nor any directory that contains one.
SENSITIVE_HOME_DIRS = (".ssh", ".aws", ".gnupg", ".kube", ".docker", ".config/agentcage",
                       ".config/gcloud", ".azure", ".password-store")
# Host system directories: neither they nor anything under them is a project.
SYSTEM_DIRS = ("/etc", "/root", "/proc", "/sys", "/dev", "/run", "/var/run", "/boot")
# Cage paths a volume may not cover: the cage's /proc, /dev and its agentcage files (CA).
RESERVED_TARGETS = ("/", "/proc", "/dev", "/sys", "/run/agentcage")


def _under(path: PurePosixPath, parent: str) -> bool:
    return path == PurePosixPath(parent) or PurePosixPath(parent) in path.parents


def written_source_refusal(source: str) -> str | None:
    """Why `source`, as written in cage.yaml, may not be mounted (None: it may, so far)."""
    home_relative = source[2:] if source.startswith("~/") else None
    normal = PurePosixPath(os.path.normpath(source))
    if str(normal) == "/" or any(_under(normal, d) for d in SYSTEM_DIRS):
        return f"{source} is a host system directory; mount a project directory instead"
    tail = f"/{home_relative}/" if home_relative is not None else f"{normal}/"
    for sensitive in SENSITIVE_HOME_DIRS:
        if f"/{sensitive}/" in tail:
            return f"{source} holds credentials ({sensitive}); it is never mounted"
    if source in ("~", "~/"):
        return f"{source} is a home directory, which holds credentials; mount a project in it"
    return None


def resolved_source_refusal(source: Path, protected: Iterable[Path] = ()) -> str | None:
    """Why the resolved host directory `source` may not be mounted (None: it may).

    `protected`: more directories that must never be reachable through a mount (agentcage's
    state directory). Home directories of every account on the machine are checked for the
    credential directories they hold."""
    src = PurePosixPath(source)
    if str(src) == "/" or any(_under(src, d) for d in SYSTEM_DIRS):
        return f"{source} is a host system directory; mount a project directory instead"
    for sensitive in SENSITIVE_HOME_DIRS:
        if f"/{sensitive}/" in f"{src}/":
            return f"{source} holds credentials ({sensitive}); it is never mounted"
    # As strings: ≈ 170 names are looked at on a machine with the usual system accounts, on
    # every start of a cage, where pathlib cost ten times the stat itself.
    guarded = [os.fspath(p) for p in protected]
    for home in _homes():
        guarded += [os.path.join(home, s) for s in SENSITIVE_HOME_DIRS]
    for path in guarded:
        if not _may_exist(path):  # (first: most are absent, and resolving one costs more)
            continue
        real = PurePosixPath(os.path.realpath(path))
        if _under(real, str(src)) or _under(src, str(real)):
            return (f"{source} would expose {path} (credentials or agentcage's own state); "
                    "mount a project directory that does not contain it")
    return None


# what Path.exists takes for "absent"; any other error (EACCES...) says "may exist"
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})


def _may_exist(path: str) -> bool:
    """Whether `path` exists, or may: one this user cannot look at (another user's closed
    home, met by a rootless cage's user) is taken to exist, and judged by its name."""
    try:
        os.stat(path)
    except OSError as e:
        return e.errno not in _ABSENT
    return True


def target_refusal(target: str) -> str | None:
    """Why `target` is not a place in the cage a volume may go (None: it is)."""
    if not target.startswith("/"):
        return "the container path must be absolute, e.g. /workspace"
    if ".." in PurePosixPath(target).parts or os.path.normpath(target) != target.rstrip("/"):
        return f"write the container path {target} without '..', '.' or doubled slashes"
    normal = PurePosixPath(target)
    if str(normal) == "/" or any(_under(normal, r) for r in RESERVED_TARGETS if r != "/"):
        return f"{target} is reserved for the cage itself; choose another path, e.g. /workspace"
    return None


def _homes() -> set[str]:
    homes = {os.path.expanduser("~")}
    for entry in pwd.getpwall():
        if entry.pw_dir and entry.pw_dir != "/":
            homes.add(entry.pw_dir)
    return homes
