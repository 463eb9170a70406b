#!/usr/bin/env python3
"""A stand-in for kubectl, for `agentsec matrix --on k8s` where no cluster exists: the four
commands the matrix uses, carried out with `podman kube play`. It is a test double, and its
tests say so in their names.

- `apply -f -`: validates every object against Kubernetes' schemas (kubernetes-validate,
  strict, the version in KUBECTL_STANDIN_K8S), then plays each Job's pod template as a Pod
  (podman 4.3's kube play has no Job kind) with its ConfigMaps; every pod is played with
  `--network none` (this machine gives podman no other network a test may use), so a
  NetworkPolicy that allows nothing is what it is anyway, and one that allows anything is not
  honoured: the rows of network-enabled presets measure no network here.
- `get job/NAME -o json`: the Job's status from its container's (succeeded / failed);
- `logs job/NAME`: its container's output;
- `delete -f -`: the pods and their ConfigMaps, gone.
State (the objects applied) lives in KUBECTL_STANDIN_STATE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import kubernetes_validate
import yaml

STATE = Path(os.environ["KUBECTL_STANDIN_STATE"])
KUBERNETES = os.environ.get("KUBECTL_STANDIN_K8S", "1.34.0")


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=300)


def container(job: str) -> str:
    return f"{job}-probe"  # kube play names a pod's container POD-CONTAINER


def apply(items: list[dict]) -> int:
    for obj in items:
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)
    config_maps = [o for o in items if o["kind"] == "ConfigMap"]
    for job in (o for o in items if o["kind"] == "Job"):
        name = job["metadata"]["name"]
        (STATE / f"{name}.json").write_text(json.dumps(items))
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "labels": job["spec"]["template"]["metadata"]
                            .get("labels", {})},
               "spec": job["spec"]["template"]["spec"]}
        with tempfile.TemporaryDirectory() as scratch:
            pod_file = Path(scratch) / "pod.yaml"
            pod_file.write_text(yaml.safe_dump(pod))
            flags = []
            for i, cm in enumerate(config_maps):
                path = Path(scratch) / f"cm-{i}.yaml"
                path.write_text(yaml.safe_dump(cm))
                flags += ["--configmap", str(path)]
            r = podman("kube", "play", "--network", "none", *flags, str(pod_file))
        if r.returncode != 0:
            print(f"error: podman kube play: {r.stderr.strip()}", file=sys.stderr)
            return 1
        print(f"job.batch/{name} created")
    return 0


def get(name: str) -> int:
    r = podman("inspect", container(name), "--format", "{{.State.Status}} {{.State.ExitCode}}")
    if r.returncode != 0:
        print(f'Error from server (NotFound): jobs.batch "{name}" not found', file=sys.stderr)
        return 1
    state, code = r.stdout.split()
    status: dict[str, int] = {}
    if state in ("exited", "stopped"):
        status["succeeded" if code == "0" else "failed"] = 1
    else:
        status["active"] = 1
    print(json.dumps({"kind": "Job", "metadata": {"name": name}, "status": status}))
    return 0


def logs(name: str) -> int:
    r = podman("logs", container(name))
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    return r.returncode


def delete(items: list[dict]) -> int:
    for job in (o for o in items if o["kind"] == "Job"):
        name = job["metadata"]["name"]
        podman("pod", "rm", "-f", "-t", "0", name)
        (STATE / f"{name}.json").unlink(missing_ok=True)
    return 0


def main(argv: list[str]) -> int:
    while argv[:1] == ["--namespace"]:
        argv = argv[2:]
    if argv[:3] == ["apply", "-f", "-"]:
        return apply(json.loads(sys.stdin.read())["items"])
    if argv[:1] == ["delete"] and argv[-2:] == ["-f", "-"]:
        return delete(json.loads(sys.stdin.read())["items"])
    if argv[:1] == ["get"] and argv[1].startswith("job/") and argv[2:] == ["-o", "json"]:
        return get(argv[1].removeprefix("job/"))
    if argv[:1] == ["logs"] and argv[1].startswith("job/"):
        return logs(argv[1].removeprefix("job/"))
    print(f"kubectl stand-in: {' '.join(argv)} is not one of its commands", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
