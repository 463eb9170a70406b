"""The exported cage's pod template: the agent's container, the gateway as a native sidecar,
the init container that fences the pod's network, and their volumes (pure: dicts).

What a cage on one host enforces with bubblewrap and namespaces, a pod enforces with its
securityContext and volumes: the agent runs as its non-root uid with every capability dropped,
no privilege escalation, a read-only root (unless cage.yaml says `read_only: false`), no
service-account token and no service links in its environment; its writable places are
volumes of the pod's own. Host directories do not exist in a cluster: each becomes an empty
volume at its cage path (and is said so by export.py).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from agentcage.backends.sandbox import PIVOT_MASKS, WORKSPACE, cage_environment
from agentcage.config.spec import CageSpec
from agentcage.kube import layout, seccomp

DROP_ALL = {"drop": ["ALL"]}
RUNTIME_DEFAULT = {"type": "RuntimeDefault"}


@dataclass(frozen=True)
class PodInputs:
    spec: CageSpec
    gateway_image: str
    placeholders: dict[str, str]  # ENV -> placeholder (what the agent's container holds)
    has_keys: bool  # the cage has secrets: the gateway mounts the keys' Secret
    seccomp: str = "agentcage"  # the agent's profile: "agentcage" (seccomp.py) or "runtime-default"
    notes: list[str] = field(default_factory=list)  # what changed on the way into a pod


def _volume_name(index: int, kind: str) -> str:
    return f"{kind}-{index}"


def _agent_volumes(inputs: PodInputs) -> tuple[list[dict], list[dict]]:
    """(pod volumes, the agent's mounts) for cage.yaml's volumes, tmpfs and the masks."""
    spec = inputs.spec
    volumes: list[dict] = []
    mounts: list[dict] = []
    for i, (source, target, mode) in enumerate(spec.volumes):
        name = _volume_name(i, "dir")
        volumes.append({"name": name, "emptyDir": {}})
        mounts.append({"name": name, "mountPath": target, "readOnly": mode == "ro"})
        inputs.notes.append(f"host directory {source} is an empty volume at {target} "
                            "(a cluster has no host directories: put the project in the "
                            "image, or clone it in)")
    for i, (volume, target, mode) in enumerate(spec.named_volumes):
        name = _volume_name(i, "named")
        volumes.append({"name": name, "emptyDir": {}})
        mounts.append({"name": name, "mountPath": target, "readOnly": mode == "ro"})
        inputs.notes.append(f"named volume {volume} is an emptyDir at {target}: it lasts as "
                            "long as the pod")
    for i, (target, size) in enumerate(spec.tmpfs):
        name = _volume_name(i, "tmpfs")
        memory: dict[str, Any] = {"medium": "Memory"}
        if size:
            memory["sizeLimit"] = str(size)
        volumes.append({"name": name, "emptyDir": memory})
        mounts.append({"name": name, "mountPath": target})
    targets = {m["mountPath"] for m in mounts}
    if not spec.writable_root:  # the places every program writes, as in the cage
        for path, name in (("/tmp", "tmp"), ("/home/agent", "home")):
            if path not in targets:
                volumes.append({"name": name, "emptyDir": {}})
                mounts.append({"name": name, "mountPath": path})
    if WORKSPACE in targets:  # the project's hooks and agent settings, hidden as in the cage
        for i, path in enumerate(PIVOT_MASKS):
            name = _volume_name(i, "mask")
            volumes.append({"name": name, "emptyDir": {}})
            # read-only and empty: the agent plants no hook and no agent settings there
            # (clone a repository into a directory below /workspace, not into it)
            mounts.append({"name": name, "mountPath": f"{WORKSPACE}/{path}", "readOnly": True})
    return volumes, mounts


def _agent_env(inputs: PodInputs) -> list[dict]:
    proxy = f"http://{layout.LOOPBACK}:{layout.PROXY_PORT}"
    user = {**dict(inputs.spec.env), **inputs.placeholders}
    return [{"name": k, "value": v} for k, v in cage_environment(proxy, user, "xterm-256color")]


def agent_seccomp(inputs: PodInputs) -> dict:
    if inputs.seccomp == "agentcage":
        return {"type": "Localhost", "localhostProfile": seccomp.PROFILE}
    return RUNTIME_DEFAULT


def _resources(spec: CageSpec) -> dict:
    limits: dict[str, str] = {}
    if spec.memory:
        limits["memory"] = str(spec.memory)
    if spec.cpus:
        limits["cpu"] = f"{int(spec.cpus * 1000)}m"
    return {"limits": limits} if limits else {}


def agent_container(inputs: PodInputs, mounts: list[dict]) -> dict:
    spec = inputs.spec
    assert spec.image is not None
    container: dict[str, Any] = {
        "name": "agent",
        "image": spec.image,
        "command": list(spec.command),
        "workingDir": WORKSPACE if any(m["mountPath"] == WORKSPACE for m in mounts) else "/",
        "env": _agent_env(inputs),
        # a shell as the command waits on its terminal: `kubectl attach -it` reaches it
        "stdin": True,
        "tty": True,
        "securityContext": {
            "runAsUser": spec.uid,
            "runAsGroup": spec.gid,
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "readOnlyRootFilesystem": not spec.writable_root,
            "capabilities": DROP_ALL,
            "seccompProfile": agent_seccomp(inputs),
        },
        "volumeMounts": [*mounts, {"name": "cage-ca", "mountPath": layout.AGENT_PUBLIC_DIR,
                                   "readOnly": True}],
    }
    resources = _resources(spec)
    if resources:
        container["resources"] = resources
    return container


def netfilter_container(gateway_image: str) -> dict:
    """Loads podnet.py's ruleset and the pod's resolvers, then ends: the one container with a
    capability (NET_ADMIN, over the pod's own network namespace), and it runs before the
    agent's exists."""
    return {
        "name": "netfilter",
        "image": gateway_image,
        "command": ["/bin/sh", f"{layout.CONFIG_DIR}/{layout.NETFILTER_KEY}"],
        "securityContext": {
            "runAsUser": 0,
            "runAsNonRoot": False,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
            "seccompProfile": RUNTIME_DEFAULT,
        },
        "volumeMounts": [{"name": "gateway-config", "mountPath": layout.CONFIG_DIR,
                          "readOnly": True}],
    }


def gateway_container(inputs: PodInputs) -> dict:
    """The gateway, as a native sidecar (an init container that keeps running): it is up,
    its CA written and its resolver answering, before the agent's container starts."""
    mounts = [
        {"name": "gateway-config", "mountPath": layout.CONFIG_DIR, "readOnly": True},
        {"name": "gateway-state", "mountPath": layout.STATE_DIR},
        {"name": "audit", "mountPath": layout.AUDIT_DIR},
        {"name": "cage-ca", "mountPath": layout.PUBLIC_DIR},
    ]
    if inputs.has_keys:
        mounts.append({"name": "keys", "mountPath": layout.KEYS_DIR, "readOnly": True})
    return {
        "name": "gateway",
        "image": inputs.gateway_image,
        "restartPolicy": "Always",
        "command": ["python3", "-m", "agentcage.kube.sidecar"],
        "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
        "startupProbe": {
            "exec": {"command": ["test", "-e", f"{layout.STATE_DIR}/{layout.READY_FILE}"]},
            "periodSeconds": 1,
            "failureThreshold": 60,
        },
        "securityContext": {
            "runAsUser": layout.GATEWAY_UID,
            "runAsGroup": layout.GATEWAY_UID,
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": DROP_ALL,
            "seccompProfile": RUNTIME_DEFAULT,
        },
        "volumeMounts": mounts,
    }


def seeds(inputs: PodInputs) -> list[tuple[str, str, str]]:
    """(files ConfigMap key, cage path, content) of cage.yaml's seed files, their placeholders
    filled in. Into a fresh volume, a merge is its object; a seed naming a secret that has no
    placeholder is left out, as on one host (seeds.py)."""
    from agentcage.seeds import render, render_text

    out = []
    for i, (path, how, content) in enumerate(inputs.spec.seed_files):
        if how == "merge":
            text: str | None = json.dumps(render(json.loads(content), inputs.placeholders),
                                          indent=2) + "\n"
        else:
            text = render_text(content, inputs.placeholders)
        if text is not None:
            out.append((f"seed-{i}", path, text))
    return out


def seed_container(inputs: PodInputs, mounts: list[dict]) -> dict | None:
    """Writes the seed files into the agent's (fresh) volumes, as the agent's uid, before it
    starts (the agent's image has a shell, if not Python); None when there are none."""
    entries = seeds(inputs)
    if not entries:
        return None
    script = ["set -e"]
    for key, path, _text in entries:
        target, source = shlex.quote(path), shlex.quote(f"{layout.FILES_DIR}/{key}")
        script.append(f'mkdir -p "$(dirname {target})"')
        script.append(f"[ -e {target} ] || cp {source} {target}")
    container = agent_container(inputs, mounts)
    return {
        "name": "seed",
        "image": container["image"],
        "command": ["/bin/sh", "-c", "\n".join(script)],
        "securityContext": container["securityContext"],
        "volumeMounts": [*mounts, {"name": "files", "mountPath": layout.FILES_DIR,
                                   "readOnly": True}],
    }


def file_contents(inputs: PodInputs) -> dict[str, str]:
    """The files ConfigMap's keys: container.files and the seed files."""
    data = {key: text for key, _path, text in seeds(inputs)}
    for i, (_path, text) in enumerate(inputs.spec.files):
        data[f"file-{i}"] = text
    return data


def pod_spec(inputs: PodInputs, names: dict[str, str]) -> dict:
    """The pod's spec; `names`: the ConfigMaps' and the Secret's object names."""
    spec = inputs.spec
    volumes, mounts = _agent_volumes(inputs)
    for i, (path, _text) in enumerate(spec.files):  # read-only, one file each
        mounts.append({"name": "files", "mountPath": path, "subPath": f"file-{i}",
                       "readOnly": True})
    agent = agent_container(inputs, mounts)
    seed = seed_container(inputs, [m for m in mounts if "subPath" not in m])
    volumes += [
        {"name": "gateway-config", "configMap": {"name": names["config"]}},
        {"name": "gateway-state", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
        {"name": "audit", "emptyDir": {}},
        {"name": "cage-ca", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
    ]
    if file_contents(inputs):
        volumes.append({"name": "files", "configMap": {"name": names["files"]}})
    if inputs.has_keys:
        # mounted by the gateway's container alone (the agent's has no path to it); read-only
        volumes.append({"name": "keys", "secret": {"secretName": names["keys"],
                                                   "defaultMode": 0o444}})
    init = [netfilter_container(inputs.gateway_image), gateway_container(inputs)]
    if seed is not None:
        init.append(seed)
    return {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "shareProcessNamespace": False,
        "restartPolicy": "Always",
        "securityContext": {"seccompProfile": RUNTIME_DEFAULT},
        "initContainers": init,
        "containers": [agent],
        "volumes": volumes,
    }
