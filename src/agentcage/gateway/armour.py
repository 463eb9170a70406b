"""What one version of the staged secrets gives the gateway: the inspector chain, the injector,
the redactor and the mail relays' login swap, swapped as one object on reload so that a
request (or a relay's command) sees one version."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentcage.inspect.protocol import Inspector
from agentcage.secrets.inject import Injector
from agentcage.secrets.redact import Redactor
from agentcage.secrets.swap import CredentialSwap


@dataclass(frozen=True)
class Armour:
    chain: tuple[Inspector, ...]
    injector: Injector
    redactor: Redactor
    names: tuple[str, ...] = ()  # env names of the staged secrets (for the audit)
    placeholders: tuple[str, ...] = ()  # of the staged secrets (for the reload ack)
    # the mail relays' logins (gateway/relays); none swapped by default (a failed reload)
    credentials: CredentialSwap = field(default_factory=lambda: CredentialSwap(()))
