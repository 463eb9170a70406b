"""Package registries for the fake internet: an npm registry and a Python package index,
with projects that install from them, made of real package files built here.

    npm = build_npm_registry(net.site_dir("registry.npmjs.org"), packages=300)
    npm.write_project(project_dir)        # package.json: `npm install` takes all 300
    py = build_python_index(net.site_dir("pypi.org"), net.site_dir("files.pythonhosted.org"),
                            wheels=40)
    py.write_project(project_dir)         # requirements.txt: `pip install -r` takes all 40

Each npm package is a real tarball (package/package.json, package/index.js) named in its
registry document (the abbreviated form npm asks for, with its sha512 integrity); each Python
package is a real wheel (a module, its METADATA with Requires-Dist, WHEEL, RECORD with hashes)
listed in a PEP 503 simple index on pypi.org and served from files.pythonhosted.org, as on the
real index. The packages depend on one another as real ones do: a project names a few, which
pull in the rest (a tree with shared leaves, so the installers deduplicate), and their files
are tens of KiB of content that does not compress away. Everything is a pure function of the
arguments: the same call builds the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shlex
import shutil
import tarfile
import zipfile
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NPM_HOST = "registry.npmjs.org"
INDEX_HOST, FILES_HOST = "pypi.org", "files.pythonhosted.org"
NPM_PREFIX, PYTHON_PREFIX = "cagebench-", "cagebench_"
DIRECT = 20  # how many packages a project names itself; they pull in the rest
_EPOCH = 499162800  # 1985-10-26: the mtime of every file, so the bytes never vary


@dataclass(frozen=True)
class Registry:
    """What was built: the package names, their files (path below the site: bytes size), and
    the project that installs them all."""

    kind: str  # "npm" or "python"
    hosts: tuple[str, ...]  # the sites its files are served from
    names: tuple[str, ...]
    files: dict[str, int]
    project: dict[str, str]  # file name -> content

    @property
    def total_bytes(self) -> int:
        return sum(self.files.values())

    def write_project(self, directory: Path) -> None:
        for name, text in self.project.items():
            (directory / name).write_text(text)

    def install_script(self, project: str) -> str:
        """The shell command that installs the project at `project` (a path as the installer
        sees it) into that project: node_modules/ or site-packages/. No cache is read, no
        other host asked (npm's audit and update check, pip's version check are off)."""
        where = shlex.quote(project)
        if self.kind == "npm":
            return (f"cd {where} && npm install --no-audit --no-fund --no-update-notifier "
                    "--cache .npm-cache")
        return (f"cd {where} && python3 -m pip install --no-cache-dir --no-input "
                "--disable-pip-version-check --progress-bar off --target site-packages "
                "-r requirements.txt")

    def remove_install(self, project: Path) -> None:
        """Remove what `install_script` left in `project`, so the next install starts bare."""
        for name in ("node_modules", ".npm-cache", "package-lock.json", "site-packages"):
            path = project / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()

    def installed(self, project: Path) -> set[str]:
        """The names of this registry's packages installed in `project`."""
        if self.kind == "npm":
            found = {p.name for p in (project / "node_modules").glob(f"{NPM_PREFIX}*")}
        else:
            found = {p.name.split("-")[0].replace("_", "-") for p in
                     (project / "site-packages").glob(f"{PYTHON_PREFIX}*.dist-info")}
        return found & set(self.names)

    def fetches(self, requests: Iterable[Mapping[str, Any]]) -> Counter[str]:
        """How many times each of this registry's files was asked for, from fakenet's
        records of HTTP requests (`FakeInternet.http_requests()`)."""
        counts: Counter[str] = Counter()
        for request in requests:
            host = str(request.get("host") or "").split(":", 1)[0]
            path = str(request.get("path") or "").split("?", 1)[0].strip("/")
            if host not in self.hosts:
                continue
            key = next((k for k in (path, f"{path}/index.json", f"{path}/index.html")
                        if k in self.files), None)
            counts[key or f"(not a file) {host}/{path}"] += 1
        return counts


def dependencies(count: int, direct: int = DIRECT) -> dict[int, list[int]]:
    """Who depends on whom: package j >= `direct` is needed by (j - direct) // 2 and, for a
    shared leaf, by one more earlier package; every package is reachable from 0..direct-1."""
    needs: dict[int, list[int]] = {i: [] for i in range(count)}
    for j in range(direct, count):
        needs[(j - direct) // 2].append(j)
        second = (j * 37 + 11) % (j // 2 + 1)
        if second != (j - direct) // 2 and j not in needs[second]:
            needs[second].append(j)
    return needs


def _filler(name: str, size: int) -> str:
    """`size` characters of text unique to `name`: hex digests, so gzip halves it at most."""
    out: list[str] = []
    counter = length = 0
    while length < size:
        out.append(hashlib.sha256(f"{name}:{counter}".encode()).hexdigest() + "\n")
        length += len(out[-1])
        counter += 1
    return "".join(out)[:size]


def _size(i: int) -> int:
    return 4096 + (i * 7919) % 28672  # 4..32 KiB of source per package


# --- npm -----------------------------------------------------------------------------------

def _tarball(files: dict[str, bytes]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.USTAR_FORMAT) as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mtime, info.mode = len(data), _EPOCH, 0o644
            tar.addfile(info, io.BytesIO(data))
    # gzip's own header carries a time too: fixed, so equal calls give equal bytes
    stamped = bytearray(raw.getvalue())
    stamped[4:8] = _EPOCH.to_bytes(4, "little")
    return bytes(stamped)


def npm_name(i: int) -> str:
    return f"{NPM_PREFIX}{i:03d}"


def build_npm_registry(site: Path, packages: int = 300, version: str = "1.0.0") -> Registry:
    """Write `packages` npm packages into `site` (registry.npmjs.org's directory)."""
    needs = dependencies(packages)
    files: dict[str, int] = {}
    for i in range(packages):
        name = npm_name(i)
        deps = {npm_name(j): f"^{version}" for j in needs[i]}
        manifest = {"name": name, "version": version, "main": "index.js",
                    "license": "MIT", "dependencies": deps}
        source = f"// {name}\nmodule.exports = {json.dumps(name)};\n/*\n" \
                 f"{_filler(name, _size(i))}*/\n"
        tgz = _tarball({"package/package.json": json.dumps(manifest, indent=2).encode(),
                        "package/index.js": source.encode()})
        tarball_path = f"{name}/-/{name}-{version}.tgz"
        (site / name / "-").mkdir(parents=True, exist_ok=True)
        (site / tarball_path).write_bytes(tgz)
        integrity = "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()
        document = {
            "name": name,
            "dist-tags": {"latest": version},
            "modified": "1985-10-26T09:00:00.000Z",
            "versions": {version: {
                "name": name, "version": version, "license": "MIT", "dependencies": deps,
                "dist": {"tarball": f"https://{NPM_HOST}/{tarball_path}",
                         "shasum": hashlib.sha1(tgz).hexdigest(), "integrity": integrity},
            }},
        }
        text = json.dumps(document).encode()
        (site / name / "index.json").write_bytes(text)
        files[f"{name}/index.json"] = len(text)
        files[tarball_path] = len(tgz)
    direct = {npm_name(i): f"^{version}" for i in range(min(DIRECT, packages))}
    project = {"package.json": json.dumps({"name": "cagebench-project", "version": "0.0.0",
                                           "private": True, "dependencies": direct},
                                          indent=2) + "\n"}
    return Registry("npm", (NPM_HOST,), tuple(npm_name(i) for i in range(packages)), files, project)


# --- Python --------------------------------------------------------------------------------

def python_name(i: int) -> str:
    """The project name (normalized, PEP 503); its module and wheel use `_`."""
    return f"cagebench-{i:02d}"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(
        b"=").decode()


def _wheel(name: str, version: str, requires: list[str], source: str) -> tuple[str, bytes]:
    module = name.replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    metadata = "".join([f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
                        "Summary: a package of the fake index\n",
                        *[f"Requires-Dist: {r}\n" for r in requires]])
    wheel = ("Wheel-Version: 1.0\nGenerator: fakenet.packages\nRoot-Is-Purelib: true\n"
             "Tag: py3-none-any\n")
    members = {f"{module}/__init__.py": source.encode(),
               f"{dist_info}/METADATA": metadata.encode(),
               f"{dist_info}/WHEEL": wheel.encode()}
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n"
                     for path, data in members.items()) + f"{dist_info}/RECORD,,\n"
    members[f"{dist_info}/RECORD"] = record.encode()
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in members.items():
            info = zipfile.ZipInfo(path, date_time=(1985, 10, 26, 9, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return f"{module}-{version}-py3-none-any.whl", raw.getvalue()


def build_python_index(index_site: Path, files_site: Path, wheels: int = 40,
                       version: str = "1.0") -> Registry:
    """Write `wheels` wheels into `files_site` and their simple index into `index_site`."""
    needs = dependencies(wheels, direct=min(DIRECT // 2, wheels))
    files: dict[str, int] = {}
    for i in range(wheels):
        name = python_name(i)
        source = f"# {name}\nNAME = {name!r}\n'''\n{_filler(name, _size(i))}'''\n"
        filename, data = _wheel(name, version, [python_name(j) for j in needs[i]], source)
        digest = hashlib.sha256(data).hexdigest()
        path = f"packages/{digest[:2]}/{digest[2:4]}/{filename}"
        (files_site / path).parent.mkdir(parents=True, exist_ok=True)
        (files_site / path).write_bytes(data)
        files[path] = len(data)
        page = (f"<!DOCTYPE html>\n<html><body><h1>Links for {name}</h1>\n"
                f'<a href="https://{FILES_HOST}/{path}#sha256={digest}">{filename}</a><br/>\n'
                "</body></html>\n")
        (index_site / "simple" / name).mkdir(parents=True, exist_ok=True)
        (index_site / "simple" / name / "index.html").write_text(page)
        files[f"simple/{name}/index.html"] = len(page)
    direct = min(DIRECT // 2, wheels)
    project = {"requirements.txt": "".join(f"{python_name(i)}\n" for i in range(direct))}
    names = tuple(python_name(i) for i in range(wheels))
    return Registry("python", (INDEX_HOST, FILES_HOST), names, files, project)
