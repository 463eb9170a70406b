"""The operator's side of a cage's runtime grants (`agentcage cage grants NAME ...`).

The grants are the gateway's (gateway/control/grants.py): it alone writes grants.json, and this
side reads it. A change goes to the running gateway through the operator's channel
(control/channel.py), which the cage cannot reach; while the cage is stopped nothing else
writes the file, and the change is applied to it here, with the same code.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from agentcage.errors import StateError
from agentcage.state import CageDir

if TYPE_CHECKING:
    from agentcage.cages import CageService


def listing(cage: CageDir) -> dict[str, Any]:
    """grants.json as the gateway last wrote it: {grants: [...], requests: [...]}."""
    try:
        doc = json.loads(cage.grants.read_text())
    except FileNotFoundError:
        return {"grants": [], "requests": []}
    except (OSError, ValueError) as e:
        raise StateError(f"{cage.grants} is unreadable ({e}); the gateway rewrites it at its "
                         "next change") from None
    if not isinstance(doc, dict):
        raise StateError(f"{cage.grants} is not a grants file")
    return {"grants": list(doc.get("grants", [])), "requests": list(doc.get("requests", []))}


def change(service: CageService, cage: CageDir, op: str, target: str = "") -> dict[str, Any]:
    """Apply one operator change (approve, deny, revoke, promote, sync; the watcher's release
    and restore): through the running gateway, or to grants.json and watcher.json while the
    cage is stopped."""
    from agentcage.gateway.control.ceiling import RequestError
    from agentcage.gateway.control.channel import ChannelError, apply, send

    if service.backend.runtime(cage).get("status") == "running":
        try:
            return send(cage.control, op, target)
        except ChannelError as e:
            raise StateError(f"cage {cage.name}: {e}") from None
    if op in ("approve", "deny"):
        raise StateError(f"cage {cage.name} is not running: its pending requests went with its "
                         "gateway")
    if op == "scan":
        raise StateError(f"cage {cage.name} is not running: there is nothing to scan")
    from agentcage.gateway.audit import AuditLog
    from agentcage.gateway.control.grants import Grants
    from agentcage.gateway.control.settings import PolicyApiSettings
    from agentcage.typed import from_mapping

    config = service.config(cage.name)
    settings = from_mapping(PolicyApiSettings, config.policy_api.model_dump(), "policy_api")
    log = AuditLog(cage.audit)  # what is changed is audited here, as the gateway would
    try:
        grants = Grants(settings, cage.grants, log.write_or_say)
        watcher = None
        if config.watcher.enable:
            from agentcage.gateway.watcher.settings import WatcherSettings
            from agentcage.gateway.watcher.watch import Watcher
            from agentcage.inspect.patterns import load_patterns

            watcher = Watcher(from_mapping(WatcherSettings, config.watcher.model_dump(),
                                           "watcher"),
                              log.write_or_say, load_patterns(), grants, cage.watcher)
        return apply(grants, op, target, watcher)
    except RequestError as e:
        raise StateError(str(e)) from None
    finally:
        log.close()


def promote(service: CageService, cage: CageDir, domain: str) -> dict[str, Any]:
    """A grant made lasting: the domain added to the cage's domain list (as `domain add`,
    kept by `cage update`), then the grant released without cutting what uses it."""
    granted = [g for g in listing(cage)["grants"] if domain in (g.get("domain"), g.get("id"))]
    if not granted:
        raise StateError(f"cage {cage.name} has no grant {domain!r}; see `agentcage cage grants "
                         f"{cage.name} list`")
    service.domain_add(cage.name, [granted[0]["domain"]])
    change(service, cage, "promote", granted[0]["id"])
    return {"promoted": granted[0]["domain"]}
