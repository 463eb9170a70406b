"""One small detector per finding ID: reads the probe's facts, returns a Hit or nothing.

Titles, weights, axes and remediation are data (``data/findings.json``); this module holds only
the rule that decides whether a finding fires. A detector that needs a fact the probe could not
establish raises ``CannotTell``: the finding's axis then reads "not measured", never "sealed".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from agentsec.catalogue import Severity
from agentsec.untrusted import ProbeOutput


class CannotTell(Exception):
    """The probe did not establish a fact this detector needs."""


class SectionFailed(CannotTell):
    """A section the detector reads crashed or timed out inside the probe."""


@dataclass(frozen=True)
class Hit:
    # What is exposed, by kind: a host, a path, a variable name. Baselines compare these, so an
    # item never carries a count that moves with host activity (processes running, keys held).
    evidence: tuple[str, ...]
    # Only for findings whose catalogue severity is "varies": the evidence items that decide it.
    severity_keys: tuple[str, ...] = ()
    # Overrides the catalogue severity when the context makes a finding weaker (never stronger).
    severity_cap: Severity | None = None
    # Counts and context for a reader; never compared by a baseline.
    detail: tuple[str, ...] = ()


class Facts:
    """Typed, defensive access to a probe output's sections (the output is untrusted)."""

    def __init__(self, probe: ProbeOutput) -> None:
        self._probe = probe

    def section(self, name: str) -> dict[str, Any]:
        result = self._probe.sections.get(name)
        if result is None:
            raise SectionFailed(f"section {name!r} is missing from the probe output")
        if not result.ok:
            why = "timed out" if result.timed_out else (result.error or "failed")
            raise SectionFailed(f"section {name!r} {why}")
        return result.data

    def value(self, section: str, key: str, kind: type | tuple[type, ...]) -> Any:
        """A value that must be present; null or a wrong type means the probe could not tell."""
        value = self.section(section).get(key)
        if value is None:
            raise CannotTell(f"{section}.{key} was not established")
        if isinstance(value, bool) and kind is int:
            raise CannotTell(f"{section}.{key} is malformed")
        if not isinstance(value, kind):
            raise CannotTell(f"{section}.{key} is malformed")
        return value

    def optional(self, section: str, key: str, kind: type | tuple[type, ...]) -> Any:
        value = self.section(section).get(key)
        return value if isinstance(value, kind) else None

    def records(self, section: str, key: str) -> list[dict[str, Any]]:
        value = self.section(section).get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise CannotTell(f"{section}.{key} is malformed")
        return [item for item in value if isinstance(item, dict)]


Detector = Callable[[Facts], "Hit | None"]  # a string: `X | None` is 3.10's at run time


@dataclass(frozen=True)
class DetectorEntry:
    finding_id: str
    sections: tuple[str, ...]
    detect: Detector


class DetectorRegistry:
    """Detectors by finding ID; built by ``build_registry`` so each caller gets its own."""

    def __init__(self) -> None:
        self._entries: dict[str, DetectorEntry] = {}

    def add(self, finding_id: str, sections: tuple[str, ...], detect: Detector) -> None:
        if finding_id in self._entries:
            raise ValueError(f"two detectors for {finding_id}")
        self._entries[finding_id] = DetectorEntry(finding_id, sections, detect)

    def entries(self) -> Iterable[DetectorEntry]:
        return self._entries.values()

    def ids(self) -> set[str]:
        return set(self._entries)


def _hit(items: Iterable[str]) -> Hit | None:
    evidence = tuple(sorted(set(items)))
    return Hit(evidence) if evidence else None


def _target(record: dict[str, Any]) -> str:
    host, port = record.get("host"), record.get("port")
    return f"{host}:{port}" if port is not None else str(host)


# --- privilege -----------------------------------------------------------------------------


def _euid(facts: Facts) -> int:
    return facts.value("identity", "euid", int)


def _in_userns(facts: Facts) -> bool:
    return facts.value("identity", "in_user_namespace", bool)


def _user_space_kernel(facts: Facts) -> str | None:
    """The user-space kernel (gVisor) that serves the sandbox's system calls, if one does: its
    root, capabilities, sysctls, namespaces and io_uring are its own, not the host kernel's,
    and the Sentry reaches the host only through its own filtered calls, as an unprivileged
    user in a user namespace of its own. (Older probes did not say: None.)"""
    return facts.optional("identity", "user_space_kernel", str)


def real_root(facts: Facts) -> Hit | None:
    if _euid(facts) == 0 and not _in_userns(facts) and not _user_space_kernel(facts):
        return Hit(("euid 0 in the initial user namespace",))
    return None


def userns_root(facts: Facts) -> Hit | None:
    if _euid(facts) != 0:
        return None
    kernel = _user_space_kernel(facts)
    if kernel:
        return Hit((f"euid 0 of {kernel}'s user-space kernel, not the host's",))
    if _in_userns(facts):
        return Hit(("euid 0 inside a user namespace",))
    return None


def host_uid(uid_map: str, uid: int) -> int | None:
    """The parent namespace's uid for ``uid`` under a /proc/self/uid_map text, if mapped."""
    for line in uid_map.splitlines():
        parts = line.split()
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            continue
        inside, outside, count = (int(p) for p in parts)
        if inside <= uid < inside + count:
            return outside + (uid - inside)
    return None


def mapped_to_host_root(facts: Facts) -> Hit | None:
    """Host root is our uid, through however many user namespaces.

    /proc/self/uid_map is relative to the parent namespace, which bubblewrap itself nests, so
    it cannot say this. Two kernel facts can: a sysctl file is owned by host root, so it shows
    as our euid when host root maps to us (and as the overflow uid when host root is not mapped
    at all); and the kernel lets only host root open a sysctl such as core_pattern for writing.
    The second still tells when our euid is the overflow uid itself, where ownership cannot.
    """
    if not _in_userns(facts):
        return None
    euid = _euid(facts)
    if facts.optional("identity", "kernel_file_writable", bool):
        return Hit(
            (f"uid {euid} here is uid 0 on the host (a host-root-only sysctl opens for writing)",)
        )
    owner = facts.optional("identity", "kernel_file_owner", int)
    overflow = facts.optional("identity", "overflow_uid", int)
    if owner is None or overflow is None or euid == overflow:
        return None
    if owner == euid:
        return Hit((f"uid {euid} here is uid 0 on the host (host-root-owned files are ours)",))
    return None


def io_uring(facts: Facts) -> Hit | None:
    """io_uring's operations (open, connect, socket...) are carried out by the kernel without
    passing through the syscall entry a seccomp filter inspects, so a filter that refuses
    socket() does not refuse IORING_OP_SOCKET. Under a filter that is a hole in it; without one
    it is still one of the kernel's largest attack surfaces."""
    if _user_space_kernel(facts):
        return None  # the user-space kernel's own io_uring, which no host filter guards
    state = facts.optional("identity", "io_uring", dict)
    if state is None:
        raise CannotTell("io_uring was not tried (an older probe, or unknown syscall numbers here)")
    result = state.get("result")
    if result in ("refused", "unavailable"):
        return None
    if result != "creatable":
        raise CannotTell(f"io_uring setup failed in an unexpected way ({state.get('errno')})")
    seccomp = facts.optional("identity", "seccomp", int)
    if seccomp:
        return Hit(
            (
                "io_uring instances can be created",
                "a seccomp filter is active: io_uring bypasses it",
            ),
            severity_keys=("bypasses-seccomp",),
        )
    return Hit(("io_uring instances can be created",), severity_keys=("no-filter",))


def dangerous_capabilities(facts: Facts) -> Hit | None:
    caps = facts.value("identity", "caps", list)
    names = tuple(sorted({c for c in caps if isinstance(c, str)}))
    if not names:
        return None
    # Capabilities held only inside a user namespace act on that namespace's own objects; they
    # widen the kernel's attack surface but do not reach host resources, hence the lower cap.
    # Under a user-space kernel they act on that kernel's objects only.
    confined = _in_userns(facts) or bool(_user_space_kernel(facts))
    cap: Severity | None = "low" if confined else None
    return Hit(names, severity_keys=names, severity_cap=cap)


def no_seccomp(facts: Facts) -> Hit | None:
    if _user_space_kernel(facts):
        return None  # no call of the sandbox's reaches the host kernel's syscall table
    mode = facts.value("identity", "seccomp", int)
    return Hit(("Seccomp: 0",)) if mode == 0 else None


def no_new_privs_unset(facts: Facts) -> Hit | None:
    if facts.value("identity", "no_new_privs", bool) is False:
        return Hit(("NoNewPrivs: 0",))
    return None


def namespaces_creatable(facts: Facts) -> Hit | None:
    if _user_space_kernel(facts):
        return None  # the user-space kernel's namespaces: none of the host kernel's code
    if not facts.value("namespaces", "user_ns_creatable", bool):
        return None
    evidence = ["can create a user namespace"]
    if facts.optional("namespaces", "mount_in_new_ns", bool):
        evidence.append("can mount inside it")
    return Hit(tuple(evidence))


def no_mac_profile(facts: Facts) -> Hit | None:
    apparmor = facts.optional("identity", "apparmor", str)
    if apparmor and apparmor.strip() not in ("unconfined", ""):
        return None
    abi = facts.optional("identity", "landlock_abi", int)
    note = f"Landlock ABI {abi} available in the kernel" if abi else "Landlock not available"
    return Hit(("AppArmor: unconfined or absent", note))


# --- network -------------------------------------------------------------------------------


def intercepted_ports(facts: Facts) -> set[int]:
    """Ports on which a connect to an address nobody routes still completed: a transparent
    proxy answers every address there, so a completed connect on them proves no egress."""
    return {
        r["port"]
        for r in facts.records("network", "interception_control")
        if r.get("result") == "connected" and isinstance(r.get("port"), int)
    }


def _connected(facts: Facts, key: str, kind: str | None = None) -> list[str]:
    """Targets the probe connected to, minus those on intercepted ports. What passes through an
    interceptor is measured through the configured proxy (NET-007/008/010); with no proxy to ask,
    the probe cannot tell, and says so."""
    intercepted = intercepted_ports(facts)
    hits = [
        r
        for r in facts.records("network", key)
        if r.get("result") == "connected" and (kind is None or r.get("kind") == kind)
    ]
    through_interceptor = any(r.get("port") in intercepted for r in hits)
    if through_interceptor and not facts.optional("proxy", "configured", bool):
        raise CannotTell(
            "a transparent proxy answers every address on ports "
            f"{sorted(intercepted)} and no proxy is configured to ask what it forwards"
        )
    return [_target(r) for r in hits if r.get("port") not in intercepted]


def egress_connects(facts: Facts) -> Hit | None:
    if not facts.records("network", "targets"):
        raise CannotTell("network.targets is empty")
    return _hit(_connected(facts, "targets", "egress"))


def metadata_reachable(facts: Facts) -> Hit | None:
    return _hit(_connected(facts, "targets", "metadata"))


def transparent_interception(facts: Facts) -> Hit | None:
    ports = sorted(intercepted_ports(facts))
    if ports:
        return Hit((f"TCP {', '.join(map(str, ports))} to any address ends at a local proxy",))
    return None


def no_network(facts: Facts) -> Hit | None:
    if facts.value("network", "no_route", bool) and not _connected(facts, "targets"):
        return Hit(("no default route for IPv4 or IPv6",))
    return None


def dns_channel(facts: Facts) -> Hit | None:
    control = facts.value("network", "dns_control", dict)
    if control.get("lookup") == "ok" and control.get("public") is True:
        return Hit((f"{control.get('name')} resolves to a public address",))
    return None


def udp_egress(facts: Facts) -> Hit | None:
    udp = facts.value("network", "udp_dns", dict)
    if udp.get("result") == "answered":
        return Hit((f"{_target(udp)} answered a DNS question over UDP",))
    return None


def ipv6_egress(facts: Facts) -> Hit | None:
    return _hit(_connected(facts, "ipv6"))


def docker_tcp(facts: Facts) -> Hit | None:
    record = facts.optional("network", "docker_tcp", dict)
    if record and record.get("result") == "connected":
        return Hit(("the default gateway accepts connections on TCP 2375",))
    return None


def _proxy_results(facts: Facts) -> list[dict[str, Any]]:
    """The proxy's answers, or CannotTell when the probe could not ask it properly."""
    if not facts.value("proxy", "configured", bool):
        return []
    results = facts.records("proxy", "results")
    if any(r.get("result") == "unsupported" for r in results):
        raise CannotTell("the configured proxy speaks a protocol the probe does not (SOCKS)")
    if any(r.get("result") == "auth_required" for r in results) and not facts.optional(
        "proxy", "auth_sent", bool
    ):
        raise CannotTell(
            "the proxy demands credentials; AGENTSEC_PROBE_PROXY_AUTH=1 lets the probe send them"
        )
    if not any(isinstance(r.get("status"), int) for r in results):
        # No status line at all: the proxy was not reached, or closed without answering. Nothing
        # was learnt about what it forwards, which is not the same as "it forwards nothing".
        raise CannotTell("the configured proxy answered none of the probe's requests")
    return results


def proxy_open(facts: Facts) -> Hit | None:
    results = _proxy_results(facts)
    return _hit(_target(r) for r in results if r.get("control") and r.get("result") == "tunnel")


def proxy_allowlisted(facts: Facts) -> Hit | None:
    results = _proxy_results(facts)
    if any(r.get("control") and r.get("result") == "tunnel" for r in results):
        return None  # NET-007 already says more
    return _hit(_target(r) for r in results if not r.get("control") and r.get("result") == "tunnel")


def proxy_refuses(facts: Facts) -> Hit | None:
    results = _proxy_results(facts)
    if results and all(r.get("result") == "refused" for r in results):
        return Hit(tuple(sorted({f"{_target(r)} -> {r.get('status')}" for r in results})))
    return None


# --- secrets -------------------------------------------------------------------------------


def _runtime_sockets(facts: Facts, results: tuple[str, ...]) -> list[dict[str, Any]]:
    return [r for r in facts.records("sockets", "runtime") if r.get("result") in results]


def runtime_socket(facts: Facts) -> Hit | None:
    return _hit(
        f"{r.get('path')}{' (rootless)' if r.get('rootless') else ''}"
        for r in _runtime_sockets(facts, ("connected",))
    )


def runtime_socket_refused(facts: Facts) -> Hit | None:
    refused = _runtime_sockets(facts, ("denied", "refused"))
    if not refused:
        return None
    control = facts.optional("sockets", "control", dict) or {}
    scope = (
        "the refusal covers every unix-socket connect (blanket rule)"
        if control.get("own_socket") == "denied"
        else "the refusal is specific to these paths (the probe's own socket connects)"
    )
    return Hit((*sorted(str(r.get("path")) for r in refused), scope))


def secret_env_names(facts: Facts) -> Hit | None:
    # agentcage placeholders are decoys the gateway swaps on the wire: nothing to steal. The
    # password of the sandbox's own egress proxy opens only that proxy, already open to it.
    return _hit(
        str(r.get("name"))
        for r in facts.records("secrets_env", "names")
        if r.get("placeholder") is not True and r.get("proxy_credential") is not True
    )


def _readable_files(facts: Facts) -> list[dict[str, Any]]:
    return [r for r in facts.records("credentials", "files") if r.get("readable") is True]


# Configuration that is readable but holds no credential: ~/.gitconfig names a user (a helper it
# names is found through ~/.git-credentials); an .npmrc counts only when it names a token.
_NOT_CREDENTIALS = frozenset({"~/.gitconfig", "/etc/shadow"})


def credential_files(facts: Facts) -> Hit | None:
    return _hit(
        str(r.get("path"))
        for r in _readable_files(facts)
        if not r.get("agent_login")
        and r.get("path") not in _NOT_CREDENTIALS
        and r.get("holds_token") is not False
    )


def agent_login_files(facts: Facts) -> Hit | None:
    # Claude Code's ~/.claude.json counts when it holds a saved key, or when that cannot be told
    # (an older probe did not say): otherwise it holds settings and onboarding answers.
    return _hit(str(r.get("path")) for r in _readable_files(facts)
                if r.get("agent_login") and r.get("holds_token") is not False)


def project_credential_files(facts: Facts) -> Hit | None:
    # A file in the project counts when it opens and holds a credential, or when that cannot be
    # told: an empty one (agentcage's mask), an .npmrc without a token or a .pem without a
    # private key holds nothing to take.
    hit = _hit(
        str(r.get("path"))
        for r in facts.records("project_credentials", "files")
        if r.get("readable") is True and r.get("holds") is not False
    )
    if hit is not None and facts.optional("project_credentials", "truncated", bool):
        return Hit(hit.evidence, detail=("the probe's scan of the project stopped at its bound",))
    return hit


def shadow_readable(facts: Facts) -> Hit | None:
    return _hit(
        str(r.get("path")) for r in _readable_files(facts) if r.get("path") == "/etc/shadow"
    )


def _names_held(names: Any, who: str) -> list[str]:
    if not isinstance(names, list):
        return []
    return [f"{who} holds {n}" for n in names if isinstance(n, str)]


def pid1_environ(facts: Facts) -> Hit | None:
    """PID 1's environment is a leak only where it holds what this process does not: the
    sandbox's own init (bwrap as PID 1) started with the same environment reveals nothing, while
    one that cleared the environment for its child (bwrap --clearenv) still holds the old one."""
    if facts.value("proc_environ", "pid1_is_self", bool):
        return None
    if not facts.value("proc_environ", "pid1_environ_readable", bool):
        return None
    data = facts.section("proc_environ")
    if "pid1_holds_more" not in data:  # an older probe: readable is all it could say
        return Hit(("/proc/1/environ opens for reading",))
    if not facts.value("proc_environ", "pid1_holds_more", bool):
        return None
    extra = facts.optional("proc_environ", "pid1_extra_entries", int)
    names = _names_held(data.get("pid1_extra_secret_names"), "PID 1")
    return Hit(
        ("PID 1's environment is readable and holds variables this process lacks", *sorted(names)),
        detail=(f"{extra} entries this process lacks",) if extra is not None else (),
    )


def other_environs(facts: Facts) -> Hit | None:
    readable = facts.value("proc_environ", "others_readable", int)
    checked = facts.value("proc_environ", "others_checked", int)
    data = facts.section("proc_environ")
    if "others_holding_more" not in data:  # an older probe
        if readable > 0:
            return Hit(("other processes' environ open for reading",),
                       detail=(f"{readable} of {checked} readable",))
        return None
    holding = facts.value("proc_environ", "others_holding_more", int)
    if holding == 0:
        return None
    names = _names_held(data.get("others_extra_secret_names"), "another process")
    return Hit(
        ("other processes' environments are readable and hold variables this process lacks",
         *sorted(names)),
        detail=(f"{holding} of {checked} other processes hold more; {readable} readable",),
    )


def ssh_agent(facts: Facts) -> Hit | None:
    record = facts.optional("sockets", "ssh_agent", dict) or {}
    if record.get("result") == "connected":
        return Hit(("$SSH_AUTH_SOCK connects",))
    return None


def session_keyring(facts: Facts) -> Hit | None:
    """Keys the process can read the payload of. Keyrings themselves hold no secret: a fresh,
    empty session keyring is not a finding, whatever /proc/keys lists."""
    state = facts.value("keyring", "session_keyring", str)
    data = facts.section("keyring")
    if "readable_keys" not in data:  # an older probe counted /proc/keys lines
        keys = facts.optional("keyring", "visible_keys", int) or 0
        if state == "accessible" and keys > 0:
            return Hit(("session keyring reachable with keys listed",), detail=(f"{keys} lines",))
        return None
    if state == "denied":
        return None
    readable = facts.value("keyring", "readable_keys", int)
    if readable == 0:
        return None
    types = facts.optional("keyring", "readable_key_types", list) or []
    return Hit(
        tuple(f"readable {t} keys in reach" for t in types if isinstance(t, str))
        or ("readable keys in reach",),
        detail=(f"{readable} readable keys",),
    )


# --- filesystem ----------------------------------------------------------------------------

# Scratch space every sandbox is expected to have; writing there is not a finding.
_SCRATCH_DIRS = frozenset({"/tmp", "/dev/shm", "."})
# Files container runtimes bind from the host on purpose; they are not the user's data. podman
# writes /run/.containerenv per container, into that container's own directory, to describe it.
RUNTIME_MANAGED_MOUNTS = frozenset(
    {"/etc/resolv.conf", "/etc/hostname", "/etc/hosts", "/run/.containerenv"}
)


def _writable_system_dirs(facts: Facts) -> list[str]:
    """System directories a write reaches: not scratch space, and not a tmpfs made for the
    sandbox over the directory (an empty tmpfs over /root masks the host's, it does not
    write it)."""
    dirs = facts.records("filesystem", "writable_dirs")
    if not dirs:
        raise CannotTell("filesystem.writable_dirs is empty")
    return [
        str(r.get("path"))
        for r in dirs
        if r.get("writable") is True
        and r.get("path") not in _SCRATCH_DIRS
        and r.get("scratch_mount") is not True
    ]


def system_paths_writable(facts: Facts) -> Hit | None:
    paths = tuple(sorted(set(_writable_system_dirs(facts))))
    return Hit(paths, severity_keys=paths) if paths else None


def root_rw(facts: Facts) -> Hit | None:
    if _writable_system_dirs(facts):
        return None  # FS-001 already says more
    if facts.value("filesystem", "root_rw", bool) and not facts.optional(
        "filesystem", "root_scratch_mount", bool
    ):
        return Hit(("/ is mounted read-write",))
    return None


def host_rw_mounts(facts: Facts) -> Hit | None:
    # Mounted read-write and a write really lands (an older probe said only the former).
    return _hit(
        str(r.get("mountpoint"))
        for r in facts.records("filesystem", "host_mounts")
        if r.get("rw") is True
        and r.get("writable") is not False
        and r.get("mountpoint") not in RUNTIME_MANAGED_MOUNTS
    )


def host_root_mounted(facts: Facts) -> Hit | None:
    mounts = facts.optional("filesystem", "host_root_mounted", list) or []
    return _hit(str(m) for m in mounts if isinstance(m, str))


def sysrq_writable(facts: Facts) -> Hit | None:
    # null: the kernel has no /proc/sysrq-trigger, so there is nothing to write.
    if facts.optional("filesystem", "sysrq_writable", bool):
        return Hit(("/proc/sysrq-trigger opens for writing",))
    return None


def setuid_without_nnp(facts: Facts) -> Hit | None:
    binaries = facts.optional("filesystem", "setuid_binaries", list) or []
    if binaries and facts.value("identity", "no_new_privs", bool) is False:
        return _hit(str(b) for b in binaries)
    return None


def only_workdir_writable(facts: Facts) -> Hit | None:
    dirs = facts.records("filesystem", "writable_dirs")
    cwd_writable = any(r.get("path") == "." and r.get("writable") is True for r in dirs)
    if cwd_writable and not _writable_system_dirs(facts):
        return Hit(("the working directory is writable; system paths are not",))
    return None


def core_pattern_writable(facts: Facts) -> Hit | None:
    if facts.optional("filesystem", "core_pattern_writable", bool):
        return Hit(("/proc/sys/kernel/core_pattern opens for writing",))
    return None


# Sysctls that belong to a namespace: written in a namespace of the sandbox's own, they change
# that namespace only (its hostname, its own network stack), never the host's.
_NAMESPACED_SYSCTLS = (("/proc/sys/kernel/hostname", "uts"), ("/proc/sys/net/", "net"))


def _namespace_of(path: str) -> str | None:
    for prefix, kind in _NAMESPACED_SYSCTLS:
        if path == prefix or (prefix.endswith("/") and path.startswith(prefix)):
            return kind
    return None


def proc_sys_writable(facts: Facts) -> Hit | None:
    if _user_space_kernel(facts):
        return None  # the user-space kernel's own settings, not the host's
    paths = [
        p
        for p in facts.optional("filesystem", "proc_sys_writable", list) or []
        if isinstance(p, str) and p != "/proc/sys/kernel/core_pattern"
    ]
    own: dict[str, Any] = {}
    if any(_namespace_of(p) for p in paths):
        own = facts.optional("identity", "own_namespaces", dict) or {}
    return _hit(p for p in paths if own.get(_namespace_of(p) or "") is not True)


# --- processes, persistence, resources -----------------------------------------------------


def host_processes_visible(facts: Facts) -> Hit | None:
    visible = facts.optional("processes", "visible_pids", int)
    detail = (f"{visible} processes visible",) if visible is not None else ()
    own = facts.value("processes", "own_pid_namespace", bool)
    data = facts.section("processes")
    if "proc_shows_host" not in data:  # an older probe: the namespace is all it could say
        return None if own else Hit(("PID namespace shared with the host",), detail=detail)
    if not facts.value("processes", "proc_shows_host", bool):
        # Its own /proc, or the /proc of the sandbox's outer pid namespace (its own helpers).
        return None
    if not own:
        return Hit(("PID namespace shared with the host",), detail=detail)
    # A pid namespace of its own, but the host's /proc bound in: every host process is listed,
    # with its command line and its open files.
    return Hit(("/proc is the host's and lists its processes",), detail=detail)


def _appendable(kind: str) -> Detector:
    """A file of `kind` that runs later can be appended to, outside the sandbox's own volumes."""
    def detect(facts: Facts) -> Hit | None:
        return _hit(
            str(r.get("path"))
            for r in facts.records("persistence", "targets")
            if r.get("kind") == kind and r.get("appendable") is True
            and r.get("own_volume") is not True
        )

    detect.__name__ = f"appendable_{kind}"
    return detect


def own_volume_persistence(facts: Facts) -> Hit | None:
    """Files that run later, appendable in a volume the launcher declared the sandbox's own and
    the probe found mounted from it (agentsec.own_volumes): only the sandbox's later runs read
    them."""
    return _hit(
        str(r.get("path"))
        for r in facts.records("persistence", "targets")
        if r.get("appendable") is True and r.get("own_volume") is True
    )


def git_hooks_writable(facts: Facts) -> Hit | None:
    hooks = facts.optional("persistence", "git_hooks", dict) or {}
    # A tmpfs over .git/hooks is a pivot mask: hooks written there never reach the host.
    if hooks.get("writable") is True and hooks.get("fstype") != "tmpfs":
        return Hit((str(hooks.get("path") or "./.git/hooks"),))
    return None


def no_limits(facts: Facts) -> Hit | None:
    data = facts.section("resources")
    if data.get("memory_limit") is not None or data.get("pids_limit") is not None:
        return None
    found = data.get("cgroup_found")
    found = found if isinstance(found, dict) else {}
    lost = sorted(k for k in ("memory", "pids") if found.get(k) is False)
    if lost:
        # A cgroup filesystem is mounted but the probe's own cgroup could not be found in it (a
        # cgroup namespace that hides the names above it): a limit may apply that it cannot see.
        raise CannotTell(f"the probe's own {' and '.join(lost)} cgroup could not be located")
    unseen = sorted(k for k in ("memory", "pids") if k in found and found[k] is None)
    detail = (f"no cgroup filesystem for {' or '.join(unseen)} is mounted here",) if unseen else ()
    return Hit(("no cgroup memory limit", "no cgroup pids limit"), detail=detail)


def build_registry() -> DetectorRegistry:
    """Every detector, keyed by the finding it decides, with the probe sections it reads."""
    registry = DetectorRegistry()
    table: tuple[tuple[str, tuple[str, ...], Detector], ...] = (
        ("PRIV-001", ("identity",), real_root),
        ("PRIV-002", ("identity",), userns_root),
        ("PRIV-003", ("identity",), dangerous_capabilities),
        ("PRIV-004", ("identity",), no_seccomp),
        ("PRIV-005", ("identity",), no_new_privs_unset),
        ("PRIV-006", ("namespaces", "identity"), namespaces_creatable),
        ("PRIV-007", ("identity",), no_mac_profile),
        ("PRIV-008", ("identity",), mapped_to_host_root),
        ("PRIV-009", ("identity",), io_uring),
        ("NET-001", ("network",), egress_connects),
        ("NET-002", ("network",), metadata_reachable),
        ("NET-003", ("network",), no_network),
        ("NET-004", ("network",), dns_channel),
        ("NET-005", ("network",), udp_egress),
        ("NET-006", ("network",), ipv6_egress),
        ("NET-007", ("proxy",), proxy_open),
        ("NET-008", ("proxy",), proxy_allowlisted),
        ("NET-009", ("network",), docker_tcp),
        ("NET-010", ("proxy",), proxy_refuses),
        ("NET-011", ("network",), transparent_interception),
        ("SEC-001", ("sockets",), runtime_socket),
        ("SEC-002", ("secrets_env",), secret_env_names),
        ("SEC-003", ("credentials",), credential_files),
        ("SEC-004", ("proc_environ",), pid1_environ),
        ("SEC-005", ("credentials",), shadow_readable),
        ("SEC-006", ("sockets",), runtime_socket_refused),
        ("SEC-007", ("sockets",), ssh_agent),
        ("SEC-008", ("proc_environ",), other_environs),
        ("SEC-009", ("keyring",), session_keyring),
        ("SEC-010", ("credentials",), agent_login_files),
        ("SEC-011", ("project_credentials",), project_credential_files),
        ("FS-001", ("filesystem",), system_paths_writable),
        ("FS-002", ("filesystem",), root_rw),
        ("FS-003", ("filesystem",), host_rw_mounts),
        ("FS-004", ("filesystem",), host_root_mounted),
        ("FS-005", ("filesystem",), sysrq_writable),
        ("FS-006", ("filesystem", "identity"), setuid_without_nnp),
        ("FS-007", ("filesystem",), only_workdir_writable),
        ("FS-008", ("filesystem",), core_pattern_writable),
        ("FS-009", ("filesystem", "identity"), proc_sys_writable),
        ("PROC-001", ("processes",), host_processes_visible),
        ("PERS-001", ("persistence",), _appendable("shell")),
        ("PERS-002", ("persistence",), _appendable("ssh")),
        ("PERS-003", ("persistence",), _appendable("agent")),
        ("PERS-004", ("persistence",), _appendable("git")),
        ("PERS-005", ("persistence",), git_hooks_writable),
        ("PERS-006", ("persistence",), own_volume_persistence),
        ("RES-001", ("resources",), no_limits),
    )
    for finding_id, sections, detect in table:
        registry.add(finding_id, sections, detect)
    return registry
