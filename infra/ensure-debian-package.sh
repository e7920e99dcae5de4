#!/usr/bin/env bash
# ensure-debian-package.sh NAME PACKAGE COMMAND...: make sure every COMMAND is on PATH, installing
# Debian's PACKAGE when one is missing. Shared by infra/redis/ensure-redis.sh and
# infra/prometheus/ensure-prometheus.sh. The package's own service is never left running: inferq and
# its tests start their own servers (own data dir, own port), so a policy-rc.d answering 101 keeps
# invoke-rc.d from starting it during the install, and where systemd runs the unit is disabled.
# Idempotent; prints the first line of `COMMAND --version` and exits 0 when every command works.
set -euo pipefail

if [ "$#" -lt 3 ]; then
    echo "usage: $0 NAME PACKAGE COMMAND..." >&2
    exit 2
fi
NAME=$1 PACKAGE=$2
shift 2
COMMANDS=("$@")

all_present() {
    local c
    for c in "${COMMANDS[@]}"; do
        command -v "$c" >/dev/null 2>&1 || return 1
    done
}
version() {
    "${COMMANDS[0]}" --version 2>&1 | head -n 1
}

if all_present; then
    echo "$NAME: $(version)"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "$NAME: ${COMMANDS[*]} not all on PATH and apt-get is missing;" \
        "install $PACKAGE by other means and re-run" >&2
    exit 1
fi

# Root here (CI and developer machines are root); otherwise through sudo when it exists.
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "$NAME: installing $PACKAGE needs root (no sudo found)" >&2
        exit 1
    fi
fi

echo "$NAME: ${COMMANDS[*]} not all found; installing Debian's $PACKAGE package"
if ! $SUDO apt-get update; then
    echo "$NAME: 'apt-get update' failed; cannot install $PACKAGE" >&2
    exit 1
fi

POLICY=/usr/sbin/policy-rc.d
ADDED_POLICY=0
if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
    $SUDO chmod 755 "$POLICY"
    ADDED_POLICY=1
fi
cleanup() {
    if [ "$ADDED_POLICY" -eq 1 ]; then
        $SUDO rm -f "$POLICY"
    fi
}
trap cleanup EXIT

# --no-install-recommends: no extra services (e.g. a node exporter) come along.
if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "$PACKAGE"; then
    echo "$NAME: 'apt-get install -y $PACKAGE' failed; install it by hand and re-run" >&2
    exit 1
fi

if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now "$PACKAGE" >/dev/null 2>&1 || true
elif [ -x "/etc/init.d/$PACKAGE" ]; then
    $SUDO "/etc/init.d/$PACKAGE" stop >/dev/null 2>&1 || true
fi

if ! all_present; then
    echo "$NAME: $PACKAGE was installed but ${COMMANDS[*]} are not all on PATH" >&2
    exit 1
fi
echo "$NAME: installed $(version)"
