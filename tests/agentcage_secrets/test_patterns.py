from __future__ import annotations

import json
from importlib import resources

import pytest

from agentcage.inspect.patterns import PatternError, compile_pattern, load_document, load_patterns
from tests.agentcage_secrets.samples import provider_samples


def test_data_file_is_valid_and_every_pattern_has_a_sample():
    doc = load_document()
    ids = [p["id"] for p in doc["patterns"]]
    assert len(ids) == len(set(ids))
    patterns = load_patterns()
    assert set(provider_samples()) | {"jwt"} == {p.id for p in patterns.patterns}
    raw = resources.files("agentcage").joinpath("data/secret_patterns.json").read_text()
    assert json.loads(raw)["version"] == 1


@pytest.mark.parametrize(("pid", "sample"), [(k, v[0]) for k, v in provider_samples().items()])
def test_each_sample_matches_its_pattern(pid, sample):
    patterns = load_patterns()
    found = [p.id for p, _ in patterns.scan(b"prefix " + sample.encode() + b" suffix")]
    assert pid in found


def test_every_regex_starts_with_a_literal_so_large_scans_stay_fast():
    # Structural, not timed: the first item of each compiled pattern is a literal (or a branch
    # whose alternatives all start with one), which gives the engine its fast prefix search.
    from re import _parser  # the stdlib's own parser; stable enough for a test

    def starts_with_literal(items) -> bool:
        op, arg = items[0]
        if op is _parser.LITERAL:
            return True
        if op is _parser.SUBPATTERN:
            return starts_with_literal(arg[-1])
        if op is _parser.BRANCH:
            return all(starts_with_literal(alt) for alt in arg[1])
        return False

    for pattern in load_patterns().patterns:
        assert starts_with_literal(_parser.parse(pattern.regex.pattern)), pattern.id


@pytest.mark.parametrize(
    "entry",
    [
        {"id": "x", "provider": "X", "regex": "("},
        {"id": "x", "provider": "X", "regex": "a", "allowed": ["*"]},
        {"id": "x", "provider": "X", "regex": "a", "action": "ignore"},
        {"id": "x", "regex": "a"},
        {"id": "x", "provider": "X", "regex": "a", "hint": ["a"]},
    ],
)
def test_invalid_patterns_refused(entry):
    with pytest.raises(PatternError, match="secret pattern x"):
        compile_pattern(entry)


def test_extra_patterns_from_config():
    patterns = load_patterns(
        [
            {
                "id": "acme",
                "provider": "Acme",
                "regex": "acme_[0-9]{8}",
                "allowed": ["api.acme.test"],
            }
        ]
    )
    (hit,) = [p for p, _ in patterns.scan(b"k=acme_12345678")]
    assert hit.allows("api.acme.test") and hit.allows("eu.api.acme.test")
    assert not hit.allows("evil.test")


def test_token_only_patterns_are_recognised():
    import re

    from agentcage.inspect.patterns import token_min_len

    def least(regex: str) -> int | None:
        return token_min_len(re.compile(regex.encode()))

    assert least("ghp_[A-Za-z0-9]{36}") == 40
    assert least("k_(?<=[sr]k_)(?:live|test)_[0-9A-Za-z]{20,}") == 27  # lookbehind: no width
    assert least("A(?:KIA|SIA)[A-Z2-7]{16}(?![A-Z0-9])") == 20
    assert least("ab|abcd") == 2
    for other in (
        r"SG\.[A-Za-z0-9]{22}",  # '.' is not a token byte
        "x[^a]{20}",  # a negated class matches anything else
        r"x\w{20}",  # categories are not followed
        "x.{20}",
        "^x{20}",
        "(?i)x{20}",  # flags are not followed
        "(?i:x){20}",
        r"(x)\1{20}",
        "x(?= )y{20}",  # a lookaround at a space
    ):
        assert least(other) is None, other
    patterns = load_patterns()
    buckets = dict(zip((p.id for p in patterns.patterns), patterns._buckets, strict=True))
    assert buckets["anthropic-api-key"] == 32 and buckets["aws-access-key-id"] == 20
    assert buckets["slack-token"] is None  # 15 bytes at least: shorter than a token run
    assert buckets["sendgrid-api-key"] is None and buckets["private-key"] is None


def _mixed_text(rng, samples: list[str], pieces: int) -> bytes:
    """Samples glued to token bytes, punctuation and binary: every kind of neighbour a key has."""
    token = "abcXYZ0189+/-_%\\"
    glue = [" ", ".", ":", "\n", "=", '"', "'", "\x00", "é", "\\u0041", "%41"]
    out = []
    for _ in range(pieces):
        roll = rng.random()
        if roll < 0.25:
            out.append(rng.choice(samples))
        elif roll < 0.6:
            out.append("".join(rng.choice(token) for _ in range(rng.randint(1, 70))))
        else:
            out.append(rng.choice(glue))
    return "".join(out).encode("utf-8", "surrogateescape")


@pytest.mark.parametrize("seed", range(60))
def test_every_scan_shortcut_finds_what_each_regex_alone_finds(seed):
    import random

    from agentcage.inspect.runs import ByteIndex
    from tests.agentcage_secrets.samples import jwt

    rng = random.Random(seed)
    samples = [s for s, _ in provider_samples().values()] + [jwt(), "xoxb-12-ab", "AKIA"]
    extra = [  # not combinable (flags, a group): never left to the combined prefilter
        {"id": "acme-ci", "provider": "Acme", "regex": "(?i)acme_[0-9]{8}", "allowed": []},
        {"id": "acme-group", "provider": "Acme", "regex": "(acme)-\\1-[0-9]{4}", "allowed": []},
    ]
    patterns = load_patterns(extra)
    samples += ["ACME_12345678", "acme-acme-1234"]
    # Small texts take the combined prefilter, larger ones the separate scans.
    text = _mixed_text(rng, samples, rng.choice([1, 5, 20, 80, 200]))
    alone = sorted((p.id, m.group()) for p in patterns.patterns for m in p.regex.finditer(text))
    assert sorted((p.id, m) for p, m in patterns.scan(text)) == alone
    tokens = ByteIndex(text).tokens
    assert sorted((p.id, m) for p, m in patterns.scan(text, tokens)) == alone
