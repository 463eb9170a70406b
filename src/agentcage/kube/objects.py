"""The Kubernetes objects of an exported cage, around its pod template (pure: dicts).

Three forms of the same pod: a bare `pod`, a one-replica `deployment`, or `agent-sandbox`
(kubernetes-sigs/agent-sandbox v1beta1: a SandboxTemplate holding the pod, a SandboxWarmPool
of it and a SandboxClaim on that pool). Around it, always: the gateway's ConfigMap (settings,
policy, the pod's ruleset, the placeholders), the files' ConfigMap when cage.yaml has files,
the keys' Secret when asked for, and a NetworkPolicy that lets the pod reach only DNS and the
cage's ports (agent-sandbox's template carries the same rules, which its controller applies).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from agentcage import __version__
from agentcage.kube import layout, seccomp
from agentcage.kube.pod import PodInputs, file_contents, pod_spec
from agentcage.kube.podnet import NETFILTER_SCRIPT, render_ruleset

FORMS = ("pod", "deployment", "agent-sandbox")
SANDBOX_GROUP = "extensions.agents.x-k8s.io/v1beta1"


@dataclass(frozen=True)
class Exported:
    """The objects, in the order `kubectl apply` should meet them."""

    objects: tuple[dict, ...]
    keys_secret: str | None  # the Secret the gateway needs (None: the cage has no secrets)
    keys_included: bool  # its values are among the objects (else the user creates it)
    node_files: dict[str, str]  # what the nodes need, not the API server: path -> text


def _metadata(name: str, cage: str, namespace: str | None) -> dict:
    meta: dict[str, Any] = {"name": name, "labels": {layout.LABEL: cage,
                                                     "app.kubernetes.io/managed-by": "agentcage"},
                            "annotations": {"agentcage.dev/version": __version__}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def decided_settings(inputs: PodInputs) -> dict[str, Any]:
    """What the gateway's settings.json holds: cage.yaml's decisions and the pod's ports
    (the sidecar adds its paths)."""
    spec = inputs.spec
    return {
        **spec.gateway,
        "cage_name": spec.name,
        "gateway_address": layout.LOOPBACK,
        "dns_servers": list(spec.dns_servers),
        "tcp_ports": sorted({*spec.tcp_ports, 80, 443}),
        "transparent_port": layout.TRANSPARENT_PORT,
        "regular_port": layout.PROXY_PORT,
        "dns_port": layout.DNS_PORT,
        "trusted_networks": list(spec.trusted_networks),
    }


def gateway_config(inputs: PodInputs, name: str, namespace: str | None,
                   policy: dict, upstream_ca: bytes) -> dict:
    spec = inputs.spec
    data = {
        layout.SETTINGS_KEY: json.dumps(decided_settings(inputs), indent=2, sort_keys=True),
        layout.POLICY_KEY: json.dumps(policy, indent=2, sort_keys=True),
        layout.RULESET_KEY: render_ruleset(spec.tcp_ports),
        layout.NETFILTER_KEY: NETFILTER_SCRIPT,
        layout.PLACEHOLDERS_KEY: json.dumps(inputs.placeholders, indent=2, sort_keys=True),
    }
    if upstream_ca:
        from agentcage.kube.sidecar import UPSTREAM_CA_KEY

        data[UPSTREAM_CA_KEY] = upstream_ca.decode("ascii", "replace")
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _metadata(name, spec.name, namespace), "data": data}


def keys_secret(cage: str, name: str, namespace: str | None, values: dict[str, bytes]) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": _metadata(name, cage, namespace),
            "data": {env: base64.b64encode(v).decode() for env, v in sorted(values.items())}}


def _network_rules(tcp_ports: tuple[int, ...]) -> dict:
    dns = [{"protocol": proto, "port": 53} for proto in ("UDP", "TCP")]
    upstream = [{"protocol": "TCP", "port": p} for p in sorted({*tcp_ports, 80, 443})]
    return {"ingress": [], "egress": [{"ports": dns}, {"ports": upstream}]}


def network_policy(cage: str, name: str, namespace: str | None,
                   tcp_ports: tuple[int, ...]) -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": _metadata(name, cage, namespace),
            "spec": {"podSelector": {"matchLabels": {layout.LABEL: cage}},
                     "policyTypes": ["Ingress", "Egress"], **_network_rules(tcp_ports)}}


def _pod_template(inputs: PodInputs, names: dict[str, str]) -> dict:
    labels = {layout.LABEL: inputs.spec.name, "app.kubernetes.io/managed-by": "agentcage"}
    return {"metadata": {"labels": labels}, "spec": pod_spec(inputs, names)}


def workload(form: str, inputs: PodInputs, names: dict[str, str],
             namespace: str | None) -> list[dict]:
    """The objects that run the pod, in `form`."""
    cage = inputs.spec.name
    template = _pod_template(inputs, names)
    if form == "pod":
        meta = _metadata(names["workload"], cage, namespace)
        meta["labels"].update(template["metadata"]["labels"])
        return [{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}]
    if form == "deployment":
        return [{"apiVersion": "apps/v1", "kind": "Deployment",
                 "metadata": _metadata(names["workload"], cage, namespace),
                 "spec": {"replicas": 1,
                          "selector": {"matchLabels": {layout.LABEL: cage}},
                          # one agent at a time: a rolling update would run two side by side
                          "strategy": {"type": "Recreate"},
                          "template": template}}]
    if form == "agent-sandbox":
        rules = _network_rules(inputs.spec.tcp_ports)
        return [
            {"apiVersion": SANDBOX_GROUP, "kind": "SandboxTemplate",
             "metadata": _metadata(names["workload"], cage, namespace),
             "spec": {"podTemplate": template, "networkPolicyManagement": "Managed",
                      "networkPolicy": rules,
                      # a claim may not add variables: the cage's environment is the export's
                      "envVarsInjectionPolicy": "Disallowed"}},
            {"apiVersion": SANDBOX_GROUP, "kind": "SandboxWarmPool",
             "metadata": _metadata(names["pool"], cage, namespace),
             "spec": {"replicas": 1, "sandboxTemplateRef": {"name": names["workload"]}}},
            {"apiVersion": SANDBOX_GROUP, "kind": "SandboxClaim",
             "metadata": _metadata(names["claim"], cage, namespace),
             "spec": {"warmPoolRef": {"name": names["pool"]}}},
        ]
    raise ValueError(f"unknown form {form!r}: one of {', '.join(FORMS)}")


def object_names(cage: str) -> dict[str, str]:
    return {"config": layout.object_name(cage, "gateway"),
            "files": layout.object_name(cage, "files"),
            "keys": layout.object_name(cage, "keys"),
            "network": layout.object_name(cage),
            "workload": layout.object_name(cage),
            "pool": layout.object_name(cage, "pool"),
            "claim": layout.object_name(cage, "claim")}


def export_objects(inputs: PodInputs, form: str, policy: dict, *, upstream_ca: bytes = b"",
                   key_values: dict[str, bytes] | None = None,
                   namespace: str | None = None) -> Exported:
    """Every object of the cage in `form`. `key_values`: the real keys, to be written into
    the Secret (None: the Secret is left to the user, named in `keys_secret`)."""
    spec = inputs.spec
    names = object_names(spec.name)
    objects = [gateway_config(inputs, names["config"], namespace, policy, upstream_ca)]
    files = file_contents(inputs)
    if files:
        objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": _metadata(names["files"], spec.name, namespace),
                        "data": files})
    if inputs.has_keys and key_values is not None:
        objects.append(keys_secret(spec.name, names["keys"], namespace, key_values))
    if form != "agent-sandbox":
        objects.append(network_policy(spec.name, names["network"], namespace, spec.tcp_ports))
    objects += workload(form, inputs, names, namespace)
    node_files = ({f"seccomp/{seccomp.PROFILE}": seccomp.profile_text()}
                  if inputs.seccomp == "agentcage" else {})
    return Exported(tuple(objects), names["keys"] if inputs.has_keys else None,
                    inputs.has_keys and key_values is not None, node_files)
