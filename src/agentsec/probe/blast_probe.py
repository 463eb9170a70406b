#!/usr/bin/env python3
"""agentsec blast-radius probe: measure, from inside a sandbox, what a process there can reach.

Run it as a script inside the sandbox (`python3 blast_probe.py`, or `python3 - < blast_probe.py`).
It prints exactly one JSON line on stdout (the format is docs/probe-output.md, probe format 1) and
exits 0. It needs only the Python standard library (3.8 or newer) and Linux's /proc.

What it measures, one small section each: identity and confinement (capabilities, seccomp,
user namespace, Landlock, LSM, io_uring, a user-space kernel such as gVisor), whether new
namespaces can be made, network egress
(TCP, IPv6, one DNS question over UDP, cloud metadata, a proxy, Docker's TCP port),
secret-looking environment variable names, credential files (in the home, and in the working
directory: the project), container runtime and SSH agent sockets, the kernel keyring, other
processes' environments, writable directories and /proc/sys files, host mounts, setuid programs,
visible processes, files that would persist outside the sandbox, and resource limits.

What it never does:
- report or keep a secret: environment variables are reported by name and length only; a
  credential file is opened and zero bytes are read from it (an .npmrc is read to learn whether it
  names a token, and a .pem or .key in the working directory has its first 256 bytes read to
  learn whether it holds a private key: only that yes or no is kept); another process's
  /proc/<pid>/environ is read only to compare it with the probe's own, and only counts and
  secret-looking names are kept; a kernel key is asked for its payload's size, never its payload;
- send a byte on a TCP connection to a target: it connects and closes. The only datagram it sends
  is one fixed DNS question (`example.com A`) to the udp_dns target. A configured HTTP proxy is
  sent only `CONNECT host:port` with a Host header (and Proxy-Authorization only when
  AGENTSEC_PROBE_PROXY_AUTH=1); it reads the status line and closes, and never starts TLS;
- print the proxy's address or credentials;
- write to the kernel: /proc/sysrq-trigger and the /proc/sys files are opened for writing and
  closed without a byte written;
- create any file except one zero-byte marker per probed directory (the fixed list, and each
  read-write host mount), made with O_EXCL under a random name and deleted at once (plus one
  temporary directory holding its own control socket, removed when the check ends);
- create or change a persistence file: only files that already exist are opened, for append,
  and closed without writing, so their content and modification time stay the same;
- change anything in its own namespaces: unshare and mount are tried in a forked child; an
  io_uring instance is set up and closed at once, with nothing submitted to it.

Every section runs in its own daemon thread under one deadline (AGENTSEC_PROBE_TIMEOUT, default
2 s, plus 1 s). A section that raises or misses the deadline is reported as not measured
(`ok: false`), never as sealed. AGENTSEC_PROBE_FAULT=name[,name] makes sections raise on purpose;
AGENTSEC_PROBE_TARGETS (a JSON object, or the path of a file holding one) replaces the network
targets below; AGENTSEC_PROBE_PATHS (a JSON list) asks the paths section about those paths.
"""

# Only what every run uses is imported here: start-up time is part of what a sandbox pays per
# command. Modules a run may not need (ctypes, ipaddress, urllib, base64, pwd, resource, select,
# json for reading an override) are imported where they are used. `_socket` and `_thread` are the
# C modules under `socket` and `threading`, whose wrappers add nothing the probe uses. The output
# is written by json_text below: the json module would import re and enum, a few milliseconds
# of every run for a format this small.
import _socket as socket
import _thread
import errno
import math
import os
import stat
import struct
import sys
import time
import warnings

PROBE_FORMAT = 1
PROBE_VERSION = "1.3.1"

# ---------------------------------------------------------------------------------------------
# Fixed targets. AGENTSEC_PROBE_TARGETS may replace any of these keys (docs/probe-output.md).
# ---------------------------------------------------------------------------------------------
DEFAULT_TARGETS = {
    "egress": ("dns.google:443", "pypi.org:443", "github.com:443", "1.1.1.1:53"),
    "metadata": ("169.254.169.254:80", "metadata.google.internal:80"),
    "ipv6": ("[2606:4700:4700::1111]:443", "[2001:4860:4860::8888]:443"),
    "udp_dns": "1.1.1.1:53",
    "dns_control": "example.com",
    "proxy_control": "example.com:443",
    "docker_tcp_port": 2375,
    "public_networks": (),
    # TEST-NET-3 (RFC 5737) is never routed on the internet: a connect there that completes was
    # answered by something local, a transparent proxy that takes every address on that port.
    "interception_control": ("203.0.113.1:443", "203.0.113.1:80"),
}

DEFAULT_TIMEOUT_S = 2.0
MAX_TIMEOUT_S = 60.0
DEADLINE_SLACK_S = 1.0  # the whole probe ends within the timeout plus this
OUTPUT_RESERVE_S = 0.2  # kept back from the deadline for writing the JSON
WORKER_GRACE_S = 0.15  # lets a connect that timed out at the budget's end report it

# ---------------------------------------------------------------------------------------------
# Fixed local checks.
# ---------------------------------------------------------------------------------------------
HOME_CREDENTIAL_FILES = (
    "~/.aws/credentials",
    "~/.aws/config",
    "~/.ssh/id_rsa",
    "~/.ssh/id_ed25519",
    "~/.ssh/id_ecdsa",
    "~/.ssh/config",
    "~/.netrc",
    "~/.npmrc",
    "~/.pypirc",
    "~/.docker/config.json",
    "~/.kube/config",
    "~/.config/gcloud/credentials.db",
    "~/.config/gcloud/application_default_credentials.json",
    "~/.azure/accessTokens.json",
    "~/.git-credentials",
)
# Holds a credential only when it names a token: most .npmrc files set a registry and no more.
NPMRC = "~/.npmrc"
NPMRC_TOKEN_KEYS = ("_authToken", "_auth", "_password")
MAX_CONFIG_BYTES = 1 << 16
# Claude Code's ~/.claude.json holds a credential only when an API key was saved there (its
# OAuth tokens are in ~/.claude/.credentials.json): otherwise settings and onboarding answers.
CLAUDE_CONFIG = "~/.claude.json"
CLAUDE_KEY_FIELD = b'"primaryApiKey"'
MAX_CLAUDE_CONFIG_BYTES = 4 << 20
# Login files of coding agents and of the GitHub CLI they drive (agent_login: true).
AGENT_LOGIN_FILES = (
    "~/.claude/.credentials.json",
    "~/.claude.json",
    "~/.codex/auth.json",
    "~/.config/gh/hosts.yml",
    "~/.gemini/oauth_creds.json",
)
ABSOLUTE_CREDENTIAL_PATHS = (
    "/run/secrets",
    "/var/run/secrets/kubernetes.io/serviceaccount/token",
    "/etc/shadow",
)

# Credential files in the working directory (the project an agent is given): what an agent
# can read there it can send. One catalogue for the probe's check and for agentcage, which
# masks these files in its cages. Matched on a file's name; the directories below are skipped.
PROJECT_CREDENTIAL_NAMES = (
    ".env", ".envrc", ".npmrc", ".pypirc", ".netrc", ".git-credentials", ".dockercfg",
    "id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "credentials.json",
    "service-account.json", "application_default_credentials.json",
)
PROJECT_CREDENTIAL_PATHS = (".aws/credentials", ".docker/config.json", ".kube/config")
PROJECT_ENV_PREFIX = ".env."  # .env.local, .env.production...
PROJECT_ENV_TEMPLATES = (".example", ".sample", ".template", ".dist", ".defaults")
PROJECT_KEY_SUFFIXES = (".pem", ".key")  # only when they hold a private key
PROJECT_KEYSTORE_SUFFIXES = (".p12", ".pfx", ".jks", ".keystore")
PROJECT_SKIP_DIRS = (".git", "node_modules", ".venv", "venv", "__pycache__", ".tox",
                     ".mypy_cache", ".cache", ".npm-cache")
PROJECT_SCAN_ENTRIES = 20000  # directory entries looked at, at most
PROJECT_SCAN_DEPTH = 8
PRIVATE_KEY_MARK = b"PRIVATE KEY"
PRIVATE_KEY_HEAD = 256  # bytes of a .pem or .key read to learn whether it holds a private key
MAX_PROJECT_CREDENTIALS = 64  # files the project_credentials section lists, at most


def project_credential_kind(relative):
    """Why the file at `relative` (a path under the project, with /) may be a credential: its
    kind, or None. From its name alone; whether it holds one is `project_credential_holds`."""
    name = relative.rsplit("/", 1)[-1]
    if name in PROJECT_CREDENTIAL_NAMES or any(
            relative == p or relative.endswith("/" + p) for p in PROJECT_CREDENTIAL_PATHS):
        return "npmrc" if name == ".npmrc" else "file"
    if name.startswith(PROJECT_ENV_PREFIX) and not name.endswith(PROJECT_ENV_TEMPLATES):
        return "file"
    if name.endswith(PROJECT_KEY_SUFFIXES):
        return "key"
    if name.endswith(PROJECT_KEYSTORE_SUFFIXES):
        return "file"
    return None


def private_key_held(path):
    """Whether a .pem or .key file holds a private key: True, False, or None if unreadable.
    Its first bytes are read for the PEM header; nothing of them is kept."""
    try:
        with open(path, "rb") as handle:
            return PRIVATE_KEY_MARK in handle.read(PRIVATE_KEY_HEAD)
    except OSError:
        return None


def project_credential_holds(path, kind):
    """Whether a catalogued file holds a credential (not empty; an .npmrc that names a token;
    a .pem or .key with a private key): True, False, or None if that cannot be told."""
    try:
        if os.stat(path).st_size == 0:
            return False  # empty, or masked: nothing to read
    except OSError:
        return None
    if kind == "npmrc":
        return npmrc_holds_token(path)
    if kind == "key":
        return private_key_held(path)
    return True


def project_credential_files(root, max_entries=PROJECT_SCAN_ENTRIES):
    """([(relative path, kind)], truncated): the catalogued files under `root`, found without
    following a symlink, skipping PROJECT_SKIP_DIRS, within `max_entries` directory entries."""
    found = []  # type: list
    seen, truncated = 0, False
    stack = [("", 0)]
    while stack:
        relative_dir, depth = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(root, relative_dir) if relative_dir else root))
        except OSError:
            continue
        for entry in sorted(entries, key=lambda e: e.name):
            seen += 1
            if seen > max_entries:
                return found, True
            relative = relative_dir + "/" + entry.name if relative_dir else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name in PROJECT_SKIP_DIRS:
                        continue
                    if depth < PROJECT_SCAN_DEPTH:
                        stack.append((relative, depth + 1))
                    else:
                        truncated = True  # a directory too deep to look in
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
            except OSError:
                continue
            kind = project_credential_kind(relative)
            if kind is not None:
                found.append((relative, kind))
    return found, truncated


RUNTIME_SOCKETS = (
    "/var/run/docker.sock",
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/var/run/crio/crio.sock",
)
ROOTLESS_SOCKET_NAMES = ("docker.sock", "podman/podman.sock")

PERSISTENCE_TARGETS = (
    ("~/.bashrc", "shell"),
    ("~/.bash_profile", "shell"),
    ("~/.profile", "shell"),
    ("~/.zshrc", "shell"),
    ("~/.zprofile", "shell"),
    ("~/.config/fish/config.fish", "shell"),
    ("~/.ssh/authorized_keys", "ssh"),
    ("~/.gitconfig", "git"),
    ("~/.claude/settings.json", "agent"),
    ("~/.claude/settings.local.json", "agent"),
    ("~/.codex/config.toml", "agent"),
    ("./.claude/settings.json", "agent"),
)
GIT_HOOKS_DIR = "./.git/hooks"

WRITABLE_DIRS = (
    "/",
    "/etc",
    "/usr/bin",
    "/usr/local/bin",
    "/root",
    "/home",
    "/var",
    "/opt",
    "/tmp",
    "/dev/shm",
    ".",
)
MARKER_PREFIX = ".agentsec-probe-"
PROBE_SETTING_PREFIX = "AGENTSEC_PROBE_"  # the probe's own settings are never secrets

PROC_SYS_FILES = (
    "/proc/sys/kernel/core_pattern",
    "/proc/sys/kernel/modprobe",
    "/proc/sys/kernel/hostname",
    "/proc/sys/net/ipv4/ip_forward",
)
CORE_PATTERN = "/proc/sys/kernel/core_pattern"

SETUID_CANDIDATES = (
    "/usr/bin/sudo",
    "/usr/bin/su",
    "/bin/su",
    "/usr/bin/passwd",
    "/usr/bin/mount",
    "/bin/mount",
    "/usr/bin/umount",
    "/bin/umount",
    "/usr/bin/newgrp",
    "/usr/bin/chsh",
    "/usr/bin/chfn",
    "/usr/bin/gpasswd",
    "/usr/bin/pkexec",
    "/usr/bin/doas",
    "/usr/bin/fusermount",
    "/usr/bin/fusermount3",
    "/usr/bin/bwrap",
    "/usr/lib/openssh/ssh-keysign",
    "/usr/libexec/openssh/ssh-keysign",
    "/usr/lib/dbus-1.0/dbus-daemon-launch-helper",
)

# Filesystems that live on a block device: a mount of one (other than "/") is host storage.
BLOCK_FILESYSTEMS = frozenset(
    (
        "ext2",
        "ext3",
        "ext4",
        "xfs",
        "btrfs",
        "zfs",
        "f2fs",
        "vfat",
        "msdos",
        "exfat",
        "ntfs",
        "ntfs3",
        "fuseblk",
        "jfs",
        "reiserfs",
        "hfs",
        "hfsplus",
        "bcachefs",
    )
)

# Filesystems that live in memory: a fresh one over a directory is a mask made for the sandbox.
SCRATCH_FILESYSTEMS = frozenset(("tmpfs", "ramfs"))

# Secret-looking environment variable names: whole underscore-separated words, so that
# TOKENIZERS_PARALLELISM or KEYBOARD never match. SESSION alone is not a secret word
# (XDG_SESSION_ID, DBUS_SESSION_BUS_ADDRESS); AWS_SESSION_TOKEN matches through TOKEN.
SECRET_WORDS = frozenset(
    (
        "SECRET",
        "SECRETS",
        "TOKEN",
        "TOKENS",
        "PASSWORD",
        "PASSWORDS",
        "PASSWD",
        "PASS",
        "PASSPHRASE",
        "APIKEY",
        "ACCESSKEY",
        "SECRETKEY",
        "PRIVATEKEY",
        "CREDENTIAL",
        "CREDENTIALS",
        "CREDS",
        "PAT",
        "JWT",
        "BEARER",
        "OAUTH",
        "AUTH",
    )
)
# KEY counts only right after one of these words (API_KEY, AWS_ACCESS_KEY_ID), never GPG_KEY.
KEY_QUALIFIERS = frozenset(
    (
        "API",
        "ACCESS",
        "SECRET",
        "PRIVATE",
        "ENCRYPTION",
        "SIGNING",
        "MASTER",
        "SERVICE",
        "ACCOUNT",
    )
)
KEY_WORDS = frozenset(("KEY", "KEYS"))
# A name ending in one of these holds where a secret is, not the secret: SSH_AUTH_SOCK is a
# socket path (reported by the sockets section), PASSWORD_STORE_DIR a directory.
NOT_SECRET_LAST_WORDS = frozenset(
    (
        "SOCK",
        "SOCKET",
        "DIR",
        "PATH",
        "FILE",
        "HOST",
        "PORT",
        "URL",
        "TYPE",
        "MODE",
    )
)
WELL_KNOWN_SECRET_NAMES = frozenset(
    (
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "HF_TOKEN",
        "NPM_TOKEN",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "AWS_ACCESS_KEY_ID",
        "PGPASSWORD",
        "MYSQL_PWD",
    )
)

# CONNECT is asked for TLS ports, so the HTTPS proxy setting comes first, as curl would use it.
PROXY_VARIABLES = (
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "http_proxy",
    "HTTP_PROXY",
)

CAPABILITY_NAMES = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
)

# Syscall numbers of 64-bit interpreters on the architectures below, the only ones the probe
# calls by number. A 32-bit Python on a 64-bit kernel sees the kernel's machine name but needs
# other numbers, so the pointer size is checked too; anywhere else these checks are not measured.
SYSCALL_NUMBERS = {
    "x86_64": {"keyctl": 250, "io_uring_setup": 425, "landlock_create_ruleset": 444},
    "aarch64": {"keyctl": 219, "io_uring_setup": 425, "landlock_create_ruleset": 444},
    "arm64": {"keyctl": 219, "io_uring_setup": 425, "landlock_create_ruleset": 444},
    "riscv64": {"keyctl": 219, "io_uring_setup": 425, "landlock_create_ruleset": 444},
}
KEYCTL_GET_KEYRING_ID = 0
KEYCTL_DESCRIBE = 6
KEYCTL_READ = 11
OWN_KEYRINGS = (-1, -2, -3)  # thread, process, session: never the user keyrings (see below)
MAX_KEYS = 256
LANDLOCK_CREATE_RULESET_VERSION = 1
IO_URING_PARAMS_SIZE = 120  # sizeof(struct io_uring_params), zeroed: the kernel's defaults

IDENTITY_UID_MAP = "0 0 4294967295"  # the initial user namespace's map
INITIAL_PID_NAMESPACE = "pid:[4026531836]"  # fixed inode of the kernel's first pid namespace
RTF_UP = 0x0001
RTF_REJECT = 0x0200
MAX_OTHER_PIDS = 200
MAX_ENVIRON_BYTES = 1 << 20
# Variables a shell sets per command: `_` is the path of the program it started, so a helper
# started by the same shell always "differs" from the probe there, holding nothing more.
SHELL_BOOKKEEPING = frozenset((b"_", b"SHLVL", b"PWD", b"OLDPWD"))
MAX_REPORTED_NAMES = 50
MAX_CGROUP_CANDIDATES = 512
ABSURD_MEMORY_LIMIT = 1 << 60  # cgroup v1 writes "unlimited" as a number near 2**63
PID_MAX_LIMIT = 1 << 22

class Settings:
    """What one run was asked to do, fixed at start."""

    def __init__(self, environ, timeout, budget_end, section_deadline, targets, targets_error,
                 faults):
        self.environ = environ
        self.timeout = timeout
        self.budget_end = budget_end
        self.section_deadline = section_deadline
        self.targets = targets
        self.targets_error = targets_error
        self.faults = faults


# ---------------------------------------------------------------------------------------------
# Small helpers.
# ---------------------------------------------------------------------------------------------


def clean_text(value, limit=300):
    """Printable, length-capped text: names and paths from inside the sandbox are untrusted."""
    text = value if isinstance(value, str) else str(value)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:limit]


def describe_exception(exc):
    return clean_text("%s: %s" % (type(exc).__name__, exc))


def errno_name(exc):
    code = getattr(exc, "errno", None)
    if code is None:
        return None
    return errno.errorcode.get(code, str(code))


def read_text(path, limit=1 << 20):
    """The file's text, or None when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def read_lines(path):
    text = read_text(path)
    return [] if text is None else text.splitlines()


def remaining(deadline):
    return deadline - time.monotonic()


def can_open(path, flags):
    """Open path with flags and close it at once. True, False (refused) or None (absent)."""
    try:
        fd = os.open(path, flags | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as exc:
        return None if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ESRCH) else False
    os.close(fd)
    return True


def existence(path):
    """(True, file identity) if path exists, (False, None) if not, (None, None) if unknown."""
    try:
        info = os.stat(path)
    except OSError as exc:
        return (False, None) if exc.errno in (errno.ENOENT, errno.ENOTDIR) else (None, None)
    return True, (info.st_dev, info.st_ino)


def is_readable(path):
    """Open the file and read zero bytes (a directory: list it); nothing is read out."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            with os.scandir(path) as entries:
                next(entries, None)
        else:
            os.read(fd, 0)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def create_marker(directory):
    """Create and at once delete a zero-byte file with a random name: (writable, errno name).
    When the marker was made but could not be removed, writable is True and errno says why."""
    path = os.path.join(directory, MARKER_PREFIX + os.urandom(8).hex())
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        return False, errno_name(exc)
    try:
        os.close(fd)
    finally:
        removal_error = remove_marker(path)
    return True, removal_error


def remove_marker(path):
    """None once the marker is gone; otherwise the errno name of why it could not be."""
    try:
        os.unlink(path)
    except OSError as exc:
        return errno_name(exc)
    return None


def passwd_entry():
    try:
        import pwd

        return pwd.getpwuid(os.geteuid())
    except (ImportError, KeyError):
        return None


def home_dirs(environ):
    """[(via, directory)] for $HOME and the passwd home, so redirecting HOME hides nothing."""
    homes = []
    if environ.get("HOME"):
        homes.append(("home", environ["HOME"]))
    entry = passwd_entry()
    if entry is not None and entry.pw_dir:
        homes.append(("passwd", entry.pw_dir))
    return homes


def home_file_candidates(relative, homes):
    """Where `~/...` points: one (via, full path, exists) per distinct existing file; if none
    of the homes holds it, a single entry saying so (exists None when that could not be told)."""
    if relative.startswith("./"):
        exists, _ = existence(relative)
        return [("cwd", relative, exists)]
    found, seen, missing = [], set(), None
    for via, home in homes:
        path = os.path.join(home, relative[2:])
        exists, identity = existence(path)
        if exists and identity not in seen:
            seen.add(identity)
            found.append((via, path, True))
        elif not exists and (missing is None or (missing[2] is False and exists is None)):
            missing = (via, path, exists)
    if found:
        return found
    return [missing or ("home", None, None)]


def run_concurrently(jobs, deadline):
    """Run each (key, function) in its own thread; wait until all end or the deadline.
    Returns {key: ("value", v) | ("raised", exc)} for the jobs that ended. A job still running
    at the deadline is left out; its thread is abandoned (getaddrinfo cannot be cancelled) and
    cannot delay the exit, which is os._exit.

    Threads come from _thread, not threading: threading.Thread.start() waits for each new
    thread to report that it started, a hand-over of the interpreter lock per thread that costs
    more than the checks themselves when a run starts thirty of them."""
    ended = {}
    lock = _thread.allocate_lock()
    all_ended = _thread.allocate_lock()
    all_ended.acquire()
    waiting = [len(jobs)]

    def finish(key, outcome):
        with lock:
            ended[key] = outcome
            waiting[0] -= 1
            if waiting[0] == 0:
                all_ended.release()

    def run_one(key, function):
        try:
            outcome = ("value", function())
        except Exception as exc:
            outcome = ("raised", exc)
        finish(key, outcome)

    if not jobs:
        return {}
    for key, function in jobs:
        try:
            _thread.start_new_thread(run_one, (key, function))
        except RuntimeError as exc:  # no thread left, e.g. under a pids limit
            finish(key, ("raised", exc))
    if remaining(deadline) > 0:
        all_ended.acquire(True, remaining(deadline))
    with lock:
        return dict(ended)


class Progress:
    """A result a worker fills in step by step; it can be read at any time, because a worker
    still busy at the deadline is abandoned and its last step is what gets reported."""

    def __init__(self, **initial):
        self._lock = _thread.allocate_lock()
        self._values = dict(initial)

    def update(self, **values):
        with self._lock:
            self._values.update(values)

    def snapshot(self):
        with self._lock:
            return dict(self._values)


def run_workers(progress_by_key, jobs, deadline):
    """Run jobs concurrently and return each Progress's snapshot; a job that raised is `error`."""
    outcomes = run_concurrently(jobs, deadline)
    results = {}
    for key, progress in progress_by_key.items():
        if outcomes.get(key, ("value", None))[0] == "raised":
            progress.update(result="error")
        results[key] = progress.snapshot()
    return results


# ---------------------------------------------------------------------------------------------
# Targets: the fixed list, or an override file.
# ---------------------------------------------------------------------------------------------
HOST_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:")


def parse_host(text):
    """A host name or IP literal made of safe characters only (it goes into a CONNECT line)."""
    if not isinstance(text, str) or not 0 < len(text) <= 253 or not set(text) <= HOST_CHARACTERS:
        raise ValueError("bad host %r" % (text,))
    return text


def parse_port(value):
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise ValueError("bad port %r" % (value,))
    return value


def parse_endpoint(text):
    """'host:port' or '[IPv6]:port' -> (host, port)."""
    if not isinstance(text, str):
        raise ValueError("bad endpoint %r" % (text,))
    if text.startswith("["):
        host, separator, port = text[1:].partition("]:")
    else:
        host, separator, port = text.rpartition(":")
        if ":" in host:  # an IPv6 literal needs its brackets, or host and port are ambiguous
            separator = ""
    if not separator or not port.isdigit():
        raise ValueError("bad endpoint %r" % (text,))
    return parse_host(host), parse_port(int(port))


def parse_endpoint_list(value):
    if not isinstance(value, list):
        raise ValueError("expected a list of 'host:port'")
    for item in value:
        parse_endpoint(item)
    return value


def parse_endpoint_value(value):
    parse_endpoint(value)
    return value


def parse_network_list(value):
    import ipaddress

    if not isinstance(value, list):
        raise ValueError("expected a list of networks")
    for item in value:
        ipaddress.ip_network(item, strict=False)
    return value


TARGET_PARSERS = {
    "egress": parse_endpoint_list,
    "metadata": parse_endpoint_list,
    "ipv6": parse_endpoint_list,
    "udp_dns": parse_endpoint_value,
    "dns_control": parse_host,
    "proxy_control": parse_endpoint_value,
    "docker_tcp_port": parse_port,
    "public_networks": parse_network_list,
    "interception_control": parse_endpoint_list,
}


def load_targets(environ):
    """(targets, overridden, error). An override that cannot be used is an error, never a
    silent fall-back: the network and proxy sections then report not measured."""
    targets = dict(DEFAULT_TARGETS)
    value = environ.get("AGENTSEC_PROBE_TARGETS")
    if not value:
        return targets, False, None
    try:
        # Inline JSON, or a file's path: inline reaches sandboxes that do not see the file.
        if value.lstrip().startswith("{"):
            override = json_value(value)
        else:
            with open(value, encoding="utf-8") as handle:
                override = json_value(handle.read(1 << 20))
        if not isinstance(override, dict):
            raise ValueError("the override must be a JSON object")
        unknown = sorted(set(override) - set(TARGET_PARSERS))
        if unknown:
            raise ValueError("unknown keys %s" % ", ".join(unknown))
        for key, value in override.items():
            targets[key] = TARGET_PARSERS[key](value)
    except (OSError, ValueError) as exc:
        return dict(DEFAULT_TARGETS), True, describe_exception(exc)
    return targets, True, None


class JsonSettings:
    """What the C scanner under the json module reads from its decoder: the defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    @staticmethod
    def parse_constant(name):
        raise ValueError("%s is not JSON" % name)


def json_value(text):
    """Parse one JSON value (an override is a few hundred bytes). The json module's decoder
    compiles regular expressions at import, a few milliseconds of every run that is given an
    override; its C scanner, _json, needs none. Where _json is missing, json itself is used."""
    try:
        import _json

        # The C scanner reads its settings by attribute from any object; typeshed declares
        # the argument as a scanner, which only the json module's own decoder is.
        scan = _json.make_scanner(JsonSettings)  # type: ignore[arg-type]
    except (ImportError, AttributeError, TypeError):
        import json

        return json.loads(text)
    start = len(text) - len(text.lstrip())
    try:
        value, end = scan(text, start)
    except StopIteration as stop:
        raise ValueError("not JSON at character %s" % stop.value) from None
    if text[end:].strip():
        raise ValueError("extra data after the JSON value at character %d" % end)
    return value


def require_targets(settings):
    if settings.targets_error:
        raise ValueError("AGENTSEC_PROBE_TARGETS unusable: " + settings.targets_error)
    return settings.targets


# ---------------------------------------------------------------------------------------------
# Connections.
# ---------------------------------------------------------------------------------------------
REFUSED_ERRNOS = (errno.ECONNREFUSED, errno.ECONNRESET)
UNREACHABLE_ERRNOS = (
    errno.ENETUNREACH,
    errno.EHOSTUNREACH,
    errno.ENETDOWN,
    errno.EHOSTDOWN,
    errno.EAFNOSUPPORT,
    errno.EADDRNOTAVAIL,
)
DENIED_ERRNOS = (errno.EACCES, errno.EPERM)


def connection_result(exc):
    if isinstance(exc, socket.timeout) or exc.errno == errno.ETIMEDOUT:
        return "timeout"
    if exc.errno in REFUSED_ERRNOS:
        return "refused"
    if exc.errno in UNREACHABLE_ERRNOS:
        return "unreachable"
    if exc.errno in DENIED_ERRNOS:
        return "denied"
    return "error"


def connect_and_close(family, sock_type, sockaddr, deadline):
    """Connect, then close without sending anything. Returns (result, errno name)."""
    if remaining(deadline) <= 0:
        return "timeout", None
    try:
        sock = socket.socket(family, sock_type)
    except OSError as exc:
        return connection_result(exc), errno_name(exc)
    try:
        sock.settimeout(max(0.001, remaining(deadline)))
        sock.connect(sockaddr)
        return "connected", None
    except OSError as exc:
        return connection_result(exc), errno_name(exc)
    finally:
        sock.close()


def connect_unix(path, deadline):
    result, code = connect_and_close(socket.AF_UNIX, socket.SOCK_STREAM, path, deadline)
    return "absent" if code in ("ENOENT", "ENOTDIR") else result


def is_ip_literal(host):
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except (OSError, ValueError):
            continue
        return True
    return False


def lookup_result(exc):
    if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)):
        return "nxdomain"
    return "error"


def resolve(host, port, family, sock_type):
    """(lookup word, [(family, sockaddr)]). IP literals are never sent to a resolver."""
    literal = is_ip_literal(host)
    flags = socket.AI_NUMERICHOST if literal else 0
    try:
        # Bytes: a str host is IDNA-encoded first, which imports a codec; hosts here are ASCII.
        infos = socket.getaddrinfo(host.encode("ascii"), port, family, sock_type, 0, flags)
    except socket.gaierror as exc:
        return ("literal" if literal else lookup_result(exc)), []
    seen, found = set(), []
    for info_family, _, _, _, sockaddr in infos:
        if sockaddr[0] not in seen:
            seen.add(sockaddr[0])
            found.append((info_family, sockaddr))
    return ("literal" if literal else "ok"), found


# ---------------------------------------------------------------------------------------------
# Sections. Each takes the run's Settings and returns its `data` object.
# ---------------------------------------------------------------------------------------------


def parse_status_file(path):
    fields = {}
    for line in read_lines(path):
        key, separator, value = line.partition(":")
        if separator:
            fields[key.strip()] = value.strip()
    return fields


def capability_names(mask):
    return [
        CAPABILITY_NAMES[bit] if bit < len(CAPABILITY_NAMES) else "CAP_%d" % bit
        for bit in range(64)
        if mask >> bit & 1
    ]


def libc_functions():
    """(ctypes, libc) for calling libc's own wrappers (unshare, mount), which need no syscall
    number and so work on any architecture; None without ctypes."""
    try:
        import ctypes
    except ImportError:
        return None
    return ctypes, ctypes.CDLL(None, use_errno=True)


PR_GET_NO_NEW_PRIVS = 39


def no_new_privs(status):
    """From /proc/self/status, or where that has no such line (gVisor's), from prctl."""
    if "NoNewPrivs" in status:
        return status["NoNewPrivs"] == "1"
    handle = libc_functions()
    if handle is None:
        return None
    ctypes, libc = handle
    zero = ctypes.c_ulong(0)
    value = libc.prctl(ctypes.c_int(PR_GET_NO_NEW_PRIVS), zero, zero, zero, zero)
    return value == 1 if value in (0, 1) else None


def libc_handle():
    """(ctypes, libc) for syscalls by number, or None where numbers for this interpreter are
    not known (see SYSCALL_NUMBERS) or ctypes is missing."""
    if platform_machine() not in SYSCALL_NUMBERS:
        return None
    handle = libc_functions()
    if handle is None or handle[0].sizeof(handle[0].c_void_p) != 8:
        return None
    handle[1].syscall.restype = handle[0].c_long
    return handle


def platform_machine():
    try:
        return os.uname().machine
    except (AttributeError, OSError):
        return ""


def raw_syscall(name, *arguments):
    """(return value, errno) of a syscall by number, or None where it cannot be made here.
    Arguments are integers (a buffer goes in as its address)."""
    handle = libc_handle()
    if handle is None:
        return None
    ctypes, libc = handle
    number = SYSCALL_NUMBERS[platform_machine()][name]
    ctypes.set_errno(0)
    value = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in arguments])
    return value, ctypes.get_errno()


def landlock_abi():
    outcome = raw_syscall("landlock_create_ruleset", 0, 0, LANDLOCK_CREATE_RULESET_VERSION)
    if outcome is None or outcome[0] < 0:
        return None
    return outcome[0]


def apparmor_label(lsm):
    paths = ["/proc/self/attr/apparmor/current"]
    # Older kernels show AppArmor only in attr/current, which belongs to SELinux when it is on.
    if lsm is None or ("apparmor" in lsm and "selinux" not in lsm):
        paths.append("/proc/self/attr/current")
    for path in paths:
        text = read_text(path, 4096)
        if text:
            return clean_text(text.strip("\0\n "), 200)
    return None


def section_identity(settings):
    status = parse_status_file("/proc/self/status")
    uid_map_text = read_text("/proc/self/uid_map")
    uid_map = None
    if uid_map_text is not None:
        uid_map = "\n".join(" ".join(line.split()) for line in uid_map_text.splitlines() if line)
    cap_eff = status.get("CapEff")
    lsm = read_text("/sys/kernel/security/lsm", 4096)
    lsm = clean_text(lsm.strip("\0\n "), 200) if lsm else None
    return {
        "euid": os.geteuid(),
        "egid": os.getegid(),
        "uid_map": uid_map,
        "in_user_namespace": None if uid_map is None else uid_map != IDENTITY_UID_MAP,
        "cap_eff": cap_eff,
        "caps": capability_names(int(cap_eff, 16)) if cap_eff else [],
        "seccomp": int(status["Seccomp"]) if status.get("Seccomp", "").isdigit() else None,
        "no_new_privs": no_new_privs(status),
        "landlock_abi": landlock_abi(),
        "lsm": lsm,
        "apparmor": apparmor_label(lsm),
        "overflow_uid": read_int("/proc/sys/kernel/overflowuid"),
        "kernel_file_owner": file_owner(CORE_PATTERN),
        # Opening a kernel sysctl for writing passes only for the host's uid 0 (the kernel
        # compares the euid with the initial namespace's root, capabilities aside): this tells
        # host root apart even where the euid is the overflow uid and ownership cannot.
        "kernel_file_writable": can_open(CORE_PATTERN, os.O_WRONLY),
        "own_namespaces": own_namespaces(),
        "io_uring": io_uring_state(),
        "user_space_kernel": user_space_kernel(),
    }


# gVisor's Sentry answers uname with this fixed build string whatever the host runs (the release
# it pairs it with has changed: 4.4.0, 4.19.0-gvisor); a host kernel built at that minute of
# 2016 would be older than anything that runs the probe.
GVISOR_UNAME_VERSION = "#1 SMP Sun Jan 10 15:06:54 PST 2016"


def user_space_kernel():
    """'gvisor' when the probe's system calls are served by gVisor's user-space kernel rather
    than the host's: its root, capabilities, /proc/sys and io_uring are then the Sentry's, and
    the host's kernel is reached only through the Sentry's own filtered calls. None otherwise."""
    return "gvisor" if os.uname().version == GVISOR_UNAME_VERSION else None


# Inode numbers the kernel gives its initial namespaces (include/linux/proc_ns.h); the network
# namespace has none, so it is told by a sysctl only the initial one has.
INITIAL_NAMESPACE_INODES = {
    "ipc": 4026531839,
    "uts": 4026531838,
    "user": 4026531837,
    "pid": 4026531836,
    "cgroup": 4026531835,
    "time": 4026531834,
}
INITIAL_NET_ONLY_SYSCTL = "/proc/sys/net/core/netdev_max_backlog"
ANY_NET_SYSCTL = "/proc/sys/net/core/somaxconn"


def own_namespaces():
    """{kind: True when this process is in a namespace of that kind other than the host's
    initial one, False when in the initial one, None when that cannot be told}."""
    found = {}  # type: dict
    for kind, initial in INITIAL_NAMESPACE_INODES.items():
        try:
            link = os.readlink("/proc/self/ns/" + kind)
        except OSError:
            found[kind] = None
            continue
        digits = link.partition("[")[2].rstrip("]")
        found[kind] = int(digits) != initial if digits.isdigit() else None
    # /proc/sys/net shows the net sysctls of the reader's network namespace, whoever mounted
    # /proc: net.core.netdev_max_backlog is registered in the initial namespace only.
    if existence(INITIAL_NET_ONLY_SYSCTL)[0]:
        found["net"] = False
    elif existence(ANY_NET_SYSCTL)[0]:
        found["net"] = True
    else:
        found["net"] = None
    return found


def io_uring_state():
    """{"result": creatable|refused|unavailable|error, "errno": name}, or None where syscalls
    cannot be made by number. A ring with one entry is set up and its descriptor closed at
    once; nothing is submitted to it."""
    handle = libc_handle()
    if handle is None:
        return None
    ctypes = handle[0]
    params = ctypes.create_string_buffer(IO_URING_PARAMS_SIZE)
    value, code = raw_syscall("io_uring_setup", 1, ctypes.addressof(params))
    if value >= 0:
        os.close(value)
        return {"result": "creatable", "errno": None}
    if code == errno.ENOSYS:
        result = "unavailable"  # not in this kernel, or seccomp answers as if it were not
    elif code in (errno.EPERM, errno.EACCES):
        result = "refused"  # kernel.io_uring_disabled, an LSM, or seccomp
    else:
        result = "error"
    return {"result": result, "errno": errno.errorcode.get(code, str(code))}


def read_int(path):
    text = read_text(path, 64)
    return int(text.strip()) if text and text.strip().isdigit() else None


def file_owner(path):
    """The uid a file owned by host root shows here. Host root unmapped in this user namespace
    shows as the overflow uid; host root mapped to our own uid means we are host root."""
    try:
        return os.stat(path).st_uid
    except OSError:
        return None


CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
MS_REC_PRIVATE = 0x4000 | 0x40000
SIGKILL = 9  # the signal module would cost an import for one number, the same on every Linux
NAMESPACE_STEPS = ("user", "mount_ns", "private", "mount")


def namespace_steps(ctypes, libc):
    """Run in a forked child, so that unshare and mount change nothing in the probe itself:
    unshare(CLONE_NEWUSER) answers "can a user namespace be made"; unshare(CLONE_NEWNS) after it
    (in that namespace, or directly when the first step failed and the process is privileged)
    and a tmpfs mounted over /tmp in the child's own private mount tree answer "can it mount".
    Only a private tree may take the test mount: a shared one would pass it on to the host."""

    def outcome(value):
        return "ok" if value == 0 else errno.errorcode.get(ctypes.get_errno(), "error")

    steps = {"user": outcome(libc.unshare(ctypes.c_int(CLONE_NEWUSER)))}
    steps["mount_ns"] = outcome(libc.unshare(ctypes.c_int(CLONE_NEWNS)))
    if steps["mount_ns"] == "ok":
        steps["private"] = outcome(
            libc.mount(None, b"/", None, ctypes.c_ulong(MS_REC_PRIVATE), None)
        )
    if steps.get("private") == "ok":
        target = b"/tmp" if os.path.isdir("/tmp") else b"/"
        steps["mount"] = outcome(libc.mount(b"tmpfs", target, b"tmpfs", ctypes.c_ulong(0), None))
    return steps


def namespace_result(user_ns, mount, detail):
    return {"user_ns_creatable": user_ns, "mount_in_new_ns": mount, "detail": detail}


def run_in_child(function, deadline):
    """Run function() in a forked child and return the line it answers, or raise OSError. A fork
    (no new interpreter) is enough: the child only makes syscalls through ctypes, already loaded,
    and writes one line to a pipe; a new user namespace needs a single-threaded process, which
    the fork gives. The answer is read up to its newline, not to the child's exit: tearing down
    the namespaces it made can take longer than making them, and nothing waits for that."""
    import select

    reader, writer = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(reader)
        os.close(writer)
        raise
    if pid == 0:  # the child: never returns, never runs the parent's clean-up
        try:
            os.close(reader)
            os.write(writer, (function() + "\n").encode("ascii", "replace"))
        finally:
            os._exit(0)
    os.close(writer)
    data = b""
    try:
        while b"\n" not in data and remaining(deadline) > 0:
            ready, _, _ = select.select([reader], [], [], remaining(deadline))
            chunk = os.read(reader, 4096) if ready else b""
            if not chunk:
                break
            data += chunk
    finally:
        os.close(reader)
        try:
            if b"\n" not in data:  # no answer in time: it will not give one
                os.kill(pid, SIGKILL)
            os.waitpid(pid, os.WNOHANG)  # reaped now if done; else at exit, never waited on
        except OSError:
            pass
    return data.decode("ascii", "replace").strip()


def section_namespaces(settings):
    handle = libc_functions()
    if handle is None:
        return namespace_result(None, None, "ctypes is missing")

    def child():
        steps = namespace_steps(*handle)
        return ";".join("%s=%s" % (step, steps[step]) for step in NAMESPACE_STEPS if step in steps)

    try:
        answer = run_in_child(child, settings.budget_end)
    except OSError as exc:
        return namespace_result(None, None, "no child process: " + describe_exception(exc))
    steps = dict(item.partition("=")[::2] for item in answer.split(";") if "=" in item)
    if "user" not in steps:
        return namespace_result(None, None, "the child gave no answer")
    detail = "; ".join("%s: %s" % (step, steps[step]) for step in NAMESPACE_STEPS if step in steps)
    mount_untested = steps.get("mount_ns") == "ok" and "mount" not in steps
    mount = None if mount_untested else steps.get("mount") == "ok"
    return namespace_result(steps["user"] == "ok", mount, detail)


def network_interfaces():
    names = []
    for line in read_lines("/proc/net/dev")[2:]:
        name, separator, _ = line.partition(":")
        if separator:
            names.append(clean_text(name.strip(), 40))
    return names


def ipv4_default_gateway():
    """(has default route, gateway or None) from /proc/net/route."""
    found, gateway = False, None
    for line in read_lines("/proc/net/route")[1:]:
        fields = line.split()
        if len(fields) < 8 or fields[1] != "00000000" or fields[7] != "00000000":
            continue
        if int(fields[3], 16) & RTF_UP:
            found = True
            if int(fields[2], 16) and gateway is None:
                gateway = socket.inet_ntoa(struct.pack("<I", int(fields[2], 16)))
    return found, gateway


def ipv6_default_gateway():
    """(has default route, gateway or None); the kernel's unreachable placeholder is skipped."""
    found, gateway = False, None
    for line in read_lines("/proc/net/ipv6_route"):
        fields = line.split()
        if len(fields) < 10 or fields[0] != "0" * 32 or fields[1] != "00":
            continue
        flags = int(fields[8], 16)
        if flags & RTF_UP and not flags & RTF_REJECT:
            found = True
            if fields[4] != "0" * 32 and gateway is None:
                gateway = socket.inet_ntop(socket.AF_INET6, bytes.fromhex(fields[4]))
    return found, gateway


def is_public(address, extra_networks):
    import ipaddress

    ip = ipaddress.ip_address(address.split("%")[0])
    return ip.is_global or any(ip in ipaddress.ip_network(n, strict=False) for n in extra_networks)


def tcp_target_job(progress, host, port, family, deadline):
    """Look the host up, then connect to its addresses (at most three) until one connects."""

    def job():
        lookup, found = resolve(host, port, family, socket.SOCK_STREAM)
        progress.update(lookup=lookup, addresses=[clean_text(a[1][0], 64) for a in found[:8]])
        if not found:
            progress.update(result="not_attempted")
            return
        progress.update(result="timeout")
        outcomes = []
        for address_family, sockaddr in found[:3]:
            outcomes.append(
                connect_and_close(address_family, socket.SOCK_STREAM, sockaddr, deadline)
            )
            if outcomes[-1][0] == "connected":
                break
        # The address that connected, or else the first address's failure.
        chosen = outcomes[-1] if outcomes[-1][0] == "connected" else outcomes[0]
        progress.update(result=chosen[0], errno=chosen[1])

    return job


DNS_QUESTION_NAME = "example.com"


def build_dns_query(query_id):
    """The 29-byte question `example.com IN A` with recursion desired, built by hand."""
    header = struct.pack("!HHHHHH", query_id, 0x0100, 1, 0, 0, 0)
    name = b"".join(
        struct.pack("!B", len(label)) + label.encode("ascii")
        for label in DNS_QUESTION_NAME.split(".")
    )
    return header + name + b"\x00" + struct.pack("!HH", 1, 1)


def is_dns_answer(data, query_id):
    return len(data) >= 12 and struct.unpack("!H", data[:2])[0] == query_id and data[2] & 0x80


def udp_result(exc):
    """An ICMP port-unreachable comes back as ECONNREFUSED: the question got no DNS answer."""
    word = connection_result(exc)
    return "unreachable" if word == "refused" else word


def udp_dns_job(progress, host, port, deadline):
    def job():
        _, found = resolve(host, port, socket.AF_UNSPEC, socket.SOCK_DGRAM)
        if not found:
            return
        family, sockaddr = found[0]
        query_id = struct.unpack("!H", os.urandom(2))[0]
        try:
            sock = socket.socket(family, socket.SOCK_DGRAM)
        except OSError as exc:
            progress.update(result=udp_result(exc))
            return
        try:
            sock.connect(sockaddr)
            sock.send(build_dns_query(query_id))
            progress.update(result="no_answer")
            while remaining(deadline) > 0:
                sock.settimeout(remaining(deadline))
                if is_dns_answer(sock.recv(4096), query_id):
                    progress.update(result="answered")
                    return
        except socket.timeout:
            return
        except OSError as exc:
            progress.update(result=udp_result(exc))
        finally:
            sock.close()

    return job


def dns_control_job(progress, name, extra_networks):
    def job():
        lookup, found = resolve(name, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
        addresses = [a[1][0] for a in found]
        progress.update(
            lookup=lookup,
            addresses=[clean_text(a, 64) for a in addresses[:8]],
            public=any(is_public(a, extra_networks) for a in addresses),
        )

    return job


def unfinished_connection(host, port, **extra):
    """What a TCP check reports if its worker is still busy at the deadline."""
    return Progress(
        host=host,
        port=port,
        lookup="timeout",
        addresses=[],
        result="not_attempted",
        errno=None,
        **extra,
    )


def plan_network_checks(targets, gateway, deadline):
    """(progress by key, jobs): one worker per lookup-and-connect, all run at once."""
    progress, jobs = {}, []
    endpoints = [(e, "egress") for e in targets["egress"]]
    endpoints += [(e, "metadata") for e in targets["metadata"]]
    endpoints += [(e, "interception_control") for e in targets["interception_control"]]
    for index, (endpoint, kind) in enumerate(endpoints):
        host, port = parse_endpoint(endpoint)
        progress["tcp%d" % index] = unfinished_connection(host, port, kind=kind)
        jobs.append(
            (
                "tcp%d" % index,
                tcp_target_job(progress["tcp%d" % index], host, port, socket.AF_UNSPEC, deadline),
            )
        )
    for index, endpoint in enumerate(targets["ipv6"]):
        host, port = parse_endpoint(endpoint)
        progress["ipv6-%d" % index] = unfinished_connection(host, port)
        jobs.append(
            (
                "ipv6-%d" % index,
                tcp_target_job(progress["ipv6-%d" % index], host, port, socket.AF_INET6, deadline),
            )
        )
    udp_host, udp_port = parse_endpoint(targets["udp_dns"])
    progress["udp"] = Progress(host=udp_host, port=udp_port, result="error")
    jobs.append(("udp", udp_dns_job(progress["udp"], udp_host, udp_port, deadline)))
    control = targets["dns_control"]
    extra_networks = list(targets["public_networks"])  # made into networks where they are used
    progress["control"] = Progress(name=control, lookup="timeout", addresses=[], public=False)
    jobs.append(("control", dns_control_job(progress["control"], control, extra_networks)))
    if gateway:
        port = targets["docker_tcp_port"]
        progress["docker"] = unfinished_connection(gateway, port)
        jobs.append(
            (
                "docker",
                tcp_target_job(progress["docker"], gateway, port, socket.AF_UNSPEC, deadline),
            )
        )
    return progress, jobs


def section_network(settings):
    targets = require_targets(settings)
    has_v4_default, v4_gateway = ipv4_default_gateway()
    has_v6_default, v6_gateway = ipv6_default_gateway()
    gateway = v4_gateway or v6_gateway
    progress, jobs = plan_network_checks(targets, gateway, settings.budget_end)
    results = run_workers(progress, jobs, settings.budget_end + WORKER_GRACE_S)
    docker = results.get("docker")
    return {
        "no_route": not (has_v4_default or has_v6_default),
        "default_gateway": gateway,
        "interfaces": network_interfaces(),
        "targets": [
            results[key]
            for key in results
            if key.startswith("tcp") and results[key]["kind"] != "interception_control"
        ],
        "interception_control": [
            pick(results[key], "host", "port", "result", "errno")
            for key in results
            if key.startswith("tcp") and results[key]["kind"] == "interception_control"
        ],
        "ipv6": [
            pick(results[key], "host", "port", "result", "errno")
            for key in results
            if key.startswith("ipv6-")
        ],
        "udp_dns": results["udp"],
        "dns_control": results["control"],
        "docker_tcp": pick(docker, "host", "port", "result") if docker else None,
    }


def pick(values, *keys):
    return {key: values[key] for key in keys}


def proxy_scheme_word(scheme):
    if scheme in ("http", "https"):
        return scheme
    if scheme.startswith("socks"):
        return "socks"
    return "other"


def parse_proxy_url(url):
    """(scheme word, host, port, username, password). The URL holds credentials, so a parse
    error says nothing about it."""
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        scheme = proxy_scheme_word(parts.scheme.lower())
        default_port = {"http": 80, "https": 443}.get(scheme, 1080)
        host, port = parts.hostname, parts.port or default_port
        username = urllib.parse.unquote(parts.username) if parts.username is not None else None
        password = urllib.parse.unquote(parts.password or "")
    except ValueError:
        raise ValueError("the proxy URL could not be parsed") from None
    if not host:
        raise ValueError("the proxy URL names no host")
    return scheme, host, port, username, password


def format_authority(host, port):
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


def connect_request(host, port, authorization):
    authority = format_authority(host, port)
    lines = ["CONNECT %s HTTP/1.1" % authority, "Host: %s" % authority]
    if authorization:
        lines.append("Proxy-Authorization: Basic " + authorization)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def read_status_code(sock, deadline):
    """The status code from the proxy's status line, or None; nothing else is kept."""
    data = b""
    while b"\r\n" not in data and len(data) < 1024 and remaining(deadline) > 0:
        sock.settimeout(remaining(deadline))
        chunk = sock.recv(1024 - len(data))
        if not chunk:
            break
        data += chunk
    words = data.split(b"\r\n", 1)[0].split(b" ", 2)
    version = words[0]
    is_http = len(version) == 8 and version[:5] == b"HTTP/" and version[6:7] == b"."
    if not is_http or not (version[5:6] + version[7:8]).isdigit() or len(words) < 2:
        return None
    code = words[1]
    return int(code) if len(code) == 3 and code.isdigit() else None


def proxy_result(status):
    if status is None:
        return "error"
    if 200 <= status < 300:
        return "tunnel"
    if status == 407:
        return "auth_required"
    return "refused"


def proxy_connect_job(progress, proxy, target, authorization, credentials_sent, deadline):
    """Ask the proxy for a tunnel, read its status line, close. Never starts TLS."""

    def job():
        proxy_host, proxy_port = proxy
        _, found = resolve(proxy_host, proxy_port, socket.AF_UNSPEC, socket.SOCK_STREAM)
        if not found:
            progress.update(result="error")
            return
        family, sockaddr = found[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(0.001, remaining(deadline)))
            sock.connect(sockaddr)
            sock.sendall(connect_request(target[0], target[1], authorization))
            if authorization:
                credentials_sent.append(True)
            status = read_status_code(sock, deadline)
            progress.update(status=status, result=proxy_result(status))
        except socket.timeout:
            progress.update(result="timeout")
        except OSError:
            progress.update(result="error")
        finally:
            sock.close()

    return job


def section_proxy(settings):
    targets = require_targets(settings)
    url = next((settings.environ[v] for v in PROXY_VARIABLES if settings.environ.get(v)), None)
    if url is None:
        return {
            "configured": False,
            "scheme": None,
            "auth_present": False,
            "auth_sent": False,
            "results": [],
        }
    scheme, proxy_host, proxy_port, username, password = parse_proxy_url(url)
    asked = [(*parse_endpoint(e), False) for e in targets["egress"]]
    asked.append((*parse_endpoint(targets["proxy_control"]), True))
    progress, jobs = {}, []
    authorization = None
    if settings.environ.get("AGENTSEC_PROBE_PROXY_AUTH") == "1" and username is not None:
        import base64

        token = ("%s:%s" % (username, password)).encode("utf-8", "surrogateescape")
        authorization = base64.b64encode(token).decode("ascii")
    credentials_sent = []  # type: list  # appended to once a request carried the credentials
    for index, (host, port, control) in enumerate(asked):
        progress[index] = Progress(
            host=host,
            port=port,
            control=control,
            status=None,
            result="unsupported" if scheme != "http" else "timeout",
        )
        if scheme == "http":
            jobs.append(
                (
                    index,
                    proxy_connect_job(
                        progress[index],
                        (proxy_host, proxy_port),
                        (host, port),
                        authorization,
                        credentials_sent,
                        settings.budget_end,
                    ),
                )
            )
    results = run_workers(progress, jobs, settings.budget_end + WORKER_GRACE_S)
    return {
        "configured": True,
        "scheme": scheme,
        "auth_present": username is not None,
        "auth_sent": bool(credentials_sent),
        "results": list(results.values()),
    }


def looks_like_secret_name(name):
    upper = name.upper()
    if upper in WELL_KNOWN_SECRET_NAMES:
        return True
    words = [word for word in upper.split("_") if word]
    if not words or words[-1] in NOT_SECRET_LAST_WORDS:
        return False
    if any(word in SECRET_WORDS for word in words):
        return True
    return any(
        word in KEY_WORDS and index > 0 and words[index - 1] in KEY_QUALIFIERS
        for index, word in enumerate(words)
    )


# agentcage's decoy format, public by design: a value of exactly this shape is a placeholder the
# gateway swaps on the wire, not a secret. Only the yes/no answer leaves the probe.
PLACEHOLDER_PREFIX = "agentcage:secret:"
PLACEHOLDER_NAME_CHARACTERS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
)
HEX_DIGITS = frozenset("0123456789abcdef")
OCTAL_DIGITS = frozenset("01234567")


def is_placeholder(value):
    """`agentcage:secret:<NAME>:<32 lowercase hex>` and nothing else."""
    if not value.startswith(PLACEHOLDER_PREFIX):
        return False
    name, separator, digits = value[len(PLACEHOLDER_PREFIX) :].rpartition(":")
    return (
        bool(separator and name)
        and set(name) <= PLACEHOLDER_NAME_CHARACTERS
        and len(digits) == 32
        and set(digits) <= HEX_DIGITS
    )


def proxy_passwords(environ):
    """The passwords in the proxy variables' URLs: the sandbox's own egress proxy, if any."""
    found = set()
    for variable in PROXY_VARIABLES:
        url = environ.get(variable) or ""
        credentials = url.partition("://")[2].partition("/")[0].rpartition("@")[0]
        if ":" in credentials:
            found.add(credentials.partition(":")[2])
    return found


def section_secrets_env(settings):
    own_proxy = proxy_passwords(settings.environ)
    names = [
        {
            "name": clean_text(name, 200),
            "length": len(value),
            "placeholder": is_placeholder(value),
            # The password of the proxy the sandbox itself routes egress through (srt hands it
            # out again as CLOUDSDK_PROXY_PASSWORD): it opens that proxy, which the proxy
            # variables already open, and nothing else. Only the yes/no leaves the probe.
            "proxy_credential": bool(value) and value in own_proxy,
        }
        for name, value in sorted(settings.environ.items())
        if looks_like_secret_name(name) and not name.startswith(PROBE_SETTING_PREFIX)
    ]
    return {"names": names}


def npmrc_holds_token(path):
    """Whether an .npmrc names a token (`_authToken`, `_auth`, `_password`, also scoped as
    `//registry/:_authToken`) with a literal value: True, False, or None if it cannot be read.
    The file is read only to answer this; no line, key or value is kept."""
    text = read_text(path, MAX_CONFIG_BYTES)
    if text is None:
        return None
    for line in text.splitlines():
        key, separator, value = line.strip().partition("=")
        if not separator or key.startswith(("#", ";")):
            continue
        value = value.strip().strip("\"'")
        # `${NPM_TOKEN}` names a variable the secrets_env section already reports.
        if key.strip().endswith(NPMRC_TOKEN_KEYS) and value and not value.startswith("${"):
            return True
    return False


def claude_config_holds_key(path):
    """Whether Claude Code's ~/.claude.json names a saved API key (`"primaryApiKey": "..."`):
    True, False, or None if it cannot be read whole. Read only to answer this; nothing of it
    is kept."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CLAUDE_CONFIG_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_CLAUDE_CONFIG_BYTES:
        return None
    start = data.find(CLAUDE_KEY_FIELD)
    while start != -1:
        rest = data[start + len(CLAUDE_KEY_FIELD):].lstrip()
        if rest[:1] == b":" and rest[1:].lstrip()[:1] == b'"':
            return True
        start = data.find(CLAUDE_KEY_FIELD, start + 1)
    return False


def credential_entries(relative, homes, agent_login):
    entries = []
    for via, path, exists in home_file_candidates(relative, homes):
        readable = bool(path) and exists is not False and is_readable(path)
        entry = {
            "path": relative,
            "exists": exists,
            "readable": readable,
            "agent_login": agent_login,
            "via": via,
        }
        if relative == NPMRC:
            entry["holds_token"] = npmrc_holds_token(path) if readable else False
        if relative == CLAUDE_CONFIG:
            entry["holds_token"] = claude_config_holds_key(path) if readable else False
        entries.append(entry)
    return entries


def section_credentials(settings):
    homes = home_dirs(settings.environ)
    files = []
    for relative in HOME_CREDENTIAL_FILES:
        files.extend(credential_entries(relative, homes, False))
    for relative in AGENT_LOGIN_FILES:
        files.extend(credential_entries(relative, homes, True))
    for path in ABSOLUTE_CREDENTIAL_PATHS:
        exists, _ = existence(path)
        files.append(
            {
                "path": path,
                "exists": exists,
                "readable": exists is not False and is_readable(path),
                "agent_login": False,
                "via": "absolute",
            }
        )
    return {"files": files}


def section_project_credentials(settings):
    """Credential files in the working directory, by path relative to it: whether each opens
    for reading and whether it holds a credential (project_credential_holds). Nothing of a file
    is kept: an .npmrc is read to learn whether it names a token, a .pem or .key for its first
    PRIVATE_KEY_HEAD bytes to learn whether it holds a private key, and only yes or no is kept."""
    root = os.getcwd()
    found, truncated = project_credential_files(root)
    files = []
    for relative, kind in found:
        full = os.path.join(root, relative)
        readable = is_readable(full)
        files.append({
            "path": clean_text(relative, 1000),
            "readable": readable,
            "holds": project_credential_holds(full, kind) if readable else False,
        })
    if len(files) > MAX_PROJECT_CREDENTIALS:
        truncated = True
        # the files an agent could take are kept first: a cut drops the others before them
        files.sort(key=lambda f: (not (f["readable"] and f["holds"] is not False), f["path"]))
        files = files[:MAX_PROJECT_CREDENTIALS]
    files.sort(key=lambda f: f["path"])
    return {"root": clean_text(root, 1000), "truncated": truncated, "files": files}


def runtime_socket_paths(environ):
    """(path, rootless) for the system sockets and the per-user ones, each real path once."""
    candidates = [(path, False) for path in RUNTIME_SOCKETS]
    user_dirs = [environ.get("XDG_RUNTIME_DIR"), "/run/user/%d" % os.geteuid()]
    for directory in [d for d in user_dirs if d]:
        candidates += [(os.path.join(directory, name), True) for name in ROOTLESS_SOCKET_NAMES]
    seen, unique = set(), []
    for path, rootless in candidates:
        real = os.path.realpath(path)
        if real not in seen:
            seen.add(real)
            unique.append((path, rootless))
    return unique


def control_socket_results(environ, deadline):
    """Connect to a socket of the probe's own and to a path that does not exist: a refusal of
    the first means the whole syscall is refused, not one path."""
    missing = "/nonexistent-agentsec-%s/socket" % os.urandom(6).hex()
    base = next(
        (
            d
            for d in (environ.get("TMPDIR"), "/tmp", "/dev/shm", "/var/tmp")
            if d and os.path.isdir(d)
        ),
        None,
    )
    directory = None
    if base is not None:
        directory = os.path.join(base, MARKER_PREFIX + os.urandom(8).hex())
        try:
            os.mkdir(directory, 0o700)  # a fresh name: it fails rather than reuse anything
        except OSError:
            directory = None
    if directory is None:
        return {"own_socket": "not_attempted", "missing_path": connect_unix(missing, deadline)}
    try:
        own = listen_and_connect(os.path.join(directory, "s"), deadline)
    finally:
        remove_tree_of_one(directory, "s")
    return {"own_socket": own, "missing_path": connect_unix(missing, deadline)}


def listen_and_connect(path, deadline):
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as exc:
        return connection_result(exc)
    try:
        server.bind(path)
        server.listen(1)
        return connect_unix(path, deadline)
    except OSError as exc:
        return connection_result(exc)
    finally:
        server.close()


def remove_tree_of_one(directory, name):
    """Remove the control socket's directory and the one file it may hold."""
    for remove, path in ((os.unlink, os.path.join(directory, name)), (os.rmdir, directory)):
        try:  # noqa: SIM105 - contextlib is one more import on every run
            remove(path)
        except OSError:
            pass


def connect_existing_unix(path, deadline):
    """Connect to a socket path, unless stat shows it is not there. Checked first because a
    sandbox that refuses every unix socket (seccomp on socket()) answers "denied" for a path that
    does not exist as much as for one that does: that refusal says nothing about the path."""
    exists, _ = existence(path)
    if exists is False:
        return "absent"
    return connect_unix(path, deadline)


def section_sockets(settings):
    deadline = settings.budget_end
    runtime = [
        {"path": path, "rootless": rootless, "result": connect_existing_unix(path, deadline)}
        for path, rootless in runtime_socket_paths(settings.environ)
    ]
    agent_path = settings.environ.get("SSH_AUTH_SOCK")
    ssh_agent = {
        "set": bool(agent_path),
        "result": connect_existing_unix(agent_path, deadline) if agent_path else "not_attempted",
    }
    return {
        "runtime": runtime,
        "ssh_agent": ssh_agent,
        "control": control_socket_results(settings.environ, deadline),
    }


def keyctl_buffer(operation, key, size):
    """The bytes a KEYCTL_READ or KEYCTL_DESCRIBE puts in a buffer, or None when refused."""
    handle = libc_handle()
    if handle is None:
        return None
    ctypes = handle[0]
    buffer = ctypes.create_string_buffer(size)
    outcome = raw_syscall("keyctl", operation, key, ctypes.addressof(buffer), size)
    if outcome is None or outcome[0] < 0:
        return None
    return buffer.raw[: min(outcome[0], size)]


def key_type(key):
    """A key's type, from KEYCTL_DESCRIBE ("type;uid;gid;perm;description"); the description
    is dropped at once."""
    described = keyctl_buffer(KEYCTL_DESCRIBE, key, 512)
    if described is None:
        return None
    return described.split(b";", 1)[0].decode("ascii", "replace")


def keys_in_reach():
    """{key id: type} for the keys /proc/keys lists and those inside the keyrings it lists,
    walked through nested keyrings. Where /proc/keys is masked (a character device bound over
    it, as container runtimes do) or unreadable, the walk starts from the thread, process and
    session keyrings instead. The user keyrings (@u, @us) are never named: asking for them, or
    for @s where a process has no session keyring, makes the kernel create that uid's keyrings,
    which outlive the probe (container runtimes give every container a session keyring)."""
    found, pending = {}, []
    try:
        listed = stat.S_ISREG(os.stat("/proc/keys").st_mode)
    except OSError:
        listed = False
    for line in read_lines("/proc/keys") if listed else []:
        fields = line.split()
        if len(fields) >= 8:
            try:
                key = int(fields[0], 16)
            except ValueError:
                continue
            found[key] = fields[7]  # the type; the description is not kept
            if fields[7] == "keyring":
                pending.append(key)
    if not listed:
        pending = list(OWN_KEYRINGS)
    while pending and len(found) < MAX_KEYS:
        members = keyctl_buffer(KEYCTL_READ, pending.pop(), 4 * MAX_KEYS) or b""
        for (member,) in struct.iter_unpack("=i", members[: len(members) // 4 * 4]):
            if member not in found:
                found[member] = key_type(member)
                if found[member] == "keyring":
                    pending.append(member)
    return found


def section_keyring(settings):
    # An invalid keyring id answers EINVAL where keyctl works and the sandbox's refusal where it
    # does not, and creates nothing (a special id such as @s could create keyrings).
    outcome = raw_syscall("keyctl", KEYCTL_GET_KEYRING_ID, 0, 0)
    if outcome is None:
        session = "error"
    elif outcome[1] == errno.EINVAL:
        session = "accessible"
    elif outcome[1] in (errno.EACCES, errno.EPERM, errno.ENOSYS):
        session = "denied"  # refused by the sandbox (seccomp answers ENOSYS)
    else:
        session = "error"
    keys = read_text("/proc/keys")  # counted only: descriptions never leave this function
    reach = keys_in_reach() if session == "accessible" else {}
    readable_types = {}  # type: dict
    for key, kind in sorted(reach.items()):
        if kind in (None, "keyring"):
            continue
        # KEYCTL_READ with no buffer answers the payload's size and copies nothing out.
        read = raw_syscall("keyctl", KEYCTL_READ, key, 0, 0)
        if read is not None and read[0] >= 0:
            kind = clean_text(kind, 40)
            readable_types[kind] = readable_types.get(kind, 0) + 1
    unknown = session == "error"
    return {
        "session_keyring": session,
        "visible_keys": None if keys is None else len(keys.splitlines()),
        "readable_keys": None if unknown else sum(readable_types.values()),
        "readable_key_types": sorted(readable_types),
    }


def numeric_proc_entries():
    try:
        return sorted(int(name) for name in os.listdir("/proc") if name.isdigit())
    except OSError:
        return []


def parent_pid(pid):
    text = read_text("/proc/%d/stat" % pid, 4096) or ""
    fields = text.rpartition(")")[2].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def proc_self_pid():
    """This process's pid as the mounted /proc numbers it: a /proc from another pid namespace
    (the host's, bound into a sandbox) numbers every process, this one too, its own way."""
    try:
        return int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        return os.getpid()


def environ_entries(path):
    """(state, entries) for an environ file: "absent" (no such process), "refused" (opening or
    reading it was refused) or "read", with its NAME=VALUE entries as a set of bytes. The set
    lives only as long as the comparison that needs it: no value is kept or reported."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        gone = exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ESRCH)
        return ("absent" if gone else "refused"), None
    chunks, size = [], 0
    try:
        while size < MAX_ENVIRON_BYTES:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return "refused", None
    finally:
        os.close(fd)
    return "read", {entry for entry in b"".join(chunks).split(b"\0") if entry}


def environ_dict(entries):
    found = {}
    for entry in entries:
        name, _, value = entry.partition(b"=")
        if name not in SHELL_BOOKKEEPING:
            found[name] = value
    return found


def extra_entries(theirs, ours):
    """How many variables another process holds beyond this one's, and the secret-looking names
    among them. Beyond means a name this process lacks, or a secret-looking name whose value
    differs (a wrapper that swapped a key for a decoy leaves the key with its parent). A helper
    of the sandbox's own (its init, a wrapper, a proxy bridge) started with this environment, or
    one a wrapper only adjusted (codex prepends to PATH), holds nothing more."""
    their_values, our_values = environ_dict(theirs), environ_dict(ours)
    names = []
    for name, value in their_values.items():
        text = name.decode("utf-8", "replace")
        swapped = our_values.get(name, value) != value and looks_like_secret_name(text)
        if name not in our_values or swapped:
            names.append(text)
    return len(names), {clean_text(n, 200) for n in names if looks_like_secret_name(n)}


def section_proc_environ(settings):
    own = proc_self_pid()
    try:
        own_tasks = {int(name) for name in os.listdir("/proc/self/task") if name.isdigit()}
    except OSError:
        own_tasks = set()
    state, ours = environ_entries("/proc/self/environ")
    if ours is None:
        raise OSError(errno.EACCES, "this process's own environ could not be read")
    pid1_is_self = own == 1
    checked = readable = holding_more = 0
    others_names = set()
    for pid in numeric_proc_entries():
        if checked >= MAX_OTHER_PIDS:
            break
        # The probe, its threads and its children (the namespace test) are not "others".
        if pid in (1, own) or pid in own_tasks or parent_pid(pid) == own:
            continue
        state, theirs = environ_entries("/proc/%d/environ" % pid)
        if state == "absent" or (state == "read" and not theirs):
            continue  # ended meanwhile, or a kernel thread (no environment at all)
        checked += 1
        if state == "read":
            readable += 1
            count, names = extra_entries(theirs, ours)
            holding_more += int(count > 0)
            others_names |= names
    pid1 = {"readable": None, "holds_more": None, "extra": None, "names": set()}  # type: dict
    if not pid1_is_self:
        state, theirs = environ_entries("/proc/1/environ")
        pid1["readable"] = None if state == "absent" else state == "read"
        if theirs is not None:
            count, pid1["names"] = extra_entries(theirs, ours)
            pid1.update(holds_more=count > 0, extra=count)
    theirs = ours = None
    return {
        "pid1_is_self": pid1_is_self,
        "pid1_environ_readable": pid1["readable"],
        "pid1_holds_more": pid1["holds_more"],
        "pid1_extra_entries": pid1["extra"],
        "pid1_extra_secret_names": sorted(pid1["names"])[:MAX_REPORTED_NAMES],
        "others_checked": checked,
        "others_readable": readable,
        "others_holding_more": holding_more,
        "others_extra_secret_names": sorted(others_names)[:MAX_REPORTED_NAMES],
    }


def unescape_mount_field(text):
    """mountinfo writes space, tab, newline and backslash in a path as \\NNN (octal)."""
    if "\\" not in text:
        return text
    parts, index = [], 0
    while index < len(text):
        code = text[index + 1 : index + 4]
        if text[index] == "\\" and len(code) == 3 and set(code) <= OCTAL_DIGITS:
            parts.append(chr(int(code, 8)))
            index += 4
        else:
            parts.append(text[index])
            index += 1
    return "".join(parts)


def read_mounts():
    """Mounts from /proc/self/mountinfo, in mount order, as dicts: device (major:minor), root,
    mountpoint, options, fstype, super."""
    mounts = []
    for line in read_lines("/proc/self/mountinfo"):
        left, separator, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not separator or len(fields) < 6 or not tail:
            continue
        mounts.append(
            {
                "device": fields[2],
                "root": unescape_mount_field(fields[3]),
                "mountpoint": unescape_mount_field(fields[4]),
                "options": fields[5].split(","),
                "fstype": tail[0],
                "super": tail[2].split(",") if len(tail) > 2 else [],
            }
        )
    return mounts


def setuid_binaries():
    found, seen = [], set()
    for path in SETUID_CANDIDATES:
        try:
            info = os.stat(path)
        except OSError:
            continue
        if info.st_mode & stat.S_ISUID and (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            found.append(path)
    return found


def is_scratch_mount(mount, mounts):
    """A tmpfs (or ramfs) made for the sandbox: mounted from its own root and seen nowhere else.
    What is written there vanishes with it, so it masks the host's directory rather than writing
    it. The same filesystem mounted at a second place (the host's /dev/shm bound over /root, say)
    is shared with something outside, and is not a mask; `mounts` includes hidden mounts, since a
    sandbox's copy of the host's mount tree still lists the host's own, under its new ones."""
    if mount is None or mount["fstype"] not in SCRATCH_FILESYSTEMS or mount["root"] != "/":
        return False
    inside = mount["mountpoint"].rstrip("/") + "/"
    return all(
        other["device"] != mount["device"]
        or other["mountpoint"] == mount["mountpoint"]
        or other["mountpoint"].startswith(inside)
        for other in mounts
    )


def section_filesystem(settings):
    every_mount = read_mounts()
    mounts = visible_mounts(every_mount)
    writable_dirs = []
    for path in WRITABLE_DIRS:
        writable, code = create_marker(path)
        entry = {"path": path, "writable": writable, "errno": code}
        if writable:
            mount = mount_holding(os.path.realpath(path), mounts)
            entry["fstype"] = mount["fstype"] if mount else None
            entry["scratch_mount"] = is_scratch_mount(mount, every_mount)
        writable_dirs.append(entry)
    root_options = [m["options"] for m in mounts if m["mountpoint"] == "/"]
    host_mounts = [
        {
            "mountpoint": clean_text(m["mountpoint"]),
            "fstype": m["fstype"],
            "rw": "rw" in m["options"],
            "root": clean_text(m["root"]),
            # A mount read-write at the mount level can still refuse this process (its owner,
            # Landlock, a seccomp rule): whether a write lands is tried, as for the system paths.
            "writable": "rw" in m["options"] and path_writable(
                m["mountpoint"], os.path.isdir(m["mountpoint"])
            ),
        }
        for m in mounts
        if m["fstype"] in BLOCK_FILESYSTEMS and m["mountpoint"] != "/"
    ][:64]
    return {
        "writable_dirs": writable_dirs,
        "root_rw": "rw" in root_options[-1] if root_options else None,
        "root_scratch_mount": is_scratch_mount(mount_holding("/", mounts), every_mount),
        "host_mounts": host_mounts,
        "host_root_mounted": [m["mountpoint"] for m in host_mounts if m["root"] == "/"],
        "sysrq_writable": can_open("/proc/sysrq-trigger", os.O_WRONLY),
        "proc_sys_writable": [p for p in PROC_SYS_FILES if can_open(p, os.O_WRONLY)],
        "core_pattern_writable": can_open(CORE_PATTERN, os.O_WRONLY),
        "setuid_binaries": setuid_binaries(),
    }


def own_pid_namespace():
    """True when the probe has a pid namespace of its own; None when that cannot be told."""
    nspid = parse_status_file("/proc/self/status").get("NSpid", "").split()
    if len(nspid) > 1:
        return True
    try:
        return os.readlink("/proc/self/ns/pid") != INITIAL_PID_NAMESPACE
    except OSError:
        return None


def section_processes(settings):
    comm = read_text("/proc/1/comm", 256)
    return {
        "visible_pids": len(numeric_proc_entries()),
        "own_pid_namespace": own_pid_namespace(),
        # A /proc mounted from another pid namespace (the host's, bound in) numbers this
        # process differently from getpid(), and lists that namespace's processes.
        "proc_is_foreign": proc_self_pid() != os.getpid(),
        "proc_shows_host": proc_shows_host(),
        "pid1_comm": clean_text(comm.strip(), 64) if comm else None,
    }


# PF_KTHREAD in the flags field of /proc/PID/stat: set on kernel threads only.
PF_KTHREAD = 0x00200000


def proc_shows_host():
    """Whether the mounted /proc lists the host's processes: kernel threads (kthreadd is pid 2)
    exist only in the initial pid namespace. A sandbox nested in pid namespaces of its own (srt
    runs its command in a second one under bwrap's) shows its own helpers under the outer /proc,
    not the host's. The kernel-thread flag decides, not pid 2's missing parent: where the probe
    is pid 1 of a new namespace (systemd-nspawn --pipe, bwrap --as-pid-1), its own first thread
    is /proc/2 and its parent, outside, reads as 0 too. None when /proc cannot be read at all."""
    stat_line = read_text("/proc/2/stat", 4096)
    if stat_line is None:
        return False if existence("/proc/self")[0] else None
    fields = stat_line.rpartition(")")[2].split()
    try:
        return fields[1] == "0" and int(fields[6]) & PF_KTHREAD != 0
    except (IndexError, ValueError):
        return None


def section_persistence(settings):
    homes = home_dirs(settings.environ)
    mounts = visible_mounts(read_mounts())
    targets = []
    for relative, kind in PERSISTENCE_TARGETS:
        for via, path, exists in home_file_candidates(relative, homes):
            # O_APPEND without O_CREAT: a missing file is never made, an existing one unchanged.
            appendable = bool(exists) and can_open(path, os.O_WRONLY | os.O_APPEND) is True
            target = {
                "path": relative,
                "kind": kind,
                "exists": exists,
                "appendable": appendable,
                "via": via,
            }
            if appendable:
                # Where it lies: whoever measures can tell the sandbox's own volume (which
                # only its own later runs read) from a directory of the host's.
                mount = mount_holding(os.path.realpath(path), mounts)
                target["mount"] = None
                if mount:
                    target["mount"] = {
                        "mountpoint": clean_text(mount["mountpoint"]),
                        "root": clean_text(mount["root"]),
                    }
            targets.append(target)
    hooks_exist = os.path.isdir(GIT_HOOKS_DIR)
    return {
        "targets": targets,
        "git_hooks": {
            "path": GIT_HOOKS_DIR,
            "exists": hooks_exist,
            "writable": hooks_exist and create_marker(GIT_HOOKS_DIR)[0],
            # A tmpfs here is a mask: what is written vanishes with the sandbox, the host's
            # hooks stay as they were.
            "fstype": mount_fstype(os.path.abspath(GIT_HOOKS_DIR)) if hooks_exist else None,
        },
    }


def visible_mounts(mounts):
    """The mounts not hidden by a later mount on the same point or on a directory above it
    (mountinfo lists them in mount order, a parent before what is mounted under it)."""
    visible = []  # type: list
    for mount in mounts:
        point = mount["mountpoint"]
        below = point.rstrip("/") + "/"
        visible = [
            m for m in visible if m["mountpoint"] != point and not m["mountpoint"].startswith(below)
        ]
        visible.append(mount)
    return visible


def mount_holding(path, mounts):
    """The mount that holds path: the longest mountpoint prefix, the last one mounted there."""
    best, best_length = None, -1
    for mount in mounts:
        point = mount["mountpoint"].rstrip("/") or "/"
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best_length:
            best, best_length = mount, len(point)
    return best


def mount_fstype(path):
    """The filesystem type of the mount holding path."""
    mount = mount_holding(path, visible_mounts(read_mounts()))
    return mount["fstype"] if mount else None


def own_cgroups():
    """({v1 controller: path}, v2 path or None) from /proc/self/cgroup."""
    v1, v2 = {}, None
    for line in read_lines("/proc/self/cgroup"):
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            v2 = path
        else:
            for controller in controllers.split(","):
                v1[controller] = path
    return v1, v2


def leading_ups(parts):
    count = 0
    while count < len(parts) and parts[count] == "..":
        count += 1
    return count


def directories_at_depth(base, depth):
    """Directories exactly `depth` levels below base (at most MAX_CGROUP_CANDIDATES)."""
    level = [base]
    for _ in range(depth):
        below = []
        for directory in level:
            try:
                with os.scandir(directory) as entries:
                    below += [e.path for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
            if len(below) > MAX_CGROUP_CANDIDATES:
                return []
        level = below
    return level


def holds_this_process(directory):
    procs = read_text(os.path.join(directory, "cgroup.procs"), 1 << 20)
    return procs is not None and str(os.getpid()) in procs.split()


def cgroup_directory(mount, path):
    """Where the probe's cgroup `path` (from /proc/self/cgroup) sits under this mount, or None.

    /proc/self/cgroup gives paths relative to the probe's cgroup namespace, and mountinfo gives
    the mount's root relative to it too. A cgroup filesystem mounted before the namespace was
    made (the host's, bound into a sandbox) has its root above the namespace's: "/.." per level.
    The names of those levels are not shown, so the directory is found by looking for this
    process in the cgroup.procs of every cgroup that deep."""
    root_parts = [p for p in mount["root"].split("/") if p]
    path_parts = [p for p in path.split("/") if p]
    ups = leading_ups(root_parts)
    if ups == 0:
        if path_parts[: len(root_parts)] != root_parts:
            return None
        return os.path.join(mount["mountpoint"], *path_parts[len(root_parts) :])
    path_ups = leading_ups(path_parts)
    if ups != len(root_parts) or path_ups > ups:
        return None  # the mount shows a branch beside this namespace, not above it
    rest = path_parts[path_ups:]
    found = [
        os.path.join(candidate, *rest)
        for candidate in directories_at_depth(mount["mountpoint"], ups - path_ups)
        if holds_this_process(os.path.join(candidate, *rest))
    ]
    return found[0] if len(found) == 1 else None


def cgroup_chain(mount, directory):
    """A cgroup directory under this mount and every ancestor up to the mount."""
    chain = [os.path.normpath(directory)]
    while len(chain[-1]) > len(mount["mountpoint"]) and chain[-1] != "/":
        chain.append(os.path.dirname(chain[-1]))
    return chain


def limit_files(mounts):
    """([(file, kind)] for every memory and pids limit that applies to the probe, {kind: True
    when the probe's cgroup for that controller was found under a mounted cgroup filesystem,
    False when such a filesystem is mounted but the cgroup could not be found in it, None when
    no cgroup filesystem carrying that controller is mounted at all})."""
    v1, v2 = own_cgroups()
    files = []  # type: list
    found = {"memory": None, "pids": None}  # type: dict

    def add(kind, mount, directory, name):
        if directory is None:
            found[kind] = found[kind] or False
            return
        found[kind] = True
        files.extend((d + "/" + name, kind) for d in cgroup_chain(mount, directory))

    for mount in mounts:
        if mount["fstype"] == "cgroup2" and v2 is not None:
            controllers = read_text(mount["mountpoint"] + "/cgroup.controllers", 4096) or ""
            wanted = [k for k in ("memory", "pids") if k in controllers.split()]
            directory = cgroup_directory(mount, v2) if wanted else None
            for kind in wanted:
                add(kind, mount, directory, kind + ".max")
        elif mount["fstype"] == "cgroup":
            for kind, name in (("memory", "memory.limit_in_bytes"), ("pids", "pids.max")):
                if kind in mount["super"] and kind in v1:
                    add(kind, mount, cgroup_directory(mount, v1[kind]), name)
    return files, found


def read_limit(path, absurd):
    text = (read_text(path, 64) or "").strip()
    if not text.isdigit() or int(text) >= absurd:
        return None  # "max", unreadable, or a number that means unlimited
    return int(text)


def rlimit_nproc():
    try:
        import resource
    except ImportError:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    return None if soft == resource.RLIM_INFINITY or soft < 0 else soft


def section_resources(settings):
    limits = {"memory": [], "pids": []}  # type: dict
    files, found = limit_files(visible_mounts(read_mounts()))
    for path, kind in files:
        value = read_limit(path, ABSURD_MEMORY_LIMIT if kind == "memory" else PID_MAX_LIMIT)
        if value is not None:
            limits[kind].append(value)
    return {
        "memory_limit": min(limits["memory"]) if limits["memory"] else None,
        "pids_limit": min(limits["pids"]) if limits["pids"] else None,
        "rlimit_nproc": rlimit_nproc(),
        "cgroup_found": found,
    }


MAX_ASSERT_PATHS = 200


def path_writable(path, is_dir):
    """A directory: one zero-byte marker made and removed. A file: opened for appending (never
    created, nothing written) and closed, so its content and mtime stay as they were."""
    if is_dir:
        return create_marker(path)[0]
    return bool(can_open(path, os.O_WRONLY | os.O_APPEND))


def assert_path_entry(path):
    exists, _ = existence(path)
    entry = {
        "path": clean_text(path),
        "exists": exists,
        "kind": None,
        "readable": None,
        "writable": None,
    }
    if exists:
        is_dir = os.path.isdir(path)
        entry["kind"] = "dir" if is_dir else "file"
        entry["readable"] = is_readable(path)
        entry["writable"] = path_writable(path, is_dir)
    elif exists is False:
        entry["readable"] = entry["writable"] = False
    return entry


def section_paths(settings):
    """Paths named by AGENTSEC_PROBE_PATHS (a JSON list), for `agentsec assert`."""
    raw = settings.environ.get("AGENTSEC_PROBE_PATHS")
    if not raw:
        return {"requested": False, "entries": []}
    paths = json_value(raw)
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        raise ValueError("AGENTSEC_PROBE_PATHS must be a JSON list of strings")
    return {"requested": True, "entries": [assert_path_entry(p) for p in paths[:MAX_ASSERT_PATHS]]}


SECTIONS = (
    ("identity", section_identity),
    ("namespaces", section_namespaces),
    ("network", section_network),
    ("proxy", section_proxy),
    ("secrets_env", section_secrets_env),
    ("credentials", section_credentials),
    ("project_credentials", section_project_credentials),
    ("sockets", section_sockets),
    ("keyring", section_keyring),
    ("proc_environ", section_proc_environ),
    ("filesystem", section_filesystem),
    ("processes", section_processes),
    ("persistence", section_persistence),
    ("resources", section_resources),
    ("paths", section_paths),
)
SECTION_NAMES = tuple(name for name, _ in SECTIONS)

# ---------------------------------------------------------------------------------------------
# The run: settings, context, sections under one deadline, one JSON line.
# ---------------------------------------------------------------------------------------------
CONTEXT_JOB = "__context__"


def collect_context(settings):
    entry = passwd_entry()
    try:
        cwd = clean_text(os.getcwd(), 1000)
    except OSError:
        cwd = None
    home = settings.environ.get("HOME")
    return {
        "hostname": clean_text(socket.gethostname(), 255),
        "cwd": cwd,
        "user": clean_text(entry.pw_name, 64) if entry else None,
        "uid": os.getuid(),
        "gid": os.getgid(),
        "home": clean_text(home, 1000) if home is not None else None,
        "passwd_home": clean_text(entry.pw_dir, 1000) if entry else None,
    }


def read_timeout(environ):
    try:
        value = float(environ.get("AGENTSEC_PROBE_TIMEOUT", DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S
    if not math.isfinite(value) or value <= 0:
        return DEFAULT_TIMEOUT_S
    return min(value, MAX_TIMEOUT_S)


def requested_faults(environ):
    wanted = {name.strip() for name in environ.get("AGENTSEC_PROBE_FAULT", "").split(",")}
    return [name for name in SECTION_NAMES if name in wanted]


def selected_sections(environ):
    """AGENTSEC_PROBE_ONLY=name[,name] runs only those sections (agentsec assert runs only
    'paths', so asking about a file never touches the network); unset, all of them run."""
    wanted = {name.strip() for name in environ.get("AGENTSEC_PROBE_ONLY", "").split(",")}
    wanted.discard("")
    if not wanted:
        return SECTION_NAMES
    return tuple(name for name in SECTION_NAMES if name in wanted)


def guarded(name, function, settings):
    def run():
        if name in settings.faults:
            raise RuntimeError("fault injected by AGENTSEC_PROBE_FAULT")
        return function(settings)

    return run


def section_report(outcome):
    if outcome is None:
        return {
            "ok": False,
            "timed_out": True,
            "error": "TimeoutError: section did not finish before the deadline",
        }
    kind, value = outcome
    if kind == "raised":
        return {"ok": False, "error": describe_exception(value), "timed_out": False}
    return {"ok": True, "data": value}


def run_all(settings):
    selected = selected_sections(settings.environ)
    jobs = [
        (name, guarded(name, function, settings)) for name, function in SECTIONS if name in selected
    ]
    jobs.append((CONTEXT_JOB, lambda: collect_context(settings)))
    outcomes = run_concurrently(jobs, settings.section_deadline)
    sections = {name: section_report(outcomes.get(name)) for name in selected}
    context = outcomes.get(CONTEXT_JOB)
    if context is None or context[0] != "value":
        context = ("value", {"error": "context could not be collected"})
    return sections, context[1]


JSON_ESCAPES = {
    "\\": "\\\\",
    '"': '\\"',
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
}


def json_string(text):
    """A JSON string in ASCII: what is not printable ASCII is escaped, as json.dumps would."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return '"' + text + '"'
    parts = []
    for character in text:
        if character in JSON_ESCAPES:
            parts.append(JSON_ESCAPES[character])
        elif " " <= character <= "~":
            parts.append(character)
        elif ord(character) > 0xFFFF:
            code = ord(character) - 0x10000
            parts.append("\\u%04x\\u%04x" % (0xD800 | code >> 10, 0xDC00 | code & 0x3FF))
        else:
            parts.append("\\u%04x" % ord(character))
    return '"' + "".join(parts) + '"'


def json_text(value):
    """The probe's output as compact JSON (json.dumps with separators (",", ":"))."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "null"
    if isinstance(value, dict):
        return "{%s}" % ",".join(json_string(str(k)) + ":" + json_text(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "[%s]" % ",".join(json_text(item) for item in value)
    return json_string(value if isinstance(value, str) else str(value))


def build_settings(environ, started):
    timeout = read_timeout(environ)
    targets, overridden, targets_error = load_targets(environ)
    settings = Settings(
        environ=environ,
        timeout=timeout,
        budget_end=started + timeout,
        section_deadline=started + timeout + DEADLINE_SLACK_S - OUTPUT_RESERVE_S,
        targets=targets,
        targets_error=targets_error,
        faults=requested_faults(environ),
    )
    return settings, overridden


def main():
    started = time.monotonic()
    # stdout carries only the JSON line and stderr stays quiet, even if a newer Python warns.
    warnings.simplefilter("ignore")
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    settings, overridden = build_settings(dict(os.environ), started)
    sections, context = run_all(settings)
    targets_report = {"overridden": overridden, "error": settings.targets_error}
    targets_report.update(settings.targets)
    report = {
        "probe_format": PROBE_FORMAT,
        "probe_version": PROBE_VERSION,
        "python": "%d.%d.%d" % sys.version_info[:3],
        "platform": sys.platform,
        "started_at": started_at,
        "elapsed_s": round(time.monotonic() - started, 3),
        "deadline_s": settings.timeout + DEADLINE_SLACK_S,
        "targets": targets_report,
        "faults_injected": settings.faults,
        "context": context,
        "sections": sections,
    }
    try:
        sys.stdout.write(json_text(report) + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        os._exit(1)
    # os._exit: a daemon thread stuck in getaddrinfo must not hold the exit up.
    os._exit(0)


if __name__ == "__main__":
    main()
