"""Names no cage reaches on the internet: the one the gateway answers itself, and those no
runtime grant may ever name. One home, asked by the domain patterns (a cage.yaml may not name
them), the resolver (it answers the policy API's name with the gateway's own address), the
gate and the connector (they never dial it) and the policy API's ceiling (it never grants
the rest, whatever cage.yaml's `policy_api.grantable` says)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

POLICY_API = "agentcage.local"  # the policy API: served by the cage's gateway, for the cage
_NEVER_GRANT_FILE = Path(__file__).parent / "data" / "never_grant.json"


def is_policy_api(host: str | None) -> bool:
    return bool(host) and str(host).rstrip(".").lower() == POLICY_API


@functools.cache
def _never_grant() -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """((suffix, why), ...), ((name, why), ...) from data/never_grant.json."""
    doc = json.loads(_NEVER_GRANT_FILE.read_text())
    suffixes = tuple((e["suffix"], e["why"]) for e in doc["suffixes"])
    names = tuple((name, group["why"]) for group in doc["names"] for name in group["hosts"])
    return suffixes, names


def never_granted(name: str, wildcard: bool = False) -> str | None:
    """Why a runtime grant may never cover `name` (a normalised host name; with `wildcard`,
    every name below it), or None. Special-use and internal names (`.local`, `.internal`),
    metadata services, and hosts that exist to carry data away (paste sites, file drops,
    shorteners, request catchers)."""
    host = name.rstrip(".").lower()
    if host == POLICY_API or (wildcard and POLICY_API.endswith("." + host)):
        return "it is the cage's policy API"
    suffixes, names = _never_grant()
    for suffix, why in suffixes:
        if host == suffix or host.endswith("." + suffix) or (
                wildcard and suffix.endswith("." + host)):
            return why
    for listed, why in names:
        if host == listed or host.endswith("." + listed) or (
                wildcard and listed.endswith("." + host)):
            return why
    return None
