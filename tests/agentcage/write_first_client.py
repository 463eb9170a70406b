"""An upload by a client that writes its whole body before it reads a byte of the answer, as
Python's http.client does (`python3 -c SOURCE SIZE CHUNKED SCHEME HOST PATH TIMEOUT`; the cage's
Python, standard library only). Prints {"status", "body"} or {"error"}, and "seconds"."""

import http.client
import json
import ssl
import sys
import time

size, chunked, scheme, host, path, timeout = sys.argv[1:7]
size, chunked, timeout = int(size), chunked == "1", float(timeout)
if scheme == "https":
    conn = http.client.HTTPSConnection(host, 443, context=ssl.create_default_context(),
                                       timeout=timeout)
else:
    conn = http.client.HTTPConnection(host, 80, timeout=timeout)
body = b"x" * size
started = time.monotonic()
try:
    if chunked:
        pieces = (body[i:i + 65536] for i in range(0, size, 65536))
        conn.request("POST", path, body=pieces, encode_chunked=True)
    else:
        conn.request("POST", path, body=body)
    answer = conn.getresponse()
    out = {"status": answer.status, "body": answer.read()[:300].decode("latin-1")}
except Exception as e:
    out = {"error": f"{type(e).__name__}: {e}"}
out["seconds"] = round(time.monotonic() - started, 3)
print(json.dumps(out))
