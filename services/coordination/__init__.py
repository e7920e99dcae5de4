"""Coordination across dispatcher processes: one concurrency budget for the whole consumer group.

``RedisTokenPool`` implements ``services.dispatcher.tokens.TokenPool`` with leases in Redis (and a
documented local fallback while Redis is unreachable); ``LocalRedis`` runs a throwaway redis-server
for development and tests, ``cli.register`` adds ``inferq redis start|stop|status`` and
``fixture.redis_url_for_tests`` gives tests a Redis URL.

Only the runner and errors are imported here: the pool pulls in the ``redis`` client, which a user of
``inferq redis start`` does not need loaded.
"""

from __future__ import annotations

from services.coordination.errors import (
    CoordinationError,
    LocalRedisError,
    PortInUseError,
    RedisServerMissingError,
    RedisStartError,
    RedisStopError,
    UnknownLeaseError,
)
from services.coordination.localredis import LocalRedis, RedisConfig, RedisStatus, pick_free_port

__all__ = [
    "CoordinationError",
    "LocalRedis",
    "LocalRedisError",
    "PortInUseError",
    "RedisConfig",
    "RedisServerMissingError",
    "RedisStartError",
    "RedisStatus",
    "RedisStopError",
    "UnknownLeaseError",
    "pick_free_port",
]
