"""Intake on fakes: the read-ahead bound and its rewind, poison, expiry at intake, held-back retries."""

from __future__ import annotations

import asyncio
import time

from inferq.dispatcher.consumer import Partition
from inferq.messaging.records import Status
from tests.support.clock import ManualClock
from tests.support.dispatcher_fakes import encoded, rig, running
from tests.support.kafka import a_request
from tests.support.loop import in_loop
from tests.support.waiting import eventually


@in_loop
async def test_the_read_ahead_bound_holds_exactly_and_the_partition_is_rewound() -> None:
    chats = [a_request("HIGH", deadline_ms=60_000) for _ in range(10)]

    async with running(rig(budget=1, readahead_per_tier=3)) as r:
        r.backend.hold()  # the one token stays taken: the read-ahead fills up behind it
        high = r.partition("HIGH")
        for chat in chats:
            r.consumer.produce(high, encoded(chat))
        await eventually(lambda: r.dispatcher.health()["held_by_tier"]["HIGH"] == 3, "a full read-ahead")
        await asyncio.sleep(0.1)  # several fetch rounds: nothing more may come in
        assert r.backend.in_flight == 1
        assert r.dispatcher.health()["held_by_tier"]["HIGH"] == 3
        # One running, three waiting: the partition is rewound to the fifth record and paused.
        assert r.consumer.position(high) == 4
        assert (high, 4) in r.consumer.seeks
        assert high in r.consumer.paused()

        r.backend.release()
        await eventually(lambda: len(r.results()) == 10, "every outcome")
        await eventually(lambda: r.consumer.committed_offset(high) == 10, "the commit to the end")
        assert high not in r.consumer.paused()
        assert {res.status for res in r.results().values()} == {Status.OK}


@in_loop
async def test_a_poison_record_is_dead_lettered_and_never_blocks_its_partition() -> None:
    before, after = a_request("MEDIUM"), a_request("MEDIUM")

    async with running(rig()) as r:
        medium = r.partition("MEDIUM")
        r.consumer.produce(medium, encoded(before))
        r.consumer.produce(medium, b"not avro at all")
        r.consumer.produce(medium, encoded(after))
        await eventually(lambda: len(r.results()) == 2, "both valid requests answered")
        await eventually(lambda: r.consumer.committed_offset(medium) == 3, "the commit past the poison")
        [letter] = r.producer.on(r.topics.dlq)
        assert letter.value == b"not avro at all"
        assert letter.headers["inferq.source.offset"] == b"1"
        assert b"Avro single-object marker" in letter.headers["inferq.error"]
        assert len(r.backend.models) == 2


@in_loop
async def test_poison_behind_a_running_call_is_dead_lettered_but_not_committed_past_the_call() -> None:
    slow = a_request("MEDIUM")

    async with running(rig()) as r:
        r.backend.hold()
        medium = r.partition("MEDIUM")
        r.consumer.produce(medium, encoded(slow))
        r.consumer.produce(medium, b"\x00garbage")
        await eventually(lambda: len(r.producer.on(r.topics.dlq)) == 1, "the dead letter")
        await asyncio.sleep(0.1)  # several commit intervals
        assert r.consumer.committed_offset(medium) in (None, 0), "committed past a running call"
        r.backend.release()
        await eventually(lambda: r.consumer.committed_offset(medium) == 2, "the commit after the call")


@in_loop
async def test_a_request_past_its_deadline_is_answered_expired_at_intake_without_a_call() -> None:
    now = int(time.time() * 1000)
    late = a_request("HIGH", created_at_ms=now - 10_000, expire_at_ms=now - 5_000)
    fresh = a_request("HIGH")

    async with running(rig()) as r:
        r.consumer.produce(r.partition("HIGH"), encoded(late))
        r.consumer.produce(r.partition("HIGH"), encoded(fresh))
        await eventually(lambda: len(r.results()) == 2, "both answered")
        results = r.results()
        assert results[late.request_id].status == Status.EXPIRED
        assert results[late.request_id].dispatched_at_ms is None
        assert results[fresh.request_id].status == Status.OK
        assert len(r.backend.models) == 1


@in_loop
async def test_a_retry_that_is_not_due_holds_its_partition_back_until_it_is() -> None:
    clock = ManualClock()
    due_in_ms = 300
    retry = a_request("MEDIUM", deadline_ms=60_000).retry(not_before_ms=clock() + due_in_ms)

    async with running(rig(clock_ms=clock)) as r:
        retries = Partition(r.topics.retry, 0)
        r.consumer.produce(retries, encoded(retry))
        await eventually(lambda: retries in r.consumer.paused(), "the retry partition held back")
        assert r.consumer.position(retries) == 0  # rewound to the record that is not due
        # The hold-back timer runs out while the clock stands still: read again, held back again.
        await eventually(lambda: r.consumer.seeks.count((retries, 0)) >= 2, "held back a second time")
        assert r.backend.models == []
        clock.advance(due_in_ms)
        await eventually(lambda: len(r.results()) == 1, "the retry answered once due")
        result = r.results()[retry.request_id]
        assert result.dispatched_at_ms is not None
        assert retry.not_before_ms is not None
        assert result.dispatched_at_ms >= retry.not_before_ms
        assert result.attempts == 2
        await eventually(lambda: r.consumer.committed_offset(retries) == 1, "the retry committed")
        assert retries not in r.consumer.paused()
