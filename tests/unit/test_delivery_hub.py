"""The waiter hub: who is woken by which record, in which order, and what it costs to wait."""

from __future__ import annotations

import asyncio
import functools

import pytest

from inferq.delivery.hub import ChunkOrder, ChunkTracker, HubFullError, WaiterHub
from inferq.messaging.codec import chunk_codec
from inferq.messaging.records import InferenceResult
from tests.support import fakes
from tests.support.loop import in_loop

# Acme's, unless said otherwise.
a_chunk = functools.partial(fakes.a_chunk, tenant="acme")
a_result = functools.partial(fakes.a_result, tenant="acme")


@in_loop
async def test_chunks_then_the_result_wake_only_their_own_tenants_waiter() -> None:
    hub = WaiterHub()
    with hub.waiting("acme", "r1") as mine, hub.waiting("beta", "r1") as theirs:
        hub.publish_chunk(a_chunk(seq=0))
        hub.publish_chunk(a_chunk(seq=1))
        hub.publish_result(a_result())
        got = [await mine.next(1.0) for _ in range(3)]
        assert [type(g).__name__ for g in got] == ["InferenceChunk", "InferenceChunk", "InferenceResult"]
        assert [g.seq for g in got[:2]] == [0, 1]  # type: ignore[union-attr]
        # The other tenant's same id heard nothing.
        assert await theirs.next(0.05) is None
    assert hub.waiters == 0


@in_loop
async def test_a_waiter_sleeps_until_its_result_arrives() -> None:
    hub = WaiterHub()
    with hub.waiting("acme", "r1", chunks=False) as waiter:
        pending = asyncio.create_task(waiter.result(5.0))
        await asyncio.sleep(0)
        assert not pending.done()
        hub.publish_chunk(a_chunk())  # chunks do not wake a result-only waiter's answer
        hub.publish_result(a_result(output="first"))
        hub.publish_result(a_result(output="second"))  # a duplicate changes nothing
        result = await asyncio.wait_for(pending, 5.0)
        assert result is not None and result.output == "first"


@in_loop
async def test_a_wait_is_bounded_and_the_waiter_is_freed() -> None:
    hub = WaiterHub()
    with hub.waiting("acme", "r1") as waiter:
        assert await waiter.result(0.01) is None
        assert await waiter.next(0.01) is None
        assert hub.waiters == 1
    assert hub.waiters == 0


@in_loop
async def test_a_cancelled_waiter_is_unregistered() -> None:
    hub = WaiterHub()

    async def wait_forever() -> None:
        with hub.waiting("acme", "r1") as waiter:
            await waiter.result(3600)

    task = asyncio.create_task(wait_forever())
    await asyncio.sleep(0)
    assert hub.waiters == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert hub.waiters == 0


def test_waiters_are_bounded() -> None:
    hub = WaiterHub(max_waiters=2)
    with hub.waiting("a", "1"), hub.waiting("a", "2"):
        with pytest.raises(HubFullError), hub.waiting("a", "3"):
            pass
        assert hub.waiters == 2
    with hub.waiting("a", "3"):
        assert hub.waiters == 1


@in_loop
async def test_a_slow_reader_loses_excess_chunks_never_the_result() -> None:
    hub = WaiterHub(max_pending_chunks=3)
    with hub.waiting("acme", "r1") as waiter:
        for seq in range(10):
            hub.publish_chunk(a_chunk(seq=seq))
        hub.publish_result(a_result())
        got = [await waiter.next(1.0) for _ in range(4)]
        assert waiter.dropped_chunks == 7
        assert isinstance(got[-1], InferenceResult)


@in_loop
async def test_a_late_joiner_replays_the_stream_so_far_and_history_is_bounded() -> None:
    hub = WaiterHub(history_max_streams=2)
    hub.publish_chunk(a_chunk("r1", 0))
    hub.publish_chunk(a_chunk("r1", 1))
    with hub.waiting("acme", "r1", replay=True) as late:
        assert [(await late.next(1.0)).seq for _ in range(2)] == [0, 1]  # type: ignore[union-attr]
    # Another tenant asking for the same id replays nothing.
    with hub.waiting("beta", "r1", replay=True) as other:
        assert await other.next(0.01) is None
    hub.publish_chunk(a_chunk("r2", 0))
    hub.publish_chunk(a_chunk("r3", 0))  # three streams: the oldest (r1) is forgotten
    with hub.waiting("acme", "r1", replay=True) as later:
        assert await later.next(0.01) is None
    hub.publish_result(a_result("r2"))
    hub.publish_result(a_result("r3"))
    assert hub.history_bytes == 0  # a stream's history goes with its result


def test_history_is_bounded_in_bytes() -> None:
    hub = WaiterHub(history_max_bytes=10_000)
    for seq in range(1_000):
        hub.publish_chunk(a_chunk(f"r{seq}", 0, delta="x" * 500))
    assert 0 < hub.history_bytes <= 10_000


def test_chunk_tracker_tells_new_repeated_restarted_and_gapped_chunks() -> None:
    tracker = ChunkTracker()
    assert tracker.accept(a_chunk(seq=0)) is ChunkOrder.NEW
    assert tracker.accept(a_chunk(seq=1)) is ChunkOrder.NEW
    assert tracker.accept(a_chunk(seq=1)) is ChunkOrder.REPEAT
    assert tracker.accept(a_chunk(seq=5)) is ChunkOrder.GAP  # chunks 2-4 were lost
    assert tracker.accept(a_chunk(seq=6)) is ChunkOrder.NEW
    # Another dispatcher redoing the same attempt after a crash: the answer starts over.
    assert tracker.accept(a_chunk(seq=0, dispatcher_id="d2")) is ChunkOrder.RESTART
    assert tracker.accept(a_chunk(seq=1, dispatcher_id="d2")) is ChunkOrder.NEW
    assert tracker.accept(a_chunk(seq=0, dispatcher_id="d2", attempt=2)) is ChunkOrder.RESTART
    assert tracker.accept(a_chunk(seq=0, dispatcher_id="d2", attempt=2)) is ChunkOrder.RESTART


def test_a_late_joiner_may_start_anywhere_but_a_caller_from_the_start_sees_a_lost_first_chunk() -> None:
    assert ChunkTracker().accept(a_chunk(seq=3)) is ChunkOrder.NEW
    from_start = ChunkTracker(from_start=True)
    assert from_start.accept(a_chunk(seq=1)) is ChunkOrder.GAP
    assert from_start.accept(a_chunk(seq=2)) is ChunkOrder.NEW
    assert ChunkTracker(from_start=True).accept(a_chunk(seq=0)) is ChunkOrder.NEW


@in_loop
async def test_a_caller_just_after_its_result_went_by_is_answered_at_once_within_a_bound() -> None:
    hub = WaiterHub(recent_max_bytes=4_000)
    hub.publish_result(a_result("gone-by", output="early"))
    with hub.waiting("acme", "gone-by", chunks=False) as late, hub.waiting("beta", "gone-by") as other:
        result = await late.result(0)
        assert result is not None and result.output == "early"
        assert await other.result(0.01) is None  # another tenant's id stays unknown
    for n in range(50):
        hub.publish_result(a_result(f"r{n}", output="x" * 500))
    with hub.waiting("acme", "gone-by") as forgotten:
        assert await forgotten.result(0.01) is None  # the oldest went first: memory stays bounded
    with hub.waiting("acme", "r49") as latest:
        assert await latest.result(0) is not None


def test_a_request_is_followed_only_while_a_waiter_wants_its_chunks() -> None:
    hub = WaiterHub()
    with hub.waiting("acme", "r1", chunks=False):
        assert not hub.follows("r1"), "a long poll wants the result only: its chunks need no decoding"
        with hub.waiting("acme", "r1"), hub.waiting("beta", "r1"):
            assert hub.follows("r1")
        assert not hub.follows("r1"), "followed no more once every chunk waiter left"
    assert not hub.follows("r2")


@in_loop
async def test_an_unfollowed_chunk_is_kept_undecoded_and_a_late_joiner_of_its_tenant_gets_it() -> None:
    hub = WaiterHub()
    value = chunk_codec().encode(fakes.a_chunk("r1", 0, tenant="acme", delta="Hel"))
    with hub.waiting("acme", "r2"):
        assert hub.kept_unfollowed(fakes.FakeRecord(value, 0, key=b"r1")), "nobody follows r1"
        assert not hub.kept_unfollowed(fakes.FakeRecord(value, 1, key=b"r2")), "r2's must be decoded"
    assert not hub.kept_unfollowed(fakes.FakeRecord(value, 2)), "no key: cannot be told"
    with hub.waiting("acme", "r1", replay=True) as late, hub.waiting("beta", "r1", replay=True) as other:
        chunk = await late.next(0)
        assert chunk is not None and not isinstance(chunk, InferenceResult) and chunk.delta == "Hel"
        assert await other.next(0.01) is None, "another tenant's replay is empty"
    no_history = WaiterHub(history_max_bytes=0)
    assert no_history.kept_unfollowed(fakes.FakeRecord(value, 0, key=b"r1"))
    with no_history.waiting("acme", "r1", replay=True) as late:
        assert await late.next(0.01) is None, "a hub without history (ingest's) keeps nothing"


def test_watchers_learn_when_chunks_are_first_wanted_and_when_no_more() -> None:
    hub = WaiterHub()
    seen: list[int] = []
    hub.watch_following(lambda: seen.append(hub.following))
    with hub.waiting("acme", "r1", chunks=False):
        assert hub.following == 0 and seen == [], "a long poll wants no chunks"
        with hub.waiting("acme", "r1"), hub.waiting("beta", "r2"):
            assert hub.following == 2
        assert hub.following == 0
    with pytest.raises(RuntimeError), hub.waiting("acme", "r3"):
        raise RuntimeError("the caller went away")
    # Told at 0 -> 1 and 1 -> 0 only, however the waiters left.
    assert seen == [1, 0, 1, 0]
