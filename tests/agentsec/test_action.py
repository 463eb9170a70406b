"""The GitHub Action: action.yml's shape, and its measuring step's script run here for real
(a shipped bubblewrap preset, in a network namespace of its own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO = Path(__file__).parents[2]
SCRIPT = REPO / "scripts" / "action" / "measure.sh"
SARIF_SCHEMA = REPO / "tests" / "data" / "sarif-schema-2.1.0.json"


def test_action_yml_is_a_composite_that_installs_itself_and_always_uploads():
    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    assert {"image", "preset", "flags", "max-score", "baseline"} <= set(action["inputs"])
    assert action["outputs"]["score"]["value"] == "${{ steps.measure.outputs.score }}"
    steps = action["runs"]["steps"]
    install = next(s for s in steps if "pip install" in s.get("run", ""))
    assert "github.action_path" in install["run"]
    measure = next(s for s in steps if s.get("id") == "measure")
    assert "scripts/action/measure.sh" in measure["run"]
    for name in ("image", "preset", "flags", "max-score", "baseline"):
        key = "INPUT_" + name.upper().replace("-", "_")
        assert measure["env"][key] == "${{ inputs." + name + " }}"
    upload = next(s for s in steps if "upload-artifact" in s.get("uses", ""))
    assert upload["if"] == "always()"
    assert steps.index(install) < steps.index(measure) < steps.index(upload)


def _run(tmp_path: Path, **inputs: str) -> tuple[subprocess.CompletedProcess[str], dict, str]:
    outputs, summary = tmp_path / "github_output", tmp_path / "step_summary"
    env = {
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_STEP_SUMMARY": str(summary),
        **{f"INPUT_{k.upper()}": v for k, v in inputs.items()},
    }
    proc = subprocess.run(["unshare", "--net", "bash", str(SCRIPT)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL)
    values = {}
    if outputs.exists():
        for line in outputs.read_text().splitlines():
            key, _, value = line.partition("=")
            values[key] = value
    return proc, values, summary.read_text() if summary.exists() else ""


def _files(tmp_path: Path) -> set[str]:
    return {p.name for p in (tmp_path / "agentsec-reports").iterdir()}


def test_the_measuring_step_writes_everything_and_the_score(tmp_path: Path):
    proc, out, summary = _run(tmp_path, preset="bwrap-hardened", max_score="100",
                              flags="--setenv AGENTSEC_ACTION_TEST 1")
    assert proc.returncode == 0, proc.stderr
    assert out["exit-code"] == "0" and out["score"].isdigit()
    report = json.loads(Path(tmp_path / out["report"]).read_text())
    assert report["summary"]["score"] == int(out["score"])
    assert "AGENTSEC_ACTION_TEST" in report["target"]["flags"]
    assert {"bwrap-hardened.json", "bwrap-hardened.md", "bwrap-hardened.html",
            "bwrap-hardened.sarif", "bwrap-hardened.junit.xml"} <= _files(tmp_path)
    sarif = json.loads((tmp_path / out["sarif"]).read_text())
    jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text())).validate(sarif)
    assert "### agentsec: bwrap-hardened" in summary and f"Score: {out['score']} / 100" in summary


def test_a_failed_gate_fails_the_step_with_exit_2_after_writing_everything(tmp_path: Path):
    proc, out, summary = _run(tmp_path, preset="bwrap-hardened", max_score="0",
                              label="gated run")
    assert proc.returncode == 2, proc.stderr
    assert out["exit-code"] == "2" and int(out["score"]) > 0
    assert {"gated_run.json", "gated_run.html", "gated_run.sarif"} <= _files(tmp_path)
    assert "❌ failed" in summary and "max-score" in summary


@pytest.mark.parametrize(
    ("inputs", "message"),
    [({}, "give a preset, or an image"),
     ({"image": "alpine", "engine": "lxc"}, "engine must be docker or podman")],
)
def test_bad_inputs_fail_with_exit_1_and_say_why(tmp_path: Path, inputs: dict, message: str):
    proc, out, summary = _run(tmp_path, **inputs)
    assert proc.returncode == 1 and message in proc.stderr
    assert out == {"score": "", "exit-code": "1"} and "not measured" in summary


def test_an_image_that_cannot_be_measured_is_exit_1_with_a_summary(tmp_path: Path):
    # The image is not on this machine (nothing is ever pulled): one line, and the step says so.
    proc, out, summary = _run(tmp_path, image="alpine:3", engine="podman",
                              flags="--read-only", label="x")
    assert proc.returncode == 1 and out["exit-code"] == "1" and out["score"] == ""
    assert "not measured" in summary
