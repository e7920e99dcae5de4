"""A call whose request's deadline cut it keeps its token until the backend ends it: the backend (an
HTTP server, a real LLM API) goes on working on a call whose client went away, so a token given back
at the deadline would let the next start be one call more than the backend allows."""

from __future__ import annotations

import asyncio

from inferq.messaging.records import Status
from tests.support.dispatcher_fakes import Rig, encoded, rig, running
from tests.support.kafka import a_request
from tests.support.loop import in_loop
from tests.support.waiting import eventually


def tokens_in_use(r: Rig) -> int:
    return sum(r.pool.in_use().values())


@in_loop
async def test_a_call_cut_by_its_deadline_expires_at_once_and_keeps_its_token_until_the_backend_ends() -> (
    None
):
    r = rig(budget=3, backend_timeout_s=30.0)
    async with running(r):
        high = r.partition("HIGH")
        r.backend.hold()
        short = [a_request("HIGH", deadline_ms=1500) for _ in range(3)]
        for request in short:
            r.consumer.produce(high, encoded(request))
        await eventually(lambda: r.backend.in_flight == 3, "the three calls running")
        await eventually(lambda: len(r.results()) == 3, "the three outcomes")
        assert {res.status for res in r.results().values()} == {Status.EXPIRED}
        # Every outcome is written; the backend still runs the three calls.
        assert r.backend.in_flight == 3
        assert tokens_in_use(r) >= r.backend.in_flight
        later = a_request("HIGH", deadline_ms=60_000)
        r.consumer.produce(high, encoded(later))
        await asyncio.sleep(0.2)
        assert r.backend.in_flight == 3, "a fourth call started while the backend ran three"
        r.backend.release()
        await eventually(lambda: later.request_id in r.results(), "the next request once a call ended")
        assert r.results()[later.request_id].status == Status.OK
        await eventually(lambda: tokens_in_use(r) == 0, "every token back")


@in_loop
async def test_a_lingering_call_gives_its_token_back_after_the_backend_timeout() -> None:
    r = rig(budget=1, backend_timeout_s=3.0)
    async with running(r):
        r.backend.hold()
        request = a_request("HIGH", deadline_ms=1000)
        r.consumer.produce(r.partition("HIGH"), encoded(request))
        await eventually(lambda: r.backend.in_flight == 1, "the call running")
        await eventually(lambda: request.request_id in r.results(), "the outcome")
        assert tokens_in_use(r) == 1
        await eventually(lambda: tokens_in_use(r) == 0, "the token back at the backend timeout")
        assert r.backend.in_flight == 0


@in_loop
async def test_shutdown_cancels_lingering_calls_and_gives_their_tokens_back() -> None:
    r = rig(budget=2, backend_timeout_s=60.0, drain_timeout_s=0.2)
    async with running(r):
        r.backend.hold()
        request = a_request("HIGH", deadline_ms=1000)
        r.consumer.produce(r.partition("HIGH"), encoded(request))
        await eventually(lambda: r.backend.in_flight == 1, "the call running")
        await eventually(lambda: request.request_id in r.results(), "the outcome")
        assert r.backend.in_flight == 1
    request_id = request.request_id
    assert r.backend.in_flight == 0
    assert "pool.stop holding 0" in r.events
    assert r.results()[request_id].status == Status.EXPIRED


@in_loop
async def test_a_streamed_call_cut_by_its_deadline_holds_its_token_and_writes_no_more_chunks() -> None:
    r = rig(budget=1, backend_timeout_s=30.0)
    async with running(r):
        r.backend.hold()
        request = a_request("HIGH", deadline_ms=1000, stream=True)
        r.consumer.produce(r.partition("HIGH"), encoded(request))
        await eventually(lambda: r.backend.in_flight == 1, "the call running")
        await eventually(lambda: request.request_id in r.results(), "the outcome")
        assert r.results()[request.request_id].status == Status.EXPIRED
        assert tokens_in_use(r) == 1
        produced = len(r.producer.sent)
        r.backend.release()
        await eventually(lambda: tokens_in_use(r) == 0, "the token back once the stream ended")
        await asyncio.sleep(0.05)
        assert len(r.producer.sent) == produced, "chunks written after the outcome"
