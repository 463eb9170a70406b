"""The verifier-integrity checks as data (``data/integrity_checks.json``), loaded once.

Severity points are not part of this file: they come from the finding catalogue
(``agentsec.catalogue``), so a high finding weighs the same here as in a blast-radius report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from agentsec import catalogue as findings_catalogue
from agentsec.catalogue import SEVERITY_ORDER, Severity
from agentsec.errors import CatalogueError

CATALOGUE_FILE = "integrity_checks.json"


@dataclass(frozen=True)
class CheckSpec:
    id: str
    title: str
    severity: Severity
    description: str
    remediation: str


@dataclass(frozen=True)
class IntegrityCatalogue:
    checks: dict[str, CheckSpec]
    points: dict[Severity, int]

    def check(self, check_id: str) -> CheckSpec:
        return self.checks[check_id]

    def points_of(self, check_id: str) -> int:
        return self.points[self.checks[check_id].severity]


def _spec(raw: dict[str, Any]) -> CheckSpec:
    try:
        spec = CheckSpec(
            id=str(raw["id"]),
            title=str(raw["title"]),
            severity=raw["severity"],
            description=str(raw["description"]),
            remediation=str(raw["remediation"]),
        )
    except KeyError as exc:
        raise CatalogueError(f"{CATALOGUE_FILE}: a check lacks {exc.args[0]!r}") from None
    if spec.severity not in SEVERITY_ORDER:
        raise CatalogueError(f"{spec.id}: unknown severity {spec.severity!r}")
    return spec


@cache
def load() -> IntegrityCatalogue:
    """The shipped catalogue (immutable, so caching it shares no mutable state)."""
    text = resources.files("agentsec.data").joinpath(CATALOGUE_FILE).read_text(encoding="utf-8")
    checks: dict[str, CheckSpec] = {}
    for raw in json.loads(text)["checks"]:
        spec = _spec(raw)
        if spec.id in checks:
            raise CatalogueError(f"duplicate integrity check id {spec.id}")
        checks[spec.id] = spec
    return IntegrityCatalogue(checks=checks, points=findings_catalogue.load().points)
