"""Entropy: random key material is caught raw, hex- and base64-encoded, wherever it travels;
ordinary text, digests and identifiers pass (every blocked case has a control)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import statistics
import uuid
import zlib
from pathlib import Path

import pytest

from agentcage.inspect import EntropyInspector, EntropySettings
from agentcage.inspect.entropy import random_expectation, shannon
from tests.agentcage_secrets.helpers import request

KEY = os.urandom(4096)  # 4 KiB of random key material, as a leaked file would hold

ENCODED = {
    "hex": KEY.hex(),
    "HEX": KEY.hex().upper(),
    "base64": base64.b64encode(KEY).decode(),
    "base64url": base64.urlsafe_b64encode(KEY).decode().rstrip("="),
}


@pytest.mark.parametrize("encoding", list(ENCODED))
@pytest.mark.parametrize("place", ["body", "json-body", "query", "path", "header"])
def test_4k_random_material_encoded_is_blocked(ctx, encoding, place):
    text = ENCODED[encoding]
    req = {
        "body": lambda: request(body=text.encode()),
        "json-body": lambda: request(body=json.dumps({"file": "notes.txt", "data": text}).encode()),
        "query": lambda: request(path=f"/collect?id=7&blob={text}"),
        "path": lambda: request(path=f"/u/{text}/done"),
        "header": lambda: request(headers=[("X-Blob", text)]),
    }[place]()
    decision = EntropyInspector().inspect(req, ctx)
    assert decision.action == "block", decision
    assert decision.inspector == "entropy" and decision.severity == "high"


def test_raw_random_body_is_blocked(ctx):
    assert EntropyInspector().inspect(request(body=KEY), ctx).action == "block"


def test_url_encoded_random_body_is_blocked_and_url_encoded_text_is_not(ctx):
    from urllib.parse import quote

    for body in ("".join(f"%{b:02x}" for b in KEY), quote(KEY)):
        decision = EntropyInspector().inspect(request(body=body.encode()), ctx)
        assert decision.action == "block" and "url-encoded body" in decision.reason
    form = ("q=" + quote("an ordinary sentence, with spaces & punctuation! " * 80)).encode()
    assert EntropyInspector().inspect(request(body=form), ctx).action == "allow"


def test_small_chunks_of_random_data_are_caught_from_the_minimum(ctx):
    chunk = os.urandom(96).hex()  # 96 bytes, the default decoded minimum
    assert EntropyInspector().inspect(request(path=f"/x?d={chunk}"), ctx).action == "block"


def test_random_region_inside_a_large_text_body(ctx):
    text = ("ordinary log line with words and numbers 12345\n" * 40000).encode()
    body = text[: len(text) // 2] + base64.b64encode(KEY) + text[len(text) // 2 :]
    assert EntropyInspector().inspect(request(body=body), ctx).action == "block"


@pytest.mark.parametrize(
    "req",
    [
        request(body=Path(__file__).read_bytes() * 4),
        request(
            body=json.dumps({"messages": [{"role": "user", "content": "refactor " * 500}]}).encode()
        ),
        request(path="/v2/library/debian/blobs/sha256:" + hashlib.sha256(b"x").hexdigest()),
        request(path="/repos/o/r/commits/" + hashlib.sha1(b"x").hexdigest()),
        request(
            path="/pkg?integrity=sha512-" + base64.b64encode(hashlib.sha512(b"x").digest()).decode()
        ),
        request(path=f"/items/{uuid.uuid4()}?after={uuid.uuid4()}"),
        request(headers=[("Cookie", "session=" + base64.b64encode(os.urandom(600)).decode())]),
        request(body=base64.b64encode(("plain text document " * 300).encode())),
        request(body=("".join(f"{i:08x}" for i in range(2000))).encode()),
    ],
    ids=[
        "source",
        "chat",
        "sha256-path",
        "sha1-path",
        "sri-query",
        "uuids",
        "cookie-exempt",
        "base64-of-text",
        "counter-hex",
    ],
)
def test_controls_are_allowed(ctx, req):
    decision = EntropyInspector().inspect(req, ctx)
    assert decision.action == "allow", decision


def test_compressed_media_is_flagged_not_blocked_unless_configured(ctx):
    png = b"\x89PNG\r\n\x1a\n" + zlib.compress(os.urandom(8192))
    req = request(body=json.dumps({"image": base64.b64encode(png).decode()}).encode())
    assert EntropyInspector().inspect(req, ctx).action == "flag"
    strict = EntropyInspector(EntropySettings(media_action="block"))
    assert strict.inspect(req, ctx).action == "block"


def test_thresholds_are_configurable(ctx):
    req = request(path="/x?d=" + os.urandom(100).hex())
    assert EntropyInspector().inspect(req, ctx).action == "block"
    lenient = EntropyInspector(EntropySettings(decoded_min_bytes=200))
    assert lenient.inspect(req, ctx).action == "allow"
    assert (
        EntropyInspector(EntropySettings(enable=False)).inspect(request(body=KEY), ctx).action
        == "allow"
    )


def test_reference_raw_thresholds_apply(ctx):
    # 64 printable characters drawn from a large alphabet: >= 5.5 bits/byte as a query value.
    value = "".join(chr(33 + b % 90) for b in os.urandom(200)).replace("&", "x").replace("#", "y")
    decision = EntropyInspector().inspect(request(path="/x?v=" + value), ctx)
    assert decision.action == "block" and "query value" in decision.reason


@pytest.mark.parametrize("n", [64, 96, 256, 4096])
def test_random_expectation_matches_measurement(n):
    measured = statistics.mean(shannon(os.urandom(n)) for _ in range(100))
    assert abs(random_expectation(n) - measured) < 0.05


def test_shannon_bounds():
    assert shannon(b"") == 0.0
    assert shannon(b"aaaa") == 0.0
    assert shannon(bytes(range(256))) == pytest.approx(8.0)
    assert shannon(b"abab", at_least=2.0) == 0.0  # cannot reach 2 bits with 2 symbols


def test_data_in_a_query_name_or_a_short_body_is_caught(ctx):
    blob = os.urandom(128).hex()
    assert EntropyInspector().inspect(request(path=f"/x?{blob}=1"), ctx).action == "block"
    short = os.urandom(100).hex().encode()  # 200 bytes: under the raw body minimum of 256
    assert EntropyInspector().inspect(request(body=short), ctx).action == "block"
