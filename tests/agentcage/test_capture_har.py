"""Capture (capture.jsonl) and HAR export.

Unit tests drive the addon with mitmproxy's test flows; the world tests run a REAL cage in the
fake internet with a canary secret injected toward an allowed host, and check both HAR views.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path

import pytest
from mitmproxy import http
from mitmproxy.flow import Error as flow_error
from mitmproxy.test import taddons, tutils

from agentcage.cli import main as cli_main
from agentcage.gateway.addon import CageAddon
from agentcage.gateway.capture import (
    CaptureLog,
    CaptureSettings,
    capture_files,
    read_capture,
    rotated_path,
)
from agentcage.gateway.ratelimit import HostRateLimiter
from agentcage.har import convert, har_problems, to_har
from agentcage.inspect import build_chain
from agentcage.policy import compile_document, document_from_domains
from agentcage.secrets import Injector, Redactor, StagedSecret, mint, rule_from_config
from agentcage.typed import from_mapping
from tests.agentcage.conftest import start_cage
from tests.agentcage.test_addon import flow

MiB = 1024 * 1024

# ---- unit: the addon writes both views -----------------------------------------------------------

POLICY = compile_document(
    document_from_domains("allowlist", ["api.example.test", "evil.example.test",
                                        "quiet.example.test"], []))
VALUE = "real-" + os.urandom(12).hex()
PH = mint("API_TOKEN")
STAGED = (StagedSecret("API_TOKEN", PH, VALUE.encode()),)
RULES = (rule_from_config({"env": "API_TOKEN", "inject_to": ["api.example.test"]}),)


class Harness:
    def __init__(self, tmp: Path, **capture):
        self.records = []
        self.path = tmp / "capture.jsonl"
        config = from_mapping(CaptureSettings, {"enable_har": True, **capture}, "capture")
        self.log = CaptureLog(self.path, config, on_failure=lambda r: self.failures.append(r))
        self.failures: list[str] = []
        self.addon = CageAddon(
            policy=lambda: POLICY, audit=self.records.append,
            chain=build_chain(staged=STAGED, rules=RULES),
            injector=Injector(RULES, STAGED), redactor=Redactor(STAGED),
            tcp_ports=(80, 443), limiter=HostRateLimiter(1000.0, 1000), max_body=20 * MiB,
            capture=self.log,
        )

    def exchange(self, host: str, *, headers=(), body=b"", path="/x",
                 answer: bytes | None = b'{"ok": true}'):
        f = flow(sni=host, header=host, method="POST", path=path)
        for k, v in headers:
            f.request.headers[k] = v
        f.request.raw_content = body
        self.addon.requestheaders(f)
        if f.response is None:
            self.addon.request(f)
        if f.response is None and answer is not None:
            f.response = tutils.tresp(content=answer)
        if f.response is not None:
            self.addon.response(f)
        return f

    def lines(self) -> list[dict]:
        return read_capture(capture_files(self.path))[0]


@pytest.fixture
def ctx():
    with taddons.context():
        yield


def test_inbound_has_placeholder_outbound_has_value(ctx, tmp_path):
    h = Harness(tmp_path)
    answer = json.dumps({"echo": VALUE}).encode()  # the server echoes the real value
    h.exchange("api.example.test", headers=[("Authorization", f"Bearer {PH}")], answer=answer)
    (rec,) = h.lines()
    inbound, outbound = rec["inbound"], rec["outbound"]
    assert dict(inbound["request"]["headers"])["Authorization"] == f"Bearer {PH}"
    assert dict(outbound["request"]["headers"])["Authorization"] == f"Bearer {VALUE}"
    assert VALUE in outbound["response"]["body"]["text"]
    assert VALUE not in json.dumps(inbound) and str(PH) in inbound["response"]["body"]["text"]
    assert rec["decision"] == "allowed" and rec["secrets_injected"] == ["API_TOKEN"]
    assert stat.S_IMODE(h.path.stat().st_mode) == 0o600
    doc = to_har([rec], "inbound")
    assert har_problems(doc) == [] and VALUE not in json.dumps(doc)
    out = to_har([rec], "outbound")
    assert har_problems(out) == [] and VALUE in json.dumps(out)


def test_no_credential_ever_sits_in_flow_metadata(ctx, tmp_path):
    """The real value is injected and echoed back, buffered and streamed, with capture on:
    flow.metadata (which other addons read, and flow dumps save) holds names and verdicts,
    never the value; the outbound snapshots live in the recorder, gone with the flow."""
    h = Harness(tmp_path, max_body_size=4096)
    answer = json.dumps({"echo": VALUE}).encode()
    buffered = h.exchange("api.example.test", headers=[("Authorization", f"Bearer {PH}")],
                          answer=answer)
    streamed = flow(sni="api.example.test", header="api.example.test", method="GET")
    streamed.request.headers["Authorization"] = f"Bearer {PH}"
    h.addon.requestheaders(streamed)
    h.addon.request(streamed)
    streamed.response = tutils.tresp(content=None)
    del streamed.response.headers["content-length"]  # unknown length: streamed
    h.addon.responseheaders(streamed)
    b"".join(streamed.response.stream(VALUE.encode() + b"\n")) + b"".join(
        streamed.response.stream(b""))
    for f in (buffered, streamed):
        assert VALUE not in repr(f.metadata)
        assert VALUE not in json.dumps(f.metadata, default=repr)
    h.addon.response(streamed)
    assert len(h.lines()) == 2 and all(VALUE in json.dumps(r["outbound"]) for r in h.lines())


def test_blocked_request_is_inbound_only_with_its_403(ctx, tmp_path):
    h = Harness(tmp_path)
    f = h.exchange("evil.example.test", headers=[("Authorization", f"Bearer {PH}")])
    assert f.response.status_code == 403
    (rec,) = h.lines()
    assert rec["outbound"] is None and rec["decision"] == "blocked"
    assert rec["inbound"]["response"]["status"] == 403
    assert to_har([rec], "outbound")["log"]["entries"] == []
    (entry,) = to_har([rec], "inbound")["log"]["entries"]
    assert entry["response"]["status"] == 403


def test_refused_connect_and_upstream_error_are_captured(ctx, tmp_path):
    h = Harness(tmp_path)
    f = flow(host="blocked.example.test", port=443, method="CONNECT", mode="regular", sni=None)
    h.addon.http_connect(f)
    assert f.response.status_code == 403
    f = h.exchange("api.example.test", headers=[("Authorization", f"Bearer {PH}")], answer=None)
    f.error = flow_error("connection refused")
    h.addon.error(f)
    refused, failed = h.lines()
    assert refused["inbound"]["request"]["method"] == "CONNECT" and refused["outbound"] is None
    assert refused["inbound"]["response"]["status"] == 403
    assert failed["error"] == "connection refused" and failed["outbound"]["response"] is None
    assert VALUE not in json.dumps(failed["inbound"])
    doc = to_har([refused, failed], "outbound")
    assert har_problems(doc) == [] and [e["response"]["status"]
                                        for e in doc["log"]["entries"]] == [0]


def test_a_real_value_sent_by_the_cage_is_redacted_in_the_inbound_view(ctx, tmp_path):
    h = Harness(tmp_path)
    h.exchange("evil.example.test", headers=[("X-Leak", VALUE)], body=VALUE.encode())
    (rec,) = h.lines()
    assert VALUE not in json.dumps(rec["inbound"])


def test_body_cap_include_exclude_and_rotation(ctx, tmp_path):
    h = Harness(tmp_path, max_body_size=MiB, exclude_domains=["quiet.example.test"],
                max_file_size=3 * MiB, max_files=2)
    body = b"hello world " * (MiB // 6)  # 2 MiB of text
    h.exchange("api.example.test", body=body)
    h.exchange("quiet.example.test", body=b"not captured")
    recs = h.lines()
    assert len(recs) == 1
    req = recs[0]["inbound"]["request"]["body"]
    assert req["size"] == len(body) and req["truncated"] and len(req["text"]) == MiB
    (entry,) = to_har(recs)["log"]["entries"]
    assert entry["request"]["bodySize"] == len(body)
    # the lines are about 2 MiB (both views): every write rotates, two files kept at most
    for _ in range(3):
        h.exchange("api.example.test", body=body)
    files = capture_files(h.path)
    assert files == [rotated_path(h.path, 1), h.path]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files)
    # the domain policy's own patterns and matcher: a name is that name, *.name is below it
    only = CaptureSettings(enable_har=True, include_domains=("*.example.test",))
    assert only.wants("api.example.test") and not only.wants("example.com")
    assert not only.wants("example.test")
    exact = CaptureSettings(enable_har=True, include_domains=("example.test",))
    assert exact.wants("example.test") and not exact.wants("api.example.test")


def test_capture_failure_is_audited_and_never_blocks(ctx, tmp_path):
    h = Harness(tmp_path / "missing-dir")
    f = h.exchange("api.example.test", headers=[("Authorization", f"Bearer {PH}")])
    assert f.response.status_code == 200  # the flow went on
    assert len(h.failures) == 1 and "capture write failed" in h.failures[0]
    f = h.exchange("evil.example.test", headers=[("Authorization", f"Bearer {PH}")])
    assert f.response.status_code == 403  # and blocking still blocks
    assert len(h.failures) == 1  # reported once until a write succeeds


def test_snapshot_failure_never_lets_injected_values_into_inbound(ctx, tmp_path, monkeypatch):
    h = Harness(tmp_path)

    def boom(*a, **k):
        raise RuntimeError("snapshot broke")

    monkeypatch.setattr(h.addon.recorder, "_inbound_request", boom)
    f = h.exchange("api.example.test", headers=[("Authorization", f"Bearer {PH}")])
    assert f.response.status_code == 200
    (rec,) = h.lines()
    assert rec["inbound"]["request"] is None and VALUE not in json.dumps(rec["inbound"])
    assert any(r.direction == "capture" for r in h.records)


def test_a_line_over_the_file_limit_keeps_its_metadata_not_its_bodies():
    from agentcage.gateway.capture import encode_line

    rec = {"id": "x", "inbound": {"request": {"body": {"size": 5000, "text": "a" * 5000}},
                                  "response": None}, "outbound": None}
    line = json.loads(encode_line(rec, 1000))
    assert line["id"] == "x" and line["inbound"]["request"]["body"]["omitted"]


def test_har_of_corrupt_and_odd_records(tmp_path):
    path = tmp_path / "capture.jsonl"
    good = {"v": 1, "ts": 1.0, "inbound": {"request": {"method": "GET", "scheme": "https",
                                                       "host": "a.test", "port": 443,
                                                       "path": "/p?q=1&r=",
                                                       "headers": [["Cookie", "a=1; b=2"]],
                                                       "body": {"size": 0, "text": ""}},
                                           "response": None},
            "outbound": None, "error": "upstream error"}
    path.write_text(json.dumps(good) + "\n{torn\n" + json.dumps({"inbound": {"request": 5}})
                    + "\n[]\n")
    records, skipped = read_capture([path])
    assert len(records) == 2 and skipped == 2
    doc, bad = convert(records, "inbound")
    assert bad == 0 and har_problems(doc) == []
    (entry,) = doc["log"]["entries"]
    assert entry["request"]["queryString"] == [{"name": "q", "value": "1"},
                                               {"name": "r", "value": ""}]
    assert entry["request"]["cookies"] == [{"name": "a", "value": "1"},
                                           {"name": "b", "value": "2"}]
    assert entry["response"]["status"] == 0
    assert har_problems({"log": {"version": "1.1", "entries": [{}]}})


# ---- the real cage in the fake internet ---------------------------------------------------------

ALLOW = ["api.example.test", "allowed.example.test"]
CURL = "curl -sS -m 10 --noproxy '*'"
CANARY = "cnry-" + secrets.token_hex(20)
ENV = "CANARY_TOKEN"
EXTRA = f"""
secret_injection:
  - env: {ENV}
    inject_to: [api.example.test]
capture:
  enable_har: true
  max_body_size: {MiB}
"""


def _with_secret(gen):
    handle = next(gen)
    result = handle.service.secret_set(handle.name, ENV, CANARY.encode())
    assert result["applied"] and not result["pending"]
    return handle


@pytest.fixture(scope="module")
def cage(net):
    gen = start_cage(net, "capture", ALLOW, extra=EXTRA)
    try:
        yield _with_secret(gen)
    finally:
        gen.close()


def export(cage, tmp_path, view: str, capsys, command=("cage", "har")) -> tuple[dict, str]:
    out = tmp_path / f"{view}.har"
    store = str(cage.service.store.root)
    old = os.environ.get("AGENTCAGE_HOME")
    os.environ["AGENTCAGE_HOME"] = store
    try:
        rc = cli_main([*command, cage.name, "-o", str(out), "--view", view])
    finally:
        if old is None:
            os.environ.pop("AGENTCAGE_HOME")
        else:
            os.environ["AGENTCAGE_HOME"] = old
    captured = capsys.readouterr()
    assert rc == 0, captured
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    return json.loads(out.read_text()), captured.err


def entries_for(doc: dict, path_part: str) -> list[dict]:
    return [e for e in doc["log"]["entries"] if path_part in e["request"]["url"]]


def test_real_cage_inbound_and_outbound_views(cage, tmp_path, capsys):
    c = "cap-" + secrets.token_hex(6)
    ph = cage.sh(f'printf %s "${ENV}"').stdout
    assert ph.startswith(f"agentcage:secret:{ENV}:")
    r = cage.sh(f'{CURL} -o /dev/null -w "%{{http_code}}" -H "Authorization: Bearer ${ENV}" '
                f'https://api.example.test/{c}-auth; echo;'
                f'python3 -c "import sys; sys.stdout.write(\'hello world \' * {MiB // 8})" '
                f'> /tmp/big.txt; {CURL} -o /dev/null -w "%{{http_code}}" '
                f'--data-binary @/tmp/big.txt -H "Content-Type: text/plain" '
                f'https://allowed.example.test/{c}-big; echo;'
                f'{CURL} -o /dev/null -w "%{{http_code}}" -H "Authorization: Bearer ${ENV}" '
                f'https://allowed.example.test/{c}-wrong; echo;'
                f'{CURL} -o /dev/null -w "%{{http_code}}" https://blocked.example.test/{c}-deny')
    assert r.stdout.split() == ["200", "200", "403", "403"], r
    capture = cage.service.capture_path(cage.name)
    assert stat.S_IMODE(capture.stat().st_mode) == 0o600

    inbound, warning = export(cage, tmp_path, "inbound", capsys)
    assert har_problems(inbound) == [] and "REAL" not in warning
    text = json.dumps(inbound)
    assert CANARY not in text and ph in text
    (auth,) = entries_for(inbound, f"{c}-auth")
    headers = {h["name"].lower(): h["value"] for h in auth["request"]["headers"]}
    assert headers["authorization"] == f"Bearer {ph}"
    assert auth["response"]["status"] == 200
    # blocked: the placeholder toward a host outside its rule, and a name not allowed
    for suffix in ("wrong", "deny"):
        (blocked,) = entries_for(inbound, f"{c}-{suffix}")
        assert blocked["response"]["status"] == 403
        assert json.loads(blocked["response"]["content"]["text"])["blocked"] is True
    # the body cap
    (big_entry,) = entries_for(inbound, f"{c}-big")
    post = big_entry["request"]["postData"]
    assert big_entry["request"]["bodySize"] > MiB and len(post["text"].encode()) == MiB

    outbound, warning = export(cage, tmp_path, "outbound", capsys)
    assert har_problems(outbound) == [] and "REAL secret values" in warning
    (auth_out,) = entries_for(outbound, f"{c}-auth")
    headers = {h["name"].lower(): h["value"] for h in auth_out["request"]["headers"]}
    assert headers["authorization"] == f"Bearer {CANARY}"
    assert entries_for(outbound, f"{c}-wrong") == [] and entries_for(outbound, f"{c}-deny") == []
    # the capture is on the host, never in the cage
    r = cage.sh("ls / /tmp; find / -name 'capture.jsonl*' 2>/dev/null | head -1")
    assert "capture.jsonl" not in r.stdout


def test_real_cage_websocket_messages_in_the_har(cage, tmp_path, capsys):
    """A WebSocket conversation through the real gateway: one HAR entry with its messages;
    the fake server's echo of the placeholder is what both views hold (no inject_body here),
    and a large download's capture is marked streamed."""
    c = "ws-" + secrets.token_hex(6)
    client = (Path(__file__).parent.parent / "ws_client.py").read_text()
    spec = {"host": "api.example.test", "port": 443, "tls": True, "path": f"/ws?{c}",
            "messages": [{"type": "text", "text": f"hello {c}"},
                         {"type": "binary", "data": "AAEC"}]}
    r = cage.service.exec_capture(cage.name, ["python3", "-c", client, json.dumps(spec)],
                                  timeout=60)
    assert r.returncode == 0, r
    assert json.loads(r.stdout)["close"].startswith("close frame 1000")
    r = cage.sh(f'{CURL} -o /dev/null -w "%{{http_code}}" '
                f'"https://api.example.test/download/{12 * MiB}?chunked=1&{c}"')
    assert r.stdout == "200", r

    def ws_entry():
        doc, _ = export(cage, tmp_path, "inbound", capsys)
        found = entries_for(doc, f"/ws?{c}")
        return doc, found[0] if found else None

    doc, entry = ws_entry()
    assert har_problems(doc) == [] and entry is not None
    messages = entry["_webSocketMessages"]
    assert [(m["type"], m["opcode"], m["data"]) for m in messages] == [
        ("send", 1, f"hello {c}"), ("receive", 1, f"hello {c}"),
        ("send", 2, "AAEC"), ("receive", 2, "AAEC")]
    assert entry["response"]["status"] == 101
    (download,) = entries_for(doc, f"/download/{12 * MiB}?chunked=1&{c}")
    content = download["response"]["content"]
    assert content["size"] == 12 * MiB and len(content["text"].encode()) == MiB


def test_corrupt_line_is_skipped_with_a_count(cage, tmp_path, capsys):
    capture = cage.service.capture_path(cage.name)
    rotated = rotated_path(capture, 3)
    rotated.write_text("{torn line\n")
    os.chmod(rotated, 0o600)
    try:
        doc, warning = export(cage, tmp_path, "inbound", capsys, command=("har",))
    finally:
        rotated.unlink()
    assert har_problems(doc) == [] and "skipped 1 corrupt" in warning


def test_capture_off_writes_no_file(net):
    gen = start_cage(net, "nocapture", ALLOW)
    handle = next(gen)
    try:
        r = handle.sh(f'{CURL} -o /dev/null -w "%{{http_code}}" https://allowed.example.test/x')
        assert r.stdout == "200", r
        assert not handle.service.capture_path(handle.name).exists()
        with pytest.raises(Exception, match="enable_har"):
            handle.service.har(handle.name, "inbound")
    finally:
        gen.close()


def test_http_response_snapshot_helpers_keep_binary_bodies():
    from agentcage.gateway.snapshots import body_bytes, response_doc

    resp = http.Response.make(200, bytes(range(256)), {"Content-Type": "application/octet"})
    doc = response_doc(resp, 1024)
    assert "base64" in doc["body"] and body_bytes(doc["body"]) == bytes(range(256))


def test_streamed_response_is_captured_up_to_the_cap_in_both_views(ctx, tmp_path):
    """A streamed response keeps the first max_body_size bytes of each view: outbound (as the
    server sent it, decoded) with the value, inbound (as the cage got it) with the placeholder."""
    h = Harness(tmp_path, max_body_size=4096)
    f = flow(sni="api.example.test", header="api.example.test", method="GET", path="/big")
    h.addon.requestheaders(f)
    h.addon.request(f)
    f.response = tutils.tresp(content=None)
    f.response.headers["content-length"] = str(30 * MiB)  # over the addon's 20 MiB limit
    h.addon.responseheaders(f)
    assert callable(f.response.stream)
    body = (VALUE.encode() + b"\n") * (1 + 9000 // len(VALUE))
    out = b"".join(b"".join(f.response.stream(p)) for p in (body[:5000], body[5000:], b""))
    h.addon.response(f)
    (rec,) = h.lines()
    inbound, outbound = rec["inbound"]["response"]["body"], rec["outbound"]["response"]["body"]
    assert outbound["streamed"] and outbound["truncated"] and outbound["size"] == len(body)
    assert VALUE in outbound["text"] and len(outbound["text"]) == 4096
    assert inbound["size"] == len(out) and VALUE not in inbound["text"]
    assert str(PH) in inbound["text"]
    assert dict(rec["outbound"]["response"]["headers"])["content-length"] == str(30 * MiB)
    assert "content-length" not in dict(rec["inbound"]["response"]["headers"])
    assert rec["secrets_redacted"] == ["API_TOKEN"]


def ws_exchange(h: Harness, host: str) -> http.HTTPFlow:
    """An upgrade request through the addon's request hooks, answered 101 (as mitmproxy sets
    `flow.websocket` before the response hook)."""
    from mitmproxy.websocket import WebSocketData

    f = flow(sni=host, header=host, method="GET", path="/ws")
    h.addon.requestheaders(f)
    h.addon.request(f)
    assert f.response is None
    f.response = tutils.tresp(status_code=101, content=b"")
    f.websocket = WebSocketData()
    h.addon.response(f)  # the 101: the capture line waits for the connection's end
    return f


def test_websocket_messages_are_captured_in_both_views_and_exported(ctx, tmp_path):
    from mitmproxy.websocket import WebSocketMessage
    from wsproto.frame_protocol import Opcode

    h = Harness(tmp_path)
    f = ws_exchange(h, "api.example.test")
    assert h.lines() == []
    for from_client, content, opcode in ((True, f"auth {PH}".encode(), Opcode.TEXT),
                                         (False, b"echo " + VALUE.encode(), Opcode.TEXT),
                                         (True, b"\x00\x01binary", Opcode.BINARY)):
        f.websocket.messages.append(WebSocketMessage(opcode, from_client, content))
        h.addon.websocket_message(f)
    h.addon.websocket_end(f)
    h.addon.websocket_end(f)  # once only
    (rec,) = h.lines()
    inbound, outbound = rec["inbound"]["websocket"], rec["outbound"]["websocket"]
    assert [m["type"] for m in inbound] == ["send", "receive", "send"]
    assert inbound[0]["text"] == f"auth {PH}" and inbound[1]["text"] == f"echo {PH}"
    # the rule has no inject_body: the message went out as sent; the server's echo was real
    assert outbound[0]["text"] == f"auth {PH}" and outbound[1]["text"] == f"echo {VALUE}"
    assert inbound[2]["opcode"] == 2 and inbound[2]["base64"] == "AAFiaW5hcnk="
    assert VALUE not in json.dumps(rec["inbound"])
    doc = to_har([rec], "inbound")
    assert har_problems(doc) == []
    (entry,) = doc["log"]["entries"]
    assert [m["data"] for m in entry["_webSocketMessages"]] == [
        f"auth {PH}", f"echo {PH}", "AAFiaW5hcnk="]
    assert VALUE in json.dumps(to_har([rec], "outbound"))


def test_a_blocked_websocket_message_is_captured_inbound_only(ctx, tmp_path):
    from mitmproxy.websocket import WebSocketMessage
    from wsproto.frame_protocol import Opcode

    h = Harness(tmp_path)
    f = ws_exchange(h, "evil.example.test")
    f.websocket.messages.append(WebSocketMessage(Opcode.TEXT, True, f"auth {PH}".encode()))
    h.addon.websocket_message(f)  # a placeholder toward the wrong host: blocked, cut
    (rec,) = h.lines()  # written at once: the connection is cut
    (msg,) = rec["inbound"]["websocket"]
    assert "blocked" in msg and msg["text"] == f"auth {PH}"
    assert rec["outbound"]["websocket"] == []
