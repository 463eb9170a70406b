"""Command-line choices (`run`'s --name, --uplink, --dns, ...) applied to a validated form.

`apply` is what an override does, on plain data; the model's path (load.py `apply_overrides`)
validates the result as a whole. `vouched` is the fast path for a built-in scaffold's stored
form: it checks each new value with the rule the model uses (syntax.py) and applies it
normalised as the model would; whenever it cannot vouch for the result being what the model
makes of it (a value the model refuses, a list that conflicts with the scaffold's, a name
that YAML reads as something else, more than a page of values), it answers None and the
model's path decides, with its own refusal in its own words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentcage.config import syntax
from agentcage.names import NAME_RE

# The scaffolds' YAML says `name: __NAME__`: a name YAML reads as a boolean or null (or, not
# starting with a letter, maybe a number) is no string there, and the model refuses it.
_YAML_WORDS = {"yes", "no", "true", "false", "on", "off", "null"}
# Far inside the bounds load.py puts on a configuration (1 MiB, 100,000 values).
MAX_VALUES, MAX_CHARS = 1000, 16 * 1024


@dataclass(frozen=True)
class Overrides:
    name: str | None = None
    uplink: str | None = None
    dns: Sequence[str] = ()  # replaces dns_servers
    trust: Sequence[str] = ()  # added to gateway.trusted_networks
    upstream_ca: Sequence[str] = ()  # added to gateway.upstream_ca_files (resolved)
    allow: Sequence[str] = ()  # added to domains.allow (mode allowlist if none)
    lifecycle: str | None = None
    host_user: int | None = None  # container.host_user (`--as-user`)


def apply(data: dict[str, Any], o: Overrides) -> dict[str, Any]:
    """`data` (a validated form: changed in place) with `o` applied, not validated."""
    if o.name:
        data["name"] = o.name
    if o.uplink:
        data["gateway"]["uplink"] = o.uplink
    if o.dns:
        data["dns_servers"] = list(o.dns)
    if o.trust:
        data["gateway"]["trusted_networks"] = [*data["gateway"]["trusted_networks"], *o.trust]
    if o.upstream_ca:
        data["gateway"]["upstream_ca_files"] = [*data["gateway"]["upstream_ca_files"],
                                                *(str(Path(p).resolve()) for p in o.upstream_ca)]
    if o.allow:
        data["domains"]["mode"] = data["domains"].get("mode") or "allowlist"
        data["domains"]["allow"] = [*data["domains"].get("allow", []), *o.allow]
    if o.lifecycle:
        data["lifecycle"] = o.lifecycle
    if o.host_user is not None:
        data["container"]["host_user"] = o.host_user
    return data


def vouched(form: dict[str, Any], o: Overrides) -> dict[str, Any] | None:
    """`form` (a scaffold's validated form, for the cage `o.name`: changed in place) with `o`
    applied as the model would apply and normalise it; None if the model must decide."""
    name = o.name
    if not name or not NAME_RE.match(name) or not name[0].isalpha() or name in _YAML_WORDS:
        return None
    values = [name, o.uplink or "", o.lifecycle or "", *o.dns, *o.trust, *o.upstream_ca,
              *o.allow]
    if len(values) > MAX_VALUES or sum(map(len, values)) > MAX_CHARS:
        return None
    if o.lifecycle not in (None, "service", "interactive", "ephemeral"):
        return None
    if o.host_user is not None and (isinstance(o.host_user, bool) or o.host_user < 1):
        return None  # the model refuses it, in its words
    domains = form["domains"]
    if o.allow and (domains["mode"] == "blocklist" or domains["block"]):
        return None  # the model refuses the combination, in its words
    try:
        checked = Overrides(
            name=name,
            uplink=syntax.uplink(o.uplink) if o.uplink else None,
            dns=[syntax.ip(v) for v in o.dns],
            trust=[syntax.network(v) for v in o.trust],
            upstream_ca=o.upstream_ca,
            allow=[syntax.domain_pattern(v) for v in o.allow],
            lifecycle=o.lifecycle,
            host_user=o.host_user,
        )
    except ValueError:
        return None
    doc = apply(form, checked)
    # upstream CA files are any path: only ones that read back from YAML as they are
    if not all(p.isprintable() for p in doc["gateway"]["upstream_ca_files"]):
        return None
    return doc
