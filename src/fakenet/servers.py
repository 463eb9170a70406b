"""The server process: `python -m fakenet.servers --config FILE`, run inside a namespace.

Opens every listener of the config (DNS, HTTP, HTTPS, sinks, echo), then writes the ready file;
if any listener cannot be opened it writes `<ready file>.error` instead and exits 1, so the host
fails fast with the reason. Stops on SIGTERM/SIGINT, or when its parent process is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import signal
import socket
import ssl
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from fakenet.context import ServerContext
from fakenet.dnsserver import DnsAnswerer, DnsUdpProtocol, handle_dns_tcp
from fakenet.httpserver import handle_http, tls_context
from fakenet.imapserver import handle_imaps
from fakenet.mailstore import MailStore, mail_tls_context
from fakenet.records import RecordWriter
from fakenet.serverconfig import Listener, ServerConfig
from fakenet.sinks import UdpProtocol, handle_tcp
from fakenet.smtpserver import handle_smtp

PARENT_POLL_S = 0.5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fakenet.servers")
    parser.add_argument("--config", required=True, type=Path)
    args = parser.parse_args(argv)
    config = ServerConfig.read(args.config)
    try:
        asyncio.run(_serve(config, Path(config.ready_file)))
    except Exception as exc:
        _write_atomic(config.error_file, f"{type(exc).__name__}: {exc}")
        traceback.print_exc()
        return 1
    return 0


async def _serve(config: ServerConfig, ready: Path) -> None:
    if os.getppid() != config.parent_pid:
        raise RuntimeError(f"parent {config.parent_pid} is gone before the servers started")
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    records = RecordWriter(Path(config.records_dir))
    ctx = ServerContext(config, records)
    answerer = DnsAnswerer(config.zone, config.catch_all, config.ttl)
    tls = mail_tls = None
    if config.cert_file and config.key_file:
        tls = tls_context(config.cert_file, config.key_file)
        mail_tls = mail_tls_context(config.cert_file, config.key_file)
    mail = MailStore(config.mail_accounts)
    closers: list[Callable[[], object]] = []
    try:
        for listener in config.listeners:
            try:
                if listener.kind in MAIL_KINDS:
                    closers.append(await _open_mail(ctx, mail, mail_tls, listener))
                    continue
                closers.append(await _open(ctx, answerer, tls, listener))
            except OSError as exc:
                raise RuntimeError(
                    f"cannot listen for {listener.kind} on {listener.proto} "
                    f"[{listener.host}]:{listener.port}: {exc.strerror or exc}"
                ) from exc
        _write_atomic(ready, json.dumps({"pid": os.getpid(), "listeners": len(closers)}))
        watcher = asyncio.create_task(_watch_parent(config.parent_pid, stop))
        await stop.wait()
        watcher.cancel()
    finally:
        for close in closers:
            close()
        records.close()


async def _open(ctx: ServerContext, answerer: DnsAnswerer, tls: ssl.SSLContext | None,
                listener: Listener) -> Callable[[], object]:
    loop = asyncio.get_running_loop()
    sock = _bind(listener)
    port = listener.port
    if listener.proto == "udp":
        protocol: asyncio.DatagramProtocol
        if listener.kind == "dns":
            protocol = DnsUdpProtocol(ctx, answerer, port)
        elif listener.kind in ("sink", "echo"):
            protocol = UdpProtocol(ctx, listener.kind == "echo", port)
        else:
            raise RuntimeError(f"{listener.kind} has no UDP server")
        transport, _ = await loop.create_datagram_endpoint(lambda: protocol, sock=sock)
        return transport.close

    if listener.kind == "dns":
        handler = functools.partial(handle_dns_tcp, ctx, answerer)
    elif listener.kind in ("http", "https"):
        handler = functools.partial(handle_http, ctx, listener.kind == "https")
    else:
        handler = functools.partial(handle_tcp, ctx, listener.kind == "echo")
    if listener.kind == "https" and tls is None:
        raise RuntimeError("https listener without cert_file/key_file")
    server = await asyncio.start_server(
        handler, sock=sock, ssl=tls if listener.kind == "https" else None, backlog=256
    )
    return server.close


MAIL_KINDS = ("imaps", "smtps", "submission")


async def _open_mail(ctx: ServerContext, store: MailStore, tls: ssl.SSLContext | None,
                     listener: Listener) -> Callable[[], object]:
    """IMAPS and SMTPS (TLS from the first byte) or submission (STARTTLS): mailstore.py."""
    if tls is None:
        raise RuntimeError(f"{listener.kind} listener without cert_file/key_file")
    if listener.kind == "imaps":
        handler = functools.partial(handle_imaps, ctx, store)
    else:
        handler = functools.partial(handle_smtp, ctx, store, tls, listener.kind == "smtps")
    server = await asyncio.start_server(
        handler, sock=_bind(listener), ssl=tls if listener.kind != "submission" else None,
        backlog=64)
    return server.close


def _bind(listener: Listener) -> socket.socket:
    family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
    kind = socket.SOCK_DGRAM if listener.proto == "udp" else socket.SOCK_STREAM
    sock = socket.socket(family, kind)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            # Separate v4 and v6 sockets: a dual-stack "::" would collide with "0.0.0.0".
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((listener.host, listener.port))
        if kind == socket.SOCK_STREAM:
            sock.listen(256)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def _watch_parent(parent_pid: int, stop: asyncio.Event) -> None:
    # Reparenting means the owner died without closing us: stop rather than linger.
    while os.getppid() == parent_pid:
        await asyncio.sleep(PARENT_POLL_S)
    stop.set()


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
