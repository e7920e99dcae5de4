"""The project's own redis-server for the dispatcher group's shared budget (development and tests).

``LocalRedis`` runs a throwaway redis-server, ``cli.register`` adds ``inferq redis start|stop|status``
and ``fixture.redis_url_for_tests`` gives tests a Redis URL. The pool that uses Redis in production
is ``inferq.dispatcher.tokens.redis_pool``.
"""

from __future__ import annotations

from inferq.tools.redis.errors import (
    LocalRedisError,
    PortInUseError,
    RedisServerMissingError,
    RedisStartError,
    RedisStopError,
)
from inferq.tools.redis.server import LocalRedis, RedisConfig, RedisServerTls, RedisStatus, pick_free_port

__all__ = [
    "LocalRedis",
    "LocalRedisError",
    "PortInUseError",
    "RedisConfig",
    "RedisServerMissingError",
    "RedisServerTls",
    "RedisStartError",
    "RedisStatus",
    "RedisStopError",
    "pick_free_port",
]
