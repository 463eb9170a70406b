"""Start a server process inside a namespace, wait until it is ready, stop it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import fakenet
from fakenet.errors import FakeNetError
from fakenet.serverconfig import Listener, ServerConfig

_POLL_S = 0.01


class ServerProcess:
    """One `python -m fakenet.servers` process; its files live in `workdir`."""

    def __init__(self, netns: str, workdir: Path, listeners: tuple[Listener, ...], *,
                 zone: dict[str, dict[str, list[str]]] | None = None,
                 catch_all: dict[str, list[str]] | None = None,
                 cert_file: str | None = None, key_file: str | None = None,
                 model_script: str | None = None, sites_dir: str | None = None,
                 mail_accounts: str | None = None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.netns = netns
        self.workdir = workdir
        self.records_dir = workdir / "records"
        self._ready = workdir / "ready"
        self._log = workdir / "server.log"
        self._config_file = workdir / "config.json"
        self._config = ServerConfig(
            records_dir=str(self.records_dir),
            ready_file=str(self._ready),
            parent_pid=os.getpid(),
            listeners=listeners,
            zone=zone or {},
            catch_all=catch_all,
            cert_file=cert_file,
            key_file=key_file,
            model_script=model_script,
            sites_dir=sites_dir,
            mail_accounts=mail_accounts,
        )
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self, timeout: float) -> None:
        self._config.write(self._config_file)
        env = dict(os.environ)
        # The child must import this very fakenet, even when it is not installed in the venv.
        package_root = str(Path(fakenet.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        with open(self._log, "wb") as log:
            self._proc = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, sys.executable, "-m", "fakenet.servers",
                 "--config", str(self._config_file)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,  # a Ctrl-C meant for the test run reaches us via close()
            )
        deadline = time.monotonic() + timeout
        while not self._ready.exists():
            if self._proc.poll() is not None:
                raise FakeNetError(
                    f"fakenet servers in {self.netns} failed to start: {self._failure()}"
                )
            if time.monotonic() > deadline:
                raise FakeNetError(
                    f"fakenet servers in {self.netns} not ready after {timeout:g} s "
                    f"(log: {self._log_tail() or 'empty'})"
                )
            time.sleep(_POLL_S)

    def stop(self) -> None:
        """Terminate (then kill) the process; safe to call twice or before start."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=3)

    def _failure(self) -> str:
        try:
            return self._config.error_file.read_text()
        except FileNotFoundError:
            return self._log_tail() or "exited without a reason"

    def _log_tail(self) -> str:
        try:
            return self._log.read_text(errors="replace").strip()[-800:]
        except FileNotFoundError:
            return ""
