"""The Lua scripts behind `RedisTokenPool`, and a typed EVALSHA-with-fallback runner.

Data model: one sorted set per tier, ``KEYS[1..3]`` = ``{prefix}:leases:HIGH|MEDIUM|LOW`` (in that
order), member ``{owner}:{lease_id}``, score = the lease's expiry in Redis server milliseconds. A
member whose score has passed is expired: every script removes expired members of all three tiers
before counting, so a dead owner's tokens come back at the latest one lease TTL after its last renewal.

Time comes from ``redis.call('TIME')`` inside the scripts, never from the clients, so dispatchers
with skewed clocks agree on which leases are alive. Every script replies with the server time and the
three counts after its work, so each call refreshes the caller's snapshot for free.

``KEYS[4]`` = ``{prefix}:released:{owner}`` is the owner's set of released members (tombstones). A
renewal that was built before a release but reaches Redis after it must not bring the released lease
back, or Redis would count a token nobody holds (possibly above the limit); it checks this set first.

Every write also sets the key's TTL to twice the lease TTL: a key nobody touches any more (a test's
prefix, a group that was shut down) disappears by itself once its last lease has expired.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from redis.asyncio import Redis
from redis.exceptions import NoScriptError


class Script:
    """A Lua script run with EVALSHA, falling back to EVAL (which also caches it) on NOSCRIPT.

    NOSCRIPT happens after a Redis restart or failover, or on a server that has never seen the script.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode("utf-8"), usedforsecurity=False).hexdigest()

    async def run(self, client: Redis, keys: Sequence[str], args: Sequence[str | int]) -> list[int]:
        """Run the script and return its reply, a flat list of integers."""
        try:
            reply = await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            reply = await client.eval(self.source, len(keys), *keys, *args)
        return [int(value) for value in reply]


_PRELUDE = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function purge_and_count(now)
  local counts = {}
  for i = 1, 3 do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    counts[i] = redis.call('ZCARD', KEYS[i])
  end
  return counts
end
local function put(key, member, now, ttl)
  redis.call('ZADD', key, now + ttl, member)
  redis.call('PEXPIRE', key, 2 * ttl)
end
"""

# ARGV: tier index (1..3), member, ttl ms, total limit, tier limit.
# Reply: {granted 0|1, now ms, count HIGH, count MEDIUM, count LOW}.
ACQUIRE = Script(
    _PRELUDE
    + """
local idx = tonumber(ARGV[1])
local ttl = tonumber(ARGV[3])
local now = now_ms()
local counts = purge_and_count(now)
local granted = 0
if redis.call('ZSCORE', KEYS[idx], ARGV[2]) then
  -- A retried acquire whose first reply was lost: the token is already ours, so it stays one token.
  put(KEYS[idx], ARGV[2], now, ttl)
  granted = 1
elseif counts[1] + counts[2] + counts[3] < tonumber(ARGV[4]) and counts[idx] < tonumber(ARGV[5]) then
  put(KEYS[idx], ARGV[2], now, ttl)
  counts[idx] = counts[idx] + 1
  granted = 1
end
return {granted, now, counts[1], counts[2], counts[3]}
"""
)

# ARGV: tier index (1..3), member, ttl ms. Reply: {now ms, count HIGH, count MEDIUM, count LOW}.
RELEASE = Script(
    _PRELUDE
    + """
local ttl = tonumber(ARGV[3])
redis.call('ZREM', KEYS[tonumber(ARGV[1])], ARGV[2])
redis.call('SADD', KEYS[4], ARGV[2])
redis.call('PEXPIRE', KEYS[4], 2 * ttl)
local now = now_ms()
local counts = purge_and_count(now)
return {now, counts[1], counts[2], counts[3]}
"""
)

# Make Redis hold exactly this owner's leases as of when the caller built the arguments: renew (or
# re-add) every held one that was not released meanwhile, keep the ones of acquires in flight, and
# remove every other member of this owner numbered up to the last lease id handed out then. Re-adding
# covers a Redis restart and leases taken while Redis was unreachable; removing covers releases made
# while it was and acquires whose reply was lost. A member numbered above that id comes from an acquire
# started after the arguments were built (its script may reach Redis first, on another connection), so
# it is never touched. ARGV: ttl ms, owner prefix ("{owner}:"), last lease id, n held, then n pairs
# (tier index, member), then the members of acquires in flight.
# Reply: {now ms, count HIGH, count MEDIUM, count LOW}.
SYNC = Script(
    _PRELUDE
    + """
local ttl = tonumber(ARGV[1])
local prefix = ARGV[2]
local last_id = tonumber(ARGV[3])
local nheld = tonumber(ARGV[4])
local keep = {}
local held = {{}, {}, {}}
for i = 0, nheld - 1 do
  local idx = tonumber(ARGV[5 + 2 * i])
  local member = ARGV[6 + 2 * i]
  keep[member] = true
  table.insert(held[idx], member)
end
for j = 5 + 2 * nheld, #ARGV do keep[ARGV[j]] = true end
local now = now_ms()
for i = 1, 3 do
  -- Sets hold about the budget's worth of members, so a full scan is cheap.
  for _, member in ipairs(redis.call('ZRANGE', KEYS[i], 0, -1)) do
    if string.sub(member, 1, #prefix) == prefix and not keep[member] then
      local id = tonumber(string.sub(member, #prefix + 1))
      if id == nil or id <= last_id then redis.call('ZREM', KEYS[i], member) end
    end
  end
  for _, member in ipairs(held[i]) do
    if redis.call('SISMEMBER', KEYS[4], member) == 0 then put(KEYS[i], member, now, ttl) end
  end
end
local counts = purge_and_count(now)
return {now, counts[1], counts[2], counts[3]}
"""
)
