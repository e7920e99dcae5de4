"""`SharedRateBudget`: the requests- and tokens-per-minute budget shared by the dispatcher group.

What a user can rely on
=======================

**The group stays under each limit together.** With ``INFERQ_COORDINATION=redis`` every start is
one Lua script (`scripts.TAKE`) that drops what left the model's minute, checks the group's minute
as `RateBudget` checks one process's (both limits, the tiers' floor shares, a retry-after hold) and
enters the start only if it fits. Scripts run atomically, so two dispatchers deciding at once never
admit more than the limit between them. The call's `usage` settles the estimate for the group
(`scripts.SETTLE`); what the headers teach (the limits, the backend's count beyond the group's, a
retry-after) is written to the model's keys (`scripts.OBSERVE`), so one dispatcher's 429 holds the
whole group. Time is the Redis server's, so skewed clocks do not matter.

**The cost**: one round trip to Redis per start, beside the token pool's (the median is in
``/healthz`` under ``rate_budget.check_ms_median``), and one per answer.

**When Redis is unreachable** (refused, timed out, any error; every call bounded by
``call_timeout_s``) the budget logs one warning, sets `degraded` and falls back to a local share of
each limit that begins with what the group had spent (``fallback.py``: fail safe, a model may wait
up to a minute). Every ``reconnect_interval_s`` a bounded probe tries Redis again; when it answers,
the starts made meanwhile are entered in Redis, dated when they were made, and the shared budget
is back (one warning). Settles and refunds of starts entered in Redis before the outage are dropped
while it lasts: their estimates stay counted, which errs on the safe side.

Not supported: Redis Cluster (a model's keys must live on one node), as for the token pool.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis.asyncio import Redis
from redis.exceptions import RedisError

from inferq.dispatcher.rate_budget import HELD_MS, Charge, RateBudget, RateHeaders, RateLimit
from inferq.dispatcher.shared_rate import scripts
from inferq.dispatcher.shared_rate.fallback import GroupView, local_share_budget, shared_headers
from inferq.dispatcher.tokens.lua import Script
from inferq.dispatcher.tokens.redis_endpoint import RedisEndpoint
from inferq.dispatcher.tokens.settings import RedisBudgetSettings
from inferq.messaging.tiers import Tier

if TYPE_CHECKING:
    from inferq.dispatcher.rate_ledger import RateLedger

logger = logging.getLogger(__name__)

_TIERS: tuple[Tier, ...] = (Tier.HIGH, Tier.MEDIUM, Tier.LOW)  # tier index 1..3 in the scripts
_TIER_INDEX = {tier: i + 1 for i, tier in enumerate(_TIERS)}
_UNAVAILABLE = (RedisError, OSError, TimeoutError)
# The keys of a model's minute outlive its last entry (dated at most HELD_MS back from its write).
KEYS_TTL_MS = 2 * HELD_MS
# Readings of models kept for the fallback (a caller may name any model): the oldest go first.
MAX_VIEWS = 256
# Round trips of starts kept for the median in /healthz.
CHECK_SAMPLES = 4096
_RECOVERY_ATTEMPTS = 3


@dataclass
class SharedCharge(Charge):
    """A start entered in the group's minute (`entry_id`), or in the local share while Redis was
    away (`local`, entered in Redis on recovery: then `in_redis`)."""

    entry_id: str = ""
    taken_at_ms: int = 0
    in_redis: bool = True
    local: Charge | None = None
    requests: int = 1
    amount: int = 0


class SharedRateBudget:
    """The group-wide `RateLedger` (module docstring). ``owner`` is the dispatcher id (a random
    suffix is added); ``group_size`` is read when Redis goes away, for the local share."""

    def __init__(
        self,
        *,
        redis: RedisEndpoint,
        owner: str,
        configured: Mapping[str, RateLimit],
        group_size: Callable[[], int],
        clock_ms: Callable[[], int],
        key_prefix: str,
        reconnect_interval_s: float = 1.0,
    ) -> None:
        if reconnect_interval_s <= 0:
            raise ValueError("reconnect_interval_s must be positive")
        self._redis = redis
        self._owner_id = f"{owner}-{secrets.token_hex(4)}"
        self._configured = dict(configured)
        self._group_size = group_size
        self._clock_ms = clock_ms
        self._key_prefix = key_prefix
        self._call_timeout_s = redis.call_timeout_s
        self._reconnect_interval_s = reconnect_interval_s
        self._shares: dict[Tier, float] = {}
        self._client: Redis | None = None
        self._probe_task: asyncio.Task[None] | None = None
        self._next_id = 0
        self._views: dict[str, GroupView] = {}
        self._degraded = False
        self._local: RateBudget | None = None
        # This process's starts of the last minute (in Redis or the local share), entered again when
        # Redis answers after an outage: a restarted Redis has forgotten them (it keeps no files).
        self._recent: deque[SharedCharge] = deque()
        self._check_s: deque[float] = deque(maxlen=CHECK_SAMPLES)

    @classmethod
    def from_settings(
        cls,
        settings: RedisBudgetSettings,
        *,
        owner: str,
        configured: Mapping[str, RateLimit],
        group_size: Callable[[], int],
        clock_ms: Callable[[], int],
        topic_prefix: str,
    ) -> SharedRateBudget:
        """The budget in the Redis of ``settings`` (``INFERQ_REDIS_*``), beside the token pool's keys."""
        return cls(
            redis=settings.endpoint(),
            owner=owner,
            configured=configured,
            group_size=group_size,
            clock_ms=clock_ms,
            key_prefix=settings.key_prefix_for(topic_prefix),
        )

    def __repr__(self) -> str:
        return f"SharedRateBudget(url={self._redis.shown!r}, owner={self._owner_id!r})"

    @property
    def degraded(self) -> bool:
        """True while Redis is unreachable and the local share is in force."""
        return self._degraded

    def status(self) -> dict[str, object]:
        median_ms = statistics.median(self._check_s) * 1000 if self._check_s else None
        return {"shared": True, "degraded": self._degraded, "check_ms_median": median_ms}

    # -- lifecycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and start the recovery probe. Idempotent; Redis is first asked at the first start."""
        if self._client is not None:
            return
        self._client = self._redis.client(f"{self._owner_id}-rate")
        self._probe_task = asyncio.create_task(self._probe(), name=f"rate-probe-{self._owner_id}")

    async def stop(self) -> None:
        """Stop the probe and close the client. Idempotent. Entries in Redis leave with their minute."""
        client, self._client = self._client, None
        task, self._probe_task = self._probe_task, None
        if task is not None:
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=1.0 + self._call_timeout_s)
            if not done:
                logger.warning("rate probe of %s did not stop within its bound", self._owner_id)
        if client is not None:
            await self._redis.close(client, f"{self._owner_id}'s rate budget")

    # -- the budget ----------------------------------------------------------------------------------

    def set_floor_shares(self, floor_shares: Mapping[Tier, float]) -> None:
        if any(not 0 <= s <= 1 for s in floor_shares.values()) or sum(floor_shares.values()) > 1 + 1e-9:
            raise ValueError(f"floor shares must be within [0, 1] and sum to at most 1, got {floor_shares}")
        self._shares = dict(floor_shares)
        if self._local is not None:
            self._local.set_floor_shares(floor_shares)

    async def take(self, model: str, tier: Tier, tokens: int, *, force: bool = False) -> Charge | None:
        client = self._client
        if client is None:
            raise RuntimeError("SharedRateBudget.take before start()")
        self._next_id += 1
        charge = SharedCharge(
            model, tier, tokens, entry_id=f"{self._owner_id}:{self._next_id}", taken_at_ms=self._clock_ms()
        )
        if not self._degraded:
            started = time.perf_counter()
            try:
                reply = await self._run(client, scripts.TAKE, model, self._take_args(charge, force))
            except _UNAVAILABLE as exc:
                # If the script did run, the entry is in Redis: counted twice until it leaves, safe.
                self._enter_degraded(exc)
            else:
                self._check_s.append(time.perf_counter() - started)
                self._read(model, reply)
                if reply[0] != 1:
                    return None
                self._remember(charge)
                return charge
        return self._take_locally(charge, force)

    async def refund(self, charge: Charge) -> None:
        await self._correct(charge, requests=0, tokens=0)

    async def settle(self, charge: Charge, used_tokens: int) -> None:
        if used_tokens >= 0:
            await self._correct(charge, requests=None, tokens=used_tokens)

    async def observe(self, model: str, headers: RateHeaders) -> None:
        client = self._client
        if client is None or not any(v is not None for v in vars(headers).values()):
            return
        if not self._degraded:
            try:
                reply = await self._run(client, scripts.OBSERVE, model, self._observe_args(model, headers))
            except _UNAVAILABLE as exc:
                self._enter_degraded(exc)
            else:
                self._read(model, reply)
                return
        if self._local is not None:
            self._local.observe(model, shared_headers(headers, self._group_size()))

    # -- Redis ---------------------------------------------------------------------------------------

    def _keys(self, model: str) -> list[str]:
        base = f"{self._key_prefix}:rate:{model}"
        return [f"{base}:log", f"{base}:entries", f"{base}:sums", f"{base}:learned"]

    async def _run(self, client: Redis, script: Script, model: str, args: Sequence[str | int]) -> list[int]:
        async with asyncio.timeout(self._call_timeout_s):
            return await script.run(client, self._keys(model), [HELD_MS, KEYS_TTL_MS, *args])

    def _limits(self, model: str) -> tuple[int, int]:
        limit = self._configured.get(model, RateLimit())
        return limit.rpm or 0, limit.tpm or 0

    def _take_args(self, charge: SharedCharge, force: bool, age_ms: int = 0) -> list[str | int]:
        shares = [repr(float(self._shares.get(tier, 0.0))) for tier in _TIERS]
        return [
            _TIER_INDEX[charge.tier],
            charge.requests,
            charge.amount if age_ms else charge.tokens,
            1 if force else 0,
            charge.entry_id,
            *self._limits(charge.model),
            *shares,
            age_ms,
        ]

    def _observe_args(self, model: str, headers: RateHeaders) -> list[str | int]:
        def count(value: int | None) -> int:
            return -1 if value is None else value

        def ms(value: float | None) -> int:
            return -1 if value is None else int(value * 1000)

        return [
            *self._limits(model),
            count(headers.limit_requests),
            count(headers.limit_tokens),
            count(headers.remaining_requests),
            count(headers.remaining_tokens),
            ms(headers.reset_requests_s),
            ms(headers.reset_tokens_s),
            ms(headers.retry_after_s),
            scripts.LEARNED_TTL_MS,
        ]

    def _read(self, model: str, reply: Sequence[int]) -> None:
        """Keep what a reply says of the group's minute, for the local share should Redis go away."""
        _, server_ms, requests, tokens, rpm, tpm, hold = reply
        now = self._clock_ms()
        view = self._views.pop(model, None)  # re-inserted last: the dict's order is the age
        if rpm or tpm or view is None:
            view = GroupView(rpm or None, tpm or None, requests, tokens, 0, now)
        view.requests, view.tokens, view.read_at_ms = requests, tokens, now
        view.hold_until_ms = now + max(0, hold - server_ms) if hold > server_ms else 0
        self._views[model] = view
        while len(self._views) > MAX_VIEWS:
            del self._views[next(iter(self._views))]

    async def _correct(self, charge: Charge, *, requests: int | None, tokens: int) -> None:
        if not isinstance(charge, SharedCharge):
            raise TypeError(f"not a charge of this budget: {charge!r}")
        if requests is not None:
            charge.requests = requests
        charge.amount = tokens
        client = self._client
        if not charge.in_redis:
            if self._local is not None and charge.local is not None:
                if requests == 0:
                    self._local.refund(charge.local)
                else:
                    self._local.settle(charge.local, tokens)
            return
        if client is None or self._degraded:
            return  # its estimate stays counted in Redis until it leaves the minute: the safe side
        args: list[str | int] = [charge.entry_id, -1 if requests is None else requests, tokens]
        try:
            reply = await self._run(client, scripts.SETTLE, charge.model, args)
        except _UNAVAILABLE as exc:
            self._enter_degraded(exc)
        else:
            self._read_sums(charge.model, reply)

    def _read_sums(self, model: str, reply: Sequence[int]) -> None:
        view = self._views.get(model)
        if view is not None:
            view.requests, view.tokens, view.read_at_ms = reply[2], reply[3], self._clock_ms()

    # -- Redis away ----------------------------------------------------------------------------------

    def _take_locally(self, charge: SharedCharge, force: bool) -> Charge | None:
        local = self._local
        if local is None:  # cannot happen: degraded mode builds it
            raise RuntimeError("the local share is missing while degraded")
        entered = local.take(charge.model, charge.tier, charge.tokens, force=force)
        if entered is None:
            return None
        charge.local, charge.in_redis = entered, False
        self._remember(charge)
        return charge

    def _remember(self, charge: SharedCharge) -> None:
        charge.amount = charge.tokens
        horizon = self._clock_ms() - HELD_MS
        while self._recent and self._recent[0].taken_at_ms <= horizon:
            self._recent.popleft()
        self._recent.append(charge)

    def _enter_degraded(self, exc: BaseException) -> None:
        if self._degraded:
            return
        self._local = local_share_budget(
            self._views,
            self._configured,
            group_size=max(1, self._group_size()),
            floor_shares=self._shares,
            clock_ms=self._clock_ms,
        )
        self._degraded = True
        logger.warning(
            "Redis at %s unreachable for the rate budget (%s: %s): %s falls back to a local share of "
            "each per-minute limit until Redis answers again",
            self._redis.shown,
            type(exc).__name__,
            exc,
            self._owner_id,
        )

    async def _recover(self, client: Redis) -> None:
        """Enter this process's starts of the last minute (those made while Redis was away, and the
        others again, which a restarted Redis has lost; an entry Redis holds is not doubled, its
        id tells), then use the shared budget again."""
        entered: set[str] = set()
        for _ in range(_RECOVERY_ATTEMPTS):
            now = self._clock_ms()
            pending = [c for c in self._recent if c.entry_id not in entered and now - c.taken_at_ms < HELD_MS]
            try:
                async with asyncio.timeout(self._call_timeout_s):
                    await client.ping()
                for charge in pending:
                    if charge.requests or charge.amount:  # a refunded start counts nothing
                        age_ms = max(1, now - charge.taken_at_ms)
                        args = self._take_args(charge, True, age_ms)
                        await self._run(client, scripts.TAKE, charge.model, args)
                    charge.in_redis = True
                    entered.add(charge.entry_id)
            except _UNAVAILABLE:
                return
            # Leave only when Redis holds every start made locally: one made during these calls
            # would otherwise be invisible to the group.
            if all(c.in_redis for c in self._recent):
                self._degraded = False
                self._local = None
                logger.warning(
                    "Redis at %s answers again: %s is back on the shared rate budget (%d starts entered)",
                    self._redis.shown,
                    self._owner_id,
                    len(entered),
                )
                return

    async def _probe(self) -> None:
        while True:
            await asyncio.sleep(self._reconnect_interval_s)  # a period, not a wait for a condition
            client = self._client
            if client is None or not self._degraded:
                continue
            try:
                await self._recover(client)
            except Exception:
                logger.exception("rate budget recovery of %s failed", self._owner_id)


if TYPE_CHECKING:
    _protocol_check: type[RateLedger] = SharedRateBudget
