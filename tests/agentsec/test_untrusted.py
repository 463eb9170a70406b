"""Text from inside a sandbox: parsed strictly, cleaned once, bounded."""

from __future__ import annotations

import json

import pytest

from agentsec.errors import CaptureError
from agentsec.untrusted import clean_text, clean_tree, parse_probe_output
from tests.agentsec import outputs


def test_a_whole_output_parses():
    probe = parse_probe_output(outputs.line(outputs.sealed()))
    assert probe.version == "1.1.0"
    assert probe.sections["identity"].ok
    assert probe.ignored_lines == 0


def test_surrounding_non_json_lines_are_skipped_and_counted():
    text = "bash: warning\n" + outputs.line(outputs.sealed()) + "\n\nlogout\n"
    assert parse_probe_output(text).ignored_lines == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no JSON object"),
        ("hello", "no JSON object"),
        ('{"probe_format": 1, "probe_version": "1.0', "truncated"),
        ("[1, 2]", "no JSON object"),
        ('{"a": 1}\n{"b": 2}', "2 JSON lines"),
        ('{"probe_format": 2, "probe_version": "9", "sections": {}}', "probe_format 2"),
        ('{"probe_format": 1, "sections": {}}', "lacks probe_version"),
        ('{"probe_format": 1, "probe_version": "1", "sections": []}', "lacks probe_version"),
        ("{" * 100000, "not valid JSON"),
    ],
)
def test_bad_captures_are_clear_errors(text: str, message: str):
    with pytest.raises(CaptureError, match=message):
        parse_probe_output(text, source="capture.json")


def test_truncation_is_never_repaired():
    whole = outputs.line(outputs.sealed())
    for cut in (len(whole) // 2, len(whole) - 1):
        with pytest.raises(CaptureError):
            parse_probe_output(whole[:cut])


def test_escape_sequences_and_bidi_overrides_are_neutralised():
    hostile = "\x1b[2J\x1b]0;pwned\x07evil\u202etxt.exe\x00"
    cleaned = clean_text(hostile)
    assert "\x1b" not in cleaned and "\u202e" not in cleaned and "\x00" not in cleaned
    assert "evil" in cleaned


def test_sizes_are_bounded():
    assert len(clean_text("x" * 10_000)) <= 300
    assert len(clean_tree(list(range(10_000)))) == 2000
    deep: object = "leaf"
    for _ in range(50):
        deep = [deep]
    flattened = json.dumps(clean_tree(deep))
    assert "nested too deep" in flattened


def test_a_section_that_is_not_an_object_reads_failed():
    out = outputs.sealed()
    out["sections"]["network"] = "sealed, trust me"
    assert not parse_probe_output(outputs.line(out)).sections["network"].ok
