"""Many runs as one chart: one row per run, one coloured cell per axis, and the score.

SVG for a README or an artifact (self-contained: no font, script or link is loaded), or a
Markdown table when the file is named .md. The state colours match the HTML report's.
"""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape, quoteattr

from agentsec import kinds
from agentsec.render.markdown import md
from agentsec.render.states import STATE_LABELS, axis_cell

THEMES: dict[str, dict[str, str]] = {
    "light": {
        "background": "#ffffff",
        "text": "#1f2328",
        "muted": "#656d76",
        "sealed": "#1a7f37",
        "refused": "#9a6700",
        "reachable": "#cf222e",
        "not_measured": "#8250df",
        "cell_text": "#ffffff",
    },
    "dark": {
        "background": "#0d1117",
        "text": "#e6edf3",
        "muted": "#8d96a0",
        "sealed": "#2ea043",
        "refused": "#bb8009",
        "reachable": "#da3633",
        "not_measured": "#8957e5",
        "cell_text": "#ffffff",
    },
}
ROW, CELL, SCORE_W, PAD, CHAR_W = 28, 118, 56, 12, 7.6


def _state(axis: dict[str, Any]) -> str:
    state = axis.get("state")
    return state if state in STATE_LABELS else "not_measured"


def _cell_words(axis: dict[str, Any]) -> str:
    state = _state(axis)
    if state == "reachable" and axis.get("severity"):
        return f"{STATE_LABELS[state][0]} {axis['severity']}"
    words = {"sealed": "sealed", "refused": "refused", "not_measured": "not measured"}
    return f"{STATE_LABELS[state][0]} {words.get(state, 'reachable')}"


def charted(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs a chart has a row for: blast-radius reports (a verifier-integrity run has no
    axes to colour; `agentsec compare` and the HTML report show those)."""
    return [r for r in reports if not kinds.is_integrity(r)]


def render_chart_svg(reports: list[dict[str, Any]], theme: str = "light") -> str:
    reports = charted(reports)
    colours = THEMES[theme]
    axes = list(reports[0]["summary"]["axes"].items()) if reports else []
    label_w = max([len(r["label"]) for r in reports] + [len("Configuration")]) * CHAR_W + PAD
    width = int(PAD + label_w + SCORE_W + len(axes) * (CELL + 4) + PAD)
    height = int(PAD + ROW * (len(reports) + 1) + ROW + PAD)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" '
        'font-family="system-ui, -apple-system, Segoe UI, sans-serif" font-size="13">',
        f"<title>agentsec: {len(reports)} runs, one cell per axis, and the score</title>",
        f'<rect width="100%" height="100%" fill="{colours["background"]}"/>',
    ]
    x_score = PAD + label_w
    x_axes = x_score + SCORE_W
    y = PAD + ROW * 0.65
    out.append(f'<text x="{PAD}" y="{y}" fill="{colours["muted"]}">Configuration</text>')
    out.append(
        f'<text x="{x_score + SCORE_W - 12}" y="{y}" fill="{colours["muted"]}" '
        'text-anchor="end">Score</text>'
    )
    for i, (_, axis) in enumerate(axes):
        cx = x_axes + i * (CELL + 4) + CELL / 2
        out.append(
            f'<text x="{cx}" y="{y}" fill="{colours["muted"]}" text-anchor="middle">'
            f"{escape(axis['title'])}</text>"
        )
    for row, report in enumerate(reports, start=1):
        top = PAD + row * ROW
        base = top + ROW * 0.65
        summary = report["summary"]
        out.append(
            f'<text x="{PAD}" y="{base}" fill="{colours["text"]}">{escape(report["label"])}</text>'
        )
        score = str(summary["score"]) + ("+" if summary.get("score_is_lower_bound") else "")
        out.append(
            f'<text x="{x_score + SCORE_W - 12}" y="{base}" fill="{colours["text"]}" '
            f'text-anchor="end" font-weight="700">{escape(score)}</text>'
        )
        for i, (axis_id, _) in enumerate(axes):
            axis = summary["axes"].get(axis_id, {"state": "not_measured"})
            x = x_axes + i * (CELL + 4)
            state = _state(axis)
            out.append(
                f'<rect x="{x}" y="{top + 3}" width="{CELL}" height="{ROW - 6}" rx="4" '
                f'fill="{colours[state]}" class={quoteattr(state)}>'
                f"<title>{escape(report['label'])}: {escape(axis_cell(axis))}</title></rect>"
            )
            out.append(
                f'<text x="{x + CELL / 2}" y="{base}" fill="{colours["cell_text"]}" '
                f'text-anchor="middle" font-size="12">{escape(_cell_words(axis))}</text>'
            )
    legend_y = PAD + ROW * (len(reports) + 1) + ROW * 0.65
    legend = "   ".join(f"{sym} {words}" for sym, words in STATE_LABELS.values())
    out.append(
        f'<text x="{PAD}" y="{legend_y}" fill="{colours["muted"]}" font-size="12">'
        f"{escape(legend)} · score+ is a lower bound</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def render_chart_markdown(reports: list[dict[str, Any]]) -> str:
    reports = charted(reports)
    if not reports:
        return "No runs.\n"
    axes = list(reports[0]["summary"]["axes"].items())
    lines = [
        "| Configuration | Score | " + " | ".join(md(a["title"]) for _, a in axes) + " | Probe |",
        "|---|---:|" + "|".join(":-:" for _ in axes) + "|---|",
    ]
    for report in reports:
        summary = report["summary"]
        score = str(summary["score"]) + ("+" if summary.get("score_is_lower_bound") else "")
        missing = {"state": "not_measured"}
        cells = " | ".join(axis_cell(summary["axes"].get(key, missing)) for key, _ in axes)
        lines.append(
            f"| {md(report['label'])} | {score} | {cells} | {md(report['probe']['version'])} |"
        )
    return "\n".join(lines) + "\n"
