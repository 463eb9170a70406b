"""The README's table of measured profiles, and the reports it is made from.

    .venv/bin/python scripts/profiles.py measure            # as root: run the peer presets
    .venv/bin/python scripts/profiles.py add REPORT LABEL   # add a saved report (a cage's, say)
    .venv/bin/python scripts/profiles.py table              # rewrite the README's table

`measure` runs every preset of an agent's own sandbox (srt, codex) twice, as root and as an
ordinary user (uid 1000), each in a network namespace of its own with loopback up (nothing
leaves the machine), and saves the reports redacted under docs/profiles/. The root runs get a
home holding a typical set of credential files (made here, with dummy contents), so the table
shows which of them each sandbox exposes; the ordinary user's runs get that user's own home.
`add` re-scores a saved report (its probe output) redacted, under a label of your choosing:
that is how the agentcage cage's row, from `agentcage demo`'s reports, gets there. `table`
rewrites only the block between <!-- profiles:start --> and <!-- profiles:end --> in README.md,
from whatever docs/profiles holds, ranked by agentsec.scoring.rank.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from agentsec import service
from agentsec.launchers import load_presets
from agentsec.peers import codex_home_to_make
from agentsec.render.states import axis_cell
from agentsec.report import Target
from agentsec.scoring.rank import ranked, score_text
from agentsec.untrusted import parse_probe_output

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ROOT / "docs" / "profiles"
README = ROOT / "README.md"
START, END = "<!-- profiles:start -->", "<!-- profiles:end -->"
AGENTSEC = str(Path(sys.executable).parent / "agentsec")
ORDINARY_USER = "1000"
AGENT_SANDBOXES = ("srt", "codex")
# Dummy files at the paths the probe looks for: only their presence and readability matter.
PLANTED = {
    ".aws/credentials": "[default]\naws_access_key_id = AKIADUMMY\n",
    ".ssh/id_ed25519": "dummy key\n",
    ".git-credentials": "https://agent:dummy@example.test\n",
    ".npmrc": "//registry.npmjs.org/:_authToken=dummy\n",
    ".codex/auth.json": "{}\n",
    ".claude/.credentials.json": "{}\n",
}


def label_for(preset: str, as_user: bool) -> str:
    spec = load_presets()[preset]
    who = "as uid 1000" if as_user else "as root"
    return f"{spec.engine} {spec.version} {preset.split('-', 1)[1]}, {who}"


def measure(out_dir: Path) -> None:
    if os.geteuid() != 0:
        raise SystemExit("profiles measure: run as root (it starts sandboxes as root and uid 1000)")
    # Agents' own sandboxes: firejail (a peer too) takes its home from the password database,
    # not HOME, so its root run would measure this machine's /root, not the planted home.
    peers = [name for name, p in load_presets().items()
             if p.is_peer and p.engine in AGENT_SANDBOXES]
    base = Path(tempfile.mkdtemp(prefix="agentsec-profiles-", dir="/var/tmp"))  # not /tmp: Codex
    # Codex keeps its CODEX_HOME in the ordinary user's home: removed again if made here.
    made = codex_home_to_make(Path(pwd.getpwuid(int(ORDINARY_USER)).pw_dir))
    try:
        home, work = base / "home", base / "work"
        for relative, text in PLANTED.items():
            (home / relative).parent.mkdir(parents=True, exist_ok=True)
            (home / relative).write_text(text)
        work.mkdir()
        base.chmod(0o755)
        work.chmod(0o777)
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(home)}
        for name in peers:
            for as_user in (False, True):
                label = label_for(name, as_user)
                argv = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"',
                        "sh", AGENTSEC, "blast-radius", "preset", name, "--redact", "--no-history",
                        "--label", label, "--out", str(out_dir), "--python", "/usr/bin/python3"]
                if as_user:
                    argv += ["--as-user", ORDINARY_USER]
                proc = subprocess.run(argv, cwd=work, env=env, stdin=subprocess.DEVNULL,
                                      capture_output=True, text=True, timeout=300)
                if proc.returncode != 0:
                    raise SystemExit(f"{label}: {proc.stderr.strip()}")
                print(f"measured {label}", file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


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


def render(reports: list[dict[str, Any]]) -> str:
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
    return "\n".join(lines) + "\n"


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
    sub.add_parser("measure", help="run the peer presets as root and as uid 1000")
    adding = sub.add_parser("add", help="add a saved report under a label, redacted")
    adding.add_argument("report", type=Path)
    adding.add_argument("label")
    sub.add_parser("table", help="rewrite the README's profiles table")
    args = parser.parse_args()
    if args.command == "measure":
        measure(args.dir)
    elif args.command == "add":
        print(add(args.report, args.label, args.dir))
    changed = rewrite_readme(render(load(args.dir)))
    print("README.md profiles table " + ("rewritten" if changed else "unchanged"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
