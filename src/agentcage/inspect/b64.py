"""Lenient base64 decoding of spans found in text (either alphabet, padding optional)."""

from __future__ import annotations

import base64
import binascii

_URLSAFE_TO_STD = bytes.maketrans(b"-_", b"+/")


def decode_loose(span: bytes, urlsafe: bool = False) -> bytes:
    """`span` decoded; a last partial group still gives its bytes (a key ending there must not
    lose its last character), a lone trailing character is dropped; b"" if invalid."""
    if urlsafe:
        span = span.translate(_URLSAFE_TO_STD)
    rest = len(span) % 4
    usable = span[:-1] if rest == 1 else span + b"=" * ((4 - rest) % 4)
    try:
        return base64.b64decode(usable, validate=True)
    except (binascii.Error, ValueError):
        return b""
