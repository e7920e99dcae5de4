"""Typed errors of ``services.coordination`` (the group-wide token budget and the local Redis tooling).

::

    CoordinationError
    ├── UnknownLeaseError        release of a lease this pool does not hold (also a RuntimeError,
    │                            as LocalTokenPool raises RuntimeError for the same mistake)
    └── LocalRedisError          the project's own redis-server runner
        ├── RedisServerMissingError   redis-server is not on PATH: run infra/redis/ensure-redis.sh
        ├── PortInUseError            the port is taken by another process
        ├── RedisStartError           redis-server exited or did not answer PING in time (log tail)
        └── RedisStopError            the process survived SIGTERM and SIGKILL

Redis being unreachable is not an error of the pool: `RedisTokenPool` switches to its degraded local
budget instead (see ``services.coordination.redis_pool``).
"""

from __future__ import annotations


class CoordinationError(Exception):
    """Base class of every error raised by ``services.coordination``."""


class UnknownLeaseError(CoordinationError, RuntimeError):
    """A lease was released that this pool does not hold (released twice, or another pool's)."""

    def __init__(self, lease_id: str, owner: str) -> None:
        super().__init__(f"lease {lease_id!r} is not held by {owner!r} (released twice, or not ours)")
        self.lease_id = lease_id
        self.owner = owner


class LocalRedisError(CoordinationError):
    """Base class of the errors of the local redis-server runner; messages say what to do."""


class RedisServerMissingError(LocalRedisError):
    """``redis-server`` is not on PATH; ``bash infra/redis/ensure-redis.sh`` installs it."""


class PortInUseError(LocalRedisError):
    """The port redis-server must bind is already taken by another process."""


class RedisStartError(LocalRedisError):
    """redis-server exited during start-up or did not answer PING in time; carries its log tail."""


class RedisStopError(LocalRedisError):
    """redis-server survived SIGTERM and SIGKILL within the allowed time."""
