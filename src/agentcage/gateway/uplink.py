"""The uplink: the network namespace the gateway's upstream sockets are made in.

The gateway process lives in the gateway namespace, whose only link is the veth to the cage:
its listeners (proxy, resolver) are there, and nothing made there can reach anything else.
Upstream connections and upstream DNS queries are made from sockets created in the *uplink*
namespace instead: the host's own (the one `agentcage` runs in), or a named one. A socket keeps
the namespace it was created in, so one thread that joined the uplink namespace creates them
and hands them over; everything else happens on the gateway's event loop. The host thus needs
no forwarding, NAT or firewall rule, and a resolver on its loopback (127.0.0.53) works.

The same thread answers one more question, with the uplink's own routing table: would a
packet to this address stay on this machine? Such an address (loopback, or any address of the
host's interfaces, public ones included) is never dialled: an allowed name that resolves to the
host itself would otherwise reach the host's own services.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import struct
import threading
from concurrent.futures import ThreadPoolExecutor

# rtnetlink (linux/rtnetlink.h, linux/netlink.h): ask the kernel how it would route one address.
_NLMSG_ERROR, _RTM_NEWROUTE, _RTM_GETROUTE = 2, 24, 26
_NLM_F_REQUEST = 1
_RTA_DST = 1
_RTN_UNICAST = 1
_ROUTE_TYPES = {0: "unspecified", 1: "unicast", 2: "local", 3: "broadcast", 4: "anycast",
                5: "multicast", 6: "blackhole", 7: "unreachable", 8: "prohibit", 9: "throw",
                10: "nat"}
_NLMSG_HEADER = struct.Struct("=IHHII")
_RTMSG = struct.Struct("=BBBBBBBBI")
_SYN_RETRIES = 2  # bounded connects, per socket (the host's own sysctl is not ours to change)


class UplinkError(OSError):
    """The uplink namespace could not be joined, or a socket could not be made in it."""


def route_type(sock: socket.socket, address: str, seq: int = 1) -> str:
    """How the namespace of the netlink socket `sock` routes `address`: "unicast" (to another
    machine), "local" (this one), or why not ("unreachable", "blackhole", ...)."""
    ip = ipaddress.ip_address(address)
    family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
    packed = ip.packed
    attr = struct.pack("=HH", 4 + len(packed), _RTA_DST) + packed
    body = _RTMSG.pack(family, len(packed) * 8, 0, 0, 0, 0, 0, 0, 0) + attr
    sock.send(_NLMSG_HEADER.pack(_NLMSG_HEADER.size + len(body), _RTM_GETROUTE,
                                 _NLM_F_REQUEST, seq, 0) + body)
    while True:
        reply = sock.recv(65536)
        _length, kind, _flags, reply_seq, _pid = _NLMSG_HEADER.unpack_from(reply)
        if reply_seq != seq:
            continue  # an answer to an earlier question that timed out
        if kind == _NLMSG_ERROR:
            (error,) = struct.unpack_from("=i", reply, _NLMSG_HEADER.size)
            return "unreachable" if error else "unspecified"
        if kind != _RTM_NEWROUTE:
            return "unspecified"
        rtm_type = _RTMSG.unpack_from(reply, _NLMSG_HEADER.size)[7]
        return _ROUTE_TYPES.get(rtm_type, "unspecified")


class Uplink:
    """Sockets made in the uplink namespace, by one thread that lives there."""

    def __init__(self, netns_fd: int):
        """`netns_fd`: an open descriptor of the uplink namespace (owned from now on). Nothing
        runs until `start`."""
        self._host_routes: socket.socket | None = None
        self._netns_fd = netns_fd
        self._target = os.fstat(netns_fd).st_ino
        self._route_sock: socket.socket | None = None
        self._seq = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentcage-uplink",
                                            initializer=self._join)
        self.thread_id: int | None = None

    def start(self, host_routes: socket.socket | None = None) -> None:
        """Start the uplink's thread (the first thread of the process after the main one: it
        starts in the gateway's namespace, which the process entered, and leaves it for the
        uplink). `host_routes`: for a rootless cage, whose uplink is a network of its own that
        reaches the host's through slirp4netns, a netlink socket of the host's namespace
        (owned from now on): an address that the host routes as its own is refused too."""
        self._host_routes = host_routes
        if host_routes is not None:
            host_routes.settimeout(2)
        try:
            self.thread_id = self._executor.submit(self._check).result(timeout=10)
        except Exception as e:
            self.close()
            raise UplinkError(f"cannot join the uplink network namespace: {e}") from None

    @classmethod
    def of_path(cls, path: str) -> Uplink:
        uplink = cls(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        uplink.start()
        return uplink

    def _join(self) -> None:
        # A pod's gateway is in its uplink already (and has no capability to setns at all)
        if os.stat("/proc/thread-self/ns/net").st_ino != self._target:
            os.setns(self._netns_fd, os.CLONE_NEWNET)
        self._route_sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
        self._route_sock.settimeout(2)

    def _check(self) -> int:
        """Runs on the uplink thread: proof that it is in the uplink namespace."""
        if os.stat("/proc/thread-self/ns/net").st_ino != self._target:
            raise UplinkError("the uplink thread is not in the uplink namespace")
        return threading.get_native_id()

    # ---- on the uplink thread ------------------------------------------------------------

    def _make_socket(self, family: int, kind: int) -> socket.socket:
        self._check()
        sock = socket.socket(family, kind)
        if kind == socket.SOCK_STREAM:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_SYNCNT, _SYN_RETRIES)
        sock.setblocking(False)
        return sock

    def _route(self, address: str) -> str:
        assert self._route_sock is not None
        self._seq = self._seq % 0x7FFFFFFF + 1
        route = route_type(self._route_sock, address, self._seq)
        if route == "unicast" and self._host_routes is not None:
            on_host = route_type(self._host_routes, address, self._seq)
            if on_host != "unicast":
                return f"{on_host} on the host"
        return route

    # ---- from the event loop -------------------------------------------------------------

    async def socket(self, family: int, kind: int) -> socket.socket:
        """A non-blocking socket in the uplink namespace."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._make_socket, family, kind)
        except RuntimeError as e:  # the executor is shut down or broken
            raise UplinkError(f"the uplink is closed: {e}") from None

    async def route(self, address: str) -> str:
        """How the uplink routes `address` (see `route_type`); only "unicast" leaves the host."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._route, address)
        except (RuntimeError, OSError) as e:
            raise UplinkError(f"cannot look up the route to {address}: {e}") from None

    def close(self) -> None:
        """Idempotent (a failed `start` closes, and so does its owner after)."""
        if self._netns_fd < 0:
            return
        self._executor.shutdown(wait=True, cancel_futures=True)
        if self._route_sock is not None:
            self._route_sock.close()
        if self._host_routes is not None:
            self._host_routes.close()
        os.close(self._netns_fd)
        self._netns_fd = -1
