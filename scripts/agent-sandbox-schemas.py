#!/usr/bin/env python3
"""Extract the v1beta1 schemas of kubernetes-sigs/agent-sandbox's CRDs into tests/data.

The tests validate `agentcage export k8s --form agent-sandbox` against the schemas that
project publishes. There is no network in CI, so the schemas are kept as test data; this
script is how they were made, and how to make them again for another release:

    git clone https://github.com/kubernetes-sigs/agent-sandbox
    git -C agent-sandbox checkout v0.5.6
    scripts/agent-sandbox-schemas.py agent-sandbox v0.5.6

It writes one JSON file per kind (the version's openAPIV3Schema only: the CRDs carry every
served version, most of their size) and SOURCE.md naming the release, commit and licence.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

CRDS = (
    "agents.x-k8s.io_sandboxes",
    "extensions.agents.x-k8s.io_sandboxtemplates",
    "extensions.agents.x-k8s.io_sandboxwarmpools",
    "extensions.agents.x-k8s.io_sandboxclaims",
)
VERSION = "v1beta1"
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "agent-sandbox"


def main(checkout: str, tag: str) -> int:
    commit = subprocess.run(["git", "-C", checkout, "rev-parse", f"{tag}^{{commit}}"],
                            capture_output=True, text=True, check=True).stdout.strip()
    OUT.mkdir(parents=True, exist_ok=True)
    written = []
    for crd in CRDS:
        text = subprocess.run(["git", "-C", checkout, "show", f"{tag}:k8s/crds/{crd}.yaml"],
                              capture_output=True, text=True, check=True).stdout
        doc = yaml.safe_load(text)
        kind = doc["spec"]["names"]["kind"]
        group = doc["spec"]["group"]
        (version,) = [v for v in doc["spec"]["versions"] if v["name"] == VERSION]
        schema = {"apiVersion": f"{group}/{VERSION}", "kind": kind,
                  "openAPIV3Schema": version["schema"]["openAPIV3Schema"]}
        name = f"{kind.lower()}.json"
        (OUT / name).write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
        written.append((name, f"k8s/crds/{crd}.yaml"))
    lines = [
        "# agent-sandbox CRD schemas (test data)",
        "",
        f"From https://github.com/kubernetes-sigs/agent-sandbox, release {tag} "
        f"(commit {commit}),",
        f"each file the `{VERSION}` openAPIV3Schema of one CustomResourceDefinition, extracted",
        "by scripts/agent-sandbox-schemas.py. That project is licensed under the Apache",
        "License 2.0; these files are its schemas, unchanged but for the extraction.",
        "",
        *[f"- {name}: {source}" for name, source in written],
        "",
    ]
    (OUT / "SOURCE.md").write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: agent-sandbox-schemas.py CHECKOUT TAG")
    sys.exit(main(sys.argv[1], sys.argv[2]))
