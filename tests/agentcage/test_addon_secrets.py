"""The addon's secret handling, driven with mitmproxy's own test flows: decoded bodies, injection,
redaction, WebSocket frames (end to end through a real gateway: test_websocket_world.py),
and the gateway's reload (SIGHUP) failing closed."""

from __future__ import annotations

import base64
import gzip
import json
import os
import zlib
from pathlib import Path

import brotli
import pytest
from mitmproxy import http
from mitmproxy.net import encoding as mitm_encoding
from mitmproxy.test import taddons, tflow, tutils
from mitmproxy.websocket import WebSocketMessage
from wsproto.frame_protocol import Opcode

from agentcage.gateway import main as gateway_main
from agentcage.gateway.addon import Armour, CageAddon
from agentcage.gateway.audit import AuditLog, read_audit
from agentcage.gateway.flowstate import state
from agentcage.gateway.ratelimit import HostRateLimiter
from agentcage.gateway.settings import GatewaySettings
from agentcage.inspect import build_chain
from agentcage.policy import compile_document, document_from_domains
from agentcage.secrets import Injector, Redactor, StagedSecret, mint, rule_from_config, stage
from tests.agentcage.test_addon import flow

POLICY = compile_document(
    document_from_domains("allowlist", ["api.example.test", "evil.example.test"], []))
VALUE = b"real-" + os.urandom(12).hex().encode()
PH = mint("API_TOKEN")
STAGED = (StagedSecret("API_TOKEN", PH, VALUE),)
RULES = (rule_from_config({"env": "API_TOKEN", "inject_to": ["api.example.test"],
                           "inject_body": True}),)
LEAKED = "sk-ant-api03-" + "Ab3x" * 24 + "AA"


class Harness:
    def __init__(self):
        self.records = []
        self.addon = CageAddon(
            policy=lambda: POLICY, audit=self.records.append,
            chain=build_chain(staged=STAGED, rules=RULES),
            injector=Injector(RULES, STAGED), redactor=Redactor(STAGED),
            tcp_ports=(80, 443), limiter=HostRateLimiter(1000.0, 1000), max_body=64 * 1024,
        )

    def send(self, host: str, *, path="/x", headers=(), body=b"", method="POST"):
        f = flow(sni=host, header=host, method=method, path=path)
        for k, v in headers:
            f.request.headers[k] = v
        f.request.raw_content = body
        self.addon.requestheaders(f)
        if f.response is None:
            self.addon.request(f)
        return f


@pytest.fixture
def h():
    with taddons.context():
        yield Harness()


def by(f) -> str | None:
    return json.loads(f.response.content)["by"] if f.response is not None else None


def test_headers_injected_toward_the_rule_host_and_audited_by_name(h):
    f = h.send("api.example.test", headers=[("Authorization", f"Bearer {PH}")])
    assert f.response is None
    assert f.request.headers["authorization"] == f"Bearer {VALUE.decode()}"
    f.response = tutils.tresp(content=b"ok")
    h.addon.response(f)
    sent, answered = h.records
    assert (sent.direction, sent.decision) == ("outbound", "allowed")
    assert sent.secrets_injected == answered.secrets_injected == ("API_TOKEN",)
    assert (answered.direction, answered.decision) == ("response", "allowed")


def test_url_injection_is_not_audited_with_the_value(h):
    f = h.send("api.example.test", path=f"/v1?key={PH}", method="GET")
    assert f.request.path == f"/v1?key={VALUE.decode()}"
    f.response = tutils.tresp(content=b"ok")
    h.addon.response(f)
    assert len(h.records) == 2
    for rec in h.records:
        assert rec.path == f"/v1?key={PH}" and VALUE.decode() not in json.dumps(rec.to_dict())


def test_json_body_injection_keeps_json_valid(h):
    body = json.dumps({"token": str(PH)}).encode()
    f = h.send("api.example.test", headers=[("Content-Type", "application/json")], body=body)
    assert json.loads(f.request.content) == {"token": VALUE.decode()}
    assert f.request.headers["content-length"] == str(len(f.request.raw_content))


def test_placeholder_toward_another_host_blocks(h):
    f = h.send("evil.example.test", headers=[("Authorization", f"Bearer {PH}")])
    assert f.response.status_code == 403 and by(f) == "secrets"
    assert h.records[0].decision == "blocked"
    assert f.request.headers["authorization"] == f"Bearer {PH}"  # nothing injected


def test_gzip_body_is_inspected_decoded(h):
    f = h.send("evil.example.test", headers=[("Content-Encoding", "gzip")],
               body=gzip.compress(LEAKED.encode()))
    assert by(f) == "secrets"
    ok = h.send("evil.example.test", headers=[("Content-Encoding", "gzip")],
                body=gzip.compress(b"hello"))
    assert ok.response is None  # control


BOMB = b"\0" * (1024 * 1024)  # 1 MiB of zeros: over the harness's 64 KiB limit


@pytest.mark.parametrize(("encoding", "body", "why"), [
    ("gzip", gzip.compress(BOMB), "more than"),  # a bomb is not inflated, in any encoding
    ("deflate", zlib.compress(BOMB), "more than"),
    ("br", brotli.compress(BOMB), "more than"),
    ("zstd", mitm_encoding.encode(BOMB, "zstd"), "more than"),
    ("gzip, gzip", gzip.compress(gzip.compress(BOMB)), "more than"),
    ("gzip", b"not gzip at all", "corrupt"),
    ("compress", b"\x1f\x9d\x90hello", "Content-Encoding"),
])
def test_bodies_that_cannot_be_seen_are_blocked(h, encoding, body, why):
    f = h.send("api.example.test", headers=[("Content-Encoding", encoding)], body=body)
    assert f.response.status_code == 403 and by(f) == "body"
    assert why in h.records[0].reason


def test_response_redacted_in_every_form_and_audited(h):
    f = h.send("api.example.test", headers=[("Authorization", f"Bearer {PH}")])
    echo = json.dumps({"raw": VALUE.decode(), "b64": base64.b64encode(VALUE).decode()})
    f.response = tutils.tresp(content=echo.encode())
    f.response.headers["X-Echo"] = VALUE.decode()
    h.addon.response(f)
    assert VALUE not in f.response.content and VALUE.decode() not in str(f.response.headers)
    doc = json.loads(f.response.content)
    assert doc["raw"] == str(PH) and base64.b64decode(doc["b64"]) == str(PH).encode()
    assert h.records[-1].secrets_redacted == ("API_TOKEN",)


def test_undecodable_response_is_replaced_not_passed(h):
    f = h.send("api.example.test")
    f.response = tutils.tresp(content=b"garbage")
    f.response.headers["Content-Encoding"] = "gzip"
    h.addon.response(f)
    assert f.response.status_code == 502 and by(f) == "redaction"


def ws_flow(host: str) -> http.HTTPFlow:
    f = tflow.twebsocketflow(messages=False)
    f.request.host = host
    state(f).target = (host, 443)
    return f


def test_websocket_frames(h):
    f = ws_flow("api.example.test")
    f.websocket.messages.append(WebSocketMessage(Opcode.TEXT, True, f"auth {PH}".encode()))
    h.addon.websocket_message(f)
    assert f.websocket.messages[-1].content == b"auth " + VALUE  # injected (inject_body)
    f.websocket.messages.append(WebSocketMessage(Opcode.TEXT, False, b"echo " + VALUE))
    h.addon.websocket_message(f)
    assert f.websocket.messages[-1].content == f"echo {PH}".encode()  # redacted
    assert h.records[0].secrets_injected == ("API_TOKEN",)
    leak = ws_flow("evil.example.test")
    leak.websocket.messages.append(WebSocketMessage(Opcode.TEXT, True, LEAKED.encode()))
    h.addon.websocket_message(leak)
    assert leak.websocket.messages[-1].dropped and leak.error is not None
    assert h.records[-1].decision == "blocked" and h.records[-1].by == "secrets"
    control = ws_flow("evil.example.test")
    control.websocket.messages.append(WebSocketMessage(Opcode.TEXT, True, b"hello"))
    h.addon.websocket_message(control)
    assert not control.websocket.messages[-1].dropped and control.error is None


def test_reload_swaps_secrets_and_a_failed_reload_blocks_everything(tmp_path: Path):
    staged = Path("/dev/shm") / f"agentcage-test-{os.getpid()}" / "secrets.json"
    try:
        stage(STAGED, staged)
        settings = GatewaySettings(
            cage_name="t", netns="n", cage_iface="i", gateway_address="10.200.128.1",
            cage_network="10.200.128.0/30", uplink_netns="", dns_servers=(),
            policy_path="p", audit_path=str(tmp_path / "audit"), ready_path="r",
            confdir="c", upstream_ca_path="ca", secrets_path=str(staged),
            reload_ack_path=str(tmp_path / "ack.json"),
            secret_injection=({"env": "API_TOKEN", "inject_to": ["api.example.test"]},),
        )
        armour = gateway_main.arm(settings)
        assert isinstance(armour, Armour) and armour.names == ("API_TOKEN",)
        audit = AuditLog(tmp_path / "audit")
        with taddons.context():
            h = Harness()
            new = mint("API_TOKEN")
            stage((StagedSecret("API_TOKEN", new, VALUE),), staged)
            gateway_main.reload_secrets(settings, h.addon, audit)
            ack = json.loads((tmp_path / "ack.json").read_text())
            assert ack["ok"] and ack["placeholders"] == [str(new)]
            old = h.send("api.example.test", headers=[("Authorization", f"Bearer {PH}")])
            assert old.request.headers["authorization"] == f"Bearer {PH}"  # inert now
            fresh = h.send("api.example.test", headers=[("Authorization", f"Bearer {new}")])
            assert fresh.request.headers["authorization"] == f"Bearer {VALUE.decode()}"
            os.chmod(staged, 0o644)  # unsafe: the reload must refuse it and block everything
            gateway_main.reload_secrets(settings, h.addon, audit)
            assert not json.loads((tmp_path / "ack.json").read_text())["ok"]
            f = h.send("api.example.test", headers=[("Authorization", f"Bearer {new}")])
            assert f.response.status_code == 403 and by(f) == "secrets-reload"
        audit.close()
        kinds = [(r["direction"], r["decision"]) for r in read_audit(tmp_path / "audit")]
        assert kinds == [("config", "allowed"), ("config", "blocked")]
    finally:
        staged.unlink(missing_ok=True)
        staged.parent.rmdir()


# ---- streamed responses (end to end: test_streaming_world.py) -----------------------------------

def streamed(h, *, content_encoding: str | None = None, length: int | None = None,
             header_value: bytes = b"") -> http.HTTPFlow:
    """A request through the harness, then response headers as a server would send them."""
    f = h.send("api.example.test", headers=[("Authorization", f"Bearer {PH}")])
    assert f.response is None
    f.response = tutils.tresp(content=None)
    del f.response.headers["content-length"]
    if length is not None:
        f.response.headers["content-length"] = str(length)
    if content_encoding:
        f.response.headers["content-encoding"] = content_encoding
    if header_value:
        f.response.headers["x-echo"] = header_value.decode()
    h.addon.responseheaders(f)
    return f


def feed(f: http.HTTPFlow, pieces: list[bytes]) -> bytes:
    out = b""
    for piece in [*pieces, b""]:
        out += b"".join(f.response.stream(piece))
    return out


def test_response_within_the_limit_is_buffered_not_streamed(h):
    f = streamed(h, length=64 * 1024)
    assert not f.response.stream and f.response.headers["content-length"] == str(64 * 1024)


def test_streamed_response_redacts_a_value_split_across_pieces(h):
    f = streamed(h, header_value=VALUE)  # no Content-Length: unknown size, streamed
    assert callable(f.response.stream)
    assert VALUE.decode() not in str(f.response.headers)
    assert "content-length" not in f.response.headers
    body = b"start " + VALUE + b" middle " + base64.b64encode(b"xy" + VALUE) + b" end"
    cut = body.index(VALUE) + 5
    out = feed(f, [body[:cut], body[cut:]])
    assert VALUE not in out and out.startswith(b"start " + str(PH).encode())
    h.addon.response(f)
    assert h.records[-1].decision == "allowed"
    assert h.records[-1].secrets_redacted == ("API_TOKEN",)


def test_streamed_gzip_response_reaches_the_cage_decoded_and_redacted(h):
    f = streamed(h, content_encoding="gzip", length=10 * 1024 * 1024)  # over the 64 KiB limit
    assert "content-encoding" not in f.response.headers
    data = gzip.compress(b"echo: " + VALUE + b"\n" * 1000)
    out = feed(f, [data[i:i + 7] for i in range(0, len(data), 7)])
    assert out == b"echo: " + str(PH).encode() + b"\n" * 1000


def test_stream_that_fails_to_decode_is_killed_and_audited(h):
    f = streamed(h, content_encoding="gzip")
    assert feed(f, [b"this is not gzip at all"]) == b""
    assert f.error is not None and f.error.msg == "Connection killed."
    h.addon.response(f)
    (outcome,) = [r for r in h.records if r.direction == "response"]
    assert outcome.decision == "blocked" and outcome.by == "redaction"
    assert "cut off" in outcome.reason and outcome.extra["outcome"] == "cut"


def test_stream_in_an_encoding_the_gateway_cannot_decode_is_refused(h):
    f = streamed(h, content_encoding="compress")
    assert not f.response.stream
    assert f.error is not None and f.error.msg == "Connection killed."
    assert h.records[-1].decision == "blocked" and "compress" in h.records[-1].reason


def test_without_secrets_a_stream_passes_unchanged(h):
    h.addon.rearm(Armour(h.addon.chain, Injector((), ()), Redactor(())))
    f = streamed(h, content_encoding="gzip")
    assert f.response.headers["content-encoding"] == "gzip"
    assert feed(f, [b"\x1f\x8b raw", b" bytes"]) == b"\x1f\x8b raw bytes"


def send_ws(h, f: http.HTTPFlow, content: bytes, text: bool = True) -> WebSocketMessage:
    f.websocket.messages.append(
        WebSocketMessage(Opcode.TEXT if text else Opcode.BINARY, True, content))
    h.addon.websocket_message(f)
    return f.websocket.messages[-1]


def test_websocket_key_split_across_messages_is_seen_whole(h):
    f = ws_flow("evil.example.test")
    assert not send_ws(h, f, LEAKED[:6].encode()).dropped  # "sk-ant": nothing yet
    assert send_ws(h, f, LEAKED[6:].encode()).dropped
    assert f.error is not None
    assert h.records[-1].decision == "blocked" and h.records[-1].by == "secrets"


def test_websocket_random_material_trickled_in_small_messages_is_cut_off(h):
    material = os.urandom(4096)
    f = ws_flow("evil.example.test")
    passed = 0
    for i in range(0, len(material), 64):  # each 64-byte message is below every threshold
        if send_ws(h, f, material[i:i + 64], text=False).dropped:
            break
        passed += 64
    assert f.error is not None, "all 4 KiB went out"
    assert passed <= 512
    assert h.records[-1].by == "entropy"


def test_websocket_ordinary_chat_is_not_blocked_by_the_tail(h):
    f = ws_flow("evil.example.test")
    for i in range(300):
        msg = json.dumps({"type": "delta", "n": i, "text": f"refactor step {i}: rename the "
                          "helper and update its callers in src/app/models.py"}).encode()
        assert not send_ws(h, f, msg).dropped
    assert f.error is None
