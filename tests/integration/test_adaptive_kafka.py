"""The effective budget follows the simulated backend: cut on overload and on slowness, then restored."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest

from tests.support.inprocess import running_dispatcher, sim_backend
from tests.support.kafka import a_request, produce_requests
from tests.support.waiting import eventually

pytestmark = pytest.mark.kafka


async def set_faults(url: str, **faults: object) -> None:
    async with httpx.AsyncClient() as client:
        (await client.post(f"{url}/admin/faults", json=faults)).raise_for_status()


async def steady_load(bootstrap: str, topic: str) -> None:
    while True:
        await asyncio.to_thread(produce_requests, bootstrap, topic, [a_request("HIGH") for _ in range(10)])
        await asyncio.sleep(0.1)


def test_budget_is_cut_on_outage_and_on_slowness_and_restored(kafka_settings):
    topic = kafka_settings.topics.requests_by_name("HIGH")
    seen: dict[str, int] = {}

    async def scenario():
        async with (
            sim_backend(speed=10.0) as url,
            running_dispatcher(kafka_settings, url, budget=10, adaptive_window_s=0.5) as dispatcher,
        ):
            load = asyncio.create_task(steady_load(kafka_settings.bootstrap_servers, topic))
            try:
                await asyncio.sleep(1.5)  # healthy windows: baselines are learnt
                seen["healthy"] = dispatcher.effective_budget
                await set_faults(url, outage=True)
                await eventually(
                    lambda: dispatcher.effective_budget,
                    "the budget cut by the outage",
                    10,
                    interval_s=0.05,
                    done=lambda b: b <= 7,
                )
                seen["outage"] = dispatcher.effective_budget
                await set_faults(url, outage=False)
                await eventually(
                    lambda: dispatcher.effective_budget,
                    "the budget restored after the outage",
                    20,
                    interval_s=0.05,
                    done=lambda b: b == 10,
                )
                seen["recovered"] = dispatcher.effective_budget
                await set_faults(url, degradation=2.5)  # every call 2.5x slower
                await eventually(
                    lambda: dispatcher.effective_budget,
                    "the budget cut by slow calls",
                    20,
                    interval_s=0.05,
                    done=lambda b: b <= 5,
                )
                seen["slow"] = dispatcher.effective_budget
                await set_faults(url, degradation=1.0)
                await eventually(
                    lambda: dispatcher.effective_budget,
                    "the budget restored after slow calls",
                    30,
                    interval_s=0.05,
                    done=lambda b: b == 10,
                )
                seen["restored"] = dispatcher.effective_budget
            finally:
                load.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await load

    asyncio.run(scenario())
    assert seen["healthy"] == 10
    assert seen["outage"] <= 7
    assert seen["recovered"] == 10
    assert seen["slow"] <= 5
    assert seen["restored"] == 10
