"""The dispatcher and the simulated backend run inside the test's event loop, against the real broker."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx

from inferq.dispatcher.bootstrap import Dispatcher, bootstrap
from inferq.dispatcher.settings import DispatcherSettings
from inferq.messaging.kafka_config import KafkaSettings
from inferq.serving import EmbeddedServer, uvicorn_config
from inferq.tools.simbackend.app import create_app as create_backend
from inferq.tools.simbackend.settings import SimBackendSettings
from tests.support.waiting import eventually


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def sim_backend(**settings: Any) -> AsyncIterator[str]:
    """The simulated backend served on a free port; yields its base URL."""
    port = free_port()
    server = EmbeddedServer(uvicorn_config(create_backend(SimBackendSettings(**settings)), "127.0.0.1", port))
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:
                await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait({task}, timeout=5)


async def backend_stats(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as client:
        stats: dict[str, Any] = (await client.get(f"{url}/stats")).json()
        return stats


async def until_in_flight(url: str, calls: int, timeout_s: float = 20.0) -> None:
    """Until the simulated backend at `url` runs at least `calls` calls at once."""
    await eventually(
        lambda: backend_stats(url),
        f"{calls} calls in flight",
        timeout_s,
        interval_s=0.02,
        done=lambda stats: stats["in_flight"] >= calls,
    )


@contextlib.asynccontextmanager
async def running_dispatcher(
    kafka: KafkaSettings, backend_url: str, **overrides: Any
) -> AsyncIterator[Dispatcher]:
    """A dispatcher in a fresh group, running until the block ends, then stopped as SIGTERM would."""
    # A pinned window: the tests must not depend on the hour they run at.
    overrides = {"schedule_pin": "normal"} | overrides
    settings = DispatcherSettings(
        kafka=kafka,
        group_id=f"{kafka.topic_prefix}-dispatcher",
        dispatcher_id="test-dispatcher",
        backend_url=f"{backend_url}/v1",
        **overrides,
    )
    dispatcher = bootstrap(settings)
    task = asyncio.create_task(dispatcher.run())
    try:
        async with asyncio.timeout(30):
            while dispatcher.health()["assigned"] == 0:
                if task.done():
                    task.result()
                await asyncio.sleep(0.05)
        yield dispatcher
    finally:
        dispatcher.request_stop()
        async with asyncio.timeout(40):
            await task


@contextlib.asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    """An ASGI app (its lifespan included) served by uvicorn on a free port in this event loop, as
    the services serve; yields its base URL. Stopped, lifespan shutdown included, when the block ends."""
    port = free_port()
    server = EmbeddedServer(uvicorn_config(app, "127.0.0.1", port))
    task = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(20):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("the server stopped before it started")
                await asyncio.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait({task}, timeout=10)
