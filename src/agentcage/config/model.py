"""The typed model of cage.yaml: the ONE schema shared by `init`, validation and the backends.

Keys and defaults follow the public agentcage; additions for the namespace backend are
`container.host_user`, `container.rootfs` and the `gateway` section. Unknown keys are errors.
"""

from __future__ import annotations

import json
import os
import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from agentcage.config import syntax
from agentcage.config.spec import CageSpec
from agentcage.config.syntax import (
    is_named_volume,
    parse_published_port,
    parse_size,
    parse_tmpfs,
    parse_volume,
)
from agentcage.domains import DomainPattern, parse_pattern
from agentcage.gateway.capture import CaptureSettings
from agentcage.gateway.control.settings import PolicyApiSettings
from agentcage.gateway.relays.settings import protocols as relay_protocols
from agentcage.gateway.settings import GatewaySettings
from agentcage.gateway.watcher.settings import BudgetSettings, WatcherSettings
from agentcage.inspect.settings import ContentTypeSettings, EntropySettings
from agentcage.names import NAME_RE

# Defaults of what the gateway enforces are declared once, by the gateway's own settings types;
# this schema validates cage.yaml and takes them from there.
_GW, _ENTROPY, _CAPTURE = GatewaySettings, EntropySettings(), CaptureSettings()
_POLICY_API = PolicyApiSettings()
_WATCH, _BUDGETS = WatcherSettings(), BudgetSettings()

ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
AGENT_HOME = "/home/agent"  # the cage's home directory (a tmpfs of its own at every command,
# unless a named volume is mounted there)
MAX_FILES, MAX_FILE_BYTES = 16, 64 * 1024


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Pattern = Annotated[str, AfterValidator(syntax.domain_pattern)]
Port = Annotated[int, Field(ge=1, le=65535)]


def _memory(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("write a size like 2g or 512m, or null for no limit")
    size = value if isinstance(value, int) else parse_size(str(value))
    if size < 32 * 1024**2:
        raise ValueError("at least 32m: an agent cannot start in less")
    return size


class ResourceLimits(Strict):
    """What the cage as a whole may use (every process in it together); null: no limit."""

    # 4 GiB, not less: Node (V8) sizes its heap from the cgroup's limit, and under 4 GiB it
    # takes an old generation under 2 GB that it grows more timidly: `npm install` of 300
    # packages ran 23 full collections against 6 and spent 15% more CPU in a 2 GiB cage
    memory: Annotated[int | None, BeforeValidator(_memory)] = 4 * 1024**3
    pids: Annotated[int, Field(ge=16, le=4_194_304)] | None = 1024
    # CPUs' worth of time; auto: all of the host's but half a CPU, so the host keeps some
    cpu: Annotated[float, Field(gt=0, le=1024)] | Literal["auto"] | None = "auto"


class SeedFile(Strict):
    """A file of the agent's own state, put into a named volume before every command. `merge`:
    a JSON object whose keys are added to the file where it lacks them (objects are merged
    key by key, lists gain the items they lack; a value the file already has is never
    changed). `text`: the file's content, written only when there is no such file. Either
    may name a secret's placeholder, `${placeholder:ENV}` (or its last 20 characters,
    `${placeholder:ENV:last20}`); an entry naming a secret that is not stored is left out."""

    merge: dict[str, object] | None = None
    text: str | None = None

    @model_validator(mode="after")
    def _one(self) -> SeedFile:
        if (self.merge is None) == (self.text is None):
            raise ValueError("write merge: {...} (a JSON object merged into the file) or "
                             "text: ... (written when the file is missing), one of them")
        return self


# An OCI image reference (the distribution spec's grammar, simplified): an optional registry
# host[:port], path components of lowercase letters, digits and separators, then a tag or a
# digest. Anything else could only fail in podman, later and less plainly.
IMAGE_REFERENCE_RE = re.compile(
    r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?(?::\d{1,5})?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?")


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
    # `none`: no limit of any kind, said outright (a rootless cage on a host that delegates no
    # cgroup to its user can enforce none, and refuses limits unless told so)
    limits: ResourceLimits | Literal["none"] = Field(default_factory=ResourceLimits)
    # Files the agent reads at start (its own configuration): cage path under the cage's home
    # -> text. Bound read-only at every command; nothing is written on the host.
    files: dict[str, str] = Field(default_factory=dict)
    # The agent's own state in a named volume: what its first run would ask, answered (see
    # SeedFile). Paths lie under a named volume's container path.
    seed_files: dict[str, SeedFile] = Field(default_factory=dict)
    # Credential files in the host directories (.env, private keys, an .npmrc with a token,
    # cloud credential files) are empty in the cage; `unmask` names those the agent may
    # read (paths relative to their directory, as `create` lists them).
    mask_credentials: bool = True
    unmask: list[str] = Field(default_factory=list)

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: list[str]) -> list[str]:
        seen: set[tuple[str, int]] = set()
        for spec in v:
            address, host_port, _ = parse_published_port(spec)
            if (address, host_port) in seen:
                raise ValueError(f"{address}:{host_port} is published twice; keep one")
            seen.add((address, host_port))
        return v

    @field_validator("image")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        if v is not None and not IMAGE_REFERENCE_RE.fullmatch(v):
            raise ValueError("write an image reference as podman names it: NAME[:TAG] or "
                             "NAME@sha256:DIGEST, e.g. docker.io/library/debian:bookworm-slim")
        return v

    @field_validator("unmask")
    @classmethod
    def _unmask(cls, v: list[str]) -> list[str]:
        for path in v:
            parts = path.strip("/").split("/")
            if path.startswith("/") or not path.strip("/") or ".." in parts:
                raise ValueError(f"{path!r}: write a path relative to the project, as "
                                 "`agentcage create` lists the masked files (e.g. .env)")
        return v

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        if not re.fullmatch(r"\d{1,9}(:\d{1,9})?", v):
            raise ValueError("write UID:GID with numbers, e.g. 1000:1000")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not ENV_NAME_RE.fullmatch(key):
                raise ValueError(f"{key!r} is not a variable name: use letters, digits and _, "
                                 "not starting with a digit")
            if "\0" in value:
                raise ValueError(f"the value of {key} holds a NUL byte, which no environment "
                                 "can carry")
        return v

    @field_validator("files")
    @classmethod
    def _files(cls, v: dict[str, str]) -> dict[str, str]:
        if len(v) > MAX_FILES:
            raise ValueError(f"at most {MAX_FILES} files")
        for path, text in v.items():
            normal = os.path.normpath(path)
            if normal != path or not normal.startswith(AGENT_HOME + "/"):
                raise ValueError(f"{path}: write a path under {AGENT_HOME}/ (the cage's home), "
                                 "e.g. /home/agent/.codex/config.toml")
            if len(text.encode()) > MAX_FILE_BYTES:
                raise ValueError(f"{path}: larger than {MAX_FILE_BYTES // 1024} KiB")
        return v

    @field_validator("volumes")
    @classmethod
    def _volumes(cls, v: list[str]) -> list[str]:
        targets: set[str] = set()
        names: set[str] = set()
        for spec in v:
            source, target, _ = parse_volume(spec)
            if target in targets:
                raise ValueError(f"two volumes at {target}; keep one")
            targets.add(target)
            if is_named_volume(source):
                if source in names:
                    raise ValueError(f"volume {source} is mounted twice; keep one")
                names.add(source)
        return v

    @model_validator(mode="after")
    def _seeds(self) -> Container:
        if len(self.seed_files) > MAX_FILES:
            raise ValueError(f"seed_files: at most {MAX_FILES} files")
        named = [target for source, target, _ in map(parse_volume, self.volumes)
                 if is_named_volume(source)]
        for path, seed in self.seed_files.items():
            normal = os.path.normpath(path)
            where = next((t for t in named if normal.startswith(t.rstrip("/") + "/")), None)
            if normal != path or where is None:
                raise ValueError(
                    f"seed_files: {path} lies under no named volume; write a path inside one "
                    "(volumes: [home:/home/agent], then /home/agent/...)")
            size = len((seed.text if seed.text is not None else json.dumps(seed.merge)).encode())
            if size > MAX_FILE_BYTES:
                raise ValueError(f"seed_files: {path} is larger than {MAX_FILE_BYTES // 1024} KiB")
        return self

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


class Domains(Strict):
    mode: Literal["allowlist", "blocklist"] | None = None
    allow: list[Pattern] = Field(default_factory=list)
    block: list[Pattern] = Field(default_factory=list)
    passthrough: list[Pattern] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_list(self) -> Domains:
        if self.allow and self.block:
            raise ValueError("allow and block cannot both be set; pick one mode")
        if self.mode is None and (self.allow or self.block):
            # without a mode everything is denied: a list there would only look like a policy
            which = "allowlist" if self.allow else "blocklist"
            raise ValueError(f"a list without a mode is ignored (no mode denies everything); "
                             f"add mode: {which}")
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
    env: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]  # Rust regex: $ is the end
    inject_to: list[Pattern]
    inject_headers: bool = True
    inject_body: bool = False
    # Extra header names that carry this credential (besides Authorization, x-api-key and names
    # containing auth/key/token).
    headers: list[Annotated[str, AfterValidator(_header_name)]] = Field(default_factory=list)


def _relay_host(value: str) -> str:
    name = syntax.domain_pattern(value)
    if name.startswith("*."):
        raise ValueError("a relay names one mail host, not a wildcard (e.g. imap.example.com)")
    return name


def _relay_ports(value: list[int]) -> list[int]:
    known = relay_protocols().ports
    for port in value:
        if port not in known:
            names = ", ".join(f"{p} ({k.name})" for p, k in sorted(known.items()))
            raise ValueError(f"{port} is not a mail relay port; the relays speak {names}")
    if len(set(value)) != len(value):
        raise ValueError("a port is listed twice; keep one")
    return value


class Relay(Strict):
    """A mail host the cage reaches through the gateway (IMAPS 993, SMTPS 465, submission
    587), its login's credential the secret `secret`: the cage holds its placeholder, the
    gateway swaps the value into the login toward this host alone."""

    host: Annotated[str, AfterValidator(_relay_host)]
    ports: Annotated[list[int], AfterValidator(_relay_ports), Field(min_length=1)]
    secret: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


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
    # secret:NAME: a secret of this cage (`agentcage secret set CAGE NAME`) that no rule
    # injects, so the cage never holds it; env: and systemd-creds: forms are refused
    api_key: Annotated[str, Field(pattern=r"^(env|systemd-creds|secret):.+$")] | None = None
    timeout_seconds: Annotated[float, Field(gt=0, le=300)] = 30


def _usable_agent(agent: LlmAgent, what: str) -> None:
    """An enabled model of the gateway's own: a model, a key of its own."""
    if not agent.enable:
        return
    if not agent.model:
        raise ValueError(f"model: required for the {what} (e.g. claude-haiku-4-5)")
    if not agent.api_key or not re.fullmatch(r"secret:[A-Za-z_][A-Za-z0-9_]*", agent.api_key):
        raise ValueError("api_key: write secret:NAME and store the key with `agentcage "
                         "secret set CAGE NAME` (it stays on the host, and out of the cage)")


class Decider(LlmAgent):
    """The policy API's `llm` decider (policy_api.deciders names it)."""

    @model_validator(mode="after")
    def _usable(self) -> Decider:
        _usable_agent(self, "decider")
        return self


class Watcher(LlmAgent):
    """The watcher's LLM re-reader (the budgets are the `watcher` section)."""

    interval_seconds: Annotated[int, Field(ge=60)] = 300
    window_seconds: Annotated[int, Field(ge=60)] = 600
    auto_revoke: bool = True

    @model_validator(mode="after")
    def _usable(self) -> Watcher:
        _usable_agent(self, "watcher")
        return self


class Agents(Strict):
    decider: Decider = Field(default_factory=Decider)
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


def _grantable(value: str) -> str:
    from agentcage.domains import parse_pattern
    from agentcage.reserved import never_granted

    pattern = parse_pattern(value)
    if (why := never_granted(pattern.name, wildcard=pattern.wildcard)) is not None:
        raise ValueError(f"{value} is never granted at run time ({why}); an operator who "
                         "needs it lists it in domains.allow")
    return str(pattern)


DeciderName = Literal["rules", "llm", "human"]
_DECIDERS: tuple[DeciderName, ...] = ("rules",)  # as PolicyApiSettings.deciders


class PolicyApi(Strict):
    """The policy API at agentcage.local: the agent lists what it may reach and asks for more;
    `grantable` is the ceiling of what may be granted without the operator."""

    enable: bool = _POLICY_API.enable
    grantable: list[Annotated[str, AfterValidator(_grantable)]] = Field(default_factory=list)
    max_ttl_seconds: Annotated[int, Field(ge=60, le=7 * 86400)] = _POLICY_API.max_ttl_seconds
    max_grants: Annotated[int, Field(ge=1, le=10_000)] = _POLICY_API.max_grants
    deciders: list[DeciderName] = Field(default_factory=lambda: list(_DECIDERS),
                                        min_length=1)
    human_timeout_seconds: Annotated[float, Field(gt=0, le=86400)] = (
        _POLICY_API.human_timeout_seconds)
    requests_per_second: Annotated[float, Field(gt=0, le=10_000)] = (
        _POLICY_API.requests_per_second)
    burst: Annotated[int, Field(ge=1, le=10_000)] = _POLICY_API.burst


def _byte_count(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError("write a size like 16m or 48k")
    return value if isinstance(value, int) else parse_size(str(value))


ByteCount = Annotated[int, BeforeValidator(_byte_count), Field(ge=1024)]


class Budgets(Strict):
    window_seconds: Annotated[float, Field(ge=10, le=86400)] = _BUDGETS.window_seconds
    host_bytes: ByteCount = _BUDGETS.host_bytes
    model_host_bytes: ByteCount = _BUDGETS.model_host_bytes
    information_bytes: ByteCount = _BUDGETS.information_bytes
    zone_names: Annotated[int, Field(ge=2)] = _BUDGETS.zone_names
    label_length: Annotated[int, Field(ge=8, le=63)] = _BUDGETS.label_length
    label_entropy: Annotated[float, Field(gt=0, le=6)] = _BUDGETS.label_entropy
    new_hosts: Annotated[int, Field(ge=1)] = _BUDGETS.new_hosts
    beacon_requests: Annotated[int, Field(ge=4, le=100)] = _BUDGETS.beacon_requests
    beacon_jitter: Annotated[float, Field(ge=0, le=1)] = _BUDGETS.beacon_jitter
    beacon_min_interval: Annotated[float, Field(gt=0)] = _BUDGETS.beacon_min_interval
    reassembly: bool = _BUDGETS.reassembly


class Watch(Strict):
    """The watcher's budgets and actions (the LLM re-reader is agents.watcher)."""

    enable: bool = _WATCH.enable
    action: Literal["record", "revoke"] = "revoke"
    escalate_after: Annotated[int, Field(ge=0, le=1000)] = _WATCH.escalate_after
    quarantine_seconds: Annotated[float, Field(ge=10, le=86400)] = _WATCH.quarantine_seconds
    quarantine_max_seconds: Annotated[float, Field(ge=10, le=7 * 86400)] = (
        _WATCH.quarantine_max_seconds)
    model_hosts: list[Pattern] = Field(default_factory=list)
    budgets: Budgets = Field(default_factory=Budgets)


class Logging(Strict):
    # how much the gateway writes to gateway.log (the audit log is always complete)
    level: Literal["debug", "info", "warning", "error"] = "warning"


class Gateway(Strict):
    uplink: Annotated[str, AfterValidator(syntax.uplink)] = "host"
    trusted_networks: list[Annotated[str, AfterValidator(syntax.network)]] = Field(
        default_factory=list)
    upstream_ca_files: list[str] = Field(default_factory=list)
    connect_timeout_seconds: Annotated[int, Field(ge=1, le=60)] = _GW.connect_timeout_seconds
    first_byte_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = (
        _GW.first_byte_timeout_seconds)
    idle_timeout_seconds: Annotated[float, Field(gt=0, le=3600)] = _GW.idle_timeout_seconds


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
    relays: list[Relay] = Field(default_factory=list)
    rate_limit: RateLimit = Field(default_factory=RateLimit)
    max_request_body: Annotated[int, Field(ge=1)] = _GW.max_request_body
    entropy: Entropy = Field(default_factory=Entropy)
    content_type: ContentType = Field(default_factory=ContentType)
    inspectors: list[CustomInspector] = Field(default_factory=list)
    agents: Agents = Field(default_factory=Agents)
    capture: Capture = Field(default_factory=Capture)
    policy_api: PolicyApi = Field(default_factory=PolicyApi)
    watcher: Watch = Field(default_factory=Watch)
    dns_servers: list[Annotated[str, AfterValidator(syntax.ip)]] = Field(default_factory=list)
    logging: Logging = Field(default_factory=Logging)
    gateway: Gateway = Field(default_factory=Gateway)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("use 1-63 of a-z, 0-9 and '-', starting with a letter or digit")
        return v

    @model_validator(mode="after")
    def _decider(self) -> CageConfig:
        wanted, enabled = "llm" in self.policy_api.deciders, self.agents.decider.enable
        if wanted and not enabled:
            raise ValueError("policy_api.deciders names llm: configure agents.decider (enable: "
                             "true, provider, model, api_key: secret:NAME)")
        if enabled and not wanted:
            raise ValueError("agents.decider is enabled but policy_api.deciders does not name "
                             "llm: add it where it decides, e.g. [llm, human]")
        for which, agent in (("decider", self.agents.decider),
                             ("watcher", self.agents.watcher)):
            key = (agent.api_key or "").removeprefix("secret:")
            if agent.enable and any(r.env == key for r in self.secret_injection):
                raise ValueError(f"agents.{which}.api_key: {key} is injected into requests by "
                                 f"a secret_injection rule; the {which}'s key must be a secret "
                                 "of its own")
            if agent.enable and any(r.secret == key for r in self.relays):
                raise ValueError(f"agents.{which}.api_key: {key} is a mail relay's secret; "
                                 f"the {which}'s key must be a secret of its own")
        if self.agents.watcher.enable and not self.watcher.enable:
            raise ValueError("agents.watcher (the re-reader) acts through the watcher: set "
                             "watcher.enable: true, or turn agents.watcher off")
        return self

    @model_validator(mode="after")
    def _seed_placeholders(self) -> CageConfig:
        from agentcage.seeds import placeholder_names

        rules = self.placeholder_secrets()
        for path, seed in self.container.seed_files.items():
            for env in placeholder_names(seed.text if seed.text is not None else seed.merge):
                if env not in rules:
                    raise ValueError(f"container.seed_files: {path} names the placeholder of "
                                     f"{env}, which no secret_injection rule or relay injects; "
                                     "add one")
        return self

    @model_validator(mode="after")
    def _relays(self) -> CageConfig:
        seen: set[tuple[str, int]] = set()
        for relay in self.relays:
            for port in relay.ports:
                if (relay.host, port) in seen:
                    raise ValueError(f"relays: {relay.host} on port {port} is listed twice; "
                                     "keep one")
                seen.add((relay.host, port))
        taken = sorted({port for _, port in seen} & set(self.ports.tcp.allow))
        if taken:
            raise ValueError(f"relays: port {taken[0]} is also in ports.tcp.allow, which sends "
                             "it to the HTTP proxy; remove it from one of them")
        return self

    def placeholder_secrets(self) -> set[str]:
        """The secrets whose placeholders the cage holds: every secret_injection rule's and
        every mail relay's."""
        return {r.env for r in self.secret_injection} | {r.secret for r in self.relays}

    def spec(self) -> CageSpec:
        """What the services and the backend take: made from the validated form (spec.py)."""
        return CageSpec.of(self.model_dump(mode="json"))
