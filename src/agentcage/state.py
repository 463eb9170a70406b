"""Per-cage state on disk: `$AGENTCAGE_HOME/cages/<name>/` (default ~/.config/agentcage).

Directories are 0700 and files 0600; every write is atomic (temporary file + fsync + rename),
so the gateway never reads half a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator

from agentcage.errors import StateError
from agentcage.home import state_directory
from agentcage.names import NAME_RE

# (typing.TYPE_CHECKING, without importing typing; pathlib is imported where a Path is made:
# `ls` and `exec` read the state through `CageDir.file` and `read_json`, which need neither)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

# What a cage's directory can hold with no cage in it: its stored secrets (`destroy
# --keep-secrets`, `secret set` before `cage create`) and its named volumes (`destroy
# --keep-state`, and `run` between one run of a project and the next).
SECRETS, VOLUMES = "secrets", "volumes"
KEPT = (SECRETS, VOLUMES)
# What a cage's directory holds while there is a cage: its configuration, its runtime state,
# the pid of the `run` that made it (a run killed before it wrote cage.yaml still shows).
_LIFE = ("cage.yaml", "runtime.json", "owner.pid")
CA_CERT = "ca/mitmproxy-ca-cert.pem"  # the cage CA's certificate, in its directory


def state_root() -> Path:
    from pathlib import Path

    return Path(state_directory())


def ensure_private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def atomic_write(path: Path, data: str | bytes, mode: int = 0o600,
                 durable: bool = True) -> None:
    """Replace `path` with `data` in one step; readers see the old or the new file, never a mix.

    `durable`: flushed to the disk before it replaces the old one, so that a crash of the host
    leaves the old or the new file. Not for what a crash makes meaningless anyway (a running
    cage's runtime state, its gateway's settings, whatever an ephemeral run writes): a flush
    costs a start 1-5 ms a file on this VM, and a start writes a dozen."""
    payload = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def write_runtime(cage: CageDir, doc: dict) -> None:
    """runtime.json: what runs now, meaningless after a crash of the host (not durable)."""
    write_json(cage.root / "runtime.json", doc, durable=False)


@contextlib.contextmanager
def locked_dir(root: Path) -> Iterator[None]:
    """An exclusive lock on `root` (its private `.lock` file), held between processes."""
    ensure_private_dir(root)
    fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_json(path: Path, value: Any, durable: bool = True) -> None:
    atomic_write(path, json.dumps(value, indent=2, sort_keys=True) + "\n", durable=durable)


def read_json(path: str | Path, kind: type | None = None) -> Any:
    """The JSON document in `path`; with `kind`, it must be of that type (dict, list)."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.loads(f.read())
    except FileNotFoundError:
        raise StateError(f"{path} is missing; the cage's state is incomplete (`agentcage "
                          "destroy -y NAME` still cleans up)") from None
    except (OSError, ValueError) as e:
        reason = " ".join(str(e).split())[:120]
        raise StateError(f"{path} is unreadable ({reason}); `agentcage destroy -y NAME` still "
                         "cleans up") from None
    if kind is not None and not isinstance(value, kind):
        raise StateError(f"{path} holds a {type(value).__name__}, not a {kind.__name__}; "
                         "`agentcage destroy -y NAME` still cleans up")
    return value


class CageDir:
    """The files of one cage. Only paths here; reading and writing is done by the services.

    A value (equal, and hashed, by its directory). Not a dataclass, and its directory kept as
    a string (`root`, a Path, is made when asked for): `ls` and `exec` import this module, and
    the dataclasses module (with inspect) and pathlib cost them more than the rest of what
    they do; they name files with `file`."""

    __slots__ = ("directory",)
    directory: str

    def __init__(self, root: str | Path):
        object.__setattr__(self, "directory", os.path.normpath(os.fspath(root)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"CageDir is immutable: cannot set {name}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CageDir) and other.directory == self.directory

    def __hash__(self) -> int:
        return hash(self.directory)

    def __repr__(self) -> str:
        return f"CageDir(root={self.directory!r})"

    @property
    def root(self) -> Path:
        from pathlib import Path

        return Path(self.directory)

    def file(self, name: str) -> str:
        """The path of `name` in the cage's directory, as a string."""
        return os.path.join(self.directory, name)

    @property
    def name(self) -> str:
        return os.path.basename(self.directory)

    config = property(lambda self: self.root / "cage.yaml")
    runtime = property(lambda self: self.root / "runtime.json")
    policy = property(lambda self: self.root / "domains.json")
    policy_ack = property(lambda self: self.root / "gateway.policy.json")
    gateway_settings = property(lambda self: self.root / "gateway.json")
    gateway_log = property(lambda self: self.root / "gateway.log")
    gateway_ready = property(lambda self: self.root / "gateway.ready")
    # made by the backend once the cage's network and firewall are complete (gateway/main.py)
    gateway_network = property(lambda self: self.root / "gateway.network")
    audit = property(lambda self: self.root / "audit.jsonl")
    capture = property(lambda self: self.root / "capture.jsonl")  # + .1, .2... (rotated)
    workload_log = property(lambda self: self.root / "workload.log")
    ca_dir = property(lambda self: self.root / "ca")
    ca_cert = property(lambda self: self.root / CA_CERT)
    upstream_ca = property(lambda self: self.root / "upstream-ca.pem")
    cage_bundle = property(lambda self: self.root / "cage-ca-bundle.pem")
    owner = property(lambda self: self.root / "owner.pid")  # a run's cage: its `run`'s pid
    grants = property(lambda self: self.root / "grants.json")  # written by the gateway only
    control = property(lambda self: self.root / "control")  # the operator's requests to it
    watcher = property(lambda self: self.root / "watcher.json")  # written by the gateway only

    def exists(self) -> bool:
        return os.path.exists(self.file("cage.yaml"))

    def only_kept(self) -> bool:
        """Whether the directory holds no cage, only what one keeps (KEPT) for its next life."""
        return not any(os.path.exists(self.file(m)) for m in (*_LIFE, "meta.json"))

    def holds_a_cage(self) -> bool:
        """Whether a command can still name a cage here (its configuration, its runtime state,
        or its `run`): if not, nothing would ever stop a gateway of it (see orphans.py)."""
        return any(os.path.exists(self.file(m)) for m in _LIFE)


class StateStore:
    """All cages under one root."""

    def __init__(self, root: Path | None = None):
        # a string until a Path is asked for (`root`): see CageDir
        self.directory = os.fspath(root) if root else state_directory()

    @property
    def root(self) -> Path:
        from pathlib import Path

        return Path(self.directory)

    @property
    def cages_dir(self) -> Path:
        return self.root / "cages"

    def cage(self, name: str) -> CageDir:
        if not NAME_RE.match(name):
            raise StateError(f"cage name {name!r} is invalid; use a-z, 0-9 and '-'")
        return CageDir(os.path.join(self.directory, "cages", name))

    def create(self, name: str) -> CageDir:
        ensure_private_dir(self.root)
        ensure_private_dir(self.cages_dir)
        cage = self.cage(name)
        ensure_private_dir(cage.root)
        return cage

    def names(self) -> list[str]:
        cages = os.path.join(self.directory, "cages")
        if not os.path.isdir(cages):
            return []
        # a cage whose `run` was killed before it wrote cage.yaml still shows (for prune), and
        # so does what a cage keeps for its next life (secrets, named volumes: see KEPT)
        markers = (*_LIFE, *KEPT)
        return sorted(name for name in os.listdir(cages)
                      if any(os.path.exists(os.path.join(cages, name, m)) for m in markers))

    def remove(self, name: str, keep: tuple[str, ...] = ()) -> None:
        """Remove the cage's directory, or everything in it but the entries `keep` (when one
        of them is there)."""
        import shutil  # here: `exec` imports this module, and shutil is not cheap
        root = self.cage(name).root
        if not any((root / k).exists() for k in keep):
            shutil.rmtree(root, ignore_errors=True)
            return
        for entry in root.iterdir():
            if entry.name in keep:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)

    def lock(self) -> contextlib.AbstractContextManager[None]:
        """Serialise address allocation and namespace creation between CLI processes."""
        return locked_dir(self.root)
