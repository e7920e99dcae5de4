"""The effective budget follows the simulated backend: cut on overload and on slowness, then restored."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
import pytest

from tests.support.inprocess import running_dispatcher, sim_backend
from tests.support.kafka import a_request, produce_requests

pytestmark = pytest.mark.kafka


async def set_faults(url: str, **faults: object) -> None:
    async with httpx.AsyncClient() as client:
        (await client.post(f"{url}/admin/faults", json=faults)).raise_for_status()


async def steady_load(bootstrap: str, topic: str) -> None:
    while True:
        await asyncio.to_thread(produce_requests, bootstrap, topic, [a_request("HIGH") for _ in range(10)])
        await asyncio.sleep(0.1)


async def wait_for(predicate, timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.05)


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
                await wait_for(lambda: dispatcher.effective_budget <= 7, 10)
                seen["outage"] = dispatcher.effective_budget
                await set_faults(url, outage=False)
                await wait_for(lambda: dispatcher.effective_budget == 10, 20)
                seen["recovered"] = dispatcher.effective_budget
                await set_faults(url, degradation=2.5)  # every call 2.5x slower
                await wait_for(lambda: dispatcher.effective_budget <= 5, 20)
                seen["slow"] = dispatcher.effective_budget
                await set_faults(url, degradation=1.0)
                await wait_for(lambda: dispatcher.effective_budget == 10, 30)
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
