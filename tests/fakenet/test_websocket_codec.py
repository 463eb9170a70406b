"""fakenet's WebSocket codec and echo loop, without namespaces (a socketpair stands for TCP)."""

from __future__ import annotations

import asyncio
import os
import socket
import struct

import pytest

from fakenet import websocket as ws
from fakenet.httpparse import RequestParser


def test_accept_key_matches_rfc_6455_example() -> None:
    assert ws.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_masking_is_its_own_inverse_and_matches_bytewise_xor() -> None:
    key, data = b"\x37\xfa\x21\x3d", b"Hello"
    assert ws.mask(data, key) == bytes(b ^ key[i % 4] for i, b in enumerate(data))
    assert ws.mask(ws.mask(data, key), key) == data
    assert ws.mask(b"", key) == b""
    # the RFC's example: a masked "Hello" text frame
    assert ws.encode_frame(ws.TEXT, b"Hello", mask_key=key) == bytes.fromhex(
        "818537fa213d7f9f4d5158")


@pytest.mark.parametrize(("size", "header"), [(125, 2), (126, 4), (65535, 4), (65536, 10)])
def test_length_forms_round_trip(size: int, header: int) -> None:
    payload = os.urandom(size)
    key = os.urandom(4)
    raw = ws.encode_frame(ws.BINARY, payload, mask_key=key)
    assert len(raw) == header + 4 + size
    assert raw[1] & 0x7F == {2: size, 4: 126, 10: 127}[header]
    parser = ws.FrameParser()
    # byte-wise across the header, then the rest: incomplete input yields nothing yet
    frames = [f for i in range(header + 4) for f in parser.feed(raw[i:i + 1])]
    assert frames == []
    assert parser.feed(raw[header + 4:]) == [ws.Frame(True, ws.BINARY, payload)]
    unmasked = ws.encode_frame(ws.BINARY, payload)
    assert ws.FrameParser(require_mask=False).feed(unmasked) == [
        ws.Frame(True, ws.BINARY, payload)]


def test_fragments_are_reassembled_and_controls_pass_between() -> None:
    key = b"abcd"
    raw = (ws.encode_frame(ws.TEXT, b"hel", fin=False, mask_key=key)
           + ws.encode_frame(ws.PING, b"p", mask_key=key)
           + ws.encode_frame(ws.CONT, b"lo", mask_key=key))
    assembler = ws.MessageAssembler()
    out = [assembler.add(f) for f in ws.FrameParser().feed(raw)]
    assert out == [None, ws.Message(ws.PING, b"p"), ws.Message(ws.TEXT, b"hello")]


@pytest.mark.parametrize("raw", [
    ws.encode_frame(ws.TEXT, b"unmasked"),  # a client must mask
    bytes([0x80 | 0x40 | ws.TEXT, 0x80]) + b"abcd",  # RSV1 without an extension
    bytes([0x83, 0x80]) + b"abcd",  # reserved opcode
    ws.encode_frame(ws.PING, b"x" * 126, mask_key=b"abcd"),  # control frame too long
    ws.encode_frame(ws.CLOSE, b"", fin=False, mask_key=b"abcd"),  # fragmented control
    bytes([0x82, 0xFF]) + struct.pack("!Q", 1 << 63) + b"abcd",  # 64-bit length high bit
])
def test_bad_frames_are_refused(raw: bytes) -> None:
    with pytest.raises(ws.WebSocketError):
        ws.FrameParser().feed(raw)


def test_continuation_without_start_and_bad_utf8_are_refused() -> None:
    with pytest.raises(ws.WebSocketError):
        ws.MessageAssembler().add(ws.Frame(True, ws.CONT, b"x"))
    with pytest.raises(ws.WebSocketError) as info:
        ws.MessageAssembler().add(ws.Frame(True, ws.TEXT, b"\xff\xfe"))
    assert info.value.code == 1007


def test_request_parser_stops_at_the_handshake_and_keeps_the_frames() -> None:
    frame = ws.encode_frame(ws.TEXT, b"\r\n\r\nnot http", mask_key=b"\r\n\r\n")
    head = (b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: keep-alive, "
            b"Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n")
    parser = RequestParser()
    (request,) = parser.feed(head + frame)
    assert request.upgrades_to_websocket and parser.feed(b"more") == []
    assert parser.leftover() == frame + b"more"


def _echo_server(leftover: bytes, sent: bytes) -> tuple[bytes, list[bytes], list[bytes]]:
    """Run ws.serve on one end of a socketpair; the test writes `sent` to the other end and
    returns (what came back, raw chunks seen, messages recorded)."""
    raw_seen: list[bytes] = []
    messages: list[bytes] = []

    async def run() -> bytes:
        ours, theirs = socket.socketpair()
        reader, writer = await asyncio.open_connection(sock=ours)
        server = asyncio.create_task(ws.serve(reader, writer, leftover, 5.0, raw_seen.append,
                                              lambda m: messages.append(m.payload)))
        loop = asyncio.get_running_loop()
        theirs.setblocking(False)
        await loop.sock_sendall(theirs, sent)
        await asyncio.wait_for(server, 5)
        writer.close()
        back = b""
        while chunk := await loop.sock_recv(theirs, 65536):
            back += chunk
        theirs.close()
        return back

    return asyncio.run(run()), raw_seen, messages


def test_echo_loop_records_and_echoes_then_closes_cleanly() -> None:
    key = b"k3y!"
    big = os.urandom(70000)
    first = ws.encode_frame(ws.TEXT, b"hi", mask_key=key)
    rest = (ws.encode_frame(ws.BINARY, big, mask_key=key)
            + ws.encode_frame(ws.PING, b"pp", mask_key=key)
            + ws.encode_frame(ws.CLOSE, struct.pack("!H", 1000), mask_key=key))
    back, raw, messages = _echo_server(first, rest)
    assert messages == [b"hi", big]
    assert b"".join(raw) == rest
    frames = ws.FrameParser(require_mask=False).feed(back)
    assert [(f.opcode, f.payload) for f in frames] == [
        (ws.TEXT, b"hi"), (ws.BINARY, big), (ws.PONG, b"pp"),
        (ws.CLOSE, struct.pack("!H", 1000))]


def test_a_bad_frame_closes_the_connection_with_1002() -> None:
    good = ws.encode_frame(ws.TEXT, b"ok", mask_key=b"abcd")
    after = ws.encode_frame(ws.TEXT, b"never recorded", mask_key=b"abcd")
    back, _raw, messages = _echo_server(b"", good + ws.encode_frame(ws.TEXT, b"bad") + after)
    assert messages == [b"ok"]
    frames = ws.FrameParser(require_mask=False).feed(back)
    assert frames[0] == ws.Frame(True, ws.TEXT, b"ok")
    assert frames[1].opcode == ws.CLOSE and frames[1].payload[:2] == struct.pack("!H", 1002)
    assert len(frames) == 2  # and the connection ended (the read above saw EOF)
