"""The live policy: reloaded when domains.json changes; an invalid file blocks everything."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from agentcage.gateway.audit import AuditRecord
from agentcage.policy import Policy, PolicyFileError, read_policy


class PolicyHolder:
    """Holds the current compiled Policy. `check()` reloads if the file changed.

    Fail closed: a missing, unreadable or invalid file replaces the policy with deny-all (not
    the last good one), and says so in the audit log, until a valid file appears.
    """

    def __init__(self, path: Path, audit: Callable[[AuditRecord], object],
                 ack_path: Path | None = None):
        self.path = Path(path)
        self._audit = audit
        self._ack_path = ack_path
        self._stamp: tuple[int, int, int] | None = None
        self._loaded = False
        self.current: Policy = Policy.deny_all("policy not loaded yet")
        self.check()

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def check(self) -> bool:
        """Reload if the file changed; True if a reload happened."""
        stamp = self._file_stamp()
        if self._loaded and stamp == self._stamp:
            return False
        self._loaded, self._stamp = True, stamp
        try:
            self.current = read_policy(self.path)
        except PolicyFileError as e:
            self.current = Policy.deny_all(f"policy file invalid, blocking everything: {e}")
            self._audit(
                AuditRecord("config", "blocked", self.current.deny_reason or "", by="policy")
            )
            self._acknowledge(stamp, self.current.deny_reason)
            return True
        loaded = f"policy loaded ({self.path.name})"
        self._audit(AuditRecord("config", "allowed", loaded, by="policy"))
        self._acknowledge(stamp, None)
        return True

    def _acknowledge(self, stamp: tuple[int, int, int] | None, error: str | None) -> None:
        """Tell the CLI which version of the file is in force, so `domain add` returns only
        once it is (a policy, never a secret)."""
        if self._ack_path is None:
            return
        from agentcage.state import atomic_write

        doc = {"stamp": list(stamp) if stamp else None, "ok": error is None, "error": error,
               "ts": time.time()}
        try:  # not flushed to the disk: it speaks of this process, which a host crash ends
            atomic_write(self._ack_path, json.dumps(doc), durable=False)
        except OSError as e:  # the policy is in force either way; the CLI will say it waited
            self._audit(AuditRecord("config", "flagged", f"cannot write {self._ack_path}: {e}",
                                    by="policy"))

    async def watch(self, interval: float = 0.25) -> None:
        while True:
            await asyncio.sleep(interval)
            self.check()
