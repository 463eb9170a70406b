"""A large upload's cost: time against a direct upload, memory against the body, in one run.

One body (default 100 MiB) is uploaded with a new HTTPS connection to the fake internet's
`/discard` (which counts it and answers its size), by the same stdlib client, along three paths:

- direct: a namespace linked straight to the fake internet (the time baseline);
- mitmdump: bare `mitmdump` (no addon) as a regular proxy: mitmproxy alone;
- gateway: the cage's gateway, transparently, as an agent's upload goes.

Each proxy's peak memory growth (VmHWM after minus VmRSS before) is reported as a multiple of
the body (the memory baseline: a proxy that inspects a whole body holds it once). The gateway
holds the plaintext for its inspectors and sends the ciphertext no faster than the upstream
takes it (`agentcage.gateway.pacing`). Targets: growth < 1.25x the body; time < 1.5x
bare mitmdump's (the inspectors' and the pacing's cost over mitmproxy's own).
Usage (root): .venv/bin/python -P bench/upload_memory.py [--mib 100] [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from fakenet import FakeInternet

sys.path.append(str(Path(__file__).parent))  # appended: shadows nothing
from mitmdump_baseline import PORT, start_mitmdump

HOST = "api.example.test"
MiB = 1024 * 1024
NOBODY = 65534  # the uid a cage of a root-owned project runs as (container.host_user: auto)

CLIENT = r'''
import http.client, json, os, socket, ssl, sys, time
host, path, proxy, cafile = sys.argv[1:5]
ctx = ssl.create_default_context(cafile=cafile)
if proxy:
    phost, pport = proxy.rsplit(":", 1)
    sock = socket.create_connection((phost, int(pport)))
    sock.sendall(f"CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += sock.recv(4096)
    assert b" 200" in buf.split(b"\r\n")[0], buf
else:
    sock = socket.create_connection((host, 443))
conn = http.client.HTTPSConnection(host)
conn.sock = ctx.wrap_socket(sock, server_hostname=host)
size = os.path.getsize(path)
start = time.perf_counter()
with open(path, "rb") as body:
    conn.request("POST", "/discard/bench", body=body, headers={"Content-Length": str(size)})
    r = conn.getresponse()
    answer = json.loads(r.read())
seconds = time.perf_counter() - start
assert r.status == 200 and answer["body_length"] == size, (r.status, answer)
print(json.dumps({"seconds": seconds}))
'''


def memory_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise SystemExit(f"no {field} for pid {pid}")


def upload(prefix: list[str], body: Path, proxy: str, cafile: str) -> float:
    r = subprocess.run([*prefix, "/usr/bin/python3", "-c", CLIENT, HOST, str(body), proxy,
                        cafile], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"client failed: {r.stderr.strip()[-600:]}")
    return float(json.loads(r.stdout)["seconds"])


def measured(pid: int, send) -> tuple[float, float]:
    """(seconds, peak growth in bytes) of one upload through the proxy `pid`."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM starts again from VmRSS
    before = memory_kib(pid, "VmRSS")
    seconds = send()
    return seconds, (memory_kib(pid, "VmHWM") - before) * 1024


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=10)


def gateway_pid(runtime: dict) -> int:
    """The gateway itself (runtime's gateway_pid is its supervisor)."""
    supervisor = int(runtime["gateway_pid"])
    for task in Path(f"/proc/{supervisor}/task").iterdir():
        for child in (task / "children").read_text().split():
            if b"agentcage.gateway" in Path(f"/proc/{child}/cmdline").read_bytes():
                return int(child)
    return supervisor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=100, help="body size in MiB (default 100)")
    parser.add_argument("--runs", type=int, default=3, help="uploads per path (default 3)")
    args = parser.parse_args()
    from agentcage.cages import CageService
    from agentcage.config.load import load_config_text
    from agentcage.state import StateStore

    size = args.mib * MiB
    work = Path(tempfile.mkdtemp(prefix="agentcage-bench-"))
    os.chmod(work, 0o755)
    project = work / "project"  # the cage's /workspace: owned by the uid it runs as
    project.mkdir()
    body = project / "body.bin"
    line = b'{"path": "src/app/models.py", "content": "def f(x):\\n    return x + 1\\n"}\n'
    body.write_bytes((line * (size // len(line) + 1))[:size])  # text, as agents upload
    for path in (project, body):
        os.chown(path, NOBODY, NOBODY)
    times: dict[str, list[float]] = {"direct": [], "mitmdump": [], "gateway": []}
    growth: dict[str, list[float]] = {"mitmdump": [], "gateway": []}
    try:
        with FakeInternet() as net, contextlib.ExitStack() as cleanup:
            client = net.add_client()
            prefix = client.exec_prefix
            mitm, mitm_ca = start_mitmdump(net, client, work)
            cleanup.callback(stop, mitm)
            service = CageService(StateStore(work / "home"))
            config = load_config_text(
                f"name: uploads\ndomains: {{mode: allowlist, allow: [{HOST}]}}\n"
                f"dns_servers: [{net.dns_address}]\nmax_request_body: {size + MiB}\n"
                f"gateway: {{uplink: 'netns:{client.netns}', trusted_networks: "
                f"[10.200.0.0/16], upstream_ca_files: ['{net.ca_cert_path}']}}\n")
            service.create(config, project)
            cleanup.callback(service.destroy, "uploads")
            gateway = gateway_pid(service.backend.runtime(service.store.cage("uploads")))

            def through_cage() -> float:
                r = service.exec_capture("uploads", [
                    "/usr/bin/python3", "-c", CLIENT, HOST, "/workspace/body.bin", "",
                    "/run/agentcage/ca-bundle.pem"], timeout=600)
                if r.returncode != 0:
                    raise SystemExit(f"cage client failed: {r.stderr.strip()[-600:]}")
                return float(json.loads(r.stdout)["seconds"])

            def through_mitmdump() -> float:
                return upload(prefix, body, f"127.0.0.1:{PORT}", mitm_ca)

            for _ in range(args.runs):  # round-robin: a change of load weighs on all
                times["direct"].append(upload(prefix, body, "", str(net.ca_cert_path)))
                for label, pid, send in (("mitmdump", mitm.pid, through_mitmdump),
                                         ("gateway", gateway, through_cage)):
                    t, g = measured(pid, send)
                    times[label].append(t)
                    growth[label].append(g)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    direct = statistics.median(times["direct"])
    print(f"{args.mib} MiB upload, medians of {args.runs}")
    print(f"{'path':10} {'seconds':>8} {'x direct':>9} {'peak growth':>12} {'x body':>7}")
    for label, samples in times.items():
        t = statistics.median(samples)
        peak = statistics.median(growth[label]) if label in growth else None
        mem = f" {peak / MiB:8.0f} MiB {peak / size:7.2f}" if peak is not None else ""
        print(f"{label:10} {t:8.2f} {t / direct:9.2f}{mem}")
    g_time = statistics.median(times["gateway"]) / statistics.median(times["mitmdump"])
    g_mem = statistics.median(growth["gateway"]) / size
    print(f"gateway: {g_mem:.2f}x the body (target < 1.25: {'met' if g_mem < 1.25 else 'NOT met'}),"
          f" {g_time:.2f}x bare mitmdump's time (target < 1.5: "
          f"{'met' if g_time < 1.5 else 'NOT met'})")

if __name__ == "__main__":
    main()
