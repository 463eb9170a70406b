"""A mail client as an agent would write one: Python's imaplib and smtplib, TLS verified with
the default context (in a cage: the cage's CA, through SSL_CERT_FILE; outside: `cafile`).

    python3 mail_client.py '{"host": ..., "user": ..., "password_env": "MAIL_PASSWORD",
                             "steps": [{"imap": "login"}, {"smtp": 465, "message": "..."}]}'

Prints one JSON object: the result of each step, or the error it ended with. Runs on the host's
python3 (3.11 here), inside a cage.
"""

import imaplib
import json
import os
import smtplib
import ssl
import sys


def context(spec):
    return ssl.create_default_context(cafile=spec.get("cafile"))


def text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return [text(v) for v in value]
    return value


def imap(spec, step, password):
    port = step.get("port", 993)
    conn = imaplib.IMAP4_SSL(spec["host"], port, ssl_context=context(spec), timeout=30)
    result = {"capabilities": sorted(conn.capabilities)}
    try:
        if step["imap"] == "authenticate":
            secret = f"\0{spec['user']}\0{password}".encode()
            result["login"] = text(conn.authenticate("PLAIN", lambda _: secret))
        else:
            result["login"] = text(conn.login(spec["user"], password))
        conn.select("INBOX")
        if "append" in step:
            result["append"] = text(conn.append("INBOX", None, None, step["append"].encode()))
        typ, data = conn.fetch("1", "(RFC822)")
        result["fetch"] = text(data[0][1]) if typ == "OK" else text(data)
        if step.get("idle"):
            tag = conn._new_tag()
            conn.send(tag + b" IDLE\r\n")
            result["idle"] = text(conn.readline())
            conn.send(b"DONE\r\n")
            result["idle_done"] = text(conn.readline())
    finally:
        conn.logout()
    return result


def smtp(spec, step, password):
    port = step["smtp"]
    if port == 465:
        conn = smtplib.SMTP_SSL(spec["host"], port, context=context(spec), timeout=30)
    else:
        conn = smtplib.SMTP(spec["host"], port, timeout=30)
        conn.starttls(context=context(spec))
    result = {}
    try:
        conn.ehlo()
        result["features"] = sorted(conn.esmtp_features)
        result["login"] = text(conn.login(spec["user"], password))
        if "message" in step:
            refused = conn.sendmail(spec["user"], [step.get("to", spec["user"])],
                                    step["message"].encode())
            result["sent"] = not refused
    finally:
        try:
            conn.quit()
        except Exception as e:
            result["quit"] = type(e).__name__
    return result


def main():
    spec = json.loads(sys.argv[1])
    password = os.environ.get(spec["password_env"], "") if "password_env" in spec \
        else spec["password"]
    results = []
    for step in spec["steps"]:
        try:
            results.append(imap(spec, step, password) if "imap" in step
                           else smtp(spec, step, password))
        except Exception as e:
            results.append({"error": f"{type(e).__name__}: {text(str(e))}"})
    print(json.dumps(results))


main()
