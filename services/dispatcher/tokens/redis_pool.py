"""`RedisTokenPool`: one concurrency budget shared by every dispatcher of the consumer group.

What a user can rely on
=======================

**The budget holds across the group.** A token is a lease in Redis (see `inferq.dispatcher.tokens.lua`
for the data model). `try_acquire` is one Lua script: it drops expired leases, counts every tier and
takes the token only when ``total < total_limit`` and ``count(tier) < tier_limit``. Scripts run
atomically in Redis, so dispatchers deciding at the same moment from stale snapshots can never take
more than ``total_limit`` tokens between them. Nothing is reserved per dispatcher: an idle dispatcher
holds no tokens and a busy one may take the whole budget (work-conserving across the group).

**A crashed dispatcher's tokens come back within one lease TTL (default 6 s).** Leases expire unless
their owner renews them; a background heartbeat renews this owner's leases every tick
(``min(snapshot_interval_s, lease_ttl_s / 3)``, 0.5 s by default) and refreshes the `in_use` snapshot
at the same time. A SIGKILLed owner stops renewing, so its last lease expires at most ``lease_ttl_s``
later and the next script anyone runs frees it. The owner id is the dispatcher id plus a random
suffix, so a restarted dispatcher never renews its dead predecessor's leases. Expiry uses the Redis
server's clock only (``TIME`` inside the scripts), so skewed client clocks do not matter.

**When Redis is unreachable, the budget falls back to a local share.** Every Redis call is bounded by
``call_timeout_s`` (0.5 s). When one fails (refused, timed out, any Redis error), the pool enters
*degraded* mode, logs one warning and sets `degraded`:

- `try_acquire` grants a token only while this process holds fewer than
  ``min(total_limit, max(1, total_limit // group_size()))`` tokens in all (leases taken before the
  outage count, since their calls still run) and fewer than ``tier_limit`` of the tier. ``group_size``
  is the dispatcher's own view of how many dispatchers share the budget.
- `release` only updates the local ledger; `in_use` reports this process's tokens (nothing else is
  known).
- Leases this process holds in Redis are not renewed meanwhile: to the peers they look like a dead
  owner's and expire within one TTL (unless Redis answers again first and the recovery renews them).
- Every ``reconnect_interval_s`` (1 s) the heartbeat tries Redis again. When it answers, the pool
  first makes Redis hold exactly the leases this process holds now (re-adding those taken while
  degraded, removing those released meanwhile), then leaves degraded mode and logs one warning.
  Until the in-flight calls of the outage finish, Redis may count more than ``total_limit``: new
  acquires are then refused, which errs on the safe side.

Limits of the fallback, stated plainly: the local share keeps the group within ``total_limit`` only
when every dispatcher has lost Redis and they agree on the group size. A dispatcher cut off from a
Redis that its peers still reach may add up to its share on top of them. ``max(1, ...)`` keeps every
dispatcher able to serve at least one request, so a group larger than ``total_limit`` may exceed it by
up to ``group_size - total_limit``. Tier limits are applied to the local ledger only.

Two more windows where Redis's count is short, both bounded by one heartbeat tick (0.5 s): a Redis
restart (the server keeps leases in memory only) or a failover that loses recent writes forgets the
live leases, and each dispatcher re-registers its own at its next tick; and a dispatcher whose event
loop stalled for longer than a lease TTL finds its leases expired and re-registers them at its next
tick. Meanwhile the group may start calls above ``total_limit``. Run Redis where it is not restarted
under load, and keep the event loop free of blocking work.

Not supported: Redis Cluster (the keys of a budget must live on one node); a primary with replicas
is fine, a failover being just another short outage.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from redis.asyncio import Redis
from redis.exceptions import AuthenticationError, RedisError

from inferq.dispatcher.tokens import lua
from inferq.dispatcher.tokens.errors import UnknownLeaseError
from inferq.dispatcher.tokens.pool import Lease
from inferq.dispatcher.tokens.redis_endpoint import RedisEndpoint
from inferq.dispatcher.tokens.settings import DEFAULT_KEY_PREFIX, RedisBudgetSettings
from inferq.messaging.tiers import Tier

if TYPE_CHECKING:
    from inferq.dispatcher.tokens.pool import TokenPool

logger = logging.getLogger(__name__)

_TIERS: tuple[Tier, ...] = (Tier.HIGH, Tier.MEDIUM, Tier.LOW)  # the order of the scripts' KEYS
_TIER_INDEX = {tier: i + 1 for i, tier in enumerate(_TIERS)}  # Lua arrays start at 1
# What "Redis did not do it" looks like: refused/reset connections, timeouts (redis' and ours), and any
# error reply (LOADING after a restart, READONLY after a failover, a full memory).
_UNAVAILABLE = (RedisError, OSError, TimeoutError)
_RECOVERY_ATTEMPTS = 3


class RedisTokenPool:
    """The group-wide `TokenPool`: leases in Redis, a local share when Redis is away (module docstring).

    ``owner`` is the dispatcher id; a random suffix is appended (see `owner_id`). ``group_size`` returns
    how many dispatchers share the budget; it is called only in degraded mode.
    """

    def __init__(
        self,
        *,
        redis: RedisEndpoint,
        owner: str,
        group_size: Callable[[], int],
        key_prefix: str = DEFAULT_KEY_PREFIX,
        lease_ttl_s: float = 6.0,
        snapshot_interval_s: float = 0.5,
        reconnect_interval_s: float = 1.0,
    ) -> None:
        if not owner or any(ch.isspace() for ch in owner):
            raise ValueError(f"owner must be a non-empty id without whitespace, got {owner!r}")
        call_timeout_s = redis.call_timeout_s
        if call_timeout_s >= lease_ttl_s / 3:
            raise ValueError(f"call_timeout_s must be in (0, lease_ttl_s / 3), got {call_timeout_s}")
        if snapshot_interval_s <= 0 or reconnect_interval_s <= 0:
            raise ValueError("snapshot_interval_s and reconnect_interval_s must be positive")
        self._redis = redis
        self._owner_id = f"{owner}-{secrets.token_hex(4)}"
        self._group_size = group_size
        self._keys = [
            *(f"{key_prefix}:leases:{tier.value}" for tier in _TIERS),
            f"{key_prefix}:released:{self._owner_id}",
        ]
        self._ttl_ms = int(lease_ttl_s * 1000)
        self._call_timeout_s = call_timeout_s
        self._tick_s = min(snapshot_interval_s, lease_ttl_s / 3)
        self._reconnect_interval_s = reconnect_interval_s

        self._client: Redis | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._degraded = False
        self._next_probe_at = 0.0
        self._next_lease = 0  # the last lease id handed out; ids only grow (the sync script relies on it)
        self._held: dict[str, Tier] = {}  # lease id -> tier: every token this process holds
        self._held_counts: dict[Tier, int] = dict.fromkeys(Tier, 0)
        self._pending: set[str] = set()  # members of acquires whose reply has not come back yet
        self._snapshot: dict[Tier, int] = dict.fromkeys(Tier, 0)
        self._snapshot_ms = -1

    @classmethod
    def from_settings(
        cls,
        settings: RedisBudgetSettings,
        *,
        owner: str,
        group_size: Callable[[], int],
        topic_prefix: str = "inferq",
    ) -> RedisTokenPool:
        """The pool described by ``settings`` for dispatcher ``owner`` of the pipeline ``topic_prefix``."""
        return cls(
            redis=settings.endpoint(),
            owner=owner,
            group_size=group_size,
            key_prefix=settings.key_prefix_for(topic_prefix),
            lease_ttl_s=settings.lease_ttl_s,
        )

    def __repr__(self) -> str:
        return f"RedisTokenPool(url={self._redis.shown!r}, owner={self._owner_id!r})"

    # -- state ---------------------------------------------------------------------------------------

    @property
    def owner_id(self) -> str:
        """This process's owner id in Redis: the dispatcher id plus a random suffix."""
        return self._owner_id

    @property
    def degraded(self) -> bool:
        """True while Redis is unreachable and the local share is in force."""
        return self._degraded

    def in_use(self) -> Mapping[Tier, int]:
        """Tokens in use per tier across the group, as of the last Redis reply; when degraded, ours."""
        return dict(self._held_counts) if self._degraded else dict(self._snapshot)

    def held_locally(self) -> Mapping[Tier, int]:
        return dict(self._held_counts)

    # -- lifecycle -----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and start the heartbeat. Idempotent; an unreachable Redis starts the pool degraded."""
        if self._client is not None:
            return
        self._client = self._redis.client(self._owner_id)
        await self._sync()
        self._heartbeat_task = asyncio.create_task(
            self._heartbeat(), name=f"token-heartbeat-{self._owner_id}"
        )

    async def stop(self) -> None:
        """Stop renewing, delete this owner's leases (when Redis answers), close the client. Idempotent.

        Leases Redis could not be told about expire by themselves within one lease TTL.
        """
        client, self._client = self._client, None
        task, self._heartbeat_task = self._heartbeat_task, None
        if task is not None:
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=1.0 + self._call_timeout_s)
            if not done:
                logger.warning("token heartbeat of %s did not stop within its bound", self._owner_id)
        self._held.clear()
        self._pending.clear()
        self._held_counts = dict.fromkeys(Tier, 0)
        if client is None:
            return
        try:
            await self._run(client, lua.SYNC, self._sync_args())  # holding nothing: deletes ours
        except _UNAVAILABLE as exc:
            logger.info("leases of %s not deleted (%s): they expire by themselves", self._owner_id, exc)
        await self._redis.close(client, self._owner_id)

    # -- tokens --------------------------------------------------------------------------------------

    async def try_acquire(self, tier: Tier, *, total_limit: int, tier_limit: int) -> Lease | None:
        """Take a token if total < total_limit and count(tier) < tier_limit, atomically; else None."""
        client = self._client
        if client is None:
            raise RuntimeError("RedisTokenPool.try_acquire before start()")
        if total_limit <= 0 or tier_limit <= 0:
            return None
        self._next_lease += 1
        lease_id = str(self._next_lease)
        if not self._degraded:
            member = self._member(lease_id)
            args: list[str | int] = [_TIER_INDEX[tier], member, self._ttl_ms, total_limit, tier_limit]
            self._pending.add(member)  # a heartbeat meanwhile must not delete it as a stray
            try:
                reply = await self._run(client, lua.ACQUIRE, args)
            except _UNAVAILABLE as exc:
                # If the script did run, the next successful sync removes the stray lease.
                self._enter_degraded(exc)
            else:
                self._apply_snapshot(reply[1], reply[2:])
                if reply[0] != 1:
                    return None
                self._hold(lease_id, tier)
                return Lease(tier, lease_id)
            finally:
                self._pending.discard(member)
        return self._acquire_locally(tier, lease_id, total_limit, tier_limit)

    async def release(self, lease: Lease) -> None:
        """Give the token back; never raises because Redis is away (see degraded mode)."""
        tier = self._held.pop(lease.lease_id, None)
        if tier is None:
            raise UnknownLeaseError(lease.lease_id, self._owner_id)
        self._held_counts[tier] -= 1
        client = self._client
        if client is None or self._degraded:
            return  # a lease in Redis from before the outage is removed by the recovery sync
        try:
            args: list[str | int] = [_TIER_INDEX[tier], self._member(lease.lease_id), self._ttl_ms]
            reply = await self._run(client, lua.RELEASE, args)
        except _UNAVAILABLE as exc:
            self._enter_degraded(exc)
        else:
            self._apply_snapshot(reply[0], reply[1:])

    def _acquire_locally(self, tier: Tier, lease_id: str, total_limit: int, tier_limit: int) -> Lease | None:
        share = min(total_limit, max(1, total_limit // max(1, self._group_size())))
        if len(self._held) >= share or self._held_counts[tier] >= tier_limit:
            return None
        self._hold(lease_id, tier)
        return Lease(tier, lease_id)

    def _hold(self, lease_id: str, tier: Tier) -> None:
        self._held[lease_id] = tier
        self._held_counts[tier] += 1

    def _member(self, lease_id: str) -> str:
        return f"{self._owner_id}:{lease_id}"

    # -- Redis ---------------------------------------------------------------------------------------

    async def _run(self, client: Redis, script: lua.Script, args: Sequence[str | int]) -> list[int]:
        async with asyncio.timeout(self._call_timeout_s):
            return await script.run(client, self._keys, args)

    def _apply_snapshot(self, server_ms: int, counts: Sequence[int]) -> None:
        # Replies of concurrent calls may arrive out of order: never let an older one win.
        if server_ms >= self._snapshot_ms:
            self._snapshot_ms = server_ms
            self._snapshot = dict(zip(_TIERS, counts, strict=True))

    def _sync_args(self) -> list[str | int]:
        args: list[str | int] = [self._ttl_ms, f"{self._owner_id}:", self._next_lease, len(self._held)]
        for lease_id, tier in self._held.items():
            args += [_TIER_INDEX[tier], self._member(lease_id)]
        args += sorted(self._pending)
        return args

    async def _sync(self) -> bool:
        """Renew our leases and refresh the snapshot; on failure enter degraded mode. True when done."""
        client = self._client
        if client is None:
            return False
        try:
            reply = await self._run(client, lua.SYNC, self._sync_args())
        except _UNAVAILABLE as exc:
            self._enter_degraded(exc)
            return False
        self._apply_snapshot(reply[0], reply[1:])
        return True

    def _enter_degraded(self, exc: BaseException) -> None:
        if self._degraded:
            return
        self._degraded = True
        self._next_probe_at = time.monotonic() + self._reconnect_interval_s
        # A refused password or certificate is no outage, but the way out is the same: the local share
        # until Redis takes us again (the password is not in the error; the URL is redacted).
        what = _failure(exc)
        logger.warning(
            "Redis at %s %s (%s: %s): %s falls back to a local budget of total_limit // "
            "group size until Redis answers again",
            self._redis.shown,
            what,
            type(exc).__name__,
            exc,
            self._owner_id,
        )

    async def _try_recover(self) -> None:
        self._next_probe_at = time.monotonic() + self._reconnect_interval_s
        for _ in range(_RECOVERY_ATTEMPTS):
            sent = set(self._held)
            if not await self._sync():
                return
            # Leave degraded mode only when Redis holds every lease we hold now; an acquire granted
            # locally while the sync was in flight would otherwise be invisible to the group.
            if self._held.keys() <= sent:
                self._degraded = False
                logger.warning(
                    "Redis at %s answers again: %s is back on the shared budget (%d leases re-registered)",
                    self._redis.shown,
                    self._owner_id,
                    len(self._held),
                )
                return

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self._tick_s)  # a period, not a wait for a condition
            try:
                if not self._degraded:
                    await self._sync()
                elif time.monotonic() >= self._next_probe_at:
                    await self._try_recover()
            except Exception as exc:
                # A bug here must not silently stop renewals (our leases would expire while their
                # calls run): say so loudly and fall back to the local share, which needs no Redis.
                logger.exception("token heartbeat of %s failed", self._owner_id)
                self._enter_degraded(exc)


def _failure(exc: BaseException) -> str:
    """What a failed Redis call means, in words for the degraded-mode warning."""
    if isinstance(exc, AuthenticationError):
        return "refused our credentials"
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(cause):
            return "presented a certificate our CA file does not trust (TLS handshake failed)"
        if isinstance(cause, ssl.SSLError):
            return "failed the TLS handshake"
        cause = cause.__cause__ or cause.__context__
    return "unreachable"


if TYPE_CHECKING:
    _protocol_check: type[TokenPool] = RedisTokenPool
