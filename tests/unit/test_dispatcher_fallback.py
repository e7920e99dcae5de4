"""Several backends through the whole dispatcher (fakes for its edges): a failing first backend's
traffic goes to the next one, and its failed probes do not cut the adaptive budget the next
backend now serves under."""

from __future__ import annotations

import asyncio
import time

from services.dispatcher.errors import BackendError
from services.messaging.records import Status
from services.messaging.tiers import Tier
from tests.support.dispatcher_fakes import HeldBackend, encoded, eventually, rig, running
from tests.support.kafka import a_request

BOTH = {t: ["default", "spare"] for t in Tier}


async def a_failing_primary_for(seconds: float) -> tuple[int, int, int, dict[str, Status]]:
    spare = HeldBackend()
    spare.release()
    r = rig(
        spares={"spare": spare},
        backends={"spare": {"url": "http://127.0.0.1:9/v1"}},  # its client replaced by `spare`
        tier_backends=BOTH,
        breaker_failures=2,
        breaker_open_s=0.1,  # a probe every 0.1 s, each failing
        adaptive=True,
        budget=10,
        max_attempts=2,  # a first attempt may probe; a retry (never a probe) stays on the retry topic here
        retry_base_backoff_s=0.01,
    )
    r.backend.release()
    r.backend.failure = BackendError("backend answered 503", retriable=True, status=503)
    lowest = 10
    sent: list[str] = []
    async with running(r):
        started = time.monotonic()
        n = 0
        while time.monotonic() - started < seconds:
            request = a_request("HIGH", messages=[{"role": "user", "content": f"c{n}"}])
            r.consumer.produce(r.partition("HIGH"), encoded(request))
            sent.append(request.request_id)
            n += 1
            lowest = min(lowest, r.dispatcher.effective_budget)
            await asyncio.sleep(0.02)
        # A request that failed on the first backend went to the retry topic, which this rig does not
        # read back: every other request has its outcome.
        await eventually(
            lambda: len(r.results()) + len(r.producer.on(r.topics.retry)) == len(sent),
            "every outcome",
            timeout_s=20,
        )
        lowest = min(lowest, r.dispatcher.effective_budget)
        circuits = r.dispatcher.health()["backends"]
    assert circuits["spare"] == "closed" and circuits["default"] in {"open", "half_open"}, circuits
    statuses = {rid: result.status for rid, result in r.results().items()}
    return len(r.backend.calls), len(spare.calls), lowest, statuses


def test_the_spare_serves_and_failed_probes_of_the_first_backend_leave_the_budget_alone():
    primary_calls, spare_calls, lowest, statuses = asyncio.run(a_failing_primary_for(2.5))
    assert set(statuses.values()) == {Status.OK}
    assert spare_calls == len(statuses)
    # Two failures opened it, then about one probe per 0.1 s: each failed, none cut the budget.
    assert primary_calls >= 2 + 5, primary_calls
    # One cut at most, for the failures before the breaker opened (the cut's cooldown is 1 s: the
    # probes of 2.5 s would have cut it twice more, 10 -> 7 -> 4 -> 2).
    assert lowest >= 7, lowest


def test_health_names_each_backends_circuit_and_one_backend_is_default_and_closed():
    async def circuits() -> object:
        r = rig()
        async with running(r):
            return r.dispatcher.health()["backends"]

    assert asyncio.run(circuits()) == {"default": "closed"}
