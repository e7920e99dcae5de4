#!/usr/bin/env bash
# Make sure `prometheus` and `promtool` are on PATH: the alert rules' unit tests (promtool test rules)
# and the end-to-end test that runs a real Prometheus against the pipeline need them. Installs
# Debian's `prometheus` package when either is missing, without leaving its system service running
# (see infra/ensure-debian-package.sh): the tests start their own Prometheus.
set -euo pipefail
exec bash "$(dirname "$0")/../ensure-debian-package.sh" ensure-prometheus prometheus prometheus promtool
