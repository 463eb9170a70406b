"""capture.jsonl records as HAR 1.2 (loadable in browser developer tools), in one of two views:

- `inbound`: what the cage sent and received (placeholders only): safe to share.
- `outbound`: what went over the wire (REAL injected secret values): keep it private.

A WebSocket connection is one entry (its upgrade request and 101 response) whose messages are in
`_webSocketMessages`, the extension browsers use for the same thing.
"""

from __future__ import annotations

import binascii
import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from agentcage import __version__

VIEWS = ("inbound", "outbound")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _iso(ts: float | None) -> str:
    moment = dt.datetime.fromtimestamp(float(ts or 0), tz=dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _ms(start: float | None, end: float | None) -> float:
    if start is None or end is None:
        return 0.0
    return round(max(0.0, (float(end) - float(start)) * 1000), 3)


def _headers(pairs: Any) -> list[dict[str, str]]:
    out = []
    for pair in pairs or ():
        if isinstance(pair, (list, tuple)) and len(pair) == 2:
            out.append({"name": str(pair[0]), "value": str(pair[1])})
    return out


def _header(headers: Sequence[dict[str, str]], name: str) -> str:
    for h in headers:
        if h["name"].lower() == name:
            return h["value"]
    return ""


def _cookies(headers: Sequence[dict[str, str]], response: bool) -> list[dict[str, str]]:
    cookies = []
    for h in headers:
        if not response and h["name"].lower() == "cookie":
            parts = h["value"].split(";")
        elif response and h["name"].lower() == "set-cookie":
            parts = h["value"].split(";")[:1]
        else:
            continue
        for part in parts:
            name, sep, value = part.strip().partition("=")
            if sep and name:
                cookies.append({"name": name, "value": value})
    return cookies


def _http_version(value: Any) -> str:
    return str(value) if value else "HTTP/1.1"


def _url(req: dict[str, Any]) -> str:
    scheme = str(req.get("scheme") or "https")
    host = str(req.get("host") or "")
    port = req.get("port")
    path = str(req.get("path") or "/")
    if str(req.get("method")).upper() == "CONNECT":
        return f"{scheme}://{host}:{port}/" if port else f"{scheme}://{host}/"
    if not path.startswith("/"):
        path = "/" + path
    netloc = host if port in (None, _DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    return f"{scheme}://{netloc}{path}"


def _body(doc: Any) -> tuple[str | None, str | None, int]:
    """(text, encoding, size) of a capture body document."""
    if not isinstance(doc, dict):
        return None, None, 0
    size = int(doc.get("size") or 0)
    if "text" in doc:
        return str(doc["text"]), None, size
    if "base64" in doc:
        return str(doc["base64"]), "base64", size
    return None, None, size


def har_request(req: dict[str, Any] | None) -> dict[str, Any]:
    req = req or {}
    headers = _headers(req.get("headers"))
    url = _url(req) if req else ""
    query = [{"name": k, "value": v}
             for k, v in parse_qsl(urlsplit(url).query, keep_blank_values=True)]
    text, encoding, size = _body(req.get("body"))
    out: dict[str, Any] = {
        "method": str(req.get("method") or "GET"),
        "url": url,
        "httpVersion": _http_version(req.get("http_version")),
        "cookies": _cookies(headers, response=False),
        "headers": headers,
        "queryString": query,
        "headersSize": -1,
        "bodySize": size if req.get("body") is not None else 0,
    }
    if text is not None and (size or text):
        post: dict[str, Any] = {"mimeType": _header(headers, "content-type"), "text": text}
        if encoding:
            post["_encoding"] = encoding
        if req["body"].get("truncated"):
            post["comment"] = f"truncated: {size} bytes in all"
        out["postData"] = post
    return out


def har_response(resp: dict[str, Any] | None, error: str | None = None) -> dict[str, Any]:
    if not resp:  # no answer reached this side (upstream error, connection killed)
        return {
            "status": 0, "statusText": error or "", "httpVersion": "HTTP/1.1", "cookies": [],
            "headers": [], "content": {"size": 0, "mimeType": ""}, "redirectURL": "",
            "headersSize": -1, "bodySize": -1, "_error": error or "no response",
        }
    headers = _headers(resp.get("headers"))
    text, encoding, size = _body(resp.get("body"))
    content: dict[str, Any] = {"size": size, "mimeType": _header(headers, "content-type")}
    if text is not None:
        content["text"] = text
        if encoding:
            content["encoding"] = encoding
        if resp["body"].get("truncated"):
            content["comment"] = f"truncated: {size} bytes in all"
    return {
        "status": int(resp.get("status") or 0),
        "statusText": str(resp.get("reason") or ""),
        "httpVersion": _http_version(resp.get("http_version")),
        "cookies": _cookies(headers, response=True),
        "headers": headers,
        "content": content,
        "redirectURL": _header(headers, "location"),
        "headersSize": -1,
        "bodySize": size if resp.get("body") is not None else 0,
    }


def har_entry(record: dict[str, Any], view: str) -> dict[str, Any] | None:
    """One HAR entry of a capture record, or None when the record has nothing on that side
    (a blocked request never went out: it is in the inbound view only)."""
    side = record.get(view)
    if not isinstance(side, dict) or not isinstance(side.get("request"), dict):
        return None
    t = record.get("timestamps") or {}
    start = t.get("request_start") or record.get("ts")
    send = _ms(t.get("request_start"), t.get("request_end"))
    wait = _ms(t.get("request_end"), t.get("response_start"))
    receive = _ms(t.get("response_start"), t.get("response_end"))
    entry: dict[str, Any] = {
        "startedDateTime": _iso(start),
        "time": round(send + wait + receive, 3),
        "request": har_request(side["request"]),
        "response": har_response(side.get("response"), record.get("error")),
        "cache": {},
        "timings": {"send": send, "wait": wait, "receive": receive},
        "_agentcage": {
            "id": record.get("id"),
            "view": view,
            "decision": record.get("decision"),
            "by": record.get("by"),
            "reason": record.get("reason"),
        },
    }
    if isinstance(side.get("websocket"), list):
        entry["_webSocketMessages"] = [_ws_message(m) for m in side["websocket"]]
    return entry


def _ws_message(doc: dict[str, Any]) -> dict[str, Any]:
    """A captured WebSocket message in the shape browsers export (`_webSocketMessages`:
    type, time, opcode, data; binary data is base64), plus what agentcage knows of it."""
    out: dict[str, Any] = {
        "type": str(doc["type"]),
        "time": float(doc["time"]),
        "opcode": int(doc["opcode"]),
        "data": str(doc.get("text", doc.get("base64", ""))),
        "_size": int(doc.get("size", 0)),
    }
    for key in ("omitted", "blocked"):
        if key in doc:
            out[f"_{key}"] = str(doc[key])
    return out


def annotate(doc: dict[str, Any], findings: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The watcher's findings in a HAR document: on the entry of the flow that crossed a
    budget, as its comment, and counted in the log's comment."""
    by_flow: dict[str, list[str]] = {}
    for f in findings:
        if f.get("flow"):
            by_flow.setdefault(str(f["flow"]), []).append(
                f"watcher finding {f.get('id')} ({f.get('budget')}): {f.get('summary')}; "
                f"{f.get('action', 'recorded')}")
    log = doc["log"]
    for entry in log["entries"]:
        said = by_flow.get(str(entry.get("_agentcage", {}).get("id")))
        if said:
            entry["comment"] = "; ".join(said)
    if findings:
        log["comment"] += f"; {len(findings)} watcher finding(s)"
    return doc


def to_har(records: Iterable[dict[str, Any]], view: str = "inbound") -> dict[str, Any]:
    return convert(records, view)[0]


def convert(records: Iterable[dict[str, Any]],
            view: str = "inbound") -> tuple[dict[str, Any], int]:
    """(the HAR document, how many records could not be converted and were skipped)."""
    if view not in VIEWS:
        raise ValueError(f"view must be one of {', '.join(VIEWS)}")
    entries = []
    skipped = 0
    for record in records:
        try:
            entry = har_entry(record, view)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError,
                binascii.Error):
            skipped += 1
            continue
        if entry is not None:
            entries.append(entry)
    entries.sort(key=lambda e: e["startedDateTime"])
    note = " (contains REAL secret values)" if view == "outbound" else " (placeholders only)"
    doc = {
        "log": {
            "version": "1.2",
            "creator": {"name": "agentcage", "version": __version__},
            "pages": [],
            "entries": entries,
            "comment": f"agentcage capture, {view} view{note}",
        }
    }
    return doc, skipped


REQUIRED = {
    "log": ("version", "creator", "entries"),
    "creator": ("name", "version"),
    "entry": ("startedDateTime", "time", "request", "response", "cache", "timings"),
    "request": ("method", "url", "httpVersion", "cookies", "headers", "queryString",
                "headersSize", "bodySize"),
    "response": ("status", "statusText", "httpVersion", "cookies", "headers", "content",
                 "redirectURL", "headersSize", "bodySize"),
    "content": ("size", "mimeType"),
    "timings": ("send", "wait", "receive"),
}


def har_problems(doc: Any) -> list[str]:
    """What a document lacks to be HAR 1.2 (the required keys and their types); [] = fine."""
    problems: list[str] = []

    def need(obj: Any, kind: str, where: str) -> bool:
        if not isinstance(obj, dict):
            problems.append(f"{where}: not an object")
            return False
        problems.extend(f"{where}: missing {k}" for k in REQUIRED[kind] if k not in obj)
        return True

    if not isinstance(doc, dict) or not need(doc.get("log"), "log", "log"):
        return problems or ["no log"]
    log = doc["log"]
    if log.get("version") != "1.2":
        problems.append("log.version is not 1.2")
    need(log.get("creator"), "creator", "log.creator")
    if not isinstance(log.get("entries"), list):
        return [*problems, "log.entries: not a list"]
    for i, e in enumerate(log["entries"]):
        w = f"entries[{i}]"
        if not need(e, "entry", w):
            continue
        if need(e.get("request"), "request", f"{w}.request"):
            for key in ("headers", "cookies", "queryString"):
                if not all(isinstance(h, dict) and "name" in h and "value" in h
                           for h in e["request"].get(key) or []):
                    problems.append(f"{w}.request.{key}: entries need name and value")
            post = e["request"].get("postData")
            if post is not None and not (isinstance(post, dict) and "mimeType" in post
                                         and ("text" in post or "params" in post)):
                problems.append(f"{w}.request.postData: needs mimeType and text or params")
        if need(e.get("response"), "response", f"{w}.response"):
            need(e["response"].get("content"), "content", f"{w}.response.content")
        need(e.get("timings"), "timings", f"{w}.timings")
        if not isinstance(e.get("cache"), dict):
            problems.append(f"{w}.cache: not an object")
        try:
            dt.datetime.fromisoformat(str(e.get("startedDateTime")).replace("Z", "+00:00"))
        except ValueError:
            problems.append(f"{w}.startedDateTime: not ISO 8601")
    return problems
