"""``agentsec assert``: can the sandbox read, write or see these exact paths? Pass or fail each.

The answer separates ``absent`` (the sandbox does not have the path: stays true when someone
adds a rule later) from ``present, denied`` (the path is there and a rule refuses it: true only
while that rule holds). An expectation the probe could not test fails: "could not tell" is never
read as "denied".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from agentsec.untrusted import ProbeOutput

Expectation = Literal[
    "readable", "not-readable", "writable", "not-writable", "exists", "not-exists"
]
EXPECTATIONS: tuple[Expectation, ...] = (
    "readable",
    "not-readable",
    "writable",
    "not-writable",
    "exists",
    "not-exists",
)
Verdict = Literal["pass", "fail", "untested"]
PATHS_ENV = "AGENTSEC_PROBE_PATHS"


@dataclass(frozen=True)
class PathCheck:
    path: str
    expectation: Expectation
    verdict: Verdict
    observed: str

    @property
    def failed(self) -> bool:
        return self.verdict != "pass"


def probe_env(expectations: list[tuple[Expectation, str]]) -> dict[str, str]:
    paths = list(dict.fromkeys(path for _, path in expectations))
    # Only the paths section runs: asking about files never touches the network.
    return {PATHS_ENV: json.dumps(paths), "AGENTSEC_PROBE_ONLY": "paths"}


def describe_entry(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "not reported by the probe"
    if entry.get("exists") is False:
        return "absent"
    if entry.get("exists") is None:
        return "could not tell whether it exists (a parent directory refused)"
    access = []
    for key in ("readable", "writable"):
        value = entry.get(key)
        word = key if value is True else f"not {key}" if value is False else f"{key}: unknown"
        access.append(word)
    denied = entry.get("readable") is False and entry.get("writable") is False
    return "present, denied" if denied else "present, " + ", ".join(access)


def _verdict(expectation: Expectation, entry: dict[str, Any] | None) -> Verdict:
    if entry is None:
        return "untested"
    key, wanted = {
        "readable": ("readable", True),
        "not-readable": ("readable", False),
        "writable": ("writable", True),
        "not-writable": ("writable", False),
        "exists": ("exists", True),
        "not-exists": ("exists", False),
    }[expectation]
    value = entry.get(key)
    if value is None:
        return "untested"
    return "pass" if value is wanted else "fail"


def check(probe: ProbeOutput, expectations: list[tuple[Expectation, str]]) -> list[PathCheck]:
    section = probe.sections.get("paths")
    entries: dict[str, dict[str, Any]] = {}
    if section is not None and section.ok:
        for entry in section.data.get("entries", []):
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                entries[entry["path"]] = entry
    results = []
    for expectation, path in expectations:
        entry = entries.get(path)
        observed = describe_entry(entry)
        if section is not None and not section.ok:
            observed = f"not measured: {section.error}"
        results.append(PathCheck(path, expectation, _verdict(expectation, entry), observed))
    return results
