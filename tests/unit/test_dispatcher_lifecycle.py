"""Start-up and shutdown on fakes: one order, mirrored; running calls drained within the bound, their
outcomes produced and committed before the group is left; tokens given back last."""

from __future__ import annotations

import asyncio

import pytest

from inferq.dispatcher.tokens import Lease
from inferq.messaging.records import Status
from inferq.messaging.tiers import Tier
from tests.support.dispatcher_fakes import RecordingTokenPool, encoded, rig, running
from tests.support.kafka import a_request
from tests.support.loop import in_loop
from tests.support.waiting import eventually


def lifecycle(events: list[str]) -> list[str]:
    """The events that are not produce/commit traffic."""
    return [e for e in events if not e.startswith(("produce ", "commit "))]


@in_loop
async def test_start_up_and_shutdown_are_mirrored() -> None:
    async with running(rig()) as r:
        pass
    assert lifecycle(r.events) == [
        "pool.start",
        "producer.start",
        "consumer.start",
        "consumer.stop",
        "producer.stop",
        "backend.close",
        "pool.stop holding 0",
    ]


@in_loop
async def test_shutdown_drains_running_calls_produces_their_outcomes_commits_then_leaves() -> None:
    analysis = a_request("MEDIUM", deadline_ms=60_000)

    r = rig(drain_timeout_s=5.0)
    async with running(r):
        medium = r.partition("MEDIUM")
        r.backend.hold()
        r.consumer.produce(medium, encoded(analysis))
        await eventually(lambda: r.backend.in_flight == 1, "the call running")
        r.dispatcher.request_stop()  # what SIGTERM does
        await asyncio.sleep(0.1)
        assert "consumer.stop" not in r.events, "left the group while a call was running"
        r.backend.release()  # the call finishes within the drain bound
    events = r.events
    produced = events.index(f"produce {r.topics.results}")
    committed = events.index(f"commit {medium}@1")
    assert produced < committed < events.index("consumer.stop") < events.index("producer.stop")
    assert events[-1] == "pool.stop holding 0"
    assert r.results()[analysis.request_id].status == Status.OK


@in_loop
async def test_a_call_past_the_drain_bound_is_left_to_the_next_owner_uncommitted() -> None:
    stuck = a_request("HIGH", deadline_ms=60_000)

    r = rig(drain_timeout_s=0.2)
    async with running(r):
        high = r.partition("HIGH")
        r.backend.hold()
        r.consumer.produce(high, encoded(stuck))
        await eventually(lambda: r.backend.in_flight == 1, "the call running")
    # Abandoned after 0.2 s: no outcome, the offset not committed past it, its token given back.
    assert r.results() == {}
    assert r.consumer.committed_offset(high) in (None, 0)
    assert r.backend.in_flight == 0
    assert "pool.stop holding 0" in r.events


class BrokenPool(RecordingTokenPool):
    async def try_acquire(self, tier: Tier, *, total_limit: int, tier_limit: int) -> Lease | None:
        raise RuntimeError("a bug in the pool")


@in_loop
async def test_a_crashed_helper_stops_the_dispatcher_instead_of_leaving_it_half_alive() -> None:
    r = rig(pool_class=BrokenPool)  # the starter's every acquire fails
    task = asyncio.create_task(r.dispatcher.run())
    r.consumer.produce(r.partition("HIGH"), encoded(a_request("HIGH")))
    async with asyncio.timeout(10):
        with pytest.raises(RuntimeError, match="a bug in the pool"):
            await task
    # It still shut down in order.
    assert lifecycle(r.events)[-4:] == [
        "consumer.stop",
        "producer.stop",
        "backend.close",
        "pool.stop holding 0",
    ]
