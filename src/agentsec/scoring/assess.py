"""Findings, axis states and the score, from a probe output.

The score is the sum of the findings' fixed points (critical 25, high 15, medium 8, low 3,
info 0), capped at 100; ``raw_score`` keeps the uncapped sum so two runs that both hit 100 can
still be ranked. Anyone can recompute it by hand from the finding list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agentsec.catalogue import SEVERITY_ORDER, Catalogue, FindingSpec, Severity
from agentsec.errors import CatalogueError
from agentsec.scoring.detectors import CannotTell, DetectorRegistry, Facts, Hit, build_registry
from agentsec.untrusted import ProbeOutput

AxisState = Literal["sealed", "refused", "reachable", "not_measured"]
MAX_SCORE = 100


@dataclass(frozen=True)
class Finding:
    id: str
    title: str
    axis: str
    kind: str
    severity: Severity
    points: int
    evidence: tuple[str, ...]
    detail: tuple[str, ...]
    owasp: tuple[str, ...]
    flags: tuple[str, ...]
    advice: str


@dataclass(frozen=True)
class AxisResult:
    id: str
    title: str
    state: AxisState
    severity: Severity | None  # the worst reachable finding's, when state is "reachable"
    not_measured: tuple[str, ...] = ()  # why parts of this axis could not be measured


@dataclass(frozen=True)
class Assessment:
    findings: tuple[Finding, ...]
    axes: tuple[AxisResult, ...]
    score: int
    raw_score: int
    recommended_flags: tuple[str, ...]

    @property
    def score_is_lower_bound(self) -> bool:
        return any(axis.state == "not_measured" or axis.not_measured for axis in self.axes)

    def by_severity(self) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(SEVERITY_ORDER, 0)
        for finding in self.findings:
            counts[finding.severity] += 1
        return counts


def _worst(severities: list[Severity]) -> Severity | None:
    for severity in SEVERITY_ORDER:
        if severity in severities:
            return severity
    return None


def _severity_of(spec: FindingSpec, hit: Hit) -> Severity:
    if spec.severity == "varies":
        earned: list[Severity] = []
        for level, items in spec.severity_by:
            if "*" in items or any(key in items for key in hit.severity_keys):
                earned.append(level)
        worst = _worst(earned)
        if worst is None:
            raise CatalogueError(f"{spec.id}: no severity matches {hit.severity_keys}")
        severity: Severity = worst
    else:
        severity = spec.severity
    if hit.severity_cap and SEVERITY_ORDER.index(hit.severity_cap) > SEVERITY_ORDER.index(severity):
        return hit.severity_cap
    return severity


def _finding(spec: FindingSpec, hit: Hit, catalogue: Catalogue) -> Finding:
    severity = _severity_of(spec, hit)
    return Finding(
        id=spec.id,
        title=spec.title,
        axis=spec.axis,
        kind=spec.kind,
        severity=severity,
        points=catalogue.points[severity],
        evidence=hit.evidence,
        detail=hit.detail,
        owasp=spec.owasp,
        flags=spec.remediation.flags,
        advice=spec.remediation.advice,
    )


def _axis_state(findings: list[Finding], unmeasured: list[str]) -> AxisState:
    if any(f.kind == "reachable" for f in findings):
        return "reachable"
    if unmeasured:
        return "not_measured"
    if any(f.kind == "refused" for f in findings):
        return "refused"
    return "sealed"


def assess(
    probe: ProbeOutput,
    catalogue: Catalogue,
    registry: DetectorRegistry | None = None,
) -> Assessment:
    registry = registry or build_registry()
    if registry.ids() != set(catalogue.findings):
        missing = sorted(set(catalogue.findings) ^ registry.ids())
        raise CatalogueError(f"catalogue and detectors disagree on {missing}")
    facts = Facts(probe)
    findings: list[Finding] = []
    unmeasured_by_axis: dict[str, list[str]] = {axis.id: [] for axis in catalogue.axes}
    for entry in registry.entries():
        spec = catalogue.finding(entry.finding_id)
        try:
            hit = entry.detect(facts)
            finding = None if hit is None else _finding(spec, hit, catalogue)
        except CannotTell as why:
            reason = str(why)
        except CatalogueError:
            raise  # the shipped catalogue is wrong: a defect to fix, not a sandbox property
        except Exception as exc:
            # A malformed value the detector did not expect (a list where a port belongs): the
            # finding cannot be decided, so its axis is not measured and the rest is scored.
            reason = (
                f"{entry.finding_id} could not be decided from the probe output "
                f"({type(exc).__name__})"
            )
        else:
            if finding is not None:
                findings.append(finding)
            continue
        if reason not in unmeasured_by_axis[spec.axis]:
            unmeasured_by_axis[spec.axis].append(reason)

    axes = []
    for axis in catalogue.axes:
        mine = [f for f in findings if f.axis == axis.id]
        unmeasured = unmeasured_by_axis[axis.id]
        state = _axis_state(mine, unmeasured)
        reachable = [f.severity for f in mine if f.kind == "reachable"]
        axes.append(
            AxisResult(
                id=axis.id,
                title=axis.title,
                state=state,
                severity=_worst(reachable) if state == "reachable" else None,
                not_measured=tuple(unmeasured),
            )
        )

    findings.sort(key=lambda f: (SEVERITY_ORDER.index(f.severity), f.id))
    raw = sum(f.points for f in findings)
    fired_flags = {flag for f in findings if f.points > 0 for flag in f.flags}
    flags = tuple(flag for flag in catalogue.flag_order() if flag in fired_flags)
    return Assessment(
        findings=tuple(findings),
        axes=tuple(axes),
        score=min(raw, MAX_SCORE),
        raw_score=raw,
        recommended_flags=flags,
    )
