"""The ONE decoder of Content-Encoding, for every body: requests, buffered and streamed
responses, the capture. Bounded in memory and in output.

Inspection and redaction need the decoded bytes: a key inside gzip is not visible as bytes.
Each decoder takes the body in the pieces that arrive and gives back decoded pieces of at most
`PIECE` bytes, so a compression bomb costs one piece of memory at a time, never its inflated
size. `Bounded` adds the two limits every use has: a total output bound (a buffered body must
fit in memory) and a ratio bound (past `RATIO_FREE` decoded bytes, no more than `MAX_RATIO`
decoded bytes per encoded byte: a 1 MiB gzip response that would inflate to 1 GiB is a bomb,
not a download). Past either, `BoundExceeded` is raised and the caller fails closed.

The encodings are the ones mitmproxy itself decodes (gzip, deflate, br, zstd), with the
libraries it already depends on; any other encoding, corrupt data, or a body that ends
mid-stream raises DecodeError, and the gateway then refuses or cuts off what it could not check.
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
# The ratio bound: past RATIO_FREE decoded bytes, a body may decode to at most MAX_RATIO bytes
# per encoded byte. Real content stays far below it at that size (source code and JSON: 5-80x,
# even repeated); a bomb is built to the format's limit (gzip ~1000x, br and zstd 10^4-10^6x),
# and would cost the gateway CPU for every byte it still produced. Small bodies decode freely:
# highly repetitive ones (the same line over and over) can pass 100x without being a threat.
MAX_RATIO = 100
RATIO_FREE = 64 * 1024 * 1024


class DecodeError(Exception):
    """The body cannot be decoded (unknown encoding, corrupt, or cut short)."""


class BoundExceeded(DecodeError):
    """The body decodes past its output bound or its ratio bound (a compression bomb)."""


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
    decoders = [_one(e) for e in reversed(encodings(header_values)) if e != "identity"]
    if not decoders:
        return Identity()
    return decoders[0] if len(decoders) == 1 else Chain(decoders)


class Bounded:
    """A decoder with an output bound (None: none, a stream) and the ratio bound."""

    def __init__(self, decoder: Decoder, output: int | None = None, ratio: int = MAX_RATIO,
                 free: int = RATIO_FREE):
        self._decoder = decoder
        self.output, self.ratio, self.free = output, ratio, free
        self.consumed = 0
        self.produced = 0

    def feed(self, data: bytes) -> Iterator[bytes]:
        self.consumed += len(data)
        return self._checked(self._decoder.feed(data))

    def finish(self) -> Iterator[bytes]:
        return self._checked(self._decoder.finish())

    def _checked(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        for piece in pieces:
            self.produced += len(piece)
            if self.output is not None and self.produced > self.output:
                raise BoundExceeded(f"body decodes to more than {self.output} bytes")
            if self.produced > self.free and self.produced > self.ratio * self.consumed:
                raise BoundExceeded(
                    f"body decodes to more than {self.ratio}x its {self.consumed} encoded "
                    "bytes (a compression bomb)")
            yield piece


def decode_all(raw: bytes, header_values: Sequence[str], output: int,
               ratio: int = MAX_RATIO) -> bytes:
    """The whole body decoded, never more than `output` bytes (else BoundExceeded, having
    held at most that much). An unencoded body is returned as it is, not copied."""
    if not is_encoded(header_values):
        if len(raw) > output:
            raise BoundExceeded(f"body of more than {output} bytes")
        return raw
    decoder = Bounded(decoder_for(header_values), output, ratio)
    out = bytearray()
    view = memoryview(raw)
    for start in range(0, len(raw), PIECE):
        for piece in decoder.feed(bytes(view[start:start + PIECE])):
            out += piece
    for piece in decoder.finish():
        out += piece
    return bytes(out)


def decode_prefix(raw: bytes, header_values: Sequence[str], cap: int) -> tuple[bytes, int | None]:
    """At most the first `cap` decoded bytes, and the full decoded size when it was reached
    without passing the ratio bound (None: not decoded to the end). For the capture, which
    keeps a bounded prefix; raises DecodeError when even the prefix cannot be decoded."""
    if not is_encoded(header_values):
        return raw[:cap], len(raw)
    decoder = Bounded(decoder_for(header_values), None)
    kept = bytearray()
    view = memoryview(raw)
    try:
        for start in range(0, len(raw), PIECE):
            for piece in decoder.feed(bytes(view[start:start + PIECE])):
                kept += piece[:cap - len(kept)]
                if len(kept) >= cap:
                    return bytes(kept), None
        for piece in decoder.finish():
            kept += piece[:cap - len(kept)]
            if len(kept) >= cap:
                return bytes(kept), None
    except BoundExceeded:
        return bytes(kept), None
    return bytes(kept), decoder.produced


def encodings(header_values: Sequence[str]) -> list[str]:
    """The content codings named by Content-Encoding header values, in the order applied."""
    return [part.strip().lower() for value in header_values for part in value.split(",")
            if part.strip()]


def is_encoded(header_values: Sequence[str]) -> bool:
    return any(part.strip().lower() not in ("", "identity")
               for value in header_values for part in value.split(","))
