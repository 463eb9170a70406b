"""A label's history as a small inline SVG: score over time, and a strip of axis states per run.

Inline SVG in the page needs no script and loads nothing, so the page's CSP stays
``default-src 'none'``. Every text is escaped here; the result is marked safe for the template.
"""

from __future__ import annotations

from collections.abc import Sequence
from xml.sax.saxutils import escape

from markupsafe import Markup

from agentsec.history import Run
from agentsec.render.chart import THEMES

WIDTH, PLOT_H, STRIP, PAD = 640, 120, 9, 28


def history_svg(runs: Sequence[Run], regressed: set[int]) -> Markup:
    colours = THEMES["light"]
    axis_ids = list(runs[-1].axes) if runs else []
    height = PAD + PLOT_H + 8 + STRIP * len(axis_ids) + PAD
    step = (WIDTH - 2 * PAD) / max(len(runs) - 1, 1)

    def x(i: int) -> float:
        return PAD + i * step

    def y(score: int) -> float:
        return PAD + PLOT_H - PLOT_H * min(max(score, 0), 100) / 100

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" class="history" font-size="11">',
        f'<line x1="{PAD}" y1="{y(0)}" x2="{WIDTH - PAD}" y2="{y(0)}" stroke="#8888"/>',
        f'<line x1="{PAD}" y1="{y(100)}" x2="{WIDTH - PAD}" y2="{y(100)}" stroke="#8884"/>',
        f'<text x="2" y="{y(0) + 4}" fill="#888">0</text>',
        f'<text x="2" y="{y(100) + 4}" fill="#888">100</text>',
    ]
    if len(runs) > 1:
        points = " ".join(f"{x(i):.1f},{y(r.score):.1f}" for i, r in enumerate(runs))
        out.append(f'<polyline points="{points}" fill="none" stroke="#888" stroke-width="2"/>')
    for i, run in enumerate(runs):
        bad = run.id in regressed
        fill = colours["reachable"] if bad else colours["text"]
        note = " (regression)" if bad else ""
        out.append(
            f'<circle cx="{x(i):.1f}" cy="{y(run.score):.1f}" r="{6 if bad else 4}" '
            f'fill="{fill}" class="{"regression" if bad else "run"}">'
            f"<title>{escape(run.generated_at)}: score {run.score}{note}</title></circle>"
        )
        for row, axis_id in enumerate(axis_ids):
            state = run.axes.get(axis_id, "not_measured")
            colour = colours.get(state, colours["not_measured"])
            top = PAD + PLOT_H + 8 + row * STRIP
            out.append(
                f'<rect x="{x(i) - 4:.1f}" y="{top}" width="8" height="{STRIP - 2}" '
                f'fill="{colour}"><title>{escape(axis_id)}: {escape(state)}</title></rect>'
            )
    out.append("</svg>")
    return Markup("".join(out))  # safe: every text above went through escape()
