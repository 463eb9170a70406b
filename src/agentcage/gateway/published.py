"""Published ports: a service in the cage reached from the host's loopback, and from nowhere
else, through the gateway.

`container.ports: ["127.0.0.1:18789:18789"]` makes the gateway listen on 127.0.0.1:18789 in
the uplink namespace (the host's: its socket is made by the uplink thread, so it is on the
host's loopback, where no other machine reaches; a rootless gateway, whose uplink is a network
of its own, is handed a socket made on the host's loopback by the rootless keeper instead,
rootless/hostports.py) and relay each connection to the cage's
address on port 18789, over the veth, the cage's only link. The cage still reaches nothing but
the gateway: the gateway's firewall lets the relay open connections to the cage on the
published ports alone, and the cage's answers are those connections' packets.

Every connection is audited when it opens (`published`, allowed, with the peer and the ports)
and when it ends (the bytes each way, how long): one whose opening cannot be recorded is
closed before anything reaches the cage. A cage that does not answer on the port (nothing
listening yet) ends the connection, audited as flagged. The relay is bytes only: what comes
in this way is the operator's own traffic to the service, not the agent's egress.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import time
from collections.abc import Callable, Sequence

from agentcage.gateway.audit import AuditRecord, AuditUnavailable
from agentcage.gateway.uplink import Uplink

CONNECT_TIMEOUT = 5.0
CHUNK = 64 * 1024
BACKLOG = 64


class PublishError(Exception):
    """A published port's listener could not be opened."""


class PublishedPorts:
    """The listeners of a cage's published ports, and the relays of their connections."""

    def __init__(self, ports: Sequence[tuple[str, int, int]], cage_address: str, uplink: Uplink,
                 audit: Callable[[AuditRecord], None],
                 host_listener: Callable[[str, int], socket.socket] | None = None):
        """`host_listener(address, port)`: where a listening socket on the host comes from
        when the uplink is not the host's namespace (a rootless cage's keeper); it blocks,
        and raises OSError with the host's reason."""
        self.ports, self.cage_address = tuple(ports), cage_address
        self.uplink, self.audit = uplink, audit
        self.host_listener = host_listener
        self.servers: list[asyncio.Server] = []
        self._relays: set[asyncio.Task] = set()

    async def start(self) -> None:
        """Every listener open, or PublishError (a port the host already uses): the gateway
        then does not start, and says which."""
        for address, host_port, cage_port in self.ports:
            try:
                sock = await self._listen(address, host_port)
            except OSError as e:
                raise PublishError(f"cannot publish {address}:{host_port} on the host: "
                                   f"{e.strerror or e}") from None
            server = await asyncio.start_server(
                functools.partial(self._accepted, host_port=host_port, cage_port=cage_port),
                sock=sock)
            self.servers.append(server)

    async def _listen(self, address: str, port: int) -> socket.socket:
        if self.host_listener is not None:
            return await asyncio.get_running_loop().run_in_executor(
                None, self.host_listener, address, port)
        sock = await self.uplink.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, port))
            sock.listen(BACKLOG)
        except OSError:
            sock.close()
            raise
        return sock

    def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  host_port: int, cage_port: int) -> None:
        task = asyncio.get_running_loop().create_task(
            self._relay(reader, writer, host_port, cage_port))
        self._relays.add(task)
        task.add_done_callback(self._relays.discard)

    def _record(self, decision: str, reason: str, peer: str, host_port: int,
                extra: dict) -> None:
        self.audit(AuditRecord("published", decision, reason, host=peer, port=host_port,
                               by="published", extra=extra))

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     host_port: int, cage_port: int) -> None:
        peer_info = writer.get_extra_info("peername") or ("?", 0)
        peer = f"{peer_info[0]}:{peer_info[1]}"
        where = {"cage_port": cage_port}
        started = time.monotonic()
        try:
            try:
                self._record("allowed", f"to the cage's port {cage_port}", peer, host_port, where)
            except AuditUnavailable:
                return  # not recorded: nothing reaches the cage
            try:
                cage_reader, cage_writer = await asyncio.wait_for(
                    self._dial_cage(cage_port), CONNECT_TIMEOUT)
            except (OSError, TimeoutError) as e:
                with contextlib.suppress(AuditUnavailable):
                    self._record("flagged", f"the cage does not answer on port {cage_port}: "
                                 f"{getattr(e, 'strerror', None) or str(e) or 'timeout'}",
                                 peer, host_port, where)
                return
            try:
                counts = await asyncio.gather(_pipe(reader, cage_writer),
                                              _pipe(cage_reader, writer))
            finally:
                cage_writer.close()
            with contextlib.suppress(AuditUnavailable):
                self._record("allowed", "closed", peer, host_port, {
                    **where, "bytes_in": counts[0], "bytes_out": counts[1],
                    "seconds": round(time.monotonic() - started, 3)})
        finally:
            writer.close()

    async def _dial_cage(self, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the cage's port, from this namespace (the gateway's: its socket is
        made on this thread, over the veth). Not through the loop's `create_connection`,
        which makes every connection an upstream one (upstream.py), checked and dialled from
        the uplink: this one goes the other way, to the cage alone."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, (self.cage_address, port))
            reader = asyncio.StreamReader(limit=CHUNK)
            transport, protocol = await loop.connect_accepted_socket(
                lambda: asyncio.StreamReaderProtocol(reader), sock)
        except BaseException:
            sock.close()
            raise
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    async def close(self) -> None:
        for server in self.servers:
            server.close()
        for task in list(self._relays):
            task.cancel()
        for task in list(self._relays):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> int:
    """Copy until the source ends (then end the sink's writing); the bytes copied."""
    copied = 0
    try:
        while chunk := await source.read(CHUNK):
            sink.write(chunk)
            await sink.drain()
            copied += len(chunk)
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if sink.can_write_eof():
                sink.write_eof()
            else:
                sink.close()
    return copied
