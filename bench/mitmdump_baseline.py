"""Bare `mitmdump` (no addon) as a regular proxy in a fake-internet client's namespace: the
baseline the gateway's figures are set against (mitmproxy's own cost)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

PORT = 18080


def start_mitmdump(net, client, work: Path) -> tuple[subprocess.Popen, str]:
    """(the running mitmdump, its CA certificate's path); it trusts the fake internet's CA."""
    import certifi

    bundle = work / "upstream.pem"
    bundle.write_bytes(Path(certifi.where()).read_bytes() + b"\n"
                       + Path(net.ca_cert_path).read_bytes())
    confdir = work / "mitm"
    mitmdump = str(Path(sys.executable).with_name("mitmdump"))
    proc = subprocess.Popen(
        [*client.exec_prefix, mitmdump, "-q", "--mode", f"regular@127.0.0.1:{PORT}",
         "--set", f"confdir={confdir}", "--set", f"ssl_verify_upstream_trusted_ca={bundle}",
         "--set", "connection_strategy=lazy", "--set", "termlog_verbosity=error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    probe = f"import socket; socket.create_connection(('127.0.0.1', {PORT}), timeout=1)"
    deadline = time.monotonic() + 30
    while not (confdir / "mitmproxy-ca-cert.pem").exists() or subprocess.run(
            [*client.exec_prefix, "/usr/bin/python3", "-c", probe],
            capture_output=True).returncode != 0:
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit("mitmdump did not start")
        time.sleep(0.1)
    return proc, str(confdir / "mitmproxy-ca-cert.pem")
