"""The bwrap argument list and the seccomp program: built and checked without running anything."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from agentcage.backends.sandbox import (
    DataFile,
    Mount,
    SandboxSpec,
    cage_environment,
    pivot_masks,
    sandbox_argv,
    sandbox_env,
)
from agentcage.backends.seccomp import DENIED, build_filter


def spec(**kw) -> SandboxSpec:
    base = dict(command=("claude", "--help"), netns="agc-abc123-cg", host_uid=1000,
                host_gid=1000, seccomp_fd=7, started_fd=9,
                mounts=(Mount("/home/u/proj", "/workspace", writable=True),),
                masks=("/workspace/.git/hooks",),
                data_files=(DataFile(5, "/etc/resolv.conf"),),
                env=(("HTTPS_PROXY", "http://10.200.128.1:8080"),),
                root_links={"/bin": "usr/bin"})
    base.update(kw)
    return SandboxSpec(**base)


def pairs(argv, flag):
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_bwrap_is_the_only_program_before_the_proof():
    # the network namespace and the host uid are entered in-process (entry.py), before it
    argv = sandbox_argv(spec())
    assert argv[0] == "bwrap"
    assert not {"nsenter", "setpriv", "ip"} & set(argv[:argv.index("--")])


def test_bwrap_isolation_flags():
    argv = sandbox_argv(spec())
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                 "--disable-userns", "--new-session", "--die-with-parent"):
        assert flag in argv, flag
    assert pairs(argv, "--cap-drop") == ["ALL"]
    assert pairs(argv, "--uid") == ["1000"] and pairs(argv, "--gid") == ["1000"]
    assert pairs(argv, "--seccomp") == ["7"]
    assert "--unshare-net" not in argv  # the network namespace is the cage's, entered before
    assert "/sys" not in argv  # host /sys would list host interfaces


def test_root_is_read_only_and_workspace_bound():
    argv = sandbox_argv(spec())
    ro = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"]
    assert "/usr" in ro and "/etc" in ro
    assert "/" not in ro
    i = argv.index("--bind")
    assert argv[i + 1 : i + 3] == ["/home/u/proj", "/workspace"]
    # masks come after the project bind, so they cover it
    assert argv.index("/workspace/.git/hooks") > i
    assert argv[argv.index("/workspace/.git/hooks") - 1] == "--tmpfs"
    assert pairs(argv, "--tmpfs")[0] == "/tmp"
    assert pairs(argv, "--symlink") == ["usr/bin"]


def test_read_only_project():
    argv = sandbox_argv(spec(mounts=(Mount("/p", "/workspace", writable=False),), masks=()))
    assert "--bind" not in argv
    assert argv[argv.index("/p") - 1] == "--ro-bind"


def test_the_home_is_a_tmpfs_unless_a_named_volume_is_mounted_there():
    assert "/home/agent" in pairs(sandbox_argv(spec()), "--tmpfs")  # the control
    home = Mount("/run/agentcage-volumes/0", "/home/agent", writable=True)
    argv = sandbox_argv(spec(mounts=(*spec().mounts, home)))
    assert "/home/agent" not in pairs(argv, "--tmpfs")
    i = argv.index("/run/agentcage-volumes/0")
    assert argv[i - 1 : i + 2] == ["--bind", "/run/agentcage-volumes/0", "/home/agent"]
    # a volume below the home keeps the home's tmpfs under it
    cache = Mount("/run/agentcage-volumes/0", "/home/agent/.cache", writable=True)
    argv = sandbox_argv(spec(mounts=(*spec().mounts, cache)))
    assert argv.index("/home/agent") < argv.index("/home/agent/.cache")


def test_command_runs_behind_the_started_marker():
    argv = sandbox_argv(spec())
    tail = argv[argv.index("--chdir") :]
    assert tail[:3] == ["--chdir", "/workspace", "--"]
    assert tail[3:5] == ["/bin/sh", "-c"] and tail[6:8] == ["cage", "9"]
    assert tail[-2:] == ["claude", "--help"]


def test_a_gated_command_waits_behind_the_started_marker():
    argv = sandbox_argv(spec(gate_fd=11))
    tail = argv[argv.index("--chdir") :]
    assert tail[3:5] == ["/bin/sh", "-c"] and tail[6:9] == ["cage", "9", "11"]
    assert tail[-2:] == ["claude", "--help"]
    with pytest.raises(ValueError, match="behind the started marker"):
        sandbox_argv(spec(started_fd=None, gate_fd=11))


def test_interactive_command_gets_a_session_and_terminal_of_the_cage():
    argv = sandbox_argv(spec(interactive=True))
    assert "--new-session" in argv  # never the caller's terminal session
    assert argv[-5:] == ["setsid", "--ctty", "--wait", "claude", "--help"]
    assert "setsid" not in sandbox_argv(spec())


def test_environment_goes_to_the_process_not_the_command_line():
    env = (("PATH", "/usr/bin"), ("TOKEN_LIKE", "value-not-for-ps"))
    s = spec(env=env)
    assert "value-not-for-ps" not in sandbox_argv(s)  # /proc/PID/cmdline is world-readable
    assert "--setenv" not in sandbox_argv(s) and "--clearenv" not in sandbox_argv(s)
    assert sandbox_env(s) == dict(env)  # bwrap, its init (PID 1) and the command get exactly this


@pytest.mark.parametrize("bad", [dict(host_uid=0), dict(host_gid=0), dict(seccomp_fd=None)])
def test_refuses_unsafe_specs(bad):
    with pytest.raises(ValueError):
        sandbox_argv(spec(**bad))


def test_environment_is_built_not_inherited(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    env = dict(cage_environment("http://gw:8080", {"FOO": "bar"}, "xterm"))
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert env["HTTP_PROXY"] == env["https_proxy"] == "http://gw:8080"
    assert env["FOO"] == "bar" and env["TERM"] == "xterm"
    assert env["NODE_EXTRA_CA_CERTS"] != env["SSL_CERT_FILE"]


def test_pivot_masks_only_existing_paths(tmp_path: Path):
    assert pivot_masks(tmp_path) == ([], [])
    (tmp_path / ".git" / "hooks").mkdir(parents=True)
    (tmp_path / ".git" / "config").write_text("")
    masks, ro = pivot_masks(tmp_path)
    assert masks == ["/workspace/.git/hooks"]
    assert ro == [(str(tmp_path / ".git" / "config"), "/workspace/.git/config")]
    assert not (tmp_path / ".claude").exists()  # never created


def test_pivot_masks_refuse_symlinks(tmp_path: Path):
    (tmp_path / ".claude").symlink_to("/etc")
    with pytest.raises(ValueError, match="symlink"):
        pivot_masks(tmp_path)


# ---- seccomp ----------------------------------------------------------------------------------

def decode(prog: bytes):
    return [struct.unpack("<HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]


def run_bpf(prog: bytes, nr: int, arch: int = 0xC000003E, arg1: int = 0) -> int:
    """A tiny interpreter for the instructions build_filter emits."""
    insns = decode(prog)
    data = {0: nr, 4: arch, 24: arg1}
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc = data[k]
            pc += 1
        elif code in (0x15, 0x35):
            hit = acc == k if code == 0x15 else acc >= k
            pc += 1 + (jt if hit else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(code)


ALLOW, EPERM, KILL = 0x7FFF0000, 0x00050001, 0x80000000


@pytest.mark.parametrize(("nr", "expected"), [
    (250, EPERM), (248, EPERM), (249, EPERM), (425, EPERM), (426, EPERM), (427, EPERM),
    (321, EPERM), (323, EPERM), (0x40000000 + 1, EPERM),
    (0, ALLOW), (1, ALLOW), (39, ALLOW), (59, ALLOW), (16, ALLOW),
])
def test_seccomp_program_x86_64(nr, expected):
    assert run_bpf(build_filter("x86_64"), nr) == expected


def test_seccomp_kills_foreign_architectures_and_tiocsti():
    prog = build_filter("x86_64")
    assert run_bpf(prog, 1, arch=0x40000003) == KILL  # i386
    assert run_bpf(prog, 16, arg1=0x5412) == EPERM  # ioctl TIOCSTI
    assert run_bpf(prog, 16, arg1=0x541C) == EPERM  # ioctl TIOCLINUX
    assert run_bpf(prog, 16, arg1=0x5401) == ALLOW  # ioctl TCGETS (control)


def test_seccomp_covers_every_denied_call_and_unknown_arch_refuses():
    from agentcage.backends.seccomp import _ARCHES
    from agentcage.errors import BackendError

    for arch in ("x86_64", "aarch64"):
        numbers = _ARCHES[arch][1]
        prog = build_filter(arch)
        for name in DENIED:
            assert run_bpf(prog, numbers[name], arch=_ARCHES[arch][0]) == EPERM, (arch, name)
    with pytest.raises(BackendError, match="refusing"):
        build_filter("mips")
