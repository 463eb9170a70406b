"""Polling for records: servers write them a moment after the bytes arrive."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until[T](predicate: Callable[[], T], timeout: float = 3.0, interval: float = 0.01) -> T:
    """Call `predicate` until it returns something truthy or `timeout` passes; return its value.

    The last value is returned even when falsy, so `assert wait_until(...)` reads naturally.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)
