"""A login's credentials swapped: the mail relays' injection (gateway/relays).

HTTP injection (inject.py) swaps placeholders in credential headers by rule and host. A mail
relay has one place a credential belongs, its login (IMAP LOGIN and AUTHENTICATE, SMTP AUTH),
toward the one host the relay names, for the one secret it names. `swap(data, env)` replaces
that secret's placeholders in the decoded login by the value. A placeholder of any other
staged secret refuses the login, and nothing is swapped; one that no staged secret has
(rotated away, never set) stays as it is: an inert string, a wrong password upstream.
A value holding CR, LF or NUL is refused too: in a login it would end a line or a field.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from agentcage.secrets.inject import Injected
from agentcage.secrets.placeholders import PLACEHOLDER_BYTES_RE
from agentcage.secrets.staging import StagedSecret


class CredentialSwap:
    """Built once per staged-secrets version, like the injector; immutable afterwards."""

    def __init__(self, secrets: Sequence[StagedSecret]):
        self._by_token = {s.placeholder.token: s for s in secrets}

    def swap(self, data: bytes, env: str) -> Injected:
        """`data` with `env`'s placeholders replaced by its value (`Injected.value`: bytes),
        or `blocked` with why, and `data` untouched."""
        names: list[str] = []
        refusals: list[str] = []

        def one(m: re.Match[bytes]) -> bytes:
            staged = self._by_token.get(m.group(2).decode())
            if staged is None or staged.env != m.group(1).decode():
                return m.group()
            if staged.env != env:
                refusals.append(f"placeholder of {staged.env} in a login for {env}")
                return m.group()
            if any(c in staged.value for c in b"\r\n\0"):
                refusals.append(f"secret {env} holds a line break or NUL; not put in a login")
                return m.group()
            names.append(env)
            return staged.value

        swapped = PLACEHOLDER_BYTES_RE.sub(one, data)
        if refusals:
            return Injected(data, (), "; ".join(sorted(set(refusals))))
        return Injected(swapped, tuple(sorted(set(names))))


def without_placeholders(data: bytes) -> bytes:
    """`data` with every placeholder taken out: what of a login the inspectors judge (the
    placeholder the relay swaps is the login's own; any other was refused by `swap`)."""
    return PLACEHOLDER_BYTES_RE.sub(b"", data)
