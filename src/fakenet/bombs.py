"""`/bomb/<size>`: a compression bomb, for tests of a gateway's decoding bounds.

    GET /bomb/<size>?encoding=gzip|deflate|br|zstd|gzip,gzip&chunked=1

The body is <size> zero bytes (up to 4 GiB) compressed with `encoding` (a comma-separated list
is applied left to right, as Content-Encoding lists it), sent with Content-Length, or
Transfer-Encoding: chunked with `chunked=1`. The compressed payload is made by streaming
compressors over a zero buffer (never the whole body in memory) and kept per (size, encoding):
a gzip bomb of 1 GiB is about 1 MiB on the wire, br and zstd far less.
"""

from __future__ import annotations

import asyncio
import functools
import zlib
from urllib.parse import parse_qs, urlsplit

import brotli

try:
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the Python version
    from backports import zstd

PREFIX = "/bomb/"
MAX_SIZE = 4 * 1024 ** 3
PIECE = 7919
_ZEROS = bytes(1024 * 1024)


def wants(target: str) -> bool:
    return urlsplit(target).path.startswith(PREFIX)


def _compressor(encoding: str):
    """(feed, finish) of a streaming compressor for one coding."""
    if encoding == "gzip":
        z = zlib.compressobj(1, zlib.DEFLATED, 31)
        return z.compress, z.flush
    if encoding == "deflate":
        z = zlib.compressobj(1)
        return z.compress, z.flush
    if encoding == "br":
        b = brotli.Compressor(quality=5)
        return b.process, b.finish
    if encoding == "zstd":
        c = zstd.ZstdCompressor()
        return c.compress, c.flush
    raise ValueError(encoding)


def _compress_stream(chunks, encoding: str):
    feed, finish = _compressor(encoding)
    for chunk in chunks:
        out = feed(chunk)
        if out:
            yield out
    yield finish()


@functools.lru_cache(maxsize=16)
def payload(size: int, encodings: tuple[str, ...]) -> bytes:
    """`size` zeros, compressed with each coding in turn."""
    def zeros():
        left = size
        while left > 0:
            yield _ZEROS[:min(left, len(_ZEROS))]
            left -= len(_ZEROS)

    stream = zeros()
    for encoding in encodings:
        stream = _compress_stream(stream, encoding)
    return b"".join(stream)


async def serve(writer: asyncio.StreamWriter, target: str, keep_alive: bool) -> bool:
    """Write the response; False when the connection must close afterwards."""
    parts = urlsplit(target)
    options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    try:
        size = int(parts.path[len(PREFIX):])
        encodings = tuple(e.strip() for e in options.get("encoding", "gzip").split(","))
        if not 0 < size <= MAX_SIZE:
            raise ValueError(size)
        body = payload(size, encodings)
    except ValueError:
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        return False
    chunked = options.get("chunked") == "1"
    head = ["HTTP/1.1 200 OK", "Server: fakenet", "Content-Type: application/octet-stream",
            f"Content-Encoding: {', '.join(encodings)}",
            f"Connection: {'keep-alive' if keep_alive else 'close'}",
            "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}"]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
    for start in range(0, len(body), PIECE):
        piece = body[start:start + PIECE]
        writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        if start % (64 * PIECE) == 0:
            await writer.drain()
    if chunked:
        writer.write(b"0\r\n\r\n")
    await writer.drain()
    return keep_alive
