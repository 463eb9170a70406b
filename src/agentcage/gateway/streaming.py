"""Streamed responses: a body too large to buffer reaches the cage piece by piece, redacted.

Requests are always buffered whole (up to `max_request_body`) because every inspector must see
the full body before a byte of it goes upstream. Responses are different: a cage must be able to
download a 200 MiB wheel, and an LLM's server-sent events should reach the agent as they come.
So a response whose size is unknown (chunked, HTTP/2 without Content-Length, read until close),
larger than `max_request_body`, or content-encoded while there is something to redact, is
streamed: each piece the server sends is decoded (`decoding`, within its ratio bound),
redacted (`StreamRedactor`, which holds back only what could still become a real value), and
passed on. Memory per response stays a few hundred KiB, whatever its size.

Because the redacted body may differ in length from the server's, a streamed response loses its
Content-Length and Content-Encoding (the cage receives it decoded, chunked on HTTP/1.1). When no
secret is staged there is nothing to redact and the body passes through as it came.

If decoding fails halfway (corrupt data, a body cut short, a compression bomb past the ratio
bound) the rest of the body is dropped and the flow is killed: the cage sees a broken transfer,
never a complete-looking partial one, and the failure is audited.

mitmproxy has ONE `body_size_limit` for both directions, checked on a response's headers before
any addon hook could choose to stream it; `mitmpatch.limit_request_bodies_only` narrows that
check to requests, and the response size is the addon's decision (buffer up to the limit, else
stream).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field

from agentcage.gateway.decoding import Bounded, Decoder, decoder_for, is_encoded
from agentcage.secrets.redact import Redactor
from agentcage.secrets.stream import StreamRedactor

BODILESS_STATUS = frozenset({101, 204, 304})


@dataclass
class BodyTee:
    """The first `cap` bytes of a body that passes by, and its full size (for the capture)."""

    cap: int
    size: int = 0
    kept: bytearray = field(default_factory=bytearray)

    def add(self, data: bytes) -> None:
        self.size += len(data)
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += data[:room]

    @property
    def data(self) -> bytes:
        return bytes(self.kept)


class ResponseStream:
    """The callable mitmproxy gives each piece of a streamed response (`b""` at the end).

    `decoder` and `redactor` are None when nothing needs redacting: pieces pass unchanged.
    `outbound` sees what the server sent (decoded when decoding), `inbound` what the cage gets.
    `on_failure(reason)` is called once when a piece cannot be processed; every later piece
    is dropped."""

    def __init__(self, decoder: Decoder | None, redactor: StreamRedactor | None,
                 on_failure: Callable[[str], None], capture_cap: int = 0,
                 encoded: bool = False):
        self.decoder = decoder
        self.encoded = encoded  # pieces pass still content-encoded (nothing to redact)
        self.redactor = redactor
        self.on_failure = on_failure
        self.outbound = BodyTee(capture_cap)
        self.inbound = BodyTee(capture_cap)
        self.received = 0
        self.failure: str | None = None
        self.finished = False

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.redactor.names) if self.redactor is not None else frozenset()

    def __call__(self, chunk: bytes) -> list[bytes]:
        if self.failure is not None or self.finished:
            return []
        try:
            return [piece for piece in self._process(chunk) if piece]
        except Exception as e:
            self.failure = f"streamed response cut off: {type(e).__name__}: {e}"
            self.on_failure(self.failure)
            return []

    def _process(self, chunk: bytes) -> Generator[bytes, None, None]:
        final = not chunk
        self.received += len(chunk)
        if self.decoder is None:
            decoded: Iterable[bytes] = (chunk,)
        elif final:
            # an empty body needs no decoding, whatever its Content-Encoding says
            decoded = self.decoder.finish() if self.received else ()
        else:
            decoded = self.decoder.feed(chunk)
        out: list[bytes] = []
        for piece in decoded:
            self.outbound.add(piece)
            out.append(self.redactor.feed(piece) if self.redactor is not None else piece)
        if final:
            self.finished = True
            if self.redactor is not None:
                out.append(self.redactor.finish())
        for piece in out:
            self.inbound.add(piece)
        yield from out


def declared_length(headers: object) -> int | None:
    """The Content-Length as an int; None when absent or not a single valid number (the body
    is then of unknown length, and streamed)."""
    values = headers.get_all("content-length")  # type: ignore[attr-defined]
    if len(set(v.strip() for v in values)) != 1:
        return None
    text = values[0].strip()
    return int(text) if text.isdigit() else None


def must_stream(method: str, status: int, headers: object, limit: int,
                redacting: bool = False) -> bool:
    """Whether a response must be streamed rather than buffered (see the module text). A
    content-encoded body that must be redacted is streamed whatever its length: decoding it
    whole could take any multiple of its size, piece by piece it takes one piece."""
    if method == "HEAD" or status in BODILESS_STATUS or 100 <= status < 200:
        return False
    length = declared_length(headers)
    if redacting and is_encoded(headers.get_all("content-encoding")):  # type: ignore[attr-defined]
        return length != 0
    return length is None or length > limit


def plan(redactor: Redactor, content_encoding: Sequence[str], on_failure: Callable[[str], None],
         capture_cap: int) -> ResponseStream:
    """The stream for one response. Raises DecodeError when the body would need redacting but
    its encoding cannot be decoded (the caller refuses the response)."""
    if redactor.empty:
        return ResponseStream(None, None, on_failure, capture_cap,
                              encoded=is_encoded(content_encoding))
    return ResponseStream(Bounded(decoder_for(content_encoding)), StreamRedactor(redactor),
                          on_failure, capture_cap)
