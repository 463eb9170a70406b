"""How `agentcage` shows its listings: one record per line with the name whole, and versioned
JSON documents for `--json`. Rendering only; the commands in cli.py decide what to show.

The layout is agentsec's (render/lines.py): short fixed fields first, the name or placeholder
last and never cut, so it can be copied from a terminal at 80 columns or from a pipe.
"""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text

from agentsec.render.lines import Cell, Lines, record, wrapped

DOCUMENT_VERSION = 1


def document(kind: str, **body: Any) -> dict[str, Any]:
    """The shape of every `agentcage ... --json` output."""
    return {"tool": "agentcage", "kind": kind, "schema_version": DOCUMENT_VERSION, **body}


def _secrets(doc: dict[str, Any], width: int) -> list[Text]:
    lines = [Text(f"backend: {doc['backend']} ({doc['backend_reason']})")]
    if not doc["secrets"]:
        return [*lines, Text("no secrets")]
    lines.append(record([Cell("STORED", 6), Cell("PARTS", 12)], "NAME"))
    lines[-1].stylize("bold")
    for e in doc["secrets"]:
        parts = ",".join(p for p, on in (("headers", e["inject_headers"]),
                                          ("body", e["inject_body"])) if on)
        stored = Cell("yes" if e["stored"] else "NO", 6, "green" if e["stored"] else "bold red")
        lines.append(record([stored, Cell(parts or "-", 12)], e["name"], name_style="bold"))
        lines += wrapped(f"inject to: {', '.join(e['inject_to']) or '-'}; placeholder:",
                         width, indent=7)
        # The placeholder alone on its line, barely indented: it is what a user copies.
        lines.append(Text("  " + (e["placeholder"] or "-")))
    return lines


def secrets_lines(doc: dict[str, Any]) -> Lines:
    return Lines(lambda width: _secrets(doc, width))


def _expiry(expires_at: float | None) -> str:
    if expires_at is None:
        return "never"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(expires_at))


def _domains(info: dict[str, Any], width: int) -> list[Text]:
    lines = [Text(f"mode: {info['mode'] or 'none (deny everything)'}")]
    if not info["rules"]:
        return [*lines, Text("no domain rules")]
    header = [Cell("LIST", 5), Cell("ACTIVE", 6), Cell("SOURCE", 8), Cell("EXPIRES", 19)]
    lines.append(record(header, "PATTERN"))
    lines[-1].stylize("bold")
    for r in info["rules"]:
        cells = [
            Cell(r["list"], 5, "green" if r["list"] == "allow" else "red"),
            Cell("yes" if r["active"] else "no", 6),
            Cell(r["source"] or "-", 8),
            Cell(_expiry(r["expires_at"]), 19),
        ]
        lines.append(record(cells, r["pattern"]))
    return lines


def domains_lines(info: dict[str, Any]) -> Lines:
    return Lines(lambda width: _domains(info, width))


def doctor_document(results: list[Any]) -> dict[str, Any]:
    return document(
        "doctor",
        ok=all(c.ok for c in results),
        checks=[{"name": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix or None}
                for c in results],
    )


def _grants(doc: dict[str, Any], width: int) -> list[Text]:
    lines: list[Text] = []
    if doc["grants"]:
        lines.append(record([Cell("GRANT", 16), Cell("EXPIRES", 19), Cell("BY", 6)], "DOMAIN"))
        lines[-1].stylize("bold")
        for g in doc["grants"]:
            lines.append(record([Cell(str(g.get("id")), 16),
                                 Cell(_expiry(g.get("expires_at")), 19),
                                 Cell(str(g.get("decided_by")), 6)], str(g.get("domain"))))
    else:
        lines.append(Text("no grants in force"))
    if doc["requests"]:
        lines.append(record([Cell("REQUEST", 16), Cell("STATUS", 8), Cell("BY", 7)], "DOMAIN"))
        lines[-1].stylize("bold")
        for r in doc["requests"]:
            status = str(r.get("status"))
            style = {"granted": "green", "denied": "red"}.get(status, "yellow")
            lines.append(record([Cell(str(r.get("id")), 16), Cell(status, 8, style),
                                 Cell(str(r.get("decided_by") or "-"), 7)],
                                str(r.get("domain"))))
            lines += wrapped(f"asked: {r.get('reason', '')}", width, indent=2)
            if r.get("decision"):
                lines += wrapped(f"decided: {r['decision']}", width, indent=2)
    return lines


def grants_lines(doc: dict[str, Any]) -> Lines:
    return Lines(lambda width: _grants(doc, width))


def _findings(findings: list[dict[str, Any]], width: int) -> list[Text]:
    if not findings:
        return [Text("no findings")]
    lines = [record([Cell("WHEN", 19), Cell("BUDGET", 11), Cell("FINDING", 12)], "HOST")]
    lines[-1].stylize("bold")
    for f in findings:
        lines.append(record([Cell(_expiry(f.get("at")), 19), Cell(str(f.get("budget")), 11),
                             Cell(str(f.get("id")), 12)], str(f.get("host"))))
        lines += wrapped(str(f.get("summary", "")), width, indent=2)
        lines += wrapped(f"action: {f.get('action', 'recorded')}", width, indent=2)
    return lines


def findings_lines(findings: list[dict[str, Any]]) -> Lines:
    return Lines(lambda width: _findings(findings, width))
