"""Concurrency tokens: the budget's ledger (`TokenPool`) and its two implementations.

- `LocalTokenPool` (in `pool`): exact for one dispatcher process.
- `RedisTokenPool` (in `redis_pool`, imported only when used: it loads the redis client): one budget
  across the dispatcher group, with leases in Redis and a documented local fallback.
"""

from __future__ import annotations

from inferq.dispatcher.tokens.pool import Lease, LocalTokenPool, TokenPool

__all__ = ["Lease", "LocalTokenPool", "TokenPool"]
