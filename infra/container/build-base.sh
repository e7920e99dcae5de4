#!/usr/bin/env bash
# The Debian bookworm base image of machines without a registry (docs/deployment.md, "Container
# image and compose"): a minimal root file system made by mmdebstrap from Debian's packages,
# imported into podman as localhost/debian-base:bookworm. Idempotent: an existing image is kept.
# It has no Python: infra/container/Dockerfile apt-installs Debian's python3 (3.11) on it.
set -euo pipefail

IMAGE="${1:-localhost/debian-base:bookworm}"
SUITE="${SUITE:-bookworm}"

if podman image exists "$IMAGE"; then
    echo "$IMAGE: already present"
    exit 0
fi
command -v mmdebstrap >/dev/null || { echo "mmdebstrap is needed (apt-get install mmdebstrap)" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# minbase: dpkg, apt and essentials only; ca-certificates so apt and pip can use TLS mirrors.
# No manuals, documentation or translations (about 45 MB), in this image nor in what is installed on
# it later (the rules stay in /etc/dpkg/dpkg.cfg.d/); the licences (copyright files) are kept.
mmdebstrap --variant=minbase --include=ca-certificates \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    "$SUITE" "$work/rootfs.tar"
podman import "$work/rootfs.tar" "$IMAGE"
echo "$IMAGE: made from Debian $SUITE"
