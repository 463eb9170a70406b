"""Reports read back: real reports pass, the schema checker agrees with a full JSON Schema
implementation, and refuses a schema keyword it would not check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agentsec import schema
from agentsec.errors import CatalogueError, ReportError
from agentsec.reportfile import check_report, load_report, parse_json
from tests.agentsec import outputs
from tests.agentsec.reports import leaky, report, sample_set
from tests.agentsec.test_bad_input import FORGED

PROFILES = sorted((Path(__file__).parents[2] / "docs" / "profiles").glob("*.json"))


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_the_published_profiles_load(path: Path):
    assert load_report(path)["tool"] == "agentsec"


def test_every_report_the_scorer_makes_passes(tmp_path: Path):
    for made in sample_set():
        assert check_report(json.loads(json.dumps(made)), "made") == made


def _forgeries() -> list[tuple[str, dict[str, Any]]]:
    base = report(leaky(), "good")
    cases = []
    for name, (change, _) in FORGED.items():
        if isinstance(change, bytes):
            continue  # not a decoded document: refused before any schema
        forged = json.loads(json.dumps(base))
        change(forged)
        cases.append((name, forged))
    return cases


@pytest.mark.parametrize(("name", "forged"), _forgeries(), ids=lambda v: v if isinstance(v, str)
                         else "")
def test_the_schema_checker_agrees_with_jsonschema(name: str, forged: dict[str, Any]):
    full = jsonschema.Draft202012Validator(schema.report_schema())
    try:
        schema.check(forged, schema.report_schema())
        ours = True
    except schema.Violation:
        ours = False
    theirs = full.is_valid(forged)
    if name == "score-float":  # stricter on purpose: 33.0 is an integer to JSON Schema
        assert theirs and not ours
    else:
        assert ours == theirs, name
    with pytest.raises(ReportError):  # what the schema lets by, the reading or the sums catch
        check_report(parse_json(json.dumps(forged), "forged"), "forged")


def test_a_control_report_is_valid_to_both():
    made = json.loads(json.dumps(report(outputs.sealed(), "sealed")))
    schema.check(made, schema.report_schema())
    jsonschema.Draft202012Validator(schema.report_schema()).validate(made)


def test_a_schema_keyword_the_checker_does_not_know_is_refused(monkeypatch):
    original = schema.report_schema()
    schema.report_schema.cache_clear()
    widened = {**original, "properties": {**original["properties"],
                                          "label": {"type": "string", "maxLength": 3}}}
    monkeypatch.setattr(schema.json, "loads", lambda text: widened)
    try:
        with pytest.raises(CatalogueError, match="maxLength at label"):
            schema.report_schema()
    finally:
        monkeypatch.undo()
        schema.report_schema.cache_clear()
    assert schema.report_schema() == original
