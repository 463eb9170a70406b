"""cage.yaml: valid and invalid tables; every error is one line naming key, value and fix."""

import pytest

from agentcage.config.load import load_config_text
from agentcage.config.scaffolds import scaffold_config, scaffold_names, scaffold_text
from agentcage.errors import ConfigError


def test_defaults_follow_the_seed():
    c = load_config_text("name: demo\n")
    assert c.container.user == "1000:1000"
    assert c.container.read_only is True
    assert c.container.drop_capabilities == ["ALL"]
    assert c.container.no_new_privileges is True
    assert c.ports.tcp.allow == [80, 443]
    assert c.ports.udp.allow == [] and c.ports.icmp.allow is False
    assert c.rate_limit.requests_per_second == 200 and c.rate_limit.burst == 2000
    assert c.max_request_body == 10 * 1024 * 1024
    assert c.domains.mode is None  # no mode: deny everything
    assert c.gateway.uplink == "host"


VALID = [
    "name: a\ndomains: {mode: allowlist, allow: [api.example.com, '*.example.test']}",
    "name: a\ndomains: {mode: blocklist, block: [evil.example.test]}",
    "name: a-1\ngateway: {uplink: 'netns:inet-1', trusted_networks: [10.200.0.0/16]}\n"
    "dns_servers: [10.200.0.53]",
    "name: a\ncontainer: {volumes: ['.:/workspace:ro'], env: {A: b}}",
    "name: a\nsecrets: {backend: plaintext, allow_plaintext: true}",
    "name: a\nsecret_injection: [{env: API_KEY, inject_to: [api.example.com]}]",
    # named volumes (a bare word) beside a host directory beside cage.yaml (./data)
    "name: a\ncontainer: {volumes: ['.:/workspace', 'home:/home/agent', './data:/data:ro',"
    " 'cache.v1:/home/agent/.cache:rw']}",
    "name: a\ncontainer: {volumes: ['home:/home/agent'], seed_files: {/home/agent/.a.json: "
    "{merge: {k: ['${placeholder:API_KEY:last20}']}}, /home/agent/b/c.toml: {text: 'x = 1'}}}\n"
    "secret_injection: [{env: API_KEY, inject_to: [api.example.com]}]",
]


def test_a_bare_word_is_a_named_volume_and_a_path_is_a_host_directory():
    spec = load_config_text(VALID[-2]).spec()
    assert [v[0] for v in spec.volumes] == [".", "./data"]
    assert spec.named_volumes == (("home", "/home/agent", "rw"),
                                  ("cache.v1", "/home/agent/.cache", "rw"))


@pytest.mark.parametrize("text", VALID)
def test_valid_configs(text):
    load_config_text(text)


INVALID = [
    ("foo: 1\nname: a", "foo = 1: unknown key"),
    ("name: a\ncontainer: {imag: x}", "container.imag = 'x': unknown key; remove it (valid keys"),
    ("name: Bad_Name", "name = 'Bad_Name': use 1-63"),
    ("isolation: container", "name: required"),
    ("name: a\ndomains: {allow: ['*']}", "domains.allow.0 = '*': '*' would allow everything"),
    ("name: a\ndomains: {allow: ['*.com']}", "public suffix"),
    ("name: a\ndomains: {allow: [1.2.3.4]}", "IP literals are refused"),
    ("name: a\ndomains: {allow: [a.example.com], block: [b.example.com]}", "cannot both be set"),
    ("name: a\ndomains: {mode: blocklist, allow: [a.example.com]}", "blocklist uses block"),
    ("name: a\ndomains: {mode: denylist}", "domains.mode = 'denylist'"),
    ("name: a\nports: {tcp: {allow: [0]}}", "ports.tcp.allow.0 = 0"),
    ("name: a\ncontainer: {volumes: ['~/.ssh:/ssh']}", "holds credentials"),
    ("name: a\ncontainer: {volumes: ['/home/u/.aws:/aws:ro']}", "holds credentials"),
    ("name: a\ncontainer: {volumes: ['/etc:/etc']}", "host system directory"),
    ("name: a\ncontainer: {volumes: ['.:workspace']}", "must be absolute"),
    ("name: a\ncontainer: {add_capabilities: [NET_ADMIN]}", "grants no capabilities"),
    ("name: a\ncontainer: {no_new_privileges: false}", "cannot be turned off"),
    ("name: a\ncontainer: {user: root}", "UID:GID"),
    ("name: a\nsecrets: {backend: plaintext}", "explicit opt-in"),
    ("name: a\ngateway: {uplink: vpn}", "gateway.uplink = 'vpn'"),
    ("name: a\ngateway: {trusted_networks: [nope]}", "CIDR"),
    ("name: a\ndns_servers: [resolver]", "IP address"),
    ("name: a\nagents: {watcher: {interval_seconds: 5}}", "interval_seconds"),
    ("name: a\ncontainer: {volumes: ['home:/x', 'home:/y']}", "volume home is mounted twice"),
    ("name: a\ncontainer: {volumes: ['home:/x', '.:/x']}", "two volumes at /x"),
    ("name: a\ncontainer: {volumes: ['home:/proc/x']}", "reserved for the cage"),
    ("name: a\ncontainer: {seed_files: {/home/agent/.a.json: {text: x}}}",
     "lies under no named volume"),
    ("name: a\ncontainer: {volumes: ['home:/home/agent'], seed_files: {/home/agent/../x: "
     "{text: x}}}", "lies under no named volume"),
    ("name: a\ncontainer: {volumes: ['home:/home/agent'], seed_files: {/home/agent/a: "
     "{text: x, merge: {}}}}", "one of them"),
    ("name: a\ncontainer: {volumes: ['home:/home/agent'], seed_files: {/home/agent/a: "
     "{text: '${placeholder:NOPE}'}}}", "names the placeholder of NOPE"),
    ("- a\n- b", "expected a mapping"),
    ("name: [unclosed", "not valid YAML"),
]


@pytest.mark.parametrize(("text", "expected"), INVALID)
def test_invalid_configs_explain_in_one_line(text, expected):
    with pytest.raises(ConfigError) as info:
        load_config_text(text)
    message = str(info.value)
    assert expected in message
    assert "Traceback" not in message
    for line in message.splitlines():
        assert line.startswith("cage.yaml")


def test_every_error_is_reported():
    with pytest.raises(ConfigError) as info:
        load_config_text("name: a\nfoo: 1\nbar: 2\ndomains: {allow: ['*']}")
    assert len(str(info.value).splitlines()) == 3


@pytest.mark.parametrize("scaffold", ["claude-code", "codex", "minimal", "pi"])
def test_scaffolds_are_valid_and_commented(scaffold):
    assert scaffold in scaffold_names()
    text = scaffold_text(scaffold, "my-cage")
    assert "#" in text
    assert scaffold_config(scaffold, "my-cage").name == "my-cage"


def test_scaffold_aliases_and_unknown():
    assert scaffold_config("claude", "x").scaffold == "claude-code"
    with pytest.raises(ConfigError, match="choose one of"):
        scaffold_text("nope", "x")


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, c in zip("abcdefgh", "bcdefghi", strict=True))


@pytest.mark.parametrize(("text", "why"), [
    ("name: a\nx:\n  " + BOMB.replace("\n", "\n  "), "aliases"),
    ("name: a\ndomains: {mode: allowlist, allow: *i}\n" + BOMB, "aliases"),
    ("name: a\nx: " + "[" * 20000 + "]" * 20000 + "\n", "nested deeper"),
    ("name: a\nrate_limit: {burst: " + "9" * 5000 + "}\n", "cannot be read"),
    ("name: a\ndomains: {mode: allowlist, allow: [" + ", ".join(
        f"d{i}.example.com" for i in range(150_000)) + "]}\n", "larger than|more than"),
])
def test_hostile_yaml_is_refused_in_one_line_and_quickly(text, why):
    import re
    import time

    start = time.monotonic()
    with pytest.raises(ConfigError) as e:
        load_config_text(text)
    assert re.search(why, str(e.value)), str(e.value)
    assert "\n" not in str(e.value)
    assert time.monotonic() - start < 30  # a bound against a hang, not a performance test


@pytest.mark.parametrize(("raw", "why"), [
    ("name: a\n".encode("utf-16"), "not UTF-8"),
    (b"name: a\xff\xfe\n", "not UTF-8"),
])
def test_config_files_in_other_encodings_are_refused(tmp_path, raw, why):
    from agentcage.config.load import load_config

    path = tmp_path / "cage.yaml"
    path.write_bytes(raw)
    with pytest.raises(ConfigError, match=why):
        load_config(path)
    path.write_bytes(b"\xef\xbb\xbfname: a\n")  # a byte-order mark alone is fine
    assert load_config(path).name == "a"


@pytest.mark.parametrize("reference", [
    "node:22-slim", "docker.io/library/debian:bookworm-slim", "localhost:5000/team/agent:1.2",
    "busybox", "ghcr.io/org/img@sha256:" + "a" * 64])
def test_an_image_reference_podman_takes_is_taken(reference):
    spec = load_config_text(f"name: a\ncontainer: {{image: '{reference}'}}\n").spec()
    assert spec.image == reference and not spec.writable_root


@pytest.mark.parametrize("reference", ["Node 22!", "-x", "a::b", "../x", "a/b:", "x@sha256:1"])
def test_a_malformed_image_reference_is_refused_before_podman_sees_it(reference):
    with pytest.raises(ConfigError, match=r"container\.image"):
        load_config_text(f"name: a\ncontainer: {{image: '{reference}'}}\n")


def test_published_ports_are_read_as_podman_writes_them():
    spec = load_config_text("name: a\ncontainer:\n  ports: ['127.0.0.1:18789:18789', "
                            "'8080:80/tcp']\n").spec()
    assert spec.published_ports == (("127.0.0.1", 18789, 18789), ("127.0.0.1", 8080, 80))


@pytest.mark.parametrize(("ports", "needle"), [
    ("['0.0.0.0:8080:80']", "loopback only"),
    ("['10.0.0.5:8080:80']", "loopback only"),
    ("['8080']", "HOST_PORT:CAGE_PORT"),
    ("['8080:80/udp']", "TCP only"),
    ("['70000:80']", "not a port"),
    ("['8080:80', '127.0.0.1:8080:81']", "published twice"),
])
def test_a_published_port_off_the_loopback_or_malformed_is_refused(ports, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config_text(f"name: a\ncontainer:\n  ports: {ports}\n")
