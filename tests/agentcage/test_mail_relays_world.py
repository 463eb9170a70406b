"""Mail relays (cage.yaml `relays`) in the fake internet, all real: a cage (bwrap, namespaces,
nftables), its gateway, and fakenet's IMAPS and SMTP servers (which record every login and
message, and echo the password they were given). Inside the cage, Python's imaplib and smtplib
log in with the placeholder of the relay's secret; the server gets the real password; the cage
never sees it. Each refusal is paired with a control that goes through.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.agentcage.conftest import AGENT_UID, World, needs_root, start_cage
from tests.agentcage.hosted import AsUser, open_to_users

pytestmark = pytest.mark.netns

CLIENT = (Path(__file__).parent / "mail_client.py").read_text()
MAIL = "mail.example.test"
USER = "agent@mail.example.test"
ENV, OTHER = "MAIL_PASSWORD", "API_TOKEN"
VALUE = "mail-pw-" + secrets.token_hex(16)  # the real password: never inside the cage
OTHER_VALUE = "tok-" + secrets.token_hex(16)
EXTRA = f"""
relays:
  - host: {MAIL}
    ports: [993, 465, 587]
    secret: {ENV}
secret_injection:
  - env: {OTHER}
    inject_to: [api.example.test]
inspectors:
  - name: "tests.agentcage.inspectors_for_tests:factory"
    config: {{trigger: "/explode", body_trigger: "EXPLODE-IN-MAIL"}}
"""
# a provider's key, planted where the agent could read it (Anthropic's format: allowed only
# toward Anthropic's own hosts)
KEY = "sk-ant-api03-" + base64.urlsafe_b64encode(os.urandom(72)).decode()[:93] + "AA"


@pytest.fixture(scope="module")
def world():
    needs_root()
    from fakenet import FakeInternet

    with FakeInternet(extra_names={MAIL: None, "key.example.test": None},
                      catch_all=False) as internet:
        internet.set_mail_account(USER, VALUE)
        yield World(internet, internet.add_client().netns)


@pytest.fixture(scope="module")
def cage(world):
    gen = start_cage(world, "mail", ["api.example.test"], extra=EXTRA)
    handle = next(gen)
    try:
        for env, value in ((ENV, VALUE), (OTHER, OTHER_VALUE)):
            result = handle.service.secret_set(handle.name, env, value.encode())
            assert result["applied"], result
        yield handle
    finally:
        gen.close()


def mail(cage, steps: list[dict], password_env: str = ENV, host: str = MAIL,
         password: str | None = None) -> list[dict]:
    """The mail client's results; it logs in with $password_env, or `password` as given."""
    spec: dict = {"host": host, "user": USER, "steps": steps}
    spec.update({"password": password} if password is not None
                else {"password_env": password_env})
    r = cage.service.exec_capture(cage.name, ["python3", "-c", CLIENT, json.dumps(spec)],
                                  timeout=180)
    assert r.returncode == 0, r
    assert VALUE not in r.stdout + r.stderr
    return json.loads(r.stdout)


def placeholder(cage, env: str = ENV) -> str:
    r = cage.sh(f'printf %s "${env}"')
    assert r.returncode == 0 and r.stdout.startswith(f"agentcage:secret:{env}:"), r
    return r.stdout


def relay_records(cage) -> list[dict]:
    return [r for r in cage.audit() if r["direction"] == "relay"]


def logins(world) -> list[dict]:
    return [r for r in world.mail_records() if r["event"] == "login"]


def test_imaplib_and_smtplib_log_in_with_the_placeholder_and_the_server_gets_the_password(
        cage, world):
    token = placeholder(cage)
    before = len(logins(world))
    body = "Subject: report\r\n\r\nthe build passed " + secrets.token_hex(4) + "\r\n"
    imap_login, imap_plain, smtps, submission = mail(cage, [
        {"imap": "login", "idle": True}, {"imap": "authenticate", "append": body},
        {"smtp": 465, "message": body}, {"smtp": 587, "message": body}])
    # every login reached the server with the real password, and was accepted
    seen = logins(world)[before:]
    assert {(r["proto"], r["mechanism"]) for r in seen} == {
        ("imaps", "LOGIN"), ("imaps", "AUTHENTICATE PLAIN"), ("smtps", "AUTH PLAIN"),
        ("smtp", "AUTH PLAIN")}, seen
    assert all(r["ok"] and r["password"] == VALUE and r["sni"] == MAIL for r in seen), seen
    # what the server echoed (its answer to the login, the INBOX's first message) reached the
    # cage with the placeholder in the password's place
    assert imap_login["login"][0] == "OK" and token in imap_login["login"][1][0]
    assert f"Your password is {token}" in imap_login["fetch"]
    assert imap_plain["login"][0] == "OK" and imap_plain["append"][0] == "OK"
    assert smtps["login"][0] == 235 and token in smtps["login"][1] and smtps["sent"]
    assert submission["login"][0] == 235 and submission["sent"]
    assert imap_login["idle"].startswith("+") and "OK" in imap_login["idle_done"]
    # the messages arrived as sent
    messages = [r for r in world.mail_records() if r["event"] == "message"]
    assert [m["data"] for m in messages[-3:]] == [body.encode()] * 3
    # what would hide the rest of a connection from the gateway is never offered to the cage
    assert "STARTTLS" not in imap_login["capabilities"]
    assert not any(c.startswith(("COMPRESS", "AUTH=CRAM")) for c in imap_login["capabilities"])
    assert {"chunking", "pipelining", "starttls"}.isdisjoint(smtps["features"])
    # audited: each connection, each login's outcome (the secret named, never its value), each
    # message with its size
    records = relay_records(cage)
    outcomes = [r for r in records if "accepted by the server" in r["reason"]]
    assert len(outcomes) == 4 and all(r["secrets_injected"] == [ENV] for r in outcomes)
    sent = [r for r in records if r["reason"] == "message"]
    assert sent and all(r["bytes"] == len(body) and r["rcpt_to"] == [USER]
                        for r in sent[-2:]), sent
    appended = [r for r in records if r["method"] == "APPEND"]
    assert appended and appended[-1]["path"].endswith(" APPEND INBOX"), appended
    assert appended[-1]["bytes"] > len(body)  # the command with its literal
    closed = [r for r in records if r["reason"] == "closed"]
    assert len(closed) >= 4 and all(r["decision"] == "allowed" for r in closed)
    assert any(r["secrets_redacted"] == [ENV] for r in closed)
    state = cage.cage.root
    for path in (state / "audit.jsonl", state / "gateway.log"):
        assert VALUE not in path.read_text()
        assert body.split("\r\n\r\n")[1].strip() not in path.read_text()  # no message body


def test_a_planted_key_in_an_outgoing_message_is_blocked_and_audited(cage, world):
    clean = "Subject: notes\r\n\r\nnothing secret here " + secrets.token_hex(4) + "\r\n"
    leaking = f"Subject: notes\r\n\r\nthe key: {KEY}\r\n"
    # the relay's own placeholder belongs in the login alone
    spending = f"Subject: notes\r\n\r\nthe password: {placeholder(cage)}\r\n"
    control, smtp_blocked, imap_blocked, placeholder_blocked = mail(cage, [
        {"smtp": 465, "message": clean}, {"smtp": 587, "message": leaking},
        {"imap": "login", "append": leaking}, {"smtp": 465, "message": spending}])
    assert control["sent"] and world.received(clean.split("\r\n\r\n")[1].strip())
    assert "554" in smtp_blocked["error"] and "blocked by secrets" in smtp_blocked["error"]
    assert "error" in imap_blocked
    assert "554" in placeholder_blocked["error"] and f"placeholder of {ENV}" in \
        placeholder_blocked["error"], placeholder_blocked
    assert not world.received("the password: ")
    assert not world.received(KEY) and not world.received(KEY[-40:])
    blocked = [r for r in relay_records(cage) if r["decision"] == "blocked"]
    assert {r["method"] if r["method"] else r["protocol"] for r in blocked} >= {"submission",
                                                                                 "IMAPS"}
    assert [r for r in blocked if r["by"] == "secrets"], blocked
    assert KEY not in (cage.cage.root / "audit.jsonl").read_text()
    # the cage can read why, from the policy API, as it reads an HTTP refusal; the key nowhere
    r = cage.sh("curl -sS -m 10 https://agentcage.local/v1/denials")
    assert r.returncode == 0, r
    relayed = [d for d in json.loads(r.stdout)["denials"] if d["layer"] == "relay"]
    assert (MAIL, 587, "secrets") in {(d["host"], d["port"], d["by"]) for d in relayed}, relayed
    assert KEY[-40:] not in r.stdout


def test_a_placeholder_of_another_secret_in_a_login_is_refused(cage, world):
    before = len(logins(world))
    refused, = mail(cage, [{"smtp": 465}], password_env=OTHER)
    assert "error" in refused
    assert not any(r["password"] == OTHER_VALUE for r in logins(world)[before:])
    assert not world.received(OTHER_VALUE)
    blocked = [r for r in relay_records(cage) if r["decision"] == "blocked"]
    assert any(r["by"] == "injection" and f"placeholder of {OTHER}" in r["reason"]
               for r in blocked), blocked
    # the control: the relay's own placeholder logs in on the same port
    control, = mail(cage, [{"smtp": 465}])
    assert control["login"][0] == 235


def test_a_host_or_port_the_relays_do_not_name_is_refused(cage, world):
    """993 with another name (an allowed HTTPS host, which resolves to the gateway too); the
    mail host on a port no relay names; HTTPS to the mail host (the relay is not an HTTP
    allowance). The control, the relay's own host and port, is the first test's."""
    probe = f"""
import json, socket, ssl, sys
out = {{}}
def tls(host, port):
    try:
        with socket.create_connection((host, port), timeout=4) as s:
            with ssl.create_default_context().wrap_socket(s, server_hostname=host) as t:
                return t.recv(64).decode()
    except Exception as e:
        return type(e).__name__
out["other_name_993"] = tls("api.example.test", 993)
out["mail_143"] = tls("{MAIL}", 143)
out["mail_25"] = tls("{MAIL}", 25)
out["mail_993"] = tls("{MAIL}", 993)
print(json.dumps(out))
"""
    r = cage.service.exec_capture(cage.name, ["python3", "-c", probe], timeout=60)
    assert r.returncode == 0, r
    out = json.loads(r.stdout)
    assert out["mail_993"].startswith("* OK"), out  # the control
    assert out["other_name_993"].startswith("SSL") or out["other_name_993"] in (
        "ConnectionResetError", "ConnectionAbortedError"), out
    assert out["mail_143"] in ("TimeoutError", "timeout", "ConnectionRefusedError"), out
    assert out["mail_25"] in ("TimeoutError", "timeout", "ConnectionRefusedError"), out
    assert not world.sink_records(port=25)
    refused = [rec for rec in relay_records(cage) if rec["decision"] == "blocked"
               and "no mail relay for api.example.test" in rec["reason"]]
    assert refused, relay_records(cage)[-3:]
    web = cage.sh(f"curl -sS -m 10 --noproxy '*' https://{MAIL}/")
    assert '"blocked": true' in web.stdout, web
    assert not any(q["host"] == MAIL for q in world.http_requests())


def test_literal_logins_sasl_ir_and_auth_login_are_swapped_too(cage, world):
    """The ways of logging in imaplib and smtplib.login do not take: IMAP LOGIN with both
    strings as literals, AUTHENTICATE PLAIN with its answer on the command's line, SMTP AUTH
    LOGIN with and without its first answer."""
    token = placeholder(cage)
    before = len(logins(world))
    raw, smtps_login, submission_login = mail(cage, [
        {"imap_raw": True}, {"smtp": 465, "mechanism": "LOGIN"},
        {"smtp": 587, "mechanism": "LOGIN", "ir": False}])
    assert raw["first_go_ahead"].startswith("+") and raw["second_go_ahead"].startswith("+")
    assert raw["login"].startswith("L1 OK") and token in raw["login"], raw
    assert raw["authenticate"].startswith("L2 OK"), raw
    assert smtps_login["login"][0] == 235 and submission_login["login"][0] == 235
    seen = logins(world)[before:]
    assert [(r["proto"], r["mechanism"]) for r in seen] == [
        ("imaps", "LOGIN"), ("imaps", "AUTHENTICATE PLAIN"), ("smtps", "AUTH LOGIN"),
        ("smtp", "AUTH LOGIN")], seen
    assert all(r["ok"] and r["password"] == VALUE for r in seen), seen


def test_an_inspector_that_fails_on_a_message_blocks_it(cage, world):
    """Fail closed: the custom inspector raises on this message; the chain makes that a
    block, and the relay ends the connection. The control: test_a_planted_key's clean
    message, through the same chain."""
    marker = "EXPLODE-IN-MAIL " + secrets.token_hex(6)
    failed, = mail(cage, [{"smtp": 465, "message": f"Subject: x\r\n\r\n{marker}\r\n"}])
    assert "554" in failed["error"] and "exploding" in failed["error"], failed
    assert not world.received(marker)
    broken = [r for r in relay_records(cage) if r["by"] == "exploding"]
    assert broken and broken[-1]["decision"] == "blocked"
    assert broken[-1]["inspectors"][-1]["severity"] == "error"


def test_the_relays_placeholder_is_no_http_credential(cage, world):
    """The mail password's placeholder toward an HTTP host the cage may reach: refused, and
    nothing of the password is sent (the relay's secret has no HTTP rule)."""
    token = placeholder(cage)
    r = cage.sh(f"curl -sS -m 10 --noproxy '*' -H 'Authorization: Bearer {token}' "
                "https://api.example.test/mail-placeholder")
    assert '"blocked": true' in r.stdout and "secrets" in r.stdout, r
    assert not any("/mail-placeholder" in q["path"] for q in world.http_requests())
    assert not any(VALUE.encode() in r.data for r in world.sink_records()
                   if r.proto in ("tls", "tcp"))  # by HTTP(S): never
    # the control: an ordinary request to that host goes through
    ok = cage.sh("curl -sS -m 10 --noproxy '*' https://api.example.test/plain")
    assert '"path": "/plain"' in ok.stdout, ok


@pytest.fixture(scope="module")
def untrusted(world):
    """A cage whose upstream bundle lacks the fake internet's CA: the mail server is then an
    impostor to its gateway."""
    gen = start_cage(world, "mail-untrusted", [], extra=EXTRA, trust_test_ca=False)
    handle = next(gen)
    try:
        assert handle.service.secret_set(handle.name, ENV, VALUE.encode())["applied"]
        yield handle
    finally:
        gen.close()


def test_a_server_whose_certificate_the_gateway_does_not_trust_gets_nothing(untrusted, world):
    before = len(world.mail_records())
    imap_result, smtp_result = mail(untrusted, [{"imap": "login"}, {"smtp": 465}])
    assert "error" in imap_result and "error" in smtp_result
    assert world.mail_records()[before:] == []  # no login, no message reached it
    blocked = [r for r in relay_records(untrusted) if r["decision"] == "blocked"]
    assert len(blocked) == 2 and all("CERTIFICATE_VERIFY_FAILED" in r["reason"]
                                     for r in blocked), blocked


def test_a_rootless_cages_relay_logs_in_with_the_placeholder(world):
    """The same relay in a cage an ordinary user made (uid 1000, its uplink slirp4netns), on a
    host played by a namespace: the server gets the real password, the cage never does."""
    from fakenet import FakeHost

    home = Path(tempfile.mkdtemp(prefix="agentcage-mail-rootless-"))
    os.chmod(home, 0o755)
    try:
        with FakeHost(world.internet) as host:
            open_to_users(host)
            user = AsUser(host, home, AGENT_UID, world.internet)
            try:
                (home / "mail.yaml").write_text(
                    "name: rl-mail\ncontainer: {limits: none}\n"
                    "domains: {mode: allowlist, allow: []}\n"
                    f"relays: [{{host: {MAIL}, ports: [465], secret: {ENV}}}]\n"
                    "gateway: {trusted_networks: [10.200.0.0/16], upstream_ca_files: "
                    f"['{user.ca_path}']}}\n")
                project = home / "project"
                project.mkdir()
                os.chown(project, AGENT_UID, AGENT_UID)
                r = user("cage", "create", "-c", "mail.yaml", "--project", str(project))
                assert r.returncode == 0, r.stderr
                r = user("secret", "set", "rl-mail", ENV, stdin=VALUE + "\n")
                assert r.returncode == 0, r.stderr
                before = len(logins(world))
                body = "Subject: rootless\r\n\r\nfrom a user's cage\r\n"
                spec = {"host": MAIL, "user": USER, "password_env": ENV,
                        "steps": [{"smtp": 465, "message": body}]}
                r = user("exec", "rl-mail", "--", "python3", "-c", CLIENT, json.dumps(spec),
                         timeout=120)
                assert r.returncode == 0, r.stderr
                assert VALUE not in r.stdout + r.stderr
                [sent] = json.loads(r.stdout)
                assert sent["login"][0] == 235 and sent["sent"], sent
                token = user("exec", "rl-mail", "--", "sh", "-c", f'printf %s "${ENV}"').stdout
                assert token.startswith(f"agentcage:secret:{ENV}:") and token in sent["login"][1]
                [login] = logins(world)[before:]
                assert login["ok"] and login["password"] == VALUE, login
            finally:
                user.destroy_all()
                user("prune", "-y")
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_command_sent_with_starttls_is_never_read_as_if_it_came_through_tls(cage, world):
    """The STARTTLS injection: plaintext after STARTTLS, in the same packet, would be read as
    the first command inside TLS by a relay that kept it. Here the connection ends before any
    TLS; the control is smtplib's STARTTLS on 587 in the first test."""
    probe = f"""
import socket
s = socket.create_connection(("{MAIL}", 587), timeout=10)
f = s.makefile("rb")
f.readline()
s.sendall(b"EHLO cage\\r\\n")
while f.readline()[3:4] == b"-":
    pass
s.sendall(b"STARTTLS\\r\\nMAIL FROM:<injected@example.test>\\r\\n")
print(f.readline().decode().strip())
print(repr(f.read()))
"""
    r = cage.service.exec_capture(cage.name, ["python3", "-c", probe], timeout=60)
    assert r.returncode == 0, r
    ready, rest = r.stdout.splitlines()
    assert ready.startswith("220") and rest == "b''", r.stdout  # then closed, nothing more
    refused = [rec for rec in relay_records(cage)
               if "sent data before TLS began" in rec["reason"]]
    assert refused and refused[-1]["decision"] == "blocked", relay_records(cage)[-3:]
    assert not world.received("injected@example.test")


def test_zz_after_a_rotation_the_old_placeholder_logs_in_nowhere_and_the_new_one_does(
        cage, world):
    """Last: it changes the cage's placeholder. The relays swap with the secrets the gateway
    reloaded (its SIGHUP), as the proxy does."""
    old = placeholder(cage)
    result = cage.service.secret_rotate(cage.name, [ENV])
    assert result["applied"]
    new = placeholder(cage)
    assert new != old
    before = len(logins(world))
    stale, = mail(cage, [{"smtp": 465}], password=old)
    fresh, = mail(cage, [{"smtp": 465}])
    assert "535" in stale["error"] and fresh["login"][0] == 235
    *stale_logins, fresh_login = logins(world)[before:]  # smtplib tries PLAIN, then LOGIN
    assert stale_logins and all(r["password"] == old and not r["ok"]  # an inert string
                                for r in stale_logins), stale_logins
    assert fresh_login["password"] == VALUE and fresh_login["ok"]


def _relaying_cage(world, name: str, extra: str):
    """A cage with the relays and `extra` cage.yaml, the relay's secret stored."""
    gen = start_cage(world, name, ["api.example.test"], extra=EXTRA + extra)
    handle = next(gen)
    try:
        assert handle.service.secret_set(handle.name, ENV, VALUE.encode())["applied"]
        yield handle
    finally:
        gen.close()


@pytest.fixture
def watched(world):
    """A cage whose watcher quarantines it at its first finding."""
    yield from _relaying_cage(world, "mailwatch", (
        "policy_api:\n  grantable: [key.example.test]\n"
        "watcher: {escalate_after: 1, quarantine_seconds: 3600}\n"))


def test_a_quarantined_cage_sends_no_mail_until_the_operator_releases_it(watched, world):
    from tests.agentcage.test_watcher_world import TOKEN, grant, operator, traffic, wait_for

    body = "Subject: notes\r\n\r\nall quiet " + secrets.token_hex(4) + "\r\n"
    [before] = mail(watched, [{"smtp": 465, "message": body}])  # the control: it goes
    assert before["sent"], before
    grant(watched, "key.example.test")
    traffic(watched, "split", "key.example.test", TOKEN, 10)  # a finding: quarantine
    assert wait_for(lambda: "QUARANTINED" in operator(
        watched, "watcher", "status", watched.name).stdout, 10)
    sent_before = len([r for r in world.mail_records() if r["event"] == "message"])
    spec = json.dumps({"host": MAIL, "user": USER, "password_env": ENV,
                       "steps": [{"smtp": 465, "message": body}, {"imap": "login"}]})
    r = watched.service.exec_capture(watched.name, ["python3", "-c", CLIENT, spec], timeout=180)
    assert '"sent": true' not in r.stdout and '"OK"' not in r.stdout, r.stdout
    assert len([r for r in world.mail_records() if r["event"] == "message"]) == sent_before
    shut = [rec for rec in relay_records(watched) if "quarantined" in rec["reason"]]
    assert shut and all(rec["decision"] == "blocked" for rec in shut), relay_records(watched)
    assert operator(watched, "watcher", "release", watched.name).returncode == 0
    [after] = mail(watched, [{"smtp": 465, "message": body}])  # released: it goes again
    assert after["sent"], after


@pytest.fixture
def budgeted(world):
    """A cage whose watcher has a small information budget, quarantining at its first
    finding."""
    yield from _relaying_cage(world, "mailbudget", (
        "watcher: {escalate_after: 1, quarantine_seconds: 3600, "
        "budgets: {information_bytes: 8192}}\n"))


def test_what_the_relays_carry_counts_in_the_watchers_budgets(budgeted, world):
    from tests.agentcage.test_watcher_world import operator, wait_for

    def findings() -> list[dict]:
        r = operator(budgeted, "watcher", "findings", budgeted.name, "--json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["findings"]

    # the control: an ordinary mail is no finding
    note = "Subject: notes\r\n\r\nthe build passed\r\n"
    [ordinary] = mail(budgeted, [{"smtp": 465, "message": note}])
    assert ordinary["sent"], ordinary
    assert findings() == []
    # random material mailed out in short hex words (each too short for the entropy
    # inspector), ≈ 3.5 KiB of information a message: the third crosses 8 KiB of
    # information sent to the mail host
    sent_before = len([r for r in world.mail_records() if r["event"] == "message"])
    drip = [{"smtp": 465, "message": "Subject: data\r\n\r\n" + "\r\n".join(
        " ".join(os.urandom(12).hex() for _ in range(8)) for _ in range(30)) + "\r\n"}
        for _ in range(4)]
    spec = json.dumps({"host": MAIL, "user": USER, "password_env": ENV, "steps": drip})
    r = budgeted.service.exec_capture(budgeted.name, ["python3", "-c", CLIENT, spec],
                                      timeout=180)
    assert VALUE not in r.stdout + r.stderr
    assert wait_for(findings, 10), (r.stdout, r.stderr, relay_records(budgeted)[-3:])
    [finding] = findings()
    assert (finding["budget"], finding["host"]) == ("information", MAIL), finding
    # the message that crossed it started the quarantine, and was refused with it
    through = len([r for r in world.mail_records() if r["event"] == "message"]) - sent_before
    assert 1 <= through < len(drip), r.stdout
    refused = [rec for rec in relay_records(budgeted)
               if rec["decision"] == "blocked" and rec.get("by") == "watcher"]
    assert refused, relay_records(budgeted)
    assert "QUARANTINED" in operator(budgeted, "watcher", "status", budgeted.name).stdout
