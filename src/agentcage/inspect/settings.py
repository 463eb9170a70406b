"""The settings of the built-in inspectors that cage.yaml configures, with their defaults:
declared once, here, apart from the inspectors themselves, so that what only reads or writes
settings (the CLI's cage.yaml schema, the backend writing the gateway's settings) does not load
the inspectors' code. The inspectors' modules export them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class EntropySettings:
    enable: bool = True
    body_threshold: float = 7.0
    body_min_bytes: int = 256
    value_threshold: float = 5.5
    value_min_bytes: int = 64
    decoded_min_bytes: int = 96  # single SHA-256/512 digests (32/64 bytes) stay below this
    decoded_margin: float = 0.5  # bits/byte below the random expectation still called random
    header_min_bytes: int = 256  # decoded bytes; headers carry opaque tokens more often
    header_exempt: tuple[str, ...] = ("cookie", "x-amz-security-token")
    sample_window: int = 4096
    sample_windows: int = 16  # large bodies: entropy of this many windows, evenly spaced
    media_action: Literal["flag", "block"] = "flag"
    decode_depth: int = 3  # layers of encoding peeled off (base64 of hex of random: 2)


@dataclass(frozen=True)
class ContentTypeSettings:
    enable: bool = True
    base64_min_chars: int = 256
    action: Literal["flag", "block"] = "flag"
