"""The README's table of measured sandboxes, and the reports it is made from.

    .venv/bin/python scripts/profiles.py measure            # as root: every preset this host runs
    .venv/bin/python scripts/profiles.py add REPORT LABEL   # add a saved report (a cage's, say)
    .venv/bin/python scripts/profiles.py table              # rewrite the README's table

`measure` runs every preset (`agentsec presets`) the way its kind is started (`rows`): the
agents' and other tools' own sandboxes (srt, Codex, firejail) twice, as root and as an ordinary
user (uid 1000); bubblewrap presets from root, which they leave for the uid they name; rootful
podman (runc and gVisor's runsc) and systemd-nspawn as root, which they need; rootless podman as
an ordinary user made for the run (with a subordinate id range; tests/integration/
sandbox_worlds.py). Each run is in network and mount namespaces of its own (loopback only:
nothing leaves the machine), where root's home (/root) is a home holding a typical set of
credential files (made here, with dummy contents) and uid 1000's is an empty one, so that tools
that take the home from the password database (firejail) meet the same homes as those that read
HOME. Containers run the podman world's Debian image; systemd-nspawn its root directory, through
an overlay where the preset writes. A preset this host cannot run is recorded with the reason
(docs/profiles/unmeasured.yaml) and shown as a row saying so. Reports are saved redacted under
docs/profiles/, and `agentsec chart` draws them beside the table (docs/profiles/chart.svg).
`add` re-scores a saved report (its probe output) redacted, under a label of your choosing: that
is how the agentcage cage's row, from `agentcage demo`'s reports, gets there. `table` rewrites
only the block between <!-- profiles:start --> and <!-- profiles:end --> in README.md, from
whatever docs/profiles holds, ranked by agentsec.scoring.rank.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the test worlds: the podman image, nspawn's root, a rootless user

from agentsec import gvisor, service  # noqa: E402
from agentsec.launchers import Preset, availability, load_presets  # noqa: E402
from agentsec.render.states import axis_cell  # noqa: E402
from agentsec.report import Target, report_filename  # noqa: E402
from agentsec.scoring.rank import ranked, score_text  # noqa: E402
from agentsec.untrusted import parse_probe_output  # noqa: E402

PROFILES = ROOT / "docs" / "profiles"
README = ROOT / "README.md"
CHART = "chart.svg"
# Not a report (every *.json here is one): the rows this host could not run, and why.
UNMEASURED = "unmeasured.yaml"
HEADER = "# written by scripts/profiles.py measure: the presets this host could not run\n"
START, END = "<!-- profiles:start -->", "<!-- profiles:end -->"
AGENTSEC = str(Path(sys.executable).parent / "agentsec")
ORDINARY_UID = 1000
ROOT_ONLY_ENGINES = ("podman", "nspawn", "docker")  # rootful engines: root is what they need
# Dummy files at the paths the probe looks for: only their presence and readability matter.
PLANTED = {
    ".aws/credentials": "[default]\naws_access_key_id = AKIADUMMY\n",
    ".ssh/id_ed25519": "dummy key\n",
    ".git-credentials": "https://agent:dummy@example.test\n",
    ".npmrc": "//registry.npmjs.org/:_authToken=dummy\n",
    ".codex/auth.json": "{}\n",
    ".claude/.credentials.json": "{}\n",
}
# In the run's own mount namespace: loopback up, the planted home over /root, an empty one over
# uid 1000's, and the interpreter agentsec runs on kept where it was if it lived under /root.
NAMESPACE_SCRIPT = """\
set -e
ip link set lo up
if [ -n "$3" ]; then mkdir -p "$1/$3" && mount --bind "/root/$3" "$1/$3"; fi
mount --rbind "$1" /root
mount --bind "$2" "$4"
shift 4
exec "$@"
"""


@dataclass(frozen=True)
class Row:
    """One configuration of the table: a preset and who starts it (root, uid 1000, or an
    ordinary user made for rootless podman)."""

    preset: str
    who: str  # "root" | "user" | "rootless"

    @property
    def spec(self) -> Preset:
        return load_presets()[self.preset]


def rows() -> list[Row]:
    """Every preset, started as its kind is: see the module's docstring."""
    found = []
    for name, preset in load_presets().items():
        if preset.is_peer:
            found += [Row(name, "root"), Row(name, "user")]
        elif preset.rootless:
            found.append(Row(name, "rootless"))
        else:  # bwrap (which drops root itself where its preset says), rootful engines
            found.append(Row(name, "root"))
    return found


def _first_version(argv: Sequence[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    found = re.search(r"\d+(?:\.\d+)*", out.splitlines()[0] if out else "")
    return found.group(0) if found else "?"


def tool_version(preset: Preset) -> str:
    """What ran the preset, at which version: 'bwrap 0.8.0', 'podman 4.3.1, runsc 20221219'."""
    if preset.version:
        return f"{preset.engine} {preset.version}"
    if preset.engine == "bwrap":
        return f"bwrap {_first_version(['bwrap', '--version'])}"
    if preset.engine == "nspawn":
        return f"systemd-nspawn {_first_version(['systemd-nspawn', '--version'])}"
    if shutil.which(preset.binary) is None:
        return preset.binary
    text = f"{preset.binary} {_first_version([preset.binary, '--version'])}"
    if preset.runtime == gvisor.RUNTIME:
        binary = shutil.which(gvisor.RUNTIME)
        release = gvisor.release_date(binary) if binary else None
        text += f", runsc {release or '?'}"
    return text


def label_for(row: Row, measured: bool = True) -> str:
    """The row's name in the table: the tool's version where it ran, none where it did not."""
    preset = row.spec
    if row.who == "user":
        who = f"as uid {ORDINARY_UID}"
    elif row.who == "rootless":
        who = "as an ordinary user"
    elif preset.drop_to:
        who = f"from root, as uid {preset.drop_to.partition(':')[0]}"
    else:
        who = "as root"
    return f"{row.preset} ({tool_version(preset)}), {who}" if measured else f"{row.preset}, {who}"


def why_not(row: Row) -> str | None:
    """Why this host cannot run the row, or None. Rootless presets are refused to root by
    `availability`, but `measure` starts them as their own user."""
    preset = row.spec
    if row.who != "rootless":
        state = availability(preset)
        return None if state.runnable else state.why_not
    if shutil.which(preset.binary) is None:
        return f"{preset.binary} is not installed"
    return gvisor.why_not(preset.engine_flags) if preset.runtime == gvisor.RUNTIME else None


@dataclass(frozen=True)
class Homes:
    root: Path  # the planted one, bound over /root
    user: Path  # an empty one of uid 1000's, bound over its home
    work: Path


@contextlib.contextmanager
def homes() -> Iterator[Homes]:
    base = Path(tempfile.mkdtemp(prefix="agentsec-profiles-", dir="/var/tmp"))  # not /tmp: Codex
    try:
        root_home, user_home, work = base / "root-home", base / "user-home", base / "work"
        for relative, text in PLANTED.items():
            (root_home / relative).parent.mkdir(parents=True, exist_ok=True)
            (root_home / relative).write_text(text)
        root_home.chmod(0o700)
        user_home.mkdir(mode=0o755)
        os.chown(user_home, ORDINARY_UID, pwd.getpwuid(ORDINARY_UID).pw_gid)
        work.mkdir()
        base.chmod(0o755)
        work.chmod(0o777)  # the ordinary user's runs work here too
        yield Homes(root_home, user_home, work)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# Codex's sandbox keeps a lock directory and a daemon directory per uid in /tmp.
CODEX_TMP = ("codex-bwrap-synthetic-mount-targets-*", "codex-daemon-*")


@contextlib.contextmanager
def codex_leftovers_removed() -> Iterator[None]:
    """The per-uid directories Codex's runs leave in /tmp, removed if the runs made them."""
    before = {path for pattern in CODEX_TMP for path in Path("/tmp").glob(pattern)}
    try:
        yield
    finally:
        for pattern in CODEX_TMP:
            for path in set(Path("/tmp").glob(pattern)) - before:
                shutil.rmtree(path, ignore_errors=True)


def _interpreter_under_root() -> str:
    """The top directory under /root that agentsec's interpreter lives in ('.pyenv'), if it
    does: it must stay reachable once the planted home hides the real /root."""
    real = Path(sys.executable).resolve()
    if real.parts[:2] == ("/", "root") and len(real.parts) > 2:
        return real.parts[2]
    return ""


class Measurer:
    """Runs rows into `out_dir`; holds the podman world, the rootless user and nspawn's root
    for as long as it is open (`with Measurer(...) as m`)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self._stack = contextlib.ExitStack()
        self._world: Any = None
        self._rootless: Any = None
        self._overlay: Path | None = None
        self.homes: Homes | None = None

    def __enter__(self) -> Measurer:
        self.homes = self._stack.enter_context(homes())
        self._stack.enter_context(codex_leftovers_removed())
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _podman(self) -> Any:
        if self._world is None:
            from tests.integration.podman_world import podman_world
            from tests.integration.sandbox_worlds import runtime_state_tidied
            self._world = self._stack.enter_context(podman_world())
            self._stack.enter_context(runtime_state_tidied())
        return self._world

    def _rootless_user(self) -> Any:
        if self._rootless is None:
            from tests.integration.sandbox_worlds import rootless_user
            self._rootless = self._stack.enter_context(rootless_user(self._podman()))
        return self._rootless

    def _nspawn_root(self, writes: bool) -> str:
        world = self._podman()
        if not writes:
            return str(world.rootfs)  # read-only, id-mapped: the shared tree, never written
        if self._overlay is None:
            from tests.integration.sandbox_worlds import overlay_root
            self._overlay = self._stack.enter_context(overlay_root(world.rootfs))
        return str(self._overlay)

    def argv_env(self, row: Row, label: str) -> tuple[list[str], dict[str, str]]:
        assert self.homes is not None
        preset = row.spec
        user_home = pwd.getpwuid(ORDINARY_UID).pw_dir
        argv = ["unshare", "--net", "--mount", "--", "sh", "-c", NAMESPACE_SCRIPT, "sh",
                str(self.homes.root), str(self.homes.user), _interpreter_under_root(), user_home,
                AGENTSEC, "blast-radius", "preset", row.preset, "--redact", "--no-history",
                "--label", label, "--out", str(self.out_dir), "--python", "/usr/bin/python3"]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}
        if preset.engine == "podman":
            world = self._podman()
            env.update(world.env)
            argv += ["--image", world.image]
        if preset.takes_directory:
            argv += ["--image", self._nspawn_root(writes="--read-only" not in preset.flags)]
        if row.who == "user":
            argv += ["--as-user", str(ORDINARY_UID)]
        if row.who == "rootless":
            user = self._rootless_user()
            env.update(user.env)
            argv += ["--as-user", user.as_user]
        return argv, env

    def measure(self, row: Row) -> Path:
        assert self.homes is not None
        label = label_for(row)
        argv, env = self.argv_env(row, label)
        proc = subprocess.run(argv, cwd=self.homes.work, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise SystemExit(f"{label}: {proc.stderr.strip()}")
        return self.out_dir / f"{report_filename(label)}.json"


def measure(out_dir: Path, only: Sequence[Row] | None = None) -> dict[Row, Path]:
    """Every row this host can run (or `only` those), saved under out_dir; the rows it cannot
    run, with the reason, in out_dir/unmeasured.json."""
    if os.geteuid() != 0:
        raise SystemExit("profiles measure: run as root (it starts sandboxes as root and as "
                         "ordinary users)")
    out_dir.mkdir(parents=True, exist_ok=True)
    if only is None:  # a whole new set: the presets' earlier reports go (added ones stay)
        for report in load(out_dir):
            if report["target"].get("kind") == "preset":
                stem = report_filename(report["label"])
                for suffix in (".json", ".md"):
                    (out_dir / f"{stem}{suffix}").unlink(missing_ok=True)
    saved: dict[Row, Path] = {}
    unmeasured = []
    with Measurer(out_dir) as measurer:
        for row in only if only is not None else rows():
            why = why_not(row)
            if why is not None:
                label = label_for(row, measured=False)
                unmeasured.append({"label": label, "preset": row.preset, "who": row.who,
                                   "why": f"not measured here: {why}"})
                print(f"not measured: {label} ({why})", file=sys.stderr)
                continue
            saved[row] = measurer.measure(row)
            print(f"measured {label_for(row)}", file=sys.stderr)
    if only is None:
        text = yaml.safe_dump({"rows": unmeasured}, sort_keys=False, width=100)
        (out_dir / UNMEASURED).write_text(HEADER + text)
    return saved


def add(report_path: Path, label: str, out_dir: Path) -> Path:
    """Re-score a saved report's probe output, redacted, under label."""
    report = json.loads(report_path.read_text(encoding="utf-8"))
    probe = parse_probe_output(json.dumps(report["probe"]["output"]))
    raw_target = report.get("target", {})
    target = Target(kind=raw_target.get("kind", "captured"), how=raw_target.get("how", ""),
                    engine=raw_target.get("engine"), preset=raw_target.get("preset"))
    rescored = service.score(probe, label=label, target=target, rc=report.get("rc", 0),
                             redact=True)
    return service.save(rescored, out_dir).json_path


def load(out_dir: Path) -> list[dict[str, Any]]:
    reports = []
    for path in sorted(out_dir.glob("*.json")):
        report = json.loads(path.read_text(encoding="utf-8"))
        if report.get("test") == "sandbox-blast-radius":
            reports.append(report)
    return reports


def load_unmeasured(out_dir: Path) -> list[dict[str, str]]:
    path = out_dir / UNMEASURED
    if not path.exists():
        return []
    return list(yaml.safe_load(path.read_text(encoding="utf-8"))["rows"])


def render(reports: list[dict[str, Any]], unmeasured: Sequence[dict[str, str]] = ()) -> str:
    if not reports:
        return "No profiles measured yet.\n"
    axes = list(reports[0]["summary"]["axes"].values())
    header = "| Configuration | Score | " + " | ".join(a["title"] for a in axes) + " | Probe |"
    lines = [
        "<!-- generated by scripts/profiles.py from the reports in docs/profiles -->",
        "",
        header,
        "|---|---:|" + "|".join(":-:" for _ in axes) + "|---|",
    ]
    for report in ranked(reports):
        summary = report["summary"]
        cells = " | ".join(axis_cell(a) for a in summary["axes"].values())
        lines.append(f"| {report['label']} | {score_text(summary)} | {cells} | "
                     f"{report['probe']['version']} |")
    for row in sorted(unmeasured, key=lambda r: r["label"]):
        blanks = " | ".join("" for _ in axes)
        lines.append(f"| {row['label']} | {row['why']} | {blanks} | |")
    return "\n".join(lines) + "\n"


def draw_chart(out_dir: Path) -> None:
    proc = subprocess.run([AGENTSEC, "chart", str(out_dir), "--out", str(out_dir / CHART)],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"agentsec chart: {proc.stderr.strip()}")


def rewrite_readme(table: str, readme: Path = README) -> bool:
    text = readme.read_text(encoding="utf-8")
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise SystemExit(f"{readme} needs exactly one {START} ... {END} block")
    head, rest = text.split(START)
    _, tail = rest.split(END)
    new = f"{head}{START}\n{table}{END}{tail}"
    if new != text:
        readme.write_text(new, encoding="utf-8")
    return new != text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=PROFILES, help="where the reports live")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("measure", help="run every preset this host can run, as its kind is started")
    adding = sub.add_parser("add", help="add a saved report under a label, redacted")
    adding.add_argument("report", type=Path)
    adding.add_argument("label")
    sub.add_parser("table", help="rewrite the README's profiles table and the chart")
    args = parser.parse_args()
    if args.command == "measure":
        measure(args.dir)
    elif args.command == "add":
        print(add(args.report, args.label, args.dir))
    draw_chart(args.dir)
    changed = rewrite_readme(render(load(args.dir), load_unmeasured(args.dir)))
    print("README.md profiles table " + ("rewritten" if changed else "unchanged"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
