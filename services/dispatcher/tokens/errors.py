"""Typed errors of the token pools.

::

    TokenPoolError
    └── UnknownLeaseError        release of a lease this pool does not hold (also a RuntimeError,
                                 as LocalTokenPool raises RuntimeError for the same mistake)

Redis being unreachable is not an error of the pool: `RedisTokenPool` switches to its degraded local
budget instead (see ``inferq.dispatcher.tokens.redis_pool``).
"""

from __future__ import annotations


class TokenPoolError(Exception):
    """Base class of every error raised by a token pool."""


class UnknownLeaseError(TokenPoolError, RuntimeError):
    """A lease was released that this pool does not hold (released twice, or another pool's)."""

    def __init__(self, lease_id: str, owner: str) -> None:
        super().__init__(f"lease {lease_id!r} is not held by {owner!r} (released twice, or not ours)")
        self.lease_id = lease_id
        self.owner = owner
