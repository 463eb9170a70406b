"""Reports as one self-contained HTML page: inline CSS, no script, no request leaves the page.

The page is rendered from one template (autoescaped), shared by `agentsec report` and the
console, so the two can never disagree. A Content-Security-Policy meta tag forbids loading
anything from anywhere, as a second line behind the escaping.
"""

from __future__ import annotations

from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from agentsec.cage_watcher import watcher_line
from agentsec.render.states import axis_cell


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("agentsec.render", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["axis_cell"] = axis_cell
    env.globals["watcher_line"] = watcher_line
    return env


def render_html(
    reports: list[dict[str, Any]],
    title: str = "agentsec blast radius",
    console: dict[str, Any] | None = None,
) -> str:
    """The page. ``console`` (history plots, regressions, the run form and its token) is given
    only by the localhost console; `agentsec report` renders the same page without it."""
    template = _environment().get_template("report.html.j2")
    return template.render(reports=reports, title=title, console=console)
