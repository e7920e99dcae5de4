"""Several backends through the whole dispatcher (fakes for its edges): a failing first backend's
traffic goes to the next one, and its failed probes do not cut the adaptive budget the next
backend now serves under."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from inferq.dispatcher.errors import BackendError
from inferq.messaging.records import Status
from inferq.messaging.tiers import Tier
from tests.support.dispatcher_fakes import HeldBackend, Rig, encoded, rig, running
from tests.support.kafka import a_request
from tests.support.loop import in_loop
from tests.support.waiting import eventually

BOTH = {t: ["default", "spare"] for t in Tier}


def a_failing_primary(**overrides: Any) -> tuple[Rig, HeldBackend]:
    """A rig whose "default" backend answers every call 503 and whose "spare" answers at once; the
    breaker opens after 2 failures and probes every 0.1 s; `overrides` on top."""
    spare = HeldBackend()
    spare.release()
    r = rig(
        spares={"spare": spare},
        backends={"spare": {"url": "http://127.0.0.1:9/v1"}},  # its client replaced by `spare`
        breaker_failures=2,
        breaker_open_s=0.1,
        **overrides,
    )
    r.backend.release()
    r.backend.failure = BackendError("backend answered 503", retriable=True, status=503)
    return r, spare


async def a_failing_primary_for(seconds: float) -> tuple[int, int, int, dict[str, Status]]:
    r, spare = a_failing_primary(
        tier_backends=BOTH,
        adaptive=True,
        budget=10,
        max_attempts=2,  # a first attempt may probe; a retry (never a probe) stays on the retry topic here
        retry_base_backoff_s=0.01,
    )
    lowest = 10
    sent: list[str] = []
    async with running(r):
        started = time.monotonic()
        n = 0
        # Not a wait: traffic for a fixed `seconds`, the budget read as it goes.
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


@in_loop
async def test_health_names_each_backends_circuit_and_one_backend_is_default_and_closed():
    r = rig()
    async with running(r):
        assert r.dispatcher.health()["backends"] == {"default": "closed"}


async def a_primary_back_after_an_outage_with_one_attempt() -> tuple[int, int]:
    """Primary calls during a 503 outage and after it ends, with no retries (every request is on
    its last attempt)."""
    r, _ = a_failing_primary(tier_backends=BOTH, max_attempts=1)
    n = 0

    def send() -> None:
        nonlocal n
        request = a_request("HIGH", messages=[{"role": "user", "content": f"c{n}"}])
        r.consumer.produce(r.partition("HIGH"), encoded(request))
        n += 1

    async with running(r):
        for _ in range(2):
            send()
        await eventually(lambda: len(r.backend.calls) >= 2, "the failures that open the circuit")
        await eventually(lambda: len(r.results()) == 2, "their outcomes")
        during = len(r.backend.calls)
        r.backend.failure = None  # the outage ends
        started = time.monotonic()
        while len(r.backend.calls) == during and time.monotonic() - started < 2.0:
            send()
            await asyncio.sleep(0.02)
        await eventually(lambda: len(r.results()) == n, "every outcome")
    return during, len(r.backend.calls)


def test_with_one_attempt_in_all_a_backend_is_still_probed_and_its_traffic_comes_back():
    # Every request is on its last attempt, which is never the probe: unless one is, a backend whose
    # circuit opened would never be called again.
    during, after = asyncio.run(a_primary_back_after_an_outage_with_one_attempt())
    assert during == 2
    assert after > during


async def lowest_budget_with_low_on_a_failing_first_backend(seconds: float, *, until: int = 0) -> int:
    """The lowest adaptive budget while LOW, whose only backend is the first one, meets its 503s;
    HIGH has a spare (so the first backend's breaker opens and probes). Traffic for `seconds`, or
    less once the budget is at `until` or lower."""
    r, _ = a_failing_primary(
        tier_backends={Tier.HIGH: ["default", "spare"]},
        adaptive=True,
        budget=10,
        max_attempts=2,
        retry_base_backoff_s=0.01,
        # LOW borrows idle slots (lending was the default when this was written): under the ceilings
        # alone the first cut (10 -> 7) squeezes LOW's normal-hours ceiling of 2 to 0, LOW stops
        # calling, and no second cut comes.
        forecast_lending=True,
    )
    lowest = 10
    async with running(r):
        started = time.monotonic()
        n = 0
        # Not a wait: traffic for a fixed `seconds`, the budget read as it goes.
        while time.monotonic() - started < seconds and lowest > until:
            request = a_request("LOW", messages=[{"role": "user", "content": f"c{n}"}])
            r.consumer.produce(r.partition("LOW"), encoded(request))
            n += 1
            lowest = min(lowest, r.dispatcher.effective_budget)
            await asyncio.sleep(0.02)
        lowest = min(lowest, r.dispatcher.effective_budget)
    return lowest


def test_a_tier_with_no_other_backend_still_cuts_the_budget_on_its_backends_overload():
    # LOW has nowhere else to go: as with one backend, the adaptive budget is what backs off from
    # its failing backend, breaker open or not (a cut's cooldown is 1 s: 10 -> 7 -> 4 or lower).
    # Traffic until the second cut, within 15 s: a loaded machine may take longer than 2.5 s.
    lowest = asyncio.run(lowest_budget_with_low_on_a_failing_first_backend(15, until=4))
    assert lowest <= 4, lowest
