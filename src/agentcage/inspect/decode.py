"""Decoded views of request data, so that patterns are matched after every usual encoding.

`views(data)` yields (encoding, bytes) pairs: the raw text, its URL-decoding, its JSON
unescaping, the decoding of every base64 span (standard and URL-safe, at each of the four
possible alignments), hex, base32 and base85 span (`peel`'s span decoders), and the same again
inside those, to `depth` levels and within a budget. Large
data is not decoded wholesale: only the windows around long token-shaped runs are, which is
where every provider key lives, so the work stays proportional to what could be a secret.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from agentcage.inspect.b64 import decode_loose
from agentcage.inspect.peel import (
    Budget,
    PeelLimits,
    base32_spans,
    base85_spans,
    json_unescape,
    mixed_case,
    texty,
)
from agentcage.inspect.runs import ByteClass, ByteIndex

_URL_ASCII = re.compile(rb"%[2-7][0-9a-fA-F]")
_JSON_ASCII = re.compile(rb"\\u00[2-7][0-9a-fA-F]")
Tokens = Callable[[int], bytes]  # ByteIndex.tokens: the token runs of at least n bytes


@dataclass(frozen=True)
class DecodeLimits:
    small: int = 64 * 1024  # at most this size, views cover all of the data
    pad: int = 24  # bytes kept around each token run (prefixes like "SG." or "AccountKey=")
    window: int = 256  # bytes kept around each anchor (PEM headers have spaces)
    min_base64: int = 24  # shortest base64 span decoded (18 bytes)
    min_hex: int = 32  # shortest hex span decoded (16 bytes)
    sample: int = 3 * 1024  # bytes of a large base64 span sampled to find its alignment
    min_base32: int = 32  # shortest base32 span decoded (20 bytes)
    min_base85: int = 50  # shortest base85 span decoded (40 bytes: the shortest key in it)
    depth: int = 3  # decodings applied one inside the other (hex of base64 of a key: 2)
    budget_ratio: int = 4  # decoded bytes in all, per byte of the data
    budget_floor: int = 256 * 1024


def _base64_alignments(span: bytes, urlsafe: bool, limits: DecodeLimits) -> list[int]:
    """Offsets worth decoding a span at: all four, or for a large span the texty ones."""
    if len(span) <= limits.small:
        return [0, 1, 2, 3]
    chosen = []
    for offset in range(4):
        for where in (0, len(span) // 2, len(span) - limits.sample - 8):
            start = where + (offset - where) % 4
            if texty(decode_loose(span[start : start + limits.sample], urlsafe)):
                chosen.append(offset)
                break
    # Random-looking everywhere: no text to find a key in; the entropy inspector judges it.
    return chosen or [0]


def _base64_views(index: ByteIndex, limits: DecodeLimits) -> Iterator[bytes]:
    for cls in index.base64_classes():
        urlsafe = cls is ByteClass.B64URL
        for a, b in index.runs(cls, limits.min_base64):
            span = index.data[a:b]
            if not mixed_case(span):
                continue  # identifiers like server_connect_error; base64 of anything mixes case
            if urlsafe and not span.translate(None, ByteClass.ALNUM.value):
                continue  # only alphanumerics: already decoded as standard base64
            for offset in _base64_alignments(span, urlsafe, limits):
                if decoded := index.base64_decoded(a, b, offset, urlsafe):
                    yield decoded


def _hex_views(index: ByteIndex, limits: DecodeLimits) -> Iterator[bytes]:
    for span in index.spans(ByteClass.HEX, limits.min_hex):
        for offset in (0, 1):
            part = span[offset:]
            try:
                yield binascii.unhexlify(part[: len(part) - len(part) % 2])
            except binascii.Error:
                continue


def _base32_views(index: ByteIndex, limits: DecodeLimits) -> Iterator[bytes]:
    return base32_spans(index, limits.min_base32)


def _base85_views(index: ByteIndex, limits: DecodeLimits) -> Iterator[bytes]:
    return (decoded for _name, decoded in base85_spans(index, limits.min_base85,
                                                         PeelLimits.margin))


def _anchor_windows(data: bytes, anchors: tuple[bytes, ...], reach: int) -> list[bytes]:
    pieces = []
    for anchor in anchors:
        pos = 0
        while (at := data.find(anchor, pos)) >= 0:
            pieces.append(data[max(0, at - reach) : at + len(anchor) + reach])
            pos = at + len(anchor)
    return pieces


def candidate_text(
    index: ByteIndex, limits: DecodeLimits, anchors: tuple[bytes, ...] = ()
) -> bytes:
    """The parts of the data that could hold a key: all of it when small, else the windows
    around token runs (plus `window` bytes around each anchor, for PEM headers)."""
    data = index.data
    if len(data) <= limits.small or index.fragmented:
        return data
    pieces = _anchor_windows(data, anchors, limits.window)
    _run_windows(data, index.wide, limits.pad, pieces)
    return b"\n".join(pieces)


def _run_windows(data: bytes, wide: list[tuple[int, int]], pad: int, out: list[bytes]) -> None:
    """Append to `out` the runs widened by `pad` on each side, overlapping or touching ones
    merged: each byte kept once, and no separator lands inside the data (a key starting
    within `pad` bytes after another token would be cut in two and missed)."""
    if not wide:
        return
    lo, hi = max(wide[0][0] - pad, 0), wide[0][1] + pad  # slicing past the end is fine
    for a, b in wide:
        if a - pad > hi:
            out.append(data[lo:hi])
            lo = a - pad
        hi = b + pad
    out.append(data[lo:hi])


def _escaped_views(text: bytes) -> Iterator[tuple[str, bytes]]:
    # Only escapes of printable ASCII can hide key characters: "%41", "\u0041" and "\/".
    # "%s" format strings, "\n" and escaped accents change no token, so they cost nothing.
    if _URL_ASCII.search(text):
        yield "url", unquote_to_bytes(text)
    if b"\\/" in text or _JSON_ASCII.search(text):
        yield "json", json_unescape(text)


def _may_hide_more(text: bytes, index: ByteIndex, limits: DecodeLimits) -> bool:
    """Whether decoding can give anything: an escape ('%', '\\') or a run long enough for
    base64 or hex. Most small decoded views (random bytes) have neither: no index, no scans."""
    return (
        b"%" in text
        or b"\\" in text
        or index.might_hold(min(limits.min_base64, limits.min_hex))
        or bool(index.runs(ByteClass.PRINTABLE, limits.min_base85))  # base85 has punctuation
    )


def views(
    data: bytes,
    limits: DecodeLimits | None = None,
    anchors: tuple[bytes, ...] = (),
    index: ByteIndex | None = None,
    depth: int = 0,
    budget: Budget | None = None,
) -> Iterator[tuple[str, bytes, Tokens | None]]:
    """(encoding, text, tokens) to match patterns in; the first is always the raw candidates.

    `tokens` (ByteIndex.tokens) lets patterns that only match long token runs scan those runs
    alone (PatternSet.scan): a fraction of the text, or of the windows cut from large data.
    Decodings nest up to `limits.depth` levels (hex of base64, base64 inside a URL-encoded
    form...); each level only decodes what the level above found, so nesting stays cheap, and
    all levels together decode at most `budget_ratio` times the data.
    """
    limits = limits or DecodeLimits()
    if budget is None:
        budget = Budget(max(limits.budget_floor, limits.budget_ratio * len(data)))
    index = index if index is not None else ByteIndex(data)
    text = candidate_text(index, limits, anchors)
    deeper = depth < limits.depth and _may_hide_more(text, index, limits)
    # Token runs for the patterns: when the index is built anyway (for the base64 and hex
    # runs, or to cut large data), not for them alone (a small decoded view at the end).
    yield "raw", text, (index.tokens if deeper or text is not index.data else None)
    if not deeper:
        return
    inner: list[tuple[str, bytes]] = list(_escaped_views(text))
    for name, produce in (("base64", _base64_views), ("hex", _hex_views),
                          ("base32", _base32_views), ("base85", _base85_views)):
        if decoded := b"\n".join(produce(index, limits)):
            inner.append((name, decoded))
    for name, decoded in inner:
        if not budget.spend(len(decoded)):
            continue
        for enc, view, tokens in views(decoded, limits, anchors, None, depth + 1, budget):
            yield (name if enc == "raw" else f"{name}+{enc}"), view, tokens
