"""Peeling encodings off data, one inside another, to a bounded depth and within a budget.

Data leaving in disguise is wrapped in encodings an inspector that looks at one layer does not
undo: random key material hex-encoded and then base64-encoded, or base85 of the raw bytes.
`peel` finds every span of every encoding it knows (hex, base64 standard and URL-safe, base32,
base85 as RFC 1924 writes it and as Ascii85, percent-encoding), decodes it, and does the same
to what came out, up to `depth` layers; each layer comes with the path of encodings that led to
it ("base64+hex"). Work is bounded twice: no more than `budget` decoded bytes in all (a
multiple of the data's size), and only spans that could be the encoding are decoded: base32 in
one case and with its digits, base85 only when it looks random in its alphabet (ordinary text
without spaces is made of Ascii85 characters too, and decodes to noise).

The entropy inspector judges every layer for random bytes; the secrets inspector's views
(`decode.py`) use the span decoders for base32 and base85.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from types import MappingProxyType
from urllib.parse import unquote_to_bytes

from agentcage.inspect.b64 import decode_loose
from agentcage.inspect.runs import ByteClass, ByteIndex, runs
from agentcage.inspect.stats import random_expectation, shannon

_UPPER = bytes(range(ord("A"), ord("Z") + 1))
_LOWER = bytes(range(ord("a"), ord("z") + 1))
_B32_DIGITS = b"234567"
_HEX_DIGITS = b"0123456789abcdefABCDEF"
_SAMPLE = 4096  # characters of a span measured to decide whether it looks random
_PROBE_GROUPS = 64  # base85 groups decoded to choose a span's alignment
_PRINTABLE = bytes(range(0x20, 0x7F)) + b"\t\r\n"
_JSON_ESCAPE = re.compile(rb"\\(u[0-9a-fA-F]{4}|[\"\\/bfnrt])")
_JSON_SIMPLE = MappingProxyType({
    b'"': b'"', b"\\": b"\\", b"/": b"/", b"b": b"\b", b"f": b"\f", b"n": b"\n", b"r": b"\r",
    b"t": b"\t",
})  # fmt: skip
_ESCAPE_GAP = 64  # escapes closer than this belong to one percent-encoded stretch
# Base85 is about a fifth (RFC 1924) or a third (Ascii85) punctuation, never below an eighth
# over a key's length; base64 is 3%, hex and base32 have none.
_MIN_PUNCTUATION_PCT = 10
# and about three tenths upper case (both alphabets hold all 26 letters); text and code far less
_MIN_UPPER_PCT = 12


@dataclass(frozen=True)
class PeelLimits:
    depth: int = 3  # layers undone one inside the other (base64 of hex of key material: 2)
    min_chars: int = 32  # shortest span decoded
    budget_ratio: int = 2  # decoded bytes in all, per byte of the data peeled
    budget_floor: int = 64 * 1024
    margin: float = 0.5  # base85: bits per character below random still taken for it
    min_escapes: int = 8  # percent-escapes that make data worth decoding as a URL


@dataclass
class Budget:
    left: int

    def spend(self, n: int) -> bool:
        """Take `n` bytes of the budget; False (and nothing taken) when they are not left."""
        if n > self.left:
            return False
        self.left -= n
        return True


@dataclass(frozen=True)
class Layer:
    path: str  # the encodings undone, outermost first: "base64+hex"
    data: bytes


def json_unescape(data: bytes) -> bytes:
    """JSON string escapes undone (`\\"`, `\\\\`, `\\u0041`...), the rest left as it is."""
    def one(m: re.Match[bytes]) -> bytes:
        code = m.group(1)
        if code[:1] == b"u":
            return chr(int(code[1:], 16)).encode("utf-8", "surrogatepass")
        return _JSON_SIMPLE[code]

    return _JSON_ESCAPE.sub(one, data)


def mixed_case(span: bytes) -> bool:
    span = span[:1024]  # base64 mixes its alphabet early
    if span.islower() or span.isupper():
        return False
    return len(span.translate(None, _UPPER)) < len(span) > len(span.translate(None, _LOWER))


def _looks_random(span: bytes, symbols: int, margin: float) -> bool:
    sample = span[:_SAMPLE]
    expected = random_expectation(len(sample), symbols)
    return shannon(sample, expected - margin) >= expected - margin


def texty(data: bytes) -> bool:
    return bool(data) and len(data.translate(None, _PRINTABLE)) <= len(data) // 10


def _aligned(decode, span: bytes, offsets: int) -> int:
    """The offset to decode `span` at: where its start decodes to text (an encoding inside
    this one, whose groups the span's start may have cut: a message that follows another on
    one WebSocket connection, say), else 0 (random bytes look the same at every offset)."""
    for offset in range(offsets):
        if texty(decode(span[offset:offset + _SAMPLE])):
            return offset
    return 0


def _unhex(part: bytes) -> bytes:
    try:
        return binascii.unhexlify(part[: len(part) - len(part) % 2])
    except binascii.Error:
        return b""


def hex_spans(index: ByteIndex, min_chars: int) -> Iterator[bytes]:
    for a, b in index.runs(ByteClass.HEX, min_chars):
        span = index.data[a:b]
        if decoded := _unhex(span[_aligned(_unhex, span, 2):]):
            yield decoded


def base64_spans(index: ByteIndex, min_chars: int) -> Iterator[tuple[str, bytes]]:
    for cls in index.base64_classes():
        urlsafe = cls is ByteClass.B64URL
        for a, b in index.runs(cls, min_chars):
            span = index.data[a:b]
            if not mixed_case(span):
                continue  # identifiers; base64 of anything mixes case
            if urlsafe and not span.translate(None, ByteClass.ALNUM.value):
                continue  # only alphanumerics: already decoded as standard base64
            offset = _aligned(lambda part, u=urlsafe: decode_loose(part, u), span, 4)
            if decoded := index.base64_decoded(a, b, offset, urlsafe):
                yield ("base64url" if urlsafe else "base64"), decoded


def base32_spans(index: ByteIndex, min_chars: int) -> Iterator[bytes]:
    """Base32 in upper or lower case (never both in one span); a span without one of its
    digits (2-7) is a word, not base32 (random base32 of this length always has them)."""
    for cls in (ByteClass.B32, ByteClass.B32_LOWER):
        for a, b in index.runs(cls, min_chars):
            span = index.data[a:b]
            if not span.translate(None, _UPPER + _LOWER):
                continue
            try:
                yield base64.b32decode(span[: len(span) - len(span) % 8], casefold=True)
            except (binascii.Error, ValueError):
                continue


def _decode85(span: bytes, decode) -> bytes | None:
    """`span` decoded at the right one of its five alignments: its neighbours (a quote, a
    bracket) are often in the alphabet too and shift the groups. A shifted group may overflow
    32 bits (then that alignment is out), or may not: the alignments whose start decodes to
    text are tried first (a key, or another encoding inside), then the others whose start
    decodes (random bytes look random at every alignment); the first to decode whole wins,
    without a last character that cannot end a group if need be."""
    texts: list[int] = []
    others: list[int] = []
    for offset in range(5):
        head = span[offset:offset + _PROBE_GROUPS * 5]
        try:
            probe = decode(head[: len(head) - len(head) % 5])
        except ValueError:
            continue
        (texts if texty(probe) else others).append(offset)
    for offset in texts + others:
        for end in (len(span), len(span) - 1):
            with contextlib.suppress(ValueError):
                return decode(span[offset:end])
    return None


def _base85_like(span: bytes, margin: float) -> bool:
    """Random over 85 symbols, a good share of them punctuation: base64, hex and base32 (random
    too, over fewer symbols, with almost no punctuation) are left to their own decoders."""
    sample = span[:_SAMPLE]
    upper = len(sample) - len(sample.translate(None, _UPPER))
    if upper * 100 < _MIN_UPPER_PCT * len(sample):  # most text and code: one C pass decides
        return False
    punctuation = len(sample.translate(None, ByteClass.ALNUM.value))
    return punctuation * 100 >= _MIN_PUNCTUATION_PCT * len(sample) and _looks_random(
        sample, 85, margin)


def base85_spans(index: ByteIndex, min_chars: int,
                 margin: float) -> Iterator[tuple[str, bytes]]:
    """Both base85 alphabets, from one pass over the data: runs of printable characters that
    look like base85, then the runs of each alphabet inside those."""
    for a, b in index.runs(ByteClass.PRINTABLE, min_chars):
        outer = index.data[a:b]
        if not _base85_like(outer, margin):
            continue
        # Ascii85 has '"' and '\\': inside a JSON string they come escaped
        for text in (outer, json_unescape(outer)) if b"\\" in outer else (outer,):
            for name, cls, decode in (("base85", ByteClass.B85, base64.b85decode),
                                      ("ascii85", ByteClass.A85, base64.a85decode)):
                for c, d in runs(text, cls, min_chars) or ():
                    if decoded := _decode85(text[c:d], decode):
                        yield name, decoded


def _escape_positions(data: bytes) -> list[int]:
    """Offsets of the percent-escapes (`%` and two hex digits) in `data`: a C search for each
    `%`, not a regular expression over all of the data."""
    found, find, at = [], data.find, data.find(b"%")
    while at >= 0:
        if data[at + 1:at + 3].translate(None, _HEX_DIGITS) == b"" and at + 3 <= len(data):
            found.append(at)
        at = find(b"%", at + 1)
    return found


def _percent_windows(data: bytes, limits: PeelLimits) -> bytes | None:
    """The percent-decoding of the parts of `data` dense with escapes (each escape within
    `_ESCAPE_GAP` bytes of the next), joined by newlines; None when there are too few. Large
    data with an escape here and there (format strings in source code) is not decoded whole."""
    if data.count(b"%") < limits.min_escapes:
        return None
    positions = _escape_positions(data)
    if len(positions) < limits.min_escapes:
        return None
    pieces, start, last, count = [], positions[0], positions[0], 1
    for at in [*positions[1:], len(data) + _ESCAPE_GAP + 1]:
        if at - last <= _ESCAPE_GAP:
            last, count = at, count + 1
            continue
        if count >= limits.min_escapes:
            pieces.append(unquote_to_bytes(data[max(0, start - _ESCAPE_GAP):last + 3 +
                                                _ESCAPE_GAP]))
        start = last = at
        count = 1
    return b"\n".join(pieces) or None


def one_layer(index: ByteIndex, limits: PeelLimits) -> Iterator[tuple[str, bytes]]:
    """(encoding, decoded) for every span of every encoding in `index.data`."""
    if (decoded := _percent_windows(index.data, limits)) is not None:
        yield "percent", decoded
    yield from (("hex", d) for d in hex_spans(index, limits.min_chars))
    yield from base64_spans(index, limits.min_chars)
    yield from (("base32", d) for d in base32_spans(index, limits.min_chars))
    yield from base85_spans(index, limits.min_chars, limits.margin)


def peel(data: bytes, limits: PeelLimits | None = None, index: ByteIndex | None = None,
         budget: Budget | None = None, path: str = "", depth: int = 0) -> Iterator[Layer]:
    """Every layer under `data` (not `data` itself), outermost first, depth-first."""
    limits = limits or PeelLimits()
    if budget is None:
        budget = Budget(max(limits.budget_floor, limits.budget_ratio * len(data)))
    if depth >= limits.depth:
        return
    index = index if index is not None else ByteIndex(data)
    for name, decoded in one_layer(index, limits):
        if len(decoded) < limits.min_chars // 2 or not budget.spend(len(decoded)):
            continue
        here = f"{path}+{name}" if path else name
        yield Layer(here, decoded)
        yield from peel(decoded, limits, None, budget, here, depth + 1)
