"""Cage services: plain data in, plain data out. The CLI is a thin layer over these."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentcage import policy as policyfile
from agentcage.backends import layers
from agentcage.backends.namespace import NamespaceBackend
from agentcage.backends.profile import (
    check_access,
    choose_host_user,
    make_meta,
    resolve_volumes,
)
from agentcage.domains import DomainPatternError, parse_duration
from agentcage.errors import ConfigError, StateError
from agentcage.state import (
    KEPT,
    SECRETS,
    VOLUMES,
    CageDir,
    StateStore,
    atomic_write,
    read_json,
    write_json,
)

SECRETS_DIR = SECRETS  # kept by `destroy --keep-secrets` and a failed create
OVERRIDES_FILE = "overrides.json"  # the command-line choices of `create`, for `update`

if TYPE_CHECKING:
    from agentcage.config.model import CageConfig
    from agentcage.config.overrides import Overrides
    from agentcage.config.spec import CageSpec


def load_config(path: Path) -> CageConfig:
    from agentcage.config.load import load_config as load  # pydantic only when needed

    return load(path)


# Beside cage.yaml: the validated form it was written from, and the digest of that text. A
# start reads the form when cage.yaml is still that text (the model, and the pydantic import
# it costs, a good part of a start, are then not needed); else cage.yaml is validated anew.
FORM_FILE = "cage.form.json"
# The cage.yaml a cage was last made from, as its user wrote it (comments and all), and where:
# what `agentcage edit` opens (the state's cage.yaml is the whole validated form, every
# default spelled out).
SOURCE_FILE = "cage.source.json"


def _digest(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def stored_spec(cage: CageDir) -> CageSpec:
    """The spec of the cage's cage.yaml: from its stored form while that is what it holds."""
    from agentcage.config.spec import CageSpec

    try:
        text = cage.config.read_bytes()
        form = read_json(cage.root / FORM_FILE, dict)
    except (OSError, StateError):
        form = None
    if form is not None and form.get("sha256") == _digest(text) \
            and isinstance(form.get("document"), dict):
        return CageSpec.of(form["document"])
    return load_config(cage.config).spec()


class CageService:
    def __init__(self, store: StateStore | None = None, backend: NamespaceBackend | None = None):
        self.store = store or StateStore()
        self.backend = backend or NamespaceBackend(self.store)

    # ---- lookup ---------------------------------------------------------------------------

    def _existing(self, name: str) -> CageDir:
        cage = self.store.cage(name)
        if not cage.exists():
            raise StateError(f"no cage named {name!r}; see `agentcage ls`")
        return cage

    def config(self, name: str) -> CageConfig:
        return load_config(self._existing(name).config)

    # ---- lifecycle ------------------------------------------------------------------------

    def create(self, config: CageConfig, base: Path, project: Path | None = None,
               start: bool = True, overrides: Overrides | None = None) -> CageDir:
        """A new cage. Secrets set for its name before (or kept by `destroy --keep-secrets`)
        are its secrets, and volumes kept by `destroy --keep-state` its volumes; a failed
        create leaves them as they were and nothing else. `overrides`: the command line's
        choices (upstream CAs, trusted networks, host uid), applied and recorded, so that
        `update` applies them again."""
        self._refuse_taken(config.name)
        if overrides is not None:
            config = _apply_overrides(config, overrides)
        return self.create_spec(config.spec(), base, project, start, overrides)

    def create_spec(self, spec: CageSpec, base: Path, project: Path | None = None,
                    start: bool = True, overrides: Overrides | None = None) -> CageDir:
        """`create`, from a spec already made (with `overrides` applied: they are recorded)."""
        self._refuse_taken(spec.name)
        self.backend.validate(spec)
        proj, volumes = resolve_volumes(spec, base, project, (self.store.root,))
        cage = self.store.create(spec.name)
        try:
            self.write_state(cage, spec, proj, volumes)
            if overrides is not None:
                _record_overrides(cage, overrides)
            if start:
                self._start(cage, spec)
        except BaseException:
            self.backend.stop(cage)
            self.store.remove(spec.name, keep=KEPT)
            raise
        return cage

    def record_source(self, name: str, path: Path | None, text: str) -> None:
        """Keep `text`, the cage.yaml the cage `name` was just made or updated from."""
        write_json(self._existing(name).root / SOURCE_FILE,
                   {"path": str(path.resolve()) if path else None, "text": text})

    def source(self, name: str) -> tuple[Path | None, str]:
        """(where it was read, the text) of the cage.yaml to edit: the one the cage was last
        made from, or, for a cage made before they were kept, its stored form."""
        cage = self._existing(name)
        try:
            doc = read_json(cage.root / SOURCE_FILE, dict)
            if isinstance(doc.get("text"), str):
                return (Path(doc["path"]) if isinstance(doc.get("path"), str) else None,
                        doc["text"])
        except StateError:
            pass
        return None, cage.config.read_text()

    def _refuse_taken(self, name: str) -> None:
        cage = self.store.cage(name)
        if cage.exists():
            raise StateError(
                f"cage {name!r} exists; `agentcage cage update {name} -c FILE` "
                "applies a changed configuration, or destroy it first"
            )
        if cage.owner.exists():
            raise StateError(f"{name!r} is the name of a run's cage; choose another name")

    def update(self, name: str, config: CageConfig, base: Path,
               project: Path | None = None,
               overrides: Overrides | None = None, rebuild: bool = False) -> dict[str, Any]:
        """Apply a changed cage.yaml to an existing cage, keeping its secrets, CA, audit log,
        capture, named volumes and runtime domain grants, and the command-line choices given
        at create (`overrides` replaces those it sets). A running cage is restarted when
        anything but the domain lists changed (domains are reloaded by the gateway live).
        `rebuild`: the layer of the cage's image is made again from it.
        Returns what was done: {changed: [top-level keys], restarted: bool, live: bool,
        kept: [the options given at create that were applied again]}."""
        cage = self._existing(name)
        if config.name != name:
            raise ConfigError(f"the configuration names cage {config.name!r}, not {name!r}")
        recorded = _recorded_overrides(cage)
        effective, kept = _combine_overrides(recorded, overrides)
        if effective is not None:
            config = _apply_overrides(config, effective)
        spec = config.spec()
        self.backend.validate(spec)
        old = load_config(cage.config)
        meta = self.backend.meta(cage)
        proj, volumes = resolve_volumes(spec, base, project or Path(meta.project),
                                        (self.store.root,))
        changed = sorted(k for k in type(config).model_fields
                         if getattr(config, k) != getattr(old, k))
        if project is not None and str(proj) != meta.project:
            changed.append("project")
        if rebuild:
            if spec.image is None:
                raise ConfigError(f"cage {name} has no image (container.image), so no layer "
                                  "to rebuild")
            changed.append("layer")
        uid, gid, how = choose_host_user(spec, proj)
        check_access(uid, gid, volumes, how)  # before anything stops
        running = self.backend.runtime(cage).get("status") == "running"
        needs_restart = running and any(k != "domains" for k in changed)
        if needs_restart:
            self.backend.stop(cage)
        try:
            grants = policyfile.runtime_entries(self._policy_doc(cage))
        except StateError:  # a damaged domains.json: the new configuration replaces it
            grants = {}
        self.write_state(cage, spec, proj, volumes, keep_entries=grants, rebuild=rebuild)
        if effective is not None:
            _record_overrides(cage, effective)
        if needs_restart:
            self._start(cage, spec)
        elif running:
            self._await_policy(cage)
        return {"changed": changed, "restarted": needs_restart,
                "live": running and not needs_restart and "domains" in changed, "kept": kept}

    def write_state(self, cage: CageDir, spec: CageSpec, project: Path,
                    volumes: tuple[tuple[str, str, str], ...],
                    keep_entries: dict[str, list[dict]] | None = None,
                    rebuild: bool = False, durable: bool = True) -> None:
        """Everything of the cage but its runtime, written from `spec`; `rebuild`: the layer
        of its image is made again (what was installed in it is gone); `durable`: flushed to
        the disk (not for a run's cage, removed when it ends: see state.atomic_write)."""
        from agentcage.config.document import document_text

        host_uid, host_gid, how = choose_host_user(spec, project)
        check_access(host_uid, host_gid, volumes, how)
        doc = policyfile.document_from_domains(spec.domain_mode, list(spec.allow),
                                               list(spec.block))
        if keep_entries:
            doc = policyfile.with_entries(doc, keep_entries)
        policyfile.compile_document(doc)  # never write what the gateway would refuse
        # the image's files, unpacked once (they are the cage's layer, kept by `update`)
        layer = layers.ensure(cage, spec.image, host_uid, host_gid, rebuild, self.backend.say)
        meta = make_meta(spec, project, host_uid, host_gid, volumes, layers.image_env(layer))
        self.backend.write_meta(cage, meta, durable)
        from agentcage.backends import credmasks

        credmasks.refresh(cage, meta.volumes, meta.mask_credentials, meta.unmask)
        write_json(cage.policy, doc, durable)
        text = document_text(spec.document)
        write_json(cage.root / FORM_FILE, {"sha256": _digest(text.encode()),
                                           "document": spec.document}, durable)
        # last: the cage exists once it is there
        atomic_write(cage.config, text, durable=durable)

    def start(self, name: str) -> dict:
        cage = self._existing(name)
        return self._start(cage, stored_spec(cage))

    def _start(self, cage: CageDir, spec: CageSpec) -> dict:
        """Start the cage; a `service` cage also starts its command in the background."""
        runtime = self.backend.start(cage, spec)
        if spec.lifecycle == "service":
            try:
                self.backend.spawn(cage, spec.command, cage.workload_log)
            except BaseException:
                self.backend.stop(cage)
                raise
        return runtime

    def stop(self, name: str) -> None:
        self.backend.stop(self._existing(name))

    def restart(self, name: str) -> dict:
        self.stop(name)
        return self.start(name)

    def destroy(self, name: str, keep_secrets: bool = False, keep_state: bool = False) -> None:
        """Stop the cage and remove its state; with `keep_secrets`, its secrets stay, with
        `keep_state` its named volumes (the next `cage create` or `run` of this name uses
        them)."""
        cage = self.store.cage(name)
        if not cage.root.exists():
            raise StateError(f"no cage named {name!r}; see `agentcage ls` (`agentcage prune -y` "
                             "stops a cage whose state directory was deleted)")
        self.backend.stop(cage)
        keep = (SECRETS,) * keep_secrets + (VOLUMES,) * keep_state
        self.store.remove(name, keep=keep)

    def exec(self, name: str, command: Sequence[str], interactive: bool = False,
             as_root: bool = False, lend_python: bool = False) -> int:
        cage = self._existing(name)
        return self.backend.exec(cage, command, interactive, as_root, lend_python)

    def exec_capture(self, name: str, command: Sequence[str], timeout: float | None = None,
                     as_root: bool = False):
        cage = self._existing(name)
        return self.backend.exec_capture(cage, command, timeout, as_root)

    def ls(self) -> list[dict[str, Any]]:
        """One row per name (see listing.py, which the lean `ls` reads too)."""
        from agentcage import listing

        return listing.rows(self.store)

    def prune(self) -> list[str]:
        """Remove what nobody can use any more: cages whose gateway died, ephemeral cages whose
        `run` process is gone, and starts abandoned halfway. Live sessions are left alone."""
        from agentcage.backends import orphans

        removed = []
        for row in self.ls():
            if row["status"] == "kept":
                continue  # what a cage keeps for its next life is nobody's rubbish
            cage = self.store.cage(row["name"])
            if row["status"] == "broken" or self._abandoned(cage, row):
                # an abandoned run's kept secrets and volumes are its project's: they stay
                run = cage.owner.exists()
                self.destroy(row["name"], keep_secrets=run, keep_state=run)
                removed.append(row["name"])
        # and what no state records any more (a dead gateway and a damaged runtime.json)
        removed += [s if " " in s else f"orphaned namespaces agc-{s}-*"  # a bare suffix
                    for s in orphans.sweep()]
        return removed

    @staticmethod
    def _abandoned(cage: CageDir, row: dict[str, Any]) -> bool:
        from agentcage.backends import host

        owner = cage.owner
        if row["lifecycle"] == "ephemeral" or owner.exists():
            try:
                return not host.alive(int(owner.read_text()))
            except (OSError, ValueError):
                return True
        if row["status"] == "starting":
            age = time.time() - cage.runtime.stat().st_mtime
            return age > 120
        return False

    # ---- domains --------------------------------------------------------------------------

    def _policy_doc(self, cage: CageDir) -> dict[str, Any]:
        """domains.json, checked as the gateway checks it (a damaged one is refused here too,
        with the fix, rather than half-read)."""
        doc = read_json(cage.policy, dict)
        try:
            policyfile.compile_document(doc)
        except policyfile.PolicyFileError as e:
            raise StateError(f"{cage.policy} is invalid ({e}); the gateway blocks everything "
                             f"until it is fixed: `agentcage cage update {cage.name} -c "
                             "cage.yaml` rewrites it") from None
        return doc

    def _publish_policy(self, cage: CageDir, doc: dict[str, Any]) -> None:
        write_json(cage.policy, doc)
        self._await_policy(cage)

    def _await_policy(self, cage: CageDir, timeout: float = 5.0) -> None:
        """Return once a running gateway has the domains.json now on disk in force (it checks
        the file four times a second and acknowledges each load), so a command that changed
        the domains never returns before the change applies."""
        if self.backend.runtime(cage).get("status") != "running":
            return
        st = os.stat(cage.policy)
        stamp = [st.st_mtime_ns, st.st_size, st.st_ino]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ack = json.loads(cage.policy_ack.read_text())
            except (OSError, ValueError):
                ack = {}
            if ack.get("stamp") == stamp:
                if not ack.get("ok"):
                    raise StateError(f"the gateway of cage {cage.name} refused the domain list "
                                     f"({ack.get('error')}); it blocks everything until fixed")
                return
            time.sleep(0.02)
        raise StateError(f"the gateway of cage {cage.name} did not confirm the new domain list "
                         f"within {timeout:g} s; see `agentcage ls` and its gateway.log")

    def domain_list(self, name: str) -> dict[str, Any]:
        doc = self._policy_doc(self._existing(name))
        return {"mode": doc.get("mode"), "rules": policyfile.describe(doc)}

    def domain_add(self, name: str, domains: Sequence[str], expires_in: str | None = None) -> None:
        cage = self._existing(name)
        expires_at = None
        if expires_in:
            try:
                expires_at = time.time() + parse_duration(expires_in)
            except ValueError as e:
                raise ConfigError(f"--expires-in: {e}") from None
        doc = self._policy_doc(cage)
        for domain in domains:
            try:
                doc = policyfile.add_rule(doc, domain, expires_at)
            except DomainPatternError as e:
                raise ConfigError(f"domain {domain!r}: {e}") from None
        policyfile.compile_document(doc)  # never write what the gateway would refuse
        self._publish_policy(cage, doc)

    def domain_rm(self, name: str, domain: str) -> bool:
        cage = self._existing(name)
        try:
            doc, found = policyfile.remove_rule(self._policy_doc(cage), domain)
        except DomainPatternError as e:
            raise ConfigError(f"domain {domain!r}: {e}") from None
        if found:
            self._publish_policy(cage, doc)
        return found

    # ---- secrets --------------------------------------------------------------------------
    # Values come in as bytes and never come out. After every change a running cage's gateway
    # gets the new staged copy and reloads it (the CLI returns once the gateway confirmed).

    def _secrets(self, name: str, create: bool = False):
        """(cage dir, its config, store, placeholder book). A cage not created yet may hold
        secrets already (set before `cage create`): its config is then the default one, and
        with `create` its directory is made for them."""
        from agentcage.config.model import CageConfig
        from agentcage.secrets import cage as cage_secrets

        cage = self.store.cage(name)
        if cage.exists():
            config = load_config(cage.config)
        elif create or (cage.root / SECRETS_DIR).is_dir():
            if create:
                self.store.create(name)
            config = CageConfig(name=name)
        else:
            raise StateError(f"no cage named {name!r} and no secret stored for one; see "
                             "`agentcage ls` (`secret set` works before `cage create`)")
        choice = cage_secrets.store_of(cage, config.secrets.backend,
                                       config.secrets.allow_plaintext)
        return cage, config, choice, cage_secrets.book_of(cage)

    def _apply_secrets(self, cage: CageDir, config: CageConfig) -> bool:
        """Re-stage and reload a running cage; False when it is not running."""
        from agentcage.secrets import cage as cage_secrets

        runtime = self.backend.runtime(cage)
        if runtime.get("status") != "running":
            return False
        cage_secrets.stage_for_gateway(cage, config.secrets.backend,
                                       config.secrets.allow_plaintext)
        cage_secrets.reload_gateway(cage, runtime)
        return True

    def secret_set(self, name: str, key: str, value: bytes) -> dict[str, Any]:
        """Store a secret. For a created cage, only a secret an injection rule names is
        accepted (any other could never be used); before `cage create`, any is kept."""
        from agentcage.secrets import check_env_name, check_value, set_secret

        try:
            check_env_name(key)
            check_value(key, value)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        cage = self.store.cage(name)
        if cage.exists():
            config = load_config(cage.config)
            # the gateway's own models' keys (the decider, the watcher's re-reader) too
            own = {(agent.api_key or "").removeprefix("secret:")
                   for agent in (config.agents.decider, config.agents.watcher) if agent.enable}
            if key not in config.placeholder_secrets() and key not in own:
                raise ConfigError(
                    f"cage {name} has no secret_injection rule or relay for {key}, so it could "
                    f"never be used; add one ({{env: {key}, inject_to: [api.example.com]}}) "
                    "to cage.yaml "
                    f"and apply it with `agentcage cage update {name} -c cage.yaml`"
                )
        pending = not cage.exists()
        cage, config, choice, book = self._secrets(name, create=True)
        placeholder = set_secret(choice.store, book, key, value)
        applied = self._apply_secrets(cage, config)
        return {"name": key, "placeholder": str(placeholder), "backend": choice.backend,
                "backend_reason": choice.reason, "warning": choice.warning,
                "applied": applied, "pending": pending}

    def secret_list(self, name: str) -> dict[str, Any]:
        from agentcage.secrets import list_secrets, rules_from_config

        _cage, config, choice, book = self._secrets(name)
        entries = list_secrets(choice.store, book, rules_from_config(config.secret_injection))
        return {"backend": choice.backend, "backend_reason": choice.reason,
                "warning": choice.warning,
                "secrets": [dataclasses.asdict(e) for e in entries]}

    def secret_rm(self, name: str, key: str) -> bool:
        from agentcage.secrets import remove_secret

        cage, config, choice, book = self._secrets(name)
        removed = remove_secret(choice.store, book, key)
        if removed:
            self._apply_secrets(cage, config)
        return removed

    def secret_rotate(self, name: str, keys: Sequence[str] = ()) -> dict[str, Any]:
        """New placeholders (all, or `keys`), in force at the gateway when this returns; new
        execs in the cage get them in their environment."""
        from agentcage.secrets import rotate_placeholders

        cage, config, _choice, book = self._secrets(name)
        try:
            rotations = rotate_placeholders(book, list(keys) or None)
        except ValueError as e:
            raise StateError(str(e)) from None
        applied = self._apply_secrets(cage, config)
        return {"applied": applied,
                "rotated": [{"name": r.name, "old": str(r.old) if r.old else None,
                             "new": str(r.new)} for r in rotations]}

    # ---- logs -----------------------------------------------------------------------------

    def capture_path(self, name: str) -> Path:
        return self._existing(name).capture

    def audit_path(self, name: str) -> Path:
        return self._existing(name).audit

    def workload_log(self, name: str) -> str:
        path = self._existing(name).workload_log
        return path.read_text(errors="replace") if path.exists() else ""

    def audit(self, name: str) -> list[dict[str, Any]]:
        from agentcage.gateway.audit import read_audit

        return read_audit(self.audit_path(name))

    def har(self, name: str, view: str = "inbound") -> tuple[dict[str, Any], int]:
        """The cage's capture (capture.jsonl and its rotations) as HAR 1.2 in `view`, and how
        many lines or records were skipped because they were torn or corrupt."""
        from agentcage.gateway.capture import capture_files, read_capture
        from agentcage.har import VIEWS, convert

        if view not in VIEWS:
            raise ConfigError(f"--view must be one of {', '.join(VIEWS)}, not {view!r}")
        cage = self._existing(name)
        files = capture_files(cage.capture)
        if not files:
            enabled = load_config(cage.config).capture.enable_har
            hint = ("no flow was captured yet" if enabled
                    else "set capture.enable_har: true in cage.yaml and recreate the cage")
            raise StateError(f"cage {name!r} has no capture: {hint}")
        records, bad_lines = read_capture(files)
        doc, bad_records = convert(records, view)
        from agentcage import findings
        from agentcage.har import annotate

        return annotate(doc, findings.read(cage)["findings"]), bad_lines + bad_records


def _apply_overrides(config: CageConfig, overrides: Overrides) -> CageConfig:
    from dataclasses import asdict

    from agentcage.config.load import apply_overrides

    return apply_overrides(config, **asdict(overrides))


def _recorded_overrides(cage: CageDir) -> Overrides | None:
    """What `create` recorded of its command line (None: nothing)."""
    from agentcage.config.overrides import Overrides

    path = cage.root / OVERRIDES_FILE
    if not path.exists():
        return None
    doc = read_json(path, dict)
    try:
        host_user = doc.get("host_user")
        return Overrides(trust=tuple(map(str, doc.get("trust", ()))),
                         upstream_ca=tuple(map(str, doc.get("upstream_ca", ()))),
                         host_user=None if host_user is None else int(host_user))
    except (TypeError, ValueError):
        raise StateError(f"{path} is damaged; `agentcage cage update` with the options again "
                         "rewrites it") from None


def _record_overrides(cage: CageDir, overrides: Overrides) -> None:
    doc = {"trust": list(overrides.trust),
           "upstream_ca": [str(Path(p).resolve()) for p in overrides.upstream_ca],
           "host_user": overrides.host_user}
    write_json(cage.root / OVERRIDES_FILE, doc)


def _combine_overrides(recorded: Overrides | None, given: Overrides | None
                       ) -> tuple[Overrides | None, list[str]]:
    """The overrides an update applies: each kind given now replaces what was recorded, and
    each kind only recorded is kept. The second value names the options kept."""
    from dataclasses import replace

    if recorded is None:
        return given, []
    if given is None:
        from agentcage.config.overrides import Overrides

        given = Overrides()
    kept, effective = [], given
    for field, option in (("trust", "--trust-network"), ("upstream_ca", "--upstream-ca"),
                          ("host_user", "--as-user")):
        mine, theirs = getattr(given, field), getattr(recorded, field)
        if not mine and theirs:
            effective = replace(effective, **{field: theirs})
            kept.append(option)
    return effective, kept


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Counts by direction and decision, the most blocked hosts, and firewall drop totals."""
    counts: dict[str, dict[str, int]] = {}
    blocked: dict[str, int] = {}
    dropped: dict[str, int] = {}
    for rec in records:
        direction, decision = str(rec.get("direction")), str(rec.get("decision"))
        if direction == "packets":
            dropped = dict(rec.get("dropped_total") or dropped)
            continue
        by_decision = counts.setdefault(direction, {})
        by_decision[decision] = by_decision.get(decision, 0) + 1
        if decision == "blocked" and rec.get("host"):
            key = f"{direction} {rec['host']}"
            blocked[key] = blocked.get(key, 0) + 1
    top = sorted(blocked.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    return {"decisions": counts, "top_blocked": top, "dropped_packets": dropped}


def format_record(rec: dict[str, Any]) -> str:
    """One audit record as one line of text (sanitised: the cage controls hosts and paths)."""
    def clean(value: Any) -> str:
        text = str(value if value is not None else "")
        return "".join(ch if ch.isprintable() else "?" for ch in text)[:300]

    ts = time.strftime("%H:%M:%S", time.localtime(float(rec.get("ts", 0))))
    if rec.get("direction") == "packets":
        return f"{ts} packets  blocked  dropped={clean(json.dumps(rec.get('dropped', {})))}"
    parts = [ts, clean(rec.get("direction")), clean(rec.get("decision")),
             clean(rec.get("method")), clean(rec.get("host"))]
    if rec.get("path"):
        parts.append(clean(rec.get("path")))
    parts.append(f"({clean(rec.get('reason'))})")
    return " ".join(p for p in parts if p)
