"""Every output format agentsec writes, as one enum, and one pure function from results to text.

``render`` matches every member, so adding a format without a renderer fails the type check and
the test that renders every member; the CLI only decides where the text goes.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import assert_never

from agentsec.render.chart import render_chart_markdown, render_chart_svg
from agentsec.render.html import render_html
from agentsec.render.junit import render_junit
from agentsec.render.markdown import render_markdown
from agentsec.render.sarif import render_sarif
from agentsec.render.summary import render_summary
from agentsec.results import Results, document


class Format(StrEnum):
    JSON = "json"
    MARKDOWN = "markdown"
    HTML = "html"
    SARIF = "sarif"
    JUNIT = "junit"
    SUMMARY = "summary"
    CHART_SVG = "chart-svg"
    CHART_MD = "chart-md"


def render(fmt: Format, results: Results) -> str:
    reports = list(results.reports)
    match fmt:
        case Format.JSON:
            doc = document(
                "results",
                reports=reports,
                gates=[gate.as_dict() for gate in results.gates],
                failed=results.failed,
            )
            return json.dumps(doc, indent=2) + "\n"
        case Format.MARKDOWN:
            return "\n".join(render_markdown(report) for report in reports)
        case Format.HTML:
            return render_html(reports)
        case Format.SARIF:
            return render_sarif(results)
        case Format.JUNIT:
            return render_junit(results)
        case Format.SUMMARY:
            return render_summary(results)
        case Format.CHART_SVG:
            return render_chart_svg(reports)
        case Format.CHART_MD:
            return render_chart_markdown(reports)
        case _:
            assert_never(fmt)
