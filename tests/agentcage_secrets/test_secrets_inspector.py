"""The secrets inspector: provider keys and real values, in every encoding and every place."""

from __future__ import annotations

import base64
import binascii
import json
import os
from urllib.parse import quote

import pytest

from agentcage.inspect import SecretsInspector
from agentcage.secrets import StagedSecret, mint, rule_from_config
from tests.agentcage_secrets.helpers import request
from tests.agentcage_secrets.samples import jwt, provider_samples

GH = provider_samples()["github-token"][0]


def _json_u(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


# How a key can be disguised on its way out: (name, encode).
ENCODINGS = [
    ("raw", lambda s: s),
    ("base64", lambda s: base64.b64encode(s.encode()).decode()),
    ("base64-offset1", lambda s: base64.b64encode(b"x" + s.encode()).decode()),
    ("base64-offset2", lambda s: base64.b64encode(b"xy" + s.encode()).decode()),
    ("base64url", lambda s: base64.urlsafe_b64encode(b"junk:" + s.encode()).decode().rstrip("=")),
    ("hex", lambda s: s.encode().hex()),
    ("HEX-offset", lambda s: (b"?" + s.encode()).hex().upper()),
    ("url", lambda s: quote(s, safe="").replace("_", "%5F").replace("-", "%2D")),
    ("json-u", _json_u),
    ("base64-of-url", lambda s: base64.b64encode(quote(s, safe="").encode()).decode()),
]
PLACES = [
    ("path", lambda t: request(path=f"/upload/{t}/x")),
    ("query", lambda t: request(path=f"/q?a=1&data={t}")),
    ("header", lambda t: request(headers=[("X-Trace", t)])),
    ("body", lambda t: request(body=b'{"note": "hello", "d": "' + t.encode() + b'"}')),
    ("body-plain", lambda t: request(body=b"line one\n" + t.encode() + b"\nline three")),
]


@pytest.mark.parametrize(("enc", "encode"), ENCODINGS, ids=[e for e, _ in ENCODINGS])
@pytest.mark.parametrize(("place", "build"), PLACES, ids=[p for p, _ in PLACES])
def test_provider_key_blocked_in_every_encoding_and_place(ctx, enc, encode, place, build):
    decision = SecretsInspector().inspect(build(encode(GH)), ctx)
    assert decision.action == "block", (enc, place, decision)
    assert decision.severity == "critical" and "GitHub" in decision.reason
    assert GH not in decision.reason


@pytest.mark.parametrize(("enc", "encode"), ENCODINGS, ids=[e for e, _ in ENCODINGS])
def test_key_in_a_large_body_is_found(ctx, enc, encode):
    filler = ("The quick brown fox writes some_code(x) = 1; " * 40000).encode()  # ~1.8 MB
    body = filler[:900_000] + encode(GH).encode() + filler[:900_000]
    decision = SecretsInspector().inspect(request(body=body), ctx)
    assert decision.action == "block", decision


@pytest.mark.parametrize(
    ("pid", "sample", "own_host"), [(k, v[0], v[1]) for k, v in provider_samples().items()]
)
def test_provider_key_to_wrong_provider_blocked_to_its_own_allowed(ctx, pid, sample, own_host):
    inspector = SecretsInspector()
    body = json.dumps({"credential": sample}).encode()
    wrong = inspector.inspect(request(host="api.other-provider.test", body=body), ctx)
    assert wrong.action == "block" and f"({pid})" in wrong.reason
    if own_host:
        assert inspector.inspect(request(host=own_host, body=body), ctx).action == "allow"


def test_cross_provider_key_is_blocked(ctx):
    sample = provider_samples()["openai-api-key"][0]
    decision = SecretsInspector().inspect(
        request(host="api.anthropic.com", headers=[("x-api-key", sample)]), ctx
    )
    assert decision.action == "block" and "OpenAI" in decision.reason


def test_private_key_allowed_nowhere(ctx):
    pem = provider_samples()["private-key"][0]
    for host in ("github.com", "api.anthropic.com"):
        assert SecretsInspector().inspect(request(host=host, body=pem.encode()), ctx).action == (
            "block"
        )


def test_jwt_is_flagged_not_blocked(ctx):
    decision = SecretsInspector().inspect(
        request(headers=[("Authorization", f"Bearer {jwt()}")]), ctx
    )
    assert decision.action == "flag" and "jwt" in decision.reason


REAL = b"real-canary-" + os.urandom(16).hex().encode()
STAGED = StagedSecret("CANARY", mint("CANARY"), REAL)
RULE = rule_from_config({"env": "CANARY", "inject_to": ["api.example.test"]})


@pytest.mark.parametrize(
    "form",
    [
        REAL,
        base64.b64encode(b"z" + REAL),
        base64.urlsafe_b64encode(REAL),
        binascii.hexlify(REAL),
        quote(REAL, safe="").replace("-", "%2D").encode(),
        b'{"k": "' + _json_u(REAL.decode()).encode() + b'"}',
    ],
)
def test_real_value_outside_its_rule_is_critical(ctx, form):
    inspector = SecretsInspector(secrets=[STAGED], rules=[RULE])
    decision = inspector.inspect(request(host="sink.example.test", body=b"d=" + form), ctx)
    assert decision.action == "block" and decision.severity == "critical"
    assert "CANARY" in decision.reason and REAL.decode() not in decision.reason
    own = inspector.inspect(request(host="api.example.test", body=b"d=" + form), ctx)
    assert own.action == "allow"


def test_real_value_without_any_rule_is_blocked_everywhere(ctx):
    inspector = SecretsInspector(secrets=[STAGED])
    decision = inspector.inspect(
        request(host="api.example.test", path=f"/x?k={REAL.decode()}"), ctx
    )
    assert decision.action == "block"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"plain words only",
        json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "fix the bug " * 50}]}
        ).encode(),
        os.urandom(1 << 16),
        base64.b64encode(os.urandom(3 << 20)),
        ("".join(f"{i:064x}\n" for i in range(2000))).encode(),
    ],
    ids=["empty", "words", "chat", "random", "big-base64", "hex-lines"],
)
def test_controls_without_credentials_are_allowed(ctx, body):
    decision = SecretsInspector().inspect(
        request(path="/v1/messages?beta=true", headers=[("Accept", "*/*")], body=body), ctx
    )
    assert decision.action == "allow", decision


def test_key_in_the_host_name_is_found(ctx):
    # A wildcard-allowed domain could carry data in its labels; the host is scanned too.
    sample = provider_samples()["google-api-key"][0]  # letters, digits, '-' and '_' only
    decision = SecretsInspector().inspect(request(host=f"{sample}.files.example.test"), ctx)
    assert decision.action == "block" and "Google" in decision.reason


@pytest.mark.parametrize(
    "wrap",
    [
        lambda s: base64.b64encode(s.encode()).hex(),  # hex of base64
        lambda s: base64.b64encode(s.encode().hex().encode()).decode(),  # base64 of hex
        lambda s: quote(base64.b64encode(b"\xfb\xff" + s.encode()).decode(), safe=""),  # form
        lambda s: quote(_json_u(s), safe=""),  # URL-encoded JSON escapes
    ],
    ids=["hex-of-base64", "base64-of-hex", "urlencoded-base64", "urlencoded-json-u"],
)
def test_two_nested_encodings_are_decoded(ctx, wrap):
    decision = SecretsInspector().inspect(request(body=b"payload=" + wrap(GH).encode()), ctx)
    assert decision.action == "block", decision


@pytest.mark.parametrize(
    "carry",
    [
        lambda p: request(headers=[("Authorization", f"Bearer {p}")]),
        lambda p: request(
            headers=[("Authorization", "Basic " + base64.b64encode(f"u:{p}".encode()).decode())]
        ),
        lambda p: request(path="/x?k=" + quote(p, safe="")),
        lambda p: request(body=base64.b64encode(p.encode()).hex().encode()),
        lambda p: request(body=(" filler " * 20000 + p + " filler" * 20000).encode()),
    ],
    ids=["bearer", "basic", "urlencoded-query", "hex-of-base64", "large-body"],
)
def test_placeholder_toward_wrong_host_is_blocked_in_any_form(ctx, carry):
    inspector = SecretsInspector(secrets=[STAGED], rules=[RULE])
    decision = inspector.inspect(carry(str(STAGED.placeholder)), ctx)
    assert decision.action == "block" and "wrong host" in decision.reason
    assert decision.severity == "high"
    allowed = carry(str(STAGED.placeholder))
    own = inspector.inspect(
        request(
            host="api.example.test", path=allowed.path, headers=allowed.headers, body=allowed.body
        ),
        ctx,
    )
    assert own.action == "allow"


def test_unknown_placeholders_pass(ctx):
    inspector = SecretsInspector(secrets=[STAGED], rules=[RULE])
    stranger = mint("CANARY")  # e.g. rotated away
    assert inspector.inspect(request(body=str(stranger).encode()), ctx).action == "allow"


def test_pem_header_in_a_large_body_is_found_through_its_anchor(ctx):
    filler = b"plain words and numbers 12345, nothing else. " * 5000  # ~225 KB
    pem = provider_samples()["private-key"][0].encode()
    body = filler + b"\n" + pem + b"\n" + filler
    decision = SecretsInspector().inspect(request(body=body), ctx)
    assert decision.action == "block" and "PEM" in decision.reason


# A large body (past DecodeLimits.small, where only the windows around token runs are
# searched) made of source code, the kind of body that has a long token every few lines.
_CODE = (
    b"def handle_request_for_the_server(self, request_context):\n"
    b"    return self.upstream_connection_pool.fetch(request_context.path)  # ok\n"
) * 700  # ~90 KB
_LARGE_ENCODINGS = [e for e in ENCODINGS if e[0] in ("raw", "base64", "hex", "url", "json-u")]


@pytest.mark.parametrize(("enc", "encode"), _LARGE_ENCODINGS, ids=[e for e, _ in _LARGE_ENCODINGS])
@pytest.mark.parametrize(("pid", "sample"), [(k, v[0]) for k, v in provider_samples().items()])
def test_every_provider_key_is_found_in_a_large_body(ctx, enc, encode, pid, sample):
    key = encode(sample).encode()
    for body in (
        key + b"\n" + _CODE,  # at the very start
        _CODE + b" " + key,  # at the very end
        _CODE[:50_000] + b'"' + key + b'"' + _CODE[50_000:],
        # Right after another long token: the windows around the two runs overlap, and the
        # key must not be cut where they meet.
        _CODE[:50_000] + b"upstream_connection_pool.x " + key + b" " + _CODE[50_000:],
        _CODE[:50_000] + b"upstream_connection_pool" + b" " * 30 + key + b"\n" + _CODE,
    ):
        decision = SecretsInspector().inspect(request(body=body), ctx)
        assert decision.action == "block", (pid, enc, decision)


def test_key_right_after_a_long_token_in_a_large_body_is_found(ctx):
    # Regression: windows that overlapped were joined with a separator inside the second run.
    filler = b"hello world. " * 10_000
    for gap in (b".", b" . ", b"  .   "):
        body = filler + b"x" * 20 + gap + GH.encode() + b" " + filler
        decision = SecretsInspector().inspect(request(body=body), ctx)
        assert decision.action == "block" and "GitHub" in decision.reason, (gap, decision)
