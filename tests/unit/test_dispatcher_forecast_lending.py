"""INFERQ_DISPATCHER_FORECAST_LENDING through the whole dispatcher (fakes for its edges, a manual clock): at
peak, with no chat for 10 s, briefs borrow every slot but the HIGH headroom (2 of 10);
without it they keep to LOW's peak ceiling of 1."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.clock import ManualClock
from tests.support.dispatcher_fakes import encoded, rig, running
from tests.support.kafka import a_request
from tests.support.waiting import eventually


async def briefs_running(*, lending: bool) -> int:
    clock = ManualClock()
    r = rig(clock_ms=clock, forecast_lending=lending, schedule_pin="peak", budget=10)
    async with running(r):
        analysis = a_request("MEDIUM", created_at_ms=clock(), expire_at_ms=clock() + 60_000)
        r.consumer.produce(r.partition("MEDIUM"), encoded(analysis))
        await eventually(lambda: analysis.request_id in r.results(), "the analysis answered")
        clock.advance(10_000)  # ten quiet seconds: the forecast has seen no chat
        r.backend.hold()
        for _ in range(12):
            brief = a_request("LOW", created_at_ms=clock(), expire_at_ms=clock() + 3_600_000)
            r.consumer.produce(r.partition("LOW"), encoded(brief))
        await eventually(lambda: r.backend.in_flight >= (8 if lending else 1), "briefs running")
        await asyncio.sleep(0.2)  # a start beyond that would have happened by now
        running_now = r.backend.in_flight
        r.backend.release()
        return running_now


@pytest.mark.parametrize(("lending", "expected"), [(True, 8), (False, 1)])
def test_briefs_borrow_idle_peak_slots_only_with_forecast_lending(lending: bool, expected: int) -> None:
    assert asyncio.run(briefs_running(lending=lending)) == expected
