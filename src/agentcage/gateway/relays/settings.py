"""What a cage's mail relays are (cage.yaml `relays`, in gateway.json) and what their protocols
are made of (data/mail_relays.json): one home for both the model's validation and the relay."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

_DATA = Path(__file__).resolve().parents[2] / "data" / "mail_relays.json"

Protocol = Literal["imap", "smtp"]
Tls = Literal["implicit", "starttls"]


@dataclass(frozen=True)
class RelaySettings:
    """One mail host the cage reaches through the gateway: on `ports` (993, 465, 587), with
    the login's credential the secret `secret` (the cage holds its placeholder)."""

    host: str
    ports: tuple[int, ...]
    secret: str


@dataclass(frozen=True)
class PortKind:
    protocol: Protocol
    tls: Tls  # implicit: TLS from the first byte; starttls: SMTP's STARTTLS first
    name: str  # IMAPS, SMTPS, submission


@dataclass(frozen=True)
class MailProtocols:
    ports: dict[int, PortKind]
    mechanisms: frozenset[str]  # the SASL mechanisms whose credentials the gateway swaps
    imap_commands: frozenset[str]
    imap_uid_commands: frozenset[str]
    imap_hidden: tuple[str, ...]  # capabilities never advertised ("X=" hides every X=...)
    smtp_commands: frozenset[str]
    smtp_keywords: frozenset[str]  # the EHLO keywords advertised to the cage

    def imap_capability_shown(self, capability: str) -> bool:
        upper = capability.upper()
        if upper.startswith("AUTH="):
            return upper[5:] in self.mechanisms
        return not any(upper.startswith(h) if h.endswith("=") else upper == h
                       for h in self.imap_hidden)


@functools.cache
def protocols() -> MailProtocols:
    doc = json.loads(_DATA.read_text())
    return MailProtocols(
        ports={int(port): PortKind(**kind) for port, kind in doc["ports"].items()},
        mechanisms=frozenset(doc["mechanisms"]),
        imap_commands=frozenset(doc["imap"]["commands"]),
        imap_uid_commands=frozenset(doc["imap"]["uid_commands"]),
        imap_hidden=tuple(doc["imap"]["hidden_capabilities"]),
        smtp_commands=frozenset(doc["smtp"]["commands"]),
        smtp_keywords=frozenset(doc["smtp"]["ehlo_keywords"]),
    )


def relay_ports(relays: tuple[RelaySettings, ...]) -> tuple[int, ...]:
    """Every port the relays listen on, sorted (the firewall opens these on the gateway)."""
    return tuple(sorted({port for relay in relays for port in relay.ports}))
