"""Uploads through a real cage and gateway: a refused one is answered 413 promptly, even to a
client that writes its whole body before it reads; an allowed large one costs the gateway about
its size and no more, and that memory is given back; an upstream that refuses an upload early
and stops reading does not hold the answer up.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.agentcage.conftest import AGENT_UID, start_cage
from tests.agentcage.test_gateway_world import canary, wait_for

pytestmark = pytest.mark.netns

MiB = 1024 * 1024
UPLOAD = 100 * MiB
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


@pytest.fixture(scope="module")
def upload_file(ucage) -> str:
    """A 100 MiB text body in the cage's workspace (what agents upload: not high-entropy)."""
    line = b'{"path": "src/app/models.py", "content": "def f(x):\\n    return x + 1\\n"}\n'
    upload = ucage.project / "upload.json"
    upload.write_bytes((line * (UPLOAD // len(line) + 1))[:UPLOAD])
    os.chown(upload, AGENT_UID, AGENT_UID)
    return "/workspace/upload.json"


@pytest.mark.parametrize("route", ["--noproxy '*'", ""], ids=["transparent", "https-proxy"])
def test_large_upload_costs_about_its_size_and_is_given_back(ucage, upload_file, route):
    """A 100 MiB upload (within the 128 MiB limit) is inspected whole and forwarded, straight
    to the upstream or through the cage's HTTPS_PROXY: the gateway's peak memory grows by about
    the body (held once while inspected; its ciphertext is made no faster than the upstream
    takes it), not a multiple of it, and returns to where it was once the flow is over.
    (mitmproxy alone: 2x; the gateway before it paced: 2x.)"""
    warm = ucage.sh(f"curl -sS {route} -o /dev/null -w '%{{http_code}}' "
                    "https://api.example.test/warm")
    assert warm.stdout == "200", warm
    before_peak, before = ucage.peak_rss_kib(), rss_kib(ucage)
    r = ucage.sh(f"curl -sS {route} -o /workspace/upload.out -w '%{{http_code}}' "
                 f"--data-binary @{upload_file} https://api.example.test/discard/up",
                 timeout=300)
    assert r.stdout == "200", r
    assert json.loads((ucage.project / "upload.out").read_text())["body_length"] == UPLOAD
    grown = (ucage.peak_rss_kib() - before_peak) * 1024
    assert grown < UPLOAD + 32 * MiB, f"peak grew by {grown / UPLOAD:.2f}x the body"
    assert wait_for(lambda: rss_kib(ucage) < before + 32 * 1024, 15), (
        f"RSS stayed {(rss_kib(ucage) - before) // 1024} MiB above where it was")


@pytest.mark.parametrize("hold", [30, 0], ids=["stops-reading", "closes"])
def test_an_upstream_that_refuses_an_upload_early_is_answered_promptly(ucage, upload_file,
                                                                       hold):
    """The upstream answers 413 on the first bytes of the body and then takes nothing more,
    holding the connection open for 30 s (or closing it at once). The gateway stops pacing the
    body when the upstream stops taking it (`pacing.STALL_SECONDS`), so the cage reads the
    upstream's 413 within seconds, not when the upstream finally closes; then the next upload
    goes through."""
    path = f"/discard/{canary()}?early={hold}"
    started = time.monotonic()
    r = ucage.sh("curl -sS --noproxy '*' -o /dev/null -w '%{http_code}' "
                 f"--data-binary @{upload_file} 'https://api.example.test{path}'", timeout=120)
    took = time.monotonic() - started
    assert r.stdout == "413", r
    assert took < hold / 2 + 10, f"the answer took {took:.1f} s"
    (rec,) = [a for a in ucage.audit() if a.get("path") == path and a.get("status")]
    assert (rec["decision"], rec["status"]) == ("allowed", 413)
    ok = ucage.sh("curl -sS --noproxy '*' -o /dev/null -w '%{http_code}' "
                  f"--data-binary @{upload_file} https://api.example.test/discard/{canary()}",
                  timeout=300)
    assert ok.stdout == "200", ok
