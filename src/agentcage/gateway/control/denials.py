"""The cage's recent refusals, as the agent may read them (`GET /v1/denials`): what it tried
that the cage refused, so that it can ask for what it needs instead of guessing.

Fed with every audit record once written (gateway/audit.py observers), so each entry is what the
audit log says, masked (a credential the cage sent is a fingerprint there): the host, port,
layer and reason, and the time. Never a path, a query string, a body or a header.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

KEPT = 200
# Every layer that refuses what the cage sends: HTTP(S) and its CONNECTs, names, the upstream
# dial, WebSocket messages and the mail relays (a message or a login the relay refused).
LAYERS = ("outbound", "dns", "upstream", "websocket", "relay")


class Denials:
    def __init__(self, size: int = KEPT):
        self._entries: deque[dict[str, Any]] = deque(maxlen=size)
        self._lock = threading.Lock()  # the resolver's thread and the proxy's loop both write

    def observe(self, record: dict[str, Any]) -> None:
        if record.get("decision") != "blocked" or record.get("direction") not in LAYERS:
            return
        entry = {"ts": record.get("ts"), "host": record.get("host") or None,
                 "port": record.get("port"), "layer": record.get("direction"),
                 "by": record.get("by"), "reason": record.get("reason")}
        with self._lock:
            self._entries.append(entry)

    def last(self, count: int) -> list[dict[str, Any]]:
        with self._lock:
            entries = list(self._entries)
        return entries[-count:] if count > 0 else []
