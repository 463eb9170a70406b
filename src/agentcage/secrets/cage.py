"""A cage's secrets on the host: where they live, staging them for its gateway, the placeholders
its workload sees, and making a running gateway reload them.

- Store and placeholder book: `<cage dir>/secrets/` (backend from cage.yaml `secrets`).
- Staged copy for the gateway: `gateway_staging_path(cage)` on tmpfs (0600), written before the
  gateway starts and on every change, removed when the cage stops. The directory is named after
  the cage AND its state directory, so two state roots holding a cage of the same name (two
  users, two test runs) never share, overwrite or remove each other's staged secrets.
- The workload's environment: every env name with an injection rule and a stored value gets
  its placeholder instead (CageMeta.secret_env); a real value never enters the cage. A rule
  whose secret is not stored puts nothing there: an agent that reads one of several
  credentials (Claude Code: an API key before an OAuth token) then finds the one it has.
- Reload: SIGHUP to the gateway, which re-reads the staged file and acknowledges in
  `<cage dir>/gateway.secrets.json` with the placeholders in force (never values).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from agentcage.errors import BackendError
from agentcage.secrets.book import PlaceholderBook
from agentcage.secrets.staging import StagedSecret, collect, run_dir, stage, unstage
from agentcage.secrets.store import StoreChoice, open_store
from agentcage.state import CageDir

RELOAD_TIMEOUT = 10.0


def secrets_root(cage: CageDir) -> Path:
    return cage.root / "secrets"


def gateway_staging_path(cage: CageDir) -> Path:
    digest = hashlib.sha256(str(cage.root.resolve()).encode()).hexdigest()[:16]
    return run_dir() / f"{cage.name}-{digest}" / "secrets.json"


def reload_ack_path(cage: CageDir) -> Path:
    return cage.root / "gateway.secrets.json"


def book_of(cage: CageDir) -> PlaceholderBook:
    return PlaceholderBook(secrets_root(cage))


def store_of(cage: CageDir, backend: str, allow_plaintext: bool) -> StoreChoice:
    """The cage's secret store, of cage.yaml's `secrets.backend` (and `allow_plaintext`)."""
    return open_store(secrets_root(cage), backend, allow_plaintext)


def staged_for(cage: CageDir, backend: str, allow_plaintext: bool) -> tuple[StagedSecret, ...]:
    """Every stored secret of the cage with its placeholder (read on the host, never logged).

    A cage with no secret store and no injection rule has nothing to stage and opens no store."""
    book = book_of(cage)
    if not secrets_root(cage).exists():
        return ()
    store = store_of(cage, backend, allow_plaintext).store
    if not store.has_data():
        book.retain(())
        return ()
    book.retain(store.names())  # a placeholder that stands for no stored value goes
    return collect(store, book)


def stage_for_gateway(cage: CageDir, backend: str, allow_plaintext: bool) -> Path:
    """Write the gateway's staged copy (an empty list when there are no secrets), with the
    cage's state directory beside it (for `agentcage prune`: staging.stale_stagings)."""
    return stage(staged_for(cage, backend, allow_plaintext), gateway_staging_path(cage),
                 owner=cage.root.resolve())


def unstage_for_gateway(cage: CageDir) -> None:
    unstage(gateway_staging_path(cage))


def workload_env(cage: CageDir, names: Sequence[str]) -> dict[str, str]:
    """ENV -> placeholder for each name with an injection rule whose secret is stored (what
    the cage sees instead). A secret has a placeholder from when it is set until it is
    removed (secrets/service.py), so the book alone says which are stored."""
    if not names:
        return {}
    book = book_of(cage).load()
    return {name: str(book[name]) for name in names if name in book}


def reload_gateway(cage: CageDir, runtime: dict, timeout: float = RELOAD_TIMEOUT) -> None:
    """Make the running gateway re-read its staged secrets; return once it says it did (with the
    placeholders now staged), raise BackendError if it failed or did not answer."""
    from agentcage.backends.host import recorded_gateway
    from agentcage.secrets.staging import load_staged

    pid = runtime.get("gateway_pid")
    if runtime.get("status") != "running" or not pid:
        return  # not running: the next start stages and loads the current state
    if recorded_gateway(runtime, cage) is None:  # that pid, and still the process it was
        raise BackendError(f"the gateway of cage {cage.name} is not running; restart the cage")
    wanted = sorted(str(s.placeholder) for s in load_staged(gateway_staging_path(cage)))
    ack = reload_ack_path(cage)
    sent = time.time()
    os.kill(int(pid), signal.SIGHUP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            doc = json.loads(ack.read_text())
        except (OSError, ValueError):
            doc = {}
        if doc.get("ts", 0) >= sent:
            if not doc.get("ok"):
                raise BackendError(
                    f"the gateway of cage {cage.name} could not reload its secrets "
                    f"({doc.get('error')}); it now blocks every request — fix and retry"
                )
            if doc.get("placeholders") == wanted:
                return
        time.sleep(0.02)
    raise BackendError(f"the gateway of cage {cage.name} did not confirm the secrets reload")
