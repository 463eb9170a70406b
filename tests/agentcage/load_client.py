"""Many concurrent transparent HTTPS connections from inside a cage, each resolving its name
first (`python3 -c SOURCE SPEC_JSON`; the cage's Python, standard library only, 3.8+).

SPEC: {"names": [...], "total": n, "concurrency": k, "path": "/", "timeout": seconds}
Every connection: getaddrinfo (the cage's resolver, no cache in between), TCP to port 443 (the
cage's nftables hand it to the gateway), TLS with the cage CA (SSL_CERT_FILE), one GET.
Prints {"ok": n, "dns": n, "other": n, "errors": {...first few...},
        "resolve_s": [seconds per lookup], "request_s": [seconds per whole connection]}.
"""

import json
import socket
import ssl
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor


def one(i, spec, context, times):
    name = spec["names"][i % len(spec["names"])]
    started = time.monotonic()
    try:
        infos = socket.getaddrinfo(name, 443, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as e:
        return "dns", f"{name}: {e}"
    resolved = time.monotonic()
    address = infos[0][4]
    try:
        raw = socket.create_connection(address, timeout=spec["timeout"])
        with context.wrap_socket(raw, server_hostname=name) as tls:
            request = f"GET {spec['path']}?n={i} HTTP/1.1\r\nHost: {name}\r\n"
            tls.sendall((request + "Connection: close\r\n\r\n").encode())
            head = b""
            while b"\r\n" not in head:
                data = tls.recv(4096)
                if not data:
                    break
                head += data
        times.append((resolved - started, time.monotonic() - started))
        status = head.split(b" ", 2)[1:2]
        if status == [b"200"]:
            return "ok", ""
        return "other", f"{name}: {head[:60]!r}"
    except Exception as e:
        return "other", f"{name}: {type(e).__name__}: {e}"


def main():
    spec = json.loads(sys.argv[1])
    context = ssl.create_default_context()
    counts = {"ok": 0, "dns": 0, "other": 0}
    errors = {}
    times = []
    lock = threading.Lock()

    def run(i):
        kind, why = one(i, spec, context, times)
        with lock:
            counts[kind] += 1
            if why and len(errors) < 5:
                errors[why] = kind

    with ThreadPoolExecutor(max_workers=spec["concurrency"]) as pool:
        list(pool.map(run, range(spec["total"])))
    print(json.dumps({**counts, "errors": errors, "resolve_s": [t[0] for t in times],
                      "request_s": [t[1] for t in times]}))


main()
