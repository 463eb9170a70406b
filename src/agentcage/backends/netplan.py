"""The cage's network, as data: names, addresses and the `ip` commands that build and remove it.

Per cage, two namespaces with a random suffix: `agc-<suffix>-gw` (the gateway) and
`agc-<suffix>-cg` (the workload), joined by one veth created with both ends already inside
them. That is the whole network: the gateway namespace has no other link and no route out. Its
upstream sockets are made in the uplink namespace (gateway/uplink.py: the host's, or a named
one), so nothing here ever appears in, or changes, the host's namespace. Addresses come from
10.200.128.0/17, below fakenet's service block 10.200.254.0/23: slot k (0..119) owns
10.200.(128+k).0/24, of which the cage link uses .0/30 (gateway .1, cage .2).
"""

from __future__ import annotations

import os

from agentcage.record import record

_FIRST = (10, 200, 128)  # the cages' range, 10.200.128.0/17: its first octets; slots are its /24s
SLOTS = 120  # 10.200.128-247: fakenet keeps 10.200.254.0/23 for its services
NS_PREFIX = "agc-"
GW_CAGE_IF, CAGE_IF = "cage0", "eth0"


def new_suffix() -> str:
    return os.urandom(3).hex()  # what secrets.token_hex(3) is, without importing it


@record
class NetPlan:
    suffix: str
    slot: int
    uplink: str  # "host" | "netns:NAME": where the gateway's upstream sockets are made

    def __post_init__(self) -> None:
        if not 0 <= self.slot < SLOTS:
            raise ValueError(f"slot {self.slot} outside 0..{SLOTS - 1}")

    @property
    def gw_ns(self) -> str:
        return f"{NS_PREFIX}{self.suffix}-gw"

    @property
    def cage_ns(self) -> str:
        return f"{NS_PREFIX}{self.suffix}-cg"

    @property
    def uplink_ns(self) -> str | None:
        return self.uplink.removeprefix("netns:") if self.uplink.startswith("netns:") else None

    def _addr(self, host: int) -> str:
        # plain arithmetic: `exec` reads these, and the ipaddress module is a cost it need not pay
        a, b, c = _FIRST
        return f"{a}.{b}.{c + self.slot}.{host}"

    gateway_address = property(lambda self: self._addr(1))
    cage_address = property(lambda self: self._addr(2))
    cage_network = property(lambda self: f"{self._addr(0)}/30")

    def to_dict(self) -> dict:
        return {"suffix": self.suffix, "slot": self.slot, "uplink": self.uplink}

    @classmethod
    def from_dict(cls, d: dict) -> NetPlan:
        return cls(suffix=str(d["suffix"]), slot=int(d["slot"]), uplink=str(d["uplink"]))


def in_ns(ns: str, argv: list[str]) -> list[str]:
    """Run argv in a network namespace without the /sys remount of `ip netns exec`."""
    return ["nsenter", f"--net=/run/netns/{ns}", "--", *argv]


# One `ip` process per namespace (`-batch`: a command per line), rather than one per step:
# a process start is most of what each step costs.
Batch = tuple[list[str], list[str]]  # (argv, the lines it reads)


def setup_batches(p: NetPlan) -> list[Batch]:
    """The `ip` batches that build the network, in order: the two namespaces (only their
    mount points are made in the caller's namespace), then each one's links, addresses and
    routes, run inside it (`ip -n`). The veth is made inside the gateway namespace with its
    peer moved straight into the cage's."""
    gw, cg = p.gw_ns, p.cage_ns
    return [
        (["ip", "-batch", "-"], [f"netns add {gw}", f"netns add {cg}"]),
        (["ip", "-n", gw, "-batch", "-"], [
            "link set lo up",
            f"link add {GW_CAGE_IF} type veth peer name {CAGE_IF} netns {cg}",
            f"addr add {p.gateway_address}/30 dev {GW_CAGE_IF}",
            f"link set {GW_CAGE_IF} up",
        ]),
        (["ip", "-n", cg, "-batch", "-"], [
            "link set lo up",
            f"addr add {p.cage_address}/30 dev {CAGE_IF}",
            f"link set {CAGE_IF} up",
            f"route add default via {p.gateway_address}",
        ]),
    ]


# The cage namespace's own kernel settings (the gateway's: gateway/firewall.py `sysctls`).
CAGE_SYSCTLS = {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"}


def teardown_batch(p: NetPlan) -> Batch:
    """Idempotent removal: `-force` goes on past a namespace already gone. The veth goes with
    the namespaces."""
    return ["ip", "-force", "-batch", "-"], [f"netns del {p.cage_ns}", f"netns del {p.gw_ns}"]


def free_slot(used: set[int], start: int | None = None) -> int:
    first = int.from_bytes(os.urandom(2)) % SLOTS if start is None else start
    for i in range(SLOTS):
        slot = (first + i) % SLOTS
        if slot not in used:
            return slot
    raise RuntimeError("all cage address slots are in use; destroy or prune cages")
