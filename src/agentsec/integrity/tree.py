"""The two trees of a change, and which files differ between them.

Two forms: two directories, or two commits of a git repository. A repository is read with git's
plumbing only (``cat-file --batch-check`` to resolve the refs, ``diff-tree`` for what differs,
``cat-file --batch`` for contents, ``ls-tree`` when every path is wanted): nothing is checked
out, no index is written (``GIT_OPTIONAL_LOCKS=0``), and the repository is never modified.

Only what differs is read by default: git's blob ids say which files changed without reading
them; directories are compared by size, then byte by byte. Every content read is capped at
``MAX_FILE_BYTES``; what lies beyond is never kept in memory.

Symbolic links and submodules are not followed: a link could point out of the tree, and a
submodule's content is another repository's.
"""

from __future__ import annotations

import contextlib
import filecmp
import os
import re
import subprocess
import threading
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal, Protocol

from agentsec.errors import AgentsecError
from agentsec.untrusted import clean_text

Side = Literal["before", "after"]
Status = Literal["added", "deleted", "modified"]

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_FILES = 200_000
GIT_TIMEOUT_S = 120
# Directories that hold no code of the project's own: tools' caches, installed dependencies.
SKIPPED_DIRS = frozenset(
    {".git", "node_modules", "__pycache__", ".venv", "venv", ".tox", ".nox", ".mypy_cache",
     ".pytest_cache", ".ruff_cache", ".hg", ".svn"}
)
_REF_UNSAFE = re.compile(r"[\x00-\x20\x7f]")
_GIT_FILE_MODES = ("100644", "100755")  # not 120000 (a link) or 160000 (a submodule)


class IntegrityInputError(AgentsecError):
    """The trees to compare cannot be read: a missing directory, not a repository, a bad ref."""


@dataclass(frozen=True)
class Changed:
    path: str  # relative, '/'-separated
    status: Status


@dataclass(frozen=True)
class Content:
    """A file's bytes as read (at most MAX_FILE_BYTES of them), and its whole size."""

    data: bytes
    size: int

    @property
    def truncated(self) -> bool:
        return self.size > len(self.data)


@dataclass(frozen=True)
class Location:
    """Where one side of the change comes from, as the report records it."""

    kind: Literal["directory", "git"]
    path: str
    ref: str | None = None
    commit: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        doc: dict[str, str | None] = {"kind": self.kind, "path": clean_text(self.path, 200)}
        if self.kind == "git":
            doc["ref"] = clean_text(self.ref or "", 200)
            doc["commit"] = self.commit
        return doc


class Trees(Protocol):
    """What the checks need of a change, whatever form it was given in."""

    before: Location
    after: Location

    def changes(self) -> list[Changed]: ...

    def read(self, wanted: Sequence[tuple[Side, str]]) -> dict[tuple[Side, str], Content]:
        """The contents of these (side, path) files; a path its side lacks is left out. One
        call reads both sides, so a repository is asked once."""
        ...

    def paths(self, side: Side) -> list[str]:
        """Every file on that side (read only when a check needs the whole tree)."""
        ...


# ---- two directories


def _walk(root: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        base = Path(folder)
        for name in files:
            full = base / name
            if full.is_symlink() or not full.is_file():
                continue  # links are not followed; sockets and fifos hold no code
            found[full.relative_to(root).as_posix()] = full
            if len(found) > MAX_FILES:
                raise IntegrityInputError(
                    f"{clean_text(str(root), 200)} holds more than {MAX_FILES} files"
                )
    return found


def _read_file(path: Path) -> Content:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
            size = os.fstat(handle.fileno()).st_size
    except OSError as exc:
        raise IntegrityInputError(
            f"cannot read {clean_text(str(path), 200)}: {exc.strerror or exc}"
        ) from None
    return Content(data[:MAX_FILE_BYTES], max(size, len(data)))


def _same_file(a: Path, b: Path) -> bool:
    try:
        return filecmp.cmp(a, b, shallow=False)
    except OSError as exc:
        raise IntegrityInputError(f"cannot read {clean_text(str(a), 200)}: {exc}") from None


class DirectoryTrees:
    def __init__(self, before: Path, after: Path) -> None:
        for path in (before, after):
            if not path.is_dir():
                raise IntegrityInputError(f"{clean_text(str(path), 200)} is not a directory")
        self.before = Location("directory", str(before))
        self.after = Location("directory", str(after))
        self._files: dict[Side, dict[str, Path]] = {"before": _walk(before), "after": _walk(after)}

    def changes(self) -> list[Changed]:
        old, new = self._files["before"], self._files["after"]
        found = [Changed(p, "deleted") for p in old if p not in new]
        found += [Changed(p, "added") for p in new if p not in old]
        for path in old.keys() & new.keys():
            a, b = old[path], new[path]
            if a.stat().st_size != b.stat().st_size or not _same_file(a, b):
                found.append(Changed(path, "modified"))
        return sorted(found, key=lambda c: c.path)

    def read(self, wanted: Sequence[tuple[Side, str]]) -> dict[tuple[Side, str], Content]:
        return {(side, path): _read_file(self._files[side][path]) for side, path in wanted
                if path in self._files[side]}

    def paths(self, side: Side) -> list[str]:
        return sorted(self._files[side])


# ---- two commits of a repository


def _git_env() -> dict[str, str]:
    # The caller's GIT_DIR, GIT_INDEX_FILE or GIT_WORK_TREE would point git elsewhere; optional
    # locks off keeps even read-only commands from refreshing the index.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    return env


def check_ref(ref: str) -> str:
    """A ref as the user gave it, refused when git could read it as an option or when it could
    break the line protocol of ``cat-file --batch-check``."""
    shown = clean_text(ref, 80)
    if not ref or len(ref) > 255:
        raise IntegrityInputError(f"ref {shown!r}: empty or longer than 255 characters")
    if ref.startswith("-") or _REF_UNSAFE.search(ref):
        raise IntegrityInputError(f"ref {shown!r}: starts with '-' or holds spaces or controls")
    return ref


class GitTrees:
    def __init__(self, repo: Path, ref_before: str, ref_after: str) -> None:
        if not repo.is_dir():
            raise IntegrityInputError(f"{clean_text(str(repo), 200)} is not a directory")
        self._repo = repo
        self._env = _git_env()
        refs = [check_ref(ref_before), check_ref(ref_after)]
        # One reader resolves the refs, then reads the first contents: a git less to start.
        self._reader: subprocess.Popen[bytes] | None = self._start_reader()
        weakref.finalize(self, _reap, self._reader)  # not used after all: ended, not left
        commits = self._resolve(refs)
        self.before = Location("git", str(repo), ref_before, commits[0])
        self.after = Location("git", str(repo), ref_after, commits[1])
        self._blobs: dict[Side, dict[str, str]] = {"before": {}, "after": {}}
        self._listed: dict[Side, bool] = {"before": False, "after": False}

    def _run(self, args: list[str], check: bool = True) -> bytes:
        """A git command's output. Bounded by a watchdog that ends git after GIT_TIMEOUT_S,
        rather than by ``subprocess.run``'s timeout, whose wait polls and sleeps between
        looks once the output is read."""
        try:
            proc = subprocess.Popen(
                ["git", "--no-pager", "-C", str(self._repo), *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._env,
            )
        except FileNotFoundError:
            raise IntegrityInputError("git is not installed (needed for --repo)") from None
        ended = threading.Event()

        def end() -> None:
            ended.set()
            proc.kill()

        watchdog = threading.Timer(GIT_TIMEOUT_S, end)
        watchdog.start()
        try:
            out, err = proc.communicate()
        finally:
            watchdog.cancel()
        if ended.is_set():
            raise IntegrityInputError(f"git {args[0]} took longer than {GIT_TIMEOUT_S} s")
        if check and proc.returncode != 0:
            why = err.decode("utf-8", "replace").strip().splitlines()
            detail = clean_text(why[-1], 200) if why else f"exit {proc.returncode}"
            raise IntegrityInputError(f"git {args[0]} failed: {detail}")
        return out

    def _resolve(self, refs: list[str]) -> list[str]:
        """Each ref's commit, asked of the reader one ref a line (``check_ref`` keeps a ref
        from breaking the line protocol)."""
        reader = self._reader
        assert reader is not None and reader.stdin is not None and reader.stdout is not None
        try:
            reader.stdin.write("".join(f"{ref}^{{commit}}\n" for ref in refs).encode())
            reader.stdin.flush()
        except OSError:
            pass  # git went away at once: what it said is read below
        commits: list[str] = []
        for ref in refs:
            fields = reader.stdout.readline().split()
            if not fields:
                self._reader = None
                raise self._reader_failed(reader)
            if len(fields) != 3 or fields[1] != b"commit":
                raise IntegrityInputError(
                    f"ref {clean_text(ref, 80)!r}: no such commit in "
                    f"{clean_text(str(self._repo), 200)}"
                )
            reader.stdout.read(int(fields[2]) + 1)  # the commit object, and its newline
            commits.append(fields[0].decode("ascii"))
        return commits

    def _reader_failed(self, reader: subprocess.Popen[bytes]) -> IntegrityInputError:
        """Why the reader stopped before answering, in one line."""
        assert reader.stderr is not None
        try:
            reader.wait(GIT_TIMEOUT_S)
            said = reader.stderr.read().decode("utf-8", "replace").strip().splitlines()
        except (OSError, subprocess.TimeoutExpired):
            said = []
        _reap(reader)
        if any("not a git repository" in line for line in said):
            return IntegrityInputError(
                f"{clean_text(str(self._repo), 200)} is not a git repository")
        detail = clean_text(said[-1], 200) if said else f"exit {reader.returncode}"
        return IntegrityInputError(f"git cat-file failed: {detail}")

    def changes(self) -> list[Changed]:
        assert self.before.commit and self.after.commit
        out = self._run(
            ["diff-tree", "-r", "-z", "--no-renames", self.before.commit, self.after.commit]
        )
        parts = out.split(b"\0")
        found: list[Changed] = []
        for head, raw_path in zip(parts[0::2], parts[1::2]):
            fields = head.decode("ascii", "replace").lstrip(":").split()
            if len(fields) != 5:
                continue
            mode_a, mode_b, sha_a, sha_b, _ = fields
            path = raw_path.decode("utf-8", "surrogateescape")
            had, has = mode_a in _GIT_FILE_MODES, mode_b in _GIT_FILE_MODES
            if had:
                self._blobs["before"][path] = sha_a
            if has:
                self._blobs["after"][path] = sha_b
            if had and has:
                found.append(Changed(path, "modified"))
            elif had or has:
                found.append(Changed(path, "added" if has else "deleted"))
        return sorted(found, key=lambda c: c.path)

    def _list(self, side: Side) -> None:
        if self._listed[side]:
            return
        commit = self.before.commit if side == "before" else self.after.commit
        assert commit
        out = self._run(["ls-tree", "-r", "-z", "--full-tree", commit])
        blobs = self._blobs[side]
        for entry in out.split(b"\0"):
            head, _, raw_path = entry.partition(b"\t")
            fields = head.split()
            if len(fields) == 3 and fields[0].decode() in _GIT_FILE_MODES:
                blobs[raw_path.decode("utf-8", "surrogateescape")] = fields[2].decode()
        self._listed[side] = True

    def paths(self, side: Side) -> list[str]:
        self._list(side)
        return sorted(self._blobs[side])

    def read(self, wanted: Sequence[tuple[Side, str]]) -> dict[tuple[Side, str], Content]:
        for side in {side for side, path in wanted if path not in self._blobs[side]}:
            self._list(side)
        known = [(key, self._blobs[key[0]][key[1]]) for key in wanted
                 if key[1] in self._blobs[key[0]]]
        contents = self._cat([sha for _, sha in known])
        return {key: contents[sha] for key, sha in known if sha in contents}

    def _start_reader(self) -> subprocess.Popen[bytes]:
        try:
            return subprocess.Popen(
                ["git", "--no-pager", "-C", str(self._repo), "cat-file", "--batch"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,  # read only when it stops early: a line or two
                env=self._env,
            )
        except FileNotFoundError:
            raise IntegrityInputError("git is not installed (needed for --repo)") from None

    def _cat(self, shas: Iterable[str]) -> dict[str, Content]:
        """Blob contents by id, from one ``git cat-file --batch``: ids are written by a thread
        while this one reads, so neither pipe can fill and stall the other."""
        unique = list(dict.fromkeys(shas))
        if not unique:
            return {}
        proc, self._reader = self._reader or self._start_reader(), None
        assert proc.stdin is not None and proc.stdout is not None
        writer = threading.Thread(target=_write_ids, args=(proc.stdin, unique), daemon=True)
        writer.start()
        found: dict[str, Content] = {}
        drained = False
        try:
            for sha in unique:
                content = _read_batch_entry(proc.stdout)
                if content is not None:
                    found[sha] = content
            drained = proc.stdout.read() == b""  # its output ended: git is exiting
        finally:
            proc.stdout.close()
            writer.join(GIT_TIMEOUT_S)
            # A wait with a timeout polls, sleeping between looks; git that has ended its
            # output needs none.
            if drained:
                proc.wait()
            else:
                proc.wait(GIT_TIMEOUT_S)
            if proc.stderr is not None:
                proc.stderr.close()
        return found


def _reap(proc: subprocess.Popen[bytes] | None) -> None:
    """End a reader no one used: with its input closed, cat-file exits at once. Its pipes are
    closed even when it has ended already: what its input still buffers (written after git
    went away) would otherwise be flushed at exit, into a broken pipe."""
    if proc is None:
        return
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.close()
    if proc.returncode is not None:
        return
    try:
        proc.wait(GIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _write_ids(stdin: IO[bytes], shas: list[str]) -> None:
    try:
        stdin.write("".join(f"{sha}\n" for sha in shas).encode())
        stdin.close()
    except OSError:  # git went away; the reader reports what it got
        pass


def _read_batch_entry(stdout: IO[bytes]) -> Content | None:
    header = stdout.readline().split()
    if len(header) != 3:
        if not header:
            raise IntegrityInputError("git cat-file stopped before every blob was read")
        return None  # "<id> missing"
    size = int(header[2])
    data = stdout.read(min(size, MAX_FILE_BYTES))
    left = size - len(data)
    while left > 0:  # past the cap: read and drop
        chunk = stdout.read(min(left, 1 << 20))
        if not chunk:
            break
        left -= len(chunk)
    stdout.read(1)  # the newline after each entry
    return Content(data, size)


def open_trees(before: str, after: str, repo: Path | None) -> Trees:
    """The change as given on the command line: two directories, or two refs of ``repo``."""
    if repo is None:
        return DirectoryTrees(Path(before), Path(after))
    return GitTrees(repo, before, after)
