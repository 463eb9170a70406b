"""Where things are in an exported pod: uids, ports, volume paths, names (one place, so the
pod template, the nftables ruleset and the sidecar agree)."""

from __future__ import annotations

from agentcage import __version__

# The gateway container's uid: the one uid whose packets leave the pod (podnet.py). Outside
# the range images give their users (1000...) and the nobody of most distributions (65534).
GATEWAY_UID = 10999
LOOPBACK = "127.0.0.1"  # the gateway's listeners, and what allowed names resolve to
PROXY_PORT = 8080  # the regular proxy: HTTPS_PROXY of the agent
TRANSPARENT_PORT = 8443  # where redirected connections land
DNS_PORT = 15053  # redirected DNS (53 needs a capability the gateway does not have)

GATEWAY_IMAGE = f"localhost/agentcage-gateway:{__version__}"

# In the gateway's container
CONFIG_DIR = "/etc/agentcage/gateway"  # the ConfigMap: settings.json, policy.json, pod.nft
KEYS_DIR = "/run/secrets/agentcage"  # the Secret: one file per secret, named by its variable
STATE_DIR = "/run/agentcage-gateway"  # in-memory: staged secrets, the CA's key, ready file
AUDIT_DIR = "/var/log/agentcage"  # audit.jsonl, capture.jsonl (the audit also on stdout)
PUBLIC_DIR = "/run/agentcage-public"  # written by the gateway: the cage's CA certificate
# ...which the agent's container has where a cage on one host has it (backends/sandbox.py)
AGENT_PUBLIC_DIR = "/run/agentcage"
CA_FILE = "ca.pem"  # the cage's CA certificate alone
BUNDLE_FILE = "ca-bundle.pem"  # the gateway image's trusted CAs and the cage's
FILES_DIR = "/etc/agentcage/files"  # container.files and seed files, for the seed step

# ConfigMap keys
SETTINGS_KEY = "settings.json"
POLICY_KEY = "policy.json"
RULESET_KEY = "pod.nft"
NETFILTER_KEY = "netfilter.sh"  # the init container's command: the ruleset and resolvers
PLACEHOLDERS_KEY = "placeholders.json"

READY_FILE = "ready"
LABEL = "agentcage.dev/cage"


def object_name(cage: str, part: str = "") -> str:
    """A Kubernetes name of this cage's objects (cage names are already DNS labels)."""
    return f"agentcage-{cage}" + (f"-{part}" if part else "")
