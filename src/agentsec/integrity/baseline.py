"""What a verifier-integrity report finds beyond an accepted one (``--baseline``, ``agentsec
diff``, the history's regression check): ``gate.compare`` hands two such reports here.

A repository may live with a finding it has looked at (a test deleted on purpose, a sandbox that
binds the project writable): the baseline is the report of that accepted run, and a finding it
does not hold fails, matched by check, file and evidence (line numbers move; those do not).
Findings that weigh nothing (a file that could not be analysed) are noted, not failed; findings
the baseline holds and this run does not are fixed.
"""

from __future__ import annotations

import hashlib
from typing import Any

from agentsec.gate import Change, GateResult


def fingerprint(finding: dict[str, Any]) -> str:
    """Stable across runs of the same change, and across line moves: check, file, evidence."""
    key = "\0".join((finding["id"], finding["path"], finding["evidence"]))
    return hashlib.sha256(key.encode()).hexdigest()


def _where(finding: dict[str, Any]) -> str:
    return f"{finding['path']}: {finding['evidence']}"


def compare(old: dict[str, Any], new: dict[str, Any]) -> GateResult:
    accepted = {fingerprint(f) for f in old["findings"]}
    now = {fingerprint(f) for f in new["findings"]}
    result = GateResult()
    for finding in new["findings"]:
        if fingerprint(finding) in accepted:
            continue
        change = Change(finding["id"], f"new: {finding['title']} ({finding['severity']}) at "
                                       f"{_where(finding)}")
        (result.noted if finding["points"] == 0 else result.new).append(change)
    result.fixed = [Change(f["id"], f"fixed: {f['title']} at {_where(f)}")
                    for f in old["findings"] if fingerprint(f) not in now]
    if new["summary"]["findings_omitted"]:
        result.incompatible.append(
            f"{new['summary']['findings_omitted']} findings of this run are counted and not "
            "listed: they cannot be matched against the baseline")
    if result.new:
        ids = ", ".join(sorted({c.finding_id for c in result.new}))
        noun = "finding" if len(result.new) == 1 else "findings"
        result.summary = f"{len(result.new)} {noun} the baseline does not hold ({ids})"
    return result
