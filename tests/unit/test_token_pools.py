"""LocalTokenPool: the single-process budget ledger the scheduler takes tokens from."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from inferq.dispatcher.tokens import Lease, LocalTokenPool, TokenPool
from inferq.messaging.tiers import Tier


def with_pool(test: Callable[[LocalTokenPool], Awaitable[None]]) -> Callable[[], None]:
    """Runs `test` in a fresh event loop with a started pool, stopped after it."""

    def run() -> None:
        async def main() -> None:
            pool = LocalTokenPool()
            await pool.start()
            try:
                await test(pool)
            finally:
                await pool.stop()

        asyncio.run(main())

    run.__name__ = test.__name__
    return run


async def take(pool: TokenPool, tier: Tier, n: int, *, total: int, per_tier: int) -> list[Lease]:
    leases = []
    for _ in range(n):
        lease = await pool.try_acquire(tier, total_limit=total, tier_limit=per_tier)
        assert lease is not None, f"token {len(leases) + 1} of {tier} refused"
        leases.append(lease)
    return leases


@with_pool
async def test_grants_up_to_the_total_limit_then_refuses(pool: LocalTokenPool) -> None:
    await take(pool, Tier.HIGH, 3, total=5, per_tier=5)
    await take(pool, Tier.LOW, 2, total=5, per_tier=5)
    assert await pool.try_acquire(Tier.HIGH, total_limit=5, tier_limit=5) is None
    assert await pool.try_acquire(Tier.MEDIUM, total_limit=5, tier_limit=5) is None
    assert pool.in_use() == {Tier.HIGH: 3, Tier.MEDIUM: 0, Tier.LOW: 2}


@with_pool
async def test_the_tier_limit_refuses_while_the_total_has_room(pool: LocalTokenPool) -> None:
    await take(pool, Tier.LOW, 1, total=10, per_tier=1)
    assert await pool.try_acquire(Tier.LOW, total_limit=10, tier_limit=1) is None
    # Another tier is not held back by LOW's limit.
    assert await pool.try_acquire(Tier.HIGH, total_limit=10, tier_limit=1) is not None


@with_pool
async def test_a_release_frees_a_token_of_that_tier(pool: LocalTokenPool) -> None:
    high = await take(pool, Tier.HIGH, 2, total=2, per_tier=2)
    assert await pool.try_acquire(Tier.MEDIUM, total_limit=2, tier_limit=2) is None
    await pool.release(high[0])
    assert pool.in_use() == {Tier.HIGH: 1, Tier.MEDIUM: 0, Tier.LOW: 0}
    assert await pool.try_acquire(Tier.MEDIUM, total_limit=2, tier_limit=2) is not None
    assert pool.held_locally() == {Tier.HIGH: 1, Tier.MEDIUM: 1, Tier.LOW: 0}


@with_pool
async def test_a_shrunken_budget_refuses_until_enough_tokens_come_back(pool: LocalTokenPool) -> None:
    leases = await take(pool, Tier.MEDIUM, 4, total=4, per_tier=4)
    # The adaptive budget dropped to 2 while 4 calls run: nothing starts until 2 are left.
    await pool.release(leases.pop())
    assert await pool.try_acquire(Tier.HIGH, total_limit=2, tier_limit=2) is None
    await pool.release(leases.pop())
    assert await pool.try_acquire(Tier.HIGH, total_limit=2, tier_limit=2) is None
    await pool.release(leases.pop())
    assert await pool.try_acquire(Tier.HIGH, total_limit=2, tier_limit=2) is not None


@with_pool
async def test_a_zero_limit_grants_nothing(pool: LocalTokenPool) -> None:
    assert await pool.try_acquire(Tier.HIGH, total_limit=0, tier_limit=5) is None
    assert await pool.try_acquire(Tier.HIGH, total_limit=5, tier_limit=0) is None
    assert pool.in_use() == dict.fromkeys(Tier, 0)


@with_pool
async def test_leases_are_distinct_and_carry_their_tier(pool: LocalTokenPool) -> None:
    leases = [
        *await take(pool, Tier.HIGH, 3, total=9, per_tier=3),
        *await take(pool, Tier.LOW, 3, total=9, per_tier=3),
    ]
    assert len({lease.lease_id for lease in leases}) == 6
    assert [lease.tier for lease in leases] == [Tier.HIGH] * 3 + [Tier.LOW] * 3


@with_pool
async def test_releasing_a_token_twice_is_an_error(pool: LocalTokenPool) -> None:
    (lease,) = await take(pool, Tier.HIGH, 1, total=1, per_tier=1)
    await pool.release(lease)
    with pytest.raises(RuntimeError):
        await pool.release(lease)
    assert pool.in_use() == dict.fromkeys(Tier, 0)


@with_pool
async def test_stop_gives_every_token_back(pool: LocalTokenPool) -> None:
    await take(pool, Tier.HIGH, 2, total=3, per_tier=3)
    await take(pool, Tier.LOW, 1, total=3, per_tier=3)
    await pool.stop()
    assert pool.in_use() == dict.fromkeys(Tier, 0)
    assert pool.held_locally() == dict.fromkeys(Tier, 0)
    await take(pool, Tier.LOW, 3, total=3, per_tier=3)


@with_pool
async def test_the_snapshots_are_copies_the_caller_cannot_corrupt(pool: LocalTokenPool) -> None:
    await take(pool, Tier.HIGH, 1, total=2, per_tier=2)
    snapshot = pool.in_use()
    assert isinstance(snapshot, dict)
    snapshot[Tier.HIGH] = 0  # a caller scribbling on its copy must not free a token
    assert pool.in_use()[Tier.HIGH] == 1
    await take(pool, Tier.HIGH, 1, total=2, per_tier=2)
    assert await pool.try_acquire(Tier.HIGH, total_limit=2, tier_limit=2) is None
