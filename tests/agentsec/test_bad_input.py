"""Bad input to every entry point of `agentsec`, as a careless user or a hostile one gives it:
probe output, saved reports (forged ones above all: a gate that passes on a forged baseline is a
hole in CI), history databases, arguments, presets and output paths. Each case gets one clear line
on stderr and exit 1: never a traceback, never "internal error", never a hang, and never a change
to saved data (the reports directory and its history are compared byte for byte)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.agentsec import console, outputs
from tests.agentsec.reports import AGENTSEC, leaky

TIMEOUT = 60  # a bound against hangs, not a performance figure


def agentsec(*args: str, cwd: Path, env: dict[str, str] | None = None,
             prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*prefix, AGENTSEC, *args], cwd=cwd, capture_output=True,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})})


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def assert_one_line_error(r: subprocess.CompletedProcess[bytes], *needles: str) -> str:
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 1, (r.returncode, err, r.stdout[-2000:])
    assert "Traceback" not in err and "internal error" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agentsec: error: "), err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """reports/good.json (a real report with findings), its Markdown and its history run."""
    home = tmp_path_factory.mktemp("agentsec-bad")
    (home / "capture.json").write_text(outputs.line(leaky()) + "\n")
    r = agentsec("score", "capture.json", "--label", "good", "--how", "by hand", cwd=home)
    assert r.returncode == 0, r.stderr
    report = json.loads((home / "reports" / "good.json").read_text())
    assert len(report["summary"]["findings"]) >= 3  # the forgeries below need findings
    return home


def good(world: Path) -> dict[str, Any]:
    return json.loads((world / "reports" / "good.json").read_text())


# ---- forged and broken reports -----------------------------------------------------------------

def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change to one field, by dotted path (list indexes as numbers)."""
    def change(report: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = report
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value
    return change


def _duplicate_first_finding(report: dict[str, Any]) -> None:
    findings = report["summary"]["findings"]
    findings.append(copy.deepcopy(findings[0]))
    weight = findings[0]["points"]
    report["summary"]["raw_score"] += weight  # the sums still add up: only the ID repeats
    report["summary"]["score"] = min(100, report["summary"]["raw_score"])
    report["summary"]["finding_count"] += 1
    report["summary"]["by_severity"][findings[0]["severity"]] += 1


def _drop_findings_keep_score(report: dict[str, Any]) -> None:
    report["summary"]["findings"] = []  # "nothing found", but the score says otherwise


def _zero_score(report: dict[str, Any]) -> None:
    report["summary"]["score"] = 0  # passes any budget; the findings still weigh


def _deep_probe_output(report: dict[str, Any]) -> None:
    deep: Any = "x"
    for _ in range(500):
        deep = [deep]
    report["probe"]["output"]["padding"] = deep


# name: (a change to a good report, or the file's bytes; what the one line must name)
FORGED: dict[str, tuple[Callable[[dict[str, Any]], None] | bytes, str]] = {
    "score-1e308": (_set("summary.score", 1e308), "summary.score"),
    "score-float": (_set("summary.score", 33.0), "summary.score"),
    "score-high": (_set("summary.score", "high"), "summary.score"),
    "score-true": (_set("summary.score", True), "summary.score"),
    "score-above-100": (_set("summary.score", 101), "summary.score"),
    "score-zero": (_zero_score, "summary.score"),
    "raw-negative": (_set("summary.raw_score", -5), "summary.raw_score"),
    "raw-not-the-sum": (_set("summary.raw_score", 1), "summary.raw_score"),
    "findings-dropped": (_drop_findings_keep_score, "summary.raw_score"),
    "severity-a-list": (_set("summary.findings.0.severity", ["high"]),
                        "summary.findings[0].severity"),
    "severity-unknown": (_set("summary.findings.0.severity", "severe"),
                         "summary.findings[0].severity"),
    "points-not-the-weight": (_set("summary.findings.0.points", 0), "summary.findings[0].points"),
    "duplicate-finding": (_duplicate_first_finding, "listed twice"),
    "finding-id-a-path": (_set("summary.findings.0.id", "../../etc"), "summary.findings[0].id"),
    "finding-count": (_set("summary.finding_count", 0), "summary.finding_count"),
    "by-severity": (_set("summary.by_severity.info", 7), "summary.by_severity.info"),
    "lower-bound": (_set("summary.score_is_lower_bound", True), "score_is_lower_bound"),
    "axis-state": (_set("summary.axes.network.state", "open"), "summary.axes.network.state"),
    "target-extra": (_set("target.trust_me", True), "target.trust_me"),
    "label-empty": (_set("label", ""), "label"),
    "schema-version-2": (_set("schema_version", 2), "schema_version"),
    "not-agentsec": (_set("tool", "other"), "not an agentsec report"),
    "probe-output-deep": (_deep_probe_output, "nested deeper"),
    "infinity": (b'{"tool": "agentsec", "schema_version": 1, "summary": {"score": Infinity}}',
                 "summary.score: Infinity"),
    "nan": (b'{"tool": "agentsec", "schema_version": 1, "summary": {"raw_score": NaN}}',
            "summary.raw_score: NaN"),
    "key-twice": (b'{"tool": "agentsec", "tool": "agentsec"}', "given twice"),
    "huge-integer": (b'{"tool": "agentsec", "schema_version": ' + b"9" * 5000 + b"}",
                     "integer"),
    "nested-200000": (b"[" * 200_000 + b"]" * 200_000, "nested"),
    "not-utf8": (b'{"tool": "agentsec\xff\xfe"}', "not UTF-8"),
    "utf16": ('{"tool": "agentsec"}'.encode("utf-16"), "not UTF-8"),
    "empty": (b"", "not valid JSON"),
    "truncated": (b'{"tool": "agentsec", "schema_', "not valid JSON"),
    "a-list": (b"[]", "not an agentsec report"),
    "huge-file": (b"", "larger than"),  # written below: 17 MiB of spaces
}


def forge(world: Path, case: str, directory: Path) -> Path:
    change, _ = FORGED[case]
    path = directory / f"{case}.json"
    if case == "huge-file":
        with path.open("wb") as handle:
            handle.truncate(17 * 1024 * 1024)
    elif isinstance(change, bytes):
        path.write_bytes(change)
    else:
        report = good(world)
        change(report)
        path.write_text(json.dumps(report))
    return path


# Every command that reads a saved report, with the forged file in its place.
READERS: dict[str, Callable[[Path], list[str]]] = {
    "diff-as-baseline": lambda f: ["diff", str(f), "reports/good.json"],
    "diff-as-new": lambda f: ["diff", "reports/good.json", str(f)],
    "score-baseline": lambda f: ["score", "capture.json", "--label", "gated", "--how", "h",
                                 "--out", "reports", "--baseline", str(f)],
    "compare": lambda f: ["compare", "reports/good.json", str(f)],
    "report": lambda f: ["report", str(f), "--out", "page.html"],
    "chart": lambda f: ["chart", str(f), "--out", "chart.svg"],
    "combine": lambda f: ["combine", "--promptfoo", "eval.json", "--sandbox", str(f),
                          "--deployed-in", "x"],
}
# The forgeries every reader is tried with; every forgery is tried as a baseline and in diff.
ACROSS_READERS = ("score-1e308", "severity-a-list", "infinity", "nested-200000", "not-utf8",
                  "huge-file", "findings-dropped")


def _cases() -> list[tuple[str, str]]:
    cases = {(case, reader) for case in FORGED
             for reader in ("diff-as-baseline", "diff-as-new", "score-baseline")}
    cases |= {(case, reader) for case in ACROSS_READERS for reader in READERS}
    return sorted(cases)


@pytest.mark.parametrize(("case", "reader"), _cases())
def test_forged_and_broken_reports_are_refused_by_every_reader(world, tmp_path, case, reader):
    forged = forge(world, case, tmp_path)
    (world / "eval.json").write_text(json.dumps({"results": {"results": []}}))
    before = snapshot(world / "reports")
    r = agentsec(*READERS[reader](forged), cwd=world)
    err = assert_one_line_error(r, FORGED[case][1])
    assert str(forged) in err  # names the file
    assert snapshot(world / "reports") == before  # nothing written, nothing recorded
    for product in ("page.html", "chart.svg", "reports/gated.json"):
        assert not (world / product).exists()


def test_the_good_report_passes_every_reader_as_a_control(world, tmp_path):
    (world / "eval.json").write_text(json.dumps({"results": {"results": []}}))
    original = world / "reports" / "good.json"
    copied = tmp_path / "copy.json"
    copied.write_bytes(original.read_bytes())
    for reader, args in READERS.items():
        if reader == "score-baseline":
            continue  # records a run: not a read-only command (the forged cases refuse first)
        r = agentsec(*args(copied), cwd=world)
        assert r.returncode == 0, (reader, r.stderr)
    for product in ("page.html", "chart.svg"):
        (world / product).unlink()


def test_a_directory_of_reports_with_one_forged_is_refused_naming_it(world, tmp_path):
    directory = tmp_path / "many"
    directory.mkdir()
    (directory / "good.json").write_bytes((world / "reports" / "good.json").read_bytes())
    forged = forge(world, "score-1e308", directory)
    for args in (["compare", str(directory)], ["report", str(directory), "--out", "p.html"]):
        r = agentsec(*args, cwd=tmp_path)
        assert_one_line_error(r, str(forged), "summary.score")


def test_the_console_lists_a_forged_report_as_skipped_with_its_reason(world, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "good.json").write_bytes((world / "reports" / "good.json").read_bytes())
    forge(world, "severity-a-list", results)
    forge(world, "not-utf8", results)
    before = snapshot(results)
    with console.running(results) as ui:
        reply = ui.api("GET", "/api/runs")
        page = ui.request("GET", "/", {"Cookie": ui.session_cookie()})
    assert reply.status == 200 and page.status == 200
    doc = reply.json()
    assert [run["label"] for run in doc["runs"]] == ["good"]
    skipped = " | ".join(doc["skipped"])
    assert "severity-a-list.json: " in skipped and "summary.findings[0].severity" in skipped
    assert "not-utf8.json" in skipped and "not UTF-8" in skipped
    assert snapshot(results) == before


# ---- the history database ----------------------------------------------------------------------

def _history_copy(world: Path, tmp_path: Path) -> Path:
    reports = tmp_path / "reports"
    reports.mkdir()
    for name in ("good.json", "history.sqlite"):
        (reports / name).write_bytes((world / "reports" / name).read_bytes())
    (tmp_path / "capture.json").write_bytes((world / "capture.json").read_bytes())
    return reports / "history.sqlite"


def _tamper(db: Path, column: str, value: Any) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE runs SET {column} = ?", (value,))
    conn.close()


def _forged_stored_report(world: Path) -> str:
    report = good(world)
    report["summary"]["score"] = 0
    return json.dumps(report)


HISTORY_DAMAGE: dict[str, tuple[str, Callable[[Path], Any], str]] = {
    "stored-report-forged": ("report", _forged_stored_report, "summary.score"),
    "stored-report-nan": ("report", lambda w: '{"tool": "agentsec", "x": NaN}', "NaN"),
    "stored-report-deep": ("report", lambda w: "[" * 100_000 + "]" * 100_000, "nested"),
    "stored-report-blob": ("report", lambda w: b"\xff\x00", "not text"),
    "score-column-text": ("score", lambda w: "high", "score column"),
    "score-column-huge": ("score", lambda w: 10**18, "score column"),
    "axes-column-not-json": ("axes", lambda w: "{", "axes"),
}


@pytest.mark.parametrize("case", sorted(HISTORY_DAMAGE))
def test_a_damaged_history_is_refused_and_left_as_it_is(world, tmp_path, case):
    column, value, needle = HISTORY_DAMAGE[case]
    db = _history_copy(world, tmp_path)
    _tamper(db, column, value(world))
    before = snapshot(tmp_path / "reports")
    commands = [["history"], ["history", "good", "--gate"], ["history", "--json"]]
    if column == "report":  # recording compares with the stored report first
        commands.append(["score", "capture.json", "--label", "good", "--how", "h",
                         "--fail-on-regression"])
    for args in commands:
        r = agentsec(*args, cwd=tmp_path)
        assert_one_line_error(r, needle)
        now = snapshot(tmp_path / "reports")
        if args[0] == "score":  # a new measurement of "good" rewrites its report, not the db
            now, before = {"db": now["history.sqlite"]}, {"db": before["history.sqlite"]}
        assert now == before, args
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
        conn.close()


def test_a_file_that_is_not_a_history_is_refused_and_left_as_it_is(world, tmp_path):
    db = _history_copy(world, tmp_path)
    db.write_bytes(os.urandom(4096))
    before = snapshot(tmp_path / "reports")
    for args in (["history"], ["score", "capture.json", "--label", "x", "--how", "h"]):
        assert_one_line_error(agentsec(*args, cwd=tmp_path), "history")
        assert {k: v for k, v in snapshot(tmp_path / "reports").items()
                if not k.startswith("x.")} == before


# ---- probe output (score) ----------------------------------------------------------------------

CAPTURES: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "holds no JSON object"),
    "banner-only": (b"Welcome to the box\n", "holds no JSON object"),
    "two-objects": (b'{"a": 1}\n{"b": 2}\n', "2 JSON lines"),
    "truncated": (b'{"probe_format": 1, "probe_vers', "truncated"),
    "a-list": (b"[1, 2]\n", "holds no JSON object"),
    "other-format": (b'{"probe_format": 2, "probe_version": "9", "sections": {}}', "format"),
    "no-sections": (b'{"probe_format": 1, "probe_version": "1", "sections": []}', "sections"),
    "not-utf8": (b"\xff\xfe\xfd\n", "holds no JSON object"),
    "nested-200000": (b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "nested too deeply"),
    "huge": (b"{" + b" " * (9 * 1024 * 1024) + b"}", "larger than"),
    "huge-integer": (b'{"probe_format": ' + b"9" * 5000 + b"}", "not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(CAPTURES))
def test_bad_probe_output_is_refused_and_nothing_is_written(world, tmp_path, case):
    content, needle = CAPTURES[case]
    (tmp_path / "capture.json").write_bytes(content)
    r = agentsec("score", "capture.json", "--label", "x", "--how", "h", cwd=tmp_path)
    assert_one_line_error(r, needle, "capture.json")
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize(("source", "needle"), [("/dev/zero", "larger than"),
                                                ("/nonexistent.json", "cannot read"),
                                                ("/tmp", "is a directory")])
def test_captures_that_are_not_files_end_quickly(tmp_path, source, needle):
    r = agentsec("score", source, "--label", "x", "--how", "h", cwd=tmp_path)
    assert_one_line_error(r, needle)


PROMPTFOO: dict[str, tuple[bytes, str]] = {
    "huge-integer": (b'{"results": ' + b"9" * 5000 + b"}", "thousands of digits"),
    "nested": (b'{"results": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "nested too deeply"),
    "not-an-eval": (b"[]", "eval"),
    "not-utf8": (b"\xff\xfe", "not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(PROMPTFOO))
def test_bad_promptfoo_evals_are_refused(world, tmp_path, case):
    content, needle = PROMPTFOO[case]
    (tmp_path / "eval.json").write_bytes(content)
    r = agentsec("combine", "--promptfoo", str(tmp_path / "eval.json"), "--sandbox",
                 str(world / "reports" / "good.json"), "--deployed-in", "x", cwd=tmp_path)
    assert_one_line_error(r, needle)


# ---- arguments, presets, launchers -------------------------------------------------------------

ARGS: dict[str, tuple[list[str], str]] = {
    "max-score-101": (["score", "capture.json", "--label", "x", "--how", "h", "--max-score",
                       "101"], "--max-score"),
    "max-score-words": (["score", "capture.json", "--label", "x", "--how", "h", "--max-score",
                         "low"], "--max-score"),
    "label-unusable": (["score", "capture.json", "--label", "///", "--how", "h"],
                       "no characters usable"),
    "baseline-missing": (["score", "capture.json", "--label", "x", "--how", "h", "--baseline",
                          "/nonexistent.json"], "cannot read"),
    "baseline-a-directory": (["diff", "/tmp", "reports/good.json"], "is a directory"),
    "unknown-preset": (["blast-radius", "preset", "no-such-preset"], "unknown preset"),
    "preset-needs-image": (["blast-radius", "preset", "docker-hardened"], "--image"),
    "as-user-on-bwrap": (["blast-radius", "preset", "bwrap-hardened", "--as-user", "1000"],
                         "--as-user"),
    "template-without-probe": (["blast-radius", "command", "echo hello"], "{probe}"),
    "template-bad-quote": (["blast-radius", "command", "python3 '{probe}"], "cannot parse"),
    "template-missing-binary": (["blast-radius", "command", "/no/such/bin {probe}"],
                                "not installed"),
    "matrix-unknown-presets": (["matrix", "--presets", "nope,also-nope"], "unknown presets"),
    "assert-nothing": (["assert", "--kind", "local"], "name at least one path"),
    "assert-docker-no-image": (["assert", "--kind", "docker", "--readable", "/x"], "--image"),
    "history-limit-0": (["history", "--limit", "0"], "--limit"),
    "history-gate-no-label": (["history", "--gate"], "--gate needs a LABEL"),
    "history-missing": (["history", "--db", "/nonexistent/h.sqlite"], "no history"),
    "chart-png": (["chart", "reports/good.json", "--out", "chart.png"], ".svg or .md"),
    "report-bad-format": (["report", "reports/good.json", "--format", "pdf"], "--format"),
    "compare-empty-dir": (["compare", "empty"], "no reports found"),
    "ui-port": (["ui", "--port", "99999"], "--port"),
    "ui-bind": (["ui", "--bind", "256.1.1.1"], "cannot listen"),
    "unknown-command": (["no-such-command"], "No such command"),
    "podman-without-engine": (["blast-radius", "podman", "python:3.12-slim"],
                              "gets no answer from its engine"),
}
ARG_ENV = {"podman-without-engine": {"CONTAINER_HOST": "unix:///nonexistent/podman.sock"}}


@pytest.mark.parametrize("case", sorted(ARGS))
def test_bad_arguments(world, case):
    args, needle = ARGS[case]
    (world / "empty").mkdir(exist_ok=True)
    before = snapshot(world / "reports")
    r = agentsec(*args, cwd=world, env=ARG_ENV.get(case))
    assert_one_line_error(r, needle)
    assert snapshot(world / "reports") == before
    assert not (world / "chart.png").exists()


# The docker CLI is not part of scripts/setup.sh; where it is installed and no daemon runs, the
# same case is tried through it too (podman, above, is always there).
DOCKERS = ["docker"] if subprocess.run(["sh", "-c", "command -v docker"],
                                       capture_output=True).returncode == 0 else []


@pytest.mark.parametrize("engine", DOCKERS)
def test_docker_without_a_daemon_says_so_not_image_not_found(world, engine):
    daemon = subprocess.run([engine, "version"], capture_output=True, timeout=TIMEOUT)
    assert daemon.returncode != 0, "a docker daemon answers here: this case needs none"
    r = agentsec("blast-radius", "docker", "python:3.12-slim", cwd=world)
    err = assert_one_line_error(r, "gets no answer from its engine", "daemon", "info")
    assert "pull" not in err and "not found" not in err


def test_a_missing_image_is_still_told_as_missing_when_the_engine_answers(world):
    r = agentsec("blast-radius", "podman", "localhost/no-such-image:never", cwd=world)
    assert_one_line_error(r, "not found", "pull")


# ---- output paths ------------------------------------------------------------------------------

OUTPUTS: dict[str, tuple[list[str], str]] = {
    "out-under-proc": (["--out", "/proc/agentsec-reports"], "/proc/agentsec-reports"),
    "out-is-a-file": (["--out", "capture.json"], "is a file"),
    "out-under-a-file": (["--out", "capture.json/reports"], "a file stands where a directory"),
    "sarif-under-proc": (["--sarif", "/proc/x.sarif"], "/proc/x.sarif"),
    "junit-under-a-file": (["--junit", "capture.json/x.xml"], "capture.json/x.xml"),
    "summary-missing-dir": (["--job-summary", "/nonexistent-dir/summary.md"], "job summary"),
}


@pytest.mark.parametrize("case", sorted(OUTPUTS))
def test_outputs_that_cannot_be_written(world, tmp_path, case):
    extra, needle = OUTPUTS[case]
    (tmp_path / "capture.json").write_bytes((world / "capture.json").read_bytes())
    r = agentsec("score", "capture.json", "--label", "x", "--how", "h", *extra, cwd=tmp_path)
    assert_one_line_error(r, needle)


def test_out_on_a_read_only_filesystem(world, tmp_path):
    # A read-only tmpfs in a mount namespace of the test's own: gone with the process.
    ro = tmp_path / "ro"
    ro.mkdir()
    (tmp_path / "capture.json").write_bytes((world / "capture.json").read_bytes())
    script = (f'mount -t tmpfs -o ro tmpfs "{ro}" && exec "{AGENTSEC}" score capture.json '
              f'--label x --how h --out "{ro}/reports"')
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                       cwd=tmp_path, capture_output=True, timeout=TIMEOUT)
    assert_one_line_error(r, "Read-only file system", str(ro / "reports"))
    assert list(ro.iterdir()) == []  # the tmpfs went with the namespace; nothing was written


def test_a_missing_out_directory_is_made(world, tmp_path):
    (tmp_path / "capture.json").write_bytes((world / "capture.json").read_bytes())
    r = agentsec("score", "capture.json", "--label", "x", "--how", "h", "--out", "a/b/c",
                 cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "a" / "b" / "c" / "x.json").exists()
