"""JUnit XML: one test suite per run, one test case per axis (a sandbox) or per check (a
verifier-integrity run), and per gate.

CI systems read JUnit everywhere, so a run shows up next to the unit tests: an axis the probe
reached, or a check with findings, is a failure; an axis it could not measure, or a file or
path that could not be checked, is an error (never a pass); each gate (budget, baseline,
regression) is a case of its own.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from agentsec import kinds
from agentsec.reportfile import UNMEASURED_CHECKS
from agentsec.results import Results

# XML 1.0 cannot carry most control characters, even escaped.
_NOT_XML = re.compile(r"[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _safe(text: Any) -> str:
    return _NOT_XML.sub("?", str(text))


def _axis_case(suite: ET.Element, label: str, axis_id: str, axis: dict[str, Any], findings):
    case = ET.SubElement(
        suite, "testcase", classname=_safe(f"agentsec.{label}"), name=_safe(f"axis {axis_id}")
    )
    state = axis.get("state")
    mine = [f for f in findings if f.get("category") == axis_id and f.get("points", 0) > 0]
    detail = "\n".join(
        f"{f['id']} {f['severity']}: {f['title']} [{', '.join(f['evidence'])}]" for f in mine
    )
    if state == "reachable":
        element = ET.SubElement(
            case, "failure", type="reachable", message=_safe(f"reachable ({axis.get('severity')})")
        )
        element.text = _safe(detail)
    elif state == "not_measured" or axis.get("not_measured"):
        element = ET.SubElement(case, "error", type="not_measured", message="not measured")
        element.text = _safe("\n".join(axis.get("not_measured") or []))
    elif detail:
        ET.SubElement(case, "system-out").text = _safe(detail)
    return case


def _suite(parent: ET.Element, report: dict[str, Any], gates) -> None:
    summary = report["summary"]
    label = report["label"]
    suite = ET.SubElement(
        parent, "testsuite", name=_safe(f"agentsec {label}"), timestamp=report["generated_at"]
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("score", summary["score"]),
        ("raw_score", summary["raw_score"]),
        ("score_is_lower_bound", str(bool(summary.get("score_is_lower_bound"))).lower()),
        ("probe_version", report["probe"]["version"]),
        ("how", report["target"].get("how", "")),
    ):
        ET.SubElement(props, "property", name=name, value=_safe(value))
    for axis_id, axis in summary["axes"].items():
        _axis_case(suite, label, axis_id, axis, summary["findings"])
    _gate_cases(suite, label, gates)
    _totals(suite)


def _integrity_cases(suite: ET.Element, report: dict[str, Any]) -> None:
    """One case per check the run made: the change's when it checked a change, the sandbox's
    when it measured one. A check with findings that weigh fails; a file not analysed or a path
    the probe could not tell about is an error (never a pass)."""
    from agentsec.integrity import catalogue
    from agentsec.integrity.could import CHECK_IDS

    label = report["label"]
    for check_id, spec in catalogue.load().checks.items():
        if ("could" if check_id in CHECK_IDS else "change") not in report:
            continue
        case = ET.SubElement(suite, "testcase", classname=_safe(f"agentsec.{label}"),
                             name=_safe(f"{check_id} {spec.title}"))
        mine = [f for f in report["findings"] if f["id"] == check_id]
        detail = "\n".join(
            f"{f['path']}{':' + str(f['line']) if f.get('line') else ''}: {f['evidence']}"
            for f in mine)
        if mine and check_id in UNMEASURED_CHECKS:
            element = ET.SubElement(case, "error", type="not_measured",
                                    message=_safe(f"{len(mine)} not checked"))
            element.text = _safe(detail)
        elif mine and any(f["points"] > 0 for f in mine):
            element = ET.SubElement(case, "failure", type="finding", message=_safe(
                f"{len(mine)} found ({spec.severity}, {mine[0]['points']} points each)"))
            element.text = _safe(detail)
        elif mine:
            ET.SubElement(case, "system-out").text = _safe(detail)


def _integrity_suite(parent: ET.Element, report: dict[str, Any], gates) -> None:
    summary = report["summary"]
    suite = ET.SubElement(parent, "testsuite", name=_safe(f"agentsec integrity {report['label']}"),
                          timestamp=report["generated_at"])
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("score", summary["score"]),
        ("raw_score", summary["raw_score"]),
        ("score_is_lower_bound", str(kinds.lower_bound(report)).lower()),
    ):
        ET.SubElement(props, "property", name=name, value=_safe(value))
    _integrity_cases(suite, report)
    _gate_cases(suite, report["label"], gates)
    _totals(suite)


def _gate_cases(suite: ET.Element, label: str, gates) -> None:
    for gate in gates:
        case = ET.SubElement(
            suite, "testcase", classname=_safe(f"agentsec.{label}"), name=f"gate {gate.name}"
        )
        if not gate.passed:
            ET.SubElement(case, "failure", type="gate", message=_safe(gate.detail))
        else:
            ET.SubElement(case, "system-out").text = _safe(gate.detail)


def _totals(suite: ET.Element) -> None:
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    suite.set("skipped", "0")


_SUITES = {kinds.TEST_BLAST_RADIUS: _suite, kinds.TEST_VERIFIER_INTEGRITY: _integrity_suite}


def render_junit(results: Results) -> str:
    root = ET.Element("testsuites", name="agentsec")
    for report in results.reports:
        # Gates belong to the run they judged; with several reports they judge the last.
        gates = results.gates if report is results.reports[-1] else ()
        _SUITES[kinds.kind(report)](root, report, gates)
    for key in ("tests", "failures", "errors"):
        root.set(key, str(sum(int(s.get(key, "0")) for s in root)))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
