"""Per-host token buckets: `requests_per_second` refill, `burst` capacity; bounded memory."""

from __future__ import annotations

import time
from collections import OrderedDict


class HostRateLimiter:
    def __init__(self, rate: float, burst: int, max_hosts: int = 4096, clock=time.monotonic):
        self.rate, self.burst, self.max_hosts, self._clock = rate, burst, max_hosts, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def allow(self, host: str) -> bool:
        now = self._clock()
        tokens, last = self._buckets.pop(host, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - last) * self.rate)
        ok = tokens >= 1.0
        self._buckets[host] = (tokens - 1.0 if ok else tokens, now)
        while len(self._buckets) > self.max_hosts:
            self._buckets.popitem(last=False)
        return ok
