import asyncio

import pytest

from inferq.ingest.idempotency import IdempotencyCache
from tests.support.loop import in_loop


def test_idempotency_cache_runs_the_action_once_per_id():
    calls = []

    async def scenario():
        cache = IdempotencyCache(10)

        async def action():
            calls.append(1)
            await asyncio.sleep(0)
            return {"request_id": "a"}

        results = await asyncio.gather(*(cache.once("a", action) for _ in range(5)))
        return results

    results = asyncio.run(scenario())
    assert len(calls) == 1
    assert [replayed for _, replayed in results].count(False) == 1
    assert all(answer == {"request_id": "a"} for answer, _ in results)


@in_loop
async def test_idempotency_cache_forgets_failures_and_is_bounded():
    cache = IdempotencyCache(2)

    async def boom():
        raise ValueError("kafka down")

    with pytest.raises(ValueError):
        await cache.once("a", boom)

    async def ok():
        return {"ok": True}

    answer, replayed = await cache.once("a", ok)
    assert (answer, replayed) == ({"ok": True}, False)
    await cache.once("b", ok)
    await cache.once("c", ok)
    assert len(cache) == 2
