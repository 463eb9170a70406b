"""``agentsec matrix``: every runnable preset against one image, one row per configuration."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentsec import service
from agentsec.errors import AgentsecError
from agentsec.kube_jobs import Kubectl, KubeRenderError, render
from agentsec.launchers import Availability, availability, describe, load_presets, preset_launch
from agentsec.render.markdown import md
from agentsec.render.states import axis_cell
from agentsec.report import SCHEMA_VERSION, TEST_MATRIX, Target, write_atomically
from agentsec.scoring.rank import rank_key, score_text


@dataclass
class MatrixResult:
    image: str | None
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)

    def best_score(self) -> int | None:
        scores = [row["score"] for row in self.rows]
        return min(scores) if scores else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "tool": "agentsec",
            "test": TEST_MATRIX,
            "schema_version": SCHEMA_VERSION,
            "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "image": self.image,
            "rows": self.rows,
            "skipped": self.skipped,
            "failed": self.failed,
        }


def choose_presets(names: Sequence[str] | None) -> list[str]:
    presets = load_presets()
    if not names:
        return list(presets)
    unknown = [name for name in names if name not in presets]
    if unknown:
        raise AgentsecError(f"unknown presets: {', '.join(unknown)} (see `agentsec presets`)")
    return list(names)


def run_matrix(
    image: str | None,
    preset_names: Sequence[str],
    out_dir: Path,
    python: str,
    progress: Callable[[str], None],
    kube: Kubectl | None = None,
) -> MatrixResult:
    """`kube`: run each container preset as a Kubernetes Job through it (kube_jobs.py)."""
    if kube is not None:
        return _run_on_kubernetes(image, preset_names, out_dir, python, progress, kube)
    result = MatrixResult(image=image)
    presets = load_presets()
    for index, name in enumerate(preset_names, start=1):
        preset = presets[name]
        state = availability(preset)
        if preset.takes_directory:
            state = Availability(preset, False, "takes a root directory, not an image: "
                                 f"agentsec blast-radius preset {name} --image DIR")
        if not state.runnable or (preset.needs_image and not image):
            why = state.why_not or "needs an image"
            result.skipped.append({"preset": name, "why": why})
            progress(f"[{index}/{len(preset_names)}] {name}: skipped ({why})")
            continue
        progress(f"[{index}/{len(preset_names)}] {name}: measuring")
        try:  # what fails here fails this configuration; a report that cannot be saved, all
            launch = preset_launch(name, "", image if preset.needs_image else None, python=python)
            run = launch.run()
        except AgentsecError as exc:
            result.failed.append({"preset": name, "error": str(exc)})
            progress(f"[{index}/{len(preset_names)}] {name}: failed ({exc})")
            continue
        label = f"{name}_{image}" if preset.needs_image else name
        target = dataclasses.replace(launch.target, how=describe(launch))
        _add_row(result, name, label, run, target, out_dir)
        progress(f"[{index}/{len(preset_names)}] {name}: score {result.rows[-1]['score']}")
    result.rows.sort(key=lambda row: (row["rank"], row["label"]))
    return result


def _add_row(result: MatrixResult, name: str, label: str, run: Any, target: Target,
             out_dir: Path) -> None:
    plan = service.Plan(label, out_dir)
    saved = service.measure_output(run.output, target, run.rc, plan).saved
    report, summary = saved.report, saved.report["summary"]
    result.rows.append(
        {
            "label": label,
            "preset": name,
            "rank": list(rank_key(report)[:-1]),
            "score": summary["score"],
            "raw_score": summary["raw_score"],
            "axes": {key: axis_cell(axis) for key, axis in summary["axes"].items()},
            "probe_version": report["probe"]["version"],
            "report": str(saved.json_path),
        }
    )


def _run_on_kubernetes(image: str | None, preset_names: Sequence[str], out_dir: Path,
                       python: str, progress: Callable[[str], None],
                       kube: Kubectl) -> MatrixResult:
    """Each container preset as a Job of the cluster kubectl reaches; the rest are skipped."""
    if not image:
        raise AgentsecError("--on k8s needs an IMAGE: the Jobs run the probe in it")
    result = MatrixResult(image=image)
    presets = load_presets()
    total = len(preset_names)
    for index, name in enumerate(preset_names, start=1):
        try:
            job = render(presets[name], image, python, os.environ)
        except KubeRenderError as exc:
            result.skipped.append({"preset": name, "why": str(exc)})
            progress(f"[{index}/{total}] {name}: skipped ({exc})")
            continue
        progress(f"[{index}/{total}] {name}: measuring as job {job.name}")
        try:
            run = kube.run(job)
        except AgentsecError as exc:
            result.failed.append({"preset": name, "error": str(exc)})
            progress(f"[{index}/{total}] {name}: failed ({exc})")
            continue
        how = "Kubernetes Job" + "".join(f"; {note}" for note in job.notes)
        target = Target(kind="preset", how=how, engine="kubernetes", image=image,
                        flags=presets[name].flags, command=(*kube.argv, "apply", "-f", "-"),
                        preset=name)
        _add_row(result, name, f"{name}_{image}_k8s", run, target, out_dir)
        progress(f"[{index}/{total}] {name}: score {result.rows[-1]['score']}")
    result.rows.sort(key=lambda row: (row["rank"], row["label"]))
    return result


def render_matrix_markdown(result: MatrixResult) -> str:
    if not result.rows:
        return "No configuration could be measured.\n"
    axes = list(result.rows[0]["axes"])
    lines = [
        f"# Blast-radius matrix: {md(result.image or 'no image')}",
        "",
        "| Configuration | Score | " + " | ".join(a.capitalize() for a in axes) + " | Probe |",
        "|---|---:|" + "|".join(":-:" for _ in axes) + "|---|",
    ]
    for row in result.rows:
        cells = " | ".join(row["axes"][a] for a in axes)
        label, version = md(row["label"]), md(row["probe_version"])
        score = score_text(row)
        lines.append(f"| {label} | {score} | {cells} | {version} |")
    for skip in result.skipped:
        lines.append(f"\n- skipped {skip['preset']}: {skip['why']}")
    for fail in result.failed:
        lines.append(f"\n- failed {fail['preset']}: {fail['error']}")
    return "\n".join(lines) + "\n"


def save_matrix(result: MatrixResult, out_dir: Path) -> tuple[Path, Path]:
    stem = f"matrix_{result.image or 'bwrap'}".replace("/", "_").replace(":", "_")
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    write_atomically(json_path, json.dumps(result.as_dict(), indent=2) + "\n")
    write_atomically(md_path, render_matrix_markdown(result))
    return json_path, md_path
