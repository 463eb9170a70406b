"""The HTML report: self-contained, escaped, axes before the score."""

from __future__ import annotations

import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from agentsec import service
from agentsec.render.html import render_html
from agentsec.report import Target
from agentsec.untrusted import parse_probe_output
from tests.agentsec import outputs

AGENTSEC = str(Path(sys.executable).parent / "agentsec")
HOSTILE = '<script>alert(1)</script><img src="https://evil.example/x" onerror="x()">'


def _report(output: dict[str, Any], label: str = "run") -> dict[str, Any]:
    probe = parse_probe_output(outputs.line(output))
    return service.score(
        probe, label=label, target=Target(kind="captured", how=HOSTILE), rc=0, redact=False
    )


class _AttributeCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "action", "srcset", "poster", "data"):
                self.found.append((tag, name, value))


def _linking_attributes(page: str) -> list[tuple[str, str, str | None]]:
    collector = _AttributeCollector()
    collector.feed(page)
    return collector.found


def _hostile_output() -> dict[str, Any]:
    return outputs.with_data("secrets_env", names=[{"name": HOSTILE, "length": 1}])


def test_hostile_text_is_escaped_and_nothing_is_loaded_from_anywhere():
    page = render_html([_report(_hostile_output(), label=HOSTILE)])
    assert "<script" not in page and "<img" not in page
    assert "&lt;script&gt;" in page
    # No attribute may point anywhere: the page makes no request at all.
    assert _linking_attributes(page) == []
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_axes_come_before_the_score_and_not_measured_is_spelled_out():
    page = render_html([_report(outputs.failed("network"))])
    assert page.index("Privilege") < page.index("/ 100")
    assert "? not measured" in page and "lower bound" in page


def test_report_command_reads_a_directory_and_skips_matrix_tables(tmp_path: Path):
    (tmp_path / "a.json").write_text(json.dumps(_report(outputs.sealed(), "sealed-one")))
    (tmp_path / "matrix_x.json").write_text(json.dumps({"test": "sandbox-blast-radius-matrix"}))
    out = tmp_path / "page.html"
    proc = subprocess.run(
        [AGENTSEC, "report", str(tmp_path), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "sealed-one" in out.read_text() and "1 run" in proc.stdout


def test_report_command_refuses_a_corrupt_report_in_one_line(tmp_path: Path):
    (tmp_path / "broken.json").write_text('{"tool": "agentsec", "schema_version": 1, "summ')
    out = tmp_path / "page.html"
    proc = subprocess.run(
        [AGENTSEC, "report", str(tmp_path / "broken.json"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()
