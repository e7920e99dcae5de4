"""SharedRateBudget against a real redis-server: one per-minute budget for several dispatchers.

No test here waits for a minute to pass: every scenario fits in the minute it starts in.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from inferq.clock import wall_ms
from inferq.dispatcher.rate_budget import RateBudget, RateHeaders, RateLimit
from inferq.dispatcher.rate_ledger import LocalRateLedger, RateLedger
from inferq.dispatcher.shared_rate import scripts
from inferq.dispatcher.shared_rate.budget import KEYS_TTL_MS, SharedRateBudget
from inferq.dispatcher.tokens.redis_endpoint import RedisEndpoint
from inferq.messaging.tiers import Tier
from inferq.tools.redis.fixture import local_redis_for_tests
from inferq.tools.redis.server import pick_free_port
from tests.support.loop import in_loop
from tests.support.waiting import eventually

pytestmark = pytest.mark.redis

LOGGER = "inferq.dispatcher.shared_rate.budget"
PEAK_SHARES = {Tier.HIGH: 0.6, Tier.MEDIUM: 0.3, Tier.LOW: 0.1}


@asynccontextmanager
async def shared_budgets(
    url: str,
    count: int,
    configured: dict[str, RateLimit],
    *,
    prefix: str | None = None,
    group_size: Callable[[], int] = lambda: 2,
    clock_ms: Callable[[], int] = wall_ms,
    **kwargs: Any,
) -> AsyncIterator[list[SharedRateBudget]]:
    """`count` started budgets sharing one Redis prefix, as the dispatchers of one group. Their
    calls wait up to 5 s (the product's 0.5 s would turn a stall of this shared machine into the
    degraded mode, whose local share refuses a minute it never read: not what these tests are about)."""
    prefix = prefix or f"test:{uuid.uuid4().hex[:12]}"
    async with AsyncExitStack() as stack:
        budgets = []
        for n in range(count):
            budget = SharedRateBudget(
                redis=RedisEndpoint(url, call_timeout_s=5.0),
                owner=f"d{n}",
                configured=configured,
                group_size=group_size,
                clock_ms=clock_ms,
                key_prefix=prefix,
                **kwargs,
            )
            await budget.start()
            stack.push_async_callback(budget.stop)
            budgets.append(budget)
        yield budgets


async def admitted_tokens(budget: RateLedger, tier: Tier, cost: int, tries: int) -> int:
    total = 0
    for _ in range(tries):
        if await budget.take("m", tier, cost) is not None:
            total += cost
        await asyncio.sleep(0)  # let the other budgets' takes interleave
    return total


@in_loop
async def test_two_budgets_hammering_one_redis_never_admit_more_than_the_limit_together(
    redis_url: str,
) -> None:
    tpm, rpm = 10_000, 300

    async with shared_budgets(redis_url, 2, {"m": RateLimit(rpm=rpm, tpm=tpm)}) as (a, b):
        rng = random.Random(3)
        costs = [rng.randint(1, 400) for _ in range(400)]
        admitted = [0, 0]

        async def worker(index: int, budget: SharedRateBudget, share: list[int]) -> None:
            for cost in share:
                if await budget.take("m", Tier.HIGH, cost) is not None:
                    admitted[index] += cost

        await asyncio.gather(*(worker(i, bud, costs[i::2]) for i, bud in enumerate((a, b))))
        # One dispatcher alone would have taken the whole minute: sharing is what holds the two.
        async with shared_budgets(redis_url, 1, {"m": RateLimit(rpm=rpm, tpm=tpm)}) as (alone,):
            alone_tokens = await admitted_tokens(alone, Tier.HIGH, 100, 200)
    print(f"\nadmitted by each of two budgets: {admitted}; one budget alone: {alone_tokens}")
    assert not a.degraded and not b.degraded, "Redis did not answer within 5 s"
    assert sum(admitted) <= tpm
    assert min(admitted) > 0  # both took part
    assert sum(admitted) >= tpm - 400  # and together they used the minute (nothing is lost)
    assert alone_tokens == tpm


@in_loop
async def test_low_in_one_dispatcher_cannot_spend_the_share_high_keeps_in_the_other(redis_url: str) -> None:
    async with shared_budgets(redis_url, 2, {"m": RateLimit(tpm=1000)}) as (a, b):
        a.set_floor_shares(PEAK_SHARES)
        b.set_floor_shares(PEAK_SHARES)
        low = await admitted_tokens(a, Tier.LOW, 50, 100)
        high = await admitted_tokens(b, Tier.HIGH, 50, 100)
    # HIGH's 600 and MEDIUM's 300 are kept from LOW; HIGH may use everything LOW left.
    assert (low, high) == (100, 900)


@in_loop
async def test_settling_to_the_real_usage_gives_the_group_the_difference_back(redis_url: str) -> None:
    async with shared_budgets(redis_url, 2, {"m": RateLimit(tpm=1000)}) as (a, b):
        charge = await a.take("m", Tier.HIGH, 800)
        assert charge is not None
        before = await admitted_tokens(b, Tier.HIGH, 100, 10)
        await a.settle(charge, 300)
        refunded = await a.take("m", Tier.HIGH, 100)
        assert refunded is not None
        await a.refund(refunded)
        after = await admitted_tokens(b, Tier.HIGH, 100, 10)
        assert (before, after) == (200, 500)


@in_loop
async def test_what_one_dispatchers_answers_teach_holds_the_other(redis_url: str) -> None:
    async with shared_budgets(redis_url, 2, {}) as (a, b):
        # Nothing configured: the first answer to `a` says 1000 a minute, 400 already counted
        # by the backend (another client on the same key).
        await a.observe("m", RateHeaders(limit_tokens=1000, remaining_tokens=600, reset_tokens_s=30.0))
        learned = await admitted_tokens(b, Tier.HIGH, 100, 10)
        # A 429's retry-after to `b` holds `a`'s starts of the model too, and only that model.
        await b.observe("n", RateHeaders(retry_after_s=30.0))
        held = await a.take("n", Tier.HIGH, 1) is None
        other_model = await a.take("o", Tier.HIGH, 1) is not None
        assert (learned, held, other_model) == (600, True, True)


OPS = ("take", "take", "take", "settle", "refund", "observe")


async def decisions(ledger: RateLedger, seed: int) -> list[bool]:
    """A random run of starts, settles, refunds and headers; whether each start was admitted."""
    rng = random.Random(seed)
    ledger.set_floor_shares(PEAK_SHARES)
    charges = []
    admitted = []
    for _ in range(300):
        op = rng.choice(OPS)
        model = rng.choice(("m", "n"))
        if op == "take" or not charges:
            charge = await ledger.take(model, rng.choice(list(Tier)), rng.randint(1, 300))
            admitted.append(charge is not None)
            if charge is not None:
                charges.append(charge)
        elif op == "settle":
            await ledger.settle(charges.pop(rng.randrange(len(charges))), rng.randint(0, 300))
        elif op == "refund":
            await ledger.refund(charges.pop(rng.randrange(len(charges))))
        else:
            remaining = rng.randint(0, 5000)
            headers = RateHeaders(limit_tokens=5000, remaining_tokens=remaining, reset_tokens_s=50.0)
            await ledger.observe(model, headers)
    return admitted


@pytest.mark.parametrize("seed", [1, 2, 3])
@in_loop
async def test_one_shared_budget_decides_every_start_as_the_local_budget_does(
    redis_url: str, seed: int
) -> None:
    configured = {"m": RateLimit(rpm=40, tpm=4000)}

    local = await decisions(LocalRateLedger(RateBudget(configured, clock_ms=wall_ms)), seed)
    async with shared_budgets(redis_url, 1, configured) as (shared,):
        local, shared = local, await decisions(shared, seed)
    assert True in local and False in local  # the run reaches the limits
    assert shared == local


def test_keys_of_a_model_expire_after_its_minute(redis_url: str) -> None:
    prefix = f"test:{uuid.uuid4().hex[:12]}"

    async def scenario() -> list[int]:
        async with shared_budgets(redis_url, 1, {"m": RateLimit(tpm=1000)}, prefix=prefix) as (a,):
            assert await a.take("m", Tier.HIGH, 10) is not None
        client = Redis.from_url(redis_url, socket_timeout=2.0)
        try:
            keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
            return [await client.pttl(key) for key in keys]
        finally:
            await client.aclose()

    ttls = asyncio.run(scenario())
    assert len(ttls) == 3
    assert all(0 < ttl <= KEYS_TTL_MS for ttl in ttls), ttls


@in_loop
async def test_without_redis_each_dispatcher_keeps_to_its_share_and_logs_no_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    nowhere = f"redis://user:s3cret-pw@127.0.0.1:{pick_free_port()}/0"

    async with shared_budgets(nowhere, 1, {"m": RateLimit(tpm=1000)}, group_size=lambda: 2) as (a,):
        # Never read from Redis: the group may have spent the whole minute; the model waits.
        configured = await admitted_tokens(a, Tier.HIGH, 10, 10)
        # A model no limit is known of starts (as with one process); its headers teach the share.
        await a.observe("n", RateHeaders(limit_tokens=1000, remaining_tokens=1000))
        learned = await admitted_tokens_of(a, "n", 100, 20)
        degraded = a.degraded
    assert (configured, learned, degraded) == (0, 500, True)
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(messages) == 1 and "unreachable" in messages[0], messages
    assert "s3cret-pw" not in caplog.text


async def admitted_tokens_of(budget: RateLedger, model: str, cost: int, tries: int) -> int:
    total = 0
    for _ in range(tries):
        if await budget.take(model, Tier.HIGH, cost) is not None:
            total += cost
    return total


def test_an_outage_keeps_the_group_under_the_limit_and_the_starts_made_meanwhile_count_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    tpm = 1000

    # The local clock stands still: the readings of the group's minute are as fresh as can be, and
    # however long the restart takes, the starts of the test stay in their minute.
    clock = [wall_ms()]

    async def scenario(stop: Callable[[], None], start: Callable[[], object], url: str) -> list[int]:
        budgets = shared_budgets(
            url, 2, {"m": RateLimit(tpm=tpm)}, clock_ms=lambda: clock[0], reconnect_interval_s=0.2
        )
        async with budgets as (a, b):
            before = [
                await admitted_tokens(a, Tier.HIGH, 100, 3),
                await admitted_tokens(b, Tier.HIGH, 100, 1),
            ]
            stop()
            # Each falls back to its half of the limit (500), less what the group had when it last
            # read it: `a` read 300 (before `b`'s start), `b` 400.
            during = [
                await admitted_tokens(a, Tier.HIGH, 50, 10),
                await admitted_tokens(b, Tier.HIGH, 50, 10),
            ]
            assert a.degraded and b.degraded
            start()  # a fresh server: it has forgotten the minute
            await eventually(
                lambda: not a.degraded and not b.degraded, "back on the shared budget", 15, interval_s=0.05
            )
            # Each entered its starts of the minute again: 700 of 1000 spent, 300 left.
            after = await admitted_tokens(a, Tier.HIGH, 100, 10)
            return [*before, *during, after]

    with local_redis_for_tests(tmp_path) as server:
        figures = asyncio.run(scenario(server.stop, server.start, server.url))
    assert figures == [300, 100, 200, 100, 300]
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert sum("unreachable" in m for m in messages) == 2, messages  # one per dispatcher
    assert sum("is back on the shared rate budget" in m for m in messages) == 2, messages


def test_every_kind_of_entry_leaves_the_minute_and_takes_its_count_with_it(redis_url: str) -> None:
    """The scripts with a 300 ms "minute": a start, a start refunded to nothing, a start settled and
    the backend's excess all leave it, and the minute's counts come back to zero."""
    held_ms, ttl_ms = 300, 10_000
    base = f"test:{uuid.uuid4().hex[:12]}:rate:m"
    keys = [f"{base}:log", f"{base}:entries", f"{base}:sums", f"{base}:learned"]
    shares = ["0.6", "0.3", "0.1"]

    async def scenario() -> tuple[list[int], list[int], int]:
        client = Redis.from_url(redis_url, socket_timeout=2.0)
        try:

            async def take(entry: str) -> list[int]:
                args = [held_ms, ttl_ms, 1, 1, 100, 0, entry, 0, 1000, *shares, 0]
                return await scripts.TAKE.run(client, keys, args)

            async def settle(entry: str, requests: int, tokens: int) -> list[int]:
                return await scripts.SETTLE.run(client, keys, [held_ms, ttl_ms, entry, requests, tokens])

            await take("a")
            await take("b")
            await settle("b", 0, 0)
            await take("c")
            await settle("c", -1, 40)
            excess = [held_ms, ttl_ms, 0, 1000, -1, -1, -1, 500, -1, 100, -1, scripts.LEARNED_TTL_MS]
            counted = await scripts.OBSERVE.run(client, keys, excess)
            left = await eventually(
                lambda: settle("nothing", 0, 0),
                "the entries pruned",
                10,
                interval_s=0.05,
                done=lambda v: v[2:4] == [0, 0],
            )
            return counted[2:4], left[2:4], await client.hlen(keys[1])
        finally:
            await client.aclose()

    counted, left, entries = asyncio.run(scenario())
    assert counted == [2, 500]  # a and c, 140 tokens, and 360 the backend counts beyond them
    assert (left, entries) == ([0, 0], 0)
