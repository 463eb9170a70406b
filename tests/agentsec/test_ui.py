"""The console over real HTTP: Host checked first, a token on every API call, a strict CSP and
no CORS, runs limited to shipped presets or known flags, hostile requests answered in one line."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from agentsec.history import DB_NAME, History
from tests.agentsec import console as ui
from tests.agentsec.reports import sample_set, save_all


def _samples() -> list[dict]:
    # Without the sample labelled bwrap-hardened: that is the preset the tests run for real.
    return [r for r in sample_set() if r["label"] != "bwrap-hardened"]


@pytest.fixture
def results(tmp_path: Path) -> Path:
    save_all(tmp_path / "reports", _samples())
    return tmp_path / "reports"


@pytest.fixture
def console(results: Path):
    with ui.running(results) as running:
        yield running


def test_listens_on_loopback_only_by_default(console):
    assert console.host == "127.0.0.1"


@pytest.mark.parametrize(
    "host",
    ["evil.example:{port}", "127.0.0.1.nip.io:{port}", "127.0.0.1:{other}", "", "localhost",
     "127.0.0.1:{port}@evil.example"],
)
def test_a_foreign_host_is_refused_before_anything_else(console, host: str):
    host = host.format(port=console.port, other=console.port + 1)
    for path in ("/", f"/?token={console.token}", "/api/runs"):
        reply = console.request("GET", path, {"X-Agentsec-Token": console.token}, host=host)
        assert reply.status == 403, (host, path)
        assert console.token.encode() not in reply.body and "set-cookie" not in reply.headers


def test_loopback_names_are_accepted(console):
    for host in (f"localhost:{console.port}", f"127.0.0.1:{console.port}"):
        reply = console.request("GET", "/api/runs", {"X-Agentsec-Token": console.token}, host=host)
        assert reply.status == 200


@pytest.mark.parametrize("token", [None, "", "wrong", "x" * 43])
def test_every_api_call_needs_the_token(console, token):
    for method, path, doc in (("GET", "/api/runs", None), ("GET", "/api/history", None),
                              ("POST", "/api/runs", {"preset": "bwrap-hardened"})):
        reply = console.api(method, path, doc, token=token)
        assert reply.status == 403, (method, path)
    assert console.api("GET", "/api/runs").status == 200


def test_the_page_needs_the_session_and_the_token_leaves_the_address_bar(console):
    locked = console.request("GET", "/")
    assert locked.status == 401 and console.token.encode() not in locked.body
    assert console.request("GET", "/?token=wrong").status == 403
    entry = console.request("GET", f"/?token={console.token}")
    assert entry.status == 303 and entry.headers["location"] == "/"
    cookie = entry.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    page = console.request("GET", "/", {"Cookie": cookie.split(";")[0]})
    assert page.status == 200
    text = page.body.decode()
    assert text.index('class="axes"') < text.index("/ 100") < text.index('aria-label="provenance"')
    for report in _samples():
        assert report["label"] in text


def test_strict_csp_and_no_cors_on_every_response(console):
    cookie = console.session_cookie()
    replies = [
        console.request("GET", "/", {"Cookie": cookie, "Origin": "http://evil.example"}),
        console.api("GET", "/api/runs"),
        console.request("GET", "/api/runs", {"Origin": "http://evil.example"}),
        console.request("OPTIONS", "/api/runs", {
            "Origin": "http://evil.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "x-agentsec-token"}),
        console.request("GET", "/nope"),
        console.request("GET", "/", host="evil.example"),
    ]
    assert replies[3].status == 405
    for reply in replies:
        assert not any(h.startswith("access-control-") for h in reply.headers), reply.headers
        csp = reply.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
        assert "script-src" not in csp  # no script may run at all
        assert reply.headers["x-frame-options"] == "DENY"


def test_a_shipped_preset_runs_and_is_saved_and_recorded(console, results: Path):
    reply = console.api("POST", "/api/runs", {"preset": "bwrap-hardened"})
    assert reply.status == 200, reply.body
    doc = reply.json()
    assert doc["kind"] == "run" and doc["report"]["target"]["preset"] == "bwrap-hardened"
    assert (results / "bwrap-hardened.json").exists()
    assert [r.label for r in History(results / DB_NAME).runs()] == ["bwrap-hardened"]
    listed = console.api("GET", "/api/history", None).json()
    assert [r["label"] for r in listed["runs"]] == ["bwrap-hardened"]


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ({"template": "sh -c 'id' {probe}"}, "command templates are refused"),
        ({"command": ["python3", "-"]}, "command templates are refused"),
        ({"preset": "bwrap-hardened", "python": "/tmp/evil"}, "command templates are refused"),
        ({"engine": "docker", "image": "alpine", "flags": ["-v /:/h"]}, "not in the remedia"),
        ({"engine": "docker", "image": "alpine", "flags": ["--privileged"]}, "not in the remedia"),
        ({"engine": "docker", "image": "--privileged"}, "not an image reference"),
        ({"engine": "bwrap", "image": "x"}, "engine: one of docker, podman"),
        ({"preset": "no-such-preset"}, "unknown preset"),
        ({"preset": "docker-default"}, "needs an image"),
        ({"preset": "nspawn-default", "image": "var/tmp/x"}, "runs a root directory"),
        ({"preset": "bwrap-hardened", "flags": ["--read-only"]}, "carries its own"),
        ({"preset": "bwrap-hardened", "mounts": "/"}, "unknown fields"),
    ],
)
def test_runs_outside_presets_and_known_flags_are_refused(console, results: Path, doc, reason):
    before = sorted(p.name for p in results.iterdir())
    reply = console.api("POST", "/api/runs", doc)
    assert reply.status == 400 and reason in reply.json()["error"], reply.body
    assert sorted(p.name for p in results.iterdir()) == before


def test_one_run_at_a_time_others_get_409_and_the_lock_is_released(console, results: Path):
    """Three runs asked for at the same instant: a probe run takes far longer than the requests
    take to arrive, so one runs and the others are refused with 409 (nothing saved for them);
    once it is done, the next run is accepted."""
    import threading

    barrier = threading.Barrier(3)
    statuses: list[int] = []

    def ask() -> None:
        barrier.wait()
        statuses.append(console.api("POST", "/api/runs", {"preset": "bwrap-hardened"}).status)

    askers = [threading.Thread(target=ask) for _ in range(3)]
    for t in askers:
        t.start()
    for t in askers:
        t.join(timeout=120)
    assert sorted(statuses) == [200, 409, 409]
    assert [r.label for r in History(results / DB_NAME).runs()] == ["bwrap-hardened"]
    assert console.api("POST", "/api/runs", {"preset": "bwrap-hardened"}).status == 200
    assert len(History(results / DB_NAME).runs()) == 2


def test_a_form_post_needs_the_session_cookie_too(console, results: Path):
    form = f"token={console.token}&preset=bwrap-hardened".encode()
    headers = {"Content-Type": "application/x-www-form-urlencoded",
               "Origin": "http://evil.example"}
    assert console.request("POST", "/api/runs", headers, form).status == 403  # no cookie
    headers["Cookie"] = console.session_cookie()
    reply = console.request("POST", "/api/runs", headers, form)
    assert reply.status == 303 and (results / "bwrap-hardened.json").exists()


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET / HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n", 505),
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414),
    ],
)
def test_malformed_requests_get_an_error_and_the_console_lives_on(console, raw: bytes,
                                                                  status: int):
    with socket.create_connection((console.host, console.port), timeout=10) as sock:
        sock.sendall(raw)
        head = sock.recv(200)
    assert head.startswith(f"HTTP/1.1 {status}".encode()) or head.startswith(
        f"HTTP/1.0 {status}".encode()), head
    assert console.alive() and console.api("GET", "/api/runs").status == 200


def test_hostile_bodies(console, results: Path):
    headers = {"X-Agentsec-Token": console.token, "Content-Type": "application/json"}
    too_big = console.request("POST", "/api/runs", {**headers, "Content-Length": "99999999"})
    assert too_big.status == 413
    assert console.request("POST", "/api/runs", headers, b"{not json").status == 400
    assert console.request("POST", "/api/runs", headers, b"[1, 2]").status == 400
    deep = b"[" * 100000 + b"]" * 100000
    assert console.request("POST", "/api/runs", headers, deep).status == 413
    xml = {**headers, "Content-Type": "text/xml"}
    assert console.request("POST", "/api/runs", xml, b"<a/>").status == 415
    assert console.alive()
    assert not (results / "bwrap-hardened.json").exists()


def test_a_slow_client_does_not_block_others(console):
    with socket.create_connection((console.host, console.port), timeout=10) as idle:
        idle.sendall(b"GET /api/runs HTTP/1.1\r\n")  # and never finishes
        assert console.api("GET", "/api/runs").status == 200


def test_a_corrupt_report_is_skipped_not_fatal(results: Path):
    (results / "broken.json").write_text('{"tool": "agentsec", "schema_version": 1, "summ')
    with ui.running(results) as console:
        doc = console.api("GET", "/api/runs").json()
        assert any("broken.json" in s for s in doc["skipped"])
        assert len(doc["runs"]) == len(_samples())


def test_the_token_is_never_logged(results: Path):
    console = ui.start(results)
    try:
        console.request("GET", f"/?token={console.token}")
        console.api("GET", "/api/runs")
    finally:
        err = ui.stop(console.proc)
    assert "GET /api/runs 200" in err and console.token not in err


def test_open_hands_the_address_to_the_browser(results: Path, tmp_path: Path):
    seen = tmp_path / "opened"
    browser = tmp_path / "browser.sh"
    browser.write_text(f'#!/bin/sh\nprintf %s "$1" > {seen}\n')
    browser.chmod(0o755)
    import os

    env_before = os.environ.get("BROWSER")
    os.environ["BROWSER"] = str(browser)
    try:
        with ui.running(results, "--open") as console:
            for _ in range(50):
                if seen.exists() and seen.read_text():
                    break
                import time

                time.sleep(0.1)
            assert seen.read_text() == console.url
    finally:
        if env_before is None:
            os.environ.pop("BROWSER", None)
        else:
            os.environ["BROWSER"] = env_before


def test_json_of_a_port_in_use_is_one_line(results: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        from tests.agentsec.reports import agentsec

        proc = agentsec("ui", "--results", str(results), "--port", str(port), timeout=30)
    assert proc.returncode == 1 and proc.stderr.startswith("agentsec: error: cannot listen")
    assert "Traceback" not in proc.stderr
    json.dumps(proc.stderr)
