#!/usr/bin/env bash
# Make sure `prometheus` and `promtool` are on PATH: the alert rules' unit tests (promtool test rules)
# and the end-to-end test that runs a real Prometheus against the pipeline need them. Installs
# Debian's `prometheus` package when either is missing, without leaving its system service running:
# the tests start their own Prometheus (own data dir, own port). Idempotent; exit 0 when both work.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
    echo "ensure-prometheus: $(prometheus --version 2>&1 | head -n 1)"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure-prometheus: prometheus/promtool are not on PATH and apt-get is missing;" \
        "install Prometheus 2.x (prometheus and promtool) by other means and re-run" >&2
    exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo"
    else
        echo "ensure-prometheus: installing prometheus needs root (no sudo found)" >&2
        exit 1
    fi
fi

echo "ensure-prometheus: prometheus or promtool not found; installing Debian's prometheus package"
if ! $SUDO apt-get update; then
    echo "ensure-prometheus: 'apt-get update' failed; cannot install prometheus" >&2
    exit 1
fi

# Keep the package's service from starting: a policy-rc.d answering 101 ("action forbidden") makes
# invoke-rc.d skip the start during the install. One already there is left as it is.
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

# --no-install-recommends: no node exporter (another service) comes along.
if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends prometheus; then
    echo "ensure-prometheus: 'apt-get install -y prometheus' failed; install it by hand and re-run" >&2
    exit 1
fi

# Where systemd runs, the unit may still have been enabled: stop and disable it.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
# Without systemd, the SysV script is the one that could have started it.
if [ -x /etc/init.d/prometheus ] && [ ! -d /run/systemd/system ]; then
    $SUDO /etc/init.d/prometheus stop >/dev/null 2>&1 || true
fi

if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    echo "ensure-prometheus: the package was installed but prometheus/promtool are not on PATH" >&2
    exit 1
fi
echo "ensure-prometheus: installed $(prometheus --version 2>&1 | head -n 1)"
