"""The holder of a user's rootless cages, and how a command joins it.

    python -m agentcage.rootless.holder DIR     the holder, started by `ensure` (never by hand)

Two processes, so that the namespaces and their uplink live and end together:

- the *keeper*, in the host's namespaces, as the user: it forks the holder, writes the holder's
  uid and gid maps (with `newuidmap`/`newgidmap` and the user's /etc/subuid and /etc/subgid
  ranges where there are some, else the user's own uid and gid alone), starts `slirp4netns` on
  the holder's network namespace, writes DIR/holder.json and waits, handing gateways what only
  the host's network namespace has (its routing table; listeners on its loopback for published
  ports, hostports.py). When the holder ends, slirp4netns is ended and holder.json removed;
  when the keeper ends, both go with it (slirp4netns on its exit descriptor, the holder on its
  parent-death signal).
- the *holder*, which made the namespaces (user, mount, network) and holds them, asleep.

A command joins with `enter`: setns(2) into the holder's user, mount and network namespaces, in
that order, while it is still one thread. Nothing is started or joined for root.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from agentcage.errors import HostCheckError
from agentcage.rootless import HOST_ROUTES, hostports

INFO = "holder.json"
READY_TIMEOUT = 20.0
TAP = "tap0"
SLIRP_MTU = "65520"
_PR_SET_PDEATHSIG = 1
# /run entries not bound back into the holder's /run: its own namespaces and volume staging
_OWN_RUN_ENTRIES = ("netns", "agentcage-volumes")


@dataclass(frozen=True)
class Holder:
    keeper: int
    holder: int
    holder_start: int
    slirp: int
    ids: str  # "subordinate ids" | "own uid and gid only"


def process_start(pid: int) -> int | None:
    """A process's start time (clock ticks since boot): with its pid, its identity."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19])


def running(directory: Path) -> Holder | None:
    """The holder recorded in `directory`, if it is still that process."""
    try:
        info = json.loads((directory / INFO).read_text())
        holder = Holder(**info)
    except (OSError, ValueError, TypeError):
        return None
    if process_start(holder.holder) != holder.holder_start:
        return None
    return holder


def requirements() -> list[str]:
    """What this host lacks for rootless cages, each with its fix (empty: nothing)."""
    missing = []
    try:
        limit = int(Path("/proc/sys/user/max_user_namespaces").read_text())
    except (OSError, ValueError):
        limit = 0
    clone = Path("/proc/sys/kernel/unprivileged_userns_clone")
    if limit == 0 or (clone.exists() and clone.read_text().strip() != "1"):
        missing.append("unprivileged user namespaces are off (sysctl -w "
                       "user.max_user_namespaces=15000 kernel.unprivileged_userns_clone=1)")
    apparmor = Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
    if apparmor.exists() and apparmor.read_text().strip() == "1":
        missing.append("AppArmor restricts unprivileged user namespaces (sysctl -w "
                       "kernel.apparmor_restrict_unprivileged_userns=0)")
    if shutil.which("slirp4netns") is None:
        missing.append("slirp4netns is not installed (apt-get install slirp4netns)")
    return missing


def subordinate_range(path: Path, uid: int) -> tuple[int, int] | None:
    """The user's first range in /etc/subuid or /etc/subgid: (start, count), or None."""
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = None
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.strip().split(":")
        if len(fields) == 3 and fields[0] in (name, str(uid)) and fields[1].isdigit() \
                and fields[2].isdigit() and int(fields[2]) > 0:
            return int(fields[1]), int(fields[2])
    return None


def ensure(directory: Path) -> Holder:
    """The user's holder, started if it is not running. Call with the state root locked."""
    found = running(directory)
    if found is not None:
        return found
    missing = requirements()
    if missing:
        raise HostCheckError("cannot make a rootless cage: " + "; ".join(missing))
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    log = open(directory / "holder.log", "ab")  # noqa: SIM115 (the keeper's, from now on)
    with log:
        keeper = subprocess.Popen(
            [sys.executable, "-m", "agentcage.rootless.holder", str(directory)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
            start_new_session=True, close_fds=True)
    assert keeper.stdout is not None
    with keeper.stdout:
        line = keeper.stdout.readline().decode(errors="replace").strip()
    if line != "ready":
        with contextlib.suppress(ProcessLookupError):
            keeper.kill()
        keeper.wait()
        tail = ""
        with contextlib.suppress(OSError):
            tail = (directory / "holder.log").read_text().strip().splitlines()[-1]
        raise HostCheckError(f"cannot make a rootless cage: its namespaces did not start "
                             f"({tail or line or 'no reason given'}); see "
                             f"{directory / 'holder.log'}")
    found = running(directory)
    if found is None:
        raise HostCheckError("cannot make a rootless cage: its holder ended at once; see "
                             f"{directory / 'holder.log'}")
    return found


def enter(holder: Holder) -> None:
    """Join the holder's user, mount and network namespaces (this process: one thread)."""
    cwd = os.getcwd()
    fds = []
    try:
        for kind in ("user", "mnt", "net"):
            fds.append(os.open(f"/proc/{holder.holder}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC))
        if process_start(holder.holder) != holder.holder_start:
            raise HostCheckError("the rootless cages' holder ended while joining it; try again")
        for fd, flag in zip(fds, (os.CLONE_NEWUSER, os.CLONE_NEWNS, os.CLONE_NEWNET),
                            strict=True):
            os.setns(fd, flag)
    except OSError as e:
        raise HostCheckError(f"cannot join the rootless cages' namespaces: {e.strerror}") \
            from None
    finally:
        for fd in fds:
            os.close(fd)
    os.chdir(cwd)  # the same directory, as the mount namespace joined sees it


def stop(directory: Path) -> bool:
    """End the holder recorded in `directory` (its keeper ends it, slirp4netns and its
    namespaces with it, once nothing else is in them); whether one was running."""
    found = running(directory)
    if found is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(found.keeper, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and process_start(found.holder) == found.holder_start:
        time.sleep(0.02)
    return True


# ---- the keeper and the holder (python -m agentcage.rootless.holder DIR) ------------------------

def _write_maps(pid: int) -> str:
    uid, gid = os.getuid(), os.getgid()
    uids = subordinate_range(Path("/etc/subuid"), uid)
    gids = subordinate_range(Path("/etc/subgid"), uid)
    newuidmap, newgidmap = shutil.which("newuidmap"), shutil.which("newgidmap")
    if uids and gids and newuidmap and newgidmap:
        # the distribution's shadow helpers, for the ranges the administrator gave this user
        subprocess.run([newuidmap, str(pid), "0", str(uid), "1", "1", str(uids[0]),
                        str(uids[1])], check=True, capture_output=True, timeout=10)
        subprocess.run([newgidmap, str(pid), "0", str(gid), "1", "1", str(gids[0]),
                        str(gids[1])], check=True, capture_output=True, timeout=10)
        return "subordinate ids"
    Path(f"/proc/{pid}/setgroups").write_text("deny")
    Path(f"/proc/{pid}/uid_map").write_text(f"0 {uid} 1")
    Path(f"/proc/{pid}/gid_map").write_text(f"0 {gid} 1")
    return "own uid and gid only"


def _private_run() -> None:
    """/run as a tmpfs of the holder's, the host's entries bound back but its namespaces'."""
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    old = os.open("/run", os.O_PATH | os.O_DIRECTORY)
    entries = [e for e in os.listdir("/run") if e not in _OWN_RUN_ENTRIES]
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755,nosuid,nodev", "agentcage-run",
                    "/run"], check=True)
    for entry in entries:
        source = f"/proc/self/fd/{old}/{entry}"
        if os.path.lexists(f"/run/{entry}"):
            continue  # made on the new /run meanwhile (mount(8) keeps /run/mount/utab)
        if os.path.islink(source):
            os.symlink(os.readlink(source), f"/run/{entry}")
            continue
        if os.path.isdir(source):
            os.mkdir(f"/run/{entry}")
        else:
            Path(f"/run/{entry}").touch()
        subprocess.run(["mount", "--rbind", source, f"/run/{entry}"], pass_fds=(old,),
                       capture_output=True)  # one the kernel will not bind stays empty
    os.close(old)
    os.mkdir("/run/netns", 0o755)


def _route_server(directory: Path) -> socket.socket:
    path = directory / HOST_ROUTES
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))  # in the user's private state directory: theirs alone
    server.listen(16)
    return server


def _hand_out_routes(server: socket.socket) -> None:
    """Give each gateway that asks a netlink socket of the host's network namespace (where
    the keeper lives): with it, a rootless gateway asks the host's routing table whether an
    address is the host's own, which its uplink (slirp4netns's network) cannot tell."""
    while True:
        conn, _ = server.accept()
        with conn:
            route = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)  # NETLINK_ROUTE
            with route, contextlib.suppress(OSError):
                socket.send_fds(conn, [b"r"], [route.fileno()])


def receive_host_routes(path: str, timeout: float = 5.0) -> socket.socket:
    """The netlink socket of the host's namespace that the keeper at `path` hands out."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(path)
        _, fds, _, _ = socket.recv_fds(conn, 1, 1)
    if not fds:
        raise OSError("the rootless keeper handed out no socket")
    return socket.socket(fileno=fds[0])


def _hold(unshared_w: int, mapped_r: int, ready_w: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    os.unshare(os.CLONE_NEWUSER | os.CLONE_NEWNS | os.CLONE_NEWNET)
    os.write(unshared_w, b"u")
    if os.read(mapped_r, 1) != b"m":
        os._exit(1)
    _private_run()
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    os.write(ready_w, b"r")
    os.close(ready_w)
    while True:
        signal.pause()


def keep(directory: Path) -> int:
    unshared_r, unshared_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            for fd in (unshared_r, mapped_w, ready_r):
                os.close(fd)
            _hold(unshared_w, mapped_r, ready_w)
        except BaseException as e:  # the child never returns into the keeper
            print(f"holder: {e}", file=sys.stderr, flush=True)
        os._exit(1)
    for fd in (unshared_w, mapped_r, ready_w):
        os.close(fd)
    slirp = None
    try:
        if os.read(unshared_r, 1) != b"u":
            raise RuntimeError("the holder could not make its namespaces")
        ids = _write_maps(pid)
        os.write(mapped_w, b"m")
        if os.read(ready_r, 1) != b"r":
            raise RuntimeError("the holder could not set up its mounts")
        exit_r, _exit_w = os.pipe()  # slirp4netns ends with the keeper, holding the write end
        up_r, up_w = os.pipe()
        slirp = subprocess.Popen(
            ["slirp4netns", "--configure", f"--mtu={SLIRP_MTU}", "--disable-host-loopback",
             f"--exit-fd={exit_r}", f"--ready-fd={up_w}", str(pid), TAP],
            pass_fds=(exit_r, up_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        os.close(exit_r)
        os.close(up_w)
        deadline = time.monotonic() + READY_TIMEOUT
        os.set_blocking(up_r, False)
        while time.monotonic() < deadline:
            with contextlib.suppress(BlockingIOError):
                if os.read(up_r, 1):
                    break
            if slirp.poll() is not None:
                raise RuntimeError(f"slirp4netns exited with {slirp.returncode}")
            time.sleep(0.01)
        else:
            raise RuntimeError("slirp4netns did not configure the uplink in time")
        os.close(up_r)
        start = process_start(pid)
        assert start is not None
        info = Holder(os.getpid(), pid, start, slirp.pid, ids)
        tmp = directory / f".{INFO}.tmp"
        tmp.write_text(json.dumps(info.__dict__))
        tmp.rename(directory / INFO)
        routes = _route_server(directory)
        ports = hostports.server(directory)
        print("ready", flush=True)
        sys.stdout.close()
        signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGKILL))
        threading.Thread(target=_hand_out_routes, args=(routes,), daemon=True).start()
        threading.Thread(target=hostports.serve, args=(ports,), daemon=True).start()
        os.waitpid(pid, 0)
        return 0
    except Exception as e:  # reported on the line `ensure` reads
        print(f"error: {e}", flush=True)
        return 1
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
        if slirp is not None:
            slirp.kill()
            slirp.wait()
        info_path = directory / INFO
        with contextlib.suppress(OSError, ValueError):
            if json.loads(info_path.read_text()).get("holder") == pid:
                info_path.unlink()


if __name__ == "__main__":
    sys.exit(keep(Path(sys.argv[1])))
