"""The scorer: every finding fires on its fact, stays quiet without it, and fails closed."""

from __future__ import annotations

from typing import Any

import pytest

from agentsec import catalogue
from agentsec.scoring.assess import assess
from agentsec.scoring.detectors import build_registry, host_uid
from agentsec.untrusted import parse_probe_output
from tests.agentsec import outputs


def _assess(output: dict[str, Any]):
    return assess(parse_probe_output(outputs.line(output)), catalogue.load())


def _ids(output: dict[str, Any]) -> set[str]:
    return {f.id for f in _assess(output).findings}


def _axis(output: dict[str, Any], axis: str) -> str:
    return next(a.state for a in _assess(output).axes if a.id == axis)


def test_sealed_output_scores_zero_and_every_axis_is_sealed():
    result = _assess(outputs.sealed())
    assert result.score == 0
    assert {a.id: a.state for a in result.axes} == {a.id: "sealed" for a in result.axes}
    assert not result.score_is_lower_bound
    assert {f.id for f in result.findings} == {"NET-003", "FS-007"}  # notes, 0 points


def _net(**changes: Any) -> dict[str, Any]:
    return outputs.with_data("network", **changes)


def _target(host: str, kind: str, result: str) -> dict[str, Any]:
    return {
        "host": host,
        "port": 443,
        "kind": kind,
        "lookup": "ok",
        "addresses": ["10.0.0.1"],
        "result": result,
        "errno": None,
    }


FIRES = [
    (
        "PRIV-001",
        outputs.with_data("identity", euid=0, in_user_namespace=False, uid_map="0 0 4294967295"),
    ),
    ("PRIV-002", outputs.with_data("identity", euid=0, uid_map="0 1000 1")),
    ("PRIV-003", outputs.with_data("identity", in_user_namespace=False, caps=["CAP_SYS_ADMIN"])),
    ("PRIV-004", outputs.with_data("identity", seccomp=0)),
    ("PRIV-005", outputs.with_data("identity", no_new_privs=False)),
    ("PRIV-006", outputs.with_data("namespaces", user_ns_creatable=True)),
    ("PRIV-007", outputs.with_data("identity", apparmor="unconfined")),
    (
        "PRIV-008",
        outputs.with_data(
            "identity", euid=1000, uid_map="1000 0 1", kernel_file_owner=1000, overflow_uid=65534
        ),
    ),
    (
        "PRIV-009",
        outputs.with_data("identity", io_uring={"result": "creatable", "errno": None}),
    ),
    ("NET-001", _net(no_route=False, targets=[_target("pypi.org", "egress", "connected")])),
    (
        "NET-002",
        _net(no_route=False, targets=[_target("169.254.169.254", "metadata", "connected")]),
    ),
    (
        "NET-004",
        _net(
            dns_control={
                "name": "example.com",
                "lookup": "ok",
                "addresses": ["93.184.215.14"],
                "public": True,
            }
        ),
    ),
    ("NET-005", _net(udp_dns={"host": "1.1.1.1", "port": 53, "result": "answered"})),
    ("NET-006", _net(ipv6=[{"host": "2001:db8::1", "port": 443, "result": "connected"}])),
    (
        "NET-007",
        outputs.with_data(
            "proxy",
            configured=True,
            scheme="http",
            results=[
                {
                    "host": "example.com",
                    "port": 443,
                    "control": True,
                    "status": 200,
                    "result": "tunnel",
                }
            ],
        ),
    ),
    (
        "NET-008",
        outputs.with_data(
            "proxy",
            configured=True,
            scheme="http",
            results=[
                {
                    "host": "example.com",
                    "port": 443,
                    "control": True,
                    "status": 403,
                    "result": "refused",
                },
                {
                    "host": "github.com",
                    "port": 443,
                    "control": False,
                    "status": 200,
                    "result": "tunnel",
                },
            ],
        ),
    ),
    (
        "NET-009",
        _net(
            default_gateway="10.0.0.1",
            docker_tcp={"host": "10.0.0.1", "port": 2375, "result": "connected"},
        ),
    ),
    (
        "NET-010",
        outputs.with_data(
            "proxy",
            configured=True,
            scheme="http",
            results=[
                {
                    "host": "example.com",
                    "port": 443,
                    "control": True,
                    "status": 403,
                    "result": "refused",
                }
            ],
        ),
    ),
    (
        "NET-011",
        _net(interception_control=[{"host": "203.0.113.1", "port": 443, "result": "connected"}]),
    ),
    (
        "SEC-001",
        outputs.with_data(
            "sockets",
            runtime=[{"path": "/var/run/docker.sock", "rootless": False, "result": "connected"}],
        ),
    ),
    ("SEC-002", outputs.with_data("secrets_env", names=[{"name": "GITHUB_TOKEN", "length": 40}])),
    (
        "SEC-003",
        outputs.with_data(
            "credentials",
            files=[
                {
                    "path": "~/.aws/credentials",
                    "exists": True,
                    "readable": True,
                    "agent_login": False,
                    "via": "home",
                }
            ],
        ),
    ),
    (
        "SEC-004",
        outputs.with_data(
            "proc_environ", pid1_environ_readable=True, pid1_holds_more=True, pid1_extra_entries=3
        ),
    ),
    (
        "SEC-005",
        outputs.with_data(
            "credentials",
            files=[
                {
                    "path": "/etc/shadow",
                    "exists": True,
                    "readable": True,
                    "agent_login": False,
                    "via": "absolute",
                }
            ],
        ),
    ),
    (
        "SEC-006",
        outputs.with_data(
            "sockets",
            runtime=[{"path": "/var/run/docker.sock", "rootless": False, "result": "denied"}],
        ),
    ),
    ("SEC-007", outputs.with_data("sockets", ssh_agent={"set": True, "result": "connected"})),
    (
        "SEC-008",
        outputs.with_data(
            "proc_environ", others_checked=10, others_readable=3, others_holding_more=1
        ),
    ),
    (
        "SEC-009",
        outputs.with_data(
            "keyring", session_keyring="accessible", readable_keys=1, readable_key_types=["user"]
        ),
    ),
    (
        "SEC-010",
        outputs.with_data(
            "credentials",
            files=[
                {
                    "path": "~/.codex/auth.json",
                    "exists": True,
                    "readable": True,
                    "agent_login": True,
                    "via": "passwd",
                }
            ],
        ),
    ),
    (
        "SEC-011",
        outputs.with_data(
            "project_credentials",
            files=[{"path": ".env", "readable": True, "holds": True}],
        ),
    ),
    (
        "FS-001",
        outputs.with_data(
            "filesystem", writable_dirs=[{"path": "/etc", "writable": True, "errno": None}]
        ),
    ),
    ("FS-002", outputs.with_data("filesystem", root_rw=True)),
    (
        "FS-003",
        outputs.with_data(
            "filesystem",
            host_mounts=[
                {"mountpoint": "/workspace", "fstype": "ext4", "rw": True, "root": "/home/u/p"}
            ],
        ),
    ),
    ("FS-004", outputs.with_data("filesystem", host_root_mounted=["/host"])),
    ("FS-005", outputs.with_data("filesystem", sysrq_writable=True)),
    (
        "FS-006",
        outputs.merged(
            outputs.with_data("filesystem", setuid_binaries=["/usr/bin/sudo"]),
            "identity",
            no_new_privs=False,
        ),
    ),
    ("FS-008", outputs.with_data("filesystem", core_pattern_writable=True)),
    ("FS-009", outputs.with_data("filesystem", proc_sys_writable=["/proc/sys/kernel/modprobe"])),
    (
        "PROC-001",
        outputs.with_data(
            "processes", own_pid_namespace=False, proc_shows_host=True, visible_pids=240
        ),
    ),
    (
        "PERS-001",
        outputs.with_data(
            "persistence",
            targets=[{"path": "~/.bashrc", "kind": "shell", "exists": True, "appendable": True}],
        ),
    ),
    (
        "PERS-002",
        outputs.with_data(
            "persistence",
            targets=[
                {
                    "path": "~/.ssh/authorized_keys",
                    "kind": "ssh",
                    "exists": True,
                    "appendable": True,
                }
            ],
        ),
    ),
    (
        "PERS-003",
        outputs.with_data(
            "persistence",
            targets=[
                {
                    "path": "~/.claude/settings.json",
                    "kind": "agent",
                    "exists": True,
                    "appendable": True,
                }
            ],
        ),
    ),
    (
        "PERS-004",
        outputs.with_data(
            "persistence",
            targets=[{"path": "~/.gitconfig", "kind": "git", "exists": True, "appendable": True}],
        ),
    ),
    (
        "PERS-005",
        outputs.with_data(
            "persistence", git_hooks={"path": "./.git/hooks", "exists": True, "writable": True}
        ),
    ),
    (
        "PERS-006",  # as agentsec.own_volumes marks a target in a declared, matching volume
        outputs.with_data(
            "persistence",
            targets=[{"path": "~/.codex/config.toml", "kind": "agent", "exists": True,
                      "appendable": True, "own_volume": True}],
        ),
    ),
    ("RES-001", outputs.with_data("resources", memory_limit=None, pids_limit=None)),
]


def test_the_table_covers_every_scored_finding():
    notes_fired_by_the_sealed_baseline = {"NET-003", "FS-007"}
    assert {fid for fid, _ in FIRES} | notes_fired_by_the_sealed_baseline == set(
        catalogue.load().findings
    )


@pytest.mark.parametrize(("finding_id", "output"), FIRES, ids=[f for f, _ in FIRES])
def test_finding_fires_on_its_fact(finding_id: str, output: dict[str, Any]):
    assert finding_id in _ids(output)
    assert finding_id not in _ids(outputs.sealed())


@pytest.mark.parametrize(("finding_id", "output"), FIRES, ids=[f for f, _ in FIRES])
def test_score_is_the_sum_of_points(finding_id: str, output: dict[str, Any]):
    result = _assess(output)
    assert result.raw_score == sum(f.points for f in result.findings)
    assert result.score == min(100, result.raw_score)


def test_score_caps_at_100_and_raw_score_keeps_the_sum():
    out = outputs.sealed()
    d = out["sections"]
    d["identity"]["data"].update(
        euid=0,
        in_user_namespace=False,
        uid_map="0 0 4294967295",
        caps=["CAP_SYS_ADMIN"],
        seccomp=0,
        no_new_privs=False,
    )
    d["filesystem"]["data"].update(
        sysrq_writable=True, core_pattern_writable=True, host_root_mounted=["/host"]
    )
    d["sockets"]["data"]["runtime"] = [{"path": "/run/docker.sock", "result": "connected"}]
    result = _assess(out)
    assert result.raw_score > 100
    assert result.score == 100


def test_varied_severity_takes_the_worst_item():
    out = outputs.with_data(
        "filesystem",
        writable_dirs=[{"path": "/opt", "writable": True}, {"path": "/usr/bin", "writable": True}],
    )
    finding = next(f for f in _assess(out).findings if f.id == "FS-001")
    assert finding.severity == "high"
    out = outputs.with_data("filesystem", writable_dirs=[{"path": "/opt", "writable": True}])
    assert next(f for f in _assess(out).findings if f.id == "FS-001").severity == "medium"


@pytest.mark.parametrize(
    ("euid", "owner", "fires"),
    [
        (0, 0, True),  # root inside, host root mapped to it
        (0, 65534, False),  # root inside, host root unmapped (shows as overflow)
        (1000, 65534, False),
        (65534, 65534, False),  # ambiguous: euid is the overflow uid, so stay quiet
    ],
)
def test_host_root_mapping_is_read_from_file_ownership(euid: int, owner: int, fires: bool):
    out = outputs.with_data(
        "identity", euid=euid, uid_map=f"{euid} 0 1", kernel_file_owner=owner, overflow_uid=65534
    )
    assert ("PRIV-008" in _ids(out)) is fires


def test_capabilities_inside_a_user_namespace_are_capped_low():
    out = outputs.with_data("identity", caps=["CAP_SYS_ADMIN"], in_user_namespace=True)
    assert next(f for f in _assess(out).findings if f.id == "PRIV-003").severity == "low"


@pytest.mark.parametrize("axis", [a.id for a in catalogue.load().axes])
@pytest.mark.parametrize("timed_out", [False, True])
def test_a_failed_section_reads_not_measured_never_sealed(axis: str, timed_out: bool):
    section = catalogue.load().axis(axis).sections[0]
    result = _assess(outputs.failed(section, timed_out=timed_out))
    state = next(a for a in result.axes if a.id == axis)
    assert state.state == "not_measured"
    assert state.not_measured
    assert result.score_is_lower_bound


def test_a_missing_section_reads_not_measured():
    out = outputs.sealed()
    del out["sections"]["network"]
    assert _axis(out, "network") == "not_measured"


def test_an_unknown_fact_reads_not_measured():
    assert _axis(outputs.with_data("identity", seccomp=None), "privilege") == "not_measured"
    assert _axis(outputs.with_data("identity", seccomp="2"), "privilege") == "not_measured"


def test_reachable_wins_over_not_measured_and_keeps_the_reason():
    out = outputs.with_data("identity", seccomp=None, no_new_privs=False)
    axis = next(a for a in _assess(out).axes if a.id == "privilege")
    assert axis.state == "reachable"
    assert axis.not_measured
    assert _assess(out).score_is_lower_bound


def test_proxy_demanding_a_password_is_not_measured_not_sealed():
    out = outputs.with_data(
        "proxy",
        configured=True,
        scheme="http",
        auth_sent=False,
        results=[
            {
                "host": "example.com",
                "port": 443,
                "control": True,
                "status": 407,
                "result": "auth_required",
            }
        ],
    )
    assert _axis(out, "network") == "not_measured"


def test_socks_proxy_is_not_measured():
    out = outputs.with_data(
        "proxy",
        configured=True,
        scheme="socks",
        results=[
            {
                "host": "example.com",
                "port": 443,
                "control": True,
                "status": None,
                "result": "unsupported",
            }
        ],
    )
    assert _axis(out, "network") == "not_measured"


def test_refused_only_reads_visible_but_refused():
    out = outputs.with_data(
        "sockets",
        runtime=[{"path": "/var/run/docker.sock", "rootless": False, "result": "denied"}],
        control={"own_socket": "denied", "missing_path": "denied"},
    )
    result = _assess(out)
    assert _axis(out, "secrets") == "refused"
    finding = next(f for f in result.findings if f.id == "SEC-006")
    assert any("blanket" in e for e in finding.evidence)


def test_runtime_managed_mounts_are_not_host_mount_findings():
    out = outputs.with_data(
        "filesystem",
        host_mounts=[
            {"mountpoint": "/etc/resolv.conf", "fstype": "ext4", "rw": True, "root": "/x"}
        ],
    )
    assert "FS-003" not in _ids(out)


def test_recommended_flags_follow_the_catalogue_order_without_duplicates():
    out = outputs.sealed()
    d = out["sections"]
    d["resources"]["data"].update(memory_limit=None, pids_limit=None)
    d["identity"]["data"].update(
        no_new_privs=False, euid=0, in_user_namespace=False, uid_map="0 0 4294967295"
    )
    d["network"]["data"].update(targets=[_target("pypi.org", "egress", "connected")])
    flags = _assess(out).recommended_flags
    order = catalogue.load().flag_order()
    assert list(flags) == sorted(flags, key=order.index)
    assert len(set(flags)) == len(flags)
    assert {
        "--network none",
        "--user 65534:65534",
        "--security-opt no-new-privileges",
        "--pids-limit 256",
        "--memory 512m",
    } <= set(flags)


@pytest.mark.parametrize(
    ("uid_map", "uid", "expected"),
    [
        ("0 0 4294967295", 0, 0),
        ("65534 0 1", 65534, 0),
        ("0 1000 1", 0, 1000),
        ("1000 100000 65536", 1005, 100005),
        ("garbage", 0, None),
        ("0 1000 1", 5, None),
    ],
)
def test_host_uid(uid_map: str, uid: int, expected: int | None):
    assert host_uid(uid_map, uid) == expected


def test_every_catalogue_entry_has_a_detector_and_owasp_titles():
    cat = catalogue.load()
    assert build_registry().ids() == set(cat.findings)
    for spec in cat.findings.values():
        assert all(code in cat.owasp_titles for code in spec.owasp)


def _intercepted(**proxy: Any) -> dict[str, Any]:
    out = _net(
        no_route=False,
        targets=[
            _target("pypi.org", "egress", "connected"),
            {**_target("169.254.169.254", "metadata", "connected"), "port": 80},
        ],
        interception_control=[
            {"host": "203.0.113.1", "port": 443, "result": "connected"},
            {"host": "203.0.113.1", "port": 80, "result": "connected"},
        ],
    )
    out["sections"]["proxy"]["data"].update(proxy)
    return out


def test_connects_on_intercepted_ports_are_not_egress_when_the_proxy_is_asked():
    refused = {
        "host": "example.com",
        "port": 443,
        "control": True,
        "status": 403,
        "result": "refused",
    }
    result = _assess(_intercepted(configured=True, scheme="http", results=[refused]))
    ids = {f.id for f in result.findings}
    assert {"NET-011", "NET-010"} <= ids
    assert not ids & {"NET-001", "NET-002"}
    assert next(a for a in result.axes if a.id == "network").state == "refused"


def test_connects_on_intercepted_ports_without_a_proxy_to_ask_are_not_measured():
    assert _axis(_intercepted(), "network") == "not_measured"


def test_a_connect_on_a_port_that_is_not_intercepted_is_still_egress():
    out = _intercepted(configured=True, scheme="http", results=[])
    out["sections"]["network"]["data"]["interception_control"] = [
        {"host": "203.0.113.1", "port": 80, "result": "connected"}
    ]
    ids = _ids(out)
    assert "NET-001" in ids and "NET-002" not in ids


def test_a_tmpfs_mask_over_git_hooks_is_not_persistence():
    hooks = {"path": "./.git/hooks", "exists": True, "writable": True}
    masked = outputs.with_data("persistence", git_hooks={**hooks, "fstype": "tmpfs"})
    assert "PERS-005" not in _ids(masked)
    assert "PERS-005" in _ids(
        outputs.with_data("persistence", git_hooks={**hooks, "fstype": "ext4"})
    )


def test_agentcage_placeholders_are_not_secrets():
    decoy = {"name": "ANTHROPIC_API_KEY", "length": 67, "placeholder": True}
    real = {"name": "GITHUB_TOKEN", "length": 40, "placeholder": False}
    assert "SEC-002" not in _ids(outputs.with_data("secrets_env", names=[decoy]))
    finding = next(
        f for f in _assess(outputs.with_data("secrets_env", names=[decoy, real])).findings
        if f.id == "SEC-002"
    )
    assert finding.evidence == ("GITHUB_TOKEN",)



# --- What is true in real sandboxes (tests/probe/test_findings_real.py runs them for real) ----


def test_pid1_with_no_more_than_the_probe_is_not_a_leak():
    same = outputs.with_data("proc_environ", pid1_environ_readable=True, pid1_holds_more=False)
    assert "SEC-004" not in _ids(same)


def test_an_older_probe_that_only_opened_pid1s_environ_still_fires():
    old = outputs.sealed()
    data = old["sections"]["proc_environ"]["data"]
    for key in [k for k in data if k not in ("pid1_is_self", "others_checked", "others_readable")]:
        del data[key]
    data.update(pid1_environ_readable=True, others_readable=2, others_checked=5)
    assert {"SEC-004", "SEC-008"} <= _ids(old)


def test_an_empty_keyring_is_not_a_finding_whatever_proc_keys_lists():
    out = outputs.with_data("keyring", session_keyring="accessible", visible_keys=12)
    assert "SEC-009" not in _ids(out)


def test_sysctls_of_own_namespaces_are_not_host_writes():
    paths = ["/proc/sys/kernel/hostname", "/proc/sys/net/ipv4/ip_forward"]
    assert "FS-009" not in _ids(outputs.with_data("filesystem", proc_sys_writable=paths))
    shared = outputs.merged(
        outputs.with_data("filesystem", proc_sys_writable=paths),
        "identity",
        own_namespaces={"uts": False, "net": True},
    )
    finding = next(f for f in _assess(shared).findings if f.id == "FS-009")
    assert finding.evidence == ("/proc/sys/kernel/hostname",)


def test_a_scratch_tmpfs_is_not_a_system_write():
    dirs = [{"path": "/root", "writable": True, "fstype": "tmpfs", "scratch_mount": True}]
    assert "FS-001" not in _ids(outputs.with_data("filesystem", writable_dirs=dirs))
    dirs[0]["scratch_mount"] = False
    assert "FS-001" in _ids(outputs.with_data("filesystem", writable_dirs=dirs))


def test_limits_the_probe_could_not_look_for_are_not_measured():
    out = outputs.with_data(
        "resources",
        memory_limit=None,
        pids_limit=None,
        cgroup_found={"memory": False, "pids": True},
    )
    assert "RES-001" not in _ids(out)
    assert _axis(out, "resources") == "not_measured"


def test_gitconfig_and_a_token_less_npmrc_are_not_credentials():
    files = [
        {"path": "~/.gitconfig", "exists": True, "readable": True, "agent_login": False},
        {"path": "~/.npmrc", "exists": True, "readable": True, "holds_token": False},
    ]
    assert "SEC-003" not in _ids(outputs.with_data("credentials", files=files))
    files[1]["holds_token"] = True
    finding = next(
        f for f in _assess(outputs.with_data("credentials", files=files)).findings
        if f.id == "SEC-003"
    )
    assert finding.evidence == ("~/.npmrc",)


def _project(*files: tuple[str, bool, bool | None], truncated: bool = False):
    return outputs.with_data(
        "project_credentials",
        truncated=truncated,
        files=[{"path": p, "readable": r, "holds": h} for p, r, h in files],
    )


def test_project_credential_files_count_when_readable_and_not_known_empty():
    out = _project(
        (".env", True, True),
        ("config/id_rsa", True, True),
        ("certs/server.pem", True, True),
        (".npmrc", True, None),  # readable, but whether it names a token could not be told
        (".env.local", True, False),  # empty: agentcage's mask
        ("certs/ca.pem", True, False),  # a certificate, no private key
        ("secret/.env", False, False),  # refused
    )
    finding = next(f for f in _assess(out).findings if f.id == "SEC-011")
    assert finding.evidence == (".env", ".npmrc", "certs/server.pem", "config/id_rsa")
    assert finding.severity == "high" and finding.axis == "secrets"
    assert finding.points == catalogue.load().points["high"]
    assert finding.owasp == ("ASI03",)
    assert finding.detail == ()


def test_a_project_of_empty_or_masked_credential_files_has_no_finding():
    out = _project((".env", True, False), (".npmrc", True, False), ("key.pem", True, False),
                   ("id_rsa", False, False))
    assert "SEC-011" not in _ids(out)
    assert _axis(out, "secrets") == "sealed"
    assert "SEC-011" in _ids(_project((".env", True, True)))  # control


def test_a_cut_scan_says_so_beside_the_files_it_found():
    out = _project((".env", True, True), truncated=True)
    finding = next(f for f in _assess(out).findings if f.id == "SEC-011")
    assert finding.evidence == (".env",)
    assert finding.detail == ("the probe's scan of the project stopped at its bound",)


def test_an_older_probe_without_the_project_section_did_not_measure_it():
    old = outputs.sealed()
    del old["sections"]["project_credentials"]
    result = _assess(old)
    assert "SEC-011" not in {f.id for f in result.findings}
    secrets = next(a for a in result.axes if a.id == "secrets")
    assert secrets.state == "not_measured"
    assert result.score_is_lower_bound


def test_a_foreign_proc_shows_host_processes_only_when_it_is_the_hosts():
    host = outputs.with_data(
        "processes", own_pid_namespace=True, proc_is_foreign=True, proc_shows_host=True
    )
    assert "PROC-001" in _ids(host)
    outer = outputs.with_data(
        "processes", own_pid_namespace=True, proc_is_foreign=True, proc_shows_host=False
    )
    assert "PROC-001" not in _ids(outer)


def test_an_older_probe_without_the_host_proc_fact_reads_the_namespace():
    old = outputs.with_data("processes", own_pid_namespace=False)
    del old["sections"]["processes"]["data"]["proc_shows_host"]
    assert "PROC-001" in _ids(old)


def test_the_sandboxs_own_proxy_password_is_not_a_secret():
    own = {"name": "CLOUDSDK_PROXY_PASSWORD", "length": 32, "proxy_credential": True}
    assert "SEC-002" not in _ids(outputs.with_data("secrets_env", names=[own]))
    assert "SEC-002" in _ids(
        outputs.with_data("secrets_env", names=[{**own, "proxy_credential": False}])
    )


def test_the_overflow_uid_that_opens_a_host_root_sysctl_is_host_root():
    out = outputs.with_data(
        "identity", euid=65534, kernel_file_owner=65534, kernel_file_writable=True
    )
    assert "PRIV-008" in _ids(out)


def test_a_proxy_that_gave_no_status_line_is_not_measured():
    errors = [
        {"host": h, "port": 443, "control": c, "status": None, "result": r}
        for h, c, r in (("pypi.org", False, "error"), ("example.com", True, "timeout"))
    ]
    out = outputs.with_data("proxy", configured=True, scheme="http", results=errors)
    assert _axis(out, "network") == "not_measured"


@pytest.mark.parametrize(
    ("state", "severity"),
    [({"result": "creatable", "errno": None}, "low"), (None, None)],
)
def test_io_uring(state: dict[str, Any] | None, severity: str | None):
    out = outputs.with_data("identity", io_uring=state, seccomp=0)
    findings = {f.id: f for f in _assess(out).findings}
    if severity is None:  # syscall numbers unknown on this machine: not measured, not sealed
        assert "PRIV-009" not in findings
        axis = next(a for a in _assess(out).axes if a.id == "privilege")
        assert any("io_uring" in reason for reason in axis.not_measured)
    else:
        assert findings["PRIV-009"].severity == severity


def test_a_detector_that_raises_leaves_its_axis_not_measured_and_scores_the_rest():
    malformed = {**_target("pypi.org", "egress", "connected"), "port": [1]}
    out = _net(no_route=False, targets=[malformed])
    out["sections"]["identity"]["data"]["no_new_privs"] = False
    result = _assess(out)
    states = {a.id: a.state for a in result.axes}
    assert states["network"] == "not_measured"
    assert states["privilege"] == "reachable"
    assert result.score == 3  # PRIV-005 still counts


def _host_kernel_surfaces(**identity: Any) -> dict[str, Any]:
    """Root with every capability, no filter, io_uring, new user namespaces and a writable
    sysctl: what root with no sandbox shows, and what gVisor's Sentry shows of its own."""
    out = outputs.with_data(
        "identity", euid=0, in_user_namespace=False, caps=["CAP_SYS_ADMIN"], seccomp=0,
        io_uring={"result": "creatable", "errno": None}, **identity)
    out = outputs.merged(out, "namespaces", user_ns_creatable=True)
    return outputs.merged(out, "filesystem", proc_sys_writable=["/proc/sys/kernel/modprobe"])


def test_under_a_user_space_kernel_root_and_kernel_surfaces_are_not_the_hosts():
    kernel_findings = {"PRIV-001", "PRIV-004", "PRIV-006", "PRIV-009", "FS-009"}
    host = _host_kernel_surfaces()
    assert kernel_findings <= _ids(host) and "PRIV-002" not in _ids(host)  # the control
    gvisor = _host_kernel_surfaces(user_space_kernel="gvisor")
    assert not kernel_findings & _ids(gvisor)
    found = {f.id: f for f in _assess(gvisor).findings}
    assert found["PRIV-002"].evidence == ("euid 0 of gvisor's user-space kernel, not the host's",)
    assert found["PRIV-003"].severity == "low"
    assert next(f for f in _assess(host).findings if f.id == "PRIV-003").severity == "critical"
    # an older probe that did not say reads as before
    older = _host_kernel_surfaces()
    del older["sections"]["identity"]["data"]["user_space_kernel"]
    assert _ids(older) == _ids(host)
