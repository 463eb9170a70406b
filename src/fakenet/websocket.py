"""A small RFC 6455 WebSocket server: the `/ws` endpoint of every HTTP and HTTPS server.

Our own (stdlib only), like the HTTP parser: it runs in the server process and must record
exactly what a client sent. Every message received (text or binary, reassembled from its
fragments, unmasked) is recorded as one sink record of proto "ws" or "wss", so
`FakeInternet.received()` sees WebSocket payloads, and echoed back with the same opcode, so a
test can see what a proxy does to server-to-client frames. A ping is answered with a pong; a
close is answered with a close. A frame that breaks the protocol (unmasked, reserved bits,
unknown opcode, bad control frame, over the size limit) gets a close 1002/1009 and the
connection is dropped.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
PATH = "/ws"
MAX_MESSAGE = 16 * 1024 * 1024

CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_DATA = (CONT, TEXT, BINARY)
_CONTROL = (CLOSE, PING, PONG)

CLOSE_NORMAL, CLOSE_PROTOCOL, CLOSE_TOO_BIG = 1000, 1002, 1009


class WebSocketError(ValueError):
    """The peer broke the protocol; `code` is the close code to answer with."""

    def __init__(self, message: str, code: int = CLOSE_PROTOCOL):
        super().__init__(message)
        self.code = code


def accept_key(key: str) -> str:
    """Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 section 4.2.2)."""
    return base64.b64encode(hashlib.sha1(key.encode("ascii") + GUID).digest()).decode()


def mask(data: bytes, key: bytes) -> bytes:
    """XOR with the 4-byte key repeated (masking and unmasking are the same operation)."""
    if not data:
        return b""
    n = len(data)
    stream = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream, "big")).to_bytes(n, "big")


def encode_frame(opcode: int, payload: bytes, *, fin: bool = True,
                 mask_key: bytes | None = None) -> bytes:
    """One frame; masked when `mask_key` (4 bytes) is given, as a client must send."""
    head = bytearray([(0x80 if fin else 0) | opcode])
    bit = 0x80 if mask_key is not None else 0
    n = len(payload)
    if n <= 125:
        head.append(bit | n)
    elif n <= 0xFFFF:
        head.append(bit | 126)
        head += struct.pack("!H", n)
    else:
        head.append(bit | 127)
        head += struct.pack("!Q", n)
    if mask_key is None:
        return bytes(head) + payload
    if len(mask_key) != 4:
        raise ValueError("mask key must be 4 bytes")
    return bytes(head) + mask_key + mask(payload, mask_key)


@dataclass(frozen=True)
class Frame:
    fin: bool
    opcode: int
    payload: bytes  # unmasked


@dataclass(frozen=True)
class Message:
    opcode: int  # TEXT or BINARY for data, or the control opcode
    payload: bytes


class FrameParser:
    """Bytes in, whole frames out; client frames must be masked (`require_mask`)."""

    def __init__(self, *, require_mask: bool = True, max_size: int = MAX_MESSAGE):
        self._buf = bytearray()
        self.require_mask = require_mask
        self.max_size = max_size

    def feed(self, data: bytes) -> list[Frame]:
        """Add bytes; every frame they complete (raises at the first bad one)."""
        self.add(data)
        frames = []
        while (frame := self.next_frame()) is not None:
            frames.append(frame)
        return frames

    def add(self, data: bytes) -> None:
        self._buf += data

    def next_frame(self) -> Frame | None:
        """The next complete frame, or None while incomplete; WebSocketError on a bad one."""
        buf = self._buf
        if len(buf) < 2:
            return None
        b0, b1 = buf[0], buf[1]
        fin, opcode = bool(b0 & 0x80), b0 & 0x0F
        if b0 & 0x70:
            raise WebSocketError("reserved bits set (no extension was negotiated)")
        if opcode not in _DATA and opcode not in _CONTROL:
            raise WebSocketError(f"unknown opcode {opcode:#x}")
        masked, n = bool(b1 & 0x80), b1 & 0x7F
        if self.require_mask and not masked:
            raise WebSocketError("client frame not masked")
        pos = 2
        if n == 126:
            if len(buf) < 4:
                return None
            (n,) = struct.unpack_from("!H", buf, 2)
            pos = 4
        elif n == 127:
            if len(buf) < 10:
                return None
            (n,) = struct.unpack_from("!Q", buf, 2)
            if n >> 63:
                raise WebSocketError("64-bit length with the high bit set")
            pos = 10
        if opcode in _CONTROL and (n > 125 or not fin):
            raise WebSocketError("control frame fragmented or longer than 125 bytes")
        if n > self.max_size:
            raise WebSocketError(f"frame of {n} bytes is over the limit", CLOSE_TOO_BIG)
        key = b""
        if masked:
            if len(buf) < pos + 4:
                return None
            key = bytes(buf[pos:pos + 4])
            pos += 4
        if len(buf) < pos + n:
            return None
        payload = bytes(buf[pos:pos + n])
        del buf[:pos + n]
        return Frame(fin, opcode, mask(payload, key) if masked else payload)


class MessageAssembler:
    """Frames in, messages out: data fragments joined, control frames passed through."""

    def __init__(self, max_size: int = MAX_MESSAGE):
        self.max_size = max_size
        self._opcode: int | None = None
        self._parts: list[bytes] = []
        self._size = 0

    def add(self, frame: Frame) -> Message | None:
        if frame.opcode in _CONTROL:
            return Message(frame.opcode, frame.payload)
        if frame.opcode == CONT:
            if self._opcode is None:
                raise WebSocketError("continuation frame without a message to continue")
        elif self._opcode is not None:
            raise WebSocketError("new data frame inside a fragmented message")
        else:
            self._opcode = frame.opcode
        self._parts.append(frame.payload)
        self._size += len(frame.payload)
        if self._size > self.max_size:
            raise WebSocketError("message over the limit", CLOSE_TOO_BIG)
        if not frame.fin:
            return None
        message = Message(self._opcode, b"".join(self._parts))
        self._opcode, self._parts, self._size = None, [], 0
        if message.opcode == TEXT:
            try:
                message.payload.decode("utf-8")
            except UnicodeDecodeError:
                raise WebSocketError("text message is not UTF-8", 1007) from None
        return message


def handshake_response(key: str) -> bytes:
    return ("HTTP/1.1 101 Switching Protocols\r\n"
            "Upgrade: websocket\r\n"
            "Connection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {accept_key(key)}\r\n"
            "Server: fakenet\r\n\r\n").encode()


def close_frame(code: int, reason: str = "") -> bytes:
    return encode_frame(CLOSE, struct.pack("!H", code) + reason.encode()[:120])


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, leftover: bytes,
                idle_timeout: float, on_bytes: Callable[[bytes], None],
                on_message: Callable[[Message], None]) -> None:
    """Run the echo server on an upgraded connection until close, error or idle timeout.

    `on_bytes(data)` sees every chunk read after `leftover` (which the caller has seen);
    `on_message(message)` every data message, before it is echoed.
    """
    parser, assembler = FrameParser(), MessageAssembler()
    data = leftover
    try:
        while True:
            if data:
                parser.add(data)
                while (frame := parser.next_frame()) is not None:
                    message = assembler.add(frame)
                    if message is None:
                        continue
                    if message.opcode in (TEXT, BINARY):
                        on_message(message)
                        writer.write(encode_frame(message.opcode, message.payload))
                    elif message.opcode == PING:
                        writer.write(encode_frame(PONG, message.payload))
                    elif message.opcode == CLOSE:
                        code = message.payload[:2] if len(message.payload) >= 2 else b""
                        writer.write(encode_frame(CLOSE, code))
                        await writer.drain()
                        return
                await writer.drain()
            try:
                data = await asyncio.wait_for(reader.read(65536), idle_timeout)
            except TimeoutError:
                writer.write(close_frame(1001, "idle"))
                await writer.drain()
                return
            if not data:
                return
            on_bytes(data)
    except WebSocketError as exc:
        writer.write(close_frame(exc.code, str(exc)))
        await writer.drain()
