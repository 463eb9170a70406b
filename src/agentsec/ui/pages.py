"""What the console shows and does, as plain data: the saved runs, their history, one run.

The page is `agentsec report`'s page (render/html.py, one template), given the console's extra
context: history plots, regressions, and the run form with its token. Every report is read from
disk and cleaned at untrusted.py first; a file that is not a report is listed as skipped, so one
bad file cannot take the console down.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentsec import service
from agentsec.errors import AgentsecError
from agentsec.history import DB_NAME, History, HistoryError, regression_between
from agentsec.launchers import Launch, availability, load_presets
from agentsec.render.history_plot import history_svg
from agentsec.render.html import render_html
from agentsec.report import TEST_BLAST_RADIUS
from agentsec.reportfile import load_report, report_kind
from agentsec.results import document
from agentsec.ui.security import Guard
from agentsec.untrusted import clean_report, clean_text

HISTORY_LIMIT = 50


class ConsoleData:
    def __init__(self, results: Path) -> None:
        self.results = results
        self.history = History(results / DB_NAME)

    def reports(self) -> tuple[list[dict[str, Any]], list[str]]:
        reports: list[dict[str, Any]] = []
        skipped: list[str] = []
        if not self.results.is_dir():
            return reports, skipped
        for path in sorted(self.results.glob("*.json")):
            try:
                if report_kind(path) not in (None, TEST_BLAST_RADIUS):
                    continue
                reports.append(clean_report(load_report(path)))
            except AgentsecError as exc:
                skipped.append(clean_text(f"{path.name}: {exc}"))
        return reports, skipped

    def _history(self) -> tuple[list[dict[str, Any]], dict[str, tuple[str, ...]]]:
        plots: list[dict[str, Any]] = []
        regressions: dict[str, tuple[str, ...]] = {}
        try:
            labels = self.history.labels()
        except HistoryError:
            return plots, regressions
        for label in labels:
            runs = self.history.runs(label, limit=HISTORY_LIMIT)
            regressed = set()
            previous = None
            for run in runs:
                report = self.history.report(run.id)
                if previous is not None:
                    reasons = regression_between(previous, report)
                    if reasons:
                        regressed.add(run.id)
                        if run is runs[-1]:
                            regressions[clean_text(label)] = tuple(clean_text(r) for r in reasons)
                previous = report
            plots.append({"label": clean_text(label), "svg": history_svg(runs, regressed)})
        return plots, regressions

    def page(self, guard: Guard) -> str:
        reports, skipped = self.reports()
        plots, regressions = self._history()
        console = {
            "token": guard.token,
            "runs_allowed": guard.runs_allowed,
            "bind": guard.bind,
            "presets": [p.name for p in load_presets().values()
                        if availability(p).runnable and not p.takes_directory],
            "history": plots,
            "regressions": regressions,
            "skipped": skipped,
        }
        return render_html(reports, title="agentsec console", console=console)

    def runs_document(self) -> dict[str, Any]:
        reports, skipped = self.reports()
        rows = [
            {
                "label": r["label"],
                "score": r["summary"]["score"],
                "score_is_lower_bound": r["summary"].get("score_is_lower_bound", False),
                "axes": {k: a["state"] for k, a in r["summary"]["axes"].items()},
                "generated_at": r["generated_at"],
            }
            for r in reports
        ]
        return document("console-runs", runs=rows, skipped=skipped)

    def history_document(self, label: str | None) -> dict[str, Any]:
        try:
            runs = [run.as_dict() for run in self.history.runs(label, limit=HISTORY_LIMIT)]
        except HistoryError:
            runs = []
        return document("history", label=label, runs=runs)

    def run(self, launch: Launch, label: str) -> dict[str, Any]:
        """Measure, score, save and record one run: the CLI's pipeline, nothing more."""
        plan = service.Plan(label, self.results, history=self.history.path)
        measured = service.measure(launch, plan)
        if measured.history_error is not None:
            raise measured.history_error
        saved, regression = measured.saved, measured.regression
        report = saved.report
        return document(
            "run",
            report=report,
            files={"json": str(saved.json_path), "markdown": str(saved.markdown_path)},
            regression=None
            if regression is None
            else {"regressed": regression.regressed, "reasons": list(regression.reasons)},
        )
