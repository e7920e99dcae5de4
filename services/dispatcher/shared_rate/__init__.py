"""The per-minute rate budget shared by the dispatcher group through Redis.

- `budget`: `SharedRateBudget`, the group's `RateLedger` (imported only when used: it loads the
  redis client);
- `scripts`: its Lua scripts and the data model in Redis;
- `fallback`: the local share it falls back to while Redis is away (pure).
"""
