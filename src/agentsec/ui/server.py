"""The console's HTTP server.

The standard library's ThreadingHTTPServer, on purpose: the console serves one page, three JSON
endpoints and one form post to one local user. A framework would bring routing, CORS and
middleware defaults we would have to switch off; here every header that leaves is written in
this file, and the guards in security.py run before any route. Requests are small and bounded
(a 16 KiB body, a 10 s socket timeout), a run holds a lock so only one sandbox starts at a time,
and an unexpected error is one line in the log and a 500, never a traceback to the client.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from agentsec.errors import AgentsecError
from agentsec.ui.pages import ConsoleData
from agentsec.ui.runs import RunRefused, launch_for, parse_run_request
from agentsec.ui.security import SECURITY_HEADERS, TOKEN_HEADER, Guard

MAX_BODY = 16 * 1024
SOCKET_TIMEOUT_S = 10


def _first(values: list[str] | None) -> str | None:
    """The first value of a query or form field, None when the field is absent."""
    return values[0] if values else None


@dataclass
class ConsoleState:
    guard: Guard
    data: ConsoleData
    run_lock: threading.Lock


class ConsoleHandler(BaseHTTPRequestHandler):
    server_version = "agentsec-ui"
    sys_version = ""

    def version_string(self) -> str:
        return self.server_version
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_S

    @property
    def state(self) -> ConsoleState:
        return self.server.state  # type: ignore[attr-defined]

    # ---- plumbing -------------------------------------------------------------------------

    def end_headers(self) -> None:
        for name, value in SECURITY_HEADERS:
            self.send_header(name, value)
        super().end_headers()

    # A malformed request line still gets a status line and a JSON reason, not an HTTP/0.9
    # body with no status at all.
    default_request_version = "HTTP/1.1"

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        self.close_connection = True
        try:
            status = HTTPStatus(code)
        except ValueError:
            status = HTTPStatus.BAD_REQUEST
        self._refuse(status, message or status.phrase)

    def log_message(self, format: str, *args: Any) -> None:
        # The path without its query: a query may hold the token.
        path = urlsplit(getattr(self, "path", "") or "").path
        code = args[1] if len(args) > 1 and format.startswith('"%s"') else ""
        sys.stderr.write(f"agentsec ui: {self.address_string()} {self.command} {path} {code}\n")

    def _send(self, status: int, body: bytes, content_type: str,
              extra: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, doc: dict[str, Any]) -> None:
        self._send(status, json.dumps(doc, indent=2).encode() + b"\n", "application/json")

    def _refuse(self, status: HTTPStatus, reason: str) -> None:
        self._json(status, {"error": reason, "status": status.value})

    def _redirect(self, location: str, extra: tuple[tuple[str, str], ...] = ()) -> None:
        self._send(HTTPStatus.SEE_OTHER, b"", "text/plain", (("Location", location), *extra))

    # ---- the door: Host first, then the route ---------------------------------------------

    def _guarded(self, route) -> None:
        try:
            if not self.state.guard.host_allowed(self.headers.get("Host")):
                self.close_connection = True
                self._refuse(HTTPStatus.FORBIDDEN, "this console does not answer to that Host")
                return
            route()
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True
        except Exception as exc:  # a defect: one line in the log, a 500 to the client
            sys.stderr.write(f"agentsec ui: internal error: {type(exc).__name__}: {exc}\n")
            self.close_connection = True
            with contextlib.suppress(OSError):
                self._refuse(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error")

    def do_GET(self) -> None:
        self._guarded(self._get)

    def do_HEAD(self) -> None:
        self._guarded(self._get)

    def do_POST(self) -> None:
        self._guarded(self._post)

    def _not_allowed(self) -> None:
        # OPTIONS included: a CORS preflight gets no Access-Control-* header, so it fails.
        self._guarded(lambda: self._refuse(HTTPStatus.METHOD_NOT_ALLOWED, "method not allowed"))

    do_OPTIONS = do_PUT = do_DELETE = do_PATCH = _not_allowed

    # ---- routes ----------------------------------------------------------------------------

    def _get(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        guard = self.state.guard
        if url.path == "/":
            token = _first(query.get("token"))
            if token is not None:
                if not guard.token_ok(token):
                    self._refuse(HTTPStatus.FORBIDDEN, "wrong token")
                    return
                # Trade the token in the address bar for a cookie, and take it out of the URL.
                self._redirect("/", (("Set-Cookie", guard.session_cookie()),))
                return
            if not guard.session_ok(self.headers.get("Cookie")):
                self._send(HTTPStatus.UNAUTHORIZED, _LOCKED_PAGE, "text/html; charset=utf-8")
                return
            page = self.state.data.page(guard)
            self._send(HTTPStatus.OK, page.encode(), "text/html; charset=utf-8")
            return
        if not url.path.startswith("/api/"):
            self._refuse(HTTPStatus.NOT_FOUND, "not found")
            return
        if not guard.token_ok(self.headers.get(TOKEN_HEADER)):
            self._refuse(HTTPStatus.FORBIDDEN, f"every API call needs the {TOKEN_HEADER} header")
            return
        if url.path == "/api/runs":
            self._json(HTTPStatus.OK, self.state.data.runs_document())
        elif url.path == "/api/history":
            label = _first(query.get("label"))
            self._json(HTTPStatus.OK, self.state.data.history_document(label))
        else:
            self._refuse(HTTPStatus.NOT_FOUND, "not found")

    def _read_fields(self) -> dict[str, list[str]] | None:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._refuse(HTTPStatus.LENGTH_REQUIRED, "a body needs a Content-Length")
            return None
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            self._refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"bodies are limited to {MAX_BODY}")
            return None
        body = self.rfile.read(length)
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if kind == "application/x-www-form-urlencoded":
            return parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        if kind == "application/json":
            try:
                doc = json.loads(body)
            except (ValueError, RecursionError):
                self._refuse(HTTPStatus.BAD_REQUEST, "the body is not valid JSON")
                return None
            if not isinstance(doc, dict):
                self._refuse(HTTPStatus.BAD_REQUEST, "the body must be a JSON object")
                return None
            return {
                str(k): [str(x) for x in v] if isinstance(v, list) else [str(v)]
                for k, v in doc.items()
                if v is not None
            }
        self._refuse(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "send a form or application/json")
        return None

    def _post(self) -> None:
        url = urlsplit(self.path)
        if url.path != "/api/runs":
            self._refuse(HTTPStatus.NOT_FOUND, "not found")
            return
        guard = self.state.guard
        fields = self._read_fields()
        if fields is None:
            return
        form_token = _first(fields.pop("token", None))
        from_form = form_token is not None
        # The page's form: its hidden token and the session cookie. A script: the header.
        authorised = (
            guard.token_ok(form_token) and guard.session_ok(self.headers.get("Cookie"))
            if from_form
            else guard.token_ok(self.headers.get(TOKEN_HEADER))
        )
        if not authorised:
            self._refuse(HTTPStatus.FORBIDDEN, f"every API call needs the {TOKEN_HEADER} header")
            return
        if not guard.runs_allowed:
            self._refuse(
                HTTPStatus.FORBIDDEN,
                "read-only: this console listens off loopback and was started without "
                "--allow-remote-runs",
            )
            return
        try:
            request = parse_run_request(fields)
        except RunRefused as refused:
            self._refuse(HTTPStatus.BAD_REQUEST, str(refused))
            return
        if not self.state.run_lock.acquire(blocking=False):
            self._refuse(HTTPStatus.CONFLICT, "a run is already in progress")
            return
        try:
            doc = self.state.data.run(launch_for(request), request.label)
        except AgentsecError as error:
            self._refuse(HTTPStatus.UNPROCESSABLE_ENTITY, str(error))
            return
        finally:
            self.state.run_lock.release()
        if from_form:
            self._redirect("/")
        else:
            self._json(HTTPStatus.OK, doc)


_LOCKED_PAGE = (
    b"<!doctype html><meta charset=utf-8><title>agentsec console</title>"
    b"<p>Open the address <code>agentsec ui</code> printed: it carries this session's token."
)


class ConsoleServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], state: ConsoleState) -> None:
        self.state = state
        family_v6 = ":" in address[0]
        if family_v6:
            import socket

            self.address_family = socket.AF_INET6
        super().__init__(address, ConsoleHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        sys.stderr.write(f"agentsec ui: dropped a request from {client_address[0]}: {exc}\n")


def make_server(bind: str, port: int, results: Path, allow_remote_runs: bool,
                extra_hosts: tuple[str, ...]) -> ConsoleServer:
    server = ConsoleServer((bind, port), ConsoleState(
        guard=Guard(bind, port), data=ConsoleData(results), run_lock=threading.Lock()))
    # The port is known only once bound (0 asks the kernel for a free one).
    actual = server.server_address[1]
    server.state.guard = Guard(bind, actual, allow_remote_runs, extra_hosts,
                               token=server.state.guard.token, session=server.state.guard.session)
    return server
