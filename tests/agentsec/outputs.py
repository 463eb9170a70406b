"""Probe outputs written by hand, for scorer tests: a sealed sandbox, then one change at a time.

These are inputs, not mocks: the scorer's whole job is to read this format, and the format is
pinned by docs/probe-output.md and by the real probe runs in tests/integration.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from agentsec.probe.blast_probe import WRITABLE_DIRS

SEALED: dict[str, Any] = {
    "probe_format": 1,
    "probe_version": "1.1.0",
    "python": "3.11.7",
    "platform": "linux",
    "started_at": "2026-11-30T03:00:00Z",
    "elapsed_s": 0.2,
    "deadline_s": 3.0,
    "targets": {"overridden": False},
    "faults_injected": [],
    "context": {
        "hostname": "box",
        "cwd": "/work",
        "user": "agent",
        "uid": 65534,
        "gid": 65534,
        "home": "/home/agent",
        "passwd_home": "/home/agent",
    },
    "sections": {
        "identity": {
            "euid": 65534,
            "egid": 65534,
            "uid_map": "65534 1000 1",
            "in_user_namespace": True,
            "cap_eff": "0000000000000000",
            "caps": [],
            "seccomp": 2,
            "no_new_privs": True,
            "landlock_abi": 4,
            "lsm": None,
            "apparmor": "agentsec-profile (enforce)",
            "overflow_uid": 65534,
            "kernel_file_owner": 65534,
            "kernel_file_writable": False,
            "own_namespaces": {
                "ipc": True,
                "uts": True,
                "user": True,
                "pid": True,
                "cgroup": True,
                "time": False,
                "net": True,
            },
            "io_uring": {"result": "refused", "errno": "EPERM"},
            "user_space_kernel": None,
        },
        "namespaces": {"user_ns_creatable": False, "mount_in_new_ns": False, "detail": ""},
        "network": {
            "no_route": True,
            "default_gateway": None,
            "interfaces": ["lo"],
            "targets": [
                {
                    "host": "pypi.org",
                    "port": 443,
                    "kind": "egress",
                    "lookup": "error",
                    "addresses": [],
                    "result": "not_attempted",
                    "errno": None,
                },
                {
                    "host": "169.254.169.254",
                    "port": 80,
                    "kind": "metadata",
                    "lookup": "literal",
                    "addresses": ["169.254.169.254"],
                    "result": "unreachable",
                    "errno": "ENETUNREACH",
                },
            ],
            "ipv6": [
                {
                    "host": "2606:4700:4700::1111",
                    "port": 443,
                    "result": "unreachable",
                    "errno": "ENETUNREACH",
                }
            ],
            "udp_dns": {"host": "1.1.1.1", "port": 53, "result": "unreachable"},
            "dns_control": {
                "name": "example.com",
                "lookup": "error",
                "addresses": [],
                "public": False,
            },
            "docker_tcp": None,
            "interception_control": [
                {
                    "host": "203.0.113.1",
                    "port": 443,
                    "result": "unreachable",
                    "errno": "ENETUNREACH",
                }
            ],
        },
        "proxy": {
            "configured": False,
            "scheme": None,
            "auth_present": False,
            "auth_sent": False,
            "results": [],
        },
        "secrets_env": {"names": []},
        "credentials": {
            "files": [
                {
                    "path": "~/.aws/credentials",
                    "exists": False,
                    "readable": False,
                    "agent_login": False,
                    "via": "home",
                }
            ]
        },
        "project_credentials": {"root": "/work", "truncated": False, "files": []},
        "sockets": {
            "runtime": [{"path": "/var/run/docker.sock", "rootless": False, "result": "absent"}],
            "ssh_agent": {"set": False, "result": "absent"},
            "control": {"own_socket": "connected", "missing_path": "absent"},
        },
        "keyring": {
            "session_keyring": "denied",
            "visible_keys": 0,
            "readable_keys": 0,
            "readable_key_types": [],
        },
        "proc_environ": {
            "pid1_is_self": False,
            "pid1_environ_readable": False,
            "pid1_holds_more": None,
            "pid1_extra_entries": None,
            "pid1_extra_secret_names": [],
            "others_checked": 0,
            "others_readable": 0,
            "others_holding_more": 0,
            "others_extra_secret_names": [],
        },
        "filesystem": {
            "writable_dirs": [
                {"path": p, "writable": p in ("/tmp", "."), "errno": None}
                for p in WRITABLE_DIRS
            ],
            "root_rw": False,
            "root_scratch_mount": False,
            "host_mounts": [],
            "host_root_mounted": [],
            "sysrq_writable": False,
            "proc_sys_writable": [],
            "core_pattern_writable": False,
            "setuid_binaries": [],
        },
        "processes": {
            "visible_pids": 2,
            "own_pid_namespace": True,
            "proc_is_foreign": False,
            "proc_shows_host": False,
            "pid1_comm": "bwrap",
        },
        "persistence": {
            "targets": [],
            "git_hooks": {"path": "./.git/hooks", "exists": False, "writable": False},
        },
        "resources": {
            "memory_limit": 536870912,
            "pids_limit": 256,
            "rlimit_nproc": 4096,
            "cgroup_found": {"memory": True, "pids": True},
        },
    },
}


def sealed() -> dict[str, Any]:
    """A fresh copy of a fully sealed probe output, sections wrapped as the probe wraps them."""
    out = copy.deepcopy(SEALED)
    out["sections"] = {name: {"ok": True, "data": data} for name, data in out["sections"].items()}
    return out


def with_data(section: str, **changes: Any) -> dict[str, Any]:
    out = sealed()
    out["sections"][section]["data"].update(changes)
    return out


def merged(output: dict[str, Any], section: str, **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(output)
    out["sections"][section]["data"].update(changes)
    return out


def failed(section: str, timed_out: bool = False) -> dict[str, Any]:
    out = sealed()
    out["sections"][section] = {"ok": False, "error": "RuntimeError: boom", "timed_out": timed_out}
    return out


def line(output: dict[str, Any]) -> str:
    return json.dumps(output)
