"""The AGENTSEC_PROBE_TARGETS file that points the probe at the fake internet.

Every address in it is one fakenet assigns (10.200.0.0/16, fd0a:200::/32), and every name
resolves only through fakenet's DNS, so a probe run never sends a packet to the real world. In
a client cut off from the internet (blackhole, isolated) the same targets are simply unanswered.
See docs/probe-output.md for the keys.
"""

from __future__ import annotations

import json
from pathlib import Path

from fakenet.zone import DNS_ADDRESS, METADATA_ADDRESS, NETWORK, NETWORK6, Service, Zone

# The probe's own default host names; fakenet's zone resolves each of them.
EGRESS_NAMES = ("dns.google", "pypi.org", "github.com")
IPV6_NAMES = ("dns.google", "github.com")
METADATA_NAME = "metadata.google.internal"
CONTROL_NAME = "example.com"
# Inside 10.200.0.0/16 but assigned to nothing (links use .1-.127, cages .128-.247, services
# .254-.255): like the probe's default TEST-NET-3 control, only a local interceptor answers it.
INTERCEPTION_CONTROL = "10.200.253.254"


def probe_targets(zone: Zone) -> dict[str, object]:
    def service(name: str) -> Service:
        found = zone.lookup(name)
        if found is None:
            raise ValueError(f"the zone lacks {name}, which the probe targets need")
        return found

    return {
        "egress": [*(f"{name}:443" for name in EGRESS_NAMES),
                   # An IP literal on port 53, as the probe's default 1.1.1.1:53 is.
                   f"{service('dns.google').address}:53"],
        "metadata": [f"{METADATA_ADDRESS}:80", f"{METADATA_NAME}:80"],
        "ipv6": [f"[{service(name).address6}]:443" for name in IPV6_NAMES
                 if service(name).address6],
        "udp_dns": f"{DNS_ADDRESS}:53",
        "dns_control": CONTROL_NAME,
        "proxy_control": f"{CONTROL_NAME}:443",
        "public_networks": [str(NETWORK), str(NETWORK6)],
        "interception_control": [f"{INTERCEPTION_CONTROL}:443", f"{INTERCEPTION_CONTROL}:80"],
    }


def write_probe_targets(path: Path, zone: Zone) -> Path:
    path.write_text(json.dumps(probe_targets(zone), indent=1) + "\n")
    return path
