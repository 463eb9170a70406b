"""Package installs through a cage against the same installs without one, in one run.

`npm install` of a project of 300 packages and `pip install` of one of 40 wheels
(fakenet.packages: real tarballs and wheels, from an npm registry and a Python index in the
fake internet), each timed:

- direct: in a namespace linked straight to the fake internet (the baseline);
- caged: in a cage whose gateway allows the registries, through its HTTPS_PROXY, with the
  default rate limit (an install must never meet it).

Runs alternate (direct, caged, direct, ...) so a machine that slows down mid-run slows both;
medians of `--runs`. Target: caged < 1.5x direct for each. Usage (root):
    .venv/bin/python bench/package_installs.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from fakenet import FakeInternet
from fakenet.packages import Registry, build_npm_registry, build_python_index

NOBODY = 65534  # the uid a cage of a root-owned project runs as (container.host_user: auto)
TARGET = 1.5
HOSTS = ("registry.npmjs.org", "pypi.org", "files.pythonhosted.org")


def timed(run) -> float:
    started = time.perf_counter()
    r = run()
    if r.returncode != 0:
        raise SystemExit(f"install failed: {(r.stdout + r.stderr).strip()[-800:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from agentcage.cages import CageService
    from agentcage.config.load import load_config_text
    from agentcage.state import StateStore

    work = Path(tempfile.mkdtemp(prefix="agentcage-bench-"))
    os.chmod(work, 0o755)
    times: dict[str, dict[str, list[float]]] = {}
    try:
        with FakeInternet(extra_names={"registry.npmjs.org": None,
                                       "files.pythonhosted.org": None}) as net:
            registries: dict[str, Registry] = {
                "npm install (300 packages)": build_npm_registry(
                    net.site_dir("registry.npmjs.org"), packages=300),
                "pip install (40 wheels)": build_python_index(
                    net.site_dir("pypi.org"), net.site_dir("files.pythonhosted.org"), wheels=40),
            }
            client = net.add_client()
            ca = str(net.ca_cert_path)
            direct_env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8",
                          "SSL_CERT_FILE": ca, "NODE_EXTRA_CA_CERTS": ca,
                          "npm_config_cafile": ca, "PIP_CERT": ca}
            direct_project = work / "direct"
            direct_project.mkdir()
            caged_project = work / "caged"  # /workspace: owned by the uid the cage runs as
            caged_project.mkdir()
            for registry in registries.values():
                registry.write_project(direct_project)
                registry.write_project(caged_project)
            for path in (caged_project, *caged_project.iterdir()):
                os.chown(path, NOBODY, NOBODY)
            service = CageService(StateStore(work / "home"))
            config = load_config_text(
                f"name: installs\ndomains: {{mode: allowlist, allow: [{', '.join(HOSTS)}]}}\n"
                f"dns_servers: [{net.dns_address}]\ngateway: {{uplink: 'netns:{client.netns}',"
                f" trusted_networks: [10.200.0.0/16], upstream_ca_files: ['{ca}']}}\n")
            service.create(config, caged_project)
            try:
                for label, registry in registries.items():
                    times[label] = {"direct": [], "caged": []}
                    for _ in range(args.runs):
                        registry.remove_install(direct_project)
                        times[label]["direct"].append(timed(lambda r=registry: client.run(
                            ["sh", "-c", r.install_script(str(direct_project))],
                            env=direct_env, capture_output=True, text=True, timeout=900)))
                        registry.remove_install(caged_project)
                        times[label]["caged"].append(timed(lambda r=registry: service.exec_capture(
                            "installs", ["sh", "-c", r.install_script("/workspace")],
                            timeout=900)))
                        print(f"  {label}: direct {times[label]['direct'][-1]:.2f} s, "
                              f"caged {times[label]['caged'][-1]:.2f} s", flush=True)
            finally:
                service.destroy("installs")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'install':28} {'direct s':>9} {'caged s':>9} {'ratio':>7}  target < {TARGET}x")
    for label, runs in times.items():
        direct, caged = statistics.median(runs["direct"]), statistics.median(runs["caged"])
        ratio = caged / direct
        print(f"{label:28} {direct:9.2f} {caged:9.2f} {ratio:6.2f}x  "
              f"{'met' if ratio < TARGET else 'NOT met'}")


if __name__ == "__main__":
    main()
