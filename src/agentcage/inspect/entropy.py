"""The `entropy` inspector: random-looking data leaving, raw or under layers of encoding.

Shannon entropy of raw bytes follows the reference thresholds (body >= 7.0 bits/byte from 256
bytes; query values and path segments >= 5.5 from 64 bytes). Encoded data slips under them:
hex carries at most 4 bits per character, base32 5, base64 6, base85 6.4. So every span of
every encoding `peel` knows (in the body, a query value, a path segment or a header) is
decoded, and what came out decoded again, up to `decode_depth` layers (base64 of hex of key
material is two), within a budget; each layer's bytes are compared with what uniformly random
bytes of that length would give: entropy within `decoded_margin` of that is random data,
whatever alphabets it travelled in. Known compressed
media (PNG, JPEG, gzip, zip...) is random by nature and is flagged rather than blocked, unless
`media_action` says block. Raw bodies over 64 KiB are measured on 16 evenly spaced 4 KiB windows
(the highest counts); encoded spans are always found in full, their decoding sampled the same way.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from urllib.parse import unquote_to_bytes

from agentcage.inspect.peel import PeelLimits, peel
from agentcage.inspect.protocol import Decision, InspectionContext, Phase, RequestView
from agentcage.inspect.runs import ByteIndex
from agentcage.inspect.settings import EntropySettings
from agentcage.inspect.stats import random_expectation, shannon

# Magic numbers of formats that are compressed (hence high-entropy) by design.
MEDIA_MAGIC = (
    b"\x89PNG",
    b"\xff\xd8\xff",
    b"GIF8",
    b"RIFF",
    b"\x1f\x8b",
    b"PK\x03\x04",
    b"%PDF",
    b"\x00\x00\x00\x18ftyp",
    b"\x00\x00\x00\x1cftyp",
    b"\x00\x00\x00\x20ftyp",
    b"(\xb5/\xfd",
)


_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")
_MAGIC_MAX = max(len(m) for m in MEDIA_MAGIC)
_PERCENTS_LOCATED = 4096  # or one per KiB of body: past that, URL-decode the body wholesale


def _windows(size: int, window: int, count: int) -> list[tuple[int, int]]:
    """(start, end) of the windows measured in data of `size` bytes: all of it, or `count`
    evenly spaced windows of `window` bytes."""
    if size <= window * count:
        return [(0, size)]
    stride = (size - window) // (count - 1)
    return [(i * stride, i * stride + window) for i in range(count)]


def _sample(data: bytes, window: int, count: int) -> list[bytes]:
    return [data[a:b] for a, b in _windows(len(data), window, count)]


class UrlDecoded:
    """`unquote_to_bytes(data)`, read in pieces without decoding it all.

    A large body with a few hundred '%' (source code, prose: format strings) is measured on 16
    windows once URL-decoded; decoding and copying all of it cost more than the rest of the
    inspector. Each valid escape (`%` and two hex digits, exactly what unquote_to_bytes
    decodes) shortens the data by two, so a decoded offset maps to a raw one by counting the
    escapes before it, and a raw slice that splits no escape decodes to the decoded slice.
    """

    def __init__(self, data: bytes, percents: list[int]):
        self.data = data
        # Decoded offset of each escape: its raw offset less 2 per escape before it.
        self._at: list[int] = []
        for p in percents:
            pair = data[p + 1 : p + 3]
            if len(pair) == 2 and pair[0] in _HEX_DIGITS and pair[1] in _HEX_DIGITS:
                self._at.append(p - 2 * len(self._at))
        self.size = len(data) - 2 * len(self._at)

    def _raw(self, offset: int) -> int:
        return offset + 2 * bisect.bisect_left(self._at, offset)

    def cut(self, start: int, end: int) -> bytes:
        """The decoded bytes [start:end] (0 <= start <= end <= size)."""
        return unquote_to_bytes(self.data[self._raw(start) : self._raw(end)])


def _reader(body: bytes | UrlDecoded) -> tuple[int, Callable[[int, int], bytes]]:
    """The size of `body` and how to read bytes [a:b] of it, decoded or not."""
    if isinstance(body, UrlDecoded):
        return body.size, body.cut
    data: bytes = body
    return len(data), lambda a, b: data[a:b]


def percent_positions(data: bytes, limit: int) -> list[int] | None:
    """Offsets of every '%' in `data` (memchr speed, unlike bytes.count); None past `limit`."""
    found: list[int] = []
    at = data.find(b"%")
    while at >= 0:
        found.append(at)
        if len(found) > limit:
            return None
        at = data.find(b"%", at + 1)
    return found


def _encoded_min(decoded: int) -> int:
    """The fewest characters that can carry `decoded` bytes in any encoding peeled (base85,
    the densest: 5 characters for 4 bytes)."""
    return -(-5 * decoded // 4)


def _query_parts(path: str) -> list[bytes]:
    """Names and values of the query: data can ride in either (`?<blob>=1`)."""
    _, _, query = path.partition("?")
    parts = []
    for pair in query.split("&"):
        for part in pair.split("=", 1):
            if part:
                parts.append(unquote_to_bytes(part.replace("+", " ")))
    return parts


def _path_segments(path: str) -> list[bytes]:
    return [unquote_to_bytes(s) for s in path.partition("?")[0].split("/") if s]


class EntropyInspector:
    name = "entropy"
    phase: Phase = "body"

    def __init__(self, settings: EntropySettings | None = None):
        self.settings = settings or EntropySettings()

    def _decoded_verdict(self, where: str, index: ByteIndex, min_bytes: int) -> Decision | None:
        """Random data under any layers of encoding (`peel`), judged layer by layer."""
        s = self.settings
        limits = PeelLimits(depth=s.decode_depth, min_chars=_encoded_min(min_bytes))
        for layer in peel(index.data, limits, index):
            decoded, encoding = layer.data, layer.path
            if len(decoded) < min_bytes:
                continue
            sample = _sample(decoded, s.sample_window, s.sample_windows)
            expected = random_expectation(min(len(decoded), len(sample[0])))
            measured = max(shannon(w, expected - s.decoded_margin) for w in sample)
            if measured >= expected - s.decoded_margin:
                what = (
                    f"{encoding}-encoded random data in {where} ({len(decoded)} bytes, "
                    f"{measured:.2f} bits/byte, random would be {expected:.2f})"
                )
                if decoded.startswith(MEDIA_MAGIC):
                    if s.media_action == "flag":
                        return Decision("flag", what + ", compressed media", self.name, "warning")
                    return Decision("block", what + ", compressed media", self.name, "high")
                return Decision("block", what, self.name, "high")
        return None

    def _raw_verdict(self, where: str, body: bytes | UrlDecoded) -> Decision | None:
        s = self.settings
        size, cut = _reader(body)
        if size < s.body_min_bytes:
            return None
        windows = [cut(a, b) for a, b in _windows(size, s.sample_window, s.sample_windows)]
        threshold = min(s.body_threshold, random_expectation(len(windows[0])) - 0.5)
        h = max(shannon(w, threshold) for w in windows)
        if h < threshold:
            return None
        verdict = Decision(
            "block",
            f"high-entropy {where} ({size} bytes, {h:.2f} bits/byte)",
            self.name,
            "high",
        )
        if cut(0, min(size, _MAGIC_MAX)).startswith(MEDIA_MAGIC):
            verdict = Decision(
                s.media_action,
                verdict.reason + ", compressed media",
                self.name,
                "warning" if s.media_action == "flag" else "high",
            )
        return verdict

    def _values(self, request: RequestView) -> Iterator[tuple[str, bytes]]:
        for v in _query_parts(request.path):
            yield "query value", v
        for seg in _path_segments(request.path):
            yield "path segment", seg
        exempt = {h.lower() for h in self.settings.header_exempt}
        for key, value in request.headers:
            if key.lower() not in exempt:
                yield f"header {key}", value.encode("utf-8", "surrogateescape")

    def inspect(self, request: RequestView, ctx: InspectionContext) -> Decision:
        s = self.settings
        if not s.enable:
            return Decision("allow", "entropy inspector disabled", self.name)
        flagged: Decision | None = None
        for where, value in self._values(request):
            is_header = where.startswith("header ")
            if not is_header and len(value) >= s.value_min_bytes:
                h = shannon(value, s.value_threshold)
                if h >= s.value_threshold:
                    return Decision(
                        "block",
                        f"high-entropy {where} ({len(value)} bytes, {h:.2f} bits/byte)",
                        self.name,
                        "high",
                    )
            min_bytes = s.header_min_bytes if is_header else s.decoded_min_bytes
            if len(value) < _encoded_min(min_bytes):  # too short to hold that much, encoded
                continue
            verdict = self._decoded_verdict(where, ByteIndex(value), min_bytes)
            if verdict is not None and verdict.action == "block":
                return verdict
            flagged = flagged or verdict
        body = request.body or b""
        bodies: list[tuple[str, bytes | UrlDecoded]] = [("body", body)]
        # Percent-encoded bytes (a form field, %XX everywhere): measured once decoded too. A
        # body dense with '%' is decoded wholesale (locating each '%' would cost as much).
        percents = percent_positions(body, max(_PERCENTS_LOCATED, len(body) >> 10))
        if percents is None:
            bodies.append(("url-encoded body", unquote_to_bytes(body)))
        elif len(percents) >= s.decoded_min_bytes:
            bodies.append(("url-encoded body", UrlDecoded(body, percents)))
        for where, data in bodies:
            verdict = self._raw_verdict(where, data)
            if verdict is not None and verdict.action == "block":
                return verdict
            flagged = flagged or verdict
        if len(body) >= _encoded_min(s.decoded_min_bytes):
            verdict = self._decoded_verdict("body", request.body_index, s.decoded_min_bytes)
            if verdict is not None and verdict.action == "block":
                return verdict
            flagged = flagged or verdict
        return flagged or Decision("allow", "no random-looking data", self.name)
