"""fakenet's pure parts: zone, HTTP parser, DNS answers, records, config, probe targets."""

from __future__ import annotations

import importlib.util
import ipaddress
import json
from pathlib import Path

import pytest
from dnslib import QTYPE, RCODE, DNSRecord

from fakenet import models
from fakenet.dnsserver import DnsAnswerer
from fakenet.httpparse import HttpParseError, HttpRequest, RequestParser
from fakenet.records import RecordReader, RecordWriter
from fakenet.serverconfig import Listener, ServerConfig
from fakenet.targets import probe_targets, write_probe_targets
from fakenet.zone import (
    CATCH_ALL_ADDRESS,
    SERVICE_NETWORK,
    ZONE,
    build_zone,
    link_addresses,
    service_address6,
)

PROBE = Path(__file__).resolve().parents[2] / "src" / "agentsec" / "probe" / "blast_probe.py"


# --- zone ------------------------------------------------------------------------------------

def test_default_zone_gives_each_name_its_own_service_address() -> None:
    zone = build_zone()
    addresses = [s.address for s in zone.names.values()]
    assert len(set(addresses)) == len(ZONE)
    assert all(ipaddress.ip_address(a) in SERVICE_NETWORK for a in addresses)
    assert zone.lookup("PyPI.org.") == zone.names["pypi.org"]
    assert zone.lookup("anything.else").address == CATCH_ALL_ADDRESS  # type: ignore[union-attr]


def test_extra_names_get_free_addresses_or_the_one_given() -> None:
    zone = build_zone({"new.example.test": None, "fixed.test": "10.200.254.77",
                       "other.test": None})
    assert zone.names["fixed.test"].address == "10.200.254.77"
    auto = {zone.names["new.example.test"].address, zone.names["other.test"].address}
    assert len(auto) == 2 and not auto & {s.address for n, s in zone.names.items()
                                          if n in ZONE}


@pytest.mark.parametrize("address", ["192.0.2.1", "10.200.1.2", "10.200.255.53", "not-an-ip"])
def test_extra_name_with_unusable_address_is_refused(address: str) -> None:
    with pytest.raises(ValueError):
        build_zone({"x.test": address})


@pytest.mark.parametrize("name", ["*.corp.test", "a..b", "", "bad name.test"])
def test_extra_name_that_is_not_a_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not a DNS name"):
        build_zone({name: None})


def test_no_catch_all_and_no_ipv6() -> None:
    zone = build_zone(catch_all=False, ipv6=False)
    assert zone.lookup("unknown.test") is None
    assert all(s.address6 is None for s in zone.names.values())


def test_address_plan() -> None:
    assert service_address6("10.200.254.10") == "fd0a:200:ffff::254:10"
    assert link_addresses(3) == ("10.200.3.1", "10.200.3.2", "fd0a:200:3::1", "fd0a:200:3::2")
    with pytest.raises(ValueError):
        link_addresses(128)  # 10.200.128.0/17 is left to others


# --- HTTP parser -----------------------------------------------------------------------------

def test_pipelined_requests_in_one_feed() -> None:
    raw = (b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
           b"POST /b HTTP/1.1\r\nHost: y\r\nContent-Length: 3\r\n\r\nabc"
           b"GET http://evil.test/c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    requests = RequestParser().feed(raw)
    assert [(r.method, r.target, r.body) for r in requests] == [
        ("GET", "/a", b""), ("POST", "/b", b"abc"), ("GET", "http://evil.test/c", b"")]
    assert [r.keep_alive for r in requests] == [True, True, False]
    assert requests[1].header("HOST") == "y"


def test_byte_by_byte_and_chunked_with_trailer() -> None:
    raw = (b"PUT /up HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
           b"4\r\nwiki\r\n5;ext=1\r\npedia\r\n0\r\nX-Trailer: t\r\n\r\n"
           b"GET /next HTTP/1.0\r\n\r\n")
    parser, done = RequestParser(), []
    for i in range(len(raw)):
        done += parser.feed(raw[i:i + 1])
    assert [(r.target, r.body) for r in done] == [("/up", b"wikipedia"), ("/next", b"")]
    assert done[1].keep_alive is False  # HTTP/1.0 without keep-alive


def test_expect_continue_is_noticed_until_the_body_arrives() -> None:
    parser = RequestParser()
    assert parser.feed(b"POST /big HTTP/1.1\r\nExpect: 100-continue\r\n"
                       b"Content-Length: 4\r\n\r\n") == []
    assert parser.wants_continue()
    [request] = parser.feed(b"body")
    assert request.body == b"body" and not parser.wants_continue()


@pytest.mark.parametrize("raw", [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # a TLS hello on a plain port
    b"GET / HTTP/2\r\n\r\n",
    b"GET /\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
    b"GET / HTTP/1.1\r\nNo colon here\r\n\r\n",
])
def test_garbage_is_refused(raw: bytes) -> None:
    with pytest.raises(HttpParseError):
        RequestParser().feed(raw)


# --- DNS answers -----------------------------------------------------------------------------

def _ask(answerer: DnsAnswerer, name: str, qtype: str) -> DNSRecord:
    return DNSRecord.parse(answerer.answer(DNSRecord.question(name, qtype)).pack())


def test_dns_answers() -> None:
    answerer = DnsAnswerer({"pypi.org": {"A": ["10.200.254.10"], "AAAA": ["fd0a:200::1"]}},
                           None, ttl=30)
    a = _ask(answerer, "PYPI.org", "A")
    assert [str(r.rdata) for r in a.rr] == ["10.200.254.10"] and a.header.aa == 1
    assert [str(r.rdata) for r in _ask(answerer, "pypi.org", "AAAA").rr] == ["fd0a:200::1"]
    mx = _ask(answerer, "pypi.org", "MX")
    assert mx.header.rcode == RCODE.NOERROR and not mx.rr  # exists, no such record
    assert _ask(answerer, "nope.test", "A").header.rcode == RCODE.NXDOMAIN


def test_dns_catch_all_answers_every_name() -> None:
    answerer = DnsAnswerer({}, {"A": ["10.200.255.254"], "AAAA": []}, ttl=30)
    reply = _ask(answerer, "x.y.z", "A")
    assert [str(r.rdata) for r in reply.rr] == ["10.200.255.254"]
    assert QTYPE[reply.rr[0].rtype] == "A"
    assert not _ask(answerer, "x.y.z", "AAAA").rr


# --- records and config ----------------------------------------------------------------------

def test_records_round_trip_and_merge_by_connection(tmp_path: Path) -> None:
    writer = RecordWriter(tmp_path)
    writer.sink("tcp", 9999, "10.200.1.2", "tcp-1", b"ab")
    writer.sink("udp", 123, "10.200.1.2", "udp-2", b"\x00")
    writer.sink("tcp", 9999, "10.200.1.2", "tcp-1", b"cd")
    writer.dns("pypi.org", "A", "10.200.1.2", "udp")
    writer.http({"method": "GET", "host": "h", "path": "/", "headers": {}, "body": b"\xff",
                 "tls": True})
    # A line still being written must be skipped, not break the reader.
    with open(tmp_path / "dns.jsonl", "a") as f:
        f.write('{"qname": "half')
    reader = RecordReader(tmp_path)
    assert [tuple(r) for r in reader.sink_records()] == [
        ("tcp", 9999, "10.200.1.2", b"abcd"), ("udp", 123, "10.200.1.2", b"\x00")]
    assert [r.data for r in reader.sink_records(port=123)] == [b"\x00"]
    assert reader.dns_queries() == [("pypi.org", "A")]
    assert reader.http_requests()[0]["body"] == b"\xff"
    reader.reset()
    writer.dns("after.reset", "A", "10.200.1.2", "udp")
    assert reader.dns_queries() == [("after.reset", "A")] and reader.sink_records() == []
    writer.close()


def test_server_config_round_trip(tmp_path: Path) -> None:
    config = ServerConfig(records_dir="/r", ready_file="/r/ready", parent_pid=1,
                          listeners=(Listener("dns", "udp", "10.200.255.53", 53),),
                          zone={"a.test": {"A": ["10.200.254.1"], "AAAA": []}}, catch_all=None)
    config.write(tmp_path / "c.json")
    assert ServerConfig.read(tmp_path / "c.json") == config
    assert config.error_file == Path("/r/ready.error")


# --- probe targets ---------------------------------------------------------------------------

def test_probe_targets_use_only_fakenet_addresses() -> None:
    targets = probe_targets(build_zone())
    assert targets["udp_dns"] == "10.200.255.53:53"
    assert targets["egress"][-1] == "10.200.254.8:53"
    assert targets["ipv6"] == ["[fd0a:200:ffff::254:8]:443", "[fd0a:200:ffff::254:11]:443"]
    assert probe_targets(build_zone(ipv6=False))["ipv6"] == []


def test_probe_accepts_the_targets_file(tmp_path: Path) -> None:
    # The probe is loaded from its file (the package never imports it); its own parser decides.
    spec = importlib.util.spec_from_file_location("blast_probe_under_test", PROBE)
    assert spec and spec.loader
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    path = write_probe_targets(tmp_path / "t.json", build_zone())
    targets, overridden, error = probe.load_targets({"AGENTSEC_PROBE_TARGETS": str(path)})
    assert (overridden, error) == (True, None)
    assert list(targets["egress"]) == probe_targets(build_zone())["egress"]


# --- compression bombs -----------------------------------------------------------------------

@pytest.mark.parametrize("encodings", [("gzip",), ("deflate",), ("br",), ("zstd",),
                                       ("gzip", "gzip")])
def test_bomb_payload_decodes_to_its_size_in_zeros(encodings):
    from mitmproxy.net import encoding

    from fakenet.bombs import payload

    size = 3 * 1024 * 1024 + 5
    data = payload(size, encodings)
    for coding in reversed(encodings):
        data = encoding.decode(data, coding)
    assert data == bytes(size)
    assert len(payload(64 * 1024 * 1024, encodings)) < 64 * 1024 * 1024 // 200  # a bomb


def test_discard_path_counts_a_large_body_without_keeping_it():
    parser = RequestParser()
    size = 40 * 1024 * 1024  # over MAX_BODY: only /discard takes it
    head = f"POST /discard/x HTTP/1.1\r\nHost: a\r\nContent-Length: {size}\r\n\r\n".encode()
    done = parser.feed(head)
    for _ in range(size // (1 << 20)):
        done += parser.feed(bytes(1 << 20))
        assert len(parser._buf) == 0  # nothing of it is held
    done += parser.feed(b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n")
    assert [r.target for r in done] == ["/discard/x", "/next"]
    assert done[0].body == b"" and done[0].header("x-fakenet-discarded") == str(size)
    with pytest.raises(HttpParseError):
        RequestParser().feed(f"POST /x HTTP/1.1\r\nContent-Length: {size}\r\n\r\n".encode())


def test_the_target_of_a_discarded_body_is_known_once_its_first_bytes_arrived():
    parser = RequestParser()
    parser.feed(b"POST /discard/x?early=5 HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n")
    assert parser.discarding_target() is None  # the head alone: nothing to refuse yet
    parser.feed(b"abc")
    assert parser.discarding_target() == "/discard/x?early=5"
    parser.feed(b"defghij")
    assert parser.discarding_target() is None  # the request is complete


@pytest.mark.parametrize(("target", "seconds"), [
    ("/discard/x?early=5", 5.0), ("/discard/x?early=0", 0.0), ("/discard/x?early=9999", 120.0),
    ("/discard/x", None), ("/discard/x?early=soon", None)])
def test_early_refusal_reads_its_hold_from_the_query(target, seconds):
    from fakenet.early import hold_seconds

    assert hold_seconds(target) == seconds


# --- static sites and package registries -------------------------------------------------------

def test_a_site_serves_its_files_and_index_pages_and_nothing_outside(tmp_path: Path) -> None:
    from fakenet.sites import file_for

    site = tmp_path / "sites" / "registry.npmjs.org"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "index.json").write_text("{}")
    (site / "pkg" / "pkg-1.0.0.tgz").write_bytes(b"tgz")
    (site / "empty").mkdir()
    (tmp_path / "secret.txt").write_text("outside")
    (site / "link").symlink_to(tmp_path / "secret.txt")
    assert file_for(site, "/pkg") == site / "pkg" / "index.json"
    assert file_for(site, "/pkg/pkg-1.0.0.tgz?x=1") == site / "pkg" / "pkg-1.0.0.tgz"
    assert file_for(site, "/%70kg/index.json") == site / "pkg" / "index.json"  # percent-decoded
    assert file_for(site, "/empty") is None  # a directory without an index page
    assert file_for(site, "/missing") is None
    assert file_for(site, "/./pkg/./index.json") == site / "pkg" / "index.json"  # apt's flat repos
    assert file_for(site, "/../secret.txt") is None
    assert file_for(site, "/pkg/%2e%2e/%2e%2e/secret.txt") is None
    assert file_for(site, "/link") is None  # a symlink out of the site


def test_site_of_answers_only_reads_for_a_host_with_a_site(tmp_path: Path) -> None:
    from fakenet.httpparse import HttpRequest
    from fakenet.sites import site_of

    (tmp_path / "pypi.org").mkdir()

    def request(method: str, host: str) -> HttpRequest:
        parser = RequestParser()
        [parsed] = parser.feed(f"{method} / HTTP/1.1\r\nHost: {host}\r\n"
                               "Content-Length: 0\r\n\r\n".encode())
        assert isinstance(parsed, HttpRequest)
        return parsed

    assert site_of(str(tmp_path), request("GET", "PyPI.org:443")) == tmp_path / "pypi.org"
    assert site_of(str(tmp_path), request("HEAD", "pypi.org.")) == tmp_path / "pypi.org"
    assert site_of(str(tmp_path), request("POST", "pypi.org")) is None
    assert site_of(str(tmp_path), request("GET", "api.example.test")) is None
    assert site_of(str(tmp_path), request("GET", "..")) is None
    assert site_of(None, request("GET", "pypi.org")) is None


def test_registries_are_real_packages_built_the_same_every_time(tmp_path: Path) -> None:
    import base64
    import hashlib
    import json
    import tarfile
    import zipfile

    from fakenet.packages import build_npm_registry, build_python_index, dependencies

    first = build_npm_registry(tmp_path / "a", packages=30)
    again = build_npm_registry(tmp_path / "b", packages=30)
    assert first == again and len(first.names) == 30
    for path in first.files:
        assert (tmp_path / "a" / path).read_bytes() == (tmp_path / "b" / path).read_bytes()
    # Every package is reachable from the project's own dependencies: an install takes all.
    graph = dependencies(30)
    seen, todo = set(), list(json.loads(first.project["package.json"])["dependencies"])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            doc = json.loads((tmp_path / "a" / name / "index.json").read_text())
            todo.extend(doc["versions"]["1.0.0"].get("dependencies", {}))
    assert seen == set(first.names) and len(graph) == 30
    # The document's integrity is the tarball's, which is a real npm package tarball.
    name = first.names[0]
    doc = json.loads((tmp_path / "a" / name / "index.json").read_text())
    dist = doc["versions"]["1.0.0"]["dist"]
    tgz = tmp_path / "a" / dist["tarball"].split("registry.npmjs.org/", 1)[1]
    assert dist["integrity"] == "sha512-" + base64.b64encode(
        hashlib.sha512(tgz.read_bytes()).digest()).decode()
    with tarfile.open(tgz) as archive:
        assert {"package/package.json", "package/index.js"} <= set(archive.getnames())

    python = build_python_index(tmp_path / "index", tmp_path / "files", wheels=8)
    assert len(python.names) == 8
    module = python.names[0].replace("-", "_")  # a wheel file names its project normalised
    [wheel] = [p for p in python.files if f"/{module}-" in p and p.endswith(".whl")]
    with zipfile.ZipFile(tmp_path / "files" / wheel) as archive:
        names = archive.namelist()
        assert any(n.endswith(".dist-info/METADATA") for n in names)
        assert any(n.endswith(".dist-info/RECORD") for n in names)
    page = (tmp_path / "index" / "simple" / python.names[0] / "index.html").read_text()
    assert "https://files.pythonhosted.org/" in page and "#sha256=" in page


# --- the model server's shell tools ----------------------------------------------------------

@pytest.mark.parametrize(("path", "tool", "argument"), [
    ("/v1/messages", "exec", "command"),  # OpenClaw on Anthropic's API
    ("/v1/responses", "exec", "command"),  # OpenClaw on OpenAI's
    ("/v1/messages", "Bash", "command"),  # Claude Code: the control, unchanged
])
def test_the_model_calls_the_shell_tool_the_request_declares(tmp_path: Path, path: str,
                                                             tool: str, argument: str) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"shell": "touch /workspace/x"}, {"say": "done"}]))
    body = {"model": "m", "stream": False, "tools": [{"name": "read"}, {"name": tool}],
            "messages": [{"role": "user", "content": "go"}], "input": []}
    request = HttpRequest("POST", path, "HTTP/1.1", (), json.dumps(body).encode())
    answer = models.respond(request, str(script)).split(b"\r\n\r\n", 1)[1].decode()
    if path == "/v1/messages":
        [block] = json.loads(answer)["content"]
        assert (block["name"], block["input"]) == (tool, {argument: "touch /workspace/x"})
    else:
        done = [json.loads(line[6:]) for line in answer.splitlines()
                if line.startswith("data: ") and "output_item.done" in line]
        item = done[0]["item"]
        assert (item["name"], json.loads(item["arguments"])) == (
            tool, {argument: "touch /workspace/x"})


def test_a_responses_client_that_sends_only_its_newest_output_gets_the_next_step(
        tmp_path: Path) -> None:
    # OpenClaw keeps the conversation on the server (previous_response_id): each request
    # carries only the output of the call before; the step is read from that call's number
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"shell": f"echo {n}"} for n in range(3)] + [{"say": "done"}]))
    tools = [{"type": "function", "name": "exec"}]
    commands = []
    for n in range(3):
        body = {"model": "m", "stream": True, "tools": tools, "input": [
            {"type": "function_call_output", "call_id": f"call_fake{n:04d}", "output": "ok"}]}
        request = HttpRequest("POST", "/v1/responses", "HTTP/1.1", (),
                              json.dumps(body).encode())
        answer = models.respond(request, str(script)).decode()
        done = next(json.loads(line[6:]) for line in answer.splitlines()
                    if line.startswith("data: ") and "output_item.done" in line)
        commands.append(json.loads(done["item"].get("arguments", "{}")).get("command")
                        or done["item"]["content"][0]["text"])
    assert commands == ["echo 1", "echo 2", "done"]


def _answer_body(request: HttpRequest, script: Path) -> tuple[str, str]:
    """(the answer's Content-Type, its body) for one model request."""
    head, body = models.respond(request, str(script)).split(b"\r\n\r\n", 1)
    content_type = next(line.split(b":", 1)[1].strip().decode() for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-type:"))
    return content_type, body.decode()


def _gemini_request(method: str, contents: list[dict], query: str = "") -> HttpRequest:
    body = {"contents": contents, "tools": [{"functionDeclarations": [
        {"name": "read_file"}, {"name": "run_shell_command"}]}]}
    target = f"/v1beta/models/gemini-2.5-flash:{method}{query}"
    return HttpRequest("POST", target, "HTTP/1.1", (), json.dumps(body).encode())


def test_gemini_cli_gets_its_shell_call_as_server_sent_events_then_the_text(
        tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"shell": "python3 probe.py"}, {"say": "measured"}]))
    asked = [{"role": "user", "parts": [{"text": "measure this sandbox"}]}]
    request = _gemini_request("streamGenerateContent", asked, "?alt=sse")
    assert models.wants(request)
    content_type, body = _answer_body(request, script)
    assert content_type == "text/event-stream"
    [event] = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
    [part] = event["candidates"][0]["content"]["parts"]
    assert part == {"functionCall": {"name": "run_shell_command",
                                     "args": {"command": "python3 probe.py"}}}
    answered = [*asked, event["candidates"][0]["content"], {"role": "user", "parts": [
        {"functionResponse": {"name": "run_shell_command", "response": {"output": "ok"}}}]}]
    _, body = _answer_body(_gemini_request("streamGenerateContent", answered, "?alt=sse"),
                           script)
    [event] = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]
    assert event["candidates"][0]["content"]["parts"] == [{"text": "measured"}]


def test_gemini_without_sse_gets_a_json_array_and_generate_content_one_answer(
        tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"say": "fine"}]))
    asked = [{"role": "user", "parts": [{"text": "hi"}]}]
    content_type, body = _answer_body(_gemini_request("streamGenerateContent", asked), script)
    assert content_type == "application/json"
    assert json.loads(body)[0]["candidates"][0]["content"]["parts"] == [{"text": "fine"}]
    _, body = _answer_body(_gemini_request("generateContent", asked), script)
    assert json.loads(body)["candidates"][0]["content"]["parts"] == [{"text": "fine"}]
    other = HttpRequest("POST", "/v1beta/models/m:countTokens", "HTTP/1.1", (), b"{}")
    assert not models.wants(other)  # the control: a method the server does not play


def test_a_chat_client_without_tools_is_suggested_the_command_in_a_bash_block(
        tmp_path: Path) -> None:
    """aider's flow: its own few-shot examples are assistant messages too, and do not count
    as steps done; the server's own suggestion does."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"shell": "python3 probe.py"}, {"say": "measured"}]))
    examples = [{"role": "user", "content": "change x"},
                {"role": "assistant", "content": "```bash\nls\n```"}]
    asked = [{"role": "system", "content": "you edit code"}, *examples,
             {"role": "user", "content": "measure this sandbox"}]
    request = HttpRequest("POST", "/v1/chat/completions", "HTTP/1.1", (),
                          json.dumps({"model": "m", "stream": True,
                                      "messages": asked}).encode())
    content_type, body = _answer_body(request, script)
    assert content_type == "text/event-stream" and body.endswith("data: [DONE]\n\n")
    chunks = [json.loads(line[6:]) for line in body.splitlines()
              if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert "```bash\npython3 probe.py\n```" in text
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    answered = [*asked, {"role": "assistant", "content": text},
                {"role": "user", "content": "Output from python3 probe.py\nok"}]
    request = HttpRequest("POST", "/v1/chat/completions", "HTTP/1.1", (),
                          json.dumps({"model": "m", "messages": answered}).encode())
    _, body = _answer_body(request, script)
    assert json.loads(body)["choices"][0]["message"]["content"] == "measured"
