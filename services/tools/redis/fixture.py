"""A Redis URL for tests: an external Redis named by ``$INFERQ_REDIS_URL``, or a fresh local server.

Tests that need Redis run against a real server or fail loudly; they never skip, because a green run
with skipped coordination tests proves nothing about the group-wide budget.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from inferq.tools.redis.errors import PortInUseError
from inferq.tools.redis.server import (
    LocalRedis,
    RedisConfig,
    RedisServerTls,
    pick_free_port,
    require_redis_server,
)

URL_ENV = "INFERQ_REDIS_URL"
_PORT_ATTEMPTS = 3
_START_TIMEOUT_S = 15.0


@contextmanager
def local_redis_for_tests(
    tmp_root: Path,
    *,
    password: str | None = None,
    tls: bool = False,
    require_client_cert: bool = False,
) -> Iterator[LocalRedis]:
    """A fresh LocalRedis on a free port, its home under ``tmp_root``; stopped on exit.

    For tests that must stop and restart the server themselves, or need a password or TLS (its
    certificates made in ``<home>/tls``, see `RedisServerTls`). Raises RedisServerMissingError (naming
    ``infra/redis/ensure-redis.sh``) when redis-server is not installed.
    """
    require_redis_server()
    tmp_root.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="redis-", dir=tmp_root))
    certificates = (
        RedisServerTls.generate(home / "tls", require_client_cert=require_client_cert) if tls else None
    )
    for attempt in range(1, _PORT_ATTEMPTS + 1):
        config = RedisConfig(home=home, port=pick_free_port(), password=password, tls=certificates)
        server = LocalRedis(config)
        try:
            server.start(timeout_s=_START_TIMEOUT_S)
        except PortInUseError:
            # Another process took the just-picked port before redis-server bound it; pick again.
            if attempt == _PORT_ATTEMPTS:
                raise
            continue
        try:
            yield server
        finally:
            server.stop()
        return


@contextmanager
def redis_url_for_tests(tmp_root: Path) -> Iterator[str]:
    """Yield the URL of a real Redis for the duration of the block.

    ``$INFERQ_REDIS_URL`` when set (nothing is started or stopped); else a fresh local redis-server
    under ``tmp_root`` on a free port, stopped on exit. Never skips.
    """
    external = os.environ.get(URL_ENV, "").strip()
    if external:
        yield external
        return
    with local_redis_for_tests(tmp_root) as server:
        yield server.url
