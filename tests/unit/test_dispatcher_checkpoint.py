"""The checkpoint on fakes: commits never run ahead of durable outcomes, revoked partitions are
committed inside the rebalance, a refused commit is retried, every assigned partition is committed."""

from __future__ import annotations

import asyncio

from inferq.dispatcher.consumer import CommitPoint, Partition
from inferq.messaging.commit_metadata import parse as parse_metadata
from tests.support.dispatcher_fakes import encoded, rig, running
from tests.support.kafka import a_request
from tests.support.loop import in_loop
from tests.support.waiting import eventually


@in_loop
async def test_commits_never_run_ahead_of_durable_outcomes() -> None:
    requests = [a_request("HIGH") for _ in range(3)]

    async with running(rig()) as r:
        r.producer.hold()  # the broker does not acknowledge any outcome yet
        high = r.partition("HIGH")
        for request in requests:
            r.consumer.produce(high, encoded(request))
        await eventually(lambda: len(r.backend.models) == 3, "the three calls made")
        await asyncio.sleep(0.1)  # five commit intervals
        assert r.consumer.committed_offset(high) in (None, 0), "committed before the outcome was acked"
        r.producer.release()
        await eventually(lambda: r.consumer.committed_offset(high) == 3, "the commit after the acks")


@in_loop
async def test_offsets_done_beyond_a_running_call_travel_in_the_commit_metadata() -> None:
    head = a_request("LOW", deadline_ms=60_000, model="slow-model")
    rest = [a_request("LOW", deadline_ms=60_000) for _ in range(3)]

    async with running(rig(schedule_pin="night")) as r:
        low = r.partition("LOW")
        r.backend.hold("slow-model")
        for request in [head, *rest]:
            r.consumer.produce(low, encoded(request))
        await eventually(lambda: len(r.results()) == 3, "the three quick ones answered")
        # The head still runs: the commit stays at it, and says 1-3 are done beyond it, so a
        # next owner would skip them rather than call the LLM again.
        await eventually(lambda: r.consumer.group_commits.get(low) == CommitPoint(0, "v2:1-3;"), "metadata")
        assert parse_metadata(r.consumer.group_commits[low].metadata, 0) == {1, 2, 3}
        r.backend.release()
        await eventually(lambda: r.consumer.group_commits.get(low) == CommitPoint(4, ""), "the end")


def test_revoked_partitions_are_committed_inside_the_rebalance() -> None:
    chats = [a_request("HIGH") for _ in range(3)]

    async def scenario() -> None:
        # The commit loop is slow: only the revocation can commit within the test.
        async with running(rig(commit_interval_s=60.0, budget=1, readahead_per_tier=5)) as r:
            high = r.partition("HIGH")
            for chat in chats:
                r.consumer.produce(high, encoded(chat))
            await eventually(lambda: len(r.results()) == 3, "three outcomes")
            r.backend.hold()
            waiting = [a_request("HIGH") for _ in range(3)]
            for chat in waiting:
                r.consumer.produce(high, encoded(chat))
            await eventually(lambda: r.dispatcher.health()["waiting"] == 2, "two waiting behind a call")
            assert r.consumer.committed_offset(high) is None  # the commit loop has not run yet

            others = set(r.consumer.logs) - {high}
            await r.consumer.rebalance(others)

            # Committed to the first offset not yet answered, before the partition left.
            assert r.consumer.committed_offset(high) == 3
            # Its waiting requests are the new owner's to read again; nothing of it is held here.
            assert r.dispatcher.health()["waiting"] == 0
            r.backend.release()

    asyncio.run(scenario())


@in_loop
async def test_a_refused_commit_is_kept_and_sent_with_the_next_one() -> None:
    first, second, third = (a_request("MEDIUM") for _ in range(3))

    async with running(rig()) as r:
        medium = r.partition("MEDIUM")
        r.consumer.produce(medium, encoded(first))
        await eventually(lambda: r.consumer.committed_offset(medium) == 1, "the first commit")
        r.consumer.refuse_commits = 3  # a rebalance in progress, say
        r.consumer.produce(medium, encoded(second))
        await eventually(lambda: r.consumer.committed_offset(medium) == 2, "the commit after the refusals")
        assert r.consumer.refuse_commits == 0
        # The committer is still alive: later work is committed too.
        r.consumer.produce(medium, encoded(third))
        await eventually(lambda: r.consumer.committed_offset(medium) == 3, "the next commit")


@in_loop
async def test_every_assigned_partition_is_committed_even_one_that_never_had_a_record() -> None:
    async with running(rig()) as r:
        r.consumer.produce(r.partition("HIGH"), encoded(a_request("HIGH")))
        # The group's lag must read 0 on every partition once the work is done, not "unknown".
        await eventually(
            lambda: all(r.consumer.committed_offset(p) == len(log) for p, log in r.consumer.logs.items()),
            "every partition committed at its end",
        )


@in_loop
async def test_a_partition_handed_back_by_a_rebalance_keeps_its_running_call() -> None:
    brief = a_request("LOW", deadline_ms=60_000)

    async with running(rig(schedule_pin="night")) as r:
        low = r.partition("LOW")
        r.backend.hold()
        r.consumer.produce(low, encoded(brief))
        await eventually(lambda: r.backend.in_flight == 1, "the call running")
        await r.consumer.rebalance(set(r.consumer.logs))  # everything revoked, then handed back
        await asyncio.sleep(0.1)  # fetched again from the commit, not called again
        r.backend.release()
        await eventually(lambda: r.consumer.committed_offset(low) == 1, "the commit after the call")
        assert len(r.backend.models) == 1, "the running call was made again"
        assert Partition(r.topics.retry, 0) in r.consumer.assignment()
