"""Reports: the schema holds, redaction keeps scores, Markdown shows axes before the score."""

from __future__ import annotations

import json
from importlib import resources

import jsonschema
import pytest

from agentsec import service
from agentsec.render.markdown import render_markdown
from agentsec.report import Target, report_filename
from agentsec.untrusted import parse_probe_output
from tests.agentsec import outputs


def _schema() -> dict:
    text = resources.files("agentsec.data").joinpath("report.schema.json").read_text()
    return json.loads(text)


def _leaky() -> dict:
    out = outputs.sealed()
    s = out["sections"]
    s["secrets_env"]["data"]["names"] = [{"name": "ACME_PROD_TOKEN", "length": 12}]
    s["filesystem"]["data"]["host_mounts"] = [
        {
            "mountpoint": "/home/alice/secret-project",
            "fstype": "ext4",
            "rw": True,
            "root": "/home/alice/secret-project",
        }
    ]
    s["network"]["data"]["interfaces"] = ["lo", "wlp-alice0"]
    s["proc_environ"]["data"].update(
        pid1_environ_readable=True,
        pid1_holds_more=True,
        pid1_extra_secret_names=["ALICE_BANK_TOKEN"],
        others_holding_more=1,
        others_extra_secret_names=["ALICE_BANK_TOKEN"],
    )
    out["context"].update(
        hostname="alice-laptop", cwd="/home/alice/secret-project", user="alice", home="/home/alice"
    )
    return out


def _report(output: dict, redact: bool = False) -> dict:
    probe = parse_probe_output(outputs.line(output))
    return service.score(
        probe, label="t", target=Target(kind="captured", how="by hand"), rc=0, redact=redact
    )


@pytest.mark.parametrize("redact", [False, True])
@pytest.mark.parametrize("builder", [outputs.sealed, _leaky, lambda: outputs.failed("network")])
def test_reports_validate_against_the_schema(builder, redact: bool):
    jsonschema.validate(_report(builder(), redact=redact), _schema())


def test_redaction_strips_identifying_details_and_keeps_every_finding():
    plain, redacted = _report(_leaky()), _report(_leaky(), redact=True)
    text = json.dumps(redacted)
    for secret in ("ACME_PROD_TOKEN", "ALICE_BANK_TOKEN", "alice", "secret-project", "wlp-alice0"):
        assert secret in json.dumps(plain)
        assert secret not in text
    assert redacted["redacted"] is True
    assert redacted["summary"]["score"] == plain["summary"]["score"]
    assert [f["id"] for f in redacted["summary"]["findings"]] == [
        f["id"] for f in plain["summary"]["findings"]
    ]
    assert [len(f["evidence"]) for f in redacted["summary"]["findings"]] == [
        len(f["evidence"]) for f in plain["summary"]["findings"]
    ]


@pytest.mark.parametrize("mountpoint", ["/etc/hosts", "/run/.containerenv"])
def test_a_runtimes_own_files_score_the_same_redacted(mountpoint: str):
    """A file the container runtime binds on purpose is no host mount (FS-003): redaction keeps
    its name, so the redacted report does not score it as one."""
    out = outputs.with_data("filesystem", host_mounts=[
        {"mountpoint": mountpoint, "fstype": "ext4", "rw": True, "root": "/x", "writable": True}])
    for redact in (False, True):
        assert "FS-003" not in {f["id"] for f in _report(out, redact)["summary"]["findings"]}
    user_data = outputs.with_data("filesystem", host_mounts=[
        {"mountpoint": "/data", "fstype": "ext4", "rw": True, "root": "/x", "writable": True}])
    for redact in (False, True):  # the control
        assert "FS-003" in {f["id"] for f in _report(user_data, redact)["summary"]["findings"]}


def test_redaction_also_strips_section_error_messages():
    out = outputs.failed("network")
    out["sections"]["network"]["error"] = "FileNotFoundError: /home/alice/targets.json"
    text = json.dumps(_report(out, redact=True))
    assert "alice" not in text and "FileNotFoundError" in text


def test_markdown_puts_the_axes_before_the_score_and_escapes_evidence():
    out = outputs.with_data("secrets_env", names=[{"name": "X_TOKEN|<script>", "length": 3}])
    text = render_markdown(_report(out))
    assert text.index("Privilege") < text.index("Score:")
    assert "<script>" not in text
    assert "\\|" in text


def test_not_measured_is_spelled_out_and_the_score_called_a_lower_bound():
    text = render_markdown(_report(outputs.failed("network")))
    assert "? not measured" in text
    assert "lower bound" in text


@pytest.mark.parametrize(
    ("label", "name"),
    [
        ("as-i-run-it", "as-i-run-it"),
        ("docker default/x", "docker_default_x"),
        ("../../etc/passwd", "etc_passwd"),
    ],
)
def test_report_filenames_never_escape_the_directory(label: str, name: str):
    assert report_filename(label) == name
