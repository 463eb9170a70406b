"""Redaction tables: every encoding of a real value, at every alignment, becomes the placeholder
in the same encoding, and decoding the result gives the placeholder back (round trip)."""

from __future__ import annotations

import base64
import binascii
import json
import os
from urllib.parse import quote, quote_plus, unquote_to_bytes

import pytest

from agentcage.secrets import Redactor, StagedSecret, mint

VALUE = b"sk-live/" + os.urandom(12).hex().encode() + b'+=?&"\\'
PH = mint("API_KEY")
PHB = str(PH).encode()
SECRET = StagedSecret("API_KEY", PH, VALUE)


@pytest.fixture
def redactor() -> Redactor:
    return Redactor([SECRET, StagedSecret("SHORT", mint("SHORT"), b"")])


def _b64(data: bytes, urlsafe: bool, pad: bool) -> bytes:
    out = base64.urlsafe_b64encode(data) if urlsafe else base64.b64encode(data)
    return out if pad else out.rstrip(b"=")


def _unb64(text: bytes, urlsafe: bool) -> bytes:
    text = text + b"=" * (-len(text) % 4)
    return base64.urlsafe_b64decode(text) if urlsafe else base64.b64decode(text)


# (name, encode, decode) — decode(redacted) must contain the placeholder and not the value.
LITERAL_ENCODINGS = [
    ("raw", lambda v: v, lambda t: t),
    ("url", lambda v: quote(v, safe="").encode(), unquote_to_bytes),
    (
        "url-plus",
        lambda v: quote_plus(v).encode(),
        lambda t: unquote_to_bytes(t.replace(b"+", b" ")),
    ),
    ("url-lower", lambda v: quote(v, safe="").lower().encode(), unquote_to_bytes),
    ("json", lambda v: json.dumps(v.decode()).encode(), lambda t: json.loads(t).encode()),
    (
        "json-slash",
        lambda v: json.dumps(v.decode()).replace("/", "\\/").encode(),
        lambda t: json.loads(t).encode(),
    ),
    ("hex", lambda v: v.hex().encode(), lambda t: binascii.unhexlify(t)),
    ("HEX", lambda v: v.hex().upper().encode(), lambda t: binascii.unhexlify(t)),
]


@pytest.mark.parametrize(
    ("name", "encode", "decode"), LITERAL_ENCODINGS, ids=lambda x: x if isinstance(x, str) else ""
)
def test_literal_encodings_round_trip(redactor, name, encode, decode):
    text = b"before " + encode(VALUE) + b" after"
    done = redactor.redact(text)
    assert done.names == {"API_KEY"}
    middle = done.data[len(b"before ") : -len(b" after")]
    assert VALUE not in done.data and encode(VALUE) not in done.data
    assert PHB in decode(middle)


@pytest.mark.parametrize("urlsafe", [False, True])
@pytest.mark.parametrize("pad", [True, False])
@pytest.mark.parametrize("offset", range(6))
@pytest.mark.parametrize("tail", [b"", b"x", b"tail!"])
def test_base64_any_alignment_round_trips(redactor, urlsafe, pad, offset, tail):
    prefix = os.urandom(offset)
    plain = prefix + VALUE + tail
    blob = _b64(plain, urlsafe, pad)
    done = redactor.redact(b'{"data": "' + blob + b'"}')
    assert done.names == {"API_KEY"}
    out = done.data[len(b'{"data": "') : -2]
    assert _unb64(out, urlsafe) == prefix + PHB + tail
    assert blob not in done.data


def test_basic_header_echo(redactor):
    header = "Basic " + base64.b64encode(b"user:" + VALUE).decode()
    (_name, value), *_ = redactor.redact_headers([("Authorization", header)])[0]
    assert base64.b64decode(value.split()[1]) == b"user:" + PHB


def test_base64_of_json_of_value_nested(redactor):
    inner = json.dumps({"token": VALUE.decode()}).encode()
    done = redactor.redact(base64.b64encode(inner))
    assert json.loads(base64.b64decode(done.data))["token"] == str(PH)


def test_several_occurrences_and_text_api(redactor):
    text = f"{VALUE.decode()} and {quote(VALUE, safe='')} and {VALUE.hex()}"
    out, names = redactor.redact_text(text)
    assert names == {"API_KEY"} and VALUE.decode() not in out
    assert out.count(str(PH)) == 1 and quote(str(PH), safe="") in out
    assert str(PH).encode().hex() in out


def test_text_in_text_out(redactor):
    done = redactor.redact(f"frame {VALUE.decode()}")
    assert done.data == f"frame {PH}" and done.names == {"API_KEY"}


def test_find_without_rewriting(redactor):
    assert redactor.find(b"x" + base64.b64encode(b"ab" + VALUE)) == {"API_KEY"}
    assert redactor.find(b"nothing here") == frozenset()


def test_nothing_to_redact_is_unchanged(redactor):
    data = os.urandom(4096)
    assert redactor.redact(data).data == data
    assert Redactor([]).redact(data).names == frozenset()
