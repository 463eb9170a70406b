"""The gateway container's entrypoint in an exported pod: `python3 -m agentcage.kube.sidecar`.

It turns what Kubernetes mounted into what the gateway takes on one host, then runs the
gateway in this process, in the pod's own network namespace (no namespace to enter, and the
uplink is the pod's network too: the init container's ruleset lets this uid alone out):
- the keys' Secret (one file per variable) and the placeholders of the ConfigMap become the
  staged secrets, on the in-memory state volume, readable by this uid alone;
- the cage's CA is made here; its key stays in the state volume, its certificate (alone, and
  with the image's trusted CAs) goes to the volume the agent's container reads;
- the gateway's settings are the ConfigMap's, with this container's paths;
- the audit log is followed onto stdout as JSON lines (`kubectl logs -c gateway`), and kept
  in the audit volume.
Whatever is missing or unusable ends the container with one line, before anything listens:
the agent's container never starts behind a gateway that is not there (fail closed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path

from agentcage.kube import layout

UPSTREAM_CA_KEY = "upstream-ca.pem"  # extra CAs for upstream TLS (cage.yaml upstream_ca_files)
_DECIDED_ELSEWHERE = ("netns", "cage_iface", "cage_network", "uplink_netns")


class SidecarError(Exception):
    """What stops the gateway's container from starting: said in one line."""


def _read_json(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise SidecarError(f"{path} is missing: is the cage's ConfigMap mounted?") from None
    except (OSError, ValueError) as e:
        raise SidecarError(f"{path} is unusable: {e}") from None
    if not isinstance(doc, dict):
        raise SidecarError(f"{path} is not a JSON object")
    return doc


def staged_secrets(placeholders: dict[str, str], keys_dir: Path):
    """The Secret's values with the ConfigMap's placeholders; every placeholder needs its key
    (a placeholder without one would leave the cage unswapped: refused instead)."""
    from agentcage.secrets import placeholders as formats
    from agentcage.secrets.staging import StagedSecret

    staged = []
    for env, text in sorted(placeholders.items()):
        try:
            value = (keys_dir / env).read_bytes()
        except FileNotFoundError:
            raise SidecarError(f"the keys' Secret has no {env} ({keys_dir / env} is missing): "
                               f"add it (kubectl create secret generic ... "
                               f"--from-file={env}=FILE), or export the cage again with "
                               "--secret naming only the keys you give it") from None
        except OSError as e:
            raise SidecarError(f"{keys_dir / env} cannot be read: {e.strerror}") from None
        value = value.rstrip(b"\r\n")  # a file written by hand ends in a newline
        if not value:
            raise SidecarError(f"the keys' Secret has an empty {env}")
        try:
            placeholder = formats.parse(text)
        except ValueError:
            raise SidecarError(f"{layout.PLACEHOLDERS_KEY}: {env} is not a placeholder") from None
        staged.append(StagedSecret(env=env, placeholder=placeholder, value=value))
    return tuple(staged)


def _write(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)  # whatever the umask
    os.replace(tmp, path)


def publish_ca(cert, public_dir: Path, system_bundle: bytes) -> None:
    """The cage's CA certificate for the agent's container: alone, and after the image's
    trusted CAs (what SSL_CERT_FILE names there)."""
    from cryptography.hazmat.primitives import serialization

    pem = cert.public_bytes(serialization.Encoding.PEM)
    _write(public_dir / layout.BUNDLE_FILE, system_bundle + b"\n" + pem, 0o644)
    _write(public_dir / layout.CA_FILE, pem, 0o644)  # last: what the agent's side waits for


def gateway_settings(config_dir: Path, state_dir: Path, audit_dir: Path, secrets_path: Path,
                     upstream_ca: Path, resolv_conf: Path = Path("/etc/resolv.conf")):
    """The gateway's settings: the ConfigMap's decisions, this container's paths."""
    from agentcage.backends.namespace import resolv_conf_servers
    from agentcage.gateway.settings import GatewaySettings

    decided = _read_json(config_dir / layout.SETTINGS_KEY)
    for key in _DECIDED_ELSEWHERE:
        decided.pop(key, None)
    if not decided.get("dns_servers"):  # the pod's resolver (the cluster's DNS)
        try:
            decided["dns_servers"] = list(resolv_conf_servers(resolv_conf.read_text()))
        except OSError:
            decided["dns_servers"] = []
        if not decided["dns_servers"]:
            raise SidecarError(f"no upstream DNS server: {resolv_conf} names none and the "
                               "cage's dns_servers is empty")
    private = state_dir / "private"
    paths = {
        "policy_path": str(config_dir / layout.POLICY_KEY),
        "policy_ack_path": str(private / "policy.ack"),
        "audit_path": str(audit_dir / "audit.jsonl"),
        "capture_path": str(audit_dir / "capture.jsonl"),
        "ready_path": str(state_dir / layout.READY_FILE),
        "confdir": str(private / "ca"),
        "upstream_ca_path": str(upstream_ca),
        "secrets_path": str(secrets_path),
        "reload_ack_path": str(private / "secrets.ack"),
        "grants_path": str(private / "grants.json"),
        "control_dir": str(private / "control"),
        "watcher_path": str(private / "watcher.json"),
    }
    try:
        return GatewaySettings.from_json(json.dumps({
            **decided, **paths, "netns": "", "cage_iface": "lo",
            "cage_network": f"{layout.LOOPBACK}/32", "uplink_netns": ""}))
    except (TypeError, ValueError) as e:
        raise SidecarError(f"{config_dir / layout.SETTINGS_KEY}: {e}") from None


def follow(path: Path, out, stop: threading.Event, interval: float = 0.2) -> None:
    """Copy the lines appended to `path` onto `out` until `stop` (and what is there then)."""
    offset = 0
    while True:
        ending = stop.is_set()
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
        except FileNotFoundError:
            chunk = b""
        complete = chunk[: chunk.rfind(b"\n") + 1]
        if complete:
            out.write(complete.decode("utf-8", "replace"))
            out.flush()
            offset += len(complete)
        if ending:
            return
        stop.wait(interval)


def kept_ca(confdir: Path):
    """The CA of this pod's gateway before a restart of its container (the state volume is
    the pod's): the agent's processes trust that one, so it is kept. None if there is none."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from agentcage.gateway.ca import CA_FILE

    try:
        pem = (confdir / CA_FILE).read_bytes()
    except FileNotFoundError:
        return None
    try:
        return (serialization.load_pem_private_key(pem, password=None),
                x509.load_pem_x509_certificate(pem))
    except ValueError:
        raise SidecarError(f"{confdir / CA_FILE} is unusable; delete the pod") from None


def prepare(config_dir: Path, keys_dir: Path, state_dir: Path, audit_dir: Path,
            public_dir: Path, system_bundle_path: Path):
    """Everything but serving: (settings path, the CA). Raises SidecarError."""
    from agentcage.backends.namespace import public_cas
    from agentcage.gateway.ca import install_ca, make_ca
    from agentcage.secrets.staging import StagingError, stage

    with contextlib.suppress(FileNotFoundError):  # a restarted container is not ready yet
        (state_dir / layout.READY_FILE).unlink()
    placeholders = _read_json(config_dir / layout.PLACEHOLDERS_KEY)
    staged = staged_secrets(placeholders, keys_dir) if placeholders else ()
    # The volume is the kubelet's (root's, mode 0777): what only this uid may read goes into
    # a directory of its own in it
    private = state_dir / "private"
    try:
        private.mkdir(mode=0o700, exist_ok=True)
        os.chmod(private, 0o700)
    except OSError as e:
        raise SidecarError(f"cannot make {private}: {e.strerror}") from None
    secrets_path = private / "secrets.json"
    try:
        stage(staged, secrets_path)
    except StagingError as e:
        raise SidecarError(f"the gateway's state volume must be in memory: {e}") from None
    upstream = public_cas()
    extra = config_dir / UPSTREAM_CA_KEY
    if extra.exists():
        upstream += b"\n" + extra.read_bytes()
    upstream_ca = private / "upstream-ca.pem"
    _write(upstream_ca, upstream, 0o600)
    (private / "control").mkdir(mode=0o700, exist_ok=True)
    settings = gateway_settings(config_dir, state_dir, audit_dir, secrets_path, upstream_ca)
    settings_path = private / "gateway.json"
    _write(settings_path, settings.to_json().encode(), 0o600)
    ca = kept_ca(private / "ca") or make_ca()
    install_ca(private / "ca", *ca)  # (a kept one stays): what is published is what signs
    try:
        system_bundle = system_bundle_path.read_bytes()
    except OSError:
        system_bundle = public_cas()
    publish_ca(ca[1], public_dir, system_bundle)
    return settings_path, ca, Path(settings.audit_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentcage.kube.sidecar",
                                     description="the gateway of an exported cage's pod")
    parser.add_argument("--config", type=Path, default=Path(layout.CONFIG_DIR))
    parser.add_argument("--keys", type=Path, default=Path(layout.KEYS_DIR))
    parser.add_argument("--state", type=Path, default=Path(layout.STATE_DIR))
    parser.add_argument("--audit", type=Path, default=Path(layout.AUDIT_DIR))
    parser.add_argument("--public", type=Path, default=Path(layout.PUBLIC_DIR))
    parser.add_argument("--system-bundle", type=Path,
                        default=Path("/etc/ssl/certs/ca-certificates.crt"))
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    from agentcage.gateway.main import preload, run

    preload()
    try:
        settings_path, ca, audit_path = prepare(args.config, args.keys, args.state, args.audit,
                                                args.public, args.system_bundle)
    except SidecarError as e:
        print(f"agentcage gateway: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a volume not mounted as the pod says, or not writable
        where = f" ({e.filename})" if e.filename else ""
        print(f"agentcage gateway: {e.strerror or e}{where}", file=sys.stderr)
        return 1
    stop = threading.Event()
    follower = threading.Thread(target=follow, args=(audit_path, sys.stdout, stop),
                                name="audit-to-stdout", daemon=True)
    follower.start()
    try:
        return run(settings_path, 0.0, t0, ca=ca)
    finally:
        stop.set()
        follower.join(timeout=2)


if __name__ == "__main__":
    sys.exit(main())
