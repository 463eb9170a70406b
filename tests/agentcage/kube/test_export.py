"""`agentcage export k8s`: the objects it writes, validated against the real schemas
(Kubernetes' own, through kubernetes-validate at a pinned Kubernetes version; agent-sandbox's
published CRDs, kept in tests/data/agent-sandbox with their source), the pod's security
settings as a reviewer would check them, and the command as a user meets it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from agentcage.config.load import load_config_text
from agentcage.config.scaffolds import scaffold_text
from agentcage.kube import layout
from agentcage.kube.export import export, to_yaml
from agentcage.kube.objects import FORMS

KUBERNETES = "1.34.0"  # the Kubernetes version the core objects are validated against
OLDEST = "1.29.0"  # the first with native sidecars (an init container's restartPolicy)
SCHEMAS = Path(__file__).resolve().parents[2] / "data" / "agent-sandbox"
REPO = Path(__file__).resolve().parents[3]

CAGE = """
name: kcage
container:
  image: registry.example.test/agent:1
  user: "1000:1000"
  command: ["/bin/sh"]
  volumes: [".:/workspace:rw", "home:/home/agent"]
  tmpfs: ["/tmp:rw,size=64m"]
  files: {"/home/agent/.agent.conf": "mode = caged\\n"}
  seed_files:
    /home/agent/.tool.json: {merge: {theme: dark, key: "${placeholder:API_KEY:last20}"}}
domains: {mode: allowlist, allow: [api.example.test]}
ports: {tcp: {allow: [8443]}}
secret_injection:
  - env: API_KEY
    inject_to: [api.example.test]
"""


def spec_of(text: str = CAGE):
    return load_config_text(text).spec()


def validate(obj: dict, kubernetes: str = KUBERNETES) -> None:
    """Against its schema: agent-sandbox's CRD, or Kubernetes' own (strict: no unknown field)."""
    if obj["apiVersion"].startswith(("agents.x-k8s.io/", "extensions.agents.x-k8s.io/")):
        schema = json.loads((SCHEMAS / f"{obj['kind'].lower()}.json").read_text())
        assert schema["apiVersion"] == obj["apiVersion"]
        jsonschema.validate(obj, schema["openAPIV3Schema"])
    else:
        kubernetes_validate.validate(obj, kubernetes, strict=True)


def pod_spec_of(objects) -> dict:
    for obj in objects:
        if obj["kind"] == "Pod":
            return obj["spec"]
        if obj["kind"] == "Deployment":
            return obj["spec"]["template"]["spec"]
        if obj["kind"] == "SandboxTemplate":
            return obj["spec"]["podTemplate"]["spec"]
    raise AssertionError("no pod")


@pytest.mark.parametrize("kubernetes", [OLDEST, KUBERNETES])
@pytest.mark.parametrize("form", FORMS)
def test_every_object_of_every_form_is_valid_against_its_schema(form, kubernetes):
    result = export(spec_of(), form, base=Path("/"), namespace="agents")
    kinds = [o["kind"] for o in result.exported.objects]
    assert kinds[0] == "ConfigMap"
    for obj in result.exported.objects:
        validate(obj, kubernetes)
    # what goes through YAML comes back the same (the files are what is validated above)
    assert list(yaml.safe_load_all(to_yaml(result.exported.objects))) == \
        list(result.exported.objects)


def test_a_schema_check_fails_on_a_broken_object():
    """The validators are live: a wrong field is caught by each."""
    result = export(spec_of(), "agent-sandbox", base=Path("/"))
    claim = next(o for o in result.exported.objects if o["kind"] == "SandboxClaim")
    broken = {**claim, "spec": {"sandboxTemplateRef": {"name": "x"}}}  # no warmPoolRef
    with pytest.raises(jsonschema.ValidationError):
        validate(broken)
    config = result.exported.objects[0]
    with pytest.raises(kubernetes_validate.ValidationError):
        validate({**config, "data": {"k": 1}})


@pytest.mark.parametrize("form", FORMS)
def test_the_agent_is_confined_and_only_the_gateway_holds_the_keys(form):
    spec = pod_spec_of(export(spec_of(), form, base=Path("/")).exported.objects)
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert not spec["hostNetwork"] and not spec["hostPID"] and not spec["hostIPC"]
    (agent,) = spec["containers"]
    sc = agent["securityContext"]
    assert sc["runAsUser"] == 1000 and sc["runAsNonRoot"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    env = {e["name"]: e["value"] for e in agent["env"]}
    assert env["API_KEY"].startswith("agentcage:secret:API_KEY:")
    assert env["HTTPS_PROXY"] == f"http://127.0.0.1:{layout.PROXY_PORT}"
    assert env["SSL_CERT_FILE"].startswith(layout.AGENT_PUBLIC_DIR + "/")
    assert sc["seccompProfile"] == {"type": "Localhost",
                                    "localhostProfile": "agentcage/agent-v1.json"}
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    assert mounts[layout.AGENT_PUBLIC_DIR]["readOnly"] is True
    assert mounts["/workspace/.git/hooks"]["readOnly"] is True
    assert mounts["/workspace/.claude"]["readOnly"] is True
    init = {c["name"]: c for c in spec["initContainers"]}
    assert list(init)[:2] == ["netfilter", "gateway"]  # the fence first, then the gateway
    assert init["gateway"]["restartPolicy"] == "Always"  # a native sidecar
    assert init["gateway"]["securityContext"]["runAsUser"] == layout.GATEWAY_UID
    assert init["gateway"]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert init["netfilter"]["securityContext"]["capabilities"]["add"] == ["NET_ADMIN"]
    # NET_ADMIN in the netfilter container alone; the Secret mounted in the gateway's alone
    added = [c["name"] for c in [*spec["initContainers"], *spec["containers"]]
             if c["securityContext"]["capabilities"].get("add")]
    assert added == ["netfilter"]
    keys = next(v["name"] for v in spec["volumes"] if "secret" in v)
    holders = [c["name"] for c in [*spec["initContainers"], *spec["containers"]]
               if any(m["name"] == keys for m in c.get("volumeMounts", []))]
    assert holders == ["gateway"]


def test_the_secret_holds_the_values_only_when_given_and_the_placeholders_match():
    from agentcage.secrets.placeholders import mint
    from agentcage.secrets.staging import StagedSecret

    staged = (StagedSecret("API_KEY", mint("API_KEY"), b"sk-real-value"),)
    result = export(spec_of(), "pod", base=Path("/"), staged=staged)
    (secret,) = [o for o in result.exported.objects if o["kind"] == "Secret"]
    assert secret["data"] == {"API_KEY": "c2stcmVhbC12YWx1ZQ=="}
    config = result.exported.objects[0]["data"]
    assert json.loads(config[layout.PLACEHOLDERS_KEY]) == {"API_KEY": str(staged[0].placeholder)}
    # the seed file names the placeholder's tail, never the value
    (files,) = [o for o in result.exported.objects if o["metadata"]["name"].endswith("-files")]
    seed = json.loads(next(v for k, v in files["data"].items() if k.startswith("seed-")))
    assert seed == {"theme": "dark", "key": str(staged[0].placeholder)[-20:]}
    plain = export(spec_of(), "pod", base=Path("/"))
    assert not [o for o in plain.exported.objects if o["kind"] == "Secret"]
    assert plain.exported.keys_secret == "agentcage-kcage-keys"
    assert "sk-real-value" not in to_yaml(plain.exported.objects)


def test_the_network_policy_allows_only_dns_and_the_cages_ports():
    result = export(spec_of(), "deployment", base=Path("/"))
    (policy,) = [o for o in result.exported.objects if o["kind"] == "NetworkPolicy"]
    assert policy["spec"]["ingress"] == []
    ports = sorted((p["protocol"], p["port"]) for rule in policy["spec"]["egress"]
                   for p in rule["ports"])
    assert ports == [("TCP", 53), ("TCP", 80), ("TCP", 443), ("TCP", 8443), ("UDP", 53)]


def test_the_pods_ruleset_loads_into_nftables():
    """The init container's ruleset, checked by nft itself (in a namespace of its own)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (a network namespace)")
    config = export(spec_of(), "pod", base=Path("/")).exported.objects[0]["data"]
    r = subprocess.run(["unshare", "--net", "nft", "-c", "-f", "-"], input=config["pod.nft"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(("text", "says"), [
    (CAGE.replace("  image: registry.example.test/agent:1\n", ""), "container.image"),
    (CAGE.replace('user: "1000:1000"', 'user: "0:0"'), "non-root"),
    (CAGE.replace('user: "1000:1000"', f'user: "{layout.GATEWAY_UID}:1000"'), "gateway"),
])
def test_a_cage_that_cannot_be_a_pod_is_refused_with_one_line(tmp_path, text, says):
    (tmp_path / "cage.yaml").write_text(text)
    r = agentcage("export", "k8s", "-c", str(tmp_path / "cage.yaml"), "-o", str(tmp_path / "o"),
                  cwd=tmp_path)
    assert r.returncode == 1
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: ") and says in line
    assert not (tmp_path / "o").exists()


def agentcage(*args: str, cwd: Path, home: Path | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8",
           "AGENTCAGE_HOME": str(home or cwd / "state"), "PYTHONPATH": str(REPO / "src")}
    return subprocess.run([sys.executable, "-m", "agentcage.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def test_the_command_writes_numbered_files_says_what_to_do_and_prints_json(tmp_path):
    (tmp_path / "cage.yaml").write_text(CAGE)
    r = agentcage("export", "k8s", "-c", "cage.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out_dir = tmp_path / "agentcage-kcage-k8s"
    files = sorted(p.name for p in out_dir.glob("*.yaml"))
    assert files[0].startswith("01-configmap-") and files[-1] == "04-pod-agentcage-kcage.yaml"
    assert f"apply: kubectl apply -f {out_dir.name}" in r.stdout
    # the seccomp profile, for the nodes: below the objects (kubectl apply -f is not recursive)
    profile = out_dir / "seccomp" / "agentcage" / "agent-v1.json"
    assert json.loads(profile.read_text())["defaultAction"] == "SCMP_ACT_ALLOW"
    assert "/var/lib/kubelet/seccomp/agentcage/agent-v1.json" in r.stderr
    # the Secret is not written without --with-secrets: the command to make it is said
    assert "kubectl create secret generic agentcage-kcage-keys --from-file=API_KEY=" in r.stderr
    assert "host directory . is an empty volume at /workspace" in r.stderr
    for path in out_dir.glob("*.yaml"):
        for obj in yaml.safe_load_all(path.read_text()):
            validate(obj)
    r = agentcage("export", "k8s", "-c", "cage.yaml", "--form", "agent-sandbox", "-o", "-",
                  cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    streamed = list(yaml.safe_load_all(r.stdout))
    assert [o["kind"] for o in streamed][-3:] == ["SandboxTemplate", "SandboxWarmPool",
                                                  "SandboxClaim"]
    r = agentcage("export", "k8s", "-c", "cage.yaml", "--json", "-o", "j", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["form"] == "pod" and len(doc["files"]) == 5
    assert doc["node_files"] == ["seccomp/agentcage/agent-v1.json"]
    assert doc["keys_secret"] == "agentcage-kcage-keys" and doc["keys_included"] is False
    assert all(Path(tmp_path, f).exists() for f in doc["files"])


def test_a_wrong_source_or_option_mix_is_refused_with_one_line(tmp_path):
    (tmp_path / "cage.yaml").write_text(CAGE)
    for args, says in ((("-c", "cage.yaml", "--with-secrets"), "needs a cage's NAME"),
                       (("nosuchcage",), "no cage named 'nosuchcage'"),
                       ((), "one of them"),
                       (("-c", "cage.yaml", "-o", "-", "--json"), "--json describes"),
                       (("-c", "cage.yaml", "--form", "job"), "Invalid value for '--form'")):
        r = agentcage("export", "k8s", *args, cwd=tmp_path)
        assert r.returncode == 1, args
        (line,) = r.stderr.strip().splitlines()
        assert line.startswith("error: ") and says in line, line


def test_scaffolds_with_an_image_export_as_written():
    """The image scaffolds, unedited, make valid pods."""
    for scaffold in ("debian", "ubuntu", "busybox", "arch"):
        spec = load_config_text(scaffold_text(scaffold, f"s-{scaffold}")).spec()
        for obj in export(spec, "pod", base=Path("/")).exported.objects:
            validate(obj)


@pytest.mark.parametrize("scaffold", ["claude-code", "codex", "pi"])
def test_the_agent_scaffolds_export_with_an_image_of_the_agent(tmp_path, scaffold):
    """The agents' scaffolds run the host's binaries: refused without --image, saying so;
    with it, their keys become placeholders, their seed files the seed step's."""
    r = agentcage("init", "a", "-s", scaffold, "-o", "cage.yaml", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = agentcage("export", "k8s", "-c", "cage.yaml", cwd=tmp_path)
    assert r.returncode == 1 and "--image" in r.stderr
    image = f"registry.example.test/{scaffold}:1"
    r = agentcage("export", "k8s", "-c", "cage.yaml", "--image", image, "-o", "-", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    objects = list(yaml.safe_load_all(r.stdout))
    for obj in objects:
        validate(obj)
    spec = pod_spec_of(objects)
    (agent,) = spec["containers"]
    assert agent["image"] == image
    env = {e["name"]: e["value"] for e in agent["env"]}
    keys = [k for k in env if k.endswith("_API_KEY")]
    assert keys and all(env[k].startswith(f"agentcage:secret:{k}:") for k in keys)
    init = [c["name"] for c in spec["initContainers"]]
    assert init[:2] == ["netfilter", "gateway"] and ("seed" in init) == bool(
        load_config_text((tmp_path / "cage.yaml").read_text()).spec().seed_files)


def test_secret_files_are_mode_0600(tmp_path):
    from agentcage.kube.export import write
    from agentcage.secrets.placeholders import mint
    from agentcage.secrets.staging import StagedSecret

    staged = (StagedSecret("API_KEY", mint("API_KEY"), b"sk-real-value"),)
    result = export(spec_of(), "pod", base=Path("/"), staged=staged)
    paths = write(result.exported, tmp_path / "out")
    modes = {p.name.split("-")[1]: stat.S_IMODE(p.stat().st_mode) for p in paths}
    assert modes["secret"] == 0o600 and modes["pod"] == 0o644


def test_the_seccomp_profile_refuses_what_a_cage_refuses_and_runtime_default_is_a_choice():
    from agentcage.backends.seccomp import DENIED
    from agentcage.kube.seccomp import CLONE_NEWUSER, profile

    rules = profile()["syscalls"]
    denied = set(rules[0]["names"])
    assert denied == set(DENIED) and rules[0]["errnoRet"] == 1
    by_name = {r["names"][0]: r for r in rules[1:]}
    assert by_name["unshare"]["args"][0]["value"] == CLONE_NEWUSER
    assert by_name["clone"]["args"][0]["op"] == "SCMP_CMP_MASKED_EQ"
    assert by_name["clone3"]["errnoRet"] == 38  # ENOSYS: libc falls back to clone
    result = export(spec_of(), "pod", base=Path("/"), seccomp="runtime-default")
    (agent,) = pod_spec_of(result.exported.objects)["containers"]
    assert agent["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert result.exported.node_files == {}
    assert any("runtime's to refuse" in note for note in result.notes)


def test_secret_chooses_the_keys_the_pod_gets():
    """As on one host, a secret the pod does not get has no placeholder in it (Claude Code
    given a placeholder for a token that is never swapped would use it, and fail)."""
    text = CAGE.replace("""secret_injection:
  - env: API_KEY""", """secret_injection:
  - env: OTHER_TOKEN
    inject_to: [api.example.test]
  - env: API_KEY""")
    result = export(spec_of(text), "pod", base=Path("/"), keys=("API_KEY",))
    (agent,) = pod_spec_of(result.exported.objects)["containers"]
    names = {e["name"] for e in agent["env"]}
    assert "API_KEY" in names and "OTHER_TOKEN" not in names
    from agentcage.kube.export import secret_command

    command = secret_command(result.exported, None)
    assert command is not None and "API_KEY" in command and "OTHER_TOKEN" not in command
    with pytest.raises(Exception, match="no secret_injection rule for NOPE"):
        export(spec_of(text), "pod", base=Path("/"), keys=("NOPE",))
