"""The `secrets` inspector: credentials heading where they do not belong.

Three kinds of evidence, looked for in the host and URL (path and query), the headers and the body,
raw and after decoding (URL, JSON escapes, base64 at any alignment, hex; see decode.py):
- a provider credential format (patterns.py) toward a host outside that provider's domains;
- the real value of one of the cage's secrets toward a host outside its injection rule. The cage
  never holds real values, so this means one got in some other way: critical;
- a placeholder of one of the cage's secrets toward a host outside its rule (high): harmless
  in itself, but the cage trying to spend a credential where it does not belong.
Reasons name the provider or secret and where it was found, never the value.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from agentcage.inspect.decode import DecodeLimits, views
from agentcage.inspect.patterns import PatternSet, load_patterns
from agentcage.inspect.protocol import Decision, InspectionContext, Phase, RequestView
from agentcage.inspect.runs import ByteIndex
from agentcage.secrets import placeholders
from agentcage.secrets.encodings import MIN_ENCODED_LEN
from agentcage.secrets.rules import InjectionRule
from agentcage.secrets.staging import StagedSecret

_HOST_MEMO = 1024


@dataclass(frozen=True)
class _Value:
    env: str
    value: bytes
    token: str  # of its placeholder
    rule: InjectionRule | None

    def allows(self, host: str) -> bool:
        return self.rule is not None and self.rule.allows_host(host)


@dataclass(frozen=True)
class _Foreign:
    """What must not reach one host: real values (long enough to tell) and placeholders."""

    values: tuple[_Value, ...]
    tokens: dict[str, _Value]


def request_parts(request: RequestView) -> Iterator[tuple[str, bytes]]:
    """(where, bytes) of everything a request carries: URL, headers, body."""
    # The host too: a wildcard-allowed domain can carry data in its labels.
    url = f"{request.host}{request.path}".encode("utf-8", "surrogateescape")
    headers = b"\n".join(f"{k}: {v}".encode("utf-8", "surrogateescape") for k, v in request.headers)
    yield "url", url
    yield "headers", headers
    if request.body:
        yield "body", request.body


class SecretsInspector:
    name = "secrets"
    phase: Phase = "body"

    def __init__(
        self,
        patterns: PatternSet | None = None,
        secrets: Sequence[StagedSecret] = (),
        rules: Iterable[InjectionRule] = (),
        limits: DecodeLimits | None = None,
    ):
        self.patterns = patterns if patterns is not None else load_patterns()
        by_env = {r.env: r for r in rules}
        self.secrets = tuple(
            _Value(s.env, s.value, s.placeholder.token, by_env.get(s.env)) for s in secrets
        )
        self.limits = limits or DecodeLimits()
        # Rules are immutable, so what a host may not receive is memoised per host.
        self._foreign: dict[str, _Foreign] = {}

    def _foreign_to(self, host: str) -> _Foreign:
        found = self._foreign.get(host)
        if found is None:
            if len(self._foreign) >= _HOST_MEMO:
                self._foreign.clear()
            banned = [v for v in self.secrets if not v.allows(host)]
            found = self._foreign[host] = _Foreign(
                # Values too short to tell from ordinary text are left to injection rules.
                values=tuple(v for v in banned if len(v.value) >= MIN_ENCODED_LEN),
                tokens={v.token: v for v in banned},
            )
        return found

    def inspect(self, request: RequestView, ctx: InspectionContext) -> Decision:
        host = request.host
        parts = list(request_parts(request))
        if sum(len(data) for _, data in parts) <= self.limits.small:
            # Small request (the common case): one pass over everything, and only when
            # something turns up, a pass per part to say where.
            whole = b"\n".join(data for _, data in parts)
            if self._scan("request", whole, host, ByteIndex(whole)) is None:
                return Decision("allow", "no credentials found", self.name)
        flags: list[str] = []
        for where, data in parts:
            index = request.body_index if where == "body" else ByteIndex(data)
            found = self._scan(where, data, host, index)
            if found is None:
                continue
            if found.action == "block":
                return found
            flags.append(found.reason)
        if flags:
            return Decision("flag", "; ".join(sorted(set(flags))), self.name, "warning")
        return Decision("allow", "no credentials found", self.name)

    def _scan(self, where: str, data: bytes, host: str, index: ByteIndex) -> Decision | None:
        """The first block found in `data`, else a flag, else None."""
        flag: Decision | None = None
        foreign = self._foreign_to(host)
        for v in foreign.values:
            if v.value in data:
                return self._leak(v.env, where, "raw", host)
        if (wrong := self._placeholder(foreign, data, where, "raw", host)) is not None:
            return wrong
        for encoding, view, tokens in views(data, self.limits, self.patterns.anchors, index):
            if encoding != "raw":  # the raw data was checked in full above
                for v in foreign.values:
                    if v.value in view:
                        return self._leak(v.env, where, encoding, host)
                wrong = self._placeholder(foreign, view, where, encoding, host)
                if wrong is not None:
                    return wrong
            for pattern, _match in self.patterns.scan(view, tokens):
                if pattern.allows(host):
                    continue
                reason = (
                    f"{pattern.provider} credential ({pattern.id}) in {where} ({encoding}) "
                    f"toward {host}"
                )
                if pattern.action == "block":
                    return Decision("block", reason, self.name, pattern.severity)
                flag = flag or Decision("flag", reason, self.name, pattern.severity)
        return flag

    def _placeholder(
        self, foreign: _Foreign, text: bytes, where: str, encoding: str, host: str
    ) -> Decision | None:
        """A placeholder of this cage's secrets toward a host outside its rule (the injector
        refuses it too; here it is caught in every encoding and audited by the chain)."""
        if not foreign.tokens or b"agentcage" not in text:
            return None
        for _start, _end, ph in placeholders.find(text):
            v = foreign.tokens.get(ph.token)
            if v is not None and v.env == ph.env:
                return Decision(
                    "block",
                    f"placeholder of {ph.env} in {where} ({encoding}) toward wrong host {host}",
                    self.name,
                    "high",
                )
        return None

    def _leak(self, env: str, where: str, encoding: str, host: str) -> Decision:
        return Decision(
            "block",
            f"real value of secret {env} in {where} ({encoding}) toward {host}, "
            "outside its injection rule",
            self.name,
            "critical",
        )
