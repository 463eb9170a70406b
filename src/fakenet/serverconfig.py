"""The file the host writes and the server process reads: which sockets to open, what DNS says.

Kept apart from both sides so the format has one definition.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

Kind = Literal["dns", "http", "https", "sink", "echo", "imaps", "smtps", "submission"]
Proto = Literal["tcp", "udp"]
KINDS: tuple[str, ...] = ("dns", "http", "https", "sink", "echo", "imaps", "smtps", "submission")


@dataclass(frozen=True)
class Listener:
    kind: Kind
    proto: Proto
    host: str  # a literal address; "0.0.0.0" / "::" for every address of that family
    port: int


@dataclass(frozen=True)
class ServerConfig:
    records_dir: str
    ready_file: str
    parent_pid: int  # the server exits when this process is gone, so no server outlives its owner
    listeners: tuple[Listener, ...]
    # DNS: name -> {"A": [...], "AAAA": [...]}; names not listed get `catch_all` or NXDOMAIN.
    zone: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    catch_all: dict[str, list[str]] | None = None
    ttl: int = 60
    cert_file: str | None = None
    key_file: str | None = None
    sink_idle_timeout: float = 2.0
    http_idle_timeout: float = 30.0
    model_script: str | None = None  # the fake model provider's session (models.py)
    sites_dir: str | None = None  # static sites by host name (sites.py)
    mail_accounts: str | None = None  # the mail servers' accounts, user -> password (JSON)

    @property
    def error_file(self) -> Path:
        """Written instead of the ready file when the servers cannot start: the reason."""
        return Path(self.ready_file + ".error")

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def read(cls, path: Path) -> ServerConfig:
        raw = json.loads(path.read_text())
        listeners = []
        for item in raw.pop("listeners"):
            if item["kind"] not in KINDS or item["proto"] not in ("tcp", "udp"):
                raise ValueError(f"bad listener: {item}")
            listeners.append(Listener(item["kind"], item["proto"], item["host"], int(item["port"])))
        return cls(listeners=tuple(listeners), **raw)
