"""`agentcage cage backup NAME -o FILE.tar.gz` and `cage restore FILE [--name NEW]`.

A backup is a gzipped tar of the cage's state directory, what makes the cage the same cage
again: its configuration (the validated form, the cage.yaml it was made from, create's
options, its workload profile), its domain list and grants, its CA (so that what trusts the
cage's CA still does), its audit log and capture, and its named volumes (the agent's own
state), plus `manifest.json` saying what is in it. Never what belongs to one run of it
(runtime state, the gateway's settings and log, staged secrets, control requests).

Secrets go in only with `--with-secrets`, and only where they stay sealed and can be opened
again: systemd-creds' credentials, sealed with this machine's host key, are restorable on
this machine alone (said so in the manifest and on the terminal). The encrypted-file store's
key lies beside its ciphertext, so taking it would carry the secrets readable: it is refused,
as plaintext is, with the fix (set them again after restore). Without secrets the manifest
names the keys to set again.

Restore writes a new cage (stopped) and refuses a name in use. Every member is checked before
anything is written (regular files and directories only, no absolute path, no `..`, no link
or device, a manifest of this format) and extracted with tarfile's `data` filter; a restore
that fails leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tarfile
import tempfile
import time
from pathlib import Path, PurePosixPath
from typing import Any

from agentcage.errors import ConfigError, StateError
from agentcage.state import SECRETS, VOLUMES, CageDir, StateStore, write_json

FORMAT = "agentcage-cage-backup"
VERSION = 1
MANIFEST = "manifest.json"
ROOT = "cage"  # the members' directory in the archive
# What a backup holds of the cage's directory (files, and directories whole).
FILES = ("cage.yaml", "cage.form.json", "cage.source.json", "overrides.json", "meta.json",
         "domains.json", "grants.json", "watcher.json")
ROTATED = ("audit.jsonl", "capture.jsonl")  # and their rotated .1, .2, ...
DIRECTORIES = ("ca", VOLUMES)
SEALED_BY_HOST = (".cred",)  # systemd-creds: opened only on the machine that sealed them
PLACEHOLDERS = "placeholders.json"
MAX_MEMBERS = 200_000


def _members(cage: CageDir, with_secrets: bool) -> tuple[list[Path], dict[str, Any]]:
    """The paths to archive (relative to the cage's directory) and the manifest's secrets."""
    root = cage.root
    paths = [Path(f) for f in FILES if (root / f).is_file()]
    for name in ROTATED:
        paths += [p.relative_to(root) for p in sorted(root.glob(f"{name}*")) if p.is_file()]
    for name in DIRECTORIES:
        if (root / name).is_dir() and not (root / name).is_symlink():
            paths.append(Path(name))
    secrets_dir = root / SECRETS
    stored = sorted(p.name for p in secrets_dir.iterdir()) if secrets_dir.is_dir() else []
    sealed = [n for n in stored if n.endswith(SEALED_BY_HOST)]
    others = [n for n in stored if n not in sealed and n != PLACEHOLDERS
              and not n.startswith(".")]
    keys = sorted({n.removesuffix(".cred") for n in sealed} | _book_names(secrets_dir))
    info: dict[str, Any] = {"included": False, "keys": keys}
    if others:
        info["note"] = ("the encrypted-file store's key lies beside it (it would travel "
                        "readable) and plaintext is plaintext: not included")
    if with_secrets and others:
        raise ConfigError(
            f"cage {cage.name}: --with-secrets takes only secrets sealed by systemd-creds; this "
            "cage's store is encrypted-file or plaintext, whose key or values would be in the "
            "file readable. Back up without --with-secrets and set them again after restore")
    if with_secrets and sealed:
        paths += [Path(SECRETS) / n for n in sealed]
        if PLACEHOLDERS in stored:
            paths.append(Path(SECRETS) / PLACEHOLDERS)
        info = {"included": True, "keys": keys, "sealed_by": "systemd-creds, this machine's "
                "host key: restorable on this machine only"}
    return paths, info


def _book_names(secrets_dir: Path) -> set[str]:
    """The names of the cage's secrets, from its placeholder book (names, never values), so
    that a manifest names them whatever store holds them."""
    from agentcage.secrets.book import PlaceholderBook
    from agentcage.secrets.errors import SecretStoreError

    try:
        return set(PlaceholderBook(secrets_dir).load())
    except SecretStoreError:
        return set()


def backup(store: StateStore, name: str, output: Path, with_secrets: bool = False
           ) -> dict[str, Any]:
    """Write the backup of cage `name` to `output` (atomically); its manifest."""
    cage = store.cage(name)
    if not cage.exists():
        raise StateError(f"no cage named {name!r}; see `agentcage ls`")
    paths, secrets = _members(cage, with_secrets)
    manifest = {"format": FORMAT, "version": VERSION, "name": name,
                "created_at": time.time(), "members": [str(p) for p in paths],
                "secrets": secrets}
    if output.exists() and output.is_dir():
        raise ConfigError(f"{output} is a directory; give a file name (-o FILE.tar.gz)")
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # it holds the CA key
        with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w:gz") as tar:
            data = json.dumps(manifest, indent=2).encode()
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o600
            tar.addfile(info, io.BytesIO(data))
            for path in paths:
                tar.add(cage.root / path, arcname=str(PurePosixPath(ROOT) / path.as_posix()),
                        filter=_no_links)
        os.replace(tmp, output)
    except OSError as e:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise ConfigError(f"cannot write {output}: {e.strerror}") from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return manifest


def _no_links(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Regular files and directories only: a link the agent made in its volume is left out
    (restored, it could point anywhere)."""
    return info if info.isfile() or info.isdir() else None


def _checked_members(tar: tarfile.TarFile) -> tuple[dict[str, Any], list[tarfile.TarInfo]]:
    members = []
    manifest = None
    for count, member in enumerate(tar, 1):
        if count > MAX_MEMBERS:
            raise ConfigError(f"more than {MAX_MEMBERS} members: not a cage's backup")
        path = PurePosixPath(member.name)
        if path.is_absolute() or ".." in path.parts:
            raise ConfigError(f"member {member.name!r} leaves the backup's directory")
        if not (member.isfile() or member.isdir()):
            raise ConfigError(f"member {member.name!r} is not a file or a directory")
        if member.name == MANIFEST:
            if member.size > 16 * 1024 * 1024:
                raise ConfigError("its manifest is too large")
            extracted = tar.extractfile(member)
            assert extracted is not None
            try:
                manifest = json.loads(extracted.read())
            except ValueError:
                raise ConfigError("its manifest is not JSON") from None
            continue
        if path.parts[0] != ROOT or len(path.parts) < 2:
            raise ConfigError(f"member {member.name!r} is outside {ROOT}/")
        members.append(member)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ConfigError("no manifest of a cage's backup")
    if manifest.get("version") != VERSION:
        raise ConfigError(f"backup format version {manifest.get('version')!r}; this agentcage "
                          f"reads version {VERSION}")
    return manifest, members


def restore(store: StateStore, archive: Path, name: str | None = None) -> dict[str, Any]:
    """A new cage, stopped, from `archive`; its manifest (with the name restored as)."""
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            manifest, members = _checked_members(tar)
            new_name = name or str(manifest.get("name", ""))
            cage = store.cage(new_name)  # refuses an invalid name
            if cage.root.exists():
                raise StateError(f"{new_name!r} is in use: restore with --name NEW, or destroy "
                                 "it first")
            staging = Path(tempfile.mkdtemp(prefix=".restore-", dir=_ensure(store.cages_dir)))
            try:
                tar.extractall(staging, members=members, filter="data")
                _owners_of_volumes(staging, members)
                restored = staging / ROOT
                if not (restored / "cage.yaml").is_file():
                    raise ConfigError("it holds no cage.yaml")
                if new_name != manifest.get("name"):
                    _rename(restored, new_name)
                os.chmod(restored, 0o700)
                restored.rename(cage.root)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except (tarfile.TarError, EOFError, OSError, ValueError, KeyError, TypeError,
            ImportError) as e:
        detail = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise ConfigError(f"{archive}: not a readable cage backup ({detail})") from None
    write_json(cage.runtime, {"status": "stopped"})
    return {**manifest, "restored_as": new_name}


def _owners_of_volumes(staging: Path, members: list[tarfile.TarInfo]) -> None:
    """The named volumes' files back to the uids that owned them (the workload's: it must
    still write its own state; the `data` filter extracts everything as the restorer's).
    The rest stays the restorer's. As root only: a rootless user's volumes are all theirs."""
    from agentcage import rootless

    if os.geteuid() != 0 or rootless.active():
        return
    for member in members:
        parts = PurePosixPath(member.name).parts
        if len(parts) >= 3 and parts[1] == VOLUMES:
            os.chown(staging / member.name, member.uid, member.gid, follow_symlinks=False)


def _ensure(directory: Path) -> Path:
    from agentcage.state import ensure_private_dir

    ensure_private_dir(directory.parent)
    return ensure_private_dir(directory)


def _rename(root: Path, new: str) -> None:
    """The restored cage's own name in its configuration files."""
    import yaml  # the state's cage.yaml is document_text's YAML (JSON-like, not JSON)

    doc = yaml.safe_load((root / "cage.yaml").read_text())
    doc["name"] = new
    from agentcage.config.document import document_text

    text = document_text(doc)
    (root / "cage.yaml").write_text(text)
    form_path = root / "cage.form.json"
    if form_path.exists():
        import hashlib

        form = json.loads(form_path.read_text())
        form["document"]["name"] = new
        form["sha256"] = hashlib.sha256(text.encode()).hexdigest()
        form_path.write_text(json.dumps(form, indent=2, sort_keys=True) + "\n")
    source_path = root / "cage.source.json"
    if source_path.exists():
        source = json.loads(source_path.read_text())
        lines = source["text"].splitlines(keepends=True)
        for i, line in enumerate(lines):
            if line.startswith("name:"):
                lines[i] = f"name: {new}\n"
                break
        source["text"] = "".join(lines)
        source_path.write_text(json.dumps(source, indent=2, sort_keys=True) + "\n")
