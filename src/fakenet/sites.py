"""Static sites: a host name whose requests are answered from a directory of files.

    <sites_dir>/<host>/<path>          the file at that path
    <sites_dir>/<host>/<path>/index.*  a directory's page: index.json, then index.html

A host with a directory here is answered only from it (404 for anything it lacks); every
other host keeps the echo server. That is all a package registry is, seen by its client: the
npm registry's package documents and tarballs, a Python simple index and its wheels
(fakenet.packages builds them). The type of a file is told by its name (.json, .html, else
octet-stream). A path that climbs out of its site (`..`, a symlink) is refused with a 404.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import unquote, urlsplit

from fakenet.httpparse import HttpRequest

INDEX_FILES = ("index.json", "index.html")
_TYPES = {".json": "application/json", ".html": "text/html; charset=utf-8"}
PIECE = 256 * 1024


def site_of(sites_dir: str | None, request: HttpRequest) -> Path | None:
    """The site directory that answers this request, or None (not a site's host)."""
    if not sites_dir or request.method not in ("GET", "HEAD"):
        return None
    host = (request.header("host") or "").split(":", 1)[0].lower().rstrip(".")
    if not host or "/" in host or host.startswith("."):
        return None
    site = Path(sites_dir) / host
    return site if site.is_dir() else None


def file_for(site: Path, target: str) -> Path | None:
    """The file a request target names inside `site`, or None."""
    path = unquote(urlsplit(target).path)
    # "." names the directory it is in (apt asks a flat repository for /repo/./Packages);
    # ".." is refused rather than resolved
    parts = [p for p in path.split("/") if p and p != "."]
    if ".." in parts:
        return None
    root = site.resolve()
    found = root.joinpath(*parts).resolve()
    if found != root and root not in found.parents:
        return None  # a symlink out of the site
    if found.is_dir():
        return next((found / name for name in INDEX_FILES if (found / name).is_file()), None)
    return found if found.is_file() else None


async def serve(writer: asyncio.StreamWriter, site: Path, request: HttpRequest) -> bool:
    """Write the answer; False when the connection must close afterwards."""
    found = file_for(site, request.target)
    keep_alive = request.keep_alive
    connection = f"Connection: {'keep-alive' if keep_alive else 'close'}"
    if found is None:
        body = b'{"error": "not found"}'
        writer.write(("\r\n".join(["HTTP/1.1 404 Not Found", "Server: fakenet",
                                   "Content-Type: application/json",
                                   f"Content-Length: {len(body)}", connection])
                      + "\r\n\r\n").encode() + (b"" if request.method == "HEAD" else body))
        await writer.drain()
        return keep_alive
    data = found.read_bytes()
    kind = _TYPES.get(found.suffix, "application/octet-stream")
    writer.write(("\r\n".join(["HTTP/1.1 200 OK", "Server: fakenet", f"Content-Type: {kind}",
                               f"Content-Length: {len(data)}", connection])
                  + "\r\n\r\n").encode())
    if request.method != "HEAD":
        for start in range(0, len(data), PIECE):
            writer.write(data[start:start + PIECE])
            await writer.drain()
    await writer.drain()
    return keep_alive
