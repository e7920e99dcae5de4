"""Typed errors of the project's own redis-server runner; messages say what to do.

::

    LocalRedisError
    ├── RedisServerMissingError   redis-server is not on PATH: run infra/redis/ensure-redis.sh
    ├── PortInUseError            the port is taken by another process
    ├── RedisStartError           redis-server exited or did not answer PING in time (log tail)
    └── RedisStopError            the process survived SIGTERM and SIGKILL
"""

from __future__ import annotations


class LocalRedisError(Exception):
    """Base class of the errors of the local redis-server runner."""


class RedisServerMissingError(LocalRedisError):
    """``redis-server`` is not on PATH; ``bash infra/redis/ensure-redis.sh`` installs it."""


class PortInUseError(LocalRedisError):
    """The port redis-server must bind is already taken by another process."""


class RedisStartError(LocalRedisError):
    """redis-server exited during start-up or did not answer PING in time; carries its log tail."""


class RedisStopError(LocalRedisError):
    """redis-server survived SIGTERM and SIGKILL within the allowed time."""
