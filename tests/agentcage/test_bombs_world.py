"""Compression bombs through a real cage and gateway, in every encoding and framing.

fakenet's `/bomb/<size>` sends <size> zero bytes compressed (gzip, deflate, br, zstd, gzip
twice), with a Content-Length (small enough to be buffered) or chunked. Every body the gateway
decodes goes through its one bounded decoder: with a secret staged (the response must be
decoded to be redacted) a bomb is cut off at the ratio bound and the audit says why; the
capture decodes only its prefix; a request bomb is refused before anything goes upstream. The
gateway's peak memory grows by far less than the bomb in every case.
"""

from __future__ import annotations

import gzip
import os

import pytest

from tests.agentcage.conftest import AGENT_UID, start_cage
from tests.agentcage.test_gateway_world import canary

pytestmark = pytest.mark.netns

MiB = 1024 * 1024
BOMB = 512 * MiB  # decoded size; on the wire 2 MiB (gzip) down to a few KiB (br)
ENV = "BOMB_TOKEN"
EXTRA = f"""
secret_injection:
  - env: {ENV}
    inject_to: [api.example.test]
capture:
  enable_har: true
"""
CURL = "curl -sS -m 60 --noproxy '*'"


@pytest.fixture(scope="module")
def bcage(net):
    gen = start_cage(net, "bombs", ["api.example.test"], extra=EXTRA)
    cage = next(gen)
    try:
        assert cage.service.secret_set(cage.name, ENV, b"cnry-" + canary().encode())["applied"]
        # warm up: a compressed response decoded, redacted and captured, once, so that first-use
        # costs (lazy imports, buffers) are not counted against the first bomb
        r = cage.sh(f'{CURL} -o /dev/null -w "%{{http_code}}" '
                    f'"https://api.example.test/bomb/{8 * MiB}?encoding=gzip&chunked=1&warm=1"')
        assert r.stdout == "200", r
        yield cage
    finally:
        gen.close()


def outcome_of(cage, path: str) -> dict:
    (rec,) = [r for r in cage.audit() if r.get("direction") == "response"
              and r.get("path") == path]
    return rec


@pytest.mark.parametrize("chunked", ["0", "1"])
@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd", "gzip,gzip"])
def test_bomb_response_is_cut_off_in_bounded_memory(bcage, encoding, chunked):
    before = bcage.peak_rss_kib()
    query = f"encoding={encoding}&chunked={chunked}"
    r = bcage.sh(f'{CURL} -o /workspace/bomb -w "%{{http_code}}" '
                 f'"https://api.example.test/bomb/{BOMB}?{query}"', timeout=120)
    assert r.returncode != 0, r  # a broken transfer, never a complete-looking one
    received = (bcage.project / "bomb").stat().st_size
    assert received <= 128 * MiB, f"{received >> 20} MiB reached the cage"  # 64 MiB + pieces
    rec = outcome_of(bcage, f"/bomb/{BOMB}?{query}")
    assert (rec["decision"], rec["by"], rec["outcome"]) == ("blocked", "redaction", "cut")
    assert "compression bomb" in rec["reason"]
    grown = (bcage.peak_rss_kib() - before) / 1024
    # far less than the bomb: a piece of it at a time (one read of the compressed body can
    # decode to a few MiB at once), and what waits for the cage's client to take it
    assert grown < BOMB / MiB / 4, f"peak RSS grew by {grown:.0f} MiB for a {BOMB >> 20} MiB bomb"


def test_bomb_response_over_http2(bcage):
    r = bcage.sh(f'{CURL} --http2 -o /workspace/bomb2 -w "%{{http_code}}" '
                 f'"https://api.example.test/bomb/{BOMB}?encoding=br&chunked=1&h2=1"',
                 timeout=120)
    assert r.returncode != 0, r
    assert "compression bomb" in outcome_of(
        bcage, f"/bomb/{BOMB}?encoding=br&chunked=1&h2=1")["reason"]


def test_a_small_compressed_response_is_decoded_and_served_whole(bcage):
    """The control: a compressed body well inside the bound arrives whole and decoded."""
    r = bcage.sh(f'{CURL} -o /workspace/small -w "%{{http_code}}" '
                 f'"https://api.example.test/bomb/{4 * MiB}?encoding=gzip&chunked=0"')
    assert (r.returncode, r.stdout) == (0, "200"), r
    assert (bcage.project / "small").read_bytes() == bytes(4 * MiB)
    assert outcome_of(bcage, f"/bomb/{4 * MiB}?encoding=gzip&chunked=0")["outcome"] == "served"


def test_request_bomb_is_refused_before_upstream(bcage):
    """A gzip request body that would inflate past max_request_body is refused (its bound is
    the body limit), not inflated, and nothing goes upstream."""
    bomb = bcage.project / "req.gz"
    bomb.write_bytes(gzip.compress(bytes(64 * MiB), 1))
    os.chown(bomb, AGENT_UID, AGENT_UID)
    before = bcage.peak_rss_kib()
    c = canary()
    r = bcage.sh(f'{CURL} -o /dev/null -w "%{{http_code}}" -H "Content-Encoding: gzip" '
                 f'--data-binary @/workspace/req.gz "https://api.example.test/{c}"')
    assert r.stdout == "403", r
    (rec,) = [x for x in bcage.audit() if x.get("path") == f"/{c}"]
    assert rec["direction"] == "outbound" and rec["by"] == "body"
    assert "more than" in rec["reason"]
    assert not bcage.net.received(c)
    assert (bcage.peak_rss_kib() - before) / 1024 < 64
