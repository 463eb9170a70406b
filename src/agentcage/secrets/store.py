"""The secret store interface, and `open_store`, which picks a backend and says which and why.

A store keeps named byte values for one cage. Values go in and out as bytes, never through a
process's arguments, never into a log or an exception message. Backends, strongest first:
`systemd-creds` (host key, one credential file per name), `encrypted-file` (AES-256-GCM with a
0600 key file) and `plaintext` (explicit opt-in only, with a warning).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from agentcage.secrets.errors import SecretStoreError, StoreUnavailable

Backend = Literal["systemd-creds", "encrypted-file", "plaintext"]
# cage.yaml also names `keychain` (macOS); on Linux it is reported unavailable with the fix.
BACKENDS: tuple[Backend, ...] = ("systemd-creds", "encrypted-file", "plaintext")
PLAINTEXT_WARNING = (
    "secrets are stored UNENCRYPTED (plaintext backend); anyone who can read "
    "{path} can read them. Use backend auto, systemd-creds or encrypted-file."
)


class SecretStore(Protocol):
    backend: Backend
    root: Path

    def set(self, name: str, value: bytes) -> None: ...

    def get(self, name: str) -> bytes: ...

    def names(self) -> list[str]: ...

    def remove(self, name: str) -> bool: ...

    def has_data(self) -> bool: ...


@dataclass(frozen=True)
class StoreChoice:
    store: SecretStore
    backend: Backend
    reason: str  # why this backend: shown to the user by the CLI
    warning: str | None = None


def _make(backend: Backend, root: Path) -> SecretStore:
    # Imported here so a host without one backend's helpers can still use the others.
    if backend == "systemd-creds":
        from agentcage.secrets.creds import SystemdCredsStore

        return SystemdCredsStore(root)
    if backend == "encrypted-file":
        from agentcage.secrets.filestore import EncryptedFileStore

        return EncryptedFileStore(root)
    from agentcage.secrets.filestore import PlaintextStore

    return PlaintextStore(root)


def availability(backend: Backend, root: Path) -> StoreUnavailable | None:
    """None when `backend` works here; otherwise the reason and the fix."""
    store = _make(backend, root)
    check = getattr(store, "check_available", None)
    if check is None:
        return None
    try:
        check()
    except StoreUnavailable as e:
        return e
    return None


def open_store(root: Path, backend: str = "auto", allow_plaintext: bool = False) -> StoreChoice:
    """The store under `root` (a cage's `secrets/` directory) for the configured backend.

    `auto` keeps using a backend that already holds secrets here (switching would hide them),
    otherwise takes the strongest that works. It never picks plaintext.
    """
    if backend == "plaintext":
        if not allow_plaintext:
            raise SecretStoreError(
                "the plaintext backend needs an explicit opt-in (secrets.allow_plaintext: true)"
            )
        store = _make("plaintext", root)
        return StoreChoice(store, "plaintext", "configured", PLAINTEXT_WARNING.format(path=root))
    if backend in ("systemd-creds", "encrypted-file"):
        if (problem := availability(backend, root)) is not None:  # type: ignore[arg-type]
            raise problem
        return StoreChoice(_make(backend, root), backend, "configured")  # type: ignore[arg-type]
    if backend == "keychain":
        raise StoreUnavailable(
            "keychain",
            "the macOS Keychain does not exist on this host",
            "set secrets.backend to auto, systemd-creds or encrypted-file",
        )
    if backend != "auto":
        raise SecretStoreError(f"unknown secret backend {backend!r}; use auto or {BACKENDS}")
    holding = [b for b in BACKENDS if _make(b, root).has_data()]
    if holding == ["plaintext"] and not allow_plaintext:
        raise SecretStoreError(
            f"{root} holds plaintext secrets; set secrets.allow_plaintext: true to read them, "
            "then move them to an encrypted backend"
        )
    if len(holding) == 1:
        # Not probed again: it held this cage's secrets, and if it stopped working its first
        # read says so, with the tool's own reason (the probe is two tool runs, paid by every
        # start of the cage otherwise).
        chosen = holding[0]
        warning = PLAINTEXT_WARNING.format(path=root) if chosen == "plaintext" else None
        return StoreChoice(
            _make(chosen, root), chosen, "already holds this cage's secrets", warning
        )
    if len(holding) > 1:
        raise SecretStoreError(
            f"{root} holds secrets in several backends ({', '.join(holding)}); "
            "set secrets.backend explicitly"
        )
    problems: list[str] = []
    for candidate in ("systemd-creds", "encrypted-file"):
        problem = availability(candidate, root)
        if problem is None:
            reason = "strongest available" + (f" ({problems[0]})" if problems else "")
            return StoreChoice(_make(candidate, root), candidate, reason)
        problems.append(str(problem))
    raise SecretStoreError("no encrypted secret backend works here: " + "; ".join(problems))
