"""Every output format, rendered over every member of the enum; SARIF validated against the
OASIS SARIF 2.1.0 schema; JUnit and the job summary read back as their readers would."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from agentsec.formats import Format, render
from agentsec.render.markdown import md
from agentsec.results import GateCheck, Results
from tests.agentsec import outputs
from tests.agentsec.reports import agentsec, leaky, report, sample_set, save_all

SARIF_SCHEMA = Path(__file__).parents[1] / "data" / "sarif-schema-2.1.0.json"
HOSTILE = 'evil<script>alert(1)</script>&"\x1b[31m'


def _results(gates: tuple[GateCheck, ...] = ()) -> Results:
    return Results(tuple(sample_set()), gates)


def _check_parses(fmt: Format, text: str) -> None:
    if fmt in (Format.JSON, Format.SARIF):
        json.loads(text)
    elif fmt in (Format.JUNIT, Format.CHART_SVG):
        ET.fromstring(text.encode())
    elif fmt is Format.HTML:
        assert text.startswith("<!doctype html>")
    else:
        assert fmt in (Format.MARKDOWN, Format.SUMMARY, Format.CHART_MD), fmt
        assert "|" in text


@pytest.mark.parametrize("fmt", list(Format))
def test_every_format_renders_every_run(fmt: Format):
    text = render(fmt, _results((GateCheck("max-score", False, "score 18, budget 10"),)))
    _check_parses(fmt, text)
    markdown = fmt in (Format.MARKDOWN, Format.SUMMARY, Format.CHART_MD)
    for r in sample_set():
        label = md(r["label"]) if markdown else r["label"]
        assert label in text, (fmt, label)


@pytest.mark.parametrize("fmt", list(Format))
def test_every_format_escapes_hostile_labels(fmt: Format):
    results = Results((report(outputs.sealed(), HOSTILE),))
    text = render(fmt, results)
    _check_parses(fmt, text)
    assert "<script>" not in text or fmt in (Format.JSON, Format.SARIF)
    assert "\x1b" not in text  # cleaned at the door (untrusted.py) before any format


@pytest.mark.parametrize("fmt", list(Format))
def test_every_format_renders_through_the_cli(fmt: Format, tmp_path: Path):
    save_all(tmp_path / "r", sample_set())
    out = tmp_path / f"out.{fmt.value}"
    proc = agentsec("report", str(tmp_path / "r"), "--format", fmt.value, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    _check_parses(fmt, out.read_text())


def _sarif_validator() -> jsonschema.Draft4Validator:
    schema = json.loads(SARIF_SCHEMA.read_text())
    assert schema["title"].startswith("Static Analysis Results Format (SARIF) Version 2.1.0")
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())


def test_sarif_is_valid_sarif_2_1_0():
    doc = json.loads(render(Format.SARIF, _results()))
    _sarif_validator().validate(doc)
    assert doc["version"] == "2.1.0"


def test_the_schema_check_can_fail():
    doc = json.loads(render(Format.SARIF, _results()))
    doc["runs"][0]["results"][0]["level"] = "catastrophic"
    with pytest.raises(jsonschema.ValidationError):
        _sarif_validator().validate(doc)


def test_sarif_meets_github_code_scanning_rules():
    doc = json.loads(render(Format.SARIF, _results()))
    ids = [run["automationDetails"]["id"] for run in doc["runs"]]
    assert len(set(ids)) == len(ids)  # one category per run, or GitHub merges them
    leaky_run = next(r for r in doc["runs"] if r["properties"]["score"] > 0)
    rules = {rule["id"]: rule for rule in leaky_run["tool"]["driver"]["rules"]}
    for result in leaky_run["results"]:
        assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        assert result["partialFingerprints"]["agentsecFinding/v1"]
        rule = rules[result["ruleId"]]
        assert leaky_run["tool"]["driver"]["rules"][result["ruleIndex"]] is not None
        if result["level"] == "error":
            assert float(rule["properties"]["security-severity"]) >= 7.0


def test_junit_fails_reachable_axes_and_errors_unmeasured_ones():
    gates = (GateCheck("max-score", False, "score 18, budget 10"),)
    root = ET.fromstring(render(Format.JUNIT, Results((report(leaky(), "leaky"),
                                                        report(outputs.failed("network"), "nm"),
                                                        ), gates)))
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    leaky_suite, nm_suite = suites["agentsec leaky"], suites["agentsec nm"]
    failed = {c.get("name") for c in leaky_suite.findall("testcase")
              if c.find("failure") is not None}
    assert {"axis privilege", "axis secrets"} <= failed
    assert "axis network" not in failed
    errors = {c.get("name") for c in nm_suite.findall("testcase") if c.find("error") is not None}
    assert errors == {"axis network"}
    assert any(c.get("name") == "gate max-score" and c.find("failure") is not None
               for c in nm_suite.findall("testcase"))
    assert int(root.get("failures")) == sum(int(s.get("failures")) for s in suites.values())


def test_job_summary_puts_axes_before_score_and_lists_gates():
    text = render(Format.SUMMARY, Results((report(leaky(), "leaky"),),
                                          (GateCheck("max-score", False, "score 46"),)))
    assert text.index("Privilege") < text.index("Score:") < text.index("max-score")
    assert "❌ failed" in text


def test_measuring_command_writes_sarif_junit_and_appends_the_summary(tmp_path: Path):
    capture = tmp_path / "capture.json"
    capture.write_text(outputs.line(leaky()))
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    args = ["--sarif", str(tmp_path / "a.sarif"), "--junit", str(tmp_path / "a.xml"),
            "--job-summary", str(summary), "--out", str(tmp_path / "r"), "--max-score", "10"]
    proc = agentsec("score", str(capture), "--label", "ci", "--how", "h", *args)
    assert proc.returncode == 2, proc.stderr  # the gate failed, and every file is still written
    _sarif_validator().validate(json.loads((tmp_path / "a.sarif").read_text()))
    root = ET.fromstring((tmp_path / "a.xml").read_bytes())
    assert any(c.get("name") == "gate max-score" for c in root.iter("testcase"))
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "agentsec: ci" in text and "❌ failed" in text
    sarif = json.loads((tmp_path / "a.sarif").read_text())
    uri = sarif["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert uri["uri"].endswith("r/ci.json")
