"""The gateway in the fake internet, all real: bwrap, namespaces, nftables, mitmproxy.

Every blocked case carries a unique canary and is paired with a control that must succeed, so a
broken harness (no network at all) cannot pass for a secure cage.
"""

from __future__ import annotations

import json
import secrets
import time
from pathlib import Path

import pytest

from tests.agentcage.conftest import start_cage

pytestmark = pytest.mark.netns

ALLOW = ["allowed.example.test", "api.example.test", "files.example.test", "ghost.example.test",
         "metadata.google.internal"]
CURL = "curl -sS -m 8 --noproxy '*'"  # transparent path (no proxy variables)


@pytest.fixture(scope="module")
def cage(net):
    # trust only the service block: the metadata address (10.200.255.169) stays "private"
    yield from start_cage(
        net, "world", ALLOW, trusted="10.200.254.0/24",
        gateway_env={"AGENTCAGE_GATEWAY_FAULT_HOST": "files.example.test"},
    )


def canary() -> str:
    return "canary-" + secrets.token_hex(8)


def records_for(cage, host: str, path: str | None = None) -> list[dict]:
    return [r for r in cage.audit() if r.get("host") == host and r.get("direction") == "outbound"
            and (path is None or r.get("path") == path)]


def outcomes_for(cage, host: str, path: str | None = None) -> list[dict]:
    """The `response` records: what came of requests that went upstream."""
    return [r for r in cage.audit() if r.get("host") == host and r.get("direction") == "response"
            and (path is None or r.get("path") == path)]


def wait_for(predicate, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    return predicate()


# ---- allowed traffic (the controls) -----------------------------------------------------------

def test_allowed_https_transparent_and_regular_and_http(cage):
    c = canary()
    r = cage.sh(
        f"{CURL} -o /dev/null -w '%{{http_code}} ' https://allowed.example.test/{c}-t;"
        f"curl -sS -m 8 -o /dev/null -w '%{{http_code}} ' https://allowed.example.test/{c}-r;"
        f"{CURL} -o /dev/null -w '%{{http_code}}' http://allowed.example.test/{c}-h"
    )
    assert r.stdout.split() == ["200", "200", "200"], r
    paths = {q["path"] for q in cage.net.http_requests() if c in q["path"]}
    assert paths == {f"/{c}-t", f"/{c}-r", f"/{c}-h"}
    for suffix in ("t", "r", "h"):
        recs = records_for(cage, "allowed.example.test", f"/{c}-{suffix}")
        assert [x["decision"] for x in recs] == ["allowed"]  # exactly one record
        assert recs[0]["inspectors"][0]["name"] == "domain"
        for key in ("ts", "direction", "method", "host", "port", "path", "url", "decision",
                    "reason", "inspectors", "secrets_injected", "secrets_redacted", "flow"):
            assert key in recs[0]
        (served,) = outcomes_for(cage, "allowed.example.test", f"/{c}-{suffix}")
        assert (served["decision"], served["outcome"], served["status"]) == (
            "allowed", "served", 200)
        assert served["flow"] == recs[0]["flow"]
        # the decision was on disk before the request went upstream: it comes first
        lines = [r for r in cage.audit() if r.get("flow") == served["flow"]]
        assert [r["direction"] for r in lines] == ["outbound", "response"]


def test_blocked_name_gets_403_json_and_audit(cage):
    c = canary()
    r = cage.sh(f"{CURL} -w ' %{{http_code}}' https://blocked.example.test/{c}")
    body, status = r.stdout.rsplit(" ", 1)
    assert status == "403"
    doc = json.loads(body)
    ask = doc.pop("how_to_ask")  # the policy API (on by default): how to ask for it
    assert doc == {"blocked": True, "reason": "not in allowlist", "host": "blocked.example.test",
                   "by": "domain"}
    assert ask.startswith("to ask for it: POST https://agentcage.local/v1/allowlist/requests")
    assert not cage.net.received(c)
    recs = records_for(cage, "blocked.example.test", f"/{c}")
    assert [x["decision"] for x in recs] == ["blocked"]


def test_domain_add_takes_effect_without_restart(cage):
    pid = cage.runtime["gateway_pid"]
    c1, c2, c3 = canary(), canary(), canary()
    url = "https://evil.example.test/"
    assert "403" in cage.sh(f"{CURL} -o /dev/null -w '%{{http_code}}' {url}{c1}").stdout
    cage.service.domain_add(cage.name, ["evil.example.test"])
    ok = wait_for(lambda: cage.sh(f"{CURL} -o /dev/null -w '%{{http_code}}' {url}{c2}")
                  .stdout == "200")
    assert ok
    assert cage.net.received(c2)
    assert not cage.net.received(c1), [r for r in cage.net.sink_records() if c1.encode() in r.data]
    assert cage.service.domain_rm(cage.name, "evil.example.test")
    assert wait_for(lambda: cage.sh(f"{CURL} -o /dev/null -w '%{{http_code}}' {url}").stdout
                    == "403")
    assert cage.sh(f"{CURL} -o /dev/null -w '%{{http_code}}' {url}{c3}").stdout == "403"
    assert not cage.net.received(c3)
    assert cage.runtime["gateway_pid"] == pid  # same gateway: no restart


def test_domain_grant_expires(cage):
    cage.service.domain_add(cage.name, ["pypi.org"], expires_in="2s")
    c = canary()
    assert wait_for(lambda: cage.sh(f"{CURL} -o /dev/null -w '%{{http_code}}' "
                                    f"https://pypi.org/{c}").stdout == "200")
    time.sleep(2.2)
    c2 = canary()
    assert cage.sh(f"{CURL} -o /dev/null -w '%{{http_code}}' https://pypi.org/{c2}").stdout == "403"
    assert not cage.net.received(c2)


# ---- what never reaches the internet ----------------------------------------------------------

def test_direct_ip_udp_icmp_ipv6_and_other_ports_never_arrive(cage):
    net = cage.net
    target = net.address_of("allowed.example.test")
    c = canary()
    before = net.packet_counts()
    script = f"""
for p in 22 2375 8080 9999; do
  (printf '{c}-tcp' | timeout 2 python3 -c "
import socket,sys
s=socket.create_connection(('{target}',$p),timeout=1.5); s.sendall(sys.stdin.buffer.read())
" ) >/dev/null 2>&1 && echo "tcp $p connected"
done
python3 - <<'PY'
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for port in (53, 123, 9999):
    s.sendto(b"{c}-udp", ("{target}", port))
try:
    socket.create_connection(("fd0a:200:ffff::254:21", 443), timeout=1)
    print("ipv6 connected")
except OSError:
    pass
PY
ping -c 1 -W 1 {target} >/dev/null 2>&1 && echo "ping ok"
{CURL} -k -o /dev/null -w 'ip443=%{{http_code}}\\n' https://{target}/{c}-ip
{CURL} -o /dev/null -w 'ip80=%{{http_code}}\\n' http://{target}/{c}-ip80
echo done
"""
    r = cage.sh(script, timeout=60)
    assert "connected" not in r.stdout and "ping ok" not in r.stdout, r.stdout
    assert "ip443=403" in r.stdout and "ip80=403" in r.stdout, r
    assert r.stdout.strip().endswith("done")
    assert not net.received(c)
    assert net.sink_records() == [] or all(c.encode() not in s.data for s in net.sink_records())
    after = net.packet_counts()
    assert after["udp"] == before["udp"] and after["icmp"] == before["icmp"]
    assert after["icmpv6"] == before["icmpv6"]
    # the firewall counted what it dropped, and the gateway summarised it in the audit log
    def totals():
        drops = [x for x in cage.audit() if x.get("direction") == "packets"]
        return drops[-1]["dropped_total"] if drops else {}

    assert wait_for(lambda: totals().get("cage_tcp", 0) >= 4 and totals().get("cage_udp", 0) >= 3,
                    8), totals()
    # (ICMP never even leaves the cage: an unprivileged uid has no ICMP socket there)


def test_a_new_cage_never_sends_an_ipv6_packet_not_even_the_kernels_own(net):
    # A link that comes up before its namespace's IPv6 is off gets a link-local address, and
    # the kernel sends router and multicast-listener solicitations from it on timers of up to
    # a second: the gateway drops them, but they are the cage's packets all the same. Both
    # namespaces' IPv6 is off before their links exist, so there is nothing to send.
    import subprocess

    from agentcage.backends.netplan import CAGE_IF, NetPlan, in_ns

    def ipv6_sent(ns: str) -> dict[str, int]:
        text = subprocess.run(in_ns(ns, ["cat", "/proc/net/snmp6"]), capture_output=True,
                              text=True, timeout=30, check=True).stdout
        counts = dict(line.split() for line in text.splitlines() if line.strip())
        return {k: int(counts[k]) for k in ("Ip6OutRequests", "Ip6OutMcastPkts", "Icmp6OutMsgs")}

    for fresh in start_cage(net, "ipv6-quiet", ["allowed.example.test"]):
        plan = NetPlan.from_dict(fresh.runtime["plan"])
        time.sleep(2.5)  # past every solicitation timer a link-local address would have armed
        for ns in (plan.cage_ns, plan.gw_ns):
            sent = ipv6_sent(ns)
            assert sent == dict.fromkeys(sent, 0), (ns, sent)
        link = subprocess.run(in_ns(plan.cage_ns, ["ip", "-6", "addr", "show", "dev", CAGE_IF]),
                              capture_output=True, text=True, timeout=30)
        assert link.returncode == 0 and "inet6" not in link.stdout
        # the control: the cage is up and reaches an allowed name
        assert fresh.sh(f"{CURL} -o /dev/null -w '%{{http_code}}' "
                        "https://allowed.example.test/").stdout == "200"


def test_nothing_made_in_the_gateway_namespace_reaches_the_network(cage):
    # second layer: the gateway namespace has no route out. Only sockets the gateway makes in
    # the uplink namespace leave, so a socket opened there by anything else (a library, a
    # hook gone wrong) reaches nothing, trusted or not.
    import subprocess

    from agentcage.backends.netplan import NetPlan, in_ns

    gw = NetPlan.from_dict(cage.runtime["plan"]).gw_ns
    probe = ("import socket,sys\n"
             "try:\n socket.create_connection((sys.argv[1], 80), timeout=1.5); print('open')\n"
             "except OSError as e: print('refused', e)")

    def reach(ns: str, addr: str) -> str:
        return subprocess.run(in_ns(ns, ["python3", "-c", probe, addr]), capture_output=True,
                              text=True, timeout=30).stdout.strip()

    assert reach(gw, cage.net.metadata_address).startswith("refused")
    assert reach(gw, cage.net.address_of("allowed.example.test")).startswith("refused")
    # control: the same connect from the uplink namespace does reach the server
    assert reach(cage.net.uplink_ns, cage.net.address_of("allowed.example.test")) == "open"


def test_dns_for_unallowed_names_never_leaves(cage):
    c = canary()
    r = cage.sh(
        f"getent ahostsv4 {c}.evil.example.test | head -1; "
        f"getent ahostsv4 {c}.blocked.example.test | head -1; "
        "getent ahostsv4 allowed.example.test | head -1"
    )
    lines = [line.split()[0] for line in r.stdout.splitlines() if line.strip()]
    assert lines == ["198.51.100.1", "198.51.100.1", cage.gateway_address], r
    queries = cage.net.dns_queries()
    assert not any(c in q for q, _ in queries)
    dns = [x for x in cage.audit() if x.get("direction") == "dns" and c in x.get("host", "")]
    assert {x["decision"] for x in dns} == {"blocked"}
    # control: an allowed request makes the gateway (not the cage) resolve the name upstream
    cage.net.reset_records()
    assert cage.sh(f"{CURL} -o /dev/null -w '%{{http_code}}' https://api.example.test/").stdout \
        == "200"
    assert wait_for(lambda: ("api.example.test", "A") in cage.net.dns_queries())


def test_sni_must_equal_host(cage):
    c = canary()
    r = cage.sh(
        f"{CURL} -w ' %{{http_code}}' -H 'Host: blocked.example.test' "
        f"https://allowed.example.test/{c}"
    )
    body, status = r.stdout.rsplit(" ", 1)
    assert status == "403" and json.loads(body)["by"] == "identity"
    # fronting through the regular proxy: CONNECT to an allowed name, Host of another
    r2 = cage.sh(f"curl -sS -m 8 -o /dev/null -w '%{{http_code}}' -H 'Host: evil.example.test' "
                 f"https://allowed.example.test/{c}-p")
    assert r2.stdout == "403"
    assert not cage.net.received(c)
    ok = cage.sh(f"{CURL} -o /dev/null -w '%{{http_code}}' -H 'Host: allowed.example.test' "
                 f"https://allowed.example.test/{c}-ok")
    assert ok.stdout == "200"


def test_metadata_and_private_addresses_refused(cage):
    c = canary()
    r = cage.sh(
        f"{CURL} -o /dev/null -w '%{{http_code}} ' http://169.254.169.254/{c}-a;"
        f"{CURL} -o /dev/null -w '%{{http_code}} ' http://169-254-169-254.nip.io/{c}-b;"
        # an allowed name that resolves upstream to a private (untrusted) address
        f"{CURL} -o /dev/null -w '%{{http_code}}' http://metadata.google.internal/{c}-c"
    )
    codes = r.stdout.split()
    assert codes[0] == "403" and codes[1] == "403" and codes[2] in ("502", "403"), r
    assert not cage.net.received(c)
    # allowed by name and sent on its way (audited first); the connector refused to dial it
    recs = records_for(cage, "metadata.google.internal", f"/{c}-c")
    assert [x["decision"] for x in recs] == ["allowed"]
    outcomes = outcomes_for(cage, "metadata.google.internal", f"/{c}-c")
    assert [(x["decision"], x["outcome"]) for x in outcomes] == [("blocked", "upstream-failed")]
    upstream = [x for x in cage.audit() if x.get("direction") == "upstream"
                and x.get("host") == "metadata.google.internal"]
    assert any("non-public" in x["reason"] for x in upstream)


def test_connect_only_to_allowed_ports(cage):
    gw = cage.gateway_address
    r = cage.sh(
        f"curl -sS -m 5 -p -x http://{gw}:8080 -o /dev/null -w '%{{http_code}} ' "
        "https://allowed.example.test:22/ 2>/dev/null;"
        f"curl -sS -m 5 -p -x http://{gw}:8080 -o /dev/null -w '%{{http_code}}' "
        "https://allowed.example.test:443/"
    )
    assert r.stdout.split()[-1] == "200"
    assert r.stdout.startswith("403") or r.stdout.startswith("000"), r
    assert cage.net.sink_records(port=22) == []
    recs = [x for x in cage.audit() if x.get("method") == "CONNECT" and x.get("port") == 22]
    assert recs and recs[-1]["decision"] == "blocked"


def test_injected_addon_fault_blocks_and_is_audited(cage):
    c = canary()
    r = cage.sh(f"{CURL} -w ' %{{http_code}}' https://files.example.test/{c}")
    body, status = r.stdout.rsplit(" ", 1)
    assert status == "403" and json.loads(body)["by"] == "fail-closed"
    assert not cage.net.received(c)
    recs = records_for(cage, "files.example.test", f"/{c}")
    assert [x["decision"] for x in recs] == ["blocked"]
    assert "injected fault" in recs[0]["reason"]
    ok = cage.sh(f"{CURL} -o /dev/null -w '%{{http_code}}' https://allowed.example.test/")
    assert ok.stdout == "200"


def test_upstream_error_is_audited_never_allowed(cage):
    c = canary()
    r = cage.sh(f"{CURL} -o /dev/null -w '%{{http_code}}' https://ghost.example.test/{c}")
    assert r.stdout in ("502", "403"), r
    assert [x["decision"] for x in records_for(cage, "ghost.example.test", f"/{c}")] == [
        "allowed"]  # the decision, written before it went upstream
    (outcome,) = outcomes_for(cage, "ghost.example.test", f"/{c}")
    assert outcome["decision"] == "blocked" and "upstream" in outcome["reason"]


def test_invalid_policy_reload_blocks_everything_then_recovers(cage):
    path = cage.cage.policy
    good = path.read_text()
    try:
        path.write_text("{not json")
        blocked = wait_for(lambda: cage.sh(
            f"{CURL} -o /dev/null -w '%{{http_code}}' https://allowed.example.test/").stdout
            == "403")
        assert blocked
        assert any(x.get("direction") == "config" and x["decision"] == "blocked"
                   for x in cage.audit())
    finally:
        path.write_text(good)
    assert wait_for(lambda: cage.sh(
        f"{CURL} -o /dev/null -w '%{{http_code}}' https://allowed.example.test/").stdout == "200")


def test_only_the_uplink_thread_of_the_gateway_is_outside_the_gateway_namespace(cage):
    # the listeners, the resolver and every library thread live in the gateway namespace; one
    # thread, which makes the upstream sockets, lives in the uplink namespace. (The gateway's
    # supervisor, a one-thread process that only waits for it, stays where it was started.)
    import os

    from agentcage.backends import host
    from agentcage.backends.netplan import NetPlan

    gw_ns = os.stat(f"/run/netns/{NetPlan.from_dict(cage.runtime['plan']).gw_ns}").st_ino
    uplink_ns = os.stat(f"/run/netns/{cage.net.uplink_ns}").st_ino
    pids = host.gateways_of(cage.cage.root)
    serving = [p for p in pids if os.stat(f"/proc/{p}/ns/net").st_ino == gw_ns]
    assert len(serving) == 1, pids
    supervisors = [p for p in pids if p not in serving]
    assert all(len(os.listdir(f"/proc/{p}/task")) == 1 for p in supervisors)
    where = {}
    for task in os.listdir(f"/proc/{serving[0]}/task"):
        comm = Path(f"/proc/{serving[0]}/task/{task}/comm").read_text().strip()
        where[(task, comm)] = os.stat(f"/proc/{serving[0]}/task/{task}/ns/net").st_ino
    outside = {k: v for k, v in where.items() if v != gw_ns}
    assert list(outside.values()) == [uplink_ns], where
    assert len(where) > 1  # control: there are threads, and most are inside
