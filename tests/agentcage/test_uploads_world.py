"""Uploads through a real cage and gateway: a refused one is answered 413 promptly, even to a
client that writes its whole body before it reads; an allowed large one costs the gateway about
its size and no more, and that memory is given back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.agentcage.conftest import AGENT_UID, start_cage
from tests.agentcage.test_gateway_world import canary, wait_for

pytestmark = pytest.mark.netns

MiB = 1024 * 1024
WRITE_FIRST = (Path(__file__).parent / "write_first_client.py").read_text()
CLIENT_TIMEOUT = 120


@pytest.fixture(scope="module")
def ucage(net):
    yield from start_cage(net, "uploads", ["api.example.test"],
                          extra=f"max_request_body: {128 * MiB}\n")


def write_first(cage, size: int, chunked: bool, scheme: str, path: str) -> dict:
    r = cage.service.exec_capture(
        cage.name, ["python3", "-c", WRITE_FIRST, str(size), "1" if chunked else "0", scheme,
                    "api.example.test", path, str(CLIENT_TIMEOUT)], timeout=300)
    assert r.returncode == 0, r
    return json.loads(r.stdout)


@pytest.mark.parametrize("scheme", ["https", "http"])
@pytest.mark.parametrize("chunked", [False, True])
def test_refused_upload_is_answered_413_to_a_client_that_writes_first(ucage, scheme, chunked):
    """Over the 128 MiB limit, declared (Content-Length) or not (chunked): the client finishes
    writing and reads a 413, long before its own timeout; nothing went upstream. (mitmproxy
    alone reset the connection mid-write, or let a chunked upload hang until the client gave
    up.)"""
    path = f"/discard/{canary()}"
    got = write_first(ucage, 160 * MiB, chunked, scheme, path)
    assert got.get("status") == 413, got
    assert got["seconds"] < CLIENT_TIMEOUT / 4, got
    assert [q for q in ucage.net.http_requests() if q["path"] == path] == []
    (rec,) = [r for r in ucage.audit() if r.get("path") == path]
    assert (rec["direction"], rec["decision"], rec["by"]) == ("outbound", "blocked", "body-size")
    ok = write_first(ucage, MiB, chunked, scheme, f"/control/{canary()}")  # the control
    assert ok.get("status") == 200, ok


def rss_kib(cage) -> int:
    for line in Path(f"/proc/{cage.gateway_process}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_large_upload_costs_about_its_size_and_is_given_back(ucage):
    """A 100 MiB upload (within the 128 MiB limit) is inspected whole and forwarded: the
    gateway's peak memory grows by about the body (held once while inspected, plus its
    ciphertext while it drains to the upstream), not a multiple of it, and returns to where it
    was once the flow is over."""
    size = 100 * MiB
    line = b'{"path": "src/app/models.py", "content": "def f(x):\\n    return x + 1\\n"}\n'
    data = (line * (size // len(line) + 1))[:size]
    upload = ucage.project / "upload.json"
    upload.write_bytes(data)
    os.chown(upload, AGENT_UID, AGENT_UID)
    warm = ucage.sh("curl -sS --noproxy '*' -o /dev/null -w '%{http_code}' "
                    "https://api.example.test/warm")
    assert warm.stdout == "200", warm
    before_peak, before = ucage.peak_rss_kib(), rss_kib(ucage)
    r = ucage.sh("curl -sS --noproxy '*' -o /workspace/upload.out -w '%{http_code}' "
                 "--data-binary @/workspace/upload.json https://api.example.test/discard/up",
                 timeout=300)
    assert r.stdout == "200", r
    assert json.loads((ucage.project / "upload.out").read_text())["body_length"] == size
    grown = (ucage.peak_rss_kib() - before_peak) * 1024
    assert grown < 2.5 * size + 32 * MiB, f"peak grew by {grown / size:.1f}x the body"
    assert wait_for(lambda: rss_kib(ucage) < before + 32 * 1024, 15), (
        f"RSS stayed {(rss_kib(ucage) - before) // 1024} MiB above where it was")
