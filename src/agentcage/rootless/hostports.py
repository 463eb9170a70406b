"""Listening sockets on the host's loopback, for a rootless cage's published ports.

A root cage's gateway makes a published port's listener in the host's network namespace (its
uplink). A rootless gateway's uplink is the holder's network, behind slirp4netns, whose
loopback is not the host's. So the keeper (holder.py), which lives in the host's namespaces
as the user, makes the listener there on the gateway's request and hands it over (SCM_RIGHTS)
through a socket in the user's private state directory, as it hands out the host's routing
table: the gateway then accepts the host's connections on it, as root's does, and relays
them to the cage (gateway/published.py). Nothing is forwarded by slirp4netns, so nothing else
of the holder's network, a gateway or a cage is reachable from the host.

The keeper binds a loopback address only, whoever asks: a request for any other address is
refused, as is a port out of range. A port already in use is the bind's own error, returned
to the gateway, which refuses to start and says so in one line.

The request is one line, `ADDRESS PORT`; the answer one byte, `l` with the listening socket,
or `e` followed by `ERRNO STRERROR`.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import socket
import time
from pathlib import Path

from agentcage.rootless import HOST_PORTS

BACKLOG = 64  # as gateway/published.py listens
_MAX_REQUEST = 128


def _refusal(code: int, text: str) -> bytes:
    return f"e{code} {text}".encode()


def listen_on_host(request: bytes) -> socket.socket | bytes:
    """The keeper's answer to one request: a socket listening on the host's loopback, or the
    refusal to send back."""
    try:
        address, port_text = request.decode("ascii").split()
        ip = ipaddress.ip_address(address)
        port = int(port_text)
    except (UnicodeDecodeError, ValueError):
        return _refusal(errno.EINVAL, "a malformed request")
    if not ip.is_loopback:
        return _refusal(errno.EACCES, f"{address} is not a loopback address")
    if not 0 < port < 65536:
        return _refusal(errno.EINVAL, f"port {port} is out of range")
    sock = socket.socket(socket.AF_INET if ip.version == 4 else socket.AF_INET6,
                         socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((str(ip), port))
        sock.listen(BACKLOG)
    except OSError as e:
        sock.close()
        return _refusal(e.errno or errno.EIO, e.strerror or str(e))
    return sock


def server(directory: Path) -> socket.socket:
    """The keeper's listening socket for requests, in the user's private state directory."""
    path = directory / HOST_PORTS
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(16)
    return sock


def serve(listener: socket.socket) -> None:
    """The keeper's loop (a thread of its own): one request per connection, until the
    listener is closed."""
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            if listener.fileno() == -1:
                return  # closed
            time.sleep(0.1)  # a passing failure (out of descriptors): the next one may do
            continue
        with conn:
            conn.settimeout(5)
            with contextlib.suppress(OSError):
                answer = listen_on_host(conn.recv(_MAX_REQUEST))
                if isinstance(answer, socket.socket):
                    with answer:
                        socket.send_fds(conn, [b"l"], [answer.fileno()])
                else:
                    conn.sendall(answer)


def host_listener(path: str, address: str, port: int, timeout: float = 5.0) -> socket.socket:
    """A socket listening on the host's `address`:`port`, from the keeper at `path`; OSError
    with the host's reason (EADDRINUSE: the port is in use there)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        try:
            conn.connect(path)
        except FileNotFoundError:
            raise OSError(errno.ENOENT, "the rootless cages' holder hands out no host ports "
                          "(it was started by an older agentcage: stop its cages, then "
                          "`agentcage prune -y`)") from None
        conn.sendall(f"{address} {port}\n".encode("ascii"))
        data, fds, _, _ = socket.recv_fds(conn, 256, 1)
    if data[:1] == b"l" and len(fds) == 1:
        return socket.socket(fileno=fds[0])
    for fd in fds:
        socket.close(fd)
    code, _, text = data[1:].decode(errors="replace").partition(" ")
    if data[:1] != b"e" or not code.isdigit():
        raise OSError(errno.EPROTO, "the rootless cages' keeper gave no listener")
    raise OSError(int(code), text)
