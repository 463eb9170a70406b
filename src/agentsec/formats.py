"""Every output format agentsec writes, as one enum, and one pure function from results to text.

Every member has its renderer in ``_RENDERERS`` (checked when the module loads, and by the test
that renders every member); the CLI only decides where the text goes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from enum import Enum

from agentsec import kinds
from agentsec.render.chart import render_chart_markdown, render_chart_svg
from agentsec.render.html import render_html
from agentsec.render.junit import render_junit
from agentsec.render.markdown import render_markdown
from agentsec.render.sarif import render_sarif
from agentsec.render.summary import render_summary
from agentsec.results import Results, document


class Format(str, Enum):  # StrEnum is Python 3.11's: agentsec runs on 3.9
    JSON = "json"
    MARKDOWN = "markdown"
    HTML = "html"
    SARIF = "sarif"
    JUNIT = "junit"
    SUMMARY = "summary"
    CHART_SVG = "chart-svg"
    CHART_MD = "chart-md"

    def __str__(self) -> str:
        return self.value


def _json(results: Results) -> str:
    doc = document(
        "results",
        reports=list(results.reports),
        gates=[gate.as_dict() for gate in results.gates],
        failed=results.failed,
    )
    return json.dumps(doc, indent=2) + "\n"


def _markdown(results: Results) -> str:
    from agentsec.integrity.report import markdown as integrity_markdown

    pages = {kinds.TEST_BLAST_RADIUS: render_markdown,
             kinds.TEST_VERIFIER_INTEGRITY: integrity_markdown}
    return "\n".join(pages[kinds.kind(report)](report) for report in results.reports)


_RENDERERS: dict[Format, Callable[[Results], str]] = {
    Format.JSON: _json,
    Format.MARKDOWN: _markdown,
    Format.HTML: lambda r: render_html(list(r.reports)),
    Format.SARIF: render_sarif,
    Format.JUNIT: render_junit,
    Format.SUMMARY: render_summary,
    Format.CHART_SVG: lambda r: render_chart_svg(list(r.reports)),
    Format.CHART_MD: lambda r: render_chart_markdown(list(r.reports)),
}
if set(_RENDERERS) != set(Format):  # a format added without its renderer fails at import
    raise ImportError(f"formats without a renderer: {sorted(set(Format) - set(_RENDERERS))}")


def render(fmt: Format, results: Results) -> str:
    return _RENDERERS[fmt](results)
