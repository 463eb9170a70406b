"""The operator's view of a cage's watcher (`agentcage watcher status|findings NAME`): what the
gateway last wrote to watcher.json. Changes (release, restore) go through `grants.change`,
the one way an operator's change reaches the gateway."""

from __future__ import annotations

import json
from typing import Any

from agentcage.errors import StateError
from agentcage.state import CageDir


def read(cage: CageDir) -> dict[str, Any]:
    """watcher.json as the gateway last wrote it (a cage it never alarmed has none)."""
    try:
        doc = json.loads(cage.watcher.read_text())
    except FileNotFoundError:
        return {"status": {}, "findings": [], "revoked": []}
    except (OSError, ValueError) as e:
        raise StateError(f"{cage.watcher} is unreadable ({e}); the gateway rewrites it at its "
                         "next finding") from None
    if not isinstance(doc, dict):
        raise StateError(f"{cage.watcher} is not a watcher file")
    return {"status": dict(doc.get("status") or {}), "findings": list(doc.get("findings", [])),
            "revoked": list(doc.get("revoked", []))}


def status(cage: CageDir, enabled: bool, now: float,
           doc: dict[str, Any] | None = None) -> dict[str, Any]:
    """The watcher's state as the operator sees it; `doc`: watcher.json as `read` gave it
    (read now when not given)."""
    doc = read(cage) if doc is None else doc
    state = doc["status"]
    until = state.get("quarantined_until")
    return {"enable": enabled,
            "quarantined": bool(until and float(until) > now),
            "quarantined_until": until if until and float(until) > now else None,
            "strikes": int(state.get("strikes") or 0),
            "findings": int(state.get("findings") or len(doc["findings"])),
            "by_budget": dict(state.get("by_budget") or {}),
            "revoked": [g.get("id") for g in doc["revoked"]],
            "reread": bool(state.get("reread")),
            "last_scan": state.get("last_scan"),
            "information_bytes": state.get("information_bytes"),
            "information_budget": state.get("information_budget"),
            "last_finding": state.get("last_finding")}
