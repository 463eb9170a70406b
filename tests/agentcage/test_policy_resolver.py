"""Policy file, live reload (fail closed), the cage resolver and the upstream connector."""

from __future__ import annotations

import asyncio
import json

import pytest
from dnslib import QTYPE, RCODE, DNSRecord

from agentcage.addresses import UpstreamAddressRule, is_public
from agentcage.gateway.audit import AuditLog, AuditRecord, read_audit
from agentcage.gateway.policyholder import PolicyHolder
from agentcage.gateway.resolver import CageResolver
from agentcage.gateway.upstream import UpstreamConnector, UpstreamRefused
from agentcage.policy import (
    Policy,
    add_rule,
    compile_document,
    document_from_domains,
    remove_rule,
)


def test_policy_modes():
    allow = compile_document(document_from_domains("allowlist", ["a.example.test"], []))
    assert allow.decide("a.example.test").allowed
    assert not allow.decide("b.example.test").allowed
    block = compile_document(document_from_domains("blocklist", [], ["b.example.test"]))
    assert block.decide("a.example.test").allowed
    assert not block.decide("b.example.test").allowed
    assert not block.decide("10.0.0.1").allowed  # IP literals never pass, in any mode
    none = compile_document(document_from_domains(None, [], []))
    assert "deny all" in none.decide("a.example.test").reason


def test_add_and_remove_rules_with_expiry():
    doc = document_from_domains(None, [], [])
    doc = add_rule(doc, "new.example.test", expires_at=100.0)
    policy = compile_document(doc)
    assert policy.decide("new.example.test", now=99).allowed
    assert not policy.decide("new.example.test", now=101).allowed
    doc, found = remove_rule(doc, "NEW.example.test")
    assert found and doc["allow"] == []


@pytest.mark.parametrize("bad", [
    "not json", json.dumps({"version": 2}), json.dumps({"version": 1, "mode": "x"}),
    json.dumps({"version": 1, "mode": "allowlist", "allow": [{"pattern": "*"}]}),
    json.dumps({"version": 1, "mode": "allowlist", "allow": "a.example.test"}),
])
def test_invalid_reload_blocks_everything_and_audits(tmp_path, bad):
    path = tmp_path / "domains.json"
    path.write_text(json.dumps(document_from_domains("allowlist", ["a.example.test"], [])))
    records: list[AuditRecord] = []
    holder = PolicyHolder(path, records.append)
    assert holder.current.decide("a.example.test").allowed
    path.write_text(bad)
    assert holder.check()
    assert not holder.current.decide("a.example.test").allowed
    assert records[-1].decision == "blocked" and records[-1].direction == "config"
    assert not holder.check()  # no change: no duplicate record
    path.write_text(json.dumps(document_from_domains("allowlist", ["a.example.test"], [])))
    assert holder.check() and holder.current.decide("a.example.test").allowed


def test_missing_policy_file_denies(tmp_path):
    holder = PolicyHolder(tmp_path / "nope.json", lambda r: None)
    assert not holder.current.decide("a.example.test").allowed


def resolve(resolver, name, qtype="A"):
    reply = resolver.answer(DNSRecord.question(name, qtype).pack())
    return DNSRecord.parse(reply)


def test_resolver_answers_without_forwarding():
    records: list[AuditRecord] = []
    policy = compile_document(document_from_domains("allowlist", ["a.example.test"], []))
    r = CageResolver("10.200.128.1", lambda: policy, records.append)
    allowed = resolve(r, "a.example.test")
    assert [str(x.rdata) for x in allowed.rr] == ["10.200.128.1"]
    blocked = resolve(r, "secret-123.evil.test")
    assert [str(x.rdata) for x in blocked.rr] == ["198.51.100.1"]
    assert resolve(r, "a.example.test", "AAAA").rr == []
    assert resolve(r, "a.example.test", "TXT").rr == []
    assert [(x.host, x.decision) for x in records][:2] == [
        ("a.example.test", "allowed"), ("secret-123.evil.test", "blocked")]
    nx = CageResolver("10.200.128.1", lambda: policy, records.append, blocked_answer="nxdomain")
    assert resolve(nx, "evil.test").header.rcode == RCODE.NXDOMAIN
    assert r.answer(b"\x00garbage") is None


def test_resolver_fails_closed():
    def broken():
        raise RuntimeError("x")

    r = CageResolver("10.200.128.1", broken, lambda rec: None)
    reply = resolve(r, "a.example.test")
    assert [str(x.rdata) for x in reply.rr] == ["198.51.100.1"]
    assert reply.q.qtype == QTYPE.A


@pytest.fixture(scope="module")
def uplink():
    """A real uplink: a scratch namespace whose address is 10.77.0.1/24 (with 10.200.254.1/32
    on its loopback, inside the test world's trusted block) and a default route out of a veth.
    Cleaned up with the namespaces."""
    import os
    import secrets
    import subprocess

    from agentcage.gateway.uplink import Uplink

    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    ns, peer = f"agct-{secrets.token_hex(3)}", f"agcp-{secrets.token_hex(3)}"
    script = [f"netns add {ns}", f"netns add {peer}",
              f"link add v0 netns {ns} type veth peer name v1 netns {peer}",
              f"-n {ns} addr add 10.77.0.1/24 dev v0", f"-n {ns} link set v0 up",
              f"-n {ns} link set lo up", f"-n {ns} addr add 10.200.254.1/32 dev lo",
              f"-n {peer} link set v1 up", f"-n {ns} route add default via 10.77.0.254"]
    try:
        for line in script:
            subprocess.run(["ip", *line.split()], check=True, capture_output=True)
        up = Uplink.of_path(f"/run/netns/{ns}")
        yield up
        up.close()
    finally:
        for name in (ns, peer):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


class FakeResolver:
    def __init__(self, answers, uplink):
        self.answers, self.uplink = answers, uplink

    async def resolve(self, name):
        return self.answers[name]


@pytest.mark.parametrize(("host", "answers", "trusted", "ok"), [
    ("a.example.test", ("93.184.216.34",), (), True),
    ("a.example.test", ("10.0.0.5",), (), False),
    ("a.example.test", ("169.254.169.254",), (), False),
    ("a.example.test", ("93.184.216.34", "127.0.0.1"), (), False),
    ("a.example.test", ("10.200.254.21",), ("10.200.254.0/24",), True),
    ("a.example.test", ("10.200.255.169",), ("10.200.254.0/24",), False),
    ("93.184.216.34", (), (), False),
    # the uplink host's own addresses, even where trusted: its own services are never upstreams
    ("a.example.test", ("10.200.254.1",), ("10.200.254.0/24",), False),
    ("a.example.test", ("10.77.0.1",), ("10.77.0.0/16",), False),
    ("a.example.test", ("10.77.0.255",), ("10.77.0.0/16",), False),  # its broadcast address
    ("a.example.test", ("10.77.0.9",), ("10.77.0.0/16",), True),  # control: its neighbour
])
def test_upstream_connector_anti_rebinding(uplink, host, answers, trusted, ok):
    rule = UpstreamAddressRule.from_strings(trusted)
    conn = UpstreamConnector(FakeResolver({host: answers}, uplink), rule, lambda h, p: None,
                             timeout=1)
    if ok:
        assert asyncio.run(conn.target(host, 443)) == answers[0]
    else:
        with pytest.raises(UpstreamRefused):
            asyncio.run(conn.target(host, 443))


def test_upstream_connector_asks_the_policy(uplink):
    conn = UpstreamConnector(FakeResolver({}, uplink), UpstreamAddressRule(),
                             lambda h, p: "nope", 1)
    with pytest.raises(UpstreamRefused, match="nope"):
        asyncio.run(conn.target("a.example.test", 443))


@pytest.mark.parametrize(("addr", "public"), [
    ("8.8.8.8", True), ("10.1.2.3", False), ("172.16.0.1", False), ("192.168.1.1", False),
    ("127.0.0.1", False), ("169.254.169.254", False), ("100.64.0.1", False), ("0.0.0.0", False),
    ("198.51.100.1", False), ("::1", False), ("fd00::1", False), ("fe80::1", False),
    ("::ffff:10.0.0.1", False), ("2606:4700::1111", True),
])
def test_public_addresses(addr, public):
    import ipaddress

    assert is_public(ipaddress.ip_address(addr)) is public


def test_audit_log_is_private_and_line_per_record(tmp_path):
    import os
    import stat

    log = AuditLog(tmp_path / "audit.jsonl")
    log.write(AuditRecord("outbound", "blocked", "r", host="h"))
    log.write(AuditRecord("dns", "allowed", "r", host="h2"))
    log.close()
    assert stat.S_IMODE(os.stat(tmp_path / "audit.jsonl").st_mode) == 0o600
    recs = read_audit(tmp_path / "audit.jsonl")
    assert [r["host"] for r in recs] == ["h", "h2"]
    with pytest.raises(ValueError):
        AuditRecord("outbound", "maybe", "r")


def test_deny_all_policy():
    assert not Policy.deny_all("x").decide("a.example.test").allowed


def test_cage_ca_is_a_constrained_ca_and_installed_privately(tmp_path):
    import os
    import stat

    from cryptography import x509

    from agentcage.gateway.ca import install_ca, make_ca

    key, cert = make_ca()
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca and constraints.path_length == 0
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert install_ca(tmp_path / "ca", key, cert)
    for name in ("mitmproxy-ca.pem", "mitmproxy-ca-cert.pem"):
        assert stat.S_IMODE(os.stat(tmp_path / "ca" / name).st_mode) == 0o600
    assert "PRIVATE KEY" not in (tmp_path / "ca" / "mitmproxy-ca-cert.pem").read_text()
    other_key, other_cert = make_ca()
    assert not install_ca(tmp_path / "ca", other_key, other_cert)  # a cage keeps its CA
