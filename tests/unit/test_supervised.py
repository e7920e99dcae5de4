"""SupervisedTask: a service's long-running task, logged when it ends by itself, stopped within a bound."""

from __future__ import annotations

import asyncio
import logging

import pytest

from inferq.supervised import SupervisedTask
from tests.support.loop import in_loop

log = logging.getLogger("inferq.test-supervised")


def _task(stop_timeout_s: float = 1.0) -> SupervisedTask:
    return SupervisedTask(
        "feeder", ended="feeder stopped; /healthz answers 503", stop_timeout_s=stop_timeout_s, log=log
    )


@in_loop
async def test_a_task_that_ends_by_itself_is_logged_with_its_error_and_reads_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def breaks() -> None:
        raise RuntimeError("the feed broke")

    task = _task()
    task.start(breaks())
    await asyncio.sleep(0.01)
    assert task.failed
    assert "feeder stopped; /healthz answers 503" in caplog.text
    assert "the feed broke" in caplog.text
    await task.stop()
    assert not task.failed and not task.started


@in_loop
async def test_a_stopped_task_is_cancelled_quietly_and_can_start_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cancelled = asyncio.Event()

    async def runs() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            cancelled.set()

    task = _task()
    task.start(runs())
    await asyncio.sleep(0)
    assert task.started and not task.failed
    await task.stop()
    assert cancelled.is_set()
    assert not task.started
    assert caplog.text == ""
    task.start(runs())
    assert task.started
    await task.stop()


def test_start_twice_runs_the_work_once() -> None:
    async def scenario() -> None:
        runs = 0

        async def counted() -> None:
            nonlocal runs
            runs += 1
            await asyncio.sleep(60)

        task = _task()
        task.start(counted())
        task.start(counted())  # closed unrun: no "never awaited" warning either (filterwarnings = error)
        await asyncio.sleep(0.01)
        assert runs == 1
        await task.stop()

    asyncio.run(scenario())


@in_loop
async def test_stop_is_bounded_when_the_task_holds_on_past_its_cancel(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # ignores the cancel (a bug in the work, not in the service's shutdown)

    task = _task(stop_timeout_s=0.2)
    task.start(stubborn())
    await asyncio.sleep(0)
    async with asyncio.timeout(5):
        await task.stop()
    assert "feeder did not stop within 0.2 s of its cancel" in caplog.text
    release.set()
    await asyncio.sleep(0.01)  # it ends now: nothing left pending


def test_a_stop_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="stop_timeout_s must be > 0"):
        SupervisedTask("x", ended="x", stop_timeout_s=0, log=log)
