"""`follow`, the one loop of both event streams: chunks and results travel on different topics, so
an OK result read before the last chunks waits a bounded time for them instead of cutting the
caller's text short."""

from __future__ import annotations

import asyncio

from inferq.delivery.hub import WaiterHub
from inferq.delivery.sse import Stopped, follow
from inferq.messaging.records import InferenceChunk, InferenceResult
from tests.support.fakes import a_chunk, a_result
from tests.support.loop import in_loop


async def steps_of(
    hub: WaiterHub, publish: list[InferenceChunk | InferenceResult], settle_s: float
) -> list[object]:
    """What `follow` yields for acme's r1 when `publish` is read in that order (then nothing)."""
    with hub.waiting("acme", "r1") as waiter:
        for item in publish:
            if isinstance(item, InferenceChunk):
                hub.publish_chunk(item)
            else:
                hub.publish_result(item)
        steps = follow(waiter, bound_s=10, keepalive_s=10, settle_s=settle_s)
        return [step async for step in steps]


def chunk(seq: int, delta: str, **fields: object) -> InferenceChunk:
    return a_chunk("r1", seq, tenant="acme", delta=delta, **fields)


@in_loop
async def test_a_result_read_before_the_last_chunk_waits_for_it() -> None:
    hub = WaiterHub()
    result = a_result("r1", tenant="acme", output="Hello")
    with hub.waiting("acme", "r1") as waiter:
        hub.publish_chunk(chunk(0, "Hel"))
        hub.publish_result(result)  # the result's topic was read first
        steps = follow(waiter, bound_s=10, keepalive_s=10, settle_s=5)
        first = await anext(steps)
        assert isinstance(first, InferenceChunk) and first.delta == "Hel"
        late = asyncio.get_running_loop().call_later(
            0.05, hub.publish_chunk, chunk(1, "lo", finish_reason="stop")
        )
        rest = [step async for step in steps]
        late.cancel()
    assert [getattr(s, "delta", None) for s in rest] == ["lo", None]
    assert rest[-1] is result


@in_loop
async def test_a_result_the_chunks_cover_ends_the_stream_at_once() -> None:
    result = a_result("r1", tenant="acme", output="Hello")
    ended = [chunk(0, "Hel"), chunk(1, "lo", finish_reason="stop"), result]
    # A settle of a minute would hit the test's bound: the covered result does not wait.
    steps = await asyncio.wait_for(steps_of(WaiterHub(), ended, settle_s=60), 5)
    assert steps[-1] is result and len(steps) == 3
    all_text = [chunk(0, "Hel"), chunk(1, "lo"), result]  # no finish chunk, but all of the text
    assert (await asyncio.wait_for(steps_of(WaiterHub(), all_text, settle_s=60), 5))[-1] is result
    not_streamed = [result]
    assert await asyncio.wait_for(steps_of(WaiterHub(), not_streamed, settle_s=60), 5) == [result]
    failed = a_result("r1", tenant="acme", status="FAILED", error="failed mid-stream after 1 chunks: x")
    assert (await asyncio.wait_for(steps_of(WaiterHub(), [chunk(0, "Hel"), failed], settle_s=60), 5))[
        -1
    ] is failed


@in_loop
async def test_chunks_that_never_come_delay_the_result_by_the_settle_bound_only() -> None:
    result = a_result("r1", tenant="acme", output="Hello")
    steps = await asyncio.wait_for(steps_of(WaiterHub(), [chunk(0, "Hel"), result], settle_s=0.05), 5)
    assert steps[-1] is result
    assert Stopped.BOUND not in steps
