"""Credential files in the cage's host directories, masked: what the agent can read, it can
send (the model's own host is an allowed channel), so a `.env`, a private key, an `.npmrc`
with a token or a cloud credential file in the project is an empty read-only file in the cage.

The catalogue is the probe's (agentsec/probe/blast_probe.py: `project_credential_files`):
one source of truth for what the probe's SEC-011 finding counts and what the cage masks. A
file that holds nothing (empty, an .npmrc without a token, a .pem without a private key) is
left as it is. `container.unmask` names the paths (relative to their host directory, as
listed at create) the operator wants the agent to read after all; `container.mask_credentials:
false` masks none.

The directories are walked at create, update and every start (once when one follows the
other; never at every command: exec stays quick); the list is masks.json in the cage's state
directory. A credential file made on
the host while the cage runs is masked from the next start.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Sequence

from agentcage.errors import BackendError, StateError
from agentcage.record import record
from agentcage.state import CageDir, read_json, write_json

MASKS_FILE = "masks.json"
REUSE_SECONDS = 5.0  # how old the walk of create (or run) may be for its start to take it


@record
class Masked:
    host: str  # the file on the host
    dest: str  # where the cage sees it
    relative: str  # as listed, and as container.unmask names it

    def as_list(self) -> list[str]:
        return [self.host, self.dest, self.relative]


def find(volumes: Sequence[tuple[str, str, str]], unmask: Sequence[str]
         ) -> tuple[list[Masked], bool]:
    """(the credential files in the host directories of `volumes` but those in `unmask`,
    whether a walk stopped at its bound)."""
    from agentsec.probe.blast_probe import project_credential_files, project_credential_holds

    skip = {u.strip("/") for u in unmask}
    found, truncated = [], False
    for source, target, _mode in volumes:
        if not os.path.isdir(source):
            continue
        files, cut = project_credential_files(source)
        truncated |= cut
        for relative, kind in files:
            path = os.path.join(source, relative)
            if relative in skip or project_credential_holds(path, kind) is False:
                continue
            found.append(Masked(path, f"{target.rstrip('/')}/{relative}", relative))
    return found, truncated


def refresh(cage: CageDir, volumes: Sequence[tuple[str, str, str]], enabled: bool,
            unmask: Sequence[str], starting: bool = False) -> None:
    """Walk the host directories again and keep the list for the cage's commands.

    `create`, `update` and `run` walk when they write the cage's state and start it a moment
    later: that start (`starting`) takes their walk, once, when it is of the same
    configuration and under REUSE_SECONDS old; every other start walks again."""
    of = [[list(v) for v in volumes], enabled, list(unmask)]
    path = cage.root / MASKS_FILE
    if starting and path.exists():
        try:
            doc = read_json(path, dict)
            fresh = time.time() - float(doc["walked_at"]) < REUSE_SECONDS
            if doc.get("for_start") and doc.get("of") == of and fresh:
                write_json(path, {**doc, "for_start": False}, durable=False)
                return
        except (StateError, KeyError, TypeError, ValueError):
            pass  # walked again below
    masked, truncated = find(volumes, unmask) if enabled else ([], False)
    # walked again at every start: not durable
    write_json(path, {"files": [m.as_list() for m in masked], "truncated": truncated,
                      "of": of, "walked_at": time.time(), "for_start": not starting},
               durable=False)


def listed(cage: CageDir) -> list[Masked]:
    """The files the cage's commands mask (as the last walk found them)."""
    path = cage.file(MASKS_FILE)
    if not os.path.exists(path):
        return []
    doc = read_json(path, dict)
    try:
        return [Masked(str(h), str(d), str(r)) for h, d, r in doc.get("files", [])]
    except (TypeError, ValueError):
        raise BackendError(f"{path} is damaged; `agentcage start` writes it again") from None


def still_files(masked: Sequence[Masked]) -> list[Masked]:
    """The masked files as they are now: one gone is not masked (bubblewrap would make it on
    the host); one turned into a symlink is refused (it could point anywhere on the host)."""
    present = []
    for m in masked:
        try:
            info = os.lstat(m.host)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            raise BackendError(f"{m.host} became a symlink; refusing to run with it")
        if stat.S_ISREG(info.st_mode):
            present.append(m)
    return present


def describe(masked: Sequence[Masked]) -> str:
    """One line for `create` and `start`."""
    names = ", ".join(m.relative for m in masked[:8])
    more = f" and {len(masked) - 8} more" if len(masked) > 8 else ""
    return (f"masked in the cage (credential files, empty there): {names}{more}; let the "
            "agent read one with container.unmask: [PATH]")


__all__ = ["Masked", "describe", "find", "listed", "refresh", "still_files"]
