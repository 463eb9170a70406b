"""Streaming Content-Encoding decoders: the same bytes as a whole-body decode, whatever the piece
size; bounded output per piece (a compression bomb never inflates at once); corrupt, cut-short
and unknown encodings raise DecodeError."""

from __future__ import annotations

import gzip
import os
import zlib

import brotli
import pytest
from mitmproxy.net import encoding as mitm_encoding

from agentcage.gateway.decoding import PIECE, DecodeError, decoder_for, is_encoded

BODY = b"".join(b"line %d %s\n" % (i, os.urandom(8).hex().encode()) for i in range(20000))


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


ENCODED = {
    "gzip": gzip.compress(BODY),
    "x-gzip": gzip.compress(BODY),
    "deflate": zlib.compress(BODY),
    "br": brotli.compress(BODY),
    "zstd": mitm_encoding.encode(BODY, "zstd"),
    "identity": BODY,
}


def decode(header: list[str], data: bytes, piece: int) -> list[bytes]:
    d = decoder_for(header)
    out: list[bytes] = []
    for i in range(0, len(data), piece):
        out += d.feed(data[i:i + piece])
    out += d.finish()
    return out


@pytest.mark.parametrize("name", sorted(ENCODED))
@pytest.mark.parametrize("piece", [7, 4096, 10 ** 9])
def test_piecewise_decode_equals_the_body(name, piece):
    assert b"".join(decode([name], ENCODED[name], piece)) == BODY


@pytest.mark.parametrize("name", sorted(ENCODED))
def test_byte_by_byte(name):
    small = BODY[:3000]
    data = mitm_encoding.encode(small, "gzip" if name == "x-gzip" else name)
    assert b"".join(decode([name], data, 1)) == small


def test_raw_deflate_as_some_servers_send_it():
    assert b"".join(decode(["deflate"], raw_deflate(BODY), 1000)) == BODY


def test_gzip_members_that_follow_each_other():
    data = gzip.compress(BODY[:5000]) + gzip.compress(BODY[5000:])
    assert b"".join(decode(["gzip"], data, 333)) == BODY


def test_two_encodings_undone_in_reverse_order():
    data = brotli.compress(gzip.compress(BODY))  # "Content-Encoding: gzip, br"
    assert b"".join(decode(["gzip, br"], data, 5000)) == BODY
    assert b"".join(decode(["gzip", "br"], data, 5000)) == BODY


@pytest.mark.parametrize("name", ["gzip", "deflate", "br", "zstd"])
def test_a_bomb_inflates_one_bounded_piece_at_a_time(name):
    bomb = mitm_encoding.encode(b"\0" * (64 * 1024 * 1024), name)
    assert len(bomb) < 1024 * 1024
    d = decoder_for([name])
    bound = 2 * PIECE if name == "br" else PIECE  # brotli's limit stops growth once reached
    total = 0
    for piece in [*d.feed(bomb), *d.finish()]:
        assert len(piece) <= bound
        total += len(piece)
    assert total == 64 * 1024 * 1024


@pytest.mark.parametrize("name", ["gzip", "deflate", "br", "zstd"])
def test_cut_short_raises(name):
    data = ENCODED[name][: len(ENCODED[name]) // 2]
    with pytest.raises(DecodeError):
        decode([name], data, 4096)


@pytest.mark.parametrize("name", ["gzip", "br", "zstd"])
def test_corrupt_raises(name):
    data = bytes(b ^ 0x5A for b in ENCODED[name])
    with pytest.raises(DecodeError):
        decode([name], data, 4096)


def test_data_after_a_deflate_stream_raises():
    with pytest.raises(DecodeError, match="after the end"):
        decode(["deflate"], zlib.compress(BODY) + b"trailing", 4096)


@pytest.mark.parametrize("header", [["compress"], ["gzip, exotic"], ["x-custom"]])
def test_unknown_encoding_raises_at_once(header):
    with pytest.raises(DecodeError, match="cannot decode"):
        decoder_for(header)


def test_is_encoded():
    assert not is_encoded([]) and not is_encoded(["identity"]) and is_encoded(["gzip"])
