"""StreamRedactor: a body redacted piece by piece never lets a real value through, wherever the
pieces are cut, holds back only what could still become a value, and stays bounded in memory."""

from __future__ import annotations

import base64
import json
import os
import random
from urllib.parse import quote

import pytest

from agentcage.secrets import Redactor, StagedSecret, mint
from agentcage.secrets.stream import StreamRedactor

VALUE = b"sk-live-" + os.urandom(16).hex().encode()
OTHER = b"ghp_" + os.urandom(18).hex().encode()
SECRETS = [StagedSecret("API_KEY", mint("API_KEY"), VALUE),
           StagedSecret("GH_TOKEN", mint("GH_TOKEN"), OTHER)]


@pytest.fixture(scope="module")
def redactor() -> Redactor:
    return Redactor(SECRETS)


def leaked_forms(value: bytes) -> list[bytes]:
    """Encodings of `value` that must not survive: raw, URL, JSON, hex, base64 (every core)."""
    forms = [value, quote(value, safe="").encode(), json.dumps(value.decode())[1:-1].encode(),
             value.hex().encode()]
    for shift in range(3):  # the part of the base64 text that depends on the value alone
        encoded = base64.b64encode(b"\0" * shift + value)
        forms.append(encoded[-(-8 * shift // 6): 8 * (shift + len(value)) // 6])
    return forms


def body_with_values() -> bytes:
    """A body holding both values in every encoding, between ordinary text."""
    parts = [b"HTTP stream start\n"]
    for value in (VALUE, OTHER):
        for n in range(3):
            parts += [b"raw:", value, b"\n", b"url:", quote(value, safe="").encode(), b"\n",
                      b'json:"', json.dumps(value.decode())[1:-1].encode(), b'"\n',
                      b"hex:", value.hex().encode(), b"\n",
                      b"b64:", base64.b64encode(b"x" * n + value + b"tail"), b"\n",
                      b"data: {\"delta\": \"some ordinary text\"}\n\n"]
    return b"".join(parts)


def stream(redactor: Redactor, data: bytes, cuts: list[int]) -> tuple[bytes, StreamRedactor]:
    s = StreamRedactor(redactor)
    out, last = [], 0
    for cut in [*sorted(cuts), len(data)]:
        out.append(s.feed(data[last:cut]))
        last = cut
    out.append(s.finish())
    return b"".join(out), s


def test_whole_body_in_one_piece_matches_the_buffered_redactor(redactor):
    data = body_with_values()
    out, s = stream(redactor, data, [])
    assert out == redactor.redact(data).data
    assert s.names == {"API_KEY", "GH_TOKEN"}


def test_every_single_cut_point_lets_no_value_through(redactor):
    data = body_with_values()
    for cut in range(len(data) + 1):
        out, s = stream(redactor, data, [cut])
        for value in (VALUE, OTHER):
            for form in leaked_forms(value):
                assert form not in out, (cut, form)
        assert s.names == {"API_KEY", "GH_TOKEN"}


@pytest.mark.parametrize("seed", range(20))
def test_random_small_pieces_let_no_value_through(redactor, seed):
    rng = random.Random(seed)
    data = body_with_values()
    cuts = rng.sample(range(1, len(data)), k=rng.randint(5, len(data) // 4))
    out, _ = stream(redactor, data, cuts)
    for value in (VALUE, OTHER):
        for form in leaked_forms(value):
            assert form not in out
    # only the base64 runs may differ from the buffered redaction; the literal text is identical
    buffered = redactor.redact(data).data
    assert [line for line in out.split(b"\n") if not line.startswith(b"b64:")] == \
           [line for line in buffered.split(b"\n") if not line.startswith(b"b64:")]


def test_byte_by_byte_feeding_still_redacts(redactor):
    data = b"prefix " + VALUE + b" middle " + quote(OTHER, safe="").encode() + b" end"
    out, _ = stream(redactor, data, list(range(1, len(data))))
    assert out == redactor.redact(data).data


def test_text_that_cannot_start_a_value_is_released_at_once(redactor):
    """A server-sent event ending in a blank line is not delayed (no form starts with \\n)."""
    s = StreamRedactor(redactor)
    event = b'data: {"delta": "hello"}\n\n'
    assert s.feed(event) == event
    assert s.held == 0


def test_a_possible_start_of_a_value_is_held_until_it_is_decided(redactor):
    s = StreamRedactor(redactor)
    first = s.feed(b"token=" + VALUE[:10])
    assert VALUE[:10] not in first and s.held >= 10
    rest = s.feed(VALUE[10:] + b"\n")
    assert VALUE not in first + rest
    assert str(SECRETS[0].placeholder).encode() in first + rest
    assert s.finish() == b""


def test_a_held_prefix_that_was_not_a_value_is_released_unchanged(redactor):
    s = StreamRedactor(redactor)
    decoy = VALUE[:12] + b"-not-the-key"
    out = s.feed(decoy) + s.finish()
    assert out == decoy and s.names == set()


def test_memory_stays_bounded_over_a_large_body(redactor):
    """64 MiB through the redactor in 64 KiB pieces: the carry never grows past the forms."""
    s = StreamRedactor(redactor)
    piece = (b"0123456789abcdef" * 4096)  # hex digits: every byte could start the hex form
    bound = 2 * max(len(f) for f in redactor.forms) + 4
    total = 0
    for _ in range(1024):
        total += len(s.feed(piece))
        assert s.held <= bound
    total += len(s.finish())
    assert total == 1024 * len(piece)


def test_no_secrets_passes_pieces_through(redactor):
    s = StreamRedactor(Redactor([]))
    assert s.feed(b"abc") == b"abc" and s.finish() == b"" and s.held == 0
