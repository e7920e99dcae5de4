"""The results service's chunk reader alone: a fake chunk feed and the real hub. It reads only while
a waiter wants chunks, stops after the grace, starts each time from the replay window, and decodes
only the chunks of followed requests (the others kept undecoded for a late joiner)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from inferq.delivery.hub import WaiterHub
from inferq.messaging.codec import chunk_codec
from inferq.results.chunk_reader import ChunkReader, watch_chunk_reader
from tests.support import fakes
from tests.support.fakes import DyingResultFeed, FakeResultFeed, InMemoryMetrics, labels
from tests.support.loop import in_loop_within
from tests.support.waiting import eventually

a_chunk = functools.partial(fakes.a_chunk, tenant="acme")
NOW_MS = 1_000_000_000


@dataclass
class Feeds:
    """The fake chunk feed every start gets, and the `from_ms` of each start."""

    feed: FakeResultFeed = field(default_factory=lambda: FakeResultFeed("inferq.chunks"))
    from_ms: list[int] = field(default_factory=list)

    def make(self, from_ms: int) -> FakeResultFeed:
        self.from_ms.append(from_ms)
        return self.feed


@asynccontextmanager
async def reading(
    hub: WaiterHub, feeds: Feeds, *, grace_s: float = 0.2, clock: list[int] | None = None
) -> AsyncIterator[ChunkReader]:
    now = clock if clock is not None else [NOW_MS]
    reader = ChunkReader(feeds.make, hub, replay_s=120, grace_s=grace_s, clock_ms=lambda: now[0])
    await reader.start()
    try:
        yield reader
    finally:
        await reader.stop()


async def until_running(reader: ChunkReader, running: bool) -> None:
    await eventually(lambda: reader.running, f"running={running}", 5, done=lambda r: r is running)


@in_loop_within(30)
async def test_reading_starts_with_the_first_chunk_follower_and_stops_after_the_grace() -> None:
    hub, feeds = WaiterHub(), Feeds()
    async with reading(hub, feeds) as reader:
        await asyncio.sleep(0.1)
        idle_events = list(feeds.feed.events)
        with hub.waiting("acme", "p1", chunks=False):
            await asyncio.sleep(0.1)
            for_a_long_poll = list(feeds.feed.events)
        with hub.waiting("acme", "s1"), hub.waiting("beta", "s2"):
            await until_running(reader, True)
        # Both left: the reader goes on for the grace (0.2 s), then stops its feed.
        assert reader.running
        await until_running(reader, False)
        assert feeds.feed.events == ["feed.start", "feed.stop"]
        assert reader.starts == 1
    assert idle_events == [], "nobody follows events: no chunk topic is read"
    assert for_a_long_poll == [], "a long poll wants the result only"


@in_loop_within(30)
async def test_a_follower_back_within_the_grace_keeps_the_same_reading_and_a_later_one_restarts_it() -> None:
    hub, feeds = WaiterHub(), Feeds()
    clock = [NOW_MS]
    async with reading(hub, feeds, grace_s=0.5, clock=clock) as reader:
        with hub.waiting("acme", "s1"):
            await until_running(reader, True)
        await asyncio.sleep(0.2)
        with hub.waiting("acme", "s1"):
            # Back within the grace, then there longer than it: the reading was never stopped.
            await asyncio.sleep(0.7)
            assert reader.running and reader.starts == 1
        await until_running(reader, False)
        clock[0] += 60_000
        with hub.waiting("acme", "s3"):
            await until_running(reader, True)
        assert reader.starts == 2
    assert feeds.feed.events == ["feed.start", "feed.stop", "feed.start", "feed.stop"]
    # Each start reads from the replay window (120 s) before it.
    assert feeds.from_ms == [NOW_MS - 120_000, NOW_MS + 60_000 - 120_000]


@in_loop_within(30)
async def test_only_followed_chunks_are_decoded_and_a_late_joiner_gets_the_answer_from_its_start() -> None:
    hub, feeds = WaiterHub(), Feeds()
    codec = chunk_codec()
    async with reading(hub, feeds) as reader:
        with hub.waiting("acme", "other"):
            await until_running(reader, True)
            # Written before anyone followed s1 (the replay window hands them out first).
            feeds.feed.push([codec.encode(a_chunk("s1", 0, delta="Hel"))], key="s1")
            feeds.feed.push([codec.encode(a_chunk("x", 0, delta="nobody's"))], key="x")
            await eventually(lambda: reader.records, "2 records read", 5, done=lambda n: n == 2)
            decoded_before = reader.decoded
            with (
                hub.waiting("acme", "s1", replay=True) as late,
                hub.waiting("beta", "s1", replay=True) as beta,
            ):
                feeds.feed.push([codec.encode(a_chunk("s1", 1, delta="lo"))], key="s1")
                feeds.feed.push([b"\x00not a chunk"], key="s1")
                await eventually(lambda: reader.records, "4 records read", 5, done=lambda n: n == 4)
                got = [item.delta for item in [await late.next(0), await late.next(0)] if item is not None]
                nothing_more = await late.next(0)
                theirs = await beta.next(0)
    assert decoded_before == 0, "no chunk is decoded while nobody follows its request"
    assert got == ["Hel", "lo"], "the late joiner gets the stream from its start"
    assert nothing_more is None, "the undecodable record is skipped"
    assert (reader.decoded, reader.kept_undecoded, reader.undecodable) == (1, 2, 1)
    assert theirs is None, "another tenant's follower of the same id gets none of acme's chunks"


@in_loop_within(30)
async def test_the_reader_reports_whether_it_runs_and_what_became_of_its_records() -> None:
    hub, feeds, metrics = WaiterHub(), Feeds(), InMemoryMetrics()
    async with reading(hub, feeds) as reader:
        watch_chunk_reader(metrics.meter, reader)
        idle = metrics.points("inferq_results_chunk_reader_running")
        with hub.waiting("acme", "s1"):
            await until_running(reader, True)
            feeds.feed.push([chunk_codec().encode(a_chunk("s1", 0))], key="s1")
            await eventually(lambda: reader.decoded, "a chunk decoded", 5)
            running = metrics.points("inferq_results_chunk_reader_running")
            records = metrics.points("inferq_results_chunk_records_total")
    assert idle == {frozenset(): 0}
    assert running == {frozenset(): 1}
    assert records[labels(handling="decoded")] == 1
    assert records[labels(handling="kept")] == 0


@in_loop_within(30)
async def test_a_reading_that_breaks_fails_the_reader_and_shutdown_stops_a_running_feed(caplog) -> None:
    caplog.set_level(logging.ERROR, logger="inferq.results")
    hub = WaiterHub()
    dying = DyingResultFeed("inferq.chunks")
    broken = ChunkReader(lambda _: dying, hub, replay_s=120, grace_s=30)
    await broken.start()
    feeds = Feeds()
    async with reading(hub, feeds, grace_s=30) as reader:
        with hub.waiting("acme", "s1"):
            await eventually(lambda: broken.failed, "the broken reader failed", 5)
            await until_running(reader, True)
        # Still within the grace: shutdown stops the feed.
    await broken.stop()
    assert "chunk reader stopped" in caplog.text
    assert dying.events == ["feed.start", "feed.stop"]
    assert feeds.feed.events == ["feed.start", "feed.stop"]


def test_a_negative_replay_or_grace_is_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        ChunkReader(Feeds().make, WaiterHub(), replay_s=-1, grace_s=30)
