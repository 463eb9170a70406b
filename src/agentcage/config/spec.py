"""What the cage services and the namespace backend take: a validated cage.yaml as one flat,
typed parameter object, without pydantic.

A `CageSpec` is made from the configuration's *validated form*: the JSON document the model
produces (`CageConfig.model_dump(mode="json")`, the same document the state directory keeps
as cage.yaml), or a built-in scaffold's stored copy of it (forms.py), so that `run` of a
scaffold needs neither pydantic nor YAML parsing. Nothing here validates: the model did; the
values are only read, with the shared value syntax (syntax.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentcage.config.syntax import (
    PublishedPort,
    TmpfsMount,
    Volume,
    cpus,
    is_named_volume,
    parse_published_port,
    parse_tmpfs,
    parse_volume,
    uid_gid,
)

# The gateway settings (gateway/settings.py) that cage.yaml decides, and where they are in it.
_GATEWAY_SETTINGS = {
    "rate_per_second": ("rate_limit", "requests_per_second"),
    "rate_burst": ("rate_limit", "burst"),
    "connect_timeout_seconds": ("gateway", "connect_timeout_seconds"),
    "first_byte_timeout_seconds": ("gateway", "first_byte_timeout_seconds"),
    "idle_timeout_seconds": ("gateway", "idle_timeout_seconds"),
    "log_level": ("logging", "level"),
    "max_request_body": ("max_request_body",),
}


@dataclass(frozen=True)
class CageSpec:
    document: Mapping[str, Any]  # the validated form (written to the state directory)
    name: str
    lifecycle: str
    # the workload
    command: tuple[str, ...]
    host_user: int | None  # None: auto (chosen at create, see backends/profile.py)
    uid: int
    gid: int
    volumes: tuple[Volume, ...]  # host directories, as written (resolved at create)
    named_volumes: tuple[Volume, ...]  # (name, cage path, rw|ro): kept by the cage
    tmpfs: tuple[TmpfsMount, ...]
    env: tuple[tuple[str, str], ...]
    files: tuple[tuple[str, str], ...]  # (cage path, text)
    # (cage path, "merge" | "text", content): merge's content is its object as JSON text
    seed_files: tuple[tuple[str, str, str], ...]
    # env names with an injection rule or a mail relay: placeholders in the cage
    secret_env: tuple[str, ...]
    mask_credentials: bool  # credential files in the host directories: empty in the cage
    unmask: tuple[str, ...]  # ...but these (relative paths)
    image: str | None  # an image whose files are the cage's root (backends/layers.py)
    writable_root: bool  # container.read_only false: the workload writes its (image's) root
    published_ports: tuple[PublishedPort, ...]  # host loopback -> cage (gateway/published.py)
    memory: int | None
    pids: int | None
    cpus: float | None
    # the domains, the secrets and the network
    domain_mode: str | None
    allow: tuple[str, ...]
    block: tuple[str, ...]
    secrets_backend: str
    allow_plaintext: bool
    uplink: str
    dns_servers: tuple[str, ...]
    upstream_ca_files: tuple[str, ...]
    trusted_networks: tuple[str, ...]
    tcp_ports: tuple[int, ...]
    # the rest of what the gateway enforces: GatewaySettings' own names and types
    gateway: Mapping[str, Any]

    @classmethod
    def of(cls, doc: Mapping[str, Any]) -> CageSpec:
        """The spec of a validated form (a document the model produced)."""
        container, domains, gateway = doc["container"], doc["domains"], doc["gateway"]
        limits = container["limits"]
        if limits == "none":
            limits = {"memory": None, "pids": None, "cpu": None}
        host_user = container["host_user"]
        uid, gid = uid_gid(container["user"])
        rules = doc["secret_injection"]
        volumes = [parse_volume(v) for v in container["volumes"]]
        seeds = []
        for path, seed in sorted(container.get("seed_files", {}).items()):
            if seed.get("merge") is not None:
                seeds.append((path, "merge", json.dumps(seed["merge"], sort_keys=True)))
            else:
                seeds.append((path, "text", seed["text"]))
        settings: dict[str, Any] = {}
        for key, path in _GATEWAY_SETTINGS.items():
            value: Any = doc
            for part in path:
                value = value[part]
            settings[key] = value
        settings.update(
            secret_injection=tuple(dict(r) for r in rules),
            entropy=_present(doc["entropy"]),
            content_type=_present(doc["content_type"]),
            inspectors=tuple(dict(i) for i in doc["inspectors"]),
            capture=dict(doc["capture"]),
            policy_api=_policy_api(doc),
            watcher=_watcher(doc),
            # (a form stored before the relays existed has none)
            relays=tuple(dict(r) for r in doc.get("relays", ())),
        )
        return cls(
            document=doc,
            name=doc["name"],
            lifecycle=doc["lifecycle"],
            command=tuple(container["command"]),
            host_user=None if host_user == "auto" else int(host_user),
            uid=uid,
            gid=gid,
            volumes=tuple(v for v in volumes if not is_named_volume(v[0])),
            named_volumes=tuple(v for v in volumes if is_named_volume(v[0])),
            tmpfs=tuple(parse_tmpfs(t) for t in container["tmpfs"]),
            env=tuple(sorted(container["env"].items())),
            files=tuple(sorted(container["files"].items())),
            seed_files=tuple(seeds),
            secret_env=tuple(sorted({r["env"] for r in rules}
                                    | {r["secret"] for r in doc.get("relays", ())})),
            # (forms stored before masking existed have neither key: the defaults)
            mask_credentials=bool(container.get("mask_credentials", True)),
            unmask=tuple(container.get("unmask", ())),
            image=container.get("image") or None,
            writable_root=not container.get("read_only", True),
            published_ports=tuple(parse_published_port(p) for p in container.get("ports", ())),
            memory=limits["memory"],
            pids=limits["pids"],
            cpus=cpus(limits["cpu"]),
            domain_mode=domains["mode"],
            allow=tuple(domains["allow"]),
            block=tuple(domains["block"]),
            secrets_backend=doc["secrets"]["backend"],
            allow_plaintext=doc["secrets"]["allow_plaintext"],
            uplink=gateway["uplink"],
            dns_servers=tuple(doc["dns_servers"]),
            upstream_ca_files=tuple(gateway["upstream_ca_files"]),
            trusted_networks=tuple(gateway["trusted_networks"]),
            tcp_ports=tuple(sorted(set(doc["ports"]["tcp"]["allow"]))),
            gateway=settings,
        )


def _policy_api(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The gateway's policy API settings: cage.yaml's section, with its `llm` decider from
    agents.decider."""
    settings = dict(doc["policy_api"])
    decider = doc["agents"]["decider"]
    if decider["enable"]:
        settings.update(llm_provider=decider["provider"], llm_model=decider["model"],
                        llm_key=str(decider["api_key"]).removeprefix("secret:"),
                        llm_timeout_seconds=decider["timeout_seconds"])
    return settings


def _watcher(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The gateway's watcher settings: cage.yaml's section (a form stored before the watcher
    existed has none: the defaults), with its re-reader from agents.watcher."""
    settings = dict(doc.get("watcher") or {})
    reader = doc["agents"]["watcher"]
    if reader["enable"]:
        settings.update(llm_provider=reader["provider"], llm_model=reader["model"],
                        llm_key=str(reader["api_key"]).removeprefix("secret:"),
                        llm_timeout_seconds=reader["timeout_seconds"],
                        llm_interval_seconds=reader["interval_seconds"],
                        llm_window_seconds=reader["window_seconds"],
                        llm_auto_revoke=reader["auto_revoke"])
    return settings


def _present(section: Mapping[str, Any]) -> dict[str, Any]:
    """A section's keys that are set (unset optional refinements take the gateway's defaults)."""
    return {k: v for k, v in section.items() if v is not None}
