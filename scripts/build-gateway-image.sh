#!/bin/sh
# Build the gateway image of exported pods (images/gateway/Containerfile) with podman:
# this checkout's wheel, then the image, tagged as `agentcage export k8s` names it.
#   scripts/build-gateway-image.sh [TAG]
set -eu
cd "$(dirname "$0")/.."
version=$(.venv/bin/python -c 'import agentcage; print(agentcage.__version__)')
tag=${1:-localhost/agentcage-gateway:$version}
rm -rf dist
echo "building the wheel of agentcage $version"
.venv/bin/python -m pip wheel --no-deps --quiet -w dist .
echo "building $tag"
# --network host: the build's apt and pip steps reach their registries as the host does;
# podman's default bridge would rewrite the host's firewall
podman build --network host -f images/gateway/Containerfile -t "$tag" .
echo "built $tag (push it where your cluster pulls from, or pass --gateway-image to export)"
