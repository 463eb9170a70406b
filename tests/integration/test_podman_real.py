"""Real rootful podman (runc, no bridge network): default vs hardened, the docker launcher's argv
through podman's CLI, and every bad input answered in one line with exit 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.podman_world import PodmanWorld, podman_world

AGENTSEC = str(Path(sys.executable).parent / "agentsec")


@pytest.fixture(scope="module")
def podman() -> Iterator[PodmanWorld]:
    with podman_world() as world:
        yield world


def agentsec(
    world: PodmanWorld, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AGENTSEC, *args],
        env={**os.environ, **world.env, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def _report(out: Path, label: str) -> dict[str, Any]:
    return json.loads((out / f"{label}.json").read_text())


def _ids(report: dict[str, Any]) -> set[str]:
    return {f["id"] for f in report["summary"]["findings"]}


@pytest.fixture(scope="module")
def measured(podman: PodmanWorld, client, tmp_path_factory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("podman-reports")
    targets = {"AGENTSEC_PROBE_TARGETS": client.probe_targets_file.read_text()}
    network = f"--network=ns:/run/netns/{client.netns}"
    runs = {
        "default": (("preset", "podman-default", "--image", podman.image), (network,)),
        "hardened": (("preset", "podman-hardened", "--image", podman.image), ()),
        "docker-cli": (
            ("docker", podman.image, "--engine-bin", "podman"),
            ("--network", "none", "--read-only"),
        ),
    }
    reports = {}
    for label, (args, engine_flags) in runs.items():
        proc = agentsec(
            podman,
            "blast-radius",
            *args,
            "--label",
            label,
            "--out",
            str(out),
            "--",
            *engine_flags,
            env=targets,
        )
        assert proc.returncode == 0, proc.stderr
        reports[label] = _report(out, label)
    return reports


def test_default_podman_reaches_the_fake_internet_as_root(measured):
    found = _ids(measured["default"])
    assert {"PRIV-001", "PRIV-003", "PRIV-005", "NET-001", "NET-002"} <= found
    assert measured["default"]["summary"]["axes"]["network"]["state"] == "reachable"
    # The container runtime's own defaults hold: seccomp on, own PID namespace.
    assert not found & {"PRIV-004", "PROC-001"}


def test_hardened_podman_lists_exactly_what_still_reaches(measured):
    report = measured["hardened"]
    scored = {f["id"]: f["points"] for f in report["summary"]["findings"] if f["points"] > 0}
    assert report["summary"]["score"] == sum(scored.values())
    assert not set(scored) & {
        "PRIV-001",
        "PRIV-003",
        "PRIV-005",
        "NET-001",
        "NET-002",
        "RES-001",
        "FS-001",
    }
    assert report["summary"]["score"] < measured["default"]["summary"]["score"]
    for axis in report["summary"]["axes"].values():
        assert axis["state"] != "not_measured", axis


def test_reports_record_engine_image_digest_and_flags(measured, podman):
    target = measured["hardened"]["target"]
    assert target["engine"] == "podman" and target["preset"] == "podman-hardened"
    assert target["image"] == podman.image and target["digest"].startswith("sha256:")
    assert "--cap-drop" in target["flags"]
    docker = measured["docker-cli"]["target"]
    assert docker["engine"] == "docker" and docker["command"][0].endswith("podman")
    assert docker["flags"] == ["--network", "none", "--read-only"]


def _one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert needle in lines[0], lines[0]


def test_an_image_without_python_names_the_fix(podman, tmp_path: Path):
    proc = agentsec(
        podman,
        "blast-radius",
        "podman",
        podman.no_python_image,
        "--out",
        str(tmp_path),
        "--",
        "--network",
        "none",
    )
    assert "python" in proc.stderr
    _one_line_error(proc, "python3")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("podman", "localhost/does-not-exist:1"), "not found"),
        (("docker", "x:1", "--engine-bin", "/nonexistent/docker"), "not installed"),
        (("preset", "no-such-preset"), "unknown preset"),
        (("preset", "podman-hardened"), "--image"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(podman, tmp_path: Path, args, needle):
    proc = agentsec(podman, "blast-radius", *args, "--out", str(tmp_path))
    _one_line_error(proc, needle)
    assert not list(tmp_path.iterdir())


def test_a_corrupt_baseline_stops_before_anything_runs(podman, tmp_path: Path):
    baseline = tmp_path / "accepted.json"
    baseline.write_text('{"tool": "agentsec", "schema_version": 1, "summ')
    out = tmp_path / "out"
    proc = agentsec(
        podman,
        "blast-radius",
        "podman",
        podman.image,
        "--baseline",
        str(baseline),
        "--out",
        str(out),
        "--",
        "--network",
        "none",
    )
    _one_line_error(proc, "accepted.json")
    assert not out.exists()


def test_matrix_runs_presets_shows_progress_and_gates_on_the_best_row(podman, tmp_path: Path):
    presets = "podman-default,podman-hardened,bwrap-hardened"
    args = ("matrix", podman.image, "--presets", presets, "--out", str(tmp_path))
    proc = agentsec(podman, *args, "--max-score", "100")
    assert proc.returncode == 0, proc.stderr
    assert "[1/3] podman-default: measuring" in proc.stdout
    assert "[3/3] bwrap-hardened: score" in proc.stdout
    stem = f"matrix_{podman.image}".replace("/", "_").replace(":", "_")
    table = json.loads((tmp_path / f"{stem}.json").read_text())
    assert table["test"] == "sandbox-blast-radius-matrix"
    assert {row["preset"] for row in table["rows"]} == set(presets.split(","))
    scores = [row["score"] for row in table["rows"]]
    assert scores == sorted(scores, reverse=True)
    markdown = (tmp_path / f"{stem}.md").read_text()
    assert "| podman-hardened" in markdown.replace("\\", "")
    best = min(scores)
    failing = agentsec(podman, *args, "--max-score", str(max(best - 1, 0)))
    assert failing.returncode == (2 if best > 0 else 0), failing.stderr
