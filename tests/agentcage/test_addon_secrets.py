"""The addon's secret handling, driven with mitmproxy's own test flows: decoded bodies, injection,
redaction, WebSocket frames (end to end through a real gateway: test_websocket_world.py),
and the gateway's reload (SIGHUP) failing closed."""

from __future__ import annotations

import base64
import gzip
import json
import os
from pathlib import Path

import pytest
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils
from mitmproxy.websocket import WebSocketMessage
from wsproto.frame_protocol import Opcode

from agentcage.gateway import main as gateway_main
from agentcage.gateway.addon import META_TARGET, Armour, CageAddon
from agentcage.gateway.audit import AuditLog, read_audit
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
    (rec,) = h.records
    assert rec.decision == "allowed" and rec.secrets_injected == ("API_TOKEN",)


def test_url_injection_is_not_audited_with_the_value(h):
    f = h.send("api.example.test", path=f"/v1?key={PH}", method="GET")
    assert f.request.path == f"/v1?key={VALUE.decode()}"
    f.response = tutils.tresp(content=b"ok")
    h.addon.response(f)
    (rec,) = h.records
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


@pytest.mark.parametrize(("encoding", "body", "why"), [
    ("gzip", gzip.compress(b"\0" * (1024 * 1024)), "more than"),  # a bomb is not inflated
    ("gzip", b"not gzip at all", "corrupt"),
    ("br", b"\x0b\x02\x80hello\x03", "Content-Encoding"),
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
    assert h.records[0].secrets_redacted == ("API_TOKEN",)


def test_undecodable_response_is_replaced_not_passed(h):
    f = h.send("api.example.test")
    f.response = tutils.tresp(content=b"garbage")
    f.response.headers["Content-Encoding"] = "gzip"
    h.addon.response(f)
    assert f.response.status_code == 502 and by(f) == "redaction"


def ws_flow(host: str) -> http.HTTPFlow:
    f = tflow.twebsocketflow(messages=False)
    f.request.host = host
    f.metadata[META_TARGET] = (host, 443)
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
            cage_network="10.200.128.0/30", uplink_iface="u", dns_servers=(),
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
