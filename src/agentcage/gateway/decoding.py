"""Content-Encoding undone piece by piece, in bounded memory (for streamed response bodies).

A response too large to buffer is still redacted, and redaction needs the decoded text: a real
value inside gzip is not visible as bytes. Each decoder takes the body in the pieces the server
sent and gives back decoded pieces of at most `PIECE` bytes, so a compression bomb costs one
piece of memory at a time, never its inflated size. The encodings are the ones mitmproxy itself
decodes (gzip, deflate, br, zstd), with the libraries it already depends on; any other encoding,
corrupt data, or a body that ends mid-stream raises DecodeError, and the gateway then cuts the
response off (fail closed) instead of passing on what it could not check.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from typing import Protocol

import brotli

try:  # Python 3.14 has it in the standard library; mitmproxy depends on the backport before
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the Python version
    from backports import zstd

PIECE = 256 * 1024


class DecodeError(Exception):
    """The body cannot be decoded (unknown encoding, corrupt, or cut short)."""


class Decoder(Protocol):
    def feed(self, data: bytes) -> Iterator[bytes]: ...

    def finish(self) -> Iterator[bytes]: ...


class Identity:
    def feed(self, data: bytes) -> Iterator[bytes]:
        if data:
            yield data

    def finish(self) -> Iterator[bytes]:
        return iter(())


class Zlib:
    """gzip (members may follow each other, as RFC 1952 allows) or deflate (zlib-wrapped, or
    raw as some servers send it: told apart by the two-byte zlib header)."""

    def __init__(self, gzip: bool):
        self._gzip = gzip
        self._d: zlib._Decompress | None = zlib.decompressobj(47) if gzip else None
        self._head = b""  # deflate: the first bytes, until the header can be told

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._d is None:
            self._head += data
            if len(self._head) < 2:
                return
            cmf, flg = self._head[0], self._head[1]
            wrapped = cmf & 0x0F == 8 and (cmf << 8 | flg) % 31 == 0
            self._d = zlib.decompressobj(15 if wrapped else -15)
            data, self._head = self._head, b""
        yield from self._inflate(data)

    def _inflate(self, data: bytes) -> Iterator[bytes]:
        assert self._d is not None
        while data:
            if self._d.eof:
                if not self._gzip or not data.lstrip(b"\0"):
                    if data.strip(b"\0"):
                        raise DecodeError("data after the end of the compressed body")
                    return
                self._d = zlib.decompressobj(47)  # the next gzip member
            try:
                out = self._d.decompress(data, PIECE)
            except zlib.error as e:
                raise DecodeError(f"corrupt {'gzip' if self._gzip else 'deflate'} body: {e}")\
                    from None
            if out:
                yield out
            data = self._d.unconsumed_tail or (self._d.unused_data if self._d.eof else b"")

    def finish(self) -> Iterator[bytes]:
        if self._d is None:
            if self._head:
                raise DecodeError("deflate body cut short")
            return
        while True:  # output still held back by the size bound
            out = self._d.decompress(b"", PIECE) if not self._d.eof else b""
            if not out:
                break
            yield out
        if not self._d.eof:
            raise DecodeError("compressed body cut short")


class Brotli:
    def __init__(self) -> None:
        self._d = brotli.Decompressor()

    def feed(self, data: bytes) -> Iterator[bytes]:
        try:
            out = self._d.process(data, output_buffer_limit=PIECE)
            if out:
                yield out
            while not self._d.can_accept_more_data():
                out = self._d.process(b"", output_buffer_limit=PIECE)
                if not out:
                    break
                yield out
        except brotli.error as e:
            raise DecodeError(f"corrupt br body: {e}") from None

    def finish(self) -> Iterator[bytes]:
        yield from self.feed(b"")
        if not self._d.is_finished():
            raise DecodeError("br body cut short")


class Zstd:
    """Frames may follow each other; each is decoded with a bounded output."""

    def __init__(self) -> None:
        self._d = zstd.ZstdDecompressor()

    def feed(self, data: bytes) -> Iterator[bytes]:
        try:
            while True:
                if self._d.eof:
                    data = self._d.unused_data + data
                    if not data:
                        return
                    self._d = zstd.ZstdDecompressor()
                out = self._d.decompress(data, PIECE)
                data = b""
                if out:
                    yield out
                if self._d.needs_input and not self._d.eof:
                    return
        except zstd.ZstdError as e:
            raise DecodeError(f"corrupt zstd body: {e}") from None

    def finish(self) -> Iterator[bytes]:
        yield from self.feed(b"") if not self._d.needs_input else iter(())
        if not self._d.eof:
            raise DecodeError("zstd body cut short")


class Chain:
    """Several encodings, undone in the reverse of the order they were applied."""

    def __init__(self, decoders: Sequence[Decoder]):
        self._decoders = list(decoders)

    def feed(self, data: bytes) -> Iterator[bytes]:
        return self._through(0, (data,), final=False)

    def finish(self) -> Iterator[bytes]:
        return self._through(0, (), final=True)

    def _through(self, index: int, pieces: Iterator[bytes] | tuple[bytes, ...],
                 final: bool) -> Iterator[bytes]:
        if index == len(self._decoders):
            yield from pieces
            return
        decoder = self._decoders[index]
        for piece in pieces:
            yield from self._through(index + 1, decoder.feed(piece), final=False)
        if final:
            yield from self._through(index + 1, decoder.finish(), final=True)


def _one(encoding: str) -> Decoder:
    if encoding in ("gzip", "x-gzip"):
        return Zlib(gzip=True)
    if encoding == "deflate":
        return Zlib(gzip=False)
    if encoding == "br":
        return Brotli()
    if encoding == "zstd":
        return Zstd()
    if encoding == "identity":
        return Identity()
    raise DecodeError(f"cannot decode Content-Encoding {encoding!r}")


def decoder_for(header_values: Sequence[str]) -> Decoder:
    """The decoder for a response's Content-Encoding header values (all of them, in order)."""
    encodings = [part.strip().lower() for value in header_values for part in value.split(",")
                 if part.strip()]
    decoders = [_one(e) for e in reversed(encodings) if e != "identity"]
    if not decoders:
        return Identity()
    return decoders[0] if len(decoders) == 1 else Chain(decoders)


def is_encoded(header_values: Sequence[str]) -> bool:
    return any(part.strip().lower() not in ("", "identity")
               for value in header_values for part in value.split(","))
