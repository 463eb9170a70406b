"""The `entropy` inspector: random-looking data leaving, raw or hex/base64-encoded.

Shannon entropy of raw bytes follows the reference thresholds (body >= 7.0 bits/byte from 256
bytes; query values and path segments >= 5.5 from 64 bytes). Encoded data slips under them:
hex carries at most 4 bits per character and base64 at most 6. So every long hex or base64
span (in the body, a query value, a path segment or a header) is also decoded and its bytes
are compared with what uniformly random bytes of that length would give: entropy within
`decoded_margin` of that is random data, whatever alphabet it travelled in. Known compressed
media (PNG, JPEG, gzip, zip...) is random by nature and is flagged rather than blocked, unless
`media_action` says block. Raw bodies over 64 KiB are measured on 16 evenly spaced 4 KiB windows
(the highest counts); encoded spans are always found in full, their decoding sampled the same way.
"""

from __future__ import annotations

import binascii
import functools
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote_to_bytes

from agentcage.gateway.inspectors import Decision, InspectionContext, Phase, RequestView
from agentcage.inspect.runs import ByteClass, ByteIndex, IndexCache

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


@dataclass(frozen=True)
class EntropySettings:
    enable: bool = True
    body_threshold: float = 7.0
    body_min_bytes: int = 256
    value_threshold: float = 5.5
    value_min_bytes: int = 64
    decoded_min_bytes: int = 96  # single SHA-256/512 digests (32/64 bytes) stay below this
    decoded_margin: float = 0.5  # bits/byte below the random expectation still called random
    header_min_bytes: int = 256  # decoded bytes; headers carry opaque tokens more often
    header_exempt: tuple[str, ...] = ("cookie", "x-amz-security-token")
    sample_window: int = 4096
    sample_windows: int = 16  # large bodies: entropy of this many windows, evenly spaced
    media_action: Literal["flag", "block"] = "flag"


def shannon(data: bytes, at_least: float = 0.0) -> float:
    """Bits per byte; 0.0 early when it cannot reach `at_least` (H <= log2(distinct bytes))."""
    if not data:
        return 0.0
    n = len(data)
    distinct = set(data)
    if math.log2(len(distinct)) < at_least:
        return 0.0
    # bytes.count runs in C per distinct byte value: faster than a Counter for our sizes.
    counts = [data.count(b) for b in distinct] if n <= 65536 else Counter(data).values()
    return -sum(c / n * math.log2(c / n) for c in counts)


@functools.lru_cache(maxsize=1024)  # a pure function of two integers; bodies repeat sizes
def random_expectation(n: int, symbols: int = 256) -> float:
    """Expected Shannon entropy (bits) of `n` independent uniform draws over `symbols` values."""
    if n <= 1:
        return 0.0
    q = 1.0 / symbols
    mean = n * q
    top = min(n, int(mean + 12 * math.sqrt(mean) + 30))
    total = 0.0
    for c in range(1, top + 1):
        log_pmf = (
            math.lgamma(n + 1)
            - math.lgamma(c + 1)
            - math.lgamma(n - c + 1)
            + c * math.log(q)
            + (n - c) * math.log1p(-q)
        )
        total += math.exp(log_pmf) * (c / n) * math.log2(c / n)
    return -symbols * total


def _sample(data: bytes, window: int, count: int) -> list[bytes]:
    if len(data) <= window * count:
        return [data]
    stride = (len(data) - window) // (count - 1)
    return [data[i * stride : i * stride + window] for i in range(count)]


def _decode_spans(index: ByteIndex, min_decoded: int) -> Iterator[tuple[str, bytes]]:
    for span in index.spans(ByteClass.HEX, 2 * min_decoded):
        try:
            yield "hex", binascii.unhexlify(span[: len(span) - len(span) % 2])
        except binascii.Error:
            continue
    min_chars = -(-4 * min_decoded // 3)
    for cls in index.base64_classes():
        for a, b in index.runs(cls, min_chars):
            yield "base64", index.base64_decoded(a, b, 0, cls is ByteClass.B64URL)


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

    def __init__(self, settings: EntropySettings | None = None, cache: IndexCache | None = None):
        self.settings = settings or EntropySettings()
        self.cache = cache or IndexCache()

    def _decoded_verdict(self, where: str, index: ByteIndex, min_bytes: int) -> Decision | None:
        s = self.settings
        for encoding, decoded in _decode_spans(index, min_bytes):
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

    def _raw_verdict(self, where: str, body: bytes) -> Decision | None:
        s = self.settings
        if len(body) < s.body_min_bytes:
            return None
        windows = _sample(body, s.sample_window, s.sample_windows)
        threshold = min(s.body_threshold, random_expectation(len(windows[0])) - 0.5)
        h = max(shannon(w, threshold) for w in windows)
        if h < threshold:
            return None
        verdict = Decision(
            "block", f"high-entropy {where} ({len(body)} bytes, {h:.2f} bits/byte)", self.name,
            "high",
        )
        if body.startswith(MEDIA_MAGIC):
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
            if len(value) < -(-4 * min_bytes // 3):  # too short to hold that much base64
                continue
            verdict = self._decoded_verdict(where, ByteIndex(value), min_bytes)
            if verdict is not None and verdict.action == "block":
                return verdict
            flagged = flagged or verdict
        body = request.body or b""
        bodies = [("body", body)]
        if body.count(b"%") >= s.decoded_min_bytes:
            # Percent-encoded bytes (a form field, %XX everywhere): measured once decoded too.
            bodies.append(("url-encoded body", unquote_to_bytes(body)))
        for where, data in bodies:
            verdict = self._raw_verdict(where, data)
            if verdict is not None and verdict.action == "block":
                return verdict
            flagged = flagged or verdict
        if len(body) >= -(-4 * s.decoded_min_bytes // 3):
            verdict = self._decoded_verdict("body", self.cache.index(body), s.decoded_min_bytes)
            if verdict is not None and verdict.action == "block":
                return verdict
            flagged = flagged or verdict
        return flagged or Decision("allow", "no random-looking data", self.name)
