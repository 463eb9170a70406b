"""Redaction: every real secret value replaced by its placeholder, in whatever encoding it came.

Used on responses before the cage sees them, and (`find`) to notice a real value leaving in a
request. Literal forms (raw, URL-encoded, JSON-escaped, hex) are swapped for the placeholder in
the same encoding. Base64 is decoded around the match (any offset, standard or URL-safe
alphabet, Basic auth included), redacted, and re-encoded, so the text decodes to the
placeholder. Pure functions over bytes; no mitmproxy here.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agentcage.secrets.encodings import STD, URLSAFE, Core, base64_cores, literal_forms
from agentcage.secrets.staging import StagedSecret

# Both alphabets together: a run is found first, then its own characters tell which it is.
_EITHER = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_"
_RUN_END = re.compile(b"[A-Za-z0-9+/_-]*=*")
_TO_STD = bytes.maketrans(b"-_", b"+/")
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_MAX_DEPTH = 2  # base64 inside base64 inside the body


@dataclass(frozen=True)
class Redaction[T: (bytes, str)]:
    data: T  # the same type that was given
    names: frozenset[str]  # env names of the secrets that were found and replaced


@dataclass(frozen=True)
class _CoreOf:
    env: str
    core: Core
    value: bytes
    placeholder: bytes
    placeholder_core: bytes


def _alternation(keys: Iterable[bytes]) -> re.Pattern[bytes] | None:
    ordered = sorted(set(keys), key=len, reverse=True)
    if not ordered:
        return None
    return re.compile(b"|".join(re.escape(k) for k in ordered))


class Redactor:
    """Built once per staged-secrets version; immutable afterwards. Its two expressions (an
    alternation of every form of every value: a few ms to compile for one secret) are compiled
    when first used, or by `compile`: a gateway compiles them once it is ready, not while the
    cage waits for it."""

    def __init__(self, secrets: Sequence[StagedSecret]):
        self._literals: dict[bytes, tuple[bytes, str]] = {}
        self._cores: dict[bytes, _CoreOf] = {}
        self._values: dict[bytes, tuple[bytes, str]] = {}
        for s in secrets:
            if not s.value:
                continue
            ph = str(s.placeholder).encode()
            self._values[s.value] = (ph, s.env)
            for form in literal_forms(s.value, ph):
                self._literals.setdefault(form.value_form, (form.placeholder_form, s.env))
                if form.encoding == "hex":
                    continue  # base64 of hex is not an encoding anyone echoes a value in
                # Base64 of the other forms: a server may base64 a JSON or URL it built.
                twins = {(c.alphabet, c.shift): c.text for c in base64_cores(form.placeholder_form)}
                for core in base64_cores(form.value_form):
                    twin = twins[(core.alphabet, core.shift)]
                    hit = _CoreOf(s.env, core, form.value_form, form.placeholder_form, twin)
                    self._cores.setdefault(core.text, hit)
        self._literals_longest_first = sorted(self._literals, key=len, reverse=True)

    @functools.cached_property
    def _literal_re(self) -> re.Pattern[bytes] | None:
        return _alternation(self._literals)

    @functools.cached_property
    def _core_re(self) -> re.Pattern[bytes] | None:
        return _alternation(self._cores)

    def compile(self) -> None:
        """Compile both expressions now (idempotent)."""
        _ = self._literal_re, self._core_re

    @property
    def empty(self) -> bool:
        return not self._values

    @property
    def forms(self) -> tuple[bytes, ...]:
        """Every byte string whose presence means a real value is there: the literal forms
        and the base64 cores (what a streaming redactor must never cut in two)."""
        return (*self._literals, *self._cores)

    def form_end(self, data: bytes, pos: int) -> int | None:
        """Where the longest form that starts exactly at `pos` ends, or None."""
        ends = [m.end() for r in (self._literal_re, self._core_re)
                if r is not None and (m := r.match(data, pos)) is not None]
        return max(ends, default=None)

    # ---- finding ------------------------------------------------------------------------

    def find(self, data: bytes) -> frozenset[str]:
        """Env names of the secrets present in `data` in any form (no rewriting)."""
        found: set[str] = set()
        if not any(self._present(data)):
            return frozenset()
        if self._literal_re is not None:
            found.update(self._literals[m.group()][1] for m in self._literal_re.finditer(data))
        if self._core_re is not None:
            found.update(self._cores[m.group()].env for m in self._core_re.finditer(data))
        return frozenset(found)

    # ---- redacting ----------------------------------------------------------------------

    def redact[T: (bytes, str)](self, data: T) -> Redaction[T]:
        """`data` (bytes, or text such as a WebSocket text frame) with every real value
        replaced by its placeholder; `data` of the result has the type given."""
        if isinstance(data, str):
            text, names = self.redact_text(data)
            return Redaction(text, names)
        found: set[str] = set()
        out = self._redact(bytes(data), found, 0)
        return Redaction(out, frozenset(found))

    def redact_text(self, text: str) -> tuple[str, frozenset[str]]:
        found: set[str] = set()
        out = self._redact(text.encode("utf-8", "surrogateescape"), found, 0)
        return out.decode("utf-8", "surrogateescape"), frozenset(found)

    def redact_headers(
        self, headers: Iterable[tuple[str, str]]
    ) -> tuple[tuple[tuple[str, str], ...], frozenset[str]]:
        names: set[str] = set()
        out: list[tuple[str, str]] = []
        for key, value in headers:
            new, found = self.redact_text(value)
            names |= found
            out.append((key, new))
        return tuple(out), frozenset(names)

    def _present(self, data: bytes) -> tuple[bool, bool]:
        """Whether any literal form / any base64 core occurs at all: one memchr-speed `in`
        per key is several times faster than the alternation regex over text that holds none,
        the common case."""
        return (
            any(k in data for k in self._literals),
            any(k in data for k in self._cores),
        )

    def _redact(self, data: bytes, names: set[str], depth: int) -> bytes:
        literal, core = self._present(data)
        if core and self._core_re is not None:
            data = self._redact_base64(data, names, depth)
        if literal or core:
            # Longest form first, each with bytes.replace: a C-speed pass per form that is
            # present, several times faster over a large body than the alternation's sub.
            for key in self._literals_longest_first:
                if key in data:
                    placeholder, env = self._literals[key]
                    names.add(env)
                    data = data.replace(key, placeholder)
        return data

    def _redact_base64(self, data: bytes, names: set[str], depth: int) -> bytes:
        assert self._core_re is not None
        pos = 0
        while (m := self._core_re.search(data, pos)) is not None:
            hit = self._cores[m.group()]
            names.add(hit.env)
            replaced = self._reencode(data, m.start(), hit, names, depth)
            if replaced is None:  # not decodable here: swap the core for the placeholder's
                data = data[: m.start()] + hit.placeholder_core + data[m.end() :]
                pos = m.start() + len(hit.placeholder_core)
            else:
                data, pos = replaced
        return data

    def _reencode(
        self, data: bytes, at: int, hit: _CoreOf, names: set[str], depth: int
    ) -> tuple[bytes, int] | None:
        """Decode the base64 text around a core, redact it, encode it again in the same style."""
        start = at - hit.core.lead
        if start < 0 or data[start:at].translate(None, _EITHER):
            return None
        end = _RUN_END.match(data, at).end()  # type: ignore[union-attr]
        segment = data[start:end]
        # The core may read the same in both alphabets: the run's own characters decide.
        urlsafe, std_only = any(c in segment for c in b"-_"), any(c in segment for c in b"+/")
        if urlsafe and std_only:
            return None
        alphabet = URLSAFE if urlsafe else STD if std_only else hit.core.alphabet
        body = segment.rstrip(b"=")
        padded = len(body) != len(segment)
        usable = len(body) - len(body) % 4 if len(body) % 4 == 1 else len(body)
        body, rest = body[:usable], segment[usable:] if not padded else b""
        std = body if alphabet == STD else body.translate(_TO_STD)
        try:
            plain = base64.b64decode(std + b"=" * (-len(std) % 4), validate=True)
        except (binascii.Error, ValueError):
            return None
        if hit.value not in plain:
            return None
        plain = plain.replace(hit.value, hit.placeholder)
        if depth < _MAX_DEPTH:
            plain = self._redact(plain, names, depth + 1)
        encoded = base64.b64encode(plain)
        if not padded and not (alphabet == STD and len(segment) % 4 == 0):
            encoded = encoded.rstrip(b"=")
        if alphabet != STD:
            encoded = encoded.translate(_TO_URLSAFE)
        new = encoded + rest
        return data[:start] + new + data[end:], start + len(new)
