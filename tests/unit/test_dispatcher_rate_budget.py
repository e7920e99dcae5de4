"""INFERQ_DISPATCHER_RATE_LIMITS and the backend's rate-limit headers through the whole dispatcher (fakes for
its edges, a manual clock): a start needs room in the minute's tokens and requests as well as a
concurrency token, and HIGH keeps its priority under the token budget."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from inferq.dispatcher.backend import Completion
from inferq.dispatcher.bootstrap import rate_ledger
from inferq.dispatcher.rate_ledger import LocalRateLedger
from inferq.dispatcher.settings import DispatcherSettings
from inferq.dispatcher.shared_rate.budget import SharedRateBudget
from inferq.dispatcher.tokens.settings import RedisBudgetSettings
from inferq.messaging.kafka_config import KafkaSettings
from tests.support.clock import ManualClock
from tests.support.dispatcher_fakes import encoded, rig, running
from tests.support.kafka import a_request
from tests.support.waiting import eventually

HOUR_MS = 3_600_000


def request(tier: str, clock: ManualClock, tokens: int, label: str) -> Any:
    return a_request(
        tier,
        created_at_ms=clock(),
        expire_at_ms=clock() + HOUR_MS,
        model="m",
        estimated_tokens=tokens,
        messages=[{"role": "user", "content": label}],
    )


def labels(calls: list[tuple[list[dict[str, str]], dict[str, Any]]]) -> list[str]:
    return [messages[-1]["content"] for messages, _ in calls]


async def starts_under_a_token_limit() -> list[str]:
    clock = ManualClock()
    r = rig(clock_ms=clock, rate_limits={"m": {"tpm": 1000}}, budget=10)
    async with running(r):
        r.backend.hold()
        first = request("HIGH", clock, 1000, "fill")
        r.consumer.produce(r.partition("HIGH"), encoded(first))
        await eventually(lambda: r.backend.in_flight == 1, "the first call running")
        # The minute's tokens are spent: LOW arrives first, then HIGH; nothing starts.
        for n in range(3):
            r.consumer.produce(r.partition("LOW"), encoded(request("LOW", clock, 300, f"low-{n}")))
        for n in range(3):
            r.consumer.produce(r.partition("HIGH"), encoded(request("HIGH", clock, 300, f"high-{n}")))
        await asyncio.sleep(0.3)  # a start past the limit would have happened by now
        assert labels(r.backend.calls) == ["fill"]
        clock.advance(61_000)
        await eventually(lambda: len(r.backend.calls) == 4, "three more calls")
        await asyncio.sleep(0.3)
        after_one_minute = labels(r.backend.calls)
        r.backend.release()
        return after_one_minute


def test_high_takes_the_next_minutes_tokens_before_low_and_no_minute_goes_over() -> None:
    after_one_minute = asyncio.run(starts_under_a_token_limit())
    # 1000 tokens a minute at 300 each: three calls, all HIGH though LOW waited longer.
    assert after_one_minute[0] == "fill"
    assert sorted(after_one_minute[1:]) == ["high-0", "high-1", "high-2"]


async def starts_after_learning_from_headers() -> int:
    clock = ManualClock()
    r = rig(clock_ms=clock, budget=10)
    backend = r.backend
    answer = backend.complete

    async def with_headers(model: str, messages: Any, params: Any, *, timeout_s: float) -> Completion:
        completion = await answer(model, messages, params, timeout_s=timeout_s)
        headers = {"x-ratelimit-limit-requests": "2", "x-ratelimit-remaining-requests": "1"}
        return replace(completion, rate_headers=headers)

    backend.complete = with_headers  # type: ignore[method-assign]
    async with running(r):
        r.consumer.produce(r.partition("HIGH"), encoded(request("HIGH", clock, 10, "first")))
        await eventually(lambda: len(backend.calls) == 1, "the first call")
        for n in range(4):
            r.consumer.produce(r.partition("HIGH"), encoded(request("HIGH", clock, 10, f"next-{n}")))
        await eventually(lambda: len(backend.calls) >= 2, "a second call")
        await asyncio.sleep(0.3)  # a third start in the minute would have happened by now
        calls_in_minute = len(backend.calls)
        clock.advance(61_000)
        await eventually(lambda: len(backend.calls) >= 3, "a call in the next minute")
        return calls_in_minute


def test_a_requests_limit_learned_from_the_headers_holds_the_minute() -> None:
    assert asyncio.run(starts_after_learning_from_headers()) == 2


async def starts_without_limits() -> int:
    clock = ManualClock()
    r = rig(clock_ms=clock, budget=10)
    async with running(r):
        r.backend.hold()
        for n in range(8):
            r.consumer.produce(r.partition("HIGH"), encoded(request("HIGH", clock, 100_000, f"h-{n}")))
        await eventually(lambda: r.backend.in_flight >= 5, "calls running")
        await asyncio.sleep(0.2)
        running_now = r.backend.in_flight
        r.backend.release()
        return running_now


def test_without_limits_or_headers_only_the_concurrency_budget_holds() -> None:
    # The normal window lets HIGH run up to its ceiling however many tokens the calls cost.
    assert asyncio.run(starts_without_limits()) >= 5


def test_the_coordination_setting_chooses_whose_minute_a_start_counts_in() -> None:
    kafka = KafkaSettings(topic_prefix="unit")
    limits = {"rate_limits": {"m": {"tpm": 1000}}, "kafka": kafka, "dispatcher_id": "unit"}
    local, running_beside = rate_ledger(DispatcherSettings(**limits), lambda: 1, ManualClock())
    assert isinstance(local, LocalRateLedger) and running_beside == ()
    assert local.status() == {"shared": False}
    redis = RedisBudgetSettings(url="redis://user:pw-in-url@127.0.0.1:1/0")
    shared, running_beside = rate_ledger(
        DispatcherSettings(coordination="redis", redis=redis, **limits), lambda: 1, ManualClock()
    )
    # Started and stopped with the token pool; nothing connects before then.
    assert isinstance(shared, SharedRateBudget) and running_beside == (shared,)
    assert shared.status() == {"shared": True, "degraded": False, "check_ms_median": None}
    assert "pw-in-url" not in repr(shared)
