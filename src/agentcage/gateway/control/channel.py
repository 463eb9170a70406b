"""The operator's way to the grants and the watcher: `agentcage cage grants NAME
approve|deny|revoke|promote|sync`, `agentcage watcher release|restore NAME`.

The CLI drops a request file into `control/` in the cage's state directory (root's, 0700: the
cage cannot reach it, so the agent can never approve its own request or write a grant), and
waits for the gateway's answer beside it. The gateway looks four times a second, applies each
request in the order written, answers, and removes it. One format, both sides, here.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from agentcage.gateway.control.ceiling import RequestError
from agentcage.gateway.control.grants import Grants

OPS = ("approve", "deny", "revoke", "promote", "sync", "release", "restore", "scan")
WATCHER_OPS = ("release", "restore", "scan")
MAX_REQUEST_BYTES = 4096
REQUEST_SUFFIX, ANSWER_SUFFIX = ".request.json", ".answer.json"


class ChannelError(Exception):
    """The gateway did not answer, or answered that it could not do it."""


def send(directory: Path, op: str, target: str = "", timeout: float = 5.0) -> dict[str, Any]:
    """Ask the running gateway of the cage whose control directory is `directory` to do `op`;
    its answer (ChannelError if it refused, or did not answer within `timeout`)."""
    from agentcage.state import atomic_write, ensure_private_dir

    if op not in OPS:
        raise ValueError(op)
    ensure_private_dir(directory)
    name = f"{time.time_ns():020d}-{os.urandom(4).hex()}"
    atomic_write(directory / (name + REQUEST_SUFFIX),
                 json.dumps({"op": op, "target": target}))
    answer = directory / (name + ANSWER_SUFFIX)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            doc = json.loads(answer.read_text())
        except (OSError, ValueError):
            time.sleep(0.02)
            continue
        answer.unlink(missing_ok=True)
        if not doc.get("ok"):
            raise ChannelError(str(doc.get("error") or "refused"))
        return dict(doc.get("result") or {})
    with contextlib.suppress(OSError):
        (directory / (name + REQUEST_SUFFIX)).unlink()
    raise ChannelError(f"the gateway did not answer within {timeout:g} s")


def apply(grants: Grants | None, op: str, target: str, watcher: Any = None) -> dict[str, Any]:
    """One operator request, applied to `grants` or `watcher` (watcher/watch.py) by the
    gateway, or by the CLI itself while the cage is stopped and nothing else writes them."""
    if op in WATCHER_OPS:
        if watcher is None:
            raise RequestError("this cage's watcher is off (watcher.enable: false)")
        if op == "scan":
            return watcher.scan_now()
        return watcher.release() if op == "release" else watcher.restore(target)
    if grants is None:
        raise RequestError("this cage has no policy API (policy_api.enable: false)")
    if op == "approve":
        return {"request": grants.approve(target).as_dict()}
    if op == "deny":
        return {"request": grants.deny(target).as_dict()}
    if op == "revoke":
        ended = grants.revoke(target)
        if not ended:
            raise RequestError(f"no grant {target!r} in force; see `agentcage cage grants "
                               "CAGE list`")
        return {"revoked": [g.as_dict() for g in ended]}
    if op == "promote":  # the domain is a lasting rule now: its connections stay
        released = grants.revoke(target, by="operator", why="promoted to a lasting rule",
                                 cut=False)
        if not released:
            raise RequestError(f"no grant {target!r} in force")
        return {"promoted": [g.as_dict() for g in released]}
    if op == "sync":
        grants.tick()
        return {"grants": len(grants.active())}
    raise RequestError(f"unknown operation {op!r}")


class OperatorChannel:
    """The gateway's side: polled from its event loop."""

    def __init__(self, directory: Path, grants: Grants | None, watcher: Any = None):
        self.directory, self.grants, self.watcher = directory, grants, watcher

    def poll(self) -> None:
        from agentcage.state import atomic_write

        try:
            names = sorted(p.name for p in self.directory.iterdir()
                           if p.name.endswith(REQUEST_SUFFIX))
        except FileNotFoundError:
            return
        for filename in names:
            path = self.directory / filename
            try:
                raw = path.read_bytes()
            except OSError:
                continue
            path.unlink(missing_ok=True)
            try:
                if len(raw) > MAX_REQUEST_BYTES:
                    raise RequestError("request too large")
                doc = json.loads(raw)
                op, target = str(doc["op"]), str(doc.get("target", ""))
                answer = {"ok": True, "result": apply(self.grants, op, target, self.watcher)}
            except (RequestError, ValueError, KeyError, TypeError) as e:
                answer = {"ok": False, "error": str(e)}
            if self.grants is not None:  # what the CLI reads next is what it asked for
                self.grants.flush()
            stem = filename[: -len(REQUEST_SUFFIX)]
            with contextlib.suppress(OSError):
                atomic_write(self.directory / (stem + ANSWER_SUFFIX), json.dumps(answer))
