"""fakenet's mail servers (IMAPS 993, SMTPS 465, submission 587) met by Python's imaplib and
smtplib from a namespace of the fake internet, with no cage between: the harness the mail
relays' tests (tests/agentcage/test_mail_relays_world.py) stand on."""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

import pytest

from fakenet import FakeInternet

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="fakenet needs root (network namespaces)"),
]

CLIENT = (Path(__file__).parents[1] / "agentcage" / "mail_client.py").read_text()
USER = "agent@mail.example.test"


@pytest.fixture(scope="module")
def net():
    with FakeInternet(extra_names={"mail.example.test": None}, catch_all=False) as internet:
        yield internet


def run(net: FakeInternet, password: str, steps: list[dict]) -> list[dict]:
    client = net.add_client()
    spec = {"host": "mail.example.test", "cafile": str(net.ca_cert_path), "user": USER,
            "password": password, "steps": steps}
    r = client.run([sys.executable, "-c", CLIENT, json.dumps(spec)], capture_output=True,
                   text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_imap_and_smtp_logins_messages_and_echoes(net):
    password = "pw-" + secrets.token_hex(8)
    net.set_mail_account(USER, password)
    body = "Subject: hi\r\n\r\nhello from smtplib " + secrets.token_hex(4) + "\r\n"
    imap_login, imap_plain, smtps, submission = run(net, password, [
        {"imap": "login", "idle": True}, {"imap": "authenticate", "append": body},
        {"smtp": 465, "message": body}, {"smtp": 587, "message": body}])
    # the servers echo the password they got, in their answers and in the INBOX's first message
    assert imap_login["login"][0] == "OK" and password in imap_login["login"][1][0]
    assert password in imap_login["fetch"]
    assert "STARTTLS" in imap_login["capabilities"]  # what a relay must hide
    assert imap_login["idle"].startswith("+") and "OK" in imap_login["idle_done"]
    assert imap_plain["login"][0] == "OK" and imap_plain["append"][0] == "OK"
    assert smtps["login"][0] == 235 and password in smtps["login"][1] and smtps["sent"]
    assert "chunking" in smtps["features"]
    assert submission["login"][0] == 235 and submission["sent"]
    logins = [r for r in net.mail_records() if r["event"] == "login"]
    assert {(r["proto"], r["mechanism"]) for r in logins} == {
        ("imaps", "LOGIN"), ("imaps", "AUTHENTICATE PLAIN"), ("smtps", "AUTH PLAIN"),
        ("smtp", "AUTH PLAIN")}
    assert all(r["ok"] and r["password"] == password and r["sni"] == "mail.example.test"
               for r in logins), logins
    messages = [r for r in net.mail_records() if r["event"] == "message"]
    assert [r["proto"] for r in messages] == ["imaps", "smtps", "smtp"]
    assert all(r["data"] == body.encode() for r in messages)


def test_a_wrong_password_is_refused_by_the_servers(net):
    """The control of the relays' injection: without the real password, no login."""
    net.set_mail_account(USER, "right-" + secrets.token_hex(8))
    imap_login, smtps = run(net, "wrong", [{"imap": "login"}, {"smtp": 465, "message": "x"}])
    assert "AUTHENTICATIONFAILED" in imap_login["error"]
    assert "535" in smtps["error"]
