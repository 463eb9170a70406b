"""The mail relays' cost, in the fake internet, against its baseline in one run: smtplib
sending messages over one SMTPS connection (465), logged in once, from inside a cage through
its relay, against the same script sending them straight to the fake mail server from a
namespace of the fake internet. Also the cost of a connection and its login (connect, TLS,
EHLO, AUTH PLAIN). Rounds alternate between the two, so a change of the machine's load weighs
on both alike; medians over the rounds. The messages are prose (a line of text repeated): a
body of one base64-looking run after another costs the inspectors more (their own bench,
bench/inspect_chain.py). No target is set yet: this measures where it stands.

Usage (root): .venv/bin/python -P bench/mail_relay.py [--rounds N] [--messages N] [--size KIB]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from fakenet import FakeInternet

MAIL, USER, PASSWORD = "mail.example.test", "bench@mail.example.test", "bench-password"
# Runs in the cage (its password: the placeholder in $MAIL_PASSWORD) or beside it (the real
# one, the fake internet's CA given): argv = password or "", CA file or "", messages, KiB.
INSIDE = r"""
import json, os, smtplib, ssl, statistics, sys, time
password, cafile, count, kib = sys.argv[1] or os.environ["MAIL_PASSWORD"], sys.argv[2], \
    int(sys.argv[3]), int(sys.argv[4])
context = ssl.create_default_context(cafile=cafile or None)
line = b"The build passed; the report is attached below, as text, for the team.\r\n"
body = b"Subject: bench\r\n\r\n" + line * (kib * 1024 // len(line))
start = time.perf_counter()
conn = smtplib.SMTP_SSL("MAIL_HOST", 465, context=context, timeout=60)
conn.login("MAIL_USER", password)
login = time.perf_counter() - start
sends = []
for _ in range(count):
    t = time.perf_counter()
    conn.sendmail("MAIL_USER", ["MAIL_USER"], body)
    sends.append(time.perf_counter() - t)
conn.quit()
print(json.dumps({"login": login * 1000, "send": statistics.median(sends) * 1000}))
""".replace("MAIL_HOST", MAIL).replace("MAIL_USER", USER)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--size", type=int, default=64, help="KiB per message")
    args = parser.parse_args()
    from agentcage.backends.namespace import NamespaceBackend
    from agentcage.cages import CageService
    from agentcage.config.load import load_config_text
    from agentcage.state import StateStore

    work = Path(tempfile.mkdtemp(prefix="agentcage-bench-mail-"))
    os.chmod(work, 0o755)
    project = work / "project"
    project.mkdir()
    os.chown(project, 65534, 65534)
    samples: dict[str, list[dict[str, float]]] = {"direct": [], "relay": []}
    argv = [str(args.messages), str(args.size)]
    try:
        with FakeInternet(extra_names={MAIL: None}, catch_all=False) as net:
            net.set_mail_account(USER, PASSWORD)
            uplink, beside = net.add_client().netns, net.add_client()
            store = StateStore(work / "home")
            service = CageService(store, NamespaceBackend(store))
            service.create(load_config_text(f"""
name: bench-mail
domains: {{mode: allowlist, allow: []}}
dns_servers: [{net.dns_address}]
relays: [{{host: {MAIL}, ports: [465], secret: MAIL_PASSWORD}}]
gateway: {{uplink: "netns:{uplink}", trusted_networks: [10.200.0.0/16],
          upstream_ca_files: ["{net.ca_cert_path}"]}}
"""), project)
            try:
                service.secret_set("bench-mail", "MAIL_PASSWORD", PASSWORD.encode())

                def measured(r) -> dict[str, float]:
                    if r.returncode != 0:
                        raise SystemExit(f"the measurement failed: {r.stderr.strip()[-800:]}")
                    return json.loads(r.stdout.strip().splitlines()[-1])

                for _ in range(args.rounds):
                    samples["relay"].append(measured(service.exec_capture(
                        "bench-mail", ["python3", "-c", INSIDE, "", "", *argv], timeout=600)))
                    samples["direct"].append(measured(beside.run(
                        [sys.executable, "-c", INSIDE, PASSWORD, str(net.ca_cert_path), *argv],
                        capture_output=True, text=True, timeout=600)))
            finally:
                service.destroy("bench-mail")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    median = {side: {key: statistics.median(s[key] for s in runs) for key in ("login", "send")}
              for side, runs in samples.items()}
    print(f"medians, ms ({args.rounds} rounds of {args.messages} messages of {args.size} KiB)")
    print(f"{'':44} {'direct':>8} {'relay':>8} {'ratio':>7}")
    for label, key in (("connect, TLS, EHLO, AUTH PLAIN", "login"),
                       ("one message (MAIL, RCPT, DATA)", "send")):
        direct, relay = median["direct"][key], median["relay"][key]
        print(f"{label:44} {direct:8.2f} {relay:8.2f} {relay / direct:6.2f}x")


if __name__ == "__main__":
    main()
