"""Large and streamed responses through a real cage and its real gateway, in the fake internet.

A response over `max_request_body` (10 MiB) or of unknown length is streamed: decoded, redacted
piece by piece, passed on. fakenet's `/download/<size>` serves bodies of any size, encoding and
framing, and echoes a `fill` text from the URL (where the gateway injects the real secret), so
the real value comes back thousands of times, across every chunk boundary.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from mitmproxy.net import encoding

from fakenet.downloads import pattern
from tests.agentcage.conftest import start_cage
from tests.agentcage.test_secrets_world import ALLOW, CURL, ENV, VALUE, placeholder, secrets_cage

pytestmark = pytest.mark.netns

MiB = 1024 * 1024
SIZE = 12 * MiB + 12345  # over the 10 MiB buffering limit, and not a round number
LINE = len(VALUE) + 1  # fakenet's fill line: the value and a newline
ECHO_LINES = 11 * MiB // LINE + 1  # over 10 MiB of echoed lines


@pytest.fixture(scope="module")
def scage(net):
    yield from secrets_cage(net, "stream")


@pytest.fixture(scope="module")
def plain(net):
    """A cage with no secret staged: nothing to redact, bodies pass as they came."""
    yield from start_cage(net, "plainstream", ALLOW)


def download(cage, name: str, query: str, size: int = SIZE, extra: str = "") -> tuple[int, str]:
    """Fetch /download/<size>?<query> into /workspace/<name>; (curl exit code, http code)."""
    # -m 90 overrides CURL's 10 s: 96 MiB on a loaded 2-core machine can take longer
    r = cage.sh(f'{CURL} -m 90 {extra} -D /workspace/{name}.headers -o /workspace/{name} '
                f'-w "%{{http_code}}" "https://api.example.test/download/{size}?{query}"',
                timeout=150)
    return r.returncode, r.stdout.strip()


def headers(cage, name: str) -> dict[str, str]:
    text = (cage.project / f"{name}.headers").read_text()
    out = {}
    for line in text.splitlines()[1:]:
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out


def status_line(cage, name: str) -> str:
    return (cage.project / f"{name}.headers").read_text().splitlines()[0]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def audit_for(cage, fragment: str, direction: str = "response") -> list[dict]:
    """Records of requests whose path holds `fragment`: by default what came of them."""
    return [r for r in cage.audit() if fragment in (r.get("path") or "")
            and r.get("direction") == direction]


@pytest.mark.parametrize(("encoding", "chunked"), [
    ("identity", "0"), ("identity", "1"), ("gzip", "1"), ("deflate", "1"), ("br", "1"),
    ("zstd", "1"),
])
def test_large_download_arrives_whole_with_secrets_staged(scage, encoding, chunked):
    """Over 10 MiB (Content-Length) or of unknown length (chunked): streamed, decoded,
    redacted; the cage gets every byte, decoded, without a length the redaction could break."""
    name = f"dl-{encoding}-{chunked}.bin"
    code, status = download(scage, name, f"encoding={encoding}&chunked={chunked}")
    assert (code, status) == (0, "200")
    assert sha256(scage.project / name) == hashlib.sha256(pattern(SIZE)).hexdigest()
    got = headers(scage, name)
    assert "content-length" not in got and "content-encoding" not in got
    if status_line(scage, name).startswith("HTTP/1.1"):  # HTTP/2 frames itself
        assert got.get("transfer-encoding") == "chunked"
    (rec,) = audit_for(scage, f"encoding={encoding}&chunked={chunked}")
    assert rec["decision"] == "allowed"


@pytest.mark.parametrize(("flag", "version"), [("--http1.1", "HTTP/1.1"), ("--http2", "HTTP/2")])
def test_streamed_framing_for_each_client_protocol(scage, flag, version):
    """HTTP/1.1: chunked (so a cut-off body is visible as such); HTTP/2 frames itself."""
    name = f"framing{flag}.bin"
    code, status = download(scage, name, f"chunked=1&encoding=gzip&framing={flag}", extra=flag)
    assert (code, status) == (0, "200")
    assert status_line(scage, name).startswith(version)
    got = headers(scage, name)
    assert "content-length" not in got and "content-encoding" not in got
    assert (got.get("transfer-encoding") == "chunked") == (version == "HTTP/1.1")
    assert sha256(scage.project / name) == hashlib.sha256(pattern(SIZE)).hexdigest()


def test_compressed_body_under_the_limit_is_streamed_decoded_when_secrets_are_staged(scage):
    """12 MiB that compresses to far less, with a Content-Length under the buffering limit:
    with a secret to redact it is streamed all the same, decoded piece by piece (decoding it
    whole could take any multiple of its size in memory), and reaches the cage decoded."""
    name = "dl-br-0.bin"
    code, status = download(scage, name, "encoding=br&chunked=0")
    assert (code, status) == (0, "200")
    got = headers(scage, name)
    assert "content-encoding" not in got and "content-length" not in got
    assert (scage.project / name).read_bytes() == pattern(SIZE)


@pytest.mark.parametrize("query", ["chunked=1&encoding=gzip", "chunked=0&encoding=identity"])
def test_value_echoed_in_a_large_body_reaches_the_cage_only_as_placeholder(scage, query):
    """The gateway injects the value into the URL; fakenet echoes it back over 10 MiB, across
    every chunk and piece boundary; the cage receives the placeholder in every line."""
    ph = placeholder(scage)
    name = f"echo-{query.replace('&', '-').replace('=', '')}.bin"
    code, status = download(scage, name, f"{query}&fill=${ENV}", size=ECHO_LINES * LINE)
    assert (code, status) == (0, "200")
    body = (scage.project / name).read_bytes()
    assert VALUE.encode() not in body
    assert body == (ph.encode() + b"\n") * ECHO_LINES
    (seen,) = [q for q in scage.net.http_requests() if f"/download/{ECHO_LINES * LINE}?{query}"
               in q["path"]]
    assert f"fill={VALUE}" in seen["path"]  # it really was injected and really echoed
    (rec,) = audit_for(scage, f"?{query}&fill=")
    assert rec["decision"] == "allowed"
    assert rec["secrets_injected"] == [ENV] and rec["secrets_redacted"] == [ENV]


def test_body_that_fails_to_decode_halfway_is_cut_off_and_audited(scage):
    """Corrupt gzip after the first half: the cage gets a broken transfer (curl fails), never a
    complete-looking partial body, and the audit says why."""
    code, _status = download(scage, "corrupt.bin", "encoding=gzip&chunked=1&corrupt=1")
    assert code != 0
    body = (scage.project / "corrupt.bin").read_bytes()
    assert len(body) < SIZE
    # the intact first half of the compressed data decoded to the true start of the body
    # (garbled data may inflate to garbage for a while before deflate notices)
    assert len(body) > MiB and body[:MiB] == pattern(MiB)
    (rec,) = audit_for(scage, "corrupt=1")
    assert rec["decision"] == "blocked" and rec["by"] == "redaction"
    assert "cut off" in rec["reason"]


def test_encoding_the_gateway_cannot_decode_is_refused_when_secrets_are_staged(scage):
    code, _status = download(scage, "compress.bin", "encoding=compress&chunked=1")
    assert code != 0
    assert not (scage.project / "compress.bin").exists() or \
        (scage.project / "compress.bin").stat().st_size == 0
    (rec,) = audit_for(scage, "encoding=compress")
    assert rec["decision"] == "blocked" and rec["by"] == "redaction"
    assert "compress" in rec["reason"]


def gateway_peak_kib(cage) -> int:
    """The gateway process's peak resident memory (VmHWM) so far, after one small streamed
    download (so first-use costs, TLS setup and lazy imports, are not counted)."""
    code, status = download(cage, "warm.bin", "chunked=1", size=MiB)
    assert (code, status) == (0, "200")
    return cage.peak_rss_kib()


def test_large_download_stays_out_of_gateway_memory(scage):
    """96 MiB through the redacting stream: the gateway's peak RSS grows by far less than the
    body (a buffered body would add at least its own size)."""
    def peak_kib() -> int:
        return gateway_peak_kib(scage)

    before = peak_kib()
    size = 96 * MiB
    code, status = download(scage, "big.bin", "chunked=1", size=size)
    assert (code, status) == (0, "200")
    assert (scage.project / "big.bin").stat().st_size == size
    grown_mib = (peak_kib() - before) / 1024
    assert grown_mib < 32, f"gateway peak RSS grew by {grown_mib:.0f} MiB for a 96 MiB body"


def test_without_secrets_the_body_passes_as_it_came(plain):
    """Nothing to redact: Content-Length and Content-Encoding are kept, the bytes untouched."""
    name = "plain-gzip.bin"
    r = plain.sh(f'{CURL} -m 90 -D /workspace/{name}.headers -o /workspace/{name} '
                 f'-w "%{{http_code}}" "https://api.example.test/download/{SIZE}?encoding=gzip"',
                 timeout=120)
    assert (r.returncode, r.stdout) == (0, "200")
    got = headers(plain, name)
    assert got["content-encoding"] == "gzip"
    data = (plain.project / name).read_bytes()
    assert int(got["content-length"]) == len(data)
    assert encoding.decode(data, "gzip") == pattern(SIZE)


def test_first_piece_reaches_the_cage_before_the_server_finishes(scage):
    """Server-sent events: the server sends its first piece, then is silent for 3 s. Streamed,
    the cage has the response at once; buffered, it would wait for the end (a ratio of the
    same transfer's own times, not an absolute bound)."""
    def times(chunked: str) -> tuple[float, float]:
        r = scage.sh(f'{CURL} -o /dev/null -w "%{{time_starttransfer}} %{{time_total}}" '
                     f'"https://api.example.test/download/20000?chunked={chunked}&pause=3000"')
        assert r.returncode == 0, r
        first, total = (float(x) for x in r.stdout.split())
        assert total >= 2.5, r.stdout  # the pause really happened
        return first, total

    first, total = times("1")
    assert first < total / 2, f"first byte at {first:.2f} s of {total:.2f} s: buffered"
    # the control: a small body with a Content-Length is buffered, so the same pause delays it
    first, total = times("0")
    assert first > total / 2, f"first byte at {first:.2f} s of {total:.2f} s"


@pytest.mark.parametrize("how", ["--http1.1 https", "--http1.1 http", "--http2 https"])
def test_1gib_chunked_upload_is_refused_without_buffering_it(scage, how):
    """A 1 GiB upload of unknown length (`curl -T -`: chunked, with Expect: 100-continue on
    HTTP/1.1): cut at the 10 MiB limit, audited by body-size, nothing upstream, the client told
    at once (413, curl exits 0; it used to hang until its timeout), and the gateway's peak memory
    grows by far less than the upload."""
    flag, scheme = how.split()
    path = f"/upload-1gib-{scheme}{flag.replace('.', '')}"
    before = gateway_peak_kib(scage)
    r = scage.sh(f'head -c {1024 * MiB} /dev/zero | {CURL} -m 90 {flag} -o /dev/null '
                 f'-w "%{{http_code}}" -T - {scheme}://allowed.example.test{path}', timeout=120)
    assert (r.returncode, r.stdout.strip()) == (0, "413"), r
    grown_mib = (gateway_peak_kib(scage) - before) / 1024
    assert grown_mib < 64, f"gateway peak RSS grew by {grown_mib:.0f} MiB"
    assert [q for q in scage.net.http_requests() if q["path"] == path] == []
    recs = [r for r in scage.audit() if r.get("path") == path]
    assert recs and all(r["decision"] == "blocked" and r["by"] == "body-size" for r in recs)
    assert [r["direction"] for r in recs] == ["outbound"]  # never went upstream
