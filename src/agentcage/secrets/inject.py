"""Injection: placeholders swapped for real values on the wire, only where a rule allows.

Pure functions over headers and text; the gateway calls them after the inspector chain passed.
- Headers (`inject_headers`): only credential-bearing headers of a rule, only toward its hosts.
  `Basic` credentials are decoded, swapped and re-encoded.
- URL, body, WebSocket text (`inject_text`, `inject_url`): only when the rule has `inject_body`.
- A placeholder of a known secret toward a host outside its rule blocks the request (wherever it
  is, encoded or not): that is the cage trying to use a credential where it does not belong.
- Placeholders of unknown or rotated-away secrets are left as they are (they carry nothing).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar
from urllib.parse import quote

from agentcage.secrets.placeholders import ENV_SYNTAX
from agentcage.secrets.rules import InjectionRule
from agentcage.secrets.staging import StagedSecret

Part = Literal["header", "body", "url"]
T = TypeVar("T", str, bytes)

# A placeholder, or one whose ':' were percent-encoded (a query string or a form body).
_SEP = r"(?::|%3[aA])"
_ANY_FORM = rf"agentcage{_SEP}secret{_SEP}({ENV_SYNTAX}){_SEP}([0-9a-f]{{32}})(?![0-9a-f])"
_ANY_RE = re.compile(_ANY_FORM)
_ANY_BYTES_RE = re.compile(_ANY_FORM.encode())
_BASIC_RE = re.compile(r"^(\s*basic\s+)([A-Za-z0-9+/=_-]+)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Injected:
    """Outcome of one call: the new value, what was injected (names only), or why to block."""

    value: object
    injected: tuple[str, ...] = ()
    blocked: str | None = None


@dataclass(frozen=True)
class _Binding:
    secret: StagedSecret
    rule: InjectionRule | None


class Injector:
    def __init__(self, rules: Iterable[InjectionRule], secrets: Sequence[StagedSecret]):
        by_env = {r.env: r for r in rules}
        self._bindings: dict[str, _Binding] = {
            s.placeholder.token: _Binding(s, by_env.get(s.env)) for s in secrets
        }

    def _lookup(self, env: str, token: str) -> _Binding | None:
        binding = self._bindings.get(token)
        if binding is None or binding.secret.env != env:
            return None
        return binding

    def _swap(
        self,
        host: str,
        text: T,
        part: Part,
        header: str | None,
        names: list[str],
        refusals: list[str],
        json_string: bool = False,
    ) -> T:
        """Replace the placeholders in `text` that may be injected; note refusals."""
        pattern = _ANY_BYTES_RE if isinstance(text, bytes) else _ANY_RE

        def one(m: re.Match) -> T:
            env, token = (g.decode() if isinstance(g, bytes) else g for g in m.groups())
            binding = self._lookup(env, token)
            if binding is None:
                return m.group()
            rule = binding.rule
            if rule is None or not rule.allows_host(host):
                refusals.append(f"placeholder of {env} toward wrong host {host}")
                return m.group()
            allowed = (
                rule.inject_headers and header is not None and rule.is_credential_header(header)
                if part == "header"
                else rule.inject_body
            )
            if not allowed:
                return m.group()
            value = binding.secret.value
            if part == "header" and any(c in value for c in b"\r\n\0"):
                # A line break in a header value would let the value write headers of its own.
                refusals.append(f"secret {env} holds control characters; not put in a header")
                return m.group()
            names.append(env)
            whole = m.group()
            encoded = ("%" if isinstance(whole, str) else b"%") in whole
            if part == "url" or encoded:
                value = quote(value, safe="").encode()
            elif json_string:
                value = json.dumps(value.decode("utf-8", "surrogateescape"))[1:-1].encode()
            if isinstance(text, bytes):
                return value
            return value.decode("utf-8", "surrogateescape")

        return pattern.sub(one, text)

    def _basic(
        self, host: str, header: str, value: str, names: list[str], refusals: list[str]
    ) -> str:
        m = _BASIC_RE.match(value)
        if m is None:
            return value
        raw = m.group(2)
        try:
            decoded = base64.b64decode(
                raw + "=" * (-len(raw) % 4), altchars=b"-_" if ("-" in raw or "_" in raw) else None
            )
        except (binascii.Error, ValueError):
            return value
        swapped = self._swap(host, decoded, "header", header, names, refusals)
        if swapped == decoded:
            return value
        return m.group(1) + base64.b64encode(swapped).decode()

    def inject_headers(self, host: str, headers: Iterable[tuple[str, str]]) -> Injected:
        """Headers with placeholders swapped where allowed; `blocked` set on a wrong host."""
        headers = tuple(headers)
        names: list[str] = []
        refusals: list[str] = []
        out: list[tuple[str, str]] = []
        for key, value in headers:
            new = self._basic(host, key, value, names, refusals)
            new = self._swap(host, new, "header", key, names, refusals)
            out.append((key, new))
        return self._result(tuple(headers), tuple(out), names, refusals)

    def inject_text(self, host: str, text: T, json_string: bool = False) -> Injected:
        """A body or WebSocket message (str or bytes) with placeholders swapped if allowed.

        `json_string`: the text is JSON, so values are written JSON-escaped (a quote or a
        backslash in a value must not end the string it lands in)."""
        names: list[str] = []
        refusals: list[str] = []
        new = self._swap(host, text, "body", None, names, refusals, json_string)
        return self._result(text, new, names, refusals)

    def inject_url(self, host: str, path: str) -> Injected:
        """A request path with query; injected values are percent-encoded."""
        names: list[str] = []
        refusals: list[str] = []
        new = self._swap(host, path, "url", None, names, refusals)
        return self._result(path, new, names, refusals)

    @staticmethod
    def _result(original: object, value: object, names: list[str], refusals: list[str]) -> Injected:
        # On a refusal nothing is injected anywhere: the caller gets the request back untouched.
        if refusals:
            return Injected(original, (), "; ".join(sorted(set(refusals))))
        return Injected(value, tuple(sorted(set(names))))
