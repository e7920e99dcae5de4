#!/usr/bin/env bash
# Builds inferq's image with podman from this checkout: infra/container/build.sh [TAG]
# (default localhost/inferq:latest). Environment:
#   BASE    the base image (default python:3.11-slim-bookworm); localhost/debian-base:<suite> is
#           made here first when missing (build-base.sh: no registry needed)
#   EXTRAS  "tools" for an image that also runs the tooling (sim-backend, bench...); default none
#   PODMAN_FLAGS  flags for `podman build` (default: this project's machines' recipe, below)
set -euo pipefail
cd "$(dirname "$0")/../.."

TAG="${1:-localhost/inferq:latest}"
BASE="${BASE:-python:3.11-slim-bookworm}"
EXTRAS="${EXTRAS:-}"
# runc: crun refuses a hybrid cgroup layout; podman's default ulimits can exceed what the machine
# allows; host network where there is no bridge networking (docs/deployment.md).
PODMAN_FLAGS="${PODMAN_FLAGS:---runtime runc --ulimit nofile=20000:20000 --ulimit nproc=4096:4096 --network=host}"

if [[ "$BASE" == localhost/debian-base:* ]]; then
    bash infra/container/build-base.sh "$BASE"
fi
# Where PyPI is reached through a TLS-inspecting proxy, pip needs the machine's CA bundle: mounted
# for the build only, never copied into a layer.
ca=()
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    ca=(-v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
fi
# shellcheck disable=SC2086  # PODMAN_FLAGS is a list of flags
podman build $PODMAN_FLAGS "${ca[@]}" \
    --build-arg BASE="$BASE" --build-arg EXTRAS="$EXTRAS" \
    -f infra/container/Dockerfile -t "$TAG" .
