"""The combined promptfoo + sandbox result as Markdown: the assumption first."""

from __future__ import annotations

from typing import Any

from agentsec.render.markdown import md


def render_combined_markdown(doc: dict[str, Any]) -> str:
    sandbox, pf = doc["sandbox"], doc["promptfoo"]
    reachable = ", ".join(a for a, s in sandbox["axes"].items() if s == "reachable") or "none"
    lines = [
        "# promptfoo and the sandbox, joined",
        "",
        f"> **Assumption:** {md(doc['assumption']['statement'])}",
        "",
        f"- promptfoo: {pf['rows']} rows, {pf['failed']} attacks succeeded "
        f"({md(pf['file'])}, eval {md(pf['eval_id'] or 'unnamed')})",
        f"- sandbox: **{md(sandbox['label'])}** scores **{sandbox['score']} / 100**"
        + (" (a lower bound)" if sandbox["score_is_lower_bound"] else "")
        + f"; reachable axes: {md(reachable)}",
        "",
        "## Where a successful attack meets an open door",
        "",
    ]
    if not doc["overlap"]:
        lines.append("No OWASP agentic category has both a successful attack and a finding.")
    for item in doc["overlap"]:
        lines += [f"### {md(item['category'])} {md(item['title'])}", "", "Attacks that worked:"]
        lines += [
            f"- {md(t['description'] or 'a test')} (plugin {md(t['plugin'])})"
            for t in item["failed_tests"]
        ]
        lines += ["", "What the sandbox lets them reach:"]
        lines += [
            f"- {md(f['id'])} {md(f['title'])} ({md(f['severity'])})"
            for f in item["sandbox_findings"]
        ]
        lines.append("")
    if pf["unmapped_failures"]:
        lines += ["", "Successful attacks with no OWASP agentic category:"]
        lines += [
            f"- {md(u['description'] or 'a test')} (plugin {md(u['plugin'] or 'none')})"
            for u in pf["unmapped_failures"]
        ]
    source = doc["mapping_source"]
    lines += [
        "",
        f"Plugin categories: {md(source['package'])}, retrieved {md(source['retrieved'])} "
        f"from {md(source['source'])}.",
        "",
    ]
    return "\n".join(lines)
