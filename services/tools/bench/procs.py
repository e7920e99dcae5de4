"""Processes the benchmarks start beside (or instead of) a whole `Pipeline`: the simulated backend,
dispatchers (probed or not), and their waits."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx

from inferq.dispatcher.bootstrap import Dispatcher, bootstrap
from inferq.dispatcher.settings import DispatcherSettings
from inferq.messaging.kafka_config import KafkaSettings
from inferq.tools.broker.broker import pick_free_ports
from inferq.tools.stack.process import ServiceProcess

SIM_MODELS = ("inferq-fast", "inferq-accurate", "inferq-cheap")


@contextlib.contextmanager
def sim_backend(log_file: Path, *args: str, ready_s: float = 60.0) -> Iterator[str]:
    """`inferq sim-backend` with `args` on a free port, logging to `log_file`; yields its base URL
    once it answers, and stops it when the block ends."""
    (port,) = pick_free_ports(1)
    sim = ServiceProcess(log_file.stem, ["sim-backend", "--port", str(port), *args], log_file)
    sim.start()
    try:
        sim.wait_http_ready(f"http://127.0.0.1:{port}/healthz", ready_s)
        yield f"http://127.0.0.1:{port}"
    finally:
        sim.stop()


@contextlib.asynccontextmanager
async def dispatcher_in_process(
    settings: DispatcherSettings, *, ready_s: float = 60.0
) -> AsyncIterator[Dispatcher]:
    """A dispatcher built by its own composition root and run on this event loop, yielded once it
    owns partitions; asked to stop, and awaited (bounded), when the block ends."""
    dispatcher = bootstrap(settings)
    task = asyncio.create_task(dispatcher.run())
    try:
        async with asyncio.timeout(ready_s):
            while dispatcher.health()["assigned"] == 0:
                if task.done():
                    task.result()  # it failed to start: its error, not a timeout
                await asyncio.sleep(0.1)
        yield dispatcher
    finally:
        dispatcher.request_stop()
        async with asyncio.timeout(60):
            await task


def every_model_latency(seconds: float) -> list[str]:
    """`inferq sim-backend` options giving every model the same latency."""
    return [arg for model in SIM_MODELS for arg in ("--latency", f"{model}={seconds:g}")]


def dispatcher_env(
    *, bootstrap: str, prefix: str, backend_url: str, budget: int, dispatcher_id: str, extra: dict[str, str]
) -> dict[str, str]:
    """A dispatcher's environment, named as `inferq.tools.stack.pipeline.Pipeline` names it."""
    return {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "INFERQ_TOPIC_PREFIX": prefix,
        "INFERQ_DISPATCHER_BACKEND_URL": backend_url,
        "INFERQ_BUDGET": str(budget),
        "INFERQ_DISPATCHER_GROUP_ID": f"{prefix}-dispatcher",
        "INFERQ_DISPATCHER_ID": dispatcher_id,
        **extra,
    }


def dispatcher_process(
    name: str,
    port: int,
    env: dict[str, str],
    log_dir: Path,
    *,
    fetch_log: Path | None = None,
    profile: Path | None = None,
) -> ServiceProcess:
    """`inferq dispatcher`, or the same dispatcher under `inferq bench probe-dispatcher` when its
    fetches are to be timed or its event loop profiled."""
    if fetch_log is None and profile is None:
        args = ["dispatcher", "--port", str(port)]
    else:
        args = ["bench", "probe-dispatcher", "--port", str(port)]
        if fetch_log is not None:
            args += ["--fetch-log", str(fetch_log)]
        if profile is not None:
            args += ["--profile", str(profile)]
    return ServiceProcess(name, args, log_dir / f"{name}.log", env=env)


def wait_exit(proc: ServiceProcess, timeout_s: float) -> int | None:
    """Wait (bounded) for a process that ends by itself; stopped with SIGTERM if it overruns."""
    deadline = time.monotonic() + timeout_s
    while proc.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc.stop()


def health(url: str) -> dict[str, object]:
    """A dispatcher's /healthz, or {} while it does not answer."""
    try:
        answer: dict[str, object] = httpx.get(f"{url}/healthz", timeout=1.0).json()
    except (httpx.HTTPError, ValueError):
        return {}
    return answer


def dispatcher_group(
    kafka: KafkaSettings,
    backend_url: str,
    size: int,
    *,
    budget: int,
    extra: dict[str, str],
    log_dir: Path,
    profile: Path | None = None,
) -> tuple[list[ServiceProcess], list[str]]:
    """`size` members of one dispatcher group on `kafka`'s topics (ids `<prefix>-d<i>`, logs in
    `log_dir/<prefix>`), not started, and their base URLs; with `profile`, the first under cProfile."""
    prefix = kafka.topic_prefix
    ports = pick_free_ports(size)
    procs = [
        dispatcher_process(
            f"dispatcher-{i}",
            port,
            dispatcher_env(
                bootstrap=kafka.bootstrap_servers,
                prefix=prefix,
                backend_url=f"{backend_url}/v1",
                budget=budget,
                dispatcher_id=f"{prefix}-d{i}",
                extra=extra,
            ),
            log_dir / prefix,
            profile=profile if i == 0 else None,
        )
        for i, port in enumerate(ports)
    ]
    return procs, [f"http://127.0.0.1:{port}" for port in ports]


def start_group(
    procs: list[ServiceProcess], urls: list[str], kafka: KafkaSettings, timeout_s: float = 120.0
) -> float:
    """Start the members and wait until they own every request partition of `kafka`'s topics between
    them, each at least one: a rebalance in the middle of a measurement would measure the group
    protocol, not the dispatcher. Returns the seconds it took."""
    topics = kafka.topics
    partitions = sum(s.partitions for s in topics.specs() if s.name in [*topics.all_requests, topics.retry])
    for proc in procs:
        proc.start()
    started = time.monotonic()
    owned: list[int] = []
    while time.monotonic() - started < timeout_s:
        dead = [p.name for p in procs if not p.alive()]
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited; see {procs[0].log_path.parent}")
        owned = [n if isinstance(n, int) else 0 for n in (health(u).get("assigned") for u in urls)]
        if min(owned) > 0 and sum(owned) == partitions:
            return time.monotonic() - started
        time.sleep(0.1)
    raise TimeoutError(f"dispatcher group not stable after {timeout_s:.0f} s (owned: {owned})")
