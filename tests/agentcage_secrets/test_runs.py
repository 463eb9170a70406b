"""The run finder and the shared index agree with a plain regex, on crafted and random data."""

from __future__ import annotations

import base64
import random
import re

import pytest

from agentcage.inspect.protocol import RequestView
from agentcage.inspect.runs import WIDE_BYTES, ByteClass, ByteIndex, runs

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


def test_the_body_index_is_built_once_per_request_and_goes_with_it():
    view = RequestView("POST", "https", "h", 443, "/", (), b"same content " * 10)
    assert view.body_index is view.body_index
    again = RequestView("POST", "https", "h", 443, "/", (), view.body)
    assert again.body_index is not view.body_index
    assert RequestView("GET", "https", "h", 443, "/").body_index.data == b""


def test_base64_decoding_is_shared():
    blob = base64.b64encode(b"shared decoding " * 4)
    index = ByteIndex(b"x=" + blob)
    (a, b), *_ = index.runs(ByteClass.B64STD, 24)
    first = index.base64_decoded(a, b, 0, False)
    assert first == base64.b64decode(blob) and index.base64_decoded(a, b, 0, False) is first


@pytest.mark.parametrize("seed", range(20))
def test_token_runs_are_the_long_wide_runs_joined(seed):
    from agentcage.inspect.runs import WIDE_MIN

    rng = random.Random(seed)
    data = bytes(rng.choice(ALPHABET) for _ in range(rng.randint(0, 2000)))
    for _ in range(4):
        at = rng.randint(0, len(data))
        data = data[:at] + bytes(rng.choice(PLANT) for _ in range(rng.randint(10, 90))) + data[at:]
    index, wide = ByteIndex(data), bytes(sorted(WIDE_BYTES))
    for min_len in (WIDE_MIN, 32, 64):
        expected = b"\x00".join(data[a:b] for a, b in reference(data, wide, min_len))
        assert index.tokens(min_len) == expected


@pytest.mark.parametrize("seed", range(30))
def test_large_data_windows_keep_every_run_and_its_surroundings_whole(seed):
    from agentcage.inspect.decode import DecodeLimits, candidate_text

    rng = random.Random(seed)
    limits = DecodeLimits(small=64)  # windows from 64 bytes on, so random data is "large"
    data = bytes(rng.choice(ALPHABET) for _ in range(rng.randint(100, 3000)))
    for _ in range(6):  # long runs, some a few bytes apart, some at the very edges
        at = rng.choice([0, len(data), rng.randint(0, len(data))])
        data = data[:at] + bytes(rng.choice(PLANT) for _ in range(rng.randint(20, 60))) + data[at:]
    index = ByteIndex(data)
    text = candidate_text(index, limits)
    if index.fragmented:
        assert text == data
        return
    for a, b in index.wide:  # each run with `pad` bytes each side, uncut by a separator
        assert data[max(a - limits.pad, 0) : b + limits.pad] in text
    assert len(text) <= len(data) + len(index.wide)  # each byte once, plus separators


@pytest.mark.parametrize("seed", range(20))
def test_might_hold_says_whether_any_run_is_that_long(seed):
    rng = random.Random(seed)
    data = bytes(rng.choice(ALPHABET) for _ in range(rng.randint(0, 1500)))
    at = rng.randint(0, len(data))
    data = data[:at] + bytes(rng.choice(PLANT) for _ in range(rng.randint(0, 150))) + data[at:]
    longest = max((b - a for a, b in reference(data, bytes(sorted(WIDE_BYTES)), 1)), default=0)
    for built in (False, True):
        index = ByteIndex(data)
        if built:
            assert index.wide is not None
        for min_len in (8, 19, 20, 24, 64, 128, 256):
            assert index.might_hold(min_len) == (longest >= min_len), (built, min_len)
        assert index.runs(ByteClass.B64STD, 24) == reference(data, ByteClass.B64STD.value, 24)


def test_runs_shorter_than_the_wide_minimum_are_found_without_any_wide_run():
    data = b"x " + b"a" * 17 + b" y"  # no wide run at all (WIDE_MIN is 20)
    index = ByteIndex(data)
    assert index.wide == [] and index.runs(ByteClass.ALNUM, 16) == [(2, 19)]
    assert index.runs(ByteClass.ALNUM, 24) == []


@pytest.mark.parametrize("seed", range(12))
def test_sliced_marking_finds_the_same_wide_runs(seed, monkeypatch):
    """Runs found a slice at a time (large data) equal those found over the whole data,
    whatever slice boundaries they cross, long runs over several slices included."""
    from agentcage.inspect import runs as runs_module

    rng = random.Random(seed)
    pieces = []
    for _ in range(rng.randint(1, 40)):
        pieces.append(bytes(rng.choice(ALPHABET) for _ in range(rng.randint(0, 120))))
        pieces.append(b"A" * rng.choice([0, 5, 19, 20, 21, 64, 300]))
    data = b"".join(pieces)
    whole = runs_module._wide_runs(data.translate(runs_module._WIDE_TABLE), 10 ** 6)
    monkeypatch.setattr(runs_module, "MARK_SLICE", rng.choice([7, 19, 20, 64, 97]))
    assert runs_module._wide_runs_sliced(data, 10 ** 6) == whole
