"""CI gates over reports: the budget (``--max-score``), the baseline (``--baseline``, ``diff``)
and the previous run (``--fail-on-regression``), decided in one place (``decide``).

A baseline gate fails on anything worse than an accepted report: a new finding, a finding whose
severity rose, a finding whose evidence widened (one more reachable host, writable path, readable
credential), or an axis that was measured before and is not now. Fixed findings pass with a hint
to record a new baseline. Two reports made by different probe versions, or one redacted and one
not, cannot be compared honestly: that fails with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentsec import kinds
from agentsec.catalogue import SEVERITY_ORDER
from agentsec.reportfile import load_report_of
from agentsec.results import GateCheck


@dataclass(frozen=True)
class Change:
    finding_id: str
    what: str


@dataclass
class GateResult:
    incompatible: list[str] = field(default_factory=list)
    # What failed, in a few words, when the kind of report has a short way of saying it.
    summary: str = ""
    new: list[Change] = field(default_factory=list)
    worse: list[Change] = field(default_factory=list)
    widened: list[Change] = field(default_factory=list)
    unmeasured: list[Change] = field(default_factory=list)
    fixed: list[Change] = field(default_factory=list)
    noted: list[Change] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.incompatible or self.new or self.worse or self.widened or self.unmeasured)


def _findings(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["id"]: f for f in report["summary"]["findings"]}


def _rank(severity: str) -> int:
    return SEVERITY_ORDER.index(severity) if severity in SEVERITY_ORDER else len(SEVERITY_ORDER)


def _compatibility(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    problems = []
    old_probe, new_probe = old.get("probe", {}).get("version"), new.get("probe", {}).get("version")
    if old_probe != new_probe:
        problems.append(
            f"probe versions differ ({old_probe} vs {new_probe}): a newer probe checks more, "
            "so an unchanged sandbox can gain findings; record a new baseline with this probe"
        )
    if bool(old.get("redacted")) != bool(new.get("redacted")):
        problems.append(
            "one report is redacted and the other is not: evidence cannot be compared; "
            "record the baseline with the same --redact setting"
        )
    return problems


def _axis_regressions(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    changes = []
    for axis_id, axis in new["summary"]["axes"].items():
        before = old["summary"]["axes"].get(axis_id, {}).get("state")
        if axis.get("state") == "not_measured" and before not in (None, "not_measured"):
            changes.append(Change(axis_id, f"{axis_id} was {before}, now not measured"))
    return changes


def compare(old: dict[str, Any], new: dict[str, Any]) -> GateResult:
    """Everything in which ``new`` is worse than the accepted ``old``, of the same kind."""
    if kinds.kind(old) != kinds.kind(new):
        return GateResult(incompatible=[
            f"the baseline is {kinds.NOUNS[kinds.kind(old)]} and this is "
            f"{kinds.NOUNS[kinds.kind(new)]}: only reports of one kind compare"])
    if kinds.is_integrity(new):
        from agentsec.integrity.baseline import compare as integrity_compare

        return integrity_compare(old, new)
    result = GateResult(incompatible=_compatibility(old, new))
    before, after = _findings(old), _findings(new)
    for fid, finding in after.items():
        if fid not in before:
            change = Change(fid, f"new: {finding.get('title', '')} ({finding['severity']})")
            if finding.get("points", 0) == 0 and finding["severity"] == "info":
                result.noted.append(change)
            else:
                result.new.append(change)
            continue
        previous = before[fid]
        if _rank(finding["severity"]) < _rank(previous["severity"]):
            result.worse.append(
                Change(fid, f"severity rose: {previous['severity']} -> {finding['severity']}")
            )
        added = sorted(set(finding["evidence"]) - set(previous["evidence"]))
        if added:
            result.widened.append(Change(fid, "evidence widened: " + ", ".join(added)))
    for fid, finding in before.items():
        if fid not in after:
            result.fixed.append(Change(fid, f"fixed: {finding.get('title', '')}"))
    result.unmeasured = _axis_regressions(old, new)
    return result


def render_gate(result: GateResult) -> str:
    lines = []
    for problem in result.incompatible:
        lines.append(f"FAIL  cannot compare: {problem}")
    for group, word in (
        (result.new, "FAIL"),
        (result.worse, "FAIL"),
        (result.widened, "FAIL"),
        (result.unmeasured, "FAIL"),
        (result.fixed, "fixed"),
        (result.noted, "note"),
    ):
        lines += [f"{word:5} {c.finding_id}: {c.what}" for c in group]
    if result.fixed and not result.failed:
        lines.append("hint: findings were fixed; record a new baseline so the gate keeps the gain")
    if not lines:
        lines.append("no change against the baseline")
    return "\n".join(lines)


@dataclass(frozen=True)
class Gates:
    """What a run is held to: a score budget, an accepted baseline, no regression against the
    previous run of its label. Built before the run, so a bad baseline fails before anything
    runs."""

    max_score: int | None = None
    baseline: Path | None = None
    baseline_report: dict[str, Any] | None = None
    fail_on_regression: bool = False

    @classmethod
    def load(
        cls,
        max_score: int | None = None,
        baseline: Path | None = None,
        fail_on_regression: bool = False,
        kind: str = kinds.TEST_BLAST_RADIUS,
    ) -> Gates:
        """The gates, the baseline read and checked now: a report of ``kind``, or refused."""
        report = load_report_of(baseline, kind) if baseline is not None else None
        return cls(max_score, baseline, report, fail_on_regression)


@dataclass(frozen=True)
class Verdict:
    """Every gate applied to one run, and the baseline comparison to show line by line."""

    checks: tuple[GateCheck, ...] = ()
    baseline: GateResult | None = None

    @property
    def failed(self) -> bool:
        return any(not check.passed for check in self.checks)

    def failures(self) -> str:
        return "; ".join(check.detail for check in self.checks if not check.passed)


def decide(
    report: dict[str, Any], gates: Gates, regression: tuple[str, ...] | None = None
) -> Verdict:
    """The one gate decision. ``regression``: why this run is worse than the previous run of
    its label (empty when it is not), or None when the run was not recorded in a history."""
    checks: list[GateCheck] = []
    score = report["summary"]["score"]
    if gates.max_score is not None:
        checks.append(
            GateCheck(
                "max-score",
                score <= gates.max_score,
                f"score {score}, budget --max-score {gates.max_score}",
            )
        )
    compared = None
    if gates.baseline_report is not None:
        compared = compare(gates.baseline_report, report)
        where = gates.baseline
        detail = f"worse than the baseline {where}" if compared.failed else f"{where}: ok"
        if compared.failed and compared.summary:
            detail += f": {compared.summary}"
        checks.append(GateCheck("baseline", not compared.failed, detail))
    if gates.fail_on_regression and regression is not None:
        detail = "; ".join(regression) or "not worse than the previous run"
        checks.append(GateCheck("regression", not regression, detail))
    return Verdict(tuple(checks), compared)
