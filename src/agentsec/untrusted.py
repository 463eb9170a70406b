"""The one entry point for text that comes from inside a sandbox.

A probe's output is written by the thing being measured, so it is hostile until cleaned: escape
sequences that would repaint a terminal, bidi overrides that would disguise a path in a report,
megabytes of padding, nesting deep enough to blow the stack. Everything a report, terminal or
HTML page shows passes through ``clean_tree`` here first, and only here.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentsec.errors import CaptureError

MAX_TEXT = 300
MAX_ITEMS = 2000
MAX_DEPTH = 8
MAX_CAPTURE_BYTES = 8 * 1024 * 1024
SUPPORTED_PROBE_FORMAT = 1

# C0/C1 controls (tab kept as a space), DEL, and the Unicode bidi/zero-width format characters.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")


def clean_text(value: str, limit: int = MAX_TEXT) -> str:
    text = _UNSAFE.sub("?", _ANSI.sub("", value))
    if len(text) > limit:
        return text[: limit - 1] + "…"
    return text


def json_problem(exc: ValueError) -> str:
    """What is wrong with a text json.loads refused, in words fit for one line."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at character {exc.pos}"
    if "digits" in str(exc):  # the interpreter's cap on int(str) against quadratic parsing
        return "an integer thousands of digits long"
    return clean_text(str(exc), 120)


def clean_tree(value: Any, depth: int = 0, max_depth: int = MAX_DEPTH) -> Any:
    """A copy of a decoded JSON value with every string cleaned and every size bounded."""
    if depth > max_depth:
        return "[nested too deep]"
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list):
        return [clean_tree(v, depth + 1, max_depth) for v in value[:MAX_ITEMS]]
    if isinstance(value, dict):
        items = list(value.items())[:MAX_ITEMS]
        return {clean_text(str(k), 80): clean_tree(v, depth + 1, max_depth) for k, v in items}
    return clean_text(repr(value))


# A saved report nests the probe's own output (itself up to MAX_DEPTH) a few levels down.
REPORT_DEPTH = MAX_DEPTH + 4


def clean_report(report: dict[str, Any]) -> dict[str, Any]:
    """A saved report read back from disk, a history or a CI artifact, cleaned like a probe
    output: whoever wrote the file, nothing in it reaches a terminal or a page unescaped."""
    cleaned = clean_tree(report, max_depth=REPORT_DEPTH)
    return cleaned if isinstance(cleaned, dict) else {}


@dataclass(frozen=True)
class SectionResult:
    ok: bool
    data: dict[str, Any]
    error: str | None = None
    timed_out: bool = False


@dataclass(frozen=True)
class ProbeOutput:
    """A probe's output, cleaned. ``raw`` is the whole cleaned object, kept in reports."""

    version: str
    raw: dict[str, Any]
    sections: dict[str, SectionResult] = field(default_factory=dict)
    ignored_lines: int = 0

    @property
    def context(self) -> dict[str, Any]:
        ctx = self.raw.get("context")
        return ctx if isinstance(ctx, dict) else {}

    @property
    def targets_overridden(self) -> bool:
        targets = self.raw.get("targets")
        return isinstance(targets, dict) and targets.get("overridden") is True

    @property
    def faults_injected(self) -> list[str]:
        faults = self.raw.get("faults_injected")
        return [f for f in faults if isinstance(f, str)] if isinstance(faults, list) else []


def _section_from(raw: Any) -> SectionResult:
    if not isinstance(raw, dict):
        return SectionResult(ok=False, data={}, error="section is not an object")
    if raw.get("ok") is True and isinstance(raw.get("data"), dict):
        return SectionResult(ok=True, data=raw["data"])
    error = raw.get("error") if isinstance(raw.get("error"), str) else "section reported no data"
    return SectionResult(ok=False, data={}, error=error, timed_out=raw.get("timed_out") is True)


def _json_candidates(text: str) -> tuple[list[str], int]:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    candidates = [line for line in lines if line.startswith("{")]
    return candidates, len(lines) - len(candidates)


def parse_probe_output(text: str, source: str = "probe output") -> ProbeOutput:
    """Read one probe output. Anything that is not exactly one whole probe object is an error.

    Lines that are not JSON objects (a shell banner, a stray warning) are skipped and counted;
    the report says how many. A truncated object is never repaired.
    """
    if len(text) > MAX_CAPTURE_BYTES:
        raise CaptureError(f"{source} is larger than {MAX_CAPTURE_BYTES} bytes: not a probe output")
    candidates, ignored = _json_candidates(text)
    if not candidates:
        raise CaptureError(f"{source} holds no JSON object: not a probe output")
    if len(candidates) > 1:
        raise CaptureError(f"{source} holds {len(candidates)} JSON lines; expected exactly one")
    try:
        decoded = json.loads(candidates[0])
    except ValueError as exc:
        hint = "; it does not end with '}' (truncated?)" if not candidates[0].endswith("}") else ""
        raise CaptureError(f"{source} is not valid JSON: {json_problem(exc)}{hint}") from exc
    except RecursionError as exc:
        raise CaptureError(f"{source} is nested too deeply to be a probe output") from exc
    if not isinstance(decoded, dict):
        raise CaptureError(f"{source} is JSON but not an object: not a probe output")
    fmt = decoded.get("probe_format")
    if fmt != SUPPORTED_PROBE_FORMAT:
        raise CaptureError(
            f"{source} has probe_format {fmt!r}; "
            f"this agentsec reads format {SUPPORTED_PROBE_FORMAT}"
        )
    if not isinstance(decoded.get("probe_version"), str) or not isinstance(
        decoded.get("sections"), dict
    ):
        raise CaptureError(f"{source} lacks probe_version or sections: not a probe output")
    raw = clean_tree(decoded)
    sections = {name: _section_from(value) for name, value in raw["sections"].items()}
    return ProbeOutput(
        version=raw["probe_version"], raw=raw, sections=sections, ignored_lines=ignored
    )


def read_capped(path: Path, limit: int, error: type[Exception], not_a: str) -> tuple[str, bytes]:
    """(path as shown in messages, at most `limit` + 1 bytes of it): the caller refuses more,
    never having loaded a huge file whole. A directory or an unreadable file raises `error`
    in one line (`not_a`: what the path should have been, e.g. "a probe output")."""
    shown = clean_text(str(path), 200)
    try:
        with path.open("rb") as handle:
            return shown, handle.read(limit + 1)
    except IsADirectoryError:
        raise error(f"{shown} is a directory, not {not_a}") from None
    except OSError as exc:
        raise error(f"cannot read {shown}: {exc.strerror or exc}") from None


def read_capture(path: Path) -> ProbeOutput:
    """A probe output saved to a file, read with the same cap as a live one (a huge file is
    refused after MAX_CAPTURE_BYTES, never loaded whole). Bytes that are not UTF-8 are replaced:
    the probe writes ASCII JSON, and a stray byte in a shell banner must not cost the capture."""
    shown, data = read_capped(path, MAX_CAPTURE_BYTES, CaptureError, "a probe output")
    return parse_probe_output(data.decode("utf-8", errors="replace"), source=shown)
