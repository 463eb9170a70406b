"""Knock at addresses and ports for the policy API, run as `python3 -c SOURCE ATTEMPTS_JSON`
(on a fake host, or inside a cage, where nothing but the standard library is installed).

ATTEMPTS: a list of {"kind", "address", "port"} ("address" is a name for kind "resolve"):
  https          TLS to address:port with SNI agentcage.local (no certificate check: any answer
                 counts), then GET /v1/health with Host: agentcage.local
  http           the same GET over plain TCP
  proxy-http     GET http://agentcage.local/v1/health, absolute form, as to an HTTP proxy
  proxy-connect  CONNECT agentcage.local:443, then the https attempt through the tunnel
  dns-udp        an A query for agentcage.local over UDP (dns-tcp: over TCP)
  resolve        the system's resolver asked for the name in "address"
Prints one JSON object: for each attempt, by "kind address port", "api" (the policy API's
health answer came back), "answer: <first line>" (something else answered), "dns: [addresses]"
(a resolver answered), or "no answer: <why>". All attempts run at once, each bounded by
TIMEOUT seconds. Python 3.8+ compatible.
"""

import json
import random
import socket
import ssl
import struct
import sys
from concurrent.futures import ThreadPoolExecutor

NAME = "agentcage.local"
TIMEOUT = 3.0
HEALTH = ("GET /v1/health HTTP/1.1\r\nHost: agentcage.local\r\nConnection: close\r\n\r\n")


def read_all(sock):
    data = b""
    while len(data) < 65536:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def judged(data):
    text = data.decode("latin-1")
    head, _, body = text.partition("\r\n\r\n")
    if '"api_version"' in body:  # nothing else says it: the knock does not send it
        return "api"
    return "answer: " + (head.splitlines() or [""])[0][:80]


def tls(sock):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context.wrap_socket(sock, server_hostname=NAME)


def http_attempt(kind, address, port):
    with socket.create_connection((address, port), timeout=TIMEOUT) as raw:
        if kind == "proxy-connect":
            raw.sendall(b"CONNECT agentcage.local:443 HTTP/1.1\r\n"
                        b"Host: agentcage.local:443\r\n\r\n")
            reply = b""
            while b"\r\n\r\n" not in reply and len(reply) < 8192:
                chunk = raw.recv(4096)
                if not chunk:
                    break
                reply += chunk
            status = reply.split(b"\r\n", 1)[0].decode("latin-1")
            if " 200" not in status:
                return "answer: " + status[:80]
        if kind in ("https", "proxy-connect"):
            with tls(raw) as sock:
                sock.sendall(HEALTH.encode())
                return judged(read_all(sock))
        request = HEALTH
        if kind == "proxy-http":
            request = HEALTH.replace("GET /v1/health", "GET http://agentcage.local/v1/health")
        raw.sendall(request.encode())
        return judged(read_all(raw))


def dns_query():
    ident = random.randrange(65536)
    header = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0)
    qname = b"".join(bytes([len(p)]) + p.encode() for p in NAME.split(".")) + b"\0"
    return ident, header + qname + struct.pack(">HH", 1, 1)


def dns_addresses(reply, ident, question_length):
    if len(reply) < 12 or struct.unpack(">H", reply[:2])[0] != ident:
        return "answer: not a DNS reply to this query"
    count = struct.unpack(">H", reply[6:8])[0]
    at, found = question_length, []
    for _ in range(count):
        if reply[at] & 0xC0 == 0xC0:
            at += 2
        else:
            while reply[at]:
                at += reply[at] + 1
            at += 1
        rtype, _cls, _ttl, length = struct.unpack(">HHIH", reply[at:at + 10])
        at += 10
        if rtype == 1 and length == 4:
            found.append(socket.inet_ntoa(reply[at:at + 4]))
        at += length
    return "dns: " + json.dumps(found)


def dns_attempt(kind, address, port):
    ident, query = dns_query()
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    if kind == "dns-udp":
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.settimeout(TIMEOUT)
            sock.sendto(query, (address, port))
            reply = sock.recv(4096)
    else:
        with socket.create_connection((address, port), timeout=TIMEOUT) as sock:
            sock.sendall(struct.pack(">H", len(query)) + query)
            reply = b""
            while len(reply) < 2 or len(reply) < 2 + struct.unpack(">H", reply[:2])[0]:
                chunk = sock.recv(4096)  # the connection stays open after the answer
                if not chunk:
                    break
                reply += chunk
            reply = reply[2:]
    return dns_addresses(reply, ident, len(query))


def attempt(spec):
    kind, address, port = spec["kind"], spec["address"], spec.get("port", 0)
    try:
        if kind == "resolve":
            infos = socket.getaddrinfo(address, 443, proto=socket.IPPROTO_TCP)
            return "dns: " + json.dumps(sorted({i[4][0] for i in infos}))
        if kind.startswith("dns-"):
            return dns_attempt(kind, address, port)
        return http_attempt(kind, address, port)
    except (OSError, ValueError, IndexError, struct.error) as e:
        return "no answer: " + type(e).__name__


def main():
    attempts = json.loads(sys.argv[1])
    with ThreadPoolExecutor(max_workers=32) as pool:
        results = list(pool.map(attempt, attempts))
    print(json.dumps({f"{a['kind']} {a['address']} {a.get('port', '')}".strip(): results[i]
                      for i, a in enumerate(attempts)}))


main()
