"""The typed model of cage.yaml: the ONE schema shared by `init`, validation and the backends.

Keys and defaults follow the public agentcage; additions for the namespace backend are
`container.host_user`, `container.rootfs` and the `gateway` section. Unknown keys are errors.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from agentcage.domains import DomainPattern, parse_pattern
from agentcage.gateway.capture import CaptureSettings
from agentcage.gateway.settings import GatewaySettings
from agentcage.inspect.content_type import ContentTypeSettings
from agentcage.inspect.entropy import EntropySettings
from agentcage.names import NAME_RE

# Defaults of what the gateway enforces are declared once, by the gateway's own settings types;
# this schema validates cage.yaml and takes them from there.
_GW, _ENTROPY, _CAPTURE = GatewaySettings, EntropySettings(), CaptureSettings()

# Host directories that hold credentials or the host itself: never mounted into a cage.
SENSITIVE_HOME_DIRS = (".ssh", ".aws", ".gnupg", ".kube", ".docker", ".config/agentcage")
SENSITIVE_ROOTS = ("/", "/etc", "/root", "/proc", "/sys", "/dev", "/run", "/var/run", "/boot")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _pattern(value: str) -> str:
    return str(parse_pattern(value))


Pattern = Annotated[str, AfterValidator(_pattern)]
Port = Annotated[int, Field(ge=1, le=65535)]


class Volume(Strict):
    host: str
    target: str
    mode: Literal["rw", "ro"] = "rw"


def parse_volume(spec: str) -> Volume:
    parts = str(spec).split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise ValueError("write HOST:CONTAINER[:rw|ro], e.g. .:/workspace:rw")
    mode = parts[2] if len(parts) == 3 else "rw"
    if mode not in ("rw", "ro"):
        raise ValueError(f"mode must be rw or ro, not {mode!r}")
    if not parts[1].startswith("/"):
        raise ValueError("the container path must be absolute, e.g. /workspace")
    host = parts[0]
    home_relative = host[2:] if host.startswith("~/") else None
    normal = str(PurePosixPath(host)).rstrip("/") or "/"
    if normal in SENSITIVE_ROOTS:
        raise ValueError(f"{host} is a host system directory; mount a project directory instead")
    if home_relative is not None or "/home/" in normal or normal.startswith("/root"):
        tail = home_relative if home_relative is not None else normal
        for sensitive in SENSITIVE_HOME_DIRS:
            if f"/{sensitive}" in f"/{tail}/" or tail.startswith(sensitive):
                raise ValueError(f"{host} holds credentials ({sensitive}); it is never mounted")
    return Volume(host=host, target=parts[1], mode=mode)  # type: ignore[arg-type]


class TmpfsMount(Strict):
    target: str
    size_bytes: int | None = None


def parse_tmpfs(spec: str) -> TmpfsMount:
    target, _, opts = str(spec).partition(":")
    if not target.startswith("/"):
        raise ValueError("write /PATH[:options], e.g. /tmp:rw,size=512m")
    size = None
    for opt in filter(None, opts.split(",")):
        if opt.startswith("size="):
            size = _parse_size(opt[5:])
    return TmpfsMount(target=target, size_bytes=size)


def _parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([kmg]?)", text.strip().lower())
    if not m:
        raise ValueError(f"size {text!r} is not like 512m")
    return int(m.group(1)) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[m.group(2)]


class Container(Strict):
    image: str | None = None
    rootfs: str | None = None
    command: list[str] = Field(default_factory=lambda: ["/bin/sh"])
    user: str = "1000:1000"
    host_user: Literal["auto"] | Annotated[int, Field(ge=1)] = "auto"
    read_only: bool = True
    drop_capabilities: list[str] = Field(default_factory=lambda: ["ALL"])
    add_capabilities: list[str] = Field(default_factory=list)
    no_new_privileges: bool = True
    volumes: list[str] = Field(default_factory=lambda: [".:/workspace:rw"])
    tmpfs: list[str] = Field(default_factory=lambda: ["/tmp:rw,nosuid,size=512m"])
    ports: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        if not re.fullmatch(r"\d{1,9}(:\d{1,9})?", v):
            raise ValueError("write UID:GID with numbers, e.g. 1000:1000")
        return v

    @field_validator("volumes")
    @classmethod
    def _volumes(cls, v: list[str]) -> list[str]:
        for spec in v:
            parse_volume(spec)
        return v

    @field_validator("tmpfs")
    @classmethod
    def _tmpfs(cls, v: list[str]) -> list[str]:
        for spec in v:
            parse_tmpfs(spec)
        return v

    @field_validator("drop_capabilities")
    @classmethod
    def _drop(cls, v: list[str]) -> list[str]:
        if [c.upper() for c in v] != ["ALL"]:
            raise ValueError("the cage drops every capability; write [ALL]")
        return ["ALL"]

    @field_validator("add_capabilities")
    @classmethod
    def _add(cls, v: list[str]) -> list[str]:
        if v:
            raise ValueError("the namespace backend grants no capabilities; remove the list")
        return v

    @field_validator("no_new_privileges")
    @classmethod
    def _nnp(cls, v: bool) -> bool:
        if not v:
            raise ValueError("no_new_privileges cannot be turned off; remove the key")
        return v

    @property
    def uid_gid(self) -> tuple[int, int]:
        uid, _, gid = self.user.partition(":")
        return int(uid), int(gid or uid)

    def parsed_volumes(self) -> list[Volume]:
        return [parse_volume(s) for s in self.volumes]

    def parsed_tmpfs(self) -> list[TmpfsMount]:
        return [parse_tmpfs(s) for s in self.tmpfs]


class Domains(Strict):
    mode: Literal["allowlist", "blocklist"] | None = None
    allow: list[Pattern] = Field(default_factory=list)
    block: list[Pattern] = Field(default_factory=list)
    passthrough: list[Pattern] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_list(self) -> Domains:
        if self.allow and self.block:
            raise ValueError("allow and block cannot both be set; pick one mode")
        if self.mode == "blocklist" and self.allow:
            raise ValueError("mode blocklist uses block:, not allow:")
        if self.mode == "allowlist" and self.block:
            raise ValueError("mode allowlist uses allow:, not block:")
        return self

    def patterns(self, key: str) -> list[DomainPattern]:
        return [parse_pattern(p) for p in getattr(self, key)]


class TcpPorts(Strict):
    allow: list[Port] = Field(default_factory=lambda: [80, 443])
    passthrough: list[Port] = Field(default_factory=list)


class UdpPorts(Strict):
    allow: list[Port] = Field(default_factory=list)


class IcmpPorts(Strict):
    allow: bool = False


class Ports(Strict):
    tcp: TcpPorts = Field(default_factory=TcpPorts)
    udp: UdpPorts = Field(default_factory=UdpPorts)
    icmp: IcmpPorts = Field(default_factory=IcmpPorts)


class Secrets(Strict):
    backend: Literal["auto", "systemd-creds", "encrypted-file", "keychain", "plaintext"] = "auto"
    allow_plaintext: bool = False

    @model_validator(mode="after")
    def _plaintext(self) -> Secrets:
        if self.backend == "plaintext" and not self.allow_plaintext:
            raise ValueError("plaintext secrets need allow_plaintext: true as an explicit opt-in")
        return self


def _header_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", value):
        raise ValueError(f"{value!r} is not an HTTP header name")
    return value.lower()


class SecretInjection(Strict):
    env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    inject_to: list[Pattern]
    inject_headers: bool = True
    inject_body: bool = False
    # Extra header names that carry this credential (besides Authorization, x-api-key and names
    # containing auth/key/token).
    headers: list[Annotated[str, AfterValidator(_header_name)]] = Field(default_factory=list)


class RateLimit(Strict):
    requests_per_second: Annotated[float, Field(gt=0)] = _GW.rate_per_second
    burst: Annotated[int, Field(ge=1)] = _GW.rate_burst


class Entropy(Strict):
    enable: bool = _ENTROPY.enable
    body_threshold: Annotated[float, Field(gt=0, le=8)] = _ENTROPY.body_threshold
    body_min_bytes: Annotated[int, Field(ge=1)] = _ENTROPY.body_min_bytes
    value_threshold: Annotated[float, Field(gt=0, le=8)] = _ENTROPY.value_threshold
    value_min_bytes: Annotated[int, Field(ge=1)] = _ENTROPY.value_min_bytes
    # Optional refinements (unset: the inspector's defaults, see docs/cage.md).
    decoded_min_bytes: Annotated[int, Field(ge=16)] | None = None
    decoded_margin: Annotated[float, Field(ge=0, le=2)] | None = None
    header_min_bytes: Annotated[int, Field(ge=16)] | None = None
    header_exempt: list[str] | None = None
    media_action: Literal["flag", "block"] | None = None


class ContentType(Strict):
    enable: bool = ContentTypeSettings.enable
    base64_min_chars: Annotated[int, Field(ge=16)] = ContentTypeSettings.base64_min_chars
    action: Literal["flag", "block"] | None = None


def _import_path(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][\w.]*(:[A-Za-z_]\w*|\.[A-Za-z_]\w*)", value):
        raise ValueError("write an import path, package.module:Factory")
    return value


class CustomInspector(Strict):
    name: Annotated[str, AfterValidator(_import_path)]  # package.module:Factory
    config: dict[str, object] = Field(default_factory=dict)


class LlmAgent(Strict):
    enable: bool = False
    provider: Literal["anthropic", "openai", "openrouter"] = "anthropic"
    model: str | None = None
    api_key: Annotated[str, Field(pattern=r"^(env|systemd-creds):.+$")] | None = None
    timeout_seconds: Annotated[float, Field(gt=0)] = 30


class Watcher(LlmAgent):
    interval_seconds: Annotated[int, Field(ge=60)] = 300
    window_seconds: Annotated[int, Field(ge=60)] = 600
    auto_revoke: bool = True


class Agents(Strict):
    decider: LlmAgent = Field(default_factory=LlmAgent)
    watcher: Watcher = Field(default_factory=Watcher)


class Capture(Strict):
    enable_har: bool = _CAPTURE.enable_har
    max_body_size: Annotated[int, Field(ge=1024**2, le=10 * 1024**2)] = _CAPTURE.max_body_size
    # rotation: capture.jsonl is rotated when a line would take it past max_file_size;
    # max_files files are kept in all (so at most max_files * max_file_size on disk)
    max_file_size: Annotated[int, Field(ge=1024**2)] = _CAPTURE.max_file_size
    max_files: Annotated[int, Field(ge=1, le=100)] = _CAPTURE.max_files
    include_domains: list[Pattern] = Field(default_factory=list)
    exclude_domains: list[Pattern] = Field(default_factory=list)


class Logging(Strict):
    level: Literal["debug", "info", "warning", "error"] = "info"


def _uplink(value: str) -> str:
    if value == "host":
        return value
    if value.startswith("netns:") and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", value[6:]):
        return value
    raise ValueError("write host or netns:NAME (an existing network namespace)")


def _network(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError:
        raise ValueError("write a network in CIDR form, e.g. 10.200.0.0/16") from None


class Gateway(Strict):
    uplink: Annotated[str, AfterValidator(_uplink)] = "host"
    trusted_networks: list[Annotated[str, AfterValidator(_network)]] = Field(default_factory=list)
    upstream_ca_files: list[str] = Field(default_factory=list)
    connect_timeout_seconds: Annotated[int, Field(ge=1, le=60)] = _GW.connect_timeout_seconds
    first_byte_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = (
        _GW.first_byte_timeout_seconds)
    idle_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = _GW.idle_timeout_seconds


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError("write an IP address, e.g. 10.200.0.53") from None


class CageConfig(Strict):
    name: str
    isolation: Literal["auto", "namespace", "container", "apple-container", "vm"] = "auto"
    lifecycle: Literal["service", "interactive", "ephemeral"] = "interactive"
    scaffold: str | None = None
    container: Container = Field(default_factory=Container)
    domains: Domains = Field(default_factory=Domains)
    ports: Ports = Field(default_factory=Ports)
    secrets: Secrets = Field(default_factory=Secrets)
    secret_injection: list[SecretInjection] = Field(default_factory=list)
    rate_limit: RateLimit = Field(default_factory=RateLimit)
    max_request_body: Annotated[int, Field(ge=1)] = _GW.max_request_body
    entropy: Entropy = Field(default_factory=Entropy)
    content_type: ContentType = Field(default_factory=ContentType)
    inspectors: list[CustomInspector] = Field(default_factory=list)
    agents: Agents = Field(default_factory=Agents)
    capture: Capture = Field(default_factory=Capture)
    dns_servers: list[Annotated[str, AfterValidator(_ip)]] = Field(default_factory=list)
    logging: Logging = Field(default_factory=Logging)
    gateway: Gateway = Field(default_factory=Gateway)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("use 1-63 of a-z, 0-9 and '-', starting with a letter or digit")
        return v

    @model_validator(mode="after")
    def _uplink_dns(self) -> CageConfig:
        if self.gateway.uplink.startswith("netns:") and not self.dns_servers:
            raise ValueError("a netns: uplink needs dns_servers naming that network's resolver")
        return self
