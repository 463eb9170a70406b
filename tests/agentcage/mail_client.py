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


def imap_raw(spec, step, password):
    """IMAP as imaplib never writes it: LOGIN with both strings as synchronizing literals,
    then AUTHENTICATE PLAIN with its answer on the command's line (SASL-IR)."""
    import base64
    import socket

    sock = socket.create_connection((spec["host"], 993), timeout=30)
    conn = context(spec).wrap_socket(sock, server_hostname=spec["host"])
    reader = conn.makefile("rb")
    result = {"greeting": text(reader.readline())}

    def until(tag):
        while True:
            line = reader.readline()
            if not line or line.startswith(tag + b" "):
                return text(line)

    user = spec["user"].encode()
    conn.sendall(b"L1 LOGIN {%d}\r\n" % len(user))
    result["first_go_ahead"] = text(reader.readline())
    conn.sendall(user + b" {%d}\r\n" % len(password.encode()))
    result["second_go_ahead"] = text(reader.readline())
    conn.sendall(password.encode() + b"\r\n")
    result["login"] = until(b"L1")
    answer = base64.b64encode(b"\0" + user + b"\0" + password.encode())
    conn.sendall(b"L2 AUTHENTICATE PLAIN " + answer + b"\r\n")
    result["authenticate"] = until(b"L2")
    conn.sendall(b"L3 LOGOUT\r\n")
    until(b"L3")
    conn.close()
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
        if step.get("mechanism") == "LOGIN":  # AUTH LOGIN, with or without its first answer
            conn.user, conn.password = spec["user"], password
            result["login"] = text(conn.auth("LOGIN", conn.auth_login,
                                             initial_response_ok=step.get("ir", True)))
        else:
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
            if "imap_raw" in step:
                results.append(imap_raw(spec, step, password))
            else:
                results.append(imap(spec, step, password) if "imap" in step
                               else smtp(spec, step, password))
        except Exception as e:
            results.append({"error": f"{type(e).__name__}: {text(str(e))}"})
    print(json.dumps(results))


main()
