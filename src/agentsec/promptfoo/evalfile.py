"""Reading a promptfoo eval output (`promptfoo eval -o out.json`), the parts `combine` needs.

The file is someone else's output, written after a model answered attackers: it is read like a
probe output, cleaned at untrusted.py, size-capped, and refused in one line when it is not an
eval. In a red-team eval a row with ``success: false`` is an attack that worked.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from agentsec.errors import AgentsecError
from agentsec.untrusted import MAX_CAPTURE_BYTES, clean_tree, json_problem

_DIRECT = re.compile(r"^owasp:agentic:asi(\d{2})$", re.IGNORECASE)
MAX_EVAL_BYTES = 8 * MAX_CAPTURE_BYTES


class PromptfooError(AgentsecError):
    """A promptfoo eval output that cannot be read."""


@dataclass(frozen=True)
class Row:
    description: str
    plugin_id: str | None
    success: bool
    reason: str
    named_scores: dict[str, Any]


@dataclass(frozen=True)
class Eval:
    eval_id: str | None
    rows: tuple[Row, ...]

    @property
    def failures(self) -> tuple[Row, ...]:
        return tuple(row for row in self.rows if not row.success)


@cache
def plugin_map() -> dict[str, Any]:
    text = resources.files("agentsec.data").joinpath("promptfoo_plugin_asi.json").read_text()
    return json.loads(text)


def categories(plugin_id: str | None) -> tuple[str, ...]:
    """The OWASP agentic categories a promptfoo plugin tests: from an identifier such as
    owasp:agentic:asi05 directly, else from promptfoo's published mapping."""
    if not plugin_id:
        return ()
    direct = _DIRECT.match(plugin_id)
    if direct:
        return (f"ASI{direct.group(1)}",)
    return tuple(plugin_map()["plugins"].get(plugin_id, ()))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _row(raw: Any) -> Row:
    if not isinstance(raw, dict):
        raise PromptfooError("a result row is not an object")
    case = _object(raw.get("testCase"))
    meta = _object(case.get("metadata")) or _object(raw.get("metadata"))
    grading = _object(raw.get("gradingResult"))
    if not isinstance(raw.get("success"), bool):
        raise PromptfooError("a result row has no success field: not a promptfoo eval row")
    scores = _object(raw.get("namedScores"))
    return Row(
        description=_text(case.get("description")) or _text(raw.get("description")),
        plugin_id=_text(meta.get("pluginId")) or None,
        success=raw["success"],
        reason=_text(grading.get("reason")),
        named_scores=scores,
    )


def load_eval(path: Path) -> Eval:
    try:
        if path.stat().st_size > MAX_EVAL_BYTES:
            raise PromptfooError(f"{path} is larger than {MAX_EVAL_BYTES} bytes")
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise PromptfooError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise PromptfooError(
            f"{path} is not valid JSON ({json_problem(exc)}): not a promptfoo eval output"
        ) from exc
    except RecursionError as exc:
        raise PromptfooError(f"{path} is nested too deeply") from exc
    doc = clean_tree(doc, max_depth=16)
    results = doc.get("results") if isinstance(doc, dict) else None
    rows = results.get("results") if isinstance(results, dict) else None
    if not isinstance(rows, list):
        raise PromptfooError(f"{path} has no results.results list: not a promptfoo eval output")
    return Eval(eval_id=_text(doc.get("evalId")) or None, rows=tuple(_row(r) for r in rows))
