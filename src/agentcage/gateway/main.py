"""The gateway process: `python -m agentcage.gateway --settings gateway.json`, run in the gateway
namespace by the backend after the firewall is in place. Writes `gateway.ready` once the resolver
and both proxy listeners are up; exits non-zero (and never serves) if any part fails to start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agentcage.addresses import UpstreamAddressRule
from agentcage.gateway import connections, obituary
from agentcage.gateway import resolver as dns
from agentcage.gateway.addon import CageAddon
from agentcage.gateway.armour import Armour
from agentcage.gateway.audit import AuditLog, AuditRecord, say
from agentcage.gateway.auditmask import CredentialMask
from agentcage.gateway.ca import install_ca, make_ca
from agentcage.gateway.capture import CaptureLog
from agentcage.gateway.control.api import PolicyApi
from agentcage.gateway.control.channel import OperatorChannel
from agentcage.gateway.control.denials import Denials
from agentcage.gateway.control.grants import Grants, LivePolicy
from agentcage.gateway.control.llm import PROVIDERS, LlmDecider, staged_key, uplink_post
from agentcage.gateway.firewall import TABLE
from agentcage.gateway.policyholder import PolicyHolder
from agentcage.gateway.proxy import build_master, preload
from agentcage.gateway.published import PublishedPorts, PublishError
from agentcage.gateway.ratelimit import HostRateLimiter
from agentcage.gateway.relays.listener import MailRelays, relay_gate
from agentcage.gateway.relays.tls import RelayTls
from agentcage.gateway.settings import GatewaySettings
from agentcage.gateway.uplink import Uplink
from agentcage.gateway.upstream import GatewayEventLoop, UpstreamConnector, UpstreamResolver
from agentcage.gateway.warmup import exact_hosts, warm_in_turn
from agentcage.gateway.watcher.reread import ReReader
from agentcage.gateway.watcher.watch import Watcher

if TYPE_CHECKING:
    from mitmproxy.master import Master
from agentcage.inspect.patterns import load_patterns
from agentcage.inspect.protocol import Decision
from agentcage.reserved import POLICY_API

# cage.yaml logging.level -> mitmproxy's log level for gateway.log
LOG_LEVELS = {"debug": "debug", "info": "info", "warning": "warn", "error": "error"}
FAULT_ENV = "AGENTCAGE_GATEWAY_FAULT_HOST"  # test hook: requests to this host raise in the addon
NETWORK_TIMEOUT = 30.0  # for the backend to build the cage's network once the gateway armed


def read_counters() -> dict[str, int]:
    """Packet counts of the gateway's nft counters (drops by kind)."""
    out = subprocess.run(
        ["nft", "-j", "list", "counters", "table", "inet", TABLE],
        capture_output=True, text=True, check=False, timeout=5,
    )
    if out.returncode != 0:
        return {}
    counts = {}
    for item in json.loads(out.stdout).get("nftables", []):
        if "counter" in item:
            counts[item["counter"]["name"]] = int(item["counter"]["packets"])
    return counts


class _Ready:
    """Addon that marks the gateway ready once both of mitmproxy's listeners run (and stops
    the gateway if they do not: the backend then reports that it did not start)."""

    def __init__(self, on_ready, expected_servers: int = 2):
        self.on_ready, self.expected = on_ready, expected_servers

    def running(self) -> None:
        from mitmproxy import ctx

        proxyserver = ctx.master.addons.get("proxyserver")
        servers = list(proxyserver.servers) if proxyserver else []
        if len(servers) != self.expected or not all(s.is_running for s in servers):
            print("agentcage-gateway: a proxy listener did not start", file=sys.stderr)
            ctx.master.shutdown()
            return
        self.on_ready()


async def _heartbeat(state_dir: Path, interval: float) -> None:
    """A sign of life for whoever notices the gateway gone (see `obituary`)."""
    while True:
        obituary.heartbeat(state_dir)
        await asyncio.sleep(interval)


async def _tick(grants: Grants | None, watcher: Watcher | None,
                channel: OperatorChannel | None, interval: float = 0.25) -> None:
    """Four times a second: expire what is due (cutting its connections), let the watcher
    act and recover, and answer the operator's requests (`agentcage cage grants ...`,
    `agentcage watcher ...`)."""
    steps = [(name, step) for name, step in (
        ("grants", grants.tick if grants else None),
        ("watcher", watcher.tick if watcher else None),
        ("operator", channel.poll if channel else None)) if step is not None]
    while True:
        await asyncio.sleep(interval)
        for name, step in steps:
            try:
                step()
            except Exception as e:  # the next tick tries again; the failure is said
                say(f"{name}: {type(e).__name__}: {e}")


async def _count_drops(audit: AuditLog, interval: float) -> None:
    last: dict[str, int] = {}
    try:
        while True:
            await asyncio.sleep(interval)
            last = _summarise(audit, last)
    finally:
        _summarise(audit, last)


def _summarise(audit: AuditLog, last: dict[str, int]) -> dict[str, int]:
    counts = read_counters()
    delta = {k: v - last.get(k, 0) for k, v in counts.items() if v - last.get(k, 0) > 0}
    if delta:
        audit.write_or_say(
            AuditRecord("packets", "blocked", "packets dropped by the firewall", by="firewall",
                        extra={"dropped": delta, "dropped_total": counts})
        )
    return counts or last


def arm(settings: GatewaySettings) -> Armour:
    """The chain, injector and redactor for the staged secrets now on disk. Raises on anything
    unusable (missing or unsafe staging file, bad rules or settings, a custom inspector that
    does not load): the caller then does not serve, or on reload blocks everything."""
    from agentcage.inspect import build_chain
    from agentcage.secrets import Injector, Redactor, load_staged, rules_from_config
    from agentcage.secrets.swap import CredentialSwap

    staged = load_staged(Path(settings.secrets_path)) if settings.secrets_path else ()
    rules = rules_from_config(settings.secret_injection)
    chain = build_chain(
        staged=staged,
        rules=rules,
        entropy=settings.entropy,
        content_type=settings.content_type,
        max_request_body=settings.max_request_body,
        custom=settings.inspectors,
    )
    return Armour(chain, Injector(rules, staged), Redactor(staged),
                  tuple(sorted({s.env for s in staged})),
                  tuple(sorted(str(s.placeholder) for s in staged)),
                  CredentialSwap(staged))


class _Disarmed:
    """The chain after a failed reload: every request is blocked until a reload succeeds."""

    name = "secrets-reload"

    def __init__(self, phase: str, reason: str):
        self.phase, self.reason = phase, reason

    def inspect(self, request, ctx) -> Decision:
        return Decision("block", self.reason, self.name, "error")


def _ack(settings: GatewaySettings, armour: Armour | None, error: str | None) -> None:
    """Tell the CLI which placeholders are in force (placeholders only: never a value)."""
    if not settings.reload_ack_path:
        return
    from agentcage.state import atomic_write

    tokens = list(armour.placeholders) if armour is not None else []
    doc = {"ok": error is None, "error": error, "placeholders": tokens, "ts": time.time()}
    # not flushed to the disk: it speaks of this process, which a crash of the host ends (a
    # flush cost every start 1-5 ms)
    atomic_write(Path(settings.reload_ack_path), json.dumps(doc), durable=False)


def reload_secrets(settings: GatewaySettings, addon: CageAddon, audit: AuditLog) -> None:
    """SIGHUP: re-read the staged secrets (a rotation); on failure, fail closed."""
    try:
        armour = arm(settings)
    except Exception as e:
        reason = f"secrets reload failed: {type(e).__name__}: {e}"
        from agentcage.secrets import Injector

        # Keep redacting with the old values (they may still come back), inject nothing, and
        # block every request until a reload succeeds.
        addon.rearm(Armour(
            (_Disarmed("headers", reason), _Disarmed("body", reason)),  # type: ignore[arg-type]
            Injector((), ()), addon.armour.redactor,
        ))
        audit.write_or_say(AuditRecord("config", "blocked", reason, by="secrets"))
        _ack(settings, None, reason)
        return
    addon.rearm(armour)
    audit.write_or_say(AuditRecord("config", "allowed", "staged secrets reloaded", by="secrets",
                            extra={"secrets": list(armour.names)}))
    _ack(settings, armour, None)


def _model_post(settings: GatewaySettings, uplink: Uplink, addresses: UpstreamAddressRule,
                provider: str):
    """HTTPS to a model provider for the gateway's own calls (the decider, the re-reader):
    over the uplink, to that provider's host alone, checked as every upstream is (llm.py)."""
    host = PROVIDERS[provider].host
    connector = UpstreamConnector(
        UpstreamResolver(settings.dns_servers, uplink), addresses,
        lambda name, port: None if (name, port) == (host, 443) else "not the model's provider",
        settings.connect_timeout_seconds)
    return uplink_post(connector, settings.upstream_ca_path)


def _llm_decider(settings: GatewaySettings, uplink: Uplink,
                 addresses: UpstreamAddressRule) -> LlmDecider | None:
    """The policy API's `llm` decider, when cage.yaml has one."""
    api = settings.policy_api
    if not api.llm_provider:
        return None
    return LlmDecider(api.llm_provider, api.llm_model,
                      staged_key(settings.secrets_path, api.llm_key),
                      _model_post(settings, uplink, addresses, api.llm_provider),
                      api.llm_timeout_seconds)


def _rereader(settings: GatewaySettings, uplink: Uplink, addresses: UpstreamAddressRule,
              watcher: Watcher | None, audit: AuditLog) -> ReReader | None:
    """The watcher's LLM re-reader, when cage.yaml has one (agents.watcher)."""
    ws = settings.watcher
    if watcher is None or not ws.llm_provider:
        return None
    return ReReader(ws, watcher, Path(settings.audit_path),
                    Path(settings.capture_path) if settings.capture_path else None,
                    staged_key(settings.secrets_path, ws.llm_key),
                    _model_post(settings, uplink, addresses, ws.llm_provider),
                    audit.write_or_say)


def _mail_relays(settings: GatewaySettings, uplink: Uplink, addresses: UpstreamAddressRule,
                 armour, policy, audit, watcher: Watcher | None) -> MailRelays:
    """The mail relays of cage.yaml's `relays`: their own connector (to their hosts on their
    ports alone, every address checked as the proxy's are), the cage CA's certificates, and
    the watcher's budgets, which count what they carry as they count requests."""
    connector = UpstreamConnector(UpstreamResolver(settings.dns_servers, uplink), addresses,
                                  relay_gate(settings.relays), settings.connect_timeout_seconds)
    tls = RelayTls(Path(settings.confdir), (relay.host for relay in settings.relays),
                   settings.upstream_ca_path)
    return MailRelays(settings.relays, settings.gateway_address, connector, tls, armour, policy,
                      audit, settings.max_request_body,
                      None if watcher is None else watcher.relayed)


async def serve(settings: GatewaySettings, uplink: Uplink, master: Master,
                timings: dict[str, float] | None = None, since: float | None = None) -> int:
    """Serve until stopped, with `master` (made by `prepare`: mitmproxy's addons only, the
    cage's are added here) and `uplink` (not started yet). `timings`: the ready line's, to
    which the seconds since `since` (the settings taken) at which it was armed and answering
    names are added.

    In two steps. Armed first, in the namespace the process started in, while the backend
    still builds the cage's network: the inspectors, the audit log, the policy, mitmproxy's
    options; nothing here opens a socket or starts a thread. Then, once the backend says the
    network and its firewall are complete (`settings.network_path`), it enters the gateway's
    namespace and opens everything that faces a network there: the uplink's thread, the
    resolver, the published ports and relays, the proxy's listeners."""
    since = time.monotonic() if since is None else since

    def mark(step: str) -> None:
        if timings is not None:
            timings[step] = round(time.monotonic() - since, 3)

    # credentials the cage tried to send are fingerprinted in it, never kept (auditmask.py)
    audit_log = AuditLog(Path(settings.audit_path), mask=CredentialMask(load_patterns()))
    holder = PolicyHolder(Path(settings.policy_path), audit_log.write_or_say,
                          Path(settings.policy_ack_path) if settings.policy_ack_path else None)
    addresses = UpstreamAddressRule.from_strings(settings.trusted_networks)
    # The policy API (control/): grants, the policy in force with them, the recent refusals.
    api_settings = settings.policy_api
    denials = Denials()
    audit_log.observers.append(denials.observe)
    # (grants audit with `write`: one that cannot be recorded is not made)
    grants = Grants(api_settings, Path(settings.grants_path) if settings.grants_path else None,
                    audit_log.write, cut=connections.cut,
                    llm=_llm_decider(settings, uplink, addresses),
                    denials=lambda: denials.last(10)) if api_settings.enable else None
    # The watcher (watcher/): budgets over what leaves, narrowing what was granted.
    watcher = Watcher(settings.watcher, audit_log.write_or_say, load_patterns(), grants,
                      Path(settings.watcher_path) if settings.watcher_path else None,
                      cut=connections.cut) if settings.watcher.enable else None
    if watcher is not None:
        watcher.lazy = True  # told at its tick, or by the next request that cannot wait
        audit_log.observers.append(watcher.observe)  # the names the cage looks up
    live = LivePolicy(lambda: holder.current, grants, watcher)
    armour = arm(settings)  # raises: the gateway does not serve without its inspectors
    mark("armed")
    capture = None
    if settings.capture.enable_har and settings.capture_path:
        capture = CaptureLog(
            Path(settings.capture_path), settings.capture,
            on_failure=lambda reason: audit_log.write_or_say(
                AuditRecord("capture", "flagged", reason, by="capture")),
        )
    addon = CageAddon(
        policy=live.current,
        audit=audit_log.write,
        chain=armour.chain,
        injector=armour.injector,
        redactor=armour.redactor,
        max_body=settings.max_request_body,
        tcp_ports=settings.tcp_ports,
        limiter=HostRateLimiter(settings.rate_per_second, settings.rate_burst),
        fault_host=os.environ.get(FAULT_ENV) or None,
        capture=capture,
        first_byte_timeout=settings.first_byte_timeout_seconds,
        idle_timeout=settings.idle_timeout_seconds,
        grants=grants,
        watcher=watcher,
    )
    api = None if grants is None else PolicyApi(
        api_settings, grants, live, denials, settings.tcp_ports, settings.cage_name,
        audit_log.write_or_say)
    _ack(settings, armour, None)
    started = time.monotonic()

    def ready() -> None:
        info = {"pid": os.getpid(), "serve_seconds": round(time.monotonic() - started, 3),
                **(timings or {})}
        Path(settings.ready_path).write_text(json.dumps(info))
        print(f"agentcage-gateway ready: {json.dumps(info)}", file=sys.stderr, flush=True)
        # what the first connections and answers would do otherwise, now the cage no longer
        # waits (its agent is starting)
        loop = asyncio.get_running_loop()
        loop.call_soon(warm_in_turn, loop, master, exact_hosts(live.current().allow.rules),
                       settings.gateway_address)
        loop.call_soon(addon.armour.redactor.compile)

    # The policy API first: it answers its own flows, which the cage's steps then leave alone.
    master.addons.add(*([api] if api is not None else []), addon, _Ready(ready))
    master.options.update(
        mode=[
            f"transparent@{settings.gateway_address}:{settings.transparent_port}",
            f"regular@{settings.gateway_address}:{settings.regular_port}",
        ],
        confdir=settings.confdir,
        connection_strategy="lazy",
        rawtcp=False,
        http3=False,
        ssl_insecure=False,
        ssl_verify_upstream_trusted_ca=settings.upstream_ca_path,
        # Requests are never streamed (a streamed body would reach upstream uninspected): one
        # over the limit is refused. The limit is narrowed to requests (gateway.mitmpatch);
        # the addon streams large responses through the redactor (gateway.streaming).
        body_size_limit=str(settings.max_request_body),
        termlog_verbosity=LOG_LEVELS.get(settings.log_level, "warn"),
    )
    mark("options")
    # Step two: into the gateway's namespace, once its network and firewall are complete
    await _network_built(settings)
    if settings.netns:  # "": stay (a pod's gateway: the pod's namespace is the cage's)
        enter_namespace(settings.netns)
    mark("in_namespace")
    host_routes = None
    if settings.host_routes_socket:  # rootless: the host's routing table, from its keeper
        try:
            from agentcage.rootless.holder import receive_host_routes

            host_routes = receive_host_routes(settings.host_routes_socket)
        except OSError as e:
            raise SystemExit(f"agentcage-gateway: no route lookups on the host ({e}): "
                             "refusing to start") from None
    uplink.start(host_routes)
    loop = asyncio.get_running_loop()
    assert isinstance(loop, GatewayEventLoop)
    loop.connector = UpstreamConnector(
        UpstreamResolver(settings.dns_servers, uplink),
        addresses,
        addon.name_refusal,
        settings.connect_timeout_seconds,
    )
    cage_resolver = dns.CageResolver(
        settings.gateway_address, live.current, audit_log.write,
        settings.blocked_dns_answer,
        served_here=frozenset({POLICY_API}) if api is not None else frozenset(),
        relayed=frozenset(relay.host for relay in settings.relays),
    )
    resolver_thread = dns.ResolverThread(cage_resolver, settings.gateway_address,
                                         settings.dns_port)
    resolver_thread.start()  # its own thread: the proxy's load never delays an answer
    mark("resolving")
    published = None
    if settings.published_ports:  # listening before the gateway says it is ready
        published = PublishedPorts(settings.published_ports, settings.cage_address, uplink,
                                   audit_log.write, _host_listener(settings))
        try:
            await published.start()
        except BaseException as e:
            await published.close()
            resolver_thread.stop()
            if isinstance(e, PublishError):
                raise SystemExit(f"agentcage-gateway: {e}") from None
            raise

    relays = None
    if settings.relays:  # the mail relays (relays/): listening before the gateway is ready
        relays = _mail_relays(settings, uplink, addresses, lambda: addon.armour, live.current,
                              audit_log.write, watcher)
        try:
            await relays.start()
        except BaseException as e:
            await relays.close()
            if published is not None:
                await published.close()
            resolver_thread.stop()
            if isinstance(e, OSError):
                raise SystemExit(f"agentcage-gateway: cannot listen for the mail relays: "
                                 f"{e.strerror or e}") from None
            raise

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, master.shutdown)
    loop.add_signal_handler(signal.SIGHUP, reload_secrets, settings, addon, audit_log)
    tasks = [
        asyncio.create_task(holder.watch()),
        asyncio.create_task(_count_drops(audit_log, settings.counter_interval_seconds)),
        asyncio.create_task(_heartbeat(Path(settings.audit_path).parent,
                                       settings.counter_interval_seconds)),
    ]
    reader = _rereader(settings, uplink, addresses, watcher, audit_log)
    if reader is not None and watcher is not None:
        watcher.reader = reader
        tasks.append(asyncio.create_task(reader.run()))
    if grants is not None or watcher is not None:
        channel = (OperatorChannel(Path(settings.control_dir), grants, watcher)
                   if settings.control_dir else None)
        tasks.append(asyncio.create_task(_tick(grants, watcher, channel)))
    try:
        await master.run()
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if published is not None:
            await published.close()
        if relays is not None:
            await relays.close()
        resolver_thread.stop()
        if grants is not None:  # grants.json as the grants are at the end
            grants.flush()
        if watcher is not None:  # what waits told, before the audit log closes
            watcher.close()
        with contextlib.suppress(FileNotFoundError):
            Path(settings.ready_path).unlink()
        if capture is not None:
            capture.close()
        audit_log.close()
    return 0


def _host_listener(settings: GatewaySettings) -> Callable[[str, int], socket.socket] | None:
    """Where a rootless gateway gets its published ports' listeners: the keeper, which makes
    them on the host's loopback (None: made in the uplink, the host's namespace)."""
    if not settings.host_ports_socket:
        return None
    from agentcage.rootless.hostports import host_listener

    return functools.partial(host_listener, settings.host_ports_socket)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentcage-gateway")
    parser.add_argument("--settings", required=True, type=Path)
    parser.add_argument("--wait", type=float, default=0.0,
                        help="seconds to wait for the settings file to appear")
    args = parser.parse_args(argv)
    obituary.supervise(args.settings)  # returns in the gateway; its supervisor records its end
    t0 = time.monotonic()
    # The slow part, done while the backend builds the network: import mitmproxy.
    preload()
    return run(args.settings, args.wait, t0)


@dataclass(frozen=True)
class Prepared:
    """What a gateway makes before it has a cage: its event loop and mitmproxy's master with
    mitmproxy's own addons (none of the cage's, no socket but the loop's own wake-up pair,
    which reaches nothing). Made while the backend builds the network, so that a start does
    not wait for them (≈ 6 ms of each start, most of it mitmproxy registering its addons)."""

    loop: GatewayEventLoop
    master: Master


def prepare() -> Prepared:
    loop = GatewayEventLoop()

    async def make() -> Master:  # the master takes the loop it runs on
        return build_master([])

    try:
        return Prepared(loop, loop.run_until_complete(make()))
    except BaseException:
        loop.close()
        raise


def run(settings_path: Path, wait: float, t0: float | None = None, ca=None,
        prepared: Prepared | None = None) -> int:
    """The gateway once its code is loaded: make the cage's CA and the `Prepared` (unless
    given, made by this process), wait up to `wait` seconds for the settings, take the uplink,
    enter the gateway namespace, serve. `main` runs it after importing; so does a child of the
    gateway zygote (zygote.py), which imported it before."""
    t0 = time.monotonic() if t0 is None else t0
    ca_key, ca_cert = ca if ca is not None else make_ca()
    prepared = prepared or prepare()
    t_prepared = time.monotonic()
    deadline = time.monotonic() + wait
    while not settings_path.exists():
        if time.monotonic() > deadline:
            print(f"agentcage-gateway: {settings_path} did not appear", file=sys.stderr)
            prepared.loop.close()
            return 1
        time.sleep(0.01)
    t_settings = time.monotonic()
    settings = GatewaySettings.load(settings_path)
    # The uplink is the namespace this process started in (the host's, where `agentcage`
    # runs), unless the settings name one; its descriptor is taken before leaving it.
    uplink = Uplink(os.open(settings.uplink_netns or "/proc/thread-self/ns/net",
                            os.O_RDONLY | os.O_CLOEXEC))
    try:
        # the CA first (files only): the cage's sandbox, which carries its certificate, is
        # made while the gateway arms
        install_ca(Path(settings.confdir), ca_key, ca_cert)
        timings = {"prepared": round(t_prepared - t0, 3), "settings": round(t_settings - t0, 3)}
        return asyncio.run(serve(settings, uplink, prepared.master, timings, t_settings),
                           loop_factory=lambda: prepared.loop)
    finally:
        uplink.close()


async def _network_built(settings: GatewaySettings) -> None:
    """Until the backend marks the cage's network and firewall complete (no mark to wait for:
    at once); SystemExit if that does not come in time."""
    if not settings.network_path:
        return
    mark = Path(settings.network_path)
    deadline = time.monotonic() + NETWORK_TIMEOUT
    while not mark.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"agentcage-gateway: {mark} did not appear; refusing to start")
        await asyncio.sleep(0.001)  # a few ms at most: the backend is making the links


def enter_namespace(name: str) -> None:
    """Join the gateway's network namespace (before any socket exists but the event loop's
    own wake-up pair, AF_UNIX, which reaches nothing); exit if that fails.

    Only the uplink thread (uplink.py), started afterwards, leaves it again, for the uplink."""
    path = f"/run/netns/{name}"
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.setns(fd, os.CLONE_NEWNET)
    finally:
        os.close(fd)
    # setns() moves only the calling thread: every thread must be in the namespace, or a
    # socket opened by a thread started earlier (by an imported library) would be the host's
    target = os.stat(path).st_ino
    for task in os.listdir("/proc/self/task"):
        if os.stat(f"/proc/self/task/{task}/ns/net").st_ino != target:
            raise SystemExit(f"agentcage-gateway: thread {task} is outside namespace {name}")


if __name__ == "__main__":
    sys.exit(main())
