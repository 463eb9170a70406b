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
