"""HTTP and HTTPS servers: answer 200 with a JSON echo of the request (or a large body at
`/download/<size>`, see downloads.py; a compression bomb at `/bomb/<size>`, bombs.py; a server
that accepts and never answers at `/hang`, hangs.py; one that refuses an upload before its
body and stops reading at `/discard...?early=<seconds>`, early.py; a model's answer at
/v1/messages, /v1/responses, /api/v1/chat/completions and Gemini's /v1beta/models/...,
models.py; a host with a static
site, such as a package registry, from its files, sites.py), and record every request."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import ssl

from fakenet import bombs, downloads, early, hangs, models, sites, websocket
from fakenet.context import ServerContext, chunks, close_quietly, local_port, peer_host, set_nodelay
from fakenet.httpparse import DISCARDED_HEADER, HttpParseError, HttpRequest, RequestParser

SERVER_NAME = "fakenet"


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    # HTTP/1.1 only: proxies in front of us then speak the protocol our parser understands.
    context.set_alpn_protocols(["http/1.1"])
    context.sni_callback = _remember_sni
    return context


def _remember_sni(ssl_object: ssl.SSLObject, server_name: str | None,
                  _context: ssl.SSLContext) -> None:
    # The server side of an SSLObject does not keep the SNI; stash it for the request records.
    ssl_object.fakenet_sni = server_name  # type: ignore[attr-defined]


async def handle_http(ctx: ServerContext, tls: bool,
                      reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    set_nodelay(writer)
    peer, port = peer_host(writer.get_extra_info("peername")), local_port(writer)
    ssl_object = writer.get_extra_info("ssl_object")
    sni = getattr(ssl_object, "fakenet_sni", None) if ssl_object is not None else None
    conn = ctx.new_conn_id("tls" if tls else "tcp")
    parser = RequestParser()
    continued = False  # whether the request being received got its `100 Continue`
    try:
        async for data in chunks(reader, ctx.config.http_idle_timeout):
            if not parser.discarding:  # a discarded body is counted, not kept, not recorded
                ctx.records.sink("tls" if tls else "tcp", port, peer, conn, data)
            try:
                requests = parser.feed(data)
            except HttpParseError as exc:
                writer.write(_response(400, {"error": str(exc)}, keep_alive=False))
                await writer.drain()
                return
            receiving = parser.discarding_target()
            hold = early.hold_seconds(receiving) if receiving is not None else None
            if hold is not None:
                await early.serve(writer, hold)
                return  # closed without reading the rest
            for request in requests:
                ctx.records.http(_record(request, tls=tls, peer=peer, port=port, sni=sni))
                if request.upgrades_to_websocket:
                    await _websocket(ctx, tls, request, parser.leftover(), reader, writer,
                                     port=port, peer=peer, conn=conn)
                    return
                site = sites.site_of(ctx.config.sites_dir, request)
                if site is not None:
                    if not await sites.serve(writer, site, request):
                        return
                    continued = False
                    continue
                if models.wants(request):
                    hang = models.hang_seconds(request, ctx.config.model_script)
                    if hang is not None:
                        await asyncio.sleep(min(hang, 120.0))
                        return  # closed without a byte of an answer
                    writer.write(models.respond(request, ctx.config.model_script))
                    await writer.drain()
                    if not request.keep_alive:
                        return
                    continued = False
                    continue
                if downloads.wants(request.target) and request.method == "GET":
                    if not await downloads.serve(writer, request.target, request.keep_alive):
                        return
                    continued = False
                    continue
                if hangs.wants(request.target):
                    await hangs.serve(request.target)
                    return  # closed without a byte of an answer
                if bombs.wants(request.target) and request.method == "GET":
                    if not await bombs.serve(writer, request.target, request.keep_alive):
                        return
                    continued = False
                    continue
                writer.write(_echo(request, tls))
                await writer.drain()
                if not request.keep_alive:
                    return
                continued = False
            if not continued and parser.wants_continue():
                # Otherwise curl and friends wait a second before sending the body.
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                await writer.drain()
                continued = True
    except (ConnectionError, OSError):
        pass
    finally:
        await close_quietly(writer)


async def _websocket(ctx: ServerContext, tls: bool, request: HttpRequest, leftover: bytes,
                     reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                     port: int, peer: str, conn: str) -> None:
    """The `/ws` echo endpoint; a handshake anywhere else, or a bad one, gets a 400."""
    key = request.header("sec-websocket-key") or ""
    problem = None
    if request.target.split("?", 1)[0] != websocket.PATH:
        problem = f"WebSocket only at {websocket.PATH}"
    elif request.header("sec-websocket-version") != "13":
        problem = "Sec-WebSocket-Version must be 13"
    elif len(_b64decode(key)) != 16:
        problem = "Sec-WebSocket-Key must be 16 bytes, base64"
    if problem is not None:
        writer.write(_response(400, {"error": problem}, keep_alive=False))
        await writer.drain()
        return
    writer.write(websocket.handshake_response(key))
    await writer.drain()
    messages = itertools.count()
    proto = "wss" if tls else "ws"

    def on_bytes(data: bytes) -> None:
        ctx.records.sink("tls" if tls else "tcp", port, peer, conn, data)

    def on_message(message: websocket.Message) -> None:
        # One record per message, unmasked: what the client really sent.
        ctx.records.sink(proto, port, peer, f"{conn}/ws-{next(messages)}", message.payload)

    await websocket.serve(reader, writer, leftover, ctx.config.http_idle_timeout,
                          on_bytes, on_message)


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        return b""


def _record(request: HttpRequest, *, tls: bool, peer: str, port: int,
            sni: str | None) -> dict[str, object]:
    return {
        "method": request.method,
        "host": request.header("host") or "",
        "path": request.target,
        "headers": {k.lower(): v for k, v in request.headers},
        "body": request.body,
        "tls": tls,
        "sni": sni,
        "peer": peer,
        "port": port,
    }


def _echo(request: HttpRequest, tls: bool) -> bytes:
    body = {
        "server": SERVER_NAME,
        "method": request.method,
        "host": request.header("host") or "",
        "path": request.target,
        "tls": tls,
        "body_length": int(request.header(DISCARDED_HEADER) or len(request.body)),
    }
    return _response(200, body, keep_alive=request.keep_alive, head=request.method == "HEAD")


def _response(status: int, body: dict[str, object], *, keep_alive: bool,
              head: bool = False) -> bytes:
    payload = json.dumps(body).encode()
    reason = {200: "OK", 400: "Bad Request"}[status]
    lines = [
        f"HTTP/1.1 {status} {reason}",
        f"Server: {SERVER_NAME}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        f"Connection: {'keep-alive' if keep_alive else 'close'}",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (b"" if head else payload)
