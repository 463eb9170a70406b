"""`/download/<size>`: a large response body, for tests of streamed responses through a gateway.

    GET /download/<size>?fill=<text>&chunked=1&encoding=gzip|deflate|br|zstd|<other>&cut=1&corrupt=1
                        &pause=<ms>

The body is `<text>\\n` repeated and cut to <size> bytes (decoded size); without `fill` it is a
counter pattern, so a test can check every byte. `fill` is taken from the query as sent, after
percent-decoding, so a gateway that injected a secret into the URL gets it echoed back thousands
of times, across every chunk boundary. `chunked=1` sends Transfer-Encoding: chunked in pieces of
a prime size (7919 bytes, so values straddle boundaries); otherwise Content-Length. `cut=1` stops
the body halfway and closes the connection (a server that dies mid-transfer); `corrupt=1` sends
the whole, well-framed body with its second half garbled (compressed data that fails to decode
halfway). An encoding fakenet does not know is named in the header, and the body sent as is.
`pause=<ms>` waits that long after the first piece (a server-sent event, then silence).
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from urllib.parse import parse_qs, unquote_to_bytes, urlsplit

import brotli

try:
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the Python version
    from backports import zstd

PREFIX = "/download/"
MAX_SIZE = 256 * 1024 * 1024
PIECE = 7919


def wants(target: str) -> bool:
    return urlsplit(target).path.startswith(PREFIX)


def pattern(size: int) -> bytes:
    """The default body: 16-byte lines numbering their own offset, cut to `size`."""
    lines = b"".join(b"%015x\n" % (i * 16) for i in range(size // 16 + 1))
    return lines[:size]


def _encode(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.compress(body, compresslevel=1)
    if encoding == "deflate":
        return zlib.compress(body, 1)
    if encoding == "br":
        return brotli.compress(body, quality=1)
    if encoding == "zstd":
        return zstd.compress(body)
    return body


def _query_fill(target: str) -> bytes | None:
    query = urlsplit(target).query
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key == "fill":
            return unquote_to_bytes(value)
    return None


async def serve(writer: asyncio.StreamWriter, target: str, keep_alive: bool) -> bool:
    """Write the response; False when the connection must close afterwards."""
    parts = urlsplit(target)
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    try:
        size = int(parts.path[len(PREFIX):])
    except ValueError:
        size = -1
    encoding = options.get("encoding", "identity")
    if not 0 <= size <= MAX_SIZE or not encoding.isalnum():
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        return False
    fill = _query_fill(target)
    if fill is not None:
        line = fill + b"\n"
        body = (line * (size // len(line) + 1))[:size]
    else:
        body = pattern(size)
    payload = _encode(body, encoding)
    if options.get("corrupt") == "1":
        half = len(payload) // 2
        payload = payload[:half] + bytes(b ^ 0x5A for b in payload[half:])
    chunked = options.get("chunked") == "1"
    cut = options.get("cut") == "1"
    head = ["HTTP/1.1 200 OK", "Server: fakenet", "Content-Type: application/octet-stream",
            f"Connection: {'keep-alive' if keep_alive and not cut else 'close'}"]
    if encoding != "identity":
        head.append(f"Content-Encoding: {encoding}")
    head.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(payload)}")
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
    end = len(payload) // 2 if cut else len(payload)
    pause = int(options.get("pause", "0") or 0) / 1000
    for start in range(0, end, PIECE):
        piece = payload[start:min(start + PIECE, end)]
        writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        if start % (64 * PIECE) == 0:
            await writer.drain()
        if start == 0 and pause:
            await writer.drain()
            await asyncio.sleep(min(pause, 30.0))
    if chunked and not cut:
        writer.write(b"0\r\n\r\n")
    await writer.drain()
    return keep_alive and not cut
