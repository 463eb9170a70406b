"""A credential sent in pieces: each piece passes the secrets inspector, which sees one request
at a time. Per host, the values of each field (a path segment, a query parameter, a header, a
body field) are strung together as they change from one request to the next, and the string
is searched with the secrets inspector's own catalogue (data/secret_patterns.json). A match
that no single piece holds was put together across requests. A request's path, headers and
body are walked only when they differ from the host's last, and only its first `MAX_FIELDS`
fields that may have changed.

Only the last `TAIL` characters of each field are kept, in memory, for the search; nothing of
them is written anywhere. Bodies larger than `MAX_BODY` are not split into fields (an upload
is not a drip), nor are the model hosts' (the conversation itself).
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Iterable, Iterator
from urllib.parse import parse_qsl, unquote

from agentcage.gateway.watcher.events import Crossing, Sent
from agentcage.gateway.watcher.windows import Once, Recent
from agentcage.inspect.patterns import PatternSet

TAIL = 512  # characters of each field's string kept
MAX_BODY = 16 * 1024
MAX_FIELDS = 64  # per request
MAX_FIELDS_PER_HOST = 256
MAX_HOSTS = 256
MAX_HEADER_KINDS = 1024  # header names whose kind is remembered
# headers every client sends, which carry no chosen data
ORDINARY_HEADERS = frozenset((
    "host", "content-length", "content-type", "user-agent", "accept", "accept-encoding",
    "accept-language", "connection", "cache-control", "pragma", "te", "origin", "referer",
    "upgrade", "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
))


PATH_KINDS = tuple(f"path segment {i + 1}" for i in range(MAX_FIELDS))


def fields_of(s: Sent, with_body: bool,
              header_kinds: dict[str, str] | None = None) -> Iterable[tuple[str, str]]:
    """(kind of field, value) of a request; the kind is how the field is told in a finding
    (never its name when the cage chose it: a name can carry data too)."""
    path, _, query = s.target.partition("?")
    return _fields(path, query, s.headers, s.body if with_body else b"",
                   {} if header_kinds is None else header_kinds)


def _fields(path: str, query: str, headers: tuple[tuple[str, str], ...], body: bytes,
            kinds: dict[str, str]) -> Iterable[tuple[str, str]]:
    """The fields of a request's parts (each empty when left out). Told of every request:
    the query is split without urllib when there is nothing to decode (the same pairs), and
    a header's kind ("" for an ordinary one) is looked up in `kinds`, worked out once per
    name."""
    fields = []
    for kind, segment in zip(PATH_KINDS, [p for p in path.split("/") if p], strict=False):
        fields.append((kind, unquote(segment) if "%" in segment else segment))
    if query:
        if "%" in query or "+" in query:
            pairs = parse_qsl(query, keep_blank_values=True)
        else:
            pairs = [f.partition("=")[::2] for f in query.split("&") if f]
        for key, value in pairs:
            fields.append(("query parameter " + _key(key), value))
    for key, value in headers:
        header = kinds.get(key)
        if header is None:
            if len(kinds) >= MAX_HEADER_KINDS:
                kinds.clear()
            lower = key.lower()
            header = kinds[key] = "" if lower in ORDINARY_HEADERS else "header " + _key(lower)
        if header:
            fields.append((header, value))
    if body and len(body) <= MAX_BODY:
        return itertools.chain(fields, _body_fields(body))
    return fields


def _key(name: str) -> str:
    """A field's name as a key of its string (kept in memory only)."""
    return name[:64]


def _body_fields(body: bytes) -> Iterator[tuple[str, str]]:
    text = body.decode("utf-8", "replace")
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict | list):
        yield from _leaves(doc, "body field ")
        return
    if "=" in text and "\n" not in text.strip():
        pairs = parse_qsl(text, keep_blank_values=True)
        if pairs:
            for key, value in pairs:
                yield "form field " + _key(key), value
            return
    yield "body", text


def _leaves(doc: object, where: str, depth: int = 0) -> Iterator[tuple[str, str]]:
    if depth > 8:
        return
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _leaves(value, where + _key(str(key)) + ".", depth + 1)
    elif isinstance(doc, list):
        for i, value in enumerate(doc[:32]):
            yield from _leaves(value, f"{where}{i}.", depth + 1)
    elif isinstance(doc, str):
        yield where.rstrip("."), doc
    elif isinstance(doc, int | float) and not isinstance(doc, bool):
        yield where.rstrip("."), str(doc)


class _Field:
    __slots__ = ("last", "pieces", "tail")

    def __init__(self) -> None:
        self.last: str | None = None
        self.tail = ""
        self.pieces: deque[int] = deque(maxlen=64)  # lengths of the pieces in the tail


class _Host:
    __slots__ = ("fields", "last_body", "last_headers", "last_path")

    def __init__(self) -> None:
        self.fields: Recent[_Field] = Recent(_Field, MAX_FIELDS_PER_HOST)
        # a part sent again as it was has no new field: most requests to a host send the
        # same headers, many the same path or body
        self.last_body = b""
        self.last_path = ""
        self.last_headers: tuple[tuple[str, str], ...] = ()


class Reassembly:
    name = "reassembly"

    def __init__(self, patterns: PatternSet, once: Once):
        self.patterns, self.once = patterns, once
        self._hosts: Recent[_Host] = Recent(_Host, MAX_HOSTS)
        self._header_kinds: dict[str, str] = {}  # header name -> its field's kind

    def sent(self, s: Sent) -> list[Crossing]:
        host = self._hosts.get(s.host)
        path, _, query = s.target.partition("?")
        new_path, new_headers = path != host.last_path, s.headers != host.last_headers
        new_body = not s.model_host and host.last_body != s.body
        host.last_path, host.last_headers = path, s.headers
        if new_body and len(s.body) <= MAX_BODY:
            host.last_body = s.body
        found: list[Crossing] = []
        fields = host.fields
        parts = _fields(path if new_path else "", query, s.headers if new_headers else (),
                        s.body if new_body else b"", self._header_kinds)
        for kind, value in itertools.islice(parts, MAX_FIELDS):
            field = fields.get(kind)
            if value == field.last or not value:
                continue
            field.last = value
            field.tail = (field.tail + value)[-TAIL:]
            field.pieces.append(len(value))
            found += self._search(s, kind, field, value)
        return found

    def _search(self, s: Sent, kind: str, field: _Field, piece: str) -> Iterator[Crossing]:
        tail = field.tail.encode("utf-8", "surrogateescape")
        own = piece.encode("utf-8", "surrogateescape")
        for pattern, match in self.patterns.scan(tail):
            if match in own:
                continue  # one request held it whole: the secrets inspector's to judge
            if not self.once.first(s.at, self.name, f"{s.host} {pattern.id}"):
                continue
            yield Crossing(self.name, s.host,
                           f"a {pattern.id} put together from {_pieces(field, tail, match)} "
                           f"pieces sent to {s.host} in its {kind.split(' ')[0]}",
                           {"pattern": pattern.id, "field": kind.split(" ")[0],
                            "pieces": _pieces(field, tail, match),
                            "length": len(match)}, s.grant)


def _pieces(field: _Field, tail: bytes, match: bytes) -> int:
    """How many of the last pieces the match spans."""
    start = tail.rfind(match)
    from_end = len(tail) - start
    covered, count = 0, 0
    for length in reversed(field.pieces):
        covered += length
        count += 1
        if covered >= from_end:
            break
    return count
