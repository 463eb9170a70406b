"""The operator's side of a pod's gateway: `agentcage cage grants` for an exported cage.

On one host the operator's changes reach the gateway through request files in the cage's state
directory (gateway/control/channel.py). In a pod that directory is in the gateway container's
own state volume, which the agent's container cannot reach; an operator allowed to exec into
the gateway's container reaches it:

    kubectl exec POD -c gateway -- python3 -m agentcage.kube.operator list
    kubectl exec POD -c gateway -- python3 -m agentcage.kube.operator approve ID

Operations: list (grants.json as the gateway last wrote it), approve/deny a pending request,
revoke/promote a grant, sync; the watcher's scan, release and restore. Each answer is the
gateway's, as JSON on stdout; a refusal is one line on stderr, exit 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agentcage.gateway.control.channel import OPS
from agentcage.kube import layout

WITH_TARGET = ("approve", "deny", "revoke", "promote", "restore")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentcage.kube.operator",
                                     description="operate a pod's gateway (from its container)")
    parser.add_argument("operation", choices=("list", *OPS))
    parser.add_argument("target", nargs="?", default="",
                        help="the request's or grant's id (approve, deny, revoke, promote)")
    parser.add_argument("--state", type=Path, default=Path(layout.STATE_DIR))
    args = parser.parse_args(argv)
    private = args.state / "private"
    if args.operation == "list":
        try:
            doc = json.loads((private / "grants.json").read_text())
        except FileNotFoundError:
            doc = {"grants": [], "requests": []}
        except (OSError, ValueError) as e:
            print(f"agentcage operator: {private / 'grants.json'} is unreadable ({e})",
                  file=sys.stderr)
            return 1
        print(json.dumps(doc, indent=2, sort_keys=True))
        return 0
    if args.operation in WITH_TARGET and not args.target:
        print(f"agentcage operator: {args.operation} needs an id (see `list`)", file=sys.stderr)
        return 1
    from agentcage.gateway.control.channel import ChannelError, send

    try:
        result = send(private / "control", args.operation, args.target)
    except ChannelError as e:
        print(f"agentcage operator: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"agentcage operator: {e.strerror or e} ({private / 'control'}): is this the "
              "gateway's container?", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
