"""The one domain-pattern module: table of accepted and refused patterns, and matching."""

import pytest

from agentcage.domains import (
    DomainMatcher,
    DomainPatternError,
    DomainRule,
    encoded_private_ip,
    host_refusal,
    parse_duration,
    parse_pattern,
)

VALID = [
    ("api.example.com", "api.example.com", False),
    ("API.Example.COM.", "api.example.com", False),
    ("*.example.com", "example.com", True),
    ("*.example.test", "example.test", True),
    ("pypi.org", "pypi.org", False),
    ("bücher.example", "xn--bcher-kva.example", False),
    ("*.foo.github.io", "foo.github.io", True),
]

INVALID = [
    ("", "empty"),
    ("*", "everything"),
    ("*.com", "public suffix"),
    ("*.co.uk", "public suffix"),
    ("*.github.io", "public suffix"),
    ("*.test", "public suffix"),
    ("https://api.example.com", "scheme"),
    ("api.example.com/v1", "path"),
    ("api.example.com:443", "port"),
    ("1.2.3.4", "IP literal"),
    ("::1", "IP literal"),
    ("[2001:db8::1]", "IP literal"),
    ("169-254-169-254.nip.io", "private address"),
    ("10.0.0.1.sslip.io", "private address"),
    ("app-0a000001.nip.io", "private address"),
    ("x.127-0-0-1.example.com", "private address"),
    ("foo*.example.com", "first label"),
    ("*.*.example.com", "first label"),
    ("exa mple.com", "valid host name"),
    ("-bad.example.com", "valid host name"),
    ("a" * 64 + ".com", "valid host name"),
]


@pytest.mark.parametrize(("text", "name", "wildcard"), VALID)
def test_valid_patterns(text, name, wildcard):
    p = parse_pattern(text)
    assert (p.name, p.wildcard) == (name, wildcard)


@pytest.mark.parametrize(("text", "why"), INVALID)
def test_invalid_patterns_say_why(text, why):
    with pytest.raises(DomainPatternError, match=why):
        parse_pattern(text)


def test_public_ip_encoding_names_are_not_refused():
    # control: a name that spells a public address is just a name
    assert encoded_private_ip("8-8-8-8.nip.io") is None
    assert parse_pattern("8-8-8-8.example.com").name == "8-8-8-8.example.com"


def rule(text, expires=None):
    return DomainRule(parse_pattern(text), expires)


MATCHES = [
    ("api.example.com", "api.example.com", True),
    ("api.example.com", "API.example.com.", True),
    ("api.example.com", "x.api.example.com", False),
    ("api.example.com", "example.com", False),
    ("*.example.com", "a.example.com", True),
    ("*.example.com", "a.b.example.com", True),
    ("*.example.com", "example.com", False),
    ("*.example.com", "badexample.com", False),
    ("*.example.com", "example.com.evil.test", False),
    ("*.example.com", "10-0-0-1.example.com", False),
    ("api.example.com", "1.2.3.4", False),
]


@pytest.mark.parametrize(("pattern", "host", "expected"), MATCHES)
def test_matching(pattern, host, expected):
    assert (DomainMatcher([rule(pattern)]).match(host) is not None) is expected


def test_expiry():
    m = DomainMatcher([rule("api.example.com", expires=100.0)])
    assert m.match("api.example.com", now=99.0) is not None
    assert m.match("api.example.com", now=100.0) is None


def test_host_refusal():
    assert host_refusal("10.0.0.1") == "IP literal"
    assert "private" in host_refusal("169-254-169-254.nip.io")
    assert host_refusal("api.example.com") is None


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("2h", 7200),
                                                ("1d", 86400), ("1w", 604800)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2", "h", "0h", "-1h", "2y", "1.5h"])
def test_bad_durations(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)
