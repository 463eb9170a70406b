"""Every run, recorded in an embedded SQLite database next to the reports.

``agentsec history`` reads it back (score and axis states over time), the console plots it, and a
run that is worse than the previous run of the same label is a regression, found with the same
comparison as ``--baseline`` (new finding, higher severity, wider evidence, an axis lost to "not
measured") or a higher score, and usable as a CI gate.

Writes are one transaction each, so a crash or a full disk leaves the previous runs intact; a
file that is not our database is refused and left untouched, never "repaired".
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentsec import gate, kinds
from agentsec.errors import AgentsecError, ReportError
from agentsec.reportfile import check_report, parse_json
from agentsec.scoring.assess import MAX_SCORE

DB_NAME = "history.sqlite"
# 2 added the kind of report each run is (``test``); a history of schema 1 (every run a
# blast-radius report) is read as it is, and gains the column when a run is next recorded.
SCHEMA_VERSION = 2
BUSY_TIMEOUT_S = 10
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    label         TEXT NOT NULL,
    generated_at  TEXT NOT NULL,
    recorded_at   TEXT NOT NULL,
    score         INTEGER NOT NULL,
    raw_score     INTEGER NOT NULL,
    lower_bound   INTEGER NOT NULL,
    probe_version TEXT NOT NULL,
    axes          TEXT NOT NULL,
    findings      TEXT NOT NULL,
    report        TEXT NOT NULL,
    test          TEXT NOT NULL DEFAULT 'sandbox-blast-radius'
);
CREATE INDEX IF NOT EXISTS runs_by_label ON runs (label, id);
"""
_ADD_TEST = "ALTER TABLE runs ADD COLUMN test TEXT NOT NULL DEFAULT 'sandbox-blast-radius'"


class HistoryError(AgentsecError):
    """The history database cannot be opened, read or written."""


@dataclass(frozen=True)
class Run:
    id: int
    label: str
    generated_at: str
    score: int
    raw_score: int
    lower_bound: bool
    probe_version: str
    axes: dict[str, str]  # none for a verifier-integrity run
    findings: list[str]
    test: str = kinds.TEST_BLAST_RADIUS

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "test": self.test,
            "label": self.label,
            "generated_at": self.generated_at,
            "score": self.score,
            "raw_score": self.raw_score,
            "score_is_lower_bound": self.lower_bound,
            "probe_version": self.probe_version,
            "axes": self.axes,
            "findings": self.findings,
        }


@dataclass(frozen=True)
class Regression:
    """How a run compares with the previous run of its label (``previous`` None: the first)."""

    previous: Run | None
    reasons: tuple[str, ...]

    @property
    def regressed(self) -> bool:
        return bool(self.reasons)


def regression_between(old: dict[str, Any], new: dict[str, Any]) -> tuple[str, ...]:
    """Why ``new`` is worse than ``old``: the baseline comparison, plus a higher score."""
    result = gate.compare(old, new)
    reasons = [f"cannot compare: {p}" for p in result.incompatible]
    for group in (result.new, result.worse, result.widened, result.unmeasured):
        reasons += [f"{c.finding_id}: {c.what}" for c in group]
    before, after = old["summary"]["score"], new["summary"]["score"]
    if after > before:
        reasons.insert(0, f"score rose from {before} to {after}")
    return tuple(reasons)


class History:
    """One database file. Each call opens and closes its own connection, so the object holds no
    open handle and can be shared by the console's threads."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def _connect(self, create: bool) -> Iterator[tuple[sqlite3.Connection, int]]:
        """An open connection and the schema version of the database, in one transaction."""
        if not create and not self.path.exists():
            raise HistoryError(f"no history at {self.path}: no run has been recorded there yet")
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
        except (OSError, sqlite3.Error) as exc:
            raise HistoryError(f"cannot open the history {self.path}: {exc}") from exc
        try:
            version = self._check_schema(conn, create)
            with conn:  # one transaction: committed whole or rolled back
                yield conn, version
        except sqlite3.DatabaseError as exc:
            raise HistoryError(
                f"{self.path} is not a readable agentsec history ({exc}); it was left as it is"
            ) from exc
        finally:
            conn.close()

    def _check_schema(self, conn: sqlite3.Connection, create: bool) -> int:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if version == 0 and not tables - {"sqlite_sequence"}:
            if create:
                with conn:
                    conn.executescript(_SCHEMA)
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            return SCHEMA_VERSION
        if version not in (1, SCHEMA_VERSION) or "runs" not in tables:
            raise HistoryError(
                f"{self.path} is not an agentsec history of schema {SCHEMA_VERSION} "
                f"(user_version {version}); it was left as it is"
            )
        if version == 1 and create:  # about to record: the column of the run's kind, added
            with conn:
                conn.execute(_ADD_TEST)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            return SCHEMA_VERSION
        return int(version)

    def record(self, report: dict[str, Any]) -> Regression:
        """Store one run; return how it compares with the previous run of the same label."""
        summary = report["summary"]
        axes = {} if kinds.is_integrity(report) else {
            k: a["state"] for k, a in summary["axes"].items()}
        probe = report["could"]["probe_version"] if "could" in report else None
        probe = report["probe"]["version"] if "probe" in report else probe
        with self._connect(create=True) as (conn, _):
            row = conn.execute(
                "SELECT report, id FROM runs WHERE label = ? ORDER BY id DESC LIMIT 1",
                (report["label"],),
            ).fetchone()
            # Checked before the insert: a damaged history is refused with nothing added.
            previous_report = None if row is None else _report_from(row[0], row[1])
            conn.execute(
                "INSERT INTO runs (label, generated_at, recorded_at, score, raw_score, "
                "lower_bound, probe_version, axes, findings, report, test) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    report["label"],
                    report["generated_at"],
                    datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    summary["score"],
                    summary["raw_score"],
                    int(kinds.lower_bound(report)),
                    str(probe or ""),  # a change alone is measured by no probe
                    json.dumps(axes),
                    json.dumps([f["id"] for f in kinds.findings(report)]),
                    json.dumps(report),
                    kinds.kind(report),
                ),
            )
        if previous_report is None:
            return Regression(previous=None, reasons=())
        previous = self.runs(report["label"], limit=2)
        before = previous[-2] if len(previous) >= 2 else None
        return Regression(before, regression_between(previous_report, report))

    def runs(self, label: str | None = None, limit: int = 200) -> list[Run]:
        """Runs oldest first (the last ``limit`` of them), of one label or of all."""
        args: tuple[Any, ...] = ()
        where = ""
        if label is not None:
            where = " WHERE label = ?"
            args = (label,)
        with self._connect(create=False) as (conn, version):
            kind = "test" if version >= 2 else f"'{kinds.TEST_BLAST_RADIUS}'"
            query = (
                "SELECT id, label, generated_at, score, raw_score, lower_bound, probe_version, "
                f"axes, findings, {kind} FROM runs{where} ORDER BY id DESC LIMIT ?"
            )
            rows = conn.execute(query, (*args, limit)).fetchall()
        return [_run_from(row) for row in reversed(rows)]

    def labels(self) -> list[str]:
        with self._connect(create=False) as (conn, _):
            return [r[0] for r in conn.execute("SELECT DISTINCT label FROM runs ORDER BY label")]

    def report(self, run_id: int) -> dict[str, Any]:
        with self._connect(create=False) as (conn, _):
            row = conn.execute("SELECT report FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise HistoryError(f"no run {run_id} in {self.path}")
        return _report_from(row[0], run_id)


def _report_from(text: Any, which: object) -> dict[str, Any]:
    """A stored report, checked like a report file: a history can be edited by hand too, and
    its reports are what the regression gate compares against."""
    source = f"the stored report of run {which} in the history"
    try:
        if not isinstance(text, str):
            raise ReportError(f"{source} is not text")
        return check_report(parse_json(text, source), source)
    except ReportError as exc:
        raise HistoryError(f"{exc}; the history was left as it is") from None


def _run_from(row: tuple[Any, ...]) -> Run:
    """One row, checked: SQLite keeps whatever a hand edit put in a column, and these values
    reach the terminal and the console's plot."""

    def damaged(column: str) -> HistoryError:
        return HistoryError(f"run {row[0]} in the history is damaged: its {column} column")

    try:
        axes, findings = json.loads(row[7]), json.loads(row[8])
    except (TypeError, ValueError, RecursionError):
        raise damaged("axes or findings") from None
    for column, value, top in (("score", row[3], MAX_SCORE), ("raw_score", row[4], None)):
        if type(value) is not int or value < 0 or (top is not None and value > top):
            raise damaged(column)
    if not all(isinstance(v, str) for v in (row[1], row[2], row[6])):
        raise damaged("label, generated_at or probe_version")
    if row[9] not in kinds.NOUNS:
        raise damaged("test")
    if not isinstance(axes, dict) or not all(isinstance(v, str) for v in axes.values()):
        raise damaged("axes")
    if not isinstance(findings, list) or not all(isinstance(f, str) for f in findings):
        raise damaged("findings")
    return Run(
        id=row[0],
        label=row[1],
        generated_at=row[2],
        score=row[3],
        raw_score=row[4],
        lower_bound=bool(row[5]),
        probe_version=row[6],
        axes=axes,
        findings=findings,
        test=row[9],
    )
