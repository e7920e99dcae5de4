"""A request record read twice (a MirrorMaker re-copy, a resend): run once when the first was
answered OK here, run again in every case the rule leaves out (`services/dispatcher/answered.py`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inferq.dispatcher.answered import RecentlyAnswered
from inferq.messaging.records import Status
from tests.support.dispatcher_fakes import encoded, rig, running
from tests.support.kafka import a_request
from tests.support.loop import in_loop
from tests.support.waiting import eventually


@in_loop
async def test_a_copy_of_a_request_answered_ok_is_not_run_again_and_its_offset_commits() -> None:
    chat, later = a_request("HIGH"), a_request("HIGH")

    async with running(rig()) as r:
        high = r.partition("HIGH")
        r.consumer.produce(high, encoded(chat))
        await eventually(lambda: chat.request_id in r.results(), "the first outcome")
        r.consumer.produce(high, encoded(chat))  # the same record again, at the next offset
        r.consumer.produce(high, encoded(later))
        await eventually(lambda: later.request_id in r.results(), "the request behind the copy")
        await eventually(lambda: r.consumer.committed_offset(high) == 3, "the commit past the copy")
        assert len(r.backend.models) == 2  # chat once, later once
        assert len(r.producer.on(r.topics.results)) == 2  # no second outcome for the copy


@in_loop
async def test_the_same_id_of_another_tenant_or_for_another_reply_topic_runs() -> None:
    chat = a_request("HIGH")
    other_tenant = replace(chat, tenant="someone-else")
    other_topic = replace(chat, reply_to="unit.results.eu")

    async with running(rig()) as r:
        high = r.partition("HIGH")
        r.consumer.produce(high, encoded(chat))
        await eventually(lambda: chat.request_id in r.results(), "the first outcome")
        r.consumer.produce(high, encoded(other_tenant))
        r.consumer.produce(high, encoded(other_topic))
        await eventually(lambda: r.consumer.committed_offset(high) == 3, "all three handled")
        assert len(r.backend.models) == 3
        assert len(r.producer.on(r.topics.results)) == 2
        assert r.results("unit.results.eu")[chat.request_id].status is Status.OK


@in_loop
async def test_a_copy_read_while_the_first_still_runs_runs_too() -> None:
    """The rule's documented bound: only an answer already written stops a copy."""
    chat = a_request("HIGH")

    async with running(rig()) as r:
        r.backend.hold()
        high = r.partition("HIGH")
        r.consumer.produce(high, encoded(chat))
        r.consumer.produce(high, encoded(chat))
        await eventually(lambda: r.backend.in_flight == 2, "both copies called")
        r.backend.release()
        await eventually(lambda: r.consumer.committed_offset(high) == 2, "both committed")


@in_loop
async def test_a_copy_of_a_request_that_expired_runs_again() -> None:
    """Only OK answers are remembered: an EXPIRED (or FAILED) request sent again is tried again."""
    gone = a_request("HIGH", deadline_ms=-1_000)

    async with running(rig()) as r:
        high = r.partition("HIGH")
        r.consumer.produce(high, encoded(gone))
        await eventually(lambda: gone.request_id in r.results(), "the EXPIRED outcome")
        again = replace(gone, expire_at_ms=gone.expire_at_ms + 120_000)
        r.consumer.produce(high, encoded(again))
        await eventually(lambda: len(r.backend.models) == 1, "the resend called")
        await eventually(lambda: r.consumer.committed_offset(high) == 2, "both committed")


def test_recently_answered_forgets_the_oldest_first() -> None:
    answered = RecentlyAnswered(capacity=2)
    answered.add("t", "a", "r")
    answered.add("t", "b", "r")
    answered.add("t", "a", "r")  # seen again: now the newest
    answered.add("t", "c", "r")
    assert [answered.contains("t", rid, "r") for rid in "abc"] == [True, False, True]
    assert len(answered) == 2
    assert not answered.contains("u", "a", "r") and not answered.contains("t", "a", "other")
    with pytest.raises(ValueError, match="capacity"):
        RecentlyAnswered(capacity=0)
