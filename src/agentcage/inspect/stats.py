"""How random bytes look: Shannon entropy, and what uniformly random bytes would give."""

from __future__ import annotations

import functools
import math
from collections import Counter

_PRINTABLE = bytes(range(0x20, 0x7F)) + b"\t\r\n"
_PRINTABLE_BITS = math.log2(len(_PRINTABLE))


def shannon(data: bytes, at_least: float = 0.0) -> float:
    """Bits per byte; 0.0 early when it cannot reach `at_least` (H <= log2(distinct bytes))."""
    if not data:
        return 0.0
    n = len(data)
    if at_least > _PRINTABLE_BITS:
        # Text cannot reach it: at most the printable bytes plus one value per other byte are
        # distinct. Two C passes (no set of every byte) decide most windows of a text body.
        distinct_at_most = len(_PRINTABLE) + len(data.translate(None, _PRINTABLE))
        if math.log2(distinct_at_most) < at_least:
            return 0.0
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
