"""The mitmproxy addon, driven with mitmproxy's own test flows: decisions, retarget, fail closed."""

from __future__ import annotations

import json

import pytest
from mitmproxy import connection, http
from mitmproxy.connection import ConnectionState
from mitmproxy.flow import Error as flow_error
from mitmproxy.proxy import server_hooks
from mitmproxy.proxy.mode_specs import ProxyMode
from mitmproxy.test import taddons, tflow, tutils

from agentcage.gateway.addon import CageAddon, split_host_header
from agentcage.gateway.audit import AuditRecord
from agentcage.gateway.flowstate import state
from agentcage.gateway.ratelimit import HostRateLimiter
from agentcage.inspect import build_chain, first_block, run_chain
from agentcage.inspect.domain import DomainInspector
from agentcage.inspect.protocol import Decision
from agentcage.policy import Policy, compile_document, document_from_domains

POLICY = compile_document(
    document_from_domains("allowlist", ["api.example.test", "*.allowed.example.test"], [])
)


class Harness:
    def __init__(self, policy: Policy = POLICY, rate=(1000.0, 1000), chain=None):
        self.records: list[AuditRecord] = []
        self.policy = policy
        self.addon = CageAddon(
            policy=lambda: self.policy,
            audit=self.records.append,
            chain=chain if chain is not None else build_chain(),
            tcp_ports=(80, 443),
            limiter=HostRateLimiter(*rate),
        )


def flow(host="10.200.128.1", port=443, *, sni=None, header=None, mode="transparent",
         scheme="https", method="GET", path="/x"):
    headers = http.Headers()
    if header is not None:
        headers["Host"] = header
    req = tutils.treq(host=host, port=port, scheme=scheme.encode(), method=method.encode(),
                      path=path.encode(), headers=headers, content=b"")
    f = tflow.tflow(req=req)
    f.client_conn.sni = sni
    f.client_conn.proxy_mode = ProxyMode.parse(mode)
    return f


def blocked_body(f) -> dict:
    assert f.response is not None
    return json.loads(f.response.content)


@pytest.fixture
def h():
    with taddons.context():
        yield Harness()


def test_allowed_transparent_request_is_retargeted_by_name(h):
    f = flow(sni="api.example.test", header="api.example.test")
    h.addon.requestheaders(f)
    assert f.response is None
    assert f.request.host == "api.example.test"
    assert h.records == []  # nothing is decided before the whole request is seen
    h.addon.request(f)
    # the decision is audited before the request goes upstream, then what came of it
    assert [(r.direction, r.decision, r.host) for r in h.records] == [
        ("outbound", "allowed", "api.example.test")]
    f.response = tutils.tresp()
    h.addon.response(f)
    assert [(r.direction, r.decision, r.status, r.extra["outcome"]) for r in h.records[1:]] == [
        ("response", "allowed", 200, "served")]
    assert h.records[0].extra["flow"] == h.records[1].extra["flow"] == f.id
    h.addon.response(f)
    assert len(h.records) == 2  # exactly one record of each per request


def test_a_request_that_cannot_be_audited_is_refused():
    """The audit fails (a full disk): the request never goes upstream, the cage gets a 503."""
    with taddons.context():
        h = Harness()

        def disk_full(record):
            raise OSError(28, "No space left on device")

        h.addon.records.audit = disk_full
        f = flow(sni="api.example.test", header="api.example.test")
        h.addon.requestheaders(f)
        h.addon.request(f)
        assert f.response is not None and f.response.status_code == 503
        assert blocked_body(f)["by"] == "audit"
        h.addon.records.audit = h.records.append  # the disk has room again: a control
        ok = flow(sni="api.example.test", header="api.example.test")
        h.addon.requestheaders(ok)
        h.addon.request(ok)
        assert ok.response is None and [r.decision for r in h.records] == ["allowed"]


CASES = [
    # (kwargs, status, by, reason fragment)
    (dict(sni="blocked.example.test", header="blocked.example.test"), 403, "domain",
     "not in allowlist"),
    (dict(sni="api.example.test", header="blocked.example.test"), 403, "identity", "SNI"),
    (dict(sni=None, header="api.example.test:8443", port=443), 403, "identity", "port"),
    (dict(sni=None, header=None), 403, "identity", "no SNI"),
    (dict(sni=None, header="10.200.254.21"), 403, "domain", "IP literal"),
    (dict(sni=None, header="169-254-169-254.nip.io", port=80, scheme="http"), 403, "domain",
     "private address"),
    (dict(sni="api.example.test", header="api.example.test", port=8443), 403, "ports",
     "port 8443"),
    (dict(host="evil.example.test", header="api.example.test", mode="regular", sni=None,
          port=80, scheme="http"), 403, "identity", "Host header"),
    (dict(host="a.allowed.example.test", header="a.allowed.example.test", mode="regular",
          sni="b.allowed.example.test"), 403, "identity", "SNI"),
]


@pytest.mark.parametrize(("kw", "status", "by", "reason"), CASES)
def test_refusals(h, kw, status, by, reason):
    f = flow(**kw)
    h.addon.requestheaders(f)
    body = blocked_body(f)
    assert f.response.status_code == status
    assert body["blocked"] is True and body["by"] == by and reason in body["reason"]
    assert [r.decision for r in h.records] == ["blocked"]
    assert f.request.host == kw.get("host", "10.200.128.1")  # not retargeted


def test_regular_mode_allowed(h):
    f = flow(host="x.allowed.example.test", header="x.allowed.example.test", mode="regular",
             sni="x.allowed.example.test")
    h.addon.requestheaders(f)
    assert f.response is None


def test_rate_limit_gives_429():
    with taddons.context():
        h = Harness(rate=(0.001, 2))
        codes = []
        for _ in range(3):
            f = flow(sni="api.example.test", header="api.example.test")
            h.addon.requestheaders(f)
            codes.append(f.response.status_code if f.response else 200)
        assert codes == [200, 200, 429]


def test_connect_to_port_22_and_ip_literals_refused(h):
    for host, port in (("api.example.test", 22), ("10.200.254.21", 443),
                       ("blocked.example.test", 443)):
        f = flow(host=host, port=port, method="CONNECT", mode="regular", sni=None)
        h.addon.http_connect(f)
        assert f.response.status_code == 403, (host, port)
    ok = flow(host="api.example.test", port=443, method="CONNECT", mode="regular", sni=None)
    h.addon.http_connect(ok)
    assert ok.response is None


def server_data(host, port, via=None):
    server = connection.Server(address=(host, port))
    server.via = via
    return server_hooks.ServerConnectionHookData(server=server, client=tflow.tclient_conn())


@pytest.mark.parametrize(("host", "port", "allowed"), [
    ("api.example.test", 443, True), ("api.example.test", 22, False),
    ("10.200.254.21", 443, False), ("blocked.example.test", 443, False),
    ("10.200.128.1", 8080, False),
])
def test_server_connect_gate(h, host, port, allowed):
    data = server_data(host, port)
    h.addon.server_connect(data)
    assert (data.server.error is None) is allowed
    if not allowed:
        assert h.records[-1].direction == "upstream" and h.records[-1].decision == "blocked"


def test_upstream_error_is_blocked_never_served(h):
    f = flow(sni="api.example.test", header="api.example.test")
    h.addon.requestheaders(f)
    h.addon.request(f)
    f.error = tflow.terr()
    h.addon.error(f)
    h.addon.response(f)
    assert [(r.direction, r.decision) for r in h.records] == [("outbound", "allowed"),
                                                               ("response", "blocked")]
    assert "upstream error" in h.records[1].reason
    assert h.records[1].extra["outcome"] == "upstream-failed"


@pytest.mark.parametrize(("message", "responded", "client_gone", "decision", "outcome"), [
    ("stream reset by client (CANCEL)", True, False, "allowed", "client-closed"),
    ("Client disconnected.", True, True, "allowed", "client-closed"),
    ("stream reset by client (CANCEL)", False, False, "allowed", "client-closed"),
    ("peer closed connection", True, True, "allowed", "client-closed"),  # the client's h2
    ("peer closed connection", True, False, "blocked", "upstream-failed"),  # the upstream's
    ("Server disconnected.", True, False, "blocked", "upstream-failed"),
])
def test_the_audit_says_what_happened(h, message, responded, client_gone, decision, outcome):
    """A client that closes a stream it was served (HTTP/2 clients cancel after the final
    event) was served: not blocked. An upstream that vanished is not a client's doing."""
    f = flow(sni="api.example.test", header="api.example.test")
    h.addon.requestheaders(f)
    h.addon.request(f)
    if responded:
        f.response = tutils.tresp()
        h.addon.responseheaders(f)
    if client_gone:
        f.client_conn.state = ConnectionState.CLOSED
    f.error = flow_error(message)
    h.addon.error(f)
    (rec,) = [r for r in h.records if r.direction == "response"]
    assert (rec.decision, rec.extra["outcome"]) == (decision, outcome)
    assert message in rec.reason


def test_raw_tcp_is_killed(h):
    f = tflow.ttcpflow()
    h.addon.tcp_start(f)
    assert f.killable is False or f.error is not None or not f.live
    assert h.records[-1].decision == "blocked"


# ---- fail closed: every hook, made to raise -----------------------------------------------

class Boom(Exception):
    pass


def exploding_policy():
    raise Boom("policy exploded")


@pytest.mark.parametrize("hook", ["requestheaders", "http_connect", "request", "response"])
def test_every_flow_hook_fails_closed(hook):
    with taddons.context():
        h = Harness()
        connect = hook == "http_connect"
        f = flow(sni="api.example.test", header="api.example.test",
                 method="CONNECT" if connect else "GET", mode="regular" if connect else
                 "transparent", host="api.example.test" if connect else "10.200.128.1")
        if hook in ("request", "response"):
            h.addon.requestheaders(f)  # legitimately allowed first
            assert f.response is None
        if hook == "response":
            h.addon.request(f)
            f.response = tutils.tresp()
            state(f).decisions = object()  # reading the verdicts raises
        h.addon.policy = exploding_policy  # requestheaders, http_connect

        def explode(*a, **k):
            raise Boom("inspector stage exploded")

        h.addon._inspect = explode  # request
        getattr(h.addon, hook)(f)
        assert f.response is not None and f.response.status_code == 403, hook
        assert blocked_body(f)["by"] == "fail-closed"
        assert h.records and h.records[-1].decision == "blocked"
        assert "internal error" in h.records[-1].reason


def test_server_connect_fails_closed():
    with taddons.context():
        h = Harness()
        h.addon.policy = exploding_policy
        data = server_data("api.example.test", 443)
        h.addon.server_connect(data)
        assert data.server.error and "internal error" in data.server.error
        assert h.records[-1].decision == "blocked"


def test_inspector_that_raises_blocks():
    class Broken:
        name, phase = "broken", "headers"

        def inspect(self, request, ctx):
            raise RuntimeError("nope")

    with taddons.context():
        h = Harness(chain=(DomainInspector(), Broken()))
        f = flow(sni="api.example.test", header="api.example.test")
        h.addon.requestheaders(f)
        body = blocked_body(f)
        assert body["by"] == "broken" and "inspector broken failed" in body["reason"]


def test_chain_first_block_wins_and_stops():
    calls = []

    class Rec:
        phase = "headers"

        def __init__(self, name, action):
            self.name, self.action = name, action

        def inspect(self, request, ctx):
            calls.append(self.name)
            return Decision(self.action, "r", self.name)

    chain = (Rec("a", "flag"), Rec("b", "block"), Rec("c", "allow"))
    decisions = run_chain(chain, None, None, phase="headers")  # type: ignore[arg-type]
    assert calls == ["a", "b"] and first_block(decisions).inspector == "b"
    assert any(d.action == "flag" for d in decisions)


def test_deny_all_policy_blocks():
    with taddons.context():
        h = Harness(policy=Policy.deny_all("policy file invalid"))
        f = flow(sni="api.example.test", header="api.example.test")
        h.addon.requestheaders(f)
        assert blocked_body(f)["reason"] == "policy file invalid"


@pytest.mark.parametrize(("value", "expected"), [
    ("api.example.test", ("api.example.test", None)), ("API.example.test.:443",
                                                        ("api.example.test", 443)),
    ("[2001:db8::1]:8080", ("2001:db8::1", 8080)), ("x:abc", ("x", -1)), (None, (None, None)),
])
def test_split_host_header(value, expected):
    assert split_host_header(value) == expected


def test_audit_only_hooks_fail_closed_too():
    with taddons.context():
        h = Harness()
        f = flow(sni="api.example.test", header="api.example.test")
        h.addon.requestheaders(f)
        h.addon.request(f)
        f.error = tflow.terr()
        original = h.addon.records.outcome
        calls = []

        def record_fails_once(*a, **k):
            calls.append(1)
            if len(calls) == 1:
                raise Boom("audit exploded")
            return original(*a, **k)

        h.addon.records.outcome = record_fails_once
        h.addon.error(f)
        assert [r.decision for r in h.records] == ["allowed", "blocked"]
        assert "internal error in error" in h.records[1].reason
        data = server_data("api.example.test", 443)
        data.server.error = "connection refused"
        h.addon.records.audit = lambda rec: (_ for _ in ()).throw(Boom("disk full"))
        h.addon.server_connect_error(data)  # must not raise into mitmproxy


def test_expect_100_continue_dropped_only_for_bodies_of_unknown_length(h):
    """mitmproxy never answers an upload it cut after its own interim 100; without the 100 the
    client gets the 413 (end to end: test_streaming_world.py)."""
    chunked = flow(sni="api.example.test", header="api.example.test", method="PUT")
    chunked.request.headers["Expect"] = "100-continue"
    chunked.request.headers["Transfer-Encoding"] = "chunked"
    h.addon.requestheaders(chunked)
    assert chunked.response is None and "expect" not in chunked.request.headers
    sized = flow(sni="api.example.test", header="api.example.test", method="PUT")
    sized.request.headers["Expect"] = "100-continue"
    sized.request.headers["Content-Length"] = "5000"
    h.addon.requestheaders(sized)
    assert sized.response is None and sized.request.headers["expect"] == "100-continue"


def test_a_binary_answer_teaches_the_watcher_no_echo_and_a_textual_one_does():
    from agentcage.gateway.watcher.settings import WatcherSettings
    from agentcage.gateway.watcher.watch import Watcher
    from agentcage.inspect.patterns import load_patterns

    token = b"c2hhNTEyLWFiY2RlZmdoaWprbG1ub3A"  # an integrity hash, say
    with taddons.context():
        watcher = Watcher(WatcherSettings(), lambda r: None, load_patterns())
        addon = CageAddon(policy=lambda: POLICY, audit=lambda r: None, chain=build_chain(),
                          tcp_ports=(80, 443), limiter=HostRateLimiter(1000.0, 1000),
                          watcher=watcher)
        for ctype, learned in (("application/octet-stream", False), ("image/png", False),
                               ("application/vnd.npm.install-v1+json", True), ("", True)):
            host = f"h{len(ctype)}.allowed.example.test"
            f = flow(sni=host, header=host)
            addon.requestheaders(f)
            addon.request(f)
            assert f.response is None
            f.response = tutils.tresp(content=b'{"integrity": "' + token + b'"}')
            if ctype:
                f.response.headers["content-type"] = ctype
            addon.responseheaders(f)
            addon.response(f)
            watcher.settle()
            echoes = watcher.information._streams.get(host).echoes
            assert (hash(token) in echoes) is learned, ctype


def test_what_the_watcher_reads_of_an_answer_is_its_decoded_body_unless_binary():
    import gzip

    from agentcage.gateway.addon import answer_body

    text = b'{"etag": "c2hhNTEyLWFiY2RlZmdoaWprbG1ub3A"}'

    def answer(content: bytes, **headers: str) -> bytes:
        resp = tutils.tresp(content=content)
        for name in ("content-type", "content-encoding", "content-length"):
            resp.headers.pop(name, None)
        for name, value in headers.items():
            resp.headers.add(name.replace("_", "-"), value)
        return answer_body(resp)

    assert answer(text) == text
    assert answer(text, Content_Type="application/json; charset=utf-8") == text
    assert answer(gzip.compress(text), Content_Encoding="gzip") == text
    assert answer(gzip.compress(text), Content_Encoding="") == gzip.compress(text)
    assert answer(text, Content_Type=" IMAGE/PNG") == b""  # binary, however it is written
    assert answer(text, content_type="application/octet-stream") == b""
    assert answer(text, Content_Encoding="no-such-coding") == b""  # cannot be undone
    assert answer(b"not gzip", Content_Encoding="gzip") == b""
