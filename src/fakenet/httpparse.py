"""An incremental HTTP/1.x request parser: bytes in, whole requests out.

Our own, because the servers must record exactly what a client sent (including what a proxy
forwards on a kept-alive connection) and answer anything that looks like HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_HEAD = 64 * 1024
MAX_BODY = 16 * 1024 * 1024
# `/discard...` with a Content-Length: the body is counted, not kept or recorded (large uploads
# through a gateway, which would otherwise fill the records every test reads), and the request
# comes out with an empty body and its size in DISCARDED_HEADER.
DISCARD_PATH = "/discard"
MAX_DISCARD = 4 * 1024 ** 3
DISCARDED_HEADER = "x-fakenet-discarded"


class HttpParseError(ValueError):
    pass


@dataclass(frozen=True)
class HttpRequest:
    method: str
    target: str  # as sent: origin form "/x", absolute form "http://h/x", or authority "h:443"
    version: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        name = name.lower()
        for key, value in reversed(self.headers):
            if key.lower() == name:
                return value
        return None

    @property
    def keep_alive(self) -> bool:
        connection = (self.header("connection") or "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in connection
        return "close" not in connection

    @property
    def upgrades_to_websocket(self) -> bool:
        """A WebSocket handshake: what follows it on the connection is not HTTP."""
        connection = {t.strip().lower() for t in (self.header("connection") or "").split(",")}
        return (self.method == "GET" and "upgrade" in connection
                and (self.header("upgrade") or "").strip().lower() == "websocket")


@dataclass(frozen=True)
class _Head:
    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]
    end: int  # offset just past the blank line


class RequestParser:
    def __init__(self) -> None:
        self._buf = bytearray()
        self.upgraded = False
        self._discard: tuple[_Head, int, int] | None = None  # head, bytes to come, seen

    def feed(self, data: bytes) -> list[HttpRequest]:
        """Add bytes; return every request they complete. Raises HttpParseError on garbage.

        Stops after a WebSocket handshake: the bytes after it are kept for `leftover()`."""
        self._buf += data
        done: list[HttpRequest] = []
        while not self.upgraded:
            request = self._next()
            if request is None:
                return done
            done.append(request)
            self.upgraded = request.upgrades_to_websocket
        return done

    @property
    def discarding(self) -> bool:
        """Inside the body of a `/discard` request: what comes next is counted, not kept."""
        return self._discard is not None

    def discarding_target(self) -> str | None:
        """The target of the `/discard` request whose body is arriving, once some of it did."""
        if self._discard is None or self._discard[2] == 0:
            return None
        return self._discard[0].target

    def leftover(self) -> bytes:
        """What arrived after the last request returned (after an upgrade: the first frames)."""
        data = bytes(self._buf)
        self._buf.clear()
        return data

    def wants_continue(self) -> bool:
        """The request being received asked for `100 Continue` and its body is still to come."""
        if self._discard is not None:
            return False
        head = _parse_head(self._buf)
        if head is None:
            return False
        expect = {k.lower(): v for k, v in head.headers}.get("expect", "")
        return expect.lower() == "100-continue" and _body_end(self._buf, head) is None

    def _next(self) -> HttpRequest | None:
        if self._discard is not None:
            return self._discarding()
        head = _parse_head(self._buf)
        if head is None:
            return None
        if head.target.startswith(DISCARD_PATH):
            length = {k.lower(): v for k, v in head.headers}.get("content-length", "0")
            if not length.isdigit() or int(length) > MAX_DISCARD:
                raise HttpParseError(f"bad content-length: {length[:40]!r}")
            del self._buf[:head.end]
            self._discard = (head, int(length), 0)
            return self._discarding()
        body_end = _body_end(self._buf, head)
        if body_end is None:
            return None
        body, end = body_end
        del self._buf[:end]
        return HttpRequest(head.method, head.target, head.version, head.headers, body)


    def _discarding(self) -> HttpRequest | None:
        assert self._discard is not None
        head, left, seen = self._discard
        take = min(left, len(self._buf))
        del self._buf[:take]
        if left - take:
            self._discard = (head, left - take, seen + take)
            return None
        self._discard = None
        headers = (*head.headers, (DISCARDED_HEADER, str(seen + take)))
        return HttpRequest(head.method, head.target, head.version, headers, b"")


def _parse_head(buf: bytearray) -> _Head | None:
    # Tolerate blank lines between requests, as RFC 9112 asks servers to.
    while buf.startswith(b"\r\n"):
        del buf[:2]
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > MAX_HEAD:
            raise HttpParseError("request head too large")
        return None
    lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0].isalpha():
        raise HttpParseError(f"not an HTTP/1 request line: {lines[0][:80]!r}")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpParseError(f"bad header line: {line[:80]!r}")
        headers.append((name, value.strip()))
    return _Head(parts[0], parts[1], parts[2], tuple(headers), end + 4)


def _body_end(buf: bytearray, head: _Head) -> tuple[bytes, int] | None:
    """(body, offset past it), or None while incomplete."""
    fields = {k.lower(): v for k, v in head.headers}
    if "chunked" in fields.get("transfer-encoding", "").lower():
        return _chunked(buf, head.end)
    length_text = fields.get("content-length", "0")
    if not length_text.isdigit() or int(length_text) > MAX_BODY:
        raise HttpParseError(f"bad content-length: {length_text[:40]!r}")
    end = head.end + int(length_text)
    if len(buf) < end:
        return None
    return bytes(buf[head.end:end]), end


def _chunked(buf: bytearray, pos: int) -> tuple[bytes, int] | None:
    body = bytearray()
    while True:
        line_end = buf.find(b"\r\n", pos)
        if line_end < 0:
            return None
        size_text = bytes(buf[pos:line_end]).split(b";")[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise HttpParseError(f"bad chunk size: {size_text[:20]!r}") from None
        if size == 0:
            # The trailer section (usually empty) ends with an empty line.
            after = line_end + 2
            if len(buf) < after + 2:
                return None
            if buf[after:after + 2] == b"\r\n":
                return bytes(body), after + 2
            trailer_end = buf.find(b"\r\n\r\n", after)
            return None if trailer_end < 0 else (bytes(body), trailer_end + 4)
        data_end = line_end + 2 + size
        if len(buf) < data_end + 2:
            return None
        if buf[data_end:data_end + 2] != b"\r\n":
            raise HttpParseError("chunk not followed by CRLF")
        body += buf[line_end + 2:data_end]
        if len(body) > MAX_BODY:
            raise HttpParseError("body too large")
        pos = data_end + 2
