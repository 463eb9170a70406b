"""A file that copies the gateway's in-memory state for other processes (grants.json for the
CLI and for the gateway's next start), written without holding up the event loop.

The state is the gateway's; the file only lags it. A change marks the copy stale; on the event
loop, one task waits a moment (DELAY: the answer that made the change goes out first, and a
burst of changes is written once), renders the latest state and hands the write (atomic,
fsynced) to a worker thread, so a decision never waits for the disk; changes made meanwhile
are written together by the next round (the latest state wins). Where no loop runs (the CLI
changing the file of a stopped cage, a thread of the gateway's other than the loop's), the
write is made at once.
`flush()` writes what is stale before it returns: the operator's channel answers after it, so
the CLI reads what it asked for, and the gateway's last act at shutdown is one. `written()`
waits, without holding up the loop, until the file holds every change made before it was
called: an answer that tells someone of a change is sent after it, so whoever reads the file
next (the operator's `list`) finds what that answer said.

Every write carries the number of the change it was rendered at, under one lock: a write
rendered earlier never replaces one rendered later, whichever thread finishes first.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

DELAY = 0.01  # seconds from a change to its write


class StateCopy:
    def __init__(self, path: Path, render: Callable[[], str],
                 failed: Callable[[OSError], None]):
        """`render`: the file's text, from the state as it is now (called on the thread that
        changes the state); `failed`: told when a write fails (the state holds either way)."""
        self.path, self._render, self._failed = path, render, failed
        self._changes = 0  # changes made to the state
        self._written = 0  # the change the file on disk was rendered at
        self._lock = threading.Lock()
        self._task: asyncio.Task[None] | None = None

    def changed(self) -> None:
        """The state changed: the file is written soon, or now where no loop runs here."""
        self._changes += 1
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain())

    async def written(self) -> None:
        """Until the file holds every change made so far (or writing it failed, which was
        said): the loop serves other work meanwhile."""
        change = self._changes
        while self._written < change:
            if self._task is None or self._task.done():
                self._task = asyncio.get_running_loop().create_task(self._drain())
            task = self._task
            await asyncio.shield(task)
            if self._written < change and task.done():
                return  # the write failed (said by `failed`); the state holds either way

    def flush(self) -> None:
        """Write the state now if the file lags it (blocking: for rare moments only)."""
        if self._changes > self._written:
            self._write_or_say(self._changes, self._render())

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(DELAY)
        while self._changes > self._written:
            change = self._changes
            text = self._render()
            await loop.run_in_executor(None, self._write_or_say, change, text)
            if self._written < change:  # it failed, and was said: the next change retries
                return

    def _write_or_say(self, change: int, text: str) -> None:
        from agentcage.state import atomic_write

        with self._lock:
            if change <= self._written:
                return  # a later rendering is on disk already
            try:
                atomic_write(self.path, text)
            except OSError as e:
                self._failed(e)
                return
            self._written = change
