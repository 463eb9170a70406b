"""What every output format is rendered from: the reports of a run and the gates applied to it.

Plain, frozen data: formatters are pure functions of a ``Results``; the CLI decides where their
text goes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DOCUMENT_VERSION = 1


@dataclass(frozen=True)
class GateCheck:
    """One CI gate and its outcome: ``max-score``, ``baseline`` or ``regression``."""

    name: str
    passed: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass(frozen=True)
class Results:
    reports: tuple[dict[str, Any], ...]
    gates: tuple[GateCheck, ...] = field(default=())
    # Where each report was saved, by label: SARIF points its results at these files.
    report_paths: tuple[tuple[str, str], ...] = field(default=())

    @property
    def failed(self) -> bool:
        return any(not gate.passed for gate in self.gates)

    def path_of(self, label: str) -> str | None:
        return dict(self.report_paths).get(label)


def document(kind: str, **body: Any) -> dict[str, Any]:
    """A versioned JSON document, the shape of every ``--json`` output of agentsec."""
    return {"tool": "agentsec", "kind": kind, "schema_version": DOCUMENT_VERSION, **body}
