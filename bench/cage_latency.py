"""HTTPS request latency: direct vs bare mitmdump vs through the cage's gateway, in one run.

Same client (system python3, stdlib only), same server (the fake internet's allowed.example.test),
medians over N requests, each with a new TLS connection and on one keep-alive connection:

- direct: a namespace linked straight to the fake internet (the baseline);
- mitmdump: bare `mitmdump` (no addon) as a regular proxy in such a namespace;
- gateway (regular): the cage's gateway through HTTPS_PROXY (CONNECT), as agents use it;
- gateway (transparent): the cage's gateway with no proxy variables (DNS points at the gateway).

The addon's cost is the gateway's median minus bare mitmdump's. Usage (root):
    .venv/bin/python bench/cage_latency.py [--new 100] [--keep 200]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from fakenet import FakeInternet

sys.path.append(str(Path(__file__).parent))  # appended: shadows nothing
from mitmdump_baseline import PORT, start_mitmdump

HOST = "allowed.example.test"
NOBODY = 65534  # the uid a cage of a root-owned project runs as (container.host_user: auto)

CLIENT = r'''
import http.client, json, socket, ssl, statistics, sys, time
host, proxy, cafile = sys.argv[1], sys.argv[4], sys.argv[5]
n_new, n_keep = int(sys.argv[2]), int(sys.argv[3])
ctx = ssl.create_default_context(cafile=cafile)
target = socket.getaddrinfo(host, 443, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]

class Conn(http.client.HTTPSConnection):
    def connect(self):
        if proxy:
            phost, pport = proxy.rsplit(":", 1)
            sock = socket.create_connection((phost, int(pport)))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += sock.recv(4096)
            assert b" 200" in buf.split(b"\r\n")[0], buf
        else:
            sock = socket.create_connection((target, 443))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = ctx.wrap_socket(sock, server_hostname=host)

def get(conn):
    conn.request("GET", "/", headers={"Host": host})
    r = conn.getresponse(); r.read()
    assert r.status == 200, r.status

def timed(fn):
    t = time.perf_counter(); fn(); return (time.perf_counter() - t) * 1000

new = []
for _ in range(n_new):
    def one():
        c = Conn(host); get(c); c.close()
    new.append(timed(one))
c = Conn(host); get(c)
keep = [timed(lambda: get(c)) for _ in range(n_keep)]
print(json.dumps({"new_ms": statistics.median(new), "keep_ms": statistics.median(keep)}))
'''


def client_run(prefix: list[str], n_new: int, n_keep: int, proxy: str, cafile: str) -> dict:
    r = subprocess.run([*prefix, "/usr/bin/python3", "-c", CLIENT, HOST, str(n_new), str(n_keep),
                        proxy, cafile], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"client failed: {r.stderr.strip()[-600:]}")
    return json.loads(r.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--new", type=int, default=100)
    parser.add_argument("--keep", type=int, default=200)
    args = parser.parse_args()
    from agentcage.cages import CageService
    from agentcage.config.load import load_config_text
    from agentcage.state import StateStore

    work = Path(tempfile.mkdtemp(prefix="agentcage-bench-"))
    os.chmod(work, 0o755)
    results: dict[str, dict] = {}
    try:
        with FakeInternet() as net:
            client = net.add_client()
            prefix = client.exec_prefix  # fakenet's namespace, with its resolv.conf
            results["direct"] = client_run(prefix, args.new, args.keep, "", str(net.ca_cert_path))
            proc, mitm_ca = start_mitmdump(net, client, work)
            try:
                results["mitmdump (no addon)"] = client_run(prefix, args.new, args.keep,
                                                            f"127.0.0.1:{PORT}", mitm_ca)
            finally:
                proc.terminate()
                proc.wait(timeout=10)
            service = CageService(StateStore(work / "home"))
            config = load_config_text(
                f"name: latency\ndomains: {{mode: allowlist, allow: [{HOST}]}}\n"
                f"dns_servers: [{net.dns_address}]\nrate_limit: {{requests_per_second: 10000, "
                f"burst: 10000}}\ngateway: {{uplink: 'netns:{client.netns}', trusted_networks: "
                f"[10.200.0.0/16], upstream_ca_files: ['{net.ca_cert_path}']}}\n")
            project = work / "project"  # /workspace: owned by the uid the cage runs as
            project.mkdir()
            os.chown(project, NOBODY, NOBODY)
            service.create(config, project)
            try:
                gw = service.backend.runtime(service.store.cage("latency"))["plan"]
                from agentcage.backends.netplan import NetPlan

                address = NetPlan.from_dict(gw).gateway_address
                for label, proxy in (("gateway (regular)", f"{address}:8080"),
                                     ("gateway (transparent)", "")):
                    r = service.exec_capture("latency", [
                        "/usr/bin/python3", "-c", CLIENT, HOST, str(args.new), str(args.keep),
                        proxy, "/run/agentcage/ca-bundle.pem"], timeout=600)
                    if r.returncode != 0:
                        raise SystemExit(f"cage client failed: {r.stderr.strip()[-600:]}")
                    results[label] = json.loads(r.stdout)
            finally:
                service.destroy("latency")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = results["direct"]
    print(f"{'path':24} {'new conn ms':>12} {'x direct':>9} {'keep-alive ms':>14} {'x direct':>9}")
    for label, r in results.items():
        print(f"{label:24} {r['new_ms']:12.2f} {r['new_ms'] / base['new_ms']:9.2f} "
              f"{r['keep_ms']:14.2f} {r['keep_ms'] / base['keep_ms']:9.2f}")
    bare = results["mitmdump (no addon)"]
    gate = results["gateway (regular)"]
    for kind in ("new_ms", "keep_ms"):
        added = gate[kind] - bare[kind]
        print(f"gateway minus bare mitmdump ({kind[:-3]}): {added:+.2f} ms "
              f"(target < 1 ms: {'met' if added < 1 else 'NOT met'})")


if __name__ == "__main__":
    main()
