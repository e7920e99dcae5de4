#!/usr/bin/env bash
# Make sure `redis-server` is on PATH: the dispatcher group's shared budget (services.tools.redis)
# and its integration tests need a real Redis. Installs Debian's package when it is missing.
# Idempotent: does nothing when redis-server is already there. Exit 0 when redis-server is usable.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
    echo "ensure-redis: $(redis-server --version)"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-redis: redis-server is not on PATH and apt-get is missing;" \
        "install Redis 6+ by other means (e.g. your OS package manager) and re-run" >&2
    exit 1
fi

# Run as root here (CI and developer machines are root); otherwise go through sudo when it exists.
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "ensure-redis: redis-server is missing and installing it needs root (no sudo found)" >&2
        exit 1
    fi
fi

echo "ensure-redis: redis-server not found; installing Debian's redis-server package"
if ! $SUDO apt-get update; then
    echo "ensure-redis: 'apt-get update' failed; cannot install redis-server" >&2
    exit 1
fi
# No service start on install: inferq runs its own redis-server (inferq redis start, test fixtures),
# and containers have no init system to start one anyway.
if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends redis-server; then
    echo "ensure-redis: 'apt-get install -y redis-server' failed; install Redis 6+ by hand and re-run" >&2
    exit 1
fi

if ! command -v redis-server >/dev/null 2>&1; then
    echo "ensure-redis: redis-server was installed but is not on PATH (expected /usr/bin/redis-server)" >&2
    exit 1
fi
echo "ensure-redis: installed $(redis-server --version)"
