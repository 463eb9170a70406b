"""The run finder and the shared index agree with a plain regex, on crafted and random data."""

from __future__ import annotations

import base64
import random
import re

import pytest

from agentcage.inspect.runs import ByteClass, ByteIndex, IndexCache, runs

ALPHABET = b"ab0+/-_ .\n\x00\xffABCxyz19%\\"
PLANT = b"0123456789abcdefABCDEF-_+/"


def reference(data: bytes, chars: bytes, min_len: int) -> list[tuple[int, int]]:
    pattern = re.compile(b"[" + re.escape(chars) + b"]{%d,}" % min_len)
    return [m.span() for m in pattern.finditer(data)]


@pytest.mark.parametrize("seed", range(40))
def test_runs_and_index_match_the_regex(seed):
    rng = random.Random(seed)
    data = bytes(rng.choice(ALPHABET) for _ in range(rng.randint(0, 3000)))
    for _ in range(3):  # plant long runs of the narrow classes
        at = rng.randint(0, len(data))
        data = data[:at] + bytes(rng.choice(PLANT) for _ in range(rng.randint(10, 200))) + data[at:]
    index = ByteIndex(data)
    for cls in ByteClass.ALL:
        for min_len in (16, 20, 24, 32, 40):
            expected = reference(data, cls.value, min_len)
            assert runs(data, cls, min_len) == expected
            assert index.runs(cls, min_len) == expected, (cls.name, min_len)


def test_limit_reports_too_many():
    data = b" ".join([b"a" * 20] * 10)
    assert runs(data, ByteClass.ALNUM, 20, limit=5) is None
    assert len(runs(data, ByteClass.ALNUM, 20) or []) == 10


def test_index_falls_back_to_whole_data_when_fragmented():
    data = b" ".join([b"x" * 21] * 5000)  # more wide runs than the limit for its size
    index = ByteIndex(data)
    assert index.fragmented and index.wide == [(0, len(data))]
    assert len(index.runs(ByteClass.ALNUM, 21)) == 5000


def test_cache_hits_by_identity_only():
    cache = IndexCache()
    body = bytes(bytearray(b"same content"))
    assert cache.index(body) is cache.index(body)
    assert cache.index(bytes(bytearray(body))) is not cache.index(body)


def test_base64_decoding_is_shared():
    blob = base64.b64encode(b"shared decoding " * 4)
    index = ByteIndex(b"x=" + blob)
    (a, b), *_ = index.runs(ByteClass.B64STD, 24)
    first = index.base64_decoded(a, b, 0, False)
    assert first == base64.b64decode(blob) and index.base64_decoded(a, b, 0, False) is first
