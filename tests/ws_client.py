"""A tiny stdlib WebSocket client, run as `python3 -c SOURCE SPEC_JSON` (inside a cage or a
fakenet client namespace, where no WebSocket library is installed).

Transport: direct TLS (or plain TCP) to SPEC["host"]:SPEC["port"]. In a cage this is the
transparent path: the cage's nftables send port 443 to the gateway, which intercepts TLS with
the cage CA (trusted via SSL_CERT_FILE, which `ssl.create_default_context()` honours); proxy
variables are ignored. Then the RFC 6455 handshake (Sec-WebSocket-Accept checked), masked frames.

With SPEC["via_proxy"], the connection is a CONNECT tunnel through $HTTPS_PROXY instead (the
gateway's regular-proxy mode), then the same TLS and handshake inside it.

SPEC: {"host", "port", "tls", "path", "cafile" (optional), "timeout" (optional), "via_proxy",
       "pipeline" (optional: send every message at once, then read the answers),
       "pace" (optional: seconds to wait before each message, to keep a connection open),
       "messages": [{"type": "text"|"binary", one of: "data" (base64 of the payload),
                     "text" (expanded with os.path.expandvars), "file" (read in the client),
                     optional "slice": [start, end] (of the payload, None for an open end),
                     optional "encode": layers applied to the payload, left to right:
                     "raw", "base64", "base64url", "hex", "base32", "base85", "ascii85",
                     e.g. "hex+base64" for base64 of hex}]}
Prints one JSON object: {"status": int, "accept_ok": bool, "results": [per message:
{"echo": base64, "type": "text"|"binary"} or {"closed": "why"}], "close": "why" or null}.
The file is Python 3.11 compatible and imports nothing outside the standard library.
"""

import base64
import binascii
import hashlib
import json
import os
import socket
import ssl
import struct
import sys
import time

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Closed(Exception):
    pass


def recv_exact(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise Closed("connection closed")
        out += chunk
    return out


def frame(opcode, payload):
    key = os.urandom(4)
    n = len(payload)
    if n <= 125:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n <= 0xFFFF:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return head + key + masked


def read_message(sock):
    """(opcode, payload) of the next data message; answers pings; raises Closed on close."""
    parts, first = [], None
    while True:
        b0, b1 = recv_exact(sock, 2)
        opcode, n = b0 & 0x0F, b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", recv_exact(sock, 2))
        elif n == 127:
            (n,) = struct.unpack("!Q", recv_exact(sock, 8))
        key = recv_exact(sock, 4) if b1 & 0x80 else None
        payload = recv_exact(sock, n)
        if key:
            payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
        if opcode == 0x8:
            code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
            raise Closed(f"close frame {code} {payload[2:].decode('utf-8', 'replace')}")
        if opcode == 0x9:
            sock.sendall(frame(0xA, payload))
            continue
        if opcode == 0xA:
            continue
        if first is None:
            first = opcode
        parts.append(payload)
        if b0 & 0x80:
            return first, b"".join(parts)


def payload_of(message):
    if "data" in message:
        data = base64.b64decode(message["data"])
    elif "text" in message:
        data = os.path.expandvars(message["text"]).encode()
    else:
        with open(message["file"], "rb") as f:
            data = f.read()
    if "slice" in message:
        start, end = message["slice"]
        data = data[start:end]
    for layer in message.get("encode", "raw").split("+"):  # applied left to right
        data = ENCODERS[layer](data)
    return data


ENCODERS = {
    "raw": lambda d: d,
    "base64": base64.b64encode,
    "base64url": base64.urlsafe_b64encode,
    "hex": binascii.hexlify,
    "base32": base64.b32encode,
    "base85": base64.b85encode,
    "ascii85": base64.a85encode,
}


def connect_via_proxy(proxy, host, port, timeout):
    """A tunnel through an HTTP proxy (CONNECT host:port), as HTTPS_PROXY asks."""
    authority = proxy.split("://", 1)[-1].rstrip("/")
    proxy_host, _, proxy_port = authority.rpartition(":")
    sock = socket.create_connection((proxy_host.strip("[]"), int(proxy_port)), timeout=timeout)
    sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            raise Closed("proxy closed the connection")
        head += chunk
    status = head.split(b" ", 2)[1]
    if status != b"200":
        raise Closed(f"proxy refused CONNECT: {head.splitlines()[0].decode('latin-1')}")
    return sock


def main(spec):
    host, port = spec["host"], spec.get("port", 443)
    timeout = spec.get("timeout", 10)
    if spec.get("via_proxy"):
        sock = connect_via_proxy(os.environ["HTTPS_PROXY"], host, port, timeout)
    else:
        sock = socket.create_connection((host, port), timeout=timeout)
    if spec.get("tls", True):
        ctx = ssl.create_default_context(cafile=spec.get("cafile"))
        ctx.set_alpn_protocols(["http/1.1"])
        sock = ctx.wrap_socket(sock, server_hostname=host)
    key = base64.b64encode(os.urandom(16)).decode()
    default_port = 443 if spec.get("tls", True) else 80
    authority = host if port == default_port else f"{host}:{port}"
    sock.sendall((f"GET {spec.get('path', '/ws')} HTTP/1.1\r\nHost: {authority}\r\n"
                  "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            break
        head += chunk
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1]) if lines[0].startswith("HTTP/") else 0
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    expected = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()
    out = {"status": status, "accept_ok": headers.get("sec-websocket-accept") == expected,
           "results": [], "close": None}
    if status != 101:
        return out
    messages = spec.get("messages", [])
    if spec.get("pipeline"):  # every message in one write, before reading any answer
        sock.sendall(b"".join(frame(0x1 if m.get("type", "text") == "text" else 0x2,
                                    payload_of(m)) for m in messages))
    try:
        for message in messages:
            opcode = 0x1 if message.get("type", "text") == "text" else 0x2
            try:
                if spec.get("pace"):
                    time.sleep(spec["pace"])
                if not spec.get("pipeline"):
                    sock.sendall(frame(opcode, payload_of(message)))
                got_op, got = read_message(sock)
            except (Closed, OSError) as exc:
                out["results"].append({"closed": f"{type(exc).__name__}: {exc}"})
                out["close"] = str(exc)
                return out
            out["results"].append({"type": "text" if got_op == 0x1 else "binary",
                                   "echo": base64.b64encode(got).decode()})
        sock.sendall(frame(0x8, struct.pack("!H", 1000)))
        try:
            read_message(sock)
        except Closed as exc:
            out["close"] = str(exc)
    except OSError as exc:
        out["close"] = f"{type(exc).__name__}: {exc}"
    finally:
        sock.close()
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
