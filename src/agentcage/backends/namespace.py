"""The namespace backend: a gateway namespace running the egress gateway, and a cage namespace
whose workloads run under bubblewrap. Every layer is applied or the cage does not start.

Lifecycle: `start` builds the network, loads the firewall, launches the gateway and waits for
it; `exec` runs one sandboxed command in the cage (workload.py); `stop` kills everything in
both namespaces and deletes them. State lives in the cage directory (runtime.json records what
is built before it is built, so an interrupted start can always be cleaned up).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agentcage import rootless
from agentcage.addresses import parse_ip
from agentcage.backends import cgroups, credmasks, host, layers, netplan, workload
from agentcage.backends.gateways import (  # noqa: F401  (gateway_environment: its old home)
    READY_TIMEOUT,
    GatewayProcess,
    Launcher,
    Pending,
    gateway_environment,
)
from agentcage.backends.profile import CageMeta, load_meta
from agentcage.backends.sandbox import SYSTEM_BUNDLE_PATH
from agentcage.errors import BackendError, StateError
from agentcage.gateway.firewall import render_ruleset, sysctls
from agentcage.gateway.settings import GatewaySettings
from agentcage.state import (
    CageDir,
    StateStore,
    atomic_write,
    read_json,
    write_json,
    write_runtime,
)

if TYPE_CHECKING:
    from agentcage.config.spec import CageSpec


def upstream_bundle(extra_files: Sequence[str]) -> bytes:
    """Public CAs (certifi, else the system bundle) plus any extra CA files of the test world."""
    parts = [public_cas()]
    for f in extra_files:
        try:
            parts.append(Path(f).read_bytes())
        except OSError as e:
            raise BackendError(
                f"gateway.upstream_ca_files: cannot read {f} ({e.strerror})"
            ) from None
    return b"\n".join(parts)


def public_cas() -> bytes:
    """certifi's bundle, else the system's. certifi's file is found without importing it:
    its import (importlib.resources) and `where()` cost a later cage a good part of its
    start, and `where()` leaves an exit handler that makes the CLI's exit a full interpreter
    teardown (see lean.py `_exit_now`). Its API is the fallback for an unusual install."""
    import importlib.util

    spec = importlib.util.find_spec("certifi")
    if spec is None:
        return Path(SYSTEM_BUNDLE_PATH).read_bytes()
    if spec.origin:
        with contextlib.suppress(FileNotFoundError):
            return Path(spec.origin).with_name("cacert.pem").read_bytes()
    import certifi

    return certifi.contents().encode("ascii")


def resolv_conf_servers(text: str) -> tuple[str, ...]:
    """The `nameserver` addresses of a resolv.conf, in order."""
    servers = []
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and fields[0] == "nameserver" and parse_ip(fields[1]) is not None:
            servers.append(fields[1])
    return tuple(servers)


def upstream_dns_servers(spec: CageSpec) -> tuple[str, ...]:
    """`dns_servers`, or else the uplink's own resolver configuration: the host's
    /etc/resolv.conf (a stub at 127.0.0.53 included: the gateway queries it from the host's
    namespace), or /etc/netns/NAME/resolv.conf for a named uplink namespace that has one."""
    if spec.dns_servers:
        return spec.dns_servers
    uplink_ns = spec.uplink.removeprefix("netns:")
    candidates = [Path("/etc/resolv.conf")]
    if uplink_ns != spec.uplink:
        candidates.insert(0, Path("/etc/netns") / uplink_ns / "resolv.conf")
    for path in candidates:
        try:
            servers = resolv_conf_servers(path.read_text())
        except OSError:
            continue
        if servers and rootless.active() and uplink_ns is None:
            # a rootless uplink is slirp4netns's network, where the host's loopback is not
            # reachable: a local stub resolver is asked through slirp4netns's own
            return tuple(s for s in servers if not s.startswith("127.") and s != "::1") \
                or (rootless.SLIRP_DNS,)
        if servers:
            return servers
    raise BackendError(
        f"no DNS server: {' and '.join(map(str, candidates))} name none; set dns_servers in "
        "cage.yaml (or --dns with `run`)"
    )


class NamespaceBackend:
    name = "namespace"

    def __init__(self, store: StateStore, gateway_env: dict[str, str] | None = None,
                 use_zygote: bool = False, say: Callable[[str], None] | None = None):
        """`gateway_env`: added to the gateway's environment (test hooks); `use_zygote`: fork
        gateways from the state root's gateway zygote (see gateways.py); `say`: where
        progress of long work goes (an image unpacked into a cage's layer)."""
        self.store = store
        self.say = say
        self.gateway_env = gateway_env or {}
        self.gateways = Launcher(store.root, self.gateway_env, use_zygote)

    # ---- state ---------------------------------------------------------------------------

    def meta(self, cage: CageDir) -> CageMeta:
        return load_meta(cage.root / "meta.json")

    def runtime(self, cage: CageDir) -> dict:
        if not cage.runtime.exists():
            return {"status": "stopped"}
        return read_json(cage.runtime, dict)

    def _runtime_if_readable(self, cage: CageDir) -> dict:
        """runtime.json for cleaning up: {} when it is missing or damaged (the cage is then
        found by its gateway instead, see `_plan_of_live_gateway`)."""
        try:
            return self.runtime(cage) if cage.root.exists() else {}
        except StateError:
            return {}

    @staticmethod
    def _plan_of(runtime: dict) -> netplan.NetPlan | None:
        try:
            return netplan.NetPlan.from_dict(runtime["plan"]) if runtime.get("plan") else None
        except (KeyError, TypeError, ValueError):
            return None

    @staticmethod
    def _plan_of_live_gateway(cage: CageDir) -> netplan.NetPlan | None:
        """The network of a cage whose runtime.json is gone or damaged, found by identity: its
        gateway process names the cage's settings file, and lives in the cage's gateway
        namespace, whose name carries the suffix of both namespaces."""
        for pid in host.gateways_of(cage.root):
            suffix = host.cage_suffix_of(pid)
            if suffix is not None:
                return netplan.NetPlan(suffix=suffix, slot=0, uplink="found by its gateway")
        return None

    def write_meta(self, cage: CageDir, meta: CageMeta, durable: bool = True) -> None:
        write_json(cage.root / "meta.json", meta.to_dict(), durable=durable)

    def validate(self, spec: CageSpec) -> None:
        """Refuse what this backend cannot enforce, instead of silently ignoring it (read
        from the validated form: what cage.yaml asks for)."""
        doc = spec.document
        container, ports = doc["container"], doc["ports"]
        unsupported = []
        if doc["isolation"] not in ("auto", "namespace", "container"):
            unsupported.append(f"isolation {doc['isolation']} (this backend is namespace)")
        if doc["isolation"] == "container" and not container["image"]:
            raise BackendError("isolation container: name the image the cage runs on "
                               "(container.image), or use isolation namespace to run the "
                               "host's own binaries")
        if ports["udp"]["allow"]:
            unsupported.append("ports.udp.allow")
        if ports["icmp"]["allow"]:
            unsupported.append("ports.icmp.allow")
        if ports["tcp"]["passthrough"] or doc["domains"]["passthrough"]:
            unsupported.append("passthrough (uninspected TLS)")
        if not container["read_only"] and not container["image"]:
            unsupported.append("container.read_only: false (without container.image the "
                               "cage's root is the host's own, read-only)")
        if container["rootfs"]:
            unsupported.append("container.rootfs")
        if rootless.active():
            refusal = cgroups.detect().rootless_refusal(
                cgroups.Limits(spec.memory, spec.pids, spec.cpus))
            if refusal:
                raise BackendError(refusal)
        if unsupported:
            raise BackendError(
                "the namespace backend cannot enforce: " + ", ".join(unsupported) + "; remove them"
            )

    # ---- start / stop --------------------------------------------------------------------

    def start(self, cage: CageDir, spec: CageSpec, gateway: Pending | None = None) -> dict:
        """Build and start the cage. `gateway`: what `prespawn_gateway` began, to use."""
        return self._start(cage, spec, gateway, None)[0]

    def run(self, cage: CageDir, spec: CageSpec, command: Sequence[str], interactive: bool,
            gateway: Pending | None = None) -> int:
        """Start the cage and run `command` in it with the caller's terminal (`agentcage
        run`); its exit code. The command's sandbox is made while the gateway starts (from
        when it has written the cage's CA, which the sandbox carries), and the command waits
        behind the proof that its sandbox is complete until the gateway is ready: it never
        runs before, nor at all if the start fails."""
        _, started = self._start(cage, spec, gateway, (command, interactive))
        assert started is not None
        return workload.exit_status(started.wait().returncode)

    def _start(self, cage: CageDir, spec: CageSpec, gateway: Pending | None,
               command: tuple[Sequence[str], bool] | None,
               ) -> tuple[dict, workload.Running | None]:
        from agentcage.checks import require_host

        try:
            require_host()
            self.validate(spec)
            uplink = spec.uplink
            far = uplink.removeprefix("netns:")
            if far != uplink and host.netns_inode(far) is None:
                raise BackendError(f"gateway.uplink: namespace {far} does not exist")
            dns_servers = upstream_dns_servers(spec)
            with self.store.lock():
                runtime = self.runtime(cage)
                ours = (gateway is not None and gateway.process is not None
                        and runtime.get("gateway_pid") == gateway.process.pid)
                if runtime.get("status") in ("running", "starting") and not ours:
                    raise BackendError(f"cage {cage.name} is already running; stop it first")
                plan = netplan.NetPlan(netplan.new_suffix(),
                                       netplan.free_slot(self._used_slots()), uplink)
                write_runtime(cage, {**runtime, "status": "starting",
                                          "plan": plan.to_dict()})
        except BaseException:
            if gateway is not None:
                gateway.close()
                self.stop(cage, grace=0)
            raise
        try:
            meta = self.meta(cage)  # credential files made since the last walk: masked too
            credmasks.refresh(cage, meta.volumes, meta.mask_credentials, meta.unmask,
                              starting=True)
            if meta.image is not None:  # a restored cage's layer is made again here
                layers.ensure(cage, meta.image, meta.host_uid, meta.host_gid, say=self.say)
            return self._bring_up(cage, spec, plan, gateway, dns_servers, command)
        except BaseException:
            self.stop(cage)
            raise

    def prespawn_gateway(self, cage: CageDir) -> Pending:
        """Begin the gateway's slow part early: spawn its process, which waits (in the host
        network namespace, with no socket open) for gateway.json, then enters its own
        namespace; or ask the zygote for its fork (or make sure one is starting). See
        `_bring_up`; `Pending.close` ends a fork that is never taken."""
        pending = self.gateways.early(cage)
        if pending.process is not None:
            write_runtime(cage, {"status": "starting", **_identity(pending.process)})
        return pending

    def _used_slots(self) -> set[int]:
        used = set()
        for name in self.store.names():
            rt = self.store.cage(name).runtime
            with contextlib.suppress(StateError, KeyError, TypeError):
                if rt.exists():
                    plan = read_json(rt).get("plan")
                    if plan:
                        used.add(int(plan["slot"]))
        return used

    def _bring_up(self, cage: CageDir, spec: CageSpec, plan: netplan.NetPlan,
                  gateway: Pending | None, dns_servers: tuple[str, ...],
                  command: tuple[Sequence[str], bool] | None,
                  ) -> tuple[dict, workload.Running | None]:
        # Begin the gateway first: a spawned one imports mitmproxy (most of the start-up time)
        # while the network and firewall are built, opening no socket until gateway.json
        # appears; a zygote forks it meanwhile (or, not running yet, does its imports).
        pending = gateway
        if pending is None:
            pending = self.gateways.early(cage)
            if pending.process is not None:
                write_runtime(cage, {"status": "starting", "plan": plan.to_dict(),
                                          **_identity(pending.process)})
        try:
            return self._build(cage, spec, plan, pending, dns_servers, command)
        finally:
            pending.close()  # a fork asked for and not taken (a failure before) exits

    def _build(self, cage: CageDir, spec: CageSpec, plan: netplan.NetPlan, pending: Pending,
               dns_servers: tuple[str, ...], command: tuple[Sequence[str], bool] | None,
               ) -> tuple[dict, workload.Running | None]:
        from agentcage.secrets import cage as cage_secrets

        # What waits on another process or on the kernel runs on a thread meanwhile; each is
        # joined before this returns, whatever happens.
        with contextlib.ExitStack() as background:
            # The values go to the gateway only, through tmpfs; never into the cage. A secrets
            # backend may be a process per secret (systemd-creds: ≈ 6 ms each): they are
            # staged while the cgroup and the namespaces are made.
            staging = host.Background(lambda: cage_secrets.stage_for_gateway(
                cage, spec.secrets_backend, spec.allow_plaintext), "staging")
            background.callback(_joined, staging)
            # The namespaces are made (`ip netns add`) while the cgroup and the gateway's
            # settings are made and the gateway is given them: it arms in the namespace it
            # started in, where it opens nothing, and enters its own only once the network and
            # the firewall are complete (`network_path`, below).
            namespaces, *links = netplan.setup_batches(plan)
            making = host.start_batch(namespaces)
            background.callback(_reaped, making)
            # The cage's resource limits: its cgroup exists before any workload can start.
            limits = cgroups.Limits(spec.memory, spec.pids, spec.cpus)
            cgroup_dirs = cgroups.CageCgroup(cgroups.detect(), plan.suffix).create(limits)
            secrets_path = staging.result()
            atomic_write(cage.upstream_ca, upstream_bundle(spec.upstream_ca_files),
                         durable=False)
            settings = self._gateway_settings(cage, spec, plan, dns_servers, secrets_path)
            atomic_write(cage.gateway_settings, settings.to_json(), durable=False)  # (each start)
            proc = self.gateways.launch(cage, pending)  # forked now, by a zygote
            try:
                if pending.process is None:
                    write_runtime(cage, {"status": "starting", "plan": plan.to_dict(),
                                         **_identity(proc)})
                proc.go()  # recorded: a forked gateway may arm (else it exits, idle)
            finally:
                proc.close()
            making.result()
            # Before any link exists (they are waited for before the links are made): a link
            # brought up in a namespace whose IPv6 is still on sends the kernel's own
            # link-local IPv6 (router and multicast listener solicitations) before the setting
            # lands. `default` is what the veth takes, in each namespace it enters.
            sysctls_written = [host.start_sysctls(plan.cage_ns, netplan.CAGE_SYSCTLS),
                               host.start_sysctls(plan.gw_ns, sysctls())]
            for write in sysctls_written:
                background.callback(_joined, write)
            # The firewall is loaded into the gateway's namespace (it names the cage's
            # interface, which need not exist yet) while the links are made.
            firewall = host.start(netplan.in_ns(plan.gw_ns, ["nft", "-f", "-"]),
                                  input=render_ruleset(settings))
            try:
                for write in sysctls_written:
                    write.result()
                for batch in links:
                    host.run_batch(batch)
            except BaseException:
                firewall.close()
                raise
            started = None
            try:
                firewall.result()
                atomic_write(cage.gateway_network, "", durable=False)  # the gateway may enter
                if command is not None:  # its sandbox is made meanwhile, its command held
                    self._wait_for(cage, proc, cage.ca_cert.exists)  # the gateway's first step
                    argv, interactive = command
                    target = workload.Target(cage, plan, self.meta(cage),
                                             tuple(str(d) for d in cgroup_dirs))
                    started = workload.start(target, argv, interactive, capture=False,
                                             gated=True)
                self._wait_ready(cage, proc)
                runtime = {"status": "running", "plan": plan.to_dict(), **_identity(proc),
                           "cgroups": [str(d) for d in cgroup_dirs],
                           "limits": limits.to_dict(), "started_at": time.time()}
                write_runtime(cage, runtime)
            except BaseException:
                if started is not None:
                    started.abort()
                raise
            if started is not None:
                started.release()
            return runtime, started

    def _gateway_settings(self, cage: CageDir, spec: CageSpec, plan: netplan.NetPlan,
                          dns_servers: tuple[str, ...], secrets_path: Path) -> GatewaySettings:
        from agentcage.secrets import cage as cage_secrets

        return GatewaySettings(
            **spec.gateway,  # what cage.yaml decides, in the settings' own names
            cage_name=cage.name,
            netns=plan.gw_ns,
            cage_iface=netplan.GW_CAGE_IF,
            gateway_address=plan.gateway_address,
            cage_network=plan.cage_network,
            uplink_netns=f"/run/netns/{plan.uplink_ns}" if plan.uplink_ns else "",
            host_routes_socket=(str(self.store.root / rootless.DIRECTORY / rootless.HOST_ROUTES)
                                if rootless.active() and not plan.uplink_ns else ""),
            host_ports_socket=(str(self.store.root / rootless.DIRECTORY / rootless.HOST_PORTS)
                               if rootless.active() and not plan.uplink_ns else ""),
            dns_servers=dns_servers,
            policy_path=str(cage.policy),
            policy_ack_path=str(cage.policy_ack),
            audit_path=str(cage.audit),
            ready_path=str(cage.gateway_ready),
            network_path=str(cage.gateway_network),
            confdir=str(cage.ca_dir),
            upstream_ca_path=str(cage.upstream_ca),
            tcp_ports=spec.tcp_ports,
            trusted_networks=spec.trusted_networks,
            secrets_path=str(secrets_path),
            reload_ack_path=str(cage_secrets.reload_ack_path(cage)),
            capture_path=str(cage.capture),
            grants_path=str(cage.grants),
            control_dir=str(cage.control),
            watcher_path=str(cage.watcher),
            published_ports=spec.published_ports,
            cage_address=plan.cage_address,
        )

    def _wait_ready(self, cage: CageDir, proc: GatewayProcess) -> int:
        return self._wait_for(cage, proc,
                              lambda: cage.gateway_ready.exists() and cage.ca_cert.exists())

    def _wait_for(self, cage: CageDir, proc: GatewayProcess, done: Callable[[], bool]) -> int:
        """Until the gateway starting has made `done` true; BackendError if it ends first."""
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if done():
                return proc.pid
            if proc.ended():
                break
            time.sleep(0.001)  # a later cage's gateway is ready tens of ms after `go`
        tail = ""
        with contextlib.suppress(OSError):
            tail = cage.gateway_log.read_text().strip().splitlines()[-1]
        raise BackendError(f"the gateway of cage {cage.name} did not start: {tail or 'timeout'}")

    def stop(self, cage: CageDir, grace: float = 3.0) -> None:
        """Kill everything in the cage's namespaces and delete them. Idempotent.

        `grace`: seconds the gateway gets to write its last packet summary (0 for a cage whose
        state is deleted right after, like an ephemeral run)."""
        from agentcage.secrets import cage as cage_secrets

        runtime = self._runtime_if_readable(cage)
        plan = self._plan_of(runtime) or self._plan_of_live_gateway(cage)
        victims = host.gateways_of(cage.root)  # by identity, whatever runtime.json says
        if plan is not None:
            victims += host.pids_in_netnses(plan.cage_ns, plan.gw_ns)
        gw_pid = host.recorded_gateway(runtime, cage)
        if gw_pid is not None:
            victims.append(gw_pid)
        # Killed at once, nothing of the cage is written as it ends: its namespaces' names go
        # meanwhile (what is in them is found already; a namespace lives while a process does).
        teardown = (host.start_batch(netplan.teardown_batch(plan))
                    if plan is not None and grace == 0 else None)
        host.terminate(sorted(set(victims)), grace=grace)
        if plan is not None:
            cgroups.CageCgroup(cgroups.detect(), plan.suffix).destroy()
        if plan is None:
            cage_secrets.unstage_for_gateway(cage)
            if cage.root.exists() and runtime:
                write_runtime(cage, {"status": "stopped"})
            return
        if teardown is not None:
            teardown.result(check=False)  # some may be gone already
        else:
            host.run_batch(netplan.teardown_batch(plan), check=False)
        for mark in (cage.gateway_ready, cage.gateway_network):
            with contextlib.suppress(FileNotFoundError):
                mark.unlink()
        cage_secrets.unstage_for_gateway(cage)
        if cage.root.exists():
            write_runtime(cage, {"status": "stopped"})

    # ---- exec ----------------------------------------------------------------------------

    def exec(self, cage: CageDir, command: Sequence[str], interactive: bool = False,
             as_root: bool = False, lend_python: bool = False) -> int:
        """Run `command` in the cage with the caller's terminal; its exit code. `as_root`: as
        root of the cage's user namespace, its layer writable (a cage with an image);
        `lend_python`: `python3 ARGS` with the host's interpreter (lentpython.py)."""
        return workload.exit_status(
            workload.run(self._target(cage), command, interactive, capture=False,
                         as_root=as_root, lend_python=lend_python).returncode)

    def exec_capture(self, cage: CageDir, command: Sequence[str],
                     timeout: float | None = None,
                     as_root: bool = False) -> subprocess.CompletedProcess[str]:
        """Run `command` in the cage with captured stdout/stderr (tests, verify, benchmarks)."""
        return workload.run(self._target(cage), command, False, capture=True, timeout=timeout,
                            as_root=as_root)

    def spawn(self, cage: CageDir, command: Sequence[str], log: Path) -> int:
        """Start a service workload in the background (output to `log`); its pid."""
        return workload.spawn(self._target(cage), command, log)

    def _target(self, cage: CageDir) -> workload.Target:
        """The running cage's namespace and workload profile; refuses if anything is down."""
        return workload.running_target(cage)

    def status(self, cage: CageDir) -> dict:
        from agentcage import listing

        return listing.status(cage)


def _identity(proc: GatewayProcess) -> dict:
    """What runtime.json records of the gateway process: its pid and start time."""
    return {"gateway_pid": proc.pid, "gateway_start": proc.start}


def _reaped(command: host.Running) -> None:
    """A command started in the background, waited for or ended (its outcome, if it matters,
    the caller has had from `result`)."""
    with contextlib.suppress(Exception):
        command.close()


def _joined(job: host.Background) -> None:
    """Wait for `job` (what it raised is the caller's to have seen already, or moot)."""
    with contextlib.suppress(Exception):
        job.result()
