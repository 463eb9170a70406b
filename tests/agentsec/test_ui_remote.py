"""The console bound off loopback: read-only unless --allow-remote-runs, Host still checked.

The non-loopback address lives in a network namespace this test creates, with the console, the
client and the browser inside it, so no packet leaves the namespace.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agentsec import browser
from tests.agentsec import console as ui
from tests.agentsec.reports import leaky, report, save_all

CLIENT = r"""
import http.client, json, sys
host, port, method, path, headers, body = json.loads(sys.argv[1])
conn = http.client.HTTPConnection(host, port, timeout=60)
conn.putrequest(method, path, skip_host=True)
for k, v in headers.items():
    conn.putheader(k, v)
data = body.encode() if body is not None else None
if data is not None:
    conn.putheader("Content-Length", str(len(data)))
conn.endheaders(data)
r = conn.getresponse()
print(json.dumps({"status": r.status, "body": r.read().decode()}))
"""


@pytest.fixture
def netns() -> Iterator[tuple[str, str]]:
    assert shutil.which("ip"), "iproute2 is installed by scripts/setup.sh"
    name = f"asui-{secrets.token_hex(3)}"
    address = f"10.200.{200 + secrets.randbelow(50)}.{1 + secrets.randbelow(250)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "-n", name, "addr", "add", f"{address}/32", "dev", "lo"],
                       check=True)
        yield name, address
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _http(ns: str, console: ui.RunningConsole, method: str, path: str,
          headers: dict[str, str] | None = None, body: str | None = None,
          host: str | None = None) -> dict:
    headers = {"Host": host or f"{console.host}:{console.port}", **(headers or {})}
    args = json.dumps([console.host, console.port, method, path, headers, body])
    proc = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", CLIENT, args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    save_all(tmp_path / "reports", [report(leaky(), "remote-view")])
    return tmp_path / "reports"


def _run(ns, console) -> dict:
    return _http(ns, console, "POST", "/api/runs",
                 {"X-Agentsec-Token": console.token, "Content-Type": "application/json"},
                 json.dumps({"preset": "bwrap-hardened"}))


def test_off_loopback_is_read_only(netns, results: Path):
    ns, address = netns
    with ui.running(results, "--bind", address, prefix=["ip", "netns", "exec", ns]) as console:
        assert console.host == address
        token = {"X-Agentsec-Token": console.token}
        assert _http(ns, console, "GET", "/api/runs", token)["status"] == 200
        refused = _run(ns, console)
        assert refused["status"] == 403 and "read-only" in refused["body"]
        foreign = _http(ns, console, "GET", "/api/runs", token, host=f"evil.example:{console.port}")
        assert foreign["status"] == 403
        assert _http(ns, console, "GET", "/api/runs")["status"] == 403  # no token
    assert not (results / "bwrap-hardened.json").exists()


def test_allow_remote_runs_is_a_deliberate_choice(netns, results: Path):
    ns, address = netns
    args = ("--bind", address, "--allow-remote-runs")
    with ui.running(results, *args, prefix=["ip", "netns", "exec", ns]) as console:
        reply = _run(ns, console)
        assert reply["status"] == 200, reply
    assert (results / "bwrap-hardened.json").exists()


def test_a_browser_off_loopback_sees_the_page_read_only(netns, results: Path):
    assert shutil.which("chromium"), "chromium is installed by scripts/setup-measure.sh"
    ns, address = netns
    prefix = ["ip", "netns", "exec", ns]
    with ui.running(results, "--bind", address, prefix=prefix) as console:
        page = browser.dom(console.url, prefix=prefix, addresses=[address])
    assert "remote-view" in page and "Read-only" in page
    assert 'action="/api/runs"' not in page and console.token not in page
