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


def _reference_shannon(data: bytes, at_least: float = 0.0) -> float:
    """The measurement as first written (a set of every byte), for the shortcut to agree with."""
    import math

    if not data:
        return 0.0
    distinct = set(data)
    if math.log2(len(distinct)) < at_least:
        return 0.0
    n = len(data)
    return -sum(data.count(b) / n * math.log2(data.count(b) / n) for b in distinct)


@pytest.mark.parametrize("seed", range(20))
def test_shannon_shortcut_for_text_gives_the_same_answer(seed):
    import random

    rng = random.Random(seed)
    printable = bytes(range(0x20, 0x7F)) + b"\t\r\n"
    binary = rng.randint(0, 80)  # around the 128-distinct-values bound of 7 bits
    window = bytes(rng.choice(printable) for _ in range(4096 - binary)) + os.urandom(binary)
    for at_least in (0.0, 5.5, 6.9, 7.0, 7.5):
        assert shannon(window, at_least) == _reference_shannon(window, at_least)


def _percent_mix(rng, size: int) -> bytes:
    """Text with valid, invalid and partial %-escapes in every position, including the ends."""
    pieces = [b"%41", b"%zz", b"%", b"%%", b"%4", b"%e9", b"%FF", b"plain ", b"x", b"%0a%0D"]
    return b"".join(rng.choice(pieces) for _ in range(size))


@pytest.mark.parametrize("seed", range(30))
def test_url_decoded_pieces_match_decoding_it_all(seed):
    import random
    from urllib.parse import unquote_to_bytes

    from agentcage.inspect.entropy import UrlDecoded, percent_positions

    rng = random.Random(seed)
    data = _percent_mix(rng, rng.randint(0, 400))
    whole = unquote_to_bytes(data)
    lazy = UrlDecoded(data, percent_positions(data, 1 << 20) or [])
    assert lazy.size == len(whole)
    for _ in range(50):
        a = rng.randint(0, len(whole))
        b = rng.randint(a, len(whole))
        assert lazy.cut(a, b) == whole[a:b], (data, a, b)
    assert percent_positions(b"%%%", 2) is None and percent_positions(b"a%b%", 2) == [1, 3]


def test_url_decoded_body_verdicts_match_decoding_it_all(ctx):
    from urllib.parse import quote, unquote_to_bytes

    from agentcage.inspect.entropy import UrlDecoded, percent_positions

    inspector = EntropyInspector()
    random_part = quote(os.urandom(3000), safe="").encode()
    text_part = b"some words, 100% plain text with %s formats " * 60
    for body in (
        random_part * 40,  # every window random once decoded
        (text_part + random_part) * 30,  # windows landing on either
        text_part * 200,  # never random
        b"%89PNG" + random_part * 30,  # compressed media: flagged, as before
    ):
        lazy = UrlDecoded(body, percent_positions(body, 1 << 22) or [])
        assert inspector._raw_verdict("url-encoded body", lazy) == inspector._raw_verdict(
            "url-encoded body", unquote_to_bytes(body)
        )


def test_url_encoded_random_in_a_large_body_is_blocked_either_way(ctx):
    from urllib.parse import quote

    encoded = quote(os.urandom(300_000), safe="").encode()  # dense: decoded wholesale
    assert EntropyInspector().inspect(request(body=encoded), ctx).action == "block"
    # Sparse: a large text body with a few hundred escapes is sampled without decoding it all.
    words = b"ordinary words with an occasional escape %2F and 50% of nothing " * 40000
    assert EntropyInspector().inspect(request(body=words), ctx).action == "allow"
    region = words[:1_000_000] + quote(os.urandom(400_000), safe="").encode() + words[:1_000_000]
    decision = EntropyInspector().inspect(request(body=region), ctx)
    assert decision.action == "block" and "url-encoded body" in decision.reason, decision
