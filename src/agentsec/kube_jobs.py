"""`agentsec matrix IMAGE --on k8s`: each container preset as a Kubernetes Job, run by kubectl.

A preset's engine flags become the Job's pod (data/k8s_flags.json says how each is rendered; a
flag it has no rendering for leaves the preset out, saying which). The probe's source is a
ConfigMap mounted read-only; its one JSON line is read from the Job's log; the Job, its
ConfigMap and NetworkPolicy are deleted afterwards, whatever happened. Unsaid flags are the
pod's defaults, which is what is measured: a default pod has its service account's token, for
one. `--network none` has no pod equivalent but a NetworkPolicy that allows nothing, enforced
by the cluster's network plugin (a cluster whose plugin ignores NetworkPolicy measures the pod
network, and its row shows it).
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from agentsec.errors import AgentsecError, CaptureError, ProbeRunError
from agentsec.launchers import PROBE_SETTINGS, Preset
from agentsec.runner import ProbeRun, probe_source
from agentsec.untrusted import clean_text, parse_probe_output

PROBE_DIR = "/agentsec"
PROBE_KEY = "blast_probe.py"
LABEL = "agentsec.dev/run"
CONTAINER_ENGINES = ("docker", "podman")
JOB_TIMEOUT_S = 300


class KubeRenderError(AgentsecError):
    """A preset that cannot be said as a pod (a flag with no rendering)."""


@cache
def _table() -> dict[str, Any]:
    text = resources.files("agentsec.data").joinpath("k8s_flags.json").read_text(
        encoding="utf-8")
    return json.loads(text)


@dataclass(frozen=True)
class RenderedJob:
    name: str  # the Job's (and the ConfigMap's, NetworkPolicy's) name
    objects: tuple[dict[str, Any], ...]
    notes: tuple[str, ...]  # what the pod could not say

    def manifest(self) -> str:
        """The objects as one JSON list document (kubectl takes JSON as it takes YAML)."""
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(self.objects)},
                          indent=1)


def _pairs(flags: Sequence[str]) -> list[tuple[str, str]]:
    """(flag, value) pairs: `--flag value`, `--flag=value`, or a flag that takes none."""
    valueless = set(_table()["valueless"])
    pairs, i = [], 0
    while i < len(flags):
        flag = flags[i]
        if "=" in flag:
            name, _, value = flag.partition("=")
            pairs.append((name, value))
        elif flag in valueless:
            pairs.append((flag, ""))
        elif i + 1 < len(flags):
            pairs.append((flag, flags[i + 1]))
            i += 1
        else:
            raise KubeRenderError(f"{flag} without its value")
        i += 1
    return pairs


def _merge(into: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = json.loads(json.dumps(value))


def _user(value: str) -> dict[str, int]:
    uid, _, gid = value.partition(":")
    try:
        ids = {"runAsUser": int(uid)}
        if gid:
            ids["runAsGroup"] = int(gid)
    except ValueError:
        raise KubeRenderError(f"--user {value}: only numeric UID[:GID] can be a pod's") from None
    return ids


def render(preset: Preset, image: str, python: str, env: Mapping[str, str],
           run_id: str = "") -> RenderedJob:
    """The preset's Job, its probe ConfigMap and (for --network none) NetworkPolicy."""
    if preset.engine not in CONTAINER_ENGINES:
        raise KubeRenderError(f"not a container configuration (engine {preset.engine})")
    if preset.runtime:
        raise KubeRenderError(f"runs under the {preset.runtime} runtime, which a Job gets only "
                              "through a RuntimeClass the cluster defines")
    table = _table()["flags"]
    name = f"agentsec-{preset.name}-{run_id or secrets.token_hex(3)}"[:63].rstrip("-")
    security: dict[str, Any] = {}
    limits: dict[str, str] = {}
    volumes: list[dict[str, Any]] = [
        {"name": "probe", "configMap": {"name": name, "defaultMode": 0o444}}]
    mounts: list[dict[str, Any]] = [{"name": "probe", "mountPath": PROBE_DIR, "readOnly": True}]
    notes: list[str] = []
    deny_all = False
    for flag, value in _pairs(preset.flags):
        choices = table.get(flag)
        rendering = None if choices is None else choices.get(value, choices.get("*"))
        if rendering is None:
            said = f"{flag} {value}".strip()
            raise KubeRenderError(f"{said} has no pod equivalent here (data/k8s_flags.json)")
        if "securityContext" in rendering:
            _merge(security, rendering["securityContext"])
        if rendering.get("user"):
            security.update(_user(value))
        if rendering.get("memory"):
            limits["memory"] = value.upper().rstrip("B") + "i" if value[-1:].isalpha() else value
        if rendering.get("tmpfs"):
            path = value.split(":")[0]
            volume = f"tmpfs-{len(volumes)}"
            volumes.append({"name": volume, "emptyDir": {"medium": "Memory"}})
            mounts.append({"name": volume, "mountPath": path})
        if rendering.get("network_none"):
            deny_all = True
        if "unrendered" in rendering:
            notes.append(f"{flag} {value}: {rendering['unrendered']}")
    container: dict[str, Any] = {
        "name": "probe",
        "image": image,
        "command": [python, f"{PROBE_DIR}/{PROBE_KEY}"],
        "env": [{"name": k, "value": env[k]} for k in PROBE_SETTINGS if env.get(k)],
        "volumeMounts": mounts,
    }
    if security:
        container["securityContext"] = security
    if limits:
        container["resources"] = {"limits": limits}
    labels = {LABEL: name, "agentsec.dev/preset": preset.name}
    meta = {"name": name, "labels": labels}
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
         "data": {PROBE_KEY: probe_source()}},
    ]
    if deny_all:  # policyTypes with no rules: nothing in, nothing out
        objects.append({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                        "metadata": meta,
                        "spec": {"podSelector": {"matchLabels": {LABEL: name}},
                                 "policyTypes": ["Ingress", "Egress"]}})
    objects.append({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": JOB_TIMEOUT_S,
                 "template": {"metadata": {"labels": labels},
                              "spec": {"restartPolicy": "Never", "containers": [container],
                                       "volumes": volumes}}},
    })
    return RenderedJob(name, tuple(objects), tuple(notes))


class Kubectl:
    """The Jobs' runner: `kubectl` (or `binary`) against the current context, in `namespace`."""

    def __init__(self, binary: str = "kubectl", namespace: str | None = None,
                 timeout: float = JOB_TIMEOUT_S):
        found = shutil.which(binary)
        if found is None:
            raise AgentsecError(f"{binary} not found: --on k8s runs the Jobs with kubectl "
                                "(or --kubectl PATH)")
        self.argv = [found, *(["--namespace", namespace] if namespace else [])]
        self.timeout = timeout

    def _kubectl(self, *args: str, stdin: str | None = None,
                 timeout: float = 60) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([*self.argv, *args], input=stdin, capture_output=True,
                                  text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ProbeRunError(f"kubectl {args[0]} did not answer in {timeout:.0f} s") from None

    def _wait(self, name: str) -> bool:
        """Until the Job has ended: True when it succeeded, False when it failed."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            got = self._kubectl("get", f"job/{name}", "-o", "json")
            if got.returncode != 0:
                raise ProbeRunError(f"kubectl get job/{name}: {clean_text(got.stderr, 300)}")
            try:
                status = json.loads(got.stdout).get("status", {})
            except ValueError:
                raise ProbeRunError(f"kubectl get job/{name} printed no JSON") from None
            if status.get("succeeded"):
                return True
            if status.get("failed"):
                return False
            time.sleep(1)
        raise ProbeRunError(f"job {name} did not end in {self.timeout:.0f} s")

    def run(self, job: RenderedJob) -> ProbeRun:
        """Apply, wait for the Job to end, read its log, delete it (always)."""
        manifest = job.manifest()
        applied = self._kubectl("apply", "-f", "-", stdin=manifest)
        try:
            if applied.returncode != 0:
                raise ProbeRunError(f"kubectl apply: {clean_text(applied.stderr, 300)}")
            succeeded = self._wait(job.name)
            logs = self._kubectl("logs", f"job/{job.name}")
            try:
                output = parse_probe_output(logs.stdout, source=f"job {job.name}'s log")
            except CaptureError as exc:
                said = clean_text(logs.stderr, 300)
                raise ProbeRunError(f"{exc}{': ' + said if said else ''}") from exc
            return ProbeRun(output=output, rc=0 if succeeded else 1, argv=tuple(self.argv))
        finally:
            self._kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-",
                          stdin=manifest)
