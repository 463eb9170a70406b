"""Giving back the memory of a large body once its flow is over.

A mitmproxy flow sits in reference cycles, so it is freed by Python's cycle collector, not when
the last hook returns; a flow that lived long enough (a large upload takes seconds) waits for
a full collection, which may not come for a long time: a 100 MiB upload left the gateway
100 MiB larger. After a flow with a large body ends, one full collection is run a moment
later, when mitmproxy has let go of the flow (at most one pending at a time; a collection
costs tens of milliseconds, once per large body).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from typing import Any

LARGE = 8 * 1024 * 1024  # bodies from this size are worth a collection
DELAY = 1.0  # seconds: mitmproxy finishes with the flow after its last hook


def body_size(flow: Any) -> int:
    size = 0
    for message in (flow.request, flow.response):
        with contextlib.suppress(Exception):
            raw = message.raw_content if message is not None else None
            size = max(size, len(raw or b""))
    return size


class Reclaimer:
    def __init__(self, large: int = LARGE, delay: float = DELAY):
        self.large, self.delay = large, delay
        self._pending: asyncio.TimerHandle | None = None
        self.collections = 0

    def flow_ended(self, flow: Any, streamed: int = 0) -> None:
        """A flow is over; `streamed`: bytes of a streamed body (not held, but its pieces
        were)."""
        if max(body_size(flow), streamed) < self.large or self._pending is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no proxy running (unit tests): nothing to wait for
            return
        self._pending = loop.call_later(self.delay, self._collect)

    def _collect(self) -> None:
        self._pending = None
        self.collections += 1
        gc.collect()
