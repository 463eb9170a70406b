"""What one version of the staged secrets gives the gateway: the inspector chain, the injector
and the redactor, swapped as one object on reload so that a request sees one version."""

from __future__ import annotations

from dataclasses import dataclass

from agentcage.inspect.protocol import Inspector
from agentcage.secrets.inject import Injector
from agentcage.secrets.redact import Redactor


@dataclass(frozen=True)
class Armour:
    chain: tuple[Inspector, ...]
    injector: Injector
    redactor: Redactor
    names: tuple[str, ...] = ()  # env names of the staged secrets (for the audit)
    placeholders: tuple[str, ...] = ()  # of the staged secrets (for the reload ack)
