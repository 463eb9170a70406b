"""The finding catalogue, the axes and the OWASP categories, loaded once from the data files.

The catalogue is data (``data/findings.json``); detection logic lives in ``scoring.detectors``,
keyed by the same IDs. Loading checks the two agree so a finding can never fire without a title,
a weight and a remediation, and no catalogue entry can sit without a detector.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

from agentsec.errors import CatalogueError

Severity = Literal["critical", "high", "medium", "low", "info"]
Kind = Literal["reachable", "refused", "note"]
SEVERITY_ORDER: tuple[Severity, ...] = ("critical", "high", "medium", "low", "info")


@dataclass(frozen=True)
class Remediation:
    flags: tuple[str, ...]
    advice: str


@dataclass(frozen=True)
class FindingSpec:
    id: str
    title: str
    axis: str
    kind: Kind
    severity: Severity | Literal["varies"]
    owasp: tuple[str, ...]
    remediation: Remediation
    # For "varies" findings: severity -> the evidence items that earn it ("*" matches any).
    severity_by: tuple[tuple[Severity, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class AxisSpec:
    id: str
    title: str
    sections: tuple[str, ...]


@dataclass(frozen=True)
class Catalogue:
    points: dict[Severity, int]
    findings: dict[str, FindingSpec]
    axes: tuple[AxisSpec, ...]
    owasp_titles: dict[str, str]
    owasp_source: str

    def finding(self, finding_id: str) -> FindingSpec:
        return self.findings[finding_id]

    def axis(self, axis_id: str) -> AxisSpec:
        for axis in self.axes:
            if axis.id == axis_id:
                return axis
        raise KeyError(axis_id)

    def flag_order(self) -> tuple[str, ...]:
        """Every remediation flag once, in catalogue order: the stable order of recommendations."""
        seen: dict[str, None] = {}
        for spec in self.findings.values():
            for flag in spec.remediation.flags:
                seen.setdefault(flag, None)
        return tuple(seen)


def _read_json(name: str) -> Any:
    text = resources.files("agentsec.data").joinpath(name).read_text(encoding="utf-8")
    return json.loads(text)


def _finding_from(raw: dict[str, Any], axes: set[str], owasp: dict[str, str]) -> FindingSpec:
    fid = raw["id"]
    if raw["axis"] not in axes:
        raise CatalogueError(f"{fid}: unknown axis {raw['axis']!r}")
    unknown = [c for c in raw["owasp"] if c not in owasp]
    if unknown:
        raise CatalogueError(f"{fid}: unknown OWASP categories {unknown}")
    if raw["kind"] not in ("reachable", "refused", "note"):
        raise CatalogueError(f"{fid}: unknown kind {raw['kind']!r}")
    severity_by = tuple((sev, tuple(items)) for sev, items in raw.get("severity_by", {}).items())
    if (raw["severity"] == "varies") != bool(severity_by):
        raise CatalogueError(f"{fid}: 'varies' severity needs severity_by, and only then")
    return FindingSpec(
        id=fid,
        title=raw["title"],
        axis=raw["axis"],
        kind=raw["kind"],
        severity=raw["severity"],
        owasp=tuple(raw["owasp"]),
        remediation=Remediation(
            flags=tuple(raw["remediation"]["flags"]), advice=raw["remediation"]["advice"]
        ),
        severity_by=severity_by,
    )


@cache
def load() -> Catalogue:
    """The shipped catalogue (immutable, so caching it shares no mutable state)."""
    axes_raw = _read_json("axes.json")["axes"]
    owasp_raw = _read_json("owasp_asi_2026.json")
    findings_raw = _read_json("findings.json")
    axes = tuple(AxisSpec(a["id"], a["title"], tuple(a["sections"])) for a in axes_raw)
    axis_ids = {a.id for a in axes}
    owasp = dict(owasp_raw["categories"])
    findings: dict[str, FindingSpec] = {}
    for raw in findings_raw["findings"]:
        spec = _finding_from(raw, axis_ids, owasp)
        if spec.id in findings:
            raise CatalogueError(f"duplicate finding id {spec.id}")
        findings[spec.id] = spec
    points = dict(findings_raw["severity_points"])
    if set(points) != set(SEVERITY_ORDER):
        raise CatalogueError("severity_points must name exactly critical, high, medium, low, info")
    return Catalogue(
        points=points,
        findings=findings,
        axes=axes,
        owasp_titles=owasp,
        owasp_source=owasp_raw["source"],
    )
