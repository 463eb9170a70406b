"""The mail relays' parts that need no network: cage.yaml's `relays` (accepted and refused in
one line), the login's swap, the IMAP and SMTP text the relay reads and writes, and the TLS
toward the cage (a real handshake over loopback, in this process). The relays end to end:
test_mail_relays_world.py."""

from __future__ import annotations

import asyncio
import ssl
import tempfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from agentcage.config.load import load_config_text
from agentcage.errors import ConfigError
from agentcage.gateway.ca import install_ca, make_ca
from agentcage.gateway.relays.imap import (
    Command,
    Literal,
    allowed,
    as_string,
    shown_capabilities,
    strings,
)
from agentcage.gateway.relays.smtp import shown_ehlo
from agentcage.gateway.relays.tls import RelayTls
from agentcage.secrets.placeholders import mint
from agentcage.secrets.staging import StagedSecret
from agentcage.secrets.swap import CredentialSwap, without_placeholders

BASE = "name: t\ndomains: {mode: allowlist, allow: [api.example.com]}\n"
RELAY = "relays: [{host: mail.example.com, ports: [993, 465, 587], secret: MAIL_PASSWORD}]\n"


def test_a_relay_is_a_host_its_ports_and_a_secret_whose_placeholder_the_cage_holds():
    config = load_config_text(BASE + RELAY + "secret_injection: [{env: API, inject_to: "
                              "[api.example.com]}]\n")
    spec = config.spec()
    assert spec.secret_env == ("API", "MAIL_PASSWORD")
    assert spec.gateway["relays"] == ({"host": "mail.example.com", "ports": [993, 465, 587],
                                       "secret": "MAIL_PASSWORD"},)
    assert config.placeholder_secrets() == {"API", "MAIL_PASSWORD"}
    assert load_config_text(BASE).spec().gateway["relays"] == ()
    # a seed file may name the relay's placeholder (a mail client's configuration)
    load_config_text(BASE + RELAY + "container:\n  volumes: ['home:/home/agent']\n"
                     "  seed_files: {/home/agent/.netrc: {text: 'password "
                     "${placeholder:MAIL_PASSWORD}'}}\n")


@pytest.mark.parametrize(("relays", "said"), [
    ("[{host: '*.example.com', ports: [993], secret: M}]", "not a wildcard"),
    ("[{host: 203.0.113.5, ports: [993], secret: M}]", "IP literals are refused"),
    ("[{host: mail.example.com, ports: [25], secret: M}]",
     "25 is not a mail relay port; the relays speak 465 (SMTPS), 587 (submission), 993 (IMAPS)"),
    ("[{host: mail.example.com, ports: [993, 993], secret: M}]", "listed twice"),
    ("[{host: mail.example.com, ports: [], secret: M}]", "at least 1 item"),
    ("[{host: mail.example.com, ports: [993], secret: 'M-1'}]", "should match pattern"),
    ("[{host: mail.example.com, ports: [993]}]", "secret"),
    ("[{host: agentcage.local, ports: [993], secret: M}]", "policy API"),
    ("[{host: mail.example.com, ports: [993], secret: M}, "
     "{host: mail.example.com, ports: [465, 993], secret: M}]",
     "mail.example.com on port 993 is listed twice"),
    ("[{host: mail.example.com, ports: [993], secret: M, user: me}]", "user"),
])
def test_a_relay_cage_yaml_cannot_use_is_refused_in_one_line(relays, said):
    with pytest.raises(ConfigError) as info:
        load_config_text(f"{BASE}relays: {relays}\n")
    assert said in str(info.value) and "\n" not in str(info.value).strip()


def test_a_relay_port_the_http_proxy_takes_or_a_key_of_the_gateways_own_is_refused():
    with pytest.raises(ConfigError, match=r"port 993 is also in ports\.tcp\.allow"):
        load_config_text(BASE + RELAY + "ports: {tcp: {allow: [443, 993]}}\n")
    with pytest.raises(ConfigError, match="MAIL_PASSWORD is a mail relay's secret"):
        load_config_text(BASE + RELAY + "policy_api: {deciders: [llm]}\nagents: {decider: "
                         "{enable: true, model: m, api_key: 'secret:MAIL_PASSWORD'}}\n")


def staged(env: str, value: bytes) -> StagedSecret:
    return StagedSecret(env, mint(env), value)


def test_the_swap_puts_the_relays_secret_in_its_login_and_nothing_else():
    mail, other = staged("MAIL", b"real-mail-pw"), staged("API", b"real-api-token")
    swap = CredentialSwap((mail, other))
    login = b"\0agent@example.com\0" + str(mail.placeholder).encode()
    done = swap.swap(login, "MAIL")
    assert done.value == b"\0agent@example.com\0real-mail-pw" and done.injected == ("MAIL",)
    # another secret's placeholder in the login: refused, nothing swapped
    refused = swap.swap(login + str(other.placeholder).encode(), "MAIL")
    assert refused.blocked == "placeholder of API in a login for MAIL"
    assert b"real" not in refused.value  # type: ignore[operator]
    # a placeholder no staged secret has (rotated away) is an inert string: left as it is
    stale = str(mint("MAIL")).encode()
    assert swap.swap(stale, "MAIL").value == stale and swap.swap(stale, "MAIL").injected == ()
    # a value that would end the login's line or field is never put there
    bad = staged("MAIL", b"pw\r\nRCPT TO:<x>")
    blocked = CredentialSwap((bad,)).swap(str(bad.placeholder).encode(), "MAIL").blocked
    assert blocked == "secret MAIL holds a line break or NUL; not put in a login"
    assert without_placeholders(login) == b"\0agent@example.com\0"


def command(*texts: bytes, literals: tuple[bytes, ...] = ()) -> Command:
    return Command(texts, tuple(Literal(b"", data, False) for data in literals))


def test_an_imap_command_goes_on_as_it_came_with_its_literals_counted_again():
    append = command(b"A3 APPEND INBOX (\\Seen) ", b"", literals=(b"Subject: x\r\n\r\nhi\r\n",))
    assert append.wire() == b"A3 APPEND INBOX (\\Seen) {18}\r\nSubject: x\r\n\r\nhi\r\n\r\n"
    assert (append.tag, append.name) == (b"A3", "APPEND")
    login = command(b"A1 LOGIN ", b' "pa\\"ss"', literals=(b"us er",))
    assert strings(login) == [b"us er", b'pa"ss']
    assert strings(command(b'A1 LOGIN me "a\\\\b"')) == [b"me", b"a\\b"]
    assert as_string(b'p"w\\') == (b'"p\\"w\\\\"', None)
    assert as_string("pässword".encode()) == (b"", Literal(b"", "pässword".encode(), False))


@pytest.mark.parametrize(("line", "passes"), [
    (b"A1 SELECT INBOX", True), (b"A1 UID FETCH 1:* (FLAGS)", True), (b"A1 IDLE", True),
    (b"A1 STARTTLS", False), (b"A1 COMPRESS DEFLATE", False), (b"A1 UID EXPUNGE 4", True),
    (b"A1 UID STARTTLS", False), (b"A1 UID", False), (b"A1 XYZZY", False),
])
def test_imap_commands_outside_the_list_are_not_relayed(line, passes):
    assert allowed(command(line)) is passes


def test_what_would_hide_the_connection_is_never_advertised():
    greeting = (b"* OK [CAPABILITY IMAP4rev1 STARTTLS COMPRESS=DEFLATE AUTH=PLAIN AUTH=CRAM-MD5 "
                b"AUTH=LOGIN BINARY IDLE] ready\r\n")
    assert shown_capabilities(greeting) == (b"* OK [CAPABILITY IMAP4rev1 AUTH=PLAIN AUTH=LOGIN "
                                            b"IDLE] ready\r\n")
    assert shown_capabilities(b"* CAPABILITY IMAP4rev1 STARTTLS IDLE\r\n") == \
        b"* CAPABILITY IMAP4rev1 IDLE\r\n"
    assert shown_capabilities(b"* 1 FETCH (BODY[] {5}\r\n") == b"* 1 FETCH (BODY[] {5}\r\n"
    ehlo = [b"250-mx.example.com hello\r\n", b"250-PIPELINING\r\n", b"250-SIZE 1000\r\n",
            b"250-CHUNKING\r\n", b"250-STARTTLS\r\n", b"250-AUTH CRAM-MD5 PLAIN LOGIN\r\n",
            b"250 8BITMIME\r\n"]
    assert shown_ehlo(ehlo) == (b"250-mx.example.com hello\r\n250-SIZE 1000\r\n"
                                b"250-AUTH PLAIN LOGIN\r\n250 8BITMIME\r\n")
    assert shown_ehlo([b"250-mx\r\n", b"250 AUTH CRAM-MD5\r\n"]) == b"250 mx\r\n"


def test_the_cage_gets_a_certificate_of_its_ca_for_the_host_it_names_and_no_other():
    """A real TLS handshake over loopback in this process: the cage's side trusts the cage's
    CA alone."""
    with tempfile.TemporaryDirectory() as tmp:
        confdir = Path(tmp)
        key, cert = make_ca()
        install_ca(confdir, key, cert)
        ca_file = confdir / "ca.pem"
        ca_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        tls = RelayTls(confdir, ["imap.example.com", "smtp.example.com"], str(ca_file))
        hosts = ("imap.example.com", "smtp.example.com")

        async def handshake(name: str | None, offered=hosts) -> tuple[str, dict]:
            seen: dict = {}

            async def serve(reader, writer):
                context, found = tls.for_cage(offered)
                seen.update(found=found)
                try:
                    await writer.start_tls(context)
                    writer.write(b"hello\n")
                    await writer.drain()
                except (OSError, ssl.SSLError):
                    pass
                finally:
                    writer.close()

            server = await asyncio.start_server(serve, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            client = ssl.create_default_context(cafile=str(ca_file))
            if name is None:
                client.check_hostname = False
            try:
                reader, writer = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=client, server_hostname=name)
                got = (await reader.readline()).decode()
                writer.close()
            except (OSError, ssl.SSLError) as e:
                got = type(e).__name__
            server.close()
            return got, seen["found"]

        got, seen = asyncio.run(handshake("smtp.example.com"))
        assert got == "hello\n" and seen == {"asked": "smtp.example.com",
                                             "host": "smtp.example.com"}
        got, seen = asyncio.run(handshake("other.example.com"))
        assert got != "hello\n" and seen == {"asked": "other.example.com"}
        # no name: served only where a port has a single relay
        got, _ = asyncio.run(handshake(None, offered=("imap.example.com",)))
        assert got == "hello\n"
        got, seen = asyncio.run(handshake(None))
        assert got != "hello\n" and "host" not in seen


def test_a_cage_with_relays_is_not_exported_to_a_pod():
    import dataclasses

    from agentcage.kube.export import check_exportable

    spec = dataclasses.replace(load_config_text(BASE + RELAY).spec(), image="debian:stable")
    with pytest.raises(ConfigError, match="relays are not exported to a pod yet"):
        check_exportable(spec)
    check_exportable(dataclasses.replace(load_config_text(BASE).spec(), image="debian:stable"))
