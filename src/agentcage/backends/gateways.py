"""A cage's gateway process: how it comes to be, and how it is recognised afterwards.

Two ways to start one; either way the process then runs the same code (gateway/main.py `run`):
- spawned: `python -m agentcage.gateway --settings ... --wait ...`, which imports mitmproxy
  itself (most of a cold start), while the network is being built;
- forked by the gateway zygote of the state root (zygote.py; gateway/zygote.py), which imported
  it once for every cage: when the backend is asked to use one (the CLI does). A running zygote
  is asked for the fork early, so that the fork and the gateway's CA are made while the network
  is built (the gateway runs nothing of the cage before it is recorded and let go); a zygote
  that is not running yet is started early, so that its imports overlap the network's
  construction as a spawned gateway's do. Whenever a zygote cannot be used, the gateway is
  spawned.

runtime.json records the gateway's pid and start time (together, its identity): `stop` and a
secrets reload signal the recorded pid only while it is still that process.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from agentcage import procfs
from agentcage.backends import host
from agentcage.backends import zygote as zygotes
from agentcage.backends.sandbox import DEFAULT_PATH
from agentcage.state import CageDir, ensure_private_dir

READY_TIMEOUT = 30.0


def gateway_environment() -> dict[str, str]:
    """The gateway's whole environment: built, not inherited. Whoever ran `agentcage` may have
    API keys or tokens exported; the gateway holds staged secrets only in its memory, from the
    staging file, so nothing of the caller's environment belongs in it. (A zygote gets the same,
    and its children inherit it.)"""
    # The package's own import root, in case it runs from a source tree rather than a venv.
    return {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8", "PYTHONPATH": zygotes.import_root()}


@dataclass(frozen=True)
class GatewayProcess:
    pid: int
    start: int | None  # its start time (clock ticks since boot): None if it already ended
    popen: subprocess.Popen | None = None  # when it is our child
    forked: zygotes.Forked | None = None  # when the zygote forked it: it waits for `go`

    def ended(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is not None
        return not host.is_process(self.pid, self.start)

    def go(self) -> None:
        """Once its pid and start time are recorded: a forked gateway may run (a spawned one
        runs already, waiting for its settings)."""
        if self.forked is not None:
            self.forked.go()

    def close(self) -> None:
        """A forked gateway not let go exits."""
        if self.forked is not None:
            self.forked.close()


@dataclass
class Pending:
    """A gateway on its way: already spawned (it waits for its settings), or to be forked by
    the zygote (asked for already, or once the settings are written)."""

    process: GatewayProcess | None = None
    zygote: zygotes.Client | None = None
    requested: zygotes.Requested | None = None  # the fork asked for early, not taken yet

    def close(self) -> None:
        """A fork asked for and not taken exits (a spawned process is stopped as the cage
        is: by identity)."""
        if self.requested is not None:
            self.requested.close()
            self.requested = None


class Launcher:
    """Starts the gateways of one state root. `extra_env`: added to the gateway's environment
    (test hooks; a gateway with any is always spawned); `use_zygote`: fork gateways from the
    state root's zygote whenever it can be used."""

    def __init__(self, root: Path, extra_env: dict[str, str] | None = None,
                 use_zygote: bool = False):
        self.root = root
        self.extra_env = dict(extra_env or {})
        self.use_zygote = use_zygote and not self.extra_env and zygotes.usable(root)

    def early(self, cage: CageDir) -> Pending:
        """Begin the slow part before the network is built."""
        self._prepare(cage)
        if self.use_zygote:
            client = zygotes.Client(self.root, gateway_environment())
            log = self._log(cage)
            try:
                requested = client.request_fork(cage.gateway_settings, log, READY_TIMEOUT)
            finally:
                os.close(log)
            if requested is None:
                client.warm()
            return Pending(zygote=client, requested=requested)
        return Pending(process=self._spawn(cage))

    def launch(self, cage: CageDir, pending: Pending) -> GatewayProcess:
        """The cage's gateway, once gateway.json is written. A forked one runs once told to
        (`go`, after its identity is recorded)."""
        if pending.process is not None:
            return pending.process
        assert pending.zygote is not None
        if pending.requested is not None:
            requested, pending.requested = pending.requested, None
            try:
                forked = requested.result(timeout=READY_TIMEOUT)
                return GatewayProcess(forked.pid, forked.start, forked=forked)
            except zygotes.Unusable:
                pass  # asked again, as if it had not been asked early (a stale one replaced)
        log = self._log(cage)
        try:
            forked = pending.zygote.fork_gateway(cage.gateway_settings, log, READY_TIMEOUT,
                                                 timeout=READY_TIMEOUT)
            return GatewayProcess(forked.pid, forked.start, forked=forked)
        except zygotes.Unusable as e:
            with contextlib.suppress(OSError):
                os.write(log, f"agentcage: the gateway zygote was not used ({e}); "
                              "spawning the gateway\n".encode())
        finally:
            os.close(log)
        return self._spawn(cage)

    def _prepare(self, cage: CageDir) -> None:
        ensure_private_dir(cage.ca_dir)
        # a mark left by an earlier start must never let this one's gateway in early
        for stale in (cage.gateway_ready, cage.gateway_network, cage.gateway_settings):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()

    @staticmethod
    def _log(cage: CageDir) -> int:
        return os.open(cage.gateway_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC,
                       0o600)

    def _spawn(self, cage: CageDir) -> GatewayProcess:
        log = self._log(cage)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "agentcage.gateway", "--settings",
                 str(cage.gateway_settings), "--wait", str(READY_TIMEOUT)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                env={**gateway_environment(), **self.extra_env},
            )
        finally:
            os.close(log)
        return GatewayProcess(proc.pid, procfs.start_time(proc.pid), proc)
