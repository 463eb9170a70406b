"""The gateway's settings (gateway.json): written by the backend, read by the gateway process."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from agentcage.gateway.capture import CaptureSettings
from agentcage.gateway.control.settings import PolicyApiSettings
from agentcage.gateway.relays.settings import RelaySettings
from agentcage.gateway.watcher.settings import WatcherSettings
from agentcage.inspect.settings import ContentTypeSettings, EntropySettings
from agentcage.typed import from_mapping

SINKHOLE_ADDRESS = "198.51.100.1"  # RFC 5737 TEST-NET-2: never routed


@dataclass(frozen=True)
class GatewaySettings:
    cage_name: str
    netns: str  # the gateway namespace, entered before any socket is opened ("" = stay: a pod)
    cage_iface: str  # the gateway's end of the veth to the cage
    gateway_address: str  # gateway address on the cage link; allowed names resolve to it
    cage_network: str  # CIDR of the cage link
    # The uplink: where upstream sockets are made (see uplink.py). "" is the namespace the
    # gateway process was started in (the host's: the one `agentcage` runs in); else the path
    # of a named namespace (/run/netns/NAME).
    uplink_netns: str
    dns_servers: tuple[str, ...]  # upstream resolvers, reached through the uplink
    policy_path: str
    audit_path: str
    ready_path: str
    confdir: str  # mitmproxy confdir: the per-cage CA (private key stays here)
    upstream_ca_path: str  # CA bundle used to verify upstream servers
    # Made by the backend once the cage's network and the firewall are complete: the gateway
    # arms before, and enters its namespace after ("" = at once: a pod's, whose network the
    # pod is)
    network_path: str = ""
    tcp_ports: tuple[int, ...] = (80, 443)
    transparent_port: int = 8443
    regular_port: int = 8080
    dns_port: int = 53
    trusted_networks: tuple[str, ...] = ()
    # A rootless cage's: the keeper's socket handing out a netlink socket of the host's
    # namespace, so that the host's own addresses are refused (see rootless/holder.py)
    host_routes_socket: str = ""
    # A rootless cage's: the keeper's socket handing out listeners on the host's loopback for
    # the published ports (see rootless/hostports.py)
    host_ports_socket: str = ""
    blocked_dns_answer: str = "sinkhole"  # sinkhole | nxdomain
    # Per destination host, sized so that a package install never meets them: `npm install`
    # of 300 packages made 602 requests to its registry in 9 s, 183 of them in its busiest
    # second, on a 2-core machine (tests/agentcage/test_workloads_world.py). A bucket of 2000
    # holds an install three times that size with no refill; 200/s is above the busiest
    # second of a machine several times faster. What stays bounded: a loop hammering one host.
    rate_per_second: float = 200.0
    rate_burst: int = 2000
    connect_timeout_seconds: int = 7
    log_level: str = "warning"  # cage.yaml logging.level: what goes to gateway.log
    first_byte_timeout_seconds: float = 300.0  # from the request leaving to the first answer
    idle_timeout_seconds: float = 120.0  # longest silence of an upstream once it answers
    max_request_body: int = 10 * 1024 * 1024
    counter_interval_seconds: float = 2.0
    # Secrets and inspectors. `secrets_path`: the staged secrets (tmpfs, 0600), read at
    # start and again on SIGHUP; "" = this gateway has none. `reload_ack_path`: written after
    # every (re)load with the outcome, so the CLI knows a rotation is in force.
    policy_ack_path: str = ""  # written after every policy (re)load: which file is in force
    secrets_path: str = ""
    reload_ack_path: str = ""
    secret_injection: tuple[dict, ...] = ()  # cage.yaml secret_injection entries
    # cage.yaml's sections, declared once as the gateway's own settings types; a mapping
    # given for one (the backend passes model dumps) is converted once, here.
    entropy: EntropySettings = field(default_factory=EntropySettings)
    content_type: ContentTypeSettings = field(default_factory=ContentTypeSettings)
    inspectors: tuple[dict, ...] = ()  # cage.yaml custom inspectors: {name, config}
    capture: CaptureSettings = field(default_factory=CaptureSettings)
    capture_path: str = ""  # capture.jsonl ("" = none)
    # The policy API (control/): its settings, grants.json (the gateway alone writes it) and
    # the operator's request directory ("" = none).
    policy_api: PolicyApiSettings = field(default_factory=PolicyApiSettings)
    grants_path: str = ""
    control_dir: str = ""
    # The watcher (watcher/): its budgets and actions, and watcher.json ("" = none), which
    # the gateway alone writes
    watcher: WatcherSettings = field(default_factory=WatcherSettings)
    watcher_path: str = ""
    # Published ports (published.py): (host address, host port, cage port), each a listener
    # made in the uplink namespace and relayed to the cage's address
    published_ports: tuple[tuple[str, int, int], ...] = ()
    cage_address: str = ""
    # Mail relays (relays/): each a mail host the cage reaches on the gateway's address, on
    # its ports (993, 465, 587), its login's credential the named secret
    relays: tuple[RelaySettings, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, kind in (("entropy", EntropySettings), ("content_type", ContentTypeSettings),
                           ("capture", CaptureSettings), ("policy_api", PolicyApiSettings),
                           ("watcher", WatcherSettings)):
            object.__setattr__(self, name, from_mapping(kind, getattr(self, name), name))
        object.__setattr__(self, "relays", tuple(from_mapping(RelaySettings, relay, "relays")
                                                 for relay in self.relays))

    @property
    def proxy_ports(self) -> tuple[int, int]:
        return (self.transparent_port, self.regular_port)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> GatewaySettings:
        raw = json.loads(text)
        known = {f.name for f in fields(cls)}
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"unknown gateway settings: {sorted(unknown)}")
        for key in ("dns_servers", "tcp_ports", "trusted_networks", "secret_injection",
                    "inspectors"):
            if key in raw:
                raw[key] = tuple(raw[key])
        if "published_ports" in raw:
            raw["published_ports"] = tuple((str(a), int(h), int(c))
                                           for a, h, c in raw["published_ports"])
        return cls(**raw)

    @classmethod
    def load(cls, path: Path) -> GatewaySettings:
        return cls.from_json(Path(path).read_text())
