"""`agentsec matrix IMAGE --on k8s`: each container preset as a Kubernetes Job.

The Jobs are validated against Kubernetes' schemas (kubernetes-validate, strict). No cluster
runs here, so the matrix is run through a kubectl stand-in (kubectl_on_podman.py, a test
double: its tests say so) that validates what it is given and plays each Job's pod with
`podman kube play`, with no network (the only network podman may have here). What is asserted
is what a person comparing the two would check: the Job of a preset measures what the preset
measures when podman runs it directly, but for what the stand-in itself changes (it plays an
in-memory emptyDir as a host directory: FS-003 on that path alone).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import kubernetes_validate
import pytest

from agentsec.kube_jobs import KubeRenderError, render
from agentsec.launchers import Preset, load_presets
from tests.integration.podman_world import IMAGE, podman_world

STAND_IN = Path(__file__).with_name("kubectl_on_podman.py")
AGENTSEC = str(Path(sys.executable).parent / "agentsec")
CONTAINER_PRESETS = [p for p in load_presets().values()
                     if p.engine in ("docker", "podman") and not p.runtime]


@pytest.mark.parametrize("kubernetes", ["1.29.0", "1.34.0"])
@pytest.mark.parametrize("preset", CONTAINER_PRESETS, ids=lambda p: p.name)
def test_every_container_preset_renders_as_valid_kubernetes_objects(preset, kubernetes):
    job = render(preset, "registry.example.test/agent:1", "python3",
                 {"AGENTSEC_PROBE_TIMEOUT": "3"}, run_id="t")
    for obj in job.objects:
        kubernetes_validate.validate(obj, kubernetes, strict=True)
    (spec,) = [o["spec"]["template"]["spec"] for o in job.objects if o["kind"] == "Job"]
    (container,) = spec["containers"]
    assert container["command"] == ["python3", "/agentsec/blast_probe.py"]
    assert {"name": "AGENTSEC_PROBE_TIMEOUT", "value": "3"} in container["env"]
    policies = [o for o in job.objects if o["kind"] == "NetworkPolicy"]
    assert bool(policies) == ("--network" in preset.flags)
    if "--cap-drop" in preset.flags:
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    if "--pids-limit" in preset.flags:
        assert any("pids" in note for note in job.notes)


def test_a_configuration_a_pod_cannot_say_is_refused_with_why():
    with pytest.raises(KubeRenderError, match="not a container configuration"):
        render(load_presets()["bwrap-hardened"], "x:1", "python3", {})
    odd = Preset("odd", "podman", ("--privileged",), "a flag with no rendering")
    with pytest.raises(KubeRenderError, match="--privileged"):
        render(odd, "x:1", "python3", {})
    # gVisor's presets would be runc's in a pod without the cluster's RuntimeClass for it
    with pytest.raises(KubeRenderError, match="runsc runtime"):
        render(load_presets()["gvisor-hardened"], "x:1", "python3", {})


def _findings(report_path: Path) -> dict[str, list[str]]:
    report = json.loads(report_path.read_text())
    return {f["id"]: f["evidence"] for f in report["summary"]["findings"]}


def test_matrix_on_k8s_through_a_kubectl_stand_in_on_podman_measures_what_podman_does(
        tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    kubectl = tmp_path / "kubectl"
    kubectl.write_text(f"#!/bin/sh\nexec {sys.executable} {STAND_IN} \"$@\"\n")
    kubectl.chmod(0o755)
    with podman_world() as world:
        env = {**os.environ, **world.env, "KUBECTL_STANDIN_STATE": str(state)}

        def matrix(*args: str) -> subprocess.CompletedProcess[str]:
            # the test image has no PATH of its own: the interpreter by its path
            return subprocess.run([AGENTSEC, "matrix", IMAGE, "--python", "/usr/bin/python3",
                                   *args], env=env, capture_output=True, text=True,
                                  timeout=600, cwd=tmp_path)

        on_k8s = matrix("--on", "k8s", "--kubectl", str(kubectl), "--presets",
                        "podman-hardened,docker-readonly,bwrap-ro-root", "--out", "k8s",
                        "--json")
        direct = matrix("--presets", "podman-hardened", "--out", "direct", "--json")
        left = world.podman("ps", "-a", "--filter", "label=agentsec.dev/run", "-q")
    assert on_k8s.returncode == 0, on_k8s.stderr[-2000:]
    assert direct.returncode == 0, direct.stderr[-2000:]
    doc = json.loads(on_k8s.stdout)
    rows = {row["preset"]: row for row in doc["rows"]}
    assert set(rows) == {"podman-hardened", "docker-readonly"}
    assert doc["skipped"] == [{"preset": "bwrap-ro-root",
                               "why": "not a container configuration (engine bwrap)"}]
    assert left.stdout.strip() == ""  # every Job's pod deleted
    (plain,) = json.loads(direct.stdout)["rows"]
    as_job = _findings(tmp_path / rows["podman-hardened"]["report"])
    as_run = _findings(tmp_path / plain["report"])
    if as_job.get("FS-003") == ["/tmp"]:  # the stand-in's emptyDir, a host directory
        del as_job["FS-003"]
    assert set(as_job) == set(as_run), (sorted(as_job), sorted(as_run))
    report = json.loads((tmp_path / rows["podman-hardened"]["report"]).read_text())
    assert report["target"]["engine"] == "kubernetes"
    assert "pids" in report["target"]["how"]  # what the pod could not say, said


def test_without_kubectl_the_matrix_says_so_in_one_line(tmp_path):
    r = subprocess.run([AGENTSEC, "matrix", "x:1", "--on", "k8s", "--kubectl",
                        str(tmp_path / "no-kubectl")], capture_output=True, text=True,
                       timeout=60, cwd=tmp_path)
    assert r.returncode == 1
    (line,) = r.stderr.strip().splitlines()
    assert "no-kubectl not found" in line, textwrap.shorten(r.stderr, 300)
