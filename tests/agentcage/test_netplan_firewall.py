"""Network plan and nftables ruleset: pure generation, and a syntax check in a scratch netns."""

from __future__ import annotations

import ipaddress
import os
import subprocess
from pathlib import Path

import pytest

from agentcage.backends.netplan import (
    CAGE_SYSCTLS,
    NetPlan,
    free_slot,
    setup_batches,
    teardown_batch,
)
from agentcage.errors import BackendError
from agentcage.gateway.firewall import render_ruleset
from agentcage.gateway.settings import GatewaySettings


def plan(uplink="netns:fn-abc-inet", slot=3) -> NetPlan:
    return NetPlan(suffix="a1b2c3", slot=slot, uplink=uplink)


def test_addresses_stay_in_the_cage_range():
    for slot in (0, 64, 119):
        p = plan(slot=slot)
        for addr in (p.gateway_address, p.cage_address):
            assert ipaddress.ip_address(addr) in ipaddress.ip_network("10.200.128.0/17")
    p = plan(slot=3)
    assert (p.gateway_address, p.cage_address) == ("10.200.131.1", "10.200.131.2")
    with pytest.raises(ValueError):
        plan(slot=120)


@pytest.mark.parametrize("uplink", ["host", "netns:fn-abc-host"])
def test_the_network_is_two_namespaces_and_one_veth_between_them(uplink):
    batches = setup_batches(plan(uplink=uplink))
    assert batches[0] == (["ip", "-batch", "-"], ["netns add agc-a1b2c3-gw",
                                                  "netns add agc-a1b2c3-cg"])
    for argv, _lines in batches[1:]:
        # every step acts inside one of the cage's own namespaces, never the host's or the
        # uplink's: no address, route, link, firewall rule or sysctl is added anywhere else
        assert argv in (["ip", "-n", "agc-a1b2c3-gw", "-batch", "-"],
                        ["ip", "-n", "agc-a1b2c3-cg", "-batch", "-"]), argv
    for argv, lines in batches:
        text = " ".join(argv + lines)
        assert "netns exec" not in text and "ip_forward" not in text
        assert "fn-abc-host" not in text
    veths = [line for _, lines in batches for line in lines if "veth" in line]
    assert veths == ["link add cage0 type veth peer name eth0 netns agc-a1b2c3-cg"]
    assert [a[2] for a, lines in batches[1:] if any("veth" in x for x in lines)] == [
        "agc-a1b2c3-gw"]
    assert CAGE_SYSCTLS == {"net.ipv6.conf.all.disable_ipv6": "1",
                            "net.ipv6.conf.default.disable_ipv6": "1"}


def test_teardown_removes_both_namespaces():
    assert teardown_batch(plan()) == (["ip", "-force", "-batch", "-"],
                                      ["netns del agc-a1b2c3-cg", "netns del agc-a1b2c3-gw"])


def test_sysctls_are_written_in_the_namespace_and_nowhere_else():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    from agentcage.backends import host

    ns = f"sysctl-test-{os.getpid()}"  # not agc-: no cage of anyone
    key = "net/ipv6/conf/default/disable_ipv6"
    ours = Path(f"/proc/sys/{key}").read_text()
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        before = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "cat",
                                 f"/proc/sys/{key}"], capture_output=True, text=True).stdout
        assert before.strip() == "0"  # the control: a fresh namespace has IPv6 on
        host.write_sysctls(ns, {"net.ipv6.conf.default.disable_ipv6": "1"})
        after = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", "cat", f"/proc/sys/{key}"],
                               capture_output=True, text=True).stdout
        assert after.strip() == "1"
        assert Path(f"/proc/sys/{key}").read_text() == ours  # this namespace's is untouched
        with pytest.raises(BackendError):
            host.write_sysctls(f"{ns}-missing", {"net.ipv6.conf.default.disable_ipv6": "1"})
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_free_slot():
    assert free_slot({0, 1, 2}, start=0) == 3
    with pytest.raises(RuntimeError):
        free_slot(set(range(120)))


def settings(**kw) -> GatewaySettings:
    base = dict(cage_name="x", netns="agc-a1b2c3-gw", cage_iface="cage0",
                gateway_address="10.200.131.1",
                cage_network="10.200.131.0/30", uplink_netns="", dns_servers=("10.200.255.53",),
                policy_path="/p", audit_path="/a", ready_path="/r", confdir="/c",
                upstream_ca_path="/u", tcp_ports=(80, 443))
    base.update(kw)
    return GatewaySettings(**base)


def test_ruleset_default_deny_shape():
    rules = render_ruleset(settings())
    assert "chain forward" in rules and "policy drop" in rules
    assert rules.count("policy drop") >= 3  # input, forward, output
    assert "redirect to :8443" in rules
    assert "tcp dport 8443 ct status dnat accept" in rules
    assert "fib daddr type local reject" in rules  # self-loop guard
    assert "oifname" not in rules.replace('oifname "cage0"', "")  # no uplink in this namespace
    assert "meta nfproto ipv6 counter name ipv6 drop" in rules
    assert "tcp dport { 80, 443 }" in rules


def test_ruleset_extra_ports():
    assert "tcp dport { 80, 443, 8443 }" in render_ruleset(settings(tcp_ports=(443, 80, 8443)))


def test_published_ports_let_the_gateway_dial_the_cage_on_those_ports_alone():
    plain = render_ruleset(settings())
    published = render_ruleset(settings(published_ports=(("127.0.0.1", 18789, 18789),
                                                         ("127.0.0.1", 9000, 80)),
                                        cage_address="10.200.131.2"))
    rule = ('oifname "cage0" ip daddr 10.200.131.2 tcp dport { 80, 18789 } ct state new '
            "accept")
    assert rule in published and "ct state new" not in plain
    # the only difference: that one rule, in the output chain
    assert published.replace("\n    " + rule, "") == plain


RELAYS = ({"host": "imap.example.test", "ports": [993], "secret": "MAIL"},
          {"host": "smtp.example.test", "ports": [465, 587], "secret": "MAIL"})


def test_mail_relays_are_reached_on_the_gateways_address_on_their_ports_alone():
    plain = render_ruleset(settings())
    relayed = render_ruleset(settings(relays=RELAYS))
    ingress = "ip daddr 10.200.131.1 tcp dport { 465, 587, 993 } accept"
    given = ("iifname \"cage0\" ip saddr 10.200.131.0/30 ip daddr 10.200.131.1 tcp dport "
             "{ 465, 587, 993 } accept")
    assert ingress in relayed and given in relayed and "993" not in plain
    # the only difference: those two rules (no redirect, no forward, no other address)
    assert relayed.replace("\n    " + given, "").replace("\n    " + ingress, "") == plain


def test_settings_round_trip():
    s = settings(trusted_networks=("10.200.0.0/16",),
                 published_ports=(("127.0.0.1", 18789, 18789),), cage_address="10.200.131.2",
                 relays=RELAYS)
    assert GatewaySettings.from_json(s.to_json()) == s
    with pytest.raises(ValueError, match="unknown"):
        GatewaySettings.from_json('{"bogus": 1}')


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a scratch namespace")
def test_ruleset_loads_in_a_scratch_namespace():
    # a private, unnamed network namespace that vanishes with the process: never the host's
    script = "nft -f -"  # iifname/oifname match by name: the links need not exist
    for ruleset in (render_ruleset(settings()), render_ruleset(settings(
            published_ports=(("127.0.0.1", 18789, 18789),), cage_address="10.200.131.2",
            relays=RELAYS))):
        r = subprocess.run(["unshare", "--net", "sh", "-c", script], input=ruleset,
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
