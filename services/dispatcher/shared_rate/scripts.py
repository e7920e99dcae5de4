"""The Lua scripts of the group's rate budget: one model's minute in Redis, checked and changed atomically.

Data model, per rate key (a model, or ``<backend>/<model>`` with several backends), under
``{prefix}:rate:{key}``:

- ``:log``: sorted set, entry id -> the entry's date (Redis server milliseconds);
- ``:entries``: hash, entry id -> ``"<tier> <requests> <tokens>"`` (tier 1..3 for HIGH..LOW, 0 for
  the backend's count beyond ours, which is nobody's floor);
- ``:sums``: hash, ``r<tier>``/``t<tier>`` -> the requests/tokens of the entries in the minute, kept
  up to date by every change, so a check reads eight numbers instead of summing the log;
- ``:learned``: hash, ``rpm``/``tpm`` learned from the headers and ``hold`` (a retry-after's end).

Every script first drops the entries dated at or before ``now - held_ms`` (the minute plus its
slack, as ``rate_budget.py`` counts), taking them off the sums. Time is the server's (``TIME``), so
dispatchers with skewed clocks agree on the minute. The first three keys expire ``ttl_ms`` after
their last write (longer than any entry stays), all together, so an idle model's keys go away whole;
``:learned`` lasts `LEARNED_TTL_MS` after its last write (a retry-after is at most an hour).

The check is `RateBudget._fits`, the same arithmetic: a tier may not take what the tiers above it
still have unused of their shares in the minute; a cost above the limit counts as the limit.
"""

from __future__ import annotations

from inferq.dispatcher.tokens.lua import Script

LEARNED_TTL_MS = 24 * 3_600_000

_PRELUDE = """
local held = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- HINCRBY only when it changes something: Lua writes the negated zero as "-0", which Redis refuses.
local function incr(field, n)
  if n ~= 0 then redis.call('HINCRBY', KEYS[3], field, n) end
end
local function parse(v)
  local tier, req, tok = string.match(v, '^(%d) (%d+) (%d+)$')
  return tier, tonumber(req), tonumber(tok)
end
local function prune(now)
  local horizon = now - held
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', horizon)
  for _, id in ipairs(gone) do
    local v = redis.call('HGET', KEYS[2], id)
    if v then
      local tier, req, tok = parse(v)
      incr('r' .. tier, 0 - req)
      incr('t' .. tier, 0 - tok)
      redis.call('HDEL', KEYS[2], id)
    end
  end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', horizon) end
end
local function touch()
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ttl) end
end
local function add(id, tier, req, tok, at)
  redis.call('ZADD', KEYS[1], at, id)
  redis.call('HSET', KEYS[2], id, string.format('%d %d %d', tier, req, tok))
  incr('r' .. tier, req)
  incr('t' .. tier, tok)
  touch()
end
-- {total, by} of 'r' or 't': by[i + 1] is tier i's (by[1] the backend's excess).
local function used(kind)
  local v = redis.call('HMGET', KEYS[3], kind .. '0', kind .. '1', kind .. '2', kind .. '3')
  local by, total = {}, 0
  for i = 1, 4 do
    local n = tonumber(v[i]) or 0
    by[i] = n
    total = total + n
  end
  return total, by
end
local function lower(a, b)
  if a <= 0 then return b end
  if b <= 0 then return a end
  return math.min(a, b)
end
-- The limits in force (0: none): the lower of the configured one and the learned one; and the hold.
local function limits(conf_rpm, conf_tpm)
  local l = redis.call('HMGET', KEYS[4], 'rpm', 'tpm', 'hold')
  return lower(conf_rpm, tonumber(l[1]) or 0), lower(conf_tpm, tonumber(l[2]) or 0), tonumber(l[3]) or 0
end
local function reply(status, now, rpm, tpm, hold)
  local r = used('r')
  local t = used('t')
  return {status, now, r, t, rpm, tpm, hold}
end
"""

# KEYS: log, entries, sums, learned. ARGV: held ms, ttl ms, tier (1..3), requests, tokens, force
# (0|1), entry id, configured rpm, configured tpm (0: none), the shares of HIGH, MEDIUM, LOW, age ms
# (the entry is dated that long before now: a start made while Redis was away, entered on recovery).
# Reply: {granted 0|1, now ms, requests in the minute, tokens in the minute, rpm, tpm (0: none), hold
# until ms}.
TAKE = Script(
    _PRELUDE
    + """
local tier = tonumber(ARGV[3])
local req = tonumber(ARGV[4])
local tokens = tonumber(ARGV[5])
local force = ARGV[6] == '1'
local id = ARGV[7]
local shares = {tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])}
local now = now_ms()
prune(now)
local rpm, tpm, hold = limits(tonumber(ARGV[8]), tonumber(ARGV[9]))
local function fits(kind, limit, amount)
  if limit <= 0 then return true end
  local total, by = used(kind)
  local reserved = 0
  for above = 1, tier - 1 do
    reserved = reserved + math.max(0, shares[above] * limit - by[above + 1])
  end
  return total + math.min(amount, limit) <= limit - math.ceil(reserved - 1e-9)
end
local granted = 0
if redis.call('HEXISTS', KEYS[2], id) == 1 then
  -- A retried take whose first reply was lost, or a start already entered: it stays one entry.
  granted = 1
elseif force or (now >= hold and fits('r', rpm, 1) and fits('t', tpm, tokens)) then
  if tpm > 0 then tokens = math.min(tokens, tpm) end
  add(id, tier, req, tokens, now - tonumber(ARGV[13]))
  granted = 1
end
return reply(granted, now, rpm, tpm, hold)
"""
)

# KEYS: as TAKE. ARGV: held ms, ttl ms, entry id, requests, tokens (-1: unchanged).
# Reply: {1 if the entry was still in the minute else 0, now ms, requests, tokens, 0, 0, 0}.
SETTLE = Script(
    _PRELUDE
    + """
local id = ARGV[3]
local now = now_ms()
prune(now)
local v = redis.call('HGET', KEYS[2], id)
local found = 0
if v then
  local tier, req, tok = parse(v)
  local new_req = tonumber(ARGV[4])
  local new_tok = tonumber(ARGV[5])
  if new_req < 0 then new_req = req end
  if new_tok < 0 then new_tok = tok end
  incr('r' .. tier, new_req - req)
  incr('t' .. tier, new_tok - tok)
  redis.call('HSET', KEYS[2], id, string.format('%s %d %d', tier, new_req, new_tok))
  touch()
  found = 1
end
return reply(found, now, 0, 0, 0)
"""
)

# KEYS: as TAKE. ARGV: held ms, ttl ms, configured rpm, configured tpm (0: none), then from the
# headers (-1: absent) limit requests, limit tokens, remaining requests, remaining tokens, reset
# requests ms, reset tokens ms, retry-after ms; the learned key's ttl ms.
# Reply: {1, now ms, requests, tokens, rpm, tpm, hold until ms}.
OBSERVE = Script(
    _PRELUDE
    + """
local a = {}
for i = 5, 11 do a[i - 4] = tonumber(ARGV[i]) end
local now = now_ms()
prune(now)
if a[1] > 0 then redis.call('HSET', KEYS[4], 'rpm', a[1]) end
if a[2] > 0 then redis.call('HSET', KEYS[4], 'tpm', a[2]) end
local rpm, tpm, hold = limits(tonumber(ARGV[3]), tonumber(ARGV[4]))
-- What the backend counts beyond the group's count, until the backend says its count resets.
local function excess(kind, limit, remaining, reset_ms)
  if limit <= 0 or remaining < 0 then return end
  local backend_used = math.max(0, limit - remaining)
  local ours = used(kind)
  if backend_used > ours then
    if reset_ms < 0 then reset_ms = 60000 end
    local id = 'x' .. redis.call('HINCRBY', KEYS[3], 'seq', 1)
    local req, tok = 0, 0
    if kind == 'r' then req = backend_used - ours else tok = backend_used - ours end
    add(id, 0, req, tok, now + math.min(reset_ms, 60000) - held)
  end
end
excess('r', rpm, a[3], a[5])
excess('t', tpm, a[4], a[6])
if a[7] >= 0 and now + a[7] > hold then
  hold = now + a[7]
  redis.call('HSET', KEYS[4], 'hold', hold)
end
if a[1] > 0 or a[2] > 0 or a[7] >= 0 then redis.call('PEXPIRE', KEYS[4], tonumber(ARGV[12])) end
return reply(1, now, rpm, tpm, hold)
"""
)
