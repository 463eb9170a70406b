"""The syntax of cage.yaml's values, without pydantic: one rule each, shared by the model's
validation (model.py), the backend's settings (spec.py) and command-line overrides applied to
a built-in scaffold's stored form (scaffolds.py), so that none of them accepts what another
refuses. Each raises ValueError with the message a user reads; each normalising rule returns
the form the model stores.
"""

from __future__ import annotations

import os
import re

from agentcage.mounts import target_refusal, written_source_refusal

MAX_CONFIG_BYTES = 1024 * 1024  # a cage.yaml is a page of settings (see load.py's bounds)

_UPLINK_NS = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_SIZE = re.compile(r"(\d+)([kmg]?)")
_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}

# plain tuples: `run` reads these on every start, and a class per shape costs more to make
type Volume = tuple[str, str, str]  # (host path as written, or a volume's name; cage path, rw|ro)
# A named volume's name, as Docker and podman spell one: a bare word (no slash), so a host
# directory beside cage.yaml is written ./data and `data` is a volume the cage keeps.
_VOLUME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
type TmpfsMount = tuple[str, int | None]  # (cage path, size in bytes or None)


def parse_volume(spec: str) -> Volume:
    """`HOST:CONTAINER[:rw|ro]` (a host directory) or `NAME:CONTAINER[:rw|ro]` (a named
    volume: a bare word, see `is_named_volume`)."""
    parts = str(spec).split(":")
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise ValueError("write HOST:CONTAINER[:rw|ro] (e.g. .:/workspace:rw) or "
                         "NAME:CONTAINER for a named volume (e.g. home:/home/agent)")
    mode = parts[2] if len(parts) == 3 else "rw"
    if mode not in ("rw", "ro"):
        raise ValueError(f"mode must be rw or ro, not {mode!r}")
    source_refusal = None if is_named_volume(parts[0]) else written_source_refusal(parts[0])
    for refusal in (target_refusal(parts[1]), source_refusal):
        if refusal:
            raise ValueError(refusal)
    return parts[0], parts[1], mode


# (host address, host port, cage port): a listener on the host's loopback relayed into the cage
type PublishedPort = tuple[str, int, int]
_PUBLISHED = re.compile(r"(?:(\d{1,3}(?:\.\d{1,3}){3}):)?(\d{1,5}):(\d{1,5})(?:/tcp)?")


def parse_published_port(spec: str) -> PublishedPort:
    """`[127.0.0.1:]HOST_PORT:CAGE_PORT[/tcp]`, as podman and Docker write a published port,
    on the host's loopback only (a cage is never reachable from another machine)."""
    import ipaddress

    found = _PUBLISHED.fullmatch(str(spec).strip())
    if found is None:
        raise ValueError(f"{spec!r}: write [127.0.0.1:]HOST_PORT:CAGE_PORT, e.g. "
                         "127.0.0.1:18789:18789 (TCP only)")
    address, host_port, cage_port = found.group(1) or "127.0.0.1", *map(int, found.groups()[1:])
    try:
        loopback = ipaddress.IPv4Address(address).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"{spec!r}: a cage's port is published on the host's loopback only "
                         "(127.0.0.1), never on an address another machine reaches")
    for port in (host_port, cage_port):
        if not 1 <= port <= 65535:
            raise ValueError(f"{spec!r}: {port} is not a port (1-65535)")
    return address, host_port, cage_port


def is_named_volume(source: str) -> bool:
    """A volume source that names a volume the cage keeps, not a host directory."""
    return _VOLUME_NAME.fullmatch(source) is not None


def parse_tmpfs(spec: str) -> TmpfsMount:
    target, _, opts = str(spec).partition(":")
    if not target.startswith("/"):
        raise ValueError("write /PATH[:options], e.g. /tmp:rw,size=512m")
    size = None
    for opt in filter(None, opts.split(",")):
        if opt.startswith("size="):
            size = parse_size(opt[5:])
    return target, size


def parse_size(text: str) -> int:
    m = _SIZE.fullmatch(text.strip().lower())
    if not m:
        raise ValueError(f"size {text!r} is not like 512m")
    return int(m.group(1)) * _SIZE_UNITS[m.group(2)]


def cpus(cpu: float | str | None) -> float | None:
    """CPUs' worth of time a `cpu:` limit grants; auto: all of the host's but half a CPU, so
    the host keeps some."""
    if cpu == "auto":
        count = os.cpu_count() or 1
        return max(0.5, count - 0.5)
    return None if cpu is None else float(cpu)


def uid_gid(user: str) -> tuple[int, int]:
    """`container.user` (UID[:GID], already validated) as numbers."""
    uid, _, gid = user.partition(":")
    return int(uid), int(gid or uid)


def uplink(value: str) -> str:
    if value == "host":
        return value
    if value.startswith("netns:") and _UPLINK_NS.fullmatch(value[6:]):
        return value
    raise ValueError("write host or netns:NAME (an existing network namespace)")


def network(value: str) -> str:
    import ipaddress

    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError:
        raise ValueError("write a network in CIDR form, e.g. 10.200.0.0/16") from None


def ip(value: str) -> str:
    import ipaddress

    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError("write an IP address, e.g. 10.200.0.53") from None


def domain_pattern(value: str) -> str:
    from agentcage.domains import parse_pattern

    return str(parse_pattern(value))
