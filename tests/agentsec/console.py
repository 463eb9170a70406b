"""A real `agentsec ui` process for tests, and a raw HTTP client to talk to it (or attack it).

The console is started as the user starts it, its address and token read from what it prints;
every process is stopped in a finalizer, also when the test fails.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import select
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.agentsec.reports import AGENTSEC

START_TIMEOUT_S = 20
_URL = re.compile(r"(http://\S+/\?token=(\S+))")


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class RunningConsole:
    proc: subprocess.Popen[str]
    url: str
    host: str
    port: int
    token: str

    def request(self, method: str, path: str, headers: dict[str, str] | None = None,
                body: bytes | None = None, host: str | None = None) -> Reply:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", host if host is not None else f"{self.host}:{self.port}")
            for name, value in (headers or {}).items():
                conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()

    def api(self, method: str, path: str, doc: dict[str, Any] | None = None,
            token: str | None = "real") -> Reply:
        headers = {"Content-Type": "application/json"} if doc is not None else {}
        if token is not None:
            headers["X-Agentsec-Token"] = self.token if token == "real" else token
        body = json.dumps(doc).encode() if doc is not None else None
        return self.request(method, path, headers, body)

    def session_cookie(self) -> str:
        reply = self.request("GET", f"/?token={self.token}")
        assert reply.status == 303, reply
        return reply.headers["set-cookie"].split(";")[0]

    def alive(self) -> bool:
        return self.proc.poll() is None


def start(results: Path, *args: str, prefix: Sequence[str] = ()) -> RunningConsole:
    proc = subprocess.Popen(
        [*prefix, AGENTSEC, "ui", "--results", str(results), "--port", "0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    line = ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            break
        if proc.poll() is not None:
            break
    match = _URL.search(line)
    if not match:
        stop(proc)
        raise AssertionError(f"the console did not start: {line!r} {proc.stderr.read()!r}")
    parts = urlsplit(match.group(1))
    return RunningConsole(proc, match.group(1), parts.hostname or "", parts.port or 80,
                          match.group(2))


def stop(proc: subprocess.Popen[str]) -> str:
    """Stop the console (SIGTERM, then SIGKILL to its whole session); return its stderr."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                import os

                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    err = proc.stderr.read() if proc.stderr else ""
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()
    return err


@contextlib.contextmanager
def running(results: Path, *args: str, prefix: Sequence[str] = ()) -> Iterator[RunningConsole]:
    console = start(results, *args, prefix=prefix)
    try:
        yield console
    finally:
        stop(console.proc)
