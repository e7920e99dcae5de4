"""The dispatcher learns its backend's call times (issue 14 item 5): once chats have taken 2 s each
instead of the configured 0.5 s, a chat with 0.9 s left is answered EXPIRED without a call, as it
would be late anyway. The dispatcher's clock is a manual one: the calls' times are exact."""

from __future__ import annotations

import asyncio

import pytest

from inferq.messaging.records import Status
from tests.support.clock import ManualClock
from tests.support.dispatcher_fakes import encoded, rig, running
from tests.support.kafka import a_request
from tests.support.waiting import eventually


async def tight_chat_after_slow_ones(*, learn: bool) -> tuple[Status, int]:
    clock = ManualClock()
    r = rig(clock_ms=clock, learn_latency=learn)
    async with running(r):
        high = r.partition("HIGH")
        for _ in range(5):
            r.backend.hold()
            slow = a_request("HIGH", created_at_ms=clock(), expire_at_ms=clock() + 60_000)
            r.consumer.produce(high, encoded(slow))
            await eventually(lambda: r.backend.in_flight == 1, "the call running")
            clock.advance(2000)
            r.backend.release()
            await eventually(lambda: slow.request_id in r.results(), "its outcome")  # noqa: B023
        calls = len(r.backend.calls)
        tight = a_request("HIGH", created_at_ms=clock(), expire_at_ms=clock() + 900)
        r.consumer.produce(high, encoded(tight))
        await eventually(lambda: tight.request_id in r.results(), "the tight chat's outcome")
        return r.results()[tight.request_id].status, len(r.backend.calls) - calls


@pytest.mark.parametrize(("learn", "expected"), [(True, (Status.EXPIRED, 0)), (False, (Status.OK, 1))])
def test_early_drop_follows_the_calls_the_backend_answered(learn: bool, expected: tuple[Status, int]) -> None:
    assert asyncio.run(tight_chat_after_slow_ones(learn=learn)) == expected
