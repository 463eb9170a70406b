"""`agentcage ls`: the rows, read from the state directories, and their text.

Both the full CLI and the lean path (lean.py) list cages through here, so the two cannot
differ. The rows need the state files and a look at /proc, nothing else: this module imports
no more than that (no click, rich, pydantic or backend), and renders the listing itself, with
the layout of output.py's listings (agentsec/render/lines.py: short fixed fields first, the
name last and whole) and, on a terminal, the same styles rich gives them.
"""

from __future__ import annotations

import json
import os
import sys

from agentcage import procfs
from agentcage.errors import AgentcageError
from agentcage.state import KEPT, CageDir, StateStore, read_json

TYPE_CHECKING = False  # (typing.TYPE_CHECKING, without importing typing: `ls` is lean)
if TYPE_CHECKING:
    from typing import Any

DOCUMENT_VERSION = 1  # output.document's (a test holds them equal)
_BOLD, _GREEN, _YELLOW, _RESET = "\x1b[1m", "\x1b[32m", "\x1b[33m", "\x1b[0m"


def status(cage: CageDir) -> dict:
    """runtime.json, `broken` when it says running and its gateway is gone (the end recorded
    in the audit log unless its supervisor did). The namespace backend's `status` too."""
    path = cage.file("runtime.json")
    runtime = read_json(path, dict) if os.path.exists(path) else {"status": "stopped"}
    if runtime.get("status") != "running":
        return runtime
    if procfs.recorded_gateway(runtime, cage) is None:
        runtime = {**runtime, "status": "broken"}
        pid = runtime.get("gateway_pid")
        from agentcage.gateway import obituary

        obituary.notice(cage.audit, int(pid) if pid else None)
    return runtime


def _lifecycle(cage: CageDir) -> str:
    meta = read_json(cage.file("meta.json"), dict)
    if isinstance(meta.get("lifecycle"), str):
        return meta["lifecycle"]
    from agentcage.backends.profile import load_meta  # its one-line refusal of a damaged one

    return load_meta(cage.root / "meta.json").lifecycle


def rows(store: StateStore) -> list[dict[str, Any]]:
    """One row per name: its status and lifecycle, and what it keeps (secrets, volumes). A
    name with only kept things and no cage (a project's runs between two runs, a cage
    destroyed with --keep-*) is `kept`."""
    found = []
    for name in store.names():
        cage = store.cage(name)
        kept = [k for k in KEPT if os.path.isdir(cage.file(k))]
        if cage.only_kept():
            found.append({"name": name, "status": "kept", "lifecycle": "-", "kept": kept})
            continue
        try:
            state, lifecycle = status(cage).get("status", "unknown"), _lifecycle(cage)
        except AgentcageError:
            state, lifecycle = "broken", "?"
        found.append({"name": name, "status": state, "lifecycle": lifecycle, "kept": kept})
    return found


def document(found: list[dict[str, Any]]) -> str:
    """`ls --json`: output.document's shape."""
    doc = {"tool": "agentcage", "kind": "cages", "schema_version": DOCUMENT_VERSION,
           "cages": found}
    return json.dumps(doc, indent=2) + "\n"


def styled() -> bool:
    """Whether stdout takes rich's styles: a terminal, and no NO_COLOR or TERM=dumb (what
    rich's Console decides for the full CLI; FORCE_COLOR styles a pipe too)."""
    env = os.environ
    if env.get("FORCE_COLOR"):
        return True
    if env.get("NO_COLOR") or env.get("TERM", "") in ("dumb", "unknown"):
        return False
    try:
        return os.isatty(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return False


def text(found: list[dict[str, Any]], color: bool) -> str:
    """The listing: STATUS (8) and LIFECYCLE (10) padded, one space apart, then the name."""
    if not found:
        return "no cages\n"

    def paint(value: str, style: str) -> str:
        return f"{style}{value}{_RESET}" if color and style else value

    lines = [paint(f"{'STATUS':8} {'LIFECYCLE':10} NAME", _BOLD)]
    for row in found:
        state = str(row["status"])
        shown = paint(f"{state:8}", _GREEN if state == "running" else _YELLOW)
        lines.append(f"{shown} {row['lifecycle']!s:10} {row['name']}")
    return "\n".join(lines) + "\n"
