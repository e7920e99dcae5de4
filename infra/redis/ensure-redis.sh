#!/usr/bin/env bash
# Make sure `redis-server` is on PATH: the dispatcher group's shared budget (inferq.tools.redis)
# and its integration tests need a real Redis (6+). Installs Debian's package when it is missing,
# without leaving its system service running (see infra/ensure-debian-package.sh).
set -euo pipefail
exec bash "$(dirname "$0")/../ensure-debian-package.sh" ensure-redis redis-server redis-server
