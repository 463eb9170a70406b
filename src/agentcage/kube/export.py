"""`agentcage export k8s`: a cage (by name, or a cage.yaml) as Kubernetes objects, in files.

A cluster runs images: the cage needs `container.image`. The agent runs as a non-root uid in
a pod (cage.yaml's `container.user`, never 0, never the gateway's). What a pod cannot be
told the way one host is (host directories, published ports, a pids limit) is said in a note
line each, not silently dropped. Real keys are written only when asked (`--with-secrets`,
from a stored cage's secret store), into a Secret file of mode 0600; otherwise the command
that makes that Secret is printed, and the pod does not start until it exists.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agentcage.config.spec import CageSpec
from agentcage.errors import ConfigError
from agentcage.kube import layout
from agentcage.kube.objects import FORMS, Exported, export_objects
from agentcage.kube.pod import PodInputs


@dataclass(frozen=True)
class ExportResult:
    exported: Exported
    notes: tuple[str, ...]


def check_exportable(spec: CageSpec) -> None:
    """ConfigError when the cage cannot be a pod as it is written."""
    if not spec.image:
        raise ConfigError(f"cage {spec.name}: export needs an image (a cluster runs images; "
                          "this cage runs the host's own binaries): set container.image, or "
                          "give --image with one that has the agent installed")
    if spec.uid == 0:
        raise ConfigError(f"cage {spec.name}: container.user is root; the exported agent "
                          "runs as non-root (set container.user, e.g. 1000:1000)")
    if spec.uid == layout.GATEWAY_UID:
        raise ConfigError(f"cage {spec.name}: uid {layout.GATEWAY_UID} is the gateway's in "
                          "the pod; its packets alone leave it. Choose another container.user")
    if spec.gateway.get("relays"):
        raise ConfigError(f"cage {spec.name}: relays are not exported to a pod yet (its "
                          "fence passes the gateway's HTTP proxy alone); remove them to export")


def _notes(spec: CageSpec) -> list[str]:
    notes = []
    if spec.published_ports:
        notes.append("container.ports are not exported: the pod takes no connection from "
                     "outside (reach it with kubectl port-forward, which the NetworkPolicy "
                     "does not see, or a Service you add)")
    if spec.pids:
        notes.append("container.limits.pids is not exported: a pod's pids limit is the "
                     "node's (kubelet --pod-max-pids)")
    return notes


def _upstream_ca(spec: CageSpec, base: Path) -> bytes:
    parts = []
    for name in spec.upstream_ca_files:
        path = Path(name) if Path(name).is_absolute() else base / name
        try:
            parts.append(path.read_bytes())
        except OSError as e:
            raise ConfigError(f"gateway.upstream_ca_files: cannot read {path} "
                              f"({e.strerror})") from None
    return b"\n".join(parts)


SECCOMP_CHOICES = ("agentcage", "runtime-default")


def export(spec: CageSpec, form: str, *, base: Path, gateway_image: str = layout.GATEWAY_IMAGE,
           namespace: str | None = None, staged: tuple | None = None,
           seccomp: str = "agentcage", image: str | None = None,
           keys: tuple[str, ...] = ()) -> ExportResult:
    """The cage's objects. `staged`: the stored secrets (StagedSecret) to write into the
    Secret; None mints placeholders and leaves the Secret to the user. `seccomp`: the
    agent's profile, the cage's own ("agentcage", a file for the nodes) or the runtime's.
    `image`: the agent's image, instead of container.image (or for a cage without one).
    `keys`: the secrets the pod gets (default: every secret_injection rule's, or with `staged`
    every stored one); as on one host, a secret the pod does not get has no placeholder in it."""
    from agentcage import policy as policyfile
    from agentcage.secrets.placeholders import mint

    if form not in FORMS:
        raise ConfigError(f"unknown form {form!r}: use one of {', '.join(FORMS)}")
    if image:
        spec = dataclasses.replace(spec, image=image)
    check_exportable(spec)
    if seccomp not in SECCOMP_CHOICES:
        raise ConfigError(f"unknown seccomp profile {seccomp!r}: use one of "
                          f"{', '.join(SECCOMP_CHOICES)}")
    unknown = [env for env in keys if env not in spec.secret_env]
    if unknown:
        raise ConfigError(f"cage {spec.name} has no secret_injection rule for "
                          f"{', '.join(unknown)}; its secrets: "
                          f"{', '.join(spec.secret_env) or 'none'}")
    key_values = None
    if staged is None:
        placeholders = {env: str(mint(env)) for env in keys or spec.secret_env}
    else:
        by_env = {s.env: s for s in staged if s.env in spec.secret_env}
        missing = [env for env in keys if env not in by_env]
        if missing:
            raise ConfigError(f"cage {spec.name} has no stored {', '.join(missing)}: "
                              f"agentcage secret set {spec.name} {missing[0]}")
        chosen = keys or tuple(sorted(by_env))
        placeholders = {env: str(by_env[env].placeholder) for env in chosen}
        key_values = {env: by_env[env].value for env in chosen}
    doc = policyfile.document_from_domains(spec.domain_mode, list(spec.allow), list(spec.block))
    policyfile.compile_document(doc)  # never export what the gateway would refuse
    notes = _notes(spec)
    if seccomp == "runtime-default":
        notes.append("seccomp runtime-default: new user namespaces in the agent's container "
                     "are the runtime's to refuse (containerd's profile does, CRI-O's does not)")
    inputs = PodInputs(spec, gateway_image, placeholders, has_keys=bool(placeholders),
                       seccomp=seccomp, notes=notes)
    exported = export_objects(inputs, form, doc, upstream_ca=_upstream_ca(spec, base),
                              key_values=key_values, namespace=namespace)
    return ExportResult(exported, tuple(inputs.notes))


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the ruleset, JSON files) as literal blocks, readable in review;
    a value used twice written out twice (no &anchors)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> Any:
    style = "|" if "\n" in value and not value.endswith((" ", "\t")) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(objects: tuple[dict, ...]) -> str:
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                         width=100)


def file_name(index: int, obj: dict) -> str:
    return f"{index:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"


def write(exported: Exported, out_dir: Path) -> list[Path]:
    """One file per object, numbered in the order `kubectl apply -f DIR` should meet them. A
    Secret's file is the owner's alone (0600). Files of an earlier export of the same cage
    are replaced; nothing else in the directory is touched."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for i, obj in enumerate(exported.objects, start=1):
        path = out_dir / file_name(i, obj)
        mode = 0o600 if obj["kind"] == "Secret" else 0o644
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "w") as f:
            f.write(to_yaml((obj,)))
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        written.append(path)
    # in a directory below: `kubectl apply -f DIR` (not recursive) reads only the objects
    for relative, text in exported.node_files.items():
        path = out_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def secret_command(exported: Exported, namespace: str | None) -> str | None:
    """How to make the keys' Secret when its values were not exported."""
    if exported.keys_secret is None or exported.keys_included:
        return None
    where = f" -n {namespace}" if namespace else ""
    config = exported.objects[0]["data"]
    chosen = sorted(json.loads(config[layout.PLACEHOLDERS_KEY]))
    literals = " ".join(f"--from-file={env}=FILE" for env in chosen)
    return f"kubectl create secret generic {exported.keys_secret}{where} {literals}"
