"""audit.jsonl: every record written whole and in order, or not at all (then the caller
refuses what it audited), and the outage itself recorded once writes work again.

A file size limit (RLIMIT_FSIZE, set in a child process) makes the kernel cut writes short
exactly as a full disk does, without mounting anything; the world test with a real full tmpfs
is test_gateway_faults_world.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentcage.gateway.audit import AuditLog, AuditRecord, AuditUnavailable, read_audit

CHILD = textwrap.dedent("""
    import json, resource, signal, sys
    from pathlib import Path
    from agentcage.gateway.audit import AuditLog, AuditRecord, AuditUnavailable

    path, limit = Path(sys.argv[1]), int(sys.argv[2])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit: EFBIG or a short write
    log = AuditLog(path)
    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    outcome = []
    for i in range(40):
        try:
            log.write(AuditRecord("outbound", "allowed", "r" * 150, path=f"/{i}"))
            outcome.append(True)
        except AuditUnavailable:
            outcome.append(False)
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    log.write(AuditRecord("outbound", "allowed", "after", path="/after"))
    print(json.dumps(outcome))
""")


def test_a_write_cut_short_leaves_no_torn_line_and_the_outage_is_recorded(tmp_path: Path):
    path = tmp_path / "audit.jsonl"
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), "4000"],
                          capture_output=True, text=True, check=True)
    outcome = json.loads(done.stdout)
    assert True in outcome and False in outcome  # the limit was reached mid-run
    assert outcome == sorted(outcome, reverse=True)  # nothing was written after a failure
    data = path.read_bytes()
    lines = data.split(b"\n")
    assert lines[-1] == b"" and all(json.loads(line) for line in lines[:-1])  # none torn
    records = read_audit(path)
    written = [r["path"] for r in records if r["direction"] == "outbound"]
    assert written == [f"/{i}" for i, ok in enumerate(outcome) if ok] + ["/after"]  # in order
    (outage,) = [r for r in records if r["direction"] == "audit"]
    assert outage["lost"] == outcome.count(False) and records[-2] == outage


def test_records_are_whole_lines_appended_in_order(tmp_path: Path):
    log = AuditLog(tmp_path / "a.jsonl")
    for i in range(100):
        log.write(AuditRecord("dns", "blocked", f"q{i}"))
    log.close()
    assert [r["reason"] for r in read_audit(tmp_path / "a.jsonl")] == [f"q{i}" for i in
                                                                        range(100)]


def test_an_unwritable_log_raises_and_says_so(tmp_path: Path, capsys):
    log = AuditLog(tmp_path / "a.jsonl")
    log.close()  # its descriptor is gone: every write fails
    with pytest.raises(AuditUnavailable):
        log.write(AuditRecord("outbound", "allowed", "x"))
    assert not log.write_or_say(AuditRecord("config", "allowed", "policy loaded"))
    assert "cannot audit" in capsys.readouterr().err


def _credentials() -> dict[str, str]:
    import secrets
    import string

    alphabet = string.ascii_letters + string.digits
    return {
        "github-token": "ghp_" + "".join(secrets.choice(alphabet) for _ in range(36)),
        "aws-access-key-id": "AKIA" + "".join(secrets.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
                                           for _ in range(16)),
    }


def test_credentials_in_a_record_are_fingerprinted_never_written(tmp_path: Path):
    import hashlib

    from agentcage.gateway.auditmask import CredentialMask, fingerprint
    from agentcage.inspect.patterns import load_patterns

    creds = _credentials()
    gh, aws = creds["github-token"], creds["aws-access-key-id"]
    log = AuditLog(tmp_path / "a.jsonl", mask=CredentialMask(load_patterns()))
    log.write(AuditRecord("dns", "blocked", "resolver: not in allowlist", host=f"{gh}.x.test"))
    log.write(AuditRecord("outbound", "blocked", f"seen {aws}", host="exfil.test",
                          path=f"/u?t={gh}&k={aws}", url=f"https://exfil.test/u?t={gh}",
                          inspectors=({"name": "secrets", "reason": f"key {aws}"},),
                          extra={"notes": [gh]}))
    # a credential the 2 KiB clip would cut in half: masked before it is clipped
    log.write(AuditRecord("outbound", "blocked", "long", path="/" + "a" * 2030 + "/" + gh))
    log.close()
    text = (tmp_path / "a.jsonl").read_text()
    assert gh not in text and aws not in text and gh[:14] not in text  # not even a part
    dns, outbound, long = read_audit(tmp_path / "a.jsonl")
    gh_print = fingerprint("github-token", gh.encode()).decode()
    aws_print = fingerprint("aws-access-key-id", aws.encode()).decode()
    assert gh_print == f"[github-token sha256:{hashlib.sha256(gh.encode()).hexdigest()[:12]}]"
    assert dns["host"] == f"{gh_print}.x.test"  # what was tried stays readable
    assert outbound["path"] == f"/u?t={gh_print}&k={aws_print}"
    assert outbound["reason"] == f"seen {aws_print}" and gh_print in outbound["url"]
    assert outbound["inspectors"] == [{"name": "secrets", "reason": f"key {aws_print}"}]
    assert outbound["notes"] == [gh_print]
    assert long["path"].endswith("/[github-token sh…")  # the fingerprint, clipped


def test_without_credentials_a_record_is_written_as_it_came(tmp_path: Path):
    from agentcage.gateway.auditmask import CredentialMask
    from agentcage.inspect.patterns import load_patterns

    record = AuditRecord("outbound", "allowed", "ok", host="api.example.test",
                         path="/v1/x?q=caf\u00e9", extra={"n": 3})
    masked = AuditLog(tmp_path / "m.jsonl", mask=CredentialMask(load_patterns()))
    plain = AuditLog(tmp_path / "p.jsonl")
    for log in (masked, plain):
        log.write(record)
        log.close()
    assert (tmp_path / "m.jsonl").read_bytes() == (tmp_path / "p.jsonl").read_bytes()


def test_a_mask_that_fails_refuses_the_record_and_writes_nothing(tmp_path: Path):
    def broken(text: str) -> str:
        raise RuntimeError("no")

    log = AuditLog(tmp_path / "a.jsonl", mask=broken)
    with pytest.raises(AuditUnavailable):
        log.write(AuditRecord("outbound", "allowed", "x"))
    log.close()
    assert (tmp_path / "a.jsonl").read_text() == ""


def test_a_record_that_does_not_encode_is_refused_and_nothing_is_written(tmp_path: Path):
    log = AuditLog(tmp_path / "a.jsonl")
    log.write(AuditRecord("outbound", "allowed", "before", path="/before"))
    with pytest.raises(AuditUnavailable, match="not encodable"):
        log.write(AuditRecord("outbound", "allowed", "x", extra={"what": object()}))
    log.write(AuditRecord("outbound", "allowed", "after", path="/after"))
    log.close()
    before, outage, after = read_audit(tmp_path / "a.jsonl")  # the refusal itself is said
    assert (before["path"], after["path"]) == ("/before", "/after")
    assert (outage["direction"], outage["lost"]) == ("audit", 1)
    assert "not encodable" in outage["reason"]
