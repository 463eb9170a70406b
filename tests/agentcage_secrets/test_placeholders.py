from __future__ import annotations

import re

import pytest

from agentcage.secrets import placeholders
from agentcage.secrets.placeholders import Placeholder


def test_format_is_env_and_128_random_bits():
    ph = placeholders.mint("OPENAI_API_KEY")
    assert re.fullmatch(r"agentcage:secret:OPENAI_API_KEY:[0-9a-f]{32}", str(ph))
    assert len({placeholders.mint("K").token for _ in range(1000)}) == 1000


@pytest.mark.parametrize("env", ["", "1ABC", "A-B", "A B", "A:B", "ключ"])
def test_invalid_env_names_refused(env):
    with pytest.raises(ValueError):
        placeholders.mint(env)


def test_parse_round_trip_and_refusals():
    ph = placeholders.mint("GITHUB_TOKEN")
    assert placeholders.parse(str(ph)) == ph
    for bad in [str(ph)[:-1], str(ph) + "0", str(ph).upper(), "agentcage:secret:K:xyz"]:
        with pytest.raises(ValueError):
            placeholders.parse(bad)


def test_find_in_text_and_bytes():
    a, b = placeholders.mint("A"), placeholders.mint("B_2")
    text = f"Bearer {a} and x={b}&y=1; not agentcage:secret:C:{'0' * 31}"
    found = [p for _, _, p in placeholders.find(text)]
    assert found == [a, b]
    spans = list(placeholders.find(text.encode()))
    assert [p for _, _, p in spans] == [a, b]
    start, end, _ = spans[0]
    assert text.encode()[start:end] == str(a).encode()


def test_longer_hex_run_is_not_a_placeholder():
    ph = Placeholder("K", "a" * 32)
    assert list(placeholders.find(str(ph) + "b")) == []
